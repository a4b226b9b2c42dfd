//! Learned retrieval against upstream's code: `tests/fixtures/retrieval` was made by
//! `tools/retrieval_fixture.py`, which runs MASt3R's `RetrievalModel` / `Retriever` and
//! MASt3R-SLAM's `RetrievalDatabase.update` (with the `asmk` package and faiss) on encoder
//! features of redkitchen frames from the tiny checkpoint. Every query's selected features,
//! word assignments, binary codes (query and stored), database scores and retrieved keyframes
//! are compared: integers and bits exactly, floats within `1e-4 * max|ref|`.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rust3r_mast3r::retrieval::{
    AsmkParams, Codebook, DeviceCodebook, RetrievalDatabase, RetrievalError,
};
use rust3r_mast3r::{SafetensorsFile, TensorF32};
use rust3r_testdata::rel_err;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/retrieval")
        .join(name)
}

fn tensors(path: &Path) -> (BTreeMap<String, TensorF32>, SafetensorsFile) {
    let mut f = SafetensorsFile::open(path).unwrap();
    let mut out = BTreeMap::new();
    for n in f.tensor_names() {
        out.insert(n.clone(), f.read_tensor(&n).unwrap());
    }
    (out, f)
}

fn ints(t: &TensorF32) -> Vec<i64> {
    t.data.iter().map(|&v| v as i64).collect()
}

fn unpack(codes: &[u32], code_words: usize, dim: usize) -> Vec<i64> {
    codes
        .chunks(code_words)
        .flat_map(|c| (0..dim).map(move |b| ((c[b / 32] >> (31 - b % 32)) & 1) as i64))
        .collect()
}

#[test]
fn retrieval_matches_upstream() {
    check_against_upstream(None);
}

/// The same queries with the visual words assigned on the GPU (`DeviceCodebook`).
#[test]
fn retrieval_with_words_assigned_on_the_gpu_matches_upstream() {
    let gpu = rust3r_gpu::Gpu::default_device().expect("a GPU adapter (lavapipe)");
    check_against_upstream(Some(&gpu));
}

fn check_against_upstream(gpu: Option<&rust3r_gpu::Gpu>) {
    let (feats, ff) = tensors(&fixture("features.safetensors"));
    let _ = ff;
    let (want, _) = tensors(&fixture("expected.safetensors"));
    let mut db = RetrievalDatabase::load(
        fixture("tiny_retrieval_trainingfree.pth"),
        None,
        AsmkParams::default(),
    )
    .unwrap();
    db.set_device(gpu).unwrap();
    assert_eq!(db.on_device(), gpu.is_some());
    let steps = feats.len();
    assert!(steps >= 4, "{steps} frames");
    let (k, min_thresh) = (3, 5e-3);
    let mut worst_feat = 0f64;
    let mut worst_score = 0f64;
    let mut retrieved_all = Vec::new();
    for j in 0..steps {
        let p = format!("step{j}.");
        let feat = &feats[&format!("feat.{j}")];
        let add = want.contains_key(&format!("{p}stored_words"));
        let q = db.update(&feat.data, add, k, min_thresh).unwrap();
        let idx: Vec<i64> = q.local.indices.iter().map(|&i| i as i64).collect();
        assert_eq!(
            idx,
            ints(&want[&format!("{p}indices")]),
            "step {j}: selected tokens"
        );
        let wf = &want[&format!("{p}features")];
        let to64 = |v: &[f32]| v.iter().map(|&x| x as f64).collect::<Vec<f64>>();
        let e = rel_err(&to64(&q.local.features), &to64(&wf.data));
        worst_feat = worst_feat.max(e);
        assert!(
            e <= 1e-4,
            "step {j}: selected features differ by {e:.3e} of max"
        );
        let dim = q.local.dim;
        if j > 0 {
            let assign: Vec<i64> = q.assign.iter().flatten().map(|&w| w as i64).collect();
            assert_eq!(
                assign,
                ints(&want[&format!("{p}assign")]),
                "step {j}: word assignment"
            );
            let words: Vec<i64> = q.query_codes.words.iter().map(|&w| w as i64).collect();
            assert_eq!(
                words,
                ints(&want[&format!("{p}query_words")]),
                "step {j}: query words"
            );
            let bits = unpack(&q.query_codes.codes, q.query_codes.code_words, dim);
            assert_eq!(
                bits,
                ints(&want[&format!("{p}query_bits")]),
                "step {j}: query codes"
            );
            let ws = to64(&want[&format!("{p}scores")].data);
            let e = rel_err(&q.scores, &ws);
            worst_score = worst_score.max(e);
            assert!(e <= 1e-4, "step {j}: scores {:?} vs {ws:?}", q.scores);
        } else {
            assert!(q.scores.is_empty() && q.retrieved.is_empty());
        }
        let r: Vec<i64> = q.retrieved.iter().map(|&i| i as i64).collect();
        let wr: Vec<i64> = ints(&want[&format!("{p}retrieved")])
            .into_iter()
            .filter(|&i| i >= 0)
            .collect();
        assert_eq!(r, wr, "step {j}: retrieved keyframes");
        retrieved_all.push(r);
        if add {
            let s = q.stored_codes.as_ref().expect("added");
            let words: Vec<i64> = s.words.iter().map(|&w| w as i64).collect();
            assert_eq!(words, ints(&want[&format!("{p}stored_words")]), "step {j}");
            let bits = unpack(&s.codes, s.code_words, dim);
            assert_eq!(bits, ints(&want[&format!("{p}stored_bits")]), "step {j}");
        } else {
            assert!(q.stored_codes.is_none());
        }
    }
    eprintln!(
        "retrieval parity: {steps} queries, features {worst_feat:.2e}, scores {worst_score:.2e} of max; retrieved {retrieved_all:?}"
    );
    // The fixture revisits frames: something must have been retrieved.
    assert!(retrieved_all.iter().any(|r| !r.is_empty()));
}

#[test]
fn codebook_pickles_of_every_protocol_and_order_agree() {
    let base = Codebook::load(fixture("tiny_retrieval_codebook.pkl")).unwrap();
    let row = |c: &Codebook| {
        (0..c.len())
            .flat_map(|w| c.centroid(w).to_vec())
            .collect::<Vec<f32>>()
    };
    for name in [
        "codebook_protocol2.pkl",
        "codebook_protocol5.pkl",
        "codebook_fortran.pkl",
        "codebook_bare_f8_bigendian.pkl",
    ] {
        let c = Codebook::load(fixture(name)).unwrap();
        assert_eq!((c.len(), c.dim()), (base.len(), base.dim()), "{name}");
        assert_eq!(row(&c), row(&base), "{name}");
    }
}

#[test]
fn hostile_or_wrong_codebooks_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, bytes: &[u8]| {
        let p = dir.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        p
    };
    // os.system through REDUCE: refused by name, nothing run.
    let p = write("evil.pkl", b"\x80\x04\x95\x1c\x00\x00\x00\x00\x00\x00\x00\x8c\x02os\x8c\x06system\x93\x8c\x05touch\x85R.");
    let e = Codebook::load(&p).unwrap_err().to_string();
    assert!(e.contains("evil.pkl") && e.contains("os.system"), "{e}");
    // A dict that is not a codebook.
    let p = write("dict.pkl", b"\x80\x04}\x8c\x04type\x8c\x03IVFs.");
    let e = Codebook::load(&p).unwrap_err().to_string();
    assert!(e.contains("dict.pkl") && e.contains("IVF"), "{e}");
    // Truncated pickles and every shorter prefix of the real file: errors, never panics.
    let real = std::fs::read(fixture("codebook_protocol5.pkl")).unwrap();
    for cut in (0..real.len()).step_by(97) {
        let p = write("cut.pkl", &real[..cut]);
        let e = Codebook::load(&p).unwrap_err().to_string();
        assert!(e.contains("cut.pkl"), "{e}");
    }
    // Missing file.
    let e = Codebook::load(dir.path().join("none.pkl"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("none.pkl"), "{e}");
    // A checkpoint whose codebook is missing names the codebook path upstream would use.
    let e = RetrievalDatabase::load(
        fixture("tiny_retrieval_trainingfree.pth"),
        Some(&dir.path().join("missing_codebook.pkl")),
        AsmkParams::default(),
    )
    .unwrap_err();
    assert!(matches!(e, RetrievalError::File(_)), "{e}");
    assert_eq!(
        rust3r_mast3r::retrieval::codebook_path(Path::new(
            "/c/MASt3R_ViTLarge_BaseDecoder_512_catmlpdpt_metric_retrieval_trainingfree.pth"
        )),
        Path::new("/c/MASt3R_ViTLarge_BaseDecoder_512_catmlpdpt_metric_retrieval_codebook.pkl")
    );
}

/// Writes the tiny encoder's features of the fixture's frames (run by hand to remake the
/// fixture: `RUST3R_RETRIEVAL_DUMP=features.safetensors cargo test --release --workspace
/// --test retrieval -- --ignored dump_encoder_features`, then `tools/retrieval_fixture.py`).
#[test]
#[ignore = "writes the input of tools/retrieval_fixture.py"]
fn dump_encoder_features() {
    use burn::tensor::{Device, DeviceKind};
    use rust3r_mast3r::{Mast3r, Precision};
    let out = std::env::var("RUST3R_RETRIEVAL_DUMP").expect("RUST3R_RETRIEVAL_DUMP=<file>");
    let device = Device::wgpu(DeviceKind::DefaultDevice);
    let model = Mast3r::load(common::tiny_pth(), &device, Precision::F32).unwrap();
    let data = rust3r_io::datasets::open(&rust3r_testdata::data("redkitchen"), None, 1).unwrap();
    // Keyframes along the sequence, then revisits of the first ones.
    let frames = [0usize, 20, 40, 1, 41, 2];
    let mut t = BTreeMap::new();
    for (j, &i) in frames.iter().enumerate() {
        let f = data.frame(i).unwrap();
        let p = rust3r_mast3r::preprocess::preprocess(
            f.rgb.as_raw(),
            f.rgb.width() as usize,
            f.rgb.height() as usize,
            512,
        )
        .unwrap();
        let enc = model.encode(model.image_tensor(p.data, [1, 3, p.height, p.width]));
        let [_, n, e] = enc.feat.dims();
        let v = enc.feat.into_data().try_into_vec::<f32>().unwrap();
        t.insert(format!("feat.{j}"), TensorF32::new(vec![n, e], v).unwrap());
    }
    let mut meta = BTreeMap::new();
    meta.insert("frames".to_string(), format!("{frames:?}"));
    rust3r_mast3r::write_safetensors(&out, &t, &meta).unwrap();
}

/// Words assigned on the GPU equal the float64 host reference on a codebook with exact
/// duplicates and near ties (features on centroids, centroids a rounding step apart), for one
/// and several assignments and a feature count that is not a multiple of the kernel's rows.
#[test]
fn gpu_word_assignment_equals_the_host_reference() {
    let gpu = rust3r_gpu::Gpu::default_device().expect("a GPU adapter (lavapipe)");
    let (k, dim) = (700, 48);
    let mut cb = Codebook::random(k, dim, 3).unwrap();
    let mut c: Vec<f32> = (0..k).flat_map(|w| cb.centroid(w).to_vec()).collect();
    // Word 5 duplicates word 9; word 11 is word 12 moved by one rounding step.
    let (a, b) = c.split_at_mut(9 * dim);
    a[5 * dim..6 * dim].copy_from_slice(&b[..dim]);
    c[11 * dim] = f32::from_bits(c[12 * dim].to_bits() + 1);
    for d in 1..dim {
        c[11 * dim + d] = c[12 * dim + d];
    }
    cb = Codebook::new(c, dim).unwrap();
    let mut state = 0x1234_5678u64;
    let mut rnd = || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    };
    let n = 23;
    let mut feats: Vec<f32> = (0..n * dim).map(|_| rnd()).collect();
    for (i, w) in [(0usize, 9usize), (1, 12), (2, 5)] {
        feats[i * dim..(i + 1) * dim].copy_from_slice(cb.centroid(w));
    }
    let dev = DeviceCodebook::new(&gpu, &cb).unwrap();
    for m in [1, 5, 17] {
        let want = cb.nearest_all(&feats, m);
        let got = dev.nearest_all(&cb, &feats, m).unwrap();
        assert_eq!(got, want, "{m} assignments");
    }
    assert_eq!(
        dev.nearest_all(&cb, &feats, 1).unwrap()[0],
        vec![5],
        "duplicates: the lower word"
    );
}
