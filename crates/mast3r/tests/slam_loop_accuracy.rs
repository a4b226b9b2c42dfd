//! The monocular system's accuracy with learned retrieval, without the released weights: the
//! tiny checkpoint encodes every frame and answers retrieval (the retrieval head and codebook of
//! `tests/fixtures/retrieval`), while the pointmaps the tracker and the back end use are made
//! from redkitchen's depth images and ground truth, noised (`rust3r_slam::depth_pairs`: a
//! per-frame scale error, per-pixel depth noise and a focal-length error per predicted view, the
//! last being what makes the estimate drift). The sequence goes out and back, so the way back
//! revisits the way out: with retrieval, the revisits close loops and the trajectory beats the
//! same run with retrieval off (`retrieval.k = 0`: no loop edges at all).
//!
//! Measured 2026-11-28 (ATE Sim(3), retrieval / off, loops closed): seed 0 (tuned on) 7.65 /
//! 10.96 cm, 46; held-out seeds 1: 11.79 / 14.92 cm, 39; 2: 6.45 / 10.64 cm, 46. Without any
//! noise: 5.45 / 12.47 cm. Each run takes ~50 s on 2 loaded cores (lavapipe).

mod common;

use rust3r_io::datasets::{self, Dataset};
use rust3r_mast3r::frontend::Mast3rMonoFrontEnd;
use rust3r_slam::depth_pairs::{DepthNoise, DepthPairs, PingPong};
use rust3r_slam::trajectory::Trajectory;
use rust3r_slam::{Align, AteOptions, SlamConfig, ate_from_trajectories};

/// How loops are looked for.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Loops {
    /// Learned retrieval on the tiny network's encoder features, verified on the pair.
    Retrieval,
    /// The same front end and database, `retrieval.k = 0`: no loop candidates.
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

fn front_end(retrieval: bool) -> Mast3rMonoFrontEnd {
    if retrieval {
        common::tiny_front_end_with_retrieval()
    } else {
        common::tiny_front_end(224)
    }
}

fn run(seed: u64, loops: Loops) -> Run {
    let inner = datasets::open(&rust3r_testdata::data("redkitchen"), None, 1).unwrap();
    let ds = PingPong::within(inner, SPAN, STRIDE, FRAMES).unwrap();
    assert_eq!(ds.source(FRAMES - 1), 0, "the run ends where it began");
    let depth_camera = ds.depth_intrinsics().unwrap();
    let gt = ds.ground_truth().unwrap();
    let fe = front_end(loops != Loops::Proximity);
    // The network's predictions are dropped: encoding (for retrieval) is all it needs to do.
    let mut pairs = DepthPairs::new(
        Some(Box::new(fe)),
        depth_camera,
        SIZE.0,
        SIZE.1,
        noise(seed),
    )
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

/// Runs seed `seed` with retrieval and with it off, and checks the gain (at least 1.5 cm: half
/// the smallest measured over seeds 0-2, 3.1 cm) and that the ATE with retrieval stays under
/// `bound` (metres, 15-20 % above the measured value).
fn check(seed: u64, bound: f64) {
    let with = run(seed, Loops::Retrieval);
    let without = run(seed, Loops::Off);
    for r in [&with, &without] {
        assert_eq!(r.tracked, FRAMES, "every frame is tracked: {r:?}");
    }
    // Measured: 39-46 loops verified, each a back-end edge.
    assert!(
        with.loop_closures >= 20 && with.loop_edges >= with.loop_closures,
        "retrieval closed too few loops: {with:?}"
    );
    assert_eq!(without.loop_edges, 0, "{without:?}");
    assert!(
        with.ate < without.ate - 0.015,
        "retrieval {:.4} m, off {:.4} m",
        with.ate,
        without.ate
    );
    assert!(with.ate < bound, "ATE Sim(3) with retrieval {} m", with.ate);
}

#[test]
fn retrieval_closes_the_loop_and_beats_no_retrieval_on_noised_depth_pairs() {
    // Measured 7.65 cm.
    check(0, 0.09);
}

/// The seeds not tuned on (run with `--ignored`; ~4 minutes).
#[test]
#[ignore]
fn retrieval_beats_no_retrieval_on_held_out_seeds() {
    // Measured 11.79 and 6.45 cm.
    check(1, 0.14);
    check(2, 0.08);
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
