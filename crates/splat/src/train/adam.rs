//! Adam on device buffers (PyTorch's formulation, the one 3DGS and gsplat use):
//! `m = β1 m + (1-β1) g`, `v = β2 v + (1-β2) g²`,
//! `p -= lr / (1-β1^t) * m / (sqrt(v) / sqrt(1-β2^t) + ε)`.
//!
//! Rows can be skipped for Gaussians that were not visible in the step ("visible Adam"):
//! their parameters and moments stay untouched, as with a sparse gradient.

use cubecl::prelude::*;
use rust3r_gpu::{Gpu, GpuBuffer};

#[cube(launch)]
fn adam_step(
    param: &mut [f32],
    grad: &[f32],
    m: &mut [f32],
    v: &mut [f32],
    radii: &[u32],
    len: u32,
    row: u32,
    first_cols: u32,
    lr: f32,
    lr_rest: f32,
    beta1: f32,
    beta2: f32,
    eps: f32,
    bc1: f32,
    bc2_sqrt: f32,
    #[comptime] visible_only: bool,
) {
    let i = rust3r_gpu::global_id();
    if i >= len as usize {
        terminate!();
    }
    let g = i / row as usize;
    if visible_only {
        if radii[g * 2] == 0u32 {
            terminate!();
        }
    }
    let col = (i - g * row as usize) as u32;
    let mut step = lr;
    if col >= first_cols {
        step = lr_rest;
    }
    let gr = grad[i];
    let mi = beta1 * m[i] + (1.0f32 - beta1) * gr;
    let vi = beta2 * v[i] + (1.0f32 - beta2) * gr * gr;
    m[i] = mi;
    v[i] = vi;
    param[i] -= (step / bc1) * mi / (f32::sqrt(vi) / bc2_sqrt + eps);
}

/// Hyper-parameters of one parameter group.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct AdamConfig {
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
}

impl Default for AdamConfig {
    fn default() -> Self {
        // gsplat's trainer uses eps = 1e-15.
        Self {
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-15,
        }
    }
}

/// One Adam update of `param` (row width `row` values per Gaussian) at step `t` (1-based):
/// learning rate `lr` for the first `first_cols` values of each row, `lr_rest` for the others
/// (SH: DC and higher orders). With `visible` (the rasterizer's radii, 2 per Gaussian) rows of
/// culled Gaussians are skipped.
#[allow(clippy::too_many_arguments)]
pub fn adam_update(
    gpu: &Gpu,
    param: &GpuBuffer<f32>,
    grad: &GpuBuffer<f32>,
    m: &GpuBuffer<f32>,
    v: &GpuBuffer<f32>,
    row: usize,
    (first_cols, lr, lr_rest): (usize, f32, f32),
    t: u64,
    cfg: &AdamConfig,
    visible: Option<&GpuBuffer<u32>>,
) {
    let len = param.len();
    assert!(
        grad.len() == len && m.len() == len && v.len() == len,
        "adam buffer lengths"
    );
    if len == 0 {
        return;
    }
    let bc1 = 1.0 - (cfg.beta1 as f64).powf(t as f64);
    let bc2 = 1.0 - (cfg.beta2 as f64).powf(t as f64);
    let dummy;
    let radii = match visible {
        Some(r) => r,
        None => {
            dummy = gpu.zeros::<u32>(1);
            &dummy
        }
    };
    adam_step::launch(
        gpu.client(),
        gpu.grid(len.div_ceil(256)),
        CubeDim::new_1d(256),
        param.arg(),
        grad.arg(),
        m.arg(),
        v.arg(),
        radii.arg(),
        len as u32,
        row as u32,
        first_cols as u32,
        lr,
        lr_rest,
        cfg.beta1,
        cfg.beta2,
        cfg.eps,
        bc1 as f32,
        bc2.sqrt() as f32,
        visible.is_some(),
    );
}
