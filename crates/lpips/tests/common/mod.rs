//! A float64 LPIPS written with plain loops (the test's reference), random networks and images.
#![allow(dead_code)]

use std::collections::BTreeMap;

use burn::tensor::{Device, DeviceKind};
use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng};
use rust3r_lpips::{Net, Op, SCALE, SHIFT, lin_key};
use rust3r_torch_checkpoint::TensorF32;

pub fn device() -> Device {
    Device::wgpu(DeviceKind::DefaultDevice)
}

/// Seeded random numbers for the tests (`rand`'s `StdRng`).
pub struct Rng(StdRng);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(StdRng::seed_from_u64(seed))
    }
    pub fn next(&mut self) -> u64 {
        self.0.random()
    }
    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        self.0.random()
    }
    /// Standard normal (Box-Muller).
    pub fn normal(&mut self) -> f64 {
        let u = self.uniform().max(1e-300);
        let v = self.uniform();
        (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
    }
}

/// A feature map, planar `[c][h][w]`, in f64.
#[derive(Clone, Debug)]
pub struct Map {
    pub c: usize,
    pub h: usize,
    pub w: usize,
    pub v: Vec<f64>,
}

impl Map {
    fn at(&self, c: usize, y: usize, x: usize) -> f64 {
        self.v[(c * self.h + y) * self.w + x]
    }
}

/// `out[o, y, x] = b[o] + sum_{i, ky, kx} w[o, i, ky, kx] in[i, y s + ky - p, x s + kx - p]`.
pub fn conv(x: &Map, w: &TensorF32, b: &TensorF32, stride: usize, pad: usize) -> Map {
    let (co, ci, k) = (w.shape[0], w.shape[1], w.shape[2]);
    assert_eq!(ci, x.c);
    let ho = (x.h + 2 * pad - k) / stride + 1;
    let wo = (x.w + 2 * pad - k) / stride + 1;
    let mut v = vec![0.0; co * ho * wo];
    for o in 0..co {
        for y in 0..ho {
            for xx in 0..wo {
                let mut s = b.data[o] as f64;
                for i in 0..ci {
                    for ky in 0..k {
                        let iy = (y * stride + ky) as isize - pad as isize;
                        if iy < 0 || iy >= x.h as isize {
                            continue;
                        }
                        for kx in 0..k {
                            let ix = (xx * stride + kx) as isize - pad as isize;
                            if ix < 0 || ix >= x.w as isize {
                                continue;
                            }
                            s += w.data[((o * ci + i) * k + ky) * k + kx] as f64
                                * x.at(i, iy as usize, ix as usize);
                        }
                    }
                }
                v[(o * ho + y) * wo + xx] = s;
            }
        }
    }
    Map {
        c: co,
        h: ho,
        w: wo,
        v,
    }
}

pub fn relu(x: &Map) -> Map {
    Map {
        v: x.v.iter().map(|&a| a.max(0.0)).collect(),
        ..*x
    }
}

/// Max pooling without padding, floor mode.
pub fn max_pool(x: &Map, k: usize, s: usize) -> Map {
    let ho = (x.h - k) / s + 1;
    let wo = (x.w - k) / s + 1;
    let mut v = vec![f64::NEG_INFINITY; x.c * ho * wo];
    for c in 0..x.c {
        for y in 0..ho {
            for xx in 0..wo {
                let o = &mut v[(c * ho + y) * wo + xx];
                for ky in 0..k {
                    for kx in 0..k {
                        *o = o.max(x.at(c, y * s + ky, xx * s + kx));
                    }
                }
            }
        }
    }
    Map {
        c: x.c,
        h: ho,
        w: wo,
        v,
    }
}

/// LPIPS per layer in f64: `rgb` HWC in [0, 1] (f32 values, as the implementation receives them).
pub fn reference(
    net: Net,
    backbone: &BTreeMap<String, TensorF32>,
    lin: &BTreeMap<String, TensorF32>,
    a: &[f32],
    b: &[f32],
    width: usize,
    height: usize,
) -> [f64; 5] {
    let features = |img: &[f32]| -> Vec<Map> {
        let mut v = Vec::with_capacity(3 * width * height);
        for c in 0..3 {
            for p in 0..width * height {
                v.push(((2.0 * img[p * 3 + c] as f64 - 1.0) - SHIFT[c]) / SCALE[c]);
            }
        }
        let mut x = Map {
            c: 3,
            h: height,
            w: width,
            v,
        };
        let mut taps = Vec::new();
        for (i, op) in net.ops().iter().enumerate() {
            x = match *op {
                Op::Conv { stride, pad } => conv(
                    &x,
                    &backbone[&format!("features.{i}.weight")],
                    &backbone[&format!("features.{i}.bias")],
                    stride,
                    pad,
                ),
                Op::Relu => relu(&x),
                Op::Pool { kernel, stride } => max_pool(&x, kernel, stride),
            };
            if net.taps().contains(&(i + 1)) {
                taps.push(x.clone());
            }
        }
        taps
    };
    let (fa, fb) = (features(a), features(b));
    std::array::from_fn(|k| {
        let (x, y) = (&fa[k], &fb[k]);
        let wl = &lin[&lin_key(k)];
        let mut total = 0.0;
        for p in 0..x.h * x.w {
            let norm = |m: &Map| {
                (0..m.c)
                    .map(|c| m.v[c * m.h * m.w + p].powi(2))
                    .sum::<f64>()
                    .sqrt()
                    + 1e-10
            };
            let (na, nb) = (norm(x), norm(y));
            for c in 0..x.c {
                let d = x.v[c * x.h * x.w + p] / na - y.v[c * y.h * y.w + p] / nb;
                total += wl.data[c] as f64 * d * d;
            }
        }
        total / (x.h * x.w) as f64
    })
}

/// Random weights for `net` with the given per-convolution output channels (kernel sizes are
/// torchvision's), He-initialised like the PyTorch fixture, plus a `classifier` entry to ignore.
pub fn random_net(
    rng: &mut Rng,
    net: Net,
    channels: &[usize],
) -> (BTreeMap<String, TensorF32>, BTreeMap<String, TensorF32>) {
    let kernels: Vec<usize> = match net {
        Net::Alex => vec![11, 5, 3, 3, 3],
        Net::Vgg => vec![3; 13],
    };
    let convs = net.conv_indices();
    assert_eq!(channels.len(), convs.len());
    let mut backbone = BTreeMap::new();
    let mut cin = 3;
    for ((&i, &c), &k) in convs.iter().zip(channels).zip(&kernels) {
        let std = (2.0 / (cin * k * k) as f64).sqrt();
        let w: Vec<f32> = (0..c * cin * k * k)
            .map(|_| (rng.normal() * std) as f32)
            .collect();
        let b: Vec<f32> = (0..c).map(|_| (rng.normal() * 0.05) as f32).collect();
        backbone.insert(
            format!("features.{i}.weight"),
            TensorF32::new(vec![c, cin, k, k], w).unwrap(),
        );
        backbone.insert(
            format!("features.{i}.bias"),
            TensorF32::new(vec![c], b).unwrap(),
        );
        cin = c;
    }
    backbone.insert(
        "classifier.1.weight".into(),
        TensorF32::new(vec![2, 2], vec![1.0; 4]).unwrap(),
    );
    let mut lin = BTreeMap::new();
    for (k, end) in net.taps().into_iter().enumerate() {
        let conv = *convs.iter().rfind(|&&i| i < end).unwrap();
        let c = backbone[&format!("features.{conv}.weight")].shape[0];
        let w: Vec<f32> = (0..c).map(|_| (rng.uniform() * 0.2) as f32).collect();
        lin.insert(lin_key(k), TensorF32::new(vec![1, c, 1, 1], w).unwrap());
    }
    (backbone, lin)
}

/// A smooth random image (bilinear blow-up of a coarse grid) and a noisy copy, HWC in [0, 1].
pub fn image_pair(rng: &mut Rng, width: usize, height: usize) -> (Vec<f32>, Vec<f32>) {
    let (gw, gh) = (width / 8 + 2, height / 8 + 2);
    let grid: Vec<f64> = (0..gw * gh * 3).map(|_| rng.uniform()).collect();
    let mut a = Vec::with_capacity(width * height * 3);
    for y in 0..height {
        for x in 0..width {
            let fy = y as f64 * (gh - 1) as f64 / (height - 1).max(1) as f64;
            let fx = x as f64 * (gw - 1) as f64 / (width - 1).max(1) as f64;
            let (y0, x0) = ((fy as usize).min(gh - 2), (fx as usize).min(gw - 2));
            let (ty, tx) = (fy - y0 as f64, fx - x0 as f64);
            for c in 0..3 {
                let g = |yy: usize, xx: usize| grid[(yy * gw + xx) * 3 + c];
                let v = (1.0 - ty) * ((1.0 - tx) * g(y0, x0) + tx * g(y0, x0 + 1))
                    + ty * ((1.0 - tx) * g(y0 + 1, x0) + tx * g(y0 + 1, x0 + 1));
                a.push(v as f32);
            }
        }
    }
    let b = a
        .iter()
        .map(|&v| (v as f64 + 0.08 * rng.normal()).clamp(0.0, 1.0) as f32)
        .collect();
    (a, b)
}
