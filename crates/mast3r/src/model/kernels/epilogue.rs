//! What follows a linear layer's matrix product, in one launch: `y + b`, then optionally the
//! exact (erf) GELU, then optionally a residual added: `r + act(y + b)`. Computed in binary32,
//! written in the storage type. Replaces the bias add, GELU's five element-wise operations
//! and the residual add of every MLP and attention projection.
//!
//! `b` is `[G, C]` in the storage type: row `i` of `y` (`R` rows of `C`) uses group
//! `i / (R / G)` (the decoder's two stacked views, `G = 2`).

use burn::backend::tensor::FloatTensor;
use burn::backend::{Backend, DType, Shape, TensorMetadata, backend_extension};
use burn::tensor::Tensor;
use burn_cubecl::CubeBackend;
use burn_cubecl::tensor::CubeTensor;
use cubecl::prelude::*;
use rust3r_gpu::{BLOCK_DIM, Gpu, GpuBuffer, global_id};

use super::buffer;

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
        let out = gpu.client().empty((total * dtype.size()).max(4));
        macro_rules! go {
            ($f:ty) => {{
                let (yb, _y) = buffer::<$f>(y);
                let (bb, _b) = buffer::<$f>(bias);
                let (rb, _r) = buffer::<$f>(residual);
                let ob = GpuBuffer::<$f>::from_handle(out.clone(), total);
                rust3r_gpu::launch!(
                    &gpu,
                    epilogue_kernel::<$f>(
                        gpu.client(),
                        gpu.grid_1d(total),
                        BLOCK_DIM,
                        yb.arg(),
                        bb.arg(),
                        rb.arg(),
                        ob.arg(),
                        total as u32,
                        cols as u32,
                        (rows / groups) as u32,
                        flags.gelu,
                        flags.add_residual,
                    )
                );
            }};
        }
        match dtype {
            DType::F16 => go!(half::f16),
            DType::BF16 => go!(half::bf16),
            _ => go!(f32),
        }
        CubeTensor::new_contiguous(
            gpu.client().clone(),
            gpu.device().clone(),
            shape,
            out,
            dtype,
        )
    }
}

/// `residual + act(y + bias)` in one launch (module docs), or `Err` with the inputs back when
/// `y` is not on a CubeCL device.
#[allow(clippy::type_complexity)]
pub(crate) fn linear_epilogue<const D: usize>(
    y: Tensor<D>,
    bias: Tensor<2>,
    residual: Option<Tensor<D>>,
    gelu: bool,
) -> Result<Tensor<D>, (Tensor<D>, Option<Tensor<D>>)> {
    use burn::backend::{Dispatch, DispatchDevice};
    if !matches!(y.device().as_dispatch(), DispatchDevice::Cube(_)) {
        return Err((y, residual));
    }
    let flags = EpilogueFlags {
        gelu,
        add_residual: residual.is_some(),
    };
    // Without a residual the kernel never reads that argument: `y` stands in.
    let residual = residual.unwrap_or_else(|| y.clone());
    Ok(Tensor::from_dispatch(
        <Dispatch as EpilogueBackend>::fused_linear_epilogue(
            y.into_dispatch(),
            bias.into_dispatch(),
            residual.into_dispatch(),
            flags,
        ),
    ))
}

#[cfg(test)]
mod tests {
    use burn::tensor::{DType, Device, DeviceKind, Tensor, TensorData};

    use crate::model::kernels::test_values;

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
        let device = Device::wgpu(DeviceKind::DefaultDevice);
        let (rows, cols, groups) = (6, 300, 2);
        let y = test_values(rows * cols, 1, 1.5);
        let b = test_values(groups * cols, 2, 0.0);
        let r = test_values(rows * cols, 3, 0.0);
        for gelu in [false, true] {
            for with_r in [false, true] {
                for (dtype, tol) in [(DType::F32, 2e-6), (DType::F16, 2e-3)] {
                    let round = |v: &[f32]| -> Vec<f32> {
                        if dtype == DType::F16 {
                            v.iter().map(|&v| half::f16::from_f32(v).to_f32()).collect()
                        } else {
                            v.to_vec()
                        }
                    };
                    let (yr, br, rr) = (round(&y), round(&b), round(&r));
                    let want = reference(&yr, &br, with_r.then_some(&rr[..]), cols, groups, gelu);
                    let up = |v: Vec<f32>, shape: [usize; 2]| {
                        Tensor::<2>::from_data(TensorData::new(v, shape), (&device, DType::F32))
                            .cast(dtype)
                    };
                    let got = super::linear_epilogue(
                        up(yr, [rows, cols]),
                        up(br, [groups, cols]),
                        with_r.then(|| up(rr, [rows, cols])),
                        gelu,
                    )
                    .unwrap_or_else(|_| panic!("wgpu is a CubeCL device"));
                    assert_eq!(got.dtype(), dtype);
                    let got = got
                        .cast(DType::F32)
                        .into_data()
                        .try_to_vec::<f32>()
                        .expect("f32 output");
                    let err = got
                        .iter()
                        .zip(&want)
                        .map(|(&g, &w)| (g as f64 - w).abs())
                        .fold(0.0, f64::max);
                    let top = want.iter().fold(0.0f64, |m, w| m.max(w.abs()));
                    assert!(
                        err <= tol * top,
                        "{dtype:?}, gelu {gelu}, residual {with_r}: max |diff| {err} of {top}"
                    );
                }
            }
        }
    }
}
