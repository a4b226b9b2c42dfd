//! A straightforward CPU float64 reference renderer: per Gaussian projection,
//! then per pixel, per Gaussian (depth order) alpha blending. No tiles, no
//! sorting tricks, no shared code with the GPU kernels.
#![allow(dead_code)]

use rand::{Rng, SeedableRng, rngs::StdRng};
use rust3r_splat::Camera;

#[derive(Clone, Debug)]
pub struct Scene {
    pub means: Vec<f64>,
    pub log_scales: Vec<f64>,
    pub quats: Vec<f64>,
    pub opacity_logits: Vec<f64>,
    pub sh: Vec<f64>,
    pub sh_degree: u32,
}

impl Scene {
    pub fn len(&self) -> usize {
        self.opacity_logits.len()
    }
    pub fn k(&self) -> usize {
        ((self.sh_degree + 1) * (self.sh_degree + 1)) as usize
    }
    pub fn f32(v: &[f64]) -> Vec<f32> {
        v.iter().map(|&x| x as f32).collect()
    }
    /// The scene on the device (parameters rounded to f32), SH stored in `precision`.
    pub fn upload(
        &self,
        gpu: &rust3r_gpu::Gpu,
        precision: rust3r_splat::ShPrecision,
    ) -> rust3r_splat::GpuSplats {
        rust3r_splat::GpuSplats::from_slices_as(
            gpu,
            &Self::f32(&self.means),
            &Self::f32(&self.log_scales),
            &Self::f32(&self.quats),
            &Self::f32(&self.opacity_logits),
            &Self::f32(&self.sh),
            self.sh_degree,
            precision,
        )
        .unwrap()
    }
    /// Round every parameter to f32 so GPU and reference see identical inputs.
    pub fn rounded(mut self) -> Self {
        for v in [
            &mut self.means,
            &mut self.log_scales,
            &mut self.quats,
            &mut self.opacity_logits,
            &mut self.sh,
        ] {
            for x in v.iter_mut() {
                *x = *x as f32 as f64;
            }
        }
        self
    }
}

pub struct RefOpts {
    pub background: [f64; 3],
    pub antialiased: bool,
    pub near: f64,
    pub far: f64,
}

impl Default for RefOpts {
    fn default() -> Self {
        Self {
            background: [0.0; 3],
            antialiased: false,
            near: 0.01,
            far: 1e10,
        }
    }
}

pub struct RefImage {
    pub rgb: Vec<f64>,
    pub alpha: Vec<f64>,
    pub depth: Vec<f64>,
}

const SH_C0: f64 = 0.28209479177387814;
const SH_C1: f64 = 0.4886025119029199;
const SH_C2: [f64; 5] = [
    1.0925484305920792,
    -1.0925484305920792,
    0.31539156525252005,
    -1.0925484305920792,
    0.5462742152960396,
];
const SH_C3: [f64; 7] = [
    -0.5900435899266435,
    2.890611442640554,
    -0.4570457994644658,
    0.3731763325901154,
    -0.4570457994644658,
    1.445305721320277,
    -0.5900435899266435,
];

fn sh_basis(d: [f64; 3]) -> [f64; 16] {
    let [x, y, z] = d;
    let (xx, yy, zz) = (x * x, y * y, z * z);
    [
        SH_C0,
        -SH_C1 * y,
        SH_C1 * z,
        -SH_C1 * x,
        SH_C2[0] * x * y,
        SH_C2[1] * y * z,
        SH_C2[2] * (2.0 * zz - xx - yy),
        SH_C2[3] * x * z,
        SH_C2[4] * (xx - yy),
        SH_C3[0] * y * (3.0 * xx - yy),
        SH_C3[1] * x * y * z,
        SH_C3[2] * y * (4.0 * zz - xx - yy),
        SH_C3[3] * z * (2.0 * zz - 3.0 * xx - 3.0 * yy),
        SH_C3[4] * x * (4.0 * zz - xx - yy),
        SH_C3[5] * z * (xx - yy),
        SH_C3[6] * x * (xx - 3.0 * yy),
    ]
}

type M3 = [[f64; 3]; 3];
fn mul(a: &M3, b: &M3) -> M3 {
    let mut c = [[0.0; 3]; 3];
    for i in 0..3 {
        for j in 0..3 {
            for k in 0..3 {
                c[i][j] += a[i][k] * b[k][j];
            }
        }
    }
    c
}
fn transpose(a: &M3) -> M3 {
    let mut t = [[0.0; 3]; 3];
    for i in 0..3 {
        for j in 0..3 {
            t[i][j] = a[j][i];
        }
    }
    t
}

struct Projected {
    depth: f64,
    mean: [f64; 2],
    conic: [f64; 3],
    opacity: f64,
    rgb: [f64; 3],
}

fn project(s: &Scene, i: usize, cam: &Camera, opts: &RefOpts) -> Option<Projected> {
    let w = &cam.world_to_camera;
    let rot: M3 = [
        [w[0][0], w[0][1], w[0][2]],
        [w[1][0], w[1][1], w[1][2]],
        [w[2][0], w[2][1], w[2][2]],
    ];
    let m = [s.means[i * 3], s.means[i * 3 + 1], s.means[i * 3 + 2]];
    let mut p = [0.0; 3];
    for r in 0..3 {
        p[r] = rot[r][0] * m[0] + rot[r][1] * m[1] + rot[r][2] * m[2] + w[r][3];
    }
    if p[2] < opts.near || p[2] > opts.far {
        return None;
    }
    let q = [
        s.quats[i * 4],
        s.quats[i * 4 + 1],
        s.quats[i * 4 + 2],
        s.quats[i * 4 + 3],
    ];
    let qn = (q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3]).sqrt();
    if qn <= 0.0 {
        return None;
    }
    let (qw, qx, qy, qz) = (q[0] / qn, q[1] / qn, q[2] / qn, q[3] / qn);
    let r: M3 = [
        [
            1.0 - 2.0 * (qy * qy + qz * qz),
            2.0 * (qx * qy - qw * qz),
            2.0 * (qx * qz + qw * qy),
        ],
        [
            2.0 * (qx * qy + qw * qz),
            1.0 - 2.0 * (qx * qx + qz * qz),
            2.0 * (qy * qz - qw * qx),
        ],
        [
            2.0 * (qx * qz - qw * qy),
            2.0 * (qy * qz + qw * qx),
            1.0 - 2.0 * (qx * qx + qy * qy),
        ],
    ];
    let sc = [
        s.log_scales[i * 3].exp(),
        s.log_scales[i * 3 + 1].exp(),
        s.log_scales[i * 3 + 2].exp(),
    ];
    let sdiag: M3 = [[sc[0], 0.0, 0.0], [0.0, sc[1], 0.0], [0.0, 0.0, sc[2]]];
    let mm = mul(&r, &sdiag);
    let sigma = mul(&mm, &transpose(&mm));
    let c = mul(&mul(&rot, &sigma), &transpose(&rot));
    let (fx, fy, cx, cy) = (cam.fx, cam.fy, cam.cx, cam.cy);
    let (wd, ht) = (cam.width as f64, cam.height as f64);
    let tan_fovx = 0.5 * wd / fx;
    let tan_fovy = 0.5 * ht / fy;
    let lim_x_pos = (wd - cx) / fx + 0.3 * tan_fovx;
    let lim_x_neg = cx / fx + 0.3 * tan_fovx;
    let lim_y_pos = (ht - cy) / fy + 0.3 * tan_fovy;
    let lim_y_neg = cy / fy + 0.3 * tan_fovy;
    let tx = p[2] * (p[0] / p[2]).clamp(-lim_x_neg, lim_x_pos);
    let ty = p[2] * (p[1] / p[2]).clamp(-lim_y_neg, lim_y_pos);
    let j = [
        [fx / p[2], 0.0, -fx * tx / (p[2] * p[2])],
        [0.0, fy / p[2], -fy * ty / (p[2] * p[2])],
    ];
    let mut cov = [[0.0; 2]; 2];
    for a in 0..2 {
        for b in 0..2 {
            for k in 0..3 {
                for l in 0..3 {
                    cov[a][b] += j[a][k] * c[k][l] * j[b][l];
                }
            }
        }
    }
    let det_orig = cov[0][0] * cov[1][1] - cov[0][1] * cov[1][0];
    cov[0][0] += 0.3;
    cov[1][1] += 0.3;
    let det = cov[0][0] * cov[1][1] - cov[0][1] * cov[1][0];
    if det <= 0.0 {
        return None;
    }
    let mut opacity = 1.0 / (1.0 + (-s.opacity_logits[i]).exp());
    if opts.antialiased {
        opacity *= (det_orig / det).max(0.0).sqrt();
    }
    if opacity < 1.0 / 255.0 {
        return None;
    }
    let conic = [cov[1][1] / det, -cov[0][1] / det, cov[0][0] / det];
    let mean = [fx * p[0] / p[2] + cx, fy * p[1] / p[2] + cy];
    let center = cam.center();
    let d = [m[0] - center[0], m[1] - center[1], m[2] - center[2]];
    let dn = (d[0] * d[0] + d[1] * d[1] + d[2] * d[2]).sqrt();
    let u = if dn > 0.0 {
        [d[0] / dn, d[1] / dn, d[2] / dn]
    } else {
        [0.0; 3]
    };
    let basis = sh_basis(u);
    let k = s.k();
    let mut rgb = [0.5; 3];
    for (b, bv) in basis.iter().enumerate().take(k) {
        for ch in 0..3 {
            rgb[ch] += bv * s.sh[(i * k + b) * 3 + ch];
        }
    }
    Some(Projected {
        depth: p[2],
        mean,
        conic,
        opacity,
        rgb: rgb.map(|v| v.max(0.0)),
    })
}

/// Render the scene. Depth is the accumulated (alpha-weighted) depth.
pub fn render(s: &Scene, cam: &Camera, opts: &RefOpts) -> RefImage {
    let mut gs: Vec<Projected> = (0..s.len())
        .filter_map(|i| project(s, i, cam, opts))
        .collect();
    gs.sort_by(|a, b| a.depth.partial_cmp(&b.depth).unwrap());
    let (w, h) = (cam.width as usize, cam.height as usize);
    let mut img = RefImage {
        rgb: vec![0.0; w * h * 3],
        alpha: vec![0.0; w * h],
        depth: vec![0.0; w * h],
    };
    for y in 0..h {
        for x in 0..w {
            let (px, py) = (x as f64 + 0.5, y as f64 + 0.5);
            let mut t = 1.0;
            let mut c = [0.0; 3];
            let mut d = 0.0;
            for g in &gs {
                let dx = g.mean[0] - px;
                let dy = g.mean[1] - py;
                let sigma =
                    0.5 * (g.conic[0] * dx * dx + g.conic[2] * dy * dy) + g.conic[1] * dx * dy;
                if sigma < 0.0 {
                    continue;
                }
                let alpha = (g.opacity * (-sigma).exp()).min(0.99);
                if alpha < 1.0 / 255.0 {
                    continue;
                }
                let next_t = t * (1.0 - alpha);
                if next_t <= 1e-4 {
                    break;
                }
                for ch in 0..3 {
                    c[ch] += g.rgb[ch] * alpha * t;
                }
                d += g.depth * alpha * t;
                t = next_t;
            }
            let p = y * w + x;
            for ch in 0..3 {
                img.rgb[p * 3 + ch] = c[ch] + t * opts.background[ch];
            }
            img.alpha[p] = 1.0 - t;
            img.depth[p] = d;
        }
    }
    img
}

/// Random Gaussians in front of a camera looking down +z from the origin.
pub fn random_scene(seed: u64, n: usize, sh_degree: u32) -> Scene {
    let mut rng = StdRng::seed_from_u64(seed);
    let k = ((sh_degree + 1) * (sh_degree + 1)) as usize;
    let mut s = Scene {
        means: vec![],
        log_scales: vec![],
        quats: vec![],
        opacity_logits: vec![],
        sh: vec![],
        sh_degree,
    };
    for _ in 0..n {
        let z = rng.random_range(2.0..8.0);
        s.means.extend([
            rng.random_range(-0.6..0.6) * z,
            rng.random_range(-0.45..0.45) * z,
            z,
        ]);
        for _ in 0..3 {
            s.log_scales.push(rng.random_range(-3.0f64..-1.0));
        }
        s.quats.extend([
            rng.random_range(-1.0..1.0),
            rng.random_range(-1.0..1.0),
            rng.random_range(-1.0..1.0),
            rng.random_range(-1.0..1.0),
        ]);
        s.opacity_logits.push(rng.random_range(-2.0..2.0));
        for c in 0..k * 3 {
            let scale = if c < 3 { 1.0 } else { 0.3 };
            s.sh.push(rng.random_range(-1.0..1.0) * scale);
        }
    }
    s.rounded()
}

pub fn test_camera(width: u32, height: u32) -> Camera {
    // A slightly rotated, translated camera so every pose entry matters.
    let (a, b) = (0.05f64, -0.03f64);
    let (ca, sa, cb, sb) = (a.cos(), a.sin(), b.cos(), b.sin());
    // R = Rx(a) * Ry(b)
    let r = [
        [cb, 0.0, sb],
        [sa * sb, ca, -sa * cb],
        [-ca * sb, sa, ca * cb],
    ];
    let t = [0.05, -0.02, 0.1];
    let mut m = [[0.0; 4]; 4];
    for i in 0..3 {
        for j in 0..3 {
            m[i][j] = r[i][j];
        }
        m[i][3] = t[i];
    }
    m[3][3] = 1.0;
    Camera {
        intrinsics: rust3r_geometry::PinholeCamera::new(
            0.8 * width as f64,
            0.8 * width as f64,
            width as f64 * 0.52,
            height as f64 * 0.47,
            width,
            height,
        ),
        world_to_camera: m,
    }
}

/// The camera with every value rounded to f32, as the GPU sees it.
pub fn round_camera(mut c: Camera) -> Camera {
    for row in c.world_to_camera.iter_mut() {
        for v in row.iter_mut() {
            *v = *v as f32 as f64;
        }
    }
    c.intrinsics.fx = c.fx as f32 as f64;
    c.intrinsics.fy = c.fy as f32 as f64;
    c.intrinsics.cx = c.cx as f32 as f64;
    c.intrinsics.cy = c.cy as f32 as f64;
    c
}

/// Compares the GPU image with the reference renderer; returns whether the forward pass skipped
/// rows out of the Gaussians' reach.
pub fn compare_forward(
    gpu: &rust3r_gpu::Gpu,
    s: &Scene,
    cam: &Camera,
    aa: bool,
    bg: [f64; 3],
) -> bool {
    compare_forward_tuned(gpu, s, cam, aa, bg, Default::default())
}

/// [`compare_forward`] with the rasterizer's layout choices forced by `tuning`.
pub fn compare_forward_tuned(
    gpu: &rust3r_gpu::Gpu,
    s: &Scene,
    cam: &Camera,
    aa: bool,
    bg: [f64; 3],
    tuning: rust3r_splat::RasterTuning,
) -> bool {
    let opts = rust3r_splat::RenderOptions {
        background: bg.map(|v| v as f32),
        antialiased: aa,
        tuning,
        ..Default::default()
    };
    let (out, state) = rust3r_splat::render(
        gpu,
        &s.upload(gpu, rust3r_splat::ShPrecision::F32),
        cam,
        &opts,
    )
    .unwrap();
    let reference = render(
        s,
        cam,
        &RefOpts {
            background: bg,
            antialiased: aa,
            ..Default::default()
        },
    );
    let rgb = gpu.read(&out.rgb).unwrap();
    let alpha = gpu.read(&out.alpha).unwrap();
    let depth = gpu.read(&out.depth).unwrap();
    let e_rgb = max_abs_err(&rgb, &reference.rgb);
    let e_alpha = max_abs_err(&alpha, &reference.alpha);
    let max_depth = reference.depth.iter().copied().fold(1.0, f64::max);
    let e_depth = max_abs_err(&depth, &reference.depth) / max_depth;
    assert!(rgb.iter().all(|v| v.is_finite()), "non-finite pixels");
    assert!(e_rgb <= 1e-3, "rgb max abs error {e_rgb}");
    assert!(e_alpha <= 1e-3, "alpha max abs error {e_alpha}");
    assert!(e_depth <= 1e-3, "depth max relative error {e_depth}");
    // The image is not trivially empty.
    assert!(reference.alpha.iter().any(|&a| a > 0.5));
    state.row_skip()
}

/// `max` that propagates NaN (`f64::max` drops it, so a pixel a kernel never wrote, poisoned
/// with NaN, would pass a comparison folded with it).
pub fn nan_max(m: f64, d: f64) -> f64 {
    if m.is_nan() || d.is_nan() {
        f64::NAN
    } else {
        m.max(d)
    }
}

/// Largest `|a[i] - b[i]|`; NaN when either side has one.
pub fn max_abs_err(a: &[f32], b: &[f64]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| (x as f64 - y).abs())
        .fold(0.0, nan_max)
}

/// `n` faint Gaussians of `random_scene(seed, n, 1)` piled on the first 16x16 tile of
/// `test_camera(16, 16)`: many batches per tile and early termination.
pub fn one_tile_pile(seed: u64, n: usize) -> Scene {
    let mut s = random_scene(seed, n, 1);
    for i in 0..s.len() {
        let z = s.means[i * 3 + 2];
        s.means[i * 3] = (0.01 * (i % 7) as f64) * z / 10.0;
        s.means[i * 3 + 1] = (0.01 * (i % 5) as f64) * z / 10.0;
        s.opacity_logits[i] = -3.0;
    }
    s.rounded()
}
