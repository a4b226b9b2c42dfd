//! MASt3R as a monocular pointmap front end of `rust3r slam` (MASt3R-SLAM's `mast3r_inference_mono`):
//! each frame is preprocessed (long side 512 by default), encoded, and decoded with itself; the
//! pointmap is view 1's `pts3d` with its `conf`, in the preprocessed image's pixels, coloured by the
//! preprocessed RGB. Uncalibrated and up to scale (`camera() == None`, `is_metric() == false`).
//!
//! With a calibration ([`Mast3rMonoFrontEnd::with_calibration`], MASt3R-SLAM's `--calib`), each
//! frame is first undistorted to the calibration's centred pinhole camera
//! ([`SlamCalibration`]), then preprocessed the same way; the camera is carried into the
//! network image with MASt3R-SLAM's own formula
//! ([`transform_intrinsics_mast3r_slam`]), the predicted points are moved onto their pixel rays
//! keeping their depth, and the front end reports that camera (`camera() == Some(K)`) while
//! staying up to scale (`is_metric() == false`): the SLAM system then tracks with calibrated
//! pixel + log-depth residuals in Sim(3), MASt3R-SLAM's calibrated mode.
//!
//! **Pair decoding** ([`PairFrontEnd`], MASt3R-SLAM's `mast3r_asymmetric_inference`): the front
//! end also keeps encodings of frames by data-set index, and decodes the pair (frame,
//! keyframe) with the keyframe's cached encoding (`decode(frame, keyframe)`: head 1 gives
//! `Xff`, `Cff`, `Dff`, `Qff` of the frame in its own camera, head 2 `Xkf`, `Ckf`, `Dkf`, `Qkf`
//! of the keyframe's pixels in the frame's camera). `rust3r_slam` then tracks each frame on
//! that pair ([`rust3r_slam::pair`]): each frame is encoded once and decoded once (with the
//! keyframe), the first frame and relocalising frames with themselves. Pair decoding needs a
//! checkpoint with descriptor confidences (`two_confs`, as the released one);
//! [`PointmapFrontEnd::pairs`] is `None` without them and tracking uses mono pointmaps.
//!
//! Threads: the network (one model on one device) runs where the SLAM system calls it, the
//! tracking thread ([`rust3r_slam::FrameSource::Inline`]): which keyframe a frame is decoded
//! with is only known there, after the previous frame is tracked. The pair's points are as the
//! network predicts them; the SLAM system puts them on the pixel rays in calibrated mode. What
//! needs no network (undistortion, resizing, normalisation) can run ahead on a loader thread
//! ([`PairFrontEnd::preparer`], [`rust3r_slam::FrameSource::Pipelined`]).
//!
//! The SLAM crate does not depend on this one: the CLI wires the two.

use std::sync::{Arc, Mutex};

use burn::tensor::DType;
use rust3r_geometry::PinholeCamera;
use rust3r_geometry::mast3r_resize::{mast3r_resize_crop, transform_intrinsics_mast3r_slam};
use rust3r_gpu::{Gpu, GpuBuffer, GpuStream};
use rust3r_io::datasets::{Frame, SlamCalibration};
use rust3r_slam::pair::{
    DeviceDescriptors, FramePreparer, PairFrontEnd, PairPrediction, PreparedInput, QueuedPair,
    RetrievalJob,
};
use rust3r_slam::{Pointmap, PointmapFrontEnd, SlamError};

use crate::model::{Encoded, HostPrediction, Mast3r, PackedLayout, Prediction, Replayer};
use crate::preprocess::{Preprocessed, preprocess};
use crate::retrieval::RetrievalDatabase;

/// The retrieval database and the keyframe id of each of its images, shared between the front
/// end and the queries it hands out.
type SharedRetrieval = Arc<Mutex<(RetrievalDatabase, Vec<usize>)>>;

/// A pair decoding queued on the device ([`Mast3rMonoFrontEnd::queue_decode_device`]).
enum PendingDecode {
    /// The network runs on another device than the tracker: read back already.
    Host([HostPrediction; 2]),
    /// Both views' points and confidences packed on the device, adopted by `stream`; the
    /// descriptors (and points) left there.
    Device {
        packed: GpuBuffer<f32>,
        layout: PackedLayout,
        stream: GpuStream,
        desc: Box<DeviceDescriptors>,
        start: std::time::Instant,
        launched_s: f64,
    },
}

impl PendingDecode {
    /// Both views on the host (waiting for the decoding), and the descriptors on the device.
    fn finish(
        self,
        name: &str,
    ) -> Result<([HostPrediction; 2], Option<DeviceDescriptors>), SlamError> {
        match self {
            PendingDecode::Host(host) => Ok((host, None)),
            PendingDecode::Device {
                packed,
                layout,
                stream,
                desc,
                start,
                launched_s,
            } => {
                let all = stream
                    .run(|| desc.gpu.read(&packed))
                    .map_err(|e| SlamError::Gpu(format!("{name}: reading the pair back: {e}")))?;
                let host: [HostPrediction; 2] = layout
                    .unpack(&all)
                    .try_into()
                    .map_err(|_| SlamError::Backend(format!("{name}: two views expected")))?;
                tracing::trace!(
                    "{name} pair decode: decode_launch_ms={:.2} readback_ms={:.2}",
                    launched_s * 1e3,
                    (start.elapsed().as_secs_f64() - launched_s) * 1e3
                );
                Ok((host, Some(*desc)))
            }
        }
    }
}

/// The network as a [`PointmapFrontEnd`]; also keeps the last frame's encoding and descriptors for
/// callers that need them (MASt3R-SLAM's matching).
pub struct Mast3rMonoFrontEnd {
    /// The network, recorded per input size and replayed ([`Replayer`]) unless `replay` is off.
    runner: Replayer,
    replay: bool,
    size: usize,
    /// Calibrated mode: the calibration and the camera of the network image.
    calib: Option<(SlamCalibration, PinholeCamera)>,
    last: Option<(Encoded, HostPrediction, Preprocessed)>,
    /// Encoded frames kept for pair decoding: data-set index, encoding, network image.
    encoded: Vec<(usize, Encoded, Arc<Preprocessed>)>,
    /// Learned retrieval: the database and the keyframe id of each of its images, shared with
    /// the queries running elsewhere ([`PairFrontEnd::retrieval_job`]).
    retrieval: Option<SharedRetrieval>,
    /// The GPU pair tracker's device ([`PairFrontEnd::set_tracker_device`]): pair descriptors
    /// stay there when the network runs on it.
    tracker_gpu: Option<Gpu>,
    /// Ignore the tracker's device: descriptors are read back (A/B comparisons).
    host_descriptors: bool,
    /// Pair read-backs ([`PairFrontEnd::queue_pair`]): a stream of their own, so that they wait
    /// for their decoding and not for encodings queued after it.
    readback: GpuStream,
}

impl Mast3rMonoFrontEnd {
    /// Front end running `model` on frames resized with MASt3R-SLAM's `resize_img(size)`
    /// (`size` 512 or 224).
    pub fn new(model: Mast3r, size: usize) -> Result<Self, String> {
        if size != 512 && size != 224 {
            return Err(format!("MASt3R input size must be 512 or 224, not {size}"));
        }
        Ok(Mast3rMonoFrontEnd {
            runner: Replayer::new(std::sync::Arc::new(model)),
            replay: true,
            size,
            calib: None,
            last: None,
            encoded: Vec::new(),
            retrieval: None,
            tracker_gpu: None,
            host_descriptors: false,
            readback: GpuStream::new(),
        })
    }

    /// Learned retrieval for loop closure and relocalisation ([`PairFrontEnd::retrieve`]):
    /// `db` must take this network's encoder width.
    pub fn with_retrieval(mut self, db: RetrievalDatabase) -> Result<Self, String> {
        let e = self.model().config().enc_embed_dim;
        if db.head().dim_in() != e {
            return Err(format!(
                "the retrieval head takes {}-wide encoder features but the network's encoder is {e} wide",
                db.head().dim_in()
            ));
        }
        self.retrieval = Some(Arc::new(Mutex::new((db, Vec::new()))));
        Ok(self)
    }

    /// Read pair descriptors back to the host even when the GPU tracker runs on the network's
    /// device (as before they stayed there; for comparisons).
    pub fn descriptors_on_host(mut self) -> Self {
        self.host_descriptors = true;
        self
    }

    /// `f` of the retrieval database, when learned retrieval is on (it waits for a query
    /// running elsewhere).
    pub fn retrieval_db<T>(&self, f: impl FnOnce(&RetrievalDatabase) -> T) -> Option<T> {
        self.retrieval
            .as_ref()
            .map(|r| f(&r.lock().unwrap_or_else(|e| e.into_inner()).0))
    }

    /// Calibrated mode: frames must have the calibration's size; they are undistorted with it
    /// before preprocessing, and the pointmaps are in the camera of the network image
    /// ([`PointmapFrontEnd::camera`]), on their pixel rays.
    pub fn with_calibration(mut self, calib: SlamCalibration) -> Result<Self, String> {
        let camera = network_camera(&calib.undistorted, self.size)?;
        self.calib = Some((calib, camera));
        Ok(self)
    }

    /// The network.
    pub fn model(&self) -> &Mast3r {
        self.runner.model()
    }

    /// Run the network one operation at a time instead of replaying its recording (the
    /// default, [`Replayer`]); for comparisons and debugging.
    pub fn set_replay(&mut self, on: bool) {
        self.replay = on;
    }

    /// Encoding, full prediction (descriptors and their confidence included) and preprocessed image
    /// of the last frame given to [`PointmapFrontEnd::pointmap`].
    pub fn last(&self) -> Option<&(Encoded, HostPrediction, Preprocessed)> {
        self.last.as_ref()
    }
}

impl PointmapFrontEnd for Mast3rMonoFrontEnd {
    fn name(&self) -> &str {
        "mast3r"
    }

    fn pointmap(&mut self, frame: &Frame) -> Result<Pointmap, SlamError> {
        let (enc, p) = self.encode_frame(frame)?;
        let (pm, host) = self.mono_of(&enc, &p, &frame.rgb_path.display().to_string())?;
        self.last = Some((enc, host, p));
        Ok(pm)
    }

    fn camera(&self) -> Option<PinholeCamera> {
        self.calib.as_ref().map(|(_, cam)| *cam)
    }

    fn is_metric(&self) -> bool {
        false
    }

    fn pairs(&mut self) -> Option<&mut dyn PairFrontEnd> {
        // MASt3R-SLAM weighs matches by the descriptor confidence: without it, mono tracking.
        if self.model().config().two_confs {
            Some(self)
        } else {
            None
        }
    }
}

impl Mast3rMonoFrontEnd {
    /// Undistorts (calibrated), preprocesses and encodes a frame.
    fn encode_frame(&mut self, frame: &Frame) -> Result<(Encoded, Preprocessed), SlamError> {
        let p = prepare_input(self.calib.as_ref(), self.size, frame)?;
        self.encode_input(frame, p)
    }

    /// Uploads and encodes a frame's network image ([`prepare_input`]).
    fn encode_input(
        &mut self,
        frame: &Frame,
        p: Preprocessed,
    ) -> Result<(Encoded, Preprocessed), SlamError> {
        let start = std::time::Instant::now();
        // Bytes up, normalised on the device (a quarter of the binary32 image's upload).
        let img = self.model().image_tensor_u8(&p.rgb, p.height, p.width);
        let uploaded_s = start.elapsed().as_secs_f64();
        let enc = if self.replay {
            self.runner.encode(img).map_err(|e| {
                SlamError::InvalidInput(format!("{}: {e}", frame.rgb_path.display()))
            })?
        } else {
            self.model().encode(img)
        };
        tracing::trace!(
            "frame {} encode: upload_ms={:.2} encode_launch_ms={:.2}",
            frame.index,
            uploaded_s * 1e3,
            (start.elapsed().as_secs_f64() - uploaded_s) * 1e3
        );
        Ok((enc, p))
    }

    /// Both views' predictions of the pair `(a, b)`, on the host.
    fn decode_host(
        &mut self,
        a: &Encoded,
        b: &Encoded,
        name: &str,
    ) -> Result<[HostPrediction; 2], SlamError> {
        if self.replay && a.grid == b.grid {
            let [p1, p2] = self
                .runner
                .decode(a, b)
                .map_err(|e| SlamError::InvalidInput(format!("{name}: {e}")))?;
            Ok([p1.to_host(), p2.to_host()])
        } else {
            let [p1, p2] = self.model().decode(a, b);
            Ok([p1.to_host(), p2.to_host()])
        }
    }

    /// Both views' predictions of the pair `(a, b)` with the descriptors left on `gpu` (the
    /// rest read back in one transfer when the result is finished, on a stream of its own that
    /// waits for this decoding only: the network may encode other frames meanwhile); the
    /// descriptors are read back too when the network runs on another device.
    fn queue_decode_device(
        &mut self,
        a: &Encoded,
        b: &Encoded,
        name: &str,
        gpu: &Gpu,
    ) -> Result<PendingDecode, SlamError> {
        let start = std::time::Instant::now();
        let err = |e: String| SlamError::InvalidInput(format!("{name}: {e}"));
        let direct;
        let preds: &[Prediction; 2] = if self.replay && a.grid == b.grid {
            self.runner.decode(a, b).map_err(err)?
        } else {
            direct = self.model().decode(a, b);
            &direct
        };
        // A copy on the device: a replay's output buffers are rewritten by the next replay.
        let desc = |p: &Prediction| {
            rust3r_gpu::burn_tensor_buffer(p.desc.clone().cast(DType::F32).mul_scalar(1.0))
                .map_err(|e| SlamError::Gpu(format!("{name}: descriptors: {e}")))
        };
        let (g, frame) = desc(&preds[0])?;
        if !g.same_device(gpu) {
            return Ok(PendingDecode::Host([
                preds[0].to_host(),
                preds[1].to_host(),
            ]));
        }
        let (_, keyframe) = desc(&preds[1])?;
        // The points too (the tracker's matching reads them there; the host still needs them).
        let pts = |p: &Prediction| {
            let [b, h, w, _] = p.pts3d.dims();
            rust3r_gpu::burn_tensor_buffer(
                p.pts3d
                    .clone()
                    .cast(DType::F32)
                    .reshape([b * h * w * 3])
                    .mul_scalar(1.0),
            )
            .map(|(_, buf)| buf)
            .map_err(|e| SlamError::Gpu(format!("{name}: points: {e}")))
        };
        let points = Some((pts(&preds[0])?, pts(&preds[1])?));
        // Both views' points and confidences packed for one read-back, which the read-back
        // stream adopts now: it waits for the decoding, not for what is queued after it.
        let (packed, layout) = Prediction::pack_without_desc(preds)
            .ok_or_else(|| SlamError::Backend(format!("{name}: two views expected")))?;
        let (_, packed) = rust3r_gpu::burn_tensor_buffer(packed)
            .map_err(|e| SlamError::Gpu(format!("{name}: packed outputs: {e}")))?;
        self.readback
            .run(|| rust3r_gpu::stream::adopt(gpu, &[&packed]));
        Ok(PendingDecode::Device {
            packed,
            layout,
            stream: self.readback,
            desc: Box::new(DeviceDescriptors {
                gpu: gpu.clone(),
                frame,
                keyframe,
                points,
            }),
            start,
            launched_s: start.elapsed().as_secs_f64(),
        })
    }

    /// The frame decoded with itself: view 1's points (on the rays when calibrated) and
    /// confidence, coloured by the network image; `name` names the frame in errors.
    fn mono_of(
        &mut self,
        enc: &Encoded,
        p: &Preprocessed,
        name: &str,
    ) -> Result<(Pointmap, HostPrediction), SlamError> {
        let [host, _] = self.decode_host(enc, enc, name)?;
        let pm = self.pointmap_of(&host, p, name)?;
        Ok((pm, host))
    }

    /// View 1's pointmap of a mono prediction (on the rays when calibrated).
    fn pointmap_of(
        &self,
        host: &HostPrediction,
        p: &Preprocessed,
        name: &str,
    ) -> Result<Pointmap, SlamError> {
        let mut pm = host_pointmap(host, p, name)?;
        if let Some((_, cam)) = &self.calib {
            // MASt3R-SLAM `constrain_points_to_ray`: keep the predicted depth, on the pixel's ray.
            pm.constrain_to_rays(cam);
        }
        Ok(pm)
    }

    /// Queues the pair `(frame, keyframe)` on the device; the closure reads it back and makes
    /// the prediction ([`PairFrontEnd::queue_pair`]).
    fn queue_pair_decode(
        &mut self,
        frame: usize,
        keyframe: usize,
    ) -> Result<impl FnOnce() -> Result<PairPrediction, SlamError> + 'static, SlamError> {
        let ((_, ef, pf), (_, ek, pk)) = (self.cached(frame)?, self.cached(keyframe)?);
        if (pf.width, pf.height) != (pk.width, pk.height) {
            return Err(SlamError::InvalidInput(format!(
                "frame {frame} ({}x{}) and keyframe {keyframe} ({}x{}) have different network image sizes",
                pf.width, pf.height, pk.width, pk.height
            )));
        }
        let (ef, ek, pf, pk) = (ef.clone(), ek.clone(), pf.clone(), pk.clone());
        let name = format!("frames {frame} and {keyframe}");
        let pending = match self.tracker_gpu.clone() {
            Some(gpu) => self.queue_decode_device(&ef, &ek, &name, &gpu)?,
            None => PendingDecode::Host(self.decode_host(&ef, &ek, &name)?),
        };
        Ok(move || {
            let ([hf, hk], device_desc) = pending.finish(&name)?;
            if hf.desc_conf.len() != hf.conf.len() || hk.desc_conf.len() != hk.conf.len() {
                return Err(SlamError::InvalidInput(format!(
                    "{name}: the network has no descriptor confidence (two_confs), which pair tracking needs"
                )));
            }
            let start = std::time::Instant::now();
            // The two views side by side (~1 ms each on one core at 512x384).
            let (frame_pm, keyframe_pm) = rayon::join(
                || host_pointmap(&hf, &pf, &name),
                || host_pointmap(&hk, &pk, &name),
            );
            let (frame_pm, keyframe_pm) = (frame_pm?, keyframe_pm?);
            tracing::trace!(
                "{name} pair pointmaps: convert_ms={:.2}",
                start.elapsed().as_secs_f64() * 1e3
            );
            // `Tracker::track_pair` checks the prediction's sizes.
            Ok(PairPrediction {
                frame: frame_pm,
                frame_desc: hf.desc,
                frame_desc_conf: hf.desc_conf,
                keyframe_points: keyframe_pm.points,
                keyframe_conf: keyframe_pm.conf,
                keyframe_desc: hk.desc,
                keyframe_desc_conf: hk.desc_conf,
                desc_dim: hf.desc_dim,
                device_desc,
            })
        })
    }

    fn cached(&self, index: usize) -> Result<&(usize, Encoded, Arc<Preprocessed>), SlamError> {
        self.encoded.iter().find(|e| e.0 == index).ok_or_else(|| {
            SlamError::InvalidInput(format!(
                "frame {index} is not encoded (encoded: {:?})",
                self.encoded.iter().map(|e| e.0).collect::<Vec<_>>()
            ))
        })
    }
}

/// A frame's network image: undistorted with `calib` (calibrated mode), then MASt3R-SLAM's
/// `resize_img(size)`. Needs no network: runs on loader threads ([`PairFrontEnd::preparer`]).
fn prepare_input(
    calib: Option<&(SlamCalibration, PinholeCamera)>,
    size: usize,
    frame: &Frame,
) -> Result<Preprocessed, SlamError> {
    let start = std::time::Instant::now();
    let (w, h) = (frame.rgb.width() as usize, frame.rgb.height() as usize);
    let undistorted = match calib {
        Some((calib, _)) => Some(calib.undistort(frame)?),
        None => None,
    };
    let rgb = undistorted.as_ref().unwrap_or(&frame.rgb);
    let undistorted_s = start.elapsed().as_secs_f64();
    let p = preprocess(rgb.as_raw(), w, h, size)
        .map_err(|e| SlamError::InvalidInput(format!("{}: {e}", frame.rgb_path.display())))?;
    if let Some((_, cam)) = calib
        && (p.width, p.height) != (cam.width as usize, cam.height as usize)
    {
        return Err(SlamError::InvalidInput(format!(
            "{}: the network image is {}x{} but the calibrated camera is {}x{}",
            frame.rgb_path.display(),
            p.width,
            p.height,
            cam.width,
            cam.height
        )));
    }
    tracing::trace!(
        "frame {} input: undistort_ms={:.2} preprocess_ms={:.2}",
        frame.index,
        undistorted_s * 1e3,
        (start.elapsed().as_secs_f64() - undistorted_s) * 1e3
    );
    Ok(p)
}

/// The points and confidence of one view of a prediction as a pointmap coloured by `p`.
fn host_pointmap(
    host: &HostPrediction,
    p: &Preprocessed,
    name: &str,
) -> Result<Pointmap, SlamError> {
    let points: Vec<[f32; 3]> = host
        .pts3d
        .chunks_exact(3)
        .map(|v| [v[0], v[1], v[2]])
        .collect();
    if host.pts3d.iter().any(|v| !v.is_finite()) {
        return Err(SlamError::InvalidInput(format!(
            "{name}: the network produced non-finite points"
        )));
    }
    if (host.width, host.height) != (p.width, p.height) {
        return Err(SlamError::InvalidInput(format!(
            "{name}: the prediction is {}x{} but the network image is {}x{}",
            host.width, host.height, p.width, p.height
        )));
    }
    Ok(Pointmap {
        width: p.width,
        height: p.height,
        points,
        conf: host.conf.clone(),
        colors: p.rgb.chunks_exact(3).map(|c| [c[0], c[1], c[2]]).collect(),
    })
}

impl PairFrontEnd for Mast3rMonoFrontEnd {
    fn encode(&mut self, index: usize, frame: &Frame) -> Result<(), SlamError> {
        let (enc, p) = self.encode_frame(frame)?;
        self.encoded.retain(|e| e.0 != index);
        self.encoded.push((index, enc, Arc::new(p)));
        Ok(())
    }

    fn preparer(&mut self) -> Option<FramePreparer> {
        let (calib, size) = (self.calib.clone(), self.size);
        Some(std::sync::Arc::new(move |frame: &Frame| {
            let p = prepare_input(calib.as_ref(), size, frame)?;
            Ok(Box::new(p) as PreparedInput)
        }))
    }

    fn encode_prepared(
        &mut self,
        index: usize,
        frame: &Frame,
        input: Option<PreparedInput>,
    ) -> Result<(), SlamError> {
        let p = match input.map(|i| i.downcast::<Preprocessed>()) {
            Some(Ok(p)) => *p,
            Some(Err(_)) => {
                return Err(SlamError::InvalidInput(format!(
                    "{}: the prepared input is not a MASt3R network image",
                    frame.rgb_path.display()
                )));
            }
            None => prepare_input(self.calib.as_ref(), self.size, frame)?,
        };
        let (enc, p) = self.encode_input(frame, p)?;
        self.encoded.retain(|e| e.0 != index);
        self.encoded.push((index, enc, Arc::new(p)));
        Ok(())
    }

    fn mono(&mut self, index: usize) -> Result<Pointmap, SlamError> {
        let enc = self.cached(index)?.1.clone();
        let name = format!("frame {index}");
        // Only view 1's points and confidences are used: one transfer, no descriptors.
        let host = if self.replay {
            let [p1, _] = self
                .runner
                .decode(&enc, &enc)
                .map_err(|e| SlamError::InvalidInput(format!("{name}: {e}")))?;
            p1.to_host_without_desc()
        } else {
            let [p1, _] = self.model().decode(&enc, &enc);
            p1.to_host_without_desc()
        };
        self.pointmap_of(&host, &self.cached(index)?.2, &name)
    }

    fn pair(&mut self, frame: usize, keyframe: usize) -> Result<PairPrediction, SlamError> {
        self.queue_pair(frame, keyframe).finish()
    }

    fn queue_pair(&mut self, frame: usize, keyframe: usize) -> QueuedPair {
        match self.queue_pair_decode(frame, keyframe) {
            Ok(finish) => QueuedPair::pending(finish),
            Err(e) => QueuedPair::ready(Err(e)),
        }
    }

    fn set_tracker_device(&mut self, gpu: Option<&Gpu>) {
        self.tracker_gpu = gpu.filter(|_| !self.host_descriptors).cloned();
        // Visual words are assigned on the tracker's GPU too (the same words as on the host).
        if let Some(r) = &self.retrieval
            && let Err(e) = r
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .0
                .set_device(gpu)
        {
            tracing::warn!("learned retrieval stays on the host: {e}");
        }
    }

    fn retain(&mut self, keep: &[usize]) {
        self.encoded.retain(|e| keep.contains(&e.0));
    }

    fn retrieval_job(
        &mut self,
        frame: usize,
        add_as: Option<usize>,
        k: usize,
        min_thresh: f64,
    ) -> Result<Option<RetrievalJob>, SlamError> {
        let Some(retrieval) = self.retrieval.clone() else {
            return Ok(None);
        };
        let feat = self
            .cached(frame)?
            .1
            .feat
            .clone()
            // The head takes binary32 features whatever the network's precision.
            .cast(DType::F32)
            .into_data()
            .try_into_vec::<f32>()
            .map_err(|e| SlamError::Backend(format!("frame {frame}: encoder features: {e:?}")))?;
        Ok(Some(Box::new(move || {
            let mut guard = retrieval
                .lock()
                .map_err(|_| SlamError::Backend("an earlier retrieval query panicked".into()))?;
            let (db, ids) = &mut *guard;
            let q = db
                .update(&feat, add_as.is_some(), k, min_thresh)
                .map_err(|e| SlamError::InvalidInput(format!("frame {frame}: {e}")))?;
            let found = q.retrieved.iter().map(|&i| ids[i]).collect();
            if let Some(kf) = add_as {
                ids.push(kf);
            }
            Ok(found)
        })))
    }
}

/// The camera of the network image made from a frame of `undistorted`'s size (MASt3R-SLAM's
/// `Intrinsics.K_frame`, [`transform_intrinsics_mast3r_slam`]), at input size `size`.
pub fn network_camera(undistorted: &PinholeCamera, size: usize) -> Result<PinholeCamera, String> {
    let (w, h) = (undistorted.width, undistorted.height);
    if w == 0 || h == 0 {
        return Err(format!("the calibrated image size {w}x{h} is empty"));
    }
    let rc = mast3r_resize_crop(w, h, size as u32);
    if rc.output.0 == 0 || rc.output.1 == 0 {
        return Err(format!("a {w}x{h} image crops to nothing at size {size}"));
    }
    Ok(transform_intrinsics_mast3r_slam(undistorted, &rc).with_distortion(None))
}
