//! MASt3R-SLAM's image preprocessing (`resize_img`, SPEC §9), bit-exact with Pillow: resize the
//! long side to 512 (or the short side to 224), crop, normalise to `[-1, 1]`.
//!
//! Resampling reproduces Pillow's 8-bit `Image.resize` (`ImagingResample`): separable, horizontal
//! pass first into an 8-bit intermediate, filter weights normalised in double precision and
//! quantised to 22 fractional bits, integer accumulation with rounding. LANCZOS (a = 3) is used when
//! shrinking and BICUBIC (a = -0.5) when enlarging, as upstream `_resize_pil_image` does.
//! The `image` crate's resizers are not used: their float arithmetic differs from Pillow's by up to
//! a few grey levels.

/// Pillow resampling filters used by MASt3R's preprocessing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Filter {
    /// `Image.LANCZOS`: `sinc(x) sinc(x / 3)` on `[-3, 3)`.
    Lanczos,
    /// `Image.BICUBIC`: Keys cubic with `a = -0.5` on `(-2, 2)`.
    Bicubic,
}

impl Filter {
    fn support(self) -> f64 {
        match self {
            Filter::Lanczos => 3.0,
            Filter::Bicubic => 2.0,
        }
    }

    fn eval(self, x: f64) -> f64 {
        match self {
            Filter::Lanczos => {
                if (-3.0..3.0).contains(&x) {
                    sinc(x) * sinc(x / 3.0)
                } else {
                    0.0
                }
            }
            Filter::Bicubic => {
                const A: f64 = -0.5;
                let x = x.abs();
                if x < 1.0 {
                    ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0
                } else if x < 2.0 {
                    (((x - 5.0) * x + 8.0) * x - 4.0) * A
                } else {
                    0.0
                }
            }
        }
    }
}

fn sinc(x: f64) -> f64 {
    if x == 0.0 {
        1.0
    } else {
        let x = x * std::f64::consts::PI;
        x.sin() / x
    }
}

const PRECISION_BITS: u32 = 32 - 8 - 2;

/// Per output sample: first input index and the quantised weights.
struct Coeffs {
    bounds: Vec<(usize, usize)>,
    weights: Vec<i32>,
    ksize: usize,
}

/// Pillow's `precompute_coeffs` + `normalize_coeffs_8bpc` for `in_size -> out_size`.
fn coeffs(in_size: usize, out_size: usize, filter: Filter) -> Coeffs {
    let scale = in_size as f64 / out_size as f64;
    let filterscale = scale.max(1.0);
    let support = filter.support() * filterscale;
    let ksize = support.ceil() as usize * 2 + 1;
    let mut bounds = Vec::with_capacity(out_size);
    let mut weights = vec![0i32; out_size * ksize];
    let mut k = vec![0.0f64; ksize];
    for xx in 0..out_size {
        let center = (xx as f64 + 0.5) * scale;
        let ss = 1.0 / filterscale;
        // C casts truncate toward zero.
        let xmin = ((center - support + 0.5) as i64).max(0) as usize;
        let xmax = ((center + support + 0.5) as i64).min(in_size as i64) as usize;
        let n = xmax.saturating_sub(xmin);
        let mut ww = 0.0;
        for (x, kx) in k.iter_mut().enumerate().take(n) {
            let w = filter.eval((x as f64 + xmin as f64 - center + 0.5) * ss);
            *kx = w;
            ww += w;
        }
        for x in 0..n {
            if ww != 0.0 {
                k[x] /= ww;
            }
            let v = k[x] * (1u32 << PRECISION_BITS) as f64;
            weights[xx * ksize + x] = if k[x] < 0.0 {
                (v - 0.5) as i32
            } else {
                (v + 0.5) as i32
            };
        }
        bounds.push((xmin, n));
    }
    Coeffs {
        bounds,
        weights,
        ksize,
    }
}

fn clip8(acc: i64) -> u8 {
    (acc >> PRECISION_BITS).clamp(0, 255) as u8
}

/// Resizes an interleaved 8-bit image (`channels` per pixel) exactly like Pillow's
/// `Image.resize((new_w, new_h), filter)`.
pub fn resize_u8(
    src: &[u8],
    width: usize,
    height: usize,
    channels: usize,
    new_w: usize,
    new_h: usize,
    filter: Filter,
) -> Vec<u8> {
    assert_eq!(src.len(), width * height * channels, "image buffer size");
    assert!(new_w > 0 && new_h > 0, "empty output size");
    let round = 1i64 << (PRECISION_BITS - 1);
    // Horizontal pass.
    let horiz: Vec<u8> = if new_w != width {
        let c = coeffs(width, new_w, filter);
        let mut out = vec![0u8; new_w * height * channels];
        for y in 0..height {
            let row = &src[y * width * channels..(y + 1) * width * channels];
            for xx in 0..new_w {
                let (xmin, n) = c.bounds[xx];
                let k = &c.weights[xx * c.ksize..xx * c.ksize + n];
                for ch in 0..channels {
                    let mut acc = round;
                    for (x, &kx) in k.iter().enumerate() {
                        acc += row[(xmin + x) * channels + ch] as i64 * kx as i64;
                    }
                    out[(y * new_w + xx) * channels + ch] = clip8(acc);
                }
            }
        }
        out
    } else {
        src.to_vec()
    };
    if new_h == height {
        return horiz;
    }
    // Vertical pass.
    let c = coeffs(height, new_h, filter);
    let mut out = vec![0u8; new_w * new_h * channels];
    for yy in 0..new_h {
        let (ymin, n) = c.bounds[yy];
        let k = &c.weights[yy * c.ksize..yy * c.ksize + n];
        for x in 0..new_w * channels {
            let mut acc = round;
            for (y, &ky) in k.iter().enumerate() {
                acc += horiz[(ymin + y) * new_w * channels + x] as i64 * ky as i64;
            }
            out[yy * new_w * channels + x] = clip8(acc);
        }
    }
    out
}

/// A frame ready for the network.
#[derive(Clone, Debug, PartialEq)]
pub struct Preprocessed {
    /// Width after resizing and cropping (a multiple of 16).
    pub width: usize,
    /// Height after resizing and cropping (a multiple of 16).
    pub height: usize,
    /// The resized, cropped RGB image, interleaved, row-major.
    pub rgb: Vec<u8>,
    /// `[3, height, width]` planar values `(u8 / 255 - 0.5) / 0.5` in binary32.
    pub data: Vec<f32>,
    /// Pixel offset of the crop inside the resized image, `(x, y)`.
    pub crop_offset: (usize, usize),
    /// Size of the resized image before cropping, `(width, height)`.
    pub resized: (usize, usize),
}

impl Preprocessed {
    /// `true_shape` as upstream stores it: `[height, width]`.
    pub fn true_shape(&self) -> [usize; 2] {
        [self.height, self.width]
    }
}

/// A pixel value as the network takes it: `(v / 255 - 0.5) / 0.5` in binary32 (upstream's
/// `ToTensor` then `Normalize(0.5, 0.5)`).
pub fn normalise(v: u8) -> f32 {
    (v as f32 / 255.0 - 0.5) / 0.5
}

/// Python's `int(round(x))` on a double (ties to even).
fn py_round(x: f64) -> usize {
    x.round_ties_even() as usize
}

/// MASt3R-SLAM's `resize_img(img, size)` for `size` 224 or 512 on an interleaved RGB image.
pub fn preprocess(
    rgb: &[u8],
    width: usize,
    height: usize,
    size: usize,
) -> Result<Preprocessed, String> {
    if size != 224 && size != 512 {
        return Err(format!("preprocessing size must be 224 or 512, not {size}"));
    }
    if width == 0 || height == 0 || rgb.len() != width * height * 3 {
        return Err(format!(
            "RGB buffer of {} bytes does not hold a {width}x{height} image",
            rgb.len()
        ));
    }
    let (w0, h0) = (width as f64, height as f64);
    let long_edge = if size == 224 {
        py_round(size as f64 * (w0 / h0).max(h0 / w0))
    } else {
        size
    };
    // upstream _resize_pil_image
    let s = width.max(height);
    let filter = if s > long_edge {
        Filter::Lanczos
    } else {
        Filter::Bicubic
    };
    let new_w = py_round((width * long_edge) as f64 / s as f64);
    let new_h = py_round((height * long_edge) as f64 / s as f64);
    if new_w == 0 || new_h == 0 {
        return Err(format!(
            "a {width}x{height} image is too thin to resize to {size}"
        ));
    }
    let resized = resize_u8(rgb, width, height, 3, new_w, new_h, filter);
    let (cx, cy) = (new_w / 2, new_h / 2);
    let (x0, y0, x1, y1) = if size == 224 {
        let half = cx.min(cy);
        (cx - half, cy - half, cx + half, cy + half)
    } else {
        let halfw = ((2 * cx) / 16) * 8;
        let halfh = if new_w == new_h {
            3 * halfw / 4
        } else {
            ((2 * cy) / 16) * 8
        };
        (cx - halfw, cy - halfh, cx + halfw, cy + halfh)
    };
    let (cw, ch) = (x1 - x0, y1 - y0);
    if cw == 0 || ch == 0 {
        return Err(format!(
            "a {width}x{height} image crops to nothing at size {size}"
        ));
    }
    let mut crop = Vec::with_capacity(cw * ch * 3);
    for y in y0..y1 {
        crop.extend_from_slice(&resized[(y * new_w + x0) * 3..(y * new_w + x1) * 3]);
    }
    let mut data = vec![0.0f32; 3 * cw * ch];
    for (i, px) in crop.chunks_exact(3).enumerate() {
        for c in 0..3 {
            data[c * cw * ch + i] = normalise(px[c]);
        }
    }
    Ok(Preprocessed {
        width: cw,
        height: ch,
        rgb: crop,
        data,
        crop_offset: (x0, y0),
        resized: (new_w, new_h),
    })
}
