#![allow(missing_docs)] // the #[cube(launch)] macro generates undocumented items
//! CubeCL kernels of tracking on network pairs ([`crate::pair`]): the descriptor refinement of
//! the matches and the per-pixel normal-equation terms of the uncalibrated (ray + distance)
//! residual weighted by the match quality. The matching itself is [`super::track::match_kernel`]
//! at the identity pose (the keyframe's points are already in the frame's camera). Their CPU
//! references are [`crate::matching::refine_matches`] and [`crate::pair::pair_normal_eq`].
//!
//! Buffers (f32 unless noted, row-major):
//! * `ref_desc`: `[height * width * dim]` the frame's descriptors, `query_desc`: `[n * dim]` the
//!   keyframe's; `idx_in` / `idx_out`: u32 `[n]` linear frame pixels;
//! * `src_pts`: `[src_n * 3]` the frame's points, `meas_pts`: `[n * 3]` the keyframe's;
//! * `used`: u32 `[n]`, `qk`: `[n]` the match quality;
//! * `pose`: `[12]` = `s R` (row-major 3x3) and `t` of `T_CkCf`;
//! * `params`: `[1/sigma_ray, 1/sigma_dist, huber]`.

use cubecl::prelude::*;

use super::track::{Point3, transform_point, write_normal_terms, zero_normal_terms};

/// `params` index of `1/sigma_ray`.
pub const PP_ISR: usize = 0;
/// `params` index of `1/sigma_dist`.
pub const PP_ISD: usize = 1;
/// `params` index of the Huber threshold.
pub const PP_HUBER: usize = 2;
/// Length of `params`.
pub const PP_LEN: usize = 3;

/// The iterative projection's start of every keyframe pixel `q` (`pos`: `[n * 2]`, `(u, v)`):
/// frame pixel `idx[q]` (the previous frame's matches against the same keyframe), or pixel `q`
/// itself when `identity` is 1 (`idx` is then not read); `crate::pair::warm_start` on the
/// device, so only the matches go up (half the start positions' bytes, none for the identity).
#[cube(launch)]
pub fn warm_start_kernel(idx: &[u32], pos: &mut [f32], n: u32, width: u32, identity: u32) {
    let q = rust3r_gpu::global_id();
    if q >= n as usize {
        terminate!();
    }
    let mut i = u32::cast_from(q);
    if identity == 0 {
        i = idx[q];
    }
    pos[2 * q] = f32::cast_from(i % width);
    pos[2 * q + 1] = f32::cast_from(i / width);
}

/// Descriptor refinement (MASt3R-SLAM's `refine_matches`): per keyframe pixel `q`, the window
/// of `2 radius + 1` samples `d` pixels apart around the current match, for `d` from
/// `dilation_max` down to 1, each dilation re-centred on the best score so far; the best score
/// starts at the smallest positive normal float and the first maximum wins (column outer).
/// The descriptors are read as vectors of `N` floats (`lanes` = `dim / N` of them per pixel,
/// compiled in): the keyframe pixel's stay in registers and each window sample is `lanes`
/// vector loads and dot products, not `dim` scalar loads 4 `dim` bytes apart across the warp.
#[cube(launch)]
pub fn refine_kernel<N: Size>(
    ref_desc: &[Vector<f32, N>],
    query_desc: &[Vector<f32, N>],
    idx_in: &[u32],
    idx_out: &mut [u32],
    pixels: u32,
    width: u32,
    height: u32,
    radius: u32,
    dilation_max: u32,
    #[comptime] lanes: usize,
) {
    let q = rust3r_gpu::global_id();
    if q >= pixels as usize {
        terminate!();
    }
    let mut query = Array::<Vector<f32, N>>::new(lanes);
    #[unroll]
    for k in 0..lanes {
        query[k] = query_desc[q * lanes + k];
    }
    let i = idx_in[q];
    let w = i32::cast_from(width);
    let h = i32::cast_from(height);
    let mut u0 = i32::cast_from(i % width);
    let mut v0 = i32::cast_from(i / width);
    // f32::MIN_POSITIVE, the smallest positive normal float.
    let mut best = 1.1754944e-38f32;
    let mut ub = u0;
    let mut vb = v0;
    let samples = 2u32 * radius + 1u32;
    let mut d = dilation_max;
    while d >= 1u32 {
        let rd = i32::cast_from(radius * d);
        for a in 0..samples {
            let u = u0 - rd + i32::cast_from(a * d);
            if u >= 0i32 && u < w {
                for b in 0..samples {
                    let v = v0 - rd + i32::cast_from(b * d);
                    if v >= 0i32 && v < h {
                        let base = usize::cast_from(v * w + u) * lanes;
                        let mut score = 0.0f32;
                        #[unroll]
                        for k in 0..lanes {
                            score += ref_desc[base + k].dot(query[k]);
                        }
                        if score > best {
                            best = score;
                            ub = u;
                            vb = v;
                        }
                    }
                }
            }
        }
        u0 = ub;
        v0 = vb;
        d -= 1u32;
    }
    idx_out[q] = u32::cast_from(vb * w + ub);
}

/// Huber weight of a whitened residual: 1 inside `k`, `k/|r|` outside.
#[cube]
fn huber_w(r: f32, k: f32) -> f32 {
    let a = r.abs();
    select(a < k, 1.0f32, k / a)
}

/// Normal-equation terms of each keyframe pixel `q` with `used[q]`: `y = pose * src_pts[idx[q]]`
/// against the keyframe point `X_q`, residual `[X_q / |X_q| - y / |y|, |X_q| - |y|]` with
/// square-root information `sqrt(qk[q]) / sigma` and Huber on the whitened residual, written
/// as [`super::track::NE_COLS`] floats per pixel (zeros when it does not contribute).
#[cube(launch)]
pub fn pair_normal_eq_kernel(
    src_pts: &[f32],
    meas_pts: &[f32],
    idx: &[u32],
    used: &[u32],
    qk: &[f32],
    pose: &[f32],
    params: &[f32],
    out: &mut [f32],
    n: u32,
) {
    let q = rust3r_gpu::global_id();
    if q >= n as usize {
        terminate!();
    }
    let base = q * 37;
    zero_normal_terms(out, base);
    if used[q] != 0u32 {
        let j = idx[q] as usize;
        let p = transform_point(pose, src_pts, j);
        let x = p.x;
        let y = p.y;
        let z = p.z;
        let xq = meas_pts[q * 3];
        let yq = meas_pts[q * 3 + 1];
        let zq = meas_pts[q * 3 + 2];
        let nq = (xq * xq + yq * yq + zq * zq).sqrt();
        let d = (x * x + y * y + z * z).sqrt();
        if nq > 0.0f32 && d > 0.0f32 {
            let a0 = x / d;
            let a1 = y / d;
            let a2 = z / d;
            let r0 = xq / nq - a0;
            let r1 = yq / nq - a1;
            let r2 = zq / nq - a2;
            let r3 = nq - d;
            let sq = qk[q].sqrt();
            let k = params[PP_HUBER];
            let sr = sq * params[PP_ISR];
            let sd = sq * params[PP_ISD];
            let w0 = sr * sr * huber_w(sr * r0, k);
            let w1 = sr * sr * huber_w(sr * r1, k);
            let w2 = sr * sr * huber_w(sr * r2, k);
            let w3 = sd * sd * huber_w(sd * r3, k);
            // Rows of dh/dy: the ray rows (I - a a^T) / d, then a^T for the distance.
            let id = 1.0f32 / d;
            let p00 = (1.0f32 - a0 * a0) * id;
            let p01 = -a0 * a1 * id;
            let p02 = -a0 * a2 * id;
            let p11 = (1.0f32 - a1 * a1) * id;
            let p12 = -a1 * a2 * id;
            let p22 = (1.0f32 - a2 * a2) * id;
            // M = sum_k w_k row_k^T row_k (rows 0-2 are P's rows; P is symmetric).
            let m00 = w0 * p00 * p00 + w1 * p01 * p01 + w2 * p02 * p02 + w3 * a0 * a0;
            let m01 = w0 * p00 * p01 + w1 * p01 * p11 + w2 * p02 * p12 + w3 * a0 * a1;
            let m02 = w0 * p00 * p02 + w1 * p01 * p12 + w2 * p02 * p22 + w3 * a0 * a2;
            let m11 = w0 * p01 * p01 + w1 * p11 * p11 + w2 * p12 * p12 + w3 * a1 * a1;
            let m12 = w0 * p01 * p02 + w1 * p11 * p12 + w2 * p12 * p22 + w3 * a1 * a2;
            let m22 = w0 * p02 * p02 + w1 * p12 * p12 + w2 * p22 * p22 + w3 * a2 * a2;
            // v = sum_k w_k r_k row_k.
            let v0 = w0 * r0 * p00 + w1 * r1 * p01 + w2 * r2 * p02 + w3 * r3 * a0;
            let v1 = w0 * r0 * p01 + w1 * r1 * p11 + w2 * r2 * p12 + w3 * r3 * a1;
            let v2 = w0 * r0 * p02 + w1 * r1 * p12 + w2 * r2 * p22 + w3 * r3 * a2;
            let cost = 0.5f32 * (w0 * r0 * r0 + w1 * r1 * r1 + w2 * r2 * r2 + w3 * r3 * r3);
            write_normal_terms(
                out, base, x, y, z, m00, m01, m02, m11, m12, m22, v0, v1, v2, cost,
            );
        }
    }
}

/// Reflected index of `crate::matching::ray_image`'s padding: `-i` below 0, `2 len - 2 - i`
/// past the end, then clamped to `0..len`.
#[cube]
fn reflect(i: i32, len: i32) -> usize {
    let mut r = i;
    if i < 0i32 {
        r = -i;
    } else if i >= len {
        r = 2i32 * len - 2i32 - i;
    }
    usize::cast_from(clamp(r, 0i32, len - 1i32))
}

/// Unit ray of point `j` (`pts`: three floats a point), zero for the origin.
#[cube]
fn unit_ray(pts: &[f32], j: usize) -> Point3 {
    let x = pts[j * 3];
    let y = pts[j * 3 + 1];
    let z = pts[j * 3 + 2];
    let norm = (x * x + y * y + z * z).sqrt();
    // A zero norm means a zero point: 0 / 1 keeps its ray zero.
    let d = select(norm > 0.0f32, norm, 1.0f32);
    Point3 {
        x: x / d,
        y: y / d,
        z: z / d,
    }
}

/// The ray image of a pointmap whose every pixel has a point (`crate::matching::ray_image` with
/// no fallback and every pixel valid; `pts`: `[h * w * 3]`): per pixel its unit ray and the
/// rays' Scharr gradients / 32 along u and v with reflected borders, 9 floats a pixel (`rays`).
/// The non-zero taps are summed in the host's order (kernel row outer, column inner), so the
/// two differ only by the rounding of fused multiply-adds.
#[cube(launch)]
pub fn ray_image_kernel(pts: &[f32], rays: &mut [f32], width: u32, height: u32) {
    let q = rust3r_gpu::global_id();
    if q >= (width * height) as usize {
        terminate!();
    }
    let w = i32::cast_from(width);
    let h = i32::cast_from(height);
    let u = i32::cast_from(q % width as usize);
    let v = i32::cast_from(q / width as usize);
    let wu = width as usize;
    let v0 = reflect(v - 1i32, h) * wu;
    let v1 = reflect(v, h) * wu;
    let v2 = reflect(v + 1i32, h) * wu;
    let u0 = reflect(u - 1i32, w);
    let u1 = reflect(u, w);
    let u2 = reflect(u + 1i32, w);
    // r_ab: the ray at row offset a - 1, column offset b - 1.
    let r00 = unit_ray(pts, v0 + u0);
    let r01 = unit_ray(pts, v0 + u1);
    let r02 = unit_ray(pts, v0 + u2);
    let r10 = unit_ray(pts, v1 + u0);
    let r12 = unit_ray(pts, v1 + u2);
    let r20 = unit_ray(pts, v2 + u0);
    let r21 = unit_ray(pts, v2 + u1);
    let r22 = unit_ray(pts, v2 + u2);
    let c = unit_ray(pts, q);
    // Scharr / 32: rows [-3 0 3], [-10 0 10], [-3 0 3] for u; the transpose for v.
    let s = 3.0f32 / 32.0f32;
    let l = 10.0f32 / 32.0f32;
    let o = q * 9;
    rays[o] = c.x;
    rays[o + 1] = c.y;
    rays[o + 2] = c.z;
    rays[o + 3] = grad(
        -s, r00.x, s, r02.x, -l, r10.x, l, r12.x, -s, r20.x, s, r22.x,
    );
    rays[o + 4] = grad(
        -s, r00.y, s, r02.y, -l, r10.y, l, r12.y, -s, r20.y, s, r22.y,
    );
    rays[o + 5] = grad(
        -s, r00.z, s, r02.z, -l, r10.z, l, r12.z, -s, r20.z, s, r22.z,
    );
    rays[o + 6] = grad(
        -s, r00.x, -l, r01.x, -s, r02.x, s, r20.x, l, r21.x, s, r22.x,
    );
    rays[o + 7] = grad(
        -s, r00.y, -l, r01.y, -s, r02.y, s, r20.y, l, r21.y, s, r22.y,
    );
    rays[o + 8] = grad(
        -s, r00.z, -l, r01.z, -s, r02.z, s, r20.z, l, r21.z, s, r22.z,
    );
}

/// `k0 r0 + ... + k5 r5`, summed from the left starting at zero.
#[allow(clippy::too_many_arguments)]
#[cube]
fn grad(
    k0: f32,
    r0: f32,
    k1: f32,
    r1: f32,
    k2: f32,
    r2: f32,
    k3: f32,
    r3: f32,
    k4: f32,
    r4: f32,
    k5: f32,
    r5: f32,
) -> f32 {
    let mut g = 0.0f32;
    g += k0 * r0;
    g += k1 * r1;
    g += k2 * r2;
    g += k3 * r3;
    g += k4 * r4;
    g += k5 * r5;
    g
}
