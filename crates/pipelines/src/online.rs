//! Online training (`rust3r run --online`): a trainer on its own thread that starts with SLAM's
//! first keyframe and steps while tracking goes on. SLAM's progress callback sends each new
//! keyframe (its image, pose and pointmap) and each back-end update of the keyframe poses over a
//! channel; a keyframe adds its view and its confident points as Gaussians
//! ([`Trainer::add_splats`]); steps pick a random keyframe view (photometric loss only). When
//! the input ends the channel closes and the trainer is handed back to the capture pipeline,
//! whose final phase trains it on every view with depth, exposure and pose refinement.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::Instant;

use rust3r_geometry::{PinholeCamera, Sim3};
use rust3r_gpu::{Gpu, GpuBuffer};
use rust3r_io::datasets::Dataset;
use rust3r_io::scene::{ImageCache, PosedImage, SceneOptions, scene_from_images};
use rust3r_slam::output;
use rust3r_slam::pointmap::Pointmap;
use rust3r_splat::Camera;
use rust3r_splat::train::Trainer;

use crate::error::PipelineError;
use crate::train::{TrainOptions, train_config};

/// What SLAM's callback sends to the online trainer.
pub(crate) enum Msg {
    /// A new keyframe: `frame` indexes SLAM's frames; `c2w` is its pose when it was made.
    Keyframe {
        frame: usize,
        rgb_path: PathBuf,
        c2w: Sim3,
        pointmap: Arc<Pointmap>,
    },
    /// Every keyframe's pose after a back-end run.
    Poses(Vec<Sim3>),
}

/// Progress of the online trainer, read by the pipeline's thread.
#[derive(Default)]
pub(crate) struct Status {
    pub steps: AtomicU64,
    pub views: AtomicUsize,
    pub splats: AtomicUsize,
}

/// What the online trainer needs (owned: it runs on its own thread).
pub(crate) struct Setup {
    pub gpu: Gpu,
    pub train: TrainOptions,
    /// Stop stepping (and only take keyframes) at this step.
    pub max_steps: u64,
    /// Most Gaussians a keyframe adds (its confident points, evenly strided).
    pub points_per_keyframe: usize,
    /// SLAM's export confidence: points below it are not added.
    pub min_conf: f32,
    /// Focal length of the pointmaps (pixels), for the points' footprints.
    pub focal: Option<f64>,
    /// The colour camera at full resolution.
    pub colour: PinholeCamera,
    /// The frames SLAM reads (for the delivered images of a data set that resamples colour).
    pub dataset: Box<dyn Dataset>,
    /// Where delivered images go (SLAM's output folder), when the data set resamples colour.
    pub delivered: Option<PathBuf>,
    pub input: PathBuf,
}

/// What the online phase did.
pub(crate) struct Outcome {
    /// `None` when no keyframe arrived.
    pub trainer: Option<Trainer>,
    pub views: usize,
    pub seconds: f64,
}

struct View {
    rgb: GpuBuffer<f32>,
    camera: Camera,
}

/// Runs the online trainer until `rx` closes (see the module docs).
pub(crate) fn run(
    setup: Setup,
    rx: Receiver<Msg>,
    status: &Status,
) -> Result<Outcome, PipelineError> {
    let start = Instant::now();
    let mut views: Vec<View> = Vec::new();
    let mut centres: Vec<[f64; 3]> = Vec::new();
    let mut floor = 0.0f64;
    let mut trainer: Option<Trainer> = None;
    loop {
        let idle = trainer.as_ref().is_none_or(|t| t.step >= setup.max_steps);
        let msg = if idle {
            match rx.recv() {
                Ok(m) => Some(m),
                Err(_) => break,
            }
        } else {
            match rx.try_recv() {
                Ok(m) => Some(m),
                Err(TryRecvError::Empty) => None,
                Err(TryRecvError::Disconnected) => break,
            }
        };
        match msg {
            Some(Msg::Keyframe {
                frame,
                rgb_path,
                c2w,
                pointmap,
            }) => {
                let view = load_view(&setup, frame, &rgb_path, &c2w)?;
                let points = keyframe_points(&pointmap, &c2w, setup.min_conf);
                if floor == 0.0 && !points.is_empty() {
                    // The first keyframe's mean depth bounds the scale of a short trajectory.
                    floor = 0.1 * points.iter().map(|p| p.depth as f64).sum::<f64>()
                        / points.len() as f64;
                }
                let f = setup
                    .focal
                    .unwrap_or_else(|| pointmap.width as f64 / 2.0 / 30f64.to_radians().tan());
                let init = crate::capture::splats_from_points(
                    &points,
                    setup.points_per_keyframe,
                    setup.train.sh_degree,
                    f,
                );
                let c = c2w.to_se3().matrix();
                centres.push([c[(0, 3)], c[(1, 3)], c[(2, 3)]]);
                let scale = scale_of(&centres).max(floor).max(1e-6);
                match trainer.as_mut() {
                    Some(t) => {
                        t.add_splats(&init)?;
                        t.cfg.scene_scale = scale as f32;
                    }
                    None if !init.is_empty() => {
                        trainer = Some(Trainer::new(
                            &setup.gpu,
                            train_config(&setup.train, scale),
                            &init,
                        )?);
                    }
                    None => {}
                }
                views.push(view);
                status.views.store(views.len(), Ordering::Relaxed);
                if let Some(t) = &trainer {
                    status.splats.store(t.num_splats(), Ordering::Relaxed);
                }
            }
            Some(Msg::Poses(poses)) => {
                for (v, p) in views.iter_mut().zip(&poses) {
                    v.camera.world_to_camera = crate::capture::w2c_of(p);
                }
            }
            None => {
                let Some(t) = trainer.as_mut() else { continue };
                let i = t.rng.below(views.len());
                let info = t.step(&views[i].camera, &views[i].rgb)?;
                status.steps.store(t.step, Ordering::Relaxed);
                status.splats.store(info.num_splats, Ordering::Relaxed);
            }
        }
    }
    if trainer.is_some() {
        setup.gpu.sync()?;
    }
    Ok(Outcome {
        trainer,
        views: views.len(),
        seconds: start.elapsed().as_secs_f64(),
    })
}

/// 3DGS's scene scale of camera centres (see [`crate::train::scene_scale`]).
fn scale_of(centres: &[[f64; 3]]) -> f64 {
    let n = centres.len().max(1) as f64;
    let mean = [0, 1, 2].map(|k| centres.iter().map(|c| c[k]).sum::<f64>() / n);
    1.1 * centres
        .iter()
        .map(|c| (0..3).map(|k| (c[k] - mean[k]).powi(2)).sum::<f64>().sqrt())
        .fold(0.0, f64::max)
}

/// A keyframe's points above `min_conf` in the world frame (its pose at creation).
fn keyframe_points(pm: &Pointmap, c2w: &Sim3, min_conf: f32) -> Vec<output::FusedPoint> {
    (0..pm.len())
        .filter(|&i| pm.conf[i] > 0.0 && pm.conf[i] >= min_conf)
        .filter_map(|i| {
            let p = pm.points[i];
            let w = c2w.act(&nalgebra::Vector3::new(
                p[0] as f64,
                p[1] as f64,
                p[2] as f64,
            ));
            let depth = (p[2] as f64 * c2w.scale) as f32;
            (depth > 0.0 && depth.is_finite()).then_some(output::FusedPoint {
                world: [w.x as f32, w.y as f32, w.z as f32],
                colour: pm.colors[i],
                depth,
            })
        })
        .collect()
}

/// A keyframe's training image (decoded and downscaled as the final phase's scene does) and
/// camera.
fn load_view(
    setup: &Setup,
    frame: usize,
    rgb_path: &std::path::Path,
    c2w: &Sim3,
) -> Result<View, PipelineError> {
    let path = match &setup.delivered {
        Some(dir) => output::write_delivered_image(setup.dataset.as_ref(), frame, rgb_path, dir)?,
        None => rgb_path.to_path_buf(),
    };
    let k = &setup.colour;
    let (w, h) = match (k.width, k.height) {
        (0, _) | (_, 0) => image::image_dimensions(&path)
            .map_err(|e| crate::error::invalid(format!("{}: {e}", path.display())))?,
        (w, h) => (w, h),
    };
    let posed = PosedImage {
        image_path: path.clone(),
        // As in the sequential session: the frame as it is, with the pinhole camera.
        camera: k.with_size(w, h).with_distortion(None),
        world_to_camera: crate::capture::w2c_of(c2w),
    };
    let scene = scene_from_images(
        &setup.input,
        &path,
        &[posed],
        None,
        &SceneOptions {
            downscale: setup.train.downscale,
            background: setup.train.background,
            kind: None,
        },
    )?;
    let camera = Camera::from(&scene.views[0]);
    let cache = ImageCache::new(Arc::new(scene), 1 << 30);
    let img = cache.get(0)?;
    let rgb: Vec<f32> = img.rgb.iter().map(|&v| v as f32 / 255.0).collect();
    Ok(View {
        rgb: setup.gpu.upload(&rgb),
        camera,
    })
}
