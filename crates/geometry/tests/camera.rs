//! Pinhole camera and look_at tests.

use rust3r_geometry::nalgebra::{Matrix3, Vector2, Vector3};
use rust3r_geometry::{PinholeCamera, RadTanDistortion, look_at};

fn cam() -> PinholeCamera {
    PinholeCamera::new(525.0, 520.0, 319.5, 239.5, 640, 480)
}

#[test]
fn project_unproject_round_trip() {
    let c = cam();
    let p = Vector3::new(0.3, -0.2, 2.5);
    let uv = c.project(&p);
    assert!((uv - Vector2::new(525.0 * 0.12 + 319.5, 520.0 * -0.08 + 239.5)).norm() < 1e-12);
    assert!((c.unproject(&uv, 2.5) - p).norm() < 1e-12);
    assert!(c.project_checked(&Vector3::new(0.0, 0.0, -1.0)).is_none());
    assert!(c.project_checked(&p).is_some());
    assert!((c.inverse_matrix() * c.matrix() - Matrix3::identity()).norm() < 1e-15);
    assert_eq!(PinholeCamera::from_matrix(&c.matrix(), 640, 480), c);
    assert!(c.contains(&Vector2::new(0.0, 479.0), 0.0));
    assert!(!c.contains(&Vector2::new(639.5, 10.0), 0.0));
}

#[test]
fn project_jacobian_finite_difference() {
    let c = cam();
    let p = Vector3::new(0.3, -0.2, 2.5);
    let j = c.project_jacobian(&p);
    let h = 1e-6;
    for k in 0..3 {
        let mut e = Vector3::zeros();
        e[k] = h;
        let fd = (c.project(&(p + e)) - c.project(&(p - e))) / (2.0 * h);
        assert!((fd - j.column(k)).norm() < 1e-5);
    }
}

#[test]
fn resized_camera_keeps_rays() {
    let c = cam();
    let r = c.resized(320, 240);
    assert_eq!((r.width, r.height), (320, 240));
    // the corner of the image (-0.5, -0.5) maps to the same ray
    let a = c.ray(&Vector2::new(-0.5, -0.5));
    let b = r.ray(&Vector2::new(-0.5, -0.5));
    assert!((a - b).norm() < 1e-12);
    let cr = c.cropped(10, 20, 100, 100);
    assert!((cr.ray(&Vector2::new(5.0, 5.0)) - c.ray(&Vector2::new(15.0, 25.0))).norm() < 1e-15);
}

#[test]
fn scaled_camera_scales_every_intrinsic_and_keeps_the_distortion() {
    let d = RadTanDistortion::new5(0.1, -0.02, 0.001, -0.002, 0.003);
    let c = cam().with_distortion(Some(d));
    assert_eq!(c.distortion, Some(d));
    assert_eq!(
        cam().with_distortion(Some(RadTanDistortion::default())),
        cam()
    );
    let s = c.scaled(160, 160);
    assert_eq!(
        (s.fx, s.fy, s.cx, s.cy, s.width, s.height),
        (
            131.25,
            173.33333333333331,
            79.875,
            79.83333333333333,
            160,
            160
        )
    );
    assert_eq!(s.distortion, Some(d));
    assert_eq!(c.resized(320, 240).distortion, Some(d));
    assert_eq!(c.cropped(1, 2, 3, 4).distortion, Some(d));
    assert_eq!(cam().with_size(0, 0).with_size(640, 480), cam());
}

#[test]
fn camera_json_without_distortion_reads_and_writes_as_before() {
    let text = r#"{"fx":525.0,"fy":520.0,"cx":319.5,"cy":239.5,"width":640,"height":480}"#;
    let c: PinholeCamera = serde_json::from_str(text).unwrap();
    assert_eq!(c, cam());
    assert_eq!(serde_json::to_string(&c).unwrap(), text);
    let d = cam().with_distortion(Some(RadTanDistortion::new(0.1, 0.0, 0.0, 0.0)));
    let back: PinholeCamera = serde_json::from_str(&serde_json::to_string(&d).unwrap()).unwrap();
    assert_eq!(back, d);
}

#[test]
fn look_at_opencv_convention() {
    let eye = Vector3::new(1.0, 2.0, 3.0);
    let target = Vector3::new(-2.0, 0.5, 1.0);
    let up = Vector3::new(0.0, 0.0, 1.0);
    let t = look_at(&eye, &target, &up);
    // camera centre maps to the origin
    assert!(t.act(&eye).norm() < 1e-12);
    // target lies on the +z axis at its distance
    let pt = t.act(&target);
    assert!(pt.x.abs() < 1e-12 && pt.y.abs() < 1e-12);
    assert!((pt.z - (target - eye).norm()).abs() < 1e-12);
    // world up appears as -y (image up), right-handed frame
    let pu = t.act(&(target + up));
    assert!(pu.y < 0.0 && pu.x.abs() < 1e-12);
    let r = t.rotation_matrix();
    assert!((r.determinant() - 1.0).abs() < 1e-12);
    // camera x axis (right) is forward x up
    let fwd = (target - eye).normalize();
    let right = fwd.cross(&up).normalize();
    assert!((t.act(&(eye + right)) - Vector3::new(1.0, 0.0, 0.0)).norm() < 1e-12);
    // looking down +z with up = -y gives the identity rotation
    let t = look_at(
        &Vector3::zeros(),
        &Vector3::new(0.0, 0.0, 5.0),
        &Vector3::new(0.0, -1.0, 0.0),
    );
    assert!((t.rotation_matrix() - Matrix3::identity()).norm() < 1e-12);
    // degenerate up (parallel to the viewing direction) still gives a valid pose
    let t = look_at(
        &Vector3::zeros(),
        &Vector3::new(0.0, 0.0, 5.0),
        &Vector3::new(0.0, 0.0, 1.0),
    );
    assert!((t.rotation_matrix().determinant() - 1.0).abs() < 1e-12);
    let p = t.act(&Vector3::new(0.0, 0.0, 5.0));
    assert!((p - Vector3::new(0.0, 0.0, 5.0)).norm() < 1e-12);
}
