//! Stable least-significant-digit radix sort of `u32` keys with `u32` values.
//!
//! Four bits per pass. Each pass is three launches: a per-tile digit histogram,
//! an exclusive scan of the histograms (digit-major, so the scan yields global
//! output offsets), and a scatter in which every tile computes stable local
//! ranks with one block-wide scan of 16-bit packed digit counters.
//! Any length up to `u32::MAX` elements (grids fold into two dimensions).

use cubecl::prelude::*;

use crate::scan::exclusive_scan;
use crate::{BLOCK, Gpu, GpuBuffer, block_id};

const ITEMS: usize = 8;
/// Keys handled by one cube per pass.
pub const TILE: usize = BLOCK as usize * ITEMS;
const RADIX_BITS: u32 = 4;
const BINS: usize = 16;

#[cube(launch)]
fn radix_count(keys: &[u32], counts: &mut [u32], n: u32, shift: u32, num_blocks: u32) {
    let block = block_id();
    let t = UNIT_POS as usize;
    let hist = Shared::<[Atomic<u32>]>::new_slice(16usize);
    if t < 16 {
        hist[t].store(0u32);
    }
    sync_cube();
    let tile_base = block * 2048;
    #[unroll]
    for i in 0..8usize {
        let idx = tile_base + i * 256 + t;
        if idx < n as usize {
            let d = ((keys[idx] >> shift) & 15u32) as usize;
            hist[d].fetch_add(1u32);
        }
    }
    sync_cube();
    if t < 16 {
        counts[t * (num_blocks as usize) + block] = hist[t].load();
    }
}

#[cube(launch)]
fn radix_scatter(
    keys_in: &[u32],
    vals_in: &[u32],
    keys_out: &mut [u32],
    vals_out: &mut [u32],
    offsets: &[u32],
    n: u32,
    shift: u32,
    num_blocks: u32,
) {
    let block = block_id();
    let t = UNIT_POS as usize;
    let n = n as usize;
    // packed[w * 256 + t]: digit counters 2w (low 16 bits) and 2w+1 (high 16 bits) of unit t.
    let mut packed = Shared::<[u32]>::new_slice(2048usize);
    let mut seg = Shared::<[u32]>::new_slice(256usize);
    let mut gbase = Shared::<[u32]>::new_slice(16usize);
    #[unroll]
    for w in 0..8usize {
        packed[w * 256 + t] = 0u32;
    }
    let base = block * 2048 + t * 8;
    #[unroll]
    for i in 0..8usize {
        let idx = base + i;
        if idx < n {
            let d = (keys_in[idx] >> shift) & 15u32;
            let w = (d / 2) as usize;
            packed[w * 256 + t] += 1u32 << ((d % 2) * 16);
        }
    }
    if t < 16 {
        gbase[t] = offsets[t * (num_blocks as usize) + block];
    }
    sync_cube();
    // Exclusive scan down each of the 8 columns: unit (w, s) scans rows 8s..8s+8 of column w.
    let w = t / 32;
    let s = t % 32;
    let mut acc = 0u32;
    #[unroll]
    for r in 0..8usize {
        let at = w * 256 + s * 8 + r;
        let v = packed[at];
        packed[at] = acc;
        acc += v;
    }
    seg[w * 32 + s] = acc;
    sync_cube();
    if t < 8 {
        let mut run = 0u32;
        for k in 0..32usize {
            let v = seg[t * 32 + k];
            seg[t * 32 + k] = run;
            run += v;
        }
    }
    sync_cube();
    let add = seg[w * 32 + s];
    #[unroll]
    for r in 0..8usize {
        packed[w * 256 + s * 8 + r] += add;
    }
    sync_cube();
    #[unroll]
    for i in 0..8usize {
        let idx = base + i;
        if idx < n {
            let key = keys_in[idx];
            let d = (key >> shift) & 15u32;
            let at = ((d / 2) as usize) * 256 + t;
            let sh = (d % 2) * 16;
            let p = packed[at];
            let pos = (gbase[d as usize] + ((p >> sh) & 65535u32)) as usize;
            keys_out[pos] = key;
            vals_out[pos] = vals_in[idx];
            packed[at] = p + (1u32 << sh);
        }
    }
}

/// Sort `(keys, values)` by the low `num_bits` bits of the keys, stably.
/// Bits above `num_bits` must be zero for the result to be fully sorted.
pub fn sort_pairs(
    gpu: &Gpu,
    keys: &GpuBuffer<u32>,
    values: &GpuBuffer<u32>,
    num_bits: u32,
) -> (GpuBuffer<u32>, GpuBuffer<u32>) {
    assert_eq!(keys.len(), values.len(), "sort_pairs: keys and values differ in length");
    let n = keys.len();
    let passes = num_bits.min(32).div_ceil(RADIX_BITS);
    if n <= 1 || passes == 0 {
        return (keys.clone(), values.clone());
    }
    let blocks = n.div_ceil(TILE);
    let counts = gpu.alloc::<u32>(blocks * BINS);
    let mut k_src = keys.clone();
    let mut v_src = values.clone();
    let k_a = gpu.alloc::<u32>(n);
    let v_a = gpu.alloc::<u32>(n);
    let k_b = gpu.alloc::<u32>(n);
    let v_b = gpu.alloc::<u32>(n);
    for pass in 0..passes {
        let shift = pass * RADIX_BITS;
        let (k_dst, v_dst) = if pass % 2 == 0 { (&k_a, &v_a) } else { (&k_b, &v_b) };
        radix_count::launch(
            gpu.client(),
            gpu.grid(blocks),
            CubeDim::new_1d(BLOCK),
            k_src.arg(),
            counts.arg(),
            n as u32,
            shift,
            blocks as u32,
        );
        let offsets = exclusive_scan(gpu, &counts);
        radix_scatter::launch(
            gpu.client(),
            gpu.grid(blocks),
            CubeDim::new_1d(BLOCK),
            k_src.arg(),
            v_src.arg(),
            k_dst.arg(),
            v_dst.arg(),
            offsets.arg(),
            n as u32,
            shift,
            blocks as u32,
        );
        k_src = k_dst.clone();
        v_src = v_dst.clone();
    }
    (k_src, v_src)
}

/// Number of bits needed to represent every value in `0..=max_value`.
pub fn bits_for(max_value: u32) -> u32 {
    32 - max_value.leading_zeros()
}
