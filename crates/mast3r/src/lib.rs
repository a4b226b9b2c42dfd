//! MASt3R checkpoint layer: loads the network's weights from PyTorch `.pth` checkpoints (without
//! Python) or safetensors, derives the network configuration from the tensor shapes, validates every
//! key and shape, and writes safetensors.
//!
//! | module | concern |
//! |---|---|
//! | [`pth`] | PyTorch zip checkpoints: restricted pickle interpreter, lazy storage reads, strided/f16/bf16 to `f32` |
//! | [`safetensors`] | safetensors reading (header first, data on demand) and atomic writing |
//! | [`config`] | [`Mast3rConfig`] from shapes (+ `args.model` string) and [`expected_layout`] |
//! | [`checkpoint`] | [`Checkpoint`]: format detection, `module.` stripping, validation, conversion |
//!
//! The pickle interpreter never imports or runs anything: globals outside a fixed allow-list
//! (tensor/storage rebuilders, `collections.OrderedDict`, `argparse.Namespace`, `torch.device`) are
//! errors that name the global. Every error names the file; malformed input never panics.
//!
//! ```no_run
//! let ckpt = rust3r_mast3r::Checkpoint::load("MASt3R_ViTLarge_BaseDecoder_512_catmlpdpt_metric.pth")?;
//! let cfg = ckpt.config();
//! println!("encoder {}x{} ({} heads), decoder {}x{}", cfg.enc_depth, cfg.enc_embed_dim,
//!          cfg.enc_num_heads, cfg.dec_depth, cfg.dec_embed_dim);
//! ckpt.save_safetensors("mast3r.safetensors")?;
//! # Ok::<(), rust3r_mast3r::Error>(())
//! ```

#![warn(missing_docs)]

pub mod checkpoint;
pub mod config;
mod error;
pub mod model;
pub mod model_string;
pub mod parity;
pub mod preprocess;
mod pickle;
pub mod pth;
pub mod safetensors;
mod tensor;

pub use checkpoint::{
    Checkpoint, CheckpointFormat, LoadOptions, MODEL_STRING_METADATA_KEY, detect_format,
    normalize_key, validate_layout,
};
pub use config::{
    ActivationKind, ActivationMode, DptConfig, LocalFeatConfig, Mast3rConfig, expected_layout,
};
pub use model::{Encoded, HostPrediction, Mast3r, Precision, Prediction, Trace};
pub use error::{ConfigError, Error, LayoutReport, PickleError, PickleErrorKind};
pub use pth::{PthFile, PthTensorInfo};
pub use safetensors::{SafetensorsFile, write_safetensors};
pub use tensor::{ElementType, TensorF32};
