//! Registration of a colour image to a depth camera.
//!
//! Sensors such as the Kinect v1 of 7-Scenes record colour and depth with two cameras: a depth
//! pixel and the colour pixel with the same coordinates do not see the same point (in 7-Scenes
//! they are up to ~30 pixels apart at the image border). [`register_colour_to_depth`] resamples
//! the colour image into the depth camera, so that colour and depth are one pinhole image pair,
//! as TUM RGB-D delivers them.

use rust3r_geometry::PinholeCamera;

use super::DepthImage;

/// Where a colour camera sits relative to a depth camera.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ColourRegistration {
    /// Calibration of the colour camera (pinhole; distortion is ignored).
    pub colour: PinholeCamera,
    /// Position of the depth camera's origin in the colour camera's frame, in metres (the
    /// cameras are taken to share their orientation): a point `X` in the depth camera is
    /// `X + baseline` in the colour camera.
    pub baseline: [f64; 3],
}

impl ColourRegistration {
    /// The Kinect v1 of Microsoft 7-Scenes, against the published depth calibration (`fx = fy =
    /// 585`, centre `(320, 240)`). The data set publishes no colour calibration; these values were
    /// fitted by aligning colour edges with depth edges on redkitchen frames 0-299
    /// (`tools/fit_colour_registration.py`), and raise the edge agreement on the held-out frames
    /// 300-499 from 0.163 (colour used as if registered) to 0.232.
    pub fn seven_scenes() -> Self {
        Self {
            colour: PinholeCamera::new(526.8, 529.9, 315.26, 239.24, 640, 480),
            baseline: [-0.0122, 0.0, 0.0],
        }
    }
}

/// Resamples `rgb` (seen by `registration.colour`) into the camera of `depth` (`depth_k`):
/// each depth pixel with a measurement takes the colour of the point it measured, bilinearly
/// interpolated; a pixel without a measurement assumes the median depth of the image. The
/// result has the depth image's size; pixels that fall outside the colour image are black.
pub fn register_colour_to_depth(
    rgb: &image::RgbImage,
    depth: &DepthImage,
    depth_k: &PinholeCamera,
    registration: &ColourRegistration,
) -> image::RgbImage {
    let (w, h) = depth.dimensions();
    let mut valid: Vec<f32> = depth
        .as_raw()
        .iter()
        .copied()
        .filter(|z| *z > 0.0 && z.is_finite())
        .collect();
    let fallback = if valid.is_empty() {
        2.0
    } else {
        let mid = valid.len() / 2;
        *valid.select_nth_unstable_by(mid, f32::total_cmp).1 as f64
    };
    let ck = &registration.colour;
    let [bx, by, bz] = registration.baseline;
    let (cw, ch) = (rgb.width() as f64, rgb.height() as f64);
    let mut out = image::RgbImage::new(w, h);
    for (x, y, px) in out.enumerate_pixels_mut() {
        let z = depth.get_pixel(x, y).0[0] as f64;
        let z = if z > 0.0 && z.is_finite() {
            z
        } else {
            fallback
        };
        let xd = (x as f64 - depth_k.cx) / depth_k.fx * z;
        let yd = (y as f64 - depth_k.cy) / depth_k.fy * z;
        let (xc, yc, zc) = (xd + bx, yd + by, z + bz);
        if zc <= 0.0 {
            continue;
        }
        let u = ck.fx * xc / zc + ck.cx;
        let v = ck.fy * yc / zc + ck.cy;
        if u < 0.0 || v < 0.0 || u > cw - 1.0 || v > ch - 1.0 {
            continue;
        }
        *px = bilinear(rgb, u, v);
    }
    out
}

fn bilinear(img: &image::RgbImage, u: f64, v: f64) -> image::Rgb<u8> {
    let (x0, y0) = (u.floor() as u32, v.floor() as u32);
    let x1 = (x0 + 1).min(img.width() - 1);
    let y1 = (y0 + 1).min(img.height() - 1);
    let (fx, fy) = (u - x0 as f64, v - y0 as f64);
    let p = |x, y| img.get_pixel(x, y).0;
    let (a, b, c, d) = (p(x0, y0), p(x1, y0), p(x0, y1), p(x1, y1));
    let mut out = [0u8; 3];
    for (ch, o) in out.iter_mut().enumerate() {
        let top = a[ch] as f64 * (1.0 - fx) + b[ch] as f64 * fx;
        let bottom = c[ch] as f64 * (1.0 - fx) + d[ch] as f64 * fx;
        *o = (top * (1.0 - fy) + bottom * fy).round().clamp(0.0, 255.0) as u8;
    }
    image::Rgb(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A textured plane 2 m away seen by both cameras: the colour image is synthesised through the
    /// colour camera (independently of the registration code, by ray casting each colour pixel
    /// onto the plane); registering it must give the texture at each depth pixel's point.
    #[test]
    fn registration_recovers_the_texture_of_a_tilted_plane() {
        let depth_k = PinholeCamera::new(585.0, 585.0, 320.0, 240.0, 64, 48);
        let reg = ColourRegistration {
            colour: PinholeCamera::new(52.7, 53.0, 31.5, 23.9, 64, 48),
            baseline: [-0.025, 0.01, 0.0],
        };
        let depth_k = PinholeCamera {
            fx: 58.5,
            fy: 58.5,
            cx: 32.0,
            cy: 24.0,
            ..depth_k
        };
        // Plane z = 2 + 0.3 x (depth-camera frame); texture t(x, y) = smooth pattern.
        let texture = |x: f64, y: f64| (127.5 + 100.0 * (x * 9.0).sin() * (y * 7.0).cos()).round();
        let plane_z = |xd: f64| 2.0 + 0.3 * xd;
        let mut rgb = image::RgbImage::new(64, 48);
        for (u, v, px) in rgb.enumerate_pixels_mut() {
            // Ray of the colour camera: X_c = s * r; depth frame X_d = X_c - baseline.
            let r = [(u as f64 - 31.5) / 52.7, (v as f64 - 23.9) / 53.0, 1.0];
            // Solve s r_z = 2 + 0.3 (s r_x + 0.025).
            let s = (2.0 + 0.3 * 0.025) / (r[2] - 0.3 * r[0]);
            let (xd, yd) = (s * r[0] + 0.025, s * r[1] - 0.01);
            let t = texture(xd, yd) as u8;
            *px = image::Rgb([t, 255 - t, 7]);
        }
        let mut depth = DepthImage::new(64, 48);
        for (x, _y, px) in depth.enumerate_pixels_mut() {
            // z = 2 + 0.3 * (x - cx) / fx * z  =>  z = 2 / (1 - 0.3 (x - cx) / fx)
            let z = 2.0 / (1.0 - 0.3 * (x as f64 - 32.0) / 58.5);
            px.0[0] = z as f32;
        }
        let out = register_colour_to_depth(&rgb, &depth, &depth_k, &reg);
        let (mut err, mut n, mut err_raw) = (0.0, 0, 0.0);
        for y in 4..44 {
            for x in 4..60 {
                let z = depth.get_pixel(x, y).0[0] as f64;
                let (xd, yd) = ((x as f64 - 32.0) / 58.5 * z, (y as f64 - 24.0) / 58.5 * z);
                assert!((plane_z(xd) - z).abs() < 1e-4);
                let want = texture(xd, yd);
                err += (out.get_pixel(x, y).0[0] as f64 - want).abs();
                err_raw += (rgb.get_pixel(x, y).0[0] as f64 - want).abs();
                assert_eq!(out.get_pixel(x, y).0[2], 7);
                n += 1;
            }
        }
        let (err, err_raw) = (err / n as f64, err_raw / n as f64);
        // Bilinear interpolation of a smooth texture: a few grey levels; the unregistered image
        // is far off.
        assert!(err < 6.0, "mean error {err}");
        assert!(
            err_raw > 4.0 * err,
            "unregistered error {err_raw} vs registered {err}"
        );
    }

    #[test]
    fn pixels_without_depth_use_the_median_depth_and_outside_is_black() {
        let k = PinholeCamera::new(50.0, 50.0, 16.0, 16.0, 32, 32);
        let reg = ColourRegistration {
            colour: PinholeCamera::new(25.0, 25.0, 16.0, 16.0, 32, 32),
            baseline: [0.0; 3],
        };
        let rgb = image::RgbImage::from_fn(32, 32, |x, _| image::Rgb([x as u8 * 8, 0, 0]));
        let depth = DepthImage::new(32, 32); // no measurement anywhere
        let out = register_colour_to_depth(&rgb, &depth, &k, &reg);
        // Half the focal length: depth pixel x maps to colour 16 + (x - 16) / 2.
        for x in 0..32u32 {
            let want = ((16.0 + (x as f64 - 16.0) / 2.0) * 8.0).round();
            assert!(
                (out.get_pixel(x, 5).0[0] as f64 - want).abs() <= 1.0,
                "x {x}"
            );
        }
        let reg = ColourRegistration {
            baseline: [1.0, 0.0, 0.0],
            ..reg
        };
        let out = register_colour_to_depth(&rgb, &depth, &k, &reg);
        // Fallback depth 2 m: shift of 25 * 1 / 2 = 12.5 px; the right half falls outside.
        assert_eq!(out.get_pixel(31, 5).0, [0, 0, 0]);
    }
}
