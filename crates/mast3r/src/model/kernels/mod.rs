//! The network's fused kernels, each a `#[cube]` kernel launched as a Burn backend extension
//! on the tensors' own CubeCL client (so it is ordered with Burn's work and recorded into the
//! replayed graphs like it): one row per cube, statistics in binary32 for every storage type.
//! Each file holds one operation, its launcher and its float64 reference test.
//!
//! Why (docs/benchmarks/journal.md, "MASt3R: fused LayerNorm, softmax and RoPE", and "MASt3R:
//! registers and subgroups in the row kernels, im2col in one launch"): per frame on
//! an H200, the separate Burn operations around the cuBLAS products (row statistics, centring,
//! scaling, exponentials, casts) took about two thirds of the network's device time.

mod epilogue;
mod im2col;
mod layer_norm;
mod rope;
mod softmax;

pub(crate) use epilogue::linear_epilogue;
pub(crate) use im2col::{Window, im2col};

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

/// Sum (or, with `max_of`, maximum) of `v` over the cube; every unit gets it. With `planes`
/// (adapters with subgroups, [`reduce_with_planes`]): each plane reduces its values, the plane
/// leaders store one partial each in shared memory, and every unit folds the
/// `256 / PLANE_DIM` partials (one barrier instead of eight); else a tree over [`UNITS`]
/// values in shared memory.
#[cube]
fn cube_reduce(v: f32, #[comptime] max_of: bool, #[comptime] planes: bool) -> f32 {
    if comptime![planes] {
        plane_reduce(v, max_of)
    } else {
        tree_reduce(v, max_of)
    }
}

/// [`cube_reduce`] through subgroups.
#[cube]
fn plane_reduce(v: f32, #[comptime] max_of: bool) -> f32 {
    let t = UNIT_POS as usize;
    let mut smem = Shared::<[f32]>::new_slice(256usize);
    let p = if comptime![max_of] {
        plane_max(v)
    } else {
        plane_sum(v)
    };
    if UNIT_POS_PLANE == 0u32 {
        smem[t / (PLANE_DIM as usize)] = p;
    }
    sync_cube();
    let parts = (256u32 / PLANE_DIM) as usize;
    let mut out = smem[0];
    let mut i = 1usize;
    while i < parts {
        if comptime![max_of] {
            out = max(out, smem[i]);
        } else {
            out += smem[i];
        }
        i += 1usize;
    }
    sync_cube();
    out
}

/// [`cube_reduce`] as a tree in shared memory.
#[cube]
fn tree_reduce(v: f32, #[comptime] max_of: bool) -> f32 {
    let t = UNIT_POS as usize;
    let mut smem = Shared::<[f32]>::new_slice(256usize);
    smem[t] = v;
    sync_cube();
    let mut stride = 128usize;
    while stride > 0 {
        if t < stride {
            let a = smem[t];
            let b = smem[t + stride];
            if comptime![max_of] {
                smem[t] = max(a, b);
            } else {
                smem[t] = a + b;
            }
        }
        sync_cube();
        stride /= 2;
    }
    let s = smem[0];
    sync_cube();
    s
}

/// Sum of `v` over the cube ([`cube_reduce`]).
#[cube]
fn cube_sum(v: f32, #[comptime] planes: bool) -> f32 {
    cube_reduce(v, false, planes)
}

/// Maximum of `v` over the cube ([`cube_reduce`]).
#[cube]
fn cube_max(v: f32, #[comptime] planes: bool) -> f32 {
    cube_reduce(v, true, planes)
}

/// Whether [`cube_reduce`] goes through subgroups on `gpu` (with `allow`; tests turn it off to
/// check the shared-memory tree): the adapter has subgroup operations and every plane size it
/// may pick divides the cube ([`rust3r_gpu::Gpu::plane_sizes_dividing`]).
fn reduce_with_planes(gpu: &rust3r_gpu::Gpu, allow: bool) -> bool {
    allow && gpu.plane_sizes_dividing(UNITS).is_some()
}

/// Values a unit keeps in registers for a row of `cols` ([`UNITS`] units a row), or `None`
/// when the row is too long for that (the kernels then read it again from memory).
fn per_unit(cols: usize) -> Option<usize> {
    let n = cols.div_ceil(UNITS as usize).max(1);
    (n <= MAX_PER_UNIT).then_some(n)
}

/// Longest row a unit keeps in registers: 8 values (rows up to 2048; the network's are 196 to
/// 1024 wide).
const MAX_PER_UNIT: usize = 8;

/// Whether `t` lives on a CubeCL device, where the fused kernels run (elsewhere the callers
/// run the separate operations). Every kernel function below expects it.
pub(crate) fn on_cube<const D: usize>(t: &burn::tensor::Tensor<D>) -> bool {
    matches!(
        t.device().as_dispatch(),
        burn::backend::DispatchDevice::Cube(_)
    )
}

/// A kernel's output: a fresh contiguous tensor of `shape` in `dtype` on `gpu`.
struct Output {
    gpu: rust3r_gpu::Gpu,
    handle: cubecl::server::Handle,
    shape: burn::backend::Shape,
    dtype: burn::backend::DType,
}

impl Output {
    fn new(
        gpu: &rust3r_gpu::Gpu,
        shape: burn::backend::Shape,
        dtype: burn::backend::DType,
    ) -> Self {
        let bytes = (shape.num_elements() * dtype.size()).max(4);
        Output {
            gpu: gpu.clone(),
            handle: gpu.client().empty(bytes),
            shape,
            dtype,
        }
    }

    /// The storage as a typed buffer, for the launch.
    fn buffer<T>(&self) -> GpuBuffer<T> {
        GpuBuffer::from_handle(self.handle.clone(), self.shape.num_elements())
    }

    fn into_tensor(self) -> CubeTensor {
        CubeTensor::new_contiguous(
            self.gpu.client().clone(),
            self.gpu.device().clone(),
            self.shape,
            self.handle,
            self.dtype,
        )
    }
}

/// Runs `$body` with the type `$f` naming the element type of `$dtype`: binary16, bfloat16,
/// or binary32 for anything else.
macro_rules! with_float {
    ($dtype:expr, $f:ident => $body:block) => {
        match $dtype {
            burn::backend::DType::F16 => {
                type $f = half::f16;
                $body
            }
            burn::backend::DType::BF16 => {
                type $f = half::bf16;
                $body
            }
            _ => {
                type $f = f32;
                $body
            }
        }
    };
}
use with_float;

// The tensor's storage as a typed buffer (made contiguous first; its handle keeps the memory
// alive).
use rust3r_gpu::cube_tensor_buffer as buffer;

/// Helpers of the kernels' float64 reference tests.
#[cfg(test)]
mod test_util {
    use burn::tensor::{DType, Device, DeviceKind, Tensor};

    /// The lavapipe (or first) wgpu device.
    pub fn device() -> Device {
        Device::wgpu(DeviceKind::DefaultDevice)
    }

    /// `v` as stored in `dtype` (rounded to binary16 for `F16`), so a reference sees the
    /// values the kernel reads.
    pub fn stored(v: &[f32], dtype: DType) -> Vec<f32> {
        if dtype == DType::F16 {
            v.iter().map(|&x| half::f16::from_f32(x).to_f32()).collect()
        } else {
            v.to_vec()
        }
    }

    /// A device tensor's values in binary32 on the host.
    pub fn host<const D: usize>(t: Tensor<D>) -> Vec<f32> {
        t.cast(DType::F32)
            .into_data()
            .try_to_vec::<f32>()
            .expect("binary32 values")
    }

    /// Prints the default adapter's subgroup sizes (whether the plane reductions run).
    pub fn report_planes() {
        let planes = rust3r_gpu::Gpu::default_device()
            .ok()
            .and_then(|g| g.plane_sizes());
        eprintln!("adapter subgroup sizes: {planes:?}");
    }

    /// Asserts max |got - want| <= tol * max |want|.
    pub fn assert_close(got: &[f32], want: &[f64], tol: f64, what: &str) {
        assert_eq!(got.len(), want.len(), "{what}: length");
        let err = got
            .iter()
            .zip(want)
            .map(|(&g, &w)| (g as f64 - w).abs())
            .fold(0.0, f64::max);
        let top = want.iter().fold(0.0f64, |m, w| m.max(w.abs()));
        assert!(err <= tol * top, "{what}: max |diff| {err} of {top}");
    }

    /// Deterministic test values in about [-1.5, 1.5), plus `offset` on every third run of 97.
    pub fn test_values(n: usize, seed: u32, offset: f32) -> Vec<f32> {
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
}
