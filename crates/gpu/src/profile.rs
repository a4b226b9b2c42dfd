//! Opt-in phase timing, one profiler per opened device ([`crate::Gpu::profiler`], its mode from
//! [`crate::GpuTuning::profile`]). With [`ProfileMode::Host`], [`mark`] waits for the device and
//! charges the time since the previous mark to a named phase; [`Profiler::report`] gives the
//! totals. With [`ProfileMode::Device`] a phase is the device's own time between the marks
//! (CubeCL's profiling windows: timestamp queries through wgpu, events through CUDA), which
//! leaves out the host's waits; a phase in which the device ran nothing has no measurement and
//! is not counted. Off, `mark` does nothing (no device wait), so it can stay in hot paths.
//!
//! Code that holds a Burn device rather than a [`Gpu`] (the MASt3R network) times host
//! intervals through [`Profiler::start_with`] / [`Profiler::mark_with`] and its own sync.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use crate::Gpu;
use crate::tuning::ProfileMode;

#[derive(Default)]
struct State {
    last: Option<Instant>,
    laps: Option<DeviceLaps>,
    phases: BTreeMap<&'static str, (f64, u64)>,
}

/// Device time between consecutive laps, through CubeCL's profiling windows (timestamp queries
/// through wgpu, events through CUDA): what the device spent, without the host's waits.
pub struct DeviceLaps(Option<cubecl::client::ProfileWindow>);

impl DeviceLaps {
    /// Open the first window at the current position of `gpu`'s queue.
    pub fn start(gpu: &Gpu) -> Self {
        Self(gpu.client().profile_start().ok())
    }

    /// Seconds of device time since [`DeviceLaps::start`] or the previous lap (waiting for the
    /// device to answer), and the next window opened; `None` when the window carried no
    /// measurement (the device ran nothing in it) or the backend refused one.
    pub fn lap(&mut self, gpu: &Gpu) -> Option<f64> {
        let seconds = self
            .0
            .take()
            .and_then(|w| gpu.client().profile_end(w).ok())
            .and_then(|d| cubecl::future::block_on(d.resolve()))
            .map(|t| t.duration().as_secs_f64());
        self.0 = gpu.client().profile_start().ok();
        seconds
    }

    /// Close the open window without measuring it.
    pub fn stop(self, gpu: &Gpu) {
        if let Some(w) = self.0 {
            gpu.client().profile_abandon(w);
        }
    }
}

/// Per-phase totals. Cheap to clone; clones share the totals.
#[derive(Clone, Default)]
pub struct Profiler {
    mode: ProfileMode,
    state: Arc<Mutex<State>>,
}

impl std::fmt::Debug for Profiler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Profiler")
            .field("mode", &self.mode)
            .finish()
    }
}

impl Profiler {
    pub fn new(mode: ProfileMode) -> Self {
        Self {
            mode,
            state: Default::default(),
        }
    }

    pub fn mode(&self) -> ProfileMode {
        self.mode
    }

    /// Whether marks measure anything.
    pub fn enabled(&self) -> bool {
        self.mode != ProfileMode::Off
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Start timing from now on `gpu` (the next mark's phase begins here).
    pub fn start(&self, gpu: &Gpu) {
        match self.mode {
            ProfileMode::Off => {}
            ProfileMode::Host => self.start_with(|| drop(gpu.sync())),
            ProfileMode::Device => {
                let _ = gpu.sync();
                let mut s = self.state();
                s.last = Some(Instant::now());
                if let Some(laps) = s.laps.take() {
                    laps.stop(gpu);
                }
                s.laps = Some(DeviceLaps::start(gpu));
            }
        }
    }

    /// Charge the time since the last mark on `gpu` (device time in [`ProfileMode::Device`])
    /// to `phase`.
    pub fn mark(&self, gpu: &Gpu, phase: &'static str) {
        match self.mode {
            ProfileMode::Off => {}
            ProfileMode::Host => self.mark_with(|| drop(gpu.sync()), phase),
            ProfileMode::Device => {
                let seconds = {
                    let mut s = self.state();
                    let Some(laps) = s.laps.as_mut() else { return };
                    laps.lap(gpu)
                };
                if let Some(t) = seconds {
                    self.charge(phase, t);
                }
            }
        }
    }

    /// Start a host interval now, after `sync` waited for the device (any mode but off).
    pub fn start_with(&self, sync: impl FnOnce()) {
        if self.enabled() {
            sync();
            self.state().last = Some(Instant::now());
        }
    }

    /// Charge the host time since the last start or mark to `phase`, after `sync` waited for
    /// the device (any mode but off).
    pub fn mark_with(&self, sync: impl FnOnce(), phase: &'static str) {
        if !self.enabled() {
            return;
        }
        sync();
        let now = Instant::now();
        let last = self.state().last.replace(now);
        if let Some(last) = last {
            self.charge(phase, (now - last).as_secs_f64());
        }
    }

    fn charge(&self, phase: &'static str, seconds: f64) {
        let mut s = self.state();
        let e = s.phases.entry(phase).or_insert((0.0, 0));
        e.0 += seconds;
        e.1 += 1;
    }

    /// Forget the totals gathered so far (e.g. after warm-up iterations).
    pub fn reset(&self) {
        let mut s = self.state();
        s.phases.clear();
        s.last = None;
    }

    /// Total seconds and call count per phase since the last [`Profiler::reset`].
    pub fn phases(&self) -> BTreeMap<&'static str, (f64, u64)> {
        self.state().phases.clone()
    }

    /// Per-phase totals and means as a table, or `None` when profiling is off.
    pub fn report(&self) -> Option<String> {
        if !self.enabled() {
            return None;
        }
        let phases = self.phases();
        let total: f64 = phases.values().map(|v| v.0).sum();
        let mut out = String::from("phase | calls | total s | mean ms | share\n");
        for (k, (t, n)) in &phases {
            out.push_str(&format!(
                "{k} | {n} | {t:.3} | {:.3} | {:.1}%\n",
                t * 1e3 / *n as f64,
                100.0 * t / total.max(1e-12)
            ));
        }
        Some(out)
    }
}

/// [`Profiler::start`] on `gpu`'s own profiler.
pub fn start(gpu: &Gpu) {
    gpu.profiler().start(gpu);
}

/// [`Profiler::mark`] on `gpu`'s own profiler.
pub fn mark(gpu: &Gpu, phase: &'static str) {
    gpu.profiler().mark(gpu, phase);
}
