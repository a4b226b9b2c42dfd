//! The Burn autodiff extension: forward equals the host API and gradients
//! through `Tensor::backward` equal the (finite-difference checked) host backward.

mod common;

use burn::tensor::{Device, DeviceKind, Tensor, TensorData};
use common::{Scene, random_scene, test_camera};
use rand::{Rng, SeedableRng, rngs::StdRng};
use rust3r_gpu::Gpu;
use rust3r_splat::autodiff::{RasterSettings, rasterize};
use rust3r_splat::{RenderOptions, render, render_backward};

fn close(name: &str, a: &[f32], b: &[f32]) {
    assert_eq!(a.len(), b.len(), "{name}: lengths");
    let scale = b.iter().fold(1e-6f32, |m, v| m.max(v.abs()));
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(
            (x - y).abs() <= 1e-4 * scale,
            "{name}[{i}]: {x} vs {y} (scale {scale})"
        );
    }
}

#[test]
fn burn_autodiff_matches_host_backward() {
    let s = random_scene(31, 40, 2);
    let n = s.len();
    let cam = test_camera(40, 30);
    let (w, h) = (cam.width as usize, cam.height as usize);
    let bg = [0.2f32, 0.3, 0.4];
    let settings = RasterSettings {
        intrinsics: cam.intrinsics,
        sh_degree: 2,
        antialiased: true,
        background: bg,
    };
    let mut rng = StdRng::seed_from_u64(5);
    let weights: Vec<f32> = (0..w * h * 5)
        .map(|_| rng.random_range(-1.0..1.0))
        .collect();

    // Burn side.
    let device = Device::wgpu(DeviceKind::DefaultDevice).autodiff();
    let t2 = |v: &[f64], cols: usize| {
        Tensor::<2>::from_data(
            TensorData::new(Scene::f32(v), [v.len() / cols, cols]),
            &device,
        )
        .require_grad()
    };
    let means = t2(&s.means, 3);
    let scales = t2(&s.log_scales, 3);
    let quats = t2(&s.quats, 4);
    let opac = Tensor::<1>::from_data(TensorData::new(Scene::f32(&s.opacity_logits), [n]), &device)
        .require_grad();
    let sh = Tensor::<3>::from_data(TensorData::new(Scene::f32(&s.sh), [n, 9, 3]), &device)
        .require_grad();
    let pose: Vec<f32> = cam.world_to_camera[..3]
        .iter()
        .flatten()
        .map(|&v| v as f32)
        .collect();
    let pose = Tensor::<2>::from_data(TensorData::new(pose, [3, 4]), &device).require_grad();
    let image = rasterize(
        means.clone(),
        scales.clone(),
        quats.clone(),
        opac.clone(),
        sh.clone(),
        pose.clone(),
        &settings,
    );
    assert_eq!(image.dims(), [h, w, 5]);
    let wt = Tensor::<3>::from_data(TensorData::new(weights.clone(), [h, w, 5]), &device);
    let loss = (image.clone() * wt).sum();
    let grads = loss.backward();
    let grad = |t: Tensor<2>| {
        t.grad(&grads)
            .expect("gradient")
            .into_data()
            .try_to_vec::<f32>()
            .unwrap()
    };
    let burn_image = image.into_data().try_to_vec::<f32>().unwrap();

    // Host side.
    let gpu = Gpu::default_device().unwrap();
    let splats = s.upload(&gpu, rust3r_splat::ShPrecision::F32);
    let opts = RenderOptions {
        background: bg,
        antialiased: true,
        ..Default::default()
    };
    let (out, state) = render(&gpu, &splats, &cam, &opts).unwrap();
    let (rgb, alpha, depth) = (
        gpu.read(&out.rgb).unwrap(),
        gpu.read(&out.alpha).unwrap(),
        gpu.read(&out.depth).unwrap(),
    );
    let packed: Vec<f32> = (0..w * h)
        .flat_map(|p| {
            [
                rgb[p * 3],
                rgb[p * 3 + 1],
                rgb[p * 3 + 2],
                alpha[p],
                depth[p],
            ]
        })
        .collect();
    close("image", &burn_image, &packed);
    let split = |k: usize| -> Vec<f32> { (0..w * h).map(|p| weights[p * 5 + k]).collect() };
    let v_rgb: Vec<f32> = (0..w * h)
        .flat_map(|p| [weights[p * 5], weights[p * 5 + 1], weights[p * 5 + 2]])
        .collect();
    let g = render_backward(
        &gpu,
        &splats,
        &out,
        &state,
        &gpu.upload(&v_rgb),
        &gpu.upload(&split(3)),
        &gpu.upload(&split(4)),
    )
    .unwrap();
    close("means", &grad(means), &gpu.read(&g.means).unwrap());
    close(
        "log_scales",
        &grad(scales),
        &gpu.read(&g.log_scales).unwrap(),
    );
    close("quats", &grad(quats), &gpu.read(&g.quats).unwrap());
    close(
        "opacity",
        &opac
            .grad(&grads)
            .unwrap()
            .into_data()
            .try_to_vec::<f32>()
            .unwrap(),
        &gpu.read(&g.opacity_logits).unwrap(),
    );
    close(
        "sh",
        &sh.grad(&grads)
            .unwrap()
            .into_data()
            .try_to_vec::<f32>()
            .unwrap(),
        &gpu.read(&g.sh).unwrap(),
    );
    let host_pose: Vec<f32> = g.world_to_camera.iter().flatten().copied().collect();
    close("world_to_camera", &grad(pose), &host_pose);
    // Gradients are not all zero.
    assert!(host_pose.iter().any(|v| v.abs() > 1e-3));
}
