//! Photometric training loss `(1 - λ) L1 + λ (1 - SSIM)` (λ = 0.2, 11x11 Gaussian window,
//! σ = 1.5, zero "same" padding as in 3DGS) and its gradient with respect to the render,
//! as four separable filter passes:
//!
//! 1. horizontal filter of `a, b, a², b², ab` (a = render, b = target), per channel;
//! 2. vertical filter, the SSIM map and its partial derivatives with respect to the
//!    filtered moments `μa`, `E[a²]`, `E[ab]`; per-pixel loss terms;
//! 3. horizontal filter of the three partial-derivative maps;
//! 4. vertical filter and the final per-pixel gradient (the filter is symmetric, so the
//!    adjoint of the moment filter is the same filter).
//!
//! Images are interleaved RGB, `width * height * 3` floats, as the rasterizer writes them.
//!
//! Optional terms (see [`LossKernels::masked_photometric_loss`] and
//! [`LossKernels::alpha_loss`]):
//!
//! * **Masks** (`m` in `[0, 1]` per pixel, 0 = ignore): render and target are both multiplied
//!   by the mask before the loss above, `L(m a, m b)`, as 3DGS and gsplat do, and the gradient
//!   is `m · dL/d(m a)`. This was chosen over zeroing the per-pixel loss map because SSIM is a
//!   windowed statistic: with a zeroed map, the 11x11 windows of kept pixels next to a masked
//!   region would still read the render inside that region and push gradient into it (the
//!   masked-out content, e.g. a moving object, would still be fitted). With the product, a
//!   pixel with `m = 0` has exactly zero loss and zero gradient, and windows across the mask
//!   border compare zeros with zeros there. The normalisation stays the mean over all pixels
//!   (as in 3DGS / gsplat), so a heavily masked image weighs less in the step.
//! * **Alpha**: `w · mean_p m_p |α_p - α̂_p|` (mean over all pixels; `m = 1` without a mask)
//!   between the rendered accumulated opacity `α = 1 - T` and the ground-truth alpha, with
//!   gradient `w m sign(α - α̂) / npix` (0 at ties, like PyTorch), which the rasterizer's
//!   backward takes as its alpha gradient.
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
use rust3r_gpu::{Gpu, GpuBuffer, reduce::ReduceOp, reduce::reduce};

/// Window radius (11x11 window).
pub const RADIUS: i32 = 5;
/// SSIM stabilisers for a dynamic range of 1.
pub const C1: f32 = 0.01 * 0.01;
pub const C2: f32 = 0.03 * 0.03;

/// Normalised 1D Gaussian window of 11 taps, σ = 1.5 (computed in f64).
pub fn gaussian_window() -> [f32; 11] {
    let sigma = 1.5f64;
    let g: Vec<f64> = (0..11)
        .map(|i| (-(((i as f64) - 5.0).powi(2)) / (2.0 * sigma * sigma)).exp())
        .collect();
    let s: f64 = g.iter().sum();
    let mut w = [0f32; 11];
    for i in 0..11 {
        w[i] = (g[i] / s) as f32;
    }
    w
}

/// Pass 1: `out[k][p][c]` = horizontal filter of moment k ∈ {a, b, a², b², ab}.
#[cube(launch)]
fn moments_h(a: &[f32], b: &[f32], win: &[f32], out: &mut [f32], width: u32, height: u32) {
    let p = rust3r_gpu::global_id();
    let npix = (width * height) as usize;
    if p >= npix {
        terminate!();
    }
    let x = (p % width as usize) as i32;
    let row = p - x as usize;
    let plane = npix * 3;
    for c in 0..3usize {
        let mut s0 = 0.0f32;
        let mut s1 = 0.0f32;
        let mut s2 = 0.0f32;
        let mut s3 = 0.0f32;
        let mut s4 = 0.0f32;
        for t in 0..11i32 {
            let xx = x + t - 5i32;
            if xx >= 0i32 && xx < width as i32 {
                let q = (row + xx as usize) * 3 + c;
                let w = win[t as usize];
                let va = a[q];
                let vb = b[q];
                s0 += w * va;
                s1 += w * vb;
                s2 += w * va * va;
                s3 += w * vb * vb;
                s4 += w * va * vb;
            }
        }
        let o = p * 3 + c;
        out[o] = s0;
        out[plane + o] = s1;
        out[2 * plane + o] = s2;
        out[3 * plane + o] = s3;
        out[4 * plane + o] = s4;
    }
}

/// Pass 2: SSIM map, its partials `dS/dμa, dS/dE[a²], dS/dE[ab]` (written to `partials`,
/// three planes) and the per-pixel loss term `(1-λ)|a-b| / n - λ S / n` summed over channels.
#[cube(launch)]
fn ssim_map(
    a: &[f32],
    b: &[f32],
    win: &[f32],
    hmom: &[f32],
    ssim: &mut [f32],
    partials: &mut [f32],
    loss_terms: &mut [f32],
    sq_terms: &mut [f32],
    width: u32,
    height: u32,
    lambda: f32,
) {
    let p = rust3r_gpu::global_id();
    let npix = (width * height) as usize;
    if p >= npix {
        terminate!();
    }
    let w_ = width as usize;
    let y = (p / w_) as i32;
    let x = p - (y as usize) * w_;
    let plane = npix * 3;
    let inv_n = 1.0f32 / (plane as f32);
    let mut term = 0.0f32;
    let mut sq = 0.0f32;
    for c in 0..3usize {
        let mut mu_a = 0.0f32;
        let mut mu_b = 0.0f32;
        let mut e_aa = 0.0f32;
        let mut e_bb = 0.0f32;
        let mut e_ab = 0.0f32;
        for t in 0..11i32 {
            let yy = y + t - 5i32;
            if yy >= 0i32 && yy < height as i32 {
                let q = ((yy as usize) * w_ + x) * 3 + c;
                let w = win[t as usize];
                mu_a += w * hmom[q];
                mu_b += w * hmom[plane + q];
                e_aa += w * hmom[2 * plane + q];
                e_bb += w * hmom[3 * plane + q];
                e_ab += w * hmom[4 * plane + q];
            }
        }
        let s_aa = e_aa - mu_a * mu_a;
        let s_bb = e_bb - mu_b * mu_b;
        let s_ab = e_ab - mu_a * mu_b;
        let a1 = 2.0f32 * mu_a * mu_b + C1;
        let a2 = 2.0f32 * s_ab + C2;
        let b1 = mu_a * mu_a + mu_b * mu_b + C1;
        let b2 = s_aa + s_bb + C2;
        let den = b1 * b2;
        let s = a1 * a2 / den;
        // Partials with the variances held fixed, then the chain through
        // s_aa = E[a²] - μa², s_ab = E[ab] - μa μb.
        let d_mu = 2.0f32 * mu_b * a2 / den - s * 2.0f32 * mu_a / b1;
        let d_saa = -s / b2;
        let d_sab = 2.0f32 * a1 / den;
        let o = p * 3 + c;
        ssim[o] = s;
        partials[o] = d_mu - 2.0f32 * mu_a * d_saa - mu_b * d_sab;
        partials[plane + o] = d_saa;
        partials[2 * plane + o] = d_sab;
        let d = a[o] - b[o];
        term += ((1.0f32 - lambda) * f32::abs(d) - lambda * s) * inv_n;
        sq += d * d;
    }
    loss_terms[p] = term;
    sq_terms[p] = sq;
}

/// Pass 3: horizontal filter of the three partial maps.
#[cube(launch)]
fn partials_h(partials: &[f32], win: &[f32], out: &mut [f32], width: u32, height: u32) {
    let p = rust3r_gpu::global_id();
    let npix = (width * height) as usize;
    if p >= npix {
        terminate!();
    }
    let x = (p % width as usize) as i32;
    let row = p - x as usize;
    let plane = npix * 3;
    for c in 0..3usize {
        let mut s0 = 0.0f32;
        let mut s1 = 0.0f32;
        let mut s2 = 0.0f32;
        for t in 0..11i32 {
            let xx = x + t - 5i32;
            if xx >= 0i32 && xx < width as i32 {
                let q = (row + xx as usize) * 3 + c;
                let w = win[t as usize];
                s0 += w * partials[q];
                s1 += w * partials[plane + q];
                s2 += w * partials[2 * plane + q];
            }
        }
        let o = p * 3 + c;
        out[o] = s0;
        out[plane + o] = s1;
        out[2 * plane + o] = s2;
    }
}

/// Pass 4: vertical filter and `d loss / d a`.
#[cube(launch)]
fn loss_grad(
    a: &[f32],
    b: &[f32],
    win: &[f32],
    hpart: &[f32],
    grad: &mut [f32],
    width: u32,
    height: u32,
    lambda: f32,
) {
    let p = rust3r_gpu::global_id();
    let npix = (width * height) as usize;
    if p >= npix {
        terminate!();
    }
    let w_ = width as usize;
    let y = (p / w_) as i32;
    let x = p - (y as usize) * w_;
    let plane = npix * 3;
    let inv_n = 1.0f32 / (plane as f32);
    for c in 0..3usize {
        let mut g_mu = 0.0f32;
        let mut g_aa = 0.0f32;
        let mut g_ab = 0.0f32;
        for t in 0..11i32 {
            let yy = y + t - 5i32;
            if yy >= 0i32 && yy < height as i32 {
                let q = ((yy as usize) * w_ + x) * 3 + c;
                let w = win[t as usize];
                g_mu += w * hpart[q];
                g_aa += w * hpart[plane + q];
                g_ab += w * hpart[2 * plane + q];
            }
        }
        let o = p * 3 + c;
        let va = a[o];
        let vb = b[o];
        let diff = va - vb;
        let mut sign = 0.0f32;
        if diff > 0.0f32 {
            sign = 1.0f32;
        }
        if diff < 0.0f32 {
            sign = -1.0f32;
        }
        let d_ssim = g_mu + 2.0f32 * va * g_aa + vb * g_ab;
        grad[o] = ((1.0f32 - lambda) * sign - lambda * d_ssim) * inv_n;
    }
}

/// Mask premultiplication: `out_a = m a`, `out_b = m b`, with one mask value per pixel for
/// all three channels.
#[cube(launch)]
fn apply_mask(a: &[f32], b: &[f32], mask: &[f32], out_a: &mut [f32], out_b: &mut [f32], npix: u32) {
    let p = rust3r_gpu::global_id();
    if p >= npix as usize {
        terminate!();
    }
    let m = mask[p];
    for c in 0..3usize {
        let o = p * 3 + c;
        out_a[o] = a[o] * m;
        out_b[o] = b[o] * m;
    }
}

/// Chain rule through the premultiplication, in place: `grad = m · grad`.
#[cube(launch)]
fn mask_grad(grad: &mut [f32], mask: &[f32], npix: u32) {
    let p = rust3r_gpu::global_id();
    if p >= npix as usize {
        terminate!();
    }
    let m = mask[p];
    for c in 0..3usize {
        let o = p * 3 + c;
        grad[o] *= m;
    }
}

/// Alpha L1 term per pixel, `w m |α - α̂| / npix`, and its gradient `w m sign(α - α̂) / npix`
/// (`m = mask[p]` when `has_mask`, else 1; `mask` is then any buffer and is not read).
#[cube(launch)]
fn alpha_l1(
    alpha: &[f32],
    target: &[f32],
    mask: &[f32],
    terms: &mut [f32],
    grad: &mut [f32],
    npix: u32,
    weight: f32,
    has_mask: u32,
) {
    let p = rust3r_gpu::global_id();
    if p >= npix as usize {
        terminate!();
    }
    let mut k = weight / (npix as f32);
    if has_mask != 0u32 {
        k *= mask[p];
    }
    let d = alpha[p] - target[p];
    let mut sign = 0.0f32;
    if d > 0.0f32 {
        sign = 1.0f32;
    }
    if d < 0.0f32 {
        sign = -1.0f32;
    }
    terms[p] = k * f32::abs(d);
    grad[p] = k * sign;
}

/// Result of [`LossKernels::alpha_loss`], on the device.
pub struct AlphaLossOutput {
    /// `d loss / d alpha`, one value per pixel (the rasterizer's alpha gradient).
    pub grad: GpuBuffer<f32>,
    /// Per-pixel terms; their sum is the loss.
    pub terms: GpuBuffer<f32>,
}

impl AlphaLossOutput {
    /// The scalar alpha loss (reads back one value).
    pub fn value(&self, gpu: &Gpu) -> Result<f32, rust3r_gpu::GpuError> {
        reduce(gpu, &self.terms, ReduceOp::Sum)
    }
}

/// Result of [`LossKernels::photometric_loss`]: everything stays on the device until asked for.
pub struct LossOutput {
    /// `d loss / d render`, interleaved RGB.
    pub grad: GpuBuffer<f32>,
    /// Per-channel SSIM map (interleaved RGB).
    pub ssim: GpuBuffer<f32>,
    /// Per-pixel loss terms; their sum plus `lambda` is the loss.
    pub terms: GpuBuffer<f32>,
    /// Per-pixel squared error summed over channels (for PSNR).
    pub squared: GpuBuffer<f32>,
    pub lambda: f32,
}

impl LossOutput {
    /// The scalar loss (reads back one value).
    pub fn value(&self, gpu: &Gpu) -> Result<f32, rust3r_gpu::GpuError> {
        Ok(self.lambda + reduce(gpu, &self.terms, ReduceOp::Sum)?)
    }

    /// PSNR of the render against the target (unclamped render; reads back one value).
    pub fn psnr(&self, gpu: &Gpu) -> Result<f32, rust3r_gpu::GpuError> {
        let mse =
            reduce(gpu, &self.squared, ReduceOp::Sum)? / (self.squared.len().max(1) * 3) as f32;
        Ok(-10.0 * mse.log10())
    }
}

/// Loss buffers reused from step to step (the window and the intermediate planes).
pub struct LossKernels {
    win: GpuBuffer<f32>,
    /// Bound in place of an absent mask (never read).
    no_mask: GpuBuffer<f32>,
}

impl LossKernels {
    pub fn new(gpu: &Gpu) -> Self {
        Self {
            win: gpu.upload(&gaussian_window()),
            no_mask: gpu.alloc::<f32>(1),
        }
    }

    /// `(1 - lambda) * mean|a - b| + lambda * (1 - mean SSIM(a, b))` and its gradient
    /// with respect to `a`. With `lambda = 0` the SSIM map is still computed (for evaluation).
    pub fn photometric_loss(
        &self,
        gpu: &Gpu,
        a: &GpuBuffer<f32>,
        b: &GpuBuffer<f32>,
        width: u32,
        height: u32,
        lambda: f32,
        with_grad: bool,
    ) -> LossOutput {
        let npix = (width as usize) * (height as usize);
        assert_eq!(a.len(), npix * 3, "render size");
        assert_eq!(b.len(), npix * 3, "target size");
        let client = gpu.client();
        let grid = gpu.grid_1d(npix);
        let dim = rust3r_gpu::BLOCK_DIM;
        let hmom = gpu.alloc::<f32>(npix * 15);
        let ssim = gpu.alloc::<f32>(npix * 3);
        let partials = gpu.alloc::<f32>(npix * 9);
        let terms = gpu.alloc::<f32>(npix);
        let squared = gpu.alloc::<f32>(npix);
        let grad = gpu.alloc::<f32>(if with_grad { npix * 3 } else { 0 });
        if npix > 0 {
            moments_h::launch(
                client,
                grid.clone(),
                dim,
                a.arg(),
                b.arg(),
                self.win.arg(),
                hmom.arg(),
                width,
                height,
            );
            ssim_map::launch(
                client,
                grid.clone(),
                dim,
                a.arg(),
                b.arg(),
                self.win.arg(),
                hmom.arg(),
                ssim.arg(),
                partials.arg(),
                terms.arg(),
                squared.arg(),
                width,
                height,
                lambda,
            );
            if with_grad {
                drop(hmom);
                let hpart = gpu.alloc::<f32>(npix * 9);
                partials_h::launch(
                    client,
                    grid.clone(),
                    dim,
                    partials.arg(),
                    self.win.arg(),
                    hpart.arg(),
                    width,
                    height,
                );
                loss_grad::launch(
                    client,
                    grid,
                    dim,
                    a.arg(),
                    b.arg(),
                    self.win.arg(),
                    hpart.arg(),
                    grad.arg(),
                    width,
                    height,
                    lambda,
                );
            }
        }
        LossOutput {
            grad,
            ssim,
            terms,
            squared,
            lambda,
        }
    }

    /// [`LossKernels::photometric_loss`] of the render and target both multiplied by `mask`
    /// (one value in `[0, 1]` per pixel, 0 = ignore), and its gradient with respect to the
    /// unmasked render: `L(m a, m b)` and `m · dL/d(m a)` (see the module docs for why this
    /// form). The SSIM map, the loss terms and the squared errors are those of the masked
    /// images.
    #[allow(clippy::too_many_arguments)]
    pub fn masked_photometric_loss(
        &self,
        gpu: &Gpu,
        a: &GpuBuffer<f32>,
        b: &GpuBuffer<f32>,
        mask: &GpuBuffer<f32>,
        width: u32,
        height: u32,
        lambda: f32,
        with_grad: bool,
    ) -> LossOutput {
        let npix = (width as usize) * (height as usize);
        assert_eq!(a.len(), npix * 3, "render size");
        assert_eq!(b.len(), npix * 3, "target size");
        assert_eq!(mask.len(), npix, "mask size");
        let ma = gpu.alloc::<f32>(npix * 3);
        let mb = gpu.alloc::<f32>(npix * 3);
        let grid = gpu.grid_1d(npix);
        let dim = rust3r_gpu::BLOCK_DIM;
        if npix > 0 {
            apply_mask::launch(
                gpu.client(),
                grid.clone(),
                dim,
                a.arg(),
                b.arg(),
                mask.arg(),
                ma.arg(),
                mb.arg(),
                npix as u32,
            );
        }
        let out = self.photometric_loss(gpu, &ma, &mb, width, height, lambda, with_grad);
        if with_grad && npix > 0 {
            mask_grad::launch(
                gpu.client(),
                grid,
                dim,
                out.grad.arg(),
                mask.arg(),
                npix as u32,
            );
        }
        out
    }

    /// `weight · mean_p m_p |alpha_p - target_p|` over the `alpha.len()` pixels (`m` the
    /// optional mask, else 1) and its gradient with respect to `alpha`.
    pub fn alpha_loss(
        &self,
        gpu: &Gpu,
        alpha: &GpuBuffer<f32>,
        target: &GpuBuffer<f32>,
        mask: Option<&GpuBuffer<f32>>,
        weight: f32,
    ) -> AlphaLossOutput {
        let npix = alpha.len();
        assert_eq!(target.len(), npix, "target alpha size");
        if let Some(m) = mask {
            assert_eq!(m.len(), npix, "mask size");
        }
        let terms = gpu.alloc::<f32>(npix);
        let grad = gpu.alloc::<f32>(npix);
        if npix > 0 {
            alpha_l1::launch(
                gpu.client(),
                gpu.grid_1d(npix),
                rust3r_gpu::BLOCK_DIM,
                alpha.arg(),
                target.arg(),
                mask.unwrap_or(&self.no_mask).arg(),
                terms.arg(),
                grad.arg(),
                npix as u32,
                weight,
                mask.is_some() as u32,
            );
        }
        AlphaLossOutput { grad, terms }
    }
}

/// Mean SSIM over the pixels whose whole window lies inside the image ("valid" SSIM, the
/// usual evaluation convention), from a per-channel SSIM map read back to the host.
pub fn valid_ssim_mean(map: &[f32], width: u32, height: u32) -> f64 {
    let (w, h) = (width as usize, height as usize);
    let r = RADIUS as usize;
    if w <= 2 * r || h <= 2 * r {
        return f64::NAN;
    }
    let mut sum = 0.0f64;
    for y in r..h - r {
        for x in r..w - r {
            for c in 0..3 {
                sum += map[(y * w + x) * 3 + c] as f64;
            }
        }
    }
    sum / (((w - 2 * r) * (h - 2 * r) * 3) as f64)
}
