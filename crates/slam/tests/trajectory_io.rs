//! Trajectory I/O, association and alignment unit tests.

#![allow(clippy::excessive_precision)]

use std::path::{Path, PathBuf};

use rust3r_geometry::nalgebra::{UnitQuaternion, Vector3};
use rust3r_geometry::{SE3, Sim3};
use rust3r_slam::{
    Align, AteOptions, SlamError, Trajectory, TrajectoryFormat, associate_trajectories,
    ate_from_trajectories, detect_format, eval_ate, matching_time_indices, parse_euroc, parse_tum,
    read_trajectory, read_trajectory_with_format, umeyama_alignment, write_tum,
};

fn data(name: &str) -> PathBuf {
    rust3r_testdata::data("trajectories").join(name)
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn reads_shared_files_with_detection() {
    let (gt, f) = read_trajectory_with_format(data("fr2_desk_groundtruth.txt")).unwrap();
    assert_eq!(f, TrajectoryFormat::Tum);
    assert_eq!(gt.len(), 20957);
    assert_eq!(gt.timestamps[0], 1311868163.8697);
    let p0 = &gt.poses[0];
    assert_eq!(p0.translation, Vector3::new(-0.1357, -1.4217, 1.4764));
    // TUM order qx qy qz qw = 0.6453 -0.5498 0.3363 -0.4101 (normalised)
    let q = p0.rotation.quaternion();
    let n = (0.6453f64.powi(2) + 0.5498f64.powi(2) + 0.3363f64.powi(2) + 0.4101f64.powi(2)).sqrt();
    assert!((q.i - 0.6453 / n).abs() < 1e-12 && (q.w + 0.4101 / n).abs() < 1e-12);

    let (v, f) = read_trajectory_with_format(data("V102_groundtruth.csv")).unwrap();
    assert_eq!(f, TrajectoryFormat::Euroc);
    assert_eq!(v.len(), 16702);
    // 1403715524907143168 ns -> s, quaternion w first (0.161996, 0.789985, -0.205376, 0.554528)
    assert!((v.timestamps[0] - 1403715524.907143168).abs() < 1e-6);
    assert_eq!(v.timestamps[0], 1403715524907143168f64 / 1e9);
    assert_eq!(
        v.poses[0].translation,
        Vector3::new(0.515356, 1.996773, 0.971104)
    );
    let q = v.poses[0].rotation.quaternion();
    assert!(q.w > 0.16 && q.w < 0.163 && q.i > 0.78 && q.k > 0.55);

    // scientific-notation TUM estimate
    let est = read_trajectory(data("V102.txt")).unwrap();
    assert_eq!(est.len(), 807);
    assert!(est.is_sorted());
}

#[test]
fn tum_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let mut t = Trajectory::default();
    for i in 0..10 {
        let q = UnitQuaternion::from_scaled_axis(Vector3::new(0.1 * i as f64, -0.05, 0.3));
        t.push(
            1305031102.160407 + 0.033 * i as f64,
            SE3::new(q, Vector3::new(i as f64 * 0.1, 1.0 / 3.0, -2.5)),
        );
    }
    let p = dir.path().join("out.txt");
    write_tum(&p, &t).unwrap();
    let back = read_trajectory(&p).unwrap();
    assert_eq!(back.timestamps, t.timestamps);
    for (a, b) in back.poses.iter().zip(&t.poses) {
        assert_eq!(a.translation, b.translation);
        assert!(a.rotation.angle_to(&b.rotation) < 1e-15);
    }
}

#[test]
fn parse_errors_name_file_and_line() {
    let path = Path::new("/some/dir/est.txt");
    let text = "# comment\n1.0 0 0 0 0 0 0 1\n\n2.0 0 0 0 0 0 1\n";
    match parse_tum(text, path) {
        Err(SlamError::Parse {
            path: p,
            line,
            message,
        }) => {
            assert_eq!(p, path);
            assert_eq!(line, 4);
            assert!(message.contains("8"), "{message}");
        }
        other => panic!("expected parse error, got {other:?}"),
    }
    let err = parse_tum("1.0 0 0 x 0 0 0 1\n", path).unwrap_err();
    let msg = err.to_string();
    assert!(msg.starts_with("/some/dir/est.txt:1:"), "{msg}");
    assert!(msg.contains("tz") && msg.contains("\"x\""), "{msg}");
    let err = parse_tum("1.0 0 0 0 0 0 0 0\n", path).unwrap_err();
    assert!(err.to_string().contains("zero norm"), "{err}");
    let err = parse_tum("1.0 0 0 nan 0 0 0 1\n", path).unwrap_err();
    assert!(err.to_string().contains("not finite"), "{err}");
    assert!(matches!(
        parse_tum("# only comments\n\n", path),
        Err(SlamError::EmptyTrajectory { .. })
    ));

    let e = Path::new("gt.csv");
    let err = parse_euroc("#timestamp,x\n1403715524907143168,0.5,2.0,0.9,1,0,0\n", e).unwrap_err();
    assert!(err.to_string().starts_with("gt.csv:2:"), "{err}");
    let err = parse_euroc("1403715524907143168,0.5,2.0,0.9,1,0,0,zz\n", e).unwrap_err();
    assert!(err.to_string().contains("q_RS_z"), "{err}");

    // missing file: I/O error naming the file
    let err = read_trajectory("/nonexistent/traj.txt").unwrap_err();
    assert!(matches!(err, SlamError::Io { .. }));
    assert!(err.to_string().contains("/nonexistent/traj.txt"), "{err}");
    // undetectable format
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "weird.txt", "1 2 3\n");
    let err = read_trajectory(&p).unwrap_err();
    assert!(matches!(err, SlamError::UnknownFormat { .. }), "{err}");
    assert!(err.to_string().contains("weird.txt"));
}

#[test]
fn euroc_parsing_details() {
    let text = "#timestamp [ns], p_RS_R_x [m], p_RS_R_y [m], p_RS_R_z [m], q_RS_w [], q_RS_x [], q_RS_y [], q_RS_z []\n\
                1000000000, 1, 2, 3, 0, 1, 0, 0\n\
                1500000000,4,5,6,1,0,0,0,9,9,9\n";
    let t = parse_euroc(text, Path::new("x.csv")).unwrap();
    assert_eq!(t.timestamps, vec![1.0, 1.5]);
    // (w, x, y, z) = (0, 1, 0, 0): 180 deg about x
    let p = t.poses[0].act(&Vector3::new(0.0, 1.0, 0.0));
    assert!((p - Vector3::new(1.0, 1.0, 3.0)).norm() < 1e-15);
    assert_eq!(t.poses[1].translation, Vector3::new(4.0, 5.0, 6.0));
    assert_eq!(
        detect_format(text, Path::new("x.txt")).unwrap(),
        TrajectoryFormat::Euroc
    );
    assert_eq!(
        detect_format("1 2 3 4 5 6 7 8", Path::new("x.csv")).unwrap(),
        TrajectoryFormat::Tum
    );
    assert_eq!(
        detect_format("", Path::new("x.csv")).unwrap(),
        TrajectoryFormat::Euroc
    );
    assert_eq!(
        detect_format("# nothing\n", Path::new("x.txt")).unwrap(),
        TrajectoryFormat::Tum
    );
}

#[test]
fn matching_replicates_evo() {
    // sorted path: nearest neighbour with ties going to the earlier stamp,
    // out-of-range stamps skipped, last index clamped
    let s2 = [1.0, 2.0, 3.0, 4.0];
    let s1 = [0.985, 0.995, 1.5, 2.004, 2.996, 4.0, 4.009, 4.02, 3.5];
    let (a, b) = matching_time_indices(&s1, &s2, 0.01, 0.0);
    assert_eq!(a, vec![1, 3, 4, 5, 6]);
    assert_eq!(b, vec![0, 1, 2, 3, 3]);
    // an index of stamps_2 may be matched several times (as in evo)
    let (a, b) = matching_time_indices(&[1.999, 2.0, 2.001], &s2, 0.01, 0.0);
    assert_eq!(a, vec![0, 1, 2]);
    assert_eq!(b, vec![1, 1, 1]);
    // exact midpoint: evo picks the lower stamp (diff_lb <= diff_ub)
    let (_, b) = matching_time_indices(&[1.5], &s2, 1.0, 0.0);
    assert_eq!(b, vec![0]);
    // offset applied to stamps_2
    let (a, b) = matching_time_indices(&[11.0, 12.0], &s2, 0.01, 10.0);
    assert_eq!((a, b), (vec![0, 1], vec![0, 1]));
    // unsorted path: linear arg-min (first minimum)
    let u2 = [3.0, 1.0, 2.0, 1.0];
    let (a, b) = matching_time_indices(&[1.001, 2.5, 2.999], &u2, 0.01, 0.0);
    assert_eq!((a, b), (vec![0, 2], vec![1, 0]));
    // empty
    assert_eq!(
        matching_time_indices(&[1.0], &[], 0.01, 0.0),
        (vec![], vec![])
    );
}

#[test]
fn association_uses_shorter_trajectory() {
    let reference = [0.0, 1.0, 2.0, 3.0, 4.0];
    let estimate = [1.001, 3.002];
    assert_eq!(
        associate_trajectories(&reference, &estimate, 0.01, 0.0),
        vec![(1, 0), (3, 1)]
    );
    // estimate longer than reference: iterate over the reference
    let estimate = [0.0, 0.5, 1.0, 1.5, 2.0, 2.5];
    let reference = [0.501, 2.0];
    assert_eq!(
        associate_trajectories(&reference, &estimate, 0.01, 0.0),
        vec![(0, 1), (1, 4)]
    );
    // offset is applied to the estimate in both branches
    let reference = [10.0, 11.0, 12.0];
    let estimate = [0.0, 1.0];
    assert_eq!(
        associate_trajectories(&reference, &estimate, 0.01, 10.0),
        vec![(0, 0), (1, 1)]
    );
    let estimate = [0.0, 1.0, 2.0, 3.0];
    assert_eq!(
        associate_trajectories(&reference, &estimate, 0.01, 10.0),
        vec![(0, 0), (1, 1), (2, 2)]
    );
}

#[test]
fn umeyama_recovers_similarity() {
    let truth = Sim3::new(
        UnitQuaternion::from_scaled_axis(Vector3::new(0.3, -1.2, 0.7)),
        Vector3::new(1.0, -2.0, 0.5),
        1.7,
    );
    let x: Vec<Vector3<f64>> = (0..50)
        .map(|i| {
            let f = i as f64;
            Vector3::new((0.3 * f).sin() * 2.0, (0.17 * f).cos(), 0.05 * f - 1.0)
        })
        .collect();
    let y: Vec<Vector3<f64>> = x.iter().map(|p| truth.act(p)).collect();
    let u = umeyama_alignment(&x, &y, true).unwrap();
    assert!((u.scale - 1.7).abs() < 1e-12);
    assert!((u.rotation - truth.rotation_matrix()).abs().max() < 1e-12);
    assert!((u.translation - truth.translation).norm() < 1e-12);
    for (a, b) in x.iter().zip(&y) {
        assert!((u.apply(a) - b).norm() < 1e-12);
        assert!((u.to_sim3().act(a) - b).norm() < 1e-12);
    }
    // rigid alignment of rigidly transformed points
    let rigid = Sim3::new(truth.rotation, truth.translation, 1.0);
    let y: Vec<Vector3<f64>> = x.iter().map(|p| rigid.act(p)).collect();
    let u = umeyama_alignment(&x, &y, false).unwrap();
    assert_eq!(u.scale, 1.0);
    assert!((u.rotation - truth.rotation_matrix()).abs().max() < 1e-12);
    // degenerate: all points identical
    let same = vec![Vector3::new(1.0, 2.0, 3.0); 5];
    assert!(matches!(
        umeyama_alignment(&same, &same, true),
        Err(SlamError::DegenerateAlignment(_))
    ));
    // collinear points: rank 1 < 2
    let line: Vec<Vector3<f64>> = (0..5).map(|i| Vector3::new(i as f64, 0.0, 0.0)).collect();
    assert!(umeyama_alignment(&line, &line, false).is_err());
}

#[test]
fn ate_of_transformed_copy_is_zero() {
    let gt = read_trajectory(data("freiburg1_xyz-groundtruth.txt")).unwrap();
    let s = Sim3::new(
        UnitQuaternion::from_scaled_axis(Vector3::new(0.2, 0.1, -0.4)),
        Vector3::new(3.0, 1.0, -1.0),
        0.5,
    );
    let mut est = Trajectory::default();
    for (t, p) in gt.timestamps.iter().zip(&gt.poses).step_by(3) {
        let q = s.act(&p.translation);
        est.push(*t + 0.001, SE3::new(p.rotation, q));
    }
    let r = ate_from_trajectories(
        &est,
        &gt,
        &AteOptions {
            align: Align::Sim3,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(r.num_matched, est.len());
    assert!(r.rmse < 1e-9, "rmse {}", r.rmse);
    assert!((r.scale - 2.0).abs() < 1e-9);
    let r = ate_from_trajectories(
        &est,
        &gt,
        &AteOptions {
            align: Align::Se3,
            ..Default::default()
        },
    )
    .unwrap();
    assert!(r.rmse > 0.01 && r.scale == 1.0);
    let r = ate_from_trajectories(
        &gt,
        &gt,
        &AteOptions {
            align: Align::None,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(r.rmse, 0.0);
    assert_eq!(r.num_matched, gt.len());
    // no overlap in time
    let far = Trajectory::new(vec![1.0, 2.0], vec![SE3::identity(); 2]).unwrap();
    let err = ate_from_trajectories(&far, &gt, &AteOptions::default()).unwrap_err();
    assert!(matches!(err, SlamError::NoMatches { .. }), "{err}");
}

#[test]
fn align_parsing_and_file_errors() {
    assert_eq!("se3".parse::<Align>().unwrap(), Align::Se3);
    assert_eq!("SIM3".parse::<Align>().unwrap(), Align::Sim3);
    assert_eq!("none".parse::<Align>().unwrap(), Align::None);
    assert!("affine".parse::<Align>().is_err());
    assert_eq!(Align::Sim3.to_string(), "sim3");

    let dir = tempfile::tempdir().unwrap();
    let bad = write(
        dir.path(),
        "bad.txt",
        "1.0 0 0 0 0 0 0 1\n2.0 0 0 0 0 0 0\n",
    );
    let err = eval_ate(&bad, &data("freiburg1_xyz-groundtruth.txt"), Align::Se3).unwrap_err();
    assert!(err.to_string().contains("bad.txt:2:"), "{err}");
    let err = eval_ate(
        &data("freiburg1_xyz-rgbdslam.txt"),
        &data("fr2_desk_groundtruth.txt"),
        Align::Se3,
    )
    .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("fr2_desk_groundtruth.txt") && msg.contains("freiburg1_xyz-rgbdslam.txt"),
        "{msg}"
    );
}

/// The nerfstudio export carries the camera's distortion (the listed files are the raw, still
/// distorted images), and the scene loader reads it back and undistorts those views.
#[test]
fn transforms_export_carries_the_distortion() {
    use rust3r_geometry::{PinholeCamera, RadTanDistortion};
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("frame.png");
    image::RgbImage::new(64, 48).save(&img).unwrap();
    let points = rust3r_io::scene::ScenePoints {
        xyz: vec![[0.0, 0.0, 1.0]],
        rgb: vec![[255, 0, 0]],
    };
    rust3r_io::scene::write_points_ply(&dir.path().join("pointcloud.ply"), &points).unwrap();
    let d = RadTanDistortion {
        k1: 0.26,
        k2: -0.95,
        p1: -0.005,
        p2: 0.003,
        k3: 1.16,
    };
    let cam = PinholeCamera::new(52.0, 51.0, 31.5, 23.5, 64, 48).with_distortion(Some(d));
    let path = dir.path().join("transforms.json");
    rust3r_slam::output::write_transforms_json(
        &path,
        &cam,
        &[(img.clone(), Sim3::identity())],
        "pointcloud.ply",
    )
    .unwrap();
    let t: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    for (k, v) in [
        ("k1", d.k1),
        ("k2", d.k2),
        ("p1", d.p1),
        ("p2", d.p2),
        ("k3", d.k3),
    ] {
        assert_eq!(t[k].as_f64(), Some(v), "{k}: {t}");
    }
    let scene = rust3r_io::scene::open_scene(&path, &Default::default()).unwrap();
    assert!(scene.is_undistorted(0), "the loader undistorts the view");
    // Undistorted images: zeros, and no k3.
    rust3r_slam::output::write_transforms_json(
        &path,
        &cam.with_distortion(None),
        &[(img, Sim3::identity())],
        "pointcloud.ply",
    )
    .unwrap();
    let t: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!((t["k1"].as_f64(), t.get("k3")), (Some(0.0), None), "{t}");
    let scene = rust3r_io::scene::open_scene(&path, &Default::default()).unwrap();
    assert!(!scene.is_undistorted(0));
}
