//! Error types. Every [`Error`] names the file it concerns.

use std::fmt;
use std::path::{Path, PathBuf};

/// An error from reading, validating or writing a checkpoint.
///
/// `File` wraps the file readers' errors ([`rust3r_torch_checkpoint::Error`]: I/O, zip, pickle,
/// format, tensor); `Config` and `Layout` are MASt3R's own.
///
/// The `Display` form always starts with the file's path and says what is wrong with it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading or writing the file failed, or its contents are malformed.
    #[error(transparent)]
    File(#[from] rust3r_torch_checkpoint::Error),
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
        Error::File(rust3r_torch_checkpoint::Error::format(path, message))
    }

    pub(crate) fn tensor(path: &Path, name: &str, message: impl Into<String>) -> Self {
        Error::File(rust3r_torch_checkpoint::Error::tensor(path, name, message))
    }

    /// The file this error concerns.
    pub fn path(&self) -> &Path {
        match self {
            Error::File(e) => e.path(),
            Error::Config { path, .. } | Error::Layout { path, .. } => path,
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
