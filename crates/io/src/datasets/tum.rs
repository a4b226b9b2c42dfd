//! TUM RGB-D and ETH3D SLAM sequences (the same text-list layout).

use std::path::{Path, PathBuf};

use rust3r_geometry::{PinholeCamera, RadTanDistortion};

use super::common::{
    self, associate, data_lines, dataset_error, malformed, nearest, read_text, read_tum_trajectory,
    resolve_calibration, user_path,
};
use super::sequence::{DepthEncoding, FrameFiles, Sequence};
use crate::IoError;

/// Largest timestamp difference (seconds) for associating depth and ground truth with a colour
/// frame, as TUM's `associate.py` default.
pub const MAX_TIME_DIFFERENCE: f64 = 0.02;

/// Depth PNGs of TUM RGB-D and ETH3D: 5000 units per metre.
const DEPTH: DepthEncoding = DepthEncoding {
    units_per_metre: 5000.0,
    invalid: None,
};

/// TUM's published calibration of the colour camera of `freiburg` 1, 2 or 3 (640x480, OpenCV
/// distortion `[k1 k2 p1 p2 k3]` = TUM's `d0..d4`; freiburg3 images have no distortion).
pub fn tum_intrinsics(freiburg: u32) -> Option<PinholeCamera> {
    let (fx, fy, cx, cy, d) = match freiburg {
        1 => (
            517.3,
            516.5,
            318.6,
            255.3,
            [0.2624, -0.9531, -0.0054, 0.0026, 1.1633],
        ),
        2 => (
            520.9,
            521.0,
            325.1,
            249.7,
            [0.2312, -0.7849, -0.0033, -0.0001, 0.9172],
        ),
        3 => (535.4, 539.2, 320.1, 247.6, [0.0; 5]),
        _ => return None,
    };
    let [k1, k2, p1, p2, k3] = d;
    Some(
        PinholeCamera::new(fx, fy, cx, cy, 640, 480)
            .with_distortion(Some(RadTanDistortion::new5(k1, k2, p1, p2, k3))),
    )
}

/// The `N` of the last `freiburgN` in the path (after resolving `.` and links).
fn freiburg_number(path: &Path) -> Option<u32> {
    let canon = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    for comp in canon.components().rev() {
        let s = comp.as_os_str().to_string_lossy().to_ascii_lowercase();
        if let Some(pos) = s.rfind("freiburg") {
            let digits: String = s[pos + "freiburg".len()..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            if let Ok(n) = digits.parse() {
                return Some(n);
            }
        }
    }
    None
}

/// Opens a TUM RGB-D (`eth3d = false`) or ETH3D SLAM (`eth3d = true`) sequence, keeping every
/// `stride`-th frame; `calibration` replaces the data set's own (see
/// [`OpenOptions::calibration`](super::OpenOptions::calibration)).
///
/// * `rgb.txt` / `depth.txt`: `timestamp path` per line (`#` comments), paths relative to the
///   folder. Depth is associated with each colour frame like TUM's `associate.py` (one-to-one,
///   closest pairs first, less than [`MAX_TIME_DIFFERENCE`] apart); a colour frame without a
///   match keeps `depth: None`. Depth PNGs are u16, 5000 units per metre, registered to the
///   colour camera.
/// * `groundtruth.txt` (optional): `timestamp tx ty tz qx qy qz qw` (camera-to-world); each
///   colour frame takes the nearest pose less than [`MAX_TIME_DIFFERENCE`] away.
/// * Calibration: ETH3D reads `calibration.txt` (`fx fy cx cy`, size from the first image);
///   TUM uses the published calibration of the camera named by `freiburg1/2/3` in the folder
///   name ([`tum_intrinsics`]), and otherwise requires one to be passed.
///
/// `stride` is at least 1: [`open_with`](super::open_with), through which every data set is
/// opened, checks it.
pub(crate) fn open(
    path: &Path,
    eth3d: bool,
    stride: usize,
    calibration: Option<PinholeCamera>,
) -> Result<Sequence, IoError> {
    let rgb_txt = path.join("rgb.txt");
    let rgb = read_list(&rgb_txt, path)?;
    if rgb.is_empty() {
        return Err(dataset_error(&rgb_txt, "lists no frames"));
    }
    let times: Vec<f64> = rgb.iter().map(|(t, _)| *t).collect();

    // Depth.
    let depth_txt = path.join("depth.txt");
    let (depth_match, depth_files, has_depth) = if depth_txt.is_file() {
        let depth = read_list(&depth_txt, path)?;
        let dt: Vec<f64> = depth.iter().map(|(t, _)| *t).collect();
        let m = associate(&times, &dt, MAX_TIME_DIFFERENCE);
        if !depth.is_empty() && m.iter().all(Option::is_none) {
            return Err(dataset_error(
                &depth_txt,
                format!(
                    "no depth timestamp is within {MAX_TIME_DIFFERENCE} s of any timestamp \
                     in {} (rgb {:.6}..{:.6}, depth {:.6}..{:.6})",
                    rgb_txt.display(),
                    times[0],
                    times[times.len() - 1],
                    dt[0],
                    dt[dt.len() - 1]
                ),
            ));
        }
        let has = !depth.is_empty();
        (m, depth.into_iter().map(|(_, p)| p).collect(), has)
    } else {
        (vec![None; times.len()], Vec::new(), false)
    };

    // Ground truth.
    let gt_txt = path.join("groundtruth.txt");
    let (gt_match, ground_truth) = if gt_txt.is_file() {
        let mut gt = read_tum_trajectory(&gt_txt)?;
        gt.sort_by(|a, b| a.0.total_cmp(&b.0));
        let gt_times: Vec<f64> = gt.iter().map(|(t, _)| *t).collect();
        let m = nearest(&times, &gt_times, MAX_TIME_DIFFERENCE);
        if !gt.is_empty() && m.iter().all(Option::is_none) {
            return Err(dataset_error(
                &gt_txt,
                format!(
                    "no ground-truth timestamp is within {MAX_TIME_DIFFERENCE} s of any \
                     timestamp in {}",
                    rgb_txt.display()
                ),
            ));
        }
        (m, (!gt.is_empty()).then_some(gt))
    } else {
        (vec![None; times.len()], None)
    };

    // Calibration.
    let intrinsics = if let Some(calib) = calibration {
        resolve_calibration(calib, common::image_size(&rgb[0].1)?, &rgb[0].1)?
    } else if eth3d {
        let calib_txt = path.join("calibration.txt");
        let k = super::read_calibration(&calib_txt)?;
        resolve_calibration(k, common::image_size(&rgb[0].1)?, &rgb[0].1)?
    } else {
        match freiburg_number(path).and_then(tum_intrinsics) {
            Some(k) => k,
            None => {
                return Err(dataset_error(
                    path,
                    "cannot tell the TUM camera from the folder name (it should contain \
                     freiburg1, freiburg2 or freiburg3, as in rgbd_dataset_freiburg1_desk); \
                     pass the camera calibration explicitly (--calib FILE)",
                ));
            }
        }
    };

    let frames = rgb
        .into_iter()
        .enumerate()
        .step_by(stride)
        .map(|(i, (timestamp, file))| FrameFiles {
            timestamp,
            rgb: file,
            depth: depth_match[i].map(|j| depth_files[j].clone()),
            gt: gt_match[i].map(|j| ground_truth.as_ref().expect("matched")[j].1),
        })
        .collect();
    Ok(Sequence {
        intrinsics: Some(intrinsics),
        depth_intrinsics: has_depth.then_some(intrinsics),
        depth_encoding: DEPTH,
        ground_truth,
        ..Sequence::new(common::display_name(path), path, frames)
    })
}

/// Parses a `timestamp path` list.
fn read_list(path: &Path, base: &Path) -> Result<Vec<(f64, PathBuf)>, IoError> {
    let text = read_text(path)?;
    let mut out = Vec::new();
    for (line, content) in data_lines(&text) {
        let Some((ts, file)) = content.split_once(char::is_whitespace) else {
            return Err(malformed(
                path,
                format!("line {line}: expected 'timestamp filename', found '{content}'"),
            ));
        };
        let t = common::parse_f64(ts, path, line)?;
        out.push((t, user_path(base, file.trim())));
    }
    Ok(out)
}
