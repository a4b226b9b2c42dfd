//! The training session: a scene's images on the device within a budget, the trainer (new or
//! resumed), the step loop with its evaluation / checkpoint / save schedule, `eval.json`, and
//! the optional refinements of [`Refinement`] (sensor depth, per-image exposure, camera poses).
//! Progress goes to a callback as [`TrainEvent`]s; nothing is printed.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use burn::tensor::Device;
use rust3r_gpu::collective::Collective;
use rust3r_gpu::{Gpu, GpuBuffer};
use rust3r_io::scene::{ImageCache, Scene, SceneKind, SceneOptions, ViewImage, open_scene};
use rust3r_lpips::{Image, Lpips, LpipsWeights};
use rust3r_splat::train::adam::{AdamConfig, MomentPrecision};
use rust3r_splat::train::extras::EXPOSURE_IDENTITY;
use rust3r_splat::train::init::InitSplats;
use rust3r_splat::train::schedule::{ResolutionSchedule, growth_cap};
use rust3r_splat::train::{
    AdcConfig, BatchView, ConsistencyConfig, DepthTarget, LearningRates, StepExtras, StepInfo,
    StepTarget, Strategy, TrainConfig, Trainer, images::PackedImage, init, mcmc::McmcConfig,
};
use rust3r_splat::{Camera, RasterTuning, ShPrecision};
use serde::{Deserialize, Serialize};

use crate::error::{Context, PipelineError, invalid};
use crate::pose;

/// Densification strategy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StrategyKind {
    /// 3DGS's adaptive density control (split / duplicate / prune).
    #[default]
    Adc,
    /// 3DGS-MCMC (relocation, growth to a cap).
    Mcmc,
}

/// The training schedule (`--preset`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum TrainPreset {
    /// 3DGS / gsplat's schedule: learning rates decay over 30k steps, densification until step
    /// 15k, images at full resolution throughout.
    #[default]
    Default,
    /// Built for time to quality (see [`FastSchedule`]).
    Fast(FastSchedule),
}

/// The fast preset: everything scaled to the run's own length (learning-rate decay ending at
/// the last step, densification over its first part), a coarse-to-fine image resolution
/// (DashGaussian), the Gaussian budget tied to the resolution when there is one
/// (`max_splats`), and multi-view consistent densification (FastGS) that keeps few Gaussians.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FastSchedule {
    /// Steps when the options do not say.
    pub steps: u64,
    /// Downscale factor of the first steps.
    pub start_factor: f32,
    /// Resolution increases until full resolution.
    pub levels: u32,
    /// Fraction of the steps after which images are at full resolution.
    pub full_at: f64,
    /// Fraction of the steps during which ADC densifies.
    pub refine_until: f64,
    /// Multi-view consistent densification thresholds (`None`: the gradient alone).
    pub consistency: Option<ConsistencyConfig>,
}

impl Default for FastSchedule {
    fn default() -> Self {
        Self {
            steps: 12_000,
            start_factor: 4.0,
            levels: 4,
            full_at: 0.5,
            refine_until: 0.5,
            consistency: Some(ConsistencyConfig::default()),
        }
    }
}

impl TrainPreset {
    /// The fast preset with its default settings.
    pub fn fast() -> Self {
        Self::Fast(FastSchedule::default())
    }

    /// Steps of a run when the options do not say.
    pub fn default_steps(&self) -> u64 {
        match self {
            Self::Default => 30_000,
            Self::Fast(f) => f.steps,
        }
    }

    /// The resolution schedule of a run of `steps` steps (`None`: full resolution throughout).
    pub fn resolution(&self, steps: u64) -> Option<ResolutionSchedule> {
        match self {
            Self::Default => None,
            Self::Fast(f) if f.levels == 0 || f.start_factor <= 1.0 => None,
            Self::Fast(f) => Some(ResolutionSchedule {
                start_factor: f.start_factor,
                levels: f.levels,
                full_at: (steps as f64 * f.full_at.clamp(0.0, 1.0)) as u64,
            }),
        }
    }
}

/// Where the initial Gaussians come from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum InitKind {
    /// The scene's points when it has at least two, else random.
    #[default]
    Auto,
    /// The scene's points (an error without them).
    Points,
    /// Random points in a box.
    Random,
}

/// Options of a training session (the flags of `rust3r train`).
#[derive(Clone, Debug)]
pub struct TrainOptions {
    /// Output folder: splats.ply, eval.json, checkpoint.bin, renders/.
    pub out: PathBuf,
    pub steps: u64,
    /// The schedule (`steps` is not taken from it: see [`TrainPreset::default_steps`]).
    pub preset: TrainPreset,
    /// Image downscale factor (uses images_N/ when present).
    pub downscale: u32,
    /// Background for RGBA images and rendering.
    pub background: [f32; 3],
    pub strategy: StrategyKind,
    /// Upper bound on the number of Gaussians (MCMC: the cap; default 1M there).
    pub max_splats: Option<usize>,
    /// Device bytes the trainer may use.
    pub memory_budget: Option<u64>,
    /// Hold out every Nth image for evaluation (0: none; ignored with `eval_scene`).
    pub eval_every: usize,
    /// Evaluate on this scene's views instead (a scene in the same world frame, e.g. the
    /// held-out frames `rust3r run --hold-out` writes as `held_out.json`); every view of the
    /// training scene then trains.
    pub eval_scene: Option<PathBuf>,
    /// Extra evaluation steps (the last step is always evaluated).
    pub eval_at: Vec<u64>,
    /// Steps at which to also write splats_<step>.ply (and .spz / .sog with `spz` / `sog`).
    pub save_at: Vec<u64>,
    /// Write a checkpoint every N steps (0: only at the end and when stopped).
    pub checkpoint_every: u64,
    /// Resume from this checkpoint.
    pub resume: Option<PathBuf>,
    pub sh_degree: u32,
    pub init: InitKind,
    /// Number of random initial Gaussians.
    pub init_count: usize,
    /// Half-size of the random initialisation box (default: 1.5 for NeRF-synthetic, else the
    /// scene scale).
    pub init_extent: Option<f64>,
    pub antialiased: bool,
    pub visible_adam: bool,
    /// Also write splats.spz.
    pub spz: bool,
    /// Also write splats.sog (PlayCanvas SOG bundle).
    pub sog: bool,
    pub seed: u64,
    pub absgrad: bool,
    pub deterministic: bool,
    /// Alpha loss weight (None: 0, or the checkpoint's value when resuming).
    pub alpha_loss: Option<f32>,
    pub adam_moments: Option<MomentPrecision>,
    pub sh_precision: Option<ShPrecision>,
    /// Host RAM for decoded images, bytes.
    pub image_cache_bytes: u64,
    /// LPIPS weights: every evaluation also reports LPIPS.
    pub lpips: Option<LpipsWeights>,
    /// Set to stop at the next step with a checkpoint written (Ctrl-C).
    pub stop: Option<Arc<AtomicBool>>,
    /// Rasterizer layout choices (default: per adapter).
    pub raster: RasterTuning,
    /// Views per optimisation step (their mean gradient, one Adam update: gsplat's batch).
    /// 1: the classic one-view step. With several ranks ([`train_data_parallel`]) the batch is
    /// shared out, views `r, r + N, ...` to rank `r`, and must hold at least one per rank.
    pub batch: usize,
}

impl Default for TrainOptions {
    fn default() -> Self {
        Self {
            out: PathBuf::from("out"),
            steps: 30_000,
            preset: TrainPreset::Default,
            downscale: 1,
            background: [1.0; 3],
            strategy: StrategyKind::Adc,
            max_splats: None,
            memory_budget: None,
            eval_every: 8,
            eval_scene: None,
            eval_at: vec![7000],
            save_at: Vec::new(),
            checkpoint_every: 5000,
            resume: None,
            sh_degree: 3,
            init: InitKind::Auto,
            init_count: 100_000,
            init_extent: None,
            antialiased: false,
            visible_adam: false,
            spz: false,
            sog: false,
            seed: 42,
            absgrad: false,
            deterministic: false,
            alpha_loss: None,
            adam_moments: None,
            sh_precision: None,
            image_cache_bytes: 4_000_000_000,
            lpips: None,
            stop: None,
            raster: RasterTuning::default(),
            batch: 1,
        }
    }
}

/// Refinements for captures: depth supervision, per-image exposure and camera poses.
/// All off by default.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Refinement {
    /// Weight of the depth term `w · mean_p ŵ_p |e_p − t_p| / mean(t)` (0: off; needs depth
    /// maps), `ŵ` a view's [`ViewDepth::weight`] over its mean on the pixels with depth (1 when
    /// the view has none).
    pub depth_weight: f32,
    /// Optimise an affine colour transform per training image.
    pub exposure: bool,
    /// Adam learning rate of the exposure parameters.
    pub exposure_lr: f32,
    /// Weight of `|[A, b] − [I, 0]|²` added to each image's loss.
    pub exposure_reg: f32,
    /// Step from which exposures are optimised.
    pub exposure_start: u64,
    /// Optimise every training view's pose.
    pub pose: bool,
    /// Adam learning rate of the rotation (radians); translation: this times the scene scale
    /// (at least 1).
    pub pose_lr: f32,
    /// Step from which poses are optimised.
    pub pose_start: u64,
}

impl Default for Refinement {
    fn default() -> Self {
        Self {
            depth_weight: 0.0,
            exposure: false,
            exposure_lr: 2e-3,
            exposure_reg: 1e-2,
            exposure_start: 100,
            pose: false,
            pose_lr: 2e-4,
            pose_start: 500,
        }
    }
}

/// One evaluation, as written to `eval.json`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct EvalRecord {
    pub step: u64,
    pub psnr: f64,
    pub ssim: f64,
    /// Mean LPIPS over the held-out views; only with LPIPS weights (absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lpips: Option<f64>,
    pub num_splats: usize,
    pub num_views: usize,
    pub train_seconds: f64,
    pub it_per_s: f64,
    pub peak_gpu_bytes: u64,
    /// Each held-out view's scores (absent in files written before they were recorded).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub views: Vec<ViewScore>,
}

/// One held-out view's scores in an [`EvalRecord`].
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ViewScore {
    /// The view's image name.
    pub name: String,
    pub psnr: f64,
    pub ssim: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lpips: Option<f64>,
}

/// Statistics of a step (every 100th step and the last).
#[derive(Clone, Copy, Debug)]
pub struct StepStats {
    pub loss: f32,
    pub psnr: f32,
    /// The depth term, when depth supervision is on.
    pub depth_loss: Option<f32>,
    pub num_splats: usize,
    pub num_visible: usize,
    pub gpu_bytes: u64,
}

/// Progress of a session.
pub enum TrainEvent<'a> {
    /// A line of information ("N train / M held-out views, ...").
    Info(String),
    /// Something the user should know about that does not stop the run.
    Warning(String),
    /// The step loop starts.
    Started {
        scene: &'a Scene,
        train: &'a [usize],
        step: u64,
        steps: u64,
    },
    /// After every step; `stats` every 100th step and at the last. `trainer` is for live views
    /// (e.g. a handle copy of its parameter buffers).
    Step {
        step: u64,
        info: &'a StepInfo,
        stats: Option<StepStats>,
        trainer: &'a Trainer,
    },
    /// After an evaluation of the held-out views (`eval.json` is written).
    Eval {
        record: &'a EvalRecord,
        trainer: &'a Trainer,
        scene: &'a Scene,
        cache: &'a ImageCache,
        eval: &'a [usize],
    },
    /// Stopped through [`TrainOptions::stop`]: the checkpoint and splats.ply are written.
    Interrupted { step: u64, checkpoint: &'a Path },
}

/// What a finished (or stopped) session did.
#[derive(Clone, Debug)]
pub struct TrainSummary {
    pub steps_run: u64,
    pub train_seconds: f64,
    pub num_splats: usize,
    pub splats: PathBuf,
    pub interrupted: bool,
    /// The last evaluation, when there were held-out views.
    pub last_eval: Option<EvalRecord>,
}

/// What a caller that built its own scene hands to [`TrainSession::from_scene`].
pub struct SceneSetup {
    /// Training and held-out view indices.
    pub train: Vec<usize>,
    pub eval: Vec<usize>,
    /// Initial Gaussians (instead of the scene's points / a random box).
    pub init: Option<InitSplats>,
    /// Per view, a depth map at the view's delivered size.
    pub depth: Vec<Option<ViewDepth>>,
    /// Scene scale (default: from the training cameras).
    pub scale: Option<f64>,
    /// Views rendered at a pose interpolated between two other views' current poses (held-out
    /// frames that SLAM never saw); their exposure is interpolated the same way.
    pub interpolated: Vec<Interpolated>,
    /// A trainer to go on with (online training's): its Gaussians, optimizer state and step
    /// count replace `init`; its scene scale becomes the session's.
    pub trainer: Option<Trainer>,
}

/// A view's depth map for the depth term, at the view's delivered size.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ViewDepth {
    /// Depth along z per pixel (scene units), 0 = unknown.
    pub depth: Vec<f32>,
    /// Relative weight per pixel (finite, `>= 0`; `None`: every pixel 1, as for sensor depth).
    /// The session divides them by their mean over the pixels with depth, so only their ratios
    /// matter.
    pub weight: Option<Vec<f32>>,
}

/// A view posed between two others: `pose::interpolate(camera(before), camera(after), t)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Interpolated {
    pub view: usize,
    pub before: usize,
    pub after: usize,
    /// 0 at `before`, 1 at `after`.
    pub t: f64,
}

pub type Events<'e> = dyn FnMut(TrainEvent<'_>) + 'e;

/// 3DGS scene scale: 1.1 x the largest distance of a camera centre from their centroid.
pub fn scene_scale(scene: &Scene, views: &[usize]) -> f64 {
    let centres: Vec<[f64; 3]> = views
        .iter()
        .map(|&i| {
            let c = scene.views[i].camera_to_world();
            [c[0][3], c[1][3], c[2][3]]
        })
        .collect();
    let n = centres.len().max(1) as f64;
    let mean = [0, 1, 2].map(|k| centres.iter().map(|c| c[k]).sum::<f64>() / n);
    let d = centres
        .iter()
        .map(|c| (0..3).map(|k| (c[k] - mean[k]).powi(2)).sum::<f64>().sqrt())
        .fold(0.0, f64::max);
    (1.1 * d).max(1e-6)
}

/// A training view packed on the device: RGB, and its alpha (when the alpha loss is on) and
/// mask planes.
struct DeviceTarget {
    rgb: PackedImage,
    alpha: Option<PackedImage>,
    mask: Option<PackedImage>,
}

impl DeviceTarget {
    fn upload(gpu: &Gpu, img: &ViewImage) -> Self {
        let (w, h) = (img.width, img.height);
        Self {
            rgb: PackedImage::upload(gpu, &img.rgb, w, h),
            alpha: img
                .alpha
                .as_ref()
                .map(|a| PackedImage::upload_plane(gpu, a, w, h)),
            mask: img
                .mask
                .as_ref()
                .map(|m| PackedImage::upload_plane(gpu, m, w, h)),
        }
    }

    /// Device bytes of a view's packed planes.
    fn bytes(img: &ViewImage) -> u64 {
        let npix = img.width as u64 * img.height as u64;
        let planes = [
            Some(3),
            img.alpha.as_ref().map(|_| 1),
            img.mask.as_ref().map(|_| 1),
        ];
        planes
            .into_iter()
            .flatten()
            .map(|c| (npix * c).div_ceil(4) * 4)
            .sum()
    }

    fn to_f32(&self, gpu: &Gpu) -> StepBuffers {
        StepBuffers {
            rgb: self.rgb.to_f32(gpu),
            alpha: self.alpha.as_ref().map(|a| a.to_f32(gpu)),
            mask: self.mask.as_ref().map(|m| m.to_f32(gpu)),
        }
    }
}

/// One step's target buffers (f32 in [0, 1]).
struct StepBuffers {
    rgb: GpuBuffer<f32>,
    alpha: Option<GpuBuffer<f32>>,
    mask: Option<GpuBuffer<f32>>,
}

impl StepBuffers {
    fn target(&self) -> StepTarget<'_> {
        StepTarget {
            rgb: &self.rgb,
            alpha: self.alpha.as_ref(),
            mask: self.mask.as_ref(),
        }
    }
}

/// Training images: packed on the device when they fit a quarter of the budget, else
/// uploaded from the host cache each step.
struct Targets {
    device: Vec<Option<DeviceTarget>>,
    /// Downscaled copies for the coarse levels of a resolution schedule, coarsest first.
    coarse: Vec<CoarseLevel>,
    cache: ImageCache,
}

/// One coarse level's images (those that fit the device budget; the rest are resized from the
/// host cache when used).
struct CoarseLevel {
    factor: f32,
    device: Vec<Option<DeviceTarget>>,
}

impl Targets {
    fn get(&self, gpu: &Gpu, i: usize) -> Result<StepBuffers, PipelineError> {
        if let Some(img) = &self.device[i] {
            return Ok(img.to_f32(gpu));
        }
        Ok(DeviceTarget::upload(gpu, &*self.cache.get(i)?).to_f32(gpu))
    }

    /// View `i` at coarse level `level` (`None`: full resolution).
    fn get_at(
        &self,
        gpu: &Gpu,
        i: usize,
        level: Option<usize>,
    ) -> Result<StepBuffers, PipelineError> {
        let Some(c) = level.and_then(|l| self.coarse.get(l)) else {
            return self.get(gpu, i);
        };
        if let Some(img) = &c.device[i] {
            return Ok(img.to_f32(gpu));
        }
        let img = self.cache.get(i)?;
        let (w, h) = ResolutionSchedule::size_at(c.factor, img.width, img.height);
        Ok(DeviceTarget::upload(gpu, &img.resized(w, h)).to_f32(gpu))
    }
}

/// A view's depth map and pixel weights on the device, and the term's normalisation
/// `k = 1 / (npix · mean depth · mean weight)` (means over the pixels with depth).
struct DeviceDepth {
    depth: GpuBuffer<f32>,
    weight: Option<GpuBuffer<f32>>,
    k: f32,
}

/// Per-view state of the refinements.
struct RefineState {
    cfg: Refinement,
    /// Depth maps on the device, per view.
    depth: Vec<Option<DeviceDepth>>,
    /// Current world-to-camera per view (refined for training views).
    poses: Vec<[[f64; 4]; 4]>,
    pose_adam: Vec<pose::Adam<6>>,
    exposure: Vec<[f32; 12]>,
    exposure_adam: Vec<pose::Adam<12>>,
    scale: f64,
    /// Per view: posed between two others (`(before, after, t)`).
    interpolated: Vec<Option<(usize, usize, f64)>>,
}

/// A training session (see the module docs).
pub struct TrainSession {
    opts: TrainOptions,
    gpu: Gpu,
    scene: Arc<Scene>,
    train: Vec<usize>,
    eval: Vec<usize>,
    trainer: Trainer,
    targets: Targets,
    lpips: Option<Lpips>,
    records: Vec<EvalRecord>,
    refine: RefineState,
    /// The preset's coarse-to-fine schedule, when it has one.
    resolution: Option<ResolutionSchedule>,
    /// Gaussians at the session's start (the floor of the resolution-tied budget).
    initial_splats: usize,
    /// This session is one rank of a data-parallel run ([`TrainSession::set_collective`]).
    collective: Option<Arc<dyn Collective>>,
}

impl TrainSession {
    /// Opens the scene at `dataset` (COLMAP, transforms.json, NeRF-synthetic), holds out every
    /// `eval_every`th view, builds or resumes the trainer and loads the images.
    pub fn open(
        dataset: &Path,
        opts: TrainOptions,
        gpu: &Gpu,
        on_event: &mut Events<'_>,
    ) -> Result<Self, PipelineError> {
        check_options(&opts)?;
        std::fs::create_dir_all(&opts.out)
            .context_with(|| format!("cannot create output folder {}", opts.out.display()))?;
        let scene_opts = SceneOptions {
            downscale: opts.downscale,
            background: opts.background,
            kind: None,
        };
        let mut open_views = |path: &Path| -> Result<Scene, PipelineError> {
            let mut scene = open_scene(path, &scene_opts)?;
            let missing = scene.remove_missing_images();
            if !missing.is_empty() {
                on_event(TrainEvent::Warning(format!(
                    "{} views of {} have no image file and are skipped (first: {})",
                    missing.len(),
                    path.display(),
                    missing[0].image_path.display()
                )));
            }
            if scene.is_empty() {
                return Err(invalid(format!("{}: no views with images", path.display())));
            }
            Ok(scene)
        };
        let mut scene = open_views(dataset)?;
        let (train, eval) = match &opts.eval_scene {
            Some(path) => {
                let own = scene.len();
                scene.append(open_views(path)?)?;
                ((0..own).collect(), (own..scene.len()).collect())
            }
            None => scene.split(opts.eval_every),
        };
        if train.is_empty() {
            return Err(invalid(format!(
                "{}: no training views left after holding out every {}th",
                dataset.display(),
                opts.eval_every
            )));
        }
        let n = scene.len();
        let setup = SceneSetup {
            train,
            eval,
            init: None,
            depth: vec![None; n],
            scale: None,
            interpolated: Vec::new(),
            trainer: None,
        };
        Self::build(
            dataset.display().to_string(),
            scene,
            setup,
            opts,
            Refinement::default(),
            gpu,
            on_event,
        )
    }

    /// A session on a scene built by the caller (e.g. from a SLAM run), with its own split,
    /// initial Gaussians, depth maps and refinements.
    pub fn from_scene(
        label: &str,
        scene: Scene,
        setup: SceneSetup,
        opts: TrainOptions,
        refine: Refinement,
        gpu: &Gpu,
        on_event: &mut Events<'_>,
    ) -> Result<Self, PipelineError> {
        check_options(&opts)?;
        std::fs::create_dir_all(&opts.out)
            .context_with(|| format!("cannot create output folder {}", opts.out.display()))?;
        if setup.train.is_empty() {
            return Err(invalid(format!("{label}: no training views")));
        }
        let interp_ok = setup.interpolated.iter().all(|p| {
            let n = scene.len();
            let plain = |i: usize| setup.interpolated.iter().all(|q| q.view != i);
            p.view < n
                && p.before < n
                && p.after < n
                && plain(p.before)
                && plain(p.after)
                && !setup.train.contains(&p.view)
        });
        if setup.depth.len() != scene.len()
            || !interp_ok
            || setup
                .train
                .iter()
                .chain(&setup.eval)
                .any(|&i| i >= scene.len())
        {
            return Err(invalid(format!(
                "{label}: the view split or depth maps do not match the scene's {} views",
                scene.len()
            )));
        }
        Self::build(label.to_string(), scene, setup, opts, refine, gpu, on_event)
    }

    fn build(
        label: String,
        scene: Scene,
        setup: SceneSetup,
        opts: TrainOptions,
        refine: Refinement,
        gpu: &Gpu,
        on_event: &mut Events<'_>,
    ) -> Result<Self, PipelineError> {
        let SceneSetup {
            train: train_idx,
            eval: eval_idx,
            init: init_override,
            depth,
            scale,
            interpolated,
            trainer: warm,
        } = setup;
        let scale = scale.unwrap_or_else(|| scene_scale(&scene, &train_idx));
        let kind = scene.kind;
        if let Some(w) = &opts.lpips {
            if eval_idx.is_empty() {
                on_event(TrainEvent::Warning("--lpips-backbone / --lpips-weights: no held-out views to evaluate (--eval-every 0)".into()));
            }
            for &i in &eval_idx {
                let v = &scene.views[i];
                w.tap_sizes(v.camera.height as usize, v.camera.width as usize)
                    .context_with(|| format!("LPIPS on held-out view {}", v.name))?;
            }
        }
        on_event(TrainEvent::Info(format!(
            "{} ({}): {} train / {} held-out views, {}x{}, scene scale {:.3}",
            label,
            kind.as_str(),
            train_idx.len(),
            eval_idx.len(),
            scene.views[train_idx[0]].camera.width,
            scene.views[train_idx[0]].camera.height,
            scale
        )));
        let lpips = opts.lpips.clone().map(|w| {
            on_event(TrainEvent::Info(format!(
                "LPIPS v0.1 ({}) on the held-out views",
                w.net
            )));
            Lpips::new(w, &Device::from(gpu.device().clone()))
        });
        let mcmc = opts.strategy == StrategyKind::Mcmc;
        let cfg = train_config(&opts, scale);
        let mut trainer = match (&opts.resume, warm) {
            (_, Some(mut t)) => {
                t.cfg.scene_scale = scale as f32;
                t
            }
            (Some(ck), None) => resume(gpu, ck, &opts, on_event)?,
            (None, None) => {
                let use_points = match opts.init {
                    InitKind::Auto => scene.points.as_ref().is_some_and(|p| p.xyz.len() >= 2),
                    InitKind::Points => true,
                    InitKind::Random => false,
                };
                let (opacity, scale_factor) = if mcmc { (0.5, 0.1) } else { (0.1, 1.0) };
                let init = match init_override {
                    Some(init) => init,
                    None if use_points => {
                        let p = scene.points.as_ref().ok_or_else(|| {
                            invalid(format!(
                                "{label}: --init points, but the scene has no points"
                            ))
                        })?;
                        on_event(TrainEvent::Info(format!(
                            "initialising from {} SfM points",
                            p.xyz.len()
                        )));
                        init::from_points(&p.xyz, &p.rgb, opacity, scale_factor, opts.sh_degree)?
                    }
                    None => {
                        let extent =
                            opts.init_extent
                                .unwrap_or(if kind == SceneKind::NerfSynthetic {
                                    1.5
                                } else {
                                    scale
                                });
                        on_event(TrainEvent::Info(format!(
                            "initialising {} random Gaussians in [-{extent:.2}, {extent:.2}]^3",
                            opts.init_count
                        )));
                        init::random_box(
                            opts.init_count,
                            extent,
                            opacity,
                            scale_factor,
                            opts.seed,
                            opts.sh_degree,
                        )
                    }
                };
                Trainer::new(gpu, cfg, &init)?
            }
        };
        trainer.set_raster_tuning(opts.raster);

        // Images: decode in parallel into RAM, pack onto the device when they fit. Alpha is kept
        // only for the alpha loss; masks are always used.
        let alpha_weight = trainer.cfg.alpha_loss_weight;
        let masked = train_idx
            .iter()
            .filter(|&&i| scene.mask_path(i).is_some())
            .count();
        if scene.num_masks() > 0 {
            on_event(TrainEvent::Info(format!(
                "masks: {masked} of {} training views have one (masked-out pixels are ignored by the loss)",
                train_idx.len()
            )));
        }
        let poses: Vec<[[f64; 4]; 4]> = scene.views.iter().map(|v| v.world_to_camera).collect();
        let scene = Arc::new(scene);
        let cache =
            ImageCache::new(scene.clone(), opts.image_cache_bytes).keep_alpha(alpha_weight > 0.0);
        let t0 = Instant::now();
        let mut all: Vec<usize> = train_idx.clone();
        all.extend(&eval_idx);
        cache.preload(&all)?;
        let device_budget = opts.memory_budget.map(|b| b / 4).unwrap_or(2 << 30);
        let mut used = 0u64;
        let mut with_alpha = 0usize;
        let mut device: Vec<Option<DeviceTarget>> = (0..scene.len()).map(|_| None).collect();
        for &i in &train_idx {
            let v = &scene.views[i];
            // Before decoding: RGB (and the mask) must fit; the alpha plane is known after.
            let planned = (v.camera.width as u64 * v.camera.height as u64 * 3).div_ceil(4) * 4;
            if used + planned > device_budget && alpha_weight == 0.0 {
                continue;
            }
            let img = cache.get(i)?;
            with_alpha += img.alpha.is_some() as usize;
            let bytes = DeviceTarget::bytes(&img);
            if used + bytes <= device_budget {
                device[i] = Some(DeviceTarget::upload(gpu, &img));
                used += bytes;
            }
        }
        on_event(TrainEvent::Info(format!(
            "images decoded in {:.1} s ({} MiB on the device)",
            t0.elapsed().as_secs_f64(),
            used >> 20
        )));
        if alpha_weight > 0.0 {
            on_event(TrainEvent::Info(format!(
                "alpha loss (weight {alpha_weight}): {with_alpha} of {} training views have an alpha channel",
                train_idx.len()
            )));
            if with_alpha == 0 {
                on_event(TrainEvent::Warning("--alpha-loss has no effect: no training image has an alpha channel (or it is fully opaque)".into()));
            }
        }
        // Coarse-to-fine: every coarse level's training images, downscaled once here.
        let resolution = opts.preset.resolution(opts.steps);
        let mut coarse = Vec::new();
        if let Some(r) = &resolution {
            let t0 = Instant::now();
            for level in 0..r.levels {
                let factor = r.factor_of(level);
                let mut dev: Vec<Option<DeviceTarget>> = (0..scene.len()).map(|_| None).collect();
                for &i in &train_idx {
                    let img = cache.get(i)?;
                    let (w, h) = ResolutionSchedule::size_at(factor, img.width, img.height);
                    let small = img.resized(w, h);
                    let bytes = DeviceTarget::bytes(&small);
                    if used + bytes <= device_budget {
                        dev[i] = Some(DeviceTarget::upload(gpu, &small));
                        used += bytes;
                    }
                }
                coarse.push(CoarseLevel {
                    factor,
                    device: dev,
                });
            }
            on_event(TrainEvent::Info(format!(
                "coarse-to-fine: images downscaled {:.2}x at first, full resolution from step {} ({} levels prepared in {:.1} s)",
                r.start_factor,
                r.full_at,
                r.levels,
                t0.elapsed().as_secs_f64()
            )));
        }
        let targets = Targets {
            device,
            coarse,
            cache,
        };

        let n = scene.len();
        let mut depth_dev: Vec<Option<DeviceDepth>> = (0..n).map(|_| None).collect();
        if refine.depth_weight > 0.0 {
            let (mut with_depth, mut weighted) = (0, 0);
            for &i in &train_idx {
                let v = &scene.views[i];
                let Some(vd) = &depth[i] else { continue };
                let d = &vd.depth;
                if d.len() != v.camera.width as usize * v.camera.height as usize {
                    return Err(invalid(format!(
                        "{label}: the depth map of view {} has {} values for a {}x{} image",
                        v.name,
                        d.len(),
                        v.camera.width,
                        v.camera.height
                    )));
                }
                if let Some(w) = &vd.weight
                    && (w.len() != d.len() || !w.iter().all(|&x| x.is_finite() && x >= 0.0))
                {
                    return Err(invalid(format!(
                        "{label}: the depth weights of view {} must be {} finite values >= 0",
                        v.name,
                        d.len()
                    )));
                }
                let valid: Vec<usize> = (0..d.len())
                    .filter(|&p| d[p] > 0.0 && d[p].is_finite())
                    .collect();
                if valid.is_empty() {
                    continue;
                }
                let mean = |f: &dyn Fn(usize) -> f64| {
                    valid.iter().map(|&p| f(p)).sum::<f64>() / valid.len() as f64
                };
                let mean_depth = mean(&|p| d[p] as f64);
                let mean_weight = match &vd.weight {
                    Some(w) => mean(&|p| w[p] as f64),
                    None => 1.0,
                };
                if mean_weight <= 0.0 {
                    // Every pixel with depth weighs 0.
                    continue;
                }
                let k = 1.0 / (d.len() as f64 * mean_depth * mean_weight);
                depth_dev[i] = Some(DeviceDepth {
                    depth: gpu.upload(d),
                    weight: vd.weight.as_ref().map(|w| gpu.upload(w)),
                    k: k as f32,
                });
                with_depth += 1;
                weighted += vd.weight.is_some() as usize;
            }
            let per_pixel = if weighted > 0 {
                format!(" ({weighted} with per-pixel weights)")
            } else {
                String::new()
            };
            on_event(TrainEvent::Info(format!(
                "depth supervision (weight {}): {with_depth} of {} training views have depth{per_pixel}",
                refine.depth_weight,
                train_idx.len()
            )));
        }
        let refine = RefineState {
            cfg: refine,
            depth: depth_dev,
            poses,
            pose_adam: vec![pose::Adam::default(); n],
            exposure: vec![EXPOSURE_IDENTITY; n],
            exposure_adam: vec![pose::Adam::default(); n],
            scale,
            interpolated: {
                let mut v = vec![None; n];
                for p in &interpolated {
                    v[p.view] = Some((p.before, p.after, p.t));
                }
                v
            },
        };

        let eval_path = opts.out.join("eval.json");
        let records: Vec<EvalRecord> = match std::fs::read(&eval_path) {
            Ok(bytes) if opts.resume.is_some() => {
                serde_json::from_slice::<Vec<serde_json::Value>>(&bytes)
                    .ok()
                    .map(|v| {
                        v.into_iter()
                            .filter_map(|r| serde_json::from_value::<EvalRecord>(r).ok())
                            .collect()
                    })
                    .unwrap_or_default()
            }
            _ => Vec::new(),
        };
        let initial_splats = trainer.num_splats();
        Ok(Self {
            opts,
            gpu: gpu.clone(),
            scene,
            train: train_idx,
            eval: eval_idx,
            trainer,
            targets,
            lpips,
            records,
            refine,
            resolution,
            initial_splats,
            collective: None,
        })
    }

    /// Makes this session one rank of a data-parallel run (docs/multi-gpu.md): every rank opens
    /// the same scene with the same options, steps on its share of each batch, and sums its
    /// gradients with the others' through `collective`. Rank 0 alone writes outputs
    /// (evaluations, checkpoints, splats) and reports events; the others stay silent.
    pub fn set_collective(&mut self, collective: Arc<dyn Collective>) -> Result<(), PipelineError> {
        let world = collective.world_size();
        if self.opts.batch < world {
            return Err(invalid(format!(
                "a batch of {} views cannot be shared by {world} GPUs (--batch must be at least --gpus)",
                self.opts.batch
            )));
        }
        let r = &self.refine.cfg;
        if r.pose || r.exposure {
            return Err(invalid(
                "pose and exposure refinement train on one GPU only",
            ));
        }
        self.collective = Some(collective);
        Ok(())
    }

    /// Whether this session writes outputs (a single run, or rank 0 of a data-parallel one).
    fn is_lead(&self) -> bool {
        self.collective.as_ref().is_none_or(|c| c.rank() == 0)
    }

    pub fn trainer(&self) -> &Trainer {
        &self.trainer
    }

    pub fn scene(&self) -> &Arc<Scene> {
        &self.scene
    }

    pub fn train_views(&self) -> &[usize] {
        &self.train
    }

    pub fn eval_views(&self) -> &[usize] {
        &self.eval
    }

    /// Current world-to-camera of every view: refined for training views, the nearest
    /// training view's correction applied for the others (see [`pose::transfer`]).
    pub fn poses(&self) -> Vec<[[f64; 4]; 4]> {
        (0..self.scene.len())
            .map(|i| self.camera(i).world_to_camera)
            .collect()
    }

    /// Current exposure transform of every view (the nearest training view's for the others,
    /// interpolated for [`Interpolated`] views).
    pub fn exposures(&self) -> Vec<[f32; 12]> {
        (0..self.scene.len()).map(|i| self.exposure_at(i)).collect()
    }

    fn exposure_at(&self, i: usize) -> [f32; 12] {
        match self.refine.interpolated[i] {
            Some((a, b, t)) => {
                let (ea, eb) = (self.exposure_at(a), self.exposure_at(b));
                std::array::from_fn(|k| ((1.0 - t) * ea[k] as f64 + t * eb[k] as f64) as f32)
            }
            None => self.refine.exposure[self.nearest_train(i)],
        }
    }

    /// The training view nearest to view `i` in the scene's order (itself when it trains).
    fn nearest_train(&self, i: usize) -> usize {
        *self
            .train
            .iter()
            .min_by_key(|&&t| t.abs_diff(i))
            .unwrap_or(&i)
    }

    /// The camera view `i` is rendered with.
    pub fn camera(&self, i: usize) -> Camera {
        let mut cam = Camera::from(&self.scene.views[i]);
        if let Some((a, b, t)) = self.refine.interpolated[i] {
            cam.world_to_camera = pose::interpolate(
                &self.camera(a).world_to_camera,
                &self.camera(b).world_to_camera,
                t,
            );
        } else if self.refine.cfg.pose {
            let t = self.nearest_train(i);
            cam.world_to_camera = pose::transfer(
                &self.scene.views[t].world_to_camera,
                &self.refine.poses[t],
                &self.scene.views[i].world_to_camera,
            );
        }
        cam
    }

    fn exposure_of(&self, i: usize) -> Option<[f32; 12]> {
        self.refine.cfg.exposure.then(|| self.exposure_at(i))
    }

    /// Runs the step loop to `opts.steps` (see the module docs).
    pub fn run(&mut self, on_event: &mut Events<'_>) -> Result<TrainSummary, PipelineError> {
        let gpu = self.gpu.clone();
        let out = self.opts.out.clone();
        let steps = self.opts.steps;
        let eval_path = out.join("eval.json");
        let ck_path = out.join("checkpoint.bin");
        let start_step = self.trainer.step;
        let mut train_s = 0.0f64;
        let mut seg = Instant::now();
        let mut order: Vec<usize> = Vec::new();
        let mut peak = gpu.memory_reserved();
        on_event(TrainEvent::Started {
            scene: &self.scene,
            train: &self.train,
            step: self.trainer.step,
            steps,
        });
        let mut last_eval = self.records.last().cloned();
        let lead = self.is_lead();
        let batch = self.opts.batch.max(1);
        while self.trainer.step < steps {
            if self.stop_requested()? {
                if lead {
                    self.trainer.save_checkpoint(&ck_path)?;
                    write_splats(&self.trainer, &[out.join("splats.ply")])?;
                }
                on_event(TrainEvent::Interrupted {
                    step: self.trainer.step,
                    checkpoint: &ck_path,
                });
                return Ok(TrainSummary {
                    steps_run: self.trainer.step - start_step,
                    train_seconds: train_s + seg.elapsed().as_secs_f64(),
                    num_splats: self.trainer.num_splats(),
                    splats: out.join("splats.ply"),
                    interrupted: true,
                    last_eval,
                });
            }
            // The batch's views: the shuffled order, reshuffled whenever it runs out (every
            // rank draws the same order: the shuffle uses the trainer's seeded generator).
            let mut views = Vec::with_capacity(batch);
            while views.len() < batch {
                if order.is_empty() {
                    order = self.train.clone();
                    for k in (1..order.len()).rev() {
                        let j = self.trainer.rng.below(k + 1);
                        order.swap(k, j);
                    }
                }
                let Some(i) = order.pop() else { break };
                views.push(i);
            }
            if views.is_empty() {
                break;
            }
            let info = if views.len() == 1 && self.collective.is_none() {
                self.step_view(views[0])?
            } else {
                self.step_batch(&views)?
            };
            let s = self.trainer.step;
            let stats = if s.is_multiple_of(100) || s == steps {
                peak = peak.max(gpu.memory_reserved());
                Some(StepStats {
                    loss: self.trainer.last_loss()?.unwrap_or(f32::NAN),
                    psnr: self.trainer.last_psnr()?.unwrap_or(f32::NAN),
                    depth_loss: self.trainer.last_depth_loss()?,
                    num_splats: info.num_splats,
                    num_visible: info.num_visible,
                    gpu_bytes: gpu.memory_reserved(),
                })
            } else {
                None
            };
            on_event(TrainEvent::Step {
                step: s,
                info: &info,
                stats,
                trainer: &self.trainer,
            });
            let last = s == steps;
            if !lead {
                continue;
            }
            if self.opts.save_at.contains(&s) {
                let mut paths = vec![out.join(format!("splats_{s}.ply"))];
                if self.opts.spz {
                    paths.push(out.join(format!("splats_{s}.spz")));
                }
                if self.opts.sog {
                    paths.push(out.join(format!("splats_{s}.sog")));
                }
                write_splats(&self.trainer, &paths)?;
            }
            if self.opts.checkpoint_every > 0
                && s.is_multiple_of(self.opts.checkpoint_every)
                && !last
            {
                self.trainer.save_checkpoint(&ck_path)?;
            }
            if (self.opts.eval_at.contains(&s) || last) && !self.eval.is_empty() {
                gpu.sync()?;
                train_s += seg.elapsed().as_secs_f64();
                let render_dir = out.join("renders");
                let (psnr, ssim, lpips_mean, views) =
                    self.evaluate(last.then_some(render_dir.as_path()))?;
                peak = peak.max(gpu.memory_reserved());
                let rec = EvalRecord {
                    step: s,
                    psnr,
                    ssim,
                    lpips: lpips_mean,
                    num_splats: self.trainer.num_splats(),
                    num_views: self.eval.len(),
                    train_seconds: train_s,
                    it_per_s: (s - start_step) as f64 / train_s.max(1e-9),
                    peak_gpu_bytes: peak,
                    views,
                };
                self.records.push(rec.clone());
                let json = serde_json::to_vec_pretty(&self.records)
                    .context_with(|| "eval.json".to_string())?;
                rust3r_io::atomic::write_atomic_with(&eval_path, |w| {
                    std::io::Write::write_all(w, &json)
                })
                .context_with(|| format!("cannot write {}", eval_path.display()))?;
                on_event(TrainEvent::Eval {
                    record: &rec,
                    trainer: &self.trainer,
                    scene: &self.scene,
                    cache: &self.targets.cache,
                    eval: &self.eval,
                });
                last_eval = Some(rec);
                seg = Instant::now();
            }
        }
        gpu.sync()?;
        if self.eval.is_empty() || !lead {
            train_s += seg.elapsed().as_secs_f64();
        }
        let mut paths = vec![out.join("splats.ply")];
        if self.opts.spz {
            paths.push(out.join("splats.spz"));
        }
        if self.opts.sog {
            paths.push(out.join("splats.sog"));
        }
        if lead {
            write_splats(&self.trainer, &paths)?;
            self.trainer.save_checkpoint(&ck_path)?;
        }
        Ok(TrainSummary {
            steps_run: self.trainer.step - start_step,
            train_seconds: train_s,
            num_splats: self.trainer.num_splats(),
            splats: out.join("splats.ply"),
            interrupted: false,
            last_eval,
        })
    }

    /// Whether to stop now (Ctrl-C). Ranks of a data-parallel run agree: each one's flag is
    /// summed over the ranks, every 100 steps (a collective every step would stall the
    /// pipeline), so they all stop at the same step.
    fn stop_requested(&self) -> Result<bool, PipelineError> {
        let mine = self
            .opts
            .stop
            .as_ref()
            .is_some_and(|s| s.load(Ordering::SeqCst));
        let Some(c) = &self.collective else {
            return Ok(mine);
        };
        if !self.trainer.step.is_multiple_of(100) {
            return Ok(false);
        }
        let flag = self.gpu.upload(&[if mine { 1.0f32 } else { 0.0 }]);
        let sum = c.all_reduce_sum(&self.gpu, flag)?;
        Ok(self.gpu.read(&sum)?[0] > 0.0)
    }

    /// One step on a batch of training views (their mean gradient, one update); with a
    /// collective, on this rank's share of them (views `rank, rank + N, ...`). Depth
    /// supervision applies per view; pose and exposure refinement are one-view only.
    fn step_batch(&mut self, views: &[usize]) -> Result<StepInfo, PipelineError> {
        let s = self.trainer.step;
        let r = &self.refine;
        if (r.cfg.pose && s >= r.cfg.pose_start) || (r.cfg.exposure && s >= r.cfg.exposure_start) {
            return Err(invalid(
                "pose and exposure refinement step one view at a time (--batch 1, one GPU)",
            ));
        }
        let level = self.level_at(s);
        let mine: Vec<usize> = match &self.collective {
            Some(c) => views
                .iter()
                .skip(c.rank())
                .step_by(c.world_size())
                .copied()
                .collect(),
            None => views.to_vec(),
        };
        let targets = mine
            .iter()
            .map(|&i| {
                self.targets
                    .get_at(&self.gpu, i, level.map(|(l, _)| l as usize))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let cams: Vec<Camera> = mine
            .iter()
            .map(|&i| {
                let mut cam = Camera::from(&self.scene.views[i]);
                cam.world_to_camera = self.refine.poses[i];
                if let Some((l, r)) = level {
                    let (w, h) = ResolutionSchedule::size_at(r.factor_of(l), cam.width, cam.height);
                    cam.intrinsics = cam.intrinsics.scaled(w, h);
                }
                cam
            })
            .collect();
        let r = &self.refine;
        let batch_views: Vec<BatchView<'_>> =
            mine.iter()
                .zip(&targets)
                .zip(&cams)
                .map(|((&i, target), cam)| BatchView {
                    camera: cam,
                    target: target.target(),
                    extras: StepExtras {
                        // Depth maps are at full resolution: no depth term on coarse levels.
                        depth: r.depth[i].as_ref().filter(|_| level.is_none()).map(|d| {
                            DepthTarget {
                                depth: &d.depth,
                                weight: r.cfg.depth_weight * d.k,
                                pixel_weight: d.weight.as_ref(),
                                min_alpha: 0.5,
                            }
                        }),
                        ..Default::default()
                    },
                })
                .collect();
        let (info, _) = match &self.collective {
            Some(c) => self
                .trainer
                .step_data_parallel(&batch_views, views.len(), c.as_ref())?,
            None => self.trainer.step_batch(&batch_views)?,
        };
        Ok(info)
    }

    /// Coarse-to-fine at step `s`: the image level and its schedule (`None` at full resolution),
    /// after setting the Gaussian budget that level allows.
    fn level_at(&mut self, s: u64) -> Option<(u32, ResolutionSchedule)> {
        if let (Some(r), Some(cap)) = (&self.resolution, self.opts.max_splats) {
            self.trainer.cfg.max_splats =
                Some(growth_cap(self.initial_splats, cap, r.factor_at(s)));
        }
        self.resolution
            .map(|r| (r.level_at(s), r))
            .filter(|(l, r)| *l < r.levels)
    }

    /// One step on training view `i`, with the refinements that apply at this step.
    fn step_view(&mut self, i: usize) -> Result<StepInfo, PipelineError> {
        let s = self.trainer.step;
        // Coarse-to-fine: the level's images and camera, and the Gaussian budget it allows.
        let level = self.level_at(s);
        let target = self
            .targets
            .get_at(&self.gpu, i, level.map(|(l, _)| l as usize))?;
        let r = &self.refine;
        let pose_on = r.cfg.pose && s >= r.cfg.pose_start;
        let exposure_on = r.cfg.exposure && s >= r.cfg.exposure_start;
        // Depth maps are at full resolution: no depth term on coarse levels.
        let depth = r.depth[i]
            .as_ref()
            .filter(|_| level.is_none())
            .map(|d| DepthTarget {
                depth: &d.depth,
                weight: r.cfg.depth_weight * d.k,
                pixel_weight: d.weight.as_ref(),
                min_alpha: 0.5,
            });
        let extras = StepExtras {
            depth,
            exposure: exposure_on.then_some(r.exposure[i]),
            pose_grad: pose_on,
        };
        let mut cam = Camera::from(&self.scene.views[i]);
        cam.world_to_camera = r.poses[i];
        if let Some((l, r)) = level {
            let (w, h) = ResolutionSchedule::size_at(r.factor_of(l), cam.width, cam.height);
            cam.intrinsics = cam.intrinsics.scaled(w, h);
        }
        let (info, grads) = self.trainer.step_extras(&cam, &target.target(), &extras)?;
        let r = &mut self.refine;
        if let Some(g) = grads.world_to_camera {
            let tangent = pose::tangent_gradient(&r.poses[i], &g);
            let lr = r.cfg.pose_lr as f64;
            // Translation in scene units, floored at metres: metric captures span a few metres.
            let lt = lr * r.scale.max(1.0);
            let rates = [lt, lt, lt, lr, lr, lr];
            let step = r.pose_adam[i].step(&tangent, &rates);
            r.poses[i] = pose::apply_left(&r.poses[i], &step);
        }
        if let Some(g) = grads.exposure {
            let e = &mut r.exposure[i];
            let mut grad = [0.0f64; 12];
            for k in 0..12 {
                grad[k] = g[k] as f64
                    + 2.0 * r.cfg.exposure_reg as f64 * (e[k] - EXPOSURE_IDENTITY[k]) as f64;
            }
            let step = r.exposure_adam[i].step(&grad, &[r.cfg.exposure_lr as f64; 12]);
            for k in 0..12 {
                e[k] += step[k] as f32;
            }
        }
        Ok(info)
    }

    /// Mean PSNR / SSIM (and LPIPS) over the held-out views, on renders clamped to [0, 1]; with
    /// `renders`, writes render | ground truth side by side for each view.
    #[allow(clippy::type_complexity)]
    fn evaluate(
        &self,
        renders: Option<&Path>,
    ) -> Result<(f64, f64, Option<f64>, Vec<ViewScore>), PipelineError> {
        let (mut psnr, mut ssim, mut lp) = (0.0, 0.0, 0.0);
        let mut views = Vec::with_capacity(self.eval.len());
        if let Some(dir) = renders {
            std::fs::create_dir_all(dir).map_err(crate::error::io_err(dir))?;
        }
        for &i in &self.eval {
            let gt = self.targets.cache.get(i)?;
            let cam = self.camera(i);
            let exposure = self.exposure_of(i);
            let (p, s, pred) =
                self.trainer
                    .evaluate_view_exposed(&cam, &gt.rgb, exposure.as_ref())?;
            psnr += p;
            ssim += s;
            let mut score = ViewScore {
                name: self.scene.views[i].name.clone(),
                psnr: p,
                ssim: s,
                lpips: None,
            };
            if let Some(net) = &self.lpips {
                let (w, h) = (cam.width as usize, cam.height as usize);
                let gt_f: Vec<f32> = gt.rgb.iter().map(|&v| v as f32 / 255.0).collect();
                let d = net
                    .distance(
                        Image {
                            rgb: &pred,
                            width: w,
                            height: h,
                        },
                        Image {
                            rgb: &gt_f,
                            width: w,
                            height: h,
                        },
                    )
                    .context_with(|| {
                        format!("LPIPS of held-out view {}", self.scene.views[i].name)
                    })?;
                lp += d;
                score.lpips = Some(d);
            }
            views.push(score);
            if let Some(dir) = renders {
                let name = Path::new(&self.scene.views[i].name).with_extension("png");
                let path = dir.join(name.file_name().unwrap_or_default());
                write_side_by_side(&path, &pred, &gt.rgb, cam.width, cam.height)?;
            }
        }
        let n = self.eval.len().max(1) as f64;
        Ok((
            psnr / n,
            ssim / n,
            self.lpips.as_ref().map(|_| lp / n),
            views,
        ))
    }
}

/// One rank's device and collective, made by [`train_data_parallel`]'s caller: `open(rank)`
/// opens the rank's device, `join(rank, &gpu)` joins the group on it (NCCL: blocks until every
/// rank has joined).
pub trait RankFactory: Sync {
    fn open(&self, rank: usize) -> Result<Gpu, PipelineError>;
    fn join(&self, rank: usize, gpu: &Gpu) -> Result<Arc<dyn Collective>, PipelineError>;
}

/// Data-parallel training (docs/multi-gpu.md) of the ranks `local` of a group of `world`
/// (all of them in one process: `0..world`; one process per GPU: `rank..rank + 1`): one thread
/// per local rank opens its device and the scene (each rank holds a full replica and its own
/// copy of the images), the local ranks check that every one of them is ready, join the
/// collective, and run [`TrainSession::run`] on their share of each batch of `opts.batch`
/// views. The first local rank runs on the calling thread and reports events; rank 0 writes
/// the outputs. Returns the first local rank's summary.
pub fn train_data_parallel(
    dataset: &Path,
    opts: TrainOptions,
    local: std::ops::Range<usize>,
    world: usize,
    factory: &dyn RankFactory,
    on_event: &mut Events<'_>,
) -> Result<TrainSummary, PipelineError> {
    check_options(&opts)?;
    if local.is_empty() || local.end > world {
        return Err(invalid(format!(
            "ranks {local:?} of a group of {world}: need at least one, all below {world}"
        )));
    }
    if opts.batch < world {
        return Err(invalid(format!(
            "a batch of {} views cannot be shared by {world} GPUs (--batch must be at least the number of GPUs)",
            opts.batch
        )));
    }
    let ranks = local.len();
    let first = local.start;
    // Setup errors on any rank reach every rank here, before the first collective (a rank
    // that never joins would leave the others waiting).
    let ready = std::sync::Barrier::new(ranks);
    let failed = AtomicBool::new(false);
    let joined: std::sync::Mutex<Vec<Arc<dyn Collective>>> = std::sync::Mutex::new(Vec::new());
    let rank_main =
        |rank: usize, on_event: &mut Events<'_>| -> Result<TrainSummary, PipelineError> {
            let setup = (|| {
                let gpu = factory.open(rank)?;
                let session = TrainSession::open(dataset, opts.clone(), &gpu, on_event)?;
                Ok::<_, PipelineError>((gpu, session))
            })();
            if setup.is_err() {
                failed.store(true, Ordering::SeqCst);
            }
            ready.wait();
            let (gpu, mut session) = setup?;
            if failed.load(Ordering::SeqCst) {
                return Err(invalid(format!(
                    "rank {rank}: aborted, another GPU of the run failed to start"
                )));
            }
            let c = factory.join(rank, &gpu)?;
            joined
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(c.clone());
            session.set_collective(c)?;
            let out = session.run(on_event);
            if out.is_err() {
                // The other local ranks wait for this one in their next collective: end it.
                for c in joined.lock().unwrap_or_else(|e| e.into_inner()).iter() {
                    c.abort();
                }
            }
            out
        };
    std::thread::scope(|s| {
        let others: Vec<_> = (first + 1..local.end)
            .map(|rank| {
                let rank_main = &rank_main;
                s.spawn(move || rank_main(rank, &mut |_| {}))
            })
            .collect();
        let lead = rank_main(first, on_event);
        let mut errors = Vec::new();
        let summary = match lead {
            Ok(s) => Some(s),
            Err(e) => {
                errors.push(e);
                None
            }
        };
        for (k, h) in others.into_iter().enumerate() {
            let rank = first + 1 + k;
            match h.join() {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => errors.push(invalid(format!("GPU rank {rank}: {e}"))),
                Err(_) => errors.push(invalid(format!("GPU rank {rank} panicked"))),
            }
        }
        // Report the cause, not the ranks that stopped because the group was aborted.
        let cause = errors
            .iter()
            .position(|e| !e.to_string().contains("aborted"))
            .unwrap_or(0);
        match (summary, errors.is_empty()) {
            (Some(s), true) => Ok(s),
            _ => Err(errors.swap_remove(cause)),
        }
    })
}

/// Writes render | ground truth side by side as a PNG (atomically).
pub fn write_side_by_side(
    path: &Path,
    pred: &[f32],
    gt: &[u8],
    width: u32,
    height: u32,
) -> Result<(), PipelineError> {
    let (w, h) = (width as usize, height as usize);
    let mut side = vec![0u8; w * 2 * h * 3];
    for y in 0..h {
        for x in 0..w {
            for c in 0..3 {
                side[(y * 2 * w + x) * 3 + c] =
                    (pred[(y * w + x) * 3 + c].clamp(0.0, 1.0) * 255.0 + 0.5) as u8;
                side[(y * 2 * w + w + x) * 3 + c] = gt[(y * w + x) * 3 + c];
            }
        }
    }
    let img = image::RgbImage::from_raw((2 * w) as u32, h as u32, side)
        .ok_or_else(|| invalid("render buffer size"))?;
    let mut bytes = Vec::new();
    img.write_to(
        &mut std::io::Cursor::new(&mut bytes),
        image::ImageFormat::Png,
    )
    .context_with(|| format!("cannot encode {}", path.display()))?;
    rust3r_io::atomic::write_atomic_with(path, |w| std::io::Write::write_all(w, &bytes))
        .context_with(|| format!("cannot write {}", path.display()))
}

/// The trainer configuration of `opts` for a scene of scale `scale`.
pub fn train_config(opts: &TrainOptions, scale: f64) -> TrainConfig {
    let mcmc = opts.strategy == StrategyKind::Mcmc;
    let strategy = if mcmc {
        Strategy::Mcmc(McmcConfig {
            cap_max: opts.max_splats.unwrap_or(1_000_000),
            ..Default::default()
        })
    } else {
        let adc = AdcConfig::default();
        if opts.absgrad {
            Strategy::Adc(AdcConfig {
                absgrad: true,
                grad2d_threshold: 8e-4,
                ..adc
            })
        } else {
            Strategy::Adc(adc)
        }
    };
    let sh_precision = opts.sh_precision.unwrap_or_default();
    let (strategy, lr, sh_degree_interval) = match &opts.preset {
        TrainPreset::Default => (strategy, LearningRates::default(), 1000),
        TrainPreset::Fast(f) => {
            let steps = opts.steps.max(1);
            let until = ((steps as f64 * f.refine_until.clamp(0.0, 1.0)) as u64).max(1);
            let strategy = match strategy {
                Strategy::Adc(a) => Strategy::Adc(AdcConfig {
                    refine_stop: until,
                    refine_start: a.refine_start.min(until / 4),
                    consistency: f.consistency,
                    ..a
                }),
                Strategy::Mcmc(m) => Strategy::Mcmc(McmcConfig {
                    refine_stop: until,
                    refine_start: m.refine_start.min(until / 4),
                    ..m
                }),
            };
            let lr = LearningRates {
                decay_steps: steps,
                ..LearningRates::default()
            };
            // The highest SH degree from a tenth of the run on, as in the 30k schedule.
            (strategy, lr, (steps / 30).clamp(1, 1000))
        }
    };
    TrainConfig {
        sh_degree: opts.sh_degree,
        sh_degree_interval,
        lr,
        background: opts.background,
        antialiased: opts.antialiased,
        scene_scale: scale as f32,
        strategy,
        max_splats: opts.max_splats,
        memory_budget: opts.memory_budget,
        visible_adam: opts.visible_adam,
        seed: opts.seed,
        deterministic: opts.deterministic,
        alpha_loss_weight: opts.alpha_loss.unwrap_or(0.0),
        adam: AdamConfig {
            moments: opts
                .adam_moments
                .unwrap_or_else(|| MomentPrecision::default().for_sh(sh_precision)),
            ..Default::default()
        },
        sh_precision,
        ..Default::default()
    }
    // Batches: gsplat's scaling rules; the fast preset's schedule already follows --steps.
    .for_batch(opts.batch, opts.preset == TrainPreset::Default)
}

fn check_options(opts: &TrainOptions) -> Result<(), PipelineError> {
    if opts.downscale < 1 {
        return Err(invalid("--downscale must be at least 1"));
    }
    if opts.sh_degree > 3 {
        return Err(invalid("--sh-degree must be 0..=3"));
    }
    if opts.batch == 0 {
        return Err(invalid("--batch must be at least 1"));
    }
    if opts.batch > 1 && opts.visible_adam {
        return Err(invalid(
            "--visible-adam steps one view at a time (--batch 1)",
        ));
    }
    if let Some(w) = opts.alpha_loss
        && !(w.is_finite() && w >= 0.0)
    {
        return Err(invalid(format!(
            "--alpha-loss {w} is not a finite weight >= 0"
        )));
    }
    Ok(())
}

/// Loads a checkpoint and converts its SH / moment storage where the options ask for another.
fn resume(
    gpu: &Gpu,
    ck: &Path,
    opts: &TrainOptions,
    on_event: &mut Events<'_>,
) -> Result<Trainer, PipelineError> {
    let mut t = Trainer::load_checkpoint(gpu, ck)?;
    on_event(TrainEvent::Info(format!(
        "resumed {} at step {} with {} Gaussians",
        ck.display(),
        t.step,
        t.num_splats()
    )));
    if let Some(w) = opts.alpha_loss {
        t.cfg.alpha_loss_weight = w;
    }
    // 8-bit SH moments need half SH: convert the SH first when moving to them, the moments
    // first when moving away. f32 SH asked of a checkpoint with 8-bit SH moments: bf16
    // moments, as for a new run.
    let moments = opts
        .adam_moments
        .or_else(|| opts.sh_precision.map(|sh| t.cfg.adam.moments.for_sh(sh)))
        .filter(|&p| p != t.cfg.adam.moments);
    let sh_first = moments == Some(MomentPrecision::Sh8);
    let convert_sh = |t: &mut Trainer, on_event: &mut Events<'_>| -> Result<(), PipelineError> {
        if let Some(p) = opts.sh_precision.filter(|&p| p != t.cfg.sh_precision) {
            on_event(TrainEvent::Info(format!(
                "converting the checkpoint's {} SH coefficients to {p}",
                t.cfg.sh_precision
            )));
            t.set_sh_precision(p)?;
        }
        Ok(())
    };
    if sh_first {
        convert_sh(&mut t, on_event)?;
    }
    if let Some(p) = moments {
        on_event(TrainEvent::Info(format!(
            "converting the checkpoint's {} Adam moments to {p}",
            t.cfg.adam.moments
        )));
        t.set_moment_precision(p)?;
    }
    if !sh_first {
        convert_sh(&mut t, on_event)?;
    }
    Ok(t)
}

/// Read the splats back once and write each path (format by extension).
pub fn write_splats(trainer: &Trainer, paths: &[PathBuf]) -> Result<(), PipelineError> {
    let host = trainer.to_host()?;
    for path in paths {
        rust3r_io::save_splats(path, &host)
            .context_with(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}
