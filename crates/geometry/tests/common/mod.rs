//! Shared helpers for the geometry integration tests.
#![allow(dead_code)]

use rust3r_geometry::nalgebra::{Matrix4, UnitQuaternion, Vector3, Vector6};
use rust3r_geometry::{SE3, Sim3, Vector7};

/// Small deterministic PRNG (SplitMix64) so tests need no extra dependency.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Uniform in [lo, hi).
    pub fn range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.uniform()
    }
    pub fn vec3(&mut self, scale: f64) -> Vector3<f64> {
        Vector3::new(
            self.range(-scale, scale),
            self.range(-scale, scale),
            self.range(-scale, scale),
        )
    }
    pub fn unit3(&mut self) -> Vector3<f64> {
        loop {
            let v = self.vec3(1.0);
            let n = v.norm();
            if n > 1e-3 && n <= 1.0 {
                return v / n;
            }
        }
    }
    /// Rotation vector with angle uniform in [0, max_angle).
    pub fn rotvec(&mut self, max_angle: f64) -> Vector3<f64> {
        self.unit3() * self.range(0.0, max_angle)
    }
    pub fn se3_tangent(&mut self, max_angle: f64) -> Vector6<f64> {
        let tau = self.vec3(2.0);
        let phi = self.rotvec(max_angle);
        Vector6::new(tau.x, tau.y, tau.z, phi.x, phi.y, phi.z)
    }
    pub fn sim3_tangent(&mut self, max_angle: f64, max_sigma: f64) -> Vector7 {
        let tau = self.vec3(2.0);
        let phi = self.rotvec(max_angle);
        let sigma = self.range(-max_sigma, max_sigma);
        Vector7::from_column_slice(&[tau.x, tau.y, tau.z, phi.x, phi.y, phi.z, sigma])
    }
    pub fn se3(&mut self) -> SE3 {
        let phi = self.rotvec(3.1);
        SE3::new(UnitQuaternion::from_scaled_axis(phi), self.vec3(3.0))
    }
    pub fn sim3(&mut self) -> Sim3 {
        let phi = self.rotvec(3.1);
        Sim3::new(
            UnitQuaternion::from_scaled_axis(phi),
            self.vec3(3.0),
            self.range(-1.0, 1.0).exp(),
        )
    }
}

/// Matrix exponential by scaling and squaring with a long Taylor series
/// (independent reference for the closed-form Exp maps).
pub fn expm(a: &Matrix4<f64>) -> Matrix4<f64> {
    let norm = a.abs().max();
    let mut k = 0;
    let mut scaled = *a;
    while norm / 2f64.powi(k) > 0.05 {
        k += 1;
    }
    scaled /= 2f64.powi(k);
    let mut term = Matrix4::identity();
    let mut sum = Matrix4::identity();
    for i in 1..30 {
        term = term * scaled / i as f64;
        sum += term;
    }
    for _ in 0..k {
        sum = sum * sum;
    }
    sum
}

pub fn max_abs4(a: &Matrix4<f64>, b: &Matrix4<f64>) -> f64 {
    (a - b).abs().max()
}
