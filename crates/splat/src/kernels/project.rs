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
// / b`, `x = x op y`, nested `if`s and float literals (no `div_ceil`, ranges or std constants).
// A `#[cube]` function's expansion takes the scope as well: seven arguments need the allow.
#![allow(
    clippy::manual_div_ceil,
    clippy::assign_op_pattern,
    clippy::collapsible_if,
    clippy::manual_range_contains,
    clippy::excessive_precision
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

/// The launch arguments both projection passes ([`project_forward`], [`project_backward`])
/// read: one chunk of Gaussian parameters (rows `row0..row0 + n` of the scene's per-Gaussian
/// outputs), the camera block and the image size.
#[derive(CubeType, CubeLaunch)]
pub struct ProjectArgs {
    /// `[n][3]`.
    pub means: Box<[f32]>,
    /// `[n][3]`.
    pub log_scales: Box<[f32]>,
    /// `[n][4]`, (w, x, y, z), not necessarily unit.
    pub quats: Box<[f32]>,
    pub opacity_logits: Box<[f32]>,
    /// SH coefficients, or their DC terms with `half_sh` (see [`sh_coeff`]).
    pub sh: Box<[f32]>,
    /// The higher SH orders as half floats with `half_sh` (a placeholder otherwise).
    pub sh_rest: Box<[u32]>,
    /// The camera block (layout in the module documentation).
    pub cam: Box<[f32]>,
    pub n: u32,
    pub row0: u32,
    pub width: u32,
    pub height: u32,
}

/// What [`project_forward`] writes, per Gaussian by global row.
#[derive(CubeType, CubeLaunch)]
pub struct ProjectOutputs {
    /// [`PROJ`] floats per Gaussian.
    pub proj: Box<[f32]>,
    /// Pixel radii (x, y); zero when culled.
    pub radii: Box<[u32]>,
    /// Tile rectangle: x0 | x1 << 16, y0 | y1 << 16.
    pub rects: Box<[u32]>,
    /// Tiles touched; zero when culled.
    pub tiles_touched: Box<[u32]>,
    /// Depth sort keys (the bits of the camera-space depth; culled: all ones).
    pub depth_keys: Box<[u32]>,
}

/// What [`project_backward`] reads from the forward and rasterizer passes (by global row) and
/// writes (by chunk row; `v_cam` only with `pose_grad`).
#[derive(CubeType, CubeLaunch)]
pub struct ProjectGradArgs {
    pub tiles_touched: Box<[u32]>,
    pub proj: Box<[f32]>,
    /// Gradients of the projected quantities ([`VPROJ`] floats per Gaussian).
    pub v_proj: Box<[f32]>,
    pub v_means: Box<[f32]>,
    pub v_log_scales: Box<[f32]>,
    pub v_quats: Box<[f32]>,
    pub v_opacity_logits: Box<[f32]>,
    /// Per-Gaussian camera-pose gradient rows ([`VCAM`] floats each).
    pub v_cam: Box<[f32]>,
}

/// A Gaussian's mean in the camera frame, with the camera's rotation (row-major) and
/// intrinsics: what both projection passes read first.
#[derive(CubeType, Clone, Copy)]
struct CameraPoint {
    r00: f32,
    r01: f32,
    r02: f32,
    r10: f32,
    r11: f32,
    r12: f32,
    r20: f32,
    r21: f32,
    r22: f32,
    px: f32,
    py: f32,
    pz: f32,
    fx: f32,
    fy: f32,
    cx: f32,
    cy: f32,
}

/// The world point `(mx, my, mz)` seen from the camera block.
#[cube]
fn camera_point(cam: &[f32], mx: f32, my: f32, mz: f32) -> CameraPoint {
    let (r00, r01, r02, r10, r11, r12, r20, r21, r22) = camera_rotation(cam);
    let (px, py, pz) = to_camera(cam, mx, my, mz);
    let (fx, fy, cx, cy) = (cam[12], cam[13], cam[14], cam[15]);
    CameraPoint {
        r00,
        r01,
        r02,
        r10,
        r11,
        r12,
        r20,
        r21,
        r22,
        px,
        py,
        pz,
        fx,
        fy,
        cx,
        cy,
    }
}

/// A Gaussian's quaternion as stored, and its norm.
#[derive(CubeType, Clone, Copy)]
struct Quat {
    w: f32,
    x: f32,
    y: f32,
    z: f32,
    norm: f32,
}

#[cube]
fn load_quat(quats: &[f32], g: usize) -> Quat {
    let w = quats[g * 4];
    let x = quats[g * 4 + 1];
    let y = quats[g * 4 + 2];
    let z = quats[g * 4 + 3];
    let norm = (w * w + x * x + y * y + z * z).sqrt();
    Quat { w, x, y, z, norm }
}

/// The covariance set-up both projection passes compute: the unit quaternion, its rotation
/// `A`, the scales, `M = A S`, the world covariance `Sigma = M M^T` (upper triangle), the
/// camera-space covariance `C = W Sigma W^T` and the frustum clamp limits.
#[derive(CubeType, Clone, Copy)]
struct Covariance {
    qw: f32,
    qx: f32,
    qy: f32,
    qz: f32,
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
    m00: f32,
    m01: f32,
    m02: f32,
    m10: f32,
    m11: f32,
    m12: f32,
    m20: f32,
    m21: f32,
    m22: f32,
    s00: f32,
    s01: f32,
    s02: f32,
    s11: f32,
    s12: f32,
    s22: f32,
    c00: f32,
    c01: f32,
    c02: f32,
    c11: f32,
    c12: f32,
    c22: f32,
    lim_x_pos: f32,
    lim_x_neg: f32,
    lim_y_pos: f32,
    lim_y_neg: f32,
}

#[cube]
fn covariance(
    log_scales: &[f32],
    q: &Quat,
    p: &CameraPoint,
    g: usize,
    width: u32,
    height: u32,
) -> Covariance {
    let qw = q.w / q.norm;
    let qx = q.x / q.norm;
    let qy = q.y / q.norm;
    let qz = q.z / q.norm;
    let (a00, a01, a02, a10, a11, a12, a20, a21, a22) = quat_to_rot(qw, qx, qy, qz);
    let sx = log_scales[g * 3].exp();
    let sy = log_scales[g * 3 + 1].exp();
    let sz = log_scales[g * 3 + 2].exp();
    let (m00, m01, m02, m10, m11, m12, m20, m21, m22) =
        scaled_rotation(a00, a01, a02, a10, a11, a12, a20, a21, a22, sx, sy, sz);
    let (s00, s01, s02, s11, s12, s22) = gram(m00, m01, m02, m10, m11, m12, m20, m21, m22);
    let (c00, c01, c02, c11, c12, c22) = rotate_covariance(
        p.r00, p.r01, p.r02, p.r10, p.r11, p.r12, p.r20, p.r21, p.r22, s00, s01, s02, s11, s12, s22,
    );
    let (lim_x_pos, lim_x_neg, lim_y_pos, lim_y_neg) =
        frustum_limits(width, height, p.fx, p.fy, p.cx, p.cy);
    Covariance {
        qw,
        qx,
        qy,
        qz,
        a00,
        a01,
        a02,
        a10,
        a11,
        a12,
        a20,
        a21,
        a22,
        sx,
        sy,
        sz,
        m00,
        m01,
        m02,
        m10,
        m11,
        m12,
        m20,
        m21,
        m22,
        s00,
        s01,
        s02,
        s11,
        s12,
        s22,
        c00,
        c01,
        c02,
        c11,
        c12,
        c22,
        lim_x_pos,
        lim_x_neg,
        lim_y_pos,
        lim_y_neg,
    }
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
    args: ProjectArgs,
    mut out: ProjectOutputs,
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
    let gg = g + args.row0 as usize;
    let mut rows = Shared::<[f32]>::new_slice(comptime![PROJECT_CUBE * 10]);
    #[unroll]
    for k in 0..10usize {
        rows[t * 10 + k] = 0.0f32;
    }
    // One pass; `break` leaves a culled Gaussian with the defaults.
    loop {
        if g >= args.n as usize {
            break;
        }
        // Defaults: culled.
        out.radii[gg * 2] = 0u32;
        out.radii[gg * 2 + 1] = 0u32;
        out.rects[gg * 2] = 0u32;
        out.rects[gg * 2 + 1] = 0u32;
        out.tiles_touched[gg] = 0u32;
        // Culled Gaussians sort after every visible one.
        out.depth_keys[gg] = 4294967295u32;

        let (mx, my, mz) = (
            args.means[g * 3],
            args.means[g * 3 + 1],
            args.means[g * 3 + 2],
        );
        let p = camera_point(&args.cam, mx, my, mz);
        if p.pz < args.cam[22] || p.pz > args.cam[23] {
            break;
        }

        // 3D covariance: M = R S, Sigma = M M^T; camera-space covariance C = W Sigma W^T.
        let q = load_quat(&args.quats, g);
        if !(q.norm > 0.0f32) {
            break;
        }
        let cv = covariance(&args.log_scales, &q, &p, g, args.width, args.height);

        // Jacobian of the perspective projection, with the frustum clamp.
        let rz = 1.0f32 / p.pz;
        let tx = p.pz * clamp(p.px * rz, -cv.lim_x_neg, cv.lim_x_pos);
        let ty = p.pz * clamp(p.py * rz, -cv.lim_y_neg, cv.lim_y_pos);
        let j00 = p.fx * rz;
        let j02 = -p.fx * tx * rz * rz;
        let j11 = p.fy * rz;
        let j12 = -p.fy * ty * rz * rz;
        // cov2d = J C J^T with J = [[j00, 0, j02], [0, j11, j12]].
        let u00 = j00 * cv.c00 + j02 * cv.c02;
        let u01 = j00 * cv.c01 + j02 * cv.c12;
        let u02 = j00 * cv.c02 + j02 * cv.c22;
        let u10 = j11 * cv.c01 + j12 * cv.c02;
        let u11 = j11 * cv.c11 + j12 * cv.c12;
        let u12 = j11 * cv.c12 + j12 * cv.c22;
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
        let mut opacity = 1.0f32 / (1.0f32 + (-args.opacity_logits[g]).exp());
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
        let mean_x = p.fx * p.px * rz + p.cx;
        let mean_y = p.fy * p.py * rz + p.cy;
        // Exact extent of the ellipse where alpha can reach 1/255.
        let extent = min((2.0f32 * (255.0f32 * opacity).ln()).sqrt(), 3.33f32);
        let rx = extent * w00.sqrt();
        let ry = extent * w11.sqrt();
        let tiles_x = (args.width + 15u32) / 16u32;
        let tiles_y = (args.height + 15u32) / 16u32;
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
        let (ux, uy, uz, _) = view_dir(&args.cam, mx, my, mz);
        let mut cr = 0.5f32;
        let mut cg = 0.5f32;
        let mut cb = 0.5f32;
        #[unroll]
        for k in 0..active_coeffs {
            let bk = sh_basis(k, ux, uy, uz);
            let (sr, sg, sb) = sh_coeff(&args.sh, &args.sh_rest, g, k, num_coeffs, half_sh);
            cr += bk * sr;
            cg += bk * sg;
            cb += bk * sb;
        }

        rows[t * 10] = mean_x;
        rows[t * 10 + 1] = mean_y;
        rows[t * 10 + 2] = conic_a;
        rows[t * 10 + 3] = conic_b;
        rows[t * 10 + 4] = conic_c;
        rows[t * 10 + 5] = p.pz;
        rows[t * 10 + 6] = opacity;
        rows[t * 10 + 7] = max(cr, 0.0f32);
        rows[t * 10 + 8] = max(cg, 0.0f32);
        rows[t * 10 + 9] = max(cb, 0.0f32);
        out.radii[gg * 2] = u32::cast_from(rx.ceil());
        out.radii[gg * 2 + 1] = u32::cast_from(ry.ceil());
        out.rects[gg * 2] = u32::cast_from(tx0) | (u32::cast_from(tx1) << 16u32);
        out.rects[gg * 2 + 1] = u32::cast_from(ty0) | (u32::cast_from(ty1) << 16u32);
        out.tiles_touched[gg] = u32::cast_from(count);
        out.depth_keys[gg] = p.pz.to_bits();
        break;
    }
    sync_cube();
    let mut count = 0usize;
    if first < args.n as usize {
        count = (args.n as usize - first) * 10;
    }
    let base = (first + args.row0 as usize) * 10;
    for i in 0..10usize {
        let idx = i * comptime![PROJECT_CUBE] + t;
        if idx < count {
            out.proj[base + idx] = rows[idx];
        }
    }
}

/// What the SH coefficients' gradient reads ([`sh_backward_coeffs`], [`sh_value_grad`] and
/// the trainer's fused SH Adam step), in binding order: one chunk's means, and by global row
/// the render's camera block, tiles touched, projected Gaussians and their gradient.
#[derive(CubeType, CubeLaunch)]
pub struct ShGradArgs {
    pub means: Box<[f32]>,
    pub cam: Box<[f32]>,
    pub tiles_touched: Box<[u32]>,
    pub proj: Box<[f32]>,
    /// Gradients of the projected quantities ([`VPROJ`] floats per Gaussian).
    pub v_proj: Box<[f32]>,
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
    inputs: ShGradArgs,
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
    if k < active_coeffs && inputs.tiles_touched[gg] != 0u32 {
        let (ux, uy, uz, _) = view_dir(
            &inputs.cam,
            inputs.means[g * 3],
            inputs.means[g * 3 + 1],
            inputs.means[g * 3 + 2],
        );
        let b = sh_basis(k, ux, uy, uz);
        vr = sh_channel_grad(b, &inputs.proj, &inputs.v_proj, gg, 0u32);
        vg = sh_channel_grad(b, &inputs.proj, &inputs.v_proj, gg, 1u32);
        vb = sh_channel_grad(b, &inputs.proj, &inputs.v_proj, gg, 2u32);
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
    inputs: &ShGradArgs,
    g: usize,
    gg: usize,
    col: u32,
    active_coeffs: u32,
) -> f32 {
    let k = col / 3u32;
    let mut out = 0.0f32;
    if k < active_coeffs && inputs.tiles_touched[gg] != 0u32 {
        let (ux, uy, uz, _) = view_dir(
            &inputs.cam,
            inputs.means[g * 3],
            inputs.means[g * 3 + 1],
            inputs.means[g * 3 + 2],
        );
        out = sh_channel_grad(
            sh_basis(k, ux, uy, uz),
            &inputs.proj,
            &inputs.v_proj,
            gg,
            col - k * 3u32,
        );
    }
    out
}

/// Backward of [`project_forward`] but for the SH coefficients ([`sh_backward_coeffs`]): from
/// per-Gaussian gradients of the projected quantities (`v_proj`, layout [`VPROJ`]) to the
/// parameters (the mean's through the view direction too, reading the visible Gaussians' SH
/// rows), and a per-Gaussian contribution to the camera-pose gradient (`v_cam`, layout
/// [`VCAM`], summed on the host side of the caller).
#[cube(launch, launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn project_backward(
    args: ProjectArgs,
    mut grads: ProjectGradArgs,
    #[comptime] num_coeffs: u32,
    #[comptime] active_coeffs: u32,
    #[comptime] antialiased: bool,
    #[comptime] pose_grad: bool,
    #[comptime] half_sh: bool,
) {
    let g = rust3r_gpu::global_id();
    if g >= args.n as usize {
        terminate!();
    }
    // Chunk-local row `g` of parameters and their gradients; global row `gg` of the
    // projected-Gaussian buffers.
    let gg = g + args.row0 as usize;
    if grads.tiles_touched[gg] == 0u32 {
        #[unroll]
        for k in 0..3usize {
            grads.v_means[g * 3 + k] = 0.0f32;
            grads.v_log_scales[g * 3 + k] = 0.0f32;
        }
        #[unroll]
        for k in 0..4usize {
            grads.v_quats[g * 4 + k] = 0.0f32;
        }
        grads.v_opacity_logits[g] = 0.0f32;
        if pose_grad {
            #[unroll]
            for k in 0..12usize {
                grads.v_cam[g * 12 + k] = 0.0f32;
            }
        }
        terminate!();
    }
    let v_mean_x = grads.v_proj[gg * 10];
    let v_mean_y = grads.v_proj[gg * 10 + 1];
    let v_ca = grads.v_proj[gg * 10 + 2];
    let v_cb = grads.v_proj[gg * 10 + 3];
    let v_cc = grads.v_proj[gg * 10 + 4];
    let v_depth = grads.v_proj[gg * 10 + 5];
    let v_opacity = grads.v_proj[gg * 10 + 6];
    let (mx, my, mz) = (
        args.means[g * 3],
        args.means[g * 3 + 1],
        args.means[g * 3 + 2],
    );

    // ---- colour: rgb = max(sum_k b_k(dir) sh_k + 0.5, 0), dir = (m - c) / |m - c| ----
    // The stored colour is zero exactly where the clamp cut the gradient.
    let mut vdx = 0.0f32;
    let mut vdy = 0.0f32;
    let mut vdz = 0.0f32;
    if comptime![active_coeffs > 1] {
        let vsr = select(
            grads.proj[gg * 10 + 7] > 0.0f32,
            grads.v_proj[gg * 10 + 7],
            0.0f32,
        );
        let vsg = select(
            grads.proj[gg * 10 + 8] > 0.0f32,
            grads.v_proj[gg * 10 + 8],
            0.0f32,
        );
        let vsb = select(
            grads.proj[gg * 10 + 9] > 0.0f32,
            grads.v_proj[gg * 10 + 9],
            0.0f32,
        );
        let (ux, uy, uz, inv_dn) = view_dir(&args.cam, mx, my, mz);
        let mut vux = 0.0f32;
        let mut vuy = 0.0f32;
        let mut vuz = 0.0f32;
        #[unroll]
        for k in 1..active_coeffs {
            let (sr, sg, sb) = sh_coeff(&args.sh, &args.sh_rest, g, k, num_coeffs, half_sh);
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
    let p = camera_point(&args.cam, mx, my, mz);
    let q = load_quat(&args.quats, g);
    let cv = covariance(&args.log_scales, &q, &p, g, args.width, args.height);
    let rz = 1.0f32 / p.pz;
    let ux_raw = p.px * rz;
    let uy_raw = p.py * rz;
    let x_clamped = ux_raw < -cv.lim_x_neg || ux_raw > cv.lim_x_pos;
    let y_clamped = uy_raw < -cv.lim_y_neg || uy_raw > cv.lim_y_pos;
    let ucx = clamp(ux_raw, -cv.lim_x_neg, cv.lim_x_pos);
    let ucy = clamp(uy_raw, -cv.lim_y_neg, cv.lim_y_pos);
    let j00 = p.fx * rz;
    let j02 = -p.fx * ucx * rz;
    let j11 = p.fy * rz;
    let j12 = -p.fy * ucy * rz;
    let u00 = j00 * cv.c00 + j02 * cv.c02;
    let u01 = j00 * cv.c01 + j02 * cv.c12;
    let u02 = j00 * cv.c02 + j02 * cv.c22;
    let u11 = j11 * cv.c11 + j12 * cv.c12;
    let u12 = j11 * cv.c12 + j12 * cv.c22;
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
    let sig = 1.0f32 / (1.0f32 + (-args.opacity_logits[g]).exp());

    // ---- opacity ----
    let mut comp = 1.0f32;
    if comptime![antialiased] {
        comp = max(det_orig / det, 0.0f32).sqrt();
    }
    grads.v_opacity_logits[g] = v_opacity * comp * sig * (1.0f32 - sig);
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
    let dj00 = 2.0f32 * (vj00 * cv.c00 + vj01 * cv.c01 + vj02 * cv.c02);
    let dj02 = 2.0f32 * (vj00 * cv.c02 + vj01 * cv.c12 + vj02 * cv.c22);
    let dj11 = 2.0f32 * (vj10 * cv.c01 + vj11 * cv.c11 + vj12 * cv.c12);
    let dj12 = 2.0f32 * (vj10 * cv.c02 + vj11 * cv.c12 + vj12 * cv.c22);

    // ---- camera-space mean ----
    let mut vpx = p.fx * rz * v_mean_x;
    let mut vpy = p.fy * rz * v_mean_y;
    let mut vpz = -(p.fx * p.px * v_mean_x + p.fy * p.py * v_mean_y) * rz * rz + v_depth;
    // J00 = fx/z, J11 = fy/z
    vpz += -p.fx * rz * rz * dj00 - p.fy * rz * rz * dj11;
    // J02 = -fx * u / z with u = clamp(x/z)
    if x_clamped {
        vpz += p.fx * ucx * rz * rz * dj02;
    } else {
        vpx += -p.fx * rz * rz * dj02;
        vpz += 2.0f32 * p.fx * p.px * rz * rz * rz * dj02;
    }
    if y_clamped {
        vpz += p.fy * ucy * rz * rz * dj12;
    } else {
        vpy += -p.fy * rz * rz * dj12;
        vpz += 2.0f32 * p.fy * p.py * rz * rz * rz * dj12;
    }

    // ---- C = W Sigma W^T: dL/dSigma = W^T VC W, dL/dW += 2 VC W Sigma ----
    // VC symmetric (full-matrix convention)
    let e00 = vc00 * p.r00 + vc01 * p.r10 + vc02 * p.r20;
    let e01 = vc00 * p.r01 + vc01 * p.r11 + vc02 * p.r21;
    let e02 = vc00 * p.r02 + vc01 * p.r12 + vc02 * p.r22;
    let e10 = vc01 * p.r00 + vc11 * p.r10 + vc12 * p.r20;
    let e11 = vc01 * p.r01 + vc11 * p.r11 + vc12 * p.r21;
    let e12 = vc01 * p.r02 + vc11 * p.r12 + vc12 * p.r22;
    let e20 = vc02 * p.r00 + vc12 * p.r10 + vc22 * p.r20;
    let e21 = vc02 * p.r01 + vc12 * p.r11 + vc22 * p.r21;
    let e22 = vc02 * p.r02 + vc12 * p.r12 + vc22 * p.r22;
    // E = VC W ; dSigma = W^T E
    let vs00 = p.r00 * e00 + p.r10 * e10 + p.r20 * e20;
    let vs01 = p.r00 * e01 + p.r10 * e11 + p.r20 * e21;
    let vs02 = p.r00 * e02 + p.r10 * e12 + p.r20 * e22;
    let vs11 = p.r01 * e01 + p.r11 * e11 + p.r21 * e21;
    let vs12 = p.r01 * e02 + p.r11 * e12 + p.r21 * e22;
    let vs22 = p.r02 * e02 + p.r12 * e12 + p.r22 * e22;
    // dL/dW = 2 E Sigma
    let mut vr00 = 2.0f32 * (e00 * cv.s00 + e01 * cv.s01 + e02 * cv.s02);
    let mut vr01 = 2.0f32 * (e00 * cv.s01 + e01 * cv.s11 + e02 * cv.s12);
    let mut vr02 = 2.0f32 * (e00 * cv.s02 + e01 * cv.s12 + e02 * cv.s22);
    let mut vr10 = 2.0f32 * (e10 * cv.s00 + e11 * cv.s01 + e12 * cv.s02);
    let mut vr11 = 2.0f32 * (e10 * cv.s01 + e11 * cv.s11 + e12 * cv.s12);
    let mut vr12 = 2.0f32 * (e10 * cv.s02 + e11 * cv.s12 + e12 * cv.s22);
    let mut vr20 = 2.0f32 * (e20 * cv.s00 + e21 * cv.s01 + e22 * cv.s02);
    let mut vr21 = 2.0f32 * (e20 * cv.s01 + e21 * cv.s11 + e22 * cv.s12);
    let mut vr22 = 2.0f32 * (e20 * cv.s02 + e21 * cv.s12 + e22 * cv.s22);
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
    let mut vmx = p.r00 * vpx + p.r10 * vpy + p.r20 * vpz;
    let mut vmy = p.r01 * vpx + p.r11 * vpy + p.r21 * vpz;
    let mut vmz = p.r02 * vpx + p.r12 * vpy + p.r22 * vpz;

    // ---- Sigma = M M^T: dL/dM = 2 VS M ----
    let vm00 = 2.0f32 * (vs00 * cv.m00 + vs01 * cv.m10 + vs02 * cv.m20);
    let vm01 = 2.0f32 * (vs00 * cv.m01 + vs01 * cv.m11 + vs02 * cv.m21);
    let vm02 = 2.0f32 * (vs00 * cv.m02 + vs01 * cv.m12 + vs02 * cv.m22);
    let vm10 = 2.0f32 * (vs01 * cv.m00 + vs11 * cv.m10 + vs12 * cv.m20);
    let vm11 = 2.0f32 * (vs01 * cv.m01 + vs11 * cv.m11 + vs12 * cv.m21);
    let vm12 = 2.0f32 * (vs01 * cv.m02 + vs11 * cv.m12 + vs12 * cv.m22);
    let vm20 = 2.0f32 * (vs02 * cv.m00 + vs12 * cv.m10 + vs22 * cv.m20);
    let vm21 = 2.0f32 * (vs02 * cv.m01 + vs12 * cv.m11 + vs22 * cv.m21);
    let vm22 = 2.0f32 * (vs02 * cv.m02 + vs12 * cv.m12 + vs22 * cv.m22);
    // M = A S: dA = dM S ; ds_j = sum_i dM_ij A_ij
    grads.v_log_scales[g * 3] = (vm00 * cv.a00 + vm10 * cv.a10 + vm20 * cv.a20) * cv.sx;
    grads.v_log_scales[g * 3 + 1] = (vm01 * cv.a01 + vm11 * cv.a11 + vm21 * cv.a21) * cv.sy;
    grads.v_log_scales[g * 3 + 2] = (vm02 * cv.a02 + vm12 * cv.a12 + vm22 * cv.a22) * cv.sz;
    let va00 = vm00 * cv.sx;
    let va01 = vm01 * cv.sy;
    let va02 = vm02 * cv.sz;
    let va10 = vm10 * cv.sx;
    let va11 = vm11 * cv.sy;
    let va12 = vm12 * cv.sz;
    let va20 = vm20 * cv.sx;
    let va21 = vm21 * cv.sy;
    let va22 = vm22 * cv.sz;
    // rotation from the unit quaternion
    let gw = 2.0f32 * (cv.qx * (va21 - va12) + cv.qy * (va02 - va20) + cv.qz * (va10 - va01));
    let gx = 2.0f32
        * (-2.0f32 * cv.qx * (va11 + va22)
            + cv.qy * (va10 + va01)
            + cv.qz * (va20 + va02)
            + cv.qw * (va21 - va12));
    let gy = 2.0f32
        * (cv.qx * (va10 + va01) - 2.0f32 * cv.qy * (va00 + va22)
            + cv.qz * (va21 + va12)
            + cv.qw * (va02 - va20));
    let gz = 2.0f32
        * (cv.qx * (va20 + va02) + cv.qy * (va21 + va12) - 2.0f32 * cv.qz * (va00 + va11)
            + cv.qw * (va10 - va01));
    let dotq = gw * cv.qw + gx * cv.qx + gy * cv.qy + gz * cv.qz;
    grads.v_quats[g * 4] = (gw - cv.qw * dotq) / q.norm;
    grads.v_quats[g * 4 + 1] = (gx - cv.qx * dotq) / q.norm;
    grads.v_quats[g * 4 + 2] = (gy - cv.qy * dotq) / q.norm;
    grads.v_quats[g * 4 + 3] = (gz - cv.qz * dotq) / q.norm;

    vmx += vdx;
    vmy += vdy;
    vmz += vdz;
    // camera centre c = -W^T t: dL/dc = -v_d; dc_i/dW_ji = -t_j, dc_i/dt_j = -W_ji
    let vcx = -vdx;
    let vcy = -vdy;
    let vcz = -vdz;
    let t0 = args.cam[9];
    let t1 = args.cam[10];
    let t2 = args.cam[11];
    vr00 += -vcx * t0;
    vr10 += -vcx * t1;
    vr20 += -vcx * t2;
    vr01 += -vcy * t0;
    vr11 += -vcy * t1;
    vr21 += -vcy * t2;
    vr02 += -vcz * t0;
    vr12 += -vcz * t1;
    vr22 += -vcz * t2;
    vtx += -(p.r00 * vcx + p.r01 * vcy + p.r02 * vcz);
    vty += -(p.r10 * vcx + p.r11 * vcy + p.r12 * vcz);
    vtz += -(p.r20 * vcx + p.r21 * vcy + p.r22 * vcz);

    grads.v_means[g * 3] = vmx;
    grads.v_means[g * 3 + 1] = vmy;
    grads.v_means[g * 3 + 2] = vmz;
    if pose_grad {
        grads.v_cam[g * 12] = vr00;
        grads.v_cam[g * 12 + 1] = vr01;
        grads.v_cam[g * 12 + 2] = vr02;
        grads.v_cam[g * 12 + 3] = vr10;
        grads.v_cam[g * 12 + 4] = vr11;
        grads.v_cam[g * 12 + 5] = vr12;
        grads.v_cam[g * 12 + 6] = vr20;
        grads.v_cam[g * 12 + 7] = vr21;
        grads.v_cam[g * 12 + 8] = vr22;
        grads.v_cam[g * 12 + 9] = vtx;
        grads.v_cam[g * 12 + 10] = vty;
        grads.v_cam[g * 12 + 11] = vtz;
    }
}
