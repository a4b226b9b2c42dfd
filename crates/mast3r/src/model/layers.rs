//! Building blocks shared by the network: weights moved from a [`Checkpoint`](crate::Checkpoint)
//! (or drawn at random for benchmarks) into Burn tensors, linear layers, LayerNorm, convolutions,
//! GELU MLPs, and the intermediate-tensor [`Trace`].

use std::collections::BTreeMap;

use burn::tensor::activation::{gelu, relu};
use burn::tensor::module::linear;
use burn::tensor::ops::PadMode;
use burn::tensor::{DType, Device, Distribution, Slice, Tensor, TensorData};

use crate::error::Error;
use rust3r_gpu::blas::matmul;
use rust3r_torch_checkpoint::TensorF32;

/// Numeric precision of the network's weights and activations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Precision {
    /// IEEE binary32 everywhere (the reference).
    #[default]
    F32,
    /// Weights and activations in binary16; LayerNorm statistics and softmax in binary32.
    F16,
}

impl Precision {
    pub(crate) fn dtype(self) -> DType {
        match self {
            Precision::F32 => DType::F32,
            Precision::F16 => DType::F16,
        }
    }
}

impl std::str::FromStr for Precision {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "f32" | "fp32" | "float32" => Ok(Precision::F32),
            "f16" | "fp16" | "float16" | "half" => Ok(Precision::F16),
            other => Err(format!("unknown precision '{other}' (expected f32 or f16)")),
        }
    }
}

/// Where weights come from.
pub(crate) enum Source<'a> {
    /// A validated checkpoint's tensors (by normalised key).
    Checkpoint {
        tensors: &'a BTreeMap<String, TensorF32>,
        /// The checkpoint file, for error messages.
        path: std::path::PathBuf,
    },
    /// Random values with the scales of the fixture's initialisation (SPEC §12), drawn on the
    /// device: weights ~ N(0, 1/fan_in), biases ~ N(0, 0.05^2), LayerNorm weights ~ 1 + N(0, 0.1^2).
    Random,
}

/// Turns named parameters into Burn tensors on one device, in one precision.
pub(crate) struct Loader<'a> {
    pub device: Device,
    pub dtype: DType,
    pub source: Source<'a>,
}

/// How a random parameter is drawn.
#[derive(Clone, Copy)]
pub(crate) enum Init {
    /// N(0, 1/fan_in).
    Weight { fan_in: usize },
    /// N(0, 0.05^2).
    Bias,
    /// 1 + N(0, 0.1^2).
    NormWeight,
}

impl Loader<'_> {
    /// The raw values of `key`, which must have `shape` (host side, checkpoint source only).
    fn host(&self, key: &str, shape: &[usize]) -> Result<&TensorF32, Error> {
        let Source::Checkpoint { tensors, path } = &self.source else {
            unreachable!("host() is only called for checkpoint sources")
        };
        let t = tensors
            .get(key)
            .ok_or_else(|| Error::tensor(path, key, "missing from the checkpoint"))?;
        if t.shape != shape {
            return Err(Error::tensor(
                path,
                key,
                format!("has shape {:?}, the network needs {:?}", t.shape, shape),
            ));
        }
        Ok(t)
    }

    fn random<const D: usize>(&self, shape: [usize; D], init: Init) -> Tensor<D> {
        let (mean, std) = match init {
            Init::Weight { fan_in } => (0.0, 1.0 / (fan_in.max(1) as f64).sqrt()),
            Init::Bias => (0.0, 0.05),
            Init::NormWeight => (1.0, 0.1),
        };
        Tensor::<D>::random(
            shape,
            Distribution::Normal(mean, std),
            (&self.device, DType::F32),
        )
    }

    /// Uploads host values, converting to the model precision unless `keep_f32`.
    fn upload<const D: usize>(
        &self,
        data: Vec<f32>,
        shape: [usize; D],
        keep_f32: bool,
    ) -> Tensor<D> {
        let t = Tensor::<D>::from_data(TensorData::new(data, shape), (&self.device, DType::F32));
        self.finish(t, keep_f32)
    }

    fn finish<const D: usize>(&self, t: Tensor<D>, keep_f32: bool) -> Tensor<D> {
        if keep_f32 || self.dtype == DType::F32 {
            t
        } else {
            t.cast(self.dtype)
        }
    }

    /// A parameter as stored (PyTorch layout), `keep_f32` to keep it in binary32.
    pub fn param<const D: usize>(
        &self,
        key: &str,
        shape: [usize; D],
        init: Init,
        keep_f32: bool,
    ) -> Result<Tensor<D>, Error> {
        match &self.source {
            Source::Checkpoint { .. } => {
                let t = self.host(key, &shape)?;
                Ok(self.upload(t.data.clone(), shape, keep_f32))
            }
            Source::Random => Ok(self.finish(self.random(shape, init), keep_f32)),
        }
    }

    /// A PyTorch `Linear(inp -> out)` stored as `[out, inp]`, transposed to `[inp, out]` once.
    pub fn linear(
        &self,
        prefix: &str,
        inp: usize,
        out: usize,
        bias: bool,
    ) -> Result<Linear, Error> {
        let key = format!("{prefix}.weight");
        let w = match &self.source {
            Source::Checkpoint { .. } => {
                let t = self.host(&key, &[out, inp])?;
                self.upload(transpose(&t.data, out, inp), [inp, out], false)
            }
            Source::Random => {
                self.finish(self.random([inp, out], Init::Weight { fan_in: inp }), false)
            }
        };
        let b = if bias {
            Some(self.param(&format!("{prefix}.bias"), [out], Init::Bias, false)?)
        } else {
            None
        };
        Ok(Linear { w, b })
    }

    /// A `Conv2d(inp -> out, k x k)` with stride k (weights `[out, inp, k, k]`) as a linear layer
    /// on flattened `(channel, row, column)` patches (k = 1: a 1x1 convolution on tokens).
    pub fn conv_as_linear(
        &self,
        prefix: &str,
        inp: usize,
        out: usize,
        k: usize,
    ) -> Result<Linear, Error> {
        let key = format!("{prefix}.weight");
        let fan_in = inp * k * k;
        let w = match &self.source {
            Source::Checkpoint { .. } => {
                let t = self.host(&key, &[out, inp, k, k])?;
                self.upload(transpose(&t.data, out, fan_in), [fan_in, out], false)
            }
            Source::Random => {
                self.finish(self.random([fan_in, out], Init::Weight { fan_in }), false)
            }
        };
        let b = Some(self.param(&format!("{prefix}.bias"), [out], Init::Bias, false)?);
        Ok(Linear { w, b })
    }

    /// `ConvTranspose2d(inp -> out, kernel = stride = s)` (weights `[inp, out, s, s]`) as a linear
    /// layer `inp -> s*s*out` whose outputs are laid out `[r][c][out]` (reordered once); the caller
    /// pixel-shuffles. With stride equal to the kernel there is no overlap, so this is exact (SPEC §6).
    pub fn conv_transpose_as_linear(
        &self,
        prefix: &str,
        inp: usize,
        out: usize,
        s: usize,
    ) -> Result<Linear, Error> {
        let key = format!("{prefix}.weight");
        let w = match &self.source {
            Source::Checkpoint { .. } => {
                let t = self.host(&key, &[inp, out, s, s])?;
                let mut v = vec![0.0f32; t.data.len()];
                for i in 0..inp {
                    for o in 0..out {
                        for rc in 0..s * s {
                            v[(i * s * s + rc) * out + o] = t.data[(i * out + o) * s * s + rc];
                        }
                    }
                }
                self.upload(v, [inp, out * s * s], false)
            }
            Source::Random => self.finish(
                self.random([inp, out * s * s], Init::Weight { fan_in: inp }),
                false,
            ),
        };
        let bkey = format!("{prefix}.bias");
        let b = match &self.source {
            Source::Checkpoint { .. } => {
                let t = self.host(&bkey, &[out])?;
                let rep: Vec<f32> = (0..s * s).flat_map(|_| t.data.iter().copied()).collect();
                self.upload(rep, [out * s * s], false)
            }
            Source::Random => self.finish(self.random([out * s * s], Init::Bias), false),
        };
        Ok(Linear { w, b: Some(b) })
    }

    /// A LayerNorm (kept in binary32 at every precision).
    pub fn layer_norm(&self, prefix: &str, dim: usize, eps: f64) -> Result<LayerNorm, Error> {
        Ok(LayerNorm {
            gamma: self.param(&format!("{prefix}.weight"), [dim], Init::NormWeight, true)?,
            beta: self.param(&format!("{prefix}.bias"), [dim], Init::Bias, true)?,
            eps,
        })
    }

    /// A `Conv2d(inp -> out, k x k)` (weights `[out, inp, k, k]`) for channels-last maps, its
    /// weights reordered once to `[(ky, kx, inp), out]` for the im2col product of [`StackedConv2d`].
    #[allow(clippy::too_many_arguments)]
    pub fn conv(
        &self,
        prefix: &str,
        inp: usize,
        out: usize,
        k: usize,
        stride: usize,
        pad: usize,
        bias: bool,
    ) -> Result<Conv2d, Error> {
        let key = format!("{prefix}.weight");
        let fan_in = inp * k * k;
        let w = match &self.source {
            Source::Checkpoint { .. } => {
                let t = self.host(&key, &[out, inp, k, k])?;
                let mut v = vec![0.0f32; t.data.len()];
                for o in 0..out {
                    for c in 0..inp {
                        for ky in 0..k {
                            for kx in 0..k {
                                v[((ky * k + kx) * inp + c) * out + o] =
                                    t.data[((o * inp + c) * k + ky) * k + kx];
                            }
                        }
                    }
                }
                self.upload(v, [fan_in, out], false)
            }
            Source::Random => {
                self.finish(self.random([fan_in, out], Init::Weight { fan_in }), false)
            }
        };
        let b = if bias {
            Some(self.param(&format!("{prefix}.bias"), [out], Init::Bias, false)?)
        } else {
            None
        };
        Ok(Conv2d {
            lin: Linear { w, b },
            k,
            stride,
            pad,
        })
    }

    /// A transformer MLP `fc1 -> GELU -> fc2`.
    pub fn mlp(&self, prefix: &str, dim: usize, hidden: usize, out: usize) -> Result<Mlp, Error> {
        Ok(Mlp {
            fc1: self.linear(&format!("{prefix}.fc1"), dim, hidden, true)?,
            fc2: self.linear(&format!("{prefix}.fc2"), hidden, out, true)?,
        })
    }
}

/// `[rows, cols]` row-major to `[cols, rows]` row-major.
fn transpose(data: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut out = vec![0.0f32; data.len()];
    for r in 0..rows {
        for c in 0..cols {
            out[c * rows + r] = data[r * cols + c];
        }
    }
    out
}

/// `y = x W + b` with `W` stored `[in, out]`.
#[derive(Clone, Debug)]
pub(crate) struct Linear {
    pub w: Tensor<2>,
    pub b: Option<Tensor<1>>,
}

/// `residual + act(y)`, `act` the exact GELU when `gelu`, as separate operations (where the
/// fused epilogue does not run).
fn act_residual<const D: usize>(
    y: Tensor<D>,
    gelu_on: bool,
    residual: Option<Tensor<D>>,
) -> Tensor<D> {
    let y = if gelu_on { gelu(y) } else { y };
    match residual {
        Some(r) => r + y,
        None => y,
    }
}

impl Linear {
    /// `residual + act(x W + b)`: the product, then bias, GELU (when `gelu`) and residual in
    /// one launch ([`super::kernels::linear_epilogue`]).
    pub fn forward_then<const D: usize>(
        &self,
        x: Tensor<D>,
        gelu: bool,
        residual: Option<Tensor<D>>,
    ) -> Tensor<D> {
        let Some(b) = &self.b else {
            return act_residual(self.forward(x), gelu, residual);
        };
        let mut dims = x.dims();
        let inp = dims[D - 1];
        let rows = dims[..D - 1].iter().product::<usize>();
        let y = matmul(x.reshape([rows, inp]), self.w.clone());
        dims[D - 1] = y.dims()[1];
        let y = y.reshape(dims);
        if super::kernels::on_cube(&y) {
            super::kernels::linear_epilogue(y, b.clone().unsqueeze::<2>(), residual, gelu)
        } else {
            act_residual(y + b.clone().unsqueeze::<D>(), gelu, residual)
        }
    }

    pub fn forward<const D: usize>(&self, x: Tensor<D>) -> Tensor<D> {
        if !rust3r_gpu::blas::uses_cublas(&x) {
            return linear(x, self.w.clone(), self.b.clone());
        }
        // One product over all leading dimensions, bias added after (cuBLAS on CUDA).
        let mut dims = x.dims();
        let inp = dims[D - 1];
        let rows = dims[..D - 1].iter().product::<usize>();
        let y = matmul(x.reshape([rows, inp]), self.w.clone());
        let y = match &self.b {
            Some(b) => y + b.clone().unsqueeze::<2>(),
            None => y,
        };
        dims[D - 1] = y.dims()[1];
        y.reshape(dims)
    }
}

/// LayerNorm over the last dimension, biased variance, statistics in binary32.
#[derive(Clone, Debug)]
pub(crate) struct LayerNorm {
    pub gamma: Tensor<1>,
    pub beta: Tensor<1>,
    pub eps: f64,
}

impl LayerNorm {
    pub fn forward<const D: usize>(&self, x: Tensor<D>) -> Tensor<D> {
        if super::kernels::on_cube(&x) {
            let c = self.gamma.dims()[0];
            return super::kernels::layer_norm(
                x,
                self.gamma.clone().reshape([1, c]),
                self.beta.clone().reshape([1, c]),
                self.eps,
            );
        }
        let dtype = x.dtype();
        let x = if dtype == DType::F32 {
            x
        } else {
            x.cast(DType::F32)
        };
        let y = normalize_last(x, self.eps) * self.gamma.clone().unsqueeze::<D>()
            + self.beta.clone().unsqueeze::<D>();
        if dtype == DType::F32 {
            y
        } else {
            y.cast(dtype)
        }
    }
}

/// `(x - mean) / sqrt(var + eps)` over the last dimension (biased variance), as Burn's
/// `layer_norm` computes it, with the row sums of [`last_dim_sum`].
pub(crate) fn normalize_last<const D: usize>(x: Tensor<D>, eps: f64) -> Tensor<D> {
    let n = x.dims()[D - 1] as f64;
    let mean = last_dim_sum(x.clone()) / n;
    let centered = x - mean;
    let var = last_dim_sum(centered.clone() * centered.clone()) / n;
    centered / (var + eps).sqrt()
}

/// `softmax(x)` over the last dimension, as Burn's `softmax` computes it, with the row maxima
/// and sums of [`last_dim_max`] and [`last_dim_sum`].
pub(crate) fn softmax_last<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    let e = (x.clone() - last_dim_max(x)).exp();
    e.clone() / last_dim_sum(e)
}

/// Sum over the last dimension (kept, of size 1).
///
/// Burn's reductions without autotuning give each row to one GPU thread: LayerNorm's 768 rows
/// of 1024 took 41 us per reduction on the H100, and the reductions of LayerNorm and softmax
/// were some 10 ms of a 73 ms frame (docs/benchmarks/journal.md, 2026-11-27). Reducing 32-wide pieces of
/// each row first and then the pieces gives the GPU 32 times the threads, in two short launches.
pub(crate) fn last_dim_sum<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    last_dim_reduce(x, false)
}

/// Maximum over the last dimension (kept, of size 1); see [`last_dim_sum`].
pub(crate) fn last_dim_max<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    last_dim_reduce(x, true)
}

fn last_dim_reduce<const D: usize>(x: Tensor<D>, max: bool) -> Tensor<D> {
    let dims = x.dims();
    let n = dims[D - 1];
    let Some(piece) = [32usize, 16, 8]
        .into_iter()
        .find(|p| n.is_multiple_of(*p) && n > *p)
    else {
        return if max {
            x.max_dim(D - 1)
        } else {
            x.sum_dim(D - 1)
        };
    };
    let rows = dims[..D - 1].iter().product::<usize>();
    let pieces: Tensor<3> = x.reshape([rows, n / piece, piece]);
    let r = if max {
        pieces.max_dim(2).max_dim(1)
    } else {
        pieces.sum_dim(2).sum_dim(1)
    };
    let mut out = dims;
    out[D - 1] = 1;
    r.reshape(out)
}

/// 2D convolution (cross-correlation, square kernel, symmetric zero padding) on channels-last
/// maps `[B, H, W, C]`, as loaded; [`StackedConv2d`] runs it: the `k * k` shifted (and strided)
/// views are concatenated along channels (im2col) and multiplied by the reordered weights in one
/// matrix product.
#[derive(Clone, Debug)]
pub(crate) struct Conv2d {
    pub lin: Linear,
    pub k: usize,
    pub stride: usize,
    pub pad: usize,
}

/// The im2col matrix of a channels-last map: `[B, Ho, Wo, k * k * C]`, columns `(ky, kx, c)`
/// (one launch on a CubeCL device, [`super::kernels::im2col`]).
fn im2col(x: Tensor<4>, k: usize, s: usize, p: usize) -> Tensor<4> {
    if k > 1 && super::kernels::on_cube(&x) {
        let window = super::kernels::Window {
            k,
            stride: s,
            pad: p,
        };
        return super::kernels::im2col(x, window);
    }
    im2col_ops(x, k, s, p)
}

/// [`im2col`] as separate operations: the padded map's `k * k` strided views concatenated
/// along channels (the fused kernel's reference).
pub(crate) fn im2col_ops(x: Tensor<4>, k: usize, s: usize, p: usize) -> Tensor<4> {
    let [_, h, w, _] = x.dims();
    let x = if p > 0 {
        x.pad([(p, p), (p, p), (0, 0)], PadMode::Constant(0.0))
    } else {
        x
    };
    let ho = (h + 2 * p - k) / s + 1;
    let wo = (w + 2 * p - k) / s + 1;
    let mut cols = Vec::with_capacity(k * k);
    for ky in 0..k {
        for kx in 0..k {
            let rows = Slice::new(
                ky as isize,
                Some((ky + s * (ho - 1) + 1) as isize),
                s as isize,
            );
            let colsl = Slice::new(
                kx as isize,
                Some((kx + s * (wo - 1) + 1) as isize),
                s as isize,
            );
            cols.push(x.clone().slice_dim(1, rows).slice_dim(2, colsl));
        }
    }
    if cols.len() == 1 {
        cols.pop().expect("one")
    } else {
        Tensor::cat(cols, 3)
    }
}

/// `y = x W + b` for `S` weight sets at once (both heads, or both decoder stacks): `W`
/// `[S, in, out]`, `b` `[S, 1, out]`. Slot `s` of the input holds the rows of weight set `s`;
/// `S` is 2, or 1 for one set alone ([`StackedLinear::slot`]).
#[derive(Clone, Debug)]
pub(crate) struct StackedLinear {
    pub w: Tensor<3>,
    pub b: Option<Tensor<3>>,
}

impl StackedLinear {
    pub fn stack(a: Linear, b: Linear) -> Self {
        let bias = match (a.b, b.b) {
            (Some(x), Some(y)) => Some(Tensor::stack::<2>(vec![x, y], 0).unsqueeze_dim::<3>(1)),
            (None, None) => None,
            _ => unreachable!("both weight sets are loaded with the same layers"),
        };
        StackedLinear {
            w: Tensor::stack(vec![a.w, b.w], 0),
            b: bias,
        }
    }

    /// Weight set `s` alone (views of the stacked tensors).
    pub fn slot(&self, s: usize) -> Self {
        StackedLinear {
            w: self.w.clone().narrow(0, s, 1),
            b: self.b.clone().map(|b| b.narrow(0, s, 1)),
        }
    }

    /// `residual + act(x W + b)` for `x` `[S, M, in]`: bias, GELU (when `gelu`) and residual in
    /// one launch after the product ([`super::kernels::linear_epilogue`]).
    pub fn forward_then(&self, x: Tensor<3>, gelu: bool, residual: Option<Tensor<3>>) -> Tensor<3> {
        let Some(b) = &self.b else {
            return act_residual(self.forward(x), gelu, residual);
        };
        let y = matmul(x, self.w.clone());
        let [s, _, out] = b.dims();
        if super::kernels::on_cube(&y) {
            super::kernels::linear_epilogue(y, b.clone().reshape([s, out]), residual, gelu)
        } else {
            act_residual(y + b.clone(), gelu, residual)
        }
    }

    /// `x`: `[S, M, in]`.
    pub fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        let y = matmul(x, self.w.clone());
        match &self.b {
            Some(b) => y + b.clone(),
            None => y,
        }
    }

    /// `x`: `[S * B, ..., in]`, the first `B` along the leading axis for weight set 0, and so on.
    pub fn forward_slots<const D: usize>(&self, x: Tensor<D>) -> Tensor<D> {
        let mut dims = x.dims();
        let slots = self.w.dims()[0];
        let inp = dims[D - 1];
        let rows = dims[..D - 1].iter().product::<usize>() / slots;
        let y = self.forward(x.reshape([slots, rows, inp]));
        dims[D - 1] = y.dims()[2];
        y.reshape(dims)
    }
}

/// [`Conv2d`] for `S` weight sets: input `[S * B, H, W, C]`, slot-major along the batch.
#[derive(Clone, Debug)]
pub(crate) struct StackedConv2d {
    lin: StackedLinear,
    k: usize,
    stride: usize,
    pad: usize,
}

impl StackedConv2d {
    pub fn stack(a: Conv2d, b: Conv2d) -> Self {
        debug_assert_eq!((a.k, a.stride, a.pad), (b.k, b.stride, b.pad));
        StackedConv2d {
            lin: StackedLinear::stack(a.lin, b.lin),
            k: a.k,
            stride: a.stride,
            pad: a.pad,
        }
    }

    pub fn slot(&self, s: usize) -> Self {
        StackedConv2d {
            lin: self.lin.slot(s),
            ..*self
        }
    }

    pub fn forward(&self, x: Tensor<4>) -> Tensor<4> {
        let (k, s, p) = (self.k, self.stride, self.pad);
        if k == 1 && s == 1 && p == 0 {
            return self.lin.forward_slots(x);
        }
        let [n, h, w, c] = x.dims();
        let (ho, wo) = ((h + 2 * p - k) / s + 1, (w + 2 * p - k) / s + 1);
        let im2col_bytes = n * ho * wo * k * k * c * x.dtype().size();
        if n > 1 && im2col_bytes > IM2COL_SPLIT_BYTES {
            // One frame at a time: the largest buffer stays one frame's im2col matrix (what
            // `Mast3r::largest_buffer_bytes` promises), whatever the batch and the stacking.
            let per_slot = n / self.lin.w.dims()[0];
            let parts = (0..n)
                .map(|i| self.slot(i / per_slot).forward(x.clone().narrow(0, i, 1)))
                .collect();
            return Tensor::cat(parts, 0);
        }
        self.lin.forward_slots(im2col(x, k, s, p))
    }
}

/// Stacked or batched convolutions whose im2col matrix would exceed this run one frame at a time
/// (the large full-resolution convolutions, which are not launch-bound anyway).
const IM2COL_SPLIT_BYTES: usize = 64 << 20;

/// [`Mlp`] for `S` weight sets (see [`StackedLinear::forward_slots`]).
#[derive(Clone, Debug)]
pub(crate) struct StackedMlp {
    fc1: StackedLinear,
    fc2: StackedLinear,
}

impl StackedMlp {
    pub fn stack(a: Mlp, b: Mlp) -> Self {
        StackedMlp {
            fc1: StackedLinear::stack(a.fc1, b.fc1),
            fc2: StackedLinear::stack(a.fc2, b.fc2),
        }
    }

    pub fn slot(&self, s: usize) -> Self {
        StackedMlp {
            fc1: self.fc1.slot(s),
            fc2: self.fc2.slot(s),
        }
    }

    pub fn forward_slots<const D: usize>(&self, x: Tensor<D>) -> Tensor<D> {
        self.fc2.forward_slots(gelu(self.fc1.forward_slots(x)))
    }
}

/// `fc2(GELU(fc1(x)))` with the exact (erf) GELU.
#[derive(Clone, Debug)]
pub(crate) struct Mlp {
    pub fc1: Linear,
    pub fc2: Linear,
}

impl Mlp {
    /// `residual + fc2(GELU(fc1(x)))`, each product followed by one fused launch.
    pub fn forward_residual<const D: usize>(&self, x: Tensor<D>, residual: Tensor<D>) -> Tensor<D> {
        let hidden = self.fc1.forward_then(x, true, None);
        self.fc2.forward_then(hidden, false, Some(residual))
    }
}

pub(crate) fn relu4(x: Tensor<4>) -> Tensor<4> {
    relu(x)
}

/// A channels-last `[B, H, W, C]` map as `[B, C, H, W]` (a view).
pub(crate) fn nchw(x: &Tensor<4>) -> Tensor<4> {
    x.clone().permute([0, 3, 1, 2])
}

/// `[B, N, C]` tokens of an `h x w` grid to a channels-last `[B, h, w, C]` map (token n = row
/// n / w, column n % w).
pub(crate) fn tokens_to_map(x: Tensor<3>, h: usize, w: usize) -> Tensor<4> {
    let [b, n, c] = x.dims();
    debug_assert_eq!(n, h * w);
    x.reshape([b, h, w, c])
}

/// Named intermediate tensors, read back to the host as they are produced (parity checks).
/// A disabled trace costs nothing.
#[derive(Debug, Default)]
pub struct Trace {
    enabled: bool,
    prefix: String,
    tensors: Vec<(String, TensorF32)>,
}

impl Trace {
    /// A trace that records nothing.
    pub fn disabled() -> Self {
        Trace::default()
    }

    /// A trace that records every intermediate.
    pub fn enabled() -> Self {
        Trace {
            enabled: true,
            ..Trace::default()
        }
    }

    /// Whether tensors are recorded.
    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// Prepended to every recorded name (e.g. `view1.`).
    pub fn set_prefix(&mut self, prefix: &str) {
        self.prefix = prefix.to_string();
    }

    /// Records the `views.len()` equal parts of `t` along its leading axis as
    /// `view{views[i]}.{name}` (tensors that hold several views slot-major).
    pub fn record_views<const D: usize>(&mut self, views: &[usize], name: &str, t: &Tensor<D>) {
        if !self.enabled {
            return;
        }
        let part = t.dims()[0] / views.len();
        let prefix = std::mem::take(&mut self.prefix);
        for (i, v) in views.iter().enumerate() {
            self.prefix = format!("view{v}.");
            self.record(name, &t.clone().narrow(0, i * part, part));
        }
        self.prefix = prefix;
    }

    /// Records `t` (binary32 on the host) under `prefix + name`.
    pub fn record<const D: usize>(&mut self, name: &str, t: &Tensor<D>) {
        if !self.enabled {
            return;
        }
        let shape = t.dims().to_vec();
        let data = t
            .clone()
            .cast(DType::F32)
            .into_data()
            .try_into_vec::<f32>()
            .expect("binary32 tensor data");
        self.tensors.push((
            format!("{}{name}", self.prefix),
            TensorF32::new(shape, data).expect("shape matches data"),
        ));
    }

    /// The recorded tensors, in recording order.
    pub fn tensors(&self) -> &[(String, TensorF32)] {
        &self.tensors
    }

    /// The recorded tensors, in recording order.
    pub fn into_tensors(self) -> Vec<(String, TensorF32)> {
        self.tensors
    }
}
