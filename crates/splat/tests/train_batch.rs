//! Batched and data-parallel training steps (docs/multi-gpu.md).
//!
//! - A batch of one view repeated twice is the single-view step exactly (the mean of two equal
//!   gradients is the gradient: `(g + g) / 2 = g` in float), for f32 and half-float SH (the
//!   batch stores the SH gradient, the single step fuses it into Adam).
//! - A batch of two views equals the documented mean: each view's gradient from the rasterizer
//!   directly, their float64 mean, one Adam step (float64 reference).
//! - Two ranks with the in-process collective, each rendering one view of a batch of two,
//!   equal the single-GPU batch of two over several steps including densification, and the
//!   two replicas are identical.

use rust3r_gpu::collective::{Collective, InProcessCollective};
use rust3r_gpu::{Gpu, GpuBuffer, GpuOptions};
use rust3r_splat::train::adam::{AdamConfig, MomentPrecision};
use rust3r_splat::train::{
    AdcConfig, BatchView, Strategy, TrainConfig, Trainer, init::InitSplats, init::random_box,
};
use rust3r_splat::{Camera, RenderOptions, ShPrecision, render, render_backward};

fn gpu() -> Gpu {
    Gpu::new(&GpuOptions {
        poison: true,
        ..Default::default()
    })
    .expect("a GPU adapter is required (CI installs Mesa's lavapipe)")
}

const W: u32 = 32;

/// A 32x32 camera 4 units in front of the origin, shifted sideways by `dx`.
fn camera(dx: f64) -> Camera {
    Camera {
        intrinsics: rust3r_geometry::PinholeCamera::new(26.0, 26.0, 16.0, 16.0, W, W),
        world_to_camera: [
            [1.0, 0.0, 0.0, dx],
            [0.0, 1.0, 0.0, 0.0],
            [0.0, 0.0, 1.0, 4.0],
            [0.0, 0.0, 0.0, 1.0],
        ],
    }
}

/// A smooth synthetic target, different per `seed`.
fn target(seed: u32) -> Vec<f32> {
    let mut t = Vec::with_capacity((W * W * 3) as usize);
    for y in 0..W {
        for x in 0..W {
            for c in 0..3u32 {
                let v = 0.5
                    + 0.4
                        * ((x as f32 * 0.21 + seed as f32) * (c + 1) as f32 * 0.7
                            + y as f32 * 0.13 * (seed + 1) as f32)
                            .sin();
                t.push(v);
            }
        }
    }
    t
}

fn init() -> InitSplats {
    random_box(300, 1.0, 0.3, 1.0, 11, 1)
}

fn config(sh: ShPrecision) -> TrainConfig {
    TrainConfig {
        sh_degree: 1,
        sh_degree_interval: 2,
        deterministic: true,
        sh_precision: sh,
        // f32 moments: the float64 Adam reference needs no rounding model.
        adam: AdamConfig {
            moments: MomentPrecision::F32,
            ..Default::default()
        },
        strategy: Strategy::Adc(AdcConfig {
            refine_start: 1,
            refine_every: 3,
            reset_every: 0,
            grad2d_threshold: 2e-5,
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn params(t: &Trainer) -> Vec<Vec<f32>> {
    let s = t.to_host().expect("read");
    vec![
        s.means.concat(),
        s.log_scales.concat(),
        s.rotations.concat(),
        s.opacity_logits,
        s.sh,
    ]
}

#[test]
fn a_batch_of_one_view_twice_is_the_single_view_step() {
    let gpu = gpu();
    let cam = camera(0.2);
    let tgt = gpu.upload(&target(1));
    for sh in [ShPrecision::F32, ShPrecision::F16] {
        let mut cfg = config(sh);
        // No refinement: the statistics count the view twice, and their sums round differently.
        if let Strategy::Adc(a) = &mut cfg.strategy {
            a.refine_start = 1000;
        }
        let mut single = Trainer::new(&gpu, cfg.clone(), &init()).expect("trainer");
        let mut batch = Trainer::new(&gpu, cfg, &init()).expect("trainer");
        let start = params(&single);
        for _ in 0..4 {
            single.step(&cam, &tgt).expect("step");
            let v = BatchView::rgb(&cam, &tgt);
            let (info, extra) = batch.step_batch(&[v, v]).expect("batch step");
            assert_eq!(extra.len(), 2);
            assert_eq!(info.num_splats, single.num_splats());
        }
        let (a, b) = (params(&single), params(&batch));
        assert_ne!(a, start, "{sh:?}: training moved nothing");
        assert!(a == b, "{sh:?}: batch [v, v] differs from the step on v");
        assert_eq!(single.step, 4);
        assert_eq!(batch.step, 4);
        // The reported loss is the mean over the views: equal here.
        assert_eq!(
            single.last_loss().expect("loss"),
            batch.last_loss().expect("loss")
        );
    }
}

/// Float64 Adam, first step (bias-corrected moments from zero).
fn adam_first_step(p: f64, g: f64, lr: f64) -> f64 {
    let (b1, b2, eps) = (0.9f64, 0.999f64, 1e-15f64);
    let m = (1.0 - b1) * g / (1.0 - b1);
    let v = (1.0 - b2) * g * g / (1.0 - b2);
    p - lr * m / (v.sqrt() + eps)
}

#[test]
fn a_batch_of_two_views_steps_on_the_mean_gradient() {
    let gpu = gpu();
    let (c0, c1) = (camera(0.3), camera(-0.25));
    let (t0, t1) = (gpu.upload(&target(2)), gpu.upload(&target(5)));
    let mut cfg = config(ShPrecision::F32);
    if let Strategy::Adc(a) = &mut cfg.strategy {
        a.refine_start = 1000;
    }
    let init = init();
    let mut t = Trainer::new(&gpu, cfg.clone(), &init).expect("trainer");
    // Each view's gradient of the means straight from the rasterizer and the loss kernels.
    let view_grad = |cam: &Camera, tgt: &GpuBuffer<f32>| -> Vec<f64> {
        let opts = RenderOptions {
            background: cfg.background,
            sh_degree: Some(0),
            deterministic: true,
            ..Default::default()
        };
        let (out, state) = render(&gpu, &t.splats, cam, &opts).expect("render");
        let k = rust3r_splat::train::loss::LossKernels::new(&gpu);
        let l = k.photometric_loss(&gpu, &out.rgb, tgt, W, W, cfg.ssim_lambda, true);
        let zero = gpu.upload(&vec![0.0f32; (W * W) as usize]);
        let g = render_backward(&gpu, &t.splats, &out, &state, &l.grad, &zero, &zero)
            .expect("backward");
        gpu.read(&g.means)
            .expect("read")
            .iter()
            .map(|&x| x as f64)
            .collect()
    };
    let (g0, g1) = (view_grad(&c0, &t0), view_grad(&c1, &t1));
    let p0 = gpu.read(&t.splats.means).expect("read");
    t.step_batch(&[BatchView::rgb(&c0, &t0), BatchView::rgb(&c1, &t1)])
        .expect("batch step");
    let got = gpu.read(&t.splats.means).expect("read");
    let lr = t.means_lr(0) as f64;
    let mut moved = 0;
    for i in 0..got.len() {
        let g = 0.5 * (g0[i] + g1[i]);
        // Adam's first step is lr · sign(g) where |g| is far above ε, so compare where the
        // two views do not nearly cancel (the sum's rounding could flip the sign there).
        if g.abs() < 1e-6 * (g0[i].abs() + g1[i].abs()) + 1e-12 {
            continue;
        }
        let want = adam_first_step(p0[i] as f64, g, lr);
        assert!(
            (got[i] as f64 - want).abs() <= 1e-6 * (1.0 + want.abs()),
            "means[{i}]: {} vs float64 {want} (views' gradients {} and {})",
            got[i],
            g0[i],
            g1[i]
        );
        if g0[i].signum() != g1[i].signum() && g0[i] != 0.0 && g1[i] != 0.0 {
            moved += 1;
        }
    }
    // The comparison must include entries where the views disagree in sign: there the sum's
    // sign (the mean's) decides the step, not either view alone.
    assert!(moved > 10, "only {moved} entries where the views disagree");
}

fn steps_single(gpu: &Gpu, cams: &[Camera; 2], tgts: &[Vec<f32>; 2], steps: usize) -> Trainer {
    let mut t = Trainer::new(gpu, config(ShPrecision::F16), &init()).expect("trainer");
    let t0 = gpu.upload(&tgts[0]);
    let t1 = gpu.upload(&tgts[1]);
    for _ in 0..steps {
        t.step_batch(&[BatchView::rgb(&cams[0], &t0), BatchView::rgb(&cams[1], &t1)])
            .expect("batch step");
    }
    t
}

#[test]
fn two_ranks_equal_the_single_gpu_batch_and_each_other() {
    let gpu = gpu();
    let cams = [camera(0.3), camera(-0.25)];
    let tgts = [target(2), target(5)];
    let steps = 7; // refinements after steps 3 and 6
    let single = steps_single(&gpu, &cams, &tgts, steps);
    let group = InProcessCollective::group(2);
    let replicas: Vec<(Vec<Vec<f32>>, Vec<usize>)> = std::thread::scope(|s| {
        let handles: Vec<_> = group
            .iter()
            .map(|c| {
                let gpu = gpu.clone();
                let (cams, tgts) = (&cams, &tgts);
                s.spawn(move || {
                    let r = c.rank();
                    let mut t =
                        Trainer::new(&gpu, config(ShPrecision::F16), &init()).expect("trainer");
                    let tgt = gpu.upload(&tgts[r]);
                    let mut counts = vec![];
                    for _ in 0..steps {
                        // Rank r takes views r, r + 2, ... of the batch: here view r.
                        let (info, _) = t
                            .step_data_parallel(&[BatchView::rgb(&cams[r], &tgt)], 2, c)
                            .expect("data-parallel step");
                        counts.push(info.num_splats);
                    }
                    (params(&t), counts)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("rank"))
            .collect()
    });
    let (p0, n0) = &replicas[0];
    let (p1, n1) = &replicas[1];
    assert!(p0 == p1, "the replicas differ");
    assert_eq!(n0, n1);
    assert!(
        n0.windows(2).any(|w| w[0] != w[1]) || n0[0] != 300,
        "no densification happened: {n0:?}"
    );
    let p = params(&single);
    assert_eq!(single.num_splats(), *n0.last().expect("steps"));
    // Parameter gradients are summed in the same order on both sides (view 0 + view 1), but
    // the densification statistics are not: the single GPU adds view 0 then view 1 at every
    // step, the ranks sum their own views over the steps and then each other's. Their ulp
    // differences could only matter through a threshold decision; the parameters must agree
    // to float32 rounding.
    let mut worst = 0.0f64;
    for (g, (a, b)) in p.iter().zip(p0).enumerate() {
        assert_eq!(a.len(), b.len(), "group {g}");
        for (x, y) in a.iter().zip(b) {
            let d = (*x as f64 - *y as f64).abs() / (1.0 + x.abs() as f64);
            worst = worst.max(d);
        }
    }
    eprintln!(
        "single GPU vs 2 ranks: largest relative difference {worst:e}; Gaussians per step {n0:?}"
    );
    assert!(worst <= 1e-5, "single GPU and 2 ranks differ by {worst:e}");
}

#[test]
fn data_parallel_shares_and_batch_limits_are_checked() {
    let gpu = gpu();
    let cam = camera(0.0);
    let tgt = gpu.upload(&target(0));
    let v = BatchView::rgb(&cam, &tgt);
    let mut t = Trainer::new(&gpu, config(ShPrecision::F32), &init()).expect("trainer");
    assert!(t.step_batch(&[]).is_err());
    let mut cfg = config(ShPrecision::F32);
    cfg.visible_adam = true;
    let mut vis = Trainer::new(&gpu, cfg, &init()).expect("trainer");
    assert!(vis.step_batch(&[v, v]).is_err());
    vis.step_batch(&[v]).expect("visible Adam on one view");
    // One rank of one: its share of a batch of 2 is both views.
    let solo = InProcessCollective::group(1);
    assert!(t.step_data_parallel(&[v], 2, &solo[0]).is_err());
    t.step_data_parallel(&[v, v], 2, &solo[0])
        .expect("a group of one takes the whole batch");
    assert_eq!(t.step, 1);
}

/// The same equality through NCCL on two CUDA devices (one thread per device, each opening its
/// own device and joining the group), where the machine has them: a CUDA build
/// (`--features rust3r-cli/cuda`), two devices and libnccl.so on the library path
/// (docs/multi-gpu.md). Elsewhere (CI) it says why it has nothing to check and passes.
#[test]
fn nccl_ranks_on_two_cuda_devices_equal_the_single_gpu_batch() {
    use rust3r_gpu::collective::{nccl_available, nccl_join, nccl_new_id};
    use rust3r_gpu::{BackendKind, CUDA_COMPILED, list_cuda_devices};
    let devices = list_cuda_devices().map(|d| d.len()).unwrap_or(0);
    if !CUDA_COMPILED || devices < 2 || nccl_available().is_err() {
        eprintln!(
            "skipped: needs a CUDA build, two CUDA devices and NCCL (cuda build: {CUDA_COMPILED}, \
             devices: {devices}, NCCL: {:?})",
            nccl_available().err().map(|e| e.to_string())
        );
        return;
    }
    let open = |r: usize| {
        Gpu::new(&GpuOptions {
            backend: BackendKind::Cuda,
            adapter: Some(r),
            ..Default::default()
        })
        .expect("CUDA device")
    };
    let cams = [camera(0.3), camera(-0.25)];
    let tgts = [target(2), target(5)];
    let steps = 7;
    let single = params(&steps_single(&open(0), &cams, &tgts, steps));
    let id = nccl_new_id().expect("NCCL id");
    let replicas: Vec<Vec<Vec<f32>>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..2)
            .map(|r| {
                let (cams, tgts, id, open) = (&cams, &tgts, &id, &open);
                s.spawn(move || {
                    let gpu = open(r);
                    let c = nccl_join(&gpu, id, r, 2).expect("join");
                    let mut t =
                        Trainer::new(&gpu, config(ShPrecision::F16), &init()).expect("trainer");
                    let tgt = gpu.upload(&tgts[r]);
                    for _ in 0..steps {
                        t.step_data_parallel(&[BatchView::rgb(&cams[r], &tgt)], 2, c.as_ref())
                            .expect("data-parallel step");
                    }
                    params(&t)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("rank"))
            .collect()
    });
    assert!(replicas[0] == replicas[1], "the replicas differ");
    let mut worst = 0.0f64;
    for (a, b) in single.iter().zip(&replicas[0]) {
        assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(b) {
            worst = worst.max((*x as f64 - *y as f64).abs() / (1.0 + x.abs() as f64));
        }
    }
    eprintln!("NCCL, 2 CUDA devices vs one: largest relative difference {worst:e}");
    assert!(worst <= 1e-5, "{worst:e}");
}

/// gsplat's batch rules (`simple_trainer.py`: learning rates times sqrt(B), eps / sqrt(B),
/// `1 - beta` times B; its `steps_scaler` for the schedule), written out by hand for B = 4.
#[test]
fn a_batch_scales_rates_adam_and_schedule_as_gsplat_does() {
    use rust3r_splat::train::{AdcConfig, LearningRates, Strategy};
    let base = TrainConfig::default();
    assert_eq!(base.clone().for_batch(1, true), base);
    let b4 = base.clone().for_batch(4, true);
    let (lr, lr0) = (&b4.lr, LearningRates::default());
    for (got, want) in [
        (lr.means, lr0.means * 2.0),
        (lr.scales, lr0.scales * 2.0),
        (lr.quats, lr0.quats * 2.0),
        (lr.opacities, lr0.opacities * 2.0),
        (lr.sh_dc, lr0.sh_dc * 2.0),
        (lr.sh_rest, lr0.sh_rest * 2.0),
    ] {
        assert!((got - want).abs() <= 1e-6 * want, "{got} vs {want}");
    }
    assert!((b4.adam.beta1 - 0.6).abs() < 1e-6, "{}", b4.adam.beta1);
    assert!((b4.adam.beta2 - 0.996).abs() < 1e-6, "{}", b4.adam.beta2);
    assert!((b4.adam.eps - 0.5e-15).abs() < 1e-21);
    assert_eq!(b4.lr.decay_steps, 7_500);
    assert_eq!(b4.sh_degree_interval, 250);
    let Strategy::Adc(a) = &b4.strategy else {
        panic!("ADC expected")
    };
    let a0 = AdcConfig::default();
    assert_eq!(
        (a.refine_start, a.refine_stop, a.refine_every, a.reset_every),
        (125, 3_750, 25, 750)
    );
    assert_eq!(a.grad2d_threshold, a0.grad2d_threshold);
    // Without the schedule: rates and Adam only.
    let rates_only = base.clone().for_batch(4, false);
    assert_eq!(rates_only.strategy, base.strategy);
    assert_eq!(rates_only.lr.decay_steps, 30_000);
    assert_eq!(rates_only.adam, b4.adam);
}
