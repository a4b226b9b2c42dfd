//! bfloat16 storage: the upper half of an f32's bits, so decoding is a shift and encoding a
//! truncation; every backend runs it (WGSL needs no `shader-f16`). Kernels encode with
//! stochastic rounding ([`bf16_stochastic_bits`]); the host functions mirror it and round to
//! nearest for uploads.
// `#[cube]` code is written the way CubeCL's frontend expands it (`x = x op y`).
#![allow(clippy::assign_op_pattern)]

use cubecl::prelude::*;

/// The bf16 bits (low 16 bits of the result) of `x` rounded stochastically with the
/// random value `r` (its low 16 bits are used): `(bits(x) + r) >> 16`. On the sign-magnitude
/// encoding this rounds the magnitude up with probability equal to the dropped fraction, for
/// either sign, denormals included; a carry into the exponent is the correct next value (the
/// largest finite values can round up to infinity, as in any rounding of an overflow).
/// Infinities are kept, NaNs stay NaNs (quiet bit set) instead of carrying into the sign.
#[cube]
pub fn bf16_stochastic_bits(x: f32, r: u32) -> u32 {
    let b = u32::reinterpret(x);
    let mut out = (b + (r & 0xFFFFu32)) >> 16u32;
    if (b & 0x7F80_0000u32) == 0x7F80_0000u32 {
        out = b >> 16u32;
        if (b & 0x007F_FFFFu32) != 0u32 {
            out = out | 0x40u32;
        }
    }
    out
}

/// Host mirror of [`bf16_stochastic_bits`].
pub fn bf16_stochastic(x: f32, r: u16) -> u16 {
    let b = x.to_bits();
    if b & 0x7F80_0000 == 0x7F80_0000 {
        let t = (b >> 16) as u16;
        return if b & 0x007F_FFFF != 0 { t | 0x40 } else { t };
    }
    ((b + r as u32) >> 16) as u16
}

/// bf16 nearest to `x`, ties to even (NaN stays NaN).
pub fn bf16_nearest(x: f32) -> u16 {
    let b = x.to_bits();
    if b & 0x7F80_0000 == 0x7F80_0000 {
        return bf16_stochastic(x, 0);
    }
    ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) as u16
}

/// The f32 value of bf16 bits (exact).
pub fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}
