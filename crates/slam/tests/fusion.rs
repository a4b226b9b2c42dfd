//! Keyframe pointmap fusion modes (MASt3R-SLAM `update_pointmap`).

use rust3r_geometry::Sim3;
use rust3r_slam::Pointmap;
use rust3r_slam::config::{FilteringScore, FusionMode};
use rust3r_slam::keyframes::{Keyframe, KeyframeStore};

fn kf(points: Vec<[f32; 3]>, conf: Vec<f32>) -> Keyframe {
    let n = points.len();
    let pm = Pointmap {
        width: n,
        height: 1,
        points,
        conf,
        colors: vec![[0; 3]; n],
    };
    Keyframe::new(
        0,
        0.0,
        Sim3::identity(),
        pm,
        "x.png".into(),
        FilteringScore::Median,
    )
}

fn close(a: [f32; 3], b: [f32; 3]) -> bool {
    a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-5)
}

#[test]
fn weighted_fusion_is_the_confidence_weighted_mean() {
    let mut k = kf(
        vec![[0.0, 0.0, 1.0], [1.0, 1.0, 2.0], [5.0, 5.0, 5.0]],
        vec![1.0, 2.0, 1.0],
    );
    k.fuse(
        &[[0.0, 0.0, 2.0], [4.0, 1.0, 2.0], [9.0, 9.0, 9.0]],
        &[1.0, 1.0, 0.0],
        FusionMode::Weighted,
        FilteringScore::Median,
    );
    let pm = &k.pointmap;
    assert!(close(pm.points[0], [0.0, 0.0, 1.5]));
    assert!(close(pm.points[1], [2.0, 1.0, 2.0]));
    assert!(
        close(pm.points[2], [5.0, 5.0, 5.0]),
        "an unobserved pixel must not move"
    );
    assert_eq!(pm.conf, vec![2.0, 3.0, 1.0]);
    assert_eq!(k.n, 2);
    assert_eq!(k.average_conf(), vec![1.0, 1.5, 0.5]);
}

#[test]
fn first_recent_best_score_and_indep_conf() {
    let base = || kf(vec![[0.0, 0.0, 1.0], [0.0, 0.0, 2.0]], vec![1.0, 3.0]);
    let obs1 = ([[0.0, 0.0, 1.1], [0.0, 0.0, 2.1]], [2.0f32, 2.0]);
    let obs2 = ([[0.0, 0.0, 1.2], [0.0, 0.0, 2.2]], [0.5f32, 4.0]);
    let s = FilteringScore::Median;

    let mut k = base();
    k.fuse(&obs1.0, &obs1.1, FusionMode::First, s);
    k.fuse(&obs2.0, &obs2.1, FusionMode::First, s);
    assert!(
        close(k.pointmap.points[0], [0.0, 0.0, 1.1]),
        "first keeps the first observation"
    );
    assert_eq!(k.n_updates, 3);

    let mut k = base();
    k.fuse(&obs1.0, &obs1.1, FusionMode::Recent, s);
    k.fuse(&obs2.0, &obs2.1, FusionMode::Recent, s);
    assert!(
        close(k.pointmap.points[0], [0.0, 0.0, 1.2])
            && close(k.pointmap.points[1], [0.0, 0.0, 2.2])
    );

    // Scores (median, lower middle): base 1.0, obs1 2.0, obs2 0.5.
    let mut k = base();
    k.fuse(&obs1.0, &obs1.1, FusionMode::BestScore, s);
    k.fuse(&obs2.0, &obs2.1, FusionMode::BestScore, s);
    assert!(
        close(k.pointmap.points[0], [0.0, 0.0, 1.1]),
        "best score keeps obs1"
    );
    assert_eq!(k.score, 2.0);
    let mut k = base();
    k.fuse(
        &obs2.0,
        &obs2.1,
        FusionMode::BestScore,
        FilteringScore::Mean,
    );
    assert!(
        close(k.pointmap.points[0], [0.0, 0.0, 1.2]),
        "mean of obs2 (2.25) beats 2.0"
    );

    let mut k = base();
    k.fuse(&obs1.0, &obs1.1, FusionMode::IndepConf, s);
    k.fuse(&obs2.0, &obs2.1, FusionMode::IndepConf, s);
    assert!(
        close(k.pointmap.points[0], [0.0, 0.0, 1.1]),
        "pixel 0: obs1 (2.0) beats 1.0 and 0.5"
    );
    assert!(
        close(k.pointmap.points[1], [0.0, 0.0, 2.2]),
        "pixel 1: obs2 (4.0) beats 3.0"
    );
    assert_eq!(k.pointmap.conf, vec![2.0, 4.0]);
}

#[test]
fn weighted_spherical_averages_radius_and_angles() {
    // Two points at the same direction, radii 1 and 3, equal weights: radius 2, same direction.
    let dir = [0.3f32, -0.2, 0.9];
    let n = (dir[0] * dir[0] + dir[1] * dir[1] + dir[2] * dir[2]).sqrt();
    let u = [dir[0] / n, dir[1] / n, dir[2] / n];
    let mut k = kf(vec![u], vec![1.0]);
    k.fuse(
        &[[3.0 * u[0], 3.0 * u[1], 3.0 * u[2]]],
        &[1.0],
        FusionMode::WeightedSpherical,
        FilteringScore::Median,
    );
    assert!(
        close(k.pointmap.points[0], [2.0 * u[0], 2.0 * u[1], 2.0 * u[2]]),
        "{:?}",
        k.pointmap.points[0]
    );
    // Equal radii, two directions: the angles average (not the Cartesian points).
    let a = [1.0f32, 0.0, 0.0];
    let b = [0.0f32, 1.0, 0.0];
    let mut k = kf(vec![a], vec![1.0]);
    k.fuse(
        &[b],
        &[1.0],
        FusionMode::WeightedSpherical,
        FilteringScore::Median,
    );
    let s = std::f32::consts::FRAC_1_SQRT_2;
    assert!(
        close(k.pointmap.points[0], [s, s, 0.0]),
        "{:?}",
        k.pointmap.points[0]
    );
}

#[test]
fn the_store_grows_without_preallocation() {
    let mut store = KeyframeStore::default();
    assert_eq!(store.memory_bytes(), 0);
    for i in 0..600 {
        let mut k = kf(vec![[0.0, 0.0, 1.0]; 4], vec![1.0; 4]);
        k.frame_index = i;
        assert_eq!(store.push(k), i);
    }
    assert_eq!(store.len(), 600);
    assert_eq!(store.last().unwrap().frame_index, 599);
    // Memory is proportional to what is stored.
    let one = store.frames[0].memory_bytes();
    assert_eq!(store.memory_bytes(), 600 * one);
}
