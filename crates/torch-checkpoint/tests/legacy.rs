//! The legacy `torch.save` format (before PyTorch 1.6): files written byte for byte as PyTorch
//! lays them out load to the same tensors as the zip format; malformed and hostile ones are
//! errors naming the file, never panics.

mod common;

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use common::*;
use rust3r_torch_checkpoint::{
    CheckpointFormat, Error, PickleErrorKind, PthFile, PthFormat, TensorFile, detect_format,
};

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

/// Opens `path` and reads every tensor; the error (never a panic) must name the file.
fn load(path: &Path) -> Result<BTreeMap<String, Vec<f32>>, Error> {
    let r = catch_unwind(AssertUnwindSafe(|| -> Result<_, Error> {
        let mut f = PthFile::open(path)?;
        let names: Vec<String> = f.tensor_names().map(str::to_string).collect();
        let t = f.read_tensors(names.iter().map(String::as_str))?;
        Ok(t.into_iter().map(|(k, v)| (k, v.data)).collect())
    }));
    match r {
        Err(_) => panic!("panic while loading {}", path.display()),
        Ok(Err(e)) => {
            let text = e.to_string();
            assert!(
                text.starts_with(&path.display().to_string()),
                "error does not name the file: {text}"
            );
            assert_eq!(e.path(), path);
            Err(e)
        }
        Ok(Ok(t)) => Ok(t),
    }
}

fn expect_err(path: &Path, needles: &[&str]) -> Error {
    let e = load(path)
        .err()
        .unwrap_or_else(|| panic!("{} loaded", path.display()));
    let text = e.to_string();
    for n in needles {
        assert!(text.contains(n), "error lacks {n:?}: {text}");
    }
    e
}

#[test]
fn legacy_and_zip_load_the_same_tensors() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(11);
    let (storages, entries) = sample(&mut rng);
    let legacy = write(
        dir.path(),
        "legacy.pth",
        &legacy_file(&storages, &entries, &LegacyOptions::default()),
    );
    let zip = write(dir.path(), "zip.pth", &zip_file(&storages, &entries));
    assert_eq!(
        detect_format(&legacy).unwrap(),
        CheckpointFormat::PyTorchLegacy
    );
    assert_eq!(detect_format(&zip).unwrap(), CheckpointFormat::PyTorchZip);
    assert_eq!(PthFile::open(&legacy).unwrap().format(), PthFormat::Legacy);

    let a = load(&legacy).unwrap();
    let b = load(&zip).unwrap();
    assert_eq!(a.len(), entries.len());
    for e in &entries {
        let want = e.expected(&storages);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&a[&e.name]), bits(&want), "{} (legacy)", e.name);
        assert_eq!(bits(&b[&e.name]), bits(&want), "{} (zip)", e.name);
    }
    // Metadata as the pickle states it, file order kept.
    let f = PthFile::open(&legacy).unwrap();
    let names: Vec<&str> = f.tensor_names().collect();
    assert_eq!(
        names,
        entries.iter().map(|e| e.name.as_str()).collect::<Vec<_>>()
    );
    let i = f.tensor_info("shared.t").unwrap();
    assert_eq!(
        (i.shape.clone(), i.stride.clone(), i.storage_key.as_str()),
        (vec![5, 3], vec![1, 5], "shared")
    );

    // TensorFile reads it too.
    let mut t = TensorFile::open(&legacy).unwrap();
    assert_eq!(t.format(), CheckpointFormat::PyTorchLegacy);
    assert_eq!(t.shape("features.0.weight"), Some(vec![64, 3, 11, 11]));
    assert_eq!(t.read_tensor("double").unwrap().data, a["double"]);
}

#[test]
fn python2_strings_and_every_tensor_style() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(12);
    let (storages, mut entries) = sample(&mut rng);
    for (i, e) in entries.iter_mut().enumerate() {
        e.style = [Style::V2, Style::V1, Style::ClassBuild][i % 3];
    }
    let o = LegacyOptions {
        py2_strings: true,
        ..Default::default()
    };
    let p = write(dir.path(), "py2.pth", &legacy_file(&storages, &entries, &o));
    let t = load(&p).unwrap();
    for e in &entries {
        assert_eq!(t[&e.name], e.expected(&storages), "{}", e.name);
    }
}

#[test]
fn header_errors_say_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(13);
    let (s, e) = sample(&mut rng);
    let d = LegacyOptions::default();
    let file = |o: &LegacyOptions| legacy_file(&s, &e, o);

    let mut magic = d.magic;
    magic[0] ^= 1;
    expect_err(
        &write(
            dir.path(),
            "magic.pth",
            &file(&LegacyOptions { magic, ..d.clone() }),
        ),
        &["legacy PyTorch", "magic number"],
    );
    expect_err(
        &write(
            dir.path(),
            "version.pth",
            &file(&LegacyOptions {
                protocol_version: 1000,
                ..d.clone()
            }),
        ),
        &["protocol version 1000"],
    );
    expect_err(
        &write(
            dir.path(),
            "big.pth",
            &file(&LegacyOptions {
                little_endian: false,
                ..d.clone()
            }),
        ),
        &["big-endian"],
    );
    expect_err(
        &write(
            dir.path(),
            "view.pth",
            &file(&LegacyOptions {
                view_metadata: true,
                ..d.clone()
            }),
        ),
        &["storage views"],
    );
    // Pickles that are not torch.save files: a bare int, garbage after the protocol opcode.
    expect_err(
        &write(dir.path(), "int.pth", b"\x80\x02K\x05."),
        &["not a PyTorch checkpoint"],
    );
    expect_err(
        &write(dir.path(), "garbage.pth", b"\x80\x02\xff\xff"),
        &["not a PyTorch checkpoint"],
    );
    // The magic number's LONG1 followed by something other than STOP.
    let mut m = b"\x80\x02\x8a\x0a".to_vec();
    m.extend(d.magic);
    m.extend(b"\xff");
    expect_err(
        &write(dir.path(), "nostop.pth", &m),
        &["legacy PyTorch", "no magic number", "0xff"],
    );
    // Not a checkpoint at all (PthFile::open refuses; TensorFile would try safetensors).
    expect_err(
        &write(dir.path(), "text.pth", b"hello"),
        &["neither a zip archive"],
    );
}

#[test]
fn storage_records_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(14);
    let (s, e) = sample(&mut rng);
    let d = LegacyOptions::default();
    let file = |o: &LegacyOptions| legacy_file(&s, &e, o);
    let keys: Vec<String> = s.iter().map(|s| s.key.clone()).collect();

    // A count that disagrees with the declared size, a negative one, an enormous one.
    for (i, c) in [(1usize, 63i64), (2, -1), (0, i64::MAX)] {
        let mut counts: Vec<i64> = s.iter().map(|s| s.values.len() as i64).collect();
        counts[i] = c;
        let p = write(
            dir.path(),
            &format!("count{i}.pth"),
            &file(&LegacyOptions {
                counts: Some(counts),
                ..d.clone()
            }),
        );
        expect_err(
            &p,
            &[
                "legacy PyTorch",
                &format!("storage `{}`", keys[i]),
                &format!("element count of {c}"),
            ],
        );
    }
    // A storage missing from the key list: its tensor would have no data.
    let p = write(
        dir.path(),
        "nokey.pth",
        &file(&LegacyOptions {
            keys: Some(keys[..3].to_vec()),
            ..d.clone()
        }),
    );
    expect_err(&p, &["storage `shared`", "shared.t", "no data"]);
    // A key nobody uses, and one listed twice.
    let mut extra = keys.clone();
    extra.insert(1, "999".into());
    let p = write(
        dir.path(),
        "extra.pth",
        &file(&LegacyOptions {
            keys: Some(extra),
            ..d.clone()
        }),
    );
    expect_err(&p, &["`999`", "never uses"]);
    let mut twice = keys.clone();
    twice.push(keys[0].clone());
    let p = write(
        dir.path(),
        "twice.pth",
        &file(&LegacyOptions {
            keys: Some(twice),
            ..d.clone()
        }),
    );
    expect_err(&p, &["twice"]);
}

#[test]
fn forbidden_globals_are_named_and_not_run() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(15);
    let (s, e) = sample(&mut rng);
    let o = LegacyOptions {
        dict_global: ("os".into(), "system".into()),
        ..Default::default()
    };
    let p = write(dir.path(), "evil.pth", &legacy_file(&s, &e, &o));
    let e = expect_err(
        &p,
        &[
            "os.system",
            "forbidden",
            "legacy PyTorch pickle 4 of 5",
            "state dict",
        ],
    );
    match e {
        Error::Pickle { source, .. } => assert!(matches!(
            source.kind,
            PickleErrorKind::ForbiddenGlobal { ref module, ref name } if module == "os" && name == "system"
        )),
        other => panic!("{other:?}"),
    }
}

#[test]
fn every_truncation_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(16);
    let (s, e) = sample(&mut rng);
    let full = legacy_file(&s, &e, &LegacyOptions::default());
    let p = dir.path().join("trunc.pth");
    // Every cut inside the pickles and the first records, then a stride through the data.
    let cuts: Vec<usize> = (1..600)
        .chain((600..full.len()).step_by(97))
        .chain([full.len() - 1])
        .collect();
    let mut truncated = 0;
    for cut in cuts {
        std::fs::write(&p, &full[..cut]).unwrap();
        let e = load(&p).expect_err(&format!("cut at {cut} loaded"));
        let text = e.to_string();
        assert!(text.contains("legacy PyTorch"), "cut {cut}: {text}");
        truncated += text.contains("truncated") as usize;
    }
    assert!(
        truncated > 500,
        "only {truncated} errors say the file is truncated"
    );
}

/// Mutates `n` random bytes.
fn flip(rng: &mut Rng, data: &mut [u8], n: usize) {
    for _ in 0..n {
        let i = rng.below(data.len());
        data[i] = rng.next() as u8;
    }
}

#[test]
fn random_corruption_never_panics() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(0x001e_9ac7);
    let (s, e) = sample(&mut rng);
    let full = legacy_file(&s, &e, &LegacyOptions::default());
    let header_end = full.len() - s.iter().map(|s| 8 + s.bytes().len()).sum::<usize>();
    let p = dir.path().join("fuzz.pth");
    let mut outcomes: BTreeMap<&str, usize> = BTreeMap::new();
    for iter in 0..600 {
        let mut b = full.clone();
        match iter % 3 {
            // In the pickles.
            0 => {
                let n = 1 + rng.below(4);
                flip(&mut rng, &mut b[..header_end], n);
            }
            // In the storage records (counts and data).
            1 => {
                let n = 1 + rng.below(4);
                flip(&mut rng, &mut b[header_end..], n);
            }
            // Anywhere, then cut.
            _ => {
                let n = 1 + rng.below(8);
                flip(&mut rng, &mut b, n);
                let cut = rng.below(b.len());
                b.truncate(cut.max(1));
            }
        }
        std::fs::write(&p, &b).unwrap();
        let outcome = match load(&p) {
            Ok(_) => "loaded",
            Err(Error::Pickle { .. }) => "pickle",
            Err(Error::Format { .. }) => "format",
            Err(Error::Tensor { .. }) => "tensor",
            Err(Error::Io { .. }) => "io",
            Err(other) => panic!("iteration {iter}: unexpected {other:?}"),
        };
        *outcomes.entry(outcome).or_default() += 1;
    }
    eprintln!("corruption outcomes: {outcomes:?}");
    for k in ["pickle", "format", "loaded"] {
        assert!(
            outcomes.get(k).copied().unwrap_or(0) > 0,
            "no {k} outcomes: {outcomes:?}"
        );
    }
}
