#![allow(missing_docs)] // the #[cube(launch)] macro generates undocumented items
//! Nearest visual words on the GPU ([`DeviceCodebook::nearest_all`]), with the same answer as
//! the float64 host reference [`Codebook::nearest_all`]: the device computes every
//! feature-centroid dot product in f32 ([`dots_kernel`]); on the host, each feature keeps the
//! words whose f32 distance is within twice the f32 error bound of its `m`-th smallest f32
//! distance (a set that provably holds the true `m` nearest), and those few are ranked again in
//! float64 as the reference ranks them (ties by word). The release codebook (65536 words of
//! 1024) takes ~0.2 s per query on 16 host cores in float64; its 40 GFLOP of f32 products are
//! a fraction of a millisecond of GPU time.
//!
//! Error bound: a dot product of `dim` terms summed in order in f32 (with or without fused
//! multiply-adds) is within `gamma = (dim + 2) u / (1 - (dim + 2) u)` (`u = 2^-24`) of
//! `sum |v_d c_d|`, itself at most `|v| |c|` (Cauchy-Schwarz), so a distance
//! `|v|^2 + |c|^2 - 2 v.c` (norms in float64) is within `B = 2 gamma |v| max|c|` of the exact
//! one. If `t` is the `m`-th smallest f32 distance, every true `m`-nearest word has an f32
//! distance at most `t + 2 B` (its exact distance is at most the exact `m`-th smallest, which
//! is at most `t + B`).

use cubecl::prelude::*;
use rayon::prelude::*;
use rust3r_gpu::{Gpu, GpuBuffer, GpuError};

use super::asmk::Codebook;

/// Feature rows per thread (each thread reads a centroid value once for this many rows).
const ROWS: u32 = 4;

/// `out[r * k + w] = feat[r] . centroid[w]` in f32, the terms summed in index order.
/// `ct` holds the centroids transposed (`[dim, k]`, so neighbouring threads read neighbouring
/// words); thread `t` takes word `t % k` for rows `ROWS * (t / k) ..` (at most `ROWS`).
#[cube(launch)]
pub fn dots_kernel(
    feat: &[f32],
    ct: &[f32],
    out: &mut [f32],
    n: u32,
    k: u32,
    #[comptime] dim: u32,
) {
    let t = rust3r_gpu::global_id();
    let ku = k as usize;
    let tiles = (n as usize).div_ceil(ROWS as usize);
    if t >= tiles * ku {
        terminate!();
    }
    let w = t % ku;
    let r0 = (t / ku) * ROWS as usize;
    let nu = n as usize;
    let d = dim as usize;
    // Rows past the end read row r0 again (in bounds) and are not written.
    let r1 = select(r0 + 1 < nu, r0 + 1, r0);
    let r2 = select(r0 + 2 < nu, r0 + 2, r0);
    let r3 = select(r0 + 3 < nu, r0 + 3, r0);
    let mut a0 = 0.0f32;
    let mut a1 = 0.0f32;
    let mut a2 = 0.0f32;
    let mut a3 = 0.0f32;
    for i in 0..d {
        let c = ct[i * ku + w];
        a0 += feat[r0 * d + i] * c;
        a1 += feat[r1 * d + i] * c;
        a2 += feat[r2 * d + i] * c;
        a3 += feat[r3 * d + i] * c;
    }
    out[r0 * ku + w] = a0;
    if r0 + 1 < nu {
        out[(r0 + 1) * ku + w] = a1;
    }
    if r0 + 2 < nu {
        out[(r0 + 2) * ku + w] = a2;
    }
    if r0 + 3 < nu {
        out[(r0 + 3) * ku + w] = a3;
    }
}

/// A [`Codebook`]'s centroids on a GPU, transposed for [`dots_kernel`].
#[derive(Clone)]
pub struct DeviceCodebook {
    gpu: Gpu,
    ct: GpuBuffer<f32>,
    /// Largest centroid norm.
    max_norm: f64,
}

impl std::fmt::Debug for DeviceCodebook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "DeviceCodebook({} values on {})",
            self.ct.len(),
            self.gpu.name()
        )
    }
}

impl DeviceCodebook {
    /// Uploads `codebook`'s centroids to `gpu` (`4 k dim` bytes), or an error when they do not
    /// fit one binding of the adapter.
    pub fn new(gpu: &Gpu, codebook: &Codebook) -> Result<Self, GpuError> {
        let (k, dim) = (codebook.len(), codebook.dim());
        gpu.check_fits("codebook", (k * dim * 4) as u64)?;
        let mut ct = vec![0f32; k * dim];
        for w in 0..k {
            for (i, &c) in codebook.centroid(w).iter().enumerate() {
                ct[i * k + w] = c;
            }
        }
        let max_norm = (0..k)
            .map(|w| codebook.norm2(w).sqrt())
            .fold(0.0f64, f64::max);
        Ok(Self {
            gpu: gpu.clone(),
            ct: gpu.upload(&ct),
            max_norm,
        })
    }

    /// The GPU the centroids are on.
    pub fn gpu(&self) -> &Gpu {
        &self.gpu
    }

    /// [`Codebook::nearest_all`] (`codebook` must be the one this was made from): the `m`
    /// nearest words of every row of `features` (`[n, dim]`), nearest first, ties by word.
    pub fn nearest_all(
        &self,
        codebook: &Codebook,
        features: &[f32],
        m: usize,
    ) -> Result<Vec<Vec<usize>>, GpuError> {
        let (k, dim) = (codebook.len(), codebook.dim());
        let n = features.len() / dim;
        if n == 0 {
            return Ok(Vec::new());
        }
        let m = m.clamp(1, k);
        let out = self.gpu.alloc::<f32>(n * k);
        let threads = n.div_ceil(ROWS as usize) * k;
        dots_kernel::launch(
            self.gpu.client(),
            self.gpu.grid_1d(threads),
            rust3r_gpu::BLOCK_DIM,
            self.gpu.upload(features).arg(),
            self.ct.arg(),
            out.arg(),
            n as u32,
            k as u32,
            dim as u32,
        );
        let dots = self.gpu.read(&out)?;
        let u = 2f64.powi(-24);
        let terms = (dim + 2) as f64 * u;
        let gamma = terms / (1.0 - terms);
        Ok((0..n)
            .into_par_iter()
            .map(|r| {
                let v = &features[r * dim..(r + 1) * dim];
                let vn: f64 = v.iter().map(|&x| x as f64 * x as f64).sum();
                let bound = 2.0 * gamma * vn.sqrt() * self.max_norm;
                let row = &dots[r * k..(r + 1) * k];
                let d32: Vec<f64> = (0..k)
                    .map(|w| vn + codebook.norm2(w) - 2.0 * row[w] as f64)
                    .collect();
                let mut sorted = d32.clone();
                let (_, t, _) = sorted.select_nth_unstable_by(m - 1, f64::total_cmp);
                let limit = *t + 2.0 * bound;
                let shortlist: Vec<usize> = (0..k).filter(|&w| d32[w] <= limit).collect();
                codebook.rank(v, vn, &shortlist, m)
            })
            .collect())
    }
}
