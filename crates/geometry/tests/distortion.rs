//! Radial-tangential distortion tests against OpenCV reference numbers.
//!
//! The literals below were produced with `opencv-python-headless` 5.0.0.93
//! (identical output with 4.10.0.84) by this script:
//!
//! ```python
//! import cv2, numpy as np
//! K = np.array([[458.654,0,367.215],[0,457.296,248.375],[0,0,1.0]])        # "euroc", 752x480
//! D = np.array([-0.28340811,0.07395907,0.00019359,1.76187114e-05])
//! # "tum_fr1", 640x480:
//! # K = [[517.306408,0,318.643040],[0,516.469215,255.313989],[0,0,1]]
//! # D = [0.262383,-0.953104,-0.005358,0.002628,1.163314]
//! P = np.array([[0.1,-0.2,1.0],[-0.5,0.3,1.0],[0.7,0.45,1.0],[0.0,0.0,1.0]])
//! cv2.projectPoints(P, np.zeros(3), np.zeros(3), K, D)                        # "distort"
//! px = np.array([[[10.0,20.0]],[[700.0,450.0]],[[300.0,200.0]],[[0.0,0.0]]])
//! cv2.undistortPoints(px, K, D)                                               # 5 iterations
//! cv2.undistortPoints(px, K, D, None, np.eye(3), np.eye(3),
//!                     (cv2.TERM_CRITERIA_COUNT|cv2.TERM_CRITERIA_EPS, 100, 1e-12))
//! newK, roi = cv2.getOptimalNewCameraMatrix(K, D, (w,h), 0)
//! m1, m2 = cv2.initUndistortRectifyMap(K, D, None, newK, (w,h), cv2.CV_32FC1)  # m1[v,u], m2[v,u]
//! ```

#![allow(clippy::excessive_precision)]

use rust3r_geometry::nalgebra::{Vector2, Vector3};
use rust3r_geometry::{
    PinholeCamera, RadTanDistortion, UndistortCriteria, init_undistort_rectify_map,
    optimal_new_camera_matrix_alpha0, optimal_new_camera_matrix_centered, undistort_points,
};

struct Case {
    camera: PinholeCamera,
    dist: RadTanDistortion,
    distorted: [[f64; 2]; 4],
    undistorted5: [[f64; 2]; 4],
    undistorted100: [[f64; 2]; 4],
    new_k: [f64; 4],
    /// (u, v, map_x, map_y)
    map: [(u32, u32, f32, f32); 6],
}

const POINTS: [[f64; 3]; 4] = [
    [0.1, -0.2, 1.0],
    [-0.5, 0.3, 1.0],
    [0.7, 0.45, 1.0],
    [0.0, 0.0, 1.0],
];
const PIXELS: [[f64; 2]; 4] = [[10.0, 20.0], [700.0, 450.0], [300.0, 200.0], [0.0, 0.0]];

fn cases() -> Vec<Case> {
    vec![
        Case {
            camera: PinholeCamera::new(458.654, 457.296, 367.215, 248.375, 752, 480),
            dist: RadTanDistortion::new(-0.28340811, 0.07395907, 0.00019359, 1.76187114e-05),
            distorted: [
                [412.4359631187609, 158.2060897098615],
                [158.005145633312, 373.56099389871645],
                [636.7185409091016, 421.1720232526311],
                [367.215, 248.375],
            ],
            undistorted5: [
                [-1.0570030947722204, -0.6781602404880239],
                [0.9503281505308115, 0.5771918943107567],
                [-0.1479395405575548, -0.10679515331066576],
                [-1.0967104720677192, -0.7444271484904414],
            ],
            undistorted100: [
                [-1.0573124392915505, -0.6783597704043446],
                [0.9513357386760105, 0.5778019366142311],
                [-0.14793954056085573, -0.10679515331306312],
                [-1.096745824233864, -0.7444513920192226],
            ],
            new_k: [
                356.3484714963602,
                418.1912226072655,
                363.004276584249,
                250.27129706076096,
            ],
            map: [
                (0, 0, 17.6340274810791, 43.725284576416016),
                (751, 0, 736.0531005859375, 46.38787078857422),
                (0, 479, 15.185096740722656, 436.95111083984375),
                (751, 479, 738.0254516601562, 434.2200927734375),
                (376, 240, 383.93243408203125, 237.149658203125),
                (100, 37, 89.78043365478516, 57.30582046508789),
            ],
        },
        Case {
            camera: PinholeCamera::new(517.306408, 516.469215, 318.643040, 255.313989, 640, 480),
            dist: RadTanDistortion::new5(0.262383, -0.953104, -0.005358, 0.002628, 1.163314),
            distorted: [
                [371.1426363030909, 150.48208990934688],
                [55.56054186762441, 412.2440520837017],
                [721.4657774212225, 511.3318265528971],
                [318.64304, 255.313989],
            ],
            undistorted5: [
                [-0.5731718337604131, -0.4340529704167479],
                [0.6889744285571681, 0.3561012977589621],
                [-0.03592381568930955, -0.1065929844284749],
                [-0.5855252044135382, -0.46594330573633236],
            ],
            undistorted100: [
                [-0.5731843640787534, -0.43406323539210856],
                [0.6897620283712186, 0.3564886381416969],
                [-0.03592381568931593, -0.10659298442850505],
                [-0.585637447075747, -0.4660375870184594],
            ],
            new_k: [
                546.7498550972869,
                543.054587108014,
                320.13582066891126,
                251.88600291265143,
            ],
            map: [
                (0, 0, 0.2552875876426697, 1.362938404083252),
                (639, 0, 638.8980102539062, 0.08295655250549316),
                (0, 479, 6.07625675201416, 477.2750549316406),
                (639, 479, 633.0516357421875, 478.4869079589844),
                (320, 240, 318.51513671875, 244.00448608398438),
                (100, 37, 105.25578308105469, 44.63063430786133),
            ],
        },
    ]
}

#[test]
fn distort_matches_opencv_project_points() {
    for c in cases() {
        for (p, e) in POINTS.iter().zip(c.distorted.iter()) {
            let uv = c.dist.project(&c.camera, &Vector3::new(p[0], p[1], p[2]));
            assert!(
                (uv.x - e[0]).abs() < 1e-9 && (uv.y - e[1]).abs() < 1e-9,
                "{uv:?} vs {e:?}"
            );
        }
    }
}

#[test]
fn undistort_matches_opencv_undistort_points() {
    for c in cases() {
        let px: Vec<Vector2<f64>> = PIXELS.iter().map(|p| Vector2::new(p[0], p[1])).collect();
        let out = undistort_points(&c.camera, &c.dist, &px, None, UndistortCriteria::default());
        for (o, e) in out.iter().zip(c.undistorted5.iter()) {
            assert!(
                (o.x - e[0]).abs() < 1e-12 && (o.y - e[1]).abs() < 1e-12,
                "{o:?} vs {e:?}"
            );
        }
        let crit = UndistortCriteria {
            max_iter: 100,
            epsilon: Some(1e-12),
        };
        let out = undistort_points(&c.camera, &c.dist, &px, None, crit);
        for (o, e) in out.iter().zip(c.undistorted100.iter()) {
            assert!(
                (o.x - e[0]).abs() < 1e-12 && (o.y - e[1]).abs() < 1e-12,
                "{o:?} vs {e:?}"
            );
        }
        // with a new camera matrix the output is in pixels
        let out_px = undistort_points(&c.camera, &c.dist, &px, Some(&c.camera), crit);
        for (o, n) in out_px.iter().zip(out.iter()) {
            assert!((o - c.camera.project(&n.push(1.0))).norm() < 1e-9);
        }
    }
}

#[test]
fn undistort_inverts_distort() {
    for c in cases() {
        for p in [[0.05, -0.1], [0.2, 0.15], [-0.3, 0.25], [0.0, 0.0]] {
            let xn = Vector2::new(p[0], p[1]);
            let xd = c.dist.distort(&xn);
            let back = c.dist.undistort(
                &xd,
                UndistortCriteria {
                    max_iter: 200,
                    epsilon: None,
                },
            );
            assert!((back - xn).norm() < 1e-10, "{back:?} vs {xn:?}");
        }
    }
}

#[test]
fn optimal_new_camera_matrix_matches_opencv() {
    for c in cases() {
        let k = optimal_new_camera_matrix_alpha0(&c.camera, &c.dist);
        let got = [k.fx, k.fy, k.cx, k.cy];
        for (g, e) in got.iter().zip(c.new_k.iter()) {
            assert!((g - e).abs() < 1e-9, "{got:?} vs {:?}", c.new_k);
        }
        assert_eq!((k.width, k.height), (c.camera.width, c.camera.height));
    }
}

#[test]
fn undistort_rectify_map_matches_opencv() {
    for c in cases() {
        let new_cam = PinholeCamera::new(
            c.new_k[0],
            c.new_k[1],
            c.new_k[2],
            c.new_k[3],
            c.camera.width,
            c.camera.height,
        );
        let map = init_undistort_rectify_map(&c.camera, &c.dist, &new_cam);
        assert_eq!(map.map_x.len(), (c.camera.width * c.camera.height) as usize);
        for &(u, v, ex, ey) in c.map.iter() {
            let (mx, my) = map.get(u, v);
            assert!(
                (mx - ex).abs() < 1e-3 && (my - ey).abs() < 1e-3,
                "({u},{v}): ({mx},{my}) vs ({ex},{ey})"
            );
        }
        // the map inverts undistortion: distorting the undistorted ray of a map
        // entry lands back on the destination pixel
        let (mx, my) = map.get(100, 37);
        let n = c.dist.undistort_pixel(
            &c.camera,
            &Vector2::new(mx as f64, my as f64),
            UndistortCriteria {
                max_iter: 200,
                epsilon: None,
            },
        );
        let back = new_cam.project(&n.push(1.0));
        assert!((back - Vector2::new(100.0, 37.0)).norm() < 1e-3);
    }
}

#[test]
fn remap_identity_map_is_identity() {
    let cam = PinholeCamera::new(10.0, 10.0, 3.5, 2.5, 8, 6);
    let map = init_undistort_rectify_map(&cam, &RadTanDistortion::default(), &cam);
    let src: Vec<f32> = (0..8 * 6 * 2).map(|i| i as f32).collect();
    let out = map.remap_bilinear(&src, 8, 6, 2, -1.0);
    for (a, b) in out.iter().zip(src.iter()) {
        assert!((a - b).abs() < 1e-3);
    }
}

/// `cv2.getOptimalNewCameraMatrix(K, D, (w, h), alpha, (w, h), centerPrincipalPoint=True)` with
/// opencv-python-headless 4.10.0.84 (5.0.0.93 gives the same), and `initUndistortRectifyMap` to
/// that camera (`m1[v, u], m2[v, u]`): MASt3R-SLAM's calibrated-mode undistortion.
#[test]
fn centred_optimal_camera_matches_opencv() {
    let fr1 = PinholeCamera::new(517.3, 516.5, 318.6, 255.3, 640, 480);
    let euroc = PinholeCamera::new(458.654, 457.296, 367.215, 248.375, 752, 480);
    let d_fr1 = RadTanDistortion::new5(0.2624, -0.9531, -0.0054, 0.0026, 1.1633);
    let d_euroc = RadTanDistortion::new(-0.28340811, 0.07395907, 0.00019359, 1.76187114e-05);
    #[allow(clippy::type_complexity)]
    let cases: [(
        PinholeCamera,
        RadTanDistortion,
        [f64; 4],
        [f64; 4],
        [(u32, u32, f32, f32); 4],
    ); 3] = [
        (
            fr1,
            d_fr1,
            [573.5131851332832, 572.6262519260405, 319.5, 239.5],
            [500.5492727618035, 499.77517761738164, 319.5, 239.5],
            [
                (0, 0, 20.276024, 29.83096),
                (100, 50, 115.848145, 79.24785),
                (319, 239, 318.14902, 254.849),
                (639, 479, 617.29553, 477.36203),
            ],
        ),
        (
            fr1,
            RadTanDistortion::default(),
            [553.8370585605721, 552.9805543138132, 319.5, 239.5],
            [485.2853505679592, 484.5348609479044, 319.5, 239.5],
            [
                (0, 0, 20.177662, 31.6),
                (100, 50, 113.58058, 78.30146),
                (319, 239, 318.133, 254.833),
                (639, 479, 617.02234, 479.0),
            ],
        ),
        (
            euroc,
            d_euroc,
            [439.1850483672595, 437.8846927709217, 375.5, 239.5],
            [321.91529021773795, 320.9621513284757, 375.5, 239.5],
            [
                (0, 0, 58.883224, 51.801872),
                (100, 50, 119.74116, 78.20071),
                (319, 239, 308.4864, 247.85674),
                (751, 479, 675.7531, 445.25153),
            ],
        ),
    ];
    for (cam, d, alpha0, alpha1, map) in cases {
        for (alpha, want) in [(0.0, alpha0), (1.0, alpha1)] {
            let k = optimal_new_camera_matrix_centered(&cam, &d, alpha);
            let got = [k.fx, k.fy, k.cx, k.cy];
            for (g, e) in got.iter().zip(&want) {
                assert!((g - e).abs() < 1e-9, "alpha {alpha}: {got:?} vs {want:?}");
            }
        }
        let k = optimal_new_camera_matrix_centered(&cam, &d, 0.0);
        let m = init_undistort_rectify_map(&cam, &d, &k);
        for (u, v, ex, ey) in map {
            let (mx, my) = m.get(u, v);
            assert!(
                (mx - ex).abs() < 1e-3 && (my - ey).abs() < 1e-3,
                "({u}, {v}): ({mx}, {my}) vs ({ex}, {ey})"
            );
        }
    }
}
