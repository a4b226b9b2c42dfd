//! SO(3) helpers shared by [`crate::SE3`] and [`crate::Sim3`].
//!
//! All formulas (including the small-angle branches and the `EPS` threshold)
//! follow lietorch's `so3.h` so that results agree with lietorch up to
//! floating-point rounding.

use nalgebra::{Matrix3, Quaternion, UnitQuaternion, Vector3};

/// Threshold used by lietorch (`common.h`: `#define EPS 1e-6`) to switch to
/// Taylor expansions in the exponential / logarithm maps.
pub const EPS: f64 = 1e-6;

/// Skew-symmetric matrix `[v]_x` such that `hat(a) * b == a.cross(&b)`.
#[inline]
pub fn hat(v: &Vector3<f64>) -> Matrix3<f64> {
    Matrix3::new(0.0, -v.z, v.y, v.z, 0.0, -v.x, -v.y, v.x, 0.0)
}

/// Inverse of [`hat`]: extracts `v` from a skew-symmetric matrix.
#[inline]
pub fn vee(m: &Matrix3<f64>) -> Vector3<f64> {
    Vector3::new(m[(2, 1)], m[(0, 2)], m[(1, 0)])
}

/// Builds a unit quaternion from raw `(x, y, z, w)` coefficients (lietorch /
/// Eigen storage order), normalising like lietorch's constructors do.
#[inline]
pub fn quat_from_xyzw(x: f64, y: f64, z: f64, w: f64) -> UnitQuaternion<f64> {
    UnitQuaternion::new_normalize(Quaternion::new(w, x, y, z))
}

/// Hamilton product of two unit quaternions followed by re-normalisation
/// (lietorch normalises in every constructor).
#[inline]
pub fn quat_mul(a: &UnitQuaternion<f64>, b: &UnitQuaternion<f64>) -> UnitQuaternion<f64> {
    UnitQuaternion::new_normalize(a.quaternion() * b.quaternion())
}

/// Rotates `p` by `q` with lietorch's formula
/// `uv = 2 q.vec x p; p + w uv + q.vec x uv`.
#[inline]
pub fn rotate(q: &UnitQuaternion<f64>, p: &Vector3<f64>) -> Vector3<f64> {
    let v = q.quaternion().imag();
    let w = q.quaternion().w;
    let uv = v.cross(p) * 2.0;
    p + uv * w + v.cross(&uv)
}

/// Rotation matrix of a unit quaternion (same expression as Eigen's
/// `toRotationMatrix`).
pub fn rotation_matrix(q: &UnitQuaternion<f64>) -> Matrix3<f64> {
    let q = q.quaternion();
    let (x, y, z, w) = (q.i, q.j, q.k, q.w);
    let tx = 2.0 * x;
    let ty = 2.0 * y;
    let tz = 2.0 * z;
    let twx = tx * w;
    let twy = ty * w;
    let twz = tz * w;
    let txx = tx * x;
    let txy = ty * x;
    let txz = tz * x;
    let tyy = ty * y;
    let tyz = tz * y;
    let tzz = tz * z;
    Matrix3::new(
        1.0 - (tyy + tzz),
        txy - twz,
        txz + twy,
        txy + twz,
        1.0 - (txx + tzz),
        tyz - twx,
        txz - twy,
        tyz + twx,
        1.0 - (txx + tyy),
    )
}

/// Unit quaternion of a rotation matrix (Eigen's Shepperd-style conversion).
///
/// The input is assumed to be a proper rotation; the result is normalised.
pub fn quat_from_rotation_matrix(m: &Matrix3<f64>) -> UnitQuaternion<f64> {
    let trace = m.trace();
    let mut c = [0.0f64; 3];
    let w;
    if trace > 0.0 {
        let mut t = (trace + 1.0).sqrt();
        w = 0.5 * t;
        t = 0.5 / t;
        c[0] = (m[(2, 1)] - m[(1, 2)]) * t;
        c[1] = (m[(0, 2)] - m[(2, 0)]) * t;
        c[2] = (m[(1, 0)] - m[(0, 1)]) * t;
    } else {
        let mut i = 0;
        if m[(1, 1)] > m[(0, 0)] {
            i = 1;
        }
        if m[(2, 2)] > m[(i, i)] {
            i = 2;
        }
        let j = (i + 1) % 3;
        let k = (j + 1) % 3;
        let mut t = (m[(i, i)] - m[(j, j)] - m[(k, k)] + 1.0).sqrt();
        c[i] = 0.5 * t;
        t = 0.5 / t;
        w = (m[(k, j)] - m[(j, k)]) * t;
        c[j] = (m[(j, i)] + m[(i, j)]) * t;
        c[k] = (m[(k, i)] + m[(i, k)]) * t;
    }
    quat_from_xyzw(c[0], c[1], c[2], w)
}

/// SO(3) exponential map (lietorch `SO3::Exp`).
pub fn exp(phi: &Vector3<f64>) -> UnitQuaternion<f64> {
    let theta2 = phi.norm_squared();
    let theta = theta2.sqrt();
    let (imag_factor, real_factor) = if theta < EPS {
        let theta4 = theta2 * theta2;
        (
            0.5 - (1.0 / 48.0) * theta2 + (1.0 / 3840.0) * theta4,
            1.0 - (1.0 / 8.0) * theta2 + (1.0 / 384.0) * theta4,
        )
    } else {
        ((0.5 * theta).sin() / theta, (0.5 * theta).cos())
    };
    UnitQuaternion::new_normalize(Quaternion::new(
        real_factor,
        imag_factor * phi.x,
        imag_factor * phi.y,
        imag_factor * phi.z,
    ))
}

/// SO(3) logarithm map (lietorch `SO3::Log`, atan-based, Hertzberg et al.).
pub fn log(q: &UnitQuaternion<f64>) -> Vector3<f64> {
    let vec = q.quaternion().imag();
    let w = q.quaternion().w;
    let squared_n = vec.norm_squared();
    let two_atan_nbyw_by_n = if squared_n < EPS * EPS {
        let squared_w = w * w;
        2.0 / w - (2.0 / 3.0) * squared_n / (w * squared_w)
    } else {
        let n = squared_n.sqrt();
        if w.abs() < EPS {
            if w > 0.0 {
                std::f64::consts::PI / n
            } else {
                -std::f64::consts::PI / n
            }
        } else {
            2.0 * (n / w).atan() / n
        }
    };
    vec * two_atan_nbyw_by_n
}

/// Left Jacobian of SO(3) (lietorch `SO3::left_jacobian`).
pub fn left_jacobian(phi: &Vector3<f64>) -> Matrix3<f64> {
    let big_phi = hat(phi);
    let theta2 = phi.norm_squared();
    let theta = theta2.sqrt();
    let coef1 = if theta < EPS {
        0.5 - (1.0 / 24.0) * theta2
    } else {
        (1.0 - theta.cos()) / theta2
    };
    let coef2 = if theta < EPS {
        1.0 / 6.0 - (1.0 / 120.0) * theta2
    } else {
        (theta - theta.sin()) / (theta2 * theta)
    };
    Matrix3::identity() + big_phi * coef1 + big_phi * big_phi * coef2
}

/// Inverse of the left Jacobian of SO(3) (lietorch `SO3::left_jacobian_inverse`).
pub fn left_jacobian_inverse(phi: &Vector3<f64>) -> Matrix3<f64> {
    let big_phi = hat(phi);
    let theta = phi.norm();
    let half_theta = 0.5 * theta;
    let coef2 = if theta < EPS {
        1.0 / 12.0
    } else {
        (1.0 - theta * half_theta.cos() / (2.0 * half_theta.sin())) / (theta * theta)
    };
    Matrix3::identity() - big_phi * 0.5 + big_phi * big_phi * coef2
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matrix_quaternion_round_trip() {
        for phi in [
            Vector3::new(0.1, -0.2, 0.3),
            Vector3::new(3.0, 0.1, -0.05),
            Vector3::new(0.0, 3.1, 0.0),
            Vector3::new(-0.01, 0.0, 3.1),
        ] {
            let q = exp(&phi);
            let r = rotation_matrix(&q);
            assert!((r - q.to_rotation_matrix().into_inner()).norm() < 1e-14);
            let q2 = quat_from_rotation_matrix(&r);
            assert!(q2.angle_to(&q) < 1e-12);
            let p = Vector3::new(0.3, -1.2, 2.0);
            assert!((rotate(&q, &p) - r * p).norm() < 1e-14);
        }
    }

    #[test]
    fn jacobian_inverse_is_inverse() {
        for phi in [
            Vector3::new(0.1, -0.2, 0.3),
            Vector3::new(1e-8, 0.0, 0.0),
            Vector3::zeros(),
        ] {
            let j = left_jacobian(&phi);
            let ji = left_jacobian_inverse(&phi);
            assert!((j * ji - Matrix3::identity()).norm() < 1e-12);
        }
    }
}
