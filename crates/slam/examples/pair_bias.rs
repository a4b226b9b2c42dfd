//! Accuracy aid: tracks redkitchen frame `a + d` against frame `a` (raw depth, no fusion),
//! starting from the ground-truth relative pose, and prints the error of the converged pose
//! against the ground truth for `d` = 5, 10, .., 35: whether the cost's minimum itself moves away
//! from the ground truth with the baseline (docs/slam-rgbd.md, "Where the remaining error is").
//! `target/release/examples/pair_bias [config.yaml] [a,a,...]`; `PAIR_BIAS_K=fx,fy,cx,cy`
//! replaces the depth calibration, `PAIR_BIAS_RADIAL=a,b` scales every depth by
//! `1 + a r^2 + b r^4`.

use std::path::Path;

use rust3r_io::datasets;
use rust3r_slam::output::pose_to_sim3;
use rust3r_slam::pointmap::PointmapFrontEnd;
use rust3r_slam::tracker::Tracker;
use rust3r_slam::{RgbdFrontEnd, SlamConfig};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut cfg = SlamConfig::rgbd();
    if let Some(y) = args.first().filter(|a| a.ends_with(".yaml")) {
        cfg.apply_yaml_file(Path::new(y)).expect("config");
    }
    let bases: Vec<usize> = args
        .iter()
        .find(|a| !a.ends_with(".yaml"))
        .map(|a| a.split(',').map(|v| v.parse().expect("frame")).collect())
        .unwrap_or_else(|| vec![64, 101, 153, 178, 255, 354, 380, 408, 443]);
    let ds = datasets::open(Path::new("../shared/data/redkitchen"), None, 1).expect("data");
    let mut k = ds.depth_intrinsics().expect("intrinsics");
    // PAIR_BIAS_K="fx,fy,cx,cy": another depth calibration (the effect of a wrong one).
    if let Ok(v) = std::env::var("PAIR_BIAS_K") {
        let v: Vec<f64> = v.split(',').map(|x| x.parse().expect("number")).collect();
        (k.fx, k.fy, k.cx, k.cy) = (v[0], v[1], v[2], v[3]);
    }
    let mut fe = RgbdFrontEnd::new(
        k,
        cfg.rgbd.downsample,
        cfg.rgbd.min_depth,
        cfg.rgbd.max_depth,
    );
    let cam = fe.camera();
    let tracker = Tracker {
        cfg: cfg.tracking.clone(),
        matching: cfg.matching.clone(),
        levels: cfg.rgbd.pyramid_levels,
        optimize_scale: false,
    };
    // PAIR_BIAS_RADIAL="a,b": every depth scaled by 1 + a r^2 + b r^4 (r: the normalised
    // image radius, x/z and y/z): the effect of a radial depth distortion.
    let radial: Vec<f64> = std::env::var("PAIR_BIAS_RADIAL")
        .map(|v| v.split(',').map(|x| x.parse().expect("number")).collect())
        .unwrap_or_else(|_| vec![0.0, 0.0]);
    let undistort = |pm: &mut rust3r_slam::pointmap::Pointmap| {
        for p in pm.points.iter_mut() {
            if p[2] <= 0.0 {
                continue;
            }
            let (x, y) = ((p[0] / p[2]) as f64, (p[1] / p[2]) as f64);
            let r2 = x * x + y * y;
            let f = (1.0 + radial[0] * r2 + radial[1] * r2 * r2) as f32;
            for c in p.iter_mut() {
                *c *= f;
            }
        }
    };
    let (mut sum_t, mut sum_r, mut n) = (0.0, 0.0, 0);
    let (mut rot_est, mut rot_gt) = (0.0, 0.0);
    for a in bases {
        let fa = ds.frame(a).expect("frame");
        let mut kf = fe.pointmap(&fa).expect("pointmap");
        undistort(&mut kf);
        let ga = pose_to_sim3(&fa.gt_pose.expect("gt"));
        let mut line = format!("{a:3}:");
        for d in (5..=35).step_by(5) {
            let f = ds.frame(a + d).expect("frame");
            let mut pm = fe.pointmap(&f).expect("pointmap");
            undistort(&mut pm);
            let gt = ga.inverse().compose(&pose_to_sim3(&f.gt_pose.expect("gt")));
            let r = tracker.track(&pm, &pm.conf, &kf, &kf.conf, cam, &gt);
            let e = gt.inverse().compose(&r.t_kf_frame);
            let (te, re) = (
                100.0 * e.translation.norm(),
                e.rotation.angle().to_degrees(),
            );
            rot_est += r.t_kf_frame.rotation.angle();
            rot_gt += gt.rotation.angle();
            sum_t += te * te;
            sum_r += re * re;
            n += 1;
            line += &format!(" {d}: {te:.2}cm/{re:.2}d/{:.2}", r.match_frac);
        }
        println!("{line}");
    }
    println!(
        "rms from the ground truth: {:.2} cm, {:.2} deg; estimated / true rotation angle {:.3}",
        (sum_t / n as f64).sqrt(),
        (sum_r / n as f64).sqrt(),
        rot_est / rot_gt
    );
}
