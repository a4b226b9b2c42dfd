//! ViT encoder blocks (SPEC §4): pre-norm, self-attention with RoPE2D, GELU MLP.

use burn::tensor::Tensor;

use super::attention::SelfAttention;
use super::layers::{LayerNorm, Loader, Mlp};
use super::rope::RopeTables;
use crate::error::Error;

/// `enc_blocks.{i}`.
#[derive(Clone, Debug)]
pub(crate) struct EncoderBlock {
    pub norm1: LayerNorm,
    pub attn: SelfAttention,
    pub norm2: LayerNorm,
    pub mlp: Mlp,
}

impl EncoderBlock {
    pub fn load(
        l: &Loader,
        prefix: &str,
        dim: usize,
        heads: usize,
        hidden: usize,
        eps: f64,
    ) -> Result<Self, Error> {
        Ok(EncoderBlock {
            norm1: l.layer_norm(&format!("{prefix}.norm1"), dim, eps)?,
            attn: SelfAttention {
                qkv: l.linear(&format!("{prefix}.attn.qkv"), dim, 3 * dim, true)?,
                proj: l.linear(&format!("{prefix}.attn.proj"), dim, dim, true)?,
                heads,
            },
            norm2: l.layer_norm(&format!("{prefix}.norm2"), dim, eps)?,
            mlp: l.mlp(&format!("{prefix}.mlp"), dim, hidden, dim)?,
        })
    }

    pub fn forward(&self, x: Tensor<3>, rope: &RopeTables) -> Tensor<3> {
        let x = self
            .attn
            .forward_residual(self.norm1.forward(x.clone()), rope, x);
        self.mlp.forward_residual(self.norm2.forward(x.clone()), x)
    }
}
