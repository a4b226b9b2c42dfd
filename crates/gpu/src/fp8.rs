//! 8-bit floats for optimizer state, as integer codes (any backend, no native fp8 type).
//!
//! A magnitude code holds a 5-bit exponent and `man_bits` mantissa bits (`man_bits` = 2 with a
//! separate sign bit: "s1e5m2"; 3 for non-negative values: "e5m3"). Exponent codes 1..=31 are
//! the binades 2^-31 .. 2^-1, so magnitudes from 2^-31 (4.7e-10) to just under 1 are
//! representable with 2^-man_bits relative spacing; code 0 is zero. There are no subnormals:
//! magnitudes below 2^-31 round stochastically to 0 or 2^-31, larger ones than the maximum (and
//! infinities or NaN) saturate to it. Encoding rounds stochastically, so the expected decoded
//! value equals the input inside the range.
//!
//! The trainer stores the Adam moments of the higher-order SH coefficients this way: `m` as
//! s1e5m2, `sqrt(v)` as e5m3 (storing the square root halves the exponent range `v` needs).
//! The unsigned code never rounds a non-zero value to zero (see [`fp8_unsigned_encode`]).

use cubecl::prelude::*;

/// Biased f32 exponent of the smallest normal code (2^-31; `0x3000_0000` are its bits).
const MIN_EXP_F32: u32 = 96;

/// Magnitude code of `|x|` (`a` = the f32 bits with the sign cleared) with `man_bits` mantissa
/// bits, rounded stochastically with `r` (the low `23 - man_bits` bits are used in range, the
/// low 16 below it).
#[cube]
pub fn fp8_encode_mag(a: u32, r: u32, man_bits: u32) -> u32 {
    let shift = 23u32 - man_bits;
    let man_mask = (1u32 << man_bits) - 1u32;
    // Saturated (also infinity / NaN); below, in range and under the smallest normal.
    let mut code = (31u32 << man_bits) | man_mask;
    if a < 0x3000_0000u32 {
        // 2^31 * |x| in [0, 1): the probability of rounding up to 2^-31.
        let p = f32::reinterpret(a) * 2_147_483_648.0f32;
        let u = f32::cast_from(r & 0xFFFFu32) * (1.0f32 / 65536.0f32);
        code = 0u32;
        if p > u {
            code = 1u32 << man_bits;
        }
    } else if a < 0x7F80_0000u32 {
        let t = a + (r & ((1u32 << shift) - 1u32));
        // biased f32 exponent 96 (2^-31) is exponent code 1
        let e = (t >> 23u32) - 95u32;
        if e <= 31u32 {
            code = (e << man_bits) | ((t >> shift) & man_mask);
        }
    }
    code
}

/// The magnitude a code of [`fp8_encode_mag`] stands for (exact).
#[cube]
pub fn fp8_decode_mag(code: u32, man_bits: u32) -> f32 {
    let e = code >> man_bits;
    let mant = code & ((1u32 << man_bits) - 1u32);
    let mut out = 0.0f32;
    if e != 0u32 {
        out = f32::reinterpret(((e + 95u32) << 23u32) | (mant << (23u32 - man_bits)));
    }
    out
}

/// s1e5m2 code of `x` (sign in bit 7), rounded stochastically with `r`.
#[cube]
pub fn fp8_signed_encode(x: f32, r: u32) -> u32 {
    let b = u32::reinterpret(x);
    ((b >> 24u32) & 0x80u32) | fp8_encode_mag(b & 0x7FFF_FFFFu32, r, 2u32)
}

/// The value of an s1e5m2 code.
#[cube]
pub fn fp8_signed_decode(code: u32) -> f32 {
    let mag = fp8_decode_mag(code & 0x7Fu32, 2u32);
    f32::reinterpret(u32::reinterpret(mag) | ((code & 0x80u32) << 24u32))
}

/// e5m3 code of `x >= 0` (the sign is dropped), rounded stochastically with `r`, except that
/// a non-zero value never becomes zero: below 2^-31 it rounds up to 2^-31. Stored `sqrt(v)`
/// then never vanishes under a non-zero first moment; an Adam step `m / (sqrt(v) + eps)` with
/// gsplat's eps = 1e-15 would otherwise jump by 1e5 learning rates.
#[cube]
pub fn fp8_unsigned_encode(x: f32, r: u32) -> u32 {
    let a = u32::reinterpret(x) & 0x7FFF_FFFFu32;
    let mut code = fp8_encode_mag(a, r, 3u32);
    if code == 0u32 && a != 0u32 {
        code = 8u32;
    }
    code
}

/// The value of an e5m3 code.
#[cube]
pub fn fp8_unsigned_decode(code: u32) -> f32 {
    fp8_decode_mag(code & 0xFFu32, 3u32)
}

/// Host mirror of [`fp8_encode_mag`], bit for bit.
pub fn encode_mag_host(a: u32, r: u32, man_bits: u32) -> u32 {
    let shift = 23 - man_bits;
    let max_code = (31 << man_bits) | ((1 << man_bits) - 1);
    if a < MIN_EXP_F32 << 23 {
        let p = f32::from_bits(a) * 2_147_483_648.0;
        let u = (r & 0xFFFF) as f32 * (1.0 / 65536.0);
        if p > u { 1 << man_bits } else { 0 }
    } else if a < 0x7F80_0000 {
        let t = a + (r & ((1 << shift) - 1));
        let e = (t >> 23) - (MIN_EXP_F32 - 1);
        if e <= 31 {
            (e << man_bits) | ((t >> shift) & ((1 << man_bits) - 1))
        } else {
            max_code
        }
    } else {
        max_code
    }
}

/// Host mirror of [`fp8_decode_mag`].
pub fn decode_mag_host(code: u32, man_bits: u32) -> f32 {
    let e = code >> man_bits;
    if e == 0 {
        0.0
    } else {
        f32::from_bits(
            ((e + MIN_EXP_F32 - 1) << 23) | ((code & ((1 << man_bits) - 1)) << (23 - man_bits)),
        )
    }
}

/// Host mirror of [`fp8_signed_encode`].
pub fn signed_encode_host(x: f32, r: u32) -> u8 {
    let b = x.to_bits();
    (((b >> 24) & 0x80) | encode_mag_host(b & 0x7FFF_FFFF, r, 2)) as u8
}

/// Host mirror of [`fp8_signed_decode`].
pub fn signed_decode_host(code: u8) -> f32 {
    let mag = decode_mag_host(u32::from(code & 0x7F), 2);
    if code & 0x80 != 0 { -mag } else { mag }
}

/// Host mirror of [`fp8_unsigned_encode`].
pub fn unsigned_encode_host(x: f32, r: u32) -> u8 {
    let a = x.to_bits() & 0x7FFF_FFFF;
    let code = encode_mag_host(a, r, 3);
    (if code == 0 && a != 0 { 8 } else { code }) as u8
}

/// Host mirror of [`fp8_unsigned_decode`].
pub fn unsigned_decode_host(code: u8) -> f32 {
    decode_mag_host(u32::from(code), 3)
}

/// Nearest magnitude code of `|x|` with `man_bits` mantissa bits (ties away from zero;
/// saturating like [`fp8_encode_mag`]).
pub fn encode_mag_nearest_host(x: f32, man_bits: u32) -> u32 {
    let a = x.to_bits() & 0x7FFF_FFFF;
    if a < MIN_EXP_F32 << 23 {
        // 0 or 2^-31
        return if a >= (MIN_EXP_F32 - 1) << 23 {
            1 << man_bits
        } else {
            0
        };
    }
    let lo = encode_mag_host(a, 0, man_bits);
    let max_code = (31 << man_bits) | ((1 << man_bits) - 1);
    if lo == max_code || a >= 0x7F80_0000 {
        return lo;
    }
    let hi = lo + 1;
    let v = f32::from_bits(a) as f64;
    let (l, h) = (
        decode_mag_host(lo, man_bits) as f64,
        decode_mag_host(hi, man_bits) as f64,
    );
    if v - l < h - v { lo } else { hi }
}

/// Nearest s1e5m2 code of `x`.
pub fn signed_encode_nearest_host(x: f32) -> u8 {
    (((x.to_bits() >> 24) & 0x80) | encode_mag_nearest_host(x, 2)) as u8
}

/// Nearest e5m3 code of `x >= 0` (non-zero values below 2^-31 round up, as in
/// [`fp8_unsigned_encode`]).
pub fn unsigned_encode_nearest_host(x: f32) -> u8 {
    let code = encode_mag_nearest_host(x, 3);
    (if code == 0 && x != 0.0 { 8 } else { code }) as u8
}
