//! One frame: a camera request rendered by the rasterizer and turned into 8-bit RGB (colour,
//! depth or opacity), then JPEG or PNG.

use std::time::Instant;

use rust3r_gpu::Gpu;
use rust3r_io::Splats;
use rust3r_splat::{Camera, GpuSplats, RenderOptions, render_chunks};
use serde::{Deserialize, Serialize};

use crate::ViewerError;

/// Largest width or height the server renders.
pub const MAX_SIDE: u32 = 8192;
/// Largest pixel count the server renders (8K UHD).
pub const MAX_PIXELS: u64 = 7680 * 4320;

/// What a frame shows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RenderMode {
    /// Colour over the background.
    #[default]
    Rgb,
    /// Expected depth (`depth / alpha`), near red to far blue (turbo), over the background.
    Depth,
    /// Accumulated opacity, black (none) to white (opaque).
    Alpha,
}

fn one() -> f32 {
    1.0
}

/// A frame to render: the camera in `rust3r render --camera`'s JSON, and how to show it.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct FrameRequest {
    pub camera: Camera,
    #[serde(default)]
    pub mode: RenderMode,
    /// Background colour, each channel in [0, 1].
    #[serde(default)]
    pub background: [f32; 3],
    /// Factor on every Gaussian's scale (1: as trained).
    #[serde(default = "one")]
    pub splat_scale: f32,
}

impl FrameRequest {
    /// A request for `camera` with the defaults (RGB, black background, scale 1).
    pub fn new(camera: Camera) -> Self {
        Self {
            camera,
            mode: RenderMode::Rgb,
            background: [0.0; 3],
            splat_scale: 1.0,
        }
    }

    /// Reject what cannot or should not be rendered: an invalid camera (non-finite, zero size),
    /// a frame past [`MAX_SIDE`] / [`MAX_PIXELS`], a non-finite background or splat scale.
    pub fn validate(&self) -> Result<(), ViewerError> {
        self.camera.validate()?;
        let (w, h) = (self.camera.width, self.camera.height);
        if w > MAX_SIDE || h > MAX_SIDE || u64::from(w) * u64::from(h) > MAX_PIXELS {
            return Err(ViewerError::Request(format!(
                "{w}x{h} is larger than the viewer renders (at most {MAX_SIDE} a side, {MAX_PIXELS} pixels)"
            )));
        }
        if !self.background.iter().all(|v| v.is_finite()) {
            return Err(ViewerError::Request("non-finite background colour".into()));
        }
        if !(self.splat_scale.is_finite() && (1e-3..=100.0).contains(&self.splat_scale)) {
            return Err(ViewerError::Request(format!(
                "splat scale {} is not in [0.001, 100]",
                self.splat_scale
            )));
        }
        Ok(())
    }
}

/// 8-bit RGB pixels (row-major) as a JPEG at `quality` (1-100), through `jpeg-encoder`.
pub(crate) fn encode_jpeg(
    rgb: &[u8],
    width: u32,
    height: u32,
    quality: u8,
) -> Result<Vec<u8>, ViewerError> {
    let (Ok(w), Ok(h)) = (u16::try_from(width), u16::try_from(height)) else {
        return Err(ViewerError::Encode(format!(
            "{width}x{height} is too large for JPEG"
        )));
    };
    if rgb.len() != width as usize * height as usize * 3 {
        return Err(ViewerError::Encode("pixel buffer of the wrong size".into()));
    }
    let mut out = Vec::with_capacity(rgb.len() / 8);
    jpeg_encoder::Encoder::new(&mut out, quality.clamp(1, 100))
        .encode(rgb, w, h, jpeg_encoder::ColorType::Rgb)
        .map_err(|e| ViewerError::Encode(e.to_string()))?;
    Ok(out)
}

/// A rendered frame, 8-bit RGB, row-major.
#[derive(Clone, Debug)]
pub struct RenderedFrame {
    pub width: u32,
    pub height: u32,
    pub rgb: Vec<u8>,
    /// Rendering and read-back time.
    pub render_ms: f64,
    /// Gaussians that touched the image.
    pub visible: usize,
}

impl RenderedFrame {
    fn image(&self) -> Result<image::RgbImage, ViewerError> {
        image::RgbImage::from_raw(self.width, self.height, self.rgb.clone())
            .ok_or_else(|| ViewerError::Encode("pixel buffer of the wrong size".into()))
    }

    /// JPEG at `quality` (1-100), through `jpeg-encoder` (SIMD; about 3x faster than the
    /// `image` crate's encoder at 1920x1080, where encoding was most of a frame's latency).
    pub fn jpeg(&self, quality: u8) -> Result<Vec<u8>, ViewerError> {
        encode_jpeg(&self.rgb, self.width, self.height, quality)
    }

    /// Lossless PNG (screenshots).
    pub fn png(&self) -> Result<Vec<u8>, ViewerError> {
        let mut out = Vec::new();
        let enc = image::codecs::png::PngEncoder::new(&mut out);
        self.image()?
            .write_with_encoder(enc)
            .map_err(|e| ViewerError::Encode(e.to_string()))?;
        Ok(out)
    }
}

/// The splats on the GPU (split into chunks past the adapter's binding limit, as `rust3r render`
/// does) and what renders them.
pub struct Renderer {
    gpu: Gpu,
    chunks: Vec<GpuSplats>,
    /// Number of Gaussians.
    len: usize,
    /// Host copy of the unscaled log-scales, to apply a splat scale without the rest of the
    /// splats (read from the device on first use when the splats came from there).
    log_scales: Option<Vec<[f32; 3]>>,
    applied_scale: f32,
    sh_degree: u32,
}

impl Renderer {
    /// Upload `splats` to `gpu` (none: frames show the background).
    pub fn new(gpu: Gpu, splats: &Splats) -> Result<Self, ViewerError> {
        let mut r = Self {
            gpu,
            chunks: Vec::new(),
            len: 0,
            log_scales: None,
            applied_scale: 1.0,
            sh_degree: 0,
        };
        r.set_splats(splats)?;
        Ok(r)
    }

    /// Replace the splats (live views).
    pub fn set_splats(&mut self, splats: &Splats) -> Result<(), ViewerError> {
        self.chunks = if splats.is_empty() {
            Vec::new()
        } else {
            GpuSplats::chunks_from_host(&self.gpu, splats, None)?
        };
        self.len = splats.len();
        self.log_scales = Some(splats.log_scales.clone());
        self.applied_scale = 1.0;
        self.sh_degree = splats.sh_degree;
        Ok(())
    }

    /// Render these device buffers from now on (live training: a handle copy of the trainer's
    /// parameters, no copy of the data; the trainer replaces its buffers when it densifies and
    /// writes the others in place, so frames show its latest state).
    pub fn set_device_splats(&mut self, splats: GpuSplats) {
        self.len = splats.len();
        self.sh_degree = splats.sh_degree;
        self.chunks = if splats.is_empty() {
            Vec::new()
        } else {
            vec![splats]
        };
        self.log_scales = None;
        self.applied_scale = 1.0;
    }

    /// The splats' means on the host (for the default camera).
    pub fn means(&self) -> Result<Vec<[f32; 3]>, ViewerError> {
        let mut out = Vec::with_capacity(self.len);
        for c in &self.chunks {
            let m = self.gpu.read(&c.means)?;
            out.extend(m.chunks_exact(3).map(|p| [p[0], p[1], p[2]]));
        }
        Ok(out)
    }

    /// Number of Gaussians.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn sh_degree(&self) -> u32 {
        self.sh_degree
    }

    /// Re-upload the log-scales shifted by `ln(scale)` when the scale changes.
    fn apply_scale(&mut self, scale: f32) -> Result<(), ViewerError> {
        if scale == self.applied_scale {
            return Ok(());
        }
        let log_scales = match self.log_scales.take() {
            Some(l) => l,
            // Device splats at scale 1: their buffers are the unscaled values.
            None => {
                let mut all = Vec::with_capacity(self.len);
                for c in &self.chunks {
                    all.extend(
                        self.gpu
                            .read(&c.log_scales)?
                            .chunks_exact(3)
                            .map(|p| [p[0], p[1], p[2]]),
                    );
                }
                all
            }
        };
        let shift = scale.ln();
        let mut row = 0;
        for chunk in &mut self.chunks {
            let n = chunk.len();
            let scaled: Vec<f32> = log_scales[row..row + n]
                .iter()
                .flat_map(|s| s.map(|v| v + shift))
                .collect();
            chunk.log_scales = self.gpu.upload(&scaled);
            row += n;
        }
        self.log_scales = Some(log_scales);
        self.applied_scale = scale;
        Ok(())
    }

    /// Render one frame.
    pub fn render(&mut self, req: &FrameRequest) -> Result<RenderedFrame, ViewerError> {
        req.validate()?;
        let t = Instant::now();
        let cam = &req.camera;
        if self.chunks.is_empty() {
            // Nothing to draw yet (a live run before its first splats): the background.
            let px = req
                .background
                .map(|v| (v.clamp(0.0, 1.0) * 255.0 + 0.5) as u8);
            let rgb = match req.mode {
                RenderMode::Alpha => vec![0; cam.width as usize * cam.height as usize * 3],
                _ => px.repeat(cam.width as usize * cam.height as usize),
            };
            return Ok(RenderedFrame {
                width: cam.width,
                height: cam.height,
                rgb,
                render_ms: 0.0,
                visible: 0,
            });
        }
        self.apply_scale(req.splat_scale)?;
        let opts = RenderOptions {
            background: req.background,
            forward_only: true,
            ..Default::default()
        };
        let (out, _) = render_chunks(&self.gpu, &self.chunks, cam, &opts)?;
        let to_u8 = |v: f32| (v.clamp(0.0, 1.0) * 255.0 + 0.5) as u8;
        let rgb: Vec<u8> = match req.mode {
            RenderMode::Rgb => self.gpu.read(&out.rgb)?.into_iter().map(to_u8).collect(),
            RenderMode::Alpha => self
                .gpu
                .read(&out.alpha)?
                .into_iter()
                .flat_map(|a| [to_u8(a); 3])
                .collect(),
            RenderMode::Depth => {
                let depth = self.gpu.read(&out.depth)?;
                let alpha = self.gpu.read(&out.alpha)?;
                colorize_depth(&depth, &alpha, req.background)
                    .into_iter()
                    .map(to_u8)
                    .collect()
            }
        };
        Ok(RenderedFrame {
            width: cam.width,
            height: cam.height,
            rgb,
            render_ms: t.elapsed().as_secs_f64() * 1e3,
            visible: out.num_visible,
        })
    }
}

/// Expected depth of each pixel (`depth / alpha`) through the turbo colour map, near red and
/// far blue between the 2nd and 98th percentile of the covered pixels, blended over `background`
/// by the pixel's opacity.
pub fn colorize_depth(depth: &[f32], alpha: &[f32], background: [f32; 3]) -> Vec<f32> {
    let expected = |i: usize| {
        if alpha[i] > 1e-3 {
            depth[i] / alpha[i]
        } else {
            f32::NAN
        }
    };
    let mut covered: Vec<f32> = (0..depth.len())
        .filter(|&i| alpha[i] > 0.5)
        .map(expected)
        .filter(|d| d.is_finite())
        .collect();
    let (lo, hi) = match covered.len() {
        0 => (0.0, 1.0),
        n => {
            let lo = *covered
                .select_nth_unstable_by((n - 1) * 2 / 100, f32::total_cmp)
                .1;
            let hi = *covered
                .select_nth_unstable_by(((n - 1) * 98).div_ceil(100), f32::total_cmp)
                .1;
            (lo, hi)
        }
    };
    let span = (hi - lo).max(1e-6);
    (0..depth.len())
        .flat_map(|i| {
            let d = expected(i);
            let a = alpha[i].clamp(0.0, 1.0);
            // From 0.1: the map's darkest end would hide the far half in a dark background.
            let c = if d.is_finite() {
                turbo(0.1 + 0.9 * (1.0 - (d - lo) / span))
            } else {
                background
            };
            [0, 1, 2].map(|k| a * c[k] + (1.0 - a) * background[k])
        })
        .collect()
}

/// Google's turbo colour map (polynomial fit), `x` in [0, 1].
fn turbo(x: f32) -> [f32; 3] {
    let x = x.clamp(0.0, 1.0);
    let r = 0.135_721_38
        + x * (4.615_392_6
            + x * (-42.660_324 + x * (132.131_08 + x * (-152.942_4 + x * 59.286_38))));
    let g = 0.091_402_61
        + x * (2.194_188_4
            + x * (4.842_966_6 + x * (-14.185_033 + x * (4.277_298_6 + x * 2.829_566))));
    let b = 0.106_673_3
        + x * (12.641_946 + x * (-60.582_05 + x * (110.362_77 + x * (-89.903_11 + x * 27.348_25))));
    [r, g, b]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_with_nan_or_huge_frames_are_rejected() {
        let cam = Camera::look_at([0.0, 0.0, -3.0], [0.0; 3], [0.0, -1.0, 0.0], 1.0, 64, 48);
        assert!(FrameRequest::new(cam.clone()).validate().is_ok());
        let mut nan = FrameRequest::new(cam.clone());
        nan.camera.world_to_camera[0][3] = f64::NAN;
        assert!(nan.validate().is_err());
        let mut huge = FrameRequest::new(cam.clone());
        huge.camera.intrinsics.width = MAX_SIDE + 1;
        assert!(huge.validate().is_err());
        let mut scale = FrameRequest::new(cam);
        scale.splat_scale = f32::INFINITY;
        assert!(scale.validate().is_err());
    }

    #[test]
    fn depth_is_red_near_blue_far_and_background_where_empty() {
        let depth = [1.0, 5.0, 0.0];
        let alpha = [1.0, 1.0, 0.0];
        let c = colorize_depth(&depth, &alpha, [0.5, 0.5, 0.5]);
        assert!(c[0] > 0.4 && c[2] < 0.1, "near {:?}", &c[0..3]);
        assert!(c[5] > 0.6 && c[3] < 0.4, "far {:?}", &c[3..6]);
        assert_eq!(&c[6..9], &[0.5, 0.5, 0.5]);
    }
}
