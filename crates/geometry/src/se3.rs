//! Rigid-body transforms SE(3) in the lietorch layout.

use std::ops::Mul;

use nalgebra::{Matrix3, Matrix3x6, Matrix4, Matrix6, UnitQuaternion, Vector3, Vector4, Vector6};
use serde::{Deserialize, Serialize};

use crate::so3;

/// A rigid-body transform `x -> R x + t` (lietorch `SE3`).
///
/// * data layout (see [`SE3::data`]): `[tx ty tz qx qy qz qw]`
/// * tangent layout: `[tau(3) phi(3)]` (translational part first)
///
/// Serialises as the 7-element lietorch data array.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(from = "[f64; 7]", into = "[f64; 7]")]
pub struct SE3 {
    /// Rotation `R`.
    pub rotation: UnitQuaternion<f64>,
    /// Translation `t`.
    pub translation: Vector3<f64>,
}

impl Default for SE3 {
    fn default() -> Self {
        Self::identity()
    }
}

impl From<[f64; 7]> for SE3 {
    fn from(d: [f64; 7]) -> Self {
        Self::from_data(&d)
    }
}

impl From<SE3> for [f64; 7] {
    fn from(t: SE3) -> Self {
        t.data()
    }
}

impl SE3 {
    /// Tangent-space dimension.
    pub const DOF: usize = 6;
    /// Embedding (data) dimension.
    pub const DATA_DIM: usize = 7;

    /// Identity transform.
    pub fn identity() -> Self {
        Self {
            rotation: UnitQuaternion::identity(),
            translation: Vector3::zeros(),
        }
    }

    /// Builds a transform from a rotation and translation.
    pub fn new(rotation: UnitQuaternion<f64>, translation: Vector3<f64>) -> Self {
        Self {
            rotation,
            translation,
        }
    }

    /// Builds a transform from a 3x3 rotation matrix (assumed orthonormal,
    /// `det = +1`) and a translation.
    pub fn from_rotation_translation(r: &Matrix3<f64>, t: &Vector3<f64>) -> Self {
        Self {
            rotation: so3::quat_from_rotation_matrix(r),
            translation: *t,
        }
    }

    /// Builds a pure translation.
    pub fn from_translation(t: Vector3<f64>) -> Self {
        Self {
            rotation: UnitQuaternion::identity(),
            translation: t,
        }
    }

    /// Builds a transform from lietorch data `[tx ty tz qx qy qz qw]`; the
    /// quaternion is normalised (as lietorch does).
    pub fn from_data(d: &[f64; 7]) -> Self {
        Self {
            rotation: so3::quat_from_xyzw(d[3], d[4], d[5], d[6]),
            translation: Vector3::new(d[0], d[1], d[2]),
        }
    }

    /// lietorch data vector `[tx ty tz qx qy qz qw]`.
    pub fn data(&self) -> [f64; 7] {
        let q = self.rotation.quaternion();
        let t = &self.translation;
        [t.x, t.y, t.z, q.i, q.j, q.k, q.w]
    }

    /// Builds a transform from a homogeneous 4x4 matrix `[[R, t], [0, 1]]`.
    /// The rotation block is assumed to be orthonormal.
    pub fn from_matrix(m: &Matrix4<f64>) -> Self {
        let r: Matrix3<f64> = m.fixed_view::<3, 3>(0, 0).into_owned();
        let t: Vector3<f64> = m.fixed_view::<3, 1>(0, 3).into_owned();
        Self::from_rotation_translation(&r, &t)
    }

    /// Homogeneous 4x4 matrix `[[R, t], [0, 1]]`.
    pub fn matrix(&self) -> Matrix4<f64> {
        let mut m = Matrix4::identity();
        m.fixed_view_mut::<3, 3>(0, 0)
            .copy_from(&self.rotation_matrix());
        m.fixed_view_mut::<3, 1>(0, 3).copy_from(&self.translation);
        m
    }

    /// Rotation matrix `R`.
    pub fn rotation_matrix(&self) -> Matrix3<f64> {
        so3::rotation_matrix(&self.rotation)
    }

    /// Inverse transform `x -> R^T (x - t)`.
    pub fn inverse(&self) -> Self {
        let rinv = self.rotation.conjugate();
        Self {
            rotation: rinv,
            translation: -so3::rotate(&rinv, &self.translation),
        }
    }

    /// Group composition `self * other` (apply `other` first).
    pub fn compose(&self, other: &Self) -> Self {
        Self {
            rotation: so3::quat_mul(&self.rotation, &other.rotation),
            translation: self.translation + so3::rotate(&self.rotation, &other.translation),
        }
    }

    /// Transforms a point: `R p + t`.
    pub fn act(&self, p: &Vector3<f64>) -> Vector3<f64> {
        so3::rotate(&self.rotation, p) + self.translation
    }

    /// Transforms a homogeneous point `[x y z w]`: `[R p + w t, w]`.
    pub fn act4(&self, p: &Vector4<f64>) -> Vector4<f64> {
        let xyz = so3::rotate(&self.rotation, &p.xyz()) + self.translation * p.w;
        Vector4::new(xyz.x, xyz.y, xyz.z, p.w)
    }

    /// Exponential map from the tangent `[tau phi]` (lietorch `SE3::Exp`).
    pub fn exp(xi: &Vector6<f64>) -> Self {
        let tau = xi.fixed_rows::<3>(0).into_owned();
        let phi = xi.fixed_rows::<3>(3).into_owned();
        Self {
            rotation: so3::exp(&phi),
            translation: so3::left_jacobian(&phi) * tau,
        }
    }

    /// Logarithm map to the tangent `[tau phi]` (lietorch `SE3::Log`).
    pub fn log(&self) -> Vector6<f64> {
        let phi = so3::log(&self.rotation);
        let tau = so3::left_jacobian_inverse(&phi) * self.translation;
        let mut xi = Vector6::zeros();
        xi.fixed_rows_mut::<3>(0).copy_from(&tau);
        xi.fixed_rows_mut::<3>(3).copy_from(&phi);
        xi
    }

    /// Adjoint matrix `[[R, [t]x R], [0, R]]` such that
    /// `Exp(Ad_T d) = T Exp(d) T^-1`.
    pub fn adjoint(&self) -> Matrix6<f64> {
        let r = self.rotation_matrix();
        let tx = so3::hat(&self.translation);
        let mut ad = Matrix6::zeros();
        ad.fixed_view_mut::<3, 3>(0, 0).copy_from(&r);
        ad.fixed_view_mut::<3, 3>(0, 3).copy_from(&(tx * r));
        ad.fixed_view_mut::<3, 3>(3, 3).copy_from(&r);
        ad
    }

    /// Applies the adjoint to a tangent vector: `Ad_T d`.
    pub fn adjoint_apply(&self, d: &Vector6<f64>) -> Vector6<f64> {
        self.adjoint() * d
    }

    /// Applies the transposed adjoint to a (co)tangent vector: `Ad_T^T d`
    /// (used to move gradients/Jacobians between frames, lietorch `AdjT`).
    pub fn adjoint_transpose_apply(&self, d: &Vector6<f64>) -> Vector6<f64> {
        self.adjoint().transpose() * d
    }

    /// Left retraction `Exp(d) * self` (lietorch `retr`).
    pub fn retr(&self, d: &Vector6<f64>) -> Self {
        Self::exp(d).compose(self)
    }

    /// Lie-algebra "hat": 4x4 matrix `[[ [phi]x, tau ], [0, 0]]`.
    pub fn hat(xi: &Vector6<f64>) -> Matrix4<f64> {
        let mut m = Matrix4::zeros();
        m.fixed_view_mut::<3, 3>(0, 0)
            .copy_from(&so3::hat(&xi.fixed_rows::<3>(3).into_owned()));
        m.fixed_view_mut::<3, 1>(0, 3)
            .copy_from(&xi.fixed_rows::<3>(0));
        m
    }

    /// Small adjoint `ad(xi) = [[ [phi]x, [tau]x ], [0, [phi]x]]`.
    pub fn small_adjoint(xi: &Vector6<f64>) -> Matrix6<f64> {
        let tau = so3::hat(&xi.fixed_rows::<3>(0).into_owned());
        let phi = so3::hat(&xi.fixed_rows::<3>(3).into_owned());
        let mut ad = Matrix6::zeros();
        ad.fixed_view_mut::<3, 3>(0, 0).copy_from(&phi);
        ad.fixed_view_mut::<3, 3>(0, 3).copy_from(&tau);
        ad.fixed_view_mut::<3, 3>(3, 3).copy_from(&phi);
        ad
    }

    /// Left Jacobian of SE(3) (lietorch `SE3::left_jacobian`, with the `Q`
    /// block of Barfoot).
    pub fn left_jacobian(xi: &Vector6<f64>) -> Matrix6<f64> {
        let phi = xi.fixed_rows::<3>(3).into_owned();
        let j = so3::left_jacobian(&phi);
        let q = calc_q(xi);
        let mut out = Matrix6::zeros();
        out.fixed_view_mut::<3, 3>(0, 0).copy_from(&j);
        out.fixed_view_mut::<3, 3>(0, 3).copy_from(&q);
        out.fixed_view_mut::<3, 3>(3, 3).copy_from(&j);
        out
    }

    /// Inverse of [`SE3::left_jacobian`] (lietorch `SE3::left_jacobian_inverse`).
    pub fn left_jacobian_inverse(xi: &Vector6<f64>) -> Matrix6<f64> {
        let phi = xi.fixed_rows::<3>(3).into_owned();
        let jinv = so3::left_jacobian_inverse(&phi);
        let q = calc_q(xi);
        let mut out = Matrix6::zeros();
        out.fixed_view_mut::<3, 3>(0, 0).copy_from(&jinv);
        out.fixed_view_mut::<3, 3>(0, 3)
            .copy_from(&(-jinv * q * jinv));
        out.fixed_view_mut::<3, 3>(3, 3).copy_from(&jinv);
        out
    }

    /// Jacobian of `Exp(d) * p` at `d = 0` w.r.t. the left tangent perturbation
    /// `d = [tau phi]`, where `p` is the *already transformed* point
    /// (lietorch `SE3::act_jacobian`): `[I, -[p]x]`.
    pub fn act_jacobian(p: &Vector3<f64>) -> Matrix3x6<f64> {
        let mut j = Matrix3x6::zeros();
        j.fixed_view_mut::<3, 3>(0, 0)
            .copy_from(&Matrix3::identity());
        j.fixed_view_mut::<3, 3>(0, 3).copy_from(&so3::hat(&(-p)));
        j
    }

    /// Transforms `p` and returns `(q, J)` with `q = T p` and
    /// `J = d/dd (Exp(d) T) p |_{d=0}` (3x6, left perturbation).
    pub fn act_with_jacobian(&self, p: &Vector3<f64>) -> (Vector3<f64>, Matrix3x6<f64>) {
        let q = self.act(p);
        (q, Self::act_jacobian(&q))
    }

    /// Jacobian of `T p` w.r.t. the input point `p` (i.e. `R`).
    pub fn act_point_jacobian(&self) -> Matrix3<f64> {
        self.rotation_matrix()
    }
}

/// lietorch `SE3::calcQ` (Barfoot's `Q` block of the SE(3) left Jacobian).
fn calc_q(xi: &Vector6<f64>) -> Matrix3<f64> {
    let tau = so3::hat(&xi.fixed_rows::<3>(0).into_owned());
    let phi_v = xi.fixed_rows::<3>(3).into_owned();
    let phi = so3::hat(&phi_v);
    let theta = phi_v.norm();
    let theta_pow2 = theta * theta;
    let theta_pow4 = theta_pow2 * theta_pow2;
    let coef1 = if theta < so3::EPS {
        1.0 / 6.0 - (1.0 / 120.0) * theta_pow2
    } else {
        (theta - theta.sin()) / (theta_pow2 * theta)
    };
    let coef2 = if theta < so3::EPS {
        1.0 / 24.0 - (1.0 / 720.0) * theta_pow2
    } else {
        (theta_pow2 + 2.0 * theta.cos() - 2.0) / (2.0 * theta_pow4)
    };
    let coef3 = if theta < so3::EPS {
        1.0 / 120.0 - (1.0 / 2520.0) * theta_pow2
    } else {
        (2.0 * theta - 3.0 * theta.sin() + theta * theta.cos()) / (2.0 * theta_pow4 * theta)
    };
    tau * 0.5
        + (phi * tau + tau * phi + phi * tau * phi) * coef1
        + (phi * phi * tau + tau * phi * phi - phi * tau * phi * 3.0) * coef2
        + (phi * tau * phi * phi + phi * phi * tau * phi) * coef3
}

impl Mul<SE3> for SE3 {
    type Output = SE3;
    fn mul(self, rhs: SE3) -> SE3 {
        self.compose(&rhs)
    }
}

impl Mul<&SE3> for &SE3 {
    type Output = SE3;
    fn mul(self, rhs: &SE3) -> SE3 {
        self.compose(rhs)
    }
}

impl Mul<Vector3<f64>> for SE3 {
    type Output = Vector3<f64>;
    fn mul(self, rhs: Vector3<f64>) -> Vector3<f64> {
        self.act(&rhs)
    }
}

impl Mul<&Vector3<f64>> for &SE3 {
    type Output = Vector3<f64>;
    fn mul(self, rhs: &Vector3<f64>) -> Vector3<f64> {
        self.act(rhs)
    }
}
