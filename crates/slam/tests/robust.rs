//! Robust RGB-D tracking on synthetic sequences with exact ground truth: a textured room ray
//! cast on the CPU (tests/common), seen by a camera that moves fast, faces a single wall, and
//! comes back to where it started.

mod common;

use common::*;
use nalgebra::Vector3;
use rust3r_geometry::{PinholeCamera, Sim3};
use rust3r_io::IoError;
use rust3r_io::datasets::{Dataset, Frame, Pose};
use rust3r_slam::tracker::{Tracker, constraint_ratio};
use rust3r_slam::{Pointmap, PointmapFrontEnd, SlamConfig, SlamError, run_slam};

fn tracker(cfg: &SlamConfig) -> Tracker {
    Tracker {
        cfg: cfg.tracking.clone(),
        matching: cfg.matching.clone(),
        levels: cfg.rgbd.pyramid_levels,
        optimize_scale: false,
    }
}

/// Camera facing the back wall (z = 3) from 0.8 m, looking straight at it: only the plane is
/// in view.
fn wall_pose(dx: f64) -> Sim3 {
    se3([0.0, 1.0, 0.0], 0.0, [-1.8 + dx, 0.6, 2.2])
}

#[test]
fn photometric_term_pins_a_camera_sliding_along_a_wall() {
    let scene = room();
    let cam = camera(160, 120);
    let kf_pose = wall_pose(0.0);
    let fr_pose = wall_pose(0.03).compose(&se3([0.0, 0.0, 1.0], 1.0, [0.0, 0.0, 0.0]));
    let kf = render_textured(&scene, &cam, &kf_pose, 6.0, 1.0);
    let fr = render_textured(&scene, &cam, &fr_pose, 6.0, 1.0);
    assert!(kf.conf.iter().all(|c| *c > 0.0), "the wall fills the view");
    let truth = kf_pose.inverse().compose(&fr_pose);
    let mut cfg = SlamConfig::rgbd();
    cfg.tracking.finest_level = 0;
    // Depth alone: the plane leaves the in-plane translation free.
    cfg.tracking.sigma_photo = 0.0;
    let geo = tracker(&cfg).track(&fr, &fr.conf, &kf, &kf.conf, Some(cam), &Sim3::identity());
    cfg.tracking.sigma_photo = 0.05;
    let hyb = tracker(&cfg).track(&fr, &fr.conf, &kf, &kf.conf, Some(cam), &Sim3::identity());
    let (geo_deg, geo_m) = pose_error(&geo.t_kf_frame, &truth);
    let (hyb_deg, hyb_m) = pose_error(&hyb.t_kf_frame, &truth);
    eprintln!(
        "plane: depth only {geo_m:.4} m / {geo_deg:.3} deg (constraint {:.2e}); hybrid {hyb_m:.4} m / {hyb_deg:.3} deg (constraint {:.2e})",
        geo.constraint, hyb.constraint
    );
    assert!(
        geo_m > 0.01,
        "depth alone should not recover the slide along the plane: {geo_m} m"
    );
    assert!(
        hyb_m < 0.003 && hyb_deg < 0.2,
        "hybrid tracking error {hyb_m} m, {hyb_deg} deg"
    );
    // The detector sees the difference from the normal equations alone.
    assert!(
        geo.constraint < 1e-4,
        "depth-only constraint ratio {}",
        geo.constraint
    );
    assert!(
        hyb.constraint > 1e-4,
        "hybrid constraint ratio {}",
        hyb.constraint
    );
    // With the default threshold the depth-only solve is flagged, the hybrid one is not.
    let min = SlamConfig::rgbd().tracking.min_constraint;
    assert!(
        geo.weak && !hyb.weak,
        "flags: depth only {}, hybrid {} (threshold {min})",
        geo.weak,
        hyb.weak
    );
}

#[test]
fn constraint_ratio_is_zero_for_an_empty_or_rank_deficient_system() {
    assert_eq!(
        constraint_ratio(&rust3r_geometry::Matrix7::zeros(), 1.0),
        0.0
    );
    let mut h = rust3r_geometry::Matrix7::identity();
    h[(1, 1)] = 0.0;
    assert_eq!(constraint_ratio(&h, 1.0), 0.0);
    h[(1, 1)] = f64::NAN;
    assert_eq!(
        constraint_ratio(&h, 1.0),
        0.0,
        "a non-finite system counts as unconstrained"
    );
    let h = rust3r_geometry::Matrix7::identity();
    assert!((constraint_ratio(&h, 1.0) - 1.0).abs() < 1e-12);
    // Translation columns are scaled by the depth: at 2 m they weigh 4x.
    assert!((constraint_ratio(&h, 2.0) - 0.25).abs() < 1e-12);
}

#[test]
fn hybrid_tracking_survives_an_exposure_change() {
    let scene = room();
    let cam = camera(160, 120);
    let kf_pose = wall_pose(0.0);
    let fr_pose = wall_pose(0.02);
    let kf = render_textured(&scene, &cam, &kf_pose, 6.0, 1.0);
    // The frame is 30 % brighter (auto exposure).
    let fr = render_textured(&scene, &cam, &fr_pose, 6.0, 1.3);
    let mut cfg = SlamConfig::rgbd();
    cfg.tracking.finest_level = 0;
    let r = tracker(&cfg).track(&fr, &fr.conf, &kf, &kf.conf, Some(cam), &Sim3::identity());
    let (deg, m) = pose_error(&r.t_kf_frame, &kf_pose.inverse().compose(&fr_pose));

    eprintln!("exposure x1.3: {m:.4} m, {deg:.3} deg");
    assert!(m < 0.004 && deg < 0.2, "error {m} m, {deg} deg");
}

/// A data set of pre-rendered frames (the front end below holds the pointmaps).
struct Synthetic {
    poses: Vec<Sim3>,
    cam: PinholeCamera,
}

fn pose_matrix(t: &Sim3) -> Pose {
    let m = t.to_se3().matrix();
    std::array::from_fn(|r| std::array::from_fn(|c| m[(r, c)]))
}

impl Dataset for Synthetic {
    fn name(&self) -> &str {
        "synthetic room"
    }
    fn len(&self) -> usize {
        self.poses.len()
    }
    fn intrinsics(&self) -> Option<PinholeCamera> {
        let c = &self.cam;
        Some(PinholeCamera::new(
            c.fx, c.fy, c.cx, c.cy, c.width, c.height,
        ))
    }
    fn depth_intrinsics(&self) -> Option<PinholeCamera> {
        self.intrinsics()
    }
    fn frame(&self, i: usize) -> Result<Frame, IoError> {
        Ok(Frame {
            index: i,
            timestamp: i as f64 / 30.0,
            rgb: image::RgbImage::new(1, 1),
            depth: None,
            gt_pose: Some(pose_matrix(&self.poses[i])),
            rgb_path: format!("synthetic-{i}").into(),
        })
    }
    fn ground_truth(&self) -> Option<Vec<(f64, Pose)>> {
        Some(
            self.poses
                .iter()
                .enumerate()
                .map(|(i, p)| (i as f64 / 30.0, pose_matrix(p)))
                .collect(),
        )
    }
}

struct Rendered {
    frames: Vec<Pointmap>,
    cam: PinholeCamera,
}

impl PointmapFrontEnd for Rendered {
    fn name(&self) -> &str {
        "rendered"
    }
    fn pointmap(&mut self, frame: &Frame) -> Result<Pointmap, SlamError> {
        Ok(self.frames[frame.index].clone())
    }
    fn camera(&self) -> Option<PinholeCamera> {
        Some(self.cam)
    }
    fn is_metric(&self) -> bool {
        true
    }
}

/// The test trajectory: a slow start looking into the room, a fast pan and dolly (6 cm and 3
/// degrees per frame), a slide along the back wall seen alone from 0.8 m, and the way back to
/// the start (a loop).
fn trajectory() -> Vec<Sim3> {
    let start = se3([0.0, 1.0, 0.0], 0.0, [0.0, 0.0, -0.5]);
    let mut out = Vec::new();
    // Slow: 1 cm per frame to the right.
    for i in 0..15 {
        out.push(start.compose(&se3(
            [0.0, 1.0, 0.0],
            0.2 * i as f64,
            [0.01 * i as f64, 0.0, 0.0],
        )));
    }
    // Fast: towards the wall corner, panning left, 6 cm and 3 degrees per frame.
    let a = *out.last().expect("slow part");
    for i in 1..=10 {
        out.push(a.compose(&se3(
            [0.0, 1.0, 0.0],
            -3.0 * i as f64,
            [-0.05 * i as f64, 0.02 * i as f64, 0.03 * i as f64],
        )));
    }
    // Interpolate to the wall view, then slide along the wall.
    let b = *out.last().expect("fast part");
    let w0 = wall_pose(0.0);
    for i in 1..=35 {
        out.push(interp(&b, &w0, i as f64 / 35.0));
    }
    for i in 1..=20 {
        out.push(wall_pose(0.015 * i as f64));
    }
    // Back to the start.
    let c = *out.last().expect("wall part");
    for i in 1..=50 {
        out.push(interp(&c, &start, i as f64 / 50.0));
    }
    out
}

fn interp(a: &Sim3, b: &Sim3, s: f64) -> Sim3 {
    let d = a.inverse().compose(b).log();
    a.compose(&Sim3::exp(&(d * s)))
}

fn run(cfg: &SlamConfig, poses: &[Sim3]) -> (rust3r_slam::SlamResult, Vec<f64>) {
    run_scaled(cfg, poses, |_| 1.0)
}

/// [`run`] with frame `i`'s depth scaled by `scale(i)`: a depth bias that makes tracking drift.
fn run_scaled(
    cfg: &SlamConfig,
    poses: &[Sim3],
    scale: impl Fn(usize) -> f32,
) -> (rust3r_slam::SlamResult, Vec<f64>) {
    let cam = camera(160, 120);
    let scene = room();
    let frames: Vec<Pointmap> = poses
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let mut pm = render_textured(&scene, &cam, p, 6.0, 1.0);
            let s = scale(i);
            pm.points
                .iter_mut()
                .for_each(|x| x.iter_mut().for_each(|v| *v *= s));
            pm
        })
        .collect();
    let ds = Synthetic {
        poses: poses.to_vec(),
        cam,
    };
    let mut front = Rendered { frames, cam };
    let r = run_slam(&ds, &mut front, cfg, None, |_| {}).expect("slam runs");
    // Errors against the truth, in the first frame's coordinates (the SLAM's origin).
    let est = r.frame_poses();
    let origin = poses[0];
    let err: Vec<f64> = est
        .iter()
        .zip(poses)
        .map(|((_, e), g)| (origin.compose(e).translation - g.translation).norm())
        .collect();
    (r, err)
}

#[test]
fn fast_motion_and_a_lone_wall_stay_on_track() {
    let poses = trajectory();
    let mut cfg = SlamConfig::rgbd();
    cfg.single_thread = true;
    let (r, err) = run(&cfg, &poses);
    let max = err
        .iter()
        .copied()
        .fold(0.0f64, |a, b| if b.is_nan() || b > a { b } else { a });
    let rmse = (err.iter().map(|e| e * e).sum::<f64>() / err.len() as f64).sqrt();
    eprintln!(
        "synthetic, hybrid + motion prior: rmse {rmse:.4} m, max {max:.4} m, {} keyframes, {} weak",
        r.keyframes.len(),
        r.frames.iter().filter(|f| f.weak).count()
    );
    assert!(r.frames.iter().all(|f| f.tracked), "a frame was lost");
    assert!(max < 0.02 && rmse < 0.01, "rmse {rmse} m, max {max} m");

    // The same with depth alone and no motion prior drifts on the wall.
    let mut base = cfg.clone();
    base.tracking.sigma_photo = 0.0;
    base.tracking.motion_prior = false;
    let (_, err0) = run(&base, &poses);
    let max0 = err0
        .iter()
        .copied()
        .fold(0.0f64, |a, b| if b.is_nan() || b > a { b } else { a });
    eprintln!("synthetic, depth only: max {max0:.4} m");
    assert!(
        max0 > 2.0 * max,
        "depth-only tracking should drift more: {max0} vs {max}"
    );
}

#[test]
fn wall_texture_has_gradients() {
    // The wall view must carry texture, or the photometric test above proves nothing.
    let cam = camera(160, 120);
    let pm = render_textured(&room(), &cam, &wall_pose(0.0), 6.0, 1.0);
    let g: Vec<f64> = pm.colors.iter().map(|c| c[0] as f64).collect();
    let mean = g.iter().sum::<f64>() / g.len() as f64;
    let var = g.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / g.len() as f64;
    assert!(var.sqrt() > 20.0, "texture contrast {}", var.sqrt());
    let _ = Vector3::<f64>::zeros();
}

#[test]
fn a_loop_after_injected_drift_is_found_by_appearance() {
    // The way to the wall is tracked on depth 8 % too far (a biased sensor): the camera comes
    // back to the start with the pose estimate off by decimetres, where the pose-proximity loop
    // search finds nothing; appearance finds the first keyframe again.
    let mut poses = trajectory();
    // After the return, the first part again (keyframes are made where the first ones were).
    let first: Vec<Sim3> = poses[1..25].to_vec();
    poses.extend(first);
    // Ramped in and out, so no frame sees a jump in the bias; the keyframes the camera returns
    // to (frames 0-25), the wall and the frames that return are unbiased.
    let ramp = |x: f64| x.clamp(0.0, 1.0);
    let biased = |i: usize| {
        (1.0 + 0.05 * (ramp((i as f64 - 25.0) / 8.0) - ramp((i as f64 - 45.0) / 10.0))) as f32
    };
    let mut cfg = SlamConfig::rgbd();
    cfg.single_thread = true;
    // Pose-proximity loops off, so only appearance can close the loop.
    cfg.retrieval.max_distance = 0.0;
    let mut without = cfg.clone();
    without.retrieval.appearance = false;
    let (r0, e0) = run_scaled(&without, &poses, biased);
    let (r1, e1) = run_scaled(&cfg, &poses, biased);
    let last = poses.len() - 1;
    let loops = |r: &rust3r_slam::SlamResult| {
        r.edges
            .iter()
            .filter(|e| e.j > e.i + 1)
            .map(|e| (e.i, e.j))
            .collect::<Vec<_>>()
    };
    eprintln!(
        "injected drift: end error without loop closure {:.3} m ({:?}), with {:.3} m ({:?})",
        e0[last],
        loops(&r0),
        e1[last],
        loops(&r1)
    );
    assert!(loops(&r0).is_empty());
    let rmse = |e: &[f64]| (e.iter().map(|x| x * x).sum::<f64>() / e.len() as f64).sqrt();
    eprintln!(
        "injected drift: rmse without {:.4} m, with {:.4} m",
        rmse(&e0),
        rmse(&e1)
    );
    assert!(
        e0[last] > 0.03,
        "the injected bias should make the estimate drift: {} m",
        e0[last]
    );
    assert!(
        loops(&r1).iter().any(|&(i, _)| i <= 2),
        "no loop edge back to the first keyframes: {:?}",
        loops(&r1)
    );
    // Measured: 4.2 cm at the end without the loop and 4.2 cm with it (3.1 cm both before the
    // back end's photometric term and lighter pixel residual): the loop is found and verified,
    // but the back end's correction does not pull the bias's error out (it sits in the
    // keyframes' geometry; docs/slam-rgbd.md, "Biased depth"). The test holds the detection and
    // that closing the loop does no harm.
    assert!(
        e1[last] < e0[last] + 0.005,
        "loop closure left {} m (without: {} m)",
        e1[last],
        e0[last]
    );
    assert!(
        rmse(&e1) < rmse(&e0) + 0.005 && rmse(&e1) < 0.07,
        "rmse with the loop {} m, without {} m",
        rmse(&e1),
        rmse(&e0)
    );
}
