//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::PathBuf;

use rand::Rng;
use rust3r_io::{SH_C0, Splats, num_coeffs_for_degree, sigmoid};

/// The shared real splats (`data/splats`, see `rust3r_testdata`).
pub fn data_dir() -> PathBuf {
    rust3r_testdata::data("splats")
}

/// Random splats whose values stay inside the ranges every format can represent.
pub fn random_splats(rng: &mut impl Rng, n: usize, sh_degree: u32) -> Splats {
    let mut s = Splats::with_capacity(sh_degree, n);
    let coeffs = num_coeffs_for_degree(sh_degree);
    for _ in 0..n {
        s.means.push([0; 3].map(|_| rng.random_range(-5.0..5.0)));
        s.log_scales
            .push([0; 3].map(|_| rng.random_range(-8.0..1.0)));
        s.rotations
            .push([0; 4].map(|_| rng.random_range(-1.0..1.0)));
        s.opacity_logits.push(rng.random_range(-5.0..5.0));
        for _ in 0..3 {
            s.sh.push(rng.random_range(-1.5..1.5));
        }
        for _ in 3..coeffs * 3 {
            s.sh.push(rng.random_range(-0.9..0.9));
        }
    }
    s.validate().expect("random splats are valid");
    s
}

/// Largest per-attribute differences between two splat sets with the same order.
#[derive(Debug, Default, Clone, Copy)]
pub struct Diffs {
    /// max |Δ mean| (per coordinate)
    pub mean: f32,
    /// max |Δ log scale|, i.e. the relative error of the activated scale
    pub log_scale: f32,
    /// max (1 - |<q_a, q_b>|) of the normalised quaternions (sign-insensitive)
    pub rotation: f32,
    /// max |Δ sigmoid(opacity)|
    pub opacity: f32,
    /// max |Δ base colour| in RGB units (`SH_C0 * Δ f_dc`)
    pub color: f32,
    /// max |Δ f_rest|
    pub sh_rest: f32,
}

fn normalize(q: [f32; 4]) -> [f32; 4] {
    let n = q.iter().map(|c| c * c).sum::<f32>().sqrt();
    q.map(|c| c / n)
}

/// Compares splat `ia` of `a` with splat `ib` of `b`, folding into `d`.
pub fn accumulate(d: &mut Diffs, a: &Splats, ia: usize, b: &Splats, ib: usize) {
    for k in 0..3 {
        d.mean = d.mean.max((a.means[ia][k] - b.means[ib][k]).abs());
        d.log_scale = d
            .log_scale
            .max((a.log_scales[ia][k] - b.log_scales[ib][k]).abs());
    }
    let (qa, qb) = (normalize(a.rotations[ia]), normalize(b.rotations[ib]));
    let dot: f32 = qa.iter().zip(&qb).map(|(x, y)| x * y).sum();
    d.rotation = d.rotation.max(1.0 - dot.abs());
    d.opacity = d
        .opacity
        .max((sigmoid(a.opacity_logits[ia]) - sigmoid(b.opacity_logits[ib])).abs());
    let (sa, sb) = (a.sh_of(ia), b.sh_of(ib));
    for k in 0..3 {
        d.color = d.color.max(SH_C0 * (sa[k] - sb[k]).abs());
    }
    for k in 3..sa.len().min(sb.len()) {
        d.sh_rest = d.sh_rest.max((sa[k] - sb[k]).abs());
    }
}

/// Differences between two splat sets with the same order and SH degree.
pub fn diffs(a: &Splats, b: &Splats) -> Diffs {
    assert_eq!(a.len(), b.len(), "splat counts differ");
    assert_eq!(a.sh_degree, b.sh_degree, "SH degrees differ");
    let mut d = Diffs::default();
    for i in 0..a.len() {
        accumulate(&mut d, a, i, b, i);
    }
    d
}

/// Asserts that every difference is within the corresponding tolerance.
pub fn assert_within(what: &str, d: &Diffs, tol: &Diffs) {
    let checks = [
        ("mean", d.mean, tol.mean),
        ("log_scale", d.log_scale, tol.log_scale),
        ("rotation", d.rotation, tol.rotation),
        ("opacity", d.opacity, tol.opacity),
        ("color", d.color, tol.color),
        ("sh_rest", d.sh_rest, tol.sh_rest),
    ];
    for (name, value, limit) in checks {
        assert!(
            value <= limit,
            "{what}: {name} differs by {value}, tolerance {limit}\n{d:#?}"
        );
    }
}

/// Minimal PlayCanvas compressed-PLY encoder (test only), so SH and per-chunk
/// colour bounds can be exercised; `with_color_bounds` selects the 18-property chunk layout.
pub fn encode_compressed_ply(s: &Splats, with_color_bounds: bool) -> Vec<u8> {
    const CHUNK: usize = 256;
    let n = s.len();
    let chunks = n.div_ceil(CHUNK);
    let rest = (s.num_coeffs() - 1) * 3;
    let mut header = format!(
        "ply\nformat binary_little_endian 1.0\ncomment test encoder\nelement chunk {chunks}\n"
    );
    let mut chunk_props = vec![
        "min_x",
        "min_y",
        "min_z",
        "max_x",
        "max_y",
        "max_z",
        "min_scale_x",
        "min_scale_y",
        "min_scale_z",
        "max_scale_x",
        "max_scale_y",
        "max_scale_z",
    ];
    if with_color_bounds {
        chunk_props.extend(["min_r", "min_g", "min_b", "max_r", "max_g", "max_b"]);
    }
    for p in &chunk_props {
        header += &format!("property float {p}\n");
    }
    header += &format!("element vertex {n}\n");
    for p in [
        "packed_position",
        "packed_rotation",
        "packed_scale",
        "packed_color",
    ] {
        header += &format!("property uint {p}\n");
    }
    if rest > 0 {
        header += &format!("element sh {n}\n");
        for k in 0..rest {
            header += &format!("property uchar f_rest_{k}\n");
        }
    }
    header += "end_header\n";
    let mut out = header.into_bytes();

    let rgb = |i: usize, c: usize| 0.5 + SH_C0 * s.sh_of(i)[c];
    let mut bounds = Vec::new();
    for c in 0..chunks {
        let range = c * CHUNK..((c + 1) * CHUNK).min(n);
        let mut b = [
            [f32::INFINITY; 3],
            [f32::NEG_INFINITY; 3],
            [f32::INFINITY; 3],
            [f32::NEG_INFINITY; 3],
            [f32::INFINITY; 3],
            [f32::NEG_INFINITY; 3],
        ];
        for i in range {
            let values = [s.means[i], s.log_scales[i], [0, 1, 2].map(|k| rgb(i, k))];
            for (v, bound) in values.iter().zip(b.chunks_exact_mut(2)) {
                for k in 0..3 {
                    bound[0][k] = bound[0][k].min(v[k]);
                    bound[1][k] = bound[1][k].max(v[k]);
                }
            }
        }
        if !with_color_bounds {
            b[4] = [0.0; 3];
            b[5] = [1.0; 3];
        }
        let count = if with_color_bounds { 6 } else { 4 };
        for v in b.iter().take(count).flatten() {
            out.extend_from_slice(&v.to_le_bytes());
        }
        bounds.push(b);
    }
    let quant = |v: f32, lo: f32, hi: f32, bits: u32| -> u32 {
        let max = ((1u32 << bits) - 1) as f32;
        let t = if hi > lo {
            ((v - lo) / (hi - lo)).clamp(0.0, 1.0)
        } else {
            0.0
        };
        (t * max).round() as u32
    };
    let pack_111011 = |v: [f32; 3], lo: [f32; 3], hi: [f32; 3]| {
        (quant(v[0], lo[0], hi[0], 11) << 21)
            | (quant(v[1], lo[1], hi[1], 10) << 11)
            | quant(v[2], lo[2], hi[2], 11)
    };
    for i in 0..n {
        let b = &bounds[i / CHUNK];
        let q = normalize(s.rotations[i]);
        let largest = (0..4).fold(0, |m, k| if q[k].abs() > q[m].abs() { k } else { m });
        let sign = if q[largest] < 0.0 { -1.0 } else { 1.0 };
        let mut rot = largest as u32;
        for k in (0..4).filter(|&k| k != largest) {
            let v = q[k] * sign * std::f32::consts::FRAC_1_SQRT_2 + 0.5;
            rot = (rot << 10) | ((v * 1023.0).round().clamp(0.0, 1023.0) as u32);
        }
        let color = (quant(rgb(i, 0), b[4][0], b[5][0], 8) << 24)
            | (quant(rgb(i, 1), b[4][1], b[5][1], 8) << 16)
            | (quant(rgb(i, 2), b[4][2], b[5][2], 8) << 8)
            | quant(sigmoid(s.opacity_logits[i]), 0.0, 1.0, 8);
        for word in [
            pack_111011(s.means[i], b[0], b[1]),
            rot,
            pack_111011(s.log_scales[i], b[2], b[3]),
            color,
        ] {
            out.extend_from_slice(&word.to_le_bytes());
        }
    }
    if rest > 0 {
        let per_channel = rest / 3;
        for i in 0..n {
            let sh = s.sh_of(i);
            for c in 0..3 {
                for j in 1..=per_channel {
                    let v = sh[j * 3 + c] / 8.0 + 0.5;
                    out.push((v * 256.0).floor().clamp(0.0, 255.0) as u8);
                }
            }
        }
    }
    out
}
