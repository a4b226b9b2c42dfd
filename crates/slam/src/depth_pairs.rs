//! A pair front end made from depth images and ground-truth poses, for measuring the monocular
//! (MASt3R) system without the released weights.
//!
//! [`DepthPairs`] answers [`PairFrontEnd`] the way a perfect network would, up to chosen errors:
//! a frame's points `Xff` are its depth image back-projected (resampled to the network's image
//! size), and the keyframe's points in the frame's camera `Xkf` are the keyframe's back-projected
//! depth moved by the ground-truth relative pose `T_f⁻¹ T_k`. Both views of a pair share the
//! pair's scale, as a network prediction does. The errors a real network makes are modelled by
//! [`DepthNoise`]: a per-frame scale error (log-normal), per-pixel multiplicative depth noise and
//! a focal-length error of each predicted view, all deterministic functions of the seed and the
//! frame indices. A scale error shared by both views of a pair is absorbed by the Sim(3) poses
//! (it changes no position); the focal errors differ between a frame's own view, its pairs'
//! keyframe views and the keyframe's own view, so no similarity aligns them exactly and the
//! estimate drifts as with a network. Descriptors (24 channels, as
//! MASt3R's) identify the surface point a pixel sees, as a trained network's do: random Fourier
//! features of its ground-truth world position ([`world_descriptors`], from the depth before
//! noise: a network's descriptors do not carry its depth errors), so the descriptor
//! refinement of the matching moves a match towards the pixel that sees the same point. (A
//! patch of the colour image would not: 7-Scenes' colour is not registered to its depth, and
//! on flat patches every candidate ties.)
//!
//! Around it, an inner front end (the MASt3R network with any weights) still encodes every frame,
//! decodes every pair and answers retrieval: its cost is paid as in a real run (so the system's
//! throughput can be measured with random full-size weights), and loop closure and
//! relocalisation use its encoder features. Its predictions are dropped.
//!
//! The poses are uncalibrated (`camera()` is `None`: ray + distance residuals) and not metric
//! (Sim(3)), as in MASt3R-SLAM's base configuration.

use std::collections::HashMap;

use nalgebra::{Matrix4, Vector3};
use rayon::prelude::*;
use rust3r_geometry::PinholeCamera;
use rust3r_gpu::{Gpu, GpuBuffer};
use rust3r_io::IoError;
use rust3r_io::datasets::{Dataset, Frame, Pose};

use crate::SlamError;
use crate::pair::{DeviceDescriptors, PairFrontEnd, PairPrediction};
use crate::pointmap::{Pointmap, PointmapFrontEnd};

/// Descriptor channels: a 5x5 patch without its centre.
pub const DESC_DIM: usize = 24;

/// Errors put on the depth-made predictions.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DepthNoise {
    /// Standard deviation of the log of each frame's scale error (0: every frame at scale 1).
    pub scale_sigma: f64,
    /// Standard deviation of the per-pixel multiplicative depth noise.
    pub depth_sigma: f64,
    /// Standard deviation of the log of each predicted view's focal-length error: the view's
    /// `x` and `y` are multiplied by `exp(e)`, `e` drawn per frame for its own view and per
    /// (frame, keyframe) pair for the keyframe's view in the pair.
    pub focal_sigma: f64,
    /// Seed of all three.
    pub seed: u64,
}

impl Default for DepthNoise {
    fn default() -> Self {
        Self {
            scale_sigma: 0.0,
            depth_sigma: 0.0,
            focal_sigma: 0.0,
            seed: 0,
        }
    }
}

/// One encoded frame: its back-projected depth at scale 1 (before the frame's scale error),
/// descriptors and ground-truth camera-to-world pose.
struct Encoded {
    pm: Pointmap,
    desc: Vec<f32>,
    /// The descriptors on the tracker's device (uploaded once, when the frame is encoded).
    desc_dev: Option<GpuBuffer<f32>>,
    c2w: Matrix4<f64>,
}

/// See the module documentation.
pub struct DepthPairs {
    inner: Option<Box<dyn PointmapFrontEnd>>,
    depth_camera: PinholeCamera,
    width: usize,
    height: usize,
    noise: DepthNoise,
    /// The inner front end only encodes (retrieval) and is not asked to decode.
    encode_only: bool,
    encoded: HashMap<usize, Encoded>,
    /// The GPU pair tracker's device ([`PairFrontEnd::set_tracker_device`]): descriptors are
    /// kept there.
    gpu: Option<Gpu>,
    /// Ignore the tracker's device: descriptors stay on the host (A/B comparisons).
    host_descriptors: bool,
}

impl DepthPairs {
    /// Predictions of `width` x `height` pixels from depth images calibrated by `depth_camera`,
    /// with `inner` run alongside when given (it must decode pairs:
    /// [`PointmapFrontEnd::pairs`]); without it, nothing else runs and loop candidates come from
    /// pose proximity.
    pub fn new(
        mut inner: Option<Box<dyn PointmapFrontEnd>>,
        depth_camera: PinholeCamera,
        width: usize,
        height: usize,
        noise: DepthNoise,
    ) -> Result<Self, SlamError> {
        if let Some(f) = inner.as_mut()
            && f.pairs().is_none()
        {
            return Err(SlamError::InvalidInput(format!(
                "the '{}' front end does not decode pairs",
                f.name()
            )));
        }
        if width < 5 || height < 5 {
            return Err(SlamError::InvalidInput(format!(
                "depth pairs of {width}x{height} pixels: need at least 5x5"
            )));
        }
        Ok(Self {
            inner,
            depth_camera,
            width,
            height,
            noise,
            encode_only: false,
            encoded: HashMap::new(),
            gpu: None,
            host_descriptors: false,
        })
    }

    /// The inner front end only encodes frames (for retrieval) and skips the pair and mono
    /// decoding whose predictions are dropped anyway: same trajectory, without the decoder's
    /// cost (tests on a CPU; the throughput bench keeps it).
    pub fn inner_encode_only(mut self) -> Self {
        self.encode_only = true;
        self
    }

    /// Keep every descriptor on the host, as before the GPU tracker took them on its device
    /// (this front end's and the inner one's): the tracker uploads them per pair.
    pub fn descriptors_on_host(mut self) -> Self {
        self.host_descriptors = true;
        self
    }

    fn inner_decoder(&mut self) -> Option<&mut dyn PairFrontEnd> {
        if self.encode_only {
            None
        } else {
            self.inner_pairs()
        }
    }

    fn inner_pairs(&mut self) -> Option<&mut dyn PairFrontEnd> {
        self.inner.as_mut().and_then(|f| f.pairs())
    }

    /// The pinhole camera of the predictions (the depth camera resampled to their size).
    pub fn camera_model(&self) -> PinholeCamera {
        self.depth_camera
            .resized(self.width as u32, self.height as u32)
            .with_distortion(None)
    }

    fn encode_depth(&self, frame: &Frame) -> Result<Encoded, SlamError> {
        let what = || format!("{} (frame {})", frame.rgb_path.display(), frame.index);
        let depth = frame.depth.as_ref().ok_or_else(|| {
            SlamError::InvalidInput(format!("{}: no depth image for depth pairs", what()))
        })?;
        let gt = frame.gt_pose.as_ref().ok_or_else(|| {
            SlamError::InvalidInput(format!("{}: no ground-truth pose for depth pairs", what()))
        })?;
        let (dw, dh) = (depth.width() as usize, depth.height() as usize);
        if (dw, dh)
            != (
                self.depth_camera.width as usize,
                self.depth_camera.height as usize,
            )
        {
            return Err(SlamError::InvalidInput(format!(
                "{}: depth image is {dw}x{dh} but the calibration is for {}x{}",
                what(),
                self.depth_camera.width,
                self.depth_camera.height
            )));
        }
        let cam = self.camera_model();
        let (w, h) = (self.width, self.height);
        let (rw, rh) = (frame.rgb.width() as usize, frame.rgb.height() as usize);
        // Per pixel: point, confidence, colour, point before noise (rows in parallel).
        let mut px = vec![([0f32; 3], 0f32, [0u8; 3], [0f32; 3]); w * h];
        let nz = self.noise;
        crate::par::fill_rows(&mut px, w, |x, y, i| {
            // Nearest source pixel (pixel centres aligned).
            let sx = (((x as f64 + 0.5) * dw as f64 / w as f64) as usize).min(dw - 1);
            let sy = (((y as f64 + 0.5) * dh as f64 / h as f64) as usize).min(dh - 1);
            let z = depth.get_pixel(sx as u32, sy as u32)[0];
            let ray = [(x as f64 - cam.cx) / cam.fx, (y as f64 - cam.cy) / cam.fy];
            let noise = if nz.depth_sigma > 0.0 {
                (nz.depth_sigma * normal(nz.seed, frame.index as u64, i as u64 + 1)).exp()
            } else {
                1.0
            };
            let cx = ((x as f64 + 0.5) * rw as f64 / w as f64) as usize;
            let cy = ((y as f64 + 0.5) * rh as f64 / h as f64) as usize;
            let c = frame
                .rgb
                .get_pixel(cx.min(rw - 1) as u32, cy.min(rh - 1) as u32)
                .0;
            if z.is_finite() && z > 0.0 {
                let z = z as f64;
                let at = |z: f64| [(ray[0] * z) as f32, (ray[1] * z) as f32, z as f32];
                (at(z * noise), 5.0, c, at(z))
            } else {
                let p = [ray[0] as f32, ray[1] as f32, -1.0];
                (p, 0.0, c, p)
            }
        });
        let mut valid_z: Vec<f64> = px
            .iter()
            .filter(|p| p.1 > 0.0)
            .map(|p| p.0[2] as f64)
            .collect();
        let mut pm = Pointmap {
            width: w,
            height: h,
            points: px.iter().map(|p| p.0).collect(),
            conf: px.iter().map(|p| p.1).collect(),
            colors: px.iter().map(|p| p.2).collect(),
        };
        // Invalid pixels: finite points on their rays at the median depth (confidence 0).
        let median = if valid_z.is_empty() {
            1.0
        } else {
            let mid = valid_z.len() / 2;
            *valid_z.select_nth_unstable_by(mid, f64::total_cmp).1
        } as f32;
        for (p, c) in pm.points.iter_mut().zip(&pm.conf) {
            if *c == 0.0 {
                *p = [p[0] * median, p[1] * median, median];
            }
        }
        let c2w = Matrix4::from_fn(|r, c| gt[r][c]);
        let world: Vec<Vector3<f64>> = px
            .iter()
            .map(|(_, _, _, p)| {
                (c2w * nalgebra::Vector4::new(p[0] as f64, p[1] as f64, p[2] as f64, 1.0)).xyz()
            })
            .collect();
        Ok(Encoded {
            desc: world_descriptors(&world, &pm.conf),
            desc_dev: None,
            pm,
            c2w,
        })
    }

    fn cached(&self, index: usize) -> Result<&Encoded, SlamError> {
        self.encoded
            .get(&index)
            .ok_or_else(|| SlamError::Backend(format!("frame {index} was not encoded")))
    }

    /// Frame `index`'s scale error.
    fn scale(&self, index: usize) -> f64 {
        if self.noise.scale_sigma > 0.0 {
            (self.noise.scale_sigma * normal(self.noise.seed, index as u64, 0)).exp()
        } else {
            1.0
        }
    }

    /// Focal-length error (log) of frame `index`'s own view.
    fn focal(&self, index: usize) -> f64 {
        self.focal_draw(FOCAL_OWN, index as u64, 0)
    }

    /// Focal-length error (log) of keyframe `keyframe`'s view in its pair with `frame`.
    fn pair_focal(&self, frame: usize, keyframe: usize) -> f64 {
        self.focal_draw(FOCAL_PAIR, frame as u64, keyframe as u64 + 1)
    }

    fn focal_draw(&self, tag: u64, a: u64, b: u64) -> f64 {
        if self.noise.focal_sigma > 0.0 {
            self.noise.focal_sigma * normal(self.noise.seed ^ tag, a, b)
        } else {
            0.0
        }
    }

    /// Frame `index`'s own view: its points with its focal and scale errors.
    fn own_view(&self, index: usize) -> Result<Pointmap, SlamError> {
        Ok(scaled(
            &self.cached(index)?.pm,
            self.scale(index),
            self.focal(index),
        ))
    }
}

/// Seed tags of the focal errors of own views and of keyframe views in pairs.
const FOCAL_OWN: u64 = 0xF0CA_1000;
const FOCAL_PAIR: u64 = 0xF0CA_2000;

/// A frame's points scaled by `s`, with `x` and `y` also multiplied by `exp(focal)`.
fn scaled(pm: &Pointmap, s: f64, focal: f64) -> Pointmap {
    let (s, sf) = (s as f32, (s * focal.exp()) as f32);
    Pointmap {
        points: pm
            .points
            .iter()
            .map(|p| [p[0] * sf, p[1] * sf, p[2] * s])
            .collect(),
        ..pm.clone()
    }
}

impl PointmapFrontEnd for DepthPairs {
    fn name(&self) -> &str {
        "depth-pairs"
    }

    fn pointmap(&mut self, frame: &Frame) -> Result<Pointmap, SlamError> {
        let e = self.encode_depth(frame)?;
        Ok(scaled(
            &e.pm,
            self.scale(frame.index),
            self.focal(frame.index),
        ))
    }

    fn camera(&self) -> Option<PinholeCamera> {
        None
    }

    fn is_metric(&self) -> bool {
        false
    }

    fn pairs(&mut self) -> Option<&mut dyn PairFrontEnd> {
        Some(self)
    }
}

impl PairFrontEnd for DepthPairs {
    fn encode(&mut self, index: usize, frame: &Frame) -> Result<(), SlamError> {
        self.encode_prepared(index, frame, None)
    }

    fn preparer(&mut self) -> Option<crate::pair::FramePreparer> {
        self.inner_pairs().and_then(|p| p.preparer())
    }

    fn encode_prepared(
        &mut self,
        index: usize,
        frame: &Frame,
        input: Option<crate::pair::PreparedInput>,
    ) -> Result<(), SlamError> {
        if let Some(p) = self.inner_pairs() {
            p.encode_prepared(index, frame, input)?;
        }
        let mut e = self.encode_depth(frame)?;
        if let Some(gpu) = &self.gpu {
            // As a network on the tracker's device would leave them: on the device, once per
            // frame (a keyframe's serve every frame tracked against it).
            e.desc_dev = Some(gpu.upload(&e.desc));
        }
        self.encoded.insert(index, e);
        Ok(())
    }

    fn mono(&mut self, index: usize) -> Result<Pointmap, SlamError> {
        if let Some(p) = self.inner_decoder() {
            p.mono(index)?;
        }
        self.own_view(index)
    }

    fn pair(&mut self, frame: usize, keyframe: usize) -> Result<PairPrediction, SlamError> {
        if let Some(p) = self.inner_decoder() {
            p.pair(frame, keyframe)?;
        }
        let (f, k) = (self.cached(frame)?, self.cached(keyframe)?);
        let s = self.scale(frame);
        let kf_focal = self.pair_focal(frame, keyframe).exp();
        let t = f
            .c2w
            .try_inverse()
            .ok_or_else(|| SlamError::InvalidInput(format!("frame {frame}: singular pose")))?
            * k.c2w;
        let r = t.fixed_view::<3, 3>(0, 0);
        let tr = t.fixed_view::<3, 1>(0, 3);
        let keyframe_points = k
            .pm
            .points
            .iter()
            .map(|p| {
                let p = Vector3::new(p[0] as f64 * kf_focal, p[1] as f64 * kf_focal, p[2] as f64);
                let q = r * p + tr;
                [(q.x * s) as f32, (q.y * s) as f32, (q.z * s) as f32]
            })
            .collect();
        let q = |pm: &Pointmap| pm.conf.iter().map(|&c| c.min(1.0) * 5.0).collect();
        let (frame_desc, keyframe_desc, device_desc) = match (&self.gpu, &f.desc_dev, &k.desc_dev) {
            (Some(gpu), Some(fd), Some(kd)) => (
                Vec::new(),
                Vec::new(),
                Some(DeviceDescriptors {
                    gpu: gpu.clone(),
                    frame: fd.clone(),
                    keyframe: kd.clone(),
                    points: None,
                }),
            ),
            _ => (f.desc.clone(), k.desc.clone(), None),
        };
        Ok(PairPrediction {
            frame: self.own_view(frame)?,
            frame_desc,
            frame_desc_conf: q(&f.pm),
            keyframe_points,
            keyframe_conf: k.pm.conf.clone(),
            keyframe_desc,
            keyframe_desc_conf: q(&k.pm),
            desc_dim: DESC_DIM,
            device_desc,
        })
    }

    fn set_tracker_device(&mut self, gpu: Option<&Gpu>) {
        let gpu = gpu.filter(|_| !self.host_descriptors);
        if let Some(p) = self.inner_pairs() {
            p.set_tracker_device(gpu);
        }
        self.gpu = gpu.cloned();
        for e in self.encoded.values_mut() {
            e.desc_dev = gpu.map(|g| g.upload(&e.desc));
        }
    }

    fn retain(&mut self, keep: &[usize]) {
        if let Some(p) = self.inner_pairs() {
            p.retain(keep);
        }
        self.encoded.retain(|i, _| keep.contains(i));
    }

    fn retrieval_job(
        &mut self,
        frame: usize,
        add_as: Option<usize>,
        k: usize,
        min_thresh: f64,
    ) -> Result<Option<crate::pair::RetrievalJob>, SlamError> {
        match self.inner_pairs() {
            Some(p) => p.retrieval_job(frame, add_as, k, min_thresh),
            None => Ok(None),
        }
    }
}

/// A data set played forwards and backwards: frames `0, s, 2s, ..` up to the last, then back
/// down to 0, and so on, `len` frames in all. Every return revisits the places seen on the way
/// out (a loop by construction) and the input never ends (long runs). Frame `i` is timestamped
/// `i / 30` s; its ground-truth pose is that of the frame it replays, and
/// [`Dataset::ground_truth`] lists the replayed poses at those timestamps.
pub struct PingPong {
    inner: Box<dyn Dataset>,
    order: Vec<usize>,
    /// Ground-truth pose of each inner frame that is replayed.
    gt: Vec<Option<Pose>>,
    name: String,
}

impl PingPong {
    /// `len` frames of `inner` taken every `stride` frames, forwards then backwards.
    pub fn new(inner: Box<dyn Dataset>, stride: usize, len: usize) -> Result<Self, SlamError> {
        let n = inner.len();
        Self::within(inner, n, stride, len)
    }

    /// [`PingPong::new`] sweeping only `inner`'s first `span` frames (a shorter loop).
    pub fn within(
        inner: Box<dyn Dataset>,
        span: usize,
        stride: usize,
        len: usize,
    ) -> Result<Self, SlamError> {
        let total = inner.len();
        if span > total {
            return Err(SlamError::InvalidInput(format!(
                "ping-pong over the first {span} frames of '{}', which has {total}",
                inner.name()
            )));
        }
        let n = span;
        if n < 2 || stride == 0 || stride >= n {
            return Err(SlamError::InvalidInput(format!(
                "ping-pong over {n} frames of '{}' with stride {stride}: need 2 frames per sweep",
                inner.name()
            )));
        }
        let out: Vec<usize> = (0..n).step_by(stride).collect();
        let back: Vec<usize> = out.iter().rev().skip(1).copied().collect();
        let sweep: Vec<usize> = out.iter().skip(1).chain(&back).copied().collect();
        let order = std::iter::once(0)
            .chain(sweep.into_iter().cycle())
            .take(len)
            .collect();
        // The replayed frames' poses, read once (decodes each swept frame once).
        let mut gt = vec![None; n];
        for &k in &out {
            gt[k] = inner.frame(k)?.gt_pose;
        }
        Ok(Self {
            gt,
            name: format!(
                "{} (ping-pong over frames 0-{}, stride {stride}, {len} frames)",
                inner.name(),
                n - 1
            ),
            inner,
            order,
        })
    }

    /// The inner frame replayed as frame `i`.
    pub fn source(&self, i: usize) -> usize {
        self.order[i]
    }
}

impl Dataset for PingPong {
    fn name(&self) -> &str {
        &self.name
    }

    fn len(&self) -> usize {
        self.order.len()
    }

    fn intrinsics(&self) -> Option<PinholeCamera> {
        self.inner.intrinsics()
    }

    fn depth_intrinsics(&self) -> Option<PinholeCamera> {
        self.inner.depth_intrinsics()
    }

    fn frame(&self, i: usize) -> Result<Frame, IoError> {
        let src = *self.order.get(i).ok_or_else(|| IoError::Malformed {
            path: self.name.clone().into(),
            message: format!("no frame {i} of {}", self.order.len()),
        })?;
        let mut f = self.inner.frame(src)?;
        f.index = i;
        f.timestamp = i as f64 / 30.0;
        Ok(f)
    }

    fn colour_resampled(&self) -> bool {
        self.inner.colour_resampled()
    }

    fn ground_truth(&self) -> Option<Vec<(f64, Pose)>> {
        self.order
            .iter()
            .enumerate()
            .map(|(i, &src)| Some((i as f64 / 30.0, self.gt[src]?)))
            .collect()
    }
}

/// Wavelengths (m) of the descriptors' Fourier features, eight directions each.
const DESC_WAVELENGTHS: [f64; 3] = [0.03, 0.06, 0.12];

/// Per point, 24 random Fourier features of its world position `x`: `sqrt(2/24) cos(w_j·x +
/// b_j)` with fixed pseudo-random directions `w_j` (eight per wavelength of
/// [`DESC_WAVELENGTHS`]) and phases `b_j`. The dot product of two descriptors approximates a
/// kernel of the points' distance, 1 at the same point (unit norm on average); points with
/// confidence 0 get zeros.
pub fn world_descriptors(world: &[Vector3<f64>], conf: &[f32]) -> Vec<f32> {
    let feats: Vec<(Vector3<f64>, f64)> = (0..DESC_DIM)
        .map(|j| {
            let g = |k: u64| normal(0xDE5C, j as u64, k);
            let dir = Vector3::new(g(1), g(2), g(3)).normalize();
            let lambda = DESC_WAVELENGTHS[j % DESC_WAVELENGTHS.len()];
            let phase = std::f64::consts::PI * (1.0 + g(4).tanh());
            (dir * (std::f64::consts::TAU / lambda), phase)
        })
        .collect();
    let amp = (2.0 / DESC_DIM as f64).sqrt();
    let mut out = vec![0f32; world.len() * DESC_DIM];
    out.par_chunks_mut(DESC_DIM)
        .zip(world.par_iter().zip(conf))
        .for_each(|(d, (x, &c))| {
            if c > 0.0 {
                for (o, (w, b)) in d.iter_mut().zip(&feats) {
                    *o = (amp * (w.dot(x) + b).cos()) as f32;
                }
            }
        });
    out
}

/// A standard normal sample, a deterministic function of `(seed, a, b)` (SplitMix64 hashes and
/// the Box-Muller transform).
fn normal(seed: u64, a: u64, b: u64) -> f64 {
    let h1 = splitmix(seed ^ splitmix(a ^ splitmix(b)));
    let h2 = splitmix(h1);
    let u1 = ((h1 >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
    let u2 = (h2 >> 11) as f64 / (1u64 << 53) as f64;
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// One SplitMix64 step from state `x`.
fn splitmix(x: u64) -> u64 {
    rust3r_gpu::random::splitmix64(x, 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normal_samples_have_unit_variance() {
        let n = 20000;
        let xs: Vec<f64> = (0..n).map(|i| normal(7, 3, i)).collect();
        let mean = xs.iter().sum::<f64>() / n as f64;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64;
        assert!(mean.abs() < 0.03, "mean {mean}");
        assert!((var - 1.0).abs() < 0.05, "variance {var}");
        assert_eq!(normal(7, 3, 5), normal(7, 3, 5));
        assert_ne!(normal(7, 3, 5), normal(8, 3, 5));
    }

    #[test]
    fn world_descriptors_score_the_same_point_above_its_neighbours() {
        let n = 400;
        let pts: Vec<Vector3<f64>> = (0..n)
            .map(|i| Vector3::new(normal(1, i, 0), normal(1, i, 1), 2.0 + normal(1, i, 2)))
            .collect();
        let moved = |d: f64| -> Vec<Vector3<f64>> {
            pts.iter()
                .enumerate()
                .map(|(i, p)| {
                    let dir = Vector3::new(
                        normal(2, i as u64, 0),
                        normal(2, i as u64, 1),
                        normal(2, i as u64, 2),
                    );
                    p + dir.normalize() * d
                })
                .collect()
        };
        let conf = vec![1.0f32; n as usize];
        let at = |d: &[f32], i: usize| d[i * DESC_DIM..(i + 1) * DESC_DIM].to_vec();
        let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
        let base = world_descriptors(&pts, &conf);
        let mean_self: f32 = (0..n as usize)
            .map(|i| dot(&at(&base, i), &at(&base, i)))
            .sum::<f32>()
            / n as f32;
        assert!(
            (mean_self - 1.0).abs() < 0.05,
            "mean squared norm {mean_self}"
        );
        for (d, min_wins) in [(0.003, 0.75), (0.02, 0.97)] {
            let other = world_descriptors(&moved(d), &conf);
            let (near, far) = (world_descriptors(&moved(d / 4.0), &conf), other);
            let wins = (0..n as usize)
                .filter(|&i| dot(&at(&base, i), &at(&near, i)) > dot(&at(&base, i), &at(&far, i)))
                .count() as f64
                / n as f64;
            assert!(
                wins >= min_wins,
                "{d} m: the nearer point scored higher in {wins} of the cases"
            );
        }
        let zero = world_descriptors(&pts[..1], &[0.0]);
        assert!(zero.iter().all(|&v| v == 0.0));
    }
}
