//! GPU kernels (lavapipe here) against the CPU f64 reference: matching, the normal-equation
//! reduction, and whole-frame tracking. Fails (does not skip) without an adapter.

mod common;

use rust3r_geometry::Sim3;
use rust3r_gpu::{Gpu, GpuOptions};
use rust3r_slam::config::SlamConfig;
use rust3r_slam::kernels::{GpuPair, track_gpu};
use rust3r_slam::tracker::{LevelView, ResidualParams, Tracker, associate, build_normal_eq};

fn gpu() -> Gpu {
    Gpu::new(&GpuOptions {
        poison: true,
        ..Default::default()
    })
    .expect("a GPU adapter (lavapipe: apt-get install mesa-vulkan-drivers)")
}

fn views() -> (LevelView, LevelView, Sim3, ResidualParams, SlamConfig) {
    let cam = common::camera(96, 72);
    let scene = common::room();
    let cfg = SlamConfig::rgbd();
    let p = ResidualParams::tracking(&cfg.tracking);
    let t_wk = Sim3::identity();
    let t_wf = common::se3([0.1, 1.0, 0.3], 3.0, [0.05, -0.02, 0.03]);
    let kf = common::render(&scene, &cam, &t_wk, 10.0);
    let fr = common::render(&scene, &cam, &t_wf, 10.0);
    let fv = LevelView::new(&fr, &fr.conf, Some(cam), 0, &p, false);
    let kv = LevelView::new(&kf, &kf.conf, Some(cam), 0, &p, true);
    // A pose near (not at) the truth, as in the middle of tracking.
    let truth = t_wk.inverse().compose(&t_wf);
    let t = truth.retr(&rust3r_geometry::Vector7::from_column_slice(&[
        0.004, -0.003, 0.002, 0.002, 0.001, -0.002, 0.0,
    ]));
    (fv, kv, t, p, cfg)
}

#[test]
fn gpu_matching_equals_the_cpu_reference() {
    let gpu = gpu();
    let (fv, kv, t, p, cfg) = views();
    let pair = GpuPair::new(&gpu, &fv, &kv, &p, &cfg.matching);
    pair.associate(&gpu, &t.inverse());
    let g = pair.matches(&gpu).unwrap();
    let c = associate(&fv, &kv, &t.inverse(), None, &cfg.matching);
    let n = kv.len();
    let mut same_idx = 0;
    let mut same_valid = 0;
    let mut worst = 0.0f32;
    for q in 0..n {
        if !kv.valid[q] {
            continue;
        }
        same_idx += (g.idx[q] == c.idx[q]) as usize;
        same_valid += (g.valid[q] == c.valid[q]) as usize;
        if c.valid[q] {
            worst = worst.max(
                (g.pos[q][0] - c.pos[q][0])
                    .abs()
                    .max((g.pos[q][1] - c.pos[q][1]).abs()),
            );
        }
    }
    let nv = kv.valid.iter().filter(|v| **v).count();
    // f32 vs f64: a position within a hair of a pixel boundary may round the other way.
    assert!(
        same_idx as f64 > 0.995 * nv as f64,
        "{same_idx} of {nv} indices agree"
    );
    assert!(
        same_valid as f64 > 0.995 * nv as f64,
        "{same_valid} of {nv} validity flags agree"
    );
    assert!(worst < 2e-3, "sub-pixel positions differ by {worst} px");
}

#[test]
fn gpu_normal_equations_equal_the_cpu_reference() {
    let gpu = gpu();
    let (fv, kv, t, p, cfg) = views();
    let c = associate(&fv, &kv, &t.inverse(), None, &cfg.matching);
    let mut pair = GpuPair::new(&gpu, &fv, &kv, &p, &cfg.matching);
    pair.set_matches(&gpu, &c);
    let g = pair.normal_eq(&gpu, &t).unwrap();
    let r = build_normal_eq(&fv, &kv, &c, &t, &p);
    assert_eq!(g.count, r.count);
    assert!(r.count > 3000);
    let hscale = r.h.abs().max();
    assert!(
        (g.h - r.h).abs().max() < 1e-3 * hscale,
        "H differs:\n{}\n{}",
        g.h,
        r.h
    );
    let gscale = r.g.abs().max();
    assert!(
        (g.g - r.g).abs().max() < 2e-3 * gscale,
        "g differs:\n{}\n{}",
        g.g,
        r.g
    );
    assert!(
        (g.cost - r.cost).abs() < 1e-3 * r.cost,
        "cost {} vs {}",
        g.cost,
        r.cost
    );
}

#[test]
fn gpu_tracking_recovers_the_same_pose_as_the_cpu() {
    let gpu = gpu();
    let cam = common::camera(128, 96);
    let scene = common::room();
    let mut cfg = SlamConfig::rgbd();
    // The CPU reference of the kernels: iterative projection, iterations down to level 0.
    cfg.matching.projective = false;
    cfg.tracking.finest_level = 0;
    let kf = common::render(&scene, &cam, &Sim3::identity(), 10.0);
    let motion = common::se3([0.2, 1.0, -0.3], 4.0, [-0.05, 0.02, 0.04]);
    let fr = common::render(&scene, &cam, &motion, 10.0);
    let tracker = Tracker {
        cfg: cfg.tracking.clone(),
        matching: cfg.matching.clone(),
        levels: 3,
        optimize_scale: false,
    };
    let g = track_gpu(
        &gpu,
        &tracker,
        &fr,
        &fr.conf,
        &kf,
        &kf.conf,
        cam,
        &Sim3::identity(),
    )
    .unwrap();
    let c = tracker.track(&fr, &fr.conf, &kf, &kf.conf, Some(cam), &Sim3::identity());
    let (ang, trans) = common::pose_error(&g.t_kf_frame, &motion);
    // f32 sums on the device: the cost test of the convergence rule stops a little earlier.
    assert!(
        ang < 0.05 && trans < 2e-3,
        "GPU tracking error {ang} deg, {trans} m"
    );
    let (ang2, trans2) = common::pose_error(&g.t_kf_frame, &c.t_kf_frame);
    assert!(
        ang2 < 0.05 && trans2 < 2e-3,
        "GPU and CPU differ by {ang2} deg, {trans2} m"
    );
    assert!((g.match_frac - c.match_frac).abs() < 0.01);
}
