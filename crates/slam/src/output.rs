//! Files written by a SLAM run: trajectories (TUM), keyframes, the coloured point cloud (PLY),
//! ground truth, and a nerfstudio `transforms.json`. Every write is atomic.

use std::io::Write;
use std::path::{Path, PathBuf};

use nalgebra::{Matrix4, Vector3};
use rust3r_geometry::{PinholeCamera, Sim3};
use rust3r_io::atomic::write_atomic_with;
use rust3r_io::datasets::{Dataset, Pose};

use crate::SlamError;
use crate::system::SlamResult;

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> SlamError + '_ {
    move |source| SlamError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// TUM line of a pose: `timestamp tx ty tz qx qy qz qw` (scale dropped).
fn tum_line(t: f64, p: &Sim3) -> String {
    let q = p.rotation.quaternion();
    let x = &p.translation;
    format!(
        "{t:.6} {:.9} {:.9} {:.9} {:.9} {:.9} {:.9} {:.9}\n",
        x.x, x.y, x.z, q.i, q.j, q.k, q.w
    )
}

/// Writes `(timestamp, T_WC)` poses in TUM format.
pub fn write_tum_poses(path: &Path, poses: &[(f64, Sim3)]) -> Result<(), SlamError> {
    write_atomic_with(path, |w| {
        w.write_all(b"# timestamp tx ty tz qx qy qz qw\n")?;
        for (t, p) in poses {
            w.write_all(tum_line(*t, p).as_bytes())?;
        }
        Ok(())
    })
    .map_err(io_err(path))
}

/// Converts a data-set pose matrix to a transform (scale 1).
pub fn pose_to_sim3(m: &Pose) -> Sim3 {
    let mut mat = Matrix4::zeros();
    for r in 0..4 {
        for c in 0..4 {
            mat[(r, c)] = m[r][c];
        }
    }
    Sim3::from_se3(&rust3r_geometry::SE3::from_matrix(&mat))
}

/// Writes the data set's ground truth in TUM format; `false` when it has none.
pub fn write_ground_truth(path: &Path, dataset: &dyn Dataset) -> Result<bool, SlamError> {
    let Some(gt) = dataset.ground_truth() else {
        return Ok(false);
    };
    let poses: Vec<(f64, Sim3)> = gt.iter().map(|(t, m)| (*t, pose_to_sim3(m))).collect();
    write_tum_poses(path, &poses)?;
    Ok(true)
}

/// A point of a keyframe's fused pointmap, in the world frame.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FusedPoint {
    /// Position (world frame).
    pub world: [f32; 3],
    /// Colour of the pixel it came from.
    pub colour: [u8; 3],
    /// Its depth in the keyframe's camera, in world units (the pointmap's z times the
    /// keyframe's scale).
    pub depth: f32,
}

/// Points of the keyframes (world frame) whose average confidence is at least `min_conf`,
/// with colours and depths.
pub fn fused_points(result: &SlamResult, min_conf: f32) -> Vec<FusedPoint> {
    let mut out = Vec::new();
    for kf in &result.keyframes.frames {
        let n = kf.n.max(1) as f32;
        let pm = &kf.pointmap;
        for i in 0..pm.len() {
            if pm.conf[i] <= 0.0 || pm.conf[i] / n < min_conf {
                continue;
            }
            let p = pm.points[i];
            let w = kf
                .t_wc
                .act(&Vector3::new(p[0] as f64, p[1] as f64, p[2] as f64));
            let depth = (p[2] as f64 * kf.t_wc.scale) as f32;
            out.push(FusedPoint {
                world: [w.x as f32, w.y as f32, w.z as f32],
                colour: pm.colors[i],
                depth,
            });
        }
    }
    out
}

/// Points of the keyframes (world frame) whose average confidence is at least `min_conf`,
/// with colours ([`fused_points`] without the depths).
pub fn collect_points(result: &SlamResult, min_conf: f32) -> Vec<([f32; 3], [u8; 3])> {
    fused_points(result, min_conf)
        .into_iter()
        .map(|p| (p.world, p.colour))
        .collect()
}

/// Writes a binary little-endian PLY with `x y z` (float) and `red green blue` (uchar).
pub fn write_ply(path: &Path, points: &[([f32; 3], [u8; 3])]) -> Result<(), SlamError> {
    write_atomic_with(path, |w| {
        write!(
            w,
            "ply\nformat binary_little_endian 1.0\ncomment rust3r slam point cloud\nelement vertex {}\n\
             property float x\nproperty float y\nproperty float z\n\
             property uchar red\nproperty uchar green\nproperty uchar blue\nend_header\n",
            points.len()
        )?;
        for (p, c) in points {
            for v in p {
                w.write_all(&v.to_le_bytes())?;
            }
            w.write_all(c)?;
        }
        Ok(())
    })
    .map_err(io_err(path))
}

/// OpenGL camera-to-world matrix from an OpenCV one: the y and z camera columns negated.
pub fn opencv_to_opengl_c2w(t: &Sim3) -> Matrix4<f64> {
    let mut m = t.to_se3().matrix();
    for r in 0..3 {
        m[(r, 1)] = -m[(r, 1)];
        m[(r, 2)] = -m[(r, 2)];
    }
    m
}

/// Writes a nerfstudio `transforms.json`: one frame per `(image, T_WC)` with its intrinsics,
/// `transform_matrix` the OpenGL camera-to-world, and `ply_file_path` naming the point cloud.
/// `k1 k2 p1 p2` (and `k3` when non-zero) are `cam`'s distortion, the distortion of the image
/// files listed (zeros for undistorted images).
pub fn write_transforms_json(
    path: &Path,
    cam: &PinholeCamera,
    frames: &[(PathBuf, Sim3)],
    ply_file: &str,
) -> Result<(), SlamError> {
    let frames_json: Vec<serde_json::Value> = frames
        .iter()
        .map(|(img, t)| {
            let m = opencv_to_opengl_c2w(t);
            let rows: Vec<Vec<f64>> = (0..4)
                .map(|r| (0..4).map(|c| m[(r, c)]).collect())
                .collect();
            let abs = std::path::absolute(img).unwrap_or_else(|_| img.clone());
            serde_json::json!({
                "file_path": abs.to_string_lossy(),
                "transform_matrix": rows,
                "fl_x": cam.fx, "fl_y": cam.fy, "cx": cam.cx, "cy": cam.cy,
                "w": cam.width, "h": cam.height,
            })
        })
        .collect();
    let d = cam.distortion.unwrap_or_default();
    let mut doc = serde_json::json!({
        "camera_model": "OPENCV",
        "fl_x": cam.fx, "fl_y": cam.fy, "cx": cam.cx, "cy": cam.cy,
        "w": cam.width, "h": cam.height,
        "k1": d.k1, "k2": d.k2, "p1": d.p1, "p2": d.p2,
        "ply_file_path": ply_file,
        "frames": frames_json,
    });
    if d.k3 != 0.0 {
        doc["k3"] = serde_json::json!(d.k3);
    }
    let text = serde_json::to_string_pretty(&doc).expect("JSON of numbers and strings");
    write_atomic_with(path, |w| w.write_all(text.as_bytes())).map_err(io_err(path))
}

/// Paths of the files [`write_outputs`] writes.
#[derive(Debug, Clone, PartialEq)]
pub struct OutputFiles {
    /// Pose of every tracked frame (TUM; frames lost until relocalisation have none).
    pub trajectory: PathBuf,
    /// Keyframe poses (TUM).
    pub keyframes: PathBuf,
    /// Coloured point cloud.
    pub pointcloud: PathBuf,
    /// Ground truth (TUM), when the data set has one.
    pub groundtruth: Option<PathBuf>,
    /// nerfstudio export.
    pub transforms: PathBuf,
    /// Number of points in the cloud.
    pub num_points: usize,
}

/// Where [`write_outputs`] puts the delivered image of the frame read from `source` when the
/// data set resamples its colour ([`Dataset::colour_resampled`]).
pub fn delivered_image_path(out_dir: &Path, source: &Path) -> PathBuf {
    let stem = source
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "frame".into());
    out_dir.join("images").join(format!("{stem}.jpg"))
}

/// Writes frame `index` of `dataset` as delivered (e.g. colour registered to depth) to
/// `out_dir/images/<stem of source>.jpg` (quality 95, atomically); returns its path.
pub fn write_delivered_image(
    dataset: &dyn Dataset,
    index: usize,
    source: &Path,
    out_dir: &Path,
) -> Result<PathBuf, SlamError> {
    let images = out_dir.join("images");
    std::fs::create_dir_all(&images).map_err(io_err(&images))?;
    let path = delivered_image_path(out_dir, source);
    let frame = dataset.frame(index)?;
    write_atomic_with(&path, |w| {
        image::codecs::jpeg::JpegEncoder::new_with_quality(w, 95)
            .encode_image(&frame.rgb)
            .map_err(std::io::Error::other)
    })
    .map_err(io_err(&path))?;
    Ok(path)
}

/// Writes every output of a run into `out_dir` (created if needed). When the data set delivers
/// resampled colour ([`Dataset::colour_resampled`]), `transforms.json` refers to copies of the
/// delivered images in `out_dir/images/`, whose calibration it carries.
pub fn write_outputs(
    result: &SlamResult,
    dataset: &dyn Dataset,
    out_dir: &Path,
    export_conf: f32,
) -> Result<OutputFiles, SlamError> {
    write_outputs_with(result, dataset, out_dir, export_conf, None)
}

/// [`write_outputs`], with `camera` the export's calibration when the data set has none (an
/// uncalibrated video: a camera estimated from the pointmaps).
pub fn write_outputs_with(
    result: &SlamResult,
    dataset: &dyn Dataset,
    out_dir: &Path,
    export_conf: f32,
    camera: Option<PinholeCamera>,
) -> Result<OutputFiles, SlamError> {
    std::fs::create_dir_all(out_dir).map_err(io_err(out_dir))?;
    let trajectory = out_dir.join("trajectory.txt");
    // Frames lost between a tracking failure and relocalisation have no pose (rather than a
    // wrong one): they are left out of the trajectory.
    let tracked: Vec<(f64, Sim3)> = result
        .frames
        .iter()
        .zip(result.frame_poses())
        .filter(|(f, _)| f.tracked)
        .map(|(_, p)| p)
        .collect();
    write_tum_poses(&trajectory, &tracked)?;
    let keyframes = out_dir.join("keyframes.txt");
    write_tum_poses(&keyframes, &result.keyframe_poses())?;
    let pointcloud = out_dir.join("pointcloud.ply");
    let points = collect_points(result, export_conf);
    write_ply(&pointcloud, &points)?;
    let gt_path = out_dir.join("groundtruth.txt");
    let groundtruth = if write_ground_truth(&gt_path, dataset)? {
        Some(gt_path)
    } else {
        None
    };
    let k = dataset
        .intrinsics()
        .or_else(|| dataset.depth_intrinsics())
        .or(camera)
        .ok_or_else(|| {
            SlamError::InvalidInput(format!(
                "data set '{}' has no calibration to export",
                dataset.name()
            ))
        })?;
    let first = result.frames.first().map(|f| f.rgb_path.clone());
    let (w, h) = match (k.width, k.height, &first) {
        (0, _, Some(p)) | (_, 0, Some(p)) => image::image_dimensions(p)
            .map_err(|e| SlamError::InvalidInput(format!("{}: {e}", p.display())))?,
        (w, h, _) => (w, h),
    };
    // The files on disk keep the calibration's distortion (TUM freiburg1/2, EuRoC); delivered
    // images (colour resampled into the depth camera) are written undistorted.
    let cam = k.with_size(w, h);
    let cam = if dataset.colour_resampled() {
        cam.with_distortion(None)
    } else {
        cam
    };
    let poses = result.frame_poses();
    let mut frames: Vec<(PathBuf, Sim3)> = result
        .frames
        .iter()
        .zip(&poses)
        .filter(|(f, _)| f.tracked)
        .map(|(f, (_, t))| (f.rgb_path.clone(), *t))
        .collect();
    if dataset.colour_resampled() {
        // The calibration above is that of the images the data set delivers (colour resampled
        // into the depth camera), not of the files on disk: export the delivered images.
        let tracked = result.frames.iter().filter(|f| f.tracked);
        for ((path, _), record) in frames.iter_mut().zip(tracked) {
            *path = write_delivered_image(dataset, record.index, &record.rgb_path, out_dir)?;
        }
    }
    let transforms = out_dir.join("transforms.json");
    write_transforms_json(&transforms, &cam, &frames, "pointcloud.ply")?;
    Ok(OutputFiles {
        trajectory,
        keyframes,
        pointcloud,
        groundtruth,
        transforms,
        num_points: points.len(),
    })
}
