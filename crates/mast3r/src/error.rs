//! Error types. Every [`Error`] names the file it concerns.

use std::fmt;
use std::path::{Path, PathBuf};

use rust3r_torch_checkpoint::PickleError;

/// An error from reading, validating or writing a checkpoint.
///
/// The first six variants are those of [`rust3r_torch_checkpoint::Error`] (the file readers),
/// converted one to one by `From`; `Config` and `Layout` are MASt3R's own.
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
    /// The pickle program of a PyTorch checkpoint is malformed or uses something that is not allowed.
    #[error("{}: `{entry}`: {source}", path.display())]
    Pickle {
        /// The file.
        path: PathBuf,
        /// Which pickle: the entry name inside a zip archive (`<root>/data.pkl`), or which of
        /// the pickles of a legacy file.
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
    /// The MASt3R configuration cannot be derived from the tensors (and constructor string).
    #[error("{}: cannot derive the MASt3R configuration: {source}", path.display())]
    Config {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        #[source]
        source: ConfigError,
    },
    /// The tensors do not match the layout the network expects for the derived configuration.
    #[error("{}: tensors do not match the MASt3R layout: {report}", path.display())]
    Layout {
        /// The file.
        path: PathBuf,
        /// Every missing, unexpected and mis-shaped key.
        report: LayoutReport,
    },
}

impl Error {
    pub(crate) fn format(path: &Path, message: impl Into<String>) -> Self {
        Error::Format {
            path: path.to_path_buf(),
            message: message.into(),
        }
    }

    pub(crate) fn tensor(path: &Path, name: &str, message: impl Into<String>) -> Self {
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
            | Error::Tensor { path, .. }
            | Error::Config { path, .. }
            | Error::Layout { path, .. } => path,
        }
    }
}

/// The MASt3R configuration could not be derived (missing tensor, bad constructor string, inconsistency).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// Differences between a checkpoint's keys/shapes and the expected layout.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LayoutReport {
    /// Expected keys that are absent, with their expected shapes.
    pub missing: Vec<(String, Vec<usize>)>,
    /// Keys present in the file that the network does not have, with their shapes.
    pub unexpected: Vec<(String, Vec<usize>)>,
    /// Keys present with the wrong shape: `(key, expected, found)`.
    pub mismatched: Vec<(String, Vec<usize>, Vec<usize>)>,
}

impl LayoutReport {
    /// True when nothing differs.
    pub fn is_empty(&self) -> bool {
        self.missing.is_empty() && self.unexpected.is_empty() && self.mismatched.is_empty()
    }
}

/// How many entries of each list the `Display` form prints before summarising the rest.
const REPORT_LIMIT: usize = 25;

impl fmt::Display for LayoutReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} missing, {} unexpected, {} with the wrong shape",
            self.missing.len(),
            self.unexpected.len(),
            self.mismatched.len()
        )?;
        fn list<T>(
            f: &mut fmt::Formatter<'_>,
            title: &str,
            items: &[T],
            show: impl Fn(&T) -> String,
        ) -> fmt::Result {
            if items.is_empty() {
                return Ok(());
            }
            write!(f, "\n  {title}:")?;
            for item in items.iter().take(REPORT_LIMIT) {
                write!(f, "\n    {}", show(item))?;
            }
            if items.len() > REPORT_LIMIT {
                write!(f, "\n    ... and {} more", items.len() - REPORT_LIMIT)?;
            }
            Ok(())
        }
        list(
            f,
            "missing keys (expected shape)",
            &self.missing,
            |(k, s)| format!("{k} {s:?}"),
        )?;
        list(
            f,
            "unexpected keys (shape in file)",
            &self.unexpected,
            |(k, s)| format!("{k} {s:?}"),
        )?;
        list(
            f,
            "wrong shapes (expected vs file)",
            &self.mismatched,
            |(k, e, g)| format!("{k}: expected {e:?}, file has {g:?}"),
        )
    }
}

impl From<rust3r_torch_checkpoint::Error> for Error {
    /// The checkpoint reader's errors map one to one onto the variants of the same name.
    fn from(e: rust3r_torch_checkpoint::Error) -> Self {
        use rust3r_torch_checkpoint::Error as E;
        match e {
            E::Io { path, source } => Error::Io { path, source },
            E::Zip { path, source } => Error::Zip { path, source },
            E::ZipEntry {
                path,
                entry,
                source,
            } => Error::ZipEntry {
                path,
                entry,
                source,
            },
            E::Pickle {
                path,
                entry,
                source,
            } => Error::Pickle {
                path,
                entry,
                source,
            },
            E::Format { path, message } => Error::Format { path, message },
            E::Tensor {
                path,
                name,
                message,
            } => Error::Tensor {
                path,
                name,
                message,
            },
        }
    }
}
