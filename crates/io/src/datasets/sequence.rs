//! The base every data set reader builds: the frame list, calibration and ground truth, and
//! the one implementation of [`Dataset`] over them.

use std::path::{Path, PathBuf};

use rust3r_geometry::PinholeCamera;

use super::common::{self, dataset_error};
use super::register::{ColourRegistration, register_colour_to_depth};
use super::{Dataset, Frame, Pose};
use crate::IoError;

/// The files of one frame, as a reader lists them.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FrameFiles {
    /// Capture time, seconds.
    pub timestamp: f64,
    /// Colour image.
    pub rgb: PathBuf,
    /// Depth image, when one is associated with the frame.
    pub depth: Option<PathBuf>,
    /// Ground-truth camera-to-world pose, when known.
    pub gt: Option<Pose>,
}

/// How depth PNGs store metres: `value / units_per_metre`, 0 and `invalid` marking pixels
/// without a measurement.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct DepthEncoding {
    /// Stored units per metre (5000 for TUM, 1000 for 7-Scenes).
    pub units_per_metre: f32,
    /// A value other than 0 that marks a missing measurement (65535 in 7-Scenes).
    pub invalid: Option<u16>,
}

/// An opened data set: what a reader parsed from its files. [`open`](super::open) returns it
/// as a [`Dataset`]; images are decoded by [`Dataset::frame`].
#[derive(Debug, Clone)]
pub struct Sequence {
    /// Name of the sequence (its folder or file name).
    pub(crate) name: String,
    /// The path it was opened at (named by errors).
    pub(crate) root: PathBuf,
    /// The frames kept (after the stride).
    pub(crate) frames: Vec<FrameFiles>,
    /// Calibration of the delivered colour images.
    pub(crate) intrinsics: Option<PinholeCamera>,
    /// Calibration of the depth images (`None` without depth).
    pub(crate) depth_intrinsics: Option<PinholeCamera>,
    /// How the depth images encode metres.
    pub(crate) depth_encoding: DepthEncoding,
    /// Colour resampled into the depth camera (7-Scenes' unregistered Kinect), when set.
    pub(crate) registration: Option<ColourRegistration>,
    /// The whole ground-truth trajectory, independent of the stride.
    pub(crate) ground_truth: Option<Vec<(f64, Pose)>>,
}

impl Sequence {
    /// A sequence of `frames` named `name`, opened at `root`, without calibration, depth or
    /// ground truth (the reader sets those it has).
    pub(crate) fn new(name: String, root: &Path, frames: Vec<FrameFiles>) -> Self {
        Self {
            name,
            root: root.to_path_buf(),
            frames,
            intrinsics: None,
            depth_intrinsics: None,
            depth_encoding: DepthEncoding {
                units_per_metre: 1000.0,
                invalid: None,
            },
            registration: None,
            ground_truth: None,
        }
    }

    /// The colour image files, in frame order.
    pub fn paths(&self) -> impl Iterator<Item = &Path> {
        self.frames.iter().map(|f| f.rgb.as_path())
    }

    /// Number of frames that have an associated depth image.
    pub fn depth_count(&self) -> usize {
        self.frames.iter().filter(|f| f.depth.is_some()).count()
    }
}

impl Dataset for Sequence {
    fn name(&self) -> &str {
        &self.name
    }

    fn len(&self) -> usize {
        self.frames.len()
    }

    fn intrinsics(&self) -> Option<PinholeCamera> {
        self.intrinsics
    }

    fn depth_intrinsics(&self) -> Option<PinholeCamera> {
        self.depth_intrinsics
    }

    fn frame(&self, i: usize) -> Result<Frame, IoError> {
        let entry = self.frames.get(i).ok_or_else(|| {
            dataset_error(
                &self.root,
                format!("frame {i} is out of range ({} frames)", self.frames.len()),
            )
        })?;
        let mut rgb = common::read_rgb(&entry.rgb)?;
        let depth = match &entry.depth {
            Some(p) => {
                let e = self.depth_encoding;
                Some(common::read_depth(
                    p,
                    e.units_per_metre,
                    e.invalid.as_slice(),
                )?)
            }
            None => None,
        };
        if let (Some(reg), Some(depth), Some(depth_k)) =
            (&self.registration, &depth, &self.depth_intrinsics)
        {
            rgb = register_colour_to_depth(&rgb, depth, depth_k, reg);
        }
        Ok(Frame {
            index: i,
            timestamp: entry.timestamp,
            rgb,
            depth,
            gt_pose: entry.gt,
            rgb_path: entry.rgb.clone(),
        })
    }

    fn colour_resampled(&self) -> bool {
        self.registration.is_some()
    }

    fn ground_truth(&self) -> Option<Vec<(f64, Pose)>> {
        self.ground_truth.clone()
    }
}
