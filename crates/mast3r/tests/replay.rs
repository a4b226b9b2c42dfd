//! The recorded-and-replayed network (`Replayer`) against the network run one operation at a
//! time, on the tiny fixture checkpoint: every output of every replay, across changing inputs,
//! input sizes and pairs, and the encodings it handed out earlier left untouched by later
//! replays.

mod common;

use std::sync::Arc;

use burn::tensor::{DType, Device, DeviceKind, Tensor};
use common::{Rng, tiny_pth};
use rust3r_mast3r::{Encoded, Mast3r, Precision, Prediction, Replayer};

fn model() -> Arc<Mast3r> {
    assert!(
        !rust3r_gpu::list_adapters().is_empty(),
        "a GPU adapter is required (CI installs Mesa's lavapipe)"
    );
    let device = Device::wgpu(DeviceKind::DefaultDevice);
    Arc::new(Mast3r::load(tiny_pth(), &device, Precision::F32).unwrap())
}

fn image(model: &Mast3r, seed: u64, h: usize, w: usize) -> Tensor<4> {
    let mut rng = Rng(seed);
    let data = (0..3 * h * w)
        .map(|_| (rng.next() >> 40) as f32 / (1u64 << 23) as f32 * 2.0 - 1.0)
        .collect();
    model.image_tensor(data, [1, 3, h, w])
}

fn host<const D: usize>(t: &Tensor<D>) -> Vec<f32> {
    t.clone()
        .cast(DType::F32)
        .into_data()
        .try_into_vec::<f32>()
        .unwrap()
}

/// Max |a - b| over max |b|, with a finiteness check.
fn rel(a: &[f32], b: &[f32], what: &str) -> f32 {
    assert_eq!(a.len(), b.len(), "{what}: lengths");
    assert!(a.iter().all(|v| v.is_finite()), "{what}: non-finite output");
    let scale = b.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-30);
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, |m, d| if d > m || d.is_nan() { d } else { m }) // NaN propagates
        / scale
}

fn same_encoding(a: &Encoded, b: &Encoded, what: &str) {
    assert_eq!(a.grid, b.grid, "{what}: grid");
    let r = rel(&host(&a.feat), &host(&b.feat), what);
    assert!(
        r <= 1e-6,
        "{what}: encodings differ by {r:e} of the largest value"
    );
}

fn same_predictions(a: &[Prediction; 2], b: &[Prediction; 2], what: &str) {
    for v in 0..2 {
        let (x, y) = (a[v].to_host(), b[v].to_host());
        for (name, p, q) in [
            ("pts3d", &x.pts3d, &y.pts3d),
            ("conf", &x.conf, &y.conf),
            ("desc", &x.desc, &y.desc),
            ("desc_conf", &x.desc_conf, &y.desc_conf),
        ] {
            let r = rel(p, q, &format!("{what} view {v} {name}"));
            assert!(r <= 1e-6, "{what} view {} {name}: differs by {r:e}", v + 1);
        }
    }
}

#[test]
fn replays_match_the_network_across_inputs_sizes_and_pairs() {
    let model = model();
    let mut rp = Replayer::new(model.clone());
    let direct = |img: Tensor<4>| model.encode(img);

    // The first call of a size records (and answers from the recording); later calls replay
    // with the input refreshed in place.
    let e0 = rp.encode(image(&model, 1, 224, 224)).unwrap();
    let e1 = rp.encode(image(&model, 2, 224, 224)).unwrap();
    let e2 = rp.encode(image(&model, 3, 224, 224)).unwrap();
    same_encoding(
        &e1,
        &direct(image(&model, 2, 224, 224)),
        "replayed encoding",
    );
    same_encoding(&e2, &direct(image(&model, 3, 224, 224)), "second replay");
    // Encodings handed out are copies: later replays did not overwrite them.
    same_encoding(
        &e0,
        &direct(image(&model, 1, 224, 224)),
        "recorded encoding",
    );

    // A second input size gets its own recording; the first keeps working.
    let small = rp.encode(image(&model, 4, 160, 224)).unwrap();
    same_encoding(&small, &direct(image(&model, 4, 160, 224)), "other size");
    let again = rp.encode(image(&model, 5, 224, 224)).unwrap();
    same_encoding(
        &again,
        &direct(image(&model, 5, 224, 224)),
        "first size again",
    );

    // Decoding: pairs in both orders and mono, against the network on the same encodings.
    let want = model.decode(&e1, &e0);
    same_predictions(rp.decode(&e1, &e0).unwrap(), &want, "recorded pair");
    let want = model.decode(&e0, &e2);
    same_predictions(rp.decode(&e0, &e2).unwrap(), &want, "replayed pair");
    let want = model.mono(&e2);
    same_predictions(rp.mono(&e2).unwrap(), &want, "replayed mono");
    let want = model.mono(&small);
    same_predictions(rp.mono(&small).unwrap(), &want, "mono of the other size");
    // Views of different sizes are refused, not recorded.
    assert!(rp.decode(&e0, &small).is_err());
    eprintln!("replayer: {rp:?}");
}

#[test]
fn the_slam_front_end_gives_the_same_pointmaps_replayed_or_not() {
    use rust3r_mast3r::frontend::Mast3rMonoFrontEnd;
    use rust3r_slam::PointmapFrontEnd;
    let dir = rust3r_testdata::data("redkitchen");
    let data = rust3r_io::datasets::open(&dir, None, 5).unwrap();
    let device = model().device().clone();
    let load = || Mast3r::load(tiny_pth(), &device, Precision::F32).unwrap();
    let mut replayed = Mast3rMonoFrontEnd::new(load(), 224).unwrap();
    let mut direct = Mast3rMonoFrontEnd::new(load(), 224).unwrap();
    direct.set_replay(false);
    for i in 0..3 {
        let frame = data.frame(i).unwrap();
        let (a, b) = (
            replayed.pointmap(&frame).unwrap(),
            direct.pointmap(&frame).unwrap(),
        );
        let flat =
            |p: &rust3r_slam::Pointmap| p.points.iter().flatten().copied().collect::<Vec<f32>>();
        let r = rel(&flat(&a), &flat(&b), "points");
        assert!(r <= 1e-6, "frame {i}: points differ by {r:e}");
        assert!(
            rel(&a.conf, &b.conf, "conf") <= 1e-6,
            "frame {i}: confidences differ"
        );
    }
    // Pair decoding through the replayed decoder, against the direct one.
    let (pr, pd) = (replayed.pairs().unwrap(), direct.pairs().unwrap());
    for (i, f) in [(0usize, 0usize), (1, 2)] {
        let frame = data.frame(f).unwrap();
        pr.encode(i, &frame).unwrap();
        pd.encode(i, &frame).unwrap();
    }
    let (x, y) = (pr.pair(1, 0).unwrap(), pd.pair(1, 0).unwrap());
    assert!(rel(&x.frame_desc, &y.frame_desc, "desc") <= 1e-6);
    assert!(rel(&x.keyframe_conf, &y.keyframe_conf, "keyframe conf") <= 1e-6);
}
