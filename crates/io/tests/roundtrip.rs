//! Write -> read round trips on random data, and PLY layout variants.

mod common;

use std::path::Path;

use common::{Diffs, assert_within, diffs, encode_compressed_ply, random_splats};
use rand::SeedableRng;
use rand::rngs::StdRng;
use rust3r_io::{
    SaveOptions, SplatFormat, Splats, SpzVersion, decode_splats, encode_splats, load_splats,
    save_splats, save_splats_with,
};

fn encode(s: &Splats, format: SplatFormat, version: SpzVersion) -> Vec<u8> {
    encode_splats(
        s,
        format,
        &SaveOptions::default().with_spz_version(version),
        Path::new("mem"),
    )
    .expect("encode")
}

fn decode(bytes: &[u8], format: SplatFormat) -> Splats {
    decode_splats(bytes, format, Path::new("mem")).expect("decode")
}

#[test]
fn ply_round_trip_is_exact() {
    let mut rng = StdRng::seed_from_u64(1);
    for degree in 0..=3 {
        for n in [0, 1, 257] {
            let s = random_splats(&mut rng, n, degree);
            let back = decode(
                &encode(&s, SplatFormat::Ply, SpzVersion::V3),
                SplatFormat::Ply,
            );
            assert_eq!(back, s, "degree {degree}, n {n}");
        }
    }
}

#[test]
fn ply_file_round_trip_and_atomic_replace() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("scene.ply");
    let mut rng = StdRng::seed_from_u64(2);
    let first = random_splats(&mut rng, 10, 1);
    save_splats(&path, &first).unwrap();
    let second = random_splats(&mut rng, 20, 3);
    save_splats(&path, &second).unwrap();
    assert_eq!(load_splats(&path).unwrap(), second);
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["scene.ply"], "no temporary files are left behind");
}

#[test]
fn splat_round_trip_within_quantisation() {
    let mut rng = StdRng::seed_from_u64(3);
    let s = random_splats(&mut rng, 500, 0);
    let bytes = encode(&s, SplatFormat::Splat, SpzVersion::V3);
    assert_eq!(bytes.len(), 500 * 32);
    let back = decode(&bytes, SplatFormat::Splat);
    let tol = Diffs {
        mean: 0.0,
        log_scale: 1e-5,
        rotation: 1e-4,
        opacity: 0.5 / 255.0 + 1e-6,
        color: 0.5 / 255.0 + 1e-6,
        sh_rest: 0.0,
    };
    assert_within(".splat", &diffs(&s, &back), &tol);

    // Higher SH degrees are dropped.
    let s3 = random_splats(&mut rng, 5, 3);
    let back3 = decode(
        &encode(&s3, SplatFormat::Splat, SpzVersion::V3),
        SplatFormat::Splat,
    );
    assert_eq!(back3.sh_degree, 0);
    assert_eq!(back3.means, s3.means);

    // Decoding then re-encoding reproduces the colour and opacity bytes.
    let again = encode(&back, SplatFormat::Splat, SpzVersion::V3);
    for (a, b) in again.chunks_exact(32).zip(bytes.chunks_exact(32)) {
        assert!(
            a[24..28] == b[24..28],
            "{:?} vs {:?}",
            &a[24..28],
            &b[24..28]
        );
    }
}

#[test]
fn spz_round_trip_within_quantisation() {
    let mut rng = StdRng::seed_from_u64(4);
    for version in [SpzVersion::V2, SpzVersion::V3, SpzVersion::V4] {
        for degree in 0..=3 {
            let s = random_splats(&mut rng, 300, degree);
            let bytes = encode(&s, SplatFormat::Spz, version);
            let back = decode(&bytes, SplatFormat::Spz);
            let tol = Diffs {
                mean: 0.5 / 4096.0 + 1e-6,
                log_scale: 0.5 / 16.0 + 1e-5,
                rotation: if version == SpzVersion::V2 {
                    2e-2
                } else {
                    1e-5
                },
                opacity: 0.5 / 255.0 + 1e-6,
                color: rust3r_io::SH_C0 * 0.5 / 255.0 / 0.15 + 1e-6,
                sh_rest: 0.5 / 128.0 + 1e-6,
            };
            assert_within(
                &format!("SPZ {version:?} degree {degree}"),
                &diffs(&s, &back),
                &tol,
            );

            // Quantisation is idempotent: a decoded file re-encodes to the same values.
            let again = decode(&encode(&back, SplatFormat::Spz, version), SplatFormat::Spz);
            let d = diffs(&back, &again);
            assert!(
                d.mean == 0.0 && d.log_scale == 0.0 && d.color == 0.0 && d.sh_rest == 0.0,
                "{d:?}"
            );
        }
    }
}

#[test]
fn spz_versions_are_recognised() {
    let mut rng = StdRng::seed_from_u64(5);
    let s = random_splats(&mut rng, 3, 1);
    let v2 = encode(&s, SplatFormat::Spz, SpzVersion::V2);
    let v4 = encode(&s, SplatFormat::Spz, SpzVersion::V4);
    assert_eq!(&v2[..2], &[0x1f, 0x8b], "v2 is gzip");
    assert_eq!(
        &v4[..8],
        b"NGSP\x04\0\0\0",
        "v4 starts with the plaintext header"
    );
    assert_eq!(v4[15], 6, "six streams with SH");
    assert_eq!(SplatFormat::detect(&v2), Some(SplatFormat::Spz));
    assert_eq!(SplatFormat::detect(&v4), Some(SplatFormat::Spz));
}

#[test]
fn spz_large_coordinates_reduce_fractional_bits() {
    let mut s = random_splats(&mut StdRng::seed_from_u64(6), 4, 0);
    s.means[0] = [5000.0, -3000.0, 0.125];
    let back = decode(
        &encode(&s, SplatFormat::Spz, SpzVersion::V4),
        SplatFormat::Spz,
    );
    for (a, b) in s.means.iter().zip(&back.means) {
        for k in 0..3 {
            assert!((a[k] - b[k]).abs() <= 0.5 / 512.0, "{a:?} vs {b:?}");
        }
    }
    s.means[0][0] = 1e7;
    let err = encode_splats(
        &s,
        SplatFormat::Spz,
        &SaveOptions::default(),
        Path::new("big.spz"),
    )
    .unwrap_err();
    assert!(
        err.to_string().starts_with("big.spz: unsupported:"),
        "{err}"
    );
}

#[test]
fn file_round_trip_for_every_writable_format() {
    let dir = tempfile::tempdir().unwrap();
    let s = random_splats(&mut StdRng::seed_from_u64(7), 64, 2);
    for (name, version) in [
        ("a.ply", SpzVersion::V3),
        ("a.splat", SpzVersion::V3),
        ("a.spz", SpzVersion::V4),
        ("b.spz", SpzVersion::V2),
    ] {
        let path = dir.path().join(name);
        save_splats_with(&path, &s, &SaveOptions::default().with_spz_version(version)).unwrap();
        let back = load_splats(&path).unwrap();
        assert_eq!(back.len(), s.len(), "{name}");
        assert_eq!(
            back.means[0].map(|v| (v * 100.0).round()),
            s.means[0].map(|v| (v * 100.0).round()),
            "{name}"
        );
    }
}

#[test]
fn compressed_ply_decodes_within_quantisation() {
    let mut rng = StdRng::seed_from_u64(8);
    for (degree, color_bounds) in [(0, true), (1, false), (2, true), (3, true)] {
        let s = random_splats(&mut rng, 700, degree);
        let bytes = encode_compressed_ply(&s, color_bounds);
        let back = decode(&bytes, SplatFormat::Ply);
        assert_eq!(back.sh_degree, degree);
        // Bounds: 10 units of position range over 10 bits, 9 units of log scale over 10 bits.
        let tol = Diffs {
            mean: 0.5 * 10.0 / 1023.0 + 1e-5,
            log_scale: 0.5 * 9.0 / 1023.0 + 1e-5,
            rotation: 1e-5,
            opacity: 0.5 / 255.0 + 1e-6,
            color: 0.5 / 255.0 + 1e-6,
            sh_rest: 8.0 / 256.0 * 0.5 + 1e-5,
        };
        assert_within(
            &format!("compressed degree {degree}"),
            &diffs(&s, &back),
            &tol,
        );
        assert_eq!(decode(&bytes, SplatFormat::CompressedPly), back);
    }
}

/// Builds a PLY with the given body encoding from `(type, name, values)` columns.
fn build_ply(format: &str, columns: &[(&str, &str, Vec<f64>)], extra_element: bool) -> Vec<u8> {
    let n = columns[0].2.len();
    let mut out = format!("ply\nformat {format} 1.0\ncomment made by a test\n");
    if extra_element {
        out += "element camera 2\nproperty list uchar int indices\nproperty double fov\n";
    }
    out += &format!("element vertex {n}\n");
    for (ty, name, _) in columns {
        out += &format!("property {ty} {name}\n");
    }
    out += "end_header\n";
    let mut out = out.into_bytes();
    let put = |out: &mut Vec<u8>, ty: &str, v: f64| {
        if format == "ascii" {
            out.extend_from_slice(format!("{v} ").as_bytes());
            return;
        }
        let le = format == "binary_little_endian";
        macro_rules! w {
            ($x:expr) => {{
                let x = $x;
                out.extend_from_slice(&if le { x.to_le_bytes() } else { x.to_be_bytes() })
            }};
        }
        match ty {
            "float" => w!(v as f32),
            "double" => w!(v),
            "uchar" => w!(v as u8),
            "short" => w!(v as i16),
            "uint" => w!(v as u32),
            "int" => w!(v as i32),
            _ => unreachable!(),
        }
    };
    if extra_element {
        for row in 0..2 {
            put(&mut out, "uchar", 3.0);
            for k in 0..3 {
                put(&mut out, "int", f64::from(row * 3 + k));
            }
            put(&mut out, "double", 0.5);
            if format == "ascii" {
                out.push(b'\n');
            }
        }
    }
    for i in 0..n {
        for (ty, _, values) in columns {
            put(&mut out, ty, values[i]);
        }
        if format == "ascii" {
            out.push(b'\n');
        }
    }
    out
}

#[test]
fn ply_reads_any_property_order_types_and_encodings() {
    let s = random_splats(&mut StdRng::seed_from_u64(9), 7, 1);
    let col = |f: &dyn Fn(usize) -> f32| (0..s.len()).map(|i| f64::from(f(i))).collect::<Vec<_>>();
    // f_rest is channel-major: f_rest_{c * 3 + j} = coefficient j + 1 of channel c.
    let mut columns: Vec<(&str, &str, Vec<f64>)> = vec![
        ("float", "rot_3", col(&|i| s.rotations[i][3])),
        ("double", "z", col(&|i| s.means[i][2])),
        ("uchar", "red", col(&|i| i as f32)),
        ("float", "opacity", col(&|i| s.opacity_logits[i])),
    ];
    let names: Vec<String> = (0..9).map(|k| format!("f_rest_{k}")).collect();
    for (k, name) in names.iter().enumerate().rev() {
        let (c, j) = (k / 3, k % 3 + 1);
        columns.push(("float", name, col(&|i| s.sh_of(i)[j * 3 + c])));
    }
    for (k, name) in ["f_dc_0", "f_dc_1", "f_dc_2"].iter().enumerate() {
        columns.push(("float", name, col(&|i| s.sh_of(i)[k])));
    }
    for (k, name) in ["scale_0", "scale_1", "scale_2"].iter().enumerate() {
        columns.push(("float", name, col(&|i| s.log_scales[i][k])));
    }
    for (k, name) in ["rot_0", "rot_1", "rot_2"].iter().enumerate() {
        columns.push(("float", name, col(&|i| s.rotations[i][k])));
    }
    columns.push(("double", "x", col(&|i| s.means[i][0])));
    columns.push(("short", "nx", col(&|_| 0.0)));
    columns.push(("float", "y", col(&|i| s.means[i][1])));

    for format in ["binary_little_endian", "binary_big_endian", "ascii"] {
        let bytes = build_ply(format, &columns, true);
        let back = decode(&bytes, SplatFormat::Ply);
        // Even in ASCII: the decimal text of an f32 widened to f64 parses back exactly.
        assert_eq!(back, s, "{format}");
    }
}

#[test]
fn ply_sh_layout_is_converted_from_channel_major() {
    // One splat with f_rest_k = k and f_dc_c = 100 + c, degree 1.
    let mut columns: Vec<(&str, &str, Vec<f64>)> = Vec::new();
    let names: Vec<String> = (0..9).map(|k| format!("f_rest_{k}")).collect();
    for name in [
        "x", "y", "z", "opacity", "scale_0", "scale_1", "scale_2", "rot_0", "rot_1", "rot_2",
        "rot_3",
    ] {
        columns.push(("float", name, vec![0.5]));
    }
    for (c, name) in ["f_dc_0", "f_dc_1", "f_dc_2"].iter().enumerate() {
        columns.push(("float", name, vec![100.0 + c as f64]));
    }
    for (k, name) in names.iter().enumerate() {
        columns.push(("float", name, vec![k as f64]));
    }
    let s = decode(
        &build_ply("binary_little_endian", &columns, false),
        SplatFormat::Ply,
    );
    assert_eq!(s.sh_degree, 1);
    // [coeff][rgb]: DC, then coefficient j of R, G, B = f_rest_{j}, f_rest_{3 + j}, f_rest_{6 + j}.
    assert_eq!(
        s.sh,
        [
            100.0, 101.0, 102.0, 0.0, 3.0, 6.0, 1.0, 4.0, 7.0, 2.0, 5.0, 8.0
        ]
    );
    // And written back channel-major.
    let bytes = encode(&s, SplatFormat::Ply, SpzVersion::V3);
    let text = String::from_utf8_lossy(&bytes[..bytes.len() - 4 * 26]);
    assert!(
        text.contains("property float f_rest_8\nproperty float opacity"),
        "{text}"
    );
    let body = &bytes[bytes.len() - 4 * 26..];
    let floats: Vec<f32> = body
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    assert_eq!(
        &floats[6..18],
        &[
            100.0, 101.0, 102.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0
        ]
    );
}
