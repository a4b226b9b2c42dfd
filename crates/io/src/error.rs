//! Error types.

use std::path::{Path, PathBuf};

/// Why a [`Splats`](crate::Splats) value is internally inconsistent.
///
/// Returned by [`Splats::validate`](crate::Splats::validate); wrapped in
/// [`IoError::Invalid`] when it happens while loading or saving a file.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ValidationError {
    /// The SH degree is above [`MAX_SH_DEGREE`](crate::MAX_SH_DEGREE).
    #[error("SH degree {0} is not supported (maximum is 3)")]
    ShDegree(u32),
    /// One of the per-splat arrays has the wrong number of entries.
    #[error("`{field}` has {actual} entries but {expected} are expected")]
    Length {
        /// Name of the offending field.
        field: &'static str,
        /// Number of entries required by `means.len()` and the SH degree.
        expected: usize,
        /// Number of entries present.
        actual: usize,
    },
    /// A value is NaN or infinite.
    #[error("`{field}` of splat {index} is not finite")]
    NonFinite {
        /// Name of the offending field.
        field: &'static str,
        /// Index of the offending splat.
        index: usize,
    },
}

/// Error returned by every load and save function of this crate.
///
/// The `Display` text always starts with the file path, followed by a
/// description of the problem, e.g.
/// `biker.ply: element 'vertex' has count 1000 but the file ends after 12 of them`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IoError {
    /// The operating system reported an error (missing file, permissions, ...).
    #[error("{}: {error}", path.display())]
    Io {
        /// File being read or written.
        path: PathBuf,
        /// Underlying error.
        error: std::io::Error,
    },
    /// The file is not a well-formed instance of its format.
    #[error("{}: {message}", path.display())]
    Malformed {
        /// File being read.
        path: PathBuf,
        /// Description of the problem.
        message: String,
    },
    /// The file (or the requested output) uses a feature this crate does not support.
    #[error("{}: unsupported: {message}", path.display())]
    Unsupported {
        /// File being read or written.
        path: PathBuf,
        /// Description of the unsupported feature.
        message: String,
    },
    /// A data set (image sequence) cannot be used as given: it needs a camera calibration that
    /// was not supplied, its type cannot be recognised, its timestamps do not match, or an
    /// argument (such as the frame stride) is out of range.
    #[error("{}: {message}", path.display())]
    Dataset {
        /// Data set folder or file concerned.
        path: PathBuf,
        /// Description of the problem and, where there is one, what to do about it.
        message: String,
    },
    /// The splat data itself is inconsistent (decoded from a file, or given to a writer).
    #[error("{}: invalid splat data: {error}", path.display())]
    Invalid {
        /// File being read or written.
        path: PathBuf,
        /// What is wrong with the data.
        error: ValidationError,
    },
}

impl IoError {
    /// The file the error refers to.
    pub fn path(&self) -> &Path {
        match self {
            Self::Io { path, .. }
            | Self::Malformed { path, .. }
            | Self::Unsupported { path, .. }
            | Self::Dataset { path, .. }
            | Self::Invalid { path, .. } => path,
        }
    }

    pub(crate) fn io(path: &Path, error: std::io::Error) -> Self {
        Self::Io {
            path: path.to_path_buf(),
            error,
        }
    }
}

/// Errors naming a file, for the scene and data set readers (apart from the codecs' `malformed!`
/// macro, which names no file).
pub(crate) mod at {
    use std::path::Path;

    use super::IoError;

    /// [`IoError::Malformed`] for `path`: the file's content is wrong.
    pub(crate) fn malformed(path: &Path, message: impl Into<String>) -> IoError {
        IoError::Malformed {
            path: path.to_path_buf(),
            message: message.into(),
        }
    }

    /// [`IoError::Dataset`] for `path`: a data set or scene is inconsistent or incomplete.
    pub(crate) fn dataset_error(path: &Path, message: impl Into<String>) -> IoError {
        IoError::Dataset {
            path: path.to_path_buf(),
            message: message.into(),
        }
    }
}

/// A path-less error produced by the format codecs; attached to a path with
/// [`Problem::at`] at the public API boundary.
#[derive(Debug)]
pub(crate) enum Problem {
    Malformed(String),
    Unsupported(String),
    Invalid(ValidationError),
}

impl Problem {
    pub(crate) fn at(self, path: &Path) -> IoError {
        let path = path.to_path_buf();
        match self {
            Self::Malformed(message) => IoError::Malformed { path, message },
            Self::Unsupported(message) => IoError::Unsupported { path, message },
            Self::Invalid(error) => IoError::Invalid { path, error },
        }
    }
}

impl From<ValidationError> for Problem {
    fn from(error: ValidationError) -> Self {
        Self::Invalid(error)
    }
}

/// Shorthand for `Err(Problem::Malformed(format!(...)))`.
macro_rules! malformed {
    ($($arg:tt)*) => {
        Err($crate::error::Problem::Malformed(format!($($arg)*)))
    };
}

/// Shorthand for `Err(Problem::Unsupported(format!(...)))`.
macro_rules! unsupported {
    ($($arg:tt)*) => {
        Err($crate::error::Problem::Unsupported(format!($($arg)*)))
    };
}

pub(crate) use {malformed, unsupported};

pub(crate) type Result<T, E = Problem> = std::result::Result<T, E>;
