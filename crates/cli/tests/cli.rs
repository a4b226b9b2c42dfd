//! End-to-end tests of the `rust3r` binary on the shared real data.

use rust3r_testdata::{data, fixtures};
use std::path::PathBuf;
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
fn render_writes_a_picture_of_the_splat() {
    let dir = tempfile::tempdir().unwrap();
    let png = dir.path().join("nested/plant.png");
    let (ok, _, err) = rust3r(&[
        "render",
        data("splats/plant.splat").to_str().unwrap(),
        "--out",
        png.to_str().unwrap(),
        "--width",
        "96",
        "--height",
        "72",
        "--background",
        "1,1,1",
    ]);
    assert!(ok, "{err}");
    let img = image::open(&png).unwrap().to_rgb8();
    assert_eq!(img.dimensions(), (96, 72));
    // White background at the corner, a green plant in the middle.
    assert_eq!(img.get_pixel(0, 0).0, [255, 255, 255]);
    let green = img
        .pixels()
        .filter(|p| p.0[1] > p.0[0] + 20 && p.0[1] > p.0[2] + 20)
        .count();
    assert!(green > 200, "only {green} green pixels");
}

/// Without XDG_RUNTIME_DIR (a headless server, a container), Mesa's Vulkan drivers used to
/// print an "XDG_RUNTIME_DIR is invalid" error per device probed; the CLI now provides one.
#[test]
fn no_runtime_dir_noise_without_xdg_runtime_dir() {
    let dir = tempfile::tempdir().unwrap();
    let png = dir.path().join("plant.png");
    let out = Command::new(env!("CARGO_BIN_EXE_rust3r"))
        .args([
            "render",
            data("splats/plant.splat").to_str().unwrap(),
            "--out",
            png.to_str().unwrap(),
            "--width",
            "32",
            "--height",
            "24",
        ])
        .env_remove("XDG_RUNTIME_DIR")
        .output()
        .expect("run rust3r");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("XDG_RUNTIME_DIR"), "{err}");
    assert!(png.is_file());
}

#[test]
fn render_with_camera_json() {
    let dir = tempfile::tempdir().unwrap();
    let cam = dir.path().join("cam.json");
    std::fs::write(
        &cam,
        r#"{"fx": 50, "fy": 50, "cx": 16, "cy": 12, "width": 32, "height": 24,
            "world_to_camera": [1,0,0,0, 0,1,0,0, 0,0,1,5, 0,0,0,1]}"#,
    )
    .unwrap();
    let png = dir.path().join("out.png");
    let (ok, _, err) = rust3r(&[
        "render",
        data("splats/biker.spz").to_str().unwrap(),
        "--camera",
        cam.to_str().unwrap(),
        "--out",
        png.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert_eq!(image::open(&png).unwrap().to_rgb8().dimensions(), (32, 24));
}

#[test]
fn convert_round_trips_through_every_writable_format() {
    let dir = tempfile::tempdir().unwrap();
    let src = data("splats/biker_from_spz.3dgs.ply");
    let original = rust3r_io::load_splats(&src).unwrap();
    for ext in ["ply", "splat", "spz", "sog"] {
        let out = dir.path().join(format!("biker.{ext}"));
        let (ok, stdout, err) = rust3r(&["convert", src.to_str().unwrap(), out.to_str().unwrap()]);
        assert!(ok, "{ext}: {err}");
        assert!(stdout.contains(&original.len().to_string()));
        let back = rust3r_io::load_splats(&out).unwrap();
        assert_eq!(back.len(), original.len(), "{ext}");
    }
}

#[test]
fn eval_ate_reproduces_evo() {
    // evo_ape tum freiburg1_xyz-groundtruth.txt freiburg1_xyz-rgbdslam.txt -as (evo 1.38.1): rmse 0.013389 m
    let (ok, stdout, err) = rust3r(&[
        "eval-ate",
        data("trajectories/freiburg1_xyz-rgbdslam.txt")
            .to_str()
            .unwrap(),
        data("trajectories/freiburg1_xyz-groundtruth.txt")
            .to_str()
            .unwrap(),
        "--align",
        "sim3",
    ]);
    assert!(ok, "{err}");
    let line = stdout
        .lines()
        .find(|l| l.starts_with("ATE RMSE: "))
        .expect("ATE line");
    let v: f64 = line
        .trim_start_matches("ATE RMSE: ")
        .trim_end_matches(" m")
        .parse()
        .unwrap();
    let expected = rust3r_slam::eval_ate(
        &data("trajectories/freiburg1_xyz-rgbdslam.txt"),
        &data("trajectories/freiburg1_xyz-groundtruth.txt"),
        rust3r_slam::Align::Sim3,
    )
    .unwrap()
    .rmse;
    assert!(
        (v - expected).abs() < 1e-6 && (v - 0.013389).abs() < 1e-5,
        "{v}"
    );
}

#[test]
fn convert_checkpoint_writes_loadable_safetensors() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("tiny.safetensors");
    let pth = fixtures("mast3r_tiny/tiny_mast3r.pth");
    let (ok, _, err) = rust3r(&[
        "convert-checkpoint",
        pth.to_str().unwrap(),
        out.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    let a = rust3r_mast3r::Checkpoint::load(&pth).unwrap();
    let b = rust3r_mast3r::Checkpoint::load(&out).unwrap();
    assert_eq!(a.tensors(), b.tensors());
}

#[test]
fn bad_input_gives_a_clear_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let bad_ply = dir.path().join("bad.ply");
    std::fs::write(
        &bad_ply,
        "ply\nformat binary_little_endian 1.0\nelement vertex 100\nproperty float x\nend_header\n",
    )
    .unwrap();
    let bad_cam = dir.path().join("cam.json");
    std::fs::write(&bad_cam, r#"{"fx": 1}"#).unwrap();
    let missing = dir.path().join("missing.spz");
    let out = dir.path().join("x.png");
    let plant = data("splats/plant.splat");
    let cases: Vec<(Vec<&str>, &PathBuf)> = vec![
        (
            vec![
                "render",
                bad_ply.to_str().unwrap(),
                "--out",
                out.to_str().unwrap(),
            ],
            &bad_ply,
        ),
        (
            vec![
                "render",
                missing.to_str().unwrap(),
                "--out",
                out.to_str().unwrap(),
            ],
            &missing,
        ),
        (
            vec![
                "render",
                plant.to_str().unwrap(),
                "--camera",
                bad_cam.to_str().unwrap(),
                "--out",
                out.to_str().unwrap(),
            ],
            &bad_cam,
        ),
        (
            vec![
                "eval-ate",
                missing.to_str().unwrap(),
                missing.to_str().unwrap(),
            ],
            &missing,
        ),
    ];
    for (args, file) in cases {
        let (ok, _, err) = rust3r(&args);
        assert!(!ok, "{args:?} should fail");
        assert!(
            err.starts_with("error: ") && err.contains(file.to_str().unwrap()),
            "{args:?}: {err}"
        );
        assert!(!err.contains("panicked"), "{err}");
    }
    assert!(!out.exists(), "no partial output on failure");
}

#[test]
fn bad_device_choice_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("x.png");
    let plant = data("splats/plant.splat");
    for (flag, value, expect) in [
        ("--adapter", "99", "adapter 99"),
        ("--backend", "opengl-es", "unknown backend"),
    ] {
        let (ok, _, err) = rust3r(&[
            "render",
            plant.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            flag,
            value,
        ]);
        assert!(
            !ok && err.contains(expect) && !err.contains("panicked"),
            "{flag} {value}: {err}"
        );
    }
    let (ok, stdout, err) = rust3r(&["info"]);
    assert!(ok, "{err}");
    assert!(
        stdout.contains("[0] ") && stdout.contains("max buffer"),
        "{stdout}"
    );
    // CUDA: a build without the `cuda` feature (CI) or a machine without the driver says so
    // and names the way out; it never panics.
    assert!(stdout.contains("\ncuda"), "info has a cuda line: {stdout}");
    let (ok, _, err) = rust3r(&[
        "render",
        plant.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--backend",
        "cuda",
    ]);
    if !ok {
        assert!(
            !err.contains("panicked")
                && (err.contains("--features rust3r-cli/cuda") || err.contains("CUDA")),
            "--backend cuda: {err}"
        );
    }
}

/// `train --gpus N` without what it needs stops with an error naming it, before any work:
/// wgpu (single-GPU), a build without CUDA / NCCL (CI), ranks outside the world, a batch
/// smaller than the GPUs. Never a panic.
#[test]
fn train_on_several_gpus_without_their_requirements_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let lego = data("lego");
    let out = dir.path().join("out");
    let base = [
        "train",
        lego.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--steps",
        "2",
    ];
    let cases: [(&[&str], &str); 4] = [
        (&["--gpus", "2"], "wgpu stays single-GPU"),
        (
            &["--gpus", "2", "--rank", "1", "--backend", "cuda"],
            "beyond --world-size 2",
        ),
        (
            &["--gpus", "0", "--backend", "cuda"],
            "--gpus must be at least 1",
        ),
        (&["--batch", "0"], "--batch must be at least 1"),
    ];
    for (flags, expect) in cases {
        let args: Vec<&str> = base.iter().chain(flags).copied().collect();
        let (ok, _, err) = rust3r(&args);
        assert!(
            !ok && err.contains(expect) && !err.contains("panicked"),
            "{flags:?}: {err}"
        );
    }
    // Without the `cuda` feature (CI) or without libnccl: an error naming NCCL. (A CUDA build
    // on a machine with two GPUs and NCCL trains instead.)
    let args: Vec<&str> = base
        .iter()
        .chain(&["--gpus", "2", "--backend", "cuda"])
        .copied()
        .collect();
    let (ok, _, err) = rust3r(&args);
    if !ok {
        assert!(err.contains("NCCL") && !err.contains("panicked"), "{err}");
    }
}

#[test]
fn train_writes_splats_eval_and_checkpoint_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("lego");
    let lego = data("lego");
    let common = [
        "--downscale",
        "20",
        "--init-count",
        "800",
        "--sh-degree",
        "1",
        "--eval-at",
        "10",
    ];
    let mut args = vec![
        "train",
        lego.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--steps",
        "20",
    ];
    args.extend(common);
    let (ok, stdout, err) = rust3r(&args);
    assert!(ok, "{err}");
    assert!(
        stdout.contains("87 train / 13 held-out views, 40x40"),
        "{stdout}"
    );
    // stderr is a pipe, not a terminal: progress comes as plain lines (the first at once).
    assert!(
        err.lines()
            .any(|l| l.starts_with("[00:") && l.contains("] 0/20 ")),
        "no progress line in {err}"
    );
    let eval: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("eval.json")).unwrap()).unwrap();
    let recs = eval.as_array().unwrap();
    assert_eq!(recs.len(), 2);
    for (r, step) in recs.iter().zip([10, 20]) {
        assert_eq!(r["step"], step);
        assert!(r["psnr"].as_f64().unwrap() > 5.0 && r["ssim"].as_f64().unwrap() > 0.0);
        assert_eq!(r["num_splats"], 800);
        // Without --lpips-backbone / --lpips-weights there is no lpips entry.
        assert!(r.get("lpips").is_none(), "{r}");
    }
    let splats = rust3r_io::load_splats(&out.join("splats.ply")).unwrap();
    assert_eq!((splats.len(), splats.sh_degree), (800, 1));
    // The absgrad densification signal trains too (here with f32 Adam moments).
    let out_abs = dir.path().join("lego_absgrad");
    let mut args = vec![
        "train",
        lego.to_str().unwrap(),
        "--out",
        out_abs.to_str().unwrap(),
        "--steps",
        "10",
        "--absgrad",
        "--adam-moments",
        "f32",
    ];
    args.extend(common);
    let (ok, _, err) = rust3r(&args);
    assert!(ok, "{err}");
    let eval: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out_abs.join("eval.json")).unwrap()).unwrap();
    assert!(
        eval.as_array().unwrap().last().unwrap()["psnr"]
            .as_f64()
            .unwrap()
            > 5.0
    );
    // Held-out renders next to their ground truth.
    let side = image::open(out.join("renders/r_0.png")).unwrap();
    assert_eq!((side.width(), side.height()), (80, 40));

    // Resume to 25 steps from the final checkpoint (8-bit SH moments, the default), switching
    // to f32 moments: the checkpoint's are converted.
    let ck = out.join("checkpoint.bin");
    let mut args = vec![
        "train",
        lego.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--steps",
        "25",
        "--resume",
        ck.to_str().unwrap(),
        "--adam-moments",
        "f32",
    ];
    args.extend(common);
    let (ok, stdout, err) = rust3r(&args);
    assert!(ok, "{err}");
    assert!(stdout.contains("at step 20"), "{stdout}");
    assert!(
        stdout.contains("converting the checkpoint's sh8 Adam moments to f32"),
        "{stdout}"
    );
    let (ok, _, err) = rust3r(&[
        "train",
        lego.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--adam-moments",
        "f16",
    ]);
    assert!(
        !ok && err.contains("unknown moment precision 'f16'"),
        "{err}"
    );
    let eval: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("eval.json")).unwrap()).unwrap();
    assert_eq!(eval.as_array().unwrap().last().unwrap()["step"], 25);
    // On to 30 steps with 8-bit moments for the higher-order SH coefficients (converted).
    let mut args = vec![
        "train",
        lego.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--steps",
        "30",
        "--resume",
        ck.to_str().unwrap(),
        "--adam-moments",
        "sh8",
    ];
    args.extend(common);
    let (ok, stdout, err) = rust3r(&args);
    assert!(ok, "{err}");
    assert!(
        stdout.contains("converting the checkpoint's f32 Adam moments to sh8"),
        "{stdout}"
    );
    let eval: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("eval.json")).unwrap()).unwrap();
    let last = &eval.as_array().unwrap().last().unwrap();
    assert!(
        last["step"] == 30 && last["psnr"].as_f64().unwrap() > 5.0,
        "{last}"
    );
    // f32 SH coefficients asked of that checkpoint: its 8-bit SH moments become bf16 ones.
    let mut args = vec![
        "train",
        lego.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--steps",
        "32",
        "--resume",
        ck.to_str().unwrap(),
        "--sh-precision",
        "f32",
    ];
    args.extend(common);
    let (ok, stdout, err) = rust3r(&args);
    assert!(ok, "{err}");
    assert!(
        stdout.contains("converting the checkpoint's sh8 Adam moments to bf16"),
        "{stdout}"
    );
    // 8-bit SH moments need half-float SH coefficients: a clear error, not a panic.
    let out2 = dir.path().join("lego_sh8_f32");
    let (ok, _, err) = rust3r(&[
        "train",
        lego.to_str().unwrap(),
        "--out",
        out2.to_str().unwrap(),
        "--downscale",
        "20",
        "--adam-moments",
        "sh8",
        "--sh-precision",
        "f32",
    ]);
    assert!(!ok && err.contains("need f16 SH coefficients"), "{err}");
}

#[test]
fn train_rejects_bad_input_with_the_file_named() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let missing = dir.path().join("no_such_scene");
    let (ok, _, err) = rust3r(&[
        "train",
        missing.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(!ok && err.contains("no_such_scene"), "{err}");
    // A transforms file that is not JSON.
    let bad = dir.path().join("bad");
    std::fs::create_dir_all(&bad).unwrap();
    std::fs::write(bad.join("transforms.json"), b"{ \"frames\": [ oops").unwrap();
    let (ok, _, err) = rust3r(&[
        "train",
        bad.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(!ok && err.contains("transforms.json"), "{err}");
    // A checkpoint that is not one.
    std::fs::write(dir.path().join("ck.bin"), b"garbage").unwrap();
    let lego = data("lego");
    let ck = dir.path().join("ck.bin");
    let (ok, _, err) = rust3r(&[
        "train",
        lego.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--downscale",
        "20",
        "--resume",
        ck.to_str().unwrap(),
    ]);
    assert!(
        !ok && err.contains("ck.bin") && err.contains("not a rust3r training checkpoint"),
        "{err}"
    );
    // An impossible memory budget.
    let (ok, _, err) = rust3r(&[
        "train",
        lego.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--downscale",
        "20",
        "--memory-budget",
        "0.001",
    ]);
    assert!(!ok && err.contains("memory budget"), "{err}");
    // Fast-preset settings out of range are refused before anything runs.
    let (ok, _, err) = rust3r(&[
        "train",
        lego.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--preset",
        "fast",
        "--fast-start-factor",
        "0.5",
    ]);
    assert!(!ok && err.contains("--fast-start-factor 0.5"), "{err}");
}

#[test]
fn slam_export_trains_directly() {
    let dir = tempfile::tempdir().unwrap();
    let slam_out = dir.path().join("slam");
    let kitchen = data("redkitchen");
    let (ok, _, err) = rust3r(&[
        "slam",
        kitchen.to_str().unwrap(),
        "--out",
        slam_out.to_str().unwrap(),
        "--mode",
        "rgbd",
        "--max-frames",
        "12",
        "--quiet",
    ]);
    assert!(ok, "{err}");
    let train_out = dir.path().join("train");
    let (ok, stdout, err) = rust3r(&[
        "train",
        slam_out.to_str().unwrap(),
        "--out",
        train_out.to_str().unwrap(),
        "--steps",
        "2",
        "--downscale",
        "16",
        "--eval-every",
        "0",
        "--sh-degree",
        "0",
        "--save-at",
        "1",
        "--spz",
    ]);
    assert!(ok, "{err}");
    // The export is a nerfstudio scene whose fused point cloud initialises the Gaussians.
    assert!(
        stdout.contains("(transforms): 12 train / 0 held-out views, 40x30"),
        "{stdout}"
    );
    assert!(stdout.contains("initialising from"), "{stdout}");
    let ply = rust3r_io::load_splats(&train_out.join("splats.ply")).unwrap();
    let spz = rust3r_io::load_splats(&train_out.join("splats_1.spz")).unwrap();
    assert!(ply.len() > 1000 && spz.len() == ply.len());
}

#[test]
fn train_with_alpha_loss_and_masks() {
    let dir = tempfile::tempdir().unwrap();
    // Alpha loss on lego: every training view has alpha.
    let lego = data("lego");
    let out = dir.path().join("lego_alpha");
    let (ok, stdout, err) = rust3r(&[
        "train",
        lego.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--steps",
        "5",
        "--downscale",
        "20",
        "--init-count",
        "300",
        "--sh-degree",
        "0",
        "--background",
        "black",
        "--alpha-loss",
        "1",
    ]);
    assert!(ok, "{err}");
    assert!(
        stdout.contains("alpha loss (weight 1): 87 of 87 training views have an alpha channel"),
        "{stdout}"
    );
    let (ok, _, err) = rust3r(&[
        "train",
        lego.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--alpha-loss=-1",
    ]);
    assert!(!ok && err.contains("--alpha-loss"), "{err}");

    // A small COLMAP scene with a masks/ folder.
    let scene = dir.path().join("masked");
    std::fs::create_dir_all(scene.join("images")).unwrap();
    std::fs::create_dir_all(scene.join("masks")).unwrap();
    let mut lines = String::new();
    for k in 0..4u32 {
        let name = format!("v{k}.jpg");
        image::RgbImage::from_fn(64, 48, |x, y| {
            image::Rgb([(x * 4) as u8, (y * 5) as u8, (k * 60) as u8])
        })
        .save(scene.join("images").join(&name))
        .unwrap();
        image::GrayImage::from_fn(64, 48, |x, _| image::Luma([if x < 40 { 255 } else { 0 }]))
            .save(scene.join("masks").join(format!("{name}.png")))
            .unwrap();
        lines += &format!("{} 1 0 0 0 {} 0 0 1 {name}\n\n", k + 1, k as f64 * 0.2);
    }
    std::fs::write(scene.join("cameras.txt"), "1 PINHOLE 64 48 60 60 32 24\n").unwrap();
    std::fs::write(scene.join("images.txt"), lines).unwrap();
    let out = dir.path().join("masked_out");
    let args = [
        "train",
        scene.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--steps",
        "3",
        "--init-count",
        "200",
        "--sh-degree",
        "0",
        "--eval-every",
        "0",
    ];
    let (ok, stdout, err) = rust3r(&args);
    assert!(ok, "{err}");
    assert!(
        stdout.contains("masks: 4 of 4 training views have one"),
        "{stdout}"
    );
    // A corrupt mask stops the run with the file named.
    std::fs::write(scene.join("masks/v2.jpg.png"), b"garbage").unwrap();
    let (ok, _, err) = rust3r(&args);
    assert!(
        !ok && err.contains("v2.jpg.png") && err.contains("mask"),
        "{err}"
    );
}

#[test]
fn bench_sort_checks_the_device_sort_against_the_host() {
    // Past the column-scan limit (1024 tiles of 2048 keys) and with a partial last tile; the
    // benchmark refuses to report a time for a wrong sort.
    let (ok, stdout, err) = rust3r(&[
        "bench",
        "sort",
        "--n",
        "2100001",
        "--bits",
        "13",
        "--iters",
        "1",
        "--warmup",
        "0",
        "--warmup-ms",
        "0",
    ]);
    assert!(ok, "{err}");
    assert!(
        stdout.contains("sort of 2100001 pairs by 13 bits"),
        "{stdout}"
    );
    assert!(
        stdout.contains("count") && stdout.contains("scan") && stdout.contains("scatter"),
        "{stdout}"
    );
    let (ok, _, err) = rust3r(&["bench", "sort", "--n", "10", "--bits", "33"]);
    assert!(!ok && err.contains("--bits"), "{err}");
}

#[test]
fn profiling_reports_every_forward_phase_in_host_and_device_time() {
    // Host mode charges each phase a synchronised host interval, device mode the device's own
    // time (profiling windows); both must name every phase of the forward pass with a positive,
    // finite mean. Host mode through the flag, device mode through RUST3R_PROFILE (the flag
    // would win over it), both through a tuning file that forces the other layout.
    let npz = data("garden_points/test_garden.npz");
    let tmp = tempfile::tempdir().unwrap();
    let tuning = tmp.path().join("tuning.json");
    std::fs::write(
        &tuning,
        r#"{"raster": {"vec_shared": true, "backward_batch_cap": 4}}"#,
    )
    .unwrap();
    for (mode, flag) in [("host", true), ("device", false)] {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_rust3r"));
        cmd.args([
            "bench",
            "raster",
            "--npz",
            npz.to_str().unwrap(),
            "--ns",
            "base",
            "--res",
            "64x48",
        ])
        .args(["--iters", "2", "--warmup", "0", "--warmup-ms", "0"])
        .arg("--tuning")
        .arg(&tuning);
        if flag {
            cmd.env("RUST3R_PROFILE", "0").args(["--profile", mode]);
        } else {
            cmd.env("RUST3R_PROFILE", mode);
        }
        let out = cmd.output().expect("run rust3r");
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{mode}: {text}");
        for phase in [
            "fwd 1 project",
            "fwd 2c depth sort",
            "fwd 3b tile sort",
            "fwd 4 rasterize",
            "bwd 1 rasterize",
        ] {
            let line = text
                .lines()
                .find(|l| l.starts_with(phase))
                .unwrap_or_else(|| panic!("{mode}: no {phase} in {text}"));
            let mean: f64 = line
                .split('|')
                .nth(3)
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(f64::NAN);
            assert!(mean.is_finite() && mean > 0.0, "{mode}: {line}");
        }
    }
}

#[test]
fn tuning_files_are_checked_and_retired_variables_named() {
    let tmp = tempfile::tempdir().unwrap();
    let bad = tmp.path().join("bad-tuning.json");
    std::fs::write(&bad, r#"{"gpu": {"no_planes": true}}"#).unwrap();
    let bad = bad.to_str().unwrap();
    let (ok, _, err) = rust3r(&["bench", "sort", "--n", "1000", "--tuning", bad]);
    assert!(
        !ok && err.contains("bad-tuning.json") && err.contains("no_planes"),
        "{err}"
    );
    let (ok, _, err) = rust3r(&["bench", "sort", "--n", "1000", "--profile", "sometimes"]);
    assert!(!ok && err.contains("sometimes"), "{err}");
    // A retired switch is not read, and the run says what replaces it.
    let out = Command::new(env!("CARGO_BIN_EXE_rust3r"))
        .env("RUST3R_NO_PLANES", "1")
        .args([
            "bench",
            "sort",
            "--n",
            "1000",
            "--iters",
            "1",
            "--warmup",
            "0",
            "--warmup-ms",
            "0",
        ])
        .output()
        .expect("run rust3r");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("RUST3R_NO_PLANES is no longer read") && err.contains("gpu.subgroups"),
        "{err}"
    );
}
