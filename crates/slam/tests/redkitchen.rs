//! End to end on real data: 7-Scenes redkitchen (../shared/data/redkitchen).

use std::path::PathBuf;

use rust3r_io::datasets;
use rust3r_slam::trajectory::Trajectory;
use rust3r_slam::{Align, RgbdFrontEnd, SlamConfig, ate_from_trajectories, run_slam};

fn data() -> PathBuf {
    rust3r_testdata::data("redkitchen")
}

fn run(
    frames: usize,
    single_thread: bool,
    tweak: impl Fn(&mut SlamConfig),
) -> rust3r_slam::SlamResult {
    let ds = datasets::open(&data(), None, 1).expect("redkitchen data set");
    let mut cfg = SlamConfig::rgbd();
    cfg.single_thread = single_thread;
    tweak(&mut cfg);
    let mut front = RgbdFrontEnd::new(
        ds.depth_intrinsics().unwrap(),
        cfg.rgbd.downsample,
        cfg.rgbd.min_depth,
        cfg.rgbd.max_depth,
    );
    run_slam(ds.as_ref(), &mut front, &cfg, Some(frames), |_| {}).expect("slam runs")
}

/// The run's trajectory and the ground truth.
fn trajectories(result: &rust3r_slam::SlamResult) -> (Trajectory, Trajectory) {
    let ds = datasets::open(&data(), None, 1).unwrap();
    let gt = ds.ground_truth().unwrap();
    (
        Trajectory::from_sim3(&result.frame_poses()),
        Trajectory::from_matrices(&gt),
    )
}

fn ate(result: &rust3r_slam::SlamResult, align: Align) -> f64 {
    let (est, gt_t) = trajectories(result);
    let opts = rust3r_slam::AteOptions {
        align,
        ..Default::default()
    };
    ate_from_trajectories(&est, &gt_t, &opts).expect("ate").rmse
}

#[test]
fn first_60_frames_track_within_3cm() {
    let r = run(60, false, |_| {});
    assert_eq!(r.frames.len(), 60);
    assert!(r.frames.iter().all(|f| f.tracked), "a frame was lost");
    let se3 = ate(&r, Align::Se3);
    let sim3 = ate(&r, Align::Sim3);
    eprintln!(
        "redkitchen 60 frames: ATE se3 {se3:.4} m, sim3 {sim3:.4} m, {} keyframes",
        r.keyframes.len()
    );
    assert!(se3 < 0.03, "ATE (SE(3)-aligned) {se3} m");
    assert!(sim3 < 0.03, "ATE (Sim(3)-aligned) {sim3} m");
}

#[test]
fn single_thread_runs_are_bit_identical() {
    // Frequent keyframes, so the back end runs several times within the prefix (on the
    // half-resolution level, to keep the test short).
    let tweak = |c: &mut SlamConfig| {
        c.tracking.match_frac_thresh = 0.83;
        c.rgbd.backend_level = 1;
    };
    let a = run(24, true, tweak);
    let b = run(24, true, tweak);
    let pa: Vec<[f64; 8]> = a.frame_poses().iter().map(|(_, p)| p.data()).collect();
    let pb: Vec<[f64; 8]> = b.frame_poses().iter().map(|(_, p)| p.data()).collect();
    assert!(
        a.keyframes.len() >= 3 && a.backend_runs >= 3 && !a.edges.is_empty(),
        "the back end must have run: {} keyframes, {} runs",
        a.keyframes.len(),
        a.backend_runs
    );
    assert_eq!(pa, pb, "poses differ between two single-thread runs");
    for (ka, kb) in a.keyframes.frames.iter().zip(&b.keyframes.frames) {
        assert_eq!(ka.pointmap.points, kb.pointmap.points);
    }
}

#[test]
fn prefetching_loader_threads_give_the_same_result_as_inline_loading() {
    // Frames decoded on two loader threads (each with its own data set handle) reach tracking
    // in order, so a single-thread run is bit-identical to loading on the tracking thread.
    let frames = 30;
    let inline = run(frames, true, |_| {});
    let mut cfg = SlamConfig::rgbd();
    cfg.single_thread = true;
    let loaders: Vec<(
        Box<dyn rust3r_io::datasets::Dataset>,
        Box<dyn rust3r_slam::PointmapFrontEnd>,
    )> = (0..2)
        .map(|_| {
            let ds = datasets::open(&data(), None, 1).unwrap();
            let front = RgbdFrontEnd::new(
                ds.depth_intrinsics().unwrap(),
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
    let mut seen = Vec::new();
    let pre = rust3r_slam::run_slam_source(
        rust3r_slam::FrameSource::Prefetch { loaders, ahead: 3 },
        &cfg,
        Some(frames),
        None,
        |p| seen.push(p.frame),
    )
    .unwrap();
    assert_eq!(seen, (1..=frames).collect::<Vec<_>>());
    let pa: Vec<[f64; 8]> = inline.frame_poses().iter().map(|(_, p)| p.data()).collect();
    let pb: Vec<[f64; 8]> = pre.frame_poses().iter().map(|(_, p)| p.data()).collect();
    assert_eq!(pa, pb);
    assert_eq!(
        inline
            .frames
            .iter()
            .map(|f| f.timestamp)
            .collect::<Vec<_>>(),
        pre.frames.iter().map(|f| f.timestamp).collect::<Vec<_>>()
    );
    assert!(pre.timings.load_s > 0.0 && pre.timings.track_s > 0.0);
}

/// All 500 bundled frames, the fast, blurred part (frames ~380-470) included. Measured with the
/// default RGB-D configuration (photometric term in tracking, sigma 0.07, and in the back end;
/// keyframes keep their first observation, `filtering_mode: first`; motion prior): ATE 2.25 cm
/// (SE(3)), 1.69 cm over frames 0-299, largest relative error per 10 frames 5.9 cm (over the
/// ground truth's own step at frame 121). With the former tracking sigma 0.4 and weighted
/// fusion 3.11-3.16 cm (the bound below fails there); with depth alone and no motion prior
/// 15.9 cm.
#[test]
fn all_500_frames_with_the_fast_part_stay_within_bounds() {
    let r = run(500, false, |_| {});
    assert_eq!(r.frames.len(), 500);
    assert!(r.frames.iter().all(|f| f.tracked), "a frame was lost");
    let se3 = ate(&r, Align::Se3);
    let mut first = r.clone();
    first.frames.truncate(300);
    let se3_300 = ate(&first, Align::Se3);
    let (est, gt_t) = trajectories(&r);
    let rpe = rust3r_slam::relative_translation_errors(&est, &gt_t, 10, 0.01).unwrap();
    let worst = rpe
        .iter()
        .map(|e| e.1)
        .fold(0.0f64, |a, b| if b.is_nan() || b > a { b } else { a });
    eprintln!(
        "redkitchen 500 frames: ATE se3 {se3:.4} m (0-299: {se3_300:.4} m), worst RPE/10 {worst:.4} m, {} keyframes",
        r.keyframes.len()
    );
    assert!(se3 < 0.027, "ATE (SE(3)) over 500 frames {se3} m");
    assert!(se3_300 < 0.021, "ATE (SE(3)) over frames 0-299 {se3_300} m");
    assert!(
        worst < 0.068,
        "worst relative error per 10 frames {worst} m"
    );
}
