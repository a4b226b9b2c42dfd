//! The forward rasterizer's two shared-memory layouts (4-vectors, CUDA's default; scalar
//! arrays, the default elsewhere) against the CPU float64 reference and each other. A binary of
//! its own with one test: it picks the layout through `RUST3R_VEC_SHARED`, which each pass reads.

mod common;

use common::{compare_forward, one_tile_pile, random_scene, round_camera, test_camera};
use rust3r_gpu::{Gpu, GpuOptions};
use rust3r_splat::{RenderOptions, ShPrecision, render};

fn set_layout(vec: bool) {
    // SAFETY: the only test of this binary; nothing else reads the environment meanwhile.
    unsafe { std::env::set_var("RUST3R_VEC_SHARED", if vec { "1" } else { "0" }) };
}

#[test]
fn both_shared_memory_layouts_render_the_reference_image() {
    let gpu = Gpu::new(&GpuOptions {
        poison: true,
        ..Default::default()
    })
    .expect("a GPU adapter is required (CI installs Mesa's lavapipe)");
    let cam = round_camera(test_camera(67, 45));
    let mut images = vec![];
    for vec in [true, false] {
        set_layout(vec);
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
        // Thousands of faint Gaussians on one tile: many batches and early termination.
        let s = one_tile_pile(11, 5000);
        let tile_cam = round_camera(test_camera(16, 16));
        compare_forward(&gpu, &s, &tile_cam, false, [0.0; 3]);
        let splats = s.upload(&gpu, ShPrecision::F32);
        let (out, _) = render(&gpu, &splats, &tile_cam, &RenderOptions::default()).unwrap();
        images.push(gpu.read(&out.rgb).unwrap());
    }
    // Same arithmetic in the same order: the layouts agree to rounding.
    let scale = images[0].iter().fold(0f32, |m, v| m.max(v.abs()));
    assert!(scale > 0.0);
    for (a, b) in images[0].iter().zip(&images[1]) {
        assert!((a - b).abs() <= 1e-6 * scale, "layouts differ: {a} vs {b}");
    }
}
