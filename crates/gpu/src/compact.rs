//! Stream compaction: the indices of the set entries of a `u32` mask, in order.

use cubecl::prelude::*;

use crate::scan::exclusive_scan;
use crate::{BLOCK, Gpu, GpuBuffer, GpuError};

#[cube(launch, launch_unchecked)]
fn scatter_set_indices(mask: &[u32], positions: &[u32], out: &mut [u32], n: u32) {
    let i = crate::global_id();
    if i < n as usize && mask[i] != 0u32 {
        out[positions[i] as usize] = i as u32;
    }
}

/// Indices `i` with `mask[i] != 0`, in increasing order, and their count.
/// Any non-zero mask value counts as set (masks are `u32` because WGSL has no
/// `bool` storage buffers).
pub fn compact_indices(gpu: &Gpu, mask: &GpuBuffer<u32>) -> Result<GpuBuffer<u32>, GpuError> {
    let n = mask.len();
    if n == 0 {
        return Ok(gpu.alloc::<u32>(0));
    }
    let normalized = crate::reduce::to_unit_mask(gpu, mask);
    let positions = exclusive_scan(gpu, &normalized);
    let last_pos = gpu.read_at(&positions, n - 1)?;
    let last_flag = gpu.read_at(&normalized, n - 1)?;
    let count = (last_pos + last_flag) as usize;
    Ok(scatter_indices(gpu, mask, &positions, count))
}

/// The scatter half of [`compact_indices`], for callers that learn `count` another way (e.g.
/// together with other totals in one read-back): the indices `i` with `mask[i] != 0`, given
/// `positions = exclusive_scan(to_unit_mask(mask))` and `count` set entries.
pub fn scatter_indices(gpu: &Gpu, mask: &GpuBuffer<u32>, positions: &GpuBuffer<u32>, count: usize) -> GpuBuffer<u32> {
    let n = mask.len();
    let out = gpu.alloc::<u32>(count);
    if count > 0 {
        crate::launch!(scatter_set_indices(
            gpu.client(),
            gpu.grid(n.div_ceil(BLOCK as usize)),
            CubeDim::new_1d(BLOCK),
            mask.arg(),
            positions.arg(),
            out.arg(),
            n as u32,
        ));
    }
    out
}
