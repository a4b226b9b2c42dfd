//! Video files, decoded by the `ffmpeg` program (run as a separate process, found on `PATH` or
//! through `RUST3R_FFMPEG` / `RUST3R_FFPROBE`): nothing is linked, so every build reads videos
//! wherever FFmpeg is installed (`apt install ffmpeg`, `brew install ffmpeg`,
//! `winget install ffmpeg`).
//!
//! Opening a video extracts every frame once, losslessly, into a folder of PNGs next to it
//! (`clip.mp4.frames/`, or `RUST3R_VIDEO_FRAMES/<name>` when that variable is set, or the system
//! temporary folder when the video's folder is read-only), with a list file of
//! `timestamp path` lines (frame times from the stream's frame rate). The folder is reused while
//! the video's size and modification time match; extraction goes to a temporary sibling that is
//! renamed into place only when complete, so an interrupted run never leaves a partial cache.
//! The frames then load as an [`ImageFolderDataset`] list (every `stride`-th frame), so the
//! colour paths written by SLAM's exports stay valid after the run.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::Intrinsics;
use super::common::dataset_error;
use super::folder::ImageFolderDataset;
use crate::IoError;

const VIDEO_EXTENSIONS: [&str; 7] = ["mp4", "avi", "mov", "mkv", "webm", "m4v", "mpg"];

/// Whether a lower-case extension belongs to a video container.
pub(crate) fn is_video_extension(ext: &str) -> bool {
    VIDEO_EXTENSIONS.contains(&ext)
}

fn tool(var: &str, name: &str) -> PathBuf {
    std::env::var_os(var)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(name))
}

/// Runs `cmd`, returning stdout; errors name the video and quote the tool's last words.
fn run(mut cmd: Command, video: &Path, what: &str) -> Result<String, IoError> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    let out = cmd.output().map_err(|e| IoError::Unsupported {
        path: video.to_path_buf(),
        message: format!(
            "cannot read video: running `{program}` failed ({e}); install FFmpeg (apt install ffmpeg, brew install ffmpeg, winget install ffmpeg) or set RUST3R_FFMPEG / RUST3R_FFPROBE, or extract the frames yourself (`ffmpeg -i {} frames/%06d.png`) and open that folder",
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
fn frame_rate(video: &Path) -> Result<f64, IoError> {
    let mut cmd = Command::new(tool("RUST3R_FFPROBE", "ffprobe"));
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

fn cache_dir(video: &Path) -> PathBuf {
    let name = format!(
        "{}.frames",
        video
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "video".into())
    );
    match std::env::var_os("RUST3R_VIDEO_FRAMES") {
        Some(root) => PathBuf::from(root).join(name),
        None => video.with_file_name(name),
    }
}

/// Extracts (or reuses) the frames of `video` and returns the list file.
fn extract(video: &Path, dir: &Path) -> Result<PathBuf, IoError> {
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
    let fps = frame_rate(video)?;
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
        let mut cmd = Command::new(tool("RUST3R_FFMPEG", "ffmpeg"));
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
    calibration: Option<Intrinsics>,
) -> Result<ImageFolderDataset, IoError> {
    if !video.is_file() {
        return Err(dataset_error(video, "no such video file"));
    }
    let dir = cache_dir(video);
    let list = match extract(video, &dir) {
        // A read-only folder: extract into the temporary folder instead.
        Err(IoError::Io { .. }) if std::env::var_os("RUST3R_VIDEO_FRAMES").is_none() => {
            let name = dir.file_name().unwrap_or_default().to_owned();
            extract(video, &std::env::temp_dir().join("rust3r-video").join(name))?
        }
        other => other?,
    };
    ImageFolderDataset::open(&list, stride, calibration)
}
