//! Index utilities: `iota` and `gather`.

use cubecl::prelude::*;

use crate::{BLOCK, Gpu, GpuBuffer};

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
            gpu.grid(n.div_ceil(BLOCK as usize)),
            CubeDim::new_1d(BLOCK),
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
                gpu.grid(n.div_ceil(BLOCK as usize)),
                CubeDim::new_1d(BLOCK),
                src.clone().cast::<u32>().arg(),
                index.arg(),
                out.arg(),
                n as u32,
            )
        );
    }
    out.cast::<T>()
}
