//! Projective data association and fused normal equations for calibrated views (RGB-D).
//!
//! In a calibrated view every point lies on its pixel's ray, so the view's ray image is the
//! image of pixel rays, and the pixel iterative projection ([`crate::matching`]) converges to is
//! the one the point projects to with the intrinsics. For calibrated views the match is
//! therefore found directly: project, round to the nearest pixel, then the same occlusion check
//! (3D distance below `matching.dist_thresh`). This is exact, needs no ray image and no warm
//! start, and costs one projection per point instead of up to ten bilinear Levenberg-Marquardt
//! steps. The MASt3R front end (uncalibrated network pointmaps) keeps iterative projection.
//!
//! The normal equations are built in the same pass as the association (no match arrays), with
//! the residual model of [`crate::tracker::point_info`] (pixel + log-depth + point-to-plane,
//! Huber on whitened residuals) written out per residual row: for a row with prediction
//! derivative `e = dh/dY` at the point `P` the pose acts on, the Jacobian row is
//! `[e, P x e, e . P]` (translation, rotation, scale of the left perturbation). Pixels are summed
//! in fixed chunks on rayon's pool and combined in chunk order ([`crate::par`]), so results are
//! bit-identical whatever the thread count.

use rust3r_geometry::{PinholeCamera, Sim3};

use crate::config::MatchingConfig;
use crate::matching::Matches;
use crate::par::{self, CHUNK};
use crate::residuals::huber_weight;
use crate::tracker::{LevelView, NormalEq, ResidualParams};

/// `s R` (row-major) and `t` of a transform, for inner loops (no quaternion per point).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Affine {
    /// `s R`.
    pub m: [[f64; 3]; 3],
    /// `t`.
    pub t: [f64; 3],
}

impl Affine {
    /// From a similarity.
    pub fn from_sim3(t: &Sim3) -> Self {
        let r = t.rotation_matrix() * t.scale;
        let mut m = [[0.0; 3]; 3];
        for (i, row) in m.iter_mut().enumerate() {
            for (j, v) in row.iter_mut().enumerate() {
                *v = r[(i, j)];
            }
        }
        Self { m, t: [t.translation.x, t.translation.y, t.translation.z] }
    }

    /// `s R p + t`.
    #[inline(always)]
    pub fn act(&self, p: [f64; 3]) -> [f64; 3] {
        let m = &self.m;
        [
            m[0][0] * p[0] + m[0][1] * p[1] + m[0][2] * p[2] + self.t[0],
            m[1][0] * p[0] + m[1][1] * p[1] + m[1][2] * p[2] + self.t[1],
            m[2][0] * p[0] + m[2][1] * p[1] + m[2][2] * p[2] + self.t[2],
        ]
    }
}

#[inline(always)]
fn f64x3(p: [f32; 3]) -> [f64; 3] {
    [p[0] as f64, p[1] as f64, p[2] as f64]
}

/// Pixel (linear index, rounded to the nearest) that `y` (in the camera of a `width x height`
/// view with intrinsics `cam`) projects to, with the sub-pixel position; `None` behind the
/// camera or outside the image.
#[inline(always)]
pub fn project_pixel(cam: &PinholeCamera, width: usize, height: usize, y: [f64; 3]) -> Option<(usize, [f64; 2])> {
    if !(y[2] > 0.0) {
        return None;
    }
    let iz = 1.0 / y[2];
    let u = cam.fx * y[0] * iz + cam.cx;
    let v = cam.fy * y[1] * iz + cam.cy;
    // Nearest pixel inside the image: u in [-0.5, width - 0.5).
    if !(u >= -0.5 && v >= -0.5 && u < width as f64 - 0.5 && v < height as f64 - 0.5) {
        return None;
    }
    let (iu, iv) = ((u + 0.5) as usize, (v + 0.5) as usize);
    Some((iv.min(height - 1) * width + iu.min(width - 1), [u, v]))
}

/// Match of a measurement point `xq` (in the measurement camera) in `src`: the pixel it
/// projects to with `t_src_meas`, if that pixel has a valid point within `sqrt(dist2)`.
#[inline(always)]
fn match_point(src: &LevelView, cam: &PinholeCamera, t_src_meas: &Affine, xq: [f64; 3], dist2: f64) -> Option<usize> {
    let y = t_src_meas.act(xq);
    let (j, _) = project_pixel(cam, src.width, src.height, y)?;
    if !src.valid[j] {
        return None;
    }
    let p = src.points[j];
    let d = [p[0] as f64 - y[0], p[1] as f64 - y[1], p[2] as f64 - y[2]];
    (d[0] * d[0] + d[1] * d[1] + d[2] * d[2] < dist2).then_some(j)
}

/// Projective association (drop-in for [`crate::tracker::associate`] on calibrated views):
/// each valid pixel `q` of `meas` is moved into `src` by `t_src_meas`, projected, rounded and
/// checked for occlusion. `pos` holds the sub-pixel projections.
pub fn associate(src: &LevelView, meas: &LevelView, t_src_meas: &Sim3, cfg: &MatchingConfig) -> Matches {
    let cam = src.cam.expect("projective association needs a calibrated source view");
    let t = Affine::from_sim3(t_src_meas);
    let dist2 = cfg.dist_thresh * cfg.dist_thresh;
    let n = meas.len();
    let mut out = vec![(0u32, [0.0f32; 2], false); n];
    par::fill(&mut out, |q| {
        if !meas.valid[q] {
            return (0, [0.0; 2], false);
        }
        let xq = f64x3(meas.points[q]);
        let y = t.act(xq);
        let Some((j, uv)) = project_pixel(&cam, src.width, src.height, y) else {
            return (0, [0.0; 2], false);
        };
        let ok = match_point(src, &cam, &t, xq, dist2).is_some();
        (j as u32, [uv[0] as f32, uv[1] as f32], ok)
    });
    Matches {
        idx: out.iter().map(|o| o.0).collect(),
        pos: out.iter().map(|o| o.1).collect(),
        valid: out.iter().map(|o| o.2).collect(),
    }
}

/// Number of valid matches of `meas`'s pixels in `src` (see [`associate`]).
pub fn match_count(src: &LevelView, meas: &LevelView, t_src_meas: &Sim3, cfg: &MatchingConfig) -> usize {
    let cam = src.cam.expect("projective association needs a calibrated source view");
    let t = Affine::from_sim3(t_src_meas);
    let dist2 = cfg.dist_thresh * cfg.dist_thresh;
    par::chunked_reduce(
        meas.len(),
        CHUNK,
        |r| r.filter(|&q| meas.valid[q] && match_point(src, &cam, &t, f64x3(meas.points[q]), dist2).is_some()).count(),
        |a, b| a + b,
    )
    .unwrap_or(0)
}

/// Partial normal equations: upper triangle of `H` (row-major packed, 28), `g` (7), cost,
/// count.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Acc {
    /// Upper triangle of `J^T W J`, rows packed.
    pub h: [f64; 28],
    /// `J^T W r`.
    pub g: [f64; 7],
    /// `0.5 r^T W r`.
    pub cost: f64,
    /// Correspondences.
    pub count: usize,
}

impl Default for Acc {
    fn default() -> Self {
        Self { h: [0.0; 28], g: [0.0; 7], cost: 0.0, count: 0 }
    }
}

impl Acc {
    /// Adds one residual row `r` with Jacobian row `j` and weight `w`; only the first `D`
    /// pose coordinates (6: SE(3), 7: Sim(3)).
    #[inline(always)]
    pub fn add_row<const D: usize>(&mut self, j: &[f64; 7], r: f64, w: f64) {
        let mut k = 0;
        for a in 0..7 {
            let wj = w * j[a];
            for b in a..7 {
                if a < D && b < D {
                    self.h[k] += wj * j[b];
                }
                k += 1;
            }
            if a < D {
                self.g[a] += wj * r;
            }
        }
        self.cost += 0.5 * w * r * r;
    }

    /// `self + other`, element-wise in a fixed order.
    pub fn merge(mut self, o: Self) -> Self {
        for (a, b) in self.h.iter_mut().zip(&o.h) {
            *a += b;
        }
        for (a, b) in self.g.iter_mut().zip(&o.g) {
            *a += b;
        }
        self.cost += o.cost;
        self.count += o.count;
        self
    }

    /// Full (symmetric) normal equations.
    pub fn to_normal_eq(&self) -> NormalEq {
        let mut eq = NormalEq::default();
        let mut k = 0;
        for a in 0..7 {
            for b in a..7 {
                eq.h[(a, b)] = self.h[k];
                eq.h[(b, a)] = self.h[k];
                k += 1;
            }
            eq.g[a] = self.g[a];
        }
        eq.cost = self.cost;
        eq.count = self.count;
        eq
    }
}

/// Adds the calibrated residuals of measurement pixel `q` (point `xq`) against the prediction
/// `y` (in the measurement camera): pixel (2), log-depth, point-to-plane. The Jacobian rows are
/// `[e, P x e, e . P]` with `e = dh/dY A` (`A` the identity when `None`). Returns whether the
/// correspondence was used ([`crate::tracker::point_info`]'s validity rules).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn calib_point<const D: usize>(
    acc: &mut Acc,
    meas: &LevelView,
    cam: &PinholeCamera,
    q: usize,
    xq: [f64; 3],
    y: [f64; 3],
    p: &ResidualParams,
    pj: [f64; 3],
    a: Option<&[[f64; 3]; 3]>,
) {
    if !(y[2] > p.depth_eps) || !(xq[2] > p.depth_eps) {
        return;
    }
    let iz = 1.0 / y[2];
    let pu = cam.fx * y[0] * iz + cam.cx;
    let pv = cam.fy * y[1] * iz + cam.cy;
    let b = p.pixel_border;
    if !(pu >= b && pu <= cam.width as f64 - 1.0 - b && pv >= b && pv <= cam.height as f64 - 1.0 - b) {
        return;
    }
    let u = (q % meas.width) as f64;
    let v = (q / meas.width) as f64;
    let (zs_log, zs_plane) = if p.depth_noise { (xq[2].max(0.5), (xq[2] * xq[2]).max(0.25)) } else { (1.0, 1.0) };
    let mut row = |r: f64, dh: [f64; 3], sigma: f64| {
        let sqrt_info = 1.0 / sigma;
        let w = sqrt_info * sqrt_info * huber_weight(sqrt_info * r, p.huber);
        let e = match a {
            None => dh,
            Some(a) => [
                dh[0] * a[0][0] + dh[1] * a[1][0] + dh[2] * a[2][0],
                dh[0] * a[0][1] + dh[1] * a[1][1] + dh[2] * a[2][1],
                dh[0] * a[0][2] + dh[1] * a[1][2] + dh[2] * a[2][2],
            ],
        };
        let j = [
            e[0],
            e[1],
            e[2],
            pj[1] * e[2] - pj[2] * e[1],
            pj[2] * e[0] - pj[0] * e[2],
            pj[0] * e[1] - pj[1] * e[0],
            e[0] * pj[0] + e[1] * pj[1] + e[2] * pj[2],
        ];
        acc.add_row::<D>(&j, r, w);
    };
    row(u - pu, [cam.fx * iz, 0.0, -cam.fx * y[0] * iz * iz], p.sigma_pixel);
    row(v - pv, [0.0, cam.fy * iz, -cam.fy * y[1] * iz * iz], p.sigma_pixel);
    row(xq[2].ln() - y[2].ln(), [0.0, 0.0, iz], p.sigma_depth * zs_log);
    if p.sigma_plane > 0.0 {
        if let Some(Some(n)) = meas.normals.get(q) {
            let n = f64x3(*n);
            let r = n[0] * (xq[0] - y[0]) + n[1] * (xq[1] - y[1]) + n[2] * (xq[2] - y[2]);
            row(r, n, p.sigma_plane * zs_plane);
        }
    }
    acc.count += 1;
}

fn reduce(n: usize, f: impl Fn(std::ops::Range<usize>) -> Acc + Sync + Send) -> NormalEq {
    par::chunked_reduce(n, CHUNK, f, Acc::merge).unwrap_or_default().to_normal_eq()
}

fn tracking_terms<const D: usize>(src: &LevelView, meas: &LevelView, t_ms: &Affine, t_sm: &Affine, p: &ResidualParams, dist2: f64, range: std::ops::Range<usize>) -> Acc {
    let cam_s = src.cam.expect("calibrated source view");
    let cam_m = meas.cam.expect("calibrated measurement view");
    let mut acc = Acc::default();
    for q in range {
        if !meas.valid[q] {
            continue;
        }
        let xq = f64x3(meas.points[q]);
        let Some(j) = match_point(src, &cam_s, t_sm, xq, dist2) else { continue };
        let y = t_ms.act(f64x3(src.points[j]));
        calib_point::<D>(&mut acc, meas, &cam_m, q, xq, y, p, y, None);
    }
    acc
}

/// Normal equations of the relative pose `t_meas_src` (`Y = T X_src`) with projective
/// association at that pose, in one pass: [`crate::tracker::associate`] followed by
/// [`crate::tracker::build_normal_eq`] for calibrated views. `optimize_scale` false leaves the
/// scale row and column zero.
pub fn tracking_normal_eq(src: &LevelView, meas: &LevelView, t_meas_src: &Sim3, p: &ResidualParams, dist_thresh: f64, optimize_scale: bool) -> NormalEq {
    let t_ms = Affine::from_sim3(t_meas_src);
    let t_sm = Affine::from_sim3(&t_meas_src.inverse());
    let dist2 = dist_thresh * dist_thresh;
    if optimize_scale {
        reduce(meas.len(), |r| tracking_terms::<7>(src, meas, &t_ms, &t_sm, p, dist2, r))
    } else {
        reduce(meas.len(), |r| tracking_terms::<6>(src, meas, &t_ms, &t_sm, p, dist2, r))
    }
}

#[allow(clippy::too_many_arguments)]
fn edge_terms<const D: usize>(
    src: &LevelView,
    meas: &LevelView,
    t_ms: &Affine,
    t_sm: &Affine,
    t_ws: &Affine,
    a: &[[f64; 3]; 3],
    p: &ResidualParams,
    dist2: f64,
    range: std::ops::Range<usize>,
) -> Acc {
    let cam_s = src.cam.expect("calibrated source view");
    let cam_m = meas.cam.expect("calibrated measurement view");
    let mut acc = Acc::default();
    for q in range {
        if !meas.valid[q] {
            continue;
        }
        let xq = f64x3(meas.points[q]);
        let Some(j) = match_point(src, &cam_s, t_sm, xq, dist2) else { continue };
        let x = f64x3(src.points[j]);
        let y = t_ms.act(x);
        let pw = t_ws.act(x);
        calib_point::<D>(&mut acc, meas, &cam_m, q, xq, y, p, pw, Some(a));
    }
    acc
}

/// Normal equations of one directed back-end edge: points of `src` (camera-to-world
/// `t_wc_src`) seen from `meas` (`t_wc_meas`), with the Jacobian with respect to the *source*
/// world pose, `dY/dxi_s = (s_m R_m)^-1 [I, -[P]x, P]` (that of the measurement pose is its
/// negative; [`crate::residuals::world_point_jacobian`]). Projective association at the
/// current poses, in the same pass.
pub fn edge_normal_eq(src: &LevelView, t_wc_src: &Sim3, meas: &LevelView, t_wc_meas: &Sim3, p: &ResidualParams, dist_thresh: f64, optimize_scale: bool) -> NormalEq {
    let t_m_inv = t_wc_meas.inverse();
    let t_ms_s = t_m_inv.compose(t_wc_src);
    let t_ms = Affine::from_sim3(&t_ms_s);
    let t_sm = Affine::from_sim3(&t_ms_s.inverse());
    let t_ws = Affine::from_sim3(t_wc_src);
    let a = Affine::from_sim3(&t_m_inv).m;
    let dist2 = dist_thresh * dist_thresh;
    if optimize_scale {
        reduce(meas.len(), |r| edge_terms::<7>(src, meas, &t_ms, &t_sm, &t_ws, &a, p, dist2, r))
    } else {
        reduce(meas.len(), |r| edge_terms::<6>(src, meas, &t_ms, &t_sm, &t_ws, &a, p, dist2, r))
    }
}
