//! Pointmaps (per-pixel 3D points in the camera frame) and the front ends that produce them.
//!
//! A [`PointmapFrontEnd`] turns a data-set frame into a [`Pointmap`]: per-pixel points in the
//! camera frame, a confidence per pixel, and a colour per pixel. The MASt3R network
//! (`rust3r_mast3r::frontend`) is one implementation, which also decodes frame pairs
//! ([`PointmapFrontEnd::pairs`], [`crate::pair`]); [`RgbdFrontEnd`] is the one for metric depth
//! cameras.

use nalgebra::Vector3;
use rust3r_geometry::PinholeCamera;
use rust3r_io::datasets::Frame;

use crate::SlamError;

/// Per-pixel 3D points (camera frame), confidences and colours, row-major `[height][width]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Pointmap {
    /// Columns.
    pub width: usize,
    /// Rows.
    pub height: usize,
    /// Points in the camera frame (OpenCV axes). Pixels with confidence 0 are ignored.
    pub points: Vec<[f32; 3]>,
    /// Confidence per pixel (0: no point).
    pub conf: Vec<f32>,
    /// Colour per pixel (texture).
    pub colors: Vec<[u8; 3]>,
}

impl Pointmap {
    /// A `width` x `height` pointmap without points (confidence 0, points at the origin, black).
    pub fn empty(width: usize, height: usize) -> Self {
        let n = width * height;
        Self {
            width,
            height,
            points: vec![[0.0; 3]; n],
            conf: vec![0.0; n],
            colors: vec![[0; 3]; n],
        }
    }

    /// A `width` x `height` pointmap with no pixels yet, room for all of them reserved (filled
    /// row by row with `push`es).
    pub fn with_capacity(width: usize, height: usize) -> Self {
        let n = width * height;
        Self {
            width,
            height,
            points: Vec::with_capacity(n),
            conf: Vec::with_capacity(n),
            colors: Vec::with_capacity(n),
        }
    }

    /// Number of pixels.
    pub fn len(&self) -> usize {
        self.width * self.height
    }

    /// Whether the pointmap has no pixels.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Point of pixel `i` as f64.
    #[inline]
    pub fn point(&self, i: usize) -> Vector3<f64> {
        let p = self.points[i];
        Vector3::new(p[0] as f64, p[1] as f64, p[2] as f64)
    }

    /// Every `step`-th pixel in both directions (pixel `(i, j)` of the result is pixel
    /// `(step i, step j)` of `self`). The matching camera is [`level_camera`].
    pub fn subsample(&self, step: usize) -> Pointmap {
        if step <= 1 {
            return self.clone();
        }
        let w = self.width.div_ceil(step);
        let h = self.height.div_ceil(step);
        let mut out = Pointmap::with_capacity(w, h);
        for v in 0..h {
            for u in 0..w {
                let i = v * step * self.width + u * step;
                out.points.push(self.points[i]);
                out.conf.push(self.conf[i]);
                out.colors.push(self.colors[i]);
            }
        }
        out
    }

    /// Points moved onto the rays of their pixels, keeping their depth (MASt3R-SLAM
    /// `constrain_points_to_ray`): `X = z K^-1 [u v 1]`.
    pub fn constrain_to_rays(&mut self, cam: &PinholeCamera) {
        for v in 0..self.height {
            for u in 0..self.width {
                let i = v * self.width + u;
                let z = self.points[i][2];
                self.points[i] = [
                    ((u as f64 - cam.cx) / cam.fx) as f32 * z,
                    ((v as f64 - cam.cy) / cam.fy) as f32 * z,
                    z,
                ];
            }
        }
    }

    /// Unit normals from central differences of the neighbouring points, oriented towards the
    /// camera. `None` where a neighbour is missing or the neighbours' depths differ by more than
    /// `max_rel_jump` relative to the centre (a depth discontinuity).
    pub fn normals(&self, max_rel_jump: f32) -> Vec<Option<[f32; 3]>> {
        let (w, h) = (self.width, self.height);
        (0..w * h)
            .map(|i| {
                normal_at(
                    &self.points,
                    |j| self.conf[j] > 0.0,
                    w,
                    h,
                    i % w,
                    i / w,
                    max_rel_jump,
                )
            })
            .collect()
    }
}

/// Unit normal of pixel `(u, v)` of a `w x h` point grid from central differences (see
/// [`Pointmap::normals`]); `has(j)` tells whether pixel `j` has a point.
#[inline]
pub fn normal_at(
    points: &[[f32; 3]],
    has: impl Fn(usize) -> bool,
    w: usize,
    h: usize,
    u: usize,
    v: usize,
    max_rel_jump: f32,
) -> Option<[f32; 3]> {
    let i = v * w + u;
    if w < 3 || h < 3 || u == 0 || v == 0 || u == w - 1 || v == h - 1 {
        return None;
    }
    let idx = [i - 1, i + 1, i - w, i + w];
    if !has(i) || idx.iter().any(|&j| !has(j)) {
        return None;
    }
    let z = points[i][2];
    if idx
        .iter()
        .any(|&j| (points[j][2] - z).abs() > max_rel_jump * z)
    {
        return None;
    }
    let p = |j: usize| Vector3::new(points[j][0], points[j][1], points[j][2]);
    let dx = p(i + 1) - p(i - 1);
    let dy = p(i + w) - p(i - w);
    let mut n = dx.cross(&dy);
    let norm = n.norm();
    if !(norm > 0.0) {
        return None;
    }
    n /= norm;
    if n.dot(&p(i)) > 0.0 {
        n = -n;
    }
    Some([n.x, n.y, n.z])
}

/// Camera of a pyramid level made by [`Pointmap::subsample`] with `step`.
pub fn level_camera(cam: &PinholeCamera, step: usize) -> PinholeCamera {
    let s = step as f64;
    PinholeCamera::new(
        cam.fx / s,
        cam.fy / s,
        cam.cx / s,
        cam.cy / s,
        (cam.width as usize).div_ceil(step) as u32,
        (cam.height as usize).div_ceil(step) as u32,
    )
}

/// Source of pointmaps: one per frame, in the frame's camera.
pub trait PointmapFrontEnd: Send {
    /// Short name (`rgbd`, `mast3r`).
    fn name(&self) -> &str;
    /// The pointmap of one frame.
    fn pointmap(&mut self, frame: &Frame) -> Result<Pointmap, SlamError>;
    /// Calibration of the pointmaps when the camera is calibrated (enables the pixel +
    /// log-depth residuals); `None` for uncalibrated pointmaps (ray + distance residuals).
    fn camera(&self) -> Option<PinholeCamera>;
    /// Whether the pointmaps are metric (scale observable, so poses can be SE(3)).
    fn is_metric(&self) -> bool;
    /// The front end's pair decoding, when it has one (MASt3R): frames are then tracked against
    /// the keyframe on network pairs ([`crate::pair`]) when the front end runs on the tracking
    /// thread ([`crate::FrameSource::Inline`]). `None` (the default): tracking uses the frames'
    /// own pointmaps.
    fn pairs(&mut self) -> Option<&mut dyn crate::pair::PairFrontEnd> {
        None
    }
}

/// RGB-D front end: the pointmap is the back-projected depth image (block-averaged by
/// `downsample`), confidence 1 where the depth is valid and 0 elsewhere, colour sampled from the
/// colour image as texture.
///
/// 7-Scenes depth is in the depth camera's frame and not registered to the colour image; the
/// pointmap (and so the trajectory) is that of the depth camera, which is the frame 7-Scenes'
/// ground truth refers to. Colour is only texture and is slightly misaligned there.
#[derive(Debug, Clone)]
pub struct RgbdFrontEnd {
    depth_camera: PinholeCamera,
    camera: PinholeCamera,
    downsample: usize,
    min_depth: f32,
    max_depth: f32,
}

impl RgbdFrontEnd {
    /// Front end for depth images with calibration `depth_intrinsics`.
    pub fn new(
        depth_intrinsics: PinholeCamera,
        downsample: usize,
        min_depth: f64,
        max_depth: f64,
    ) -> Self {
        let s = downsample.max(1);
        let k = &depth_intrinsics;
        // Block (i, j) covers full-resolution pixels s*i .. s*i+s-1, centred at s*i + (s-1)/2.
        let off = (s as f64 - 1.0) / 2.0;
        let camera = PinholeCamera::new(
            k.fx / s as f64,
            k.fy / s as f64,
            (k.cx - off) / s as f64,
            (k.cy - off) / s as f64,
            (k.width as usize / s) as u32,
            (k.height as usize / s) as u32,
        );
        Self {
            depth_camera: depth_intrinsics,
            camera,
            downsample: s,
            min_depth: min_depth as f32,
            max_depth: max_depth as f32,
        }
    }
}

impl PointmapFrontEnd for RgbdFrontEnd {
    fn name(&self) -> &str {
        "rgbd"
    }

    fn pointmap(&mut self, frame: &Frame) -> Result<Pointmap, SlamError> {
        let Some(depth) = frame.depth.as_ref() else {
            return Err(SlamError::InvalidInput(format!(
                "{}: frame {} has no depth image (the rgbd mode needs RGB-D data)",
                frame.rgb_path.display(),
                frame.index
            )));
        };
        let (dw, dh) = (depth.width() as usize, depth.height() as usize);
        if dw != self.depth_camera.width as usize || dh != self.depth_camera.height as usize {
            return Err(SlamError::InvalidInput(format!(
                "{}: depth image is {dw}x{dh} but the calibration is for {}x{}",
                frame.rgb_path.display(),
                self.depth_camera.width,
                self.depth_camera.height
            )));
        }
        let s = self.downsample;
        let (w, h) = (self.camera.width as usize, self.camera.height as usize);
        let cam = self.camera;
        let (rw, rh) = (frame.rgb.width() as f64, frame.rgb.height() as f64);
        let raw = depth.as_raw();
        let mut pm = Pointmap::empty(w, h);
        // Colour texture at the block centre, scaled to the colour image (columns and rows
        // precomputed).
        let (cw, ch) = (frame.rgb.width() as usize, frame.rgb.height() as usize);
        let rgb = frame.rgb.as_raw();
        let col: Vec<usize> = (0..w)
            .map(|u| {
                ((((u * s) as f64 + (s as f64 - 1.0) / 2.0) * rw / dw as f64) as usize).min(cw - 1)
            })
            .collect();
        let row: Vec<usize> = (0..h)
            .map(|v| {
                ((((v * s) as f64 + (s as f64 - 1.0) / 2.0) * rh / dh as f64) as usize).min(ch - 1)
            })
            .collect();
        let rays_x: Vec<f32> = (0..w)
            .map(|u| ((u as f64 - cam.cx) / cam.fx) as f32)
            .collect();
        let (lo_d, hi_d) = (self.min_depth, self.max_depth);
        for v in 0..h {
            let ray_y = ((v as f64 - cam.cy) / cam.fy) as f32;
            let crow = &rgb[row[v] * cw * 3..(row[v] + 1) * cw * 3];
            for u in 0..w {
                // Mean of the valid depths of the block when they agree within 2 %; else invalid
                // (a block straddling a depth edge would make a point floating between surfaces).
                let (mut sum, mut n, mut lo, mut hi) = (0.0f32, 0u32, f32::INFINITY, 0.0f32);
                for dy in 0..s {
                    let line = &raw[(v * s + dy) * dw + u * s..][..s];
                    for &d in line {
                        if d.is_finite() && d >= lo_d && d <= hi_d {
                            sum += d;
                            n += 1;
                            lo = lo.min(d);
                            hi = hi.max(d);
                        }
                    }
                }
                let i = v * w + u;
                if n * 2 > (s * s) as u32 && hi - lo <= 0.02 * lo {
                    let z = sum / n as f32;
                    pm.points[i] = [rays_x[u] * z, ray_y * z, z];
                    pm.conf[i] = 1.0;
                }
                let c = col[u] * 3;
                pm.colors[i] = [crow[c], crow[c + 1], crow[c + 2]];
            }
        }
        Ok(pm)
    }

    fn camera(&self) -> Option<PinholeCamera> {
        Some(self.camera)
    }

    fn is_metric(&self) -> bool {
        true
    }
}
