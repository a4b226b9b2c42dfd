//! Residuals of tracking and the back end, with their Jacobians.
//!
//! Every residual compares a measurement of keyframe pixel `q` with a prediction made from a
//! point `X` of another view transformed by a pose `T` (`Y = T X`). Jacobians are taken with
//! respect to the left perturbation `T <- Exp(xi) T`, `xi = [tau(3) phi(3) sigma]` (lietorch),
//! for which `dY/dxi = [I, -[Y]x, Y]` ([`Sim3::act_jacobian`]). Residuals are
//! `measurement - prediction` (MASt3R-SLAM's `r = z - h(x)`), so `J = -dh/dxi`.
//!
//! * [`calib_residual`]: pixel (2) + log-depth (1), MASt3R-SLAM's calibrated residual;
//! * [`plane_residual`]: point-to-plane distance along the keyframe normal (RGB-D addition);
//! * [`ray_dist_residual`]: unit ray (3) + distance (1), MASt3R-SLAM's uncalibrated residual.

use nalgebra::{SMatrix, Vector3};
use rust3r_geometry::{Matrix3x7, PinholeCamera, Sim3};

/// 3x7 Jacobian.
pub type Jac3 = Matrix3x7;
/// 4x7 Jacobian.
pub type Jac4 = SMatrix<f64, 4, 7>;
/// 1x7 Jacobian.
pub type Jac1 = SMatrix<f64, 1, 7>;

/// `dY/dxi` for `Y` the transformed point: `[I, -[Y]x, Y]`.
#[inline]
pub fn point_jacobian(y: &Vector3<f64>) -> Jac3 {
    Sim3::act_jacobian(y)
}

/// Pixel + log-depth measurement of a point in a calibrated camera: `[u, v, ln z]`.
#[inline]
pub fn calib_measurement(cam: &PinholeCamera, p: &Vector3<f64>) -> Vector3<f64> {
    Vector3::new(
        cam.fx * p.x / p.z + cam.cx,
        cam.fy * p.y / p.z + cam.cy,
        p.z.ln(),
    )
}

/// Whether a point projects into the image enlarged by `-border` pixels (MASt3R-SLAM's
/// `project_calib` validity, `border` negative allows points outside) with depth above `z_eps`.
#[inline]
pub fn projection_valid(cam: &PinholeCamera, y: &Vector3<f64>, border: f64, z_eps: f64) -> bool {
    if !(y.z > z_eps) {
        return false;
    }
    let m = calib_measurement(cam, y);
    m.x >= border
        && m.x <= cam.width as f64 - 1.0 - border
        && m.y >= border
        && m.y <= cam.height as f64 - 1.0 - border
}

/// Calibrated residual `meas - [u, v, ln z](T X)` and its Jacobian (3x7) for `y = T X`.
///
/// `meas` is `[u_q, v_q, ln z_q]` of the keyframe pixel.
#[inline]
pub fn calib_residual(
    cam: &PinholeCamera,
    meas: &Vector3<f64>,
    y: &Vector3<f64>,
) -> (Vector3<f64>, Jac3) {
    let (r, dh) = calib_residual_dy(cam, meas, y);
    (r, -(dh * point_jacobian(y)))
}

/// [`calib_residual`] with the derivative of the *prediction* with respect to `y` (3x3)
/// instead of the pose Jacobian: `dr/dxi = -dh/dy * dy/dxi`.
#[inline]
pub fn calib_residual_dy(
    cam: &PinholeCamera,
    meas: &Vector3<f64>,
    y: &Vector3<f64>,
) -> (Vector3<f64>, nalgebra::Matrix3<f64>) {
    let iz = 1.0 / y.z;
    let pred = Vector3::new(
        cam.fx * y.x * iz + cam.cx,
        cam.fy * y.y * iz + cam.cy,
        y.z.ln(),
    );
    let r = meas - pred;
    // dh/dY
    let dh = nalgebra::Matrix3::new(
        cam.fx * iz,
        0.0,
        -cam.fx * y.x * iz * iz,
        0.0,
        cam.fy * iz,
        -cam.fy * y.y * iz * iz,
        0.0,
        0.0,
        iz,
    );
    (r, dh)
}

/// Point-to-plane residual `n . (X_q - y)` and its Jacobian (1x7) for `y = T X`, where `X_q`
/// and the unit normal `n` belong to the keyframe pixel.
#[inline]
pub fn plane_residual(n: &Vector3<f64>, xq: &Vector3<f64>, y: &Vector3<f64>) -> (f64, Jac1) {
    let r = n.dot(&(xq - y));
    (r, -(n.transpose() * point_jacobian(y)))
}

/// Ray + distance of a point: `[X/|X|, |X|]`.
#[inline]
pub fn ray_dist(p: &Vector3<f64>) -> nalgebra::Vector4<f64> {
    let d = p.norm();
    nalgebra::Vector4::new(p.x / d, p.y / d, p.z / d, d)
}

/// Uncalibrated residual `rd(X_q) - rd(y)` (MASt3R-SLAM `point_to_ray_dist`) and its
/// Jacobian (4x7) for `y = T X`.
#[inline]
pub fn ray_dist_residual(
    meas: &nalgebra::Vector4<f64>,
    y: &Vector3<f64>,
) -> (nalgebra::Vector4<f64>, Jac4) {
    let (r, dh) = ray_dist_residual_dy(meas, y);
    (r, -(dh * point_jacobian(y)))
}

/// [`ray_dist_residual`] with `dh/dy` (4x3) instead of the pose Jacobian.
#[inline]
pub fn ray_dist_residual_dy(
    meas: &nalgebra::Vector4<f64>,
    y: &Vector3<f64>,
) -> (nalgebra::Vector4<f64>, SMatrix<f64, 4, 3>) {
    let d = y.norm();
    let ray = y / d;
    let r = meas - nalgebra::Vector4::new(ray.x, ray.y, ray.z, d);
    let dray = (nalgebra::Matrix3::identity() - ray * ray.transpose()) / d;
    let mut dh = SMatrix::<f64, 4, 3>::zeros();
    dh.fixed_view_mut::<3, 3>(0, 0).copy_from(&dray);
    dh.fixed_view_mut::<1, 3>(3, 0).copy_from(&ray.transpose());
    (r, dh)
}

/// Huber weight of a whitened residual (MASt3R-SLAM `huber`): 1 inside `k`, `k/|r|` outside.
#[inline]
pub fn huber_weight(r: f64, k: f64) -> f64 {
    let a = r.abs();
    if a < k { 1.0 } else { k / a }
}

/// Jacobians of a relative-pose residual with respect to the two world poses.
///
/// With `T_WCi`, `T_WCj` camera-to-world and `y = T_WCj^-1 T_WCi X` (a point of `i` seen from
/// `j`), perturbing `T_WCi <- Exp(d) T_WCi` moves `y` by `(s_j R_j)^-1 [I, -[P]x, P] d` with
/// `P = T_WCi X` the world point, and perturbing `T_WCj` moves it by the negative of that.
/// Returns `dY/dxi_i` (3x7); `dY/dxi_j = -dY/dxi_i`.
#[inline]
pub fn world_point_jacobian(t_wcj_inv: &Sim3, p_world: &Vector3<f64>) -> Jac3 {
    t_wcj_inv.act_point_jacobian() * point_jacobian(p_world)
}
