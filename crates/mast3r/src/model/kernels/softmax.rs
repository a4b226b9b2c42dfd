//! `softmax(x * scale)` over the last dimension in one launch (the attention weights): one cube
//! per row finds the row's maximum, sums the exponentials, then writes them normalised; read
//! and computed in binary32, written in the storage type. Replaces the scaling, the two-level
//! row maximum and sum, the exponential and the division (and, at reduced precision, the casts
//! around them) that the scores went through as separate operations. `scale` must be positive.

use burn::backend::tensor::FloatTensor;
use burn::backend::{Backend, DType, Shape, TensorMetadata, backend_extension};
use burn::tensor::Tensor;
use burn_cubecl::CubeBackend;
use burn_cubecl::tensor::CubeTensor;
use cubecl::prelude::*;
use rust3r_gpu::{Gpu, GpuBuffer, block_id};

use super::{UNITS, buffer, cube_max, cube_sum};

#[cube(launch, launch_unchecked)]
fn softmax_rows_kernel<F: Float>(x: &[F], out: &mut [F], cols: u32, scale: f32) {
    let row = block_id();
    let cols = cols as usize;
    let t = UNIT_POS as usize;
    let base = row * cols;
    let mut m = f32::min_value();
    let mut i = t;
    while i < cols {
        m = max(m, f32::cast_from(x[base + i]) * scale);
        i += 256usize;
    }
    let m = cube_max(m);
    let mut s = 0.0f32;
    let mut j = t;
    while j < cols {
        s += f32::exp(f32::cast_from(x[base + j]) * scale - m);
        j += 256usize;
    }
    let inv = 1.0f32 / cube_sum(s);
    let mut k = t;
    while k < cols {
        out[base + k] = F::cast_from(f32::exp(f32::cast_from(x[base + k]) * scale - m) * inv);
        k += 256usize;
    }
}

#[backend_extension(Cube)]
pub(crate) trait SoftmaxBackend: Backend {
    /// `softmax(x * scale)` over the last dimension (module docs).
    fn fused_softmax_rows(x: FloatTensor<Self>, scale: f32) -> FloatTensor<Self>;
}

impl SoftmaxBackend for CubeBackend {
    fn fused_softmax_rows(x: CubeTensor, scale: f32) -> CubeTensor {
        let shape: Shape = x.shape();
        let cols = shape.as_slice().last().copied().unwrap_or(1).max(1);
        let n = shape.num_elements();
        let rows = n / cols;
        let gpu = Gpu::from_parts(x.client.clone(), x.device.clone());
        let dtype = x.dtype;
        let out = gpu.client().empty((n * dtype.size()).max(4));
        macro_rules! go {
            ($f:ty) => {{
                let (xb, _x) = buffer::<$f>(x);
                let ob = GpuBuffer::<$f>::from_handle(out.clone(), n);
                rust3r_gpu::launch!(
                    &gpu,
                    softmax_rows_kernel::<$f>(
                        gpu.client(),
                        gpu.grid(rows),
                        CubeDim::new_1d(UNITS),
                        xb.arg(),
                        ob.arg(),
                        cols as u32,
                        scale,
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

/// `softmax(x * scale)` over the last dimension in one launch (module docs); `Err(x)` when `x`
/// is not on a CubeCL device (the caller then runs the separate operations).
pub(crate) fn softmax_rows<const D: usize>(
    x: Tensor<D>,
    scale: f64,
) -> Result<Tensor<D>, Tensor<D>> {
    use burn::backend::{Dispatch, DispatchDevice};
    if !matches!(x.device().as_dispatch(), DispatchDevice::Cube(_)) || scale <= 0.0 {
        return Err(x);
    }
    Ok(Tensor::from_dispatch(
        <Dispatch as SoftmaxBackend>::fused_softmax_rows(x.into_dispatch(), scale as f32),
    ))
}

#[cfg(test)]
mod tests {
    use burn::tensor::{DType, Device, DeviceKind, Tensor, TensorData};

    use crate::model::kernels::test_values;

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

    #[test]
    fn fused_softmax_matches_float64_in_binary32_and_binary16() {
        let device = Device::wgpu(DeviceKind::DefaultDevice);
        // The attention's row lengths (768 tokens at 512x384, 196 at 224x224), one longer than
        // the cube's reach per pass, and a short one; large scores test the maximum shift.
        for (cols, rows, scale, offset) in [
            (768, 5, 0.125, 0.0),
            (196, 7, 0.125, 0.0),
            (1000, 3, 1.0, 0.0),
            (33, 4, 8.0, 40.0),
        ] {
            let x = test_values(rows * cols, cols as u32, offset);
            for (dtype, tol) in [(DType::F32, 1e-5), (DType::F16, 1e-3)] {
                let x: Vec<f32> = if dtype == DType::F16 {
                    x.iter().map(|&v| half::f16::from_f32(v).to_f32()).collect()
                } else {
                    x.clone()
                };
                let want = reference(&x, cols, scale);
                let xt = Tensor::<4>::from_data(
                    TensorData::new(x, [1, rows, 1, cols]),
                    (&device, DType::F32),
                )
                .cast(dtype);
                let got = super::softmax_rows(xt, scale)
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
                let top = want.iter().fold(0.0f64, |m, w| m.max(*w));
                assert!(
                    err <= tol * top,
                    "{dtype:?}, {cols} wide: max |diff| {err} of {top}"
                );
            }
        }
    }
}
