//! Tile rasterizer: front-to-back alpha blending per 16x16 tile, and its
//! backward pass. Forward: one cube per tile, one unit per pixel; it saves the
//! blend state every `chunk` intersections of a tile (checkpoints).
//!
//! Backward: one cube per chunk of a tile's intersections (up to the tile's last
//! contributor), starting from the checkpoint at the chunk's end, so that dense
//! tiles are spread over many cubes. Each cube walks its chunk back to front in batches of
//! `B`. Phase A (unit = pixel) computes dL/dalpha and the blend weight of every
//! (Gaussian, pixel) pair of the batch into shared memory; phase B (units =
//! Gaussian x pixel group) turns them into per-Gaussian gradients and reduces
//! them in shared memory. Each chunk writes one gradient row per intersection,
//! so no float atomics are needed (WGSL has none) and results are
//! deterministic run to run.
// `#[cube]` kernels in this file are written the way CubeCL's frontend expands them: `(a + b - 1)
// / b`, `x = x op y`, nested `if`s and float literals (no `div_ceil`, ranges or std constants).
#![allow(
    clippy::manual_div_ceil,
    clippy::assign_op_pattern,
    clippy::collapsible_if,
    clippy::manual_range_contains,
    clippy::excessive_precision
)]

use cubecl::prelude::*;

pub const ALPHA_MAX: f32 = 0.99;
pub const T_MIN: f32 = 1e-4;
/// Floats of one forward checkpoint: the front-to-back blend state (transmittance, colour,
/// depth) of the tile's 256 pixels, component-major.
pub const CHECKPOINT: usize = 5 * 256;

/// Squared vertical reach of a projected Gaussian (conic `a, b, c`, opacity `op`): pixels whose
/// row centre is farther than this from the mean have alpha below 1/255 whatever their column
/// (the largest |dy| with `0.5 (a dx^2 + c dy^2) + b dx dy <= ln(255 op)` is
/// `sqrt(2 ln(255 op) a / (a c - b^2))`). Widened by 1% and 0.01 px^2 against rounding;
/// 3e38 (no limit) for a degenerate conic; negative when no pixel can take the Gaussian.
#[cube]
pub fn row_reach2(a: f32, b: f32, c: f32, op: f32) -> f32 {
    let det = a * c - b * b;
    let tau = (255.0f32 * op).ln();
    let mut r = 3.0e38f32;
    if det > 0.0f32 && a > 0.0f32 {
        r = 2.02f32 * tau * a / det + 0.01f32;
    }
    r
}

/// A Gaussian's projected row as three 4-vectors (the layout of the rasterizers' shared
/// memory): position, row reach^2 and opacity; conic and depth; colour. One 16-byte broadcast
/// load then serves each step of the blend loops, where scalar rows took up to ten.
#[derive(CubeType, Clone, Copy)]
struct Staged {
    /// (x, y, row reach^2, opacity); the reach is 3e38 unless `row_skip`.
    pos: Vector<f32, Const<4>>,
    /// (a, b, c, depth).
    conic: Vector<f32, Const<4>>,
    /// (r, g, b, 0).
    rgb: Vector<f32, Const<4>>,
}

/// Gaussian `gid`'s row of `proj` (10 floats: x, y, a, b, c, depth, opacity, r, g, b) as a
/// [`Staged`] triple.
#[cube]
fn stage(proj: &[f32], gid: usize, #[comptime] row_skip: bool) -> Staged {
    let o = gid * 10;
    let ca = proj[o + 2];
    let cb = proj[o + 3];
    let cc = proj[o + 4];
    let op = proj[o + 6];
    let mut reach = 3.0e38f32;
    if row_skip {
        reach = row_reach2(ca, cb, cc, op);
    }
    let mut pos = Vector::<f32, Const<4>>::empty();
    pos.insert(0usize, proj[o]);
    pos.insert(1usize, proj[o + 1]);
    pos.insert(2usize, reach);
    pos.insert(3usize, op);
    let mut conic = Vector::<f32, Const<4>>::empty();
    conic.insert(0usize, ca);
    conic.insert(1usize, cb);
    conic.insert(2usize, cc);
    conic.insert(3usize, proj[o + 5]);
    let mut rgb = Vector::<f32, Const<4>>::empty();
    rgb.insert(0usize, proj[o + 7]);
    rgb.insert(1usize, proj[o + 8]);
    rgb.insert(2usize, proj[o + 9]);
    rgb.insert(3usize, 0.0f32);
    Staged { pos, conic, rgb }
}

/// The launch arguments [`rasterize_forward`] reads, in binding order: the tile lists and
/// projected Gaussians it blends, and the sizes and batch range of the dispatch. What it writes
/// is [`ForwardOutputs`], bound after these.
#[derive(CubeType, CubeLaunch)]
pub struct ForwardArgs {
    /// Per tile, its first and one-past-last intersection.
    pub ranges: Box<[u32]>,
    /// Gaussian of each tile-sorted intersection.
    pub sorted_gids: Box<[u32]>,
    /// Projected Gaussians ([`super::project::PROJ`] floats each).
    pub proj: Box<[f32]>,
    /// The camera block ([`crate::camera::CAM_LEN`] floats; the background at 19..22).
    pub cam: Box<[f32]>,
    pub width: u32,
    pub height: u32,
    pub tiles_x: u32,
    /// This dispatch's batches of 256 intersections of each tile: `[batch_begin, batch_end)`.
    pub batch_begin: u32,
    pub batch_end: u32,
    /// Intersections between checkpoints.
    pub chunk: u32,
}

/// What [`rasterize_forward`] writes: the images, per-tile walk lengths, the blend state
/// carried between dispatches and the checkpoints.
#[derive(CubeType, CubeLaunch)]
pub struct ForwardOutputs {
    pub out_rgb: Box<[f32]>,
    pub out_alpha: Box<[f32]>,
    pub out_depth: Box<[f32]>,
    /// Per pixel, its last contributor relative to the tile's first intersection.
    pub out_last: Box<[u32]>,
    /// Per tile, the intersections walked (the largest `out_last` of its pixels).
    pub tile_last: Box<[u32]>,
    /// Per pixel, the blend state (transmittance, colour, depth) between dispatches.
    pub carry: Box<[f32]>,
    /// Per pixel, whether its transmittance ran out.
    pub carry_done: Box<[u32]>,
    /// Checkpoints ([`CHECKPOINT`] floats each), with `save_checkpoints`.
    pub ck: Box<[f32]>,
}

#[cube(launch, launch_unchecked)]
pub fn rasterize_forward(
    args: ForwardArgs,
    mut out: ForwardOutputs,
    #[comptime] row_skip: bool,
    #[comptime] save_checkpoints: bool,
    #[comptime] vec_shared: bool,
) {
    let tile = (CUBE_POS_Y * args.tiles_x + CUBE_POS_X) as usize;
    let t = UNIT_POS as usize;
    let x = CUBE_POS_X * 16 + UNIT_POS % 16;
    let y = CUBE_POS_Y * 16 + UNIT_POS / 16;
    let inside = x < args.width && y < args.height;
    let pxf = f32::cast_from(x) + 0.5f32;
    let pyf = f32::cast_from(y) + 0.5f32;
    let start = args.ranges[tile * 2] as usize;
    let end = args.ranges[tile * 2 + 1] as usize;
    // A batch's Gaussians in shared memory. With `vec_shared`, as three 4-vectors each, so
    // that the blend loop reads one with a single 16-byte broadcast load: `s_pos` = (x, y, row
    // reach^2, opacity), `s_conic` = (a, b, c, depth), `s_rgb` = colour. Otherwise as 11
    // scalar arrays (`s_flat[c * 256 + j]`), each read only when the loop needs it. Through
    // CUDA the vectors took the H100's 1920x1080 blend from 0.69 to 0.50 ms (138k Gaussians)
    // and from 1.49 to 1.15 ms (4M); through Vulkan they made it 18-23% slower at 1M and 10M
    // at 1920x1080 (docs/benchmarks/journal.md, 2026-11-27, calls G-I).
    let vec_len = comptime![if vec_shared { 256usize } else { 1usize }];
    let mut s_pos = Shared::<[Vector<f32, Const<4>>]>::new_slice(vec_len);
    let mut s_conic = Shared::<[Vector<f32, Const<4>>]>::new_slice(vec_len);
    let mut s_rgb = Shared::<[Vector<f32, Const<4>>]>::new_slice(vec_len);
    let mut s_flat =
        Shared::<[f32]>::new_slice(comptime![if vec_shared { 1usize } else { 11 * 256usize }]);
    let done_count = Shared::<[Atomic<u32>]>::new_slice(1usize);
    let max_last = Shared::<[Atomic<u32>]>::new_slice(1usize);
    if t == 0 {
        done_count[0].store(0u32);
        max_last[0].store(0u32);
    }
    sync_cube();
    let p = (min(y, args.height - 1) * args.width + min(x, args.width - 1)) as usize;
    let mut done = !inside;
    let mut tr = 1.0f32;
    let mut cr = 0.0f32;
    let mut cg = 0.0f32;
    let mut cb = 0.0f32;
    let mut cd = 0.0f32;
    let mut last = 0u32;
    // Work is bounded per dispatch: batches [batch_begin, batch_end) of each tile;
    // the blend state of every pixel is carried between dispatches.
    if args.batch_begin > 0u32 && inside {
        tr = out.carry[p * 5];
        cr = out.carry[p * 5 + 1];
        cg = out.carry[p * 5 + 2];
        cb = out.carry[p * 5 + 3];
        cd = out.carry[p * 5 + 4];
        last = out.out_last[p];
        done = out.carry_done[p] != 0u32;
    }
    if done {
        done_count[0].fetch_add(1u32);
    }
    let total = end - start;
    let num_batches = min(total.div_ceil(256usize), args.batch_end as usize);
    for b in (args.batch_begin as usize)..num_batches {
        sync_cube();
        let finished = workgroup_uniform_load_atomic(&done_count[0]);
        if finished >= 256u32 {
            break;
        }
        // Checkpoint before every `chunk`-th intersection: the backward pass starts its
        // chunks there (`rasterize_backward`). Checkpoint k >= 1 of the tile goes to slot
        // start / chunk + k - 1: the tiles' slots never overlap, and fewer than
        // (intersections / chunk) are used.
        if save_checkpoints {
            if b > 0 && (b * 256) % (args.chunk as usize) == 0 {
                let slot = start / (args.chunk as usize) + b * 256 / (args.chunk as usize) - 1;
                let o = slot * comptime![CHECKPOINT] + t;
                out.ck[o] = tr;
                out.ck[o + 256] = cr;
                out.ck[o + 512] = cg;
                out.ck[o + 768] = cb;
                out.ck[o + 1024] = cd;
            }
        }
        let idx = start + b * 256 + t;
        if idx < end {
            if vec_shared {
                let g = stage(&args.proj, args.sorted_gids[idx] as usize, row_skip);
                s_pos[t] = g.pos;
                s_conic[t] = g.conic;
                s_rgb[t] = g.rgb;
            } else {
                let gid = args.sorted_gids[idx] as usize;
                #[unroll]
                for k in 0..10usize {
                    s_flat[k * 256 + t] = args.proj[gid * 10 + k];
                }
                if row_skip {
                    s_flat[2560 + t] = row_reach2(
                        s_flat[512 + t],
                        s_flat[768 + t],
                        s_flat[1024 + t],
                        s_flat[1536 + t],
                    );
                }
            }
        }
        sync_cube();
        let batch_len = min(256usize, total - b * 256);
        // The same blend twice, once per layout: written through one set of accessors, the
        // scalar loop ran 20% slower through Vulkan than this form of it (call J).
        if vec_shared {
            if !done {
                for j in 0..batch_len {
                    let g = s_pos[j];
                    let dy = g.extract(1usize) - pyf;
                    // With `row_skip`, rows out of the Gaussian's reach skip the exponential (whole
                    // warps at once when its rows are all out of reach).
                    if !row_skip || dy * dy <= g.extract(2usize) {
                        let q = s_conic[j];
                        let dx = g.extract(0usize) - pxf;
                        let sigma = 0.5f32
                            * (q.extract(0usize) * dx * dx + q.extract(2usize) * dy * dy)
                            + q.extract(1usize) * dx * dy;
                        let alpha = min(0.99f32, g.extract(3usize) * (-sigma).exp());
                        if sigma >= 0.0f32 && alpha >= 1.0f32 / 255.0f32 {
                            let next_t = tr * (1.0f32 - alpha);
                            if next_t <= 1e-4f32 {
                                done = true;
                                break;
                            }
                            let vis = alpha * tr;
                            let col = s_rgb[j];
                            cr += col.extract(0usize) * vis;
                            cg += col.extract(1usize) * vis;
                            cb += col.extract(2usize) * vis;
                            cd += q.extract(3usize) * vis;
                            tr = next_t;
                            last = (b * 256 + j + 1) as u32;
                        }
                    }
                }
                if done {
                    done_count[0].fetch_add(1u32);
                }
            }
        } else {
            if !done {
                // s_flat: x, y, a, b, c, depth, opacity, r, g, b, row reach^2 (`proj`'s order).
                for j in 0..batch_len {
                    let dy = s_flat[256 + j] - pyf;
                    if !row_skip || dy * dy <= s_flat[2560 + j] {
                        let dx = s_flat[j] - pxf;
                        let sigma = 0.5f32
                            * (s_flat[512 + j] * dx * dx + s_flat[1024 + j] * dy * dy)
                            + s_flat[768 + j] * dx * dy;
                        let alpha = min(0.99f32, s_flat[1536 + j] * (-sigma).exp());
                        if sigma >= 0.0f32 && alpha >= 1.0f32 / 255.0f32 {
                            let next_t = tr * (1.0f32 - alpha);
                            if next_t <= 1e-4f32 {
                                done = true;
                                break;
                            }
                            let vis = alpha * tr;
                            cr += s_flat[1792 + j] * vis;
                            cg += s_flat[2048 + j] * vis;
                            cb += s_flat[2304 + j] * vis;
                            cd += s_flat[1280 + j] * vis;
                            tr = next_t;
                            last = (b * 256 + j + 1) as u32;
                        }
                    }
                }
                if done {
                    done_count[0].fetch_add(1u32);
                }
            }
        }
    }
    if inside {
        out.carry[p * 5] = tr;
        out.carry[p * 5 + 1] = cr;
        out.carry[p * 5 + 2] = cg;
        out.carry[p * 5 + 3] = cb;
        out.carry[p * 5 + 4] = cd;
        out.carry_done[p] = select(done, 1u32, 0u32);
        out.out_rgb[p * 3] = cr + tr * args.cam[19];
        out.out_rgb[p * 3 + 1] = cg + tr * args.cam[20];
        out.out_rgb[p * 3 + 2] = cb + tr * args.cam[21];
        out.out_alpha[p] = 1.0f32 - tr;
        out.out_depth[p] = cd;
        out.out_last[p] = last;
    }
    // Intersections past the last contributor of every pixel of the tile are
    // skipped by the backward pass.
    max_last[0].fetch_max(last);
    sync_cube();
    if t == 0 {
        out.tile_last[tile] = max_last[0].load();
    }
}

/// Per-pixel state of the backward walk (back to front): the output gradients, the final
/// transmittance, the running transmittance `tr` and colour / depth `s*` behind, and the
/// sorted-list position one past the pixel's last contributor (`last`).
#[derive(CubeType, Clone, Copy)]
pub struct BackPixel {
    tr: f32,
    sr: f32,
    sg: f32,
    sb: f32,
    sd: f32,
    t_final: f32,
    final_term: f32,
    vcr: f32,
    vcg: f32,
    vcb: f32,
    vd: f32,
    last: usize,
}

/// Load pixel `pc`'s gradients and forward results (zeros outside the image). A chunk that
/// ends before the tile's last contributor (`ch.resume`) starts from the forward checkpoint at
/// its end (slot `ch.slot`): the transmittance there, and the colour and depth behind it as the
/// final front-to-back sums less the sums in front of it.
#[cube]
fn back_pixel(args: &BackwardArgs, ch: &BackChunk, pc: usize, inside: bool) -> BackPixel {
    let mut px = BackPixel {
        tr: 1.0f32,
        sr: 0.0f32,
        sg: 0.0f32,
        sb: 0.0f32,
        sd: 0.0f32,
        t_final: 1.0f32,
        final_term: 0.0f32,
        vcr: 0.0f32,
        vcg: 0.0f32,
        vcb: 0.0f32,
        vd: 0.0f32,
        last: 0usize,
    };
    if inside {
        px.t_final = 1.0f32 - args.out_alpha[pc];
        px.last = ch.tile_start + args.out_last[pc] as usize;
        px.vcr = args.v_rgb[pc * 3];
        px.vcg = args.v_rgb[pc * 3 + 1];
        px.vcb = args.v_rgb[pc * 3 + 2];
        px.vd = args.v_depth[pc];
        px.final_term = args.v_alpha[pc]
            - (args.cam[19] * px.vcr + args.cam[20] * px.vcg + args.cam[21] * px.vcb);
        px.tr = px.t_final;
        if ch.resume {
            let base = ch.slot * comptime![CHECKPOINT] + UNIT_POS as usize;
            px.tr = args.ck[base];
            px.sr = args.out_rgb[pc * 3] - px.t_final * args.cam[19] - args.ck[base + 256];
            px.sg = args.out_rgb[pc * 3 + 1] - px.t_final * args.cam[20] - args.ck[base + 512];
            px.sb = args.out_rgb[pc * 3 + 2] - px.t_final * args.cam[21] - args.ck[base + 768];
            px.sd = args.out_depth[pc] - args.ck[base + 1024];
        }
    }
    px
}

/// The backward cube's share of the work: its tile (corner and first intersection) and the
/// intersections `[begin, end)` of its chunk, plus whether the chunk starts from a forward
/// checkpoint (every chunk but the tile's last) and that checkpoint's slot. Tile `t`
/// (intersections from `s_t`) owns cubes from `s_t / chunk + t` on, one per chunk up to its last
/// contributor; its other cubes get an empty range.
#[derive(CubeType, Clone, Copy)]
pub struct BackChunk {
    /// Pixel coordinates of the tile's top-left corner.
    x0: u32,
    y0: u32,
    tile_start: usize,
    begin: usize,
    end: usize,
    resume: bool,
    slot: usize,
}

#[cube]
fn back_chunk(args: &BackwardArgs) -> BackChunk {
    let g = rust3r_gpu::block_id() as u32;
    // First tile whose first cube is past g; the cube belongs to the tile before it.
    let mut lo = 1u32;
    let mut hi = args.num_tiles;
    while lo < hi {
        let mid = (lo + hi) / 2u32;
        if args.ranges[mid as usize * 2] / args.chunk + mid > g {
            hi = mid;
        } else {
            lo = mid + 1u32;
        }
    }
    let tile = (lo - 1u32) as usize;
    let start = args.ranges[tile * 2];
    let c = g - (start / args.chunk + tile as u32);
    let walked = args.tile_last[tile];
    let begin = min(c * args.chunk, walked);
    BackChunk {
        x0: (tile as u32 % args.tiles_x) * 16,
        y0: (tile as u32 / args.tiles_x) * 16,
        tile_start: start as usize,
        begin: (start + begin) as usize,
        end: (start + min(begin + args.chunk, walked)) as usize,
        resume: begin + args.chunk < walked,
        slot: (start / args.chunk + c) as usize,
    }
}

/// A backward batch's Gaussians in shared memory, as the three parts of [`Staged`].
#[derive(CubeType)]
struct StagedBatch {
    pos: Shared<[Vector<f32, Const<4>>]>,
    conic: Shared<[Vector<f32, Const<4>>]>,
    rgb: Shared<[Vector<f32, Const<4>>]>,
}

/// Stages back-to-front batch `bi` (of `batch` intersections) of the chunk's intersections
/// `[ch.begin, ch.end)` in shared memory: its Gaussians as [`Staged`] triples, between two barriers.
/// Returns the batch's first intersection and its length.
#[cube]
fn stage_back_batch(
    args: &BackwardArgs,
    staged: &mut StagedBatch,
    ch: &BackChunk,
    bi: usize,
    t: usize,
    #[comptime] batch: usize,
) -> (usize, usize) {
    let batch_hi = ch.end - bi * batch;
    let batch_start = max(ch.begin, batch_hi - min(batch_hi, batch));
    let len = batch_hi - batch_start;
    sync_cube();
    if t < len {
        let g = stage(
            &args.proj,
            args.sorted_gids[batch_start + t] as usize,
            false,
        );
        staged.pos[t] = g.pos;
        staged.conic[t] = g.conic;
        staged.rgb[t] = g.rgb;
    }
    sync_cube();
    (batch_start, len)
}

/// Undo Gaussian `j` of the staged batch at pixel
/// (`pxf`, `pyf`). Returns (took, dL/dalpha, blend weight, dx, dy, Gaussian value, opacity x
/// Gaussian value); when the pixel did not take the Gaussian only `took = false` matters.
#[cube]
fn back_step(
    px: &mut BackPixel,
    staged: &StagedBatch,
    j: usize,
    pxf: f32,
    pyf: f32,
) -> (bool, f32, f32, f32, f32, f32, f32) {
    let g = staged.pos[j];
    let q = staged.conic[j];
    let dx = g.extract(0usize) - pxf;
    let dy = g.extract(1usize) - pyf;
    let sigma = 0.5f32 * (q.extract(0usize) * dx * dx + q.extract(2usize) * dy * dy)
        + q.extract(1usize) * dx * dy;
    let gk = (-sigma).exp();
    let raw = g.extract(3usize) * gk;
    let alpha = min(0.99f32, raw);
    let mut took = false;
    let mut va = 0.0f32;
    let mut vis = 0.0f32;
    if sigma >= 0.0f32 && alpha >= 1.0f32 / 255.0f32 {
        took = true;
        let ra = 1.0f32 / (1.0f32 - alpha);
        px.tr = px.tr * ra;
        vis = alpha * px.tr;
        let col = staged.rgb[j];
        let z = q.extract(3usize);
        let r = col.extract(0usize);
        let g = col.extract(1usize);
        let b = col.extract(2usize);
        va = (r * px.vcr + g * px.vcg + b * px.vcb) * px.tr
            - (px.sr * px.vcr + px.sg * px.vcg + px.sb * px.vcb) * ra
            + (z * px.tr - px.sd * ra) * px.vd
            + px.t_final * ra * px.final_term;
        px.sr += r * vis;
        px.sg += g * vis;
        px.sb += b * vis;
        px.sd += z * vis;
    }
    (took, va, vis, dx, dy, gk, raw)
}

/// The launch arguments both backward rasterizers ([`rasterize_backward`],
/// [`rasterize_backward_plane`]) read, in binding order: the forward pass's tile lists,
/// projected Gaussians, images and checkpoints, the image gradients, and the image and tile
/// sizes. What they write is [`BackwardOutputs`], bound after these.
#[derive(CubeType, CubeLaunch)]
pub struct BackwardArgs {
    /// Per tile, its first and one-past-last intersection.
    pub ranges: Box<[u32]>,
    /// Gaussian of each tile-sorted intersection.
    pub sorted_gids: Box<[u32]>,
    /// Emission index of each tile-sorted intersection (its gradient row in the row mode).
    pub isect_orig: Box<[u32]>,
    /// Projected Gaussians ([`super::project::PROJ`] floats each).
    pub proj: Box<[f32]>,
    /// The camera block ([`crate::camera::CAM_LEN`] floats).
    pub cam: Box<[f32]>,
    pub out_alpha: Box<[f32]>,
    /// Per pixel, its last contributor relative to the tile's first intersection.
    pub out_last: Box<[u32]>,
    /// Per tile, the intersections the forward pass walked.
    pub tile_last: Box<[u32]>,
    /// Forward checkpoints ([`CHECKPOINT`] floats each).
    pub ck: Box<[f32]>,
    pub out_rgb: Box<[f32]>,
    pub out_depth: Box<[f32]>,
    pub v_rgb: Box<[f32]>,
    pub v_alpha: Box<[f32]>,
    pub v_depth: Box<[f32]>,
    pub width: u32,
    pub height: u32,
    pub tiles_x: u32,
    pub num_tiles: u32,
    /// Intersections per backward cube (the forward checkpoint spacing).
    pub chunk: u32,
}

/// What the backward rasterizers write: in the row mode one gradient row per intersection
/// (`isect_grads`, and `isect_abs` with absgrad), in the atomic mode per-Gaussian sums
/// (`v_atomic`, `v_abs_atomic`; see [`rasterize_backward`]). Buffers only: a `mut` struct
/// parameter would copy scalar fields into variables.
#[derive(CubeType, CubeLaunch)]
pub struct BackwardOutputs<A: Numeric> {
    pub isect_grads: Box<[f32]>,
    pub v_atomic: Box<[Atomic<A>]>,
    pub isect_abs: Box<[f32]>,
    pub v_abs_atomic: Box<[Atomic<A>]>,
}

/// `batch` Gaussians per step; `group = 256 / batch` units per Gaussian in phase B.
///
/// With `atomic`, the per-(tile, Gaussian) sums are added into `v_atomic[gid * 10 + k]` (the
/// per-Gaussian projected gradients) with float atomics instead of being stored as one row per
/// intersection in `isect_grads`; the order of the additions then varies run to run. Without
/// it, `A` is a placeholder (`u32`) and `v_atomic` is never touched.
///
/// With `absgrad`, the sums of the absolute per-pixel mean2d gradients (gsplat's `absgrad`)
/// go to `isect_abs` (2 floats per intersection row) or, with `atomic`, into `v_abs_atomic`
/// (2 per Gaussian).
#[cube(launch, launch_unchecked)]
pub fn rasterize_backward<A: Numeric>(
    args: BackwardArgs,
    mut out: BackwardOutputs<A>,
    #[comptime] batch: usize,
    #[comptime] atomic: bool,
    #[comptime] absgrad: bool,
) {
    let group = comptime![256 / batch];
    let pair_len = comptime![if 2 * batch * 256 > 2560 {
        2 * batch * 256
    } else {
        2560
    }];
    let ch = back_chunk(&args);
    let t = UNIT_POS as usize;
    let x = ch.x0 + UNIT_POS % 16;
    let y = ch.y0 + UNIT_POS / 16;
    let inside = x < args.width && y < args.height;
    let pxf = f32::cast_from(x) + 0.5f32;
    let pyf = f32::cast_from(y) + 0.5f32;
    // Rows of intersections behind every pixel's last contributor stay zero.
    let (start, end) = (ch.begin, ch.end);
    let mut staged = StagedBatch {
        pos: Shared::<[Vector<f32, Const<4>>]>::new_slice(batch),
        conic: Shared::<[Vector<f32, Const<4>>]>::new_slice(batch),
        rgb: Shared::<[Vector<f32, Const<4>>]>::new_slice(batch),
    };
    let mut pair = Shared::<[f32]>::new_slice(pair_len);
    let mut pix = Shared::<[f32]>::new_slice(1024usize);
    let mut pabs = Shared::<[f32]>::new_slice(comptime![if absgrad { 512usize } else { 1usize }]);

    let pc = (min(y, args.height - 1) * args.width + min(x, args.width - 1)) as usize;
    // Bounded work per cube: one chunk of at most `chunk` intersections.
    let mut px = back_pixel(&args, &ch, pc, inside);
    pix[t] = px.vcr;
    pix[256 + t] = px.vcg;
    pix[512 + t] = px.vcb;
    pix[768 + t] = px.vd;

    let total = end - start;
    let num_batches = total.div_ceil(batch);
    let jb = t / group;
    let lane = t % group;
    let tile_x0 = f32::cast_from(ch.x0) + 0.5f32;
    let tile_y0 = f32::cast_from(ch.y0) + 0.5f32;
    for bi in 0..num_batches {
        let (batch_start, len) = stage_back_batch(&args, &mut staged, &ch, bi, t, batch);
        // Phase A: unit = pixel, back to front.
        for jj in 0..len {
            let j = len - 1 - jj;
            let pos = batch_start + j;
            let mut va = 0.0f32;
            let mut vw = 0.0f32;
            if inside && pos < px.last {
                let (took, dl_dalpha, vis, _dx, _dy, _gk, _raw) =
                    back_step(&mut px, &staged, j, pxf, pyf);
                if took {
                    va = dl_dalpha;
                    vw = vis;
                }
            }
            pair[j * 256 + t] = va;
            pair[comptime![batch * 256] + j * 256 + t] = vw;
        }
        sync_cube();
        // Phase B: unit = (Gaussian jb, pixel group lane).
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
        if jb < len {
            let g = staged.pos[jb];
            let q = staged.conic[jb];
            let mx = g.extract(0usize);
            let my = g.extract(1usize);
            let ca = q.extract(0usize);
            let cb2 = q.extract(1usize);
            let cc = q.extract(2usize);
            let op = g.extract(3usize);
            #[unroll]
            for q in 0..batch {
                // Interleaved so the units of a warp read consecutive shared words.
                let pp = q * group + lane;
                let va = pair[jb * 256 + pp];
                let vw = pair[comptime![batch * 256] + jb * 256 + pp];
                if vw != 0.0f32 || va != 0.0f32 {
                    let dx = mx - (tile_x0 + f32::cast_from(pp % 16));
                    let dy = my - (tile_y0 + f32::cast_from(pp / 16));
                    let sigma = 0.5f32 * (ca * dx * dx + cc * dy * dy) + cb2 * dx * dy;
                    let gk = (-sigma).exp();
                    let raw = op * gk;
                    a5 += vw * pix[768 + pp];
                    a7 += vw * pix[pp];
                    a8 += vw * pix[256 + pp];
                    a9 += vw * pix[512 + pp];
                    if raw < 0.99f32 {
                        a6 += gk * va;
                        let vs = -raw * va;
                        a2 += 0.5f32 * dx * dx * vs;
                        a3 += dx * dy * vs;
                        a4 += 0.5f32 * dy * dy * vs;
                        let g0 = vs * (ca * dx + cb2 * dy);
                        let g1 = vs * (cb2 * dx + cc * dy);
                        a0 += g0;
                        a1 += g1;
                        if absgrad {
                            b0 += g0.abs();
                            b1 += g1.abs();
                        }
                    }
                }
            }
        }
        sync_cube();
        pair[t * 10] = a0;
        pair[t * 10 + 1] = a1;
        pair[t * 10 + 2] = a2;
        pair[t * 10 + 3] = a3;
        pair[t * 10 + 4] = a4;
        pair[t * 10 + 5] = a5;
        pair[t * 10 + 6] = a6;
        pair[t * 10 + 7] = a7;
        pair[t * 10 + 8] = a8;
        pair[t * 10 + 9] = a9;
        if absgrad {
            pabs[t * 2] = b0;
            pabs[t * 2 + 1] = b1;
        }
        sync_cube();
        // One unit per (Gaussian, component) sums the group's partials: one barrier
        // instead of a log2(group)-step tree.
        if t < len * 10 {
            let jw = t / 10;
            let k = t % 10;
            let mut sum = 0.0f32;
            for l in 0..group {
                sum += pair[(jw * group + l) * 10 + k];
            }
            if atomic {
                let gid = args.sorted_gids[batch_start + jw] as usize;
                out.v_atomic[gid * 10 + k].fetch_add(A::cast_from(sum));
            } else {
                let row = args.isect_orig[batch_start + jw] as usize;
                out.isect_grads[row * 10 + k] = sum;
            }
        }
        if absgrad && t >= len * 10 && t < len * 12 {
            let jw = (t - len * 10) / 2;
            let k = (t - len * 10) % 2;
            let mut sum = 0.0f32;
            for l in 0..group {
                sum += pabs[(jw * group + l) * 2 + k];
            }
            if atomic {
                let gid = args.sorted_gids[batch_start + jw] as usize;
                out.v_abs_atomic[gid * 2 + k].fetch_add(A::cast_from(sum));
            } else {
                let row = args.isect_orig[batch_start + jw] as usize;
                out.isect_abs[row * 2 + k] = sum;
            }
        }
    }
}

/// Pack the three images into one `[h][w][5]` buffer (r, g, b, alpha, depth).
#[cube(launch)]
pub fn pack_image(rgb: &[f32], alpha: &[f32], depth: &[f32], out: &mut [f32], npix: u32) {
    let p = rust3r_gpu::global_id();
    if p < npix as usize {
        out[p * 5] = rgb[p * 3];
        out[p * 5 + 1] = rgb[p * 3 + 1];
        out[p * 5 + 2] = rgb[p * 3 + 2];
        out[p * 5 + 3] = alpha[p];
        out[p * 5 + 4] = depth[p];
    }
}

/// Split a `[h][w][5]` gradient into the three image gradients.
#[cube(launch)]
pub fn unpack_image(
    packed: &[f32],
    rgb: &mut [f32],
    alpha: &mut [f32],
    depth: &mut [f32],
    npix: u32,
) {
    let p = rust3r_gpu::global_id();
    if p < npix as usize {
        rgb[p * 3] = packed[p * 5];
        rgb[p * 3 + 1] = packed[p * 5 + 1];
        rgb[p * 3 + 2] = packed[p * 5 + 2];
        alpha[p] = packed[p * 5 + 3];
        depth[p] = packed[p * 5 + 4];
    }
}

/// Backward pass with subgroup ("plane") reductions, for adapters that have them.
///
/// One unit per pixel walks the tile's Gaussians back to front in batches of `batch`; for each
/// Gaussian every unit computes its 10 gradient terms, `plane_sum` reduces them inside each
/// plane, and the plane leaders store one partial row per plane in shared memory; after the
/// batch, one unit per (Gaussian, component) adds the `256 / PLANE_DIM` partials. Same
/// arithmetic as [`rasterize_backward`] (which needs no subgroups), fewer barriers and no
/// per-pair shared-memory round trip. Deterministic run to run.
///
/// The per-pixel tests only zero the terms; a plane skips the reductions of a Gaussian none of
/// its pixels took (naga puts no uniformity requirement on subgroup operations; the skip
/// condition is uniform across the plane).
///
/// `atomic` / `A` / `v_atomic` as in [`rasterize_backward`].
#[cube(launch, launch_unchecked)]
pub fn rasterize_backward_plane<A: Numeric>(
    args: BackwardArgs,
    mut out: BackwardOutputs<A>,
    #[comptime] batch: usize,
    #[comptime] max_planes: usize,
    #[comptime] atomic: bool,
    #[comptime] absgrad: bool,
) {
    let ch = back_chunk(&args);
    let t = UNIT_POS as usize;
    let x = ch.x0 + UNIT_POS % 16;
    let y = ch.y0 + UNIT_POS / 16;
    let inside = x < args.width && y < args.height;
    let pxf = f32::cast_from(x) + 0.5f32;
    let pyf = f32::cast_from(y) + 0.5f32;
    let (start, end) = (ch.begin, ch.end);
    let mut staged = StagedBatch {
        pos: Shared::<[Vector<f32, Const<4>>]>::new_slice(batch),
        conic: Shared::<[Vector<f32, Const<4>>]>::new_slice(batch),
        rgb: Shared::<[Vector<f32, Const<4>>]>::new_slice(batch),
    };
    let mut part = Shared::<[f32]>::new_slice(comptime![max_planes * batch * 10]);
    let mut pabs = Shared::<[f32]>::new_slice(comptime![if absgrad {
        max_planes * batch * 2
    } else {
        1usize
    }]);
    let planes = (256u32 / PLANE_DIM) as usize;
    let plane = t / (PLANE_DIM as usize);
    let leader = UNIT_POS_PLANE == 0u32;

    let pc = (min(y, args.height - 1) * args.width + min(x, args.width - 1)) as usize;
    let mut px = back_pixel(&args, &ch, pc, inside);

    let total = end - start;
    let num_batches = total.div_ceil(batch);
    for bi in 0..num_batches {
        let (batch_start, len) = stage_back_batch(&args, &mut staged, &ch, bi, t, batch);
        for jj in 0..len {
            let j = len - 1 - jj;
            let pos = batch_start + j;
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
            let mut took = false;
            if inside && pos < px.last {
                let (took_it, va, vis, dx, dy, gk, raw) = back_step(&mut px, &staged, j, pxf, pyf);
                if took_it {
                    took = true;
                    a5 = vis * px.vd;
                    a7 = vis * px.vcr;
                    a8 = vis * px.vcg;
                    a9 = vis * px.vcb;
                    if raw < 0.99f32 {
                        let q = staged.conic[j];
                        let ca = q.extract(0usize);
                        let cb2 = q.extract(1usize);
                        let cc = q.extract(2usize);
                        a6 = gk * va;
                        let vs = -raw * va;
                        a2 = 0.5f32 * dx * dx * vs;
                        a3 = dx * dy * vs;
                        a4 = 0.5f32 * dy * dy * vs;
                        a0 = vs * (ca * dx + cb2 * dy);
                        a1 = vs * (cb2 * dx + cc * dy);
                    }
                }
            }
            // Planes where no pixel took this Gaussian skip the ten reductions (the
            // condition is uniform across the plane, which is all subgroup operations need).
            if plane_any(took) {
                let s0 = plane_sum(a0);
                let s1 = plane_sum(a1);
                let s2 = plane_sum(a2);
                let s3 = plane_sum(a3);
                let s4 = plane_sum(a4);
                let s5 = plane_sum(a5);
                let s6 = plane_sum(a6);
                let s7 = plane_sum(a7);
                let s8 = plane_sum(a8);
                let s9 = plane_sum(a9);
                if absgrad {
                    let sa0 = plane_sum(a0.abs());
                    let sa1 = plane_sum(a1.abs());
                    if leader {
                        pabs[(plane * batch + j) * 2] = sa0;
                        pabs[(plane * batch + j) * 2 + 1] = sa1;
                    }
                }
                if leader {
                    let o = (plane * batch + j) * 10;
                    part[o] = s0;
                    part[o + 1] = s1;
                    part[o + 2] = s2;
                    part[o + 3] = s3;
                    part[o + 4] = s4;
                    part[o + 5] = s5;
                    part[o + 6] = s6;
                    part[o + 7] = s7;
                    part[o + 8] = s8;
                    part[o + 9] = s9;
                }
            } else if leader {
                let o = (plane * batch + j) * 10;
                #[unroll]
                for k in 0..10usize {
                    part[o + k] = 0.0f32;
                }
                if absgrad {
                    pabs[(plane * batch + j) * 2] = 0.0f32;
                    pabs[(plane * batch + j) * 2 + 1] = 0.0f32;
                }
            }
        }
        sync_cube();
        if t < len * 10 {
            let mut sum = 0.0f32;
            for q in 0..planes {
                sum += part[q * comptime![batch * 10] + t];
            }
            if atomic {
                let gid = args.sorted_gids[batch_start + t / 10] as usize;
                out.v_atomic[gid * 10 + t % 10].fetch_add(A::cast_from(sum));
            } else {
                let row = args.isect_orig[batch_start + t / 10] as usize;
                out.isect_grads[row * 10 + t % 10] = sum;
            }
        }
        if absgrad && t >= len * 10 && t < len * 12 {
            let u = t - len * 10;
            let mut sum = 0.0f32;
            for q in 0..planes {
                sum += pabs[q * comptime![batch * 2] + u];
            }
            if atomic {
                let gid = args.sorted_gids[batch_start + u / 2] as usize;
                out.v_abs_atomic[gid * 2 + u % 2].fetch_add(A::cast_from(sum));
            } else {
                let row = args.isect_orig[batch_start + u / 2] as usize;
                out.isect_abs[row * 2 + u % 2] = sum;
            }
        }
    }
}
