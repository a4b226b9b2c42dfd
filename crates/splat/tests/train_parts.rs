//! Training building blocks against independent float64 references: the L1 + D-SSIM loss
//! and its gradient (plus finite differences), the masked loss and the alpha loss (kernel
//! values, gradients, finite differences, and the alpha gradient through the rasterizer),
//! Adam, ADC planning and rebuilds, MCMC relocation, position noise, checkpoints, and the
//! multi-view consistent densification score.

mod common;

use rand::{Rng, SeedableRng, rngs::StdRng};
use rust3r_gpu::bf16::{bf16_nearest, bf16_to_f32};
use rust3r_gpu::{Gpu, GpuBuffer, GpuOptions};
use rust3r_splat::train::adam::{MomentPrecision, Moments};
use rust3r_splat::train::{TrainConfig, Trainer, adam, consistency, densify, init, loss, mcmc};

fn gpu() -> Gpu {
    Gpu::new(&GpuOptions {
        poison: true,
        ..Default::default()
    })
    .expect("a GPU adapter is required")
}

/// Direct 2D-window SSIM map with zero padding (no separability), per channel.
fn ssim_ref(a: &[f64], b: &[f64], w: usize, h: usize) -> Vec<f64> {
    let sigma = 1.5f64;
    let g: Vec<f64> = (0..11)
        .map(|i| (-(((i as f64) - 5.0).powi(2)) / (2.0 * sigma * sigma)).exp())
        .collect();
    let gs: f64 = g.iter().sum();
    let g: Vec<f64> = g.iter().map(|x| x / gs).collect();
    let (c1, c2) = (0.01f64 * 0.01, 0.03f64 * 0.03);
    let mut out = vec![0.0; w * h * 3];
    for y in 0..h {
        for x in 0..w {
            for c in 0..3 {
                let (mut ma, mut mb, mut eaa, mut ebb, mut eab) = (0.0, 0.0, 0.0, 0.0, 0.0);
                for dy in 0..11 {
                    for dx in 0..11 {
                        let (xx, yy) = (x as i64 + dx as i64 - 5, y as i64 + dy as i64 - 5);
                        if xx < 0 || yy < 0 || xx >= w as i64 || yy >= h as i64 {
                            continue;
                        }
                        let q = ((yy as usize) * w + xx as usize) * 3 + c;
                        let wt = g[dx] * g[dy];
                        ma += wt * a[q];
                        mb += wt * b[q];
                        eaa += wt * a[q] * a[q];
                        ebb += wt * b[q] * b[q];
                        eab += wt * a[q] * b[q];
                    }
                }
                let (saa, sbb, sab) = (eaa - ma * ma, ebb - mb * mb, eab - ma * mb);
                out[(y * w + x) * 3 + c] = (2.0 * ma * mb + c1) * (2.0 * sab + c2)
                    / ((ma * ma + mb * mb + c1) * (saa + sbb + c2));
            }
        }
    }
    out
}

fn loss_ref(a: &[f64], b: &[f64], w: usize, h: usize, lambda: f64) -> f64 {
    let n = a.len() as f64;
    let l1: f64 = a.iter().zip(b).map(|(x, y)| (x - y).abs()).sum::<f64>() / n;
    let s: f64 = ssim_ref(a, b, w, h).iter().sum::<f64>() / n;
    (1.0 - lambda) * l1 + lambda * (1.0 - s)
}

#[test]
fn loss_and_gradient_match_float64_reference_and_finite_differences() {
    let gpu = gpu();
    let kernels = loss::LossKernels::new(&gpu);
    let mut rng = StdRng::seed_from_u64(7);
    for &(w, h) in &[(23usize, 17usize), (8, 30), (40, 12)] {
        let b: Vec<f64> = (0..w * h * 3).map(|_| rng.random::<f32>() as f64).collect();
        // A render close to the target (as in training), with some exact ties for |a-b|.
        let a: Vec<f64> = b
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                if i % 17 == 0 {
                    v
                } else {
                    (v + 0.3 * (rng.random::<f32>() as f64 - 0.5)) as f32 as f64
                }
            })
            .collect();
        let to32 = |v: &[f64]| v.iter().map(|&x| x as f32).collect::<Vec<f32>>();
        let (ga, gb) = (gpu.upload(&to32(&a)), gpu.upload(&to32(&b)));
        let out = kernels.photometric_loss(&gpu, &ga, &gb, w as u32, h as u32, 0.2, true);
        let value = out.value(&gpu).unwrap() as f64;
        let reference = loss_ref(&a, &b, w, h, 0.2);
        assert!(
            (value - reference).abs() < 1e-5,
            "{w}x{h}: loss {value} vs {reference}"
        );
        let ssim = gpu.read(&out.ssim).unwrap();
        let sref = ssim_ref(&a, &b, w, h);
        let max = ssim
            .iter()
            .zip(&sref)
            .map(|(x, y)| (*x as f64 - y).abs())
            .fold(0.0, common::nan_max);
        assert!(max < 2e-5, "{w}x{h}: ssim map max error {max}");
        let grad = gpu.read(&out.grad).unwrap();
        // Central differences of the reference loss on pixels that are not at an L1 kink.
        let eps = 1e-4;
        let mut checked = 0;
        for _ in 0..40 {
            let i = rng.random_range(0..a.len());
            if (a[i] - b[i]).abs() < 2.0 * eps {
                continue;
            }
            let mut ap = a.clone();
            ap[i] += eps;
            let mut am = a.clone();
            am[i] -= eps;
            let fd = (loss_ref(&ap, &b, w, h, 0.2) - loss_ref(&am, &b, w, h, 0.2)) / (2.0 * eps);
            let g = grad[i] as f64;
            let scale = fd.abs().max(1.0 / a.len() as f64);
            assert!(
                (g - fd).abs() < 1e-3 * scale + 1e-8,
                "{w}x{h} pixel {i}: grad {g} vs fd {fd}"
            );
            checked += 1;
        }
        assert!(checked > 20);
        // Ties: d|a-b|/da = 0 at a == b (as in PyTorch), only the SSIM part remains.
        let out0 = kernels.photometric_loss(&gpu, &ga, &gb, w as u32, h as u32, 1.0, true);
        let g_ssim = gpu.read(&out0.grad).unwrap();
        assert!(
            (grad[0] - g_ssim[0] * 0.2).abs() <= 1e-6 * grad[0].abs(),
            "tie at pixel 0 keeps only the SSIM gradient"
        );
    }
}

#[test]
fn valid_ssim_of_identical_images_is_one_and_matches_reference() {
    let gpu = gpu();
    let kernels = loss::LossKernels::new(&gpu);
    let mut rng = StdRng::seed_from_u64(3);
    let (w, h) = (31usize, 26usize);
    let a: Vec<f32> = (0..w * h * 3).map(|_| rng.random()).collect();
    let b: Vec<f32> = a
        .iter()
        .map(|&v| (v * 0.8 + 0.1 * rng.random::<f32>()).min(1.0))
        .collect();
    let ga = gpu.upload(&a);
    let same = kernels.photometric_loss(&gpu, &ga, &ga, w as u32, h as u32, 0.0, false);
    let m = loss::valid_ssim_mean(&gpu.read(&same.ssim).unwrap(), w as u32, h as u32);
    assert!((m - 1.0).abs() < 1e-5, "SSIM(a, a) = {m}");
    let diff = kernels.photometric_loss(&gpu, &ga, &gpu.upload(&b), w as u32, h as u32, 0.0, false);
    let m = loss::valid_ssim_mean(&gpu.read(&diff.ssim).unwrap(), w as u32, h as u32);
    let a64: Vec<f64> = a.iter().map(|&x| x as f64).collect();
    let b64: Vec<f64> = b.iter().map(|&x| x as f64).collect();
    let map = ssim_ref(&a64, &b64, w, h);
    let mut s = 0.0;
    for y in 5..h - 5 {
        for x in 5..w - 5 {
            for c in 0..3 {
                s += map[(y * w + x) * 3 + c];
            }
        }
    }
    let r = s / ((w - 10) * (h - 10) * 3) as f64;
    assert!((m - r).abs() < 1e-5 && m < 0.99, "valid SSIM {m} vs {r}");
}

#[test]
fn adam_matches_pytorch_formula_with_two_rates_and_visibility() {
    let gpu = gpu();
    let mut rng = StdRng::seed_from_u64(11);
    let (n, row) = (37usize, 6usize);
    let mut p: Vec<f64> = (0..n * row).map(|_| rng.random::<f32>() as f64).collect();
    let p0 = p.clone();
    let (mut m, mut v) = (vec![0.0f64; n * row], vec![0.0f64; n * row]);
    let radii: Vec<u32> = (0..n * 2)
        .map(|i| if (i / 2) % 3 == 0 { 0 } else { 4 })
        .collect();
    let gp = gpu.upload(&p.iter().map(|&x| x as f32).collect::<Vec<_>>());
    let moments = adam::Moments::zeros(&gpu, n * row, MomentPrecision::F32);
    let gr = gpu.upload(&radii);
    let cfg = adam::AdamConfig {
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-8,
        moments: MomentPrecision::F32,
    };
    for t in 1..=5u64 {
        let g: Vec<f32> = (0..n * row).map(|_| rng.random::<f32>() - 0.5).collect();
        adam::adam_update(
            &gpu,
            &gp,
            &gpu.upload(&g),
            &moments,
            row,
            (2, 0.01, 0.001),
            t,
            &cfg,
            Some(&gr),
            0,
        );
        for i in 0..n * row {
            if radii[(i / row) * 2] == 0 {
                continue;
            }
            let lr = if i % row < 2 { 0.01 } else { 0.001 };
            let gi = g[i] as f64;
            m[i] = 0.9 * m[i] + 0.1 * gi;
            v[i] = 0.999 * v[i] + 0.001 * gi * gi;
            let bc1 = 1.0 - 0.9f64.powi(t as i32);
            let bc2 = 1.0 - 0.999f64.powi(t as i32);
            p[i] -= lr / bc1 * m[i] / (v[i].sqrt() / bc2.sqrt() + 1e-8);
        }
    }
    let got = gpu.read(&gp).unwrap();
    for i in 0..n * row {
        assert!(
            (got[i] as f64 - p[i]).abs() < 2e-6,
            "element {i}: {} vs {}",
            got[i],
            p[i]
        );
        if radii[(i / row) * 2] == 0 {
            assert_eq!(got[i], p0[i] as f32, "invisible rows must not move");
        }
    }
}

/// The high-error pixel counts of one view against the float64 reference, accumulated on top
/// of a previous view's score; errors on a grid of 1/16 so no pixel sits on the threshold.
#[test]
fn error_score_counts_high_error_pixels_in_footprints() {
    let gpu = gpu();
    let mut rng = StdRng::seed_from_u64(11);
    let (w, h) = (37usize, 23usize);
    let q = |r: &mut StdRng| r.random_range(0..17) as f32 / 16.0;
    let rendered: Vec<f32> = (0..w * h * 3).map(|_| q(&mut rng)).collect();
    let target: Vec<f32> = (0..w * h * 3).map(|_| q(&mut rng)).collect();
    let n = 300usize;
    let mut mean2d = Vec::new();
    let mut radii = Vec::new();
    for i in 0..n {
        // Inside, straddling the borders and fully outside the image; some culled.
        let x = rng.random_range(-12.0..(w as f32 + 12.0));
        let y = rng.random_range(-12.0..(h as f32 + 12.0));
        mean2d.push([x, y]);
        let r = if i % 7 == 0 {
            [0, 0]
        } else {
            [rng.random_range(1..15u32), rng.random_range(1..15u32)]
        };
        radii.push(r);
    }
    let mut proj = vec![0.0f32; n * 10];
    for (i, m) in mean2d.iter().enumerate() {
        proj[i * 10] = m[0];
        proj[i * 10 + 1] = m[1];
    }
    let prior: Vec<f32> = (0..n).map(|i| (i % 5) as f32).collect();
    let score = gpu.upload(&prior);
    let tau = 0.3;
    consistency::accumulate_error_score(
        &gpu,
        &gpu.upload(&rendered),
        &gpu.upload(&target),
        w as u32,
        h as u32,
        &gpu.upload(&proj),
        &gpu.upload(&radii.iter().flatten().copied().collect::<Vec<u32>>()),
        &score,
        tau,
    );
    let got = gpu.read(&score).unwrap();
    let want = consistency::error_score_reference(&rendered, &target, w, h, &mean2d, &radii, tau);
    for i in 0..n {
        assert_eq!(
            got[i] as f64,
            prior[i] as f64 + want[i],
            "Gaussian {i} at {:?} radii {:?}",
            mean2d[i],
            radii[i]
        );
    }
    let counted = want.iter().filter(|&&c| c > 0.0).count();
    let zero_visible = (0..n)
        .filter(|&i| radii[i][0] > 0 && want[i] == 0.0)
        .count();
    assert!(
        counted > n / 3 && zero_visible > 0,
        "cases exercised: {counted} with high-error pixels, {zero_visible} visible without"
    );
}

#[test]
fn adc_plan_and_rebuild_follow_the_rules() {
    let gpu = gpu();
    let mut rng = StdRng::seed_from_u64(5);
    let n = 2000usize;
    let grad2d: Vec<f32> = (0..n).map(|_| rng.random::<f32>() * 8e-4).collect();
    let count: Vec<f32> = (0..n).map(|i| (i % 4) as f32).collect();
    let ls: Vec<f32> = (0..n * 3)
        .map(|_| rng.random::<f32>() * 4.0 - 6.0)
        .collect();
    let opa: Vec<f32> = (0..n).map(|_| rng.random::<f32>() * 10.0 - 7.0).collect();
    // High-error pixels per Gaussian (multi-view consistent densification): whole numbers.
    let score: Vec<f32> = (0..n).map(|_| rng.random_range(0..12) as f32).collect();
    let th = densify::AdcThresholds {
        grad2d: 2e-4,
        grow_scale: 0.01,
        prune_opacity: 0.005,
        prune_scale: 0.1,
        check_big: true,
        grow: true,
        min_error_pixels: 2.5,
    };
    let (parent, variant) = densify::adc_plan(
        &gpu,
        &gpu.upload(&grad2d),
        &gpu.upload(&count),
        &gpu.upload(&score),
        &gpu.upload(&ls),
        &gpu.upload(&opa),
        &th,
    )
    .unwrap();
    let (parent, variant) = (gpu.read(&parent).unwrap(), gpu.read(&variant).unwrap());
    // Host reference of gsplat's grow (duplicate small, split large) then prune.
    let mut expect = Vec::new();
    for i in 0..n {
        let g = grad2d[i] as f64 / (count[i].max(1.0) as f64);
        let smax = (ls[i * 3].max(ls[i * 3 + 1]).max(ls[i * 3 + 2]) as f64).exp();
        let o = 1.0 / (1.0 + (-(opa[i] as f64)).exp());
        let consistent = score[i] as f64 / (count[i].max(1.0) as f64) >= 2.5;
        let high = g > 2e-4 && consistent;
        let prune = |s: f64| o < 0.005 || s > 0.1;
        if high && smax > 0.01 {
            if !prune(smax / 1.6) {
                expect.push((i as u32, 2u32));
                expect.push((i as u32, 3u32));
            }
        } else if !prune(smax) {
            expect.push((i as u32, 0u32));
            if high {
                expect.push((i as u32, 1u32));
            }
        }
    }
    let got: Vec<(u32, u32)> = parent
        .iter()
        .copied()
        .zip(variant.iter().copied())
        .collect();
    assert_eq!(got, expect);
    let kept = expect.iter().filter(|e| e.1 == 0).count();
    assert!(
        expect.iter().any(|e| e.1 == 1) && expect.iter().any(|e| e.1 == 2) && kept < n,
        "all cases exercised"
    );

    // Rebuild: copies, zeroed moments for new rows, split children shrunk and moved.
    let m = expect.len();
    let (gparent, gvariant) = (gpu.upload(&parent), gpu.upload(&variant));
    let means: Vec<f32> = (0..n * 3).map(|_| rng.random::<f32>()).collect();
    let quats: Vec<f32> = (0..n * 4).map(|_| rng.random::<f32>() - 0.5).collect();
    let moments: Vec<f32> = (0..n * 3).map(|_| rng.random::<f32>() + 1.0).collect();
    let nm = densify::rebuild(&gpu, &gpu.upload(&means), &gparent, &gvariant, 3, false);
    let nl = densify::rebuild(&gpu, &gpu.upload(&ls), &gparent, &gvariant, 3, false);
    let nq = densify::rebuild(&gpu, &gpu.upload(&quats), &gparent, &gvariant, 4, false);
    let nmom = densify::rebuild(&gpu, &gpu.upload(&moments), &gparent, &gvariant, 3, true);
    // Packed bf16 moments of the same rows (m = the moment, v = its square).
    let sq: Vec<f32> = moments.iter().map(|x| x * x).collect();
    let packed = Moments::from_host(&gpu, &moments, &sq, MomentPrecision::Bf16);
    let npacked = packed.rebuild(&gpu, &gparent, &gvariant, 3);
    assert_eq!(npacked.precision(), MomentPrecision::Bf16);
    let (npm, npv) = npacked.read(&gpu).unwrap();
    densify::apply_splits(&gpu, &nm, &nl, &nq, &gvariant, 99);
    let (nm, nl, nq, nmom) = (
        gpu.read(&nm).unwrap(),
        gpu.read(&nl).unwrap(),
        gpu.read(&nq).unwrap(),
        gpu.read(&nmom).unwrap(),
    );
    assert_eq!(
        (
            nm.len(),
            nl.len(),
            nq.len(),
            nmom.len(),
            npacked.len(),
            npm.len()
        ),
        (m * 3, m * 3, m * 4, m * 3, m * 3, m * 3)
    );
    let bf = |x: f32| bf16_to_f32(bf16_nearest(x));
    let mut whitened = Vec::new();
    for (j, &(p, var)) in expect.iter().enumerate() {
        let p = p as usize;
        assert_eq!(&nq[j * 4..j * 4 + 4], &quats[p * 4..p * 4 + 4]);
        for k in 0..3 {
            let want_m = if var == 0 { moments[p * 3 + k] } else { 0.0 };
            assert_eq!(nmom[j * 3 + k], want_m);
            assert_eq!(npm[j * 3 + k], bf(want_m));
            assert_eq!(npv[j * 3 + k], bf(want_m * want_m));
            if var < 2 {
                assert_eq!(nm[j * 3 + k], means[p * 3 + k]);
                assert_eq!(nl[j * 3 + k], ls[p * 3 + k]);
            } else {
                assert!((nl[j * 3 + k] - (ls[p * 3 + k] - 1.6f32.ln())).abs() < 1e-5);
            }
        }
        if var >= 2 {
            // Offset in the parent's frame, divided by its scales: a standard normal sample.
            let q: Vec<f64> = quats[p * 4..p * 4 + 4].iter().map(|&x| x as f64).collect();
            let qn = (q.iter().map(|x| x * x).sum::<f64>()).sqrt();
            let (w, x, y, z) = (q[0] / qn, q[1] / qn, q[2] / qn, q[3] / qn);
            let r = [
                [
                    1.0 - 2.0 * (y * y + z * z),
                    2.0 * (x * y - w * z),
                    2.0 * (x * z + w * y),
                ],
                [
                    2.0 * (x * y + w * z),
                    1.0 - 2.0 * (x * x + z * z),
                    2.0 * (y * z - w * x),
                ],
                [
                    2.0 * (x * z - w * y),
                    2.0 * (y * z + w * x),
                    1.0 - 2.0 * (x * x + y * y),
                ],
            ];
            let d: Vec<f64> = (0..3)
                .map(|k| nm[j * 3 + k] as f64 - means[p * 3 + k] as f64)
                .collect();
            for a in 0..3 {
                let local: f64 = (0..3).map(|b| r[b][a] * d[b]).sum();
                whitened.push(local / (ls[p * 3 + a] as f64).exp());
            }
        }
    }
    let k = whitened.len() as f64;
    let mean = whitened.iter().sum::<f64>() / k;
    let var = whitened.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / k;
    assert!(
        k > 300.0 && mean.abs() < 0.15 && (var - 1.0).abs() < 0.2,
        "split offsets: mean {mean}, var {var} over {k}"
    );
}

#[test]
fn mcmc_relocation_preserves_opacity_and_plans_consistently() {
    for &o in &[0.01f64, 0.3, 0.9, 0.999] {
        let (o1, f1) = mcmc::relocation(o, 1);
        assert!(
            (o1 - o).abs() < 1e-12 && (f1 - 1.0).abs() < 1e-9,
            "ratio 1 is the identity"
        );
        for n in [2usize, 3, 7, 51] {
            let (on, f) = mcmc::relocation(o, n);
            // n copies at the centre composite to the original opacity.
            assert!((1.0 - (1.0 - on).powi(n as i32) - o).abs() < 1e-9);
            assert!(f > 0.0 && f.is_finite());
        }
    }
    let mut rng = mcmc::HostRng(1);
    let n = 500;
    let opa: Vec<f32> = (0..n)
        .map(|i| {
            if i % 10 == 0 {
                -8.0
            } else {
                (i as f32 / 100.0) - 2.0
            }
        })
        .collect();
    let ls: Vec<f32> = (0..n * 3).map(|i| -3.0 - (i % 5) as f32 * 0.1).collect();
    let cfg = mcmc::McmcConfig::default();
    let plan = mcmc::plan(&mut rng, &cfg, &opa, &ls, 525);
    assert_eq!(plan.relocated, 50);
    assert_eq!(plan.added, 25);
    assert_eq!(plan.parent.len(), 525);
    for i in (0..n).step_by(10) {
        let p = plan.parent[i] as usize;
        assert!(!p.is_multiple_of(10), "dead row {i} copies a live one");
        assert_eq!(
            plan.variant[i], 4,
            "relocated rows keep their own optimizer state"
        );
    }
    assert_eq!(plan.rows.len() * 3, plan.log_scales.len());
    assert!(
        plan.opacity_logits
            .iter()
            .all(|&o| 1.0 / (1.0 + (-o).exp()) >= 0.005 - 1e-6)
    );

    // Rebuild of a relocated row: parameters from the parent, moments its own; fresh rows zero.
    let gpu = gpu();
    let (parent, variant) = (gpu.upload(&[2u32, 1, 2, 0]), gpu.upload(&[4u32, 0, 1, 0]));
    let src = gpu.upload(&[10f32, 11.0, 20.0, 21.0, 30.0, 31.0]);
    let params = gpu
        .read(&densify::rebuild(&gpu, &src, &parent, &variant, 2, false))
        .unwrap();
    let moments = gpu
        .read(&densify::rebuild(&gpu, &src, &parent, &variant, 2, true))
        .unwrap();
    assert_eq!(params, [30.0, 31.0, 20.0, 21.0, 30.0, 31.0, 10.0, 11.0]);
    assert_eq!(moments, [10.0, 11.0, 20.0, 21.0, 0.0, 0.0, 10.0, 11.0]);
    // The same with packed bf16 moments (words copied bit for bit, fresh rows zero words).
    let words = [
        0x3F80_4000u32,
        0xBF00_0001,
        0x4120_7F80,
        0xC2C8_0000,
        0x0001_FFFF,
        0x8000_3C00,
    ];
    let packed = Moments::Bf16(gpu.upload(&words));
    let Moments::Bf16(got) = packed.rebuild(&gpu, &parent, &variant, 2) else {
        panic!("rebuild keeps the storage");
    };
    assert_eq!(
        gpu.read(&got).unwrap(),
        [
            words[0], words[1], words[2], words[3], 0, 0, words[0], words[1]
        ]
    );
}

#[test]
fn position_noise_is_gated_by_opacity() {
    let gpu = gpu();
    let n = 4000usize;
    let means = gpu.upload(&vec![0f32; n * 3]);
    let ls = gpu.upload(&vec![0f32; n * 3]); // unit scales: Σ = I
    let quats = gpu.upload(
        &(0..n)
            .flat_map(|_| [1f32, 0.0, 0.0, 0.0])
            .collect::<Vec<_>>(),
    );
    let opa: Vec<f32> = (0..n)
        .map(|i| if i < n / 2 { 10.0 } else { -10.0 })
        .collect();
    densify::add_position_noise(&gpu, &means, &ls, &quats, &gpu.upload(&opa), 2.0, 1234);
    let got = gpu.read(&means).unwrap();
    let opaque_max = got[..n * 3 / 2].iter().fold(0f32, |m, x| m.max(x.abs()));
    assert!(opaque_max < 1e-3, "opaque Gaussians stay put: {opaque_max}");
    let t = &got[n * 3 / 2..];
    // gsplat's gate sigmoid(100 (1 - opacity - 0.995)) is 0.62 at opacity ~ 0.
    let o = 1.0 / (1.0 + 10f64.exp());
    let gate = 1.0 / (1.0 + (-100.0 * ((1.0 - o) - 0.995)).exp());
    let var = t
        .iter()
        .map(|x| (*x as f64 / (2.0 * gate)).powi(2))
        .sum::<f64>()
        / t.len() as f64;
    assert!(
        (var - 1.0).abs() < 0.1,
        "transparent ones get N(0, (2 gate Σ)²) noise: var {var}"
    );
}

// ---------------------------------------------------------------------------
// Masks and the alpha loss

/// Random mask: a third zeros, half ones, the rest fractional (resized mask borders).
fn random_mask(rng: &mut StdRng, npix: usize) -> Vec<f64> {
    (0..npix)
        .map(|_| match rng.random_range(0..6) {
            0 | 1 => 0.0,
            2..=4 => 1.0,
            _ => rng.random::<f32>() as f64,
        })
        .collect()
}

/// The masked photometric loss by definition: the plain loss of `m a` and `m b`.
fn masked_loss_ref(a: &[f64], b: &[f64], m: &[f64], w: usize, h: usize, lambda: f64) -> f64 {
    let ma: Vec<f64> = a.iter().enumerate().map(|(i, v)| v * m[i / 3]).collect();
    let mb: Vec<f64> = b.iter().enumerate().map(|(i, v)| v * m[i / 3]).collect();
    loss_ref(&ma, &mb, w, h, lambda)
}

#[test]
fn masked_loss_matches_float64_reference_and_finite_differences() {
    let gpu = gpu();
    let kernels = loss::LossKernels::new(&gpu);
    let mut rng = StdRng::seed_from_u64(17);
    let to32 = |v: &[f64]| v.iter().map(|&x| x as f32).collect::<Vec<f32>>();
    for &(w, h) in &[(23usize, 17usize), (40, 12)] {
        let npix = w * h;
        let b: Vec<f64> = (0..npix * 3).map(|_| rng.random::<f32>() as f64).collect();
        let a: Vec<f64> = b
            .iter()
            .map(|&v| (v + 0.3 * (rng.random::<f32>() as f64 - 0.5)) as f32 as f64)
            .collect();
        let m = random_mask(&mut rng, npix);
        let (ga, gb, gm) = (
            gpu.upload(&to32(&a)),
            gpu.upload(&to32(&b)),
            gpu.upload(&to32(&m)),
        );
        let lambda = 0.2;
        let out = kernels.masked_photometric_loss(
            &gpu,
            &ga,
            &gb,
            &gm,
            w as u32,
            h as u32,
            lambda as f32,
            true,
        );
        let value = out.value(&gpu).unwrap() as f64;
        let reference = masked_loss_ref(&a, &b, &m, w, h, lambda);
        assert!(
            (value - reference).abs() < 1e-5,
            "{w}x{h}: masked loss {value} vs {reference}"
        );
        let grad = gpu.read(&out.grad).unwrap();
        // Ignored pixels: exactly no gradient, whatever their render and target.
        for p in 0..npix {
            if m[p] == 0.0 {
                assert!(
                    grad[p * 3..p * 3 + 3].iter().all(|&g| g == 0.0),
                    "pixel {p}"
                );
            }
        }
        // Changing the render or the target under the mask changes nothing.
        let mut a2 = a.clone();
        let mut b2 = b.clone();
        for p in (0..npix).filter(|&p| m[p] == 0.0) {
            for c in 0..3 {
                a2[p * 3 + c] = rng.random::<f32>() as f64;
                b2[p * 3 + c] = rng.random::<f32>() as f64;
            }
        }
        let out2 = kernels.masked_photometric_loss(
            &gpu,
            &gpu.upload(&to32(&a2)),
            &gpu.upload(&to32(&b2)),
            &gm,
            w as u32,
            h as u32,
            lambda as f32,
            true,
        );
        assert_eq!(out2.value(&gpu).unwrap() as f64, value);
        assert_eq!(gpu.read(&out2.grad).unwrap(), grad);
        // Central differences of the float64 reference (kept pixels, away from L1 kinks).
        let eps = 1e-4;
        let mut checked = 0;
        for _ in 0..60 {
            let i = rng.random_range(0..a.len());
            if m[i / 3] == 0.0 || (m[i / 3] * (a[i] - b[i])).abs() < 2.0 * eps {
                continue;
            }
            let mut ap = a.clone();
            ap[i] += eps;
            let mut am = a.clone();
            am[i] -= eps;
            let fd = (masked_loss_ref(&ap, &b, &m, w, h, lambda)
                - masked_loss_ref(&am, &b, &m, w, h, lambda))
                / (2.0 * eps);
            let g = grad[i] as f64;
            let scale = fd.abs().max(1.0 / a.len() as f64);
            assert!(
                (g - fd).abs() < 1e-3 * scale + 1e-8,
                "{w}x{h} value {i} (mask {}): grad {g} vs fd {fd}",
                m[i / 3]
            );
            checked += 1;
        }
        assert!(checked > 20, "{checked} derivatives checked");
        // An all-ones mask is the unmasked loss.
        let ones = gpu.upload(&vec![1.0f32; npix]);
        let full =
            kernels.masked_photometric_loss(&gpu, &ga, &gb, &ones, w as u32, h as u32, 0.2, true);
        let plain = kernels.photometric_loss(&gpu, &ga, &gb, w as u32, h as u32, 0.2, true);
        assert_eq!(full.value(&gpu).unwrap(), plain.value(&gpu).unwrap());
        assert_eq!(
            gpu.read(&full.grad).unwrap(),
            gpu.read(&plain.grad).unwrap()
        );
    }
}

/// `w mean(m |a - t|)` and its gradient `w m sign(a - t) / n` in float64.
fn alpha_loss_ref(a: &[f64], t: &[f64], m: Option<&[f64]>, weight: f64) -> (f64, Vec<f64>) {
    let n = a.len() as f64;
    let mk = |p: usize| m.map_or(1.0, |m| m[p]);
    let value = (0..a.len())
        .map(|p| weight * mk(p) * (a[p] - t[p]).abs())
        .sum::<f64>()
        / n;
    let grad = (0..a.len())
        .map(|p| {
            let d = a[p] - t[p];
            let sign = if d > 0.0 {
                1.0
            } else if d < 0.0 {
                -1.0
            } else {
                0.0
            };
            weight * mk(p) * sign / n
        })
        .collect();
    (value, grad)
}

#[test]
fn alpha_loss_matches_float64_reference_and_finite_differences() {
    let gpu = gpu();
    let kernels = loss::LossKernels::new(&gpu);
    let mut rng = StdRng::seed_from_u64(23);
    let to32 = |v: &[f64]| v.iter().map(|&x| x as f32).collect::<Vec<f32>>();
    for &npix in &[1usize, 255, 256, 257, 31 * 19] {
        let t: Vec<f64> = (0..npix).map(|_| rng.random::<f32>() as f64).collect();
        // Some exact ties (gradient 0 there, as in PyTorch).
        let a: Vec<f64> = t
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                if i % 13 == 5 {
                    v
                } else {
                    rng.random::<f32>() as f64
                }
            })
            .collect();
        let m = random_mask(&mut rng, npix);
        let weight = 0.7;
        for mask in [None, Some(&m[..])] {
            let gm = mask.map(|m| gpu.upload(&to32(m)));
            let out = kernels.alpha_loss(
                &gpu,
                &gpu.upload(&to32(&a)),
                &gpu.upload(&to32(&t)),
                gm.as_ref(),
                weight as f32,
            );
            let (value, grad_ref) = alpha_loss_ref(&a, &t, mask, weight);
            let got = out.value(&gpu).unwrap() as f64;
            assert!(
                (got - value).abs() < 1e-6 * value.max(1e-3),
                "{npix} px, mask {}: alpha loss {got} vs {value}",
                mask.is_some()
            );
            let grad = gpu.read(&out.grad).unwrap();
            assert_eq!(grad.len(), npix);
            for p in 0..npix {
                let g = grad[p] as f64;
                assert!(
                    (g - grad_ref[p]).abs() <= 1e-6 * grad_ref[p].abs(),
                    "pixel {p}: grad {g} vs {}",
                    grad_ref[p]
                );
                if a[p] == t[p] || mask.is_some_and(|m| m[p] == 0.0) {
                    assert_eq!(g, 0.0, "pixel {p}: tie or ignored");
                }
            }
            // Finite differences of the reference value.
            let eps = 1e-5;
            for _ in 0..20 {
                let p = rng.random_range(0..npix);
                if (a[p] - t[p]).abs() < 2.0 * eps {
                    continue;
                }
                let f = |d: f64| {
                    let mut ap = a.clone();
                    ap[p] += d;
                    alpha_loss_ref(&ap, &t, mask, weight).0
                };
                let fd = (f(eps) - f(-eps)) / (2.0 * eps);
                assert!(
                    (grad[p] as f64 - fd).abs() <= 1e-6 * fd.abs() + 1e-9,
                    "pixel {p}: grad {} vs fd {fd}",
                    grad[p]
                );
            }
        }
    }
}

/// The alpha loss's gradient, fed to the rasterizer's backward as its alpha gradient, is the
/// gradient of `w mean(m |alpha(params) - t|)` with respect to the Gaussians: checked against
/// central differences of the CPU float64 reference renderer.
#[test]
fn alpha_loss_through_the_rasterizer_matches_finite_differences() {
    use common::{RefOpts, Scene, random_scene, test_camera};
    use rust3r_splat::{RenderOptions, render, render_backward};
    let gpu = gpu();
    let kernels = loss::LossKernels::new(&gpu);
    let s = random_scene(31, 8, 1);
    let mut cam = test_camera(40, 30);
    for row in cam.world_to_camera.iter_mut() {
        for v in row.iter_mut() {
            *v = *v as f32 as f64;
        }
    }
    for v in [
        &mut cam.intrinsics.fx,
        &mut cam.intrinsics.fy,
        &mut cam.intrinsics.cx,
        &mut cam.intrinsics.cy,
    ] {
        *v = *v as f32 as f64;
    }
    let npix = 40 * 30;
    let mut rng = StdRng::seed_from_u64(32);
    let t: Vec<f64> = (0..npix).map(|_| rng.random::<f32>() as f64).collect();
    let m = random_mask(&mut rng, npix);
    let weight = 0.9;
    let bg = [0.1, 0.2, 0.3];
    let ref_alpha = |p: &Scene| {
        common::render(
            p,
            &cam,
            &RefOpts {
                background: bg,
                ..Default::default()
            },
        )
        .alpha
    };
    let ref_loss = |p: &Scene| alpha_loss_ref(&ref_alpha(p), &t, Some(&m), weight).0;

    let splats = s.upload(&gpu, rust3r_splat::ShPrecision::F32);
    let opts = RenderOptions {
        background: bg.map(|v| v as f32),
        ..Default::default()
    };
    let (out, state) = render(&gpu, &splats, &cam, &opts).unwrap();
    let alpha = kernels.alpha_loss(
        &gpu,
        &out.alpha,
        &gpu.upload(&Scene::f32(&t)),
        Some(&gpu.upload(&Scene::f32(&m))),
        weight as f32,
    );
    let value = alpha.value(&gpu).unwrap() as f64;
    assert!(
        (value - ref_loss(&s)).abs() < 1e-4,
        "{value} vs {}",
        ref_loss(&s)
    );
    let grads = render_backward(
        &gpu,
        &splats,
        &out,
        &state,
        &gpu.zeros::<f32>(npix * 3),
        &alpha.grad,
        &gpu.zeros::<f32>(npix),
    )
    .unwrap();
    let groups: [(&str, Vec<f32>); 3] = [
        ("opacity_logits", gpu.read(&grads.opacity_logits).unwrap()),
        ("means", gpu.read(&grads.means).unwrap()),
        ("log_scales", gpu.read(&grads.log_scales).unwrap()),
    ];
    let (mut checked, mut skipped, mut nonzero) = (0, 0, 0);
    for (name, g) in &groups {
        for (i, &gi) in g.iter().enumerate() {
            // Two step sizes; a difference across an L1 kink or an alpha cut-off disagrees.
            let d = |eps: f64| {
                let f = |e: f64| {
                    let mut p = s.clone();
                    match *name {
                        "opacity_logits" => p.opacity_logits[i] += e,
                        "means" => p.means[i] += e,
                        _ => p.log_scales[i] += e,
                    }
                    ref_loss(&p)
                };
                (f(eps) - f(-eps)) / (2.0 * eps)
            };
            let (d1, d2) = (d(1e-6), d(1e-7));
            if (d1 - d2).abs() > 1e-3 * d1.abs().max(1e-4) {
                skipped += 1;
                continue;
            }
            let tol = 2e-2 * d1.abs() + 2e-5;
            assert!(
                (gi as f64 - d1).abs() <= tol,
                "{name}[{i}]: analytic {gi} vs finite difference {d1}"
            );
            checked += 1;
            nonzero += (d1.abs() > 1e-4) as usize;
        }
    }
    eprintln!(
        "{checked} derivatives checked ({nonzero} clearly nonzero), {skipped} skipped at kinks"
    );
    assert!(
        checked >= 50 && skipped * 5 <= checked,
        "{checked} checked, {skipped} skipped"
    );
    assert!(nonzero >= 20, "only {nonzero} clearly nonzero derivatives");
}

/// Trainer wiring: a zero mask makes a step a no-op (zero loss, parameters unchanged); with
/// weight 0 an alpha target changes nothing; with weight > 0 it changes the step; targets of
/// the wrong size and negative weights are errors; configurations written before the alpha
/// weight existed still load.
#[test]
fn trainer_step_with_masks_and_alpha() {
    use rust3r_splat::train::{StepTarget, TrainConfig, Trainer, init::InitSplats};
    let gpu = gpu();
    let s = common::random_scene(41, 60, 0);
    let init = InitSplats {
        means: common::Scene::f32(&s.means),
        log_scales: common::Scene::f32(&s.log_scales),
        quats: common::Scene::f32(&s.quats),
        opacity_logits: common::Scene::f32(&s.opacity_logits),
        sh: common::Scene::f32(&s.sh),
        sh_degree: 0,
    };
    let cam = common::test_camera(32, 24);
    let npix = 32 * 24;
    let mut rng = StdRng::seed_from_u64(42);
    let rgb = gpu.upload(
        &(0..npix * 3)
            .map(|_| rng.random::<f32>())
            .collect::<Vec<_>>(),
    );
    let alpha = gpu.upload(&(0..npix).map(|_| rng.random::<f32>()).collect::<Vec<_>>());
    let zeros = gpu.upload(&vec![0.0f32; npix]);
    let cfg = |w: f32| TrainConfig {
        sh_degree: 0,
        deterministic: true,
        alpha_loss_weight: w,
        ..Default::default()
    };
    fn target<'a>(
        rgb: &'a GpuBuffer<f32>,
        alpha: Option<&'a GpuBuffer<f32>>,
        mask: Option<&'a GpuBuffer<f32>>,
    ) -> StepTarget<'a> {
        StepTarget { rgb, alpha, mask }
    }

    // Everything masked out: nothing to learn.
    let mut t = Trainer::new(&gpu, cfg(1.0), &init).unwrap();
    let before = t.to_host().unwrap();
    t.step_with(&cam, &target(&rgb, Some(&alpha), Some(&zeros)))
        .unwrap();
    assert!(t.last_loss().unwrap().unwrap().abs() < 1e-6);
    assert_eq!(t.last_alpha_loss().unwrap(), Some(0.0));
    assert_eq!(
        t.to_host().unwrap(),
        before,
        "a fully masked step changed the splats"
    );

    // Weight 0: an alpha target is ignored (bit-identical to a plain step).
    let mut plain = Trainer::new(&gpu, cfg(0.0), &init).unwrap();
    let mut ignored = Trainer::new(&gpu, cfg(0.0), &init).unwrap();
    let mut weighted = Trainer::new(&gpu, cfg(1.0), &init).unwrap();
    for _ in 0..2 {
        plain.step(&cam, &rgb).unwrap();
        ignored
            .step_with(&cam, &target(&rgb, Some(&alpha), None))
            .unwrap();
        weighted
            .step_with(&cam, &target(&rgb, Some(&alpha), None))
            .unwrap();
    }
    assert_eq!(plain.to_host().unwrap(), ignored.to_host().unwrap());
    assert_eq!(ignored.last_alpha_loss().unwrap(), None);
    let a = weighted.last_alpha_loss().unwrap().unwrap();
    assert!(a > 0.0);
    let total = weighted.last_loss().unwrap().unwrap();
    assert!(total > a, "total loss {total} includes the alpha term {a}");
    assert_ne!(plain.to_host().unwrap(), weighted.to_host().unwrap());

    // Errors.
    let short = gpu.upload(&vec![1.0f32; npix - 1]);
    let err = weighted
        .step_with(&cam, &target(&rgb, None, Some(&short)))
        .unwrap_err()
        .to_string();
    assert!(err.contains("mask") && err.contains("32x24"), "{err}");
    let err = weighted
        .step_with(
            &cam,
            &StepTarget {
                rgb: &rgb,
                alpha: Some(&short),
                mask: None,
            },
        )
        .unwrap_err()
        .to_string();
    assert!(err.contains("alpha"), "{err}");
    let mut bad = Trainer::new(&gpu, cfg(-1.0), &init).unwrap();
    let err = bad.step(&cam, &rgb).unwrap_err().to_string();
    assert!(err.contains("alpha_loss_weight"), "{err}");

    // Old configurations (checkpoint headers) have no alpha weight: it defaults to 0.
    let mut json = serde_json::to_value(TrainConfig::default()).unwrap();
    json.as_object_mut()
        .unwrap()
        .remove("alpha_loss_weight")
        .unwrap();
    let old: TrainConfig = serde_json::from_value(json).unwrap();
    assert_eq!(old.alpha_loss_weight, 0.0);
    assert_eq!(old, TrainConfig::default());
}

/// One bf16 step (unit in the last place) at `x`: 2^(exponent - 7).
fn bf16_ulp(x: f64) -> f64 {
    if x == 0.0 {
        return f64::from(f32::from_bits(1 << 16)); // smallest denormal bf16
    }
    2f64.powi(x.abs().log2().floor() as i32 - 7)
        .max(f64::from(f32::from_bits(1 << 16)))
}

/// Float64 reference of the compact Adam update with an error bound: `m`, `v` are the
/// reference moments, `em`, `ev` bounds of how far the stored bf16 moments may be from them
/// (each store rounds stochastically to a neighbour: at most one bf16 step away).
struct CompactRef {
    p: Vec<f64>,
    m: Vec<f64>,
    v: Vec<f64>,
    em: Vec<f64>,
    ev: Vec<f64>,
    ep: Vec<f64>,
}

impl CompactRef {
    #[allow(clippy::too_many_arguments)]
    fn step(
        &mut self,
        g: &[f32],
        lr: &dyn Fn(usize) -> f64,
        t: u64,
        b1: f64,
        b2: f64,
        eps: f64,
        skip: &dyn Fn(usize) -> bool,
    ) {
        let bc1 = 1.0 - b1.powi(t as i32);
        let bc2 = (1.0 - b2.powi(t as i32)).sqrt();
        for i in 0..self.p.len() {
            if skip(i) {
                continue;
            }
            let gi = g[i] as f64;
            let m = b1 * self.m[i] + (1.0 - b1) * gi;
            let v = b2 * self.v[i] + (1.0 - b2) * gi * gi;
            // Moments read back carry the old bound (scaled by β); f32 arithmetic adds ~1e-7
            // of the operands.
            let em_in = b1 * self.em[i] + 1e-6 * (b1 * self.m[i].abs() + (1.0 - b1) * gi.abs());
            let ev_in = b2 * self.ev[i] + 1e-6 * v;
            let upd = |m: f64, v: f64| lr(i) / bc1 * m / (v.max(0.0).sqrt() / bc2 + eps);
            let exact = upd(m, v);
            // The parameter step uses the f32 moments of this step: worst case over the box.
            let mut dev = 0f64;
            for sm in [-1.0, 1.0] {
                for sv in [-1.0, 1.0] {
                    dev = dev.max((upd(m + sm * em_in, v + sv * ev_in) - exact).abs());
                }
            }
            self.p[i] -= exact;
            self.ep[i] += dev + 1e-7 * exact.abs() + 1e-7 * self.p[i].abs();
            self.m[i] = m;
            self.v[i] = v;
            // Storing rounds to a neighbour of the f32 value: one step more.
            self.em[i] = em_in + bf16_ulp(m.abs() + em_in);
            self.ev[i] = ev_in + bf16_ulp(v + ev_in);
        }
    }
}

#[test]
fn compact_adam_matches_float64_reference_within_the_bf16_bound() {
    let gpu = gpu();
    let mut rng = StdRng::seed_from_u64(17);
    let (n, row) = (211usize, 6usize);
    let len = n * row;
    // Start from non-zero bf16 moments (as after earlier steps) and random parameters.
    let m0: Vec<f32> = (0..len)
        .map(|_| bf16_to_f32(bf16_nearest((rng.random::<f32>() - 0.5) * 0.2)))
        .collect();
    let v0: Vec<f32> = (0..len)
        .map(|_| bf16_to_f32(bf16_nearest(rng.random::<f32>() * 0.01)))
        .collect();
    let p0: Vec<f32> = (0..len).map(|_| rng.random::<f32>()).collect();
    let radii: Vec<u32> = (0..n * 2)
        .map(|i| if (i / 2) % 4 == 0 { 0 } else { 3 })
        .collect();
    let gp = gpu.upload(&p0);
    let moments = Moments::from_host(&gpu, &m0, &v0, MomentPrecision::Bf16);
    // Poisoned device: the packed state is exactly what was uploaded.
    assert_eq!(moments.read(&gpu).unwrap(), (m0.clone(), v0.clone()));
    let cfg = adam::AdamConfig {
        eps: 1e-8,
        moments: MomentPrecision::Bf16,
        ..Default::default()
    };
    let mut r = CompactRef {
        p: p0.iter().map(|&x| x as f64).collect(),
        m: m0.iter().map(|&x| x as f64).collect(),
        v: v0.iter().map(|&x| x as f64).collect(),
        em: vec![0.0; len],
        ev: vec![0.0; len],
        ep: vec![0.0; len],
    };
    let gr = gpu.upload(&radii);
    let lr = |i: usize| if i % row < 2 { 0.01 } else { 0.001 };
    let skip = |i: usize| radii[(i / row) * 2] == 0;
    for t in 1..=8u64 {
        let g: Vec<f32> = (0..len)
            .map(|_| (rng.random::<f32>() - 0.5) * 0.3)
            .collect();
        adam::adam_update(
            &gpu,
            &gp,
            &gpu.upload(&g),
            &moments,
            row,
            (2, 0.01, 0.001),
            t,
            &cfg,
            Some(&gr),
            adam::rounding_key(5, 0, t),
        );
        r.step(&g, &lr, t, 0.9, 0.999, 1e-8, &skip);
        let (gm, gv) = moments.read(&gpu).unwrap();
        for i in 0..len {
            assert!(
                (gm[i] as f64 - r.m[i]).abs() <= r.em[i]
                    && (gv[i] as f64 - r.v[i]).abs() <= r.ev[i],
                "step {t} element {i}: m {} vs {} ± {:e}, v {} vs {} ± {:e}",
                gm[i],
                r.m[i],
                r.em[i],
                gv[i],
                r.v[i],
                r.ev[i]
            );
            if skip(i) {
                assert_eq!(
                    (gm[i], gv[i]),
                    (m0[i], v0[i]),
                    "invisible rows keep their moments"
                );
            }
        }
    }
    let got = gpu.read(&gp).unwrap();
    let mut worst = 0f64;
    for i in 0..len {
        let d = (got[i] as f64 - r.p[i]).abs();
        assert!(
            d <= r.ep[i] + 1e-6,
            "element {i}: {} vs {} ± {:e}",
            got[i],
            r.p[i],
            r.ep[i]
        );
        if skip(i) {
            assert_eq!(got[i], p0[i], "invisible rows must not move");
        }
        worst = worst.max(d / (r.p[i] - p0[i] as f64).abs().max(1e-6));
    }
    eprintln!("worst parameter deviation: {worst:.4} of the total update");

    // Special values: infinities stay infinities with their sign, NaN stays NaN, negative
    // moments keep their sign, tiny ones stay tiny (or flush to zero, never to garbage).
    let g = [
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -3.0,
        1e-20,
        -2.0,
    ];
    let p = gpu.upload(&[0f32; 6]);
    let mom = Moments::zeros(&gpu, 6, MomentPrecision::Bf16);
    adam::adam_update(
        &gpu,
        &p,
        &gpu.upload(&g),
        &mom,
        6,
        (6, 0.1, 0.1),
        1,
        &cfg,
        None,
        9,
    );
    let (m, v) = mom.read(&gpu).unwrap();
    assert_eq!((m[0], v[0]), (f32::INFINITY, f32::INFINITY));
    assert_eq!((m[1], v[1]), (f32::NEG_INFINITY, f32::INFINITY));
    assert!(m[2].is_nan() && v[2].is_nan());
    assert!((m[3] + 0.3).abs() <= 0.3 / 128.0 && (v[3] - 0.009).abs() <= 0.009 / 128.0);
    assert!(
        m[4] > 0.0 && (m[4] as f64 - 1e-21).abs() <= 1e-21 / 128.0,
        "{}",
        m[4]
    );
    assert!(v[4] >= 0.0 && v[4] < 1e-42, "{}", v[4]);
    assert!(m[5] < 0.0 && v[5] > 0.0);
}

#[test]
fn compact_adam_rounding_is_unbiased_and_keeps_the_second_moment_decaying() {
    let gpu = gpu();
    let n = 1 << 16;
    let cfg = adam::AdamConfig {
        eps: 1e-8,
        moments: MomentPrecision::Bf16,
        ..Default::default()
    };
    // m1 = (1 - β1) g: one stochastic rounding of the same f32 value per element.
    let g = 1.0f32 + 0.3 / 128.0; // (1 - β1) g sits 0.3 of a bf16 step past a bf16 value
    let mom = Moments::zeros(&gpu, n, MomentPrecision::Bf16);
    let p = gpu.zeros::<f32>(n);
    adam::adam_update(
        &gpu,
        &p,
        &gpu.upload(&vec![g * 10.0; n]),
        &mom,
        1,
        (1, 0.0, 0.0),
        1,
        &cfg,
        None,
        77,
    );
    let (m, _) = mom.read(&gpu).unwrap();
    let want = ((1.0f32 - 0.9f32) * (g * 10.0)) as f64;
    let mean = m.iter().map(|&x| x as f64).sum::<f64>() / n as f64;
    let ulp = bf16_ulp(want);
    let nearest = bf16_to_f32(bf16_nearest(want as f32)) as f64;
    eprintln!(
        "m: {want} -> mean of {n} stochastic roundings {mean} ({:+.4} steps; nearest is {:+.3})",
        (mean - want) / ulp,
        (nearest - want) / ulp
    );
    assert!(
        (nearest - want).abs() > 0.2 * ulp,
        "the test value is not near a bf16 value"
    );
    assert!(
        (mean - want).abs() < 6.0 * 0.5 * ulp / (n as f64).sqrt(),
        "biased rounding"
    );

    // v = 1 with zero gradients decays by β2 = 0.999 per step, far below half a bf16 step
    // (2^-9 ≈ 0.002): round-to-nearest would keep it at 1 forever.
    let mom = Moments::from_host(&gpu, &vec![0.0; n], &vec![1.0; n], MomentPrecision::Bf16);
    let zeros = gpu.zeros::<f32>(n);
    let steps = 300u64;
    for t in 1..=steps {
        adam::adam_update(
            &gpu,
            &p,
            &zeros,
            &mom,
            1,
            (1, 0.0, 0.0),
            t,
            &cfg,
            None,
            adam::rounding_key(1, 0, t),
        );
    }
    let (m, v) = mom.read(&gpu).unwrap();
    let want = 0.999f64.powi(steps as i32);
    let mean = v.iter().map(|&x| x as f64).sum::<f64>() / n as f64;
    let sd = (v.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / n as f64).sqrt();
    eprintln!("v: 1 after {steps} steps of β2 decay: mean {mean} (exact {want}), spread {sd:.2e}");
    assert!(m.iter().all(|&x| x == 0.0));
    // Per element the rounding errors are a martingale: spread about sqrt(steps) · ulp / 2.
    assert!(sd < 0.05, "spread {sd}");
    assert!(
        (mean - want).abs() < 6.0 * sd / (n as f64).sqrt() + 1e-5,
        "v decays to {mean}, exact {want}"
    );
}

/// A few steps of a small scene, so that the moments are not all zero.
fn small_trainer(gpu: &rust3r_gpu::Gpu, moments: MomentPrecision) -> Trainer {
    let init = init::random_box(400, 1.0, 0.3, 1.0, 5, 1);
    let cfg = TrainConfig {
        sh_degree: 1,
        deterministic: true,
        adam: adam::AdamConfig {
            moments,
            ..Default::default()
        },
        ..Default::default()
    };
    let mut t = Trainer::new(gpu, cfg, &init).unwrap();
    let cam = small_camera();
    let target = gpu.upload(&vec![0.3f32; 24 * 24 * 3]);
    for _ in 0..3 {
        t.step(&cam, &target).unwrap();
    }
    t
}

fn small_camera() -> rust3r_splat::Camera {
    rust3r_splat::Camera {
        intrinsics: rust3r_geometry::PinholeCamera::new(20.0, 20.0, 12.0, 12.0, 24, 24),
        world_to_camera: [
            [1.0, 0.0, 0.0, 0.0],
            [0.0, 1.0, 0.0, 0.0],
            [0.0, 0.0, 1.0, 4.0],
            [0.0, 0.0, 0.0, 1.0],
        ],
    }
}

fn all_moments(t: &Trainer) -> Vec<(Vec<f32>, Vec<f32>)> {
    t.moments()
        .iter()
        .map(|m| m.read(t.gpu()).unwrap())
        .collect()
}

#[test]
fn checkpoints_hold_either_moment_storage_and_resume_converts() {
    let gpu = gpu();
    let dir = tempfile::tempdir().unwrap();
    let ck = dir.path().join("ck.bin");

    // f32 moments round-trip exactly.
    let t = small_trainer(&gpu, MomentPrecision::F32);
    let want = all_moments(&t);
    assert!(
        want.iter().any(|(m, _)| m.iter().any(|&x| x != 0.0)),
        "moments moved"
    );
    t.save_checkpoint(&ck).unwrap();
    let f32_len = std::fs::metadata(&ck).unwrap().len();
    let back = Trainer::load_checkpoint(&gpu, &ck).unwrap();
    assert_eq!(back.cfg.adam.moments, MomentPrecision::F32);
    assert_eq!(all_moments(&back), want);

    // A checkpoint written before the setting existed (no `moments` in its configuration)
    // holds f32 moments and still loads.
    let bytes = std::fs::read(&ck).unwrap();
    let hlen = u64::from_le_bytes(bytes[20..28].try_into().unwrap()) as usize;
    let mut header: serde_json::Value = serde_json::from_slice(&bytes[28..28 + hlen]).unwrap();
    let removed = header["config"]["adam"]
        .as_object_mut()
        .unwrap()
        .remove("moments");
    assert_eq!(removed, Some(serde_json::json!("f32")));
    let json = serde_json::to_vec(&header).unwrap();
    let mut legacy = bytes[..20].to_vec();
    legacy.extend_from_slice(&(json.len() as u64).to_le_bytes());
    legacy.extend_from_slice(&json);
    legacy.extend_from_slice(&bytes[28 + hlen..]);
    let old = dir.path().join("old.bin");
    std::fs::write(&old, &legacy).unwrap();
    let mut old_t = Trainer::load_checkpoint(&gpu, &old).unwrap();
    assert_eq!(old_t.cfg.adam.moments, MomentPrecision::F32);
    assert_eq!(all_moments(&old_t), want);

    // Resuming it with compact moments converts (to the nearest bf16), and the compact
    // checkpoint stores the packed words: half the moment bytes.
    old_t.set_moment_precision(MomentPrecision::Bf16).unwrap();
    let bf = |x: &f32| bf16_to_f32(bf16_nearest(*x));
    let rounded: Vec<(Vec<f32>, Vec<f32>)> = want
        .iter()
        .map(|(m, v)| (m.iter().map(bf).collect(), v.iter().map(bf).collect()))
        .collect();
    assert_eq!(all_moments(&old_t), rounded);
    assert!(
        old_t
            .moments()
            .iter()
            .all(|m| m.precision() == MomentPrecision::Bf16)
    );
    old_t.save_checkpoint(&ck).unwrap();
    let bf16_len = std::fs::metadata(&ck).unwrap().len();
    let values = 400 * (3 + 3 + 4 + 1 + 12) as u64;
    assert!(
        f32_len - bf16_len >= 4 * values && f32_len - bf16_len < 4 * values + 256,
        "checkpoint {f32_len} -> {bf16_len} bytes"
    );
    let mut back = Trainer::load_checkpoint(&gpu, &ck).unwrap();
    assert_eq!(back.cfg.adam.moments, MomentPrecision::Bf16);
    assert_eq!(all_moments(&back), rounded);
    // ... and back to f32, exactly; training goes on from either.
    back.set_moment_precision(MomentPrecision::F32).unwrap();
    assert_eq!(all_moments(&back), rounded);
    let target = gpu.upload(&vec![0.3f32; 24 * 24 * 3]);
    back.step(&small_camera(), &target).unwrap();
    old_t.step(&small_camera(), &target).unwrap();
    assert!(back.last_loss().unwrap().unwrap().is_finite());
    assert!(old_t.last_loss().unwrap().unwrap().is_finite());

    // A truncated compact checkpoint is refused with a clear error.
    let bytes = std::fs::read(&ck).unwrap();
    std::fs::write(&ck, &bytes[..bytes.len() - 4]).unwrap();
    let e = Trainer::load_checkpoint(&gpu, &ck)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("bytes"), "{e}");
}

/// Spacing of half floats at `x` (the largest rounding error of a stochastic rounding).
fn half_ulp(x: f64) -> f64 {
    let a = x.abs().max(6.103_515_625e-5);
    2f64.powi(a.log2().floor() as i32 - 10)
}

#[test]
fn half_sh_adam_matches_float64_reference_within_one_half_step() {
    use rust3r_gpu::half::{f16_nearest, f16_value};
    use rust3r_splat::ShCoeffs;
    let gpu = gpu();
    let mut rng = StdRng::seed_from_u64(23);
    // Degree 1 with an odd Gaussian count leaves the last word half used.
    for (n, k, precision) in [
        (173usize, 4usize, MomentPrecision::F32),
        (90, 16, MomentPrecision::Bf16),
        (91, 16, MomentPrecision::Sh8),
    ] {
        let row = 3 * k;
        let len = n * row;
        let sh0: Vec<f32> = (0..len)
            .map(|j| {
                let x = (rng.random::<f32>() - 0.5) * if j % row < 3 { 2.0 } else { 0.4 };
                if j % row < 3 {
                    x
                } else {
                    f16_value(f16_nearest(x))
                }
            })
            .collect();
        let coeffs = ShCoeffs::upload(&gpu, &sh0, k, rust3r_splat::ShPrecision::F16).unwrap();
        let ShCoeffs::Half { dc, rest } = &coeffs else {
            panic!("half storage")
        };
        assert_eq!(coeffs.read(&gpu, k).unwrap(), sh0, "upload round trip");
        let moments = Moments::zeros_sh(&gpu, n, row, precision);
        assert_eq!(moments.precision(), precision);
        let radii: Vec<u32> = (0..n * 2)
            .map(|i| if (i / 2) % 5 == 2 { 0 } else { 4 })
            .collect();
        let gr = gpu.upload(&radii);
        let skip = |i: usize| radii[(i / row) * 2] == 0;
        let cfg = adam::AdamConfig {
            eps: 1e-8,
            moments: precision,
            ..Default::default()
        };
        let (lr_dc, lr_rest) = (0.01f64, 0.002f64);
        let mut worst_rest = 0f64;
        for t in 1..=6u64 {
            let p_prev = coeffs.read(&gpu, k).unwrap();
            let (m_prev, v_prev) = moments.read(&gpu).unwrap();
            let g: Vec<f32> = (0..len)
                .map(|_| (rng.random::<f32>() - 0.5) * 0.2)
                .collect();
            adam::adam_update_sh_half(
                &gpu,
                dc,
                rest,
                adam::ShGrad::Buffer(&gpu.upload(&g)),
                &moments,
                row,
                (lr_dc as f32, lr_rest as f32),
                t,
                &cfg,
                Some(&gr),
                adam::rounding_key(3, 4, t),
            );
            let p = coeffs.read(&gpu, k).unwrap();
            let (m, v) = moments.read(&gpu).unwrap();
            // The kernel's constants are the f32 betas (1 - beta is exact in f32).
            let (b1, b2) = (cfg.beta1 as f64, cfg.beta2 as f64);
            let bc1 = 1.0 - b1.powi(t as i32);
            let bc2 = (1.0 - b2.powi(t as i32)).sqrt();
            for i in 0..len {
                if skip(i) {
                    assert_eq!(
                        (p[i], m[i], v[i]),
                        (p_prev[i], m_prev[i], v_prev[i]),
                        "step {t} value {i}: invisible row moved"
                    );
                    continue;
                }
                let gi = g[i] as f64;
                let mi = b1 * m_prev[i] as f64 + (1.0 - b1) * gi;
                let vi = b2 * v_prev[i] as f64 + (1.0 - b2) * gi * gi;
                let lr = if i % row < 3 { lr_dc } else { lr_rest };
                let want = p_prev[i] as f64 - lr / bc1 * mi / (vi.sqrt() / bc2 + 1e-8);
                // moments: f32 arithmetic, or one bf16 step of stochastic rounding
                // f32 arithmetic (relative to the terms: they can cancel), plus one bf16 step
                // of stochastic rounding for compact moments
                let terms = b1 * (m_prev[i] as f64).abs() + (1.0 - b1) * gi.abs();
                let (tm, tv) = match precision {
                    MomentPrecision::F32 => (1e-6 * terms + 1e-12, 1e-6 * vi + 1e-15),
                    MomentPrecision::Bf16 => {
                        (1e-6 * terms + mi.abs() / 128.0 + 1e-12, vi / 128.0 + 1e-15)
                    }
                    // DC: bf16 pairs; the rest: one step of 8-bit rounding (m: 2 mantissa
                    // bits, sqrt(v): 3), and below 2^-31 a flush to 0 or 2^-31
                    MomentPrecision::Sh8 if i % row < 3 => {
                        (1e-6 * terms + mi.abs() / 128.0 + 1e-12, vi / 128.0 + 1e-15)
                    }
                    MomentPrecision::Sh8 => {
                        let tiny = 2f64.powi(-31);
                        let s = vi.sqrt();
                        let ds = s / 8.0 + tiny;
                        (1e-6 * terms + mi.abs() / 4.0 + tiny, 2.0 * s * ds + ds * ds)
                    }
                };
                assert!(
                    (m[i] as f64 - mi).abs() <= tm,
                    "step {t} value {i}: m {} vs {mi}",
                    m[i]
                );
                assert!(
                    (v[i] as f64 - vi).abs() <= tv,
                    "step {t} value {i}: v {} vs {vi}",
                    v[i]
                );
                let d = (p[i] as f64 - want).abs();
                if i % row < 3 {
                    assert!(
                        d <= 1e-6 * want.abs().max(1e-3),
                        "step {t} DC {i}: {} vs {want}",
                        p[i]
                    );
                } else {
                    assert!(
                        d <= half_ulp(want) * 1.001 + 1e-9,
                        "step {t} value {i}: {} vs {want} (half step {:e})",
                        p[i],
                        half_ulp(want)
                    );
                    worst_rest = worst_rest.max(d / half_ulp(want));
                }
            }
        }
        eprintln!(
            "degree {}: worst rest deviation {worst_rest:.3} half steps",
            (k as f64).sqrt() - 1.0
        );
    }
}

#[test]
fn half_sh_rows_rebuild_from_their_parents() {
    use rust3r_gpu::half::{pack_f16, unpack_f16};
    let gpu = gpu();
    let mut rng = StdRng::seed_from_u64(29);
    for row in [9usize, 45] {
        let n = 101;
        let vals: Vec<f32> = (0..n * row).map(|_| rng.random::<f32>() - 0.5).collect();
        let src = pack_f16(&vals);
        let parent: Vec<u32> = (0..157).map(|_| rng.random_range(0..n as u32)).collect();
        let out = densify::rebuild_half(&gpu, &gpu.upload(&src), &gpu.upload(&parent), None, row);
        assert_eq!(out.len(), (parent.len() * row).div_ceil(2));
        let got = unpack_f16(&gpu.read(&out).unwrap(), parent.len() * row);
        let have = unpack_f16(&src, n * row);
        for (j, &p) in parent.iter().enumerate() {
            assert_eq!(
                &got[j * row..(j + 1) * row],
                &have[p as usize * row..(p as usize + 1) * row],
                "row {j} (parent {p})"
            );
        }
    }
}

#[test]
fn half_sh_checkpoints_resume_exactly_and_convert() {
    let gpu = gpu();
    let dir = tempfile::tempdir().unwrap();
    let ck = dir.path().join("ck.bin");
    let mut t = small_trainer(&gpu, MomentPrecision::Bf16);
    assert_eq!(
        t.cfg.sh_precision,
        rust3r_splat::ShPrecision::F16,
        "half SH is the default"
    );
    t.save_checkpoint(&ck).unwrap();
    let mut back = Trainer::load_checkpoint(&gpu, &ck).unwrap();
    assert_eq!(back.cfg.sh_precision, rust3r_splat::ShPrecision::F16);
    let sh = t.splats.read_sh(&gpu).unwrap();
    assert_eq!(back.splats.read_sh(&gpu).unwrap(), sh);
    // Same steps from the checkpoint and from the live trainer: same parameters, bit for bit.
    let target = gpu.upload(&vec![0.3f32; 24 * 24 * 3]);
    for _ in 0..2 {
        t.step(&small_camera(), &target).unwrap();
        back.step(&small_camera(), &target).unwrap();
    }
    assert_eq!(
        back.splats.read_sh(&gpu).unwrap(),
        t.splats.read_sh(&gpu).unwrap()
    );
    assert_eq!(back.to_host().unwrap().means, t.to_host().unwrap().means);
    // Converting to f32 keeps the values; a run with f32 SH differs (different rounding).
    back.set_sh_precision(rust3r_splat::ShPrecision::F32)
        .unwrap();
    assert_eq!(
        back.splats.read_sh(&gpu).unwrap(),
        t.splats.read_sh(&gpu).unwrap()
    );
    assert_eq!(back.splats.sh.precision(), rust3r_splat::ShPrecision::F32);
    back.step(&small_camera(), &target).unwrap();
    assert!(back.last_loss().unwrap().unwrap().is_finite());
}

#[test]
fn sh8_moments_rebuild_upload_and_need_half_sh() {
    let gpu = gpu();
    let mut rng = StdRng::seed_from_u64(31);
    let (n, row) = (37usize, 48usize);
    let m: Vec<f32> = (0..n * row)
        .map(|_| (rng.random::<f32>() - 0.5) * 1e-3)
        .collect();
    let v: Vec<f32> = (0..n * row).map(|_| rng.random::<f32>() * 1e-6).collect();
    let mom = Moments::from_host_sh(&gpu, &m, &v, row, MomentPrecision::Sh8);
    assert!(matches!(mom, Moments::Sh8 { .. }));
    assert_eq!(
        mom.device_bytes(),
        (n * 3 * 4 + (n * 45).div_ceil(2) * 4) as u64
    );
    let (gm, gv) = mom.read(&gpu).unwrap();
    for i in 0..n * row {
        // nearest rounding: half a step (bf16 for DC, 8-bit for the rest)
        let (rm, rv) = if i % row < 3 {
            (256.0, 256.0)
        } else {
            (8.0, 8.0)
        };
        assert!(
            (gm[i] - m[i]).abs() <= m[i].abs() / rm * 1.01,
            "m[{i}] {} vs {}",
            gm[i],
            m[i]
        );
        let s = v[i].sqrt();
        assert!(
            (gv[i].sqrt() - s).abs() <= s / rv * 1.01 + 1e-12,
            "v[{i}] {} vs {}",
            gv[i],
            v[i]
        );
    }
    // Rebuild: kept rows from their parents, new rows zero, relocated rows keep their own.
    let parent: Vec<u32> = (0..n as u32 + 9)
        .map(|i| if i < n as u32 { i } else { i % 5 })
        .collect();
    let variant: Vec<u32> = (0..parent.len())
        .map(|j| {
            if j < n {
                if j % 7 == 3 { 4 } else { 0 }
            } else {
                1 + (j % 3) as u32
            }
        })
        .collect();
    let parent: Vec<u32> = parent
        .iter()
        .enumerate()
        .map(|(j, &p)| {
            if j < n && j % 4 == 1 {
                (p + 2) % n as u32
            } else {
                p
            }
        })
        .collect();
    let out = mom.rebuild(&gpu, &gpu.upload(&parent), &gpu.upload(&variant), row);
    let (om, ov) = out.read(&gpu).unwrap();
    for j in 0..parent.len() {
        let src = match variant[j] {
            0 => Some(parent[j] as usize),
            4 => Some(j),
            _ => None,
        };
        for c in 0..row {
            let (wm, wv) = src.map_or((0.0, 0.0), |p| (gm[p * row + c], gv[p * row + c]));
            assert_eq!(
                (om[j * row + c], ov[j * row + c]),
                (wm, wv),
                "row {j} value {c} (variant {})",
                variant[j]
            );
        }
    }
    // 8-bit SH moments are refused beside f32 SH coefficients, with a clear error.
    let init = init::random_box(50, 1.0, 0.3, 1.0, 5, 1);
    let cfg = TrainConfig {
        sh_degree: 1,
        sh_precision: rust3r_splat::ShPrecision::F32,
        adam: adam::AdamConfig {
            moments: MomentPrecision::Sh8,
            ..Default::default()
        },
        ..Default::default()
    };
    let e = Trainer::new(&gpu, cfg, &init)
        .err()
        .expect("refused")
        .to_string();
    assert!(e.contains("f16 SH"), "{e}");
}

#[test]
fn sh8_checkpoints_resume_exactly_and_convert() {
    let gpu = gpu();
    let dir = tempfile::tempdir().unwrap();
    let ck = dir.path().join("ck.bin");
    let mut t = small_trainer(&gpu, MomentPrecision::Sh8);
    assert!(
        matches!(t.moments()[4], Moments::Sh8 { .. }) && matches!(t.moments()[0], Moments::Bf16(_))
    );
    t.save_checkpoint(&ck).unwrap();
    let mut back = Trainer::load_checkpoint(&gpu, &ck).unwrap();
    assert_eq!(all_moments(&back), all_moments(&t));
    let target = gpu.upload(&vec![0.3f32; 24 * 24 * 3]);
    for _ in 0..2 {
        t.step(&small_camera(), &target).unwrap();
        back.step(&small_camera(), &target).unwrap();
    }
    assert_eq!(all_moments(&back), all_moments(&t));
    assert_eq!(
        back.splats.read_sh(&gpu).unwrap(),
        t.splats.read_sh(&gpu).unwrap()
    );
    // To bf16 moments and back to f32 SH.
    back.set_moment_precision(MomentPrecision::Bf16).unwrap();
    assert_eq!(
        all_moments(&back),
        all_moments(&t),
        "8-bit values are exact in bf16"
    );
    back.set_sh_precision(rust3r_splat::ShPrecision::F32)
        .unwrap();
    back.step(&small_camera(), &target).unwrap();
    assert!(back.last_loss().unwrap().unwrap().is_finite());
    // f32 SH cannot take 8-bit moments.
    assert!(back.set_moment_precision(MomentPrecision::Sh8).is_err());
}

/// Adam's step is bounded by a few learning rates whatever the gradient scale: also with 8-bit
/// SH moments when the gradients are below the smallest 8-bit value (2^-31) and then stop.
/// (A stored `sqrt(v)` flushed to zero under a non-zero `m` made the step `m / eps`, 1e5
/// learning rates with gsplat's eps = 1e-15: lego diverged on the H100.)
#[test]
fn sh8_adam_steps_stay_bounded_for_gradients_below_the_8bit_range() {
    use rust3r_splat::{ShCoeffs, ShPrecision};
    let gpu = gpu();
    let (n, k) = (400usize, 16usize);
    let row = 3 * k;
    let coeffs = ShCoeffs::upload(&gpu, &vec![0.0; n * row], k, ShPrecision::F16).unwrap();
    let ShCoeffs::Half { dc, rest } = &coeffs else {
        panic!("half storage")
    };
    let moments = Moments::zeros_sh(&gpu, n, row, MomentPrecision::Sh8);
    let cfg = adam::AdamConfig {
        moments: MomentPrecision::Sh8,
        ..Default::default()
    };
    assert_eq!(cfg.eps, 1e-15);
    let lr = 1e-3f32;
    let tiny = gpu.upload(&vec![3e-10f32; n * row]);
    let zero = gpu.upload(&vec![0.0f32; n * row]);
    for t in 1..=20u64 {
        let g = if t == 1 { &tiny } else { &zero };
        adam::adam_update_sh_half(
            &gpu,
            dc,
            rest,
            adam::ShGrad::Buffer(g),
            &moments,
            row,
            (lr, lr),
            t,
            &cfg,
            None,
            adam::rounding_key(7, 4, t),
        );
    }
    let p = coeffs.read(&gpu, k).unwrap();
    let worst = p.iter().fold(0f32, |a, v| a.max(v.abs()));
    // 20 steps of at most a few learning rates each
    assert!(
        worst <= 20.0 * 4.0 * lr,
        "a coefficient moved {worst} in 20 steps of lr {lr}"
    );
}

/// The trainer's fused SH step (gradient computed inside Adam, never stored) equals Adam on
/// the rasterizer's stored SH gradient (itself checked against finite differences), bit for
/// bit: both moment storages, every SH degree active and only the first two.
#[test]
fn fused_sh_adam_equals_adam_on_the_stored_gradient() {
    use common::{random_scene, test_camera};
    use rust3r_splat::{RenderOptions, ShCoeffs, ShPrecision, render, render_backward};
    let gpu = gpu();
    let s = random_scene(61, 900, 3).rounded();
    let cam = test_camera(48, 36);
    let splats = s.upload(&gpu, ShPrecision::F16);
    let npix = 48 * 36;
    let mut rng = StdRng::seed_from_u64(5);
    let w: Vec<f32> = (0..npix * 3).map(|_| rng.random_range(-1.0..1.0)).collect();
    let (w, zero) = (gpu.upload(&w), gpu.upload(&vec![0.0f32; npix]));
    let host_sh = splats.read_sh(&gpu).unwrap();
    for (degree, precision) in [(3u32, MomentPrecision::Bf16), (1, MomentPrecision::Sh8)] {
        let opts = RenderOptions {
            sh_degree: Some(degree),
            deterministic: true,
            ..Default::default()
        };
        let (out, state) = render(&gpu, &splats, &cam, &opts).unwrap();
        let grads = render_backward(&gpu, &splats, &out, &state, &w, &zero, &zero).unwrap();
        let stored = gpu.read(&grads.sh).unwrap();
        assert!(
            stored.iter().any(|&g| g != 0.0),
            "degree {degree}: SH gradient all zero"
        );
        let cfg = adam::AdamConfig {
            moments: precision,
            ..Default::default()
        };
        let mut results = vec![];
        for fused in [false, true] {
            let coeffs = ShCoeffs::upload(&gpu, &host_sh, 16, ShPrecision::F16).unwrap();
            let ShCoeffs::Half { dc, rest } = &coeffs else {
                panic!("half storage")
            };
            let moments = Moments::zeros_sh(&gpu, 900, 48, precision);
            for t in 1..=2u64 {
                let grad = if fused {
                    adam::ShGrad::Fused {
                        means: &splats.means,
                        inputs: state.sh_grad_inputs(),
                        v_proj: &grads.projected,
                    }
                } else {
                    adam::ShGrad::Buffer(&grads.sh)
                };
                adam::adam_update_sh_half(
                    &gpu,
                    dc,
                    rest,
                    grad,
                    &moments,
                    48,
                    (0.01, 0.002),
                    t,
                    &cfg,
                    None,
                    adam::rounding_key(9, 4, t),
                );
            }
            results.push((coeffs.read(&gpu, 16).unwrap(), moments.read(&gpu).unwrap()));
        }
        assert!(
            results[0].0 != host_sh,
            "degree {degree}: Adam moved nothing"
        );
        assert!(
            results[0] == results[1],
            "degree {degree}: fused and stored-gradient steps differ"
        );
        // With sh_grad off the backward pass stores no SH gradient.
        let opts = RenderOptions {
            sh_grad: false,
            ..opts
        };
        let (out, state) = render(&gpu, &splats, &cam, &opts).unwrap();
        let g = render_backward(&gpu, &splats, &out, &state, &w, &zero, &zero).unwrap();
        assert!(g.sh.is_empty());
        assert_eq!(
            gpu.read(&g.projected).unwrap(),
            gpu.read(&grads.projected).unwrap()
        );
    }
}

/// More Gaussians than one buffer binding holds for the widest training buffer: a clear error
/// up front (naming the buffer and the way out), not a device failure mid-allocation; and the
/// densification cap stays inside the limit.
#[test]
fn too_many_gaussians_for_one_binding_is_a_clear_error() {
    let gpu = gpu();
    let limit = gpu.max_buffer_bytes();
    // 192 B per Gaussian at SH 3 for the SH moments (bf16 pairs): one more than fits.
    let n = (limit / 192) as usize + 1;
    let init = init::random_box(n, 1.0, 0.3, 1.0, 5, 3);
    let cfg = TrainConfig {
        adam: adam::AdamConfig {
            moments: MomentPrecision::Bf16,
            ..Default::default()
        },
        ..Default::default()
    };
    let e = Trainer::new(&gpu, cfg, &init)
        .err()
        .expect("refused")
        .to_string();
    assert!(
        e.contains("Adam moments of the SH coefficients") && e.contains("sh8"),
        "{e}"
    );
    // A small trainer caps densification at the binding limit too.
    let t = small_trainer(&gpu, MomentPrecision::Bf16);
    assert!(
        t.capacity() <= (limit / 12 / 4) as usize,
        "capacity {}",
        t.capacity()
    );
}

/// `Trainer::add_splats` (online training's new keyframe points): the trained rows keep their
/// parameters and Adam moments, the new rows carry exactly the given parameters (half-float SH:
/// higher orders zero) with zero moments, and the next step trains them.
#[test]
fn added_splats_keep_old_state_and_start_fresh() {
    use rust3r_splat::train::init::InitSplats;
    let gpu = gpu();
    let init_of = |s: &common::Scene| InitSplats {
        means: common::Scene::f32(&s.means),
        log_scales: common::Scene::f32(&s.log_scales),
        quats: common::Scene::f32(&s.quats),
        opacity_logits: common::Scene::f32(&s.opacity_logits),
        sh: common::Scene::f32(&s.sh),
        sh_degree: 1,
    };
    let (old, new) = (
        init_of(&common::random_scene(7, 50, 1)),
        init_of(&common::random_scene(8, 20, 1)),
    );
    let cam = common::test_camera(32, 24);
    let mut rng = StdRng::seed_from_u64(3);
    let rgb = gpu.upload(
        &(0..32 * 24 * 3)
            .map(|_| rng.random::<f32>())
            .collect::<Vec<_>>(),
    );
    let cfg = TrainConfig {
        sh_degree: 1,
        deterministic: true,
        ..Default::default()
    };
    let mut t = Trainer::new(&gpu, cfg, &old).unwrap();
    for _ in 0..3 {
        t.step(&cam, &rgb).unwrap();
    }
    let before = t.to_host().unwrap();
    let moments_before: Vec<(Vec<f32>, Vec<f32>)> =
        t.moments().iter().map(|m| m.read(&gpu).unwrap()).collect();
    assert!(
        moments_before[0].0.iter().any(|&v| v != 0.0),
        "the steps left moments to keep"
    );
    t.add_splats(&new).unwrap();
    let after = t.to_host().unwrap();
    assert_eq!(after.means.len(), 70);
    assert_eq!(after.means[..50], before.means[..]);
    assert_eq!(after.log_scales[..50], before.log_scales[..]);
    assert_eq!(after.rotations[..50], before.rotations[..]);
    assert_eq!(after.opacity_logits[..50], before.opacity_logits[..]);
    assert_eq!(after.sh[..50 * 12], before.sh[..]);
    for j in 0..20 {
        assert_eq!(after.means[50 + j][..], new.means[3 * j..3 * j + 3]);
        assert_eq!(
            after.log_scales[50 + j][..],
            new.log_scales[3 * j..3 * j + 3]
        );
        assert_eq!(after.rotations[50 + j][..], new.quats[4 * j..4 * j + 4]);
        assert_eq!(after.opacity_logits[50 + j], new.opacity_logits[j]);
        let sh = &after.sh[(50 + j) * 12..(51 + j) * 12];
        assert_eq!(sh[..3], new.sh[12 * j..12 * j + 3], "DC of new row {j}");
        assert!(sh[3..].iter().all(|&v| v == 0.0), "half SH rest of row {j}");
    }
    let rows = [3, 3, 4, 1, 12];
    for (g, (m0, v0)) in moments_before.iter().enumerate() {
        let (m1, v1) = t.moments()[g].read(&gpu).unwrap();
        let r = rows[g];
        assert_eq!(m1.len(), 70 * r, "group {g}");
        assert_eq!(m1[..50 * r], m0[..], "first moments of group {g}");
        assert_eq!(v1[..50 * r], v0[..], "second moments of group {g}");
        assert!(m1[50 * r..].iter().chain(&v1[50 * r..]).all(|&x| x == 0.0));
    }
    t.step(&cam, &rgb).unwrap();
    let stepped = t.to_host().unwrap();
    assert!(t.last_loss().unwrap().unwrap().is_finite());
    assert!(
        (50..70).any(|j| stepped.means[j] != after.means[j]),
        "the added Gaussians train"
    );
    let wrong = InitSplats {
        sh_degree: 0,
        ..new.clone()
    };
    assert!(t.add_splats(&wrong).is_err(), "SH degree mismatch rejected");
}
