//! LPIPS v0.1 (Zhang et al. 2018), the perceptual metric gsplat, nerfstudio and torchmetrics
//! report, computed exactly as the `lpips` package's `LPIPS(net='alex' | 'vgg', version='0.1')`
//! with `normalize=True` (images in [0, 1]), on a Burn device, from weight files the user supplies:
//!
//! - the torchvision backbone (`alexnet-owt-7be5be79.pth` or `vgg16-397923af.pth`; only
//!   `features.*` is used),
//! - lpips's linear layers (`lpips/weights/v0.1/alex.pth` or `vgg.pth`, keys
//!   `lin{k}.model.1.weight`),
//!
//! as `.pth` (legacy or zip `torch.save` format) or safetensors with the same keys, read by
//! `rust3r_torch_checkpoint`.
//!
//! The computation: `x = ((2 img - 1) - shift) / scale` per channel (lpips's `ScalingLayer`), the
//! backbone's `features` up to each of five taps, each tap unit-normalised over channels
//! (`f / (sqrt(sum_c f^2) + 1e-10)`), the squared difference of the two images' normalised
//! features weighted per channel by `lin{k}` (a 1x1 convolution without bias), averaged over the
//! tap's pixels, and summed over the taps. Channel counts and kernel sizes come from the weight
//! shapes; strides, paddings and pooling are torchvision's ([`Net::ops`]).
//!
//! ```no_run
//! use burn::tensor::{Device, DeviceKind};
//! use rust3r_lpips::{Image, Lpips, Net};
//!
//! let device = Device::wgpu(DeviceKind::DefaultDevice);
//! let lpips = Lpips::load("alexnet-owt-7be5be79.pth".as_ref(), "alex.pth".as_ref(), Some(Net::Alex), &device)?;
//! let (a, b) = (vec![0.5f32; 64 * 64 * 3], vec![0.6f32; 64 * 64 * 3]);
//! let d = lpips.distance(Image { rgb: &a, width: 64, height: 64 }, Image { rgb: &b, width: 64, height: 64 })?;
//! println!("LPIPS {d:.4}");
//! # Ok::<(), rust3r_lpips::Error>(())
//! ```
// Library code returns errors; `expect` states the invariant that makes it unreachable.
#![warn(clippy::unwrap_used)]
#![warn(missing_docs)]

mod model;
mod weights;

use std::path::PathBuf;

pub use model::{EPS, Image, Lpips, SCALE, SHIFT};
pub use weights::{ConvWeights, LpipsWeights, Net, Op, lin_key};

/// An error from loading LPIPS weights or from its inputs.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A weight file could not be read (the message names the file).
    #[error(transparent)]
    File(#[from] rust3r_torch_checkpoint::Error),
    /// A weight file does not have the layout LPIPS needs (missing key, wrong rank, channels that
    /// do not chain); the message names the file and the key.
    #[error("{}: {message}", path.display())]
    Weights {
        /// The file.
        path: PathBuf,
        /// What is wrong, naming the key.
        message: String,
    },
    /// The images (or in-memory tensors) cannot be used: different sizes, too small, wrong
    /// buffer length.
    #[error("{0}")]
    Input(String),
}

impl Error {
    /// The weight file this error concerns, if it concerns one.
    pub fn path(&self) -> Option<&std::path::Path> {
        match self {
            Error::File(e) => Some(e.path()),
            Error::Weights { path, .. } => Some(path),
            Error::Input(_) => None,
        }
    }
}
