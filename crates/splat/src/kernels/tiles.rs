//! Tile binning: one intersection per (Gaussian, touched tile), then the
//! per-tile ranges of the tile-sorted intersection list.

use cubecl::prelude::*;

/// For every depth-sorted visible Gaussian `i`, write its intersections at
/// `offsets[i]..`: the tile id (row-major over 16x16 tiles) and the Gaussian id.
///
/// One thread per Gaussian looping over its tiles leaves a warp waiting on its largest
/// Gaussian and stores to 32 scattered places per instruction. Instead each cube takes 256
/// consecutive Gaussians, whose intersections are one contiguous run, and its units write that
/// run together: position `p` finds its Gaussian by binary search over the cube's offsets in
/// shared memory and its tile from its rank inside the Gaussian's tile rectangle.
#[cube(launch, launch_unchecked)]
pub fn emit_intersections(
    sorted_ids: &[u32],
    offsets: &[u32],
    rects: &[u32],
    isect_tiles: &mut [u32],
    isect_gids: &mut [u32],
    num_visible: u32,
    tiles_x: u32,
) {
    let t = UNIT_POS as usize;
    let first = rust3r_gpu::block_id() * 256;
    // s_start[j]: first position of the cube's Gaussian j (all ones past the last Gaussian);
    // s_start[256]: one past the cube's last position.
    let mut s_start = Shared::<[u32]>::new_slice(257usize);
    let mut s_rect = Shared::<[u32]>::new_slice(512usize);
    let mut s_gid = Shared::<[u32]>::new_slice(256usize);
    let n = num_visible as usize;
    let i = first + t;
    if i < n {
        let g = sorted_ids[i];
        let rx = rects[g as usize * 2];
        let ry = rects[g as usize * 2 + 1];
        let start = offsets[i];
        s_start[t] = start;
        s_rect[t * 2] = rx;
        s_rect[t * 2 + 1] = ry;
        s_gid[t] = g;
        if t == 255 || i + 1 == n {
            let count = ((rx >> 16u32) - (rx & 65535u32)) * ((ry >> 16u32) - (ry & 65535u32));
            s_start[256] = start + count;
        }
    } else {
        s_start[t] = 4294967295u32;
    }
    sync_cube();
    if first >= n {
        terminate!();
    }
    let begin = s_start[0];
    let end = s_start[256];
    let rounds = (end - begin).div_ceil(256u32);
    for r in 0..rounds {
        let p = begin + r * 256u32 + t as u32;
        if p < end {
            // Largest j with s_start[j] <= p (s_start[0] = begin <= p).
            let mut j = 0u32;
            #[unroll]
            for b in 0..8u32 {
                let step = comptime![128u32 >> b];
                if s_start[(j + step) as usize] <= p {
                    j += step;
                }
            }
            let ju = j as usize;
            let rx = s_rect[ju * 2];
            let ry = s_rect[ju * 2 + 1];
            let x0 = rx & 65535u32;
            let w = (rx >> 16u32) - x0;
            let y0 = ry & 65535u32;
            let local = p - s_start[ju];
            let ty = y0 + local / w;
            let tx = x0 + local % w;
            isect_tiles[p as usize] = ty * tiles_x + tx;
            isect_gids[p as usize] = s_gid[ju];
        }
    }
}

/// `ranges[2t], ranges[2t+1]` = first and one-past-last position of tile `t`
/// in the sorted list (`n >= 1` intersections). An empty tile gets the position where it would
/// start, so the starts never decrease with the tile index (the backward pass searches them).
/// Every entry is written.
#[cube(launch, launch_unchecked)]
pub fn tile_ranges(sorted_tiles: &[u32], ranges: &mut [u32], n: u32, num_tiles: u32) {
    let s = rust3r_gpu::global_id();
    let n = n as usize;
    if s >= n {
        terminate!();
    }
    let tile = sorted_tiles[s] as usize;
    if s == 0 {
        for e in 0..tile {
            ranges[e * 2] = 0u32;
            ranges[e * 2 + 1] = 0u32;
        }
        ranges[tile * 2] = 0u32;
    }
    if s > 0 {
        let prev = sorted_tiles[s - 1] as usize;
        if prev != tile {
            ranges[prev * 2 + 1] = s as u32;
            for e in prev + 1..tile {
                ranges[e * 2] = s as u32;
                ranges[e * 2 + 1] = s as u32;
            }
            ranges[tile * 2] = s as u32;
        }
    }
    if s == n - 1 {
        ranges[tile * 2 + 1] = n as u32;
        for e in tile + 1..num_tiles as usize {
            ranges[e * 2] = n as u32;
            ranges[e * 2 + 1] = n as u32;
        }
    }
}

/// Per-Gaussian sum of its intersections' gradient rows (10 floats each; with `absgrad` also
/// the 2-float rows of `isect_abs` into `v_abs`).
/// Rows of depth-sorted visible Gaussian `i` are `offsets[i]..offsets[i]+count`.
#[cube(launch, launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn sum_isect_grads(
    sorted_ids: &[u32],
    offsets: &[u32],
    tiles_touched: &[u32],
    isect_grads: &[f32],
    v_proj: &mut [f32],
    isect_abs: &[f32],
    v_abs: &mut [f32],
    num_visible: u32,
    #[comptime] absgrad: bool,
) {
    let i = rust3r_gpu::global_id();
    if i >= num_visible as usize {
        terminate!();
    }
    let g = sorted_ids[i] as usize;
    let start = offsets[i] as usize;
    let count = tiles_touched[g] as usize;
    // Ten scalar accumulators (registers), one write per value.
    let mut a0 = 0.0f32;
    let mut a1 = 0.0f32;
    let mut a2 = 0.0f32;
    let mut a3 = 0.0f32;
    let mut a4 = 0.0f32;
    let mut a5 = 0.0f32;
    let mut a6 = 0.0f32;
    let mut a7 = 0.0f32;
    let mut a8 = 0.0f32;
    let mut a9 = 0.0f32;
    let mut b0 = 0.0f32;
    let mut b1 = 0.0f32;
    for r in start..start + count {
        if absgrad {
            b0 += isect_abs[r * 2];
            b1 += isect_abs[r * 2 + 1];
        }
        let b = r * 10;
        a0 += isect_grads[b];
        a1 += isect_grads[b + 1];
        a2 += isect_grads[b + 2];
        a3 += isect_grads[b + 3];
        a4 += isect_grads[b + 4];
        a5 += isect_grads[b + 5];
        a6 += isect_grads[b + 6];
        a7 += isect_grads[b + 7];
        a8 += isect_grads[b + 8];
        a9 += isect_grads[b + 9];
    }
    let o = g * 10;
    v_proj[o] = a0;
    v_proj[o + 1] = a1;
    v_proj[o + 2] = a2;
    v_proj[o + 3] = a3;
    v_proj[o + 4] = a4;
    v_proj[o + 5] = a5;
    v_proj[o + 6] = a6;
    v_proj[o + 7] = a7;
    v_proj[o + 8] = a8;
    v_proj[o + 9] = a9;
    if absgrad {
        v_abs[g * 2] = b0;
        v_abs[g * 2 + 1] = b1;
    }
}

/// One read-back's worth of totals: `out[0]` = visible Gaussians (`positions[n-1]` of the
/// exclusive scan of the visibility flags, plus the last Gaussian's flag), `out[1]` = tile
/// intersections (`isect_total[0]`).
#[cube(launch, launch_unchecked)]
pub fn visible_totals(
    tiles_touched: &[u32],
    positions: &[u32],
    isect_total: &[u32],
    out: &mut [u32],
    n: u32,
) {
    if UNIT_POS == 0 {
        let n = n as usize;
        out[0] = positions[n - 1] + select(tiles_touched[n - 1] != 0u32, 1u32, 0u32);
        out[1] = isect_total[0];
    }
}

/// `lengths[t] = ranges[2t+1] - ranges[2t]`.
#[cube(launch, launch_unchecked)]
pub fn tile_lengths(ranges: &[u32], lengths: &mut [u32], num_tiles: u32) {
    let t = rust3r_gpu::global_id();
    if t < num_tiles as usize {
        lengths[t] = ranges[t * 2 + 1] - ranges[t * 2];
    }
}
