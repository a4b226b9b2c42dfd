//! `rust3r train`: Gaussian-splatting training on a posed-image scene.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, Result, bail};
use clap::Args;
use indicatif::ProgressBar;
use rust3r_gpu::collective::{self, Collective, NcclId};
use rust3r_gpu::rendezvous;
use rust3r_gpu::{BackendKind, Gpu, GpuOptions};
use rust3r_io::scene::{ImageCache, Scene};
use rust3r_pipelines::{
    FastSchedule, InitKind, PipelineError, RankFactory, StrategyKind, TrainEvent, TrainOptions,
    TrainPreset, TrainSession, train_data_parallel,
};
use rust3r_splat::train::ConsistencyConfig;
use rust3r_splat::train::Trainer;
use rust3r_splat::train::adam::MomentPrecision;
use rust3r_splat::{Camera, ShPrecision};

use crate::DeviceArgs;
use crate::live::{CameraView, Live, LiveSink};
use crate::lpips_cmd::LpipsFlags;

#[derive(Args, Debug)]
pub struct TrainArgs {
    /// Scene folder (COLMAP, nerfstudio / instant-ngp transforms.json, NeRF-synthetic), detected automatically.
    pub dataset: PathBuf,
    /// Output folder: splats.ply, eval.json, checkpoint.bin, renders/.
    #[arg(long)]
    pub out: PathBuf,
    /// Training schedule: default (3DGS / gsplat's: 30000 steps) or fast (12000 steps built for
    /// time to quality: coarse-to-fine images, schedules scaled to the run, multi-view
    /// consistent densification; docs/guide.md). --steps sets the length of either.
    #[arg(long, value_enum, default_value_t = TrainPresetFlag::Default)]
    pub preset: TrainPresetFlag,
    /// Training steps (default: the preset's).
    #[arg(long)]
    pub steps: Option<u64>,
    /// Image downscale factor (uses images_N/ when present).
    #[arg(long, default_value_t = 1)]
    pub downscale: u32,
    /// Background for RGBA images and rendering: white, black or r,g,b.
    #[arg(long, default_value = "white")]
    pub background: String,
    /// Hold out every Nth image for evaluation (0: none).
    #[arg(long, default_value_t = 8)]
    pub eval_every: usize,
    /// Evaluate on this scene's views instead of holding out every Nth image (any scene format,
    /// in the same world frame: e.g. the `held_out.json` that `rust3r run --hold-out` writes
    /// beside its `slam/` export); every view of DATASET then trains.
    #[arg(long, value_name = "SCENE")]
    pub eval_scene: Option<PathBuf>,
    /// Extra steps at which to evaluate (comma list); the last step is always evaluated.
    #[arg(long, default_value = "7000")]
    pub eval_at: String,
    /// Steps at which to also write splats_<step>.ply (and .spz with --spz; comma list).
    #[arg(long, default_value = "")]
    pub save_at: String,
    /// Write a checkpoint every N steps (0: only at the end and on Ctrl-C).
    #[arg(long, default_value_t = 5000)]
    pub checkpoint_every: u64,
    /// Resume from a checkpoint written by an earlier run.
    #[arg(long)]
    pub resume: Option<PathBuf>,
    /// Initial Gaussians: auto (SfM points when the scene has them, else random), points, random.
    #[arg(long, value_enum, default_value_t = InitFlag::Auto)]
    pub init: InitFlag,
    /// Number of random initial Gaussians.
    #[arg(long, default_value_t = 100_000)]
    pub init_count: usize,
    /// Half-size of the random initialisation box (default: 1.5 for NeRF-synthetic, else the scene scale).
    #[arg(long)]
    pub init_extent: Option<f64>,
    /// Update only Gaussians visible in the step (sparse Adam).
    #[arg(long)]
    pub visible_adam: bool,
    /// ADC grows by the sum of absolute per-pixel 2D-mean gradients (gsplat's absgrad) with
    /// gsplat's matching threshold 8e-4 instead of 2e-4.
    #[arg(long)]
    pub absgrad: bool,
    /// Bit-reproducible training (fixed-order gradient sums instead of float atomics; slower).
    #[arg(long)]
    pub deterministic: bool,
    /// Weight W of an alpha loss W * mean|rendered alpha - image alpha| for images with an
    /// alpha channel (e.g. NeRF-synthetic RGBA); 0 = off (default; with --resume: the
    /// checkpoint's value).
    #[arg(long, value_name = "W")]
    pub alpha_loss: Option<f32>,
    /// Storage of the Adam moments: sh8 (the default: bf16 pairs, but 8 bits per moment for
    /// the higher-order SH coefficients; needs f16 SH, so bf16 is the default with f32 SH),
    /// bf16 (both moments in one 32-bit word, stochastically rounded; 4 bytes per parameter
    /// value) or f32 (8 bytes). With --resume the checkpoint's moments are converted when this
    /// names another one.
    #[arg(long)]
    pub adam_moments: Option<MomentPrecision>,
    /// Storage of the SH coefficients: f16 (DC as f32, higher orders as half floats written
    /// with stochastic rounding; 104 instead of 192 bytes per Gaussian at degree 3, the
    /// default) or f32. With --resume the checkpoint's coefficients are converted when this
    /// names the other one.
    #[arg(long)]
    pub sh_precision: Option<ShPrecision>,
    /// RAM for decoded images, in GB.
    #[arg(long, default_value_t = 4.0)]
    pub image_cache: f64,
    /// Live view in a rerun viewer (loss curves, held-out render vs ground truth, cameras,
    /// Gaussian centres); needs a build with the `rerun` feature.
    #[arg(long)]
    pub rerun: bool,
    /// Record the live view to this `.rrd` file instead (open it with `rerun FILE`).
    #[arg(long)]
    pub rerun_save: Option<PathBuf>,
    /// Train on N GPUs, data-parallel (docs/multi-gpu.md): CUDA devices --adapter (default 0)
    /// to --adapter + N - 1, gradients summed through NCCL. N > 1 needs --backend cuda and
    /// libnccl; wgpu stays single-GPU.
    #[arg(long, default_value_t = 1)]
    pub gpus: usize,
    /// Views per optimisation step: their mean gradient, one Adam update (gsplat's batch).
    /// Default 1, or the number of GPUs of the run (one view per GPU per step). With B > 1 the
    /// learning rates, Adam and (default preset) the schedule and default --steps are scaled
    /// as gsplat does (docs/multi-gpu.md).
    #[arg(long)]
    pub batch: Option<usize>,
    /// Several processes or hosts: the run's total number of GPUs (default: --gpus). Every
    /// process is started with the same dataset and flags, --rank and --rendezvous.
    #[arg(long, value_name = "N")]
    pub world_size: Option<usize>,
    /// Several processes or hosts: the rank of this process's first GPU (its GPUs are ranks
    /// R..R + --gpus - 1). The process with rank 0 writes the outputs.
    #[arg(long, value_name = "R", default_value_t = 0)]
    pub rank: usize,
    /// Several processes or hosts: HOST:PORT where the process with rank 0 listens (it binds
    /// this address: 0.0.0.0:PORT accepts every interface) and the others connect, to hand out
    /// NCCL's group id (docs/multi-gpu.md).
    #[arg(long, value_name = "HOST:PORT")]
    pub rendezvous: Option<String>,
    /// Seconds to wait for every process to reach the rendezvous.
    #[arg(long, default_value_t = 300.0)]
    pub rendezvous_timeout: f64,
    #[command(flatten)]
    pub splat: SplatArgs,
    #[command(flatten)]
    pub lpips: LpipsFlags,
    #[command(flatten)]
    pub live: crate::view_cmd::LiveFlags,
    #[command(flatten)]
    pub device: DeviceArgs,
}

/// Flags of the splat and its training shared by `rust3r train` and `rust3r run`.
#[derive(Args, Debug)]
pub struct SplatArgs {
    /// Densification strategy.
    #[arg(long, value_enum, default_value_t = StrategyFlag::Adc)]
    pub strategy: StrategyFlag,
    /// Upper bound on the number of Gaussians (MCMC: the cap; default 1M for MCMC).
    #[arg(long)]
    pub max_splats: Option<usize>,
    /// Device memory the trainer may use, in GB; growth stops before it would be exceeded.
    #[arg(long)]
    pub memory_budget: Option<f64>,
    #[arg(long, default_value_t = 3)]
    pub sh_degree: u32,
    /// Mip-Splatting style antialiased rendering.
    #[arg(long)]
    pub antialiased: bool,
    /// Also write splats.spz at the end.
    #[arg(long)]
    pub spz: bool,
    /// Also write splats.sog (PlayCanvas SOG bundle) at the end.
    #[arg(long)]
    pub sog: bool,
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Fast preset: downscale factor of the first steps (1: full resolution throughout).
    #[arg(long, default_value_t = FastSchedule::default().start_factor)]
    pub fast_start_factor: f32,
    /// Fast preset: fraction of the steps after which images are at full resolution.
    #[arg(long, default_value_t = FastSchedule::default().full_at)]
    pub fast_full_at: f64,
    /// Fast preset: fraction of the steps during which Gaussians are added and pruned.
    #[arg(long, default_value_t = FastSchedule::default().refine_until)]
    pub fast_refine_until: f64,
    /// Fast preset: a pixel's normalised L1 error above this marks it high-error.
    #[arg(long, default_value_t = ConsistencyConfig::default().error_threshold)]
    pub fast_error_threshold: f32,
    /// Fast preset: a Gaussian grows only with at least this many high-error pixels in its
    /// footprint per view that saw it (0: the gradient threshold alone).
    #[arg(long, default_value_t = ConsistencyConfig::default().min_pixels)]
    pub fast_min_pixels: f32,
}

impl SplatArgs {
    /// The fast preset with these flags' settings.
    pub fn fast_preset(&self) -> Result<TrainPreset> {
        let f = self.fast_start_factor;
        anyhow::ensure!(
            f.is_finite() && f >= 1.0,
            "--fast-start-factor {f} must be at least 1"
        );
        for (name, v) in [
            ("--fast-full-at", self.fast_full_at),
            ("--fast-refine-until", self.fast_refine_until),
            ("--fast-error-threshold", self.fast_error_threshold as f64),
        ] {
            anyhow::ensure!((0.0..=1.0).contains(&v), "{name} {v} must be in [0, 1]");
        }
        let m = self.fast_min_pixels;
        anyhow::ensure!(
            m.is_finite() && m >= 0.0,
            "--fast-min-pixels {m} must be >= 0"
        );
        Ok(TrainPreset::Fast(FastSchedule {
            start_factor: f,
            full_at: self.fast_full_at,
            refine_until: self.fast_refine_until,
            consistency: (m > 0.0).then_some(ConsistencyConfig {
                error_threshold: self.fast_error_threshold,
                min_pixels: m,
            }),
            ..FastSchedule::default()
        }))
    }

    /// Sets these flags' fields of `t`.
    pub fn apply(&self, t: &mut TrainOptions) -> Result<()> {
        t.memory_budget = match self.memory_budget {
            Some(gb) if !(gb.is_finite() && gb > 0.0) => {
                bail!("--memory-budget {gb} GB is not a positive size")
            }
            Some(gb) => Some((gb * 1e9) as u64),
            None => None,
        };
        t.strategy = match self.strategy {
            StrategyFlag::Adc => StrategyKind::Adc,
            StrategyFlag::Mcmc => StrategyKind::Mcmc,
        };
        t.max_splats = self.max_splats;
        t.sh_degree = self.sh_degree;
        t.antialiased = self.antialiased;
        t.spz = self.spz;
        t.sog = self.sog;
        t.seed = self.seed;
        Ok(())
    }
}

/// Densification strategy flag.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum StrategyFlag {
    Adc,
    Mcmc,
}

/// `rust3r train --preset`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum TrainPresetFlag {
    Default,
    Fast,
}

/// Initialisation flag.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum InitFlag {
    Auto,
    Points,
    Random,
}

fn parse_steps(s: &str) -> Result<Vec<u64>> {
    s.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| {
            p.trim()
                .parse::<u64>()
                .with_context(|| format!("'{p}' is not a step number"))
        })
        .collect()
}

pub fn parse_background(s: &str) -> Result<[f32; 3]> {
    match s {
        "white" => Ok([1.0; 3]),
        "black" => Ok([0.0; 3]),
        other => crate::parse_rgb(other),
    }
}

/// The library's options from the flags (everything but the LPIPS weights and the stop flag).
pub fn options_of(a: &TrainArgs) -> Result<TrainOptions> {
    let preset = match a.preset {
        TrainPresetFlag::Default => TrainPreset::Default,
        TrainPresetFlag::Fast => a.splat.fast_preset()?,
    };
    let mut opts = TrainOptions {
        out: a.out.clone(),
        steps: a.steps.unwrap_or(preset.default_steps()),
        preset,
        downscale: a.downscale,
        background: parse_background(&a.background)?,
        eval_every: a.eval_every,
        eval_scene: a.eval_scene.clone(),
        eval_at: parse_steps(&a.eval_at)?,
        save_at: parse_steps(&a.save_at)?,
        checkpoint_every: a.checkpoint_every,
        resume: a.resume.clone(),
        init: match a.init {
            InitFlag::Auto => InitKind::Auto,
            InitFlag::Points => InitKind::Points,
            InitFlag::Random => InitKind::Random,
        },
        init_count: a.init_count,
        init_extent: a.init_extent,
        visible_adam: a.visible_adam,
        absgrad: a.absgrad,
        deterministic: a.deterministic,
        alpha_loss: a.alpha_loss,
        adam_moments: a.adam_moments,
        sh_precision: a.sh_precision,
        image_cache_bytes: (a.image_cache * 1e9) as u64,
        lpips: None,
        stop: None,
        batch: a.batch.unwrap_or(a.world_size.unwrap_or(a.gpus).max(1)),
        ..TrainOptions::default()
    };
    // A batch of B views per step: the default schedule's views in 1/B of its steps (its step
    // counts are scaled the same way: `TrainConfig::for_batch`).
    if a.steps.is_none() && opts.batch > 1 && opts.preset == TrainPreset::Default {
        opts.steps = (opts.steps / opts.batch as u64).max(1);
    }
    a.splat.apply(&mut opts)?;
    Ok(opts)
}

/// Installs the Ctrl-C handler: the session stops at the next step with a checkpoint.
pub fn ctrl_c_flag() -> Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    ctrlc::set_handler(move || s.store(true, Ordering::SeqCst))
        .context("cannot install the Ctrl-C handler")?;
    Ok(stop)
}

/// Prints a session's events: information lines, a progress bar over the steps, evaluations;
/// the live view when one is open. Shared by `rust3r train` and `rust3r run`.
pub struct TrainPrinter<'a> {
    pub bar: Option<ProgressBar>,
    pub live: Option<&'a Live>,
    /// The `--view` page.
    pub view: Option<&'a mut rust3r_viewer::LiveView>,
    pub error: Option<anyhow::Error>,
}

impl<'a> TrainPrinter<'a> {
    pub fn new(live: Option<&'a Live>) -> Self {
        Self {
            bar: None,
            live,
            view: None,
            error: None,
        }
    }

    fn line(&self, text: &str) {
        // Through `suspend`, not `bar.println`: that prints nothing when the output is not a
        // terminal (logs, CI).
        match &self.bar {
            Some(bar) => bar.suspend(|| println!("{text}")),
            None => println!("{text}"),
        }
    }

    pub fn event(&mut self, e: TrainEvent<'_>) {
        if let Some(v) = self.view.as_deref_mut() {
            v.train_event(&e);
        }
        if let Err(err) = self.handle(e)
            && self.error.is_none()
        {
            self.error = Some(err);
        }
    }

    fn handle(&mut self, e: TrainEvent<'_>) -> Result<()> {
        match e {
            TrainEvent::Info(text) => self.line(&text),
            TrainEvent::Warning(text) => match &self.bar {
                Some(bar) => bar.suspend(|| eprintln!("warning: {text}")),
                None => eprintln!("warning: {text}"),
            },
            TrainEvent::Started {
                scene,
                train,
                step,
                steps,
            } => {
                let bar = crate::progress::bar(steps);
                bar.set_style(crate::progress::style(
                    "{bar:30} {pos}/{len} {per_sec} {msg}",
                ));
                bar.set_position(step.min(steps));
                self.bar = Some(bar);
                if let Some(l) = self.live {
                    l.at("step", step);
                    log_cameras(l, scene, train)?;
                }
            }
            TrainEvent::Step { step, stats, .. } => {
                if let Some(bar) = &self.bar {
                    bar.set_position(step);
                }
                if let Some(st) = stats {
                    if let Some(l) = self.live {
                        l.at("step", step);
                        l.scalar("train/loss", st.loss as f64)?;
                        l.scalar("train/psnr", st.psnr as f64)?;
                        l.scalar("train/splats", st.num_splats as f64)?;
                    }
                    let depth = st
                        .depth_loss
                        .map(|d| format!(" | depth {d:.4}"))
                        .unwrap_or_default();
                    if let Some(bar) = &self.bar {
                        bar.set_message(format!(
                            "loss {:.4}{depth} | PSNR {:.2} | {} splats | {} visible | GPU {:.2} GB",
                            st.loss,
                            st.psnr,
                            st.num_splats,
                            st.num_visible,
                            st.gpu_bytes as f64 / 1e9
                        ));
                    }
                }
            }
            TrainEvent::Eval {
                record: rec,
                trainer,
                scene,
                cache,
                eval,
            } => {
                if let Some(l) = self.live {
                    log_eval(
                        l, trainer, scene, cache, eval[0], rec.step, rec.psnr, rec.ssim, rec.lpips,
                    )?;
                }
                let lpips_text = rec
                    .lpips
                    .map(|v| format!(", LPIPS {v:.4}"))
                    .unwrap_or_default();
                self.line(&format!(
                    "step {}: held-out PSNR {:.3} dB, SSIM {:.4}{lpips_text}, {} splats, {:.1} it/s",
                    rec.step, rec.psnr, rec.ssim, rec.num_splats, rec.it_per_s
                ));
            }
            TrainEvent::Interrupted { step, checkpoint } => {
                if let Some(bar) = &self.bar {
                    bar.abandon_with_message("interrupted");
                }
                println!(
                    "interrupted at step {step}: wrote {} and splats.ply; resume with --resume {}",
                    checkpoint.display(),
                    checkpoint.display()
                );
            }
        }
        Ok(())
    }

    /// Ends the bar; the first error the live view met, if any.
    pub fn finish(&mut self) -> Result<()> {
        if let Some(bar) = self.bar.take()
            && !bar.is_finished()
        {
            bar.finish();
        }
        match self.error.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

pub fn run(a: &TrainArgs) -> Result<()> {
    if a.gpus != 1 || a.world_size.is_some_and(|w| w != 1) {
        return run_multi_gpu(a);
    }
    let live = LiveSink::from_flags(a.rerun, a.rerun_save.as_ref())
        .map(|s| Live::open("rust3r train", &s))
        .transpose()?;
    let mut opts = options_of(a)?;
    // LPIPS weights are read and checked before anything else is loaded, so a bad file stops
    // the run at once.
    opts.lpips = a.lpips.load()?;
    opts.raster = a.device.tuning()?.raster;
    let gpu = a.device.open()?;
    opts.stop = Some(ctrl_c_flag()?);
    let mut view = a
        .live
        .start(&gpu, &format!("rust3r train {}", a.dataset.display()))?;
    let mut printer = TrainPrinter::new(live.as_ref());
    printer.view = view.as_mut();
    let mut session = TrainSession::open(&a.dataset, opts, &gpu, &mut |e| printer.event(e))?;
    let summary = session.run(&mut |e| printer.event(e));
    printer.finish()?;
    if let Some(v) = view.as_mut() {
        v.message("training finished");
    }
    let summary = summary?;
    if summary.interrupted {
        return Ok(());
    }
    if let Some(r) = gpu.profiler().report() {
        println!("profile ({:?} time per phase):\n{r}", gpu.profiler().mode());
    }
    println!(
        "done: {} steps in {:.1} s of training, {} Gaussians -> {}",
        summary.steps_run,
        summary.train_seconds,
        summary.num_splats,
        summary.splats.display()
    );
    Ok(())
}

/// One CUDA device and one NCCL rank per GPU of `--gpus`.
struct NcclRanks {
    base: GpuOptions,
    /// The CUDA device of this process's first rank (`--adapter`).
    device0: usize,
    /// This process's first rank.
    first: usize,
    world: usize,
    id: NcclId,
}

impl RankFactory for NcclRanks {
    fn open(&self, rank: usize) -> Result<Gpu, PipelineError> {
        let gpu = Gpu::new(&GpuOptions {
            adapter: Some(self.device0 + rank - self.first),
            ..self.base.clone()
        })?;
        tracing::info!("rank {rank}: {}", gpu.name());
        Ok(gpu)
    }

    fn join(&self, rank: usize, gpu: &Gpu) -> Result<Arc<dyn Collective>, PipelineError> {
        Ok(Arc::from(collective::nccl_join(
            gpu, &self.id, rank, self.world,
        )?))
    }
}

/// `rust3r train --gpus N`: data-parallel training over NCCL, one thread per GPU.
fn run_multi_gpu(a: &TrainArgs) -> Result<()> {
    let n = a.gpus;
    if n == 0 {
        bail!("--gpus must be at least 1");
    }
    let base = a.device.options()?;
    if base.backend != BackendKind::Cuda {
        bail!("--gpus {n} needs --backend cuda: wgpu stays single-GPU");
    }
    if a.rerun || a.rerun_save.is_some() || a.live.view {
        bail!("--gpus {n}: the live views (--rerun, --view) are single-GPU only");
    }
    let world = a.world_size.unwrap_or(n);
    let first = a.rank;
    if first + n > world {
        bail!(
            "--rank {first} with --gpus {n} runs ranks {first}..{}, beyond --world-size {world}",
            first + n - 1
        );
    }
    collective::nccl_available()?;
    let mut opts = options_of(a)?;
    opts.lpips = a.lpips.load()?;
    opts.raster = a.device.tuning()?.raster;
    opts.stop = Some(ctrl_c_flag()?);
    // NCCL's group id: made here with one process, else by rank 0 and handed out over TCP
    // before anything slow starts (every process then opens its scene and joins NCCL).
    let timeout = std::time::Duration::from_secs_f64(a.rendezvous_timeout.max(1.0));
    let id = if world == n {
        collective::nccl_new_id()?
    } else {
        let addr = a
            .rendezvous
            .as_deref()
            .context("--world-size beyond this process's --gpus needs --rendezvous HOST:PORT")?;
        if first == 0 {
            let id = collective::nccl_new_id()?;
            let server = rendezvous::RendezvousServer::bind(addr)?;
            println!("rank 0: waiting at {addr} for {} more GPUs", world - n);
            server.publish(&id, world, n, timeout)?;
            id
        } else {
            rendezvous::fetch_id(addr, world, n, timeout)?
        }
    };
    let ranks = NcclRanks {
        device0: base.adapter.unwrap_or(0),
        first,
        base,
        world,
        id,
    };
    let mut printer = TrainPrinter::new(None);
    printer.line(&format!(
        "data-parallel: ranks {first}..{} of {world} on CUDA devices {}..{}, {} views per step",
        first + n - 1,
        ranks.device0,
        ranks.device0 + n - 1,
        opts.batch
    ));
    let summary = train_data_parallel(
        &a.dataset,
        opts,
        first..first + n,
        world,
        &ranks,
        &mut |e| printer.event(e),
    );
    printer.finish()?;
    let summary = summary?;
    if summary.interrupted {
        return Ok(());
    }
    println!(
        "done: {} steps in {:.1} s of training on {n} GPUs, {} Gaussians -> {}",
        summary.steps_run,
        summary.train_seconds,
        summary.num_splats,
        summary.splats.display()
    );
    Ok(())
}

/// Live view at an evaluation: held-out metrics, the first held-out view rendered next to its
/// ground truth, and the Gaussian centres coloured by their base colour (at most 200k).
#[allow(clippy::too_many_arguments)]
fn log_eval(
    l: &Live,
    trainer: &Trainer,
    scene: &Scene,
    cache: &ImageCache,
    view: usize,
    step: u64,
    psnr: f64,
    ssim: f64,
    lpips: Option<f64>,
) -> Result<()> {
    l.at("step", step);
    l.scalar("eval/psnr", psnr)?;
    l.scalar("eval/ssim", ssim)?;
    if let Some(v) = lpips {
        l.scalar("eval/lpips", v)?;
    }
    let gt = cache.get(view)?;
    let cam = Camera::from(&scene.views[view]);
    let (_, _, pred) = trainer.evaluate_view(&cam, &gt.rgb)?;
    let bytes: Vec<u8> = pred
        .iter()
        .map(|v| (v.clamp(0.0, 1.0) * 255.0 + 0.5) as u8)
        .collect();
    l.image_rgb("eval/render", &bytes, cam.width, cam.height)?;
    l.image_rgb("eval/ground_truth", &gt.rgb, cam.width, cam.height)?;
    let splats = trainer.to_host()?;
    let stride = splats.len().div_ceil(200_000).max(1);
    let k = (splats.sh_degree as usize + 1).pow(2) * 3;
    let (mut pts, mut cols) = (Vec::new(), Vec::new());
    for i in (0..splats.len()).step_by(stride) {
        pts.push(splats.means[i]);
        let dc = |c: usize| {
            ((0.5 + rust3r_splat::train::init::SH_C0 * splats.sh[i * k + c] as f64).clamp(0.0, 1.0)
                * 255.0) as u8
        };
        cols.push([dc(0), dc(1), dc(2)]);
    }
    l.points("world/gaussians", &pts, &cols)?;
    Ok(())
}

/// Training cameras as frusta in the live view.
fn log_cameras(l: &Live, scene: &Scene, idx: &[usize]) -> Result<()> {
    for &i in idx {
        let v = &scene.views[i];
        let c2w = v.camera_to_world();
        let rot = std::array::from_fn(|r| std::array::from_fn(|c| c2w[r][c] as f32));
        let view = CameraView {
            translation: [c2w[0][3] as f32, c2w[1][3] as f32, c2w[2][3] as f32],
            rotation: rot,
            camera: v.camera,
        };
        l.camera(&format!("world/cameras/{i}"), &view)?;
    }
    Ok(())
}
