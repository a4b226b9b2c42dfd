//! The forward pass: project, cull, depth-sort, bin into tiles, tile-sort, blend.

use cubecl::prelude::*;
use rust3r_gpu::Gpu;
use rust3r_gpu::compact::scatter_indices_with_values;
use rust3r_gpu::gather::gather;
use rust3r_gpu::gather::iota;
use rust3r_gpu::reduce::ReduceOp;
use rust3r_gpu::reduce::reduce_columns;
use rust3r_gpu::scan::exclusive_scan_gathered;
use rust3r_gpu::scan::exclusive_scan_nonzero;
use rust3r_gpu::sort::bits_for;
use rust3r_gpu::sort::sort_pairs;
use rust3r_io::num_coeffs_for_degree;

use super::policy::{batches_per_dispatch, row_mode_backward, row_skip, slot, vec_shared};
use super::splats::{GpuSplats, chunks_layout};
use super::{RenderOptions, RenderOutput, RenderState};
use crate::Camera;
use crate::SplatError;
use crate::kernels::project;
use crate::kernels::rasterize;
use crate::kernels::tiles;

/// Render `splats` from `camera`.
pub fn render(
    gpu: &Gpu,
    splats: &GpuSplats,
    camera: &Camera,
    opts: &RenderOptions,
) -> Result<(RenderOutput, RenderState), SplatError> {
    render_chunks(gpu, std::slice::from_ref(splats), camera, opts)
}

/// Render the Gaussians of all `chunks` (same SH degree; see
/// [`GpuSplats::chunks_from_host`]) as one scene from `camera`. Per-Gaussian outputs
/// ([`RenderOutput::radii`], [`SplatGrads::projected`]) are indexed by global row: the rows of
/// chunk 0, then chunk 1, and so on.
pub fn render_chunks(
    gpu: &Gpu,
    chunks: &[GpuSplats],
    camera: &Camera,
    opts: &RenderOptions,
) -> Result<(RenderOutput, RenderState), SplatError> {
    camera.validate()?;
    let (sh_degree, n) = chunks_layout(chunks)?;
    // Past one binding here, the projected data would have to be split as well (about 53M
    // Gaussians at 2 GiB).
    gpu.check_fits("projected Gaussians", (n * project::PROJ * 4) as u64)?;
    let (w, h) = (camera.width, camera.height);
    let (tiles_x, tiles_y) = camera.tiles();
    let num_tiles = (tiles_x * tiles_y) as usize;
    let num_coeffs = num_coeffs_for_degree(sh_degree) as u32;
    let active_degree = opts.sh_degree.unwrap_or(sh_degree).min(sh_degree);
    let active_coeffs = num_coeffs_for_degree(active_degree) as u32;
    let cam = gpu.upload(&camera.gpu_block(opts.background, opts.near, opts.far));
    let client = gpu.client();

    let proj = gpu.alloc::<f32>(n * project::PROJ);
    let radii = gpu.alloc::<u32>(n * 2);
    let rects = gpu.alloc::<u32>(n * 2);
    let tiles_touched = gpu.alloc::<u32>(n);
    let depth_keys = gpu.alloc::<u32>(n);
    let mut row0 = 0;
    for splats in chunks.iter().filter(|c| !c.is_empty()) {
        let rows = splats.len();
        rust3r_gpu::launch!(
            gpu,
            project::project_forward(
                client,
                gpu.grid(rows.div_ceil(project::PROJECT_CUBE)),
                CubeDim::new_1d(project::PROJECT_CUBE as u32),
                splats.project_args(gpu, &cam, row0, w, h),
                project::ProjectOutputsLaunch {
                    proj: proj.arg(),
                    radii: radii.arg(),
                    rects: rects.arg(),
                    tiles_touched: tiles_touched.arg(),
                    depth_keys: depth_keys.arg(),
                },
                project::ProjectConfig {
                    num_coeffs,
                    active_coeffs,
                    antialiased: opts.antialiased,
                    half_sh: splats.sh.is_half(),
                },
            )
        );
        row0 += rows;
    }

    rust3r_gpu::profile::mark(gpu, "fwd 1 project");
    // Only the visible Gaussians are depth-sorted (front to back). One read-back for the whole
    // forward pass: the visible and intersection counts.
    let positions = exclusive_scan_nonzero(gpu, &tiles_touched);
    let (num_visible, num_isects) = if n == 0 {
        (0, 0)
    } else {
        let isect_total = reduce_columns(gpu, &tiles_touched, 1, ReduceOp::Sum);
        let totals = gpu.alloc::<u32>(2);
        rust3r_gpu::launch!(
            gpu,
            tiles::visible_totals(
                client,
                CubeCount::Static(1, 1, 1),
                CubeDim::new_1d(1),
                tiles_touched.arg(),
                positions.arg(),
                isect_total.arg(),
                totals.arg(),
                n as u32,
            )
        );
        let t = gpu.read(&totals)?;
        (t[0] as usize, t[1] as usize)
    };
    rust3r_gpu::profile::mark(gpu, "fwd 2a visible count + read-back");
    let (visible_ids, visible_keys) =
        scatter_indices_with_values(gpu, &tiles_touched, &positions, &depth_keys, num_visible);
    drop(positions);
    rust3r_gpu::profile::mark(gpu, "fwd 2b visible ids + keys");
    let (_, sorted_ids) = sort_pairs(gpu, &visible_keys, &visible_ids, 32);
    rust3r_gpu::profile::mark(gpu, "fwd 2c depth sort");
    let offsets = exclusive_scan_gathered(gpu, &tiles_touched, &sorted_ids);
    rust3r_gpu::profile::mark(gpu, "fwd 2d tile counts + scan");
    gpu.check_fits("image", (w as u64) * (h as u64) * 12)?;
    // Without float atomics (or when asked to be deterministic) the backward pass keeps one
    // 10-float gradient row per intersection: about 53M intersections in 2 GiB.
    if row_mode_backward(gpu, opts.deterministic) {
        gpu.check_fits(
            "tile intersections",
            num_isects as u64 * (project::VPROJ as u64) * 4,
        )?;
    }
    gpu.check_fits("tile intersections", num_isects as u64 * 4)?;
    let isect_tiles = gpu.alloc::<u32>(num_isects);
    let isect_gids = gpu.alloc::<u32>(num_isects);
    if num_isects > 0 {
        rust3r_gpu::launch!(
            gpu,
            tiles::emit_intersections(
                client,
                gpu.grid_1d(num_visible),
                rust3r_gpu::BLOCK_DIM,
                sorted_ids.arg(),
                offsets.arg(),
                rects.arg(),
                isect_tiles.arg(),
                isect_gids.arg(),
                num_visible as u32,
                tiles_x,
            )
        );
    }
    rust3r_gpu::profile::mark(gpu, "fwd 3a emit");
    // Stable sort by tile keeps the depth order inside each tile. The backward pass that keeps
    // one gradient row per intersection also needs each sorted intersection's emission index;
    // the float-atomic one does not, and the Gaussian ids are sorted directly.
    let tile_bits = bits_for(num_tiles as u32 - 1);
    let (sorted_tiles, sorted_gids, isect_orig) = if row_mode_backward(gpu, opts.deterministic) {
        let order = iota(gpu, num_isects);
        let (sorted_tiles, isect_orig) = sort_pairs(gpu, &isect_tiles, &order, tile_bits);
        let sorted_gids = gather(gpu, &isect_gids, &isect_orig);
        (sorted_tiles, sorted_gids, isect_orig)
    } else {
        let (sorted_tiles, sorted_gids) = sort_pairs(gpu, &isect_tiles, &isect_gids, tile_bits);
        // Bound by the backward pass, read only in the row mode: a shared placeholder.
        (
            sorted_tiles,
            sorted_gids,
            gpu.placeholder::<u32>(slot::ISECT_ORIG),
        )
    };
    rust3r_gpu::profile::mark(gpu, "fwd 3b tile sort");
    // `tile_ranges` writes every entry; without intersections every tile is empty.
    let ranges = if num_isects > 0 {
        gpu.alloc::<u32>(num_tiles * 2)
    } else {
        gpu.zeros::<u32>(num_tiles * 2)
    };
    if num_isects > 0 {
        rust3r_gpu::launch!(
            gpu,
            tiles::tile_ranges(
                client,
                gpu.grid_1d(num_isects),
                rust3r_gpu::BLOCK_DIM,
                sorted_tiles.arg(),
                ranges.arg(),
                num_isects as u32,
                num_tiles as u32,
            )
        );
    }

    rust3r_gpu::profile::mark(gpu, "fwd 3c tile ranges");
    let npix = (w as usize) * (h as usize);
    let rgb = gpu.alloc::<f32>(npix * 3);
    let alpha = gpu.alloc::<f32>(npix);
    let depth = gpu.alloc::<f32>(npix);
    let last = gpu.alloc::<u32>(npix);
    let tile_last = gpu.alloc::<u32>(num_tiles);
    // Longest tile list, to know how many bounded dispatches are needed (one extra read-back,
    // only when a tile could exceed one dispatch). A tile lists each visible Gaussian at most
    // once, so when either count fits one dispatch no read-back is needed (a read-back
    // costs 37 us through CUDA and 110 us through wgpu on the H100, plus the idle GPU).
    let k = batches_per_dispatch(gpu, opts);
    let per_dispatch = k as usize * 256;
    let bound = num_isects.min(num_visible);
    let max_tile = if bound <= per_dispatch {
        bound
    } else {
        let lengths = gpu.alloc::<u32>(num_tiles);
        rust3r_gpu::launch!(
            gpu,
            tiles::tile_lengths(
                client,
                gpu.grid_1d(num_tiles),
                rust3r_gpu::BLOCK_DIM,
                ranges.arg(),
                lengths.arg(),
                num_tiles as u32,
            )
        );
        gpu.read(&reduce_columns(gpu, &lengths, 1, ReduceOp::Max))?[0] as usize
    };
    let carry = gpu.alloc::<f32>(npix * 5);
    let carry_done = gpu.alloc::<u32>(npix);
    let row_skip = row_skip(num_visible, num_isects);
    let chunk = opts.checkpoint_every.clamp(1, k) * 256;
    // A tile of `len` intersections takes (len - 1) / chunk checkpoints, in slots that never
    // overlap and stay below intersections / chunk (`rasterize_forward`).
    let slots = if opts.forward_only {
        0
    } else {
        (num_isects / chunk as usize).max(1)
    };
    gpu.check_fits(
        "forward checkpoints",
        (slots * rasterize::CHECKPOINT * 4) as u64,
    )?;
    let checkpoints = gpu.alloc::<f32>((slots * rasterize::CHECKPOINT).max(1));
    for d in 0..max_tile.div_ceil(per_dispatch).max(1) as u32 {
        rust3r_gpu::launch!(
            gpu,
            rasterize::rasterize_forward(
                client,
                CubeCount::Static(tiles_x, tiles_y, 1),
                CubeDim::new_1d(256),
                rasterize::ForwardArgsLaunch {
                    ranges: ranges.arg(),
                    sorted_gids: sorted_gids.arg(),
                    proj: proj.arg(),
                    cam: cam.arg(),
                    width: w,
                    height: h,
                    tiles_x,
                    batch_begin: d * k,
                    batch_end: (d + 1) * k,
                    chunk,
                },
                rasterize::ForwardOutputsLaunch {
                    out_rgb: rgb.arg(),
                    out_alpha: alpha.arg(),
                    out_depth: depth.arg(),
                    out_last: last.arg(),
                    tile_last: tile_last.arg(),
                    carry: carry.arg(),
                    carry_done: carry_done.arg(),
                    ck: checkpoints.arg(),
                },
                row_skip,
                !opts.forward_only,
                vec_shared(gpu, &opts.tuning),
            )
        );
    }

    rust3r_gpu::profile::mark(gpu, "fwd 4 rasterize");
    let out = RenderOutput {
        width: w,
        height: h,
        rgb,
        alpha,
        depth,
        radii,
        num_visible,
        num_intersections: num_isects,
    };
    let state = RenderState {
        cam,
        camera: camera.clone(),
        antialiased: opts.antialiased,
        active_coeffs,
        proj,
        tiles_touched,
        sorted_ids,
        offsets,
        ranges,
        sorted_gids,
        isect_orig,
        last,
        tile_last,
        checkpoints,
        chunk,
        forward_only: opts.forward_only,
        row_skip,
        deterministic: opts.deterministic,
        absgrad: opts.absgrad,
        backward_kernel: opts.backward_kernel,
        tuning: opts.tuning,
        sh_grad: opts.sh_grad,
    };
    Ok((out, state))
}
