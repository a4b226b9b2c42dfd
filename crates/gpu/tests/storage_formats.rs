//! Half-float and 8-bit-float storage kernels against the `half` crate, host mirrors and an
//! f64 reference. Output buffers are poisoned before the kernels write them.

use cubecl::prelude::*;
use rand::{Rng, SeedableRng, rngs::StdRng};
use rust3r_gpu::bf16::{bf16_nearest, bf16_stochastic, bf16_to_f32};
use rust3r_gpu::fp8;
use rust3r_gpu::half::{
    f16_at, f16_nearest, f16_stochastic_bits, f16_stochastic_host, f16_to_f32, f16_value, pack_f16,
    unpack_f16,
};
use rust3r_gpu::random::pcg_hash_host;
use rust3r_gpu::{Gpu, GpuOptions, cubecl};

fn gpu() -> Gpu {
    Gpu::new(&GpuOptions {
        poison: true,
        ..Default::default()
    })
    .expect("a GPU adapter is required (CI installs Mesa's lavapipe)")
}

#[cube(launch)]
fn decode(bits: &[u32], out: &mut [f32], n: u32) {
    let i = rust3r_gpu::global_id();
    if i < n as usize {
        out[i] = f16_to_f32(bits[i]);
    }
}

#[cube(launch)]
fn decode_packed(words: &[u32], out: &mut [f32], n: u32) {
    let i = rust3r_gpu::global_id();
    if i < n as usize {
        out[i] = f16_at(words, i);
    }
}

#[cube(launch)]
fn encode(x: &[f32], r: &[u32], out: &mut [u32], n: u32) {
    let i = rust3r_gpu::global_id();
    if i < n as usize {
        out[i] = f16_stochastic_bits(x[i], r[i]);
    }
}

fn launch_1d(gpu: &Gpu, n: usize) -> (CubeCount, CubeDim) {
    (gpu.grid_1d(n), rust3r_gpu::BLOCK_DIM)
}

#[test]
fn every_half_bit_pattern_decodes_exactly() {
    let gpu = gpu();
    let bits: Vec<u32> = (0..=u16::MAX as u32).collect();
    let n = bits.len();
    let out = gpu.alloc::<f32>(n);
    let (grid, dim) = launch_1d(&gpu, n);
    decode::launch(
        gpu.client(),
        grid,
        dim,
        gpu.upload(&bits).arg(),
        out.arg(),
        n as u32,
    );
    let got = gpu.read(&out).unwrap();
    for (h, g) in bits.iter().zip(&got) {
        let want = f16_value(*h as u16);
        if want.is_nan() {
            assert!(g.is_nan(), "{h:#06x}: NaN expected, got {g}");
        } else {
            assert_eq!(g.to_bits(), want.to_bits(), "{h:#06x}: {g} vs {want}");
        }
    }
    // Packed access: value i in the low half of word i/2 when i is even.
    let vals: Vec<f32> = (0..1001).map(|i| (i as f32 - 500.0) * 0.013).collect();
    let words = pack_f16(&vals);
    let out = gpu.alloc::<f32>(vals.len());
    let (grid, dim) = launch_1d(&gpu, vals.len());
    decode_packed::launch(
        gpu.client(),
        grid,
        dim,
        gpu.upload(&words).arg(),
        out.arg(),
        vals.len() as u32,
    );
    assert_eq!(gpu.read(&out).unwrap(), unpack_f16(&words, vals.len()));
    // Upload packing saturates like the stochastic encoder; infinities and NaN stay.
    let back = unpack_f16(&pack_f16(&[1e6, -7e4, f32::INFINITY, f32::NAN, 0.5]), 5);
    assert_eq!(&back[..3], &[65504.0, -65504.0, f32::INFINITY]);
    assert!(back[3].is_nan() && back[4] == 0.5);
}

/// The two halves that bracket `x` (f64 arithmetic on the half values).
fn neighbours(x: f32) -> (f64, f64) {
    let near = f16_nearest(x);
    let v = f16_value(near) as f64;
    let step = |h: u16, up: bool| -> u16 {
        // next half of larger / smaller magnitude with the same sign
        if up { h + 1 } else { h.wrapping_sub(1) }
    };
    let mag = near & 0x7FFF;
    let (lo, hi) = if (v.abs()) <= (x as f64).abs() {
        (mag, step(mag, true))
    } else {
        (step(mag, false), mag)
    };
    let sign = near & 0x8000;
    let a = f16_value(lo | sign) as f64;
    let b = f16_value(hi.min(0x7BFF) | sign) as f64;
    (a.min(b), a.max(b))
}

#[test]
fn stochastic_encoding_matches_the_host_mirror_and_brackets_the_value() {
    let gpu = gpu();
    let mut rng = StdRng::seed_from_u64(7);
    let mut xs: Vec<f32> = vec![
        0.0,
        -0.0,
        1.0,
        -1.0,
        65504.0,
        65519.0,
        1e6,
        -1e6,
        6.0e-8,
        -3.0e-8,
        6.1e-5,
        6.103_515_6e-5,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        1e-30,
    ];
    for _ in 0..20_000 {
        let e = rng.random_range(-30.0f32..17.0);
        let s = if rng.random_bool(0.5) { -1.0 } else { 1.0 };
        xs.push(s * rng.random_range(1.0f32..2.0) * e.exp2());
    }
    let rs: Vec<u32> = xs.iter().map(|_| rng.random()).collect();
    let n = xs.len();
    let out = gpu.alloc::<u32>(n);
    let (grid, dim) = launch_1d(&gpu, n);
    encode::launch(
        gpu.client(),
        grid,
        dim,
        gpu.upload(&xs).arg(),
        gpu.upload(&rs).arg(),
        out.arg(),
        n as u32,
    );
    let got = gpu.read(&out).unwrap();
    for i in 0..n {
        let host = f16_stochastic_host(xs[i], rs[i]);
        assert_eq!(got[i], host as u32, "x = {:e}, r = {:#x}", xs[i], rs[i]);
        let x = xs[i];
        let v = f16_value(host);
        if x.is_nan() {
            assert!(v.is_nan());
        } else if x.is_infinite() {
            assert_eq!(v, x);
        } else if x.abs() >= 65504.0 {
            assert_eq!(v, 65504.0f32.copysign(x), "saturates");
        } else {
            let (lo, hi) = neighbours(x);
            let v = v as f64;
            assert!(
                v == lo || v == hi,
                "x = {x:e} rounded to {v:e}, outside [{lo:e}, {hi:e}]"
            );
            assert_eq!(v.is_sign_negative(), x.is_sign_negative(), "sign of {x:e}");
        }
    }
}

#[test]
fn stochastic_rounding_is_unbiased() {
    // Mean of many roundings of one value, normal and subnormal, equals the value within
    // the sampling error (a biased rounding, e.g. truncation, is off by about half a step).
    let mut rng = StdRng::seed_from_u64(9);
    for &x in &[0.1f32, -0.337, 1.0e-3 + 1.0e-7, 3.3e-6, -1.0e-7, 777.7] {
        let (lo, hi) = neighbours(x);
        let trials = 200_000;
        let mean = (0..trials)
            .map(|_| f16_value(f16_stochastic_host(x, rng.random())) as f64)
            .sum::<f64>()
            / trials as f64;
        let step = hi - lo;
        // p(1-p) <= 1/4: standard error <= step / (2 sqrt(trials)); allow 5 of them.
        let tol = 5.0 * step / (2.0 * (trials as f64).sqrt());
        assert!(
            (mean - x as f64).abs() < tol,
            "x = {x:e}: mean {mean:e}, step {step:e}"
        );
    }
}

#[cube(launch)]
fn fp8_roundtrip(x: &[f32], r: &[u32], codes: &mut [u32], decoded: &mut [f32], n: u32) {
    let i = rust3r_gpu::global_id();
    if i < n as usize {
        let s = fp8::fp8_signed_encode(x[i], r[i]);
        let u = fp8::fp8_unsigned_encode(f32::abs(x[i]), r[i]);
        codes[i] = s | (u << 8u32);
        decoded[i * 2] = fp8::fp8_signed_decode(s);
        decoded[i * 2 + 1] = fp8::fp8_unsigned_decode(u);
    }
}

/// Largest finite magnitude of a code with `man_bits` mantissa bits.
fn fp8_max(man_bits: u32) -> f64 {
    (2.0 - 2f64.powi(-(man_bits as i32))) * 0.5
}

/// The two representable magnitudes around `a` (f64), for `man_bits`.
fn fp8_neighbours(a: f64, man_bits: u32) -> (f64, f64) {
    let min = 2f64.powi(-31);
    if a < min {
        return (0.0, min);
    }
    let e = a.log2().floor();
    let step = 2f64.powf(e - man_bits as f64);
    let lo = (a / step).floor() * step;
    (lo, (lo + step).min(fp8_max(man_bits)))
}

#[test]
fn fp8_codes_match_the_host_mirror_and_bracket_the_value() {
    let gpu = gpu();
    let mut rng = StdRng::seed_from_u64(11);
    let mut xs: Vec<f32> = vec![
        0.0,
        -0.0,
        0.5,
        -0.5,
        0.99,
        -7.0,
        1e-12,
        -3e-10,
        4.656_613e-10,
        1e30,
        f32::INFINITY,
        f32::NAN,
    ];
    for _ in 0..20_000 {
        let e = rng.random_range(-36.0f32..1.0);
        let s = if rng.random_bool(0.5) { -1.0 } else { 1.0 };
        xs.push(s * rng.random_range(1.0f32..2.0) * e.exp2());
    }
    let rs: Vec<u32> = xs.iter().map(|_| rng.random()).collect();
    let n = xs.len();
    let (codes, decoded) = (gpu.alloc::<u32>(n), gpu.alloc::<f32>(2 * n));
    let (grid, dim) = launch_1d(&gpu, n);
    fp8_roundtrip::launch(
        gpu.client(),
        grid,
        dim,
        gpu.upload(&xs).arg(),
        gpu.upload(&rs).arg(),
        codes.arg(),
        decoded.arg(),
        n as u32,
    );
    let (codes, decoded) = (gpu.read(&codes).unwrap(), gpu.read(&decoded).unwrap());
    for i in 0..n {
        let (x, r) = (xs[i], rs[i]);
        let (sc, uc) = (
            fp8::signed_encode_host(x, r),
            fp8::unsigned_encode_host(x.abs(), r),
        );
        assert_eq!(
            codes[i],
            sc as u32 | ((uc as u32) << 8),
            "x = {x:e}, r = {r:#x}"
        );
        assert_eq!(
            decoded[2 * i].to_bits(),
            fp8::signed_decode_host(sc).to_bits(),
            "x = {x:e}"
        );
        assert_eq!(
            decoded[2 * i + 1],
            fp8::unsigned_decode_host(uc),
            "x = {x:e}"
        );
        for (man_bits, v) in [
            (2u32, decoded[2 * i].abs() as f64),
            (3, decoded[2 * i + 1] as f64),
        ] {
            let a = x.abs() as f64;
            if x.is_nan() || a >= fp8_max(man_bits) {
                assert_eq!(v, fp8_max(man_bits), "x = {x:e} saturates");
            } else if man_bits == 3 && a > 0.0 && a < 2f64.powi(-31) {
                assert_eq!(
                    v,
                    2f64.powi(-31),
                    "x = {x:e}: non-zero sqrt(v) never rounds to zero"
                );
            } else {
                let (lo, hi) = fp8_neighbours(a, man_bits);
                assert!(
                    v == lo || v == hi,
                    "x = {x:e}, m{man_bits}: {v:e} outside [{lo:e}, {hi:e}]"
                );
            }
        }
        if x != 0.0 && !x.is_nan() && decoded[2 * i] != 0.0 {
            assert_eq!(
                decoded[2 * i].is_sign_negative(),
                x.is_sign_negative(),
                "sign of {x:e}"
            );
        }
    }
    // Every code decodes to a distinct, increasing magnitude.
    for man_bits in [2u32, 3] {
        let vals: Vec<f32> = (0..(32u32 << man_bits))
            .map(|c| fp8::decode_mag_host(c, man_bits))
            .collect();
        assert!(
            vals.windows(2).skip(1 << man_bits).all(|w| w[0] < w[1]),
            "m{man_bits} codes increase"
        );
        assert_eq!(vals[1 << man_bits] as f64, 2f64.powi(-31));
        assert_eq!(*vals.last().unwrap() as f64, fp8_max(man_bits));
    }
    // Nearest rounding on the host (used to upload moments).
    for &x in &[0.3f32, -0.3, 1e-11, 3e-10, 0.9] {
        let v = fp8::signed_decode_host(fp8::signed_encode_nearest_host(x)) as f64;
        let (lo, hi) = fp8_neighbours(x.abs() as f64, 2);
        let want = if (x.abs() as f64 - lo) < (hi - x.abs() as f64) {
            lo
        } else {
            hi
        };
        assert_eq!(v.abs(), want, "nearest of {x:e}");
    }
}

#[test]
fn fp8_stochastic_rounding_is_unbiased() {
    let mut rng = StdRng::seed_from_u64(13);
    for &x in &[0.1f32, -0.0037, 3.3e-7, 1.0e-10, -2.0e-10, 0.6] {
        let trials = 200_000;
        let (mut ms, mut us) = (0f64, 0f64);
        for _ in 0..trials {
            let r = rng.random();
            ms += fp8::signed_decode_host(fp8::signed_encode_host(x, r)) as f64;
            us += fp8::unsigned_decode_host(fp8::unsigned_encode_host(x.abs(), r)) as f64;
        }
        for (man_bits, mean, want) in [
            (2u32, ms / trials as f64, x as f64),
            (3, us / trials as f64, x.abs() as f64),
        ] {
            if man_bits == 3 && want < 2f64.powi(-31) {
                continue; // rounds up to 2^-31 by design
            }
            let (lo, hi) = fp8_neighbours(want.abs(), man_bits);
            let tol = 5.0 * (hi - lo) / (2.0 * (trials as f64).sqrt());
            assert!(
                (mean - want).abs() < tol,
                "x = {x:e}, m{man_bits}: mean {mean:e}"
            );
        }
    }
}

/// One bf16 step (unit in the last place) at `x`: 2^(exponent - 7).
fn bf16_ulp(x: f64) -> f64 {
    if x == 0.0 {
        return f64::from(f32::from_bits(1 << 16)); // smallest denormal bf16
    }
    2f64.powi(x.abs().log2().floor() as i32 - 7)
        .max(f64::from(f32::from_bits(1 << 16)))
}

#[test]
fn bf16_rounding_bounds_special_values_and_unbiased_stochastic_rounding_on_the_host() {
    let mut rng = StdRng::seed_from_u64(3);
    for _ in 0..100_000 {
        let x = (rng.random::<f64>() - 0.5) * 10f64.powi(rng.random_range(-30..30));
        let x = x as f32;
        // Round-trip error bound (8 significant bits): nearest within half a step, at most
        // 2^-8 relative; stochastic within one step, below 2^-7 relative, to one of the two
        // neighbours of the same sign.
        let n = bf16_to_f32(bf16_nearest(x)) as f64;
        let r = bf16_to_f32(bf16_stochastic(x, rng.random())) as f64;
        let xd = x as f64;
        assert!(
            (n - xd).abs() <= xd.abs() * 2f64.powi(-8),
            "{x}: nearest {n}"
        );
        assert!(
            (r - xd).abs() < xd.abs() * 2f64.powi(-7),
            "{x}: stochastic {r}"
        );
        let (lo, hi) = (
            f32::from_bits(x.to_bits() & 0xFFFF_0000) as f64,
            f32::from_bits((x.to_bits() & 0xFFFF_0000) + 0x1_0000) as f64,
        );
        assert!(
            r == lo || r == hi,
            "{x}: {r} is not a neighbour ({lo}, {hi})"
        );
    }
    for (x, want) in [
        (f32::INFINITY, 0x7F80u16),
        (f32::NEG_INFINITY, 0xFF80),
        (f32::MAX, 0x7F80), // rounds up past the largest bf16 only stochastically
        (-0.0, 0x8000),
        (0.0, 0x0000),
    ] {
        let got = bf16_stochastic(x, 0xFFFF);
        assert_eq!(got, want, "{x}");
    }
    assert_eq!(bf16_stochastic(f32::MAX, 0), 0x7F7F);
    assert_eq!(bf16_stochastic(f32::MAX, 0xFFFF), 0x7F80);
    for nan in [
        f32::NAN,
        -f32::NAN,
        f32::from_bits(0x7F80_0001),
        f32::from_bits(0xFFFF_FFFF),
    ] {
        for r in [0u16, 1, 0x8000, 0xFFFF] {
            let got = bf16_stochastic(nan, r);
            assert!(bf16_to_f32(got).is_nan(), "{nan:?} -> {got:#x}");
            assert_eq!(
                got & 0x8000,
                ((nan.to_bits() >> 16) as u16) & 0x8000,
                "sign kept"
            );
        }
        assert!(bf16_to_f32(bf16_nearest(nan)).is_nan());
    }
    // Unbiased: the mean of many roundings of one value (with the kernels' random bits)
    // converges to it. Truncation or nearest would be off by 0.3 of a step here.
    let key = 0x9E37_79B9u32;
    for x in [1.0f32 + 0.3 / 128.0, -3.7e-5, 0.001234, 2.5e-39] {
        let count = 200_000u32;
        let sum: f64 = (0..count)
            .map(|i| {
                let r = pcg_hash_host(pcg_hash_host(i) ^ key) as u16;
                bf16_to_f32(bf16_stochastic(x, r)) as f64
            })
            .sum();
        let mean = sum / count as f64;
        let ulp = bf16_ulp(x as f64);
        // One rounding has a standard deviation below ulp/2; 6 sigma of the mean.
        assert!(
            (mean - x as f64).abs() < 6.0 * 0.5 * ulp / (count as f64).sqrt(),
            "{x}: mean of stochastic roundings {mean}, off by {:.4} steps",
            (mean - x as f64) / ulp
        );
    }
}
