//! What follows a linear layer's matrix product, in one launch: `y + b`, then optionally the
//! exact (erf) GELU, then optionally a residual added: `r + act(y + b)`. Computed in binary32,
//! written in the storage type. Replaces the bias add, GELU's five element-wise operations
//! and the residual add of every MLP and attention projection.
//!
//! `b` is `[G, C]` in the storage type: row `i` of `y` (`R` rows of `C`) uses group
//! `i / (R / G)` (the decoder's two stacked views, `G = 2`).

use burn::backend::tensor::FloatTensor;
use burn::backend::{Backend, Shape, TensorMetadata, backend_extension};
use burn::tensor::Tensor;
use burn_cubecl::CubeBackend;
use burn_cubecl::tensor::CubeTensor;
use cubecl::prelude::*;
use rust3r_gpu::{BLOCK_DIM, Gpu, global_id};

use super::{Output, buffer, with_float};

#[cube(launch, launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn epilogue_kernel<F: Float>(
    y: &[F],
    bias: &[F],
    residual: &[F],
    out: &mut [F],
    total: u32,
    cols: u32,
    rows_per_group: u32,
    #[comptime] gelu: bool,
    #[comptime] add_residual: bool,
) {
    let i = global_id();
    if i < total as usize {
        let cols = cols as usize;
        let row = i / cols;
        let g = row / rows_per_group as usize;
        let mut v = f32::cast_from(y[i]) + f32::cast_from(bias[g * cols + i % cols]);
        if comptime![gelu] {
            v = 0.5f32 * v * (1.0f32 + Erf::erf(v * 0.70710677f32));
        }
        if comptime![add_residual] {
            v += f32::cast_from(residual[i]);
        }
        out[i] = F::cast_from(v);
    }
}

#[backend_extension(Cube)]
pub(crate) trait EpilogueBackend: Backend {
    /// `r + act(y + b)` (module docs); `residual` is read only when `add_residual`.
    fn fused_linear_epilogue(
        y: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        residual: FloatTensor<Self>,
        flags: EpilogueFlags,
    ) -> FloatTensor<Self>;
}

/// What the epilogue applies after the bias.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct EpilogueFlags {
    pub gelu: bool,
    pub add_residual: bool,
}

impl EpilogueBackend for CubeBackend {
    fn fused_linear_epilogue(
        y: CubeTensor,
        bias: CubeTensor,
        residual: CubeTensor,
        flags: EpilogueFlags,
    ) -> CubeTensor {
        let shape: Shape = y.shape();
        let cols = shape.as_slice().last().copied().unwrap_or(1).max(1);
        let total = shape.num_elements();
        let rows = total / cols;
        let groups = (bias.shape().num_elements() / cols).max(1);
        let gpu = Gpu::from_parts(y.client.clone(), y.device.clone());
        let dtype = y.dtype;
        let out = Output::new(&gpu, shape, dtype);
        with_float!(dtype, F => {
            let yb = buffer::<F>(y);
            let bb = buffer::<F>(bias);
            let rb = buffer::<F>(residual);
            rust3r_gpu::launch!(
                &gpu,
                epilogue_kernel::<F>(
                    gpu.client(),
                    gpu.grid_1d(total),
                    BLOCK_DIM,
                    yb.arg(),
                    bb.arg(),
                    rb.arg(),
                    out.buffer::<F>().arg(),
                    total as u32,
                    cols as u32,
                    (rows / groups) as u32,
                    flags.gelu,
                    flags.add_residual,
                )
            );
        });
        out.into_tensor()
    }
}

/// `residual + act(y + bias)` in one launch (module docs); `y` on a CubeCL device
/// ([`super::on_cube`]).
pub(crate) fn linear_epilogue<const D: usize>(
    y: Tensor<D>,
    bias: Tensor<2>,
    residual: Option<Tensor<D>>,
    gelu: bool,
) -> Tensor<D> {
    use burn::backend::Dispatch;
    let flags = EpilogueFlags {
        gelu,
        add_residual: residual.is_some(),
    };
    // Without a residual the kernel never reads that argument: `y` stands in.
    let residual = residual.unwrap_or_else(|| y.clone());
    Tensor::from_dispatch(<Dispatch as EpilogueBackend>::fused_linear_epilogue(
        y.into_dispatch(),
        bias.into_dispatch(),
        residual.into_dispatch(),
        flags,
    ))
}

#[cfg(test)]
mod tests {
    use burn::tensor::{DType, Tensor, TensorData};

    use crate::model::kernels::test_util::test_values;
    use crate::model::kernels::test_util::{assert_close, device, host, stored};

    /// Float64 `r + act(y + b)`, the exact GELU through `libm::erf`.
    fn reference(
        y: &[f32],
        b: &[f32],
        r: Option<&[f32]>,
        cols: usize,
        groups: usize,
        gelu: bool,
    ) -> Vec<f64> {
        let rows = y.len() / cols;
        (0..y.len())
            .map(|i| {
                let g = (i / cols) / (rows / groups);
                let mut v = y[i] as f64 + b[g * cols + i % cols] as f64;
                if gelu {
                    v = 0.5 * v * (1.0 + libm::erf(v / std::f64::consts::SQRT_2));
                }
                v + r.map_or(0.0, |r| r[i] as f64)
            })
            .collect()
    }

    #[test]
    fn fused_epilogue_matches_float64_with_and_without_gelu_and_residual() {
        let device = device();
        let (rows, cols, groups) = (6, 300, 2);
        for gelu in [false, true] {
            for with_r in [false, true] {
                for (dtype, tol) in [(DType::F32, 2e-6), (DType::F16, 2e-3)] {
                    let y = stored(&test_values(rows * cols, 1, 1.5), dtype);
                    let b = stored(&test_values(groups * cols, 2, 0.0), dtype);
                    let r = stored(&test_values(rows * cols, 3, 0.0), dtype);
                    let want = reference(&y, &b, with_r.then_some(&r[..]), cols, groups, gelu);
                    let up = |v: Vec<f32>, shape: [usize; 2]| {
                        Tensor::<2>::from_data(TensorData::new(v, shape), (&device, DType::F32))
                            .cast(dtype)
                    };
                    let got = super::linear_epilogue(
                        up(y, [rows, cols]),
                        up(b, [groups, cols]),
                        with_r.then(|| up(r, [rows, cols])),
                        gelu,
                    );
                    assert_eq!(got.dtype(), dtype);
                    assert_close(
                        &host(got),
                        &want,
                        tol,
                        &format!("{dtype:?}, gelu {gelu}, residual {with_r}"),
                    );
                }
            }
        }
    }
}
