//! `Gpu::new` sets up the wgpu runtime itself (rust3r's dispatches per submission) unless
//! something else, such as Burn, created the device's client first; then it must use that
//! client. Its own test binary: which path runs depends on what the process did before.

use rust3r_gpu::cubecl::wgpu::{WgpuDevice, WgpuDeviceKind};
use rust3r_gpu::{Gpu, GpuOptions, sort};

#[test]
fn gpu_uses_a_client_created_before_it() {
    // The default device's client, created the way Burn creates it.
    let first =
        rust3r_gpu::cubecl::Device::Wgpu(WgpuDevice::new(WgpuDeviceKind::DefaultDevice)).client();
    let gpu = Gpu::new(&GpuOptions {
        poison: true,
        ..Default::default()
    })
    .expect("a GPU adapter is required (CI installs Mesa's lavapipe)");
    assert_eq!(gpu.name(), first.properties().identity.name);
    // A second Gpu on the same device, and work through both.
    let again = Gpu::new(&GpuOptions::default()).unwrap();
    let keys: Vec<u32> = (0..5000u32)
        .map(|i| i.wrapping_mul(2_654_435_761) >> 19)
        .collect();
    let values: Vec<u32> = (0..5000).collect();
    let (k, v) = sort::sort_pairs(&gpu, &gpu.upload(&keys), &again.upload(&values), 13);
    let mut order = values.clone();
    order.sort_by_key(|&i| keys[i as usize]);
    assert_eq!(again.read(&v).unwrap(), order);
    assert_eq!(
        gpu.read(&k).unwrap(),
        order.iter().map(|&i| keys[i as usize]).collect::<Vec<_>>()
    );
}
