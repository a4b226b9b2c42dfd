//! CubeCL kernels of the rasterizer; host glue is in [`crate::render`].
//!
//! Where kernels live (the rule of the whole workspace, `docs/architecture.md`):
//! - a kernel that one host function launches sits in that function's file, above it (the
//!   primitives of `rust3r_gpu`, the trainer's kernels in [`crate::train`]);
//! - a kernel family launched from several host modules and checked against a CPU reference
//!   (this rasterizer; SLAM tracking) has a `kernels/` directory: one file per family, forward
//!   and backward side by side, holding only `#[cube]` code, its launch-argument structs and
//!   layout constants. No file here launches anything: [`crate::render`] and
//!   [`crate::autodiff`] do.
//!
//! Kernels that share a parameter list take `#[derive(CubeType, CubeLaunch)]` structs
//! ([`rasterize::BackwardArgs`], [`project::ProjectArgs`]) with their fields in binding order,
//! and shared compile-time choices as one `#[derive_cube_comptime]` struct
//! ([`project::ProjectConfig`]), not positional lists (a `#[cube]` function of seven or more
//! arguments needs `allow(clippy::too_many_arguments)`: its expansion takes the scope as well).
//! A struct parameter the kernel writes through is `mut` and holds buffers only: a `mut` struct
//! copies its scalar fields into variables. 1-D launches use
//! [`rust3r_gpu::Gpu::grid_1d`] with [`rust3r_gpu::BLOCK_DIM`] and find their unit with
//! [`rust3r_gpu::global_id`].

pub mod project;
pub mod rasterize;
pub mod sh;
pub mod tiles;
