//! COLMAP sparse models: binary and text readers, a text writer, and the conversion of a model
//! into [`Scene`](super::Scene) views.
//!
//! | file | binary | text |
//! |---|---|---|
//! | cameras | `cameras.bin` | `cameras.txt`: `CAMERA_ID MODEL WIDTH HEIGHT PARAMS[]` |
//! | images | `images.bin` | `images.txt`: `IMAGE_ID QW QX QY QZ TX TY TZ CAMERA_ID NAME`, then a line of `X Y POINT3D_ID` triples |
//! | points | `points3D.bin` | `points3D.txt`: `POINT3D_ID X Y Z R G B ERROR (IMAGE_ID POINT2D_IDX)[]` |
//!
//! For each of the three files the `.bin` is read when it exists, else the `.txt`. A missing
//! `points3D` file means no points. Every reader checks counts against the file size before
//! allocating and reports truncation, bad numbers and unknown camera models as an
//! [`IoError`] naming the file (and the line, for text files).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use rust3r_geometry::{PinholeCamera, RadTanDistortion};

use super::{
    Loaded, MaskSource, RawView, ScenePoints, SceneView, dataset_error, malformed,
    orthonormality_error, scene_path,
};
use crate::IoError;

/// COLMAP camera models: `(id, name, number of parameters)`.
const MODELS: [(i32, &str, usize); 12] = [
    (0, "SIMPLE_PINHOLE", 3),
    (1, "PINHOLE", 4),
    (2, "SIMPLE_RADIAL", 4),
    (3, "RADIAL", 5),
    (4, "OPENCV", 8),
    (5, "OPENCV_FISHEYE", 8),
    (6, "FULL_OPENCV", 12),
    (7, "FOV", 5),
    (8, "SIMPLE_RADIAL_FISHEYE", 4),
    (9, "RADIAL_FISHEYE", 5),
    (10, "THIN_PRISM_FISHEYE", 12),
    (11, "RAD_TAN_THIN_PRISM_FISHEYE", 16),
];

/// Models [`open_scene`](super::open_scene) can use.
pub const SUPPORTED_MODELS: &str = "SIMPLE_PINHOLE, PINHOLE, SIMPLE_RADIAL, RADIAL, OPENCV (and FULL_OPENCV with k4 = k5 = k6 = 0)";

fn model_by_id(id: i32) -> Option<(&'static str, usize)> {
    MODELS.iter().find(|m| m.0 == id).map(|m| (m.1, m.2))
}

fn model_by_name(name: &str) -> Option<(i32, usize)> {
    MODELS.iter().find(|m| m.1 == name).map(|m| (m.0, m.2))
}

/// A camera of a COLMAP model.
#[derive(Debug, Clone, PartialEq)]
pub struct Camera {
    /// Camera id.
    pub id: u32,
    /// Model name (`PINHOLE`, `SIMPLE_RADIAL`, ...).
    pub model: String,
    /// Image width, pixels.
    pub width: u64,
    /// Image height, pixels.
    pub height: u64,
    /// Model parameters in COLMAP's order (e.g. `fx fy cx cy` for `PINHOLE`).
    pub params: Vec<f64>,
}

/// A keypoint of an image.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point2D {
    /// Pixel position (COLMAP convention).
    pub xy: [f64; 2],
    /// The 3D point it observes, if any.
    pub point3d_id: Option<u64>,
}

/// A registered image of a COLMAP model.
#[derive(Debug, Clone, PartialEq)]
pub struct Image {
    /// Image id.
    pub id: u32,
    /// World-to-camera rotation as a quaternion `(w, x, y, z)`.
    pub qvec: [f64; 4],
    /// World-to-camera translation.
    pub tvec: [f64; 3],
    /// Id of its camera.
    pub camera_id: u32,
    /// File name relative to the image folder.
    pub name: String,
    /// Keypoints.
    pub points2d: Vec<Point2D>,
}

impl Image {
    /// The world-to-camera transform (row-major 4x4, OpenCV camera axes).
    pub fn world_to_camera(&self) -> [[f64; 4]; 4] {
        let n = self.qvec.iter().map(|v| v * v).sum::<f64>().sqrt();
        let [w, x, y, z] = self.qvec.map(|v| v / n);
        let r = [
            [
                1.0 - 2.0 * (y * y + z * z),
                2.0 * (x * y - w * z),
                2.0 * (x * z + w * y),
            ],
            [
                2.0 * (x * y + w * z),
                1.0 - 2.0 * (x * x + z * z),
                2.0 * (y * z - w * x),
            ],
            [
                2.0 * (x * z - w * y),
                2.0 * (y * z + w * x),
                1.0 - 2.0 * (x * x + y * y),
            ],
        ];
        let t = self.tvec;
        [
            [r[0][0], r[0][1], r[0][2], t[0]],
            [r[1][0], r[1][1], r[1][2], t[1]],
            [r[2][0], r[2][1], r[2][2], t[2]],
            [0.0, 0.0, 0.0, 1.0],
        ]
    }
}

/// One observation of a 3D point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrackElement {
    /// Observing image.
    pub image_id: u32,
    /// Index of the keypoint in that image's [`Image::points2d`].
    pub point2d_idx: u32,
}

/// A 3D point of a COLMAP model.
#[derive(Debug, Clone, PartialEq)]
pub struct Point3D {
    /// Point id.
    pub id: u64,
    /// Position.
    pub xyz: [f64; 3],
    /// Colour.
    pub rgb: [u8; 3],
    /// Mean reprojection error, pixels.
    pub error: f64,
    /// Observations.
    pub track: Vec<TrackElement>,
}

/// A COLMAP sparse model, each list in file order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Model {
    /// Cameras.
    pub cameras: Vec<Camera>,
    /// Registered images.
    pub images: Vec<Image>,
    /// 3D points (empty when the model has no `points3D` file).
    pub points: Vec<Point3D>,
}

/// The folder holding the model files of a COLMAP scene: the first of `path/sparse/0`,
/// `path/sparse` and `path` that holds `cameras.bin` or `cameras.txt`.
pub fn find_model_dir(path: &Path) -> Option<PathBuf> {
    [
        path.join("sparse").join("0"),
        path.join("sparse"),
        path.to_path_buf(),
    ]
    .into_iter()
    .find(|d| d.join("cameras.bin").is_file() || d.join("cameras.txt").is_file())
}

fn pick(dir: &Path, stem: &str) -> Option<PathBuf> {
    let bin = dir.join(format!("{stem}.bin"));
    let txt = dir.join(format!("{stem}.txt"));
    if bin.is_file() {
        Some(bin)
    } else if txt.is_file() {
        Some(txt)
    } else {
        None
    }
}

fn is_bin(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "bin")
}

/// The files a model was read from.
struct ModelFiles {
    cameras: PathBuf,
    images: PathBuf,
    points: Option<PathBuf>,
}

/// Reads the COLMAP model in `dir` (binary or text, per file; see the module docs).
pub fn read_model(dir: &Path) -> Result<Model, IoError> {
    read_model_files(dir).map(|(m, _)| m)
}

fn read_model_files(dir: &Path) -> Result<(Model, ModelFiles), IoError> {
    let missing = |stem: &str| {
        IoError::io(
            &dir.join(format!("{stem}.bin")),
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("neither {stem}.bin nor {stem}.txt exists"),
            ),
        )
    };
    let cameras_path = pick(dir, "cameras").ok_or_else(|| missing("cameras"))?;
    let images_path = pick(dir, "images").ok_or_else(|| missing("images"))?;
    let cameras = if is_bin(&cameras_path) {
        read_cameras_bin(&cameras_path)?
    } else {
        read_cameras_text(&cameras_path)?
    };
    let images = if is_bin(&images_path) {
        read_images_bin(&images_path)?
    } else {
        read_images_text(&images_path)?
    };
    let points_path = pick(dir, "points3D");
    let points = match &points_path {
        None => Vec::new(),
        Some(p) if is_bin(p) => read_points_bin(p)?,
        Some(p) => read_points_text(p)?,
    };
    Ok((
        Model {
            cameras,
            images,
            points,
        },
        ModelFiles {
            cameras: cameras_path,
            images: images_path,
            points: points_path,
        },
    ))
}

// ---------------------------------------------------------------------------
// Binary

/// Little-endian cursor over a file's bytes.
struct Bin<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl Bin<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let b = self.bytes.get(self.pos..self.pos.checked_add(N)?)?;
        self.pos += N;
        b.try_into().ok()
    }
    fn u8(&mut self) -> Option<u8> {
        self.take::<1>().map(|b| b[0])
    }
    fn u32(&mut self) -> Option<u32> {
        self.take().map(u32::from_le_bytes)
    }
    fn i32(&mut self) -> Option<i32> {
        self.take().map(i32::from_le_bytes)
    }
    fn u64(&mut self) -> Option<u64> {
        self.take().map(u64::from_le_bytes)
    }
    fn f64(&mut self) -> Option<f64> {
        self.take().map(f64::from_le_bytes)
    }
    fn remaining(&self) -> usize {
        self.bytes.len().saturating_sub(self.pos)
    }
    /// A NUL-terminated string.
    fn cstr(&mut self) -> Option<&[u8]> {
        let rest = self.bytes.get(self.pos..)?;
        let end = rest.iter().position(|&b| b == 0)?;
        self.pos += end + 1;
        Some(&rest[..end])
    }
}

fn read_bytes(path: &Path) -> Result<Vec<u8>, IoError> {
    std::fs::read(path).map_err(|e| IoError::io(path, e))
}

/// Checks that `count` records of at least `min_size` bytes can fit in what is left.
fn check_count(
    path: &Path,
    bin: &Bin,
    count: u64,
    min_size: usize,
    what: &str,
) -> Result<usize, IoError> {
    let fits = (bin.remaining() / min_size) as u64;
    if count > fits {
        return Err(malformed(
            path,
            format!(
                "declares {count} {what} but the rest of the file ({} bytes) holds at most {fits}",
                bin.remaining()
            ),
        ));
    }
    Ok(count as usize)
}

fn truncated(path: &Path, what: &str, index: usize, count: usize, pos: usize) -> IoError {
    malformed(
        path,
        format!(
            "the file ends (or is corrupt) inside {what} {} of {count} (at byte {pos})",
            index + 1
        ),
    )
}

fn require_finite(path: &Path, what: &str, values: &[f64]) -> Result<(), IoError> {
    if values.iter().all(|v| v.is_finite()) {
        Ok(())
    } else {
        Err(malformed(
            path,
            format!("{what} has a value that is not finite: {values:?}"),
        ))
    }
}

fn read_cameras_bin(path: &Path) -> Result<Vec<Camera>, IoError> {
    let bytes = read_bytes(path)?;
    let mut bin = Bin {
        bytes: &bytes,
        pos: 0,
    };
    let count = bin
        .u64()
        .ok_or_else(|| malformed(path, "the file is too short to hold the camera count"))?;
    let count = check_count(path, &bin, count, 24, "cameras")?;
    let mut cameras = Vec::with_capacity(count);
    for i in 0..count {
        let start = bin.pos;
        let (id, model_id, width, height) =
            (|| Some((bin.u32()?, bin.i32()?, bin.u64()?, bin.u64()?)))()
                .ok_or_else(|| truncated(path, "camera", i, count, start))?;
        let Some((model, n_params)) = model_by_id(model_id) else {
            return Err(malformed(
                path,
                format!("camera {id} has unknown camera model id {model_id}"),
            ));
        };
        let params = (0..n_params)
            .map(|_| bin.f64())
            .collect::<Option<Vec<f64>>>()
            .ok_or_else(|| truncated(path, "camera", i, count, start))?;
        cameras.push(Camera {
            id,
            model: model.to_string(),
            width,
            height,
            params,
        });
    }
    Ok(cameras)
}

fn read_images_bin(path: &Path) -> Result<Vec<Image>, IoError> {
    let bytes = read_bytes(path)?;
    let mut bin = Bin {
        bytes: &bytes,
        pos: 0,
    };
    let count = bin
        .u64()
        .ok_or_else(|| malformed(path, "the file is too short to hold the image count"))?;
    let count = check_count(path, &bin, count, 73, "images")?;
    let mut images = Vec::with_capacity(count);
    for i in 0..count {
        let start = bin.pos;
        let err = || truncated(path, "image", i, count, start);
        let id = bin.u32().ok_or_else(err)?;
        let q = [(); 4].map(|_| bin.f64());
        let t = [(); 3].map(|_| bin.f64());
        let camera_id = bin.u32().ok_or_else(err)?;
        let (Some(qvec), Some(tvec)) = (
            q.iter().copied().collect::<Option<Vec<_>>>(),
            t.iter().copied().collect::<Option<Vec<_>>>(),
        ) else {
            return Err(err());
        };
        let name = bin.cstr().ok_or_else(err)?;
        let name = String::from_utf8(name.to_vec())
            .map_err(|_| malformed(path, format!("the name of image {id} is not valid UTF-8")))?;
        let n_points = bin.u64().ok_or_else(err)?;
        let n_points = check_count(
            path,
            &bin,
            n_points,
            24,
            &format!("keypoints in image {id}"),
        )?;
        let mut points2d = Vec::with_capacity(n_points);
        for _ in 0..n_points {
            let (x, y, p) = (|| Some((bin.f64()?, bin.f64()?, bin.u64()?)))().ok_or_else(err)?;
            points2d.push(Point2D {
                xy: [x, y],
                point3d_id: (p != u64::MAX).then_some(p),
            });
        }
        images.push(Image {
            id,
            qvec: qvec.try_into().expect("4 values"),
            tvec: tvec.try_into().expect("3 values"),
            camera_id,
            name,
            points2d,
        });
    }
    Ok(images)
}

fn read_points_bin(path: &Path) -> Result<Vec<Point3D>, IoError> {
    let bytes = read_bytes(path)?;
    let mut bin = Bin {
        bytes: &bytes,
        pos: 0,
    };
    let count = bin
        .u64()
        .ok_or_else(|| malformed(path, "the file is too short to hold the point count"))?;
    let count = check_count(path, &bin, count, 51, "points")?;
    let mut points = Vec::with_capacity(count);
    for i in 0..count {
        let start = bin.pos;
        let err = || truncated(path, "point", i, count, start);
        let (id, x, y, z, r, g, b, error, track_len) = (|| {
            Some((
                bin.u64()?,
                bin.f64()?,
                bin.f64()?,
                bin.f64()?,
                bin.u8()?,
                bin.u8()?,
                bin.u8()?,
                bin.f64()?,
                bin.u64()?,
            ))
        })()
        .ok_or_else(err)?;
        let track_len = check_count(
            path,
            &bin,
            track_len,
            8,
            &format!("track elements of point {id}"),
        )?;
        let mut track = Vec::with_capacity(track_len);
        for _ in 0..track_len {
            let (image_id, point2d_idx) = (|| Some((bin.u32()?, bin.u32()?)))().ok_or_else(err)?;
            track.push(TrackElement {
                image_id,
                point2d_idx,
            });
        }
        points.push(Point3D {
            id,
            xyz: [x, y, z],
            rgb: [r, g, b],
            error,
            track,
        });
    }
    Ok(points)
}

// ---------------------------------------------------------------------------
// Text

fn read_text(path: &Path) -> Result<String, IoError> {
    let bytes = read_bytes(path)?;
    String::from_utf8(bytes).map_err(|e| {
        malformed(
            path,
            format!(
                "not a text file (invalid UTF-8 at byte {})",
                e.utf8_error().valid_up_to()
            ),
        )
    })
}

fn is_data_line(line: &str) -> bool {
    let t = line.trim();
    !t.is_empty() && !t.starts_with('#')
}

fn parse<T: std::str::FromStr>(
    path: &Path,
    line: usize,
    token: &str,
    what: &str,
) -> Result<T, IoError> {
    token.parse::<T>().map_err(|_| {
        malformed(
            path,
            format!("line {line}: {what} '{token}' is not a valid number"),
        )
    })
}

fn parse_finite(path: &Path, line: usize, token: &str, what: &str) -> Result<f64, IoError> {
    let v: f64 = parse(path, line, token, what)?;
    if v.is_finite() {
        Ok(v)
    } else {
        Err(malformed(
            path,
            format!("line {line}: {what} '{token}' is not finite"),
        ))
    }
}

fn read_cameras_text(path: &Path) -> Result<Vec<Camera>, IoError> {
    let text = read_text(path)?;
    let mut cameras = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if !is_data_line(line) {
            continue;
        }
        let n = i + 1;
        let t: Vec<&str> = line.split_whitespace().collect();
        if t.len() < 4 {
            return Err(malformed(
                path,
                format!(
                    "line {n}: expected CAMERA_ID MODEL WIDTH HEIGHT PARAMS[], found {} fields",
                    t.len()
                ),
            ));
        }
        let id = parse(path, n, t[0], "camera id")?;
        let model = t[1];
        let Some((_, n_params)) = model_by_name(model) else {
            return Err(malformed(
                path,
                format!("line {n}: unknown camera model '{model}'"),
            ));
        };
        if t.len() != 4 + n_params {
            return Err(malformed(
                path,
                format!(
                    "line {n}: camera model {model} has {n_params} parameters but the line has {}",
                    t.len() - 4
                ),
            ));
        }
        let width = parse(path, n, t[2], "width")?;
        let height = parse(path, n, t[3], "height")?;
        let params = t[4..]
            .iter()
            .map(|s| parse_finite(path, n, s, "camera parameter"))
            .collect::<Result<Vec<f64>, _>>()?;
        cameras.push(Camera {
            id,
            model: model.to_string(),
            width,
            height,
            params,
        });
    }
    Ok(cameras)
}

fn read_images_text(path: &Path) -> Result<Vec<Image>, IoError> {
    let text = read_text(path)?;
    let mut images = Vec::new();
    let mut lines = text.lines().enumerate();
    while let Some((i, line)) = lines.next() {
        if !is_data_line(line) {
            continue;
        }
        let n = i + 1;
        let line = line.trim();
        // Nine fields, then the name (the rest of the line).
        let mut rest = line;
        let mut fields = Vec::with_capacity(9);
        for _ in 0..9 {
            rest = rest.trim_start();
            let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
            if end == 0 {
                break;
            }
            fields.push(&rest[..end]);
            rest = &rest[end..];
        }
        let name = rest.trim();
        if fields.len() < 9 || name.is_empty() {
            return Err(malformed(
                path,
                format!(
                    "line {n}: expected IMAGE_ID QW QX QY QZ TX TY TZ CAMERA_ID NAME, found '{line}'"
                ),
            ));
        }
        let id = parse(path, n, fields[0], "image id")?;
        let q: Vec<f64> = fields[1..5]
            .iter()
            .map(|s| parse_finite(path, n, s, "quaternion component"))
            .collect::<Result<_, _>>()?;
        let t: Vec<f64> = fields[5..8]
            .iter()
            .map(|s| parse_finite(path, n, s, "translation component"))
            .collect::<Result<_, _>>()?;
        let camera_id = parse(path, n, fields[8], "camera id")?;
        // The keypoint line always follows (it may be empty).
        let mut points2d = Vec::new();
        if let Some((j, pline)) = lines.next() {
            let t: Vec<&str> = pline.split_whitespace().collect();
            if !t.len().is_multiple_of(3) {
                return Err(malformed(
                    path,
                    format!(
                        "line {}: keypoints of image {id} must be X Y POINT3D_ID triples, found {} values",
                        j + 1,
                        t.len()
                    ),
                ));
            }
            points2d.reserve(t.len() / 3);
            for c in t.chunks_exact(3) {
                let x = parse_finite(path, j + 1, c[0], "keypoint x")?;
                let y = parse_finite(path, j + 1, c[1], "keypoint y")?;
                let p: i64 = parse(path, j + 1, c[2], "point3D id")?;
                points2d.push(Point2D {
                    xy: [x, y],
                    point3d_id: (p >= 0).then_some(p as u64),
                });
            }
        }
        images.push(Image {
            id,
            qvec: q.try_into().expect("4 values"),
            tvec: t.try_into().expect("3 values"),
            camera_id,
            name: name.to_string(),
            points2d,
        });
    }
    Ok(images)
}

fn read_points_text(path: &Path) -> Result<Vec<Point3D>, IoError> {
    let text = read_text(path)?;
    let mut points = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if !is_data_line(line) {
            continue;
        }
        let n = i + 1;
        let t: Vec<&str> = line.split_whitespace().collect();
        if t.len() < 8 || !(t.len() - 8).is_multiple_of(2) {
            return Err(malformed(
                path,
                format!(
                    "line {n}: expected POINT3D_ID X Y Z R G B ERROR followed by IMAGE_ID \
                     POINT2D_IDX pairs, found {} fields",
                    t.len()
                ),
            ));
        }
        let id = parse(path, n, t[0], "point id")?;
        let x = parse_finite(path, n, t[1], "coordinate")?;
        let y = parse_finite(path, n, t[2], "coordinate")?;
        let z = parse_finite(path, n, t[3], "coordinate")?;
        let mut c = [0u8; 3];
        for (slot, token) in c.iter_mut().zip(&t[4..7]) {
            *slot = parse(path, n, token, "colour (0-255)")?;
        }
        let error: f64 = parse(path, n, t[7], "error")?;
        let track = t[8..]
            .chunks_exact(2)
            .map(|p| {
                Ok(TrackElement {
                    image_id: parse(path, n, p[0], "image id")?,
                    point2d_idx: parse(path, n, p[1], "keypoint index")?,
                })
            })
            .collect::<Result<Vec<_>, IoError>>()?;
        points.push(Point3D {
            id,
            xyz: [x, y, z],
            rgb: c,
            error,
            track,
        });
    }
    Ok(points)
}

// ---------------------------------------------------------------------------
// Text writer

fn write_text_atomic(path: &Path, text: &str) -> Result<(), IoError> {
    crate::atomic::write_atomic_with(path, |w| w.write_all(text.as_bytes()))
        .map_err(|e| IoError::io(path, e))
}

/// Writes `model` as `cameras.txt`, `images.txt` and `points3D.txt` in `dir` (created if
/// needed), each atomically, in COLMAP's text format. Numbers are written with the shortest
/// representation that reads back to the same `f64`, so a text round trip is exact.
pub fn write_model_text(dir: &Path, model: &Model) -> Result<(), IoError> {
    std::fs::create_dir_all(dir).map_err(|e| IoError::io(dir, e))?;
    let mut s = String::new();
    s.push_str("# Camera list with one line of data per camera:\n");
    s.push_str("#   CAMERA_ID, MODEL, WIDTH, HEIGHT, PARAMS[]\n");
    let _ = writeln!(s, "# Number of cameras: {}", model.cameras.len());
    for c in &model.cameras {
        let _ = write!(s, "{} {} {} {}", c.id, c.model, c.width, c.height);
        for p in &c.params {
            let _ = write!(s, " {p}");
        }
        s.push('\n');
    }
    write_text_atomic(&dir.join("cameras.txt"), &s)?;

    let images_path = dir.join("images.txt");
    let mut s = String::new();
    s.push_str("# Image list with two lines of data per image:\n");
    s.push_str("#   IMAGE_ID, QW, QX, QY, QZ, TX, TY, TZ, CAMERA_ID, NAME\n");
    s.push_str("#   POINTS2D[] as (X, Y, POINT3D_ID)\n");
    let _ = writeln!(s, "# Number of images: {}", model.images.len());
    for im in &model.images {
        if im.name.trim() != im.name || im.name.is_empty() || im.name.contains(['\n', '\r']) {
            return Err(dataset_error(
                &images_path,
                format!(
                    "image name '{}' cannot be written (empty, or with surrounding whitespace or a line break)",
                    im.name.escape_debug()
                ),
            ));
        }
        let [qw, qx, qy, qz] = im.qvec;
        let [tx, ty, tz] = im.tvec;
        let _ = writeln!(
            s,
            "{} {qw} {qx} {qy} {qz} {tx} {ty} {tz} {} {}",
            im.id, im.camera_id, im.name
        );
        let mut first = true;
        for p in &im.points2d {
            if !first {
                s.push(' ');
            }
            first = false;
            let id = p.point3d_id.map_or(-1, |v| v as i64);
            let _ = write!(s, "{} {} {id}", p.xy[0], p.xy[1]);
        }
        s.push('\n');
    }
    write_text_atomic(&images_path, &s)?;

    let mut s = String::new();
    s.push_str("# 3D point list with one line of data per point:\n");
    s.push_str("#   POINT3D_ID, X, Y, Z, R, G, B, ERROR, TRACK[] as (IMAGE_ID, POINT2D_IDX)\n");
    let _ = writeln!(s, "# Number of points: {}", model.points.len());
    for p in &model.points {
        let [x, y, z] = p.xyz;
        let [r, g, b] = p.rgb;
        let _ = write!(s, "{} {x} {y} {z} {r} {g} {b} {}", p.id, p.error);
        for t in &p.track {
            let _ = write!(s, " {} {}", t.image_id, t.point2d_idx);
        }
        s.push('\n');
    }
    write_text_atomic(&dir.join("points3D.txt"), &s)
}

/// Quaternion `(w, x, y, z)`, `w >= 0`, of a rotation matrix (Shepperd's method).
fn rotation_to_quaternion(r: &[[f64; 4]; 4]) -> [f64; 4] {
    let tr = r[0][0] + r[1][1] + r[2][2];
    let q = if tr > 0.0 {
        let s = (tr + 1.0).sqrt() * 2.0;
        [
            0.25 * s,
            (r[2][1] - r[1][2]) / s,
            (r[0][2] - r[2][0]) / s,
            (r[1][0] - r[0][1]) / s,
        ]
    } else if r[0][0] > r[1][1] && r[0][0] > r[2][2] {
        let s = (1.0 + r[0][0] - r[1][1] - r[2][2]).sqrt() * 2.0;
        [
            (r[2][1] - r[1][2]) / s,
            0.25 * s,
            (r[0][1] + r[1][0]) / s,
            (r[0][2] + r[2][0]) / s,
        ]
    } else if r[1][1] > r[2][2] {
        let s = (1.0 + r[1][1] - r[0][0] - r[2][2]).sqrt() * 2.0;
        [
            (r[0][2] - r[2][0]) / s,
            (r[0][1] + r[1][0]) / s,
            0.25 * s,
            (r[1][2] + r[2][1]) / s,
        ]
    } else {
        let s = (1.0 + r[2][2] - r[0][0] - r[1][1]).sqrt() * 2.0;
        [
            (r[1][0] - r[0][1]) / s,
            (r[0][2] + r[2][0]) / s,
            (r[1][2] + r[2][1]) / s,
            0.25 * s,
        ]
    };
    let n = q.iter().map(|v| v * v).sum::<f64>().sqrt();
    let sign = if q[0] < 0.0 { -1.0 } else { 1.0 };
    q.map(|v| sign * v / n)
}

/// Checks a view before it is written: finite, positive intrinsics, a non-empty image and a
/// rigid pose.
pub(crate) fn validate_view(path: &Path, index: usize, v: &SceneView) -> Result<(), IoError> {
    let bad = |what: &str| {
        Err(dataset_error(
            path,
            format!("view {index} ('{}') cannot be written: {what}", v.name),
        ))
    };
    let k = &v.camera;
    if k.width == 0 || k.height == 0 {
        return bad(&format!("its image size {}x{} is empty", k.width, k.height));
    }
    if ![k.fx, k.fy, k.cx, k.cy].iter().all(|x| x.is_finite()) || k.fx <= 0.0 || k.fy <= 0.0 {
        return bad("its intrinsics are not finite and positive");
    }
    if k.distortion.is_some() {
        return bad("its camera has a lens distortion (only undistorted views are written)");
    }
    let m = &v.world_to_camera;
    if !m.iter().flatten().all(|x| x.is_finite()) {
        return bad("its pose is not finite");
    }
    if m[3] != [0.0, 0.0, 0.0, 1.0] || orthonormality_error(m) > 1e-3 {
        return bad("its pose is not a rigid transform");
    }
    if v.name.is_empty() {
        return bad("it has no name");
    }
    Ok(())
}

pub(crate) fn write_views_text(
    dir: &Path,
    views: &[SceneView],
    points: Option<&ScenePoints>,
) -> Result<(), IoError> {
    let images_path = dir.join("images.txt");
    let mut model = Model::default();
    let mut camera_of: HashMap<[u64; 6], u32> = HashMap::new();
    for (i, v) in views.iter().enumerate() {
        validate_view(&images_path, i, v)?;
        let k = &v.camera;
        let key = [
            k.width as u64,
            k.height as u64,
            k.fx.to_bits(),
            k.fy.to_bits(),
            k.cx.to_bits(),
            k.cy.to_bits(),
        ];
        let next_id = model.cameras.len() as u32 + 1;
        let camera_id = *camera_of.entry(key).or_insert_with(|| {
            model.cameras.push(Camera {
                id: next_id,
                model: "PINHOLE".into(),
                width: k.width as u64,
                height: k.height as u64,
                params: vec![k.fx, k.fy, k.cx, k.cy],
            });
            next_id
        });
        let m = &v.world_to_camera;
        model.images.push(Image {
            id: i as u32 + 1,
            qvec: rotation_to_quaternion(m),
            tvec: [m[0][3], m[1][3], m[2][3]],
            camera_id,
            name: v.name.clone(),
            points2d: Vec::new(),
        });
    }
    if let Some(p) = points {
        if p.xyz.len() != p.rgb.len() {
            return Err(dataset_error(
                &dir.join("points3D.txt"),
                format!("{} positions but {} colours", p.xyz.len(), p.rgb.len()),
            ));
        }
        model.points = p
            .xyz
            .iter()
            .zip(&p.rgb)
            .enumerate()
            .map(|(i, (xyz, rgb))| Point3D {
                id: i as u64 + 1,
                xyz: xyz.map(|v| v as f64),
                rgb: *rgb,
                error: 0.0,
                track: Vec::new(),
            })
            .collect();
        if let Some(i) = p.xyz.iter().position(|v| !v.iter().all(|x| x.is_finite())) {
            return Err(dataset_error(
                &dir.join("points3D.txt"),
                format!("point {i} is not finite"),
            ));
        }
    }
    write_model_text(dir, &model)
}

// ---------------------------------------------------------------------------
// Scene loading

/// Pinhole intrinsics and distortion of a supported camera.
fn intrinsics(
    c: &Camera,
    path: &Path,
) -> Result<(f64, f64, f64, f64, Option<RadTanDistortion>), IoError> {
    let p = &c.params;
    let expected = model_by_name(&c.model).map(|m| m.1);
    if expected != Some(p.len()) {
        return Err(malformed(
            path,
            format!("camera {} ({}) has {} parameters", c.id, c.model, p.len()),
        ));
    }
    require_finite(path, &format!("camera {}", c.id), p)?;
    let out = match c.model.as_str() {
        "SIMPLE_PINHOLE" => (p[0], p[0], p[1], p[2], None),
        "PINHOLE" => (p[0], p[1], p[2], p[3], None),
        "SIMPLE_RADIAL" => (
            p[0],
            p[0],
            p[1],
            p[2],
            Some(RadTanDistortion::new(p[3], 0.0, 0.0, 0.0)),
        ),
        "RADIAL" => (
            p[0],
            p[0],
            p[1],
            p[2],
            Some(RadTanDistortion::new(p[3], p[4], 0.0, 0.0)),
        ),
        "OPENCV" => (
            p[0],
            p[1],
            p[2],
            p[3],
            Some(RadTanDistortion::new(p[4], p[5], p[6], p[7])),
        ),
        "FULL_OPENCV" if p[9..12].iter().all(|&v| v == 0.0) => (
            p[0],
            p[1],
            p[2],
            p[3],
            Some(RadTanDistortion::new5(p[4], p[5], p[6], p[7], p[8])),
        ),
        other => {
            return Err(IoError::Unsupported {
                path: path.to_path_buf(),
                message: format!(
                    "camera {} uses the {other} camera model{}; supported models: {SUPPORTED_MODELS}",
                    c.id,
                    if other == "FULL_OPENCV" {
                        " with non-zero k4..k6"
                    } else {
                        ""
                    }
                ),
            });
        }
    };
    if !(out.0 > 0.0 && out.1 > 0.0) {
        return Err(malformed(
            path,
            format!("camera {} has a non-positive focal length", c.id),
        ));
    }
    Ok(out)
}

/// The mask of image `name` in `mask_dir`: `NAME.png` (COLMAP's convention), `STEM.png`
/// (nerfstudio) or `NAME`, the first that exists; when none does, the first, with the list of
/// names looked for (loading the view reports them).
fn find_mask(mask_dir: &Path, name: &str) -> MaskSource {
    let mut tried: Vec<PathBuf> = Vec::with_capacity(3);
    let with_png = scene_path(mask_dir, &format!("{name}.png"));
    let stem_png = scene_path(mask_dir, name).with_extension("png");
    let same = scene_path(mask_dir, name);
    for p in [with_png, stem_png, same] {
        if !tried.contains(&p) {
            tried.push(p);
        }
    }
    let path = tried
        .iter()
        .find(|p| p.is_file())
        .unwrap_or(&tried[0])
        .clone();
    MaskSource {
        path,
        origin: format!("the masks folder {}", mask_dir.display()),
        tried,
    }
}

/// The scene root of a model folder: the folder holding `images/`.
fn scene_root(path: &Path, model_dir: &Path) -> PathBuf {
    if model_dir != path || path.join("images").is_dir() {
        return path.to_path_buf();
    }
    let name = |p: &Path| p.file_name().map(|s| s.to_string_lossy().into_owned());
    let mut root = path.to_path_buf();
    if name(&root).is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        && root.parent().and_then(name).as_deref() == Some("sparse")
    {
        root = root.parent().expect("has parent").to_path_buf();
    }
    if name(&root).as_deref() == Some("sparse")
        && let Some(parent) = root.parent()
    {
        root = parent.to_path_buf();
    }
    root
}

/// COLMAP's usual project layout keeps the reconstruction in `sparse/0` (distorted camera
/// models, images in `images/`) and the output of `image_undistorter` in `dense/<n>/` (its own
/// `images/` and `sparse/`). When a project folder has no `images/` of its own, the first
/// `dense/<n>` with both a model and images is the scene that can be trained.
fn undistorted_model_beside(path: &Path) -> Option<PathBuf> {
    if path.join("images").is_dir() || !path.join("sparse").is_dir() {
        return None;
    }
    let mut dense: Vec<PathBuf> = std::fs::read_dir(path.join("dense"))
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|d| d.join("images").is_dir() && find_model_dir(d).is_some())
        .collect();
    dense.sort();
    dense.into_iter().next()
}

pub(crate) fn load(path: &Path, downscale: u32) -> Result<Loaded, IoError> {
    if let Some(dense) = undistorted_model_beside(path) {
        return load(&dense, downscale);
    }
    let model_dir = find_model_dir(path).ok_or_else(|| {
        dataset_error(
            path,
            "no COLMAP model: expected cameras.bin or cameras.txt in sparse/0/, sparse/ or the \
             folder itself",
        )
    })?;
    let root = scene_root(path, &model_dir);
    let (model, files) = read_model_files(&model_dir)?;
    let cameras: HashMap<u32, &Camera> = model.cameras.iter().map(|c| (c.id, c)).collect();
    let mut images: Vec<&Image> = model.images.iter().collect();
    images.sort_by(|a, b| a.name.cmp(&b.name));
    let image_dir = root.join("images");
    let small_dir = root.join(format!("images_{downscale}"));
    let mask_dir = root.join("masks");
    let has_masks = mask_dir.is_dir();
    let mut views = Vec::with_capacity(images.len());
    for im in images {
        let Some(cam) = cameras.get(&im.camera_id) else {
            return Err(malformed(
                &files.images,
                format!(
                    "image {} ('{}') refers to camera {}, which {} does not define",
                    im.id,
                    im.name,
                    im.camera_id,
                    files.cameras.display()
                ),
            ));
        };
        let (fx, fy, cx, cy, distortion) = intrinsics(cam, &files.cameras)?;
        let (Ok(width), Ok(height)) = (u32::try_from(cam.width), u32::try_from(cam.height)) else {
            return Err(malformed(
                &files.cameras,
                format!(
                    "camera {} has an impossible size {}x{}",
                    cam.id, cam.width, cam.height
                ),
            ));
        };
        if width == 0 || height == 0 {
            return Err(malformed(
                &files.cameras,
                format!("camera {} has an empty image size {width}x{height}", cam.id),
            ));
        }
        let qn = im.qvec.iter().map(|v| v * v).sum::<f64>().sqrt();
        if !(qn.is_finite() && qn > 1e-6 && im.tvec.iter().all(|v| v.is_finite())) {
            return Err(malformed(
                &files.images,
                format!(
                    "image {} ('{}') has an invalid pose (qvec {:?}, tvec {:?})",
                    im.id, im.name, im.qvec, im.tvec
                ),
            ));
        }
        if im.name.is_empty() {
            return Err(malformed(
                &files.images,
                format!("image {} has an empty name", im.id),
            ));
        }
        views.push(RawView {
            relative: im.name.clone(),
            image_path: scene_path(&image_dir, &im.name),
            downscaled_path: (downscale > 1).then(|| scene_path(&small_dir, &im.name)),
            camera: PinholeCamera::new(fx, fy, cx, cy, width, height).with_distortion(distortion),
            world_to_camera: im.world_to_camera(),
            calibration_origin: format!("camera {} of {}", cam.id, files.cameras.display()),
            mask: has_masks.then(|| find_mask(&mask_dir, &im.name)),
        });
    }
    let points = (!model.points.is_empty()).then(|| ScenePoints {
        xyz: model
            .points
            .iter()
            .map(|p| p.xyz.map(|v| v as f32))
            .collect(),
        rgb: model.points.iter().map(|p| p.rgb).collect(),
    });
    if let Some(p) = &points
        && let Some(i) = p.xyz.iter().position(|v| !v.iter().all(|x| x.is_finite()))
    {
        return Err(malformed(
            files.points.as_deref().unwrap_or(&model_dir),
            format!(
                "point {} has a position that is not finite",
                model.points[i].id
            ),
        ));
    }
    Ok(Loaded {
        root,
        views,
        points,
        source_file: files.images,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quaternion_round_trip() {
        for q in [
            [1.0, 0.0, 0.0, 0.0],
            [0.0, 1.0, 0.0, 0.0],
            [0.0, 0.0, 1.0, 0.0],
            [0.0, 0.0, 0.0, 1.0],
            [0.5, -0.5, 0.5, 0.5],
            [0.1, 0.7, -0.2, 0.3],
        ] {
            let im = Image {
                id: 1,
                qvec: q,
                tvec: [0.0; 3],
                camera_id: 1,
                name: "a".into(),
                points2d: vec![],
            };
            let m = im.world_to_camera();
            let back = rotation_to_quaternion(&m);
            let n = q.iter().map(|v| v * v).sum::<f64>().sqrt();
            let sign = if q[0] < 0.0 { -1.0 } else { 1.0 };
            for k in 0..4 {
                let expected = sign * q[k] / n;
                // q and -q are the same rotation; w >= 0 picks one (w = 0: either).
                assert!(
                    (back[k] - expected).abs() < 1e-12
                        || (q[0] == 0.0 && (back[k] + expected).abs() < 1e-12),
                    "{q:?} -> {back:?}"
                );
            }
        }
    }
}
