//! Video files, decoded by the `ffmpeg` program (run as a separate process, found on `PATH` or
//! where [`VideoOptions`] says): nothing is linked, so every build reads videos wherever FFmpeg
//! is installed (`apt install ffmpeg`, `brew install ffmpeg`, `winget install ffmpeg`).
//!
//! Opening a video extracts every frame once, losslessly, into a folder of PNGs next to it
//! (`clip.mp4.frames/`, or `<frames_dir>/clip.mp4.frames` with [`VideoOptions::frames_dir`], or
//! the system temporary folder when the video's folder is read-only), with a list file of
//! `timestamp path` lines (frame times from the stream's frame rate). The folder is reused while
//! the video's size and modification time match; extraction goes to a temporary sibling that is
//! renamed into place only when complete, so an interrupted run never leaves a partial cache.
//! The frames then load as a `.txt` image list (every `stride`-th frame), so the
//! colour paths written by SLAM's exports stay valid after the run.

use std::path::{Path, PathBuf};
use std::process::Command;

use rust3r_geometry::PinholeCamera;

use super::common::dataset_error;
use super::sequence::Sequence;
use crate::IoError;

const VIDEO_EXTENSIONS: [&str; 7] = ["mp4", "avi", "mov", "mkv", "webm", "m4v", "mpg"];

/// Whether a lower-case extension belongs to a video container.
pub(crate) fn is_video_extension(ext: &str) -> bool {
    VIDEO_EXTENSIONS.contains(&ext)
}

/// How videos are decoded and where their frames are kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VideoOptions {
    /// The `ffmpeg` program (default: `ffmpeg`, found on `PATH`).
    pub ffmpeg: PathBuf,
    /// The `ffprobe` program (default: `ffprobe`, found on `PATH`).
    pub ffprobe: PathBuf,
    /// Folder that holds the frame caches (`<frames_dir>/clip.mp4.frames`); `None` keeps each
    /// next to its video (or in the system temporary folder when that is read-only).
    pub frames_dir: Option<PathBuf>,
}

impl Default for VideoOptions {
    fn default() -> Self {
        Self {
            ffmpeg: PathBuf::from("ffmpeg"),
            ffprobe: PathBuf::from("ffprobe"),
            frames_dir: None,
        }
    }
}

/// Runs `cmd`, returning stdout; errors name the video and quote the tool's last words.
fn run(mut cmd: Command, video: &Path, what: &str) -> Result<String, IoError> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    let out = cmd.output().map_err(|e| IoError::Unsupported {
        path: video.to_path_buf(),
        message: format!(
            "cannot read video: running `{program}` failed ({e}); install FFmpeg (apt install ffmpeg, brew install ffmpeg, winget install ffmpeg) or name the programs (rust3r: RUST3R_FFMPEG / RUST3R_FFPROBE or the tuning file's video.ffmpeg / video.ffprobe), or extract the frames yourself (`ffmpeg -i {} frames/%06d.png`) and open that folder",
            video.display()
        ),
    })?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().rev().take(3).collect();
        return Err(dataset_error(
            video,
            format!(
                "{what} failed: {}",
                tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
            ),
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Frames per second of the first video stream (`avg_frame_rate`, else `r_frame_rate`).
fn frame_rate(video: &Path, opts: &VideoOptions) -> Result<f64, IoError> {
    let mut cmd = Command::new(&opts.ffprobe);
    cmd.args([
        "-v",
        "error",
        "-select_streams",
        "v:0",
        "-show_entries",
        "stream=avg_frame_rate,r_frame_rate",
        "-of",
        "default=nw=1:nk=1",
    ])
    .arg(video);
    let text = run(cmd, video, "ffprobe (reading the frame rate)")?;
    let parse = |s: &str| -> Option<f64> {
        let (n, d) = s.trim().split_once('/').unwrap_or((s.trim(), "1"));
        let v = n.parse::<f64>().ok()? / d.parse::<f64>().ok()?;
        (v.is_finite() && v > 0.0).then_some(v)
    };
    text.lines().find_map(parse).ok_or_else(|| {
        dataset_error(
            video,
            "no video stream with a frame rate (ffprobe found none)",
        )
    })
}

/// `size-mtime` of the video, to know whether a frame cache belongs to it.
fn signature(video: &Path) -> Result<String, IoError> {
    let m = std::fs::metadata(video).map_err(|e| IoError::io(video, e))?;
    let mtime = m
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos());
    Ok(format!("{}-{mtime}", m.len()))
}

fn cache_dir(video: &Path, opts: &VideoOptions) -> PathBuf {
    let name = format!(
        "{}.frames",
        video
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "video".into())
    );
    match &opts.frames_dir {
        Some(root) => root.join(name),
        None => video.with_file_name(name),
    }
}

/// Extracts (or reuses) the frames of `video` and returns the list file.
fn extract(video: &Path, dir: &Path, opts: &VideoOptions) -> Result<PathBuf, IoError> {
    let sig = signature(video)?;
    let stem = video
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "video".into());
    let list = dir.join(format!("{stem}.txt"));
    let marker = dir.join(".rust3r-video");
    if std::fs::read_to_string(&marker).is_ok_and(|s| s.trim() == sig) && list.is_file() {
        return Ok(list);
    }
    let fps = frame_rate(video, opts)?;
    let parent = dir.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).map_err(|e| IoError::io(parent, e))?;
    let tmp = parent.join(format!(
        ".{}.partial-{}",
        dir.file_name().unwrap_or_default().to_string_lossy(),
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).map_err(|e| IoError::io(&tmp, e))?;
    let result = (|| {
        let mut cmd = Command::new(&opts.ffmpeg);
        cmd.args(["-v", "error", "-nostdin", "-y", "-i"])
            .arg(video)
            .args(["-map", "0:v:0", "-fps_mode", "passthrough"])
            .arg(tmp.join("%06d.png"));
        run(cmd, video, "ffmpeg (extracting the frames)")?;
        let mut names: Vec<String> = std::fs::read_dir(&tmp)
            .map_err(|e| IoError::io(&tmp, e))?
            .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
            .filter(|n| n.ends_with(".png"))
            .collect();
        names.sort();
        if names.is_empty() {
            return Err(dataset_error(video, "ffmpeg produced no frames"));
        }
        let text: String = names
            .iter()
            .enumerate()
            .map(|(i, n)| format!("{:.6} {n}\n", i as f64 / fps))
            .collect();
        std::fs::write(tmp.join(format!("{stem}.txt")), text).map_err(|e| IoError::io(&tmp, e))?;
        std::fs::write(tmp.join(".rust3r-video"), &sig).map_err(|e| IoError::io(&tmp, e))?;
        let _ = std::fs::remove_dir_all(dir);
        std::fs::rename(&tmp, dir).map_err(|e| IoError::io(dir, e))
    })();
    if result.is_err() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    result.map(|_| list)
}

/// Opens a video as a monocular sequence (see the module docs).
pub(crate) fn open(
    video: &Path,
    stride: usize,
    calibration: Option<PinholeCamera>,
    opts: &VideoOptions,
) -> Result<Sequence, IoError> {
    if !video.is_file() {
        return Err(dataset_error(video, "no such video file"));
    }
    let dir = cache_dir(video, opts);
    let list = match extract(video, &dir, opts) {
        // A read-only folder: extract into the temporary folder instead.
        Err(IoError::Io { .. }) if opts.frames_dir.is_none() => {
            let name = dir.file_name().unwrap_or_default().to_owned();
            let tmp = std::env::temp_dir().join("rust3r-video").join(name);
            extract(video, &tmp, opts)?
        }
        other => other?,
    };
    super::folder::open(&list, stride, calibration)
}
