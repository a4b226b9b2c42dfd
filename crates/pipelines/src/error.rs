//! Errors of the pipelines.

use std::path::PathBuf;

/// An error of a pipeline. Messages name the file, view or frame involved.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    /// Options or inputs that cannot be used.
    #[error("{0}")]
    Invalid(String),
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// What was being done when a lower-level error happened.
    #[error("{context}")]
    Context {
        context: String,
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error(transparent)]
    Data(#[from] rust3r_io::IoError),
    #[error(transparent)]
    Splat(#[from] rust3r_splat::SplatError),
    #[error(transparent)]
    Slam(#[from] rust3r_slam::SlamError),
    #[error(transparent)]
    Gpu(#[from] rust3r_gpu::GpuError),
}

/// Adds a sentence of context to an error (`anyhow`'s `with_context` for a library).
pub trait Context<T> {
    fn context_with(self, f: impl FnOnce() -> String) -> Result<T, PipelineError>;
}

impl<T, E: std::error::Error + Send + Sync + 'static> Context<T> for Result<T, E> {
    fn context_with(self, f: impl FnOnce() -> String) -> Result<T, PipelineError> {
        self.map_err(|e| PipelineError::Context {
            context: f(),
            source: Box::new(e),
        })
    }
}

pub(crate) fn invalid(msg: impl Into<String>) -> PipelineError {
    PipelineError::Invalid(msg.into())
}

pub(crate) fn io_err(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> PipelineError + '_ {
    move |source| PipelineError::Io {
        path: path.to_path_buf(),
        source,
    }
}
