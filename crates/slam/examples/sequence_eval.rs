//! Accuracy aid: runs the RGB-D SLAM on a data set with ground truth and prints the ATE (SE(3)-
//! and Sim(3)-aligned), the relative translation error per 10 frames by 50-frame segment (max
//! and mean), the frames flagged as poorly constrained, and the frame rate.
//!
//! `target/release/examples/sequence_eval DATASET [FRAMES] [config.yaml] [--first N]...`
//! (`--first N`, repeatable: report the ATE over the first N frames too, e.g. the tuning part).
//! `SEQUENCE_EVAL_TRAJECTORY=file` writes the trajectory (TUM), `SEQUENCE_EVAL_KEYFRAMES=file`
//! the keyframes' frame indices and the back-end edges.

use std::path::PathBuf;
use std::time::Instant;

use rust3r_io::datasets;
use rust3r_slam::trajectory::Trajectory;
use rust3r_slam::{
    Align, AteOptions, FrameSource, RgbdFrontEnd, SlamConfig, ate_from_trajectories, output,
    relative_translation_errors, run_slam_source,
};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut pos = Vec::new();
    let mut first = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--first" {
            first.extend(it.next().and_then(|v| v.parse::<usize>().ok()));
        } else {
            pos.push(a.clone());
        }
    }
    let root = PathBuf::from(
        pos.first()
            .cloned()
            .unwrap_or_else(|| "../shared/data/redkitchen".into()),
    );
    let frames: Option<usize> = pos.get(1).and_then(|v| v.parse().ok());
    let mut cfg = SlamConfig::rgbd();
    if let Some(y) = pos.get(2) {
        cfg.apply_yaml_file(std::path::Path::new(y))
            .expect("config");
    }
    let ds = datasets::open(&root, None, 1).expect("data set");
    let gt = ds.ground_truth().expect("ground truth");
    let n_loaders = 2;
    let loaders: Vec<(
        Box<dyn datasets::Dataset>,
        Box<dyn rust3r_slam::PointmapFrontEnd>,
    )> = (0..n_loaders)
        .map(|_| {
            let ds = datasets::open(&root, None, 1).expect("data set");
            let front = RgbdFrontEnd::new(
                ds.depth_intrinsics().expect("depth intrinsics"),
                cfg.rgbd.downsample,
                cfg.rgbd.min_depth,
                cfg.rgbd.max_depth,
            );
            (
                ds,
                Box::new(front) as Box<dyn rust3r_slam::PointmapFrontEnd>,
            )
        })
        .collect();
    let start = Instant::now();
    let r = run_slam_source(
        FrameSource::Prefetch { loaders, ahead: 8 },
        &cfg,
        frames,
        None,
        |_| {},
    )
    .expect("slam");
    let secs = start.elapsed().as_secs_f64();
    let gt_t = Trajectory::from_matrices(&gt);
    let est = Trajectory::from_sim3(&r.frame_poses());
    if let Ok(path) = std::env::var("SEQUENCE_EVAL_TRAJECTORY") {
        output::write_tum_poses(std::path::Path::new(&path), &r.frame_poses())
            .expect("writing the trajectory");
    }
    if let Ok(path) = std::env::var("SEQUENCE_EVAL_KEYFRAMES") {
        // One line per keyframe: its frame index, then the back-end edges as `edge i j`.
        let mut text = String::new();
        for kf in &r.keyframes.frames {
            text.push_str(&format!("{}\n", kf.frame_index));
        }
        for e in &r.edges {
            text.push_str(&format!("edge {} {}\n", e.i, e.j));
        }
        std::fs::write(&path, text).expect("writing the keyframes");
    }
    let ate = |est: &Trajectory, align| {
        ate_from_trajectories(
            est,
            &gt_t,
            &AteOptions {
                align,
                ..Default::default()
            },
        )
        .expect("ate")
        .rmse
    };
    println!(
        "{} frames, {} keyframes, {} edges, {:.1} FPS; ATE se3 {:.2} cm, sim3 {:.2} cm",
        r.frames.len(),
        r.keyframes.len(),
        r.edges.len(),
        r.frames.len() as f64 / secs,
        100.0 * ate(&est, Align::Se3),
        100.0 * ate(&est, Align::Sim3)
    );
    for n in first.into_iter().filter(|n| *n < est.len()) {
        let sub = Trajectory {
            timestamps: est.timestamps[..n].to_vec(),
            poses: est.poses[..n].to_vec(),
        };
        println!(
            "first {n} frames: ATE se3 {:.2} cm, sim3 {:.2} cm",
            100.0 * ate(&sub, Align::Se3),
            100.0 * ate(&sub, Align::Sim3)
        );
    }
    let full = ate_from_trajectories(
        &est,
        &gt_t,
        &AteOptions {
            align: Align::Se3,
            ..Default::default()
        },
    )
    .expect("ate");
    let rpe = relative_translation_errors(&est, &gt_t, 10, 0.01).expect("rpe");
    let lost = r.frames.iter().filter(|f| !f.tracked).count();
    println!(
        "lost frames: {lost}; loop edges: {}",
        r.edges.iter().filter(|e| e.j - e.i > 1).count()
    );
    for seg in (0..rpe.len()).step_by(50) {
        let part = &rpe[seg..(seg + 50).min(rpe.len())];
        let max = part
            .iter()
            .map(|e| e.1)
            .fold(0.0f64, |a, b| if b.is_nan() || b > a { b } else { a });
        let mean = part.iter().map(|e| e.1).sum::<f64>() / part.len() as f64;
        let ate = &full.errors[seg..(seg + 50).min(full.errors.len())];
        let ate_mean = ate.iter().sum::<f64>() / ate.len().max(1) as f64;
        let weak = r
            .frames
            .iter()
            .skip(seg)
            .take(50)
            .filter(|f| f.weak)
            .count();
        println!(
            "  frames {seg:4}-{:4}: RPE/10 max {:5.2} cm, mean {:5.2} cm; ATE (SE(3)) mean {:5.2} cm; {weak} weak",
            seg + part.len() - 1,
            100.0 * max,
            100.0 * mean,
            100.0 * ate_mean
        );
    }
}
