//! Capture to splat with frames held out before SLAM (`RunOptions::hold_out`) on a short real
//! clip (7-Scenes redkitchen, ../shared/data/redkitchen, the first 40 frames, 80x60 training
//! images), sequential and `--online`: frames 10 and 30 never reach SLAM or the outputs, and are
//! scored at poses interpolated between their neighbours'; both runs write every output.

use std::path::{Path, PathBuf};

use rust3r_gpu::{Gpu, GpuOptions};
use rust3r_pipelines::{EvalRecord, RunEvent, RunOptions, RunSummary, run_capture};

fn kitchen() -> PathBuf {
    rust3r_testdata::data("redkitchen")
}

fn options(out: &Path) -> RunOptions {
    let mut opts = RunOptions::new(&kitchen(), out);
    opts.max_frames = Some(40);
    opts.hold_out = 20;
    opts.slam.single_thread = true;
    opts.train.steps = 200;
    opts.train.downscale = 8;
    opts.train.sh_degree = 1;
    opts.train.init_count = 4000;
    opts.refine.pose_start = 100;
    opts
}

/// The timestamps (TUM) of a trajectory file.
fn stamps(path: &Path) -> Vec<f64> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| l.split_whitespace().next().unwrap().parse().unwrap())
        .collect()
}

/// Checks the outputs of a hold-out run in `dir`; returns the held-out PSNR.
fn check_outputs(dir: &Path, s: &RunSummary) -> f64 {
    assert_eq!(s.held_out, 2);
    assert_eq!(s.frames, 38, "SLAM never sees frames 10 and 30");
    assert_eq!(s.eval_views, 2);
    let data = rust3r_io::datasets::open(&kitchen(), None, 1).unwrap();
    let held: Vec<f64> = [10, 30].map(|i| data.frame(i).unwrap().timestamp).to_vec();
    let traj = stamps(&dir.join("trajectory.txt"));
    assert_eq!(traj.len(), 38, "a pose for every frame SLAM saw");
    for t in &held {
        assert!(
            traj.iter().all(|s| (s - t).abs() > 1e-6),
            "held-out frame at {t} in the trajectory"
        );
    }
    let views = rust3r_io::scene::open_scene(&dir.join("transforms.json"), &Default::default())
        .unwrap()
        .views;
    assert_eq!(views.len(), 38);
    assert!(
        views
            .iter()
            .all(|v| !v.name.contains("000010") && !v.name.contains("000030")),
        "held-out frames absent from transforms.json"
    );
    let records: Vec<EvalRecord> =
        serde_json::from_slice(&std::fs::read(dir.join("eval.json")).unwrap()).unwrap();
    let last = records.last().unwrap();
    let names: Vec<&str> = last.views.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(
        names[0].contains("000010") && names[1].contains("000030"),
        "{names:?}"
    );
    for v in &last.views {
        assert!(v.psnr.is_finite() && v.ssim.is_finite(), "{v:?}");
    }
    let renders = std::fs::read_dir(dir.join("renders")).unwrap().count();
    assert_eq!(renders, 2, "both held-out frames rendered");
    assert_eq!(s.last_eval.as_ref(), Some(last));
    last.psnr
}

#[test]
fn held_out_frames_are_scored_between_their_neighbours_sequential_and_online() {
    let gpu = Gpu::new(&GpuOptions::default()).expect("a GPU adapter is required");
    let dir = tempfile::tempdir().unwrap();
    let mut results = Vec::new();
    for online in [false, true] {
        let out = dir.path().join(if online { "online" } else { "seq" });
        let mut opts = options(&out);
        opts.online = online;
        let (mut online_events, mut last_step) = (0usize, 0u64);
        let t0 = std::time::Instant::now();
        let s = run_capture(&opts, &gpu, &mut |e| {
            if let RunEvent::Online { step, .. } = e {
                online_events += 1;
                last_step = step;
            }
        })
        .unwrap();
        let wall = t0.elapsed().as_secs_f64();
        for f in [
            "splats.ply",
            "trajectory.txt",
            "keyframes.txt",
            "pointcloud.ply",
            "transforms.json",
            "groundtruth.txt",
            "colmap/sparse/0/images.txt",
            "colmap/sparse/0/cameras.txt",
        ] {
            assert!(out.join(f).is_file(), "{f} missing (online: {online})");
        }
        let psnr = check_outputs(&out, &s);
        let splats = rust3r_io::load_splats(&out.join("splats.ply")).unwrap();
        assert_eq!(splats.len(), s.num_splats);
        if online {
            assert_eq!(online_events, 38, "online progress after every SLAM frame");
            assert!(s.online_views >= 1, "keyframes reached the online trainer");
            assert!(s.online_steps <= 100, "at most half the steps online");
            assert_eq!(last_step.min(s.online_steps), last_step);
        } else {
            assert_eq!((online_events, s.online_steps), (0, 0));
        }
        println!(
            "online {online}: held-out PSNR {psnr:.3} dB, SSIM {:.4}; {} train views, {} online steps on {} views; SLAM {:.1} s, final training {:.1} s, wall {wall:.1} s",
            s.last_eval.as_ref().unwrap().ssim,
            s.train_views,
            s.online_steps,
            s.online_views,
            s.slam_seconds,
            s.train_seconds,
        );
        results.push(psnr);
    }
    // Floors near the measured values (lavapipe, 2026-11-28: 25.06 dB sequential, 23.86 dB online,
    // which starts from one keyframe's 500 points and takes a timing-dependent number of online
    // steps); NaN fails them.
    assert!(results[0] > 24.0, "sequential {}", results[0]);
    assert!(results[1] > 22.5, "online {}", results[1]);
}
