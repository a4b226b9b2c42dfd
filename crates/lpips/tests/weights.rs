//! Weight files: safetensors copies work like the `.pth` originals; malformed, truncated and
//! mismatched files are errors naming the file (and the key), never panics.

mod common;

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use common::{Rng, device, image_pair, random_net};
use rust3r_lpips::{Error, Image, Lpips, LpipsWeights, Net};
use rust3r_torch_checkpoint::{TensorF32, TensorFile, write_safetensors};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/lpips")).join(name)
}

fn read_all(path: &Path) -> BTreeMap<String, TensorF32> {
    let mut f = TensorFile::open(path).unwrap();
    f.tensor_names()
        .into_iter()
        .map(|n| (n.clone(), f.read_tensor(&n).unwrap()))
        .collect()
}

fn save(dir: &Path, name: &str, t: &BTreeMap<String, TensorF32>) -> PathBuf {
    let p = dir.join(name);
    write_safetensors(&p, t, &BTreeMap::new()).unwrap();
    p
}

/// Loads weights, failing the test on a panic; the error must name `culprit`.
fn load_err(
    backbone: &Path,
    lin: &Path,
    net: Option<Net>,
    culprit: &Path,
    needles: &[&str],
) -> Error {
    let r = catch_unwind(AssertUnwindSafe(|| LpipsWeights::load(backbone, lin, net)));
    let e = match r {
        Err(_) => panic!("panic loading {} / {}", backbone.display(), lin.display()),
        Ok(Ok(_)) => panic!("{} / {} loaded", backbone.display(), lin.display()),
        Ok(Err(e)) => e,
    };
    let text = e.to_string();
    assert!(
        text.starts_with(&culprit.display().to_string()),
        "error does not start with {}: {text}",
        culprit.display()
    );
    assert_eq!(e.path(), Some(culprit));
    for n in needles {
        assert!(text.contains(n), "error lacks {n:?}: {text}");
    }
    e
}

#[test]
fn safetensors_copies_give_the_same_values() {
    let dir = tempfile::tempdir().unwrap();
    let device = device();
    let (bp, lp) = (
        fixture("alex_backbone_legacy.pth"),
        fixture("alex_lin_legacy.pth"),
    );
    let bs = save(dir.path(), "alex.safetensors", &read_all(&bp));
    let ls = save(dir.path(), "lin.safetensors", &read_all(&lp));
    let a = Lpips::load(&bp, &lp, Some(Net::Alex), &device).unwrap();
    let b = Lpips::load(&bs, &ls, None, &device).unwrap();
    let mut rng = Rng::new(3);
    let (x, y) = image_pair(&mut rng, 50, 41);
    let (x, y) = (
        Image {
            rgb: &x,
            width: 50,
            height: 41,
        },
        Image {
            rgb: &y,
            width: 50,
            height: 41,
        },
    );
    let (da, db) = (a.distance(x, y).unwrap(), b.distance(x, y).unwrap());
    assert!(da > 1e-3);
    assert_eq!(da, db);
}

#[test]
fn layout_errors_name_the_file_and_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let alex = read_all(&fixture("alex_backbone_zip.pth"));
    let alex_lin = read_all(&fixture("alex_lin_zip.pth"));
    let vgg = read_all(&fixture("vgg_backbone_zip.pth"));
    let vgg_lin = read_all(&fixture("vgg_lin_zip.pth"));
    let good_b = save(d, "alex.safetensors", &alex);
    let good_l = save(d, "alex_lin.safetensors", &alex_lin);

    // Missing key.
    let mut t = alex.clone();
    t.remove("features.3.weight");
    let p = save(d, "missing.safetensors", &t);
    load_err(
        &p,
        &good_l,
        None,
        &p,
        &["missing key `features.3.weight`", "AlexNet"],
    );
    t.remove("features.3.bias");
    let p = save(d, "missing2.safetensors", &t);
    load_err(
        &p,
        &good_l,
        None,
        &p,
        &[
            "cannot tell the network",
            "[0, 6, 8, 10]",
            "AlexNet has them at [0, 3, 6, 8, 10]",
        ],
    );
    load_err(
        &p,
        &good_l,
        Some(Net::Alex),
        &p,
        &["missing key `features.3.weight`"],
    );
    let mut t = alex_lin.clone();
    t.remove("lin2.model.1.weight");
    let p = save(d, "missing_lin.safetensors", &t);
    load_err(
        &good_b,
        &p,
        None,
        &p,
        &["missing key `lin2.model.1.weight`"],
    );

    // Wrong rank, non-square kernel, channels that do not chain, a bias of the wrong size.
    let mut t = alex.clone();
    let w = t.get_mut("features.6.weight").unwrap();
    w.shape = vec![w.shape[0], w.data.len() / w.shape[0]];
    let p = save(d, "rank.safetensors", &t);
    load_err(
        &p,
        &good_l,
        None,
        &p,
        &["`features.6.weight` has shape [32, 216]", "4 dimensions"],
    );
    let mut t = alex.clone();
    let w = t.get_mut("features.6.weight").unwrap();
    w.shape = vec![32, 24, 9, 1];
    let p = save(d, "square.safetensors", &t);
    load_err(&p, &good_l, None, &p, &["features.6.weight", "square"]);
    let mut t = alex.clone();
    let w = t.get_mut("features.8.weight").unwrap();
    w.shape = vec![24 * 2, 16, 3, 3];
    let p = save(d, "chain.safetensors", &t);
    load_err(
        &p,
        &good_l,
        None,
        &p,
        &[
            "`features.8.weight`",
            "takes 16 input channels but `features.6.weight` has 32",
        ],
    );
    let mut t = alex.clone();
    t.get_mut("features.0.bias").unwrap().shape = vec![4, 4];
    let p = save(d, "bias.safetensors", &t);
    load_err(
        &p,
        &good_l,
        None,
        &p,
        &["`features.0.bias` has shape [4, 4]"],
    );
    let mut t = alex.clone();
    let b = t.get_mut("features.0.bias").unwrap();
    b.data.pop();
    b.shape = vec![15];
    let p = save(d, "bias2.safetensors", &t);
    load_err(
        &p,
        &good_l,
        None,
        &p,
        &["`features.0.bias` has shape [15] but `features.0.weight` has 16 output channels"],
    );
    let mut t = alex.clone();
    t.get_mut("features.0.weight").unwrap().shape = vec![48, 1, 11, 11];
    let p = save(d, "rgb.safetensors", &t);
    load_err(
        &p,
        &good_l,
        None,
        &p,
        &["takes 1 input channels but the RGB input has 3"],
    );
    // A batch-norm entry.
    let mut t = alex.clone();
    t.insert(
        "features.1.running_mean".into(),
        TensorF32::new(vec![16], vec![0.0; 16]).unwrap(),
    );
    let p = save(d, "bn.safetensors", &t);
    load_err(
        &p,
        &good_l,
        None,
        &p,
        &["unexpected key `features.1.running_mean`", "batch-norm"],
    );

    // The two files of different networks, the backbone for the wrong network, swapped files.
    let vb = save(d, "vgg.safetensors", &vgg);
    let vl = save(d, "vgg_lin.safetensors", &vgg_lin);
    load_err(
        &good_b,
        &vl,
        None,
        &vl,
        &[
            "`lin0.model.1.weight` has 8 channels",
            "alex.safetensors",
            "different networks",
        ],
    );
    load_err(&vb, &good_l, None, &good_l, &["different networks"]);
    load_err(
        &good_b,
        &good_l,
        Some(Net::Vgg),
        &good_b,
        &["VGG16 has no convolution at features.3"],
    );
    load_err(&good_b, &good_b, None, &good_b, &["looks like a backbone"]);
    load_err(
        &good_l,
        &good_l,
        None,
        &good_l,
        &["no `features.*` tensors", "lin0.model.1.weight"],
    );
    let mut t = alex_lin.clone();
    t.get_mut("lin1.model.1.weight").unwrap().shape = vec![24, 1, 1, 1];
    let p = save(d, "lin_shape.safetensors", &t);
    load_err(
        &good_b,
        &p,
        None,
        &p,
        &["`lin1.model.1.weight` has shape [24, 1, 1, 1], expected [1, 24, 1, 1]"],
    );

    // A file that does not exist, and one that is not a tensor file.
    let nothing = d.join("nope.pth");
    load_err(&nothing, &good_l, None, &nothing, &["No such file"]);
    let junk = d.join("junk.pth");
    std::fs::write(&junk, b"not weights at all").unwrap();
    load_err(&good_b, &junk, None, &junk, &["safetensors"]);
}

#[test]
fn broken_legacy_files_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let lin = fixture("alex_lin_legacy.pth");
    let bytes = std::fs::read(fixture("alex_backbone_legacy.pth")).unwrap();
    // Truncated in the pickles, in a storage count, in the data, by one byte.
    let mut rng = Rng::new(99);
    let mut cuts = vec![3, 20, 200, bytes.len() / 2, bytes.len() - 1];
    cuts.extend((0..20).map(|_| 1 + (rng.next() as usize) % (bytes.len() - 1)));
    for cut in cuts {
        let p = d.join(format!("trunc{cut}.pth"));
        std::fs::write(&p, &bytes[..cut]).unwrap();
        load_err(&p, &lin, None, &p, &["legacy PyTorch", "truncated"]);
    }
    // Wrong magic number.
    let mut b = bytes.clone();
    b[6] ^= 0x40;
    let p = d.join("magic.pth");
    std::fs::write(&p, &b).unwrap();
    load_err(&p, &lin, None, &p, &["legacy PyTorch", "magic number"]);
    // A storage count that disagrees with the state dict: flip the last record's count.
    let lin_bytes = std::fs::read(&lin).unwrap();
    let n = lin_bytes.len();
    // The file's last storage record is lin4's (20 channels): count, then 80 bytes of data.
    let count_at = n - 80 - 8;
    assert_eq!(
        i64::from_le_bytes(lin_bytes[count_at..count_at + 8].try_into().unwrap()),
        20
    );
    let mut b = lin_bytes.clone();
    b[count_at] = 21;
    let p = d.join("count.pth");
    std::fs::write(&p, &b).unwrap();
    load_err(
        &fixture("alex_backbone_legacy.pth"),
        &p,
        None,
        &p,
        &["element count of 21", "declares 20"],
    );
}

#[test]
fn in_memory_weights_are_checked_too() {
    let mut rng = Rng::new(5);
    let (backbone, mut lin) = random_net(
        &mut rng,
        Net::Vgg,
        &[4, 4, 6, 6, 8, 8, 8, 10, 10, 10, 6, 6, 6],
    );
    assert_eq!(
        LpipsWeights::from_tensors(&backbone, &lin, None)
            .unwrap()
            .net,
        Net::Vgg
    );
    lin.get_mut("lin3.model.1.weight").unwrap().data.pop();
    let e = LpipsWeights::from_tensors(&backbone, &lin, None).unwrap_err();
    assert!(
        e.to_string()
            .contains("`lin3.model.1.weight` has shape [1, 10, 1, 1] but 9 values"),
        "{e}"
    );
}
