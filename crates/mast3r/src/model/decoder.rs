//! Decoder blocks (SPEC §5): self-attention, cross-attention to the other view's (normalised)
//! tokens, MLP; all pre-norm with RoPE2D.

use burn::tensor::{DType, Tensor};

use super::attention::{CrossAttention, SelfAttention, attend};
use super::layers::{LayerNorm, Loader, Mlp, StackedLinear, normalize_last};
use super::rope::RopeTables;
use crate::error::Error;

/// `dec_blocks.{i}` / `dec_blocks2.{i}` as loaded; [`PairedDecoderBlock`] runs them.
#[derive(Clone, Debug)]
pub(crate) struct DecoderBlock {
    pub norm1: LayerNorm,
    pub attn: SelfAttention,
    pub norm_y: Option<LayerNorm>,
    pub norm2: LayerNorm,
    pub cross_attn: CrossAttention,
    pub norm3: LayerNorm,
    pub mlp: Mlp,
}

impl DecoderBlock {
    #[allow(clippy::too_many_arguments)]
    pub fn load(
        l: &Loader,
        prefix: &str,
        dim: usize,
        heads: usize,
        hidden: usize,
        eps: f64,
        norm_y: bool,
    ) -> Result<Self, Error> {
        let lin = |name: &str| l.linear(&format!("{prefix}.{name}"), dim, dim, true);
        Ok(DecoderBlock {
            norm1: l.layer_norm(&format!("{prefix}.norm1"), dim, eps)?,
            attn: SelfAttention {
                qkv: l.linear(&format!("{prefix}.attn.qkv"), dim, 3 * dim, true)?,
                proj: lin("attn.proj")?,
                heads,
            },
            norm_y: if norm_y {
                Some(l.layer_norm(&format!("{prefix}.norm_y"), dim, eps)?)
            } else {
                None
            },
            norm2: l.layer_norm(&format!("{prefix}.norm2"), dim, eps)?,
            cross_attn: CrossAttention {
                projq: lin("cross_attn.projq")?,
                projk: lin("cross_attn.projk")?,
                projv: lin("cross_attn.projv")?,
                proj: lin("cross_attn.proj")?,
                heads,
            },
            norm3: l.layer_norm(&format!("{prefix}.norm3"), dim, eps)?,
            mlp: l.mlp(&format!("{prefix}.mlp"), dim, hidden, dim)?,
        })
    }
}

/// LayerNorm over the last dimension for both stacks, `gamma` / `beta` `[S, 1, C]`; the same
/// operations as Burn's `layer_norm` (statistics in binary32).
#[derive(Clone, Debug)]
struct StackedLayerNorm {
    gamma: Tensor<3>,
    beta: Tensor<3>,
    eps: f64,
}

impl StackedLayerNorm {
    fn stack(a: LayerNorm, b: LayerNorm) -> Self {
        let s =
            |x: Tensor<1>, y: Tensor<1>| Tensor::stack::<2>(vec![x, y], 0).unsqueeze_dim::<3>(1);
        StackedLayerNorm {
            gamma: s(a.gamma, b.gamma),
            beta: s(a.beta, b.beta),
            eps: a.eps,
        }
    }
    fn slot(&self, s: usize) -> Self {
        StackedLayerNorm {
            gamma: self.gamma.clone().narrow(0, s, 1),
            beta: self.beta.clone().narrow(0, s, 1),
            eps: self.eps,
        }
    }
    fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        if super::kernels::on_cube(&x) {
            let [s, _, c] = self.gamma.dims();
            return super::kernels::layer_norm(
                x,
                self.gamma.clone().reshape([s, c]),
                self.beta.clone().reshape([s, c]),
                self.eps,
            );
        }
        let dtype = x.dtype();
        let x = if dtype == DType::F32 {
            x
        } else {
            x.cast(DType::F32)
        };
        let y = normalize_last(x, self.eps) * self.gamma.clone() + self.beta.clone();
        if dtype == DType::F32 {
            y
        } else {
            y.cast(dtype)
        }
    }
}

/// Decoder block `i` of both stacks (`dec_blocks.{i}` and `dec_blocks2.{i}`) with their weights
/// stacked on a leading axis, so that one launch serves both views: the decoder costs about
/// 50 us per launched operation on an H100 (it does little arithmetic per operation), and
/// the two views share every shape when their token grids are equal (always in SLAM).
#[derive(Clone, Debug)]
pub(crate) struct PairedDecoderBlock {
    norm1: StackedLayerNorm,
    qkv: StackedLinear,
    proj: StackedLinear,
    norm_y: Option<StackedLayerNorm>,
    norm2: StackedLayerNorm,
    projq: StackedLinear,
    projk: StackedLinear,
    projv: StackedLinear,
    cross_proj: StackedLinear,
    norm3: StackedLayerNorm,
    fc1: StackedLinear,
    fc2: StackedLinear,
    heads: usize,
}

impl PairedDecoderBlock {
    /// Stacks block `a` (view 1's stack) and `b` (view 2's); the per-view blocks are consumed.
    pub fn stack(a: DecoderBlock, b: DecoderBlock) -> Self {
        debug_assert_eq!(a.attn.heads, a.cross_attn.heads);
        let l = StackedLinear::stack;
        let n = StackedLayerNorm::stack;
        PairedDecoderBlock {
            heads: a.attn.heads,
            norm1: n(a.norm1, b.norm1),
            qkv: l(a.attn.qkv, b.attn.qkv),
            proj: l(a.attn.proj, b.attn.proj),
            norm_y: match (a.norm_y, b.norm_y) {
                (Some(x), Some(y)) => Some(n(x, y)),
                (None, None) => None,
                _ => unreachable!("both decoder stacks are loaded with the same layers"),
            },
            norm2: n(a.norm2, b.norm2),
            projq: l(a.cross_attn.projq, b.cross_attn.projq),
            projk: l(a.cross_attn.projk, b.cross_attn.projk),
            projv: l(a.cross_attn.projv, b.cross_attn.projv),
            cross_proj: l(a.cross_attn.proj, b.cross_attn.proj),
            norm3: n(a.norm3, b.norm3),
            fc1: l(a.mlp.fc1, b.mlp.fc1),
            fc2: l(a.mlp.fc2, b.mlp.fc2),
        }
    }

    /// Stack `s` alone (weights are views of the stacked ones), for views whose token grids
    /// differ.
    pub fn slot(&self, s: usize) -> Self {
        PairedDecoderBlock {
            heads: self.heads,
            norm1: self.norm1.slot(s),
            qkv: self.qkv.slot(s),
            proj: self.proj.slot(s),
            norm_y: self.norm_y.as_ref().map(|n| n.slot(s)),
            norm2: self.norm2.slot(s),
            projq: self.projq.slot(s),
            projk: self.projk.slot(s),
            projv: self.projv.slot(s),
            cross_proj: self.cross_proj.slot(s),
            norm3: self.norm3.slot(s),
            fc1: self.fc1.slot(s),
            fc2: self.fc2.slot(s),
        }
    }

    /// `x` `[S, B * Nx, C]`: slot `s`'s own tokens; `y` `[S, B * Ny, C]`: the tokens its
    /// cross-attention reads (the other view's, previous layer). Same maths as
    /// the reference's per-view block (pre-norm self-attention, cross-attention, MLP) per slot.
    pub fn forward(
        &self,
        x: Tensor<3>,
        y: Tensor<3>,
        batch: usize,
        xrope: &RopeTables,
        yrope: &RopeTables,
    ) -> Tensor<3> {
        let [s, m, c] = x.dims();
        let my = y.dims()[1];
        let (b, h) = (batch, self.heads);
        let (nx, ny, d) = (m / b, my / b, c / h);
        // self-attention: q and k rotated straight out of the fused projection
        let qkv = self
            .qkv
            .forward(self.norm1.forward(x.clone()))
            .reshape([s * b, nx, 3 * c]);
        let q = xrope.rotate_part(qkv.clone(), 0, 3, h);
        let k = xrope.rotate_part(qkv.clone(), 1, 3, h);
        let v = qkv
            .reshape([s * b, nx, 3, h, d])
            .narrow(2, 2, 1)
            .reshape([s * b, nx, h, d]);
        let att = attend(q, k, v).reshape([s, m, c]);
        let x = self.proj.forward_then(att, false, Some(x));
        // cross-attention
        let y = match &self.norm_y {
            Some(n) => n.forward(y),
            None => y,
        };
        let q = self
            .projq
            .forward(self.norm2.forward(x.clone()))
            .reshape([s * b, nx, c]);
        let k = self.projk.forward(y.clone()).reshape([s * b, ny, c]);
        let v = self.projv.forward(y).reshape([s * b, ny, h, d]);
        let att = attend(
            xrope.rotate_part(q, 0, 1, h),
            yrope.rotate_part(k, 0, 1, h),
            v,
        )
        .reshape([s, m, c]);
        let x = self.cross_proj.forward_then(att, false, Some(x));
        // MLP
        let hidden = self
            .fc1
            .forward_then(self.norm3.forward(x.clone()), true, None);
        self.fc2.forward_then(hidden, false, Some(x))
    }
}
