//! Adapter-level tuning: which device features the kernels may use, bounds-checked launches,
//! phase profiling and the CUDA matrix-product settings. Carried in [`GpuOptions`] and kept by
//! the [`Gpu`] it opens; nothing here reads the environment (the `rust3r` binary builds it from
//! its flags, a tuning file and a few environment variables: docs/tuning.md).
//!
//! [`GpuOptions`]: crate::GpuOptions
//! [`Gpu`]: crate::Gpu

use crate::GpuError;

/// What [`crate::profile`] measures.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ProfileMode {
    /// No timing; the marks cost nothing (no device wait).
    #[default]
    Off,
    /// Each mark waits for the device and charges the host time since the previous mark.
    Host,
    /// Each mark charges the device's own time since the previous mark (CubeCL's profiling
    /// windows: timestamp queries through wgpu, events through CUDA), without the host's waits.
    Device,
}

impl std::str::FromStr for ProfileMode {
    type Err = GpuError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "off" | "0" | "false" => Ok(Self::Off),
            "host" | "1" | "true" | "on" => Ok(Self::Host),
            "device" => Ok(Self::Device),
            other => Err(GpuError::Config(format!(
                "unknown profile mode '{other}' (expected off, host or device)"
            ))),
        }
    }
}

/// Settings of CubeCL's CUDA runtime and of [`crate::blas`]. They are per process: the first
/// CUDA device [`crate::Gpu::new`] opens applies them, before CubeCL creates its client (a
/// client created earlier, e.g. by Burn, keeps the defaults). Ignored on wgpu and in builds
/// without the `cuda` feature.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaTuning {
    /// Matrix products of [`crate::blas::matmul`] through cuBLAS where the library loads
    /// (default); off: CubeCL's matmul.
    pub cublas: bool,
    /// Binary32 matrix products on TF32 tensor cores (default, as PyTorch's `allow_tf32`);
    /// off keeps them in binary32 (parity checks against float32 references).
    pub tf32: bool,
    /// Advertise Hopper's TMA to CubeCL's matmul (default off: an autotuned f16 candidate
    /// failed its launch check with it on an H100).
    pub tma: bool,
    /// Overrides of the minimum resident blocks per multiprocessor that kernels ask for
    /// ([`crate::cuda_min_blocks_per_sm`]): `(name fragment, blocks)`, `blocks = 0` drops the
    /// rule. Applied after the kernels' own rules.
    pub min_blocks: Vec<(String, u32)>,
}

impl Default for CudaTuning {
    fn default() -> Self {
        Self {
            cublas: true,
            tf32: true,
            tma: false,
            min_blocks: Vec::new(),
        }
    }
}

/// Adapter-level switches. `Default` is what rust3r runs with: every feature the adapter has,
/// unchecked launches, no profiling; [`crate::Gpu`] combines it with what the adapter reports
/// ([`crate::Gpu::plane_sizes`], [`crate::Gpu::f32_atomic_add`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuTuning {
    /// Use subgroup ("plane") operations where the adapter has them (default); off reports
    /// none, so kernels take their portable paths.
    pub subgroups: bool,
    /// Accumulate into `Atomic<f32>` buffers where the adapter can (default); off takes the
    /// fixed-order paths.
    pub f32_atomics: bool,
    /// Keep CubeCL's bounds checks on every [`crate::launch!`] (default off; slower, to rule
    /// them out when chasing a wrong result).
    pub checked_kernels: bool,
    /// Phase timing ([`crate::profile`]).
    pub profile: ProfileMode,
    /// Dispatches per wgpu command submission (default
    /// [`crate::runtime::WGPU_TASKS_PER_SUBMIT`]); `None` leaves it to CubeCL's configuration
    /// (its default 32, or `CUBECL_WGPU_MAX_TASKS`). Applied by the first [`crate::Gpu::new`] on
    /// a device in the process.
    pub wgpu_tasks_per_submit: Option<usize>,
    pub cuda: CudaTuning,
}

impl Default for GpuTuning {
    fn default() -> Self {
        Self {
            subgroups: true,
            f32_atomics: true,
            checked_kernels: false,
            profile: ProfileMode::Off,
            wgpu_tasks_per_submit: Some(crate::runtime::WGPU_TASKS_PER_SUBMIT),
            cuda: CudaTuning::default(),
        }
    }
}

/// Parses `name:blocks[,name:blocks]` (the form of [`CudaTuning::min_blocks`] in flags and
/// files).
pub fn parse_min_blocks(spec: &str) -> Result<Vec<(String, u32)>, GpuError> {
    spec.split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .map(|item| {
            let parsed = item
                .split_once(':')
                .and_then(|(name, b)| Some((name.trim(), b.trim().parse::<u32>().ok()?)))
                .filter(|(name, _)| !name.is_empty());
            parsed
                .map(|(name, b)| (name.to_string(), b))
                .ok_or_else(|| {
                    GpuError::Config(format!(
                        "bad CUDA min-blocks rule '{item}' (expected name:blocks)"
                    ))
                })
        })
        .collect()
}
