//! Similarity transforms Sim(3) in the lietorch layout.

use std::ops::Mul;

use nalgebra::{Matrix3, Matrix4, SMatrix, SVector, UnitQuaternion, Vector3, Vector4};
use serde::{Deserialize, Serialize};

use crate::{SE3, so3};

/// 7-vector (Sim(3) tangent `[tau(3) phi(3) sigma]`).
pub type Vector7 = SVector<f64, 7>;
/// 7x7 matrix (Sim(3) adjoint).
pub type Matrix7 = SMatrix<f64, 7, 7>;
/// 3x7 matrix (Jacobian of a Sim(3) action on a point).
pub type Matrix3x7 = SMatrix<f64, 3, 7>;

/// A similarity transform `x -> s R x + t` (lietorch `Sim3`).
///
/// * data layout (see [`Sim3::data`]): `[tx ty tz qx qy qz qw s]`
/// * tangent layout: `[tau(3) phi(3) sigma]` with `s = exp(sigma)`
///
/// Serialises as the 8-element lietorch data array.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(from = "[f64; 8]", into = "[f64; 8]")]
pub struct Sim3 {
    /// Rotation `R`.
    pub rotation: UnitQuaternion<f64>,
    /// Translation `t`.
    pub translation: Vector3<f64>,
    /// Scale `s` (must be strictly positive).
    pub scale: f64,
}

impl Default for Sim3 {
    fn default() -> Self {
        Self::identity()
    }
}

impl From<[f64; 8]> for Sim3 {
    fn from(d: [f64; 8]) -> Self {
        Self::from_data(&d)
    }
}

impl From<Sim3> for [f64; 8] {
    fn from(t: Sim3) -> Self {
        t.data()
    }
}

impl From<SE3> for Sim3 {
    fn from(t: SE3) -> Self {
        Self::from_se3(&t)
    }
}

impl Sim3 {
    /// Tangent-space dimension.
    pub const DOF: usize = 7;
    /// Embedding (data) dimension.
    pub const DATA_DIM: usize = 8;

    /// Identity transform.
    pub fn identity() -> Self {
        Self {
            rotation: UnitQuaternion::identity(),
            translation: Vector3::zeros(),
            scale: 1.0,
        }
    }

    /// Builds a transform from rotation, translation and scale.
    pub fn new(rotation: UnitQuaternion<f64>, translation: Vector3<f64>, scale: f64) -> Self {
        Self {
            rotation,
            translation,
            scale,
        }
    }

    /// Builds a transform from a rotation matrix (assumed orthonormal,
    /// `det = +1`), a translation and a scale.
    pub fn from_rotation_translation_scale(r: &Matrix3<f64>, t: &Vector3<f64>, s: f64) -> Self {
        Self {
            rotation: so3::quat_from_rotation_matrix(r),
            translation: *t,
            scale: s,
        }
    }

    /// Embeds a rigid transform (scale 1).
    pub fn from_se3(t: &SE3) -> Self {
        Self {
            rotation: t.rotation,
            translation: t.translation,
            scale: 1.0,
        }
    }

    /// Drops the scale, keeping rotation and translation.
    pub fn to_se3(&self) -> SE3 {
        SE3::new(self.rotation, self.translation)
    }

    /// Builds a transform from lietorch data `[tx ty tz qx qy qz qw s]`; the
    /// quaternion is normalised (as lietorch does).
    pub fn from_data(d: &[f64; 8]) -> Self {
        Self {
            rotation: so3::quat_from_xyzw(d[3], d[4], d[5], d[6]),
            translation: Vector3::new(d[0], d[1], d[2]),
            scale: d[7],
        }
    }

    /// lietorch data vector `[tx ty tz qx qy qz qw s]`.
    pub fn data(&self) -> [f64; 8] {
        let q = self.rotation.quaternion();
        let t = &self.translation;
        [t.x, t.y, t.z, q.i, q.j, q.k, q.w, self.scale]
    }

    /// Builds a transform from a homogeneous 4x4 matrix `[[sR, t], [0, 1]]`.
    /// The scale is recovered as `cbrt(det(sR))`.
    pub fn from_matrix(m: &Matrix4<f64>) -> Self {
        let sr: Matrix3<f64> = m.fixed_view::<3, 3>(0, 0).into_owned();
        let t: Vector3<f64> = m.fixed_view::<3, 1>(0, 3).into_owned();
        let s = sr.determinant().cbrt();
        Self::from_rotation_translation_scale(&(sr / s), &t, s)
    }

    /// Homogeneous 4x4 matrix `[[sR, t], [0, 1]]`.
    pub fn matrix(&self) -> Matrix4<f64> {
        let mut m = Matrix4::identity();
        m.fixed_view_mut::<3, 3>(0, 0)
            .copy_from(&(self.rotation_matrix() * self.scale));
        m.fixed_view_mut::<3, 1>(0, 3).copy_from(&self.translation);
        m
    }

    /// Rotation matrix `R` (without scale).
    pub fn rotation_matrix(&self) -> Matrix3<f64> {
        so3::rotation_matrix(&self.rotation)
    }

    /// Inverse transform.
    pub fn inverse(&self) -> Self {
        let rinv = self.rotation.conjugate();
        let sinv = 1.0 / self.scale;
        Self {
            rotation: rinv,
            translation: -(so3::rotate(&rinv, &self.translation) * sinv),
            scale: sinv,
        }
    }

    /// Group composition `self * other` (apply `other` first).
    pub fn compose(&self, other: &Self) -> Self {
        Self {
            rotation: so3::quat_mul(&self.rotation, &other.rotation),
            translation: self.translation
                + so3::rotate(&self.rotation, &other.translation) * self.scale,
            scale: self.scale * other.scale,
        }
    }

    /// Transforms a point: `s R p + t`.
    pub fn act(&self, p: &Vector3<f64>) -> Vector3<f64> {
        so3::rotate(&self.rotation, p) * self.scale + self.translation
    }

    /// Transforms a homogeneous point `[x y z w]`: `[s R p + w t, w]`.
    pub fn act4(&self, p: &Vector4<f64>) -> Vector4<f64> {
        let xyz = so3::rotate(&self.rotation, &p.xyz()) * self.scale + self.translation * p.w;
        Vector4::new(xyz.x, xyz.y, xyz.z, p.w)
    }

    /// The `W` matrix of lietorch `RxSO3::calcW`: `A [phi]x + B [phi]x^2 + C I`,
    /// so that `Exp([tau phi sigma])` has translation `W tau`.
    ///
    /// The branches for `|sigma| < EPS` and `theta < EPS` are those of lietorch.
    pub fn calc_w(phi: &Vector3<f64>, sigma: f64) -> Matrix3<f64> {
        const EPS: f64 = so3::EPS;
        let theta = phi.norm();
        let big_phi = so3::hat(phi);
        let big_phi2 = big_phi * big_phi;
        let scale = sigma.exp();
        let (a, b, c);
        if sigma.abs() < EPS {
            c = 1.0;
            if theta.abs() < EPS {
                a = 0.5;
                b = 1.0 / 6.0;
            } else {
                let theta_sq = theta * theta;
                a = (1.0 - theta.cos()) / theta_sq;
                b = (theta - theta.sin()) / (theta_sq * theta);
            }
        } else {
            c = (scale - 1.0) / sigma;
            if theta.abs() < EPS {
                let sigma_sq = sigma * sigma;
                a = ((sigma - 1.0) * scale + 1.0) / sigma_sq;
                b = (scale * 0.5 * sigma_sq + scale - 1.0 - sigma * scale) / (sigma_sq * sigma);
            } else {
                let theta_sq = theta * theta;
                let aa = scale * theta.sin();
                let bb = scale * theta.cos();
                let cc = theta_sq + sigma * sigma;
                a = (aa * sigma + (1.0 - bb) * theta) / (theta * cc);
                b = (c - ((bb - 1.0) * sigma + aa * theta) / cc) / theta_sq;
            }
        }
        big_phi * a + big_phi2 * b + Matrix3::identity() * c
    }

    /// Exponential map from the tangent `[tau phi sigma]` (lietorch `Sim3::Exp`).
    pub fn exp(xi: &Vector7) -> Self {
        let tau = xi.fixed_rows::<3>(0).into_owned();
        let phi = xi.fixed_rows::<3>(3).into_owned();
        let sigma = xi[6];
        let w = Self::calc_w(&phi, sigma);
        Self {
            rotation: so3::exp(&phi),
            translation: w * tau,
            scale: sigma.exp(),
        }
    }

    /// Logarithm map to the tangent `[tau phi sigma]` (lietorch `Sim3::Log`,
    /// which uses `W^-1 t` for the translational part).
    pub fn log(&self) -> Vector7 {
        let phi = so3::log(&self.rotation);
        let sigma = self.scale.ln();
        let w = Self::calc_w(&phi, sigma);
        let tau = match w.try_inverse() {
            Some(winv) => winv * self.translation,
            None => Vector3::repeat(f64::NAN),
        };
        let mut xi = Vector7::zeros();
        xi.fixed_rows_mut::<3>(0).copy_from(&tau);
        xi.fixed_rows_mut::<3>(3).copy_from(&phi);
        xi[6] = sigma;
        xi
    }

    /// Adjoint matrix (lietorch convention) such that
    /// `Exp(Ad_T d) = T Exp(d) T^-1`:
    /// `[[sR, [t]x R, -t], [0, R, 0], [0, 0, 1]]`.
    pub fn adjoint(&self) -> Matrix7 {
        let r = self.rotation_matrix();
        let tx = so3::hat(&self.translation);
        let mut ad = Matrix7::identity();
        ad.fixed_view_mut::<3, 3>(0, 0).copy_from(&(r * self.scale));
        ad.fixed_view_mut::<3, 3>(0, 3).copy_from(&(tx * r));
        ad.fixed_view_mut::<3, 1>(0, 6)
            .copy_from(&(-self.translation));
        ad.fixed_view_mut::<3, 3>(3, 3).copy_from(&r);
        ad
    }

    /// Applies the adjoint to a tangent vector: `Ad_T d`.
    pub fn adjoint_apply(&self, d: &Vector7) -> Vector7 {
        self.adjoint() * d
    }

    /// Applies the transposed adjoint: `Ad_T^T d` (lietorch `AdjT`).
    pub fn adjoint_transpose_apply(&self, d: &Vector7) -> Vector7 {
        self.adjoint().transpose() * d
    }

    /// Left retraction `Exp(d) * self` (lietorch `retr`).
    pub fn retr(&self, d: &Vector7) -> Self {
        Self::exp(d).compose(self)
    }

    /// Lie-algebra "hat": 4x4 matrix `[[ [phi]x + sigma I, tau ], [0, 0]]`.
    pub fn hat(xi: &Vector7) -> Matrix4<f64> {
        let mut m = Matrix4::zeros();
        let block = so3::hat(&xi.fixed_rows::<3>(3).into_owned()) + Matrix3::identity() * xi[6];
        m.fixed_view_mut::<3, 3>(0, 0).copy_from(&block);
        m.fixed_view_mut::<3, 1>(0, 3)
            .copy_from(&xi.fixed_rows::<3>(0));
        m
    }

    /// Small adjoint `ad(xi)` (lietorch `Sim3::adj`).
    pub fn small_adjoint(xi: &Vector7) -> Matrix7 {
        let tau_v = xi.fixed_rows::<3>(0).into_owned();
        let tau = so3::hat(&tau_v);
        let phi = so3::hat(&xi.fixed_rows::<3>(3).into_owned());
        let sigma = xi[6];
        let mut ad = Matrix7::zeros();
        ad.fixed_view_mut::<3, 3>(0, 0)
            .copy_from(&(phi + Matrix3::identity() * sigma));
        ad.fixed_view_mut::<3, 3>(0, 3).copy_from(&tau);
        ad.fixed_view_mut::<3, 1>(0, 6).copy_from(&(-tau_v));
        ad.fixed_view_mut::<3, 3>(3, 3).copy_from(&phi);
        ad
    }

    /// Jacobian of `Exp(d) * p` at `d = 0` w.r.t. the left tangent perturbation
    /// `d = [tau phi sigma]`, where `p` is the *already transformed* point
    /// (lietorch `Sim3::act_jacobian`): `[I, -[p]x, p]`.
    pub fn act_jacobian(p: &Vector3<f64>) -> Matrix3x7 {
        let mut j = Matrix3x7::zeros();
        j.fixed_view_mut::<3, 3>(0, 0)
            .copy_from(&Matrix3::identity());
        j.fixed_view_mut::<3, 3>(0, 3).copy_from(&so3::hat(&(-p)));
        j.fixed_view_mut::<3, 1>(0, 6).copy_from(p);
        j
    }

    /// Transforms `p` and returns `(q, J)` with `q = T p` and
    /// `J = d/dd (Exp(d) T) p |_{d=0}` (3x7, left perturbation).
    pub fn act_with_jacobian(&self, p: &Vector3<f64>) -> (Vector3<f64>, Matrix3x7) {
        let q = self.act(p);
        (q, Self::act_jacobian(&q))
    }

    /// Jacobian of `T p` w.r.t. the input point `p` (i.e. `sR`).
    pub fn act_point_jacobian(&self) -> Matrix3<f64> {
        self.rotation_matrix() * self.scale
    }
}

impl Mul<Sim3> for Sim3 {
    type Output = Sim3;
    fn mul(self, rhs: Sim3) -> Sim3 {
        self.compose(&rhs)
    }
}

impl Mul<&Sim3> for &Sim3 {
    type Output = Sim3;
    fn mul(self, rhs: &Sim3) -> Sim3 {
        self.compose(rhs)
    }
}

impl Mul<Vector3<f64>> for Sim3 {
    type Output = Vector3<f64>;
    fn mul(self, rhs: Vector3<f64>) -> Vector3<f64> {
        self.act(&rhs)
    }
}

impl Mul<&Vector3<f64>> for &Sim3 {
    type Output = Vector3<f64>;
    fn mul(self, rhs: &Vector3<f64>) -> Vector3<f64> {
        self.act(rhs)
    }
}
