//! Half-float storage kernels against the `half` crate and an f64 reference. Output buffers are
//! poisoned before the kernels write them.

use cubecl::prelude::*;
use rand::{Rng, SeedableRng, rngs::StdRng};
use rust3r_gpu::half::{f16_at, f16_nearest, f16_stochastic_bits, f16_stochastic_host, f16_to_f32, f16_value, pack_f16, unpack_f16};
use rust3r_gpu::{Gpu, GpuOptions, cubecl};

fn gpu() -> Gpu {
    Gpu::new(&GpuOptions { poison: true, ..Default::default() })
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
    (gpu.grid(n.div_ceil(256)), CubeDim::new_1d(256))
}

#[test]
fn every_half_bit_pattern_decodes_exactly() {
    let gpu = gpu();
    let bits: Vec<u32> = (0..=u16::MAX as u32).collect();
    let n = bits.len();
    let out = gpu.alloc::<f32>(n);
    let (grid, dim) = launch_1d(&gpu, n);
    decode::launch(gpu.client(), grid, dim, gpu.upload(&bits).arg(), out.arg(), n as u32);
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
    decode_packed::launch(gpu.client(), grid, dim, gpu.upload(&words).arg(), out.arg(), vals.len() as u32);
    assert_eq!(gpu.read(&out).unwrap(), unpack_f16(&words, vals.len()));
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
    let mut xs: Vec<f32> = vec![0.0, -0.0, 1.0, -1.0, 65504.0, 65519.0, 1e6, -1e6, 6.0e-8, -3.0e-8, 6.1e-5, 6.103_515_6e-5,
        f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 1e-30];
    for _ in 0..20_000 {
        let e = rng.random_range(-30.0f32..17.0);
        let s = if rng.random_bool(0.5) { -1.0 } else { 1.0 };
        xs.push(s * rng.random_range(1.0f32..2.0) * e.exp2());
    }
    let rs: Vec<u32> = xs.iter().map(|_| rng.random()).collect();
    let n = xs.len();
    let out = gpu.alloc::<u32>(n);
    let (grid, dim) = launch_1d(&gpu, n);
    encode::launch(gpu.client(), grid, dim, gpu.upload(&xs).arg(), gpu.upload(&rs).arg(), out.arg(), n as u32);
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
            assert!(v == lo || v == hi, "x = {x:e} rounded to {v:e}, outside [{lo:e}, {hi:e}]");
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
        let mean = (0..trials).map(|_| f16_value(f16_stochastic_host(x, rng.random())) as f64).sum::<f64>() / trials as f64;
        let step = hi - lo;
        // p(1-p) <= 1/4: standard error <= step / (2 sqrt(trials)); allow 5 of them.
        let tol = 5.0 * step / (2.0 * (trials as f64).sqrt());
        assert!((mean - x as f64).abs() < tol, "x = {x:e}: mean {mean:e}, step {step:e}");
    }
}
