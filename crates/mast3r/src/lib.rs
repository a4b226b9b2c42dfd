//! MASt3R for rust3r: the network (`AsymmetricMASt3R` with `catmlp+dpt` heads, as MASt3R-SLAM runs
//! it) on Burn tensors, its checkpoint layer (PyTorch `.pth` without Python, safetensors, the
//! configuration derived from tensor shapes), and MASt3R-SLAM's image preprocessing.
//!
//! | module | concern |
//! |---|---|
//! | [`model`] | [`Mast3r`]: weights on a Burn [`Device`](burn::tensor::Device) (wgpu by default) in f32 or f16; [`Mast3r::encode`], [`Mast3r::decode`], [`Mast3r::mono`], [`Mast3r::symmetric`], [`Mast3r::asymmetric`]; outputs [`Prediction`] (pts3d, conf, desc, desc_conf) |
//! | [`preprocess`] | `resize_img` at 512 / 224, bit-exact with Pillow (LANCZOS shrinking, BICUBIC enlarging) |
//! | [`frontend`] | [`frontend::Mast3rMonoFrontEnd`]: the network as `rust3r_slam`'s `PointmapFrontEnd` (mono pointmaps, uncalibrated or calibrated) and `PairFrontEnd` (pairs (frame, keyframe) with cached encodings, for MASt3R-SLAM's tracking) |
//! | [`parity`] | the fixture's cases (`rust3r mast3r-infer`): every reference tensor, same names and shapes |
//! | [`pth`] | PyTorch checkpoints (zip and legacy): `rust3r_torch_checkpoint`'s reader, re-exported |
//! | [`safetensors`] | safetensors reading and atomic writing: `rust3r_torch_checkpoint`'s, re-exported |
//! | [`config`] | [`Mast3rConfig`] from shapes (+ `args.model` string) and [`expected_layout`]; [`Mast3rConfig::released`] |
//! | [`retrieval`] | MASt3R-SLAM's learned retrieval: retrieval head on the encoder output, ASMK codes, inverted file over keyframes ([`retrieval::RetrievalDatabase`]) |
//! | [`checkpoint`] | [`Checkpoint`]: format detection, `module.` stripping, validation, conversion |
//!
//! The network follows `shared/fixtures/mast3r_tiny/SPEC.md`; every size comes from the
//! configuration, so the tiny fixture model and the released ViT-L checkpoint run through the same
//! code. The parity tests (`tests/parity.rs`) compare all 191 reference tensors of the fixture
//! (upstream PyTorch outputs, intermediates included) within `1e-4 * max|ref|` on wgpu; the worst
//! normalised difference is 3.9e-6. Convolutions of the DPT head run channels-last as im2col +
//! matrix products. Like the two decoder stacks, the two heads run together when both views have
//! the same size: their weights are stacked on a leading axis, so each layer is one batched
//! matrix product for both views. [`Mast3r::set_profiler`] times encoder, decoder, DPT, local
//! features and post-processing.
//!
//! The checkpoint files are read by `rust3r_torch_checkpoint` (shared with the LPIPS metric): its
//! pickle interpreter never imports or runs anything: globals outside a fixed allow-list
//! (tensor/storage rebuilders and types, `collections.OrderedDict`, `argparse.Namespace`,
//! `torch.device`) are errors that name the global. Every error names the file; malformed input
//! never panics.
//!
//! ```no_run
//! use burn::tensor::{Device, DeviceKind};
//! use rust3r_mast3r::{Mast3r, Precision, preprocess::preprocess};
//!
//! let device = Device::wgpu(DeviceKind::DefaultDevice);
//! let model = Mast3r::load("MASt3R_ViTLarge_BaseDecoder_512_catmlpdpt_metric.pth", &device, Precision::F32)?;
//! let (rgb, width, height) = (vec![0u8; 640 * 480 * 3], 640, 480); // a decoded RGB frame
//! let frame = preprocess(&rgb, width, height, 512).expect("valid frame");
//! let img = model.image_tensor(frame.data, [1, 3, frame.height, frame.width]);
//! let enc = model.encode(img);               // once per frame (cache it for keyframes)
//! let [own, _] = model.mono(&enc);           // the frame decoded with itself
//! let host = own.to_host();                  // pts3d, conf, desc, desc_conf on the CPU
//! println!("{} points, first {:?}", host.conf.len(), &host.pts3d[..3]);
//! # Ok::<(), rust3r_mast3r::Error>(())
//! ```
// Library code returns errors; `expect` states the invariant that makes it unreachable.
#![warn(clippy::unwrap_used)]
#![warn(missing_docs)]

pub mod checkpoint;
pub mod config;
mod error;
pub mod frontend;
pub mod model;
pub mod model_string;
pub mod parity;
pub mod preprocess;
pub mod retrieval;

/// PyTorch `.pth` checkpoints (zip and legacy formats), from `rust3r_torch_checkpoint`.
pub mod pth {
    pub use rust3r_torch_checkpoint::pth::*;
}

/// safetensors reading and writing, from `rust3r_torch_checkpoint`.
pub mod safetensors {
    pub use rust3r_torch_checkpoint::safetensors::*;
}

pub use checkpoint::{
    Checkpoint, LoadOptions, MODEL_STRING_METADATA_KEY, normalize_key, validate_layout,
};
pub use config::{
    ActivationKind, ActivationMode, DptConfig, LocalFeatConfig, Mast3rConfig, expected_layout,
};
pub use error::{ConfigError, Error, LayoutReport};
pub use model::{
    Encoded, HostPrediction, Mast3r, PackedLayout, Precision, Prediction, Replayer, Trace,
};
pub use rust3r_torch_checkpoint::{
    CheckpointFormat, ElementType, PickleError, PickleErrorKind, PthFile, PthTensorInfo,
    SafetensorsFile, TensorF32, detect_format, write_safetensors,
};
