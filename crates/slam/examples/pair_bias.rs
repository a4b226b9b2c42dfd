//! Accuracy aid: tracks redkitchen frame `a + d` against frame `a` (raw depth, no fusion),
//! starting from the ground-truth relative pose, and prints the error of the converged pose
//! against the ground truth for `d` = 5, 10, .., 35: whether the cost's minimum itself moves away
//! from the ground truth with the baseline (docs/slam-rgbd.md, "Where the remaining error is").
//! `target/release/examples/pair_bias [config.yaml] [a,a,...]`; `PAIR_BIAS_K=fx,fy,cx,cy`
//! replaces the depth calibration, `PAIR_BIAS_RADIAL=a,b` scales every depth by
//! `1 + a r^2 + b r^4`. `PAIR_BIAS_TSDF=K,voxel,trunc` replaces the raw frame `a` by a TSDF
//! model (crate::tsdf) integrated from frames `a - K ..= a` at their ground-truth poses and
//! ray-cast into frame `a`'s view (KinectFusion's frame-to-model reference);
//! `PAIR_BIAS_STEP=s` tracks frame `a + d` against frame `a + d - s` instead (per-step bias);
//! `PAIR_BIAS_VERBOSE=1` prints each tracked and true motion.

use std::path::Path;

use rust3r_io::datasets;
use rust3r_slam::output::pose_to_sim3;
use rust3r_slam::pointmap::PointmapFrontEnd;
use rust3r_slam::tracker::Tracker;
use rust3r_slam::tsdf::{Tsdf, TsdfParams};
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
    // PAIR_BIAS_TSDF="K,voxel,trunc": the reference is a TSDF of frames a-K..=a, ray-cast.
    let tsdf: Option<(usize, TsdfParams)> = std::env::var("PAIR_BIAS_TSDF").ok().map(|v| {
        let v: Vec<f64> = v.split(',').map(|x| x.parse().expect("number")).collect();
        (
            v[0] as usize,
            TsdfParams {
                voxel: v[1],
                trunc: v[2],
                ..TsdfParams::default()
            },
        )
    });
    // PAIR_BIAS_STEP=s: frame a + d is tracked against frame a + d - s (its reference built
    // the same way) instead of frame a: the per-step bias (KinectFusion tracks with s = 1).
    let step: Option<usize> = std::env::var("PAIR_BIAS_STEP")
        .ok()
        .map(|v| v.parse().expect("step"));
    // The reference of frame `r`: its raw pointmap, or the TSDF of frames r-K..=r ray-cast into
    // its ground-truth view; and its ground-truth pose.
    let mut fe_ref = fe.clone();
    let mut reference = |r: usize| {
        let fa = ds.frame(r).expect("frame");
        let mut kf = fe_ref.pointmap(&fa).expect("pointmap");
        undistort(&mut kf);
        let ga = pose_to_sim3(&fa.gt_pose.expect("gt"));
        if let Some((k_frames, params)) = tsdf {
            let cam = cam.expect("calibrated");
            let mut vol = Tsdf::new(params);
            for b in r.saturating_sub(k_frames)..=r {
                let fb = ds.frame(b).expect("frame");
                let mut pb = fe_ref.pointmap(&fb).expect("pointmap");
                undistort(&mut pb);
                vol.integrate(&pb, &cam, &pose_to_sim3(&fb.gt_pose.expect("gt")));
            }
            let rc = vol.raycast(&cam, &ga, cfg.rgbd.min_depth, cfg.rgbd.max_depth);
            // How the ray-cast differs from the raw frame (sanity): coverage, median |dz|.
            let mut dz: Vec<f64> = (0..kf.len())
                .filter(|&i| kf.conf[i] > 0.0 && rc.conf[i] > 0.0)
                .map(|i| (rc.points[i][2] - kf.points[i][2]).abs() as f64)
                .collect();
            dz.sort_by(f64::total_cmp);
            let cover = rc.conf.iter().filter(|&&c| c > 0.0).count() as f64 / rc.len() as f64;
            let raw = kf.conf.iter().filter(|&&c| c > 0.0).count() as f64 / kf.len() as f64;
            eprintln!(
                "{r}: {} blocks, ray-cast covers {:.0} % (raw {:.0} %), median |z - raw z| {:.2} mm",
                vol.num_blocks(),
                100.0 * cover,
                100.0 * raw,
                1000.0 * dz.get(dz.len() / 2).copied().unwrap_or(f64::NAN)
            );
            // PAIR_BIAS_DZ=file: appends the signed map z(ray-cast) - z(raw) (f32, NaN where
            // either is missing, row-major) of every reference: is the disagreement fixed in
            // the image (a per-pixel depth distortion)?
            if let Ok(path) = std::env::var("PAIR_BIAS_DZ") {
                use std::io::Write;
                let bytes: Vec<u8> = (0..kf.len())
                    .map(|i| {
                        if kf.conf[i] > 0.0 && rc.conf[i] > 0.0 {
                            rc.points[i][2] - kf.points[i][2]
                        } else {
                            f32::NAN
                        }
                    })
                    .flat_map(f32::to_le_bytes)
                    .collect();
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&path)
                    .and_then(|mut f| f.write_all(&bytes))
                    .expect("dz map");
            }
            kf = rc;
        }
        (kf, ga)
    };
    let (mut sum_t, mut sum_r, mut n) = (0.0, 0.0, 0);
    let (mut rot_est, mut rot_gt) = (0.0, 0.0);
    for a in bases {
        let mut line = format!("{a:3}:");
        let mut base = None;
        for d in (5..=35).step_by(5) {
            let (kf, ga) = match step {
                Some(s) => reference(a + d - s),
                None => base.get_or_insert_with(|| reference(a)).clone(),
            };
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
            // PAIR_BIAS_VERBOSE: the tracked and the true motion (translation, rotation).
            if std::env::var_os("PAIR_BIAS_VERBOSE").is_some() {
                let t = &r.t_kf_frame;
                eprintln!(
                    "{a} + {d}: tracked {:.2} cm {:.2} deg, ground truth {:.2} cm {:.2} deg, \
                     tracked - true (reference camera) {:.2?} cm",
                    100.0 * t.translation.norm(),
                    t.rotation.angle().to_degrees(),
                    100.0 * gt.translation.norm(),
                    gt.rotation.angle().to_degrees(),
                    (100.0 * (t.translation - gt.translation)).as_slice()
                );
            }
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
