//! Tuning aid: tracks redkitchen frames against frame 0 and prints the relative-pose error
//! against the ground truth. `cargo run --release --example track_pairs -- [sigma_pixel]
//! [sigma_depth] [sigma_plane] [downsample] [levels]`.

use std::path::Path;

use rust3r_io::datasets;
use rust3r_slam::output::pose_to_sim3;
use rust3r_slam::pointmap::PointmapFrontEnd;
use rust3r_slam::tracker::Tracker;
use rust3r_slam::{RgbdFrontEnd, SlamConfig};

fn main() {
    let args: Vec<f64> = std::env::args()
        .skip(1)
        .map(|a| a.parse().unwrap())
        .collect();
    let mut cfg = SlamConfig::rgbd();
    if let Some(v) = args.first() {
        cfg.tracking.sigma_pixel = *v;
    }
    if let Some(v) = args.get(1) {
        cfg.tracking.sigma_depth = *v;
    }
    if let Some(v) = args.get(2) {
        cfg.tracking.sigma_plane = *v;
    }
    if let Some(v) = args.get(3) {
        cfg.rgbd.downsample = *v as usize;
    }
    if let Some(v) = args.get(4) {
        cfg.rgbd.pyramid_levels = *v as usize;
    }
    let base = args.get(5).map(|v| *v as usize).unwrap_or(0);
    let ds = datasets::open(Path::new("../shared/data/redkitchen"), None, 1).unwrap();
    let mut fe = RgbdFrontEnd::new(
        ds.depth_intrinsics().unwrap(),
        cfg.rgbd.downsample,
        cfg.rgbd.min_depth,
        cfg.rgbd.max_depth,
    );
    let cam = fe.camera();
    let f0 = ds.frame(base).unwrap();
    let kf = fe.pointmap(&f0).unwrap();
    let g0 = pose_to_sim3(&f0.gt_pose.unwrap());
    let tracker = Tracker {
        cfg: cfg.tracking.clone(),
        matching: cfg.matching.clone(),
        levels: cfg.rgbd.pyramid_levels,
        optimize_scale: false,
    };
    let mut t_prev = rust3r_geometry::Sim3::identity();
    let mut sum = 0.0;
    let mut n = 0;
    let start = std::time::Instant::now();
    for k in (base + 5..base + 95).step_by(5) {
        let f = ds.frame(k).unwrap();
        let pm = fe.pointmap(&f).unwrap();
        let gt = g0.inverse().compose(&pose_to_sim3(&f.gt_pose.unwrap()));
        let r = tracker.track(&pm, &pm.conf, &kf, &kf.conf, cam, &t_prev);
        t_prev = r.t_kf_frame;
        let d = gt.inverse().compose(&r.t_kf_frame);
        let te = (gt.translation - r.t_kf_frame.translation).norm();
        sum += te * te;
        n += 1;
        println!(
            "{k:3} gt |t| {:.3} m  err {:.4} m {:.3} deg  match {:.2} iters {}",
            gt.translation.norm(),
            te,
            d.rotation.angle().to_degrees(),
            r.match_frac,
            r.iterations
        );
    }
    println!(
        "rms translation error {:.4} m, {:.2} s",
        (sum / n as f64).sqrt(),
        start.elapsed().as_secs_f64()
    );
}
