//! Decoding the sample scenes in `/work/shared/data/splats`.

mod common;

use common::{Diffs, accumulate, assert_within, data_dir, diffs};
use rust3r_io::{
    SH_C0, SaveOptions, SplatFormat, Splats, SpzVersion, decode_splats, encode_splats, load_splats,
    sigmoid,
};

fn load(name: &str) -> Splats {
    load_splats(&data_dir().join(name)).unwrap_or_else(|e| panic!("{e}"))
}

fn reference() -> Splats {
    let r = load("biker_from_spz.3dgs.ply");
    assert_eq!((r.len(), r.sh_degree), (152_746, 0));
    r
}

/// `biker_from_spz.3dgs.ply` was converted from `biker.spz` by a reference
/// decoder, so our SPZ reader must reproduce it up to float rounding. The only
/// exception is fully opaque splats (alpha byte 255): the reference clamps the
/// opacity to `1 - 1e-6` before the logit, this crate to `1 - 0.25 / 255`.
#[test]
fn biker_spz_matches_reference_ply() {
    let reference = reference();
    let spz = load("biker.spz");
    let d = diffs(&reference, &spz);
    eprintln!("biker.spz vs reference: {d:?}");
    let tol = Diffs {
        mean: 1e-6,
        log_scale: 1e-6,
        rotation: 1e-6,
        opacity: 1.0 / 255.0,
        color: 1e-6,
        sh_rest: 0.0,
    };
    assert_within("biker.spz", &d, &tol);
    let mut saturated = 0;
    for (i, (&a, &b)) in reference
        .opacity_logits
        .iter()
        .zip(&spz.opacity_logits)
        .enumerate()
    {
        let (a, b) = (sigmoid(a), sigmoid(b));
        if !(0.5 / 255.0..=254.5 / 255.0).contains(&a) {
            saturated += 1;
        } else {
            assert!((a - b).abs() <= 1e-6, "splat {i}: opacity {a} vs {b}");
        }
    }
    eprintln!("{saturated} splats with saturated alpha");
}

/// Re-encoding the decoded scene reproduces the same quantised values.
#[test]
fn biker_spz_reencodes_stably() {
    let spz = load("biker.spz");
    for version in [SpzVersion::V3, SpzVersion::V4] {
        let options = SaveOptions::default().with_spz_version(version);
        let bytes = encode_splats(&spz, SplatFormat::Spz, &options, "biker.spz".as_ref()).unwrap();
        let again = decode_splats(&bytes, SplatFormat::Spz, "biker.spz".as_ref()).unwrap();
        let d = diffs(&spz, &again);
        let tol = Diffs {
            rotation: 1e-6,
            ..Diffs::default()
        };
        assert_within(&format!("biker re-encoded as {version:?}"), &d, &tol);
    }
}

/// `biker.compressed.ply` is an independent (PlayCanvas) quantisation of the same
/// scene, in the same splat order, made from the original data rather than from
/// the SPZ file. Each attribute must therefore agree with the reference within
/// half an SPZ quantisation step plus half a compressed-PLY step (which depends on
/// the 256-splat chunk's range), except where SPZ saturated (log scales clamped to
/// `[-10, 5.9375]`).
#[test]
fn biker_compressed_ply_matches_reference_ply() {
    let reference = reference();
    let compressed = load("biker.compressed.ply");
    assert_eq!(
        (compressed.len(), compressed.sh_degree),
        (reference.len(), 0)
    );

    // SPZ half steps.
    const SPZ_POSITION: f32 = 0.5 / 4096.0;
    const SPZ_LOG_SCALE: f32 = 0.5 / 16.0;
    const SPZ_RGB: f32 = 0.5 / 255.0 * SH_C0 / 0.15;
    let (spz_min_scale, spz_max_scale) = (-10.0, 255.0 / 16.0 - 10.0);

    let mut worst = [0.0f32; 4]; // error / tolerance: means, log scales, colours, rotations
    let mut overall = Diffs::default();
    let mut saturated_scales = 0;
    for start in (0..reference.len()).step_by(256) {
        let range = start..(start + 256).min(reference.len());
        // Chunk ranges, recomputed from the reference values (widened by the SPZ error).
        let extent = |f: &dyn Fn(usize) -> [f32; 3], spz_step: f32| -> [f32; 3] {
            let mut lo = [f32::INFINITY; 3];
            let mut hi = [f32::NEG_INFINITY; 3];
            for i in range.clone() {
                for k in 0..3 {
                    lo[k] = lo[k].min(f(i)[k]);
                    hi[k] = hi[k].max(f(i)[k]);
                }
            }
            [0, 1, 2].map(|k| hi[k] - lo[k] + 2.0 * spz_step)
        };
        let pos_extent = extent(&|i| reference.means[i], SPZ_POSITION);
        let scale_extent = extent(&|i| reference.log_scales[i], SPZ_LOG_SCALE);
        let rgb =
            |s: &Splats, i: usize| -> [f32; 3] { [0, 1, 2].map(|k| 0.5 + SH_C0 * s.sh_of(i)[k]) };
        let color_extent = extent(&|i| rgb(&reference, i), SPZ_RGB);
        let levels = [2047.0, 1023.0, 2047.0];
        let tol = |spz_half: f32, extent: f32, levels: f32| spz_half + 0.5 * extent / levels + 1e-6;
        for i in range.clone() {
            let mut d = Diffs::default();
            accumulate(&mut d, &reference, i, &compressed, i);
            accumulate(&mut overall, &reference, i, &compressed, i);
            for k in 0..3 {
                let e = (reference.means[i][k] - compressed.means[i][k]).abs();
                worst[0] = worst[0].max(e / tol(SPZ_POSITION, pos_extent[k], levels[k]));

                let (r, c) = (reference.log_scales[i][k], compressed.log_scales[i][k]);
                let t = tol(SPZ_LOG_SCALE, scale_extent[k], levels[k]);
                let e = if r <= spz_min_scale {
                    saturated_scales += 1;
                    (c - r).max(0.0)
                } else if r >= spz_max_scale {
                    saturated_scales += 1;
                    (r - c).max(0.0)
                } else {
                    (r - c).abs()
                };
                worst[1] = worst[1].max(e / t);

                let e = (rgb(&reference, i)[k] - rgb(&compressed, i)[k]).abs();
                worst[2] = worst[2].max(e / tol(SPZ_RGB, color_extent[k], 255.0));
            }
            worst[3] = worst[3].max(d.rotation / 1e-4);
            assert!(
                d.opacity <= 1.0 / 255.0 + 1e-6,
                "splat {i}: opacity differs by {}",
                d.opacity
            );
        }
    }
    eprintln!(
        "biker.compressed.ply vs reference: {overall:?}; {saturated_scales} SPZ-saturated log scales; \
         worst error / tolerance {worst:?}"
    );
    for (name, w) in ["means", "log scales", "colours", "rotations"]
        .iter()
        .zip(worst)
    {
        assert!(
            w <= 1.0,
            "{name}: error exceeds the quantisation tolerance by a factor {w}"
        );
    }
}

fn assert_sane(name: &str, s: &Splats, expected_len: usize) {
    assert_eq!(s.len(), expected_len, "{name}");
    s.validate().unwrap();
    let (lo, hi) = s.bounding_box().unwrap();
    eprintln!(
        "{name}: {} splats, degree {}, bounds {lo:?} .. {hi:?}",
        s.len(),
        s.sh_degree
    );
    for k in 0..3 {
        assert!(
            hi[k] - lo[k] > 1e-3 && hi[k] - lo[k] < 1e4,
            "{name}: implausible extent {lo:?} .. {hi:?}"
        );
    }
    let scales_ok = s
        .log_scales
        .iter()
        .flatten()
        .all(|&l| (-30.0..10.0).contains(&l));
    assert!(scales_ok, "{name}: implausible scales");
    let mean_opacity = s.opacity_logits.iter().map(|&o| sigmoid(o)).sum::<f32>() / s.len() as f32;
    assert!(
        (0.05..=1.0).contains(&mean_opacity),
        "{name}: mean opacity {mean_opacity}"
    );
    let unit = s.rotations.iter().all(|q| {
        let n = q.iter().map(|c| c * c).sum::<f32>().sqrt();
        n > 0.5 && n < 1.5
    });
    assert!(unit, "{name}: quaternions far from unit length");
    let rgb_ok = s.sh.chunks_exact(s.num_coeffs() * 3).all(|c| {
        c[..3]
            .iter()
            .all(|&dc| (-1.0..=2.0).contains(&(0.5 + SH_C0 * dc)))
    });
    assert!(rgb_ok, "{name}: base colours out of range");
}

#[test]
fn antimatter_splat_files_load() {
    for (name, bytes) in [
        ("plant.splat", 3_636_736),
        ("academic_tarot_cards.splat", 3_675_680),
    ] {
        let s = load(name);
        assert_eq!(s.sh_degree, 0);
        assert_sane(name, &s, bytes / 32);
    }
}

#[test]
fn guitar_compressed_ply_loads() {
    assert_sane(
        "guitar.compressed.ply",
        &load("guitar.compressed.ply"),
        90_854,
    );
}

#[test]
fn biker_loads_sanely_in_every_format() {
    for name in [
        "biker.spz",
        "biker.compressed.ply",
        "biker_from_spz.3dgs.ply",
    ] {
        assert_sane(name, &load(name), 152_746);
    }
}
