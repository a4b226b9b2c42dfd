//! MASt3R-SLAM's calibration file (`--calib intrinsics.yaml`) and the undistortion it implies.
//!
//! ```yaml
//! width: 640
//! height: 480
//! # With distortion (fx, fy, cx, cy, k1, k2, p1, p2 [, k3])
//! calibration: [517.3, 516.5, 318.6, 255.3, 0.2624, -0.9531, -0.0054, 0.0026, 1.1633]
//! ```
//!
//! `calibration` holds 4 (pinhole), 8 or 9 (OpenCV radial-tangential distortion) numbers.
//! As MASt3R-SLAM's `Intrinsics.from_calib` (with its default
//! `dataset.center_principle_point: True`), every frame is remapped to the camera of
//! `cv::getOptimalNewCameraMatrix(K, dist, (W, H), alpha = 0, centerPrincipalPoint = true)`,
//! with or without distortion (without, it is a zoom that centres the principal point).

use std::path::{Path, PathBuf};

use rust3r_geometry::{
    PinholeCamera, UndistortMap, init_undistort_rectify_map, optimal_new_camera_matrix_centered,
};

use super::common::{dataset_error, malformed, read_text};
use super::yaml::MiniYaml;
use super::{Frame, calibration_from_numbers};
use crate::IoError;

/// A MASt3R-SLAM calibration file and the undistortion of frames to its centred pinhole camera.
#[derive(Debug, Clone)]
pub struct SlamCalibration {
    /// The file it was read from (named by errors).
    pub path: PathBuf,
    /// The calibration as written (with `width`, `height` and the distortion, if any).
    pub intrinsics: PinholeCamera,
    /// The camera of the undistorted frames (same size as the frames).
    pub undistorted: PinholeCamera,
    map: UndistortMap,
}

impl SlamCalibration {
    /// Reads `path`. Errors name the file: missing file, missing `width` / `height` /
    /// `calibration`, a number of calibration values other than 4, 8 or 9, a value that is not a
    /// finite number, focal lengths that are not positive, a zero image size.
    pub fn read(path: &Path) -> Result<Self, IoError> {
        let text = read_text(path)?;
        let doc = MiniYaml::parse(&text);
        let width = doc.unsigned("width", path)?;
        let height = doc.unsigned("height", path)?;
        if width == 0 || height == 0 {
            return Err(malformed(
                path,
                format!("the image size must be positive, found {width}x{height}"),
            ));
        }
        let numbers = doc.numbers("calibration", path)?;
        let k = calibration_from_numbers(&numbers, path, doc.line_of("calibration"))?;
        Ok(Self::new(path, k.with_size(width, height)))
    }

    /// From intrinsics already read (`width` and `height` non-zero, focal lengths positive);
    /// `path` names the calibration in errors.
    pub fn new(path: &Path, intrinsics: PinholeCamera) -> Self {
        let dist = intrinsics.distortion.unwrap_or_default();
        let undistorted = optimal_new_camera_matrix_centered(&intrinsics, &dist, 0.0);
        let map = init_undistort_rectify_map(&intrinsics, &dist, &undistorted);
        Self {
            path: path.to_path_buf(),
            intrinsics,
            undistorted,
            map,
        }
    }

    /// Checks that an image of `width x height` read from `image` has the calibrated size;
    /// the error names the image and the calibration file.
    pub fn check_size(&self, width: u32, height: u32, image: &Path) -> Result<(), IoError> {
        let (w, h) = (self.intrinsics.width, self.intrinsics.height);
        if (width, height) != (w, h) {
            return Err(dataset_error(
                image,
                format!(
                    "the frame is {width}x{height} but the calibration {} is for {w}x{h} frames",
                    self.path.display()
                ),
            ));
        }
        Ok(())
    }

    /// The frame's colour image undistorted to [`SlamCalibration::undistorted`] (bilinear
    /// remap, as MASt3R-SLAM's `cv2.remap(..., INTER_LINEAR)`); an error naming the frame's
    /// file when its size differs from the calibration's.
    pub fn undistort(&self, frame: &Frame) -> Result<image::RgbImage, IoError> {
        let (w, h) = (frame.rgb.width(), frame.rgb.height());
        self.check_size(w, h, &frame.rgb_path)?;
        let data = crate::scene::remap_bilinear_channels(frame.rgb.as_raw(), 3, w, h, &self.map);
        image::RgbImage::from_raw(w, h, data).ok_or_else(|| {
            dataset_error(&frame.rgb_path, "the undistorted image has the wrong size")
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, text: &str) -> PathBuf {
        let p = dir.join("intrinsics.yaml");
        std::fs::write(&p, text).unwrap();
        p
    }

    fn err(dir: &Path, text: &str) -> String {
        let p = write(dir, text);
        SlamCalibration::read(&p).unwrap_err().to_string()
    }

    #[test]
    fn reads_mast3r_slam_files() {
        let tmp = tempfile::tempdir().unwrap();
        let p = write(
            tmp.path(),
            "width: 640\nheight: 480\n# With distortion (fx, fy, cx, cy, k1, k2, p1, p2 [, k3])\n\
             calibration: [517.3, 516.5, 318.6, 255.3, 0.2624, -0.9531, -0.0054, 0.0026, 1.1633]\n",
        );
        let c = SlamCalibration::read(&p).unwrap();
        assert_eq!(c.path, p);
        assert_eq!(
            (
                c.intrinsics.fx,
                c.intrinsics.fy,
                c.intrinsics.cx,
                c.intrinsics.cy
            ),
            (517.3, 516.5, 318.6, 255.3)
        );
        assert_eq!((c.intrinsics.width, c.intrinsics.height), (640, 480));
        assert_eq!(
            c.intrinsics.distortion.map(|d| d.to_array()),
            Some([0.2624, -0.9531, -0.0054, 0.0026, 1.1633])
        );
        // OpenCV 4.10: getOptimalNewCameraMatrix(K, D, (640, 480), 0, centerPrincipalPoint=True).
        let u = c.undistorted;
        assert!((u.fx - 573.5131851332832).abs() < 1e-9, "{u:?}");
        assert!((u.fy - 572.6262519260405).abs() < 1e-9, "{u:?}");
        assert_eq!((u.cx, u.cy, u.width, u.height), (319.5, 239.5, 640, 480));

        // Pinhole, eight values, extra keys and comments.
        let p = write(
            tmp.path(),
            "# camera\nwidth: 320 # px\nheight: 240\nname: cam0\ncalibration: [300, 301,\n  160, 120]\n",
        );
        let c = SlamCalibration::read(&p).unwrap();
        assert_eq!(
            c.intrinsics,
            PinholeCamera::new(300.0, 301.0, 160.0, 120.0, 320, 240)
        );
        let p = write(
            tmp.path(),
            "width: 320\nheight: 240\ncalibration: [300, 301, 160, 120, 0.1, 0.01, 0, 0]\n",
        );
        let c = SlamCalibration::read(&p).unwrap();
        assert_eq!(
            c.intrinsics.distortion.map(|d| d.to_array()),
            Some([0.1, 0.01, 0.0, 0.0, 0.0])
        );
    }

    #[test]
    fn malformed_files_are_named() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        let e = SlamCalibration::read(&d.join("nope.yaml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("nope.yaml"), "{e}");
        for (text, want) in [
            (
                "height: 480\ncalibration: [1, 2, 3, 4]\n",
                "missing key 'width'",
            ),
            (
                "width: 640\ncalibration: [1, 2, 3, 4]\n",
                "missing key 'height'",
            ),
            ("width: 640\nheight: 480\n", "missing key 'calibration'"),
            (
                "width: 640\nheight: 480\ncalibration: 500\n",
                "should be a list",
            ),
            (
                "width: 640\nheight: 480\ncalibration: [1, 2, 3]\n",
                "found 3",
            ),
            (
                "width: 640\nheight: 480\ncalibration: [1, 2, 3, 4, 5]\n",
                "found 5",
            ),
            (
                "width: 640\nheight: 480\ncalibration: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n",
                "found 10",
            ),
            (
                "width: 640\nheight: 480\ncalibration: [nan, 500, 320, 240]\n",
                "not a finite number",
            ),
            (
                "width: 640\nheight: 480\ncalibration: [500, inf, 320, 240]\n",
                "not a finite number",
            ),
            (
                "width: 640\nheight: 480\ncalibration: [500, x, 320, 240]\n",
                "not a number",
            ),
            (
                "width: 640\nheight: 480\ncalibration: [0, 500, 320, 240]\n",
                "focal lengths must be positive",
            ),
            (
                "width: 640\nheight: 480\ncalibration: [500, -1, 320, 240]\n",
                "focal lengths must be positive",
            ),
            (
                "width: 0\nheight: 480\ncalibration: [500, 500, 320, 240]\n",
                "must be positive",
            ),
            (
                "width: -640\nheight: 480\ncalibration: [500, 500, 320, 240]\n",
                "non-negative integer",
            ),
            (
                "width: 640.5\nheight: 480\ncalibration: [500, 500, 320, 240]\n",
                "non-negative integer",
            ),
        ] {
            let e = err(d, text);
            assert!(
                e.contains("intrinsics.yaml") && e.contains(want),
                "{text:?}: {e}"
            );
        }
    }

    #[test]
    fn frames_of_another_size_are_refused_by_name() {
        let tmp = tempfile::tempdir().unwrap();
        let p = write(
            tmp.path(),
            "width: 8\nheight: 6\ncalibration: [10, 10, 3.5, 2.5]\n",
        );
        let c = SlamCalibration::read(&p).unwrap();
        let frame = |w: u32, h: u32, name: &str| Frame {
            index: 0,
            timestamp: 0.0,
            rgb: image::RgbImage::from_pixel(w, h, image::Rgb([10, 20, 30])),
            depth: None,
            gt_pose: None,
            rgb_path: PathBuf::from(name),
        };
        let out = c.undistort(&frame(8, 6, "a.png")).unwrap();
        assert_eq!(out.dimensions(), (8, 6));
        assert!(out.pixels().all(|p| p.0 == [10, 20, 30]));
        let e = c.undistort(&frame(8, 7, "b.png")).unwrap_err().to_string();
        assert!(
            e.contains("b.png")
                && e.contains("8x7")
                && e.contains("intrinsics.yaml")
                && e.contains("8x6"),
            "{e}"
        );
    }
}
