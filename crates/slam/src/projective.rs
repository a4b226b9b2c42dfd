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

/// Packed index of `(a, b)`, `a <= b < 7`, in [`Acc::h`].
#[inline(always)]
const fn upper(a: usize, b: usize) -> usize {
    a * 7 - a * (a.wrapping_sub(1)) / 2 + (b - a)
}

/// Information of one correspondence in the measurement camera: `M = sum_rows w e e^T`
/// (symmetric, `[m00 m01 m02 m11 m12 m22]`), `v = sum_rows w r e`, with `e = dh/dY`.
#[derive(Debug, Clone, Copy, Default)]
struct Info {
    m: [f64; 6],
    v: [f64; 3],
    cost: f64,
}

impl Info {
    /// A residual row whose `e` is `[a, 0, c]`.
    #[inline(always)]
    fn row_x(&mut self, r: f64, a: f64, c: f64, w: f64) {
        let (wa, wc) = (w * a, w * c);
        self.m[0] += wa * a;
        self.m[2] += wa * c;
        self.m[5] += wc * c;
        self.v[0] += wa * r;
        self.v[2] += wc * r;
        self.cost += 0.5 * w * r * r;
    }
    /// A residual row whose `e` is `[0, b, d]`.
    #[inline(always)]
    fn row_y(&mut self, r: f64, b: f64, d: f64, w: f64) {
        let (wb, wd) = (w * b, w * d);
        self.m[3] += wb * b;
        self.m[4] += wb * d;
        self.m[5] += wd * d;
        self.v[1] += wb * r;
        self.v[2] += wd * r;
        self.cost += 0.5 * w * r * r;
    }
    /// A residual row whose `e` is `[0, 0, c]`.
    #[inline(always)]
    fn row_z(&mut self, r: f64, c: f64, w: f64) {
        let wc = w * c;
        self.m[5] += wc * c;
        self.v[2] += wc * r;
        self.cost += 0.5 * w * r * r;
    }
    /// A residual row with a general `e`.
    #[inline(always)]
    fn row(&mut self, r: f64, e: [f64; 3], w: f64) {
        let we = [w * e[0], w * e[1], w * e[2]];
        self.m[0] += we[0] * e[0];
        self.m[1] += we[0] * e[1];
        self.m[2] += we[0] * e[2];
        self.m[3] += we[1] * e[1];
        self.m[4] += we[1] * e[2];
        self.m[5] += we[2] * e[2];
        self.v[0] += we[0] * r;
        self.v[1] += we[1] * r;
        self.v[2] += we[2] * r;
        self.cost += 0.5 * w * r * r;
    }
}

impl Acc {
    /// Adds a correspondence with information `info` whose Jacobian rows are
    /// `G e` with `G = [I; [P]x; P^T]` (7x3): `H += G M G^T`, `g += G v`. Only the first `D`
    /// pose coordinates (6: SE(3), 7: Sim(3)).
    #[inline(always)]
    fn add<const D: usize>(&mut self, info: &Info, p: [f64; 3]) {
        let [m00, m01, m02, m11, m12, m22] = info.m;
        let m = [[m00, m01, m02], [m01, m11, m12], [m02, m12, m22]];
        // N = G M (7x3): rows of M, then [P]x M and P^T M.
        let mut n = [[0.0f64; 3]; 7];
        for c in 0..3 {
            n[0][c] = m[0][c];
            n[1][c] = m[1][c];
            n[2][c] = m[2][c];
            n[3][c] = p[1] * m[2][c] - p[2] * m[1][c];
            n[4][c] = p[2] * m[0][c] - p[0] * m[2][c];
            n[5][c] = p[0] * m[1][c] - p[1] * m[0][c];
            n[6][c] = p[0] * m[0][c] + p[1] * m[1][c] + p[2] * m[2][c];
        }
        // H_ab = N_a . G_b.
        for a in 0..D {
            let na = n[a];
            let gb = [
                na[0],
                na[1],
                na[2],
                p[1] * na[2] - p[2] * na[1],
                p[2] * na[0] - p[0] * na[2],
                p[0] * na[1] - p[1] * na[0],
                p[0] * na[0] + p[1] * na[1] + p[2] * na[2],
            ];
            for b in a..D {
                self.h[upper(a, b)] += gb[b];
            }
        }
        let v = info.v;
        let g = [
            v[0],
            v[1],
            v[2],
            p[1] * v[2] - p[2] * v[1],
            p[2] * v[0] - p[0] * v[2],
            p[0] * v[1] - p[1] * v[0],
            p[0] * v[0] + p[1] * v[1] + p[2] * v[2],
        ];
        for a in 0..D {
            self.g[a] += g[a];
        }
        self.cost += info.cost;
        self.count += 1;
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
        for a in 0..7 {
            for b in a..7 {
                eq.h[(a, b)] = self.h[upper(a, b)];
                eq.h[(b, a)] = self.h[upper(a, b)];
            }
            eq.g[a] = self.g[a];
        }
        eq.cost = self.cost;
        eq.count = self.count;
        eq
    }
}

/// `ln(a / b)` for positive `a`, `b`: `2 atanh(s)` with `s = (a - b) / (a + b)` by its series
/// when `|s| < 0.1` (ratios within about 20 %; the first omitted term is below 1e-13
/// relative), `ln` otherwise. One division instead of two logarithms.
#[inline(always)]
pub fn ln_ratio(a: f64, b: f64) -> f64 {
    let s = (a - b) / (a + b);
    if s.abs() < 0.1 {
        let s2 = s * s;
        // 2 (s + s^3/3 + ... + s^13/13)
        let p = 1.0 / 13.0;
        let p = p * s2 + 1.0 / 11.0;
        let p = p * s2 + 1.0 / 9.0;
        let p = p * s2 + 1.0 / 7.0;
        let p = p * s2 + 1.0 / 5.0;
        let p = p * s2 + 1.0 / 3.0;
        let p = p * s2 + 1.0;
        2.0 * s * p
    } else {
        (a / b).ln()
    }
}

/// Weight of a residual `r` with sigma `sigma`: `huber(r / sigma) / sigma^2`.
#[inline(always)]
fn weight(r: f64, sigma: f64, k: f64) -> f64 {
    let si = 1.0 / sigma;
    si * si * huber_weight(si * r, k)
}

/// Residual model constants of a measurement view.
#[derive(Clone, Copy)]
struct Model {
    cam: PinholeCamera,
    wmax: f64,
    hmax: f64,
    p: ResidualParams,
}

impl Model {
    fn new(meas: &LevelView, p: &ResidualParams) -> Self {
        let cam = meas.cam.expect("calibrated measurement view");
        let b = p.pixel_border;
        Self { cam, wmax: cam.width as f64 - 1.0 - b, hmax: cam.height as f64 - 1.0 - b, p: *p }
    }

    /// The calibrated residuals of measurement pixel `(u, v)` with point `xq` and normal
    /// `normal` against the prediction `y` (measurement camera): pixel (2), log-depth,
    /// point-to-plane ([`crate::tracker::point_info`]'s model and validity rules).
    #[inline(always)]
    fn info(&self, u: f64, v: f64, xq: [f64; 3], normal: Option<[f32; 3]>, y: [f64; 3]) -> Option<Info> {
        let p = &self.p;
        if !(y[2] > p.depth_eps) || !(xq[2] > p.depth_eps) {
            return None;
        }
        let cam = &self.cam;
        let iz = 1.0 / y[2];
        let pu = cam.fx * y[0] * iz + cam.cx;
        let pv = cam.fy * y[1] * iz + cam.cy;
        let b = p.pixel_border;
        if !(pu >= b && pu <= self.wmax && pv >= b && pv <= self.hmax) {
            return None;
        }
        let (zs_log, zs_plane) = if p.depth_noise { (xq[2].max(0.5), (xq[2] * xq[2]).max(0.25)) } else { (1.0, 1.0) };
        let k = p.huber;
        let mut info = Info::default();
        let ru = u - pu;
        info.row_x(ru, cam.fx * iz, -cam.fx * y[0] * iz * iz, weight(ru, p.sigma_pixel, k));
        let rv = v - pv;
        info.row_y(rv, cam.fy * iz, -cam.fy * y[1] * iz * iz, weight(rv, p.sigma_pixel, k));
        let rz = ln_ratio(xq[2], y[2]);
        info.row_z(rz, iz, weight(rz, p.sigma_depth * zs_log, k));
        if p.sigma_plane > 0.0 {
            if let Some(n) = normal {
                let n = f64x3(n);
                let r = n[0] * (xq[0] - y[0]) + n[1] * (xq[1] - y[1]) + n[2] * (xq[2] - y[2]);
                info.row(r, n, weight(r, p.sigma_plane * zs_plane, k));
            }
        }
        Some(info)
    }
}

/// Sums the correspondences of measurement pixels `range`: each valid pixel's point `xq` is
/// matched in `src` through `t_sm`, the matched source point moved into the measurement camera
/// by `t_ms`, and its residuals added with the Jacobian point `P = s * y + c`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn terms<const D: usize>(src: &LevelView, meas: &LevelView, model: &Model, t_ms: &Affine, t_sm: &Affine, dist2: f64, ps: f64, pc: [f64; 3], range: std::ops::Range<usize>) -> Acc {
    let cam_s = src.cam.expect("calibrated source view");
    let mut acc = Acc::default();
    let w = meas.width;
    let (mut u, mut v) = (range.start % w, range.start / w);
    for q in range {
        let (uu, vv) = (u, v);
        u += 1;
        if u == w {
            u = 0;
            v += 1;
        }
        if !meas.valid[q] {
            continue;
        }
        let xq = f64x3(meas.points[q]);
        let Some(j) = match_point(src, &cam_s, t_sm, xq, dist2) else { continue };
        let y = t_ms.act(f64x3(src.points[j]));
        let normal = meas.normals.get(q).copied().flatten();
        let Some(info) = model.info(uu as f64, vv as f64, xq, normal, y) else { continue };
        acc.add::<D>(&info, [ps * y[0] + pc[0], ps * y[1] + pc[1], ps * y[2] + pc[2]]);
    }
    acc
}

fn reduce(n: usize, f: impl Fn(std::ops::Range<usize>) -> Acc + Sync + Send) -> Acc {
    par::chunked_reduce(n, CHUNK, f, Acc::merge).unwrap_or_default()
}

#[allow(clippy::too_many_arguments)]
fn sum_terms(src: &LevelView, meas: &LevelView, p: &ResidualParams, t_ms: &Affine, t_sm: &Affine, dist2: f64, ps: f64, pc: [f64; 3], optimize_scale: bool) -> Acc {
    let model = Model::new(meas, p);
    if optimize_scale {
        reduce(meas.len(), |r| terms::<7>(src, meas, &model, t_ms, t_sm, dist2, ps, pc, r))
    } else {
        reduce(meas.len(), |r| terms::<6>(src, meas, &model, t_ms, t_sm, dist2, ps, pc, r))
    }
}

/// Normal equations of the relative pose `t_meas_src` (`Y = T X_src`) with projective
/// association at that pose, in one pass: [`crate::tracker::associate`] followed by
/// [`crate::tracker::build_normal_eq`] for calibrated views. `optimize_scale` false leaves the
/// scale row and column zero.
pub fn tracking_normal_eq(src: &LevelView, meas: &LevelView, t_meas_src: &Sim3, p: &ResidualParams, dist_thresh: f64, optimize_scale: bool) -> NormalEq {
    let t_ms = Affine::from_sim3(t_meas_src);
    let t_sm = Affine::from_sim3(&t_meas_src.inverse());
    sum_terms(src, meas, p, &t_ms, &t_sm, dist_thresh * dist_thresh, 1.0, [0.0; 3], optimize_scale).to_normal_eq()
}

/// Normal equations of one directed back-end edge: points of `src` (camera-to-world
/// `t_wc_src`) seen from `meas` (`t_wc_meas`), with the Jacobian with respect to the *source*
/// world pose, `dY/dxi_s = A [I, -[P]x, P]` with `A = (s_m R_m)^-1` and `P` the world point
/// (that of the measurement pose is its negative; [`crate::residuals::world_point_jacobian`]).
/// Projective association at the current poses, in the same pass.
///
/// Since `[P]x R_m = R_m [R_m^T P]x`, the Jacobian rows are `D G' e` with
/// `D = diag(A^T, A^T, 1/s_m)` and `G' = [I; [P']x; P'^T]`, `P' = R_m^T P = s_m y + R_m^T t_m`:
/// the pixels are summed as in tracking (with `P'`) and `D` is applied once to the sums.
pub fn edge_normal_eq(src: &LevelView, t_wc_src: &Sim3, meas: &LevelView, t_wc_meas: &Sim3, p: &ResidualParams, dist_thresh: f64, optimize_scale: bool) -> NormalEq {
    let t_m_inv = t_wc_meas.inverse();
    let t_ms_s = t_m_inv.compose(t_wc_src);
    let t_ms = Affine::from_sim3(&t_ms_s);
    let t_sm = Affine::from_sim3(&t_ms_s.inverse());
    let rm = t_wc_meas.rotation_matrix();
    let sm = t_wc_meas.scale;
    let c = rm.transpose() * t_wc_meas.translation;
    let acc = sum_terms(src, meas, p, &t_ms, &t_sm, dist_thresh * dist_thresh, sm, [c.x, c.y, c.z], optimize_scale);
    let mut eq = acc.to_normal_eq();
    // D = diag(A^T, A^T, 1/s_m), A^T = R_m / s_m.
    let mut d = rust3r_geometry::Matrix7::zeros();
    let at = rm / sm;
    d.fixed_view_mut::<3, 3>(0, 0).copy_from(&at);
    d.fixed_view_mut::<3, 3>(3, 3).copy_from(&at);
    d[(6, 6)] = 1.0 / sm;
    eq.h = d * eq.h * d.transpose();
    eq.g = d * eq.g;
    if !optimize_scale {
        // D keeps the scale row and column apart; make them exactly zero as in tracking.
        for k in 0..7 {
            eq.h[(6, k)] = 0.0;
            eq.h[(k, 6)] = 0.0;
        }
        eq.g[6] = 0.0;
    }
    eq
}
