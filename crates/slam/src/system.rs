//! The SLAM system: front end, tracking, keyframes, relocalisation and the back end, in one
//! process with (optionally) one background thread (MASt3R-SLAM `main.py`).
//!
//! States: the first frame becomes keyframe 0 at the origin; then every frame is tracked
//! against the last keyframe, its pointmap fused into that keyframe, and it becomes a new
//! keyframe when the match fraction falls below `match_frac_thresh`. A frame with fewer than
//! `min_match_frac` matches switches to relocalisation, which tries the keyframes nearest to
//! the last known pose. Each new keyframe is handed to the back end, which adds the edge to
//! the previous keyframe and loop edges (pose proximity + view overlap) and runs Gauss-Newton
//! over the graph. With `single_thread` the back end runs inline, which makes runs
//! bit-identical; otherwise it runs in a background `std::thread` fed by a channel, adding the
//! keyframes that arrived while it was busy together. Frames can be decoded ahead of tracking
//! on loader threads ([`FrameSource::Prefetch`], bounded queue, in order); [`Timings`] reports
//! the time per phase. Per-pixel sums use rayon's global pool with fixed-chunk reductions
//! ([`crate::par`]), so they do not depend on the thread count.
//!
//! With a front end that decodes pairs ([`PointmapFrontEnd::pairs`], the MASt3R network) and
//! [`FrameSource::Inline`], frames are tracked as MASt3R-SLAM does ([`crate::pair`]): loading a
//! frame only encodes it; while tracking, the frame is decoded together with the current
//! keyframe (whose encoding the front end keeps: [`PairFrontEnd::retain`] is called after
//! every frame with the current keyframe's index) and tracked on that pair
//! ([`Tracker::track_pair`] on the CPU, or [`crate::kernels::track_pair_gpu`] when a GPU is given and the pair is uncalibrated); the first frame and relocalising frames are decoded
//! with themselves. The network runs on the tracking thread, where the keyframe a frame is
//! decoded with is known; decode time is counted as [`Timings::load_s`]. With
//! [`SlamConfig::decode_ahead`] (the default), each frame's pair is tracked on a thread (and,
//! on CUDA, a device stream) of its own while the tracking thread loads the next frame and
//! decodes it with the same keyframe, so the network and the tracker overlap (on the GPU the
//! pair's matching is queued on the tracking thread's stream just ahead of the next frame's
//! network, and the tracker's read-backs and Gauss-Newton iterations run beside the network;
//! with [`SlamConfig::encode_ahead`], also the default, the frame after is encoded right behind
//! that decoding, which is read back on a stream of its own: [`PairFrontEnd::queue_pair`]);
//! when the frame becomes a keyframe or tracking is lost, that decoding is dropped and the next
//! frame decoded again with the right keyframe, so the results are those of decoding in turn
//! (only the phase times overlap: their sum exceeds the wall time). [`FrameSource::Pipelined`]
//! keeps all that, and reads the frames and makes the network's input
//! ([`PairFrontEnd::preparer`]) ahead on loader threads. [`FrameSource::Prefetch`] loaders only
//! give pointmaps.
//!
//! Every frame keeps its pose relative to its keyframe, so the final trajectory (a pose for
//! every frame) uses the back end's final keyframe poses. `local_opt.final_iters` adds one
//! whole-graph optimisation after the last frame (off by default). [`run_slam_with`] tracks
//! frames with the GPU kernels instead of the CPU code.
//!
//! Relocalisation (without learned retrieval): the lost frame is tracked against the
//! `retrieval.k` keyframes nearest to the last known pose, starting from that pose; it succeeds
//! when the match fraction reaches `reloc.min_match_frac` (for every candidate when
//! `reloc.strict`), and the frame becomes a keyframe connected to those candidates.
//!
//! Learned retrieval (a pair front end whose [`PairFrontEnd::retrieve`] answers, MASt3R-SLAM's
//! `RetrievalDatabase`): each new keyframe queries the database and joins it; the retrieved
//! keyframes but the previous one are decoded as pairs with it and become loop edges when the
//! match fraction reaches `local_opt.min_match_frac` (no pose-proximity candidates then). A lost
//! frame queries without joining and relocalises on the retrieved keyframes, decoded as pairs and
//! tracked from the identity. Frames lost until then keep `tracked == false` (no pose in the
//! trajectory).

use std::collections::HashMap;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use rust3r_geometry::{PinholeCamera, Sim3};
use rust3r_io::datasets::Dataset;

use crate::SlamError;
use crate::backend::{Edge, KeyframeView, optimize, overlap};
use crate::config::SlamConfig;
use crate::keyframes::{Keyframe, KeyframeStore};
use crate::model::{ModelSource, render_model};
use crate::pair::{PairFrontEnd, PairPrediction, PreparedInput};
use crate::pointmap::{Pointmap, PointmapFrontEnd};
use crate::tracker::{LevelView, ResidualParams, TrackResult, Tracker};

/// Smallest fraction of pixels the frame-to-model view must cover; below it the frame is
/// tracked against the keyframe alone.
const MODEL_MIN_COVERAGE: f64 = 0.3;

/// What the system is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrackingState {
    /// Waiting for the first frame.
    Init,
    /// Tracking against the last keyframe.
    Tracking,
    /// Lost: looking for a keyframe to relocalise against.
    Relocalising,
}

impl std::fmt::Display for TrackingState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Init => "init",
            Self::Tracking => "tracking",
            Self::Relocalising => "relocalising",
        })
    }
}

/// Pose record of one frame.
#[derive(Debug, Clone, PartialEq)]
pub struct FrameRecord {
    /// Index in the data set (after the stride).
    pub index: usize,
    /// Timestamp (s).
    pub timestamp: f64,
    /// Keyframe the pose is relative to.
    pub keyframe: usize,
    /// Pose of the frame in the keyframe's camera (`T_CkCf`).
    pub t_kf_frame: Sim3,
    /// Whether the frame was tracked (false: lost; the pose is the last known one).
    pub tracked: bool,
    /// Tracked, but flagged as poorly constrained ([`crate::tracker::TrackResult::weak`]): the
    /// pose is the solver's best, it was neither fused nor made a keyframe.
    pub weak: bool,
    /// Colour image file.
    pub rgb_path: std::path::PathBuf,
}

impl FrameRecord {
    /// The record of frame `index` that has just become keyframe `keyframe` (tracked, at the
    /// keyframe's own pose).
    fn new_keyframe(
        index: usize,
        timestamp: f64,
        keyframe: usize,
        rgb_path: &std::path::Path,
    ) -> Self {
        Self {
            index,
            timestamp,
            keyframe,
            t_kf_frame: Sim3::identity(),
            tracked: true,
            weak: false,
            rgb_path: rgb_path.to_path_buf(),
        }
    }
}

/// Result of a run.
#[derive(Debug, Clone)]
pub struct SlamResult {
    /// One record per processed frame.
    pub frames: Vec<FrameRecord>,
    /// Keyframes with their final poses and fused pointmaps.
    pub keyframes: KeyframeStore,
    /// Back-end edges.
    pub edges: Vec<Edge>,
    /// Calibration of the pointmaps (None: uncalibrated).
    pub camera: Option<PinholeCamera>,
    /// Number of back-end optimisations run.
    pub backend_runs: usize,
    /// Largest keyframe-store size in bytes seen.
    pub keyframe_bytes: usize,
    /// Time per phase.
    pub timings: Timings,
    /// Frames tracked on a network pair (frame, keyframe) ([`crate::pair`]).
    pub pair_frames: usize,
    /// Matches moved by the descriptor refinement, summed over those frames.
    pub refined_matches: usize,
    /// Successful relocalisations.
    pub relocalisations: usize,
    /// Loop edges found by learned retrieval and verified on the network's pair.
    pub loop_closures: usize,
}

impl SlamResult {
    /// Camera-to-world pose of every frame: its keyframe's final pose composed with the
    /// frame's relative pose.
    pub fn frame_poses(&self) -> Vec<(f64, Sim3)> {
        self.frames
            .iter()
            .map(|f| {
                (
                    f.timestamp,
                    self.keyframes.frames[f.keyframe]
                        .t_wc
                        .compose(&f.t_kf_frame),
                )
            })
            .collect()
    }

    /// Keyframe poses as `(timestamp, T_WC)`.
    pub fn keyframe_poses(&self) -> Vec<(f64, Sim3)> {
        self.keyframes
            .frames
            .iter()
            .map(|k| (k.timestamp, k.t_wc))
            .collect()
    }
}

/// Progress report after each frame, with what a live view needs.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    /// Frames processed.
    pub frame: usize,
    /// Frames to process.
    pub total: usize,
    /// Timestamp of this frame (s), as the trajectory files write it.
    pub timestamp: f64,
    /// Keyframes so far.
    pub keyframes: usize,
    /// State after the frame.
    pub state: TrackingState,
    /// Camera-to-world pose of this frame (its keyframe's current pose composed with the frame's
    /// relative pose; the last known pose when the frame was lost).
    pub pose: Sim3,
    /// Colour image file of this frame.
    pub rgb_path: std::path::PathBuf,
    /// A keyframe created at this frame: its index and pointmap (in its own camera frame).
    pub new_keyframe: Option<(usize, Arc<Pointmap>)>,
    /// Every keyframe's camera-to-world pose and the back-end edges `(i, j)`, reported when a
    /// keyframe was added or the back end finished an optimisation since the previous report.
    #[allow(clippy::type_complexity)]
    pub graph: Option<(Vec<Sim3>, Vec<(usize, usize)>)>,
}

struct Shared {
    store: KeyframeStore,
    edges: Vec<Edge>,
    runs: usize,
    /// Seconds spent in back-end optimisations.
    backend_s: f64,
}

/// A new keyframe for the back end.
#[derive(Debug, Clone, Default)]
struct NewKeyframe {
    k: usize,
    /// Keyframes to connect it to (relocalisation partners).
    extra: Vec<usize>,
    /// Loops verified on network pairs (learned retrieval): keyframe `j` and `T_CjCk`.
    loops: Vec<(usize, Sim3)>,
    /// Learned retrieval looked for this keyframe's loops: no pose-proximity candidates.
    retrieved: bool,
}

impl NewKeyframe {
    fn plain(k: usize) -> Self {
        NewKeyframe {
            k,
            ..Default::default()
        }
    }
}

enum Msg {
    /// A new keyframe.
    Keyframe(NewKeyframe),
    /// The last optimisation over the whole graph.
    Final,
    Stop,
}

/// A cached back-end view of a keyframe: the keyframe's `n_updates` it was built at, the view
/// and its intensity image (when the back end's photometric term is on).
type ViewCacheEntry = (
    u32,
    LevelView,
    Option<Arc<crate::photometric::IntensityImage>>,
);

/// The back end: edge creation and optimisation, with a cache of keyframe views.
struct Backend {
    cfg: SlamConfig,
    cam: Option<PinholeCamera>,
    optimize_scale: bool,
    /// View cache: (keyframe, level) -> (n_updates it was built at, view, intensity image).
    cache: HashMap<(usize, usize), ViewCacheEntry>,
}

impl Backend {
    fn params(&self) -> ResidualParams {
        ResidualParams::local_opt(&self.cfg.local_opt, self.cfg.tracking.huber)
    }

    /// Adds the edges of the keyframes in `batch` (keyframe, relocalisation partners) and
    /// optimises once; an empty batch is the final optimisation of the whole graph with
    /// `final_iters` iterations and no new edges. The back-end thread batches keyframes that
    /// arrived while it was busy; inline (single-thread) batches hold one keyframe.
    fn process(&mut self, shared: &Mutex<Shared>, batch: &[NewKeyframe]) {
        let start = std::time::Instant::now();
        self.process_inner(shared, batch);
        shared.lock().expect("back-end lock").backend_s += start.elapsed().as_secs_f64();
    }

    fn process_inner(&mut self, shared: &Mutex<Shared>, batch: &[NewKeyframe]) {
        let (snapshot, descriptors, mut edges) = {
            let s = shared.lock().expect("back-end lock");
            let snap: Vec<(Sim3, Arc<Pointmap>, u32, Vec<f32>)> = s
                .store
                .frames
                .iter()
                .map(|kf| {
                    (
                        kf.t_wc,
                        kf.pointmap.clone(),
                        kf.n_updates,
                        kf.average_conf(),
                    )
                })
                .collect();
            let descriptors: Vec<Arc<crate::appearance::Descriptor>> = s
                .store
                .frames
                .iter()
                .map(|kf| kf.descriptor.clone())
                .collect();
            (snap, descriptors, s.edges.clone())
        };
        if batch.iter().any(|b| b.k >= snapshot.len()) || snapshot.is_empty() {
            return;
        }
        let p = self.params();
        let level = self.cfg.rgbd.backend_level;
        let photo = self.cfg.local_opt.sigma_photo > 0.0;
        let views_at = |cache: &mut HashMap<(usize, usize), ViewCacheEntry>,
                        level: usize|
         -> Vec<KeyframeView> {
            let mut views = Vec::with_capacity(snapshot.len());
            for (i, (t, pm, nu, conf)) in snapshot.iter().enumerate() {
                let fresh = matches!(cache.get(&(i, level)), Some((stamp, _, _)) if stamp == nu);
                if !fresh {
                    let with_rays = !(self.cfg.matching.projective && self.cam.is_some());
                    let v = LevelView::build(
                        pm,
                        conf,
                        self.cam,
                        level,
                        &p,
                        p.sigma_plane > 0.0,
                        with_rays,
                    );
                    let intensity = if photo {
                        crate::backend::intensity_at(pm, level)
                    } else {
                        None
                    };
                    cache.insert((i, level), (*nu, v, intensity));
                }
                let (_, view, intensity) = &cache[&(i, level)];
                views.push(KeyframeView {
                    t_wc: *t,
                    view: view.clone(),
                    intensity: intensity.clone(),
                });
            }
            views
        };
        let mut views = views_at(&mut self.cache, level);
        // Edges: previous keyframe, relocalisation partners, loop candidates.
        let mut new_edges: Vec<Edge> = Vec::new();
        let add = |a: usize, b: usize, list: &mut Vec<Edge>| {
            let e = Edge {
                i: a.min(b),
                j: a.max(b),
            };
            if a != b && !edges.contains(&e) && !list.contains(&e) {
                list.push(e);
            }
        };
        let mut local = self.cfg.local_opt.clone();
        if batch.is_empty() {
            if local.final_iters == 0 {
                return;
            }
            local.max_iters = local.final_iters;
            local.window_size = usize::MAX;
        }
        let mut corrected = false;
        for nk in batch {
            let k = nk.k;
            if k > 0 {
                add(k - 1, k, &mut new_edges);
            }
            for &j in &nk.extra {
                add(j, k, &mut new_edges);
            }
            // Loops found by learned retrieval and verified on the network's pair: move the
            // graph to the verified pose first (the dense association needs poses near it),
            // when the two keyframes' views overlap better there than at the current poses.
            for (j, t_jk) in &nk.loops {
                if *j < k {
                    tracing::info!("loop closure by retrieval: keyframe {k} with keyframe {j}");
                    corrected |= self.checked_correction(&mut views, *j, k, t_jk);
                }
                add(*j, k, &mut new_edges);
            }
            if nk.retrieved {
                continue;
            }
            let near = self.loop_candidates(&views, k);
            for &j in &near {
                add(j, k, &mut new_edges);
            }
            if let Some((j, t_jk)) = self.appearance_loop(&snapshot, &descriptors, &views, k, &near)
            {
                tracing::info!("loop closure by appearance: keyframe {k} with keyframe {j}");
                corrected |= spread_correction(&mut views, j, k, &t_jk);
                add(j, k, &mut new_edges);
            }
        }
        let k = batch.last().map_or(views.len() - 1, |b| b.k);
        edges.extend(new_edges.iter().copied());
        let first_free = local.pin.max(views.len().saturating_sub(local.window_size));
        // The store's poses as read: the loop corrections above and the optimisation below
        // are both applied to the store as the change from these.
        let before: Vec<Sim3> = snapshot.iter().map(|s| s.0).collect();
        // Coarse to fine: the first `coarse_iters` iterations on the next coarser level.
        let coarse = local.coarse_iters.min(local.max_iters.saturating_sub(1));
        if coarse > 0 {
            let mut cv = views_at(&mut self.cache, level + 1);
            let mut lc = local.clone();
            lc.max_iters = coarse;
            if optimize(
                &mut cv,
                &edges,
                first_free,
                &lc,
                &self.cfg.matching,
                self.cfg.tracking.huber,
                self.optimize_scale,
            )
            .is_some()
            {
                for (v, c) in views.iter_mut().zip(&cv) {
                    v.t_wc = c.t_wc;
                }
            }
            local.max_iters -= coarse;
        }
        let report = optimize(
            &mut views,
            &edges,
            first_free,
            &local,
            &self.cfg.matching,
            self.cfg.tracking.huber,
            self.optimize_scale,
        );
        if let Some(r) = &report {
            tracing::debug!(
                "back end: keyframe {k}, {} edges, {} iterations, cost {:.1} -> {:.1}",
                edges.len(),
                r.iterations,
                r.initial_cost,
                r.final_cost
            );
        }
        let mut s = shared.lock().expect("back-end lock");
        let moved = report.is_some() || corrected;
        for (i, v) in views.iter().enumerate().skip(first_free) {
            if moved && i < s.store.frames.len() {
                // Apply the correction, keeping changes made meanwhile by the tracker (none to
                // poses of existing keyframes).
                let delta = v.t_wc.compose(&before[i].inverse());
                s.store.frames[i].t_wc = delta.compose(&s.store.frames[i].t_wc);
            }
        }
        // Keyframes added while optimising move with their predecessor.
        let n_now = s.store.frames.len();
        if n_now > views.len() && moved {
            let last = views.len() - 1;
            let delta = views[last].t_wc.compose(&before[last].inverse());
            for i in views.len()..n_now {
                s.store.frames[i].t_wc = delta.compose(&s.store.frames[i].t_wc);
            }
        }
        s.edges.extend(new_edges);
        s.runs += 1;
    }

    /// [`spread_correction`] for the loop `T_CjCk` when it makes keyframes `j` and `k` overlap
    /// better than the current poses do ([`overlap`], as [`Backend::loop_candidates`] scores
    /// them); otherwise the poses stay. A pair tracked
    /// from the identity can converge to a wrong pose that still passes the match-fraction
    /// test on its own pair (redkitchen out and back with exact pairs: corrections of 0.2-1 m
    /// where the drift was a few centimetres), and moving the graph there wrecks it.
    fn checked_correction(
        &self,
        views: &mut [KeyframeView],
        j: usize,
        k: usize,
        t_jk: &Sim3,
    ) -> bool {
        let overlap_of = |v: &[KeyframeView]| overlap(&v[j], &v[k], &self.cfg.matching);
        let before = overlap_of(views);
        let poses: Vec<Sim3> = views.iter().map(|v| v.t_wc).collect();
        if !spread_correction(views, j, k, t_jk) {
            return false;
        }
        let after = overlap_of(views);
        tracing::debug!(
            "loop {j}-{k}: overlap {before:.3} at the current poses, {after:.3} at the verified one"
        );
        if after > before {
            return true;
        }
        for (v, p) in views.iter_mut().zip(poses) {
            v.t_wc = p;
        }
        false
    }

    /// A loop of keyframe `k` found by appearance (`retrieval.appearance`, calibrated views): the
    /// most similar earlier keyframe `j` (not among the `exclude_recent` before `k`, nor in
    /// `skip`, the candidates found by pose) against which `k` tracks with a match fraction of
    /// at least `reloc.min_match_frac` and a well-constrained pose, starting from the identity
    /// (similar views) and from the current estimate. Returns `j` and the verified `T_CjCk`.
    fn appearance_loop(
        &self,
        snapshot: &[(Sim3, Arc<Pointmap>, u32, Vec<f32>)],
        descriptors: &[Arc<crate::appearance::Descriptor>],
        views: &[KeyframeView],
        k: usize,
        skip: &[usize],
    ) -> Option<(usize, Sim3)> {
        let r = &self.cfg.retrieval;
        if !r.appearance || self.cam.is_none() || k >= descriptors.len() || k >= snapshot.len() {
            return None;
        }
        let cands = crate::appearance::most_similar(
            &descriptors[k],
            &descriptors[..k],
            r.k,
            r.min_similarity,
            |j| j + r.exclude_recent < k && !skip.contains(&j),
        );
        let tracker = Tracker {
            cfg: self.cfg.tracking.clone(),
            matching: self.cfg.matching.clone(),
            levels: self.cfg.rgbd.pyramid_levels,
            optimize_scale: self.optimize_scale,
        };
        let (_, pm_k, _, conf_k) = &snapshot[k];
        for (j, sim) in cands {
            let (_, pm_j, _, conf_j) = &snapshot[j];
            let current = views[j].t_wc.inverse().compose(&views[k].t_wc);
            for t_init in [Sim3::identity(), current] {
                let res = tracker.track(pm_k, conf_k, pm_j, conf_j, self.cam, &t_init);
                tracing::debug!(
                    "appearance candidate {j} for keyframe {k}: similarity {sim:.3}, match {:.3}, constraint {:.2e}",
                    res.match_frac,
                    res.constraint
                );
                if !res.lost && !res.weak && res.match_frac >= self.cfg.reloc.min_match_frac {
                    return Some((j, res.t_kf_frame));
                }
            }
        }
        None
    }

    /// Up to `retrieval.k` earlier keyframes (not `k - 1`) near `k` in position and viewing
    /// direction whose views overlap `k`'s by at least `local_opt.min_match_frac` both ways.
    fn loop_candidates(&self, views: &[KeyframeView], k: usize) -> Vec<usize> {
        let r = &self.cfg.retrieval;
        let tk = &views[k].t_wc;
        let zk = tk.rotation * nalgebra::Vector3::z();
        let mut near: Vec<(f64, usize)> = Vec::new();
        for (j, v) in views.iter().enumerate().take(k.saturating_sub(1)) {
            let d = (v.t_wc.translation - tk.translation).norm();
            let zj = v.t_wc.rotation * nalgebra::Vector3::z();
            let angle = zk.dot(&zj).clamp(-1.0, 1.0).acos().to_degrees();
            if d <= r.max_distance && angle <= r.max_angle_deg {
                near.push((d, j));
            }
        }
        near.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let mut out = Vec::new();
        for &(_, j) in near.iter().take(2 * r.k) {
            let score = overlap(&views[j], &views[k], &self.cfg.matching);
            if score >= self.cfg.local_opt.min_match_frac && score >= r.min_thresh {
                out.push(j);
                if out.len() >= r.k {
                    break;
                }
            }
        }
        out
    }
}

/// Moves keyframe `k` to where the verified loop `T_CjCk` puts it and spreads the correction
/// along the keyframes after `j`, so that the dense back end starts from poses its association
/// can work from: keyframe `m` turns about keyframe `k`'s camera centre by the fraction
/// `a = (m - j) / (k - j)` of the rotation and moves by `a` of `k`'s displacement (later
/// keyframes by all of it). Keyframe `k` lands exactly on the loop's pose and those near `j`
/// barely move. Returns whether anything moved (corrections below 1 cm and 0.5 degrees are
/// left to the back end).
fn spread_correction(views: &mut [KeyframeView], j: usize, k: usize, t_jk: &Sim3) -> bool {
    let target = views[j].t_wc.compose(t_jk);
    let rot = target.rotation * views[k].t_wc.rotation.inverse();
    let (c, c_target) = (views[k].t_wc.translation, target.translation);
    if (c_target - c).norm() < 0.01 && rot.angle().to_degrees() < 0.5 {
        return false;
    }
    for (m, v) in views.iter_mut().enumerate().skip(j + 1) {
        let a = ((m - j) as f64 / (k - j) as f64).min(1.0);
        let ra = rot.powf(a);
        let to_pivot = Sim3::new(nalgebra::UnitQuaternion::identity(), -c, 1.0);
        let turn_and_move = Sim3::new(ra, c + (c_target - c) * a, 1.0);
        v.t_wc = turn_and_move.compose(&to_pivot).compose(&v.t_wc);
    }
    true
}

/// A relocalisation candidate: sort key, keyframe, its pose, pointmap and image.
type RelocCandidate<K> = (K, usize, Sim3, Arc<Pointmap>, Vec<f32>);

#[allow(clippy::large_enum_variant)] // one per SLAM run
enum BackendRunner {
    Inline(Backend),
    Thread {
        tx: Sender<Msg>,
        handle: Option<JoinHandle<()>>,
    },
}

impl BackendRunner {
    fn notify(&mut self, shared: &Arc<Mutex<Shared>>, nk: NewKeyframe) {
        match self {
            Self::Inline(b) => b.process(shared, &[nk]),
            Self::Thread { tx, .. } => {
                // A closed channel means the thread died; its panic surfaces at join.
                let _ = tx.send(Msg::Keyframe(nk));
            }
        }
    }

    fn finish(&mut self, shared: &Arc<Mutex<Shared>>) -> Result<(), SlamError> {
        if let Self::Inline(b) = self {
            b.process(shared, &[]);
        }
        if let Self::Thread { tx, handle } = self {
            let _ = tx.send(Msg::Final);
            let _ = tx.send(Msg::Stop);
            if let Some(h) = handle.take() {
                h.join()
                    .map_err(|_| SlamError::Backend("the back-end thread panicked".into()))?;
            }
        }
        Ok(())
    }
}

impl BackendRunner {
    /// Stops the thread without the final optimisation (after an error).
    fn finish_quietly(&mut self) -> Result<(), SlamError> {
        if let Self::Thread { tx, handle } = self {
            let _ = tx.send(Msg::Stop);
            if let Some(h) = handle.take() {
                h.join()
                    .map_err(|_| SlamError::Backend("the back-end thread panicked".into()))?;
            }
        }
        Ok(())
    }
}

fn spawn_backend(mut b: Backend, shared: Arc<Mutex<Shared>>, rx: Receiver<Msg>) -> JoinHandle<()> {
    std::thread::Builder::new()
        .name("rust3r-backend".into())
        .spawn(move || {
            // The back end's per-pixel sums share rayon's global pool with tracking: both
            // submit short parallel calls (one edge direction, one Gauss-Newton iteration), so
            // they interleave at chunk granularity and neither waits for the other's whole
            // optimisation; after the last frame the back end has every core.
            let run = |b: &mut Backend, batch: &[NewKeyframe]| b.process(&shared, batch);
            let mut pending: Vec<Msg> = Vec::new();
            loop {
                if pending.is_empty() {
                    match rx.recv() {
                        Ok(m) => pending.push(m),
                        Err(_) => break,
                    }
                }
                // Keyframes that arrived while the last optimisation ran are added together
                // and optimised once, so the back end never falls behind tracking.
                pending.extend(rx.try_iter());
                let mut batch = Vec::new();
                let mut rest = std::mem::take(&mut pending).into_iter();
                let mut next = None;
                for m in rest.by_ref() {
                    match m {
                        Msg::Keyframe(nk) => batch.push(nk),
                        other => {
                            next = Some(other);
                            break;
                        }
                    }
                }
                if !batch.is_empty() {
                    run(&mut b, &batch);
                }
                match next {
                    Some(Msg::Final) => run(&mut b, &[]),
                    Some(Msg::Stop) => break,
                    _ => {}
                }
                pending.extend(rest);
            }
        })
        .expect("spawning the back-end thread")
}

/// Runs SLAM over frames `0..max_frames` of `dataset` on the CPU.
pub fn run_slam(
    dataset: &dyn Dataset,
    front: &mut dyn PointmapFrontEnd,
    cfg: &SlamConfig,
    max_frames: Option<usize>,
    progress: impl FnMut(&Progress),
) -> Result<SlamResult, SlamError> {
    run_slam_with(dataset, front, cfg, max_frames, None, progress)
}

/// [`run_slam`], with frame tracking on `gpu` when given (calibrated front ends, and network
/// pairs without a calibration; the back end stays on the CPU).
pub fn run_slam_with(
    dataset: &dyn Dataset,
    front: &mut dyn PointmapFrontEnd,
    cfg: &SlamConfig,
    max_frames: Option<usize>,
    gpu: Option<&rust3r_gpu::Gpu>,
    progress: impl FnMut(&Progress),
) -> Result<SlamResult, SlamError> {
    run_slam_source(
        FrameSource::Inline { dataset, front },
        cfg,
        max_frames,
        gpu,
        progress,
    )
}

/// Where the frames' pointmaps come from.
pub enum FrameSource<'a> {
    /// Decoded and turned into pointmaps on the tracking thread.
    Inline {
        /// The data set.
        dataset: &'a dyn Dataset,
        /// Its front end.
        front: &'a mut dyn PointmapFrontEnd,
    },
    /// Decoded and turned into pointmaps on loader threads, one per entry of `loaders` (each
    /// with its own handle on the same data set and its own front end; loader `k` takes frames
    /// `k, k + L, ...`), at most `ahead` frames ahead of tracking (bounded memory). Frames reach
    /// tracking in order, so results equal those of [`FrameSource::Inline`].
    Prefetch {
        /// Data set handles and front ends, one pair per loader thread (at least one).
        loaders: Vec<(Box<dyn Dataset>, Box<dyn PointmapFrontEnd>)>,
        /// Queue bound in frames.
        ahead: usize,
    },
    /// As [`FrameSource::Inline`] (the front end stays on the tracking thread, pairs are
    /// decoded there), with each frame read and its network input prepared
    /// ([`PairFrontEnd::preparer`]: resizing, normalisation) on loader threads, one per entry
    /// of `datasets` (loader `k` takes frames `k, k + L, ...`), at most `ahead` frames ahead of
    /// tracking (bounded queues, taken in order). Results equal [`FrameSource::Inline`]'s.
    Pipelined {
        /// Handles on the same data set, one per loader thread (at least one), moved there.
        datasets: Vec<Box<dyn Dataset>>,
        /// Its front end.
        front: &'a mut dyn PointmapFrontEnd,
        /// Queue bound in frames (at least 1).
        ahead: usize,
    },
}

impl FrameSource<'_> {
    /// Loader threads for a machine of this many cores: a quarter of them, 1 to 4 (the
    /// tracking thread, the back end and rayon's pool share the rest).
    pub fn default_loaders() -> usize {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        (cores / 4).clamp(1, 4)
    }
}

/// Wall-clock seconds per phase of a run.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Timings {
    /// Decoding and pointmap construction (summed over loader threads when prefetching),
    /// network pair decoding included; with [`FrameSource::Pipelined`] the tracking thread's
    /// part (encoding and decoding).
    pub load_s: f64,
    /// Reading frames and preparing their network input on the loader threads (summed over them)
    /// ([`FrameSource::Pipelined`]; overlaps the tracking thread).
    pub prepare_s: f64,
    /// Tracking thread waiting for decoded frames (prefetching, pipelining).
    pub wait_frames_s: f64,
    /// Frame-to-keyframe tracking (with [`SlamConfig::decode_ahead`], on its own thread while
    /// the tracking thread decodes the next frame: the two overlap).
    pub track_s: f64,
    /// Wall time during which a frame was tracked while the next was decoded
    /// ([`SlamConfig::decode_ahead`]).
    pub overlap_s: f64,
    /// Fusion, keyframe creation and bookkeeping on the tracking thread.
    pub map_s: f64,
    /// Back-end optimisations (on the back-end thread, or inline with `single_thread`).
    pub backend_s: f64,
    /// Tracking thread waiting for the back end to finish after the last frame.
    pub backend_wait_s: f64,
}

/// What the tracking loop keeps of a frame.
struct FrameMeta {
    timestamp: f64,
    rgb_path: std::path::PathBuf,
}

/// A frame ready for tracking.
struct Loaded {
    timestamp: f64,
    rgb_path: std::path::PathBuf,
    /// The frame's pointmap; `None` when the front end decodes pairs: the frame is then only
    /// encoded, and decoded when tracking knows with which keyframe.
    pm: Option<Pointmap>,
    load_s: f64,
}

fn load(
    dataset: &dyn Dataset,
    front: &mut dyn PointmapFrontEnd,
    i: usize,
    pairs: bool,
) -> Result<Loaded, SlamError> {
    let start = std::time::Instant::now();
    let frame = dataset.frame(i)?;
    let read_s = start.elapsed().as_secs_f64();
    let pm = match front.pairs().filter(|_| pairs) {
        Some(p) => {
            p.encode(i, &frame)?;
            None
        }
        None => Some(front.pointmap(&frame)?),
    };
    let load_s = start.elapsed().as_secs_f64();
    tracing::debug!(
        "frame {i} load: read_ms={:.2} front_ms={:.2}",
        read_s * 1e3,
        (load_s - read_s) * 1e3
    );
    Ok(Loaded {
        timestamp: frame.timestamp,
        rgb_path: frame.rgb_path,
        pm,
        load_s,
    })
}

/// Frame `index` loaded (encoded) ahead of its turn, and decoded as a pair with the keyframe
/// of data-set index `.0` of `pair` ([`SlamConfig::decode_ahead`]); errors wait for its turn.
/// `next`: frame `index + 1` loaded (encoded) behind that decoding
/// ([`SlamConfig::encode_ahead`]).
struct Ahead {
    index: usize,
    loaded: Result<Loaded, SlamError>,
    pair: Option<(usize, Result<PairPrediction, SlamError>)>,
    next: Option<Result<Loaded, SlamError>>,
}

/// Frame `i`: the one loaded ahead (`early`, taken when it is frame `i`), else loaded now.
fn next_frame(
    source: &mut Source<'_>,
    early: &mut Option<(usize, Result<Loaded, SlamError>)>,
    i: usize,
) -> Result<Loaded, SlamError> {
    match early.take() {
        Some((j, loaded)) if j == i => loaded,
        other => {
            debug_assert!(other.is_none(), "frame loaded ahead out of turn");
            *early = other;
            source.next(i)
        }
    }
}

/// Loads frame `n` and decodes it with keyframe `kf` (a data-set index), adding the decoding
/// time to `decode_s`; with `encode_next`, loads (encodes) frame `n + 1` while that decoding
/// is on the device, before reading it back.
fn load_ahead(
    source: &mut Source<'_>,
    early: &mut Option<(usize, Result<Loaded, SlamError>)>,
    n: usize,
    kf: usize,
    decode_s: &mut f64,
    encode_next: bool,
) -> Ahead {
    let loaded = next_frame(source, early, n);
    let queued = match (&loaded, source.pairs()) {
        (Ok(_), Some(p)) => Some(timed(decode_s, || p.queue_pair(n, kf))),
        _ => None,
    };
    // The next encoding goes on the device behind this decoding; its time is loading's.
    let next = (encode_next && queued.is_some()).then(|| source.next(n + 1));
    let pair = queued.map(|q| (kf, timed(decode_s, || q.finish())));
    Ahead {
        index: n,
        loaded,
        pair,
        next,
    }
}

/// One loader thread per element of `loaders` in `scope`: loader `k` makes frames `k`,
/// `k + L`, ... below `total` with `make(&mut loader, i)` (the frame and the seconds it took),
/// sends them through a channel of `ahead / L` frames and stops after an error or when the
/// receiver is gone (tracking stopped early); the seconds are added to `spent` at its end.
/// Returns the receivers, loader `k`'s at `k`.
fn spawn_loaders<'scope, L, T>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    loaders: Vec<L>,
    total: usize,
    ahead: usize,
    spent: &Arc<Mutex<f64>>,
    make: impl Fn(&mut L, usize) -> (Result<T, SlamError>, f64) + Clone + Send + 'scope,
) -> Vec<Receiver<Result<T, SlamError>>>
where
    L: Send + 'scope,
    T: Send + 'scope,
{
    let nl = loaders.len();
    let bound = ahead.div_ceil(nl).max(1);
    loaders
        .into_iter()
        .enumerate()
        .map(|(k, mut loader)| {
            let (tx, rx) = std::sync::mpsc::sync_channel(bound);
            let (spent, make) = (spent.clone(), make.clone());
            std::thread::Builder::new()
                .name(format!("rust3r-loader-{k}"))
                .spawn_scoped(scope, move || {
                    let mut total_s = 0.0;
                    for i in (k..total).step_by(nl) {
                        let (item, s) = make(&mut loader, i);
                        total_s += s;
                        let stop = item.is_err();
                        if tx.send(item).is_err() || stop {
                            break;
                        }
                    }
                    *spent.lock().expect("timing lock") += total_s;
                })
                .expect("spawning a frame loader thread");
            rx
        })
        .collect()
}

/// A frame read, with its network input, on the loader thread of [`FrameSource::Pipelined`].
type PreparedFrame = Result<(rust3r_io::datasets::Frame, Option<PreparedInput>), SlamError>;

enum Source<'a> {
    /// The front end on the tracking thread; `bool`: track on network pairs.
    Inline(&'a dyn Dataset, &'a mut dyn PointmapFrontEnd, bool),
    /// Frames read and prepared on loader threads (frame `i` from `i % L`), encoded on this
    /// one; `bool` as `Inline`.
    Pipelined(
        Vec<Receiver<PreparedFrame>>,
        &'a mut dyn PointmapFrontEnd,
        bool,
    ),
    Channels(Vec<std::sync::mpsc::Receiver<Result<Loaded, SlamError>>>),
}

impl Source<'_> {
    /// Whether the front end runs on the tracking thread ([`Loaded::load_s`] is spent there).
    fn loads_here(&self) -> bool {
        !matches!(self, Self::Channels(_))
    }

    fn next(&mut self, i: usize) -> Result<Loaded, SlamError> {
        match self {
            Self::Inline(d, f, pairs) => load(*d, &mut **f, i, *pairs),
            Self::Pipelined(rx, f, pairs) => {
                let n = rx.len();
                let (frame, input) = rx[i % n]
                    .recv()
                    .map_err(|_| SlamError::Backend("a frame loader thread stopped".into()))??;
                let start = std::time::Instant::now();
                let pm = match f.pairs().filter(|_| *pairs) {
                    Some(p) => {
                        p.encode_prepared(i, &frame, input)?;
                        None
                    }
                    None => Some(f.pointmap(&frame)?),
                };
                let load_s = start.elapsed().as_secs_f64();
                tracing::debug!("frame {i} load: front_ms={:.2}", load_s * 1e3);
                Ok(Loaded {
                    timestamp: frame.timestamp,
                    rgb_path: frame.rgb_path,
                    pm,
                    load_s,
                })
            }
            Self::Channels(rx) => {
                let n = rx.len();
                rx[i % n]
                    .recv()
                    .map_err(|_| SlamError::Backend("a frame loader thread stopped".into()))?
            }
        }
    }

    /// The pair decoder when frames are tracked on network pairs.
    fn pairs(&mut self) -> Option<&mut dyn PairFrontEnd> {
        match self {
            Self::Inline(_, f, true) | Self::Pipelined(_, f, true) => f.pairs(),
            _ => None,
        }
    }

    /// The pointmap of frame `i`: the loaded one, or (pair tracking) the encoded frame decoded
    /// with itself.
    fn pointmap(&mut self, i: usize, pm: Option<Pointmap>) -> Result<Pointmap, SlamError> {
        match (pm, self.pairs()) {
            (Some(pm), _) => Ok(pm),
            (None, Some(p)) => p.mono(i),
            (None, None) => Err(SlamError::Backend(format!(
                "frame {i} was neither decoded nor encoded"
            ))),
        }
    }
}

/// [`run_slam_with`] with frames from `source` (see [`FrameSource::Prefetch`] for decoding
/// ahead on loader threads).
pub fn run_slam_source(
    source: FrameSource<'_>,
    cfg: &SlamConfig,
    max_frames: Option<usize>,
    gpu: Option<&rust3r_gpu::Gpu>,
    mut progress: impl FnMut(&Progress),
) -> Result<SlamResult, SlamError> {
    let (len, name, camera, metric) = match &source {
        FrameSource::Inline { dataset, front } => (
            dataset.len(),
            dataset.name().to_string(),
            front.camera(),
            front.is_metric(),
        ),
        FrameSource::Pipelined {
            datasets, front, ..
        } => {
            let d = datasets
                .first()
                .ok_or_else(|| SlamError::InvalidInput("no frame loaders given".into()))?;
            (
                d.len(),
                d.name().to_string(),
                front.camera(),
                front.is_metric(),
            )
        }
        FrameSource::Prefetch { loaders, .. } => {
            let (d, f) = loaders
                .first()
                .ok_or_else(|| SlamError::InvalidInput("no frame loaders given".into()))?;
            (d.len(), d.name().to_string(), f.camera(), f.is_metric())
        }
    };
    let total = max_frames.map_or(len, |m| m.min(len));
    if total == 0 {
        return Err(SlamError::InvalidInput(format!(
            "data set '{name}' has no frames"
        )));
    }
    let cam = if cfg.use_calib { camera } else { None };
    let optimize_scale = !metric || cfg.rgbd.optimize_scale;
    let tracker = Tracker {
        cfg: cfg.tracking.clone(),
        matching: cfg.matching.clone(),
        levels: if cam.is_some() {
            cfg.rgbd.pyramid_levels
        } else {
            1
        },
        optimize_scale,
    };
    let shared = Arc::new(Mutex::new(Shared {
        store: KeyframeStore::default(),
        edges: Vec::new(),
        runs: 0,
        backend_s: 0.0,
    }));
    let backend = Backend {
        cfg: cfg.clone(),
        cam,
        optimize_scale,
        cache: HashMap::new(),
    };
    let mut runner = if cfg.single_thread {
        BackendRunner::Inline(backend)
    } else {
        let (tx, rx) = channel();
        let handle = spawn_backend(backend, shared.clone(), rx);
        BackendRunner::Thread {
            tx,
            handle: Some(handle),
        }
    };
    // The GPU tracks calibrated frames and uncalibrated network pairs (crate::kernels).
    let mut timings = Timings::default();
    let load_s = Arc::new(Mutex::new(0.0f64));
    let prepare_s = Arc::new(Mutex::new(0.0f64));
    let result = std::thread::scope(|scope| {
        let src = match source {
            FrameSource::Inline { dataset, front } => {
                // Pair decoding needs the keyframe, known only here: the network stays on the
                // tracking thread.
                let pairs = cfg.tracking.pairs && front.pairs().is_some();
                Source::Inline(dataset, front, pairs)
            }
            FrameSource::Pipelined {
                datasets,
                front,
                ahead,
            } => {
                let pairs = cfg.tracking.pairs && front.pairs().is_some();
                let prep = front.pairs().filter(|_| pairs).and_then(|p| p.preparer());
                let rxs = spawn_loaders(scope, datasets, total, ahead, &prepare_s, move |d, i| {
                    let start = std::time::Instant::now();
                    let item = d.frame(i).map_err(SlamError::from);
                    let read_s = start.elapsed().as_secs_f64();
                    let item = item.and_then(|frame| {
                        let input = prep.as_ref().map(|p| p(&frame)).transpose()?;
                        Ok((frame, input))
                    });
                    let took = start.elapsed().as_secs_f64();
                    tracing::debug!(
                        "frame {i} prepare: read_ms={:.2} input_ms={:.2}",
                        read_s * 1e3,
                        (took - read_s) * 1e3
                    );
                    (item, took)
                });
                Source::Pipelined(rxs, front, pairs)
            }
            FrameSource::Prefetch { loaders, ahead } => {
                let rxs = spawn_loaders(scope, loaders, total, ahead, &load_s, |(d, f), i| {
                    let item = load(d.as_ref(), f.as_mut(), i, false);
                    let spent = item.as_ref().map_or(0.0, |l| l.load_s);
                    (item, spent)
                });
                Source::Channels(rxs)
            }
        };
        let r = run_frames(
            src,
            cfg,
            total,
            cam,
            camera,
            &tracker,
            gpu,
            &shared,
            &mut runner,
            &mut timings,
            &mut progress,
        );
        let wait = std::time::Instant::now();
        let finish = if r.is_ok() {
            runner.finish(&shared)
        } else {
            runner.finish_quietly()
        };
        timings.backend_wait_s = wait.elapsed().as_secs_f64();
        (r, finish)
    });
    let (result, finish) = result;
    let FrameCounts {
        records: frames,
        peak_bytes: peak,
        pair_frames,
        refined_matches,
        relocalisations,
        loop_closures,
    } = result?;
    finish?;
    let s =
        Arc::try_unwrap(shared).map_err(|_| SlamError::Backend("back end still running".into()))?;
    let s = s
        .into_inner()
        .map_err(|_| SlamError::Backend("the back end panicked".into()))?;
    let keyframe_bytes = peak.max(s.store.memory_bytes());
    timings.backend_s = s.backend_s;
    timings.load_s += *load_s.lock().expect("timing lock");
    timings.prepare_s += *prepare_s.lock().expect("timing lock");
    Ok(SlamResult {
        frames,
        keyframes: s.store,
        edges: s.edges,
        camera: cam,
        backend_runs: s.runs,
        keyframe_bytes,
        timings,
        pair_frames,
        refined_matches,
        relocalisations,
        loop_closures,
    })
}

/// How frames are tracked on network pairs: on the GPU ([`crate::kernels::track_pair_gpu`]) when
/// one is given and the pairs are uncalibrated, else on the CPU ([`Tracker::track_pair`]). The
/// frame loop, loop verification and relocalisation all track through it.
#[derive(Clone, Copy)]
struct PairTracker<'a> {
    tracker: &'a Tracker,
    gpu: Option<&'a rust3r_gpu::Gpu>,
    cam: Option<PinholeCamera>,
}

impl PairTracker<'_> {
    /// The GPU the pairs are tracked on, if any (the front end may leave descriptors there).
    fn device(&self) -> Option<&rust3r_gpu::Gpu> {
        self.gpu.filter(|_| self.cam.is_none())
    }

    fn track(
        &self,
        pred: &PairPrediction,
        kf: &Pointmap,
        kf_conf: &[f32],
        t_init: &Sim3,
        warm: Option<&[u32]>,
    ) -> Result<crate::pair::PairTrack, SlamError> {
        match self.device() {
            Some(g) => {
                crate::kernels::track_pair_gpu(g, self.tracker, pred, kf, kf_conf, t_init, warm)
            }
            None => self
                .tracker
                .track_pair(pred, kf, kf_conf, self.cam, t_init, warm),
        }
    }

    /// The pair's matching queued on the calling thread's device stream when pairs are tracked
    /// on the GPU (checked against the keyframe first); `None` on the CPU, which matches as it
    /// tracks.
    fn queue(
        &self,
        pred: &PairPrediction,
        kf: &Pointmap,
        kf_conf: &[f32],
        warm: Option<&[u32]>,
    ) -> Result<Option<crate::kernels::QueuedMatching>, SlamError> {
        match self.device() {
            Some(g) => {
                crate::pair::check_pair(pred, kf, kf_conf, None)?;
                crate::kernels::queue_pair_matching(g, pred, &self.tracker.matching, warm).map(Some)
            }
            None => Ok(None),
        }
    }

    /// [`PairTracker::track`] on the matching [`PairTracker::queue`] queued (`None`: matching
    /// now).
    fn track_queued(
        &self,
        pred: &PairPrediction,
        kf: &Pointmap,
        kf_conf: &[f32],
        t_init: &Sim3,
        warm: Option<&[u32]>,
        queued: Option<crate::kernels::QueuedMatching>,
    ) -> Result<crate::pair::PairTrack, SlamError> {
        match (self.device(), queued) {
            (Some(g), Some(q)) => {
                crate::kernels::track_queued_pair_gpu(g, self.tracker, pred, kf, kf_conf, t_init, q)
            }
            _ => self.track(pred, kf, kf_conf, t_init, warm),
        }
    }
}

/// Keyframe `j` of the store decoded as the pair (frame `i`, keyframe `j`) and tracked on it
/// from the identity (learned retrieval's candidates: the pose estimate may be far off).
/// Returns `T_CjCi` and the match fraction unless the pose is poorly constrained (the caller
/// compares the match fraction with its own threshold).
fn verify_on_pair(
    pairs: &mut dyn PairFrontEnd,
    shared: &Mutex<Shared>,
    pt: &PairTracker<'_>,
    i: usize,
    j: usize,
    decode_s: &mut f64,
    track_s: &mut f64,
) -> Result<Option<(Sim3, f64)>, SlamError> {
    let (jf, kpm, kconf) = {
        let s = lock(shared)?;
        let kf = &s.store.frames[j];
        (kf.frame_index, kf.pointmap.clone(), kf.average_conf())
    };
    let pred = timed(decode_s, || pairs.pair(i, jf))?;
    let pt = timed(track_s, || {
        pt.track(&pred, &kpm, &kconf, &Sim3::identity(), None)
    })?;
    let r = &pt.result;
    tracing::debug!(
        "frame {i} on a pair with keyframe {j}: match {:.3}, lost {}, weak {}",
        r.match_frac,
        r.lost,
        r.weak
    );
    Ok((!r.weak).then_some((r.t_kf_frame, r.match_frac)))
}

/// Learned retrieval of new keyframes, as MASt3R-SLAM's back end does it: the database is
/// queried and the keyframe added; every retrieved keyframe but the previous one is decoded as
/// a pair with the new keyframe, and becomes a loop edge (with its verified relative pose) when
/// the match fraction reaches `local_opt.min_match_frac`; then the keyframe goes to the back
/// end. With `single_thread` all of it happens in turn. Otherwise the query (the retrieval
/// head and the visual words: ~0.1 s) runs on a thread and device stream of its own while the
/// next frames are tracked (MASt3R-SLAM's back end process queries while its front end
/// tracks), and the verification and the hand-over happen on the tracking thread at the first
/// frame after the answer is in, at the latest before the next query. One query at a time:
/// the database grows in keyframe order.
struct Retrievals {
    background: bool,
    stream: rust3r_gpu::GpuStream,
    /// A front end answered with a database (learned retrieval is on).
    learned: bool,
    /// The query running.
    pending: Option<PendingQuery>,
}

/// A keyframe's query running in the background.
struct PendingQuery {
    frame: usize,
    keyframe: usize,
    thread: JoinHandle<Result<Vec<usize>, SlamError>>,
}

/// What verifying retrieved keyframes takes from the frame loop.
struct Verifier<'a, 'b> {
    shared: &'a Mutex<Shared>,
    pt: &'a PairTracker<'b>,
    cfg: &'a SlamConfig,
}

impl Retrievals {
    fn new(cfg: &SlamConfig) -> Self {
        Retrievals {
            background: !cfg.single_thread,
            stream: rust3r_gpu::GpuStream::new(),
            learned: false,
            pending: None,
        }
    }

    /// New keyframe `nk` (frame `i`): queries (now or in the background) and returns the
    /// keyframes ready for the back end, in order (the pending query's, then this one unless
    /// its query went to the background; a plain keyframe without a database).
    fn keyframe(
        &mut self,
        source: &mut Source<'_>,
        v: &Verifier<'_, '_>,
        (i, nk): (usize, usize),
        decode_s: &mut f64,
        track_s: &mut f64,
    ) -> Result<Vec<NewKeyframe>, SlamError> {
        let mut ready = self.finish(source, v, true, decode_s, track_s)?;
        let r = &v.cfg.retrieval;
        let job = match source.pairs() {
            Some(p) => p.retrieval_job(i, Some(nk), r.k, r.min_thresh)?,
            None => None,
        };
        match job {
            None => ready.push(NewKeyframe::plain(nk)),
            Some(job) if self.background => {
                self.learned = true;
                let stream = self.stream;
                let thread = std::thread::Builder::new()
                    .name("rust3r-retrieval".into())
                    .spawn(move || stream.run(job))
                    .map_err(|e| {
                        SlamError::Backend(format!("cannot start the retrieval thread: {e}"))
                    })?;
                self.pending = Some(PendingQuery {
                    frame: i,
                    keyframe: nk,
                    thread,
                });
            }
            Some(job) => {
                self.learned = true;
                let found = job()?;
                ready.push(verified_keyframe(
                    source,
                    v,
                    (i, nk),
                    found,
                    decode_s,
                    track_s,
                )?);
            }
        }
        Ok(ready)
    }

    /// The pending query's keyframe, verified, once its answer is in (`wait`: waiting for it).
    fn finish(
        &mut self,
        source: &mut Source<'_>,
        v: &Verifier<'_, '_>,
        wait: bool,
        decode_s: &mut f64,
        track_s: &mut f64,
    ) -> Result<Vec<NewKeyframe>, SlamError> {
        if self
            .pending
            .as_ref()
            .is_some_and(|p| !wait && !p.thread.is_finished())
        {
            return Ok(Vec::new());
        }
        let Some(PendingQuery {
            frame: i,
            keyframe: nk,
            thread,
        }) = self.pending.take()
        else {
            return Ok(Vec::new());
        };
        let found = thread
            .join()
            .map_err(|_| SlamError::Backend("the retrieval thread panicked".into()))??;
        Ok(vec![verified_keyframe(
            source,
            v,
            (i, nk),
            found,
            decode_s,
            track_s,
        )?])
    }
}

/// New keyframe `nk` (frame `i`) with the keyframes retrieval `found` for it verified as loops.
fn verified_keyframe(
    source: &mut Source<'_>,
    v: &Verifier<'_, '_>,
    (i, nk): (usize, usize),
    found: Vec<usize>,
    decode_s: &mut f64,
    track_s: &mut f64,
) -> Result<NewKeyframe, SlamError> {
    let pairs = source
        .pairs()
        .ok_or_else(|| SlamError::Backend("retrieval without a pair decoder".into()))?;
    let mut loops = Vec::new();
    for j in found {
        if j + 1 >= nk {
            continue; // the previous keyframe is connected anyway
        }
        if let Some((t_ji, frac)) = verify_on_pair(pairs, v.shared, v.pt, i, j, decode_s, track_s)?
            && frac >= v.cfg.local_opt.min_match_frac
        {
            loops.push((j, t_ji));
        }
    }
    Ok(NewKeyframe {
        k: nk,
        extra: Vec::new(),
        loops,
        retrieved: true,
    })
}

/// Hands keyframes to the back end, counting their loop edges.
fn hand_over(
    runner: &mut BackendRunner,
    shared: &Arc<Mutex<Shared>>,
    ready: Vec<NewKeyframe>,
    loop_closures: &mut usize,
) {
    for nk in ready {
        *loop_closures += nk.loops.len();
        runner.notify(shared, nk);
    }
}

/// Runs `f`, adding its wall-clock seconds to `acc`.
fn timed<T>(acc: &mut f64, f: impl FnOnce() -> T) -> T {
    let t = std::time::Instant::now();
    let r = f();
    *acc += t.elapsed().as_secs_f64();
    r
}

/// [`SlamConfig::forced_keyframe_every`]: `res` counts as tracked (a keyframe when
/// `keyframe`), with `t_init` for a non-finite pose and no fusion of non-finite points.
fn force_tracked(res: &mut TrackResult, t_init: &Sim3, keyframe: bool) {
    res.lost = false;
    res.weak = false;
    res.new_keyframe = keyframe;
    let t = &res.t_kf_frame;
    let finite = t.scale.is_finite()
        && t.translation.iter().all(|v| v.is_finite())
        && t.rotation.coords.iter().all(|v| v.is_finite());
    if !finite {
        res.t_kf_frame = *t_init;
    }
    if res
        .observation
        .as_ref()
        .is_some_and(|(p, c)| p.iter().flatten().chain(c).any(|v| !v.is_finite()))
    {
        res.observation = None;
    }
}

fn lock(s: &Mutex<Shared>) -> Result<std::sync::MutexGuard<'_, Shared>, SlamError> {
    s.lock()
        .map_err(|_| SlamError::Backend("the back end panicked".into()))
}

#[allow(clippy::too_many_arguments)]
fn run_frames(
    mut source: Source<'_>,
    cfg: &SlamConfig,
    total: usize,
    cam: Option<PinholeCamera>,
    front_cam: Option<PinholeCamera>,
    tracker: &Tracker,
    gpu: Option<&rust3r_gpu::Gpu>,
    shared: &Arc<Mutex<Shared>>,
    runner: &mut BackendRunner,
    timings: &mut Timings,
    progress: &mut impl FnMut(&Progress),
) -> Result<FrameCounts, SlamError> {
    let mut records: Vec<FrameRecord> = Vec::with_capacity(total);
    let mut state = TrackingState::Init;
    let mut peak_bytes = 0usize;
    // Pair tracking: frames tracked on pairs, refined matches, and the last frame's matches
    // against keyframe `.0` (warm start of the next frame against the same keyframe).
    let (mut pair_frames, mut refined_matches) = (0usize, 0usize);
    let mut pair_warm: Option<(usize, Vec<u32>)> = None;
    // Poorly constrained frames in a row.
    let mut weak_run = 0usize;
    let (mut relocalisations, mut loop_closures) = (0usize, 0usize);
    // Frame-to-model: the last tracked frames (keyframe, pose in it, pointmap), oldest first.
    let mut recent: std::collections::VecDeque<(usize, Sim3, Arc<Pointmap>)> =
        std::collections::VecDeque::new();
    // Keyframes and back-end runs already reported to `progress`.
    let mut reported = (0usize, 0usize);
    // Uncalibrated pairs are tracked on the GPU when one is given: the front end may leave
    // the descriptors there.
    let pair_tracker = PairTracker { tracker, gpu, cam };
    if let Some(p) = source.pairs() {
        p.set_tracker_device(pair_tracker.device());
    }
    // `decode_ahead`: frame i + 1 loaded and decoded with the keyframe while frame i is
    // tracked, on a thread and a device stream of its own.
    let decode_ahead = cfg.decode_ahead && source.pairs().is_some();
    let track_stream = rust3r_gpu::GpuStream::new();
    let mut ahead: Option<Ahead> = None;
    // `encode_ahead`: the frame after the one decoded ahead, loaded (encoded) behind that
    // decoding; kept here until its turn when the decoding ahead is dropped.
    let encode_ahead = decode_ahead && cfg.encode_ahead;
    let mut early: Option<(usize, Result<Loaded, SlamError>)> = None;
    let mut retrievals = Retrievals::new(cfg);
    let verifier = Verifier {
        shared,
        pt: &pair_tracker,
        cfg,
    };
    for i in 0..total {
        let t0 = std::time::Instant::now();
        let inline = source.loads_here();
        let (loaded, mut ahead_pair) = match ahead.take() {
            Some(a) => {
                debug_assert_eq!(a.index, i, "frame loaded ahead out of turn");
                early = a.next.map(|next| (i + 1, next));
                (a.loaded, a.pair)
            }
            None => (next_frame(&mut source, &mut early, i), None),
        };
        let Loaded {
            timestamp,
            rgb_path,
            pm,
            load_s,
        } = loaded?;
        let frame = FrameMeta {
            timestamp,
            rgb_path,
        };
        let waited = if inline {
            timings.load_s += load_s;
            (t0.elapsed().as_secs_f64() - load_s).max(0.0)
        } else {
            t0.elapsed().as_secs_f64()
        };
        timings.wait_frames_s += waited;
        let t_frame = std::time::Instant::now();
        let mut tracked_s = 0.0;
        // Network decoding on this thread (pair tracking decodes here, not while loading);
        // with `decode_ahead`, the next frame's decoding, during this frame's tracking.
        let mut decode_s = 0.0;
        // Tracking this frame while the next is loaded and decoded: the wall time, and the
        // tracking and decoding time it held.
        let (mut overlap_s, mut overlapped_s) = (0.0, 0.0);
        // Inline back-end time is counted as back end, not mapping.
        let backend_inline = matches!(runner, BackendRunner::Inline(_));
        let backend_before = if backend_inline {
            lock(shared)?.backend_s
        } else {
            0.0
        };
        // A keyframe whose retrieval query has answered goes to the back end.
        let ready =
            retrievals.finish(&mut source, &verifier, false, &mut decode_s, &mut tracked_s)?;
        hand_over(runner, shared, ready, &mut loop_closures);
        match state {
            TrackingState::Init => {
                let pm = timed(&mut decode_s, || source.pointmap(i, pm))?;
                let kf = Keyframe::new(
                    i,
                    frame.timestamp,
                    Sim3::identity(),
                    pm,
                    frame.rgb_path.clone(),
                    cfg.tracking.filtering_score,
                );
                let k = lock(shared)?.store.push(kf);
                records.push(FrameRecord::new_keyframe(
                    i,
                    frame.timestamp,
                    k,
                    &frame.rgb_path,
                ));
                let ready = retrievals.keyframe(
                    &mut source,
                    &verifier,
                    (i, k),
                    &mut decode_s,
                    &mut tracked_s,
                )?;
                hand_over(runner, shared, ready, &mut loop_closures);
                state = TrackingState::Tracking;
            }
            TrackingState::Tracking => {
                let last = records.last().expect("a frame precedes tracking").clone();
                let use_model = (cfg.tracking.model_keyframes > 0 || cfg.tracking.model_frames > 0)
                    && cam.is_some()
                    && cfg.matching.projective
                    && source.pairs().is_none();
                let (k, kf_index, kf_pm, kf_conf, t_wck, t_wc_last, t_wc_prev, model_kfs) = {
                    let s = lock(shared)?;
                    let k = s.store.len() - 1;
                    let kf = &s.store.frames[k];
                    // Frame-to-model: the last keyframes (newest first), for the model view.
                    let model_kfs: Vec<(Sim3, Arc<Pointmap>, Vec<f32>)> = if use_model {
                        s.store.frames[(k + 1).saturating_sub(cfg.tracking.model_keyframes)..=k]
                            .iter()
                            .rev()
                            .map(|f| (f.t_wc, f.pointmap.clone(), f.average_conf()))
                            .chain(recent.iter().rev().map(|(kf, t_kf_frame, pm)| {
                                let t_wc = s.store.frames[*kf].t_wc.compose(t_kf_frame);
                                (t_wc, pm.clone(), pm.conf.clone())
                            }))
                            .collect()
                    } else {
                        Vec::new()
                    };
                    let world =
                        |r: &FrameRecord| s.store.frames[r.keyframe].t_wc.compose(&r.t_kf_frame);
                    // The frame before the last one, when both were tracked (motion model).
                    let prev = records
                        .len()
                        .checked_sub(2)
                        .map(|j| &records[j])
                        .filter(|p| p.tracked && last.tracked && !p.weak && !last.weak);
                    (
                        k,
                        kf.frame_index,
                        kf.pointmap.clone(),
                        kf.average_conf(),
                        kf.t_wc,
                        world(&last),
                        prev.map(world),
                        model_kfs,
                    )
                };
                // Start from the previous frame's pose, moved on by the previous frame's motion
                // (constant velocity) when the motion prior is on.
                let predicted = match t_wc_prev {
                    Some(prev) if cfg.tracking.motion_prior => {
                        t_wc_last.compose(&prev.inverse().compose(&t_wc_last))
                    }
                    _ => t_wc_last,
                };
                let t_init = if last.keyframe == k && predicted == t_wc_last {
                    last.t_kf_frame
                } else {
                    t_wck.inverse().compose(&predicted)
                };
                let (res, pm) = match source.pairs() {
                    Some(pairs) => {
                        // MASt3R-SLAM: decode (frame, keyframe), match once, refine with the
                        // descriptors, weigh by Q (crate::pair). The frame's pointmap is Xff.
                        // Decoded ahead with this keyframe, or now.
                        let pred = match ahead_pair.take() {
                            Some((kf, pred)) if kf == kf_index => pred?,
                            _ => timed(&mut decode_s, || pairs.pair(i, kf_index))?,
                        };
                        let warm = pair_warm
                            .as_ref()
                            .filter(|w| w.0 == k)
                            .map(|w| w.1.as_slice());
                        let track = |queued: Option<crate::kernels::QueuedMatching>| {
                            let t = std::time::Instant::now();
                            let r = track_stream.run(|| {
                                pair_tracker
                                    .track_queued(&pred, &kf_pm, &kf_conf, &t_init, warm, queued)
                            });
                            (r, t.elapsed().as_secs_f64())
                        };
                        let (pt, track_s) = match (decode_ahead && i + 1 < total).then_some(i + 1) {
                            None => track(None),
                            Some(n) => {
                                let (t_overlap, decoded_s) = (std::time::Instant::now(), decode_s);
                                // The matching goes on this thread's stream ahead of the next
                                // frame's network, one after the other on the device (side by
                                // side on two streams both took about twice as long). The
                                // tracker's stream adopts the pair and the matching before the
                                // network is queued: its read-backs and Gauss-Newton
                                // iterations wait for the matching, not for the network.
                                let queued = pair_tracker.queue(&pred, &kf_pm, &kf_conf, warm)?;
                                if let (Some(q), Some(g)) = (&queued, pair_tracker.device()) {
                                    track_stream.run(|| q.adopt(g));
                                }
                                let queued_s = t_overlap.elapsed().as_secs_f64();
                                let (tracked, next) = std::thread::scope(|scope| {
                                    let worker = std::thread::Builder::new()
                                        .name("rust3r-pair-tracker".into())
                                        .spawn_scoped(scope, move || track(queued))
                                        .expect("spawning the pair tracker thread");
                                    let next = load_ahead(
                                        &mut source,
                                        &mut early,
                                        n,
                                        kf_index,
                                        &mut decode_s,
                                        encode_ahead && n + 1 < total,
                                    );
                                    let tracked = worker
                                        .join()
                                        .unwrap_or_else(|e| std::panic::resume_unwind(e));
                                    (tracked, next)
                                });
                                let tracked = (tracked.0, tracked.1 + queued_s);
                                overlap_s = t_overlap.elapsed().as_secs_f64();
                                overlapped_s = tracked.1 + decode_s - decoded_s;
                                ahead = Some(next);
                                tracked
                            }
                        };
                        tracked_s += track_s;
                        let pt = pt?;
                        tracing::debug!(
                            "frame {i}: pair with keyframe {k}: {} matches used, {} moved by the descriptors",
                            pt.used,
                            pt.matches.refined
                        );
                        pair_frames += 1;
                        refined_matches += pt.matches.refined;
                        pair_warm = Some((k, pt.matches.idx));
                        let mut pm = pred.frame;
                        if let Some(c) = &front_cam {
                            // As the front end's own pointmaps: on the pixel rays, keeping depth.
                            pm.constrain_to_rays(c);
                        }
                        (pt.result, pm)
                    }
                    None => {
                        let pm = timed(&mut decode_s, || source.pointmap(i, pm))?;
                        let conf = pm.conf.clone();
                        let t_track = std::time::Instant::now();
                        // Frame-to-model: the model view at the predicted pose, when it covers
                        // enough of the image to track on.
                        let model = cam.filter(|_| !model_kfs.is_empty()).and_then(|c| {
                            let sources: Vec<ModelSource<'_>> = model_kfs
                                .iter()
                                .map(|(t_wc, pm, conf)| ModelSource {
                                    t_wc: *t_wc,
                                    pointmap: pm,
                                    conf,
                                })
                                .collect();
                            let t_wc_model = t_wck.compose(&t_init);
                            let view = render_model(&sources, &c, pm.width, pm.height, &t_wc_model);
                            let covered = view.conf.iter().filter(|c| **c > 0.0).count();
                            (covered as f64 >= MODEL_MIN_COVERAGE * view.len() as f64)
                                .then_some(view)
                        });
                        let res = match (gpu, cam, model) {
                            (Some(g), Some(c), Some(view)) => {
                                let on_model = crate::kernels::track_gpu(
                                    g,
                                    tracker,
                                    &pm,
                                    &conf,
                                    &view,
                                    &view.conf,
                                    c,
                                    &Sim3::identity(),
                                )?;
                                let t = t_init.compose(&on_model.t_kf_frame);
                                let mut res =
                                    tracker.evaluate(&pm, &conf, &kf_pm, &kf_conf, cam, &t);
                                res.iterations = on_model.iterations;
                                res.cost = on_model.cost;
                                res.constraint = on_model.constraint;
                                res.weak = !res.lost && on_model.weak;
                                res
                            }
                            (None, _, Some(view)) => tracker
                                .track_model(&pm, &conf, &view, &kf_pm, &kf_conf, cam, &t_init),
                            (Some(g), Some(c), None) => crate::kernels::track_gpu(
                                g, tracker, &pm, &conf, &kf_pm, &kf_conf, c, &t_init,
                            )?,
                            _ => tracker.track(&pm, &conf, &kf_pm, &kf_conf, cam, &t_init),
                        };
                        tracked_s += t_track.elapsed().as_secs_f64();
                        (res, pm)
                    }
                };
                // The keyframe's pointmap is fused below: a copy held here would make the
                // store copy the whole pointmap before writing it (`Arc::make_mut`).
                drop(kf_pm);
                let mut res = res;
                if cfg.forced_keyframe_every > 0 {
                    force_tracked(&mut res, &t_init, i % cfg.forced_keyframe_every == 0);
                }
                tracing::debug!(
                    "frame {i}: keyframe {k}, {} iterations, match {:.3}, keyframe fraction {:.3}",
                    res.iterations,
                    res.match_frac,
                    res.keyframe_frac
                );
                // `weak` is only set on frames that are not lost.
                weak_run = if res.weak { weak_run + 1 } else { 0 };
                if res.weak {
                    tracing::debug!(
                        "frame {i}: poorly constrained (constraint {:.2e}), {weak_run} in a row",
                        res.constraint
                    );
                }
                let lost_weak = weak_run > cfg.tracking.max_weak_frames;
                if res.weak && !lost_weak {
                    records.push(FrameRecord {
                        index: i,
                        timestamp: frame.timestamp,
                        keyframe: k,
                        t_kf_frame: res.t_kf_frame,
                        tracked: true,
                        weak: true,
                        rgb_path: frame.rgb_path.clone(),
                    });
                } else if res.lost || lost_weak {
                    if lost_weak {
                        tracing::warn!(
                            "frame {i}: {weak_run} poorly constrained frames in a row: tracking lost"
                        );
                        weak_run = 0;
                    }
                    tracing::warn!(
                        "frame {i}: tracking lost (match fraction {:.3})",
                        res.match_frac
                    );
                    records.push(FrameRecord {
                        index: i,
                        timestamp: frame.timestamp,
                        keyframe: k,
                        t_kf_frame: t_init,
                        tracked: false,
                        weak: false,
                        rgb_path: frame.rgb_path.clone(),
                    });
                    state = TrackingState::Relocalising;
                    recent.clear();
                } else {
                    let mut s = lock(shared)?;
                    if let Some((pts, c)) = &res.observation {
                        s.store.frames[k].fuse(
                            pts,
                            c,
                            cfg.tracking.filtering_mode,
                            cfg.tracking.filtering_score,
                        );
                    }
                    if cfg.tracking.model_frames > 0 {
                        if recent.len() == cfg.tracking.model_frames {
                            recent.pop_front();
                        }
                        recent.push_back((k, res.t_kf_frame, Arc::new(pm.clone())));
                    }
                    if res.new_keyframe {
                        let t_wc = s.store.frames[k].t_wc.compose(&res.t_kf_frame);
                        let kf = Keyframe::new(
                            i,
                            frame.timestamp,
                            t_wc,
                            pm,
                            frame.rgb_path.clone(),
                            cfg.tracking.filtering_score,
                        );
                        let nk = s.store.push(kf);
                        drop(s);
                        records.push(FrameRecord::new_keyframe(
                            i,
                            frame.timestamp,
                            nk,
                            &frame.rgb_path,
                        ));
                        let ready = retrievals.keyframe(
                            &mut source,
                            &verifier,
                            (i, nk),
                            &mut decode_s,
                            &mut tracked_s,
                        )?;
                        hand_over(runner, shared, ready, &mut loop_closures);
                    } else {
                        drop(s);
                        records.push(FrameRecord {
                            index: i,
                            timestamp: frame.timestamp,
                            keyframe: k,
                            t_kf_frame: res.t_kf_frame,
                            tracked: true,
                            weak: false,
                            rgb_path: frame.rgb_path.clone(),
                        });
                    }
                }
            }
            TrackingState::Relocalising => {
                let pm = timed(&mut decode_s, || source.pointmap(i, pm))?;
                let conf = pm.conf.clone();
                let last_good = records
                    .iter()
                    .rev()
                    .find(|r| r.tracked)
                    .expect("frame 0 is tracked")
                    .clone();
                // Learned retrieval (MASt3R-SLAM `relocalization`): the frame queries the
                // database (without joining it; after the query running, if any) and is
                // decoded as a pair with every retrieved keyframe; strict: all must match.
                let ready = retrievals.finish(
                    &mut source,
                    &verifier,
                    true,
                    &mut decode_s,
                    &mut tracked_s,
                )?;
                hand_over(runner, shared, ready, &mut loop_closures);
                let retrieved = match source.pairs() {
                    Some(p) => p.retrieve(i, None, cfg.retrieval.k, cfg.retrieval.min_thresh)?,
                    None => None,
                };
                let (ok, success) = if let Some(found) = retrieved {
                    retrievals.learned = true;
                    let mut ok: Vec<(usize, Sim3, f64)> = Vec::new();
                    let mut all_ok = true;
                    let pairs = source
                        .pairs()
                        .expect("retrieval comes from the pair decoder");
                    for &j in &found {
                        let t_wcj = lock(shared)?.store.frames[j].t_wc;
                        match verify_on_pair(
                            pairs,
                            shared,
                            &pair_tracker,
                            i,
                            j,
                            &mut decode_s,
                            &mut tracked_s,
                        )? {
                            Some((t_jf, frac)) if frac >= cfg.reloc.min_match_frac => {
                                ok.push((j, t_wcj.compose(&t_jf), frac));
                            }
                            _ => all_ok = false,
                        }
                    }
                    tracing::debug!(
                        "frame {i}: retrieved {found:?}, verified {:?}",
                        ok.iter().map(|o| o.0).collect::<Vec<_>>()
                    );
                    let success = !ok.is_empty() && (all_ok || !cfg.reloc.strict);
                    (ok, success)
                } else {
                    let (cands, t_wc_last) = {
                        let s = lock(shared)?;
                        let t_last = s.store.frames[last_good.keyframe]
                            .t_wc
                            .compose(&last_good.t_kf_frame);
                        let mut c: Vec<RelocCandidate<f64>> = s
                            .store
                            .frames
                            .iter()
                            .enumerate()
                            .map(|(j, kf)| {
                                (
                                    (kf.t_wc.translation - t_last.translation).norm(),
                                    j,
                                    kf.t_wc,
                                    kf.pointmap.clone(),
                                    kf.average_conf(),
                                )
                            })
                            .collect();
                        c.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
                        c.truncate(cfg.retrieval.k.max(1));
                        // Candidates by pose (`false`), tried from the last pose, then by appearance
                        // (RGB-D, `true`), tried from the identity (a similar view) whatever the last pose.
                        let mut c: Vec<RelocCandidate<bool>> = c
                            .into_iter()
                            .map(|(_, j, t, p, conf)| (false, j, t, p, conf))
                            .collect();
                        if cfg.retrieval.appearance && cam.is_some() {
                            let desc = crate::appearance::Descriptor::of(&pm);
                            let descs: Vec<&crate::appearance::Descriptor> = s
                                .store
                                .frames
                                .iter()
                                .map(|kf| kf.descriptor.as_ref())
                                .collect();
                            for (j, _) in crate::appearance::most_similar(
                                &desc,
                                &descs,
                                cfg.retrieval.k.max(1),
                                cfg.retrieval.min_similarity,
                                |_| true,
                            ) {
                                let kf = &s.store.frames[j];
                                c.push((true, j, kf.t_wc, kf.pointmap.clone(), kf.average_conf()));
                            }
                        }
                        (c, t_last)
                    };
                    let mut ok: Vec<(usize, Sim3, f64)> = Vec::new();
                    let mut all_ok = true;
                    let mut by_appearance = false;
                    for (appearance, j, t_wcj, kpm, kconf) in &cands {
                        let appearance = *appearance;
                        let t_init = if appearance {
                            Sim3::identity()
                        } else {
                            t_wcj.inverse().compose(&t_wc_last)
                        };
                        let t_track = std::time::Instant::now();
                        let res = tracker.track(&pm, &conf, kpm, kconf, cam, &t_init);
                        tracked_s += t_track.elapsed().as_secs_f64();
                        if res.match_frac >= cfg.reloc.min_match_frac && !res.weak {
                            ok.push((*j, t_wcj.compose(&res.t_kf_frame), res.match_frac));
                            by_appearance |= appearance;
                        } else if !appearance {
                            all_ok = false;
                        }
                    }
                    ok.sort_by(|a, b| b.2.total_cmp(&a.2));
                    // Strict relocalisation (MASt3R-SLAM): every pose candidate must match; a verified
                    // appearance candidate is enough on its own.
                    let success = !ok.is_empty() && (all_ok || !cfg.reloc.strict || by_appearance);
                    (ok, success)
                };
                if success {
                    let t_wc = ok[0].1;
                    let kf = Keyframe::new(
                        i,
                        frame.timestamp,
                        t_wc,
                        pm,
                        frame.rgb_path.clone(),
                        cfg.tracking.filtering_score,
                    );
                    let nk = lock(shared)?.store.push(kf);
                    records.push(FrameRecord::new_keyframe(
                        i,
                        frame.timestamp,
                        nk,
                        &frame.rgb_path,
                    ));
                    tracing::info!("frame {i}: relocalised against keyframe {}", ok[0].0);
                    relocalisations += 1;
                    let retrieved = if retrievals.learned {
                        // Joins the database now that it is a keyframe (MASt3R-SLAM queries
                        // again with `add_after_query`).
                        let p = source
                            .pairs()
                            .expect("retrieval comes from the pair decoder");
                        p.retrieve(i, Some(nk), cfg.retrieval.k, cfg.retrieval.min_thresh)?;
                        true
                    } else {
                        false
                    };
                    runner.notify(
                        shared,
                        NewKeyframe {
                            k: nk,
                            extra: ok.iter().map(|o| o.0).collect(),
                            loops: Vec::new(),
                            retrieved,
                        },
                    );
                    state = TrackingState::Tracking;
                } else {
                    let kf_last = last_good.keyframe;
                    records.push(FrameRecord {
                        index: i,
                        timestamp: frame.timestamp,
                        keyframe: kf_last,
                        t_kf_frame: last_good.t_kf_frame,
                        tracked: false,
                        weak: false,
                        rgb_path: frame.rgb_path.clone(),
                    });
                }
            }
        }
        let rec = records.last().expect("one record per frame");
        let (nk, backend_after, pose, new_keyframe, graph) = {
            let s = lock(shared)?;
            if let (Some(pairs), Some(kf)) = (source.pairs(), s.store.frames.last()) {
                // The next frames when they were loaded ahead.
                let next: Vec<usize> = ahead
                    .iter()
                    .flat_map(|a| {
                        std::iter::once(a.index).chain(a.next.as_ref().map(|_| a.index + 1))
                    })
                    .chain(early.as_ref().map(|e| e.0))
                    .collect();
                if retrievals.learned {
                    // Loop closure and relocalisation decode any keyframe with a new frame.
                    let keep: Vec<usize> = s
                        .store
                        .frames
                        .iter()
                        .map(|k| k.frame_index)
                        .chain(next.iter().copied())
                        .collect();
                    pairs.retain(&keep);
                } else {
                    // Only the current keyframe's encoding is needed from here on.
                    let keep: Vec<usize> = std::iter::once(kf.frame_index)
                        .chain(next.iter().copied())
                        .collect();
                    pairs.retain(&keep);
                }
            }
            peak_bytes = peak_bytes.max(s.store.memory_bytes());
            let pose = s.store.frames[rec.keyframe].t_wc.compose(&rec.t_kf_frame);
            let new_keyframe = (s.store.len() > reported.0).then(|| {
                (
                    s.store.len() - 1,
                    s.store.frames[s.store.len() - 1].pointmap.clone(),
                )
            });
            let graph = (s.store.len() > reported.0 || s.runs > reported.1).then(|| {
                (
                    s.store.frames.iter().map(|k| k.t_wc).collect(),
                    s.edges.iter().map(|e| (e.i, e.j)).collect(),
                )
            });
            reported = (s.store.len(), s.runs);
            (
                s.store.len(),
                if backend_inline { s.backend_s } else { 0.0 },
                pose,
                new_keyframe,
                graph,
            )
        };
        timings.track_s += tracked_s;
        timings.load_s += decode_s;
        timings.overlap_s += overlap_s;
        // With `decode_ahead`, tracking and the next frame's decoding overlap: the wall time
        // they took together (`overlap_s`) is taken off once.
        let serial_s = tracked_s + decode_s - overlapped_s + overlap_s;
        let map_s = (t_frame.elapsed().as_secs_f64() - serial_s - (backend_after - backend_before))
            .max(0.0);
        timings.map_s += map_s;
        tracing::debug!(
            "frame {i} profile: load_ms={:.2} wait_ms={:.2} decode_ms={:.2} track_ms={:.2} overlap_ms={:.2} map_ms={:.2} backend_inline_ms={:.2} frame_ms={:.2}",
            if inline { load_s * 1e3 } else { 0.0 },
            waited * 1e3,
            decode_s * 1e3,
            tracked_s * 1e3,
            overlap_s * 1e3,
            map_s * 1e3,
            (backend_after - backend_before) * 1e3,
            t0.elapsed().as_secs_f64() * 1e3
        );
        progress(&Progress {
            frame: i + 1,
            total,
            timestamp: rec.timestamp,
            keyframes: nk,
            state,
            pose,
            rgb_path: rec.rgb_path.clone(),
            new_keyframe,
            graph,
        });
    }
    // The last keyframe's query, if it still runs.
    let (mut decode_s, mut tracked_s) = (0.0, 0.0);
    let ready = retrievals.finish(&mut source, &verifier, true, &mut decode_s, &mut tracked_s)?;
    hand_over(runner, shared, ready, &mut loop_closures);
    timings.load_s += decode_s;
    timings.track_s += tracked_s;
    Ok(FrameCounts {
        records,
        peak_bytes,
        pair_frames,
        refined_matches,
        relocalisations,
        loop_closures,
    })
}

/// What [`run_frames`] returns.
struct FrameCounts {
    records: Vec<FrameRecord>,
    peak_bytes: usize,
    pair_frames: usize,
    refined_matches: usize,
    relocalisations: usize,
    loop_closures: usize,
}
