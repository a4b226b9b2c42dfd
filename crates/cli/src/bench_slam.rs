//! `rust3r bench slam-mono`: the monocular (MASt3R) SLAM system end to end, without the released
//! weights. The network (random weights of the released architecture, or a given checkpoint)
//! encodes every frame, decodes every pair and feeds learned retrieval (a random head and codebook
//! of the released shape, or given files), so its cost is paid as in a real run; the pointmaps
//! the tracker, the back end and loop closure work on are made from the sequence's depth and
//! ground truth (`rust3r_slam::depth_pairs`), with optional per-frame scale error and depth noise,
//! so tracking succeeds as it would with trained weights. The sequence is played forwards and
//! backwards (`PingPong`) to any length: every return is a loop, and long runs show whether memory
//! grows with keyframes only.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result, bail, ensure};
use clap::Args;
use rust3r_io::datasets::{self, Dataset};
use rust3r_mast3r::frontend::Mast3rMonoFrontEnd;
use rust3r_mast3r::retrieval::{AsmkParams, Codebook, NFeat, RetrievalDatabase, RetrievalHead};
use rust3r_mast3r::{Mast3r, Mast3rConfig};
use rust3r_slam::depth_pairs::{DepthNoise, DepthPairs, PingPong};
use rust3r_slam::trajectory::Trajectory;
use rust3r_slam::{Align, AteOptions, FrameSource, SlamConfig, ate_from_trajectories, output};

use crate::DeviceArgs;

#[derive(Args)]
pub struct SlamMonoArgs {
    /// An RGB-D sequence with ground truth (7-Scenes, TUM): its depth and poses make the pointmaps.
    data: PathBuf,
    /// Frames to run; the sequence is played forwards and backwards to reach it.
    #[arg(long, default_value_t = 500)]
    frames: usize,
    /// Take every n-th frame of the sequence.
    #[arg(long, default_value_t = 1)]
    stride: usize,
    /// Play only the sequence's first this many frames forwards and backwards (default: all).
    #[arg(long)]
    span: Option<usize>,
    /// Network architecture with random weights: full (the released ViT-L/ViT-B), tiny (the
    /// parity fixture's) or none (no network: the depth pairs alone, loop candidates by pose
    /// proximity). Ignored with --checkpoint.
    #[arg(long, default_value = "full")]
    size: String,
    /// A MASt3R checkpoint instead of random weights.
    #[arg(long)]
    checkpoint: Option<PathBuf>,
    /// The network's precision: f32 (TF32 matrix products on CUDA) or f16 (as `rust3r slam
    /// --precision`).
    #[arg(long, default_value = "f32")]
    precision: String,
    /// Network input size (long side, as MASt3R-SLAM's 512).
    #[arg(long, default_value_t = 512)]
    net_size: usize,
    /// Long side of the depth-made pointmaps (default: --net-size).
    #[arg(long)]
    pairs_size: Option<usize>,
    /// A retrieval checkpoint (and its codebook next to it) instead of the random head.
    #[arg(long)]
    retrieval: Option<PathBuf>,
    /// Words of the random codebook (the released one has 65536); 0 turns learned retrieval
    /// off (loop candidates by pose proximity).
    #[arg(long, default_value_t = 65536)]
    words: usize,
    /// Standard deviation of the log of each frame's scale error.
    #[arg(long, default_value_t = 0.0)]
    scale_sigma: f64,
    /// Standard deviation of the per-pixel multiplicative depth noise.
    #[arg(long, default_value_t = 0.0)]
    depth_sigma: f64,
    /// Standard deviation of the log of each predicted view's focal-length error.
    #[arg(long, default_value_t = 0.0)]
    focal_sigma: f64,
    /// The network only encodes (retrieval features) and skips the pair decoding whose output
    /// the depth pairs replace (accuracy runs on a CPU; not for throughput).
    #[arg(long)]
    encode_only: bool,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// A SLAM configuration YAML (MASt3R-SLAM's keys) over MASt3R-SLAM's base configuration.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Track the pairs with the GPU kernels (matching, descriptor refinement and the normal
    /// equations; `rust3r_slam::kernels::track_pair_gpu`) instead of the CPU.
    #[arg(long)]
    gpu_tracking: bool,
    /// With --gpu-tracking: read the network's descriptors back and upload the pairs' per pair
    /// (as before they stayed on the device), to compare.
    #[arg(long)]
    host_descriptors: bool,
    /// Timing mode: track on the network's own pair outputs (no depth pairs; needs a network),
    /// with every frame counted as tracked and a keyframe every this many frames
    /// (`forced_keyframe_every`: random weights cannot be tracked), no occlusion check
    /// (`matching.dist_thresh`) and every converged match used (`tracking.q_conf` and
    /// `tracking.min_match_frac` 0), so the run pays what a real one would; the trajectory and
    /// ATE mean nothing.
    #[arg(long)]
    timing: Option<usize>,
    /// Read the frames and make the network's input on the tracking thread (as before frames
    /// were prepared ahead on a loader thread: `FrameSource::Pipelined`), to compare.
    #[arg(long)]
    inline_frames: bool,
    /// Print frames per second, keyframes and memory every this many frames.
    #[arg(long, default_value_t = 500)]
    report_every: usize,
    /// Write the tracked frames' poses here (TUM), and the ground truth beside it
    /// (`<file>.gt.txt`).
    #[arg(long)]
    trajectory: Option<PathBuf>,
    /// Write the results as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    #[command(flatten)]
    device: DeviceArgs,
}

/// Resident and peak resident memory of this process in MiB (Linux; zeros elsewhere).
fn rss_mib() -> (f64, f64) {
    let Ok(s) = std::fs::read_to_string("/proc/self/status") else {
        return (0.0, 0.0);
    };
    let field = |name: &str| {
        s.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<f64>().ok())
            .map_or(0.0, |kb| kb / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

pub fn slam_mono(a: &SlamMonoArgs) -> Result<()> {
    ensure!(a.frames >= 2, "--frames must be at least 2");
    let (device, name) = crate::mast3r_cmd::burn_device(&a.device)?;
    let precision = crate::mast3r_cmd::precision(&a.precision, &device)?;
    let t = Instant::now();
    let (model, arch) = match &a.checkpoint {
        None if a.size == "none" => {
            return run(a, None, name, "no network".into(), None);
        }
        Some(p) => (
            Mast3r::load(p, &device, precision)
                .with_context(|| format!("--checkpoint {}", p.display()))?,
            p.display().to_string(),
        ),
        None => {
            let cfg = match a.size.as_str() {
                "full" => Mast3rConfig::released(),
                "tiny" => Mast3rConfig::tiny_fixture(),
                other => bail!("--size {other}: expected full, tiny or none"),
            };
            (
                Mast3r::random(&cfg, &device, precision, a.seed),
                format!("{} architecture, random weights", a.size),
            )
        }
    };
    let enc_dim = model.config().enc_embed_dim;
    let mut front = Mast3rMonoFrontEnd::new(model, a.net_size).map_err(anyhow::Error::msg)?;
    if a.host_descriptors {
        front = front.descriptors_on_host();
    }
    let retrieval = match (&a.retrieval, a.words) {
        (Some(r), _) => Some((
            RetrievalDatabase::load(r, None, AsmkParams::default())
                .with_context(|| format!("--retrieval {}", r.display()))?,
            r.display().to_string(),
        )),
        (None, 0) => None,
        (None, words) => {
            // The released head's shape: 1024-wide features, 300 per image.
            let dim = 1024;
            let head = RetrievalHead::random(enc_dim, dim, NFeat::Count(300), a.seed);
            let codebook = Codebook::random(words, dim, a.seed ^ 0xC0DE)?;
            Some((
                RetrievalDatabase::new(head, codebook, AsmkParams::default())?,
                format!("random head, {words}-word codebook"),
            ))
        }
    };
    let retrieval_name = retrieval.as_ref().map(|r| r.1.clone());
    if let Some((db, _)) = retrieval {
        front = front.with_retrieval(db).map_err(anyhow::Error::msg)?;
    }
    eprintln!("set-up {:.1} s", t.elapsed().as_secs_f64());
    run(a, Some(Box::new(front)), name, arch, retrieval_name)
}

fn run(
    a: &SlamMonoArgs,
    front: Option<Box<dyn rust3r_slam::PointmapFrontEnd>>,
    name: String,
    arch: String,
    retrieval_name: Option<String>,
) -> Result<()> {
    let inner = datasets::open(&a.data, None, 1)?;
    let depth_k = inner
        .depth_intrinsics()
        .with_context(|| format!("{}: no depth images", a.data.display()))?;
    let span = a.span.unwrap_or(inner.len());
    let ds = PingPong::within(inner, span, a.stride, a.frames)?;
    let gt = ds
        .ground_truth()
        .with_context(|| format!("{}: no ground truth", a.data.display()))?;
    // The network's image: the long side at --net-size, MASt3R-SLAM's 4:3 frames -> 512x384.
    let (dw, dh) = (depth_k.width as usize, depth_k.height as usize);
    let long = a.pairs_size.unwrap_or(a.net_size);
    let (w, h) = if dw >= dh {
        (long, long * dh / dw / 16 * 16)
    } else {
        (long * dw / dh / 16 * 16, long)
    };
    let noise = DepthNoise {
        scale_sigma: a.scale_sigma,
        depth_sigma: a.depth_sigma,
        focal_sigma: a.focal_sigma,
        seed: a.seed,
    };
    let mut cfg = SlamConfig::default();
    if a.timing.is_some() {
        // Random weights: no occlusion check and every valid match takes part, so the
        // Gauss-Newton iterations run (a YAML given with --config may set these back).
        cfg.matching.dist_thresh = f64::MAX;
        cfg.tracking.q_conf = 0.0;
        cfg.tracking.min_match_frac = 0.0;
    }
    if let Some(p) = &a.config {
        cfg.apply_yaml_file(p)?;
    }
    // The front end the system runs: the network itself (timing mode) or the depth pairs
    // around it.
    let (mut own, mut pairs): (Box<dyn rust3r_slam::PointmapFrontEnd>, DepthPairs);
    let front: &mut dyn rust3r_slam::PointmapFrontEnd = match a.timing {
        Some(k) => {
            ensure!(k >= 1, "--timing must be at least 1");
            ensure!(
                !a.encode_only,
                "--timing tracks on the network's pairs: drop --encode-only"
            );
            own =
                front.context("--timing needs a network (--size full or tiny, or --checkpoint)")?;
            cfg.forced_keyframe_every = k;
            own.as_mut()
        }
        None => {
            pairs = DepthPairs::new(front, depth_k, w, h, noise)?;
            if a.encode_only {
                pairs = pairs.inner_encode_only();
            }
            if a.host_descriptors {
                pairs = pairs.descriptors_on_host();
            }
            &mut pairs
        }
    };
    eprintln!(
        "{}: {} frames ({}), network {arch} on {name}, pointmaps {}, retrieval: {}",
        a.data.display(),
        a.frames,
        ds.name(),
        match a.timing {
            Some(k) => format!("the network's (timing mode, a keyframe every {k} frames)"),
            None => format!("{w}x{h} from depth"),
        },
        retrieval_name.as_deref().unwrap_or("off (pose proximity)"),
    );
    let gpu = if a.gpu_tracking {
        Some(a.device.open()?)
    } else {
        None
    };
    if let Some(path) = &a.trajectory {
        // Written before the run: the data set moves to the frame loader thread.
        output::write_ground_truth(&path.with_extension("gt.txt"), &ds)?;
    }
    let source = if a.inline_frames {
        FrameSource::Inline {
            dataset: &ds,
            front,
        }
    } else {
        // One handle on the sequence per loader thread.
        let mut datasets: Vec<Box<dyn Dataset>> = vec![Box::new(ds)];
        for _ in 1..FrameSource::default_loaders() {
            let inner = datasets::open(&a.data, None, 1)?;
            datasets.push(Box::new(PingPong::within(inner, span, a.stride, a.frames)?));
        }
        FrameSource::Pipelined {
            datasets,
            front,
            ahead: 4,
        }
    };
    let start = Instant::now();
    let mut last = (Instant::now(), 0usize);
    let mut reports = Vec::new();
    let every = a.report_every.max(1);
    // Steady state: from the end of the second frame (the first two record the network) to
    // the end of the last.
    let (mut second, mut last_frame) = (None, None);
    let result = rust3r_slam::run_slam_source(source, &cfg, None, gpu.as_ref(), |p| {
        if p.frame == 2 {
            second = Some(Instant::now());
        }
        last_frame = Some(Instant::now());
        if p.frame % every == 0 || p.frame == a.frames {
            let dt = last.0.elapsed().as_secs_f64();
            let fps = (p.frame - last.1) as f64 / dt.max(1e-9);
            let (rss, peak) = rss_mib();
            eprintln!(
                "frame {}: {fps:.1} FPS since the last report, {} keyframes, {}, RSS {rss:.0} MiB (peak {peak:.0})",
                p.frame, p.keyframes, p.state
            );
            reports.push(serde_json::json!({
                "frame": p.frame, "fps": fps, "keyframes": p.keyframes,
                "rss_mib": rss, "peak_rss_mib": peak,
            }));
            last = (Instant::now(), p.frame);
        }
    })?;
    let secs = start.elapsed().as_secs_f64();
    let steady_fps = match (second, last_frame) {
        (Some(s), Some(l)) if result.frames.len() > 2 && l > s => {
            Some((result.frames.len() - 2) as f64 / (l - s).as_secs_f64())
        }
        _ => None,
    };
    let est: Vec<_> = result
        .frame_poses()
        .into_iter()
        .zip(&result.frames)
        .filter(|(_, f)| f.tracked)
        .map(|(p, _)| p)
        .collect();
    if let Some(path) = &a.trajectory {
        output::write_tum_poses(path, &est)?;
    }
    let ate = ate_from_trajectories(
        &Trajectory::from_sim3(&est),
        &Trajectory::from_matrices(&gt),
        &AteOptions {
            align: Align::Sim3,
            ..Default::default()
        },
    )
    .ok();
    let tm = &result.timings;
    let lost = result.frames.iter().filter(|f| !f.tracked).count();
    if let Some(f) = steady_fps {
        println!(
            "steady state (frames 3-{}): {f:.1} FPS (the first two frames record the network)",
            result.frames.len()
        );
    }
    println!(
        "{} frames in {secs:.1} s: {:.1} FPS; {} keyframes, {} loop closures, {} relocalisations, {lost} frames without a pose; ATE Sim(3) {}",
        result.frames.len(),
        result.frames.len() as f64 / secs,
        result.keyframes.frames.len(),
        result.loop_closures,
        result.relocalisations,
        ate.as_ref()
            .map_or("n/a".into(), |r| format!("{:.2} cm", r.rmse * 100.0))
    );
    println!(
        "keyframe store: {:.1} MiB at its largest ({:.2} MiB per keyframe)",
        result.keyframe_bytes as f64 / (1 << 20) as f64,
        result.keyframe_bytes as f64
            / (1 << 20) as f64
            / result.keyframes.frames.len().max(1) as f64
    );
    println!(
        "time: network + depth pairs {:.1} s, tracking {:.1} s (overlapping the next frame's decoding for {:.1} s), mapping {:.1} s, back end {:.1} s (its own thread), waiting for the back end {:.1} s; frames read and prepared {:.1} s (loader thread), waited for {:.1} s",
        tm.load_s,
        tm.track_s,
        tm.overlap_s,
        tm.map_s,
        tm.backend_s,
        tm.backend_wait_s,
        tm.prepare_s,
        tm.wait_frames_s
    );
    if let Some(path) = &a.json {
        let json = serde_json::json!({
            "data": a.data, "frames": result.frames.len(), "seconds": secs,
            "fps": result.frames.len() as f64 / secs, "steady_fps": steady_fps,
            "decode_ahead": cfg.decode_ahead, "encode_ahead": cfg.decode_ahead && cfg.encode_ahead, "precision": a.precision, "device": name,
            "network": arch,
            "image": [w, h], "retrieval": retrieval_name,
            "keyframes": result.keyframes.frames.len(), "loop_closures": result.loop_closures,
            "keyframe_store_peak_bytes": result.keyframe_bytes,
            "relocalisations": result.relocalisations, "frames_without_pose": lost,
            "ate_sim3_m": ate.as_ref().map(|r| r.rmse),
            "timings": {"load_s": tm.load_s, "track_s": tm.track_s,
                "overlap_s": tm.overlap_s, "map_s": tm.map_s,
                "backend_s": tm.backend_s, "backend_wait_s": tm.backend_wait_s,
                "prepare_s": tm.prepare_s, "wait_frames_s": tm.wait_frames_s},
            "inline_frames": a.inline_frames,
            "scale_sigma": a.scale_sigma, "depth_sigma": a.depth_sigma,
            "focal_sigma": a.focal_sigma, "seed": a.seed, "encode_only": a.encode_only,
            "reports": reports,
        });
        let text = serde_json::to_string_pretty(&json)?;
        rust3r_io::atomic::write_atomic_with(path, |w| w.write_all(text.as_bytes()))
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}
