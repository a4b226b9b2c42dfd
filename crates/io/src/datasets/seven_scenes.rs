//! Microsoft 7-Scenes sequences.

use std::path::Path;

use rust3r_geometry::PinholeCamera;

use super::Pose;
use super::common::{self, data_lines, dataset_error, malformed, read_text, resolve_calibration};
use super::register::ColourRegistration;
use super::sequence::{DepthEncoding, FrameFiles, Sequence};
use crate::IoError;

/// Frames per second of the Kinect recordings (7-Scenes has no timestamps).
const FPS: f64 = 30.0;

/// Depth PNGs: millimetres, 65535 (besides 0) marking "no measurement".
const DEPTH: DepthEncoding = DepthEncoding {
    units_per_metre: 1000.0,
    invalid: Some(65535),
};

/// The frame number of `frame-NNNNNN.color.{png,jpg,jpeg}` (extension case-insensitive).
pub(crate) fn parse_color_name(name: &str) -> Option<u64> {
    let rest = name.strip_prefix("frame-")?;
    let (digits, ext) = rest.split_once(".color.")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if !common::is_image_extension(&ext.to_ascii_lowercase()) {
        return None;
    }
    digits.parse().ok()
}

/// Opens one 7-Scenes sequence folder (e.g. `redkitchen/seq-01`), keeping every `stride`-th
/// frame; `calibration` replaces the published one (see the module docs for what that changes):
///
/// * `frame-NNNNNN.color.png` (or `.jpg`): colour, 640x480;
/// * `frame-NNNNNN.depth.png` (optional): u16 millimetres, 0 and 65535 invalid. The depth
///   is in the depth camera's frame, *not* registered to the colour image;
/// * `frame-NNNNNN.pose.txt` (optional): 4x4 camera-to-world matrix, four rows of four numbers.
///   A pose containing non-finite values (`inf`/`nan`) is treated as unknown;
/// * `camera-intrinsics.txt` (optional): the 3x3 `K`; without it `fx = fy = 585`,
///   `cx = 320`, `cy = 240` (the values published for the data set): the depth camera's.
///
/// The colour camera of the Kinect is not the depth camera (another focal length and centre,
/// ~1 cm apart): a colour pixel and the depth pixel with the same coordinates are up to ~30 pixels
/// apart at the border. When the sequence has depth and no calibration override is given, each
/// frame's colour is therefore resampled into the depth camera with
/// [`ColourRegistration::seven_scenes`]
/// ([`register_colour_to_depth`](super::register_colour_to_depth)), and
/// [`Dataset::intrinsics`](super::Dataset::intrinsics) is the depth camera's: colour and depth
/// form one registered pair. A calibration override is taken to hold for both images as they are
/// (no resampling).
///
/// Frames are ordered by frame number; the timestamp is `frame_number / 30`.
///
/// `stride` is at least 1: [`open_with`](super::open_with), through which every data set is
/// opened, checks it.
pub(crate) fn open(
    path: &Path,
    stride: usize,
    calibration: Option<PinholeCamera>,
) -> Result<Sequence, IoError> {
    let names = common::list_dir(path)?;
    let mut colour: Vec<(u64, &String)> = names
        .iter()
        .filter_map(|n| parse_color_name(n).map(|k| (k, n)))
        .collect();
    if colour.is_empty() {
        // Reuse detect()'s explanation (e.g. a scene folder holding seq-NN).
        return Err(match super::detect(path) {
            Err(e) => e,
            Ok(_) => dataset_error(path, "no frame-NNNNNN.color.png/jpg files"),
        });
    }
    colour.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| common::natural_cmp(a.1, b.1)));
    if let Some(w) = colour.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(dataset_error(
            path,
            format!("frame {} appears twice ({} and {})", w[0].0, w[0].1, w[1].1),
        ));
    }

    let mut all = Vec::with_capacity(colour.len());
    for (number, name) in colour {
        let stem = name.split_once(".color.").expect("parsed").0;
        let depth = path.join(format!("{stem}.depth.png"));
        let pose_file = path.join(format!("{stem}.pose.txt"));
        let gt = if pose_file.is_file() {
            read_pose_matrix(&pose_file)?
        } else {
            None
        };
        all.push(FrameFiles {
            timestamp: number as f64 / FPS,
            rgb: path.join(name),
            depth: depth.is_file().then_some(depth),
            gt,
        });
    }

    let rgb_size = common::image_size(&all[0].rgb)?;
    let overridden = calibration.is_some();
    let base = match calibration {
        Some(k) => resolve_calibration(k, rgb_size, &all[0].rgb)?,
        None => {
            let k_file = path.join("camera-intrinsics.txt");
            let k = if k_file.is_file() {
                read_k(&k_file)?
            } else {
                PinholeCamera::new(585.0, 585.0, 320.0, 240.0, 0, 0)
            };
            k.with_size(rgb_size.0, rgb_size.1)
        }
    };
    let depth_intrinsics = match all.iter().find_map(|e| e.depth.as_ref()) {
        Some(d) => {
            let (width, height) = common::image_size(d)?;
            Some(base.with_size(width, height))
        }
        None => None,
    };
    let ground_truth: Vec<(f64, Pose)> = all
        .iter()
        .filter_map(|e| e.gt.map(|p| (e.timestamp, p)))
        .collect();
    let frames = all.into_iter().step_by(stride).collect();
    // Resampling of the colour images into the depth camera, when they are not registered.
    let registration =
        (!overridden && depth_intrinsics.is_some()).then(ColourRegistration::seven_scenes);
    // Registered colour is delivered at the depth camera's calibration and size.
    let intrinsics = match (registration, depth_intrinsics) {
        (Some(_), Some(d)) => d,
        _ => base,
    };
    Ok(Sequence {
        intrinsics: Some(intrinsics),
        depth_intrinsics,
        depth_encoding: DEPTH,
        registration,
        ground_truth: (!ground_truth.is_empty()).then_some(ground_truth),
        ..Sequence::new(common::display_name(path), path, frames)
    })
}

/// Reads a 4x4 pose file. `Ok(None)` when it holds non-finite values.
pub(crate) fn read_pose_matrix(path: &Path) -> Result<Option<Pose>, IoError> {
    let text = read_text(path)?;
    let mut rows = Vec::new();
    let mut finite = true;
    for (line, content) in data_lines(&text) {
        let tokens: Vec<&str> = content.split_whitespace().collect();
        if tokens.len() != 4 {
            return Err(malformed(
                path,
                format!(
                    "line {line}: expected 4 numbers (a row of the 4x4 pose), found {}",
                    tokens.len()
                ),
            ));
        }
        let mut row = [0.0; 4];
        for (v, t) in row.iter_mut().zip(&tokens) {
            *v = t
                .parse::<f64>()
                .map_err(|_| malformed(path, format!("line {line}: '{t}' is not a number")))?;
            finite &= v.is_finite();
        }
        rows.push((line, row));
    }
    if rows.len() != 4 {
        return Err(malformed(
            path,
            format!("expected 4 rows (a 4x4 pose), found {}", rows.len()),
        ));
    }
    if !finite {
        return Ok(None);
    }
    let (line, last) = rows[3];
    let expected = [0.0, 0.0, 0.0, 1.0];
    if last.iter().zip(expected).any(|(a, b)| (a - b).abs() > 1e-6) {
        return Err(malformed(
            path,
            format!("line {line}: the last row of a pose must be 0 0 0 1"),
        ));
    }
    let mut pose = [[0.0; 4]; 4];
    for (dst, (_, src)) in pose.iter_mut().zip(rows) {
        *dst = src;
    }
    Ok(Some(pose))
}

/// Reads `camera-intrinsics.txt` (a 3x3 K, rows on lines).
fn read_k(path: &Path) -> Result<PinholeCamera, IoError> {
    let text = read_text(path)?;
    let mut values = Vec::new();
    for (line, content) in data_lines(&text) {
        for token in content.split_whitespace() {
            values.push(common::parse_f64(token, path, line)?);
        }
    }
    if values.len() != 9 {
        return Err(malformed(
            path,
            format!(
                "expected a 3x3 camera matrix (9 numbers), found {} numbers",
                values.len()
            ),
        ));
    }
    if values[0] <= 0.0 || values[4] <= 0.0 {
        return Err(malformed(path, "focal lengths must be positive"));
    }
    Ok(PinholeCamera::new(
        values[0], values[4], values[2], values[5], 0, 0,
    ))
}
