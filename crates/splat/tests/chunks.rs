//! Scenes held in several buffers ("chunks"): wgpu binds at most a fixed size at once (2 GiB on
//! desktop drivers, 128 MiB on lavapipe), so past about 11M Gaussians at SH degree 3 the
//! parameters must be split. Chunked rendering must give the image and gradients of the same scene
//! in one buffer, and really render scenes that one buffer cannot hold.

mod common;

use common::{RefOpts, Scene, random_scene, test_camera};
use rand::{Rng, SeedableRng, rngs::StdRng};
use rust3r_gpu::{Gpu, GpuOptions};
use rust3r_splat::{
    Camera, GpuSplats, RenderOptions, render, render_backward_chunks, render_backward_with,
    render_chunks, rows_per_chunk,
};

fn gpu() -> Gpu {
    Gpu::new(&GpuOptions {
        poison: true,
        ..Default::default()
    })
    .expect("a GPU adapter is required (CI installs Mesa's lavapipe)")
}

fn to_host(s: &Scene) -> rust3r_io::Splats {
    let f = |v: &[f64]| -> Vec<f32> { v.iter().map(|&x| x as f32).collect() };
    let (means, scales, quats) = (f(&s.means), f(&s.log_scales), f(&s.quats));
    rust3r_io::Splats {
        means: means.chunks(3).map(|c| [c[0], c[1], c[2]]).collect(),
        log_scales: scales.chunks(3).map(|c| [c[0], c[1], c[2]]).collect(),
        rotations: quats.chunks(4).map(|c| [c[0], c[1], c[2], c[3]]).collect(),
        opacity_logits: f(&s.opacity_logits),
        sh_degree: s.sh_degree,
        sh: f(&s.sh),
    }
}

fn weights(npix: usize, seed: u64) -> (Vec<f32>, Vec<f32>) {
    let mut rng = StdRng::seed_from_u64(seed);
    let w = (0..npix * 3).map(|_| rng.random_range(-1.0..1.0)).collect();
    let wa = (0..npix).map(|_| rng.random_range(-1.0..1.0)).collect();
    (w, wa)
}

/// Image, radii, projected gradients, pose gradient and the parameter gradients concatenated
/// over chunks (means, log-scales, quats, opacity, SH).
type Run = (
    Vec<f32>,
    Vec<f32>,
    Vec<f32>,
    Vec<u32>,
    Vec<f32>,
    [[f32; 4]; 3],
    [Vec<f32>; 5],
);

fn run_chunks(gpu: &Gpu, chunks: &[GpuSplats], cam: &Camera, w: &(Vec<f32>, Vec<f32>)) -> Run {
    let opts = RenderOptions {
        background: [0.2, 0.3, 0.4],
        // Fixed-order gradient sums: the comparisons below are exact.
        deterministic: true,
        ..Default::default()
    };
    let (out, state) = render_chunks(gpu, chunks, cam, &opts).unwrap();
    let (wr, wa) = (gpu.upload(&w.0), gpu.upload(&w.1));
    let g = render_backward_chunks(gpu, chunks, &out, &state, &wr, &wa, &wa, true).unwrap();
    assert_eq!(g.params.len(), chunks.len());
    let mut params: [Vec<f32>; 5] = Default::default();
    for p in &g.params {
        for (acc, b) in
            params
                .iter_mut()
                .zip([&p.means, &p.log_scales, &p.quats, &p.opacity_logits, &p.sh])
        {
            acc.extend(gpu.read(b).unwrap());
        }
    }
    (
        gpu.read(&out.rgb).unwrap(),
        gpu.read(&out.alpha).unwrap(),
        gpu.read(&out.depth).unwrap(),
        gpu.read(&out.radii).unwrap(),
        gpu.read(&g.projected).unwrap(),
        g.world_to_camera,
        params,
    )
}

fn assert_pose_close(a: &[[f32; 4]; 3], b: &[[f32; 4]; 3]) {
    let scale = b.iter().flatten().fold(0f32, |m, v| m.max(v.abs()));
    assert!(scale > 0.0, "zero pose gradient");
    for (x, y) in a.iter().flatten().zip(b.iter().flatten()) {
        // Summed per chunk, then over chunks: only the order of the additions differs.
        assert!(
            (x - y).abs() <= 1e-5 * scale,
            "pose gradient {x} vs {y} (max {scale})"
        );
    }
}

#[test]
fn chunked_scene_renders_and_differentiates_like_one_buffer() {
    let gpu = gpu();
    let scene = random_scene(91, 3000, 3);
    let host = to_host(&scene);
    let cam = test_camera(64, 48);
    let w = weights(64 * 48, 3);
    let one = GpuSplats::from_host(&gpu, &host).unwrap();
    let whole = run_chunks(&gpu, std::slice::from_ref(&one), &cam, &w);
    // Chunks of 777 rows: three full ones and a short last one.
    let chunks = GpuSplats::chunks_from_host(&gpu, &host, Some(777)).unwrap();
    assert_eq!(
        chunks.iter().map(GpuSplats::len).collect::<Vec<_>>(),
        [777, 777, 777, 669]
    );
    let split = run_chunks(&gpu, &chunks, &cam, &w);
    assert!(whole.1.iter().any(|&a| a > 0.5), "the image is not empty");
    assert_eq!(split.0, whole.0, "rgb");
    assert_eq!(split.1, whole.1, "alpha");
    assert_eq!(split.2, whole.2, "depth");
    assert_eq!(split.3, whole.3, "radii");
    assert_eq!(split.4, whole.4, "projected gradients");
    for (name, (a, b)) in ["means", "log_scales", "quats", "opacity", "sh"]
        .iter()
        .zip(split.6.iter().zip(&whole.6))
    {
        assert!(b.iter().any(|&v| v != 0.0), "{name}: all-zero gradient");
        assert_eq!(a, b, "{name} gradient");
    }
    assert_pose_close(&split.5, &whole.5);

    // The one-buffer entry points agree with a one-chunk call of the chunked ones.
    let opts = RenderOptions {
        background: [0.2, 0.3, 0.4],
        deterministic: true,
        ..Default::default()
    };
    let (out, state) = render(&gpu, &one, &cam, &opts).unwrap();
    let g = render_backward_with(
        &gpu,
        &one,
        &out,
        &state,
        &gpu.upload(&w.0),
        &gpu.upload(&w.1),
        &gpu.upload(&w.1),
        true,
    )
    .unwrap();
    assert_eq!(gpu.read(&g.sh).unwrap(), whole.6[4]);
    assert_eq!(g.world_to_camera, whole.5);

    // A backward pass over other chunks than the frame was rendered with is an error.
    let (out, state) = render_chunks(&gpu, &chunks, &cam, &opts).unwrap();
    let (wr, wa) = (gpu.upload(&w.0), gpu.upload(&w.1));
    let err =
        render_backward_chunks(&gpu, &chunks[..2], &out, &state, &wr, &wa, &wa, false).unwrap_err();
    assert!(
        err.to_string().contains("1554 Gaussians") && err.to_string().contains("3000"),
        "{err}"
    );
    // Chunks of different SH degrees are refused.
    let low = GpuSplats::chunks_from_host(&gpu, &to_host(&random_scene(5, 10, 1)), None).unwrap();
    let mixed = [chunks[0].clone(), low[0].clone()];
    let err = render_chunks(&gpu, &mixed, &cam, &opts).unwrap_err();
    assert!(err.to_string().contains("SH degrees 3 and 1"), "{err}");
}

#[test]
fn scene_larger_than_one_buffer_renders_from_chunks() {
    // More Gaussians at SH degree 3 than one buffer of this adapter holds (on lavapipe's 128 MiB:
    // about 700k). All but 300 sit behind the camera; the 300 visible ones are spread over the
    // later chunks, so the image and gradients exercise reads past the first buffer.
    let gpu = gpu();
    let rows = rows_per_chunk(&gpu, 3);
    let n = rows + rows / 2 + 1000;
    let visible = random_scene(17, 300, 3);
    let at = |i: usize| rows / 3 + i * (n - rows / 3) / visible.len();
    let mut big = to_host(&random_scene(18, 1, 3));
    big.means = vec![[0.0, 0.0, -50.0]; n];
    big.log_scales = vec![big.log_scales[0]; n];
    big.rotations = vec![big.rotations[0]; n];
    big.opacity_logits = vec![big.opacity_logits[0]; n];
    big.sh = big.sh.repeat(n);
    let small = to_host(&visible);
    for i in 0..visible.len() {
        let r = at(i);
        big.means[r] = small.means[i];
        big.log_scales[r] = small.log_scales[i];
        big.rotations[r] = small.rotations[i];
        big.opacity_logits[r] = small.opacity_logits[i];
        big.sh[r * 48..(r + 1) * 48].copy_from_slice(&small.sh[i * 48..(i + 1) * 48]);
    }
    assert!(
        at(visible.len() - 1) >= rows,
        "visible Gaussians must reach the second chunk"
    );

    // One buffer cannot hold it: a clear error.
    let err = GpuSplats::from_host(&gpu, &big).unwrap_err().to_string();
    assert!(
        err.contains("SH coefficients") && err.contains(&gpu.max_buffer_bytes().to_string()),
        "{err}"
    );
    let chunks = GpuSplats::chunks_from_host(&gpu, &big, None).unwrap();
    assert_eq!(chunks.len(), 2);
    assert_eq!(chunks[0].len(), rows);

    let cam = test_camera(64, 48);
    let w = weights(64 * 48, 4);
    let got = run_chunks(&gpu, &chunks, &cam, &w);
    let want = run_chunks(
        &gpu,
        &[GpuSplats::from_host(&gpu, &small).unwrap()],
        &cam,
        &w,
    );

    // Image: the CPU float64 reference of the visible Gaussians, and the small scene's render.
    let reference = common::render(
        &visible,
        &cam,
        &RefOpts {
            background: [0.2, 0.3, 0.4],
            ..Default::default()
        },
    );
    let err_rgb = got
        .0
        .iter()
        .zip(&reference.rgb)
        .map(|(&a, &b)| (a as f64 - b).abs())
        .fold(0.0, common::nan_max);
    assert!(
        err_rgb <= 1e-3,
        "rgb max abs error {err_rgb} against the reference"
    );
    assert!(
        reference.alpha.iter().any(|&a| a > 0.5),
        "the image is not empty"
    );
    assert_eq!(got.0, want.0, "rgb");
    assert_eq!(got.1, want.1, "alpha");

    // Gradients: the visible rows carry the small scene's, every other row is zero.
    let widths = [3usize, 3, 4, 1, 48];
    for (p, name) in ["means", "log_scales", "quats", "opacity", "sh"]
        .iter()
        .enumerate()
    {
        let (g, s, d) = (&got.6[p], &want.6[p], widths[p]);
        assert_eq!(g.len(), n * d, "{name}");
        let mut expect = vec![0.0f32; n * d];
        for i in 0..visible.len() {
            expect[at(i) * d..(at(i) + 1) * d].copy_from_slice(&s[i * d..(i + 1) * d]);
        }
        assert!(s.iter().any(|&v| v != 0.0), "{name}: all-zero gradient");
        assert_eq!(*g, expect, "{name} gradient");
    }
    assert_pose_close(&got.5, &want.5);
}
