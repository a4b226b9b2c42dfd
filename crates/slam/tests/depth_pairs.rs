//! `depth_pairs`: pair predictions made from real depth images and ground truth, the ping-pong
//! input, and the monocular system run on them (no network) on redkitchen.

use rust3r_io::datasets::{self, Dataset};
use rust3r_slam::depth_pairs::{DepthNoise, DepthPairs, PingPong};
use rust3r_slam::trajectory::Trajectory;
use rust3r_slam::{Align, AteOptions, PairFrontEnd, SlamConfig, ate_from_trajectories};

fn redkitchen() -> Box<dyn Dataset> {
    datasets::open(&rust3r_testdata::data("redkitchen"), None, 1).expect("redkitchen opens")
}

/// ATE (Sim(3) alignment) of a run's frame poses against the data set's ground truth.
fn ate_sim3(r: &rust3r_slam::SlamResult, gt: &[(f64, rust3r_io::datasets::Pose)]) -> f64 {
    ate_from_trajectories(
        &Trajectory::from_sim3(&r.frame_poses()),
        &Trajectory::from_matrices(gt),
        &AteOptions {
            align: Align::Sim3,
            ..Default::default()
        },
    )
    .expect("ate")
    .rmse
}

#[test]
fn ping_pong_plays_forwards_then_backwards() {
    let pp = PingPong::new(redkitchen(), 100, 12).expect("ping-pong");
    let order: Vec<usize> = (0..pp.len()).map(|i| pp.source(i)).collect();
    // Frames 0, 100, ..., 400 (of 500) out, then back down and out again.
    assert_eq!(
        order,
        [0, 100, 200, 300, 400, 300, 200, 100, 0, 100, 200, 300]
    );
    let gt = pp.ground_truth().expect("ground truth");
    assert_eq!(gt.len(), 12);
    // Frame 8 replays frame 0: same pose; its timestamp is its own.
    assert_eq!(gt[8].1, gt[0].1);
    assert_ne!(gt[1].1, gt[0].1);
    assert!((gt[8].0 - 8.0 / 30.0).abs() < 1e-12);
    let f = pp.frame(6).expect("frame 6");
    assert_eq!((f.index, f.gt_pose), (6, Some(gt[6].1)));
    assert!(PingPong::new(redkitchen(), 0, 5).is_err());
    // A shorter sweep: frames 0-29 every 10th.
    let pp = PingPong::within(redkitchen(), 30, 10, 7).expect("ping-pong within");
    let order: Vec<usize> = (0..pp.len()).map(|i| pp.source(i)).collect();
    assert_eq!(order, [0, 10, 20, 10, 0, 10, 20]);
    assert!(PingPong::within(redkitchen(), 501, 10, 7).is_err());
}

/// The noise model: depth noise changes the points but not the descriptors (they name the
/// surface point, as a network's do), and a view's focal error scales its `x` and `y` against
/// `z` by one factor per view, different from frame to frame.
#[test]
fn depth_noise_spares_descriptors_and_focal_errors_differ_per_view() {
    let ds = redkitchen();
    let k = ds.depth_intrinsics().expect("depth camera");
    let noise = DepthNoise {
        scale_sigma: 0.0,
        depth_sigma: 0.02,
        focal_sigma: 0.01,
        seed: 3,
    };
    let mut clean = DepthPairs::new(None, k, 64, 48, DepthNoise::default()).expect("pairs");
    let mut noisy = DepthPairs::new(None, k, 64, 48, noise).expect("pairs");
    for i in [0usize, 20] {
        let f = ds.frame(i).expect("frame");
        clean.encode(i, &f).expect("encode");
        noisy.encode(i, &f).expect("encode");
    }
    let (c, n) = (
        clean.pair(20, 0).expect("pair"),
        noisy.pair(20, 0).expect("pair"),
    );
    assert_eq!(c.frame_desc, n.frame_desc);
    assert_eq!(c.keyframe_desc, n.keyframe_desc);
    // Per valid pixel: noisy z / clean z varies (depth noise); (x/z) / (clean x/z) is one
    // factor per view (the focal error).
    let ratios = |a: &[[f32; 3]], b: &[[f32; 3]], conf: &[f32]| {
        let mut z = Vec::new();
        let mut f = Vec::new();
        for ((p, q), &w) in a.iter().zip(b).zip(conf) {
            if w > 0.0 && q[0].abs() > 0.05 * q[2] {
                z.push(p[2] as f64 / q[2] as f64);
                f.push((p[0] / p[2]) as f64 / (q[0] / q[2]) as f64);
            }
        }
        (z, f)
    };
    let spread = |v: &[f64]| {
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        (lo, hi)
    };
    let (z, f) = ratios(&n.frame.points, &c.frame.points, &c.frame.conf);
    assert!(z.len() > 1000, "{} valid pixels", z.len());
    let ((zlo, zhi), (flo, fhi)) = (spread(&z), spread(&f));
    assert!(zhi - zlo > 0.05, "depth noise: z ratios {zlo}..{zhi}");
    assert!(fhi - flo < 1e-4, "one focal factor per view: {flo}..{fhi}");
    assert!((flo - 1.0).abs() > 1e-4, "a focal error: {flo}");
    // Keyframe 0's own view has a focal factor of its own.
    let mono = noisy.mono(0).expect("mono");
    let clean_mono = clean.mono(0).expect("mono");
    let (_, fk) = ratios(&mono.points, &clean_mono.points, &clean_mono.conf);
    assert!(
        (fk[0] - flo).abs() > 1e-4,
        "keyframe 0's own view {} vs frame 20's {flo}",
        fk[0]
    );
}

/// The keyframe's points that a pair puts in the frame's camera land on the frame's own
/// surface: projected with the pairs' camera, they meet the frame's back-projected depth at the
/// same place (occlusions and depth edges aside). A transform in the wrong direction or a
/// mismatched camera puts them tens of centimetres off.
#[test]
fn pair_points_of_the_keyframe_land_on_the_frame_surface() {
    let ds = redkitchen();
    let k = ds.depth_intrinsics().expect("depth camera");
    let (w, h) = (128usize, 96usize);
    let mut pairs = DepthPairs::new(None, k, w, h, DepthNoise::default()).expect("pairs");
    let cam = pairs.camera_model();
    for (fi, ki) in [(20usize, 0usize), (330, 300)] {
        pairs
            .encode(ki, &ds.frame(ki).expect("keyframe"))
            .expect("encode");
        pairs
            .encode(fi, &ds.frame(fi).expect("frame"))
            .expect("encode");
        let p = pairs.pair(fi, ki).expect("pair");
        p.check().expect("a well-formed prediction");
        let mut d = Vec::new();
        for (q, x) in p.keyframe_points.iter().enumerate() {
            if p.keyframe_conf[q] <= 0.0 || x[2] <= 0.1 {
                continue;
            }
            let u = (cam.fx * x[0] as f64 / x[2] as f64 + cam.cx).round();
            let v = (cam.fy * x[1] as f64 / x[2] as f64 + cam.cy).round();
            if u < 0.0 || v < 0.0 || u >= w as f64 || v >= h as f64 {
                continue;
            }
            let i = v as usize * w + u as usize;
            if p.frame.conf[i] <= 0.0 {
                continue;
            }
            let y = p.frame.points[i];
            d.push(((x[0] - y[0]).powi(2) + (x[1] - y[1]).powi(2) + (x[2] - y[2]).powi(2)).sqrt());
        }
        assert!(
            d.len() > w * h / 2,
            "{fi}/{ki}: only {} points land in the frame",
            d.len()
        );
        d.sort_by(f32::total_cmp);
        let median = d[d.len() / 2];
        // A pixel at 2 m is ~1.6 cm wide at 128x96: half a pixel of rounding plus sensor noise.
        assert!(median < 0.015, "{fi}/{ki}: median distance {median} m");
        assert_eq!(p.desc_dim, rust3r_slam::depth_pairs::DESC_DIM);
    }
}

/// The monocular system (uncalibrated ray + distance residuals, Sim(3), iterative-projection
/// matching with descriptor refinement, the back end) on ideal pairs from redkitchen's depth:
/// 61 frames every 5th, 128x96 (redkitchen has 500 frames, so this is frames 0-300 forwards,
/// with no return). Measured 2026-11-28: 3.90 cm ATE (Sim(3)) with the back end off, 2.90-3.05
/// cm with it.
/// On a longer forward run at 256x192 the back end costs accuracy instead
/// (docs/benchmarks/journal.md, "MASt3R-SLAM system throughput").
#[test]
fn mono_system_tracks_ideal_depth_pairs_out_and_back() {
    let run = |backend: bool| {
        let ds = PingPong::new(redkitchen(), 5, 61).expect("ping-pong");
        let k = ds.depth_intrinsics().expect("depth camera");
        let gt = ds.ground_truth().expect("ground truth");
        let mut pairs = DepthPairs::new(None, k, 128, 96, DepthNoise::default()).expect("pairs");
        let mut cfg = SlamConfig::default();
        if !backend {
            cfg.local_opt.max_iters = 0;
            cfg.local_opt.final_iters = 0;
        }
        let r = rust3r_slam::run_slam(&ds, &mut pairs, &cfg, None, |_| {}).expect("slam runs");
        assert!(r.frames.iter().all(|f| f.tracked), "every frame is tracked");
        let ate = ate_sim3(&r, &gt);
        eprintln!(
            "back end {backend}: {} keyframes, ATE Sim(3) {ate:.4} m",
            r.keyframes.frames.len()
        );
        ate
    };
    let without = run(false);
    let with = run(true);
    assert!(without < 0.045, "without the back end: {without} m");
    assert!(with < 0.035, "with the back end: {with} m");
    assert!(
        with < without - 0.005,
        "the back end gains {} m",
        without - with
    );
}

/// The back end keeps each edge's matches through an optimisation (as MASt3R-SLAM keeps them for
/// good): re-associating them at every iteration let the keyframes slide on ideal pairs (frames
/// 0-299 every 2nd at 256x192: 3.44 cm ATE Sim(3) before, 0.93 cm with the matches kept,
/// measured 2026-11-28; 16.9 -> 0.97 cm on every frame of 0-299).
#[test]
fn mono_back_end_keeps_ideal_pairs_accurate() {
    let ds = PingPong::new(redkitchen(), 2, 150).expect("ping-pong");
    let k = ds.depth_intrinsics().expect("depth camera");
    let gt = ds.ground_truth().expect("ground truth");
    let mut pairs = DepthPairs::new(None, k, 256, 192, DepthNoise::default()).expect("pairs");
    let r = rust3r_slam::run_slam(&ds, &mut pairs, &SlamConfig::default(), None, |_| {})
        .expect("slam runs");
    assert!(r.frames.iter().all(|f| f.tracked), "every frame is tracked");
    assert!(r.backend_runs > 0, "the back end ran");
    let ate = ate_sim3(&r, &gt);
    assert!(ate < 0.015, "ATE Sim(3) {ate} m");
}

/// Pair descriptors left on the GPU tracker's device ([`PairFrontEnd::set_tracker_device`])
/// give the same matches, the same normal equations at every iteration (hence the same pose)
/// and the same statistics as the same pair with its descriptors on the host, on a real
/// redkitchen pair (frame 20 against keyframe 0, 128x96, scale and depth noise); the CPU
/// tracker reads device-only descriptors back and gives its host result. Fails without a GPU
/// adapter (lavapipe: apt-get install mesa-vulkan-drivers).
#[test]
fn device_resident_descriptors_track_as_the_host_ones() {
    let gpu = rust3r_gpu::Gpu::new(&rust3r_gpu::GpuOptions {
        poison: true,
        ..Default::default()
    })
    .expect("a GPU adapter");
    let ds = redkitchen();
    let k = ds.depth_intrinsics().expect("depth camera");
    let noise = DepthNoise {
        scale_sigma: 0.1,
        depth_sigma: 0.01,
        focal_sigma: 0.0,
        seed: 3,
    };
    let (fi, ki) = (20usize, 0usize);
    let make = |device: bool| {
        let mut pairs = DepthPairs::new(None, k, 128, 96, noise).expect("pairs");
        if device {
            pairs.set_tracker_device(Some(&gpu));
        }
        for i in [ki, fi] {
            pairs
                .encode(i, &ds.frame(i).expect("frame"))
                .expect("encode");
        }
        let kf = pairs.mono(ki).expect("keyframe pointmap");
        (pairs.pair(fi, ki).expect("pair"), kf)
    };
    let (host, kf) = make(false);
    let (dev, kf_dev) = make(true);
    assert_eq!(kf, kf_dev);
    assert!(host.device_desc.is_none() && !host.descriptors_on_device_only());
    assert!(dev.descriptors_on_device_only(), "no device descriptors");
    dev.check()
        .expect("a well-formed device-resident prediction");
    // Read back, the device's descriptors are the host's, bit for bit.
    let back = dev.clone().with_host_descriptors().expect("read back");
    assert_eq!(back.frame_desc, host.frame_desc);
    assert_eq!(back.keyframe_desc, host.keyframe_desc);

    let cfg = SlamConfig::default();
    let tracker = rust3r_slam::tracker::Tracker {
        cfg: cfg.tracking.clone(),
        matching: cfg.matching.clone(),
        levels: 1,
        optimize_scale: true,
    };
    let m_host = rust3r_slam::kernels::match_pair_gpu(&gpu, &host, &cfg.matching, None)
        .expect("host matching");
    let m_dev = rust3r_slam::kernels::match_pair_gpu(&gpu, &dev, &cfg.matching, None)
        .expect("device matching");
    let valid = m_host.valid.iter().filter(|v| **v).count();
    assert!(valid > host.len() / 2, "{valid} valid matches");
    assert!(m_host.refined > 0, "the descriptors moved no match");
    assert_eq!(m_dev, m_host);

    let kf_conf = kf.conf.clone();
    let start = rust3r_geometry::Sim3::identity();
    let g_host =
        rust3r_slam::kernels::track_pair_gpu(&gpu, &tracker, &host, &kf, &kf_conf, &start, None)
            .expect("host tracking");
    let g_dev =
        rust3r_slam::kernels::track_pair_gpu(&gpu, &tracker, &dev, &kf, &kf_conf, &start, None)
            .expect("device tracking");
    assert!(!g_host.result.lost && g_host.result.iterations > 1);
    assert_eq!(g_dev.matches, g_host.matches);
    assert_eq!(g_dev.used, g_host.used);
    assert_eq!(g_dev.result.t_kf_frame, g_host.result.t_kf_frame);
    assert_eq!(g_dev.result.iterations, g_host.result.iterations);
    assert_eq!(g_dev.result.cost.to_bits(), g_host.result.cost.to_bits());
    assert_eq!(g_dev.result.match_frac, g_host.result.match_frac);

    let c_host = tracker
        .track_pair(&host, &kf, &kf_conf, None, &start, None)
        .expect("CPU, host descriptors");
    let c_dev = tracker
        .track_pair(&dev, &kf, &kf_conf, None, &start, None)
        .expect("CPU, descriptors read back");
    assert_eq!(c_dev.matches, c_host.matches);
    assert_eq!(c_dev.result.t_kf_frame, c_host.result.t_kf_frame);
}

/// `forced_keyframe_every` (timing runs): every frame counts as tracked and exactly every K-th
/// frame becomes a keyframe, even where tracking cannot succeed (`tracking.min_match_frac`
/// above 1 loses every tracked frame without it); off, the same run loses frame 1.
#[test]
fn forced_tracking_makes_every_kth_frame_a_keyframe() {
    let run = |forced: usize| {
        let ds = PingPong::new(redkitchen(), 5, 7).expect("ping-pong");
        let k = ds.depth_intrinsics().expect("depth camera");
        let mut pairs = DepthPairs::new(None, k, 64, 48, DepthNoise::default()).expect("pairs");
        let mut cfg = SlamConfig {
            single_thread: true,
            ..Default::default()
        };
        cfg.apply_yaml(
            &format!("forced_keyframe_every: {forced}\ntracking:\n  min_match_frac: 1.1\n"),
            std::path::Path::new("test.yaml"),
        )
        .expect("config");
        assert_eq!(cfg.forced_keyframe_every, forced);
        rust3r_slam::run_slam(&ds, &mut pairs, &cfg, None, |_| {}).expect("slam runs")
    };
    let off = run(0);
    assert!(
        !off.frames[1].tracked,
        "tracking should fail without forcing"
    );
    let on = run(3);
    assert!(
        on.frames.iter().all(|f| f.tracked),
        "every frame is tracked"
    );
    let kfs: Vec<usize> = on.keyframes.frames.iter().map(|k| k.frame_index).collect();
    assert_eq!(kfs, vec![0, 3, 6]);
    for (_, pose) in on.frame_poses() {
        assert!(pose.translation.iter().all(|v| v.is_finite()) && pose.scale.is_finite());
    }
}

/// Decoding the next frame while a frame is tracked (`decode_ahead`: the CPU tracker on its own
/// thread; the frame after it loaded behind that decoding or not, `encode_ahead`) gives the run
/// of decoding in turn, bit for bit: with keyframes made as tracking
/// finds them (the pair decoded ahead with the old keyframe is dropped and decoded again) and
/// with every tracked frame lost (`tracking.min_match_frac` above 1: relocalising frames are
/// decoded with themselves).
#[test]
fn decoding_ahead_gives_the_run_of_decoding_in_turn() {
    let run = |ahead: bool, encode_ahead: bool, lose: bool| {
        let ds = PingPong::new(redkitchen(), 5, 24).expect("ping-pong");
        let k = ds.depth_intrinsics().expect("depth camera");
        let mut pairs = DepthPairs::new(None, k, 96, 72, DepthNoise::default()).expect("pairs");
        let mut cfg = SlamConfig {
            single_thread: true,
            decode_ahead: ahead,
            encode_ahead,
            ..Default::default()
        };
        if lose {
            cfg.tracking.min_match_frac = 1.1;
        }
        rust3r_slam::run_slam(&ds, &mut pairs, &cfg, None, |_| {}).expect("slam runs")
    };
    for lose in [false, true] {
        let b = run(false, false, lose);
        assert_eq!(b.timings.overlap_s, 0.0);
        let tracked = |r: &rust3r_slam::SlamResult| r.frames.iter().map(|f| f.tracked).collect();
        let t: Vec<bool> = tracked(&b);
        for encode in [true, false] {
            let a = run(true, encode, lose);
            let what = format!("lose {lose}, encode ahead {encode}");
            assert!(a.timings.overlap_s > 0.0, "{what}: nothing overlapped");
            assert_eq!(a.frame_poses(), b.frame_poses(), "{what}");
            assert_eq!(tracked(&a), t, "{what}");
            assert_eq!(a.keyframes.frames.len(), b.keyframes.frames.len());
            for (x, y) in a.keyframes.frames.iter().zip(&b.keyframes.frames) {
                assert_eq!(x.frame_index, y.frame_index, "{what}");
                assert_eq!(x.pointmap, y.pointmap, "{what}");
            }
        }
        if lose {
            assert!(!t[1], "frame 1 should be lost");
        } else {
            assert!(t.iter().all(|t| *t), "every frame is tracked");
            assert!(b.keyframes.frames.len() >= 2, "a keyframe after the first");
        }
    }
}
