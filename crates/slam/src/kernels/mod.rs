//! GPU (CubeCL) versions of calibrated tracking: projective matching by iterative projection
//! and the `J^T W J` / `J^T W r` reductions, launched from the host code here. The CPU f64
//! code of [`crate::matching`] and [`crate::tracker`] is their reference (tests compare them).
//!
//! Per pixel the kernels write their terms to a `[pixels, 37]` matrix that
//! `rust3r_gpu::reduce::reduce_columns` sums (WGSL has no float atomics); only the 37 sums
//! come back to the host per Gauss-Newton iteration.

pub mod pair;
pub mod track;

use rust3r_geometry::{Sim3, Vector7};
use rust3r_gpu::reduce::{ReduceOp, reduce_columns};
use rust3r_gpu::{Gpu, GpuBuffer};

use crate::SlamError;
use crate::config::MatchingConfig;
use crate::matching::{ITER_PROJ_MIN_STEP, Matches};
use crate::pointmap::Pointmap;
use crate::tracker::{
    LevelView, NormalEq, ResidualParams, TrackResult, Tracker, converged, solve_pose,
};
use track::{NE_COLS, P_LEN};

fn gerr(e: rust3r_gpu::GpuError) -> SlamError {
    SlamError::Gpu(e.to_string())
}

/// `s R` (row-major) and `t` of a transform, as the kernels read it.
fn pose_buffer(t: &Sim3) -> [f32; 12] {
    let m = t.rotation_matrix() * t.scale;
    let mut out = [0.0f32; 12];
    for r in 0..3 {
        for c in 0..3 {
            out[r * 3 + c] = m[(r, c)] as f32;
        }
        out[9 + r] = t.translation[r] as f32;
    }
    out
}

/// `params` with only the iterative projection's entries set (what [`track::match_kernel`]
/// reads).
fn matching_params(m: &MatchingConfig) -> [f32; P_LEN] {
    let mut b = [0.0f32; P_LEN];
    b[track::P_LAMBDA] = m.lambda_init as f32;
    b[track::P_CONV] = m.convergence_thresh as f32;
    b[track::P_DIST] = m.dist_thresh as f32;
    b[track::P_MINSTEP] = ITER_PROJ_MIN_STEP as f32;
    b
}

fn params_buffer(view: &LevelView, p: &ResidualParams, m: &MatchingConfig) -> [f32; P_LEN] {
    let cam = view.cam.expect("GPU tracking is for calibrated cameras");
    let mut b = matching_params(m);
    b[track::P_FX] = cam.fx as f32;
    b[track::P_FY] = cam.fy as f32;
    b[track::P_CX] = cam.cx as f32;
    b[track::P_CY] = cam.cy as f32;
    b[track::P_ISP] = (1.0 / p.sigma_pixel) as f32;
    b[track::P_ISD] = (1.0 / p.sigma_depth) as f32;
    b[track::P_ISPL] = if p.sigma_plane > 0.0 {
        (1.0 / p.sigma_plane) as f32
    } else {
        0.0
    };
    b[track::P_HUBER] = p.huber as f32;
    b[track::P_ZEPS] = p.depth_eps as f32;
    b[track::P_BORDER] = p.pixel_border as f32;
    b[track::P_NOISE] = if p.depth_noise { 1.0 } else { 0.0 };
    b
}

fn flat3(v: &[[f32; 3]]) -> Vec<f32> {
    v.iter().flat_map(|p| *p).collect()
}

fn mask(v: &[bool]) -> Vec<u32> {
    v.iter().map(|b| *b as u32).collect()
}

/// A u32 flag buffer read back as booleans (the inverse of [`mask`]).
fn read_flags(gpu: &Gpu, flags: &GpuBuffer<u32>) -> Result<Vec<bool>, SlamError> {
    Ok(gpu
        .read(flags)
        .map_err(gerr)?
        .into_iter()
        .map(|v| v != 0)
        .collect())
}

/// A source/measurement pair of level views uploaded to the device.
pub struct GpuPair {
    rays: GpuBuffer<f32>,
    src_pts: GpuBuffer<f32>,
    src_valid: GpuBuffer<u32>,
    meas_pts: GpuBuffer<f32>,
    meas_valid: GpuBuffer<u32>,
    normals: GpuBuffer<f32>,
    params: GpuBuffer<f32>,
    /// Sub-pixel positions (warm start, updated by every match).
    pos: GpuBuffer<f32>,
    idx: GpuBuffer<u32>,
    valid: GpuBuffer<u32>,
    src_w: usize,
    src_h: usize,
    meas_w: usize,
    meas_h: usize,
    max_iter: u32,
}

impl GpuPair {
    /// Uploads `src` (its ray image and points) and `meas` (points, normals); matching starts
    /// from the identity (pixel `q` of `meas` at the same place in `src`).
    pub fn new(
        gpu: &Gpu,
        src: &LevelView,
        meas: &LevelView,
        p: &ResidualParams,
        m: &MatchingConfig,
    ) -> Self {
        let normals: Vec<f32> = if meas.normals.is_empty() {
            vec![0.0; meas.len() * 3]
        } else {
            meas.normals
                .iter()
                .flat_map(|n| n.unwrap_or([0.0; 3]))
                .collect()
        };
        let (sx, sy) = (
            src.width as f32 / meas.width as f32,
            src.height as f32 / meas.height as f32,
        );
        let init: Vec<f32> = (0..meas.len())
            .flat_map(|q| [(q % meas.width) as f32 * sx, (q / meas.width) as f32 * sy])
            .collect();
        Self {
            rays: gpu.upload(&src.rays.data),
            src_pts: gpu.upload(&flat3(&src.points)),
            src_valid: gpu.upload(&mask(&src.valid)),
            meas_pts: gpu.upload(&flat3(&meas.points)),
            meas_valid: gpu.upload(&mask(&meas.valid)),
            normals: gpu.upload(&normals),
            params: gpu.upload(&params_buffer(meas, p, m)),
            pos: gpu.upload(&init),
            idx: gpu.alloc(meas.len()),
            valid: gpu.alloc(meas.len()),
            src_w: src.width,
            src_h: src.height,
            meas_w: meas.width,
            meas_h: meas.height,
            max_iter: m.max_iter as u32,
        }
    }

    fn n(&self) -> usize {
        self.meas_w * self.meas_h
    }

    /// Replaces the warm-start positions.
    pub fn set_positions(&mut self, gpu: &Gpu, pos: &[[f32; 2]]) {
        self.pos = gpu.upload(&pos.iter().flat_map(|p| *p).collect::<Vec<f32>>());
    }

    /// Projective matching with `t_src_meas` (device only).
    pub fn associate(&self, gpu: &Gpu, t_src_meas: &Sim3) {
        let n = self.n();
        let pose = gpu.upload(&pose_buffer(t_src_meas));
        track::match_kernel::launch(
            gpu.client(),
            gpu.grid_1d(n),
            rust3r_gpu::BLOCK_DIM,
            self.rays.arg(),
            self.src_pts.arg(),
            self.src_valid.arg(),
            self.meas_pts.arg(),
            self.meas_valid.arg(),
            pose.arg(),
            self.params.arg(),
            self.pos.arg(),
            self.idx.arg(),
            self.valid.arg(),
            n as u32,
            self.src_w as u32,
            self.src_h as u32,
            self.max_iter,
        );
    }

    /// Reads the last matches back.
    pub fn matches(&self, gpu: &Gpu) -> Result<Matches, SlamError> {
        let idx = gpu.read(&self.idx).map_err(gerr)?;
        let valid = read_flags(gpu, &self.valid)?;
        let p = gpu.read(&self.pos).map_err(gerr)?;
        let pos = p.chunks_exact(2).map(|c| [c[0], c[1]]).collect();
        Ok(Matches { idx, pos, valid })
    }

    /// Uploads matches computed elsewhere (to test the reduction alone).
    pub fn set_matches(&mut self, gpu: &Gpu, m: &Matches) {
        self.idx = gpu.upload(&m.idx);
        self.valid = gpu.upload(&mask(&m.valid));
    }

    /// Normal equations of `t_meas_src` over the current matches: per-pixel terms, then a
    /// column reduction; 37 floats come back.
    pub fn normal_eq(&self, gpu: &Gpu, t_meas_src: &Sim3) -> Result<NormalEq, SlamError> {
        let n = self.n();
        let pose = gpu.upload(&pose_buffer(t_meas_src));
        let terms = gpu.alloc::<f32>(n * NE_COLS);
        track::normal_eq_kernel::launch(
            gpu.client(),
            gpu.grid_1d(n),
            rust3r_gpu::BLOCK_DIM,
            self.src_pts.arg(),
            self.src_valid.arg(),
            self.meas_pts.arg(),
            self.normals.arg(),
            self.idx.arg(),
            self.valid.arg(),
            pose.arg(),
            self.params.arg(),
            terms.arg(),
            n as u32,
            self.meas_w as u32,
            self.meas_h as u32,
        );
        let sums = gpu
            .read(&reduce_columns(gpu, &terms, NE_COLS, ReduceOp::Sum))
            .map_err(gerr)?;
        Ok(normal_eq_of(&sums))
    }
}

/// [`Tracker::track`] with matching and reductions on the GPU (calibrated cameras only). The
/// per-iteration 7x7 solve and the final statistics run on the host.
#[allow(clippy::too_many_arguments)] // [`Tracker::track`]'s arguments plus the GPU context
pub fn track_gpu(
    gpu: &Gpu,
    tracker: &Tracker,
    frame: &Pointmap,
    frame_conf: &[f32],
    kf: &Pointmap,
    kf_conf: &[f32],
    cam: rust3r_geometry::PinholeCamera,
    t_init: &Sim3,
) -> Result<TrackResult, SlamError> {
    let p = ResidualParams::tracking(&tracker.cfg);
    let mut t = *t_init;
    let mut iterations = 0;
    let mut cost = 0.0;
    let mut last = None;
    let levels = tracker.levels.max(1);
    // The photometric term (when on) is summed on the host and added to the device's sums.
    let photo = tracker.photometric(frame, kf, levels);
    let mut last_eq = None;
    for level in (tracker.cfg.finest_level.min(levels - 1)..levels).rev() {
        let fv = LevelView::new(frame, frame_conf, Some(cam), level, &p, false);
        let kv = LevelView::new(kf, kf_conf, Some(cam), level, &p, p.sigma_plane > 0.0);
        let pair = GpuPair::new(gpu, &fv, &kv, &p, &tracker.matching);
        let term = photo.as_ref().map(|(fp, kp, pp)| {
            crate::photometric::LevelTerm::at_level(fp, kp, pp, level, &fv, &kv, &t)
        });
        let mut old_cost = f64::INFINITY;
        for _ in 0..tracker.cfg.max_iters {
            iterations += 1;
            pair.associate(gpu, &t.inverse());
            let mut eq = pair.normal_eq(gpu, &t)?;
            if let Some(term) = &term {
                eq = eq.merge(&term.normal_eq(&fv, &kv, &t));
            }
            cost = eq.cost;
            if eq.count < 6 {
                break;
            }
            let Some(delta) = solve_pose(&eq, tracker.optimize_scale) else {
                break;
            };
            last_eq = Some(eq);
            t = t.retr(&delta);
            let done = converged(
                tracker.cfg.rel_error,
                tracker.cfg.delta_norm,
                old_cost,
                eq.cost,
                &delta,
            );
            old_cost = eq.cost;
            if done {
                break;
            }
        }
        if level == 0 {
            last = Some((fv, kv, pair));
        }
    }
    let (fv, kv) = match last {
        Some((fv, kv, _)) => (fv, kv),
        None => (
            LevelView::new(frame, frame_conf, Some(cam), 0, &p, false),
            LevelView::new(kf, kf_conf, Some(cam), 0, &p, false),
        ),
    };
    // Statistics and the fusion observation from a final association (host reference code).
    let mut res = tracker.finish(&fv, &kv, frame_conf, &t);
    res.iterations = iterations;
    res.cost = cost;
    tracker.judge(&mut res, last_eq.as_ref(), kf, kf_conf);
    Ok(res)
}

/// [`Tracker::track_pair`] with the matching, the descriptor refinement and the per-iteration
/// normal equations on the GPU; the weighting, the 7x7 solves, the statistics and the fusion
/// observation stay on the host. Uncalibrated pairs only (MASt3R-SLAM's default ray + distance
/// residual); a calibrated camera is an error (use [`Tracker::track_pair`]).
#[allow(clippy::too_many_arguments)] // [`Tracker::track_pair`]'s arguments plus the GPU context
pub fn track_pair_gpu(
    gpu: &Gpu,
    tracker: &Tracker,
    pred: &crate::pair::PairPrediction,
    kf: &Pointmap,
    kf_conf: &[f32],
    t_init: &Sim3,
    idx_init: Option<&[u32]>,
) -> Result<crate::pair::PairTrack, SlamError> {
    crate::pair::check_pair(pred, kf, kf_conf, None)?;
    let queued = queue_pair_matching(gpu, pred, &tracker.matching, idx_init)?;
    track_queued_pair_gpu(gpu, tracker, pred, kf, kf_conf, t_init, queued)
}

/// [`track_pair_gpu`] on a matching already queued ([`queue_pair_matching`], checked with
/// [`crate::pair::check_pair`]), on this thread's stream or adopted by it
/// ([`QueuedMatching::adopt`]): reads the matches, then runs the Gauss-Newton iterations.
pub fn track_queued_pair_gpu(
    gpu: &Gpu,
    tracker: &Tracker,
    pred: &crate::pair::PairPrediction,
    kf: &Pointmap,
    kf_conf: &[f32],
    t_init: &Sim3,
    queued: QueuedMatching,
) -> Result<crate::pair::PairTrack, SlamError> {
    let start = queued.start;
    // The frame's points serve the matching and every iteration's normal equations; the
    // matches stay on the device too, for the normal equations.
    let (matches, idx_dev, frame_pts) = queued.read(gpu)?;
    let matched = start.elapsed();
    let p = ResidualParams::tracking(&tracker.cfg);
    // Built at the first iteration (`used` and `qk` are fixed for the frame).
    let mut sums: Option<GpuPairNormalEq> = None;
    let mut solve = std::time::Duration::ZERO;
    let mut setup = std::time::Duration::ZERO;
    let track = tracker.track_matched_pair(
        pred,
        kf,
        kf_conf,
        None,
        t_init,
        matches,
        // `idx` is the matches' `idx`, already on the device (`idx_dev`).
        &mut |_, _, _, used, qk, t| {
            let eq = sums
                .get_or_insert_with(|| {
                    let t0 = std::time::Instant::now();
                    let eq = GpuPairNormalEq::with_frame(
                        gpu,
                        frame_pts.clone(),
                        &kf.points,
                        idx_dev.clone(),
                        used,
                        qk,
                        &p,
                    );
                    setup = t0.elapsed();
                    eq
                })
                .at(gpu, t);
            solve = start.elapsed();
            eq
        },
    )?;
    tracing::debug!(
        "pair tracked on the GPU in {:.1} ms: matching {:.1} ms, up to the last normal equations {:.1} ms (their set-up {:.2} ms), {} iterations",
        start.elapsed().as_secs_f64() * 1e3,
        matched.as_secs_f64() * 1e3,
        solve.as_secs_f64() * 1e3,
        setup.as_secs_f64() * 1e3,
        track.result.iterations
    );
    Ok(track)
}

/// The normal equations of a network pair on the GPU ([`pair::pair_normal_eq_kernel`], the
/// uncalibrated residual of [`crate::pair::pair_normal_eq`]): the matches, their weights and
/// both pointmaps stay on the device; each pose costs one launch, one column reduction and a
/// read-back of 37 floats.
pub struct GpuPairNormalEq {
    src_pts: GpuBuffer<f32>,
    meas_pts: GpuBuffer<f32>,
    idx: GpuBuffer<u32>,
    used: GpuBuffer<u32>,
    qk: GpuBuffer<f32>,
    params: GpuBuffer<f32>,
    /// Per-pixel terms, rewritten at every pose.
    terms: GpuBuffer<f32>,
    n: usize,
}

impl GpuPairNormalEq {
    /// Uploads the frame's points (`Xff`), the keyframe's (`kf`), and for every keyframe pixel
    /// its match `idx`, whether it is `used` and its quality `qk`.
    pub fn new(
        gpu: &Gpu,
        frame_points: &[[f32; 3]],
        kf_points: &[[f32; 3]],
        idx: &[u32],
        used: &[bool],
        qk: &[f32],
        p: &ResidualParams,
    ) -> Self {
        let src_pts = gpu.upload(&flat3(frame_points));
        Self::with_frame(gpu, src_pts, kf_points, gpu.upload(idx), used, qk, p)
    }

    /// [`GpuPairNormalEq::new`] with the frame's points (`[n * 3]`) and the matches already on
    /// the device.
    fn with_frame(
        gpu: &Gpu,
        src_pts: GpuBuffer<f32>,
        kf_points: &[[f32; 3]],
        idx: GpuBuffer<u32>,
        used: &[bool],
        qk: &[f32],
        p: &ResidualParams,
    ) -> Self {
        let mut params = [0.0f32; pair::PP_LEN];
        params[pair::PP_ISR] = (1.0 / p.sigma_ray) as f32;
        params[pair::PP_ISD] = (1.0 / p.sigma_dist) as f32;
        params[pair::PP_HUBER] = p.huber as f32;
        Self {
            src_pts,
            meas_pts: gpu.upload(&flat3(kf_points)),
            idx,
            used: gpu.upload(&mask(used)),
            qk: gpu.upload(qk),
            params: gpu.upload(&params),
            terms: gpu.alloc(kf_points.len() * NE_COLS),
            n: kf_points.len(),
        }
    }

    /// The normal equations at `t` (`T_CkCf`).
    pub fn at(&self, gpu: &Gpu, t: &Sim3) -> Result<NormalEq, SlamError> {
        let n = self.n;
        let pose = gpu.upload(&pose_buffer(t));
        let terms = &self.terms;
        pair::pair_normal_eq_kernel::launch(
            gpu.client(),
            gpu.grid_1d(n),
            rust3r_gpu::BLOCK_DIM,
            self.src_pts.arg(),
            self.meas_pts.arg(),
            self.idx.arg(),
            self.used.arg(),
            self.qk.arg(),
            pose.arg(),
            self.params.arg(),
            terms.arg(),
            n as u32,
        );
        let sums = gpu
            .read(&reduce_columns(gpu, terms, NE_COLS, ReduceOp::Sum))
            .map_err(gerr)?;
        Ok(normal_eq_of(&sums))
    }
}

/// [`crate::pair::match_pair`] on the GPU: the iterative projection of every keyframe pixel's
/// `Xkf` onto the ray image of `Xff` ([`track::match_kernel`] at the identity pose, warm-started
/// from `idx_init`), the occlusion check, then the descriptor refinement
/// ([`pair::refine_kernel`]) when `cfg.radius > 0`.
pub fn match_pair_gpu(
    gpu: &Gpu,
    pred: &crate::pair::PairPrediction,
    cfg: &MatchingConfig,
    idx_init: Option<&[u32]>,
) -> Result<crate::pair::PairMatches, SlamError> {
    Ok(queue_pair_matching(gpu, pred, cfg, idx_init)?.read(gpu)?.0)
}

/// A pair's `Xff` and `Xkf` on `gpu`: the front end's copies when it left them there
/// ([`crate::pair::DeviceDescriptors::points`]), else uploaded.
fn resident_points(
    gpu: &Gpu,
    pred: &crate::pair::PairPrediction,
) -> (GpuBuffer<f32>, GpuBuffer<f32>) {
    let n = pred.frame.len() * 3;
    match pred.device_desc.as_ref().filter(|d| d.gpu.same_device(gpu)) {
        Some(crate::pair::DeviceDescriptors {
            points: Some((f, k)),
            ..
        }) if f.len() == n && k.len() == n => (f.clone(), k.clone()),
        _ => (
            gpu.upload(&flat3(&pred.frame.points)),
            gpu.upload(&flat3(&pred.keyframe_points)),
        ),
    }
}

/// The iterative projection's start positions (`[n * 2]`, `(u, v)` per keyframe pixel) made on
/// the device: frame pixel `idx_init[q]` of a `w`-wide frame, or pixel `q` itself when
/// `idx_init` is `None` or not `n` long, as the CPU matching starts; only the previous matches go
/// up.
pub fn warm_start_on(gpu: &Gpu, idx_init: Option<&[u32]>, w: usize, n: usize) -> GpuBuffer<f32> {
    let warm = idx_init.filter(|i| i.len() == n);
    let prev = match warm {
        Some(i) => gpu.upload(i),
        None => gpu.alloc::<u32>(1),
    };
    let pos = gpu.alloc::<f32>(2 * n);
    pair::warm_start_kernel::launch(
        gpu.client(),
        gpu.grid_1d(n),
        rust3r_gpu::BLOCK_DIM,
        prev.arg(),
        pos.arg(),
        n as u32,
        w as u32,
        warm.is_none() as u32,
    );
    pos
}

/// The ray image ([`crate::matching::ray_image`] with every pixel valid: unit rays and their
/// Scharr gradients, `[h * w * 9]`) of a `w` x `h` pointmap already on the device (`pts`:
/// `[w * h * 3]`), made there ([`pair::ray_image_kernel`]).
pub fn ray_image_on(gpu: &Gpu, pts: &GpuBuffer<f32>, w: usize, h: usize) -> GpuBuffer<f32> {
    let n = w * h;
    let rays = gpu.alloc::<f32>(n * crate::matching::RAY_CHANNELS);
    pair::ray_image_kernel::launch(
        gpu.client(),
        gpu.grid_1d(n),
        rust3r_gpu::BLOCK_DIM,
        pts.arg(),
        rays.arg(),
        w as u32,
        h as u32,
    );
    rays
}

/// A pair's matching queued on the device stream of the thread that queued it
/// ([`queue_pair_matching`]): the ray image, the iterative projection, the occlusion check and
/// (with a refinement radius) the descriptor refinement; nothing read back yet. Another
/// thread's stream reads it after [`QueuedMatching::adopt`] without waiting for the work the
/// first thread queues next (the next frame's network).
pub struct QueuedMatching {
    frame_pts: GpuBuffer<f32>,
    kf_pts: GpuBuffer<f32>,
    /// The iterative projection's matches and their validity (u32 flags).
    idx: GpuBuffer<u32>,
    valid: GpuBuffer<u32>,
    /// The refined matches; `None` without refinement.
    refined: Option<GpuBuffer<u32>>,
    /// When it was queued.
    start: std::time::Instant,
}

/// Queues [`crate::pair::match_pair`] on `gpu` (on the calling thread's stream) for the pair's
/// `Xff` and `Xkf`: the front end's device copies when it left them on `gpu`, else uploaded.
/// A tracker checks the pair against its keyframe first ([`crate::pair::check_pair`]).
pub fn queue_pair_matching(
    gpu: &Gpu,
    pred: &crate::pair::PairPrediction,
    cfg: &MatchingConfig,
    idx_init: Option<&[u32]>,
) -> Result<QueuedMatching, SlamError> {
    let start = std::time::Instant::now();
    let (src_pts, kf_pts) = resident_points(gpu, pred);
    let f = &pred.frame;
    let (w, h, n) = (f.width, f.height, f.len());
    // Every pixel of a network pointmap has a point: no fallback rays, no validity gate.
    let rays = ray_image_on(gpu, &src_pts, w, h);
    let pos = warm_start_on(gpu, idx_init, w, n);
    // Every pixel is valid on both sides (filled on the device).
    let all_valid = gpu.filled::<u32>(n, 1);
    let idx = gpu.alloc::<u32>(n);
    let valid = gpu.alloc::<u32>(n);
    track::match_kernel::launch(
        gpu.client(),
        gpu.grid_1d(n),
        rust3r_gpu::BLOCK_DIM,
        rays.arg(),
        src_pts.arg(),
        all_valid.arg(),
        kf_pts.arg(),
        all_valid.arg(),
        gpu.upload(&pose_buffer(&Sim3::identity())).arg(),
        gpu.upload(&matching_params(cfg)).arg(),
        pos.arg(),
        idx.arg(),
        valid.arg(),
        n as u32,
        w as u32,
        h as u32,
        cfg.max_iter as u32,
    );
    let refined = if cfg.radius == 0 {
        None
    } else {
        Some(queue_refinement(gpu, pred, &idx, cfg)?)
    };
    Ok(QueuedMatching {
        frame_pts: src_pts,
        kf_pts,
        idx,
        valid,
        refined,
        start,
    })
}

/// [`pair::refine_kernel`] queued from the matches `idx`; returns the refined matches.
fn queue_refinement(
    gpu: &Gpu,
    pred: &crate::pair::PairPrediction,
    idx: &GpuBuffer<u32>,
    cfg: &MatchingConfig,
) -> Result<GpuBuffer<u32>, SlamError> {
    let f = &pred.frame;
    let (w, h, n) = (f.width, f.height, f.len());
    // The front end's buffers when it left the descriptors on this device, else one upload
    // of each.
    let resident = pred
        .device_desc
        .as_ref()
        .is_some_and(|d| d.gpu.same_device(gpu));
    let (frame_desc, keyframe_desc) = match &pred.device_desc {
        Some(d) if resident => (d.frame.clone(), d.keyframe.clone()),
        Some(_) if pred.descriptors_on_device_only() => {
            return Err(SlamError::InvalidInput(
                "the pair's descriptors are on another device than the tracker's".into(),
            ));
        }
        _ => (
            gpu.upload(&pred.frame_desc),
            gpu.upload(&pred.keyframe_desc),
        ),
    };
    let dim = pred.desc_dim;
    if frame_desc.len() != n * dim || keyframe_desc.len() != n * dim {
        return Err(SlamError::InvalidInput(format!(
            "the pair's descriptors hold {} and {} floats, not {n} pixels x {dim}",
            frame_desc.len(),
            keyframe_desc.len()
        )));
    }
    // The widest vector that divides the descriptor (MASt3R's 24 floats: 4).
    let width = [4usize, 2, 1]
        .into_iter()
        .find(|v| dim.is_multiple_of(*v))
        .unwrap_or(1);
    let refined = gpu.alloc::<u32>(n);
    pair::refine_kernel::launch(
        gpu.client(),
        gpu.grid_1d(n),
        rust3r_gpu::BLOCK_DIM,
        width,
        frame_desc.arg_vectors(width),
        keyframe_desc.arg_vectors(width),
        idx.arg(),
        refined.arg(),
        n as u32,
        w as u32,
        h as u32,
        cfg.radius as u32,
        cfg.dilation_max as u32,
        dim / width,
    );
    Ok(refined)
}

impl QueuedMatching {
    /// Makes the calling thread's stream wait for this matching (and for nothing the queueing
    /// thread queues afterwards); call it on the stream that will [`QueuedMatching::read`] it,
    /// before the queueing thread goes on.
    pub fn adopt(&self, gpu: &Gpu) {
        let mut buffers = vec![&self.idx, &self.valid];
        buffers.extend(self.refined.as_ref());
        rust3r_gpu::stream::adopt(gpu, &buffers);
        rust3r_gpu::stream::adopt(gpu, &[&self.frame_pts, &self.kf_pts]);
    }

    /// The matches, read back (waiting for the device), with the final `idx` still on the
    /// device and the frame's points there.
    fn read(
        self,
        gpu: &Gpu,
    ) -> Result<(crate::pair::PairMatches, GpuBuffer<u32>, GpuBuffer<f32>), SlamError> {
        let valid = read_flags(gpu, &self.valid)?;
        let before = gpu.read(&self.idx).map_err(gerr)?;
        let (idx, refined, dev) = match self.refined {
            None => (before, 0, self.idx),
            Some(r) => {
                let after = gpu.read(&r).map_err(gerr)?;
                let moved = after.iter().zip(&before).filter(|(a, b)| a != b).count();
                (after, moved, r)
            }
        };
        tracing::trace!(
            "pair matching (ray image, iterative projection, refinement) read at {:.1} ms after queueing",
            self.start.elapsed().as_secs_f64() * 1e3
        );
        Ok((
            crate::pair::PairMatches {
                idx,
                valid,
                refined,
            },
            dev,
            self.frame_pts,
        ))
    }
}

/// The normal equations from the [`NE_COLS`] column sums.
fn normal_eq_of(sums: &[f32]) -> NormalEq {
    let mut eq = NormalEq::default();
    let mut k = 0;
    for r in 0..7 {
        for c in r..7 {
            eq.h[(r, c)] = sums[k] as f64;
            eq.h[(c, r)] = sums[k] as f64;
            k += 1;
        }
    }
    eq.g = Vector7::from_iterator(sums[28..35].iter().map(|v| *v as f64));
    eq.cost = sums[35] as f64;
    eq.count = sums[36].round() as usize;
    eq
}
