//! The pinhole camera the rasterizer renders from.

use std::ops::Deref;

use rust3r_geometry::PinholeCamera;
use rust3r_io::scene::SceneView;
use serde::{Deserialize, Serialize};

use crate::SplatError;

/// Floats in the device-side camera block (see `kernels::project`).
pub const CAM_LEN: usize = 24;

/// A posed pinhole camera, OpenCV convention (x right, y down, z forward): the shared
/// intrinsics and a world-to-camera rigid transform. The intrinsics' fields read through
/// (`camera.fx`); the JSON form is flat (`fx fy cx cy width height world_to_camera`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Camera {
    /// Intrinsics and image size (undistorted: [`Camera::validate`] rejects a distortion).
    #[serde(flatten)]
    pub intrinsics: PinholeCamera,
    /// 4x4 world-to-camera matrix, row-major.
    #[serde(with = "mat4")]
    pub world_to_camera: [[f64; 4]; 4],
}

impl Deref for Camera {
    type Target = PinholeCamera;

    fn deref(&self) -> &PinholeCamera {
        &self.intrinsics
    }
}

mod mat4 {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Mat {
        Nested([[f64; 4]; 4]),
        Flat([f64; 16]),
    }

    pub fn serialize<S: Serializer>(m: &[[f64; 4]; 4], s: S) -> Result<S::Ok, S::Error> {
        m.serialize(s)
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<[[f64; 4]; 4], D::Error> {
        Ok(match Mat::deserialize(d)? {
            Mat::Nested(m) => m,
            Mat::Flat(f) => {
                let mut m = [[0.0; 4]; 4];
                for (i, v) in f.iter().enumerate() {
                    m[i / 4][i % 4] = *v;
                }
                m
            }
        })
    }
}

/// The camera a scene view's image was taken with (its delivered intrinsics and pose).
impl From<&SceneView> for Camera {
    fn from(view: &SceneView) -> Self {
        Self::new(view.camera, view.world_to_camera)
    }
}

impl Camera {
    /// The camera `intrinsics` at pose `world_to_camera`.
    pub fn new(intrinsics: PinholeCamera, world_to_camera: [[f64; 4]; 4]) -> Self {
        Self {
            intrinsics,
            world_to_camera,
        }
    }

    /// Parse the camera JSON of `rust3r render --camera` (`fx fy cx cy width height
    /// world_to_camera`, the matrix row-major as 4 rows or 16 numbers) and [`Camera::validate`] it.
    pub fn from_json(text: &str) -> Result<Self, SplatError> {
        let cam: Camera = serde_json::from_str(text)
            .map_err(|e| SplatError::InvalidCamera(format!("not a valid camera JSON: {e}")))?;
        cam.validate()?;
        Ok(cam)
    }

    /// Check that the camera can be rendered from.
    pub fn validate(&self) -> Result<(), SplatError> {
        let finite = [self.fx, self.fy, self.cx, self.cy]
            .iter()
            .all(|v| v.is_finite())
            && self.world_to_camera.iter().flatten().all(|v| v.is_finite());
        if !finite {
            return Err(SplatError::InvalidCamera(
                "non-finite intrinsics or pose".into(),
            ));
        }
        if self.distortion.is_some() {
            return Err(SplatError::InvalidCamera(
                "the rasterizer renders undistorted images; the camera has a lens distortion"
                    .into(),
            ));
        }
        if self.fx <= 0.0 || self.fy <= 0.0 {
            return Err(SplatError::InvalidCamera(format!(
                "focal lengths must be positive (fx {}, fy {})",
                self.fx, self.fy
            )));
        }
        if self.width == 0 || self.height == 0 {
            return Err(SplatError::InvalidCamera(format!(
                "image size must be non-zero ({}x{})",
                self.width, self.height
            )));
        }
        if self.width > 65535 * 16 || self.height > 65535 * 16 {
            return Err(SplatError::InvalidCamera(
                "image larger than 1M pixels per side".into(),
            ));
        }
        Ok(())
    }

    /// Camera centre in world coordinates: `-R^T t`.
    pub fn center(&self) -> [f64; 3] {
        let m = &self.world_to_camera;
        let mut c = [0.0; 3];
        for (i, ci) in c.iter_mut().enumerate() {
            *ci = -(m[0][i] * m[0][3] + m[1][i] * m[1][3] + m[2][i] * m[2][3]);
        }
        c
    }

    pub fn tiles(&self) -> (u32, u32) {
        (self.width.div_ceil(16), self.height.div_ceil(16))
    }

    /// The device-side camera block.
    pub fn gpu_block(&self, background: [f32; 3], near: f32, far: f32) -> [f32; CAM_LEN] {
        let m = &self.world_to_camera;
        let c = self.center();
        let mut b = [0.0f32; CAM_LEN];
        for r in 0..3 {
            for k in 0..3 {
                b[r * 3 + k] = m[r][k] as f32;
            }
            b[9 + r] = m[r][3] as f32;
            b[16 + r] = c[r] as f32;
            b[19 + r] = background[r];
        }
        b[12] = self.fx as f32;
        b[13] = self.fy as f32;
        b[14] = self.cx as f32;
        b[15] = self.cy as f32;
        b[22] = near;
        b[23] = far;
        b
    }

    /// A camera outside the bounding box of `points` looking at its centre
    /// (from the world -z side, world -y up as in COLMAP/OpenCV captures), with
    /// a 60 degree horizontal field of view, far enough back that the whole box
    /// is in the image in both directions (a tall subject in a wide image is
    /// framed by the vertical field of view). The box is robust: 2nd to 98th
    /// percentile per axis, so a few floaters do not push the camera away.
    pub fn default_for_points(points: &[[f32; 3]], width: u32, height: u32) -> Self {
        let mut lo = [0.0; 3];
        let mut hi = [0.0; 3];
        for a in 0..3 {
            let mut v: Vec<f32> = points
                .iter()
                .map(|m| m[a])
                .filter(|x| x.is_finite())
                .collect();
            if v.is_empty() {
                continue;
            }
            v.sort_by(|x, y| x.total_cmp(y));
            lo[a] = v[(v.len() - 1) * 2 / 100] as f64;
            hi[a] = v[(v.len() - 1) * 98 / 100] as f64;
        }
        let center = [
            (lo[0] + hi[0]) / 2.0,
            (lo[1] + hi[1]) / 2.0,
            (lo[2] + hi[2]) / 2.0,
        ];
        let ext = [
            (hi[0] - lo[0]) / 2.0,
            (hi[1] - lo[1]) / 2.0,
            (hi[2] - lo[2]) / 2.0,
        ];
        let radius = (ext[0] * ext[0] + ext[1] * ext[1] + ext[2] * ext[2])
            .sqrt()
            .max(1e-3);
        let fov = 60f64.to_radians();
        // Square pixels (fx = fy): the vertical half-angle tangent is the horizontal one
        // scaled by the aspect; the sphere around the box must fit the narrower of the two.
        let tan_x = (fov / 2.0).tan();
        let tan_y = tan_x * height.max(1) as f64 / width.max(1) as f64;
        let dist = radius / tan_x.min(tan_y) * 1.1 + ext[2];
        let eye = [center[0], center[1], center[2] - dist];
        Self::look_at(eye, center, [0.0, -1.0, 0.0], fov, width, height)
    }

    /// A camera at `eye` looking at `target` (OpenCV axes, `up` is world up),
    /// with a horizontal field of view of `fov_x` radians.
    pub fn look_at(
        eye: [f64; 3],
        target: [f64; 3],
        up: [f64; 3],
        fov_x: f64,
        width: u32,
        height: u32,
    ) -> Self {
        let sub = |a: [f64; 3], b: [f64; 3]| [a[0] - b[0], a[1] - b[1], a[2] - b[2]];
        let cross = |a: [f64; 3], b: [f64; 3]| {
            [
                a[1] * b[2] - a[2] * b[1],
                a[2] * b[0] - a[0] * b[2],
                a[0] * b[1] - a[1] * b[0],
            ]
        };
        let norm = |a: [f64; 3]| {
            let l = (a[0] * a[0] + a[1] * a[1] + a[2] * a[2]).sqrt().max(1e-300);
            [a[0] / l, a[1] / l, a[2] / l]
        };
        let z = norm(sub(target, eye));
        let mut x = cross(z, up);
        if (x[0] * x[0] + x[1] * x[1] + x[2] * x[2]) < 1e-18 {
            // Looking along `up`: any perpendicular will do.
            x = cross(z, [1.0, 0.0, 0.0]);
            if (x[0] * x[0] + x[1] * x[1] + x[2] * x[2]) < 1e-18 {
                x = cross(z, [0.0, 1.0, 0.0]);
            }
        }
        // Right = forward x up; down = forward x right (OpenCV: x right, y down, z forward).
        let x = norm(x);
        let y = cross(z, x);
        let rows = [x, y, z];
        let mut m = [[0.0; 4]; 4];
        for r in 0..3 {
            for k in 0..3 {
                m[r][k] = rows[r][k];
            }
            m[r][3] = -(rows[r][0] * eye[0] + rows[r][1] * eye[1] + rows[r][2] * eye[2]);
        }
        m[3][3] = 1.0;
        let fx = 0.5 * width as f64 / (0.5 * fov_x).tan();
        let intrinsics = PinholeCamera::new(
            fx,
            fx,
            width as f64 / 2.0,
            height as f64 / 2.0,
            width,
            height,
        );
        Camera::new(intrinsics, m)
    }
}

#[cfg(test)]
mod tests {
    use super::Camera;

    /// The 8 corners of an axis-aligned box.
    fn corners(lo: [f32; 3], hi: [f32; 3]) -> Vec<[f32; 3]> {
        (0..8)
            .map(|i| {
                [
                    if i & 1 == 0 { lo[0] } else { hi[0] },
                    if i & 2 == 0 { lo[1] } else { hi[1] },
                    if i & 4 == 0 { lo[2] } else { hi[2] },
                ]
            })
            .collect()
    }

    /// Pixel coordinates and depth of `p` seen by `cam`.
    fn project(cam: &Camera, p: [f32; 3]) -> (f64, f64, f64) {
        let m = &cam.world_to_camera;
        let c: Vec<f64> = (0..3)
            .map(|r| {
                m[r][0] * p[0] as f64 + m[r][1] * p[1] as f64 + m[r][2] * p[2] as f64 + m[r][3]
            })
            .collect();
        (
            cam.fx * c[0] / c[2] + cam.cx,
            cam.fy * c[1] / c[2] + cam.cy,
            c[2],
        )
    }

    /// Every corner of the box in front of the camera and inside the image; returns the
    /// largest fraction of the half-width / half-height a corner reaches.
    fn assert_framed(lo: [f32; 3], hi: [f32; 3], width: u32, height: u32) -> (f64, f64) {
        let box_points = corners(lo, hi);
        let cam = Camera::default_for_points(&box_points, width, height);
        let (mut reach_x, mut reach_y) = (0.0f64, 0.0f64);
        for p in box_points {
            let (u, v, z) = project(&cam, p);
            assert!(z > 0.0, "corner {p:?} behind the camera (depth {z})");
            assert!(
                (0.0..=width as f64).contains(&u) && (0.0..=height as f64).contains(&v),
                "corner {p:?} projects to ({u:.1}, {v:.1}), outside the {width}x{height} image"
            );
            reach_x = reach_x.max((u - cam.cx).abs() / cam.cx);
            reach_y = reach_y.max((v - cam.cy).abs() / cam.cy);
        }
        (reach_x, reach_y)
    }

    #[test]
    fn camera_json_is_flat_and_a_distortion_is_rejected() {
        let text = r#"{"fx":50,"fy":60.5,"cx":32,"cy":24,"width":64,"height":48,
            "world_to_camera":[1,0,0,0, 0,1,0,0, 0,0,1,5, 0,0,0,1]}"#;
        let cam = Camera::from_json(text).unwrap();
        assert_eq!(
            (cam.fx, cam.fy, cam.cx, cam.cy, cam.width, cam.height),
            (50.0, 60.5, 32.0, 24.0, 64, 48)
        );
        assert_eq!(cam.intrinsics.distortion, None);
        assert_eq!(cam.world_to_camera[2], [0.0, 0.0, 1.0, 5.0]);
        let written = serde_json::to_string(&cam).unwrap();
        assert_eq!(
            written,
            "{\"fx\":50.0,\"fy\":60.5,\"cx\":32.0,\"cy\":24.0,\"width\":64,\"height\":48,\
             \"world_to_camera\":[[1.0,0.0,0.0,0.0],[0.0,1.0,0.0,0.0],[0.0,0.0,1.0,5.0],\
             [0.0,0.0,0.0,1.0]]}"
        );
        assert_eq!(Camera::from_json(&written).unwrap(), cam);
        let distorted = text.replace(
            "\"height\":48,",
            "\"height\":48,\"distortion\":{\"k1\":0.1,\"k2\":0,\"p1\":0,\"p2\":0},",
        );
        let e = Camera::from_json(&distorted).unwrap_err().to_string();
        assert!(e.contains("distortion"), "{e}");
    }

    #[test]
    fn default_camera_frames_a_tall_box_in_a_wide_image() {
        // Biker-like: 0.8 wide, 2 tall, 0.6 deep, rendered at 1280x720.
        let (_, reach_y) = assert_framed([-0.4, -1.0, -0.3], [0.4, 1.0, 0.3], 1280, 720);
        // Framed by the vertical field of view: the box fills a good part of the height.
        assert!(
            reach_y > 0.5,
            "tall box reaches only {reach_y:.2} of the half-height"
        );
    }

    #[test]
    fn default_camera_frames_a_wide_box_in_a_tall_image() {
        let (reach_x, _) = assert_framed([-3.0, -0.5, -1.0], [3.0, 0.5, 1.0], 480, 960);
        assert!(
            reach_x > 0.5,
            "wide box reaches only {reach_x:.2} of the half-width"
        );
    }

    #[test]
    fn default_camera_frames_off_centre_boxes_at_any_aspect() {
        for (w, h) in [(1280, 720), (720, 1280), (64, 64), (2000, 100), (100, 2000)] {
            assert_framed([10.0, -7.0, 3.0], [10.5, -2.0, 3.2], w, h);
            assert_framed([-4.0, 1.0, -9.0], [4.0, 1.1, -8.0], w, h);
        }
    }
}
