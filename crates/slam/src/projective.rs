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
        Self {
            m,
            t: [t.translation.x, t.translation.y, t.translation.z],
        }
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
pub fn project_pixel(
    cam: &PinholeCamera,
    width: usize,
    height: usize,
    y: [f64; 3],
) -> Option<(usize, [f64; 2])> {
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
fn match_point(
    src: &LevelView,
    cam: &PinholeCamera,
    t_src_meas: &Affine,
    xq: [f64; 3],
    dist2: f64,
) -> Option<usize> {
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
pub fn associate(
    src: &LevelView,
    meas: &LevelView,
    t_src_meas: &Sim3,
    cfg: &MatchingConfig,
) -> Matches {
    let cam = src
        .cam
        .expect("projective association needs a calibrated source view");
    let t = Affine::from_sim3(t_src_meas);
    let dist2 = cfg.dist_thresh * cfg.dist_thresh;
    let n = meas.len();
    let mut out = vec![(0u32, [0.0f32; 2], false); n];
    par::fill_rows(&mut out, meas.width, |_, _, q| {
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
pub fn match_count(
    src: &LevelView,
    meas: &LevelView,
    t_src_meas: &Sim3,
    cfg: &MatchingConfig,
) -> usize {
    let cam = src
        .cam
        .expect("projective association needs a calibrated source view");
    let t = Affine::from_sim3(t_src_meas);
    let dist2 = cfg.dist_thresh * cfg.dist_thresh;
    par::chunked_reduce(
        meas.len(),
        CHUNK,
        |r| {
            r.filter(|&q| {
                meas.valid[q] && match_point(src, &cam, &t, f64x3(meas.points[q]), dist2).is_some()
            })
            .count()
        },
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
        Self {
            h: [0.0; 28],
            g: [0.0; 7],
            cost: 0.0,
            count: 0,
        }
    }
}

/// Packed index of `(a, b)`, `a <= b < 7`, in [`Acc::h`].
#[inline(always)]
const fn upper(a: usize, b: usize) -> usize {
    a * 7 - a * (a.wrapping_sub(1)) / 2 + (b - a)
}

impl Acc {
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

/// Residual model constants of a measurement view.
#[derive(Clone, Copy)]
struct Model {
    cam: PinholeCamera,
    wmax: f64,
    hmax: f64,
    p: ResidualParams,
    /// Use only the pixels with `u + v` even (a checkerboard: half the pixels).
    checker: bool,
}

impl Model {
    fn new(meas: &LevelView, p: &ResidualParams) -> Self {
        let cam = meas.cam.expect("calibrated measurement view");
        let b = p.pixel_border;
        Self {
            cam,
            wmax: cam.width as f64 - 1.0 - b,
            hmax: cam.height as f64 - 1.0 - b,
            p: *p,
            checker: p.checkerboard,
        }
    }
}

/// Lanes of the correspondence kernel (4 x f64: one AVX2 register).
const LANES: usize = 4;

/// Up to [`CHUNK`] matched pairs of a chunk, structure of arrays, for the lane kernel: the
/// measurement pixel `(u, v)`, its point `x` and normal `n` (zero without one), the matched
/// source point moved into the measurement camera `y`, and the Jacobian point `P`. `s` and
/// `rz` are the kernel's scratch for the log-depth residual. The tail up to a multiple of
/// [`LANES`] is padded with invalid entries.
struct Batch {
    n: usize,
    u: [f64; CHUNK],
    v: [f64; CHUNK],
    xx: [f64; CHUNK],
    xy: [f64; CHUNK],
    xz: [f64; CHUNK],
    yx: [f64; CHUNK],
    yy: [f64; CHUNK],
    yz: [f64; CHUNK],
    nx: [f64; CHUNK],
    ny: [f64; CHUNK],
    nz: [f64; CHUNK],
    px: [f64; CHUNK],
    py: [f64; CHUNK],
    pz: [f64; CHUNK],
    s: [f64; CHUNK],
    rz: [f64; CHUNK],
}

thread_local! {
    /// One batch per thread, reused by every chunk the thread sums (34 KiB; no allocation or
    /// initialisation per chunk: entries past the padded length are never read).
    static BATCH: std::cell::RefCell<Box<Batch>> = std::cell::RefCell::new(Batch::zeroed());
}

impl Batch {
    fn zeroed() -> Box<Self> {
        let z = [0.0; CHUNK];
        Box::new(Self {
            n: 0,
            u: z,
            v: z,
            xx: z,
            xy: z,
            xz: z,
            yx: z,
            yy: z,
            yz: z,
            nx: z,
            ny: z,
            nz: z,
            px: z,
            py: z,
            pz: z,
            s: z,
            rz: z,
        })
    }

    #[inline(always)]
    fn push(&mut self, u: f64, v: f64, x: [f64; 3], n: [f64; 3], y: [f64; 3], p: [f64; 3]) {
        let k = self.n;
        (self.u[k], self.v[k]) = (u, v);
        (self.xx[k], self.xy[k], self.xz[k]) = (x[0], x[1], x[2]);
        (self.nx[k], self.ny[k], self.nz[k]) = (n[0], n[1], n[2]);
        (self.yx[k], self.yy[k], self.yz[k]) = (y[0], y[1], y[2]);
        (self.px[k], self.py[k], self.pz[k]) = (p[0], p[1], p[2]);
        self.n += 1;
    }

    /// Pads to a multiple of [`LANES`] with entries the kernel rejects (`y_z = 0`).
    fn pad(&mut self) -> usize {
        let end = self.n.next_multiple_of(LANES);
        for _ in self.n..end {
            self.push(0.0, 0.0, [0.0, 0.0, 1.0], [0.0; 3], [0.0; 3], [0.0; 3]);
        }
        end
    }
}

/// Four f64 lanes: AVX registers ([`Avx`]) or plain arrays ([`Portable`]). Only add, sub,
/// mul, div, compare, bit-select and abs are used, which are exact IEEE operations in both,
/// so both give the same bits.
trait F4:
    Copy
    + std::ops::Add<Output = Self>
    + std::ops::Sub<Output = Self>
    + std::ops::Mul<Output = Self>
    + std::ops::Div<Output = Self>
{
    fn splat(x: f64) -> Self;
    fn load(a: &[f64; CHUNK], k: usize) -> Self;
    fn to_array(self) -> [f64; LANES];
    /// All-ones lanes where `self < o`.
    fn lt(self, o: Self) -> Self;
    /// All-ones lanes where `self <= o`.
    fn le(self, o: Self) -> Self;
    /// All-ones lanes where `self != o`.
    fn ne(self, o: Self) -> Self;
    fn and(self, o: Self) -> Self;
    fn or(self, o: Self) -> Self;
    /// `if mask { a } else { b }` per lane (`mask` all-ones or zero).
    fn select(mask: Self, a: Self, b: Self) -> Self;
    fn abs(self) -> Self;
}

/// Portable lanes.
#[derive(Clone, Copy)]
struct Portable([f64; LANES]);

macro_rules! portable_op {
    ($tr:ident, $f:ident, $op:tt) => {
        impl std::ops::$tr for Portable {
            type Output = Self;
            #[inline(always)]
            fn $f(self, o: Self) -> Self {
                Portable(std::array::from_fn(|l| self.0[l] $op o.0[l]))
            }
        }
    };
}
portable_op!(Add, add, +);
portable_op!(Sub, sub, -);
portable_op!(Mul, mul, *);
portable_op!(Div, div, /);

impl F4 for Portable {
    #[inline(always)]
    fn splat(x: f64) -> Self {
        Portable([x; LANES])
    }
    #[inline(always)]
    fn load(a: &[f64; CHUNK], k: usize) -> Self {
        Portable([a[k], a[k + 1], a[k + 2], a[k + 3]])
    }
    #[inline(always)]
    fn to_array(self) -> [f64; LANES] {
        self.0
    }
    #[inline(always)]
    fn lt(self, o: Self) -> Self {
        Portable(std::array::from_fn(|l| {
            f64::from_bits(if self.0[l] < o.0[l] { u64::MAX } else { 0 })
        }))
    }
    #[inline(always)]
    fn le(self, o: Self) -> Self {
        Portable(std::array::from_fn(|l| {
            f64::from_bits(if self.0[l] <= o.0[l] { u64::MAX } else { 0 })
        }))
    }
    #[inline(always)]
    fn ne(self, o: Self) -> Self {
        Portable(std::array::from_fn(|l| {
            f64::from_bits(if self.0[l] != o.0[l] { u64::MAX } else { 0 })
        }))
    }
    #[inline(always)]
    fn and(self, o: Self) -> Self {
        Portable(std::array::from_fn(|l| {
            f64::from_bits(self.0[l].to_bits() & o.0[l].to_bits())
        }))
    }
    #[inline(always)]
    fn or(self, o: Self) -> Self {
        Portable(std::array::from_fn(|l| {
            f64::from_bits(self.0[l].to_bits() | o.0[l].to_bits())
        }))
    }
    #[inline(always)]
    fn select(m: Self, a: Self, b: Self) -> Self {
        Portable(std::array::from_fn(|l| {
            f64::from_bits(
                (m.0[l].to_bits() & a.0[l].to_bits()) | (!m.0[l].to_bits() & b.0[l].to_bits()),
            )
        }))
    }
    #[inline(always)]
    fn abs(self) -> Self {
        Portable(std::array::from_fn(|l| self.0[l].abs()))
    }
}

/// AVX lanes. Only used inside [`terms_avx2`] (compiled with AVX2 after a runtime check), so
/// the intrinsics always run on a CPU that has them.
#[cfg(target_arch = "x86_64")]
mod avx {
    use super::{CHUNK, F4, LANES};
    use std::arch::x86_64::*;

    #[derive(Clone, Copy)]
    pub(super) struct Avx(__m256d);

    macro_rules! avx_op {
        ($tr:ident, $f:ident, $intr:ident) => {
            impl std::ops::$tr for Avx {
                type Output = Self;
                #[inline(always)]
                fn $f(self, o: Self) -> Self {
                    // SAFETY: only reached from AVX2-enabled code after a runtime check.
                    Avx(unsafe { $intr(self.0, o.0) })
                }
            }
        };
    }
    avx_op!(Add, add, _mm256_add_pd);
    avx_op!(Sub, sub, _mm256_sub_pd);
    avx_op!(Mul, mul, _mm256_mul_pd);
    avx_op!(Div, div, _mm256_div_pd);

    impl F4 for Avx {
        #[inline(always)]
        fn splat(x: f64) -> Self {
            // SAFETY: see the type's documentation (same for every method).
            Avx(unsafe { _mm256_set1_pd(x) })
        }
        #[inline(always)]
        fn load(a: &[f64; CHUNK], k: usize) -> Self {
            assert!(k + LANES <= CHUNK);
            Avx(unsafe { _mm256_loadu_pd(a.as_ptr().add(k)) })
        }
        #[inline(always)]
        fn to_array(self) -> [f64; LANES] {
            let mut out = [0.0; LANES];
            unsafe { _mm256_storeu_pd(out.as_mut_ptr(), self.0) };
            out
        }
        #[inline(always)]
        fn lt(self, o: Self) -> Self {
            Avx(unsafe { _mm256_cmp_pd::<_CMP_LT_OQ>(self.0, o.0) })
        }
        #[inline(always)]
        fn le(self, o: Self) -> Self {
            Avx(unsafe { _mm256_cmp_pd::<_CMP_LE_OQ>(self.0, o.0) })
        }
        #[inline(always)]
        fn ne(self, o: Self) -> Self {
            // Unordered or not equal, as Rust's `!=`.
            Avx(unsafe { _mm256_cmp_pd::<_CMP_NEQ_UQ>(self.0, o.0) })
        }
        #[inline(always)]
        fn and(self, o: Self) -> Self {
            Avx(unsafe { _mm256_and_pd(self.0, o.0) })
        }
        #[inline(always)]
        fn or(self, o: Self) -> Self {
            Avx(unsafe { _mm256_or_pd(self.0, o.0) })
        }
        #[inline(always)]
        fn select(m: Self, a: Self, b: Self) -> Self {
            Avx(unsafe { _mm256_blendv_pd(b.0, a.0, m.0) })
        }
        #[inline(always)]
        fn abs(self) -> Self {
            Avx(unsafe { _mm256_andnot_pd(_mm256_set1_pd(-0.0), self.0) })
        }
    }
}

/// Per-lane partial sums of [`Acc`].
struct Lanes<V> {
    h: [V; 28],
    g: [V; 7],
    cost: V,
    count: V,
}

/// Huber weight of residuals `r` with sigmas `s` over `s^2`: `huber(r / s) / s^2`, Huber's
/// weight being 1 inside `k` and `k / |r/s|` outside ([`crate::residuals::huber_weight`]).
#[inline(always)]
fn lane_weight<V: F4>(r: V, s: V, k: V) -> V {
    let one = V::splat(1.0);
    let si = one / s;
    let wr = (si * r).abs();
    // k / wr is inf or NaN for wr = 0; the select takes 1 there.
    let h = V::select(wr.lt(k), one, k / wr);
    si * si * h
}

/// The log-depth residuals `ln(x_z / y_z)` of the first `end` entries: [`ln_ratio`]'s series
/// for all, then `ln` for the few pairs whose depths differ by more than about 20 %.
#[inline(always)]
fn lane_log_depth<V: F4>(bt: &mut Batch, end: usize, n_real: usize) {
    let two = V::splat(2.0);
    let mut k = 0;
    while k < end {
        let (a, b) = (V::load(&bt.xz, k), V::load(&bt.yz, k));
        let s = (a - b) / (a + b);
        let s2 = s * s;
        let p = V::splat(1.0 / 13.0);
        let p = p * s2 + V::splat(1.0 / 11.0);
        let p = p * s2 + V::splat(1.0 / 9.0);
        let p = p * s2 + V::splat(1.0 / 7.0);
        let p = p * s2 + V::splat(1.0 / 5.0);
        let p = p * s2 + V::splat(1.0 / 3.0);
        let p = p * s2 + V::splat(1.0);
        bt.s[k..k + LANES].copy_from_slice(&s.to_array());
        bt.rz[k..k + LANES].copy_from_slice(&(two * s * p).to_array());
        k += LANES;
    }
    for k in 0..n_real {
        if !(bt.s[k].abs() < 0.1) {
            // (A pair behind the camera is rejected by the kernel; keep its value finite.)
            bt.rz[k] = if bt.xz[k] > 0.0 && bt.yz[k] > 0.0 {
                (bt.xz[k] / bt.yz[k]).ln()
            } else {
                0.0
            };
        }
    }
}

/// Sums the batch into lanes: per pair the residuals of [`crate::tracker::point_info`]
/// (pixel, log-depth, point-to-plane; its validity rules as a mask), `M = sum_rows w e e^T` and
/// `v = sum_rows w r e` in the measurement camera (`e = dh/dY`), then `H += G M G^T`,
/// `g += G v` with `G = [I; [P]x; P^T]` (7x3). Entry `k` goes to lane `k % LANES`. Only the
/// first `D` pose coordinates (6: SE(3), 7: Sim(3)).
#[inline(always)]
fn lane_kernel<V: F4, const D: usize>(bt: &Batch, end: usize, m: &Model) -> Lanes<V> {
    let p = &m.p;
    let zero = V::splat(0.0);
    let one = V::splat(1.0);
    let (fx, fy, cx, cy) = (
        V::splat(m.cam.fx),
        V::splat(m.cam.fy),
        V::splat(m.cam.cx),
        V::splat(m.cam.cy),
    );
    let (eps, border, k_h) = (
        V::splat(p.depth_eps),
        V::splat(p.pixel_border),
        V::splat(p.huber),
    );
    let (wmax, hmax) = (V::splat(m.wmax), V::splat(m.hmax));
    let (s_pix, s_depth, s_plane) = (
        V::splat(p.sigma_pixel),
        V::splat(p.sigma_depth),
        V::splat(p.sigma_plane),
    );
    let (half, quarter) = (V::splat(0.5), V::splat(0.25));
    let mut out = Lanes {
        h: [zero; 28],
        g: [zero; 7],
        cost: zero,
        count: zero,
    };
    let mut k = 0;
    while k < end {
        let (xx, xy, xz) = (V::load(&bt.xx, k), V::load(&bt.xy, k), V::load(&bt.xz, k));
        let (yx, yy, yz) = (V::load(&bt.yx, k), V::load(&bt.yy, k), V::load(&bt.yz, k));
        let depth_ok = eps.lt(yz).and(eps.lt(xz));
        let iz = one / V::select(depth_ok, yz, one);
        let pu = fx * yx * iz + cx;
        let pv = fy * yy * iz + cy;
        let ok = depth_ok
            .and(border.le(pu))
            .and(pu.le(wmax))
            .and(border.le(pv))
            .and(pv.le(hmax));
        let (zs_log, zs_plane) = if p.depth_noise {
            // max(x, c) for finite x: select(x < c, c, x).
            let zz = xz * xz;
            (
                V::select(xz.lt(half), half, xz),
                V::select(zz.lt(quarter), quarter, zz),
            )
        } else {
            (one, one)
        };
        let (nx, ny, nz) = (V::load(&bt.nx, k), V::load(&bt.ny, k), V::load(&bt.nz, k));
        // Residuals, zero when rejected (every product below stays finite).
        let ru = V::select(ok, V::load(&bt.u, k) - pu, zero);
        let rv = V::select(ok, V::load(&bt.v, k) - pv, zero);
        let rz = V::select(ok, V::load(&bt.rz, k), zero);
        let rp = V::select(ok, nx * (xx - yx) + ny * (xy - yy) + nz * (xz - yz), zero);
        let has_plane = nx.ne(zero).or(ny.ne(zero)).or(nz.ne(zero));
        let sp = V::select(has_plane, s_plane * zs_plane, one);
        let wu = V::select(ok, lane_weight(ru, s_pix, k_h), zero);
        let wv = V::select(ok, lane_weight(rv, s_pix, k_h), zero);
        let wz = V::select(ok, lane_weight(rz, s_depth * zs_log, k_h), zero);
        let wp = V::select(ok, lane_weight(rp, sp, k_h), zero);
        let (a, c) = (fx * iz, zero - fx * yx * iz * iz);
        let (b, d) = (fy * iz, zero - fy * yy * iz * iz);
        let (wa, wc, wb, wd, wzi) = (wu * a, wu * c, wv * b, wv * d, wz * iz);
        let (wnx, wny, wnz) = (wp * nx, wp * ny, wp * nz);
        // M (symmetric) and v.
        let m00 = wa * a + wnx * nx;
        let m01 = wnx * ny;
        let m02 = wa * c + wnx * nz;
        let m11 = wb * b + wny * ny;
        let m12 = wb * d + wny * nz;
        let m22 = wc * c + wd * d + wzi * iz + wnz * nz;
        let v0 = wa * ru + wnx * rp;
        let v1 = wb * rv + wny * rp;
        let v2 = wc * ru + wd * rv + wzi * rz + wnz * rp;
        out.cost = out.cost + half * (wu * ru * ru + wv * rv * rv + wz * rz * rz + wp * rp * rp);
        out.count = out.count + V::select(ok, one, zero);
        let (px, py, pz) = (V::load(&bt.px, k), V::load(&bt.py, k), V::load(&bt.pz, k));
        let mm = [[m00, m01, m02], [m01, m11, m12], [m02, m12, m22]];
        // N = G M (7x3), then H_rc = N_r . G_c.
        let mut n = [[zero; 3]; 7];
        for cc in 0..3 {
            n[0][cc] = mm[0][cc];
            n[1][cc] = mm[1][cc];
            n[2][cc] = mm[2][cc];
            n[3][cc] = py * mm[2][cc] - pz * mm[1][cc];
            n[4][cc] = pz * mm[0][cc] - px * mm[2][cc];
            n[5][cc] = px * mm[1][cc] - py * mm[0][cc];
            n[6][cc] = px * mm[0][cc] + py * mm[1][cc] + pz * mm[2][cc];
        }
        for r in 0..D {
            let na = n[r];
            let gb = [
                na[0],
                na[1],
                na[2],
                py * na[2] - pz * na[1],
                pz * na[0] - px * na[2],
                px * na[1] - py * na[0],
                px * na[0] + py * na[1] + pz * na[2],
            ];
            for cc in r..D {
                out.h[upper(r, cc)] = out.h[upper(r, cc)] + gb[cc];
            }
        }
        let gv = [
            v0,
            v1,
            v2,
            py * v2 - pz * v1,
            pz * v0 - px * v2,
            px * v1 - py * v0,
            px * v0 + py * v1 + pz * v2,
        ];
        for r in 0..D {
            out.g[r] = out.g[r] + gv[r];
        }
        k += LANES;
    }
    out
}

/// Sums the pairs of measurement pixels `range` (at most [`CHUNK`]): each valid pixel's
/// point `x` is matched in `src` through `t_sm` (scalar: projection, rounding, occlusion
/// check), the matched source point moved into the measurement camera by `t_ms`, and the
/// pair's residuals summed in [`LANES`] lanes combined in a fixed order, with the Jacobian
/// point `P = ps * y + pc`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn terms_generic<V: F4, const D: usize>(
    bt: &mut Batch,
    src: &LevelView,
    meas: &LevelView,
    model: &Model,
    t_ms: &Affine,
    t_sm: &Affine,
    dist2: f64,
    ps: f64,
    pc: [f64; 3],
    range: std::ops::Range<usize>,
) -> Acc {
    debug_assert!(range.len() <= CHUNK);
    let cam_s = src.cam.expect("calibrated source view");
    let with_normals = model.p.sigma_plane > 0.0 && !meas.normals.is_empty();
    let w = meas.width;
    let (mut u, mut v) = (range.start % w, range.start / w);
    bt.n = 0;
    for q in range {
        let (uu, vv) = (u, v);
        u += 1;
        if u == w {
            u = 0;
            v += 1;
        }
        if !meas.valid[q] || (model.checker && (uu + vv) & 1 == 1) {
            continue;
        }
        let xq = f64x3(meas.points[q]);
        let Some(j) = match_point(src, &cam_s, t_sm, xq, dist2) else {
            continue;
        };
        let y = t_ms.act(f64x3(src.points[j]));
        let n = if with_normals {
            meas.normals[q].map_or([0.0; 3], f64x3)
        } else {
            [0.0; 3]
        };
        let pj = [ps * y[0] + pc[0], ps * y[1] + pc[1], ps * y[2] + pc[2]];
        bt.push(uu as f64, vv as f64, xq, n, y, pj);
    }
    let n_real = bt.n;
    let end = bt.pad();
    lane_log_depth::<V>(bt, end, n_real);
    let lanes = lane_kernel::<V, D>(bt, end, model);
    let sum = |x: V| {
        let x = x.to_array();
        ((x[0] + x[1]) + x[2]) + x[3]
    };
    let mut acc = Acc {
        count: sum(lanes.count) as usize,
        cost: sum(lanes.cost),
        ..Acc::default()
    };
    for (o, x) in acc.h.iter_mut().zip(lanes.h) {
        *o = sum(x);
    }
    for (o, x) in acc.g.iter_mut().zip(lanes.g) {
        *o = sum(x);
    }
    acc
}

/// Testing aid: sum with the portable lanes even where AVX2 is available (both give the same
/// bits; the tests check that).
#[doc(hidden)]
pub static FORCE_PORTABLE: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// [`terms_generic`] compiled for AVX2 (4 f64 lanes per instruction). No FMA: the same
/// operations as the portable build, so both give the same bits.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[allow(clippy::too_many_arguments)]
fn terms_avx2<const D: usize>(
    bt: &mut Batch,
    src: &LevelView,
    meas: &LevelView,
    model: &Model,
    t_ms: &Affine,
    t_sm: &Affine,
    dist2: f64,
    ps: f64,
    pc: [f64; 3],
    range: std::ops::Range<usize>,
) -> Acc {
    terms_generic::<avx::Avx, D>(bt, src, meas, model, t_ms, t_sm, dist2, ps, pc, range)
}

/// Sums the correspondences of measurement pixels `range` (at most [`CHUNK`]): each valid
/// pixel's point `xq` is matched in `src` through `t_sm`, the matched source point moved into
/// the measurement camera by `t_ms`, and its residuals added with the Jacobian point
/// `P = ps * y + pc`. Matching is scalar; the sums run in [`LANES`] lanes combined in a fixed
/// order (AVX2 when the CPU has it; the same bits either way).
#[allow(clippy::too_many_arguments)]
fn terms<const D: usize>(
    src: &LevelView,
    meas: &LevelView,
    model: &Model,
    t_ms: &Affine,
    t_sm: &Affine,
    dist2: f64,
    ps: f64,
    pc: [f64; 3],
    range: std::ops::Range<usize>,
) -> Acc {
    BATCH.with_borrow_mut(|bt| {
        bt.n = 0;
        #[cfg(target_arch = "x86_64")]
        {
            if std::is_x86_feature_detected!("avx2")
                && !FORCE_PORTABLE.load(std::sync::atomic::Ordering::Relaxed)
            {
                // SAFETY: the CPU supports AVX2 (checked above).
                return unsafe {
                    terms_avx2::<D>(bt, src, meas, model, t_ms, t_sm, dist2, ps, pc, range)
                };
            }
        }
        terms_generic::<Portable, D>(bt, src, meas, model, t_ms, t_sm, dist2, ps, pc, range)
    })
}

fn reduce(n: usize, f: impl Fn(std::ops::Range<usize>) -> Acc + Sync + Send) -> Acc {
    par::chunked_reduce(n, CHUNK, f, Acc::merge).unwrap_or_default()
}

#[allow(clippy::too_many_arguments)]
fn sum_terms(
    src: &LevelView,
    meas: &LevelView,
    p: &ResidualParams,
    t_ms: &Affine,
    t_sm: &Affine,
    dist2: f64,
    ps: f64,
    pc: [f64; 3],
    optimize_scale: bool,
) -> Acc {
    let model = Model::new(meas, p);
    if optimize_scale {
        reduce(meas.len(), |r| {
            terms::<7>(src, meas, &model, t_ms, t_sm, dist2, ps, pc, r)
        })
    } else {
        reduce(meas.len(), |r| {
            terms::<6>(src, meas, &model, t_ms, t_sm, dist2, ps, pc, r)
        })
    }
}

/// Normal equations of the relative pose `t_meas_src` (`Y = T X_src`) with projective
/// association at that pose, in one pass: [`crate::tracker::associate`] followed by
/// [`crate::tracker::build_normal_eq`] for calibrated views. `optimize_scale` false leaves the
/// scale row and column zero.
pub fn tracking_normal_eq(
    src: &LevelView,
    meas: &LevelView,
    t_meas_src: &Sim3,
    p: &ResidualParams,
    dist_thresh: f64,
    optimize_scale: bool,
) -> NormalEq {
    let t_ms = Affine::from_sim3(t_meas_src);
    let t_sm = Affine::from_sim3(&t_meas_src.inverse());
    sum_terms(
        src,
        meas,
        p,
        &t_ms,
        &t_sm,
        dist_thresh * dist_thresh,
        1.0,
        [0.0; 3],
        optimize_scale,
    )
    .to_normal_eq()
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
pub fn edge_normal_eq(
    src: &LevelView,
    t_wc_src: &Sim3,
    meas: &LevelView,
    t_wc_meas: &Sim3,
    p: &ResidualParams,
    dist_thresh: f64,
    optimize_scale: bool,
) -> NormalEq {
    let t_m_inv = t_wc_meas.inverse();
    let t_ms_s = t_m_inv.compose(t_wc_src);
    let t_ms = Affine::from_sim3(&t_ms_s);
    let t_sm = Affine::from_sim3(&t_ms_s.inverse());
    let rm = t_wc_meas.rotation_matrix();
    let sm = t_wc_meas.scale;
    let c = rm.transpose() * t_wc_meas.translation;
    let acc = sum_terms(
        src,
        meas,
        p,
        &t_ms,
        &t_sm,
        dist_thresh * dist_thresh,
        sm,
        [c.x, c.y, c.z],
        optimize_scale,
    );
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
