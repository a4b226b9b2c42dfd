//! rust3r SLAM: MASt3R-SLAM's design in one process.
//!
//! * [`pointmap`]: pointmaps and the [`PointmapFrontEnd`] trait, with the RGB-D front end
//!   ([`RgbdFrontEnd`]); the MASt3R network (crate `rust3r-mast3r`) is another front end.
//! * [`matching`]: iterative-projection matching, occlusion check, descriptor refinement.
//! * [`pair`]: tracking on network pairs (MASt3R-SLAM's `mast3r_match_asymmetric` +
//!   `FrameTracker.track`): a [`PairFrontEnd`] decodes (frame, keyframe), matches are refined
//!   with the descriptors and weighted by the match quality `Q`.
//! * [`projective`]: projective association and fused normal equations for calibrated views
//!   (RGB-D), summed in parallel with deterministic fixed-chunk reductions ([`par`]).
//! * [`residuals`]: calibrated (pixel + log-depth), point-to-plane and uncalibrated (ray +
//!   distance) residuals with analytic Jacobians.
//! * [`tracker`]: frame-to-keyframe Gauss-Newton with Huber weights (coarse to fine for RGB-D).
//! * [`keyframes`]: growable keyframe store and pointmap fusion modes.
//! * [`backend`]: factor graph over keyframe poses, Gauss-Newton with a sparse Cholesky (faer).
//! * [`system`]: the whole pipeline ([`run_slam`]), back end in a background thread or inline
//!   (`single_thread`, bit-identical runs).
//! * [`output`]: trajectory / keyframes (TUM), coloured PLY, ground truth, nerfstudio
//!   `transforms.json`.
//! * [`kernels`]: GPU (CubeCL) versions of iterative projection and the tracking reductions.
//! * [`trajectory`] and [`ate`]: trajectory I/O (TUM, EuRoC) and evo-exact ATE.
//! * [`tsdf`]: a sparse truncated signed distance volume (integration, ray-casting), the
//!   KinectFusion model used to measure frame-to-model tracking (docs/slam-rgbd.md).
// Library code returns errors; `expect` states the invariant that makes it unreachable.
#![warn(clippy::unwrap_used)]
#![warn(missing_docs)]

pub mod appearance;
pub mod ate;
pub mod backend;
pub mod config;
pub mod depth_pairs;
mod error;
pub mod kernels;
pub mod keyframes;
pub mod matching;
pub mod model;
pub mod output;
pub mod pair;
pub mod par;
pub mod photometric;
pub mod pointmap;
pub mod projective;
pub mod residuals;
pub mod system;
pub mod tracker;
pub mod trajectory;
pub mod tsdf;

pub use ate::{
    Align, AteOptions, AteReport, DEFAULT_MAX_DIFF, Umeyama, associate_trajectories,
    ate_from_trajectories, eval_ate, eval_ate_with_options, matching_time_indices,
    relative_translation_errors, umeyama_alignment,
};
pub use config::{FusionMode, SlamConfig};
pub use error::SlamError;
pub use pair::{PairFrontEnd, PairPrediction};
pub use pointmap::{Pointmap, PointmapFrontEnd, RgbdFrontEnd};
pub use system::{
    FrameSource, Progress, SlamResult, Timings, TrackingState, run_slam, run_slam_source,
    run_slam_with,
};
pub use trajectory::{
    Trajectory, TrajectoryFormat, detect_format, format_tum, parse_euroc, parse_tum, read_euroc,
    read_trajectory, read_trajectory_with_format, read_tum, write_tum,
};
