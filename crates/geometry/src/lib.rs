//! Geometry primitives for rust3r (all `f64`).
//!
//! * [`SE3`] / [`Sim3`]: Lie groups in the lietorch layout
//!   (`[tx ty tz qx qy qz qw (s)]`, tangents `[tau phi (sigma)]`), with the
//!   exponential/logarithm maps, adjoints and left retraction `Exp(d) * T`
//!   implemented with lietorch's exact formulas.
//! * [`PinholeCamera`] and [`look_at`] (OpenCV camera convention: x right,
//!   y down, z forward).
//! * [`RadTanDistortion`]: OpenCV radial-tangential distortion, iterative
//!   undistortion, `getOptimalNewCameraMatrix` and `initUndistortRectifyMap`
//!   equivalents.
//! * [`mast3r_resize`]: the DUSt3R / MASt3R input resize-and-crop rules and the matching
//!   intrinsics transform.
// Library code returns errors; `expect` states the invariant that makes it unreachable.
#![warn(clippy::unwrap_used)]
#![warn(missing_docs)]

pub mod camera;
pub mod distortion;
pub mod mast3r_resize;
pub mod se3;
pub mod sim3;
pub mod so3;

pub use camera::{PinholeCamera, look_at};
pub use distortion::{
    RadTanDistortion, UndistortCriteria, UndistortMap, init_undistort_rectify_map,
    init_undistort_rectify_map_with_rotation, optimal_new_camera_matrix,
    optimal_new_camera_matrix_alpha0, optimal_new_camera_matrix_centered, undistort_points,
    undistort_rectangles,
};
pub use se3::SE3;
pub use sim3::{Matrix3x7, Matrix7, Sim3, Vector7};

/// Re-export of the linear-algebra crate used in the public API.
pub use nalgebra;
