//! Malformed and hostile inputs: every one is an error naming the file and the problem, never a
//! panic.

mod common;

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;

use common::*;
use rust3r_mast3r::{
    Checkpoint, Error, LoadOptions, MODEL_STRING_METADATA_KEY, PickleErrorKind, write_safetensors,
};
use rust3r_torch_checkpoint::Error as FileError;

/// Loads `path`, failing the test on a panic; returns the error text (or None on success).
fn load_err(path: &Path) -> Option<(String, Error)> {
    let r = catch_unwind(AssertUnwindSafe(|| Checkpoint::load(path)));
    match r {
        Err(_) => panic!("panic while loading {}", path.display()),
        Ok(Ok(_)) => None,
        Ok(Err(e)) => {
            let text = e.to_string();
            assert!(
                text.starts_with(&path.display().to_string()),
                "error does not name the file: {text}"
            );
            assert_eq!(e.path(), path);
            Some((text, e))
        }
    }
}

fn expect_err(path: &Path, needles: &[&str]) -> Error {
    let (text, e) = load_err(path).unwrap_or_else(|| panic!("{} loaded", path.display()));
    for n in needles {
        assert!(text.contains(n), "error lacks {n:?}: {text}");
    }
    e
}

#[test]
fn garbage_empty_and_truncated_files() {
    let dir = tempfile::tempdir().unwrap();
    expect_err(&write(dir.path(), "empty.pth", b""), &["too short"]);
    expect_err(
        &write(
            dir.path(),
            "garbage.bin",
            b"this is not a checkpoint at all, just text\n",
        ),
        &["safetensors"],
    );
    let mut rng = Rng(7);
    let noise: Vec<u8> = (0..4096).map(|_| rng.next() as u8).collect();
    expect_err(&write(dir.path(), "noise.bin", &noise), &["safetensors"]);
    expect_err(&dir.path().join("does-not-exist.pth"), &["No such file"]);

    let pth = std::fs::read(tiny_pth()).unwrap();
    // Truncated inside the data: the central directory is gone.
    let e = expect_err(
        &write(dir.path(), "trunc.pth", &pth[..pth.len() / 2]),
        &["zip"],
    );
    assert!(matches!(e, Error::File(FileError::Zip { .. })), "{e:?}");
    // Truncated by a few bytes (end-of-central-directory damaged).
    expect_err(
        &write(dir.path(), "trunc2.pth", &pth[..pth.len() - 3]),
        &["zip"],
    );
    // Only the zip magic.
    expect_err(&write(dir.path(), "magic.pth", b"PK\x03\x04"), &["zip"]);

    let st = std::fs::read(tiny_st()).unwrap();
    expect_err(
        &write(dir.path(), "trunc.safetensors", &st[..st.len() - 1]),
        &["truncated"],
    );
    expect_err(
        &write(dir.path(), "hdr.safetensors", &st[..100]),
        &["header length"],
    );

    // Legacy (pre-1.6) PyTorch pickle format.
    let legacy = [
        0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8,
    ];
    expect_err(
        &write(dir.path(), "legacy.pth", &legacy),
        &["legacy PyTorch"],
    );
}

#[test]
fn forbidden_global_in_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = tiny_with_pickle(|pkl| {
        assert_eq!(
            replace_all(pkl, b"ccollections\nOrderedDict\n", b"cos\nsystem\n"),
            1
        );
    });
    let p = write(dir.path(), "evil.pth", &bytes);
    let e = expect_err(&p, &["os.system", "forbidden", "data.pkl"]);
    match e {
        Error::File(FileError::Pickle { source, .. }) => {
            assert!(
                matches!(source.kind, PickleErrorKind::ForbiddenGlobal { ref module, ref name }
                if module == "os" && name == "system")
            );
            assert_eq!(source.offset, 18);
        }
        other => panic!("{other:?}"),
    }

    // A minimal malicious pickle as the whole data.pkl.
    let evil = build_zip(&[
        (
            "x/data.pkl".into(),
            b"\x80\x02cposix\nsystem\nq\x00X\x05\x00\x00\x00touchq\x01\x85q\x02Rq\x03.".to_vec(),
        ),
        ("x/version".into(), b"3\n".to_vec()),
    ]);
    expect_err(&write(dir.path(), "evil2.pth", &evil), &["posix.system"]);

    // STACK_GLOBAL (protocol 4) is checked the same way.
    let evil = build_zip(&[(
        "x/data.pkl".into(),
        b"\x80\x04\x8c\x08builtins\x8c\x04exec\x93.".to_vec(),
    )]);
    expect_err(&write(dir.path(), "evil3.pth", &evil), &["builtins.exec"]);
}

#[test]
fn zip_without_pickle_or_with_missing_storage() {
    let dir = tempfile::tempdir().unwrap();
    let z = build_zip(&[("x/readme.txt".into(), b"hello".to_vec())]);
    expect_err(&write(dir.path(), "nopkl.pth", &z), &["data.pkl"]);

    let mut entries = zip_entries(&std::fs::read(tiny_pth()).unwrap());
    entries.retain(|(n, _)| n != "tiny_mast3r/data/5");
    let p = write(dir.path(), "nostorage.pth", &build_zip(&entries));
    expect_err(&p, &["tiny_mast3r/data/5", "missing"]);

    let mut entries = zip_entries(&std::fs::read(tiny_pth()).unwrap());
    entries
        .iter_mut()
        .find(|(n, _)| n == "tiny_mast3r/data/5")
        .unwrap()
        .1
        .pop();
    let p = write(dir.path(), "shortstorage.pth", &build_zip(&entries));
    expect_err(&p, &["storage `5`", "bytes"]);

    let mut entries = zip_entries(&std::fs::read(tiny_pth()).unwrap());
    entries
        .iter_mut()
        .find(|(n, _)| n.ends_with("/byteorder"))
        .unwrap()
        .1 = b"middle".to_vec();
    expect_err(
        &write(dir.path(), "byteorder.pth", &build_zip(&entries)),
        &["byteorder", "middle"],
    );
}

#[test]
fn missing_extra_and_misshaped_keys_are_listed_together() {
    let dir = tempfile::tempdir().unwrap();
    // In the pickle: rename one key (missing + unexpected) and swap two same-length names with
    // different shapes (two mismatches).
    let bytes = tiny_with_pickle(|pkl| {
        assert_eq!(
            replace_all(
                pkl,
                b"X\x0a\x00\x00\x00mask_token",
                b"X\x0a\x00\x00\x00mask_tokeN"
            ),
            1
        );
        assert_eq!(
            replace_all(
                pkl,
                b"\x00\x00\x00enc_norm.weight",
                b"\x00\x00\x00ENC_NORM.weight"
            ),
            1
        );
        assert_eq!(
            replace_all(
                pkl,
                b"\x00\x00\x00dec_norm.weight",
                b"\x00\x00\x00enc_norm.weight"
            ),
            1
        );
        assert_eq!(
            replace_all(
                pkl,
                b"\x00\x00\x00ENC_NORM.weight",
                b"\x00\x00\x00dec_norm.weight"
            ),
            1
        );
    });
    let p = write(dir.path(), "keys.pth", &bytes);
    let e = expect_err(
        &p,
        &[
            "1 missing, 1 unexpected, 2 with the wrong shape",
            "mask_token [1, 1, 48]",
            "mask_tokeN [1, 1, 48]",
            "enc_norm.weight: expected [64], file has [48]",
            "dec_norm.weight: expected [48], file has [64]",
        ],
    );
    let Error::Layout { report, .. } = e else {
        panic!("{e:?}")
    };
    assert_eq!(
        report.missing,
        vec![("mask_token".to_string(), vec![1, 1, 48])]
    );
    assert_eq!(report.unexpected.len(), 1);
    assert_eq!(report.mismatched.len(), 2);

    // In safetensors: drop, add and reshape tensors.
    let (_, mut t) = Checkpoint::load(tiny_pth()).unwrap().into_parts();
    t.remove("enc_blocks.1.attn.qkv.bias");
    t.remove("downstream_head2.head_local_features.fc1.weight");
    t.insert(
        "extra.weight".into(),
        rust3r_mast3r::TensorF32::new(vec![2], vec![0.0, 1.0]).unwrap(),
    );
    let w = t.get_mut("dec_blocks2.3.mlp.fc2.weight").unwrap();
    w.shape = vec![192, 48];
    let meta = BTreeMap::from([(MODEL_STRING_METADATA_KEY.to_string(), tiny_model_string())]);
    let p = dir.path().join("keys.safetensors");
    write_safetensors(&p, &t, &meta).unwrap();
    expect_err(
        &p,
        &[
            "2 missing, 1 unexpected, 1 with the wrong shape",
            "enc_blocks.1.attn.qkv.bias [192]",
            "downstream_head2.head_local_features.fc1.weight [14, 112]",
            "extra.weight [2]",
            "dec_blocks2.3.mlp.fc2.weight: expected [48, 192], file has [192, 48]",
        ],
    );
}

#[test]
fn config_errors_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    // The fixture safetensors has no constructor string, and 48 is not a multiple of 64.
    expect_err(
        &tiny_st(),
        &["cannot derive", "dec_num_heads", "constructor string"],
    );

    // A constructor string that contradicts the shapes.
    let bad = tiny_model_string().replace("enc_depth=3", "enc_depth=4");
    let e = Checkpoint::load_with(
        tiny_st(),
        &LoadOptions {
            model_string: Some(bad),
        },
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("enc_depth=4")
            && e.to_string().starts_with(tiny_st().to_str().unwrap()),
        "{e}"
    );

    // Code in the constructor string is not evaluated.
    let e = Checkpoint::load_with(
        tiny_st(),
        &LoadOptions {
            model_string: Some("AsymmetricMASt3R(enc_depth=__import__('os').system('x'))".into()),
        },
    )
    .unwrap_err();
    assert!(e.to_string().contains("not a literal"), "{e}");

    // Wrong class.
    let e = Checkpoint::load_with(
        tiny_st(),
        &LoadOptions {
            model_string: Some("AsymmetricCroCo3DStereo()".into()),
        },
    )
    .unwrap_err();
    assert!(e.to_string().contains("AsymmetricCroCo3DStereo"), "{e}");

    // Diverging aliases.
    let (_, mut t) = Checkpoint::load(tiny_pth()).unwrap().into_parts();
    t.get_mut("downstream_head1.dpt.scratch.layer_rn.2.weight")
        .unwrap()
        .data[0] += 1.0;
    let meta = BTreeMap::from([(MODEL_STRING_METADATA_KEY.to_string(), tiny_model_string())]);
    let p = dir.path().join("alias.safetensors");
    write_safetensors(&p, &t, &meta).unwrap();
    expect_err(&p, &["layer_rn.2.weight", "layer3_rn.weight", "differ"]);

    // Not a MASt3R checkpoint at all.
    let p = dir.path().join("other.safetensors");
    let t = BTreeMap::from([(
        "w".to_string(),
        rust3r_mast3r::TensorF32::new(vec![1], vec![1.0]).unwrap(),
    )]);
    write_safetensors(&p, &t, &BTreeMap::new()).unwrap();
    expect_err(&p, &["patch_embed.proj.weight", "missing"]);
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
    let pth = std::fs::read(tiny_pth()).unwrap();
    let st = std::fs::read(tiny_st()).unwrap();
    let pkl_entries = zip_entries(&pth);
    let pkl_idx = pkl_entries
        .iter()
        .position(|(n, _)| n.ends_with("/data.pkl"))
        .unwrap();
    let st_header = 8 + u64::from_le_bytes(st[..8].try_into().unwrap()) as usize;
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    let mut outcomes: BTreeMap<&str, usize> = BTreeMap::new();
    let p = dir.path().join("fuzz.bin");
    let opts = LoadOptions {
        model_string: Some(tiny_model_string()),
    };

    for iter in 0..480 {
        let bytes = match iter % 6 {
            // Random bytes anywhere in the .pth.
            0 => {
                let mut b = pth.clone();
                let n = 1 + rng.below(8);
                flip(&mut rng, &mut b, n);
                b
            }
            // Random bytes in the zip structure near the end (central directory).
            1 => {
                let mut b = pth.clone();
                let len = b.len();
                let tail = &mut b[len - 120_000..];
                let n = 1 + rng.below(4);
                flip(&mut rng, tail, n);
                b
            }
            // Truncation.
            2 => pth[..rng.below(pth.len())].to_vec(),
            // Random bytes in data.pkl, re-zipped with a valid checksum so the pickle VM sees them.
            3 => {
                let mut e = pkl_entries.clone();
                let n = 1 + rng.below(4);
                flip(&mut rng, &mut e[pkl_idx].1, n);
                if rng.below(4) == 0 {
                    let cut = rng.below(e[pkl_idx].1.len());
                    e[pkl_idx].1.truncate(cut);
                }
                build_zip(&e)
            }
            // Random bytes in the safetensors header.
            4 => {
                let mut b = st.clone();
                let n = 1 + rng.below(4);
                flip(&mut rng, &mut b[..st_header], n);
                b
            }
            // Truncated safetensors.
            _ => st[..rng.below(st.len())].to_vec(),
        };
        std::fs::write(&p, &bytes).unwrap();
        let r = catch_unwind(AssertUnwindSafe(|| Checkpoint::load_with(&p, &opts)));
        let outcome = match r {
            Err(_) => panic!("iteration {iter}: panic"),
            Ok(Ok(_)) => "loaded",
            Ok(Err(e)) => {
                let text = e.to_string();
                assert!(
                    text.starts_with(&p.display().to_string()),
                    "iteration {iter}: {text}"
                );
                match e {
                    Error::File(FileError::Io { .. }) => "io",
                    Error::File(FileError::Zip { .. }) => "zip",
                    Error::File(FileError::ZipEntry { .. }) => "zip entry",
                    Error::File(FileError::Pickle { .. }) => "pickle",
                    Error::File(FileError::Format { .. }) => "format",
                    Error::File(FileError::Tensor { .. }) => "tensor",
                    Error::Config { .. } => "config",
                    Error::Layout { .. } => "layout",
                }
            }
        };
        *outcomes.entry(outcome).or_default() += 1;
    }
    eprintln!("corruption outcomes: {outcomes:?}");
    // The loop must actually have exercised the parsers, not just one error path.
    for k in ["zip", "zip entry", "pickle", "format"] {
        assert!(
            outcomes.get(k).copied().unwrap_or(0) > 0,
            "no {k} errors: {outcomes:?}"
        );
    }
}
