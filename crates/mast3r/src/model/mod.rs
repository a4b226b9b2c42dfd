//! The MASt3R network (`AsymmetricMASt3R` with `catmlp+dpt` heads) on Burn tensors, following
//! `shared/fixtures/mast3r_tiny/SPEC.md`. Every size comes from the [`Mast3rConfig`], so the tiny
//! fixture model and the released ViT-L checkpoint run through the same code.
//!
//! | module | SPEC | concern |
//! |---|---|---|
//! | `patch_embed` | §2 | 16x16 patches to tokens (one matrix product) |
//! | `rope` | §3 | RoPE2D tables and rotation |
//! | `attention`, `encoder`, `decoder` | §4, §5 | ViT encoder, two cross-attending decoder stacks |
//! | `dpt` | §6 | DPT head (4 channels) |
//! | `local_feat` | §7 | local-feature MLP and pixel shuffle (descriptors + confidence) |
//! | `postprocess` | §8 | pts3d, conf, desc, desc_conf |
//!
//! The inference entry points mirror how MASt3R-SLAM drives the model: [`Mast3r::encode`] once per
//! frame, [`Mast3r::decode`] for an ordered pair of encoded frames (decoder + head 1 on view 1 +
//! head 2 on view 2), [`Mast3r::mono`] for a frame with itself, [`Mast3r::symmetric`] for both
//! orders of a pair in one batch, and [`Mast3r::asymmetric`] for two images.

mod attention;
mod decoder;
mod dpt;
mod encoder;
mod graph;
mod kernels;
mod layers;
mod local_feat;
mod patch_embed;
mod postprocess;
mod rope;

use std::collections::HashMap;
use std::sync::Mutex;

use burn::tensor::{DType, Device, Int, Tensor, TensorData};
use rust3r_gpu::profile::Profiler;

pub use graph::Replayer;
pub use layers::{Precision, Trace};
pub use postprocess::Prediction;

use crate::checkpoint::Checkpoint;
use crate::config::Mast3rConfig;
use crate::error::Error;
use decoder::{DecoderBlock, PairedDecoderBlock};
use dpt::Dpt;
use encoder::EncoderBlock;
use layers::{LayerNorm, Linear, Loader, Source};
use local_feat::LocalFeat;
use patch_embed::PatchEmbed;
use rope::RopeTables;

/// One frame (or a batch of frames of one size) after the encoder.
#[derive(Clone, Debug)]
pub struct Encoded {
    /// `[B, N, E]` encoder output (after `enc_norm`).
    pub feat: Tensor<3>,
    /// Token grid `[h, w]` (image size / patch size); token n is at row n / w, column n % w.
    pub grid: [usize; 2],
}

impl Encoded {
    /// Token positions `(row, column)` in token order (upstream `pos`, int64).
    pub fn positions(&self) -> Vec<[i64; 2]> {
        let [h, w] = self.grid;
        (0..h * w)
            .map(|n| [(n / w) as i64, (n % w) as i64])
            .collect()
    }

    /// Number of frames in the batch.
    pub fn batch(&self) -> usize {
        self.feat.dims()[0]
    }

    /// Frame `i` of the batch.
    pub fn frame(&self, i: usize) -> Encoded {
        Encoded {
            feat: self.feat.clone().narrow(0, i, 1),
            grid: self.grid,
        }
    }

    /// Concatenates encodings of the same grid along the batch.
    pub fn cat(items: &[&Encoded]) -> Encoded {
        assert!(!items.is_empty(), "nothing to concatenate");
        let grid = items[0].grid;
        assert!(
            items.iter().all(|e| e.grid == grid),
            "encodings of different image sizes cannot be batched"
        );
        Encoded {
            feat: Tensor::cat(items.iter().map(|e| e.feat.clone()).collect(), 0),
            grid,
        }
    }
}

/// The outputs of one head on the host, channels last, row-major `[B, H, W, C]`.
#[derive(Clone, Debug, PartialEq)]
pub struct HostPrediction {
    /// Batch size.
    pub batch: usize,
    /// Image height.
    pub height: usize,
    /// Image width.
    pub width: usize,
    /// `B * H * W * 3`.
    pub pts3d: Vec<f32>,
    /// `B * H * W`.
    pub conf: Vec<f32>,
    /// Descriptor size.
    pub desc_dim: usize,
    /// `B * H * W * desc_dim`.
    pub desc: Vec<f32>,
    /// `B * H * W` (empty without `two_confs`).
    pub desc_conf: Vec<f32>,
}

/// How [`Prediction::pack_without_desc`] packed each prediction: batch, height, width,
/// descriptor size, pixels and descriptor confidences.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackedLayout(Vec<(usize, usize, usize, usize, usize, usize)>);

impl PackedLayout {
    /// The predictions (descriptors empty) from the packed values read back.
    pub fn unpack(&self, all: &[f32]) -> Vec<HostPrediction> {
        let mut at = 0;
        let mut take = |len: usize| {
            let v = all[at..at + len].to_vec();
            at += len;
            v
        };
        self.0
            .iter()
            .map(|&(batch, height, width, desc_dim, n, q)| HostPrediction {
                batch,
                height,
                width,
                pts3d: take(n * 3),
                conf: take(n),
                desc_dim,
                desc: Vec::new(),
                desc_conf: take(q),
            })
            .collect()
    }
}

fn host_vec<const D: usize>(t: &Tensor<D>) -> Vec<f32> {
    t.clone()
        .cast(DType::F32)
        .into_data()
        .try_into_vec::<f32>()
        .expect("binary32 data")
}

impl Prediction {
    /// Reads every output back to the host.
    pub fn to_host(&self) -> HostPrediction {
        let [batch, height, width, desc_dim] = self.desc.dims();
        HostPrediction {
            batch,
            height,
            width,
            pts3d: host_vec(&self.pts3d),
            conf: host_vec(&self.conf),
            desc_dim,
            desc: host_vec(&self.desc),
            desc_conf: self.desc_conf.as_ref().map(host_vec).unwrap_or_default(),
        }
    }

    /// The points, confidences and descriptor confidences on the host, read back in one
    /// transfer (packed on the device, [`Prediction::pack_without_desc`]), and the descriptors
    /// left on the device: `desc` of the result is empty (`desc_dim` is set).
    pub fn to_host_without_desc(&self) -> HostPrediction {
        let (all, layout) =
            Self::pack_without_desc(std::slice::from_ref(self)).expect("one prediction packs");
        let mut host = layout.unpack(&host_vec(&all));
        host.pop().expect("one prediction unpacked")
    }

    /// What [`Prediction::to_host_without_desc`] reads back, for several predictions, packed
    /// into one binary32 tensor on the device (queued, not read), and how to unpack it
    /// ([`PackedLayout::unpack`]; `None`: no predictions).
    pub fn pack_without_desc(preds: &[Prediction]) -> Option<(Tensor<1>, PackedLayout)> {
        let mut parts = Vec::new();
        let mut sizes = Vec::new();
        for p in preds {
            let [batch, height, width, desc_dim] = p.desc.dims();
            let n = batch * height * width;
            let flat = |t: Tensor<1>| t.cast(DType::F32);
            parts.push(flat(p.pts3d.clone().reshape([n * 3])));
            parts.push(flat(p.conf.clone().reshape([n])));
            let q = p.desc_conf.as_ref().map_or(0, |_| n);
            if let Some(q) = &p.desc_conf {
                parts.push(flat(q.clone().reshape([n])));
            }
            sizes.push((batch, height, width, desc_dim, n, q));
        }
        (!parts.is_empty()).then(|| (Tensor::cat(parts, 0), PackedLayout(sizes)))
    }

    /// Frame `i` of a batched prediction.
    pub fn frame(&self, i: usize) -> Prediction {
        self.frames(i, 1)
    }

    /// Frames `start..start + len` of a batched prediction.
    pub fn frames(&self, start: usize, len: usize) -> Prediction {
        Prediction {
            pts3d: self.pts3d.clone().narrow(0, start, len),
            conf: self.conf.clone().narrow(0, start, len),
            desc: self.desc.clone().narrow(0, start, len),
            desc_conf: self
                .desc_conf
                .as_ref()
                .map(|t| t.clone().narrow(0, start, len)),
        }
    }
}

/// `downstream_head1` and `downstream_head2`, weights stacked (slot = head).
#[derive(Clone, Debug)]
struct Heads {
    dpt: Dpt,
    local: LocalFeat,
}

impl Heads {
    fn slot(&self, s: usize) -> Heads {
        Heads {
            dpt: self.dpt.slot(s),
            local: self.local.slot(s),
        }
    }
}

/// The MASt3R network with its weights on one device.
pub struct Mast3r {
    cfg: Mast3rConfig,
    device: Device,
    precision: Precision,
    patch_embed: PatchEmbed,
    enc_blocks: Vec<EncoderBlock>,
    enc_norm: LayerNorm,
    decoder_embed: Linear,
    /// Block `i` of `dec_blocks` (view 1) and `dec_blocks2` (view 2), weights stacked.
    dec_blocks: Vec<PairedDecoderBlock>,
    dec_norm: LayerNorm,
    heads: Heads,
    /// Run both heads in one set of launches when the views have one size (the default).
    stack_heads: bool,
    rope: Mutex<HashMap<(usize, usize, usize), RopeTables>>,
    /// Phase timing of encoder, decoder, DPT, local features and post-processing (host time,
    /// synchronised per phase); off by default.
    profiler: Profiler,
}

impl std::fmt::Debug for Mast3r {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mast3r")
            .field("config", &self.cfg)
            .field("device", &self.device)
            .field("precision", &self.precision)
            .finish_non_exhaustive()
    }
}

impl Mast3r {
    /// Moves a checkpoint's weights onto `device` in `precision`.
    pub fn from_checkpoint(
        ckpt: &Checkpoint,
        device: &Device,
        precision: Precision,
    ) -> Result<Self, Error> {
        let loader = Loader {
            device: device.clone(),
            dtype: precision.dtype(),
            source: Source::Checkpoint {
                tensors: ckpt.tensors(),
                path: ckpt.path().to_path_buf(),
            },
        };
        Self::build(ckpt.config(), &loader, precision)
    }

    /// Loads a `.pth` or safetensors checkpoint (see [`Checkpoint::load`]) onto `device`.
    pub fn load(
        path: impl AsRef<std::path::Path>,
        device: &Device,
        precision: Precision,
    ) -> Result<Self, Error> {
        let ckpt = Checkpoint::load(path)?;
        Self::from_checkpoint(&ckpt, device, precision)
    }

    /// The architecture of `cfg` with random weights drawn on the device (for benchmarks: timing
    /// does not depend on the values). The scales follow the fixture's initialisation so the
    /// activations stay finite.
    pub fn random(cfg: &Mast3rConfig, device: &Device, precision: Precision, seed: u64) -> Self {
        device.seed(seed);
        let loader = Loader {
            device: device.clone(),
            dtype: precision.dtype(),
            source: Source::Random,
        };
        Self::build(cfg, &loader, precision).expect("random weights cannot fail to load")
    }

    fn build(cfg: &Mast3rConfig, l: &Loader, precision: Precision) -> Result<Self, Error> {
        let (e, d, eps) = (cfg.enc_embed_dim, cfg.dec_embed_dim, cfg.layernorm_eps);
        let patch_embed = PatchEmbed {
            proj: l.conv_as_linear("patch_embed.proj", cfg.in_chans, e, cfg.patch_size)?,
            patch: cfg.patch_size,
        };
        let enc_blocks = (0..cfg.enc_depth)
            .map(|i| {
                EncoderBlock::load(
                    l,
                    &format!("enc_blocks.{i}"),
                    e,
                    cfg.enc_num_heads,
                    cfg.enc_mlp_hidden,
                    eps,
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        let stack = |name: &str| {
            (0..cfg.dec_depth)
                .map(|i| {
                    DecoderBlock::load(
                        l,
                        &format!("{name}.{i}"),
                        d,
                        cfg.dec_num_heads,
                        cfg.dec_mlp_hidden,
                        eps,
                        cfg.norm_im2_in_dec,
                    )
                })
                .collect::<Result<Vec<_>, _>>()
        };
        let heads = Heads {
            dpt: Dpt::load(
                l,
                ["downstream_head1.dpt", "downstream_head2.dpt"],
                &cfg.dpt,
            )?,
            local: LocalFeat::load(
                l,
                [
                    "downstream_head1.head_local_features",
                    "downstream_head2.head_local_features",
                ],
                &cfg.local_feat,
                cfg.patch_size,
            )?,
        };
        Ok(Mast3r {
            cfg: cfg.clone(),
            device: l.device.clone(),
            precision,
            patch_embed,
            enc_blocks,
            enc_norm: l.layer_norm("enc_norm", e, eps)?,
            decoder_embed: l.linear("decoder_embed", e, d, true)?,
            dec_blocks: stack("dec_blocks")?
                .into_iter()
                .zip(stack("dec_blocks2")?)
                .map(|(a, b)| PairedDecoderBlock::stack(a, b))
                .collect(),
            dec_norm: l.layer_norm("dec_norm", d, eps)?,
            heads,
            stack_heads: true,
            rope: Mutex::new(HashMap::new()),
            profiler: Profiler::default(),
        })
    }

    /// Bytes of the largest single device buffer the network needs for `cfg` at an `h x w` image
    /// (batch 1) in `precision`: the largest weight, or the im2col matrix of the DPT's full-resolution
    /// 3x3 convolution. Adapters limit one storage binding (wgpu `max_storage_buffer_binding_size`,
    /// 128 MiB on lavapipe), so callers can refuse sizes that cannot run.
    pub fn largest_buffer_bytes(
        cfg: &Mast3rConfig,
        h: usize,
        w: usize,
        precision: Precision,
    ) -> u64 {
        let bytes = match precision {
            Precision::F32 => 4u64,
            Precision::F16 => 2,
        };
        let weights = crate::config::expected_layout(cfg)
            .values()
            .map(|s| s.iter().product::<usize>() as u64)
            .max()
            .unwrap_or(0);
        let f = cfg.dpt.feature_dim as u64;
        let im2col_head2 = 9 * (f / 2) * (h * w) as u64;
        let im2col_head0 = 9 * f * (h * w / 4) as u64;
        bytes * weights.max(im2col_head2).max(im2col_head0)
    }

    /// Floating-point operations (a multiply-add counts 2) of the matrix products and convolutions
    /// for one `h x w` frame: `[encoder, decoder (both stacks), heads (both)]`; element-wise work
    /// is not counted. For the released model at 512x384: about 0.52, 0.44 and 0.55 TFLOP.
    pub fn flops(cfg: &Mast3rConfig, h: usize, w: usize) -> [f64; 3] {
        let p = cfg.patch_size as f64;
        let (th, tw) = ((h / cfg.patch_size) as f64, (w / cfg.patch_size) as f64);
        let n = th * tw;
        let (e, d) = (cfg.enc_embed_dim as f64, cfg.dec_embed_dim as f64);
        let (eh, dh) = (cfg.enc_mlp_hidden as f64, cfg.dec_mlp_hidden as f64);
        let enc = 2.0 * n * cfg.in_chans as f64 * p * p * e
            + cfg.enc_depth as f64 * (2.0 * n * (4.0 * e * e + 2.0 * e * eh) + 4.0 * n * n * e);
        let dec = 2.0
            * (2.0 * n * e * d
                + cfg.dec_depth as f64
                    * (2.0 * n * (8.0 * d * d + 2.0 * d * dh) + 8.0 * n * n * d));
        let t = &cfg.dpt;
        let [l1, l2, l3, l4] = t.layer_dims.map(|v| v as f64);
        let f = t.feature_dim as f64;
        let (ld, dt) = (t.last_dim as f64, t.dim_tokens.map(|v| v as f64));
        let n4 = (th / 2.0).ceil() * (tw / 2.0).ceil();
        let conv = |pixels: f64, k: f64, cin: f64, cout: f64| 2.0 * pixels * k * k * cin * cout;
        let act = 2.0 * n * (dt[0] * l1 + l1 * 16.0 * l1)
            + 2.0 * n * (dt[1] * l2 + l2 * 4.0 * l2)
            + 2.0 * n * dt[2] * l3
            + 2.0 * n * dt[3] * l4
            + conv(n4, 3.0, l4, l4);
        let rn = conv(16.0 * n, 3.0, l1, f)
            + conv(4.0 * n, 3.0, l2, f)
            + conv(n, 3.0, l3, f)
            + conv(n4, 3.0, l4, f);
        let fusion =
            |pix: f64, units: f64| units * 2.0 * conv(pix, 3.0, f, f) + conv(4.0 * pix, 1.0, f, f);
        let refine =
            fusion(n4, 1.0) + fusion(n, 2.0) + fusion(4.0 * n, 2.0) + fusion(16.0 * n, 2.0);
        let px = n * p * p;
        let head = conv(px / 4.0, 3.0, f, f / 2.0)
            + conv(px, 3.0, f / 2.0, ld)
            + conv(px, 1.0, ld, t.num_channels as f64);
        let lf = &cfg.local_feat;
        let local = 2.0 * n * (lf.in_dim * lf.hidden_dim + lf.hidden_dim * lf.out_dim) as f64;
        [enc, dec, 2.0 * (act + rn + refine + head + local)]
    }

    /// With `false`, the two heads run one after the other even when the views have one size
    /// (as they must when the sizes differ); the results are the same up to rounding. For tests
    /// and A/B benchmarks.
    pub fn set_stacked_heads(&mut self, on: bool) {
        self.stack_heads = on;
    }

    /// Time the forward pass's phases with `profiler` (e.g. the device's, [`rust3r_gpu::Gpu::profiler`]):
    /// host intervals, synchronised per phase, whatever its mode but off.
    pub fn set_profiler(&mut self, profiler: Profiler) {
        self.profiler = profiler;
    }

    /// The profiler the forward pass charges its phases to.
    pub fn profiler(&self) -> &Profiler {
        &self.profiler
    }

    fn profile_start(&self) {
        self.profiler.start_with(|| drop(self.device.sync()));
    }

    fn profile_mark(&self, phase: &'static str) {
        self.profiler.mark_with(|| drop(self.device.sync()), phase);
    }

    /// The network's configuration.
    pub fn config(&self) -> &Mast3rConfig {
        &self.cfg
    }

    /// The device holding the weights.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The precision of weights and activations.
    pub fn precision(&self) -> Precision {
        self.precision
    }

    fn rope(&self, grid: [usize; 2], head_dim: usize) -> RopeTables {
        let mut cache = self.rope.lock().unwrap_or_else(|e| e.into_inner());
        cache
            .entry((grid[0], grid[1], head_dim))
            .or_insert_with(|| {
                RopeTables::new(
                    grid[0],
                    grid[1],
                    head_dim,
                    self.cfg.rope_base,
                    &self.device,
                    self.precision.dtype(),
                )
            })
            .clone()
    }

    /// Uploads normalised images (`[B, 3, H, W]` values, row-major) to the device in the model's
    /// precision.
    pub fn image_tensor(&self, data: Vec<f32>, shape: [usize; 4]) -> Tensor<4> {
        let t = Tensor::<4>::from_data(TensorData::new(data, shape), (&self.device, DType::F32));
        self.to_precision(t)
    }

    /// [`Mast3r::image_tensor`] of interleaved 8-bit RGB (`rgb`, `height * width * 3`, as
    /// [`crate::preprocess::Preprocessed::rgb`]): uploaded as bytes, a quarter of the binary32
    /// image, and normalised on the device through a table of
    /// [`crate::preprocess::normalise`]'s values, so the result equals `image_tensor` of the
    /// preprocessed `data` bit for bit.
    pub fn image_tensor_u8(&self, rgb: &[u8], height: usize, width: usize) -> Tensor<4> {
        let n = height * width * 3;
        assert_eq!(rgb.len(), n, "a {width}x{height} RGB image has {n} bytes");
        // Four bytes per 32-bit word (WGSL has no 8-bit storage), little-endian.
        let words: Vec<i32> = rgb
            .chunks(4)
            .map(|c| {
                let mut b = [0u8; 4];
                b[..c.len()].copy_from_slice(c);
                i32::from_le_bytes(b)
            })
            .collect();
        let m = words.len();
        let packed =
            Tensor::<1, Int>::from_data(TensorData::new(words, [m]), (&self.device, DType::I32));
        let bytes: Vec<Tensor<1, Int>> = (0..4)
            .map(|k| {
                packed
                    .clone()
                    .bitwise_right_shift_scalar(8 * k)
                    .bitwise_and_scalar(255)
            })
            .collect();
        let idx = Tensor::stack::<2>(bytes, 1)
            .reshape([4 * m])
            .narrow(0, 0, n);
        let table: Vec<f32> = (0..=255u8).map(crate::preprocess::normalise).collect();
        let table =
            Tensor::<1>::from_data(TensorData::new(table, [256]), (&self.device, DType::F32));
        let img = table
            .select(0, idx)
            .reshape([height, width, 3])
            .permute([2, 0, 1])
            .unsqueeze_dim::<4>(0);
        self.to_precision(img)
    }

    fn to_precision<const D: usize>(&self, t: Tensor<D>) -> Tensor<D> {
        let dt = self.precision.dtype();
        if t.dtype() == dt { t } else { t.cast(dt) }
    }

    /// Encodes `[B, 3, H, W]` normalised images (H, W multiples of the patch size).
    pub fn encode(&self, img: Tensor<4>) -> Encoded {
        self.encode_traced(img, &mut Trace::disabled())
    }

    /// [`Mast3r::encode`], recording `patch_embed`, `enc_block{i}` and `enc_out`.
    pub fn encode_traced(&self, img: Tensor<4>, trace: &mut Trace) -> Encoded {
        let [_, c, hh, ww] = img.dims();
        let p = self.cfg.patch_size;
        assert!(
            c == self.cfg.in_chans && hh % p == 0 && ww % p == 0 && hh > 0 && ww > 0,
            "image of {c}x{hh}x{ww}: expected {} channels and a size that is a multiple of {p}",
            self.cfg.in_chans
        );
        let grid = [hh / p, ww / p];
        self.profile_start();
        let img = self.to_precision(img);
        let mut x = self.patch_embed.forward(img);
        trace.record("patch_embed", &x);
        let rope = self.rope(grid, self.cfg.enc_head_dim());
        for (i, blk) in self.enc_blocks.iter().enumerate() {
            x = blk.forward(x, &rope);
            trace.record(&format!("enc_block{i}"), &x);
        }
        let feat = self.enc_norm.forward(x);
        trace.record("enc_out", &feat);
        self.profile_mark("encoder");
        Encoded { feat, grid }
    }

    /// The two decoder stacks: the token lists `[enc, dec_1, ..., dec_norm(dec_L)]` of both views.
    fn decoder_tokens(&self, a: &Encoded, b: &Encoded, trace: &mut Trace) -> [Vec<Tensor<3>>; 2] {
        assert_eq!(a.batch(), b.batch(), "both views need the same batch size");
        self.profile_start();
        let hd = self.cfg.dec_head_dim();
        let ropes = [self.rope(a.grid, hd), self.rope(b.grid, hd)];
        let mut x = [
            self.decoder_embed.forward(a.feat.clone()),
            self.decoder_embed.forward(b.feat.clone()),
        ];
        let mut tokens = [vec![a.feat.clone()], vec![b.feat.clone()]];
        for v in 0..2 {
            trace.record(&format!("view{}.decoder_embed", v + 1), &x[v]);
        }
        let batch = a.batch();
        let dims = |t: &Tensor<3>| t.dims();
        let flat = |t: Tensor<3>| {
            let [b, n, c] = t.dims();
            t.reshape([1, b * n, c])
        };
        if a.grid == b.grid {
            // Both views in one launch per operation (stacked weights, slot = view).
            let [bb, n, c] = dims(&x[0]);
            let [x0, x1] = x;
            let mut xs = Tensor::cat(vec![flat(x0), flat(x1)], 0);
            for (i, blk) in self.dec_blocks.iter().enumerate() {
                let other = xs.clone().flip([0]);
                xs = blk.forward(xs, other, batch, &ropes[0], &ropes[1]);
                for (v, t) in tokens.iter_mut().enumerate() {
                    let xv = xs.clone().narrow(0, v, 1).reshape([bb, n, c]);
                    trace.record(&format!("view{}.dec_block{i}", v + 1), &xv);
                    t.push(xv);
                }
            }
        } else {
            for (i, blk) in self.dec_blocks.iter().enumerate() {
                let [d0, d1] = [dims(&x[0]), dims(&x[1])];
                let (f0, f1) = (flat(x[0].clone()), flat(x[1].clone()));
                let n1 = blk
                    .slot(0)
                    .forward(f0.clone(), f1.clone(), batch, &ropes[0], &ropes[1]);
                let n2 = blk.slot(1).forward(f1, f0, batch, &ropes[1], &ropes[0]);
                x = [n1.reshape(d0), n2.reshape(d1)];
                for v in 0..2 {
                    trace.record(&format!("view{}.dec_block{i}", v + 1), &x[v]);
                    tokens[v].push(x[v].clone());
                }
            }
        }
        for (v, t) in tokens.iter_mut().enumerate() {
            let last = t.pop().expect("dec_depth > 0");
            let out = self.dec_norm.forward(last);
            trace.record(&format!("view{}.dec_out", v + 1), &out);
            t.push(out);
        }
        self.profile_mark("decoder");
        tokens
    }

    /// Both heads: head 1 on view 1's token list, head 2 on view 2's. Views of one size run
    /// together (tokens stacked along the batch, one launch per layer for both heads).
    fn heads(
        &self,
        t1: &[Tensor<3>],
        t2: &[Tensor<3>],
        grids: [[usize; 2]; 2],
        trace: &mut Trace,
    ) -> [Prediction; 2] {
        if !self.stack_heads || grids[0] != grids[1] {
            return [
                self.run_heads(&self.heads.slot(0), t1, grids[0], &[1], trace),
                self.run_heads(&self.heads.slot(1), t2, grids[1], &[2], trace),
            ];
        }
        // Only the hooked token maps and the local-feature inputs are read: stack those (the
        // others keep view 1's tensor and are never read).
        let last = t1.len() - 1;
        let used = |i: usize| i == 0 || i == last || self.cfg.dpt.hooks.contains(&i);
        let tokens: Vec<Tensor<3>> = t1
            .iter()
            .zip(t2)
            .enumerate()
            .map(|(i, (a, b))| {
                if used(i) {
                    Tensor::cat(vec![a.clone(), b.clone()], 0)
                } else {
                    a.clone()
                }
            })
            .collect();
        let batch = t1[0].dims()[0];
        let p = self.run_heads(&self.heads, &tokens, grids[0], &[1, 2], trace);
        [p.frames(0, batch), p.frames(batch, batch)]
    }

    /// `heads` (one slot per entry of `views`) on token lists stacked slot-major along the batch.
    fn run_heads(
        &self,
        heads: &Heads,
        tokens: &[Tensor<3>],
        grid: [usize; 2],
        views: &[usize],
        trace: &mut Trace,
    ) -> Prediction {
        let [h, w] = grid;
        let dpt_out = heads.dpt.forward(tokens, h, w, views, trace);
        trace.record_views(views, "dpt_out", &dpt_out.clone().permute([0, 3, 1, 2]));
        self.profile_mark("dpt");
        let raw = heads
            .local
            .raw(tokens[0].clone(), tokens[tokens.len() - 1].clone());
        trace.record_views(views, "local_feat_raw", &raw);
        let local = heads.local.shuffle(raw, h, w);
        self.profile_mark("local_feat");
        let pred = postprocess::postprocess(
            dpt_out,
            local,
            &self.cfg.depth_mode,
            &self.cfg.conf_mode,
            self.cfg.local_feat.desc_dim,
            if self.cfg.two_confs {
                self.cfg.desc_conf_mode.as_ref()
            } else {
                None
            },
        );
        self.profile_mark("postprocess");
        pred
    }

    /// MASt3R-SLAM's `decoder(feat1, feat2, ...)`: both decoder stacks, head 1 on view 1's tokens
    /// and head 2 on view 2's. View 2's `pts3d` is in view 1's frame.
    pub fn decode(&self, a: &Encoded, b: &Encoded) -> [Prediction; 2] {
        self.decode_traced(a, b, &mut Trace::disabled())
    }

    /// [`Mast3r::decode`], recording `view{v}.decoder_embed`, `.dec_block{i}`, `.dec_out`,
    /// `.dpt.*` internals, `.dpt_out` and `.local_feat_raw`.
    pub fn decode_traced(&self, a: &Encoded, b: &Encoded, trace: &mut Trace) -> [Prediction; 2] {
        let [t1, t2] = self.decoder_tokens(a, b, trace);
        self.heads(&t1, &t2, [a.grid, b.grid], trace)
    }

    /// A single frame decoded with itself (MASt3R-SLAM's mono initialisation and keyframe
    /// pointmaps): `decode(a, a)`.
    pub fn mono(&self, a: &Encoded) -> [Prediction; 2] {
        self.decode(a, a)
    }

    /// Both orders of a pair in one batch of two: `[decode(a, b), decode(b, a)]`. `a` and `b` must
    /// be single frames of the same size.
    pub fn symmetric(&self, a: &Encoded, b: &Encoded) -> [[Prediction; 2]; 2] {
        assert!(
            a.batch() == 1 && b.batch() == 1,
            "symmetric() takes single frames"
        );
        let x = Encoded::cat(&[a, b]);
        let y = Encoded::cat(&[b, a]);
        let [p1, p2] = self.decode(&x, &y);
        [[p1.frame(0), p2.frame(0)], [p1.frame(1), p2.frame(1)]]
    }

    /// Upstream `forward(view1, view2)`: encodes both images (in one batch when their sizes
    /// agree) and decodes the pair.
    pub fn asymmetric(&self, img1: Tensor<4>, img2: Tensor<4>) -> ([Encoded; 2], [Prediction; 2]) {
        let (a, b) = if img1.dims() == img2.dims() {
            let n = img1.dims()[0];
            let both = self.encode(Tensor::cat(vec![img1, img2], 0));
            (
                Encoded {
                    feat: both.feat.clone().narrow(0, 0, n),
                    grid: both.grid,
                },
                Encoded {
                    feat: both.feat.narrow(0, n, n),
                    grid: both.grid,
                },
            )
        } else {
            (self.encode(img1), self.encode(img2))
        };
        let preds = self.decode(&a, &b);
        ([a, b], preds)
    }
}
