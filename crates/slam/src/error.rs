//! Error type of the SLAM crate.

use std::path::PathBuf;

use thiserror::Error;

/// Errors of the SLAM crate.
#[derive(Debug, Error)]
pub enum SlamError {
    /// The file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// File that failed.
        path: PathBuf,
        /// Underlying I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A line of a trajectory file is malformed.
    #[error("{}:{line}: {message}", path.display())]
    Parse {
        /// File being parsed.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong with the line.
        message: String,
    },
    /// The trajectory format could not be determined.
    #[error("{}: {message}", path.display())]
    UnknownFormat {
        /// File being read.
        path: PathBuf,
        /// Why detection failed.
        message: String,
    },
    /// The file contains no poses.
    #[error("{}: trajectory contains no poses", path.display())]
    EmptyTrajectory {
        /// File being read.
        path: PathBuf,
    },
    /// No pair of timestamps could be associated.
    #[error(
        "found no matching timestamps between {reference} ({num_reference} poses) and \
         {estimate} ({num_estimate} poses) with max. time diff {max_diff} s and time offset {offset} s"
    )]
    NoMatches {
        /// Name of the reference trajectory.
        reference: String,
        /// Name of the estimated trajectory.
        estimate: String,
        /// Number of reference poses.
        num_reference: usize,
        /// Number of estimated poses.
        num_estimate: usize,
        /// Maximum allowed time difference (s).
        max_diff: f64,
        /// Time offset applied to the estimate (s).
        offset: f64,
    },
    /// The point sets do not determine a unique alignment.
    #[error("degenerate alignment: {0}")]
    DegenerateAlignment(String),
    /// An argument is invalid (e.g. an unknown alignment mode).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// Input data that SLAM cannot use (the message names the file).
    #[error("{0}")]
    InvalidInput(String),
    /// Reading the data set failed.
    #[error(transparent)]
    Dataset(#[from] rust3r_io::IoError),
    /// The back end failed.
    #[error("back end: {0}")]
    Backend(String),
    /// A GPU kernel failed.
    #[error("gpu: {0}")]
    Gpu(String),
}
