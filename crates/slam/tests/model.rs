//! Frame-to-model view rendering (`rust3r_slam::model`) against the CPU ray caster of
//! tests/common, and frame-to-model tracking on a rendered room.

mod common;

use common::*;
use rust3r_geometry::Sim3;
use rust3r_slam::SlamConfig;
use rust3r_slam::model::{ModelSource, render_model};
use rust3r_slam::tracker::Tracker;

/// Two keyframes of the room, rendered by ray casting; the model of both rendered into a third
/// view agrees with that view's own ray-cast depth to a fraction of a millimetre where it
/// covers it, and covers the parts that only one of the keyframes sees.
#[test]
fn model_view_matches_the_ray_cast_depth() {
    let scene = room();
    let cam = camera(160, 120);
    let a = se3([0.0, 1.0, 0.0], 10.0, [0.0, 0.0, -0.5]);
    let b = se3([0.0, 1.0, 0.0], -12.0, [0.1, 0.05, -0.4]);
    let view = se3([0.0, 1.0, 0.0], -1.0, [0.05, 0.02, -0.45]);
    let pa = render_textured(&scene, &cam, &a, 6.0, 1.0);
    let pb = render_textured(&scene, &cam, &b, 6.0, 1.0);
    let truth = render_textured(&scene, &cam, &view, 6.0, 1.0);
    let src = |t_wc: Sim3, pm| ModelSource {
        t_wc,
        pointmap: pm,
        conf: &pm.conf,
    };
    let model = render_model(&[src(a, &pa), src(b, &pb)], &cam, 160, 120, &view);
    let single = render_model(&[src(a, &pa)], &cam, 160, 120, &view);
    let covered = |m: &rust3r_slam::Pointmap| m.conf.iter().filter(|c| **c > 0.0).count();
    let mut err: Vec<f64> = Vec::new();
    for i in 0..model.len() {
        if model.conf[i] > 0.0 && truth.conf[i] > 0.0 {
            err.push((model.points[i][2] as f64 - truth.points[i][2] as f64).abs());
            // On the pixel's ray, as a depth image's points are.
            let (u, v) = ((i % 160) as f64, (i / 160) as f64);
            let z = model.points[i][2] as f64;
            let x = (u - cam.cx) / cam.fx * z;
            let y = (v - cam.cy) / cam.fy * z;
            assert!((model.points[i][0] as f64 - x).abs() < 1e-5 * z.max(1.0));
            assert!((model.points[i][1] as f64 - y).abs() < 1e-5 * z.max(1.0));
        }
    }
    err.sort_by(|x, y| x.total_cmp(y));
    let median = err[err.len() / 2];
    let p90 = err[err.len() * 90 / 100];
    eprintln!(
        "model view: {} of {} pixels covered (one keyframe: {}); depth error median {:.2e} m, 90th percentile {:.2e} m",
        covered(&model),
        model.len(),
        covered(&single),
        median,
        p90
    );
    assert!(median < 2e-4, "median depth error {median} m");
    // The rest are pixels at depth edges, where the footprint straddles two surfaces.
    assert!(p90 < 1e-3, "90th percentile depth error {p90} m");
    assert!(
        covered(&model) > covered(&single) + model.len() / 50,
        "the second keyframe should fill what the first does not see: {} vs {}",
        covered(&model),
        covered(&single)
    );
    assert!(covered(&model) as f64 > 0.9 * model.len() as f64);
    // Colours come from the sources: the mean grey level matches the ray-cast view's.
    let mean = |m: &rust3r_slam::Pointmap| {
        let (s, n) = (0..m.len())
            .filter(|&i| m.conf[i] > 0.0 && truth.conf[i] > 0.0)
            .fold((0.0, 0usize), |(s, n), i| {
                (s + m.colors[i][0] as f64, n + 1)
            });
        s / n as f64
    };
    assert!((mean(&model) - mean(&truth)).abs() < 3.0);
}

/// A frame that sees, besides the keyframe's part of the room, a part only an older keyframe
/// saw: tracked against the model of both, it is more accurate than against the keyframe
/// alone, and its statistics are those against the keyframe.
#[test]
fn frame_to_model_tracking_recovers_the_pose() {
    let scene = room();
    let cam = camera(160, 120);
    let old = se3([0.0, 1.0, 0.0], -20.0, [0.0, 0.0, -0.5]);
    let kf = se3([0.0, 1.0, 0.0], 15.0, [0.05, 0.0, -0.5]);
    let frame = se3([0.0, 1.0, 0.0], -5.0, [0.03, 0.01, -0.47]);
    let p_old = render_textured(&scene, &cam, &old, 6.0, 1.0);
    let p_kf = render_textured(&scene, &cam, &kf, 6.0, 1.0);
    let p_fr = render_textured(&scene, &cam, &frame, 6.0, 1.0);
    let cfg = SlamConfig::rgbd();
    let tracker = Tracker {
        cfg: cfg.tracking.clone(),
        matching: cfg.matching.clone(),
        levels: cfg.rgbd.pyramid_levels,
        optimize_scale: false,
    };
    // The predicted pose is 2 cm and 1 degree off.
    let predicted = frame.compose(&se3([0.0, 1.0, 0.0], 1.0, [0.02, 0.0, 0.0]));
    let t_kf_pred = kf.inverse().compose(&predicted);
    let truth = kf.inverse().compose(&frame);
    let model = render_model(
        &[
            ModelSource {
                t_wc: kf,
                pointmap: &p_kf,
                conf: &p_kf.conf,
            },
            ModelSource {
                t_wc: old,
                pointmap: &p_old,
                conf: &p_old.conf,
            },
        ],
        &cam,
        160,
        120,
        &predicted,
    );
    let on_model = tracker.track_model(
        &p_fr,
        &p_fr.conf,
        &model,
        &p_kf,
        &p_kf.conf,
        Some(cam),
        &t_kf_pred,
    );
    let on_kf = tracker.track(&p_fr, &p_fr.conf, &p_kf, &p_kf.conf, Some(cam), &t_kf_pred);
    let (deg_m, m_m) = pose_error(&on_model.t_kf_frame, &truth);
    let (deg_k, m_k) = pose_error(&on_kf.t_kf_frame, &truth);
    eprintln!(
        "frame-to-model {m_m:.5} m / {deg_m:.4} deg (match {:.3}); frame-to-keyframe {m_k:.5} m / {deg_k:.4} deg (match {:.3})",
        on_model.match_frac, on_kf.match_frac
    );
    assert!(
        m_m < 2e-3 && deg_m < 0.1,
        "frame-to-model error {m_m} m, {deg_m} deg"
    );
    // Measured: 0.19 mm against the model, 0.65 mm against the keyframe alone.
    assert!(
        m_m < m_k,
        "frame-to-model {m_m} m, frame-to-keyframe {m_k} m"
    );
    // The statistics are those against the keyframe, as for frame-to-keyframe tracking.
    assert!((on_model.match_frac - on_kf.match_frac).abs() < 0.05);
    assert!(on_model.observation.is_some() && !on_model.lost);
}
