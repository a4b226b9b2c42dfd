//! `softmax(x * scale)` over the last dimension in one launch (the attention weights): one cube
//! per row finds the row's maximum, sums the exponentials, then writes them normalised; read
//! and computed in binary32, written in the storage type. Replaces the scaling, the two-level
//! row maximum and sum, the exponential and the division (and, at reduced precision, the casts
//! around them) that the scores went through as separate operations. `scale` must be positive.
//!
//! Rows up to 2048 wide (the network's: 196 to 1024 tokens) are read once and kept in registers
//! (each exponential computed once); the cube's maximum and sum go through subgroups where the
//! adapter has them ([`super::cube_reduce`]). Longer rows are read three times.

use burn::backend::tensor::FloatTensor;
use burn::backend::{Backend, Shape, TensorMetadata, backend_extension};
use burn::tensor::Tensor;
use burn_cubecl::CubeBackend;
use burn_cubecl::tensor::CubeTensor;
use cubecl::prelude::*;
use rust3r_gpu::{Gpu, block_id};

use super::{Output, UNITS, buffer, cube_max, cube_sum, per_unit, reduce_with_planes, with_float};

/// Rows of at most `per_unit * 256` values are kept in registers; `per_unit` 0: rows too long
/// for that, read three times.
#[cube(launch, launch_unchecked)]
fn softmax_rows_kernel<F: Float>(
    x: &[F],
    out: &mut [F],
    cols: u32,
    scale: f32,
    #[comptime] per_unit: usize,
    #[comptime] planes: bool,
) {
    let row = block_id();
    let cols = cols as usize;
    let t = UNIT_POS as usize;
    let base = row * cols;
    if comptime![per_unit > 0] {
        let mut vals = Array::<f32>::new(per_unit);
        let mut m = f32::min_value();
        #[unroll]
        for r in 0..per_unit {
            let i = t + r * 256usize;
            let mut v = f32::min_value();
            if i < cols {
                v = f32::cast_from(x[base + i]) * scale;
            }
            vals[r] = v;
            m = max(m, v);
        }
        let m = cube_max(m, planes);
        let mut s = 0.0f32;
        #[unroll]
        for r in 0..per_unit {
            // Past the row: exp(min - m) is 0.
            let e = f32::exp(vals[r] - m);
            vals[r] = e;
            s += e;
        }
        let inv = 1.0f32 / cube_sum(s, planes);
        #[unroll]
        for r in 0..per_unit {
            let i = t + r * 256usize;
            if i < cols {
                out[base + i] = F::cast_from(vals[r] * inv);
            }
        }
    } else {
        let mut m = f32::min_value();
        let mut i = t;
        while i < cols {
            m = max(m, f32::cast_from(x[base + i]) * scale);
            i += 256usize;
        }
        let m = cube_max(m, planes);
        let mut s = 0.0f32;
        let mut j = t;
        while j < cols {
            s += f32::exp(f32::cast_from(x[base + j]) * scale - m);
            j += 256usize;
        }
        let inv = 1.0f32 / cube_sum(s, planes);
        let mut k = t;
        while k < cols {
            out[base + k] = F::cast_from(f32::exp(f32::cast_from(x[base + k]) * scale - m) * inv);
            k += 256usize;
        }
    }
}

#[backend_extension(Cube)]
pub(crate) trait SoftmaxBackend: Backend {
    /// `softmax(x * scale)` over the last dimension (module docs); subgroup reductions where
    /// the adapter has them and `planes` allows them.
    fn fused_softmax_rows(x: FloatTensor<Self>, scale: f32, planes: bool) -> FloatTensor<Self>;
}

impl SoftmaxBackend for CubeBackend {
    fn fused_softmax_rows(x: CubeTensor, scale: f32, planes: bool) -> CubeTensor {
        let shape: Shape = x.shape();
        let cols = shape.as_slice().last().copied().unwrap_or(1).max(1);
        let rows = shape.num_elements() / cols;
        let gpu = Gpu::from_parts(x.client.clone(), x.device.clone());
        let planes = reduce_with_planes(&gpu, planes);
        let dtype = x.dtype;
        let out = Output::new(&gpu, shape, dtype);
        with_float!(dtype, F => {
            let xb = buffer::<F>(x);
            rust3r_gpu::launch!(
                &gpu,
                softmax_rows_kernel::<F>(
                    gpu.client(),
                    gpu.grid(rows),
                    CubeDim::new_1d(UNITS),
                    xb.arg(),
                    out.buffer::<F>().arg(),
                    cols as u32,
                    scale,
                    per_unit(cols).unwrap_or(0),
                    planes,
                )
            );
        });
        out.into_tensor()
    }
}

/// `softmax(x * scale)` over the last dimension in one launch (module docs), `scale > 0`, `x`
/// on a CubeCL device ([`super::on_cube`]).
pub(crate) fn softmax_rows<const D: usize>(x: Tensor<D>, scale: f64) -> Tensor<D> {
    softmax_rows_with(x, scale, true)
}

/// [`softmax_rows`], with subgroup reductions only where `planes` allows them.
fn softmax_rows_with<const D: usize>(x: Tensor<D>, scale: f64, planes: bool) -> Tensor<D> {
    use burn::backend::Dispatch;
    debug_assert!(scale > 0.0, "softmax_rows takes a positive scale");
    Tensor::from_dispatch(<Dispatch as SoftmaxBackend>::fused_softmax_rows(
        x.into_dispatch(),
        scale as f32,
        planes,
    ))
}

#[cfg(test)]
mod tests {
    use burn::tensor::{DType, Tensor, TensorData};

    use crate::model::kernels::test_util::test_values;
    use crate::model::kernels::test_util::{assert_close, device, host, stored};

    /// Float64 `softmax(x * scale)` of rows of `cols`.
    fn reference(x: &[f32], cols: usize, scale: f64) -> Vec<f64> {
        x.chunks_exact(cols)
            .flat_map(|row| {
                let m = row
                    .iter()
                    .map(|&v| v as f64 * scale)
                    .fold(f64::MIN, f64::max);
                let e: Vec<f64> = row.iter().map(|&v| (v as f64 * scale - m).exp()).collect();
                let s: f64 = e.iter().sum();
                e.into_iter().map(move |v| v / s)
            })
            .collect()
    }

    /// Both reductions (the tree, and subgroups where the adapter has them: lavapipe does),
    /// rows kept in registers and longer ones.
    #[test]
    fn fused_softmax_matches_float64_in_binary32_and_binary16() {
        let device = device();
        super::super::test_util::report_planes();
        // The attention's row lengths (768 tokens at 512x384, 196 at 224x224), one longer than
        // the cube's reach per pass, and a short one; large scores test the maximum shift.
        // 3000: longer than the registers hold (read three times).
        for (cols, rows, scale, offset) in [
            (768, 5, 0.125, 0.0),
            (196, 7, 0.125, 0.0),
            (1000, 3, 1.0, 0.0),
            (33, 4, 8.0, 40.0),
            (3000, 2, 0.5, 40.0),
        ] {
            for ((dtype, tol), planes) in [(DType::F32, 1e-5), (DType::F16, 1e-3)]
                .into_iter()
                .flat_map(|d| [(d, false), (d, true)])
            {
                let x = stored(&test_values(rows * cols, cols as u32, offset), dtype);
                let want = reference(&x, cols, scale);
                let xt = Tensor::<4>::from_data(
                    TensorData::new(x, [1, rows, 1, cols]),
                    (&device, DType::F32),
                )
                .cast(dtype);
                let got = super::softmax_rows_with(xt, scale, planes);
                assert_eq!(got.dtype(), dtype);
                let what = format!("{dtype:?}, {cols} wide, planes allowed {planes}");
                assert_close(&host(got), &want, tol, &what);
            }
        }
    }
}
