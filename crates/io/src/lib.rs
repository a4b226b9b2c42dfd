//! Reading and writing 3D Gaussian splat files, and reading image-sequence data sets
//! ([`datasets`]: TUM RGB-D, 7-Scenes, EuRoC, ETH3D, image folders), and posed-image training
//! scenes ([`scene`]: COLMAP, nerfstudio / instant-ngp `transforms.json`, NeRF-synthetic).
//!
//! All formats decode into (and encode from) one host-side container,
//! [`Splats`], which stores pre-activation values in the conventions of the
//! reference 3DGS PLY (RDF frame, `(w, x, y, z)` quaternions, log scales,
//! opacity logits, SH laid out `[splat][coeff][rgb]`).
//!
//! | format | extension | read | write |
//! |---|---|---|---|
//! | 3DGS PLY (binary LE/BE, ASCII) | `.ply` | yes | binary LE |
//! | PlayCanvas compressed PLY | `.compressed.ply` (or detected in `.ply`) | yes | no |
//! | antimatter15 splat | `.splat` | yes | yes (DC colour only) |
//! | Niantic SPZ v1-v4 | `.spz` | yes | v2, v3 (default), v4 |
//! | PlayCanvas SOG v2 bundle | `.sog` | yes | yes |
//!
//! Every function returns an [`IoError`] whose message names the file; malformed
//! input is reported as an error, never a panic. Writes are atomic.
//!
//! ```no_run
//! use std::path::Path;
//! let splats = rust3r_io::load_splats(Path::new("scene.spz"))?;
//! println!("{} splats, SH degree {}", splats.len(), splats.sh_degree);
//! rust3r_io::save_splats(Path::new("scene.ply"), &splats)?;
//! # Ok::<(), rust3r_io::IoError>(())
//! ```
// Library code returns errors; `expect` states the invariant that makes it unreachable.
#![warn(clippy::unwrap_used)]
#![warn(missing_docs)]

pub mod atomic;
mod compressed_ply;
pub mod datasets;
mod error;
mod image_file;
mod ply;
mod plyfile;
pub mod scene;
mod sog;
mod splat_format;
mod splats;
mod spz;

use std::path::Path;

pub use error::{IoError, ValidationError};
pub use splats::{MAX_SH_DEGREE, SH_C0, Splats, logit, num_coeffs_for_degree, sigmoid};
pub use spz::SpzVersion;

/// A splat file format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SplatFormat {
    /// Standard 3DGS PLY. When decoding, a PlayCanvas compressed PLY is also
    /// accepted (detected from the header).
    Ply,
    /// PlayCanvas / SuperSplat compressed PLY (read only). Decoding inspects the
    /// header exactly like [`SplatFormat::Ply`], so either variant reads either layout.
    CompressedPly,
    /// antimatter15 `.splat` (32-byte records, SH degree 0).
    Splat,
    /// Niantic SPZ.
    Spz,
    /// PlayCanvas SOG (version 2), as a `.sog` bundle (ZIP of `meta.json` and WebP images).
    Sog,
}

impl SplatFormat {
    /// The format implied by the file name: `.compressed.ply`, `.ply`, `.splat`,
    /// `.spz` or `.sog` (case-insensitive).
    pub fn from_path(path: &Path) -> Option<Self> {
        let name = path.file_name()?.to_string_lossy().to_ascii_lowercase();
        if name.ends_with(".compressed.ply") {
            Some(Self::CompressedPly)
        } else if name.ends_with(".ply") {
            Some(Self::Ply)
        } else if name.ends_with(".splat") {
            Some(Self::Splat)
        } else if name.ends_with(".spz") {
            Some(Self::Spz)
        } else if name.ends_with(".sog") {
            Some(Self::Sog)
        } else {
            None
        }
    }

    /// Guesses the format from the first bytes of a file (PLY, SPZ and SOG bundles (ZIP) have
    /// magic numbers; `.splat` has none and is never detected).
    pub fn detect(bytes: &[u8]) -> Option<Self> {
        if bytes.starts_with(b"ply\n") || bytes.starts_with(b"ply\r\n") {
            Some(Self::Ply)
        } else if bytes.starts_with(b"NGSP") || bytes.starts_with(&[0x1f, 0x8b]) {
            Some(Self::Spz)
        } else if bytes.starts_with(b"PK\x03\x04") {
            Some(Self::Sog)
        } else {
            None
        }
    }

    /// Whether this crate can write the format.
    pub fn is_writable(self) -> bool {
        !matches!(self, Self::CompressedPly)
    }
}

/// Options for [`save_splats_with`] and [`encode_splats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SaveOptions {
    /// SPZ container version to write.
    pub spz_version: SpzVersion,
}

impl SaveOptions {
    /// Sets the SPZ container version.
    pub fn with_spz_version(mut self, version: SpzVersion) -> Self {
        self.spz_version = version;
        self
    }
}

/// Loads a splat file, choosing the format from the extension (see
/// [`SplatFormat::from_path`]) or, for unknown extensions, from the content.
///
/// The result always passes [`Splats::validate`].
pub fn load_splats(path: &Path) -> Result<Splats, IoError> {
    let bytes = std::fs::read(path).map_err(|e| IoError::io(path, e))?;
    let format = match SplatFormat::from_path(path).or_else(|| SplatFormat::detect(&bytes)) {
        Some(format) => format,
        None => {
            return Err(IoError::Unsupported {
                path: path.to_path_buf(),
                message: "unknown splat file type (expected .ply, .splat, .spz or .sog)".into(),
            });
        }
    };
    decode_splats(&bytes, format, path)
}

/// Decodes splats from the bytes of a file in `format`. `path` is only used in
/// error messages.
pub fn decode_splats(bytes: &[u8], format: SplatFormat, path: &Path) -> Result<Splats, IoError> {
    match format {
        SplatFormat::Ply | SplatFormat::CompressedPly => ply::decode(bytes),
        SplatFormat::Splat => splat_format::decode(bytes),
        SplatFormat::Spz => spz::decode(bytes),
        SplatFormat::Sog => sog::decode(bytes),
    }
    .map_err(|e| e.at(path))
}

/// Saves splats with default [`SaveOptions`], choosing the format from the extension.
pub fn save_splats(path: &Path, splats: &Splats) -> Result<(), IoError> {
    save_splats_with(path, splats, &SaveOptions::default())
}

/// Saves splats, choosing the format from the extension of `path`.
///
/// The file is written to a temporary file in the same directory and renamed
/// over `path`, so an existing file is never left half-written.
pub fn save_splats_with(
    path: &Path,
    splats: &Splats,
    options: &SaveOptions,
) -> Result<(), IoError> {
    let Some(format) = SplatFormat::from_path(path) else {
        return Err(IoError::Unsupported {
            path: path.to_path_buf(),
            message: "unknown splat file extension (expected .ply, .splat, .spz or .sog)".into(),
        });
    };
    let bytes = encode_splats(splats, format, options, path)?;
    atomic::write_atomic(path, &bytes)
}

/// Encodes splats into the bytes of a file in `format`. `path` is only used in
/// error messages.
pub fn encode_splats(
    splats: &Splats,
    format: SplatFormat,
    options: &SaveOptions,
    path: &Path,
) -> Result<Vec<u8>, IoError> {
    match format {
        SplatFormat::Ply => ply::encode(splats),
        SplatFormat::CompressedPly => Err(error::Problem::Unsupported(
            "writing PlayCanvas compressed PLY files".into(),
        )),
        SplatFormat::Splat => splat_format::encode(splats),
        SplatFormat::Spz => spz::encode(splats, options.spz_version),
        SplatFormat::Sog => sog::encode(splats),
    }
    .map_err(|e| e.at(path))
}
