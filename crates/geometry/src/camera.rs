//! Pinhole camera model and a `look_at` helper (OpenCV conventions).

use nalgebra::{Matrix2x3, Matrix3, Vector2, Vector3};
use serde::{Deserialize, Serialize};

use crate::{RadTanDistortion, SE3};

/// Pinhole camera intrinsics, the one camera type of rust3r's data sets, SLAM and renderer
/// (OpenCV convention: camera x right, y down, z forward; the centre of pixel `(i, j)` is at
/// image coordinates `(i, j)`).
///
/// `distortion` describes the lens of the images the camera belongs to; the projection
/// methods are those of the ideal pinhole and ignore it (undistort with
/// [`crate::init_undistort_rectify_map`] or [`RadTanDistortion::project`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PinholeCamera {
    /// Focal length in x (pixels).
    pub fx: f64,
    /// Focal length in y (pixels).
    pub fy: f64,
    /// Principal point x (pixels).
    pub cx: f64,
    /// Principal point y (pixels).
    pub cy: f64,
    /// Image width in pixels.
    pub width: u32,
    /// Image height in pixels.
    pub height: u32,
    /// OpenCV radial-tangential distortion of the images; `None` when they are undistorted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub distortion: Option<RadTanDistortion>,
}

impl PinholeCamera {
    /// Creates an undistorted camera from intrinsics and image size.
    pub fn new(fx: f64, fy: f64, cx: f64, cy: f64, width: u32, height: u32) -> Self {
        Self {
            fx,
            fy,
            cx,
            cy,
            width,
            height,
            distortion: None,
        }
    }

    /// The same camera with `distortion`, kept only when some coefficient is non-zero.
    pub fn with_distortion(self, distortion: Option<RadTanDistortion>) -> Self {
        Self {
            distortion: distortion.filter(|d| !d.is_zero()),
            ..self
        }
    }

    /// The same camera for images of `width x height` (the size a calibration without one
    /// is completed with).
    pub fn with_size(self, width: u32, height: u32) -> Self {
        Self {
            width,
            height,
            ..self
        }
    }

    /// Creates a camera from a 3x3 intrinsic matrix `K` (skew is ignored).
    pub fn from_matrix(k: &Matrix3<f64>, width: u32, height: u32) -> Self {
        Self::new(k[(0, 0)], k[(1, 1)], k[(0, 2)], k[(1, 2)], width, height)
    }

    /// Intrinsic matrix `K = [[fx, 0, cx], [0, fy, cy], [0, 0, 1]]`.
    pub fn matrix(&self) -> Matrix3<f64> {
        Matrix3::new(self.fx, 0.0, self.cx, 0.0, self.fy, self.cy, 0.0, 0.0, 1.0)
    }

    /// Inverse intrinsic matrix `K^-1`.
    pub fn inverse_matrix(&self) -> Matrix3<f64> {
        Matrix3::new(
            1.0 / self.fx,
            0.0,
            -self.cx / self.fx,
            0.0,
            1.0 / self.fy,
            -self.cy / self.fy,
            0.0,
            0.0,
            1.0,
        )
    }

    /// Projects a camera-frame point to pixel coordinates
    /// (`u = fx x/z + cx`, `v = fy y/z + cy`). No depth check is made.
    pub fn project(&self, p: &Vector3<f64>) -> Vector2<f64> {
        let iz = 1.0 / p.z;
        Vector2::new(self.fx * p.x * iz + self.cx, self.fy * p.y * iz + self.cy)
    }

    /// Like [`PinholeCamera::project`], but returns `None` when the point is
    /// not in front of the camera (`z <= 0`) or not finite.
    pub fn project_checked(&self, p: &Vector3<f64>) -> Option<Vector2<f64>> {
        if p.z > 0.0 && p.iter().all(|v| v.is_finite()) {
            Some(self.project(p))
        } else {
            None
        }
    }

    /// Jacobian of [`PinholeCamera::project`] w.r.t. the camera-frame point (2x3).
    pub fn project_jacobian(&self, p: &Vector3<f64>) -> Matrix2x3<f64> {
        let iz = 1.0 / p.z;
        let iz2 = iz * iz;
        Matrix2x3::new(
            self.fx * iz,
            0.0,
            -self.fx * p.x * iz2,
            0.0,
            self.fy * iz,
            -self.fy * p.y * iz2,
        )
    }

    /// Back-projects a pixel with the given depth (z) to a camera-frame point.
    pub fn unproject(&self, uv: &Vector2<f64>, depth: f64) -> Vector3<f64> {
        self.ray(uv) * depth
    }

    /// Viewing ray through a pixel, normalised to `z = 1`.
    pub fn ray(&self, uv: &Vector2<f64>) -> Vector3<f64> {
        Vector3::new((uv.x - self.cx) / self.fx, (uv.y - self.cy) / self.fy, 1.0)
    }

    /// Whether the pixel lies inside the image with the given margin, i.e.
    /// `margin <= u <= width - 1 - margin` (same for `v`).
    pub fn contains(&self, uv: &Vector2<f64>, margin: f64) -> bool {
        uv.x >= margin
            && uv.y >= margin
            && uv.x <= self.width as f64 - 1.0 - margin
            && uv.y <= self.height as f64 - 1.0 - margin
    }

    /// Camera for the image resized to `new_width x new_height`
    /// (pixel-centre convention: `c' = (c + 0.5) * s - 0.5`).
    pub fn resized(&self, new_width: u32, new_height: u32) -> Self {
        let sx = new_width as f64 / self.width as f64;
        let sy = new_height as f64 / self.height as f64;
        Self {
            fx: self.fx * sx,
            fy: self.fy * sy,
            cx: (self.cx + 0.5) * sx - 0.5,
            cy: (self.cy + 0.5) * sy - 0.5,
            width: new_width,
            height: new_height,
            ..*self
        }
    }

    /// Camera for the image resized to `new_width x new_height` with every intrinsic scaled
    /// by the size ratio (`c' = c * s`, no half-pixel shift: the convention of COLMAP and
    /// nerfstudio downscaling, unlike [`PinholeCamera::resized`]).
    pub fn scaled(&self, new_width: u32, new_height: u32) -> Self {
        let sx = new_width as f64 / self.width as f64;
        let sy = new_height as f64 / self.height as f64;
        Self {
            fx: self.fx * sx,
            fy: self.fy * sy,
            cx: self.cx * sx,
            cy: self.cy * sy,
            width: new_width,
            height: new_height,
            ..*self
        }
    }

    /// Camera for the crop whose top-left pixel is `(x0, y0)`.
    pub fn cropped(&self, x0: u32, y0: u32, width: u32, height: u32) -> Self {
        Self {
            fx: self.fx,
            fy: self.fy,
            cx: self.cx - x0 as f64,
            cy: self.cy - y0 as f64,
            width,
            height,
            ..*self
        }
    }
}

/// World-to-camera transform of a camera at `eye` looking at `target`
/// (OpenCV convention: camera x right, y down, z forward).
///
/// `up` is the world "up" direction; the camera's y axis points along the
/// projection of `-up`. If `up` is (nearly) parallel to the viewing direction,
/// a fallback up vector (the world axis least aligned with it) is used. If
/// `eye == target` the forward axis defaults to world `+z`.
pub fn look_at(eye: &Vector3<f64>, target: &Vector3<f64>, up: &Vector3<f64>) -> SE3 {
    let mut forward = target - eye;
    if forward.norm() < 1e-12 || !forward.iter().all(|v| v.is_finite()) {
        forward = Vector3::z();
    }
    let z = forward.normalize();
    let mut x = z.cross(up);
    if x.norm() < 1e-9 * up.norm().max(1.0) || !x.iter().all(|v| v.is_finite()) {
        // pick the world axis least aligned with the viewing direction
        let a = z.abs();
        let alt = if a.x <= a.y && a.x <= a.z {
            Vector3::x()
        } else if a.y <= a.z {
            Vector3::y()
        } else {
            Vector3::z()
        };
        x = z.cross(&alt);
    }
    let x = x.normalize();
    let y = z.cross(&x);
    // rows of the world-to-camera rotation are the camera axes in world coordinates
    let r = Matrix3::from_rows(&[x.transpose(), y.transpose(), z.transpose()]);
    let t = -(r * eye);
    SE3::from_rotation_translation(&r, &t)
}
