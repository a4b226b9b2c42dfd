//! 3DGS-MCMC (Kheradmand et al. 2024) as in gsplat's `MCMCStrategy`: dead Gaussians
//! (opacity <= `min_opacity`) are relocated onto live ones sampled by opacity, the count
//! grows by 5% per refinement up to the cap, relocated and sampled Gaussians share the
//! opacity and scale of their source so that the rendered density is preserved, and the
//! means receive opacity-gated noise every step. Sampling runs on the host (one read-back of
//! the opacities and scales per refinement); the rebuild and noise run on the device.

use cubecl::prelude::*;
use rust3r_gpu::{Gpu, GpuBuffer};

/// Largest ratio (number of copies) the relocation formula handles (gsplat: 51).
pub const N_MAX: usize = 51;

/// Hyper-parameters (gsplat `MCMCStrategy` defaults).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct McmcConfig {
    pub cap_max: usize,
    pub noise_lr: f32,
    pub refine_start: u64,
    pub refine_stop: u64,
    pub refine_every: u64,
    pub min_opacity: f32,
    pub opacity_reg: f32,
    pub scale_reg: f32,
}

impl Default for McmcConfig {
    fn default() -> Self {
        Self {
            cap_max: 1_000_000,
            noise_lr: 5e5,
            refine_start: 500,
            refine_stop: 25_000,
            refine_every: 100,
            min_opacity: 0.005,
            opacity_reg: 0.01,
            scale_reg: 0.01,
        }
    }
}

/// New opacity and scale factor of a Gaussian that becomes `ratio` copies:
/// `o' = 1 - (1 - o)^(1/ratio)` and `s' = s · o / Σ_{i=1..ratio} Σ_{k<i} C(i-1,k) (-1)^k o'^(k+1) / sqrt(k+1)`
/// (Kheradmand et al., eq. 9; gsplat `compute_relocation`).
pub fn relocation(opacity: f64, ratio: usize) -> (f64, f64) {
    let r = ratio.clamp(1, N_MAX);
    let new_o = 1.0 - (1.0 - opacity).powf(1.0 / r as f64);
    let mut denom = 0.0;
    for i in 1..=r {
        let mut binom = 1.0f64; // C(i-1, 0)
        for k in 0..i {
            let sign = if k % 2 == 0 { 1.0 } else { -1.0 };
            denom += binom * sign / ((k + 1) as f64).sqrt() * new_o.powi(k as i32 + 1);
            binom = binom * ((i - 1 - k) as f64) / ((k + 1) as f64);
        }
    }
    (new_o, opacity / denom)
}

#[cube(launch)]
fn regularizer_grads(
    opacity_logits: &[f32],
    log_scales: &[f32],
    g_opacity: &mut [f32],
    g_scales: &mut [f32],
    n: u32,
    opacity_weight: f32,
    scale_weight: f32,
) {
    let i = rust3r_gpu::global_id();
    if i >= n as usize {
        terminate!();
    }
    let s = 1.0f32 / (1.0f32 + f32::exp(-opacity_logits[i]));
    g_opacity[i] += opacity_weight * s * (1.0f32 - s);
    for k in 0..3usize {
        g_scales[i * 3 + k] += scale_weight * f32::exp(log_scales[i * 3 + k]);
    }
}

/// Adds the gradients of `opacity_reg · mean(sigmoid(o)) + scale_reg · mean(exp(s))`.
pub fn add_regularizer_grads(
    gpu: &Gpu,
    cfg: &McmcConfig,
    opacity_logits: &GpuBuffer<f32>,
    log_scales: &GpuBuffer<f32>,
    g_opacity: &GpuBuffer<f32>,
    g_scales: &GpuBuffer<f32>,
) {
    let n = opacity_logits.len();
    if n == 0 {
        return;
    }
    regularizer_grads::launch(
        gpu.client(),
        gpu.grid_1d(n),
        rust3r_gpu::BLOCK_DIM,
        opacity_logits.arg(),
        log_scales.arg(),
        g_opacity.arg(),
        g_scales.arg(),
        n as u32,
        cfg.opacity_reg / n as f32,
        cfg.scale_reg / (3 * n) as f32,
    );
}

/// A host-side random stream (SplitMix64), checkpointed with the trainer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HostRng(pub u64);

impl HostRng {
    pub fn next_u64(&mut self) -> u64 {
        let v = rust3r_gpu::random::splitmix64(self.0, 1);
        self.0 = self.0.wrapping_add(rust3r_gpu::random::SPLITMIX_GAMMA);
        v
    }
    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / 9_007_199_254_740_992.0)
    }
    /// Uniform integer in [0, n).
    pub fn below(&mut self, n: usize) -> usize {
        ((self.uniform() * n as f64) as usize).min(n.saturating_sub(1))
    }
}

/// `count` indices drawn with replacement from `candidates` with probability proportional
/// to `weights[candidate]`.
pub fn multinomial(
    rng: &mut HostRng,
    candidates: &[usize],
    weights: &[f64],
    count: usize,
) -> Vec<usize> {
    let mut cdf = Vec::with_capacity(candidates.len());
    let mut total = 0.0;
    for &c in candidates {
        total += weights[c].max(0.0);
        cdf.push(total);
    }
    if candidates.is_empty() {
        return Vec::new();
    }
    (0..count)
        .map(|_| {
            if total <= 0.0 {
                return candidates[rng.below(candidates.len())];
            }
            let u = rng.uniform() * total;
            let at = cdf.partition_point(|&c| c <= u).min(candidates.len() - 1);
            candidates[at]
        })
        .collect()
}

/// The host part of one MCMC refinement: relocation of dead Gaussians, then growth to
/// `target` Gaussians. Returns the rebuild description and the rows whose opacity logit and
/// log-scales change (with their new values).
pub struct McmcPlan {
    pub parent: Vec<u32>,
    pub variant: Vec<u32>,
    pub rows: Vec<u32>,
    pub opacity_logits: Vec<f32>,
    pub log_scales: Vec<f32>,
    pub relocated: usize,
    pub added: usize,
}

pub fn plan(
    rng: &mut HostRng,
    cfg: &McmcConfig,
    opacity_logits: &[f32],
    log_scales: &[f32],
    target: usize,
) -> McmcPlan {
    let n = opacity_logits.len();
    let mut opa: Vec<f64> = opacity_logits
        .iter()
        .map(|&o| 1.0 / (1.0 + (-(o as f64)).exp()))
        .collect();
    let mut ls: Vec<[f64; 3]> = (0..n)
        .map(|i| [0, 1, 2].map(|k| log_scales[i * 3 + k] as f64))
        .collect();
    let mut parent: Vec<u32> = (0..n as u32).collect();
    let mut variant = vec![0u32; n];
    let mut touched = vec![false; n];
    let eps = f32::EPSILON as f64;
    let min_o = cfg.min_opacity as f64;
    let apply =
        |opa: &mut Vec<f64>, ls: &mut Vec<[f64; 3]>, sampled: &[usize]| -> Vec<(f64, [f64; 3])> {
            let mut counts = std::collections::HashMap::<usize, usize>::new();
            for &s in sampled {
                *counts.entry(s).or_default() += 1;
            }
            let updates: Vec<(usize, f64, f64)> = counts
                .keys()
                .map(|&s| {
                    let (o, f) = relocation(opa[s], counts[&s] + 1);
                    (s, o.clamp(min_o, 1.0 - eps), f)
                })
                .collect();
            for (s, o, f) in updates {
                opa[s] = o;
                ls[s] = ls[s].map(|v| v + f.max(1e-30).ln());
            }
            sampled.iter().map(|&s| (opa[s], ls[s])).collect()
        };

    // Relocation: dead rows become copies of sampled live ones.
    let dead: Vec<usize> = (0..n).filter(|&i| opa[i] <= min_o).collect();
    let alive: Vec<usize> = (0..n).filter(|&i| opa[i] > min_o).collect();
    let mut relocated = 0;
    if !dead.is_empty() && !alive.is_empty() {
        let sampled = multinomial(rng, &alive, &opa, dead.len());
        let values = apply(&mut opa, &mut ls, &sampled);
        for (k, &d) in dead.iter().enumerate() {
            let s = sampled[k];
            parent[d] = parent[s];
            variant[d] = 4;
            variant[s] = 1;
            touched[d] = true;
            touched[s] = true;
            opa[d] = values[k].0;
            ls[d] = values[k].1;
        }
        relocated = dead.len();
    }
    // Growth to the target count.
    let mut added = 0;
    if target > n && n > 0 {
        let all: Vec<usize> = (0..n).collect();
        let sampled = multinomial(rng, &all, &opa, target - n);
        let values = apply(&mut opa, &mut ls, &sampled);
        for (k, &s) in sampled.iter().enumerate() {
            touched[s] = true;
            parent.push(parent[s]);
            variant.push(1);
            opa.push(values[k].0);
            ls.push(values[k].1);
            touched.push(true);
        }
        added = sampled.len();
    }
    let rows: Vec<u32> = (0..touched.len() as u32)
        .filter(|&i| touched[i as usize])
        .collect();
    McmcPlan {
        opacity_logits: rows
            .iter()
            .map(|&r| {
                let o = opa[r as usize];
                (o / (1.0 - o)).ln() as f32
            })
            .collect(),
        log_scales: rows
            .iter()
            .flat_map(|&r| ls[r as usize].map(|v| v as f32))
            .collect(),
        rows,
        parent,
        variant,
        relocated,
        added,
    }
}
