//! Index utilities: `iota`, `gather`, and row-wise scatter / zeroing through an index.

use cubecl::prelude::*;

use crate::{Gpu, GpuBuffer};

#[cube(launch)]
fn iota_kernel(out: &mut [u32], n: u32) {
    let i = crate::global_id();
    if i < n as usize {
        out[i] = i as u32;
    }
}

#[cube(launch, launch_unchecked)]
fn gather_kernel(src: &[u32], index: &[u32], out: &mut [u32], n: u32) {
    let i = crate::global_id();
    if i < n as usize {
        out[i] = src[index[i] as usize];
    }
}

/// `[0, 1, .., n-1]`.
pub fn iota(gpu: &Gpu, n: usize) -> GpuBuffer<u32> {
    let out = gpu.alloc::<u32>(n);
    if n > 0 {
        iota_kernel::launch(
            gpu.client(),
            gpu.grid_1d(n),
            crate::BLOCK_DIM,
            out.arg(),
            n as u32,
        );
    }
    out
}

/// `out[i] = src[index[i]]` for 32-bit elements.
pub fn gather<T: bytemuck::Pod>(
    gpu: &Gpu,
    src: &GpuBuffer<T>,
    index: &GpuBuffer<u32>,
) -> GpuBuffer<T> {
    assert_eq!(
        std::mem::size_of::<T>(),
        4,
        "gather works on 32-bit elements"
    );
    let n = index.len();
    let out = gpu.alloc::<u32>(n);
    if n > 0 {
        crate::launch!(
            gpu,
            gather_kernel(
                gpu.client(),
                gpu.grid_1d(n),
                crate::BLOCK_DIM,
                src.clone().cast::<u32>().arg(),
                index.arg(),
                out.arg(),
                n as u32,
            )
        );
    }
    out.cast::<T>()
}

#[cube(launch)]
fn scatter_rows_kernel(dst: &mut [f32], index: &[u32], values: &[f32], n: u32, row: u32) {
    let i = crate::global_id();
    let r = row as usize;
    if i >= (n as usize) * r {
        terminate!();
    }
    let j = i / r;
    let k = i - j * r;
    dst[(index[j] as usize) * r + k] = values[i];
}

#[cube(launch)]
fn zero_rows_kernel(dst: &mut [f32], index: &[u32], n: u32, row: u32) {
    let i = crate::global_id();
    let r = row as usize;
    if i >= (n as usize) * r {
        terminate!();
    }
    let j = i / r;
    let k = i - j * r;
    dst[(index[j] as usize) * r + k] = 0.0f32;
}

/// `dst[index[j]] = values[j]` row-wise (rows of `row` floats; `index` holds distinct rows).
pub fn scatter_rows(
    gpu: &Gpu,
    dst: &GpuBuffer<f32>,
    index: &GpuBuffer<u32>,
    values: &GpuBuffer<f32>,
    row: usize,
) {
    let n = index.len();
    assert_eq!(values.len(), n * row, "scatter values");
    if n > 0 {
        scatter_rows_kernel::launch(
            gpu.client(),
            gpu.grid_1d(n * row),
            crate::BLOCK_DIM,
            dst.arg(),
            index.arg(),
            values.arg(),
            n as u32,
            row as u32,
        );
    }
}

/// `dst[index[j]] = 0` row-wise (rows of `row` floats).
pub fn zero_rows(gpu: &Gpu, dst: &GpuBuffer<f32>, index: &GpuBuffer<u32>, row: usize) {
    let n = index.len();
    if n > 0 {
        zero_rows_kernel::launch(
            gpu.client(),
            gpu.grid_1d(n * row),
            crate::BLOCK_DIM,
            dst.arg(),
            index.arg(),
            n as u32,
            row as u32,
        );
    }
}
