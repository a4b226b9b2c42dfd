//! The Burn LPIPS against the float64 loop reference in `common` on random small networks and
//! images (odd sizes included), and the input checks.

mod common;

use common::*;
use rust3r_lpips::{Error, Image, Lpips, LpipsWeights, Net};

fn img(rgb: &[f32], width: usize, height: usize) -> Image<'_> {
    Image { rgb, width, height }
}

/// Relative error of `got` against `want`, with an absolute floor for tiny values.
fn rel(got: f64, want: f64) -> f64 {
    (got - want).abs() / want.abs().max(1e-9)
}

#[test]
fn random_networks_match_the_float64_reference() {
    let device = device();
    let mut rng = Rng::new(0x1b1b5);
    let (mut worst, mut worst_layer): (f64, f64) = (0.0, 0.0);
    for (net, channels, sizes) in [
        (
            Net::Alex,
            vec![8, 12, 16, 12, 10],
            vec![(64, 64), (71, 53), (31, 33)],
        ),
        (Net::Alex, vec![5, 7, 6, 9, 4], vec![(47, 90)]),
        (
            Net::Vgg,
            vec![4, 4, 6, 6, 8, 8, 8, 10, 10, 10, 6, 6, 6],
            vec![(48, 40), (37, 51), (16, 16)],
        ),
    ] {
        let (backbone, lin) = random_net(&mut rng, net, &channels);
        // The network is told from the convolutions' positions.
        let weights = LpipsWeights::from_tensors(&backbone, &lin, None).unwrap();
        assert_eq!(weights.net, net);
        assert!(!weights.is_full_size());
        let lpips = Lpips::new(weights, &device);
        for (w, h) in sizes {
            let (a, b) = image_pair(&mut rng, w, h);
            let want = reference(net, &backbone, &lin, &a, &b, w, h);
            let got = lpips.distance_layers(img(&a, w, h), img(&b, w, h)).unwrap();
            let (sum_got, sum_want) = (got.iter().sum::<f64>(), want.iter().sum::<f64>());
            assert!(
                sum_want > 1e-3,
                "{net} {w}x{h}: a degenerate test pair ({sum_want})"
            );
            // Per layer relative to the layer's value or, for a term much smaller than the
            // total, to the total: a tiny term is a difference of nearly equal unit vectors, known
            // to f32's ~1e-7 only, and matters only as a part of the sum.
            for k in 0..5 {
                let e = (got[k] - want[k]).abs() / want[k].abs().max(sum_want);
                worst_layer = worst_layer.max(e);
                assert!(
                    e < 1e-5,
                    "{net} {w}x{h} layer {k}: {} vs {} ({e:.2e})",
                    got[k],
                    want[k]
                );
            }
            let total = lpips.distance(img(&a, w, h), img(&b, w, h)).unwrap();
            let e = rel(total, sum_want);
            worst = worst.max(e);
            assert!(
                e < 1e-5,
                "{net} {w}x{h}: {total} vs {sum_want} (rel {e:.2e})"
            );
            assert_eq!(total, sum_got);
            // Identical images: exactly zero.
            assert_eq!(lpips.distance(img(&a, w, h), img(&a, w, h)).unwrap(), 0.0);
            // Symmetric.
            let back = lpips.distance(img(&b, w, h), img(&a, w, h)).unwrap();
            assert!(rel(back, sum_want) < 1e-5);
        }
    }
    eprintln!(
        "worst relative error against the float64 reference: {worst:.2e} (per layer: {worst_layer:.2e})"
    );
}

#[test]
fn inputs_are_checked() {
    let device = device();
    let mut rng = Rng::new(7);
    let (backbone, lin) = random_net(&mut rng, Net::Alex, &[4, 4, 4, 4, 4]);
    let lpips = Lpips::new(
        LpipsWeights::from_tensors(&backbone, &lin, Some(Net::Alex)).unwrap(),
        &device,
    );
    let a = vec![0.5f32; 40 * 40 * 3];
    let b = vec![0.5f32; 40 * 41 * 3];
    let e = lpips
        .distance(img(&a, 40, 40), img(&b, 40, 41))
        .unwrap_err();
    assert!(
        matches!(e, Error::Input(_)) && e.to_string().contains("differ in size: 40x40 and 40x41"),
        "{e}"
    );
    let e = lpips
        .distance(img(&a, 40, 40), img(&a[1..], 40, 40))
        .unwrap_err();
    assert!(
        e.to_string().contains("second image has 4799 values"),
        "{e}"
    );
    // AlexNet's second max pool needs at least 3x3 features: 30 pixels are too few.
    let s = vec![0.5f32; 30 * 30 * 3];
    let e = lpips
        .distance(img(&s, 30, 30), img(&s, 30, 30))
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("30x30 image is too small for LPIPS-alex: features.5 (max pool"),
        "{e}"
    );
    let s = vec![0.5f32; 31 * 31 * 3];
    assert_eq!(
        lpips.distance(img(&s, 31, 31), img(&s, 31, 31)).unwrap(),
        0.0
    );
}
