//! Collective operations between the ranks of a data-parallel run (docs/multi-gpu.md).
//!
//! [`Collective`] is what a data-parallel trainer needs: every rank holds a full replica,
//! sums its gradients with the other ranks' ([`Collective::all_reduce_sum`]) and, where one
//! rank decides, hands the decision to the others ([`Collective::broadcast`]). Two
//! implementations:
//!
//! - [`InProcessCollective`]: ranks are threads of one process, sums go through host memory
//!   in rank order `0..N` (so every rank gets bit-identical values and the result does not
//!   depend on thread timing). Any backend, lavapipe included; what the tests use.
//! - `NcclCollective` (feature `cuda`): NVIDIA's NCCL through cudarc, loaded at run time like
//!   cuBLAS, one communicator per rank (one GPU per rank), operations issued on CubeCL's stream
//!   so they order with the kernels. The same code serves ranks that are threads of one
//!   process and ranks in different processes or hosts (they only have to share the
//!   128-byte [`NcclId`]).
//!
//! [`add_assign`] and [`scale`] are the element-wise kernels a reduction needs around the
//! collective (local sums over views, the mean over the batch).

use std::sync::{Arc, Condvar, Mutex};

use cubecl::prelude::*;

use crate::{Gpu, GpuBuffer, GpuError};

/// The collective operations of a group of ranks. Every rank must call the same operations in
/// the same order with buffers of the same length (a collective is a rendezvous: a rank that
/// skips one leaves the others waiting).
pub trait Collective: Send + Sync {
    /// This rank, `0..world_size`.
    fn rank(&self) -> usize;
    /// Number of ranks.
    fn world_size(&self) -> usize;
    /// The element-wise sum of `buf` over the ranks, on every rank. May reuse `buf`'s memory
    /// (the NCCL collective sums in place); the caller uses the returned buffer.
    fn all_reduce_sum(&self, gpu: &Gpu, buf: GpuBuffer<f32>) -> Result<GpuBuffer<f32>, GpuError>;
    /// Rank `root`'s `buf` on every rank (same length everywhere).
    fn broadcast(
        &self,
        gpu: &Gpu,
        buf: GpuBuffer<f32>,
        root: usize,
    ) -> Result<GpuBuffer<f32>, GpuError>;
    /// Gives up the group, from any thread: operations waiting for a rank that will not come
    /// (it failed) end with an error instead of waiting forever, and later ones fail at once.
    /// Called by a run's driver when one of its ranks stops with an error.
    fn abort(&self);
}

#[cube(launch_unchecked)]
fn add_assign_kernel(dst: &mut [f32], src: &[f32], n: u32) {
    let i = crate::global_id();
    if i < n as usize {
        dst[i] += src[i];
    }
}

#[cube(launch_unchecked)]
fn scale_kernel(dst: &mut [f32], s: f32, n: u32) {
    let i = crate::global_id();
    if i < n as usize {
        dst[i] *= s;
    }
}

/// `dst[i] += src[i]` (same lengths).
pub fn add_assign(gpu: &Gpu, dst: &GpuBuffer<f32>, src: &GpuBuffer<f32>) -> Result<(), GpuError> {
    if dst.len() != src.len() {
        return Err(GpuError::Config(format!(
            "add_assign: buffers of {} and {} values",
            dst.len(),
            src.len()
        )));
    }
    let n = dst.len();
    if n > 0 {
        // SAFETY: the kernel indexes only `i < n`, and both buffers hold `n` values.
        unsafe {
            add_assign_kernel::launch_unchecked(
                gpu.client(),
                gpu.grid_1d(n),
                crate::BLOCK_DIM,
                dst.arg(),
                src.arg(),
                n as u32,
            );
        }
    }
    Ok(())
}

/// `dst[i] *= s`.
pub fn scale(gpu: &Gpu, dst: &GpuBuffer<f32>, s: f32) {
    let n = dst.len();
    if n > 0 {
        // SAFETY: the kernel indexes only `i < n`.
        unsafe {
            scale_kernel::launch_unchecked(
                gpu.client(),
                gpu.grid_1d(n),
                crate::BLOCK_DIM,
                dst.arg(),
                s,
                n as u32,
            );
        }
    }
}

/// A broadcast's root must be a rank of the group (both collectives check it first).
fn check_root(root: usize, world: usize) -> Result<(), GpuError> {
    if root >= world {
        return Err(GpuError::Config(format!(
            "broadcast from rank {root} in a group of {world}"
        )));
    }
    Ok(())
}

/// A barrier that [`Collective::abort`] can break.
struct Gate {
    /// (ranks arrived in this generation, generation, aborted)
    state: Mutex<(usize, u64, bool)>,
    cv: Condvar,
    n: usize,
}

impl Gate {
    fn wait(&self) -> Result<(), GpuError> {
        let aborted = || GpuError::Device("collective aborted: another rank stopped".into());
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if st.2 {
            return Err(aborted());
        }
        let generation = st.1;
        st.0 += 1;
        if st.0 == self.n {
            st.0 = 0;
            st.1 += 1;
            self.cv.notify_all();
            return Ok(());
        }
        while st.1 == generation && !st.2 {
            st = self.cv.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        if st.1 == generation {
            Err(aborted())
        } else {
            Ok(())
        }
    }

    fn abort(&self) {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).2 = true;
        self.cv.notify_all();
    }
}

struct Shared {
    world: usize,
    /// One host copy per rank of the operation in progress.
    slots: Mutex<Vec<Option<Vec<f32>>>>,
    gate: Gate,
}

/// Ranks as threads of one process, data through host memory (see the module documentation).
/// Ranks may share one device or use one each. A rank that stops calling (an error, a panic)
/// leaves the others waiting at the next operation until [`Collective::abort`] (the training
/// driver aborts the group when a rank fails).
pub struct InProcessCollective {
    rank: usize,
    shared: Arc<Shared>,
}

impl InProcessCollective {
    /// The `world_size` ranks of one group, rank `r` at index `r`; hand one to each thread.
    pub fn group(world_size: usize) -> Vec<InProcessCollective> {
        let shared = Arc::new(Shared {
            world: world_size,
            slots: Mutex::new(vec![None; world_size]),
            gate: Gate {
                state: Mutex::new((0, 0, false)),
                cv: Condvar::new(),
                n: world_size.max(1),
            },
        });
        (0..world_size)
            .map(|rank| InProcessCollective {
                rank,
                shared: shared.clone(),
            })
            .collect()
    }

    /// Puts `mine` in this rank's slot, waits for every rank, computes `f` of the slots (in
    /// rank order) and waits again so no rank overwrites a slot another still reads. Every
    /// rank passes both barriers whatever happens, so an error on one rank is an error on all
    /// (never a rank left waiting).
    fn exchange<T>(
        &self,
        mine: Option<Vec<f32>>,
        f: impl FnOnce(&[Option<Vec<f32>>]) -> Result<T, GpuError>,
    ) -> Result<T, GpuError> {
        let slots = &self.shared.slots;
        slots.lock().unwrap_or_else(|e| e.into_inner())[self.rank] = mine;
        self.shared.gate.wait()?;
        let out = f(&slots.lock().unwrap_or_else(|e| e.into_inner()));
        self.shared.gate.wait()?;
        out
    }
}

impl Collective for InProcessCollective {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.shared.world
    }

    fn all_reduce_sum(&self, gpu: &Gpu, buf: GpuBuffer<f32>) -> Result<GpuBuffer<f32>, GpuError> {
        let (mine, err) = match gpu.read(&buf) {
            Ok(v) => (Some(v), None),
            Err(e) => (None, Some(e)),
        };
        let sum = self.exchange(mine, |slots| {
            let mut it = slots.iter().enumerate();
            let Some((_, Some(first))) = it.next() else {
                return Err(GpuError::Device(
                    "all-reduce: rank 0 could not read its buffer".into(),
                ));
            };
            let mut sum = first.clone();
            for (r, slot) in it {
                let Some(v) = slot else {
                    return Err(GpuError::Device(format!(
                        "all-reduce: rank {r} could not read its buffer"
                    )));
                };
                if v.len() != sum.len() {
                    return Err(GpuError::Config(format!(
                        "all-reduce: rank {r} has {} values, rank 0 has {}",
                        v.len(),
                        sum.len()
                    )));
                }
                for (s, x) in sum.iter_mut().zip(v) {
                    *s += *x;
                }
            }
            Ok(sum)
        });
        if let Some(e) = err {
            return Err(e);
        }
        Ok(gpu.upload(&sum?))
    }

    fn broadcast(
        &self,
        gpu: &Gpu,
        buf: GpuBuffer<f32>,
        root: usize,
    ) -> Result<GpuBuffer<f32>, GpuError> {
        check_root(root, self.shared.world)?;
        let (data, err) = match (self.rank == root).then(|| gpu.read(&buf)) {
            Some(Ok(v)) => (Some(v), None),
            Some(Err(e)) => (None, Some(e)),
            None => (None, None),
        };
        let out = self.exchange(data, |slots| {
            slots[root].clone().ok_or_else(|| {
                GpuError::Device(format!("broadcast: rank {root} could not read its buffer"))
            })
        });
        if let Some(e) = err {
            return Err(e);
        }
        let out = out?;
        if out.len() != buf.len() {
            return Err(GpuError::Config(format!(
                "broadcast: rank {root} sent {} values, rank {} expects {}",
                out.len(),
                self.rank,
                buf.len()
            )));
        }
        Ok(gpu.upload(&out))
    }

    fn abort(&self) {
        self.shared.gate.abort();
    }
}

/// The 128 bytes that identify an NCCL group: rank 0 makes it (`nccl_unique_id`), every rank
/// passes it to `NcclCollective::new` (threads share it; processes and hosts exchange it, see
/// docs/multi-gpu.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NcclId(pub [u8; 128]);

/// Whether NCCL can be used: a build with the `cuda` feature and `libnccl.so` (cudarc's name
/// for it) found by the dynamic loader. The error says what is missing; nothing panics.
pub fn nccl_available() -> Result<(), GpuError> {
    #[cfg(feature = "cuda")]
    {
        // cudarc panics on first use when the library is missing: ask first.
        // SAFETY: only tries to `dlopen` each candidate name.
        if unsafe { cudarc::nccl::sys::is_culib_present() } {
            Ok(())
        } else {
            Err(GpuError::Config(
                "NCCL not found: training on more than one GPU needs libnccl.so on the library \
                 path (pip's nvidia-nccl-cu13 ships lib/libnccl.so.2: link it as libnccl.so, \
                 see docs/multi-gpu.md)"
                    .into(),
            ))
        }
    }
    #[cfg(not(feature = "cuda"))]
    Err(GpuError::Config(
        "this build has no CUDA backend (build with --features cuda): training on more than one \
         GPU needs NCCL"
            .into(),
    ))
}

#[cfg(feature = "cuda")]
pub use nccl::{NcclCollective, nccl_unique_id};

/// A new NCCL group id ([`NcclId`]); an error (never a panic) without the `cuda` feature or
/// without the library.
pub fn nccl_new_id() -> Result<NcclId, GpuError> {
    #[cfg(feature = "cuda")]
    {
        nccl_unique_id()
    }
    #[cfg(not(feature = "cuda"))]
    {
        nccl_available()?;
        Err(GpuError::Config("NCCL needs the cuda feature".into()))
    }
}

/// Joins NCCL group `id` as `rank` of `world_size` on `gpu` (a CUDA device); blocks until every
/// rank has joined. An error without the `cuda` feature, without the library, or on wgpu.
pub fn nccl_join(
    gpu: &Gpu,
    id: &NcclId,
    rank: usize,
    world_size: usize,
) -> Result<Box<dyn Collective>, GpuError> {
    #[cfg(feature = "cuda")]
    {
        Ok(Box::new(NcclCollective::new(gpu, id, rank, world_size)?))
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = (gpu, id, rank, world_size);
        nccl_available()?;
        Err(GpuError::Config("NCCL needs the cuda feature".into()))
    }
}

#[cfg(feature = "cuda")]
mod nccl {
    use cubecl_cuda::CudaServer;
    use cudarc::driver::sys as cu;
    use cudarc::nccl::sys as nc;

    use super::{Collective, NcclId, nccl_available};
    use crate::{Gpu, GpuBuffer, GpuError};

    fn check(what: &str, r: nc::ncclResult_t) -> Result<(), GpuError> {
        if r == nc::ncclResult_t::ncclSuccess {
            Ok(())
        } else {
            Err(GpuError::Device(format!("NCCL {what}: {r:?}")))
        }
    }

    fn check_cu(what: &str, r: cu::CUresult) -> Result<(), GpuError> {
        if r == cu::CUresult::CUDA_SUCCESS {
            Ok(())
        } else {
            Err(GpuError::Device(format!("{what}: {r:?}")))
        }
    }

    /// A new group id (call once, on rank 0, and hand it to every rank).
    pub fn nccl_unique_id() -> Result<NcclId, GpuError> {
        nccl_available()?;
        let mut id = nc::ncclUniqueId { internal: [0; 128] };
        // SAFETY: NCCL writes the 128-byte id it is given.
        check("ncclGetUniqueId", unsafe { nc::ncclGetUniqueId(&mut id) })?;
        Ok(NcclId(id.internal.map(|c| c as u8)))
    }

    /// The device pointer of `buf` and CubeCL's stream for this thread, with that stream's
    /// context made current (NCCL's runtime API calls take the current context's device).
    fn pointer_and_stream(
        gpu: &Gpu,
        buf: &GpuBuffer<f32>,
    ) -> Result<(u64, cu::CUstream), GpuError> {
        if !gpu.is_cuda() {
            return Err(GpuError::Config(
                "NCCL needs the CUDA backend (wgpu stays single-GPU)".into(),
            ));
        }
        let res = gpu
            .client()
            .get_resource::<CudaServer>(buf.handle.clone())
            .map_err(|e| GpuError::Device(format!("device pointer: {e:?}")))?;
        let r = res.resource();
        let (ptr, stream) = (r.ptr, r.stream);
        drop(res);
        let mut ctx: cu::CUcontext = std::ptr::null_mut();
        let mut current: cu::CUcontext = std::ptr::null_mut();
        // SAFETY: plain driver queries on a live stream; sets this thread's current context.
        unsafe {
            check_cu("cuStreamGetCtx", cu::cuStreamGetCtx(stream, &mut ctx))?;
            check_cu("cuCtxGetCurrent", cu::cuCtxGetCurrent(&mut current))?;
            if current != ctx {
                check_cu("cuCtxSetCurrent", cu::cuCtxSetCurrent(ctx))?;
            }
        }
        Ok((ptr, stream))
    }

    /// One rank of an NCCL group: one GPU, one communicator. Use it from the thread that owns
    /// the rank's [`Gpu`] (CubeCL gives each thread its own stream).
    pub struct NcclCollective {
        rank: usize,
        world: usize,
        comm: nc::ncclComm_t,
        /// Set once [`Collective::abort`] has released the communicator.
        aborted: std::sync::atomic::AtomicBool,
    }

    // SAFETY: the communicator is used by one rank's thread at a time (the trait's methods
    // take `&self` but every rank calls them from its own thread); NCCL allows a communicator
    // to move between threads.
    unsafe impl Send for NcclCollective {}
    unsafe impl Sync for NcclCollective {}

    impl NcclCollective {
        /// Joins group `id` as `rank` of `world_size` on `gpu`'s device. Blocks until every
        /// rank has joined (each rank calls this from its own thread or process).
        pub fn new(
            gpu: &Gpu,
            id: &NcclId,
            rank: usize,
            world_size: usize,
        ) -> Result<Self, GpuError> {
            nccl_available()?;
            if rank >= world_size {
                return Err(GpuError::Config(format!(
                    "rank {rank} is outside a group of {world_size}"
                )));
            }
            // Make the device's (primary) context current on this thread.
            let probe = gpu.zeros::<f32>(1);
            pointer_and_stream(gpu, &probe)?;
            let id = nc::ncclUniqueId {
                internal: id.0.map(|b| b as _),
            };
            let mut comm: nc::ncclComm_t = std::ptr::null_mut();
            // SAFETY: NCCL writes the communicator handle.
            check("ncclCommInitRank", unsafe {
                nc::ncclCommInitRank(&mut comm, world_size as i32, id, rank as i32)
            })?;
            Ok(Self {
                rank,
                world: world_size,
                comm,
                aborted: std::sync::atomic::AtomicBool::new(false),
            })
        }
    }

    impl NcclCollective {
        fn live(&self) -> Result<(), GpuError> {
            if self.aborted.load(std::sync::atomic::Ordering::SeqCst) {
                Err(GpuError::Device(
                    "NCCL communicator aborted: another rank stopped".into(),
                ))
            } else {
                Ok(())
            }
        }

        /// Runs the NCCL operation `op` (named `what` in errors) in place on `buf`: nothing for
        /// an empty buffer, else `op(device pointer, length, CubeCL's stream)` after the
        /// communicator is checked live, its result checked.
        fn in_place(
            &self,
            gpu: &Gpu,
            buf: GpuBuffer<f32>,
            what: &str,
            op: impl FnOnce(u64, usize, nc::cudaStream_t) -> nc::ncclResult_t,
        ) -> Result<GpuBuffer<f32>, GpuError> {
            self.live()?;
            if buf.is_empty() {
                return Ok(buf);
            }
            let (ptr, stream) = pointer_and_stream(gpu, &buf)?;
            check(what, op(ptr, buf.len(), stream as nc::cudaStream_t))?;
            Ok(buf)
        }
    }

    impl Drop for NcclCollective {
        fn drop(&mut self) {
            if !self.aborted.load(std::sync::atomic::Ordering::SeqCst) {
                // SAFETY: the communicator was made by ncclCommInitRank and is not used after.
                unsafe {
                    nc::ncclCommDestroy(self.comm);
                }
            }
        }
    }

    impl Collective for NcclCollective {
        fn rank(&self) -> usize {
            self.rank
        }

        fn world_size(&self) -> usize {
            self.world
        }

        fn all_reduce_sum(
            &self,
            gpu: &Gpu,
            buf: GpuBuffer<f32>,
        ) -> Result<GpuBuffer<f32>, GpuError> {
            self.in_place(gpu, buf, "ncclAllReduce", |ptr, len, stream| {
                // SAFETY: in place on a live buffer of `len` floats, on the stream its kernels
                // use (`in_place`).
                unsafe {
                    nc::ncclAllReduce(
                        ptr as *const _,
                        ptr as *mut _,
                        len,
                        nc::ncclDataType_t::ncclFloat32,
                        nc::ncclRedOp_t::ncclSum,
                        self.comm,
                        stream,
                    )
                }
            })
        }

        fn broadcast(
            &self,
            gpu: &Gpu,
            buf: GpuBuffer<f32>,
            root: usize,
        ) -> Result<GpuBuffer<f32>, GpuError> {
            super::check_root(root, self.world)?;
            self.in_place(gpu, buf, "ncclBroadcast", |ptr, len, stream| {
                // SAFETY: as in `all_reduce_sum`.
                unsafe {
                    nc::ncclBroadcast(
                        ptr as *const _,
                        ptr as *mut _,
                        len,
                        nc::ncclDataType_t::ncclFloat32,
                        root as i32,
                        self.comm,
                        stream,
                    )
                }
            })
        }

        fn abort(&self) {
            use std::sync::atomic::Ordering;
            if !self.aborted.swap(true, Ordering::SeqCst) {
                // SAFETY: ncclCommAbort may be called while operations on the communicator
                // are pending (it ends them); the handle is not used after (`live`, `drop`).
                unsafe {
                    nc::ncclCommAbort(self.comm);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::GpuOptions;

    fn test_gpu() -> Gpu {
        Gpu::new(&GpuOptions {
            poison: true,
            ..Default::default()
        })
        .expect("a GPU adapter is required (CI installs Mesa's lavapipe)")
    }

    #[test]
    fn in_process_sum_and_broadcast_are_the_rank_ordered_host_values() {
        let gpu = test_gpu();
        let world = 3;
        let values: Vec<Vec<f32>> = (0..world)
            .map(|r| {
                (0..1000)
                    .map(|i| (i as f32 * 0.37 + r as f32).sin() * 1e3f32.powi(r as i32))
                    .collect()
            })
            .collect();
        let mut expect = values[0].clone();
        for v in &values[1..] {
            for (e, x) in expect.iter_mut().zip(v) {
                *e += *x;
            }
        }
        let group = InProcessCollective::group(world);
        let out: Vec<(Vec<f32>, Vec<f32>)> = std::thread::scope(|s| {
            let handles: Vec<_> = group
                .iter()
                .map(|c| {
                    let gpu = gpu.clone();
                    let mine = values[c.rank()].clone();
                    s.spawn(move || {
                        assert_eq!(c.world_size(), world);
                        let sum = c.all_reduce_sum(&gpu, gpu.upload(&mine)).expect("sum");
                        let b = c.broadcast(&gpu, gpu.upload(&mine), 1).expect("broadcast");
                        (gpu.read(&sum).expect("read"), gpu.read(&b).expect("read"))
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("rank"))
                .collect()
        });
        for (sum, b) in out {
            // Bit-identical: the same additions in the same order as the host reference.
            assert_eq!(sum, expect);
            assert_eq!(b, values[1]);
        }
    }

    #[test]
    fn in_process_length_mismatch_is_an_error_on_every_rank() {
        let gpu = test_gpu();
        let group = InProcessCollective::group(2);
        std::thread::scope(|s| {
            let hs: Vec<_> = group
                .iter()
                .map(|c| {
                    let gpu = gpu.clone();
                    s.spawn(move || {
                        let buf = gpu.upload(&vec![1.0f32; 4 + c.rank()]);
                        c.all_reduce_sum(&gpu, buf).is_err()
                    })
                })
                .collect();
            for h in hs {
                assert!(h.join().expect("rank"), "a mismatch must fail");
            }
        });
    }

    #[test]
    fn abort_ends_a_wait_for_a_rank_that_never_comes() {
        let gpu = test_gpu();
        let group = InProcessCollective::group(2);
        std::thread::scope(|s| {
            let waiting = s.spawn(|| group[0].all_reduce_sum(&gpu, gpu.upload(&[1.0f32])));
            // Rank 1 fails instead of joining: its driver aborts the group.
            std::thread::sleep(std::time::Duration::from_millis(100));
            group[1].abort();
            let e = waiting.join().expect("rank 0").expect_err("aborted");
            assert!(e.to_string().contains("aborted"), "{e}");
        });
        // Later operations fail at once.
        assert!(
            group[1]
                .all_reduce_sum(&gpu, gpu.upload(&[1.0f32]))
                .is_err()
        );
    }

    #[test]
    fn add_assign_and_scale_match_the_host() {
        let gpu = test_gpu();
        let a: Vec<f32> = (0..777).map(|i| (i as f32).cos()).collect();
        let b: Vec<f32> = (0..777).map(|i| (i as f32 * 0.1).sin()).collect();
        let da = gpu.upload(&a);
        add_assign(&gpu, &da, &gpu.upload(&b)).expect("add");
        scale(&gpu, &da, 1.0 / 3.0);
        let got = gpu.read(&da).expect("read");
        for i in 0..a.len() {
            assert_eq!(got[i], (a[i] + b[i]) * (1.0f32 / 3.0), "element {i}");
        }
        assert!(add_assign(&gpu, &da, &gpu.upload(&b[..5])).is_err());
    }

    #[test]
    fn nccl_missing_is_an_error_not_a_panic() {
        // Without the `cuda` feature (CI) this is always an error; with it, whatever the
        // loader finds, the call returns.
        let r = nccl_available();
        #[cfg(not(feature = "cuda"))]
        assert!(r.is_err());
        let _ = r;
    }
}
