//! End-to-end tests of `rust3r slam` on a short prefix of the real redkitchen sequence.

use rust3r_testdata::{data, fixtures};
use std::path::{Path, PathBuf};
use std::process::Command;

fn rust3r(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rust3r"))
        .args(args)
        .output()
        .expect("run rust3r");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn slam_writes_every_output_and_eval_ate_reads_them() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let kitchen = data("redkitchen");
    let (ok, stdout, err) = rust3r(&[
        "slam",
        kitchen.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--mode",
        "rgbd",
        "--max-frames",
        "24",
        "--single-thread",
        "--quiet",
    ]);
    assert!(ok, "{err}");
    assert!(
        stdout.contains("ATE RMSE (se3)") && stdout.contains("ATE RMSE (sim3)"),
        "{stdout}"
    );

    // A pose for every frame, keyframes separately, ground truth for all 500 frames.
    let lines = |name: &str| -> Vec<String> {
        std::fs::read_to_string(out.join(name))
            .unwrap()
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(String::from)
            .collect()
    };
    let traj = lines("trajectory.txt");
    assert_eq!(traj.len(), 24);
    assert!(traj.iter().all(|l| l.split_whitespace().count() == 8));
    assert!(!lines("keyframes.txt").is_empty());
    assert_eq!(lines("groundtruth.txt").len(), 500);

    // Binary little-endian PLY with colours, as many vertices as the header says.
    let ply = std::fs::read(out.join("pointcloud.ply")).unwrap();
    let end = ply.windows(11).position(|w| w == b"end_header\n").unwrap() + 11;
    let header = String::from_utf8_lossy(&ply[..end]).into_owned();
    assert!(
        header.contains("format binary_little_endian 1.0") && header.contains("property uchar red"),
        "{header}"
    );
    let n: usize = header
        .lines()
        .find_map(|l| l.strip_prefix("element vertex "))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(n > 10_000, "{n} points");
    assert_eq!(ply.len() - end, n * 15);

    // nerfstudio export: absolute image paths, OpenGL camera-to-world, the point cloud.
    let t: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("transforms.json")).unwrap())
            .unwrap();
    assert_eq!(t["ply_file_path"], "pointcloud.ply");
    let frames = t["frames"].as_array().unwrap();
    assert_eq!(frames.len(), 24);
    for f in frames {
        let p = PathBuf::from(f["file_path"].as_str().unwrap());
        assert!(p.is_absolute() && p.is_file(), "{}", p.display());
        assert_eq!(f["w"], 640);
        assert_eq!(f["fl_x"], 585.0);
        let m = f["transform_matrix"].as_array().unwrap();
        assert_eq!(m.len(), 4);
        assert_eq!(m[3], serde_json::json!([0.0, 0.0, 0.0, 1.0]));
    }
    // The first frame is the origin: OpenCV identity becomes diag(1, -1, -1) in OpenGL.
    assert_eq!(frames[0]["transform_matrix"][1][1], -1.0);
    assert_eq!(frames[0]["transform_matrix"][2][2], -1.0);

    let (ok, stdout, err) = rust3r(&[
        "eval-ate",
        out.join("trajectory.txt").to_str().unwrap(),
        out.join("groundtruth.txt").to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    let rmse: f64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("ATE RMSE: "))
        .unwrap()
        .trim_end_matches(" m")
        .parse()
        .unwrap();
    assert!(rmse < 0.02, "ATE over 24 frames: {rmse} m");
}

#[test]
fn slam_bad_input_gives_an_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    // Missing folder.
    let missing = dir.path().join("no_such_sequence");
    let (ok, _, err) = rust3r(&[
        "slam",
        missing.to_str().unwrap(),
        "--out",
        dir.path().join("o").to_str().unwrap(),
    ]);
    assert!(!ok && err.contains("no_such_sequence"), "{err}");
    assert!(!err.contains("panicked"), "{err}");

    // A 7-Scenes copy whose second depth image is corrupt.
    let seq = dir.path().join("seq");
    std::fs::create_dir(&seq).unwrap();
    let src = data("redkitchen");
    for i in 0..3 {
        for ext in ["color.jpg", "depth.png", "pose.txt"] {
            let name = format!("frame-{i:06}.{ext}");
            std::fs::copy(src.join(&name), seq.join(&name)).unwrap();
        }
    }
    std::fs::write(seq.join("frame-000001.depth.png"), b"not a png").unwrap();
    let (ok, _, err) = rust3r(&[
        "slam",
        seq.to_str().unwrap(),
        "--out",
        dir.path().join("o2").to_str().unwrap(),
        "--quiet",
    ]);
    assert!(!ok && err.contains("frame-000001.depth.png"), "{err}");
    assert!(!err.contains("panicked"), "{err}");

    // Images without depth: the rgbd mode says so, naming the data set.
    let imgs = dir.path().join("imgs");
    std::fs::create_dir(&imgs).unwrap();
    std::fs::copy(src.join("frame-000000.color.jpg"), imgs.join("a.jpg")).unwrap();
    let (ok, _, err) = rust3r(&[
        "slam",
        imgs.to_str().unwrap(),
        "--out",
        dir.path().join("o3").to_str().unwrap(),
    ]);
    assert!(
        !ok && err.contains("imgs") && err.contains("depth"),
        "{err}"
    );

    // A bad config file is named with its line.
    let cfg = dir.path().join("bad.yaml");
    std::fs::write(&cfg, "tracking:\n  huber: lots\n").unwrap();
    let (ok, _, err) = rust3r(&[
        "slam",
        src.to_str().unwrap(),
        "--out",
        dir.path().join("o4").to_str().unwrap(),
        "--config",
        cfg.to_str().unwrap(),
    ]);
    assert!(!ok && err.contains("bad.yaml:2"), "{err}");
}

#[test]
fn mono_mode_with_learned_retrieval_runs_and_checks_its_files() {
    // The tiny random-weight checkpoint of the parity fixture as the front end on real frames,
    // with the retrieval head and codebook of the mast3r crate's parity fixture (encoder width
    // 64, as the tiny network's). One network run for the mono mode's checks and retrieval's
    // (each run of the network costs ~40 s on lavapipe).
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("mono");
    let kitchen = data("redkitchen");
    let ckpt = fixtures("mast3r_tiny/tiny_mast3r.pth");
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../mast3r/tests/fixtures/retrieval/tiny_retrieval_trainingfree.pth");
    let base = |extra: &[&str]| {
        let mut a = vec![
            "slam".to_string(),
            kitchen.to_str().unwrap().into(),
            "--out".into(),
            out.to_str().unwrap().into(),
            "--mode".into(),
            "mono".into(),
            "--checkpoint".into(),
            ckpt.to_str().unwrap().into(),
            "--max-frames".into(),
            "2".into(),
            "--quiet".into(),
        ];
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    let run = |a: Vec<String>| rust3r(&a.iter().map(String::as_str).collect::<Vec<_>>());
    let (ok, stdout, err) = run(base(&["--retrieval", fixture.to_str().unwrap()]));
    assert!(ok, "{err}");
    assert!(
        stdout.contains("relocalisations,")
            && stdout.contains("loop closures by learned retrieval"),
        "{stdout}"
    );
    // The pipeline runs through and writes finite poses (the geometry is meaningless).
    assert!(stdout.contains("2 frames in"), "{stdout}");
    // Frame 1 is tracked against keyframe 0 on the network's pair decoding (MASt3R-SLAM).
    assert!(
        stdout.contains("pair tracking: 1 frames tracked on network pairs"),
        "{stdout}"
    );
    let traj = std::fs::read_to_string(out.join("trajectory.txt")).unwrap();
    let poses: Vec<Vec<f64>> = traj
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split_whitespace().map(|v| v.parse().unwrap()).collect())
        .collect();
    // A frame lost by the random network has no pose in the trajectory; the summary counts it.
    let lost = 2 - poses.len();
    assert!(
        !poses.is_empty() && stdout.contains(&format!(", {lost} frames lost")),
        "{} poses\n{stdout}",
        poses.len()
    );
    assert!(poses.iter().flatten().all(|v| v.is_finite()), "{traj}");
    // Without a checkpoint: a clear error.
    let (ok, _, err) = rust3r(&[
        "slam",
        kitchen.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--mode",
        "mono",
    ]);
    assert!(!ok && err.contains("--checkpoint"), "{err}");
    // A codebook that is not one: an error naming it.
    let bad = dir.path().join("bad_codebook.pkl");
    std::fs::write(&bad, b"not a pickle").unwrap();
    let (ok, _, err) = run(base(&[
        "--retrieval",
        fixture.to_str().unwrap(),
        "--codebook",
        bad.to_str().unwrap(),
    ]));
    assert!(!ok && err.contains("bad_codebook.pkl"), "{err}");
    // Retrieval is for the mono mode.
    let (ok, _, err) = rust3r(&[
        "slam",
        kitchen.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--retrieval",
        fixture.to_str().unwrap(),
    ]);
    assert!(
        !ok && err.contains("--retrieval is for --mode mono"),
        "{err}"
    );
}

#[test]
fn calibrated_mono_mode_runs_through_and_checks_its_calibration() {
    // MASt3R-SLAM's calibrated mode with the tiny checkpoint on real 7-Scenes frames and their
    // known colour calibration (fx = fy = 585, centre 320, 240): finite poses for every frame.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("calib");
    let kitchen = data("redkitchen");
    let ckpt = fixtures("mast3r_tiny/tiny_mast3r.pth");
    let yaml = dir.path().join("intrinsics.yaml");
    std::fs::write(
        &yaml,
        "width: 640\nheight: 480\n# fx, fy, cx, cy\ncalibration: [585.0, 585.0, 320.0, 240.0]\n",
    )
    .unwrap();
    let args = |calib: &std::path::Path, mode: &str| -> Vec<String> {
        [
            "slam",
            kitchen.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--mode",
            mode,
            "--checkpoint",
            ckpt.to_str().unwrap(),
            "--calib",
            calib.to_str().unwrap(),
            "--max-frames",
            "2",
            "--single-thread",
            "--quiet",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let run = |a: Vec<String>| rust3r(&a.iter().map(String::as_str).collect::<Vec<_>>());
    let (ok, stdout, err) = run(args(&yaml, "mono"));
    assert!(ok, "{err}");
    assert!(stdout.contains("2 frames in"), "{stdout}");
    assert!(
        stdout.contains("pair tracking: 1 frames tracked on network pairs"),
        "{stdout}"
    );
    let traj = std::fs::read_to_string(out.join("trajectory.txt")).unwrap();
    let poses: Vec<Vec<f64>> = traj
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split_whitespace().map(|v| v.parse().unwrap()).collect())
        .collect();
    // A frame lost by the random network has no pose in the trajectory; the summary counts it.
    let lost = 2 - poses.len();
    assert!(
        !poses.is_empty() && stdout.contains(&format!(", {lost} frames lost")),
        "{} poses\n{stdout}",
        poses.len()
    );
    assert!(poses.iter().all(|p| p.len() == 8), "{traj}");
    assert!(poses.iter().flatten().all(|v| v.is_finite()), "{traj}");
    // The export carries the calibration.
    let t: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("transforms.json")).unwrap())
            .unwrap();
    assert_eq!(t["fl_x"], 585.0);

    // --calib is only for the mono mode.
    let (ok, _, err) = run(args(&yaml, "rgbd"));
    assert!(
        !ok && err.contains("--calib") && err.contains("mono"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    // A missing or malformed calibration file is named.
    let (ok, _, err) = run(args(&dir.path().join("missing.yaml"), "mono"));
    assert!(!ok && err.contains("missing.yaml"), "{err}");
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "width: 640\nheight: 480\ncalibration: [585.0, 585.0, 320.0]\n",
    )
    .unwrap();
    let (ok, _, err) = run(args(&bad, "mono"));
    assert!(
        !ok && err.contains("bad.yaml") && err.contains("found 3"),
        "{err}"
    );
    // Frames of another size than the calibration's: the error names the first frame.
    std::fs::write(
        &bad,
        "width: 320\nheight: 240\ncalibration: [292.5, 292.5, 160.0, 120.0]\n",
    )
    .unwrap();
    let (ok, _, err) = run(args(&bad, "mono"));
    assert!(
        !ok && err.contains("frame-000000.color.jpg")
            && err.contains("320x240")
            && err.contains("bad.yaml"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

/// `rust3r bench slam-mono` without a network: the monocular system on depth-made pairs of
/// redkitchen, its summary, the JSON and the trajectory files.
#[test]
fn bench_slam_mono_runs_on_depth_pairs_and_writes_its_files() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("b.json");
    let traj = dir.path().join("t.txt");
    let kitchen = data("redkitchen");
    let (ok, stdout, err) = rust3r(&[
        "bench",
        "slam-mono",
        kitchen.to_str().unwrap(),
        "--size",
        "none",
        "--frames",
        "21",
        "--stride",
        "5",
        "--pairs-size",
        "128",
        "--json",
        json.to_str().unwrap(),
        "--trajectory",
        traj.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert!(
        stdout.contains("21 frames in") && stdout.contains("0 frames without a pose"),
        "{stdout}"
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["frames"], 21);
    let ate = v["ate_sim3_m"].as_f64().expect("an ATE");
    // Ideal pairs at 128x96, frames 0-100 every 5th: measured 0.43 cm (2026-11-28).
    assert!(ate.is_finite() && ate < 0.008, "ATE {ate} m");
    let lines = std::fs::read_to_string(&traj).unwrap();
    assert_eq!(lines.lines().filter(|l| !l.starts_with('#')).count(), 21);
    assert!(traj.with_extension("gt.txt").is_file());
    // Bad input names the problem.
    let (ok, _, err) = rust3r(&[
        "bench",
        "slam-mono",
        kitchen.to_str().unwrap(),
        "--size",
        "huge",
    ]);
    assert!(!ok && err.contains("--size huge"), "{err}");
}
