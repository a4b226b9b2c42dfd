//! IEEE 754 binary16 ("half") storage for kernels, as bit patterns in 32-bit words.
//!
//! WGSL only has an `f16` type behind the optional `shader-f16` feature (Mesa's lavapipe and
//! many drivers lack it), so half floats are stored two per `u32` and converted with integer
//! arithmetic: the same code runs on every backend. Decoding is exact; encoding rounds
//! *stochastically* (up with probability equal to the dropped fraction), so small optimizer
//! steps accumulate on average instead of being lost to round-to-nearest.
//!
//! Host helpers mirror the kernels bit for bit (tests) and pack arrays for upload
//! (round-to-nearest-even through the `half` crate).
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

/// The f32 value of the binary16 bit pattern in the low 16 bits of `h` (exact; infinities and
/// NaNs kept).
#[cube]
pub fn f16_to_f32(h: u32) -> f32 {
    let sign = (h & 0x8000u32) << 16u32;
    let exp = (h >> 10u32) & 0x1Fu32;
    let mant = h & 0x3FFu32;
    // Normal; below, zero / subnormal and infinity / NaN.
    let mut out = f32::reinterpret(sign | ((exp + 112u32) << 23u32) | (mant << 13u32));
    if exp == 0u32 {
        // mant * 2^-24
        let mag = f32::cast_from(mant) * 5.960_464_5e-8f32;
        out = f32::reinterpret(u32::reinterpret(mag) | sign);
    } else if exp == 31u32 {
        out = f32::reinterpret(sign | 0x7F80_0000u32 | (mant << 13u32));
    }
    out
}

/// Binary16 bits (low 16 bits of the result) of `x`, rounded stochastically with the random
/// value `r` (its low 16 bits are used): the magnitude rounds up with probability equal to the
/// dropped fraction, for normal and subnormal results alike. Magnitudes beyond the largest
/// finite half (65504) saturate to it; infinities stay infinite and NaNs stay NaN.
#[cube]
pub fn f16_stochastic_bits(x: f32, r: u32) -> u32 {
    let b = u32::reinterpret(x);
    let sign = (b >> 16u32) & 0x8000u32;
    let a = b & 0x7FFF_FFFFu32;
    // Infinity; below, NaN and finite values.
    let mut out = sign | 0x7C00u32;
    if a > 0x7F80_0000u32 {
        out = out | 0x200u32;
    } else if a >= 0x3880_0000u32 && a < 0x7F80_0000u32 {
        // Normal result (|x| >= 2^-14): 13 mantissa bits dropped; a carry moves into the
        // exponent, which is the correct next value.
        let t = a + (r & 0x1FFFu32);
        let e = t >> 23u32;
        out = sign | 0x7BFFu32;
        if e < 143u32 {
            out = sign | ((e - 112u32) << 10u32) | ((t >> 13u32) & 0x3FFu32);
        }
    } else if a < 0x3880_0000u32 {
        // Subnormal or zero: multiples of 2^-24 (a result of 1024 is the smallest normal,
        // whose encoding is the same integer).
        let q = f32::reinterpret(a) * 16_777_216.0f32;
        let fl = f32::floor(q);
        let u = f32::cast_from(r & 0xFFFFu32) * (1.0f32 / 65536.0f32);
        let mut mag = u32::cast_from(fl);
        if q - fl > u {
            mag += 1u32;
        }
        out = sign | mag;
    }
    out
}

/// 16-bit entry `i` of an array stored two per word (`i` even: low half), in the low bits.
#[cube]
pub fn half_bits_at(words: &[u32], i: usize) -> u32 {
    (words[i / 2] >> (((i % 2) as u32) * 16u32)) & 0xFFFFu32
}

/// Half value `i` of an array stored two per word (`i` even: low half).
#[cube]
pub fn f16_at(words: &[u32], i: usize) -> f32 {
    f16_to_f32(half_bits_at(words, i))
}

/// Host mirror of [`f16_stochastic_bits`], bit for bit.
pub fn f16_stochastic_host(x: f32, r: u32) -> u16 {
    let b = x.to_bits();
    let sign = (b >> 16) & 0x8000;
    let a = b & 0x7FFF_FFFF;
    let out = if a >= 0x7F80_0000 {
        sign | 0x7C00 | if a > 0x7F80_0000 { 0x200 } else { 0 }
    } else if a >= 0x3880_0000 {
        let t = a + (r & 0x1FFF);
        let e = t >> 23;
        if e >= 143 {
            sign | 0x7BFF
        } else {
            sign | ((e - 112) << 10) | ((t >> 13) & 0x3FF)
        }
    } else {
        let q = f32::from_bits(a) * 16_777_216.0;
        let fl = q.floor();
        let u = (r & 0xFFFF) as f32 * (1.0 / 65536.0);
        sign | (fl as u32 + u32::from(q - fl > u))
    };
    out as u16
}

/// Nearest binary16 bits of `x` (ties to even).
pub fn f16_nearest(x: f32) -> u16 {
    half::f16::from_f32(x).to_bits()
}

/// The f32 value of binary16 bits.
pub fn f16_value(h: u16) -> f32 {
    half::f16::from_bits(h).to_f32()
}

/// 16-bit entries packed two per word (entry `2i` in the low half of word `i`; an odd count
/// leaves the last high half zero): the layout [`half_bits_at`] reads.
pub fn pack_pairs(entries: impl IntoIterator<Item = u16>) -> Vec<u32> {
    let mut words = Vec::new();
    for (i, e) in entries.into_iter().enumerate() {
        if i % 2 == 0 {
            words.push(u32::from(e));
        } else {
            *words.last_mut().expect("pushed above") |= u32::from(e) << 16;
        }
    }
    words
}

/// Host mirror of [`half_bits_at`].
pub fn pair_entry(words: &[u32], i: usize) -> u16 {
    (words[i / 2] >> ((i % 2) * 16)) as u16
}

/// `values` rounded to the nearest half and packed two per word ([`pack_pairs`]). Finite
/// values beyond the half range saturate to ±65504, as [`f16_stochastic_bits`] does.
pub fn pack_f16(values: &[f32]) -> Vec<u32> {
    pack_pairs(values.iter().map(|&x| {
        f16_nearest(if x.is_finite() {
            x.clamp(-65504.0, 65504.0)
        } else {
            x
        })
    }))
}

/// The first `len` values of a packed half array.
pub fn unpack_f16(words: &[u32], len: usize) -> Vec<f32> {
    (0..len).map(|i| f16_value(pair_entry(words, i))).collect()
}
