//! GPU primitives against std on random data. Output buffers are poisoned
//! (NaN-filled) before the kernels write them.

use cubecl::prelude::*;
use rand::{Rng, SeedableRng, rngs::StdRng};
use rust3r_gpu::cubecl;
use rust3r_gpu::random::{normal, pcg_hash, pcg_hash_host, uniform};
use rust3r_gpu::reduce::{ReduceOp, reduce, reduce_columns};
use rust3r_gpu::{Gpu, GpuOptions, GpuTuning, ProfileMode, compact, gather, scan, sort};

fn gpu() -> Gpu {
    let gpu = Gpu::new(&GpuOptions {
        poison: true,
        ..Default::default()
    })
    .expect("a GPU adapter is required (CI installs Mesa's lavapipe)");
    eprintln!("adapter: {}", gpu.name());
    gpu
}

const LENGTHS: &[usize] = &[
    0, 1, 2, 255, 256, 1023, 1024, 1025, 2047, 2048, 2049, 65_537, 1_000_003,
];

#[test]
fn scan_matches_std() {
    let gpu = gpu();
    let mut rng = StdRng::seed_from_u64(1);
    for &n in LENGTHS {
        let data: Vec<u32> = (0..n).map(|_| rng.random_range(0..1000)).collect();
        let buf = gpu.upload(&data);
        let ex = gpu.read(&scan::exclusive_scan(&gpu, &buf)).unwrap();
        let inc = gpu.read(&scan::inclusive_scan(&gpu, &buf)).unwrap();
        let mut acc = 0u32;
        for i in 0..n {
            assert_eq!(ex[i], acc, "exclusive scan, n={n}, i={i}");
            acc = acc.wrapping_add(data[i]);
            assert_eq!(inc[i], acc, "inclusive scan, n={n}, i={i}");
        }
    }
}

#[test]
fn scans_of_transformed_inputs_match_std() {
    // The non-zero count and the gathered sum read their input through the scan's first
    // phase; the references materialise the transformed input on the host.
    let gpu = gpu();
    let mut rng = StdRng::seed_from_u64(3);
    for &n in LENGTHS {
        let data: Vec<u32> = (0..n)
            .map(|_| {
                if rng.random_bool(0.4) {
                    0
                } else {
                    rng.random_range(1..1000)
                }
            })
            .collect();
        let buf = gpu.upload(&data);
        let nonzero = gpu.read(&scan::exclusive_scan_nonzero(&gpu, &buf)).unwrap();
        // Random indices, repeats included, more of them than values.
        let m = n + n / 3;
        let index: Vec<u32> = (0..m)
            .map(|_| rng.random_range(0..n.max(1)) as u32)
            .collect();
        let gathered = if n == 0 {
            vec![]
        } else {
            gpu.read(&scan::exclusive_scan_gathered(
                &gpu,
                &buf,
                &gpu.upload(&index),
            ))
            .unwrap()
        };
        let (mut count, mut sum) = (0u32, 0u32);
        assert_eq!(nonzero.len(), n);
        for i in 0..n {
            assert_eq!(nonzero[i], count, "non-zero scan, n={n}, i={i}");
            count += (data[i] != 0) as u32;
        }
        assert_eq!(gathered.len(), if n == 0 { 0 } else { m });
        for (i, &j) in index.iter().enumerate().take(gathered.len()) {
            assert_eq!(gathered[i], sum, "gathered scan, n={n}, i={i}");
            sum = sum.wrapping_add(data[j as usize]);
        }
    }
}

#[test]
fn radix_sort_matches_std_stable_sort() {
    let gpu = gpu();
    let mut rng = StdRng::seed_from_u64(2);
    for &n in LENGTHS {
        for bits in [4u32, 8, 13, 20, 32] {
            let mask = if bits == 32 {
                u32::MAX
            } else {
                (1u32 << bits) - 1
            };
            // Few distinct keys exercise stability.
            let keys: Vec<u32> = (0..n)
                .map(|_| {
                    if rng.random_bool(0.5) {
                        rng.random::<u32>() & mask
                    } else {
                        rng.random_range(0..4u32) & mask
                    }
                })
                .collect();
            let vals: Vec<u32> = (0..n as u32).collect();
            let (k, v) = sort::sort_pairs(&gpu, &gpu.upload(&keys), &gpu.upload(&vals), bits);
            let (k, v) = (gpu.read(&k).unwrap(), gpu.read(&v).unwrap());
            let mut expect: Vec<(u32, u32)> =
                keys.iter().copied().zip(vals.iter().copied()).collect();
            expect.sort_by_key(|p| p.0); // stable
            let got: Vec<(u32, u32)> = k.into_iter().zip(v).collect();
            assert!(got == expect, "sort mismatch n={n} bits={bits}");
        }
    }
}

#[test]
fn radix_sort_past_the_column_scan_limit() {
    // More tiles than `COLUMN_SCAN_MAX_TILES`: the passes scan all the counts instead.
    let gpu = gpu();
    let mut rng = StdRng::seed_from_u64(5);
    let n = sort::COLUMN_SCAN_MAX_TILES * sort::TILE + 3;
    for bits in [13u32, 32] {
        let mask = if bits == 32 {
            u32::MAX
        } else {
            (1u32 << bits) - 1
        };
        let keys: Vec<u32> = (0..n).map(|_| rng.random::<u32>() & mask).collect();
        let vals: Vec<u32> = (0..n as u32).collect();
        let (k, v) = sort::sort_pairs(&gpu, &gpu.upload(&keys), &gpu.upload(&vals), bits);
        let (k, v) = (gpu.read(&k).unwrap(), gpu.read(&v).unwrap());
        let mut expect: Vec<(u32, u32)> = keys.iter().copied().zip(vals.iter().copied()).collect();
        expect.sort_by_key(|p| p.0);
        let got: Vec<(u32, u32)> = k.into_iter().zip(v).collect();
        assert!(got == expect, "sort mismatch n={n} bits={bits}");
    }
}

#[test]
fn radix_sort_float_depth_keys() {
    // Positive f32 bit patterns sort like the floats: what the rasterizer relies on.
    let gpu = gpu();
    let mut rng = StdRng::seed_from_u64(3);
    let depths: Vec<f32> = (0..100_000)
        .map(|_| rng.random_range(0.01f32..1000.0))
        .collect();
    let keys: Vec<u32> = depths.iter().map(|d| d.to_bits()).collect();
    let ids: Vec<u32> = (0..keys.len() as u32).collect();
    let (_, v) = sort::sort_pairs(&gpu, &gpu.upload(&keys), &gpu.upload(&ids), 32);
    let v = gpu.read(&v).unwrap();
    for w in v.windows(2) {
        assert!(depths[w[0] as usize] <= depths[w[1] as usize]);
    }
}

#[test]
fn compaction_matches_std() {
    let gpu = gpu();
    let mut rng = StdRng::seed_from_u64(4);
    for &n in LENGTHS {
        for p in [0.0, 0.1, 0.9, 1.0] {
            // Non-zero values other than 1 count as set.
            let mask: Vec<u32> = (0..n)
                .map(|_| {
                    if rng.random_bool(p) {
                        rng.random_range(1..u32::MAX)
                    } else {
                        0
                    }
                })
                .collect();
            let got = gpu
                .read(&compact::compact_indices(&gpu, &gpu.upload(&mask)).unwrap())
                .unwrap();
            let expect: Vec<u32> = (0..n as u32).filter(|&i| mask[i as usize] != 0).collect();
            assert_eq!(got, expect, "compaction n={n} p={p}");
            // With a value carried beside each index.
            let values: Vec<u32> = (0..n).map(|_| rng.random()).collect();
            let mb = gpu.upload(&mask);
            let positions = scan::exclusive_scan_nonzero(&gpu, &mb);
            let (ids, vals) = compact::scatter_indices_with_values(
                &gpu,
                &mb,
                &positions,
                &gpu.upload(&values),
                expect.len(),
            );
            assert_eq!(
                gpu.read(&ids).unwrap(),
                expect,
                "compaction with values n={n} p={p}: indices"
            );
            let expect_vals: Vec<u32> = expect.iter().map(|&i| values[i as usize]).collect();
            assert_eq!(
                gpu.read(&vals).unwrap(),
                expect_vals,
                "compaction with values n={n} p={p}: values"
            );
        }
    }
}

#[test]
fn gather_and_iota() {
    let gpu = gpu();
    let mut rng = StdRng::seed_from_u64(5);
    let src: Vec<f32> = (0..5000).map(|_| rng.random()).collect();
    let idx: Vec<u32> = (0..7777).map(|_| rng.random_range(0..5000)).collect();
    let got = gpu
        .read(&gather::gather(&gpu, &gpu.upload(&src), &gpu.upload(&idx)))
        .unwrap();
    let expect: Vec<f32> = idx.iter().map(|&i| src[i as usize]).collect();
    assert_eq!(got, expect);
    let iota = gpu.read(&gather::iota(&gpu, 3000)).unwrap();
    assert_eq!(iota, (0..3000).collect::<Vec<u32>>());
}

#[test]
fn scatter_and_zero_rows_through_an_index() {
    let gpu = gpu();
    let mut rng = StdRng::seed_from_u64(11);
    for (rows, row, picked) in [
        (1usize, 1usize, 1usize),
        (700, 3, 250),
        (3000, 4, 3000),
        (50, 7, 0),
    ] {
        let dst: Vec<f32> = (0..rows * row).map(|_| rng.random()).collect();
        // Distinct rows in random order.
        let mut index: Vec<u32> = (0..rows as u32).collect();
        for i in (1..index.len()).rev() {
            index.swap(i, rng.random_range(0..=i));
        }
        index.truncate(picked);
        let values: Vec<f32> = (0..picked * row)
            .map(|_| rng.random::<f32>() + 2.0)
            .collect();
        let (mut scattered, mut zeroed) = (dst.clone(), dst.clone());
        for (j, &r) in index.iter().enumerate() {
            let r = r as usize;
            scattered[r * row..(r + 1) * row].copy_from_slice(&values[j * row..(j + 1) * row]);
            zeroed[r * row..(r + 1) * row].fill(0.0);
        }
        let (gdst, gidx) = (gpu.upload(&dst), gpu.upload(&index));
        gather::scatter_rows(&gpu, &gdst, &gidx, &gpu.upload(&values), row);
        assert_eq!(
            gpu.read(&gdst).unwrap(),
            scattered,
            "scatter {rows}x{row}, {picked} rows"
        );
        let gdst = gpu.upload(&dst);
        gather::zero_rows(&gpu, &gdst, &gidx, row);
        assert_eq!(
            gpu.read(&gdst).unwrap(),
            zeroed,
            "zero {rows}x{row}, {picked} rows"
        );
    }
}

#[cube(launch)]
fn random_streams(hash: &mut [u32], unif: &mut [f32], norm: &mut [f32], seed: u32, n: u32) {
    let i = rust3r_gpu::global_id();
    if i < n as usize {
        hash[i] = pcg_hash(i as u32);
        unif[i] = uniform(i as u32 ^ seed);
        norm[i] = normal(seed, i as u32);
    }
}

#[test]
fn random_streams_match_the_host_mirror_and_their_distributions() {
    let gpu = gpu();
    let n = 100_000usize;
    let seed = 0x1234_5678u32;
    let (hash, unif, norm) = (
        gpu.alloc::<u32>(n),
        gpu.alloc::<f32>(n),
        gpu.alloc::<f32>(n),
    );
    random_streams::launch(
        gpu.client(),
        gpu.grid_1d(n),
        rust3r_gpu::BLOCK_DIM,
        hash.arg(),
        unif.arg(),
        norm.arg(),
        seed,
        n as u32,
    );
    let (hash, unif, norm) = (
        gpu.read(&hash).unwrap(),
        gpu.read(&unif).unwrap(),
        gpu.read(&norm).unwrap(),
    );
    // Bit for bit the host mirror; the uniforms are its top 24 bits, in (0, 1].
    for i in 0..n {
        assert_eq!(hash[i], pcg_hash_host(i as u32), "pcg_hash({i})");
        let want = ((pcg_hash_host(i as u32 ^ seed) >> 8) + 1) as f32 / 16_777_216.0;
        assert_eq!(unif[i], want, "uniform({i})");
    }
    // Mean and variance of the uniforms (1/2, 1/12) and the normals (0, 1), NaN failing.
    let moments = |v: &[f32]| {
        let mean = v.iter().map(|&x| x as f64).sum::<f64>() / v.len() as f64;
        let var = v.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / v.len() as f64;
        (mean, var)
    };
    let (m, v) = moments(&unif);
    assert!(
        (m - 0.5).abs() < 0.005 && (v - 1.0 / 12.0).abs() < 0.002,
        "uniform {m} {v}"
    );
    let (m, v) = moments(&norm);
    assert!(m.abs() < 0.02 && (v - 1.0).abs() < 0.02, "normal {m} {v}");
}

#[test]
fn reductions_are_correct_for_every_dtype() {
    let gpu = gpu();
    let mut rng = StdRng::seed_from_u64(6);
    for &n in LENGTHS {
        let f: Vec<f32> = (0..n).map(|_| rng.random_range(-1.0f32..1.0)).collect();
        let u: Vec<u32> = (0..n).map(|_| rng.random_range(0..1000)).collect();
        // A "bool" mask with values other than 0/1: count must see every non-zero.
        let mask: Vec<u32> = (0..n)
            .map(|_| if rng.random_bool(0.3) { 7 } else { 0 })
            .collect();
        let fb = gpu.upload(&f);
        let ub = gpu.upload(&u);
        let sum_f = reduce(&gpu, &fb, ReduceOp::Sum).unwrap() as f64;
        let exact: f64 = f.iter().map(|&x| x as f64).sum();
        assert!(
            (sum_f - exact).abs() <= 1e-6 * n as f64 + 1e-6,
            "f32 sum n={n}: {sum_f} vs {exact}"
        );
        let max_f = reduce(&gpu, &fb, ReduceOp::Max).unwrap();
        let min_f = reduce(&gpu, &fb, ReduceOp::Min).unwrap();
        if n > 0 {
            assert_eq!(max_f, f.iter().copied().fold(f32::MIN, f32::max));
            assert_eq!(min_f, f.iter().copied().fold(f32::MAX, f32::min));
        } else {
            assert_eq!(max_f, f32::MIN);
            assert_eq!(min_f, f32::MAX);
        }
        assert_eq!(
            reduce(&gpu, &ub, ReduceOp::Sum).unwrap(),
            u.iter().sum::<u32>(),
            "u32 sum n={n}"
        );
        assert_eq!(
            reduce(&gpu, &ub, ReduceOp::Max).unwrap(),
            u.iter().copied().max().unwrap_or(0)
        );
        let count = reduce(&gpu, &gpu.upload(&mask), ReduceOp::CountNonZero).unwrap();
        assert_eq!(
            count as usize,
            mask.iter().filter(|&&m| m != 0).count(),
            "mask count n={n}"
        );
        let fcount = reduce(&gpu, &fb, ReduceOp::CountNonZero).unwrap();
        assert_eq!(fcount as usize, f.iter().filter(|&&x| x != 0.0).count());
    }
}

#[test]
fn column_reduction() {
    let gpu = gpu();
    let mut rng = StdRng::seed_from_u64(7);
    let (rows, cols) = (10_001usize, 12usize);
    let m: Vec<f32> = (0..rows * cols)
        .map(|_| rng.random_range(-1.0f32..1.0))
        .collect();
    let got = gpu
        .read(&reduce_columns(&gpu, &gpu.upload(&m), cols, ReduceOp::Sum))
        .unwrap();
    for c in 0..cols {
        let exact: f64 = (0..rows).map(|r| m[r * cols + c] as f64).sum();
        assert!(
            (got[c] as f64 - exact).abs() < 1e-3,
            "column {c}: {} vs {exact}",
            got[c]
        );
    }
}

/// [`GpuTuning::checked_kernels`] (CubeCL's bounds-checked launches, the escape hatch of
/// `rust3r_gpu::launch!`) still launches every primitive and gives the same results as the host.
#[test]
fn checked_launches_match_the_host() {
    let gpu = Gpu::new(&GpuOptions {
        poison: true,
        tuning: GpuTuning {
            checked_kernels: true,
            ..Default::default()
        },
        ..Default::default()
    })
    .expect("a GPU adapter is required (CI installs Mesa's lavapipe)");
    assert!(gpu.checked_kernels(), "the tuning was not kept");
    assert!(!self::gpu().checked_kernels(), "unchecked by default");
    let mut rng = StdRng::seed_from_u64(7);
    for n in [1usize, 255, 2049, 70_001] {
        let keys: Vec<u32> = (0..n).map(|_| rng.random_range(0..5000u32)).collect();
        let vals: Vec<u32> = (0..n as u32).collect();
        let (kb, vb) = (gpu.upload(&keys), gpu.upload(&vals));

        let (k, v) = sort::sort_pairs(&gpu, &kb, &vb, 13);
        let mut expect: Vec<(u32, u32)> = keys.iter().copied().zip(vals.iter().copied()).collect();
        expect.sort_by_key(|p| p.0);
        let got: Vec<(u32, u32)> = gpu
            .read(&k)
            .unwrap()
            .into_iter()
            .zip(gpu.read(&v).unwrap())
            .collect();
        assert!(got == expect, "checked sort, n={n}");

        let ex = gpu.read(&scan::exclusive_scan(&gpu, &kb)).unwrap();
        let mut acc = 0u32;
        for (i, (&e, &x)) in ex.iter().zip(&keys).enumerate() {
            assert_eq!(e, acc, "checked exclusive scan, n={n}, i={i}");
            acc = acc.wrapping_add(x);
        }

        let rev: Vec<u32> = (0..n as u32).rev().collect();
        let g = gpu
            .read(&gather::gather(&gpu, &kb, &gpu.upload(&rev)))
            .unwrap();
        assert!(
            g.iter()
                .zip(rev.iter())
                .all(|(&a, &i)| a == keys[i as usize]),
            "checked gather, n={n}"
        );

        let mask: Vec<u32> = keys.iter().map(|&k| u32::from(k % 3 == 0)).collect();
        let idx = gpu
            .read(&compact::compact_indices(&gpu, &gpu.upload(&mask)).unwrap())
            .unwrap();
        let expect_idx: Vec<u32> = (0..n as u32).filter(|&i| mask[i as usize] == 1).collect();
        assert_eq!(idx, expect_idx, "checked compaction, n={n}");
    }
}

/// Switching adapter features off hides them from the kernels' host code, whatever the adapter
/// has; the defaults keep what it reports.
#[test]
fn tuning_switches_hide_adapter_features() {
    let full = gpu();
    let off = Gpu::new(&GpuOptions {
        tuning: GpuTuning {
            subgroups: false,
            f32_atomics: false,
            ..Default::default()
        },
        ..Default::default()
    })
    .expect("a GPU adapter is required (CI installs Mesa's lavapipe)");
    assert_eq!(off.plane_sizes(), None);
    assert!(!off.f32_atomic_add());
    // lavapipe has float atomics (CubeCL reports no subgroups on CPU adapters).
    let adapter = rust3r_gpu::list_adapters()
        .into_iter()
        .find(|a| a.name == full.name());
    if adapter.is_some_and(|a| a.f32_atomics) {
        assert!(full.f32_atomic_add(), "{}", full.name());
    }
    assert_eq!(full.tuning(), &GpuTuning::default());
}

/// The profiler of a device: host intervals per phase, nothing when off, totals cleared by reset.
#[test]
fn profiler_charges_named_phases() {
    let gpu = Gpu::new(&GpuOptions {
        tuning: GpuTuning {
            profile: ProfileMode::Host,
            ..Default::default()
        },
        ..Default::default()
    })
    .expect("a GPU adapter is required (CI installs Mesa's lavapipe)");
    let keys = gpu.upload(&(0..100_000u32).rev().collect::<Vec<_>>());
    for _ in 0..3 {
        rust3r_gpu::profile::start(&gpu);
        drop(sort::sort_pairs(&gpu, &keys, &keys, 17));
        rust3r_gpu::profile::mark(&gpu, "sort");
        drop(scan::exclusive_scan(&gpu, &keys));
        rust3r_gpu::profile::mark(&gpu, "scan");
    }
    let phases = gpu.profiler().phases();
    assert_eq!(phases.keys().copied().collect::<Vec<_>>(), ["scan", "sort"]);
    for (name, (secs, calls)) in &phases {
        assert_eq!(*calls, 3, "{name}");
        assert!(secs.is_finite() && *secs > 0.0, "{name}: {secs}");
    }
    let report = gpu.profiler().report().unwrap();
    assert!(
        report.contains("sort | 3 |") && report.contains("scan | 3 |"),
        "{report}"
    );
    gpu.profiler().reset();
    assert!(gpu.profiler().phases().is_empty());
    // Off (the default): marks record nothing and there is no report.
    let plain = self::gpu();
    rust3r_gpu::profile::start(&plain);
    rust3r_gpu::profile::mark(&plain, "sort");
    assert!(plain.profiler().phases().is_empty() && plain.profiler().report().is_none());
}

/// Buffers written on the calling thread's stream, adopted by a `GpuStream` and gathered there
/// from another thread, give the values written (the adoption leaves them as they were), and a
/// buffer the other stream wrote reads back on the first one.
#[test]
fn buffers_cross_streams_through_adopt() {
    let gpu = gpu();
    let mut rng = StdRng::seed_from_u64(9);
    let data: Vec<u32> = (0..70_001).map(|_| rng.random()).collect();
    let src = gpu.upload(&data);
    let index = gather::iota(&gpu, data.len());
    let stream = rust3r_gpu::GpuStream::new();
    stream.run(|| rust3r_gpu::stream::adopt(&gpu, &[&src, &index]));
    let out = std::thread::scope(|s| {
        s.spawn(|| stream.run(|| gather::gather(&gpu, &src, &index)))
            .join()
            .unwrap()
    });
    assert_eq!(gpu.read(&src).unwrap(), data);
    assert_eq!(gpu.read(&out).unwrap(), data);
}
