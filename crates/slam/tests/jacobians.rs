//! Finite-difference checks of every residual Jacobian (tracking and back end).

use nalgebra::{DMatrix, Vector3, Vector4};
use rust3r_geometry::{PinholeCamera, Sim3, Vector7};
use rust3r_slam::residuals::{
    calib_residual, plane_residual, ray_dist, ray_dist_residual, world_point_jacobian,
};

const H: f64 = 1e-6;

fn poses() -> Vec<Sim3> {
    vec![
        Sim3::identity(),
        Sim3::new(
            nalgebra::UnitQuaternion::from_euler_angles(0.2, -0.3, 0.1),
            Vector3::new(0.1, -0.2, 0.3),
            1.3,
        ),
        Sim3::new(
            nalgebra::UnitQuaternion::from_euler_angles(-0.5, 0.05, 0.9),
            Vector3::new(-0.4, 0.1, 0.05),
            0.8,
        ),
    ]
}

/// Central differences of `f(Exp(d) T)` w.r.t. `d` at 0.
fn numeric(t: &Sim3, rows: usize, f: impl Fn(&Sim3) -> Vec<f64>) -> DMatrix<f64> {
    let mut j = DMatrix::zeros(rows, 7);
    for k in 0..7 {
        let mut d = Vector7::zeros();
        d[k] = H;
        let fp = f(&t.retr(&d));
        d[k] = -H;
        let fm = f(&t.retr(&d));
        for r in 0..rows {
            j[(r, k)] = (fp[r] - fm[r]) / (2.0 * H);
        }
    }
    j
}

fn assert_close(analytic: &DMatrix<f64>, numeric: &DMatrix<f64>, what: &str) {
    let scale = numeric.abs().max().max(1.0);
    let err = (analytic - numeric).abs().max();
    assert!(
        err < 1e-5 * scale,
        "{what}: analytic\n{analytic}\nnumeric\n{numeric}\nmax error {err}"
    );
}

#[test]
fn calibrated_residual_jacobian_matches_finite_differences() {
    let cam = PinholeCamera::new(525.0, 520.0, 319.5, 239.5, 640, 480);
    let x = Vector3::new(0.3, -0.2, 2.0);
    let meas = Vector3::new(300.0, 200.0, 0.7);
    for t in poses() {
        let y = t.act(&x);
        let (_, ja) = calib_residual(&cam, &meas, &y);
        let jn = numeric(&t, 3, |tt| {
            calib_residual(&cam, &meas, &tt.act(&x))
                .0
                .iter()
                .copied()
                .collect()
        });
        assert_close(
            &DMatrix::from_iterator(3, 7, ja.iter().copied()),
            &jn,
            "pixel + log-depth",
        );
    }
}

#[test]
fn plane_residual_jacobian_matches_finite_differences() {
    let n = Vector3::new(0.2, -0.5, -1.0).normalize();
    let xq = Vector3::new(0.1, 0.1, 1.9);
    let x = Vector3::new(0.3, -0.2, 2.0);
    for t in poses() {
        let (_, ja) = plane_residual(&n, &xq, &t.act(&x));
        let jn = numeric(&t, 1, |tt| vec![plane_residual(&n, &xq, &tt.act(&x)).0]);
        assert_close(
            &DMatrix::from_iterator(1, 7, ja.iter().copied()),
            &jn,
            "point-to-plane",
        );
    }
}

#[test]
fn ray_distance_residual_jacobian_matches_finite_differences() {
    let x = Vector3::new(0.3, -0.2, 2.0);
    let meas: Vector4<f64> = ray_dist(&Vector3::new(0.25, -0.1, 2.2));
    for t in poses() {
        let (_, ja) = ray_dist_residual(&meas, &t.act(&x));
        let jn = numeric(&t, 4, |tt| {
            ray_dist_residual(&meas, &tt.act(&x))
                .0
                .iter()
                .copied()
                .collect()
        });
        assert_close(
            &DMatrix::from_iterator(4, 7, ja.iter().copied()),
            &jn,
            "ray + distance",
        );
    }
}

/// Back end: `y = T_WCj^-1 T_WCi X` differentiated w.r.t. both world poses.
#[test]
fn world_pose_jacobians_match_finite_differences() {
    let x = Vector3::new(0.3, -0.2, 2.0);
    let ps = poses();
    for (ti, tj) in [(ps[1], ps[2]), (ps[2], ps[0]), (ps[0], ps[1])] {
        let f = |a: &Sim3, b: &Sim3| -> Vec<f64> {
            b.inverse().compose(a).act(&x).iter().copied().collect()
        };
        let d = world_point_jacobian(&tj.inverse(), &ti.act(&x));
        let ji = numeric(&ti, 3, |tt| f(tt, &tj));
        let jj = numeric(&tj, 3, |tt| f(&ti, tt));
        let da = DMatrix::from_iterator(3, 7, d.iter().copied());
        assert_close(&da, &ji, "d y / d xi_i");
        assert_close(&(-da), &jj, "d y / d xi_j");
    }
}
