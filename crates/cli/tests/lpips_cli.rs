//! `rust3r lpips` and `rust3r train --lpips-*` end to end, with the small PyTorch-made networks of
//! crates/lpips/tests/fixtures/lpips (legacy and zip `torch.save` files).

use rust3r_testdata::data;
use std::path::{Path, PathBuf};
use std::process::Command;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../lpips/tests/fixtures/lpips"
    ))
    .join(name)
}

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

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Pair `i` of the fixture as 16-bit PNGs (the fixture's f32 values to within 7.6e-6).
fn write_pair(dir: &Path, i: usize) -> (PathBuf, PathBuf, f64, f64) {
    let r: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fixture("reference.json")).unwrap()).unwrap();
    let raw = std::fs::read(fixture("images.f32")).unwrap();
    let p = &r["pairs"][i];
    let (h, w) = (
        p["height"].as_u64().unwrap() as u32,
        p["width"].as_u64().unwrap() as u32,
    );
    let mut paths = Vec::new();
    for key in ["a_offset", "b_offset"] {
        let off = p[key].as_u64().unwrap() as usize;
        let px: Vec<u16> = raw[off..off + (w * h * 3) as usize * 4]
            .chunks_exact(4)
            .map(|c| (f32::from_le_bytes(c.try_into().unwrap()) as f64 * 65535.0).round() as u16)
            .collect();
        let img = image::ImageBuffer::<image::Rgb<u16>, _>::from_raw(w, h, px).unwrap();
        let path = dir.join(format!("pair{i}_{key}.png"));
        img.save(&path).unwrap();
        paths.push(path);
    }
    let want = |net: &str| r["nets"][net][i]["lpips"].as_f64().unwrap();
    (
        paths[0].clone(),
        paths[1].clone(),
        want("alex"),
        want("vgg"),
    )
}

/// The number after the last ": " of the line starting with `prefix`.
fn value(stdout: &str, prefix: &str) -> f64 {
    let line = stdout
        .lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no {prefix:?} line in {stdout}"));
    line.rsplit(": ").next().unwrap().trim().parse().unwrap()
}

#[test]
fn lpips_command_reproduces_pytorch() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, alex, vgg) = write_pair(dir.path(), 1);
    for (net, backbone, lin, want) in [
        ("alex", "alex_backbone_legacy.pth", "alex_lin_zip.pth", alex),
        ("vgg", "vgg_backbone_zip.pth", "vgg_lin_legacy.pth", vgg),
    ] {
        let (ok, out, err) = rust3r(&[
            "lpips",
            s(&a),
            s(&b),
            "--lpips-backbone",
            s(&fixture(backbone)),
            "--lpips-weights",
            s(&fixture(lin)),
            "--layers",
        ]);
        assert!(ok, "{err}");
        assert!(
            err.contains("not the released"),
            "no warning about the small test network: {err}"
        );
        let got = value(&out, &format!("LPIPS ({net}, v0.1)"));
        // 16-bit quantisation of the images moves the value by far less than this.
        assert!(
            (got - want).abs() / want < 1e-4,
            "{net}: {got} vs PyTorch's {want}"
        );
        let layers: f64 = (0..5).map(|k| value(&out, &format!("layer {k}"))).sum();
        assert!((layers - got).abs() < 1e-12, "{out}");
    }
    // Identical images, and the network named explicitly.
    let (ok, out, err) = rust3r(&[
        "lpips",
        s(&a),
        s(&a),
        "--lpips-backbone",
        s(&fixture("alex_backbone_zip.pth")),
        "--lpips-weights",
        s(&fixture("alex_lin_zip.pth")),
        "--lpips-net",
        "alex",
    ]);
    assert!(ok, "{err}");
    assert_eq!(value(&out, "LPIPS (alex"), 0.0);
}

#[test]
fn lpips_command_errors_name_the_files() {
    let dir = tempfile::tempdir().unwrap();
    let (a, _, _, _) = write_pair(dir.path(), 0);
    let (c, _, _, _) = write_pair(dir.path(), 2);
    let (bb, lin) = (
        fixture("alex_backbone_legacy.pth"),
        fixture("alex_lin_legacy.pth"),
    );
    let (ok, _, err) = rust3r(&[
        "lpips",
        s(&a),
        s(&c),
        "--lpips-backbone",
        s(&bb),
        "--lpips-weights",
        s(&lin),
    ]);
    assert!(
        !ok && err.contains("differ in size")
            && err.contains("pair0_a_offset.png is 64x64")
            && err.contains("pair2_a_offset.png is 72x96"),
        "{err}"
    );
    let missing = dir.path().join("alexnet-owt-7be5be79.pth");
    let (ok, _, err) = rust3r(&[
        "lpips",
        s(&a),
        s(&a),
        "--lpips-backbone",
        s(&missing),
        "--lpips-weights",
        s(&lin),
    ]);
    assert!(
        !ok && err.contains("alexnet-owt-7be5be79.pth") && err.contains("No such file"),
        "{err}"
    );
    let (ok, _, err) = rust3r(&[
        "lpips",
        s(&a),
        s(&a),
        "--lpips-backbone",
        s(&bb),
        "--lpips-weights",
        s(&fixture("vgg_lin_legacy.pth")),
    ]);
    assert!(
        !ok && err.contains("vgg_lin_legacy.pth") && err.contains("different networks"),
        "{err}"
    );
    let (ok, _, err) = rust3r(&[
        "lpips",
        s(&a),
        s(&a),
        "--lpips-backbone",
        s(&bb),
        "--lpips-weights",
        s(&lin),
        "--lpips-net",
        "vgg",
    ]);
    assert!(
        !ok && err.contains("alex_backbone_legacy.pth") && err.contains("VGG16 has no convolution"),
        "{err}"
    );
    let (ok, _, err) = rust3r(&[
        "lpips",
        s(&a),
        s(&a),
        "--lpips-backbone",
        s(&bb),
        "--lpips-weights",
        s(&lin),
        "--lpips-net",
        "resnet",
    ]);
    assert!(
        !ok && err.contains("unknown LPIPS network 'resnet'"),
        "{err}"
    );
    let png = dir.path().join("nope.png");
    let (ok, _, err) = rust3r(&[
        "lpips",
        s(&a),
        s(&png),
        "--lpips-backbone",
        s(&bb),
        "--lpips-weights",
        s(&lin),
    ]);
    assert!(!ok && err.contains("nope.png"), "{err}");
}

#[test]
fn train_reports_lpips_in_eval_json() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("lego");
    let lego = data("lego");
    let (bb, lin) = (
        fixture("alex_backbone_legacy.pth"),
        fixture("alex_lin_zip.pth"),
    );
    let args = [
        "train",
        s(&lego),
        "--out",
        s(&out),
        "--steps",
        "6",
        "--eval-at",
        "3",
        "--downscale",
        "20",
        "--init-count",
        "800",
        "--sh-degree",
        "1",
        "--lpips-backbone",
        s(&bb),
        "--lpips-weights",
        s(&lin),
    ];
    let (ok, stdout, err) = rust3r(&args);
    assert!(ok, "{err}");
    assert!(
        stdout.contains("LPIPS v0.1 (alex) on the held-out views"),
        "{stdout}"
    );
    assert!(
        stdout.contains("step 6: held-out PSNR") && stdout.contains(", LPIPS 0."),
        "{stdout}"
    );
    let eval: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("eval.json")).unwrap()).unwrap();
    let recs = eval.as_array().unwrap();
    assert_eq!(recs.len(), 2);
    for r in recs {
        let v = r["lpips"]
            .as_f64()
            .unwrap_or_else(|| panic!("no lpips in {r}"));
        // A few steps from random Gaussians: far from the ground truth, but a distance.
        assert!(v.is_finite() && v > 0.0 && v < 2.0, "{r}");
        assert!(r["psnr"].as_f64().unwrap() > 5.0 && r["num_splats"] == 800);
    }

    // Bad weights stop the run before anything is trained or written.
    let out2 = dir.path().join("bad");
    let missing = dir.path().join("vgg16-397923af.pth");
    let args = [
        "train",
        s(&lego),
        "--out",
        s(&out2),
        "--steps",
        "6",
        "--downscale",
        "20",
        "--lpips-backbone",
        s(&missing),
        "--lpips-weights",
        s(&lin),
    ];
    let (ok, stdout, err) = rust3r(&args);
    assert!(
        !ok && err.contains("vgg16-397923af.pth") && err.contains("No such file"),
        "{err}"
    );
    assert!(
        !stdout.contains("images decoded") && !out2.join("eval.json").exists(),
        "{stdout}"
    );
    let truncated = dir.path().join("alex_truncated.pth");
    let bytes = std::fs::read(&bb).unwrap();
    std::fs::write(&truncated, &bytes[..bytes.len() - 100]).unwrap();
    let args = [
        "train",
        s(&lego),
        "--out",
        s(&out2),
        "--downscale",
        "20",
        "--lpips-backbone",
        s(&truncated),
        "--lpips-weights",
        s(&lin),
    ];
    let (ok, _, err) = rust3r(&args);
    assert!(
        !ok && err.contains("alex_truncated.pth") && err.contains("truncated"),
        "{err}"
    );
    // Both files are needed.
    let (ok, _, err) = rust3r(&[
        "train",
        s(&lego),
        "--out",
        s(&out2),
        "--lpips-backbone",
        s(&bb),
    ]);
    assert!(!ok && err.contains("--lpips-weights"), "{err}");
    // Held-out views too small for AlexNet (lego at 1/40: 20x20) are refused up front.
    let args = [
        "train",
        s(&lego),
        "--out",
        s(&out2),
        "--downscale",
        "40",
        "--lpips-backbone",
        s(&bb),
        "--lpips-weights",
        s(&lin),
    ];
    let (ok, stdout, err) = rust3r(&args);
    assert!(
        !ok && err.contains("too small for LPIPS-alex") && err.contains("held-out view"),
        "{err}"
    );
    assert!(!stdout.contains("images decoded"), "{stdout}");
}
