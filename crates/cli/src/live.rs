//! Live view through the rerun SDK (cargo feature `rerun`): `--rerun` streams to a rerun viewer
//! (spawning one from `PATH` if none is listening), `--rerun-save FILE.rrd` records to a file that
//! `rerun FILE.rrd` opens later. Without the feature both flags are a clear error.
#![cfg_attr(not(feature = "rerun"), allow(dead_code))]

use std::path::PathBuf;

use anyhow::Result;

/// Where the live view goes.
#[derive(Clone, Debug)]
pub enum LiveSink {
    /// A rerun viewer (spawned if none is running).
    Viewer,
    /// An `.rrd` recording.
    File(PathBuf),
}

impl LiveSink {
    /// From the `--rerun` / `--rerun-save` flags.
    pub fn from_flags(viewer: bool, file: Option<&PathBuf>) -> Option<Self> {
        match (file, viewer) {
            (Some(f), _) => Some(Self::File(f.clone())),
            (None, true) => Some(Self::Viewer),
            (None, false) => None,
        }
    }
}

/// A rigid camera pose (camera to world) with pinhole intrinsics, for drawing a frustum.
#[derive(Clone, Copy, Debug)]
pub struct CameraView {
    /// Camera centre in the world.
    pub translation: [f32; 3],
    /// Camera-to-world rotation, row-major.
    pub rotation: [[f32; 3]; 3],
    /// The pinhole (focal lengths and image size are drawn).
    pub camera: rust3r_geometry::PinholeCamera,
}

#[cfg(feature = "rerun")]
mod imp {
    use super::*;
    use anyhow::Context;

    /// An open live view.
    pub struct Live {
        rec: rerun::RecordingStream,
    }

    impl Live {
        pub fn open(app: &'static str, sink: &LiveSink) -> Result<Self> {
            let builder = rerun::RecordingStreamBuilder::new(app);
            let rec = match sink {
                LiveSink::Viewer => builder
                    .spawn()
                    .context("--rerun: cannot reach or start a rerun viewer (install one with `cargo install rerun-cli@0.36.3` or `pip install rerun-sdk==0.36.3`)")?,
                LiveSink::File(p) => builder.save(p).with_context(|| format!("--rerun-save: cannot write {}", p.display()))?,
            };
            Ok(Self { rec })
        }

        /// Position on a timeline (`step`, `frame`) for what is logged next.
        pub fn at(&self, timeline: &'static str, i: u64) {
            self.rec.set_time_sequence(timeline, i as i64);
        }

        pub fn scalar(&self, path: &str, v: f64) -> Result<()> {
            Ok(self.rec.log(path, &rerun::Scalars::new([v]))?)
        }

        pub fn image_rgb(&self, path: &str, rgb: &[u8], width: u32, height: u32) -> Result<()> {
            Ok(self.rec.log(
                path,
                &rerun::Image::from_rgb24(rgb.to_vec(), [width, height]),
            )?)
        }

        /// A camera frustum at `path` (its pose) and `path/image` (its pinhole).
        pub fn camera(&self, path: &str, c: &CameraView) -> Result<()> {
            let r = c.rotation;
            // rerun's Mat3x3 is column-major.
            let cols = [
                [r[0][0], r[1][0], r[2][0]],
                [r[0][1], r[1][1], r[2][1]],
                [r[0][2], r[1][2], r[2][2]],
            ];
            self.rec.log(
                path,
                &rerun::Transform3D::from_translation_mat3x3(
                    c.translation,
                    rerun::datatypes::Mat3x3::from(cols),
                ),
            )?;
            let pinhole = rerun::Pinhole::from_focal_length_and_resolution(
                [c.camera.fx as f32, c.camera.fy as f32],
                [c.camera.width as f32, c.camera.height as f32],
            );
            Ok(self.rec.log(format!("{path}/image"), &pinhole)?)
        }

        pub fn points(&self, path: &str, points: &[[f32; 3]], colors: &[[u8; 3]]) -> Result<()> {
            let cols = colors
                .iter()
                .map(|c| rerun::Color::from_rgb(c[0], c[1], c[2]));
            Ok(self.rec.log(
                path,
                &rerun::Points3D::new(points.iter().copied()).with_colors(cols),
            )?)
        }

        pub fn lines(&self, path: &str, strips: &[Vec<[f32; 3]>]) -> Result<()> {
            Ok(self
                .rec
                .log(path, &rerun::LineStrips3D::new(strips.iter().cloned()))?)
        }

        /// Make sure everything logged so far reached the sink.
        pub fn flush(&self) {
            self.rec.flush_blocking().ok();
        }
    }
}

#[cfg(not(feature = "rerun"))]
mod imp {
    use super::*;

    /// Stand-in when rerun support is not compiled in: opening fails with the reason.
    pub enum Live {}

    impl Live {
        pub fn open(_app: &'static str, _sink: &LiveSink) -> Result<Self> {
            anyhow::bail!(
                "--rerun / --rerun-save: this build has no rerun support; rebuild with `cargo build --release --features rust3r-cli/rerun` (README, 'Live view')"
            )
        }
        pub fn at(&self, _timeline: &'static str, _i: u64) {
            match *self {}
        }
        pub fn scalar(&self, _path: &str, _v: f64) -> Result<()> {
            match *self {}
        }
        pub fn image_rgb(&self, _path: &str, _rgb: &[u8], _width: u32, _height: u32) -> Result<()> {
            match *self {}
        }
        pub fn camera(&self, _path: &str, _c: &CameraView) -> Result<()> {
            match *self {}
        }
        pub fn points(&self, _path: &str, _points: &[[f32; 3]], _colors: &[[u8; 3]]) -> Result<()> {
            match *self {}
        }
        pub fn lines(&self, _path: &str, _strips: &[Vec<[f32; 3]>]) -> Result<()> {
            match *self {}
        }
        pub fn flush(&self) {
            match *self {}
        }
    }
}

pub use imp::Live;
