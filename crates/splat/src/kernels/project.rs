//! Per-Gaussian projection (EWA splatting) and its backward pass.
//!
//! Forward: world mean -> camera -> pixel mean, 3D covariance from scale and
//! rotation -> 2D covariance through the local affine approximation (with the
//! gsplat/3DGS frustum clamp of the Jacobian), 0.3 px dilation (and opacity
//! compensation in antialiased mode), conic, colour from SH, opacity, exact
//! screen-space extent and the number of 16x16 tiles touched.
//!
//! Camera buffer layout (f32): 0..9 world-to-camera rotation (row-major),
//! 9..12 translation, 12 fx, 13 fy, 14 cx, 15 cy, 16..19 camera centre,
//! 19..22 background, 22 near, 23 far. See [`crate::camera::CAM_LEN`].
// `#[cube]` kernels in this file are written the way CubeCL's frontend expands them: `(a + b - 1)
// / b`, `x = x op y`, nested `if`s and float literals (no `div_ceil`, ranges or std constants),
// and with the flat argument lists their launchers pass.
#![allow(
    clippy::manual_div_ceil,
    clippy::assign_op_pattern,
    clippy::collapsible_if,
    clippy::manual_range_contains,
    clippy::excessive_precision,
    clippy::too_many_arguments
)]

use cubecl::prelude::*;

use super::sh::{sh_basis, sh_basis_grad};
use rust3r_gpu::half::f16_at;

/// Floats per projected Gaussian: mean2d (2), conic (3), depth, opacity, rgb (3).
pub const PROJ: usize = 10;
/// Floats per projected-Gaussian gradient: same layout as [`PROJ`].
pub const VPROJ: usize = 10;
/// Floats per Gaussian of camera-pose gradient: rotation (9, row-major), translation (3).
pub const VCAM: usize = 12;
pub const TILE_SIZE: u32 = 16;
pub const ALPHA_MIN: f32 = 1.0 / 255.0;

#[cube]
fn quat_to_rot(w: f32, x: f32, y: f32, z: f32) -> (f32, f32, f32, f32, f32, f32, f32, f32, f32) {
    (
        1.0f32 - 2.0f32 * (y * y + z * z),
        2.0f32 * (x * y - w * z),
        2.0f32 * (x * z + w * y),
        2.0f32 * (x * y + w * z),
        1.0f32 - 2.0f32 * (x * x + z * z),
        2.0f32 * (y * z - w * x),
        2.0f32 * (x * z - w * y),
        2.0f32 * (y * z + w * x),
        1.0f32 - 2.0f32 * (x * x + y * y),
    )
}

/// The world-to-camera rotation (row-major) of the camera block.
#[cube]
fn camera_rotation(cam: &[f32]) -> (f32, f32, f32, f32, f32, f32, f32, f32, f32) {
    (
        cam[0], cam[1], cam[2], cam[3], cam[4], cam[5], cam[6], cam[7], cam[8],
    )
}

/// A world point in the camera frame of the camera block.
#[cube]
fn to_camera(cam: &[f32], x: f32, y: f32, z: f32) -> (f32, f32, f32) {
    (
        cam[0] * x + cam[1] * y + cam[2] * z + cam[9],
        cam[3] * x + cam[4] * y + cam[5] * z + cam[10],
        cam[6] * x + cam[7] * y + cam[8] * z + cam[11],
    )
}

/// Unit view direction from the camera centre to `(x, y, z)`, and `1 / |d|` (0 at the centre).
#[cube]
fn view_dir(cam: &[f32], x: f32, y: f32, z: f32) -> (f32, f32, f32, f32) {
    let dx = x - cam[16];
    let dy = y - cam[17];
    let dz = z - cam[18];
    let dn = (dx * dx + dy * dy + dz * dz).sqrt();
    let inv_dn = select(dn > 0.0f32, 1.0f32 / dn, 0.0f32);
    (dx * inv_dn, dy * inv_dn, dz * inv_dn, inv_dn)
}

/// `M = R S` for a rotation `R` (row-major) and the scales `S = diag(sx, sy, sz)`.
#[cube]
#[allow(clippy::too_many_arguments)]
fn scaled_rotation(
    a00: f32,
    a01: f32,
    a02: f32,
    a10: f32,
    a11: f32,
    a12: f32,
    a20: f32,
    a21: f32,
    a22: f32,
    sx: f32,
    sy: f32,
    sz: f32,
) -> (f32, f32, f32, f32, f32, f32, f32, f32, f32) {
    (
        a00 * sx,
        a01 * sy,
        a02 * sz,
        a10 * sx,
        a11 * sy,
        a12 * sz,
        a20 * sx,
        a21 * sy,
        a22 * sz,
    )
}

/// The upper triangle (00, 01, 02, 11, 12, 22) of `M M^T`: the world covariance `Sigma`.
#[cube]
#[allow(clippy::too_many_arguments)]
fn gram(
    m00: f32,
    m01: f32,
    m02: f32,
    m10: f32,
    m11: f32,
    m12: f32,
    m20: f32,
    m21: f32,
    m22: f32,
) -> (f32, f32, f32, f32, f32, f32) {
    (
        m00 * m00 + m01 * m01 + m02 * m02,
        m00 * m10 + m01 * m11 + m02 * m12,
        m00 * m20 + m01 * m21 + m02 * m22,
        m10 * m10 + m11 * m11 + m12 * m12,
        m10 * m20 + m11 * m21 + m12 * m22,
        m20 * m20 + m21 * m21 + m22 * m22,
    )
}

/// The upper triangle of `W Sigma W^T` for a rotation `W` (row-major) and a symmetric `Sigma`
/// given by its upper triangle.
#[cube]
#[allow(clippy::too_many_arguments)]
fn rotate_covariance(
    r00: f32,
    r01: f32,
    r02: f32,
    r10: f32,
    r11: f32,
    r12: f32,
    r20: f32,
    r21: f32,
    r22: f32,
    s00: f32,
    s01: f32,
    s02: f32,
    s11: f32,
    s12: f32,
    s22: f32,
) -> (f32, f32, f32, f32, f32, f32) {
    // B = W Sigma.
    let b00 = r00 * s00 + r01 * s01 + r02 * s02;
    let b01 = r00 * s01 + r01 * s11 + r02 * s12;
    let b02 = r00 * s02 + r01 * s12 + r02 * s22;
    let b10 = r10 * s00 + r11 * s01 + r12 * s02;
    let b11 = r10 * s01 + r11 * s11 + r12 * s12;
    let b12 = r10 * s02 + r11 * s12 + r12 * s22;
    let b20 = r20 * s00 + r21 * s01 + r22 * s02;
    let b21 = r20 * s01 + r21 * s11 + r22 * s12;
    let b22 = r20 * s02 + r21 * s12 + r22 * s22;
    (
        b00 * r00 + b01 * r01 + b02 * r02,
        b00 * r10 + b01 * r11 + b02 * r12,
        b00 * r20 + b01 * r21 + b02 * r22,
        b10 * r10 + b11 * r11 + b12 * r12,
        b10 * r20 + b11 * r21 + b12 * r22,
        b20 * r20 + b21 * r21 + b22 * r22,
    )
}

/// The 3DGS / gsplat frustum clamp of the projection's Jacobian: normalised image coordinates
/// are clamped to `[-lim_neg, lim_pos]`, 1.3 times the field of view (`x` then `y`).
#[cube]
fn frustum_limits(
    width: u32,
    height: u32,
    fx: f32,
    fy: f32,
    cx: f32,
    cy: f32,
) -> (f32, f32, f32, f32) {
    let tan_fovx = 0.5f32 * f32::cast_from(width) / fx;
    let tan_fovy = 0.5f32 * f32::cast_from(height) / fy;
    (
        (f32::cast_from(width) - cx) / fx + 0.3f32 * tan_fovx,
        cx / fx + 0.3f32 * tan_fovx,
        (f32::cast_from(height) - cy) / fy + 0.3f32 * tan_fovy,
        cy / fy + 0.3f32 * tan_fovy,
    )
}

/// RGB of SH coefficient `k` of row `g`: from `sh` (`[n][num_coeffs][rgb]` f32), or with
/// `half_sh` the DC from `sh` (`[n][rgb]`) and the higher orders from `sh_rest` (half floats
/// packed back to back, see [`crate::ShCoeffs::Half`]).
#[cube]
#[allow(unused_assignments)]
pub fn sh_coeff(
    sh: &[f32],
    sh_rest: &[u32],
    g: usize,
    k: u32,
    #[comptime] num_coeffs: u32,
    #[comptime] half_sh: bool,
) -> (f32, f32, f32) {
    let mut r = 0.0f32;
    let mut gr = 0.0f32;
    let mut b = 0.0f32;
    if half_sh {
        if k == 0u32 {
            r = sh[g * 3];
            gr = sh[g * 3 + 1];
            b = sh[g * 3 + 2];
        } else {
            let v = g * comptime![(num_coeffs as usize - 1) * 3] + (k as usize - 1) * 3;
            r = f16_at(sh_rest, v);
            gr = f16_at(sh_rest, v + 1);
            b = f16_at(sh_rest, v + 2);
        }
    } else {
        let o = g * comptime![num_coeffs as usize * 3] + (k as usize) * 3;
        r = sh[o];
        gr = sh[o + 1];
        b = sh[o + 2];
    }
    (r, gr, b)
}

/// Units per cube of [`project_forward`].
pub const PROJECT_CUBE: usize = 256;

// `loop { ... break }` runs once: the kernel's early exits for culled Gaussians (CubeCL has no
// labelled blocks or early `return` past the shared-memory write-back below).
#[allow(clippy::never_loop)]
#[cube(launch, launch_unchecked)]
pub fn project_forward(
    means: &[f32],
    log_scales: &[f32],
    quats: &[f32],
    opacity_logits: &[f32],
    sh: &[f32],
    sh_rest: &[u32],
    cam: &[f32],
    proj: &mut [f32],
    radii: &mut [u32],
    rects: &mut [u32],
    tiles_touched: &mut [u32],
    depth_keys: &mut [u32],
    n: u32,
    row0: u32,
    width: u32,
    height: u32,
    #[comptime] num_coeffs: u32,
    #[comptime] active_coeffs: u32,
    #[comptime] antialiased: bool,
    #[comptime] half_sh: bool,
) {
    // The cube's projected rows are assembled in shared memory and stored together (coalesced):
    // one unit writing its own 10 floats would store 4 bytes per memory transaction.
    let t = UNIT_POS as usize;
    let first = rust3r_gpu::block_id() * comptime![PROJECT_CUBE];
    // Chunk-local row `g` of the parameters; global row `gg` of the per-Gaussian outputs.
    let g = first + t;
    let gg = g + row0 as usize;
    let mut rows = Shared::<[f32]>::new_slice(comptime![PROJECT_CUBE * 10]);
    #[unroll]
    for k in 0..10usize {
        rows[t * 10 + k] = 0.0f32;
    }
    // One pass; `break` leaves a culled Gaussian with the defaults.
    loop {
        if g >= n as usize {
            break;
        }
        // Defaults: culled.
        radii[gg * 2] = 0u32;
        radii[gg * 2 + 1] = 0u32;
        rects[gg * 2] = 0u32;
        rects[gg * 2 + 1] = 0u32;
        tiles_touched[gg] = 0u32;
        // Culled Gaussians sort after every visible one.
        depth_keys[gg] = 4294967295u32;

        let (mx, my, mz) = (means[g * 3], means[g * 3 + 1], means[g * 3 + 2]);
        let (r00, r01, r02, r10, r11, r12, r20, r21, r22) = camera_rotation(cam);
        let (px, py, pz) = to_camera(cam, mx, my, mz);
        let (fx, fy, cx, cy) = (cam[12], cam[13], cam[14], cam[15]);
        if pz < cam[22] || pz > cam[23] {
            break;
        }

        // 3D covariance: M = R S, Sigma = M M^T.
        let qw0 = quats[g * 4];
        let qx0 = quats[g * 4 + 1];
        let qy0 = quats[g * 4 + 2];
        let qz0 = quats[g * 4 + 3];
        let qn = (qw0 * qw0 + qx0 * qx0 + qy0 * qy0 + qz0 * qz0).sqrt();
        if !(qn > 0.0f32) {
            break;
        }
        let (a00, a01, a02, a10, a11, a12, a20, a21, a22) =
            quat_to_rot(qw0 / qn, qx0 / qn, qy0 / qn, qz0 / qn);
        let sx = log_scales[g * 3].exp();
        let sy = log_scales[g * 3 + 1].exp();
        let sz = log_scales[g * 3 + 2].exp();
        let (m00, m01, m02, m10, m11, m12, m20, m21, m22) =
            scaled_rotation(a00, a01, a02, a10, a11, a12, a20, a21, a22, sx, sy, sz);
        let (s00, s01, s02, s11, s12, s22) = gram(m00, m01, m02, m10, m11, m12, m20, m21, m22);
        // Camera-space covariance C = W Sigma W^T.
        let (c00, c01, c02, c11, c12, c22) = rotate_covariance(
            r00, r01, r02, r10, r11, r12, r20, r21, r22, s00, s01, s02, s11, s12, s22,
        );

        // Jacobian of the perspective projection, with the frustum clamp.
        let (lim_x_pos, lim_x_neg, lim_y_pos, lim_y_neg) =
            frustum_limits(width, height, fx, fy, cx, cy);
        let rz = 1.0f32 / pz;
        let tx = pz * clamp(px * rz, -lim_x_neg, lim_x_pos);
        let ty = pz * clamp(py * rz, -lim_y_neg, lim_y_pos);
        let j00 = fx * rz;
        let j02 = -fx * tx * rz * rz;
        let j11 = fy * rz;
        let j12 = -fy * ty * rz * rz;
        // cov2d = J C J^T with J = [[j00, 0, j02], [0, j11, j12]].
        let u00 = j00 * c00 + j02 * c02;
        let u01 = j00 * c01 + j02 * c12;
        let u02 = j00 * c02 + j02 * c22;
        let u10 = j11 * c01 + j12 * c02;
        let u11 = j11 * c11 + j12 * c12;
        let u12 = j11 * c12 + j12 * c22;
        let v00 = u00 * j00 + u02 * j02;
        let v01 = u01 * j11 + u02 * j12;
        let v11 = u11 * j11 + u12 * j12;
        let _ = u10;
        let det_orig = v00 * v11 - v01 * v01;
        let w00 = v00 + 0.3f32;
        let w11 = v11 + 0.3f32;
        let det = w00 * w11 - v01 * v01;
        if !(det > 0.0f32) {
            break;
        }
        let mut opacity = 1.0f32 / (1.0f32 + (-opacity_logits[g]).exp());
        if comptime![antialiased] {
            opacity *= max(det_orig / det, 0.0f32).sqrt();
        }
        if opacity < 1.0f32 / 255.0f32 {
            break;
        }
        let inv_det = 1.0f32 / det;
        let conic_a = w11 * inv_det;
        let conic_b = -v01 * inv_det;
        let conic_c = w00 * inv_det;
        let mean_x = fx * px * rz + cx;
        let mean_y = fy * py * rz + cy;
        // Exact extent of the ellipse where alpha can reach 1/255.
        let extent = min((2.0f32 * (255.0f32 * opacity).ln()).sqrt(), 3.33f32);
        let rx = extent * w00.sqrt();
        let ry = extent * w11.sqrt();
        let tiles_x = (width + 15u32) / 16u32;
        let tiles_y = (height + 15u32) / 16u32;
        let tx0 = clamp((mean_x - rx) / 16.0f32, 0.0f32, f32::cast_from(tiles_x)).floor();
        let tx1 = clamp(
            (mean_x + rx) / 16.0f32 + 1.0f32,
            0.0f32,
            f32::cast_from(tiles_x),
        )
        .floor();
        let ty0 = clamp((mean_y - ry) / 16.0f32, 0.0f32, f32::cast_from(tiles_y)).floor();
        let ty1 = clamp(
            (mean_y + ry) / 16.0f32 + 1.0f32,
            0.0f32,
            f32::cast_from(tiles_y),
        )
        .floor();
        let count = (tx1 - tx0) * (ty1 - ty0);
        if !(count > 0.0f32) {
            break;
        }

        // Colour from spherical harmonics, view direction from the camera centre.
        let (ux, uy, uz, _) = view_dir(cam, mx, my, mz);
        let mut cr = 0.5f32;
        let mut cg = 0.5f32;
        let mut cb = 0.5f32;
        #[unroll]
        for k in 0..active_coeffs {
            let bk = sh_basis(k, ux, uy, uz);
            let (sr, sg, sb) = sh_coeff(sh, sh_rest, g, k, num_coeffs, half_sh);
            cr += bk * sr;
            cg += bk * sg;
            cb += bk * sb;
        }

        rows[t * 10] = mean_x;
        rows[t * 10 + 1] = mean_y;
        rows[t * 10 + 2] = conic_a;
        rows[t * 10 + 3] = conic_b;
        rows[t * 10 + 4] = conic_c;
        rows[t * 10 + 5] = pz;
        rows[t * 10 + 6] = opacity;
        rows[t * 10 + 7] = max(cr, 0.0f32);
        rows[t * 10 + 8] = max(cg, 0.0f32);
        rows[t * 10 + 9] = max(cb, 0.0f32);
        radii[gg * 2] = u32::cast_from(rx.ceil());
        radii[gg * 2 + 1] = u32::cast_from(ry.ceil());
        rects[gg * 2] = u32::cast_from(tx0) | (u32::cast_from(tx1) << 16u32);
        rects[gg * 2 + 1] = u32::cast_from(ty0) | (u32::cast_from(ty1) << 16u32);
        tiles_touched[gg] = u32::cast_from(count);
        depth_keys[gg] = pz.to_bits();
        break;
    }
    sync_cube();
    let mut count = 0usize;
    if first < n as usize {
        count = (n as usize - first) * 10;
    }
    let base = (first + row0 as usize) * 10;
    for i in 0..10usize {
        let idx = i * comptime![PROJECT_CUBE] + t;
        if idx < count {
            proj[base + idx] = rows[idx];
        }
    }
}

/// Gradient of the SH coefficients (`v_sh`, every coefficient; zero past the active degree and
/// for culled Gaussians). One unit per (Gaussian, coefficient) writes that coefficient's three
/// colour channels, so a cube stores one contiguous run of `v_sh`:
/// `d rgb_c / d sh_{k,c} = b_k(dir)` where the forward colour was not clamped to zero, which
/// the stored (clamped) colour in `proj` tells. No SH row is read.
///
/// This replaced a kernel with one unit per Gaussian that moved whole SH rows through shared
/// memory (24 KiB per cube): 1.9 ms on the H100 through CUDA but 10-13 ms through Vulkan
/// (docs/benchmarks/journal.md, 2026-11-26).
#[cube(launch, launch_unchecked)]
pub fn sh_backward_coeffs(
    means: &[f32],
    cam: &[f32],
    tiles_touched: &[u32],
    proj: &[f32],
    v_proj: &[f32],
    v_sh: &mut [f32],
    n: u32,
    row0: u32,
    #[comptime] num_coeffs: u32,
    #[comptime] active_coeffs: u32,
) {
    let i = rust3r_gpu::global_id();
    if i >= (n as usize) * comptime![num_coeffs as usize] {
        terminate!();
    }
    let g = i / comptime![num_coeffs as usize];
    let k = (i % comptime![num_coeffs as usize]) as u32;
    let gg = g + row0 as usize;
    let mut vr = 0.0f32;
    let mut vg = 0.0f32;
    let mut vb = 0.0f32;
    if k < active_coeffs && tiles_touched[gg] != 0u32 {
        let (ux, uy, uz, _) = view_dir(cam, means[g * 3], means[g * 3 + 1], means[g * 3 + 2]);
        let b = sh_basis(k, ux, uy, uz);
        vr = sh_channel_grad(b, proj, v_proj, gg, 0u32);
        vg = sh_channel_grad(b, proj, v_proj, gg, 1u32);
        vb = sh_channel_grad(b, proj, v_proj, gg, 2u32);
    }
    v_sh[i * 3] = vr;
    v_sh[i * 3 + 1] = vg;
    v_sh[i * 3 + 2] = vb;
}

/// `d loss / d sh_{k,c}` from the basis value `b = b_k(dir)`: zero where the forward colour
/// channel `c` was clamped at zero (the stored colour in `proj` tells).
#[cube]
fn sh_channel_grad(b: f32, proj: &[f32], v_proj: &[f32], gg: usize, c: u32) -> f32 {
    let o = gg * 10 + 7 + c as usize;
    select(proj[o] > 0.0f32, b * v_proj[o], 0.0f32)
}

/// Gradient of SH value `col` (coefficient `col / 3`, channel `col % 3`) of chunk-local row
/// `g` (global row `gg` of the projected buffers), bit for bit what [`sh_backward_coeffs`]
/// writes: for consumers that need it once and should not store it (the trainer's fused SH
/// Adam step).
#[cube]
pub fn sh_value_grad(
    means: &[f32],
    cam: &[f32],
    tiles_touched: &[u32],
    proj: &[f32],
    v_proj: &[f32],
    g: usize,
    gg: usize,
    col: u32,
    active_coeffs: u32,
) -> f32 {
    let k = col / 3u32;
    let mut out = 0.0f32;
    if k < active_coeffs && tiles_touched[gg] != 0u32 {
        let (ux, uy, uz, _) = view_dir(cam, means[g * 3], means[g * 3 + 1], means[g * 3 + 2]);
        out = sh_channel_grad(sh_basis(k, ux, uy, uz), proj, v_proj, gg, col - k * 3u32);
    }
    out
}

/// Backward of [`project_forward`] but for the SH coefficients ([`sh_backward_coeffs`]): from
/// per-Gaussian gradients of the projected quantities (`v_proj`, layout [`VPROJ`]) to the
/// parameters (the mean's through the view direction too, reading the visible Gaussians' SH
/// rows), and a per-Gaussian contribution to the camera-pose gradient (`v_cam`, layout
/// [`VCAM`], summed on the host side of the caller).
#[cube(launch, launch_unchecked)]
pub fn project_backward(
    means: &[f32],
    log_scales: &[f32],
    quats: &[f32],
    opacity_logits: &[f32],
    sh: &[f32],
    sh_rest: &[u32],
    cam: &[f32],
    tiles_touched: &[u32],
    proj: &[f32],
    v_proj: &[f32],
    v_means: &mut [f32],
    v_log_scales: &mut [f32],
    v_quats: &mut [f32],
    v_opacity_logits: &mut [f32],
    v_cam: &mut [f32],
    n: u32,
    row0: u32,
    width: u32,
    height: u32,
    #[comptime] num_coeffs: u32,
    #[comptime] active_coeffs: u32,
    #[comptime] antialiased: bool,
    #[comptime] pose_grad: bool,
    #[comptime] half_sh: bool,
) {
    let g = rust3r_gpu::global_id();
    if g >= n as usize {
        terminate!();
    }
    // Chunk-local row `g` of parameters and their gradients; global row `gg` of the
    // projected-Gaussian buffers.
    let gg = g + row0 as usize;
    if tiles_touched[gg] == 0u32 {
        #[unroll]
        for k in 0..3usize {
            v_means[g * 3 + k] = 0.0f32;
            v_log_scales[g * 3 + k] = 0.0f32;
        }
        #[unroll]
        for k in 0..4usize {
            v_quats[g * 4 + k] = 0.0f32;
        }
        v_opacity_logits[g] = 0.0f32;
        if pose_grad {
            #[unroll]
            for k in 0..12usize {
                v_cam[g * 12 + k] = 0.0f32;
            }
        }
        terminate!();
    }
    let v_mean_x = v_proj[gg * 10];
    let v_mean_y = v_proj[gg * 10 + 1];
    let v_ca = v_proj[gg * 10 + 2];
    let v_cb = v_proj[gg * 10 + 3];
    let v_cc = v_proj[gg * 10 + 4];
    let v_depth = v_proj[gg * 10 + 5];
    let v_opacity = v_proj[gg * 10 + 6];
    let (mx, my, mz) = (means[g * 3], means[g * 3 + 1], means[g * 3 + 2]);

    // ---- colour: rgb = max(sum_k b_k(dir) sh_k + 0.5, 0), dir = (m - c) / |m - c| ----
    // The stored colour is zero exactly where the clamp cut the gradient.
    let mut vdx = 0.0f32;
    let mut vdy = 0.0f32;
    let mut vdz = 0.0f32;
    if comptime![active_coeffs > 1] {
        let vsr = select(proj[gg * 10 + 7] > 0.0f32, v_proj[gg * 10 + 7], 0.0f32);
        let vsg = select(proj[gg * 10 + 8] > 0.0f32, v_proj[gg * 10 + 8], 0.0f32);
        let vsb = select(proj[gg * 10 + 9] > 0.0f32, v_proj[gg * 10 + 9], 0.0f32);
        let (ux, uy, uz, inv_dn) = view_dir(cam, mx, my, mz);
        let mut vux = 0.0f32;
        let mut vuy = 0.0f32;
        let mut vuz = 0.0f32;
        #[unroll]
        for k in 1..active_coeffs {
            let (sr, sg, sb) = sh_coeff(sh, sh_rest, g, k, num_coeffs, half_sh);
            let w = vsr * sr + vsg * sg + vsb * sb;
            let (bx, by, bz) = sh_basis_grad(k, ux, uy, uz);
            vux += bx * w;
            vuy += by * w;
            vuz += bz * w;
        }
        let dotu = vux * ux + vuy * uy + vuz * uz;
        vdx = (vux - ux * dotu) * inv_dn;
        vdy = (vuy - uy * dotu) * inv_dn;
        vdz = (vuz - uz * dotu) * inv_dn;
    }

    // ---- recompute forward ----
    let (r00, r01, r02, r10, r11, r12, r20, r21, r22) = camera_rotation(cam);
    let (px, py, pz) = to_camera(cam, mx, my, mz);
    let (fx, fy, cx, cy) = (cam[12], cam[13], cam[14], cam[15]);
    let qw0 = quats[g * 4];
    let qx0 = quats[g * 4 + 1];
    let qy0 = quats[g * 4 + 2];
    let qz0 = quats[g * 4 + 3];
    let qn = (qw0 * qw0 + qx0 * qx0 + qy0 * qy0 + qz0 * qz0).sqrt();
    let qw = qw0 / qn;
    let qx = qx0 / qn;
    let qy = qy0 / qn;
    let qz = qz0 / qn;
    let (a00, a01, a02, a10, a11, a12, a20, a21, a22) = quat_to_rot(qw, qx, qy, qz);
    let sx = log_scales[g * 3].exp();
    let sy = log_scales[g * 3 + 1].exp();
    let sz = log_scales[g * 3 + 2].exp();
    let (m00, m01, m02, m10, m11, m12, m20, m21, m22) =
        scaled_rotation(a00, a01, a02, a10, a11, a12, a20, a21, a22, sx, sy, sz);
    let (s00, s01, s02, s11, s12, s22) = gram(m00, m01, m02, m10, m11, m12, m20, m21, m22);
    // Camera-space covariance C = W Sigma W^T.
    let (c00, c01, c02, c11, c12, c22) = rotate_covariance(
        r00, r01, r02, r10, r11, r12, r20, r21, r22, s00, s01, s02, s11, s12, s22,
    );
    let (lim_x_pos, lim_x_neg, lim_y_pos, lim_y_neg) =
        frustum_limits(width, height, fx, fy, cx, cy);
    let rz = 1.0f32 / pz;
    let ux_raw = px * rz;
    let uy_raw = py * rz;
    let x_clamped = ux_raw < -lim_x_neg || ux_raw > lim_x_pos;
    let y_clamped = uy_raw < -lim_y_neg || uy_raw > lim_y_pos;
    let ucx = clamp(ux_raw, -lim_x_neg, lim_x_pos);
    let ucy = clamp(uy_raw, -lim_y_neg, lim_y_pos);
    let j00 = fx * rz;
    let j02 = -fx * ucx * rz;
    let j11 = fy * rz;
    let j12 = -fy * ucy * rz;
    let u00 = j00 * c00 + j02 * c02;
    let u01 = j00 * c01 + j02 * c12;
    let u02 = j00 * c02 + j02 * c22;
    let u11 = j11 * c11 + j12 * c12;
    let u12 = j11 * c12 + j12 * c22;
    let v00 = u00 * j00 + u02 * j02;
    let v01 = u01 * j11 + u02 * j12;
    let v11 = u11 * j11 + u12 * j12;
    let w00 = v00 + 0.3f32;
    let w11 = v11 + 0.3f32;
    let det = w00 * w11 - v01 * v01;
    let det_orig = v00 * v11 - v01 * v01;
    let inv_det = 1.0f32 / det;
    let qa = w11 * inv_det;
    let qb = -v01 * inv_det;
    let qc = w00 * inv_det;
    let sig = 1.0f32 / (1.0f32 + (-opacity_logits[g]).exp());

    // ---- opacity ----
    let mut comp = 1.0f32;
    if comptime![antialiased] {
        comp = max(det_orig / det, 0.0f32).sqrt();
    }
    v_opacity_logits[g] = v_opacity * comp * sig * (1.0f32 - sig);
    let v_comp = v_opacity * sig;

    // ---- conic -> dilated 2D covariance: dL/dW = -Q G Q, G = [[va, vb/2],[vb/2, vc]] ----
    let g00 = v_ca;
    let g01 = 0.5f32 * v_cb;
    let g11 = v_cc;
    let t00 = g00 * qa + g01 * qb;
    let t01 = g00 * qb + g01 * qc;
    let t10 = g01 * qa + g11 * qb;
    let t11 = g01 * qb + g11 * qc;
    let mut vw00 = -(qa * t00 + qb * t10);
    let mut vw01 = -(qa * t01 + qb * t11);
    let mut vw11 = -(qb * t01 + qc * t11);
    if comptime![antialiased] {
        if det_orig > 0.0f32 && comp > 0.0f32 {
            // comp = sqrt(det_o / det_b): dcomp/dA = comp/2 (A_o^-1 - A_b^-1) (symmetric form).
            let io00 = v11 / det_orig;
            let io01 = -v01 / det_orig;
            let io11 = v00 / det_orig;
            let h = 0.5f32 * comp * v_comp;
            vw00 += h * (io00 - qa);
            vw01 += h * (io01 - qb);
            vw11 += h * (io11 - qc);
        }
    }
    // V (symmetric, full-matrix convention): off-diagonal entries each carry vw01.
    // dL/dC = J^T V J ; dL/dJ = 2 V J C.
    // J^T V J with J rows (j00, 0, j02), (0, j11, j12):
    let vj00 = vw00 * j00;
    let vj02 = vw00 * j02 + vw01 * j12;
    let vj10 = vw01 * j00;
    let vj11 = vw11 * j11;
    let vj12 = vw01 * j02 + vw11 * j12;
    let vj01 = vw01 * j11;
    // VJ (2x3) = [[vj00, vj01, vj02], [vj10, vj11, vj12]]
    let vc00 = j00 * vj00;
    let vc01 = j00 * vj01;
    let vc02 = j00 * vj02;
    let vc11 = j11 * vj11;
    let vc12 = j11 * vj12;
    let vc22 = j02 * vj02 + j12 * vj12;
    // dL/dJ = 2 (VJ) C ; only entries (0,0), (0,2), (1,1), (1,2) of J are live.
    let dj00 = 2.0f32 * (vj00 * c00 + vj01 * c01 + vj02 * c02);
    let dj02 = 2.0f32 * (vj00 * c02 + vj01 * c12 + vj02 * c22);
    let dj11 = 2.0f32 * (vj10 * c01 + vj11 * c11 + vj12 * c12);
    let dj12 = 2.0f32 * (vj10 * c02 + vj11 * c12 + vj12 * c22);

    // ---- camera-space mean ----
    let mut vpx = fx * rz * v_mean_x;
    let mut vpy = fy * rz * v_mean_y;
    let mut vpz = -(fx * px * v_mean_x + fy * py * v_mean_y) * rz * rz + v_depth;
    // J00 = fx/z, J11 = fy/z
    vpz += -fx * rz * rz * dj00 - fy * rz * rz * dj11;
    // J02 = -fx * u / z with u = clamp(x/z)
    if x_clamped {
        vpz += fx * ucx * rz * rz * dj02;
    } else {
        vpx += -fx * rz * rz * dj02;
        vpz += 2.0f32 * fx * px * rz * rz * rz * dj02;
    }
    if y_clamped {
        vpz += fy * ucy * rz * rz * dj12;
    } else {
        vpy += -fy * rz * rz * dj12;
        vpz += 2.0f32 * fy * py * rz * rz * rz * dj12;
    }

    // ---- C = W Sigma W^T: dL/dSigma = W^T VC W, dL/dW += 2 VC W Sigma ----
    // VC symmetric (full-matrix convention)
    let e00 = vc00 * r00 + vc01 * r10 + vc02 * r20;
    let e01 = vc00 * r01 + vc01 * r11 + vc02 * r21;
    let e02 = vc00 * r02 + vc01 * r12 + vc02 * r22;
    let e10 = vc01 * r00 + vc11 * r10 + vc12 * r20;
    let e11 = vc01 * r01 + vc11 * r11 + vc12 * r21;
    let e12 = vc01 * r02 + vc11 * r12 + vc12 * r22;
    let e20 = vc02 * r00 + vc12 * r10 + vc22 * r20;
    let e21 = vc02 * r01 + vc12 * r11 + vc22 * r21;
    let e22 = vc02 * r02 + vc12 * r12 + vc22 * r22;
    // E = VC W ; dSigma = W^T E
    let vs00 = r00 * e00 + r10 * e10 + r20 * e20;
    let vs01 = r00 * e01 + r10 * e11 + r20 * e21;
    let vs02 = r00 * e02 + r10 * e12 + r20 * e22;
    let vs11 = r01 * e01 + r11 * e11 + r21 * e21;
    let vs12 = r01 * e02 + r11 * e12 + r21 * e22;
    let vs22 = r02 * e02 + r12 * e12 + r22 * e22;
    // dL/dW = 2 E Sigma
    let mut vr00 = 2.0f32 * (e00 * s00 + e01 * s01 + e02 * s02);
    let mut vr01 = 2.0f32 * (e00 * s01 + e01 * s11 + e02 * s12);
    let mut vr02 = 2.0f32 * (e00 * s02 + e01 * s12 + e02 * s22);
    let mut vr10 = 2.0f32 * (e10 * s00 + e11 * s01 + e12 * s02);
    let mut vr11 = 2.0f32 * (e10 * s01 + e11 * s11 + e12 * s12);
    let mut vr12 = 2.0f32 * (e10 * s02 + e11 * s12 + e12 * s22);
    let mut vr20 = 2.0f32 * (e20 * s00 + e21 * s01 + e22 * s02);
    let mut vr21 = 2.0f32 * (e20 * s01 + e21 * s11 + e22 * s12);
    let mut vr22 = 2.0f32 * (e20 * s02 + e21 * s12 + e22 * s22);
    // mean_c = W m + t
    vr00 += vpx * mx;
    vr01 += vpx * my;
    vr02 += vpx * mz;
    vr10 += vpy * mx;
    vr11 += vpy * my;
    vr12 += vpy * mz;
    vr20 += vpz * mx;
    vr21 += vpz * my;
    vr22 += vpz * mz;
    let mut vtx = vpx;
    let mut vty = vpy;
    let mut vtz = vpz;
    let mut vmx = r00 * vpx + r10 * vpy + r20 * vpz;
    let mut vmy = r01 * vpx + r11 * vpy + r21 * vpz;
    let mut vmz = r02 * vpx + r12 * vpy + r22 * vpz;

    // ---- Sigma = M M^T: dL/dM = 2 VS M ----
    let vm00 = 2.0f32 * (vs00 * m00 + vs01 * m10 + vs02 * m20);
    let vm01 = 2.0f32 * (vs00 * m01 + vs01 * m11 + vs02 * m21);
    let vm02 = 2.0f32 * (vs00 * m02 + vs01 * m12 + vs02 * m22);
    let vm10 = 2.0f32 * (vs01 * m00 + vs11 * m10 + vs12 * m20);
    let vm11 = 2.0f32 * (vs01 * m01 + vs11 * m11 + vs12 * m21);
    let vm12 = 2.0f32 * (vs01 * m02 + vs11 * m12 + vs12 * m22);
    let vm20 = 2.0f32 * (vs02 * m00 + vs12 * m10 + vs22 * m20);
    let vm21 = 2.0f32 * (vs02 * m01 + vs12 * m11 + vs22 * m21);
    let vm22 = 2.0f32 * (vs02 * m02 + vs12 * m12 + vs22 * m22);
    // M = A S: dA = dM S ; ds_j = sum_i dM_ij A_ij
    v_log_scales[g * 3] = (vm00 * a00 + vm10 * a10 + vm20 * a20) * sx;
    v_log_scales[g * 3 + 1] = (vm01 * a01 + vm11 * a11 + vm21 * a21) * sy;
    v_log_scales[g * 3 + 2] = (vm02 * a02 + vm12 * a12 + vm22 * a22) * sz;
    let va00 = vm00 * sx;
    let va01 = vm01 * sy;
    let va02 = vm02 * sz;
    let va10 = vm10 * sx;
    let va11 = vm11 * sy;
    let va12 = vm12 * sz;
    let va20 = vm20 * sx;
    let va21 = vm21 * sy;
    let va22 = vm22 * sz;
    // rotation from the unit quaternion
    let gw = 2.0f32 * (qx * (va21 - va12) + qy * (va02 - va20) + qz * (va10 - va01));
    let gx = 2.0f32
        * (-2.0f32 * qx * (va11 + va22)
            + qy * (va10 + va01)
            + qz * (va20 + va02)
            + qw * (va21 - va12));
    let gy = 2.0f32
        * (qx * (va10 + va01) - 2.0f32 * qy * (va00 + va22)
            + qz * (va21 + va12)
            + qw * (va02 - va20));
    let gz = 2.0f32
        * (qx * (va20 + va02) + qy * (va21 + va12) - 2.0f32 * qz * (va00 + va11)
            + qw * (va10 - va01));
    let dotq = gw * qw + gx * qx + gy * qy + gz * qz;
    v_quats[g * 4] = (gw - qw * dotq) / qn;
    v_quats[g * 4 + 1] = (gx - qx * dotq) / qn;
    v_quats[g * 4 + 2] = (gy - qy * dotq) / qn;
    v_quats[g * 4 + 3] = (gz - qz * dotq) / qn;

    vmx += vdx;
    vmy += vdy;
    vmz += vdz;
    // camera centre c = -W^T t: dL/dc = -v_d; dc_i/dW_ji = -t_j, dc_i/dt_j = -W_ji
    let vcx = -vdx;
    let vcy = -vdy;
    let vcz = -vdz;
    let t0 = cam[9];
    let t1 = cam[10];
    let t2 = cam[11];
    vr00 += -vcx * t0;
    vr10 += -vcx * t1;
    vr20 += -vcx * t2;
    vr01 += -vcy * t0;
    vr11 += -vcy * t1;
    vr21 += -vcy * t2;
    vr02 += -vcz * t0;
    vr12 += -vcz * t1;
    vr22 += -vcz * t2;
    vtx += -(r00 * vcx + r01 * vcy + r02 * vcz);
    vty += -(r10 * vcx + r11 * vcy + r12 * vcz);
    vtz += -(r20 * vcx + r21 * vcy + r22 * vcz);

    v_means[g * 3] = vmx;
    v_means[g * 3 + 1] = vmy;
    v_means[g * 3 + 2] = vmz;
    if pose_grad {
        v_cam[g * 12] = vr00;
        v_cam[g * 12 + 1] = vr01;
        v_cam[g * 12 + 2] = vr02;
        v_cam[g * 12 + 3] = vr10;
        v_cam[g * 12 + 4] = vr11;
        v_cam[g * 12 + 5] = vr12;
        v_cam[g * 12 + 6] = vr20;
        v_cam[g * 12 + 7] = vr21;
        v_cam[g * 12 + 8] = vr22;
        v_cam[g * 12 + 9] = vtx;
        v_cam[g * 12 + 10] = vty;
        v_cam[g * 12 + 11] = vtz;
    }
}
