//! Niantic SPZ (`.spz`), versions 1 to 4 read, 2 to 4 written.
//!
//! Versions 1-3 are a gzip stream holding a 16-byte header followed by the
//! attribute arrays. Version 4 has a plaintext 32-byte header, an optional
//! extension zone, a table of contents of `(compressed, uncompressed)` u64 sizes
//! and one zstd frame per non-empty attribute array.
//!
//! Header (little endian): magic `0x5053474e` ("NGSP"), u32 version, u32 number of
//! points, u8 SH degree, u8 fractional bits, u8 flags (1 = antialiased,
//! 2 = extensions), then u8 reserved (v1-3) or u8 stream count, u32 TOC offset
//! and 12 reserved bytes (v4).
//!
//! Attribute arrays, in this order:
//! * positions: 3 x 24-bit signed fixed point with `fractional bits` (v1: 3 x f16);
//! * alphas: u8, `sigmoid(opacity) * 255`;
//! * colours: 3 x u8, `f_dc * 0.15 * 255 + 127.5`;
//! * scales: 3 x u8, `(log_scale + 10) * 16`;
//! * rotations: v1-2: 3 x u8 `(x, y, z) * 127.5 + 127.5` of the normalised
//!   quaternion with `w >= 0`; v3+: u32 "smallest three" (2-bit index of the
//!   largest component of `(x, y, z, w)`, then three sign + 9-bit magnitude values
//!   scaled by `1/sqrt 2`, first component in the highest bits);
//! * SH: `(num_coeffs - 1) * 3` u8 per splat, layout `[coeff][rgb]`, `x * 128 + 128`.
//!
//! SPZ stores data in the RUB frame (x right, y up, z back) while the 3DGS PLY
//! and [`Splats`] use RDF; the codec flips y and z (and the matching quaternion
//! and SH components) in both directions.
//!
//! Extension records and the antialiasing flag are ignored when reading.

use std::io::{Read, Write};

use crate::error::{Problem, Result, malformed, unsupported};
use crate::splats::{
    MAX_SH_DEGREE, SH_FLIP_YZ, Splats, logit_clamped, normalized_quat, num_coeffs_for_degree,
    sigmoid, to_u8,
};

/// The SPZ container version written by [`save_splats_with`](crate::save_splats_with).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SpzVersion {
    /// Gzip container, 3-byte `(x, y, z)` rotations.
    V2,
    /// Gzip container, 4-byte "smallest three" rotations. Readable by every SPZ loader
    /// that supports version 3 or later, hence the default.
    #[default]
    V3,
    /// Zstd multi-stream container (current Niantic reference version).
    V4,
}

impl SpzVersion {
    fn number(self) -> u32 {
        match self {
            Self::V2 => 2,
            Self::V3 => 3,
            Self::V4 => 4,
        }
    }
}

const MAGIC: u32 = 0x5053_474e;
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];
const LEGACY_HEADER_SIZE: usize = 16;
const V4_HEADER_SIZE: usize = 32;
const TOC_ENTRY_SIZE: usize = 16;
/// Scale of the DC colour component in SPZ (instead of SH_C0, to leave headroom).
const COLOR_SCALE: f32 = 0.15;
const MAX_FRACTIONAL_BITS: u8 = 23;
const DEFAULT_FRACTIONAL_BITS: u8 = 12;
/// Deflate cannot expand data by more than this factor, so a gzip container of
/// `n` bytes cannot hold more than `n * 1032` bytes of splat data.
const GZIP_MAX_RATIO: u64 = 1032;
/// Upper bound on the zstd ratio of the position stream, as used by the reference
/// loader to reject headers claiming implausibly many points.
const ZSTD_MAX_RATIO: u64 = 1024;
const ZSTD_LEVEL: i32 = 12;
/// Names of the attribute streams, in file order.
const STREAM_NAMES: [&str; 6] = ["positions", "alphas", "colors", "scales", "rotations", "sh"];

/// The fields of the SPZ header that matter for decoding.
#[derive(Debug, Clone, Copy)]
struct Header {
    version: u32,
    num_points: usize,
    sh_degree: u32,
    fractional_bits: u8,
}

impl Header {
    /// Parses the fields shared by all versions from the first 16 bytes.
    fn parse(b: &[u8; LEGACY_HEADER_SIZE]) -> Result<Self> {
        let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        if u32_at(0) != MAGIC {
            return malformed!(
                "bad SPZ magic {:#010x} (expected {MAGIC:#010x}, \"NGSP\")",
                u32_at(0)
            );
        }
        let header = Self {
            version: u32_at(4),
            num_points: u32_at(8) as usize,
            sh_degree: u32::from(b[12]),
            fractional_bits: b[13],
        };
        if header.version == 0 || header.version > 4 {
            return unsupported!("SPZ version {}", header.version);
        }
        if header.sh_degree > MAX_SH_DEGREE {
            return match header.sh_degree {
                4 => unsupported!("SH degree 4"),
                d => malformed!("invalid SH degree {d} in SPZ header"),
            };
        }
        if header.fractional_bits > MAX_FRACTIONAL_BITS {
            return malformed!(
                "invalid fractional bits {} in SPZ header (maximum 23)",
                header.fractional_bits
            );
        }
        Ok(header)
    }

    /// Uncompressed size of each attribute array, in file order.
    fn stream_sizes(&self) -> Result<[usize; 6]> {
        let per_point = [
            if self.version == 1 { 6 } else { 9 },
            1,
            3,
            3,
            if self.version >= 3 { 4 } else { 3 },
            (num_coeffs_for_degree(self.sh_degree) - 1) * 3,
        ];
        let mut sizes = [0; 6];
        for (size, per) in sizes.iter_mut().zip(per_point) {
            *size = match self.num_points.checked_mul(per) {
                Some(s) => s,
                None => {
                    return malformed!("SPZ header declares too many points ({})", self.num_points);
                }
            };
        }
        Ok(sizes)
    }
}

/// The attribute arrays of an SPZ file, before dequantisation.
struct Packed {
    header: Header,
    /// Positions, alphas, colours, scales, rotations, SH.
    streams: [Vec<u8>; 6],
}

pub(crate) fn decode(bytes: &[u8]) -> Result<Splats> {
    let packed = if bytes.starts_with(&GZIP_MAGIC) {
        read_legacy(bytes)?
    } else if bytes.starts_with(&MAGIC.to_le_bytes()) {
        read_v4(bytes)?
    } else {
        return malformed!("not an SPZ file (neither gzip data nor the \"NGSP\" magic)");
    };
    unpack(&packed)
}

/// Reads a version 1-3 (gzip) container.
fn read_legacy(bytes: &[u8]) -> Result<Packed> {
    let mut decoder = flate2::read::GzDecoder::new(bytes);
    let mut raw_header = [0u8; LEGACY_HEADER_SIZE];
    if let Err(e) = decoder.read_exact(&mut raw_header) {
        return malformed!("cannot decompress the SPZ header: {e}");
    }
    let header = Header::parse(&raw_header)?;
    if header.version >= 4 {
        return malformed!(
            "SPZ version {} data must not be gzip-compressed",
            header.version
        );
    }
    let sizes = header.stream_sizes()?;
    let payload: usize = sizes.iter().sum();
    if payload as u64 > (bytes.len() as u64).saturating_mul(GZIP_MAX_RATIO) {
        return malformed!(
            "SPZ header declares {} points ({payload} bytes), more than {} compressed bytes can hold",
            header.num_points,
            bytes.len()
        );
    }
    // The vectors only grow as data actually decompresses. Anything after the
    // attributes (extension records) is ignored.
    let mut streams: [Vec<u8>; 6] = Default::default();
    let mut read = 0;
    for (stream, size) in streams.iter_mut().zip(sizes) {
        if let Err(e) = (&mut decoder).take(size as u64).read_to_end(stream) {
            return malformed!("corrupt gzip data: {e}");
        }
        read += stream.len();
        if stream.len() < size {
            return malformed!(
                "SPZ data ends after {read} of {payload} bytes ({} points declared)",
                header.num_points
            );
        }
    }
    Ok(Packed { header, streams })
}

/// Reads a version 4 (zstd, multi-stream) container.
fn read_v4(bytes: &[u8]) -> Result<Packed> {
    let (Some(prefix), Some(raw)) = (
        bytes.first_chunk::<LEGACY_HEADER_SIZE>(),
        bytes.first_chunk::<V4_HEADER_SIZE>(),
    ) else {
        return malformed!(
            "file is {} bytes, shorter than the 32-byte SPZ header",
            bytes.len()
        );
    };
    let header = Header::parse(prefix)?;
    if header.version < 4 {
        return malformed!(
            "SPZ version {} data must be gzip-compressed",
            header.version
        );
    }
    let num_streams = usize::from(raw[15]);
    let toc_offset = u32::from_le_bytes([raw[16], raw[17], raw[18], raw[19]]) as usize;

    let max_points = (bytes.len() as u64).saturating_mul(ZSTD_MAX_RATIO) / 9;
    if header.num_points as u64 > max_points {
        return malformed!(
            "SPZ header declares {} points, implausibly many for a {}-byte file",
            header.num_points,
            bytes.len()
        );
    }
    let sizes = header.stream_sizes()?;
    // Empty streams (no SH, or no points) are omitted.
    let present: Vec<usize> = (0..6).filter(|&k| sizes[k] > 0).collect();
    if num_streams != present.len() {
        return malformed!(
            "SPZ header declares {num_streams} streams, expected {}",
            present.len()
        );
    }
    let toc_end = toc_offset.saturating_add(num_streams * TOC_ENTRY_SIZE);
    if toc_offset < V4_HEADER_SIZE || toc_end > bytes.len() {
        return malformed!(
            "invalid SPZ table of contents offset {toc_offset} (file is {} bytes)",
            bytes.len()
        );
    }

    let mut streams: [Vec<u8>; 6] = Default::default();
    let mut offset = toc_end;
    for (entry, &k) in bytes[toc_offset..toc_end]
        .chunks_exact(TOC_ENTRY_SIZE)
        .zip(&present)
    {
        let u64_at = |o: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&entry[o..o + 8]);
            u64::from_le_bytes(b)
        };
        let (compressed, uncompressed) = (u64_at(0), u64_at(8));
        let name = STREAM_NAMES[k];
        if uncompressed != sizes[k] as u64 {
            return malformed!(
                "SPZ stream '{name}' is {uncompressed} bytes, expected {}",
                sizes[k]
            );
        }
        let remaining = (bytes.len() - offset) as u64;
        if compressed > remaining {
            return malformed!(
                "SPZ stream '{name}' claims {compressed} compressed bytes but only {remaining} remain in the file"
            );
        }
        let frame = &bytes[offset..offset + compressed as usize];
        offset += compressed as usize;
        streams[k] = zstd_decompress(frame, sizes[k]).map_err(|e| {
            Problem::Malformed(format!("cannot decompress SPZ stream '{name}': {e}"))
        })?;
    }
    if offset != bytes.len() {
        return malformed!(
            "{} unexpected bytes after the last SPZ stream",
            bytes.len() - offset
        );
    }
    Ok(Packed { header, streams })
}

/// Decompresses a zstd frame that must produce exactly `size` bytes.
fn zstd_decompress(frame: &[u8], size: usize) -> std::result::Result<Vec<u8>, String> {
    let decoder = zstd::stream::read::Decoder::with_buffer(frame).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    decoder
        .take(size as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| e.to_string())?;
    if out.len() != size {
        return Err(format!(
            "decompressed to {} bytes, expected {size}",
            out.len()
        ));
    }
    Ok(out)
}

/// Dequantises the attribute arrays and converts RUB to RDF.
fn unpack(packed: &Packed) -> Result<Splats> {
    let Header {
        version,
        num_points: n,
        sh_degree,
        fractional_bits,
    } = packed.header;
    let [positions, alphas, colors, scales, rotations, sh] = &packed.streams;
    let mut splats = Splats::with_capacity(sh_degree, n);

    let fixed_scale = 1.0 / (1u32 << fractional_bits) as f32;
    if version == 1 {
        for p in positions.chunks_exact(6) {
            let h = |o: usize| half::f16::from_le_bytes([p[o], p[o + 1]]).to_f32();
            splats.means.push(flip_yz([h(0), h(2), h(4)]));
        }
    } else {
        for p in positions.chunks_exact(9) {
            let fixed = |o: usize| {
                let sign = if p[o + 2] & 0x80 != 0 { 0xff } else { 0 };
                i32::from_le_bytes([p[o], p[o + 1], p[o + 2], sign]) as f32 * fixed_scale
            };
            splats.means.push(flip_yz([fixed(0), fixed(3), fixed(6)]));
        }
    }
    splats
        .opacity_logits
        .extend(alphas.iter().map(|&a| logit_clamped(f32::from(a) / 255.0)));
    splats.log_scales.extend(
        scales
            .chunks_exact(3)
            .map(|s| [0, 1, 2].map(|k| f32::from(s[k]) / 16.0 - 10.0)),
    );
    if version >= 3 {
        splats.rotations.extend(rotations.chunks_exact(4).map(|r| {
            rub_xyzw_to_rdf_wxyz(unpack_smallest_three(u32::from_le_bytes([
                r[0], r[1], r[2], r[3],
            ])))
        }));
    } else {
        splats.rotations.extend(rotations.chunks_exact(3).map(|r| {
            let [x, y, z] = [0, 1, 2].map(|k| f32::from(r[k]) / 127.5 - 1.0);
            let w = (1.0 - (x * x + y * y + z * z)).max(0.0).sqrt();
            rub_xyzw_to_rdf_wxyz([x, y, z, w])
        }));
    }

    let rest_len = (num_coeffs_for_degree(sh_degree) - 1) * 3;
    for (i, c) in colors.chunks_exact(3).enumerate() {
        splats
            .sh
            .extend((0..3).map(|k| (f32::from(c[k]) / 255.0 - 0.5) / COLOR_SCALE));
        // The stream sizes were checked against the header; a short slice would
        // be caught by `validate` below.
        let values = sh.get(i * rest_len..(i + 1) * rest_len).unwrap_or_default();
        for (j, rgb) in values.chunks_exact(3).enumerate() {
            splats.sh.extend(
                rgb.iter()
                    .map(|&b| (f32::from(b) - 128.0) / 128.0 * SH_FLIP_YZ[j]),
            );
        }
    }
    splats.validate()?;
    Ok(splats)
}

/// `(x, y, z) -> (x, -y, -z)`: converts positions between RUB and RDF (both ways).
fn flip_yz([x, y, z]: [f32; 3]) -> [f32; 3] {
    [x, -y, -z]
}

/// SPZ quaternion `(x, y, z, w)` in RUB to a [`Splats`] quaternion `(w, x, y, z)` in RDF.
fn rub_xyzw_to_rdf_wxyz([x, y, z, w]: [f32; 4]) -> [f32; 4] {
    [w, x, -y, -z]
}

/// Inverse of [`rub_xyzw_to_rdf_wxyz`].
fn rdf_wxyz_to_rub_xyzw([w, x, y, z]: [f32; 4]) -> [f32; 4] {
    [x, -y, -z, w]
}

const SQRT1_2: f32 = std::f32::consts::FRAC_1_SQRT_2;
const ROTATION_MASK: u32 = (1 << 9) - 1;

/// Decodes a "smallest three" quaternion into `(x, y, z, w)`.
fn unpack_smallest_three(mut bits: u32) -> [f32; 4] {
    let largest = (bits >> 30) as usize;
    let mut q = [0.0f32; 4];
    let mut sum_squares = 0.0;
    for i in (0..4).rev().filter(|&i| i != largest) {
        let magnitude = SQRT1_2 * (bits & ROTATION_MASK) as f32 / ROTATION_MASK as f32;
        q[i] = if bits & (1 << 9) != 0 {
            -magnitude
        } else {
            magnitude
        };
        sum_squares += q[i] * q[i];
        bits >>= 10;
    }
    q[largest] = (1.0 - sum_squares).max(0.0).sqrt();
    q
}

/// Encodes a normalised quaternion `(x, y, z, w)` as "smallest three".
fn pack_smallest_three(q: [f32; 4]) -> u32 {
    let largest = (0..4).fold(
        0,
        |best, i| if q[i].abs() > q[best].abs() { i } else { best },
    );
    let negate = q[largest] < 0.0;
    let mut bits = largest as u32;
    for i in (0..4).filter(|&i| i != largest) {
        let sign = u32::from((q[i] < 0.0) != negate);
        let magnitude =
            ((ROTATION_MASK as f32 * q[i].abs() / SQRT1_2 + 0.5) as u32).min(ROTATION_MASK);
        bits = (bits << 10) | (sign << 9) | magnitude;
    }
    bits
}

/// Quantises `splats` (converting RDF to RUB) into SPZ attribute arrays.
fn pack(splats: &Splats, version: SpzVersion) -> Result<Packed> {
    splats.validate()?;
    let n = splats.len();
    if u32::try_from(n).is_err() {
        return unsupported!("{n} splats do not fit the 32-bit SPZ point count");
    }
    let version = version.number();

    // 24-bit fixed point: use 12 fractional bits unless the scene is too large.
    const FIXED_MAX: f32 = ((1 << 23) - 1) as f32;
    let max_abs = splats
        .means
        .iter()
        .flatten()
        .fold(0.0f32, |m, v| m.max(v.abs()));
    let Some(fractional_bits) = (0..=DEFAULT_FRACTIONAL_BITS)
        .rev()
        .find(|&bits| (max_abs * (1u32 << bits) as f32).round() <= FIXED_MAX)
    else {
        return unsupported!(
            "coordinate {max_abs} exceeds the SPZ 24-bit fixed-point range (|x| < 2^23)"
        );
    };
    let header = Header {
        version,
        num_points: n,
        sh_degree: splats.sh_degree,
        fractional_bits,
    };
    let sizes = header.stream_sizes()?;
    let mut streams: [Vec<u8>; 6] = sizes.map(Vec::with_capacity);
    let [positions, alphas, colors, scales, rotations, sh] = &mut streams;

    let fixed_scale = (1u32 << fractional_bits) as f32;
    for &mean in &splats.means {
        for v in flip_yz(mean) {
            let fixed = (v * fixed_scale).round() as i32;
            positions.extend_from_slice(&fixed.to_le_bytes()[..3]);
        }
    }
    alphas.extend(
        splats
            .opacity_logits
            .iter()
            .map(|&o| to_u8(sigmoid(o) * 255.0)),
    );
    for ls in &splats.log_scales {
        scales.extend(ls.map(|s| to_u8((s + 10.0) * 16.0)));
    }
    for &q in &splats.rotations {
        let q = rdf_wxyz_to_rub_xyzw(normalized_quat(q));
        if version >= 3 {
            rotations.extend_from_slice(&pack_smallest_three(q).to_le_bytes());
        } else {
            let sign = if q[3] < 0.0 { -1.0 } else { 1.0 };
            rotations.extend(q[..3].iter().map(|c| to_u8(c * sign * 127.5 + 127.5)));
        }
    }
    let stride = splats.num_coeffs() * 3;
    for coeffs in splats.sh.chunks_exact(stride) {
        colors.extend(
            coeffs[..3]
                .iter()
                .map(|c| to_u8(c * COLOR_SCALE * 255.0 + 127.5)),
        );
        for (j, rgb) in coeffs[3..].chunks_exact(3).enumerate() {
            sh.extend(rgb.iter().map(|c| to_u8(c * SH_FLIP_YZ[j] * 128.0 + 128.0)));
        }
    }
    Ok(Packed { header, streams })
}

/// The 16 bytes shared by all header versions (the last one is the v4 stream count).
fn header_prefix(header: &Header, last: u8) -> [u8; LEGACY_HEADER_SIZE] {
    let mut b = [0u8; LEGACY_HEADER_SIZE];
    b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
    b[4..8].copy_from_slice(&header.version.to_le_bytes());
    // `pack` checked that the count fits in 32 bits.
    b[8..12].copy_from_slice(&(header.num_points as u32).to_le_bytes());
    b[12] = header.sh_degree as u8;
    b[13] = header.fractional_bits;
    b[14] = 0; // flags: not antialiased, no extensions
    b[15] = last;
    b
}

pub(crate) fn encode(splats: &Splats, version: SpzVersion) -> Result<Vec<u8>> {
    let packed = pack(splats, version)?;
    let failed = |e: std::io::Error| Problem::Malformed(format!("compression failed: {e}"));
    if packed.header.version < 4 {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        encoder
            .write_all(&header_prefix(&packed.header, 0))
            .map_err(failed)?;
        for stream in &packed.streams {
            encoder.write_all(stream).map_err(failed)?;
        }
        return encoder.finish().map_err(failed);
    }

    let frames = packed
        .streams
        .iter()
        .filter(|s| !s.is_empty())
        .map(|s| {
            Ok((
                s.len(),
                zstd::bulk::compress(s, ZSTD_LEVEL).map_err(failed)?,
            ))
        })
        .collect::<Result<Vec<_>>>()?;
    let mut out = Vec::with_capacity(
        V4_HEADER_SIZE
            + frames.len() * TOC_ENTRY_SIZE
            + frames.iter().map(|f| f.1.len()).sum::<usize>(),
    );
    // `frames.len() <= 6`.
    out.extend_from_slice(&header_prefix(&packed.header, frames.len() as u8));
    out.extend_from_slice(&(V4_HEADER_SIZE as u32).to_le_bytes()); // TOC right after the header
    out.extend_from_slice(&[0; 12]); // reserved
    for (size, frame) in &frames {
        out.extend_from_slice(&(frame.len() as u64).to_le_bytes());
        out.extend_from_slice(&(*size as u64).to_le_bytes());
    }
    for (_, frame) in &frames {
        out.extend_from_slice(frame);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smallest_three_round_trip() {
        let qs = [
            [0.0, 0.0, 0.0, 1.0],
            [0.5, -0.5, 0.5, -0.5],
            [0.1, 0.7, -0.1, 0.7],
            [-0.9, 0.1, 0.3, 0.3],
        ];
        for q in qs {
            let norm = q.iter().map(|c: &f32| c * c).sum::<f32>().sqrt();
            let q = q.map(|c| c / norm);
            let r = unpack_smallest_three(pack_smallest_three(q));
            let dot: f32 = q.iter().zip(&r).map(|(a, b)| a * b).sum();
            assert!(dot.abs() > 0.9999, "{q:?} -> {r:?}");
        }
    }

    #[test]
    fn flips_are_involutions() {
        let q = [0.1, 0.2, 0.3, 0.4];
        assert_eq!(rub_xyzw_to_rdf_wxyz(rdf_wxyz_to_rub_xyzw(q)), q);
        assert_eq!(flip_yz(flip_yz([1.0, 2.0, 3.0])), [1.0, 2.0, 3.0]);
    }
}
