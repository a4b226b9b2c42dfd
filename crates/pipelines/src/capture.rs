//! Capture to splat (`rust3r run`): RGB-D SLAM over a sequence, training views picked from its
//! trajectory, Gaussians initialised from its fused pointmaps, a [`TrainSession`] with sensor
//! depth, per-image exposure and pose refinement, and every output written with the refined
//! poses.
//!
//! Depth and colour: the session supervises the expected depth in the colour camera. Each
//! depth map is carried into the colour view's pixel grid assuming the two cameras share their
//! optical centre (`u_c = f_c (u_d − c_d) / f_d + c_c`, depth along z unchanged), averaging the
//! depth pixels that land in one training pixel and dropping pixels whose depths disagree by
//! more than 5% (edges). Data sets that register depth to colour (TUM, ETH3D) are exact; for
//! 7-Scenes, whose reader gives both cameras the published calibration, the small baseline
//! between the Kinect's cameras is ignored, as the SLAM front end and its export do.
//!
//! Sensor depth weighs every measured pixel equally. In mono mode each keyframe view is
//! supervised by its fused pointmap's depth, weighted per pixel by the pointmap's fused
//! confidence `conf / n` (linear in MASt3R's confidence, see `pointmap_depth`), carried into
//! the view with the depth (a view pixel's weight is the mean of the pixels averaged into it);
//! the session normalises each view's weights to mean 1 over its pixels with depth.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use rust3r_geometry::PinholeCamera;
use rust3r_gpu::Gpu;
use rust3r_io::datasets::{self, Dataset, DatasetKind, Frame};
use rust3r_io::scene::{PosedImage, SceneOptions, SceneView, scene_from_images};
use rust3r_slam::output::{self, pose_to_sim3};
use rust3r_slam::{
    Align, FrameSource, PointmapFrontEnd, Progress, RgbdFrontEnd, SlamConfig, SlamResult,
    TrackingState, eval_ate, run_slam_source,
};
use rust3r_splat::train::init::{InitSplats, SH_C0};

use crate::error::{Context, PipelineError, invalid, io_err};
use crate::train::{
    EvalRecord, Events, Interpolated, Refinement, SceneSetup, TrainEvent, TrainOptions,
    TrainSession, ViewDepth,
};
use crate::{online, pose};

/// Options of [`run_capture`].
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// The sequence: anything `rust3r slam` reads with depth (TUM RGB-D, 7-Scenes, ETH3D).
    pub input: PathBuf,
    /// Data set layout; detected when `None`.
    pub kind: Option<DatasetKind>,
    /// Use every N-th frame.
    pub stride: usize,
    /// Process at most N frames.
    pub max_frames: Option<usize>,
    /// SLAM configuration (`SlamConfig::rgbd()` and any overrides).
    pub slam: SlamConfig,
    /// Training options; `out` is the run's output folder, `eval_every` the held-out spacing
    /// (frames `k·N + N/2` go through SLAM but never train; ignored with `hold_out`),
    /// `init_count` the most initial Gaussians.
    pub train: TrainOptions,
    /// Hold out input frames `k·N + N/2` (after the stride, within `max_frames`) before SLAM
    /// (0: off): neither SLAM nor training sees them, and the outputs have no pose for them.
    /// Each is evaluated at the pose interpolated between the final poses of its nearest tracked
    /// neighbours (see [`crate::pose::interpolate`]; by timestamp), with their exposure
    /// interpolated the same way. Replaces `train.eval_every`.
    pub hold_out: usize,
    /// Train while SLAM tracks ([`crate::online`]): from the first keyframe, on its own
    /// thread, for at most half of `train.steps`; the final phase trains the rest on every view.
    pub online: bool,
    pub refine: Refinement,
    /// A frame joins the training views when it is at least this far (metres) or
    /// `min_view_angle` (degrees) from every view picked so far; keyframes always train.
    pub min_view_distance: f64,
    pub min_view_angle: f64,
    /// ... or when the last view picked is this many frames back (0: no limit).
    pub max_view_gap: usize,
    /// Colour camera calibration replacing the data set's (the mono mode's `--calib`).
    pub calibration: Option<PinholeCamera>,
    /// Tracking lost for good: the run stops with an error when the input ends with at least
    /// this many frames lost in a row (0: never; a shorter lost tail only loses those frames).
    pub max_lost_frames: usize,
    /// How a video input is decoded (FFmpeg programs, frame cache).
    pub video: datasets::VideoOptions,
}

impl RunOptions {
    /// Defaults for `input` and `out`: SLAM's RGB-D configuration, sensor depth weight 0.2,
    /// exposure and pose refinement on, views 5 cm / 5° / 10 frames apart, every 20th frame
    /// held out.
    pub fn new(input: &Path, out: &Path) -> Self {
        Self {
            input: input.to_path_buf(),
            kind: None,
            stride: 1,
            max_frames: None,
            slam: SlamConfig::rgbd(),
            train: TrainOptions {
                out: out.to_path_buf(),
                steps: 7000,
                background: [0.0; 3],
                eval_every: 20,
                eval_at: Vec::new(),
                init_count: 200_000,
                ..TrainOptions::default()
            },
            refine: Refinement {
                depth_weight: 0.2,
                exposure: true,
                pose: true,
                pose_start: 7000 / 4,
                ..Refinement::default()
            },
            min_view_distance: 0.05,
            min_view_angle: 5.0,
            max_view_gap: 10,
            max_lost_frames: 30,
            calibration: None,
            video: datasets::VideoOptions::default(),
            hold_out: 0,
            online: false,
        }
    }
}

/// The phases of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Slam,
    Prepare,
    Train,
    Outputs,
}

/// Progress of a run.
pub enum RunEvent<'a> {
    /// A phase starts; `total` is its length in its own units (frames, steps) when known.
    Phase { phase: Phase, total: u64 },
    /// A SLAM frame was processed.
    Slam(&'a Progress),
    /// An event of the training session.
    Train(TrainEvent<'a>),
    /// Online training while SLAM runs (after each SLAM frame): steps taken, keyframe views,
    /// Gaussians.
    Online {
        step: u64,
        views: usize,
        splats: usize,
    },
}

/// What a run did.
#[derive(Clone, Debug)]
pub struct RunSummary {
    pub frames: usize,
    pub keyframes: usize,
    pub lost: usize,
    pub train_views: usize,
    pub eval_views: usize,
    /// Input frames held out before SLAM ([`RunOptions::hold_out`]).
    pub held_out: usize,
    /// ATE RMSE (SE(3)-aligned, metres) of SLAM's trajectory and of the refined one, when the
    /// data set has ground truth.
    pub ate_slam: Option<f64>,
    pub ate_refined: Option<f64>,
    pub last_eval: Option<EvalRecord>,
    pub num_splats: usize,
    pub slam_seconds: f64,
    /// Steps taken while SLAM ran (`--online`) and the keyframe views they used.
    pub online_steps: u64,
    pub online_views: usize,
    /// Seconds of the final (or only) training phase.
    pub train_seconds: f64,
    pub total_seconds: f64,
    /// Output files.
    pub files: Vec<PathBuf>,
}

/// The SLAM front end of a run.
pub enum FrontEnd<'a> {
    /// The sensor's depth ([`RgbdFrontEnd`], frames decoded on loader threads); depth
    /// supervision from the depth images.
    Rgbd,
    /// A network on the colour frames (MASt3R, `rust3r_mast3r::frontend::Mast3rMonoFrontEnd`),
    /// run on the calling thread; depth supervision from the keyframes' pointmaps, weighted by
    /// their confidence. Without a calibration (neither the data set's nor
    /// `RunOptions::calibration`), the colour camera is estimated from the pointmaps
    /// ([`estimate_camera`]).
    Network(&'a mut dyn PointmapFrontEnd),
}

/// Runs capture to splat with the RGB-D front end (module docs); every output goes to
/// `opts.train.out`.
pub fn run_capture(
    opts: &RunOptions,
    gpu: &Gpu,
    on_event: &mut dyn FnMut(RunEvent<'_>),
) -> Result<RunSummary, PipelineError> {
    run_capture_with(opts, gpu, FrontEnd::Rgbd, on_event)
}

/// Runs capture to splat with `front` (module docs); every output goes to `opts.train.out`.
pub fn run_capture_with(
    opts: &RunOptions,
    gpu: &Gpu,
    front: FrontEnd<'_>,
    on_event: &mut dyn FnMut(RunEvent<'_>),
) -> Result<RunSummary, PipelineError> {
    let start = Instant::now();
    let out = opts.train.out.clone();
    std::fs::create_dir_all(&out).map_err(io_err(&out))?;
    let open = || {
        datasets::open_with(
            &opts.input,
            &datasets::OpenOptions {
                kind: opts.kind,
                stride: opts.stride,
                calibration: opts.calibration,
                video: opts.video.clone(),
            },
        )
    };
    let raw = open()?;
    if raw.is_empty() {
        return Err(invalid(format!("{}: no frames", opts.input.display())));
    }
    // Held-out input frames never reach SLAM: it reads a subset of the data set.
    let n_input = opts.max_frames.map_or(raw.len(), |m| m.min(raw.len()));
    let held = held_out_frames(n_input, opts.hold_out);
    let keep: Arc<Vec<usize>> = Arc::new(
        (0..n_input)
            .filter(|i| held.binary_search(i).is_err())
            .collect(),
    );
    if keep.is_empty() {
        return Err(invalid(format!(
            "--hold-out {} holds out every frame of {}",
            opts.hold_out,
            opts.input.display()
        )));
    }
    let subset = |d: Box<dyn Dataset>| -> Box<dyn Dataset> {
        if held.is_empty() {
            d
        } else {
            Box::new(Subset {
                inner: d,
                keep: keep.clone(),
            })
        }
    };
    let slam_max = if held.is_empty() {
        opts.max_frames
    } else {
        None
    };
    let dataset = subset(raw);
    let cfg = &opts.slam;
    let total = slam_max.map_or(dataset.len(), |m| m.min(dataset.len()));
    let slam_dir = out.join("slam");
    let depth_k = match &front {
        FrontEnd::Rgbd => Some(dataset.depth_intrinsics().ok_or_else(|| {
            invalid(format!(
                "{}: the rgbd mode needs depth images, and this data set has none",
                opts.input.display()
            ))
        })?),
        FrontEnd::Network(_) => None,
    };
    on_event(RunEvent::Phase {
        phase: Phase::Slam,
        total: total as u64,
    });
    // The poses of the tracked frames as SLAM reports them: what is left when it stops.
    let mut so_far = SoFar::default();
    let rgbd_front = depth_k.map(|dk| {
        RgbdFrontEnd::new(
            dk,
            cfg.rgbd.downsample,
            cfg.rgbd.min_depth,
            cfg.rgbd.max_depth,
        )
    });
    // Online training: a trainer thread fed with keyframes from SLAM's progress callback.
    let status = Arc::new(online::Status::default());
    let (online_tx, online_thread) = if opts.online {
        let colour = dataset.intrinsics().ok_or_else(|| {
            invalid(format!(
                "{}: --online needs the colour camera's calibration (the data set's or --calib)",
                opts.input.display()
            ))
        })?;
        let focal = match (&front, &rgbd_front) {
            (FrontEnd::Network(f), _) => f.camera(),
            (FrontEnd::Rgbd, Some(r)) => r.camera(),
            (FrontEnd::Rgbd, None) => None,
        }
        .map(|c| c.fx.min(c.fy));
        let setup = online::Setup {
            gpu: gpu.clone(),
            train: opts.train.clone(),
            max_steps: opts.train.steps / 2,
            points_per_keyframe: (opts.train.init_count / 8).max(1),
            min_conf: cfg.rgbd.export_conf as f32,
            focal,
            colour,
            dataset: subset(open()?),
            delivered: dataset.colour_resampled().then(|| slam_dir.clone()),
            input: opts.input.clone(),
        };
        let (tx, rx) = std::sync::mpsc::channel();
        let st = status.clone();
        let thread = std::thread::Builder::new()
            .name("rust3r-online-train".into())
            .spawn(move || online::run(setup, rx, &st))
            .map_err(|e| invalid(format!("cannot start the online training thread: {e}")))?;
        (Some(tx), Some(thread))
    } else {
        (None, None)
    };
    let mut record = |p: &Progress| {
        so_far.record(p);
        on_event(RunEvent::Slam(p));
        if let Some(tx) = &online_tx {
            // A send fails only when the trainer stopped with an error, reported at the join.
            if let Some((_, pm)) = &p.new_keyframe {
                let _ = tx.send(online::Msg::Keyframe {
                    frame: p.frame.saturating_sub(1),
                    rgb_path: p.rgb_path.clone(),
                    c2w: p.pose,
                    pointmap: pm.clone(),
                });
            }
            if let Some((poses, _)) = &p.graph {
                let _ = tx.send(online::Msg::Poses(poses.clone()));
            }
            on_event(RunEvent::Online {
                step: status.steps.load(Ordering::Relaxed),
                views: status.views.load(Ordering::Relaxed),
                splats: status.splats.load(Ordering::Relaxed),
            });
        }
    };
    let t_slam = Instant::now();
    let result = match (front, rgbd_front) {
        // Frames are read and prepared for the network on a loader thread; pairs are tracked on
        // the training GPU unless it is a software rasterizer (there the CPU tracker is faster).
        (FrontEnd::Network(front), _) => run_slam_source(
            FrameSource::Pipelined {
                datasets: (0..FrameSource::default_loaders())
                    .map(|_| open().map(subset))
                    .collect::<Result<_, _>>()?,
                front,
                ahead: 4,
            },
            cfg,
            slam_max,
            (!gpu.is_llvmpipe()).then_some(gpu),
            &mut record,
        ),
        (FrontEnd::Rgbd, front) => {
            let front = front.ok_or_else(|| invalid("the rgbd mode needs depth images"))?;
            let n_loaders = FrameSource::default_loaders();
            let mut loaders: Vec<(Box<dyn Dataset>, Box<dyn PointmapFrontEnd>)> = Vec::new();
            for _ in 0..n_loaders {
                loaders.push((subset(open()?), Box::new(front.clone())));
            }
            run_slam_source(
                FrameSource::Prefetch {
                    loaders,
                    ahead: 4 * n_loaders,
                },
                cfg,
                slam_max,
                None,
                &mut record,
            )
        }
    };
    let slam_seconds = t_slam.elapsed().as_secs_f64();
    // The input ended: the online trainer finishes its step and hands its state back.
    drop(online_tx);
    let online = match online_thread.map(|t| t.join()) {
        None => None,
        Some(Ok(r)) => Some(r?),
        Some(Err(_)) => return Err(invalid("the online training thread panicked")),
    };
    let result = match result {
        Ok(r) => r,
        Err(e) => return Err(so_far.stopped(&slam_dir, total, e)),
    };
    let (online_steps, online_views) = online.as_ref().map_or((0, 0), |o| {
        (o.trainer.as_ref().map_or(0, |t| t.step), o.views)
    });
    if let Some(o) = &online {
        on_event(RunEvent::Train(TrainEvent::Info(format!(
            "online training: {online_steps} steps on {} keyframe views in {:.1} s while SLAM ran {slam_seconds:.1} s",
            o.views, o.seconds
        ))));
    }
    let warm = online.and_then(|o| o.trainer);
    // The colour camera, and the camera of the pointmaps (depth supervision from the network).
    let first = result
        .frames
        .first()
        .ok_or_else(|| invalid(format!("{}: no frames", opts.input.display())))?;
    let image_size = image::image_dimensions(&first.rgb_path).context_with(|| {
        format!(
            "frame 0: cannot read the size of {}",
            first.rgb_path.display()
        )
    })?;
    let (colour_k, pointmap_k) = match (dataset.intrinsics(), depth_k) {
        (Some(k), Some(_)) => (k, None),
        (Some(k), None) => (k, Some(pointmap_camera(&result, image_size)?.1)),
        (None, Some(_)) => {
            return Err(invalid(format!(
                "{}: the data set has no colour calibration",
                opts.input.display()
            )));
        }
        (None, None) => {
            let (k, pk, fitted) = pointmap_camera(&result, image_size)?;
            let how = if fitted {
                "estimated from the pointmaps"
            } else {
                "assumed (60 degree field of view: the pointmaps fit no focal length)"
            };
            let text = format!(
                "camera {how}: fx {:.1}, fy {:.1}, cx {:.1}, cy {:.1} for {}x{} frames",
                k.fx, k.fy, k.cx, k.cy, k.width, k.height
            );
            on_event(RunEvent::Train(if fitted {
                TrainEvent::Info(text)
            } else {
                TrainEvent::Warning(text)
            }));
            (k, Some(pk))
        }
    };
    // SLAM's own outputs (poses before refinement) first: they survive a failure later on.
    let slam_files = output::write_outputs_with(
        &result,
        dataset.as_ref(),
        &slam_dir,
        cfg.rgbd.export_conf as f32,
        Some(colour_k),
    )?;
    let ate_slam = slam_files
        .groundtruth
        .as_ref()
        .and_then(|gt| eval_ate(&slam_files.trajectory, gt, Align::Se3).ok())
        .map(|r| r.rmse);
    let lost = result.frames.iter().filter(|f| !f.tracked).count();
    check_lost_tail(&result, opts.max_lost_frames, &slam_files.trajectory)?;
    if result.frames.iter().all(|f| !f.tracked) {
        return Err(invalid(format!(
            "{}: tracking failed on every frame (SLAM outputs in {})",
            opts.input.display(),
            slam_dir.display()
        )));
    }

    // Views.
    on_event(RunEvent::Phase {
        phase: Phase::Prepare,
        total: 0,
    });
    let frame_poses: Vec<[[f64; 4]; 4]> = result
        .frame_poses()
        .iter()
        .map(|(_, t)| w2c_of(t))
        .collect();
    let (train_frames, eval_frames) = select_views(&result, &frame_poses, opts);
    if train_frames.is_empty() {
        return Err(invalid(format!(
            "{}: no tracked frame to train on",
            opts.input.display()
        )));
    }
    let (cw, ch) = match (colour_k.width, colour_k.height) {
        (0, _) | (_, 0) => image_size,
        (w, h) => (w, h),
    };
    check_frame_sizes(&result, (cw, ch))?;
    // The images to train on: the files, or where the data set resamples its colour (7-Scenes'
    // colour registered to depth), the delivered images that SLAM's export wrote.
    let resampled = dataset.colour_resampled();
    let image_of = |f: &rust3r_slam::system::FrameRecord| {
        if resampled {
            output::delivered_image_path(&slam_dir, &f.rgb_path)
        } else {
            f.rgb_path.clone()
        }
    };
    // Input frames held out before SLAM, each between its nearest tracked neighbours.
    let held_views = if held.is_empty() {
        Vec::new()
    } else {
        let raw = open()?;
        let mut forward = |e: TrainEvent<'_>| on_event(RunEvent::Train(e));
        forward(TrainEvent::Info(format!(
            "{} input frames held out before SLAM (frames k*{n} + {h}), rendered at poses interpolated between their neighbours'",
            held.len(),
            n = opts.hold_out,
            h = opts.hold_out / 2
        )));
        held_out_views(
            &result,
            &keep,
            &held,
            raw.as_ref(),
            (cw, ch),
            resampled.then(|| out.join("held_out")).as_deref(),
            &mut forward,
        )?
    };
    // Scene views in frame order: training and held-out frames, and the neighbours of the
    // frames held out before SLAM; then those frames.
    let mut scene_frames: Vec<usize> = train_frames
        .iter()
        .chain(&eval_frames)
        .copied()
        .chain(held_views.iter().flat_map(|v| [v.before, v.after]))
        .collect();
    scene_frames.sort_unstable();
    scene_frames.dedup();
    // Every view has SLAM's colour camera at the frames' size, without its lens distortion:
    // the frames are trained on as they are, not undistorted.
    let view_camera = colour_k.with_size(cw, ch).with_distortion(None);
    let posed = |path: PathBuf, w2c: [[f64; 4]; 4]| PosedImage {
        image_path: path,
        camera: view_camera,
        world_to_camera: w2c,
    };
    let mut images: Vec<PosedImage> = scene_frames
        .iter()
        .map(|&f| posed(image_of(&result.frames[f]), frame_poses[f]))
        .collect();
    let mut interpolated = Vec::new();
    for v in &held_views {
        let pos = |f: usize| scene_frames.binary_search(&f).unwrap_or(0);
        interpolated.push(Interpolated {
            view: images.len(),
            before: pos(v.before),
            after: pos(v.after),
            t: v.t,
        });
        let w2c = pose::interpolate(&frame_poses[v.before], &frame_poses[v.after], v.t);
        images.push(posed(v.image.clone(), w2c));
    }
    let scene_opts = SceneOptions {
        downscale: opts.train.downscale,
        background: opts.train.background,
        kind: None,
    };
    let scene = scene_from_images(
        &opts.input,
        &slam_files.transforms,
        &images,
        None,
        &scene_opts,
    )?;
    let train: Vec<usize> = (0..scene_frames.len())
        .filter(|&k| train_frames.binary_search(&scene_frames[k]).is_ok())
        .collect();
    let eval: Vec<usize> = (0..scene_frames.len())
        .filter(|&k| eval_frames.binary_search(&scene_frames[k]).is_ok())
        .chain(interpolated.iter().map(|p| p.view))
        .collect();
    let mut depth = vec![None; scene.len()];
    if opts.refine.depth_weight > 0.0 {
        for &k in &train {
            let f = &result.frames[scene_frames[k]];
            let v = &scene.views[k];
            match (depth_k.as_ref(), pointmap_k.as_ref()) {
                (Some(dk), _) => {
                    let frame = dataset
                        .frame(f.index)
                        .context_with(|| format!("frame {} ({})", f.index, f.rgb_path.display()))?;
                    let d = frame.depth.ok_or_else(|| {
                        invalid(format!(
                            "frame {} ({}): no depth image",
                            f.index,
                            f.rgb_path.display()
                        ))
                    })?;
                    // Sensor depth: every measured pixel weighs 1.
                    depth[k] = Some(ViewDepth {
                        depth: depth_to_view(&d, dk, &v.camera),
                        weight: None,
                    });
                }
                (None, Some(pk)) => {
                    // The network's depth: a keyframe's fused pointmap, weighted by its
                    // confidence.
                    if let Some(kf) = result
                        .keyframes
                        .frames
                        .iter()
                        .find(|kf| kf.frame_index == f.index)
                    {
                        let (d, conf) = pointmap_depth(&kf.pointmap, kf.n, kf.t_wc.scale);
                        let (depth_v, weight) = depth_to_view_weighted(&d, &conf, pk, &v.camera);
                        depth[k] = Some(ViewDepth {
                            depth: depth_v,
                            weight: Some(weight),
                        });
                    }
                }
                (None, None) => {}
            }
        }
    }
    // The pointmaps' own camera: SLAM's (RGB-D, calibrated mono) or the estimated one.
    let focal = result
        .camera
        .map(|c| c.fx.min(c.fy))
        .or(pointmap_k.as_ref().map(|k| k.fx.min(k.fy)))
        .unwrap_or(colour_k.fx.min(colour_k.fy));
    let init = init_from_slam(
        &result,
        cfg.rgbd.export_conf as f32,
        opts.train.init_count,
        opts.train.sh_degree,
        focal,
    );
    if init.is_empty() && warm.is_none() {
        return Err(invalid(format!(
            "{}: SLAM produced no points to start from",
            opts.input.display()
        )));
    }
    let label = format!(
        "{} ({} of {} frames)",
        opts.input.display(),
        scene.len(),
        result.frames.len()
    );
    let held_scene_views: Vec<usize> = interpolated.iter().map(|p| p.view).collect();
    let setup = SceneSetup {
        train,
        eval,
        init: warm.is_none().then_some(init),
        depth,
        scale: None,
        interpolated,
        trainer: warm,
    };

    // Training.
    let mut forward = |e: TrainEvent<'_>| on_event(RunEvent::Train(e));
    let mut session = TrainSession::from_scene(
        &label,
        scene,
        setup,
        opts.train.clone(),
        opts.refine,
        gpu,
        &mut forward,
    )?;
    let n_train = session.train_views().len();
    let n_eval = session.eval_views().len();
    on_event(RunEvent::Phase {
        phase: Phase::Train,
        total: opts.train.steps,
    });
    let mut forward = |e: TrainEvent<'_>| on_event(RunEvent::Train(e));
    let summary = session.run(&mut forward)?;

    // Outputs with the refined poses.
    on_event(RunEvent::Phase {
        phase: Phase::Outputs,
        total: 0,
    });
    let refined_views = session.poses();
    let scene = session.scene().clone();
    // Every frame: the correction of the nearest scene view (by frame index) carried over.
    let refined: Vec<[[f64; 4]; 4]> = (0..result.frames.len())
        .map(|f| {
            let k = nearest(&scene_frames, f);
            pose::transfer(
                &scene.views[k].world_to_camera,
                &refined_views[k],
                &frame_poses[f],
            )
        })
        .collect();
    let mut files = vec![summary.splats.clone(), out.join("eval.json")];
    let traj: Vec<(f64, rust3r_geometry::Sim3)> = result
        .frames
        .iter()
        .zip(&refined)
        .map(|(f, p)| (f.timestamp, pose_to_sim3(&pose::rigid_inverse(p))))
        .collect();
    let trajectory = out.join("trajectory.txt");
    output::write_tum_poses(&trajectory, &traj)?;
    files.push(trajectory.clone());
    let kf: Vec<(f64, rust3r_geometry::Sim3)> = result
        .keyframes
        .frames
        .iter()
        .filter_map(|k| {
            result
                .frames
                .iter()
                .position(|f| f.index == k.frame_index)
                .map(|f| (k.timestamp, traj[f].1))
        })
        .collect();
    let keyframes = out.join("keyframes.txt");
    output::write_tum_poses(&keyframes, &kf)?;
    files.push(keyframes);
    let cloud = out.join("pointcloud.ply");
    std::fs::copy(&slam_files.pointcloud, &cloud).map_err(io_err(&cloud))?;
    files.push(cloud.clone());
    let scene_view = |image_path: PathBuf, world_to_camera: [[f64; 4]; 4]| SceneView {
        name: image_path
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default(),
        image_path,
        camera: view_camera,
        world_to_camera,
    };
    let views: Vec<SceneView> = result
        .frames
        .iter()
        .zip(&refined)
        .filter(|(f, _)| f.tracked)
        .map(|(f, p)| scene_view(image_of(f), *p))
        .collect();
    let transforms = out.join("transforms.json");
    rust3r_io::scene::write_transforms_json(&transforms, &views, Some(&cloud))?;
    files.push(transforms);
    // The frames held out before SLAM at their final (interpolated) poses, so that other
    // trainers can be scored on them (`rust3r train --eval-scene`).
    if !held_scene_views.is_empty() {
        let held: Vec<SceneView> = held_scene_views
            .iter()
            .map(|&k| scene_view(images[k].image_path.clone(), refined_views[k]))
            .collect();
        let path = out.join("held_out.json");
        rust3r_io::scene::write_transforms_json(&path, &held, None)?;
        files.push(path);
    }
    let colmap = out.join("colmap");
    write_colmap(&colmap, &views)?;
    files.push(colmap);
    let mut ate_refined = None;
    if let Some(gt) = &slam_files.groundtruth {
        let dst = out.join("groundtruth.txt");
        std::fs::copy(gt, &dst).map_err(io_err(&dst))?;
        ate_refined = eval_ate(&trajectory, &dst, Align::Se3).ok().map(|r| r.rmse);
        files.push(dst);
    }
    Ok(RunSummary {
        frames: result.frames.len(),
        keyframes: result.keyframes.frames.len(),
        lost,
        train_views: n_train,
        eval_views: n_eval,
        held_out: held.len(),
        ate_slam,
        ate_refined,
        last_eval: summary.last_eval,
        num_splats: summary.num_splats,
        slam_seconds,
        online_steps,
        online_views,
        train_seconds: summary.train_seconds,
        total_seconds: start.elapsed().as_secs_f64(),
        files,
    })
}

/// Input frames `k·n + n/2` below `len` (none when `n` is 0).
pub fn held_out_frames(len: usize, n: usize) -> Vec<usize> {
    if n == 0 {
        return Vec::new();
    }
    (n / 2..len).step_by(n).collect()
}

/// A data set without its held-out frames: frame `i` is frame `keep[i]` of `inner`.
struct Subset {
    inner: Box<dyn Dataset>,
    keep: Arc<Vec<usize>>,
}

impl Dataset for Subset {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn len(&self) -> usize {
        self.keep.len()
    }
    fn intrinsics(&self) -> Option<PinholeCamera> {
        self.inner.intrinsics()
    }
    fn depth_intrinsics(&self) -> Option<PinholeCamera> {
        self.inner.depth_intrinsics()
    }
    fn frame(&self, i: usize) -> Result<Frame, rust3r_io::IoError> {
        // Past the end: the inner data set's own error for a frame it does not have.
        let k = self.keep.get(i).copied().unwrap_or(self.inner.len());
        let mut f = self.inner.frame(k)?;
        f.index = i;
        Ok(f)
    }
    fn colour_resampled(&self) -> bool {
        self.inner.colour_resampled()
    }
    fn ground_truth(&self) -> Option<Vec<(f64, datasets::Pose)>> {
        self.inner.ground_truth()
    }
}

/// A frame held out before SLAM: its image and where it sits between two tracked frames.
struct HeldView {
    image: PathBuf,
    /// Indices into `result.frames` of the nearest tracked frames before and after (the same
    /// frame when only one side has one).
    before: usize,
    after: usize,
    /// By timestamp (by input index when the timestamps do not increase).
    t: f64,
}

/// The frames `held` (input indices; `keep[j]` is the input index of `result.frames[j]`) with
/// their neighbours and images (`raw` is the whole data set; with `delivered`, the data set
/// resamples its colour and the delivered images are written there, as SLAM's export does).
/// A frame with no tracked frame on either side is skipped with a warning.
fn held_out_views(
    result: &SlamResult,
    keep: &[usize],
    held: &[usize],
    raw: &dyn Dataset,
    (cw, ch): (u32, u32),
    delivered: Option<&Path>,
    on_event: &mut Events<'_>,
) -> Result<Vec<HeldView>, PipelineError> {
    let tracked: Vec<usize> = (0..result.frames.len())
        .filter(|&j| result.frames[j].tracked)
        .collect();
    let mut views = Vec::new();
    for &h in held {
        let before = tracked.iter().rev().find(|&&j| keep[j] < h).copied();
        let after = tracked.iter().find(|&&j| keep[j] > h).copied();
        let (a, b) = match (before, after) {
            (Some(a), Some(b)) => (a, b),
            (Some(a), None) => (a, a),
            (None, Some(b)) => (b, b),
            (None, None) => {
                on_event(TrainEvent::Warning(format!(
                    "held-out frame {h}: no tracked frame to take a pose from; not evaluated"
                )));
                continue;
            }
        };
        let frame = raw
            .frame(h)
            .context_with(|| format!("held-out frame {h}"))?;
        let (w, hh) = frame.rgb.dimensions();
        if (w, hh) != (cw, ch) {
            return Err(invalid(format!(
                "held-out frame {h} ({}) is {w}x{hh}, but the capture's frames are {cw}x{ch}",
                frame.rgb_path.display()
            )));
        }
        let (ta, tb) = (result.frames[a].timestamp, result.frames[b].timestamp);
        let t = if a == b {
            0.0
        } else if tb > ta && frame.timestamp.is_finite() {
            ((frame.timestamp - ta) / (tb - ta)).clamp(0.0, 1.0)
        } else {
            (h - keep[a]) as f64 / (keep[b] - keep[a]) as f64
        };
        let image = match delivered {
            Some(dir) => output::write_delivered_image(raw, h, &frame.rgb_path, dir)?,
            None => frame.rgb_path.clone(),
        };
        views.push(HeldView {
            image,
            before: a,
            after: b,
            t,
        });
    }
    Ok(views)
}

/// The tracked frames' poses reported during SLAM, written when it stops with an error.
#[derive(Default)]
struct SoFar {
    processed: usize,
    tracked: Vec<(f64, rust3r_geometry::Sim3)>,
}

impl SoFar {
    fn record(&mut self, p: &Progress) {
        self.processed = p.frame;
        if p.state == TrackingState::Tracking {
            self.tracked.push((p.timestamp, p.pose));
        }
    }

    /// Writes `dir/trajectory.txt` (TUM, the tracked frames so far) and wraps SLAM's error with
    /// where it stopped and where the trajectory is.
    fn stopped(&self, dir: &Path, total: usize, e: rust3r_slam::SlamError) -> PipelineError {
        let path = dir.join("trajectory.txt");
        let saved = std::fs::create_dir_all(dir)
            .map_err(|e| e.to_string())
            .and_then(|_| output::write_tum_poses(&path, &self.tracked).map_err(|e| e.to_string()));
        let context = match saved {
            Ok(()) => format!(
                "SLAM stopped after {} of {total} frames; the trajectory of the {} frames tracked so far is in {}",
                self.processed,
                self.tracked.len(),
                path.display()
            ),
            Err(w) => format!(
                "SLAM stopped after {} of {total} frames (the trajectory so far could not be written: {w})",
                self.processed
            ),
        };
        PipelineError::Context {
            context,
            source: Box::new(e),
        }
    }
}

/// Tracking lost for good: an error naming the first frame of a lost run that reaches the end
/// of the input and is at least `max_lost` frames long (0: never).
fn check_lost_tail(
    result: &SlamResult,
    max_lost: usize,
    trajectory: &Path,
) -> Result<(), PipelineError> {
    let tail = result
        .frames
        .iter()
        .rev()
        .take_while(|f| !f.tracked)
        .count();
    if max_lost == 0 || tail < max_lost {
        return Ok(());
    }
    let first = &result.frames[result.frames.len() - tail];
    Err(invalid(format!(
        "tracking lost for good at frame {} ({}): the last {tail} frames never relocalised (limit: {max_lost} frames lost in a row); the trajectory of the {} frames tracked before is in {}",
        first.index,
        first.rgb_path.display(),
        result.frames.iter().filter(|f| f.tracked).count(),
        trajectory.display()
    )))
}

/// Every tracked frame's colour image has the training size `(w, h)` (one camera for the
/// splat); otherwise an error naming the first frame that does not.
fn check_frame_sizes(result: &SlamResult, (w, h): (u32, u32)) -> Result<(), PipelineError> {
    for f in result.frames.iter().filter(|f| f.tracked) {
        let (fw, fh) = image::image_dimensions(&f.rgb_path).context_with(|| {
            format!(
                "frame {}: cannot read the size of {}",
                f.index,
                f.rgb_path.display()
            )
        })?;
        if (fw, fh) != (w, h) {
            return Err(invalid(format!(
                "frame {} ({}) is {fw}x{fh}, but the capture's frames are {w}x{h}: frames of changing size cannot train one splat",
                f.index,
                f.rgb_path.display()
            )));
        }
    }
    Ok(())
}

/// The camera of the network's pointmaps and the colour camera it implies, for a run whose data
/// set has no calibration. Calibrated pointmaps (`result.camera`) give both exactly (through
/// MASt3R's resize and crop); otherwise the focal length is the confidence-weighted least-squares
/// fit of `u − c = f · x / z` over every keyframe's points, principal point at the image centre;
/// when no positive focal length fits, a 60 degree horizontal field of view (the `bool` is
/// false then).
pub fn pointmap_camera(
    result: &SlamResult,
    image: (u32, u32),
) -> Result<(PinholeCamera, PinholeCamera, bool), PipelineError> {
    let mut fitted = true;
    let kf = result
        .keyframes
        .frames
        .first()
        .ok_or_else(|| invalid("SLAM made no keyframe"))?;
    let (w, h) = (kf.pointmap.width, kf.pointmap.height);
    let (pcx, pcy) = ((w as f64 - 1.0) / 2.0, (h as f64 - 1.0) / 2.0);
    let pk = match result.camera {
        Some(c) => c,
        None => {
            let (mut num, mut den) = (0.0f64, 0.0f64);
            for kf in &result.keyframes.frames {
                let pm = &kf.pointmap;
                for i in 0..pm.len() {
                    let [x, y, z] = pm.points[i];
                    let c = pm.conf[i] as f64;
                    if !(z > 0.0 && c > 0.0 && x.is_finite() && y.is_finite()) {
                        continue;
                    }
                    let (a, b) = (x as f64 / z as f64, y as f64 / z as f64);
                    let (du, dv) = ((i % pm.width) as f64 - pcx, (i / pm.width) as f64 - pcy);
                    num += c * (du * a + dv * b);
                    den += c * (a * a + b * b);
                }
            }
            let mut f = num / den;
            if !(f.is_finite() && f > 0.0) {
                // No usable geometry (e.g. an untrained network): a 60 degree horizontal field
                // of view, said by the caller.
                f = w as f64 / 2.0 / 30f64.to_radians().tan();
                fitted = false;
            }
            PinholeCamera::new(f, f, pcx, pcy, w as u32, h as u32)
        }
    };
    // Pointmap pixel u is resized-image pixel u + x0, image pixel (u + x0 + 0.5)·W/rw − 0.5.
    let long = w.max(h) as u32;
    let rc = rust3r_geometry::mast3r_resize::mast3r_resize_crop(image.0, image.1, long);
    if rc.output != (w as u32, h as u32) {
        return Err(invalid(format!(
            "{}x{} pointmaps do not come from {}x{} frames by MASt3R's resize",
            w, h, image.0, image.1
        )));
    }
    let colour = rust3r_geometry::mast3r_resize::inverse_transform_intrinsics(&pk, &rc, image);
    Ok((colour, pk, fitted))
}

/// A keyframe's fused pointmap (`n` observations, scale `scale`) as a depth image (world units:
/// z times the scale) and a confidence image (the fused confidence `conf / n`), both 0 where the
/// pointmap has no point (confidence 0) or no positive finite depth.
///
/// The confidence weighs the depth term linearly (module docs): MASt3R trains its pointmaps
/// with `C·ℓ − α log C`, whose optimum `C = α/ℓ` makes `C` inversely proportional to the
/// expected error, so `C·|e − t|` is the Laplace log-likelihood of the depth under the network's
/// own error model; MASt3R-SLAM fuses pointmaps with the same linear weights.
fn pointmap_depth(
    pm: &rust3r_slam::pointmap::Pointmap,
    n: u32,
    scale: f64,
) -> (datasets::DepthImage, datasets::DepthImage) {
    let n = n.max(1) as f32;
    let scale = scale as f32;
    let valid = |i: usize| {
        let z = pm.points[i][2] * scale;
        (pm.conf[i] > 0.0 && pm.conf[i].is_finite() && z > 0.0 && z.is_finite()).then_some(z)
    };
    let (w, h) = (pm.width as u32, pm.height as u32);
    let idx = |x: u32, y: u32| y as usize * pm.width + x as usize;
    let depth =
        datasets::DepthImage::from_fn(w, h, |x, y| image::Luma([valid(idx(x, y)).unwrap_or(0.0)]));
    let conf = datasets::DepthImage::from_fn(w, h, |x, y| {
        let i = idx(x, y);
        image::Luma([valid(i).map_or(0.0, |_| pm.conf[i] / n)])
    });
    (depth, conf)
}

pub(crate) fn w2c_of(t: &rust3r_geometry::Sim3) -> [[f64; 4]; 4] {
    let m = t.to_se3().matrix();
    let c2w: [[f64; 4]; 4] = std::array::from_fn(|r| std::array::from_fn(|c| m[(r, c)]));
    pose::rigid_inverse(&c2w)
}

/// Index into `sorted` of the value nearest `x`.
fn nearest(sorted: &[usize], x: usize) -> usize {
    let i = sorted.partition_point(|&v| v < x);
    match (i.checked_sub(1), sorted.get(i)) {
        (Some(a), Some(&b)) if x - sorted[a] <= b - x => a,
        (_, Some(_)) => i,
        (Some(a), None) => a,
        (None, None) => 0,
    }
}

/// Training and held-out frames (indices into `result.frames`, ascending): frames `k·N + N/2`
/// are held out (`N = eval_every`, none when 0); of the other tracked frames, keyframes train,
/// and any frame at least `min_view_distance` or `min_view_angle` away from every view picked
/// so far, or `max_view_gap` frames after the last one.
pub fn select_views(
    result: &SlamResult,
    w2c: &[[[f64; 4]; 4]],
    opts: &RunOptions,
) -> (Vec<usize>, Vec<usize>) {
    let e = if opts.hold_out > 0 {
        0
    } else {
        opts.train.eval_every
    };
    let held = |f: usize| e > 0 && f % e == e / 2;
    let is_kf: Vec<bool> = result
        .frames
        .iter()
        .map(|f| {
            result
                .keyframes
                .frames
                .iter()
                .any(|k| k.frame_index == f.index)
        })
        .collect();
    let mut train: Vec<usize> = Vec::new();
    let mut eval = Vec::new();
    let min_angle = opts.min_view_angle.to_radians();
    for (f, rec) in result.frames.iter().enumerate() {
        if !rec.tracked {
            continue;
        }
        if held(f) {
            eval.push(f);
            continue;
        }
        let far = train.iter().all(|&t| {
            let (angle, dist) = pose::pose_error(&w2c[f], &w2c[t]);
            angle >= min_angle || dist >= opts.min_view_distance
        });
        let gap = opts.max_view_gap > 0 && train.last().is_none_or(|&t| f - t >= opts.max_view_gap);
        if is_kf[f] || far || gap {
            train.push(f);
        }
    }
    (train, eval)
}

/// A depth map taken with camera `k` carried into the pixel grid of a view with camera `view`
/// (module docs).
pub fn depth_to_view(
    depth: &datasets::DepthImage,
    k: &PinholeCamera,
    view: &PinholeCamera,
) -> Vec<f32> {
    resample_to_view(depth, None, k, view).0
}

/// [`depth_to_view`] with a per-pixel weight image (`weight`, the size of `depth`) carried
/// along: a view pixel's weight is the mean weight of the depth pixels averaged into it, 0
/// where the view pixel has no depth.
pub fn depth_to_view_weighted(
    depth: &datasets::DepthImage,
    weight: &datasets::DepthImage,
    k: &PinholeCamera,
    view: &PinholeCamera,
) -> (Vec<f32>, Vec<f32>) {
    resample_to_view(depth, Some(weight), k, view)
}

fn resample_to_view(
    depth: &datasets::DepthImage,
    weight: Option<&datasets::DepthImage>,
    k: &PinholeCamera,
    v: &PinholeCamera,
) -> (Vec<f32>, Vec<f32>) {
    let (w, h) = (v.width as usize, v.height as usize);
    let mut sum = vec![0.0f64; w * h];
    let mut wsum = vec![0.0f64; w * h];
    let mut lo = vec![f32::INFINITY; w * h];
    let mut hi = vec![0.0f32; w * h];
    let mut count = vec![0u32; w * h];
    for (x, y, p) in depth.enumerate_pixels() {
        let z = p.0[0];
        if !(z > 0.0 && z.is_finite()) {
            continue;
        }
        let u = v.fx * (x as f64 - k.cx) / k.fx + v.cx;
        let vv = v.fy * (y as f64 - k.cy) / k.fy + v.cy;
        let (ui, vi) = ((u + 0.5).floor(), (vv + 0.5).floor());
        if ui < 0.0 || vi < 0.0 || ui >= w as f64 || vi >= h as f64 {
            continue;
        }
        let i = vi as usize * w + ui as usize;
        sum[i] += z as f64;
        if let Some(wi) = weight {
            wsum[i] += wi.get_pixel_checked(x, y).map_or(0.0, |q| q.0[0] as f64);
        }
        lo[i] = lo[i].min(z);
        hi[i] = hi[i].max(z);
        count[i] += 1;
    }
    let keep = |i: usize| count[i] > 0 && hi[i] <= 1.05 * lo[i];
    let mean = |s: &[f64], i: usize| {
        if keep(i) {
            (s[i] / count[i] as f64) as f32
        } else {
            0.0
        }
    };
    let d = (0..w * h).map(|i| mean(&sum, i)).collect();
    let wv = match weight {
        Some(_) => (0..w * h).map(|i| mean(&wsum, i)).collect(),
        None => Vec::new(),
    };
    (d, wv)
}

/// Initial Gaussians from the keyframes' fused pointmaps (points whose mean confidence is at
/// least `min_conf`): colour from the pointmap's image colour, an isotropic scale of the point's
/// pixel footprint (depth over `focal`, the pointmap camera's focal length), opacity 0.1; at most
/// `max_points`, evenly strided.
pub fn init_from_slam(
    result: &SlamResult,
    min_conf: f32,
    max_points: usize,
    sh_degree: u32,
    focal: f64,
) -> InitSplats {
    splats_from_points(
        &output::fused_points(result, min_conf),
        max_points,
        sh_degree,
        focal,
    )
}

/// Gaussians of [`init_from_slam`] from points (colour, scale of the pixel footprint at
/// `focal`, opacity 0.1; at most `max_points`, evenly strided).
pub(crate) fn splats_from_points(
    points: &[output::FusedPoint],
    max_points: usize,
    sh_degree: u32,
    focal: f64,
) -> InitSplats {
    let f = focal.max(1e-6);
    let pts: Vec<([f32; 3], [u8; 3], f32)> = points
        .iter()
        .map(|p| {
            (
                p.world,
                p.colour,
                (p.depth.abs() as f64 / f).max(1e-6) as f32,
            )
        })
        .collect();
    let stride = pts.len().div_ceil(max_points.max(1)).max(1);
    let k = ((sh_degree + 1) * (sh_degree + 1)) as usize * 3;
    let mut init = InitSplats {
        means: Vec::new(),
        log_scales: Vec::new(),
        quats: Vec::new(),
        opacity_logits: Vec::new(),
        sh: Vec::new(),
        sh_degree,
    };
    let opacity_logit = (0.1f32 / 0.9).ln();
    for (p, c, s) in pts.into_iter().step_by(stride) {
        init.means.extend_from_slice(&p);
        // Kept points stand for `stride` pixels: their footprint grows by sqrt(stride).
        init.log_scales
            .extend_from_slice(&[(s * (stride as f32).sqrt()).ln(); 3]);
        init.quats.extend_from_slice(&[1.0, 0.0, 0.0, 0.0]);
        init.opacity_logits.push(opacity_logit);
        let start = init.sh.len();
        init.sh.resize(start + k, 0.0);
        for (ch, &v) in c.iter().enumerate() {
            init.sh[start + ch] = ((v as f64 / 255.0 - 0.5) / SH_C0) as f32;
        }
    }
    init
}

/// A COLMAP text model of `views` in `dir/sparse/0`, with the images linked (or copied) into
/// `dir/images`, so COLMAP-reading tools (gsplat, `rust3r train`) open `dir` directly.
fn write_colmap(dir: &Path, views: &[SceneView]) -> Result<(), PipelineError> {
    let images = dir.join("images");
    std::fs::create_dir_all(&images).map_err(io_err(&images))?;
    for v in views {
        let dst = images.join(&v.name);
        if dst.exists() {
            continue;
        }
        if std::fs::hard_link(&v.image_path, &dst).is_err() {
            std::fs::copy(&v.image_path, &dst).map_err(io_err(&dst))?;
        }
    }
    let named: Vec<SceneView> = views
        .iter()
        .map(|v| SceneView {
            image_path: images.join(&v.name),
            ..v.clone()
        })
        .collect();
    let model = dir.join("sparse").join("0");
    std::fs::create_dir_all(&model).map_err(io_err(&model))?;
    rust3r_io::scene::write_colmap_text(&model, &named, None)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 4x2 pointmap at 2 m with confidences `conf` (2 observations fused).
    fn pointmap(conf: [f32; 8], z: [f32; 8]) -> rust3r_slam::Pointmap {
        rust3r_slam::Pointmap {
            width: 4,
            height: 2,
            points: z.iter().map(|&z| [0.1, -0.1, z]).collect(),
            conf: conf.to_vec(),
            colors: vec![[0; 3]; 8],
        }
    }

    fn view(width: u32, height: u32, f: f64, c: (f64, f64)) -> PinholeCamera {
        PinholeCamera::new(f, f, c.0, c.1, width, height)
    }

    #[test]
    fn pointmap_weights_follow_the_fused_confidence() {
        // Pixel 2 has no point (confidence 0), pixel 5 a point behind the camera.
        let conf = [2.0, 4.0, 0.0, 8.0, 3.0, 6.0, 10.0, 20.0];
        let z = [2.0, 2.0, 2.0, 2.0, 2.0, -1.0, 2.0, 2.0];
        let (d, c) = pointmap_depth(&pointmap(conf, z), 2, 1.5);
        let depth: Vec<f32> = d.pixels().map(|p| p.0[0]).collect();
        let weight: Vec<f32> = c.pixels().map(|p| p.0[0]).collect();
        assert_eq!(depth, [3.0, 3.0, 0.0, 3.0, 3.0, 0.0, 3.0, 3.0]);
        assert_eq!(weight, [1.0, 2.0, 0.0, 4.0, 1.5, 0.0, 5.0, 10.0]);

        // Carried into a view of the same camera: the same images.
        let k = PinholeCamera::new(4.0, 4.0, 1.5, 0.5, 4, 2);
        let (dv, wv) = depth_to_view_weighted(&d, &c, &k, &view(4, 2, 4.0, (1.5, 0.5)));
        assert_eq!((dv, wv), (depth.clone(), weight.clone()));
        assert_eq!(depth_to_view(&d, &k, &view(4, 2, 4.0, (1.5, 0.5))), depth);

        // Into a 2x1 view at half the focal length: pixels (0,0),(1,0),(0,1),(1,1) land in view
        // pixel 0, (2,0),(3,0),(2,1),(3,1) in view pixel 1 (u = (x − 1.5)/2 + 0.5, v = (y − 0.5)/2,
        // rounded). Weights average over the pixels whose depth is averaged (not the empty ones),
        // so the more confident pixels give the higher weight.
        let (dv, wv) = depth_to_view_weighted(&d, &c, &k, &view(2, 1, 2.0, (0.5, 0.0)));
        assert_eq!(dv, [3.0, 3.0]);
        let want = [(1.0 + 2.0 + 1.5) / 3.0, (4.0 + 5.0 + 10.0) / 3.0];
        assert!(
            wv.len() == 2 && (0..2).all(|i| (wv[i] as f64 - want[i]).abs() < 1e-6),
            "{wv:?} vs {want:?}"
        );
    }

    #[test]
    fn pointmap_weights_are_zero_where_depths_disagree() {
        // The right half of the 4x2 map has depths 10% apart (an edge): that view pixel keeps
        // neither depth nor weight, however confident its pixels.
        let conf = [2.0, 2.0, 9.0, 9.0, 2.0, 2.0, 9.0, 9.0];
        let z = [2.0, 2.0, 2.0, 2.2, 2.0, 2.0, 2.0, 2.0];
        let (d, c) = pointmap_depth(&pointmap(conf, z), 1, 1.0);
        let k = PinholeCamera::new(4.0, 4.0, 1.5, 0.5, 4, 2);
        let (dv, wv) = depth_to_view_weighted(&d, &c, &k, &view(2, 1, 2.0, (0.5, 0.0)));
        assert_eq!((dv, wv), (vec![2.0, 0.0], vec![2.0, 0.0]));
    }
}
