//! The network's fused kernels, each a `#[cube]` kernel launched as a Burn backend extension
//! on the tensors' own CubeCL client (so it is ordered with Burn's work and recorded into the
//! replayed graphs like it): one row per cube, statistics in binary32 for every storage type.
//! Each file holds one operation, its launcher and its float64 reference test.
//!
//! Why (docs/benchmarks/journal.md, "MASt3R: fused LayerNorm, softmax and RoPE"): per frame on
//! an H200, the separate Burn operations around the cuBLAS products (row statistics, centring,
//! scaling, exponentials, casts) took about two thirds of the network's device time.

mod epilogue;
mod layer_norm;
mod rope;
mod softmax;

pub(crate) use epilogue::linear_epilogue;
pub(crate) use layer_norm::layer_norm;
pub(crate) use rope::{RopeLayout, rope_part};
pub(crate) use softmax::softmax_rows;

use burn_cubecl::tensor::CubeTensor;
use cubecl::prelude::*;
use rust3r_gpu::GpuBuffer;

/// Units per cube: a 1024-wide row is four values per unit. The kernels spell it as the
/// literal `256usize` (a loop counter started from a `comptime!` value fails SPIR-V/WGSL
/// verification on lavapipe).
const UNITS: u32 = 256;

/// Sum of `v` over the cube (every unit gets it): a tree over [`UNITS`] values in shared
/// memory.
#[cube]
fn cube_sum(v: f32) -> f32 {
    let t = UNIT_POS as usize;
    let mut smem = Shared::<[f32]>::new_slice(256usize);
    smem[t] = v;
    sync_cube();
    let mut stride = 128usize;
    while stride > 0 {
        if t < stride {
            let a = smem[t];
            let b = smem[t + stride];
            smem[t] = a + b;
        }
        sync_cube();
        stride /= 2;
    }
    let s = smem[0];
    sync_cube();
    s
}

/// Maximum of `v` over the cube (every unit gets it); see [`cube_sum`].
#[cube]
fn cube_max(v: f32) -> f32 {
    let t = UNIT_POS as usize;
    let mut smem = Shared::<[f32]>::new_slice(256usize);
    smem[t] = v;
    sync_cube();
    let mut stride = 128usize;
    while stride > 0 {
        if t < stride {
            let a = smem[t];
            let b = smem[t + stride];
            smem[t] = max(a, b);
        }
        sync_cube();
        stride /= 2;
    }
    let s = smem[0];
    sync_cube();
    s
}

/// The tensor's storage as a typed buffer (made contiguous first); the tensor is returned to
/// keep it alive until the launch is queued.
fn buffer<T>(t: CubeTensor) -> (GpuBuffer<T>, CubeTensor) {
    let t = burn_cubecl::kernel::into_contiguous(t);
    let len = t.meta.shape().num_elements();
    (GpuBuffer::from_handle(t.handle.clone(), len), t)
}

/// Deterministic test values in about [-1.5, 1.5), plus `offset` on every third run of 97.
#[cfg(test)]
fn test_values(n: usize, seed: u32, offset: f32) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let h = (i as u32)
                .wrapping_mul(2654435761)
                .wrapping_add(seed.wrapping_mul(40503));
            let u = (h >> 8) as f32 / (1u32 << 24) as f32;
            (u - 0.5) * 3.0 + offset * ((i / 97) % 3) as f32
        })
        .collect()
}
