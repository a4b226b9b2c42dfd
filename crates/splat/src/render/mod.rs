//! Host side of the rasterizer: project, cull, depth-sort, bin into tiles,
//! tile-sort, blend; and the backward pass through the same stages.
//!
//! - `splats`: the Gaussians on the device ([`GpuSplats`], [`ShCoeffs`], chunks);
//! - this file: the options, outputs and gradients shared by both directions;
//! - `forward`: [`render`] / [`render_chunks`] launch the projection, sort, binning and
//!   blending kernels (`crate::kernels`);
//! - `backward`: [`render_backward`] and its variants run the same stages in reverse;
//! - `policy`: the per-adapter choices both directions make (kernel variants, batch sizes) and
//!   the placeholder-slot table.

mod backward;
mod forward;
mod policy;
mod splats;

pub use backward::{render_backward, render_backward_chunks, render_backward_with};
pub use forward::{render, render_chunks};
pub use splats::{GpuSplats, ShCoeffs, ShPrecision, rows_per_chunk};

use rust3r_gpu::{Gpu, GpuBuffer};

use crate::{Camera, SplatError};

/// Parse a background colour "r,g,b" (each finite, normally in [0, 1]), as `rust3r render
/// --background` takes it.
pub fn parse_background(s: &str) -> Result<[f32; 3], SplatError> {
    let bad = || SplatError::InvalidConfig(format!("background '{s}' is not r,g,b"));
    let v: Vec<f32> = s
        .split(',')
        .map(|p| p.trim().parse::<f32>())
        .collect::<Result<_, _>>()
        .map_err(|_| bad())?;
    match v[..] {
        [r, g, b] if v.iter().all(|x| x.is_finite()) => Ok([r, g, b]),
        _ => Err(bad()),
    }
}

/// Rendering options.
#[derive(Clone, Debug)]
pub struct RenderOptions {
    pub background: [f32; 3],
    /// Mip-Splatting style antialiasing: opacity compensated for the 0.3 px dilation.
    pub antialiased: bool,
    /// SH degree to evaluate (`None`: all the splats have).
    pub sh_degree: Option<u32>,
    pub near: f32,
    pub far: f32,
    /// Bound on the work of one forward dispatch: at most this many batches of 256
    /// Gaussians per tile. Tiles holding more are finished over several dispatches, so a
    /// dense tile never trips an OS GPU watchdog. Default 4096 (1M Gaussians per
    /// tile per dispatch); when a frame has more intersections than that in total,
    /// finding the longest tile costs one extra read-back. (The backward pass is bounded per
    /// cube by `checkpoint_every`.)
    pub max_batches_per_dispatch: u32,
    /// The forward pass saves every tile's blend state each this many batches of 256
    /// intersections, and the backward pass works on each such chunk of a tile in a cube of its
    /// own, so a dense tile does not leave the rest of the GPU idle. Capped by
    /// `max_batches_per_dispatch`. Default 4 (1024 intersections; 5 KiB per checkpoint, about
    /// 5 bytes per intersection).
    pub checkpoint_every: u32,
    /// Make the backward pass bit-reproducible run to run: gradient rows per intersection
    /// summed in a fixed order, instead of float atomics (faster, used where the adapter has
    /// them) whose addition order varies.
    pub deterministic: bool,
    /// Also sum the absolute per-pixel gradients of the 2D means (gsplat's `absgrad`, a
    /// densification signal): [`SplatGrads::means2d_abs`].
    pub absgrad: bool,
    /// Which backward kernel reduces the per-pixel gradients.
    pub backward_kernel: BackwardKernel,
    /// No backward pass will follow (viewers, evaluation, `rust3r render`): the forward pass
    /// writes no checkpoints (about 5 bytes per intersection, and their stores), and
    /// [`render_backward`] on its state is an error.
    pub forward_only: bool,
    /// The backward pass writes the SH coefficients' gradient ([`ParamGrads::sh`], 12 bytes
    /// per coefficient and Gaussian). Off: `sh` is left empty, for a consumer that computes
    /// it where it needs it from [`RenderState::sh_grad_inputs`] and the projected gradient
    /// (the trainer's fused SH Adam step). Default on.
    pub sh_grad: bool,
    /// Kernel layout choices, `Default` picking them per adapter.
    pub tuning: RasterTuning,
}

/// The rasterizer's kernel layout choices that depend on the adapter. `Default` (every field
/// `None`) chooses them per adapter as measured (docs/tuning.md); a value forces one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RasterTuning {
    /// The forward pass stages each batch of Gaussians in shared memory as 4-vectors (`true`)
    /// or as scalar arrays (`false`). `None`: 4-vectors through CUDA, scalars elsewhere (the
    /// vectors were slower through Vulkan).
    pub vec_shared: Option<bool>,
    /// Upper bound on the Gaussians per batch of the portable backward kernel, which takes
    /// the largest of 16, 8 and 4 that fits the adapter's shared memory. `None`: 16.
    pub backward_batch_cap: Option<usize>,
}

/// The rasterizer's backward kernels.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BackwardKernel {
    /// Subgroup reductions where the adapter has subgroups (wgpu), the portable kernel
    /// otherwise and always on CUDA.
    #[default]
    Auto,
    /// Subgroup reductions wherever the adapter has them, CUDA included.
    Subgroup,
    /// The portable shared-memory kernel.
    Portable,
}

impl Default for RenderOptions {
    fn default() -> Self {
        Self {
            background: [0.0; 3],
            antialiased: false,
            sh_degree: None,
            near: 0.01,
            far: 1e10,
            max_batches_per_dispatch: 4096,
            checkpoint_every: 4,
            deterministic: false,
            absgrad: false,
            backward_kernel: BackwardKernel::Auto,
            forward_only: false,
            sh_grad: true,
            tuning: RasterTuning::default(),
        }
    }
}

/// Images produced by [`render`], row-major, `height x width`.
#[derive(Clone, Debug)]
pub struct RenderOutput {
    pub width: u32,
    pub height: u32,
    /// RGB with the background composited, `[h][w][3]`.
    pub rgb: GpuBuffer<f32>,
    /// Accumulated opacity `1 - T`.
    pub alpha: GpuBuffer<f32>,
    /// Alpha-weighted depth `sum(w_i z_i)`; expected depth is `depth / alpha`.
    pub depth: GpuBuffer<f32>,
    /// Per-Gaussian screen-space radii `(rx, ry)` in pixels, 0 when culled.
    pub radii: GpuBuffer<u32>,
    /// Gaussians that touched at least one tile, and tile intersections.
    pub num_visible: usize,
    pub num_intersections: usize,
}

/// What the backward pass needs from the forward pass.
#[derive(Clone, Debug)]
pub struct RenderState {
    cam: GpuBuffer<f32>,
    camera: Camera,
    antialiased: bool,
    active_coeffs: u32,
    proj: GpuBuffer<f32>,
    tiles_touched: GpuBuffer<u32>,
    sorted_ids: GpuBuffer<u32>,
    offsets: GpuBuffer<u32>,
    ranges: GpuBuffer<u32>,
    sorted_gids: GpuBuffer<u32>,
    /// Emission index of each sorted intersection (row-mode backward only; one placeholder
    /// value otherwise).
    isect_orig: GpuBuffer<u32>,
    last: GpuBuffer<u32>,
    tile_last: GpuBuffer<u32>,
    /// Forward checkpoints (`rasterize::CHECKPOINT` floats each) and the intersections per
    /// checkpoint.
    checkpoints: GpuBuffer<f32>,
    chunk: u32,
    /// Rendered with [`RenderOptions::forward_only`]: no checkpoints, no backward pass.
    forward_only: bool,
    row_skip: bool,
    deterministic: bool,
    absgrad: bool,
    backward_kernel: BackwardKernel,
    sh_grad: bool,
    tuning: RasterTuning,
}

/// What the SH coefficients' gradient is computed from, besides the means and the projected
/// gradient ([`SplatGrads::projected`]): see [`crate::kernels::project::sh_value_grad`].
pub struct ShGradInputs<'a> {
    /// The camera block of the render.
    pub cam: &'a GpuBuffer<f32>,
    /// Projected Gaussians (the colour, clamped at zero, at `PROJ` stride).
    pub proj: &'a GpuBuffer<f32>,
    pub tiles_touched: &'a GpuBuffer<u32>,
    /// SH coefficients evaluated by the render.
    pub active_coeffs: u32,
}

impl RenderState {
    /// Projected Gaussians ([`crate::kernels::project::PROJ`] floats each, mean2d first).
    pub fn projected(&self) -> &GpuBuffer<f32> {
        &self.proj
    }

    /// The forward buffers the SH gradient depends on.
    pub fn sh_grad_inputs(&self) -> ShGradInputs<'_> {
        ShGradInputs {
            cam: &self.cam,
            proj: &self.proj,
            tiles_touched: &self.tiles_touched,
            active_coeffs: self.active_coeffs,
        }
    }
}

/// How a render's intersections spread over its tiles (for benchmarks and diagnostics).
#[derive(Clone, Debug, PartialEq)]
pub struct TileStats {
    pub tiles: usize,
    /// Tiles without intersections.
    pub empty: usize,
    /// Intersections per tile: median, 99th percentile and maximum.
    pub len_p50: usize,
    pub len_p99: usize,
    pub len_max: usize,
    /// Intersections up to each tile's last contributing Gaussian (what the backward walks).
    pub walked_total: usize,
    pub walked_p99: usize,
    pub walked_max: usize,
}

impl RenderState {
    /// Whether the forward rasterizer skipped pixel rows out of each Gaussian's reach (chosen
    /// per frame from the mean tiles per Gaussian; the image is the same either way).
    pub fn row_skip(&self) -> bool {
        self.row_skip
    }

    /// Each tile's `[first, one past last)` position in the tile-sorted intersection list,
    /// row-major over 16x16 tiles (a synchronising read; not for hot loops).
    pub fn tile_ranges(&self, gpu: &Gpu) -> Result<Vec<[u32; 2]>, SplatError> {
        Ok(gpu
            .read(&self.ranges)?
            .chunks(2)
            .map(|r| [r[0], r[1]])
            .collect())
    }

    /// Reads the tile ranges back (a synchronising read; not for hot loops).
    pub fn tile_stats(&self, gpu: &Gpu) -> Result<TileStats, SplatError> {
        let mut len: Vec<usize> = self
            .tile_ranges(gpu)?
            .iter()
            .map(|r| r[1].saturating_sub(r[0]) as usize)
            .collect();
        let mut walked: Vec<usize> = gpu
            .read(&self.tile_last)?
            .iter()
            .map(|&v| v as usize)
            .collect();
        len.sort_unstable();
        walked.sort_unstable();
        // Quantile `q` of a sorted list.
        let pct = |v: &[usize], q: f64| {
            v.get(((v.len() as f64 - 1.0) * q).round() as usize)
                .copied()
                .unwrap_or(0)
        };
        Ok(TileStats {
            tiles: len.len(),
            empty: len.iter().filter(|&&l| l == 0).count(),
            len_p50: pct(&len, 0.5),
            len_p99: pct(&len, 0.99),
            len_max: pct(&len, 1.0),
            walked_total: walked.iter().sum(),
            walked_p99: pct(&walked, 0.99),
            walked_max: pct(&walked, 1.0),
        })
    }
}

/// Gradients of a scalar loss with respect to the splats and the camera.
#[derive(Clone, Debug)]
pub struct SplatGrads {
    pub means: GpuBuffer<f32>,
    pub log_scales: GpuBuffer<f32>,
    pub quats: GpuBuffer<f32>,
    pub opacity_logits: GpuBuffer<f32>,
    pub sh: GpuBuffer<f32>,
    /// Per-Gaussian gradient of the projected quantities, 10 floats each:
    /// mean2d (2), conic (3), depth, opacity, rgb (3). `mean2d` drives densification.
    pub projected: GpuBuffer<f32>,
    /// d loss / d world_to_camera, top three rows (row-major 3x4).
    pub world_to_camera: [[f32; 4]; 3],
    /// With [`RenderOptions::absgrad`]: per Gaussian, the sums over pixels of the absolute
    /// per-pixel gradients of the 2D mean (x, y), `[n][2]`.
    pub means2d_abs: Option<GpuBuffer<f32>>,
}

/// Gradients of one chunk's parameters (same layouts as [`GpuSplats`]).
#[derive(Clone, Debug)]
pub struct ParamGrads {
    pub means: GpuBuffer<f32>,
    pub log_scales: GpuBuffer<f32>,
    pub quats: GpuBuffer<f32>,
    pub opacity_logits: GpuBuffer<f32>,
    pub sh: GpuBuffer<f32>,
}

/// [`SplatGrads`] of a scene held in chunks ([`render_backward_chunks`]): parameter gradients
/// per chunk, the rest over all Gaussians by global row.
#[derive(Clone, Debug)]
pub struct ChunkedGrads {
    pub params: Vec<ParamGrads>,
    /// As [`SplatGrads::projected`].
    pub projected: GpuBuffer<f32>,
    pub world_to_camera: [[f32; 4]; 3],
    /// As [`SplatGrads::means2d_abs`].
    pub means2d_abs: Option<GpuBuffer<f32>>,
}
