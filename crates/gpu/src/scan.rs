//! Exclusive and inclusive prefix sums of `u32` of any length.
//!
//! Three phases (reduce-then-scan): every cube scans a tile of `TILE` elements
//! and emits the tile total, the totals are scanned recursively, and the
//! scanned totals are added back to each tile. The first phase can read its input through a
//! transform ([`exclusive_scan_nonzero`], [`exclusive_scan_gathered`]), which saves the launch
//! and the memory pass of materialising the transformed input (a launch costs the host 11-15 us
//! on the H100, docs/benchmarks/journal.md 2026-11-27).

use cubecl::prelude::*;

use crate::{BLOCK, Gpu, GpuBuffer, block_id};

const ITEMS: u32 = 4;
/// Elements scanned by one cube.
pub const TILE: usize = (BLOCK * ITEMS) as usize;

/// Block-wide inclusive scan of one value per unit (Hillis-Steele in shared
/// memory). Every unit of the cube must call it. Returns (inclusive, total).
#[cube]
pub fn block_inclusive_scan_u32(value: u32, buf: &mut [u32]) -> (u32, u32) {
    let t = UNIT_POS as usize;
    let n = CUBE_DIM as usize;
    buf[t] = value;
    sync_cube();
    let mut offset = 1usize;
    let mut acc = value;
    while offset < n {
        let mut add = 0u32;
        if t >= offset {
            add = buf[t - offset];
        }
        sync_cube();
        acc += add;
        buf[t] = acc;
        sync_cube();
        offset *= 2;
    }
    let total = buf[n - 1];
    sync_cube();
    (acc, total)
}

/// How [`scan_tiles`] reads element `i`: `input[i]`, `input[i] != 0` (as 0 or 1), or
/// `input[index[i]]`.
const READ_PLAIN: u32 = 0;
const READ_NONZERO: u32 = 1;
const READ_GATHERED: u32 = 2;

#[cube(launch, launch_unchecked)]
fn scan_tiles(
    input: &[u32],
    index: &[u32],
    output: &mut [u32],
    tile_sums: &mut [u32],
    n: u32,
    #[comptime] inclusive: bool,
    #[comptime] read: u32,
) {
    let block = block_id();
    let t = UNIT_POS as usize;
    let n = n as usize;
    let base = block * (CUBE_DIM as usize) * 4 + t * 4;
    let mut vals = Array::<u32>::new(4usize);
    let mut local = 0u32;
    #[unroll]
    for i in 0..4 {
        let idx = base + i;
        let mut v = 0u32;
        if idx < n {
            if comptime![read == READ_GATHERED] {
                v = input[index[idx] as usize];
            } else {
                v = input[idx];
            }
            if comptime![read == READ_NONZERO] {
                v = select(v != 0u32, 1u32, 0u32);
            }
        }
        vals[i] = v;
        local += v;
    }
    let mut smem = Shared::<[u32]>::new_slice(256usize);
    let (incl, total) = block_inclusive_scan_u32(local, &mut smem);
    let mut run = incl - local;
    #[unroll]
    for i in 0..4 {
        let idx = base + i;
        let v = vals[i];
        if comptime![inclusive] {
            run += v;
            if idx < n {
                output[idx] = run;
            }
        } else {
            if idx < n {
                output[idx] = run;
            }
            run += v;
        }
    }
    if t == 0 {
        tile_sums[block] = total;
    }
}

#[cube(launch, launch_unchecked)]
fn add_tile_offsets(output: &mut [u32], offsets: &[u32], n: u32) {
    let block = block_id();
    let base = block * (CUBE_DIM as usize) * 4 + (UNIT_POS as usize) * 4;
    let off = offsets[block];
    #[unroll]
    for i in 0..4 {
        let idx = base + i;
        if idx < n as usize {
            output[idx] += off;
        }
    }
}

fn scan_impl(gpu: &Gpu, input: &GpuBuffer<u32>, inclusive: bool) -> GpuBuffer<u32> {
    scan_read(gpu, input, None, input.len(), inclusive, READ_PLAIN)
}

/// Scan of `n` elements of `input` read as `read` says (`index` for [`READ_GATHERED`]).
fn scan_read(
    gpu: &Gpu,
    input: &GpuBuffer<u32>,
    index: Option<&GpuBuffer<u32>>,
    n: usize,
    inclusive: bool,
    read: u32,
) -> GpuBuffer<u32> {
    let output = gpu.alloc::<u32>(n);
    if n == 0 {
        return output;
    }
    let blocks = n.div_ceil(TILE);
    let tile_sums = gpu.alloc::<u32>(blocks);
    crate::launch!(
        gpu,
        scan_tiles(
            gpu.client(),
            gpu.grid(blocks),
            CubeDim::new_1d(BLOCK),
            input.arg(),
            // Unread unless gathered: any buffer binds.
            index.unwrap_or(input).arg(),
            output.arg(),
            tile_sums.arg(),
            n as u32,
            inclusive,
            read,
        )
    );
    if blocks > 1 {
        let offsets = scan_impl(gpu, &tile_sums, false);
        crate::launch!(
            gpu,
            add_tile_offsets(
                gpu.client(),
                gpu.grid(blocks),
                CubeDim::new_1d(BLOCK),
                output.arg(),
                offsets.arg(),
                n as u32,
            )
        );
    }
    output
}

/// `out[i] = sum(input[..i])`. Sums wrap on overflow (u32 arithmetic).
pub fn exclusive_scan(gpu: &Gpu, input: &GpuBuffer<u32>) -> GpuBuffer<u32> {
    scan_impl(gpu, input, false)
}

/// `out[i] = sum(input[..=i])`.
pub fn inclusive_scan(gpu: &Gpu, input: &GpuBuffer<u32>) -> GpuBuffer<u32> {
    scan_impl(gpu, input, true)
}

/// `out[i]` = how many of `input[..i]` are non-zero (the output positions of a stream
/// compaction), without materialising the 0/1 mask.
pub fn exclusive_scan_nonzero(gpu: &Gpu, input: &GpuBuffer<u32>) -> GpuBuffer<u32> {
    scan_read(gpu, input, None, input.len(), false, READ_NONZERO)
}

/// `out[i] = sum(values[index[..i]])`, one output per index, without materialising the
/// gathered values. Every index must be below `values.len()`.
pub fn exclusive_scan_gathered(
    gpu: &Gpu,
    values: &GpuBuffer<u32>,
    index: &GpuBuffer<u32>,
) -> GpuBuffer<u32> {
    scan_read(gpu, values, Some(index), index.len(), false, READ_GATHERED)
}
