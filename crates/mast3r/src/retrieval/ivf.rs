//! The inverted file (`asmk/inverted_file.py`, `IVF` with `use_idf=False`): per visual word the
//! codes of the images that use it, and per image the number of its words (the normalisation).

use super::asmk::{Aggregated, similarity};

/// An inverted file over images `0..n_images` (added in order).
#[derive(Debug, Clone, Default)]
pub struct InvertedFile {
    /// Per visual word: `(image, code)` entries.
    lists: Vec<Vec<(usize, Vec<u32>)>>,
    /// Per image: number of entries (`norm_factor` without idf).
    norm: Vec<f64>,
}

impl InvertedFile {
    /// An empty inverted file over a codebook of `words` visual words.
    pub fn new(words: usize) -> Self {
        InvertedFile {
            lists: vec![Vec::new(); words],
            norm: Vec::new(),
        }
    }

    /// Number of images.
    pub fn len(&self) -> usize {
        self.norm.len()
    }

    /// Whether no image was added.
    pub fn is_empty(&self) -> bool {
        self.norm.is_empty()
    }

    /// Adds the next image (id `len()`); returns its id.
    pub fn add(&mut self, agg: &Aggregated) -> usize {
        let id = self.norm.len();
        for (i, &w) in agg.words.iter().enumerate() {
            self.lists[w].push((id, agg.code(i).to_vec()));
        }
        self.norm.push(agg.words.len() as f64);
        id
    }

    /// `IVF.search`: each query word's similarity to every stored code of that word
    /// ([`similarity`]), divided by the square root of the stored image's word count, summed
    /// per image and divided by the square root of the query's word count. One score per image.
    pub fn scores(&self, query: &Aggregated, alpha: f64, threshold: f64) -> Vec<f64> {
        let mut scores = vec![0f64; self.norm.len()];
        for (i, &w) in query.words.iter().enumerate() {
            let q = query.code(i);
            for (img, code) in &self.lists[w] {
                if let Some(s) = similarity(q, code, alpha, threshold) {
                    scores[*img] += s / self.norm[*img].sqrt();
                }
            }
        }
        let qn = (query.words.len() as f64).sqrt();
        if qn > 0.0 {
            scores.iter_mut().for_each(|s| *s /= qn);
        }
        scores
    }

    /// Bytes held by the codes (grows with the images added).
    pub fn memory_bytes(&self) -> usize {
        self.lists
            .iter()
            .flatten()
            .map(|(_, c)| c.len() * 4 + std::mem::size_of::<(usize, Vec<u32>)>())
            .sum::<usize>()
            + self.norm.len() * 8
    }
}
