//! SLAM configuration: MASt3R-SLAM's `config/base.yaml` plus the RGB-D settings.
//!
//! [`SlamConfig::default`] holds the values of MASt3R-SLAM's `config/base.yaml` (matching,
//! tracking, local_opt, retrieval, reloc). [`SlamConfig::rgbd`] starts from them and changes
//! what metric depth changes (see its documentation). A YAML file given with `--config`
//! overrides single keys; the format is base.yaml's: `section:` lines followed by indented
//! `key: value` lines, `#` comments. Unknown sections or keys are errors naming file and line.

use std::path::Path;

use crate::SlamError;

/// How a keyframe's canonical pointmap absorbs the pointmaps of the frames tracked against it
/// (MASt3R-SLAM `tracking.filtering_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FusionMode {
    /// Confidence-weighted running average of the points (default).
    Weighted,
    /// Keep the keyframe's own pointmap.
    First,
    /// Replace with the most recent observation.
    Recent,
    /// Replace when the observation's score (median or mean confidence) is higher.
    BestScore,
    /// Per pixel, keep the observation with the higher confidence.
    IndepConf,
    /// Confidence-weighted average in spherical coordinates (radius, azimuth, polar angle).
    WeightedSpherical,
}

impl std::str::FromStr for FusionMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "weighted" | "weighted_pointmap" => Self::Weighted,
            "first" => Self::First,
            "recent" => Self::Recent,
            "best_score" => Self::BestScore,
            "indep_conf" => Self::IndepConf,
            "weighted_spherical" => Self::WeightedSpherical,
            other => {
                return Err(format!(
                    "unknown filtering mode '{other}' (expected weighted_pointmap, first, recent, \
                     best_score, indep_conf or weighted_spherical)"
                ));
            }
        })
    }
}

/// Score of a pointmap for [`FusionMode::BestScore`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FilteringScore {
    /// Median confidence.
    Median,
    /// Mean confidence.
    Mean,
}

/// `matching` section: iterative projection and match refinement.
#[derive(Debug, Clone, PartialEq)]
pub struct MatchingConfig {
    /// Levenberg-Marquardt iterations per point.
    pub max_iter: usize,
    /// Initial LM damping.
    pub lambda_init: f64,
    /// Squared ray error under which a point counts as converged.
    pub convergence_thresh: f64,
    /// Occlusion check: largest 3D distance (metres for RGB-D) between matched points.
    pub dist_thresh: f64,
    /// Descriptor refinement window radius (pixels; 0 disables refinement).
    pub radius: usize,
    /// Largest dilation of the refinement window (searched from this down to 1).
    pub dilation_max: usize,
    /// Calibrated views: match by projecting with the intrinsics (exact for points on their
    /// pixel rays, [`crate::projective`]) instead of iterative projection on the ray image.
    /// Not in MASt3R-SLAM; on in [`SlamConfig::rgbd`].
    pub projective: bool,
}

/// `tracking` section.
#[derive(Debug, Clone, PartialEq)]
pub struct TrackingConfig {
    /// Below this fraction of valid matches the frame is lost (relocalisation).
    pub min_match_frac: f64,
    /// Gauss-Newton iterations (per pyramid level for RGB-D).
    pub max_iters: usize,
    /// Minimum average confidence of a point.
    pub c_conf: f64,
    /// Minimum match quality.
    pub q_conf: f64,
    /// Stop when the relative cost decrease is below this.
    pub rel_error: f64,
    /// Stop when the update norm is below this.
    pub delta_norm: f64,
    /// Huber threshold on whitened residuals.
    pub huber: f64,
    /// New keyframe when the match fraction drops below this.
    pub match_frac_thresh: f64,
    /// Ray residual sigma (uncalibrated).
    pub sigma_ray: f64,
    /// Distance residual sigma (uncalibrated).
    pub sigma_dist: f64,
    /// Pixel residual sigma (calibrated).
    pub sigma_pixel: f64,
    /// Log-depth residual sigma (calibrated).
    pub sigma_depth: f64,
    /// Point-to-plane residual sigma in metres (RGB-D addition; 0 disables the term).
    pub sigma_plane: f64,
    /// Depth-camera noise model (RGB-D addition): `sigma_plane` is the sigma at 1 m and grows
    /// with the square of the depth, `sigma_depth` (log-depth) linearly.
    pub depth_noise: bool,
    /// Smallest depth accepted in the calibrated residual.
    pub depth_eps: f64,
    /// Projections may fall this many pixels outside the image (negative: outside allowed).
    pub pixel_border: f64,
    /// Finest pyramid level Gauss-Newton iterates on (0: the pointmap resolution; capped at
    /// the coarsest level). The final association for the statistics and fusion is always at
    /// level 0. RGB-D addition.
    pub finest_level: usize,
    /// Gauss-Newton sums only the pixels with `u + v` even (a checkerboard, half the pixels;
    /// projective association path). RGB-D addition.
    pub checkerboard: bool,
    /// Track on network pairs (frame, keyframe) when the front end decodes pairs
    /// ([`crate::pair`], MASt3R-SLAM's tracking); false: on the frames' own pointmaps, matched by
    /// pose-dependent iterative projection every iteration. rust3r switch, on by default;
    /// front ends without pair decoding (RGB-D) ignore it.
    pub pairs: bool,
    /// Keyframe pointmap fusion.
    pub filtering_mode: FusionMode,
    /// Intensity sigma of the photometric residual (intensities in `[0, 1]`; RGB-D addition,
    /// [`crate::photometric`]); 0 turns the term off.
    pub sigma_photo: f64,
    /// Frames whose [`crate::tracker::constraint_ratio`] falls below this are flagged as poorly
    /// constrained: they keep the solver's pose but are neither fused nor made keyframes
    /// (RGB-D addition; 0: off).
    pub min_constraint: f64,
    /// Frames in a row flagged as poorly constrained after which tracking counts as lost and
    /// relocalisation starts (RGB-D addition).
    pub max_weak_frames: usize,
    /// Predict each frame's pose with a constant-velocity motion model (the previous frame's
    /// motion repeated) instead of starting from the previous pose (RGB-D addition).
    pub motion_prior: bool,
    /// Frame-to-model tracking (RGB-D addition, [`crate::model`]): the last this many
    /// keyframes are rendered into the frame's predicted view and the frame is tracked against
    /// that view instead of the current keyframe alone (fusion and the keyframe rule stay with
    /// the current keyframe). 0: frame-to-keyframe tracking.
    pub model_keyframes: usize,
    /// Frame-to-model tracking: the last this many tracked frames (at their tracked poses)
    /// join the model view of `model_keyframes` (RGB-D addition; 0: none).
    pub model_frames: usize,
    /// Score for [`FusionMode::BestScore`].
    pub filtering_score: FilteringScore,
}

/// `local_opt` section: the back end.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalOptConfig {
    /// Number of leading keyframes held fixed.
    pub pin: usize,
    /// Number of most recent keyframes optimised (older ones are fixed).
    pub window_size: usize,
    /// Minimum average confidence.
    pub c_conf: f64,
    /// Minimum match quality.
    pub q_conf: f64,
    /// Non-consecutive edges need at least this match fraction both ways.
    pub min_match_frac: f64,
    /// Projection border (pixels, negative allows outside).
    pub pixel_border: f64,
    /// Smallest depth in the calibrated residual.
    pub depth_eps: f64,
    /// Gauss-Newton iterations.
    pub max_iters: usize,
    /// Ray sigma.
    pub sigma_ray: f64,
    /// Distance sigma.
    pub sigma_dist: f64,
    /// Pixel sigma.
    pub sigma_pixel: f64,
    /// Log-depth sigma.
    pub sigma_depth: f64,
    /// Point-to-plane sigma (0 disables).
    pub sigma_plane: f64,
    /// Photometric sigma of the back end's edges (intensities in `[0, 1]`; 0 disables; see
    /// [`TrackingConfig::sigma_photo`]).
    pub sigma_photo: f64,
    /// Depth-camera noise model (see [`TrackingConfig::depth_noise`]).
    pub depth_noise: bool,
    /// Stop when the update norm is below this.
    pub delta_norm: f64,
    /// Iterations of a last optimisation over the whole graph after the final frame
    /// (0: none, as MASt3R-SLAM).
    pub final_iters: usize,
    /// Sum only the pixels with `u + v` even (see [`TrackingConfig::checkerboard`]).
    pub checkerboard: bool,
    /// Of `max_iters`, how many run first on the next coarser pyramid level than
    /// `rgbd.backend_level` (a quarter of the pixels). RGB-D addition; 0: none.
    pub coarse_iters: usize,
}

/// `retrieval` section (loop candidates).
#[derive(Debug, Clone, PartialEq)]
pub struct RetrievalConfig {
    /// Number of loop candidates per new keyframe.
    pub k: usize,
    /// Minimum candidate score.
    pub min_thresh: f64,
    /// RGB-D: largest camera-centre distance of a candidate (metres).
    pub max_distance: f64,
    /// RGB-D: largest viewing-direction angle of a candidate (degrees).
    pub max_angle_deg: f64,
    /// RGB-D: also look for loops and relocalisation candidates by appearance
    /// ([`crate::appearance`]), independent of the pose estimate; each is verified by tracking
    /// the two keyframes against each other.
    pub appearance: bool,
    /// Smallest appearance similarity (normalised cross-correlation of the descriptors) of a
    /// candidate.
    pub min_similarity: f64,
    /// Keyframes just before a new one that are never loop candidates by appearance (they are
    /// its neighbours in the graph already).
    pub exclude_recent: usize,
}

/// `reloc` section.
#[derive(Debug, Clone, PartialEq)]
pub struct RelocConfig {
    /// Match fraction a relocalisation edge needs.
    pub min_match_frac: f64,
    /// Every candidate edge must pass (otherwise any one suffices).
    pub strict: bool,
}

/// RGB-D front end and pyramid (`rgbd` section; not in MASt3R-SLAM).
#[derive(Debug, Clone, PartialEq)]
pub struct RgbdConfig {
    /// Integer downsampling of the depth image for the pointmap (2: 640x480 -> 320x240).
    pub downsample: usize,
    /// Pyramid levels used by tracking (coarse to fine; 1 = full resolution only).
    pub pyramid_levels: usize,
    /// Pyramid level (0 = pointmap resolution) the back end works on.
    pub backend_level: usize,
    /// Depths outside `[min_depth, max_depth]` are invalid (metres).
    pub min_depth: f64,
    /// See `min_depth`.
    pub max_depth: f64,
    /// Solve for scale too (Sim(3)); false fixes scale (SE(3)) as metric depth allows.
    pub optimize_scale: bool,
    /// Confidence of the exported point cloud: average confidence threshold per point.
    pub export_conf: f64,
}

/// All settings of a SLAM run.
#[derive(Debug, Clone, PartialEq)]
pub struct SlamConfig {
    /// Use the calibrated (pixel + log-depth) residuals.
    pub use_calib: bool,
    /// Run the back end on the tracking thread (deterministic).
    pub single_thread: bool,
    /// Pair tracking (MASt3R): while a frame is tracked (on a thread and, on CUDA, a stream of
    /// its own), the next frame is encoded and decoded with the current keyframe, so the
    /// network and the tracker overlap. When the frame becomes a keyframe (or tracking is lost)
    /// that decoding is thrown away and the next frame is decoded again with the right one: the
    /// results are those of decoding in turn (`false`).
    pub decode_ahead: bool,
    /// With `decode_ahead`: the frame after the next is encoded right behind the next frame's
    /// decoding, while that decoding is read back ([`crate::pair::PairFrontEnd::queue_pair`]),
    /// so the device encodes while the host finishes the frame. Encodings do not depend on the
    /// keyframe: the results are those of encoding in turn (`false`).
    pub encode_ahead: bool,
    /// Timing runs only (rust3r's `forced_keyframe_every`, 0: off): every frame counts as
    /// tracked and every K-th frame becomes a keyframe, whatever tracking finds, so a network
    /// whose outputs cannot be tracked (random weights) still pays for tracking, mapping, the
    /// back end and retrieval as a real run would. The pose is tracking's when finite, else
    /// the starting pose; non-finite fusion observations are dropped.
    pub forced_keyframe_every: usize,
    /// `matching`.
    pub matching: MatchingConfig,
    /// `tracking`.
    pub tracking: TrackingConfig,
    /// `local_opt`.
    pub local_opt: LocalOptConfig,
    /// `retrieval`.
    pub retrieval: RetrievalConfig,
    /// `reloc`.
    pub reloc: RelocConfig,
    /// `rgbd`.
    pub rgbd: RgbdConfig,
}

impl Default for SlamConfig {
    /// MASt3R-SLAM's `config/base.yaml`.
    fn default() -> Self {
        Self {
            use_calib: false,
            single_thread: false,
            decode_ahead: true,
            encode_ahead: true,
            forced_keyframe_every: 0,
            matching: MatchingConfig {
                max_iter: 10,
                lambda_init: 1e-8,
                convergence_thresh: 1e-6,
                dist_thresh: 1e-1,
                radius: 3,
                dilation_max: 5,
                projective: false,
            },
            tracking: TrackingConfig {
                min_match_frac: 0.05,
                max_iters: 50,
                c_conf: 0.0,
                q_conf: 1.5,
                rel_error: 1e-3,
                delta_norm: 1e-3,
                huber: 1.345,
                match_frac_thresh: 0.333,
                sigma_ray: 0.003,
                sigma_dist: 1e1,
                sigma_pixel: 1.0,
                sigma_depth: 1e1,
                sigma_plane: 0.0,
                depth_noise: false,
                depth_eps: 1e-6,
                pixel_border: -10.0,
                finest_level: 0,
                checkerboard: false,
                pairs: true,
                filtering_mode: FusionMode::Weighted,
                filtering_score: FilteringScore::Median,
                sigma_photo: 0.0,
                min_constraint: 0.0,
                max_weak_frames: 15,
                motion_prior: false,
                model_keyframes: 0,
                model_frames: 0,
            },
            local_opt: LocalOptConfig {
                pin: 1,
                window_size: 1_000_000,
                c_conf: 0.0,
                q_conf: 1.5,
                min_match_frac: 0.1,
                pixel_border: -10.0,
                depth_eps: 1e-6,
                max_iters: 10,
                sigma_ray: 0.003,
                sigma_dist: 1e1,
                sigma_pixel: 1.0,
                sigma_depth: 1e1,
                sigma_plane: 0.0,
                sigma_photo: 0.0,
                depth_noise: false,
                delta_norm: 1e-8,
                final_iters: 0,
                checkerboard: false,
                coarse_iters: 0,
            },
            retrieval: RetrievalConfig {
                k: 3,
                min_thresh: 5e-3,
                max_distance: 1.0,
                max_angle_deg: 45.0,
                appearance: false,
                min_similarity: 0.5,
                exclude_recent: 5,
            },
            reloc: RelocConfig {
                min_match_frac: 0.3,
                strict: true,
            },
            rgbd: RgbdConfig {
                downsample: 2,
                pyramid_levels: 3,
                backend_level: 1,
                min_depth: 0.1,
                max_depth: 6.0,
                optimize_scale: false,
                export_conf: 0.5,
            },
        }
    }
}

impl SlamConfig {
    /// MASt3R-SLAM's calibrated mode (`--calib`; its `config/calib.yaml` is `base.yaml` with
    /// `use_calib: True`): pixel + log-depth residuals with the base sigmas (network depth,
    /// `sigma_depth` 10 in log-depth), iterative projection for matching, and Sim(3) poses since
    /// a network front end is up to scale. Tracking runs at the pointmap resolution only
    /// (`rgbd.pyramid_levels` 1), as MASt3R-SLAM does; everything else is [`SlamConfig::default`].
    pub fn calib() -> Self {
        let mut c = Self {
            use_calib: true,
            ..Self::default()
        };
        c.rgbd.pyramid_levels = 1;
        c
    }

    /// Settings for metric RGB-D input: MASt3R-SLAM's values except
    ///
    /// * `use_calib: true` (the camera is calibrated: pixel + log-depth residuals);
    /// * `sigma_depth` 0.01 instead of 10 in log-depth (1 %: a Kinect's depth noise is
    ///   about 0.15 % of depth per metre; MASt3R-SLAM's 10 reflects network depth, which is
    ///   only known up to scale and is far noisier);
    /// * a point-to-plane term (`sigma_plane` 2 mm): with projective association the matched
    ///   pixel is within half a pixel of the projection, so the pixel residual only carries
    ///   quantisation noise; the plane term is what ICP on depth relies on;
    /// * `depth_noise`: both depth sigmas grow with depth as a structured-light sensor's noise
    ///   does (quadratically in metres, so linearly in log-depth); sigmas are those at 1 m;
    /// * projective association (`matching.projective`: exact for calibrated views, one
    ///   projection per point instead of iterative projection);
    /// * tracking iterations are per pyramid level (3 levels) and limited to 20; Gauss-Newton
    ///   iterates at 80x60 and 160x120 only (`tracking.finest_level` 1; the final association
    ///   for fusion and the keyframe rule is at 320x240): 1.82 cm instead of 1.79 cm on
    ///   redkitchen at a third of the tracking time;
    /// * tracking and the back end sum every other pixel in a checkerboard
    ///   (`tracking.checkerboard`, `local_opt.checkerboard`): 1.82 cm either way on redkitchen,
    ///   a quarter less CPU time;
    /// * keyframes and the back end, tuned on 7-Scenes redkitchen (docs/benchmarks/journal.md): a new
    ///   keyframe below a match fraction of 0.5 (0.333: 2.4 cm ATE instead of 1.8 cm), up to six
    ///   loop edges per keyframe, 10 back-end iterations (20: 1.79 cm at twice the back-end
    ///   time), and the back end on the full pointmap resolution (`rgbd.backend_level` 0;
    ///   level 1 is 4x cheaper and gives 2.0-2.1 cm);
    /// * the photometric term in tracking (`sigma_photo` 0.07) and the back end, and
    ///   `filtering_mode: first` (a keyframe's points come from one observation, not the average
    ///   of every frame tracked against it); measured in docs/slam-rgbd.md.
    pub fn rgbd() -> Self {
        let mut c = Self {
            use_calib: true,
            ..Self::default()
        };
        c.matching.projective = true;
        c.tracking.sigma_depth = 0.01;
        c.tracking.sigma_plane = 0.002;
        c.tracking.depth_noise = true;
        c.tracking.max_iters = 20;
        c.tracking.rel_error = 1e-3;
        c.tracking.finest_level = 1;
        c.tracking.checkerboard = true;
        c.local_opt.checkerboard = true;
        c.tracking.delta_norm = 1e-5;
        c.local_opt.sigma_depth = 0.01;
        c.local_opt.sigma_plane = 0.002;
        c.local_opt.depth_noise = true;
        c.tracking.match_frac_thresh = 0.5;
        c.local_opt.max_iters = 10;
        // The back end's edges carry tracking's photometric residual too, and a lighter pixel
        // residual (the rounding to the matched pixel: weighted as a measurement it holds
        // keyframes in local minima a pixel wide). Tuned on redkitchen 0-399 with 0-299 held at
        // or below its former ATE; figures in docs/slam-rgbd.md, "What a loop edge can correct".
        c.local_opt.sigma_photo = 0.1;
        c.local_opt.sigma_pixel = 0.7;
        c.retrieval.k = 6;
        c.rgbd.backend_level = 0;
        // Tracking's photometric term and keyframe fusion, tuned on redkitchen 0-399 (a 400-frame
        // run) with the 300-frame run at or below 1.82 cm; docs/slam-rgbd.md, "Where the
        // remaining error is". A keyframe keeps one depth image (its first observation) instead
        // of the confidence-weighted average of every frame tracked against it: those frames
        // are placed by relative poses whose error grows with the distance to the keyframe, and
        // averaging them bends the keyframe's geometry. 0-399 with weighted fusion, sigma 0.4 /
        // 0.1: 2.68 / 2.23 cm; with `first`, sigma 0.2 / 0.1 / 0.07 / 0.05 / 0.03: 2.21 / 2.10 /
        // 1.86 / 1.85 / 1.86 cm (300-frame run: 0.07 1.69, 0.05 1.77 cm).
        c.tracking.sigma_photo = 0.07;
        c.tracking.filtering_mode = FusionMode::First;
        // With projective association the matched pixel is the one the point projects to, so
        // the pixel residual is only the rounding to that pixel (under half a pixel, whatever
        // the pose): it carries no information and, weighted as a measurement, holds the pose
        // where it started. Tracking weights it down to nothing (the depth, plane and
        // photometric rows constrain the pose).
        c.tracking.sigma_pixel = 1e3;
        // A plane seen by depth alone scores ~1e-8, the same plane with its texture ~1e-4, and
        // real frames of redkitchen more.
        c.tracking.min_constraint = 1e-6;
        c.retrieval.appearance = true;
        c.tracking.motion_prior = true;
        c
    }

    /// Reads overrides from a YAML file (base.yaml layout) on top of `self`.
    pub fn apply_yaml_file(&mut self, path: &Path) -> Result<(), SlamError> {
        let text = std::fs::read_to_string(path).map_err(|source| SlamError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        self.apply_yaml(&text, path)
    }

    /// Applies overrides given as YAML text; `path` only names the source in errors.
    pub fn apply_yaml(&mut self, text: &str, path: &Path) -> Result<(), SlamError> {
        let mut section: Option<String> = None;
        for (i, raw) in text.lines().enumerate() {
            let line_no = i + 1;
            let err = |message: String| SlamError::Parse {
                path: path.to_path_buf(),
                line: line_no,
                message,
            };
            let content = match raw.find('#') {
                Some(p) => &raw[..p],
                None => raw,
            };
            if content.trim().is_empty() {
                continue;
            }
            let indented = content.starts_with(' ') || content.starts_with('\t');
            let Some((key, value)) = content.trim().split_once(':') else {
                return Err(err(format!(
                    "expected 'key: value', found '{}'",
                    content.trim()
                )));
            };
            let key = key.trim();
            let value = value.trim();
            if !indented {
                if value.is_empty() {
                    section = Some(key.to_string());
                    continue;
                }
                section = None;
                self.set(None, key, value).map_err(err)?;
            } else {
                let Some(sec) = section.as_deref() else {
                    return Err(err(format!("'{key}' is indented but not inside a section")));
                };
                self.set(Some(sec), key, value).map_err(err)?;
            }
        }
        Ok(())
    }

    /// Sets one key (`section` None for top-level keys).
    pub fn set(&mut self, section: Option<&str>, key: &str, value: &str) -> Result<(), String> {
        fn f(v: &str) -> Result<f64, String> {
            v.parse::<f64>()
                .map_err(|_| format!("'{v}' is not a number"))
        }
        fn u(v: &str) -> Result<usize, String> {
            let x = f(v)?;
            if x < 0.0 || x.fract() != 0.0 {
                return Err(format!("'{v}' is not a non-negative integer"));
            }
            Ok(x as usize)
        }
        fn b(v: &str) -> Result<bool, String> {
            match v.to_ascii_lowercase().as_str() {
                "true" | "yes" | "1" => Ok(true),
                "false" | "no" | "0" => Ok(false),
                _ => Err(format!("'{v}' is not a boolean")),
            }
        }
        let unknown = || {
            format!(
                "unknown key '{}{key}'",
                section.map(|s| format!("{s}.")).unwrap_or_default()
            )
        };
        match section {
            None => match key {
                "use_calib" => self.use_calib = b(value)?,
                "single_thread" => self.single_thread = b(value)?,
                "decode_ahead" => self.decode_ahead = b(value)?,
                "encode_ahead" => self.encode_ahead = b(value)?,
                "forced_keyframe_every" => self.forced_keyframe_every = u(value)?,
                _ => return Err(unknown()),
            },
            // Accepted for compatibility with MASt3R-SLAM files; the data loader handles these.
            Some("dataset") => match key {
                "subsample" | "img_downsample" | "center_principle_point" => {}
                _ => return Err(unknown()),
            },
            Some("matching") => {
                let m = &mut self.matching;
                match key {
                    "max_iter" => m.max_iter = u(value)?,
                    "lambda_init" => m.lambda_init = f(value)?,
                    "convergence_thresh" => m.convergence_thresh = f(value)?,
                    "dist_thresh" => m.dist_thresh = f(value)?,
                    "radius" => m.radius = u(value)?,
                    "dilation_max" => m.dilation_max = u(value)?,
                    "projective" => m.projective = b(value)?,
                    _ => return Err(unknown()),
                }
            }
            Some("tracking") => {
                let t = &mut self.tracking;
                match key {
                    "min_match_frac" => t.min_match_frac = f(value)?,
                    "max_iters" => t.max_iters = u(value)?,
                    "C_conf" => t.c_conf = f(value)?,
                    "Q_conf" => t.q_conf = f(value)?,
                    "rel_error" => t.rel_error = f(value)?,
                    "delta_norm" => t.delta_norm = f(value)?,
                    "huber" => t.huber = f(value)?,
                    "match_frac_thresh" => t.match_frac_thresh = f(value)?,
                    "sigma_ray" => t.sigma_ray = f(value)?,
                    "sigma_dist" => t.sigma_dist = f(value)?,
                    "sigma_pixel" => t.sigma_pixel = f(value)?,
                    "sigma_depth" => t.sigma_depth = f(value)?,
                    "sigma_plane" => t.sigma_plane = f(value)?,
                    "depth_noise" => t.depth_noise = b(value)?,
                    "sigma_point" => {}
                    "pixel_border" => t.pixel_border = f(value)?,
                    "depth_eps" => t.depth_eps = f(value)?,
                    "finest_level" => t.finest_level = u(value)?,
                    "checkerboard" => t.checkerboard = b(value)?,
                    "pairs" => t.pairs = b(value)?,
                    "filtering_mode" => t.filtering_mode = value.parse()?,
                    "sigma_photo" => t.sigma_photo = f(value)?,
                    "min_constraint" => t.min_constraint = f(value)?,
                    "max_weak_frames" => t.max_weak_frames = u(value)?,
                    "motion_prior" => t.motion_prior = b(value)?,
                    "model_keyframes" => t.model_keyframes = u(value)?,
                    "model_frames" => t.model_frames = u(value)?,
                    "filtering_score" => {
                        t.filtering_score = match value {
                            "median" => FilteringScore::Median,
                            "mean" => FilteringScore::Mean,
                            _ => {
                                return Err(format!(
                                    "unknown filtering score '{value}' (median or mean)"
                                ));
                            }
                        }
                    }
                    _ => return Err(unknown()),
                }
            }
            Some("local_opt") => {
                let l = &mut self.local_opt;
                match key {
                    "pin" => l.pin = u(value)?,
                    "window_size" => l.window_size = u(value)?,
                    "C_conf" => l.c_conf = f(value)?,
                    "Q_conf" => l.q_conf = f(value)?,
                    "min_match_frac" => l.min_match_frac = f(value)?,
                    "pixel_border" => l.pixel_border = f(value)?,
                    "depth_eps" => l.depth_eps = f(value)?,
                    "max_iters" => l.max_iters = u(value)?,
                    "sigma_ray" => l.sigma_ray = f(value)?,
                    "sigma_dist" => l.sigma_dist = f(value)?,
                    "sigma_pixel" => l.sigma_pixel = f(value)?,
                    "sigma_photo" => l.sigma_photo = f(value)?,
                    "sigma_depth" => l.sigma_depth = f(value)?,
                    "sigma_plane" => l.sigma_plane = f(value)?,
                    "depth_noise" => l.depth_noise = b(value)?,
                    "sigma_point" | "use_cuda" => {}
                    "delta_norm" => l.delta_norm = f(value)?,
                    "final_iters" => l.final_iters = u(value)?,
                    "coarse_iters" => l.coarse_iters = u(value)?,
                    "checkerboard" => l.checkerboard = b(value)?,
                    _ => return Err(unknown()),
                }
            }
            Some("retrieval") => match key {
                "k" => self.retrieval.k = u(value)?,
                "min_thresh" => self.retrieval.min_thresh = f(value)?,
                "max_distance" => self.retrieval.max_distance = f(value)?,
                "max_angle_deg" => self.retrieval.max_angle_deg = f(value)?,
                "appearance" => self.retrieval.appearance = b(value)?,
                "min_similarity" => self.retrieval.min_similarity = f(value)?,
                "exclude_recent" => self.retrieval.exclude_recent = u(value)?,
                _ => return Err(unknown()),
            },
            Some("reloc") => match key {
                "min_match_frac" => self.reloc.min_match_frac = f(value)?,
                "strict" => self.reloc.strict = b(value)?,
                _ => return Err(unknown()),
            },
            Some("rgbd") => {
                let r = &mut self.rgbd;
                match key {
                    "downsample" => r.downsample = u(value)?.max(1),
                    "pyramid_levels" => r.pyramid_levels = u(value)?.max(1),
                    "backend_level" => r.backend_level = u(value)?,
                    "min_depth" => r.min_depth = f(value)?,
                    "max_depth" => r.max_depth = f(value)?,
                    "optimize_scale" => r.optimize_scale = b(value)?,
                    "export_conf" => r.export_conf = f(value)?,
                    _ => return Err(unknown()),
                }
            }
            Some(other) => return Err(format!("unknown section '{other}'")),
        }
        Ok(())
    }
}
