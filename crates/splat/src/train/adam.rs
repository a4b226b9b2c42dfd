//! Adam on device buffers (PyTorch's formulation, the one 3DGS and gsplat use):
//! `m = β1 m + (1-β1) g`, `v = β2 v + (1-β2) g²`,
//! `p -= lr / (1-β1^t) * m / (sqrt(v) / sqrt(1-β2^t) + ε)`.
//!
//! Rows can be skipped for Gaussians that were not visible in the step ("visible Adam"):
//! their parameters and moments stay untouched, as with a sparse gradient.
//!
//! The moments are stored either as two f32 buffers or, by default, compactly: both moments
//! of a value as bfloat16 in one 32-bit word (`m` in the high half, `v` in the low half), 4
//! bytes per value instead of 8. bf16 is the upper half of an f32, so decoding is a shift and
//! encoding a truncation; every backend runs it (WGSL needs no `shader-f16`). The update itself
//! is computed in f32 and the parameter step uses the f32 moments of the step; only the stored
//! moments are rounded, *stochastically*: a per-element pseudo-random 16-bit value (a hash of
//! the element index, the step and the seed) is added to the f32 bits before truncation, so
//! the rounding is unbiased. Round-to-nearest would lose the EMA decrements of `v`
//! (`β2 = 0.999`: 0.1 % per step, below half a bf16 step of 0.39 %) and freeze it.
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
use rust3r_gpu::bf16::{bf16_nearest, bf16_stochastic_bits, bf16_to_f32};
use rust3r_gpu::fp8::{
    fp8_signed_decode, fp8_signed_encode, fp8_unsigned_decode, fp8_unsigned_encode,
};
use rust3r_gpu::half::{f16_stochastic_bits, f16_to_f32, pack_pairs, pair_entry};
use rust3r_gpu::random::{pcg_hash, pcg_hash_host};

use crate::kernels::project::{ShGradArgs, ShGradArgsLaunch, sh_value_grad};
use rust3r_gpu::{Gpu, GpuBuffer, GpuError};

/// [`Gpu::placeholder`] slots of the Adam kernels' unused arguments (one launch binds them all, so
/// they are distinct).
mod slot {
    /// Moment storages not in use ([`super::MomentArgs`]): f32 `m`, `v`, bf16 pairs, 8-bit SH.
    pub const M: usize = 0;
    pub const V: usize = 1;
    pub const MV: usize = 2;
    pub const MV8: usize = 3;
    /// The fused SH gradient's inputs when the gradient is a buffer, and the buffer when fused.
    pub const NONE_F32: usize = 4;
    pub const NONE_U32: usize = 5;
    /// The visible-Gaussian radii when every Gaussian steps.
    pub const RADII: usize = 6;
}

/// Learning rate of value `i` (`lr` for the first `first_cols` values of its row, `lr_rest`
/// for the others). Units past `len`, and rows of Gaussians the rasterizer culled when
/// `visible_only`, stop here.
#[cube]
#[allow(clippy::too_many_arguments)]
fn learning_rate(
    i: usize,
    radii: &[u32],
    len: u32,
    row: u32,
    first_cols: u32,
    lr: f32,
    lr_rest: f32,
    #[comptime] visible_only: bool,
) -> f32 {
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
    step
}

/// The constants of one Adam step, shared by every Adam kernel: the moment decays, `eps`, the
/// bias corrections `1 - beta1^t` and `sqrt(1 - beta2^t)`, and the stochastic-rounding key.
#[derive(CubeType, CubeLaunch)]
struct AdamConsts {
    beta1: f32,
    beta2: f32,
    eps: f32,
    bc1: f32,
    bc2_sqrt: f32,
    key: u32,
}

impl AdamConfig {
    /// [`AdamConsts`] of step `t` (1-based) with rounding key `key`.
    fn consts(&self, t: u64, key: u32) -> AdamConstsLaunch {
        let (bc1, bc2_sqrt) = self.bias_corrections(t);
        AdamConstsLaunch {
            beta1: self.beta1,
            beta2: self.beta2,
            eps: self.eps,
            bc1,
            bc2_sqrt,
            key,
        }
    }
}

/// Adam on a flat f32 parameter buffer ([`adam_update`]); the moments are two f32 buffers
/// (`m`, `v`) or, with `compact`, bf16 pairs in `mv` (the unused ones are placeholders).
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn adam_step(
    param: &mut [f32],
    grad: &[f32],
    m: &mut [f32],
    v: &mut [f32],
    mv: &mut [u32],
    radii: &[u32],
    len: u32,
    row: u32,
    first_cols: u32,
    lr: f32,
    lr_rest: f32,
    consts: AdamConsts,
    #[comptime] compact: bool,
    #[comptime] visible_only: bool,
) {
    let i = rust3r_gpu::global_id();
    let step = learning_rate(i, radii, len, row, first_cols, lr, lr_rest, visible_only);
    param[i] = adam_value(param[i], grad[i], i, m, v, mv, step, &consts, compact);
}

/// Adam step of one value whose moments sit at index `mi` of `m` / `v` (f32) or, with
/// `compact`, of `mv` (bf16 pairs, stored with stochastic rounding: counter-based random bits
/// from the element index, then the (step, seed, group) key). Returns the new parameter value.
#[cube]
#[allow(clippy::too_many_arguments, unused_assignments)]
fn adam_value(
    p: f32,
    gr: f32,
    mi: usize,
    m: &mut [f32],
    v: &mut [f32],
    mv: &mut [u32],
    step: f32,
    consts: &AdamConsts,
    #[comptime] compact: bool,
) -> f32 {
    let mut m0 = 0.0f32;
    let mut v0 = 0.0f32;
    if compact {
        let word = mv[mi];
        m0 = f32::reinterpret(word & 0xFFFF_0000u32);
        v0 = f32::reinterpret(word << 16u32);
    } else {
        m0 = m[mi];
        v0 = v[mi];
    }
    let m1 = consts.beta1 * m0 + (1.0f32 - consts.beta1) * gr;
    let v1 = consts.beta2 * v0 + (1.0f32 - consts.beta2) * gr * gr;
    if compact {
        let r = pcg_hash(pcg_hash(mi as u32) ^ consts.key);
        mv[mi] = (bf16_stochastic_bits(m1, r) << 16u32) | bf16_stochastic_bits(v1, r >> 16u32);
    } else {
        m[mi] = m1;
        v[mi] = v1;
    }
    p - (step / consts.bc1) * m1 / (f32::sqrt(v1) / consts.bc2_sqrt + consts.eps)
}

/// Adam step of one value whose moments are the 16-bit [`Moments::Sh8`] entry `e` (s1e5m2
/// `m` in the high byte, e5m3 `sqrt(v)` in the low byte); returns the new parameter value and
/// the new entry (stochastically rounded with bits hashed from `mi` and `key`).
#[cube]
fn adam_value_sh8(p: f32, gr: f32, e: u32, mi: u32, step: f32, consts: &AdamConsts) -> (f32, u32) {
    let m0 = fp8_signed_decode(e >> 8u32);
    let s0 = fp8_unsigned_decode(e & 0xFFu32);
    let m1 = consts.beta1 * m0 + (1.0f32 - consts.beta1) * gr;
    let s1 = f32::sqrt(consts.beta2 * s0 * s0 + (1.0f32 - consts.beta2) * gr * gr);
    let r = pcg_hash(pcg_hash(mi) ^ consts.key);
    let e1 =
        (fp8_signed_encode(m1, r) << 8u32) | fp8_unsigned_encode(s1, pcg_hash(r ^ 0x68E3_1DA4u32));
    (
        p - (step / consts.bc1) * m1 / (s1 / consts.bc2_sqrt + consts.eps),
        e1,
    )
}

/// Gradient of SH value `col` of row `g` (flat index `gi`): read from `grad`, or with `fused`
/// computed from the render's buffers ([`sh_value_grad`]).
#[cube]
#[allow(clippy::too_many_arguments, unused_assignments)]
fn sh_grad_at(
    grad: &[f32],
    inputs: &ShGradArgs,
    g: usize,
    gi: usize,
    col: u32,
    active_coeffs: u32,
    #[comptime] fused: bool,
) -> f32 {
    let mut out = 0.0f32;
    if fused {
        out = sh_value_grad(inputs, g, g, col, active_coeffs);
    } else {
        out = grad[gi];
    }
    out
}

/// Salt of the random bits that round half-float parameters (independent of the moments'):
/// value `mi` at rounding key `key` uses `pcg_hash(pcg_hash(mi) ^ key ^ HALF_PARAM_SALT)`.
pub const HALF_PARAM_SALT: u32 = 0x9E37_79B9;

/// Adam on SH coefficients stored as [`crate::ShCoeffs::Half`]: units `0..3n` update the f32
/// DC terms (learning rate `lr_dc`), the following units one word of `rest` each, i.e. two
/// half-float coefficients (`lr_rest`), written back with stochastic rounding. Gradients keep
/// the `[n][k][rgb]` layout of every value (`k3 = 3k` per row), and so do the moments unless
/// `sh8` ([`Moments::Sh8`]: DC moments in `mv`, one word per DC value; the others in `mv8`,
/// word `w` holding the two values of `rest`'s word `w`).
#[cube(launch)]
#[allow(clippy::too_many_arguments, unused_assignments)]
fn adam_step_sh_half(
    dc: &mut [f32],
    rest: &mut [u32],
    grad: &[f32],
    inputs: ShGradArgs,
    active_coeffs: u32,
    m: &mut [f32],
    v: &mut [f32],
    mv: &mut [u32],
    mv8: &mut [u32],
    radii: &[u32],
    n: u32,
    k3: u32,
    lr_dc: f32,
    lr_rest: f32,
    consts: AdamConsts,
    #[comptime] compact: bool,
    #[comptime] sh8: bool,
    #[comptime] visible_only: bool,
    #[comptime] fused: bool,
) {
    let u = rust3r_gpu::global_id();
    let ndc = n as usize * 3;
    let row = k3 as usize;
    let r = row - 3;
    if u < ndc {
        let g = u / 3;
        if visible_only {
            if radii[g * 2] == 0u32 {
                terminate!();
            }
        }
        let gi = g * row + (u - g * 3);
        let mut mi = gi;
        if sh8 {
            mi = u;
        }
        let gr = sh_grad_at(
            grad,
            &inputs,
            g,
            gi,
            (u - g * 3) as u32,
            active_coeffs,
            fused,
        );
        dc[u] = adam_value(dc[u], gr, mi, m, v, mv, lr_dc, &consts, compact);
    } else {
        let w = u - ndc;
        let total = n as usize * r;
        if w * 2 >= total {
            terminate!();
        }
        let word = rest[w];
        let mut out = 0u32;
        let mut mword = 0u32;
        if sh8 {
            mword = mv8[w];
        }
        let mut mout = 0u32;
        #[unroll]
        for h in 0..2u32 {
            let vi = w * 2 + h as usize;
            let bits = (word >> (h * 16u32)) & 0xFFFFu32;
            let mut nb = bits;
            let mut entry = (mword >> (h * 16u32)) & 0xFFFFu32;
            if vi < total {
                let g = vi / r;
                let mut live = true;
                if visible_only {
                    live = radii[g * 2] != 0u32;
                }
                if live {
                    let mi = g * row + 3 + (vi - g * r);
                    let gr = sh_grad_at(
                        grad,
                        &inputs,
                        g,
                        mi,
                        (3 + vi - g * r) as u32,
                        active_coeffs,
                        fused,
                    );
                    let mut np = 0.0f32;
                    if sh8 {
                        let (p1, e1) = adam_value_sh8(
                            f16_to_f32(bits),
                            gr,
                            entry,
                            mi as u32,
                            lr_rest,
                            &consts,
                        );
                        np = p1;
                        entry = e1;
                    } else {
                        np = adam_value(
                            f16_to_f32(bits),
                            gr,
                            mi,
                            m,
                            v,
                            mv,
                            lr_rest,
                            &consts,
                            compact,
                        );
                    }
                    nb = f16_stochastic_bits(
                        np,
                        pcg_hash(pcg_hash(mi as u32) ^ consts.key ^ HALF_PARAM_SALT),
                    );
                }
            }
            out |= nb << (h * 16u32);
            mout |= entry << (h * 16u32);
        }
        rest[w] = out;
        if sh8 {
            mv8[w] = mout;
        }
    }
}

/// Where [`adam_update_sh_half`] takes the SH gradient from.
pub enum ShGrad<'a> {
    /// A stored `[n][k][rgb]` gradient ([`crate::ParamGrads::sh`]).
    Buffer(&'a GpuBuffer<f32>),
    /// Computed per value from a render of one chunk with `sh_grad` off: its means, the
    /// forward buffers and the projected gradient ([`crate::SplatGrads::projected`]). Saves
    /// writing and reading 12 bytes per coefficient and Gaussian, and their memory.
    Fused {
        means: &'a GpuBuffer<f32>,
        inputs: crate::render::ShGradInputs<'a>,
        v_proj: &'a GpuBuffer<f32>,
    },
}

/// [`adam_update`] for SH coefficients stored as [`crate::ShCoeffs::Half`] (`dc` `[n][rgb]`,
/// `rest` packed halves); the gradient and `moments` hold every value of the `[n][k][rgb]`
/// rows (`row = 3k`). The DC terms step with `lr_dc`, the rest with `lr_rest`.
#[allow(clippy::too_many_arguments)]
pub fn adam_update_sh_half(
    gpu: &Gpu,
    dc: &GpuBuffer<f32>,
    rest: &GpuBuffer<u32>,
    grad: ShGrad<'_>,
    moments: &Moments,
    row: usize,
    (lr_dc, lr_rest): (f32, f32),
    t: u64,
    cfg: &AdamConfig,
    visible: Option<&GpuBuffer<u32>>,
    key: u32,
) {
    let n = dc.len() / 3;
    assert!(
        row >= 3 && moments.len() == n * row && rest.len() == (n * (row - 3)).div_ceil(2),
        "adam (half SH) buffer lengths"
    );
    let (none_f, none_u) = (
        gpu.placeholder::<f32>(slot::NONE_F32),
        gpu.placeholder::<u32>(slot::NONE_U32),
    );
    let (grad, means, cam, tiles, proj, v_proj, active, fused) = match &grad {
        ShGrad::Buffer(g) => {
            assert_eq!(g.len(), n * row, "adam (half SH) gradient length");
            (*g, &none_f, &none_f, &none_u, &none_f, &none_f, 0, false)
        }
        ShGrad::Fused {
            means,
            inputs,
            v_proj,
        } => {
            assert_eq!(means.len(), n * 3, "adam (half SH) means length");
            (
                &none_f,
                *means,
                inputs.cam,
                inputs.tiles_touched,
                inputs.proj,
                *v_proj,
                inputs.active_coeffs,
                true,
            )
        }
    };
    if n == 0 {
        return;
    }
    let no_radii = gpu.placeholder::<u32>(slot::RADII);
    let radii = visible.unwrap_or(&no_radii);
    let MomentArgs {
        m,
        v,
        mv,
        mv8,
        compact,
        sh8,
    } = MomentArgs::new(gpu, moments);
    let units = n * 3 + rest.len();
    adam_step_sh_half::launch(
        gpu.client(),
        gpu.grid_1d(units),
        rust3r_gpu::BLOCK_DIM,
        dc.arg(),
        rest.arg(),
        grad.arg(),
        ShGradArgsLaunch {
            means: means.arg(),
            cam: cam.arg(),
            tiles_touched: tiles.arg(),
            proj: proj.arg(),
            v_proj: v_proj.arg(),
        },
        active,
        m.arg(),
        v.arg(),
        mv.arg(),
        mv8.arg(),
        radii.arg(),
        n as u32,
        row as u32,
        lr_dc,
        lr_rest,
        cfg.consts(t, key),
        compact,
        sh8,
        visible.is_some(),
        fused,
    );
}

/// The Adam kernels' moment arguments for `moments`, with one-value placeholders for the
/// buffers its storage does not use (a binding must still be given).
struct MomentArgs {
    m: GpuBuffer<f32>,
    v: GpuBuffer<f32>,
    /// bf16 pairs (of every value, or of the DC values for `sh8`).
    mv: GpuBuffer<u32>,
    /// 8-bit pairs of the higher-order SH values.
    mv8: GpuBuffer<u32>,
    compact: bool,
    sh8: bool,
}

impl MomentArgs {
    fn new(gpu: &Gpu, moments: &Moments) -> Self {
        let (m0, v0) = (gpu.placeholder(slot::M), gpu.placeholder(slot::V));
        let (mv0, mv80) = (gpu.placeholder(slot::MV), gpu.placeholder(slot::MV8));
        match moments {
            Moments::F32 { m, v } => Self {
                m: m.clone(),
                v: v.clone(),
                mv: mv0,
                mv8: mv80,
                compact: false,
                sh8: false,
            },
            Moments::Bf16(mv) => Self {
                m: m0,
                v: v0,
                mv: mv.clone(),
                mv8: mv80,
                compact: true,
                sh8: false,
            },
            Moments::Sh8 { dc, rest, .. } => Self {
                m: m0,
                v: v0,
                mv: dc.clone(),
                mv8: rest.clone(),
                compact: true,
                sh8: true,
            },
        }
    }
}

/// How the Adam moments are stored.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MomentPrecision {
    /// Two f32 buffers, 8 bytes per value.
    F32,
    /// Both moments as bf16 in one 32-bit word, stochastically rounded: 4 bytes per value.
    Bf16,
    /// bf16 pairs as [`MomentPrecision::Bf16`], except for the higher-order SH coefficients
    /// (stored as half floats): their moments take 8 bits each, `m` as s1e5m2 and `sqrt(v)`
    /// as e5m3 ([`rust3r_gpu::fp8`]), stochastically rounded: 2 bytes per value. The default
    /// (300 B per Gaussian at SH 3, with [`crate::ShPrecision::F16`], which it needs; quality
    /// against bf16 on lego, fox and the statuette in docs/benchmarks/journal.md).
    #[default]
    Sh8,
}

impl MomentPrecision {
    /// What configurations written before the setting existed used (f32 moments), so that
    /// their checkpoints keep loading.
    pub fn legacy() -> Self {
        Self::F32
    }
    /// This storage beside SH coefficients stored as `sh`: 8-bit SH moments need half SH
    /// ([`crate::ShPrecision::F16`]), so with other SH they become bf16 pairs.
    pub fn for_sh(self, sh: crate::ShPrecision) -> Self {
        if self == Self::Sh8 && sh != crate::ShPrecision::F16 {
            Self::Bf16
        } else {
            self
        }
    }
    /// Device bytes of the two moments of one value (of the higher-order SH coefficients
    /// with `sh_rest`).
    pub fn bytes_per_value(self, sh_rest: bool) -> u64 {
        match self {
            Self::F32 => 8,
            Self::Bf16 => 4,
            Self::Sh8 if sh_rest => 2,
            Self::Sh8 => 4,
        }
    }
}

impl std::str::FromStr for MomentPrecision {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "f32" => Ok(Self::F32),
            "bf16" => Ok(Self::Bf16),
            "sh8" => Ok(Self::Sh8),
            other => Err(format!(
                "unknown moment precision '{other}' (f32, bf16 or sh8)"
            )),
        }
    }
}

impl std::fmt::Display for MomentPrecision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::F32 => "f32",
            Self::Bf16 => "bf16",
            Self::Sh8 => "sh8",
        })
    }
}

/// Hyper-parameters of one parameter group.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct AdamConfig {
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
    /// Storage of the moments (missing in configurations written before it existed: f32).
    #[serde(default = "MomentPrecision::legacy")]
    pub moments: MomentPrecision,
}

impl AdamConfig {
    /// `1 - beta1^t` and `sqrt(1 - beta2^t)` at step `t` (1-based), computed in f64.
    fn bias_corrections(&self, t: u64) -> (f32, f32) {
        let bc1 = 1.0 - (self.beta1 as f64).powf(t as f64);
        let bc2 = 1.0 - (self.beta2 as f64).powf(t as f64);
        (bc1 as f32, bc2.sqrt() as f32)
    }
}

impl Default for AdamConfig {
    fn default() -> Self {
        // gsplat's trainer uses eps = 1e-15.
        Self {
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-15,
            moments: MomentPrecision::default(),
        }
    }
}

/// One packed word of moments: `m` in the high half, `v` in the low half.
pub fn pack_moments(m: f32, v: f32) -> u32 {
    ((bf16_nearest(m) as u32) << 16) | bf16_nearest(v) as u32
}

pub fn unpack_moments(word: u32) -> (f32, f32) {
    (bf16_to_f32((word >> 16) as u16), bf16_to_f32(word as u16))
}

/// The 32-bit key of the stochastic rounding of one group's moments at step `t`
/// (SplitMix64 of the seed, the group and the step).
pub fn rounding_key(seed: u64, group: usize, t: u64) -> u32 {
    let mut z = seed
        .wrapping_add((group as u64).wrapping_mul(0xD1B5_4A32_D192_ED03))
        .wrapping_add(t.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (z ^ (z >> 31)) as u32
}

/// The random bits the compact update uses for element `i` under `key`: the low 16 round
/// `m`, the high 16 round `v`.
pub fn rounding_bits(i: u32, key: u32) -> u32 {
    pcg_hash_host(pcg_hash_host(i) ^ key)
}

/// The Adam moments of one parameter group, `len` values.
#[derive(Clone, Debug)]
pub enum Moments {
    F32 {
        m: GpuBuffer<f32>,
        v: GpuBuffer<f32>,
    },
    /// One word per value: bf16 `m` in the high half, bf16 `v` in the low half.
    Bf16(GpuBuffer<u32>),
    /// SH coefficients' moments, rows of `row` values (`[n][k][rgb]`): `dc` holds the three DC
    /// values of each row as bf16 pairs (one word each); `rest` the other `row - 3` values of
    /// each row, back to back, 16 bits per value and two values per word (value `2i` in the low
    /// half of word `i`): the s1e5m2 code of `m` in the high byte, the e5m3 code of `sqrt(v)`
    /// in the low byte.
    Sh8 {
        dc: GpuBuffer<u32>,
        rest: GpuBuffer<u32>,
        row: usize,
    },
}

/// 16-bit [`Moments::Sh8`] entry of `(m, v)`, rounded to nearest.
pub fn pack_moments_sh8(m: f32, v: f32) -> u16 {
    use rust3r_gpu::fp8;
    (u16::from(fp8::signed_encode_nearest_host(m)) << 8)
        | u16::from(fp8::unsigned_encode_nearest_host(v.max(0.0).sqrt()))
}

/// `(m, v)` of a 16-bit [`Moments::Sh8`] entry.
pub fn unpack_moments_sh8(e: u16) -> (f32, f32) {
    use rust3r_gpu::fp8;
    let s = fp8::unsigned_decode_host(e as u8);
    (fp8::signed_decode_host((e >> 8) as u8), s * s)
}

impl Moments {
    /// Zero moments of `len` values of a group other than the SH coefficients (`Sh8` stores
    /// those as bf16 pairs).
    pub fn zeros(gpu: &Gpu, len: usize, precision: MomentPrecision) -> Self {
        match precision {
            MomentPrecision::F32 => Self::F32 {
                m: gpu.zeros(len),
                v: gpu.zeros(len),
            },
            MomentPrecision::Bf16 | MomentPrecision::Sh8 => Self::Bf16(gpu.zeros(len)),
        }
    }

    /// Zero moments of `n` rows of `row` SH values (`Sh8`: [`Moments::Sh8`]).
    pub fn zeros_sh(gpu: &Gpu, n: usize, row: usize, precision: MomentPrecision) -> Self {
        match precision {
            MomentPrecision::Sh8 => Self::Sh8 {
                dc: gpu.zeros(n * 3),
                rest: gpu.zeros((n * (row - 3)).div_ceil(2)),
                row,
            },
            _ => Self::zeros(gpu, n * row, precision),
        }
    }

    /// Upload host moments of a group other than the SH coefficients (rounded to nearest when
    /// stored as bf16).
    pub fn from_host(gpu: &Gpu, m: &[f32], v: &[f32], precision: MomentPrecision) -> Self {
        assert_eq!(m.len(), v.len(), "moment lengths");
        match precision {
            MomentPrecision::F32 => Self::F32 {
                m: gpu.upload(m),
                v: gpu.upload(v),
            },
            MomentPrecision::Bf16 | MomentPrecision::Sh8 => {
                let words: Vec<u32> = m.iter().zip(v).map(|(&a, &b)| pack_moments(a, b)).collect();
                Self::Bf16(gpu.upload(&words))
            }
        }
    }

    /// Upload host moments of SH rows `row` values wide (`Sh8`: [`Moments::Sh8`], rounded to
    /// nearest).
    pub fn from_host_sh(
        gpu: &Gpu,
        m: &[f32],
        v: &[f32],
        row: usize,
        precision: MomentPrecision,
    ) -> Self {
        if precision != MomentPrecision::Sh8 {
            return Self::from_host(gpu, m, v, precision);
        }
        assert!(
            m.len() == v.len() && m.len().is_multiple_of(row) && row >= 3,
            "moment lengths"
        );
        let mut dc = Vec::with_capacity(m.len() / row * 3);
        let mut rest = Vec::with_capacity(m.len());
        for (i, (&a, &b)) in m.iter().zip(v).enumerate() {
            if i % row < 3 {
                dc.push(pack_moments(a, b));
            } else {
                rest.push(pack_moments_sh8(a, b));
            }
        }
        Self::Sh8 {
            dc: gpu.upload(&dc),
            rest: gpu.upload(&pack_pairs(rest)),
            row,
        }
    }

    pub fn precision(&self) -> MomentPrecision {
        match self {
            Self::F32 { .. } => MomentPrecision::F32,
            Self::Bf16(_) => MomentPrecision::Bf16,
            Self::Sh8 { .. } => MomentPrecision::Sh8,
        }
    }

    /// Number of values (not bytes, not words).
    pub fn len(&self) -> usize {
        match self {
            Self::F32 { m, .. } => m.len(),
            Self::Bf16(w) => w.len(),
            Self::Sh8 { dc, row, .. } => dc.len() / 3 * row,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Device bytes of the buffers.
    pub fn device_bytes(&self) -> u64 {
        match self {
            Self::F32 { m, v } => (m.len() + v.len()) as u64 * 4,
            Self::Bf16(w) => w.len() as u64 * 4,
            Self::Sh8 { dc, rest, .. } => (dc.len() + rest.len()) as u64 * 4,
        }
    }

    /// Both moments back on the host as f32 (decoded when compact).
    pub fn read(&self, gpu: &Gpu) -> Result<(Vec<f32>, Vec<f32>), GpuError> {
        match self {
            Self::F32 { m, v } => Ok((gpu.read(m)?, gpu.read(v)?)),
            Self::Bf16(w) => Ok(gpu.read(w)?.into_iter().map(unpack_moments).unzip()),
            Self::Sh8 { dc, rest, row } => {
                let dc = gpu.read(dc)?;
                let rest = gpu.read(rest)?;
                let r = row - 3;
                let n = dc.len() / 3;
                let (mut m, mut v) = (Vec::with_capacity(n * row), Vec::with_capacity(n * row));
                for i in 0..n {
                    for &w in &dc[i * 3..i * 3 + 3] {
                        let (a, b) = unpack_moments(w);
                        m.push(a);
                        v.push(b);
                    }
                    for j in i * r..(i + 1) * r {
                        let (a, b) = unpack_moments_sh8(pair_entry(&rest, j));
                        m.push(a);
                        v.push(b);
                    }
                }
                Ok((m, v))
            }
        }
    }

    /// The same moments in another storage (through the host; compact values are exact in
    /// f32, f32 values are rounded to the nearest compact ones). `sh_row`: these are the
    /// moments of SH rows that wide (where `Sh8` has its own storage).
    pub fn converted(
        &self,
        gpu: &Gpu,
        precision: MomentPrecision,
        sh_row: Option<usize>,
    ) -> Result<Self, GpuError> {
        let target = match (precision, sh_row) {
            (MomentPrecision::Sh8, None) => MomentPrecision::Bf16,
            _ => precision,
        };
        if target == self.precision() {
            return Ok(self.clone());
        }
        let (m, v) = self.read(gpu)?;
        Ok(match sh_row {
            Some(row) => Self::from_host_sh(gpu, &m, &v, row, precision),
            None => Self::from_host(gpu, &m, &v, precision),
        })
    }

    /// New moments for the Gaussians described by `parent` / `variant` (see
    /// [`super::densify`]): kept and relocated rows keep their state, new rows start at zero.
    pub fn rebuild(
        &self,
        gpu: &Gpu,
        parent: &GpuBuffer<u32>,
        variant: &GpuBuffer<u32>,
        row: usize,
    ) -> Self {
        use super::densify::{rebuild, rebuild_half, rebuild_words};
        match self {
            // One buffer at a time, so that old and new copies of only one coexist.
            Self::F32 { m, v } => {
                let m = rebuild(gpu, m, parent, variant, row, true);
                let v = rebuild(gpu, v, parent, variant, row, true);
                Self::F32 { m, v }
            }
            Self::Bf16(w) => Self::Bf16(rebuild_words(gpu, w, parent, variant, row, true)),
            Self::Sh8 { dc, rest, row } => {
                let dc = rebuild_words(gpu, dc, parent, variant, 3, true);
                let rest = rebuild_half(gpu, rest, parent, Some(variant), row - 3);
                Self::Sh8 {
                    dc,
                    rest,
                    row: *row,
                }
            }
        }
    }
}

/// One Adam update of `param` (row width `row` values per Gaussian) at step `t` (1-based):
/// learning rate `lr` for the first `first_cols` values of each row, `lr_rest` for the others
/// (SH: DC and higher orders). With `visible` (the rasterizer's radii, 2 per Gaussian) rows of
/// culled Gaussians are skipped. `key` seeds the stochastic rounding of compact moments (see
/// [`rounding_key`]); f32 moments ignore it.
#[allow(clippy::too_many_arguments)]
pub fn adam_update(
    gpu: &Gpu,
    param: &GpuBuffer<f32>,
    grad: &GpuBuffer<f32>,
    moments: &Moments,
    row: usize,
    (first_cols, lr, lr_rest): (usize, f32, f32),
    t: u64,
    cfg: &AdamConfig,
    visible: Option<&GpuBuffer<u32>>,
    key: u32,
) {
    let len = param.len();
    assert!(
        grad.len() == len && moments.len() == len,
        "adam buffer lengths"
    );
    if len == 0 {
        return;
    }
    let dummy;
    let radii = match visible {
        Some(r) => r,
        None => {
            dummy = gpu.placeholder::<u32>(slot::RADII);
            &dummy
        }
    };
    let grid = gpu.grid_1d(len);
    assert!(
        !matches!(moments, Moments::Sh8 { .. }),
        "8-bit SH moments belong to half-float SH coefficients (adam_update_sh_half)"
    );
    let MomentArgs {
        m, v, mv, compact, ..
    } = MomentArgs::new(gpu, moments);
    adam_step::launch(
        gpu.client(),
        grid,
        rust3r_gpu::BLOCK_DIM,
        param.arg(),
        grad.arg(),
        m.arg(),
        v.arg(),
        mv.arg(),
        radii.arg(),
        len as u32,
        row as u32,
        first_cols as u32,
        lr,
        lr_rest,
        cfg.consts(t, key),
        compact,
        visible.is_some(),
    );
}
