//! The optional training terms of `train::extras` against float64 references: the depth term's
//! value and its depth / alpha gradients, unweighted and with per-pixel weights (finite
//! differences; the rasterizer's own depth and alpha backward is checked in `raster.rs`), and
//! the exposure transform's forward and its render / parameter gradients (finite differences);
//! the trainer's depth step passes its per-pixel weights through.

use rand::{Rng, SeedableRng, rngs::StdRng};
use rust3r_gpu::{Gpu, GpuOptions};
use rust3r_splat::Camera;
use rust3r_splat::train::extras::{self, EXPOSURE_IDENTITY};
use rust3r_splat::train::{DepthTarget, StepExtras, StepTarget, TrainConfig, Trainer, init};

fn gpu() -> Gpu {
    Gpu::new(&GpuOptions {
        poison: true,
        ..Default::default()
    })
    .expect("a GPU adapter is required")
}

/// NaN-propagating largest absolute difference.
fn max_abs_err(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, |m: f64, d| {
            if d.is_nan() || m.is_nan() {
                f64::NAN
            } else {
                m.max(d)
            }
        })
}

/// `k · Σ_p w_p |d_p/a_p − t_p|` over `t_p > 0`, `a_p > min_alpha` (`w` = 1 without weights).
fn depth_loss_ref(
    d: &[f64],
    a: &[f64],
    t: &[f64],
    w: Option<&[f64]>,
    k: f64,
    min_alpha: f64,
) -> f64 {
    (0..d.len())
        .filter(|&p| t[p] > 0.0 && a[p] > min_alpha)
        .map(|p| k * w.map_or(1.0, |w| w[p]) * (d[p] / a[p] - t[p]).abs())
        .sum()
}

/// The depth term's value against [`depth_loss_ref`] and its depth / alpha gradients against
/// central differences of it, with or without per-pixel weights (random in [0, 3), 1 in 11
/// exactly 0).
fn check_depth_term(weighted: bool) {
    let gpu = gpu();
    let mut rng = StdRng::seed_from_u64(7);
    let npix = 300;
    let (k, min_alpha) = (0.37, 0.5);
    let alpha: Vec<f64> = (0..npix)
        .map(|p| {
            if p % 10 == 0 {
                0.3
            } else {
                rng.random_range(0.6..1.0)
            }
        })
        .collect();
    // Expected depths 1..4 m, targets at least 5 cm away (no kink within the FD step), 1 in 7 unknown.
    let e: Vec<f64> = (0..npix).map(|_| rng.random_range(1.0..4.0)).collect();
    let depth: Vec<f64> = (0..npix).map(|p| e[p] * alpha[p]).collect();
    let target: Vec<f64> = (0..npix)
        .map(|p| {
            if p % 7 == 3 {
                0.0
            } else {
                e[p] + if rng.random_bool(0.5) { 1.0 } else { -1.0 } * rng.random_range(0.05..0.5)
            }
        })
        .collect();
    let g_in: Vec<f64> = (0..npix).map(|_| rng.random_range(-0.1..0.1)).collect();
    let weight: Option<Vec<f64>> = weighted.then(|| {
        (0..npix)
            .map(|p| {
                if p % 11 == 5 {
                    0.0
                } else {
                    rng.random_range(0.0..3.0)
                }
            })
            .collect()
    });
    let w = weight.as_deref();
    let f = |v: &[f64]| v.iter().map(|&x| x as f32).collect::<Vec<f32>>();
    let w_dev = weight.as_ref().map(|w| gpu.upload(&f(w)));
    let out = extras::depth_loss(
        &gpu,
        &gpu.upload(&f(&depth)),
        &gpu.upload(&f(&alpha)),
        &gpu.upload(&f(&target)),
        w_dev.as_ref(),
        Some(&gpu.upload(&f(&g_in))),
        k as f32,
        min_alpha as f32,
    )
    .unwrap();
    let value = out.value(&gpu).unwrap() as f64;
    let want = depth_loss_ref(&depth, &alpha, &target, w, k, min_alpha);
    assert!(
        (value - want).abs() <= 1e-4 * want,
        "loss {value} vs {want}"
    );
    if weighted {
        // The weights change the loss (an implementation that ignored them would fail above).
        let plain = depth_loss_ref(&depth, &alpha, &target, None, k, min_alpha);
        assert!((want - plain).abs() > 1e-2 * plain, "{want} vs {plain}");
    }
    let vd: Vec<f64> = gpu
        .read(&out.v_depth)
        .unwrap()
        .iter()
        .map(|&x| x as f64)
        .collect();
    let va: Vec<f64> = gpu
        .read(&out.v_alpha)
        .unwrap()
        .iter()
        .map(|&x| x as f64)
        .collect();
    let h = 1e-6;
    let (mut fd_d, mut fd_a) = (vec![0.0; npix], vec![0.0; npix]);
    for p in 0..npix {
        let mut dp = depth.clone();
        dp[p] += h;
        let mut dm = depth.clone();
        dm[p] -= h;
        fd_d[p] = (depth_loss_ref(&dp, &alpha, &target, w, k, min_alpha)
            - depth_loss_ref(&dm, &alpha, &target, w, k, min_alpha))
            / (2.0 * h);
        let mut ap = alpha.clone();
        ap[p] += h;
        let mut am = alpha.clone();
        am[p] -= h;
        fd_a[p] = (depth_loss_ref(&depth, &ap, &target, w, k, min_alpha)
            - depth_loss_ref(&depth, &am, &target, w, k, min_alpha))
            / (2.0 * h)
            + g_in[p];
    }
    let (ed, ea) = (max_abs_err(&vd, &fd_d), max_abs_err(&va, &fd_a));
    println!(
        "depth term (weighted: {weighted}): max |analytic - FD| depth {ed:.3e}, alpha {ea:.3e}"
    );
    assert!(ed <= 2e-6 && ea <= 2e-6, "depth {ed}, alpha {ea}");
    // Skipped pixels (no target, thin coverage) pass only the incoming alpha gradient.
    assert_eq!(vd[3], 0.0);
    assert_eq!(va[0] as f32, g_in[0] as f32);
    if weighted {
        // A zero weight (pixel 16: supervised, weight 0) passes only the incoming alpha gradient.
        assert!(target[16] > 0.0 && alpha[16] > min_alpha);
        assert_eq!(vd[16], 0.0);
        assert_eq!(va[16] as f32, g_in[16] as f32);
    }
    assert!(
        fd_d.iter().filter(|&&g| g != 0.0).count() > npix / 2,
        "most pixels are supervised"
    );
}

#[test]
fn depth_term_matches_finite_differences() {
    check_depth_term(false);
}

#[test]
fn weighted_depth_term_matches_finite_differences() {
    check_depth_term(true);
}

/// The trainer hands `DepthTarget::pixel_weight` to the depth term: on one rendered view, weights
/// of 2 double the unweighted term, zeros remove it, and complementary half-image masks add up
/// to it (each case on a fresh trainer from the same Gaussians; the term is taken on the render
/// before the step's update).
#[test]
fn trainer_applies_depth_pixel_weights() {
    let gpu = gpu();
    let mut splats = init::random_box(600, 1.0, 0.8, 1.0, 5, 0);
    for p in splats.means.chunks_exact_mut(3) {
        p[2] += 3.0;
    }
    let cfg = TrainConfig {
        sh_degree: 0,
        background: [0.0; 3],
        ..TrainConfig::default()
    };
    let cam = Camera {
        intrinsics: rust3r_geometry::PinholeCamera::new(60.0, 60.0, 40.0, 30.0, 80, 60),
        world_to_camera: [
            [1.0, 0.0, 0.0, 0.0],
            [0.0, 1.0, 0.0, 0.0],
            [0.0, 0.0, 1.0, 0.0],
            [0.0, 0.0, 0.0, 1.0],
        ],
    };
    let npix = 80 * 60;
    let rgb = gpu.upload(&vec![0.5f32; npix * 3]);
    let depth = gpu.upload(&vec![2.5f32; npix]);
    let term = |weight: Option<Vec<f32>>| -> f64 {
        let mut trainer = Trainer::new(&gpu, cfg.clone(), &splats).unwrap();
        let w = weight.map(|w| gpu.upload(&w));
        let extras = StepExtras {
            depth: Some(DepthTarget {
                depth: &depth,
                weight: 0.3,
                pixel_weight: w.as_ref(),
                min_alpha: 0.1,
            }),
            ..Default::default()
        };
        trainer
            .step_extras(&cam, &StepTarget::rgb(&rgb), &extras)
            .unwrap();
        trainer.last_depth_loss().unwrap().expect("a depth term") as f64
    };
    let plain = term(None);
    let half = |left: bool| -> Vec<f32> {
        (0..npix)
            .map(|p| ((p % 80 < 40) == left) as u8 as f32)
            .collect()
    };
    let (double, zero) = (term(Some(vec![2.0; npix])), term(Some(vec![0.0; npix])));
    let (left, right) = (term(Some(half(true))), term(Some(half(false))));
    println!("depth term: plain {plain:.6}, x2 {double:.6}, left {left:.6} + right {right:.6}");
    assert!(
        plain > 1e-3,
        "the view has a depth error to weigh ({plain})"
    );
    assert!(
        (double - 2.0 * plain).abs() <= 1e-5 * plain,
        "{double} vs 2 x {plain}"
    );
    assert_eq!(zero, 0.0);
    assert!(left > 0.1 * plain && right > 0.1 * plain, "{left} {right}");
    assert!(
        (left + right - plain).abs() <= 1e-5 * plain,
        "{left} + {right} vs {plain}"
    );
}

fn exposure_ref(rgb: &[f64], p: &[f64; 12]) -> Vec<f64> {
    let mut out = vec![0.0; rgb.len()];
    for (i, c) in rgb.chunks_exact(3).enumerate() {
        for k in 0..3 {
            out[i * 3 + k] = p[k * 3] * c[0] + p[k * 3 + 1] * c[1] + p[k * 3 + 2] * c[2] + p[9 + k];
        }
    }
    out
}

#[test]
fn exposure_transform_matches_finite_differences() {
    let gpu = gpu();
    let mut rng = StdRng::seed_from_u64(11);
    let npix = 257;
    let rgb: Vec<f64> = (0..npix * 3).map(|_| rng.random_range(0.0..1.0)).collect();
    let mut params = [0.0f64; 12];
    for (k, p) in params.iter_mut().enumerate() {
        *p = EXPOSURE_IDENTITY[k] as f64 + rng.random_range(-0.2..0.2);
    }
    let w: Vec<f64> = (0..npix * 3).map(|_| rng.random_range(-1.0..1.0)).collect();
    let loss = |rgb: &[f64], p: &[f64; 12]| {
        exposure_ref(rgb, p)
            .iter()
            .zip(&w)
            .map(|(a, b)| a * b)
            .sum::<f64>()
    };
    let p32: [f32; 12] = std::array::from_fn(|k| params[k] as f32);
    let rgb32: Vec<f32> = rgb.iter().map(|&x| x as f32).collect();
    let rgb_dev = gpu.upload(&rgb32);
    let fwd: Vec<f64> = gpu
        .read(&extras::apply_exposure(&gpu, &rgb_dev, &p32))
        .unwrap()
        .iter()
        .map(|&x| x as f64)
        .collect();
    let fe = max_abs_err(&fwd, &exposure_ref(&rgb, &params));
    assert!(fe <= 1e-5, "forward {fe}");
    let w32: Vec<f32> = w.iter().map(|&x| x as f32).collect();
    let (v_rgb, g_params) =
        extras::exposure_backward(&gpu, &rgb_dev, &p32, &gpu.upload(&w32)).unwrap();
    let v_rgb: Vec<f64> = gpu
        .read(&v_rgb)
        .unwrap()
        .iter()
        .map(|&x| x as f64)
        .collect();
    let h = 1e-5;
    let fd_p: Vec<f64> = (0..12)
        .map(|k| {
            let (mut a, mut b) = (params, params);
            a[k] += h;
            b[k] -= h;
            (loss(&rgb, &a) - loss(&rgb, &b)) / (2.0 * h)
        })
        .collect();
    let fd_rgb: Vec<f64> = (0..npix * 3)
        .map(|q| {
            let (mut a, mut b) = (rgb.clone(), rgb.clone());
            a[q] += h;
            b[q] -= h;
            (loss(&a, &params) - loss(&b, &params)) / (2.0 * h)
        })
        .collect();
    let gp: Vec<f64> = g_params.iter().map(|&x| x as f64).collect();
    // Parameter gradients are sums over 257 pixels of O(1) terms.
    let ep = max_abs_err(&gp, &fd_p) / fd_p.iter().fold(1.0f64, |m, x| m.max(x.abs()));
    let er = max_abs_err(&v_rgb, &fd_rgb);
    println!(
        "exposure: relative max error of the parameter gradient {ep:.3e}, render gradient {er:.3e}"
    );
    assert!(ep <= 1e-6 && er <= 1e-6, "params {ep}, render {er}");
}
