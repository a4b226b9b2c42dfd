//! PyTorch checkpoints and safetensors files read without Python, shared by the crates that load
//! network weights (MASt3R, LPIPS).
//!
//! | module | concern |
//! |---|---|
//! | [`pth`] | `torch.save` files in both container formats: the zip archive (PyTorch >= 1.6) and the legacy sequence of pickles plus raw storages (before 1.6, e.g. torchvision's and lpips's weight files); lazy storage reads; strided/f16/bf16 to `f32` |
//! | [`safetensors`] | safetensors reading (header first, data on demand) and atomic writing |
//! | [`numpy`] | numpy arrays in plain pickle files ([`numpy::PickleFile`], e.g. the `asmk` codebook cache) |
//! | [`format`] | [`detect_format`] from the first bytes, and [`TensorFile`]: one reader for all three |
//!
//! The pickle interpreter never imports or runs anything: globals outside a fixed allow-list
//! (tensor/storage rebuilders and types, `collections.OrderedDict`, `argparse.Namespace`,
//! `torch.device`) are errors that name the global. Every length read from a file is checked
//! against what remains of it before anything is allocated. Every error names the file;
//! malformed input never panics.
// Library code returns errors; `expect` states the invariant that makes it unreachable.
#![warn(clippy::unwrap_used)]
#![warn(missing_docs)]

mod error;
pub mod format;
pub mod numpy;
mod pickle;
pub mod pth;
pub mod safetensors;
mod tensor;

pub use error::{Error, PickleError, PickleErrorKind};
pub use format::{CheckpointFormat, TensorFile, detect_format};
pub use numpy::{NdArray, PickleFile};
pub use pth::{ArgValue, PthFile, PthFormat, PthTensorInfo};
pub use safetensors::{SafetensorsFile, write_safetensors};
pub use tensor::{ElementType, TensorF32, numel, try_vec};
