//! PlayCanvas SOG, version 2 (the format SuperSplat recommends for the web), as a `.sog` bundle:
//! a ZIP archive of `meta.json` and lossless WebP images holding one Gaussian per pixel in
//! reading order (published description: PlayCanvas's "The SOG Format").
//!
//! | image | each pixel |
//! |---|---|
//! | `means_l`, `means_u` | low and high byte of each coordinate as 16 bits, between `means.mins` and `means.maxs` after `sign(x) ln(1 + abs(x))` |
//! | `quats` | the three smaller components of the unit quaternion `(w, x, y, z)`, largest made positive, as `255 (c sqrt2 / 2 + 1/2)`; alpha `252 +` the index of the largest |
//! | `scales` | per axis, an index into the 256 log scales of `scales.codebook` |
//! | `sh0` | per channel, an index into the DC coefficients of `sh0.codebook`; alpha `255 sigmoid(opacity)` |
//! | `shN_labels` | 16-bit index (R low, G high) into the SH palette |
//! | `shN_centroids` | the palette, 64 entries a row, each entry one pixel per coefficient with RGB indices into `shN.codebook` |
//!
//! Values are those of the 3DGS PLY (no change of axes). The writer keeps the input order,
//! makes each codebook by 1-D k-means (exact where a property has at most 256 distinct values)
//! and the SH palette one entry per Gaussian up to 65536 Gaussians; past that, by k-means
//! started from contiguous groups along the main axis of the coefficients, each Gaussian
//! compared with the 32 palette entries nearest its group. The reader takes what any writer
//! following the description produces; ZIP members must be stored (WebP is compressed already).

use std::io::{Cursor, Read, Write};

use serde::{Deserialize, Serialize};

use crate::error::{Result, malformed, unsupported};
use crate::splats::{Splats, logit_clamped, normalized_quat, sigmoid, to_u8};

/// Palette entries per row of `shN_centroids`.
const PALETTE_ROW: usize = 64;
/// Largest SH palette (16-bit labels).
const MAX_PALETTE: usize = 65536;

#[derive(Serialize, Deserialize)]
struct Meta {
    version: u32,
    count: usize,
    means: Means,
    scales: Codebooked,
    quats: Files,
    sh0: Codebooked,
    #[serde(rename = "shN", default, skip_serializing_if = "Option::is_none")]
    sh_n: Option<ShN>,
}

#[derive(Serialize, Deserialize)]
struct Means {
    mins: [f32; 3],
    maxs: [f32; 3],
    files: Vec<String>,
}

#[derive(Serialize, Deserialize)]
struct Codebooked {
    codebook: Vec<f32>,
    files: Vec<String>,
}

#[derive(Serialize, Deserialize)]
struct Files {
    files: Vec<String>,
}

#[derive(Serialize, Deserialize)]
struct ShN {
    count: usize,
    bands: u32,
    codebook: Vec<f32>,
    files: Vec<String>,
}

fn log_transform(x: f32) -> f32 {
    x.signum() * x.abs().ln_1p()
}

fn inv_log_transform(v: f32) -> f32 {
    v.signum() * v.abs().exp_m1()
}

/// Image size for `n` Gaussians: both sides multiples of 4, about square.
fn image_size(n: usize) -> (usize, usize) {
    let w = (((n as f64).sqrt() / 4.0).ceil() as usize * 4).max(4);
    let h = (n.div_ceil(w).div_ceil(4) * 4).max(4);
    (w, h)
}

/// A 256-entry codebook for `values` by 1-D k-means, and each value's index. Exact when there
/// are at most 256 distinct values.
fn codebook_256(values: &[f32]) -> (Vec<f32>, Vec<u8>) {
    let mut sorted: Vec<f32> = values.to_vec();
    sorted.sort_by(f32::total_cmp);
    sorted.dedup();
    let mut centroids: Vec<f32> = if sorted.len() <= 256 {
        sorted.clone()
    } else {
        // 256 even steps over the range as the start (Lloyd's iterations only lower the mean
        // squared error from there), then Lloyd's iterations over the sorted values with
        // prefix sums.
        let mut all = values.to_vec();
        all.sort_by(f32::total_cmp);
        let prefix: Vec<f64> = std::iter::once(0.0)
            .chain(all.iter().scan(0.0f64, |s, &v| {
                *s += f64::from(v);
                Some(*s)
            }))
            .collect();
        let (lo, hi) = (all[0], all[all.len() - 1]);
        let mut c: Vec<f32> = (0..256)
            .map(|i| lo + (hi - lo) * (i as f32 + 0.5) / 256.0)
            .collect();
        for _ in 0..50 {
            c.dedup();
            let mut next = Vec::with_capacity(c.len());
            let mut start = 0;
            for k in 0..c.len() {
                let end = if k + 1 == c.len() {
                    all.len()
                } else {
                    let mid = 0.5 * (c[k] + c[k + 1]);
                    all.partition_point(|&v| v < mid)
                };
                if end > start {
                    next.push(((prefix[end] - prefix[start]) / (end - start) as f64) as f32);
                }
                start = end.max(start);
            }
            if next == c {
                break;
            }
            c = next;
        }
        c
    };
    centroids.dedup();
    let labels = values
        .iter()
        .map(|&v| nearest_sorted(&centroids, v))
        .collect();
    centroids.resize(256, *centroids.last().unwrap_or(&0.0));
    (centroids, labels)
}

/// Index of the entry of ascending `c` (1 to 256 entries) nearest `v`.
fn nearest_sorted(c: &[f32], v: f32) -> u8 {
    let i = c.partition_point(|&x| x < v);
    let best = if i == 0 {
        0
    } else if i == c.len() || (v - c[i - 1]) <= (c[i] - v) {
        i - 1
    } else {
        i
    };
    best.min(255) as u8
}

fn webp(rgba: &[u8], w: usize, h: usize) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    image_webp::WebPEncoder::new(&mut out)
        .encode(rgba, w as u32, h as u32, image_webp::ColorType::Rgba8)
        .map_err(|e| crate::error::Problem::Malformed(format!("cannot encode WebP: {e}")))?;
    Ok(out)
}

/// Decode a WebP image to RGBA; its width and the pixels.
fn unwebp(name: &str, bytes: &[u8]) -> Result<(usize, usize, Vec<u8>)> {
    let bad = |e: image_webp::DecodingError| {
        crate::error::Problem::Malformed(format!("{name}: not a valid WebP image: {e}"))
    };
    let mut d = image_webp::WebPDecoder::new(Cursor::new(bytes)).map_err(bad)?;
    let (w, h) = d.dimensions();
    let Some(size) = d.output_buffer_size() else {
        return malformed!("{name}: image of {w}x{h} pixels is too large");
    };
    let mut buf = vec![0u8; size];
    d.read_image(&mut buf).map_err(bad)?;
    let rgba = if d.has_alpha() {
        buf
    } else {
        buf.chunks_exact(3)
            .flat_map(|p| [p[0], p[1], p[2], 255])
            .collect()
    };
    Ok((w as usize, h as usize, rgba))
}

/// The SH palette: entries of `dim` floats and each Gaussian's entry.
fn sh_palette(rest: &[f32], n: usize, dim: usize) -> (Vec<f32>, Vec<u32>) {
    if n <= MAX_PALETTE {
        return (rest.to_vec(), (0..n as u32).collect());
    }
    let k = MAX_PALETTE;
    let row = |i: usize| &rest[i * dim..(i + 1) * dim];
    // Main axis of the coefficients (power iteration on the covariance, through the data).
    let mean: Vec<f64> = (0..dim)
        .map(|d| (0..n).map(|i| f64::from(rest[i * dim + d])).sum::<f64>() / n as f64)
        .collect();
    let mut axis = vec![1.0f64; dim];
    for _ in 0..8 {
        let mut next = vec![0.0f64; dim];
        for i in 0..n {
            let r = row(i);
            let p: f64 = (0..dim)
                .map(|d| (f64::from(r[d]) - mean[d]) * axis[d])
                .sum();
            for d in 0..dim {
                next[d] += p * (f64::from(r[d]) - mean[d]);
            }
        }
        let norm = next.iter().map(|v| v * v).sum::<f64>().sqrt();
        if !(norm > 0.0 && norm.is_finite()) {
            break;
        }
        axis = next.into_iter().map(|v| v / norm).collect();
    }
    let proj: Vec<f64> = (0..n)
        .map(|i| (0..dim).map(|d| f64::from(row(i)[d]) * axis[d]).sum())
        .collect();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| proj[a].total_cmp(&proj[b]));
    // Start: k contiguous groups along the axis; then Lloyd's iterations in which each Gaussian
    // is compared with the entries near its current one in that order.
    let mut labels = vec![0u32; n];
    for (pos, &i) in order.iter().enumerate() {
        labels[i] = (pos * k / n) as u32;
    }
    let mut palette = vec![0.0f32; k * dim];
    const WINDOW: usize = 16;
    for iter in 0..4 {
        let mut sums = vec![0.0f64; k * dim];
        let mut counts = vec![0usize; k];
        for i in 0..n {
            let l = labels[i] as usize;
            counts[l] += 1;
            for (s, &v) in sums[l * dim..(l + 1) * dim].iter_mut().zip(row(i)) {
                *s += f64::from(v);
            }
        }
        for l in 0..k {
            if counts[l] > 0 {
                for d in 0..dim {
                    palette[l * dim + d] = (sums[l * dim + d] / counts[l] as f64) as f32;
                }
            }
        }
        if iter == 3 {
            break;
        }
        for i in 0..n {
            let r = row(i);
            let l = labels[i] as usize;
            let dist = |c: usize| -> f32 {
                palette[c * dim..(c + 1) * dim]
                    .iter()
                    .zip(r)
                    .map(|(a, b)| (a - b) * (a - b))
                    .sum()
            };
            let mut best = (dist(l), l);
            for c in l.saturating_sub(WINDOW)..(l + WINDOW + 1).min(k) {
                if counts[c] > 0 {
                    let d = dist(c);
                    if d < best.0 {
                        best = (d, c);
                    }
                }
            }
            labels[i] = best.1 as u32;
        }
    }
    (palette, labels)
}

/// Encode `splats` as a `.sog` bundle.
pub(crate) fn encode(splats: &Splats) -> Result<Vec<u8>> {
    splats.validate()?;
    let n = splats.len();
    if n == 0 {
        return unsupported!("SOG needs at least one splat");
    }
    let (w, h) = image_size(n);
    let mut files: Vec<(&str, Vec<u8>)> = Vec::new();
    let image = |f: &dyn Fn(usize) -> [u8; 4]| -> Vec<u8> {
        let mut px = vec![0u8; w * h * 4];
        for i in 0..n {
            px[i * 4..i * 4 + 4].copy_from_slice(&f(i));
        }
        px
    };

    // Positions.
    let mut mins = [f32::INFINITY; 3];
    let mut maxs = [f32::NEG_INFINITY; 3];
    for m in &splats.means {
        for a in 0..3 {
            let v = log_transform(m[a]);
            mins[a] = mins[a].min(v);
            maxs[a] = maxs[a].max(v);
        }
    }
    let q16 = |i: usize| -> [u16; 3] {
        std::array::from_fn(|a| {
            let range = maxs[a] - mins[a];
            if range > 0.0 {
                ((log_transform(splats.means[i][a]) - mins[a]) / range * 65535.0)
                    .round()
                    .clamp(0.0, 65535.0) as u16
            } else {
                0
            }
        })
    };
    files.push((
        "means_l.webp",
        webp(
            &image(&|i| {
                let q = q16(i);
                [q[0] as u8, q[1] as u8, q[2] as u8, 255]
            }),
            w,
            h,
        )?,
    ));
    files.push((
        "means_u.webp",
        webp(
            &image(&|i| {
                let q = q16(i);
                [(q[0] >> 8) as u8, (q[1] >> 8) as u8, (q[2] >> 8) as u8, 255]
            }),
            w,
            h,
        )?,
    ));

    // Rotations: smallest three.
    files.push((
        "quats.webp",
        webp(
            &image(&|i| {
                let mut q = normalized_quat(splats.rotations[i]);
                let largest = (0..4).fold(0, |b, k| if q[k].abs() > q[b].abs() { k } else { b });
                if q[largest] < 0.0 {
                    q = q.map(|c| -c);
                }
                let mut px = [0u8, 0, 0, 252 + largest as u8];
                for (slot, k) in (0..4).filter(|&k| k != largest).enumerate() {
                    px[slot] = to_u8(255.0 * (q[k] * std::f32::consts::SQRT_2 * 0.5 + 0.5));
                }
                px
            }),
            w,
            h,
        )?,
    ));

    // Scales, DC colour and opacity through codebooks.
    let log_scales: Vec<f32> = splats.log_scales.iter().flatten().copied().collect();
    let (scale_book, scale_labels) = codebook_256(&log_scales);
    files.push((
        "scales.webp",
        webp(
            &image(&|i| {
                [
                    scale_labels[i * 3],
                    scale_labels[i * 3 + 1],
                    scale_labels[i * 3 + 2],
                    255,
                ]
            }),
            w,
            h,
        )?,
    ));
    let k = splats.num_coeffs();
    let dc: Vec<f32> = (0..n)
        .flat_map(|i| splats.sh[i * k * 3..i * k * 3 + 3].iter().copied())
        .collect();
    let (dc_book, dc_labels) = codebook_256(&dc);
    files.push((
        "sh0.webp",
        webp(
            &image(&|i| {
                [
                    dc_labels[i * 3],
                    dc_labels[i * 3 + 1],
                    dc_labels[i * 3 + 2],
                    to_u8(sigmoid(splats.opacity_logits[i]) * 255.0),
                ]
            }),
            w,
            h,
        )?,
    ));

    // Higher-order SH through a palette.
    let sh_n = if k > 1 {
        let coeffs = k - 1;
        let dim = coeffs * 3;
        let rest: Vec<f32> = (0..n)
            .flat_map(|i| splats.sh[i * k * 3 + 3..(i + 1) * k * 3].iter().copied())
            .collect();
        let (palette, labels) = sh_palette(&rest, n, dim);
        let entries = palette.len() / dim;
        let (book, idx) = codebook_256(&palette);
        let (pw, ph) = (PALETTE_ROW * coeffs, entries.div_ceil(PALETTE_ROW));
        let mut px = vec![0u8; pw * ph * 4];
        for e in 0..entries {
            for j in 0..coeffs {
                let at = ((e / PALETTE_ROW) * pw + (e % PALETTE_ROW) * coeffs + j) * 4;
                let src = e * dim + j * 3;
                px[at..at + 4].copy_from_slice(&[idx[src], idx[src + 1], idx[src + 2], 255]);
            }
        }
        files.push(("shN_centroids.webp", webp(&px, pw, ph)?));
        files.push((
            "shN_labels.webp",
            webp(
                &image(&|i| [labels[i] as u8, (labels[i] >> 8) as u8, 0, 255]),
                w,
                h,
            )?,
        ));
        Some(ShN {
            count: entries,
            bands: splats.sh_degree,
            codebook: book,
            files: vec!["shN_centroids.webp".into(), "shN_labels.webp".into()],
        })
    } else {
        None
    };

    let meta = Meta {
        version: 2,
        count: n,
        means: Means {
            mins,
            maxs,
            files: vec!["means_l.webp".into(), "means_u.webp".into()],
        },
        scales: Codebooked {
            codebook: scale_book,
            files: vec!["scales.webp".into()],
        },
        quats: Files {
            files: vec!["quats.webp".into()],
        },
        sh0: Codebooked {
            codebook: dc_book,
            files: vec!["sh0.webp".into()],
        },
        sh_n,
    };
    let meta = serde_json::to_vec(&meta)
        .map_err(|e| crate::error::Problem::Malformed(format!("meta.json: {e}")))?;
    let zip_err = |e: zip::result::ZipError| {
        crate::error::Problem::Malformed(format!("cannot write the ZIP bundle: {e}"))
    };
    let mut zw = zip::ZipWriter::new(Cursor::new(Vec::new()));
    let opts =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    for (name, bytes) in std::iter::once(("meta.json", meta)).chain(files) {
        zw.start_file(name, opts).map_err(zip_err)?;
        zw.write_all(&bytes).map_err(|e| zip_err(e.into()))?;
    }
    Ok(zw.finish().map_err(zip_err)?.into_inner())
}

/// Decode a `.sog` bundle.
pub(crate) fn decode(bytes: &[u8]) -> Result<Splats> {
    let mut zip = match zip::ZipArchive::new(Cursor::new(bytes)) {
        Ok(z) => z,
        Err(e) => return malformed!("not a SOG bundle (ZIP archive): {e}"),
    };
    let mut member = |name: &str| -> Result<Vec<u8>> {
        let mut f = match zip.by_name(name) {
            Ok(f) => f,
            Err(zip::result::ZipError::FileNotFound) => {
                return malformed!("the bundle has no {name}");
            }
            Err(zip::result::ZipError::UnsupportedArchive(m)) => {
                return unsupported!("{name}: {m}");
            }
            Err(e) => return malformed!("{name}: {e}"),
        };
        if f.size() > 1 << 31 {
            return malformed!("{name}: {} bytes is too large", f.size());
        }
        let mut out = Vec::with_capacity(f.size() as usize);
        match f.read_to_end(&mut out) {
            Ok(_) => Ok(out),
            Err(e) => malformed!("{name}: {e}"),
        }
    };
    let meta: serde_json::Value = match serde_json::from_slice(&member("meta.json")?) {
        Ok(v) => v,
        Err(e) => return malformed!("meta.json: {e}"),
    };
    match meta.get("version").and_then(serde_json::Value::as_u64) {
        Some(2) => {}
        None => return unsupported!("SOG version 1 (meta.json without a version)"),
        Some(v) => return unsupported!("SOG version {v}"),
    }
    let meta: Meta = match serde_json::from_value(meta) {
        Ok(m) => m,
        Err(e) => return malformed!("meta.json: {e}"),
    };
    let n = meta.count;
    // Each image must hold `n` pixels; the first file of each property is read.
    let mut load = |what: &str, files: &[String], index: usize| -> Result<(usize, Vec<u8>)> {
        let Some(name) = files.get(index) else {
            return malformed!("meta.json: {what} names no file {index}");
        };
        let (w, h, px) = unwebp(name, &member(name)?)?;
        Ok((w * h, px)).and_then(|(pixels, px)| {
            if pixels < n && what != "shN centroids" {
                malformed!("{name}: {pixels} pixels for {n} splats")
            } else {
                Ok((w, px))
            }
        })
    };
    let (_, lo) = load("means", &meta.means.files, 0)?;
    let (_, hi) = load("means", &meta.means.files, 1)?;
    let (_, quats) = load("quats", &meta.quats.files, 0)?;
    let (_, scales) = load("scales", &meta.scales.files, 0)?;
    let (_, sh0) = load("sh0", &meta.sh0.files, 0)?;
    let book = |b: &[f32], i: u8, what: &str| -> Result<f32> {
        match b.get(i as usize) {
            Some(v) if v.is_finite() => Ok(*v),
            _ => malformed!("{what} index {i} outside its codebook of {}", b.len()),
        }
    };
    let (degree, palette) = match &meta.sh_n {
        None => (0, None),
        Some(s) => {
            if !(1..=3).contains(&s.bands) {
                return malformed!("meta.json: shN.bands {} is not 1, 2 or 3", s.bands);
            }
            let coeffs = [0, 3, 8, 15][s.bands as usize];
            let (cw, centroids) = load("shN centroids", &s.files, 0)?;
            let (_, labels) = load("shN labels", &s.files, 1)?;
            if cw != PALETTE_ROW * coeffs
                || centroids.len() / 4 < s.count.div_ceil(PALETTE_ROW) * cw
            {
                return malformed!(
                    "shN centroids: image does not hold {} entries of {coeffs} coefficients",
                    s.count
                );
            }
            (s.bands, Some((s, coeffs, cw, centroids, labels)))
        }
    };
    let k = (degree as usize + 1).pow(2);
    let mut out = Splats::with_capacity(degree, n);
    for i in 0..n {
        let p = i * 4;
        out.means.push(std::array::from_fn(|a| {
            let q = f32::from(lo[p + a]) + 256.0 * f32::from(hi[p + a]);
            let (lo, hi) = (meta.means.mins[a], meta.means.maxs[a]);
            inv_log_transform(lo + (hi - lo) * q / 65535.0)
        }));
        let tag = quats[p + 3];
        if !(252..=255).contains(&tag) {
            return malformed!("quats: splat {i} has tag {tag} (not 252-255)");
        }
        let largest = usize::from(tag - 252);
        let mut q = [0.0f32; 4];
        for (slot, k) in (0..4).filter(|&k| k != largest).enumerate() {
            q[k] = (f32::from(quats[p + slot]) / 255.0 * 2.0 - 1.0) / std::f32::consts::SQRT_2;
        }
        q[largest] = (1.0 - q.iter().map(|c| c * c).sum::<f32>()).max(0.0).sqrt();
        out.rotations.push(q);
        let mut ls = [0.0; 3];
        for a in 0..3 {
            ls[a] = book(&meta.scales.codebook, scales[p + a], "scales")?;
        }
        out.log_scales.push(ls);
        for c in 0..3 {
            out.sh.push(book(&meta.sh0.codebook, sh0[p + c], "sh0")?);
        }
        out.opacity_logits
            .push(logit_clamped(f32::from(sh0[p + 3]) / 255.0));
        if let Some((s, coeffs, cw, centroids, labels)) = &palette {
            let label = usize::from(labels[p]) | usize::from(labels[p + 1]) << 8;
            if label >= s.count {
                return malformed!(
                    "shN labels: splat {i} has palette entry {label} of {}",
                    s.count
                );
            }
            for j in 0..*coeffs {
                let at = ((label / PALETTE_ROW) * cw + (label % PALETTE_ROW) * coeffs + j) * 4;
                for c in 0..3 {
                    out.sh.push(book(&s.codebook, centroids[at + c], "shN")?);
                }
            }
        }
        debug_assert_eq!(out.sh.len(), (i + 1) * k * 3);
    }
    out.validate()?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lcg(seed: &mut u64) -> f32 {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((*seed >> 40) as f32) / (1u64 << 24) as f32
    }

    fn random_splats(n: usize, degree: u32, seed: u64) -> Splats {
        let mut s = seed;
        let k = (degree as usize + 1).pow(2);
        let mut out = Splats::with_capacity(degree, n);
        for _ in 0..n {
            out.means.push([0; 3].map(|_| (lcg(&mut s) - 0.5) * 20.0));
            out.log_scales.push([0; 3].map(|_| lcg(&mut s) * 6.0 - 7.0));
            out.rotations.push([0; 4].map(|_| lcg(&mut s) - 0.5));
            out.opacity_logits.push(lcg(&mut s) * 10.0 - 5.0);
            for _ in 0..k * 3 {
                out.sh.push((lcg(&mut s) - 0.5) * 2.0);
            }
        }
        out
    }

    /// Rotation distance between two quaternions (sign-insensitive): 1 - |<a, b>|.
    fn quat_gap(a: [f32; 4], b: [f32; 4]) -> f32 {
        let (a, b) = (normalized_quat(a), normalized_quat(b));
        1.0 - (0..4).map(|k| a[k] * b[k]).sum::<f32>().abs()
    }

    #[test]
    fn round_trip_within_quantisation() {
        for (n, degree) in [(1, 0), (5, 1), (1000, 3), (777, 2)] {
            let s = random_splats(n, degree, 7 + n as u64);
            let bytes = encode(&s).unwrap();
            let back = decode(&bytes).unwrap();
            assert_eq!((back.len(), back.sh_degree), (n, degree));
            let mut worst = [0.0f32; 6];
            for i in 0..n {
                for a in 0..3 {
                    // 16 bits over the log-transformed range (under 5 units), back through exp.
                    let m = s.means[i][a];
                    let tol = (m.abs() + 1.0) * 5.0 / 65535.0;
                    worst[0] = worst[0].max((back.means[i][a] - m).abs() / tol);
                    // 256 levels over 6 units of log scale: under half a level of 6/255.
                    worst[1] = worst[1]
                        .max((back.log_scales[i][a] - s.log_scales[i][a]).abs() / (6.0 / 255.0));
                }
                worst[2] = worst[2].max(quat_gap(back.rotations[i], s.rotations[i]) / 1e-4);
                let (p, q) = (
                    sigmoid(back.opacity_logits[i]),
                    sigmoid(s.opacity_logits[i]),
                );
                worst[3] = worst[3].max((p - q).abs() / (0.5 / 255.0 + 1e-6));
                let k = s.num_coeffs();
                for c in 0..3 {
                    worst[4] = worst[4]
                        .max((back.sh[i * k * 3 + c] - s.sh[i * k * 3 + c]).abs() / (2.0 / 255.0));
                }
                for c in 3..k * 3 {
                    worst[5] = worst[5]
                        .max((back.sh[i * k * 3 + c] - s.sh[i * k * 3 + c]).abs() / (2.0 / 255.0));
                }
            }
            assert!(
                worst.iter().all(|w| *w <= 1.0),
                "n {n}, degree {degree}: worst / tolerance {worst:?}"
            );
        }
    }

    #[test]
    fn past_65536_splats_the_sh_palette_is_clustered() {
        let n = 70_000;
        let s = random_splats(n, 1, 11);
        let back = decode(&encode(&s).unwrap()).unwrap();
        let k = s.num_coeffs();
        let (mut se, mut count) = (0.0f64, 0usize);
        for i in 0..n {
            for c in 3..k * 3 {
                se += f64::from(back.sh[i * k * 3 + c] - s.sh[i * k * 3 + c]).powi(2);
                count += 1;
            }
        }
        // The coefficients are uniform in [-1, 1] (RMS 0.58); a wrong palette is that far off.
        let rms = (se / count as f64).sqrt();
        assert!(rms < 0.1, "SH RMS error {rms}");
    }

    #[test]
    fn few_distinct_values_are_exact() {
        let mut s = random_splats(300, 0, 3);
        for (i, ls) in s.log_scales.iter_mut().enumerate() {
            *ls = [-3.0 - (i % 7) as f32 * 0.25; 3];
        }
        let back = decode(&encode(&s).unwrap()).unwrap();
        assert_eq!(back.log_scales, s.log_scales);
    }

    #[test]
    fn bad_bundles_are_errors() {
        let s = random_splats(40, 1, 5);
        let good = encode(&s).unwrap();
        assert!(decode(b"PK\x03\x04 nonsense").is_err());
        assert!(decode(&good[..good.len() / 2]).is_err());
        // Every single-byte corruption either decodes to valid splats or is an error.
        let mut seed = 9u64;
        for _ in 0..200 {
            let mut b = good.clone();
            let at = (lcg(&mut seed) * b.len() as f32) as usize % b.len();
            b[at] ^= 1 << ((lcg(&mut seed) * 8.0) as u32 % 8);
            if let Ok(d) = decode(&b) {
                assert!(d.validate().is_ok());
            }
        }
    }

    #[test]
    fn codebook_is_nearest() {
        let v: Vec<f32> = (0..5000)
            .map(|i| ((i * 7919) % 1000) as f32 / 10.0)
            .collect();
        let (book, labels) = codebook_256(&v);
        assert_eq!(book.len(), 256);
        for (x, l) in v.iter().zip(&labels) {
            let d = (book[*l as usize] - x).abs();
            assert!(book.iter().all(|c| (c - x).abs() >= d - 1e-6));
            assert!(d <= 0.5, "{x} -> {}", book[*l as usize]);
        }
    }
}
