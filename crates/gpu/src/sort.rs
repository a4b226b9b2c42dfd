//! Stable least-significant-digit radix sort of `u32` keys with `u32` values.
//!
//! Eight bits per pass (four passes for 32-bit keys). Each pass is three launches: a per-tile
//! 256-bin digit histogram (digit-major), an exclusive scan of each digit's column of tile counts
//! (one cube per digit, which also writes the digit's total), and a scatter in which every tile
//! first sorts its 2048 pairs by the digit in shared memory (two stable 4-bit splits, each ranked
//! with one block-wide scan of 16-bit packed counters) and then writes each pair to its digit's
//! global offset (the scan of the 256 digit totals, done by every tile, plus the tile's column
//! prefix) plus its rank inside the tile, so consecutive pairs of one digit land at consecutive
//! addresses. The local sort's shared arrays are padded by one word in 32 ([`slot`]), which
//! removes its 8-way bank conflicts (scatter 13% faster through Vulkan and 6% through CUDA on
//! the H100, docs/benchmarks/journal.md 2026-11-27). Launches cost the host 11-15 us each (docs/benchmarks/journal.md, 2026-11-27): up to
//! [`COLUMN_SCAN_MAX_TILES`] tiles the column scan replaces a general scan of all the counts
//! that takes three launches; past it the general scan, whose work then outweighs its launches,
//! stays (it was 2-6% faster at 10M keys on the H100).
//! Any length up to `u32::MAX` elements (grids fold into two dimensions).
// `#[cube]` kernels in this file are written the way CubeCL's frontend expands them: `(a + b - 1)
// / b`, `x = x op y`, nested `if`s and float literals (no `div_ceil`, ranges or std constants),
// and with the flat argument lists their launchers pass.
#![allow(
    clippy::manual_div_ceil,
    clippy::assign_op_pattern,
    clippy::collapsible_if,
    clippy::manual_range_contains,
    clippy::excessive_precision,
    clippy::too_many_arguments
)]

use cubecl::prelude::*;

use crate::scan::{block_inclusive_scan_u32, exclusive_scan};
use crate::{BLOCK, Gpu, GpuBuffer, block_id};

const ITEMS: usize = 8;
/// Keys handled by one cube per pass.
pub const TILE: usize = BLOCK as usize * ITEMS;
const RADIX_BITS: u32 = 8;
const BINS: usize = 256;
/// Up to this many tiles (2M keys) a pass scans its counts with [`radix_column_scan`].
pub const COLUMN_SCAN_MAX_TILES: usize = 1024;

#[cube(launch, launch_unchecked)]
fn radix_count(keys: &[u32], counts: &mut [u32], n: u32, shift: u32, num_blocks: u32) {
    let block = block_id();
    let t = UNIT_POS as usize;
    let hist = Shared::<[Atomic<u32>]>::new_slice(256usize);
    hist[t].store(0u32);
    sync_cube();
    let tile_base = block * 2048;
    #[unroll]
    for i in 0..8usize {
        let idx = tile_base + i * 256 + t;
        if idx < n as usize {
            let d = ((keys[idx] >> shift) & 255u32) as usize;
            hist[d].fetch_add(1u32);
        }
    }
    sync_cube();
    counts[t * (num_blocks as usize) + block] = hist[t].load();
}

/// Exclusive scan, in place, of each digit's column of tile counts (`counts[d * num_blocks + b]`)
/// and the columns' totals: cube `d` scans digit `d`'s column, each unit a contiguous run of it.
#[cube(launch, launch_unchecked)]
fn radix_column_scan(counts: &mut [u32], totals: &mut [u32], num_blocks: u32) {
    let d = block_id();
    let t = UNIT_POS as usize;
    let nb = num_blocks as usize;
    let per = (nb + 255usize) / 256usize;
    let base = d * nb;
    let lo = min(t * per, nb);
    let hi = min(lo + per, nb);
    let mut sum = 0u32;
    for i in lo..hi {
        sum += counts[base + i];
    }
    let mut buf = Shared::<[u32]>::new_slice(256usize);
    let (incl, total) = block_inclusive_scan_u32(sum, &mut buf);
    let mut run = incl - sum;
    for i in lo..hi {
        let v = counts[base + i];
        counts[base + i] = run;
        run += v;
    }
    if t == 0 {
        totals[d] = total;
    }
}

/// Shared-memory slot of tile position `i`: one word of padding after every 32, so that a
/// unit reading its own run of 8 consecutive positions (`8t..8t+8`) and a warp reading 32
/// consecutive ones both touch 32 distinct banks. Unpadded, the runs of 8 put 4 units of a
/// warp on each bank: 8-way conflicts on every load and store of the local sort.
#[cube]
fn slot(i: usize) -> usize {
    i + (i >> 5)
}

/// Words of a padded 2048-position shared array.
const PADDED: usize = 2048 + 2048 / 32;

/// One stable split of the 2048 pairs in `sk`/`sv` by the nibble `(key >> bit) & 15`. Unit `t`
/// owns positions `8t..8t+8`; ranks come from one block-wide scan of 16-bit packed counters
/// (`packed[w * 256 + t]` holds the counters of nibbles `2w` and `2w + 1` of unit `t`).
/// Every array is addressed through [`slot`].
#[cube]
fn local_split(sk: &mut [u32], sv: &mut [u32], packed: &mut [u32], seg: &mut [u32], bit: u32) {
    let t = UNIT_POS as usize;
    let mut keys = Array::<u32>::new(8usize);
    let mut vals = Array::<u32>::new(8usize);
    #[unroll]
    for i in 0..8usize {
        keys[i] = sk[slot(t * 8 + i)];
        vals[i] = sv[slot(t * 8 + i)];
    }
    #[unroll]
    for w in 0..8usize {
        packed[slot(w * 256 + t)] = 0u32;
    }
    #[unroll]
    for i in 0..8usize {
        let d = (keys[i] >> bit) & 15u32;
        let w = (d / 2) as usize;
        packed[slot(w * 256 + t)] += 1u32 << ((d % 2) * 16);
    }
    sync_cube();
    // Exclusive scan down each of the 8 columns: unit (w, s) scans rows 8s..8s+8 of column w.
    let w = t / 32;
    let s = t % 32;
    let mut acc = 0u32;
    #[unroll]
    for r in 0..8usize {
        let at = slot(w * 256 + s * 8 + r);
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
        seg[256 + t] = run;
    }
    sync_cube();
    if t == 0 {
        // Nibble starts inside the tile from the column totals (two 16-bit counts each).
        let mut start = 0u32;
        for c in 0..8usize {
            let tot = seg[256 + c];
            seg[264 + 2 * c] = start;
            start += tot & 65535u32;
            seg[265 + 2 * c] = start;
            start += tot >> 16u32;
        }
    }
    let add = seg[w * 32 + s];
    #[unroll]
    for r in 0..8usize {
        packed[slot(w * 256 + s * 8 + r)] += add;
    }
    sync_cube();
    #[unroll]
    for i in 0..8usize {
        let d = (keys[i] >> bit) & 15u32;
        let at = slot(((d / 2) as usize) * 256 + t);
        let sh = (d % 2) * 16;
        let p = packed[at];
        let pos = slot((seg[264 + d as usize] + ((p >> sh) & 65535u32)) as usize);
        sk[pos] = keys[i];
        sv[pos] = vals[i];
        packed[at] = p + (1u32 << sh);
    }
    sync_cube();
}

#[cube(launch, launch_unchecked)]
fn radix_scatter(
    keys_in: &[u32],
    vals_in: &[u32],
    keys_out: &mut [u32],
    vals_out: &mut [u32],
    offsets: &[u32],
    totals: &[u32],
    n: u32,
    shift: u32,
    num_blocks: u32,
    #[comptime] column: bool,
) {
    let block = block_id();
    let t = UNIT_POS as usize;
    let mut sk = Shared::<[u32]>::new_slice(PADDED);
    let mut sv = Shared::<[u32]>::new_slice(PADDED);
    let mut packed = Shared::<[u32]>::new_slice(PADDED);
    let mut seg = Shared::<[u32]>::new_slice(280usize);
    let mut start = Shared::<[u32]>::new_slice(256usize);
    let mut gbase = Shared::<[u32]>::new_slice(256usize);
    let tile_base = block * 2048;
    let valid = min(2048usize, n as usize - tile_base);
    // Pairs past the end get all-ones keys (digit 255) at the tile's end: the stable local
    // sort keeps them behind every real pair, and they are never written.
    #[unroll]
    for i in 0..8usize {
        let j = i * 256 + t;
        let mut k = 4294967295u32;
        let mut v = 0u32;
        if j < valid {
            k = keys_in[tile_base + j];
            v = vals_in[tile_base + j];
        }
        sk[slot(j)] = k;
        sv[slot(j)] = v;
    }
    // Digit t's first output position: after the column scan, the digits below it (a block
    // scan of the digit totals) plus the tiles before this one (`offsets`); after a scan of all
    // the counts, `offsets` holds both. The variant is chosen at compile time: the block scan
    // cost 2-6% at 10M keys when it ran in both.
    if comptime![column] {
        let mut scan_buf = Shared::<[u32]>::new_slice(256usize);
        let total = totals[t];
        let (below, _) = block_inclusive_scan_u32(total, &mut scan_buf);
        gbase[t] = below - total + offsets[t * (num_blocks as usize) + block];
    } else {
        gbase[t] = offsets[t * (num_blocks as usize) + block];
    }
    sync_cube();
    local_split(&mut sk, &mut sv, &mut packed, &mut seg, shift);
    local_split(&mut sk, &mut sv, &mut packed, &mut seg, shift + 4u32);
    // First position of each digit in the sorted tile.
    #[unroll]
    for i in 0..8usize {
        let j = i * 256 + t;
        let d = (sk[slot(j)] >> shift) & 255u32;
        let mut first = j == 0usize;
        if j > 0 {
            first = d != ((sk[slot(j - 1)] >> shift) & 255u32);
        }
        if first {
            start[d as usize] = j as u32;
        }
    }
    sync_cube();
    #[unroll]
    for i in 0..8usize {
        let j = i * 256 + t;
        if j < valid {
            let k = sk[slot(j)];
            let d = ((k >> shift) & 255u32) as usize;
            let pos = (gbase[d] + (j as u32 - start[d])) as usize;
            keys_out[pos] = k;
            vals_out[pos] = sv[slot(j)];
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
    sort_pairs_staged(gpu, keys, values, num_bits, |_| {})
}

/// Stages of a radix pass, in launch order, as [`sort_pairs_staged`] names them.
pub const STAGES: [&str; 3] = ["count", "scan", "scatter"];

/// [`sort_pairs`], calling `after` with the stage's index into [`STAGES`] after each stage of
/// each pass is queued (`rust3r bench sort` synchronises there to time the stages).
pub fn sort_pairs_staged(
    gpu: &Gpu,
    keys: &GpuBuffer<u32>,
    values: &GpuBuffer<u32>,
    num_bits: u32,
    mut after: impl FnMut(usize),
) -> (GpuBuffer<u32>, GpuBuffer<u32>) {
    assert_eq!(
        keys.len(),
        values.len(),
        "sort_pairs: keys and values differ in length"
    );
    let n = keys.len();
    let passes = num_bits.min(32).div_ceil(RADIX_BITS);
    if n <= 1 || passes == 0 {
        return (keys.clone(), values.clone());
    }
    let blocks = n.div_ceil(TILE);
    let counts = gpu.alloc::<u32>(blocks * BINS);
    let totals = gpu.alloc::<u32>(BINS);
    let mut k_src = keys.clone();
    let mut v_src = values.clone();
    let k_a = gpu.alloc::<u32>(n);
    let v_a = gpu.alloc::<u32>(n);
    let k_b = gpu.alloc::<u32>(n);
    let v_b = gpu.alloc::<u32>(n);
    for pass in 0..passes {
        let shift = pass * RADIX_BITS;
        let (k_dst, v_dst) = if pass % 2 == 0 {
            (&k_a, &v_a)
        } else {
            (&k_b, &v_b)
        };
        crate::launch!(
            gpu,
            radix_count(
                gpu.client(),
                gpu.grid(blocks),
                CubeDim::new_1d(BLOCK),
                k_src.arg(),
                counts.arg(),
                n as u32,
                shift,
                blocks as u32,
            )
        );
        after(0);
        let column = blocks <= COLUMN_SCAN_MAX_TILES;
        let offsets = if column {
            crate::launch!(
                gpu,
                radix_column_scan(
                    gpu.client(),
                    gpu.grid(BINS),
                    CubeDim::new_1d(BLOCK),
                    counts.arg(),
                    totals.arg(),
                    blocks as u32,
                )
            );
            counts.clone()
        } else {
            exclusive_scan(gpu, &counts)
        };
        after(1);
        crate::launch!(
            gpu,
            radix_scatter(
                gpu.client(),
                gpu.grid(blocks),
                CubeDim::new_1d(BLOCK),
                k_src.arg(),
                v_src.arg(),
                k_dst.arg(),
                v_dst.arg(),
                offsets.arg(),
                totals.arg(),
                n as u32,
                shift,
                blocks as u32,
                column,
            )
        );
        after(2);
        k_src = k_dst.clone();
        v_src = v_dst.clone();
    }
    (k_src, v_src)
}

/// Number of bits needed to represent every value in `0..=max_value`.
pub fn bits_for(max_value: u32) -> u32 {
    32 - max_value.leading_zeros()
}
