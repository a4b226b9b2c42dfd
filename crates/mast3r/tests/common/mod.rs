//! Shared helpers for the integration tests.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{Cursor, Read, Write};
use std::path::{Path, PathBuf};

/// `name` in the tiny MASt3R fixture (`fixtures/mast3r_tiny` of the shared test data).
pub fn tiny(name: &str) -> PathBuf {
    rust3r_testdata::fixtures(&format!("mast3r_tiny/{name}"))
}
pub fn tiny_pth() -> PathBuf {
    tiny("tiny_mast3r.pth")
}
pub fn tiny_st() -> PathBuf {
    tiny("tiny_mast3r.safetensors")
}

/// The tiny checkpoint as MASt3R-SLAM's front end at network input size `size`, on the default
/// wgpu adapter (lavapipe in CI).
pub fn tiny_front_end(size: usize) -> rust3r_mast3r::frontend::Mast3rMonoFrontEnd {
    tiny_front_end_in(size, rust3r_mast3r::Precision::F32)
}

/// [`tiny_front_end`] with the network in `precision`.
pub fn tiny_front_end_in(
    size: usize,
    precision: rust3r_mast3r::Precision,
) -> rust3r_mast3r::frontend::Mast3rMonoFrontEnd {
    assert!(
        !rust3r_gpu::list_adapters().is_empty(),
        "a GPU adapter is required (CI installs Mesa's lavapipe)"
    );
    let device = burn::tensor::Device::wgpu(burn::tensor::DeviceKind::DefaultDevice);
    let model = rust3r_mast3r::Mast3r::load(tiny_pth(), &device, precision).unwrap();
    rust3r_mast3r::frontend::Mast3rMonoFrontEnd::new(model, size).unwrap()
}

/// [`tiny_front_end`] at size 224 with the tiny retrieval head and codebook of
/// `tests/fixtures/retrieval` (learned retrieval with random weights).
pub fn tiny_front_end_with_retrieval() -> rust3r_mast3r::frontend::Mast3rMonoFrontEnd {
    tiny_front_end_with_retrieval_in(rust3r_mast3r::Precision::F32)
}

/// [`tiny_front_end_with_retrieval`] with the network in `precision`.
pub fn tiny_front_end_with_retrieval_in(
    precision: rust3r_mast3r::Precision,
) -> rust3r_mast3r::frontend::Mast3rMonoFrontEnd {
    use rust3r_mast3r::retrieval::{AsmkParams, RetrievalDatabase};
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/retrieval");
    let db = RetrievalDatabase::load(
        fixture.join("tiny_retrieval_trainingfree.pth"),
        None,
        AsmkParams::default(),
    )
    .unwrap();
    tiny_front_end_in(224, precision)
        .with_retrieval(db)
        .unwrap()
}

pub fn json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The constructor string stored in the tiny checkpoint (config.json's copy of it).
pub fn tiny_model_string() -> String {
    json(&tiny("config.json"))["checkpoint_model_string"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Deterministic xorshift64* generator (no extra dependency).
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Every entry of a zip archive, in order.
pub fn zip_entries(bytes: &[u8]) -> Vec<(String, Vec<u8>)> {
    let mut a = zip::ZipArchive::new(Cursor::new(bytes)).unwrap();
    (0..a.len())
        .map(|i| {
            let mut f = a.by_index(i).unwrap();
            let mut v = Vec::new();
            f.read_to_end(&mut v).unwrap();
            (f.name().to_string(), v)
        })
        .collect()
}

/// Builds a stored (uncompressed) zip archive.
pub fn build_zip(entries: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut w = zip::ZipWriter::new(Cursor::new(Vec::new()));
    let opts =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    for (name, data) in entries {
        w.start_file(name.as_str(), opts).unwrap();
        w.write_all(data).unwrap();
    }
    w.finish().unwrap().into_inner()
}

/// The tiny checkpoint with its `data.pkl` passed through `edit`.
pub fn tiny_with_pickle(edit: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut entries = zip_entries(&std::fs::read(tiny_pth()).unwrap());
    let pkl = entries
        .iter_mut()
        .find(|(n, _)| n.ends_with("/data.pkl"))
        .unwrap();
    edit(&mut pkl.1);
    build_zip(&entries)
}

/// Replaces every occurrence of `from` by `to` (any lengths).
pub fn replace_all(data: &mut Vec<u8>, from: &[u8], to: &[u8]) -> usize {
    let mut out = Vec::with_capacity(data.len());
    let mut i = 0;
    let mut n = 0;
    while i < data.len() {
        if data[i..].starts_with(from) {
            out.extend_from_slice(to);
            i += from.len();
            n += 1;
        } else {
            out.push(data[i]);
            i += 1;
        }
    }
    *data = out;
    n
}

pub fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

pub fn shapes_of(t: &BTreeMap<String, rust3r_mast3r::TensorF32>) -> BTreeMap<String, Vec<usize>> {
    t.iter()
        .map(|(k, v)| (k.clone(), v.shape.clone()))
        .collect()
}
