//! Multi-view consistent densification (after FastGS, Ren et al. 2025, "view-consistent
//! densification"): a Gaussian may only grow where the reconstruction error is high in the
//! views that see it, not merely where one view's gradient is large.
//!
//! Per training view: the per-pixel L1 error `e = mean_c |render - target|` is normalised to
//! `[0, 1]` by its minimum and maximum over the image, pixels above `tau` form the view's
//! high-error mask, and each visible Gaussian adds the number of high-error pixels inside its
//! screen footprint (the axis-aligned box of its radii, counted through a summed-area table)
//! to its score. ADC then densifies a Gaussian only when its mean score per visible view
//! reaches a pixel count ([`super::ConsistencyConfig`]) as well as the gradient threshold.
// `#[cube]` kernels are written the way CubeCL's frontend expands them (see densify.rs).
#![allow(
    clippy::manual_div_ceil,
    clippy::assign_op_pattern,
    clippy::collapsible_if,
    clippy::too_many_arguments
)]

use cubecl::prelude::*;
use rust3r_gpu::reduce::{ReduceOp, reduce_columns};
use rust3r_gpu::{Gpu, GpuBuffer};

use crate::kernels::project::PROJ;

/// One thread per row: the per-pixel error and the row's minimum and maximum.
#[cube(launch)]
fn error_rows(
    rendered: &[f32],
    target: &[f32],
    err: &mut [f32],
    row_lo: &mut [f32],
    row_hi: &mut [f32],
    width: u32,
    height: u32,
) {
    let y = rust3r_gpu::global_id();
    if y >= height as usize {
        terminate!();
    }
    let w = width as usize;
    let mut lo = 1000000.0f32;
    let mut hi = 0.0f32;
    for x in 0..w {
        let p = y * w + x;
        let e = (f32::abs(rendered[p * 3] - target[p * 3])
            + f32::abs(rendered[p * 3 + 1] - target[p * 3 + 1])
            + f32::abs(rendered[p * 3 + 2] - target[p * 3 + 2]))
            * (1.0f32 / 3.0f32);
        err[p] = e;
        lo = min(lo, e);
        hi = max(hi, e);
    }
    row_lo[y] = lo;
    row_hi[y] = hi;
}

/// One thread per row: the row's running count of high-error pixels (the error normalised by
/// the image's range `[range_lo[0], range_hi[0]]`) into the summed-area table
/// (`(w + 1) x (h + 1)`, first row and column zero).
#[cube(launch)]
fn mask_rows(
    err: &[f32],
    range_lo: &[f32],
    range_hi: &[f32],
    sat: &mut [f32],
    width: u32,
    height: u32,
    tau: f32,
) {
    let y = rust3r_gpu::global_id();
    if y >= height as usize {
        terminate!();
    }
    let lo = range_lo[0];
    let hi = range_hi[0];
    let inv = 1.0f32 / (hi - lo + 1.0e-8f32);
    let w = width as usize;
    let stride = w + 1;
    let mut run = 0.0f32;
    for x in 0..w {
        if (err[y * w + x] - lo) * inv > tau {
            run += 1.0f32;
        }
        sat[(y + 1) * stride + x + 1] = run;
    }
}

/// One thread per column: running sums down the column complete the summed-area table.
#[cube(launch)]
fn sat_cols(sat: &mut [f32], width: u32, height: u32) {
    let x = rust3r_gpu::global_id();
    if x >= width as usize {
        terminate!();
    }
    let stride = (width as usize) + 1;
    let h = height as usize;
    let mut run = 0.0f32;
    for y in 0..h {
        let i = (y + 1) * stride + x + 1;
        run += sat[i];
        sat[i] = run;
    }
}

/// One thread per Gaussian: `score[i] += ` high-error pixels in its footprint box.
#[cube(launch)]
fn footprint_score(
    proj: &[f32],
    radii: &[u32],
    sat: &[f32],
    score: &mut [f32],
    n: u32,
    width: u32,
    height: u32,
) {
    let i = rust3r_gpu::global_id();
    if i >= n as usize {
        terminate!();
    }
    let rx = radii[i * 2];
    let ry = radii[i * 2 + 1];
    if rx > 0u32 {
        let cx = proj[i * 10];
        let cy = proj[i * 10 + 1];
        let wf = f32::cast_from(width);
        let hf = f32::cast_from(height);
        let rxf = f32::cast_from(rx);
        let ryf = f32::cast_from(ry);
        let x0 = u32::cast_from(clamp((cx - rxf).floor(), 0.0f32, wf)) as usize;
        let x1 = u32::cast_from(clamp((cx + rxf).floor() + 1.0f32, 0.0f32, wf)) as usize;
        let y0 = u32::cast_from(clamp((cy - ryf).floor(), 0.0f32, hf)) as usize;
        let y1 = u32::cast_from(clamp((cy + ryf).floor() + 1.0f32, 0.0f32, hf)) as usize;
        let stride = (width as usize) + 1;
        let c = sat[y1 * stride + x1] - sat[y0 * stride + x1] - sat[y1 * stride + x0]
            + sat[y0 * stride + x0];
        score[i] += c;
    }
}

/// Adds one view's high-error pixel counts to `score` (see the module docs): `rendered` and
/// `target` interleaved RGB at `width x height`, `proj` / `radii` the render's projected
/// Gaussians and radii, `tau` the threshold on the normalised error.
#[allow(clippy::too_many_arguments)]
pub fn accumulate_error_score(
    gpu: &Gpu,
    rendered: &GpuBuffer<f32>,
    target: &GpuBuffer<f32>,
    width: u32,
    height: u32,
    proj: &GpuBuffer<f32>,
    radii: &GpuBuffer<u32>,
    score: &GpuBuffer<f32>,
    tau: f32,
) {
    const _: () = assert!(PROJ == 10, "footprint_score reads mean2d at PROJ stride 10");
    let (w, h) = (width as usize, height as usize);
    let n = score.len();
    if w == 0 || h == 0 || n == 0 {
        return;
    }
    let err = gpu.alloc::<f32>(w * h);
    let lo = gpu.alloc::<f32>(h);
    let hi = gpu.alloc::<f32>(h);
    let sat = gpu.zeros::<f32>((w + 1) * (h + 1));
    let bd = rust3r_gpu::BLOCK_DIM;
    error_rows::launch(
        gpu.client(),
        gpu.grid_1d(h),
        bd,
        rendered.arg(),
        target.arg(),
        err.arg(),
        lo.arg(),
        hi.arg(),
        width,
        height,
    );
    // The image's error range: one reduction of the row extremes.
    let lo = reduce_columns(gpu, &lo, 1, ReduceOp::Min);
    let hi = reduce_columns(gpu, &hi, 1, ReduceOp::Max);
    mask_rows::launch(
        gpu.client(),
        gpu.grid_1d(h),
        bd,
        err.arg(),
        lo.arg(),
        hi.arg(),
        sat.arg(),
        width,
        height,
        tau,
    );
    sat_cols::launch(gpu.client(), gpu.grid_1d(w), bd, sat.arg(), width, height);
    footprint_score::launch(
        gpu.client(),
        gpu.grid_1d(n),
        bd,
        proj.arg(),
        radii.arg(),
        sat.arg(),
        score.arg(),
        n as u32,
        width,
        height,
    );
}

/// Host reference of [`accumulate_error_score`] in f64 (tests): the score one view adds to
/// each Gaussian, from `mean2d` (`[x, y]` per Gaussian) and `radii` (`[rx, ry]`, 0 = culled).
pub fn error_score_reference(
    rendered: &[f32],
    target: &[f32],
    width: usize,
    height: usize,
    mean2d: &[[f32; 2]],
    radii: &[[u32; 2]],
    tau: f32,
) -> Vec<f64> {
    let err: Vec<f64> = (0..width * height)
        .map(|p| {
            (0..3)
                .map(|c| (rendered[p * 3 + c] as f64 - target[p * 3 + c] as f64).abs())
                .sum::<f64>()
                / 3.0
        })
        .collect();
    let lo = err.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = err.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let high: Vec<bool> = err
        .iter()
        .map(|&e| (e - lo) / (hi - lo + 1e-8) > tau as f64)
        .collect();
    mean2d
        .iter()
        .zip(radii)
        .map(|(m, r)| {
            if r[0] == 0 {
                return 0.0;
            }
            let (cx, cy) = (m[0] as f64, m[1] as f64);
            let span = |c: f64, r: u32, max: usize| {
                let a = (c - r as f64).floor().clamp(0.0, max as f64) as usize;
                let b = ((c + r as f64).floor() + 1.0).clamp(0.0, max as f64) as usize;
                a..b
            };
            let mut count = 0.0;
            for y in span(cy, r[1], height) {
                for x in span(cx, r[0], width) {
                    count += high[y * width + x] as u32 as f64;
                }
            }
            count
        })
        .collect()
}
