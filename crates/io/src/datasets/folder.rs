//! Folders of images and text lists of image paths.

use std::path::{Path, PathBuf};

use rust3r_geometry::PinholeCamera;

use super::common::{self, data_lines, dataset_error, malformed, read_text, user_path};
use super::sequence::{FrameFiles, Sequence};
use crate::IoError;

/// Assumed frame rate for timestamps of sources that have none.
const FPS: f64 = 30.0;

/// Opens a monocular sequence from a folder of images or a list file, keeping every
/// `stride`-th image; `calibration` (size 0 means "from the first image") becomes
/// [`Dataset::intrinsics`](super::Dataset::intrinsics).
///
/// * A folder: every `.png`, `.jpg` and `.jpeg` file (case-insensitive; hidden files skipped;
///   not recursive) in natural order (`frame2` before `frame10`). Timestamps are
///   `position / 30`.
/// * A `.txt` list: one image path per line, relative to the list's folder unless absolute,
///   `/` or `\` as separators; `#` comments. A line may also be `timestamp path` (as TUM's
///   `rgb.txt`), which sets the timestamp. The order of the list is kept.
///
/// There is no calibration unless one is passed to [`open_with`](super::open_with).
///
/// `stride` is at least 1: [`open_with`](super::open_with), through which every data set is
/// opened, checks it.
pub(crate) fn open(
    path: &Path,
    stride: usize,
    calibration: Option<PinholeCamera>,
) -> Result<Sequence, IoError> {
    let all: Vec<(f64, PathBuf)> = if path.is_dir() {
        let mut names: Vec<String> = common::list_dir(path)?
            .into_iter()
            .filter(|n| common::is_image_name(n) && path.join(n).is_file())
            .collect();
        names.sort_by(|a, b| common::natural_cmp(a, b));
        names
            .into_iter()
            .enumerate()
            .map(|(i, n)| (i as f64 / FPS, path.join(n)))
            .collect()
    } else {
        read_image_list(path)?
    };
    if all.is_empty() {
        return Err(dataset_error(path, "no images (.png, .jpg or .jpeg) found"));
    }
    let intrinsics = match calibration {
        Some(k) => Some(common::resolve_calibration(
            k,
            common::image_size(&all[0].1)?,
            &all[0].1,
        )?),
        None => None,
    };
    let name = if path.is_dir() {
        common::display_name(path)
    } else {
        path.file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| path.display().to_string())
    };
    let frames = all
        .into_iter()
        .step_by(stride)
        .map(|(timestamp, rgb)| FrameFiles {
            timestamp,
            rgb,
            depth: None,
            gt: None,
        })
        .collect();
    Ok(Sequence {
        intrinsics,
        ..Sequence::new(name, path, frames)
    })
}

fn read_image_list(list: &Path) -> Result<Vec<(f64, PathBuf)>, IoError> {
    let base = list.parent().unwrap_or(Path::new("."));
    let text = read_text(list)?;
    let mut out = Vec::new();
    for (line, content) in data_lines(&text) {
        let (timestamp, file) = match content.split_once(char::is_whitespace) {
            Some((ts, rest))
                if ts.parse::<f64>().is_ok_and(f64::is_finite)
                    && common::is_image_name(
                        Path::new(rest.trim())
                            .file_name()
                            .map(|n| n.to_string_lossy().into_owned())
                            .unwrap_or_default()
                            .as_str(),
                    ) =>
            {
                (ts.parse::<f64>().expect("checked"), rest.trim())
            }
            _ => (out.len() as f64 / FPS, content),
        };
        let path = user_path(base, file);
        if !common::is_image_extension(&common::extension(&path)) {
            return Err(malformed(
                list,
                format!("line {line}: '{file}' is not a .png, .jpg or .jpeg image"),
            ));
        }
        out.push((timestamp, path));
    }
    Ok(out)
}
