//! EuRoC MAV sequences (left camera `cam0`).

use std::path::Path;

use rust3r_geometry::{PinholeCamera, RadTanDistortion};

use super::Pose;
use super::common::{
    self, data_lines, dataset_error, malformed, nearest, pose_from_tq, pose_mul, read_text,
    resolve_calibration, user_path,
};
use super::sequence::{FrameFiles, Sequence};
use super::yaml::MiniYaml;
use crate::IoError;

/// Largest timestamp difference (seconds) between a frame and its ground-truth sample.
const MAX_TIME_DIFFERENCE: f64 = 0.02;

const IDENTITY: Pose = [
    [1.0, 0.0, 0.0, 0.0],
    [0.0, 1.0, 0.0, 0.0],
    [0.0, 0.0, 1.0, 0.0],
    [0.0, 0.0, 0.0, 1.0],
];

/// A EuRoC MAV sequence (ASL folder format), opened at the folder holding `mav0/` or at `mav0/`:
///
/// * `mav0/cam0/data.csv`: `timestamp_ns,filename` per line; images in `mav0/cam0/data/`
///   (grey PNGs, returned as RGB);
/// * `mav0/cam0/sensor.yaml`: `resolution: [w, h]`, `intrinsics: [fu, fv, cu, cv]`,
///   `distortion_model: radial-tangential`, `distortion_coefficients: [k1, k2, p1, p2]` and the
///   body-to-camera extrinsics `T_BS`;
/// * `mav0/state_groundtruth_estimate0/data.csv` (optional): `timestamp_ns, px, py, pz, qw,
///   qx, qy, qz, ...` (pose of the IMU body in the world).
///
/// Ground truth is converted to the camera: `T_world_cam = T_world_body * T_BS`; the body poses
/// stay available through [`EurocDataset::body_ground_truth`]. Each frame takes the nearest
/// ground-truth sample less than 0.02 s away. Timestamps are in seconds.
#[derive(Debug, Clone)]
pub struct EurocDataset {
    sequence: Sequence,
    t_bs: Pose,
    body_gt: Option<Vec<(f64, Pose)>>,
}

fn parse_ns(token: &str, path: &Path, line: usize) -> Result<f64, IoError> {
    let ns: u64 = token.trim().parse().map_err(|_| {
        malformed(
            path,
            format!(
                "line {line}: '{}' is not a timestamp in nanoseconds",
                token.trim()
            ),
        )
    })?;
    Ok((ns / 1_000_000_000) as f64 + (ns % 1_000_000_000) as f64 * 1e-9)
}

/// Reads `sensor.yaml`: intrinsics (with distortion) and `T_BS`.
fn read_sensor_yaml(path: &Path) -> Result<(PinholeCamera, Pose), IoError> {
    let doc = MiniYaml::parse(&read_text(path)?);
    if let Some(model) = doc.string("camera_model")
        && model != "pinhole"
    {
        return Err(IoError::Unsupported {
            path: path.to_path_buf(),
            message: format!("camera_model '{model}' (only pinhole is supported)"),
        });
    }
    if let Some(model) = doc.string("distortion_model")
        && !matches!(model.as_str(), "radial-tangential" | "radtan" | "plumb_bob")
    {
        return Err(IoError::Unsupported {
            path: path.to_path_buf(),
            message: format!("distortion_model '{model}' (only radial-tangential is supported)"),
        });
    }
    let k = doc.numbers("intrinsics", path)?;
    let line = doc.line_of("intrinsics").unwrap_or(0);
    if k.len() != 4 || k[0] <= 0.0 || k[1] <= 0.0 {
        return Err(malformed(
            path,
            format!(
                "line {line}: 'intrinsics' should be [fu, fv, cu, cv] with positive focal lengths"
            ),
        ));
    }
    let res = doc.numbers("resolution", path)?;
    let line = doc.line_of("resolution").unwrap_or(0);
    let valid_side = |v: f64| v >= 1.0 && v <= u32::MAX as f64 && v.fract() == 0.0;
    if res.len() != 2 || !valid_side(res[0]) || !valid_side(res[1]) {
        return Err(malformed(
            path,
            format!("line {line}: 'resolution' should be [width, height]"),
        ));
    }
    let mut distortion = None;
    if doc.line_of("distortion_coefficients").is_some() {
        let dc = doc.numbers("distortion_coefficients", path)?;
        if !matches!(dc.len(), 4 | 5) {
            let line = doc.line_of("distortion_coefficients").unwrap_or(0);
            return Err(malformed(
                path,
                format!("line {line}: 'distortion_coefficients' should be [k1, k2, p1, p2(, k3)]"),
            ));
        }
        distortion = RadTanDistortion::from_slice(&dc);
    }
    let intrinsics = PinholeCamera::new(k[0], k[1], k[2], k[3], res[0] as u32, res[1] as u32)
        .with_distortion(distortion);
    let t_bs = if doc.line_of("T_BS.data").is_some() {
        let v = doc.numbers("T_BS.data", path)?;
        if v.len() != 16 {
            let line = doc.line_of("T_BS.data").unwrap_or(0);
            return Err(malformed(
                path,
                format!(
                    "line {line}: 'T_BS.data' should hold 16 numbers, found {}",
                    v.len()
                ),
            ));
        }
        let mut m = [[0.0; 4]; 4];
        for (r, row) in m.iter_mut().enumerate() {
            row.copy_from_slice(&v[r * 4..r * 4 + 4]);
        }
        m
    } else {
        IDENTITY
    };
    Ok((intrinsics, t_bs))
}

/// Reads the ground-truth csv (body poses), sorted by time.
fn read_groundtruth(path: &Path) -> Result<Vec<(f64, Pose)>, IoError> {
    let text = read_text(path)?;
    let mut out = Vec::new();
    for (line, content) in data_lines(&text) {
        let fields: Vec<&str> = content.split(',').map(str::trim).collect();
        if fields.len() < 8 {
            return Err(malformed(
                path,
                format!(
                    "line {line}: expected at least 8 comma-separated fields \
                     (timestamp, px, py, pz, qw, qx, qy, qz), found {}",
                    fields.len()
                ),
            ));
        }
        let t = parse_ns(fields[0], path, line)?;
        let mut v = [0.0; 7];
        for (dst, f) in v.iter_mut().zip(&fields[1..8]) {
            *dst = common::parse_f64(f, path, line)?;
        }
        let pose = pose_from_tq([v[0], v[1], v[2]], [v[4], v[5], v[6], v[3]])
            .ok_or_else(|| malformed(path, format!("line {line}: zero quaternion")))?;
        out.push((t, pose));
    }
    out.sort_by(|a, b| a.0.total_cmp(&b.0));
    Ok(out)
}

impl EurocDataset {
    /// Opens a sequence (the folder holding `mav0/`, or `mav0/` itself), keeping every
    /// `stride`-th frame; `calibration` replaces `sensor.yaml`'s intrinsics.
    pub fn open(
        path: &Path,
        stride: usize,
        calibration: Option<PinholeCamera>,
    ) -> Result<Self, IoError> {
        if stride == 0 {
            return Err(dataset_error(path, "the frame stride must be at least 1"));
        }
        let mav = if path.join("mav0/cam0/data.csv").is_file() || !path.join("cam0").is_dir() {
            path.join("mav0")
        } else {
            path.to_path_buf()
        };
        let cam = mav.join("cam0");
        let csv = cam.join("data.csv");
        let text = read_text(&csv)?;
        let data_dir = cam.join("data");
        let mut entries = Vec::new();
        for (line, content) in data_lines(&text) {
            let Some((ts, file)) = content.split_once(',') else {
                return Err(malformed(
                    &csv,
                    format!("line {line}: expected 'timestamp,filename', found '{content}'"),
                ));
            };
            entries.push((parse_ns(ts, &csv, line)?, user_path(&data_dir, file.trim())));
        }
        if entries.is_empty() {
            return Err(dataset_error(&csv, "lists no frames"));
        }

        let yaml = cam.join("sensor.yaml");
        let (intrinsics, t_bs) = match calibration {
            Some(k) => {
                let t_bs = if yaml.is_file() {
                    read_sensor_yaml(&yaml)?.1
                } else {
                    IDENTITY
                };
                let size = common::image_size(&entries[0].1)?;
                (resolve_calibration(k, size, &entries[0].1)?, t_bs)
            }
            None => read_sensor_yaml(&yaml)?,
        };

        let gt_csv = mav.join("state_groundtruth_estimate0/data.csv");
        let body_gt = if gt_csv.is_file() {
            Some(read_groundtruth(&gt_csv)?).filter(|g| !g.is_empty())
        } else {
            None
        };
        let camera_gt: Option<Vec<(f64, Pose)>> = body_gt
            .as_ref()
            .map(|g| g.iter().map(|(t, p)| (*t, pose_mul(p, &t_bs))).collect());
        let times: Vec<f64> = entries.iter().map(|(t, _)| *t).collect();
        let matches = match &camera_gt {
            Some(g) => {
                let gt_times: Vec<f64> = g.iter().map(|(t, _)| *t).collect();
                let m = nearest(&times, &gt_times, MAX_TIME_DIFFERENCE);
                if m.iter().all(Option::is_none) {
                    return Err(dataset_error(
                        &gt_csv,
                        format!(
                            "no ground-truth timestamp is within {MAX_TIME_DIFFERENCE} s of any \
                             timestamp in {}",
                            csv.display()
                        ),
                    ));
                }
                m
            }
            None => vec![None; times.len()],
        };
        let frames = entries
            .into_iter()
            .enumerate()
            .step_by(stride)
            .map(|(i, (timestamp, rgb))| FrameFiles {
                timestamp,
                rgb,
                depth: None,
                gt: matches[i].map(|j| camera_gt.as_ref().expect("matched")[j].1),
            })
            .collect();
        let name_dir = if mav.file_name().is_some_and(|n| n == "mav0") {
            mav.parent()
                .map(Path::to_path_buf)
                .unwrap_or_else(|| path.to_path_buf())
        } else {
            path.to_path_buf()
        };
        let sequence = Sequence {
            intrinsics: Some(intrinsics),
            ground_truth: camera_gt,
            ..Sequence::new(common::display_name(&name_dir), path, frames)
        };
        Ok(Self {
            sequence,
            t_bs,
            body_gt,
        })
    }

    /// The frames, camera and (camera) ground truth: the data set [`open`](super::open) returns.
    pub fn sequence(&self) -> &Sequence {
        &self.sequence
    }

    /// [`EurocDataset::sequence`], by value.
    pub fn into_sequence(self) -> Sequence {
        self.sequence
    }

    /// Body (IMU) to camera transform `T_BS` from `sensor.yaml` (identity if absent).
    pub fn body_to_camera(&self) -> Pose {
        self.t_bs
    }

    /// The ground truth as stored: poses of the IMU body in the world.
    pub fn body_ground_truth(&self) -> Option<&[(f64, Pose)]> {
        self.body_gt.as_deref()
    }
}
