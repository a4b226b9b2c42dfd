//! Building blocks shared by the network: weights moved from a [`Checkpoint`](crate::Checkpoint)
//! (or drawn at random for benchmarks) into Burn tensors, linear layers, LayerNorm, convolutions,
//! GELU MLPs, and the intermediate-tensor [`Trace`].

use std::collections::BTreeMap;

use burn::tensor::activation::{gelu, relu};
use burn::tensor::module::{conv2d, layer_norm, linear};
use burn::tensor::ops::{ConvOptions, PadMode};
use burn::tensor::{DType, Device, Distribution, Slice, Tensor, TensorData};

use crate::error::Error;
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
    /// weights reordered once to `[(ky, kx, inp), out]` for [`Conv2d::forward`]'s im2col product.
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

impl Linear {
    pub fn forward<const D: usize>(&self, x: Tensor<D>) -> Tensor<D> {
        linear(x, self.w.clone(), self.b.clone())
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
        let dtype = x.dtype();
        if dtype == DType::F32 {
            layer_norm(x, self.gamma.clone(), Some(self.beta.clone()), self.eps)
        } else {
            layer_norm(
                x.cast(DType::F32),
                self.gamma.clone(),
                Some(self.beta.clone()),
                self.eps,
            )
            .cast(dtype)
        }
    }
}

/// `RUST3R_MAST3R_CONV=direct` runs the DPT's 3x3 convolutions through Burn's `conv2d` instead of
/// im2col + matrix product (for comparing the two on a given GPU).
fn direct_conv() -> bool {
    static DIRECT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *DIRECT.get_or_init(|| std::env::var("RUST3R_MAST3R_CONV").is_ok_and(|v| v == "direct"))
}

/// 2D convolution (cross-correlation, square kernel, symmetric zero padding) on channels-last
/// maps `[B, H, W, C]`: the `k * k` shifted (and strided) views are concatenated along channels
/// (im2col) and multiplied by the reordered weights in one matrix product.
#[derive(Clone, Debug)]
pub(crate) struct Conv2d {
    pub lin: Linear,
    pub k: usize,
    pub stride: usize,
    pub pad: usize,
}

impl Conv2d {
    pub fn forward(&self, x: Tensor<4>) -> Tensor<4> {
        let (k, s, p) = (self.k, self.stride, self.pad);
        if k == 1 && s == 1 && p == 0 {
            return self.lin.forward(x);
        }
        if direct_conv() {
            // Burn's own convolution (its default kernel without autotune is a direct loop).
            let [kkc, out] = self.lin.w.dims();
            let c = kkc / (k * k);
            let w = self
                .lin
                .w
                .clone()
                .reshape([k, k, c, out])
                .permute([3, 2, 0, 1]);
            return conv2d(
                x.permute([0, 3, 1, 2]),
                w,
                self.lin.b.clone(),
                ConvOptions::new([s, s], [p, p], [1, 1], 1),
            )
            .permute([0, 2, 3, 1]);
        }
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
        let im = if cols.len() == 1 {
            cols.pop().expect("one")
        } else {
            Tensor::cat(cols, 3)
        };
        self.lin.forward(im)
    }
}

/// `fc2(GELU(fc1(x)))` with the exact (erf) GELU.
#[derive(Clone, Debug)]
pub(crate) struct Mlp {
    pub fc1: Linear,
    pub fc2: Linear,
}

impl Mlp {
    pub fn forward<const D: usize>(&self, x: Tensor<D>) -> Tensor<D> {
        self.fc2.forward(gelu(self.fc1.forward(x)))
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
