//! Frame-to-keyframe tracking (MASt3R-SLAM `tracker.py`), CPU reference in f64.
//!
//! For each pyramid level (coarse to fine) and Gauss-Newton iteration:
//!
//! 1. **Match** (projective association): every keyframe point is moved into the frame's
//!    camera with the current relative pose and located in the frame by iterative projection
//!    on the frame's ray image ([`crate::matching`]), then rounded and checked for occlusion.
//!    For calibrated views with `matching.projective` (RGB-D) the point is projected with the
//!    intrinsics instead, which lands on the same pixel, and steps 1 and 2 run fused and in
//!    parallel ([`crate::projective`]). Matching is redone every iteration, as ICP does: an
//!    RGB-D frame has no network prediction that is independent of the pose.
//! 2. **Linearise** the residual of each match: the frame point `X_f(p)` moved into the
//!    keyframe, `Y = T_CkCf X_f(p)`, against keyframe pixel `q`'s measurement: pixel + log-depth
//!    ([`crate::residuals::calib_residual`]) plus point-to-plane along `q`'s normal for a
//!    calibrated camera, ray + distance otherwise. Residuals are whitened by their sigmas, and
//!    Huber-weighted (k = 1.345) on the whitened value.
//! 3. **Solve** `H d = g` (7x7 Sim(3), or 6x6 SE(3) with the scale fixed for metric depth:
//!    scale is then known, and a free scale would only absorb noise) and retract
//!    `T <- Exp(d) T`; stop on a small relative cost decrease or a small step.
//!
//! Gauss-Newton runs coarse to fine down to `tracking.finest_level`; the final association
//! (statistics, keyframe rule, fusion observation) is at level 0. The normal-equation
//! reductions over pixels are also available on the GPU ([`crate::kernels`]).
//!
//! This is how frames are tracked on their own pointmaps (RGB-D, or the MASt3R front end with
//! `tracking.pairs` off, and relocalisation). With a front end that decodes pairs, MASt3R-SLAM's
//! tracking is [`Tracker::track_pair`] ([`crate::pair`]): the network predicts the keyframe's
//! points in the frame's camera, so matching is done once per frame, refined with the
//! descriptors, and the residuals are weighted by the match quality `Q`.

use nalgebra::{Matrix3, SMatrix, Vector2, Vector3};
use rust3r_geometry::{Matrix3x7, Matrix7, PinholeCamera, Sim3, Vector7};

use crate::config::{MatchingConfig, TrackingConfig};
use crate::matching::{Matches, RayImage, match_iterative_proj, ray_image};
use crate::photometric::{IntensityPyramid, LevelTerm, PhotoParams};
use crate::pointmap::{Pointmap, level_camera};
use crate::residuals::{self, huber_weight};
use rayon::prelude::*;

/// Largest relative depth difference between a frame point moved into the keyframe and the
/// keyframe's depth at its pixel for the photometric residual (same surface).
pub const PHOTO_MAX_REL_DEPTH: f64 = 0.05;

/// Median depth of the valid points of a pointmap (1 when none).
pub fn median_depth(pm: &Pointmap, conf: &[f32]) -> f64 {
    let mut z: Vec<f32> = pm
        .points
        .iter()
        .zip(conf)
        .filter(|(p, c)| **c > 0.0 && p[2] > 0.0)
        .map(|(p, _)| p[2])
        .step_by(7)
        .collect();
    if z.is_empty() {
        return 1.0;
    }
    let k = z.len() / 2;
    let (_, m, _) = z.select_nth_unstable_by(k, |a, b| a.total_cmp(b));
    *m as f64
}

/// Sigmas and thresholds of the residual model (tracking or back end).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ResidualParams {
    /// Pixel sigma (calibrated).
    pub sigma_pixel: f64,
    /// Log-depth sigma (calibrated).
    pub sigma_depth: f64,
    /// Point-to-plane sigma (calibrated; 0 disables).
    pub sigma_plane: f64,
    /// Depth-dependent depth sigmas (sigma at 1 m; plane ~ z^2, log-depth ~ z).
    pub depth_noise: bool,
    /// Ray sigma (uncalibrated).
    pub sigma_ray: f64,
    /// Distance sigma (uncalibrated).
    pub sigma_dist: f64,
    /// Huber threshold on whitened residuals.
    pub huber: f64,
    /// Smallest valid depth.
    pub depth_eps: f64,
    /// Projection border in pixels (negative allows outside).
    pub pixel_border: f64,
    /// Minimum average confidence.
    pub c_conf: f64,
    /// Sum only the pixels with `u + v` even (projective association path; RGB-D addition).
    pub checkerboard: bool,
}

impl ResidualParams {
    /// From the tracking section.
    pub fn tracking(t: &TrackingConfig) -> Self {
        Self {
            sigma_pixel: t.sigma_pixel,
            sigma_depth: t.sigma_depth,
            sigma_plane: t.sigma_plane,
            depth_noise: t.depth_noise,
            sigma_ray: t.sigma_ray,
            sigma_dist: t.sigma_dist,
            huber: t.huber,
            depth_eps: t.depth_eps,
            pixel_border: t.pixel_border,
            c_conf: t.c_conf,
            checkerboard: t.checkerboard,
        }
    }
    /// From the local_opt section.
    pub fn local_opt(l: &crate::config::LocalOptConfig, huber: f64) -> Self {
        Self {
            sigma_pixel: l.sigma_pixel,
            sigma_depth: l.sigma_depth,
            sigma_plane: l.sigma_plane,
            depth_noise: l.depth_noise,
            sigma_ray: l.sigma_ray,
            sigma_dist: l.sigma_dist,
            huber,
            depth_eps: l.depth_eps,
            pixel_border: l.pixel_border,
            c_conf: l.c_conf,
            checkerboard: l.checkerboard,
        }
    }
}

/// A pointmap at one pyramid level, prepared for matching (ray image) and residuals (normals).
#[derive(Debug, Clone)]
pub struct LevelView {
    /// Camera of this level (calibrated front ends).
    pub cam: Option<PinholeCamera>,
    /// Columns.
    pub width: usize,
    /// Rows.
    pub height: usize,
    /// Points (calibrated: constrained to their pixel rays).
    pub points: Vec<[f32; 3]>,
    /// Point usable: average confidence above `c_conf` (and depth above `depth_eps`).
    pub valid: Vec<bool>,
    /// Unit rays and gradients.
    pub rays: RayImage,
    /// Unit normals (calibrated, when the plane term is on).
    pub normals: Vec<Option<[f32; 3]>>,
}

/// Largest relative depth difference between neighbours for a normal.
pub const NORMAL_MAX_REL_JUMP: f32 = 0.05;

impl LevelView {
    /// Builds the level-`level` view (every `2^level`-th pixel) of a pointmap with average
    /// confidences `avg_conf`, with its ray image (for iterative projection).
    pub fn new(
        pm: &Pointmap,
        avg_conf: &[f32],
        cam: Option<PinholeCamera>,
        level: usize,
        p: &ResidualParams,
        with_normals: bool,
    ) -> Self {
        Self::build(pm, avg_conf, cam, level, p, with_normals, true)
    }

    /// [`LevelView::new`]; `with_rays` false leaves the ray image empty (projective
    /// association of calibrated views does not need it).
    pub fn build(
        pm: &Pointmap,
        avg_conf: &[f32],
        cam: Option<PinholeCamera>,
        level: usize,
        p: &ResidualParams,
        with_normals: bool,
        with_rays: bool,
    ) -> Self {
        let step = 1usize << level;
        if let (Some(c), false) = (cam, with_rays) {
            return Self::build_calibrated(
                pm,
                avg_conf,
                level_camera(&c, step),
                step,
                p,
                with_normals,
            );
        }
        let mut sub = if step == 1 {
            Pointmap {
                width: pm.width,
                height: pm.height,
                points: pm.points.clone(),
                conf: avg_conf.to_vec(),
                colors: Vec::new(),
            }
        } else {
            let full = Pointmap {
                width: pm.width,
                height: pm.height,
                points: pm.points.clone(),
                conf: avg_conf.to_vec(),
                colors: vec![[0; 3]; pm.len()],
            };
            full.subsample(step)
        };
        let cam = cam.map(|c| level_camera(&c, step));
        if let Some(c) = &cam {
            sub.constrain_to_rays(c);
        }
        let valid: Vec<bool> = (0..sub.len())
            .into_par_iter()
            .with_min_len(4096)
            .map(|i| {
                sub.conf[i] as f64 > p.c_conf
                    && (cam.is_none() || sub.points[i][2] as f64 > p.depth_eps)
            })
            .collect();
        // Pixels without a point still have a ray when the camera is calibrated.
        let w = sub.width;
        let rays = if !with_rays {
            RayImage {
                width: sub.width,
                height: sub.height,
                data: Vec::new(),
            }
        } else {
            ray_image(
                sub.width,
                sub.height,
                &sub.points,
                |i| {
                    cam.map(|c| {
                        [
                            ((i % w) as f64 - c.cx) as f32 / c.fx as f32,
                            ((i / w) as f64 - c.cy) as f32 / c.fy as f32,
                            1.0,
                        ]
                    })
                },
                |i| valid[i],
            )
        };
        let normals = if with_normals && cam.is_some() {
            let mut masked = sub.clone();
            for (c, v) in masked.conf.iter_mut().zip(&valid) {
                *c = if *v { 1.0 } else { 0.0 };
            }
            masked.normals(NORMAL_MAX_REL_JUMP)
        } else {
            Vec::new()
        };
        Self {
            cam,
            width: sub.width,
            height: sub.height,
            points: sub.points,
            valid,
            rays,
            normals,
        }
    }

    /// [`LevelView::build`] for a calibrated camera without a ray image: the same values,
    /// computed per pixel in parallel straight from the full-resolution pointmap.
    fn build_calibrated(
        pm: &Pointmap,
        avg_conf: &[f32],
        c: PinholeCamera,
        step: usize,
        p: &ResidualParams,
        with_normals: bool,
    ) -> Self {
        let (w, h) = (pm.width.div_ceil(step), pm.height.div_ceil(step));
        // Ray directions per column and row (the same expressions as `constrain_to_rays`).
        let rx: Vec<f32> = (0..w).map(|u| ((u as f64 - c.cx) / c.fx) as f32).collect();
        let ry: Vec<f32> = (0..h).map(|v| ((v as f64 - c.cy) / c.fy) as f32).collect();
        let mut points = vec![[0.0f32; 3]; w * h];
        crate::par::fill_rows(&mut points, w, |u, v, _| {
            let z = pm.points[v * step * pm.width + u * step][2];
            [rx[u] * z, ry[v] * z, z]
        });
        let mut valid = vec![false; w * h];
        crate::par::fill_rows(&mut valid, w, |u, v, i| {
            avg_conf[v * step * pm.width + u * step] as f64 > p.c_conf
                && points[i][2] as f64 > p.depth_eps
        });
        let normals = if with_normals {
            let mut n = vec![None; w * h];
            crate::par::fill_rows(&mut n, w, |u, v, _| {
                crate::pointmap::normal_at(&points, |j| valid[j], w, h, u, v, NORMAL_MAX_REL_JUMP)
            });
            n
        } else {
            Vec::new()
        };
        let rays = RayImage {
            width: w,
            height: h,
            data: Vec::new(),
        };
        Self {
            cam: Some(c),
            width: w,
            height: h,
            points,
            valid,
            rays,
            normals,
        }
    }

    /// Number of pixels.
    pub fn len(&self) -> usize {
        self.width * self.height
    }

    /// Whether the view has no pixels.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Point of pixel `i` as f64.
    #[inline]
    pub fn point(&self, i: usize) -> Vector3<f64> {
        let p = self.points[i];
        Vector3::new(p[0] as f64, p[1] as f64, p[2] as f64)
    }
}

/// Matches the measurement view's pixels to the source view: each valid pixel `q` of `meas`
/// is moved into the source camera by `t_src_meas` and located on the source's ray image.
pub fn associate(
    src: &LevelView,
    meas: &LevelView,
    t_src_meas: &Sim3,
    p_init: Option<&[[f32; 2]]>,
    cfg: &MatchingConfig,
) -> Matches {
    let n = meas.len();
    let queries: Vec<Option<[f32; 3]>> = (0..n)
        .map(|q| {
            if !meas.valid[q] {
                return None;
            }
            let y = t_src_meas.act(&meas.point(q));
            Some([y.x as f32, y.y as f32, y.z as f32])
        })
        .collect();
    let identity: Vec<[f32; 2]>;
    let init = match p_init {
        Some(p) if p.len() == n && src.width == meas.width && src.height == meas.height => p,
        _ => {
            // Identity start: pixel q of the measurement view at the same place in the source
            // (scaled when the sizes differ).
            let (sx, sy) = (
                src.width as f32 / meas.width as f32,
                src.height as f32 / meas.height as f32,
            );
            identity = (0..n)
                .map(|q| [(q % meas.width) as f32 * sx, (q / meas.width) as f32 * sy])
                .collect();
            &identity
        }
    };
    let mut m = match_iterative_proj(&src.rays, &src.points, &src.valid, &queries, init, cfg);
    for (q, v) in m.valid.iter_mut().enumerate() {
        *v = *v && meas.valid[q];
    }
    m
}

/// Accumulated normal equations of one pose (or one pair of poses).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NormalEq {
    /// `J^T W J` (7x7).
    pub h: Matrix7,
    /// `-J^T W r` (7).
    pub g: Vector7,
    /// `0.5 r^T W r` after robust weighting.
    pub cost: f64,
    /// Number of correspondences that contributed.
    pub count: usize,
}

impl Default for NormalEq {
    fn default() -> Self {
        Self {
            h: Matrix7::zeros(),
            g: Vector7::zeros(),
            cost: 0.0,
            count: 0,
        }
    }
}

impl NormalEq {
    /// Sum of two systems of the same pose (independent residuals).
    pub fn merge(mut self, o: &Self) -> Self {
        self.h += o.h;
        self.g += o.g;
        self.cost += o.cost;
        self.count += o.count;
        self
    }
}

/// How well a 6-DoF pose is pinned down by the normal equations `h`: the smallest over the
/// largest eigenvalue of `J^T W J` with the translation columns scaled by the scene depth
/// `depth` (so that a translation of `depth` and a rotation of one radian count alike). Near 0:
/// some direction of motion barely changes the residuals (a plane seen alone lets the camera
/// slide along it; too few points). 0 when the system is empty or not finite.
pub fn constraint_ratio(h: &Matrix7, depth: f64) -> f64 {
    let mut h6 = h.fixed_view::<6, 6>(0, 0).into_owned();
    let d = depth.max(1e-3);
    for i in 0..6 {
        for j in 0..6 {
            let si = if i < 3 { d } else { 1.0 };
            let sj = if j < 3 { d } else { 1.0 };
            h6[(i, j)] *= si * sj;
        }
    }
    if !h6.iter().all(|v| v.is_finite()) {
        return 0.0;
    }
    let ev = h6.symmetric_eigenvalues();
    let (lo, hi) = ev.iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), &e| {
        (lo.min(e), hi.max(e))
    });
    if hi > 0.0 { (lo / hi).max(0.0) } else { 0.0 }
}

/// Per-correspondence information in `y` (the transformed point): `M = sum dh^T W dh` (3x3),
/// `m = sum dh^T W r` (3), and the robust cost. Zero when the correspondence is invalid.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PointInfo {
    /// `sum_rows w dh^T dh`.
    pub m: Matrix3<f64>,
    /// `sum_rows w dh^T r`.
    pub v: Vector3<f64>,
    /// `0.5 sum_rows w r^2`.
    pub cost: f64,
}

/// Linearises the residuals between keyframe pixel `q` of `meas` and the source point moved
/// into `meas`'s camera, `y`. `None` when the projection or the measurement is invalid.
pub fn point_info(
    meas: &LevelView,
    q: usize,
    y: &Vector3<f64>,
    p: &ResidualParams,
) -> Option<PointInfo> {
    point_info_weighted(meas, q, y, p, 1.0)
}

/// [`point_info`] with every residual's information scaled by `weight` (MASt3R-SLAM's match
/// quality `Q`: square-root information `sqrt(Q) / sigma`, Huber on the residual whitened that
/// way).
pub fn point_info_weighted(
    meas: &LevelView,
    q: usize,
    y: &Vector3<f64>,
    p: &ResidualParams,
    weight: f64,
) -> Option<PointInfo> {
    let mut m = Matrix3::zeros();
    let mut v = Vector3::zeros();
    let mut cost = 0.0;
    let sqrt_weight = weight.sqrt();
    let mut add = |r: f64, dh: &SMatrix<f64, 1, 3>, sigma: f64| {
        let sqrt_info = sqrt_weight / sigma;
        let wr = sqrt_info * r;
        let w = sqrt_info * sqrt_info * huber_weight(wr, p.huber);
        m += dh.transpose() * dh * w;
        v += dh.transpose() * (w * r);
        cost += 0.5 * w * r * r;
    };
    let xq = meas.point(q);
    if let Some(cam) = &meas.cam {
        if !residuals::projection_valid(cam, y, p.pixel_border, p.depth_eps)
            || !(xq.z > p.depth_eps)
        {
            return None;
        }
        let u = (q % meas.width) as f64;
        let vv = (q / meas.width) as f64;
        let meas_v = Vector3::new(u, vv, xq.z.ln());
        let (r, dh) = residuals::calib_residual_dy(cam, &meas_v, y);
        add(
            r.x,
            &dh.fixed_view::<1, 3>(0, 0).into_owned(),
            p.sigma_pixel,
        );
        add(
            r.y,
            &dh.fixed_view::<1, 3>(1, 0).into_owned(),
            p.sigma_pixel,
        );
        // Depth noise of a structured-light sensor grows with z^2 (z in log-depth).
        let (zs_log, zs_plane) = if p.depth_noise {
            (xq.z.max(0.5), (xq.z * xq.z).max(0.25))
        } else {
            (1.0, 1.0)
        };
        add(
            r.z,
            &dh.fixed_view::<1, 3>(2, 0).into_owned(),
            p.sigma_depth * zs_log,
        );
        if p.sigma_plane > 0.0
            && let Some(Some(n)) = meas.normals.get(q)
        {
            let n = Vector3::new(n[0] as f64, n[1] as f64, n[2] as f64);
            let r = n.dot(&(xq - y));
            add(r, &n.transpose(), p.sigma_plane * zs_plane);
        }
    } else {
        let norm = xq.norm();
        if !(norm > 0.0) || !(y.norm() > 0.0) {
            return None;
        }
        let meas_v = residuals::ray_dist(&xq);
        let (r, dh) = residuals::ray_dist_residual_dy(&meas_v, y);
        for k in 0..4 {
            let sigma = if k < 3 { p.sigma_ray } else { p.sigma_dist };
            add(r[k], &dh.fixed_view::<1, 3>(k, 0).into_owned(), sigma);
        }
    }
    Some(PointInfo { m, v, cost })
}

/// Adds a correspondence with `dy/dxi = d` (3x7) to the normal equations.
#[inline]
pub fn accumulate(eq: &mut NormalEq, info: &PointInfo, d: &Matrix3x7) {
    // r' = r - dh d xi  =>  H = d^T M d, g = d^T m.
    let md = info.m * d;
    eq.h += d.transpose() * md;
    eq.g += d.transpose() * info.v;
    eq.cost += info.cost;
    eq.count += 1;
}

/// Normal equations of the relative pose `t_meas_src` (`Y = T X_src`) over all matches.
pub fn build_normal_eq(
    src: &LevelView,
    meas: &LevelView,
    matches: &Matches,
    t_meas_src: &Sim3,
    p: &ResidualParams,
) -> NormalEq {
    let mut eq = NormalEq::default();
    for q in 0..meas.len() {
        if !matches.valid[q] {
            continue;
        }
        let pi = matches.idx[q] as usize;
        if !src.valid[pi] {
            continue;
        }
        let y = t_meas_src.act(&src.point(pi));
        if let Some(info) = point_info(meas, q, &y, p) {
            accumulate(&mut eq, &info, &residuals::point_jacobian(&y));
        }
    }
    eq
}

/// Solves the (6 or 7)-DoF system; `None` when it is not positive definite.
pub fn solve_pose(eq: &NormalEq, optimize_scale: bool) -> Option<Vector7> {
    if optimize_scale {
        let chol = eq.h.cholesky()?;
        Some(chol.solve(&eq.g))
    } else {
        let h6 = eq.h.fixed_view::<6, 6>(0, 0).into_owned();
        let g6 = eq.g.fixed_rows::<6>(0).into_owned();
        let x = h6.cholesky()?.solve(&g6);
        let mut d = Vector7::zeros();
        d.fixed_rows_mut::<6>(0).copy_from(&x);
        Some(d)
    }
}

/// MASt3R-SLAM `check_convergence`.
pub fn converged(
    rel_error: f64,
    delta_norm: f64,
    old_cost: f64,
    new_cost: f64,
    delta: &Vector7,
) -> bool {
    let rel = ((old_cost - new_cost) / old_cost).abs();
    rel < rel_error || delta.norm() < delta_norm
}

/// Outcome of tracking one frame.
#[derive(Debug, Clone)]
pub struct TrackResult {
    /// Relative pose keyframe <- frame (`T_CkCf`).
    pub t_kf_frame: Sim3,
    /// Fraction of keyframe pixels with a valid match usable by the optimisation.
    pub match_frac: f64,
    /// `min(match fraction, unique-frame-pixel fraction)` (keyframe rule).
    pub keyframe_frac: f64,
    /// The frame should become a keyframe.
    pub new_keyframe: bool,
    /// Too few matches: tracking lost.
    pub lost: bool,
    /// Frame points moved into the keyframe, per keyframe pixel (full pointmap resolution),
    /// with their confidences (0: no observation), for fusion.
    pub observation: Option<(Vec<[f32; 3]>, Vec<f32>)>,
    /// Gauss-Newton iterations run (all levels).
    pub iterations: usize,
    /// Final robust cost.
    pub cost: f64,
    /// [`constraint_ratio`] of the last solve (finest level tracked); 1 where not measured.
    pub constraint: f64,
    /// The pose is poorly constrained (`constraint` below `tracking.min_constraint`) or the last
    /// solve failed: the frame is flagged and neither fused nor made a keyframe.
    pub weak: bool,
}

/// Frame-to-keyframe tracker.
#[derive(Debug, Clone)]
pub struct Tracker {
    /// Tracking settings.
    pub cfg: TrackingConfig,
    /// Matching settings.
    pub matching: MatchingConfig,
    /// Pyramid levels (1: pointmap resolution only).
    pub levels: usize,
    /// Optimise scale (Sim(3)); false: SE(3).
    pub optimize_scale: bool,
}

impl Tracker {
    /// Tracks `frame` (average confidences `frame_conf`) against the keyframe pointmap `kf`
    /// (average confidences `kf_conf`), starting from `t_init` (`T_CkCf`). `cam` is the
    /// pointmaps' calibration when known.
    pub fn track(
        &self,
        frame: &Pointmap,
        frame_conf: &[f32],
        kf: &Pointmap,
        kf_conf: &[f32],
        cam: Option<PinholeCamera>,
        t_init: &Sim3,
    ) -> TrackResult {
        if cam.is_some() && self.matching.projective {
            return self.track_projective(frame, frame_conf, kf, kf_conf, cam, t_init);
        }
        let p = ResidualParams::tracking(&self.cfg);
        let mut t = *t_init;
        let mut iterations = 0;
        let mut last = None;
        let mut cost = 0.0;
        let with_normals = p.sigma_plane > 0.0;
        let levels = self.levels.max(1);
        for level in (self.cfg.finest_level.min(levels - 1)..levels).rev() {
            let fv = LevelView::new(frame, frame_conf, cam, level, &p, false);
            let kv = LevelView::new(kf, kf_conf, cam, level, &p, with_normals);
            let mut warm: Option<Vec<[f32; 2]>> = None;
            self.iterate_level(level, &mut t, &mut iterations, &mut cost, |t| {
                let m = associate(&fv, &kv, &t.inverse(), warm.as_deref(), &self.matching);
                let eq = build_normal_eq(&fv, &kv, &m, t, &p);
                warm = Some(m.pos.clone());
                eq
            });
            if level == 0 {
                last = Some((fv, kv));
            }
        }
        let (fv, kv) = last.unwrap_or_else(|| {
            (
                LevelView::new(frame, frame_conf, cam, 0, &p, false),
                LevelView::new(kf, kf_conf, cam, 0, &p, false),
            )
        });
        let mut res = self.finish(&fv, &kv, frame_conf, &t);
        res.iterations = iterations;
        res.cost = cost;
        res
    }

    /// [`Tracker::track`] for calibrated views with projective association
    /// ([`crate::projective`]): association and normal equations in one parallel pass per
    /// Gauss-Newton iteration, no ray images.
    fn track_projective(
        &self,
        frame: &Pointmap,
        frame_conf: &[f32],
        kf: &Pointmap,
        kf_conf: &[f32],
        cam: Option<PinholeCamera>,
        t_init: &Sim3,
    ) -> TrackResult {
        let p = ResidualParams::tracking(&self.cfg);
        let mut t = *t_init;
        let mut iterations = 0;
        let mut cost = 0.0;
        let with_normals = p.sigma_plane > 0.0;
        let mut last = None;
        let levels = self.levels.max(1);
        let finest = self.cfg.finest_level.min(levels - 1);
        let photo = self.photometric(frame, kf, levels);
        let mut last_eq = None;
        for level in (finest..levels).rev() {
            let fv = LevelView::build(frame, frame_conf, cam, level, &p, false, false);
            let kv = LevelView::build(kf, kf_conf, cam, level, &p, with_normals, false);
            let term = photo
                .as_ref()
                .map(|(fp, kp, pp)| LevelTerm::at_level(fp, kp, pp, level, &fv, &kv, &t));
            let eq = self.iterate_level(level, &mut t, &mut iterations, &mut cost, |t| {
                let eq = crate::projective::tracking_normal_eq(
                    &fv,
                    &kv,
                    t,
                    &p,
                    self.matching.dist_thresh,
                    self.optimize_scale,
                );
                match &term {
                    Some(term) => eq.merge(&term.normal_eq(&fv, &kv, t)),
                    None => eq,
                }
            });
            if eq.is_some() {
                last_eq = eq;
            }
            if level == 0 {
                last = Some((fv, kv));
            }
        }
        let (fv, kv) = match last {
            Some(v) => v,
            None => (
                LevelView::build(frame, frame_conf, cam, 0, &p, false, false),
                LevelView::build(kf, kf_conf, cam, 0, &p, false, false),
            ),
        };
        let m = crate::projective::associate(&fv, &kv, &t.inverse(), &self.matching);
        let mut res = self.finish_with(&fv, &kv, frame_conf, &t, &m);
        res.iterations = iterations;
        res.cost = cost;
        self.judge(&mut res, last_eq.as_ref(), kf, kf_conf);
        res
    }

    /// Frame-to-model tracking ([`crate::model`]): tracks `frame` against `model` (a view
    /// rendered at the predicted pose, so starting from the identity), then associates the
    /// frame with the keyframe `kf` at the resulting pose for the match statistics, the
    /// keyframe rule and the fusion observation. `t_kf_model` is `T_CkCm`, the rendered view
    /// in the keyframe's camera. Calibrated projective association only; other set-ups track
    /// against `kf` from `t_kf_model` ([`Tracker::track`]).
    #[allow(clippy::too_many_arguments)]
    pub fn track_model(
        &self,
        frame: &Pointmap,
        frame_conf: &[f32],
        model: &Pointmap,
        kf: &Pointmap,
        kf_conf: &[f32],
        cam: Option<PinholeCamera>,
        t_kf_model: &Sim3,
    ) -> TrackResult {
        if cam.is_none() || !self.matching.projective {
            return self.track(frame, frame_conf, kf, kf_conf, cam, t_kf_model);
        }
        let on_model = self.track(
            frame,
            frame_conf,
            model,
            &model.conf,
            cam,
            &Sim3::identity(),
        );
        let t = t_kf_model.compose(&on_model.t_kf_frame);
        let mut res = self.evaluate(frame, frame_conf, kf, kf_conf, cam, &t);
        res.iterations = on_model.iterations;
        res.cost = on_model.cost;
        res.constraint = on_model.constraint;
        res.weak = !res.lost && on_model.weak;
        res
    }

    /// The final association of [`Tracker::track`] alone, at the pose `t` (`T_CkCf`):
    /// statistics, keyframe decision and fusion observation, no optimisation.
    pub fn evaluate(
        &self,
        frame: &Pointmap,
        frame_conf: &[f32],
        kf: &Pointmap,
        kf_conf: &[f32],
        cam: Option<PinholeCamera>,
        t: &Sim3,
    ) -> TrackResult {
        let p = ResidualParams::tracking(&self.cfg);
        let projective = cam.is_some() && self.matching.projective;
        let fv = LevelView::build(frame, frame_conf, cam, 0, &p, false, !projective);
        let kv = LevelView::build(kf, kf_conf, cam, 0, &p, false, !projective);
        if projective {
            let m = crate::projective::associate(&fv, &kv, &t.inverse(), &self.matching);
            self.finish_with(&fv, &kv, frame_conf, t, &m)
        } else {
            self.finish(&fv, &kv, frame_conf, t)
        }
    }

    /// The photometric term's pyramids and settings, when `tracking.sigma_photo` is positive.
    pub(crate) fn photometric(
        &self,
        frame: &Pointmap,
        kf: &Pointmap,
        levels: usize,
    ) -> Option<(IntensityPyramid, IntensityPyramid, PhotoParams)> {
        (self.cfg.sigma_photo > 0.0 && !frame.colors.is_empty() && !kf.colors.is_empty()).then(
            || {
                let pp = PhotoParams {
                    sigma: self.cfg.sigma_photo,
                    huber: self.cfg.huber,
                    max_rel_depth: PHOTO_MAX_REL_DEPTH,
                };
                (
                    IntensityPyramid::from_pointmap(frame, levels),
                    IntensityPyramid::from_pointmap(kf, levels),
                    pp,
                )
            },
        )
    }

    /// Failure detection from the last solve's normal equations: `constraint` and `weak`.
    pub(crate) fn judge(
        &self,
        res: &mut TrackResult,
        eq: Option<&NormalEq>,
        kf: &Pointmap,
        kf_conf: &[f32],
    ) {
        let Some(eq) = eq else {
            // No solve ran (too few residuals): nothing pins the pose.
            res.constraint = 0.0;
            res.weak = !res.lost && self.cfg.min_constraint > 0.0;
            return;
        };
        let depth = median_depth(kf, kf_conf);
        res.constraint = constraint_ratio(&eq.h, depth);
        res.weak = !res.lost && res.constraint < self.cfg.min_constraint;
    }

    /// Gauss-Newton at one pyramid level: `normal_eq(t)` is the system at pose `t`; stops at
    /// `max_iters`, with fewer than 6 residuals, on a singular system or at convergence.
    /// Returns the last system solved (`None` when none was).
    pub(crate) fn iterate_level(
        &self,
        level: usize,
        t: &mut Sim3,
        iterations: &mut usize,
        cost: &mut f64,
        mut normal_eq: impl FnMut(&Sim3) -> NormalEq,
    ) -> Option<NormalEq> {
        let mut old_cost = f64::INFINITY;
        let mut solved = None;
        for _ in 0..self.cfg.max_iters {
            *iterations += 1;
            let eq = normal_eq(t);
            *cost = eq.cost;
            if eq.count < 6 {
                break;
            }
            let Some(delta) = solve_pose(&eq, self.optimize_scale) else {
                break;
            };
            solved = Some(eq);
            tracing::trace!(
                "level {level}: {} matches, cost {:.3}, |delta| {:.2e}",
                eq.count,
                eq.cost,
                delta.norm()
            );
            *t = t.retr(&delta);
            let done = converged(
                self.cfg.rel_error,
                self.cfg.delta_norm,
                old_cost,
                eq.cost,
                &delta,
            );
            old_cost = eq.cost;
            if done {
                break;
            }
        }
        solved
    }

    /// Final association at the optimised pose `t`: match statistics, the keyframe decision
    /// and the fusion observation.
    pub fn finish(
        &self,
        fv: &LevelView,
        kv: &LevelView,
        frame_conf: &[f32],
        t: &Sim3,
    ) -> TrackResult {
        // Final association at the optimised pose, for the statistics and fusion.
        let m = associate(fv, kv, &t.inverse(), None, &self.matching);
        self.finish_with(fv, kv, frame_conf, t, &m)
    }

    /// [`Tracker::finish`] with the final matches `m` (keyframe pixels in the frame) given.
    pub fn finish_with(
        &self,
        fv: &LevelView,
        kv: &LevelView,
        frame_conf: &[f32],
        t: &Sim3,
        m: &Matches,
    ) -> TrackResult {
        let n = kv.len() as f64;
        // Per keyframe pixel, in parallel: the matched frame pixel (u32::MAX: none) and the
        // observation for fusion (confidence 0: none).
        let mut per_q = vec![(u32::MAX, [0.0f32; 3], 0.0f32); kv.len()];
        let tq = crate::projective::Affine::from_sim3(t);
        crate::par::fill_rows(&mut per_q, kv.width, |u, v, q| {
            if !m.valid[q] {
                return (u32::MAX, [0.0; 3], 0.0);
            }
            let pi = m.idx[q] as usize;
            if !fv.valid[pi] {
                return (u32::MAX, [0.0; 3], 0.0);
            }
            let x = fv.points[pi];
            let y = tq.act([x[0] as f64, x[1] as f64, x[2] as f64]);
            let mut y = Vector3::new(y[0], y[1], y[2]);
            if let Some(c) = &kv.cam {
                // Calibrated: keep the depth, on the keyframe pixel's ray.
                y = c.unproject(&Vector2::new(u as f64, v as f64), y.z);
                // Gate fusion on the depth-noise model: an observation more than 3 sigma from
                // the keyframe's depth (an edge, an occluder, a moved object) is not averaged in.
                if self.cfg.depth_noise && self.cfg.sigma_plane > 0.0 {
                    let zq = kv.points[q][2] as f64;
                    let sigma = self.cfg.sigma_plane * (zq * zq).max(0.25);
                    if (y.z - zq).abs() > 3.0 * sigma {
                        return (pi as u32, [0.0; 3], 0.0);
                    }
                }
            }
            (
                pi as u32,
                [y.x as f32, y.y as f32, y.z as f32],
                frame_conf[pi],
            )
        });
        let mut n_valid = 0usize;
        let mut seen = vec![false; fv.len()];
        let mut n_unique = 0usize;
        for (pi, _, _) in &per_q {
            if *pi != u32::MAX {
                n_valid += 1;
                let s = &mut seen[*pi as usize];
                n_unique += !*s as usize;
                *s = true;
            }
        }
        let obs_points: Vec<[f32; 3]> = per_q.iter().map(|o| o.1).collect();
        let obs_conf: Vec<f32> = per_q.iter().map(|o| o.2).collect();
        let match_frac = n_valid as f64 / n;
        let keyframe_frac = match_frac.min(n_unique as f64 / n);
        let lost = match_frac < self.cfg.min_match_frac;
        TrackResult {
            t_kf_frame: *t,
            match_frac,
            keyframe_frac,
            new_keyframe: !lost && keyframe_frac < self.cfg.match_frac_thresh,
            lost,
            observation: if lost {
                None
            } else {
                Some((obs_points, obs_conf))
            },
            iterations: 0,
            cost: 0.0,
            constraint: 1.0,
            weak: false,
        }
    }
}
