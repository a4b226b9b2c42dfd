//! Error types. Every [`Error`] names the file it concerns.

use std::path::{Path, PathBuf};

/// An error from reading or writing a tensor file (`.pth` zip or legacy, safetensors).
///
/// The `Display` form always starts with the file's path and says what is wrong with it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file could not be opened, read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file starts like a zip archive but its structure is invalid or unsupported.
    #[error("{}: not a readable PyTorch zip archive: {source}", path.display())]
    Zip {
        /// The file.
        path: PathBuf,
        /// The zip reader's error.
        #[source]
        source: zip::result::ZipError,
    },
    /// One entry of a zip archive could not be read (truncated data, bad checksum, compressed entry, ...).
    #[error("{}: zip entry `{entry}`: {source}", path.display())]
    ZipEntry {
        /// The file.
        path: PathBuf,
        /// The entry's name inside the archive.
        entry: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A pickle program of a PyTorch checkpoint is malformed or uses something that is not allowed.
    #[error("{}: `{entry}`: {source}", path.display())]
    Pickle {
        /// The file.
        path: PathBuf,
        /// Which pickle: the entry name inside a zip archive (`<root>/data.pkl`), or which of the
        /// pickles of a legacy file (e.g. `legacy PyTorch pickle 4 of 5 (the state dict)`).
        entry: String,
        /// What is wrong, with the byte offset inside the pickle.
        #[source]
        source: PickleError,
    },
    /// The file's structure is not what the format requires (missing entries, bad header, ...).
    #[error("{}: {message}", path.display())]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A tensor's metadata or data is inconsistent or of an unsupported type.
    #[error("{}: tensor `{name}`: {message}", path.display())]
    Tensor {
        /// The file.
        path: PathBuf,
        /// The tensor's name as stored in the file.
        name: String,
        /// What is wrong.
        message: String,
    },
}

impl Error {
    /// An I/O error on `path`.
    pub fn io(path: &Path, source: std::io::Error) -> Self {
        Error::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    /// A structural problem of the file at `path`.
    pub fn format(path: &Path, message: impl Into<String>) -> Self {
        Error::Format {
            path: path.to_path_buf(),
            message: message.into(),
        }
    }

    /// A problem with tensor `name` of the file at `path`.
    pub fn tensor(path: &Path, name: &str, message: impl Into<String>) -> Self {
        Error::Tensor {
            path: path.to_path_buf(),
            name: name.to_string(),
            message: message.into(),
        }
    }

    /// The file this error concerns.
    pub fn path(&self) -> &Path {
        match self {
            Error::Io { path, .. }
            | Error::Zip { path, .. }
            | Error::ZipEntry { path, .. }
            | Error::Pickle { path, .. }
            | Error::Format { path, .. }
            | Error::Tensor { path, .. } => path,
        }
    }
}

/// An error from the restricted pickle interpreter, with the byte offset of the offending opcode.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("pickle byte {offset}: {kind}")]
pub struct PickleError {
    /// Offset of the opcode (or data) that failed, from the start of the pickle.
    pub offset: usize,
    /// What went wrong.
    pub kind: PickleErrorKind,
}

/// The kinds of [`PickleError`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PickleErrorKind {
    /// A `GLOBAL`/`STACK_GLOBAL` named something outside the allow-list. It was not imported or executed.
    #[error(
        "forbidden global `{module}.{name}`: only torch tensor/storage types and rebuilders, \
         collections.OrderedDict, argparse.Namespace, torch.device and numpy array constructors are allowed (nothing was executed)"
    )]
    ForbiddenGlobal {
        /// The module part, e.g. `os`.
        module: String,
        /// The attribute part, e.g. `system`.
        name: String,
    },
    /// An opcode outside the supported subset.
    #[error("unsupported pickle opcode 0x{0:02x}")]
    UnsupportedOpcode(u8),
    /// A pickle protocol other than 2..=5.
    #[error("unsupported pickle protocol {0}")]
    UnsupportedProtocol(u8),
    /// The data ended in the middle of an opcode or before `STOP`.
    #[error("unexpected end of pickle data")]
    Truncated,
    /// Anything else that is malformed (stack underflow, wrong argument types, ...).
    #[error("{0}")]
    Invalid(String),
}
