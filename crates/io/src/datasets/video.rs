//! Video files: recognised, but not decoded by this build.
//!
//! Decoding common video codecs in Rust needs either FFmpeg (a system library) or bundled C
//! codecs, neither of which this crate takes on. The `video` cargo feature is reserved for such
//! a backend; today it changes nothing and opening a video always reports
//! [`IoError::Unsupported`].

use std::path::Path;

use crate::IoError;

const VIDEO_EXTENSIONS: [&str; 7] = ["mp4", "avi", "mov", "mkv", "webm", "m4v", "mpg"];

/// Whether a lower-case extension belongs to a video container.
pub(crate) fn is_video_extension(ext: &str) -> bool {
    VIDEO_EXTENSIONS.contains(&ext)
}

/// The error returned for every video file.
pub(crate) fn open(path: &Path) -> IoError {
    let hint = if cfg!(feature = "video") {
        "the `video` feature is enabled but has no decoder backend yet"
    } else {
        "this build of rust3r has no video support (cargo feature `video` is off)"
    };
    IoError::Unsupported {
        path: path.to_path_buf(),
        message: format!(
            "cannot read video: {hint}; extract the frames into a folder first, e.g. \
             `ffmpeg -i {} frames/%06d.png`, and open that folder",
            path.display()
        ),
    }
}
