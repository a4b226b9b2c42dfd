//! Per-adapter choices of the forward and backward passes, and the placeholder slots of
//! unused launch arguments.

use rust3r_gpu::Gpu;

use super::{BackwardKernel, RasterTuning, RenderOptions};

/// [`Gpu::placeholder`] slots of the arguments a launch leaves unused; the arguments of one launch
/// take distinct slots.
pub(super) mod slot {
    /// Projection (forward and backward): `sh_rest` with binary32 SH.
    pub const SH_REST: usize = 0;
    /// Backward rasterizer: the per-intersection gradient rows, in the atomic mode.
    pub const ISECT_GRADS: usize = 0;
    /// Backward rasterizer: the per-intersection absolute gradients, without absgrad or in the
    /// atomic mode.
    pub const ISECT_ABS: usize = 1;
    /// Backward rasterizer: the per-Gaussian absolute gradients, without absgrad.
    pub const V_ABS: usize = 2;
    /// Backward rasterizer: the atomic-mode bindings in the row mode.
    pub const ATOMIC_UNUSED: usize = 3;
    /// [`super::super::RenderState::isect_orig`] outside the row mode (bound by the backward
    /// rasterizer beside the slots above).
    pub const ISECT_ORIG: usize = 4;
    /// Projection backward: the pose-gradient rows, without the pose gradient (bound beside
    /// [`SH_REST`]).
    pub const V_CAM: usize = 5;
}

/// Whether the forward rasterizer tests each Gaussian's row reach before its exponential
/// (`rasterize::row_reach2`): it pays where Gaussians span few rows of a tile, which the mean
/// number of tiles per visible Gaussian measures. On the H100 (docs/benchmarks/journal.md, 2026-11-26) the
/// test took the 10M-Gaussian forward pass from 6.9 to 5.6 ms at 648x420 (1.8 tiles per
/// Gaussian) and from 5.2 to 4.9 ms at 1920x1080 (3.3), and cost 5-10% on the 138k scene (4.5 and
/// 20 tiles per Gaussian) and at 1M, 1920x1080 (7.4).
pub(super) fn row_skip(visible: usize, isects: usize) -> bool {
    isects < 4 * visible
}

/// Batches of 256 intersections a tile's forward workgroup blends per dispatch:
/// `max_batches_per_dispatch`, at most [`LLVMPIPE_MAX_BATCHES`] on lavapipe
/// ([`Gpu::is_llvmpipe`]). There one workgroup looping over 256 or more batches (three barriers
/// each) left the last 8 pixels of its tile unwritten (real_splats::guitar_compressed_ply: a tile
/// of the guitar at 48x64); 192 and fewer were exact.
pub(super) fn batches_per_dispatch(gpu: &Gpu, opts: &RenderOptions) -> u32 {
    let k = opts.max_batches_per_dispatch.max(1);
    if gpu.is_llvmpipe() {
        k.min(LLVMPIPE_MAX_BATCHES)
    } else {
        k
    }
}

/// See [`batches_per_dispatch`]: half the longest loop measured exact on lavapipe.
pub(super) const LLVMPIPE_MAX_BATCHES: u32 = 96;

/// Whether the forward rasterizer stages each batch as 4-vectors in shared memory
/// (`rasterize::rasterize_forward`): through CUDA, not through Vulkan (docs/benchmarks/journal.md,
/// 2026-11-27), unless [`RasterTuning::vec_shared`] says otherwise.
pub(super) fn vec_shared(gpu: &Gpu, tuning: &RasterTuning) -> bool {
    tuning.vec_shared.unwrap_or_else(|| gpu.is_cuda())
}

/// Whether the backward pass keeps one gradient row per intersection (summed per Gaussian in a
/// fixed order): when asked to be deterministic, or where the adapter has no float atomics.
pub(super) fn row_mode_backward(gpu: &Gpu, deterministic: bool) -> bool {
    deterministic || !gpu.f32_atomic_add()
}

/// Gaussians per backward batch that fit the device's shared memory: the largest of 16, 8, 4
/// that fits, at most [`RasterTuning::backward_batch_cap`] (A/B runs of the shared-memory
/// footprint).
pub(super) fn backward_batch(gpu: &Gpu, tuning: &RasterTuning) -> usize {
    let cap = tuning.backward_batch_cap.unwrap_or(16);
    let bytes = gpu.max_shared_memory();
    // floats: 12 B (staged Gaussians) + max(2 * 256 B, 2560) (pairs) + 1024 (pixel grads) + 512 (absgrad)
    let need = |b: usize| 4 * (12 * b + (2 * 256 * b).max(2560) + 1024 + 512);
    [16usize, 8, 4]
        .into_iter()
        .find(|&b| b <= cap && need(b) <= bytes)
        .unwrap_or(4)
}

/// Gaussians per batch of the plane-reduction backward (one unit per (Gaussian, component)
/// adds the plane partials, so `10 * PLANE_BATCH <= 256`).
pub(super) const PLANE_BATCH: usize = 16;

/// `Some(max planes per 256-unit cube)` when the plane-reduction backward runs
/// (`GpuTuning::subgroups` off turns subgroups off for the device).
pub(super) fn plane_backward(gpu: &Gpu, kernel: BackwardKernel) -> Option<usize> {
    match kernel {
        BackwardKernel::Portable => return None,
        // On CUDA the portable kernel was faster at every size measured (H100, 1920x1080:
        // 3.2 vs 5.0 ms forward+backward at 138k Gaussians, 18.4 vs 21.9 ms at 10M; docs/benchmarks/journal.md).
        BackwardKernel::Auto if gpu.is_cuda() => return None,
        // Elsewhere the plane path wins at every image size measured: through Vulkan on the H100
        // at 10M Gaussians, 648x420 (1107 tiles), 15.9 ms forward+backward against 18.7-20.5 ms
        // for the shared-memory kernel (docs/benchmarks/journal.md, 2026-11-26). An earlier H200 run had kept
        // it off below 2048 tiles, when the backward still ran one cube per tile.
        _ => {}
    }
    let (min, _) = gpu.plane_sizes_dividing(256)?;
    let max_planes = (256 / min) as usize;
    let need = 4 * (12 * PLANE_BATCH + max_planes * PLANE_BATCH * 12);
    (need <= gpu.max_shared_memory()).then_some(max_planes)
}
