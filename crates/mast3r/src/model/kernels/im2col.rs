//! The im2col matrix of a channels-last map in one launch: `x` `[B, H, W, C]` to
//! `[B, Ho, Wo, k * k * C]`, columns `(ky, kx, c)`, zeros where the window leaves the padded
//! map; the storage type is kept (values are copied, not computed). Replaces the padding copy
//! and the `k * k` strided slices concatenated along channels (one `slice_assign` launch
//! each) of the DPT heads' 3x3 convolutions: about 4 ms per tracked frame on an H200 (`ncu`,
//! docs/benchmarks/journal.md "MASt3R: registers and subgroups in the row kernels, im2col in
//! one launch"). The reference is [`crate::model::layers::im2col_ops`], the separate operations.

use burn::backend::tensor::FloatTensor;
use burn::backend::{Backend, Shape, TensorMetadata, backend_extension};
use burn::tensor::Tensor;
use burn_cubecl::CubeBackend;
use burn_cubecl::tensor::CubeTensor;
use cubecl::prelude::*;
use rust3r_gpu::{Gpu, block_id};

use super::{Output, UNITS, buffer, with_float};

/// A convolution window: `k x k`, `stride`, zero padding `pad` on every side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Window {
    pub k: usize,
    pub stride: usize,
    pub pad: usize,
}

/// The map's and the output's sizes, for the kernel.
#[derive(CubeType, CubeLaunch, Clone, Copy)]
struct Im2colDims {
    h: u32,
    w: u32,
    c: u32,
    ho: u32,
    wo: u32,
    k: u32,
    stride: u32,
    pad: u32,
}

/// One cube per output position (`b, oy, ox`): its units walk the position's `k * k * C`
/// values as vectors of `N` channels (consecutive units, consecutive vectors: coalesced reads
/// and writes; `d.c` counts vectors), with 32-bit index arithmetic (64-bit division is slow
/// on GPUs; the matrix stays below 2^32 values); zeros where the window leaves the map.
#[cube(launch, launch_unchecked)]
fn im2col_kernel<F: Float, N: Size>(x: &[Vector<F, N>], out: &mut [Vector<F, N>], d: Im2colDims) {
    let pos = block_id() as u32;
    let ox = pos % d.wo;
    let oy = (pos / d.wo) % d.ho;
    let b = pos / (d.wo * d.ho);
    let row = d.k * d.k * d.c;
    let base = pos * row;
    let mut e = UNIT_POS;
    while e < row {
        let tap = e / d.c;
        let ch = e - tap * d.c;
        // Padded coordinates; the map starts at `pad`.
        let py = oy * d.stride + tap / d.k;
        let px = ox * d.stride + tap % d.k;
        let mut v = Vector::<F, N>::new(F::new(0.0));
        if py >= d.pad && px >= d.pad && py - d.pad < d.h && px - d.pad < d.w {
            let at = ((b * d.h + (py - d.pad)) * d.w + (px - d.pad)) * d.c + ch;
            v = x[at as usize];
        }
        out[(base + e) as usize] = v;
        e += 256u32;
    }
}

#[backend_extension(Cube)]
pub(crate) trait Im2colBackend: Backend {
    /// The im2col matrix of `x` `[B, H, W, C]` for `window` (module docs).
    fn fused_im2col(x: FloatTensor<Self>, window: Window) -> FloatTensor<Self>;
}

impl Im2colBackend for CubeBackend {
    fn fused_im2col(x: CubeTensor, window: Window) -> CubeTensor {
        let shape: Shape = x.shape();
        let [b, h, w, c]: [usize; 4] = shape
            .as_slice()
            .try_into()
            .expect("im2col takes a [B, H, W, C] map");
        let Window { k, stride, pad } = window;
        let ho = (h + 2 * pad - k) / stride + 1;
        let wo = (w + 2 * pad - k) / stride + 1;
        let out_shape = Shape::from(vec![b, ho, wo, k * k * c]);
        assert!(
            x.shape().num_elements() <= u32::MAX as usize
                && out_shape.num_elements() <= u32::MAX as usize,
            "im2col: {:?} to {:?} needs 64-bit indices",
            x.shape(),
            out_shape
        );
        let gpu = Gpu::from_parts(x.client.clone(), x.device.clone());
        let dtype = x.dtype;
        let out = Output::new(&gpu, out_shape, dtype);
        // The widest vector that divides the channels.
        let width = [4usize, 2, 1]
            .into_iter()
            .find(|v| c.is_multiple_of(*v))
            .unwrap_or(1);
        with_float!(dtype, F => {
            let xb = buffer::<F>(x);
            rust3r_gpu::launch!(
                &gpu,
                im2col_kernel::<F>(
                    gpu.client(),
                    gpu.grid(b * ho * wo),
                    CubeDim::new_1d(UNITS),
                    width,
                    xb.arg_vectors(width),
                    out.buffer::<F>().arg_vectors(width),
                    Im2colDimsLaunch::new(
                        h as u32,
                        w as u32,
                        (c / width) as u32,
                        ho as u32,
                        wo as u32,
                        k as u32,
                        stride as u32,
                        pad as u32,
                    ),
                )
            );
        });
        out.into_tensor()
    }
}

/// The im2col matrix of `x` `[B, H, W, C]` (on a CubeCL device, [`super::on_cube`]) for a
/// `k x k` window of `stride` over the map padded by `pad` zeros (module docs).
pub(crate) fn im2col(x: Tensor<4>, window: Window) -> Tensor<4> {
    use burn::backend::Dispatch;
    Tensor::from_dispatch(<Dispatch as Im2colBackend>::fused_im2col(
        x.into_dispatch(),
        window,
    ))
}

#[cfg(test)]
mod tests {
    use burn::tensor::{DType, Tensor, TensorData};

    use super::Window;
    use crate::model::kernels::test_util::test_values;
    use crate::model::kernels::test_util::{device, host, stored};

    /// The im2col matrix computed on the host, element by element.
    fn reference(x: &[f32], [b, h, w, c]: [usize; 4], win: Window) -> Vec<f32> {
        let Window { k, stride, pad } = win;
        let (ho, wo) = (
            (h + 2 * pad - k) / stride + 1,
            (w + 2 * pad - k) / stride + 1,
        );
        let mut out = Vec::with_capacity(b * ho * wo * k * k * c);
        for bi in 0..b {
            for oy in 0..ho {
                for ox in 0..wo {
                    for ky in 0..k {
                        for kx in 0..k {
                            let (iy, ix) = (
                                (oy * stride + ky) as isize - pad as isize,
                                (ox * stride + kx) as isize - pad as isize,
                            );
                            let inside =
                                iy >= 0 && ix >= 0 && (iy as usize) < h && (ix as usize) < w;
                            for ch in 0..c {
                                out.push(if inside {
                                    x[((bi * h + iy as usize) * w + ix as usize) * c + ch]
                                } else {
                                    0.0
                                });
                            }
                        }
                    }
                }
            }
        }
        out
    }

    /// The fused kernel gives the host's matrix exactly (values are copied) for the DPT heads'
    /// windows (3x3, stride 1, pad 1; channels read as vectors of 4 and of 2), a strided one
    /// without padding, and a 2x2 window over 3 channels (scalars), in
    /// binary32 and binary16, on a batch of two; and the separate operations it replaces give
    /// the same (`layers::im2col` off the CubeCL path).
    #[test]
    fn fused_im2col_copies_the_windows_exactly() {
        let device = device();
        for (shape, win) in [
            (
                [2, 5, 7, 6],
                Window {
                    k: 3,
                    stride: 1,
                    pad: 1,
                },
            ),
            (
                [2, 9, 8, 4],
                Window {
                    k: 3,
                    stride: 2,
                    pad: 0,
                },
            ),
            (
                [1, 4, 6, 3],
                Window {
                    k: 2,
                    stride: 2,
                    pad: 1,
                },
            ),
        ] {
            let n = shape.iter().product();
            for dtype in [DType::F32, DType::F16] {
                let x = stored(&test_values(n, n as u32, 0.0), dtype);
                let want = reference(&x, shape, win);
                let xt = Tensor::<4>::from_data(TensorData::new(x, shape), (&device, DType::F32))
                    .cast(dtype);
                let got = super::im2col(xt.clone(), win);
                assert_eq!(got.dtype(), dtype);
                assert_eq!(host(got), want, "{dtype:?} {shape:?} {win:?}");
                let ops = crate::model::layers::im2col_ops(xt, win.k, win.stride, win.pad);
                assert_eq!(host(ops), want, "separate operations, {dtype:?} {shape:?}");
            }
        }
    }
}
