//! RoPE2D with base 100 (SPEC §3): the first half of each head vector is rotated with the token's
//! row, the second half with its column, each with the rotate-half pairing `(j, j + q)`.

use burn::tensor::{DType, Device, Tensor, TensorData};

/// Cosine and signed sine tables for one token grid and head size, `[1, N, 1, d]`, such that
/// `rope(t) = t * cos + swap(t) * sin`, where `swap` exchanges the quarters `[a, b, c, e]` of a
/// head vector into `[b, a, e, c]`.
#[derive(Clone, Debug)]
pub(crate) struct RopeTables {
    cos: Tensor<4>,
    sin: Tensor<4>,
}

/// Host values of the tables (`[N * d]` each), computed like upstream: `inv_freq` and
/// `theta = p * inv_freq` in binary32.
pub(crate) fn host_tables(h: usize, w: usize, head_dim: usize, base: f32) -> (Vec<f32>, Vec<f32>) {
    assert!(
        head_dim.is_multiple_of(4),
        "RoPE2D needs a head size divisible by 4"
    );
    let m = head_dim / 2;
    let q = m / 2;
    let inv_freq: Vec<f32> = (0..q)
        .map(|j| 1.0f32 / base.powf((2 * j) as f32 / m as f32))
        .collect();
    let n = h * w;
    let mut cos = vec![0.0f32; n * head_dim];
    let mut sin = vec![0.0f32; n * head_dim];
    for tok in 0..n {
        let pos = [(tok / w) as f32, (tok % w) as f32];
        for (half, &p) in pos.iter().enumerate() {
            for (j, &f) in inv_freq.iter().enumerate() {
                let theta = p * f;
                let (s, c) = (theta as f64).sin_cos();
                let base_idx = tok * head_dim + half * m;
                cos[base_idx + j] = c as f32;
                cos[base_idx + j + q] = c as f32;
                sin[base_idx + j] = -(s as f32);
                sin[base_idx + j + q] = s as f32;
            }
        }
    }
    (cos, sin)
}

impl RopeTables {
    pub fn new(
        h: usize,
        w: usize,
        head_dim: usize,
        base: f32,
        device: &Device,
        dtype: DType,
    ) -> Self {
        let (cos, sin) = host_tables(h, w, head_dim, base);
        let n = h * w;
        let up = |v: Vec<f32>| {
            let t = Tensor::<4>::from_data(
                TensorData::new(v, [1, n, 1, head_dim]),
                (device, DType::F32),
            );
            if dtype == DType::F32 {
                t
            } else {
                t.cast(dtype)
            }
        };
        RopeTables {
            cos: up(cos),
            sin: up(sin),
        }
    }

    /// Rotates part `part` of `parts` of `x` `[B, N, parts * C]` (the `q`, `k`, `v` blocks of a
    /// fused projection; `parts = 1` for a plain one), split into `heads`: `[B, N, heads, d]`,
    /// contiguous. One launch on a CubeCL device ([`super::kernels::rope_part`]).
    pub fn rotate_part(&self, x: Tensor<3>, part: usize, parts: usize, heads: usize) -> Tensor<4> {
        if super::kernels::on_cube(&x) {
            let layout = super::kernels::RopeLayout { part, parts, heads };
            return super::kernels::rope_part(x, self.cos.clone(), self.sin.clone(), layout);
        }
        let [b, n, pc] = x.dims();
        let c = pc / parts;
        let t = x
            .reshape([b, n, parts, heads, c / heads])
            .narrow(2, part, 1)
            .reshape([b, n, heads, c / heads]);
        self.apply(t)
    }

    /// Rotates `t` `[B, N, heads, d]`.
    pub fn apply(&self, t: Tensor<4>) -> Tensor<4> {
        let [b, n, h, d] = t.dims();
        let q = d / 4;
        let swapped = t
            .clone()
            .reshape([b, n, h, 2, 2, q])
            .flip([4])
            .reshape([b, n, h, d]);
        t * self.cos.clone() + swapped * self.sin.clone()
    }
}
