//! CubeCL kernels of the rasterizer; host glue is in [`crate::render`].

pub mod project;
pub mod rasterize;
pub mod sh;
pub mod tiles;
