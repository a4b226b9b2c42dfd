//! `rust3r lpips A B` and the `--lpips-*` flags `rust3r train` shares: LPIPS v0.1 from the
//! user's torchvision backbone and lpips linear-layer files (`rust3r_lpips`).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, ensure};
use burn::tensor::Device;
use clap::Args;
use rust3r_lpips::{Image, Lpips, LpipsWeights, Net};

use crate::DeviceArgs;

/// The weight files of LPIPS (torchvision backbone + lpips v0.1 linear layers).
#[derive(Args, Clone, Debug)]
pub struct LpipsFlags {
    /// torchvision backbone for LPIPS (alexnet-owt-7be5be79.pth or vgg16-397923af.pth; .pth in
    /// either torch.save format, or .safetensors with the same keys). With --lpips-weights,
    /// every evaluation also reports LPIPS.
    #[arg(long, value_name = "FILE", requires = "lpips_weights")]
    pub lpips_backbone: Option<PathBuf>,
    /// lpips's v0.1 linear layers (lpips/weights/v0.1/alex.pth or vgg.pth, or .safetensors).
    #[arg(long, value_name = "FILE", requires = "lpips_backbone")]
    pub lpips_weights: Option<PathBuf>,
    /// LPIPS network, alex or vgg (default: told from the backbone's layers).
    #[arg(long, value_name = "NET", requires = "lpips_backbone")]
    pub lpips_net: Option<Net>,
}

impl LpipsFlags {
    /// Reads and checks the weight files (host only), or `None` without the flags.
    pub fn load(&self) -> Result<Option<LpipsWeights>> {
        match (&self.lpips_backbone, &self.lpips_weights) {
            (Some(b), Some(l)) => Ok(Some(load_weights(b, l, self.lpips_net)?)),
            _ => Ok(None),
        }
    }
}

fn load_weights(backbone: &Path, lin: &Path, net: Option<Net>) -> Result<LpipsWeights> {
    let w = LpipsWeights::load(backbone, lin, net).context("cannot load the LPIPS weights")?;
    if !w.is_full_size() {
        eprintln!(
            "warning: the LPIPS weights ({}, {}) are not the released {} network's shapes: values are not comparable with published LPIPS",
            backbone.display(),
            lin.display(),
            w.net
        );
    }
    Ok(w)
}

/// `rust3r lpips`.
#[derive(Args, Debug)]
pub struct LpipsArgs {
    /// First image (PNG or JPEG; an alpha channel is dropped).
    pub a: PathBuf,
    /// Second image, of the same size.
    pub b: PathBuf,
    /// torchvision backbone (alexnet-owt-7be5be79.pth or vgg16-397923af.pth, or .safetensors).
    #[arg(long, value_name = "FILE")]
    pub lpips_backbone: PathBuf,
    /// lpips's v0.1 linear layers (lpips/weights/v0.1/alex.pth or vgg.pth, or .safetensors).
    #[arg(long, value_name = "FILE")]
    pub lpips_weights: PathBuf,
    /// alex or vgg (default: told from the backbone's layers).
    #[arg(long, value_name = "NET")]
    pub lpips_net: Option<Net>,
    /// Also print the five per-layer terms.
    #[arg(long)]
    pub layers: bool,
    #[command(flatten)]
    pub device: DeviceArgs,
}

/// An image file as RGB in [0, 1] (16-bit files keep their precision).
fn read_rgb(path: &Path) -> Result<(Vec<f32>, usize, usize)> {
    let img = image::open(path).with_context(|| format!("cannot read image {}", path.display()))?;
    let rgb = img.to_rgb32f();
    Ok((
        rgb.as_raw().clone(),
        rgb.width() as usize,
        rgb.height() as usize,
    ))
}

pub fn run(a: &LpipsArgs) -> Result<()> {
    let weights = load_weights(&a.lpips_backbone, &a.lpips_weights, a.lpips_net)?;
    let (x, w, h) = read_rgb(&a.a)?;
    let (y, w2, h2) = read_rgb(&a.b)?;
    ensure!(
        (w, h) == (w2, h2),
        "the images differ in size: {} is {w}x{h}, {} is {w2}x{h2}",
        a.a.display(),
        a.b.display()
    );
    let gpu = a.device.open()?;
    let lpips = Lpips::new(weights, &Device::from(gpu.device().clone()));
    let terms = lpips
        .distance_layers(
            Image {
                rgb: &x,
                width: w,
                height: h,
            },
            Image {
                rgb: &y,
                width: w,
                height: h,
            },
        )
        .with_context(|| format!("{} vs {}", a.a.display(), a.b.display()))?;
    let total: f64 = terms.iter().sum();
    if a.layers {
        for (k, t) in terms.iter().enumerate() {
            println!("layer {k}: {t}");
        }
    }
    println!("LPIPS ({}, v0.1): {total}", lpips.net());
    Ok(())
}
