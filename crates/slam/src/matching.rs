//! Iterative-projection matching (MASt3R-SLAM `matching.py` + `matching_kernels.cu`), CPU
//! reference in f64.
//!
//! To find where a 3D point `x` (expressed in the camera of a reference pointmap) lies in the
//! reference image, minimise `|ray(u, v) - x/|x||^2` over the pixel `(u, v)`, where `ray` is the
//! reference pointmap's unit-ray image (bilinearly interpolated, with Scharr gradients), by a
//! per-point Levenberg-Marquardt on `(u, v)`. This needs no camera model, so it works on
//! uncalibrated network pointmaps as well as on calibrated ones.
//!
//! [`match_iterative_proj`] adds the occlusion check (3D distance between the matched points
//! below `dist_thresh`) and [`refine_matches`] the descriptor window search (dilation
//! `dilation_max` down to 1). The GPU port is [`crate::kernels::iter_proj`].

use nalgebra::Vector3;
use rayon::prelude::*;

use crate::config::MatchingConfig;

/// Channels per pixel of a [`RayImage`]: ray (3), d ray/du (3), d ray/dv (3).
pub const RAY_CHANNELS: usize = 9;

/// Unit rays of a pointmap and their image gradients, row-major, 9 floats per pixel.
#[derive(Debug, Clone, PartialEq)]
pub struct RayImage {
    /// Columns.
    pub width: usize,
    /// Rows.
    pub height: usize,
    /// `[ray xyz, gx xyz, gy xyz]` per pixel.
    pub data: Vec<f32>,
}

/// Unit ray of pixel `i`: the normalised point where `valid(i)`, otherwise `fallback(i)`
/// (for a calibrated camera the pixel's own ray, so pixels without depth still guide the
/// search).
pub fn ray_image(
    width: usize,
    height: usize,
    points: &[[f32; 3]],
    mut fallback: impl FnMut(usize) -> Option<[f32; 3]>,
    valid: impl Fn(usize) -> bool,
) -> RayImage {
    let n = width * height;
    let mut rays = vec![[0.0f32; 3]; n];
    for (i, r) in rays.iter_mut().enumerate() {
        let p = if valid(i) {
            Some(points[i])
        } else {
            fallback(i)
        };
        if let Some(p) = p {
            let norm = (p[0] * p[0] + p[1] * p[1] + p[2] * p[2]).sqrt();
            if norm > 0.0 {
                *r = [p[0] / norm, p[1] / norm, p[2] / norm];
            }
        }
    }
    let mut data = vec![0.0f32; n * RAY_CHANNELS];
    // Scharr kernels / 32 with reflect padding (MASt3R-SLAM `img_gradient`).
    let refl = |i: isize, len: usize| -> usize {
        if i < 0 {
            (-i) as usize
        } else if i as usize >= len {
            2 * len - 2 - i as usize
        } else {
            i as usize
        }
        .min(len - 1)
    };
    const K: [[f32; 3]; 3] = [[-3.0, 0.0, 3.0], [-10.0, 0.0, 10.0], [-3.0, 0.0, 3.0]];
    // Rows in parallel (each pixel's channels depend only on `rays`).
    data.par_chunks_mut((width * RAY_CHANNELS).max(1))
        .enumerate()
        .for_each(|(v, out)| {
            for u in 0..width {
                let i = v * width + u;
                let mut gx = [0.0f32; 3];
                let mut gy = [0.0f32; 3];
                for (a, row) in K.iter().enumerate() {
                    for (b, &kx) in row.iter().enumerate() {
                        let vv = refl(v as isize + a as isize - 1, height);
                        let uu = refl(u as isize + b as isize - 1, width);
                        let r = rays[vv * width + uu];
                        // gx uses K[a][b]; gy uses its transpose K[b][a].
                        let ky = K[b][a];
                        for c in 0..3 {
                            gx[c] += kx / 32.0 * r[c];
                            gy[c] += ky / 32.0 * r[c];
                        }
                    }
                }
                let d = &mut out[u * RAY_CHANNELS..(u + 1) * RAY_CHANNELS];
                d[0..3].copy_from_slice(&rays[i]);
                d[3..6].copy_from_slice(&gx);
                d[6..9].copy_from_slice(&gy);
            }
        });
    RayImage {
        width,
        height,
        data,
    }
}

/// Bilinear sample of the 9 channels at `(u, v)` (caller keeps `1 <= u <= w-2`, same for v).
#[inline]
fn sample(img: &RayImage, u: f64, v: f64) -> [f64; RAY_CHANNELS] {
    let u0 = u.floor() as usize;
    let v0 = v.floor() as usize;
    let du = u - u0 as f64;
    let dv = v - v0 as f64;
    let w11 = du * dv;
    let w12 = (1.0 - du) * dv;
    let w21 = du * (1.0 - dv);
    let w22 = (1.0 - du) * (1.0 - dv);
    let at =
        |vv: usize, uu: usize| &img.data[(vv * img.width + uu) * RAY_CHANNELS..][..RAY_CHANNELS];
    let (r11, r12, r21, r22) = (
        at(v0 + 1, u0 + 1),
        at(v0 + 1, u0),
        at(v0, u0 + 1),
        at(v0, u0),
    );
    let mut out = [0.0; RAY_CHANNELS];
    for c in 0..RAY_CHANNELS {
        out[c] =
            w11 * r11[c] as f64 + w12 * r12[c] as f64 + w21 * r21[c] as f64 + w22 * r22[c] as f64;
    }
    out
}

/// Bilinear sample of the 3 ray channels only.
#[inline]
fn sample_ray(img: &RayImage, u: f64, v: f64) -> [f64; 3] {
    let u0 = u.floor() as usize;
    let v0 = v.floor() as usize;
    let du = u - u0 as f64;
    let dv = v - v0 as f64;
    let w11 = du * dv;
    let w12 = (1.0 - du) * dv;
    let w21 = du * (1.0 - dv);
    let w22 = (1.0 - du) * (1.0 - dv);
    let at = |vv: usize, uu: usize| &img.data[(vv * img.width + uu) * RAY_CHANNELS..][..3];
    let (r11, r12, r21, r22) = (
        at(v0 + 1, u0 + 1),
        at(v0 + 1, u0),
        at(v0, u0 + 1),
        at(v0, u0),
    );
    let mut out = [0.0; 3];
    for c in 0..3 {
        out[c] =
            w11 * r11[c] as f64 + w12 * r12[c] as f64 + w21 * r21[c] as f64 + w22 * r22[c] as f64;
    }
    out
}

/// Steps below this (pixels) end a point's iterations early (MASt3R-SLAM always runs
/// `max_iter`; the difference is below this size).
pub const ITER_PROJ_MIN_STEP: f64 = 1e-4;

/// Iterative projection of one unit vector `x` starting at `p`: returns the pixel and whether
/// the final ray error is below `cost_thresh`.
pub fn iter_proj_point(
    img: &RayImage,
    x: &Vector3<f64>,
    p: [f64; 2],
    max_iter: usize,
    lambda_init: f64,
    cost_thresh: f64,
) -> ([f64; 2], bool) {
    let (wmax, hmax) = (img.width as f64 - 2.0, img.height as f64 - 2.0);
    let mut u = p[0].clamp(1.0, wmax);
    let mut v = p[1].clamp(1.0, hmax);
    let mut lambda = lambda_init;
    let mut converged = false;
    let ray_err = |s: &[f64]| -> ([f64; 3], f64) {
        let n = (s[0] * s[0] + s[1] * s[1] + s[2] * s[2]).sqrt();
        let e = [s[0] / n - x.x, s[1] / n - x.y, s[2] / n - x.z];
        (e, e[0] * e[0] + e[1] * e[1] + e[2] * e[2])
    };
    for _ in 0..max_iter {
        let s = sample(img, u, v);
        let (e, cost) = ray_err(&s);
        let (gx, gy) = ([s[3], s[4], s[5]], [s[6], s[7], s[8]]);
        let a00 = gx[0] * gx[0] + gx[1] * gx[1] + gx[2] * gx[2] + lambda;
        let a01 = gx[0] * gy[0] + gx[1] * gy[1] + gx[2] * gy[2];
        let a11 = gy[0] * gy[0] + gy[1] * gy[1] + gy[2] * gy[2] + lambda;
        let b0 = -(e[0] * gx[0] + e[1] * gx[1] + e[2] * gx[2]);
        let b1 = -(e[0] * gy[0] + e[1] * gy[1] + e[2] * gy[2]);
        let det_inv = 1.0 / (a00 * a11 - a01 * a01);
        let du = det_inv * (a11 * b0 - a01 * b1);
        let dv = det_inv * (-a01 * b0 + a00 * b1);
        let un = (u + du).clamp(1.0, wmax);
        let vn = (v + dv).clamp(1.0, hmax);
        let (_, new_cost) = ray_err(&sample_ray(img, un, vn));
        if new_cost < cost {
            let step = (un - u).abs().max((vn - v).abs());
            u = un;
            v = vn;
            lambda *= 0.1;
            converged = new_cost < cost_thresh;
            if converged && step < ITER_PROJ_MIN_STEP {
                break;
            }
        } else {
            lambda *= 10.0;
            converged = cost < cost_thresh;
        }
    }
    ([u, v], converged)
}

/// Iterative projection of many unit vectors (`points_norm`, one per query) onto `img`, each
/// starting at `p_init`. Returns sub-pixel positions and convergence flags.
pub fn iter_proj(
    img: &RayImage,
    points_norm: &[[f32; 3]],
    p_init: &[[f32; 2]],
    cfg: &MatchingConfig,
) -> (Vec<[f32; 2]>, Vec<bool>) {
    let mut pos = Vec::with_capacity(points_norm.len());
    let mut conv = Vec::with_capacity(points_norm.len());
    for (x, p) in points_norm.iter().zip(p_init) {
        let x = Vector3::new(x[0] as f64, x[1] as f64, x[2] as f64);
        let (q, c) = iter_proj_point(
            img,
            &x,
            [p[0] as f64, p[1] as f64],
            cfg.max_iter,
            cfg.lambda_init,
            cfg.convergence_thresh,
        );
        pos.push([q[0] as f32, q[1] as f32]);
        conv.push(c);
    }
    (pos, conv)
}

/// Integer pixel of a sub-pixel match: rounded to the nearest pixel (MASt3R-SLAM truncates
/// with `.long()`, which biases matches by half a pixel).
#[inline]
pub fn round_pixel(p: [f32; 2], width: usize, height: usize) -> usize {
    let u = (p[0].round().max(0.0) as usize).min(width - 1);
    let v = (p[1].round().max(0.0) as usize).min(height - 1);
    v * width + u
}

/// Result of matching queries against a reference pointmap.
#[derive(Debug, Clone, PartialEq)]
pub struct Matches {
    /// Linear reference pixel of each query.
    pub idx: Vec<u32>,
    /// Sub-pixel position of each query (warm start for the next call).
    pub pos: Vec<[f32; 2]>,
    /// Converged, inside the image and not occluded.
    pub valid: Vec<bool>,
}

/// Matches queries (points in the reference camera, `queries[i]` `None` when the query has no
/// point) to pixels of the reference pointmap: iterative projection onto `rays` from `p_init`,
/// rounded, then the occlusion check `|X_ref(p) - X_query| < dist_thresh` (a reference pixel
/// without a point fails it).
pub fn match_iterative_proj(
    rays: &RayImage,
    ref_points: &[[f32; 3]],
    ref_valid: &[bool],
    queries: &[Option<[f32; 3]>],
    p_init: &[[f32; 2]],
    cfg: &MatchingConfig,
) -> Matches {
    // One independent search per query, in parallel (element-wise: same result as in order).
    let per: Vec<(u32, [f32; 2], bool)> = queries
        .par_iter()
        .zip(p_init.par_iter())
        .map(|(query, init)| {
            let Some(q) = query else {
                return (0, *init, false);
            };
            let x = Vector3::new(q[0] as f64, q[1] as f64, q[2] as f64);
            let norm = x.norm();
            if !(norm > 0.0) {
                return (0, *init, false);
            }
            let (p, conv) = iter_proj_point(
                rays,
                &(x / norm),
                [init[0] as f64, init[1] as f64],
                cfg.max_iter,
                cfg.lambda_init,
                cfg.convergence_thresh,
            );
            let pos = [p[0] as f32, p[1] as f32];
            let j = round_pixel(pos, rays.width, rays.height);
            let mut valid = false;
            if conv && ref_valid[j] {
                let r = ref_points[j];
                let d = ((r[0] as f64 - x.x).powi(2)
                    + (r[1] as f64 - x.y).powi(2)
                    + (r[2] as f64 - x.z).powi(2))
                .sqrt();
                valid = d < cfg.dist_thresh;
            }
            (j as u32, pos, valid)
        })
        .collect();
    Matches {
        idx: per.iter().map(|m| m.0).collect(),
        pos: per.iter().map(|m| m.1).collect(),
        valid: per.iter().map(|m| m.2).collect(),
    }
}

/// Descriptor refinement (MASt3R-SLAM `refine_matches`): for each query, search a window of
/// radius `radius * d` with spacing `d` around its pixel for the reference descriptor with the
/// largest dot product with the query's, recentring after each `d` from `dilation_max` down
/// to 1. The best score is kept across dilations and starts at the smallest positive normal float
/// (as upstream's `numeric_limits<scalar_t>::min()`), so a query whose every score is zero or
/// negative keeps its pixel. `ref_desc` is `[h][w][dim]`, `query_desc` `[n][dim]`. Returns the
/// refined linear pixels. Scores are summed in f32 (upstream: f16). Queries run in parallel.
#[allow(clippy::too_many_arguments)]
pub fn refine_matches(
    ref_desc: &[f32],
    width: usize,
    height: usize,
    dim: usize,
    query_desc: &[f32],
    idx: &[u32],
    radius: usize,
    dilation_max: usize,
) -> Vec<u32> {
    idx.par_iter()
        .enumerate()
        .map(|(n, &i)| {
            let q = &query_desc[n * dim..(n + 1) * dim];
            let (mut u0, mut v0) = ((i as usize % width) as isize, (i as usize / width) as isize);
            let mut best = f32::MIN_POSITIVE;
            let (mut ub, mut vb) = (u0, v0);
            for d in (1..=dilation_max).rev() {
                let rd = (radius * d) as isize;
                // Window columns `u0 - rd, u0 - rd + d, ..., u0 + rd` (the same for rows),
                // the column index outer as upstream (first maximum wins on ties).
                for a in (0..=2 * rd).step_by(d) {
                    let u = u0 - rd + a;
                    if u < 0 || u as usize >= width {
                        continue;
                    }
                    for b in (0..=2 * rd).step_by(d) {
                        let v = v0 - rd + b;
                        if v >= 0 && (v as usize) < height {
                            let r = &ref_desc[(v as usize * width + u as usize) * dim..][..dim];
                            let score: f32 = r.iter().zip(q).map(|(x, y)| x * y).sum();
                            if score > best {
                                best = score;
                                ub = u;
                                vb = v;
                            }
                        }
                    }
                }
                u0 = ub;
                v0 = vb;
            }
            (vb as usize * width + ub as usize) as u32
        })
        .collect()
}
