//! rust3r SLAM components.
//!
//! Currently: trajectory I/O ([`trajectory`]: TUM and EuRoC formats) and
//! absolute-trajectory-error evaluation ([`ate`]) that reproduces evo's
//! `evo_ape` (association, Umeyama SE(3)/Sim(3) alignment, statistics).

#![warn(missing_docs)]

pub mod ate;
mod error;
pub mod trajectory;

pub use ate::{
    Align, AteOptions, AteReport, DEFAULT_MAX_DIFF, Umeyama, associate_trajectories,
    ate_from_trajectories, eval_ate, eval_ate_with_options, matching_time_indices,
    umeyama_alignment,
};
pub use error::SlamError;
pub use trajectory::{
    Trajectory, TrajectoryFormat, detect_format, format_tum, parse_euroc, parse_tum, read_euroc,
    read_trajectory, read_trajectory_with_format, read_tum, write_tum,
};
