//! The retrieval head of MASt3R's retrieval model (`mast3r/retrieval/model.py`,
//! `RetrievalModel`), applied to the encoder's output as MASt3R-SLAM's
//! `RetrievalDatabase.prep_features` does: pre-whitening, projector (+ residual), attention
//! (L2 norm of the projected features), top-`nfeat` selection by attention
//! (`how_select_local`), post-whitening.
//!
//! Checkpoint layout (`{'model': state_dict, 'args': Namespace}`, backbone excluded):
//! `prewhiten.m` `[1, E]`, `prewhiten.p` `[E, E]` (float64, when `args.prewhiten` is not None);
//! `projector.{i}.weight`/`.bias` for the `Linear` layers of `args.hdims` (`"1024"`: one
//! `Linear(E, 1024)` at index 0; longer lists put `LayerNorm` + `GELU` between, at indices
//! `3i+1`, `3i+2`); `postwhiten.m` `[1, D]`, `postwhiten.p` `[D, D]`. `args.residual` adds the
//! pre-whitened input to the projection; `args.nfeat` is the number of local features kept
//! (negative: that fraction of the tokens); `args.featweights` must be `l2norm`.

use std::path::Path;

use rust3r_torch_checkpoint::{ArgValue, PthFile};

use super::RetrievalError;

/// `Whitener`: `(x - m) @ p`, computed in float64 as upstream (its parameters are float64).
#[derive(Debug, Clone)]
struct Whitener {
    m: Vec<f64>,
    /// `[dim_in, dim_out]` row-major.
    p: Vec<f64>,
    dim: usize,
}

impl Whitener {
    /// `(x - m) P` for every `dim`-wide row of `x`, in float64 (one matrix product).
    fn apply_rows(&self, x: &[f32]) -> Vec<f32> {
        let d = self.dim;
        let c = faer::Mat::<f64>::from_fn(x.len() / d, d, |r, i| x[r * d + i] as f64 - self.m[i]);
        let out = &c * faer::MatRef::from_row_major_slice(&self.p, d, d);
        rows_f32(&out)
    }
}

/// A float64 matrix's rows, flattened, as f32.
fn rows_f32(m: &faer::Mat<f64>) -> Vec<f32> {
    let mut out = Vec::with_capacity(m.nrows() * m.ncols());
    for r in 0..m.nrows() {
        out.extend((0..m.ncols()).map(|c| m[(r, c)] as f32));
    }
    out
}

/// One layer of the projector (`nn.Sequential` of `Linear`, `LayerNorm`, `GELU`).
#[derive(Debug, Clone)]
enum Layer {
    /// `Linear`: weights and `[out]` bias.
    Linear {
        /// The weights `[d_out, d_in]` transposed, in float64 (`[d_in, d_out]` row-major).
        wt: Vec<f64>,
        b: Vec<f32>,
        d_in: usize,
        d_out: usize,
    },
    Norm {
        w: Vec<f32>,
        b: Vec<f32>,
    },
    Gelu,
}

impl Layer {
    /// `Linear` from torch's weights `w` (`[d_out, d_in]` row-major) and bias.
    fn linear(w: &[f32], b: Vec<f32>, d_in: usize, d_out: usize) -> Self {
        let mut wt = vec![0f64; d_in * d_out];
        for o in 0..d_out {
            for k in 0..d_in {
                wt[k * d_out + o] = w[o * d_in + k] as f64;
            }
        }
        Layer::Linear { wt, b, d_in, d_out }
    }

    /// The layer on every row of `x` (rows of the layer's input width), flattened.
    fn apply_rows(&self, x: &[f32]) -> Vec<f32> {
        match self {
            Layer::Linear { wt, b, d_in, d_out } => {
                // x W^T + b in float64 (products of f32 values are exact in f64).
                let (d_in, d_out) = (*d_in, *d_out);
                let xm =
                    faer::Mat::<f64>::from_fn(x.len() / d_in, d_in, |r, k| x[r * d_in + k] as f64);
                let mut y = &xm * faer::MatRef::from_row_major_slice(wt, d_in, d_out);
                for r in 0..y.nrows() {
                    for o in 0..d_out {
                        y[(r, o)] += b[o] as f64;
                    }
                }
                rows_f32(&y)
            }
            // LayerNorm over each row of its width.
            Layer::Norm { w, b } => x
                .chunks_exact(w.len())
                .flat_map(|x| {
                    let n = x.len() as f64;
                    let mean = x.iter().map(|&v| v as f64).sum::<f64>() / n;
                    let var = x.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n;
                    let inv = 1.0 / (var + 1e-5).sqrt();
                    x.iter().zip(w.iter().zip(b)).map(move |(&v, (&w, &b))| {
                        ((v as f64 - mean) * inv * w as f64 + b as f64) as f32
                    })
                })
                .collect(),
            Layer::Gelu => x
                .iter()
                .map(|&v| {
                    let v = v as f64;
                    (0.5 * v * (1.0 + libm::erf(v / std::f64::consts::SQRT_2))) as f32
                })
                .collect(),
        }
    }
}

/// How many local features are kept (`args.nfeat`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum NFeat {
    /// That many (at most the number of tokens).
    Count(usize),
    /// That fraction of the tokens (`nfeat` in `[-1, 0)`).
    Fraction(f64),
}

impl NFeat {
    /// The number kept out of `tokens` (upstream `how_select_local`).
    pub fn of(self, tokens: usize) -> usize {
        match self {
            NFeat::Count(n) => n.min(tokens),
            NFeat::Fraction(f) => ((f * tokens as f64) as usize).min(tokens),
        }
    }
}

/// Local features selected from one image's tokens.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalFeatures {
    /// `[n, dim]` row-major: post-whitened projected features, highest attention first.
    pub features: Vec<f32>,
    /// Attention (L2 norm of the projected feature) of each, descending.
    pub attention: Vec<f32>,
    /// Token index of each.
    pub indices: Vec<usize>,
    /// Feature width.
    pub dim: usize,
}

impl LocalFeatures {
    /// Number of features.
    pub fn len(&self) -> usize {
        self.indices.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.indices.is_empty()
    }

    /// Feature `i`.
    pub fn row(&self, i: usize) -> &[f32] {
        &self.features[i * self.dim..(i + 1) * self.dim]
    }
}

/// The retrieval head (no backbone: it runs on the MASt3R encoder's output).
#[derive(Debug, Clone)]
pub struct RetrievalHead {
    prewhiten: Option<Whitener>,
    projector: Vec<Layer>,
    residual: bool,
    postwhiten: Option<Whitener>,
    nfeat: NFeat,
    dim_in: usize,
    dim: usize,
}

impl RetrievalHead {
    /// Loads the head from a retrieval checkpoint (e.g.
    /// `MASt3R_ViTLarge_BaseDecoder_512_catmlpdpt_metric_retrieval_trainingfree.pth`).
    pub fn load(path: impl AsRef<Path>) -> Result<Self, RetrievalError> {
        let path = path.as_ref();
        let mut f = PthFile::open(path)?;
        let layout = |message: String| RetrievalError::Layout {
            path: path.to_path_buf(),
            message,
        };
        let nfeat = match f.arg("nfeat") {
            Some(ArgValue::Int(n)) if *n >= 0 => NFeat::Count(*n as usize),
            Some(ArgValue::Int(n)) if *n == -1 => NFeat::Fraction(1.0),
            Some(ArgValue::Float(x)) if *x < 0.0 && *x >= -1.0 => NFeat::Fraction(-*x),
            Some(ArgValue::Float(x)) if *x >= 0.0 => NFeat::Count(*x as usize),
            other => {
                return Err(layout(format!(
                    "args.nfeat is {other:?}, expected a number >= -1"
                )));
            }
        };
        match f.arg("featweights") {
            Some(ArgValue::Str(s)) if s == "l2norm" => {}
            None => {}
            other => {
                return Err(layout(format!(
                    "args.featweights is {other:?}: only 'l2norm' is implemented (as upstream)"
                )));
            }
        }
        let residual = matches!(f.arg("residual"), Some(ArgValue::Bool(true)));
        let names: Vec<String> = f.tensor_names().map(String::from).collect();
        for n in &names {
            let known = n.starts_with("prewhiten.")
                || n.starts_with("postwhiten.")
                || n.starts_with("projector.");
            if !known && !n.starts_with("backbone.") {
                return Err(layout(format!(
                    "unexpected tensor `{n}` in the retrieval head"
                )));
            }
        }
        // Whiteners are float64 (upstream `Whitener`): read at full precision, since whitening
        // learned on LayerNorm outputs amplifies near-degenerate directions.
        let mut whitener = |prefix: &str| -> Result<Option<Whitener>, RetrievalError> {
            let mname = format!("{prefix}.m");
            if !names.contains(&mname) {
                return Ok(None);
            }
            let (ms, m) = f.read_tensor_f64(&mname)?;
            let (ps, p) = f.read_tensor_f64(&format!("{prefix}.p"))?;
            let dim = *ms.last().unwrap_or(&0);
            if ms.len() != 2 || ms[0] != 1 || ps != [dim, dim] {
                return Err(RetrievalError::Layout {
                    path: path.to_path_buf(),
                    message: format!(
                        "{prefix}: m is {ms:?} and p is {ps:?}, expected [1, D] and [D, D]"
                    ),
                });
            }
            Ok(Some(Whitener { m, p, dim }))
        };
        let prewhiten = whitener("prewhiten")?;
        let postwhiten = whitener("postwhiten")?;
        let mut read = |name: &str| -> Result<(Vec<usize>, Vec<f32>), RetrievalError> {
            let t = f.read_tensor(name)?;
            Ok((t.shape, t.data))
        };
        // Projector: Linear layers at 0, 3, 6, ... with LayerNorm (+ GELU) between.
        let mut projector = Vec::new();
        let mut i = 0;
        let mut d_prev: Option<usize> = prewhiten.as_ref().map(|w| w.dim);
        let mut dim_in = d_prev;
        while names.contains(&format!("projector.{i}.weight")) {
            if i > 0 {
                let (ws, w) = read(&format!("projector.{}.weight", i - 2))?;
                let (_, b) = read(&format!("projector.{}.bias", i - 2))?;
                if ws.len() != 1 {
                    return Err(layout(format!("projector.{}: not a LayerNorm", i - 2)));
                }
                projector.push(Layer::Norm { w, b });
                projector.push(Layer::Gelu);
            }
            let (ws, w) = read(&format!("projector.{i}.weight"))?;
            let (bs, b) = read(&format!("projector.{i}.bias"))?;
            if ws.len() != 2 || bs != [ws[0]] || d_prev.is_some_and(|d| d != ws[1]) {
                return Err(layout(format!(
                    "projector.{i}: weight {ws:?} and bias {bs:?} do not chain (input width {d_prev:?})"
                )));
            }
            dim_in.get_or_insert(ws[1]);
            projector.push(Layer::linear(&w, b, ws[1], ws[0]));
            d_prev = Some(ws[0]);
            i += 3;
        }
        let Some(dim_in) = dim_in.or(postwhiten.as_ref().map(|w| w.dim)) else {
            return Err(layout(
                "no prewhiten, projector or postwhiten tensors".into(),
            ));
        };
        let dim = d_prev.unwrap_or(dim_in);
        if residual && dim != dim_in {
            return Err(layout(format!(
                "args.residual needs the projector to keep the width ({dim_in} -> {dim})"
            )));
        }
        if let Some(w) = &postwhiten
            && w.dim != dim
        {
            return Err(layout(format!(
                "postwhiten is {} wide but the projection {dim}",
                w.dim
            )));
        }
        Ok(RetrievalHead {
            prewhiten,
            projector,
            residual,
            postwhiten,
            nfeat,
            dim_in,
            dim,
        })
    }

    /// A head of the released model's shape with random weights, for timing without the
    /// checkpoint: pre-whitening `[dim_in, dim_in]`, one `Linear(dim_in, dim)`, the residual
    /// when the widths agree, post-whitening `[dim, dim]`; `nfeat` local features. The weights
    /// are a deterministic function of `seed` (uniform, scaled by `1/sqrt(fan_in)`).
    pub fn random(dim_in: usize, dim: usize, nfeat: NFeat, seed: u64) -> Self {
        let mut state = seed ^ 0x9E37_79B9_7F4A_7C15;
        let mut uniform = |n: usize, scale: f64| -> Vec<f64> {
            (0..n)
                .map(|_| super::splitmix_symmetric(&mut state) * scale)
                .collect()
        };
        let whitener = |d: usize, u: &mut dyn FnMut(usize, f64) -> Vec<f64>| Whitener {
            m: u(d, 0.1),
            p: u(d * d, 1.0 / (d as f64).sqrt()),
            dim: d,
        };
        let prewhiten = Some(whitener(dim_in, &mut uniform));
        let s = 1.0 / (dim_in as f64).sqrt();
        let w: Vec<f32> = uniform(dim * dim_in, s)
            .into_iter()
            .map(|v| v as f32)
            .collect();
        let b = uniform(dim, s).into_iter().map(|v| v as f32).collect();
        let postwhiten = Some(whitener(dim, &mut uniform));
        Self {
            prewhiten,
            projector: vec![Layer::linear(&w, b, dim_in, dim)],
            residual: dim == dim_in,
            postwhiten,
            nfeat,
            dim_in,
            dim,
        }
    }

    /// Encoder width the head takes.
    pub fn dim_in(&self) -> usize {
        self.dim_in
    }

    /// Width of the local features.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Number of local features kept per image.
    pub fn nfeat(&self) -> NFeat {
        self.nfeat
    }

    /// MASt3R-SLAM's `prep_features` on one image's encoder output `feat` (`[N, E]`
    /// row-major): the top-`nfeat` tokens by attention, post-whitened. Post-whitening acts
    /// row by row, so it is applied to the selected rows only.
    pub fn select(&self, feat: &[f32]) -> Result<LocalFeatures, RetrievalError> {
        let e = self.dim_in;
        if feat.is_empty() || !feat.len().is_multiple_of(e) {
            return Err(RetrievalError::Features(format!(
                "{} encoder values are not a whole number of {e}-wide tokens",
                feat.len()
            )));
        }
        if feat.iter().any(|v| !v.is_finite()) {
            return Err(RetrievalError::Features(
                "non-finite encoder features".into(),
            ));
        }
        let n = feat.len() / e;
        // Blocks of tokens in parallel, each through the head as matrix products.
        const ROWS: usize = 64;
        let proj: Vec<Vec<f32>> = crate::retrieval::par_map(n.div_ceil(ROWS), |blk| {
            let x = &feat[blk * ROWS * e..((blk + 1) * ROWS).min(n) * e];
            let pre = match &self.prewhiten {
                Some(w) => w.apply_rows(x),
                None => x.to_vec(),
            };
            let mut y = pre.clone();
            for l in &self.projector {
                y = l.apply_rows(&y);
            }
            if self.residual {
                for (a, b) in y.iter_mut().zip(&pre) {
                    *a += *b;
                }
            }
            y
        })
        .into_iter()
        .flat_map(|y| {
            y.chunks_exact(self.dim)
                .map(<[f32]>::to_vec)
                .collect::<Vec<_>>()
        })
        .collect();
        let attention: Vec<f32> = proj
            .iter()
            .map(|y| y.iter().map(|&v| v as f64 * v as f64).sum::<f64>().sqrt() as f32)
            .collect();
        let k = self.nfeat.of(n);
        let mut order: Vec<usize> = (0..n).collect();
        // torch.topk: largest first; ties by index.
        order.sort_by(|&a, &b| attention[b].total_cmp(&attention[a]).then(a.cmp(&b)));
        order.truncate(k);
        let selected: Vec<f32> = order
            .iter()
            .flat_map(|&t| proj[t].iter().copied())
            .collect();
        let features = match &self.postwhiten {
            Some(w) => w.apply_rows(&selected),
            None => selected,
        };
        Ok(LocalFeatures {
            features,
            attention: order.iter().map(|&t| attention[t]).collect(),
            indices: order,
            dim: self.dim,
        })
    }
}
