//! Speed aid: times the projective normal equations (one Gauss-Newton iteration's sums) per
//! pyramid level on a redkitchen pair, and one whole frame-to-keyframe track.
//! `RAYON_NUM_THREADS=1 target/release/examples/track_bench [reps]`.

use std::path::Path;
use std::time::Instant;

use rust3r_io::datasets;
use rust3r_slam::pointmap::PointmapFrontEnd;
use rust3r_slam::tracker::{LevelView, ResidualParams, Tracker};
use rust3r_slam::{RgbdFrontEnd, SlamConfig};

/// Process CPU time (user + system), seconds: load from other processes does not inflate it.
fn cpu_time() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    // Fields 14 and 15 of the file are utime and stime (clock ticks, 100 per second).
    let t = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (t(11) + t(12)) / 100.0
}

fn main() {
    let reps: usize = std::env::args().nth(1).map_or(50, |a| a.parse().unwrap());
    let cfg = SlamConfig::rgbd();
    let root =
        std::env::var("REDKITCHEN").unwrap_or_else(|_| "/work/shared/data/redkitchen".into());
    let ds = datasets::open(Path::new(&root), None, 1).unwrap();
    let mut fe = RgbdFrontEnd::new(
        ds.depth_intrinsics().unwrap(),
        cfg.rgbd.downsample,
        cfg.rgbd.min_depth,
        cfg.rgbd.max_depth,
    );
    let cam = fe.camera();
    let start = Instant::now();
    let f0 = ds.frame(0).unwrap();
    let f1 = ds.frame(10).unwrap();
    println!(
        "decode 2 frames: {:.2} ms",
        start.elapsed().as_secs_f64() * 1e3
    );
    let start = Instant::now();
    for _ in 0..20 {
        let _ = ds.frame(0).unwrap();
    }
    println!(
        "decode: {:.2} ms per frame",
        start.elapsed().as_secs_f64() * 1e3 / 20.0
    );
    let start = Instant::now();
    for _ in 0..20 {
        let _ = fe.pointmap(&f0).unwrap();
    }
    println!(
        "pointmap: {:.2} ms per frame",
        start.elapsed().as_secs_f64() * 1e3 / 20.0
    );
    let kf = fe.pointmap(&f0).unwrap();
    let fr = fe.pointmap(&f1).unwrap();
    let tracker = Tracker {
        cfg: cfg.tracking.clone(),
        matching: cfg.matching.clone(),
        levels: cfg.rgbd.pyramid_levels,
        optimize_scale: false,
    };
    let start = Instant::now();
    let r = tracker.track(
        &fr,
        &fr.conf,
        &kf,
        &kf.conf,
        cam,
        &rust3r_geometry::Sim3::identity(),
    );
    println!(
        "track: {:.2} ms, {} iterations, match {:.3}",
        start.elapsed().as_secs_f64() * 1e3,
        r.iterations,
        r.match_frac
    );
    let p = ResidualParams::tracking(&cfg.tracking);
    for level in 0..3 {
        let start = Instant::now();
        let fv = LevelView::build(&fr, &fr.conf, cam, level, &p, false, false);
        let kv = LevelView::build(&kf, &kf.conf, cam, level, &p, true, false);
        let build = start.elapsed().as_secs_f64() * 1e3;
        let start = Instant::now();
        let cpu0 = cpu_time();
        let mut count = 0;
        for _ in 0..reps {
            let eq = rust3r_slam::projective::tracking_normal_eq(
                &fv,
                &kv,
                &r.t_kf_frame,
                &p,
                cfg.matching.dist_thresh,
                false,
            );
            count = eq.count;
        }
        let wall = start.elapsed().as_secs_f64() / reps as f64;
        let dt = (cpu_time() - cpu0) / reps as f64;
        println!("level {level}: wall {:.3} ms per call", wall * 1e3);
        println!(
            "level {level}: views {build:.2} ms, normal equations {:.3} ms CPU ({count} matches of {}, {:.1} ns CPU per pixel)",
            dt * 1e3,
            kv.len(),
            dt * 1e9 / kv.len() as f64
        );
    }
}
