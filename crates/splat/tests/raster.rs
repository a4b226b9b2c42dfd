//! Rasterizer forward and backward against the CPU float64 reference.

mod common;

use common::{
    RefOpts, Scene, compare_forward, compare_forward_tuned, one_tile_pile, random_scene,
    round_camera, test_camera,
};
use rand::{Rng, SeedableRng, rngs::StdRng};
use rust3r_gpu::half::{f16_nearest, f16_value};
use rust3r_gpu::{Gpu, GpuOptions};
use rust3r_splat::{
    BackwardKernel, Camera, GpuSplats, RasterTuning, RenderOptions, ShPrecision, render,
    render_backward,
};

fn gpu() -> Gpu {
    Gpu::new(&GpuOptions {
        poison: true,
        ..Default::default()
    })
    .expect("a GPU adapter is required (CI installs Mesa's lavapipe)")
}

fn upload(gpu: &Gpu, s: &Scene) -> GpuSplats {
    s.upload(gpu, ShPrecision::F32)
}

/// Output-gradient weights for a `npix`-pixel image: dL/d rgb and dL/d alpha (the latter also
/// serves as dL/d depth), uniform in [-1, 1).
fn output_weights(seed: u64, npix: usize) -> (Vec<f32>, Vec<f32>) {
    let mut rng = StdRng::seed_from_u64(seed);
    let w = (0..npix * 3).map(|_| rng.random_range(-1.0..1.0)).collect();
    let wa = (0..npix).map(|_| rng.random_range(-1.0..1.0)).collect();
    (w, wa)
}

/// `b` equals `a` within `rel` of `a`'s largest magnitude, and `a` is not all zero.
fn assert_close(what: &str, a: &[f32], b: &[f32], rel: f32) {
    let scale = a.iter().fold(0f32, |m, v| m.max(v.abs()));
    assert!(scale > 0.0, "{what}: all zero");
    assert_eq!(a.len(), b.len(), "{what}: lengths");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(
            (x - y).abs() <= rel * scale,
            "{what}[{i}]: {x} vs {y} (scale {scale})"
        );
    }
}

#[test]
fn forward_matches_reference_random_scenes() {
    let gpu = gpu();
    let mut paths = vec![];
    for (seed, degree, aa, grow) in [
        (1u64, 0u32, false, 0.0),
        (2, 1, true, 0.0),
        (3, 2, false, 0.0),
        (4, 3, true, 0.0),
        (5, 3, false, 0.0),
        // Small and large Gaussians: with and without the row-reach test.
        (6, 1, false, -1.0),
        (7, 1, true, 1.5),
    ] {
        let mut s = random_scene(seed, 1500, degree);
        s.log_scales.iter_mut().for_each(|v| *v += grow);
        // Odd sizes exercise partial edge tiles.
        let cam = round_camera(test_camera(67, 45));
        paths.push(compare_forward(
            &gpu,
            &s.rounded(),
            &cam,
            aa,
            [0.1, 0.5, 0.9],
        ));
    }
    assert!(
        paths.contains(&true) && paths.contains(&false),
        "row-skip paths taken: {paths:?}"
    );
}

#[test]
fn forward_many_gaussians_in_one_tile() {
    // Thousands of Gaussians overlapping one 16x16 tile: many batches, early termination.
    let gpu = gpu();
    let s = one_tile_pile(11, 5000);
    let cam = round_camera(test_camera(16, 16));
    compare_forward(&gpu, &s, &cam, false, [0.0, 0.0, 0.0]);
}

#[test]
fn empty_and_fully_culled_scenes_render_background() {
    let gpu = gpu();
    let cam = round_camera(test_camera(33, 17));
    let mut s = random_scene(12, 100, 0);
    for i in 0..s.len() {
        s.means[i * 3 + 2] = -s.means[i * 3 + 2]; // all behind the camera
    }
    for scene in [random_scene(13, 0, 0), s] {
        let opts = RenderOptions {
            background: [0.25, 0.5, 0.75],
            ..Default::default()
        };
        let (out, _) = render(&gpu, &upload(&gpu, &scene), &cam, &opts).unwrap();
        let rgb = gpu.read(&out.rgb).unwrap();
        for p in rgb.chunks(3) {
            assert_eq!(p, &[0.25, 0.5, 0.75]);
        }
        assert!(gpu.read(&out.alpha).unwrap().iter().all(|&a| a == 0.0));
    }
}

#[test]
fn invalid_camera_is_an_error_not_a_panic() {
    let gpu = gpu();
    let s = random_scene(14, 10, 0);
    let mut cam = test_camera(0, 10);
    assert!(render(&gpu, &upload(&gpu, &s), &cam, &RenderOptions::default()).is_err());
    cam.intrinsics.width = 10;
    cam.intrinsics.fx = f64::NAN;
    assert!(render(&gpu, &upload(&gpu, &s), &cam, &RenderOptions::default()).is_err());
}

/// Loss L = sum(w_rgb * rgb) + sum(w_a * alpha) + sum(w_d * depth).
struct Weights {
    rgb: Vec<f64>,
    alpha: Vec<f64>,
    depth: Vec<f64>,
}

fn loss(s: &Scene, cam: &Camera, w: &Weights, aa: bool, bg: [f64; 3]) -> f64 {
    let img = common::render(
        s,
        cam,
        &RefOpts {
            background: bg,
            antialiased: aa,
            ..Default::default()
        },
    );
    let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
    dot(&img.rgb, &w.rgb) + dot(&img.alpha, &w.alpha) + dot(&img.depth, &w.depth)
}

fn check(name: &str, analytic: f64, fd: f64, scale: f64) {
    let tol = 2e-2 * fd.abs() + 2e-3 * scale + 1e-6;
    assert!(
        (analytic - fd).abs() <= tol,
        "{name}: analytic {analytic} vs finite difference {fd} (scale {scale})"
    );
}

/// Central differences at two step sizes. The loss is piecewise smooth (alpha
/// cut-off at 1/255, transmittance cut-off, depth order), so a step can cross a
/// kink: a derivative whose two estimates disagree is reported as `None`.
fn central_difference(f: impl Fn(f64) -> f64) -> Option<f64> {
    let d = |eps: f64| (f(eps) - f(-eps)) / (2.0 * eps);
    let (a, b) = (d(1e-6), d(1e-7));
    ((a - b).abs() <= 1e-3 * a.abs().max(1.0)).then_some(a)
}

fn gradient_check(seed: u64, n: usize, degree: u32, aa: bool, sample: Option<usize>) {
    gradient_check_with(seed, random_scene(seed, n, degree), aa, sample, 8, |_| {});
}

/// [`gradient_check`] of scene `s`, checkpointing the blend state every `checkpoint_every`
/// batches of 256 intersections; `inspect` sees the forward pass's state.
fn gradient_check_with(
    seed: u64,
    s: Scene,
    aa: bool,
    sample: Option<usize>,
    checkpoint_every: u32,
    inspect: impl Fn(&rust3r_splat::TileStats),
) {
    let gpu = gpu();
    let cam = round_camera(test_camera(40, 30));
    let bg = [0.2, 0.3, 0.4];
    let npix = 40 * 30;
    let mut rng = StdRng::seed_from_u64(seed + 100);
    let w = Weights {
        rgb: (0..npix * 3).map(|_| rng.random_range(-1.0..1.0)).collect(),
        alpha: (0..npix).map(|_| rng.random_range(-1.0..1.0)).collect(),
        depth: (0..npix).map(|_| rng.random_range(-0.1..0.1)).collect(),
    };
    let splats = upload(&gpu, &s);
    // Both backward kernels, whatever the adapter would pick: the portable shared-memory one
    // (CUDA's) and the subgroup one (wgpu's; the portable one again without subgroups); the
    // portable one also with its smallest batch (4 Gaussians, `RasterTuning::backward_batch_cap`).
    let kernels = [
        (BackwardKernel::Portable, None),
        (BackwardKernel::Subgroup, None),
        (BackwardKernel::Portable, Some(4)),
    ];
    let mut results = vec![];
    for (kernel, cap) in kernels {
        let opts = RenderOptions {
            background: bg.map(|v| v as f32),
            antialiased: aa,
            checkpoint_every,
            backward_kernel: kernel,
            tuning: RasterTuning {
                backward_batch_cap: cap,
                ..Default::default()
            },
            ..Default::default()
        };
        let kernel = match cap {
            Some(c) => format!("{kernel:?} batch <= {c}"),
            None => format!("{kernel:?}"),
        };
        let (out, state) = render(&gpu, &splats, &cam, &opts).unwrap();
        inspect(&state.tile_stats(&gpu).unwrap());
        let grads = render_backward(
            &gpu,
            &splats,
            &out,
            &state,
            &gpu.upload(&Scene::f32(&w.rgb)),
            &gpu.upload(&Scene::f32(&w.alpha)),
            &gpu.upload(&Scene::f32(&w.depth)),
        )
        .unwrap();
        let arrays: [(&str, Vec<f32>); 5] = [
            ("means", gpu.read(&grads.means).unwrap()),
            ("log_scales", gpu.read(&grads.log_scales).unwrap()),
            ("quats", gpu.read(&grads.quats).unwrap()),
            ("opacity_logits", gpu.read(&grads.opacity_logits).unwrap()),
            ("sh", gpu.read(&grads.sh).unwrap()),
        ];
        results.push((kernel, arrays, grads.world_to_camera));
    }
    let mut skipped = 0usize;
    let mut checked = 0;
    for (a, (name, _)) in results[0].1.iter().enumerate() {
        let len = results[0].1[a].1.len();
        let indices: Vec<usize> = match sample {
            None => (0..len).collect(),
            Some(k) => (0..k).map(|_| rng.random_range(0..len)).collect(),
        };
        let fd_of = |i: usize| {
            central_difference(|eps| {
                let mut p = s.clone();
                let v = match *name {
                    "means" => &mut p.means[i],
                    "log_scales" => &mut p.log_scales[i],
                    "quats" => &mut p.quats[i],
                    "opacity_logits" => &mut p.opacity_logits[i],
                    _ => &mut p.sh[i],
                };
                *v += eps;
                loss(&p, &cam, &w, aa, bg)
            })
        };
        let fds: Vec<(usize, f64)> = indices
            .iter()
            .filter_map(|&i| match fd_of(i) {
                Some(fd) => Some((i, fd)),
                None => {
                    skipped += 1;
                    None
                }
            })
            .collect();
        let scale = fds.iter().map(|(_, f)| f.abs()).fold(0.0, f64::max);
        for (i, fd) in fds {
            for (kernel, arrays, _) in &results {
                check(
                    &format!("{kernel} {name}[{i}]"),
                    arrays[a].1[i] as f64,
                    fd,
                    scale,
                );
            }
            checked += 1;
        }
    }
    // Camera pose.
    let mut fds = vec![];
    for r in 0..3 {
        for c in 0..4 {
            let fd = central_difference(|eps| {
                let mut p = cam.clone();
                p.world_to_camera[r][c] += eps;
                loss(&s, &p, &w, aa, bg)
            });
            match fd {
                Some(fd) => fds.push(((r, c), fd)),
                None => skipped += 1,
            }
        }
    }
    let scale = fds.iter().map(|(_, f)| f.abs()).fold(0.0, f64::max);
    for ((r, c), fd) in fds {
        for (kernel, _, world_to_camera) in &results {
            check(
                &format!("{kernel} world_to_camera[{r}][{c}]"),
                world_to_camera[r][c] as f64,
                fd,
                scale,
            );
        }
    }
    // Kinks are rare: nearly every derivative must have been checked.
    assert!(
        checked > 0 && skipped * 20 <= checked,
        "{skipped} derivatives skipped at kinks, {checked} checked"
    );
}

#[test]
fn backward_matches_finite_differences_sh3() {
    gradient_check(21, 6, 3, false, None);
}

#[test]
fn backward_matches_finite_differences_antialiased_sh1() {
    gradient_check(22, 8, 1, true, None);
}

#[test]
fn backward_matches_finite_differences_dense_scene() {
    // Many Gaussians per tile: several backward batches per tile.
    gradient_check(23, 300, 2, false, Some(40));
}

#[test]
fn backward_matches_finite_differences_across_checkpoints() {
    // Faint Gaussians piled on a 40x30 image, checkpoints every 256 intersections: the backward
    // pass splits tiles into chunks that start from the forward pass's saved blend state.
    let mut s = random_scene(24, 2500, 1);
    for v in s.opacity_logits.iter_mut() {
        *v = *v * 0.3 - 3.0;
    }
    gradient_check_with(24, s, false, Some(40), 1, |t| {
        assert!(
            t.walked_max > 3 * 256,
            "a tile must span several chunks: {t:?}"
        );
    });
}

#[test]
fn image_larger_than_the_adapter_allows_is_a_clear_error() {
    let gpu = gpu();
    let s = random_scene(15, 10, 0);
    let limit = gpu.max_buffer_bytes();
    let side = ((limit / 12) as f64).sqrt().ceil() as u32 + 16;
    let cam = test_camera(side, side);
    let err = render(&gpu, &upload(&gpu, &s), &cam, &RenderOptions::default()).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("image") && msg.contains(&limit.to_string()),
        "unexpected error: {msg}"
    );
}

#[test]
fn bounded_dispatches_give_the_same_image_and_gradients() {
    // 5000 Gaussians in one tile, split into dispatches of 256 Gaussians per tile:
    // the carried blend state must reproduce the single-dispatch image exactly.
    let gpu = gpu();
    let mut s = random_scene(41, 5000, 1);
    for i in 0..s.len() {
        let z = s.means[i * 3 + 2];
        s.means[i * 3] = (0.01 * (i % 7) as f64) * z / 10.0;
        s.means[i * 3 + 1] = (0.01 * (i % 5) as f64) * z / 10.0;
        s.opacity_logits[i] = -5.0; // faint: ~1400 Gaussians blend before termination
    }
    let s = s.rounded();
    let cam = round_camera(test_camera(24, 20));
    let splats = upload(&gpu, &s);
    let (w, wa) = output_weights(9, 24 * 20);
    let run = |k: u32| {
        let opts = RenderOptions {
            max_batches_per_dispatch: k,
            background: [0.3, 0.2, 0.1],
            // Exact equality needs the fixed-order gradient sums.
            deterministic: true,
            ..Default::default()
        };
        let (out, state) = render(&gpu, &splats, &cam, &opts).unwrap();
        let g = render_backward(
            &gpu,
            &splats,
            &out,
            &state,
            &gpu.upload(&w),
            &gpu.upload(&wa),
            &gpu.upload(&wa),
        )
        .unwrap();
        (
            gpu.read(&out.rgb).unwrap(),
            gpu.read(&out.alpha).unwrap(),
            gpu.read(&g.means).unwrap(),
            gpu.read(&g.opacity_logits).unwrap(),
            out.num_intersections,
        )
    };
    let single = run(64);
    let split = run(1);
    assert!(
        single.4 > 4 * 256,
        "the tile must need several dispatches ({} intersections)",
        single.4
    );
    assert_eq!(single.0, split.0, "rgb");
    assert_eq!(single.1, split.1, "alpha");
    // The split backward starts its chunks from checkpoints every 256 intersections instead of
    // undoing the blend from the final transmittance: the same gradients up to rounding.
    assert_close("means gradient", &single.2, &split.2, 1e-4);
    assert_close("opacity gradient", &single.3, &split.3, 1e-4);
    // And the image is still the reference one.
    compare_forward(&gpu, &s, &cam, false, [0.3, 0.2, 0.1]);
}

#[test]
fn forward_only_renders_the_same_image_and_refuses_a_backward_pass() {
    // Dense enough that tiles take several checkpoints in a training render.
    let gpu = gpu();
    let s = random_scene(43, 3000, 2).rounded();
    let cam = round_camera(test_camera(40, 30));
    let splats = upload(&gpu, &s);
    let opts = RenderOptions {
        background: [0.1, 0.2, 0.3],
        checkpoint_every: 1,
        ..Default::default()
    };
    let (train_out, _) = render(&gpu, &splats, &cam, &opts).unwrap();
    let fwd_opts = RenderOptions {
        forward_only: true,
        ..opts.clone()
    };
    let (out, state) = render(&gpu, &splats, &cam, &fwd_opts).unwrap();
    assert!(
        out.num_intersections > 2 * 256,
        "{} intersections",
        out.num_intersections
    );
    assert_eq!(
        gpu.read(&out.rgb).unwrap(),
        gpu.read(&train_out.rgb).unwrap()
    );
    assert_eq!(
        gpu.read(&out.alpha).unwrap(),
        gpu.read(&train_out.alpha).unwrap()
    );
    assert_eq!(
        gpu.read(&out.depth).unwrap(),
        gpu.read(&train_out.depth).unwrap()
    );
    let npix = 40 * 30;
    let err = render_backward(
        &gpu,
        &splats,
        &out,
        &state,
        &gpu.upload(&vec![1.0f32; npix * 3]),
        &gpu.upload(&vec![0.0f32; npix]),
        &gpu.upload(&vec![0.0f32; npix]),
    )
    .expect_err("a backward pass over a forward-only render must be refused");
    assert!(err.to_string().contains("forward_only"), "{err}");
    compare_forward(&gpu, &s, &cam, false, [0.1, 0.2, 0.3]);
}

#[test]
fn backward_chunks_skip_empty_tiles() {
    // Two dense clumps at the image's left and right edges with empty tiles between them: every
    // backward cube must find its own tile's chunk. Checkpoints every 256 intersections against
    // none (one chunk per tile) give the same gradients.
    let gpu = gpu();
    let mut s = random_scene(43, 3000, 0);
    for i in 0..s.len() {
        let z = s.means[i * 3 + 2];
        let side = if i % 2 == 0 { -0.55 } else { 0.5 };
        s.means[i * 3] = (side + 0.02 * (i % 5) as f64) * z;
        s.means[i * 3 + 1] = 0.02 * (i % 3) as f64 * z;
        s.log_scales[i * 3..i * 3 + 3].copy_from_slice(&[-2.5; 3]);
        s.opacity_logits[i] = -4.0;
    }
    let s = s.rounded();
    let cam = round_camera(test_camera(128, 32));
    let splats = upload(&gpu, &s);
    let (w, wa) = output_weights(10, 128 * 32);
    let run = |every: u32| {
        let opts = RenderOptions {
            checkpoint_every: every,
            deterministic: true,
            ..Default::default()
        };
        let (out, state) = render(&gpu, &splats, &cam, &opts).unwrap();
        let stats = state.tile_stats(&gpu).unwrap();
        let (wr, wa) = (gpu.upload(&w), gpu.upload(&wa));
        let g = render_backward(&gpu, &splats, &out, &state, &wr, &wa, &wa).unwrap();
        (
            gpu.read(&out.rgb).unwrap(),
            gpu.read(&g.means).unwrap(),
            gpu.read(&g.sh).unwrap(),
            stats,
        )
    };
    let (rgb_one, means_one, sh_one, stats) = run(64);
    let (rgb_chunked, means_chunked, sh_chunked, _) = run(1);
    assert!(
        stats.empty >= 4,
        "tiles between the clumps must be empty: {stats:?}"
    );
    assert!(
        stats.walked_max > 3 * 256,
        "a tile must span several chunks: {stats:?}"
    );
    assert_eq!(rgb_one, rgb_chunked);
    assert_close("means", &means_one, &means_chunked, 1e-4);
    assert_close("sh", &sh_one, &sh_chunked, 1e-4);
    compare_forward(&gpu, &s, &cam, false, [0.0; 3]);
}

#[test]
fn atomic_and_deterministic_backward_agree() {
    // The float-atomic backward (default where the adapter has f32 atomics, as lavapipe does)
    // and the fixed-order one give the same gradients up to summation order; the fixed-order
    // one is bit-identical run to run. (The finite-difference tests above check the default.)
    let gpu = gpu();
    assert!(
        gpu.f32_atomic_add(),
        "the CI adapter is expected to have f32 atomics"
    );
    let s = random_scene(77, 3000, 3).rounded();
    let cam = round_camera(test_camera(70, 50));
    let splats = upload(&gpu, &s);
    let (w, wa) = output_weights(5, 70 * 50);
    let run = |deterministic: bool| {
        let opts = RenderOptions {
            deterministic,
            ..Default::default()
        };
        let (out, state) = render(&gpu, &splats, &cam, &opts).unwrap();
        let g = render_backward(
            &gpu,
            &splats,
            &out,
            &state,
            &gpu.upload(&w),
            &gpu.upload(&wa),
            &gpu.upload(&wa),
        )
        .unwrap();
        assert!(out.num_visible > 1000, "{} visible", out.num_visible);
        [
            gpu.read(&g.projected).unwrap(),
            gpu.read(&g.means).unwrap(),
            gpu.read(&g.log_scales).unwrap(),
            gpu.read(&g.opacity_logits).unwrap(),
            gpu.read(&g.sh).unwrap(),
        ]
    };
    let fixed = run(true);
    assert_eq!(
        fixed,
        run(true),
        "deterministic backward differs between runs"
    );
    let atomic = run(false);
    for (name, (a, b)) in ["projected", "means", "log_scales", "opacity", "sh"]
        .iter()
        .zip(atomic.iter().zip(&fixed))
    {
        assert_close(&format!("{name} (fixed-order vs atomic)"), b, a, 1e-4);
    }
}

#[test]
fn absgrad_is_the_sum_of_single_pixel_gradient_magnitudes() {
    // Reference by linearity: the loss is a sum over pixels, so the backward of a loss on one
    // pixel alone gives that pixel's contribution to the 2D-mean gradient; absgrad must equal
    // the sum over pixels of their magnitudes (per axis), in both backward modes.
    let gpu = gpu();
    let s = random_scene(91, 300, 1).rounded();
    let (w, h) = (20u32, 18u32);
    let cam = round_camera(test_camera(w, h));
    let splats = upload(&gpu, &s);
    let npix = (w * h) as usize;
    let (wr, wa) = output_weights(6, npix);
    for deterministic in [true, false] {
        let opts = RenderOptions {
            deterministic,
            absgrad: true,
            ..Default::default()
        };
        let (out, state) = render(&gpu, &splats, &cam, &opts).unwrap();
        let full = render_backward(
            &gpu,
            &splats,
            &out,
            &state,
            &gpu.upload(&wr),
            &gpu.upload(&wa),
            &gpu.upload(&wa),
        )
        .unwrap();
        let abs = gpu
            .read(full.means2d_abs.as_ref().expect("absgrad output"))
            .unwrap();
        let proj = gpu.read(&full.projected).unwrap();
        let mut expect = vec![0f64; s.len() * 2];
        for p in 0..npix {
            let mut r1 = vec![0f32; npix * 3];
            r1[p * 3..p * 3 + 3].copy_from_slice(&wr[p * 3..p * 3 + 3]);
            let mut a1 = vec![0f32; npix];
            a1[p] = wa[p];
            let g = render_backward(
                &gpu,
                &splats,
                &out,
                &state,
                &gpu.upload(&r1),
                &gpu.upload(&a1),
                &gpu.upload(&a1),
            )
            .unwrap();
            let v = gpu.read(&g.projected).unwrap();
            for i in 0..s.len() {
                expect[i * 2] += (v[i * 10] as f64).abs();
                expect[i * 2 + 1] += (v[i * 10 + 1] as f64).abs();
            }
        }
        let scale = expect.iter().fold(0f64, |m, v| m.max(*v));
        assert!(scale > 0.0);
        let mut strictly_larger = 0;
        for i in 0..s.len() {
            for k in 0..2 {
                let (got, want) = (abs[i * 2 + k] as f64, expect[i * 2 + k]);
                assert!(
                    (got - want).abs() <= 1e-4 * scale,
                    "gaussian {i} axis {k}: {got} vs {want} (deterministic {deterministic})"
                );
                // |sum| <= sum |.|
                assert!(got + 1e-4 * scale >= (proj[i * 10 + k] as f64).abs());
                if got > (proj[i * 10 + k] as f64).abs() * 1.01 + 1e-6 * scale {
                    strictly_larger += 1;
                }
            }
        }
        assert!(
            strictly_larger > 0,
            "absgrad never differs from |grad|: the test scene has no cancellation"
        );
    }
}

#[test]
fn half_sh_storage_renders_and_differentiates_like_f32_storage_of_the_same_values() {
    // The f32 storage path is checked against the float64 reference above; with the
    // higher-order coefficients rounded to half precision both storages hold the same values,
    // so images and every gradient must agree bit for bit (deterministic backward).
    let gpu = gpu();
    for (seed, degree) in [(51u64, 1u32), (52, 2), (53, 3)] {
        let mut s = random_scene(seed, 1201, degree).rounded();
        let k3 = s.k() * 3;
        for (j, x) in s.sh.iter_mut().enumerate() {
            if j % k3 >= 3 {
                *x = f16_value(f16_nearest(*x as f32)) as f64;
            }
        }
        let cam = round_camera(test_camera(67, 45));
        let opts = RenderOptions {
            background: [0.1, 0.5, 0.9],
            deterministic: true,
            ..Default::default()
        };
        let full = upload(&gpu, &s);
        let half = upload(&gpu, &s)
            .with_sh_precision(&gpu, ShPrecision::F16)
            .unwrap();
        assert_eq!(half.sh.precision(), ShPrecision::F16);
        assert!(half.sh.device_bytes() < full.sh.device_bytes());
        assert_eq!(
            half.read_sh(&gpu).unwrap(),
            Scene::f32(&s.sh),
            "half storage round trip"
        );
        let npix = 67 * 45;
        let (w, wa) = output_weights(seed, npix);
        let (w, wa, zero) = (
            gpu.upload(&w),
            gpu.upload(&wa),
            gpu.upload(&vec![0.0f32; npix]),
        );
        let mut results = vec![];
        for splats in [&full, &half] {
            let (out, state) = render(&gpu, splats, &cam, &opts).unwrap();
            let g = render_backward(&gpu, splats, &out, &state, &w, &wa, &zero).unwrap();
            results.push([
                gpu.read(&out.rgb).unwrap(),
                gpu.read(&g.means).unwrap(),
                gpu.read(&g.log_scales).unwrap(),
                gpu.read(&g.quats).unwrap(),
                gpu.read(&g.opacity_logits).unwrap(),
                gpu.read(&g.sh).unwrap(),
            ]);
        }
        for (i, what) in ["rgb", "means", "log_scales", "quats", "opacities", "sh"]
            .iter()
            .enumerate()
        {
            assert!(
                results[0][i].iter().any(|&v| v != 0.0),
                "degree {degree} {what}: all zero"
            );
            assert_eq!(
                results[0][i], results[1][i],
                "degree {degree}: {what} differs between storages"
            );
        }
    }
}

#[test]
fn lower_active_sh_degree_renders_like_a_scene_stored_at_that_degree() {
    // `RenderOptions::sh_degree` below the stored degree uses only the first coefficients of
    // each row: the image must equal the one of the same scene stored at the lower degree, in
    // both storages, bit for bit.
    let gpu = gpu();
    let s = random_scene(61, 1301, 3).rounded();
    let cam = round_camera(test_camera(67, 45));
    for active in [0u32, 1, 2] {
        let k = ((active + 1) * (active + 1)) as usize;
        let mut low = s.clone();
        low.sh_degree = active;
        low.sh =
            s.sh.chunks_exact(s.k() * 3)
                .flat_map(|row| row[..k * 3].to_vec())
                .collect();
        for precision in [ShPrecision::F32, ShPrecision::F16] {
            let image = |scene: &Scene, sh_degree: Option<u32>| {
                let opts = RenderOptions {
                    background: [0.1, 0.5, 0.9],
                    sh_degree,
                    ..Default::default()
                };
                let splats = scene.upload(&gpu, precision);
                let (out, _) = render(&gpu, &splats, &cam, &opts).unwrap();
                gpu.read(&out.rgb).unwrap()
            };
            let full = image(&s, None);
            let want = image(&low, None);
            let got = image(&s, Some(active));
            assert!(want.iter().any(|&v| v != want[0]), "flat image");
            assert_eq!(got, want, "active degree {active}, {precision} storage");
            assert_ne!(
                full, want,
                "degree {active}: the higher orders change nothing in this scene"
            );
        }
    }
}

#[test]
fn tiles_before_the_first_intersection_render_background() {
    // Gaussians only in the image's bottom-right corner: the tile ranges before the first
    // tile with intersections are written by the range kernel itself (no zero fill; buffers
    // are poisoned).
    let gpu = gpu();
    let mut s = random_scene(71, 400, 1);
    for i in 0..s.len() {
        let z = s.means[i * 3 + 2];
        s.means[i * 3] = (0.3 + 0.01 * (i % 7) as f64) * z;
        s.means[i * 3 + 1] = (0.25 + 0.01 * (i % 5) as f64) * z;
        s.log_scales[i * 3..i * 3 + 3].copy_from_slice(&[-3.0; 3]);
    }
    let s = s.rounded();
    let cam = round_camera(test_camera(67, 45));
    compare_forward(&gpu, &s, &cam, false, [0.1, 0.5, 0.9]);
    let (out, state) = render(&gpu, &upload(&gpu, &s), &cam, &RenderOptions::default()).unwrap();
    let ranges = state.tile_ranges(&gpu).unwrap();
    assert_eq!(ranges[0], [0, 0], "the first tile must be empty");
    assert!(
        ranges.iter().any(|r| r[1] > r[0]),
        "some tile must hold intersections"
    );
    // Contiguous, in order, covering every intersection.
    let mut at = 0;
    for (t, r) in ranges.iter().enumerate() {
        assert!(
            r[0] == at && r[1] >= r[0],
            "tile {t}: {r:?} after position {at}"
        );
        at = r[1];
    }
    assert_eq!(at as usize, out.num_intersections);
}

/// The forward rasterizer's two shared-memory layouts (4-vectors, CUDA's default; scalar arrays,
/// the default elsewhere), forced through [`RasterTuning::vec_shared`], against the CPU float64
/// reference and each other.
#[test]
fn both_shared_memory_layouts_render_the_reference_image() {
    let gpu = gpu();
    let cam = round_camera(test_camera(67, 45));
    let mut images = vec![];
    for vec in [true, false] {
        let tuning = RasterTuning {
            vec_shared: Some(vec),
            ..Default::default()
        };
        let mut paths = vec![];
        // Small and large Gaussians (with and without the row-reach test), SH degrees 0-3,
        // antialiased or not.
        for (seed, degree, aa, grow) in [
            (1u64, 0u32, false, 0.0),
            (4, 3, true, 0.0),
            (6, 1, false, -1.0),
            (7, 2, true, 1.5),
        ] {
            let mut s = random_scene(seed, 1500, degree);
            s.log_scales.iter_mut().for_each(|v| *v += grow);
            paths.push(compare_forward_tuned(
                &gpu,
                &s.rounded(),
                &cam,
                aa,
                [0.1, 0.5, 0.9],
                tuning,
            ));
        }
        assert!(
            paths.contains(&true) && paths.contains(&false),
            "row-skip paths taken: {paths:?}"
        );
        // Thousands of faint Gaussians on one tile: many batches and early termination.
        let s = one_tile_pile(11, 5000);
        let tile_cam = round_camera(test_camera(16, 16));
        compare_forward_tuned(&gpu, &s, &tile_cam, false, [0.0; 3], tuning);
        let splats = s.upload(&gpu, ShPrecision::F32);
        let opts = RenderOptions {
            tuning,
            ..Default::default()
        };
        let (out, _) = render(&gpu, &splats, &tile_cam, &opts).unwrap();
        images.push(gpu.read(&out.rgb).unwrap());
    }
    // Same arithmetic in the same order: the layouts agree to rounding.
    let scale = images[0].iter().fold(0f32, |m, v| m.max(v.abs()));
    assert!(scale > 0.0);
    for (a, b) in images[0].iter().zip(&images[1]) {
        assert!((a - b).abs() <= 1e-6 * scale, "layouts differ: {a} vs {b}");
    }
}
