//! Optional per-view training terms for captures with a depth sensor and changing exposure:
//!
//! * **Depth** ([`depth_loss`]): `k · Σ_p w_p |e_p − t_p|` over the pixels with a measurement
//!   (`t_p > 0`) and enough coverage (`α_p > min_alpha`), where `e = D / α` is the rasterizer's
//!   expected depth (its alpha-weighted depth `D` over the accumulated opacity `α`) and `w_p`
//!   an optional per-pixel weight (1 without one; e.g. the network's confidence for predicted
//!   depth). The gradients `∂/∂D = k w s / α` and `∂/∂α = −k w s e / α` (`s` the sign of
//!   `e − t`, 0 at ties) feed the rasterizer's depth and alpha backward.
//! * **Exposure** ([`apply_exposure`], [`exposure_backward`]): an affine colour transform per
//!   image, `c' = A c + b` (`A` 3x3, `b` 3; parameters `[A row-major, b]`), applied to the render
//!   before the photometric loss. Its backward gives the render's gradient `Aᵀ g` and the 12
//!   parameter gradients `Σ_p g cᵀ`, `Σ_p g` (column sums on the device, 12 values read back).
//!
//! The identity transform is [`EXPOSURE_IDENTITY`].

use cubecl::prelude::*;
use rust3r_gpu::reduce::{ReduceOp, reduce_columns};
use rust3r_gpu::{Gpu, GpuBuffer};

use crate::SplatError;

/// The identity exposure transform (`A = I`, `b = 0`).
pub const EXPOSURE_IDENTITY: [f32; 12] =
    [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0];

#[cube(launch)]
fn exposure_forward_kernel(rgb: &[f32], params: &[f32], out: &mut [f32], npix: u32) {
    let p = rust3r_gpu::global_id();
    if p >= npix as usize {
        terminate!();
    }
    let r = rgb[p * 3];
    let g = rgb[p * 3 + 1];
    let b = rgb[p * 3 + 2];
    for c in 0..3usize {
        out[p * 3 + c] =
            params[c * 3] * r + params[c * 3 + 1] * g + params[c * 3 + 2] * b + params[9 + c];
    }
}

#[cube(launch)]
fn exposure_backward_kernel(
    rgb: &[f32],
    params: &[f32],
    grad: &[f32],
    v_rgb: &mut [f32],
    partial: &mut [f32],
    npix: u32,
) {
    let p = rust3r_gpu::global_id();
    if p >= npix as usize {
        terminate!();
    }
    let g0 = grad[p * 3];
    let g1 = grad[p * 3 + 1];
    let g2 = grad[p * 3 + 2];
    for j in 0..3usize {
        v_rgb[p * 3 + j] = params[j] * g0 + params[3 + j] * g1 + params[6 + j] * g2;
        let c = rgb[p * 3 + j];
        partial[p * 12 + j] = g0 * c;
        partial[p * 12 + 3 + j] = g1 * c;
        partial[p * 12 + 6 + j] = g2 * c;
    }
    partial[p * 12 + 9] = g0;
    partial[p * 12 + 10] = g1;
    partial[p * 12 + 11] = g2;
}

#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn depth_l1_kernel(
    depth: &[f32],
    alpha: &[f32],
    target: &[f32],
    pixel_weight: &[f32],
    alpha_grad_in: &[f32],
    terms: &mut [f32],
    v_depth: &mut [f32],
    v_alpha: &mut [f32],
    npix: u32,
    k: f32,
    min_alpha: f32,
    has_weight: u32,
    has_in: u32,
) {
    let p = rust3r_gpu::global_id();
    if p >= npix as usize {
        terminate!();
    }
    let t = target[p];
    let a = alpha[p];
    let mut term = 0.0f32;
    let mut vd = 0.0f32;
    let mut va = 0.0f32;
    let mut kw = k;
    if has_weight != 0u32 {
        kw = k * pixel_weight[p];
    }
    if t > 0.0f32 && a > min_alpha {
        let e = depth[p] / a;
        let d = e - t;
        let mut s = 0.0f32;
        if d > 0.0f32 {
            s = 1.0f32;
        }
        if d < 0.0f32 {
            s = -1.0f32;
        }
        term = kw * f32::abs(d);
        vd = kw * s / a;
        va = -kw * s * e / a;
    }
    if has_in != 0u32 {
        va += alpha_grad_in[p];
    }
    terms[p] = term;
    v_depth[p] = vd;
    v_alpha[p] = va;
}

fn check_len(what: &str, len: usize, want: usize) -> Result<(), SplatError> {
    if len != want {
        return Err(SplatError::InvalidConfig(format!(
            "{what} has {len} values, expected {want}"
        )));
    }
    Ok(())
}

/// `A c + b` for every pixel of an interleaved RGB image (`params` = `[A row-major, b]`).
pub fn apply_exposure(gpu: &Gpu, rgb: &GpuBuffer<f32>, params: &[f32; 12]) -> GpuBuffer<f32> {
    let npix = rgb.len() / 3;
    let p = gpu.upload(params);
    let out = gpu.alloc::<f32>(rgb.len());
    if npix > 0 {
        exposure_forward_kernel::launch(
            gpu.client(),
            gpu.grid_1d(npix),
            rust3r_gpu::BLOCK_DIM,
            rgb.arg(),
            p.arg(),
            out.arg(),
            npix as u32,
        );
    }
    out
}

/// Backward of [`apply_exposure`]: from `grad` (`∂L/∂c'`, interleaved RGB) the render's
/// gradient `Aᵀ g` and the 12 parameter gradients (read back).
pub fn exposure_backward(
    gpu: &Gpu,
    rgb: &GpuBuffer<f32>,
    params: &[f32; 12],
    grad: &GpuBuffer<f32>,
) -> Result<(GpuBuffer<f32>, [f32; 12]), SplatError> {
    check_len("exposure gradient", grad.len(), rgb.len())?;
    let npix = rgb.len() / 3;
    let p = gpu.upload(params);
    let v_rgb = gpu.alloc::<f32>(rgb.len());
    if npix == 0 {
        return Ok((v_rgb, [0.0; 12]));
    }
    let partial = gpu.alloc::<f32>(npix * 12);
    exposure_backward_kernel::launch(
        gpu.client(),
        gpu.grid_1d(npix),
        rust3r_gpu::BLOCK_DIM,
        rgb.arg(),
        p.arg(),
        grad.arg(),
        v_rgb.arg(),
        partial.arg(),
        npix as u32,
    );
    let sums = gpu.read(&reduce_columns(gpu, &partial, 12, ReduceOp::Sum))?;
    let mut out = [0.0f32; 12];
    out.copy_from_slice(&sums[..12]);
    Ok((v_rgb, out))
}

/// Result of [`depth_loss`], on the device.
pub struct DepthLossOutput {
    /// Per-pixel terms; their sum is the loss.
    pub terms: GpuBuffer<f32>,
    /// `∂L/∂D` (the rasterizer's depth gradient).
    pub v_depth: GpuBuffer<f32>,
    /// `∂L/∂α`, plus the `alpha_grad_in` passed in.
    pub v_alpha: GpuBuffer<f32>,
}

impl DepthLossOutput {
    /// The scalar loss (reads back one value).
    pub fn value(&self, gpu: &Gpu) -> Result<f32, rust3r_gpu::GpuError> {
        rust3r_gpu::reduce::reduce(gpu, &self.terms, ReduceOp::Sum)
    }
}

/// `k · Σ_p w_p |D_p/α_p − t_p|` over pixels with `t_p > 0` and `α_p > min_alpha` (module
/// docs), from the rasterizer's alpha-weighted depth `depth` and accumulated opacity `alpha`;
/// `pixel_weight` holds `w_p` (finite, `>= 0`; `None`: 1 everywhere). The alpha gradient has
/// `alpha_grad_in` (another term's, e.g. the alpha loss's) added.
#[allow(clippy::too_many_arguments)]
pub fn depth_loss(
    gpu: &Gpu,
    depth: &GpuBuffer<f32>,
    alpha: &GpuBuffer<f32>,
    target: &GpuBuffer<f32>,
    pixel_weight: Option<&GpuBuffer<f32>>,
    alpha_grad_in: Option<&GpuBuffer<f32>>,
    k: f32,
    min_alpha: f32,
) -> Result<DepthLossOutput, SplatError> {
    let npix = depth.len();
    check_len("rendered alpha", alpha.len(), npix)?;
    check_len("depth target", target.len(), npix)?;
    if let Some(w) = pixel_weight {
        check_len("depth pixel weight", w.len(), npix)?;
    }
    if let Some(g) = alpha_grad_in {
        check_len("alpha gradient", g.len(), npix)?;
    }
    if !(k.is_finite() && k >= 0.0 && min_alpha.is_finite() && min_alpha >= 0.0) {
        return Err(SplatError::InvalidConfig(format!(
            "depth loss weight {k} / min alpha {min_alpha} must be finite and >= 0"
        )));
    }
    let terms = gpu.alloc::<f32>(npix);
    let v_depth = gpu.alloc::<f32>(npix);
    let v_alpha = gpu.alloc::<f32>(npix);
    if npix > 0 {
        let (unused_g, unused_w);
        let g_in = match alpha_grad_in {
            Some(g) => g,
            None => {
                unused_g = gpu.alloc::<f32>(1);
                &unused_g
            }
        };
        let w = match pixel_weight {
            Some(w) => w,
            None => {
                unused_w = gpu.alloc::<f32>(1);
                &unused_w
            }
        };
        depth_l1_kernel::launch(
            gpu.client(),
            gpu.grid_1d(npix),
            rust3r_gpu::BLOCK_DIM,
            depth.arg(),
            alpha.arg(),
            target.arg(),
            w.arg(),
            g_in.arg(),
            terms.arg(),
            v_depth.arg(),
            v_alpha.arg(),
            npix as u32,
            k,
            min_alpha,
            pixel_weight.is_some() as u32,
            alpha_grad_in.is_some() as u32,
        );
    }
    Ok(DepthLossOutput {
        terms,
        v_depth,
        v_alpha,
    })
}

/// Apply an exposure transform on the host (evaluation renders).
pub fn apply_exposure_host(rgb: &mut [f32], params: &[f32; 12]) {
    for px in rgb.chunks_exact_mut(3) {
        let c = [px[0], px[1], px[2]];
        for (k, out) in px.iter_mut().enumerate() {
            *out = params[k * 3] * c[0]
                + params[k * 3 + 1] * c[1]
                + params[k * 3 + 2] * c[2]
                + params[9 + k];
        }
    }
}
