//! `rust3r run` on bad input: clear errors naming the file or frame, and what SLAM finished
//! (the trajectory so far) still written.

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

/// A 7-Scenes folder with redkitchen's frames `0..n`.
fn copy_frames(dir: &Path, n: usize) -> PathBuf {
    let seq = dir.join("kitchen");
    std::fs::create_dir_all(&seq).unwrap();
    for k in 0..n {
        for ext in ["color.jpg", "depth.png", "pose.txt"] {
            let name = format!("frame-{k:06}.{ext}");
            std::fs::copy(data("redkitchen").join(&name), seq.join(&name)).unwrap();
        }
    }
    seq
}

/// `(timestamp, tx, ty, tz, qx, qy, qz, qw)` lines of a TUM file.
fn tum_poses(path: &Path) -> Vec<Vec<f64>> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split_whitespace().map(|v| v.parse().unwrap()).collect())
        .collect()
}

/// The trajectory so far: the first `n` frames, at 7-Scenes' 30 frames per second, finite.
fn assert_trajectory_so_far(path: &Path, n: usize) {
    let poses = tum_poses(path);
    assert_eq!(poses.len(), n, "{}", path.display());
    for (k, p) in poses.iter().enumerate() {
        assert_eq!(p.len(), 8);
        assert!(
            (p[0] - k as f64 / 30.0).abs() < 1e-5,
            "timestamp {} of frame {k}",
            p[0]
        );
        assert!(p.iter().all(|v| v.is_finite()), "{p:?}");
        let qn: f64 = p[4..].iter().map(|q| q * q).sum();
        assert!((qn - 1.0).abs() < 1e-6, "{p:?}");
    }
}

fn run_args<'a>(input: &'a str, out: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut a = vec![
        "run",
        input,
        "--out",
        out,
        "--steps",
        "2",
        "--downscale",
        "16",
    ];
    a.extend_from_slice(extra);
    a
}

#[test]
fn run_rejects_bad_input_with_the_file_named() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let o = out.to_str().unwrap();
    // No such capture.
    let missing = dir.path().join("no_such_capture");
    let (ok, _, err) = rust3r(&["run", missing.to_str().unwrap(), "--out", o]);
    assert!(!ok && err.contains("no_such_capture"), "{err}");
    // No frames: an empty folder.
    let empty = dir.path().join("empty_capture");
    std::fs::create_dir_all(&empty).unwrap();
    let (ok, _, err) = rust3r(&["run", empty.to_str().unwrap(), "--out", o]);
    assert!(!ok && err.contains("empty_capture"), "{err}");
    // Colour images without depth.
    let folder = dir.path().join("frames");
    std::fs::create_dir_all(&folder).unwrap();
    for k in 0..3 {
        image::RgbImage::from_pixel(32, 24, image::Rgb([k * 50, 0, 0]))
            .save(folder.join(format!("{k:03}.png")))
            .unwrap();
    }
    let (ok, _, err) = rust3r(&["run", folder.to_str().unwrap(), "--out", o]);
    assert!(
        !ok && err.contains("frames") && err.contains("depth"),
        "{err}"
    );
    {
        let e = &err;
        assert!(!e.contains("panicked"), "{e}");
    }
}

#[test]
fn run_stops_at_a_bad_depth_image_and_keeps_the_trajectory_so_far() {
    let dir = tempfile::tempdir().unwrap();
    let seq = copy_frames(dir.path(), 4);
    let s = seq.to_str().unwrap();
    // A corrupt depth image at frame 2: the file is named, frames 0 and 1 are in the trajectory.
    std::fs::write(seq.join("frame-000002.depth.png"), b"not a png").unwrap();
    let out = dir.path().join("corrupt");
    let (ok, _, err) = rust3r(&run_args(s, out.to_str().unwrap(), &[]));
    assert!(
        !ok && err.contains("frame-000002.depth.png")
            && err.contains("SLAM stopped after 2 of 4 frames"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    assert_trajectory_so_far(&out.join("slam/trajectory.txt"), 2);
    // A missing depth image at frame 2: the frame is named.
    std::fs::remove_file(seq.join("frame-000002.depth.png")).unwrap();
    let out = dir.path().join("missing");
    let (ok, _, err) = rust3r(&run_args(s, out.to_str().unwrap(), &[]));
    assert!(
        !ok && err.contains("frame-000002.color.jpg") && err.contains("frame 2 has no depth"),
        "{err}"
    );
    assert_trajectory_so_far(&out.join("slam/trajectory.txt"), 2);
}

#[test]
fn run_rejects_frames_of_changing_size() {
    let dir = tempfile::tempdir().unwrap();
    let seq = copy_frames(dir.path(), 4);
    let name = seq.join("frame-000002.color.jpg");
    let small =
        image::open(&name)
            .unwrap()
            .resize_exact(320, 240, image::imageops::FilterType::Triangle);
    small.save(&name).unwrap();
    let out = dir.path().join("out");
    let (ok, _, err) = rust3r(&run_args(seq.to_str().unwrap(), out.to_str().unwrap(), &[]));
    assert!(
        !ok && err.contains("frame-000002.color.jpg")
            && err.contains("320x240")
            && err.contains("640x480"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    // SLAM finished: its outputs are written, every frame in the trajectory.
    assert_eq!(tum_poses(&out.join("slam/trajectory.txt")).len(), 4);
}

#[test]
fn run_reports_tracking_lost_for_good() {
    // Frames 0-2 of redkitchen, then frames whose depth images hold no measurement: tracking is
    // lost at frame 3 and never relocalises.
    let dir = tempfile::tempdir().unwrap();
    let seq = copy_frames(dir.path(), 3);
    for k in 3..7 {
        for ext in ["color.jpg", "pose.txt"] {
            std::fs::copy(
                data("redkitchen").join(format!("frame-000002.{ext}")),
                seq.join(format!("frame-{k:06}.{ext}")),
            )
            .unwrap();
        }
        image::ImageBuffer::<image::Luma<u16>, Vec<u16>>::new(640, 480)
            .save(seq.join(format!("frame-{k:06}.depth.png")))
            .unwrap();
    }
    let out = dir.path().join("out");
    let (ok, _, err) = rust3r(&run_args(
        seq.to_str().unwrap(),
        out.to_str().unwrap(),
        &["--max-lost-frames", "3"],
    ));
    assert!(
        !ok && err.contains("tracking lost for good at frame 3")
            && err.contains("frame-000003.color.jpg"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    assert_trajectory_so_far(&out.join("slam/trajectory.txt"), 3);
}

#[test]
fn run_mono_needs_a_mast3r_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let o = dir.path().join("out");
    let k = data("redkitchen");
    let (ok, _, err) = rust3r(&[
        "run",
        k.to_str().unwrap(),
        "--out",
        o.to_str().unwrap(),
        "--mode",
        "mono",
    ]);
    assert!(!ok && err.contains("--checkpoint"), "{err}");
    // A checkpoint of another network (an LPIPS AlexNet): named, not a panic.
    let other = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../lpips/tests/fixtures/lpips/alex_backbone_zip.pth"
    ));
    let (ok, _, err) = rust3r(&[
        "run",
        k.to_str().unwrap(),
        "--out",
        o.to_str().unwrap(),
        "--mode",
        "mono",
        "--checkpoint",
        other.to_str().unwrap(),
    ]);
    assert!(!ok && err.contains("alex_backbone_zip.pth"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    // --calib belongs to the mono mode.
    let (ok, _, err) = rust3r(&[
        "run",
        k.to_str().unwrap(),
        "--out",
        o.to_str().unwrap(),
        "--calib",
        "k.yaml",
    ]);
    assert!(!ok && err.contains("--calib"), "{err}");
}

#[test]
fn run_mono_on_a_video_writes_a_splat() {
    // Three redkitchen colour frames (320x240) as an mp4, tracked by the tiny random-weight
    // MASt3R fixture (the geometry is meaningless; the pipeline must run through with finite
    // poses and write its outputs).
    let dir = tempfile::tempdir().unwrap();
    let frames = dir.path().join("png");
    std::fs::create_dir_all(&frames).unwrap();
    for k in 0..3 {
        let img =
            image::open(data("redkitchen").join(format!("frame-{:06}.color.jpg", 4 * k))).unwrap();
        img.resize_exact(320, 240, image::imageops::FilterType::Triangle)
            .save(frames.join(format!("{k:03}.png")))
            .unwrap();
    }
    let clip = dir.path().join("clip.mp4");
    let st = Command::new("ffmpeg")
        .args(["-loglevel", "error", "-y", "-framerate", "10", "-i"])
        .arg(frames.join("%03d.png"))
        .args(["-c:v", "libx264", "-pix_fmt", "yuv420p", "-crf", "12"])
        .arg(&clip)
        .status()
        .expect("ffmpeg is installed (.ci/run installs it)");
    assert!(st.success());
    let ckpt = fixtures("mast3r_tiny/tiny_mast3r.pth");
    let out = dir.path().join("out");
    let (ok, stdout, err) = rust3r(&[
        "run",
        clip.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--mode",
        "mono",
        "--checkpoint",
        ckpt.to_str().unwrap(),
        "--steps",
        "10",
        // Full size: at 80x60 no view kept any depth (each training pixel gathers ~40 of the
        // random network's pointmap pixels, presumably never within the 5% agreement rule).
        "--downscale",
        "1",
        "--eval-every",
        "0",
        "--single-thread",
    ]);
    assert!(ok, "{stdout}\n{err}");
    assert!(stdout.contains("3 frames"), "{stdout}");
    // The network's depth supervises the keyframe views, weighted by its confidence.
    let weighted = stdout
        .lines()
        .find_map(|l| l.split(" training views have depth (").nth(1))
        .and_then(|t| t.split(' ').next()?.parse::<usize>().ok());
    assert!(weighted.is_some_and(|n| n >= 1), "{stdout}");
    for f in [
        "splats.ply",
        "trajectory.txt",
        "keyframes.txt",
        "pointcloud.ply",
        "transforms.json",
        "colmap/sparse/0/images.txt",
        "slam/trajectory.txt",
    ] {
        assert!(out.join(f).exists(), "{f} missing\n{stdout}");
    }
    let poses = tum_poses(&out.join("trajectory.txt"));
    assert_eq!(poses.len(), 3);
    assert!(poses.iter().flatten().all(|v| v.is_finite()), "{poses:?}");
    let splats = rust3r_io::load_splats(&out.join("splats.ply")).unwrap();
    assert!(!splats.is_empty() && splats.means.iter().flatten().all(|v| v.is_finite()));
    // The estimated camera: positive focal lengths, principal point inside the 320x240 frame.
    let t: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("transforms.json")).unwrap())
            .unwrap();
    let f0 = &t["frames"][0];
    let (fx, cx, cy) = (
        f0["fl_x"].as_f64().unwrap(),
        f0["cx"].as_f64().unwrap(),
        f0["cy"].as_f64().unwrap(),
    );
    assert!(
        fx > 0.0 && (0.0..320.0).contains(&cx) && (0.0..240.0).contains(&cy),
        "{t}"
    );
    assert_eq!((f0["w"].as_u64(), f0["h"].as_u64()), (Some(320), Some(240)));
    // MASt3R's 512x384 input covers the whole 4:3 frame: the principal point is its centre.
    assert!(
        (cx - 159.5).abs() < 1e-9 && (cy - 119.5).abs() < 1e-9,
        "{cx} {cy}"
    );
}

#[test]
fn run_hold_out_and_online_flags() {
    let dir = tempfile::tempdir().unwrap();
    let seq = copy_frames(dir.path(), 12);
    let out = dir.path().join("out");
    let (s, o) = (seq.to_str().unwrap(), out.to_str().unwrap());
    let (ok, _, err) = rust3r(&run_args(s, o, &["--hold-out", "1"]));
    assert!(!ok && err.contains("--hold-out 1"), "{err}");
    // Frames 3 and 9 held out before SLAM; training while tracking.
    let (ok, stdout, err) = rust3r(&run_args(s, o, &["--hold-out", "6", "--online"]));
    assert!(ok, "{stdout}\n{err}");
    assert!(stdout.contains("(2 held out before SLAM)"), "{stdout}");
    assert!(stdout.contains("during SLAM"), "{stdout}");
    // stderr is a pipe, not a terminal: SLAM's and training's progress come as plain lines.
    let progress = |slam: bool, what: &str| {
        err.lines().any(|l| {
            l.starts_with("[00:") && l.contains("] slam frame ") == slam && l.contains(what)
        })
    };
    assert!(progress(true, "/10") && progress(false, "/2 "), "{err}");
    assert_eq!(tum_poses(&out.join("trajectory.txt")).len(), 10);
    let eval: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("eval.json")).unwrap()).unwrap();
    let views = eval.as_array().unwrap().last().unwrap()["views"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(views.len(), 2, "{eval}");
    assert!(
        views[0]["name"].as_str().unwrap().contains("000003"),
        "{eval}"
    );
    assert!(views[1]["psnr"].as_f64().unwrap().is_finite(), "{eval}");

    // The held-out frames at their final poses: `rust3r train` on SLAM's export, scored on
    // exactly those frames (the benchmark's `rust3r train` row).
    let held = rust3r_io::scene::open_scene(&out.join("held_out.json"), &Default::default())
        .unwrap()
        .views;
    let names: Vec<&str> = held.iter().map(|v| v.name.as_str()).collect();
    assert!(
        names.len() == 2 && names[0].contains("000003") && names[1].contains("000009"),
        "{names:?}"
    );
    let train_out = dir.path().join("train");
    let (ok, stdout, err) = rust3r(&[
        "train",
        out.join("slam").join("transforms.json").to_str().unwrap(),
        "--eval-scene",
        out.join("held_out.json").to_str().unwrap(),
        "--out",
        train_out.to_str().unwrap(),
        "--steps",
        "2",
        "--downscale",
        "16",
        "--background",
        "black",
    ]);
    assert!(ok, "{stdout}\n{err}");
    let eval: serde_json::Value =
        serde_json::from_slice(&std::fs::read(train_out.join("eval.json")).unwrap()).unwrap();
    let scored: Vec<&str> = eval.as_array().unwrap().last().unwrap()["views"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(scored, names, "{eval}");
    // A missing evaluation scene is named.
    let (ok, _, err) = rust3r(&[
        "train",
        out.join("slam").join("transforms.json").to_str().unwrap(),
        "--eval-scene",
        dir.path().join("no_such_scene").to_str().unwrap(),
        "--out",
        train_out.to_str().unwrap(),
        "--steps",
        "1",
    ]);
    assert!(!ok && err.contains("no_such_scene"), "{err}");
}
