//! Synthetic scenes for the SLAM tests: depth rendered analytically by ray casting a room
//! (floor, walls) with a few boxes and spheres, so every pose is fully constrained.
#![allow(dead_code)]

use nalgebra::{Matrix3, UnitQuaternion, Vector3};
use rust3r_geometry::{PinholeCamera, Sim3};
use rust3r_slam::Pointmap;

/// Primitive of the synthetic room.
pub enum Shape {
    /// Plane `n . x = d`.
    Plane(Vector3<f64>, f64),
    /// Sphere centre, radius.
    Sphere(Vector3<f64>, f64),
}

/// A room 6 x 4 x 6 m seen from near its centre, with spheres at different depths.
pub fn room() -> Vec<Shape> {
    vec![
        Shape::Plane(Vector3::new(0.0, 0.0, 1.0), 3.0), // back wall z = 3
        Shape::Plane(Vector3::new(1.0, 0.0, 0.0), 2.0), // right wall x = 2
        Shape::Plane(Vector3::new(-1.0, 0.0, 0.0), 2.5), // left wall x = -2.5
        Shape::Plane(Vector3::new(0.0, 1.0, 0.0), 1.2), // floor y = 1.2
        Shape::Plane(Vector3::new(0.0, -1.0, 0.0), 1.5), // ceiling y = -1.5
        Shape::Sphere(Vector3::new(0.5, 0.3, 2.0), 0.4),
        Shape::Sphere(Vector3::new(-0.8, -0.4, 2.3), 0.5),
        Shape::Sphere(Vector3::new(0.0, 0.8, 1.6), 0.25),
        Shape::Sphere(Vector3::new(1.2, -0.6, 2.5), 0.3),
    ]
}

fn hit(shape: &Shape, o: &Vector3<f64>, d: &Vector3<f64>) -> Option<f64> {
    match shape {
        Shape::Plane(n, dd) => {
            let den = n.dot(d);
            if den.abs() < 1e-12 {
                return None;
            }
            let t = (dd - n.dot(o)) / den;
            (t > 1e-6).then_some(t)
        }
        Shape::Sphere(c, r) => {
            // |o + t d - c|^2 = r^2 with d not normalised.
            let oc = o - c;
            let a = d.norm_squared();
            let b = oc.dot(d);
            let cc = oc.norm_squared() - r * r;
            let disc = b * b - a * cc;
            if disc < 0.0 {
                return None;
            }
            let s = disc.sqrt();
            let (t0, t1) = ((-b - s) / a, (-b + s) / a);
            if t0 > 1e-6 {
                Some(t0)
            } else if t1 > 1e-6 {
                Some(t1)
            } else {
                None
            }
        }
    }
}

/// Depth pointmap of `scene` seen by camera `cam` at camera-to-world pose `t_wc` (rigid).
/// Points farther than `max_depth` are invalid.
pub fn render(scene: &[Shape], cam: &PinholeCamera, t_wc: &Sim3, max_depth: f64) -> Pointmap {
    let (w, h) = (cam.width as usize, cam.height as usize);
    let r = t_wc.rotation_matrix();
    let o = t_wc.translation;
    let mut pm = Pointmap::empty(w, h);
    pm.colors.fill([128; 3]);
    for v in 0..h {
        for u in 0..w {
            let dc = Vector3::new(
                (u as f64 - cam.cx) / cam.fx,
                (v as f64 - cam.cy) / cam.fy,
                1.0,
            );
            let dw = r * dc;
            let mut best = f64::INFINITY;
            for s in scene {
                if let Some(t) = hit(s, &o, &dw) {
                    best = best.min(t);
                }
            }
            // dc has z = 1, so the ray parameter is the depth.
            if best.is_finite() && best <= max_depth {
                let p = dc * best;
                let i = v * w + u;
                pm.points[i] = [p.x as f32, p.y as f32, p.z as f32];
                pm.conf[i] = 1.0;
            }
        }
    }
    pm
}

/// Smooth grey texture of the room at world point `p`, in `[0, 1]`: a few sinusoids of
/// 0.1-0.5 m period, so every surface (the walls' planes included) has image gradients at the
/// test cameras' resolutions.
pub fn texture(p: &Vector3<f64>) -> f64 {
    let (x, y, z) = (p.x, p.y, p.z);
    let s = 0.22 * (5.1 * x + 1.3 * y).sin() * (4.3 * z - 2.1 * y).cos()
        + 0.15 * (11.0 * y + 3.0 * z).sin()
        + 0.1 * (17.0 * x - 13.0 * z + 7.0 * y).sin();
    (0.5 + s).clamp(0.0, 1.0)
}

/// [`render`] with colours from [`texture`] (grey, through `gain`: an exposure change).
pub fn render_textured(
    scene: &[Shape],
    cam: &PinholeCamera,
    t_wc: &Sim3,
    max_depth: f64,
    gain: f64,
) -> Pointmap {
    let mut pm = render(scene, cam, t_wc, max_depth);
    for (i, p) in pm.points.iter().enumerate() {
        if pm.conf[i] > 0.0 {
            let w = t_wc.act(&Vector3::new(p[0] as f64, p[1] as f64, p[2] as f64));
            let g = (255.0 * (gain * texture(&w)).clamp(0.0, 1.0)).round() as u8;
            pm.colors[i] = [g, g, g];
        }
    }
    pm
}

/// A small camera (default 96 x 72, 60 degrees-ish).
pub fn camera(w: u32, h: u32) -> PinholeCamera {
    let f = w as f64 * 0.9;
    PinholeCamera::new(f, f, (w as f64 - 1.0) / 2.0, (h as f64 - 1.0) / 2.0, w, h)
}

/// Rotation from axis-angle.
pub fn rot(axis: [f64; 3], deg: f64) -> UnitQuaternion<f64> {
    UnitQuaternion::from_axis_angle(
        &nalgebra::Unit::new_normalize(Vector3::from(axis)),
        deg.to_radians(),
    )
}

/// Rigid transform.
pub fn se3(axis: [f64; 3], deg: f64, t: [f64; 3]) -> Sim3 {
    Sim3::new(rot(axis, deg), Vector3::from(t), 1.0)
}

/// Rotation error (degrees) and translation error between two transforms.
pub fn pose_error(a: &Sim3, b: &Sim3) -> (f64, f64) {
    let d = a.inverse().compose(b);
    let ang = d.rotation.angle().to_degrees();
    (ang, (a.translation - b.translation).norm())
}

pub fn mat3(q: &UnitQuaternion<f64>) -> Matrix3<f64> {
    q.to_rotation_matrix().into_inner()
}
