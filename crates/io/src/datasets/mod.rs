//! Image-sequence data sets (RGB-D and monocular) behind one frame-source API.
//!
//! [`open`] recognises the layout of a folder ([`detect`]) and returns a [`Dataset`], which hands
//! out [`Frame`]s (colour image, optional metric depth, optional ground-truth pose) by index:
//!
//! | kind | layout | depth | ground truth |
//! |---|---|---|---|
//! | [`DatasetKind::Tum`] | `rgb.txt`, `depth.txt`, `groundtruth.txt` | PNG u16 / 5000 | `groundtruth.txt` |
//! | [`DatasetKind::SevenScenes`] | `frame-NNNNNN.color.{png,jpg}`, `.depth.png`, `.pose.txt` | PNG u16 mm | `.pose.txt` |
//! | [`DatasetKind::Euroc`] | `mav0/cam0/data.csv`, `mav0/cam0/data/*.png`, `sensor.yaml` | none | `state_groundtruth_estimate0` |
//! | [`DatasetKind::Eth3d`] | TUM layout + `calibration.txt` | PNG u16 / 5000 | `groundtruth.txt` |
//! | [`DatasetKind::ImageFolder`] | `*.png`/`*.jpg`/`*.jpeg`, or a `.txt` list of paths | none | none |
//! | [`DatasetKind::Video`] | a video file, decoded by the `ffmpeg` program (see [`open`]) | none | none |
//!
//! Poses are camera-to-world 4x4 matrices (row-major rows, OpenCV camera axes as in the data
//! sets). Every error names the offending file (and line, for text files); malformed input never
//! panics.
//!
//! ```no_run
//! use std::path::Path;
//! use rust3r_io::datasets::{self, Dataset};
//! let ds = datasets::open(Path::new("../shared/data/redkitchen"), None, 1)?;
//! println!("{}: {} frames, K = {:?}", ds.name(), ds.len(), ds.intrinsics());
//! let frame = ds.frame(0)?;
//! println!("{}x{}", frame.rgb.width(), frame.rgb.height());
//! # Ok::<(), rust3r_io::IoError>(())
//! ```

mod calib;
mod common;
mod euroc;
mod folder;
mod register;
mod sequence;
mod seven_scenes;
mod tum;
mod video;
mod yaml;

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use rust3r_geometry::{PinholeCamera, RadTanDistortion};

use crate::IoError;

pub use calib::SlamCalibration;
pub use common::natural_cmp;
pub use euroc::EurocDataset;
pub use register::{ColourRegistration, register_colour_to_depth};
pub use sequence::Sequence;
pub use tum::{MAX_TIME_DIFFERENCE, tum_intrinsics};
pub use video::VideoOptions;

/// A depth map in metres (`f32`); `0.0` marks pixels without a valid measurement.
pub type DepthImage = image::ImageBuffer<image::Luma<f32>, Vec<f32>>;

/// A 4x4 rigid transform, row-major (`m[row][col]`).
pub type Pose = [[f64; 4]; 4];

/// Reads a camera calibration file, in one of two forms:
///
/// * MASt3R-SLAM's `intrinsics.yaml`: `width: W`, `height: H` and
///   `calibration: [fx, fy, cx, cy]` optionally followed by `k1, k2, p1, p2[, k3]`;
/// * plain text: the numbers `fx fy cx cy [k1 k2 p1 p2 [k3]]` (whitespace or commas, as in
///   ETH3D's `calibration.txt`). The image size is then unknown and `width` / `height` are
///   0; [`open_with`] fills them in from the images.
pub fn read_calibration(path: &Path) -> Result<PinholeCamera, IoError> {
    let text = common::read_text(path)?;
    if text.contains(':') {
        let doc = yaml::MiniYaml::parse(&text);
        let calib = doc.numbers("calibration", path)?;
        let k = calibration_from_numbers(&calib, path, doc.line_of("calibration"))?;
        Ok(k.with_size(doc.unsigned("width", path)?, doc.unsigned("height", path)?))
    } else {
        let mut numbers = Vec::new();
        for (line, content) in common::data_lines(&text) {
            for token in content.split(|c: char| c.is_whitespace() || c == ',') {
                if token.is_empty() {
                    continue;
                }
                numbers.push(common::parse_f64(token, path, line)?);
            }
        }
        calibration_from_numbers(&numbers, path, None)
    }
}

/// `fx fy cx cy [k1 k2 p1 p2 [k3]]` to a camera with an unknown (zero) image size.
fn calibration_from_numbers(
    numbers: &[f64],
    path: &Path,
    line: Option<usize>,
) -> Result<PinholeCamera, IoError> {
    let at = line.map(|l| format!("line {l}: ")).unwrap_or_default();
    if !matches!(numbers.len(), 4 | 8 | 9) {
        return Err(common::malformed(
            path,
            format!(
                "{at}expected 4 numbers (fx fy cx cy), 8 (+ k1 k2 p1 p2) or 9 (+ k3), found {}",
                numbers.len()
            ),
        ));
    }
    if numbers[0] <= 0.0 || numbers[1] <= 0.0 {
        return Err(common::malformed(
            path,
            format!("{at}focal lengths must be positive"),
        ));
    }
    let k = PinholeCamera::new(numbers[0], numbers[1], numbers[2], numbers[3], 0, 0);
    Ok(k.with_distortion(RadTanDistortion::from_slice(&numbers[4..])))
}

/// One frame of a [`Dataset`].
#[derive(Debug, Clone)]
pub struct Frame {
    /// Position of the frame in the data set (after the stride), `0..len()`.
    pub index: usize,
    /// Capture time in seconds (from the data set's timestamps; `frame_number / 30` where the
    /// data set has none).
    pub timestamp: f64,
    /// Colour image (grey images are replicated to three channels).
    pub rgb: image::RgbImage,
    /// Metric depth, when the data set has depth and one is associated with this frame. Its
    /// size and camera are given by [`Dataset::depth_intrinsics`].
    pub depth: Option<DepthImage>,
    /// Ground-truth camera-to-world pose of the colour camera, when known for this frame.
    pub gt_pose: Option<Pose>,
    /// File the colour image was read from (see [`Dataset::colour_resampled`]: `rgb` may be a
    /// resampling of it).
    pub rgb_path: PathBuf,
}

/// A source of frames: an RGB-D or monocular sequence on disk.
///
/// Opening a data set reads its index files (and ground truth) eagerly, so structural problems
/// show up in [`open`]; images are decoded by [`Dataset::frame`].
pub trait Dataset: Send {
    /// Name of the sequence (its folder or file name).
    fn name(&self) -> &str;
    /// Number of frames (after the stride).
    fn len(&self) -> usize;
    /// Whether the data set has no frames.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Calibration of the colour camera, when the data set provides (or was given) one.
    fn intrinsics(&self) -> Option<PinholeCamera>;
    /// Calibration of the depth images, when there are any. For TUM and ETH3D the depth is
    /// registered to the colour camera, so this equals [`Dataset::intrinsics`].
    fn depth_intrinsics(&self) -> Option<PinholeCamera>;
    /// Loads frame `i` (`0..len()`).
    fn frame(&self, i: usize) -> Result<Frame, IoError>;
    /// Whether [`Frame::rgb`] is a resampling of the file at [`Frame::rgb_path`] (colour
    /// registered to the depth camera) rather than that file's pixels: an export that refers to
    /// images by path must then write the delivered images.
    fn colour_resampled(&self) -> bool {
        false
    }
    /// The whole ground-truth trajectory as `(timestamp, camera-to-world)`, independent of the
    /// stride (for trajectory evaluation), or `None` when the data set has none.
    fn ground_truth(&self) -> Option<Vec<(f64, Pose)>>;
}

/// The supported data set layouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DatasetKind {
    /// TUM RGB-D (`rgb.txt`, `depth.txt`, `groundtruth.txt`).
    Tum,
    /// Microsoft 7-Scenes, one sequence folder (`frame-NNNNNN.*`).
    SevenScenes,
    /// EuRoC MAV (`mav0/cam0`).
    Euroc,
    /// ETH3D SLAM (TUM layout plus `calibration.txt`).
    Eth3d,
    /// A folder of images, or a text file listing image paths.
    ImageFolder,
    /// A video file.
    Video,
}

impl DatasetKind {
    /// All kinds, in detection order.
    pub const ALL: [DatasetKind; 6] = [
        Self::Euroc,
        Self::Eth3d,
        Self::Tum,
        Self::SevenScenes,
        Self::ImageFolder,
        Self::Video,
    ];

    /// Short lower-case name (`tum`, `7scenes`, `euroc`, `eth3d`, `images`, `video`), accepted by
    /// [`FromStr`].
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Tum => "tum",
            Self::SevenScenes => "7scenes",
            Self::Euroc => "euroc",
            Self::Eth3d => "eth3d",
            Self::ImageFolder => "images",
            Self::Video => "video",
        }
    }
}

impl fmt::Display for DatasetKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for DatasetKind {
    type Err = String;

    /// Parses `tum`, `7scenes` (also `7-scenes`, `seven_scenes`, `sevenscenes`), `euroc`,
    /// `eth3d`, `images` (also `folder`, `image_folder`) or `video`, case-insensitively.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let norm: String = s
            .chars()
            .filter(|c| *c != '-' && *c != '_')
            .collect::<String>()
            .to_ascii_lowercase();
        Ok(match norm.as_str() {
            "tum" | "tumrgbd" => Self::Tum,
            "7scenes" | "sevenscenes" => Self::SevenScenes,
            "euroc" => Self::Euroc,
            "eth3d" => Self::Eth3d,
            "images" | "folder" | "imagefolder" | "image" => Self::ImageFolder,
            "video" => Self::Video,
            _ => {
                return Err(format!(
                    "unknown data set kind '{s}' (expected tum, 7scenes, euroc, eth3d, images or video)"
                ));
            }
        })
    }
}

/// Options for [`open_with`].
#[derive(Debug, Clone, PartialEq)]
pub struct OpenOptions {
    /// Layout to use; `None` detects it with [`detect`].
    pub kind: Option<DatasetKind>,
    /// Keep every `stride`-th frame (1 keeps all; 0 is an error).
    pub stride: usize,
    /// Colour camera calibration that replaces the data set's own (required for TUM folders
    /// whose name does not say freiburg1/2/3). A `width` or `height` of 0 is taken from the
    /// first image; a non-zero size must match the images. For TUM, ETH3D and 7-Scenes it also
    /// becomes the depth calibration.
    pub calibration: Option<PinholeCamera>,
    /// How video files are decoded (the FFmpeg programs, where frames are cached).
    pub video: VideoOptions,
}

impl Default for OpenOptions {
    fn default() -> Self {
        Self {
            kind: None,
            stride: 1,
            calibration: None,
            video: VideoOptions::default(),
        }
    }
}

/// Opens the data set at `path` (a folder, a video file or a `.txt` image list), detecting its
/// layout unless `kind` is given, and keeping every `stride`-th frame.
///
/// Video files are decoded by the `ffmpeg` program into a reusable folder of frames next to the
/// video (see the `video` module); without FFmpeg, opening one returns
/// [`IoError::Unsupported`] saying how to install it.
pub fn open(
    path: &Path,
    kind: Option<DatasetKind>,
    stride: usize,
) -> Result<Box<dyn Dataset>, IoError> {
    open_with(
        path,
        &OpenOptions {
            kind,
            stride,
            ..OpenOptions::default()
        },
    )
}

/// [`open`] with all options (notably a calibration override).
pub fn open_with(path: &Path, options: &OpenOptions) -> Result<Box<dyn Dataset>, IoError> {
    if options.stride == 0 {
        return Err(common::dataset_error(
            path,
            "the frame stride must be at least 1",
        ));
    }
    let kind = match options.kind {
        Some(kind) => kind,
        None => detect(path)?,
    };
    let stride = options.stride;
    let calib = options.calibration;
    Ok(Box::new(match kind {
        DatasetKind::Tum => tum::open(path, false, stride, calib)?,
        DatasetKind::Eth3d => tum::open(path, true, stride, calib)?,
        DatasetKind::SevenScenes => seven_scenes::open(path, stride, calib)?,
        DatasetKind::Euroc => EurocDataset::open(path, stride, calib)?.into_sequence(),
        DatasetKind::ImageFolder => folder::open(path, stride, calib)?,
        DatasetKind::Video => video::open(path, stride, calib, &options.video)?,
    }))
}

/// Recognises the layout of `path` from its contents:
///
/// * a file: a video (`.mp4 .avi .mov .mkv .webm .m4v`) or a `.txt` list of image paths;
/// * a folder with `mav0/cam0/data.csv` (or `cam0/data.csv`): EuRoC;
/// * `rgb.txt` and `calibration.txt`: ETH3D; `rgb.txt` alone: TUM RGB-D;
/// * `frame-NNNNNN.color.png|jpg`: a 7-Scenes sequence;
/// * any `.png`/`.jpg`/`.jpeg`: an image folder.
///
/// A 7-Scenes scene folder (holding `seq-NN` sub-folders) is reported as an error naming the
/// sequences, since one of them has to be chosen.
pub fn detect(path: &Path) -> Result<DatasetKind, IoError> {
    let meta = std::fs::metadata(path).map_err(|e| IoError::io(path, e))?;
    if meta.is_file() {
        let ext = common::extension(path);
        if video::is_video_extension(&ext) {
            return Ok(DatasetKind::Video);
        }
        if ext == "txt" {
            return Ok(DatasetKind::ImageFolder);
        }
        if common::is_image_extension(&ext) {
            return Err(common::dataset_error(
                path,
                "this is a single image; open the folder that holds the sequence",
            ));
        }
        return Err(common::dataset_error(
            path,
            "cannot tell the data set type of this file (expected a folder, a video or a .txt \
             list of images)",
        ));
    }
    if path.join("mav0/cam0/data.csv").is_file() || path.join("cam0/data.csv").is_file() {
        return Ok(DatasetKind::Euroc);
    }
    if path.join("rgb.txt").is_file() {
        return Ok(if path.join("calibration.txt").is_file() {
            DatasetKind::Eth3d
        } else {
            DatasetKind::Tum
        });
    }
    let names = common::list_dir(path)?;
    if names
        .iter()
        .any(|n| seven_scenes::parse_color_name(n).is_some())
    {
        return Ok(DatasetKind::SevenScenes);
    }
    if names.iter().any(|n| common::is_image_name(n)) {
        return Ok(DatasetKind::ImageFolder);
    }
    let mut seqs: Vec<&String> = names
        .iter()
        .filter(|n| n.starts_with("seq-") && path.join(n).is_dir())
        .collect();
    if !seqs.is_empty() {
        seqs.sort_by(|a, b| natural_cmp(a, b));
        let list: Vec<&str> = seqs.iter().map(|s| s.as_str()).collect();
        return Err(common::dataset_error(
            path,
            format!(
                "this looks like a 7-Scenes scene folder; open one of its sequences ({}), e.g. {}",
                list.join(", "),
                path.join(seqs[0]).display()
            ),
        ));
    }
    Err(common::dataset_error(
        path,
        "cannot tell the data set type: no rgb.txt (TUM/ETH3D), mav0/cam0/data.csv (EuRoC), \
         frame-NNNNNN.color.* (7-Scenes) or .png/.jpg images found",
    ))
}
