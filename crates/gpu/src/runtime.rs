//! Backend selection, adapter listing and typed device buffers.

use std::marker::PhantomData;

use bytemuck::Pod;
use cubecl::client::Client;
use cubecl::prelude::*;
use cubecl::server::Handle;
use cubecl::wgpu::{WgpuBackend, WgpuDevice, WgpuDeviceKind};

use crate::GpuError;
use crate::profile::Profiler;
use crate::tuning::{CudaTuning, GpuTuning};

/// Which compute backend to run kernels on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BackendKind {
    /// wgpu on WGSL: Vulkan, Metal, DX12, or Mesa's software Vulkan (lavapipe).
    #[default]
    Wgpu,
    /// NVIDIA CUDA (CubeCL's CUDA runtime: kernels as CUDA C++ through NVRTC). Compiled in
    /// with the `cuda` cargo feature; the driver and NVRTC are loaded at run time.
    Cuda,
}

impl std::str::FromStr for BackendKind {
    type Err = GpuError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "wgpu" | "vulkan" | "metal" | "dx12" => Ok(Self::Wgpu),
            "cuda" => Ok(Self::Cuda),
            other => Err(GpuError::Config(format!(
                "unknown backend '{other}' (expected wgpu or cuda)"
            ))),
        }
    }
}

/// How to pick the device.
#[derive(Clone, Debug, Default)]
pub struct GpuOptions {
    pub backend: BackendKind,
    /// Index into [`list_adapters`]; `None` picks the best adapter automatically
    /// (a discrete GPU over an integrated one over a software rasterizer).
    pub adapter: Option<usize>,
    /// Fill every buffer allocated through [`Gpu::alloc`] with NaN bit patterns, so a
    /// kernel that forgets to write an element is caught by tests.
    pub poison: bool,
    /// Adapter-level switches (features used, checked launches, profiling, CUDA settings).
    pub tuning: GpuTuning,
}

/// One adapter as reported by the graphics API.
#[derive(Clone, Debug)]
pub struct AdapterInfo {
    pub index: usize,
    pub name: String,
    pub backend: String,
    pub device_type: String,
    pub driver: String,
    pub max_buffer_size: u64,
    pub max_storage_binding_size: u64,
    pub max_workgroup_storage_size: u32,
    pub subgroups: bool,
    pub shader_f16: bool,
    pub f32_atomics: bool,
}

/// Whether this build has the CUDA backend (the `cuda` cargo feature).
pub const CUDA_COMPILED: bool = cfg!(feature = "cuda");

/// One CUDA device as the driver reports it.
#[derive(Clone, Debug)]
pub struct CudaDeviceInfo {
    pub index: usize,
    pub name: String,
    pub total_memory: u64,
    pub compute_capability: (i32, i32),
}

/// CUDA devices, or why there are none (no `cuda` feature, no driver, no device).
pub fn list_cuda_devices() -> Result<Vec<CudaDeviceInfo>, GpuError> {
    #[cfg(feature = "cuda")]
    {
        use cudarc::driver::CudaContext;
        use cudarc::driver::sys::CUdevice_attribute as A;
        let err = |e: cudarc::driver::DriverError| GpuError::Config(format!("CUDA driver: {e}"));
        (0..cuda_device_count()?)
            .map(|index| {
                let ctx = CudaContext::new(index).map_err(err)?;
                Ok(CudaDeviceInfo {
                    index,
                    name: ctx.name().map_err(err)?,
                    total_memory: ctx.total_mem().map_err(err)? as u64,
                    compute_capability: (
                        ctx.attribute(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
                            .map_err(err)?,
                        ctx.attribute(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
                            .map_err(err)?,
                    ),
                })
            })
            .collect()
    }
    #[cfg(not(feature = "cuda"))]
    Err(GpuError::Config(
        "this build has no CUDA backend (build with `--features rust3r-cli/cuda`); \
         NVIDIA GPUs run through Vulkan"
            .into(),
    ))
}

/// Number of CUDA devices the driver reports (no context is created).
#[cfg(feature = "cuda")]
fn cuda_device_count() -> Result<usize, GpuError> {
    // cudarc panics on first use when the library is missing: ask first.
    // SAFETY: only tries to `dlopen` each candidate name.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err(GpuError::Config(
            "the CUDA driver library (libcuda) was not found; use --backend wgpu".into(),
        ));
    }
    let count = cudarc::driver::CudaContext::device_count()
        .map_err(|e| GpuError::Config(format!("CUDA driver: {e}")))?;
    Ok(count.max(0) as usize)
}

/// The cubecl device for CUDA device `adapter` (default 0), after checking it exists (by count
/// only: opening a context on every GPU just to check an index would reserve memory on each).
fn cuda_device(adapter: Option<usize>) -> Result<cubecl::Device, GpuError> {
    #[cfg(feature = "cuda")]
    let count = cuda_device_count()?;
    #[cfg(not(feature = "cuda"))]
    let count = list_cuda_devices()?.len();
    let index = adapter.unwrap_or(0);
    if index >= count {
        return Err(GpuError::Config(format!(
            "CUDA device {index} does not exist ({count} CUDA devices found; run `rust3r info`)"
        )));
    }
    cubecl::Device::cuda(index).map_err(|e| GpuError::Config(format!("CUDA device {index}: {e:?}")))
}

/// Enumerate every adapter of every graphics API wgpu can reach on this machine.
pub fn list_adapters() -> Vec<AdapterInfo> {
    use cubecl::wgpu::wgpu;
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
        backends: wgpu::Backends::all(),
        ..wgpu::InstanceDescriptor::new_without_display_handle()
    });
    let adapters =
        futures_lite::future::block_on(instance.enumerate_adapters(wgpu::Backends::all()));
    adapters
        .iter()
        .enumerate()
        .map(|(index, a)| {
            let info = a.get_info();
            let limits = a.limits();
            let features = a.features();
            AdapterInfo {
                index,
                name: info.name.clone(),
                backend: format!("{:?}", info.backend),
                device_type: format!("{:?}", info.device_type),
                driver: format!("{} {}", info.driver, info.driver_info),
                max_buffer_size: limits.max_buffer_size,
                max_storage_binding_size: limits.max_storage_buffer_binding_size,
                max_workgroup_storage_size: limits.max_compute_workgroup_storage_size,
                subgroups: features.contains(wgpu::Features::SUBGROUP),
                shader_f16: features.contains(wgpu::Features::SHADER_F16),
                f32_atomics: features.contains(wgpu::Features::SHADER_FLOAT32_ATOMIC),
            }
        })
        .collect()
}

/// Where adapter `index` of [`list_adapters`] sits in cubecl's (and Burn's) device numbering,
/// which counts adapters per device type and graphics API.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdapterSlot {
    DiscreteGpu(usize),
    IntegratedGpu(usize),
    VirtualGpu(usize),
    Cpu,
    Other(usize),
}

/// [`AdapterSlot`] and description of adapter `index` as listed by `rust3r info`.
pub fn adapter_slot(index: usize) -> Result<(AdapterSlot, AdapterInfo), GpuError> {
    let adapters = list_adapters();
    let info = adapters.get(index).ok_or_else(|| {
        GpuError::Config(format!(
            "adapter {index} does not exist ({} adapters found; run `rust3r info`)",
            adapters.len()
        ))
    })?;
    let same_kind_before = adapters[..index]
        .iter()
        .filter(|a| a.device_type == info.device_type && a.backend == info.backend)
        .count();
    let slot = match info.device_type.as_str() {
        "DiscreteGpu" => AdapterSlot::DiscreteGpu(same_kind_before),
        "IntegratedGpu" => AdapterSlot::IntegratedGpu(same_kind_before),
        "VirtualGpu" => AdapterSlot::VirtualGpu(same_kind_before),
        "Cpu" => AdapterSlot::Cpu,
        _ => AdapterSlot::Other(same_kind_before),
    };
    Ok((slot, info.clone()))
}

fn wgpu_device_for(adapter: Option<usize>) -> Result<WgpuDevice, GpuError> {
    let Some(index) = adapter else {
        return Ok(WgpuDevice::new(WgpuDeviceKind::DefaultDevice));
    };
    let (slot, info) = adapter_slot(index)?;
    let kind = match slot {
        AdapterSlot::DiscreteGpu(i) => WgpuDeviceKind::DiscreteGpu(i),
        AdapterSlot::IntegratedGpu(i) => WgpuDeviceKind::IntegratedGpu(i),
        AdapterSlot::VirtualGpu(i) => WgpuDeviceKind::VirtualGpu(i),
        AdapterSlot::Cpu => WgpuDeviceKind::Cpu,
        AdapterSlot::Other(i) => WgpuDeviceKind::Other(i),
    };
    let backend = match info.backend.as_str() {
        "Vulkan" => WgpuBackend::Vulkan,
        "Metal" => WgpuBackend::Metal,
        "Dx12" => WgpuBackend::Dx12,
        "Gl" => WgpuBackend::Gl,
        _ => WgpuBackend::Auto,
    };
    Ok(WgpuDevice::new(kind).on(backend))
}

/// Dispatches per wgpu command submission by default ([`GpuTuning::wgpu_tasks_per_submit`];
/// CubeCL's default is 32). Through Vulkan on the H100 the rasterizer's forward pass at 10M
/// Gaussians, 1080p took 6.77 ms at 4 against 7.41 ms at 32 (docs/benchmarks/journal.md, 2026-11-27): after
/// the forward pass's read-back the GPU idles until the first submission, and a smaller one
/// comes sooner.
pub const WGPU_TASKS_PER_SUBMIT: usize = 4;

/// Set up the wgpu runtime of `device` with rust3r's options (`tasks` dispatches per submission,
/// `None`: CubeCL's configuration), once per device and process. Best effort: when something else
/// (Burn) registered the device first, or setting it up fails, the client is created (or its
/// failure reported) by the caller as before.
fn register_wgpu(device: &WgpuDevice, tasks: Option<usize>) {
    static TRIED: std::sync::Mutex<Vec<WgpuDevice>> = std::sync::Mutex::new(Vec::new());
    let mut tried = TRIED.lock().unwrap_or_else(|e| e.into_inner());
    if tried.contains(device) {
        return;
    }
    tried.push(device.clone());
    let Ok(mut options) = cubecl::wgpu::RuntimeOptions::try_default() else {
        return;
    };
    if let Some(tasks) = tasks {
        options.tasks_max = tasks;
    }
    let device = device.clone();
    let _ = std::panic::catch_unwind(move || {
        cubecl::wgpu::try_init_setup::<cubecl::wgpu::AutoGraphicsApi>(&device, options).map(|_| ())
    });
}

/// Hands the CUDA settings to the vendored CubeCL runtime and to [`crate::blas`] (per process:
/// see [`CudaTuning`]).
fn apply_cuda_tuning(t: &CudaTuning) {
    #[cfg(feature = "cuda")]
    {
        cubecl_cuda::set_tf32(t.tf32);
        cubecl_cuda::set_tma(t.tma);
        cubecl_cuda::set_min_blocks_overrides(&t.min_blocks);
        crate::blas::set_cublas(t.cublas);
    }
    #[cfg(not(feature = "cuda"))]
    let _ = t;
}

/// A compute device with its client. Cheap to clone.
#[derive(Clone)]
pub struct Gpu {
    client: Client,
    device: cubecl::Device,
    poison: bool,
    tuning: std::sync::Arc<GpuTuning>,
    profiler: Profiler,
    /// One-word zero buffers bound where a kernel takes an argument it does not use
    /// ([`Gpu::placeholder`]), allocated once per slot.
    placeholders: std::sync::Arc<[std::sync::OnceLock<Handle>; PLACEHOLDER_SLOTS]>,
}

/// Distinct placeholder buffers a single launch can bind ([`Gpu::placeholder`]).
pub const PLACEHOLDER_SLOTS: usize = 8;

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gpu")
            .field("device", &self.device)
            .field("name", &self.name())
            .finish()
    }
}

impl Gpu {
    /// Open a device. Never panics: a missing driver or adapter is an error.
    pub fn new(opts: &GpuOptions) -> Result<Self, GpuError> {
        let device = match opts.backend {
            BackendKind::Wgpu => {
                let device = wgpu_device_for(opts.adapter)?;
                register_wgpu(&device, opts.tuning.wgpu_tasks_per_submit);
                cubecl::Device::Wgpu(device)
            }
            BackendKind::Cuda => {
                let device = cuda_device(opts.adapter)?;
                apply_cuda_tuning(&opts.tuning.cuda);
                device
            }
        };
        let dev = device.clone();
        let client = std::panic::catch_unwind(move || dev.client()).map_err(|e| {
            let msg = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown error".into());
            GpuError::NoAdapter(msg)
        })?;
        Ok(Self {
            client,
            device,
            poison: opts.poison,
            profiler: Profiler::new(opts.tuning.profile),
            tuning: std::sync::Arc::new(opts.tuning.clone()),
            placeholders: Default::default(),
        })
    }

    /// Wrap a client and device that already exist (e.g. those of a Burn tensor), with the
    /// default tuning.
    pub fn from_parts(client: Client, device: cubecl::Device) -> Self {
        Self {
            client,
            device,
            poison: false,
            tuning: Default::default(),
            profiler: Profiler::default(),
            placeholders: Default::default(),
        }
    }

    /// Whether `other` runs on the same device (so buffers of one can be bound by the other).
    pub fn same_device(&self, other: &Gpu) -> bool {
        self.device == other.device
    }

    /// The switches this device was opened with.
    pub fn tuning(&self) -> &GpuTuning {
        &self.tuning
    }
    /// Whether [`crate::launch!`] keeps CubeCL's bounds checks ([`GpuTuning::checked_kernels`]).
    pub fn checked_kernels(&self) -> bool {
        self.tuning.checked_kernels
    }
    /// The phase profiler of this device (shared by its clones; off unless
    /// [`GpuTuning::profile`] says otherwise).
    pub fn profiler(&self) -> &Profiler {
        &self.profiler
    }

    /// The default device with default options.
    pub fn default_device() -> Result<Self, GpuError> {
        Self::new(&GpuOptions::default())
    }

    pub fn client(&self) -> &Client {
        &self.client
    }
    pub fn device(&self) -> &cubecl::Device {
        &self.device
    }
    /// Whether kernels run on CubeCL's CUDA runtime (rather than wgpu).
    pub fn is_cuda(&self) -> bool {
        matches!(self.device, cubecl::Device::Cuda(_))
    }
    /// Adapter name as the driver reports it.
    pub fn name(&self) -> String {
        self.client.properties().identity.name.clone()
    }
    /// Whether this is Mesa's software Vulkan (lavapipe, which reports itself as "llvmpipe").
    /// There a workgroup looping through several hundred barriers lost the last 8 lanes' work
    /// (the rasterizer's forward pass; llvmpipe runs a workgroup as coroutines, one per SIMD
    /// slice, which may be the cause: not confirmed); launchers bound such loops per dispatch.
    pub fn is_llvmpipe(&self) -> bool {
        self.name().to_ascii_lowercase().contains("llvmpipe")
    }
    /// Largest shared (workgroup) memory a kernel may use, in bytes.
    pub fn max_shared_memory(&self) -> usize {
        self.client.properties().hardware.max_shared_memory_size
    }
    /// Subgroup ("plane") size range when the adapter runs plane reductions
    /// (`subgroupAdd` ...), `None` otherwise (e.g. Mesa's lavapipe: CubeCL turns them off on CPU
    /// adapters) or when [`GpuTuning::subgroups`] is off.
    pub fn plane_sizes(&self) -> Option<(u32, u32)> {
        if !self.tuning.subgroups {
            return None;
        }
        let p = self.client.properties();
        let ops = p.features.plane.contains(cubecl::features::Plane::Ops);
        (ops && p.hardware.plane_size_min >= 4 && p.hardware.plane_size_max <= 256)
            .then_some((p.hardware.plane_size_min, p.hardware.plane_size_max))
    }
    /// [`Gpu::plane_sizes`] when every plane size the adapter may pick is a power of two that
    /// divides a cube of `units` units (what kernels keeping one partial per plane of a cube in
    /// shared memory need).
    pub fn plane_sizes_dividing(&self, units: u32) -> Option<(u32, u32)> {
        self.plane_sizes().filter(|&(min, max)| {
            min.is_power_of_two() && max.is_power_of_two() && units.is_multiple_of(max)
        })
    }
    /// Whether kernels can `fetch_add` into `Atomic<f32>` buffers here (wgpu's
    /// `SHADER_FLOAT32_ATOMIC`: NVIDIA and AMD Vulkan, lavapipe, recent Metal).
    /// [`GpuTuning::f32_atomics`] off turns it off.
    pub fn f32_atomic_add(&self) -> bool {
        if !self.tuning.f32_atomics {
            return false;
        }
        use cubecl::ir::{ElemType, FloatKind, Type};
        self.client
            .properties()
            .atomic_type_usage(Type::atomic(ElemType::Float(FloatKind::F32)))
            .contains(cubecl::features::AtomicUsage::Add)
    }
    /// Largest single buffer (page) the memory manager hands out, in bytes.
    pub fn max_buffer_bytes(&self) -> u64 {
        self.client.properties().memory.max_page_size
    }
    /// Error unless one buffer of `bytes` can be allocated and bound on this adapter.
    pub fn check_fits(&self, what: &str, bytes: u64) -> Result<(), GpuError> {
        let limit = self.max_buffer_bytes();
        if bytes > limit {
            return Err(GpuError::BufferTooLarge {
                what: what.to_string(),
                needed: bytes,
                limit,
            });
        }
        Ok(())
    }

    pub fn max_cube_count_x(&self) -> u32 {
        self.client.properties().hardware.max_cube_count.0
    }

    /// Upload host data. The bytes are copied once on the host (CubeCL's `create_from_slice`
    /// copied them twice before the runtime's own staging copy).
    pub fn upload<T: Pod>(&self, data: &[T]) -> GpuBuffer<T> {
        let len = data.len();
        let handle = if len == 0 {
            self.client.create_from_slice(&[0u8; 4])
        } else {
            let bytes = bytemuck::cast_slice::<T, u8>(data).to_vec();
            self.client
                .create(cubecl::bytes::Bytes::from_bytes_vec(bytes))
        };
        GpuBuffer {
            handle,
            len,
            _t: PhantomData,
        }
    }

    /// Allocate an output buffer. Its contents are unspecified (NaN-filled when
    /// the device was opened with `poison`).
    pub fn alloc<T: Pod>(&self, len: usize) -> GpuBuffer<T> {
        if self.poison {
            return self.filled(len, u32::MAX);
        }
        let bytes = (len * std::mem::size_of::<T>()).max(4);
        GpuBuffer {
            handle: self.client.empty(bytes),
            len,
            _t: PhantomData,
        }
    }

    /// Allocate a zero-filled buffer (filled on the device: no host transfer).
    pub fn zeros<T: Pod>(&self, len: usize) -> GpuBuffer<T> {
        self.filled(len, 0u32)
    }

    /// A one-element zero buffer to bind where a kernel takes an argument its compile-time
    /// options leave unused (it must not be written). Slot `slot` (below
    /// [`PLACEHOLDER_SLOTS`]) is allocated on first use and shared afterwards, so hot paths
    /// do not allocate and fill a buffer per launch; use distinct slots for the arguments of
    /// one launch.
    pub fn placeholder<T: Pod>(&self, slot: usize) -> GpuBuffer<T> {
        assert_eq!(
            std::mem::size_of::<T>(),
            4,
            "placeholders hold one 32-bit element"
        );
        let handle = self.placeholders[slot]
            .get_or_init(|| self.zeros::<u32>(1).handle)
            .clone();
        GpuBuffer {
            handle,
            len: 1,
            _t: PhantomData,
        }
    }

    /// Allocate a buffer of 32-bit elements all set to the bit pattern `bits`.
    pub fn filled<T: Pod>(&self, len: usize, bits: u32) -> GpuBuffer<T> {
        assert_eq!(
            std::mem::size_of::<T>() % 4,
            0,
            "filled buffers hold 32-bit words"
        );
        let words = len * std::mem::size_of::<T>() / 4;
        let buf = GpuBuffer::<u32> {
            handle: self.client.empty(words.max(1) * 4),
            len: words,
            _t: PhantomData,
        };
        if words > 0 {
            crate::launch!(
                self,
                fill_u32(
                    &self.client,
                    self.grid_1d(words),
                    crate::BLOCK_DIM,
                    buf.arg(),
                    bits,
                    words as u32,
                )
            );
        }
        GpuBuffer {
            handle: buf.handle,
            len,
            _t: PhantomData,
        }
    }

    /// Read a buffer back to the host (blocks until all queued work is done).
    pub fn read<T: Pod>(&self, buf: &GpuBuffer<T>) -> Result<Vec<T>, GpuError> {
        if buf.len == 0 {
            return Ok(Vec::new());
        }
        let bytes = self
            .client
            .read_one(buf.handle.clone())
            .map_err(|e| GpuError::Device(format!("{e:?}")))?;
        let n = buf.len * std::mem::size_of::<T>();
        let mut out = vec![T::zeroed(); buf.len];
        bytemuck::cast_slice_mut::<T, u8>(&mut out).copy_from_slice(&bytes[..n]);
        Ok(out)
    }

    /// Read a single 32-bit element without reading the whole buffer.
    pub fn read_at<T: Pod>(&self, buf: &GpuBuffer<T>, index: usize) -> Result<T, GpuError> {
        assert_eq!(std::mem::size_of::<T>(), 4, "read_at reads 32-bit elements");
        if index >= buf.len() {
            return Err(GpuError::Device(format!(
                "index {index} out of range {}",
                buf.len()
            )));
        }
        let one = self.alloc::<u32>(1);
        copy_element::launch(
            &self.client,
            CubeCount::Static(1, 1, 1),
            CubeDim::new_1d(1),
            buf.clone().cast::<u32>().arg(),
            one.arg(),
            index as u32,
        );
        let v = self.read(&one)?;
        Ok(bytemuck::cast::<u32, T>(v[0]))
    }

    /// Wait for all queued work.
    pub fn sync(&self) -> Result<(), GpuError> {
        futures_lite::future::block_on(self.client.sync())
            .map_err(|e| GpuError::Device(format!("{e:?}")))
    }

    /// Bytes currently reserved by the device memory pools.
    pub fn memory_reserved(&self) -> u64 {
        self.memory_usage().bytes_reserved
    }
    /// Bytes currently in use by live buffers.
    pub fn memory_in_use(&self) -> u64 {
        self.memory_usage().bytes_in_use
    }
    fn memory_usage(&self) -> cubecl::MemoryUsage {
        self.client
            .memory_report(cubecl::MemoryScope::Device)
            .usage()
    }
    /// Return unused pooled memory to the driver.
    pub fn memory_cleanup(&self) {
        let _ = self.client.memory_cleanup();
    }

    /// A launch grid of `blocks` cubes, folded into two dimensions when it exceeds the
    /// per-dimension limit. Kernels recover the linear block id with [`crate::block_id`].
    pub fn grid(&self, blocks: usize) -> CubeCount {
        grid_for(blocks, self.max_cube_count_x())
    }

    /// The grid of a 1-D launch over `n` units: [`crate::BLOCK`] per cube (launch it with
    /// [`crate::BLOCK_DIM`]), folded like [`Gpu::grid`]. The kernel finds its unit with
    /// [`crate::global_id`] and tests it against `n`.
    pub fn grid_1d(&self, n: usize) -> CubeCount {
        self.grid(n.div_ceil(crate::BLOCK as usize))
    }
}

pub(crate) fn grid_for(blocks: usize, max_x: u32) -> CubeCount {
    let blocks = blocks.max(1);
    let max_x = max_x.clamp(1, 65535) as usize;
    if blocks <= max_x {
        CubeCount::Static(blocks as u32, 1, 1)
    } else {
        let y = blocks.div_ceil(max_x);
        let x = blocks.div_ceil(y);
        CubeCount::Static(x as u32, y as u32, 1)
    }
}

#[cube(launch, launch_unchecked)]
fn fill_u32(out: &mut [u32], bits: u32, n: u32) {
    let i = crate::global_id();
    if i < n as usize {
        out[i] = bits;
    }
}

#[cube(launch)]
fn copy_element(src: &[u32], dst: &mut [u32], index: u32) {
    dst[0] = src[index as usize];
}

/// A typed device buffer. `len` is the logical element count (it may be zero;
/// the allocation is never empty because graphics APIs cannot bind empty buffers).
pub struct GpuBuffer<T> {
    pub handle: Handle,
    len: usize,
    _t: PhantomData<T>,
}

impl<T> Clone for GpuBuffer<T> {
    fn clone(&self) -> Self {
        Self {
            handle: self.handle.clone(),
            len: self.len,
            _t: PhantomData,
        }
    }
}

impl<T> std::fmt::Debug for GpuBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GpuBuffer<{}>[{}]", std::any::type_name::<T>(), self.len)
    }
}

impl<T> GpuBuffer<T> {
    /// A typed view of an existing handle holding at least `len` elements of `T`.
    pub fn from_handle(handle: Handle, len: usize) -> Self {
        Self {
            handle,
            len,
            _t: PhantomData,
        }
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Kernel argument for this buffer.
    pub fn arg(&self) -> BufferArg {
        // SAFETY: the allocation holds at least max(len, 1) elements of T.
        unsafe { BufferArg::from_raw_parts(self.handle.clone(), self.len.max(1)) }
    }
    /// Kernel argument for this buffer read as vectors of `width` elements (a
    /// `&[Vector<T, N>]` parameter launched with vector size `width`): `len / width` of them.
    ///
    /// # Panics
    /// If `width` is 0 or does not divide the length.
    pub fn arg_vectors(&self, width: usize) -> BufferArg {
        assert!(
            width > 0 && self.len.is_multiple_of(width),
            "{} elements are not vectors of {width}",
            self.len
        );
        // SAFETY: the allocation holds at least len elements of T, len / width vectors.
        unsafe { BufferArg::from_raw_parts(self.handle.clone(), (self.len / width).max(1)) }
    }
    /// Reinterpret the element type (same size only).
    pub fn cast<U>(self) -> GpuBuffer<U> {
        assert_eq!(std::mem::size_of::<T>(), std::mem::size_of::<U>());
        GpuBuffer {
            handle: self.handle,
            len: self.len,
            _t: PhantomData,
        }
    }
    /// View with a shorter logical length.
    pub fn truncated(&self, len: usize) -> GpuBuffer<T> {
        GpuBuffer {
            handle: self.handle.clone(),
            len: len.min(self.len),
            _t: PhantomData,
        }
    }
}

/// The device buffer of a binary32 Burn tensor of the CubeCL backend, row-major (a strided tensor
/// is made contiguous on the device first), with the device it lives on. No host transfer: the
/// buffer is the tensor's own (or its contiguous copy's).
pub fn burn_tensor_buffer<const D: usize>(
    t: burn::tensor::Tensor<D>,
) -> Result<(Gpu, GpuBuffer<f32>), GpuError> {
    let t = t
        .try_into_primitive::<burn::backend::Cube>()
        .map_err(|e| GpuError::Device(format!("not a CubeCL tensor: {e:?}")))?;
    if t.dtype != burn::tensor::DType::F32 {
        return Err(GpuError::Device(format!(
            "expected a binary32 tensor, got {:?}",
            t.dtype
        )));
    }
    let gpu = Gpu::from_parts(t.client.clone(), t.device.clone());
    Ok((gpu, cube_tensor_buffer(t)))
}

/// The device buffer of a CubeCL Burn tensor, row-major: a strided tensor is made contiguous on
/// the device first. No host transfer, and no check of the element type (the caller names it).
/// The buffer's handle keeps the memory alive, so the tensor can be dropped.
pub fn cube_tensor_buffer<T>(t: burn_cubecl::tensor::CubeTensor) -> GpuBuffer<T> {
    let t = burn_cubecl::kernel::into_contiguous(t);
    let len = t.meta.shape().num_elements();
    GpuBuffer::from_handle(t.handle, len)
}
