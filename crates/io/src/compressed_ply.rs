//! PlayCanvas / SuperSplat "compressed PLY" (read only).
//!
//! Layout: an element `chunk` with per-chunk float bounds (`min_x .. max_z`,
//! `min_scale_x .. max_scale_z`, optionally `min_r .. max_b`), an element
//! `vertex` with four `uint` properties per splat, and optionally an element `sh`
//! with `uchar f_rest_*` properties. Splat `i` belongs to chunk `i / 256`.
//!
//! * `packed_position`, `packed_scale`: 11-10-11 bit unorm (x in the top bits),
//!   interpolated between the chunk's min and max (scales are log scales).
//! * `packed_rotation`: 2-bit index of the largest component of
//!   `(rot_0, rot_1, rot_2, rot_3)`, then the other three as 10-bit values in
//!   `[-1/sqrt 2, 1/sqrt 2]`.
//! * `packed_color`: 8-8-8-8 unorm RGBA (red in the top byte); RGB is the base
//!   colour `0.5 + SH_C0 * f_dc` (interpolated between the chunk colour bounds if
//!   present), A is the activated opacity.
//! * `sh`: `f_rest` (channel-major, as in the 3DGS PLY) quantised to 8 bits over `[-4, 4]`.
//!
//! Positions use the same frame as the 3DGS PLY.

use crate::error::{Result, malformed};
use crate::plyfile::{Body, Header, Scalar};
use crate::splats::{SH_C0, Splats, logit_clamped, num_coeffs_for_degree};

/// Splats per chunk.
pub(crate) const CHUNK_SIZE: usize = 256;

const CHUNK_PROPERTIES: [&str; 12] = [
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
const COLOR_PROPERTIES: [&str; 6] = ["min_r", "min_g", "min_b", "max_r", "max_g", "max_b"];
const PACKED_PROPERTIES: [&str; 4] = [
    "packed_position",
    "packed_rotation",
    "packed_scale",
    "packed_color",
];

/// Whether the header describes a compressed PLY (rather than a standard one).
pub(crate) fn is_compressed(header: &Header) -> bool {
    header.find("chunk").is_some()
        && header
            .find("vertex")
            .is_some_and(|v| header.elements[v].find("packed_position").is_some())
}

/// Per-chunk dequantisation bounds.
#[derive(Clone, Copy)]
struct Chunk {
    min_pos: [f32; 3],
    max_pos: [f32; 3],
    min_scale: [f32; 3],
    max_scale: [f32; 3],
    /// `(min, max)` of the base colour, `(0, 1)` when the file has no colour bounds.
    min_color: [f32; 3],
    max_color: [f32; 3],
}

pub(crate) fn decode_with_header(bytes: &[u8], header: &Header) -> Result<Splats> {
    let (Some(chunk_index), Some(vertex_index)) = (header.find("chunk"), header.find("vertex"))
    else {
        return malformed!("compressed PLY needs 'chunk' and 'vertex' elements");
    };
    let chunk_el = &header.elements[chunk_index];
    let vertex_el = &header.elements[vertex_index];
    let n = vertex_el.count;
    let expected_chunks = n.div_ceil(CHUNK_SIZE);
    if chunk_el.count != expected_chunks {
        return malformed!(
            "compressed PLY has {} chunks but {n} splats need {expected_chunks}",
            chunk_el.count
        );
    }
    let chunk_props = CHUNK_PROPERTIES.map(|p| chunk_el.require_scalar(p));
    let chunk_props = chunk_props.into_iter().collect::<Result<Vec<_>>>()?;
    let color_props = match chunk_el.find("min_r") {
        Some(_) => Some(
            COLOR_PROPERTIES
                .map(|p| chunk_el.require_scalar(p))
                .into_iter()
                .collect::<Result<Vec<_>>>()?,
        ),
        None => None,
    };
    let mut packed = [0usize; 4];
    for (slot, name) in packed.iter_mut().zip(PACKED_PROPERTIES) {
        *slot = vertex_el.require_scalar(name)?;
        let scalar = vertex_el.properties[*slot].scalar;
        if !matches!(scalar, Scalar::U32 | Scalar::I32) {
            return malformed!("property '{name}' must be a 32-bit integer, found {scalar:?}");
        }
    }

    // Optional SH element.
    let sh = match header.find("sh") {
        None => None,
        Some(sh_index) => {
            let sh_el = &header.elements[sh_index];
            if sh_el.count != n {
                return malformed!(
                    "element 'sh' has {} rows but there are {n} splats",
                    sh_el.count
                );
            }
            let count = sh_el.properties.len();
            let Some(degree) = (1..=3).find(|&d| 3 * (num_coeffs_for_degree(d) - 1) == count)
            else {
                return malformed!("element 'sh' has {count} properties, expected 9, 24 or 45");
            };
            let props = (0..count)
                .map(|k| sh_el.require_scalar(&format!("f_rest_{k}")))
                .collect::<Result<Vec<_>>>()?;
            Some((sh_index, degree, props))
        }
    };
    let sh_degree = sh.as_ref().map_or(0, |s| s.1);

    let mut body = Body::new(header, bytes)?;
    let mut chunks = Vec::with_capacity(chunk_el.count);
    body.read_element(chunk_index, |_, row| {
        let v = |k: usize| row[chunk_props[k]] as f32;
        let (min_color, max_color) = match &color_props {
            Some(c) => {
                let c = |k: usize| row[c[k]] as f32;
                ([c(0), c(1), c(2)], [c(3), c(4), c(5)])
            }
            None => ([0.0; 3], [1.0; 3]),
        };
        chunks.push(Chunk {
            min_pos: [v(0), v(1), v(2)],
            max_pos: [v(3), v(4), v(5)],
            min_scale: [v(6), v(7), v(8)],
            max_scale: [v(9), v(10), v(11)],
            min_color,
            max_color,
        });
        Ok(())
    })?;

    let mut splats = Splats::with_capacity(sh_degree, n);
    body.read_element(vertex_index, |i, row| {
        let word = |k: usize| row[packed[k]] as i64 as u32;
        // `chunks.len() == ceil(n / 256)` was checked above.
        let chunk = &chunks[i / CHUNK_SIZE];
        let pos = unpack_111011(word(0));
        let scale = unpack_111011(word(2));
        let color = unpack_8888(word(3));
        splats.means.push(std::array::from_fn(|k| {
            lerp(chunk.min_pos[k], chunk.max_pos[k], pos[k])
        }));
        splats.log_scales.push(std::array::from_fn(|k| {
            lerp(chunk.min_scale[k], chunk.max_scale[k], scale[k])
        }));
        splats.rotations.push(unpack_rotation(word(1)));
        splats.opacity_logits.push(logit_clamped(color[3]));
        let rgb = std::array::from_fn::<f32, 3, _>(|k| {
            lerp(chunk.min_color[k], chunk.max_color[k], color[k])
        });
        splats.sh.extend(rgb.map(|c| (c - 0.5) / SH_C0));
        // Room for the higher-order coefficients, filled from the 'sh' element.
        let rest = splats.num_coeffs() * 3 - 3;
        splats.sh.extend(std::iter::repeat_n(0.0, rest));
        Ok(())
    })?;

    if let Some((sh_index, _, props)) = sh {
        let stride = splats.num_coeffs() * 3;
        let per_channel = props.len() / 3;
        let sh_values = &mut splats.sh;
        body.read_element(sh_index, |i, row| {
            let base = i * stride;
            for c in 0..3 {
                for j in 0..per_channel {
                    let q = row[props[c * per_channel + j]];
                    sh_values[base + (j + 1) * 3 + c] = dequantize_sh(q);
                }
            }
            Ok(())
        })?;
    }
    splats.validate()?;
    Ok(splats)
}

fn lerp(a: f32, b: f32, t: f32) -> f32 {
    a * (1.0 - t) + b * t
}

fn unorm(value: u32, bits: u32) -> f32 {
    let max = (1u32 << bits) - 1;
    (value & max) as f32 / max as f32
}

fn unpack_111011(v: u32) -> [f32; 3] {
    [unorm(v >> 21, 11), unorm(v >> 11, 10), unorm(v, 11)]
}

fn unpack_8888(v: u32) -> [f32; 4] {
    [
        unorm(v >> 24, 8),
        unorm(v >> 16, 8),
        unorm(v >> 8, 8),
        unorm(v, 8),
    ]
}

/// Smallest-three quaternion in `(rot_0, rot_1, rot_2, rot_3)` = `(w, x, y, z)` order.
fn unpack_rotation(v: u32) -> [f32; 4] {
    let norm = std::f32::consts::SQRT_2;
    let a = (unorm(v >> 20, 10) - 0.5) * norm;
    let b = (unorm(v >> 10, 10) - 0.5) * norm;
    let c = (unorm(v, 10) - 0.5) * norm;
    let m = (1.0 - (a * a + b * b + c * c)).max(0.0).sqrt();
    match v >> 30 {
        0 => [m, a, b, c],
        1 => [a, m, b, c],
        2 => [a, b, m, c],
        _ => [a, b, c, m],
    }
}

/// Maps an 8-bit SH value back to `[-4, 4]` (PlayCanvas' bucket centres).
fn dequantize_sh(q: f64) -> f32 {
    let n = match q {
        q if q <= 0.0 => 0.0,
        q if q >= 255.0 => 1.0,
        q => (q as f32 + 0.5) / 256.0,
    };
    (n - 0.5) * 8.0
}
