//! The encoder and the decoder (with both heads and the post-processing) recorded once per input
//! size and replayed per frame (Burn's graph capture: CUDA graphs on the CUDA backend).
//!
//! MASt3R-SLAM runs the same few-thousand-launch network on every frame. Launched one operation
//! at a time, the host's per-operation cost (Burn's dispatch and CubeCL's launch path) is larger
//! than most of the kernels it launches: the GPU waits between them. A replay hands the whole
//! recorded sequence to the driver in one call. Where the backend cannot record (wgpu), or a
//! recording fails, [`Replayer`] runs the network directly, with the same results.
//!
//! A recorded graph reads its inputs from, and writes its outputs to, the buffers it was
//! recorded with. [`Replayer`] owns those input buffers and refreshes them in place before each
//! replay; it hands outputs out as copies ([`Replayer::encode`]) or only for as long as it is
//! borrowed ([`Replayer::decode`]), so a later replay can never overwrite a tensor a caller
//! still holds. Each recording keeps the buffers of one run of its part of the network for as
//! long as the [`Replayer`] lives. Recordings belong to the thread that made them (CubeCL
//! orders work per thread): called from another thread, the [`Replayer`] records anew.

use std::sync::{Arc, Mutex};
use std::thread::ThreadId;

use burn::backend::{Backend, BackendGraph, Dispatch};
use burn::tensor::{Device, Tensor};

use super::{Encoded, Mast3r, Prediction};

type Closure<T> = Box<dyn FnMut() -> T + Send>;

/// A refreshable input buffer shared by a recording closure and its [`Replayer`].
type Slot<const D: usize> = Arc<Mutex<Tensor<D>>>;

fn slot<const D: usize>(value: Tensor<D>) -> Slot<D> {
    Arc::new(Mutex::new(value))
}

/// The tensor in `slot`, for the recording closure (a second handle on the same buffer, dropped
/// when the network has consumed it).
fn read<const D: usize>(slot: &Slot<D>) -> Tensor<D> {
    slot.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Writes `value` into `slot`'s buffer in place, so a recorded graph reads it.
fn refresh<const D: usize>(slot: &Slot<D>, value: Tensor<D>) -> Result<(), String> {
    let mut t = slot.lock().unwrap_or_else(|e| e.into_inner());
    if t.dims() != value.dims() || t.dtype() != value.dtype() {
        return Err(format!(
            "graph input is {:?} {:?}, got {:?} {:?}",
            t.dims(),
            t.dtype(),
            value.dims(),
            value.dtype()
        ));
    }
    // One handle: `slice_assign` then writes the buffer itself instead of a copy of it (a copy
    // would leave the graph reading stale data).
    if !t.can_mut() {
        return Err("graph input buffer is shared, an in-place refresh is impossible".into());
    }
    let ranges = t.dims().map(|d| 0..d);
    t.inplace(|t| t.slice_assign(ranges, value));
    Ok(())
}

/// A deep copy (a new buffer), for outputs that must outlive the next replay.
fn copy<const D: usize>(t: &Tensor<D>) -> Tensor<D> {
    t.clone().mul_scalar(1.0)
}

/// A closure recorded for replay: Burn's [`burn::tensor::capture`] sequence (prepare the pool,
/// three warm-up runs, one recorded run), with replay failures returned as errors (Burn's
/// `Graph::replay` panics on them).
struct Recording<T> {
    device: Device,
    output: T,
    closure: Closure<T>,
    /// The driver's recording, or `None` where the backend cannot record (wgpu) or the recording
    /// failed: replays then re-run the closure.
    hardware: Option<BackendGraph<Dispatch>>,
}

impl<T> Recording<T> {
    fn new(device: &Device, mut closure: Closure<T>) -> Self {
        let dispatch = device.as_dispatch();
        let _ = Dispatch::graph_prepare(dispatch);
        // Warm-up runs populate the pool with every buffer the recording reuses (an allocation
        // inside a recording fails); each output is held across the synchronisation.
        for _ in 0..3 {
            let out = closure();
            let _ = Dispatch::sync(dispatch);
            drop(out);
        }
        let (hardware, output) = match Dispatch::graph_start_capture(dispatch) {
            Ok(()) => {
                let output = closure();
                let graph = Dispatch::graph_stop_capture(dispatch)
                    .inspect_err(|e| {
                        // The backend records, so this costs every later frame its launch time:
                        // say so (a silent fallback hid a cuBLAS workspace bug on the H100).
                        tracing::warn!(
                            "recording the network failed ({e:?}); it runs launch by launch"
                        )
                    })
                    .ok();
                (graph, output)
            }
            Err(_) => (None, closure()),
        };
        Recording {
            device: device.clone(),
            output,
            closure,
            hardware,
        }
    }

    fn is_hardware(&self) -> bool {
        self.hardware.is_some()
    }

    /// # Safety
    /// Every buffer the closure read or wrote while recording is alive, and refreshes and reads
    /// are ordered on the recording's stream (one thread).
    unsafe fn replay(&mut self) -> Result<&T, String> {
        match &self.hardware {
            Some(graph) => unsafe { Dispatch::graph_replay(self.device.as_dispatch(), graph) }
                .map_err(|e| format!("the driver refused to replay the recorded network: {e:?}"))?,
            None => self.output = (self.closure)(),
        }
        Ok(&self.output)
    }
}

struct EncodeGraph {
    dims: [usize; 4],
    image: Slot<4>,
    graph: Recording<Encoded>,
}

struct DecodeGraph {
    /// Batch, tokens and width of each view's encoder output, and the token grid.
    key: ([usize; 3], [usize; 3], [usize; 2]),
    feats: [Slot<3>; 2],
    graph: Recording<[Prediction; 2]>,
}

/// The network's per-frame work, recorded per input size and replayed.
pub struct Replayer {
    model: Arc<Mast3r>,
    encoders: Vec<EncodeGraph>,
    decoders: Vec<DecodeGraph>,
    /// The thread the recordings were made on.
    thread: Option<ThreadId>,
}

impl std::fmt::Debug for Replayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replayer")
            .field("encoders", &self.encoders.len())
            .field("decoders", &self.decoders.len())
            .field("hardware", &self.is_hardware())
            .finish()
    }
}

impl Replayer {
    /// Records nothing yet: each input size is recorded on first use (three warm-up runs and
    /// one recorded run).
    pub fn new(model: Arc<Mast3r>) -> Self {
        Replayer {
            model,
            encoders: Vec::new(),
            decoders: Vec::new(),
            thread: None,
        }
    }

    /// Drops the recordings when called from another thread than the one that made them: their
    /// replays would not be ordered with this thread's input refreshes and reads.
    fn same_thread(&mut self) {
        let now = std::thread::current().id();
        if self.thread != Some(now) {
            self.encoders.clear();
            self.decoders.clear();
            self.thread = Some(now);
        }
    }

    /// The network.
    pub fn model(&self) -> &Mast3r {
        &self.model
    }

    /// Whether every recording so far replays as one hardware dispatch (false where the backend
    /// re-runs the network instead, or before anything was recorded).
    pub fn is_hardware(&self) -> bool {
        let n = self.encoders.len() + self.decoders.len();
        n > 0
            && self.encoders.iter().all(|g| g.graph.is_hardware())
            && self.decoders.iter().all(|g| g.graph.is_hardware())
    }

    /// [`Mast3r::encode`]. The encoding is a copy the caller may keep across later calls.
    pub fn encode(&mut self, img: Tensor<4>) -> Result<Encoded, String> {
        self.same_thread();
        let dims = img.dims();
        let i = match self.encoders.iter().position(|g| g.dims == dims) {
            Some(i) => {
                refresh(&self.encoders[i].image, img)?;
                i
            }
            None => {
                // A copy: the slot must hold the only handle on its buffer.
                let image = slot(copy(&img));
                let (model, input) = (self.model.clone(), image.clone());
                let closure: Closure<Encoded> = Box::new(move || model.encode(read(&input)));
                let graph = Recording::new(self.model.device(), closure);
                self.encoders.push(EncodeGraph { dims, image, graph });
                // A recording does not run its launches (CUDA): the replay below computes this
                // call's answer.
                self.encoders.len() - 1
            }
        };
        // Safety: the graph's buffers are the model's weights and RoPE tables (the model is
        // kept alive by the closure's `Arc`), the input slot (owned by the graph's entry) and
        // the graph's own output and intermediates (pinned by the recording); refreshes and
        // reads are on this device's stream, in order.
        let out = unsafe { self.encoders[i].graph.replay() }?;
        Ok(Encoded {
            feat: copy(&out.feat),
            grid: out.grid,
        })
    }

    /// [`Mast3r::decode`]. The predictions are the recording's output buffers: read them (or
    /// copy them) before the next call, which overwrites them; the borrow enforces it.
    pub fn decode(&mut self, a: &Encoded, b: &Encoded) -> Result<&[Prediction; 2], String> {
        self.same_thread();
        let key = (a.feat.dims(), b.feat.dims(), a.grid);
        if a.grid != b.grid {
            // Views of different sizes are rare (the pair front end refuses them): no recording.
            return Err(format!(
                "views of different token grids {:?} and {:?} are not recorded",
                a.grid, b.grid
            ));
        }
        let i = match self.decoders.iter().position(|g| g.key == key) {
            Some(i) => {
                let [sa, sb] = &self.decoders[i].feats;
                refresh(sa, a.feat.clone())?;
                refresh(sb, b.feat.clone())?;
                i
            }
            None => {
                // The slots hold copies: the caller's encodings stay theirs.
                let feats = [slot(copy(&a.feat)), slot(copy(&b.feat))];
                let (model, [fa, fb], grid) = (self.model.clone(), feats.clone(), a.grid);
                let closure: Closure<[Prediction; 2]> = Box::new(move || {
                    let ea = Encoded {
                        feat: read(&fa),
                        grid,
                    };
                    let eb = Encoded {
                        feat: read(&fb),
                        grid,
                    };
                    model.decode(&ea, &eb)
                });
                let graph = Recording::new(self.model.device(), closure);
                self.decoders.push(DecodeGraph { key, feats, graph });
                self.decoders.len() - 1
            }
        };
        // Safety: as in `encode`.
        unsafe { self.decoders[i].graph.replay() }
    }

    /// [`Mast3r::mono`]: the frame decoded with itself.
    pub fn mono(&mut self, a: &Encoded) -> Result<&[Prediction; 2], String> {
        self.decode(a, a)
    }
}
