//! `rust3r run`: one command from a capture to a trained splat (`rust3r_pipelines::capture`).

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use indicatif::ProgressBar;
use rust3r_pipelines::{FrontEnd, Phase, RunEvent, RunOptions, run_capture_with};

use crate::slam_cmd::SlamInputArgs;
use crate::train_cmd::{SplatArgs, TrainPrinter, ctrl_c_flag, parse_background};

/// SLAM front end.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Depth camera.
    Rgbd,
    /// The MASt3R network on colour frames (needs --checkpoint).
    #[value(alias = "mast3r")]
    Mono,
}

/// Training budget of `rust3r run`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Preset {
    /// 500 steps, images downscaled 4x, at most 30k initial Gaussians.
    Quick,
    /// 7000 steps at full resolution, at most 200k initial Gaussians.
    Full,
    /// The fast training schedule (`rust3r train --preset fast`: 12000 steps, coarse-to-fine
    /// images, multi-view consistent densification), at most 200k initial Gaussians.
    Fast,
}

impl Preset {
    /// `(steps, downscale, init_count)`.
    fn values(self) -> (u64, u32, usize) {
        match self {
            Self::Quick => (500, 4, 30_000),
            Self::Full => (7000, 1, 200_000),
            Self::Fast => (rust3r_pipelines::FastSchedule::default().steps, 1, 200_000),
        }
    }
}

/// Arguments of `rust3r run`.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// The capture: anything `rust3r slam` reads (TUM RGB-D, 7-Scenes, ETH3D with --mode rgbd;
    /// also a video file, an image folder or EuRoC with --mode mono).
    pub input: PathBuf,
    /// Output folder (splats.ply, trajectory.txt, keyframes.txt, pointcloud.ply, transforms.json,
    /// colmap/, eval.json, renders/, groundtruth.txt, slam/; held_out.json with --hold-out).
    #[arg(long)]
    pub out: PathBuf,
    #[command(flatten)]
    pub slam: SlamInputArgs,
    /// Training budget: quick (the default; 500 steps on images downscaled 4x from 30k initial
    /// Gaussians: minutes on a CPU, seconds on a GPU), full (7000 steps at full resolution from
    /// 200k) or fast (the fast training schedule of `rust3r train --preset fast`, from 200k).
    /// --steps, --downscale and --init-count override it.
    #[arg(long, value_enum, default_value_t = Preset::Quick)]
    pub preset: Preset,
    /// Training steps (default: the preset's).
    #[arg(long)]
    pub steps: Option<u64>,
    /// Shrink the training images by N (SLAM reads the frames at their own size; default: the
    /// preset's).
    #[arg(long)]
    pub downscale: Option<u32>,
    /// Hold out frames k*N + N/2 from training for evaluation (0: none); they still go through
    /// SLAM and are rendered at their own (corrected) SLAM pose.
    #[arg(long, default_value_t = 20)]
    pub eval_every: usize,
    /// Hold out input frames k*N + N/2 before SLAM instead (replaces --eval-every): neither SLAM
    /// nor training sees them, and each is rendered at the pose interpolated between its
    /// nearest tracked neighbours' final poses.
    #[arg(long, value_name = "N")]
    pub hold_out: Option<usize>,
    /// Train while SLAM tracks: from the first keyframe, on its own thread, each new keyframe
    /// adding its view and Gaussians (at most half the steps); a final phase trains the rest on
    /// every view.
    #[arg(long)]
    pub online: bool,
    /// Extra evaluation steps (comma list); the last step is always evaluated.
    #[arg(long, default_value = "")]
    pub eval_at: String,
    /// Most initial Gaussians taken from SLAM's fused point cloud (default: the preset's).
    #[arg(long)]
    pub init_count: Option<usize>,
    /// Background of the renders: white, black or r,g,b.
    #[arg(long, default_value = "black")]
    pub background: String,
    /// Weight of the sensor depth term (0: off).
    #[arg(long, default_value_t = 0.2)]
    pub depth_weight: f32,
    /// No per-image exposure compensation.
    #[arg(long)]
    pub no_exposure: bool,
    /// No camera pose refinement (the outputs carry SLAM's poses).
    #[arg(long)]
    pub no_pose_refine: bool,
    /// Adam learning rate of the pose rotation (radians; translation: times the scene scale).
    #[arg(long, default_value_t = 2e-4)]
    pub pose_lr: f32,
    /// Step from which poses are refined (default: a quarter of the steps).
    #[arg(long)]
    pub pose_start: Option<u64>,
    /// Adam learning rate of the exposure transforms.
    #[arg(long, default_value_t = 2e-3)]
    pub exposure_lr: f32,
    /// A frame joins the training views this far (metres) from every view picked so far ...
    #[arg(long, default_value_t = 0.05)]
    pub min_view_distance: f64,
    /// ... or turned this far (degrees) ...
    #[arg(long, default_value_t = 5.0)]
    pub min_view_angle: f64,
    /// ... or this many frames after the last view picked (0: no limit); keyframes always train.
    #[arg(long, default_value_t = 10)]
    pub max_view_gap: usize,
    /// Tracking lost for good: stop with an error when the input ends with this many frames
    /// lost in a row (0: never).
    #[arg(long, default_value_t = 30)]
    pub max_lost_frames: usize,
    #[command(flatten)]
    pub splat: SplatArgs,
    #[command(flatten)]
    pub lpips: crate::lpips_cmd::LpipsFlags,
    #[command(flatten)]
    pub live: crate::view_cmd::LiveFlags,
    #[command(flatten)]
    pub device: crate::DeviceArgs,
}

pub fn run(a: &RunArgs) -> Result<()> {
    let (slam, calib, kind) = a.slam.setup()?;
    let mut opts = RunOptions::new(&a.input, &a.out);
    opts.kind = kind;
    opts.stride = a.slam.stride;
    opts.max_frames = a.slam.max_frames;
    opts.slam = slam;
    opts.min_view_distance = a.min_view_distance;
    opts.min_view_angle = a.min_view_angle;
    opts.max_view_gap = a.max_view_gap;
    opts.max_lost_frames = a.max_lost_frames;
    opts.calibration = calib.as_ref().map(|c| c.intrinsics);
    let tuning = a.device.tuning()?;
    opts.video = tuning.video;
    opts.train.raster = tuning.raster;
    opts.online = a.online;
    let t = &mut opts.train;
    let (steps, downscale, init_count) = a.preset.values();
    let steps = a.steps.unwrap_or(steps);
    t.steps = steps;
    t.downscale = a.downscale.unwrap_or(downscale);
    t.eval_every = a.eval_every;
    if let Some(n) = a.hold_out {
        anyhow::ensure!(n != 1, "--hold-out 1 would hold out every frame");
        opts.train.eval_every = 0;
        opts.hold_out = n;
    }
    let t = &mut opts.train;
    t.eval_at = a
        .eval_at
        .split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| {
            p.trim()
                .parse::<u64>()
                .with_context(|| format!("'{p}' is not a step number"))
        })
        .collect::<Result<_>>()?;
    t.init_count = a.init_count.unwrap_or(init_count);
    a.splat.apply(t)?;
    if a.preset == Preset::Fast {
        t.preset = a.splat.fast_preset()?;
    }
    t.background = parse_background(&a.background)?;
    anyhow::ensure!(
        a.depth_weight.is_finite() && a.depth_weight >= 0.0,
        "--depth-weight {} is not a finite weight >= 0",
        a.depth_weight
    );
    let r = &mut opts.refine;
    r.depth_weight = a.depth_weight;
    r.exposure = !a.no_exposure;
    r.exposure_lr = a.exposure_lr;
    r.pose = !a.no_pose_refine;
    r.pose_lr = a.pose_lr;
    r.pose_start = a.pose_start.unwrap_or(steps / 4);

    // LPIPS weights and the network are loaded before anything runs, so a bad file stops the
    // run at once.
    opts.train.lpips = a.lpips.load()?;
    let mut network = a.slam.network(&a.device, calib)?;
    let gpu = a.device.open()?;
    opts.train.stop = Some(ctrl_c_flag()?);
    let mut slam_bar: Option<ProgressBar> = None;
    let mut view = a
        .live
        .start(&gpu, &format!("rust3r run {}", a.input.display()))?;
    let mut printer = TrainPrinter::new(None);
    let front = match network.as_mut() {
        Some(f) => FrontEnd::Network(f),
        None => FrontEnd::Rgbd,
    };
    let result = run_capture_with(&opts, &gpu, front, &mut |e| match e {
        RunEvent::Phase { phase, total } => {
            if let Some(b) = slam_bar.take() {
                b.finish_and_clear();
            }
            match phase {
                Phase::Slam => {
                    println!("SLAM over {} frames", total);
                    let bar = crate::progress::bar(total);
                    bar.set_style(crate::progress::style(
                        "slam  {bar:30} frame {pos}/{len} {msg}",
                    ));
                    slam_bar = Some(bar);
                }
                Phase::Prepare => {
                    if let Some(v) = view.as_mut() {
                        v.end_slam();
                    }
                    println!("picking views, reading depth, initialising");
                }
                Phase::Train => println!("training {total} steps"),
                Phase::Outputs => {
                    let _ = printer.finish();
                    println!("writing outputs");
                }
            }
        }
        RunEvent::Slam(p) => {
            if let Some(v) = view.as_mut() {
                v.slam_progress(p);
            }
            if let Some(b) = &slam_bar {
                b.set_position(p.frame as u64);
                b.set_message(format!("{} keyframes, {}", p.keyframes, p.state));
            }
        }
        RunEvent::Online {
            step,
            views,
            splats,
        } => {
            if let Some(b) = &slam_bar {
                b.set_message(format!(
                    "{}; online training: step {step}, {views} views, {splats} Gaussians",
                    b.message()
                ));
            }
        }
        RunEvent::Train(e) => {
            if let Some(v) = view.as_mut() {
                v.train_event(&e);
            }
            printer.event(e)
        }
    });
    if let Some(b) = slam_bar.take() {
        b.finish_and_clear();
    }
    printer.finish()?;
    if let Some(v) = view.as_mut() {
        v.message("finished");
    }
    let s = result?;
    let held = if s.held_out > 0 {
        format!(" ({} held out before SLAM)", s.held_out)
    } else {
        String::new()
    };
    println!(
        "{} frames{held} ({} lost), {} keyframes; trained on {} views, {} evaluated; {} Gaussians",
        s.frames, s.lost, s.keyframes, s.train_views, s.eval_views, s.num_splats
    );
    if let (Some(before), Some(after)) = (s.ate_slam, s.ate_refined) {
        println!("ATE RMSE (SE(3)): {before:.4} m from SLAM, {after:.4} m after pose refinement");
    }
    if let Some(e) = &s.last_eval {
        let lpips = e
            .lpips
            .map(|v| format!(", LPIPS {v:.4}"))
            .unwrap_or_default();
        println!(
            "held-out PSNR {:.3} dB, SSIM {:.4}{lpips} at step {}",
            e.psnr, e.ssim, e.step
        );
    }
    let online = if a.online {
        format!(
            " ({} steps on {} keyframe views during SLAM)",
            s.online_steps, s.online_views
        )
    } else {
        String::new()
    };
    println!(
        "time: SLAM {:.1} s{online}, training {:.1} s, total {:.1} s -> {}",
        s.slam_seconds,
        s.train_seconds,
        s.total_seconds,
        a.out.display()
    );
    Ok(())
}
