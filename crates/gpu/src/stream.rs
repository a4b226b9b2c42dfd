//! Device streams of their own ([`GpuStream`]) and buffers handed from one stream to another
//! ([`adopt`]).

use cubecl::prelude::*;

use crate::{Gpu, GpuBuffer};

/// A device queue of its own for work submitted from any thread inside [`GpuStream::run`],
/// apart from each thread's default one. On CUDA it is a CUDA stream of its own, so that work
/// overlaps the work of other threads' streams on the same device (CubeCL makes a stream wait
/// for another's writes to a buffer both use); wgpu has one queue, and the work is ordered as
/// submitted. Copy it to use one stream from several places.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GpuStream(burn::tensor::StreamId);

impl GpuStream {
    /// A stream distinct from every thread's default one and every other `GpuStream`.
    #[allow(clippy::new_without_default)]
    pub fn new() -> Self {
        GpuStream(burn::tensor::StreamId::allocate())
    }

    /// Runs `f` with this stream as the calling thread's current one (restored afterwards,
    /// also on unwind).
    pub fn run<T>(&self, f: impl FnOnce() -> T) -> T {
        self.0.executes(f)
    }
}

#[cube(launch)]
fn adopt_kernel(src: &[u32], out: &mut [u32]) {
    if crate::global_id() == 0 {
        out[0] = src[0];
    }
}

/// Makes the calling thread's current stream wait, now, for the work that wrote `buffers` (on
/// whichever stream), and for nothing queued after it. CubeCL makes a stream wait for another
/// the first time it uses a buffer the other wrote, for everything the other has queued by
/// then: a thread that hands buffers to another stream and goes on queueing work would
/// otherwise make the other stream wait for that work too. One one-thread launch per buffer
/// (reads its first word).
pub fn adopt<T>(gpu: &Gpu, buffers: &[&GpuBuffer<T>]) {
    let out = gpu.alloc::<u32>(1);
    for b in buffers {
        adopt_kernel::launch(
            gpu.client(),
            gpu.grid_1d(1),
            crate::BLOCK_DIM,
            (*b).clone().cast::<u32>().arg(),
            out.arg(),
        );
    }
}
