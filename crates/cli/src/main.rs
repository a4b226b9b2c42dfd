//! `rust3r`: dense 3D reconstruction and Gaussian splatting on any GPU.
// Library code returns errors; `expect` states the invariant that makes it unreachable.
#![warn(clippy::unwrap_used)]

mod bench;
mod bench_slam;
mod live;
mod lpips_cmd;
mod mast3r_cmd;
mod progress;
mod render_cmd;
mod run_cmd;
mod slam_cmd;
mod train_cmd;
mod tuning;
mod view_cmd;

use std::path::PathBuf;

use anyhow::Result;
use clap::{Args, Parser, Subcommand};
use rust3r_gpu::{Gpu, GpuOptions, ProfileMode};

#[derive(Parser)]
#[command(
    name = "rust3r",
    version,
    about = "Dense 3D reconstruction and Gaussian splatting on any GPU"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Device selection shared by every GPU command.
#[derive(Args, Clone, Debug)]
pub struct DeviceArgs {
    /// Compute backend: wgpu (Vulkan/Metal/DX12, default) or cuda.
    #[arg(long, default_value = "wgpu")]
    backend: String,
    /// Adapter index as listed by `rust3r info` (default: the best one). With `--backend cuda`,
    /// the CUDA device index.
    #[arg(long)]
    adapter: Option<usize>,
    /// Tuning file (JSON; docs/tuning.md): kernel switches, CUDA settings, FFmpeg paths.
    /// Default: the file named by RUST3R_TUNING, if any.
    #[arg(long, value_name = "FILE")]
    tuning: Option<PathBuf>,
    /// Per-phase timing: off, host (synchronised intervals) or device (the device's own time).
    /// Overrides RUST3R_PROFILE and the tuning file.
    #[arg(long, value_name = "MODE")]
    profile: Option<ProfileMode>,
}

impl DeviceArgs {
    /// The run's switches: defaults, the tuning file, the environment, then the flags.
    pub fn tuning(&self) -> Result<tuning::Tuning> {
        tuning::Tuning::resolve(self.tuning.as_deref(), self.profile, tuning::Env::get())
    }

    /// The device options of `--backend` / `--adapter` with the run's adapter tuning.
    pub fn options(&self) -> Result<GpuOptions> {
        Ok(GpuOptions {
            backend: self.backend.parse()?,
            adapter: self.adapter,
            poison: false,
            tuning: self.tuning()?.gpu,
        })
    }

    pub fn open(&self) -> Result<Gpu> {
        let gpu = Gpu::new(&self.options()?)?;
        tracing::info!("device: {}", gpu.name());
        Ok(gpu)
    }
}

#[derive(Subcommand)]
enum Command {
    /// List backends, adapters and their limits.
    Info,
    /// Render a splat file to a PNG.
    Render(render_cmd::RenderArgs),
    /// Serve a browser viewer of a splat file or a train / slam output folder, rendered here.
    View(view_cmd::ViewArgs),
    /// Train a Gaussian splat on a posed-image scene (COLMAP, transforms.json, NeRF-synthetic).
    Train(Box<train_cmd::TrainArgs>),
    /// Convert between splat formats (by extension: .ply, .splat, .spz, .sog; .compressed.ply is read-only).
    Convert { input: PathBuf, output: PathBuf },
    /// Absolute trajectory error of an estimate against ground truth (TUM or EuRoC files),
    /// computed like evo (`evo_ape`): timestamp association within 0.01 s, then alignment.
    EvalAte {
        estimate: PathBuf,
        groundtruth: PathBuf,
        /// Alignment before measuring: se3, sim3 or none.
        #[arg(long, default_value = "se3")]
        align: String,
    },
    /// Convert a MASt3R checkpoint (.pth or safetensors) to a memory-mappable safetensors file.
    ConvertCheckpoint { input: PathBuf, output: PathBuf },
    /// Run the MASt3R network on a parity inputs file (shared/fixtures/mast3r_tiny layout).
    Mast3rInfer(mast3r_cmd::InferArgs),
    /// LPIPS v0.1 between two images of the same size, from torchvision + lpips weight files
    /// (the `lpips` package's LPIPS(net=..., version='0.1') with normalize=True).
    Lpips(lpips_cmd::LpipsArgs),
    /// Dense RGB-D SLAM: poses of every frame, keyframes, point cloud, nerfstudio export.
    Slam(slam_cmd::SlamArgs),
    /// Capture to splat: RGB-D SLAM, then training on its poses with sensor depth, exposure and
    /// pose refinement; writes the splat, refined trajectory, exports and evaluation.
    Run(Box<run_cmd::RunArgs>),
    /// Benchmarks (not tests): timing and peak memory.
    Bench {
        #[command(subcommand)]
        which: bench::BenchCommand,
    },
}

/// Mesa's Vulkan drivers print "XDG_RUNTIME_DIR is invalid or not set in the environment" for
/// every device they probe when the variable is missing (headless servers, containers, CI),
/// although rendering needs no display. Point it at a private directory of ours then.
#[cfg(unix)]
fn ensure_runtime_dir() {
    use std::os::unix::fs::PermissionsExt;
    let set =
        std::env::var_os("XDG_RUNTIME_DIR").is_some_and(|d| std::path::Path::new(&d).is_dir());
    if set {
        return;
    }
    let user = std::env::var("USER").unwrap_or_else(|_| "user".into());
    let dir = std::env::temp_dir().join(format!("rust3r-runtime-{user}"));
    if std::fs::create_dir_all(&dir).is_ok()
        && std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).is_ok()
    {
        // SAFETY: called first thing in `main`, before any other thread exists.
        unsafe { std::env::set_var("XDG_RUNTIME_DIR", &dir) };
    }
}

#[cfg(not(unix))]
fn ensure_runtime_dir() {}

fn main() {
    ensure_runtime_dir();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,rust3r=info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    if let Err(e) = run(Cli::parse()) {
        // Library errors often quote their source already: print each cause once.
        let mut msg = String::new();
        for cause in e.chain() {
            let text = cause.to_string();
            if !msg.contains(&text) {
                if !msg.is_empty() {
                    msg.push_str(": ");
                }
                msg.push_str(&text);
            }
        }
        eprintln!("error: {msg}");
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Info => info(),
        Command::Render(args) => render_cmd::run(&args),
        Command::View(args) => view_cmd::run(&args),
        Command::Train(args) => train_cmd::run(&args),
        Command::Convert { input, output } => {
            let splats = rust3r_io::load_splats(&input)?;
            rust3r_io::save_splats(&output, &splats)?;
            println!(
                "{} -> {}: {} splats, SH degree {}",
                input.display(),
                output.display(),
                splats.len(),
                splats.sh_degree
            );
            Ok(())
        }
        Command::EvalAte {
            estimate,
            groundtruth,
            align,
        } => {
            let align: rust3r_slam::Align = align.parse().map_err(|e| anyhow::anyhow!("{e}"))?;
            let report = rust3r_slam::eval_ate(&estimate, &groundtruth, align)?;
            println!("{report}");
            println!("ATE RMSE: {:.6} m", report.rmse);
            Ok(())
        }
        Command::ConvertCheckpoint { input, output } => {
            let ckpt = rust3r_mast3r::Checkpoint::load(&input)?;
            ckpt.save_safetensors(&output)?;
            println!(
                "{} -> {}: {} tensors",
                input.display(),
                output.display(),
                ckpt.tensors().len()
            );
            Ok(())
        }
        Command::Mast3rInfer(args) => mast3r_cmd::infer(&args),
        Command::Lpips(args) => lpips_cmd::run(&args),
        Command::Slam(args) => slam_cmd::run(&args),
        Command::Run(args) => run_cmd::run(&args),
        Command::Bench { which } => bench::run(which),
    }
}

fn info() -> Result<()> {
    println!("rust3r {}", env!("CARGO_PKG_VERSION"));
    if rust3r_gpu::CUDA_COMPILED {
        println!("backends compiled in: wgpu (WGSL: Vulkan, Metal, DX12, GL), cuda (NVRTC)");
    } else {
        println!("backends compiled in: wgpu (WGSL: Vulkan, Metal, DX12, GL)");
    }
    match rust3r_gpu::list_cuda_devices() {
        Ok(devs) if devs.is_empty() => println!("cuda: no CUDA device found"),
        Ok(devs) => {
            for d in devs {
                println!(
                    "cuda [{}] {} (compute capability {}.{}, {} MiB)",
                    d.index,
                    d.name,
                    d.compute_capability.0,
                    d.compute_capability.1,
                    d.total_memory >> 20
                );
            }
        }
        Err(e) => println!("cuda: {e}"),
    }
    let adapters = rust3r_gpu::list_adapters();
    if adapters.is_empty() {
        println!("no adapters found. On Linux without a GPU: apt-get install mesa-vulkan-drivers");
    }
    for a in &adapters {
        println!(
            "[{}] {} ({}, {}) driver: {}\n    max buffer {} MiB, max storage binding {} MiB, workgroup memory {} KiB, subgroups {}, f16 {}, f32 atomics {}",
            a.index,
            a.name,
            a.backend,
            a.device_type,
            a.driver,
            a.max_buffer_size >> 20,
            a.max_storage_binding_size >> 20,
            a.max_workgroup_storage_size >> 10,
            a.subgroups,
            a.shader_f16,
            a.f32_atomics,
        );
    }
    match Gpu::default_device() {
        Ok(gpu) => println!("default device: {}", gpu.name()),
        Err(e) => println!("default device: unavailable ({e})"),
    }
    Ok(())
}

/// Parse "r,g,b" in [0, 1].
pub fn parse_rgb(s: &str) -> Result<[f32; 3]> {
    Ok(rust3r_splat::parse_background(s)?)
}
