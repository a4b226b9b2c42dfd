//! Camera pose refinement through the rasterizer's pose gradient: on a synthetic scene with
//! frozen Gaussians, a camera perturbed by centimetres and degrees is pulled back onto the pose
//! its target image was rendered from (the session's pose maths: `pose::tangent_gradient`,
//! `pose::Adam`, `pose::apply_left`).

use rust3r_gpu::{Gpu, GpuOptions};
use rust3r_pipelines::pose;
use rust3r_splat::Camera;
use rust3r_splat::train::{
    AdcConfig, LearningRates, StepExtras, StepTarget, Strategy, TrainConfig, Trainer, init,
};

#[test]
fn pose_refinement_recovers_a_perturbed_camera() {
    let gpu = Gpu::new(&GpuOptions::default()).expect("a GPU adapter is required");
    // 600 Gaussians in a 2 m box 3 m in front of the camera.
    let mut splats = init::random_box(600, 1.0, 0.8, 1.0, 5, 0);
    for p in splats.means.chunks_exact_mut(3) {
        p[2] += 3.0;
    }
    let frozen = LearningRates {
        means: 0.0,
        scales: 0.0,
        quats: 0.0,
        opacities: 0.0,
        sh_dc: 0.0,
        sh_rest: 0.0,
        ..LearningRates::default()
    };
    let cfg = TrainConfig {
        sh_degree: 0,
        background: [0.0; 3],
        lr: frozen,
        strategy: Strategy::Adc(AdcConfig {
            refine_start: u64::MAX,
            refine_stop: 0,
            reset_every: 0,
            ..AdcConfig::default()
        }),
        ..TrainConfig::default()
    };
    let mut trainer = Trainer::new(&gpu, cfg, &splats).unwrap();
    let truth = [
        [1.0, 0.0, 0.0, 0.0],
        [0.0, 1.0, 0.0, 0.0],
        [0.0, 0.0, 1.0, 0.0],
        [0.0, 0.0, 0.0, 1.0],
    ];
    let cam = |w2c: [[f64; 4]; 4]| Camera {
        intrinsics: rust3r_geometry::PinholeCamera::new(60.0, 60.0, 40.0, 30.0, 80, 60),
        world_to_camera: w2c,
    };
    let target = gpu.upload(&trainer.render_rgb(&cam(truth)).unwrap());
    let mut w2c = pose::apply_left(&truth, &[0.04, -0.03, 0.05, 0.02, -0.025, 0.015]);
    let (a0, d0) = pose::pose_error(&w2c, &truth);
    let mut adam = pose::Adam::<6>::default();
    let steps = 200;
    for k in 0..steps {
        let lr = 3e-3 * 0.98f64.powi(k);
        let (_, g) = trainer
            .step_extras(
                &cam(w2c),
                &StepTarget::rgb(&target),
                &StepExtras {
                    pose_grad: true,
                    ..Default::default()
                },
            )
            .unwrap();
        let g = g.world_to_camera.expect("pose gradient asked for");
        let step = adam.step(&pose::tangent_gradient(&w2c, &g), &[lr; 6]);
        w2c = pose::apply_left(&w2c, &step);
    }
    let (a1, d1) = pose::pose_error(&w2c, &truth);
    println!(
        "pose error: {:.3} deg / {:.2} cm before, {:.4} deg / {:.3} cm after {steps} steps",
        a0.to_degrees(),
        d0 * 100.0,
        a1.to_degrees(),
        d1 * 100.0
    );
    assert!(
        a0.to_degrees() > 1.5 && d0 > 0.05,
        "the perturbation is large"
    );
    // NaN fails these comparisons.
    assert!(
        a1.to_degrees() < 0.01 && d1 < 2e-4,
        "recovered to {:.4} deg, {:.4} m",
        a1.to_degrees(),
        d1
    );
}
