//! Live views of running work (`rust3r train / run / slam --view`): the same page as
//! `rust3r view`, fed from a training session's events ([`TrainEvent`]) and a SLAM run's
//! progress reports ([`Progress`]).
//!
//! Nothing here may slow the run down: a training snapshot is a handle copy of the trainer's
//! parameter buffers (no data copied, taken at most every [`LiveOptions::snapshot_interval`] and
//! only while a page is open), frames render on the viewer's own thread under
//! [`ViewerConfig::gpu_share`], and a SLAM run's keyframe pointmaps are turned into splats on a
//! worker thread. A page that closes (or never opens) changes nothing for the run.

use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rust3r_geometry::Sim3;
use rust3r_gpu::Gpu;
use rust3r_io::Splats;
use rust3r_pipelines::TrainEvent;
use rust3r_slam::Progress;
use rust3r_slam::pointmap::Pointmap;
use rust3r_splat::Camera;

use crate::frame::encode_jpeg;
use crate::scene::Overlay;
use crate::server::{Content, CurrentFrame, Stats, ViewerConfig, ViewerHandle};
use crate::{Scene, ViewerError};

/// Share of wall time a live view's frames may take by default (see [`ViewerConfig::gpu_share`]).
pub const LIVE_GPU_SHARE: f32 = 0.04;

/// How a live view samples the run.
#[derive(Clone, Debug)]
pub struct LiveOptions {
    /// Newest splats at most this often (each new set re-renders every open page once).
    pub snapshot_interval: Duration,
    /// Progress figures at most this often.
    pub stats_interval: Duration,
    /// SLAM: at most this many Gaussians per keyframe pointmap (pixels are skipped evenly).
    pub points_per_keyframe: usize,
    /// SLAM: the current frame's camera image (the page's inset) at most this often.
    pub current_frame_interval: Duration,
}

impl Default for LiveOptions {
    fn default() -> Self {
        Self {
            snapshot_interval: Duration::from_millis(1000),
            stats_interval: Duration::from_millis(100),
            points_per_keyframe: 20_000,
            current_frame_interval: Duration::from_millis(500),
        }
    }
}

/// At most this many frusta and trajectory points go to the page.
const MAX_FRUSTA: usize = 400;
const MAX_TRAJECTORY: usize = 20_000;

/// A viewer fed by a run.
pub struct LiveView {
    handle: Arc<ViewerHandle>,
    opts: LiveOptions,
    last_snapshot: Option<Instant>,
    last_stats: Option<Instant>,
    stats: Stats,
    slam: Option<SlamFeed>,
    slam_camera: Option<rust3r_geometry::PinholeCamera>,
}

impl LiveView {
    /// Start serving an empty scene named `description` on `gpu` (frames show the background
    /// until the first splats arrive). `config.gpu_share` defaults to [`LIVE_GPU_SHARE`].
    pub fn start(
        mut config: ViewerConfig,
        gpu: Gpu,
        description: &str,
        opts: LiveOptions,
    ) -> Result<Self, ViewerError> {
        config.gpu_share.get_or_insert(LIVE_GPU_SHARE);
        let scene = Scene {
            splats: Splats::new(0),
            overlay: Overlay::default(),
            description: description.to_owned(),
        };
        let handle = Arc::new(ViewerHandle::start(config, Content::Scene { gpu, scene })?);
        Ok(Self {
            handle,
            opts,
            last_snapshot: None,
            last_stats: None,
            stats: Stats::default(),
            slam: None,
            slam_camera: None,
        })
    }

    pub fn handle(&self) -> &ViewerHandle {
        &self.handle
    }

    /// The page's URL.
    pub fn url(&self) -> String {
        self.handle.url()
    }

    fn set_stats(&mut self, force: bool) {
        if force
            || self
                .last_stats
                .is_none_or(|t| t.elapsed() >= self.opts.stats_interval)
        {
            self.handle.set_stats(self.stats.clone());
            self.last_stats = Some(Instant::now());
        }
    }

    /// Show a message on the page (e.g. "done").
    pub fn message(&mut self, text: &str) {
        self.stats.message = Some(text.to_owned());
        self.set_stats(true);
    }

    /// A training session's event.
    pub fn train_event(&mut self, e: &TrainEvent<'_>) {
        match e {
            TrainEvent::Started {
                scene,
                train,
                step,
                steps,
            } => {
                let cameras: Vec<Camera> = train
                    .iter()
                    .map(|&i| Camera::from(&scene.views[i]))
                    .collect();
                let trajectory = cameras.iter().map(Camera::center).collect();
                self.handle.set_overlay(Overlay {
                    cameras: thin(cameras, MAX_FRUSTA),
                    trajectory: thin(trajectory, MAX_TRAJECTORY),
                });
                self.stats.step = Some(*step);
                self.stats.steps = Some(*steps);
                self.stats.message = Some("training".into());
                self.set_stats(true);
            }
            TrainEvent::Step {
                step,
                info,
                stats,
                trainer,
            } => {
                if self.handle.clients() > 0
                    && self
                        .last_snapshot
                        .is_none_or(|t| t.elapsed() >= self.opts.snapshot_interval)
                {
                    // A handle copy of the parameter buffers: no data moves.
                    if self
                        .handle
                        .set_device_splats(trainer.splats.clone())
                        .is_ok()
                    {
                        self.last_snapshot = Some(Instant::now());
                    }
                }
                self.stats.step = Some(*step);
                self.stats.splats = Some(info.num_splats);
                if let Some(st) = stats {
                    let x = *step as f64;
                    self.handle.add_point("loss", x, st.loss as f64);
                    self.handle.add_point("train PSNR (dB)", x, st.psnr as f64);
                    self.handle.add_point("Gaussians", x, st.num_splats as f64);
                    self.stats.loss = Some(st.loss as f64).filter(|v| v.is_finite());
                    self.stats.psnr = Some(st.psnr as f64).filter(|v| v.is_finite());
                }
                self.set_stats(stats.is_some());
            }
            TrainEvent::Eval { record, .. } => {
                self.handle
                    .add_point("held-out PSNR (dB)", record.step as f64, record.psnr);
                self.stats.message = Some(format!(
                    "step {}: held-out PSNR {:.2} dB, SSIM {:.4}",
                    record.step, record.psnr, record.ssim
                ));
                self.set_stats(true);
            }
            TrainEvent::Interrupted { step, .. } => {
                self.stats.message = Some(format!("interrupted at step {step}"));
                self.set_stats(true);
            }
            TrainEvent::Info(_) | TrainEvent::Warning(_) => {}
        }
    }

    /// The camera whose frustum a SLAM run's keyframes are drawn with (default: a 60 degree
    /// 4:3 camera).
    pub fn set_slam_camera(&mut self, camera: rust3r_geometry::PinholeCamera) {
        self.slam_camera = Some(camera);
    }

    /// A SLAM run's progress report. Cheap: the pointmaps and poses go to a worker thread that
    /// builds the splats and the overlay.
    pub fn slam_progress(&mut self, p: &Progress) {
        if self.slam.is_none() {
            let camera = self
                .slam_camera
                .unwrap_or(rust3r_geometry::PinholeCamera::new(
                    554.3, 554.3, 320.0, 240.0, 640, 480,
                ));
            self.slam = Some(SlamFeed::start(
                self.handle.clone(),
                camera,
                self.opts.clone(),
            ));
        }
        if let Some(feed) = &self.slam {
            let _ = feed.tx.send(SlamMsg {
                pose: p.pose,
                new_keyframe: p.new_keyframe.clone(),
                keyframe_poses: p.graph.as_ref().map(|(poses, _)| poses.clone()),
                keyframes: p.keyframes,
                image: FrameImage {
                    frame: p.frame,
                    total: p.total,
                    timestamp: p.timestamp,
                    path: p.rgb_path.clone(),
                },
            });
        }
        self.stats.step = Some(p.frame as u64);
        self.stats.steps = Some(p.total as u64);
        self.stats.message = Some(format!(
            "SLAM: frame {} of {}, {} keyframes, {}",
            p.frame, p.total, p.keyframes, p.state
        ));
        self.set_stats(false);
    }

    /// Stop the SLAM worker after it has shown the last report (the server keeps serving).
    pub fn end_slam(&mut self) {
        if let Some(feed) = self.slam.take() {
            feed.finish();
        }
    }
}

impl Drop for LiveView {
    fn drop(&mut self) {
        self.end_slam();
    }
}

/// Every `len / max`-th element, at most `max` (the last one kept).
fn thin<T: Clone>(v: Vec<T>, max: usize) -> Vec<T> {
    if v.len() <= max || max < 2 {
        return v;
    }
    let n = v.len();
    (0..max)
        .map(|i| v[i * (n - 1) / (max - 1)].clone())
        .collect()
}

struct SlamMsg {
    /// Camera-to-world pose of the frame.
    pose: Sim3,
    new_keyframe: Option<(usize, Arc<Pointmap>)>,
    keyframe_poses: Option<Vec<Sim3>>,
    keyframes: usize,
    /// The frame's colour image file (decoded on the worker, never on the tracking thread).
    image: FrameImage,
}

/// Which camera image a progress report is about.
struct FrameImage {
    frame: usize,
    total: usize,
    timestamp: f64,
    path: std::path::PathBuf,
}

/// The page's inset is at most this wide.
const CURRENT_FRAME_MAX_WIDTH: u32 = 320;

/// The current frame's inset image: decoded, shrunk to at most [`CURRENT_FRAME_MAX_WIDTH`]
/// wide (its aspect ratio kept), as a JPEG. An image that cannot be read is an error message.
fn current_frame(image: &FrameImage) -> Result<CurrentFrame, String> {
    let img = image::open(&image.path)
        .map_err(|e| format!("{}: {e}", image.path.display()))?
        .to_rgb8();
    let img = shrink(img, CURRENT_FRAME_MAX_WIDTH);
    let jpeg =
        encode_jpeg(img.as_raw(), img.width(), img.height(), 80).map_err(|e| e.to_string())?;
    Ok(CurrentFrame {
        frame: image.frame as u64,
        total: image.total as u64,
        timestamp: image.timestamp,
        name: image
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        width: img.width(),
        height: img.height(),
        jpeg,
    })
}

/// `img` at most `max_width` wide, its aspect ratio kept (a triangle filter).
fn shrink(img: image::RgbImage, max_width: u32) -> image::RgbImage {
    if img.width() <= max_width || img.width() == 0 {
        return img;
    }
    let h = ((img.height() as f64 * max_width as f64 / img.width() as f64).round() as u32).max(1);
    image::imageops::resize(&img, max_width, h, image::imageops::FilterType::Triangle)
}

struct SlamFeed {
    tx: Sender<SlamMsg>,
    thread: Option<JoinHandle<()>>,
}

impl SlamFeed {
    fn start(
        handle: Arc<ViewerHandle>,
        camera: rust3r_geometry::PinholeCamera,
        opts: LiveOptions,
    ) -> Self {
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("viewer-slam".into())
            .spawn(move || slam_worker(rx, &handle, camera, &opts))
            .ok();
        Self { tx, thread }
    }

    fn finish(mut self) {
        drop(std::mem::replace(&mut self.tx, mpsc::channel().0));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A keyframe's points in its own camera frame: position, radius, colour.
struct LocalCloud {
    points: Vec<([f32; 3], f32, [u8; 3])>,
}

/// Gaussians of a pointmap: every `stride`-th pixel in each direction with a valid point, as
/// wide as half the distance to the next sampled pixel's point (a surfel per sample).
fn local_cloud(pm: &Pointmap, max_points: usize) -> LocalCloud {
    let valid = pm.conf.iter().filter(|&&c| c > 0.0).count().max(1);
    let stride = ((valid as f64 / max_points.max(1) as f64).sqrt().ceil() as usize).max(1);
    let (w, h) = (pm.width, pm.height);
    let ok = |x: usize, y: usize| x < w && y < h && pm.conf[y * w + x] > 0.0;
    let dist = |a: [f32; 3], b: [f32; 3]| {
        ((a[0] - b[0]).powi(2) + (a[1] - b[1]).powi(2) + (a[2] - b[2]).powi(2)).sqrt()
    };
    let mut points = Vec::new();
    for y in (0..h).step_by(stride) {
        for x in (0..w).step_by(stride) {
            if !ok(x, y) {
                continue;
            }
            let p = pm.points[y * w + x];
            let r = [(x + stride, y), (x, y + stride)]
                .into_iter()
                .filter(|&(u, v)| ok(u, v))
                .map(|(u, v)| dist(p, pm.points[v * w + u]))
                .filter(|d| d.is_finite() && *d > 0.0)
                .fold(f32::INFINITY, f32::min);
            // Lone samples: 0.2 % of the depth.
            let r = if r.is_finite() {
                0.5 * r
            } else {
                0.002 * p[2].abs().max(1e-3)
            };
            if p.iter().all(|v| v.is_finite()) {
                points.push((p, r, pm.colors[y * w + x]));
            }
        }
    }
    LocalCloud { points }
}

/// World-to-camera matrix of a camera-to-world pose (its scale ignored).
fn world_to_camera(pose: &Sim3) -> [[f64; 4]; 4] {
    let r = pose.rotation_matrix();
    let t = pose.translation;
    let mut m = [[0.0; 4]; 4];
    for i in 0..3 {
        for k in 0..3 {
            m[i][k] = r[(k, i)];
        }
        m[i][3] = -(r[(0, i)] * t.x + r[(1, i)] * t.y + r[(2, i)] * t.z);
    }
    m[3][3] = 1.0;
    m
}

fn slam_worker(
    rx: Receiver<SlamMsg>,
    handle: &ViewerHandle,
    camera: rust3r_geometry::PinholeCamera,
    opts: &LiveOptions,
) {
    let mut clouds: Vec<Option<LocalCloud>> = Vec::new();
    let mut poses: Vec<Sim3> = Vec::new();
    let mut trajectory: Vec<[f64; 3]> = Vec::new();
    let mut current: Option<Sim3> = None;
    let mut dirty_splats = false;
    let mut dirty_overlay = false;
    let mut last_publish: Option<Instant> = None;
    let frustum = |pose: &Sim3| Camera {
        intrinsics: rust3r_geometry::PinholeCamera::new(
            camera.fx,
            camera.fy,
            camera.cx,
            camera.cy,
            camera.width.max(1),
            camera.height.max(1),
        ),
        world_to_camera: world_to_camera(pose),
    };
    let mut open = true;
    // The newest frame's image not yet shown (older ones are dropped unseen), and when the
    // last one was.
    let mut image: Option<FrameImage> = None;
    let mut last_image: Option<Instant> = None;
    let mut image_warned = false;
    while open {
        // Wait for a report, then take every one queued, so that only the newest image is kept.
        let mut next = rx.recv_timeout(opts.snapshot_interval);
        loop {
            match next {
                Ok(m) => {
                    let t = m.pose.translation;
                    trajectory.push([t.x, t.y, t.z]);
                    current = Some(m.pose);
                    dirty_overlay = true;
                    if let Some((k, pm)) = &m.new_keyframe {
                        if clouds.len() <= *k {
                            clouds.resize_with(k + 1, || None);
                        }
                        clouds[*k] = Some(local_cloud(pm, opts.points_per_keyframe));
                        if poses.len() <= *k {
                            poses.resize(k + 1, m.pose);
                        }
                        dirty_splats = true;
                    }
                    if let Some(p) = m.keyframe_poses {
                        poses = p;
                        dirty_splats = true;
                    }
                    poses.truncate(m.keyframes.max(poses.len()));
                    image = Some(m.image);
                }
                Err(RecvTimeoutError::Timeout) => break,
                Err(RecvTimeoutError::Disconnected) => {
                    open = false;
                    break;
                }
            }
            next = match rx.try_recv() {
                Ok(m) => Ok(m),
                Err(mpsc::TryRecvError::Empty) => Err(RecvTimeoutError::Timeout),
                Err(mpsc::TryRecvError::Disconnected) => Err(RecvTimeoutError::Disconnected),
            };
        }
        // The current frame's image at most every interval while a page is open, and the last
        // one at the end (for pages that open later).
        let image_due = last_image.is_none_or(|t| t.elapsed() >= opts.current_frame_interval);
        if ((image_due && handle.clients() > 0) || !open)
            && let Some(im) = image.take()
        {
            last_image = Some(Instant::now());
            match current_frame(&im) {
                Ok(f) => handle.set_current_frame(&f),
                // Skipped: the run goes on, and one warning says why the inset stays old.
                Err(e) if !image_warned => {
                    image_warned = true;
                    tracing::warn!(
                        "live view: cannot show frame {} (further unreadable frames are only logged at debug level): {e}",
                        im.frame
                    );
                }
                Err(e) => tracing::debug!("live view: cannot show frame {}: {e}", im.frame),
            }
        }
        // Publish at most every interval, while a page is open, and once at the end.
        let due = last_publish.is_none_or(|t| t.elapsed() >= opts.snapshot_interval);
        if !((due && handle.clients() > 0) || !open) || !(dirty_splats || dirty_overlay) {
            continue;
        }
        last_publish = Some(Instant::now());
        if dirty_overlay {
            let mut cameras: Vec<Camera> = thin(poses.iter().map(frustum).collect(), MAX_FRUSTA);
            cameras.extend(current.as_ref().map(frustum));
            handle.set_overlay(Overlay {
                cameras,
                trajectory: thin(trajectory.clone(), MAX_TRAJECTORY),
            });
            dirty_overlay = false;
        }
        if dirty_splats {
            let _ = handle.set_splats(world_splats(&clouds, &poses));
            dirty_splats = false;
        }
    }
}

/// Every keyframe's points under its current pose, as round Gaussians of SH degree 0.
fn world_splats(clouds: &[Option<LocalCloud>], poses: &[Sim3]) -> Splats {
    let n: usize = clouds.iter().flatten().map(|c| c.points.len()).sum();
    let mut s = Splats::with_capacity(0, n);
    const SH_C0: f32 = 0.282_094_8;
    for (cloud, pose) in clouds.iter().zip(poses) {
        let Some(cloud) = cloud else { continue };
        let r = pose.rotation_matrix();
        let t = pose.translation;
        let scale = pose.scale;
        for &(p, radius, c) in &cloud.points {
            let (x, y, z) = (p[0] as f64, p[1] as f64, p[2] as f64);
            let w: [f32; 3] = std::array::from_fn(|i| {
                (scale * (r[(i, 0)] * x + r[(i, 1)] * y + r[(i, 2)] * z) + t[i]) as f32
            });
            let ls = (radius * scale as f32).max(1e-8).ln();
            s.means.push(w);
            s.log_scales.push([ls; 3]);
            s.rotations.push([1.0, 0.0, 0.0, 0.0]);
            // Opacity 0.9.
            s.opacity_logits.push(9f32.ln());
            s.sh.extend(c.map(|v| (v as f32 / 255.0 - 0.5) / SH_C0));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointmap_surfels_sample_valid_pixels_with_neighbour_radii() {
        // A 4x4 plane at z = 2 with points 0.1 apart; one pixel invalid.
        let (w, h) = (4, 4);
        let mut pm = Pointmap {
            width: w,
            height: h,
            points: (0..w * h)
                .map(|i| [(i % w) as f32 * 0.1, (i / w) as f32 * 0.1, 2.0])
                .collect(),
            conf: vec![1.0; w * h],
            colors: vec![[10, 20, 30]; w * h],
        };
        pm.conf[5] = 0.0;
        let c = local_cloud(&pm, 100);
        assert_eq!(c.points.len(), 15);
        assert!(
            c.points
                .iter()
                .all(|(_, r, _)| (*r - 0.05).abs() < 1e-6 || (*r - 0.004).abs() < 1e-6),
            "{:?}",
            c.points
        );
        // About 4 points: every other pixel each way, (0,0), (2,0), (0,2), (2,2), 0.2 apart.
        let c = local_cloud(&pm, 4);
        assert_eq!(c.points.len(), 4);
        assert!(
            c.points
                .iter()
                .all(|(_, r, _)| (*r - 0.1).abs() < 1e-6 || (*r - 0.004).abs() < 1e-6),
            "{:?}",
            c.points
        );
        let mut pose = Sim3::identity();
        pose.translation.x = 1.0;
        pose.scale = 2.0;
        let splats = world_splats(&[Some(c)], &[pose]);
        assert_eq!(splats.len(), 4);
        let m = splats.means[1];
        assert!(
            (m[0] - 1.4).abs() < 1e-6 && m[1].abs() < 1e-6 && (m[2] - 4.0).abs() < 1e-6,
            "{m:?}"
        );
        assert!((splats.log_scales[0][0] - 0.2f32.ln()).abs() < 1e-6);
        splats.validate().unwrap();
    }

    #[test]
    fn current_frame_is_shrunk_to_the_inset_and_a_bad_file_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("frame-000007.color.png");
        image::RgbImage::from_fn(640, 480, |x, y| {
            image::Rgb([(x / 3) as u8, (y / 2) as u8, 100])
        })
        .save(&path)
        .unwrap();
        let im = FrameImage {
            frame: 7,
            total: 9,
            timestamp: 1.5,
            path: path.clone(),
        };
        let f = current_frame(&im).unwrap();
        assert_eq!(
            (f.frame, f.total, f.width, f.height, f.name.as_str()),
            (7, 9, 320, 240, "frame-000007.color.png")
        );
        let jpeg = image::load_from_memory_with_format(&f.jpeg, image::ImageFormat::Jpeg)
            .unwrap()
            .to_rgb8();
        assert_eq!(jpeg.dimensions(), (320, 240));
        let p = jpeg.get_pixel(160, 120);
        assert!(
            (p[0] as i32 - 106).abs() <= 4
                && (p[1] as i32 - 120).abs() <= 4
                && (p[2] as i32 - 100).abs() <= 4,
            "{p:?}"
        );
        // Small images are kept as they are.
        image::RgbImage::from_pixel(200, 100, image::Rgb([1, 2, 3]))
            .save(&path)
            .unwrap();
        assert_eq!(
            (
                current_frame(&im).unwrap().width,
                current_frame(&im).unwrap().height
            ),
            (200, 100)
        );
        std::fs::write(&path, b"not an image").unwrap();
        assert!(current_frame(&im).is_err());
        let missing = FrameImage {
            path: dir.path().join("missing.png"),
            ..im
        };
        assert!(current_frame(&missing).is_err());
    }

    #[test]
    fn world_to_camera_inverts_the_pose() {
        let pose = Sim3::new(
            nalgebra::UnitQuaternion::from_euler_angles(0.1, 0.2, 0.3),
            nalgebra::Vector3::new(1.0, 2.0, 3.0),
            1.0,
        );
        let cam = Camera {
            intrinsics: rust3r_geometry::PinholeCamera::new(1.0, 1.0, 0.0, 0.0, 1, 1),
            world_to_camera: world_to_camera(&pose),
        };
        let c = cam.center();
        assert!(
            (c[0] - 1.0).abs() < 1e-12 && (c[1] - 2.0).abs() < 1e-12 && (c[2] - 3.0).abs() < 1e-12,
            "{c:?}"
        );
    }
}
