//! ASMK (the `asmk` package: `codebook.py`, `kernel.py`, `functional.py`, `cython/hamming.pyx`)
//! with MASt3R's parameters: the codebook, nearest-centroid assignment, aggregation of the
//! residuals per visual word, binarisation into packed bits, and the selectivity function.

use std::path::Path;

use rust3r_torch_checkpoint::PickleFile;

use super::RetrievalError;

/// The visual words: `k` centroids of width `dim`.
#[derive(Debug, Clone)]
pub struct Codebook {
    centroids: Vec<f32>,
    norms: Vec<f64>,
    k: usize,
    dim: usize,
}

impl Codebook {
    /// Centroids `[k, dim]` row-major.
    pub fn new(centroids: Vec<f32>, dim: usize) -> Result<Self, RetrievalError> {
        if dim == 0 || centroids.is_empty() || !centroids.len().is_multiple_of(dim) {
            return Err(RetrievalError::Features(format!(
                "{} centroid values are not a whole number of {dim}-wide rows",
                centroids.len()
            )));
        }
        let k = centroids.len() / dim;
        let norms = centroids
            .chunks_exact(dim)
            .map(|c| c.iter().map(|&v| v as f64 * v as f64).sum())
            .collect();
        Ok(Codebook {
            centroids,
            norms,
            k,
            dim,
        })
    }

    /// `k` random unit-norm centroids of width `dim` (deterministic in `seed`): a codebook of the
    /// released one's shape without its training, for timing.
    pub fn random(k: usize, dim: usize, seed: u64) -> Result<Self, RetrievalError> {
        let mut state = seed;
        let mut c: Vec<f32> = (0..k * dim)
            .map(|_| super::splitmix_symmetric(&mut state) as f32)
            .collect();
        for row in c.chunks_exact_mut(dim.max(1)) {
            let norm = row.iter().map(|v| v * v).sum::<f32>().sqrt().max(1e-12);
            row.iter_mut().for_each(|v| *v /= norm);
        }
        Self::new(c, dim)
    }

    /// Reads the codebook cache `asmk` writes (`pickle.dump(Codebook.state_dict())`:
    /// `{'type': 'Codebook', 'params': {'size': K}, 'state': {'centroids': float32 [K, D]}}`),
    /// or a pickle holding the bare `[K, D]` array.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, RetrievalError> {
        let path = path.as_ref();
        let bad = |message: String| RetrievalError::Codebook {
            path: path.to_path_buf(),
            message,
        };
        let f = PickleFile::open(path)?;
        let arr = match f.array(&[]) {
            Ok(a) => a,
            Err(_) => {
                match f.string(&["type"]) {
                    Ok(Some(t)) if t == "Codebook" => {}
                    Ok(t) => return Err(bad(format!("`type` is {t:?}, expected 'Codebook'"))),
                    Err(e) => {
                        return Err(bad(format!("neither an array nor a codebook state: {e}")));
                    }
                }
                let arr = f.array(&["state", "centroids"])?;
                let size = f
                    .int(&["params", "size"])
                    .ok()
                    .flatten()
                    .map(|s| s as usize)
                    .or_else(|| {
                        // asmk's "64k" / "1M" shorthands.
                        let s = f.string(&["params", "size"]).ok()??;
                        let (num, unit) = s.split_at(s.len().checked_sub(1)?);
                        let mult = match unit {
                            "k" => 1024,
                            "M" => 1024 * 1024,
                            _ => return None,
                        };
                        num.parse::<usize>().ok().map(|n| n * mult)
                    });
                if let Some(size) = size
                    && arr.shape.first() != Some(&size)
                {
                    return Err(bad(format!(
                        "params.size is {size} but the centroids are {:?}",
                        arr.shape
                    )));
                }
                arr
            }
        };
        if arr.shape.len() != 2 || arr.shape[0] == 0 || arr.shape[1] == 0 {
            return Err(bad(format!(
                "centroids of shape {:?}, expected [K, D]",
                arr.shape
            )));
        }
        if arr.data.iter().any(|v| !v.is_finite()) {
            return Err(bad("non-finite centroids".into()));
        }
        Codebook::new(arr.data, arr.shape[1])
    }

    /// Number of visual words.
    pub fn len(&self) -> usize {
        self.k
    }

    /// Whether the codebook is empty (never: [`Codebook::new`] refuses it).
    pub fn is_empty(&self) -> bool {
        self.k == 0
    }

    /// Centroid width.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Centroid `w`.
    pub fn centroid(&self, w: usize) -> &[f32] {
        &self.centroids[w * self.dim..(w + 1) * self.dim]
    }

    /// The `m` nearest centroids of `v`, nearest first (MASt3R-SLAM `quantize_custom`: squared
    /// L2 distance as `|v|^2 + |c|^2 - 2 v.c`, here in float64; ties by index).
    pub fn nearest(&self, v: &[f32], m: usize) -> Vec<usize> {
        let vn: f64 = v.iter().map(|&x| x as f64 * x as f64).sum();
        let all: Vec<usize> = (0..self.k).collect();
        self.rank(v, vn, &all, m.min(self.k))
    }
}

impl Codebook {
    /// [`Codebook::nearest`] for every row of `features` (`[n, dim]`): the distances come from
    /// one matrix product per block of centroids (faer, float64; blocks in parallel), as
    /// upstream's `quantize_custom` forms them.
    pub fn nearest_all(&self, features: &[f32], m: usize) -> Vec<Vec<usize>> {
        let dim = self.dim;
        let n = features.len() / dim;
        if n == 0 {
            return Vec::new();
        }
        let m = m.min(self.k);
        let q = faer::Mat::<f64>::from_fn(n, dim, |i, d| features[i * dim + d] as f64);
        let qn: Vec<f64> = features
            .chunks_exact(dim)
            .map(|r| r.iter().map(|&x| x as f64 * x as f64).sum())
            .collect();
        const BLOCK: usize = 2048;
        let blocks = super::par_map(self.k.div_ceil(BLOCK), |b| {
            let (w0, w1) = (b * BLOCK, ((b + 1) * BLOCK).min(self.k));
            let c = faer::Mat::<f64>::from_fn(dim, w1 - w0, |d, w| {
                self.centroids[(w0 + w) * dim + d] as f64
            });
            let g = &q * &c;
            (0..n)
                .map(|i| {
                    let mut d: Vec<(f64, usize)> = (w0..w1)
                        .map(|w| (qn[i] + self.norms[w] - 2.0 * g[(i, w - w0)], w))
                        .collect();
                    best_m(&mut d, m);
                    d
                })
                .collect::<Vec<_>>()
        });
        (0..n)
            .map(|i| {
                let mut d: Vec<(f64, usize)> =
                    blocks.iter().flat_map(|b| b[i].iter().copied()).collect();
                best_m(&mut d, m);
                d.into_iter().map(|(_, w)| w).collect()
            })
            .collect()
    }
}

impl Codebook {
    /// Squared norm of centroid `w` (float64).
    pub fn norm2(&self, w: usize) -> f64 {
        self.norms[w]
    }

    /// The `m` nearest of the `words` to `v` (`vn` its squared norm in float64), nearest first,
    /// ties by word, with float64 distances `|v|^2 + |c|^2 - 2 v.c` (each dot product summed in
    /// index order).
    pub(crate) fn rank(&self, v: &[f32], vn: f64, words: &[usize], m: usize) -> Vec<usize> {
        let mut d: Vec<(f64, usize)> = words
            .iter()
            .map(|&w| {
                let dot: f64 = self
                    .centroid(w)
                    .iter()
                    .zip(v)
                    .map(|(&c, &x)| c as f64 * x as f64)
                    .sum();
                (vn + self.norms[w] - 2.0 * dot, w)
            })
            .collect();
        best_m(&mut d, m);
        d.into_iter().map(|(_, w)| w).collect()
    }
}

/// Keeps the `m` smallest `(distance, word)` pairs, sorted (ties by word).
fn best_m(d: &mut Vec<(f64, usize)>, m: usize) {
    let cmp = |a: &(f64, usize), b: &(f64, usize)| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1));
    if m < d.len() {
        d.select_nth_unstable_by(m, cmp);
        d.truncate(m);
    }
    d.sort_by(cmp);
}

/// One image's aggregated, binarised residuals: one packed code per visual word it uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Aggregated {
    /// Visual words, ascending (`np.unique`).
    pub words: Vec<usize>,
    /// `words.len() * code_words` packed bits (`hamming.binarize_and_pack_2D`).
    pub codes: Vec<u32>,
    /// `u32` per code: `ceil(dim / 32)`.
    pub code_words: usize,
}

impl Aggregated {
    /// The code of the `i`-th word.
    pub fn code(&self, i: usize) -> &[u32] {
        &self.codes[i * self.code_words..(i + 1) * self.code_words]
    }
}

/// `ASMKKernel.aggregate_image` with `binary=True`: for every visual word any descriptor is
/// assigned to (`assign[i]`: descriptor `i`'s words), the sum of `descriptor - centroid` over
/// the descriptors assigned to it, binarised (`> 0`) and packed.
pub fn aggregate(
    codebook: &Codebook,
    features: &[f32],
    dim: usize,
    assign: &[Vec<usize>],
) -> Aggregated {
    let mut words: Vec<usize> = assign.iter().flatten().copied().collect();
    words.sort_unstable();
    words.dedup();
    let code_words = dim.div_ceil(32);
    let mut codes = Vec::with_capacity(words.len() * code_words);
    let mut sum = vec![0f64; dim];
    for &w in &words {
        sum.iter_mut().for_each(|s| *s = 0.0);
        let c = codebook.centroid(w);
        for (i, a) in assign.iter().enumerate() {
            if a.contains(&w) {
                let x = &features[i * dim..(i + 1) * dim];
                for ((s, &x), &c) in sum.iter_mut().zip(x).zip(c) {
                    // numpy: float32 `des - centroid`, summed.
                    *s += (x - c) as f64;
                }
            }
        }
        codes.extend(binarize_and_pack(&sum));
    }
    Aggregated {
        words,
        codes,
        code_words,
    }
}

/// `hamming.binarize_and_pack`: bit `v > 0`, 32 per `u32`, first element in the most
/// significant bit; the last word's bits are shifted to its top.
pub fn binarize_and_pack(v: &[f64]) -> Vec<u32> {
    v.chunks(32)
        .map(|chunk| {
            let mut word = 0u32;
            for &x in chunk {
                word = (word << 1) | u32::from(x > 0.0);
            }
            word << (32 - chunk.len())
        })
        .collect()
}

/// `ASMKKernel.similarity` (binary) and `functional.asmk_kernel`: the normalised Hamming
/// distance `h` (over `32 * code_words` bits) gives the similarity `1 - 2h`; below
/// `threshold` it is dropped (`None`), else raised to `alpha`.
pub fn similarity(a: &[u32], b: &[u32], alpha: f64, threshold: f64) -> Option<f64> {
    let bits: u32 = a.iter().zip(b).map(|(x, y)| (x ^ y).count_ones()).sum();
    // float32 in the Cython code: `sum / normalization`, then `-2 * h + 1`.
    let h = bits as f32 / (32 * a.len()) as f32;
    let sim = -2.0 * h + 1.0;
    (sim as f64 >= threshold).then(|| (sim as f64).powf(alpha))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packing_matches_the_cython_docstring() {
        // hamming.pyx: binarize_and_pack_2D((np.random.rand(2, 10) - 0.5)) examples are random;
        // check the layout by construction: 10 values, bits MSB first, shifted to the top.
        let v = [1.0, -1.0, 1.0, 1.0, 0.0, -0.5, 2.0, 0.0, 0.0, 3.0];
        let packed = binarize_and_pack(&v);
        assert_eq!(packed, vec![0b10_1100_1001_u32 << 22]);
        // 33 values: two words, the second holds one bit at the top.
        let mut w = vec![-1.0; 33];
        w[0] = 1.0;
        w[32] = 1.0;
        assert_eq!(binarize_and_pack(&w), vec![1 << 31, 1 << 31]);
    }

    #[test]
    fn blocked_assignment_equals_the_scalar_one() {
        // 5000 words (three blocks) of width 40, 37 features: same words in the same order.
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 11) as f32 / (1u64 << 53) as f32 - 0.5
        };
        let dim = 40;
        let cb = Codebook::new((0..5000 * dim).map(|_| rnd()).collect(), dim).unwrap();
        let feats: Vec<f32> = (0..37 * dim).map(|_| rnd()).collect();
        let all = cb.nearest_all(&feats, 5);
        for (i, words) in all.iter().enumerate() {
            assert_eq!(
                words,
                &cb.nearest(&feats[i * dim..(i + 1) * dim], 5),
                "feature {i}"
            );
        }
    }

    #[test]
    fn similarity_is_thresholded_and_raised() {
        // hamming_dist_packed([3], [1]) over 32 bits: 1/32.
        let s = similarity(&[3], &[1], 3.0, 0.0).unwrap();
        assert!((s - (1.0f64 - 2.0 / 32.0).powi(3)).abs() < 1e-7);
        // Opposite codes: similarity -1, dropped at threshold 0.
        assert_eq!(similarity(&[0], &[u32::MAX], 3.0, 0.0), None);
    }
}
