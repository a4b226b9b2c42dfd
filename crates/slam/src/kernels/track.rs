#![allow(missing_docs)] // the #[cube(launch)] macro generates undocumented items
//! CubeCL kernels of calibrated tracking: projective matching by iterative projection (with
//! rounding and the occlusion check) and the per-pixel normal-equation terms, summed with
//! `rust3r_gpu::reduce::reduce_columns`.
//!
//! Buffers (f32 unless noted, row-major):
//! * `rays`: `[src_h * src_w * 9]` ray image of the source (frame) view;
//! * `src_pts`: `[src_n * 3]`, `src_valid`: u32 `[src_n]`;
//! * `meas_pts`, `normals`: `[meas_n * 3]` (normal `(0,0,0)` = none), `meas_valid`: u32;
//! * `pose`: `[12]` = `s R` (row-major 3x3) and `t` of `T_src_meas` (matching) or
//!   `T_meas_src` (normal equations);
//! * `params`: see [`P_LEN`] and the `P_*` indices.

use cubecl::prelude::*;

/// Floats per pixel in the normal-equation output: 28 (upper `H`), 7 (`g`), cost, count.
pub const NE_COLS: usize = 37;

/// `params` indices.
pub const P_FX: usize = 0;
/// See [`P_FX`].
pub const P_FY: usize = 1;
/// See [`P_FX`].
pub const P_CX: usize = 2;
/// See [`P_FX`].
pub const P_CY: usize = 3;
/// `1/sigma_pixel`.
pub const P_ISP: usize = 4;
/// `1/sigma_depth`.
pub const P_ISD: usize = 5;
/// `1/sigma_plane` (0: no plane term).
pub const P_ISPL: usize = 6;
/// Huber threshold.
pub const P_HUBER: usize = 7;
/// Depth epsilon.
pub const P_ZEPS: usize = 8;
/// Pixel border.
pub const P_BORDER: usize = 9;
/// LM initial damping.
pub const P_LAMBDA: usize = 10;
/// Convergence threshold of the ray error.
pub const P_CONV: usize = 11;
/// Occlusion distance threshold.
pub const P_DIST: usize = 12;
/// Early-exit step (pixels).
pub const P_MINSTEP: usize = 13;
/// Depth noise model on (1) or off (0).
pub const P_NOISE: usize = 14;
/// Length of `params`.
pub const P_LEN: usize = 15;

/// A point (three floats).
#[derive(CubeType, Clone, Copy)]
pub struct Point3 {
    pub x: f32,
    pub y: f32,
    pub z: f32,
}

/// `pose * pts[j]`, with `pose` = `s R` (row-major 3x3) and `t` (12 floats) and `pts` three
/// floats per point.
#[cube]
pub fn transform_point(pose: &[f32], pts: &[f32], j: usize) -> Point3 {
    let px = pts[j * 3];
    let py = pts[j * 3 + 1];
    let pz = pts[j * 3 + 2];
    Point3 {
        x: pose[0] * px + pose[1] * py + pose[2] * pz + pose[9],
        y: pose[3] * px + pose[4] * py + pose[5] * pz + pose[10],
        z: pose[6] * px + pose[7] * py + pose[8] * pz + pose[11],
    }
}

#[cube]
fn bilinear(rays: &[f32], w: usize, u: f32, v: f32, c: usize) -> f32 {
    let u0 = u.floor();
    let v0 = v.floor();
    let du = u - u0;
    let dv = v - v0;
    let iu = u32::cast_from(u0) as usize;
    let iv = u32::cast_from(v0) as usize;
    let r11 = rays[((iv + 1) * w + iu + 1) * 9 + c];
    let r12 = rays[((iv + 1) * w + iu) * 9 + c];
    let r21 = rays[(iv * w + iu + 1) * 9 + c];
    let r22 = rays[(iv * w + iu) * 9 + c];
    du * dv * r11
        + (1.0f32 - du) * dv * r12
        + du * (1.0f32 - dv) * r21
        + (1.0f32 - du) * (1.0f32 - dv) * r22
}

#[cube]
fn ray_cost(rays: &[f32], w: usize, u: f32, v: f32, x0: f32, x1: f32, x2: f32) -> f32 {
    let a = bilinear(rays, w, u, v, 0usize);
    let b = bilinear(rays, w, u, v, 1usize);
    let c = bilinear(rays, w, u, v, 2usize);
    let n = (a * a + b * b + c * c).sqrt();
    let e0 = a / n - x0;
    let e1 = b / n - x1;
    let e2 = c / n - x2;
    e0 * e0 + e1 * e1 + e2 * e2
}

/// Projective matching: per measurement pixel `q`, move its point into the source camera with
/// `pose`, run the iterative projection on `rays` from `pos[q]` (updated in place), round,
/// and check occlusion. Writes `idx[q]` and `valid[q]` (u32).
#[cube(launch)]
pub fn match_kernel(
    rays: &[f32],
    src_pts: &[f32],
    src_valid: &[u32],
    meas_pts: &[f32],
    meas_valid: &[u32],
    pose: &[f32],
    params: &[f32],
    pos: &mut [f32],
    idx: &mut [u32],
    valid: &mut [u32],
    n: u32,
    src_w: u32,
    src_h: u32,
    max_iter: u32,
) {
    let q = rust3r_gpu::global_id();
    if q >= n as usize {
        terminate!();
    }
    idx[q] = 0u32;
    valid[q] = 0u32;
    if meas_valid[q] != 0u32 {
        let p = transform_point(pose, meas_pts, q);
        let yx = p.x;
        let yy = p.y;
        let yz = p.z;
        let yn = (yx * yx + yy * yy + yz * yz).sqrt();
        if yn > 0.0f32 {
            let x0 = yx / yn;
            let x1 = yy / yn;
            let x2 = yz / yn;
            let w = src_w as usize;
            let wmax = f32::cast_from(src_w) - 2.0f32;
            let hmax = f32::cast_from(src_h) - 2.0f32;
            let mut u = clamp(pos[q * 2], 1.0f32, wmax);
            let mut v = clamp(pos[q * 2 + 1], 1.0f32, hmax);
            let mut lambda = params[P_LAMBDA];
            let thresh = params[P_CONV];
            let mut conv = false;
            let mut it = 0u32;
            while it < max_iter {
                it += 1;
                let a = bilinear(rays, w, u, v, 0usize);
                let b = bilinear(rays, w, u, v, 1usize);
                let c = bilinear(rays, w, u, v, 2usize);
                let nr = (a * a + b * b + c * c).sqrt();
                let e0 = a / nr - x0;
                let e1 = b / nr - x1;
                let e2 = c / nr - x2;
                let cost = e0 * e0 + e1 * e1 + e2 * e2;
                let gx0 = bilinear(rays, w, u, v, 3usize);
                let gx1 = bilinear(rays, w, u, v, 4usize);
                let gx2 = bilinear(rays, w, u, v, 5usize);
                let gy0 = bilinear(rays, w, u, v, 6usize);
                let gy1 = bilinear(rays, w, u, v, 7usize);
                let gy2 = bilinear(rays, w, u, v, 8usize);
                let a00 = gx0 * gx0 + gx1 * gx1 + gx2 * gx2 + lambda;
                let a01 = gx0 * gy0 + gx1 * gy1 + gx2 * gy2;
                let a11 = gy0 * gy0 + gy1 * gy1 + gy2 * gy2 + lambda;
                let b0 = -(e0 * gx0 + e1 * gx1 + e2 * gx2);
                let b1 = -(e0 * gy0 + e1 * gy1 + e2 * gy2);
                let det_inv = 1.0f32 / (a00 * a11 - a01 * a01);
                let du = det_inv * (a11 * b0 - a01 * b1);
                let dv = det_inv * (-a01 * b0 + a00 * b1);
                let un = clamp(u + du, 1.0f32, wmax);
                let vn = clamp(v + dv, 1.0f32, hmax);
                let new_cost = ray_cost(rays, w, un, vn, x0, x1, x2);
                if new_cost < cost {
                    let step = max((un - u).abs(), (vn - v).abs());
                    u = un;
                    v = vn;
                    lambda *= 0.1f32;
                    conv = new_cost < thresh;
                    if conv && step < params[P_MINSTEP] {
                        it = max_iter;
                    }
                } else {
                    lambda *= 10.0f32;
                    conv = cost < thresh;
                }
            }
            pos[q * 2] = u;
            pos[q * 2 + 1] = v;
            // Round to the nearest pixel.
            let iu = min(u32::cast_from((u + 0.5f32).floor()), src_w - 1u32);
            let iv = min(u32::cast_from((v + 0.5f32).floor()), src_h - 1u32);
            let j = (iv * src_w + iu) as usize;
            idx[q] = j as u32;
            if conv && src_valid[j] != 0u32 {
                let dx = src_pts[j * 3] - yx;
                let dy = src_pts[j * 3 + 1] - yy;
                let dz = src_pts[j * 3 + 2] - yz;
                if (dx * dx + dy * dy + dz * dz).sqrt() < params[P_DIST] {
                    valid[q] = 1u32;
                }
            }
        }
    }
}

#[cube]
fn huber_w(r: f32, k: f32) -> f32 {
    let a = r.abs();
    select(a < k, 1.0f32, k / a)
}

/// `c_a . (M c_b)` for the symmetric `M`.
#[cube]
#[allow(clippy::too_many_arguments)]
fn quad(
    a0: f32,
    a1: f32,
    a2: f32,
    b0: f32,
    b1: f32,
    b2: f32,
    m00: f32,
    m01: f32,
    m02: f32,
    m11: f32,
    m12: f32,
    m22: f32,
) -> f32 {
    let t0 = m00 * b0 + m01 * b1 + m02 * b2;
    let t1 = m01 * b0 + m11 * b1 + m12 * b2;
    let t2 = m02 * b0 + m12 * b1 + m22 * b2;
    a0 * t0 + a1 * t1 + a2 * t2
}

/// Normal-equation terms of each measurement pixel (calibrated residual: pixel + log-depth +
/// point-to-plane, Huber on whitened residuals) for `y = pose * src_pts[idx[q]]`, written as
/// [`NE_COLS`] floats per pixel (zeros when the pixel does not contribute).
#[cube(launch)]
pub fn normal_eq_kernel(
    src_pts: &[f32],
    src_valid: &[u32],
    meas_pts: &[f32],
    normals: &[f32],
    idx: &[u32],
    valid: &[u32],
    pose: &[f32],
    params: &[f32],
    out: &mut [f32],
    n: u32,
    meas_w: u32,
    meas_h: u32,
) {
    let q = rust3r_gpu::global_id();
    if q >= n as usize {
        terminate!();
    }
    let base = q * 37;
    zero_normal_terms(out, base);
    let j = idx[q] as usize;
    if valid[q] != 0u32 && src_valid[j] != 0u32 {
        let p = transform_point(pose, src_pts, j);
        let x = p.x;
        let y = p.y;
        let z = p.z;
        let fx = params[P_FX];
        let fy = params[P_FY];
        let border = params[P_BORDER];
        let zeps = params[P_ZEPS];
        let xq = meas_pts[q * 3];
        let yq = meas_pts[q * 3 + 1];
        let zq = meas_pts[q * 3 + 2];
        let iz = 1.0f32 / z;
        let u = fx * x * iz + params[P_CX];
        let v = fy * y * iz + params[P_CY];
        let w_lim = f32::cast_from(meas_w) - 1.0f32 - border;
        let h_lim = f32::cast_from(meas_h) - 1.0f32 - border;
        let ok = z > zeps && zq > zeps && u >= border && u <= w_lim && v >= border && v <= h_lim;
        if ok {
            let k = params[P_HUBER];
            let uq = f32::cast_from(q as u32 % meas_w);
            let vq = f32::cast_from(q as u32 / meas_w);
            // Pixel u: dh = (fx/z, 0, -fx x/z^2).
            let ru = uq - u;
            let isp = params[P_ISP];
            let wu = isp * isp * huber_w(isp * ru, k);
            let hu0 = fx * iz;
            let hu2 = -fx * x * iz * iz;
            // Pixel v: dh = (0, fy/z, -fy y/z^2).
            let rv = vq - v;
            let wv = isp * isp * huber_w(isp * rv, k);
            let hv1 = fy * iz;
            let hv2 = -fy * y * iz * iz;
            // Log-depth: dh = (0, 0, 1/z).
            let rd = zq.ln() - z.ln();
            let noise = params[P_NOISE] > 0.0f32;
            let zs_log = select(noise, max(zq, 0.5f32), 1.0f32);
            let zs_plane = select(noise, max(zq * zq, 0.25f32), 1.0f32);
            let isd = params[P_ISD] / zs_log;
            let wd = isd * isd * huber_w(isd * rd, k);
            let mut m00 = wu * hu0 * hu0;
            let mut m01 = 0.0f32;
            let mut m02 = wu * hu0 * hu2;
            let mut m11 = wv * hv1 * hv1;
            let mut m12 = wv * hv1 * hv2;
            let mut m22 = wu * hu2 * hu2 + wv * hv2 * hv2 + wd * iz * iz;
            let mut v0 = wu * ru * hu0;
            let mut v1 = wv * rv * hv1;
            let mut v2 = wu * ru * hu2 + wv * rv * hv2 + wd * rd * iz;
            let mut cost = 0.5f32 * (wu * ru * ru + wv * rv * rv + wd * rd * rd);
            // Point-to-plane: r = n . (X_q - y), dh = n.
            let ispl = params[P_ISPL] / zs_plane;
            let n0 = normals[q * 3];
            let n1 = normals[q * 3 + 1];
            let n2 = normals[q * 3 + 2];
            if ispl > 0.0f32 && (n0 != 0.0f32 || n1 != 0.0f32 || n2 != 0.0f32) {
                let rp = n0 * (xq - x) + n1 * (yq - y) + n2 * (zq - z);
                let wp = ispl * ispl * huber_w(ispl * rp, k);
                m00 += wp * n0 * n0;
                m01 += wp * n0 * n1;
                m02 += wp * n0 * n2;
                m11 += wp * n1 * n1;
                m12 += wp * n1 * n2;
                m22 += wp * n2 * n2;
                v0 += wp * rp * n0;
                v1 += wp * rp * n1;
                v2 += wp * rp * n2;
                cost += 0.5f32 * wp * rp * rp;
            }
            write_normal_terms(
                out, base, x, y, z, m00, m01, m02, m11, m12, m22, v0, v1, v2, cost,
            );
        }
    }
}

/// Zeroes the [`NE_COLS`] normal-equation terms at `out[base..]` (a pixel that contributes
/// nothing).
#[cube]
pub fn zero_normal_terms(out: &mut [f32], base: usize) {
    #[unroll]
    for k in 0..37usize {
        out[base + k] = 0.0f32;
    }
}

/// Writes the [`NE_COLS`] normal-equation terms of one correspondence at `out[base..]`: the
/// upper triangle of `H = D^T M D`, `g = D^T v`, the cost and a count of 1, for the point
/// `(x, y, z)` whose `dy/dxi` is `D = [I, -[y]x, y]` and the symmetric 3x3 information `M`.
#[cube]
#[allow(clippy::too_many_arguments)]
pub fn write_normal_terms(
    out: &mut [f32],
    base: usize,
    x: f32,
    y: f32,
    z: f32,
    m00: f32,
    m01: f32,
    m02: f32,
    m11: f32,
    m12: f32,
    m22: f32,
    v0: f32,
    v1: f32,
    v2: f32,
    cost: f32,
) {
    // Columns of dy/dxi = [I, -[y]x, y].
    // c0 (1,0,0) c1 (0,1,0) c2 (0,0,1) c3 (0,-z,y) c4 (z,0,-x) c5 (-y,x,0) c6 (x,y,z)
    let o = 0.0f32;
    let l = 1.0f32;
    out[base] = quad(l, o, o, l, o, o, m00, m01, m02, m11, m12, m22);
    out[base + 1] = quad(l, o, o, o, l, o, m00, m01, m02, m11, m12, m22);
    out[base + 2] = quad(l, o, o, o, o, l, m00, m01, m02, m11, m12, m22);
    out[base + 3] = quad(l, o, o, o, -z, y, m00, m01, m02, m11, m12, m22);
    out[base + 4] = quad(l, o, o, z, o, -x, m00, m01, m02, m11, m12, m22);
    out[base + 5] = quad(l, o, o, -y, x, o, m00, m01, m02, m11, m12, m22);
    out[base + 6] = quad(l, o, o, x, y, z, m00, m01, m02, m11, m12, m22);
    out[base + 7] = quad(o, l, o, o, l, o, m00, m01, m02, m11, m12, m22);
    out[base + 8] = quad(o, l, o, o, o, l, m00, m01, m02, m11, m12, m22);
    out[base + 9] = quad(o, l, o, o, -z, y, m00, m01, m02, m11, m12, m22);
    out[base + 10] = quad(o, l, o, z, o, -x, m00, m01, m02, m11, m12, m22);
    out[base + 11] = quad(o, l, o, -y, x, o, m00, m01, m02, m11, m12, m22);
    out[base + 12] = quad(o, l, o, x, y, z, m00, m01, m02, m11, m12, m22);
    out[base + 13] = quad(o, o, l, o, o, l, m00, m01, m02, m11, m12, m22);
    out[base + 14] = quad(o, o, l, o, -z, y, m00, m01, m02, m11, m12, m22);
    out[base + 15] = quad(o, o, l, z, o, -x, m00, m01, m02, m11, m12, m22);
    out[base + 16] = quad(o, o, l, -y, x, o, m00, m01, m02, m11, m12, m22);
    out[base + 17] = quad(o, o, l, x, y, z, m00, m01, m02, m11, m12, m22);
    out[base + 18] = quad(o, -z, y, o, -z, y, m00, m01, m02, m11, m12, m22);
    out[base + 19] = quad(o, -z, y, z, o, -x, m00, m01, m02, m11, m12, m22);
    out[base + 20] = quad(o, -z, y, -y, x, o, m00, m01, m02, m11, m12, m22);
    out[base + 21] = quad(o, -z, y, x, y, z, m00, m01, m02, m11, m12, m22);
    out[base + 22] = quad(z, o, -x, z, o, -x, m00, m01, m02, m11, m12, m22);
    out[base + 23] = quad(z, o, -x, -y, x, o, m00, m01, m02, m11, m12, m22);
    out[base + 24] = quad(z, o, -x, x, y, z, m00, m01, m02, m11, m12, m22);
    out[base + 25] = quad(-y, x, o, -y, x, o, m00, m01, m02, m11, m12, m22);
    out[base + 26] = quad(-y, x, o, x, y, z, m00, m01, m02, m11, m12, m22);
    out[base + 27] = quad(x, y, z, x, y, z, m00, m01, m02, m11, m12, m22);
    // g = D^T v.
    out[base + 28] = v0;
    out[base + 29] = v1;
    out[base + 30] = v2;
    out[base + 31] = -z * v1 + y * v2;
    out[base + 32] = z * v0 - x * v2;
    out[base + 33] = -y * v0 + x * v1;
    out[base + 34] = x * v0 + y * v1 + z * v2;
    out[base + 35] = cost;
    out[base + 36] = 1.0f32;
}
