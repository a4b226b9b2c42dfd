//! The PyTorch fixture (`tools/lpips_fixture.py`, run with torch 2.11): small AlexNet and VGG16
//! backbones with lpips's key names, saved by `torch.save` in the legacy (pre-1.6) and the zip
//! format, image pairs, and float64 LPIPS values per pair and per layer.

mod common;

use std::path::PathBuf;

use common::device;
use rust3r_lpips::{Image, Lpips, Net, lin_key};
use rust3r_torch_checkpoint::{CheckpointFormat, TensorFile};
use serde_json::Value;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/lpips")).join(name)
}

fn reference() -> Value {
    serde_json::from_slice(&std::fs::read(fixture("reference.json")).unwrap()).unwrap()
}

/// The image pairs, HWC f32 in [0, 1].
fn pairs(r: &Value) -> Vec<(Vec<f32>, Vec<f32>, usize, usize)> {
    let raw = std::fs::read(fixture("images.f32")).unwrap();
    let floats: Vec<f32> = raw
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    r["pairs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let (h, w) = (
                p["height"].as_u64().unwrap() as usize,
                p["width"].as_u64().unwrap() as usize,
            );
            let n = h * w * 3;
            let at = |key: &str| {
                let off = p[key].as_u64().unwrap() as usize / 4;
                floats[off..off + n].to_vec()
            };
            (at("a_offset"), at("b_offset"), w, h)
        })
        .collect()
}

#[test]
fn legacy_and_zip_files_hold_identical_tensors() {
    for net in ["alex", "vgg"] {
        for part in ["backbone", "lin"] {
            let legacy = fixture(&format!("{net}_{part}_legacy.pth"));
            let zip = fixture(&format!("{net}_{part}_zip.pth"));
            let mut a = TensorFile::open(&legacy).unwrap();
            let mut b = TensorFile::open(&zip).unwrap();
            assert_eq!(
                a.format(),
                CheckpointFormat::PyTorchLegacy,
                "{}",
                legacy.display()
            );
            assert_eq!(
                b.format(),
                CheckpointFormat::PyTorchZip,
                "{}",
                zip.display()
            );
            let names = a.tensor_names();
            assert_eq!(names, b.tensor_names(), "{net} {part}");
            assert!(!names.is_empty());
            for n in &names {
                let (x, y) = (a.read_tensor(n).unwrap(), b.read_tensor(n).unwrap());
                assert_eq!(x.shape, y.shape, "{net} {part} {n}");
                let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                assert!(
                    bits(&x.data) == bits(&y.data),
                    "{net} {part} {n}: values differ"
                );
                assert!(
                    x.data.iter().any(|&v| v != 0.0),
                    "{net} {part} {n}: all zero"
                );
            }
        }
    }
}

#[test]
fn every_pair_matches_pytorch() {
    let r = reference();
    let pairs = pairs(&r);
    let device = device();
    let mut worst: f64 = 0.0;
    for (name, net) in [("alex", Net::Alex), ("vgg", Net::Vgg)] {
        let expected = r["nets"][name].as_array().unwrap();
        assert_eq!(expected.len(), pairs.len());
        let mut by_format = Vec::new();
        for format in ["legacy", "zip"] {
            let backbone = fixture(&format!("{name}_backbone_{format}.pth"));
            let lin = fixture(&format!("{name}_lin_{format}.pth"));
            // The network is inferred from the backbone's keys.
            let lpips = Lpips::load(&backbone, &lin, None, &device).unwrap();
            assert_eq!(lpips.net(), net);
            assert!(!lpips.weights().is_full_size());
            let mut values = Vec::new();
            for ((a, b, w, h), e) in pairs.iter().zip(expected) {
                let (a, b) = (
                    Image {
                        rgb: a,
                        width: *w,
                        height: *h,
                    },
                    Image {
                        rgb: b,
                        width: *w,
                        height: *h,
                    },
                );
                let got = lpips.distance_layers(a, b).unwrap();
                let want: Vec<f64> = e["per_layer"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_f64().unwrap())
                    .collect();
                let total = lpips.distance(a, b).unwrap();
                let want_total = e["lpips"].as_f64().unwrap();
                if want_total == 0.0 {
                    assert_eq!(total, 0.0, "{name} {format} identical pair");
                    assert_eq!(got, [0.0; 5]);
                } else {
                    for k in 0..5 {
                        let err = (got[k] - want[k]).abs() / want[k].abs();
                        worst = worst.max(err);
                        assert!(
                            err < 1e-5,
                            "{name} {format} {w}x{h} layer {k}: {} vs {} ({err:.2e})",
                            got[k],
                            want[k]
                        );
                    }
                    let err = (total - want_total).abs() / want_total;
                    worst = worst.max(err);
                    assert!(
                        err < 1e-5,
                        "{name} {format} {w}x{h}: {total} vs {want_total} ({err:.2e})"
                    );
                }
                values.push(total);
            }
            by_format.push(values);
        }
        // Both files hold the same weights, so the values are the same to the bit.
        assert_eq!(by_format[0], by_format[1], "{name}");
    }
    eprintln!("worst relative error against PyTorch's float64 LPIPS: {worst:.2e}");
}

#[test]
fn full_size_layouts_match_torchvision_and_lpips() {
    let r = reference();
    let layout = &r["full_size_layout"];
    assert!(
        r["full_size_layout_checked_against_torchvision"].is_string(),
        "layout not checked against torchvision"
    );
    for (name, net) in [("alex", Net::Alex), ("vgg", Net::Vgg)] {
        let (backbone, lin) = net.full_size_layout();
        let parse = |v: &Value| -> std::collections::BTreeMap<String, Vec<usize>> {
            v.as_object()
                .unwrap()
                .iter()
                .map(|(k, s)| {
                    (
                        k.clone(),
                        s.as_array()
                            .unwrap()
                            .iter()
                            .map(|d| d.as_u64().unwrap() as usize)
                            .collect(),
                    )
                })
                .collect()
        };
        assert_eq!(
            backbone,
            parse(&layout[name]["backbone"]),
            "{name} backbone"
        );
        assert_eq!(lin, parse(&layout[name]["lin"]), "{name} lin");
        assert_eq!(lin.len(), 5);
        assert!(lin.contains_key(&lin_key(4)));
    }
}
