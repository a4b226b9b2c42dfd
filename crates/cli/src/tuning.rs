//! Every tuning switch of a run, built once here from the defaults, a tuning file (JSON), the few
//! environment variables users need and the command's flags, then passed to the libraries as
//! typed options (docs/tuning.md has the table). Nothing else in rust3r reads `RUST3R_*`.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{Context, Result, bail};
use rust3r_gpu::{GpuTuning, ProfileMode, tuning::parse_min_blocks};
use rust3r_io::datasets::VideoOptions;
use rust3r_splat::RasterTuning;
use serde::Deserialize;

/// The switches of one run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Tuning {
    pub gpu: GpuTuning,
    pub raster: RasterTuning,
    pub video: VideoOptions,
}

/// A tuning file: every section and key optional (docs/tuning.md).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TuningFile {
    #[serde(default)]
    gpu: GpuSection,
    #[serde(default)]
    raster: RasterSection,
    #[serde(default)]
    video: VideoSection,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct GpuSection {
    subgroups: Option<bool>,
    f32_atomics: Option<bool>,
    checked_kernels: Option<bool>,
    profile: Option<String>,
    wgpu_tasks_per_submit: Option<usize>,
    #[serde(default)]
    cuda: CudaSection,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct CudaSection {
    cublas: Option<bool>,
    tf32: Option<bool>,
    tma: Option<bool>,
    min_blocks: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RasterSection {
    vec_shared: Option<bool>,
    backward_batch_cap: Option<usize>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct VideoSection {
    ffmpeg: Option<PathBuf>,
    ffprobe: Option<PathBuf>,
    frames_dir: Option<PathBuf>,
}

/// The environment variables rust3r reads, taken once per process.
#[derive(Clone, Debug, Default)]
pub struct Env {
    /// `RUST3R_TUNING`: the tuning file when `--tuning` is not given.
    pub tuning: Option<PathBuf>,
    /// `RUST3R_PROFILE`: `0` off, `device` device time, anything else host time.
    pub profile: Option<String>,
    /// `RUST3R_CUDA_TF32`: `0` keeps binary32 products in binary32.
    pub cuda_tf32: Option<String>,
    /// `CUBECL_WGPU_MAX_TASKS` is set: CubeCL's configuration decides the dispatches per wgpu
    /// submission.
    pub cubecl_max_tasks: bool,
    /// `RUST3R_FFMPEG`, `RUST3R_FFPROBE`, `RUST3R_VIDEO_FRAMES`.
    pub ffmpeg: Option<PathBuf>,
    pub ffprobe: Option<PathBuf>,
    pub video_frames: Option<PathBuf>,
    /// Retired `RUST3R_*` variables that are set, with what replaces each.
    pub retired: Vec<(&'static str, &'static str)>,
}

/// Retired variables and their replacements (warned about, not read).
const RETIRED: [(&str, &str); 8] = [
    ("RUST3R_NO_PLANES", "gpu.subgroups = false"),
    ("RUST3R_NO_F32_ATOMICS", "gpu.f32_atomics = false"),
    ("RUST3R_CHECKED_KERNELS", "gpu.checked_kernels = true"),
    ("RUST3R_CUBLAS", "gpu.cuda.cublas = false"),
    ("RUST3R_CUDA_TMA", "gpu.cuda.tma = true"),
    (
        "RUST3R_CUDA_MIN_BLOCKS",
        "gpu.cuda.min_blocks = \"name:blocks\"",
    ),
    ("RUST3R_VEC_SHARED", "raster.vec_shared"),
    ("RUST3R_BACKWARD_BATCH", "raster.backward_batch_cap"),
];

impl Env {
    /// Reads the process environment (once; later calls return the same values).
    pub fn get() -> &'static Env {
        static ENV: OnceLock<Env> = OnceLock::new();
        ENV.get_or_init(|| {
            let path = |k: &str| std::env::var_os(k).map(PathBuf::from);
            let text = |k: &str| std::env::var(k).ok();
            let retired: Vec<_> = RETIRED
                .into_iter()
                .filter(|(k, _)| std::env::var_os(k).is_some())
                .collect();
            for (var, instead) in &retired {
                tracing::warn!(
                    "{var} is no longer read: set {instead} in a tuning file (--tuning FILE, docs/tuning.md)"
                );
            }
            Env {
                tuning: path("RUST3R_TUNING"),
                profile: text("RUST3R_PROFILE"),
                cuda_tf32: text("RUST3R_CUDA_TF32"),
                cubecl_max_tasks: std::env::var_os("CUBECL_WGPU_MAX_TASKS").is_some(),
                ffmpeg: path("RUST3R_FFMPEG"),
                ffprobe: path("RUST3R_FFPROBE"),
                video_frames: path("RUST3R_VIDEO_FRAMES"),
                retired,
            }
        })
    }
}

impl Tuning {
    /// Defaults, then the tuning file (`file`, else `RUST3R_TUNING`), then the environment, then
    /// `profile` (the `--profile` flag).
    pub fn resolve(file: Option<&Path>, profile: Option<ProfileMode>, env: &Env) -> Result<Self> {
        let mut t = Tuning::default();
        if let Some(path) = file.or(env.tuning.as_deref()) {
            t.apply_file(path)?;
        }
        if let Some(v) = &env.profile {
            // As before: `0` off, `device` device time, any other value host time.
            t.gpu.profile = match v.as_str() {
                "0" => ProfileMode::Off,
                "device" => ProfileMode::Device,
                _ => ProfileMode::Host,
            };
        }
        if env.cubecl_max_tasks {
            t.gpu.wgpu_tasks_per_submit = None;
        }
        if let Some(v) = &env.cuda_tf32 {
            t.gpu.cuda.tf32 = v != "0";
        }
        if let Some(p) = &env.ffmpeg {
            t.video.ffmpeg = p.clone();
        }
        if let Some(p) = &env.ffprobe {
            t.video.ffprobe = p.clone();
        }
        if let Some(p) = &env.video_frames {
            t.video.frames_dir = Some(p.clone());
        }
        if let Some(p) = profile {
            t.gpu.profile = p;
        }
        Ok(t)
    }

    /// Applies the keys a tuning file sets.
    fn apply_file(&mut self, path: &Path) -> Result<()> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the tuning file {}", path.display()))?;
        let f: TuningFile = serde_json::from_str(&text)
            .with_context(|| format!("{}: not a tuning file (docs/tuning.md)", path.display()))?;
        let c = &mut self.gpu.cuda;
        set(&mut c.cublas, f.gpu.cuda.cublas);
        set(&mut c.tf32, f.gpu.cuda.tf32);
        set(&mut c.tma, f.gpu.cuda.tma);
        if let Some(spec) = &f.gpu.cuda.min_blocks {
            c.min_blocks = parse_min_blocks(spec).with_context(|| format!("{}", path.display()))?;
        }
        let g = &mut self.gpu;
        set(&mut g.subgroups, f.gpu.subgroups);
        set(&mut g.f32_atomics, f.gpu.f32_atomics);
        set(&mut g.checked_kernels, f.gpu.checked_kernels);
        if let Some(n) = f.gpu.wgpu_tasks_per_submit {
            if n == 0 {
                bail!(
                    "{}: gpu.wgpu_tasks_per_submit must be at least 1",
                    path.display()
                );
            }
            g.wgpu_tasks_per_submit = Some(n);
        }
        if let Some(p) = &f.gpu.profile {
            g.profile = p.parse().with_context(|| format!("{}", path.display()))?;
        }
        if let Some(v) = f.raster.vec_shared {
            self.raster.vec_shared = Some(v);
        }
        if let Some(cap) = f.raster.backward_batch_cap {
            if !matches!(cap, 4 | 8 | 16) {
                bail!(
                    "{}: raster.backward_batch_cap must be 4, 8 or 16, found {cap}",
                    path.display()
                );
            }
            self.raster.backward_batch_cap = Some(cap);
        }
        set(&mut self.video.ffmpeg, f.video.ffmpeg);
        set(&mut self.video.ffprobe, f.video.ffprobe);
        if let Some(d) = f.video.frames_dir {
            self.video.frames_dir = Some(d);
        }
        Ok(())
    }
}

fn set<T>(slot: &mut T, value: Option<T>) {
    if let Some(v) = value {
        *slot = v;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tuning.json");
        std::fs::write(&path, text).unwrap();
        (dir, path)
    }

    #[test]
    fn defaults_without_file_or_environment() {
        let t = Tuning::resolve(None, None, &Env::default()).unwrap();
        assert_eq!(t, Tuning::default());
        assert!(t.gpu.subgroups && t.gpu.f32_atomics && !t.gpu.checked_kernels);
        assert!(t.gpu.cuda.cublas && t.gpu.cuda.tf32 && !t.gpu.cuda.tma);
        assert_eq!(t.gpu.wgpu_tasks_per_submit, Some(4));
        assert_eq!(t.gpu.profile, ProfileMode::Off);
        assert_eq!(t.video.ffmpeg, PathBuf::from("ffmpeg"));
    }

    #[test]
    fn file_then_environment_then_flag() {
        let (_d, path) = file(
            r#"{"gpu": {"subgroups": false, "checked_kernels": true, "profile": "device",
                "wgpu_tasks_per_submit": 32,
                "cuda": {"tf32": false, "tma": true, "min_blocks": "rasterize_backward:0, x:2"}},
               "raster": {"vec_shared": true, "backward_batch_cap": 8},
               "video": {"ffmpeg": "/opt/ff/ffmpeg", "frames_dir": "/tmp/frames"}}"#,
        );
        let t = Tuning::resolve(Some(&path), None, &Env::default()).unwrap();
        assert!(!t.gpu.subgroups && t.gpu.f32_atomics && t.gpu.checked_kernels);
        assert_eq!(t.gpu.profile, ProfileMode::Device);
        assert_eq!(t.gpu.wgpu_tasks_per_submit, Some(32));
        assert!(!t.gpu.cuda.tf32 && t.gpu.cuda.tma && t.gpu.cuda.cublas);
        assert_eq!(
            t.gpu.cuda.min_blocks,
            [("rasterize_backward".to_string(), 0), ("x".to_string(), 2)]
        );
        assert_eq!(t.raster.vec_shared, Some(true));
        assert_eq!(t.raster.backward_batch_cap, Some(8));
        assert_eq!(t.video.ffmpeg, PathBuf::from("/opt/ff/ffmpeg"));
        assert_eq!(t.video.ffprobe, PathBuf::from("ffprobe"));
        assert_eq!(t.video.frames_dir, Some(PathBuf::from("/tmp/frames")));

        // The environment overrides the file, the flag both; RUST3R_TUNING names the file.
        let env = Env {
            tuning: Some(path.clone()),
            profile: Some("1".into()),
            cuda_tf32: Some("1".into()),
            ffprobe: Some("/usr/bin/ffprobe".into()),
            cubecl_max_tasks: true,
            ..Env::default()
        };
        let t = Tuning::resolve(None, None, &env).unwrap();
        assert!(!t.gpu.subgroups, "file named by RUST3R_TUNING");
        assert_eq!(
            t.gpu.wgpu_tasks_per_submit, None,
            "CUBECL_WGPU_MAX_TASKS decides"
        );
        assert_eq!(t.gpu.profile, ProfileMode::Host);
        assert!(t.gpu.cuda.tf32);
        assert_eq!(t.video.ffprobe, PathBuf::from("/usr/bin/ffprobe"));
        let t = Tuning::resolve(None, Some(ProfileMode::Off), &env).unwrap();
        assert_eq!(t.gpu.profile, ProfileMode::Off);
        let env = Env {
            profile: Some("device".into()),
            ..Env::default()
        };
        let t = Tuning::resolve(None, None, &env).unwrap();
        assert_eq!(t.gpu.profile, ProfileMode::Device);
    }

    /// The example in docs/tuning.md is a valid file that sets what it shows.
    #[test]
    fn the_documented_example_parses() {
        let doc = include_str!("../../../docs/tuning.md");
        let start = doc.find("```json\n").expect("a JSON example") + "```json\n".len();
        let end = start + doc[start..].find("```").expect("the example's end");
        let (_d, path) = file(&doc[start..end]);
        let t = Tuning::resolve(Some(&path), None, &Env::default()).unwrap();
        // The example's min-blocks rule is the one the backward rasterizer sets itself.
        let mut gpu = GpuTuning::default();
        gpu.cuda.min_blocks = vec![("rasterize_backward".into(), 4)];
        assert_eq!(t.gpu, gpu);
        assert_eq!(t.raster.vec_shared, Some(true));
        assert_eq!(t.raster.backward_batch_cap, Some(16));
        assert_eq!(t.video.frames_dir, Some(PathBuf::from("/tmp/frames")));
    }

    #[test]
    fn bad_files_are_errors_naming_the_file() {
        for (text, says) in [
            (r#"{"gpu": {"subgroup": false}}"#, "unknown field"),
            (r#"{"raster": {"backward_batch_cap": 5}}"#, "4, 8 or 16"),
            (r#"{"gpu": {"wgpu_tasks_per_submit": 0}}"#, "at least 1"),
            (r#"{"gpu": {"profile": "sometimes"}}"#, "profile mode"),
            (
                r#"{"gpu": {"cuda": {"min_blocks": "rasterize_backward"}}}"#,
                "name:blocks",
            ),
            ("not json", "not a tuning file"),
        ] {
            let (_d, path) = file(text);
            let e = format!(
                "{:#}",
                Tuning::resolve(Some(&path), None, &Env::default()).unwrap_err()
            );
            assert!(e.contains("tuning.json") && e.contains(says), "{text}: {e}");
        }
        let e = Tuning::resolve(
            Some(Path::new("/no/such/tuning.json")),
            None,
            &Env::default(),
        )
        .unwrap_err();
        assert!(format!("{e:#}").contains("/no/such/tuning.json"), "{e:#}");
    }
}
