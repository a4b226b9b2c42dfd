//! Host side of the rasterizer: project, cull, depth-sort, bin into tiles,
//! tile-sort, blend; and the backward pass through the same stages.

use cubecl::prelude::*;
use rust3r_gpu::{
    Gpu, GpuBuffer, compact::scatter_indices_with_values, gather::gather, gather::iota,
    reduce::ReduceOp, reduce::reduce_columns, scan::exclusive_scan_gathered,
    scan::exclusive_scan_nonzero, sort::bits_for, sort::sort_pairs,
};

use crate::kernels::{project, rasterize, tiles};
use crate::{Camera, SplatError};
use rust3r_io::{MAX_SH_DEGREE, num_coeffs_for_degree};

/// Gaussians resident on the device, pre-activation (the 3DGS PLY convention).
#[derive(Clone, Debug)]
pub struct GpuSplats {
    pub means: GpuBuffer<f32>,
    pub log_scales: GpuBuffer<f32>,
    /// Quaternions (w, x, y, z), not necessarily normalised.
    pub quats: GpuBuffer<f32>,
    pub opacity_logits: GpuBuffer<f32>,
    /// `(sh_degree + 1)^2` coefficients per Gaussian, RGB each (see [`ShCoeffs`]).
    pub sh: ShCoeffs,
    pub sh_degree: u32,
}

/// How SH coefficients are stored on the device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ShPrecision {
    /// Every coefficient as f32 (192 B per Gaussian at degree 3).
    F32,
    /// The DC term as f32, the higher orders as IEEE half floats (104 B at degree 3). The
    /// trainer's Adam step writes them with stochastic rounding.
    #[default]
    F16,
}

impl ShPrecision {
    /// Checkpoints written before half SH existed hold f32 coefficients.
    pub fn legacy() -> Self {
        Self::F32
    }

    /// Device bytes per Gaussian at `sh_degree` (half rows are packed back to back, so
    /// the average is exact for an even count of Gaussians).
    pub fn bytes_per_splat(self, sh_degree: u32) -> u64 {
        let k = num_coeffs_for_degree(sh_degree.min(MAX_SH_DEGREE)) as u64;
        match self {
            Self::F32 => 12 * k,
            Self::F16 => 12 + 6 * (k - 1),
        }
    }
}

impl std::fmt::Display for ShPrecision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::F32 => "f32",
            Self::F16 => "f16",
        })
    }
}

impl std::str::FromStr for ShPrecision {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "f32" => Ok(Self::F32),
            "f16" => Ok(Self::F16),
            _ => Err(format!("unknown SH precision {s:?} (f32 or f16)")),
        }
    }
}

/// SH coefficients of `n` Gaussians with `k` coefficients each, on the device.
#[derive(Clone, Debug)]
pub enum ShCoeffs {
    /// `[n][k][rgb]` as f32.
    F32(GpuBuffer<f32>),
    /// `dc`: `[n][rgb]` as f32; `rest`: the `[n][k - 1][rgb]` higher-order coefficients as
    /// half floats packed two per word, back to back across rows (value `i` in the low half of
    /// word `i / 2` when `i` is even; see [`rust3r_gpu::half`]).
    Half {
        dc: GpuBuffer<f32>,
        rest: GpuBuffer<u32>,
    },
}

impl ShCoeffs {
    /// Upload `[n][k][rgb]` host values (rounded to the nearest half where stored as half).
    pub fn upload(
        gpu: &Gpu,
        sh: &[f32],
        k: usize,
        precision: ShPrecision,
    ) -> Result<Self, SplatError> {
        match precision {
            ShPrecision::F32 => {
                gpu.check_fits("SH coefficients", (sh.len() * 4) as u64)?;
                Ok(Self::F32(gpu.upload(sh)))
            }
            ShPrecision::F16 => {
                let row = 3 * k.max(1);
                let n = sh.len() / row;
                let mut dc = Vec::with_capacity(n * 3);
                let mut rest = Vec::with_capacity(n * (row - 3));
                for r in sh.chunks_exact(row) {
                    dc.extend_from_slice(&r[..3]);
                    rest.extend_from_slice(&r[3..]);
                }
                let words = rust3r_gpu::half::pack_f16(&rest);
                gpu.check_fits("SH coefficients (half)", (words.len() * 4) as u64)?;
                Ok(Self::Half {
                    dc: gpu.upload(&dc),
                    rest: gpu.upload(&words),
                })
            }
        }
    }

    pub fn precision(&self) -> ShPrecision {
        match self {
            Self::F32(_) => ShPrecision::F32,
            Self::Half { .. } => ShPrecision::F16,
        }
    }

    /// The f32 buffer the kernels read: every coefficient, or the DC terms of half storage.
    pub fn f32_part(&self) -> &GpuBuffer<f32> {
        match self {
            Self::F32(b) => b,
            Self::Half { dc, .. } => dc,
        }
    }

    /// The half-float buffer for a kernel argument, or a placeholder for f32 storage (a
    /// binding must still be given); with [`ShCoeffs::is_half`] the kernels' `half_sh` flag.
    fn rest_arg(&self, gpu: &Gpu) -> BufferArg {
        match self {
            Self::Half { rest, .. } => rest.arg(),
            Self::F32(_) => gpu.placeholder::<u32>(slot::SH_REST).arg(),
        }
    }

    pub fn is_half(&self) -> bool {
        matches!(self, Self::Half { .. })
    }

    /// Device bytes of the buffers.
    pub fn device_bytes(&self) -> u64 {
        match self {
            Self::F32(b) => b.len() as u64 * 4,
            Self::Half { dc, rest } => (dc.len() + rest.len()) as u64 * 4,
        }
    }

    /// All coefficients back on the host as `[n][k][rgb]` f32 (half values are exact in f32).
    pub fn read(&self, gpu: &Gpu, k: usize) -> Result<Vec<f32>, rust3r_gpu::GpuError> {
        match self {
            Self::F32(b) => gpu.read(b),
            Self::Half { dc, rest } => {
                let dc = gpu.read(dc)?;
                let n = dc.len() / 3;
                let r = 3 * (k.max(1) - 1);
                let rest = rust3r_gpu::half::unpack_f16(&gpu.read(rest)?, n * r);
                let mut out = Vec::with_capacity(n * (r + 3));
                for i in 0..n {
                    out.extend_from_slice(&dc[i * 3..i * 3 + 3]);
                    out.extend_from_slice(&rest[i * r..(i + 1) * r]);
                }
                Ok(out)
            }
        }
    }

    /// The same coefficients in another storage (through the host).
    pub fn converted(
        &self,
        gpu: &Gpu,
        k: usize,
        precision: ShPrecision,
    ) -> Result<Self, SplatError> {
        if precision == self.precision() {
            return Ok(self.clone());
        }
        Self::upload(gpu, &self.read(gpu, k)?, k, precision)
    }
}

impl GpuSplats {
    pub fn len(&self) -> usize {
        self.opacity_logits.len()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn num_coeffs(&self) -> usize {
        num_coeffs_for_degree(self.sh_degree)
    }

    /// Upload splats loaded by `rust3r_io`.
    pub fn from_host(gpu: &Gpu, s: &rust3r_io::Splats) -> Result<Self, SplatError> {
        Self::chunks_from_host(gpu, s, Some(usize::MAX))?
            .pop()
            .ok_or_else(|| SplatError::InvalidSplats("no splats uploaded".into()))
    }

    /// Upload host arrays (flattened, same layouts as the fields; `sh` as `[n][k][rgb]`),
    /// SH coefficients as f32.
    pub fn from_slices(
        gpu: &Gpu,
        means: &[f32],
        log_scales: &[f32],
        quats: &[f32],
        opacity_logits: &[f32],
        sh: &[f32],
        sh_degree: u32,
    ) -> Result<Self, SplatError> {
        Self::from_slices_as(
            gpu,
            means,
            log_scales,
            quats,
            opacity_logits,
            sh,
            sh_degree,
            ShPrecision::F32,
        )
    }

    /// [`GpuSplats::from_slices`] with the SH coefficients stored in `precision`.
    #[allow(clippy::too_many_arguments)]
    pub fn from_slices_as(
        gpu: &Gpu,
        means: &[f32],
        log_scales: &[f32],
        quats: &[f32],
        opacity_logits: &[f32],
        sh: &[f32],
        sh_degree: u32,
        precision: ShPrecision,
    ) -> Result<Self, SplatError> {
        let n = opacity_logits.len();
        let k = num_coeffs_for_degree(sh_degree);
        if sh_degree > MAX_SH_DEGREE {
            return Err(SplatError::InvalidSplats(format!(
                "SH degree {sh_degree} > 3"
            )));
        }
        if means.len() != n * 3
            || log_scales.len() != n * 3
            || quats.len() != n * 4
            || sh.len() != n * k * 3
        {
            return Err(SplatError::InvalidSplats(format!(
                "inconsistent lengths: {n} opacities, {} means, {} scales, {} quats, {} SH values (degree {sh_degree})",
                means.len(),
                log_scales.len(),
                quats.len(),
                sh.len()
            )));
        }
        Ok(Self {
            sh: ShCoeffs::upload(gpu, sh, k, precision)?,
            means: gpu.upload(means),
            log_scales: gpu.upload(log_scales),
            quats: gpu.upload(quats),
            opacity_logits: gpu.upload(opacity_logits),
            sh_degree,
        })
    }

    /// The same Gaussians with their SH coefficients stored in `precision`.
    pub fn with_sh_precision(
        mut self,
        gpu: &Gpu,
        precision: ShPrecision,
    ) -> Result<Self, SplatError> {
        self.sh = self.sh.converted(gpu, self.num_coeffs(), precision)?;
        Ok(self)
    }

    /// All SH coefficients on the host, `[n][k][rgb]` f32.
    pub fn read_sh(&self, gpu: &Gpu) -> Result<Vec<f32>, rust3r_gpu::GpuError> {
        self.sh.read(gpu, self.num_coeffs())
    }
}

/// Gaussians per chunk of [`GpuSplats::chunks_from_host`] at `sh_degree` on this adapter: as many
/// rows as keep the widest per-Gaussian buffer (the SH coefficients, or the quaternions at low
/// degrees) inside one buffer binding.
pub fn rows_per_chunk(gpu: &Gpu, sh_degree: u32) -> usize {
    let k = num_coeffs_for_degree(sh_degree.min(MAX_SH_DEGREE));
    let widest = 4 * (k * 3).max(4);
    ((gpu.max_buffer_bytes() as usize / widest).max(1)).min(u32::MAX as usize / 64)
}

impl GpuSplats {
    /// Upload splats split into consecutive row ranges ("chunks") of at most `max_rows`
    /// Gaussians each (`None`: [`rows_per_chunk`]), so every buffer fits the adapter's
    /// binding limit however many Gaussians there are (wgpu binds at most 2 GiB at once, SH degree
    /// 3 needs 192 B per Gaussian: one buffer stops at about 11M). [`render_chunks`] and
    /// [`render_backward_chunks`] render them as one scene; chunk `i` holds rows
    /// `sum(len of chunks < i)..` of `s`.
    pub fn chunks_from_host(
        gpu: &Gpu,
        s: &rust3r_io::Splats,
        max_rows: Option<usize>,
    ) -> Result<Vec<Self>, SplatError> {
        s.validate()
            .map_err(|e| SplatError::InvalidSplats(e.to_string()))?;
        Self::chunks_from_slices(
            gpu,
            bytemuck::cast_slice(&s.means),
            bytemuck::cast_slice(&s.log_scales),
            bytemuck::cast_slice(&s.rotations),
            &s.opacity_logits,
            &s.sh,
            s.sh_degree,
            max_rows,
        )
    }

    /// [`GpuSplats::chunks_from_host`] from flat host arrays (the layouts of
    /// [`GpuSplats::from_slices`]).
    #[allow(clippy::too_many_arguments)]
    pub fn chunks_from_slices(
        gpu: &Gpu,
        means: &[f32],
        log_scales: &[f32],
        quats: &[f32],
        opacity_logits: &[f32],
        sh: &[f32],
        sh_degree: u32,
        max_rows: Option<usize>,
    ) -> Result<Vec<Self>, SplatError> {
        let n = opacity_logits.len();
        let per = num_coeffs_for_degree(sh_degree.min(MAX_SH_DEGREE)) * 3;
        let rows = max_rows
            .unwrap_or_else(|| rows_per_chunk(gpu, sh_degree))
            .max(1);
        if means.len() != n * 3
            || log_scales.len() != n * 3
            || quats.len() != n * 4
            || sh.len() != n * per
        {
            // One call over everything reports the inconsistency.
            return Self::from_slices(gpu, means, log_scales, quats, opacity_logits, sh, sh_degree)
                .map(|c| vec![c]);
        }
        let mut chunks = Vec::with_capacity(n.div_ceil(rows).max(1));
        for start in (0..n.max(1)).step_by(rows) {
            let end = start.saturating_add(rows).min(n);
            chunks.push(Self::from_slices(
                gpu,
                &means[start * 3..end * 3],
                &log_scales[start * 3..end * 3],
                &quats[start * 4..end * 4],
                &opacity_logits[start..end],
                &sh[start * per..end * per],
                sh_degree,
            )?);
        }
        Ok(chunks)
    }
}

/// The SH degree every chunk shares, and the total number of Gaussians.
fn chunks_layout(chunks: &[GpuSplats]) -> Result<(u32, usize), SplatError> {
    let degree = chunks.first().map_or(0, |c| c.sh_degree);
    if let Some(c) = chunks.iter().find(|c| c.sh_degree != degree) {
        return Err(SplatError::InvalidSplats(format!(
            "splat chunks mix SH degrees {degree} and {}",
            c.sh_degree
        )));
    }
    Ok((degree, chunks.iter().map(GpuSplats::len).sum()))
}

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

fn blocks(n: usize) -> usize {
    n.div_ceil(256)
}

/// Render `splats` from `camera`.
pub fn render(
    gpu: &Gpu,
    splats: &GpuSplats,
    camera: &Camera,
    opts: &RenderOptions,
) -> Result<(RenderOutput, RenderState), SplatError> {
    render_chunks(gpu, std::slice::from_ref(splats), camera, opts)
}

/// Render the Gaussians of all `chunks` (same SH degree; see
/// [`GpuSplats::chunks_from_host`]) as one scene from `camera`. Per-Gaussian outputs
/// ([`RenderOutput::radii`], [`SplatGrads::projected`]) are indexed by global row: the rows of
/// chunk 0, then chunk 1, and so on.
pub fn render_chunks(
    gpu: &Gpu,
    chunks: &[GpuSplats],
    camera: &Camera,
    opts: &RenderOptions,
) -> Result<(RenderOutput, RenderState), SplatError> {
    camera.validate()?;
    let (sh_degree, n) = chunks_layout(chunks)?;
    // Past one binding here, the projected data would have to be split as well (about 53M
    // Gaussians at 2 GiB).
    gpu.check_fits("projected Gaussians", (n * project::PROJ * 4) as u64)?;
    let (w, h) = (camera.width, camera.height);
    let (tiles_x, tiles_y) = camera.tiles();
    let num_tiles = (tiles_x * tiles_y) as usize;
    let num_coeffs = num_coeffs_for_degree(sh_degree) as u32;
    let active_degree = opts.sh_degree.unwrap_or(sh_degree).min(sh_degree);
    let active_coeffs = num_coeffs_for_degree(active_degree) as u32;
    let cam = gpu.upload(&camera.gpu_block(opts.background, opts.near, opts.far));
    let client = gpu.client();

    let proj = gpu.alloc::<f32>(n * project::PROJ);
    let radii = gpu.alloc::<u32>(n * 2);
    let rects = gpu.alloc::<u32>(n * 2);
    let tiles_touched = gpu.alloc::<u32>(n);
    let depth_keys = gpu.alloc::<u32>(n);
    let mut row0 = 0;
    for splats in chunks.iter().filter(|c| !c.is_empty()) {
        let rows = splats.len();
        rust3r_gpu::launch!(
            gpu,
            project::project_forward(
                client,
                gpu.grid(rows.div_ceil(project::PROJECT_CUBE)),
                CubeDim::new_1d(project::PROJECT_CUBE as u32),
                splats.means.arg(),
                splats.log_scales.arg(),
                splats.quats.arg(),
                splats.opacity_logits.arg(),
                splats.sh.f32_part().arg(),
                splats.sh.rest_arg(gpu),
                cam.arg(),
                proj.arg(),
                radii.arg(),
                rects.arg(),
                tiles_touched.arg(),
                depth_keys.arg(),
                rows as u32,
                row0 as u32,
                w,
                h,
                num_coeffs,
                active_coeffs,
                opts.antialiased,
                splats.sh.is_half(),
            )
        );
        row0 += rows;
    }

    rust3r_gpu::profile::mark(gpu, "fwd 1 project");
    // Only the visible Gaussians are depth-sorted (front to back). One read-back for the whole
    // forward pass: the visible and intersection counts.
    let positions = exclusive_scan_nonzero(gpu, &tiles_touched);
    let (num_visible, num_isects) = if n == 0 {
        (0, 0)
    } else {
        let isect_total = reduce_columns(gpu, &tiles_touched, 1, ReduceOp::Sum);
        let totals = gpu.alloc::<u32>(2);
        rust3r_gpu::launch!(
            gpu,
            tiles::visible_totals(
                client,
                CubeCount::Static(1, 1, 1),
                CubeDim::new_1d(1),
                tiles_touched.arg(),
                positions.arg(),
                isect_total.arg(),
                totals.arg(),
                n as u32,
            )
        );
        let t = gpu.read(&totals)?;
        (t[0] as usize, t[1] as usize)
    };
    rust3r_gpu::profile::mark(gpu, "fwd 2a visible count + read-back");
    let (visible_ids, visible_keys) =
        scatter_indices_with_values(gpu, &tiles_touched, &positions, &depth_keys, num_visible);
    drop(positions);
    rust3r_gpu::profile::mark(gpu, "fwd 2b visible ids + keys");
    let (_, sorted_ids) = sort_pairs(gpu, &visible_keys, &visible_ids, 32);
    rust3r_gpu::profile::mark(gpu, "fwd 2c depth sort");
    let offsets = exclusive_scan_gathered(gpu, &tiles_touched, &sorted_ids);
    rust3r_gpu::profile::mark(gpu, "fwd 2d tile counts + scan");
    gpu.check_fits("image", (w as u64) * (h as u64) * 12)?;
    // Without float atomics (or when asked to be deterministic) the backward pass keeps one
    // 10-float gradient row per intersection: about 53M intersections in 2 GiB.
    if row_mode_backward(gpu, opts.deterministic) {
        gpu.check_fits(
            "tile intersections",
            num_isects as u64 * (project::VPROJ as u64) * 4,
        )?;
    }
    gpu.check_fits("tile intersections", num_isects as u64 * 4)?;
    let isect_tiles = gpu.alloc::<u32>(num_isects);
    let isect_gids = gpu.alloc::<u32>(num_isects);
    if num_isects > 0 {
        rust3r_gpu::launch!(
            gpu,
            tiles::emit_intersections(
                client,
                gpu.grid(blocks(num_visible)),
                CubeDim::new_1d(256),
                sorted_ids.arg(),
                offsets.arg(),
                rects.arg(),
                isect_tiles.arg(),
                isect_gids.arg(),
                num_visible as u32,
                tiles_x,
            )
        );
    }
    rust3r_gpu::profile::mark(gpu, "fwd 3a emit");
    // Stable sort by tile keeps the depth order inside each tile. The backward pass that keeps
    // one gradient row per intersection also needs each sorted intersection's emission index;
    // the float-atomic one does not, and the Gaussian ids are sorted directly.
    let tile_bits = bits_for(num_tiles as u32 - 1);
    let (sorted_tiles, sorted_gids, isect_orig) = if row_mode_backward(gpu, opts.deterministic) {
        let order = iota(gpu, num_isects);
        let (sorted_tiles, isect_orig) = sort_pairs(gpu, &isect_tiles, &order, tile_bits);
        let sorted_gids = gather(gpu, &isect_gids, &isect_orig);
        (sorted_tiles, sorted_gids, isect_orig)
    } else {
        let (sorted_tiles, sorted_gids) = sort_pairs(gpu, &isect_tiles, &isect_gids, tile_bits);
        // Bound by the backward pass, read only in the row mode: a shared placeholder.
        (
            sorted_tiles,
            sorted_gids,
            gpu.placeholder::<u32>(slot::ISECT_ORIG),
        )
    };
    rust3r_gpu::profile::mark(gpu, "fwd 3b tile sort");
    // `tile_ranges` writes every entry; without intersections every tile is empty.
    let ranges = if num_isects > 0 {
        gpu.alloc::<u32>(num_tiles * 2)
    } else {
        gpu.zeros::<u32>(num_tiles * 2)
    };
    if num_isects > 0 {
        rust3r_gpu::launch!(
            gpu,
            tiles::tile_ranges(
                client,
                gpu.grid(blocks(num_isects)),
                CubeDim::new_1d(256),
                sorted_tiles.arg(),
                ranges.arg(),
                num_isects as u32,
                num_tiles as u32,
            )
        );
    }

    rust3r_gpu::profile::mark(gpu, "fwd 3c tile ranges");
    let npix = (w as usize) * (h as usize);
    let rgb = gpu.alloc::<f32>(npix * 3);
    let alpha = gpu.alloc::<f32>(npix);
    let depth = gpu.alloc::<f32>(npix);
    let last = gpu.alloc::<u32>(npix);
    let tile_last = gpu.alloc::<u32>(num_tiles);
    // Longest tile list, to know how many bounded dispatches are needed (one extra read-back,
    // only when a tile could exceed one dispatch). A tile lists each visible Gaussian at most
    // once, so when either count fits one dispatch no read-back is needed (a read-back
    // costs 37 us through CUDA and 110 us through wgpu on the H100, plus the idle GPU).
    let k = batches_per_dispatch(gpu, opts);
    let per_dispatch = k as usize * 256;
    let bound = num_isects.min(num_visible);
    let max_tile = if bound <= per_dispatch {
        bound
    } else {
        let lengths = gpu.alloc::<u32>(num_tiles);
        rust3r_gpu::launch!(
            gpu,
            tiles::tile_lengths(
                client,
                gpu.grid(blocks(num_tiles)),
                CubeDim::new_1d(256),
                ranges.arg(),
                lengths.arg(),
                num_tiles as u32,
            )
        );
        gpu.read(&reduce_columns(gpu, &lengths, 1, ReduceOp::Max))?[0] as usize
    };
    let carry = gpu.alloc::<f32>(npix * 5);
    let carry_done = gpu.alloc::<u32>(npix);
    let row_skip = row_skip(num_visible, num_isects);
    let chunk = opts.checkpoint_every.clamp(1, k) * 256;
    // A tile of `len` intersections takes (len - 1) / chunk checkpoints, in slots that never
    // overlap and stay below intersections / chunk (`rasterize_forward`).
    let slots = if opts.forward_only {
        0
    } else {
        (num_isects / chunk as usize).max(1)
    };
    gpu.check_fits(
        "forward checkpoints",
        (slots * rasterize::CHECKPOINT * 4) as u64,
    )?;
    let checkpoints = gpu.alloc::<f32>((slots * rasterize::CHECKPOINT).max(1));
    for d in 0..max_tile.div_ceil(per_dispatch).max(1) as u32 {
        rust3r_gpu::launch!(
            gpu,
            rasterize::rasterize_forward(
                client,
                CubeCount::Static(tiles_x, tiles_y, 1),
                CubeDim::new_1d(256),
                ranges.arg(),
                sorted_gids.arg(),
                proj.arg(),
                cam.arg(),
                rgb.arg(),
                alpha.arg(),
                depth.arg(),
                last.arg(),
                tile_last.arg(),
                carry.arg(),
                carry_done.arg(),
                checkpoints.arg(),
                w,
                h,
                tiles_x,
                d * k,
                (d + 1) * k,
                chunk,
                row_skip,
                !opts.forward_only,
                vec_shared(gpu, &opts.tuning),
            )
        );
    }

    rust3r_gpu::profile::mark(gpu, "fwd 4 rasterize");
    let out = RenderOutput {
        width: w,
        height: h,
        rgb,
        alpha,
        depth,
        radii,
        num_visible,
        num_intersections: num_isects,
    };
    let state = RenderState {
        cam,
        camera: camera.clone(),
        antialiased: opts.antialiased,
        active_coeffs,
        proj,
        tiles_touched,
        sorted_ids,
        offsets,
        ranges,
        sorted_gids,
        isect_orig,
        last,
        tile_last,
        checkpoints,
        chunk,
        forward_only: opts.forward_only,
        row_skip,
        deterministic: opts.deterministic,
        absgrad: opts.absgrad,
        backward_kernel: opts.backward_kernel,
        tuning: opts.tuning,
        sh_grad: opts.sh_grad,
    };
    Ok((out, state))
}

/// [`Gpu::placeholder`] slots of the arguments a launch leaves unused; the arguments of one launch
/// take distinct slots.
mod slot {
    /// Projection (forward and backward): `sh_rest` with binary32 SH.
    pub const SH_REST: usize = 0;
    /// Backward rasterizer: the per-intersection gradient rows, in the atomic mode.
    pub const ISECT_GRADS: usize = 0;
    /// Backward rasterizer: the per-intersection absolute gradients, without absgrad or in the
    /// atomic mode.
    pub const ISECT_ABS: usize = 1;
    /// Backward rasterizer: the per-Gaussian absolute gradients, without absgrad.
    pub const V_ABS: usize = 2;
    /// Backward rasterizer: the atomic-mode bindings in the row mode.
    pub const ATOMIC_UNUSED: usize = 3;
    /// [`super::RenderState::isect_orig`] outside the row mode (bound by the backward
    /// rasterizer beside the slots above).
    pub const ISECT_ORIG: usize = 4;
    /// Projection backward: the pose-gradient rows, without the pose gradient (bound beside
    /// [`SH_REST`]).
    pub const V_CAM: usize = 5;
}

/// Whether the forward rasterizer tests each Gaussian's row reach before its exponential
/// (`rasterize::row_reach2`): it pays where Gaussians span few rows of a tile, which the mean
/// number of tiles per visible Gaussian measures. On the H100 (docs/benchmarks/journal.md, 2026-11-26) the
/// test took the 10M-Gaussian forward pass from 6.9 to 5.6 ms at 648x420 (1.8 tiles per
/// Gaussian) and from 5.2 to 4.9 ms at 1920x1080 (3.3), and cost 5-10% on the 138k scene (4.5 and
/// 20 tiles per Gaussian) and at 1M, 1920x1080 (7.4).
fn row_skip(visible: usize, isects: usize) -> bool {
    isects < 4 * visible
}

/// Batches of 256 intersections a tile's forward workgroup blends per dispatch:
/// `max_batches_per_dispatch`, at most [`LLVMPIPE_MAX_BATCHES`] on lavapipe
/// ([`Gpu::is_llvmpipe`]). There one workgroup looping over 256 or more batches (three barriers
/// each) left the last 8 pixels of its tile unwritten (real_splats::guitar_compressed_ply: a tile
/// of the guitar at 48x64); 192 and fewer were exact.
fn batches_per_dispatch(gpu: &Gpu, opts: &RenderOptions) -> u32 {
    let k = opts.max_batches_per_dispatch.max(1);
    if gpu.is_llvmpipe() {
        k.min(LLVMPIPE_MAX_BATCHES)
    } else {
        k
    }
}

/// See [`batches_per_dispatch`]: half the longest loop measured exact on lavapipe.
const LLVMPIPE_MAX_BATCHES: u32 = 96;

/// Whether the forward rasterizer stages each batch as 4-vectors in shared memory
/// (`rasterize::rasterize_forward`): through CUDA, not through Vulkan (docs/benchmarks/journal.md,
/// 2026-11-27), unless [`RasterTuning::vec_shared`] says otherwise.
fn vec_shared(gpu: &Gpu, tuning: &RasterTuning) -> bool {
    tuning.vec_shared.unwrap_or_else(|| gpu.is_cuda())
}

/// Whether the backward pass keeps one gradient row per intersection (summed per Gaussian in a
/// fixed order): when asked to be deterministic, or where the adapter has no float atomics.
fn row_mode_backward(gpu: &Gpu, deterministic: bool) -> bool {
    deterministic || !gpu.f32_atomic_add()
}

/// Gaussians per backward batch that fit the device's shared memory: the largest of 16, 8, 4
/// that fits, at most [`RasterTuning::backward_batch_cap`] (A/B runs of the shared-memory
/// footprint).
fn backward_batch(gpu: &Gpu, tuning: &RasterTuning) -> usize {
    let cap = tuning.backward_batch_cap.unwrap_or(16);
    let bytes = gpu.max_shared_memory();
    // floats: 12 B (staged Gaussians) + max(2 * 256 B, 2560) (pairs) + 1024 (pixel grads) + 512 (absgrad)
    let need = |b: usize| 4 * (12 * b + (2 * 256 * b).max(2560) + 1024 + 512);
    [16usize, 8, 4]
        .into_iter()
        .find(|&b| b <= cap && need(b) <= bytes)
        .unwrap_or(4)
}

/// Gaussians per batch of the plane-reduction backward (one unit per (Gaussian, component)
/// adds the plane partials, so `10 * PLANE_BATCH <= 256`).
const PLANE_BATCH: usize = 16;

/// `Some(max planes per 256-unit cube)` when the plane-reduction backward runs
/// (`GpuTuning::subgroups` off turns subgroups off for the device).
fn plane_backward(gpu: &Gpu, kernel: BackwardKernel) -> Option<usize> {
    match kernel {
        BackwardKernel::Portable => return None,
        // On CUDA the portable kernel was faster at every size measured (H100, 1920x1080:
        // 3.2 vs 5.0 ms forward+backward at 138k Gaussians, 18.4 vs 21.9 ms at 10M; docs/benchmarks/journal.md).
        BackwardKernel::Auto if gpu.is_cuda() => return None,
        // Elsewhere the plane path wins at every image size measured: through Vulkan on the H100
        // at 10M Gaussians, 648x420 (1107 tiles), 15.9 ms forward+backward against 18.7-20.5 ms
        // for the shared-memory kernel (docs/benchmarks/journal.md, 2026-11-26). An earlier H200 run had kept
        // it off below 2048 tiles, when the backward still ran one cube per tile.
        _ => {}
    }
    let (min, max) = gpu.plane_sizes()?;
    if !min.is_power_of_two() || !max.is_power_of_two() || 256 % max != 0 {
        return None;
    }
    let max_planes = (256 / min) as usize;
    let need = 4 * (12 * PLANE_BATCH + max_planes * PLANE_BATCH * 12);
    (need <= gpu.max_shared_memory()).then_some(max_planes)
}

/// Backward pass: gradients of `L` given `dL/d rgb`, `dL/d alpha` and
/// `dL/d depth` (the accumulated depth of [`RenderOutput::depth`]).
pub fn render_backward(
    gpu: &Gpu,
    splats: &GpuSplats,
    out: &RenderOutput,
    state: &RenderState,
    v_rgb: &GpuBuffer<f32>,
    v_alpha: &GpuBuffer<f32>,
    v_depth: &GpuBuffer<f32>,
) -> Result<SplatGrads, SplatError> {
    render_backward_with(gpu, splats, out, state, v_rgb, v_alpha, v_depth, true)
}

/// [`render_backward`]; with `pose_grad = false` the camera-pose gradient is not reduced
/// (no read-back: training with fixed poses never waits for the device here) and
/// [`SplatGrads::world_to_camera`] is zero.
#[allow(clippy::too_many_arguments)]
pub fn render_backward_with(
    gpu: &Gpu,
    splats: &GpuSplats,
    out: &RenderOutput,
    state: &RenderState,
    v_rgb: &GpuBuffer<f32>,
    v_alpha: &GpuBuffer<f32>,
    v_depth: &GpuBuffer<f32>,
    pose_grad: bool,
) -> Result<SplatGrads, SplatError> {
    let g = render_backward_chunks(
        gpu,
        std::slice::from_ref(splats),
        out,
        state,
        v_rgb,
        v_alpha,
        v_depth,
        pose_grad,
    )?;
    let p = g.params.into_iter().next().ok_or_else(|| {
        SplatError::InvalidSplats("backward pass of one chunk returned none".into())
    })?;
    Ok(SplatGrads {
        means: p.means,
        log_scales: p.log_scales,
        quats: p.quats,
        opacity_logits: p.opacity_logits,
        sh: p.sh,
        projected: g.projected,
        world_to_camera: g.world_to_camera,
        means2d_abs: g.means2d_abs,
    })
}

/// [`render_backward_with`] for a scene rendered with [`render_chunks`]: `chunks` must be the
/// chunks that were rendered; the parameter gradients come back one chunk at a time.
#[allow(clippy::too_many_arguments)]
pub fn render_backward_chunks(
    gpu: &Gpu,
    chunks: &[GpuSplats],
    out: &RenderOutput,
    state: &RenderState,
    v_rgb: &GpuBuffer<f32>,
    v_alpha: &GpuBuffer<f32>,
    v_depth: &GpuBuffer<f32>,
    pose_grad: bool,
) -> Result<ChunkedGrads, SplatError> {
    let (_, n) = chunks_layout(chunks)?;
    if state.forward_only {
        return Err(SplatError::InvalidSplats(
            "backward pass over a frame rendered with RenderOptions::forward_only (no checkpoints)"
                .into(),
        ));
    }
    if n != state.tiles_touched.len() {
        return Err(SplatError::InvalidSplats(format!(
            "backward pass over {n} Gaussians of a frame rendered with {}",
            state.tiles_touched.len()
        )));
    }
    let npix = (out.width as usize) * (out.height as usize);
    if v_rgb.len() != npix * 3 || v_alpha.len() != npix || v_depth.len() != npix {
        return Err(SplatError::InvalidSplats(format!(
            "output gradients have {} / {} / {} values for a {}x{} image",
            v_rgb.len(),
            v_alpha.len(),
            v_depth.len(),
            out.width,
            out.height
        )));
    }
    let client = gpu.client();
    let (tiles_x, tiles_y) = state.camera.tiles();
    // Float atomics add each (tile, Gaussian) sum straight into the per-Gaussian gradient;
    // otherwise every intersection gets a gradient row (zero-filled: only rows in front of each
    // tile's last contributor are written) and a second pass sums each Gaussian's rows.
    let atomic = !row_mode_backward(gpu, state.deterministic);
    let v_proj = gpu.zeros::<f32>(n * project::VPROJ);
    // Buffers a mode leaves untouched (the kernels' `atomic` and `absgrad` are compile-time)
    // are shared placeholders, one slot per binding of a launch, not a buffer (and a fill
    // launch) per call.
    let isect_grads = if atomic {
        gpu.placeholder::<f32>(slot::ISECT_GRADS)
    } else {
        gpu.zeros::<f32>(out.num_intersections * project::VPROJ)
    };
    // The atomic bindings in the row mode (typed `u32`).
    let unused = gpu.placeholder::<u32>(slot::ATOMIC_UNUSED);
    let absgrad = state.absgrad;
    let v_abs = if absgrad {
        gpu.zeros::<f32>(n * 2)
    } else {
        gpu.placeholder::<f32>(slot::V_ABS)
    };
    let isect_abs = if absgrad && !atomic {
        gpu.zeros::<f32>(out.num_intersections * 2)
    } else {
        gpu.placeholder::<f32>(slot::ISECT_ABS)
    };
    rust3r_gpu::profile::mark(gpu, "bwd 0 zero fill");
    // On CUDA, NVRTC gave the backward kernels 80 registers (3 resident cubes per multiprocessor);
    // capped at 64 (4 cubes) they ran 3-6% faster at every bench size (H200, docs/benchmarks/journal.md).
    static BACKWARD_BOUNDS: std::sync::Once = std::sync::Once::new();
    BACKWARD_BOUNDS.call_once(|| rust3r_gpu::cuda_min_blocks_per_sm("rasterize_backward", 4));
    let plane = plane_backward(gpu, state.backward_kernel);
    let batch = if plane.is_some() {
        PLANE_BATCH
    } else {
        backward_batch(gpu, &state.tuning)
    };
    // One cube per chunk of each tile's intersections up to its last contributor, found from
    // the tile ranges (`rasterize::back_chunk`): at most intersections / chunk + tiles cubes.
    let num_tiles = tiles_x * tiles_y;
    let cubes = num_tiles as usize + out.num_intersections / state.chunk as usize;
    macro_rules! launch {
        ($kernel:ident, $elem:ty, $target:expr, $abs_target:expr $(, $extra:expr)*) => {
            rust3r_gpu::launch!(gpu, rasterize::$kernel::<$elem>(
                client, gpu.grid(cubes), CubeDim::new_1d(256),
                state.ranges.arg(), state.sorted_gids.arg(), state.isect_orig.arg(),
                state.proj.arg(), state.cam.arg(), out.alpha.arg(), state.last.arg(),
                state.tile_last.arg(), state.checkpoints.arg(), out.rgb.arg(), out.depth.arg(),
                v_rgb.arg(), v_alpha.arg(), v_depth.arg(),
                isect_grads.arg(), $target, isect_abs.arg(), $abs_target,
                out.width, out.height, tiles_x, num_tiles, state.chunk, batch $(, $extra)*, atomic, absgrad,
            ))
        };
    }
    // In the atomic mode with absgrad off, `v_abs` (a placeholder) is bound but never touched.
    match (plane, atomic) {
        (Some(mp), true) => launch!(rasterize_backward_plane, f32, v_proj.arg(), v_abs.arg(), mp),
        (Some(mp), false) => launch!(
            rasterize_backward_plane,
            u32,
            unused.arg(),
            unused.arg(),
            mp
        ),
        (None, true) => launch!(rasterize_backward, f32, v_proj.arg(), v_abs.arg()),
        (None, false) => launch!(rasterize_backward, u32, unused.arg(), unused.arg()),
    }
    rust3r_gpu::profile::mark(gpu, "bwd 1 rasterize");
    if !atomic && out.num_visible > 0 {
        rust3r_gpu::launch!(
            gpu,
            tiles::sum_isect_grads(
                client,
                gpu.grid(blocks(out.num_visible)),
                CubeDim::new_1d(256),
                state.sorted_ids.arg(),
                state.offsets.arg(),
                state.tiles_touched.arg(),
                isect_grads.arg(),
                v_proj.arg(),
                isect_abs.arg(),
                v_abs.arg(),
                out.num_visible as u32,
                absgrad,
            )
        );
    }
    rust3r_gpu::profile::mark(gpu, "bwd 2 sum intersections");
    let mut params = Vec::with_capacity(chunks.len());
    let mut cam_sums = Vec::new();
    let mut row0 = 0;
    for splats in chunks {
        let rows = splats.len();
        let k = splats.num_coeffs();
        let p = ParamGrads {
            means: gpu.alloc::<f32>(rows * 3),
            log_scales: gpu.alloc::<f32>(rows * 3),
            quats: gpu.alloc::<f32>(rows * 4),
            opacity_logits: gpu.alloc::<f32>(rows),
            sh: gpu.alloc::<f32>(if state.sh_grad { rows * k * 3 } else { 0 }),
        };
        // Per-Gaussian pose-gradient rows only when the pose gradient is wanted (the kernel's
        // compile-time `pose_grad` leaves the binding untouched otherwise).
        let v_cam = if pose_grad {
            gpu.alloc::<f32>(rows * project::VCAM)
        } else {
            gpu.placeholder::<f32>(slot::V_CAM)
        };
        rust3r_gpu::profile::mark(gpu, "bwd 3a gradient buffers");
        if rows > 0 {
            if state.sh_grad {
                rust3r_gpu::launch!(
                    gpu,
                    project::sh_backward_coeffs(
                        client,
                        gpu.grid(blocks(rows * k)),
                        CubeDim::new_1d(256),
                        splats.means.arg(),
                        state.cam.arg(),
                        state.tiles_touched.arg(),
                        state.proj.arg(),
                        v_proj.arg(),
                        p.sh.arg(),
                        rows as u32,
                        row0 as u32,
                        k as u32,
                        state.active_coeffs,
                    )
                );
            }
            rust3r_gpu::profile::mark(gpu, "bwd 3b SH coefficients");
            rust3r_gpu::launch!(
                gpu,
                project::project_backward(
                    client,
                    gpu.grid(blocks(rows)),
                    CubeDim::new_1d(256),
                    splats.means.arg(),
                    splats.log_scales.arg(),
                    splats.quats.arg(),
                    splats.opacity_logits.arg(),
                    splats.sh.f32_part().arg(),
                    splats.sh.rest_arg(gpu),
                    state.cam.arg(),
                    state.tiles_touched.arg(),
                    state.proj.arg(),
                    v_proj.arg(),
                    p.means.arg(),
                    p.log_scales.arg(),
                    p.quats.arg(),
                    p.opacity_logits.arg(),
                    v_cam.arg(),
                    rows as u32,
                    row0 as u32,
                    out.width,
                    out.height,
                    k as u32,
                    state.active_coeffs,
                    state.antialiased,
                    pose_grad,
                    splats.sh.is_half(),
                )
            );
            if pose_grad {
                cam_sums.push(reduce_columns(gpu, &v_cam, project::VCAM, ReduceOp::Sum));
            }
            rust3r_gpu::profile::mark(gpu, "bwd 3c project");
        }
        params.push(p);
        row0 += rows;
    }
    let mut world_to_camera = [[0.0f32; 4]; 3];
    for sum in &cam_sums {
        let cam_sum = gpu.read(sum)?;
        for r in 0..3 {
            for c in 0..3 {
                world_to_camera[r][c] += cam_sum[r * 3 + c];
            }
            world_to_camera[r][3] += cam_sum[9 + r];
        }
    }
    Ok(ChunkedGrads {
        params,
        projected: v_proj,
        world_to_camera,
        means2d_abs: absgrad.then_some(v_abs),
    })
}
