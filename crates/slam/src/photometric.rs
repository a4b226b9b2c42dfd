//! Photometric (intensity) residual of RGB-D tracking: the hybrid odometry of DVO (Kerl et al.
//! 2013) and Open3D's `RGBDOdometryJacobianFromHybridTerm`, next to the geometric residuals of
//! [`crate::projective`].
//!
//! Depth alone leaves a pose unconstrained where the scene is a plane (the camera slides along
//! it) and is noisy where the surfaces are far; the image texture pins those directions. For a
//! frame pixel `p` with point `X_f(p)`, the point is moved into the keyframe, `y = T X_f(p)`,
//! projected with the keyframe's level camera, and the keyframe's intensity there is compared
//! with the frame's own: `r = I_f(p) - I_k(pi(y))`, Huber-weighted on `r / sigma_photo`. Its
//! derivative with respect to `y` is `grad I_k . dpi/dy`, chained with `dy/dxi` like the
//! geometric rows ([`crate::tracker::accumulate`]).
//!
//! Only pixels whose keyframe gradient exceeds [`MIN_GRADIENT`] count (flat regions carry no
//! information and only noise), and only where the keyframe's own depth at the projected pixel
//! agrees with `y` (the same surface: no occluded or disoccluded pixel compares two surfaces).
//!
//! Colour and depth of 7-Scenes are not registered: a pointmap's colour is the colour image
//! sampled at the depth pixel, a few pixels off the true colour of its 3D point. The offset is
//! the same in both views for surfaces at similar depth, so the texture still moves rigidly with
//! the depth camera and the residual stays consistent. An affine brightness change between the
//! two images (auto exposure) is removed before the residuals: gain and bias from the means and
//! deviations of the co-visible intensities ([`brightness`]).

use rust3r_geometry::{PinholeCamera, Sim3};

use crate::par::{self, CHUNK};
use crate::pointmap::Pointmap;
use crate::projective::Affine;
use crate::residuals::{huber_weight, point_jacobian};
use crate::tracker::{LevelView, NormalEq, PointInfo, accumulate};

/// Smallest keyframe intensity gradient (per level pixel, intensities in `[0, 1]`) for a pixel
/// to carry a photometric residual.
pub const MIN_GRADIENT: f32 = 0.004;

/// An intensity image of one pyramid level, with its central-difference gradients.
#[derive(Debug, Clone, PartialEq)]
pub struct IntensityImage {
    /// Columns.
    pub width: usize,
    /// Rows.
    pub height: usize,
    /// Intensity in `[0, 1]`, row-major.
    pub data: Vec<f32>,
    /// Horizontal gradient (per pixel).
    pub gx: Vec<f32>,
    /// Vertical gradient (per pixel).
    pub gy: Vec<f32>,
    /// Position of pixel 0 of this image in the level camera's pixel coordinates: level `L`'s
    /// pixel `i` averages level 0's pixels `2^L i .. 2^L i + 2^L - 1`, centred at
    /// `i + (2^L - 1) / 2^(L+1)` in the level camera ([`crate::pointmap::level_camera`]).
    pub offset: f64,
}

/// Intensity pyramid of a pointmap's colours: level 0 is the pointmap's resolution smoothed by
/// a 3x3 binomial filter, each further level the 2x2 box average of the previous one.
#[derive(Debug, Clone, PartialEq)]
pub struct IntensityPyramid {
    /// Level 0 first.
    pub levels: Vec<IntensityImage>,
}

impl IntensityImage {
    fn new(width: usize, height: usize, data: Vec<f32>, offset: f64) -> Self {
        let mut gx = vec![0.0f32; width * height];
        let mut gy = vec![0.0f32; width * height];
        for v in 0..height {
            for u in 0..width {
                let i = v * width + u;
                let (l, r) = (u.saturating_sub(1), (u + 1).min(width - 1));
                let (t, b) = (v.saturating_sub(1), (v + 1).min(height - 1));
                if r > l {
                    gx[i] = (data[v * width + r] - data[v * width + l]) / (r - l) as f32;
                }
                if b > t {
                    gy[i] = (data[b * width + u] - data[t * width + u]) / (b - t) as f32;
                }
            }
        }
        Self {
            width,
            height,
            data,
            gx,
            gy,
            offset,
        }
    }

    /// Bilinear intensity and gradient at level-camera position `(u, v)`; `None` outside the
    /// image (no extrapolation).
    #[inline]
    pub fn sample(&self, u: f64, v: f64) -> Option<(f64, f64, f64)> {
        let (x, y) = (u - self.offset, v - self.offset);
        if !(x >= 0.0 && y >= 0.0 && x <= (self.width - 1) as f64 && y <= (self.height - 1) as f64)
        {
            return None;
        }
        let (x0, y0) = (
            (x as usize).min(self.width.saturating_sub(2)),
            (y as usize).min(self.height.saturating_sub(2)),
        );
        let (fx, fy) = (x - x0 as f64, y - y0 as f64);
        let i = y0 * self.width + x0;
        let w = self.width;
        let lerp = |a: &[f32]| {
            let top = a[i] as f64 * (1.0 - fx) + a[i + 1] as f64 * fx;
            let bot = a[i + w] as f64 * (1.0 - fx) + a[i + w + 1] as f64 * fx;
            top * (1.0 - fy) + bot * fy
        };
        Some((lerp(&self.data), lerp(&self.gx), lerp(&self.gy)))
    }
}

impl IntensityPyramid {
    /// Pyramid of `levels` levels from the pointmap's colours.
    pub fn from_pointmap(pm: &Pointmap, levels: usize) -> Self {
        let (w, h) = (pm.width, pm.height);
        let gray: Vec<f32> = pm
            .colors
            .iter()
            .map(|c| (0.299 * c[0] as f32 + 0.587 * c[1] as f32 + 0.114 * c[2] as f32) / 255.0)
            .collect();
        // 3x3 binomial smoothing (clamped borders), separable.
        let base = binomial_pass(&binomial_pass(&gray, w, h, 1, 0), w, h, 0, 1);
        let mut out = vec![IntensityImage::new(w, h, base, 0.0)];
        for l in 1..levels.max(1) {
            let prev = &out[l - 1];
            let (pw, ph) = (prev.width, prev.height);
            let (nw, nh) = ((pw / 2).max(1), (ph / 2).max(1));
            let mut data = vec![0.0f32; nw * nh];
            for v in 0..nh {
                for u in 0..nw {
                    let at = |x: usize, y: usize| prev.data[y.min(ph - 1) * pw + x.min(pw - 1)];
                    data[v * nw + u] = 0.25
                        * (at(2 * u, 2 * v)
                            + at(2 * u + 1, 2 * v)
                            + at(2 * u, 2 * v + 1)
                            + at(2 * u + 1, 2 * v + 1));
                }
            }
            let step = (1usize << l) as f64;
            out.push(IntensityImage::new(
                nw,
                nh,
                data,
                (step - 1.0) / (2.0 * step),
            ));
        }
        Self { levels: out }
    }
}

/// One pass of the `[1/4, 1/2, 1/4]` filter along `(du, dv)` (one of them 1), borders clamped.
fn binomial_pass(src: &[f32], w: usize, h: usize, du: usize, dv: usize) -> Vec<f32> {
    let mut out = vec![0.0f32; w * h];
    for v in 0..h {
        for u in 0..w {
            let (u0, v0) = (u.saturating_sub(du), v.saturating_sub(dv));
            let (u1, v1) = ((u + du).min(w - 1), (v + dv).min(h - 1));
            out[v * w + u] =
                0.25 * src[v0 * w + u0] + 0.5 * src[v * w + u] + 0.25 * src[v1 * w + u1];
        }
    }
    out
}

/// Photometric model settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PhotoParams {
    /// Intensity sigma (intensities in `[0, 1]`); the residual is whitened by it.
    pub sigma: f64,
    /// Huber threshold on the whitened residual.
    pub huber: f64,
    /// Largest relative depth difference between `y` and the keyframe's depth at its pixel.
    pub max_rel_depth: f64,
}

/// Gain and bias `(a, b)` with `I_k ~ a I_f + b` over the frame pixels that project into the
/// keyframe at pose `t` (`T_CkCf`) onto the same surface: matched means and standard
/// deviations. `(1, 0)` when fewer than 100 pixels match or either image is flat there.
pub fn brightness(
    frame: &LevelView,
    fi: &IntensityImage,
    kf: &LevelView,
    ki: &IntensityImage,
    t: &Sim3,
    p: &PhotoParams,
) -> (f64, f64) {
    let s = par::chunked_reduce(
        frame.len(),
        CHUNK,
        |range| {
            let mut acc = [0.0f64; 5];
            for_each_pair(frame, fi, kf, ki, t, p, range, |ifr, ik, _, _, _| {
                acc[0] += ifr;
                acc[1] += ik;
                acc[2] += ifr * ifr;
                acc[3] += ik * ik;
                acc[4] += 1.0;
            });
            acc
        },
        |mut a, b| {
            for (x, y) in a.iter_mut().zip(&b) {
                *x += y;
            }
            a
        },
    )
    .unwrap_or([0.0; 5]);
    let n = s[4];
    if n < 100.0 {
        return (1.0, 0.0);
    }
    let (mf, mk) = (s[0] / n, s[1] / n);
    let (vf, vk) = (s[2] / n - mf * mf, s[3] / n - mk * mk);
    if !(vf > 1e-8 && vk > 1e-8) {
        return (1.0, 0.0);
    }
    let a = (vk / vf).sqrt();
    // A change of exposure of more than 2x between neighbouring frames is not exposure.
    let a = a.clamp(0.5, 2.0);
    (a, mk - a * mf)
}

/// Calls `f(I_f(p), I_k(pi(y)), grad I_k, y, level camera)` for every valid frame pixel whose
/// point lands in the keyframe image on a keyframe pixel with a depth within `max_rel_depth`.
#[allow(clippy::too_many_arguments)]
#[inline]
fn for_each_pair(
    frame: &LevelView,
    fi: &IntensityImage,
    kf: &LevelView,
    ki: &IntensityImage,
    t: &Sim3,
    p: &PhotoParams,
    range: std::ops::Range<usize>,
    mut f: impl FnMut(f64, f64, [f64; 2], [f64; 3], &PinholeCamera),
) {
    let Some(kcam) = kf.cam else { return };
    if frame.cam.is_none() {
        return;
    }
    let a = Affine::from_sim3(t);
    for i in range {
        if !frame.valid[i] {
            continue;
        }
        let (u, v) = ((i % frame.width) as f64, (i / frame.width) as f64);
        let Some((ifr, _, _)) = fi.sample(u, v) else {
            continue;
        };
        let x = frame.points[i];
        let y = a.act([x[0] as f64, x[1] as f64, x[2] as f64]);
        if !(y[2] > 1e-6) {
            continue;
        }
        let uk = kcam.fx * y[0] / y[2] + kcam.cx;
        let vk = kcam.fy * y[1] / y[2] + kcam.cy;
        let Some((ik, gx, gy)) = ki.sample(uk, vk) else {
            continue;
        };
        // The same surface: the keyframe's depth at the nearest pixel agrees with y.
        let (nu, nv) = ((uk + 0.5) as usize, (vk + 0.5) as usize);
        if nu >= kf.width || nv >= kf.height {
            continue;
        }
        let j = nv * kf.width + nu;
        if !kf.valid[j] || (kf.points[j][2] as f64 - y[2]).abs() > p.max_rel_depth * y[2] {
            continue;
        }
        f(ifr, ik, [gx, gy], y, &kcam);
    }
}

/// Normal equations of the photometric residual for the relative pose `t` (`T_CkCf`, frame
/// points moved into the keyframe), with the frame's intensities mapped by the brightness
/// `(gain, bias)` first. Deterministic (fixed-chunk reduction).
#[allow(clippy::too_many_arguments)]
pub fn photometric_normal_eq(
    frame: &LevelView,
    fi: &IntensityImage,
    kf: &LevelView,
    ki: &IntensityImage,
    t: &Sim3,
    p: &PhotoParams,
    gain_bias: (f64, f64),
) -> NormalEq {
    let (ga, gb) = gain_bias;
    let sqrt_info = 1.0 / p.sigma;
    let min_g2 = (MIN_GRADIENT as f64) * (MIN_GRADIENT as f64);
    par::chunked_reduce(
        frame.len(),
        CHUNK,
        |range| {
            let mut eq = NormalEq::default();
            for_each_pair(frame, fi, kf, ki, t, p, range, |ifr, ik, g, y, cam| {
                if g[0] * g[0] + g[1] * g[1] < min_g2 {
                    return;
                }
                let r = ga * ifr + gb - ik;
                let iz = 1.0 / y[2];
                // d I_k(pi(y)) / dy
                let dh = nalgebra::RowVector3::new(
                    g[0] * cam.fx * iz,
                    g[1] * cam.fy * iz,
                    -(g[0] * cam.fx * y[0] + g[1] * cam.fy * y[1]) * iz * iz,
                );
                let wr = sqrt_info * r;
                let w = sqrt_info * sqrt_info * huber_weight(wr, p.huber);
                let info = PointInfo {
                    m: dh.transpose() * dh * w,
                    v: dh.transpose() * (w * r),
                    cost: 0.5 * w * r * r,
                };
                let yv = nalgebra::Vector3::new(y[0], y[1], y[2]);
                accumulate(&mut eq, &info, &point_jacobian(&yv));
            });
            eq
        },
        |a, b| a.merge(&b),
    )
    .unwrap_or_default()
}

/// The photometric term at one pyramid level of one frame-keyframe pair: both images, the
/// settings, and the brightness mapping fitted once at the level's starting pose.
#[derive(Debug, Clone, Copy)]
pub struct LevelTerm<'a> {
    frame: &'a IntensityImage,
    kf: &'a IntensityImage,
    params: &'a PhotoParams,
    gain_bias: (f64, f64),
}

impl<'a> LevelTerm<'a> {
    /// Level `level` of the pyramids `frame` and `kf`, with the brightness fitted at pose `t`.
    pub fn at_level(
        frame: &'a IntensityPyramid,
        kf: &'a IntensityPyramid,
        params: &'a PhotoParams,
        level: usize,
        fv: &LevelView,
        kv: &LevelView,
        t: &Sim3,
    ) -> Self {
        let (fi, ki) = (&frame.levels[level], &kf.levels[level]);
        Self {
            frame: fi,
            kf: ki,
            params,
            gain_bias: brightness(fv, fi, kv, ki, t, params),
        }
    }

    /// [`photometric_normal_eq`] at pose `t`.
    pub fn normal_eq(&self, fv: &LevelView, kv: &LevelView, t: &Sim3) -> NormalEq {
        photometric_normal_eq(fv, self.frame, kv, self.kf, t, self.params, self.gain_bias)
    }
}
