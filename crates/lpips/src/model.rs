//! The network on Burn tensors.

use burn::tensor::activation::relu;
use burn::tensor::module::{conv2d, max_pool2d};
use burn::tensor::ops::{ConvOptions, MaxPoolOptions};
use burn::tensor::{DType, Device, Tensor, TensorData};

use crate::Error;
use crate::weights::{LpipsWeights, Net, Op};

/// lpips's `ScalingLayer`: `x' = (x - shift) / scale` per RGB channel, on inputs in [-1, 1].
pub const SHIFT: [f64; 3] = [-0.030, -0.088, -0.188];
/// See [`SHIFT`].
pub const SCALE: [f64; 3] = [0.458, 0.448, 0.450];
/// lpips's `normalize_tensor` epsilon: `f / (sqrt(sum_c f^2) + eps)`.
pub const EPS: f64 = 1e-10;

/// One backbone operation with its weights on the device.
#[allow(
    clippy::large_enum_variant,
    reason = "at most 30 layers, built once per network"
)]
enum Layer {
    Conv {
        weight: Tensor<4>,
        bias: Tensor<1>,
        stride: usize,
        pad: usize,
    },
    Relu,
    Pool {
        kernel: usize,
        stride: usize,
    },
}

/// An image for [`Lpips`]: RGB, row-major, interleaved (`HWC`), values in [0, 1].
#[derive(Clone, Copy, Debug)]
pub struct Image<'a> {
    /// `width * height * 3` values.
    pub rgb: &'a [f32],
    /// Width in pixels.
    pub width: usize,
    /// Height in pixels.
    pub height: usize,
}

/// LPIPS v0.1 (the `lpips` package's `LPIPS(net=..., version='0.1')` with `normalize=True`) on a
/// Burn device. Build it once ([`Lpips::new`] / [`Lpips::load`]) and call [`Lpips::distance`] for
/// every pair: the weights stay on the device.
pub struct Lpips {
    weights: LpipsWeights,
    device: Device,
    layers: Vec<Layer>,
    /// `[1, C_k, 1, 1]`.
    lins: Vec<Tensor<4>>,
}

impl std::fmt::Debug for Lpips {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lpips")
            .field("net", &self.weights.net)
            .field("tap_channels", &self.weights.tap_channels())
            .finish()
    }
}

fn upload<const D: usize>(data: Vec<f32>, shape: [usize; D], device: &Device) -> Tensor<D> {
    Tensor::<D>::from_data(TensorData::new(data, shape), (device, DType::F32))
}

impl Lpips {
    /// Moves validated weights onto `device`.
    pub fn new(weights: LpipsWeights, device: &Device) -> Self {
        let mut convs = weights.convs.iter();
        let layers = weights
            .net
            .ops()
            .into_iter()
            .map(|op| match op {
                Op::Conv { stride, pad } => {
                    let c = convs.next().expect("one weight per convolution");
                    let s = &c.weight.shape;
                    Layer::Conv {
                        weight: upload(c.weight.data.clone(), [s[0], s[1], s[2], s[3]], device),
                        bias: upload(c.bias.data.clone(), [s[0]], device),
                        stride,
                        pad,
                    }
                }
                Op::Relu => Layer::Relu,
                Op::Pool { kernel, stride } => Layer::Pool { kernel, stride },
            })
            .collect();
        let lins = weights
            .lins
            .iter()
            .map(|t| upload(t.data.clone(), [1, t.shape[1], 1, 1], device))
            .collect();
        Lpips {
            weights,
            device: device.clone(),
            layers,
            lins,
        }
    }

    /// Reads and checks the weight files ([`LpipsWeights::load`]) and moves them onto `device`.
    pub fn load(
        backbone: &std::path::Path,
        lin: &std::path::Path,
        net: Option<Net>,
        device: &Device,
    ) -> Result<Self, Error> {
        Ok(Self::new(LpipsWeights::load(backbone, lin, net)?, device))
    }

    /// The backbone.
    pub fn net(&self) -> Net {
        self.weights.net
    }

    /// The host copy of the weights.
    pub fn weights(&self) -> &LpipsWeights {
        &self.weights
    }

    /// LPIPS between two images of the same size (0 for identical images).
    pub fn distance(&self, a: Image<'_>, b: Image<'_>) -> Result<f64, Error> {
        Ok(self.distance_layers(a, b)?.iter().sum())
    }

    /// The five per-layer terms whose sum is [`Lpips::distance`]: for each tap, the spatial mean
    /// of the lin-weighted squared difference of the channel-normalised features.
    pub fn distance_layers(&self, a: Image<'_>, b: Image<'_>) -> Result<[f64; 5], Error> {
        for (name, im) in [("first", &a), ("second", &b)] {
            if im.rgb.len() != im.width * im.height * 3 {
                return Err(Error::Input(format!(
                    "the {name} image has {} values, not {}x{}x3",
                    im.rgb.len(),
                    im.width,
                    im.height
                )));
            }
        }
        if (a.width, a.height) != (b.width, b.height) {
            return Err(Error::Input(format!(
                "the images differ in size: {}x{} and {}x{}",
                a.width, a.height, b.width, b.height
            )));
        }
        let (w, h) = (a.width, a.height);
        self.weights.tap_sizes(h, w)?;

        // Both images in one batch, planar, through lpips's scaling: ((2x - 1) - shift) / scale.
        let mut x = Vec::with_capacity(2 * 3 * h * w);
        for im in [&a, &b] {
            for c in 0..3 {
                x.extend(
                    im.rgb
                        .iter()
                        .skip(c)
                        .step_by(3)
                        .map(|&v| ((2.0 * v as f64 - 1.0 - SHIFT[c]) / SCALE[c]) as f32),
                );
            }
        }
        let mut x = upload(x, [2, 3, h, w], &self.device);

        let taps = self.net().taps();
        let mut terms = Vec::with_capacity(5);
        for (i, layer) in self.layers.iter().enumerate() {
            x = match layer {
                Layer::Conv {
                    weight,
                    bias,
                    stride,
                    pad,
                } => conv2d(
                    x,
                    weight.clone(),
                    Some(bias.clone()),
                    ConvOptions::new([*stride; 2], [*pad; 2], [1, 1], 1),
                ),
                Layer::Relu => relu(x),
                Layer::Pool { kernel, stride } => max_pool2d(
                    x,
                    MaxPoolOptions::new([*kernel; 2]).with_stride([*stride; 2]),
                ),
            };
            if let Some(k) = taps.iter().position(|&t| t == i + 1) {
                terms.push(self.layer_term(x.clone(), k));
            }
        }
        let values = Tensor::cat(terms, 0)
            .into_data()
            .try_into_vec::<f32>()
            .expect("binary32 data");
        Ok(std::array::from_fn(|k| values[k] as f64))
    }

    /// `mean_hw(lin_k((n0 - n1)^2))` with `n = f / (sqrt(sum_c f^2) + eps)`; the 1x1 convolution
    /// without bias is a channel-weighted sum.
    fn layer_term(&self, f: Tensor<4>, k: usize) -> Tensor<1> {
        let [_, _, h, w] = f.dims();
        let norm = f.clone().square().sum_dim(1).sqrt().add_scalar(EPS);
        let n = f / norm;
        let n0 = n.clone().slice_dim(0, 0..1);
        let n1 = n.slice_dim(0, 1..2);
        let d = (n0 - n1).square();
        let weighted = (d * self.lins[k].clone()).sum_dim(1);
        weighted.reshape([h * w]).mean()
    }
}
