//! `rust3r train`: Gaussian-splatting training on a posed-image scene.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use burn::tensor::Device;
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use rust3r_gpu::{Gpu, GpuBuffer};
use rust3r_io::scene::{ImageCache, Scene, SceneKind, SceneOptions, open_scene};
use rust3r_lpips::{Image, Lpips};
use rust3r_splat::{Camera, ShPrecision};
use rust3r_splat::train::adam::{AdamConfig, MomentPrecision};
use rust3r_splat::train::{AdcConfig, StepTarget, Strategy, TrainConfig, Trainer, images::PackedImage, init, mcmc::McmcConfig};
use serde::Serialize;

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
    #[arg(long, default_value_t = 30_000)]
    pub steps: u64,
    /// Image downscale factor (uses images_N/ when present).
    #[arg(long, default_value_t = 1)]
    pub downscale: u32,
    /// Background for RGBA images and rendering: white, black or r,g,b.
    #[arg(long, default_value = "white")]
    pub background: String,
    /// Densification strategy: adc or mcmc.
    #[arg(long, default_value = "adc")]
    pub strategy: String,
    /// Upper bound on the number of Gaussians (MCMC: the cap; default 1M for MCMC).
    #[arg(long)]
    pub max_splats: Option<usize>,
    /// Device memory the trainer may use, in GB; growth stops before it would be exceeded.
    #[arg(long)]
    pub memory_budget: Option<f64>,
    /// Hold out every Nth image for evaluation (0: none).
    #[arg(long, default_value_t = 8)]
    pub eval_every: usize,
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
    #[arg(long, default_value_t = 3)]
    pub sh_degree: u32,
    /// Initial Gaussians: auto (SfM points when the scene has them, else random), points, random.
    #[arg(long, default_value = "auto")]
    pub init: String,
    /// Number of random initial Gaussians.
    #[arg(long, default_value_t = 100_000)]
    pub init_count: usize,
    /// Half-size of the random initialisation box (default: 1.5 for NeRF-synthetic, else the scene scale).
    #[arg(long)]
    pub init_extent: Option<f64>,
    /// Mip-Splatting style antialiased rendering.
    #[arg(long)]
    pub antialiased: bool,
    /// Update only Gaussians visible in the step (sparse Adam).
    #[arg(long)]
    pub visible_adam: bool,
    /// Also write splats.spz at the end.
    #[arg(long)]
    pub spz: bool,
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
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
    #[command(flatten)]
    pub lpips: LpipsFlags,
    #[command(flatten)]
    pub device: DeviceArgs,
}

#[derive(Serialize, serde::Deserialize, Clone)]
struct EvalRecord {
    step: u64,
    psnr: f64,
    ssim: f64,
    /// Mean LPIPS over the held-out views; only with `--lpips-backbone` / `--lpips-weights`
    /// (absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    lpips: Option<f64>,
    num_splats: usize,
    num_views: usize,
    train_seconds: f64,
    it_per_s: f64,
    peak_gpu_bytes: u64,
}

fn parse_steps(s: &str) -> Result<Vec<u64>> {
    s.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| p.trim().parse::<u64>().with_context(|| format!("'{p}' is not a step number")))
        .collect()
}

fn parse_background(s: &str) -> Result<[f32; 3]> {
    match s {
        "white" => Ok([1.0; 3]),
        "black" => Ok([0.0; 3]),
        other => crate::parse_rgb(other),
    }
}

fn camera_of(scene: &Scene, i: usize) -> Camera {
    let v = &scene.views[i];
    Camera { fx: v.fx, fy: v.fy, cx: v.cx, cy: v.cy, width: v.width, height: v.height, world_to_camera: v.world_to_camera }
}

/// 3DGS scene scale: 1.1 x the largest distance of a camera centre from their centroid.
fn scene_scale(scene: &Scene, views: &[usize]) -> f64 {
    let centres: Vec<[f64; 3]> = views.iter().map(|&i| { let c = scene.views[i].camera_to_world(); [c[0][3], c[1][3], c[2][3]] }).collect();
    let n = centres.len().max(1) as f64;
    let mean = [0, 1, 2].map(|k| centres.iter().map(|c| c[k]).sum::<f64>() / n);
    let d = centres.iter().map(|c| (0..3).map(|k| (c[k] - mean[k]).powi(2)).sum::<f64>().sqrt()).fold(0.0, f64::max);
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
    fn upload(gpu: &Gpu, img: &rust3r_io::scene::ViewImage) -> Self {
        let (w, h) = (img.width, img.height);
        Self {
            rgb: PackedImage::upload(gpu, &img.rgb, w, h),
            alpha: img.alpha.as_ref().map(|a| PackedImage::upload_plane(gpu, a, w, h)),
            mask: img.mask.as_ref().map(|m| PackedImage::upload_plane(gpu, m, w, h)),
        }
    }

    /// Device bytes of a view's packed planes.
    fn bytes(img: &rust3r_io::scene::ViewImage) -> u64 {
        let npix = img.width as u64 * img.height as u64;
        let planes = [Some(3), img.alpha.as_ref().map(|_| 1), img.mask.as_ref().map(|_| 1)];
        planes.into_iter().flatten().map(|c| (npix * c).div_ceil(4) * 4).sum()
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
        StepTarget { rgb: &self.rgb, alpha: self.alpha.as_ref(), mask: self.mask.as_ref() }
    }
}

/// Training images: packed on the device when they fit a quarter of the budget, else
/// uploaded from the host cache each step.
struct Targets {
    device: Vec<Option<DeviceTarget>>,
    cache: ImageCache,
}

impl Targets {
    fn get(&self, gpu: &Gpu, i: usize) -> Result<StepBuffers> {
        if let Some(img) = &self.device[i] {
            return Ok(img.to_f32(gpu));
        }
        Ok(DeviceTarget::upload(gpu, &*self.cache.get(i)?).to_f32(gpu))
    }
}

pub fn run(a: &TrainArgs) -> Result<()> {
    let live = LiveSink::from_flags(a.rerun, a.rerun_save.as_ref()).map(|s| Live::open("rust3r train", &s)).transpose()?;
    let background = parse_background(&a.background)?;
    let eval_at = parse_steps(&a.eval_at)?;
    let save_at = parse_steps(&a.save_at)?;
    anyhow::ensure!(a.downscale >= 1, "--downscale must be at least 1");
    anyhow::ensure!(a.sh_degree <= 3, "--sh-degree must be 0..=3");
    if let Some(w) = a.alpha_loss {
        anyhow::ensure!(w.is_finite() && w >= 0.0, "--alpha-loss {w} is not a finite weight >= 0");
    }
    // LPIPS weights are read and checked before anything else is loaded, so a bad file stops
    // the run at once.
    let lpips_weights = a.lpips.load()?;
    let budget = match a.memory_budget {
        Some(gb) if !(gb.is_finite() && gb > 0.0) => bail!("--memory-budget {gb} GB is not a positive size"),
        Some(gb) => Some((gb * 1e9) as u64),
        None => None,
    };
    std::fs::create_dir_all(&a.out).with_context(|| format!("cannot create output folder {}", a.out.display()))?;

    let mut scene = open_scene(&a.dataset, &SceneOptions { downscale: a.downscale, background, kind: None })?;
    let missing = scene.remove_missing_images();
    if !missing.is_empty() {
        eprintln!("warning: {} views of {} have no image file and are skipped (first: {})", missing.len(), a.dataset.display(), missing[0].image_path.display());
    }
    anyhow::ensure!(!scene.is_empty(), "{}: no views with images", a.dataset.display());
    let (train_idx, eval_idx) = scene.split(a.eval_every);
    anyhow::ensure!(!train_idx.is_empty(), "{}: no training views left after holding out every {}th", a.dataset.display(), a.eval_every);
    let scale = scene_scale(&scene, &train_idx);
    let kind = scene.kind;
    if let Some(w) = &lpips_weights {
        if eval_idx.is_empty() {
            eprintln!("warning: --lpips-backbone / --lpips-weights: no held-out views to evaluate (--eval-every 0)");
        }
        for &i in &eval_idx {
            let v = &scene.views[i];
            w.tap_sizes(v.height as usize, v.width as usize).with_context(|| format!("LPIPS on held-out view {}", v.name))?;
        }
    }
    println!(
        "{} ({}): {} train / {} held-out views, {}x{}, scene scale {:.3}",
        a.dataset.display(),
        kind.as_str(),
        train_idx.len(),
        eval_idx.len(),
        scene.views[train_idx[0]].width,
        scene.views[train_idx[0]].height,
        scale
    );

    let gpu = a.device.open()?;
    // On the trainer's own device (a Burn device over the same CubeCL client).
    let lpips = lpips_weights.map(|w| {
        println!("LPIPS v0.1 ({}) on the held-out views", w.net);
        Lpips::new(w, &Device::from(gpu.device().clone()))
    });
    let mcmc = match a.strategy.as_str() {
        "adc" => false,
        "mcmc" => true,
        s => bail!("unknown --strategy '{s}' (adc or mcmc)"),
    };
    let strategy = if mcmc {
        Strategy::Mcmc(McmcConfig { cap_max: a.max_splats.unwrap_or(1_000_000), ..Default::default() })
    } else {
        let adc = AdcConfig::default();
        if a.absgrad {
            Strategy::Adc(AdcConfig { absgrad: true, grad2d_threshold: 8e-4, ..adc })
        } else {
            Strategy::Adc(adc)
        }
    };
    let sh_precision = a.sh_precision.unwrap_or_default();
    let cfg = TrainConfig {
        sh_degree: a.sh_degree,
        background,
        antialiased: a.antialiased,
        scene_scale: scale as f32,
        strategy,
        max_splats: a.max_splats,
        memory_budget: budget,
        visible_adam: a.visible_adam,
        seed: a.seed,
        deterministic: a.deterministic,
        alpha_loss_weight: a.alpha_loss.unwrap_or(0.0),
        adam: AdamConfig { moments: a.adam_moments.unwrap_or_else(|| MomentPrecision::default().for_sh(sh_precision)), ..Default::default() },
        sh_precision,
        ..Default::default()
    };
    let mut trainer = match &a.resume {
        Some(ck) => {
            let mut t = Trainer::load_checkpoint(&gpu, ck)?;
            println!("resumed {} at step {} with {} Gaussians", ck.display(), t.step, t.num_splats());
            if let Some(w) = a.alpha_loss {
                t.cfg.alpha_loss_weight = w;
            }
            // 8-bit SH moments need half SH: convert the SH first when moving to them, the
            // moments first when moving away.
            // f32 SH asked of a checkpoint with 8-bit SH moments: bf16 moments, as for a new run.
            let moments = a
                .adam_moments
                .or_else(|| a.sh_precision.map(|sh| t.cfg.adam.moments.for_sh(sh)))
                .filter(|&p| p != t.cfg.adam.moments);
            let sh_first = moments == Some(MomentPrecision::Sh8);
            let convert_sh = |t: &mut Trainer| -> Result<()> {
                if let Some(p) = a.sh_precision.filter(|&p| p != t.cfg.sh_precision) {
                    println!("converting the checkpoint's {} SH coefficients to {p}", t.cfg.sh_precision);
                    t.set_sh_precision(p)?;
                }
                Ok(())
            };
            if sh_first {
                convert_sh(&mut t)?;
            }
            if let Some(p) = moments {
                println!("converting the checkpoint's {} Adam moments to {p}", t.cfg.adam.moments);
                t.set_moment_precision(p)?;
            }
            if !sh_first {
                convert_sh(&mut t)?;
            }
            t
        }
        None => {
            let use_points = match a.init.as_str() {
                "auto" => scene.points.as_ref().is_some_and(|p| p.xyz.len() >= 2),
                "points" => true,
                "random" => false,
                s => bail!("unknown --init '{s}' (auto, points or random)"),
            };
            let (opacity, scale_factor) = if mcmc { (0.5, 0.1) } else { (0.1, 1.0) };
            let init = if use_points {
                let p = scene.points.as_ref().with_context(|| format!("{}: --init points, but the scene has no points", a.dataset.display()))?;
                println!("initialising from {} SfM points", p.xyz.len());
                init::from_points(&p.xyz, &p.rgb, opacity, scale_factor, a.sh_degree)?
            } else {
                let extent = a.init_extent.unwrap_or(if kind == SceneKind::NerfSynthetic { 1.5 } else { scale });
                println!("initialising {} random Gaussians in [-{extent:.2}, {extent:.2}]^3", a.init_count);
                init::random_box(a.init_count, extent, opacity, scale_factor, a.seed, a.sh_degree)
            };
            Trainer::new(&gpu, cfg, &init)?
        }
    };

    // Images: decode in parallel into RAM, pack onto the device when they fit. Alpha is kept
    // only for the alpha loss; masks are always used.
    let alpha_weight = trainer.cfg.alpha_loss_weight;
    let masked = train_idx.iter().filter(|&&i| scene.mask_path(i).is_some()).count();
    if scene.num_masks() > 0 {
        println!("masks: {masked} of {} training views have one (masked-out pixels are ignored by the loss)", train_idx.len());
    }
    let scene = Arc::new(scene);
    let cache = ImageCache::new(scene.clone(), (a.image_cache * 1e9) as u64).keep_alpha(alpha_weight > 0.0);
    let t0 = Instant::now();
    let mut all: Vec<usize> = train_idx.clone();
    all.extend(&eval_idx);
    cache.preload(&all)?;
    let device_budget = budget.map(|b| b / 4).unwrap_or(2 << 30);
    let mut used = 0u64;
    let mut with_alpha = 0usize;
    let mut device: Vec<Option<DeviceTarget>> = (0..scene.len()).map(|_| None).collect();
    for &i in &train_idx {
        let v = &scene.views[i];
        // Before decoding: RGB (and the mask) must fit; the alpha plane is known after.
        let planned = (v.width as u64 * v.height as u64 * 3).div_ceil(4) * 4;
        if used + planned > device_budget && alpha_weight == 0.0 {
            continue;
        }
        let img = cache.get(i)?;
        with_alpha += img.alpha.is_some() as usize;
        let bytes = DeviceTarget::bytes(&img);
        if used + bytes <= device_budget {
            device[i] = Some(DeviceTarget::upload(&gpu, &img));
            used += bytes;
        }
    }
    println!("images decoded in {:.1} s ({} MiB on the device)", t0.elapsed().as_secs_f64(), used >> 20);
    if alpha_weight > 0.0 {
        println!("alpha loss (weight {alpha_weight}): {with_alpha} of {} training views have an alpha channel", train_idx.len());
        if with_alpha == 0 {
            eprintln!("warning: --alpha-loss has no effect: no training image has an alpha channel (or it is fully opaque)");
        }
    }
    let targets = Targets { device, cache };

    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        ctrlc::set_handler(move || stop.store(true, Ordering::SeqCst)).context("cannot install the Ctrl-C handler")?;
    }

    let eval_path = a.out.join("eval.json");
    let mut records: Vec<EvalRecord> = match std::fs::read(&eval_path) {
        Ok(bytes) if a.resume.is_some() => serde_json::from_slice::<Vec<serde_json::Value>>(&bytes)
            .ok()
            .map(|v| v.into_iter().filter_map(|r| serde_json::from_value::<EvalRecord>(r).ok()).collect())
            .unwrap_or_default(),
        _ => Vec::new(),
    };
    let ck_path = a.out.join("checkpoint.bin");
    let bar = ProgressBar::new(a.steps);
    bar.set_style(ProgressStyle::with_template("{bar:30} {pos}/{len} {per_sec} {msg}").unwrap());
    bar.set_position(trainer.step.min(a.steps));
    let start_step = trainer.step;
    let mut train_s = 0.0f64;
    let mut seg = Instant::now();
    let mut order: Vec<usize> = Vec::new();
    let mut peak = gpu.memory_reserved();
    if let Some(l) = &live {
        l.at("step", trainer.step);
        log_cameras(l, &scene, &train_idx)?;
    }
    while trainer.step < a.steps {
        if stop.load(Ordering::SeqCst) {
            bar.abandon_with_message("interrupted");
            trainer.save_checkpoint(&ck_path)?;
            write_splats(&trainer, &[a.out.join("splats.ply")])?;
            println!("interrupted at step {}: wrote {} and splats.ply; resume with --resume {}", trainer.step, ck_path.display(), ck_path.display());
            return Ok(());
        }
        if order.is_empty() {
            order = train_idx.clone();
            for k in (1..order.len()).rev() {
                let j = trainer.rng.below(k + 1);
                order.swap(k, j);
            }
        }
        let i = order.pop().unwrap();
        let target = targets.get(&gpu, i)?;
        let info = trainer.step_with(&camera_of(&scene, i), &target.target())?;
        let s = trainer.step;
        bar.set_position(s);
        if s % 100 == 0 || s == a.steps {
            peak = peak.max(gpu.memory_reserved());
            let loss = trainer.last_loss()?.unwrap_or(f32::NAN);
            let psnr = trainer.last_psnr()?.unwrap_or(f32::NAN);
            if let Some(l) = &live {
                l.at("step", s);
                l.scalar("train/loss", loss as f64)?;
                l.scalar("train/psnr", psnr as f64)?;
                l.scalar("train/splats", info.num_splats as f64)?;
            }
            bar.set_message(format!(
                "loss {loss:.4} | PSNR {psnr:.2} | {} splats | {} visible | GPU {:.2} GB",
                info.num_splats,
                info.num_visible,
                gpu.memory_reserved() as f64 / 1e9
            ));
        }
        let last = s == a.steps;
        if save_at.contains(&s) {
            let mut paths = vec![a.out.join(format!("splats_{s}.ply"))];
            if a.spz {
                paths.push(a.out.join(format!("splats_{s}.spz")));
            }
            write_splats(&trainer, &paths)?;
        }
        if a.checkpoint_every > 0 && s % a.checkpoint_every == 0 && !last {
            trainer.save_checkpoint(&ck_path)?;
        }
        if (eval_at.contains(&s) || last) && !eval_idx.is_empty() {
            gpu.sync()?;
            train_s += seg.elapsed().as_secs_f64();
            let render_dir = a.out.join("renders");
            let (psnr, ssim, lpips_mean) = evaluate(&trainer, &scene, &targets.cache, &eval_idx, last.then_some(render_dir.as_path()), lpips.as_ref())?;
            if let Some(l) = &live {
                log_eval(l, &trainer, &scene, &targets.cache, eval_idx[0], s, psnr, ssim, lpips_mean)?;
            }
            peak = peak.max(gpu.memory_reserved());
            let rec = EvalRecord {
                step: s,
                psnr,
                ssim,
                lpips: lpips_mean,
                num_splats: trainer.num_splats(),
                num_views: eval_idx.len(),
                train_seconds: train_s,
                it_per_s: (s - start_step) as f64 / train_s.max(1e-9),
                peak_gpu_bytes: peak,
            };
            let lpips_text = lpips_mean.map(|v| format!(", LPIPS {v:.4}")).unwrap_or_default();
            // Through `suspend`, not `bar.println`: that prints nothing when the output is not a
            // terminal (logs, CI).
            bar.suspend(|| println!("step {s}: held-out PSNR {psnr:.3} dB, SSIM {ssim:.4}{lpips_text}, {} splats, {:.1} it/s", rec.num_splats, rec.it_per_s));
            records.push(rec);
            let json = serde_json::to_vec_pretty(&records)?;
            rust3r_io::atomic::write_atomic_with(&eval_path, |w| std::io::Write::write_all(w, &json))
                .with_context(|| format!("cannot write {}", eval_path.display()))?;
            seg = Instant::now();
        }
    }
    gpu.sync()?;
    if eval_idx.is_empty() {
        train_s += seg.elapsed().as_secs_f64();
    }
    bar.finish();
    if let Some(r) = rust3r_gpu::profile::report() {
        println!("RUST3R_PROFILE (device time per phase, synchronised):\n{r}");
    }
    let mut paths = vec![a.out.join("splats.ply")];
    if a.spz {
        paths.push(a.out.join("splats.spz"));
    }
    write_splats(&trainer, &paths)?;
    trainer.save_checkpoint(&ck_path)?;
    println!(
        "done: {} steps in {:.1} s of training, {} Gaussians -> {}",
        trainer.step - start_step,
        train_s,
        trainer.num_splats(),
        a.out.join("splats.ply").display()
    );
    Ok(())
}

/// Read the splats back once and write each path (format by extension).
/// Live view at an evaluation: held-out metrics, the first held-out view rendered next to its
/// ground truth, and the Gaussian centres coloured by their base colour (at most 200k).
#[allow(clippy::too_many_arguments)]
fn log_eval(l: &Live, trainer: &Trainer, scene: &Scene, cache: &ImageCache, view: usize, step: u64, psnr: f64, ssim: f64, lpips: Option<f64>) -> Result<()> {
    l.at("step", step);
    l.scalar("eval/psnr", psnr)?;
    l.scalar("eval/ssim", ssim)?;
    if let Some(v) = lpips {
        l.scalar("eval/lpips", v)?;
    }
    let gt = cache.get(view)?;
    let cam = camera_of(scene, view);
    let (_, _, pred) = trainer.evaluate_view(&cam, &gt.rgb)?;
    let bytes: Vec<u8> = pred.iter().map(|v| (v.clamp(0.0, 1.0) * 255.0 + 0.5) as u8).collect();
    l.image_rgb("eval/render", &bytes, cam.width, cam.height)?;
    l.image_rgb("eval/ground_truth", &gt.rgb, cam.width, cam.height)?;
    let splats = trainer.to_host()?;
    let stride = splats.len().div_ceil(200_000).max(1);
    let k = (splats.sh_degree as usize + 1).pow(2) * 3;
    let (mut pts, mut cols) = (Vec::new(), Vec::new());
    for i in (0..splats.len()).step_by(stride) {
        pts.push(splats.means[i]);
        let dc = |c: usize| ((0.5 + rust3r_splat::train::init::SH_C0 * splats.sh[i * k + c] as f64).clamp(0.0, 1.0) * 255.0) as u8;
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
            fx: v.fx as f32,
            fy: v.fy as f32,
            width: v.width,
            height: v.height,
        };
        l.camera(&format!("world/cameras/{i}"), &view)?;
    }
    Ok(())
}

fn write_splats(trainer: &Trainer, paths: &[PathBuf]) -> Result<()> {
    let host = trainer.to_host()?;
    for path in paths {
        rust3r_io::save_splats(path, &host).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

/// Mean PSNR / SSIM (and LPIPS with `lpips`) over the held-out views, on renders clamped to
/// [0, 1]; with `renders`, writes render | ground truth side by side for each view.
fn evaluate(trainer: &Trainer, scene: &Scene, cache: &ImageCache, idx: &[usize], renders: Option<&Path>, lpips: Option<&Lpips>) -> Result<(f64, f64, Option<f64>)> {
    let (mut psnr, mut ssim, mut lp) = (0.0, 0.0, 0.0);
    if let Some(dir) = renders {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    for &i in idx {
        let gt = cache.get(i)?;
        let cam = camera_of(scene, i);
        let (p, s, pred) = trainer.evaluate_view(&cam, &gt.rgb)?;
        psnr += p;
        ssim += s;
        if let Some(net) = lpips {
            let (w, h) = (cam.width as usize, cam.height as usize);
            let gt_f: Vec<f32> = gt.rgb.iter().map(|&v| v as f32 / 255.0).collect();
            lp += net
                .distance(Image { rgb: &pred, width: w, height: h }, Image { rgb: &gt_f, width: w, height: h })
                .with_context(|| format!("LPIPS of held-out view {}", scene.views[i].name))?;
        }
        if let Some(dir) = renders {
            let (w, h) = (cam.width as usize, cam.height as usize);
            let mut side = vec![0u8; w * 2 * h * 3];
            for y in 0..h {
                for x in 0..w {
                    for c in 0..3 {
                        side[(y * 2 * w + x) * 3 + c] = (pred[(y * w + x) * 3 + c] * 255.0 + 0.5) as u8;
                        side[(y * 2 * w + w + x) * 3 + c] = gt.rgb[(y * w + x) * 3 + c];
                    }
                }
            }
            let name = Path::new(&scene.views[i].name).with_extension("png");
            let path = dir.join(name.file_name().unwrap_or_default());
            let img = image::RgbImage::from_raw((2 * w) as u32, h as u32, side).context("render buffer size")?;
            let mut bytes = Vec::new();
            img.write_to(&mut std::io::Cursor::new(&mut bytes), image::ImageFormat::Png)?;
            rust3r_io::atomic::write_atomic_with(&path, |w| std::io::Write::write_all(w, &bytes))
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
    }
    let n = idx.len().max(1) as f64;
    Ok((psnr / n, ssim / n, lpips.map(|_| lp / n)))
}
