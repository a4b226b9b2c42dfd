//! `rust3r mast3r-infer` end to end on the tiny fixture (the odd-sized case only, to stay quick),
//! and its errors on bad input.

use std::collections::BTreeMap;
use std::process::Command;

use rust3r_mast3r::SafetensorsFile;
use rust3r_mast3r::parity::{OutData, OutTensor, write_outputs};
use rust3r_testdata::fixtures;

fn rust3r(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rust3r"))
        .args(args)
        .output()
        .expect("run rust3r");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn mast3r_infer_reproduces_the_fixture_case() {
    let dir = tempfile::tempdir().unwrap();
    // An inputs file holding only the odd-sized pair.
    let mut full = SafetensorsFile::open(fixtures("mast3r_tiny/inputs.safetensors")).unwrap();
    let mut inputs = BTreeMap::new();
    for v in 1..=2 {
        let name = format!("pairodd.view{v}.img");
        let t = full.read_tensor(&name).unwrap();
        inputs.insert(
            name,
            OutTensor {
                shape: t.shape,
                data: OutData::F32(t.data),
            },
        );
    }
    let inp = dir.path().join("odd.safetensors");
    write_outputs(&inp, &inputs).unwrap();
    let out = dir.path().join("out.safetensors");
    let ckpt = fixtures("mast3r_tiny/tiny_mast3r.pth");
    let (ok, err) = rust3r(&[
        "mast3r-infer",
        "--checkpoint",
        ckpt.to_str().unwrap(),
        "--inputs",
        inp.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    let mut ours = SafetensorsFile::open(&out).unwrap();
    let mut reference = SafetensorsFile::open(fixtures("mast3r_tiny/outputs.safetensors")).unwrap();
    let expected: Vec<String> = reference
        .tensor_names()
        .into_iter()
        .filter(|n| n.starts_with("asymodd."))
        .collect();
    let mut got = ours.tensor_names();
    got.sort();
    let mut want = expected.clone();
    want.sort();
    assert_eq!(got, want);
    for name in &expected {
        assert_eq!(ours.dtype_name(name), reference.dtype_name(name), "{name}");
        let (a, b) = (
            ours.read_tensor(name).unwrap(),
            reference.read_tensor(name).unwrap(),
        );
        assert_eq!(a.shape, b.shape, "{name}");
        let scale = b.data.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let diff = a
            .data
            .iter()
            .zip(&b.data)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0f32, |m, d| if d > m || d.is_nan() { d } else { m }); // NaN propagates
        assert!(diff <= 1e-4 * scale, "{name}: {diff} vs {scale}");
    }
}

#[test]
fn mast3r_infer_bad_input_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let ckpt = fixtures("mast3r_tiny/tiny_mast3r.pth");
    let out = dir.path().join("out.safetensors");
    let garbage = dir.path().join("garbage.safetensors");
    std::fs::write(&garbage, b"not a safetensors file at all").unwrap();
    let empty = dir.path().join("empty.safetensors");
    write_outputs(
        &empty,
        &BTreeMap::from([(
            "unrelated".to_string(),
            OutTensor {
                shape: vec![1],
                data: OutData::F32(vec![0.0]),
            },
        )]),
    )
    .unwrap();
    let misshaped = dir.path().join("misshaped.safetensors");
    let img = OutTensor {
        shape: vec![1, 3, 20, 16],
        data: OutData::F32(vec![0.0; 960]),
    };
    write_outputs(
        &misshaped,
        &BTreeMap::from([
            ("pairodd.view1.img".to_string(), img.clone()),
            ("pairodd.view2.img".to_string(), img),
        ]),
    )
    .unwrap();
    let bad_ckpt = dir.path().join("bad.pth");
    std::fs::write(&bad_ckpt, b"PK\x03\x04 truncated").unwrap();
    let inputs = fixtures("mast3r_tiny/inputs.safetensors");
    for (c, i, named) in [
        (&ckpt, &garbage, &garbage),
        (&ckpt, &empty, &empty),
        (&ckpt, &misshaped, &misshaped),
        (&bad_ckpt, &inputs, &bad_ckpt),
    ] {
        let (ok, err) = rust3r(&[
            "mast3r-infer",
            "--checkpoint",
            c.to_str().unwrap(),
            "--inputs",
            i.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ]);
        assert!(!ok, "{} should fail", named.display());
        assert!(
            err.contains(named.file_name().unwrap().to_str().unwrap()),
            "{err}"
        );
        assert!(!err.contains("panicked"), "{err}");
    }
    assert!(!out.exists());
}

/// `--profile host` times the network's phases through the device's profiler (one profiler for
/// the rasterizer and the network); without it nothing is timed.
#[test]
fn bench_mast3r_profiles_the_network_phases_when_asked() {
    let tmp = tempfile::tempdir().unwrap();
    let json = tmp.path().join("m.json");
    let json = json.to_str().unwrap();
    let run = |extra: &[&str]| {
        let mut args = vec![
            "bench", "mast3r", "--size", "tiny", "--res", "64x48", "--iters", "2", "--warmup", "1",
            "--json", json,
        ];
        args.extend_from_slice(extra);
        let (ok, err) = rust3r(&args);
        assert!(ok, "{err}");
        err
    };
    let err = run(&["--profile", "host"]);
    for phase in ["encoder", "decoder", "dpt", "local_feat", "postprocess"] {
        let line = err
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("profile {phase} ")))
            .unwrap_or_else(|| panic!("no {phase} phase in {err}"));
        assert!(line.ends_with("(2 calls)"), "{line}");
        let ms: f64 = line
            .split_whitespace()
            .nth(2)
            .and_then(|v| v.parse().ok())
            .unwrap();
        assert!(ms.is_finite() && ms > 0.0, "{line}");
    }
    let err = run(&["--profile", "off"]);
    assert!(!err.contains("profile encoder"), "{err}");
}
