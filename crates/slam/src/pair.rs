//! Tracking on network pairs: MASt3R-SLAM's `mast3r_match_asymmetric` and `FrameTracker.track`.
//!
//! A front end that can decode a *pair* of frames ([`PairFrontEnd`], the MASt3R network) gives,
//! for the current frame `f` and the current keyframe `k` decoded together (`decode(f, k)`),
//! a [`PairPrediction`]:
//!
//! * `Xff`, `Cff`, `Dff`, `Qff`: the frame's points in its own camera, their confidence, the
//!   frame's descriptors and the descriptor confidence (view 1);
//! * `Xkf`, `Ckf`, `Dkf`, `Qkf`: the keyframe's pixels, their points *in the frame's camera*,
//!   confidence, descriptors and descriptor confidence (view 2).
//!
//! Because `Xkf` is already in the frame's camera, matching needs no pose and runs once per
//! frame ([`match_pair`]): each keyframe pixel's `Xkf` is located on the ray image of `Xff` by
//! iterative projection (warm-started from the previous frame's matches against the same
//! keyframe), checked for occlusion (`|Xff(p) - Xkf| < dist_thresh`), and then moved by the
//! descriptor window search ([`crate::matching::refine_matches`]: `Dkf` against `Dff`,
//! `matching.radius`, dilations `matching.dilation_max` down to 1). As upstream, the occlusion
//! check is made before the refinement and not repeated.
//!
//! [`Tracker::track_pair`] then weighs and filters the matches as `FrameTracker.track` does:
//! the match quality is `Qk = sqrt(Qff(idx) Qkf)`; a match is used by the optimisation when it
//! is valid, both points' average confidences exceed `tracking.C_conf` and `Qk > Q_conf`; each
//! residual's square-root information is `sqrt(Qk) / sigma` (Huber on the residual whitened
//! that way). The residuals are those of [`crate::tracker`] between the frame's pointmap
//! (`Xff`) moved into the keyframe and the keyframe's fused pointmap: ray + distance
//! uncalibrated, pixel + log-depth calibrated (both constrained to their pixel rays). With too
//! few usable matches (`tracking.min_match_frac`) the frame is lost before any optimisation.
//! A new keyframe is made when `min(fraction of valid matches with Qk > Q_conf, fraction of
//! distinct frame pixels among the valid matches)` falls below `match_frac_thresh`.
//!
//! Fusion follows upstream too: the keyframe's pointmap is averaged with `T_CkCf Xkf` weighted
//! by `Ckf` for every keyframe pixel (calibrated: kept on the keyframe pixel's ray), and the
//! frame's own pointmap (what it is stored as if it becomes a keyframe) is `Xff` with `Cff`.
//!
//! Differences from upstream, all documented where they are made: sub-pixel matches are rounded
//! to the nearest pixel instead of truncated ([`crate::matching::round_pixel`]); the descriptor
//! scores are summed in f32 instead of f16; iterative projection stops early once converged
//! ([`crate::matching::ITER_PROJ_MIN_STEP`]).

use nalgebra::{Vector2, Vector3};
use rust3r_geometry::{PinholeCamera, Sim3};
use rust3r_gpu::{Gpu, GpuBuffer};
use rust3r_io::datasets::Frame;

use crate::SlamError;
use crate::config::MatchingConfig;
use crate::matching::{match_iterative_proj, ray_image, refine_matches};
use crate::pointmap::Pointmap;
use crate::residuals;
use crate::tracker::{
    LevelView, NormalEq, ResidualParams, TrackResult, Tracker, accumulate, point_info_weighted,
};

/// A frame's network input made off the tracking thread by a [`FramePreparer`] (the front
/// end's own type: [`PairFrontEnd::encode_prepared`] takes it back).
pub type PreparedInput = Box<dyn std::any::Any + Send>;

/// Makes a decoded frame's network input (resizing, normalisation: everything that does not
/// need the network) on a loader thread ([`crate::FrameSource::Pipelined`]).
pub type FramePreparer =
    std::sync::Arc<dyn Fn(&Frame) -> Result<PreparedInput, SlamError> + Send + Sync>;

/// The descriptors of a pair on the device the GPU tracker runs on (`Dff` and `Dkf`, each
/// `[height * width * desc_dim]`, channels last): what a front end on that device hands over
/// instead of reading them back ([`PairFrontEnd::set_tracker_device`]).
#[derive(Debug, Clone)]
pub struct DeviceDescriptors {
    /// The device both buffers live on.
    pub gpu: Gpu,
    /// The frame's descriptors (`Dff`).
    pub frame: GpuBuffer<f32>,
    /// The keyframe's descriptors (`Dkf`).
    pub keyframe: GpuBuffer<f32>,
    /// Copies of the frame's points (`Xff`) and of the keyframe's points in the frame's camera
    /// (`Xkf`), each `[height * width * 3]`, equal to [`PairPrediction::frame`]'s and
    /// [`PairPrediction::keyframe_points`]: the GPU tracker then uploads neither.
    pub points: Option<(GpuBuffer<f32>, GpuBuffer<f32>)>,
}

/// The network's prediction for the pair (current frame, current keyframe), both views of the
/// same size, row-major `[height][width]`, channels last. Points are as the network predicts
/// them (not constrained to pixel rays, even for a calibrated front end).
///
/// The descriptors are on the host (`frame_desc`, `keyframe_desc`), or on the tracker's device
/// (`device_desc`) with the host vectors empty; [`PairPrediction::with_host_descriptors`]
/// reads them back for the host code.
#[derive(Debug, Clone)]
pub struct PairPrediction {
    /// The frame's points in its own camera (`Xff`), their confidence (`Cff`) and colours.
    pub frame: Pointmap,
    /// The frame's descriptors (`Dff`), `desc_dim` per pixel.
    pub frame_desc: Vec<f32>,
    /// The frame's descriptor confidence (`Qff`).
    pub frame_desc_conf: Vec<f32>,
    /// The keyframe's pixels as points in the *frame's* camera (`Xkf`).
    pub keyframe_points: Vec<[f32; 3]>,
    /// Their confidence (`Ckf`).
    pub keyframe_conf: Vec<f32>,
    /// The keyframe's descriptors (`Dkf`).
    pub keyframe_desc: Vec<f32>,
    /// The keyframe's descriptor confidence (`Qkf`).
    pub keyframe_desc_conf: Vec<f32>,
    /// Descriptor size.
    pub desc_dim: usize,
    /// Both views' descriptors on the device (then `frame_desc` and `keyframe_desc` may be
    /// empty).
    pub device_desc: Option<DeviceDescriptors>,
}

impl PairPrediction {
    /// Pixels per view.
    pub fn len(&self) -> usize {
        self.frame.len()
    }

    /// Whether the views have no pixels.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the descriptors are only on the device.
    pub fn descriptors_on_device_only(&self) -> bool {
        self.device_desc.is_some() && self.frame_desc.is_empty() && self.keyframe_desc.is_empty()
    }

    /// This prediction with its descriptors on the host: read back from the device when they
    /// are only there.
    pub fn with_host_descriptors(mut self) -> Result<Self, SlamError> {
        if self.descriptors_on_device_only()
            && let Some(d) = &self.device_desc
        {
            let read = |b: &GpuBuffer<f32>| {
                d.gpu
                    .read(b)
                    .map_err(|e| SlamError::Gpu(format!("reading the pair's descriptors: {e}")))
            };
            self.frame_desc = read(&d.frame)?;
            self.keyframe_desc = read(&d.keyframe)?;
        }
        Ok(self)
    }

    /// Checks that every field has the size of the views and that the points are finite.
    pub fn check(&self) -> Result<(), SlamError> {
        let n = self.len();
        let f = &self.frame;
        // Descriptors on the device only: their host vectors are empty, the buffers' sizes
        // are checked instead.
        let desc = match &self.device_desc {
            Some(d) if self.descriptors_on_device_only() => [d.frame.len(), d.keyframe.len()],
            _ => [self.frame_desc.len(), self.keyframe_desc.len()],
        };
        let sizes = [
            ("frame points", f.points.len(), n),
            ("frame confidences", f.conf.len(), n),
            ("frame colours", f.colors.len(), n),
            ("frame descriptors", desc[0], n * self.desc_dim),
            (
                "frame descriptor confidences",
                self.frame_desc_conf.len(),
                n,
            ),
            ("keyframe points", self.keyframe_points.len(), n),
            ("keyframe confidences", self.keyframe_conf.len(), n),
            ("keyframe descriptors", desc[1], n * self.desc_dim),
            (
                "keyframe descriptor confidences",
                self.keyframe_desc_conf.len(),
                n,
            ),
        ];
        for (what, got, want) in sizes {
            if got != want {
                return Err(SlamError::InvalidInput(format!(
                    "pair prediction of {}x{} pixels: {got} {what}, expected {want}",
                    f.width, f.height
                )));
            }
        }
        if n == 0 || self.desc_dim == 0 {
            return Err(SlamError::InvalidInput(format!(
                "empty pair prediction ({}x{} pixels, {} descriptor channels)",
                f.width, f.height, self.desc_dim
            )));
        }
        if f.points
            .iter()
            .chain(&self.keyframe_points)
            .flatten()
            .any(|v| !v.is_finite())
        {
            return Err(SlamError::InvalidInput(
                "the pair prediction has non-finite points".into(),
            ));
        }
        Ok(())
    }
}

/// A front end that decodes pairs of frames (MASt3R). Frames are encoded once and kept by
/// their data-set index until [`PairFrontEnd::retain`] drops them, so the keyframe's encoding
/// is reused for every frame tracked against it.
///
/// The SLAM system calls it from the tracking thread only: [`PairFrontEnd::encode`] for every
/// frame, [`PairFrontEnd::mono`] for the first frame and while relocalising,
/// [`PairFrontEnd::pair`] while tracking, and [`PairFrontEnd::retain`] after every frame with
/// the current keyframe's index; only the jobs of [`PairFrontEnd::retrieval_job`] run
/// elsewhere.
pub trait PairFrontEnd {
    /// Encodes frame `index` and keeps its encoding.
    fn encode(&mut self, index: usize, frame: &Frame) -> Result<(), SlamError>;
    /// What prepares a frame's network input off the tracking thread
    /// ([`crate::FrameSource::Pipelined`]); `None` (the default): [`PairFrontEnd::encode`]
    /// does all the work.
    fn preparer(&mut self) -> Option<FramePreparer> {
        None
    }
    /// [`PairFrontEnd::encode`] from the input [`PairFrontEnd::preparer`] made of `frame`
    /// (`None`: made here); the result must equal `encode(index, frame)`'s.
    fn encode_prepared(
        &mut self,
        index: usize,
        frame: &Frame,
        input: Option<PreparedInput>,
    ) -> Result<(), SlamError> {
        let _ = input;
        self.encode(index, frame)
    }
    /// The pointmap of encoded frame `index` decoded with itself (what
    /// [`crate::PointmapFrontEnd::pointmap`] gives for the frame).
    fn mono(&mut self, index: usize) -> Result<Pointmap, SlamError>;
    /// Decodes encoded frames `frame` and `keyframe` as the pair `(frame, keyframe)`.
    fn pair(&mut self, frame: usize, keyframe: usize) -> Result<PairPrediction, SlamError>;
    /// [`PairFrontEnd::pair`] queued on the device: the front end may encode other frames
    /// before [`QueuedPair::finish`] makes the prediction (equal to `pair(frame, keyframe)`'s),
    /// and finishing waits for this decoding only, not for work queued after it
    /// ([`SlamConfig::encode_ahead`](crate::SlamConfig::encode_ahead)). The default decodes
    /// now.
    fn queue_pair(&mut self, frame: usize, keyframe: usize) -> QueuedPair {
        QueuedPair::ready(self.pair(frame, keyframe))
    }
    /// Drops every kept encoding but those of `keep`.
    fn retain(&mut self, keep: &[usize]);
    /// The device the GPU pair tracker runs on (`None`: pairs are tracked on the CPU). A front
    /// end on that device may then leave the descriptors of its pair predictions there
    /// ([`PairPrediction::device_desc`]) instead of reading them back; the default keeps them
    /// on the host.
    fn set_tracker_device(&mut self, gpu: Option<&Gpu>) {
        let _ = gpu;
    }
    /// Learned retrieval (MASt3R-SLAM's `RetrievalDatabase.update`) with encoded frame
    /// `frame`: the keyframes most similar to it, best first (at most `k`, scoring above
    /// `min_thresh`; keyframe ids as given to earlier `add_as`); afterwards the frame joins the
    /// database as keyframe `add_as` when given. `Ok(None)`: no retrieval database, the system
    /// falls back to pose proximity. Runs [`PairFrontEnd::retrieval_job`] here.
    fn retrieve(
        &mut self,
        frame: usize,
        add_as: Option<usize>,
        k: usize,
        min_thresh: f64,
    ) -> Result<Option<Vec<usize>>, SlamError> {
        self.retrieval_job(frame, add_as, k, min_thresh)?
            .map(|job| job())
            .transpose()
    }
    /// [`PairFrontEnd::retrieve`] as a job that may run on another thread (MASt3R-SLAM queries
    /// on its back end while tracking goes on): what needs the front end (the frame's encoder
    /// features) is taken now, the query and the database update run when the job does. Jobs
    /// update the database in the order they run; the caller runs each before making the
    /// next. `Ok(None)` (the default): no retrieval database.
    fn retrieval_job(
        &mut self,
        frame: usize,
        add_as: Option<usize>,
        k: usize,
        min_thresh: f64,
    ) -> Result<Option<RetrievalJob>, SlamError> {
        let _ = (frame, add_as, k, min_thresh);
        Ok(None)
    }
}

/// A pair decoding queued on the device ([`PairFrontEnd::queue_pair`]).
pub struct QueuedPair(QueuedPairState);

enum QueuedPairState {
    Ready(Box<Result<PairPrediction, SlamError>>),
    Pending(Box<dyn FnOnce() -> Result<PairPrediction, SlamError>>),
}

impl QueuedPair {
    /// A prediction already made.
    pub fn ready(pred: Result<PairPrediction, SlamError>) -> Self {
        QueuedPair(QueuedPairState::Ready(Box::new(pred)))
    }

    /// A prediction `finish` makes when called (waiting for the device there).
    pub fn pending(finish: impl FnOnce() -> Result<PairPrediction, SlamError> + 'static) -> Self {
        QueuedPair(QueuedPairState::Pending(Box::new(finish)))
    }

    /// The prediction, waiting for its decoding.
    pub fn finish(self) -> Result<PairPrediction, SlamError> {
        match self.0 {
            QueuedPairState::Ready(p) => *p,
            QueuedPairState::Pending(f) => f(),
        }
    }
}

impl std::fmt::Debug for QueuedPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match self.0 {
            QueuedPairState::Ready(_) => "ready",
            QueuedPairState::Pending(_) => "pending",
        };
        f.debug_tuple("QueuedPair").field(&state).finish()
    }
}

/// A retrieval query ready to run ([`PairFrontEnd::retrieval_job`]): the retrieved keyframe ids,
/// best first.
pub type RetrievalJob = Box<dyn FnOnce() -> Result<Vec<usize>, SlamError> + Send>;

/// Matches of every keyframe pixel in the frame ([`match_pair`]).
#[derive(Debug, Clone, PartialEq)]
pub struct PairMatches {
    /// Linear frame pixel of each keyframe pixel (after descriptor refinement).
    pub idx: Vec<u32>,
    /// Converged and not occluded (checked before the refinement).
    pub valid: Vec<bool>,
    /// Number of keyframe pixels the descriptor refinement moved to another frame pixel.
    pub refined: usize,
}

/// Start positions of the iterative projection for `n` keyframe pixels of a `w`-wide frame:
/// the frame pixels of `idx_init` (the previous frame's matches against the same keyframe), or
/// the same pixel when `idx_init` is `None` or of another size.
pub(crate) fn warm_start(idx_init: Option<&[u32]>, w: usize, n: usize) -> Vec<[f32; 2]> {
    match idx_init {
        Some(idx) if idx.len() == n => idx
            .iter()
            .map(|&i| [(i as usize % w) as f32, (i as usize / w) as f32])
            .collect(),
        _ => (0..n).map(|i| [(i % w) as f32, (i / w) as f32]).collect(),
    }
}

/// MASt3R-SLAM's `match_iterative_proj` on a pair: every keyframe pixel's `Xkf` located on
/// the ray image of `Xff` starting from `idx_init` (the previous frame's matches against the
/// same keyframe; identity when `None` or of another size), occlusion check, then the
/// descriptor refinement when `cfg.radius > 0`, on the host (descriptors only on the device
/// are read back first: [`PairPrediction::with_host_descriptors`]).
pub fn match_pair(
    pred: &PairPrediction,
    cfg: &MatchingConfig,
    idx_init: Option<&[u32]>,
) -> Result<PairMatches, SlamError> {
    if cfg.radius > 0 && pred.descriptors_on_device_only() {
        let host = pred.clone().with_host_descriptors()?;
        return match_pair(&host, cfg, idx_init);
    }
    let f = &pred.frame;
    let (w, n) = (f.width, f.len());
    // Every pixel of a network pointmap has a point: no fallback rays, no validity gate.
    let rays = ray_image(f.width, f.height, &f.points, |_| None, |_| true);
    let all = vec![true; n];
    let queries: Vec<Option<[f32; 3]>> = pred.keyframe_points.iter().map(|p| Some(*p)).collect();
    let p_init = warm_start(idx_init, w, n);
    let m = match_iterative_proj(&rays, &f.points, &all, &queries, &p_init, cfg);
    if cfg.radius == 0 {
        return Ok(PairMatches {
            idx: m.idx,
            valid: m.valid,
            refined: 0,
        });
    }
    let idx = refine_matches(
        &pred.frame_desc,
        f.width,
        f.height,
        pred.desc_dim,
        &pred.keyframe_desc,
        &m.idx,
        cfg.radius,
        cfg.dilation_max,
    );
    let refined = idx.iter().zip(&m.idx).filter(|(a, b)| a != b).count();
    Ok(PairMatches {
        idx,
        valid: m.valid,
        refined,
    })
}

/// Outcome of [`Tracker::track_pair`].
#[derive(Debug, Clone)]
pub struct PairTrack {
    /// Pose, statistics, keyframe decision and the fusion observation (`T_CkCf Xkf`, `Ckf`).
    pub result: TrackResult,
    /// The matches (warm start of the next frame against the same keyframe).
    pub matches: PairMatches,
    /// Matches used by the optimisation (valid, confident, `Qk > Q_conf`).
    pub used: usize,
}

/// Normal equations of the pair residuals at pose `t` (`T_CkCf`): keyframe pixel `q` against
/// frame pixel `idx[q]` where `used[q]`, information scaled by `qk[q]`. Summed in parallel in
/// fixed chunks ([`crate::par`]), so bit-identical whatever the thread count.
pub fn pair_normal_eq(
    fv: &LevelView,
    kv: &LevelView,
    idx: &[u32],
    used: &[bool],
    qk: &[f32],
    t: &Sim3,
    p: &ResidualParams,
) -> NormalEq {
    let eq = crate::par::chunked_reduce(
        kv.len(),
        crate::par::CHUNK,
        |range| {
            let mut eq = NormalEq::default();
            for q in range {
                if !used[q] {
                    continue;
                }
                let y = t.act(&fv.point(idx[q] as usize));
                if let Some(info) = point_info_weighted(kv, q, &y, p, qk[q] as f64) {
                    accumulate(&mut eq, &info, &residuals::point_jacobian(&y));
                }
            }
            eq
        },
        |a, b| a.merge(&b),
    );
    eq.unwrap_or_default()
}

/// The normal equations of a pair at a pose: `(fv, kv, idx, used, qk, t)` as [`pair_normal_eq`].
pub(crate) type PairNormalEq<'a> = dyn FnMut(&LevelView, &LevelView, &[u32], &[bool], &[f32], &Sim3) -> Result<NormalEq, SlamError>
    + 'a;

/// The pair prediction, the keyframe's pointmap and confidences, and the camera agree in size.
pub(crate) fn check_pair(
    pred: &PairPrediction,
    kf: &Pointmap,
    kf_conf: &[f32],
    cam: Option<PinholeCamera>,
) -> Result<(), SlamError> {
    pred.check()?;
    let f = &pred.frame;
    if (kf.width, kf.height) != (f.width, f.height) || kf_conf.len() != kf.len() {
        return Err(SlamError::InvalidInput(format!(
            "the pair prediction is {}x{} but the keyframe's pointmap is {}x{} ({} confidences)",
            f.width,
            f.height,
            kf.width,
            kf.height,
            kf_conf.len()
        )));
    }
    if let Some(c) = cam
        && (c.width as usize, c.height as usize) != (f.width, f.height)
    {
        return Err(SlamError::InvalidInput(format!(
            "the pair prediction is {}x{} but the camera is {}x{}",
            f.width, f.height, c.width, c.height
        )));
    }
    Ok(())
}

impl Tracker {
    /// Tracks the frame of `pred` against the keyframe it was decoded with (fused pointmap `kf`
    /// with average confidences `kf_conf`), starting from `t_init` (`T_CkCf`), as
    /// MASt3R-SLAM's `FrameTracker.track` (module docs). `idx_init` warm-starts the matching.
    /// Runs at the pointmap resolution, on the CPU.
    pub fn track_pair(
        &self,
        pred: &PairPrediction,
        kf: &Pointmap,
        kf_conf: &[f32],
        cam: Option<PinholeCamera>,
        t_init: &Sim3,
        idx_init: Option<&[u32]>,
    ) -> Result<PairTrack, SlamError> {
        check_pair(pred, kf, kf_conf, cam)?;
        let p = ResidualParams::tracking(&self.cfg);
        let start = std::time::Instant::now();
        let matches = match_pair(pred, &self.matching, idx_init)?;
        tracing::debug!(
            "pair matched on the CPU in {:.1} ms",
            start.elapsed().as_secs_f64() * 1e3
        );
        self.track_matched_pair(
            pred,
            kf,
            kf_conf,
            cam,
            t_init,
            matches,
            &mut |fv, kv, idx, used, qk, t| Ok(pair_normal_eq(fv, kv, idx, used, qk, t, &p)),
        )
    }

    /// The part of [`Tracker::track_pair`] after the matching: weighs and filters `matches`,
    /// then optimises with `normal_eq(fv, kv, idx, used, qk, t)` giving the normal equations at
    /// `t` (the CPU's [`pair_normal_eq`], or the GPU's in [`crate::kernels::track_pair_gpu`]).
    #[allow(clippy::too_many_arguments)] // track_pair's arguments plus the matches and the sums
    pub(crate) fn track_matched_pair(
        &self,
        pred: &PairPrediction,
        kf: &Pointmap,
        kf_conf: &[f32],
        cam: Option<PinholeCamera>,
        t_init: &Sim3,
        matches: PairMatches,
        normal_eq: &mut PairNormalEq<'_>,
    ) -> Result<PairTrack, SlamError> {
        let f = &pred.frame;
        let p = ResidualParams::tracking(&self.cfg);
        let start = std::time::Instant::now();
        // Frame: Xff with its confidence (a single observation, so average = Cff).
        let fv = LevelView::build(f, &f.conf, cam, 0, &p, false, false);
        let kv = LevelView::build(kf, kf_conf, cam, 0, &p, p.sigma_plane > 0.0, false);
        let n = kv.len();
        let q_conf = self.cfg.q_conf;
        // Per keyframe pixel, in parallel (element-wise, so the same as sequential).
        use rayon::prelude::*;
        let qk: Vec<f32> = (0..n)
            .into_par_iter()
            .with_min_len(4096)
            .map(|q| {
                (pred.frame_desc_conf[matches.idx[q] as usize] * pred.keyframe_desc_conf[q]).sqrt()
            })
            .collect();
        let used: Vec<bool> = (0..n)
            .into_par_iter()
            .with_min_len(4096)
            .map(|q| {
                matches.valid[q]
                    && fv.valid[matches.idx[q] as usize]
                    && kv.valid[q]
                    && qk[q] as f64 > q_conf
            })
            .collect();
        let n_used = used.par_iter().filter(|u| **u).count();
        let n_kf = (0..n)
            .into_par_iter()
            .filter(|&q| matches.valid[q] && qk[q] as f64 > q_conf)
            .count();
        let mut seen = vec![false; fv.len()];
        let mut n_unique = 0usize;
        for q in (0..n).filter(|&q| matches.valid[q]) {
            let s = &mut seen[matches.idx[q] as usize];
            n_unique += !*s as usize;
            *s = true;
        }
        let weighed_ms = start.elapsed().as_secs_f64() * 1e3;
        let match_frac = n_used as f64 / n as f64;
        let keyframe_frac = (n_kf as f64 / n as f64).min(n_unique as f64 / n as f64);
        let lost = match_frac < self.cfg.min_match_frac;
        let mut t = *t_init;
        let (mut iterations, mut cost) = (0, 0.0);
        let mut failed = None;
        let last_eq = if lost {
            None
        } else {
            self.iterate_level(0, &mut t, &mut iterations, &mut cost, |t| {
                match normal_eq(&fv, &kv, &matches.idx, &used, &qk, t) {
                    Ok(eq) => eq,
                    Err(e) => {
                        // No equations: the iteration stops, and the error is returned below.
                        failed = Some(e);
                        NormalEq::default()
                    }
                }
            })
        };
        if let Some(e) = failed {
            return Err(e);
        }
        let solved_ms = start.elapsed().as_secs_f64() * 1e3;
        let observation = (!lost).then(|| {
            let tq = crate::projective::Affine::from_sim3(&t);
            let mut obs = vec![[0.0f32; 3]; n];
            crate::par::fill_rows(&mut obs, kv.width, |u, v, q| {
                let x = pred.keyframe_points[q];
                let y = tq.act([x[0] as f64, x[1] as f64, x[2] as f64]);
                let y = match &kv.cam {
                    // Calibrated: keep the depth, on the keyframe pixel's ray.
                    Some(c) => c.unproject(&Vector2::new(u as f64, v as f64), y[2]),
                    None => Vector3::new(y[0], y[1], y[2]),
                };
                [y.x as f32, y.y as f32, y.z as f32]
            });
            (obs, pred.keyframe_conf.clone())
        });
        let mut result = TrackResult {
            t_kf_frame: t,
            match_frac,
            keyframe_frac,
            new_keyframe: !lost && keyframe_frac < self.cfg.match_frac_thresh,
            lost,
            observation,
            iterations,
            cost,
            constraint: 1.0,
            weak: false,
        };
        // Failure detection as for RGB-D (`tracking.min_constraint`; 0, upstream's behaviour,
        // only measures).
        self.judge(&mut result, last_eq.as_ref(), kf, kf_conf);
        tracing::trace!(
            "pair weighed and filtered at {weighed_ms:.2} ms, solved at {solved_ms:.2} ms, observation and judgement done at {:.2} ms",
            start.elapsed().as_secs_f64() * 1e3
        );
        if result.weak {
            result.new_keyframe = false;
        }
        Ok(PairTrack {
            result,
            matches,
            used: n_used,
        })
    }
}
