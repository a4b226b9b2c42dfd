//! Training-scene loaders (`rust3r_io::scene`): real COLMAP / transforms.json / NeRF-synthetic
//! scenes checked against independent references (hand-computed cameras, COLMAP's own keypoint
//! tracks, analytic synthetic images), writer round trips, the image cache, and malformed input.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rust3r_geometry::nalgebra::Vector2;
use rust3r_geometry::{PinholeCamera, RadTanDistortion, UndistortCriteria};
use rust3r_io::IoError;
use rust3r_io::scene::{
    self, ImageCache, PosedImage, Scene, SceneKind, SceneOptions, ScenePoints, SceneView, colmap,
    detect_scene, open_scene, read_points_ply, scene_from_images, write_colmap_text,
    write_points_ply, write_transforms_json,
};
use rust3r_testdata::data;

fn statuette_dense() -> PathBuf {
    data("statuette/dense/0")
}

fn opts() -> SceneOptions {
    SceneOptions::default()
}

fn open(path: &Path) -> Scene {
    open_scene(path, &opts()).unwrap_or_else(|e| panic!("{e}"))
}

fn assert_close(a: f64, b: f64, tol: f64, what: &str) {
    assert!((a - b).abs() <= tol, "{what}: {a} vs {b} (tolerance {tol})");
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[((v.len() - 1) as f64 * p).round() as usize]
}

// ---------------------------------------------------------------------------
// NeRF-synthetic (lego)

#[test]
fn lego_view0_camera_matches_hand_computed_values() {
    let lego = data("lego");
    assert_eq!(detect_scene(&lego), Some(SceneKind::NerfSynthetic));
    let s = open(&lego);
    assert_eq!(s.kind, SceneKind::NerfSynthetic);
    assert_eq!(s.views.len(), 100);
    assert!(s.points.is_none());
    let v = &s.views[0];
    assert_eq!(v.name, "r_0.png");
    assert_eq!(v.image_path, lego.join("train/r_0.png"));
    assert_eq!((v.camera.width, v.camera.height), (800, 800));
    // 0.5 * 800 / tan(0.5 * 0.6911112070083618), computed separately (Python).
    assert_close(v.camera.fx, 1111.1110311937682, 1e-9, "fx");
    assert_close(v.camera.fy, 1111.1110311937682, 1e-9, "fy");
    assert_eq!((v.camera.cx, v.camera.cy), (400.0, 400.0));
    // OpenGL c2w of frame 0 with camera y, z negated, inverted (computed separately).
    let expected = [
        [
            -0.9999021887779236,
            -0.013988681137561798,
            -4.656612873077393e-10,
            6.553560472077891e-10,
        ],
        [
            -0.004192245192825794,
            0.2996590733528137,
            -0.9540371894836426,
            -1.8133375223605697e-07,
        ],
        [
            0.013345719315111637,
            -0.95394366979599,
            -0.29968830943107605,
            4.031128297550424,
        ],
        [0.0, 0.0, 0.0, 1.0],
    ];
    #[allow(clippy::needless_range_loop)]
    for r in 0..4 {
        for c in 0..4 {
            // The json's float32 rotation is snapped to the nearest exact rotation (~1e-7).
            assert_close(
                v.world_to_camera[r][c],
                expected[r][c],
                1e-6,
                &format!("w2c[{r}][{c}]"),
            );
        }
    }
    for a in 0..3 {
        for b in 0..3 {
            let dot: f64 = (0..3)
                .map(|k| v.world_to_camera[k][a] * v.world_to_camera[k][b])
                .sum();
            assert_close(dot, (a == b) as u8 as f64, 1e-14, "orthonormal rotation");
        }
    }
    // The camera centre is kept exactly: the json's translation column.
    let c2w = v.camera_to_world();
    assert_close(c2w[0][3], -0.05379832163453102, 1e-14, "centre x");
    assert_close(c2w[1][3], 3.845470428466797, 1e-14, "centre y");
    assert_close(c2w[2][3], 1.2080823183059692, 1e-14, "centre z");
    // The object sits at the origin: it projects to the image centre, in front of the camera.
    let p = v.project([0.0, 0.0, 0.0]).expect("in front");
    assert!(
        (p[0] - 400.0).abs() < 2.0 && (p[1] - 400.0).abs() < 2.0,
        "{p:?}"
    );
    // Views are in file order.
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(lego.join("transforms_train.json")).unwrap())
            .unwrap();
    for (i, f) in json["frames"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .take(12)
    {
        let fp = f["file_path"].as_str().unwrap();
        assert_eq!(
            format!("{}.png", fp.rsplit('/').next().unwrap()),
            s.views[i].name
        );
    }
}

#[test]
fn lego_split_every_8th() {
    let s = open(&data("lego"));
    let (train, eval) = s.split(8);
    assert_eq!((train.len(), eval.len()), (87, 13));
    assert_eq!(eval, (0..100).step_by(8).collect::<Vec<_>>());
    assert!(train.iter().all(|i| i % 8 != 0));
    let (train, eval) = s.split(0);
    assert_eq!((train.len(), eval.len()), (100, 0));
    let (train, eval) = s.split(1);
    assert_eq!((train.len(), eval.len()), (0, 100));
}

#[test]
fn lego_alpha_compositing_and_downscale() {
    let lego = data("lego");
    let bg = [0.2f32, 0.5, 1.0];
    let s = open_scene(
        &lego,
        &SceneOptions {
            background: bg,
            ..opts()
        },
    )
    .unwrap();
    let rgb = s.load_image(0).unwrap();
    assert_eq!(rgb.len(), 800 * 800 * 3);
    // Independent decode and compositing of the same file.
    let raw = image::open(lego.join("train/r_0.png"))
        .unwrap()
        .into_rgba8();
    let mut partial = 0;
    for (i, px) in raw.pixels().enumerate() {
        let a = px[3] as f32 / 255.0;
        for c in 0..3 {
            let want = ((px[c] as f32 / 255.0 * a + bg[c] * (1.0 - a)) * 255.0 + 0.5)
                .floor()
                .clamp(0.0, 255.0) as u8;
            assert_eq!(rgb[i * 3 + c], want, "pixel {i} channel {c}");
        }
        partial += (px[3] > 0 && px[3] < 255) as usize;
    }
    assert!(partial > 100, "the image should have soft edges");
    // Corner: fully transparent -> background.
    assert_eq!(&rgb[..3], &[51, 128, 255]);

    // Downscale 4: 200x200, intrinsics / 4, pixels = 4x4 block means of the composited image.
    let s4 = open_scene(
        &lego,
        &SceneOptions {
            downscale: 4,
            background: bg,
            kind: None,
        },
    )
    .unwrap();
    let v = &s4.views[0];
    assert_eq!((v.camera.width, v.camera.height), (200, 200));
    assert_close(v.camera.fx, 1111.1110311937682 / 4.0, 1e-9, "fx/4");
    assert_eq!((v.camera.cx, v.camera.cy), (100.0, 100.0));
    let small = s4.load_image(0).unwrap();
    assert_eq!(small.len(), 200 * 200 * 3);
    for (y, x) in [(0usize, 0usize), (100, 100), (57, 143), (199, 3), (120, 88)] {
        for c in 0..3 {
            let mut sum = 0.0f32;
            for dy in 0..4 {
                for dx in 0..4 {
                    sum += rgb[((y * 4 + dy) * 800 + x * 4 + dx) * 3 + c] as f32;
                }
            }
            let want = sum / 16.0;
            let got = small[(y * 200 + x) * 3 + c] as f32;
            // The full-res image was rounded once already.
            assert!((got - want).abs() <= 1.0, "({x},{y}) c{c}: {got} vs {want}");
        }
    }
}

// ---------------------------------------------------------------------------
// COLMAP (statuette)

/// For every observation in COLMAP's tracks: the distance between the point projected with
/// the loaded view and COLMAP's stored keypoint (mapped by `keypoint_to_delivered`).
fn reprojection_errors(
    scene: &Scene,
    model: &colmap::Model,
    keypoint_to_source: impl Fn(&SceneView, usize, [f64; 2]) -> [f64; 2],
) -> Vec<f64> {
    let by_id: std::collections::HashMap<u32, &colmap::Image> =
        model.images.iter().map(|im| (im.id, im)).collect();
    let mut errors = Vec::new();
    for p in &model.points {
        for t in &p.track {
            let im = by_id[&t.image_id];
            let kp = im.points2d[t.point2d_idx as usize];
            assert_eq!(kp.point3d_id, Some(p.id));
            let vi = scene.views.iter().position(|v| v.name == im.name).unwrap();
            let v = &scene.views[vi];
            let uv = v
                .project(p.xyz)
                .expect("tracked point in front of the camera");
            let uv = keypoint_to_source(v, vi, uv);
            errors.push(((uv[0] - kp.xy[0]).powi(2) + (uv[1] - kp.xy[1]).powi(2)).sqrt());
        }
    }
    errors
}

#[test]
fn statuette_dense_reprojects_onto_colmap_keypoints() {
    let root = statuette_dense();
    assert_eq!(detect_scene(&root), Some(SceneKind::Colmap));
    let s = open(&root);
    assert_eq!(s.kind, SceneKind::Colmap);
    assert_eq!(s.root, root);
    assert_eq!(s.views.len(), 23);
    let names: Vec<&str> = s.views.iter().map(|v| v.name.as_str()).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted, "views sorted by name");
    assert_eq!(names[0], "DSC_5283.jpg");
    assert_eq!(s.views[0].image_path, root.join("images/DSC_5283.jpg"));
    let v = &s.views[0];
    assert_eq!((v.camera.width, v.camera.height), (1000, 658));
    assert!(!s.is_undistorted(0));
    let points = s.points.as_ref().unwrap();
    assert_eq!(points.len(), 1443);

    // A few points land inside the images (and in front of the cameras).
    let mut inside = 0;
    for p in points.xyz.iter().take(50) {
        let p = p.map(|v| v as f64);
        for v in &s.views {
            if let Some(uv) = v.project(p) {
                inside +=
                    (uv[0] >= 0.0 && uv[1] >= 0.0 && uv[0] < 1000.0 && uv[1] < 658.0) as usize;
            }
        }
    }
    assert!(
        inside > 50 * 23 / 3,
        "only {inside} projections inside the images"
    );

    // Reprojection onto the keypoints COLMAP itself matched (images.bin / points3D.bin tracks).
    let model = colmap::read_model(&root.join("sparse")).unwrap();
    let mut errors = reprojection_errors(&s, &model, |_, _, uv| uv);
    let n = errors.len();
    let median = percentile(&mut errors, 0.5);
    let p95 = percentile(&mut errors, 0.95);
    let max = errors[n - 1];
    eprintln!(
        "dense: {n} observations, reprojection median {median:.3} px, p95 {p95:.3}, max {max:.3}"
    );
    assert!(n > 3000);
    assert!(
        median < 0.5 && p95 < 1.0 && max < 2.0,
        "median {median}, p95 {p95}, max {max}"
    );

    // Decode one image.
    let rgb = s.load_image(0).unwrap();
    assert_eq!(rgb.len(), 1000 * 658 * 3);
}

#[test]
fn statuette_distorted_model_opens_and_reprojects_through_undistortion() {
    let model_dir = data("statuette/sparse/0");
    let s = open(&model_dir);
    assert_eq!(s.root, data("statuette"));
    assert_eq!(s.views.len(), 23);
    assert!(s.is_undistorted(0));
    let model = colmap::read_model(&model_dir).unwrap();
    let cam = &model.cameras[0];
    assert_eq!(cam.model, "SIMPLE_RADIAL");
    let (src, dist, target) = s.distortion(0).unwrap();
    assert_eq!((src.width, src.height), (3031, 2006));
    assert_eq!(dist.k1, cam.params[3]);
    assert_eq!((dist.k2, dist.p1, dist.p2), (0.0, 0.0, 0.0));
    let v = &s.views[0];
    assert_eq!((v.camera.width, v.camera.height), (3031, 2006));
    assert_eq!(
        (v.camera.fx, v.camera.fy, v.camera.cx, v.camera.cy),
        (target.fx, target.fy, target.cx, target.cy)
    );
    // Mild distortion (about 1% at the corners): the new camera stays close to the old one.
    assert!(
        (v.camera.fx / src.fx - 1.0).abs() < 0.05,
        "{} vs {}",
        v.camera.fx,
        src.fx
    );
    assert!((v.camera.cx - 1515.5).abs() < 50.0 && (v.camera.cy - 1003.0).abs() < 50.0);

    // Project with the delivered pinhole camera, map the pixel back into the distorted image
    // (normalise, distort, apply the original intrinsics) and compare with COLMAP's keypoints.
    let mut errors = reprojection_errors(&s, &model, |v, vi, uv| {
        let (src, dist, _) = s.distortion(vi).unwrap();
        let n = Vector2::new(
            (uv[0] - v.camera.cx) / v.camera.fx,
            (uv[1] - v.camera.cy) / v.camera.fy,
        );
        let d = dist.distort(&n);
        [src.fx * d.x + src.cx, src.fy * d.y + src.cy]
    });
    let n = errors.len();
    let median = percentile(&mut errors, 0.5);
    let p95 = percentile(&mut errors, 0.95);
    eprintln!("sparse (SIMPLE_RADIAL): {n} observations, median {median:.3} px, p95 {p95:.3}");
    // Same reconstruction at 3x the resolution of the dense model (median 0.25 px there).
    assert!(median < 1.0 && p95 < 3.0, "median {median}, p95 {p95}");

    // The undistorted model of the same reconstruction has the same poses.
    let dense = open(&statuette_dense());
    for (a, b) in s.views.iter().zip(&dense.views) {
        assert_eq!(a.name, b.name);
        for r in 0..3 {
            for c in 0..4 {
                assert_close(
                    a.world_to_camera[r][c],
                    b.world_to_camera[r][c],
                    1e-9,
                    "pose",
                );
            }
        }
    }

    // No images in this folder: opening works, loading names the missing file.
    let err = s.load_image(0).unwrap_err();
    assert!(matches!(err, IoError::Io { .. }), "{err}");
    assert_eq!(err.path(), data("statuette").join("images/DSC_5283.jpg"));
    assert!(err.to_string().contains("DSC_5283.jpg"), "{err}");
}

#[test]
fn colmap_text_model_equals_binary_model() {
    let tmp = tempfile::tempdir().unwrap();
    for src in [statuette_dense().join("sparse"), data("statuette/sparse/0")] {
        let bin = colmap::read_model(&src).unwrap();
        assert_eq!(bin.cameras.len(), 23);
        assert_eq!(bin.images.len(), 23);
        assert_eq!(bin.points.len(), 1443);
        let dir = tmp.path().join("sparse/0");
        colmap::write_model_text(&dir, &bin).unwrap();
        assert!(dir.join("cameras.txt").is_file() && !dir.join("cameras.bin").exists());
        let text = colmap::read_model(&dir).unwrap();
        assert_eq!(text, bin, "text model of {}", src.display());
    }
    // And as a scene: the text model (with the dense images linked in) gives the same views.
    let dense = open(&statuette_dense());
    let bin = colmap::read_model(&statuette_dense().join("sparse")).unwrap();
    colmap::write_model_text(&tmp.path().join("sparse/0"), &bin).unwrap();
    let s = open(tmp.path());
    assert_eq!(s.views.len(), dense.views.len());
    for (a, b) in s.views.iter().zip(&dense.views) {
        assert_eq!(a.image_path, tmp.path().join("images").join(&b.name));
        assert_eq!(
            SceneView {
                image_path: b.image_path.clone(),
                ..a.clone()
            },
            *b
        );
    }
    assert_eq!(s.points, dense.points);
}

#[test]
fn colmap_text_reader_handles_comments_and_empty_keypoint_lines() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::write(
        dir.join("cameras.txt"),
        "# comment\n\n1 SIMPLE_RADIAL 640 480 500 320 240 0.01\n2 PINHOLE 100 50 80 81 49.5 24.5\r\n\
         3 RADIAL 64 48 50 32 24 -0.1 0.02\n4 OPENCV 64 48 50 51 32 24 -0.1 0.02 0.001 -0.002\n\
         5 SIMPLE_PINHOLE 64 48 50 32 24\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("images.txt"),
        "# IMAGE_ID QW QX QY QZ TX TY TZ CAMERA_ID NAME\n\
         2 1 0 0 0 1 2 3 2 b.png\n\
         \n\
         1 0 1 0 0 0 0 0 1 sub dir/a.png\n\
         10.5 20.25 7 1 2 -1\n\
         3 1 0 0 0 0 0 0 3 c.png\n\n4 1 0 0 0 0 0 0 4 d.png\n\n5 1 0 0 0 0 0 0 5 e.png\n\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("points3D.txt"),
        "7 1.5 -2 3 255 128 0 0.25 1 0 2 5\n",
    )
    .unwrap();
    let model = colmap::read_model(dir).unwrap();
    assert_eq!(model.images.len(), 5);
    let a = &model.images[1];
    assert_eq!(a.name, "sub dir/a.png");
    assert_eq!(a.points2d.len(), 2);
    assert_eq!(a.points2d[0].xy, [10.5, 20.25]);
    assert_eq!(a.points2d[0].point3d_id, Some(7));
    assert_eq!(a.points2d[1].point3d_id, None);
    assert!(model.images[0].points2d.is_empty());
    assert_eq!(model.points[0].track.len(), 2);
    assert_eq!(model.points[0].rgb, [255, 128, 0]);

    let s = open(dir);
    // Sorted by name: b, c, d, e, "sub dir/a.png".
    let names: Vec<&str> = s.views.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(names, ["b.png", "c.png", "d.png", "e.png", "a.png"]);
    let b = &s.views[0];
    assert_eq!(
        b.camera,
        PinholeCamera::new(80.0, 81.0, 49.5, 24.5, 100, 50)
    );
    assert_eq!(b.world_to_camera[0], [1.0, 0.0, 0.0, 1.0]);
    assert_eq!(b.world_to_camera[2], [0.0, 0.0, 1.0, 3.0]);
    // qvec (0, 1, 0, 0): 180 degrees about x.
    let a = &s.views[4];
    assert_eq!(a.world_to_camera[1][1], -1.0);
    assert_eq!(a.world_to_camera[2][2], -1.0);
    assert_eq!(a.image_path, dir.join("images/sub dir/a.png"));
    // Distortion parameters per model.
    let d = |i: usize| s.distortion(i).map(|(_, d, _)| d);
    assert_eq!(d(0), None);
    assert_eq!(d(1), Some(RadTanDistortion::new(-0.1, 0.02, 0.0, 0.0)));
    assert_eq!(d(2), Some(RadTanDistortion::new(-0.1, 0.02, 0.001, -0.002)));
    assert_eq!(d(3), None);
    assert_eq!(d(4), Some(RadTanDistortion::new(0.01, 0.0, 0.0, 0.0)));
    let (src, _, _) = s.distortion(2).unwrap();
    assert_eq!((src.fx, src.fy, src.cx, src.cy), (50.0, 51.0, 32.0, 24.0));
    assert_eq!(s.points.as_ref().unwrap().xyz, vec![[1.5, -2.0, 3.0]]);
}

// ---------------------------------------------------------------------------
// Synthetic distorted images: undistortion and downscaling against analytic references

/// A smooth colour as a function of undistorted normalised coordinates.
fn pattern(x: f64, y: f64) -> [f64; 3] {
    [
        128.0 + 100.0 * (4.0 * x).sin() * (3.0 * y).cos(),
        128.0 + 90.0 * (2.5 * x + 1.5 * y).sin(),
        128.0 + 80.0 * (5.0 * y).sin(),
    ]
}

/// Writes a one-image COLMAP text scene whose image shows `pattern` through the given
/// distorted camera, at `w x h`.
fn synthetic_distorted_scene(
    dir: &Path,
    model_line: &str,
    camera: &PinholeCamera,
    dist: &RadTanDistortion,
) {
    let (w, h) = (camera.width, camera.height);
    let criteria = UndistortCriteria {
        max_iter: 100,
        epsilon: Some(1e-12),
    };
    let img = image::RgbImage::from_fn(w, h, |u, v| {
        let n = dist.undistort_pixel(camera, &Vector2::new(u as f64, v as f64), criteria);
        image::Rgb(pattern(n.x, n.y).map(|c| c.round().clamp(0.0, 255.0) as u8))
    });
    std::fs::create_dir_all(dir.join("images")).unwrap();
    img.save(dir.join("images/frame.png")).unwrap();
    let sparse = dir.join("sparse/0");
    std::fs::create_dir_all(&sparse).unwrap();
    std::fs::write(sparse.join("cameras.txt"), format!("1 {model_line}\n")).unwrap();
    std::fs::write(sparse.join("images.txt"), "1 1 0 0 0 0 0 0 1 frame.png\n\n").unwrap();
    std::fs::write(sparse.join("points3D.txt"), "").unwrap();
}

/// Largest difference between the delivered image and `pattern` evaluated through the
/// delivered pinhole intrinsics (away from a `margin`-pixel border).
fn worst_pattern_error(s: &Scene, margin: u32) -> f64 {
    let v = &s.views[0];
    let rgb = s.load_image(0).unwrap();
    assert_eq!(rgb.len(), (v.camera.width * v.camera.height * 3) as usize);
    let mut worst = 0.0f64;
    for y in margin..v.camera.height - margin {
        for x in margin..v.camera.width - margin {
            let want = pattern(
                (x as f64 - v.camera.cx) / v.camera.fx,
                (y as f64 - v.camera.cy) / v.camera.fy,
            );
            for c in 0..3 {
                let got = rgb[((y * v.camera.width + x) * 3) as usize + c] as f64;
                worst = worst.max((got - want[c]).abs());
            }
        }
    }
    worst
}

#[test]
fn undistortion_delivers_the_pinhole_image_of_its_intrinsics() {
    let cases = [
        (
            "OPENCV 240 180 220 216 121.3 88.7 -0.28 0.09 0.0012 -0.0021",
            PinholeCamera::new(220.0, 216.0, 121.3, 88.7, 240, 180),
            RadTanDistortion::new(-0.28, 0.09, 0.0012, -0.0021),
        ),
        (
            "SIMPLE_RADIAL 240 180 230 119.5 90.2 0.12",
            PinholeCamera::new(230.0, 230.0, 119.5, 90.2, 240, 180),
            RadTanDistortion::new(0.12, 0.0, 0.0, 0.0),
        ),
        (
            "RADIAL 240 180 230 119.5 90.2 -0.2 0.05",
            PinholeCamera::new(230.0, 230.0, 119.5, 90.2, 240, 180),
            RadTanDistortion::new(-0.2, 0.05, 0.0, 0.0),
        ),
    ];
    for (line, camera, dist) in cases {
        let tmp = tempfile::tempdir().unwrap();
        synthetic_distorted_scene(tmp.path(), line, &camera, &dist);
        let s = open(tmp.path());
        assert!(s.is_undistorted(0));
        let worst = worst_pattern_error(&s, 1);
        eprintln!("{line}: worst error {worst:.2}");
        assert!(worst <= 3.0, "{line}: worst error {worst}");
        // The same file as a posed image with the distorted camera: the same delivered
        // camera and pixels.
        let posed = PosedImage {
            image_path: tmp.path().join("images/frame.png"),
            camera: camera.with_distortion(Some(dist)),
            world_to_camera: s.views[0].world_to_camera,
        };
        let p = scene_from_images(tmp.path(), tmp.path(), &[posed], None, &opts()).unwrap();
        assert!(p.is_undistorted(0));
        assert_eq!(p.views[0].camera, s.views[0].camera, "{line}");
        assert_eq!(p.load_image(0).unwrap(), s.load_image(0).unwrap(), "{line}");

        // Downscale 2 (resized on load, then undistorted at the small size).
        let s2 = open_scene(
            tmp.path(),
            &SceneOptions {
                downscale: 2,
                ..opts()
            },
        )
        .unwrap();
        let v = &s2.views[0];
        assert_eq!((v.camera.width, v.camera.height), (120, 90));
        let (src, _, _) = s2.distortion(0).unwrap();
        assert_eq!(
            (src.fx, src.cx, src.cy),
            (camera.fx / 2.0, camera.cx / 2.0, camera.cy / 2.0)
        );
        let worst = worst_pattern_error(&s2, 1);
        eprintln!("{line} / 2: worst error {worst:.2}");
        assert!(worst <= 4.0, "{line} / 2: worst error {worst}");
    }
}

#[test]
fn downscale_uses_images_n_folder_and_real_sizes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::create_dir_all(dir.join("images")).unwrap();
    std::fs::create_dir_all(dir.join("images_3")).unwrap();
    image::RgbImage::from_pixel(101, 75, image::Rgb([10, 20, 30]))
        .save(dir.join("images/a.jpg"))
        .unwrap();
    // A pre-downscaled copy of a size that is not the rounded one (33 instead of 34).
    image::RgbImage::from_pixel(33, 25, image::Rgb([200, 100, 50]))
        .save(dir.join("images_3/a.jpg"))
        .unwrap();
    image::RgbImage::from_pixel(101, 75, image::Rgb([1, 2, 3]))
        .save(dir.join("images/b.png"))
        .unwrap();
    std::fs::write(
        dir.join("cameras.txt"),
        "1 PINHOLE 101 75 90 91 50.5 37.5\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("images.txt"),
        "1 1 0 0 0 0 0 0 1 a.jpg\n\n2 1 0 0 0 0 0 1 1 b.png\n\n",
    )
    .unwrap();
    let s = open_scene(
        dir,
        &SceneOptions {
            downscale: 3,
            ..opts()
        },
    )
    .unwrap();
    let (a, b) = (&s.views[0], &s.views[1]);
    assert_eq!(a.image_path, dir.join("images_3/a.jpg"));
    assert_eq!((a.camera.width, a.camera.height), (33, 25));
    assert_close(a.camera.fx, 90.0 * 33.0 / 101.0, 1e-12, "fx");
    assert_close(a.camera.fy, 91.0 * 25.0 / 75.0, 1e-12, "fy");
    assert_close(a.camera.cx, 50.5 * 33.0 / 101.0, 1e-12, "cx");
    let img = s.load_image(0).unwrap();
    assert_eq!(img.len(), 33 * 25 * 3);
    assert!(img.chunks(3).all(|p| (p[0] as i32 - 200).abs() <= 2));
    // b has no images_3 copy: resized on load to round(101/3) x round(75/3) = 34 x 25.
    assert_eq!(b.image_path, dir.join("images/b.png"));
    assert_eq!((b.camera.width, b.camera.height), (34, 25));
    assert_close(b.camera.fx, 90.0 * 34.0 / 101.0, 1e-12, "fx");
    assert_close(b.camera.cy, 37.5 * 25.0 / 75.0, 1e-12, "cy");
    let img = s.load_image(1).unwrap();
    assert_eq!(img.len(), 34 * 25 * 3);
    assert!(img.chunks(3).all(|p| p == [1, 2, 3]));
    // Full resolution ignores images_3.
    let s1 = open(dir);
    assert_eq!(s1.views[0].image_path, dir.join("images/a.jpg"));
    assert_eq!(
        (s1.views[0].camera.width, s1.views[0].camera.fx),
        (101, 90.0)
    );
}

// ---------------------------------------------------------------------------
// transforms.json (fox)

#[test]
fn fox_undistortion_is_sane_and_round_trips() {
    let fox = data("fox");
    assert_eq!(detect_scene(&fox), Some(SceneKind::Transforms));
    let mut s = open(&fox);
    assert_eq!(s.kind, SceneKind::Transforms);
    assert_eq!(s.views.len(), 67);
    // The data set lists 67 frames but ships 50 images.
    assert_eq!(s.missing_images().len(), 17);
    let err = s.load_image(s.missing_images()[0]).unwrap_err();
    assert!(
        matches!(err, IoError::Io { .. }) && err.to_string().contains("images/"),
        "{err}"
    );
    let removed = s.remove_missing_images();
    assert_eq!((removed.len(), s.views.len()), (17, 50));
    assert!(s.missing_images().is_empty());

    let v = &s.views[0];
    assert_eq!(v.name, "0001.jpg");
    assert_eq!((v.camera.width, v.camera.height), (1080, 1920));
    let (src, dist, target) = s.distortion(0).unwrap();
    assert_eq!(
        (src.fx, src.fy, src.cx, src.cy),
        (1375.52, 1374.49, 554.558, 965.268)
    );
    assert_eq!(
        dist,
        RadTanDistortion::new(0.0578421, -0.0805099, -0.000980296, 0.00015575)
    );
    assert_eq!(
        (v.camera.fx, v.camera.fy, v.camera.cx, v.camera.cy),
        (target.fx, target.fy, target.cx, target.cy)
    );
    // Mild distortion: the new camera stays close to the old one.
    assert!(
        (v.camera.fx / src.fx - 1.0).abs() < 0.05 && (v.camera.fy / src.fy - 1.0).abs() < 0.05,
        "{v:?}"
    );
    assert!(
        (v.camera.cx - src.cx).abs() < 30.0 && (v.camera.cy - src.cy).abs() < 30.0,
        "{v:?}"
    );
    // Every view shares the one camera.
    assert!(
        s.views
            .iter()
            .all(|w| (w.camera.fx, w.camera.cx, w.camera.width)
                == (v.camera.fx, v.camera.cx, v.camera.width))
    );

    // Delivered pixel -> normalised -> distorted source pixel -> undistort -> same pixel; and
    // alpha = 0 means every delivered pixel (corners included) comes from inside the source.
    let criteria = UndistortCriteria {
        max_iter: 50,
        epsilon: Some(1e-10),
    };
    for y in (0..1920).step_by(191).chain([1919]) {
        for x in (0..1080).step_by(107).chain([1079]) {
            let n = Vector2::new(
                (x as f64 - v.camera.cx) / v.camera.fx,
                (y as f64 - v.camera.cy) / v.camera.fy,
            );
            let d = dist.distort(&n);
            let su = src.fx * d.x + src.cx;
            let sv = src.fy * d.y + src.cy;
            assert!(
                (-1.0..=1080.0).contains(&su) && (-1.0..=1920.0).contains(&sv),
                "({x},{y}) samples outside the source: ({su},{sv})"
            );
            let back = dist.undistort_pixel(&src, &Vector2::new(su, sv), criteria);
            let (bu, bv) = (
                back.x * v.camera.fx + v.camera.cx,
                back.y * v.camera.fy + v.camera.cy,
            );
            assert!(
                (bu - x as f64).abs() < 1e-4 && (bv - y as f64).abs() < 1e-4,
                "({x},{y}) -> ({bu},{bv})"
            );
        }
    }

    // The delivered image samples the raw JPEG where the distortion model says.
    let rgb = s.load_image(0).unwrap();
    assert_eq!(rgb.len(), 1080 * 1920 * 3);
    let raw = image::open(&v.image_path).unwrap().into_rgb8();
    let mut worst = 0.0f64;
    for (x, y) in [
        (540u32, 960u32),
        (10, 10),
        (1000, 1800),
        (300, 1500),
        (777, 222),
    ] {
        let n = Vector2::new(
            (x as f64 - v.camera.cx) / v.camera.fx,
            (y as f64 - v.camera.cy) / v.camera.fy,
        );
        let d = dist.distort(&n);
        let (su, sv) = (src.fx * d.x + src.cx, src.fy * d.y + src.cy);
        let (x0, y0) = (su.floor() as u32, sv.floor() as u32);
        let (ax, ay) = (su - x0 as f64, sv - y0 as f64);
        for c in 0..3 {
            let p = |xx: u32, yy: u32| raw.get_pixel(xx.min(1079), yy.min(1919))[c] as f64;
            let want = (p(x0, y0) * (1.0 - ax) + p(x0 + 1, y0) * ax) * (1.0 - ay)
                + (p(x0, y0 + 1) * (1.0 - ax) + p(x0 + 1, y0 + 1) * ax) * ay;
            let got = rgb[((y * 1080 + x) * 3) as usize + c] as f64;
            worst = worst.max((got - want).abs());
        }
    }
    assert!(worst <= 1.5, "worst {worst}");
}

// ---------------------------------------------------------------------------
// Writers

fn assert_views_equal(a: &[SceneView], b: &[SceneView], check_paths: bool, tol: f64) {
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(b) {
        assert_eq!(x.name, y.name);
        if check_paths {
            assert_eq!(x.image_path, y.image_path);
        }
        assert_eq!(x.camera, y.camera, "{}", x.name);
        for r in 0..4 {
            for c in 0..4 {
                assert_close(
                    x.world_to_camera[r][c],
                    y.world_to_camera[r][c],
                    tol,
                    &x.name,
                );
            }
        }
    }
}

#[test]
fn write_transforms_json_round_trips() {
    let dense = open(&statuette_dense());
    let tmp = tempfile::tempdir().unwrap();
    let json = tmp.path().join("transforms.json");
    let ply = tmp.path().join("points.ply");
    write_points_ply(&ply, dense.points.as_ref().unwrap()).unwrap();
    write_transforms_json(&json, &dense.views, Some(&ply)).unwrap();
    let back = open(tmp.path());
    assert_eq!(back.kind, SceneKind::Transforms);
    assert_views_equal(&back.views, &dense.views, true, 1e-12);
    assert_eq!(back.points, dense.points);
    assert_eq!(
        read_points_ply(&ply).unwrap(),
        *dense.points.as_ref().unwrap()
    );
    // Images inside the json's folder are written relative to it.
    let views: Vec<SceneView> = dense
        .views
        .iter()
        .take(3)
        .map(|v| {
            let p = tmp.path().join("images").join(&v.name);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::copy(&v.image_path, &p).unwrap();
            SceneView {
                image_path: p,
                ..v.clone()
            }
        })
        .collect();
    write_transforms_json(&json, &views, None).unwrap();
    let text = std::fs::read_to_string(&json).unwrap();
    assert!(text.contains("\"images/DSC_5283.jpg\""), "{text}");
    let back = open(&json);
    assert_views_equal(&back.views, &views, true, 1e-12);
    assert!(back.points.is_none());
    assert_eq!(back.load_image(1).unwrap(), dense.load_image(1).unwrap());
    // Undistorted views with non-round intrinsics (fox) survive too.
    let fox = open(&data("fox"));
    write_transforms_json(&json, &fox.views, None).unwrap();
    assert_views_equal(&open(&json).views, &fox.views, true, 1e-12);
}

#[test]
fn write_colmap_text_round_trips() {
    let dense = open(&statuette_dense());
    let tmp = tempfile::tempdir().unwrap();
    let sparse = tmp.path().join("sparse/0");
    write_colmap_text(&sparse, &dense.views, dense.points.as_ref()).unwrap();
    assert_eq!(detect_scene(tmp.path()), Some(SceneKind::Colmap));
    let back = open(tmp.path());
    assert_views_equal(&back.views, &dense.views, false, 1e-12);
    assert_eq!(
        back.views[0].image_path,
        tmp.path().join("images/DSC_5283.jpg")
    );
    assert_eq!(back.points, dense.points);
    // Shared intrinsics become one camera each set; views keep their own.
    let model = colmap::read_model(&sparse).unwrap();
    assert_eq!(model.images.len(), 23);
    assert!(model.cameras.iter().all(|c| c.model == "PINHOLE"));
    // Views from a json scene with arbitrary rotations (lego) survive the quaternion trip.
    let lego = open(&data("lego"));
    write_colmap_text(&sparse, &lego.views, None).unwrap();
    let back = open(tmp.path());
    let mut sorted = lego.views.clone();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    assert_views_equal(&back.views, &sorted, false, 1e-12);
    assert!(back.points.is_none());
}

#[test]
fn writers_reject_invalid_views() {
    let tmp = tempfile::tempdir().unwrap();
    let mut v = open(&statuette_dense()).views[0].clone();
    v.world_to_camera[0][0] = f64::NAN;
    let json = tmp.path().join("t.json");
    let err = write_transforms_json(&json, &[v.clone()], None).unwrap_err();
    assert!(
        err.to_string().contains("t.json") && err.to_string().contains("DSC_5283"),
        "{err}"
    );
    assert!(!json.exists());
    let err = write_colmap_text(tmp.path(), &[v.clone()], None).unwrap_err();
    assert!(err.to_string().contains("not finite"), "{err}");
    v.world_to_camera[0][0] = 2.0;
    assert!(write_colmap_text(tmp.path(), &[v.clone()], None).is_err());
    v = open(&statuette_dense()).views[0].clone();
    v.camera.width = 0;
    assert!(write_transforms_json(&json, &[v], None).is_err());
    // A distorted camera is not written as an undistorted one.
    v = open(&statuette_dense()).views[0].clone();
    v.camera = v
        .camera
        .with_distortion(Some(RadTanDistortion::new(0.1, 0.0, 0.0, 0.0)));
    for err in [
        write_transforms_json(&json, &[v.clone()], None).unwrap_err(),
        write_colmap_text(tmp.path(), &[v], None).unwrap_err(),
    ] {
        assert!(err.to_string().contains("lens distortion"), "{err}");
    }
    let bad = ScenePoints {
        xyz: vec![[0.0; 3]],
        rgb: vec![],
    };
    assert!(write_points_ply(&tmp.path().join("p.ply"), &bad).is_err());
}

// ---------------------------------------------------------------------------
// Image cache

#[test]
fn image_cache_keeps_first_images_within_budget() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<ImageCache>();
    assert_send_sync::<Scene>();
    let s = Arc::new(
        open_scene(
            &data("lego"),
            &SceneOptions {
                downscale: 4,
                ..opts()
            },
        )
        .unwrap(),
    );
    // RGB and the alpha channel: 4 bytes per pixel.
    let one = 200 * 200 * 4;
    let cache = ImageCache::new(s.clone(), 2 * one + 10);
    cache.preload(&[3, 5, 7, 9]).unwrap();
    assert!(cache.is_cached(3) && cache.is_cached(5));
    assert!(!cache.is_cached(7) && !cache.is_cached(9));
    assert_eq!(cache.cached_bytes(), 2 * one);
    let a = cache.get(3).unwrap();
    assert!(Arc::ptr_eq(&a, &cache.get(3).unwrap()));
    assert_eq!(a.rgb, s.load_image(3).unwrap());
    assert_eq!(*a, s.load_view(3).unwrap());
    assert!(a.alpha.is_some() && a.mask.is_none());
    // Over budget: decoded on demand, not kept.
    let b = cache.get(7).unwrap();
    assert_eq!(b.rgb, s.load_image(7).unwrap());
    assert!(!cache.is_cached(7));
    assert!(cache.get(100).is_err());
    assert!(cache.preload(&[100]).is_err());

    // Concurrent gets from several threads.
    let cache = Arc::new(ImageCache::new(s.clone(), u64::MAX));
    std::thread::scope(|sc| {
        for t in 0..3 {
            let cache = cache.clone();
            sc.spawn(move || {
                for i in [0, 1, 2, t + 3] {
                    assert_eq!(cache.get(i).unwrap().rgb.len(), 200 * 200 * 3);
                }
            });
        }
    });
    assert_eq!(cache.cached_bytes(), 6 * one);
    // Without alpha: 3 bytes per pixel.
    let cache = ImageCache::new(s.clone(), u64::MAX).keep_alpha(false);
    cache.preload(&[0, 1]).unwrap();
    assert_eq!(cache.cached_bytes(), 2 * 200 * 200 * 3);
    assert!(cache.get(0).unwrap().alpha.is_none());

    // Decoding errors surface from preload.
    let missing = Arc::new(open(&data("statuette/sparse/0")));
    let cache = ImageCache::new(missing, u64::MAX);
    let err = cache.preload(&[0, 1]).unwrap_err();
    assert!(err.to_string().contains("DSC_528"), "{err}");
}

// ---------------------------------------------------------------------------
// Malformed input

/// Runs `f` and fails the test if it panics; returns its result.
fn no_panic<T>(what: &str, f: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(_) => panic!("panicked on {what}"),
    }
}

fn expect_err(path: &Path, opts: &SceneOptions, needle: &str, file: &str) {
    let err = match no_panic(needle, || open_scene(path, opts)) {
        Ok(_) => panic!(
            "{} opened, expected an error containing '{needle}'",
            path.display()
        ),
        Err(e) => e.to_string(),
    };
    assert!(err.contains(needle), "'{err}' should contain '{needle}'");
    assert!(err.contains(file), "'{err}' should name '{file}'");
}

#[test]
fn colmap_binary_fuzzing_never_panics() {
    let src = statuette_dense().join("sparse");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("sparse/0");
    std::fs::create_dir_all(&dir).unwrap();
    let files = ["cameras.bin", "images.bin", "points3D.bin"];
    let originals: Vec<Vec<u8>> = files
        .iter()
        .map(|f| std::fs::read(src.join(f)).unwrap())
        .collect();
    let mut rng = StdRng::seed_from_u64(0x5eed_c01a);
    let mut errors = 0;
    for round in 0..240 {
        let which = round % 3;
        for (f, bytes) in files.iter().zip(&originals) {
            std::fs::write(dir.join(f), bytes).unwrap();
        }
        let mut b = originals[which].clone();
        let len = b.len();
        match rng.random_range(0..4) {
            0 => b.truncate(rng.random_range(0..len)),
            1 => {
                // Flip bytes near the start (counts, ids, model ids).
                for _ in 0..rng.random_range(1..4) {
                    let i = rng.random_range(0..len.min(96));
                    b[i] = rng.random();
                }
            }
            2 => {
                for _ in 0..rng.random_range(1..16) {
                    let i = rng.random_range(0..len);
                    b[i] ^= 1 << rng.random_range(0..8);
                }
            }
            _ => {
                // Huge count or length field somewhere.
                let at = rng.random_range(0..len - 8);
                b[at..at + 8].copy_from_slice(&u64::MAX.to_le_bytes()[..8]);
            }
        }
        std::fs::write(dir.join(files[which]), &b).unwrap();
        let result = no_panic(&format!("round {round} ({})", files[which]), || {
            open_scene(tmp.path(), &opts())
        });
        if let Err(e) = result {
            errors += 1;
            let msg = e.to_string();
            assert!(
                files.iter().any(|f| msg.contains(f)) || msg.contains("images/"),
                "round {round}: error does not name a file: {msg}"
            );
        }
    }
    assert!(errors > 60, "only {errors} of 240 mutations were rejected");

    // Every truncation of cameras.bin is an error naming it.
    for cut in (0..originals[0].len()).step_by(7) {
        std::fs::write(dir.join("cameras.bin"), &originals[0][..cut]).unwrap();
        expect_err(tmp.path(), &opts(), "", "cameras.bin");
    }
}

#[test]
fn json_fuzzing_never_panics() {
    let tmp = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(0x0001_504e);
    for (src, name) in [
        (data("fox/transforms.json"), "transforms.json"),
        (data("lego/transforms_train.json"), "transforms_train.json"),
    ] {
        let original = std::fs::read(&src).unwrap();
        // Images are not next to the copy: lego needs their headers (w/h), fox does not.
        let json = tmp.path().join(name);
        for round in 0..80 {
            let mut b = original.clone();
            let len = b.len();
            match rng.random_range(0..3) {
                0 => b.truncate(rng.random_range(0..len)),
                1 => {
                    for _ in 0..rng.random_range(1..6) {
                        let i = rng.random_range(0..len);
                        let alphabet = b"0123456789-.eE,[]{}\":nN ";
                        b[i] = alphabet[rng.random_range(0..alphabet.len())];
                    }
                }
                _ => {
                    let i = rng.random_range(0..len);
                    b[i] = rng.random();
                }
            }
            std::fs::write(&json, &b).unwrap();
            let result = no_panic(&format!("{name} round {round}"), || {
                open_scene(&json, &opts())
            });
            if let Err(e) = result {
                let msg = e.to_string();
                assert!(
                    msg.contains(name) || msg.contains(".png") || msg.contains(".jpg"),
                    "{msg}"
                );
            }
        }
    }
}

#[test]
fn colmap_specific_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let bin = std::fs::read(statuette_dense().join("sparse/cameras.bin")).unwrap();
    std::fs::write(dir.join("images.txt"), "1 1 0 0 0 0 0 0 1 a.png\n\n").unwrap();

    // Unknown model id in a binary file.
    let mut b = bin.clone();
    b[12..16].copy_from_slice(&99i32.to_le_bytes());
    std::fs::write(dir.join("cameras.bin"), &b).unwrap();
    expect_err(dir, &opts(), "unknown camera model id 99", "cameras.bin");
    std::fs::remove_file(dir.join("cameras.bin")).unwrap();

    let cases: [(&str, &str); 8] = [
        (
            "1 OPENCV_FISHEYE 64 48 50 50 32 24 0.1 0 0 0\n",
            "OPENCV_FISHEYE",
        ),
        ("1 FOV 64 48 50 50 32 24 0.1\n", "FOV camera model"),
        ("1 WEIRD 64 48 50\n", "unknown camera model 'WEIRD'"),
        (
            "1 PINHOLE 64 48 50 50 32\n",
            "has 4 parameters but the line has 3",
        ),
        (
            "1 PINHOLE 64 48 50 abc 32 24\n",
            "'abc' is not a valid number",
        ),
        ("1 PINHOLE 64 48 50 nan 32 24\n", "not finite"),
        ("1 PINHOLE 0 48 50 50 32 24\n", "empty image size"),
        (
            "1 PINHOLE 64 48 -50 50 32 24\n",
            "non-positive focal length",
        ),
    ];
    for (cameras, needle) in cases {
        std::fs::write(dir.join("cameras.txt"), cameras).unwrap();
        expect_err(dir, &opts(), needle, "cameras.txt");
    }
    let err = open_scene(dir, &opts()).unwrap_err();
    assert!(matches!(err, IoError::Malformed { .. }));
    std::fs::write(
        dir.join("cameras.txt"),
        "1 OPENCV_FISHEYE 64 48 50 50 32 24 0.1 0 0 0\n",
    )
    .unwrap();
    assert!(matches!(
        open_scene(dir, &opts()).unwrap_err(),
        IoError::Unsupported { .. }
    ));

    std::fs::write(dir.join("cameras.txt"), "1 PINHOLE 64 48 50 50 32 24\n").unwrap();
    let image_cases = [
        ("1 1 0 0 0 0 0 0 2 a.png\n\n", "refers to camera 2"),
        ("1 0 0 0 0 0 0 0 1 a.png\n\n", "invalid pose"),
        ("1 1 0 0 0 0 0 0 1\n\n", "expected IMAGE_ID"),
        ("1 1 0 0 0 0 0 0 1 a.png\n1 2\n", "X Y POINT3D_ID triples"),
        (
            "1 1 0 0 0 0 0 0 1 a.png\n\n2 1 0 0 0 0 0 0 1 a.png\n\n",
            "more than once",
        ),
        ("", "no views"),
    ];
    for (images, needle) in image_cases {
        std::fs::write(dir.join("images.txt"), images).unwrap();
        expect_err(dir, &opts(), needle, "images.txt");
    }
    std::fs::write(dir.join("images.txt"), "1 1 0 0 0 0 0 0 1 a.png\n\n").unwrap();
    std::fs::write(dir.join("points3D.txt"), "1 0 0 0 300 0 0 0\n").unwrap();
    expect_err(dir, &opts(), "colour", "points3D.txt");
    std::fs::write(dir.join("points3D.txt"), "1 0 0 0 3 0 0 0 5\n").unwrap();
    expect_err(dir, &opts(), "pairs", "points3D.txt");
    std::fs::remove_file(dir.join("points3D.txt")).unwrap();

    // Image problems are reported when loading, naming the image.
    let s = open(dir);
    assert!(s.points.is_none());
    let err = s.load_image(0).unwrap_err();
    assert!(err.to_string().contains("a.png"), "{err}");
    std::fs::create_dir_all(dir.join("images")).unwrap();
    std::fs::write(dir.join("images/a.png"), b"not an image at all").unwrap();
    let err = s.load_image(0).unwrap_err();
    assert!(
        matches!(err, IoError::Malformed { .. }) && err.to_string().contains("a.png"),
        "{err}"
    );
    image::RgbImage::new(10, 10)
        .save(dir.join("images/a.png"))
        .unwrap();
    let err = s.load_image(0).unwrap_err().to_string();
    assert!(
        err.contains("a.png") && err.contains("10x10") && err.contains("64x48"),
        "{err}"
    );
    let err = s.load_image(5).unwrap_err().to_string();
    assert!(err.contains("out of range"), "{err}");

    // Options and detection.
    expect_err(
        dir,
        &SceneOptions {
            downscale: 0,
            ..opts()
        },
        "downscale",
        "",
    );
    let empty = tempfile::tempdir().unwrap();
    expect_err(empty.path(), &opts(), "not a training scene", "");
    expect_err(&empty.path().join("nope"), &opts(), "", "nope");
    expect_err(
        empty.path(),
        &SceneOptions {
            kind: Some(SceneKind::Colmap),
            ..opts()
        },
        "no COLMAP model",
        "",
    );
}

#[test]
fn transforms_json_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let json = dir.join("transforms.json");
    let frame =
        r#"{"file_path": "a.png", "transform_matrix": [[1,0,0,0],[0,1,0,0],[0,0,1,0],[0,0,0,1]]}"#;
    let good = format!(r#"{{"fl_x": 100, "w": 64, "h": 48, "frames": [{frame}]}}"#);
    std::fs::write(&json, &good).unwrap();
    let s = open(dir);
    assert_eq!(
        (
            s.views[0].camera.fy,
            s.views[0].camera.cx,
            s.views[0].camera.cy
        ),
        (100.0, 32.0, 24.0)
    );
    // OpenGL identity c2w -> OpenCV w2c flips y and z.
    assert_eq!(s.views[0].world_to_camera[1][1], -1.0);
    assert_eq!(s.views[0].world_to_camera[2][2], -1.0);

    let m = |rows: &str| {
        format!(
            r#"{{"fl_x": 100, "w": 64, "h": 48, "frames": [{{"file_path": "a.png", "transform_matrix": {rows}}}]}}"#
        )
    };
    let cases: Vec<(String, &str)> = vec![
        ("{".into(), "invalid JSON"),
        ("[1, 2]".into(), "must be an object"),
        (r#"{"fl_x": 1}"#.into(), "no 'frames'"),
        (r#"{"fl_x": 1, "frames": []}"#.into(), "empty"),
        (r#"{"fl_x": 1, "frames": 3}"#.into(), "must be a list"),
        (
            good.replace("\"fl_x\": 100", "\"fl_x\": NaN"),
            "invalid JSON",
        ),
        (good.replace("\"fl_x\": 100", "\"fl_x\": -100"), "positive"),
        (good.replace("\"fl_x\": 100", "\"fl_x\": \"big\""), "'fl_x'"),
        (
            good.replace("\"fl_x\": 100", "\"camera_angle_x\": 4"),
            "between 0 and pi",
        ),
        (good.replace("\"fl_x\": 100, ", ""), "no focal length"),
        (
            good.replace("\"w\": 64", "\"w\": 0"),
            "positive whole number",
        ),
        (
            good.replace("\"w\": 64", "\"w\": 6.5"),
            "positive whole number",
        ),
        (
            good.replace("\"file_path\": \"a.png\", ", ""),
            "no 'file_path'",
        ),
        (good.replace("\"a.png\"", "7"), "'file_path' must be"),
        (m("[[1,0,0,0],[0,1,0,0]]"), "3 or 4 rows"),
        (
            m("[[1,0,0],[0,1,0,0],[0,0,1,0]]"),
            "row 0 must be 4 numbers",
        ),
        (m("[[1,0,0,0],[0,1,0,0],[0,0,1,0],[0,0,1,1]]"), "last row"),
        (
            m("[[2,0,0,0],[0,1,0,0],[0,0,1,0]]"),
            "not a rigid transform",
        ),
        (m("[[-1,0,0,0],[0,1,0,0],[0,0,1,0]]"), "reflection"),
        (
            m("[[1,0,0,0],[0,1,0,null],[0,0,1,0]]"),
            "non-finite or non-numeric",
        ),
        (m("[[1,0,0,0],[0,1,0,1e999],[0,0,1,0]]"), "invalid JSON"),
        (
            good.replace(
                "\"fl_x\": 100",
                "\"fl_x\": 100, \"camera_model\": \"OPENCV_FISHEYE\"",
            ),
            "OPENCV_FISHEYE",
        ),
        (
            good.replace("\"fl_x\": 100", "\"fl_x\": 100, \"k4\": 0.1"),
            "k4",
        ),
        (
            good.replace("\"fl_x\": 100", "\"fl_x\": 100, \"is_fisheye\": true"),
            "fisheye",
        ),
        (
            good.replace("\"w\": 64, \"h\": 48, ", ""),
            "cannot be read from the image",
        ),
    ];
    for (text, needle) in &cases {
        std::fs::write(&json, text).unwrap();
        expect_err(dir, &opts(), needle, "transforms.json");
    }
    // A missing point file is reported naming it.
    std::fs::write(
        &json,
        good.replace(
            "\"fl_x\": 100",
            "\"fl_x\": 100, \"ply_file_path\": \"nope.ply\"",
        ),
    )
    .unwrap();
    expect_err(dir, &opts(), "", "nope.ply");
    // NeRF-synthetic without images: the size is needed, the error names the image.
    let ns = dir.join("transforms_train.json");
    std::fs::write(&ns, r#"{"camera_angle_x": 0.7, "frames": [{"file_path": "./train/r_0", "transform_matrix": [[1,0,0,0],[0,1,0,0],[0,0,1,0],[0,0,0,1]]}]}"#).unwrap();
    expect_err(dir, &opts(), "r_0.png", "transforms_train.json");
    // Truncated and corrupt point files.
    let ply = dir.join("p.ply");
    write_points_ply(
        &ply,
        &ScenePoints {
            xyz: vec![[1.0, 2.0, 3.0]; 10],
            rgb: vec![[1, 2, 3]; 10],
        },
    )
    .unwrap();
    let bytes = std::fs::read(&ply).unwrap();
    std::fs::write(&ply, &bytes[..bytes.len() - 5]).unwrap();
    std::fs::write(
        &json,
        good.replace(
            "\"fl_x\": 100",
            "\"fl_x\": 100, \"ply_file_path\": \"p.ply\"",
        ),
    )
    .unwrap();
    expect_err(&json, &opts(), "vertex", "p.ply");
    std::fs::write(
        &ply,
        b"ply\nformat ascii 1.0\nelement vertex 1\nproperty float x\nend_header\n1\n",
    )
    .unwrap();
    expect_err(&json, &opts(), "'y'", "p.ply");
}

#[test]
fn transforms_paths_extensions_and_per_frame_intrinsics() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::create_dir_all(dir.join("imgs")).unwrap();
    std::fs::create_dir_all(dir.join("imgs_2")).unwrap();
    image::RgbaImage::from_pixel(20, 10, image::Rgba([255, 0, 0, 0]))
        .save(dir.join("imgs/a.png"))
        .unwrap();
    image::RgbImage::from_pixel(20, 10, image::Rgb([0, 255, 0]))
        .save(dir.join("imgs/b.jpg"))
        .unwrap();
    image::RgbImage::from_pixel(10, 5, image::Rgb([0, 0, 255]))
        .save(dir.join("imgs_2/b.jpg"))
        .unwrap();
    let id = "[[1,0,0,0],[0,1,0,0],[0,0,1,0]]";
    std::fs::write(
        dir.join("transforms.json"),
        format!(
            r#"{{"camera_angle_x": 1.0, "frames": [
                {{"file_path": "./imgs/a", "transform_matrix": {id}}},
                {{"file_path": "imgs\\b.jpg", "fl_x": 30, "fl_y": 31, "cx": 9.5, "cy": 4.5, "w": 20, "h": 10, "transform_matrix": {id}}}
            ]}}"#
        ),
    )
    .unwrap();
    let s = open_scene(
        dir,
        &SceneOptions {
            background: [0.0, 0.0, 1.0],
            ..opts()
        },
    )
    .unwrap();
    assert_eq!(s.views[0].image_path, dir.join("imgs/a.png"));
    assert_eq!(s.views[0].name, "a.png");
    assert_eq!(
        (s.views[0].camera.width, s.views[0].camera.height),
        (20, 10)
    );
    assert_close(
        s.views[0].camera.fx,
        10.0 / (0.5f64).tan(),
        1e-12,
        "fx from camera_angle_x",
    );
    assert_eq!(s.views[0].camera.fy, s.views[0].camera.fx);
    assert_eq!(s.views[1].image_path, dir.join("imgs/b.jpg"));
    assert_eq!(
        (
            s.views[1].camera.fx,
            s.views[1].camera.fy,
            s.views[1].camera.cx,
            s.views[1].camera.cy
        ),
        (30.0, 31.0, 9.5, 4.5)
    );
    // Transparent red over a blue background.
    assert_eq!(&s.load_image(0).unwrap()[..3], &[0, 0, 255]);
    // Downscale 2: b comes from imgs_2/, a is resized.
    let s2 = open_scene(
        dir,
        &SceneOptions {
            downscale: 2,
            ..opts()
        },
    )
    .unwrap();
    assert_eq!(s2.views[1].image_path, dir.join("imgs_2/b.jpg"));
    assert_eq!((s2.views[1].camera.fx, s2.views[1].camera.cx), (15.0, 4.75));
    assert_eq!(s2.views[0].image_path, dir.join("imgs/a.png"));
    assert_eq!(
        (s2.views[0].camera.width, s2.views[0].camera.height),
        (10, 5)
    );
    let b = s2.load_image(1).unwrap();
    assert!(b.chunks(3).all(|p| p[2] > 200 && p[1] < 50));
    // Same file names in different folders: names fall back to relative paths.
    std::fs::create_dir_all(dir.join("other")).unwrap();
    std::fs::copy(dir.join("imgs/a.png"), dir.join("other/a.png")).unwrap();
    std::fs::write(
        dir.join("dup.json"),
        format!(
            r#"{{"fl_x": 10, "w": 20, "h": 10, "frames": [
                {{"file_path": "imgs/a.png", "transform_matrix": {id}}},
                {{"file_path": "other/a.png", "transform_matrix": {id}}}]}}"#
        ),
    )
    .unwrap();
    let s = open(&dir.join("dup.json"));
    assert_eq!(s.views[0].name, "imgs/a.png");
    assert_eq!(s.views[1].name, "other/a.png");
}

#[test]
fn scene_kind_parsing() {
    assert_eq!("colmap".parse::<SceneKind>().unwrap(), SceneKind::Colmap);
    assert_eq!(
        "nerf_synthetic".parse::<SceneKind>().unwrap(),
        SceneKind::NerfSynthetic
    );
    assert_eq!(
        "nerfstudio".parse::<SceneKind>().unwrap(),
        SceneKind::Transforms
    );
    assert!("x".parse::<SceneKind>().is_err());
    assert_eq!(
        SceneOptions::default(),
        SceneOptions {
            downscale: 1,
            background: [1.0; 3],
            kind: None
        }
    );
    let _ = scene::colmap::SUPPORTED_MODELS;
}

/// Copies `src` (a scene folder) into a temporary folder, keeping everything but replacing the
/// image `image` (a path relative to the scene) with its first `keep` bytes.
fn scene_with_truncated_image(src: &Path, image: &str, keep: usize) -> tempfile::TempDir {
    fn copy(src: &Path, dst: &Path) {
        std::fs::create_dir_all(dst).unwrap();
        for e in std::fs::read_dir(src).unwrap() {
            let e = e.unwrap();
            let to = dst.join(e.file_name());
            if e.file_type().unwrap().is_dir() {
                copy(&e.path(), &to);
            } else {
                std::fs::copy(e.path(), &to).unwrap();
            }
        }
    }
    let tmp = tempfile::tempdir().unwrap();
    copy(src, tmp.path());
    let bytes = std::fs::read(src.join(image)).unwrap();
    std::fs::write(tmp.path().join(image), &bytes[..keep]).unwrap();
    tmp
}

/// A truncated JPEG (COLMAP scene) or PNG (transforms.json scene) is an error naming the file
/// when the view is loaded, not a mostly blank picture; the other views still load.
#[test]
fn truncated_images_are_errors_naming_the_file() {
    for (src, image, keep) in [
        (statuette_dense(), "images/DSC_5283.jpg", 1000),
        (statuette_dense(), "images/DSC_5283.jpg", 40_000),
        (data("lego"), "train/r_0.png", 5000),
    ] {
        let tmp = scene_with_truncated_image(&src, image, keep);
        let s = open(tmp.path());
        let name = Path::new(image).file_name().unwrap().to_str().unwrap();
        let k = s
            .views
            .iter()
            .position(|v| v.image_path.ends_with(image))
            .unwrap_or_else(|| panic!("no view of {image}"));
        let e = s.load_image(k).unwrap_err().to_string();
        assert!(e.contains(name), "{image}: {e}");
        let other = (k + 1) % s.views.len();
        assert!(
            s.load_image(other).is_ok(),
            "{image}: the other views must still load"
        );
    }
}

/// A COLMAP project whose `sparse/0` has no images beside it but whose `dense/0` (COLMAP's
/// undistorted output) has both: the project folder opens the dense model, whose images load.
#[test]
fn colmap_project_without_images_opens_its_undistorted_dense_model() {
    let s = open(&data("statuette"));
    assert_eq!(s.views.len(), 23);
    assert_eq!(
        s.views[0].image_path,
        statuette_dense().join("images/DSC_5283.jpg")
    );
    assert!(!s.is_undistorted(0), "the dense model is already pinhole");
    let dense = open(&statuette_dense());
    assert_views_equal(&s.views, &dense.views, true, 0.0);
    assert!(s.load_image(0).is_ok());
}
