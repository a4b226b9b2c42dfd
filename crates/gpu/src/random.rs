//! Counter-based random numbers for kernels: a stateless hash of an element index (and a key)
//! instead of a generator state, so every unit draws its own values in any order.

use cubecl::prelude::*;

/// PCG hash (O'Neill), a stateless per-element random stream.
#[cube]
pub fn pcg_hash(v: u32) -> u32 {
    let state = v * 747796405u32 + 2891336453u32;
    let word = ((state >> ((state >> 28u32) + 4u32)) ^ state) * 277803737u32;
    (word >> 22u32) ^ word
}

/// Uniform in (0, 1].
#[cube]
pub fn uniform(v: u32) -> f32 {
    ((pcg_hash(v) >> 8u32) + 1u32) as f32 * (1.0f32 / 16777216.0f32)
}

/// A standard normal from two hashed uniforms (Box-Muller).
// 2 pi as a literal: `#[cube]` code takes float literals, not paths to std constants.
#[allow(clippy::approx_constant, clippy::excessive_precision)]
#[cube]
pub fn normal(seed: u32, index: u32) -> f32 {
    let u1 = uniform(seed ^ pcg_hash(index * 2u32));
    let u2 = uniform(seed ^ pcg_hash(index * 2u32 + 1u32));
    f32::sqrt(-2.0f32 * f32::ln(u1)) * f32::cos(6.283185307179586f32 * u2)
}

/// Host mirror of [`pcg_hash`].
pub fn pcg_hash_host(v: u32) -> u32 {
    let state = v.wrapping_mul(747796405).wrapping_add(2891336453);
    let word = ((state >> ((state >> 28) + 4)) ^ state).wrapping_mul(277803737);
    (word >> 22) ^ word
}
