//! `rust3r render`.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Args;
use rust3r_splat::{Camera, GpuSplats, RenderOptions, render_chunks};

use crate::DeviceArgs;

#[derive(Args, Debug)]
pub struct RenderArgs {
    /// Splat file (.ply, .splat, .spz, .compressed.ply).
    splats: PathBuf,
    /// Output PNG.
    #[arg(long)]
    out: PathBuf,
    /// Image width (ignored with --camera).
    #[arg(long, default_value_t = 1280)]
    width: u32,
    /// Image height (ignored with --camera).
    #[arg(long, default_value_t = 720)]
    height: u32,
    /// Camera JSON: {"fx","fy","cx","cy","width","height","world_to_camera": 4x4 row-major}.
    #[arg(long)]
    camera: Option<PathBuf>,
    /// Background colour r,g,b in [0, 1].
    #[arg(long, default_value = "0,0,0")]
    background: String,
    /// Antialiased (Mip-Splatting style) rendering.
    #[arg(long)]
    antialiased: bool,
    /// SH degree to evaluate (default: all the file has).
    #[arg(long)]
    sh_degree: Option<u32>,
    #[command(flatten)]
    device: DeviceArgs,
}

pub fn load_camera(path: &Path) -> Result<Camera> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read camera {}", path.display()))?;
    Camera::from_json(&text).with_context(|| format!("{}", path.display()))
}

/// Write an RGB float image as PNG, atomically (temp file + rename).
pub fn write_png(path: &Path, rgb: &[f32], width: u32, height: u32) -> Result<()> {
    let bytes: Vec<u8> = rgb
        .iter()
        .map(|v| (v.clamp(0.0, 1.0) * 255.0 + 0.5) as u8)
        .collect();
    let img = image::RgbImage::from_raw(width, height, bytes)
        .context("image buffer has the wrong size")?;
    if let Some(dir) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    rust3r_io::atomic::write_atomic_with(path, |w| {
        img.write_to(w, image::ImageFormat::Png)
            .map_err(std::io::Error::other)
    })
    .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

pub fn run(args: &RenderArgs) -> Result<()> {
    let background = crate::parse_rgb(&args.background)?;
    let splats = rust3r_io::load_splats(&args.splats)?;
    anyhow::ensure!(
        !splats.is_empty(),
        "{}: no splats in the file",
        args.splats.display()
    );
    let camera = match &args.camera {
        Some(p) => load_camera(p)?,
        None => {
            anyhow::ensure!(
                args.width > 0 && args.height > 0,
                "image size must be non-zero"
            );
            Camera::default_for_points(&splats.means, args.width, args.height)
        }
    };
    let gpu = args.device.open()?;
    // Split into several buffers past the adapter's binding limit (wgpu: 2 GiB).
    let gpu_splats = GpuSplats::chunks_from_host(&gpu, &splats, None)?;
    let opts = RenderOptions {
        background,
        antialiased: args.antialiased,
        sh_degree: args.sh_degree,
        forward_only: true,
        tuning: args.device.tuning()?.raster,
        ..Default::default()
    };
    let t = std::time::Instant::now();
    let (out, _) = render_chunks(&gpu, &gpu_splats, &camera, &opts)?;
    let rgb = gpu.read(&out.rgb)?;
    tracing::info!(
        "rendered {} splats ({} visible, {} tile intersections) in {:.1} ms",
        splats.len(),
        out.num_visible,
        out.num_intersections,
        t.elapsed().as_secs_f64() * 1e3
    );
    write_png(&args.out, &rgb, camera.width, camera.height)?;
    println!(
        "wrote {} ({}x{})",
        args.out.display(),
        camera.width,
        camera.height
    );
    Ok(())
}
