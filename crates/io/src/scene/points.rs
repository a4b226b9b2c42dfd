//! Point clouds for initialisation: a PLY `vertex` element with `x y z` and optional
//! `red green blue` (nerfstudio's `sparse_pc.ply`, COLMAP's exported PLY, ...).

use std::io::Write as _;
use std::path::Path;

use super::{ScenePoints, dataset_error, malformed};
use crate::IoError;
use crate::plyfile::{self, Body, Scalar};

/// Reads the `vertex` element of a PLY file as points: `x y z` (required) and `red green blue`
/// (optional; 8-bit integers are used as they are, floats in `0..1` are scaled by 255;
/// missing colours are mid grey). Non-finite positions are an error.
pub fn read_points_ply(path: &Path) -> Result<ScenePoints, IoError> {
    let bytes = std::fs::read(path).map_err(|e| IoError::io(path, e))?;
    let header = plyfile::parse_header(&bytes).map_err(|e| e.at(path))?;
    let Some(vi) = header.find("vertex") else {
        return Err(malformed(path, "the PLY file has no 'vertex' element"));
    };
    let element = &header.elements[vi];
    let xyz_idx = ["x", "y", "z"].map(|n| element.require_scalar(n).map_err(|e| e.at(path)));
    let [x, y, z] = match xyz_idx {
        [Ok(x), Ok(y), Ok(z)] => [x, y, z],
        [Err(e), _, _] | [_, Err(e), _] | [_, _, Err(e)] => return Err(e),
    };
    let colour: Option<[(usize, bool); 3]> = {
        let idx = ["red", "green", "blue"].map(|n| element.find(n));
        match idx {
            [Some(r), Some(g), Some(b)] => {
                let float = |i: usize| {
                    let p = &element.properties[i];
                    p.list_count.is_none() && matches!(p.scalar, Scalar::F32 | Scalar::F64)
                };
                let lists = [r, g, b]
                    .iter()
                    .any(|&i| element.properties[i].list_count.is_some());
                if lists {
                    return Err(malformed(path, "vertex colours must be scalar properties"));
                }
                Some([(r, float(r)), (g, float(g)), (b, float(b))])
            }
            _ => None,
        }
    };
    let mut points = ScenePoints {
        xyz: Vec::with_capacity(element.count.min(bytes.len())),
        rgb: Vec::with_capacity(element.count.min(bytes.len())),
    };
    let mut body = Body::new(&header, &bytes).map_err(|e| e.at(path))?;
    let mut bad_row = None;
    body.read_element(vi, |r, row| {
        let p = [row[x], row[y], row[z]];
        if !p.iter().all(|v| v.is_finite()) && bad_row.is_none() {
            bad_row = Some(r);
        }
        points.xyz.push(p.map(|v| v as f32));
        points.rgb.push(match &colour {
            None => [128; 3],
            Some(c) => c.map(|(i, float)| {
                let v = if float { row[i] * 255.0 } else { row[i] };
                if v.is_nan() {
                    0
                } else {
                    v.round().clamp(0.0, 255.0) as u8
                }
            }),
        });
        Ok(())
    })
    .map_err(|e| e.at(path))?;
    if let Some(r) = bad_row {
        return Err(malformed(
            path,
            format!("vertex {r} has a position that is not finite"),
        ));
    }
    Ok(points)
}

/// Writes points as a binary little-endian PLY (`float x y z`, `uchar red green blue`),
/// atomically; [`read_points_ply`] (and a `ply_file_path` in a `transforms.json`) reads it back.
pub fn write_points_ply(path: &Path, points: &ScenePoints) -> Result<(), IoError> {
    if points.xyz.len() != points.rgb.len() {
        return Err(dataset_error(
            path,
            format!(
                "cannot write points: {} positions but {} colours",
                points.xyz.len(),
                points.rgb.len()
            ),
        ));
    }
    if let Some(i) = points
        .xyz
        .iter()
        .position(|p| !p.iter().all(|v| v.is_finite()))
    {
        return Err(dataset_error(
            path,
            format!("cannot write points: point {i} is not finite"),
        ));
    }
    crate::atomic::write_atomic_with(path, |w| {
        write!(
            w,
            "ply\nformat binary_little_endian 1.0\nelement vertex {}\nproperty float x\n\
             property float y\nproperty float z\nproperty uchar red\nproperty uchar green\n\
             property uchar blue\nend_header\n",
            points.xyz.len()
        )?;
        for (p, c) in points.xyz.iter().zip(&points.rgb) {
            for v in p {
                w.write_all(&v.to_le_bytes())?;
            }
            w.write_all(c)?;
        }
        Ok(())
    })
    .map_err(|e| IoError::io(path, e))
}
