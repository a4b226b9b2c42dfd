//! Gaussian-splatting training on device buffers: render, fused L1 + D-SSIM loss, backward,
//! Adam, densification (ADC or MCMC) and checkpoints.
//!
//! The trainer works on the rasterizer's raw buffers rather than through Burn's autodiff
//! graph: every step is a fixed sequence of CubeCL kernels, so memory is exactly the
//! parameters, their Adam moments and one step's transient buffers, which is what makes a
//! memory budget enforceable (see [`TrainConfig::memory_budget`]).
//!
//! Hyper-parameters default to gsplat's `simple_trainer` / 3DGS values: means LR
//! `1.6e-4 · scene_scale` decayed exponentially to 1% over 30k steps, scales 5e-3, quats 1e-3,
//! opacities 5e-2, SH DC 2.5e-3, higher SH 2.5e-3 / 20, Adam ε = 1e-15, loss
//! `0.8 L1 + 0.2 (1 - SSIM)`, one SH degree per 1000 steps.
//!
//! Optional per-view terms ([`Trainer::step_with`], [`StepTarget`]): a mask (pixels with mask 0
//! contribute nothing to the photometric loss or its gradient; render and target are
//! multiplied by the mask before the loss, as in 3DGS / gsplat, see [`loss`]) and, with
//! [`TrainConfig::alpha_loss_weight`] > 0, an L1 term between the rendered and the
//! ground-truth alpha whose gradient enters the rasterizer's backward as its alpha gradient.

pub mod adam;
pub mod checkpoint;
pub mod consistency;
pub mod densify;
pub mod extras;
pub mod images;
pub mod init;
pub mod loss;
pub mod mcmc;
pub mod schedule;

use rust3r_gpu::collective::{self, Collective};
use rust3r_gpu::{Gpu, GpuBuffer};
use serde::{Deserialize, Serialize};

use crate::render::{
    GpuSplats, RasterTuning, RenderOptions, RenderState, ShCoeffs, ShPrecision, render,
    render_backward_with,
};
use crate::{Camera, SplatError};
use adam::{AdamConfig, MomentPrecision, Moments, adam_update};
use densify::AdcThresholds;
use loss::{AlphaLossOutput, LossKernels, LossOutput};
use mcmc::{HostRng, McmcConfig};
use rust3r_io::{MAX_SH_DEGREE, num_coeffs_for_degree};

/// Per-parameter learning rates.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LearningRates {
    /// Initial means LR, multiplied by the scene scale.
    pub means: f32,
    /// Final / initial means LR ratio reached at `decay_steps`.
    pub means_final_ratio: f32,
    pub decay_steps: u64,
    pub scales: f32,
    pub quats: f32,
    pub opacities: f32,
    pub sh_dc: f32,
    pub sh_rest: f32,
}

impl LearningRates {
    /// Means learning rate at step `step` for a scene of scale `scene_scale`: exponential
    /// decay from `means · scene_scale` to `means_final_ratio` of it at `decay_steps`.
    pub fn means_at(&self, step: u64, scene_scale: f32) -> f32 {
        let gamma = (self.means_final_ratio as f64).powf(1.0 / self.decay_steps.max(1) as f64);
        (self.means as f64 * scene_scale as f64 * gamma.powf(step as f64)) as f32
    }
}

impl Default for LearningRates {
    fn default() -> Self {
        Self {
            means: 1.6e-4,
            means_final_ratio: 0.01,
            decay_steps: 30_000,
            scales: 5e-3,
            quats: 1e-3,
            opacities: 5e-2,
            sh_dc: 2.5e-3,
            sh_rest: 2.5e-3 / 20.0,
        }
    }
}

/// Adaptive density control (3DGS / gsplat `DefaultStrategy` defaults).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AdcConfig {
    pub grad2d_threshold: f32,
    /// Gaussians larger than this fraction of the scene scale are split, smaller ones duplicated.
    pub grow_scale3d: f32,
    pub prune_opacity: f32,
    /// Gaussians larger than this fraction of the scene scale are pruned (after the first reset).
    pub prune_scale3d: f32,
    pub refine_start: u64,
    pub refine_stop: u64,
    pub refine_every: u64,
    /// Opacities are clamped to `2 · prune_opacity` every this many steps (0 = never).
    pub reset_every: u64,
    /// Grow by the sum of absolute per-pixel 2D-mean gradients (gsplat's `absgrad`; use a
    /// larger `grad2d_threshold`, gsplat suggests 8e-4) instead of the norm of their sum.
    #[serde(default)]
    pub absgrad: bool,
    /// Multi-view consistent densification ([`consistency`]): grow only Gaussians whose views
    /// agree that the error around them is high. `None`: classic ADC.
    #[serde(default)]
    pub consistency: Option<ConsistencyConfig>,
}

/// Thresholds of multi-view consistent densification (see [`consistency`]).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConsistencyConfig {
    /// A pixel is a high-error pixel when its L1 error, normalised to [0, 1] by the view's
    /// minimum and maximum, exceeds this.
    pub error_threshold: f32,
    /// A Gaussian may grow only when its footprint holds at least this many high-error pixels
    /// per view that saw it, on average since the last refinement.
    pub min_pixels: f32,
}

impl Default for ConsistencyConfig {
    fn default() -> Self {
        Self {
            error_threshold: 0.1,
            min_pixels: 4.0,
        }
    }
}

impl Default for AdcConfig {
    fn default() -> Self {
        Self {
            grad2d_threshold: 2e-4,
            grow_scale3d: 0.01,
            prune_opacity: 0.005,
            prune_scale3d: 0.1,
            refine_start: 500,
            refine_stop: 15_000,
            refine_every: 100,
            reset_every: 3_000,
            absgrad: false,
            consistency: None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Strategy {
    Adc(AdcConfig),
    Mcmc(McmcConfig),
}

/// Everything that defines a training run besides the data.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrainConfig {
    pub sh_degree: u32,
    /// One more SH degree becomes active every this many steps.
    pub sh_degree_interval: u64,
    pub background: [f32; 3],
    pub antialiased: bool,
    /// Weight of the D-SSIM term.
    pub ssim_lambda: f32,
    pub lr: LearningRates,
    /// Scene scale (3DGS: 1.1 × the largest camera distance from the cameras' centroid).
    pub scene_scale: f32,
    pub strategy: Strategy,
    /// Upper bound on the number of Gaussians.
    pub max_splats: Option<usize>,
    /// Device bytes the trainer may use; growth stops before it would be exceeded.
    pub memory_budget: Option<u64>,
    /// Skip Adam updates of Gaussians that were not visible in the step.
    pub visible_adam: bool,
    pub adam: AdamConfig,
    pub seed: u64,
    /// Bit-reproducible steps (the rasterizer's deterministic backward instead of float
    /// atomics); resuming a checkpoint then continues exactly as the uninterrupted run.
    #[serde(default)]
    pub deterministic: bool,
    /// Weight `w` of the alpha term `w · mean|alpha_render - alpha_gt|`, added for views whose
    /// target has an alpha channel ([`StepTarget::alpha`]); 0 (the default) turns it off.
    #[serde(default)]
    pub alpha_loss_weight: f32,
    /// Storage of the SH coefficients (higher orders as half floats by default; configurations
    /// written before that existed trained f32 coefficients).
    #[serde(default = "ShPrecision::legacy")]
    pub sh_precision: ShPrecision,
}

impl TrainConfig {
    /// This configuration adapted to steps over `batch` views (gsplat's `simple_trainer.py`
    /// batch rules, after Malladi et al.'s square-root scaling for Adam): learning rates times
    /// `sqrt(batch)`, Adam's `eps` divided by it and `1 - beta` times `batch`; with
    /// `scale_schedule` every step count (densification start / stop / interval, opacity
    /// resets, SH degree interval, learning-rate decay) divided by `batch`, so a run of
    /// `S / batch` steps sees the views of an `S`-step one-view run on the same schedule. A
    /// batch of 1 returns the configuration unchanged.
    pub fn for_batch(mut self, batch: usize, scale_schedule: bool) -> Self {
        if batch <= 1 {
            return self;
        }
        let b = batch as f32;
        let root = b.sqrt();
        let lr = &mut self.lr;
        for rate in [
            &mut lr.means,
            &mut lr.scales,
            &mut lr.quats,
            &mut lr.opacities,
            &mut lr.sh_dc,
            &mut lr.sh_rest,
        ] {
            *rate *= root;
        }
        self.adam.eps /= root;
        self.adam.beta1 = (1.0 - b * (1.0 - self.adam.beta1)).max(0.0);
        self.adam.beta2 = (1.0 - b * (1.0 - self.adam.beta2)).max(0.0);
        if scale_schedule {
            let per = |steps: u64| (steps / batch as u64).max(1);
            self.sh_degree_interval = per(self.sh_degree_interval);
            self.lr.decay_steps = per(self.lr.decay_steps);
            match &mut self.strategy {
                Strategy::Adc(a) => {
                    a.refine_start = per(a.refine_start);
                    a.refine_stop = per(a.refine_stop);
                    a.refine_every = per(a.refine_every);
                    if a.reset_every > 0 {
                        a.reset_every = per(a.reset_every);
                    }
                }
                Strategy::Mcmc(m) => {
                    m.refine_start = per(m.refine_start);
                    m.refine_stop = per(m.refine_stop);
                    m.refine_every = per(m.refine_every);
                }
            }
        }
        self
    }
}

impl Default for TrainConfig {
    fn default() -> Self {
        Self {
            sh_degree: 3,
            sh_degree_interval: 1000,
            background: [1.0; 3],
            antialiased: false,
            ssim_lambda: 0.2,
            lr: LearningRates::default(),
            scene_scale: 1.0,
            strategy: Strategy::Adc(AdcConfig::default()),
            max_splats: None,
            memory_budget: None,
            visible_adam: false,
            adam: AdamConfig::default(),
            seed: 42,
            deterministic: false,
            alpha_loss_weight: 0.0,
            sh_precision: ShPrecision::default(),
        }
    }
}

/// What a training step compares the render with ([`Trainer::step_with`]).
#[derive(Clone, Copy, Debug)]
pub struct StepTarget<'a> {
    /// Interleaved RGB in [0, 1] at the camera's resolution (`width * height * 3`).
    pub rgb: &'a GpuBuffer<f32>,
    /// Ground-truth alpha in [0, 1], one value per pixel; used when
    /// [`TrainConfig::alpha_loss_weight`] > 0.
    pub alpha: Option<&'a GpuBuffer<f32>>,
    /// Per-pixel weight in [0, 1] (0 = ignore the pixel), one value per pixel: applied to the
    /// photometric loss (render and target multiplied by it) and to the alpha term.
    pub mask: Option<&'a GpuBuffer<f32>>,
}

impl<'a> StepTarget<'a> {
    /// RGB only: no alpha, no mask.
    pub fn rgb(rgb: &'a GpuBuffer<f32>) -> Self {
        Self {
            rgb,
            alpha: None,
            mask: None,
        }
    }
}

/// Optional terms of a step beyond the photometric loss ([`Trainer::step_extras`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct StepExtras<'a> {
    /// Depth supervision (see [`extras::depth_loss`]).
    pub depth: Option<DepthTarget<'a>>,
    /// The view's exposure transform `[A row-major, b]`, applied to the render before the
    /// photometric loss (see [`extras`]); its gradient is returned.
    pub exposure: Option<[f32; 12]>,
    /// Return the gradient with respect to the camera pose.
    pub pose_grad: bool,
}

/// A depth map to supervise the rendered expected depth with.
#[derive(Clone, Copy, Debug)]
pub struct DepthTarget<'a> {
    /// Metric depth along the camera's z axis per pixel of the view, 0 where unknown.
    pub depth: &'a GpuBuffer<f32>,
    /// Weight `k` of `k · Σ w_p |e − t|` (the caller folds in its normalisation).
    pub weight: f32,
    /// Per-pixel weights `w_p` (finite, `>= 0`), e.g. the network's confidence for predicted
    /// depth; `None` weighs every pixel 1 (sensor depth).
    pub pixel_weight: Option<&'a GpuBuffer<f32>>,
    /// Pixels whose accumulated opacity is at most this are skipped.
    pub min_alpha: f32,
}

/// One view of a batched step ([`Trainer::step_batch`]).
#[derive(Clone, Copy, Debug)]
pub struct BatchView<'a> {
    pub camera: &'a Camera,
    pub target: StepTarget<'a>,
    pub extras: StepExtras<'a>,
}

impl<'a> BatchView<'a> {
    /// RGB target only, no extras.
    pub fn rgb(camera: &'a Camera, rgb: &'a GpuBuffer<f32>) -> Self {
        Self {
            camera,
            target: StepTarget::rgb(rgb),
            extras: StepExtras::default(),
        }
    }
}

/// What the forward and backward pass of one view leave for the parameter update.
struct ViewPass {
    /// Parameter gradients in [`GROUPS`] order (SH empty when the fused SH step computes it).
    grads: [GpuBuffer<f32>; 5],
    /// Half-float SH with one view per step: the render state and projected gradient the fused
    /// SH Adam step reads.
    fused_sh: Option<(RenderState, GpuBuffer<f32>)>,
    radii: GpuBuffer<u32>,
    num_visible: usize,
    loss: LossOutput,
    alpha_loss: Option<AlphaLossOutput>,
    depth_loss: Option<extras::DepthLossOutput>,
    extra: ExtraGrads,
}

/// Gradients of the step's loss with respect to the extras' own parameters.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ExtraGrads {
    /// `∂L/∂ world_to_camera` (top three rows), with [`StepExtras::pose_grad`].
    pub world_to_camera: Option<[[f32; 4]; 3]>,
    /// `∂L/∂[A, b]` of the exposure transform, with [`StepExtras::exposure`].
    pub exposure: Option<[f32; 12]>,
}

/// Parameter groups in buffer order.
pub const GROUPS: [&str; 5] = ["means", "log_scales", "quats", "opacity_logits", "sh"];

/// Device bytes per Gaussian of training, by kind ([`Trainer::memory_ledger`]). Persistent:
/// parameters, Adam moments and ADC statistics live as long as the Gaussian; transient: a
/// step's gradients and rasterizer buffers, which the memory budget also has to hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryLedger {
    pub params: u64,
    pub moments: u64,
    pub adc_stats: u64,
    pub transient: u64,
}

impl MemoryLedger {
    pub fn persistent(&self) -> u64 {
        self.params + self.moments + self.adc_stats
    }
    pub fn total(&self) -> u64 {
        self.persistent() + self.transient
    }
}

/// What one step reports.
#[derive(Clone, Debug)]
pub struct StepInfo {
    pub step: u64,
    pub num_splats: usize,
    pub num_visible: usize,
    pub refined: Option<RefineInfo>,
}

/// What a densification step did.
#[derive(Clone, Debug, Default)]
pub struct RefineInfo {
    pub before: usize,
    pub after: usize,
    pub duplicated_or_added: usize,
    pub split_or_relocated: usize,
}

/// Training state on the device.
pub struct Trainer {
    gpu: Gpu,
    pub cfg: TrainConfig,
    pub splats: GpuSplats,
    /// Adam first and second moments per group, one value per parameter value.
    moments: Vec<Moments>,
    /// ADC statistics: accumulated normalised 2D gradient norm and visibility count.
    grad2d: GpuBuffer<f32>,
    count: GpuBuffer<f32>,
    /// High-error pixels in each Gaussian's footprint summed over the views since the last
    /// refinement (multi-view consistent densification only; not kept in checkpoints).
    error_score: GpuBuffer<f32>,
    /// Steps taken so far (the next step has index `step`).
    pub step: u64,
    pub rng: HostRng,
    loss: LossKernels,
    /// The last step's loss terms, one per view (alpha and depth: of the views that had one).
    last_loss: Vec<LossOutput>,
    last_alpha_loss: Vec<AlphaLossOutput>,
    last_depth_loss: Vec<extras::DepthLossOutput>,
    zeros_cache: Option<GpuBuffer<f32>>,
    /// Largest device bytes in use sampled inside steps ([`Trainer::track_memory`]).
    peak_in_use: Option<u64>,
    /// Rasterizer layout choices of every render ([`Trainer::set_raster_tuning`]).
    raster: RasterTuning,
}

fn logit(p: f32) -> f32 {
    (p / (1.0 - p)).ln()
}

impl Trainer {
    /// Start from host parameters.
    pub fn new(gpu: &Gpu, cfg: TrainConfig, init: &init::InitSplats) -> Result<Self, SplatError> {
        Self::check_config(gpu, &cfg, init.opacity_logits.len())?;
        if init.sh_degree != cfg.sh_degree {
            return Err(SplatError::InvalidSplats(format!(
                "initial splats have SH degree {}, the configuration asks for {}",
                init.sh_degree, cfg.sh_degree
            )));
        }
        let splats = GpuSplats::from_slices_as(
            gpu,
            &init.means,
            &init.log_scales,
            &init.quats,
            &init.opacity_logits,
            &init.sh,
            init.sh_degree,
            cfg.sh_precision,
        )?;
        let mut t = Self::from_parts(gpu, cfg, splats, HostRng(0));
        t.rng = HostRng(t.cfg.seed ^ 0x5EED_5EED);
        t.check_budget(t.splats.len())?;
        Ok(t)
    }

    /// Error unless `cfg`'s storage can train `n` Gaussians: 8-bit SH moments are stored
    /// beside half-float SH coefficients only, and every training buffer must fit one binding
    /// of the adapter (wgpu binds at most 2 GiB; the trainer does not split its buffers).
    fn check_config(gpu: &Gpu, cfg: &TrainConfig, n: usize) -> Result<(), SplatError> {
        let (moments, sh) = (cfg.adam.moments, cfg.sh_precision);
        if moments == MomentPrecision::Sh8 && sh != ShPrecision::F16 {
            return Err(SplatError::InvalidConfig(format!(
                "Adam moments '{moments}' (8-bit SH moments) need f16 SH coefficients, not {sh}"
            )));
        }
        let (what, per) = Self::widest_buffer(cfg);
        gpu.check_fits(what, n as u64 * per).map_err(|e| {
            SplatError::InvalidSplats(format!(
                "{e}: {n} Gaussians are too many to train at SH degree {} with {moments} moments on this adapter{}",
                cfg.sh_degree,
                if moments == MomentPrecision::Sh8 { "" } else { " (--adam-moments sh8 halves the widest buffer; the CUDA backend has no such limit)" }
            ))
        })
    }

    fn from_parts(gpu: &Gpu, cfg: TrainConfig, splats: GpuSplats, rng: HostRng) -> Self {
        let n = splats.len();
        let rows = Self::row_widths_of(&splats);
        let mut moments: Vec<Moments> = rows[..4]
            .iter()
            .map(|&row| Moments::zeros(gpu, n * row, cfg.adam.moments))
            .collect();
        moments.push(Moments::zeros_sh(gpu, n, rows[4], cfg.adam.moments));
        Self {
            gpu: gpu.clone(),
            cfg,
            moments,
            grad2d: gpu.zeros(n),
            count: gpu.zeros(n),
            error_score: gpu.zeros(n),
            splats,
            step: 0,
            rng,
            loss: LossKernels::new(gpu),
            last_loss: Vec::new(),
            last_alpha_loss: Vec::new(),
            last_depth_loss: Vec::new(),
            zeros_cache: None,
            peak_in_use: None,
            raster: RasterTuning::default(),
        }
    }

    /// Render with these rasterizer layout choices (default: per adapter). Not part of the
    /// run's definition: checkpoints do not keep it.
    pub fn set_raster_tuning(&mut self, tuning: RasterTuning) {
        self.raster = tuning;
    }

    /// The f32 parameter buffers of the first four groups (SH: [`GpuSplats::sh`]).
    fn geometry_buffers(s: &GpuSplats) -> [&GpuBuffer<f32>; 4] {
        [&s.means, &s.log_scales, &s.quats, &s.opacity_logits]
    }

    fn row_widths_of(s: &GpuSplats) -> [usize; 5] {
        [3, 3, 4, 1, s.num_coeffs() * 3]
    }

    fn rows(&self) -> [usize; 5] {
        Self::row_widths_of(&self.splats)
    }

    pub fn gpu(&self) -> &Gpu {
        &self.gpu
    }

    pub fn num_splats(&self) -> usize {
        self.splats.len()
    }

    /// SH degree used at the current step.
    pub fn active_sh_degree(&self) -> u32 {
        ((self.step / self.cfg.sh_degree_interval.max(1)) as u32).min(self.cfg.sh_degree)
    }

    /// Means learning rate at step `s`.
    pub fn means_lr(&self, s: u64) -> f32 {
        self.cfg.lr.means_at(s, self.cfg.scene_scale)
    }

    /// Device bytes per Gaussian of training, by kind (see [`MemoryLedger`]).
    pub fn memory_ledger(
        sh_degree: u32,
        moments: MomentPrecision,
        sh: ShPrecision,
    ) -> MemoryLedger {
        let k = ((sh_degree + 1) * (sh_degree + 1)) as u64;
        let values = 3 + 3 + 4 + 1 + 3 * k;
        // Half-float SH: the trainer's Adam step computes the SH gradient itself, never stored.
        let grads = match sh {
            ShPrecision::F32 => 4 * values,
            ShPrecision::F16 => 4 * (values - 3 * k),
        };
        let params = 4 * (3 + 3 + 4 + 1) + sh.bytes_per_splat(sh_degree);
        let rest = 3 * (k - 1);
        let raster = 4 * (10 + 2 + 2 + 1 + 1 + 1 + 2 + 2 + 1 + 1 + 10 + 12);
        let isects = 4 * 4 * (1 + 1 + 2 + 2 + 1 + 10);
        MemoryLedger {
            params,
            moments: moments.bytes_per_value(false) * (values - rest)
                + moments.bytes_per_value(true) * rest,
            // gradient-norm sum and view count, and the multi-view error score (allocated
            // whether or not consistent densification is on)
            adc_stats: 12,
            // gradients, the rasterizer's buffers, four intersections, and one group (SH,
            // the largest) rebuilt during densification
            transient: grads + raster + isects + 4 * 3 * k,
        }
    }

    /// Device bytes per Gaussian while training (parameters, Adam moments, gradients, the
    /// rasterizer's per-Gaussian buffers and, on average, four tile intersections): the
    /// estimate behind `memory_budget`.
    pub fn bytes_per_splat(sh_degree: u32, moments: MomentPrecision, sh: ShPrecision) -> u64 {
        Self::memory_ledger(sh_degree, moments, sh).total()
    }

    /// Largest number of Gaussians allowed by `max_splats` and the memory budget.
    pub fn capacity(&self) -> usize {
        let (_, widest) = Self::widest_buffer(&self.cfg);
        let mut cap = self
            .cfg
            .max_splats
            .unwrap_or(usize::MAX)
            .min((self.gpu.max_buffer_bytes() / widest) as usize);
        if let Some(budget) = self.cfg.memory_budget {
            let per = Self::bytes_per_splat(
                self.cfg.sh_degree,
                self.cfg.adam.moments,
                self.cfg.sh_precision,
            );
            cap = cap.min((budget / per) as usize);
        }
        cap
    }

    /// The widest per-Gaussian training buffer (one binding must hold it for every Gaussian)
    /// and its bytes per Gaussian: SH values, their moments or gradient, or the projected
    /// rows (40 B).
    fn widest_buffer(cfg: &TrainConfig) -> (&'static str, u64) {
        let k = num_coeffs_for_degree(cfg.sh_degree.min(MAX_SH_DEGREE)) as u64;
        let mut out = ("projected Gaussians", 40);
        let mut consider = |what, bytes| {
            if bytes > out.1 {
                out = (what, bytes);
            }
        };
        consider("quaternions", 16);
        match cfg.sh_precision {
            ShPrecision::F32 => consider("SH coefficients and their gradient", 12 * k),
            ShPrecision::F16 => consider("higher-order SH coefficients", 6 * (k - 1)),
        }
        match cfg.adam.moments {
            MomentPrecision::F32 | MomentPrecision::Bf16 => {
                consider("Adam moments of the SH coefficients", 12 * k)
            }
            MomentPrecision::Sh8 => consider("Adam moments of the SH coefficients", 6 * (k - 1)),
        }
        out
    }

    fn check_budget(&self, n: usize) -> Result<(), SplatError> {
        if let Some(budget) = self.cfg.memory_budget {
            let need = n as u64
                * Self::bytes_per_splat(
                    self.cfg.sh_degree,
                    self.cfg.adam.moments,
                    self.cfg.sh_precision,
                );
            if need > budget {
                return Err(SplatError::InvalidSplats(format!(
                    "{n} Gaussians need about {:.2} GB to train, more than the memory budget of {:.2} GB",
                    need as f64 / 1e9,
                    budget as f64 / 1e9
                )));
            }
        }
        Ok(())
    }

    fn zeros(&mut self, len: usize) -> GpuBuffer<f32> {
        match &self.zeros_cache {
            Some(z) if z.len() == len => z.clone(),
            _ => {
                let z = self.gpu.zeros::<f32>(len);
                self.zeros_cache = Some(z.clone());
                z
            }
        }
    }

    /// One optimisation step on one view. `target` is interleaved RGB in [0, 1] at the
    /// camera's resolution.
    pub fn step(
        &mut self,
        camera: &Camera,
        target: &GpuBuffer<f32>,
    ) -> Result<StepInfo, SplatError> {
        self.step_with(camera, &StepTarget::rgb(target))
    }

    /// One optimisation step on one view, with the target's optional alpha and mask (see
    /// [`StepTarget`]). Without either this is exactly [`Trainer::step`].
    pub fn step_with(
        &mut self,
        camera: &Camera,
        target: &StepTarget<'_>,
    ) -> Result<StepInfo, SplatError> {
        Ok(self.step_extras(camera, target, &StepExtras::default())?.0)
    }

    /// [`Trainer::step_with`] with the optional depth and exposure terms and the pose
    /// gradient of [`StepExtras`]; returns the gradients of their parameters too.
    pub fn step_extras(
        &mut self,
        camera: &Camera,
        target: &StepTarget<'_>,
        extras: &StepExtras<'_>,
    ) -> Result<(StepInfo, ExtraGrads), SplatError> {
        let view = BatchView {
            camera,
            target: *target,
            extras: *extras,
        };
        let (info, mut extra) = self.step_views(std::slice::from_ref(&view), 1, None)?;
        Ok((info, extra.pop().unwrap_or_default()))
    }

    /// One optimisation step over a batch of views, as gsplat's batched step: every view is
    /// rendered and back-propagated in turn, the parameter gradients are summed and divided by
    /// the number of views (the gradient of the mean loss), then ONE Adam update and one
    /// densification decision follow. Densification statistics are accumulated per view on
    /// the view's own gradient (gsplat scales its 2D-mean gradients by the number of cameras
    /// for this), so a batch of `B` views counts `B` observations. A batch of one is exactly
    /// [`Trainer::step_extras`]. Returns each view's [`ExtraGrads`] (of that view's loss).
    ///
    /// Memory: one more set of parameter gradients than a single-view step (the sum), and
    /// half-float SH stores its gradient (the fused SH Adam step needs the one view's render).
    /// [`TrainConfig::visible_adam`] is single-view only (an error here).
    pub fn step_batch(
        &mut self,
        views: &[BatchView<'_>],
    ) -> Result<(StepInfo, Vec<ExtraGrads>), SplatError> {
        self.step_views(views, views.len(), None)
    }

    /// This rank's share of a data-parallel step over a batch of `batch` views (docs/multi-gpu.md):
    /// `views` are the batch's views `rank, rank + N, ...` (`N` = the collective's world size),
    /// their gradient sum is summed over the ranks through `collective` and divided by `batch`,
    /// and every rank applies the same Adam update; the densification statistics are summed over
    /// the ranks before each refinement. Every replica starts from the same parameters and
    /// configuration and takes the same (deterministic) decisions, so replicas stay identical.
    /// The result equals [`Trainer::step_batch`] on the whole batch up to float rounding of the
    /// sums (their order differs).
    pub fn step_data_parallel(
        &mut self,
        views: &[BatchView<'_>],
        batch: usize,
        collective: &dyn Collective,
    ) -> Result<(StepInfo, Vec<ExtraGrads>), SplatError> {
        let world = collective.world_size();
        if world == 0 || collective.rank() >= world {
            return Err(SplatError::InvalidConfig(format!(
                "rank {} in a group of {world}",
                collective.rank()
            )));
        }
        let share = (batch + world - 1 - collective.rank()) / world;
        if batch < world || views.len() != share {
            return Err(SplatError::InvalidConfig(format!(
                "rank {} of {world} got {} views of a batch of {batch}: each of the {world} ranks \
                 takes views rank, rank + {world}, ... (the batch needs at least one view per rank)",
                collective.rank(),
                views.len()
            )));
        }
        self.step_views(views, batch, Some(collective))
    }

    fn step_views(
        &mut self,
        views: &[BatchView<'_>],
        batch: usize,
        collective: Option<&dyn Collective>,
    ) -> Result<(StepInfo, Vec<ExtraGrads>), SplatError> {
        if views.is_empty() {
            return Err(SplatError::InvalidConfig(
                "a training step needs at least one view".into(),
            ));
        }
        if collective.is_none() && batch != views.len() {
            return Err(SplatError::InvalidConfig(format!(
                "a step over {} views with a batch of {batch}",
                views.len()
            )));
        }
        if batch > 1 && self.cfg.visible_adam {
            return Err(SplatError::InvalidConfig(format!(
                "visible_adam steps one view at a time, not a batch of {batch}"
            )));
        }
        let alpha_weight = self.cfg.alpha_loss_weight;
        if !(alpha_weight.is_finite() && alpha_weight >= 0.0) {
            return Err(SplatError::InvalidConfig(format!(
                "alpha_loss_weight must be a finite number >= 0, found {alpha_weight}"
            )));
        }
        for v in views {
            Self::check_target(v.camera, &v.target)?;
        }
        let gpu = self.gpu.clone();
        // One view on one rank: the fused half-float SH Adam step reads that view's render.
        let fused = batch == 1 && collective.is_none();
        rust3r_gpu::profile::start(&gpu);
        let mut sum: Option<[GpuBuffer<f32>; 5]> = None;
        let mut fused_sh = None;
        let mut visible = None;
        let mut num_visible = 0;
        let (mut losses, mut alpha_losses, mut depth_losses, mut extra) =
            (vec![], vec![], vec![], vec![]);
        for v in views {
            let p = self.view_pass(v, fused)?;
            match &sum {
                None => sum = Some(p.grads),
                Some(acc) => {
                    for (a, g) in acc.iter().zip(&p.grads) {
                        collective::add_assign(&gpu, a, g)?;
                    }
                }
            }
            fused_sh = p.fused_sh;
            visible = Some(p.radii);
            num_visible += p.num_visible;
            losses.push(p.loss);
            alpha_losses.extend(p.alpha_loss);
            depth_losses.extend(p.depth_loss);
            extra.push(p.extra);
        }
        let mut grads = sum.ok_or_else(|| SplatError::InvalidConfig("no views".into()))?;
        if let Some(c) = collective {
            for g in grads.iter_mut() {
                *g = c.all_reduce_sum(&gpu, g.clone())?;
            }
            rust3r_gpu::profile::mark(&gpu, "all-reduce");
        }
        if batch > 1 {
            let inv = 1.0 / batch as f32;
            for g in &grads {
                collective::scale(&gpu, g, inv);
            }
        }
        let visible = if self.cfg.visible_adam { visible } else { None };
        let refined = self.apply_step(grads, fused_sh, visible, collective)?;
        self.last_loss = losses;
        self.last_alpha_loss = alpha_losses;
        self.last_depth_loss = depth_losses;
        self.step += 1;
        Ok((
            StepInfo {
                step: self.step,
                num_splats: self.splats.len(),
                num_visible,
                refined,
            },
            extra,
        ))
    }

    fn check_target(camera: &Camera, target: &StepTarget<'_>) -> Result<(), SplatError> {
        let (w, h) = (camera.width, camera.height);
        let npix = (w as usize) * (h as usize);
        if target.rgb.len() != npix * 3 {
            return Err(SplatError::InvalidCamera(format!(
                "target has {} values for a {w}x{h} camera",
                target.rgb.len()
            )));
        }
        for (what, plane) in [("alpha", target.alpha), ("mask", target.mask)] {
            if let Some(p) = plane
                && p.len() != npix
            {
                return Err(SplatError::InvalidCamera(format!(
                    "target {what} has {} values for a {w}x{h} camera",
                    p.len()
                )));
            }
        }
        Ok(())
    }

    /// Forward and backward pass of one view: its loss terms, its parameter gradients, and its
    /// densification statistics accumulated (ADC gradient norms and counts, the multi-view
    /// error score). `fused`: half-float SH leaves its gradient to the fused Adam step, which
    /// gets this view's render state.
    fn view_pass(&mut self, view: &BatchView<'_>, fused: bool) -> Result<ViewPass, SplatError> {
        let gpu = self.gpu.clone();
        let (camera, target, extras) = (view.camera, &view.target, &view.extras);
        let (w, h) = (camera.width, camera.height);
        let npix = (w as usize) * (h as usize);
        let alpha_weight = self.cfg.alpha_loss_weight;
        let half_sh = self.splats.sh.is_half();
        let opts = RenderOptions {
            background: self.cfg.background,
            antialiased: self.cfg.antialiased,
            sh_degree: Some(self.active_sh_degree()),
            deterministic: self.cfg.deterministic,
            absgrad: matches!(&self.cfg.strategy, Strategy::Adc(a) if a.absgrad && self.step < a.refine_stop),
            // Half-float SH on one view: Adam computes the SH gradient itself (not stored).
            sh_grad: !(half_sh && fused),
            tuning: self.raster,
            ..Default::default()
        };
        let (out, state) = render(&gpu, &self.splats, camera, &opts)?;
        self.sample_memory();
        let lambda = self.cfg.ssim_lambda;
        let exposed = extras
            .exposure
            .map(|e| extras::apply_exposure(&gpu, &out.rgb, &e));
        let rendered = exposed.as_ref().unwrap_or(&out.rgb);
        let loss = match target.mask {
            Some(mask) => self
                .loss
                .masked_photometric_loss(&gpu, rendered, target.rgb, mask, w, h, lambda, true),
            None => self
                .loss
                .photometric_loss(&gpu, rendered, target.rgb, w, h, lambda, true),
        };
        let mut extra_grads = ExtraGrads::default();
        let exposure_v_rgb = match extras.exposure {
            Some(e) => {
                let (v, g) = extras::exposure_backward(&gpu, &out.rgb, &e, &loss.grad)?;
                extra_grads.exposure = Some(g);
                Some(v)
            }
            None => None,
        };
        let alpha_loss = match target.alpha {
            Some(alpha) if alpha_weight > 0.0 => {
                Some(
                    self.loss
                        .alpha_loss(&gpu, &out.alpha, alpha, target.mask, alpha_weight),
                )
            }
            _ => None,
        };
        if let Strategy::Adc(AdcConfig {
            consistency: Some(c),
            refine_stop,
            ..
        }) = &self.cfg.strategy
            && self.step < *refine_stop
        {
            consistency::accumulate_error_score(
                &gpu,
                rendered,
                target.rgb,
                w,
                h,
                state.projected(),
                &out.radii,
                &self.error_score,
                c.error_threshold,
            );
        }
        rust3r_gpu::profile::mark(&gpu, "loss");
        let zeros = self.zeros(npix);
        let depth_loss = match &extras.depth {
            Some(d) => Some(extras::depth_loss(
                &gpu,
                &out.depth,
                &out.alpha,
                d.depth,
                d.pixel_weight,
                alpha_loss.as_ref().map(|a| &a.grad),
                d.weight,
                d.min_alpha,
            )?),
            None => None,
        };
        let v_alpha = match (&depth_loss, &alpha_loss) {
            (Some(d), _) => &d.v_alpha,
            (None, Some(a)) => &a.grad,
            (None, None) => &zeros,
        };
        let v_depth = depth_loss.as_ref().map_or(&zeros, |d| &d.v_depth);
        let v_rgb = exposure_v_rgb.as_ref().unwrap_or(&loss.grad);
        let grads = render_backward_with(
            &gpu,
            &self.splats,
            &out,
            &state,
            v_rgb,
            v_alpha,
            v_depth,
            extras.pose_grad,
        )?;
        if extras.pose_grad {
            extra_grads.world_to_camera = Some(grads.world_to_camera);
        }
        self.sample_memory();
        // ADC statistics of this view (per view, on the view's own gradient).
        if let Strategy::Adc(adc) = &self.cfg.strategy
            && self.step < adc.refine_stop
        {
            let (signal, stride) = match &grads.means2d_abs {
                Some(abs) => (abs, 2),
                None => (&grads.projected, crate::kernels::project::VPROJ as u32),
            };
            densify::accumulate(
                &gpu,
                signal,
                stride,
                &out.radii,
                &self.grad2d,
                &self.count,
                w,
                h,
            );
        }
        let fused_sh = (half_sh && fused).then(|| (state, grads.projected.clone()));
        Ok(ViewPass {
            grads: [
                grads.means,
                grads.log_scales,
                grads.quats,
                grads.opacity_logits,
                grads.sh,
            ],
            fused_sh,
            radii: out.radii,
            num_visible: out.num_visible,
            loss,
            alpha_loss,
            depth_loss,
            extra: extra_grads,
        })
    }

    /// The parameter update of a step from its (mean) gradients: the MCMC regularisers, Adam,
    /// then densification or MCMC relocation and noise. With a collective the densification
    /// statistics are summed over the ranks before a refinement.
    fn apply_step(
        &mut self,
        grads: [GpuBuffer<f32>; 5],
        fused_sh: Option<(RenderState, GpuBuffer<f32>)>,
        visible: Option<GpuBuffer<u32>>,
        collective: Option<&dyn Collective>,
    ) -> Result<Option<RefineInfo>, SplatError> {
        let gpu = self.gpu.clone();
        if let Strategy::Mcmc(mc) = &self.cfg.strategy {
            mcmc::add_regularizer_grads(
                &gpu,
                mc,
                &self.splats.opacity_logits,
                &self.splats.log_scales,
                &grads[3],
                &grads[1],
            );
        }
        let t = self.step + 1;
        let lr = &self.cfg.lr;
        let rates = [
            (3, self.means_lr(self.step), 0.0),
            (3, lr.scales, 0.0),
            (4, lr.quats, 0.0),
            (1, lr.opacities, 0.0),
            (3, lr.sh_dc, lr.sh_rest),
        ];
        let rows = self.rows();
        let visible = visible.as_ref();
        // SH first: its fused gradient reads the means of the render.
        for g in [4, 0, 1, 2, 3] {
            let key = adam::rounding_key(self.cfg.seed, g, t);
            let param = match (g, &self.splats.sh) {
                (0..4, _) => Self::geometry_buffers(&self.splats)[g],
                (_, ShCoeffs::F32(sh)) => sh,
                (_, ShCoeffs::Half { dc, rest }) => {
                    let (_, lr_dc, lr_rest) = rates[g];
                    let grad = match &fused_sh {
                        Some((state, v_proj)) => adam::ShGrad::Fused {
                            means: &self.splats.means,
                            inputs: state.sh_grad_inputs(),
                            v_proj,
                        },
                        None => adam::ShGrad::Buffer(&grads[4]),
                    };
                    adam::adam_update_sh_half(
                        &gpu,
                        dc,
                        rest,
                        grad,
                        &self.moments[g],
                        rows[g],
                        (lr_dc, lr_rest),
                        t,
                        &self.cfg.adam,
                        visible,
                        key,
                    );
                    continue;
                }
            };
            // SH degree 0: the DC block is the whole row, so `sh_rest` is never used.
            adam_update(
                &gpu,
                param,
                &grads[g],
                &self.moments[g],
                rows[g],
                rates[g],
                t,
                &self.cfg.adam,
                visible,
                key,
            );
        }

        self.sample_memory();
        drop(fused_sh);
        drop(grads);
        rust3r_gpu::profile::mark(&gpu, "adam");
        let s = self.step;
        let mut refined = None;
        match self.cfg.strategy.clone() {
            Strategy::Adc(adc) => {
                if s < adc.refine_stop {
                    if s > adc.refine_start && s.is_multiple_of(adc.refine_every.max(1)) {
                        if let Some(c) = collective {
                            self.grad2d = c.all_reduce_sum(&gpu, self.grad2d.clone())?;
                            self.count = c.all_reduce_sum(&gpu, self.count.clone())?;
                            self.error_score = c.all_reduce_sum(&gpu, self.error_score.clone())?;
                        }
                        refined = Some(self.refine_adc(&adc, s)?);
                    }
                    if adc.reset_every > 0 && s > 0 && s.is_multiple_of(adc.reset_every) {
                        self.reset_opacity(2.0 * adc.prune_opacity);
                    }
                }
            }
            Strategy::Mcmc(mc) => {
                if s < mc.refine_stop
                    && s > mc.refine_start
                    && s.is_multiple_of(mc.refine_every.max(1))
                {
                    refined = Some(self.refine_mcmc(&mc)?);
                }
                let scale = self.means_lr(s + 1) * mc.noise_lr;
                let seed = self.rng.next_u64() as u32;
                densify::add_position_noise(
                    &gpu,
                    &self.splats.means,
                    &self.splats.log_scales,
                    &self.splats.quats,
                    &self.splats.opacity_logits,
                    scale,
                    seed,
                );
            }
        }
        rust3r_gpu::profile::mark(&gpu, "densify / noise");
        Ok(refined)
    }

    /// Sample the device memory in use inside every following step: after the forward pass,
    /// after the backward pass (forward state and gradients alive: the step's high point)
    /// and after Adam. [`Trainer::peak_in_use`] reports the largest sample. Off by default:
    /// a sample waits for the device's memory report.
    pub fn track_memory(&mut self) {
        self.peak_in_use.get_or_insert(0);
    }

    /// Largest memory sample since [`Trainer::track_memory`] (a lower bound of the true peak:
    /// buffers that live only inside a kernel sequence are not seen), `None` when not tracking.
    pub fn peak_in_use(&self) -> Option<u64> {
        self.peak_in_use
    }

    fn sample_memory(&mut self) {
        if let Some(p) = self.peak_in_use.as_mut() {
            *p = (*p).max(self.gpu.memory_in_use());
        }
    }

    /// Loss of the last step, the alpha term included (reads one or two values back per view);
    /// over a batch, the mean over this trainer's views.
    pub fn last_loss(&self) -> Result<Option<f32>, SplatError> {
        if self.last_loss.is_empty() {
            return Ok(None);
        }
        let mut sum = 0.0;
        for l in &self.last_loss {
            sum += l.value(&self.gpu)?;
        }
        for a in &self.last_alpha_loss {
            sum += a.value(&self.gpu)?;
        }
        Ok(Some(sum / self.last_loss.len() as f32))
    }

    /// The alpha term of the last step's loss, when it had one (reads one value back per view;
    /// over a batch, the mean over the views that had one).
    pub fn last_alpha_loss(&self) -> Result<Option<f32>, SplatError> {
        Self::mean_value(self.last_alpha_loss.iter().map(|l| l.value(&self.gpu)))
    }

    /// The depth term of the last step's loss, when it had one (reads one value back per view;
    /// not part of [`Trainer::last_loss`]; over a batch, the mean over the views that had one).
    pub fn last_depth_loss(&self) -> Result<Option<f32>, SplatError> {
        Self::mean_value(self.last_depth_loss.iter().map(|l| l.value(&self.gpu)))
    }

    /// PSNR of the last step's render against its target (reads one value back per view; over
    /// a batch, the mean over this trainer's views).
    pub fn last_psnr(&self) -> Result<Option<f32>, SplatError> {
        Self::mean_value(self.last_loss.iter().map(|l| l.psnr(&self.gpu)))
    }

    fn mean_value<E>(
        values: impl Iterator<Item = Result<f32, E>>,
    ) -> Result<Option<f32>, SplatError>
    where
        SplatError: From<E>,
    {
        let (mut sum, mut n) = (0.0f32, 0usize);
        for v in values {
            sum += v?;
            n += 1;
        }
        Ok((n > 0).then(|| sum / n as f32))
    }

    /// Rebuild every per-Gaussian buffer from `parent` / `variant` (see [`densify`]).
    fn rebuild(&mut self, parent: &GpuBuffer<u32>, variant: &GpuBuffer<u32>, seed: u32) {
        let gpu = self.gpu.clone();
        let rows = self.rows();
        let s = &mut self.splats;
        // One group at a time so that old and new copies of only one group coexist.
        s.means = densify::rebuild(&gpu, &s.means, parent, variant, rows[0], false);
        s.log_scales = densify::rebuild(&gpu, &s.log_scales, parent, variant, rows[1], false);
        s.quats = densify::rebuild(&gpu, &s.quats, parent, variant, rows[2], false);
        s.opacity_logits =
            densify::rebuild(&gpu, &s.opacity_logits, parent, variant, rows[3], false);
        s.sh = match &s.sh {
            ShCoeffs::F32(sh) => {
                ShCoeffs::F32(densify::rebuild(&gpu, sh, parent, variant, rows[4], false))
            }
            ShCoeffs::Half { dc, rest } => {
                let dc = densify::rebuild(&gpu, dc, parent, variant, 3, false);
                let rest = densify::rebuild_half(&gpu, rest, parent, None, rows[4] - 3);
                ShCoeffs::Half { dc, rest }
            }
        };
        for g in 0..5 {
            self.moments[g] = self.moments[g].rebuild(&gpu, parent, variant, rows[g]);
        }
        densify::apply_splits(&gpu, &s.means, &s.log_scales, &s.quats, variant, seed);
        let n = parent.len();
        self.grad2d = gpu.zeros(n);
        self.count = gpu.zeros(n);
        self.error_score = gpu.zeros(n);
    }

    fn refine_adc(&mut self, adc: &AdcConfig, s: u64) -> Result<RefineInfo, SplatError> {
        let before = self.splats.len();
        let cap = self.capacity();
        let scale = self.cfg.scene_scale;
        let mut th = AdcThresholds {
            grad2d: adc.grad2d_threshold,
            grow_scale: adc.grow_scale3d * scale,
            prune_opacity: adc.prune_opacity,
            prune_scale: adc.prune_scale3d * scale,
            check_big: s > adc.reset_every,
            grow: true,
            min_error_pixels: adc.consistency.map_or(0.0, |c| c.min_pixels),
        };
        // Over the cap: raise the gradient threshold until growth fits, else only prune.
        let mut plan = densify::adc_plan(
            &self.gpu,
            &self.grad2d,
            &self.count,
            &self.error_score,
            &self.splats.log_scales,
            &self.splats.opacity_logits,
            &th,
        )?;
        let mut tries = 0;
        while plan.0.len() > cap && th.grow {
            tries += 1;
            if tries > 12 {
                th.grow = false;
            } else {
                th.grad2d *= 1.5;
            }
            plan = densify::adc_plan(
                &self.gpu,
                &self.grad2d,
                &self.count,
                &self.error_score,
                &self.splats.log_scales,
                &self.splats.opacity_logits,
                &th,
            )?;
        }
        let (parent, variant) = plan;
        let seed = (self.rng.next_u64() ^ s) as u32;
        self.rebuild(&parent, &variant, seed);
        let after = self.splats.len();
        Ok(RefineInfo {
            before,
            after,
            ..Default::default()
        })
    }

    fn refine_mcmc(&mut self, mc: &McmcConfig) -> Result<RefineInfo, SplatError> {
        let gpu = self.gpu.clone();
        let before = self.splats.len();
        let target = ((before as f64 * 1.05) as usize)
            .min(mc.cap_max)
            .min(self.capacity())
            .max(before);
        let opa = gpu.read(&self.splats.opacity_logits)?;
        let ls = gpu.read(&self.splats.log_scales)?;
        let plan = mcmc::plan(&mut self.rng, mc, &opa, &ls, target);
        if plan.relocated == 0 && plan.added == 0 {
            return Ok(RefineInfo {
                before,
                after: before,
                ..Default::default()
            });
        }
        let parent = gpu.upload(&plan.parent);
        let variant = gpu.upload(&plan.variant);
        self.rebuild(&parent, &variant, 0);
        let rows = gpu.upload(&plan.rows);
        densify::scatter(
            &gpu,
            &self.splats.opacity_logits,
            &rows,
            &gpu.upload(&plan.opacity_logits),
            1,
        );
        densify::scatter(
            &gpu,
            &self.splats.log_scales,
            &rows,
            &gpu.upload(&plan.log_scales),
            3,
        );
        Ok(RefineInfo {
            before,
            after: self.splats.len(),
            duplicated_or_added: plan.added,
            split_or_relocated: plan.relocated,
        })
    }

    /// Appends Gaussians (e.g. a new keyframe's points in online training): new rows after the
    /// current ones, with zero Adam moments and densification statistics; the current rows keep
    /// theirs. With half-float SH storage the added Gaussians' higher-order coefficients start
    /// at zero (their DC terms are `add`'s).
    pub fn add_splats(&mut self, add: &init::InitSplats) -> Result<(), SplatError> {
        let m = add.len();
        if m == 0 {
            return Ok(());
        }
        if add.sh_degree != self.cfg.sh_degree {
            return Err(SplatError::InvalidSplats(format!(
                "added splats have SH degree {}, the trainer has {}",
                add.sh_degree, self.cfg.sh_degree
            )));
        }
        let n = self.splats.len();
        if n == 0 {
            return Err(SplatError::InvalidSplats(
                "cannot add Gaussians to a trainer with none".into(),
            ));
        }
        Self::check_config(&self.gpu, &self.cfg, n + m)?;
        self.check_budget(n + m)?;
        let rows = self.rows();
        let want = [
            add.means.len(),
            add.log_scales.len(),
            add.quats.len(),
            add.opacity_logits.len(),
            add.sh.len(),
        ];
        if want != rows.map(|r| r * m) {
            return Err(SplatError::InvalidSplats(format!(
                "added splats have inconsistent lengths {want:?} for {m} Gaussians"
            )));
        }
        let gpu = self.gpu.clone();
        // Old rows keep their place; new rows copy row 0 (variant 1: fresh, zero moments and
        // statistics), then get their own parameters.
        let parent: Vec<u32> = (0..n as u32).chain(std::iter::repeat_n(0, m)).collect();
        let variant: Vec<u32> = std::iter::repeat_n(0u32, n)
            .chain(std::iter::repeat_n(1, m))
            .collect();
        let (parent, variant) = (gpu.upload(&parent), gpu.upload(&variant));
        let new_rows = gpu.upload(&(n as u32..(n + m) as u32).collect::<Vec<u32>>());
        let grow = |src: &GpuBuffer<f32>, row: usize, values: &[f32]| {
            let dst = densify::rebuild(&gpu, src, &parent, &variant, row, false);
            densify::scatter(&gpu, &dst, &new_rows, &gpu.upload(values), row);
            dst
        };
        let s = &mut self.splats;
        s.means = grow(&s.means, rows[0], &add.means);
        s.log_scales = grow(&s.log_scales, rows[1], &add.log_scales);
        s.quats = grow(&s.quats, rows[2], &add.quats);
        s.opacity_logits = grow(&s.opacity_logits, rows[3], &add.opacity_logits);
        s.sh = match &s.sh {
            ShCoeffs::F32(sh) => ShCoeffs::F32(grow(sh, rows[4], &add.sh)),
            ShCoeffs::Half { dc, rest } => {
                let dc_values: Vec<f32> = add
                    .sh
                    .chunks(rows[4])
                    .flat_map(|c| c[..3].to_vec())
                    .collect();
                let dc = grow(dc, 3, &dc_values);
                let rest = densify::rebuild_half(&gpu, rest, &parent, Some(&variant), rows[4] - 3);
                ShCoeffs::Half { dc, rest }
            }
        };
        for g in 0..5 {
            self.moments[g] = self.moments[g].rebuild(&gpu, &parent, &variant, rows[g]);
        }
        self.grad2d = densify::rebuild(&gpu, &self.grad2d, &parent, &variant, 1, true);
        self.count = densify::rebuild(&gpu, &self.count, &parent, &variant, 1, true);
        self.error_score = densify::rebuild(&gpu, &self.error_score, &parent, &variant, 1, true);
        Ok(())
    }

    /// Clamp opacities to at most `value` and zero their Adam moments.
    pub fn reset_opacity(&mut self, value: f32) {
        let n = self.splats.len();
        densify::clamp_max(&self.gpu, &self.splats.opacity_logits, logit(value));
        self.moments[3] = Moments::zeros(&self.gpu, n, self.cfg.adam.moments);
    }

    /// The Adam moments of each group (in [`GROUPS`] order).
    pub fn moments(&self) -> &[Moments] {
        &self.moments
    }

    /// Store the Adam moments in `precision` from now on, converting the current ones
    /// (bf16 -> f32 is exact, f32 -> bf16 rounds to nearest). Used when a checkpoint is
    /// resumed with the other setting.
    pub fn set_moment_precision(&mut self, precision: MomentPrecision) -> Result<(), SplatError> {
        let cfg = TrainConfig {
            adam: AdamConfig {
                moments: precision,
                ..self.cfg.adam
            },
            ..self.cfg.clone()
        };
        Self::check_config(&self.gpu, &cfg, self.num_splats())?;
        let rows = self.rows();
        for g in 0..self.moments.len() {
            let sh_row = (g == 4).then_some(rows[4]);
            self.moments[g] = self.moments[g].converted(&self.gpu, precision, sh_row)?;
        }
        self.cfg.adam.moments = precision;
        Ok(())
    }

    /// Store the SH coefficients in `precision` from now on, converting the current ones
    /// (half -> f32 is exact, f32 -> half rounds to nearest). Used when a checkpoint is
    /// resumed with the other setting.
    pub fn set_sh_precision(&mut self, precision: ShPrecision) -> Result<(), SplatError> {
        let cfg = TrainConfig {
            sh_precision: precision,
            ..self.cfg.clone()
        };
        Self::check_config(&self.gpu, &cfg, self.num_splats())?;
        self.splats.sh =
            self.splats
                .sh
                .converted(&self.gpu, self.splats.num_coeffs(), precision)?;
        self.cfg.sh_precision = precision;
        Ok(())
    }

    /// Row widths (values per Gaussian) of the parameter groups, in [`GROUPS`] order.
    pub fn row_widths(&self) -> [usize; 5] {
        self.rows()
    }

    /// Render a view with every SH degree active (evaluation and previews).
    pub fn render_rgb(&self, camera: &Camera) -> Result<Vec<f32>, SplatError> {
        let opts = RenderOptions {
            background: self.cfg.background,
            antialiased: self.cfg.antialiased,
            forward_only: true,
            tuning: self.raster,
            ..Default::default()
        };
        let (out, _) = render(&self.gpu, &self.splats, camera, &opts)?;
        Ok(self.gpu.read(&out.rgb)?)
    }

    /// PSNR and SSIM ("valid" window) of a render, clamped to [0, 1], against an 8-bit target.
    pub fn evaluate_view(
        &self,
        camera: &Camera,
        target: &[u8],
    ) -> Result<(f64, f64, Vec<f32>), SplatError> {
        self.evaluate_view_exposed(camera, target, None)
    }

    /// [`Trainer::evaluate_view`] with the render passed through an exposure transform first
    /// (see [`extras`]).
    pub fn evaluate_view_exposed(
        &self,
        camera: &Camera,
        target: &[u8],
        exposure: Option<&[f32; 12]>,
    ) -> Result<(f64, f64, Vec<f32>), SplatError> {
        let mut pred = self.render_rgb(camera)?;
        if let Some(e) = exposure {
            extras::apply_exposure_host(&mut pred, e);
        }
        for p in pred.iter_mut() {
            *p = p.clamp(0.0, 1.0);
        }
        let mut se = 0.0f64;
        for (p, &t) in pred.iter().zip(target) {
            let d = *p as f64 - t as f64 / 255.0;
            se += d * d;
        }
        let mse = se / pred.len().max(1) as f64;
        let psnr = -10.0 * mse.log10();
        let gt: Vec<f32> = target.iter().map(|&v| v as f32 / 255.0).collect();
        let a = self.gpu.upload(&pred);
        let b = self.gpu.upload(&gt);
        let l =
            self.loss
                .photometric_loss(&self.gpu, &a, &b, camera.width, camera.height, 0.0, false);
        let map = self.gpu.read(&l.ssim)?;
        Ok((
            psnr,
            loss::valid_ssim_mean(&map, camera.width, camera.height),
            pred,
        ))
    }

    /// Parameters back on the host.
    pub fn to_host(&self) -> Result<rust3r_io::Splats, SplatError> {
        let g = &self.gpu;
        let means = g.read(&self.splats.means)?;
        let ls = g.read(&self.splats.log_scales)?;
        let q = g.read(&self.splats.quats)?;
        Ok(rust3r_io::Splats {
            means: means.chunks_exact(3).map(|c| [c[0], c[1], c[2]]).collect(),
            log_scales: ls.chunks_exact(3).map(|c| [c[0], c[1], c[2]]).collect(),
            rotations: q
                .chunks_exact(4)
                .map(|c| [c[0], c[1], c[2], c[3]])
                .collect(),
            opacity_logits: g.read(&self.splats.opacity_logits)?,
            sh_degree: self.splats.sh_degree,
            sh: self.splats.read_sh(g)?,
        })
    }
}
