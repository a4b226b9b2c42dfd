//! The monocular system's accuracy with learned retrieval, without the released weights: the
//! tiny checkpoint encodes every frame and answers retrieval (the retrieval head and codebook of
//! `tests/fixtures/retrieval`), while the pointmaps the tracker and the back end use are made
//! from redkitchen's depth images and ground truth, noised (`rust3r_slam::depth_pairs`: a
//! per-frame scale error and per-pixel depth noise). The sequence goes out and back, so the way
//! back revisits the way out: with retrieval, the revisits close loops and the trajectory beats
//! the same run with retrieval off (`retrieval.k = 0`: no loop edges at all).

mod common;

use std::path::Path;

use burn::tensor::{Device, DeviceKind};
use common::tiny_pth;
use rust3r_io::datasets::{self, Dataset};
use rust3r_mast3r::frontend::Mast3rMonoFrontEnd;
use rust3r_mast3r::retrieval::{AsmkParams, RetrievalDatabase};
use rust3r_mast3r::{Mast3r, Precision};
use rust3r_slam::depth_pairs::{DepthNoise, DepthPairs, PingPong};
use rust3r_slam::trajectory::Trajectory;
use rust3r_slam::{Align, AteOptions, FrameSource, SlamConfig, ate_from_trajectories};

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
struct Run {
    ate: f64,
    keyframes: usize,
    /// Loops verified by learned retrieval (`SlamResult::loop_closures`).
    loop_closures: usize,
    /// Back-end edges between keyframes that do not follow each other.
    loop_edges: usize,
}

/// Redkitchen frames 0-150, every 5th, out and back (61 frames): frames 31-60 replay 30-0.
const SPAN: usize = 151;
const STRIDE: usize = 5;
const FRAMES: usize = 61;
/// Pointmaps of 128x96 pixels.
const SIZE: (usize, usize) = (128, 96);

fn noise(seed: u64) -> DepthNoise {
    DepthNoise {
        scale_sigma: 0.03,
        depth_sigma: 0.02,
        seed,
    }
}

fn front_end(retrieval: bool) -> Mast3rMonoFrontEnd {
    assert!(
        !rust3r_gpu::list_adapters().is_empty(),
        "a GPU adapter is required (CI installs Mesa's lavapipe)"
    );
    let device = Device::wgpu(DeviceKind::DefaultDevice);
    let model = Mast3r::load(tiny_pth(), &device, Precision::F32).unwrap();
    let fe = Mast3rMonoFrontEnd::new(model, 224).unwrap();
    if !retrieval {
        return fe;
    }
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/retrieval");
    let db = RetrievalDatabase::load(
        fixture.join("tiny_retrieval_trainingfree.pth"),
        None,
        AsmkParams::default(),
    )
    .unwrap();
    fe.with_retrieval(db).unwrap()
}

fn run(seed: u64, loops: Loops) -> Run {
    let inner = datasets::open(&rust3r_testdata::data("redkitchen"), None, 1).unwrap();
    let ds = PingPong::within(inner, SPAN, STRIDE, FRAMES).unwrap();
    assert_eq!(ds.source(FRAMES - 1), 0, "the run ends where it began");
    let depth_camera = ds.depth_intrinsics().unwrap();
    let gt = ds.ground_truth().unwrap();
    let fe = front_end(loops != Loops::Proximity);
    let mut pairs = DepthPairs::new(
        Some(Box::new(fe)),
        depth_camera,
        SIZE.0,
        SIZE.1,
        noise(seed),
    )
    .unwrap();
    let mut cfg = SlamConfig {
        single_thread: true,
        ..Default::default()
    };
    if loops == Loops::Off {
        cfg.retrieval.k = 0;
    }
    let r = rust3r_slam::run_slam_source(
        FrameSource::Inline {
            dataset: &ds,
            front: &mut pairs,
        },
        &cfg,
        None,
        None,
        |_| {},
    )
    .unwrap();
    assert!(r.frames.iter().all(|f| f.tracked), "every frame is tracked");
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
        keyframes: r.keyframes.frames.len(),
        loop_closures: r.loop_closures,
        loop_edges: r.edges.iter().filter(|e| e.j > e.i + 1).count(),
    };
    eprintln!("seed {seed}, loops {loops:?}: {run:?}");
    run
}

/// Runs seed `seed` with retrieval and with it off, and checks the gain.
fn check(seed: u64) {
    let with = run(seed, Loops::Retrieval);
    let without = run(seed, Loops::Off);
    assert!(
        with.loop_closures > 0 && with.loop_edges >= with.loop_closures,
        "retrieval closed no loop: {with:?}"
    );
    assert_eq!(without.loop_edges, 0, "{without:?}");
    assert!(
        with.ate < without.ate - 0.01,
        "retrieval {:.4} m, off {:.4} m",
        with.ate,
        without.ate
    );
    assert!(with.ate < 0.05, "ATE Sim(3) with retrieval {} m", with.ate);
}

#[test]
fn retrieval_closes_the_loop_and_beats_no_retrieval_on_noised_depth_pairs() {
    check(0);
}

/// The seeds not tuned on (run with `--ignored`).
#[test]
#[ignore]
fn retrieval_beats_no_retrieval_on_held_out_seeds() {
    for seed in [1, 2] {
        check(seed);
    }
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
