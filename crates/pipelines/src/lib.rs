//! End-to-end pipelines that the `rust3r` binary (and other front ends) drive:
//!
//! * [`train`]: the training session of `rust3r train` ([`train::TrainSession`]): images on the
//!   device, the trainer, the evaluation / checkpoint schedule and `eval.json`, with progress as
//!   [`train::TrainEvent`]s;
//! * [`capture`]: capture to splat (`rust3r run`): SLAM, view selection, initialisation from the
//!   fused pointmaps, training with sensor depth, exposure and pose refinement, outputs.
//! * [`online`]: `rust3r run --online`'s trainer thread, fed with SLAM's keyframes while it
//!   tracks.
//!
//! Dependencies go one way: pipelines → splat / slam / lpips → gpu / geometry / io.
// Library code returns errors; `expect` states the invariant that makes it unreachable.
#![warn(clippy::unwrap_used)]

pub mod capture;
pub mod error;
pub mod online;
pub mod pose;
pub mod train;

pub use capture::{
    FrontEnd, Phase, RunEvent, RunOptions, RunSummary, run_capture, run_capture_with,
};
pub use error::PipelineError;
pub use train::{
    EvalRecord, FastSchedule, InitKind, Interpolated, RankFactory, Refinement, StrategyKind,
    TrainEvent, TrainOptions, TrainPreset, TrainSession, TrainSummary, ViewScore,
    train_data_parallel,
};
