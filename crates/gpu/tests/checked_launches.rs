//! `RUST3R_CHECKED_KERNELS=1` (CubeCL's bounds-checked launches, the escape hatch of
//! `rust3r_gpu::launch!`) still launches every primitive and gives the same results as the
//! unchecked default and the host. Its own test binary: the switch is read once per process.

use rand::{Rng, SeedableRng, rngs::StdRng};
use rust3r_gpu::{Gpu, GpuOptions, compact, gather, scan, sort};

#[test]
fn checked_launches_match_the_host() {
    // SAFETY: set before anything in this process reads the environment (one test in the binary).
    unsafe { std::env::set_var("RUST3R_CHECKED_KERNELS", "1") };
    assert!(rust3r_gpu::checked_kernels(), "the switch was not read");
    let gpu = Gpu::new(&GpuOptions {
        poison: true,
        ..Default::default()
    })
    .expect("a GPU adapter is required (CI installs Mesa's lavapipe)");
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
