//! Learned retrieval as MASt3R-SLAM does it: the retrieval head of MASt3R's retrieval model
//! on the encoder's output ([`head`]), ASMK aggregation with a binary kernel ([`asmk`]), an
//! inverted file over keyframes ([`ivf`]) and MASt3R-SLAM's `RetrievalDatabase.update`
//! ([`database`]).
//!
//! Upstream code followed: `mast3r_slam/retrieval_database.py` (rmurai0610/MASt3R-SLAM),
//! `mast3r/retrieval/model.py` and `processor.py` (naver/mast3r), and the `asmk` package
//! (jenicek/asmk: `kernel.py`, `inverted_file.py`, `functional.py`, `cython/hamming.pyx`).
//! The parameters are those `Retriever` hard-codes ([`AsmkParams::default`]); `k` and
//! `min_thresh` come with each query (MASt3R-SLAM's `retrieval.k`, `retrieval.min_thresh`).
//! `tests/retrieval.rs` compares every step with numbers made by that code
//! (`tools/retrieval_fixture.py`).

pub mod asmk;
pub mod database;
pub mod head;
pub mod ivf;
pub mod quantize;

use std::path::PathBuf;

pub use asmk::{Aggregated, Codebook};
pub use database::{Query, RetrievalDatabase, codebook_path};
pub use head::{LocalFeatures, NFeat, RetrievalHead};
pub use ivf::InvertedFile;
pub use quantize::DeviceCodebook;

/// The next uniform value in `[-1, 1)` of a SplitMix64 stream (`state` advances): the random
/// heads and codebooks made for timing without the released files.
pub(crate) fn splitmix_symmetric(state: &mut u64) -> f64 {
    let z = rust3r_gpu::random::splitmix64(*state, 1);
    *state = state.wrapping_add(rust3r_gpu::random::SPLITMIX_GAMMA);
    (z >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
}

/// ASMK's parameters as MASt3R's `Retriever` sets them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AsmkParams {
    /// Words per feature when querying (`query_ivf.quantize.multiple_assignment`, 5).
    pub query_assignment: usize,
    /// Words per feature when adding (`build_ivf.quantize.multiple_assignment`, 1).
    pub build_assignment: usize,
    /// Selectivity exponent (`query_ivf.similarity.alpha`, 3).
    pub alpha: f64,
    /// Similarities below this are dropped (`query_ivf.similarity.similarity_threshold`, 0).
    pub similarity_threshold: f64,
}

impl Default for AsmkParams {
    fn default() -> Self {
        AsmkParams {
            query_assignment: 5,
            build_assignment: 1,
            alpha: 3.0,
            similarity_threshold: 0.0,
        }
    }
}

/// Errors of the retrieval model. Those about files name the file.
#[derive(Debug, thiserror::Error)]
pub enum RetrievalError {
    /// The checkpoint or codebook file could not be read.
    #[error(transparent)]
    File(#[from] rust3r_torch_checkpoint::Error),
    /// The retrieval checkpoint does not have the layout of MASt3R's retrieval model.
    #[error("{}: not a MASt3R retrieval head: {message}", path.display())]
    Layout {
        /// The checkpoint.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The codebook file is not an `asmk` codebook.
    #[error("{}: not an ASMK codebook: {message}", path.display())]
    Codebook {
        /// The codebook file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The GPU word assignment failed.
    #[error("retrieval on the GPU: {0}")]
    Gpu(#[from] rust3r_gpu::GpuError),
    /// Features or sizes that do not fit together.
    #[error("retrieval: {0}")]
    Features(String),
}

/// `(0..n).map(f)` on rayon's pool, in order.
fn par_map<T: Send>(n: usize, f: impl Fn(usize) -> T + Sync + Send) -> Vec<T> {
    use rayon::prelude::*;
    (0..n).into_par_iter().map(f).collect()
}

#[cfg(test)]
mod tests {
    use super::{Codebook, NFeat, RetrievalHead};

    #[test]
    fn random_codebook_and_head_have_the_released_shapes() {
        let cb = Codebook::random(64, 32, 7).expect("codebook");
        assert_eq!((cb.len(), cb.dim()), (64, 32));
        for w in 0..cb.len() {
            let n: f32 = cb.centroid(w).iter().map(|v| v * v).sum();
            assert!((n - 1.0).abs() < 1e-5, "centroid {w} has squared norm {n}");
        }
        assert_eq!(
            cb.centroid(3),
            Codebook::random(64, 32, 7).unwrap().centroid(3)
        );
        assert_ne!(
            cb.centroid(3),
            Codebook::random(64, 32, 8).unwrap().centroid(3)
        );
        let head = RetrievalHead::random(16, 32, NFeat::Count(5), 1);
        let feat: Vec<f32> = (0..16 * 10).map(|i| (i as f32 * 0.37).sin()).collect();
        let local = head.select(&feat).expect("features");
        assert_eq!((local.len(), local.dim), (5, 32));
        assert!(local.attention.windows(2).all(|w| w[0] >= w[1]));
        assert!(local.features.iter().all(|v| v.is_finite()));
    }
}
