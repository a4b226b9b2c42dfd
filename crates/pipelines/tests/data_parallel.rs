//! Data-parallel training through the session (docs/multi-gpu.md), on lavapipe with the
//! in-process collective standing in for NCCL: two ranks on a batch of two lego views per step
//! give the splats of one session stepping on the same batches, and only rank 0 writes; a rank
//! that cannot start or fails mid-run stops the run with its error (no rank left waiting).

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use rust3r_gpu::collective::{Collective, InProcessCollective};
use rust3r_gpu::{Gpu, GpuBuffer, GpuError, GpuOptions};
use rust3r_pipelines::{
    InitKind, PipelineError, RankFactory, TrainOptions, TrainSession, train_data_parallel,
};

const STEPS: u64 = 6;

fn options(out: &Path) -> TrainOptions {
    TrainOptions {
        out: out.to_path_buf(),
        steps: STEPS,
        downscale: 8,
        eval_every: 0,
        eval_at: Vec::new(),
        checkpoint_every: 0,
        sh_degree: 1,
        init: InitKind::Random,
        init_count: 500,
        deterministic: true,
        batch: 2,
        ..TrainOptions::default()
    }
}

/// Every rank on the one lavapipe device, summing through host memory.
struct InProcessRanks {
    gpu: Gpu,
    group: Mutex<Vec<Option<InProcessCollective>>>,
    /// This rank cannot open its device.
    broken: Option<usize>,
    /// Rank 1's collective fails at its Nth all-reduce.
    fail_after: Option<usize>,
}

impl InProcessRanks {
    fn new(gpu: &Gpu, broken: Option<usize>, fail_after: Option<usize>) -> Self {
        Self {
            gpu: gpu.clone(),
            group: Mutex::new(
                InProcessCollective::group(2)
                    .into_iter()
                    .map(Some)
                    .collect(),
            ),
            broken,
            fail_after,
        }
    }
}

impl RankFactory for InProcessRanks {
    fn open(&self, rank: usize) -> Result<Gpu, PipelineError> {
        if self.broken == Some(rank) {
            return Err(PipelineError::Invalid(format!("device {rank} is broken")));
        }
        Ok(self.gpu.clone())
    }

    fn join(&self, rank: usize, _gpu: &Gpu) -> Result<Arc<dyn Collective>, PipelineError> {
        let c = self.group.lock().expect("lock")[rank]
            .take()
            .expect("each rank joins once");
        Ok(match self.fail_after {
            Some(n) if rank == 1 => Arc::new(Flaky {
                inner: c,
                left: AtomicUsize::new(n),
            }),
            _ => Arc::new(c),
        })
    }
}

/// A collective that fails at its Nth all-reduce (a rank dying mid-run).
struct Flaky {
    inner: InProcessCollective,
    left: AtomicUsize,
}

impl Collective for Flaky {
    fn rank(&self) -> usize {
        self.inner.rank()
    }
    fn world_size(&self) -> usize {
        self.inner.world_size()
    }
    fn all_reduce_sum(&self, gpu: &Gpu, buf: GpuBuffer<f32>) -> Result<GpuBuffer<f32>, GpuError> {
        if self.left.fetch_sub(1, Ordering::SeqCst) == 1 {
            return Err(GpuError::Device("injected failure".into()));
        }
        self.inner.all_reduce_sum(gpu, buf)
    }
    fn broadcast(
        &self,
        gpu: &Gpu,
        buf: GpuBuffer<f32>,
        root: usize,
    ) -> Result<GpuBuffer<f32>, GpuError> {
        self.inner.broadcast(gpu, buf, root)
    }
    fn abort(&self) {
        self.inner.abort()
    }
}

fn flat(s: &rust3r_io::Splats) -> Vec<f32> {
    let mut v = s.means.concat();
    v.extend(s.log_scales.concat());
    v.extend(s.rotations.concat());
    v.extend(&s.opacity_logits);
    v.extend(&s.sh);
    v
}

#[test]
fn two_ranks_train_lego_like_one_session_with_the_same_batch() {
    let gpu = Gpu::new(&GpuOptions::default()).expect("a GPU adapter is required");
    let lego = rust3r_testdata::data("lego");
    let dir = tempfile::tempdir().expect("tempdir");
    let (one, two) = (dir.path().join("one"), dir.path().join("two"));

    let mut quiet = |_: rust3r_pipelines::TrainEvent<'_>| {};
    let mut session = TrainSession::open(&lego, options(&one), &gpu, &mut quiet).expect("open");
    let single = session.run(&mut quiet).expect("single-GPU run");
    assert_eq!(single.steps_run, STEPS);

    let ranks = InProcessRanks::new(&gpu, None, None);
    let mut steps_seen = 0;
    let dp = train_data_parallel(&lego, options(&two), 0..2, 2, &ranks, &mut |e| {
        if let rust3r_pipelines::TrainEvent::Step { .. } = e {
            steps_seen += 1;
        }
    })
    .expect("data-parallel run");
    assert_eq!(dp.steps_run, STEPS);
    assert_eq!(steps_seen, STEPS, "rank 0 reports every step");

    let a = rust3r_io::load_splats(&one.join("splats.ply")).expect("one");
    let b = rust3r_io::load_splats(&two.join("splats.ply")).expect("two");
    assert_eq!(a.len(), b.len());
    let (a, b) = (flat(&a), flat(&b));
    let worst = a
        .iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs() / (1.0 + x.abs()))
        .fold(0.0f32, f32::max);
    eprintln!("one session vs two ranks: largest relative difference {worst:e}");
    // Gradients are summed in the same order (view 0 then view 1) on both sides; no
    // densification in six steps, so nothing else can differ but float rounding.
    assert!(worst <= 1e-5, "{worst:e}");

    // A batch smaller than the group is refused before anything starts.
    let small = TrainOptions {
        batch: 1,
        ..options(&dir.path().join("three"))
    };
    let e = train_data_parallel(&lego, small, 0..2, 2, &ranks, &mut quiet).expect_err("batch 1");
    assert!(e.to_string().contains("--batch"), "{e}");

    // A rank that cannot start stops the whole run with its own error (no rank left waiting).
    let broken = InProcessRanks::new(&gpu, Some(1), None);
    let opts = options(&dir.path().join("four"));
    let e = train_data_parallel(&lego, opts, 0..2, 2, &broken, &mut quiet).expect_err("broken");
    assert!(e.to_string().contains("device 1 is broken"), "{e}");

    // A rank that fails mid-run aborts the group: rank 0, waiting for it in an all-reduce,
    // stops too, and the run reports rank 1's error (the cause), not rank 0's abort.
    let flaky = InProcessRanks::new(&gpu, None, Some(12));
    let opts = options(&dir.path().join("five"));
    let e = train_data_parallel(&lego, opts, 0..2, 2, &flaky, &mut quiet).expect_err("flaky");
    assert!(e.to_string().contains("injected failure"), "{e}");
}
