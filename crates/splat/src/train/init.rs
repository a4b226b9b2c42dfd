//! Initial Gaussians: from SfM points (3DGS: isotropic scale from the 3 nearest neighbours,
//! colour from the point) or random points in a box. Random streams are the counter-based
//! SplitMix64 of the gsplat reference harness (`bench/gsplat/common.py`), so a run can start
//! from bit-identical Gaussians.

use crate::SplatError;

/// Zeroth-order SH basis constant.
pub const SH_C0: f64 = 0.282_094_791_773_878_14;

pub use rust3r_gpu::random::splitmix64 as splitmix;

/// `n` uniforms in [0, 1) from stream `seed` (common.py: `splitmix_uniform`).
pub fn splitmix_uniform(seed: u64, n: usize) -> Vec<f64> {
    (1..=n as u64)
        .map(|i| (splitmix(seed, i) >> 11) as f64 * (1.0 / 9_007_199_254_740_992.0))
        .collect()
}

/// `n` standard normals (Box-Muller, cos branch) from stream `seed`.
pub fn splitmix_normal(seed: u64, n: usize) -> Vec<f64> {
    let u = splitmix_uniform(seed, 2 * n);
    (0..n)
        .map(|i| {
            let u1 = 1.0 - u[2 * i];
            (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u[2 * i + 1]).cos()
        })
        .collect()
}

/// `sqrt(mean squared distance to the 3 nearest other points)`, at least 1e-7.
/// Points must be finite.
pub fn knn_mean_dist(points: &[[f64; 3]]) -> Vec<f64> {
    let mut tree = kdtree::KdTree::with_capacity(3, 32);
    for (i, p) in points.iter().enumerate() {
        tree.add(*p, i).expect("finite points");
    }
    points
        .iter()
        .map(|p| {
            let nn = tree
                .nearest(p, 4, &kdtree::distance::squared_euclidean)
                .expect("finite");
            // nn[0] is the point itself (or an exact duplicate at distance 0).
            let k = (nn.len().max(1) - 1).max(1) as f64;
            let s: f64 = nn.iter().skip(1).map(|(d, _)| *d).sum();
            (s / k).sqrt().max(1e-7)
        })
        .collect()
}

/// Host-side initial parameters (pre-activation, the 3DGS PLY convention; quaternions wxyz).
#[derive(Clone, Debug)]
pub struct InitSplats {
    pub means: Vec<f32>,
    pub log_scales: Vec<f32>,
    pub quats: Vec<f32>,
    pub opacity_logits: Vec<f32>,
    /// `[N, (degree+1)², 3]`, higher-order coefficients zero.
    pub sh: Vec<f32>,
    pub sh_degree: u32,
}

impl InitSplats {
    pub fn len(&self) -> usize {
        self.opacity_logits.len()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn logit(p: f64) -> f32 {
    (p / (1.0 - p)).ln() as f32
}

fn assemble(
    points: &[[f64; 3]],
    rgb: &[[f64; 3]],
    quats: Vec<f32>,
    opacity: f64,
    scale_factor: f64,
    sh_degree: u32,
) -> InitSplats {
    let n = points.len();
    let d = knn_mean_dist(points);
    let k = ((sh_degree + 1) * (sh_degree + 1)) as usize;
    let mut sh = vec![0f32; n * k * 3];
    for i in 0..n {
        for c in 0..3 {
            sh[i * k * 3 + c] = ((rgb[i][c] - 0.5) / SH_C0) as f32;
        }
    }
    InitSplats {
        means: points
            .iter()
            .flat_map(|p| p.iter().map(|&v| v as f32))
            .collect(),
        log_scales: d
            .iter()
            .flat_map(|&d| [((d * scale_factor).max(1e-7)).ln() as f32; 3])
            .collect(),
        quats,
        opacity_logits: vec![logit(opacity); n],
        sh,
        sh_degree,
    }
}

/// `n` random Gaussians uniform in `[-extent, extent]³` with random colours and rotations
/// (train_bench.py `init_params`: streams `seed`, `seed+1`, `seed+2`).
pub fn random_box(
    n: usize,
    extent: f64,
    opacity: f64,
    scale_factor: f64,
    seed: u64,
    sh_degree: u32,
) -> InitSplats {
    let u = splitmix_uniform(seed, n * 3);
    let c = splitmix_uniform(seed + 1, n * 3);
    let q = splitmix_normal(seed + 2, n * 4);
    let points: Vec<[f64; 3]> = (0..n)
        .map(|i| [0, 1, 2].map(|k| (u[i * 3 + k] * 2.0 - 1.0) * extent))
        .collect();
    let rgb: Vec<[f64; 3]> = (0..n)
        .map(|i| [c[i * 3], c[i * 3 + 1], c[i * 3 + 2]])
        .collect();
    let quats = (0..n)
        .flat_map(|i| {
            let v = [q[i * 4], q[i * 4 + 1], q[i * 4 + 2], q[i * 4 + 3]];
            let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
            v.map(|x| (x / norm) as f32)
        })
        .collect();
    assemble(&points, &rgb, quats, opacity, scale_factor, sh_degree)
}

/// One Gaussian per SfM point (non-finite points dropped), identity rotation.
pub fn from_points(
    xyz: &[[f32; 3]],
    rgb: &[[u8; 3]],
    opacity: f64,
    scale_factor: f64,
    sh_degree: u32,
) -> Result<InitSplats, SplatError> {
    let mut points = Vec::with_capacity(xyz.len());
    let mut colours = Vec::with_capacity(xyz.len());
    for (p, c) in xyz.iter().zip(rgb) {
        if p.iter().all(|v| v.is_finite()) {
            points.push(p.map(|v| v as f64));
            colours.push(c.map(|v| v as f64 / 255.0));
        }
    }
    if points.len() < 2 {
        return Err(SplatError::InvalidSplats(format!(
            "{} usable initial points (need at least 2)",
            points.len()
        )));
    }
    let quats = (0..points.len())
        .flat_map(|_| [1f32, 0.0, 0.0, 0.0])
        .collect();
    Ok(assemble(
        &points,
        &colours,
        quats,
        opacity,
        scale_factor,
        sh_degree,
    ))
}
