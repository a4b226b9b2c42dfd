//! SE(3) / Sim(3) tests: exp/log round trips (incl. theta -> 0 and sigma -> 0
//! branches), adjoint identity, group identities, matrix consistency and
//! finite-difference checks of the action Jacobians.

mod common;

use common::{Rng, expm, max_abs4};
use rust3r_geometry::nalgebra::{Matrix3, Matrix4, UnitQuaternion, Vector3, Vector6};
use rust3r_geometry::so3::EPS;
use rust3r_geometry::{SE3, Sim3, Vector7};

fn se3_close(a: &SE3, b: &SE3, tol: f64) -> bool {
    max_abs4(&a.matrix(), &b.matrix()) < tol
}

fn sim3_close(a: &Sim3, b: &Sim3, tol: f64) -> bool {
    max_abs4(&a.matrix(), &b.matrix()) < tol
}

/// Tangents exercising the small-angle branch (theta < EPS), its boundary and
/// ordinary angles.
fn small_angles() -> Vec<f64> {
    vec![
        0.0,
        1e-12,
        1e-9,
        1e-7,
        0.5 * EPS,
        0.999 * EPS,
        EPS,
        1.001 * EPS,
        1e-5,
        1e-3,
        0.3,
        1.5,
        3.0,
    ]
}

#[test]
fn se3_exp_log_round_trip() {
    let mut rng = Rng::new(1);
    for _ in 0..500 {
        let xi = rng.se3_tangent(3.1);
        let back = SE3::exp(&xi).log();
        assert!((back - xi).norm() < 1e-9, "xi {xi:?} back {back:?}");
    }
    for theta in small_angles() {
        let axis = rng.unit3();
        let tau = rng.vec3(1.0);
        let phi = axis * theta;
        let xi = Vector6::new(tau.x, tau.y, tau.z, phi.x, phi.y, phi.z);
        let t = SE3::exp(&xi);
        let back = t.log();
        // lietorch's closed forms lose ~1e-16/theta relative accuracy just above
        // the EPS switch (e.g. (1 - cos theta)/theta^2), i.e. ~1e-10 at theta = EPS
        assert!((back - xi).norm() < 1e-9, "theta {theta}: {:?}", back - xi);
        // exp(log(T)) == T
        assert!(se3_close(&SE3::exp(&back), &t, 1e-9));
    }
    // exp(log(T)) for random T
    for _ in 0..200 {
        let t = rng.se3();
        assert!(se3_close(&SE3::exp(&t.log()), &t, 1e-12));
    }
}

#[test]
fn se3_exp_matches_matrix_exponential() {
    let mut rng = Rng::new(2);
    for _ in 0..200 {
        let xi = rng.se3_tangent(3.1);
        let err = max_abs4(&SE3::exp(&xi).matrix(), &expm(&SE3::hat(&xi)));
        assert!(err < 1e-11, "err {err}");
    }
    for theta in small_angles() {
        let phi = rng.unit3() * theta;
        let tau = rng.vec3(1.0);
        let xi = Vector6::new(tau.x, tau.y, tau.z, phi.x, phi.y, phi.z);
        let err = max_abs4(&SE3::exp(&xi).matrix(), &expm(&SE3::hat(&xi)));
        assert!(err < 1e-9, "theta {theta} err {err}");
    }
}

#[test]
fn se3_known_values() {
    // rotation of +90 deg about z
    let xi = Vector6::new(0.0, 0.0, 0.0, 0.0, 0.0, std::f64::consts::FRAC_PI_2);
    let t = SE3::exp(&xi);
    let p = t.act(&Vector3::new(1.0, 0.0, 0.0));
    assert!((p - Vector3::new(0.0, 1.0, 0.0)).norm() < 1e-15);
    let d = t.data();
    let h = std::f64::consts::FRAC_1_SQRT_2;
    let expected = [0.0, 0.0, 0.0, 0.0, 0.0, h, h];
    for (a, b) in d.iter().zip(expected.iter()) {
        assert!((a - b).abs() < 1e-15);
    }
    // pure translation: Exp([tau, 0]) = translation tau
    let xi = Vector6::new(1.0, -2.0, 3.0, 0.0, 0.0, 0.0);
    let t = SE3::exp(&xi);
    assert_eq!(t.translation, Vector3::new(1.0, -2.0, 3.0));
    assert_eq!(SE3::identity().log(), Vector6::zeros());
}

#[test]
fn sim3_exp_log_round_trip() {
    let mut rng = Rng::new(3);
    for _ in 0..500 {
        let xi = rng.sim3_tangent(3.1, 1.5);
        let back = Sim3::exp(&xi).log();
        assert!((back - xi).norm() < 1e-9, "xi {xi:?} back {back:?}");
    }
    let sigmas = [
        0.0,
        1e-12,
        1e-9,
        1e-7,
        0.999 * EPS,
        EPS,
        1.001 * EPS,
        1e-5,
        1e-3,
        0.5,
        -0.7,
        -1e-7,
    ];
    for &sigma in &sigmas {
        for theta in small_angles() {
            let phi = rng.unit3() * theta;
            let tau = rng.vec3(1.0);
            let xi = Vector7::from_column_slice(&[tau.x, tau.y, tau.z, phi.x, phi.y, phi.z, sigma]);
            let t = Sim3::exp(&xi);
            let back = t.log();
            // Log recomputes sigma = ln(exp(sigma)); right at |sigma| = EPS this can
            // fall on the other side of lietorch's branch switch, where W jumps by
            // ~EPS/2 (C = 1 vs (e^sigma - 1)/sigma), so the error is O(EPS |tau|)
            // there and ~1e-10 elsewhere near the switches.
            let tol = if (sigma.abs() - EPS).abs() < 1e-9 {
                EPS * tau.norm()
            } else {
                1e-9
            };
            assert!(
                (back - xi).norm() < tol,
                "sigma {sigma} theta {theta}: {:?}",
                back - xi
            );
            assert!(sim3_close(&Sim3::exp(&back), &t, 1e-12));
        }
    }
    for _ in 0..200 {
        let t = rng.sim3();
        assert!(sim3_close(&Sim3::exp(&t.log()), &t, 1e-11));
    }
}

#[test]
fn sim3_exp_matches_matrix_exponential() {
    let mut rng = Rng::new(4);
    for _ in 0..200 {
        let xi = rng.sim3_tangent(3.1, 1.5);
        let err = max_abs4(&Sim3::exp(&xi).matrix(), &expm(&Sim3::hat(&xi)));
        assert!(err < 1e-10, "err {err}");
    }
    // Branches. For |sigma| < EPS lietorch sets C = 1 exactly (the true value is
    // (e^sigma - 1)/sigma = 1 + sigma/2 + ...), so the error there is O(sigma).
    let sigmas = [
        0.0,
        1e-12,
        1e-9,
        1e-7,
        0.999 * EPS,
        1.001 * EPS,
        1e-5,
        1e-3,
        0.5,
        -0.7,
    ];
    for &sigma in &sigmas {
        for theta in small_angles() {
            let phi = rng.unit3() * theta;
            let tau = rng.vec3(1.0);
            let xi = Vector7::from_column_slice(&[tau.x, tau.y, tau.z, phi.x, phi.y, phi.z, sigma]);
            let err = max_abs4(&Sim3::exp(&xi).matrix(), &expm(&Sim3::hat(&xi)));
            // (plus ~1e-10 from cancellation just above the switches, see above)
            let tol = 1e-9
                + if sigma.abs() < EPS {
                    sigma.abs() * 2.0
                } else {
                    0.0
                };
            assert!(err < tol, "sigma {sigma} theta {theta} err {err}");
        }
    }
}

#[test]
fn sim3_reduces_to_se3_when_sigma_is_zero() {
    let mut rng = Rng::new(5);
    for _ in 0..100 {
        let xi6 = rng.se3_tangent(3.0);
        let mut xi7 = Vector7::zeros();
        xi7.fixed_rows_mut::<6>(0).copy_from(&xi6);
        let a = SE3::exp(&xi6);
        let b = Sim3::exp(&xi7);
        assert_eq!(b.scale, 1.0);
        assert!(max_abs4(&a.matrix(), &b.matrix()) < 1e-13);
        let l = b.log();
        assert!((l.fixed_rows::<6>(0) - a.log()).norm() < 1e-12);
    }
}

#[test]
fn sim3_w_matrix_continuity_across_branches() {
    let phi = Vector3::new(0.3, -0.2, 0.5);
    // theta branch boundary, sigma != 0
    let s = 0.4;
    let a = Sim3::calc_w(&(Vector3::new(1.0, 0.0, 0.0) * (0.999 * EPS)), s);
    let b = Sim3::calc_w(&(Vector3::new(1.0, 0.0, 0.0) * (1.001 * EPS)), s);
    assert!((a - b).abs().max() < 1e-8);
    // sigma branch boundary (jump of C is ~EPS/2, as in lietorch)
    let a = Sim3::calc_w(&phi, 0.999 * EPS);
    let b = Sim3::calc_w(&phi, 1.001 * EPS);
    assert!((a - b).abs().max() < 1e-6);
    // both zero
    let w = Sim3::calc_w(&Vector3::zeros(), 0.0);
    assert_eq!(w, Matrix3::identity());
}

#[test]
fn se3_adjoint_identity() {
    let mut rng = Rng::new(6);
    for _ in 0..300 {
        let t = rng.se3();
        let d = rng.se3_tangent(2.0) * 0.5;
        let lhs = SE3::exp(&(t.adjoint() * d));
        let rhs = t * SE3::exp(&d) * t.inverse();
        assert!(
            se3_close(&lhs, &rhs, 1e-11),
            "{:?}",
            lhs.matrix() - rhs.matrix()
        );
        // Lie-algebra form: hat(Ad d) = T hat(d) T^-1
        let m = t.matrix() * SE3::hat(&d) * t.inverse().matrix();
        assert!(max_abs4(&SE3::hat(&t.adjoint_apply(&d)), &m) < 1e-11);
    }
    // adjoint of a product is the product of the adjoints, Ad(T^-1) = Ad(T)^-1
    let a = rng.se3();
    let b = rng.se3();
    assert!(((a * b).adjoint() - a.adjoint() * b.adjoint()).abs().max() < 1e-12);
    assert!(
        (a.inverse().adjoint() * a.adjoint() - rust3r_geometry::nalgebra::Matrix6::identity())
            .abs()
            .max()
            < 1e-12
    );
}

#[test]
fn sim3_adjoint_identity() {
    let mut rng = Rng::new(7);
    for _ in 0..300 {
        let t = rng.sim3();
        let d = rng.sim3_tangent(2.0, 1.0) * 0.5;
        let lhs = Sim3::exp(&(t.adjoint() * d));
        let rhs = t * Sim3::exp(&d) * t.inverse();
        assert!(
            sim3_close(&lhs, &rhs, 1e-10),
            "{:?}",
            lhs.matrix() - rhs.matrix()
        );
        let m = t.matrix() * Sim3::hat(&d) * t.inverse().matrix();
        assert!(max_abs4(&Sim3::hat(&t.adjoint_apply(&d)), &m) < 1e-11);
    }
    let a = rng.sim3();
    let b = rng.sim3();
    assert!(((a * b).adjoint() - a.adjoint() * b.adjoint()).abs().max() < 1e-11);
}

#[test]
fn small_adjoint_is_lie_bracket() {
    let mut rng = Rng::new(8);
    for _ in 0..50 {
        let x = rng.se3_tangent(2.0);
        let y = rng.se3_tangent(2.0);
        let bracket = SE3::hat(&x) * SE3::hat(&y) - SE3::hat(&y) * SE3::hat(&x);
        assert!(max_abs4(&SE3::hat(&(SE3::small_adjoint(&x) * y)), &bracket) < 1e-12);
        let x = rng.sim3_tangent(2.0, 1.0);
        let y = rng.sim3_tangent(2.0, 1.0);
        let bracket = Sim3::hat(&x) * Sim3::hat(&y) - Sim3::hat(&y) * Sim3::hat(&x);
        assert!(max_abs4(&Sim3::hat(&(Sim3::small_adjoint(&x) * y)), &bracket) < 1e-12);
    }
}

#[test]
fn se3_group_identities() {
    let mut rng = Rng::new(9);
    let id = SE3::identity();
    for _ in 0..200 {
        let a = rng.se3();
        let b = rng.se3();
        let c = rng.se3();
        let p = rng.vec3(5.0);
        assert!(se3_close(&(a * a.inverse()), &id, 1e-13));
        assert!(se3_close(&(a.inverse() * a), &id, 1e-13));
        assert!(se3_close(&(a * id), &a, 1e-14));
        assert!(se3_close(
            &((a * b).inverse()),
            &(b.inverse() * a.inverse()),
            1e-12
        ));
        assert!(se3_close(&((a * b) * c), &(a * (b * c)), 1e-12));
        assert!(((a * b).act(&p) - a.act(&b.act(&p))).norm() < 1e-12);
        assert!((a.inverse().act(&a.act(&p)) - p).norm() < 1e-12);
        assert!((a * p - a.act(&p)).norm() == 0.0);
        #[allow(clippy::op_ref)]
        let by_ref = &a * &p;
        assert_eq!(by_ref, a.act(&p));
        // matrix consistency
        assert!(max_abs4(&(a * b).matrix(), &(a.matrix() * b.matrix())) < 1e-12);
        assert!(max_abs4(&a.inverse().matrix(), &a.matrix().try_inverse().unwrap()) < 1e-12);
        let ph = a.matrix() * p.push(1.0);
        assert!((ph.xyz() - a.act(&p)).norm() < 1e-12);
        assert!((a.act4(&p.push(2.0)).xyz() - (a.matrix() * p.push(2.0)).xyz()).norm() < 1e-12);
        assert!(se3_close(&SE3::from_matrix(&a.matrix()), &a, 1e-14));
        assert!(se3_close(
            &SE3::from_rotation_translation(&a.rotation_matrix(), &a.translation),
            &a,
            1e-14
        ));
        let r = a.rotation_matrix();
        assert!((r.transpose() * r - Matrix3::identity()).abs().max() < 1e-14);
        assert!((r.determinant() - 1.0).abs() < 1e-14);
        // data round trip
        assert!(se3_close(&SE3::from_data(&a.data()), &a, 1e-14));
    }
}

#[test]
fn sim3_group_identities() {
    let mut rng = Rng::new(10);
    let id = Sim3::identity();
    for _ in 0..200 {
        let a = rng.sim3();
        let b = rng.sim3();
        let c = rng.sim3();
        let p = rng.vec3(5.0);
        assert!(sim3_close(&(a * a.inverse()), &id, 1e-12));
        assert!(sim3_close(&(a.inverse() * a), &id, 1e-12));
        assert!(sim3_close(
            &((a * b).inverse()),
            &(b.inverse() * a.inverse()),
            1e-11
        ));
        assert!(sim3_close(&((a * b) * c), &(a * (b * c)), 1e-11));
        assert!(((a * b).act(&p) - a.act(&b.act(&p))).norm() < 1e-11);
        assert!((a.inverse().act(&a.act(&p)) - p).norm() < 1e-11);
        assert!(max_abs4(&(a * b).matrix(), &(a.matrix() * b.matrix())) < 1e-11);
        assert!(max_abs4(&a.inverse().matrix(), &a.matrix().try_inverse().unwrap()) < 1e-11);
        assert!(((a.matrix() * p.push(1.0)).xyz() - a.act(&p)).norm() < 1e-12);
        let back = Sim3::from_matrix(&a.matrix());
        assert!(sim3_close(&back, &a, 1e-13));
        assert!((back.scale - a.scale).abs() < 1e-13);
        assert!(sim3_close(&Sim3::from_data(&a.data()), &a, 1e-14));
        let r =
            Sim3::from_rotation_translation_scale(&a.rotation_matrix(), &a.translation, a.scale);
        assert!(sim3_close(&r, &a, 1e-14));
    }
    // SE3 embedding
    let t = rng.se3();
    let s = Sim3::from_se3(&t);
    assert!(max_abs4(&s.matrix(), &t.matrix()) == 0.0);
    assert!(se3_close(&s.to_se3(), &t, 1e-300));
}

#[test]
fn retraction_is_left_multiplication() {
    let mut rng = Rng::new(11);
    for _ in 0..100 {
        let t = rng.se3();
        let d = rng.se3_tangent(1.0);
        assert!(se3_close(&t.retr(&d), &(SE3::exp(&d) * t), 1e-15));
        assert!(se3_close(&t.retr(&Vector6::zeros()), &t, 1e-14));
        let s = rng.sim3();
        let d = rng.sim3_tangent(1.0, 0.5);
        assert!(sim3_close(&s.retr(&d), &(Sim3::exp(&d) * s), 1e-15));
        assert!(sim3_close(&s.retr(&Vector7::zeros()), &s, 1e-14));
    }
}

#[test]
fn se3_act_jacobian_finite_difference() {
    let mut rng = Rng::new(12);
    let h = 1e-6;
    for _ in 0..100 {
        let t = rng.se3();
        let p = rng.vec3(3.0);
        let (q, j) = t.act_with_jacobian(&p);
        assert!((q - t.act(&p)).norm() < 1e-15);
        for k in 0..6 {
            let mut d = Vector6::zeros();
            d[k] = h;
            let fd = (t.retr(&d).act(&p) - t.retr(&(-d)).act(&p)) / (2.0 * h);
            assert!(
                (fd - j.column(k)).norm() < 1e-7,
                "col {k}: fd {fd:?} j {:?}",
                j.column(k)
            );
        }
        // Jacobian w.r.t. the point
        let jp = t.act_point_jacobian();
        for k in 0..3 {
            let mut e = Vector3::zeros();
            e[k] = h;
            let fd = (t.act(&(p + e)) - t.act(&(p - e))) / (2.0 * h);
            assert!((fd - jp.column(k)).norm() < 1e-8);
        }
    }
}

#[test]
fn sim3_act_jacobian_finite_difference() {
    let mut rng = Rng::new(13);
    let h = 1e-6;
    for _ in 0..100 {
        let t = rng.sim3();
        let p = rng.vec3(3.0);
        let (_, j) = t.act_with_jacobian(&p);
        for k in 0..7 {
            let mut d = Vector7::zeros();
            d[k] = h;
            let fd = (t.retr(&d).act(&p) - t.retr(&(-d)).act(&p)) / (2.0 * h);
            // central differences of the sigma column cross the |sigma| < EPS
            // branch of W (C = 1), which only affects the translation part at O(h)
            assert!(
                (fd - j.column(k)).norm() < 1e-6,
                "col {k}: fd {fd:?} j {:?}",
                j.column(k)
            );
        }
        let jp = t.act_point_jacobian();
        for k in 0..3 {
            let mut e = Vector3::zeros();
            e[k] = h;
            let fd = (t.act(&(p + e)) - t.act(&(p - e))) / (2.0 * h);
            assert!((fd - jp.column(k)).norm() < 1e-8);
        }
    }
}

#[test]
fn se3_left_jacobian_finite_difference() {
    // Exp(xi + delta) ~= Exp(J_l(xi) delta) Exp(xi)
    let mut rng = Rng::new(14);
    let h = 1e-6;
    for _ in 0..50 {
        let xi = rng.se3_tangent(2.5);
        let jl = SE3::left_jacobian(&xi);
        let jli = SE3::left_jacobian_inverse(&xi);
        assert!(
            (jl * jli - rust3r_geometry::nalgebra::Matrix6::identity())
                .abs()
                .max()
                < 1e-10
        );
        let base_inv = SE3::exp(&xi).inverse();
        for k in 0..6 {
            let mut d = Vector6::zeros();
            d[k] = h;
            let plus = (SE3::exp(&(xi + d)) * base_inv).log();
            let minus = (SE3::exp(&(xi - d)) * base_inv).log();
            let fd = (plus - minus) / (2.0 * h);
            assert!((fd - jl.column(k)).norm() < 1e-7, "col {k}");
        }
    }
    // small-angle branch
    let xi = Vector6::new(0.3, -0.1, 0.2, 1e-8, 0.0, 0.0);
    let jl = SE3::left_jacobian(&xi);
    assert!(
        (jl * SE3::left_jacobian_inverse(&xi) - rust3r_geometry::nalgebra::Matrix6::identity())
            .abs()
            .max()
            < 1e-12
    );
}

#[test]
fn quaternion_normalisation_and_serde() {
    // lietorch normalises quaternions on construction
    let t = SE3::from_data(&[1.0, 2.0, 3.0, 0.0, 0.0, 2.0, 2.0]);
    let h = std::f64::consts::FRAC_1_SQRT_2;
    assert!((t.data()[5] - h).abs() < 1e-15 && (t.data()[6] - h).abs() < 1e-15);
    let json = serde_json::to_string(&t).unwrap();
    let back: SE3 = serde_json::from_str(&json).unwrap();
    assert!(se3_close(&back, &t, 1e-15));
    let s = Sim3::new(
        UnitQuaternion::from_scaled_axis(Vector3::new(0.1, 0.2, 0.3)),
        Vector3::new(1.0, 2.0, 3.0),
        2.5,
    );
    let json = serde_json::to_string(&s).unwrap();
    assert!(json.starts_with('['));
    let back: Sim3 = serde_json::from_str(&json).unwrap();
    assert!(sim3_close(&back, &s, 1e-15));
    let _ = Matrix4::<f64>::identity();
}
