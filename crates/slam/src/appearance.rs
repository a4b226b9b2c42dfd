//! Appearance descriptors of keyframes, for loop closure and relocalisation that do not depend on
//! the (possibly drifted) pose estimate (RGB-D; the MASt3R path has learned retrieval).
//!
//! The descriptor is a "tiny image" (Torralba et al. 2008, as SeqSLAM uses it, Milford and
//! Wyeth 2012): the keyframe's intensity box-averaged to [`DESC_W`] x [`DESC_H`] cells, with
//! each cell normalised by the mean and deviation of its 3x3 neighbourhood (patch normalisation
//! removes exposure and lighting changes), then the whole vector to zero mean and unit norm.
//! Two keyframes are compared by the dot product of their descriptors (a zero-mean normalised
//! cross-correlation in `[-1, 1]`). Such a descriptor only recognises views from a similar
//! position and direction, which is what a loop edge needs (the dense back end then aligns
//! the two pointmaps); every candidate is verified geometrically before it is used.
//!
//! A crate was considered: the Rust bag-of-words crates (e.g. DBoW-style vocabularies) need a
//! trained vocabulary and a feature detector, and none is maintained with a vocabulary that can
//! be shipped; this is ~60 lines and needs neither.

use crate::pointmap::Pointmap;

/// Descriptor columns.
pub const DESC_W: usize = 16;
/// Descriptor rows.
pub const DESC_H: usize = 12;
/// Largest shift (cells) tried by [`Descriptor::similarity`].
pub const MAX_SHIFT: usize = 3;

/// A keyframe's appearance descriptor: zero mean, unit norm (all zeros for a flat image).
#[derive(Debug, Clone, PartialEq)]
pub struct Descriptor(pub Vec<f32>);

impl Descriptor {
    /// Descriptor of a pointmap's colours (every pixel, valid depth or not).
    pub fn of(pm: &Pointmap) -> Self {
        let (w, h) = (pm.width, pm.height);
        let mut cells = vec![0.0f32; DESC_W * DESC_H];
        let mut counts = vec![0u32; DESC_W * DESC_H];
        if w == 0 || h == 0 || pm.colors.len() != w * h {
            return Self(cells);
        }
        for v in 0..h {
            let cv = v * DESC_H / h;
            for u in 0..w {
                let c = pm.colors[v * w + u];
                let g = 0.299 * c[0] as f32 + 0.587 * c[1] as f32 + 0.114 * c[2] as f32;
                let k = cv * DESC_W + u * DESC_W / w;
                cells[k] += g;
                counts[k] += 1;
            }
        }
        for (c, n) in cells.iter_mut().zip(&counts) {
            *c /= (*n).max(1) as f32;
        }
        // Patch normalisation over 3x3 cells.
        let mut out = vec![0.0f32; DESC_W * DESC_H];
        for y in 0..DESC_H {
            for x in 0..DESC_W {
                let (mut s, mut s2, mut n) = (0.0f32, 0.0f32, 0.0f32);
                for yy in y.saturating_sub(1)..(y + 2).min(DESC_H) {
                    for xx in x.saturating_sub(1)..(x + 2).min(DESC_W) {
                        let g = cells[yy * DESC_W + xx];
                        s += g;
                        s2 += g * g;
                        n += 1.0;
                    }
                }
                let mean = s / n;
                let sd = (s2 / n - mean * mean).max(0.0).sqrt();
                out[y * DESC_W + x] = (cells[y * DESC_W + x] - mean) / (sd + 2.0);
            }
        }
        let mean = out.iter().sum::<f32>() / out.len() as f32;
        out.iter_mut().for_each(|v| *v -= mean);
        let norm = out.iter().map(|v| v * v).sum::<f32>().sqrt();
        if norm > 1e-6 {
            out.iter_mut().for_each(|v| *v /= norm);
        } else {
            out.iter_mut().for_each(|v| *v = 0.0);
        }
        Self(out)
    }

    /// Similarity in `[-1, 1]`: the largest normalised cross-correlation of the two cell grids
    /// over shifts of up to [`MAX_SHIFT`] cells in each direction (views turned by a few
    /// degrees still match), on the overlap, which must cover at least half the grid. 0 against
    /// a flat image.
    pub fn similarity(&self, o: &Self) -> f64 {
        let s = MAX_SHIFT as isize;
        let (w, h) = (DESC_W as isize, DESC_H as isize);
        let mut best = 0.0f64;
        for dy in -s..=s {
            for dx in -s..=s {
                let (mut ab, mut aa, mut bb, mut n) = (0.0f64, 0.0f64, 0.0f64, 0usize);
                let (mut sa, mut sb) = (0.0f64, 0.0f64);
                for y in 0.max(-dy)..h.min(h - dy) {
                    for x in 0.max(-dx)..w.min(w - dx) {
                        let a = self.0[(y * w + x) as usize] as f64;
                        let b = o.0[((y + dy) * w + x + dx) as usize] as f64;
                        ab += a * b;
                        aa += a * a;
                        bb += b * b;
                        sa += a;
                        sb += b;
                        n += 1;
                    }
                }
                if n * 2 < DESC_W * DESC_H {
                    continue;
                }
                let nf = n as f64;
                let cov = ab - sa * sb / nf;
                let den = ((aa - sa * sa / nf) * (bb - sb * sb / nf)).sqrt();
                if den > 1e-12 {
                    best = best.max(cov / den);
                }
            }
        }
        best
    }
}

impl AsRef<Descriptor> for Descriptor {
    fn as_ref(&self) -> &Descriptor {
        self
    }
}

/// The up to `k` entries of `descs` most similar to `query`, best first, among the indices for
/// which `allowed` holds and whose similarity is at least `min_similarity`.
pub fn most_similar<D: AsRef<Descriptor>>(
    query: &Descriptor,
    descs: &[D],
    k: usize,
    min_similarity: f64,
    allowed: impl Fn(usize) -> bool,
) -> Vec<(usize, f64)> {
    let mut s: Vec<(usize, f64)> = descs
        .iter()
        .enumerate()
        .filter(|(j, _)| allowed(*j))
        .map(|(j, d)| (j, query.similarity(d.as_ref())))
        .filter(|(_, s)| *s >= min_similarity)
        .collect();
    s.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    s.truncate(k);
    s
}
