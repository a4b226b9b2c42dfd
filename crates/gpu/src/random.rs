//! Counter-based random numbers for kernels: a stateless hash of an element index (and a key)
//! instead of a generator state, so every unit draws its own values in any order. On the host,
//! [`splitmix64`] is the one SplitMix64 every host-side stream of the workspace draws from.

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

/// The SplitMix64 golden-ratio increment.
pub const SPLITMIX_GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// Element `i` of the SplitMix64 stream `seed` (counter-based: any element directly; element
/// `i` is what a generator started at `seed` returns on its `i`-th call, so `i = 1` is one step
/// from state `seed`).
pub fn splitmix64(seed: u64, i: u64) -> u64 {
    let mut z = seed.wrapping_add(i.wrapping_mul(SPLITMIX_GAMMA));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::{SPLITMIX_GAMMA, splitmix64};

    #[test]
    fn splitmix64_matches_the_reference_generator() {
        // Vigna's splitmix64.c seeded with 0: its first two outputs.
        assert_eq!(splitmix64(0, 1), 0xE220_A839_7B1D_CDAF);
        assert_eq!(splitmix64(0, 2), 0x6E78_9E6A_A1B9_65F4);
        // Counter-based: element i from seed s is element 1 from s + (i - 1) * gamma.
        assert_eq!(
            splitmix64(7, 5),
            splitmix64(7u64.wrapping_add(SPLITMIX_GAMMA.wrapping_mul(4)), 1)
        );
    }
}
