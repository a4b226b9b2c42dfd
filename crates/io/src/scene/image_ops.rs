//! Image decoding and the pixel operations of [`Scene::load_image`](super::Scene::load_image):
//! alpha compositing, area downscaling and bilinear undistortion remapping, on interleaved
//! 8-bit images of any channel count (RGB, and single-channel alpha and masks).

use image::DynamicImage;
use rust3r_geometry::UndistortMap;

pub(crate) use crate::image_file::decode;

/// Converts to interleaved RGB8; images with alpha are composited over `background`
/// (`floor(255 (c a + bg (1 - a)) + 0.5)`, clipped).
#[cfg(test)]
pub(crate) fn to_rgb8(image: DynamicImage, background: [f32; 3]) -> Vec<u8> {
    split_alpha(image, background).0
}

/// Converts to interleaved RGB8 composited over `background` (`floor(255 (c a + bg (1 - a)) + 0.5)`, clipped) and returns the
/// alpha channel (8 bit, one byte per pixel) when the image has one that is not fully opaque
/// (an all-255 alpha channel, common in PNG exports, carries nothing and is dropped).
pub(crate) fn split_alpha(image: DynamicImage, background: [f32; 3]) -> (Vec<u8>, Option<Vec<u8>>) {
    if !image.color().has_alpha() {
        return (image.into_rgb8().into_raw(), None);
    }
    let rgba = image.into_rgba8();
    let n = rgba.len() / 4;
    let mut out = Vec::with_capacity(n * 3);
    let mut alpha = Vec::with_capacity(n);
    for px in rgba.as_raw().chunks_exact(4) {
        let a = px[3] as f32 / 255.0;
        for c in 0..3 {
            let v = px[c] as f32 / 255.0 * a + background[c] * (1.0 - a);
            out.push(to_u8(v * 255.0));
        }
        alpha.push(px[3]);
    }
    let opaque = alpha.iter().all(|&a| a == 255);
    (out, (!opaque).then_some(alpha))
}

/// A mask image as one byte per pixel, binarised: 255 (keep) where its grey value (luma of
/// a colour mask, multiplied by the mask's own alpha channel when it has one, i.e. composited
/// over black) is at least 128, else 0 (ignore). The threshold keeps JPEG-compressed masks
/// binary.
pub(crate) fn mask_to_u8(image: DynamicImage) -> Vec<u8> {
    if image.color().has_alpha() {
        image
            .into_luma_alpha8()
            .as_raw()
            .chunks_exact(2)
            .map(|p| {
                if p[0] as u32 * p[1] as u32 >= 128 * 255 {
                    255
                } else {
                    0
                }
            })
            .collect()
    } else {
        image
            .into_luma8()
            .into_raw()
            .into_iter()
            .map(|v| if v >= 128 { 255 } else { 0 })
            .collect()
    }
}

/// Rounds a value in `0..255` scale to `u8`: `floor(v + 0.5)`, clipped.
fn to_u8(v: f32) -> u8 {
    (v + 0.5).floor().clamp(0.0, 255.0) as u8
}

/// For each output sample of an axis of `n_in` samples resampled to `n_out`: the first input
/// index and the weights of the input samples it averages (their overlap with the output
/// sample's footprint, normalised).
fn area_weights(n_in: u32, n_out: u32) -> Vec<(usize, Vec<f32>)> {
    let scale = n_in as f64 / n_out as f64;
    (0..n_out)
        .map(|j| {
            let lo = j as f64 * scale;
            let hi = ((j + 1) as f64 * scale).min(n_in as f64);
            let first = (lo.floor() as usize).min(n_in as usize - 1);
            let last = ((hi.ceil() as usize).max(first + 1)).min(n_in as usize);
            let mut weights: Vec<f32> = (first..last)
                .map(|i| {
                    let a = (i as f64).max(lo);
                    let b = ((i + 1) as f64).min(hi);
                    (b - a).max(0.0) as f32
                })
                .collect();
            let total: f32 = weights.iter().sum();
            if total > 0.0 {
                weights.iter_mut().for_each(|w| *w /= total);
            } else {
                weights = vec![1.0];
            }
            (first, weights)
        })
        .collect()
}

/// Resizes an RGB8 image with an exact area (box) filter ([`area_resize_channels`]).
#[cfg(test)]
pub(crate) fn area_resize(src: &[u8], w: u32, h: u32, tw: u32, th: u32) -> Vec<u8> {
    area_resize_channels(src, 3, w, h, tw, th)
}

/// Resizes an interleaved 8-bit image of `ch` channels with an exact area (box) filter: every
/// output pixel is the average of the input area it covers (OpenCV `INTER_AREA` for
/// downscaling).
pub(crate) fn area_resize_channels(
    src: &[u8],
    ch: usize,
    w: u32,
    h: u32,
    tw: u32,
    th: u32,
) -> Vec<u8> {
    if (w, h) == (tw, th) {
        return src.to_vec();
    }
    let xs = area_weights(w, tw);
    let ys = area_weights(h, th);
    let (w, tw) = (w as usize, tw as usize);
    // Horizontal pass into f32 rows.
    let mut rows = vec![0.0f32; h as usize * tw * ch];
    for y in 0..h as usize {
        let src_row = &src[y * w * ch..(y + 1) * w * ch];
        let dst_row = &mut rows[y * tw * ch..(y + 1) * tw * ch];
        for (x, (first, weights)) in xs.iter().enumerate() {
            let acc = &mut dst_row[x * ch..x * ch + ch];
            for (k, wt) in weights.iter().enumerate() {
                let p = &src_row[(first + k) * ch..(first + k) * ch + ch];
                for c in 0..ch {
                    acc[c] += p[c] as f32 * wt;
                }
            }
        }
    }
    // Vertical pass.
    let mut out = vec![0u8; th as usize * tw * ch];
    let mut acc = vec![0.0f32; tw * ch];
    for (y, (first, weights)) in ys.iter().enumerate() {
        acc.iter_mut().for_each(|v| *v = 0.0);
        for (k, wt) in weights.iter().enumerate() {
            let row = &rows[(first + k) * tw * ch..(first + k + 1) * tw * ch];
            for (a, r) in acc.iter_mut().zip(row) {
                *a += r * wt;
            }
        }
        for (o, a) in out[y * tw * ch..(y + 1) * tw * ch].iter_mut().zip(&acc) {
            *o = to_u8(*a);
        }
    }
    out
}

/// Bilinear remap of an interleaved 8-bit image of `ch` channels through an undistortion map
/// (`map` gives, for each output pixel, its source coordinates). Coordinates outside the source
/// are clamped to its border.
pub(crate) fn remap_bilinear_channels(
    src: &[u8],
    ch: usize,
    w: u32,
    h: u32,
    map: &UndistortMap,
) -> Vec<u8> {
    let (sw, sh) = (w as usize, h as usize);
    let mut out = Vec::with_capacity(map.map_x.len() * ch);
    let max_x = (sw - 1) as f32;
    let max_y = (sh - 1) as f32;
    for (&mx, &my) in map.map_x.iter().zip(&map.map_y) {
        // NaN clamps to 0 via `max` semantics below.
        let x = if mx.is_finite() {
            mx.clamp(0.0, max_x)
        } else {
            0.0
        };
        let y = if my.is_finite() {
            my.clamp(0.0, max_y)
        } else {
            0.0
        };
        let x0 = (x.floor() as usize).min(sw - 1);
        let y0 = (y.floor() as usize).min(sh - 1);
        let x1 = (x0 + 1).min(sw - 1);
        let y1 = (y0 + 1).min(sh - 1);
        let ax = x - x0 as f32;
        let ay = y - y0 as f32;
        let p = |xx: usize, yy: usize, c: usize| src[(yy * sw + xx) * ch + c] as f32;
        for c in 0..ch {
            let top = p(x0, y0, c) * (1.0 - ax) + p(x1, y0, c) * ax;
            let bottom = p(x0, y1, c) * (1.0 - ax) + p(x1, y1, c) * ax;
            out.push(to_u8(top * (1.0 - ay) + bottom * ay));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn area_resize_averages_blocks() {
        // 4x2 -> 2x1: each output pixel is the mean of a 2x2 block.
        let src: Vec<u8> = (0..8u8).flat_map(|i| [i * 10, 100, 255 - i]).collect();
        let out = area_resize(&src, 4, 2, 2, 1);
        // block 0: pixels 0,1,4,5 -> r = (0+10+40+50)/4 = 25
        assert_eq!(out[0], 25);
        assert_eq!(out[1], 100);
        assert_eq!(
            out[3],
            ((20 + 30 + 60 + 70) as f32 / 4.0 + 0.5).floor() as u8
        );
    }

    #[test]
    fn area_resize_non_divisible_preserves_constant() {
        let src = vec![77u8; 7 * 5 * 3];
        let out = area_resize(&src, 7, 5, 3, 2);
        assert!(out.iter().all(|&v| v == 77));
        assert_eq!(out.len(), 3 * 2 * 3);
    }

    #[test]
    fn area_weights_cover_input_once() {
        for (n_in, n_out) in [(10, 3), (1001, 501), (7, 7), (5, 1), (1, 1)] {
            let ws = area_weights(n_in, n_out);
            let mut cover = vec![0.0f64; n_in as usize];
            let scale = n_in as f64 / n_out as f64;
            for (first, w) in &ws {
                for (k, v) in w.iter().enumerate() {
                    cover[first + k] += *v as f64 * scale;
                }
            }
            for c in cover {
                assert!((c - 1.0).abs() < 1e-4, "{n_in}->{n_out}: {c}");
            }
        }
    }

    #[test]
    fn compositing_rounds_like_the_reference() {
        let img = image::RgbaImage::from_raw(2, 1, vec![255, 0, 0, 128, 10, 20, 30, 0]).unwrap();
        let out = to_rgb8(DynamicImage::ImageRgba8(img), [0.0, 1.0, 0.5]);
        let a = 128.0f32 / 255.0;
        assert_eq!(out[0], (255.0 * a + 0.5).floor() as u8);
        assert_eq!(out[1], ((1.0 - a) * 255.0 + 0.5).floor() as u8);
        assert_eq!(&out[3..6], &[0, 255, 128]);
    }
}
