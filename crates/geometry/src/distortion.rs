//! OpenCV radial-tangential ("plumb bob") lens distortion `(k1, k2, p1, p2[, k3])`,
//! point undistortion and undistort-rectify maps.
//!
//! The algorithms mirror OpenCV (4.x / 5.0, which agree here):
//! `projectPoints` (distortion), `undistortPoints` (fixed-point iteration),
//! `getOptimalNewCameraMatrix` and `initUndistortRectifyMap`.

use nalgebra::{Matrix3, Vector2, Vector3};
use serde::{Deserialize, Serialize};

use crate::PinholeCamera;

/// OpenCV radial-tangential distortion coefficients `(k1, k2, p1, p2, k3)`.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct RadTanDistortion {
    /// Radial coefficient of `r^2`.
    pub k1: f64,
    /// Radial coefficient of `r^4`.
    pub k2: f64,
    /// First tangential coefficient.
    pub p1: f64,
    /// Second tangential coefficient.
    pub p2: f64,
    /// Radial coefficient of `r^6` (0 for the 4-parameter model).
    #[serde(default)]
    pub k3: f64,
}

/// Termination criteria of the iterative undistortion (OpenCV `TermCriteria`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct UndistortCriteria {
    /// Maximum number of fixed-point iterations (`TermCriteria::COUNT`).
    pub max_iter: usize,
    /// Stop once the reprojection error in pixels is below this value
    /// (`TermCriteria::EPS`); `None` disables the check.
    pub epsilon: Option<f64>,
}

impl Default for UndistortCriteria {
    /// OpenCV's default for `undistortPoints`: 5 iterations, no epsilon test.
    fn default() -> Self {
        Self {
            max_iter: 5,
            epsilon: None,
        }
    }
}

impl RadTanDistortion {
    /// Four-parameter model `(k1, k2, p1, p2)`.
    pub fn new(k1: f64, k2: f64, p1: f64, p2: f64) -> Self {
        Self {
            k1,
            k2,
            p1,
            p2,
            k3: 0.0,
        }
    }

    /// Five-parameter model `(k1, k2, p1, p2, k3)`.
    pub fn new5(k1: f64, k2: f64, p1: f64, p2: f64, k3: f64) -> Self {
        Self { k1, k2, p1, p2, k3 }
    }

    /// From an OpenCV coefficient vector of length 4 or 5 (also accepts
    /// longer vectors when every extra coefficient is zero).
    pub fn from_slice(c: &[f64]) -> Option<Self> {
        match c.len() {
            4 => Some(Self::new(c[0], c[1], c[2], c[3])),
            n if n >= 5 && c[5..].iter().all(|&v| v == 0.0) => {
                Some(Self::new5(c[0], c[1], c[2], c[3], c[4]))
            }
            _ => None,
        }
    }

    /// Coefficients as `[k1, k2, p1, p2, k3]`.
    pub fn to_array(&self) -> [f64; 5] {
        [self.k1, self.k2, self.p1, self.p2, self.k3]
    }

    /// Whether all coefficients are zero.
    pub fn is_zero(&self) -> bool {
        self.to_array().iter().all(|&v| v == 0.0)
    }

    /// Distorts normalised image coordinates (`x/z`, `y/z`), as in
    /// OpenCV `projectPoints`.
    pub fn distort(&self, xn: &Vector2<f64>) -> Vector2<f64> {
        let (x, y) = (xn.x, xn.y);
        let r2 = x * x + y * y;
        let r4 = r2 * r2;
        let r6 = r4 * r2;
        let a1 = 2.0 * x * y;
        let a2 = r2 + 2.0 * x * x;
        let a3 = r2 + 2.0 * y * y;
        let cdist = 1.0 + self.k1 * r2 + self.k2 * r4 + self.k3 * r6;
        Vector2::new(
            x * cdist + self.p1 * a1 + self.p2 * a2,
            y * cdist + self.p1 * a3 + self.p2 * a1,
        )
    }

    /// Projects a camera-frame point to distorted pixel coordinates
    /// (OpenCV `projectPoints` with identity pose).
    pub fn project(&self, camera: &PinholeCamera, p: &Vector3<f64>) -> Vector2<f64> {
        let iz = if p.z != 0.0 { 1.0 / p.z } else { 1.0 };
        let d = self.distort(&Vector2::new(p.x * iz, p.y * iz));
        Vector2::new(d.x * camera.fx + camera.cx, d.y * camera.fy + camera.cy)
    }

    /// Undistorts a distorted *pixel* to normalised coordinates with OpenCV's
    /// fixed-point iteration (`undistortPoints` without `R`/`P`).
    pub fn undistort_pixel(
        &self,
        camera: &PinholeCamera,
        uv: &Vector2<f64>,
        criteria: UndistortCriteria,
    ) -> Vector2<f64> {
        let (fx, fy, cx, cy) = (camera.fx, camera.fy, camera.cx, camera.cy);
        let ifx = 1.0 / fx;
        let ify = 1.0 / fy;
        let (u, v) = (uv.x, uv.y);
        let mut x = (u - cx) * ifx;
        let mut y = (v - cy) * ify;
        let (x0, y0) = (x, y);
        let mut error = f64::MAX;
        let mut j = 0usize;
        loop {
            if j >= criteria.max_iter {
                break;
            }
            if criteria.epsilon.is_some_and(|eps| error < eps) {
                break;
            }
            j += 1;
            let r2 = x * x + y * y;
            let icdist = 1.0 / (1.0 + ((self.k3 * r2 + self.k2) * r2 + self.k1) * r2);
            if icdist < 0.0 {
                x = (u - cx) * ifx;
                y = (v - cy) * ify;
                break;
            }
            let delta_x = 2.0 * self.p1 * x * y + self.p2 * (r2 + 2.0 * x * x);
            let delta_y = self.p1 * (r2 + 2.0 * y * y) + 2.0 * self.p2 * x * y;
            x = (x0 - delta_x) * icdist;
            y = (y0 - delta_y) * icdist;
            if criteria.epsilon.is_some() {
                let d = self.distort(&Vector2::new(x, y));
                let xp = d.x * fx + cx;
                let yp = d.y * fy + cy;
                error = ((xp - u).powi(2) + (yp - v).powi(2)).sqrt();
            }
        }
        Vector2::new(x, y)
    }

    /// Undistorts normalised distorted coordinates (inverse of
    /// [`RadTanDistortion::distort`]) with the same fixed-point iteration.
    pub fn undistort(&self, xd: &Vector2<f64>, criteria: UndistortCriteria) -> Vector2<f64> {
        let unit = PinholeCamera::new(1.0, 1.0, 0.0, 0.0, 1, 1);
        self.undistort_pixel(&unit, xd, criteria)
    }
}

/// Equivalent of `cv::undistortPoints(src, camera, dist, noArray(), P, criteria)`:
/// returns normalised coordinates if `new_camera` is `None`, otherwise pixel
/// coordinates in `new_camera`.
pub fn undistort_points(
    camera: &PinholeCamera,
    dist: &RadTanDistortion,
    pixels: &[Vector2<f64>],
    new_camera: Option<&PinholeCamera>,
    criteria: UndistortCriteria,
) -> Vec<Vector2<f64>> {
    pixels
        .iter()
        .map(|uv| {
            let n = dist.undistort_pixel(camera, uv, criteria);
            match new_camera {
                None => n,
                Some(p) => {
                    // OpenCV: xx = P00 x + P01 y + P02, ww = 1 / (P20 x + P21 y + P22)
                    let xx = p.fx * n.x + p.cx;
                    let yy = p.fy * n.y + p.cy;
                    Vector2::new(xx, yy)
                }
            }
        })
        .collect()
}

/// Inscribed (`inner`) and circumscribed (`outer`) rectangles of the
/// undistorted image border in normalised coordinates, as
/// `(x, y, width, height)` (OpenCV `getUndistortRectangles` with a 9x9 grid).
pub fn undistort_rectangles(
    camera: &PinholeCamera,
    dist: &RadTanDistortion,
) -> ([f64; 4], [f64; 4]) {
    const N: usize = 9;
    let w = camera.width as f64;
    let h = camera.height as f64;
    let (mut ix0, mut ix1, mut iy0, mut iy1) = (
        -(f32::MAX as f64),
        f32::MAX as f64,
        -(f32::MAX as f64),
        f32::MAX as f64,
    );
    let (mut ox0, mut ox1, mut oy0, mut oy1) = (
        f32::MAX as f64,
        -(f32::MAX as f64),
        f32::MAX as f64,
        -(f32::MAX as f64),
    );
    for y in 0..N {
        for x in 0..N {
            let uv = Vector2::new(
                x as f64 * (w - 1.0) / (N - 1) as f64,
                y as f64 * (h - 1.0) / (N - 1) as f64,
            );
            let p = dist.undistort_pixel(camera, &uv, UndistortCriteria::default());
            ox0 = ox0.min(p.x);
            ox1 = ox1.max(p.x);
            oy0 = oy0.min(p.y);
            oy1 = oy1.max(p.y);
            if x == 0 {
                ix0 = ix0.max(p.x);
            }
            if x == N - 1 {
                ix1 = ix1.min(p.x);
            }
            if y == 0 {
                iy0 = iy0.max(p.y);
            }
            if y == N - 1 {
                iy1 = iy1.min(p.y);
            }
        }
    }
    (
        [ix0, iy0, ix1 - ix0, iy1 - iy0],
        [ox0, oy0, ox1 - ox0, oy1 - oy0],
    )
}

/// Equivalent of `cv::getOptimalNewCameraMatrix(K, dist, size, alpha)` for a
/// new image of the same size; `alpha = 0` keeps only valid pixels,
/// `alpha = 1` keeps all source pixels.
pub fn optimal_new_camera_matrix(
    camera: &PinholeCamera,
    dist: &RadTanDistortion,
    alpha: f64,
) -> PinholeCamera {
    let (inner, outer) = undistort_rectangles(camera, dist);
    let w = camera.width as f64;
    let h = camera.height as f64;
    let fx0 = (w - 1.0) / inner[2];
    let fy0 = (h - 1.0) / inner[3];
    let cx0 = -fx0 * inner[0];
    let cy0 = -fy0 * inner[1];
    let fx1 = (w - 1.0) / outer[2];
    let fy1 = (h - 1.0) / outer[3];
    let cx1 = -fx1 * outer[0];
    let cy1 = -fy1 * outer[1];
    PinholeCamera::new(
        fx0 * (1.0 - alpha) + fx1 * alpha,
        fy0 * (1.0 - alpha) + fy1 * alpha,
        cx0 * (1.0 - alpha) + cx1 * alpha,
        cy0 * (1.0 - alpha) + cy1 * alpha,
        camera.width,
        camera.height,
    )
}

/// `cv::getOptimalNewCameraMatrix(K, dist, size, alpha = 0)`: the new camera
/// whose whole image is covered by valid (undistorted) pixels.
pub fn optimal_new_camera_matrix_alpha0(
    camera: &PinholeCamera,
    dist: &RadTanDistortion,
) -> PinholeCamera {
    optimal_new_camera_matrix(camera, dist, 0.0)
}

/// Equivalent of `cv::getOptimalNewCameraMatrix(K, dist, size, alpha, size, nullptr,
/// centerPrincipalPoint = true)`: the principal point moves to the image centre
/// `((width - 1) / 2, (height - 1) / 2)` (OpenCV 4.10 and 5.0 alike) and both focal lengths are scaled by one factor `s`, the smallest
/// that keeps only valid pixels (`alpha = 0`) blended towards the largest that keeps every source
/// pixel (`alpha = 1`). The rectangles are those of [`undistort_rectangles`] in the original
/// camera's pixels, as OpenCV computes them (`getUndistortRectangles` with `newCameraMatrix = K`).
///
/// MASt3R-SLAM's calibrated mode undistorts frames to this camera with `alpha = 0`
/// (`config.dataset.center_principle_point: True`); with zero distortion it is still a zoom that
/// centres the principal point.
pub fn optimal_new_camera_matrix_centered(
    camera: &PinholeCamera,
    dist: &RadTanDistortion,
    alpha: f64,
) -> PinholeCamera {
    let (inner, outer) = undistort_rectangles(camera, dist);
    // Normalised rectangles to the camera's pixels (OpenCV: undistortPoints with P = K, then
    // min / max; the map is increasing, so it commutes with min / max).
    let px = |x: f64| camera.fx * x + camera.cx;
    let py = |y: f64| camera.fy * y + camera.cy;
    let rect = |r: [f64; 4]| {
        let (x0, y0) = (px(r[0]), py(r[1]));
        (x0, y0, px(r[0] + r[2]) - x0, py(r[1] + r[3]) - y0)
    };
    let (ix, iy, iw, ih) = rect(inner);
    let (ox, oy, ow, oh) = rect(outer);
    let (cx0, cy0) = (camera.cx, camera.cy);
    let cx = (camera.width as f64 - 1.0) * 0.5;
    let cy = (camera.height as f64 - 1.0) * 0.5;
    let s0 = (cx / (cx0 - ix))
        .max(cy / (cy0 - iy))
        .max(cx / (ix + iw - cx0))
        .max(cy / (iy + ih - cy0));
    let s1 = (cx / (cx0 - ox))
        .min(cy / (cy0 - oy))
        .min(cx / (ox + ow - cx0))
        .min(cy / (oy + oh - cy0));
    let s = s0 * (1.0 - alpha) + s1 * alpha;
    PinholeCamera::new(
        camera.fx * s,
        camera.fy * s,
        cx,
        cy,
        camera.width,
        camera.height,
    )
}

/// Per-pixel lookup table mapping each pixel of the undistorted (new) image
/// to sub-pixel coordinates in the distorted source image
/// (OpenCV `initUndistortRectifyMap` with `CV_32FC1` maps).
#[derive(Debug, Clone, PartialEq)]
pub struct UndistortMap {
    /// Width of the undistorted image.
    pub width: u32,
    /// Height of the undistorted image.
    pub height: u32,
    /// Source x coordinate for each destination pixel (row-major).
    pub map_x: Vec<f32>,
    /// Source y coordinate for each destination pixel (row-major).
    pub map_y: Vec<f32>,
}

impl UndistortMap {
    /// Source coordinates `(x, y)` of destination pixel `(u, v)`.
    pub fn get(&self, u: u32, v: u32) -> (f32, f32) {
        let i = v as usize * self.width as usize + u as usize;
        (self.map_x[i], self.map_y[i])
    }

    /// Bilinear remap of an interleaved `f32` image of `channels` channels
    /// (`src_width x src_height`). Samples falling outside the source are set
    /// to `border`. Not bit-exact with `cv::remap` (which uses fixed point).
    pub fn remap_bilinear(
        &self,
        src: &[f32],
        src_width: u32,
        src_height: u32,
        channels: usize,
        border: f32,
    ) -> Vec<f32> {
        let (sw, sh) = (src_width as usize, src_height as usize);
        assert_eq!(src.len(), sw * sh * channels, "source buffer size mismatch");
        let mut out = vec![border; self.map_x.len() * channels];
        for (i, (&mx, &my)) in self.map_x.iter().zip(&self.map_y).enumerate() {
            if !(mx >= 0.0 && my >= 0.0 && mx <= (sw - 1) as f32 && my <= (sh - 1) as f32) {
                continue;
            }
            let x0 = (mx.floor() as usize).min(sw - 1);
            let y0 = (my.floor() as usize).min(sh - 1);
            let x1 = (x0 + 1).min(sw - 1);
            let y1 = (y0 + 1).min(sh - 1);
            let ax = mx - x0 as f32;
            let ay = my - y0 as f32;
            for c in 0..channels {
                let p = |x: usize, y: usize| src[(y * sw + x) * channels + c];
                let top = p(x0, y0) * (1.0 - ax) + p(x1, y0) * ax;
                let bot = p(x0, y1) * (1.0 - ax) + p(x1, y1) * ax;
                out[i * channels + c] = top * (1.0 - ay) + bot * ay;
            }
        }
        out
    }
}

/// Equivalent of `cv::initUndistortRectifyMap(K, dist, R = I, new_camera,
/// new_size, CV_32FC1)`.
pub fn init_undistort_rectify_map(
    camera: &PinholeCamera,
    dist: &RadTanDistortion,
    new_camera: &PinholeCamera,
) -> UndistortMap {
    init_undistort_rectify_map_with_rotation(camera, dist, &Matrix3::identity(), new_camera)
}

/// Equivalent of `cv::initUndistortRectifyMap(K, dist, R, new_camera,
/// new_size, CV_32FC1)` with a rectification rotation `R`.
pub fn init_undistort_rectify_map_with_rotation(
    camera: &PinholeCamera,
    dist: &RadTanDistortion,
    r: &Matrix3<f64>,
    new_camera: &PinholeCamera,
) -> UndistortMap {
    let (width, height) = (new_camera.width, new_camera.height);
    let ir = (new_camera.matrix() * r)
        .try_inverse()
        .unwrap_or_else(|| Matrix3::repeat(f64::NAN));
    let (u0, v0, fx, fy) = (camera.cx, camera.cy, camera.fx, camera.fy);
    let RadTanDistortion { k1, k2, p1, p2, k3 } = *dist;
    let n = width as usize * height as usize;
    let mut map_x = Vec::with_capacity(n);
    let mut map_y = Vec::with_capacity(n);
    for i in 0..height {
        let fi = i as f64;
        let mut xh = fi * ir[(0, 1)] + ir[(0, 2)];
        let mut yh = fi * ir[(1, 1)] + ir[(1, 2)];
        let mut wh = fi * ir[(2, 1)] + ir[(2, 2)];
        for _j in 0..width {
            let w = 1.0 / wh;
            let x = xh * w;
            let y = yh * w;
            let x2 = x * x;
            let y2 = y * y;
            let r2 = x2 + y2;
            let two_xy = 2.0 * x * y;
            let kr = 1.0 + ((k3 * r2 + k2) * r2 + k1) * r2;
            let u = fx * (x * kr + p1 * two_xy + p2 * (r2 + 2.0 * x2)) + u0;
            let v = fy * (y * kr + p1 * (r2 + 2.0 * y2) + p2 * two_xy) + v0;
            map_x.push(u as f32);
            map_y.push(v as f32);
            xh += ir[(0, 0)];
            yh += ir[(1, 0)];
            wh += ir[(2, 0)];
        }
    }
    UndistortMap {
        width,
        height,
        map_x,
        map_y,
    }
}
