//! Timestamped pose trajectories and their file formats.
//!
//! * TUM RGB-D: `timestamp tx ty tz qx qy qz qw` (whitespace separated,
//!   timestamps in seconds, `#` comment lines).
//! * EuRoC MAV ground truth CSV (`state_groundtruth_estimate0/data.csv`):
//!   `#timestamp [ns], p_RS_R_x, p_RS_R_y, p_RS_R_z, q_RS_w, q_RS_x, q_RS_y,
//!   q_RS_z, ...` (comma separated, timestamps in nanoseconds, quaternion with
//!   `w` first, extra columns ignored).
//!
//! Parsing follows evo's `file_interface` readers, but reports malformed input
//! as [`SlamError`]s that name the file and the 1-based line number.

use std::fmt;
use std::path::{Path, PathBuf};

use nalgebra::{Quaternion, UnitQuaternion, Vector3};
use rust3r_geometry::SE3;
use serde::{Deserialize, Serialize};

use crate::SlamError;

/// A sequence of timestamped poses. In both supported formats a pose maps
/// body/camera coordinates to world coordinates (`T_world_body`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Trajectory {
    /// Timestamps in seconds, one per pose.
    pub timestamps: Vec<f64>,
    /// Poses, one per timestamp.
    pub poses: Vec<SE3>,
}

/// Supported trajectory file formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TrajectoryFormat {
    /// TUM RGB-D format: `timestamp tx ty tz qx qy qz qw`.
    Tum,
    /// EuRoC ground-truth CSV: `timestamp_ns, px, py, pz, qw, qx, qy, qz, ...`.
    Euroc,
}

impl fmt::Display for TrajectoryFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TrajectoryFormat::Tum => f.write_str("tum"),
            TrajectoryFormat::Euroc => f.write_str("euroc"),
        }
    }
}

impl Trajectory {
    /// Creates a trajectory; returns an error if the lengths differ.
    pub fn new(timestamps: Vec<f64>, poses: Vec<SE3>) -> Result<Self, SlamError> {
        if timestamps.len() != poses.len() {
            return Err(SlamError::InvalidArgument(format!(
                "{} timestamps but {} poses",
                timestamps.len(),
                poses.len()
            )));
        }
        Ok(Self { timestamps, poses })
    }

    /// The trajectory of timestamped Sim(3) camera-to-world poses (a SLAM run's
    /// [`crate::SlamResult::frame_poses`]): their rigid parts, i.e. rotations and camera centres.
    pub fn from_sim3(poses: &[(f64, rust3r_geometry::Sim3)]) -> Self {
        let mut t = Self::default();
        for (ts, p) in poses {
            t.push(*ts, p.to_se3());
        }
        t
    }

    /// The trajectory of timestamped 4x4 camera-to-world matrices (a data set's
    /// [`rust3r_io::datasets::Dataset::ground_truth`]).
    pub fn from_matrices(poses: &[(f64, rust3r_io::datasets::Pose)]) -> Self {
        let mut t = Self::default();
        for (ts, m) in poses {
            t.push(*ts, crate::output::pose_to_sim3(m).to_se3());
        }
        t
    }

    /// Number of poses.
    pub fn len(&self) -> usize {
        self.poses.len()
    }

    /// Whether the trajectory has no poses.
    pub fn is_empty(&self) -> bool {
        self.poses.is_empty()
    }

    /// Appends a pose.
    pub fn push(&mut self, timestamp: f64, pose: SE3) {
        self.timestamps.push(timestamp);
        self.poses.push(pose);
    }

    /// Positions (translations) of all poses.
    pub fn positions(&self) -> Vec<Vector3<f64>> {
        self.poses.iter().map(|p| p.translation).collect()
    }

    /// Sub-trajectory with the poses at `indices` (in that order).
    pub fn select(&self, indices: &[usize]) -> Self {
        Self {
            timestamps: indices.iter().map(|&i| self.timestamps[i]).collect(),
            poses: indices.iter().map(|&i| self.poses[i]).collect(),
        }
    }

    /// Whether the timestamps are non-decreasing.
    pub fn is_sorted(&self) -> bool {
        self.timestamps.windows(2).all(|w| w[0] <= w[1])
    }
}

fn io_err(path: &Path, source: std::io::Error) -> SlamError {
    SlamError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn parse_err(path: &Path, line: usize, message: impl Into<String>) -> SlamError {
    SlamError::Parse {
        path: path.to_path_buf(),
        line,
        message: message.into(),
    }
}

fn read_text(path: &Path) -> Result<String, SlamError> {
    let text = std::fs::read_to_string(path).map_err(|e| io_err(path, e))?;
    Ok(match text.strip_prefix('\u{feff}') {
        Some(t) => t.to_owned(),
        None => text,
    })
}

/// Iterates over `(1-based line number, line)` of data lines: blank lines and
/// lines starting with `#` are skipped.
fn data_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines().enumerate().filter_map(|(i, l)| {
        let t = l.trim();
        if t.is_empty() || t.starts_with('#') {
            None
        } else {
            Some((i + 1, t))
        }
    })
}

fn parse_field(path: &Path, line: usize, field: &str, name: &str) -> Result<f64, SlamError> {
    let v: f64 = field.parse().map_err(|_| {
        parse_err(
            path,
            line,
            format!("cannot parse {name} {field:?} as a number"),
        )
    })?;
    if !v.is_finite() {
        return Err(parse_err(
            path,
            line,
            format!("{name} is not finite ({field})"),
        ));
    }
    Ok(v)
}

fn make_pose(
    path: &Path,
    line: usize,
    t: [f64; 3],
    (w, x, y, z): (f64, f64, f64, f64),
) -> Result<SE3, SlamError> {
    let q = Quaternion::new(w, x, y, z);
    let n = q.norm();
    if n.is_nan() || n <= 1e-12 {
        return Err(parse_err(path, line, "quaternion has zero norm"));
    }
    Ok(SE3::new(
        UnitQuaternion::new_normalize(q),
        Vector3::new(t[0], t[1], t[2]),
    ))
}

/// Parses TUM-format text (`timestamp tx ty tz qx qy qz qw`); `path` is only
/// used in error messages.
pub fn parse_tum(text: &str, path: &Path) -> Result<Trajectory, SlamError> {
    const NAMES: [&str; 8] = ["timestamp", "tx", "ty", "tz", "qx", "qy", "qz", "qw"];
    let mut traj = Trajectory::default();
    for (ln, line) in data_lines(text) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() != 8 {
            return Err(parse_err(
                path,
                ln,
                format!(
                    "TUM trajectory lines must have 8 whitespace-separated entries \
                     (timestamp tx ty tz qx qy qz qw), found {}",
                    fields.len()
                ),
            ));
        }
        let mut v = [0.0; 8];
        for (k, f) in fields.iter().enumerate() {
            v[k] = parse_field(path, ln, f, NAMES[k])?;
        }
        let pose = make_pose(path, ln, [v[1], v[2], v[3]], (v[7], v[4], v[5], v[6]))?;
        traj.push(v[0], pose);
    }
    if traj.is_empty() {
        return Err(SlamError::EmptyTrajectory {
            path: path.to_path_buf(),
        });
    }
    Ok(traj)
}

/// Parses EuRoC ground-truth CSV text (`timestamp_ns, px, py, pz, qw, qx, qy,
/// qz, ...`); timestamps are converted to seconds (`ns / 1e9`, as evo does).
/// `path` is only used in error messages.
pub fn parse_euroc(text: &str, path: &Path) -> Result<Trajectory, SlamError> {
    const NAMES: [&str; 8] = [
        "timestamp",
        "p_RS_R_x",
        "p_RS_R_y",
        "p_RS_R_z",
        "q_RS_w",
        "q_RS_x",
        "q_RS_y",
        "q_RS_z",
    ];
    let mut traj = Trajectory::default();
    for (ln, line) in data_lines(text) {
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        if fields.len() < 8 {
            return Err(parse_err(
                path,
                ln,
                format!(
                    "EuRoC CSV lines must have at least 8 comma-separated entries \
                     (timestamp[ns], px, py, pz, qw, qx, qy, qz), found {}",
                    fields.len()
                ),
            ));
        }
        let mut v = [0.0; 8];
        for k in 0..8 {
            v[k] = parse_field(path, ln, fields[k], NAMES[k])?;
        }
        let pose = make_pose(path, ln, [v[1], v[2], v[3]], (v[4], v[5], v[6], v[7]))?;
        traj.push(v[0] / 1e9, pose);
    }
    if traj.is_empty() {
        return Err(SlamError::EmptyTrajectory {
            path: path.to_path_buf(),
        });
    }
    Ok(traj)
}

/// Reads a TUM-format trajectory file.
pub fn read_tum(path: impl AsRef<Path>) -> Result<Trajectory, SlamError> {
    let path = path.as_ref();
    parse_tum(&read_text(path)?, path)
}

/// Reads an EuRoC ground-truth CSV file.
pub fn read_euroc(path: impl AsRef<Path>) -> Result<Trajectory, SlamError> {
    let path = path.as_ref();
    parse_euroc(&read_text(path)?, path)
}

/// Detects the format of trajectory text: comma-separated data (or an EuRoC
/// header such as `#timestamp [ns], p_RS_R_x ...`) means EuRoC,
/// whitespace-separated data means TUM. Falls back to the extension
/// (`.csv` -> EuRoC, otherwise TUM) for files without data lines.
pub fn detect_format(text: &str, path: &Path) -> Result<TrajectoryFormat, SlamError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    if let Some((_, line)) = data_lines(text).next() {
        if line.contains(',') {
            return Ok(TrajectoryFormat::Euroc);
        }
        let n = line.split_whitespace().count();
        if n == 8 {
            return Ok(TrajectoryFormat::Tum);
        }
        return Err(SlamError::UnknownFormat {
            path: path.to_path_buf(),
            message: format!(
                "cannot detect trajectory format: first data line has {n} whitespace-separated \
                 entries and no commas (expected TUM `timestamp tx ty tz qx qy qz qw` or EuRoC CSV)"
            ),
        });
    }
    let header_is_euroc = text
        .lines()
        .any(|l| l.trim_start().starts_with('#') && (l.contains("p_RS_R_x") || l.contains(',')));
    let ext_is_csv = path
        .extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case("csv"));
    Ok(if header_is_euroc || ext_is_csv {
        TrajectoryFormat::Euroc
    } else {
        TrajectoryFormat::Tum
    })
}

/// Reads a trajectory file, detecting its format with [`detect_format`].
pub fn read_trajectory(path: impl AsRef<Path>) -> Result<Trajectory, SlamError> {
    Ok(read_trajectory_with_format(path)?.0)
}

/// Like [`read_trajectory`], also returning the detected format.
pub fn read_trajectory_with_format(
    path: impl AsRef<Path>,
) -> Result<(Trajectory, TrajectoryFormat), SlamError> {
    let path = path.as_ref();
    let text = read_text(path)?;
    let format = detect_format(&text, path)?;
    let traj = match format {
        TrajectoryFormat::Tum => parse_tum(&text, path)?,
        TrajectoryFormat::Euroc => parse_euroc(&text, path)?,
    };
    Ok((traj, format))
}

/// Formats a trajectory as TUM text (with a `#` header line). Numbers use the
/// shortest representation that round-trips exactly.
pub fn format_tum(traj: &Trajectory) -> String {
    let mut s = String::from("# timestamp tx ty tz qx qy qz qw\n");
    for (t, p) in traj.timestamps.iter().zip(&traj.poses) {
        let d = p.data();
        s.push_str(&format!(
            "{t} {} {} {} {} {} {} {}\n",
            d[0], d[1], d[2], d[3], d[4], d[5], d[6]
        ));
    }
    s
}

/// Writes a trajectory in TUM format.
pub fn write_tum(path: impl AsRef<Path>, traj: &Trajectory) -> Result<(), SlamError> {
    let path = path.as_ref();
    std::fs::write(path, format_tum(traj)).map_err(|e| io_err(path, e))
}

/// Display name of a trajectory file (its file name) for messages.
pub(crate) fn display_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| {
            let p: PathBuf = path.to_path_buf();
            p.display().to_string()
        })
}
