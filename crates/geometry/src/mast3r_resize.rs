//! The image resize-and-crop rules of DUSt3R / MASt3R / MASt3R-SLAM, as geometry only.
//!
//! DUSt3R's `load_images` and MASt3R-SLAM's `mast3r_utils.resize_img` prepare every image the
//! same way (this module reproduces their integer arithmetic exactly, including Python's
//! round-half-to-even):
//!
//! * **size 224**: resize so the *short* side becomes 224 (the long-edge target is
//!   `round(224 * max(W/H, H/W))`), then centre-crop the largest square
//!   (`half = min(W//2, H//2)`).
//! * **any other size (512)**: resize so the *long* side becomes `size`, then centre-crop both
//!   sides to multiples of 16 (`halfw, halfh = ((2*cx)//16)*8, ((2*cy)//16)*8` with
//!   `cx, cy = W//2, H//2`). A square resized image is cropped to 4:3
//!   (`halfh = 3*halfw/4`) unless `square_ok` is set.
//!
//! The resize itself uses PIL `LANCZOS` when the long side shrinks and `BICUBIC` otherwise
//! (including no change, which PIL turns into a copy); see [`resample_filter`]. Only the
//! geometry is computed here; pixels are resampled elsewhere.
//!
//! ```
//! use rust3r_geometry::PinholeCamera;
//! use rust3r_geometry::mast3r_resize::{mast3r_resize_crop, transform_intrinsics};
//! let rc = mast3r_resize_crop(640, 480, 512);
//! assert_eq!(rc.resized, (512, 384));
//! assert_eq!(rc.output, (512, 384));
//! let k = PinholeCamera::new(585.0, 585.0, 320.0, 240.0, 640, 480);
//! let k = transform_intrinsics(&k, &rc);
//! assert!((k.fx - 468.0).abs() < 1e-12);
//! ```

use crate::PinholeCamera;

/// Where an image of a given size ends up after the DUSt3R / MASt3R preprocessing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ResizeCrop {
    /// `(width, height)` of the image after resizing, before cropping.
    pub resized: (u32, u32),
    /// Crop window `(x0, y0, x1, y1)` in the resized image (half-open: columns `x0..x1`,
    /// rows `y0..y1`), as passed to PIL's `Image.crop`.
    pub crop: (u32, u32, u32, u32),
    /// `(width, height)` of the final network input, `(x1 - x0, y1 - y0)`.
    pub output: (u32, u32),
}

/// The PIL resampling filter DUSt3R uses for the resize step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ResampleFilter {
    /// `PIL.Image.LANCZOS`: the long side shrinks.
    Lanczos,
    /// `PIL.Image.BICUBIC`: the long side grows or stays (same size: PIL returns a copy).
    Bicubic,
}

/// Python 3's `round()` for a float: nearest integer, ties to even.
fn py_round(x: f64) -> i64 {
    let r = x.round(); // ties away from zero
    if (x - x.trunc()).abs() == 0.5 {
        // Tie: pick the even neighbour.
        let f = x.floor();
        if (f as i64) % 2 == 0 {
            f as i64
        } else {
            f as i64 + 1
        }
    } else {
        r as i64
    }
}

/// DUSt3R `_resize_pil_image`: scale so that `max(w, h)` becomes `long_edge`,
/// each side `int(round(x * long_edge / S))`.
fn resize_long_edge(width: u32, height: u32, long_edge: u64) -> (u32, u32) {
    let s = width.max(height) as f64;
    // Python: x*long_edge_size is an exact int product, `/ S` a correctly rounded division.
    let side = |x: u32| py_round((x as u64 * long_edge) as f64 / s).max(0) as u32;
    (side(width), side(height))
}

/// The filter DUSt3R's `_resize_pil_image` picks for an image of `width` x `height` when
/// preparing it for `size` (224 or 512).
///
/// # Panics
/// If `width`, `height` or `size` is zero.
pub fn resample_filter(width: u32, height: u32, size: u32) -> ResampleFilter {
    let long_edge = target_long_edge(width, height, size);
    if u64::from(width.max(height)) > long_edge {
        ResampleFilter::Lanczos
    } else {
        ResampleFilter::Bicubic
    }
}

fn target_long_edge(width: u32, height: u32, size: u32) -> u64 {
    assert!(
        width > 0 && height > 0 && size > 0,
        "mast3r_resize: image size {width}x{height} and target size {size} must be non-zero"
    );
    if size == 224 {
        let (w, h) = (width as f64, height as f64);
        let ratio = (w / h).max(h / w);
        py_round(224.0 * ratio) as u64
    } else {
        u64::from(size)
    }
}

/// Resize and crop of a `width` x `height` image for MASt3R input `size` (224 or 512), with
/// `square_ok = false` (square images are cropped to 4:3 in the 512 mode), as MASt3R-SLAM and
/// DUSt3R's `load_images` do by default.
///
/// For aspect ratios beyond 32:1 the 512 mode yields an output with a zero side (DUSt3R would
/// produce an empty image too).
///
/// # Panics
/// If `width`, `height` or `size` is zero.
pub fn mast3r_resize_crop(width: u32, height: u32, size: u32) -> ResizeCrop {
    mast3r_resize_crop_with(width, height, size, false)
}

/// [`mast3r_resize_crop`] with DUSt3R's `square_ok` flag: when `true`, a square image stays
/// square in the 512 mode instead of being cropped to 4:3.
///
/// Any `size` other than 224 follows the long-side rule (as DUSt3R's `load_images` does).
///
/// # Panics
/// If `width`, `height` or `size` is zero.
pub fn mast3r_resize_crop_with(width: u32, height: u32, size: u32, square_ok: bool) -> ResizeCrop {
    let long_edge = target_long_edge(width, height, size);
    let (w, h) = resize_long_edge(width, height, long_edge);
    let (cx, cy) = (w / 2, h / 2);
    let (x0, y0, x1, y1) = if size == 224 {
        let half = cx.min(cy);
        (cx - half, cy - half, cx + half, cy + half)
    } else {
        let halfw = ((2 * cx) / 16) * 8;
        let mut halfh = ((2 * cy) / 16) * 8;
        if !square_ok && w == h {
            // Python computes `3 * halfw / 4` as a float; halfw is a multiple of 8 so the value
            // is an exact integer and PIL's rounding of the crop box changes nothing.
            halfh = 3 * halfw / 4;
        }
        (cx - halfw, cy - halfh, cx + halfw, cy + halfh)
    };
    ResizeCrop {
        resized: (w, h),
        crop: (x0, y0, x1, y1),
        output: (x1 - x0, y1 - y0),
    }
}

/// The camera `k` of an image (of `k`'s size) moved to the network input described by `rc`
/// (computed from that size): a camera of size `rc.output`.
///
/// Uses the pixel-centre convention that matches an image resize (pixel `i` covers
/// `[i, i+1)` and its centre is `i + 0.5`): with `s = resized / original` per axis,
/// `f' = f * s` and `c' = (c + 0.5) * s - 0.5 - crop_offset` ([`PinholeCamera::resized`], then
/// [`PinholeCamera::cropped`]).
///
/// MASt3R-SLAM itself uses a slightly different formula; see
/// [`transform_intrinsics_mast3r_slam`].
pub fn transform_intrinsics(k: &PinholeCamera, rc: &ResizeCrop) -> PinholeCamera {
    k.resized(rc.resized.0, rc.resized.1)
        .cropped(rc.crop.0, rc.crop.1, rc.output.0, rc.output.1)
}

/// The inverse of [`transform_intrinsics`]: the camera of the `original = (width, height)` image
/// whose network input (`rc`, computed from that size) has camera `k` (e.g. one fitted to the
/// network's pointmaps): with `s = original / resized` per axis, `f = f' * s` and
/// `c = (c' + crop_offset + 0.5) * s - 0.5`. The result has no distortion.
pub fn inverse_transform_intrinsics(
    k: &PinholeCamera,
    rc: &ResizeCrop,
    original: (u32, u32),
) -> PinholeCamera {
    let (sx, sy) = (
        original.0 as f64 / rc.resized.0 as f64,
        original.1 as f64 / rc.resized.1 as f64,
    );
    PinholeCamera::new(
        k.fx * sx,
        k.fy * sy,
        (k.cx + rc.crop.0 as f64 + 0.5) * sx - 0.5,
        (k.cy + rc.crop.1 as f64 + 0.5) * sy - 0.5,
        original.0,
        original.1,
    )
}

/// The intrinsics transform exactly as MASt3R-SLAM's `Intrinsics.__init__` computes `K_frame`
/// (for bit-level parity with its outputs), for the camera `k` of an image of `k`'s size:
/// `f' = f / (W1/W)`, `c' = c / (W1/W) - (W - w_out) / 2` (same for y), at size `rc.output`.
///
/// It differs from [`transform_intrinsics`] by `0.5 * (1 - s)` (no pixel-centre correction)
/// and, when a resized side is odd, by another half pixel, because `(W - w_out) / 2` is not the
/// actual crop offset `W//2 - halfw` then.
pub fn transform_intrinsics_mast3r_slam(k: &PinholeCamera, rc: &ResizeCrop) -> PinholeCamera {
    let scale_w = k.width as f64 / rc.resized.0 as f64;
    let scale_h = k.height as f64 / rc.resized.1 as f64;
    let half_crop_w = (rc.resized.0 as f64 - rc.output.0 as f64) / 2.0;
    let half_crop_h = (rc.resized.1 as f64 - rc.output.1 as f64) / 2.0;
    PinholeCamera {
        fx: k.fx / scale_w,
        fy: k.fy / scale_h,
        cx: k.cx / scale_w - half_crop_w,
        cy: k.cy / scale_h - half_crop_h,
        width: rc.output.0,
        height: rc.output.1,
        ..*k
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: PinholeCamera, b: (f64, f64, f64, f64)) -> bool {
        (a.fx - b.0).abs() < 1e-9
            && (a.fy - b.1).abs() < 1e-9
            && (a.cx - b.2).abs() < 1e-9
            && (a.cy - b.3).abs() < 1e-9
    }

    /// Both transforms equal their closed forms bit for bit (the tuple forms they replace).
    #[test]
    fn transforms_equal_their_closed_forms_exactly() {
        let (fx, fy, cx, cy) = (458.654, 457.296, 367.215, 248.375);
        for (w, h, size) in [
            (752, 480, 512),
            (640, 480, 224),
            (1080, 1920, 512),
            (739, 458, 512),
        ] {
            let rc = mast3r_resize_crop(w, h, size);
            let k = PinholeCamera::new(fx, fy, cx, cy, w, h);
            let (sx, sy) = (
                rc.resized.0 as f64 / w as f64,
                rc.resized.1 as f64 / h as f64,
            );
            let want = PinholeCamera::new(
                fx * sx,
                fy * sy,
                (cx + 0.5) * sx - 0.5 - rc.crop.0 as f64,
                (cy + 0.5) * sy - 0.5 - rc.crop.1 as f64,
                rc.output.0,
                rc.output.1,
            );
            assert_eq!(transform_intrinsics(&k, &rc), want);
            let (scale_w, scale_h) = (
                w as f64 / rc.resized.0 as f64,
                h as f64 / rc.resized.1 as f64,
            );
            let want = PinholeCamera::new(
                fx / scale_w,
                fy / scale_h,
                cx / scale_w - (rc.resized.0 as f64 - rc.output.0 as f64) / 2.0,
                cy / scale_h - (rc.resized.1 as f64 - rc.output.1 as f64) / 2.0,
                rc.output.0,
                rc.output.1,
            );
            assert_eq!(transform_intrinsics_mast3r_slam(&k, &rc), want);
            // The inverse gives the original camera back (to rounding).
            let back = inverse_transform_intrinsics(&transform_intrinsics(&k, &rc), &rc, (w, h));
            assert_eq!((back.width, back.height), (w, h));
            for (a, b) in [(back.fx, fx), (back.fy, fy), (back.cx, cx), (back.cy, cy)] {
                assert!((a - b).abs() < 1e-9, "{back:?}");
            }
        }
    }

    #[test]
    fn python_round_ties_to_even() {
        assert_eq!(py_round(0.5), 0);
        assert_eq!(py_round(1.5), 2);
        assert_eq!(py_round(2.5), 2);
        assert_eq!(py_round(3.5), 4);
        assert_eq!(py_round(2.4999), 2);
        assert_eq!(py_round(2.5001), 3);
        assert_eq!(py_round(287.0), 287);
    }

    #[test]
    fn vga_512() {
        // 640x480 -> long side 512: 512x384; cx, cy = 256, 192; halfw = (512//16)*8 = 256,
        // halfh = (384//16)*8 = 192: no crop.
        let rc = mast3r_resize_crop(640, 480, 512);
        assert_eq!(rc.resized, (512, 384));
        assert_eq!(rc.crop, (0, 0, 512, 384));
        assert_eq!(rc.output, (512, 384));
        assert_eq!(resample_filter(640, 480, 512), ResampleFilter::Lanczos);
        let k = transform_intrinsics(
            &PinholeCamera::new(585.0, 585.0, 320.0, 240.0, 640, 480),
            &rc,
        );
        // s = 0.8: f = 468, c = 320.5*0.8 - 0.5 = 255.9, 240.5*0.8 - 0.5 = 191.9
        assert!(close(k, (468.0, 468.0, 255.9, 191.9)), "{k:?}");
        let k = transform_intrinsics_mast3r_slam(
            &PinholeCamera::new(585.0, 585.0, 320.0, 240.0, 640, 480),
            &rc,
        );
        assert!(close(k, (468.0, 468.0, 256.0, 192.0)), "{k:?}");
    }

    #[test]
    fn full_hd_512() {
        // 1920x1080: 1080*512/1920 = 288 exactly. cy = 144, halfh = (288//16)*8 = 144.
        let rc = mast3r_resize_crop(1920, 1080, 512);
        assert_eq!(rc.resized, (512, 288));
        assert_eq!(rc.crop, (0, 0, 512, 288));
        assert_eq!(rc.output, (512, 288));
        let k = transform_intrinsics(
            &PinholeCamera::new(1500.0, 1500.0, 959.5, 539.5, 1920, 1080),
            &rc,
        );
        let s = 512.0 / 1920.0;
        assert!(close(k, (1500.0 * s, 1500.0 * s, 255.5, 143.5)), "{k:?}");
    }

    #[test]
    fn portrait_512() {
        // 1080x1920 -> 288x512; cx = 144 -> halfw = 144, cy = 256 -> halfh = 256.
        let rc = mast3r_resize_crop(1080, 1920, 512);
        assert_eq!(rc.resized, (288, 512));
        assert_eq!(rc.crop, (0, 0, 288, 512));
        assert_eq!(rc.output, (288, 512));
        // 1080x1440 (3:4) -> 384x512, no crop either.
        assert_eq!(mast3r_resize_crop(1080, 1440, 512).output, (384, 512));
    }

    #[test]
    fn odd_sizes_512() {
        // EuRoC 752x480: 480*512/752 = 326.81 -> 327; cy = 163, halfh = (326//16)*8 = 160;
        // crop rows 3..323.
        let rc = mast3r_resize_crop(752, 480, 512);
        assert_eq!(rc.resized, (512, 327));
        assert_eq!(rc.crop, (0, 3, 512, 323));
        assert_eq!(rc.output, (512, 320));
        // cy: (239.5 + 0.5) * 327/480 - 0.5 - 3
        let k = transform_intrinsics(
            &PinholeCamera::new(458.654, 457.296, 367.215, 248.375, 752, 480),
            &rc,
        );
        let sx = 512.0 / 752.0;
        let sy = 327.0 / 480.0;
        assert!(close(
            k,
            (
                458.654 * sx,
                457.296 * sy,
                367.715 * sx - 0.5,
                248.875 * sy - 3.5
            )
        ));
        // MASt3R-SLAM: half_crop_h = (327 - 320) / 2 = 3.5.
        let k = transform_intrinsics_mast3r_slam(
            &PinholeCamera::new(458.654, 457.296, 367.215, 248.375, 752, 480),
            &rc,
        );
        assert!((k.cy - (248.375 / (480.0 / 327.0) - 3.5)).abs() < 1e-9);
        // ETH3D 739x458: 458*512/739 = 317.32 -> 317; 739 -> 512. cy = 158,
        // halfh = (316//16)*8 = 152: rows 6..310.
        let rc = mast3r_resize_crop(739, 458, 512);
        assert_eq!(rc.resized, (512, 317));
        assert_eq!(rc.crop, (0, 6, 512, 310));
        assert_eq!(rc.output, (512, 304));
        // A tie: 1000x750 -> 750*512/1000 = 384 exactly; 1024x600 -> 300 exactly;
        // 1024x601 -> 300.5 -> 300 (ties to even), cy = 150, halfh = 144: rows 6..294.
        let rc = mast3r_resize_crop(1024, 601, 512);
        assert_eq!(rc.resized, (512, 300));
        assert_eq!(rc.crop, (0, 6, 512, 294));
        // 1024x603 -> 301.5 -> 302 (ties to even).
        assert_eq!(mast3r_resize_crop(1024, 603, 512).resized, (512, 302));
    }

    #[test]
    fn square_512() {
        // 512x512: halfw = 256, halfh = 3*256/4 = 192 -> rows 64..448, 512x384.
        let rc = mast3r_resize_crop(512, 512, 512);
        assert_eq!(rc.resized, (512, 512));
        assert_eq!(rc.crop, (0, 64, 512, 448));
        assert_eq!(rc.output, (512, 384));
        assert_eq!(resample_filter(512, 512, 512), ResampleFilter::Bicubic);
        // Upscaled square (800x800 NeRF-synthetic is downscaled; 300x300 is upscaled).
        assert_eq!(mast3r_resize_crop(300, 300, 512), rc);
        assert_eq!(resample_filter(300, 300, 512), ResampleFilter::Bicubic);
        assert_eq!(mast3r_resize_crop(800, 800, 512), rc);
        assert_eq!(resample_filter(800, 800, 512), ResampleFilter::Lanczos);
        // square_ok keeps it square.
        let rc = mast3r_resize_crop_with(512, 512, 512, true);
        assert_eq!(rc.crop, (0, 0, 512, 512));
        let k = transform_intrinsics(
            &PinholeCamera::new(400.0, 400.0, 255.5, 255.5, 512, 512),
            &mast3r_resize_crop(512, 512, 512),
        );
        assert!(close(k, (400.0, 400.0, 255.5, 191.5)), "{k:?}");
    }

    #[test]
    fn mode_224() {
        // 640x480: long edge round(224 * 4/3) = round(298.67) = 299; 480*299/640 = 224.25 -> 224.
        // cx, cy = 149, 112; half = 112: columns 37..261.
        let rc = mast3r_resize_crop(640, 480, 224);
        assert_eq!(rc.resized, (299, 224));
        assert_eq!(rc.crop, (37, 0, 261, 224));
        assert_eq!(rc.output, (224, 224));
        let k = transform_intrinsics(
            &PinholeCamera::new(585.0, 585.0, 320.0, 240.0, 640, 480),
            &rc,
        );
        let sx = 299.0 / 640.0;
        let sy = 224.0 / 480.0;
        assert!(close(
            k,
            (
                585.0 * sx,
                585.0 * sy,
                320.5 * sx - 0.5 - 37.0,
                240.5 * sy - 0.5
            )
        ));
        // Portrait 1080x1920: long edge round(224 * 16/9) = round(398.22) = 398;
        // 1080*398/1920 = 223.875 -> 224; cx, cy = 112, 199; rows 87..311.
        let rc = mast3r_resize_crop(1080, 1920, 224);
        assert_eq!(rc.resized, (224, 398));
        assert_eq!(rc.crop, (0, 87, 224, 311));
        assert_eq!(rc.output, (224, 224));
        // Square: 224x224 stays, no 4:3 rule in this mode.
        let rc = mast3r_resize_crop(500, 500, 224);
        assert_eq!(rc.resized, (224, 224));
        assert_eq!(rc.crop, (0, 0, 224, 224));
        assert_eq!(resample_filter(500, 500, 224), ResampleFilter::Lanczos);
        assert_eq!(resample_filter(200, 150, 224), ResampleFilter::Bicubic);
    }
    /// Random sizes against values printed by the DUSt3R / MASt3R-SLAM `resize_img` arithmetic
    /// (the Python code with PIL's crop-box rounding, run outside this repository).
    #[test]
    #[allow(clippy::type_complexity)]
    fn random_sizes_match_python() {
        let cases: [(u32, u32, u32, (u32, u32), (u32, u32, u32, u32)); 60] = [
            (1969, 4874, 512, (207, 512), (7, 0, 199, 512)),
            (4967, 3903, 224, (285, 224), (30, 0, 254, 224)),
            (4981, 127, 512, (512, 13), (0, 6, 512, 6)),
            (2144, 4532, 512, (242, 512), (1, 0, 241, 512)),
            (4451, 4522, 224, (224, 228), (0, 2, 224, 226)),
            (1919, 1262, 512, (512, 337), (0, 0, 512, 336)),
            (144, 144, 224, (224, 224), (0, 0, 224, 224)),
            (2487, 274, 512, (512, 56), (0, 4, 512, 52)),
            (3892, 4892, 512, (407, 512), (3, 0, 403, 512)),
            (3517, 3255, 512, (512, 474), (0, 5, 512, 469)),
            (1118, 1118, 224, (224, 224), (0, 0, 224, 224)),
            (4074, 1797, 512, (512, 226), (0, 1, 512, 225)),
            (2486, 3470, 512, (367, 512), (7, 0, 359, 512)),
            (4722, 2894, 512, (512, 314), (0, 5, 512, 309)),
            (4806, 1923, 224, (560, 224), (168, 0, 392, 224)),
            (2311, 4982, 224, (224, 483), (0, 129, 224, 353)),
            (2693, 4458, 224, (224, 371), (0, 73, 224, 297)),
            (1749, 4718, 224, (224, 604), (0, 190, 224, 414)),
            (539, 3968, 512, (70, 512), (3, 0, 67, 512)),
            (745, 2838, 512, (134, 512), (3, 0, 131, 512)),
            (1255, 184, 512, (512, 75), (0, 5, 512, 69)),
            (994, 382, 224, (583, 224), (179, 0, 403, 224)),
            (3114, 4823, 512, (331, 512), (5, 0, 325, 512)),
            (4160, 1952, 512, (512, 240), (0, 0, 512, 240)),
            (79, 79, 224, (224, 224), (0, 0, 224, 224)),
            (1636, 3361, 512, (249, 512), (4, 0, 244, 512)),
            (1299, 367, 512, (512, 145), (0, 0, 512, 144)),
            (2590, 2970, 512, (446, 512), (7, 0, 439, 512)),
            (3106, 3791, 512, (419, 512), (1, 0, 417, 512)),
            (4899, 4899, 512, (512, 512), (0, 64, 512, 448)),
            (3552, 1966, 512, (512, 283), (0, 5, 512, 277)),
            (2135, 4289, 512, (255, 512), (7, 0, 247, 512)),
            (113, 3421, 512, (17, 512), (0, 0, 16, 512)),
            (184, 3104, 224, (224, 3779), (0, 1777, 224, 2001)),
            (512, 2743, 512, (96, 512), (0, 0, 96, 512)),
            (2304, 2304, 224, (224, 224), (0, 0, 224, 224)),
            (194, 3044, 512, (33, 512), (0, 0, 32, 512)),
            (2466, 4875, 224, (224, 443), (0, 109, 224, 333)),
            (3001, 1537, 512, (512, 262), (0, 3, 512, 259)),
            (4899, 2183, 512, (512, 228), (0, 2, 512, 226)),
            (879, 240, 224, (820, 224), (298, 0, 522, 224)),
            (2559, 4116, 512, (318, 512), (7, 0, 311, 512)),
            (1975, 1975, 512, (512, 512), (0, 64, 512, 448)),
            (814, 854, 512, (488, 512), (4, 0, 484, 512)),
            (1858, 3611, 224, (224, 435), (0, 105, 224, 329)),
            (674, 2778, 224, (224, 923), (0, 349, 224, 573)),
            (4676, 3715, 224, (282, 224), (29, 0, 253, 224)),
            (297, 4358, 512, (35, 512), (1, 0, 33, 512)),
            (4729, 1523, 512, (512, 165), (0, 2, 512, 162)),
            (720, 2848, 512, (129, 512), (0, 0, 128, 512)),
            (2411, 4266, 512, (289, 512), (0, 0, 288, 512)),
            (3826, 2857, 512, (512, 382), (0, 7, 512, 375)),
            (3458, 4675, 512, (379, 512), (5, 0, 373, 512)),
            (1297, 1297, 512, (512, 512), (0, 64, 512, 448)),
            (4598, 4598, 512, (512, 512), (0, 64, 512, 448)),
            (4271, 2387, 224, (401, 224), (88, 0, 312, 224)),
            (577, 4842, 224, (224, 1880), (0, 828, 224, 1052)),
            (2023, 2023, 224, (224, 224), (0, 0, 224, 224)),
            (3541, 3541, 512, (512, 512), (0, 64, 512, 448)),
            (1009, 1427, 224, (224, 317), (0, 46, 224, 270)),
        ];
        for (w, h, size, resized, crop) in cases {
            let rc = mast3r_resize_crop(w, h, size);
            assert_eq!(
                (rc.resized, rc.crop),
                (resized, crop),
                "{w}x{h} size {size}"
            );
            assert_eq!(rc.output, (crop.2 - crop.0, crop.3 - crop.1));
            if size == 512 {
                assert_eq!(rc.output.0 % 16, 0);
                assert_eq!(rc.output.1 % 16, 0);
            }
        }
    }
}
