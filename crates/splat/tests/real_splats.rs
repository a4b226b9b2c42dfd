//! The rasterizer on real captured splats (../shared/data/splats) against the
//! CPU float64 reference renderer.

mod common;

use common::{RefOpts, Scene};
use rust3r_gpu::{Gpu, GpuOptions};
use rust3r_splat::{Camera, GpuSplats, RenderOptions, render};
use rust3r_testdata::data;

fn to_scene(s: &rust3r_io::Splats) -> Scene {
    Scene {
        means: s.means.iter().flatten().map(|&v| v as f64).collect(),
        log_scales: s.log_scales.iter().flatten().map(|&v| v as f64).collect(),
        quats: s.rotations.iter().flatten().map(|&v| v as f64).collect(),
        opacity_logits: s.opacity_logits.iter().map(|&v| v as f64).collect(),
        sh: s.sh.iter().map(|&v| v as f64).collect(),
        sh_degree: s.sh_degree,
    }
}

fn check(file: &str, width: u32, height: u32) {
    let gpu = Gpu::new(&GpuOptions {
        poison: true,
        ..Default::default()
    })
    .expect("a GPU adapter is required");
    let splats = rust3r_io::load_splats(&data(&format!("splats/{file}"))).unwrap();
    let mut cam = Camera::default_for_points(&splats.means, width, height);
    for row in cam.world_to_camera.iter_mut() {
        for v in row.iter_mut() {
            *v = *v as f32 as f64;
        }
    }
    let k = &mut cam.intrinsics;
    (k.fx, k.fy, k.cx, k.cy) = (
        k.fx as f32 as f64,
        k.fy as f32 as f64,
        k.cx as f32 as f64,
        k.cy as f32 as f64,
    );
    let bg = [0.1, 0.2, 0.3];
    let (out, _) = render(
        &gpu,
        &GpuSplats::from_host(&gpu, &splats).unwrap(),
        &cam,
        &RenderOptions {
            background: bg.map(|v| v as f32),
            ..Default::default()
        },
    )
    .unwrap();
    let reference = common::render(
        &to_scene(&splats),
        &cam,
        &RefOpts {
            background: bg,
            ..Default::default()
        },
    );
    let rgb = gpu.read(&out.rgb).unwrap();
    let alpha = gpu.read(&out.alpha).unwrap();
    let (e_rgb, e_alpha) = (
        common::max_abs_err(&rgb, &reference.rgb),
        common::max_abs_err(&alpha, &reference.alpha),
    );
    eprintln!(
        "{file}: {} splats, {} visible, rgb err {e_rgb:.2e}, alpha err {e_alpha:.2e}",
        splats.len(),
        out.num_visible
    );
    let nan_gpu = rgb.iter().chain(&alpha).filter(|v| v.is_nan()).count();
    let bad: Vec<(usize, usize)> = alpha
        .iter()
        .enumerate()
        .filter(|(_, v)| v.is_nan())
        .map(|(i, _)| (i % width as usize, i / width as usize))
        .collect();
    if !bad.is_empty() {
        eprintln!("{file}: pixels whose alpha is NaN (x, y): {bad:?}");
    }
    let nan_ref = reference
        .rgb
        .iter()
        .chain(&reference.alpha)
        .filter(|v| v.is_nan())
        .count();
    assert!(
        e_rgb <= 1e-3 && e_alpha <= 1e-3,
        "{file}: rgb error {e_rgb}, alpha error {e_alpha} (NaN values: {nan_gpu} rendered, {nan_ref} in the reference)"
    );
    // A real picture, not an empty frame: the object covers a good part of it.
    let covered = reference.alpha.iter().filter(|&&a| a > 0.5).count();
    assert!(
        covered * 20 > reference.alpha.len(),
        "{file}: only {covered} pixels covered"
    );
}

#[test]
fn plant_splat() {
    check("plant.splat", 64, 48);
}

#[test]
fn biker_spz() {
    check("biker.spz", 61, 47);
}

/// A tile of this view holds more than 256 batches of intersections: on lavapipe one long
/// dispatch lost the last 8 pixels of it (see `render::policy::batches_per_dispatch`).
#[test]
fn guitar_compressed_ply() {
    check("guitar.compressed.ply", 48, 64);
}

#[test]
fn tarot_splat() {
    check("academic_tarot_cards.splat", 64, 64);
}
