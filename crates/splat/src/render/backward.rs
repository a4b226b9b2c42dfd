//! The backward pass: the forward stages in reverse, to the splat and camera-pose gradients.

use cubecl::prelude::*;
use rust3r_gpu::Gpu;
use rust3r_gpu::GpuBuffer;
use rust3r_gpu::reduce::ReduceOp;
use rust3r_gpu::reduce::reduce_columns;

use super::policy::{PLANE_BATCH, backward_batch, plane_backward, row_mode_backward, slot};
use super::splats::{GpuSplats, chunks_layout};
use super::{ChunkedGrads, ParamGrads, RenderOutput, RenderState, SplatGrads};
use crate::SplatError;
use crate::kernels::project;
use crate::kernels::rasterize;
use crate::kernels::tiles;

/// Backward pass: gradients of `L` given `dL/d rgb`, `dL/d alpha` and
/// `dL/d depth` (the accumulated depth of [`RenderOutput::depth`]).
pub fn render_backward(
    gpu: &Gpu,
    splats: &GpuSplats,
    out: &RenderOutput,
    state: &RenderState,
    v_rgb: &GpuBuffer<f32>,
    v_alpha: &GpuBuffer<f32>,
    v_depth: &GpuBuffer<f32>,
) -> Result<SplatGrads, SplatError> {
    render_backward_with(gpu, splats, out, state, v_rgb, v_alpha, v_depth, true)
}

/// [`render_backward`]; with `pose_grad = false` the camera-pose gradient is not reduced
/// (no read-back: training with fixed poses never waits for the device here) and
/// [`SplatGrads::world_to_camera`] is zero.
#[allow(clippy::too_many_arguments)]
pub fn render_backward_with(
    gpu: &Gpu,
    splats: &GpuSplats,
    out: &RenderOutput,
    state: &RenderState,
    v_rgb: &GpuBuffer<f32>,
    v_alpha: &GpuBuffer<f32>,
    v_depth: &GpuBuffer<f32>,
    pose_grad: bool,
) -> Result<SplatGrads, SplatError> {
    let g = render_backward_chunks(
        gpu,
        std::slice::from_ref(splats),
        out,
        state,
        v_rgb,
        v_alpha,
        v_depth,
        pose_grad,
    )?;
    let p = g.params.into_iter().next().ok_or_else(|| {
        SplatError::InvalidSplats("backward pass of one chunk returned none".into())
    })?;
    Ok(SplatGrads {
        means: p.means,
        log_scales: p.log_scales,
        quats: p.quats,
        opacity_logits: p.opacity_logits,
        sh: p.sh,
        projected: g.projected,
        world_to_camera: g.world_to_camera,
        means2d_abs: g.means2d_abs,
    })
}

/// [`render_backward_with`] for a scene rendered with [`render_chunks`]: `chunks` must be the
/// chunks that were rendered; the parameter gradients come back one chunk at a time.
#[allow(clippy::too_many_arguments)]
pub fn render_backward_chunks(
    gpu: &Gpu,
    chunks: &[GpuSplats],
    out: &RenderOutput,
    state: &RenderState,
    v_rgb: &GpuBuffer<f32>,
    v_alpha: &GpuBuffer<f32>,
    v_depth: &GpuBuffer<f32>,
    pose_grad: bool,
) -> Result<ChunkedGrads, SplatError> {
    let (_, n) = chunks_layout(chunks)?;
    if state.forward_only {
        return Err(SplatError::InvalidSplats(
            "backward pass over a frame rendered with RenderOptions::forward_only (no checkpoints)"
                .into(),
        ));
    }
    if n != state.tiles_touched.len() {
        return Err(SplatError::InvalidSplats(format!(
            "backward pass over {n} Gaussians of a frame rendered with {}",
            state.tiles_touched.len()
        )));
    }
    let npix = (out.width as usize) * (out.height as usize);
    if v_rgb.len() != npix * 3 || v_alpha.len() != npix || v_depth.len() != npix {
        return Err(SplatError::InvalidSplats(format!(
            "output gradients have {} / {} / {} values for a {}x{} image",
            v_rgb.len(),
            v_alpha.len(),
            v_depth.len(),
            out.width,
            out.height
        )));
    }
    let client = gpu.client();
    let (tiles_x, tiles_y) = state.camera.tiles();
    // Float atomics add each (tile, Gaussian) sum straight into the per-Gaussian gradient;
    // otherwise every intersection gets a gradient row (zero-filled: only rows in front of each
    // tile's last contributor are written) and a second pass sums each Gaussian's rows.
    let atomic = !row_mode_backward(gpu, state.deterministic);
    let v_proj = gpu.zeros::<f32>(n * project::VPROJ);
    // Buffers a mode leaves untouched (the kernels' `atomic` and `absgrad` are compile-time)
    // are shared placeholders, one slot per binding of a launch, not a buffer (and a fill
    // launch) per call.
    let isect_grads = if atomic {
        gpu.placeholder::<f32>(slot::ISECT_GRADS)
    } else {
        gpu.zeros::<f32>(out.num_intersections * project::VPROJ)
    };
    // The atomic bindings in the row mode (typed `u32`).
    let unused = gpu.placeholder::<u32>(slot::ATOMIC_UNUSED);
    let absgrad = state.absgrad;
    let v_abs = if absgrad {
        gpu.zeros::<f32>(n * 2)
    } else {
        gpu.placeholder::<f32>(slot::V_ABS)
    };
    let isect_abs = if absgrad && !atomic {
        gpu.zeros::<f32>(out.num_intersections * 2)
    } else {
        gpu.placeholder::<f32>(slot::ISECT_ABS)
    };
    rust3r_gpu::profile::mark(gpu, "bwd 0 zero fill");
    // On CUDA, NVRTC gave the backward kernels 80 registers (3 resident cubes per multiprocessor);
    // capped at 64 (4 cubes) they ran 3-6% faster at every bench size (H200, docs/benchmarks/journal.md).
    static BACKWARD_BOUNDS: std::sync::Once = std::sync::Once::new();
    BACKWARD_BOUNDS.call_once(|| rust3r_gpu::cuda_min_blocks_per_sm("rasterize_backward", 4));
    let plane = plane_backward(gpu, state.backward_kernel);
    let batch = if plane.is_some() {
        PLANE_BATCH
    } else {
        backward_batch(gpu, &state.tuning)
    };
    // One cube per chunk of each tile's intersections up to its last contributor, found from
    // the tile ranges (`rasterize::back_chunk`): at most intersections / chunk + tiles cubes.
    let num_tiles = tiles_x * tiles_y;
    let cubes = num_tiles as usize + out.num_intersections / state.chunk as usize;
    let args = || rasterize::BackwardArgsLaunch {
        ranges: state.ranges.arg(),
        sorted_gids: state.sorted_gids.arg(),
        isect_orig: state.isect_orig.arg(),
        proj: state.proj.arg(),
        cam: state.cam.arg(),
        out_alpha: out.alpha.arg(),
        out_last: state.last.arg(),
        tile_last: state.tile_last.arg(),
        ck: state.checkpoints.arg(),
        out_rgb: out.rgb.arg(),
        out_depth: out.depth.arg(),
        v_rgb: v_rgb.arg(),
        v_alpha: v_alpha.arg(),
        v_depth: v_depth.arg(),
        width: out.width,
        height: out.height,
        tiles_x,
        num_tiles,
        chunk: state.chunk,
    };
    // The atomic-mode outputs are the per-Gaussian sums, or (typed `u32`) placeholders in the
    // row mode. In the atomic mode with absgrad off, `v_abs` (a placeholder) is bound but never
    // touched.
    macro_rules! outputs {
        ($v_atomic:expr, $v_abs_atomic:expr) => {
            rasterize::BackwardOutputsLaunch {
                isect_grads: isect_grads.arg(),
                v_atomic: $v_atomic,
                isect_abs: isect_abs.arg(),
                v_abs_atomic: $v_abs_atomic,
            }
        };
    }
    let (count, dim) = (gpu.grid(cubes), CubeDim::new_1d(256));
    match (plane, atomic) {
        (Some(mp), true) => rust3r_gpu::launch!(
            gpu,
            rasterize::rasterize_backward_plane::<f32>(
                client,
                count,
                dim,
                args(),
                outputs!(v_proj.arg(), v_abs.arg()),
                batch,
                mp,
                atomic,
                absgrad
            )
        ),
        (Some(mp), false) => rust3r_gpu::launch!(
            gpu,
            rasterize::rasterize_backward_plane::<u32>(
                client,
                count,
                dim,
                args(),
                outputs!(unused.arg(), unused.arg()),
                batch,
                mp,
                atomic,
                absgrad
            )
        ),
        (None, true) => rust3r_gpu::launch!(
            gpu,
            rasterize::rasterize_backward::<f32>(
                client,
                count,
                dim,
                args(),
                outputs!(v_proj.arg(), v_abs.arg()),
                batch,
                atomic,
                absgrad
            )
        ),
        (None, false) => rust3r_gpu::launch!(
            gpu,
            rasterize::rasterize_backward::<u32>(
                client,
                count,
                dim,
                args(),
                outputs!(unused.arg(), unused.arg()),
                batch,
                atomic,
                absgrad
            )
        ),
    }
    rust3r_gpu::profile::mark(gpu, "bwd 1 rasterize");
    if !atomic && out.num_visible > 0 {
        rust3r_gpu::launch!(
            gpu,
            tiles::sum_isect_grads(
                client,
                gpu.grid_1d(out.num_visible),
                rust3r_gpu::BLOCK_DIM,
                state.sorted_ids.arg(),
                state.offsets.arg(),
                state.tiles_touched.arg(),
                isect_grads.arg(),
                v_proj.arg(),
                isect_abs.arg(),
                v_abs.arg(),
                out.num_visible as u32,
                absgrad,
            )
        );
    }
    rust3r_gpu::profile::mark(gpu, "bwd 2 sum intersections");
    let mut params = Vec::with_capacity(chunks.len());
    let mut cam_sums = Vec::new();
    let mut row0 = 0;
    for splats in chunks {
        let rows = splats.len();
        let k = splats.num_coeffs();
        let p = ParamGrads {
            means: gpu.alloc::<f32>(rows * 3),
            log_scales: gpu.alloc::<f32>(rows * 3),
            quats: gpu.alloc::<f32>(rows * 4),
            opacity_logits: gpu.alloc::<f32>(rows),
            sh: gpu.alloc::<f32>(if state.sh_grad { rows * k * 3 } else { 0 }),
        };
        // Per-Gaussian pose-gradient rows only when the pose gradient is wanted (the kernel's
        // compile-time `pose_grad` leaves the binding untouched otherwise).
        let v_cam = if pose_grad {
            gpu.alloc::<f32>(rows * project::VCAM)
        } else {
            gpu.placeholder::<f32>(slot::V_CAM)
        };
        rust3r_gpu::profile::mark(gpu, "bwd 3a gradient buffers");
        if rows > 0 {
            if state.sh_grad {
                rust3r_gpu::launch!(
                    gpu,
                    project::sh_backward_coeffs(
                        client,
                        gpu.grid_1d(rows * k),
                        rust3r_gpu::BLOCK_DIM,
                        project::ShGradArgsLaunch {
                            means: splats.means.arg(),
                            cam: state.cam.arg(),
                            tiles_touched: state.tiles_touched.arg(),
                            proj: state.proj.arg(),
                            v_proj: v_proj.arg(),
                        },
                        p.sh.arg(),
                        rows as u32,
                        row0 as u32,
                        k as u32,
                        state.active_coeffs,
                    )
                );
            }
            rust3r_gpu::profile::mark(gpu, "bwd 3b SH coefficients");
            rust3r_gpu::launch!(
                gpu,
                project::project_backward(
                    client,
                    gpu.grid_1d(rows),
                    rust3r_gpu::BLOCK_DIM,
                    splats.project_args(gpu, &state.cam, row0, out.width, out.height),
                    project::ProjectGradArgsLaunch {
                        tiles_touched: state.tiles_touched.arg(),
                        proj: state.proj.arg(),
                        v_proj: v_proj.arg(),
                        v_means: p.means.arg(),
                        v_log_scales: p.log_scales.arg(),
                        v_quats: p.quats.arg(),
                        v_opacity_logits: p.opacity_logits.arg(),
                        v_cam: v_cam.arg(),
                    },
                    project::ProjectConfig {
                        num_coeffs: k as u32,
                        active_coeffs: state.active_coeffs,
                        antialiased: state.antialiased,
                        half_sh: splats.sh.is_half(),
                    },
                    pose_grad,
                )
            );
            if pose_grad {
                cam_sums.push(reduce_columns(gpu, &v_cam, project::VCAM, ReduceOp::Sum));
            }
            rust3r_gpu::profile::mark(gpu, "bwd 3c project");
        }
        params.push(p);
        row0 += rows;
    }
    let mut world_to_camera = [[0.0f32; 4]; 3];
    for sum in &cam_sums {
        let cam_sum = gpu.read(sum)?;
        for r in 0..3 {
            for c in 0..3 {
                world_to_camera[r][c] += cam_sum[r * 3 + c];
            }
            world_to_camera[r][3] += cam_sum[9 + r];
        }
    }
    Ok(ChunkedGrads {
        params,
        projected: v_proj,
        world_to_camera,
        means2d_abs: absgrad.then_some(v_abs),
    })
}
