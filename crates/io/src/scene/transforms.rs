//! nerfstudio / instant-ngp `transforms.json` and NeRF-synthetic `transforms_*.json` scenes,
//! and the `transforms.json` writer.
//!
//! Keys read (per frame, falling back to the top level): `fl_x`, `fl_y`, `cx`, `cy`, `w`, `h`,
//! `camera_angle_x`, `camera_angle_y`, `k1`, `k2`, `k3`, `p1`, `p2` (`k4` must be 0), and
//! `file_path`, `transform_matrix` (3x4 or 4x4, OpenGL camera-to-world) and the optional
//! `mask_path` (nerfstudio; relative to the json's folder) per frame; at the
//! top level `camera_model` (fisheye and equirectangular models are rejected), `is_fisheye`
//! (instant-ngp) and `ply_file_path`. Missing `w`/`h` are read from the image headers; missing
//! `cx`/`cy` are `W/2`, `H/2`; a missing `fl_y` is `fl_x` (or comes from `camera_angle_y`).

use std::path::{Path, PathBuf};

use rust3r_geometry::{PinholeCamera, RadTanDistortion};
use serde_json::{Map, Value, json};

use super::{
    Loaded, MaskSource, RawView, SceneKind, SceneView, dataset_error, image_dimensions, malformed,
    orthonormality_error, rigid_inverse, scene_path,
};
use crate::IoError;

/// Extensions tried, in order, when a `file_path` names no existing file.
const EXTENSIONS: [&str; 6] = ["png", "jpg", "jpeg", "PNG", "JPG", "JPEG"];

/// The image a `file_path` refers to: the path as written when that file exists, else with
/// an image extension appended (NeRF-synthetic writes `./train/r_0` for `train/r_0.png`). When
/// nothing exists the path as written is returned (with `.png` appended when it has no
/// extension), so that loading the image reports the missing file.
fn resolve_image(base: &Path, written: &str) -> PathBuf {
    let p = scene_path(base, written);
    if p.is_file() {
        return p;
    }
    for ext in EXTENSIONS {
        let mut q = p.clone().into_os_string();
        q.push(".");
        q.push(ext);
        let q = PathBuf::from(q);
        if q.is_file() {
            return q;
        }
    }
    let has_image_ext = p
        .extension()
        .is_some_and(|e| EXTENSIONS.iter().any(|x| e.eq_ignore_ascii_case(x)));
    if has_image_ext {
        p
    } else {
        let mut q = p.into_os_string();
        q.push(".png");
        PathBuf::from(q)
    }
}

/// A numeric key of a frame, falling back to the top level. Present but not a finite number
/// is an error.
fn number(
    path: &Path,
    index: usize,
    frame: &Map<String, Value>,
    top: &Map<String, Value>,
    key: &str,
) -> Result<Option<f64>, IoError> {
    let (value, whose) = match frame.get(key) {
        Some(v) => (v, format!("frame {index}")),
        None => match top.get(key) {
            Some(v) => (v, "the top level".to_string()),
            None => return Ok(None),
        },
    };
    if value.is_null() {
        return Ok(None);
    }
    match value.as_f64() {
        Some(v) if v.is_finite() => Ok(Some(v)),
        _ => Err(malformed(
            path,
            format!("'{key}' of {whose} must be a finite number, found {value}"),
        )),
    }
}

fn size(path: &Path, index: usize, key: &str, v: f64) -> Result<u32, IoError> {
    if v >= 1.0 && v.fract() == 0.0 && v <= u32::MAX as f64 {
        Ok(v as u32)
    } else {
        Err(malformed(
            path,
            format!(
                "'{key}' of frame {index} must be a positive whole number of pixels, found {v}"
            ),
        ))
    }
}

/// Parses `transform_matrix` (3x4 or 4x4 rows of numbers) into a 4x4.
fn matrix(path: &Path, index: usize, value: Option<&Value>) -> Result<[[f64; 4]; 4], IoError> {
    let err = |what: &str| malformed(path, format!("frame {index}: 'transform_matrix' {what}"));
    let rows = value
        .ok_or_else(|| err("is missing"))?
        .as_array()
        .ok_or_else(|| err("must be an array of rows"))?;
    if rows.len() != 3 && rows.len() != 4 {
        return Err(err(&format!("must have 3 or 4 rows, found {}", rows.len())));
    }
    let mut m = [
        [0.0, 0.0, 0.0, 0.0],
        [0.0; 4],
        [0.0; 4],
        [0.0, 0.0, 0.0, 1.0],
    ];
    for (r, row) in rows.iter().enumerate() {
        let row = row
            .as_array()
            .filter(|row| row.len() == 4)
            .ok_or_else(|| err(&format!("row {r} must be 4 numbers, found {row}")))?;
        for (c, v) in row.iter().enumerate() {
            m[r][c] = v.as_f64().filter(|v| v.is_finite()).ok_or_else(|| {
                err(&format!(
                    "has a non-finite or non-numeric entry {v} at ({r}, {c})"
                ))
            })?;
        }
    }
    let bottom = m[3];
    if (bottom[0].abs() + bottom[1].abs() + bottom[2].abs() + (bottom[3] - 1.0).abs()) > 1e-6 {
        return Err(err(&format!(
            "must have a last row of 0 0 0 1, found {bottom:?}"
        )));
    }
    m[3] = [0.0, 0.0, 0.0, 1.0];
    let e = orthonormality_error(&m);
    if e > 1e-3 {
        return Err(err(&format!(
            "is not a rigid transform (its rotation deviates from orthonormal by {e:.3e}); \
             scaled or sheared camera poses are not supported"
        )));
    }
    // Poses are often stored as float32: snap to the nearest rotation so that the delivered
    // pose is exactly rigid (and writing it back reads back the same).
    if !super::make_rotation_exact(&mut m) {
        return Err(err(
            "has a rotation block that is a reflection (determinant < 0)",
        ));
    }
    Ok(m)
}

/// OpenGL camera-to-world (x right, y up, z backward) to OpenCV world-to-camera.
pub(crate) fn opengl_c2w_to_opencv_w2c(c2w: &[[f64; 4]; 4]) -> [[f64; 4]; 4] {
    let mut m = *c2w;
    for row in m.iter_mut().take(3) {
        row[1] = -row[1];
        row[2] = -row[2];
    }
    rigid_inverse(&m)
}

/// OpenCV world-to-camera to OpenGL camera-to-world (the inverse of
/// [`opengl_c2w_to_opencv_w2c`]).
pub(crate) fn opencv_w2c_to_opengl_c2w(w2c: &[[f64; 4]; 4]) -> [[f64; 4]; 4] {
    let mut m = rigid_inverse(w2c);
    for row in m.iter_mut().take(3) {
        row[1] = -row[1];
        row[2] = -row[2];
    }
    m
}

pub(crate) fn load(path: &Path, kind: SceneKind, downscale: u32) -> Result<Loaded, IoError> {
    let json_path = if path.is_file() {
        path.to_path_buf()
    } else {
        path.join(match kind {
            SceneKind::NerfSynthetic => "transforms_train.json",
            _ => "transforms.json",
        })
    };
    let base = match json_path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let bytes = std::fs::read(&json_path).map_err(|e| IoError::io(&json_path, e))?;
    let doc: Value = serde_json::from_slice(&bytes)
        .map_err(|e| malformed(&json_path, format!("invalid JSON: {e}")))?;
    let Some(top) = doc.as_object() else {
        return Err(malformed(&json_path, "the JSON document must be an object"));
    };
    let p = json_path.as_path();
    if let Some(model) = top.get("camera_model") {
        let model = model.as_str().ok_or_else(|| {
            malformed(p, format!("'camera_model' must be a string, found {model}"))
        })?;
        let ok = matches!(
            model.to_ascii_uppercase().as_str(),
            "OPENCV" | "PINHOLE" | "SIMPLE_PINHOLE" | "SIMPLE_RADIAL" | "RADIAL" | "PERSPECTIVE"
        );
        if !ok {
            return Err(IoError::Unsupported {
                path: p.to_path_buf(),
                message: format!(
                    "camera model '{model}' (supported: OPENCV, PINHOLE, SIMPLE_PINHOLE, \
                     SIMPLE_RADIAL, RADIAL)"
                ),
            });
        }
    }
    if top.get("is_fisheye").and_then(Value::as_bool) == Some(true) {
        return Err(IoError::Unsupported {
            path: p.to_path_buf(),
            message: "fisheye cameras ('is_fisheye': true)".into(),
        });
    }
    let frames = match top.get("frames") {
        None => return Err(malformed(p, "there is no 'frames' list")),
        Some(Value::Array(frames)) => frames,
        Some(other) => {
            return Err(malformed(
                p,
                format!("'frames' must be a list, found {other}"),
            ));
        }
    };
    if frames.is_empty() {
        return Err(dataset_error(p, "the 'frames' list is empty"));
    }
    let mut views = Vec::with_capacity(frames.len());
    for (i, frame) in frames.iter().enumerate() {
        let frame = frame
            .as_object()
            .ok_or_else(|| malformed(p, format!("frame {i} must be an object")))?;
        let written = match frame.get("file_path") {
            Some(Value::String(s)) if !s.trim().is_empty() => s.as_str(),
            Some(other) => {
                return Err(malformed(
                    p,
                    format!("frame {i}: 'file_path' must be a non-empty string, found {other}"),
                ));
            }
            None => return Err(malformed(p, format!("frame {i} has no 'file_path'"))),
        };
        let image_path = resolve_image(&base, written);
        let mask = match frame.get("mask_path") {
            None | Some(Value::Null) => None,
            Some(Value::String(m)) if !m.trim().is_empty() => Some(MaskSource {
                path: scene_path(&base, m),
                origin: format!("'mask_path' of frame {i} of {}", p.display()),
                tried: Vec::new(),
            }),
            Some(other) => {
                return Err(malformed(
                    p,
                    format!("frame {i}: 'mask_path' must be a non-empty string, found {other}"),
                ));
            }
        };
        let c2w = matrix(p, i, frame.get("transform_matrix"))?;
        let num = |key: &str| number(p, i, frame, top, key);
        let (width, height) = match (num("w")?, num("h")?) {
            (Some(w), Some(h)) => (size(p, i, "w", w)?, size(p, i, "h", h)?),
            _ => image_dimensions(&image_path).map_err(|e| {
                dataset_error(
                    p,
                    format!(
                        "frame {i}: the image size is not given ('w', 'h') and cannot be read from \
                         the image: {e}"
                    ),
                )
            })?,
        };
        let (w, h) = (width as f64, height as f64);
        let angle_focal = |angle: f64, extent: f64, key: &str| -> Result<f64, IoError> {
            if !(angle > 0.0 && angle < std::f64::consts::PI) {
                return Err(malformed(
                    p,
                    format!("frame {i}: '{key}' must be between 0 and pi radians, found {angle}"),
                ));
            }
            Ok(0.5 * extent / (0.5 * angle).tan())
        };
        let fx = match (num("fl_x")?, num("camera_angle_x")?) {
            (Some(f), _) => f,
            (None, Some(a)) => angle_focal(a, w, "camera_angle_x")?,
            (None, None) => {
                return Err(malformed(
                    p,
                    format!("frame {i}: no focal length ('fl_x' or 'camera_angle_x')"),
                ));
            }
        };
        let fy = match (num("fl_y")?, num("camera_angle_y")?) {
            (Some(f), _) => f,
            (None, Some(a)) if kind == SceneKind::Transforms => {
                angle_focal(a, h, "camera_angle_y")?
            }
            _ => fx,
        };
        if !(fx > 0.0 && fy > 0.0) {
            return Err(malformed(
                p,
                format!("frame {i}: focal lengths must be positive, found fl_x {fx}, fl_y {fy}"),
            ));
        }
        let cx = num("cx")?.unwrap_or(w / 2.0);
        let cy = num("cy")?.unwrap_or(h / 2.0);
        let [k1, k2, k3, k4, p1, p2] =
            ["k1", "k2", "k3", "k4", "p1", "p2"].map(|k| num(k).map(|v| v.unwrap_or(0.0)));
        let (k1, k2, k3, k4, p1, p2) = (k1?, k2?, k3?, k4?, p1?, p2?);
        if k4 != 0.0 {
            return Err(IoError::Unsupported {
                path: p.to_path_buf(),
                message: format!(
                    "frame {i}: distortion coefficient k4 = {k4} (fisheye models are not supported)"
                ),
            });
        }
        let distortion = RadTanDistortion::new5(k1, k2, p1, p2, k3);
        let downscaled_path = (kind == SceneKind::Transforms && downscale > 1)
            .then(|| {
                let dir = image_path.parent()?;
                let dir_name = dir.file_name()?.to_string_lossy().into_owned();
                let parent = dir.parent()?;
                Some(
                    parent
                        .join(format!("{dir_name}_{downscale}"))
                        .join(image_path.file_name()?),
                )
            })
            .flatten();
        views.push(RawView {
            relative: scene_path(Path::new(""), written)
                .to_string_lossy()
                .replace('\\', "/"),
            image_path,
            downscaled_path,
            camera: PinholeCamera::new(fx, fy, cx, cy, width, height)
                .with_distortion(Some(distortion)),
            world_to_camera: opengl_c2w_to_opencv_w2c(&c2w),
            calibration_origin: format!("frame {i} of {}", p.display()),
            mask,
        });
    }
    let points = match top.get("ply_file_path") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(super::read_points_ply(&scene_path(&base, s))?),
        Some(other) => {
            return Err(malformed(
                p,
                format!("'ply_file_path' must be a string, found {other}"),
            ));
        }
    };
    Ok(Loaded {
        root: base,
        views,
        points,
        source_file: json_path,
    })
}

/// `path` relative to `base` when it lies inside it, else absolute; always with `/`.
fn relative_to(path: &Path, base: &Path) -> String {
    let abs = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let (p, b) = (abs(path), abs(base));
    let out = match p.strip_prefix(&b) {
        Ok(rel) => rel.to_path_buf(),
        Err(_) => p,
    };
    out.to_string_lossy().replace('\\', "/")
}

/// Writes a nerfstudio `transforms.json` (atomically) for `views`: per frame `file_path`
/// (relative to the json's folder when the image lies inside it, else absolute), `fl_x`,
/// `fl_y`, `cx`, `cy`, `w`, `h` and `transform_matrix` (OpenGL camera-to-world, the inverse of
/// the view's pose with the camera y and z axes negated), `camera_model: "OPENCV"` (no
/// distortion) and, when given, `ply_file_path` (written with [`write_points_ply`](super::write_points_ply)).
///
/// [`open_scene`](super::open_scene) reads the file back to the same views (the view name is
/// the image file name).
pub fn write_transforms_json(
    path: &Path,
    views: &[SceneView],
    points_ply: Option<&Path>,
) -> Result<(), IoError> {
    let base = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let mut frames = Vec::with_capacity(views.len());
    for (i, v) in views.iter().enumerate() {
        super::colmap::validate_view(path, i, v)?;
        let c2w = opencv_w2c_to_opengl_c2w(&v.world_to_camera);
        frames.push(json!({
            "file_path": relative_to(&v.image_path, &base),
            "fl_x": v.camera.fx,
            "fl_y": v.camera.fy,
            "cx": v.camera.cx,
            "cy": v.camera.cy,
            "w": v.camera.width,
            "h": v.camera.height,
            "transform_matrix": c2w,
        }));
    }
    let mut doc = Map::new();
    doc.insert("camera_model".into(), json!("OPENCV"));
    doc.insert("frames".into(), Value::Array(frames));
    if let Some(ply) = points_ply {
        doc.insert("ply_file_path".into(), json!(relative_to(ply, &base)));
    }
    let mut bytes = serde_json::to_vec_pretty(&Value::Object(doc))
        .map_err(|e| dataset_error(path, format!("cannot encode JSON: {e}")))?;
    bytes.push(b'\n');
    crate::atomic::write_atomic(path, &bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pose_conversions_invert_each_other() {
        let a: f64 = 0.3;
        let w2c = [
            [a.cos(), 0.0, a.sin(), 1.0],
            [0.0, 1.0, 0.0, -2.0],
            [-a.sin(), 0.0, a.cos(), 0.5],
            [0.0, 0.0, 0.0, 1.0],
        ];
        let back = opengl_c2w_to_opencv_w2c(&opencv_w2c_to_opengl_c2w(&w2c));
        for r in 0..4 {
            for c in 0..4 {
                assert!((back[r][c] - w2c[r][c]).abs() < 1e-12);
            }
        }
    }
}
