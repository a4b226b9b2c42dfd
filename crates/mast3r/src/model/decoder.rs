//! Decoder blocks (SPEC §5): self-attention, cross-attention to the other view's (normalised)
//! tokens, MLP; all pre-norm with RoPE2D.

use burn::tensor::Tensor;

use super::attention::{CrossAttention, SelfAttention};
use super::layers::{LayerNorm, Loader, Mlp};
use super::rope::RopeTables;
use crate::error::Error;

/// `dec_blocks.{i}` / `dec_blocks2.{i}`.
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

    /// `x`: own tokens, `y`: the other view's tokens of the previous layer.
    pub fn forward(
        &self,
        x: Tensor<3>,
        y: Tensor<3>,
        xrope: &RopeTables,
        yrope: &RopeTables,
    ) -> Tensor<3> {
        let x = x.clone() + self.attn.forward(self.norm1.forward(x), xrope);
        let y = match &self.norm_y {
            Some(n) => n.forward(y),
            None => y,
        };
        let x = x.clone()
            + self
                .cross_attn
                .forward(self.norm2.forward(x), y, xrope, yrope);
        x.clone() + self.mlp.forward(self.norm3.forward(x))
    }
}
