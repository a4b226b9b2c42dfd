//! Differentiable Gaussian-splatting rasterizer (project, sort, bin,
//! rasterize, backward) on portable CubeCL kernels.
// Library code returns errors; `expect` states the invariant that makes it unreachable.
#![warn(clippy::unwrap_used)]

pub mod autodiff;
pub mod camera;
pub mod kernels;
pub mod render;
pub mod train;

pub use camera::Camera;
pub use render::{
    BackwardKernel, ChunkedGrads, GpuSplats, ParamGrads, RasterTuning, RenderOptions, RenderOutput,
    RenderState, ShCoeffs, ShPrecision, SplatGrads, TileStats, parse_background, render,
    render_backward, render_backward_chunks, render_backward_with, render_chunks, rows_per_chunk,
};

/// Errors of the splat crate.
#[derive(Debug, thiserror::Error)]
pub enum SplatError {
    #[error("invalid camera: {0}")]
    InvalidCamera(String),
    #[error("invalid splats: {0}")]
    InvalidSplats(String),
    #[error("checkpoint {0}")]
    Checkpoint(String),
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),
    #[error(transparent)]
    Gpu(#[from] rust3r_gpu::GpuError),
}
