//! `--rerun` / `--rerun-save`: with the `rerun` feature, `rust3r slam` and `rust3r train` record a
//! live view that rerun can open; without it, both flags are a clear error, not a silent no-op.

use rust3r_testdata::data;
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

/// What `rerun::RecordingStreamBuilder::save` writes first: the "RRF2" stream magic.
#[cfg(feature = "rerun")]
fn assert_recording(path: &std::path::Path, min_bytes: u64, entities: &[&str]) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(
        bytes.starts_with(b"RRF2"),
        "{} is not a rerun recording",
        path.display()
    );
    assert!(
        bytes.len() as u64 >= min_bytes,
        "{}: only {} bytes",
        path.display(),
        bytes.len()
    );
    // Entity paths are stored as plain strings in the chunks' metadata.
    for e in entities {
        assert!(
            bytes.windows(e.len()).any(|w| w == e.as_bytes()),
            "{}: no entity {e}",
            path.display()
        );
    }
}

#[cfg(feature = "rerun")]
#[test]
fn slam_and_train_record_a_live_view() {
    let dir = tempfile::tempdir().unwrap();
    // SLAM: 30 frames of redkitchen; the recording holds frames (images), keyframe pointmaps and poses.
    let rrd = dir.path().join("slam.rrd");
    let kitchen = data("redkitchen");
    let out = dir.path().join("slam");
    let (ok, _, err) = rust3r(&[
        "slam",
        kitchen.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--mode",
        "rgbd",
        "--max-frames",
        "30",
        "--quiet",
        "--rerun-save",
        rrd.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert!(!err.contains("live view stopped"), "{err}");
    // Six 640x480 colour frames alone are > 5 MB uncompressed.
    assert_recording(
        &rrd,
        1_000_000,
        &[
            "world/camera/image",
            "world/trajectory",
            "world/keyframes/0/points",
            "world/graph",
        ],
    );
    // Train: a few steps on lego at 40x40.
    let rrd = dir.path().join("train.rrd");
    let lego = data("lego");
    let out = dir.path().join("lego");
    let (ok, _, err) = rust3r(&[
        "train",
        lego.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--steps",
        "100",
        "--downscale",
        "20",
        "--init-count",
        "500",
        "--eval-at",
        "50",
        "--rerun-save",
        rrd.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert_recording(
        &rrd,
        10_000,
        &[
            "train/loss",
            "eval/render",
            "eval/ground_truth",
            "world/gaussians",
            "world/cameras/1",
        ],
    );
}

#[cfg(not(feature = "rerun"))]
#[test]
fn live_view_flags_are_a_clear_error_without_the_feature() {
    let dir = tempfile::tempdir().unwrap();
    let rrd = dir.path().join("x.rrd");
    let kitchen = data("redkitchen");
    let out = dir.path().join("slam");
    let (ok, _, err) = rust3r(&[
        "slam",
        kitchen.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--max-frames",
        "2",
        "--rerun-save",
        rrd.to_str().unwrap(),
    ]);
    assert!(
        !ok && err.contains("no rerun support") && err.contains("--features rust3r-cli/rerun"),
        "{err}"
    );
    let lego = data("lego");
    let (ok, _, err) = rust3r(&[
        "train",
        lego.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--steps",
        "1",
        "--rerun",
    ]);
    assert!(!ok && err.contains("no rerun support"), "{err}");
    assert!(!rrd.exists());
}
