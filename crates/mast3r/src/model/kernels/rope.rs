//! RoPE2D rotation of one part (`q` or `k`) of a projection in one launch: reads part `p` of
//! `x` `[B, N, P * C]` (`P` parts of `C = H * d` features, as the fused `qkv` projection
//! stores them), writes `t * cos + swap(t) * sin` as a contiguous `[B, N, H, d]` tensor
//! ([`crate::model::rope`] for the tables and `swap`), computed in binary32. Replaces the
//! part's copy out of the projection, the quarter swap (`flip`) and the products and sum.

use burn::backend::tensor::FloatTensor;
use burn::backend::{Backend, Shape, backend_extension};
use burn::tensor::Tensor;
use burn_cubecl::CubeBackend;
use burn_cubecl::tensor::CubeTensor;
use cubecl::prelude::*;
use rust3r_gpu::{BLOCK_DIM, Gpu, global_id};

use super::{Output, buffer, with_float};

#[cube(launch, launch_unchecked)]
fn rope_part_kernel<F: Float>(
    x: &[F],
    cos: &[F],
    sin: &[F],
    out: &mut [F],
    total: u32,
    tokens: u32,
    parts: u32,
    part: u32,
    c: u32,
    d: u32,
) {
    let i = global_id();
    if i < total as usize {
        let c = c as usize;
        let d = d as usize;
        let ch = i % c;
        let row = i / c;
        let tok = row % tokens as usize;
        let j = ch % d;
        let m = d / 2;
        let q = d / 4;
        let jj = j % m;
        let partner = select(jj < q, j + q, j - q);
        let src = row * (parts as usize) * c + (part as usize) * c + ch - j;
        let t = tok * d;
        let v = f32::cast_from(x[src + j]) * f32::cast_from(cos[t + j])
            + f32::cast_from(x[src + partner]) * f32::cast_from(sin[t + j]);
        out[i] = F::cast_from(v);
    }
}

#[backend_extension(Cube)]
pub(crate) trait RopeBackend: Backend {
    /// Rotated part `part` of `parts` of `x` `[B, N, parts * H * d]` (module docs); `cos`,
    /// `sin` `[1, N, 1, d]` in `x`'s storage type.
    fn fused_rope_part(
        x: FloatTensor<Self>,
        cos: FloatTensor<Self>,
        sin: FloatTensor<Self>,
        layout: RopeLayout,
    ) -> FloatTensor<Self>;
}

/// Which part of how many, and the head split.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RopeLayout {
    pub part: usize,
    pub parts: usize,
    pub heads: usize,
}

impl RopeBackend for CubeBackend {
    fn fused_rope_part(
        x: CubeTensor,
        cos: CubeTensor,
        sin: CubeTensor,
        layout: RopeLayout,
    ) -> CubeTensor {
        let dims = x.meta.shape().as_slice().to_vec();
        let (b, n, pc) = (dims[0], dims[1], dims[2]);
        let c = pc / layout.parts;
        let d = c / layout.heads;
        let total = b * n * c;
        let gpu = Gpu::from_parts(x.client.clone(), x.device.clone());
        let dtype = x.dtype;
        let out = Output::new(&gpu, Shape::new([b, n, layout.heads, d]), dtype);
        with_float!(dtype, F => {
            let xb = buffer::<F>(x);
            let cb = buffer::<F>(cos);
            let sb = buffer::<F>(sin);
            rust3r_gpu::launch!(
                &gpu,
                rope_part_kernel::<F>(
                    gpu.client(),
                    gpu.grid_1d(total),
                    BLOCK_DIM,
                    xb.arg(),
                    cb.arg(),
                    sb.arg(),
                    out.buffer::<F>().arg(),
                    total as u32,
                    n as u32,
                    layout.parts as u32,
                    layout.part as u32,
                    c as u32,
                    d as u32,
                )
            );
        });
        out.into_tensor()
    }
}

/// The rotated part (module docs); `x` on a CubeCL device ([`super::on_cube`]).
pub(crate) fn rope_part(
    x: Tensor<3>,
    cos: Tensor<4>,
    sin: Tensor<4>,
    layout: RopeLayout,
) -> Tensor<4> {
    use burn::backend::Dispatch;
    Tensor::from_dispatch(<Dispatch as RopeBackend>::fused_rope_part(
        x.into_dispatch(),
        cos.into_dispatch(),
        sin.into_dispatch(),
        layout,
    ))
}

#[cfg(test)]
mod tests {
    use burn::tensor::{DType, Tensor, TensorData};

    use super::RopeLayout;
    use crate::model::kernels::test_util::test_values;
    use crate::model::kernels::test_util::{assert_close, device, host, stored};
    use crate::model::rope::host_tables;

    /// Float64 rotation of part `part` of `x` `[B, N, P * H * d]`: `t * cos + swap(t) * sin`,
    /// `swap` exchanging the quarters `[a, b, c, e]` of each head vector into `[b, a, e, c]`.
    fn reference(
        x: &[f32],
        (cos, sin): (&[f32], &[f32]),
        b: usize,
        n: usize,
        l: RopeLayout,
        d: usize,
    ) -> Vec<f64> {
        let c = l.heads * d;
        let q = d / 4;
        let mut out = Vec::with_capacity(b * n * c);
        for bi in 0..b {
            for t in 0..n {
                let row = &x[((bi * n + t) * l.parts + l.part) * c..][..c];
                for h in 0..l.heads {
                    for j in 0..d {
                        let swapped = [1, 0, 3, 2][j / q] * q + j % q;
                        out.push(
                            row[h * d + j] as f64 * cos[t * d + j] as f64
                                + row[h * d + swapped] as f64 * sin[t * d + j] as f64,
                        );
                    }
                }
            }
        }
        out
    }

    #[test]
    fn fused_rope_matches_float64_for_every_part_in_binary32_and_binary16() {
        let device = device();
        let (gh, gw, heads, d, b) = (3, 5, 3, 16, 2);
        let n = gh * gw;
        let (cos, sin) = host_tables(gh, gw, d, 100.0);
        for parts in [1, 3] {
            let x = test_values(b * n * parts * heads * d, parts as u32, 0.0);
            for part in 0..parts {
                let l = RopeLayout { part, parts, heads };
                for (dtype, tol) in [(DType::F32, 1e-6), (DType::F16, 2e-3)] {
                    let (xr, cr, sr) =
                        (stored(&x, dtype), stored(&cos, dtype), stored(&sin, dtype));
                    let want = reference(&xr, (&cr, &sr), b, n, l, d);
                    let up4 = |v: Vec<f32>| {
                        Tensor::<4>::from_data(
                            TensorData::new(v, [1, n, 1, d]),
                            (&device, DType::F32),
                        )
                        .cast(dtype)
                    };
                    let xt = Tensor::<3>::from_data(
                        TensorData::new(xr, [b, n, parts * heads * d]),
                        (&device, DType::F32),
                    )
                    .cast(dtype);
                    let got = super::rope_part(xt, up4(cr), up4(sr), l);
                    assert_eq!(got.dims(), [b, n, heads, d]);
                    assert_close(
                        &host(got),
                        &want,
                        tol,
                        &format!("{dtype:?}, part {part} of {parts}"),
                    );
                }
            }
        }
    }
}
