//! Helpers shared by the data set loaders: text parsing with line numbers, image decoding,
//! timestamp association, natural sorting and pose conversion.

use std::cmp::Ordering;
use std::path::{Path, PathBuf};

use image::DynamicImage;
use rust3r_geometry::PinholeCamera;

use super::{DepthImage, Pose};
use crate::IoError;

pub(crate) use crate::error::at::{dataset_error, malformed};

/// Reads a whole text file (invalid UTF-8 is an error naming the file).
pub(crate) fn read_text(path: &Path) -> Result<String, IoError> {
    let bytes = std::fs::read(path).map_err(|e| IoError::io(path, e))?;
    String::from_utf8(bytes).map_err(|e| {
        malformed(
            path,
            format!(
                "not a text file (invalid UTF-8 at byte {})",
                e.utf8_error().valid_up_to()
            ),
        )
    })
}

/// Non-empty lines that are not comments (`#` or `%` first, after whitespace), with their
/// 1-based line numbers, trimmed (also of `\r`).
pub(crate) fn data_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines().enumerate().filter_map(|(i, l)| {
        let l = l.trim();
        (!l.is_empty() && !l.starts_with('#') && !l.starts_with('%')).then_some((i + 1, l))
    })
}

/// Parses a finite `f64`, or reports `line N: 'token' is not a number`.
pub(crate) fn parse_f64(token: &str, path: &Path, line: usize) -> Result<f64, IoError> {
    match token.trim().parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(v),
        Ok(_) => Err(malformed(
            path,
            format!("line {line}: '{token}' is not a finite number"),
        )),
        Err(_) => Err(malformed(
            path,
            format!("line {line}: '{token}' is not a number"),
        )),
    }
}

/// Parses all whitespace-separated numbers of a line, requiring at least `min` of them.
pub(crate) fn parse_numbers(
    content: &str,
    min: usize,
    what: &str,
    path: &Path,
    line: usize,
) -> Result<Vec<f64>, IoError> {
    let tokens: Vec<&str> = content.split_whitespace().collect();
    if tokens.len() < min {
        return Err(malformed(
            path,
            format!(
                "line {line}: expected {min} numbers ({what}), found {} fields",
                tokens.len()
            ),
        ));
    }
    tokens.iter().map(|t| parse_f64(t, path, line)).collect()
}

/// A path written in a list file, relative to `base` unless absolute; both `/` and `\` are
/// accepted as separators.
pub(crate) fn user_path(base: &Path, written: &str) -> PathBuf {
    let written = written.trim();
    #[cfg(not(windows))]
    let written = written.replace('\\', "/");
    let p = PathBuf::from(written);
    if p.is_absolute() { p } else { base.join(p) }
}

/// Lower-case extension of a path (empty if none).
pub(crate) fn extension(path: &Path) -> String {
    path.extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default()
}

pub(crate) fn is_image_extension(ext: &str) -> bool {
    matches!(ext, "png" | "jpg" | "jpeg")
}

/// Whether a file name is a (non-hidden) png/jpg/jpeg image, case-insensitively.
pub(crate) fn is_image_name(name: &str) -> bool {
    !name.starts_with('.') && is_image_extension(&extension(Path::new(name)))
}

/// File names (not paths) in a directory.
pub(crate) fn list_dir(dir: &Path) -> Result<Vec<String>, IoError> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| IoError::io(dir, e))? {
        let entry = entry.map_err(|e| IoError::io(dir, e))?;
        names.push(entry.file_name().to_string_lossy().into_owned());
    }
    Ok(names)
}

/// The last path component as a string (falls back to the whole path).
pub(crate) fn display_name(path: &Path) -> String {
    let canon = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    canon
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

/// "Natural" order of two strings: digit runs compare as numbers, so `frame2 < frame10`.
/// Letters compare case-insensitively first; remaining ties are broken by fewer leading zeros
/// and finally by plain byte order, so the order is total and deterministic.
pub fn natural_cmp(a: &str, b: &str) -> Ordering {
    fn chunks(s: &str) -> Vec<(bool, &str)> {
        let mut out = Vec::new();
        let bytes = s.as_bytes();
        let mut start = 0;
        while start < bytes.len() {
            let digit = bytes[start].is_ascii_digit();
            let mut end = start + 1;
            while end < bytes.len() && bytes[end].is_ascii_digit() == digit {
                end += 1;
            }
            // Digit runs are ASCII; non-digit runs end at a digit, which is a char boundary.
            out.push((digit, &s[start..end]));
            start = end;
        }
        out
    }
    let (ca, cb) = (chunks(a), chunks(b));
    let mut zeros_tie = Ordering::Equal;
    for (x, y) in ca.iter().zip(cb.iter()) {
        let ord = match (x.0, y.0) {
            (true, true) => {
                let xt = x.1.trim_start_matches('0');
                let yt = y.1.trim_start_matches('0');
                let ord = xt.len().cmp(&yt.len()).then_with(|| xt.cmp(yt));
                if ord == Ordering::Equal && zeros_tie == Ordering::Equal {
                    zeros_tie = x.1.len().cmp(&y.1.len());
                }
                ord
            }
            (true, false) => Ordering::Less,
            (false, true) => Ordering::Greater,
            (false, false) => x.1.to_lowercase().cmp(&y.1.to_lowercase()),
        };
        if ord != Ordering::Equal {
            return ord;
        }
    }
    ca.len()
        .cmp(&cb.len())
        .then(zeros_tie)
        .then_with(|| a.cmp(b))
}

/// Decodes an image file (format from its content; truncated files are errors).
pub(crate) fn decode_image(path: &Path) -> Result<DynamicImage, IoError> {
    crate::image_file::decode(path)
}

/// Decodes a colour (or grey) image to 8-bit RGB.
pub(crate) fn read_rgb(path: &Path) -> Result<image::RgbImage, IoError> {
    Ok(decode_image(path)?.into_rgb8())
}

/// Width and height from the image header, without decoding the pixels.
pub(crate) fn image_size(path: &Path) -> Result<(u32, u32), IoError> {
    crate::image_file::dimensions(path)
}

/// Decodes a 16-bit single-channel depth PNG into metres: `value / units_per_metre`, with 0
/// and every value in `invalid` mapped to 0 (invalid).
pub(crate) fn read_depth(
    path: &Path,
    units_per_metre: f32,
    invalid: &[u16],
) -> Result<DepthImage, IoError> {
    let img = decode_image(path)?;
    let DynamicImage::ImageLuma16(raw) = img else {
        return Err(malformed(
            path,
            format!(
                "expected a 16-bit single-channel depth PNG, found {:?}",
                img.color()
            ),
        ));
    };
    let (w, h) = raw.dimensions();
    let data = raw
        .into_raw()
        .into_iter()
        .map(|v| {
            if v == 0 || invalid.contains(&v) {
                0.0
            } else {
                v as f32 / units_per_metre
            }
        })
        .collect();
    Ok(DepthImage::from_raw(w, h, data).expect("buffer size matches dimensions"))
}

/// Pose from a translation and a unit quaternion `(qx, qy, qz, qw)` (normalised here).
/// Returns `None` for a zero quaternion.
pub(crate) fn pose_from_tq(t: [f64; 3], q: [f64; 4]) -> Option<Pose> {
    let n = (q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3]).sqrt();
    if n.is_nan() || n <= 1e-9 || !n.is_finite() {
        return None;
    }
    let (x, y, z, w) = (q[0] / n, q[1] / n, q[2] / n, q[3] / n);
    Some([
        [
            1.0 - 2.0 * (y * y + z * z),
            2.0 * (x * y - z * w),
            2.0 * (x * z + y * w),
            t[0],
        ],
        [
            2.0 * (x * y + z * w),
            1.0 - 2.0 * (x * x + z * z),
            2.0 * (y * z - x * w),
            t[1],
        ],
        [
            2.0 * (x * z - y * w),
            2.0 * (y * z + x * w),
            1.0 - 2.0 * (x * x + y * y),
            t[2],
        ],
        [0.0, 0.0, 0.0, 1.0],
    ])
}

/// Matrix product `a * b` of two 4x4 transforms.
pub(crate) fn pose_mul(a: &Pose, b: &Pose) -> Pose {
    let mut out = [[0.0; 4]; 4];
    for (r, row) in out.iter_mut().enumerate() {
        for (c, v) in row.iter_mut().enumerate() {
            *v = (0..4).map(|k| a[r][k] * b[k][c]).sum();
        }
    }
    out
}

/// Parses a TUM trajectory file (`timestamp tx ty tz qx qy qz qw` per line).
pub(crate) fn read_tum_trajectory(path: &Path) -> Result<Vec<(f64, Pose)>, IoError> {
    let text = read_text(path)?;
    let mut out = Vec::new();
    for (line, content) in data_lines(&text) {
        let v = parse_numbers(content, 8, "timestamp tx ty tz qx qy qz qw", path, line)?;
        let pose = pose_from_tq([v[1], v[2], v[3]], [v[4], v[5], v[6], v[7]])
            .ok_or_else(|| malformed(path, format!("line {line}: zero quaternion")))?;
        out.push((v[0], pose));
    }
    Ok(out)
}

/// Timestamp association in the manner of TUM's `associate.py`: all pairs closer than
/// `max_difference` are candidates, taken greedily from the closest, each timestamp used at
/// most once. Returns, for each entry of `first`, the index of its match in `second`.
pub(crate) fn associate(first: &[f64], second: &[f64], max_difference: f64) -> Vec<Option<usize>> {
    let mut order: Vec<usize> = (0..second.len()).collect();
    order.sort_by(|&a, &b| second[a].total_cmp(&second[b]));
    let sorted: Vec<f64> = order.iter().map(|&i| second[i]).collect();
    let mut candidates = Vec::new();
    for (i, &a) in first.iter().enumerate() {
        let start = sorted.partition_point(|&b| b <= a - max_difference);
        for (k, &b) in sorted.iter().enumerate().skip(start) {
            if b >= a + max_difference {
                break;
            }
            let diff = (a - b).abs();
            if diff < max_difference {
                candidates.push((diff, a, b, i, order[k]));
            }
        }
    }
    candidates.sort_by(|x, y| {
        x.0.total_cmp(&y.0)
            .then(x.1.total_cmp(&y.1))
            .then(x.2.total_cmp(&y.2))
    });
    let mut result = vec![None; first.len()];
    let mut used = vec![false; second.len()];
    for (_, _, _, i, j) in candidates {
        if result[i].is_none() && !used[j] {
            result[i] = Some(j);
            used[j] = true;
        }
    }
    result
}

/// For each query, the index of the nearest `sorted` timestamp if closer than `max_difference`.
/// `sorted` must be in ascending order.
pub(crate) fn nearest(queries: &[f64], sorted: &[f64], max_difference: f64) -> Vec<Option<usize>> {
    queries
        .iter()
        .map(|&q| {
            let k = sorted.partition_point(|&t| t < q);
            let mut best: Option<(f64, usize)> = None;
            for j in [k.wrapping_sub(1), k] {
                if let Some(&t) = sorted.get(j) {
                    let d = (t - q).abs();
                    if d < max_difference && best.is_none_or(|(bd, _)| d < bd) {
                        best = Some((d, j));
                    }
                }
            }
            best.map(|(_, j)| j)
        })
        .collect()
}

/// Applies a calibration override: a zero size is taken from `image_size`; a non-zero size
/// must equal it.
pub(crate) fn resolve_calibration(
    calib: PinholeCamera,
    image_size: (u32, u32),
    image_path: &Path,
) -> Result<PinholeCamera, IoError> {
    let mut k = calib;
    if k.width == 0 || k.height == 0 {
        k.width = image_size.0;
        k.height = image_size.1;
    } else if (k.width, k.height) != image_size {
        return Err(dataset_error(
            image_path,
            format!(
                "the given calibration is for {}x{} images but this image is {}x{}",
                k.width, k.height, image_size.0, image_size.1
            ),
        ));
    }
    Ok(k)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn natural_order() {
        let mut v = vec![
            "frame10.png",
            "frame2.png",
            "Frame3.png",
            "frame1.png",
            "frame02.png",
            "a.png",
            "frame.png",
        ];
        v.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(
            v,
            // As Python's natsort (used by MASt3R-SLAM): "frame." sorts after "frame" + digits.
            [
                "a.png",
                "frame1.png",
                "frame2.png",
                "frame02.png",
                "Frame3.png",
                "frame10.png",
                "frame.png",
            ]
        );
        assert_eq!(
            natural_cmp("img_99999999999999999999", "img_100000000000000000000"),
            Ordering::Less
        );
    }

    #[test]
    fn associate_like_tum() {
        let rgb = [1.0, 1.011, 2.0, 3.0];
        let depth = [1.009, 1.012, 2.5, 3.019];
        let m = associate(&rgb, &depth, 0.02);
        // Pairs: (1.011,1.012)=0.001, (1.011,1.009)=0.002, (1.0,1.009)=0.009, (1.0,1.012)=0.012,
        // (3.0,3.019)=0.019. Greedy: 1.011-1.012, then 1.0-1.009, then 3.0-3.019.
        assert_eq!(m, vec![Some(0), Some(1), None, Some(3)]);
        let n = nearest(&[0.0, 1.004, 1.5, 9.0], &[1.0, 1.01, 2.0], 0.02);
        assert_eq!(n, vec![None, Some(0), None, None]);
    }

    #[test]
    fn quaternion_pose() {
        // 90 degrees about z.
        let s = std::f64::consts::FRAC_1_SQRT_2;
        let p = pose_from_tq([1.0, 2.0, 3.0], [0.0, 0.0, s, s]).unwrap();
        let expect = [
            [0.0, -1.0, 0.0, 1.0],
            [1.0, 0.0, 0.0, 2.0],
            [0.0, 0.0, 1.0, 3.0],
            [0.0, 0.0, 0.0, 1.0],
        ];
        for r in 0..4 {
            for c in 0..4 {
                assert!((p[r][c] - expect[r][c]).abs() < 1e-12);
            }
        }
        assert!(pose_from_tq([0.0; 3], [0.0; 4]).is_none());
    }
}
