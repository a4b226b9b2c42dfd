//! `--preset fast` on real data (lego at 100x100, every 8th view held out) above the held-out
//! PSNR floor measured for it, and its schedule (coarse-to-fine images, learning-rate decay
//! ending at the last step, densification over the first part) scaled to the run's length.

use std::path::Path;

use rust3r_gpu::{Gpu, GpuOptions};
use rust3r_pipelines::train::{TrainEvent, TrainSession, train_config};
use rust3r_pipelines::{FastSchedule, InitKind, TrainOptions, TrainPreset};
use rust3r_splat::train::Strategy;

const STEPS: u64 = 400;

fn options(out: &Path, preset: TrainPreset) -> TrainOptions {
    TrainOptions {
        out: out.to_path_buf(),
        steps: STEPS,
        preset,
        downscale: 8,
        eval_every: 8,
        eval_at: Vec::new(),
        checkpoint_every: 0,
        sh_degree: 1,
        init: InitKind::Random,
        init_count: 1000,
        ..TrainOptions::default()
    }
}

/// (held-out PSNR, Gaussians at the end, info lines).
fn train(gpu: &Gpu, preset: TrainPreset) -> (f64, usize, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    let mut lines = Vec::new();
    let mut on_event = |e: TrainEvent<'_>| {
        if let TrainEvent::Info(s) = e {
            lines.push(s);
        }
    };
    let lego = rust3r_testdata::data("lego");
    let mut session =
        TrainSession::open(&lego, options(dir.path(), preset), gpu, &mut on_event).unwrap();
    let summary = session.run(&mut on_event).unwrap();
    let eval = summary.last_eval.expect("held-out views were evaluated");
    assert_eq!(eval.step, STEPS);
    (eval.psnr, summary.num_splats, lines)
}

/// One fast run on lavapipe (about 15 min of a busy 2-core machine). Measured there with these
/// settings: 19.28 dB held out (the same schedule without multi-view consistent densification:
/// 19.36 dB); at this size and length ADC mostly prunes (1000 initial Gaussians, 590 at the end),
/// so the test checks the schedule's end-to-end run and its quality floor, not the Gaussian count.
#[test]
fn fast_preset_trains_lego_above_its_measured_floor() {
    let gpu = Gpu::new(&GpuOptions::default()).expect("a GPU adapter is required");
    // Densify over most of this short run, so that refinements happen at steps 100-300.
    let schedule = FastSchedule {
        refine_until: 0.8,
        ..FastSchedule::default()
    };
    let (psnr, n, lines) = train(&gpu, TrainPreset::Fast(schedule));
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("coarse-to-fine: images downscaled 4.00x")),
        "{lines:?}"
    );
    eprintln!("fast: {psnr:.3} dB held out, {n} Gaussians");
    assert!(psnr > 18.5, "held-out PSNR {psnr} dB");
    assert!(n > 0 && n < 1000, "{n} Gaussians");
}

#[test]
fn fast_schedule_scales_with_the_run() {
    let dir = Path::new("unused");
    for steps in [600u64, 8000, 12_000] {
        let opts = TrainOptions {
            steps,
            ..options(dir, TrainPreset::fast())
        };
        let cfg = train_config(&opts, 2.0);
        // The means learning rate reaches its final ratio at the last step.
        let end = cfg.lr.means_at(steps, 2.0);
        let start = cfg.lr.means_at(0, 2.0);
        assert!(
            ((end / start) as f64 - cfg.lr.means_final_ratio as f64).abs() < 1e-6,
            "{steps}: {start} -> {end}"
        );
        let Strategy::Adc(adc) = &cfg.strategy else {
            panic!("ADC expected")
        };
        assert_eq!(adc.refine_stop, steps / 2);
        assert!(adc.refine_start < adc.refine_stop && adc.consistency.is_some());
        assert_eq!(cfg.sh_degree_interval, (steps / 30).min(1000));
        let r = opts.preset.resolution(steps).unwrap();
        assert_eq!(r.factor_at(0), 4.0);
        assert_eq!(r.factor_at(steps / 2 - 1), 2f32.sqrt());
        assert_eq!(r.factor_at(steps / 2), 1.0);
    }
    // The default schedule is gsplat's whatever the length.
    let opts = options(dir, TrainPreset::Default);
    let cfg = train_config(&opts, 1.0);
    assert_eq!(cfg.lr.decay_steps, 30_000);
    assert_eq!(TrainPreset::Default.resolution(STEPS), None);
    assert_eq!(TrainPreset::fast().default_steps(), 12_000);
}
