//! Stream compaction: the indices of the set entries of a `u32` mask, in order (optionally with
//! one value each, carried along in the same pass).

use cubecl::prelude::*;

use crate::scan::exclusive_scan_nonzero;
use crate::{Gpu, GpuBuffer, GpuError};

/// Set entry `i` goes to `out[positions[i]] = i` and, `with_values`, `out_values[positions[i]] =
/// values[i]` (`values` and `out_values` are unused placeholders otherwise).
#[cube(launch, launch_unchecked)]
fn scatter_set_indices(
    mask: &[u32],
    positions: &[u32],
    values: &[u32],
    out: &mut [u32],
    out_values: &mut [u32],
    n: u32,
    #[comptime] with_values: bool,
) {
    let i = crate::global_id();
    if i < n as usize && mask[i] != 0u32 {
        let p = positions[i] as usize;
        out[p] = i as u32;
        if with_values {
            out_values[p] = values[i];
        }
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
    let positions = exclusive_scan_nonzero(gpu, mask);
    let last_pos = gpu.read_at(&positions, n - 1)?;
    let last_set = gpu.read_at(mask, n - 1)? != 0;
    let count = last_pos as usize + usize::from(last_set);
    Ok(scatter_indices(gpu, mask, &positions, count))
}

/// The scatter half of [`compact_indices`], for callers that learn `count` another way (e.g.
/// together with other totals in one read-back): the indices `i` with `mask[i] != 0`, given
/// `positions = exclusive_scan_nonzero(mask)` and `count` set entries.
pub fn scatter_indices(
    gpu: &Gpu,
    mask: &GpuBuffer<u32>,
    positions: &GpuBuffer<u32>,
    count: usize,
) -> GpuBuffer<u32> {
    scatter(gpu, mask, positions, None, count).0
}

/// [`scatter_indices`], and `values[i]` of each set entry beside its index (the same order), in
/// one pass instead of compacting the indices and then gathering the values through them.
pub fn scatter_indices_with_values(
    gpu: &Gpu,
    mask: &GpuBuffer<u32>,
    positions: &GpuBuffer<u32>,
    values: &GpuBuffer<u32>,
    count: usize,
) -> (GpuBuffer<u32>, GpuBuffer<u32>) {
    assert_eq!(
        values.len(),
        mask.len(),
        "scatter_indices_with_values: values and mask differ in length"
    );
    let (ids, vals) = scatter(gpu, mask, positions, Some(values), count);
    (ids, vals.expect("values were given"))
}

fn scatter(
    gpu: &Gpu,
    mask: &GpuBuffer<u32>,
    positions: &GpuBuffer<u32>,
    values: Option<&GpuBuffer<u32>>,
    count: usize,
) -> (GpuBuffer<u32>, Option<GpuBuffer<u32>>) {
    let n = mask.len();
    let out = gpu.alloc::<u32>(count);
    let out_values = values.map(|_| gpu.alloc::<u32>(count));
    if count > 0 {
        // Placeholder slots 0 and 1: the two bindings unused without values.
        let (in_arg, out_arg) = match (values, &out_values) {
            (Some(v), Some(o)) => (v.clone(), o.clone()),
            _ => (gpu.placeholder::<u32>(0), gpu.placeholder::<u32>(1)),
        };
        crate::launch!(
            gpu,
            scatter_set_indices(
                gpu.client(),
                gpu.grid_1d(n),
                crate::BLOCK_DIM,
                mask.arg(),
                positions.arg(),
                in_arg.arg(),
                out.arg(),
                out_arg.arg(),
                n as u32,
                values.is_some(),
            )
        );
    }
    (out, out_values)
}
