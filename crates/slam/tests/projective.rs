//! Projective association and the fused normal equations against the reference code
//! (iterative projection, `build_normal_eq`, the back end's per-point Jacobians), and the
//! deterministic parallel reduction.

mod common;

use nalgebra::Vector3;
use rust3r_geometry::{Matrix7, Sim3, Vector7};
use rust3r_slam::config::SlamConfig;
use rust3r_slam::par::{CHUNK, chunked_reduce, chunked_reduce_seq};
use rust3r_slam::projective;
use rust3r_slam::residuals::world_point_jacobian;
use rust3r_slam::tracker::{LevelView, ResidualParams, associate, build_normal_eq, point_info};

/// A keyframe view and a frame view of the synthetic room, and a pose near the truth.
fn views(w: u32, h: u32) -> (LevelView, LevelView, Sim3, ResidualParams, SlamConfig) {
    let cam = common::camera(w, h);
    let scene = common::room();
    let cfg = SlamConfig::rgbd();
    let mut p = ResidualParams::tracking(&cfg.tracking);
    // Every pixel, as the reference code sums them.
    p.checkerboard = false;
    let t_wf = common::se3([0.1, 1.0, 0.3], 3.0, [0.05, -0.02, 0.03]);
    let kf = common::render(&scene, &cam, &Sim3::identity(), 10.0);
    let fr = common::render(&scene, &cam, &t_wf, 10.0);
    let fv = LevelView::new(&fr, &fr.conf, Some(cam), 0, &p, false);
    let kv = LevelView::new(&kf, &kf.conf, Some(cam), 0, &p, true);
    let t = t_wf.retr(&Vector7::from_column_slice(&[
        0.004, -0.003, 0.002, 0.002, 0.001, -0.002, 0.0,
    ]));
    (fv, kv, t, p, cfg)
}

fn rel_diff(a: &Matrix7, b: &Matrix7) -> f64 {
    (a - b).abs().max() / b.abs().max()
}

#[test]
fn projective_association_agrees_with_iterative_projection() {
    let (fv, kv, t, _, cfg) = views(128, 96);
    let it = associate(&fv, &kv, &t.inverse(), None, &cfg.matching);
    let pr = projective::associate(&fv, &kv, &t.inverse(), &cfg.matching);
    let (mut both, mut same, mut only_it, mut only_pr, mut worst) = (0, 0, 0, 0, 0.0f32);
    for q in 0..kv.len() {
        match (it.valid[q], pr.valid[q]) {
            (true, true) => {
                both += 1;
                same += (it.idx[q] == pr.idx[q]) as usize;
                worst = worst.max(
                    (it.pos[q][0] - pr.pos[q][0])
                        .abs()
                        .max((it.pos[q][1] - pr.pos[q][1]).abs()),
                );
            }
            (true, false) => only_it += 1,
            (false, true) => only_pr += 1,
            _ => {}
        }
    }
    eprintln!(
        "both {both}, same pixel {same}, only iterative {only_it}, only projective {only_pr}, worst {worst} px"
    );
    assert!(both > 5000);
    // Iterative projection stops once the squared ray error is below 1e-6 (about 0.1 px at
    // this focal length), so a position near a pixel boundary may round the other way.
    assert!(
        same as f64 > 0.995 * both as f64,
        "{same} of {both} pixels agree"
    );
    let tol = (cfg.matching.convergence_thresh.sqrt() * common::camera(128, 96).fx * 1.5) as f32;
    assert!(
        worst < tol,
        "sub-pixel positions differ by {worst} px (tolerance {tol})"
    );
    // Iterative projection keeps one pixel away from the border; projection uses it too.
    assert!(
        only_it as f64 <= 0.002 * both as f64,
        "{only_it} matches only found iteratively"
    );
    assert!(
        (only_pr as f64) < 0.05 * both as f64,
        "{only_pr} matches only found by projection"
    );
}

#[test]
fn fused_tracking_normal_equations_equal_the_reference() {
    let (fv, kv, t, p, cfg) = views(96, 72);
    let m = projective::associate(&fv, &kv, &t.inverse(), &cfg.matching);
    let r = build_normal_eq(&fv, &kv, &m, &t, &p);
    for scale in [true, false] {
        let f = projective::tracking_normal_eq(&fv, &kv, &t, &p, cfg.matching.dist_thresh, scale);
        assert_eq!(f.count, r.count);
        let d = if scale { 7 } else { 6 };
        let (fh, rh) = (
            f.h.view((0, 0), (d, d)).into_owned(),
            r.h.view((0, 0), (d, d)).into_owned(),
        );
        assert!(
            (fh - &rh).abs().max() < 1e-9 * rh.abs().max(),
            "H differs:\n{}\n{}",
            f.h,
            r.h
        );
        let (fg, rg) = (f.g.rows(0, d).into_owned(), r.g.rows(0, d).into_owned());
        assert!(
            (fg - &rg).abs().max() < 1e-9 * rg.abs().max(),
            "g differs:\n{}\n{}",
            f.g,
            r.g
        );
        assert!((f.cost - r.cost).abs() < 1e-9 * r.cost);
        if !scale {
            assert!(f.h.row(6).iter().all(|v| *v == 0.0) && f.g[6] == 0.0);
        }
    }
}

#[test]
fn fused_edge_normal_equations_equal_the_reference() {
    let (fv, kv, t_wf, p, cfg) = views(96, 72);
    // Two keyframes with world poses; edge: points of `fv` (source) seen from `kv`.
    let t_wk = common::se3([0.3, 0.2, 1.0], 10.0, [0.2, -0.1, 0.4]);
    let t_ws = t_wk.compose(&t_wf);
    let t_ws = Sim3::new(t_ws.rotation, t_ws.translation, 1.05);
    let t_wm = Sim3::new(t_wk.rotation, t_wk.translation, 1.05);
    let t_src_meas = t_ws.inverse().compose(&t_wm);
    let m = projective::associate(&fv, &kv, &t_src_meas, &cfg.matching);
    let t_m_inv = t_wm.inverse();
    let t_ms = t_m_inv.compose(&t_ws);
    let (mut h, mut g, mut cost) = (Matrix7::zeros(), Vector7::zeros(), 0.0);
    for q in 0..kv.len() {
        if !m.valid[q] {
            continue;
        }
        let x = fv.points[m.idx[q] as usize];
        let x = Vector3::new(x[0] as f64, x[1] as f64, x[2] as f64);
        let Some(info) = point_info(&kv, q, &t_ms.act(&x), &p) else {
            continue;
        };
        let d = world_point_jacobian(&t_m_inv, &t_ws.act(&x));
        h += d.transpose() * (info.m * d);
        g += d.transpose() * info.v;
        cost += info.cost;
    }
    let f = projective::edge_normal_eq(&fv, &t_ws, &kv, &t_wm, &p, cfg.matching.dist_thresh, true);
    assert!(rel_diff(&f.h, &h) < 1e-9, "H differs:\n{}\n{}", f.h, h);
    assert!(
        (f.g - g).abs().max() < 1e-9 * g.abs().max(),
        "g differs:\n{}\n{}",
        f.g,
        g
    );
    assert!((f.cost - cost).abs() < 1e-9 * cost);
}

#[test]
fn log_ratio_matches_ln() {
    for &(a, b) in &[
        (1.0, 1.0),
        (2.0, 1.9),
        (0.5, 0.55),
        (3.0, 2.4),
        (1.0, 1.22),
        (1.0, 3.0),
        (5.0, 0.7),
    ] {
        let (x, y) = (projective::ln_ratio(a, b), (a / b).ln());
        assert!(
            (x - y).abs() <= 1e-14 * y.abs().max(1e-300) + 1e-16,
            "ln({a}/{b}): {x} vs {y}"
        );
    }
}

#[test]
fn chunked_reduction_is_deterministic_and_equals_the_sequential_sum() {
    // Values of very different magnitudes, so the summation order matters in the last bits.
    let n = 50_000;
    let x: Vec<f64> = (0..n)
        .map(|i| ((i * 7919) % 1000) as f64 * 10f64.powi((i % 13) as i32 - 6))
        .collect();
    let map = |r: std::ops::Range<usize>| r.map(|i| x[i]).sum::<f64>();
    let naive: f64 = x.iter().sum();
    let seq = chunked_reduce_seq(n, CHUNK, map, |a, b| a + b).unwrap();
    assert!((seq - naive).abs() < 1e-12 * naive.abs());
    for threads in [1, 2, 3, 8] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        for _ in 0..3 {
            let par = pool
                .install(|| chunked_reduce(n, CHUNK, map, |a, b| a + b))
                .unwrap();
            assert_eq!(par.to_bits(), seq.to_bits(), "{threads} threads");
        }
    }
    assert!(chunked_reduce(0, CHUNK, map, |a, b| a + b).is_none());
}

#[test]
fn normal_equations_are_bit_identical_for_any_thread_count() {
    let (fv, kv, t, p, cfg) = views(160, 120);
    let run = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            projective::tracking_normal_eq(&fv, &kv, &t, &p, cfg.matching.dist_thresh, false)
        })
    };
    let a = run(1);
    for threads in [1, 2, 5] {
        let b = run(threads);
        assert_eq!(
            a.h.as_slice()
                .iter()
                .map(|v| v.to_bits())
                .collect::<Vec<_>>(),
            b.h.as_slice()
                .iter()
                .map(|v| v.to_bits())
                .collect::<Vec<_>>()
        );
        assert_eq!(a.g, b.g);
        assert_eq!(a.cost.to_bits(), b.cost.to_bits());
    }
}

#[test]
fn vector_and_portable_lanes_give_the_same_bits() {
    let (fv, kv, t, p, cfg) = views(160, 120);
    let bits = |eq: &rust3r_slam::tracker::NormalEq| -> Vec<u64> {
        eq.h.iter()
            .chain(eq.g.iter())
            .chain([&eq.cost])
            .map(|v| v.to_bits())
            .collect()
    };
    let a = projective::tracking_normal_eq(&fv, &kv, &t, &p, cfg.matching.dist_thresh, true);
    projective::FORCE_PORTABLE.store(true, std::sync::atomic::Ordering::Relaxed);
    let b = projective::tracking_normal_eq(&fv, &kv, &t, &p, cfg.matching.dist_thresh, true);
    projective::FORCE_PORTABLE.store(false, std::sync::atomic::Ordering::Relaxed);
    assert_eq!(a.count, b.count);
    assert_eq!(bits(&a), bits(&b));
}

#[test]
fn checkerboard_sums_half_the_pixels() {
    let (fv, kv, t, mut p, cfg) = views(96, 72);
    let full = projective::tracking_normal_eq(&fv, &kv, &t, &p, cfg.matching.dist_thresh, false);
    p.checkerboard = true;
    let half = projective::tracking_normal_eq(&fv, &kv, &t, &p, cfg.matching.dist_thresh, false);
    // The reference over the even pixels only.
    let mut m = projective::associate(&fv, &kv, &t.inverse(), &cfg.matching);
    for (q, v) in m.valid.iter_mut().enumerate() {
        *v &= (q % kv.width + q / kv.width) % 2 == 0;
    }
    let r = build_normal_eq(&fv, &kv, &m, &t, &p);
    assert_eq!(half.count, r.count);
    assert!(
        (half.count as f64 - full.count as f64 / 2.0).abs() < 0.02 * full.count as f64,
        "{} of {}",
        half.count,
        full.count
    );
    let (hh, rh) = (
        half.h.view((0, 0), (6, 6)).into_owned(),
        r.h.view((0, 0), (6, 6)).into_owned(),
    );
    assert!((hh - &rh).abs().max() < 1e-9 * rh.abs().max());
}
