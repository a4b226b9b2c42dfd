//! Device memory of the training state: what `Gpu::memory_in_use` measures around a trainer's
//! allocation must match `Trainer::memory_ledger`. Alone in its test binary because the
//! device's memory pools are shared by every test of a process: tests running beside it would
//! move the measurement.

use rust3r_gpu::{Gpu, GpuOptions};
use rust3r_splat::ShPrecision;
use rust3r_splat::train::adam::{self, MomentPrecision};
use rust3r_splat::train::{TrainConfig, Trainer, init};

fn gpu() -> Gpu {
    Gpu::new(&GpuOptions {
        poison: true,
        ..Default::default()
    })
    .expect("a GPU adapter is required")
}

/// Bytes that stay allocated while training `n` Gaussians at SH degree 3.
fn measured_persistent(
    gpu: &rust3r_gpu::Gpu,
    n: usize,
    moments: MomentPrecision,
    sh: ShPrecision,
) -> u64 {
    gpu.sync().unwrap();
    gpu.memory_cleanup();
    let before = gpu.memory_in_use();
    let init = init::InitSplats {
        means: (0..n * 3).map(|i| (i % 97) as f32 * 0.01).collect(),
        log_scales: vec![-3.0; n * 3],
        quats: (0..n).flat_map(|_| [1.0, 0.0, 0.0, 0.0]).collect(),
        opacity_logits: vec![0.0; n],
        sh: vec![0.1; n * 48],
        sh_degree: 3,
    };
    let cfg = TrainConfig {
        adam: adam::AdamConfig {
            moments,
            ..Default::default()
        },
        sh_precision: sh,
        ..Default::default()
    };
    let t = Trainer::new(gpu, cfg, &init).unwrap();
    assert!(
        t.moments()[..4]
            .iter()
            .all(|m| m.precision() == moments || moments == MomentPrecision::Sh8)
    );
    assert_eq!(t.moments()[4].precision(), moments);
    assert_eq!(t.splats.sh.precision(), sh);
    gpu.sync().unwrap();
    let used = gpu.memory_in_use() - before;
    drop(t);
    gpu.sync().unwrap();
    gpu.memory_cleanup();
    used
}

#[test]
fn measured_trainer_memory_matches_the_ledger() {
    let gpu = gpu();
    let (n1, n2) = (20_000usize, 120_000usize);
    let settings = [
        (MomentPrecision::F32, ShPrecision::F32),
        (MomentPrecision::Bf16, ShPrecision::F32),
        (MomentPrecision::Bf16, ShPrecision::F16),
        (MomentPrecision::Sh8, ShPrecision::F16),
    ];
    for (moments, sh) in settings {
        let ledger = Trainer::memory_ledger(3, moments, sh);
        let (a, b) = (
            measured_persistent(&gpu, n1, moments, sh),
            measured_persistent(&gpu, n2, moments, sh),
        );
        // The difference of two sizes cancels what does not scale with the count (loss kernels).
        let per = (b - a) as f64 / (n2 - n1) as f64;
        eprintln!(
            "{moments} moments, {sh} SH: {per:.2} B / Gaussian measured ({a} B for {n1}, {b} B for {n2}), ledger {}",
            ledger.persistent()
        );
        assert!(
            (per - ledger.persistent() as f64).abs() < 0.001 * ledger.persistent() as f64,
            "{moments} moments, {sh} SH: measured {per:.1} B / Gaussian, ledger {}",
            ledger.persistent()
        );
    }
    // 59 values: 236 B of f32 parameters (146 with half higher-order SH: 45 values x 2 B),
    // moments 8 or 4 B per value, 12 B of ADC statistics (gradient sum, view count, multi-view
    // error score).
    let ledger = |m, s| Trainer::memory_ledger(3, m, s).persistent();
    assert_eq!(ledger(MomentPrecision::F32, ShPrecision::F32), 720);
    assert_eq!(ledger(MomentPrecision::Bf16, ShPrecision::F32), 484);
    assert_eq!(ledger(MomentPrecision::Bf16, ShPrecision::F16), 394);
    // 8-bit moments for the 45 higher-order SH values: 236 - 90
    assert_eq!(ledger(MomentPrecision::Sh8, ShPrecision::F16), 304);
    assert_eq!(
        Trainer::bytes_per_splat(3, MomentPrecision::F32, ShPrecision::F32),
        1600
    );
    assert_eq!(
        Trainer::bytes_per_splat(3, MomentPrecision::Bf16, ShPrecision::F32),
        1364
    );
    // With half SH no SH gradient is stored: 192 B less per step.
    assert_eq!(
        Trainer::bytes_per_splat(3, MomentPrecision::Bf16, ShPrecision::F16),
        1082
    );
    assert_eq!(
        Trainer::bytes_per_splat(3, MomentPrecision::Sh8, ShPrecision::F16),
        992
    );
}
