//! Multi-head attention with RoPE2D (SPEC §4, §5): self-attention with a fused `qkv` projection
//! and cross-attention with separate `projq`, `projk`, `projv`.

use burn::tensor::{DType, Tensor};

use super::layers::{Linear, softmax_last};
use super::rope::RopeTables;
use rust3r_gpu::blas::matmul;

/// `softmax(q k^T * d^-1/2) v` per head; `q` `[B, Nq, H, d]`, `k`, `v` `[B, Nk, H, d]`, result
/// `[B, Nq, H * d]`. Scores and softmax are binary32 whatever the input precision.
pub(crate) fn attend(q: Tensor<4>, k: Tensor<4>, v: Tensor<4>) -> Tensor<3> {
    let [b, nq, h, d] = q.dims();
    let dtype = q.dtype();
    let q = q.swap_dims(1, 2);
    let k = k.swap_dims(1, 2);
    let v = v.swap_dims(1, 2);
    let scale = 1.0 / (d as f64).sqrt();
    let scores = matmul(q, k.transpose());
    if super::kernels::on_cube(&scores) {
        let p = super::kernels::softmax_rows(scores, scale);
        return matmul(p, v).swap_dims(1, 2).reshape([b, nq, h * d]);
    }
    let p = if dtype == DType::F32 {
        softmax_last(scores * scale)
    } else {
        softmax_last(scores.cast(DType::F32) * scale).cast(dtype)
    };
    matmul(p, v).swap_dims(1, 2).reshape([b, nq, h * d])
}

/// Self-attention (`attn.qkv`, `attn.proj`).
#[derive(Clone, Debug)]
pub(crate) struct SelfAttention {
    pub qkv: Linear,
    pub proj: Linear,
    pub heads: usize,
}

impl SelfAttention {
    /// `residual + attention(x)`, the residual added in the output projection's epilogue.
    pub fn forward_residual(
        &self,
        x: Tensor<3>,
        rope: &RopeTables,
        residual: Tensor<3>,
    ) -> Tensor<3> {
        let [b, n, c] = x.dims();
        let h = self.heads;
        let d = c / h;
        // [B, N, 3, H, d]: q, k, v are consecutive blocks of C features, heads contiguous inside.
        let qkv = self.qkv.forward(x);
        let q = rope.rotate_part(qkv.clone(), 0, 3, h);
        let k = rope.rotate_part(qkv.clone(), 1, 3, h);
        let v = qkv
            .reshape([b, n, 3, h, d])
            .narrow(2, 2, 1)
            .reshape([b, n, h, d]);
        self.proj
            .forward_then(attend(q, k, v), false, Some(residual))
    }
}

/// Cross-attention (`cross_attn.projq/projk/projv/proj`): queries from `x`, keys and values from `y`.
#[derive(Clone, Debug)]
pub(crate) struct CrossAttention {
    pub projq: Linear,
    pub projk: Linear,
    pub projv: Linear,
    pub proj: Linear,
    pub heads: usize,
}
