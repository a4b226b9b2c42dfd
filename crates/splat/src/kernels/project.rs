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

/// A 3x3 matrix, row-major (`eij`: row `i`, column `j`).
#[derive(CubeType, Clone, Copy)]
struct Mat3 {
    e00: f32,
    e01: f32,
    e02: f32,
    e10: f32,
    e11: f32,
    e12: f32,
    e20: f32,
    e21: f32,
    e22: f32,
}

/// A symmetric 3x3 matrix by its upper triangle.
#[derive(CubeType, Clone, Copy)]
struct Sym3 {
    e00: f32,
    e01: f32,
    e02: f32,
    e11: f32,
    e12: f32,
    e22: f32,
}

#[cube]
fn quat_to_rot(w: f32, x: f32, y: f32, z: f32) -> Mat3 {
    Mat3 {
        e00: 1.0f32 - 2.0f32 * (y * y + z * z),
        e01: 2.0f32 * (x * y - w * z),
        e02: 2.0f32 * (x * z + w * y),
        e10: 2.0f32 * (x * y + w * z),
        e11: 1.0f32 - 2.0f32 * (x * x + z * z),
        e12: 2.0f32 * (y * z - w * x),
        e20: 2.0f32 * (x * z - w * y),
        e21: 2.0f32 * (y * z + w * x),
        e22: 1.0f32 - 2.0f32 * (x * x + y * y),
    }
}

/// The world-to-camera rotation (row-major) of the camera block.
#[cube]
fn camera_rotation(cam: &[f32]) -> Mat3 {
    Mat3 {
        e00: cam[0],
        e01: cam[1],
        e02: cam[2],
        e10: cam[3],
        e11: cam[4],
        e12: cam[5],
        e20: cam[6],
        e21: cam[7],
        e22: cam[8],
    }
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
fn scaled_rotation(a: &Mat3, sx: f32, sy: f32, sz: f32) -> Mat3 {
    Mat3 {
        e00: a.e00 * sx,
        e01: a.e01 * sy,
        e02: a.e02 * sz,
        e10: a.e10 * sx,
        e11: a.e11 * sy,
        e12: a.e12 * sz,
        e20: a.e20 * sx,
        e21: a.e21 * sy,
        e22: a.e22 * sz,
    }
}

/// The upper triangle (00, 01, 02, 11, 12, 22) of `M M^T`: the world covariance `Sigma`.
#[cube]
fn gram(m: &Mat3) -> Sym3 {
    Sym3 {
        e00: m.e00 * m.e00 + m.e01 * m.e01 + m.e02 * m.e02,
        e01: m.e00 * m.e10 + m.e01 * m.e11 + m.e02 * m.e12,
        e02: m.e00 * m.e20 + m.e01 * m.e21 + m.e02 * m.e22,
        e11: m.e10 * m.e10 + m.e11 * m.e11 + m.e12 * m.e12,
        e12: m.e10 * m.e20 + m.e11 * m.e21 + m.e12 * m.e22,
        e22: m.e20 * m.e20 + m.e21 * m.e21 + m.e22 * m.e22,
    }
}

/// The upper triangle of `W Sigma W^T` for a rotation `W` (row-major) and a symmetric `Sigma`
/// given by its upper triangle.
#[cube]
fn rotate_covariance(r: &Mat3, s: &Sym3) -> Sym3 {
    // B = W Sigma.
    let b00 = r.e00 * s.e00 + r.e01 * s.e01 + r.e02 * s.e02;
    let b01 = r.e00 * s.e01 + r.e01 * s.e11 + r.e02 * s.e12;
    let b02 = r.e00 * s.e02 + r.e01 * s.e12 + r.e02 * s.e22;
    let b10 = r.e10 * s.e00 + r.e11 * s.e01 + r.e12 * s.e02;
    let b11 = r.e10 * s.e01 + r.e11 * s.e11 + r.e12 * s.e12;
    let b12 = r.e10 * s.e02 + r.e11 * s.e12 + r.e12 * s.e22;
    let b20 = r.e20 * s.e00 + r.e21 * s.e01 + r.e22 * s.e02;
    let b21 = r.e20 * s.e01 + r.e21 * s.e11 + r.e22 * s.e12;
    let b22 = r.e20 * s.e02 + r.e21 * s.e12 + r.e22 * s.e22;
    Sym3 {
        e00: b00 * r.e00 + b01 * r.e01 + b02 * r.e02,
        e01: b00 * r.e10 + b01 * r.e11 + b02 * r.e12,
        e02: b00 * r.e20 + b01 * r.e21 + b02 * r.e22,
        e11: b10 * r.e10 + b11 * r.e11 + b12 * r.e12,
        e12: b10 * r.e20 + b11 * r.e21 + b12 * r.e22,
        e22: b20 * r.e20 + b21 * r.e21 + b22 * r.e22,
    }
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

/// The compile-time choices both projection kernels share: SH coefficients per Gaussian as
/// stored (`num_coeffs`) and evaluated (`active_coeffs`), antialiased opacity compensation, and
/// half-float storage of the higher SH orders (see [`sh_coeff`]).
#[derive_cube_comptime]
pub struct ProjectConfig {
    pub num_coeffs: u32,
    pub active_coeffs: u32,
    pub antialiased: bool,
    pub half_sh: bool,
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
    /// The world-to-camera rotation.
    r: Mat3,
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
    let r = camera_rotation(cam);
    let (px, py, pz) = to_camera(cam, mx, my, mz);
    let (fx, fy, cx, cy) = (cam[12], cam[13], cam[14], cam[15]);
    CameraPoint {
        r,
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
    /// The rotation of the unit quaternion.
    a: Mat3,
    sx: f32,
    sy: f32,
    sz: f32,
    /// `M = A S`.
    m: Mat3,
    /// `Sigma = M M^T`.
    s: Sym3,
    /// `C = W Sigma W^T`.
    c: Sym3,
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
    let a = quat_to_rot(qw, qx, qy, qz);
    let sx = log_scales[g * 3].exp();
    let sy = log_scales[g * 3 + 1].exp();
    let sz = log_scales[g * 3 + 2].exp();
    let m = scaled_rotation(&a, sx, sy, sz);
    let s = gram(&m);
    let c = rotate_covariance(&p.r, &s);
    let (lim_x_pos, lim_x_neg, lim_y_pos, lim_y_neg) =
        frustum_limits(width, height, p.fx, p.fy, p.cx, p.cy);
    Covariance {
        qw,
        qx,
        qy,
        qz,
        a,
        sx,
        sy,
        sz,
        m,
        s,
        c,
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
pub fn project_forward(args: ProjectArgs, mut out: ProjectOutputs, #[comptime] cfg: ProjectConfig) {
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
        let u00 = j00 * cv.c.e00 + j02 * cv.c.e02;
        let u01 = j00 * cv.c.e01 + j02 * cv.c.e12;
        let u02 = j00 * cv.c.e02 + j02 * cv.c.e22;
        let u10 = j11 * cv.c.e01 + j12 * cv.c.e02;
        let u11 = j11 * cv.c.e11 + j12 * cv.c.e12;
        let u12 = j11 * cv.c.e12 + j12 * cv.c.e22;
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
        if comptime![cfg.antialiased] {
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
        for k in 0..cfg.active_coeffs {
            let bk = sh_basis(k, ux, uy, uz);
            let (sr, sg, sb) = sh_coeff(&args.sh, &args.sh_rest, g, k, cfg.num_coeffs, cfg.half_sh);
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
pub fn project_backward(
    args: ProjectArgs,
    mut grads: ProjectGradArgs,
    #[comptime] cfg: ProjectConfig,
    #[comptime] pose_grad: bool,
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
    if comptime![cfg.active_coeffs > 1] {
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
        for k in 1..cfg.active_coeffs {
            let (sr, sg, sb) = sh_coeff(&args.sh, &args.sh_rest, g, k, cfg.num_coeffs, cfg.half_sh);
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
    let u00 = j00 * cv.c.e00 + j02 * cv.c.e02;
    let u01 = j00 * cv.c.e01 + j02 * cv.c.e12;
    let u02 = j00 * cv.c.e02 + j02 * cv.c.e22;
    let u11 = j11 * cv.c.e11 + j12 * cv.c.e12;
    let u12 = j11 * cv.c.e12 + j12 * cv.c.e22;
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
    if comptime![cfg.antialiased] {
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
    if comptime![cfg.antialiased] {
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
    let dj00 = 2.0f32 * (vj00 * cv.c.e00 + vj01 * cv.c.e01 + vj02 * cv.c.e02);
    let dj02 = 2.0f32 * (vj00 * cv.c.e02 + vj01 * cv.c.e12 + vj02 * cv.c.e22);
    let dj11 = 2.0f32 * (vj10 * cv.c.e01 + vj11 * cv.c.e11 + vj12 * cv.c.e12);
    let dj12 = 2.0f32 * (vj10 * cv.c.e02 + vj11 * cv.c.e12 + vj12 * cv.c.e22);

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
    let e00 = vc00 * p.r.e00 + vc01 * p.r.e10 + vc02 * p.r.e20;
    let e01 = vc00 * p.r.e01 + vc01 * p.r.e11 + vc02 * p.r.e21;
    let e02 = vc00 * p.r.e02 + vc01 * p.r.e12 + vc02 * p.r.e22;
    let e10 = vc01 * p.r.e00 + vc11 * p.r.e10 + vc12 * p.r.e20;
    let e11 = vc01 * p.r.e01 + vc11 * p.r.e11 + vc12 * p.r.e21;
    let e12 = vc01 * p.r.e02 + vc11 * p.r.e12 + vc12 * p.r.e22;
    let e20 = vc02 * p.r.e00 + vc12 * p.r.e10 + vc22 * p.r.e20;
    let e21 = vc02 * p.r.e01 + vc12 * p.r.e11 + vc22 * p.r.e21;
    let e22 = vc02 * p.r.e02 + vc12 * p.r.e12 + vc22 * p.r.e22;
    // E = VC W ; dSigma = W^T E
    let vs00 = p.r.e00 * e00 + p.r.e10 * e10 + p.r.e20 * e20;
    let vs01 = p.r.e00 * e01 + p.r.e10 * e11 + p.r.e20 * e21;
    let vs02 = p.r.e00 * e02 + p.r.e10 * e12 + p.r.e20 * e22;
    let vs11 = p.r.e01 * e01 + p.r.e11 * e11 + p.r.e21 * e21;
    let vs12 = p.r.e01 * e02 + p.r.e11 * e12 + p.r.e21 * e22;
    let vs22 = p.r.e02 * e02 + p.r.e12 * e12 + p.r.e22 * e22;
    // dL/dW = 2 E Sigma
    let mut vr00 = 2.0f32 * (e00 * cv.s.e00 + e01 * cv.s.e01 + e02 * cv.s.e02);
    let mut vr01 = 2.0f32 * (e00 * cv.s.e01 + e01 * cv.s.e11 + e02 * cv.s.e12);
    let mut vr02 = 2.0f32 * (e00 * cv.s.e02 + e01 * cv.s.e12 + e02 * cv.s.e22);
    let mut vr10 = 2.0f32 * (e10 * cv.s.e00 + e11 * cv.s.e01 + e12 * cv.s.e02);
    let mut vr11 = 2.0f32 * (e10 * cv.s.e01 + e11 * cv.s.e11 + e12 * cv.s.e12);
    let mut vr12 = 2.0f32 * (e10 * cv.s.e02 + e11 * cv.s.e12 + e12 * cv.s.e22);
    let mut vr20 = 2.0f32 * (e20 * cv.s.e00 + e21 * cv.s.e01 + e22 * cv.s.e02);
    let mut vr21 = 2.0f32 * (e20 * cv.s.e01 + e21 * cv.s.e11 + e22 * cv.s.e12);
    let mut vr22 = 2.0f32 * (e20 * cv.s.e02 + e21 * cv.s.e12 + e22 * cv.s.e22);
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
    let mut vmx = p.r.e00 * vpx + p.r.e10 * vpy + p.r.e20 * vpz;
    let mut vmy = p.r.e01 * vpx + p.r.e11 * vpy + p.r.e21 * vpz;
    let mut vmz = p.r.e02 * vpx + p.r.e12 * vpy + p.r.e22 * vpz;

    // ---- Sigma = M M^T: dL/dM = 2 VS M ----
    let vm00 = 2.0f32 * (vs00 * cv.m.e00 + vs01 * cv.m.e10 + vs02 * cv.m.e20);
    let vm01 = 2.0f32 * (vs00 * cv.m.e01 + vs01 * cv.m.e11 + vs02 * cv.m.e21);
    let vm02 = 2.0f32 * (vs00 * cv.m.e02 + vs01 * cv.m.e12 + vs02 * cv.m.e22);
    let vm10 = 2.0f32 * (vs01 * cv.m.e00 + vs11 * cv.m.e10 + vs12 * cv.m.e20);
    let vm11 = 2.0f32 * (vs01 * cv.m.e01 + vs11 * cv.m.e11 + vs12 * cv.m.e21);
    let vm12 = 2.0f32 * (vs01 * cv.m.e02 + vs11 * cv.m.e12 + vs12 * cv.m.e22);
    let vm20 = 2.0f32 * (vs02 * cv.m.e00 + vs12 * cv.m.e10 + vs22 * cv.m.e20);
    let vm21 = 2.0f32 * (vs02 * cv.m.e01 + vs12 * cv.m.e11 + vs22 * cv.m.e21);
    let vm22 = 2.0f32 * (vs02 * cv.m.e02 + vs12 * cv.m.e12 + vs22 * cv.m.e22);
    // M = A S: dA = dM S ; ds_j = sum_i dM_ij A_ij
    grads.v_log_scales[g * 3] = (vm00 * cv.a.e00 + vm10 * cv.a.e10 + vm20 * cv.a.e20) * cv.sx;
    grads.v_log_scales[g * 3 + 1] = (vm01 * cv.a.e01 + vm11 * cv.a.e11 + vm21 * cv.a.e21) * cv.sy;
    grads.v_log_scales[g * 3 + 2] = (vm02 * cv.a.e02 + vm12 * cv.a.e12 + vm22 * cv.a.e22) * cv.sz;
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
    vtx += -(p.r.e00 * vcx + p.r.e01 * vcy + p.r.e02 * vcz);
    vty += -(p.r.e10 * vcx + p.r.e11 * vcy + p.r.e12 * vcz);
    vtz += -(p.r.e20 * vcx + p.r.e21 * vcy + p.r.e22 * vcz);

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
