//! The monocular system's accuracy with learned retrieval, without the released weights: the
//! tiny checkpoint encodes every frame and answers retrieval (the retrieval head and codebook of
//! `tests/fixtures/retrieval`), while the pointmaps the tracker and the back end use are made
//! from redkitchen's depth images and ground truth, noised (`rust3r_slam::depth_pairs`: a
//! per-frame scale error, per-pixel depth noise and a focal-length error per predicted view, the
//! last being what makes the estimate drift). The sequence goes out and back, so the way back
//! revisits the way out: with retrieval, the revisits close loops and the trajectory beats the
//! same run with retrieval off (`retrieval.k = 0` and no network: no loop edges at all; the
//! network only encodes for retrieval, so leaving it out changes nothing else: without it the
//! runs off gave the ATEs they gave with it, 10.96 / 14.92 / 10.64 cm, 2026-12-02).
//!
//! Measured 2026-11-28 (ATE Sim(3), retrieval / off, loops closed): seed 0 (tuned on) 7.65 /
//! 10.96 cm, 46; held-out seeds 1: 11.79 / 14.92 cm, 39; 2: 6.45 / 10.64 cm, 46. Without any
//! noise: 5.45 / 12.47 cm. After the network's fused kernels (session 20: the encoder features
//! move at the 1e-6 level, every parity tensor within 4e-6) the retrieval runs changed: seed 0
//! 11.32 cm, 44 loops (now *worse* than off by 0.36 cm), seed 1 11.77 cm, 39, seed 2 4.90 cm,
//! 43; the runs with retrieval off did not move. One seed's gain is therefore not a stable
//! measure of retrieval (which loops pass verification flips with tiny feature changes): the
//! test checks the mean over the three seeds. Each run with retrieval takes ~50 s on 2 loaded
//! cores (lavapipe), each without ~10 s.

mod common;

use rust3r_io::datasets::{self, Dataset};
use rust3r_slam::depth_pairs::{DepthNoise, DepthPairs, PingPong};
use rust3r_slam::trajectory::Trajectory;
use rust3r_slam::{Align, AteOptions, PointmapFrontEnd, SlamConfig, ate_from_trajectories};

/// How loops are looked for.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Loops {
    /// Learned retrieval on the tiny network's encoder features, verified on the pair.
    Retrieval,
    /// No network and `retrieval.k = 0`: no loop candidates at all (the network's encodings
    /// would only feed retrieval, so the run is the retrieval run's without its loops).
    Off,
    /// No retrieval database: candidates by pose proximity (the RGB-D path's).
    Proximity,
}

/// What a run gives.
#[derive(Debug)]
#[allow(dead_code)] // `keyframes` is printed only
struct Run {
    ate: f64,
    tracked: usize,
    keyframes: usize,
    /// Loops verified by learned retrieval (`SlamResult::loop_closures`).
    loop_closures: usize,
    /// Back-end edges between keyframes that do not follow each other.
    loop_edges: usize,
}

/// Redkitchen frames 0-499, every 5th, out and back (199 frames): frames 100-198 replay 98-0.
const SPAN: usize = 500;
const STRIDE: usize = 5;
const FRAMES: usize = 199;
/// Pointmaps of 128x96 pixels.
const SIZE: (usize, usize) = (128, 96);

fn noise(seed: u64) -> DepthNoise {
    DepthNoise {
        scale_sigma: 0.05,
        depth_sigma: 0.004,
        focal_sigma: 0.005,
        seed,
    }
}

/// The tiny network encoding every frame: with the retrieval head and codebook, or without
/// them (then loop candidates come from pose proximity); none for [`Loops::Off`].
fn front_end(loops: Loops) -> Option<Box<dyn PointmapFrontEnd>> {
    match loops {
        Loops::Retrieval => Some(Box::new(common::tiny_front_end_with_retrieval())),
        Loops::Proximity => Some(Box::new(common::tiny_front_end(224))),
        Loops::Off => None,
    }
}

fn run(seed: u64, loops: Loops) -> Run {
    let inner = datasets::open(&rust3r_testdata::data("redkitchen"), None, 1).unwrap();
    let ds = PingPong::within(inner, SPAN, STRIDE, FRAMES).unwrap();
    assert_eq!(ds.source(FRAMES - 1), 0, "the run ends where it began");
    let depth_camera = ds.depth_intrinsics().unwrap();
    let gt = ds.ground_truth().unwrap();
    // The network's predictions are dropped: encoding (for retrieval) is all it needs to do.
    let mut pairs = DepthPairs::new(front_end(loops), depth_camera, SIZE.0, SIZE.1, noise(seed))
        .unwrap()
        .inner_encode_only();
    let mut cfg = SlamConfig {
        single_thread: true,
        ..Default::default()
    };
    if loops == Loops::Off {
        cfg.retrieval.k = 0;
    }
    let r = rust3r_slam::run_slam(&ds, &mut pairs, &cfg, None, |_| {}).unwrap();
    let ate = ate_from_trajectories(
        &Trajectory::from_sim3(&r.frame_poses()),
        &Trajectory::from_matrices(&gt),
        &AteOptions {
            align: Align::Sim3,
            ..Default::default()
        },
    )
    .unwrap()
    .rmse;
    let run = Run {
        ate,
        tracked: r.frames.iter().filter(|f| f.tracked).count(),
        keyframes: r.keyframes.frames.len(),
        loop_closures: r.loop_closures,
        loop_edges: r.edges.iter().filter(|e| e.j > e.i + 1).count(),
    };
    eprintln!("seed {seed}, loops {loops:?}: {run:?}");
    run
}

/// Runs seeds 0-2 with retrieval and with it off; checks that each seed tracks every frame
/// and closes loops, that retrieval beats no retrieval by at least 1.5 cm in the mean over the
/// seeds (measured 2.84 cm), and that the mean ATE with retrieval stays under 10.5 cm (measured
/// 9.33 cm). Seed 0 alone no longer gains (module docs).
#[test]
fn retrieval_closes_loops_and_beats_no_retrieval_on_noised_depth_pairs_over_three_seeds() {
    let (mut with_sum, mut without_sum) = (0.0, 0.0);
    for seed in [0, 1, 2] {
        let with = run(seed, Loops::Retrieval);
        let without = run(seed, Loops::Off);
        for r in [&with, &without] {
            assert_eq!(
                r.tracked, FRAMES,
                "seed {seed}: every frame is tracked: {r:?}"
            );
        }
        // Measured: 39-46 loops verified, each a back-end edge.
        assert!(
            with.loop_closures >= 20 && with.loop_edges >= with.loop_closures,
            "seed {seed}: retrieval closed too few loops: {with:?}"
        );
        assert_eq!(without.loop_edges, 0, "seed {seed}: {without:?}");
        with_sum += with.ate;
        without_sum += without.ate;
    }
    let (with, without) = (with_sum / 3.0, without_sum / 3.0);
    assert!(
        with < without - 0.015,
        "mean over seeds 0-2: retrieval {with:.4} m, off {without:.4} m"
    );
    assert!(with < 0.105, "mean ATE Sim(3) with retrieval {with} m");
}

/// Loop candidates by pose proximity instead, for comparison (run with `--ignored`; prints).
#[test]
#[ignore]
fn proximity_loops_for_comparison() {
    for seed in [0, 1, 2] {
        let p = run(seed, Loops::Proximity);
        assert!(p.ate.is_finite());
    }
}
