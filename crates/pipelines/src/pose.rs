//! Camera pose and small-parameter optimisation on the host: the rasterizer's gradient with
//! respect to `world_to_camera` turned into a gradient on a left perturbation
//! `W2C ← exp(δ) W2C` (`δ = (ρ, φ)`, translation then rotation, in the camera frame), a
//! per-view Adam, and the transfer of a refined pose's correction to a neighbouring frame.

type M4 = [[f64; 4]; 4];

/// Adam over `N` values (β = 0.9, 0.999, ε = 1e-8), one instance per view.
#[derive(Clone, Copy, Debug)]
pub struct Adam<const N: usize> {
    m: [f64; N],
    v: [f64; N],
    t: i32,
}

impl<const N: usize> Default for Adam<N> {
    fn default() -> Self {
        Self {
            m: [0.0; N],
            v: [0.0; N],
            t: 0,
        }
    }
}

impl<const N: usize> Adam<N> {
    /// The update to add to the parameters for gradient `g` at rates `lr`.
    pub fn step(&mut self, g: &[f64; N], lr: &[f64; N]) -> [f64; N] {
        let (b1, b2, eps): (f64, f64, f64) = (0.9, 0.999, 1e-8);
        self.t += 1;
        let c1 = 1.0 - b1.powi(self.t);
        let c2 = 1.0 - b2.powi(self.t);
        let mut out = [0.0; N];
        for k in 0..N {
            let gk = if g[k].is_finite() { g[k] } else { 0.0 };
            self.m[k] = b1 * self.m[k] + (1.0 - b1) * gk;
            self.v[k] = b2 * self.v[k] + (1.0 - b2) * gk * gk;
            out[k] = -lr[k] * (self.m[k] / c1) / ((self.v[k] / c2).sqrt() + eps);
        }
        out
    }
}

/// `∂L/∂δ = (g₃, Σ_j m_j × g_j)` for the left perturbation of `w2c` (columns `m_j` of its top
/// three rows), from `g = ∂L/∂ w2c[0..3]`.
pub fn tangent_gradient(w2c: &M4, g: &[[f32; 4]; 3]) -> [f64; 6] {
    let mut out = [0.0; 6];
    for r in 0..3 {
        out[r] = g[r][3] as f64;
    }
    for j in 0..4 {
        let m = [w2c[0][j], w2c[1][j], w2c[2][j]];
        let gj = [g[0][j] as f64, g[1][j] as f64, g[2][j] as f64];
        let c = cross(m, gj);
        for k in 0..3 {
            out[3 + k] += c[k];
        }
    }
    out
}

fn cross(a: [f64; 3], b: [f64; 3]) -> [f64; 3] {
    [
        a[1] * b[2] - a[2] * b[1],
        a[2] * b[0] - a[0] * b[2],
        a[0] * b[1] - a[1] * b[0],
    ]
}

/// Rodrigues' rotation of `φ`.
pub fn so3_exp(phi: [f64; 3]) -> [[f64; 3]; 3] {
    let th = (phi[0] * phi[0] + phi[1] * phi[1] + phi[2] * phi[2]).sqrt();
    let k = [
        [0.0, -phi[2], phi[1]],
        [phi[2], 0.0, -phi[0]],
        [-phi[1], phi[0], 0.0],
    ];
    let (a, b) = if th < 1e-8 {
        (1.0, 0.5)
    } else {
        (th.sin() / th, (1.0 - th.cos()) / (th * th))
    };
    let mut r = [[0.0; 3]; 3];
    for i in 0..3 {
        for j in 0..3 {
            let kk: f64 = (0..3).map(|l| k[i][l] * k[l][j]).sum();
            r[i][j] = if i == j { 1.0 } else { 0.0 } + a * k[i][j] + b * kk;
        }
    }
    r
}

/// `[exp(φ) R, exp(φ) t + ρ]` for `δ = (ρ, φ)`.
pub fn apply_left(w2c: &M4, delta: &[f64; 6]) -> M4 {
    let r = so3_exp([delta[3], delta[4], delta[5]]);
    let mut out = [[0.0; 4]; 4];
    for i in 0..3 {
        for j in 0..4 {
            out[i][j] = (0..3).map(|l| r[i][l] * w2c[l][j]).sum::<f64>();
        }
        out[i][3] += delta[i];
    }
    out[3] = [0.0, 0.0, 0.0, 1.0];
    out
}

/// `a · b` of 4x4 transforms.
pub fn mul(a: &M4, b: &M4) -> M4 {
    let mut out = [[0.0; 4]; 4];
    for i in 0..4 {
        for j in 0..4 {
            out[i][j] = (0..4).map(|l| a[i][l] * b[l][j]).sum();
        }
    }
    out
}

/// Inverse of a rigid transform (`rust3r_io::scene::rigid_inverse`).
pub use rust3r_io::scene::rigid_inverse;

/// The pose of a frame whose unrefined pose is `frame`, given a neighbour's unrefined pose
/// `before` and refined pose `after` (all world-to-camera): the neighbour's correction as a
/// world-frame transform, `frame · before⁻¹ · after` (drift is a motion of the world seen from
/// the trajectory, shared by neighbouring frames).
pub fn transfer(before: &M4, after: &M4, frame: &M4) -> M4 {
    mul(&mul(frame, &rigid_inverse(before)), after)
}

/// Rotation angle (radians) and translation distance between two world-to-camera poses'
/// camera centres and orientations.
pub fn pose_error(a: &M4, b: &M4) -> (f64, f64) {
    let d = mul(a, &rigid_inverse(b));
    let tr = d[0][0] + d[1][1] + d[2][2];
    let angle = ((tr - 1.0) / 2.0).clamp(-1.0, 1.0).acos();
    let ca = rigid_inverse(a);
    let cb = rigid_inverse(b);
    let dist = (0..3)
        .map(|k| (ca[k][3] - cb[k][3]).powi(2))
        .sum::<f64>()
        .sqrt();
    (angle, dist)
}

/// The pose at fraction `t` (0 at `a`, 1 at `b`) between two world-to-camera poses: the
/// camera-to-world rotations slerped and the camera centres interpolated linearly.
pub fn interpolate(a: &M4, b: &M4, t: f64) -> M4 {
    use nalgebra::{Matrix3, Rotation3, UnitQuaternion, Vector3};
    let (ca, cb) = (rigid_inverse(a), rigid_inverse(b));
    let rot = |m: &M4| {
        UnitQuaternion::from_rotation_matrix(&Rotation3::from_matrix_unchecked(Matrix3::from_fn(
            |r, c| m[r][c],
        )))
    };
    let (qa, qb) = (rot(&ca), rot(&cb));
    // Shortest arc; opposite rotations (no unique arc) fall back to a.
    let q = qa.try_slerp(&qb, t, 1e-12).unwrap_or(qa);
    let r = q.to_rotation_matrix();
    let centre = Vector3::from_fn(|k, _| (1.0 - t) * ca[k][3] + t * cb[k][3]);
    let mut c2w = [[0.0; 4]; 4];
    for i in 0..3 {
        for j in 0..3 {
            c2w[i][j] = r[(i, j)];
        }
        c2w[i][3] = centre[i];
    }
    c2w[3][3] = 1.0;
    rigid_inverse(&c2w)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// World-to-camera of a camera at `centre` turned by `angle` about z (camera to world).
    fn w2c(angle: f64, centre: [f64; 3]) -> M4 {
        let (s, c) = angle.sin_cos();
        let c2w = [
            [c, -s, 0.0, centre[0]],
            [s, c, 0.0, centre[1]],
            [0.0, 0.0, 1.0, centre[2]],
            [0.0, 0.0, 0.0, 1.0],
        ];
        rigid_inverse(&c2w)
    }

    #[test]
    fn interpolation_matches_a_hand_computed_pose() {
        // From the identity at the origin to 90 degrees about z at (2, 0, 4): a quarter of the
        // way is 22.5 degrees about z at (0.5, 0, 1). By hand, camera to world:
        // [[cos 22.5, -sin 22.5, 0, 0.5], [sin 22.5, cos 22.5, 0, 0], [0, 0, 1, 1]].
        let a = w2c(0.0, [0.0; 3]);
        let b = w2c(std::f64::consts::FRAC_PI_2, [2.0, 0.0, 4.0]);
        let got = rigid_inverse(&interpolate(&a, &b, 0.25));
        let (c, s) = (0.923_879_532_511_286_7, 0.382_683_432_365_089_8);
        let want = [
            [c, -s, 0.0, 0.5],
            [s, c, 0.0, 0.0],
            [0.0, 0.0, 1.0, 1.0],
            [0.0, 0.0, 0.0, 1.0],
        ];
        for r in 0..4 {
            for k in 0..4 {
                let e = (got[r][k] - want[r][k]).abs();
                assert!(e < 1e-12, "[{r}][{k}]: {} vs {}", got[r][k], want[r][k]);
            }
        }
        // The ends are the neighbours themselves.
        for (t, m) in [(0.0, a), (1.0, b)] {
            let p = interpolate(&a, &b, t);
            let (angle, dist) = pose_error(&p, &m);
            assert!(angle < 1e-9 && dist < 1e-12, "t = {t}: {angle} {dist}");
        }
    }
}
