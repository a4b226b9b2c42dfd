//! Folders of images and text lists of image paths.

use std::path::{Path, PathBuf};

use rust3r_geometry::PinholeCamera;

use super::common::{self, data_lines, dataset_error, malformed, read_text, user_path};
use super::{Dataset, Frame, Pose};
use crate::IoError;

/// Assumed frame rate for timestamps of sources that have none.
const FPS: f64 = 30.0;

/// A monocular sequence from a folder of images or a list file.
///
/// * A folder: every `.png`, `.jpg` and `.jpeg` file (case-insensitive; hidden files skipped;
///   not recursive) in natural order (`frame2` before `frame10`). Timestamps are
///   `position / 30`.
/// * A `.txt` list: one image path per line, relative to the list's folder unless absolute,
///   `/` or `\` as separators; `#` comments. A line may also be `timestamp path` (as TUM's
///   `rgb.txt`), which sets the timestamp. The order of the list is kept.
///
/// There is no calibration unless one is passed to [`open_with`](super::open_with).
#[derive(Debug, Clone)]
pub struct ImageFolderDataset {
    name: String,
    root: PathBuf,
    frames: Vec<(f64, PathBuf)>,
    intrinsics: Option<PinholeCamera>,
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

impl ImageFolderDataset {
    /// Opens a folder or a `.txt` list, keeping every `stride`-th image; `calibration` (size 0
    /// means "from the first image") becomes [`Dataset::intrinsics`].
    pub fn open(
        path: &Path,
        stride: usize,
        calibration: Option<PinholeCamera>,
    ) -> Result<Self, IoError> {
        if stride == 0 {
            return Err(dataset_error(path, "the frame stride must be at least 1"));
        }
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
        Ok(Self {
            name,
            root: path.to_path_buf(),
            frames: all.into_iter().step_by(stride).collect(),
            intrinsics,
        })
    }

    /// The image files, in frame order.
    pub fn paths(&self) -> impl Iterator<Item = &Path> {
        self.frames.iter().map(|(_, p)| p.as_path())
    }
}

impl Dataset for ImageFolderDataset {
    fn name(&self) -> &str {
        &self.name
    }

    fn len(&self) -> usize {
        self.frames.len()
    }

    fn intrinsics(&self) -> Option<PinholeCamera> {
        self.intrinsics
    }

    fn depth_intrinsics(&self) -> Option<PinholeCamera> {
        None
    }

    fn frame(&self, i: usize) -> Result<Frame, IoError> {
        let (timestamp, path) = self.frames.get(i).ok_or_else(|| {
            dataset_error(
                &self.root,
                format!("frame {i} is out of range ({} frames)", self.frames.len()),
            )
        })?;
        Ok(Frame {
            index: i,
            timestamp: *timestamp,
            rgb: common::read_rgb(path)?,
            depth: None,
            gt_pose: None,
            rgb_path: path.clone(),
        })
    }

    fn ground_truth(&self) -> Option<Vec<(f64, Pose)>> {
        None
    }
}
