//! Device-side building blocks of densification: rebuilding every per-Gaussian buffer from a
//! `parent` list (copies, duplicates, split children, relocations), split-child offsets,
//! row scatter, the ADC gradient statistics and MCMC's position noise.
//!
//! A rebuild is described by two arrays over the new Gaussians: `parent[j]`, the old row it
//! comes from, and `variant[j]`: 0 = the old Gaussian itself (keeps its optimizer state),
//! 1 = a fresh copy (optimizer state zeroed), 2 / 3 = first / second child of a split
//! (scales divided by 1.6, mean moved by a sample of the parent's Gaussian, state zeroed),
//! 4 = an MCMC-relocated row (parameters of the parent, its own optimizer state, as gsplat).
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
use rust3r_gpu::half::half_bits_at;
use rust3r_gpu::random::normal;
use rust3r_gpu::{Gpu, GpuBuffer};

/// `dst[index[j]] = values[j]` row-wise: [`rust3r_gpu::gather::scatter_rows`], under the name
/// the trainer calls it by.
pub use rust3r_gpu::gather::scatter_rows as scatter;

/// Rows of 32-bit words gathered from their parents, copied bit for bit (f32 parameters and
/// packed bf16 moments alike); with `zero_fresh`, rows of new Gaussians become zero words
/// (0.0 as f32) and relocated rows keep their own optimizer state (gsplat).
#[cube(launch)]
fn gather_rows(
    src: &[u32],
    parent: &[u32],
    variant: &[u32],
    dst: &mut [u32],
    n_new: u32,
    row: u32,
    #[comptime] zero_fresh: bool,
) {
    let i = rust3r_gpu::global_id();
    let r = row as usize;
    if i >= (n_new as usize) * r {
        terminate!();
    }
    let j = i / r;
    let (keep, s) = rebuild_source(parent, variant, j, i - j * r, r, i, zero_fresh);
    let mut out = 0u32;
    if keep {
        out = src[s];
    }
    dst[i] = out;
}

/// Where entry `k` of new row `j` (rows of `r` entries; `own` is the entry's own index) comes
/// from: `(keep, index)`. The parent's entry; with `zero_fresh` a new row's entries are not
/// kept (zero) and a relocated row keeps its own (its parameters come from the parent, its
/// optimizer state is its own, as in gsplat).
#[cube]
fn rebuild_source(
    parent: &[u32],
    variant: &[u32],
    j: usize,
    k: usize,
    r: usize,
    own: usize,
    #[comptime] zero_fresh: bool,
) -> (bool, usize) {
    let mut keep = true;
    let mut s = (parent[j] as usize) * r + k;
    if zero_fresh {
        let var = variant[j];
        if var == 4u32 {
            s = own;
        } else if var != 0u32 {
            keep = false;
        }
    }
    (keep, s)
}

/// Split children: `mean += R diag(exp(s)) n` with the parent's (already gathered) values,
/// then `log_scale -= ln 1.6`.
#[cube(launch)]
fn split_children(
    means: &mut [f32],
    log_scales: &mut [f32],
    quats: &[f32],
    variant: &[u32],
    n_new: u32,
    seed: u32,
) {
    let j = rust3r_gpu::global_id();
    if j >= n_new as usize {
        terminate!();
    }
    let var = variant[j];
    if var < 2u32 || var > 3u32 {
        terminate!();
    }
    let qw = quats[j * 4];
    let qx = quats[j * 4 + 1];
    let qy = quats[j * 4 + 2];
    let qz = quats[j * 4 + 3];
    let inv = 1.0f32 / f32::sqrt(qw * qw + qx * qx + qy * qy + qz * qz);
    let w = qw * inv;
    let x = qx * inv;
    let y = qy * inv;
    let z = qz * inv;
    let sx = f32::exp(log_scales[j * 3]);
    let sy = f32::exp(log_scales[j * 3 + 1]);
    let sz = f32::exp(log_scales[j * 3 + 2]);
    let base = (j as u32) * 3u32;
    let nx = normal(seed, base) * sx;
    let ny = normal(seed, base + 1u32) * sy;
    let nz = normal(seed, base + 2u32) * sz;
    // R n, with R the rotation of the unit quaternion (w, x, y, z).
    means[j * 3] += (1.0f32 - 2.0f32 * (y * y + z * z)) * nx
        + 2.0f32 * (x * y - w * z) * ny
        + 2.0f32 * (x * z + w * y) * nz;
    means[j * 3 + 1] += 2.0f32 * (x * y + w * z) * nx
        + (1.0f32 - 2.0f32 * (x * x + z * z)) * ny
        + 2.0f32 * (y * z - w * x) * nz;
    means[j * 3 + 2] += 2.0f32 * (x * z - w * y) * nx
        + 2.0f32 * (y * z + w * x) * ny
        + (1.0f32 - 2.0f32 * (x * x + y * y)) * nz;
    let shrink = f32::ln(1.6f32);
    log_scales[j * 3] -= shrink;
    log_scales[j * 3 + 1] -= shrink;
    log_scales[j * 3 + 2] -= shrink;
}

/// ADC statistics: `grad2d[i] += |d L / d mean2d| * (W/2, H/2)` (gsplat's normalisation to
/// NDC-like units) and `count[i] += 1` for every Gaussian visible in the step. The 2D gradient
/// of Gaussian `i` is `v_proj[i * stride..][..2]` (the projected gradients, or the absgrad sums).
#[cube(launch)]
fn accumulate_grad2d(
    v_proj: &[f32],
    stride: u32,
    radii: &[u32],
    grad2d: &mut [f32],
    count: &mut [f32],
    n: u32,
    half_w: f32,
    half_h: f32,
) {
    let i = rust3r_gpu::global_id();
    if i >= n as usize {
        terminate!();
    }
    if radii[i * 2] > 0u32 {
        let o = i * stride as usize;
        let gx = v_proj[o] * half_w;
        let gy = v_proj[o + 1] * half_h;
        grad2d[i] += f32::sqrt(gx * gx + gy * gy);
        count[i] += 1.0f32;
    }
}

/// ADC decision per Gaussian: how many rows it becomes (0, 1 or 2) and which variant.
/// `flags[i]`: bit 0 = parent kept, bit 1 = duplicated, bit 2 = split child 0 kept,
/// bit 3 = split child 1 kept.
#[cube(launch)]
fn adc_classify(
    grad2d: &[f32],
    count: &[f32],
    error_score: &[f32],
    log_scales: &[f32],
    opacity_logits: &[f32],
    counts: &mut [u32],
    flags: &mut [u32],
    n: u32,
    grad_threshold: f32,
    grow_scale: f32,
    prune_opacity_logit: f32,
    prune_scale: f32,
    check_big: u32,
    grow: u32,
    min_error_pixels: f32,
) {
    let i = rust3r_gpu::global_id();
    if i >= n as usize {
        terminate!();
    }
    let c = f32::max(count[i], 1.0f32);
    let g = grad2d[i] / c;
    let smax = f32::exp(f32::max(
        f32::max(log_scales[i * 3], log_scales[i * 3 + 1]),
        log_scales[i * 3 + 2],
    ));
    let consistent = error_score[i] / c >= min_error_pixels;
    let high = grow == 1u32 && g > grad_threshold && consistent;
    let small = smax <= grow_scale;
    let low_opacity = opacity_logits[i] < prune_opacity_logit;
    let too_big = check_big == 1u32 && smax > prune_scale;
    let child_too_big = check_big == 1u32 && smax / 1.6f32 > prune_scale;
    let mut f = 0u32;
    let mut k = 0u32;
    if high && !small {
        if !(low_opacity || child_too_big) {
            f = 12u32;
            k = 2u32;
        }
    } else {
        if !(low_opacity || too_big) {
            f = 1u32;
            k = 1u32;
            if high {
                f = 3u32;
                k = 2u32;
            }
        }
    }
    counts[i] = k;
    flags[i] = f;
}

/// Writes the rebuild description of an ADC step at each Gaussian's scanned offset.
#[cube(launch)]
fn adc_emit(flags: &[u32], offsets: &[u32], parent: &mut [u32], variant: &mut [u32], n: u32) {
    let i = rust3r_gpu::global_id();
    if i >= n as usize {
        terminate!();
    }
    let f = flags[i];
    let mut at = offsets[i] as usize;
    if (f & 1u32) != 0u32 {
        parent[at] = i as u32;
        variant[at] = 0u32;
        at += 1;
    }
    if (f & 2u32) != 0u32 {
        parent[at] = i as u32;
        variant[at] = 1u32;
        at += 1;
    }
    if (f & 4u32) != 0u32 {
        parent[at] = i as u32;
        variant[at] = 2u32;
        at += 1;
        parent[at] = i as u32;
        variant[at] = 3u32;
    }
}

/// MCMC position noise: `mean += Σ n · sigmoid(-100 (opacity - 0.995)) · scale` with Σ the
/// Gaussian's covariance `R S² Rᵀ` (gsplat's `inject_noise_to_position`).
#[cube(launch)]
fn position_noise(
    means: &mut [f32],
    log_scales: &[f32],
    quats: &[f32],
    opacity_logits: &[f32],
    n: u32,
    scale: f32,
    seed: u32,
) {
    let j = rust3r_gpu::global_id();
    if j >= n as usize {
        terminate!();
    }
    let opa = 1.0f32 / (1.0f32 + f32::exp(-opacity_logits[j]));
    let gate = 1.0f32 / (1.0f32 + f32::exp(-100.0f32 * ((1.0f32 - opa) - 0.995f32)));
    let qw = quats[j * 4];
    let qx = quats[j * 4 + 1];
    let qy = quats[j * 4 + 2];
    let qz = quats[j * 4 + 3];
    let inv = 1.0f32 / f32::sqrt(qw * qw + qx * qx + qy * qy + qz * qz);
    let w = qw * inv;
    let x = qx * inv;
    let y = qy * inv;
    let z = qz * inv;
    let r00 = 1.0f32 - 2.0f32 * (y * y + z * z);
    let r01 = 2.0f32 * (x * y - w * z);
    let r02 = 2.0f32 * (x * z + w * y);
    let r10 = 2.0f32 * (x * y + w * z);
    let r11 = 1.0f32 - 2.0f32 * (x * x + z * z);
    let r12 = 2.0f32 * (y * z - w * x);
    let r20 = 2.0f32 * (x * z - w * y);
    let r21 = 2.0f32 * (y * z + w * x);
    let r22 = 1.0f32 - 2.0f32 * (x * x + y * y);
    let s0 = f32::exp(2.0f32 * log_scales[j * 3]);
    let s1 = f32::exp(2.0f32 * log_scales[j * 3 + 1]);
    let s2 = f32::exp(2.0f32 * log_scales[j * 3 + 2]);
    let base = (j as u32) * 3u32;
    let k = gate * scale;
    let n0 = normal(seed, base) * k;
    let n1 = normal(seed, base + 1u32) * k;
    let n2 = normal(seed, base + 2u32) * k;
    // Σ n = R (S² (Rᵀ n))
    let t0 = (r00 * n0 + r10 * n1 + r20 * n2) * s0;
    let t1 = (r01 * n0 + r11 * n1 + r21 * n2) * s1;
    let t2 = (r02 * n0 + r12 * n1 + r22 * n2) * s2;
    means[j * 3] += r00 * t0 + r01 * t1 + r02 * t2;
    means[j * 3 + 1] += r10 * t0 + r11 * t1 + r12 * t2;
    means[j * 3 + 2] += r20 * t0 + r21 * t1 + r22 * t2;
}

/// New buffer of `parent.len()` rows of width `row` gathered from `src`; with `zero_fresh`
/// rows whose variant is not 0 are zero (optimizer moments of new Gaussians).
pub fn rebuild(
    gpu: &Gpu,
    src: &GpuBuffer<f32>,
    parent: &GpuBuffer<u32>,
    variant: &GpuBuffer<u32>,
    row: usize,
    zero_fresh: bool,
) -> GpuBuffer<f32> {
    rebuild_words(
        gpu,
        &src.clone().cast::<u32>(),
        parent,
        variant,
        row,
        zero_fresh,
    )
    .cast::<f32>()
}

/// [`rebuild`] for buffers of 32-bit words (packed moments), copied bit for bit.
pub fn rebuild_words(
    gpu: &Gpu,
    src: &GpuBuffer<u32>,
    parent: &GpuBuffer<u32>,
    variant: &GpuBuffer<u32>,
    row: usize,
    zero_fresh: bool,
) -> GpuBuffer<u32> {
    let n_new = parent.len();
    let dst = gpu.alloc::<u32>(n_new * row);
    if n_new * row > 0 {
        gather_rows::launch(
            gpu.client(),
            gpu.grid_1d(n_new * row),
            rust3r_gpu::BLOCK_DIM,
            src.arg(),
            parent.arg(),
            variant.arg(),
            dst.arg(),
            n_new as u32,
            row as u32,
            zero_fresh,
        );
    }
    dst
}

/// Rows of `row` 16-bit entries each (half-float parameters, or the 8-bit moment pairs of
/// [`super::adam::Moments::Sh8`]), packed two per word back to back, gathered from their
/// parents: one unit per output word. With `zero_fresh` the rules of [`gather_rows`] apply
/// (new rows zero, relocated rows keep their own entries).
#[cube(launch)]
fn gather_half_rows(
    src: &[u32],
    parent: &[u32],
    variant: &[u32],
    dst: &mut [u32],
    n_new: u32,
    row: u32,
    #[comptime] zero_fresh: bool,
) {
    let w = rust3r_gpu::global_id();
    let r = row as usize;
    let total = (n_new as usize) * r;
    if w * 2 >= total {
        terminate!();
    }
    let mut out = 0u32;
    #[unroll]
    for h in 0..2u32 {
        let v = w * 2 + h as usize;
        if v < total {
            let j = v / r;
            let (keep, s) = rebuild_source(parent, variant, j, v - j * r, r, v, zero_fresh);
            if keep {
                out |= half_bits_at(src, s) << (h * 16u32);
            }
        }
    }
    dst[w] = out;
}

/// New buffer of `parent.len()` rows of `row` 16-bit entries (packed as in
/// [`crate::ShCoeffs::Half`]), each row copied from its parent's; with `variant` (moments)
/// new rows are zero and relocated rows keep their own entries.
pub fn rebuild_half(
    gpu: &Gpu,
    src: &GpuBuffer<u32>,
    parent: &GpuBuffer<u32>,
    variant: Option<&GpuBuffer<u32>>,
    row: usize,
) -> GpuBuffer<u32> {
    let words = (parent.len() * row).div_ceil(2);
    let dst = gpu.alloc::<u32>(words);
    if words > 0 {
        gather_half_rows::launch(
            gpu.client(),
            gpu.grid_1d(words),
            rust3r_gpu::BLOCK_DIM,
            src.arg(),
            parent.arg(),
            variant.unwrap_or(parent).arg(),
            dst.arg(),
            parent.len() as u32,
            row as u32,
            variant.is_some(),
        );
    }
    dst
}

/// Apply split-child offsets in place (rows with variant 2 or 3).
pub fn apply_splits(
    gpu: &Gpu,
    means: &GpuBuffer<f32>,
    log_scales: &GpuBuffer<f32>,
    quats: &GpuBuffer<f32>,
    variant: &GpuBuffer<u32>,
    seed: u32,
) {
    let n = variant.len();
    if n > 0 {
        split_children::launch(
            gpu.client(),
            gpu.grid_1d(n),
            rust3r_gpu::BLOCK_DIM,
            means.arg(),
            log_scales.arg(),
            quats.arg(),
            variant.arg(),
            n as u32,
            seed,
        );
    }
}

/// See [`accumulate_grad2d`].
pub fn accumulate(
    gpu: &Gpu,
    v_proj: &GpuBuffer<f32>,
    stride: u32,
    radii: &GpuBuffer<u32>,
    grad2d: &GpuBuffer<f32>,
    count: &GpuBuffer<f32>,
    width: u32,
    height: u32,
) {
    let n = grad2d.len();
    if n > 0 {
        accumulate_grad2d::launch(
            gpu.client(),
            gpu.grid_1d(n),
            rust3r_gpu::BLOCK_DIM,
            v_proj.arg(),
            stride,
            radii.arg(),
            grad2d.arg(),
            count.arg(),
            n as u32,
            width as f32 * 0.5,
            height as f32 * 0.5,
        );
    }
}

/// Thresholds of one ADC refinement (already in world units / logits).
#[derive(Clone, Copy, Debug)]
pub struct AdcThresholds {
    pub grad2d: f32,
    pub grow_scale: f32,
    pub prune_opacity: f32,
    pub prune_scale: f32,
    pub check_big: bool,
    pub grow: bool,
    /// Grow only Gaussians with at least this many high-error pixels per visible view in
    /// `error_score` ([`super::consistency`]); 0 turns the condition off.
    pub min_error_pixels: f32,
}

/// ADC classification, scan and emission: returns `(parent, variant)` of the new set.
pub fn adc_plan(
    gpu: &Gpu,
    grad2d: &GpuBuffer<f32>,
    count: &GpuBuffer<f32>,
    error_score: &GpuBuffer<f32>,
    log_scales: &GpuBuffer<f32>,
    opacity_logits: &GpuBuffer<f32>,
    th: &AdcThresholds,
) -> Result<(GpuBuffer<u32>, GpuBuffer<u32>), rust3r_gpu::GpuError> {
    let n = grad2d.len();
    if n == 0 {
        return Ok((gpu.alloc(0), gpu.alloc(0)));
    }
    let counts = gpu.alloc::<u32>(n);
    let flags = gpu.alloc::<u32>(n);
    let p = th.prune_opacity.clamp(1e-7, 1.0 - 1e-7);
    adc_classify::launch(
        gpu.client(),
        gpu.grid_1d(n),
        rust3r_gpu::BLOCK_DIM,
        grad2d.arg(),
        count.arg(),
        error_score.arg(),
        log_scales.arg(),
        opacity_logits.arg(),
        counts.arg(),
        flags.arg(),
        n as u32,
        th.grad2d,
        th.grow_scale,
        (p / (1.0 - p)).ln(),
        th.prune_scale,
        th.check_big as u32,
        th.grow as u32,
        th.min_error_pixels,
    );
    let offsets = rust3r_gpu::scan::exclusive_scan(gpu, &counts);
    let total = gpu.read_at(&offsets, n - 1)? as usize + gpu.read_at(&counts, n - 1)? as usize;
    let parent = gpu.alloc::<u32>(total);
    let variant = gpu.alloc::<u32>(total);
    if total > 0 {
        adc_emit::launch(
            gpu.client(),
            gpu.grid_1d(n),
            rust3r_gpu::BLOCK_DIM,
            flags.arg(),
            offsets.arg(),
            parent.arg(),
            variant.arg(),
            n as u32,
        );
    }
    Ok((parent, variant))
}

/// MCMC position noise (in place on `means`).
pub fn add_position_noise(
    gpu: &Gpu,
    means: &GpuBuffer<f32>,
    log_scales: &GpuBuffer<f32>,
    quats: &GpuBuffer<f32>,
    opacity_logits: &GpuBuffer<f32>,
    scale: f32,
    seed: u32,
) {
    let n = opacity_logits.len();
    if n > 0 {
        position_noise::launch(
            gpu.client(),
            gpu.grid_1d(n),
            rust3r_gpu::BLOCK_DIM,
            means.arg(),
            log_scales.arg(),
            quats.arg(),
            opacity_logits.arg(),
            n as u32,
            scale,
            seed,
        );
    }
}

#[cube(launch)]
fn clamp_max_kernel(x: &mut [f32], n: u32, max: f32) {
    let i = rust3r_gpu::global_id();
    if i >= n as usize {
        terminate!();
    }
    x[i] = f32::min(x[i], max);
}

/// `x = min(x, max)` in place.
pub fn clamp_max(gpu: &Gpu, x: &GpuBuffer<f32>, max: f32) {
    let n = x.len();
    if n > 0 {
        clamp_max_kernel::launch(
            gpu.client(),
            gpu.grid_1d(n),
            rust3r_gpu::BLOCK_DIM,
            x.arg(),
            n as u32,
            max,
        );
    }
}
