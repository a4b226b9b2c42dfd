//! What the viewer shows: splats (a splat file, or the splats or point cloud of a `rust3r train` /
//! `rust3r slam` output folder) and the cameras and trajectory drawn over them.

use std::path::{Path, PathBuf};

use rust3r_io::Splats;
use rust3r_splat::Camera;
use serde::Serialize;

use crate::ViewerError;

/// At most this many camera frusta are sent to the page (evenly spaced over the list).
const MAX_FRUSTA: usize = 400;
/// At most this many trajectory points are sent to the page.
const MAX_TRAJECTORY: usize = 20_000;

/// Cameras and a trajectory, drawn by the page over the rendered image.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Overlay {
    /// Camera frusta (their intrinsics give the frustum's shape).
    pub cameras: Vec<Camera>,
    /// Camera centres in order, world frame.
    pub trajectory: Vec<[f64; 3]>,
}

/// A scene to view.
#[derive(Clone, Debug)]
pub struct Scene {
    pub splats: Splats,
    pub overlay: Overlay,
    /// What was loaded, for the page and the terminal (e.g. `out/splats.ply`).
    pub description: String,
}

fn scene_err(path: &Path, message: impl Into<String>) -> ViewerError {
    ViewerError::Scene {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

/// Load a splat file (PLY, SPZ, `.splat`, compressed PLY; a PLY of plain coloured points becomes
/// small round Gaussians) or an output folder of `rust3r train` (`splats.ply`, else the latest
/// `splats_<step>.ply`) or `rust3r slam` (`pointcloud.ply`, with `transforms.json` cameras and the
/// `trajectory.txt` path).
pub fn load_scene(path: &Path) -> Result<Scene, ViewerError> {
    let meta = std::fs::metadata(path).map_err(|e| scene_err(path, format!("cannot open: {e}")))?;
    if !meta.is_dir() {
        let splats = load_splats_or_points(path)?;
        return Ok(Scene {
            splats,
            overlay: Overlay::default(),
            description: path.display().to_string(),
        });
    }
    let file = find_splat_file(path)
        .or_else(|| Some(path.join("pointcloud.ply")).filter(|p| p.is_file()))
        .ok_or_else(|| {
            scene_err(
                path,
                "no splats or point cloud here (looked for splats.ply / .spz / .splat, splats_<step>.ply / .spz, pointcloud.ply)",
            )
        })?;
    let splats = load_splats_or_points(&file)?;
    let mut overlay = Overlay::default();
    let transforms = path.join("transforms.json");
    if transforms.is_file() {
        overlay.cameras = read_transforms_cameras(&transforms)?;
    }
    let trajectory = path.join("trajectory.txt");
    if trajectory.is_file() {
        let poses = read_tum_trajectory(&trajectory)?;
        overlay.trajectory = poses.iter().map(|(_, c, _)| *c).collect();
        if overlay.cameras.is_empty() {
            // Frusta of the keyframes (or of the frames), with a 60 degree 4:3 camera: the TUM
            // files carry no intrinsics.
            let keyframes = path.join("keyframes.txt");
            let poses = if keyframes.is_file() {
                read_tum_trajectory(&keyframes)?
            } else {
                poses
            };
            overlay.cameras = poses
                .iter()
                .map(|(_, c, q)| {
                    let mut cam = Camera::look_at(
                        [0.0; 3],
                        [0.0, 0.0, 1.0],
                        [0.0, -1.0, 0.0],
                        60f64.to_radians(),
                        640,
                        480,
                    );
                    cam.world_to_camera = world_to_camera_from_tum(*c, *q);
                    cam
                })
                .collect();
        }
    } else {
        overlay.trajectory = overlay.cameras.iter().map(Camera::center).collect();
    }
    overlay.cameras = thin(overlay.cameras, MAX_FRUSTA);
    overlay.trajectory = thin(overlay.trajectory, MAX_TRAJECTORY);
    Ok(Scene {
        splats,
        overlay,
        description: file.display().to_string(),
    })
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

fn find_splat_file(dir: &Path) -> Option<PathBuf> {
    for name in ["splats.ply", "splats.spz", "splats.splat"] {
        let p = dir.join(name);
        if p.is_file() {
            return Some(p);
        }
    }
    // Intermediate saves of `rust3r train --save-at`: the latest step.
    let mut best: Option<(u64, PathBuf)> = None;
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let p = entry.path();
        let Some(name) = p.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let Some(rest) = name.strip_prefix("splats_") else {
            continue;
        };
        let Some((step, ext)) = rest.split_once('.') else {
            continue;
        };
        let Ok(step) = step.parse::<u64>() else {
            continue;
        };
        if matches!(ext, "ply" | "spz") && best.as_ref().is_none_or(|(b, _)| step > *b) {
            best = Some((step, p));
        }
    }
    best.map(|(_, p)| p)
}

fn load_splats_or_points(path: &Path) -> Result<Splats, ViewerError> {
    let splats = match rust3r_io::load_splats(path) {
        Ok(s) => s,
        Err(splat_err) => {
            let is_ply = path
                .extension()
                .and_then(|e| e.to_str())
                .is_some_and(|e| e.eq_ignore_ascii_case("ply"));
            // A PLY of coloured points (SLAM's point cloud, SfM points): round Gaussians.
            match is_ply.then(|| rust3r_io::scene::read_points_ply(path)) {
                Some(Ok(points)) => points_to_splats(&points.xyz, &points.rgb)
                    .map_err(|e| scene_err(path, e.to_string()))?,
                _ => return Err(splat_err.into()),
            }
        }
    };
    if splats.is_empty() {
        return Err(scene_err(path, "no splats in the file"));
    }
    Ok(splats)
}

/// Round, nearly opaque Gaussians at `xyz` coloured `rgb`, each as wide as the mean distance to
/// its three nearest neighbours (the 3DGS initialisation).
pub fn points_to_splats(xyz: &[[f32; 3]], rgb: &[[u8; 3]]) -> Result<Splats, ViewerError> {
    let init = rust3r_splat::train::init::from_points(xyz, rgb, 0.9, 1.0, 0)?;
    let triples = |v: &[f32]| {
        v.chunks_exact(3)
            .map(|c| [c[0], c[1], c[2]])
            .collect::<Vec<_>>()
    };
    Ok(Splats {
        means: triples(&init.means),
        log_scales: triples(&init.log_scales),
        rotations: init
            .quats
            .chunks_exact(4)
            .map(|c| [c[0], c[1], c[2], c[3]])
            .collect(),
        opacity_logits: init.opacity_logits,
        sh_degree: 0,
        sh: init.sh,
    })
}

/// A TUM trajectory (`timestamp tx ty tz qx qy qz qw` per line, `#` comments): timestamps,
/// camera centres and camera-to-world rotations `(qx, qy, qz, qw)`.
#[allow(clippy::type_complexity)]
pub fn read_tum_trajectory(path: &Path) -> Result<Vec<(f64, [f64; 3], [f64; 4])>, ViewerError> {
    let text =
        std::fs::read_to_string(path).map_err(|e| scene_err(path, format!("cannot read: {e}")))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let v: Vec<f64> = line
            .split_whitespace()
            .map(str::parse)
            .collect::<Result<_, _>>()
            .map_err(|_| {
                scene_err(
                    path,
                    format!(
                        "line {}: not 8 numbers (timestamp tx ty tz qx qy qz qw)",
                        i + 1
                    ),
                )
            })?;
        if v.len() != 8 || v.iter().any(|x| !x.is_finite()) {
            return Err(scene_err(
                path,
                format!(
                    "line {}: not 8 finite numbers (timestamp tx ty tz qx qy qz qw)",
                    i + 1
                ),
            ));
        }
        out.push((v[0], [v[1], v[2], v[3]], [v[4], v[5], v[6], v[7]]));
    }
    Ok(out)
}

/// World-to-camera matrix of a camera at `c` with camera-to-world rotation `q` (x, y, z, w).
fn world_to_camera_from_tum(c: [f64; 3], q: [f64; 4]) -> [[f64; 4]; 4] {
    let n = (q.iter().map(|v| v * v).sum::<f64>()).sqrt().max(1e-300);
    let [x, y, z, w] = q.map(|v| v / n);
    // Camera-to-world rotation.
    let r = [
        [
            1.0 - 2.0 * (y * y + z * z),
            2.0 * (x * y - z * w),
            2.0 * (x * z + y * w),
        ],
        [
            2.0 * (x * y + z * w),
            1.0 - 2.0 * (x * x + z * z),
            2.0 * (y * z - x * w),
        ],
        [
            2.0 * (x * z - y * w),
            2.0 * (y * z + x * w),
            1.0 - 2.0 * (x * x + y * y),
        ],
    ];
    world_to_camera_from_c2w(r, c)
}

/// `[R^T | -R^T c]` for a camera-to-world rotation `r` and centre `c`.
fn world_to_camera_from_c2w(r: [[f64; 3]; 3], c: [f64; 3]) -> [[f64; 4]; 4] {
    let mut m = [[0.0; 4]; 4];
    for i in 0..3 {
        for k in 0..3 {
            m[i][k] = r[k][i];
        }
        m[i][3] = -(r[0][i] * c[0] + r[1][i] * c[1] + r[2][i] * c[2]);
    }
    m[3][3] = 1.0;
    m
}

/// The cameras of a nerfstudio `transforms.json` (`transform_matrix`: OpenGL camera-to-world;
/// intrinsics per frame or for the whole file).
fn read_transforms_cameras(path: &Path) -> Result<Vec<Camera>, ViewerError> {
    let text =
        std::fs::read_to_string(path).map_err(|e| scene_err(path, format!("cannot read: {e}")))?;
    let doc: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| scene_err(path, format!("not valid JSON: {e}")))?;
    let num = |v: &serde_json::Value, key: &str| {
        v.get(key)
            .and_then(serde_json::Value::as_f64)
            .or_else(|| doc.get(key)?.as_f64())
    };
    let Some(frames) = doc.get("frames").and_then(|f| f.as_array()) else {
        return Err(scene_err(path, "no 'frames' array"));
    };
    let mut cams = Vec::with_capacity(frames.len());
    for (i, f) in frames.iter().enumerate() {
        let bad = |what: &str| scene_err(path, format!("frame {i}: {what}"));
        let m: [[f64; 4]; 4] = f
            .get("transform_matrix")
            .and_then(|m| serde_json::from_value(m.clone()).ok())
            .ok_or_else(|| bad("no 4x4 'transform_matrix'"))?;
        let (w, h) = (num(f, "w").unwrap_or(640.0), num(f, "h").unwrap_or(480.0));
        let fx = num(f, "fl_x").or_else(|| {
            let angle = num(f, "camera_angle_x")?;
            Some(0.5 * w / (0.5 * angle).tan())
        });
        let fx = fx.ok_or_else(|| bad("no focal length (fl_x or camera_angle_x)"))?;
        // OpenGL to OpenCV camera axes: y and z flip.
        let r = [0, 1, 2].map(|row| [m[row][0], -m[row][1], -m[row][2]]);
        let cam = Camera {
            intrinsics: rust3r_geometry::PinholeCamera::new(
                fx,
                num(f, "fl_y").unwrap_or(fx),
                num(f, "cx").unwrap_or(w / 2.0),
                num(f, "cy").unwrap_or(h / 2.0),
                w.max(1.0) as u32,
                h.max(1.0) as u32,
            ),
            world_to_camera: world_to_camera_from_c2w(r, [m[0][3], m[1][3], m[2][3]]),
        };
        cam.validate().map_err(|e| bad(&e.to_string()))?;
        cams.push(cam);
    }
    Ok(cams)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tum_pose_round_trips_through_the_world_to_camera_matrix() {
        // 90 degrees about z, centre (1, 2, 3).
        let h = std::f64::consts::FRAC_1_SQRT_2;
        let m = world_to_camera_from_tum([1.0, 2.0, 3.0], [0.0, 0.0, h, h]);
        let cam = Camera {
            intrinsics: rust3r_geometry::PinholeCamera::new(1.0, 1.0, 0.0, 0.0, 1, 1),
            world_to_camera: m,
        };
        let c = cam.center();
        for k in 0..3 {
            assert!((c[k] - [1.0, 2.0, 3.0][k]).abs() < 1e-12, "{c:?}");
        }
        // The camera's x axis (row 0) is the world y axis after a 90 degree turn about z.
        assert!(
            (m[0][1] - 1.0).abs() < 1e-12 && m[0][0].abs() < 1e-12,
            "{m:?}"
        );
    }

    #[test]
    fn slam_folder_gives_points_cameras_and_trajectory() {
        let dir = tempfile::tempdir().unwrap();
        let mut ply = b"ply\nformat ascii 1.0\nelement vertex 4\nproperty float x\nproperty float y\nproperty float z\nproperty uchar red\nproperty uchar green\nproperty uchar blue\nend_header\n".to_vec();
        ply.extend_from_slice(b"0 0 0 255 0 0\n1 0 0 0 255 0\n0 1 0 0 0 255\n0 0 1 9 9 9\n");
        std::fs::write(dir.path().join("pointcloud.ply"), ply).unwrap();
        std::fs::write(
            dir.path().join("trajectory.txt"),
            "# timestamp tx ty tz qx qy qz qw\n0 0 0 -2 0 0 0 1\n1 0.5 0 -2 0 0 0 1\n",
        )
        .unwrap();
        let scene = load_scene(dir.path()).unwrap();
        assert_eq!(scene.splats.len(), 4);
        assert_eq!(
            scene.overlay.trajectory,
            vec![[0.0, 0.0, -2.0], [0.5, 0.0, -2.0]]
        );
        assert_eq!(scene.overlay.cameras.len(), 2);
        assert_eq!(scene.overlay.cameras[1].center(), [0.5, 0.0, -2.0]);
        // A malformed trajectory is an error naming the file and line.
        std::fs::write(dir.path().join("trajectory.txt"), "0 1 2\n").unwrap();
        let err = load_scene(dir.path()).unwrap_err().to_string();
        assert!(
            err.contains("trajectory.txt") && err.contains("line 1"),
            "{err}"
        );
    }

    #[test]
    fn train_folder_takes_the_latest_step_and_empty_folder_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let err = load_scene(dir.path()).unwrap_err().to_string();
        assert!(err.contains("no splats"), "{err}");
        for step in [700, 7000, 30] {
            std::fs::write(dir.path().join(format!("splats_{step}.ply")), b"x").unwrap();
        }
        assert_eq!(
            find_splat_file(dir.path()),
            Some(dir.path().join("splats_7000.ply"))
        );
        std::fs::write(dir.path().join("splats.ply"), b"x").unwrap();
        assert_eq!(
            find_splat_file(dir.path()),
            Some(dir.path().join("splats.ply"))
        );
        // Not a splat file: an error, not a panic.
        assert!(load_scene(dir.path()).is_err());
    }

    #[test]
    fn thin_keeps_first_and_last() {
        let v: Vec<usize> = (0..1000).collect();
        let t = thin(v, 10);
        assert_eq!(t.len(), 10);
        assert_eq!((t[0], t[9]), (0, 999));
    }
}
