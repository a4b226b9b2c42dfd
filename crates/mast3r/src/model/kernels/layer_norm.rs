//! LayerNorm over the last dimension in one launch: one cube per row computes the mean, then
//! the biased variance of the centred row, then writes `(x - mean) / sqrt(var + eps) * gamma +
//! beta`, statistics in binary32 whatever the storage type (binary32, binary16, bfloat16).
//!
//! The network's LayerNorms were some 14 launches each (two-level row sums for the mean and
//! the variance, the centring, the scale and shift, and casts around them at reduced
//! precision): ~10 ms of device time per frame pair of encodings on an H200 (`ncu`,
//! docs/benchmarks/journal.md "MASt3R: fused LayerNorm and attention"). On a device outside
//! the CubeCL backend (none today) it falls back to those operations
//! ([`crate::model::layers::normalize_last`]).
//!
//! `gamma` and `beta` are binary32 `[G, C]`: row `r` of `x` (`[.., C]`, `R` rows in all) uses
//! group `r / (R / G)`, so the decoder's two stacked views (`G = 2`) share one launch.

use burn::backend::tensor::FloatTensor;
use burn::backend::{Backend, Shape, TensorMetadata, backend_extension};
use burn::tensor::Tensor;
use burn_cubecl::CubeBackend;
use burn_cubecl::tensor::CubeTensor;
use cubecl::prelude::*;
use rust3r_gpu::{Gpu, block_id};

use super::{Output, UNITS, buffer, cube_sum, per_unit, reduce_with_planes, with_float};

/// Rows of at most `per_unit * 256` values are read once and kept in registers (`per_unit`
/// 0: rows too long for that, read three times); the sums go through subgroups with `planes`
/// ([`super::cube_reduce`]).
#[cube(launch, launch_unchecked)]
fn layer_norm_rows<F: Float>(
    x: &[F],
    gamma: &[f32],
    beta: &[f32],
    out: &mut [F],
    cols: u32,
    rows_per_group: u32,
    eps: f32,
    #[comptime] per_unit: usize,
    #[comptime] planes: bool,
) {
    let row = block_id();
    let n = f32::cast_from(cols);
    let cols = cols as usize;
    let t = UNIT_POS as usize;
    let base = row * cols;
    let g = (row / rows_per_group as usize) * cols;
    if comptime![per_unit > 0] {
        let mut vals = Array::<f32>::new(per_unit);
        let mut acc = 0.0f32;
        #[unroll]
        for r in 0..per_unit {
            let i = t + r * 256usize;
            let mut v = 0.0f32;
            if i < cols {
                v = f32::cast_from(x[base + i]);
            }
            vals[r] = v;
            acc += v;
        }
        let mean = cube_sum(acc, planes) / n;
        let mut sq = 0.0f32;
        #[unroll]
        for r in 0..per_unit {
            let i = t + r * 256usize;
            if i < cols {
                let d = vals[r] - mean;
                sq += d * d;
            }
        }
        let var = cube_sum(sq, planes) / n;
        let inv = 1.0f32 / f32::sqrt(var + eps);
        #[unroll]
        for r in 0..per_unit {
            let i = t + r * 256usize;
            if i < cols {
                out[base + i] = F::cast_from((vals[r] - mean) * inv * gamma[g + i] + beta[g + i]);
            }
        }
    } else {
        let mut acc = 0.0f32;
        let mut i = t;
        while i < cols {
            acc += f32::cast_from(x[base + i]);
            i += 256usize;
        }
        let mean = cube_sum(acc, planes) / n;
        let mut sq = 0.0f32;
        let mut j = t;
        while j < cols {
            let d = f32::cast_from(x[base + j]) - mean;
            sq += d * d;
            j += 256usize;
        }
        let var = cube_sum(sq, planes) / n;
        let inv = 1.0f32 / f32::sqrt(var + eps);
        let mut k = t;
        while k < cols {
            let y = (f32::cast_from(x[base + k]) - mean) * inv * gamma[g + k] + beta[g + k];
            out[base + k] = F::cast_from(y);
            k += 256usize;
        }
    }
}

#[backend_extension(Cube)]
pub(crate) trait NormBackend: Backend {
    /// LayerNorm of `x` over its last dimension with `gamma`, `beta` `[G, C]` (module docs).
    /// Subgroup reductions where the adapter has them and `planes` allows them.
    fn fused_layer_norm(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        eps: f32,
        planes: bool,
    ) -> FloatTensor<Self>;
}

impl NormBackend for CubeBackend {
    fn fused_layer_norm(
        x: CubeTensor,
        gamma: CubeTensor,
        beta: CubeTensor,
        eps: f32,
        planes: bool,
    ) -> CubeTensor {
        let shape: Shape = x.shape();
        let cols = shape.as_slice().last().copied().unwrap_or(1).max(1);
        let rows = shape.num_elements() / cols;
        let groups = (gamma.shape().num_elements() / cols).max(1);
        let gpu = Gpu::from_parts(x.client.clone(), x.device.clone());
        let dtype = x.dtype;
        let out = Output::new(&gpu, shape, dtype);
        let gb = buffer::<f32>(gamma);
        let bb = buffer::<f32>(beta);
        let planes = reduce_with_planes(&gpu, planes);
        with_float!(dtype, F => {
            let xb = buffer::<F>(x);
            rust3r_gpu::launch!(
                &gpu,
                layer_norm_rows::<F>(
                    gpu.client(),
                    gpu.grid(rows),
                    CubeDim::new_1d(UNITS),
                    xb.arg(),
                    gb.arg(),
                    bb.arg(),
                    out.buffer::<F>().arg(),
                    cols as u32,
                    (rows / groups) as u32,
                    eps,
                    per_unit(cols).unwrap_or(0),
                    planes,
                )
            );
        });
        out.into_tensor()
    }
}

/// LayerNorm of `x` over its last dimension in one launch (module docs); `gamma`, `beta`
/// binary32 `[G, C]` with `G` dividing the number of rows; `x` on a CubeCL device
/// ([`super::on_cube`]).
pub(crate) fn layer_norm<const D: usize>(
    x: Tensor<D>,
    gamma: Tensor<2>,
    beta: Tensor<2>,
    eps: f64,
) -> Tensor<D> {
    layer_norm_with(x, gamma, beta, eps, true)
}

/// [`layer_norm`], with subgroup reductions only where `planes` allows them.
fn layer_norm_with<const D: usize>(
    x: Tensor<D>,
    gamma: Tensor<2>,
    beta: Tensor<2>,
    eps: f64,
    planes: bool,
) -> Tensor<D> {
    use burn::backend::Dispatch;
    Tensor::from_dispatch(<Dispatch as NormBackend>::fused_layer_norm(
        x.into_dispatch(),
        gamma.into_dispatch(),
        beta.into_dispatch(),
        eps as f32,
        planes,
    ))
}

#[cfg(test)]
mod tests {
    use burn::tensor::{DType, Tensor, TensorData};

    use crate::model::kernels::test_util::test_values as values;
    use crate::model::kernels::test_util::{assert_close, device, host, stored};

    /// Float64 LayerNorm of `rows` rows of `cols`, group `r / (rows / groups)` per row.
    fn reference(
        x: &[f32],
        gamma: &[f32],
        beta: &[f32],
        cols: usize,
        groups: usize,
        eps: f64,
    ) -> Vec<f64> {
        let rows = x.len() / cols;
        let mut out = vec![0.0; x.len()];
        for r in 0..rows {
            let row = &x[r * cols..(r + 1) * cols];
            let mean = row.iter().map(|&v| v as f64).sum::<f64>() / cols as f64;
            let var = row.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / cols as f64;
            let g = (r / (rows / groups)) * cols;
            for c in 0..cols {
                out[r * cols + c] = (row[c] as f64 - mean) / (var + eps).sqrt()
                    * gamma[g + c] as f64
                    + beta[g + c] as f64;
            }
        }
        out
    }

    #[test]
    fn fused_layer_norm_matches_float64_in_binary32_and_binary16() {
        let device = device();
        let up = |v: &[f32], shape: [usize; 2]| {
            Tensor::<2>::from_data(TensorData::new(v.to_vec(), shape), (&device, DType::F32))
        };
        super::super::test_util::report_planes();
        // Row widths of the network (1024, 768), one that is not a multiple of the cube, a
        // narrower row than the cube and one longer than the registers hold (read three
        // times); large row means test the centred variance. Both reductions: the tree, and
        // subgroups where the adapter has them.
        for ((cols, rows, groups), planes) in [
            (1024, 6, 1),
            (768, 8, 2),
            (1000, 3, 1),
            (100, 4, 2),
            (3000, 2, 1),
        ]
        .into_iter()
        .flat_map(|c| [(c, false), (c, true)])
        {
            let gamma = values(groups * cols, 7, 0.0);
            let beta = values(groups * cols, 11, 0.0);
            let eps = 1e-6;
            for (dtype, tol) in [(DType::F32, 1e-5), (DType::F16, 1e-3)] {
                let x = stored(&values(rows * cols, cols as u32, 40.0), dtype);
                let want = reference(&x, &gamma, &beta, cols, groups, eps);
                let xt = Tensor::<3>::from_data(
                    TensorData::new(x, [groups, rows / groups, cols]),
                    (&device, DType::F32),
                )
                .cast(dtype);
                let got = super::layer_norm_with(
                    xt,
                    up(&gamma, [groups, cols]),
                    up(&beta, [groups, cols]),
                    eps,
                    planes,
                );
                assert_eq!(got.dims(), [groups, rows / groups, cols]);
                assert_eq!(got.dtype(), dtype);
                let what = format!("{dtype:?}, {cols} wide, planes allowed {planes}");
                assert_close(&host(got), &want, tol, &what);
            }
        }
    }

    #[test]
    fn fused_layer_norm_keeps_a_non_contiguous_input_in_order() {
        let device = device();
        let (rows, cols) = (5, 64);
        let x = values(rows * cols, 3, 2.0);
        // Stored transposed, then swapped back: a strided view of the same values.
        let mut xt_host = vec![0.0f32; rows * cols];
        for r in 0..rows {
            for c in 0..cols {
                xt_host[c * rows + r] = x[r * cols + c];
            }
        }
        let xt = Tensor::<2>::from_data(
            TensorData::new(xt_host, [cols, rows]),
            (&device, DType::F32),
        )
        .swap_dims(0, 1);
        let ones = Tensor::<2>::ones([1, cols], (&device, DType::F32));
        let zeros = Tensor::<2>::zeros([1, cols], (&device, DType::F32));
        let got = super::layer_norm(xt, ones, zeros, 1e-5);
        let want = reference(&x, &vec![1.0; cols], &vec![0.0; cols], cols, 1, 1e-5);
        assert_close(&host(got), &want, 1e-5, "strided input");
    }
}
