//! GPU runtime and shared compute primitives for rust3r.
//!
//! Everything here is written once as CubeCL `#[cube]` kernels and runs on every
//! backend CubeCL's wgpu runtime reaches (Vulkan, Metal, DX12, lavapipe).
//! Primitives: exclusive/inclusive scan, key-value radix sort, stream compaction,
//! reductions, gather / row scatter, counter-based random numbers and the compact storage
//! codecs (bf16, binary16, 8-bit floats). Each kernel lives next to the host code that
//! launches it (the workspace's rule: `docs/architecture.md`); 1-D launches take
//! [`Gpu::grid_1d`] and [`BLOCK_DIM`].
// Library code returns errors; `expect` states the invariant that makes it unreachable.
#![warn(clippy::unwrap_used)]

pub mod bf16;
pub mod blas;
pub mod collective;
pub mod compact;
pub mod fp8;
pub mod gather;
pub mod half;
pub mod profile;
pub mod random;
pub mod reduce;
pub mod rendezvous;
pub mod runtime;
pub mod scan;
pub mod sort;
pub mod stream;
pub mod tuning;

pub use cubecl;
pub use runtime::{
    AdapterInfo, AdapterSlot, BackendKind, CUDA_COMPILED, CudaDeviceInfo, Gpu, GpuBuffer,
    GpuOptions, adapter_slot, burn_tensor_buffer, cube_tensor_buffer, list_adapters,
    list_cuda_devices,
};
pub use stream::GpuStream;
pub use tuning::{CudaTuning, GpuTuning, ProfileMode};

use cubecl::prelude::*;

/// Errors from device selection and device work.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    #[error(
        "no usable GPU adapter: {0}. On Linux without a GPU install Mesa's software Vulkan (apt-get install mesa-vulkan-drivers)"
    )]
    NoAdapter(String),
    #[error("invalid GPU configuration: {0}")]
    Config(String),
    #[error("device error: {0}")]
    Device(String),
    #[error("{what} needs {needed} bytes in one buffer but the adapter allows at most {limit}")]
    BufferTooLarge {
        what: String,
        needed: u64,
        limit: u64,
    },
}

/// Asks the CUDA runtime to compile kernels whose entry-point name contains `fragment` for at
/// least `blocks` resident cubes per multiprocessor (NVRTC caps their registers to fit). Call it
/// before the kernel's first launch; no effect on other backends or builds without `cuda`.
pub fn cuda_min_blocks_per_sm(fragment: &str, blocks: u32) {
    #[cfg(feature = "cuda")]
    cubecl_cuda::set_min_blocks_per_sm(fragment, blocks);
    #[cfg(not(feature = "cuda"))]
    let _ = (fragment, blocks);
}

/// Launches a `#[cube(launch, launch_unchecked)]` kernel on `gpu` (a [`Gpu`]):
/// `launch!(gpu, module::kernel::<T>(client, count, dim, args..))`.
///
/// Unchecked unless [`Gpu::checked_kernels`]: CubeCL's checked launch guards every global-memory
/// access with a bounds test (an out-of-range read gives zero, a write is dropped), and on wgpu
/// also bounds every loop. The kernels launched this way index only inside ranges they test
/// themselves, which the test suite checks against float64 references with buffers poisoned
/// before each launch; [`GpuTuning::checked_kernels`] restores the guards (to rule them out when
/// chasing a wrong result).
#[macro_export]
macro_rules! launch {
    ($gpu:expr, $($seg:ident)::+ $(::<$($gen:ty),+>)? ( $($arg:expr),* $(,)? )) => {{
        if $crate::Gpu::checked_kernels($gpu) {
            $($seg)::+::launch $(::<$($gen),+>)? ($($arg),*)
        } else {
            // SAFETY: see the macro's documentation; every index the kernel forms is inside the
            // buffer it indexes (tested against references with poisoned buffers).
            #[allow(unused_unsafe)]
            unsafe {
                $($seg)::+::launch_unchecked $(::<$($gen),+>)? ($($arg),*)
            }
        }
    }};
}

/// Threads per cube used by the 1D primitives.
pub const BLOCK: u32 = 256;

/// The cube of a 1-D launch ([`BLOCK`] units), beside [`Gpu::grid_1d`]'s grid.
pub const BLOCK_DIM: CubeDim = CubeDim::new_1d(BLOCK);

/// Linear cube index for grids folded into two dimensions by [`Gpu::grid`].
#[cube]
pub fn block_id() -> usize {
    (CUBE_POS_Y * CUBE_COUNT_X + CUBE_POS_X) as usize
}

/// Linear unit index for 1D launches whose grid was folded by [`Gpu::grid`].
#[cube]
pub fn global_id() -> usize {
    block_id() * (CUBE_DIM as usize) + UNIT_POS as usize
}
