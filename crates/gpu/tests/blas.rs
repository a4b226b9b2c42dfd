//! `rust3r_gpu::blas::matmul` against a float64 CPU product, over the layouts the MASt3R network
//! hands it: contiguous, transposed views, head-split attention views, broadcast and sliced
//! operands, binary32 and binary16.
//!
//! On lavapipe (CI) this checks the wgpu route (Burn's matmul). With `RUST3R_TEST_BACKEND=cuda`
//! (a `cuda` build on an NVIDIA machine) it checks cuBLAS, and fails if cuBLAS did not run.

use burn::tensor::{DType, Device, Distribution, Tensor};
use rust3r_gpu::blas::{matmul, uses_cublas};

/// `RUST3R_TEST_BACKEND=cuda`: run on CUDA and insist on cuBLAS.
fn cuda() -> bool {
    std::env::var("RUST3R_TEST_BACKEND").is_ok_and(|b| b == "cuda")
}

fn gpu() -> rust3r_gpu::Gpu {
    let backend = if cuda() {
        rust3r_gpu::BackendKind::Cuda
    } else {
        rust3r_gpu::BackendKind::Wgpu
    };
    let gpu = rust3r_gpu::Gpu::new(&rust3r_gpu::GpuOptions {
        backend,
        ..Default::default()
    })
    .expect("a GPU adapter is required (CI installs Mesa's lavapipe)");
    eprintln!("adapter: {}", gpu.name());
    gpu
}

fn device() -> Device {
    Device::from(gpu().device().clone())
}

fn values<const D: usize>(t: &Tensor<D>) -> Vec<f64> {
    t.clone()
        .cast(DType::F32)
        .into_data()
        .try_to_vec::<f32>()
        .expect("f32 data")
        .into_iter()
        .map(f64::from)
        .collect()
}

/// Checks `matmul(a, b)` (any views of rank `D`) against a float64 product of the values the views
/// hold, broadcasting batch dimensions. `rel`: allowed error relative to sum |a||b| per entry.
fn check<const D: usize>(what: &str, a: Tensor<D>, b: Tensor<D>, rel: f64) {
    let (da, db) = (a.dims(), b.dims());
    let (m, k, n) = (da[D - 2], da[D - 1], db[D - 1]);
    assert_eq!(db[D - 2], k, "{what}: inner dimensions");
    let (va, vb) = (values(&a), values(&b));
    if cuda() {
        assert!(
            uses_cublas(&a),
            "{what}: cuBLAS did not run on the CUDA device"
        );
    }
    let out = matmul(a, b);
    let dout = out.dims();
    let got = values(&out);
    let batch: Vec<usize> = (0..D - 2).map(|i| da[i].max(db[i])).collect();
    assert_eq!(&dout[..D - 2], &batch[..], "{what}: batch shape");
    assert_eq!((dout[D - 2], dout[D - 1]), (m, n), "{what}: matrix shape");
    let count = batch.iter().product::<usize>();
    let mut worst = 0.0f64;
    for bi in 0..count {
        // Batch index -> flat offsets of each operand (a size-1 dimension broadcasts).
        let (mut oa, mut ob, mut rem) = (0usize, 0usize, bi);
        let (mut sa, mut sb) = (m * k, k * n);
        for i in (0..D - 2).rev() {
            let idx = rem % batch[i];
            rem /= batch[i];
            if da[i] != 1 {
                oa += idx * sa;
            }
            if db[i] != 1 {
                ob += idx * sb;
            }
            sa *= da[i];
            sb *= db[i];
        }
        for r in 0..m {
            for c in 0..n {
                let (mut acc, mut mag) = (0.0f64, 0.0f64);
                for j in 0..k {
                    let p = va[oa + r * k + j] * vb[ob + j * n + c];
                    acc += p;
                    mag += p.abs();
                }
                let g = got[bi * m * n + r * n + c];
                let err = (g - acc).abs();
                assert!(
                    err <= rel * mag + 1e-6,
                    "{what}: batch {bi} [{r}, {c}] = {g}, expected {acc} (sum |a||b| {mag})"
                );
                worst = worst.max(err / (mag + 1e-12));
            }
        }
    }
    eprintln!("{what}: worst error / sum|a||b| = {worst:.2e}");
}

fn random<const D: usize>(dims: [usize; D], device: &Device) -> Tensor<D> {
    Tensor::random(dims, Distribution::Uniform(-1.0, 1.0), device)
}

#[test]
fn matmul_matches_float64_over_layouts() {
    let device = device();
    // TF32 tensor cores keep 10 mantissa bits of each input.
    let rel = 3e-3;
    check(
        "2d",
        random([37, 19], &device),
        random([19, 23], &device),
        rel,
    );
    check(
        "rhs transposed",
        random([37, 19], &device),
        random([23, 19], &device).transpose(),
        rel,
    );
    check(
        "lhs transposed",
        random([19, 37], &device).transpose(),
        random([19, 23], &device),
        rel,
    );
    // Attention: [B, N, H, d] split into heads by swapping, scores q k^T and p v.
    let q = random([2, 45, 3, 16], &device).swap_dims(1, 2);
    let k = random([2, 45, 3, 16], &device).swap_dims(1, 2);
    check("attention scores", q, k.transpose(), rel);
    let p = random([2, 3, 45, 45], &device);
    let v = random([2, 45, 3, 16], &device).swap_dims(1, 2);
    check("attention values", p, v, rel);
    // A weight shared by every batch entry, and stacked weights (one per slot).
    check(
        "broadcast rhs",
        random([3, 29, 17], &device),
        random([1, 17, 11], &device),
        rel,
    );
    check(
        "broadcast lhs",
        random([1, 29, 17], &device),
        random([3, 17, 11], &device),
        rel,
    );
    check(
        "stacked",
        random([2, 29, 17], &device),
        random([2, 17, 11], &device),
        rel,
    );
    // Views that start inside their buffer.
    let a = random([4, 31, 20], &device)
        .narrow(0, 1, 2)
        .narrow(2, 3, 13);
    let b = random([2, 40, 9], &device).narrow(1, 7, 13);
    check("sliced", a, b, rel);
    // Larger than one tile of any kernel.
    check(
        "large",
        random([300, 257], &device),
        random([257, 130], &device),
        rel,
    );
}

#[test]
fn matmul_matches_float64_in_half_precision() {
    let device = device();
    let h = |t: Tensor<3>| t.cast(DType::F16);
    // binary16 inputs (the reference reads the rounded values), binary32 accumulation, binary16
    // output: half an ulp of the output, relative to sum |a||b| at worst.
    let rel = 2e-3;
    check(
        "f16 batched",
        h(random([2, 33, 40], &device)),
        h(random([2, 40, 21], &device)),
        rel,
    );
    check(
        "f16 transposed",
        h(random([2, 33, 40], &device)),
        h(random([2, 21, 40], &device)).swap_dims(1, 2),
        rel,
    );
}

/// A product recorded into a graph replays with the right result: on CUDA the cuBLAS call is
/// recorded into the CUDA graph with CubeCL's launches (a recording that fails makes Burn re-run
/// the closure instead, losing the graph's speed, so the recording itself is asserted).
#[test]
fn matmul_records_into_a_graph_and_replays() {
    let device = device();
    let a = random([2, 64, 48], &device);
    let b = random([2, 48, 40], &device);
    let (va, vb) = (values(&a), values(&b));
    // Warm-up outside the recording (cuBLAS handle, the output's pool slot); kept alive so the
    // recording's output cannot reuse its buffer and show its values without running.
    let warm = matmul(a.clone() + 1.0, b.clone());
    let _ = values(&warm);
    let (a2, b2) = (a.clone(), b.clone());
    let mut graph = burn::tensor::capture(&device, move || matmul(a2.clone() + 1.0, b2.clone()));
    if cuda() {
        assert!(graph.is_hardware(), "the CUDA graph recording failed");
    }
    // SAFETY: the inputs and the recorded buffers live as long as `graph`; one thread.
    let out = values(unsafe { graph.replay() });
    for bi in 0..2 {
        for r in 0..64 {
            for c in 0..40 {
                let (mut acc, mut mag) = (0.0f64, 0.0f64);
                for j in 0..48 {
                    let p = (va[bi * 64 * 48 + r * 48 + j] + 1.0) * vb[bi * 48 * 40 + j * 40 + c];
                    acc += p;
                    mag += p.abs();
                }
                let g = out[bi * 64 * 40 + r * 40 + c];
                assert!(
                    (g - acc).abs() <= 3e-3 * mag + 1e-6,
                    "replayed [{bi}, {r}, {c}] = {g}, expected {acc}"
                );
            }
        }
    }
    drop(warm);
}

/// A product whose output only another product reads (so only cuBLAS touches that buffer inside
/// the recording) still replays correctly after the pool has released every page it thinks free
/// and handed memory to other tensors. Before the recording kept such buffers, a replay in SLAM
/// read freed memory (CUDA error 700; compute-sanitizer: cuBLAS reading out of bounds).
#[test]
fn chained_products_keep_their_buffers_across_cleanup_and_replay() {
    let gpu = gpu();
    let device = Device::from(gpu.device().clone());
    let a = random([96, 64], &device);
    let b = random([64, 80], &device);
    let c = random([80, 32], &device);
    let (va, vb, vc) = (values(&a), values(&b), values(&c));
    let (a2, b2, c2) = (a.clone(), b.clone(), c.clone());
    let mut graph = burn::tensor::capture(&device, move || {
        matmul(matmul(a2.clone(), b2.clone()), c2.clone())
    });
    if cuda() {
        assert!(graph.is_hardware(), "the CUDA graph recording failed");
    }
    // Release what the pool thinks is free, then give memory to other tensors (kept alive, and
    // written) before replaying.
    gpu.memory_cleanup();
    let others: Vec<Tensor<2>> = (0..8).map(|_| random([256, 256], &device) * 3.0).collect();
    let _ = values(&others[7]);
    // SAFETY: the inputs and the recorded buffers live as long as `graph`; one thread.
    let out = values(unsafe { graph.replay() });
    // Reference (a b) c in float64 with its magnitude bound.
    for r in 0..96 {
        let mut ab = [0.0f64; 80];
        let mut ab_mag = [0.0f64; 80];
        for (j, (x, m)) in ab.iter_mut().zip(ab_mag.iter_mut()).enumerate() {
            for k in 0..64 {
                let p = va[r * 64 + k] * vb[k * 80 + j];
                *x += p;
                *m += p.abs();
            }
        }
        for col in 0..32 {
            let (mut acc, mut mag) = (0.0f64, 0.0f64);
            for j in 0..80 {
                acc += ab[j] * vc[j * 32 + col];
                mag += ab_mag[j] * vc[j * 32 + col].abs();
            }
            let g = out[r * 32 + col];
            assert!(
                (g - acc).abs() <= 6e-3 * mag + 1e-6,
                "replayed [{r}, {col}] = {g}, expected {acc}"
            );
        }
    }
    drop(others);
}
