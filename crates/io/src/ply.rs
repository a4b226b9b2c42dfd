//! The standard 3D Gaussian Splatting PLY layout (Kerbl et al. 2023).
//!
//! One `vertex` element with float properties
//! `x y z [nx ny nz] f_dc_0..2 f_rest_0..K-1 opacity scale_0..2 rot_0..3`.
//! `f_rest` is stored channel-major (all red coefficients, then green, then
//! blue); the SH degree follows from `K = 3 * ((degree + 1)^2 - 1)`.

use crate::compressed_ply;
use crate::error::{Result, malformed, unsupported};
use crate::plyfile::{self, Body, Header};
use crate::splats::{MAX_SH_DEGREE, Splats, num_coeffs_for_degree};

/// Decodes a standard 3DGS PLY file, or a PlayCanvas compressed PLY when the
/// header has that layout.
pub(crate) fn decode(bytes: &[u8]) -> Result<Splats> {
    let header = plyfile::parse_header(bytes)?;
    if compressed_ply::is_compressed(&header) {
        return compressed_ply::decode_with_header(bytes, &header);
    }
    decode_standard(bytes, &header)
}

/// Property indices of the 3DGS attributes in the vertex element.
struct Layout {
    mean: [usize; 3],
    dc: [usize; 3],
    rest: Vec<usize>,
    opacity: usize,
    scale: [usize; 3],
    rot: [usize; 4],
}

fn decode_standard(bytes: &[u8], header: &Header) -> Result<Splats> {
    let Some(vertex_index) = header.find("vertex") else {
        return malformed!("PLY file has no 'vertex' element");
    };
    let vertex = &header.elements[vertex_index];
    let req = |name: &str| vertex.require_scalar(name);
    let req3 = |prefix: &str| -> Result<[usize; 3]> {
        Ok([
            req(&format!("{prefix}0"))?,
            req(&format!("{prefix}1"))?,
            req(&format!("{prefix}2"))?,
        ])
    };
    let rest_count = vertex
        .properties
        .iter()
        .filter(|p| p.name.starts_with("f_rest_"))
        .count();
    let Some(sh_degree) =
        (0..=MAX_SH_DEGREE).find(|&d| 3 * (num_coeffs_for_degree(d) - 1) == rest_count)
    else {
        return if rest_count == 3 * (num_coeffs_for_degree(MAX_SH_DEGREE + 1) - 1) {
            unsupported!("SH degree 4 ({rest_count} f_rest properties)")
        } else {
            malformed!(
                "{rest_count} f_rest properties is not 3 * ((degree + 1)^2 - 1) for a degree in 0..=3"
            )
        };
    };
    let layout = Layout {
        mean: [req("x")?, req("y")?, req("z")?],
        dc: req3("f_dc_")?,
        rest: (0..rest_count)
            .map(|k| req(&format!("f_rest_{k}")))
            .collect::<Result<_>>()?,
        opacity: req("opacity")?,
        scale: req3("scale_")?,
        rot: [req("rot_0")?, req("rot_1")?, req("rot_2")?, req("rot_3")?],
    };

    let mut body = Body::new(header, bytes)?;
    let n = vertex.count;
    let mut splats = Splats::with_capacity(sh_degree, n);
    let rest_per_channel = rest_count / 3;
    body.read_element(vertex_index, |_, row| {
        let get = |i: usize| row[i] as f32;
        splats.means.push(layout.mean.map(get));
        splats.log_scales.push(layout.scale.map(get));
        splats.rotations.push(layout.rot.map(get));
        splats.opacity_logits.push(get(layout.opacity));
        splats.sh.extend(layout.dc.map(get));
        for j in 0..rest_per_channel {
            for c in 0..3 {
                splats.sh.push(get(layout.rest[c * rest_per_channel + j]));
            }
        }
        Ok(())
    })?;
    splats.validate()?;
    Ok(splats)
}

/// Encodes `splats` as a binary little-endian 3DGS PLY in the reference property
/// order (with zero normals, as the reference implementation writes them).
pub(crate) fn encode(splats: &Splats) -> Result<Vec<u8>> {
    splats.validate()?;
    let n = splats.len();
    let rest_per_channel = splats.num_coeffs() - 1;
    let mut names: Vec<String> = [
        "x", "y", "z", "nx", "ny", "nz", "f_dc_0", "f_dc_1", "f_dc_2",
    ]
    .map(String::from)
    .into();
    names.extend((0..3 * rest_per_channel).map(|k| format!("f_rest_{k}")));
    names.extend(
        [
            "opacity", "scale_0", "scale_1", "scale_2", "rot_0", "rot_1", "rot_2", "rot_3",
        ]
        .map(String::from),
    );

    let mut header = format!("ply\nformat binary_little_endian 1.0\nelement vertex {n}\n");
    for name in &names {
        header.push_str("property float ");
        header.push_str(name);
        header.push('\n');
    }
    header.push_str("end_header\n");

    let mut out = Vec::with_capacity(header.len() + n * names.len() * 4);
    out.extend_from_slice(header.as_bytes());
    for i in 0..n {
        let sh = splats.sh_of(i);
        let rest = (0..3).flat_map(|c| (1..=rest_per_channel).map(move |j| sh[j * 3 + c]));
        let row = splats.means[i]
            .into_iter()
            .chain([0.0; 3])
            .chain(sh[..3].iter().copied())
            .chain(rest)
            .chain([splats.opacity_logits[i]])
            .chain(splats.log_scales[i])
            .chain(splats.rotations[i]);
        for v in row {
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
    Ok(out)
}
