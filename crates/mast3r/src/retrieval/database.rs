//! MASt3R-SLAM's `RetrievalDatabase` (`mast3r_slam/retrieval_database.py`): keyframes'
//! encoder features through the retrieval head, aggregated with ASMK and kept in an inverted
//! file; `update` queries it and optionally adds the frame afterwards.

use std::path::Path;

use super::asmk::{Aggregated, Codebook, aggregate};
use super::head::{LocalFeatures, RetrievalHead};
use super::ivf::InvertedFile;
use super::quantize::DeviceCodebook;
use super::{AsmkParams, RetrievalError};

/// What one [`RetrievalDatabase::update`] computed (for inspection and parity tests).
#[derive(Debug, Clone)]
pub struct Query {
    /// The selected local features.
    pub local: LocalFeatures,
    /// Each feature's `query_assignment` nearest words, nearest first.
    pub assign: Vec<Vec<usize>>,
    /// The query's aggregated codes (all `query_assignment` words).
    pub query_codes: Aggregated,
    /// The codes stored when the frame was added (nearest `build_assignment` words).
    pub stored_codes: Option<Aggregated>,
    /// Score of every image in the database before the frame was added.
    pub scores: Vec<f64>,
    /// The retrieved images, best first: the `min(k, images)` best whose score exceeds
    /// `min_thresh`.
    pub retrieved: Vec<usize>,
}

/// The retrieval database over keyframes: image ids are `0, 1, ...` in the order frames were
/// added.
#[derive(Debug, Clone)]
pub struct RetrievalDatabase {
    head: RetrievalHead,
    codebook: Codebook,
    ivf: InvertedFile,
    params: AsmkParams,
    /// The codebook on a GPU: words are assigned there ([`DeviceCodebook`]), with the host's
    /// answer.
    device: Option<DeviceCodebook>,
}

impl RetrievalDatabase {
    /// A database with `head` and `codebook` (their widths must agree).
    pub fn new(
        head: RetrievalHead,
        codebook: Codebook,
        params: AsmkParams,
    ) -> Result<Self, RetrievalError> {
        if head.dim() != codebook.dim() {
            return Err(RetrievalError::Features(format!(
                "the retrieval head gives {}-wide features but the codebook's centroids are {}-wide",
                head.dim(),
                codebook.dim()
            )));
        }
        if params.query_assignment == 0
            || params.build_assignment == 0
            || params.build_assignment > params.query_assignment
            || params.query_assignment > codebook.len()
        {
            return Err(RetrievalError::Features(format!(
                "assignments: query {} and build {} (need 1 <= build <= query <= {} words)",
                params.query_assignment,
                params.build_assignment,
                codebook.len()
            )));
        }
        let ivf = InvertedFile::new(codebook.len());
        Ok(RetrievalDatabase {
            head,
            codebook,
            ivf,
            params,
            device: None,
        })
    }

    /// Loads the head from the retrieval checkpoint and the codebook from
    /// `<checkpoint name without its last '_' part>_codebook.pkl` next to it (upstream
    /// `Retriever`: `..._retrieval_trainingfree.pth` → `..._retrieval_codebook.pkl`), or from
    /// `codebook` when given.
    pub fn load(
        checkpoint: impl AsRef<Path>,
        codebook: Option<&Path>,
        params: AsmkParams,
    ) -> Result<Self, RetrievalError> {
        let checkpoint = checkpoint.as_ref();
        let head = RetrievalHead::load(checkpoint)?;
        let cb_path = match codebook {
            Some(p) => p.to_path_buf(),
            None => codebook_path(checkpoint),
        };
        let cb = Codebook::load(&cb_path)?;
        Self::new(head, cb, params)
    }

    /// The head.
    pub fn head(&self) -> &RetrievalHead {
        &self.head
    }

    /// The codebook.
    pub fn codebook(&self) -> &Codebook {
        &self.codebook
    }

    /// Number of images added.
    pub fn len(&self) -> usize {
        self.ivf.len()
    }

    /// Whether no image was added.
    pub fn is_empty(&self) -> bool {
        self.ivf.is_empty()
    }

    /// Assign visual words on `gpu` (the codebook is uploaded once; `None` goes back to the
    /// host). The assignments are the host's either way ([`DeviceCodebook`]).
    pub fn set_device(&mut self, gpu: Option<&rust3r_gpu::Gpu>) -> Result<(), RetrievalError> {
        self.device = match gpu {
            Some(g) if self.device.as_ref().is_some_and(|d| d.gpu().same_device(g)) => {
                self.device.take()
            }
            Some(g) => Some(DeviceCodebook::new(g, &self.codebook)?),
            None => None,
        };
        Ok(())
    }

    /// Whether visual words are assigned on a GPU.
    pub fn on_device(&self) -> bool {
        self.device.is_some()
    }

    /// Bytes held by the inverted file.
    pub fn memory_bytes(&self) -> usize {
        self.ivf.memory_bytes()
    }

    /// `RetrievalDatabase.update(frame, add_after_query, k, min_thresh)` on one image's
    /// encoder output `feat` (`[N, E]`): queries the database (when it holds an image) and
    /// returns up to `min(k, images)` images with the highest scores, best first, keeping
    /// those scoring above `min_thresh`; then adds the image when `add_after_query` (as the
    /// next id, [`RetrievalDatabase::len`] before the call).
    pub fn update(
        &mut self,
        feat: &[f32],
        add_after_query: bool,
        k: usize,
        min_thresh: f64,
    ) -> Result<Query, RetrievalError> {
        let start = std::time::Instant::now();
        let local = self.head.select(feat)?;
        let selected_ms = start.elapsed().as_secs_f64() * 1e3;
        let dim = local.dim;
        let m = self.params.query_assignment;
        let assign = match &self.device {
            Some(d) => d.nearest_all(&self.codebook, &local.features, m)?,
            None => self.codebook.nearest_all(&local.features, m),
        };
        let assigned_ms = start.elapsed().as_secs_f64() * 1e3;
        let query_codes = aggregate(&self.codebook, &local.features, dim, &assign);
        let mut scores = Vec::new();
        let mut retrieved = Vec::new();
        if !self.ivf.is_empty() {
            scores = self.ivf.scores(
                &query_codes,
                self.params.alpha,
                self.params.similarity_threshold,
            );
            let mut order: Vec<usize> = (0..scores.len()).collect();
            order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
            order.truncate(k.min(scores.len()));
            retrieved = order
                .into_iter()
                .filter(|&i| scores[i] > min_thresh)
                .collect();
        }
        let stored_codes = add_after_query.then(|| {
            let b = self.params.build_assignment;
            let assign_b: Vec<Vec<usize>> = assign.iter().map(|a| a[..b].to_vec()).collect();
            let agg = aggregate(&self.codebook, &local.features, dim, &assign_b);
            self.ivf.add(&agg);
            agg
        });
        tracing::trace!(
            "retrieval: features selected at {selected_ms:.1} ms, assigned to words at {assigned_ms:.1} ms, queried and stored at {:.1} ms",
            start.elapsed().as_secs_f64() * 1e3
        );
        Ok(Query {
            local,
            assign,
            query_codes,
            stored_codes,
            scores,
            retrieved,
        })
    }
}

/// Upstream's codebook name for a retrieval checkpoint: the file name's `_`-separated parts but
/// the last, then `_codebook.pkl`.
pub fn codebook_path(checkpoint: &Path) -> std::path::PathBuf {
    let name = checkpoint
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let parts: Vec<&str> = name.split('_').collect();
    let stem = parts[..parts.len().saturating_sub(1)].join("_");
    checkpoint.with_file_name(format!("{stem}_codebook.pkl"))
}
