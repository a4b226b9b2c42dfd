//! Data set loaders: the real 7-Scenes redkitchen sequence, synthetic TUM / EuRoC / ETH3D /
//! image-folder trees, and malformed input (errors must name the file; nothing may panic).

use std::fs;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use image::{GrayImage, ImageBuffer, Luma, Rgb, RgbImage};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rust3r_geometry::PinholeCamera;
use rust3r_io::IoError;
use rust3r_io::datasets::{
    self, Dataset, DatasetKind, EurocDataset, OpenOptions, Pose, detect, natural_cmp, open,
    open_with, tum_intrinsics,
};
use rust3r_testdata::data;

fn write(path: &Path, text: &str) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, text).unwrap();
}

/// A 4x3 RGB PNG whose red channel is `tag` everywhere.
fn write_rgb(path: &Path, tag: u8) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    RgbImage::from_pixel(4, 3, Rgb([tag, 10, 20]))
        .save(path)
        .unwrap();
}

/// A 4x3 16-bit depth PNG: pixel (0,0) is 0 (invalid), every other pixel is `value`.
fn write_depth(path: &Path, value: u16) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    let mut img: ImageBuffer<Luma<u16>, Vec<u16>> = ImageBuffer::from_pixel(4, 3, Luma([value]));
    img.put_pixel(0, 0, Luma([0]));
    img.save(path).unwrap();
}

fn err_text(r: Result<impl std::fmt::Debug, IoError>) -> String {
    match r {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(e) => e.to_string(),
    }
}

fn open_err(path: &Path, kind: Option<DatasetKind>) -> String {
    match open(path, kind, 1) {
        Ok(_) => panic!("expected {} to fail", path.display()),
        Err(e) => e.to_string(),
    }
}

fn assert_pose_close(a: &Pose, b: &Pose, tol: f64) {
    for r in 0..4 {
        for c in 0..4 {
            assert!(
                (a[r][c] - b[r][c]).abs() < tol,
                "pose mismatch at [{r}][{c}]: {a:?} vs {b:?}"
            );
        }
    }
}

fn assert_rotation(p: &Pose, tol: f64) {
    for i in 0..3 {
        for j in 0..3 {
            let dot: f64 = (0..3).map(|k| p[k][i] * p[k][j]).sum();
            let expect = if i == j { 1.0 } else { 0.0 };
            assert!((dot - expect).abs() < tol, "R^T R [{i}][{j}] = {dot}");
        }
    }
    let det = p[0][0] * (p[1][1] * p[2][2] - p[1][2] * p[2][1])
        - p[0][1] * (p[1][0] * p[2][2] - p[1][2] * p[2][0])
        + p[0][2] * (p[1][0] * p[2][1] - p[1][1] * p[2][0]);
    assert!((det - 1.0).abs() < tol, "det = {det}");
    assert_eq!(p[3], [0.0, 0.0, 0.0, 1.0]);
}

// ---------------------------------------------------------------------------
// Real data: 7-Scenes redkitchen seq-01, frames 0-499.

#[test]
fn redkitchen_real() {
    let dir = data("redkitchen");
    assert_eq!(detect(&dir).unwrap(), DatasetKind::SevenScenes);
    let ds = open(&dir, None, 1).unwrap();
    assert_eq!(ds.name(), "redkitchen");
    assert_eq!(ds.len(), 500);
    let k = ds.intrinsics().unwrap();
    assert_eq!(k, PinholeCamera::new(585.0, 585.0, 320.0, 240.0, 640, 480));
    assert_eq!(ds.depth_intrinsics().unwrap(), k);

    let f0 = ds.frame(0).unwrap();
    assert_eq!(f0.index, 0);
    assert_eq!(f0.timestamp, 0.0);
    assert_eq!(f0.rgb.dimensions(), (640, 480));
    assert!(f0.rgb_path.ends_with("frame-000000.color.jpg"));
    let depth = f0.depth.as_ref().unwrap();
    assert_eq!(depth.dimensions(), (640, 480));
    let valid: Vec<f32> = depth
        .pixels()
        .map(|p| p.0[0])
        .filter(|d| *d > 0.0)
        .collect();
    let fraction = valid.len() as f64 / (640.0 * 480.0);
    assert!(
        (0.5..=1.0).contains(&fraction),
        "valid depth fraction {fraction}"
    );
    assert!(
        valid.iter().all(|d| (0.2..10.0).contains(d)),
        "depth outside 0.2..10 m"
    );
    let mean = valid.iter().map(|d| *d as f64).sum::<f64>() / valid.len() as f64;
    assert!((0.5..5.0).contains(&mean), "mean depth {mean} m");

    // The first pose equals the file, number for number.
    let text = fs::read_to_string(dir.join("frame-000000.pose.txt")).unwrap();
    let numbers: Vec<f64> = text
        .split_whitespace()
        .map(|t| t.parse().unwrap())
        .collect();
    let mut expect = [[0.0; 4]; 4];
    for r in 0..4 {
        for c in 0..4 {
            expect[r][c] = numbers[r * 4 + c];
        }
    }
    assert_eq!(f0.gt_pose.unwrap(), expect);
    assert_eq!(expect[0][0], 0.9093129);

    // Whole trajectory: orthonormal rotations, smooth motion, timestamps frame/30. The stored
    // 7-Scenes rotations are orthonormal to about 1e-4 only (the files are used as they are).
    let gt = ds.ground_truth().unwrap();
    assert_eq!(gt.len(), 500);
    for (i, (t, p)) in gt.iter().enumerate() {
        assert!((t - i as f64 / 30.0).abs() < 1e-12);
        assert_rotation(p, 1e-3);
    }
    for w in gt.windows(2) {
        let d: f64 = (0..3)
            .map(|r| (w[1].1[r][3] - w[0].1[r][3]).powi(2))
            .sum::<f64>()
            .sqrt();
        assert!(d < 0.1, "camera jumped {d} m between consecutive frames");
    }

    // Last frame, and a strided view.
    let last = ds.frame(499).unwrap();
    assert!(last.rgb_path.ends_with("frame-000499.color.jpg"));
    assert_pose_close(&last.gt_pose.unwrap(), &gt[499].1, 0.0 + 1e-15);
    let strided = open(&dir, Some(DatasetKind::SevenScenes), 10).unwrap();
    assert_eq!(strided.len(), 50);
    let f = strided.frame(1).unwrap();
    assert_eq!(f.index, 1);
    assert!((f.timestamp - 10.0 / 30.0).abs() < 1e-12);
    assert!(f.rgb_path.ends_with("frame-000010.color.jpg"));
    assert_eq!(strided.ground_truth().unwrap().len(), 500);
    assert!(strided.frame(50).is_err());
}

/// Normalised correlation of the gradient magnitudes of two images (grey levels, 3x3 central
/// differences), over pixels where `mask` is set.
fn gradient_agreement(a: &[f64], b: &[f64], mask: &[bool], w: usize, h: usize) -> f64 {
    let grad = |img: &[f64], x: usize, y: usize| {
        let gx = img[y * w + x + 1] - img[y * w + x - 1];
        let gy = img[(y + 1) * w + x] - img[(y - 1) * w + x];
        (gx * gx + gy * gy).sqrt()
    };
    let (mut ab, mut aa, mut bb) = (0.0, 0.0, 0.0);
    for y in 1..h - 1 {
        for x in 1..w - 1 {
            if mask[y * w + x] {
                let (ga, gb) = (grad(a, x, y), grad(b, x, y));
                ab += ga * gb;
                aa += ga * ga;
                bb += gb * gb;
            }
        }
    }
    ab / (aa * bb).sqrt()
}

/// 7-Scenes colour is resampled into the depth camera: on frames held out of the fit of the
/// colour camera (300-499), colour edges line up with depth edges better than in the file.
#[test]
fn redkitchen_colour_is_registered_to_depth() {
    let dir = data("redkitchen");
    let ds = open(&dir, None, 1).unwrap();
    assert!(ds.colour_resampled());
    let (mut registered, mut raw) = (0.0, 0.0);
    for i in [320, 380, 440, 490] {
        let f = ds.frame(i).unwrap();
        let file = image::open(&f.rgb_path).unwrap().to_rgb8();
        let depth = f.depth.unwrap();
        let (w, h) = (640usize, 480usize);
        // Inverse depth (its edges are the occluding contours), and where it is valid with its
        // neighbours.
        let inv: Vec<f64> = depth
            .pixels()
            .map(|p| {
                if p.0[0] > 0.0 {
                    1.0 / p.0[0] as f64
                } else {
                    0.0
                }
            })
            .collect();
        let mask: Vec<bool> = (0..w * h)
            .map(|k| {
                let (x, y) = (k % w, k / w);
                x > 1
                    && y > 1
                    && x < w - 2
                    && y < h - 2
                    && [k - 1, k + 1, k - w, k + w, k]
                        .iter()
                        .all(|&j| inv[j] > 0.0)
            })
            .collect();
        let grey = |img: &RgbImage| -> Vec<f64> {
            img.pixels()
                .map(|p| p.0.iter().map(|&c| c as f64).sum::<f64>() / 3.0)
                .collect()
        };
        registered += gradient_agreement(&grey(&f.rgb), &inv, &mask, w, h);
        raw += gradient_agreement(&grey(&file), &inv, &mask, w, h);
    }
    assert!(
        registered > 1.2 * raw,
        "edge agreement registered {registered} vs file {raw}"
    );
    // A calibration override keeps the files' pixels.
    let k = PinholeCamera::new(585.0, 585.0, 320.0, 240.0, 640, 480);
    let plain = open_with(
        &dir,
        &OpenOptions {
            calibration: Some(k),
            ..OpenOptions::default()
        },
    )
    .unwrap();
    assert!(!plain.colour_resampled());
    let f = plain.frame(7).unwrap();
    assert_eq!(f.rgb, image::open(&f.rgb_path).unwrap().to_rgb8());
}

// ---------------------------------------------------------------------------
// TUM RGB-D

const TUM_RGB: [f64; 5] = [1.0, 1.033, 1.066, 1.1, 1.133];

/// A TUM tree in `root/name`: five colour frames, four depth frames (one too far from any
/// colour frame), ground truth at 100 Hz from 1.01 s.
fn make_tum(root: &Path, name: &str) -> PathBuf {
    let dir = root.join(name);
    let mut rgb_txt = String::from(
        "# color images\n# file: 'rgbd_dataset_freiburg2_test.bag'\n# timestamp filename\n",
    );
    for (i, t) in TUM_RGB.iter().enumerate() {
        write_rgb(&dir.join(format!("rgb/{t:.6}.png")), i as u8);
        // One entry with a Windows separator.
        let sep = if i == 1 { "\\" } else { "/" };
        rgb_txt += &format!("{t:.6} rgb{sep}{t:.6}.png\n");
    }
    write(&dir.join("rgb.txt"), &rgb_txt);
    // Depth: 1.005 -> rgb 1.0; 1.030 -> 1.033; 1.090 -> 1.1 (1.066 is 0.024 away: no depth);
    // 1.140 -> 1.133.
    let depth_t = [1.005, 1.030, 1.090, 1.140];
    let mut depth_txt = String::from("# depth maps\n# timestamp filename\n");
    for (i, t) in depth_t.iter().enumerate() {
        write_depth(
            &dir.join(format!("depth/{t:.6}.png")),
            5000 * (i as u16 + 1),
        );
        depth_txt += &format!("{t:.6} depth/{t:.6}.png\n");
    }
    write(&dir.join("depth.txt"), &depth_txt);
    let mut gt = String::from("# ground truth trajectory\n# timestamp tx ty tz qx qy qz qw\n");
    for k in 0..20 {
        let t = 1.01 + 0.01 * k as f64;
        // Rotation of 90 degrees about z for k >= 10.
        let (qz, qw) = if k >= 10 {
            (
                std::f64::consts::FRAC_1_SQRT_2,
                std::f64::consts::FRAC_1_SQRT_2,
            )
        } else {
            (0.0, 1.0)
        };
        gt += &format!("{t:.4} {} 0.5 -1.0 0 0 {qz} {qw}\n", k as f64);
    }
    write(&dir.join("groundtruth.txt"), &gt);
    dir
}

#[test]
fn tum_association_stride_intrinsics() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = make_tum(tmp.path(), "rgbd_dataset_freiburg2_test");
    assert_eq!(detect(&dir).unwrap(), DatasetKind::Tum);
    let ds = open(&dir, None, 1).unwrap();
    assert_eq!(ds.name(), "rgbd_dataset_freiburg2_test");
    assert_eq!(ds.len(), 5);
    let k = ds.intrinsics().unwrap();
    assert_eq!(k, tum_intrinsics(2).unwrap());
    assert_eq!((k.fx, k.fy, k.cx, k.cy), (520.9, 521.0, 325.1, 249.7));
    assert_eq!((k.width, k.height), (640, 480));
    assert_eq!(
        k.distortion.map(|d| d.to_array()),
        Some([0.2312, -0.7849, -0.0033, -0.0001, 0.9172])
    );
    assert_eq!(ds.depth_intrinsics(), Some(k));
    assert_eq!(tum_intrinsics(3).unwrap().distortion, None);
    assert_eq!(tum_intrinsics(1).unwrap().fx, 517.3);
    assert!(tum_intrinsics(4).is_none());

    // Depth association (value i+1 metres for depth entry i) and ground truth (x = k).
    let expect_depth = [Some(1.0), Some(2.0), None, Some(3.0), Some(4.0)];
    // Nearest ground truth within 0.02 s: 1.0 -> 1.01 (k=0); 1.033 -> 1.03 (k=2);
    // 1.066 -> 1.07 (k=6); 1.1 -> 1.10 (k=9); 1.133 -> 1.13 (k=12).
    let expect_gt_x = [0.0, 2.0, 6.0, 9.0, 12.0];
    for i in 0..5 {
        let f = ds.frame(i).unwrap();
        assert_eq!(f.index, i);
        assert_eq!(f.timestamp, TUM_RGB[i]);
        assert_eq!(f.rgb.dimensions(), (4, 3));
        assert_eq!(f.rgb.get_pixel(1, 1).0, [i as u8, 10, 20]);
        match (expect_depth[i], &f.depth) {
            (Some(m), Some(d)) => {
                assert_eq!(d.get_pixel(0, 0).0[0], 0.0);
                assert_eq!(d.get_pixel(3, 2).0[0], m);
            }
            (None, None) => {}
            (e, d) => panic!("frame {i}: expected depth {e:?}, got {:?}", d.is_some()),
        }
        let p = f.gt_pose.unwrap();
        assert_eq!(p[0][3], expect_gt_x[i], "frame {i}");
        assert_eq!((p[1][3], p[2][3]), (0.5, -1.0));
    }
    // Rotation from the quaternion (k = 12 has 90 degrees about z).
    let p = ds.frame(4).unwrap().gt_pose.unwrap();
    assert_pose_close(
        &p,
        &[
            [0.0, -1.0, 0.0, 12.0],
            [1.0, 0.0, 0.0, 0.5],
            [0.0, 0.0, 1.0, -1.0],
            [0.0, 0.0, 0.0, 1.0],
        ],
        1e-12,
    );
    assert_eq!(ds.ground_truth().unwrap().len(), 20);

    // Stride 2 keeps frames 0, 2, 4.
    let ds = open(&dir, Some(DatasetKind::Tum), 2).unwrap();
    assert_eq!(ds.len(), 3);
    let ts: Vec<f64> = (0..3).map(|i| ds.frame(i).unwrap().timestamp).collect();
    assert_eq!(ts, [1.0, 1.066, 1.133]);
    assert!(ds.frame(1).unwrap().depth.is_none());
    assert_eq!(ds.ground_truth().unwrap().len(), 20);
}

#[test]
fn tum_needs_calibration_without_freiburg_name() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = make_tum(tmp.path(), "my_capture");
    let e = open_err(&dir, None);
    assert!(e.contains("my_capture") && e.contains("--calib"), "{e}");
    // An explicit calibration (size 0 = from the images) makes it usable.
    let calib = PinholeCamera::new(100.0, 101.0, 2.0, 1.5, 0, 0);
    let ds = open_with(
        &dir,
        &OpenOptions {
            calibration: Some(calib),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(
        ds.intrinsics().unwrap(),
        PinholeCamera::new(100.0, 101.0, 2.0, 1.5, 4, 3)
    );
    assert_eq!(ds.depth_intrinsics(), ds.intrinsics());
    // A calibration for another image size is refused.
    let e = err_text(
        open_with(
            &dir,
            &OpenOptions {
                calibration: Some(PinholeCamera::new(100.0, 100.0, 2.0, 1.5, 640, 480)),
                ..Default::default()
            },
        )
        .map(|d| d.len()),
    );
    assert!(e.contains("640x480") && e.contains("4x3"), "{e}");
    // freiburg1 / freiburg3 anywhere in the last matching component.
    let fr3 = make_tum(tmp.path(), "rgbd_dataset_freiburg3_long_office_household");
    assert_eq!(open(&fr3, None, 1).unwrap().intrinsics(), tum_intrinsics(3));
}

#[test]
fn tum_unmatched_depth_and_ground_truth() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = make_tum(tmp.path(), "rgbd_dataset_freiburg1_x");
    write(&dir.join("depth.txt"), "5.0 depth/1.005000.png\n");
    let e = open_err(&dir, None);
    assert!(e.contains("depth.txt") && e.contains("within 0.02"), "{e}");

    let dir = make_tum(tmp.path(), "rgbd_dataset_freiburg1_y");
    write(&dir.join("groundtruth.txt"), "100.0 0 0 0 0 0 0 1\n");
    let e = open_err(&dir, None);
    assert!(
        e.contains("groundtruth.txt") && e.contains("ground-truth"),
        "{e}"
    );

    // No depth.txt / groundtruth.txt at all: a monocular sequence.
    let dir = make_tum(tmp.path(), "rgbd_dataset_freiburg1_z");
    fs::remove_file(dir.join("depth.txt")).unwrap();
    fs::remove_file(dir.join("groundtruth.txt")).unwrap();
    let ds = open(&dir, None, 1).unwrap();
    assert!(ds.depth_intrinsics().is_none());
    assert!(ds.ground_truth().is_none());
    let f = ds.frame(0).unwrap();
    assert!(f.depth.is_none() && f.gt_pose.is_none());
}

// ---------------------------------------------------------------------------
// EuRoC

const SENSOR_YAML: &str = "%YAML:1.0
---
# General sensor definitions.
sensor_type: camera
comment: VI-Sensor cam0 (MT9M034)

# Sensor extrinsics wrt. the body-frame.
T_BS:
  cols: 4
  rows: 4
  data: [0.0148655429818, -0.999880929698, 0.00414029679422, -0.0216401454975,
         0.999557249008, 0.0149672133247, 0.025715529948, -0.064676986768,
        -0.0257744366974, 0.00375618835797, 0.999660727178, 0.00981073058949,
         0.0, 0.0, 0.0, 1.0]

# Camera specific definitions.
rate_hz: 20
resolution: [752, 480]
camera_model: pinhole
intrinsics: [458.654, 457.296, 367.215, 248.375] #fu, fv, cu, cv
distortion_model: radial-tangential
distortion_coefficients: [-0.28340811, 0.07395907, 0.00019359, 1.76187114e-05]
";

const T_BS: Pose = [
    [
        0.0148655429818,
        -0.999880929698,
        0.00414029679422,
        -0.0216401454975,
    ],
    [
        0.999557249008,
        0.0149672133247,
        0.025715529948,
        -0.064676986768,
    ],
    [
        -0.0257744366974,
        0.00375618835797,
        0.999660727178,
        0.00981073058949,
    ],
    [0.0, 0.0, 0.0, 1.0],
];

fn make_euroc(root: &Path) -> PathBuf {
    let dir = root.join("MH_01_easy");
    let cam = dir.join("mav0/cam0");
    let stamps: [u64; 4] = [
        1403636579763555584,
        1403636579813555456,
        1403636579863555584,
        1403636579913555456,
    ];
    let mut csv = String::from("#timestamp [ns],filename\r\n");
    for (i, t) in stamps.iter().enumerate() {
        fs::create_dir_all(cam.join("data")).unwrap();
        GrayImage::from_pixel(4, 3, Luma([40 + i as u8]))
            .save(cam.join(format!("data/{t}.png")))
            .unwrap();
        csv += &format!("{t},{t}.png\r\n");
    }
    write(&cam.join("data.csv"), &csv);
    write(&cam.join("sensor.yaml"), SENSOR_YAML);
    // Ground truth at 200 Hz starting 5 ms after the first frame: identity rotation, x = k.
    let mut gt = String::from(
        "#timestamp, p_RS_R_x [m], p_RS_R_y [m], p_RS_R_z [m], q_RS_w [], q_RS_x [], q_RS_y [], q_RS_z [], v_RS_R_x [m s^-1]\n",
    );
    for k in 0..40u64 {
        let t = stamps[0] + 5_000_000 + k * 5_000_000;
        gt += &format!("{t},{},2.0,3.0,1.0,0.0,0.0,0.0,0.1\n", k as f64);
    }
    write(&dir.join("mav0/state_groundtruth_estimate0/data.csv"), &gt);
    dir
}

#[test]
fn euroc_layout() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = make_euroc(tmp.path());
    assert_eq!(detect(&dir).unwrap(), DatasetKind::Euroc);
    assert_eq!(detect(&dir.join("mav0")).unwrap(), DatasetKind::Euroc);
    let ds = open(&dir, None, 1).unwrap();
    assert_eq!(ds.name(), "MH_01_easy");
    assert_eq!(ds.len(), 4);
    let k = ds.intrinsics().unwrap();
    assert_eq!(
        (k.fx, k.fy, k.cx, k.cy),
        (458.654, 457.296, 367.215, 248.375)
    );
    assert_eq!((k.width, k.height), (752, 480));
    assert_eq!(
        k.distortion.map(|d| d.to_array()),
        Some([-0.28340811, 0.07395907, 0.00019359, 1.76187114e-05, 0.0])
    );
    assert!(ds.depth_intrinsics().is_none());

    let f = ds.frame(1).unwrap();
    assert!((f.timestamp - 1_403_636_579.813_555_5).abs() < 1e-6);
    assert_eq!(f.rgb.get_pixel(2, 2).0, [41, 41, 41]);
    assert!(f.depth.is_none());
    // Frame 1 is 50 ms after frame 0: nearest ground truth k = 9 (45 ms after the first GT
    // sample), converted to the camera with T_BS.
    let p = f.gt_pose.unwrap();
    let body: Pose = [
        [1.0, 0.0, 0.0, 9.0],
        [0.0, 1.0, 0.0, 2.0],
        [0.0, 0.0, 1.0, 3.0],
        [0.0, 0.0, 0.0, 1.0],
    ];
    let mut expect = [[0.0; 4]; 4];
    for r in 0..4 {
        for c in 0..4 {
            expect[r][c] = (0..4).map(|m| body[r][m] * T_BS[m][c]).sum();
        }
    }
    assert_pose_close(&p, &expect, 1e-12);
    // Frame 0 is 5 ms before the first sample: still within 0.02 s.
    assert!(ds.frame(0).unwrap().gt_pose.is_some());
    assert_eq!(ds.ground_truth().unwrap().len(), 40);

    let typed = EurocDataset::open(&dir, 2, None).unwrap();
    assert_eq!(typed.sequence().len(), 2);
    assert_eq!(typed.body_to_camera(), T_BS);
    assert_eq!(typed.body_ground_truth().unwrap()[3].1[0][3], 3.0);
    let frame = typed.sequence().frame(1).unwrap();
    assert!((frame.timestamp - 1_403_636_579.863_555_5).abs() < 1e-6);

    // Without ground truth.
    fs::remove_dir_all(dir.join("mav0/state_groundtruth_estimate0")).unwrap();
    let ds = open(&dir.join("mav0"), None, 1).unwrap();
    assert!(ds.ground_truth().is_none());
    assert!(ds.frame(0).unwrap().gt_pose.is_none());
}

#[test]
fn euroc_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = make_euroc(tmp.path());
    let yaml = dir.join("mav0/cam0/sensor.yaml");
    write(
        &yaml,
        &SENSOR_YAML.replace("radial-tangential", "equidistant"),
    );
    let e = open_err(&dir, None);
    assert!(
        e.contains("sensor.yaml") && e.contains("equidistant"),
        "{e}"
    );
    write(
        &yaml,
        &SENSOR_YAML.replace("[458.654, 457.296, 367.215, 248.375]", "[458.654, x, 1, 2]"),
    );
    let e = open_err(&dir, None);
    assert!(
        e.contains("sensor.yaml") && e.contains("line 20") && e.contains("'x'"),
        "{e}"
    );
    fs::remove_file(&yaml).unwrap();
    let e = open_err(&dir, None);
    assert!(e.contains("sensor.yaml"), "{e}");

    let dir = make_euroc(&tmp.path().join("b"));
    let csv = dir.join("mav0/cam0/data.csv");
    write(
        &csv,
        "#timestamp [ns],filename\n1403636579763555584,a.png\n14036.5,b.png\n",
    );
    let e = open_err(&dir, None);
    assert!(e.contains("data.csv") && e.contains("line 3"), "{e}");
    let gt = dir.join("mav0/state_groundtruth_estimate0/data.csv");
    make_euroc(&tmp.path().join("b"));
    write(&gt, "1403636579763555584,1,2,3,1,0,0\n");
    let e = open_err(&dir, None);
    assert!(
        e.contains("state_groundtruth_estimate0") && e.contains("line 1"),
        "{e}"
    );
}

// ---------------------------------------------------------------------------
// ETH3D

#[test]
fn eth3d_layout() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("sofa_1");
    let stamps = [100.0, 100.04, 100.08];
    let mut rgb = String::new();
    let mut depth = String::new();
    for (i, t) in stamps.iter().enumerate() {
        write_rgb(&dir.join(format!("rgb/{t:.6}.png")), 7 + i as u8);
        write_depth(&dir.join(format!("depth/{t:.6}.png")), 2500);
        rgb += &format!("{t:.6} rgb/{t:.6}.png\n");
        depth += &format!("{t:.6} depth/{t:.6}.png\n");
    }
    write(&dir.join("rgb.txt"), &rgb);
    write(&dir.join("depth.txt"), &depth);
    write(
        &dir.join("calibration.txt"),
        "726.21081542969 726.21081542969 359.2048034668 202.47247314453\n",
    );
    write(
        &dir.join("groundtruth.txt"),
        "# timestamp tx ty tz qx qy qz qw\n100.000000 1 2 3 0 0 0 1\n100.040000 1.1 2 3 0 0 0 1\n100.080000 1.2 2 3 0 0 0 1\n",
    );
    assert_eq!(detect(&dir).unwrap(), DatasetKind::Eth3d);
    let ds = open(&dir, None, 1).unwrap();
    assert_eq!(ds.len(), 3);
    let k = ds.intrinsics().unwrap();
    assert_eq!(
        k,
        PinholeCamera::new(
            726.21081542969,
            726.21081542969,
            359.2048034668,
            202.47247314453,
            4,
            3
        )
    );
    assert_eq!(ds.depth_intrinsics(), Some(k));
    let f = ds.frame(2).unwrap();
    assert_eq!(f.depth.unwrap().get_pixel(1, 1).0[0], 0.5);
    assert_eq!(f.gt_pose.unwrap()[0][3], 1.2);
    assert_eq!(f.rgb.get_pixel(0, 0).0[0], 9);

    // A malformed calibration names the file.
    write(&dir.join("calibration.txt"), "726.2 726.2 359.2\n");
    let e = open_err(&dir, None);
    assert!(
        e.contains("calibration.txt") && e.contains("expected 4 numbers"),
        "{e}"
    );
}

// ---------------------------------------------------------------------------
// Image folders and lists

#[test]
fn image_folder_natural_sort_and_stride() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("shots");
    write_rgb(&dir.join("frame10.png"), 10);
    write_rgb(&dir.join("frame2.png"), 2);
    write_rgb(&dir.join("frame1.PNG"), 1);
    fs::create_dir_all(&dir).unwrap();
    RgbImage::from_pixel(4, 3, Rgb([3, 3, 3]))
        .save_with_format(dir.join("frame3.JPEG"), image::ImageFormat::Jpeg)
        .unwrap();
    write(&dir.join("notes.txt"), "not an image");
    write_rgb(&dir.join(".hidden.png"), 99);
    fs::create_dir_all(dir.join("sub.png")).unwrap(); // a folder named like an image

    assert_eq!(detect(&dir).unwrap(), DatasetKind::ImageFolder);
    let ds = open(&dir, None, 1).unwrap();
    assert_eq!(ds.name(), "shots");
    assert!(ds.intrinsics().is_none() && ds.depth_intrinsics().is_none());
    assert!(ds.ground_truth().is_none());
    let names: Vec<String> = (0..ds.len())
        .map(|i| {
            ds.frame(i)
                .unwrap()
                .rgb_path
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    assert_eq!(
        names,
        ["frame1.PNG", "frame2.png", "frame3.JPEG", "frame10.png"]
    );
    let f = ds.frame(3).unwrap();
    assert_eq!(f.rgb.get_pixel(0, 0).0[0], 10);
    assert!((f.timestamp - 0.1).abs() < 1e-12);

    let ds = open(&dir, None, 3).unwrap();
    assert_eq!(ds.len(), 2);
    assert!(ds.frame(1).unwrap().rgb_path.ends_with("frame10.png"));

    // With a calibration (size from the images).
    let ds = open_with(
        &dir,
        &OpenOptions {
            calibration: Some(PinholeCamera::new(3.0, 3.0, 1.5, 1.0, 0, 0)),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(ds.intrinsics().unwrap().width, 4);

    assert!(natural_cmp("img2", "img10").is_lt());
    assert!(natural_cmp("a10b2", "a10b10").is_lt());
}

#[test]
fn image_list_file() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("capture");
    write_rgb(&dir.join("imgs/b.png"), 2);
    write_rgb(&dir.join("imgs/a.png"), 1);
    let abs = dir.join("imgs/a.png");
    let list = dir.join("list.txt");
    write(
        &list,
        &format!(
            "# my frames\nimgs\\b.png\n{}\n\n0.5 imgs/b.png\n",
            abs.display()
        ),
    );
    assert_eq!(detect(&list).unwrap(), DatasetKind::ImageFolder);
    let ds = open(&list, None, 1).unwrap();
    assert_eq!(ds.name(), "list");
    assert_eq!(ds.len(), 3);
    let f: Vec<_> = (0..3).map(|i| ds.frame(i).unwrap()).collect();
    assert_eq!(f[0].rgb.get_pixel(0, 0).0[0], 2);
    assert_eq!(f[1].rgb.get_pixel(0, 0).0[0], 1);
    assert_eq!(f[1].timestamp, 1.0 / 30.0);
    assert_eq!(f[2].timestamp, 0.5);

    write(&list, "imgs/a.png\nimgs/readme.md\n");
    let e = open_err(&list, None);
    assert!(e.contains("list.txt") && e.contains("line 2"), "{e}");
    write(&list, "imgs/missing.png\n");
    let ds = open(&list, None, 1).unwrap();
    let e = err_text(ds.frame(0).map(|f| f.index));
    assert!(e.contains("missing.png"), "{e}");
}

// ---------------------------------------------------------------------------
// Detection, kinds, calibration files, video

#[test]
fn detection_and_kinds() {
    let tmp = tempfile::tempdir().unwrap();
    let empty = tmp.path().join("empty");
    fs::create_dir_all(&empty).unwrap();
    let e = err_text(detect(&empty));
    assert!(e.contains("empty") && e.contains("cannot tell"), "{e}");
    let e = err_text(detect(&tmp.path().join("nope")));
    assert!(e.contains("nope"), "{e}");

    // A 7-Scenes scene folder with sequences.
    let scene = tmp.path().join("chess");
    write_rgb(&scene.join("seq-02/frame-000000.color.png"), 0);
    write_rgb(&scene.join("seq-01/frame-000000.color.png"), 0);
    let e = err_text(detect(&scene));
    assert!(e.contains("seq-01, seq-02") && e.contains("chess"), "{e}");
    let e = open_err(&scene, Some(DatasetKind::SevenScenes));
    assert!(e.contains("seq-01"), "{e}");
    let ds = open(&scene.join("seq-01"), None, 1).unwrap();
    assert_eq!(ds.len(), 1);
    // Default intrinsics, no depth, no poses.
    assert_eq!(ds.intrinsics().unwrap().fx, 585.0);
    assert_eq!(ds.intrinsics().unwrap().width, 4);
    assert!(ds.depth_intrinsics().is_none() && ds.ground_truth().is_none());

    for (s, k) in [
        ("tum", DatasetKind::Tum),
        ("7-Scenes", DatasetKind::SevenScenes),
        ("seven_scenes", DatasetKind::SevenScenes),
        ("EuRoC", DatasetKind::Euroc),
        ("eth3d", DatasetKind::Eth3d),
        ("images", DatasetKind::ImageFolder),
        ("video", DatasetKind::Video),
    ] {
        assert_eq!(s.parse::<DatasetKind>().unwrap(), k);
        assert_eq!(k.as_str().parse::<DatasetKind>().unwrap(), k);
    }
    assert!("kitti".parse::<DatasetKind>().is_err());

    // Video: recognised; a file that is not one is an error naming it (FFmpeg's complaint).
    let video = tmp.path().join("clip.MP4");
    write(&video, "not really a video");
    assert_eq!(detect(&video).unwrap(), DatasetKind::Video);
    let e = open_err(&video, None);
    assert!(e.contains("clip.MP4") && e.contains("ffprobe"), "{e}");
    assert!(
        !tmp.path().join("clip.MP4.frames").exists(),
        "no frame cache for a failed video"
    );
    let single = tmp.path().join("one.png");
    write_rgb(&single, 0);
    assert!(err_text(detect(&single)).contains("single image"));

    // Stride 0 is refused.
    let e = match open(&scene.join("seq-01"), None, 0) {
        Ok(_) => panic!("stride 0 accepted"),
        Err(e) => e.to_string(),
    };
    assert!(e.contains("stride"), "{e}");
}

#[test]
fn calibration_files() {
    let tmp = tempfile::tempdir().unwrap();
    let yaml = tmp.path().join("intrinsics.yaml");
    write(
        &yaml,
        "width: 640\nheight: 480\n# With distortion (fx, fy, cx, cy, k1, k2, p1, p2)\ncalibration:  [517.3, 516.5, 318.6, 255.3, 0.2624, -0.9531, -0.0054, 0.0026, 1.1633]\n",
    );
    let k = datasets::read_calibration(&yaml).unwrap();
    assert_eq!(k, tum_intrinsics(1).unwrap());
    let txt = tmp.path().join("calib.txt");
    write(&txt, "500 501 320 240\n");
    assert_eq!(
        datasets::read_calibration(&txt).unwrap(),
        PinholeCamera::new(500.0, 501.0, 320.0, 240.0, 0, 0)
    );
    write(&txt, "500 501 320 240 0.1 0 0 0\n");
    assert_eq!(
        datasets::read_calibration(&txt)
            .unwrap()
            .distortion
            .map(|d| d.to_array()),
        Some([0.1, 0.0, 0.0, 0.0, 0.0])
    );
    write(&yaml, "width: 640\ncalibration: [1, 2, 3, 4]\n");
    let e = err_text(datasets::read_calibration(&yaml));
    assert!(e.contains("intrinsics.yaml") && e.contains("height"), "{e}");
    write(&yaml, "width: 640\nheight: 480\ncalibration: [1, 2, 3]\n");
    let e = err_text(datasets::read_calibration(&yaml));
    assert!(
        e.contains("line 3") && e.contains("expected 4 numbers"),
        "{e}"
    );
}

// ---------------------------------------------------------------------------
// Malformed input

#[test]
fn malformed_inputs_name_the_file() {
    let tmp = tempfile::tempdir().unwrap();

    // Missing rgb.txt (kind forced).
    let dir = tmp.path().join("rgbd_dataset_freiburg1_none");
    fs::create_dir_all(&dir).unwrap();
    let e = open_err(&dir, Some(DatasetKind::Tum));
    assert!(e.contains("rgb.txt"), "{e}");

    // Malformed rgb.txt line.
    let dir = make_tum(tmp.path(), "rgbd_dataset_freiburg1_bad");
    write(
        &dir.join("rgb.txt"),
        "# header\n1.0 rgb/1.000000.png\nfoo.png\n",
    );
    let e = open_err(&dir, None);
    assert!(e.contains("rgb.txt") && e.contains("line 3"), "{e}");
    write(
        &dir.join("rgb.txt"),
        "1.0 rgb/1.000000.png\nabc rgb/1.033000.png\n",
    );
    let e = open_err(&dir, None);
    assert!(
        e.contains("rgb.txt") && e.contains("line 2") && e.contains("'abc'"),
        "{e}"
    );
    write(&dir.join("rgb.txt"), "# nothing\n");
    let e = open_err(&dir, None);
    assert!(e.contains("rgb.txt") && e.contains("no frames"), "{e}");

    // Bad ground-truth line.
    let dir = make_tum(tmp.path(), "rgbd_dataset_freiburg1_gt");
    write(
        &dir.join("groundtruth.txt"),
        "# x\n1.0 0 0 0 0 0 0 1\n1.01 0 0 0 0 0 1\n",
    );
    let e = open_err(&dir, None);
    assert!(e.contains("groundtruth.txt") && e.contains("line 3"), "{e}");
    write(&dir.join("groundtruth.txt"), "1.0 0 0 0 0 0 0 0\n");
    let e = open_err(&dir, None);
    assert!(
        e.contains("groundtruth.txt") && e.contains("quaternion"),
        "{e}"
    );

    // Corrupt PNG, missing image, 8-bit depth.
    let dir = make_tum(tmp.path(), "rgbd_dataset_freiburg1_png");
    let bad = dir.join("rgb/1.000000.png");
    let mut bytes = fs::read(&bad).unwrap();
    bytes.truncate(bytes.len() / 2);
    fs::write(&bad, &bytes).unwrap();
    let ds = open(&dir, None, 1).unwrap();
    let e = err_text(ds.frame(0).map(|f| f.index));
    assert!(e.contains("1.000000.png"), "{e}");
    fs::write(&bad, b"this is not an image").unwrap();
    let e = err_text(ds.frame(0).map(|f| f.index));
    assert!(e.contains("1.000000.png"), "{e}");
    fs::remove_file(dir.join("rgb/1.033000.png")).unwrap();
    let e = err_text(ds.frame(1).map(|f| f.index));
    assert!(e.contains("1.033000.png"), "{e}");
    GrayImage::new(4, 3)
        .save(dir.join("depth/1.090000.png"))
        .unwrap();
    let e = err_text(ds.frame(3).map(|f| f.index));
    assert!(e.contains("1.090000.png") && e.contains("16-bit"), "{e}");
    let e = err_text(ds.frame(99).map(|f| f.index));
    assert!(e.contains("out of range"), "{e}");

    // 7-Scenes: bad pose line, wrong row count, bad camera-intrinsics.txt.
    let seq = tmp.path().join("seq-01");
    write_rgb(&seq.join("frame-000000.color.png"), 0);
    write_depth(&seq.join("frame-000000.depth.png"), 1500);
    write(
        &seq.join("frame-000000.pose.txt"),
        "1 0 0 0\n0 1 0 0\n0 0 1 0\n0 0 0 1\n",
    );
    write_rgb(&seq.join("frame-000001.color.png"), 1);
    write(
        &seq.join("frame-000001.pose.txt"),
        "1 0 0 0\n0 1 x 0\n0 0 1 0\n0 0 0 1\n",
    );
    let e = open_err(&seq, None);
    assert!(
        e.contains("frame-000001.pose.txt") && e.contains("line 2"),
        "{e}"
    );
    write(
        &seq.join("frame-000001.pose.txt"),
        "1 0 0 0\n0 1 0 0 7\n0 0 1 0\n0 0 0 1\n",
    );
    let e = open_err(&seq, None);
    assert!(
        e.contains("frame-000001.pose.txt") && e.contains("line 2"),
        "{e}"
    );
    write(
        &seq.join("frame-000001.pose.txt"),
        "1 0 0 0\n0 1 0 0\n0 0 1 0\n",
    );
    let e = open_err(&seq, None);
    assert!(
        e.contains("frame-000001.pose.txt") && e.contains("4 rows"),
        "{e}"
    );
    // Non-finite pose: unknown, not an error.
    write(
        &seq.join("frame-000001.pose.txt"),
        "-inf -inf -inf -inf\n-inf -inf -inf -inf\n-inf -inf -inf -inf\n0 0 0 1\n",
    );
    let ds = open(&seq, None, 1).unwrap();
    assert!(ds.frame(1).unwrap().gt_pose.is_none());
    assert_eq!(ds.ground_truth().unwrap().len(), 1);
    let d = ds.frame(0).unwrap().depth.unwrap();
    assert_eq!(d.get_pixel(1, 0).0[0], 1.5);
    assert!(ds.frame(1).unwrap().depth.is_none());
    write(&seq.join("camera-intrinsics.txt"), "585 0 320\n0 585 240\n");
    let e = open_err(&seq, None);
    assert!(e.contains("camera-intrinsics.txt"), "{e}");
    write(
        &seq.join("camera-intrinsics.txt"),
        "500 0 2\n0 501 1.5\n0 0 1\n",
    );
    let ds = open(&seq, None, 1).unwrap();
    assert_eq!(
        ds.intrinsics().unwrap(),
        PinholeCamera::new(500.0, 501.0, 2.0, 1.5, 4, 3)
    );
    // 65535 is invalid depth.
    write_depth(&seq.join("frame-000000.depth.png"), 65535);
    let d = ds.frame(0).unwrap().depth.unwrap();
    assert!(d.pixels().all(|p| p.0[0] == 0.0));
}

/// Random byte mutations of every text file of the synthetic trees: opening and reading
/// frames may fail but must never panic.
#[test]
fn mutated_text_files_never_panic() {
    let tmp = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(7);
    let tum = make_tum(tmp.path(), "rgbd_dataset_freiburg1_fuzz");
    let euroc = make_euroc(tmp.path());
    let files = [
        (tum.clone(), tum.join("rgb.txt")),
        (tum.clone(), tum.join("depth.txt")),
        (tum.clone(), tum.join("groundtruth.txt")),
        (euroc.clone(), euroc.join("mav0/cam0/data.csv")),
        (euroc.clone(), euroc.join("mav0/cam0/sensor.yaml")),
        (
            euroc.clone(),
            euroc.join("mav0/state_groundtruth_estimate0/data.csv"),
        ),
    ];
    for (root, file) in &files {
        let original = fs::read(file).unwrap();
        for _ in 0..60 {
            let mut b = original.clone();
            match rng.random_range(0..4) {
                0 => b.truncate(rng.random_range(0..=b.len())),
                1 => {
                    for _ in 0..rng.random_range(1..6) {
                        let i = rng.random_range(0..b.len());
                        b[i] = rng.random();
                    }
                }
                2 => {
                    for _ in 0..rng.random_range(1..6) {
                        let i = rng.random_range(0..b.len());
                        b[i] = *b"0123456789.,-e []\n# :"
                            .get(rng.random_range(0..21))
                            .unwrap();
                    }
                }
                _ => {
                    let i = rng.random_range(0..b.len());
                    let j = rng.random_range(i..b.len());
                    b.drain(i..j);
                }
            }
            fs::write(file, &b).unwrap();
            let result = catch_unwind(AssertUnwindSafe(|| {
                if let Ok(ds) = datasets::open(root, None, 1) {
                    for i in 0..ds.len().min(3) {
                        let _ = ds.frame(i);
                    }
                    let _ = ds.ground_truth();
                }
            }));
            assert!(
                result.is_ok(),
                "panic on mutated {}: {:?}",
                file.display(),
                String::from_utf8_lossy(&b)
            );
        }
        fs::write(file, &original).unwrap();
    }
}

#[test]
fn video_frames_decode_through_ffmpeg() {
    // A 12-frame 10 fps lossless video of distinct solid colours (FFmpeg is required: CI installs it).
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    for i in 0..12u8 {
        let img = image::RgbImage::from_pixel(64, 48, image::Rgb([i * 20, 255 - i * 20, 7 * i]));
        img.save(src.join(format!("{i:03}.png"))).unwrap();
    }
    let video = tmp.path().join("clip.mkv");
    let st = std::process::Command::new("ffmpeg")
        .args(["-v", "error", "-y", "-framerate", "10", "-i"])
        .arg(src.join("%03d.png"))
        .args(["-c:v", "ffv1"])
        .arg(&video)
        .status()
        .expect("ffmpeg is installed (.ci/run installs it)");
    assert!(st.success());
    let ds = open(&video, None, 1).unwrap();
    assert_eq!(ds.len(), 12);
    for i in [0usize, 5, 11] {
        let f = ds.frame(i).unwrap();
        assert!(
            (f.timestamp - i as f64 / 10.0).abs() < 1e-9,
            "timestamp {} of frame {i}",
            f.timestamp
        );
        let img = image::open(&f.rgb_path).unwrap().to_rgb8();
        assert_eq!(img.dimensions(), (64, 48));
        assert_eq!(
            img.get_pixel(10, 10).0,
            [i as u8 * 20, 255 - i as u8 * 20, 7 * i as u8],
            "frame {i} colour"
        );
    }
    // Stride, and the cache is reused (same files) on the second open.
    let first = ds.frame(0).unwrap().rgb_path;
    let strided = open(&video, None, 5).unwrap();
    assert_eq!(strided.len(), 3);
    assert_eq!(strided.frame(1).unwrap().timestamp, 0.5);
    assert_eq!(strided.frame(0).unwrap().rgb_path, first);
    assert!(tmp.path().join("clip.mkv.frames").is_dir());

    // Video options: the frames go to `frames_dir` (same pixels), and the programs are the ones
    // named (a missing one is an error naming it and the video).
    let cache = tmp.path().join("cache");
    let with = |video: datasets::VideoOptions| OpenOptions {
        video,
        ..OpenOptions::default()
    };
    let elsewhere = datasets::open_with(
        &video,
        &with(datasets::VideoOptions {
            frames_dir: Some(cache.clone()),
            ..Default::default()
        }),
    )
    .unwrap();
    assert_eq!(elsewhere.len(), 12);
    let f = elsewhere.frame(7).unwrap();
    assert!(
        f.rgb_path.starts_with(cache.join("clip.mkv.frames")),
        "{}",
        f.rgb_path.display()
    );
    let img = image::open(&f.rgb_path).unwrap().to_rgb8();
    assert_eq!(img.get_pixel(3, 3).0, [140, 115, 49]);
    let moved = tmp.path().join("moved.mkv");
    std::fs::copy(&video, &moved).unwrap();
    let missing = tmp.path().join("no-such-ffprobe");
    let e = datasets::open_with(
        &moved,
        &with(datasets::VideoOptions {
            ffprobe: missing.clone(),
            ..Default::default()
        }),
    )
    .err()
    .expect("a missing ffprobe is an error")
    .to_string();
    assert!(
        e.contains("no-such-ffprobe") && e.contains("moved.mkv"),
        "{e}"
    );
    assert!(!tmp.path().join("moved.mkv.frames").exists());
}

/// A truncated colour JPEG or depth PNG in a data set is an error naming the file when that
/// frame is read (the JPEG decoder alone would fill the missing part with grey).
#[test]
fn truncated_frames_are_errors_naming_the_file() {
    let src = data("redkitchen");
    let tmp = tempfile::tempdir().unwrap();
    for i in 0..3 {
        for ext in ["color.jpg", "depth.png", "pose.txt"] {
            let name = format!("frame-{i:06}.{ext}");
            fs::copy(src.join(&name), tmp.path().join(&name)).unwrap();
        }
    }
    let cut = |name: &str, keep: usize| {
        let bytes = fs::read(src.join(name)).unwrap();
        fs::write(tmp.path().join(name), &bytes[..keep]).unwrap();
    };
    cut("frame-000001.color.jpg", 20_000);
    cut("frame-000002.depth.png", 30_000);
    let ds = open(tmp.path(), None, 1).unwrap();
    assert!(ds.frame(0).is_ok());
    let e = err_text(ds.frame(1));
    assert!(
        e.contains("frame-000001.color.jpg") && e.contains("truncated"),
        "{e}"
    );
    let e = err_text(ds.frame(2));
    assert!(e.contains("frame-000002.depth.png"), "{e}");
}
