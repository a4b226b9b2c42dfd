//! `rust3r slam`: dense SLAM over a data set folder, writing poses, a point cloud and a
//! nerfstudio export.

use std::path::PathBuf;
use std::time::Instant;

use crate::live::{CameraView, Live, LiveSink};
use anyhow::{Context, Result, bail};
use clap::Args;
use indicatif::ProgressBar;
use rust3r_io::datasets::{self, DatasetKind};
use rust3r_mast3r::frontend::Mast3rMonoFrontEnd;
use rust3r_slam::{
    Align, FrameSource, PointmapFrontEnd, RgbdFrontEnd, SlamConfig, eval_ate, output,
    run_slam_source,
};

use crate::run_cmd::Mode;

/// Where the frames come from and how SLAM tracks them: flags shared by `rust3r slam` and
/// `rust3r run`.
#[derive(Args, Debug)]
pub struct SlamInputArgs {
    /// Front end: rgbd (depth camera) or mono (the MASt3R network on the colour frames,
    /// uncalibrated unless --calib is given; needs --checkpoint).
    #[arg(long, value_enum, default_value_t = Mode::Rgbd)]
    pub mode: Mode,
    /// MASt3R checkpoint (`.pth` or safetensors) for --mode mono.
    #[arg(long)]
    pub checkpoint: Option<PathBuf>,
    /// MASt3R retrieval checkpoint for --mode mono (MASt3R-SLAM's
    /// `..._retrieval_trainingfree.pth`; its ASMK codebook `..._retrieval_codebook.pkl` is read
    /// from the same folder unless --codebook is given): loop closure and relocalisation by
    /// learned retrieval instead of pose proximity.
    #[arg(long)]
    pub retrieval: Option<PathBuf>,
    /// ASMK codebook for --retrieval (default: next to the retrieval checkpoint, as upstream).
    #[arg(long, requires = "retrieval")]
    pub codebook: Option<PathBuf>,
    /// Camera calibration for --mode mono (MASt3R-SLAM's `intrinsics.yaml`: `width`, `height`,
    /// `calibration: [fx, fy, cx, cy(, k1, k2, p1, p2(, k3))]`): frames are undistorted and
    /// tracked with calibrated pixel residuals, still up to scale (Sim(3)).
    #[arg(long)]
    pub calib: Option<PathBuf>,
    /// Data set layout (tum, 7scenes, euroc, eth3d, images); detected when omitted.
    #[arg(long)]
    pub kind: Option<String>,
    /// YAML overrides in MASt3R-SLAM's config layout (sections matching, tracking, local_opt,
    /// retrieval, reloc, rgbd).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// The network's precision with --checkpoint: f32 (on CUDA its matrix products use TF32
    /// unless turned off, as `rust3r mast3r`) or f16 (binary16 weights and activations,
    /// LayerNorm and softmax statistics in binary32).
    #[arg(long, default_value = "f32")]
    pub precision: String,
    /// Run the back end on the tracking thread: bit-identical results run to run.
    #[arg(long)]
    pub single_thread: bool,
    /// Use every N-th frame.
    #[arg(long, default_value_t = 1)]
    pub stride: usize,
    /// Process at most N frames.
    #[arg(long)]
    pub max_frames: Option<usize>,
}

impl SlamInputArgs {
    /// The SLAM configuration (the mode's base, `--config`, `--calib`, `--single-thread`), the
    /// calibration and the data set layout; checks the flags that belong together.
    pub fn setup(
        &self,
    ) -> Result<(
        SlamConfig,
        Option<datasets::SlamCalibration>,
        Option<DatasetKind>,
    )> {
        let mono = self.mode == Mode::Mono;
        if self.calib.is_some() && !mono {
            bail!(
                "--calib is for --mode mono (the rgbd mode takes the depth camera's calibration from the data set)"
            );
        }
        if self.retrieval.is_some() && !mono {
            bail!("--retrieval is for --mode mono (learned retrieval runs on the MASt3R encoder)");
        }
        if mono && self.checkpoint.is_none() {
            bail!(
                "--mode mono needs --checkpoint MODEL.pth (or .safetensors): the released MASt3R weights, see the README's 'MASt3R network'"
            );
        }
        let calib = match &self.calib {
            Some(path) => Some(datasets::SlamCalibration::read(path)?),
            None => None,
        };
        // Mono: MASt3R-SLAM's base configuration (uncalibrated ray + distance residuals, Sim(3));
        // with --calib its calibrated mode (pixel + log-depth residuals, still Sim(3)).
        let mut cfg = match (mono, calib.is_some()) {
            (true, false) => SlamConfig::default(),
            (true, true) => SlamConfig::calib(),
            (false, _) => SlamConfig::rgbd(),
        };
        if let Some(path) = &self.config {
            cfg.apply_yaml_file(path)?;
        }
        if calib.is_some() {
            // As MASt3R-SLAM's main.py: --calib turns the calibrated residuals on whatever the config.
            cfg.use_calib = true;
        }
        if self.single_thread {
            cfg.single_thread = true;
        }
        let kind = match &self.kind {
            Some(k) => Some(k.parse::<DatasetKind>().map_err(|e| anyhow::anyhow!(e))?),
            None => None,
        };
        Ok((cfg, calib, kind))
    }

    /// The MASt3R front end of `--mode mono` (None in the rgbd mode), loaded before anything
    /// runs so that a bad checkpoint stops at once.
    pub fn network(
        &self,
        device: &crate::DeviceArgs,
        calib: Option<datasets::SlamCalibration>,
    ) -> Result<Option<Mast3rMonoFrontEnd>> {
        let (Some(ckpt), Mode::Mono) = (&self.checkpoint, self.mode) else {
            return Ok(None);
        };
        let (device, _) = crate::mast3r_cmd::burn_device(device)?;
        let precision = crate::mast3r_cmd::precision(&self.precision, &device)?;
        let model = rust3r_mast3r::Mast3r::load(ckpt, &device, precision).with_context(|| {
            format!(
                "--checkpoint {}: cannot load a MASt3R network from it",
                ckpt.display()
            )
        })?;
        let mut front = Mast3rMonoFrontEnd::new(model, 512).map_err(anyhow::Error::msg)?;
        if let Some(r) = &self.retrieval {
            let db = rust3r_mast3r::retrieval::RetrievalDatabase::load(
                r,
                self.codebook.as_deref(),
                rust3r_mast3r::retrieval::AsmkParams::default(),
            )
            .with_context(|| format!("--retrieval {}", r.display()))?;
            front = front
                .with_retrieval(db)
                .map_err(|e| anyhow::anyhow!("--retrieval {}: {e}", r.display()))?;
        }
        if let Some(c) = calib {
            let path = c.path.clone();
            front = front
                .with_calibration(c)
                .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        }
        Ok(Some(front))
    }
}

/// Arguments of `rust3r slam`.
#[derive(Args, Debug)]
pub struct SlamArgs {
    /// Data set folder (TUM RGB-D, 7-Scenes sequence, ETH3D, ...).
    pub dataset: PathBuf,
    /// Output folder.
    #[arg(long)]
    pub out: PathBuf,
    #[command(flatten)]
    pub input: SlamInputArgs,
    /// Hide the progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// Track frames with the GPU kernels (matching and reductions); the back end stays on
    /// the CPU.
    #[arg(long)]
    pub gpu: bool,
    /// Live view in a rerun viewer: current camera and frame, keyframe pointmaps, camera
    /// trajectory and back-end graph edges (needs a build with the `rerun` feature).
    #[arg(long)]
    pub rerun: bool,
    /// Record the live view to this `.rrd` file instead (open it with `rerun FILE`).
    #[arg(long)]
    pub rerun_save: Option<PathBuf>,
    #[command(flatten)]
    pub live: crate::view_cmd::LiveFlags,
    #[command(flatten)]
    pub device: crate::DeviceArgs,
}

pub fn run(args: &SlamArgs) -> Result<()> {
    let a = &args.input;
    let (cfg, calib, kind) = a.setup()?;
    // The calibration replaces the data set's own (the export's camera; a first image of another
    // size is refused here, later ones by the front end).
    let open_options = datasets::OpenOptions {
        kind,
        stride: a.stride,
        calibration: calib.as_ref().map(|c| c.intrinsics),
        video: args.device.tuning()?.video,
    };
    let dataset = match &calib {
        Some(c) => datasets::open_with(&args.dataset, &open_options)
            .with_context(|| format!("with --calib {}", c.path.display()))?,
        None => datasets::open_with(&args.dataset, &open_options)?,
    };
    let mut mono_front = None;
    let mut loaders: Vec<(Box<dyn datasets::Dataset>, Box<dyn PointmapFrontEnd>)> = Vec::new();
    let (n_loaders, live_camera) = if let Some(front) = a.network(&args.device, calib)? {
        // Uncalibrated: the live view draws a nominal 512x384 frustum.
        let nominal = rust3r_geometry::PinholeCamera::new(512.0, 512.0, 256.0, 192.0, 512, 384);
        let camera = front.camera().unwrap_or(nominal);
        mono_front = Some(front);
        (FrameSource::default_loaders(), camera)
    } else {
        let depth_k = dataset.depth_intrinsics().with_context(|| {
            format!(
                "{}: the rgbd mode needs depth images, and this data set has none",
                args.dataset.display()
            )
        })?;
        let front = RgbdFrontEnd::new(
            depth_k,
            cfg.rgbd.downsample,
            cfg.rgbd.min_depth,
            cfg.rgbd.max_depth,
        );
        // Frames are decoded and turned into pointmaps on loader threads (each with its own handle
        // on the data set), a few frames ahead of tracking.
        let n_loaders = FrameSource::default_loaders();
        for _ in 0..n_loaders {
            loaders.push((
                datasets::open(&args.dataset, kind, a.stride)?,
                Box::new(front.clone()),
            ));
        }
        let camera = front
            .camera()
            .context("the rgbd front end has a calibrated camera")?;
        (n_loaders, camera)
    };
    let total = a.max_frames.map_or(dataset.len(), |m| m.min(dataset.len()));

    let bar = if args.quiet {
        ProgressBar::hidden()
    } else {
        crate::progress::bar(total as u64)
    };
    bar.set_style(crate::progress::style("{bar:30} frame {pos}/{len} {msg}").progress_chars("=> "));
    let gpu = if args.gpu {
        Some(args.device.open()?)
    } else {
        None
    };
    // The page renders the map on the GPU even when tracking runs on the CPU.
    let mut view = match (&gpu, args.live.view) {
        (Some(g), _) => args
            .live
            .start(g, &format!("rust3r slam {}", args.dataset.display()))?,
        (None, true) => args.live.start(
            &args.device.open()?,
            &format!("rust3r slam {}", args.dataset.display()),
        )?,
        (None, false) => None,
    };
    if let Some(v) = view.as_mut() {
        v.set_slam_camera(live_camera);
    }
    let start = Instant::now();
    // The network runs on the tracking thread (one model on the GPU; the pair (frame, keyframe)
    // it decodes depends on the keyframe, known only there), its input is made ahead on
    // loader threads, each with its own handle on the data set; RGB-D frames on loaders.
    let source = match mono_front.as_mut() {
        Some(front) => FrameSource::Pipelined {
            datasets: (0..n_loaders)
                .map(|_| datasets::open_with(&args.dataset, &open_options))
                .collect::<Result<_, _>>()?,
            front,
            ahead: 4,
        },
        None => FrameSource::Prefetch {
            loaders,
            ahead: 4 * n_loaders,
        },
    };
    let live = LiveSink::from_flags(args.rerun, args.rerun_save.as_ref())
        .map(|s| Live::open("rust3r slam", &s))
        .transpose()?;
    let mut rerun_view = live.as_ref().map(|l| SlamView::new(l, &live_camera));
    let mut live_err: Option<anyhow::Error> = None;
    let result = run_slam_source(source, &cfg, a.max_frames, gpu.as_ref(), |p| {
        if let Some(v) = rerun_view.as_mut()
            && live_err.is_none()
            && let Err(e) = v.log(p)
        {
            live_err = Some(e);
        }
        if let Some(v) = view.as_mut() {
            v.slam_progress(p);
        }
        let fps = p.frame as f64 / start.elapsed().as_secs_f64().max(1e-9);
        bar.set_position(p.frame as u64);
        bar.set_message(format!(
            "{fps:.1} FPS, {} keyframes, {}",
            p.keyframes, p.state
        ));
    })?;
    bar.finish_and_clear();
    let secs = start.elapsed().as_secs_f64();
    if let Some(v) = view.as_mut() {
        v.end_slam();
        v.message("SLAM finished");
    }
    if let Some(e) = live_err {
        eprintln!("warning: live view stopped: {e:#}");
    }
    if let Some(l) = &live {
        l.flush();
    }
    let files = output::write_outputs(
        &result,
        dataset.as_ref(),
        &args.out,
        cfg.rgbd.export_conf as f32,
    )?;
    let lost = result.frames.iter().filter(|f| !f.tracked).count();
    let weak = result.frames.iter().filter(|f| f.weak).count();
    let loops = result.edges.iter().filter(|e| e.j > e.i + 1).count();
    println!(
        "{} frames in {secs:.1} s ({:.2} FPS), {} keyframes, {} edges ({loops} loop or relocalisation edges), {} back-end runs, {lost} frames lost, {weak} flagged as poorly constrained",
        result.frames.len(),
        result.frames.len() as f64 / secs,
        result.keyframes.len(),
        result.edges.len(),
        result.backend_runs,
    );
    let t = &result.timings;
    println!(
        "time: tracking {:.1} s, mapping {:.1} s, back end {:.1} s{}, waiting for frames {:.1} s / for the back end {:.1} s, decoding {:.1} s{} ({n_loaders} loader thread{})",
        t.track_s,
        t.map_s,
        t.backend_s,
        if cfg.single_thread {
            " (inline)"
        } else {
            " (own thread)"
        },
        t.wait_frames_s,
        t.backend_wait_s,
        t.load_s,
        if t.prepare_s > 0.0 {
            format!(" + frames read and prepared ahead {:.1} s", t.prepare_s)
        } else {
            String::new()
        },
        if n_loaders == 1 { "" } else { "s" },
    );
    if args.input.retrieval.is_some() || result.relocalisations > 0 || lost > 0 {
        println!(
            "{} relocalisations, {} loop closures by learned retrieval; {lost} frames lost before relocalising have no pose in the trajectory",
            result.relocalisations, result.loop_closures
        );
    }
    if result.pair_frames > 0 {
        println!(
            "pair tracking: {} frames tracked on network pairs with their keyframe, {} matches moved by descriptor refinement",
            result.pair_frames, result.refined_matches
        );
    }
    println!(
        "keyframe memory: {:.1} MiB ({:.2} MiB per keyframe)",
        result.keyframe_bytes as f64 / (1 << 20) as f64,
        result.keyframe_bytes as f64 / (1 << 20) as f64 / result.keyframes.len().max(1) as f64
    );
    println!(
        "wrote {} ({} points), {}, {}",
        files.pointcloud.display(),
        files.num_points,
        files.trajectory.display(),
        files.transforms.display()
    );
    if let Some(gt) = &files.groundtruth {
        // The outputs are written; a trajectory too short or degenerate to align only loses the ATE.
        for align in [Align::Se3, Align::Sim3] {
            match eval_ate(&files.trajectory, gt, align) {
                Ok(report) => println!("ATE RMSE ({align}): {:.6} m", report.rmse),
                Err(e) => println!("ATE ({align}): not computed: {e}"),
            }
        }
    }
    Ok(())
}

/// Live view of a SLAM run: the current camera (pose, pinhole, every 5th colour frame), the
/// trajectory so far, each keyframe's pointmap under its pose (re-posed when the back end moves
/// keyframes) and the graph edges between keyframe centres.
struct SlamView<'a> {
    live: &'a Live,
    camera: rust3r_geometry::PinholeCamera,
    trajectory: Vec<[f32; 3]>,
    /// Colour image size over the pointmap size (the pinhole is logged at the image's size).
    image_scale: f64,
}

fn camera_view(pose: &rust3r_geometry::Sim3, k: &rust3r_geometry::PinholeCamera) -> CameraView {
    let r = pose.rotation.to_rotation_matrix();
    let m = r.matrix();
    CameraView {
        translation: [
            pose.translation.x as f32,
            pose.translation.y as f32,
            pose.translation.z as f32,
        ],
        rotation: std::array::from_fn(|i| std::array::from_fn(|j| m[(i, j)] as f32)),
        camera: *k,
    }
}

impl<'a> SlamView<'a> {
    fn new(live: &'a Live, camera: &rust3r_geometry::PinholeCamera) -> Self {
        Self {
            live,
            camera: *camera,
            trajectory: Vec::new(),
            image_scale: 1.0,
        }
    }

    /// The pointmap camera scaled to the colour image's size.
    fn image_camera(&self) -> rust3r_geometry::PinholeCamera {
        let (c, sc) = (&self.camera, self.image_scale);
        rust3r_geometry::PinholeCamera {
            fx: c.fx * sc,
            fy: c.fy * sc,
            cx: c.cx * sc,
            cy: c.cy * sc,
            width: (c.width as f64 * sc).round() as u32,
            height: (c.height as f64 * sc).round() as u32,
            ..*c
        }
    }

    fn log(&mut self, p: &rust3r_slam::Progress) -> Result<()> {
        let l = self.live;
        l.at("frame", p.frame as u64);
        let image = if p.frame % 5 == 1 {
            let img = image::open(&p.rgb_path)
                .with_context(|| format!("cannot read {}", p.rgb_path.display()))?
                .to_rgb8();
            self.image_scale = img.width() as f64 / self.camera.width.max(1) as f64;
            Some(img)
        } else {
            None
        };
        l.camera("world/camera", &camera_view(&p.pose, &self.image_camera()))?;
        let t = &p.pose.translation;
        self.trajectory.push([t.x as f32, t.y as f32, t.z as f32]);
        if let Some(img) = image {
            l.image_rgb(
                "world/camera/image",
                img.as_raw(),
                img.width(),
                img.height(),
            )?;
            l.lines("world/trajectory", std::slice::from_ref(&self.trajectory))?;
        }
        if let Some((k, pm)) = &p.new_keyframe {
            let (mut pts, mut cols) = (Vec::new(), Vec::new());
            for i in (0..pm.len()).step_by(2) {
                if pm.conf[i] > 0.0 {
                    pts.push(pm.points[i]);
                    cols.push(pm.colors[i]);
                }
            }
            l.points(&format!("world/keyframes/{k}/points"), &pts, &cols)?;
        }
        if let Some((poses, edges)) = &p.graph {
            for (k, pose) in poses.iter().enumerate() {
                let mut v = camera_view(pose, &self.camera);
                // Keyframe frusta drawn small: only the transform matters for the points.
                v.camera.fx *= 0.5;
                v.camera.fy *= 0.5;
                l.camera(&format!("world/keyframes/{k}"), &v)?;
            }
            let centre = |k: usize| {
                let t = &poses[k].translation;
                [t.x as f32, t.y as f32, t.z as f32]
            };
            let strips: Vec<Vec<[f32; 3]>> = edges
                .iter()
                .filter(|e| e.0 < poses.len() && e.1 < poses.len())
                .map(|e| vec![centre(e.0), centre(e.1)])
                .collect();
            l.lines("world/graph", &strips)?;
        }
        Ok(())
    }
}
