//! Malformed input: seeded mutation fuzzing (no decoder may panic) and specific
//! error cases (the message must name the file).

mod common;

use std::io::{Read, Write};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use common::{data_dir, encode_compressed_ply, random_splats};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rust3r_io::{
    IoError, SaveOptions, SplatFormat, Splats, SpzVersion, ValidationError, decode_splats,
    encode_splats, load_splats, save_splats,
};

// ---------------------------------------------------------------------------
// Fuzzing

/// Values that tend to hit boundary conditions when written over a u32 field.
const INTERESTING: [u32; 10] = [0, 1, 2, 3, 4, 255, 256, 0x7fff_ffff, 0x8000_0000, u32::MAX];

/// A generic byte-level mutation of `base`.
fn mutate_bytes(rng: &mut StdRng, base: &[u8]) -> Vec<u8> {
    let mut b = base.to_vec();
    let len = b.len();
    match rng.random_range(0..6) {
        0 => b.truncate(rng.random_range(0..=len)),
        1 if len > 0 => {
            for _ in 0..rng.random_range(1..=8) {
                let i = rng.random_range(0..len);
                b[i] = rng.random();
            }
        }
        2 if len > 0 => {
            // Concentrate on the header region.
            for _ in 0..rng.random_range(1..=3) {
                let i = rng.random_range(0..len.min(64));
                b[i] = rng.random();
            }
        }
        3 => {
            let at = rng.random_range(0..=len);
            let extra: Vec<u8> = (0..rng.random_range(1..16)).map(|_| rng.random()).collect();
            b.splice(at..at, extra);
        }
        4 if len > 0 => {
            let start = rng.random_range(0..len);
            let end = rng.random_range(start..=len.min(start + 64));
            b.drain(start..end);
        }
        _ if len >= 4 => {
            let at = rng.random_range(0..len.min(128) - 3);
            let v = INTERESTING[rng.random_range(0..INTERESTING.len())];
            b[at..at + 4].copy_from_slice(&v.to_le_bytes());
        }
        _ => b.push(rng.random()),
    }
    b
}

/// Edits one line of a PLY header (counts, types, names).
fn mutate_ply_header(rng: &mut StdRng, base: &[u8]) -> Vec<u8> {
    let Some(end) = base.windows(11).position(|w| w == b"end_header\n") else {
        return mutate_bytes(rng, base);
    };
    let header = std::str::from_utf8(&base[..end]).unwrap();
    let mut lines: Vec<String> = header.lines().map(String::from).collect();
    let i = rng.random_range(0..lines.len());
    let replacements = [
        "element vertex 4294967295",
        "element vertex 18446744073709551615",
        "element vertex 99999999999999999999999",
        "element vertex -1",
        "element vertex 0",
        "element chunk 1",
        "element sh 3",
        "property float",
        "property double x",
        "property uchar opacity",
        "property list uchar float rot_0",
        "property list float float nx",
        "property int packed_position",
        "property float f_rest_0",
        "property float f_rest_99",
        "format ascii 1.0",
        "format binary_big_endian 1.0",
        "format binary_little_endian 1.0",
        "comment \u{00e9}\u{00e9}",
        "",
        "element",
    ];
    match rng.random_range(0..3) {
        0 => lines[i] = replacements[rng.random_range(0..replacements.len())].to_string(),
        1 => {
            lines.remove(i);
        }
        _ => {
            let j = rng.random_range(0..lines.len());
            lines.swap(i, j);
        }
    }
    let mut out = lines.join("\n").into_bytes();
    out.push(b'\n');
    out.extend_from_slice(&base[end..]);
    out
}

fn gunzip(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(bytes)
        .read_to_end(&mut out)
        .unwrap();
    out
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

/// Mutates the decompressed payload of a gzip SPZ file and recompresses it, so
/// the header and attribute decoding (not just gzip) see corrupt data.
fn mutate_gzip_payload(rng: &mut StdRng, base: &[u8]) -> Vec<u8> {
    gzip(&mutate_bytes(rng, &gunzip(base)))
}

/// Writes interesting values over the SPZ v4 header and table of contents.
fn mutate_v4_fields(rng: &mut StdRng, base: &[u8]) -> Vec<u8> {
    let mut b = base.to_vec();
    let v = INTERESTING[rng.random_range(0..INTERESTING.len())];
    match rng.random_range(0..4) {
        0 => b[8..12].copy_from_slice(&v.to_le_bytes()), // point count
        1 => b[rng.random_range(12..16)] = v as u8,      // degree, bits, flags, streams
        2 => b[16..20].copy_from_slice(&v.to_le_bytes()), // TOC offset
        _ => {
            // A TOC size (compressed or uncompressed, low or high half).
            let at = 32 + 4 * rng.random_range(0..(b.len().min(128) - 32) / 4);
            b[at..at + 4].copy_from_slice(&v.to_le_bytes());
        }
    }
    b
}

type Mutator = fn(&mut StdRng, &[u8]) -> Vec<u8>;

/// Decodes `iterations` mutants of `base`; every result must be `Ok` (and valid)
/// or an `Err` naming the file — never a panic.
fn fuzz(
    name: &str,
    format: SplatFormat,
    base: &[u8],
    mutators: &[Mutator],
    iterations: usize,
    seed: u64,
) {
    let path = Path::new(name);
    let mut rng = StdRng::seed_from_u64(seed);
    let (mut ok, mut err) = (0, 0);
    for iteration in 0..iterations {
        let mutator = mutators[rng.random_range(0..mutators.len())];
        let mut bytes = mutator(&mut rng, base);
        // Sometimes stack a second mutation.
        if rng.random_bool(0.25) {
            bytes = mutate_bytes(&mut rng, &bytes);
        }
        let result = catch_unwind(AssertUnwindSafe(|| decode_splats(&bytes, format, path)));
        match result {
            Err(_) => panic!(
                "{name}: decoder panicked on iteration {iteration} (seed {seed}, {} bytes)",
                bytes.len()
            ),
            Ok(Ok(splats)) => {
                splats.validate().unwrap_or_else(|e| {
                    panic!("{name}: iteration {iteration} decoded invalid data: {e}")
                });
                ok += 1;
            }
            Ok(Err(e)) => {
                let text = e.to_string();
                assert!(
                    text.starts_with(&format!("{name}: ")),
                    "error does not name the file: {text}"
                );
                assert_eq!(e.path(), path);
                err += 1;
            }
        }
    }
    eprintln!("{name}: {iterations} mutants, {ok} decoded, {err} rejected");
}

fn encoded(format: SplatFormat, version: SpzVersion, n: usize, degree: u32, seed: u64) -> Vec<u8> {
    let s = random_splats(&mut StdRng::seed_from_u64(seed), n, degree);
    encode_splats(
        &s,
        format,
        &SaveOptions::default().with_spz_version(version),
        Path::new("seed"),
    )
    .unwrap()
}

#[test]
fn fuzz_ply() {
    let binary = encoded(SplatFormat::Ply, SpzVersion::V3, 12, 2, 1);
    fuzz(
        "fuzz.ply",
        SplatFormat::Ply,
        &binary,
        &[mutate_bytes, mutate_ply_header],
        3000,
        10,
    );
    // The same data as ASCII.
    let text = String::from_utf8_lossy(
        &binary[..binary
            .windows(11)
            .position(|w| w == b"end_header\n")
            .unwrap()
            + 11],
    )
    .replace("binary_little_endian", "ascii");
    let mut ascii = text.into_bytes();
    for row in binary[binary.len() - 12 * 41 * 4..].chunks_exact(41 * 4) {
        for v in row.chunks_exact(4) {
            ascii.extend_from_slice(
                format!("{} ", f32::from_le_bytes(v.try_into().unwrap())).as_bytes(),
            );
        }
        ascii.push(b'\n');
    }
    assert_eq!(
        decode_splats(&ascii, SplatFormat::Ply, Path::new("a.ply"))
            .unwrap()
            .len(),
        12
    );
    fuzz(
        "fuzz_ascii.ply",
        SplatFormat::Ply,
        &ascii,
        &[mutate_bytes, mutate_ply_header],
        3000,
        11,
    );
}

#[test]
fn fuzz_compressed_ply() {
    let s = random_splats(&mut StdRng::seed_from_u64(2), 300, 1);
    let base = encode_compressed_ply(&s, true);
    fuzz(
        "fuzz.compressed.ply",
        SplatFormat::Ply,
        &base,
        &[mutate_bytes, mutate_ply_header],
        3000,
        20,
    );
    let base = encode_compressed_ply(&s, false);
    fuzz(
        "fuzz2.compressed.ply",
        SplatFormat::CompressedPly,
        &base,
        &[mutate_bytes, mutate_ply_header],
        1000,
        21,
    );
}

#[test]
fn fuzz_splat() {
    let base = encoded(SplatFormat::Splat, SpzVersion::V3, 20, 0, 3);
    fuzz(
        "fuzz.splat",
        SplatFormat::Splat,
        &base,
        &[mutate_bytes],
        3000,
        30,
    );
}

#[test]
fn fuzz_spz() {
    for (version, seed) in [(SpzVersion::V2, 40), (SpzVersion::V3, 41)] {
        let base = encoded(SplatFormat::Spz, version, 20, 1, seed);
        fuzz(
            &format!("fuzz_{version:?}.spz"),
            SplatFormat::Spz,
            &base,
            &[mutate_bytes, mutate_gzip_payload],
            3000,
            seed,
        );
    }
    for (degree, seed) in [(0, 42), (3, 43)] {
        let base = encoded(SplatFormat::Spz, SpzVersion::V4, 20, degree, seed);
        fuzz(
            &format!("fuzz_v4_{degree}.spz"),
            SplatFormat::Spz,
            &base,
            &[mutate_bytes, mutate_v4_fields],
            3000,
            seed,
        );
    }
}

/// Truncations and bit flips of the real sample files.
#[test]
fn fuzz_real_files_lightly() {
    for (name, format) in [
        ("biker.spz", SplatFormat::Spz),
        ("biker.compressed.ply", SplatFormat::Ply),
        ("plant.splat", SplatFormat::Splat),
    ] {
        let base = std::fs::read(data_dir().join(name)).unwrap();
        let truncate: Mutator = |rng, b| b[..rng.random_range(0..b.len())].to_vec();
        let flip_header: Mutator = |rng, b| {
            let mut b = b.to_vec();
            let i = rng.random_range(0..1200.min(b.len()));
            b[i] ^= 1 << rng.random_range(0..8);
            b
        };
        fuzz(name, format, &base, &[truncate, flip_header], 60, 50);
    }
}

// ---------------------------------------------------------------------------
// Specific cases

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

/// Loads `path`, expecting an error whose text is `"{path}: {expected...}"`.
fn expect_error(path: &Path, expected: &str) -> IoError {
    let err = load_splats(path).expect_err("must fail");
    let text = err.to_string();
    let prefix = format!("{}: ", path.display());
    assert!(
        text.starts_with(&prefix),
        "{text:?} does not start with {prefix:?}"
    );
    assert!(
        text.contains(expected),
        "{text:?} does not contain {expected:?}"
    );
    err
}

#[test]
fn missing_file() {
    let err = expect_error(Path::new("/nonexistent/dir/missing.ply"), "No such file");
    assert!(matches!(err, IoError::Io { .. }));
}

#[test]
fn ply_count_larger_than_file() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = encoded(SplatFormat::Ply, SpzVersion::V3, 12, 0, 5);
    let header_end = bytes
        .windows(11)
        .position(|w| w == b"end_header\n")
        .unwrap();
    let header = std::str::from_utf8(&bytes[..header_end]).unwrap();
    assert!(header.contains("element vertex 12\n"));
    let with_count = |count: &str| {
        let header = header.replacen(
            "element vertex 12\n",
            &format!("element vertex {count}\n"),
            1,
        );
        [header.as_bytes(), &bytes[header_end..]].concat()
    };
    let path = write(dir.path(), "biker.ply", &with_count("1000"));
    let err = expect_error(
        &path,
        "element 'vertex' has count 1000 but the file ends after 12 of them",
    );
    assert!(matches!(err, IoError::Malformed { .. }));

    // Huge counts are rejected before anything is allocated.
    let huge = with_count("18446744073709551615");
    expect_error(
        &write(dir.path(), "huge.ply", &huge),
        "has count 18446744073709551615",
    );
}

#[test]
fn ply_header_problems() {
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&str, &[u8], &str); 7] = [
        ("nomagic.ply", b"plx\nformat ascii 1.0\nend_header\n", "not a PLY file"),
        ("format.ply", b"ply\nformat binary_middle_endian 1.0\nend_header\n", "unknown format"),
        ("noend.ply", b"ply\nformat ascii 1.0\nelement vertex 1\n", "no 'end_header'"),
        ("type.ply", b"ply\nformat ascii 1.0\nelement vertex 1\nproperty float128 x\nend_header\n", "unknown property type 'float128'"),
        ("novertex.ply", b"ply\nformat ascii 1.0\nelement face 0\nproperty float x\nend_header\n", "no 'vertex' element"),
        (
            "noopacity.ply",
            b"ply\nformat ascii 1.0\nelement vertex 1\nproperty float x\nproperty float y\nproperty float z\n\
              property float f_dc_0\nproperty float f_dc_1\nproperty float f_dc_2\nproperty float scale_0\n\
              property float scale_1\nproperty float scale_2\nproperty float rot_0\nproperty float rot_1\n\
              property float rot_2\nproperty float rot_3\nend_header\n0 0 0 0 0 0 0 0 0 1 0 0 0\n",
            "element 'vertex' has no property 'opacity'",
        ),
        (
            "badnumber.ply",
            b"ply\nformat ascii 1.0\nelement vertex 1\nproperty float x\nproperty float y\nproperty float z\n\
              property float f_dc_0\nproperty float f_dc_1\nproperty float f_dc_2\nproperty float scale_0\n\
              property float scale_1\nproperty float scale_2\nproperty float rot_0\nproperty float rot_1\n\
              property float rot_2\nproperty float rot_3\nproperty float opacity\nend_header\n\
              0 0 0 0 0 0 0 0 0 1 0 0 0 foo\n",
            "element 'vertex' row 0: invalid number 'foo' for property 'opacity'",
        ),
    ];
    for (name, bytes, expected) in cases {
        expect_error(&write(dir.path(), name, bytes), expected);
    }
}

#[test]
fn ply_non_finite_values_are_rejected() {
    let mut s = random_splats(&mut StdRng::seed_from_u64(6), 3, 0);
    let bytes = encode_splats(
        &s,
        SplatFormat::Ply,
        &SaveOptions::default(),
        Path::new("x"),
    )
    .unwrap();
    // Overwrite the opacity of splat 1 (property 9 of 17) with NaN.
    let body = bytes.len() - 3 * 17 * 4;
    let mut bad = bytes.clone();
    let at = body + (17 + 9) * 4;
    bad[at..at + 4].copy_from_slice(&f32::NAN.to_le_bytes());
    let dir = tempfile::tempdir().unwrap();
    let err = expect_error(
        &write(dir.path(), "nan.ply", &bad),
        "`opacity_logits` of splat 1 is not finite",
    );
    assert!(matches!(
        err,
        IoError::Invalid {
            error: ValidationError::NonFinite { index: 1, .. },
            ..
        }
    ));

    // Writers refuse invalid data and leave nothing behind.
    s.means[2][0] = f32::INFINITY;
    let path = dir.path().join("out.spz");
    let err = save_splats(&path, &s).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "{}: invalid splat data: `means` of splat 2 is not finite",
            path.display()
        )
    );
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        1,
        "only nan.ply exists"
    );
}

#[test]
fn splat_size_not_multiple_of_record() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "odd.splat", &[0u8; 70]);
    expect_error(
        &path,
        "file size 70 is not a multiple of the 32-byte .splat record",
    );
    let mut record = [0u8; 32];
    record[12..16].copy_from_slice(&(-1.0f32).to_le_bytes());
    expect_error(
        &write(dir.path(), "neg.splat", &record),
        "splat 0: scale -1 is not a finite non-negative number",
    );
}

#[test]
fn spz_problems() {
    let dir = tempfile::tempdir().unwrap();
    expect_error(
        &write(dir.path(), "magic.spz", b"XXXXwhatever at all"),
        "not an SPZ file",
    );
    expect_error(
        &write(dir.path(), "short.spz", b"NGSP\x04\0\0\0"),
        "shorter than the 32-byte SPZ header",
    );

    let v4 = encoded(SplatFormat::Spz, SpzVersion::V4, 10, 1, 7);
    let with = |offset: usize, value: &[u8]| {
        let mut b = v4.clone();
        b[offset..offset + value.len()].copy_from_slice(value);
        b
    };
    expect_error(
        &write(dir.path(), "count.spz", &with(8, &u32::MAX.to_le_bytes())),
        "implausibly many",
    );
    expect_error(
        &write(dir.path(), "count2.spz", &with(8, &11u32.to_le_bytes())),
        "stream 'positions' is 90 bytes, expected 99",
    );
    expect_error(
        &write(dir.path(), "magic2.spz", &with(0, b"NGSQ")),
        "not an SPZ file",
    );
    let err = expect_error(
        &write(dir.path(), "version.spz", &with(4, &7u32.to_le_bytes())),
        "unsupported: SPZ version 7",
    );
    assert!(matches!(err, IoError::Unsupported { .. }));
    expect_error(
        &write(dir.path(), "degree.spz", &with(12, &[4])),
        "unsupported: SH degree 4",
    );
    expect_error(
        &write(dir.path(), "streams.spz", &with(15, &[5])),
        "declares 5 streams, expected 6",
    );
    expect_error(
        &write(dir.path(), "toc.spz", &with(16, &[8, 0, 0, 0])),
        "invalid SPZ table of contents offset 8",
    );
    expect_error(
        &write(dir.path(), "trunc.spz", &v4[..v4.len() - 1]),
        "claims",
    );
    expect_error(
        &write(dir.path(), "trailing.spz", &[&v4[..], &[0]].concat()),
        "1 unexpected bytes after the last SPZ stream",
    );

    // Legacy (gzip) containers.
    let v3 = gunzip(&encoded(SplatFormat::Spz, SpzVersion::V3, 10, 0, 8));
    let legacy = |offset: usize, value: &[u8]| {
        let mut b = v3.clone();
        b[offset..offset + value.len()].copy_from_slice(value);
        gzip(&b)
    };
    expect_error(
        &write(dir.path(), "big.spz", &legacy(8, &u32::MAX.to_le_bytes())),
        "more than",
    );
    expect_error(
        &write(dir.path(), "long.spz", &legacy(8, &11u32.to_le_bytes())),
        "SPZ data ends after 200 of 220 bytes (11 points declared)",
    );
    expect_error(
        &write(dir.path(), "bits.spz", &legacy(13, &[24])),
        "invalid fractional bits 24",
    );
    expect_error(
        &write(dir.path(), "v4gz.spz", &legacy(4, &4u32.to_le_bytes())),
        "must not be gzip-compressed",
    );
    let mut corrupt = gzip(&v3);
    let mid = corrupt.len() / 2;
    corrupt.truncate(mid);
    expect_error(&write(dir.path(), "corrupt.spz", &corrupt), "");
}

#[test]
fn unknown_and_read_only_formats() {
    let dir = tempfile::tempdir().unwrap();
    let s = random_splats(&mut StdRng::seed_from_u64(9), 2, 0);
    let err = expect_error(
        &write(dir.path(), "scene.txt", b"hello"),
        "unknown splat file type",
    );
    assert!(matches!(err, IoError::Unsupported { .. }));
    // Unknown extension but recognisable content.
    let ply = encoded(SplatFormat::Ply, SpzVersion::V3, 2, 0, 9);
    assert_eq!(
        load_splats(&write(dir.path(), "scene.bin", &ply))
            .unwrap()
            .len(),
        2
    );

    for name in ["out.txt", "out.compressed.ply"] {
        let path = dir.path().join(name);
        let err = save_splats(&path, &s).unwrap_err();
        assert!(matches!(err, IoError::Unsupported { .. }), "{err}");
        assert!(
            err.to_string()
                .starts_with(&format!("{}: unsupported: ", path.display())),
            "{err}"
        );
        assert!(!path.exists());
    }
    let missing_dir = dir.path().join("no/such/dir/out.ply");
    let err = save_splats(&missing_dir, &s).unwrap_err();
    assert!(
        matches!(err, IoError::Io { .. })
            && err
                .to_string()
                .starts_with(&missing_dir.display().to_string())
    );
}

#[test]
fn validate_reports_inconsistencies() {
    let mut s = Splats::new(1);
    assert_eq!(s.validate(), Ok(()));
    assert_eq!(s.bounding_box(), None);
    s.means.push([1.0, 2.0, 3.0]);
    assert_eq!(
        s.validate(),
        Err(ValidationError::Length {
            field: "log_scales",
            expected: 1,
            actual: 0
        })
    );
    s.log_scales.push([0.0; 3]);
    s.rotations.push([1.0, 0.0, 0.0, 0.0]);
    s.opacity_logits.push(0.0);
    s.sh = vec![0.0; 11];
    assert_eq!(
        s.validate(),
        Err(ValidationError::Length {
            field: "sh",
            expected: 12,
            actual: 11
        })
    );
    s.sh.push(0.0);
    assert_eq!(s.validate(), Ok(()));
    s.sh_degree = 4;
    assert_eq!(s.validate(), Err(ValidationError::ShDegree(4)));
    s.sh_degree = 1;
    s.means.push([-1.0, 5.0, 0.0]);
    s.log_scales.push([0.0; 3]);
    s.rotations.push([1.0, 0.0, 0.0, 0.0]);
    s.opacity_logits.push(0.0);
    s.sh.extend([0.0; 12]);
    assert_eq!(s.bounding_box(), Some(([-1.0, 2.0, 0.0], [1.0, 5.0, 3.0])));
    assert_eq!((s.len(), s.num_coeffs(), s.is_empty()), (2, 4, false));
}
