//! `rust3r run` on bad input: clear errors naming what is wrong, before any work.

use std::path::PathBuf;
use std::process::Command;

fn rust3r(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rust3r")).args(args).output().expect("run rust3r");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
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
    // Colour images without depth.
    let folder = dir.path().join("frames");
    std::fs::create_dir_all(&folder).unwrap();
    for k in 0..3 {
        image::RgbImage::from_pixel(32, 24, image::Rgb([k * 50, 0, 0])).save(folder.join(format!("{k:03}.png"))).unwrap();
    }
    let (ok, _, err) = rust3r(&["run", folder.to_str().unwrap(), "--out", o]);
    assert!(!ok && err.contains("frames") && err.contains("depth"), "{err}");
    // The mono front end is not in `run` yet: said so, not a panic.
    let kitchen = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/data/redkitchen"));
    let (ok, _, err) = rust3r(&["run", kitchen.to_str().unwrap(), "--out", o, "--mode", "mono"]);
    assert!(!ok && err.contains("--mode mono"), "{err}");
    // A 7-Scenes folder whose first depth image is corrupt: the frame's file is named.
    let broken = dir.path().join("kitchen");
    std::fs::create_dir_all(&broken).unwrap();
    for k in 0..4 {
        for ext in ["color.jpg", "depth.png", "pose.txt"] {
            let name = format!("frame-{k:06}.{ext}");
            std::fs::copy(kitchen.join(&name), broken.join(&name)).unwrap();
        }
    }
    std::fs::write(broken.join("frame-000002.depth.png"), b"not a png").unwrap();
    let (ok, _, err) = rust3r(&["run", broken.to_str().unwrap(), "--out", o, "--steps", "2", "--downscale", "16"]);
    assert!(!ok && err.contains("frame-000002.depth.png"), "{err}");
}
