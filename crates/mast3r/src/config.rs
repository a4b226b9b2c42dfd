//! The MASt3R network configuration, derived from a checkpoint's tensor shapes (and its
//! `args.model` constructor string when there is one), and the exact key/shape layout it implies.
//!
//! Widths, depths, MLP sizes and every head constant (DPT `layer_dims`, `feature_dim`, `last_dim`,
//! local-feature MLP size) come from tensor shapes, so the tiny fixture (whose head constants differ
//! from upstream's hard-coded ones) and the released
//! `MASt3R_ViTLarge_BaseDecoder_512_catmlpdpt_metric` checkpoint go through the same code. What shapes
//! cannot tell — head counts, activation modes, `two_confs`, RoPE base, image size — comes from the
//! constructor string, interpreted like upstream `load_model` does (missing keyword arguments take the
//! upstream constructor defaults). A checkpoint without a constructor string gets the released
//! model's values, and head counts of `width / 64` (the released model's head size).

use std::collections::BTreeMap;

use crate::error::ConfigError;
use crate::model_string::{ModelString, PyValue, py_repr_f64};

/// The only model class supported.
pub const MODEL_CLASS: &str = "AsymmetricMASt3R";

/// Head size assumed when a checkpoint has no constructor string (as in every released CroCo,
/// DUSt3R and MASt3R model).
pub const DEFAULT_HEAD_DIM: usize = 64;

/// Output activation of a regression head: `kind` with clamping bounds `[vmin, vmax]`
/// (upstream `depth_mode`, `conf_mode`, `desc_conf_mode` tuples such as `('exp', 1, inf)`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ActivationMode {
    /// The activation.
    pub kind: ActivationKind,
    /// Lower bound (may be `-inf`).
    pub vmin: f64,
    /// Upper bound (may be `inf`).
    pub vmax: f64,
}

/// The activations upstream's post-processing knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ActivationKind {
    /// `exp` (for depth: `expm1` of the norm, see SPEC §8).
    Exp,
    /// Identity.
    Linear,
    /// Square.
    Square,
}

impl ActivationKind {
    fn name(self) -> &'static str {
        match self {
            ActivationKind::Exp => "exp",
            ActivationKind::Linear => "linear",
            ActivationKind::Square => "square",
        }
    }
}

impl ActivationMode {
    const fn exp(vmin: f64, vmax: f64) -> Self {
        ActivationMode {
            kind: ActivationKind::Exp,
            vmin,
            vmax,
        }
    }

    fn repr(&self) -> String {
        format!(
            "('{}', {}, {})",
            self.kind.name(),
            py_repr_f64(self.vmin),
            py_repr_f64(self.vmax)
        )
    }
}

/// DPT head constants (`downstream_head{1,2}.dpt`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DptConfig {
    /// Indices into the token list `[enc_out, dec_1, ..., dec_L]`: `[0, L*2/4, L*3/4, L]`.
    pub hooks: [usize; 4],
    /// Width of each hooked token tensor: `[enc_embed_dim, dec_embed_dim x 3]`.
    pub dim_tokens: [usize; 4],
    /// `act_postprocess` output channels L1..L4 (released: `[96, 192, 384, 768]`).
    pub layer_dims: [usize; 4],
    /// Fusion width F (released: 256).
    pub feature_dim: usize,
    /// Output head's hidden width (released: 128).
    pub last_dim: usize,
    /// Output channels: 3 (xyz) + 1 (confidence).
    pub num_channels: usize,
}

/// Local-feature MLP constants (`downstream_head{1,2}.head_local_features`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalFeatConfig {
    /// Descriptor dimension (the `N` of `output_mode='pts3d+descN'`).
    pub desc_dim: usize,
    /// Input width: `enc_embed_dim + dec_embed_dim`.
    pub in_dim: usize,
    /// Hidden width (released: `4 * in_dim`).
    pub hidden_dim: usize,
    /// Output width: `(desc_dim + two_confs) * patch_size^2`.
    pub out_dim: usize,
}

/// Everything the MASt3R network needs to know about its dimensions and output conventions.
#[derive(Clone, Debug, PartialEq)]
pub struct Mast3rConfig {
    /// The `args.model` string this was derived from, verbatim, if the checkpoint had one.
    pub source_model_string: Option<String>,
    /// Nominal image size `(height, width)` (`img_size`; informational with RoPE).
    pub img_size: [usize; 2],
    /// Patch size P (16).
    pub patch_size: usize,
    /// Input channels (3).
    pub in_chans: usize,
    /// Patch-embedding class actually used (`ManyAR_PatchEmbed` is rewritten to `PatchEmbedDust3R`,
    /// as upstream `load_model` does).
    pub patch_embed_cls: String,
    /// Whether portrait inputs are transposed (upstream `load_model` sets `False`).
    pub landscape_only: bool,
    /// RoPE frequency base (`pos_embed='RoPE100'` gives 100).
    pub rope_base: f32,
    /// Encoder width E.
    pub enc_embed_dim: usize,
    /// Encoder blocks.
    pub enc_depth: usize,
    /// Encoder attention heads.
    pub enc_num_heads: usize,
    /// Encoder MLP hidden width (`mlp_ratio * E`).
    pub enc_mlp_hidden: usize,
    /// Decoder width D.
    pub dec_embed_dim: usize,
    /// Blocks per decoder stack L.
    pub dec_depth: usize,
    /// Decoder attention heads.
    pub dec_num_heads: usize,
    /// Decoder MLP hidden width.
    pub dec_mlp_hidden: usize,
    /// Whether decoder blocks normalise the other view's tokens (`norm_y`).
    pub norm_im2_in_dec: bool,
    /// Epsilon of every LayerNorm (1e-6).
    pub layernorm_eps: f64,
    /// `head_type` (`catmlp+dpt`).
    pub head_type: String,
    /// `output_mode` (`pts3d+descN`).
    pub output_mode: String,
    /// Activation of the xyz channels.
    pub depth_mode: ActivationMode,
    /// Activation of the confidence channel.
    pub conf_mode: ActivationMode,
    /// Descriptor post-processing (`norm`: L2 normalisation).
    pub desc_mode: String,
    /// Whether the local-feature head also predicts a descriptor confidence.
    pub two_confs: bool,
    /// Activation of the descriptor confidence (present when `two_confs`).
    pub desc_conf_mode: Option<ActivationMode>,
    /// DPT head constants.
    pub dpt: DptConfig,
    /// Local-feature head constants.
    pub local_feat: LocalFeatConfig,
}

impl Mast3rConfig {
    /// The released `MASt3R_ViTLarge_BaseDecoder_512_catmlpdpt_metric` architecture (ViT-L encoder,
    /// ViT-B decoders, DPT 256/128 with layer dims 96..768, local-feature MLP 7168), as derived from
    /// `released_checkpoint_layout.json` (a test checks the two agree). For benchmarks with random
    /// weights; a loaded checkpoint carries its own configuration.
    pub fn released() -> Self {
        Self::with_dims(
            [1024, 24, 16],
            [768, 12, 12],
            [96, 192, 384, 768],
            256,
            128,
            7168,
        )
    }

    /// The tiny fixture model of `shared/fixtures/mast3r_tiny` (its `config.json`).
    pub fn tiny_fixture() -> Self {
        Self::with_dims([64, 3, 4], [48, 10, 3], [16, 24, 32, 40], 24, 12, 14)
    }

    /// A `pts3d+desc24` `catmlp+dpt` model with the released modes and the given sizes:
    /// `[width, depth, heads]` of encoder and decoder, DPT `layer_dims`, `feature_dim`, `last_dim`,
    /// and the local-feature MLP's hidden width.
    fn with_dims(
        enc: [usize; 3],
        dec: [usize; 3],
        layer_dims: [usize; 4],
        feature_dim: usize,
        last_dim: usize,
        local_hidden: usize,
    ) -> Self {
        let [e, enc_depth, enc_num_heads] = enc;
        let [d, dec_depth, dec_num_heads] = dec;
        let desc_dim = 24;
        Mast3rConfig {
            source_model_string: None,
            img_size: [512, 512],
            patch_size: 16,
            in_chans: 3,
            patch_embed_cls: "PatchEmbedDust3R".into(),
            landscape_only: false,
            rope_base: 100.0,
            enc_embed_dim: e,
            enc_depth,
            enc_num_heads,
            enc_mlp_hidden: 4 * e,
            dec_embed_dim: d,
            dec_depth,
            dec_num_heads,
            dec_mlp_hidden: 4 * d,
            norm_im2_in_dec: true,
            layernorm_eps: 1e-6,
            head_type: "catmlp+dpt".into(),
            output_mode: format!("pts3d+desc{desc_dim}"),
            depth_mode: ActivationMode::exp(f64::NEG_INFINITY, f64::INFINITY),
            conf_mode: ActivationMode::exp(1.0, f64::INFINITY),
            desc_mode: "norm".into(),
            two_confs: true,
            desc_conf_mode: Some(ActivationMode::exp(0.0, f64::INFINITY)),
            dpt: DptConfig {
                hooks: [0, dec_depth * 2 / 4, dec_depth * 3 / 4, dec_depth],
                dim_tokens: [e, d, d, d],
                layer_dims,
                feature_dim,
                last_dim,
                num_channels: 4,
            },
            local_feat: LocalFeatConfig {
                desc_dim,
                in_dim: e + d,
                hidden_dim: local_hidden,
                out_dim: (desc_dim + 1) * 16 * 16,
            },
        }
    }

    /// Number of parameters the network uses at inference (the layout without aliases,
    /// `mask_token` and `refinenet4.resConfUnit1`).
    pub fn inference_params(&self) -> usize {
        expected_layout(self)
            .iter()
            .filter(|(k, _)| {
                !k.contains(".scratch.layer_rn.")
                    && *k != "mask_token"
                    && !k.contains("refinenet4.resConfUnit1")
            })
            .map(|(_, s)| s.iter().product::<usize>())
            .sum()
    }

    /// Derives the configuration from a checkpoint's `key -> shape` map and its constructor string.
    ///
    /// Only the keys needed to read dimensions are inspected; use [`expected_layout`] and
    /// [`crate::validate_layout`] to check the whole map.
    pub fn from_shapes(
        shapes: &BTreeMap<String, Vec<usize>>,
        model_string: Option<&str>,
    ) -> Result<Self, ConfigError> {
        let args = model_string.map(ModelString::parse).transpose()?;
        if let Some(a) = &args {
            if a.class != MODEL_CLASS {
                return Err(ConfigError(format!(
                    "constructor string builds `{}`, only `{MODEL_CLASS}` is supported",
                    a.class
                )));
            }
            const KNOWN: &[&str] = &[
                "pos_embed",
                "patch_embed_cls",
                "img_size",
                "head_type",
                "output_mode",
                "depth_mode",
                "conf_mode",
                "enc_embed_dim",
                "enc_depth",
                "enc_num_heads",
                "dec_embed_dim",
                "dec_depth",
                "dec_num_heads",
                "two_confs",
                "desc_conf_mode",
                "desc_mode",
                "landscape_only",
                "freeze",
                "patch_size",
                "mlp_ratio",
                "norm_im2_in_dec",
                "mask_ratio",
            ];
            if let Some((k, _)) = a.kwargs.iter().find(|(k, _)| !KNOWN.contains(&k.as_str())) {
                return Err(ConfigError(format!(
                    "unsupported constructor argument `{k}`"
                )));
            }
        }
        let a = Args(args.as_ref());

        // --- From shapes -------------------------------------------------------------------
        let pe = shape(shapes, "patch_embed.proj.weight", 4)?;
        let (enc_embed_dim, in_chans, patch_size) = (pe[0], pe[1], pe[2]);
        if pe[3] != patch_size {
            return Err(ConfigError(format!(
                "patch_embed.proj.weight {pe:?}: patch is not square"
            )));
        }
        let enc_depth = stack_depth(shapes, "enc_blocks")?;
        let enc_mlp_hidden = shape(shapes, "enc_blocks.0.mlp.fc1.weight", 2)?[0];
        let de = shape(shapes, "decoder_embed.weight", 2)?;
        let dec_embed_dim = de[0];
        let dec_depth = stack_depth(shapes, "dec_blocks")?;
        let dec_mlp_hidden = shape(shapes, "dec_blocks.0.mlp.fc1.weight", 2)?[0];
        let norm_im2_in_dec = shapes.contains_key("dec_blocks.0.norm_y.weight");

        let h = "downstream_head1.dpt";
        let mut layer_dims = [0; 4];
        for (k, d) in layer_dims.iter_mut().enumerate() {
            *d = shape(shapes, &format!("{h}.act_postprocess.{k}.0.weight"), 4)?[0];
        }
        let feature_dim = shape(shapes, &format!("{h}.scratch.layer1_rn.weight"), 4)?[0];
        let last_dim = shape(shapes, &format!("{h}.head.2.weight"), 4)?[0];
        let num_channels = shape(shapes, &format!("{h}.head.4.weight"), 4)?[0];
        let lf = "downstream_head1.head_local_features";
        let local_hidden = shape(shapes, &format!("{lf}.fc1.weight"), 2)?[0];
        let local_out = shape(shapes, &format!("{lf}.fc2.weight"), 2)?[0];

        // --- Cross-checks of the constructor string against the shapes ---------------------
        let check =
            |name: &str, default: usize, found: usize, from: &str| -> Result<(), ConfigError> {
                let declared = a
                    .usize(name)?
                    .unwrap_or(if a.present() { default } else { found });
                if declared != found {
                    return Err(ConfigError(format!(
                        "constructor string says {name}={declared} but {from} gives {found}"
                    )));
                }
                Ok(())
            };
        // Upstream CroCoNet defaults.
        check(
            "enc_embed_dim",
            768,
            enc_embed_dim,
            "patch_embed.proj.weight",
        )?;
        check("enc_depth", 12, enc_depth, "the enc_blocks.* keys")?;
        check("dec_embed_dim", 512, dec_embed_dim, "decoder_embed.weight")?;
        check("dec_depth", 8, dec_depth, "the dec_blocks.* keys")?;
        check("patch_size", 16, patch_size, "patch_embed.proj.weight")?;
        let mlp_ratio = a.f64("mlp_ratio")?.unwrap_or(4.0);
        for (hidden, width, key) in [
            (enc_mlp_hidden, enc_embed_dim, "enc_blocks.0.mlp.fc1.weight"),
            (dec_mlp_hidden, dec_embed_dim, "dec_blocks.0.mlp.fc1.weight"),
        ] {
            if a.present() && (mlp_ratio * width as f64) as usize != hidden {
                return Err(ConfigError(format!(
                    "constructor string's mlp_ratio={mlp_ratio} disagrees with {key} \
                     ({hidden} hidden units for width {width})"
                )));
            }
        }
        if let Some(declared) = a.bool("norm_im2_in_dec")?
            && declared != norm_im2_in_dec
        {
            return Err(ConfigError(format!(
                "constructor string says norm_im2_in_dec={declared} but dec_blocks.0.norm_y.weight is {}",
                if norm_im2_in_dec { "present" } else { "absent" }
            )));
        }

        let heads = |name: &str, default: usize, width: usize| -> Result<usize, ConfigError> {
            let n = match a.usize(name)? {
                Some(n) => n,
                None if a.present() => default,
                None if width.is_multiple_of(DEFAULT_HEAD_DIM) => width / DEFAULT_HEAD_DIM,
                None => {
                    return Err(ConfigError(format!(
                        "{name} cannot be derived from tensor shapes (width {width} is not a multiple of \
                         {DEFAULT_HEAD_DIM}) and the checkpoint has no constructor string; supply one \
                         (LoadOptions::model_string)"
                    )));
                }
            };
            if n == 0 || !width.is_multiple_of(n) || !(width / n).is_multiple_of(4) {
                return Err(ConfigError(format!(
                    "{name}={n} does not split width {width} into heads of a size divisible by 4 (RoPE2D)"
                )));
            }
            Ok(n)
        };
        let enc_num_heads = heads("enc_num_heads", 12, enc_embed_dim)?;
        let dec_num_heads = heads("dec_num_heads", 16, dec_embed_dim)?;

        // --- Modes (upstream defaults when the string omits them; released values without one) ---
        let pos_embed = a
            .string("pos_embed")?
            .unwrap_or_else(|| if a.present() { "cosine" } else { "RoPE100" }.into());
        let rope_base = pos_embed
            .strip_prefix("RoPE")
            .and_then(|f| f.parse::<f32>().ok())
            .filter(|f| f.is_finite() && *f > 0.0)
            .ok_or_else(|| {
                ConfigError(format!(
                    "pos_embed='{pos_embed}' is not supported (only RoPE<base>)"
                ))
            })?;
        let head_type = a
            .string("head_type")?
            .unwrap_or_else(|| if a.present() { "linear" } else { "catmlp+dpt" }.into());
        if head_type != "catmlp+dpt" {
            return Err(ConfigError(format!(
                "head_type='{head_type}' is not supported (only catmlp+dpt)"
            )));
        }
        let two_confs = a.bool("two_confs")?.unwrap_or(!a.present());
        let pp = patch_size * patch_size;
        if pp == 0 || local_out % pp != 0 {
            return Err(ConfigError(format!(
                "{lf}.fc2.weight has {local_out} outputs, not a multiple of patch_size^2 = {pp}"
            )));
        }
        let output_mode = match a.string("output_mode")? {
            Some(m) => m,
            None if a.present() => "pts3d".into(),
            None => format!(
                "pts3d+desc{}",
                (local_out / pp).saturating_sub(two_confs as usize)
            ),
        };
        let desc_dim = output_mode
            .strip_prefix("pts3d+desc")
            .and_then(|d| d.parse::<usize>().ok())
            .filter(|&d| d > 0)
            .ok_or_else(|| {
                ConfigError(format!(
                    "output_mode='{output_mode}' is not supported (only pts3d+desc<N>)"
                ))
            })?;
        let desc_mode = a.string("desc_mode")?.unwrap_or_else(|| "norm".into());
        if desc_mode != "norm" {
            return Err(ConfigError(format!(
                "desc_mode='{desc_mode}' is not supported (only norm)"
            )));
        }
        let depth_mode = a
            .mode("depth_mode")?
            .unwrap_or(ActivationMode::exp(f64::NEG_INFINITY, f64::INFINITY));
        let conf_mode = a
            .mode("conf_mode")?
            .unwrap_or(ActivationMode::exp(1.0, f64::INFINITY));
        let desc_conf_mode = match a.0.and_then(|m| m.get("desc_conf_mode")) {
            Some(PyValue::None) => None,
            Some(_) => a.mode("desc_conf_mode")?,
            None if a.present() => None,
            None => Some(ActivationMode::exp(0.0, f64::INFINITY)),
        };
        if two_confs && desc_conf_mode.is_none() {
            return Err(ConfigError("two_confs=True needs a desc_conf_mode".into()));
        }
        let img_size = match a.0.and_then(|m| m.get("img_size")) {
            None if a.present() => [224, 224],
            None => [512, 512],
            Some(PyValue::Int(s)) if *s > 0 => [*s as usize; 2],
            Some(PyValue::Tuple(v)) | Some(PyValue::List(v)) => match v.as_slice() {
                [PyValue::Int(h), PyValue::Int(w)] if *h > 0 && *w > 0 => {
                    [*h as usize, *w as usize]
                }
                _ => {
                    return Err(ConfigError(
                        "img_size must be an int or a pair of ints".into(),
                    ));
                }
            },
            Some(_) => {
                return Err(ConfigError(
                    "img_size must be an int or a pair of ints".into(),
                ));
            }
        };
        let patch_embed_cls = match a.string("patch_embed_cls")?.as_deref() {
            None | Some("ManyAR_PatchEmbed") | Some("PatchEmbedDust3R") => {
                "PatchEmbedDust3R".to_string()
            }
            Some(other) => {
                return Err(ConfigError(format!(
                    "patch_embed_cls='{other}' is not supported"
                )));
            }
        };
        // upstream load_model appends landscape_only=False when absent.
        let landscape_only = a.bool("landscape_only")?.unwrap_or(false);

        Ok(Mast3rConfig {
            source_model_string: model_string.map(str::to_string),
            img_size,
            patch_size,
            in_chans,
            patch_embed_cls,
            landscape_only,
            rope_base,
            enc_embed_dim,
            enc_depth,
            enc_num_heads,
            enc_mlp_hidden,
            dec_embed_dim,
            dec_depth,
            dec_num_heads,
            dec_mlp_hidden,
            norm_im2_in_dec,
            layernorm_eps: 1e-6,
            head_type,
            output_mode,
            depth_mode,
            conf_mode,
            desc_mode,
            two_confs,
            desc_conf_mode,
            dpt: DptConfig {
                hooks: [0, dec_depth * 2 / 4, dec_depth * 3 / 4, dec_depth],
                dim_tokens: [enc_embed_dim, dec_embed_dim, dec_embed_dim, dec_embed_dim],
                layer_dims,
                feature_dim,
                last_dim,
                num_channels,
            },
            local_feat: LocalFeatConfig {
                desc_dim,
                in_dim: enc_embed_dim + dec_embed_dim,
                hidden_dim: local_hidden,
                out_dim: (desc_dim + two_confs as usize) * pp,
            },
        })
    }

    /// Attention head size of the encoder.
    pub fn enc_head_dim(&self) -> usize {
        self.enc_embed_dim / self.enc_num_heads
    }

    /// Attention head size of the decoder.
    pub fn dec_head_dim(&self) -> usize {
        self.dec_embed_dim / self.dec_num_heads
    }

    /// Channels of the local-feature map: descriptor plus (with `two_confs`) its confidence.
    pub fn local_feat_channels(&self) -> usize {
        self.local_feat.desc_dim + self.two_confs as usize
    }

    /// The constructor string of the model as upstream `load_model` instantiates it (after its
    /// `ManyAR_PatchEmbed` rewrite and `landscape_only` default). The head constants that upstream
    /// hard-codes (DPT and local-feature sizes) are not part of it: they come from tensor shapes.
    pub fn to_model_string(&self) -> String {
        let img = format!("({}, {})", self.img_size[0], self.img_size[1]);
        let mut s = format!(
            "{MODEL_CLASS}(pos_embed='RoPE{}', patch_embed_cls='{}', img_size={img}, head_type='{}', \
             output_mode='{}', depth_mode={}, conf_mode={}, enc_embed_dim={}, enc_depth={}, \
             enc_num_heads={}, dec_embed_dim={}, dec_depth={}, dec_num_heads={}, two_confs={}",
            py_repr_f64(self.rope_base as f64),
            self.patch_embed_cls,
            self.head_type,
            self.output_mode,
            self.depth_mode.repr(),
            self.conf_mode.repr(),
            self.enc_embed_dim,
            self.enc_depth,
            self.enc_num_heads,
            self.dec_embed_dim,
            self.dec_depth,
            self.dec_num_heads,
            if self.two_confs { "True" } else { "False" },
        );
        if let Some(m) = &self.desc_conf_mode {
            s.push_str(&format!(", desc_conf_mode={}", m.repr()));
        }
        if self.patch_size != 16 {
            s.push_str(&format!(", patch_size={}", self.patch_size));
        }
        if self.enc_mlp_hidden != 4 * self.enc_embed_dim {
            s.push_str(&format!(
                ", mlp_ratio={}",
                py_repr_f64(self.enc_mlp_hidden as f64 / self.enc_embed_dim as f64)
            ));
        }
        if !self.norm_im2_in_dec {
            s.push_str(", norm_im2_in_dec=False");
        }
        s.push_str(&format!(
            ", landscape_only={})",
            if self.landscape_only { "True" } else { "False" }
        ));
        s
    }
}

/// Every key the network loads, with its shape, for `cfg` (the upstream module tree: 1017 keys for
/// the released model, aliases `dpt.scratch.layer_rn.{k}` and the inference-unused `mask_token` and
/// `refinenet4.resConfUnit1` included).
pub fn expected_layout(cfg: &Mast3rConfig) -> BTreeMap<String, Vec<usize>> {
    let mut m = BTreeMap::new();
    let mut add = |k: String, s: &[usize]| {
        m.insert(k, s.to_vec());
    };
    let (e, d, p) = (cfg.enc_embed_dim, cfg.dec_embed_dim, cfg.patch_size);
    let linear = |add: &mut dyn FnMut(String, &[usize]), name: String, out: usize, inp: usize| {
        add(format!("{name}.weight"), &[out, inp]);
        add(format!("{name}.bias"), &[out]);
    };
    let norm = |add: &mut dyn FnMut(String, &[usize]), name: String, w: usize| {
        add(format!("{name}.weight"), &[w]);
        add(format!("{name}.bias"), &[w]);
    };
    let conv = |add: &mut dyn FnMut(String, &[usize]),
                name: String,
                o: usize,
                i: usize,
                k: usize,
                bias: bool| {
        add(format!("{name}.weight"), &[o, i, k, k]);
        if bias {
            add(format!("{name}.bias"), &[o]);
        }
    };

    add("mask_token".into(), &[1, 1, d]);
    conv(
        &mut add,
        "patch_embed.proj".into(),
        e,
        cfg.in_chans,
        p,
        true,
    );
    for i in 0..cfg.enc_depth {
        let b = format!("enc_blocks.{i}");
        norm(&mut add, format!("{b}.norm1"), e);
        linear(&mut add, format!("{b}.attn.qkv"), 3 * e, e);
        linear(&mut add, format!("{b}.attn.proj"), e, e);
        norm(&mut add, format!("{b}.norm2"), e);
        linear(&mut add, format!("{b}.mlp.fc1"), cfg.enc_mlp_hidden, e);
        linear(&mut add, format!("{b}.mlp.fc2"), e, cfg.enc_mlp_hidden);
    }
    norm(&mut add, "enc_norm".into(), e);
    linear(&mut add, "decoder_embed".into(), d, e);
    for stack in ["dec_blocks", "dec_blocks2"] {
        for i in 0..cfg.dec_depth {
            let b = format!("{stack}.{i}");
            norm(&mut add, format!("{b}.norm1"), d);
            linear(&mut add, format!("{b}.attn.qkv"), 3 * d, d);
            linear(&mut add, format!("{b}.attn.proj"), d, d);
            for proj in ["projq", "projk", "projv", "proj"] {
                linear(&mut add, format!("{b}.cross_attn.{proj}"), d, d);
            }
            norm(&mut add, format!("{b}.norm2"), d);
            norm(&mut add, format!("{b}.norm3"), d);
            linear(&mut add, format!("{b}.mlp.fc1"), cfg.dec_mlp_hidden, d);
            linear(&mut add, format!("{b}.mlp.fc2"), d, cfg.dec_mlp_hidden);
            if cfg.norm_im2_in_dec {
                norm(&mut add, format!("{b}.norm_y"), d);
            }
        }
    }
    norm(&mut add, "dec_norm".into(), d);

    let t = &cfg.dpt;
    let (f, ld) = (t.feature_dim, t.layer_dims);
    for v in 1..=2 {
        let h = format!("downstream_head{v}.dpt");
        for (k, &lk) in ld.iter().enumerate() {
            // `layer_rn` is a ModuleList holding the same convolutions as `layer{k+1}_rn`.
            conv(
                &mut add,
                format!("{h}.scratch.layer{}_rn", k + 1),
                f,
                lk,
                3,
                false,
            );
            conv(
                &mut add,
                format!("{h}.scratch.layer_rn.{k}"),
                f,
                lk,
                3,
                false,
            );
        }
        for r in 1..=4 {
            let rn = format!("{h}.scratch.refinenet{r}");
            conv(&mut add, format!("{rn}.out_conv"), f, f, 1, true);
            for unit in 1..=2 {
                for c in 1..=2 {
                    conv(
                        &mut add,
                        format!("{rn}.resConfUnit{unit}.conv{c}"),
                        f,
                        f,
                        3,
                        true,
                    );
                }
            }
        }
        conv(&mut add, format!("{h}.head.0"), f / 2, f, 3, true);
        conv(&mut add, format!("{h}.head.2"), t.last_dim, f / 2, 3, true);
        conv(
            &mut add,
            format!("{h}.head.4"),
            t.num_channels,
            t.last_dim,
            1,
            true,
        );
        // 1x1 projections, then ConvTranspose (weights [in, out, k, k]) x4 / x2, identity, stride-2 conv.
        for (k, &lk) in ld.iter().enumerate() {
            conv(
                &mut add,
                format!("{h}.act_postprocess.{k}.0"),
                lk,
                t.dim_tokens[k],
                1,
                true,
            );
        }
        conv(
            &mut add,
            format!("{h}.act_postprocess.0.1"),
            ld[0],
            ld[0],
            4,
            true,
        );
        conv(
            &mut add,
            format!("{h}.act_postprocess.1.1"),
            ld[1],
            ld[1],
            2,
            true,
        );
        conv(
            &mut add,
            format!("{h}.act_postprocess.3.1"),
            ld[3],
            ld[3],
            3,
            true,
        );

        let lf = format!("downstream_head{v}.head_local_features");
        let l = &cfg.local_feat;
        linear(&mut add, format!("{lf}.fc1"), l.hidden_dim, l.in_dim);
        linear(&mut add, format!("{lf}.fc2"), l.out_dim, l.hidden_dim);
    }
    m
}

fn shape<'a>(
    shapes: &'a BTreeMap<String, Vec<usize>>,
    key: &str,
    rank: usize,
) -> Result<&'a [usize], ConfigError> {
    match shapes.get(key) {
        Some(s) if s.len() == rank && s.iter().all(|&d| d > 0) => Ok(s),
        Some(s) => Err(ConfigError(format!(
            "`{key}` has shape {s:?}, expected {rank} non-zero dimensions"
        ))),
        None => Err(ConfigError(format!(
            "tensor `{key}` is missing (is this a MASt3R checkpoint?)"
        ))),
    }
}

/// Number of blocks `prefix.<i>.*` (largest index + 1; gaps show up as missing keys later).
fn stack_depth(shapes: &BTreeMap<String, Vec<usize>>, prefix: &str) -> Result<usize, ConfigError> {
    let p = format!("{prefix}.");
    let n = shapes
        .range(p.clone()..)
        .take_while(|(k, _)| k.starts_with(&p))
        .filter_map(|(k, _)| k[p.len()..].split('.').next()?.parse::<usize>().ok())
        .max()
        .map(|i| i + 1)
        .ok_or_else(|| {
            ConfigError(format!(
                "no `{prefix}.<i>.*` tensors (is this a MASt3R checkpoint?)"
            ))
        })?;
    // A corrupted index must not make the layout enormous.
    if n > 4096 {
        return Err(ConfigError(format!(
            "`{prefix}` block index {} is implausible",
            n - 1
        )));
    }
    Ok(n)
}

/// Typed access to the constructor string's keyword arguments.
struct Args<'a>(Option<&'a ModelString>);

impl Args<'_> {
    fn present(&self) -> bool {
        self.0.is_some()
    }

    fn get(&self, k: &str) -> Option<&PyValue> {
        self.0?.get(k)
    }

    fn usize(&self, k: &str) -> Result<Option<usize>, ConfigError> {
        match self.get(k) {
            None => Ok(None),
            Some(PyValue::Int(i)) if *i > 0 && *i < 1 << 32 => Ok(Some(*i as usize)),
            Some(v) => Err(ConfigError(format!(
                "constructor argument {k}={v:?} is not a positive int"
            ))),
        }
    }

    fn f64(&self, k: &str) -> Result<Option<f64>, ConfigError> {
        match self.get(k) {
            None => Ok(None),
            Some(v) => v.as_f64().map(Some).ok_or_else(|| {
                ConfigError(format!("constructor argument {k}={v:?} is not a number"))
            }),
        }
    }

    fn bool(&self, k: &str) -> Result<Option<bool>, ConfigError> {
        match self.get(k) {
            None => Ok(None),
            Some(PyValue::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(ConfigError(format!(
                "constructor argument {k}={v:?} is not a bool"
            ))),
        }
    }

    fn string(&self, k: &str) -> Result<Option<String>, ConfigError> {
        match self.get(k) {
            None => Ok(None),
            Some(PyValue::Str(s)) => Ok(Some(s.clone())),
            Some(v) => Err(ConfigError(format!(
                "constructor argument {k}={v:?} is not a string"
            ))),
        }
    }

    fn mode(&self, k: &str) -> Result<Option<ActivationMode>, ConfigError> {
        let bad = |v: &PyValue| {
            ConfigError(format!(
                "constructor argument {k}={v:?} is not (kind, vmin, vmax)"
            ))
        };
        let Some(v) = self.get(k) else {
            return Ok(None);
        };
        let PyValue::Tuple(items) = v else {
            return Err(bad(v));
        };
        let (kind, vmin, vmax) = match items.as_slice() {
            [PyValue::Str(kind)] => (kind, f64::NEG_INFINITY, f64::INFINITY),
            [PyValue::Str(kind), lo, hi] => (
                kind,
                lo.as_f64().ok_or_else(|| bad(v))?,
                hi.as_f64().ok_or_else(|| bad(v))?,
            ),
            _ => return Err(bad(v)),
        };
        let kind = match kind.as_str() {
            "exp" => ActivationKind::Exp,
            "linear" => ActivationKind::Linear,
            "square" => ActivationKind::Square,
            other => {
                return Err(ConfigError(format!(
                    "{k}: activation '{other}' is not supported"
                )));
            }
        };
        Ok(Some(ActivationMode { kind, vmin, vmax }))
    }
}
