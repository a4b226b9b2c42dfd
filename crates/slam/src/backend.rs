//! Factor-graph back end (MASt3R-SLAM `global_opt.py` + `gn_kernels.cu`): Gauss-Newton over
//! keyframe poses with a sparse Cholesky (faer).
//!
//! Each edge `(i, j)` contributes the residuals of both directions: points of `i` moved into
//! `j` against `j`'s pixel measurements, and the reverse, with the residual model of tracking
//! (pixel + log-depth + point-to-plane for a calibrated camera, ray + distance otherwise).
//! As in tracking, the correspondences of an RGB-D pair depend on the poses, so they are
//! re-associated at every iteration. Uncalibrated (mono) edges are associated by iterative
//! projection once per optimisation, at its starting poses, and keep those matches through its
//! iterations, as MASt3R-SLAM keeps an edge's matches: re-associating them at every iteration
//! let keyframes slide (redkitchen 0-299 with ideal depth-made pairs: 16.9 cm ATE before, 0.97 cm
//! after; `tests/depth_pairs.rs`). With `local_opt.sigma_photo` > 0 and keyframe intensity
//! images, each direction also carries the photometric residual of tracking
//! ([`crate::photometric`]), so that directions depth leaves free (a camera sliding along a
//! wall) are held by the texture in the back end as in tracking. The first `pin` keyframes are
//! fixed (gauge), as are
//! keyframes outside the window of the `window_size` most recent ones.
//!
//! The Jacobians with respect to the world poses: for `y = T_WCj^-1 T_WCi X` and left
//! perturbations, `dy/dxi_i = (s_j R_j)^-1 [I, -[P]x, P]` with `P = T_WCi X`, and
//! `dy/dxi_j = -dy/dxi_i` ([`crate::residuals::world_point_jacobian`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use faer::Side;
use faer::linalg::solvers::Solve;
use faer::sparse::{SparseColMat, Triplet};
use rust3r_geometry::{Matrix7, PinholeCamera, Sim3, Vector7};

use crate::config::{LocalOptConfig, MatchingConfig};
use crate::matching::Matches;
use crate::photometric::{IntensityImage, PhotoParams, brightness, photometric_normal_eq};
use crate::residuals;
use crate::tracker::{LevelView, PHOTO_MAX_REL_DEPTH, ResidualParams, associate, point_info};

/// An edge of the factor graph between keyframes `i < j`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Edge {
    /// First keyframe.
    pub i: usize,
    /// Second keyframe.
    pub j: usize,
}

/// Outcome of one optimisation.
#[derive(Debug, Clone, PartialEq)]
pub struct OptReport {
    /// Iterations run.
    pub iterations: usize,
    /// Robust cost at the first and last linearisation.
    pub initial_cost: f64,
    /// See `initial_cost`.
    pub final_cost: f64,
    /// Norm of the last update.
    pub last_step: f64,
}

/// Keyframe data the back end needs: pose and pyramid-level view.
#[derive(Debug, Clone)]
pub struct KeyframeView {
    /// Camera-to-world pose.
    pub t_wc: Sim3,
    /// Pointmap view at the back end's level.
    pub view: LevelView,
    /// Intensity image at the same level (the photometric term; `None` leaves it out).
    pub intensity: Option<Arc<IntensityImage>>,
}

/// Directed association of an edge: points of `src` matched to pixels of `meas`.
fn directed(src: &KeyframeView, meas: &KeyframeView, cfg: &MatchingConfig) -> Matches {
    let t_src_meas = src.t_wc.inverse().compose(&meas.t_wc);
    associate(&src.view, &meas.view, &t_src_meas, None, cfg)
}

/// Whether an edge between these views uses projective association ([`crate::projective`]).
fn projective(src: &KeyframeView, meas: &KeyframeView, cfg: &MatchingConfig) -> bool {
    cfg.projective && src.view.cam.is_some() && meas.view.cam.is_some()
}

/// How well two keyframes overlap at their current poses: the smaller [`match_fraction`] of
/// the two directions (how loop candidates are scored and loop corrections judged).
pub fn overlap(a: &KeyframeView, b: &KeyframeView, cfg: &MatchingConfig) -> f64 {
    match_fraction(a, b, cfg).min(match_fraction(b, a, cfg))
}

/// Fraction of `meas`'s pixels with a valid match to `src` at the current poses.
pub fn match_fraction(src: &KeyframeView, meas: &KeyframeView, cfg: &MatchingConfig) -> f64 {
    let n = if projective(src, meas, cfg) {
        let t_src_meas = src.t_wc.inverse().compose(&meas.t_wc);
        crate::projective::match_count(&src.view, &meas.view, &t_src_meas, cfg)
    } else {
        directed(src, meas, cfg)
            .valid
            .iter()
            .filter(|v| **v)
            .count()
    };
    n as f64 / meas.view.len().max(1) as f64
}

/// `J^T W J`, `J^T W r` and the cost of the directed edge `s -> m` (points of `s` seen from
/// `m`), with the Jacobian with respect to `s`'s world pose.
fn edge_terms(
    kfs: &[KeyframeView],
    s: usize,
    m: usize,
    p: &ResidualParams,
    matching: &MatchingConfig,
    optimize_scale: bool,
    fixed: &mut BTreeMap<(usize, usize), Matches>,
) -> (Matrix7, Vector7, f64) {
    if projective(&kfs[s], &kfs[m], matching) {
        let eq = crate::projective::edge_normal_eq(
            &kfs[s].view,
            &kfs[s].t_wc,
            &kfs[m].view,
            &kfs[m].t_wc,
            p,
            matching.dist_thresh,
            optimize_scale,
        );
        return (eq.h, eq.g, eq.cost);
    }
    // Associated once per optimisation, at the starting poses, then kept (MASt3R-SLAM keeps an
    // edge's matches for good).
    let matches = fixed
        .entry((s, m))
        .or_insert_with(|| directed(&kfs[s], &kfs[m], matching));
    let t_m_inv = kfs[m].t_wc.inverse();
    let t_ms = t_m_inv.compose(&kfs[s].t_wc);
    let mut h = Matrix7::zeros();
    let mut g = Vector7::zeros();
    let mut cost = 0.0;
    let sv = &kfs[s].view;
    let mv = &kfs[m].view;
    for q in 0..mv.len() {
        if !matches.valid[q] {
            continue;
        }
        let pi = matches.idx[q] as usize;
        if !sv.valid[pi] {
            continue;
        }
        let x = sv.points[pi];
        let x = nalgebra::Vector3::new(x[0] as f64, x[1] as f64, x[2] as f64);
        let y = t_ms.act(&x);
        let Some(info) = point_info(mv, q, &y, p) else {
            continue;
        };
        let pw = kfs[s].t_wc.act(&x);
        let d = residuals::world_point_jacobian(&t_m_inv, &pw);
        h += d.transpose() * (info.m * d);
        g += d.transpose() * info.v;
        cost += info.cost;
    }
    (h, g, cost)
}

/// `J^T W J`, `J^T W r` and the cost of the photometric residual of the directed edge `s -> m`
/// (points of `s` moved into `m`, compared with `m`'s intensities after the brightness
/// `gain_bias`), with the Jacobian with respect to `s`'s world pose. The relative pose
/// `T_ms = T_m^-1 T_s` moves by `Ad(T_m^-1) xi_s` under a left perturbation `xi_s` of `T_s`,
/// so the tracker's normal equations are mapped by that adjoint. `None` without images.
fn photo_terms(
    kfs: &[KeyframeView],
    s: usize,
    m: usize,
    pp: &PhotoParams,
    gains: &mut BTreeMap<(usize, usize), (f64, f64)>,
) -> Option<(Matrix7, Vector7, f64)> {
    let (si, mi) = (kfs[s].intensity.as_deref()?, kfs[m].intensity.as_deref()?);
    let t_m_inv = kfs[m].t_wc.inverse();
    let t_ms = t_m_inv.compose(&kfs[s].t_wc);
    let (sv, mv) = (&kfs[s].view, &kfs[m].view);
    // Fitted once per optimisation, at the starting poses (as tracking does per level).
    let gb = *gains
        .entry((s, m))
        .or_insert_with(|| brightness(sv, si, mv, mi, &t_ms, pp));
    let eq = photometric_normal_eq(sv, si, mv, mi, &t_ms, pp, gb);
    let ad = t_m_inv.adjoint();
    Some((ad.transpose() * eq.h * ad, ad.transpose() * eq.g, eq.cost))
}

/// Gauss-Newton over the poses of `kfs` along `edges`. Keyframes with index `< first_free`
/// are held fixed. Returns `None` when nothing is free.
pub fn optimize(
    kfs: &mut [KeyframeView],
    edges: &[Edge],
    first_free: usize,
    cfg: &LocalOptConfig,
    matching: &MatchingConfig,
    huber: f64,
    optimize_scale: bool,
) -> Option<OptReport> {
    let n = kfs.len();
    if first_free >= n || edges.is_empty() {
        return None;
    }
    let p = ResidualParams::local_opt(cfg, huber);
    let dof = if optimize_scale { 7 } else { 6 };
    let nfree = n - first_free;
    let photo = (cfg.sigma_photo > 0.0).then_some(PhotoParams {
        sigma: cfg.sigma_photo,
        huber,
        max_rel_depth: PHOTO_MAX_REL_DEPTH,
    });
    let mut gains = BTreeMap::new();
    let mut fixed = BTreeMap::new();
    let mut report = OptReport {
        iterations: 0,
        initial_cost: 0.0,
        final_cost: 0.0,
        last_step: 0.0,
    };
    for it in 0..cfg.max_iters.max(1) {
        // Block Hessian (upper blocks, i <= j) and gradient per keyframe.
        let mut blocks: BTreeMap<(usize, usize), Matrix7> = BTreeMap::new();
        let mut grad = vec![Vector7::zeros(); n];
        let mut cost = 0.0;
        for e in edges {
            for (s, m) in [(e.i, e.j), (e.j, e.i)] {
                let (mut h, mut g, mut c) =
                    edge_terms(kfs, s, m, &p, matching, optimize_scale, &mut fixed);
                if let Some((ph, pg, pc)) = photo
                    .as_ref()
                    .and_then(|pp| photo_terms(kfs, s, m, pp, &mut gains))
                {
                    h += ph;
                    g += pg;
                    c += pc;
                    if !optimize_scale {
                        for k in 0..7 {
                            h[(6, k)] = 0.0;
                            h[(k, 6)] = 0.0;
                        }
                        g[6] = 0.0;
                    }
                }
                cost += c;
                // d/dxi_s = D, d/dxi_m = -D.
                *blocks.entry((s, s)).or_insert_with(Matrix7::zeros) += h;
                *blocks.entry((m, m)).or_insert_with(Matrix7::zeros) += h;
                let (a, b) = if s < m { (s, m) } else { (m, s) };
                let off = if s < m { -h } else { -h.transpose() };
                *blocks.entry((a, b)).or_insert_with(Matrix7::zeros) += off;
                grad[s] += g;
                grad[m] -= g;
            }
        }
        if it == 0 {
            report.initial_cost = cost;
        }
        report.final_cost = cost;
        report.iterations = it + 1;
        // Sparse system over the free keyframes (full symmetric storage, lower side used).
        let dim = nfree * dof;
        let mut triplets = Vec::new();
        for (&(a, b), blk) in &blocks {
            if a < first_free || b < first_free {
                continue;
            }
            let (ra, rb) = ((a - first_free) * dof, (b - first_free) * dof);
            for r in 0..dof {
                for c in 0..dof {
                    let v = blk[(r, c)];
                    if v == 0.0 {
                        continue;
                    }
                    triplets.push(Triplet::new(ra + r, rb + c, v));
                    if a != b {
                        triplets.push(Triplet::new(rb + c, ra + r, v));
                    }
                }
            }
        }
        // A tiny damping keeps keyframes without constraints (no valid matches) solvable.
        for k in 0..dim {
            triplets.push(Triplet::new(k, k, 1e-9));
        }
        let mut rhs = faer::Mat::<f64>::zeros(dim, 1);
        for k in first_free..n {
            for r in 0..dof {
                rhs[((k - first_free) * dof + r, 0)] = grad[k][r];
            }
        }
        let Ok(h) = SparseColMat::<usize, f64>::try_new_from_triplets(dim, dim, &triplets) else {
            break;
        };
        let Ok(llt) = h.sp_cholesky(Side::Lower) else {
            break;
        };
        let x = llt.solve(&rhs);
        let mut step = 0.0;
        for k in first_free..n {
            let mut d = Vector7::zeros();
            for r in 0..dof {
                d[r] = x[((k - first_free) * dof + r, 0)];
            }
            step += d.norm_squared();
            kfs[k].t_wc = kfs[k].t_wc.retr(&d);
        }
        report.last_step = step.sqrt();
        tracing::trace!(
            "back-end iteration {it}: cost {cost:.1}, step {:.3e}",
            report.last_step
        );
        if report.last_step < cfg.delta_norm {
            break;
        }
    }
    Some(report)
}

/// Intensity image of a pointmap's colours at pyramid `level` (`None` without colours).
pub fn intensity_at(pm: &crate::pointmap::Pointmap, level: usize) -> Option<Arc<IntensityImage>> {
    if pm.colors.is_empty() {
        return None;
    }
    crate::photometric::IntensityPyramid::from_pointmap(pm, level + 1)
        .levels
        .into_iter()
        .nth(level)
        .map(Arc::new)
}

/// Builds the back-end views of keyframes at `level`.
pub fn keyframe_views(
    kfs: &[(Sim3, &crate::pointmap::Pointmap, Vec<f32>)],
    cam: Option<PinholeCamera>,
    level: usize,
    p: &ResidualParams,
) -> Vec<KeyframeView> {
    kfs.iter()
        .map(|(t, pm, conf)| KeyframeView {
            t_wc: *t,
            view: LevelView::new(pm, conf, cam, level, p, p.sigma_plane > 0.0),
            intensity: intensity_at(pm, level),
        })
        .collect()
}
