//! Opt-in phase timing: with `RUST3R_PROFILE=1`, [`mark`] waits for the device and charges the
//! time since the previous mark to a named phase; [`report`] prints the totals. With
//! `RUST3R_PROFILE=device` a phase is the device's own time between the marks (CubeCL's
//! profiling windows: timestamp queries through wgpu, events through CUDA), which leaves out
//! the host's waits; a phase in which the device ran nothing has no measurement and is not
//! counted. Without the variable, `mark` does nothing (no device wait), so it can
//! stay in hot paths.

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use crate::Gpu;

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

fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("RUST3R_PROFILE").is_ok_and(|v| v != "0"))
}

fn device_time() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("RUST3R_PROFILE").is_ok_and(|v| v == "device"))
}

fn state() -> &'static Mutex<State> {
    static S: OnceLock<Mutex<State>> = OnceLock::new();
    S.get_or_init(|| {
        Mutex::new(State {
            last: None,
            laps: None,
            phases: BTreeMap::new(),
        })
    })
}

/// Start timing from now (the next mark's phase begins here).
pub fn start(gpu: &Gpu) {
    if enabled() {
        let _ = gpu.sync();
        let mut s = state().lock().unwrap();
        s.last = Some(Instant::now());
        if device_time() {
            if let Some(laps) = s.laps.take() {
                laps.stop(gpu);
            }
            s.laps = Some(DeviceLaps::start(gpu));
        }
    }
}

/// Forget the totals gathered so far (e.g. after warm-up iterations).
pub fn reset() {
    if enabled() {
        let mut s = state().lock().unwrap();
        s.phases.clear();
        s.last = None;
    }
}

/// Charge the time since the last mark (device time with `RUST3R_PROFILE=device`) to `phase`.
pub fn mark(gpu: &Gpu, phase: &'static str) {
    if !enabled() {
        return;
    }
    let seconds = if device_time() {
        let mut s = state().lock().unwrap();
        let Some(laps) = s.laps.as_mut() else { return };
        laps.lap(gpu)
    } else {
        let _ = gpu.sync();
        let now = Instant::now();
        let last = state().lock().unwrap().last.replace(now);
        last.map(|last| (now - last).as_secs_f64())
    };
    if let Some(t) = seconds {
        let mut s = state().lock().unwrap();
        let e = s.phases.entry(phase).or_insert((0.0, 0));
        e.0 += t;
        e.1 += 1;
    }
}

/// Per-phase totals and means, or `None` when profiling is off.
pub fn report() -> Option<String> {
    if !enabled() {
        return None;
    }
    let s = state().lock().unwrap();
    let total: f64 = s.phases.values().map(|v| v.0).sum();
    let mut out = String::from("phase | calls | total s | mean ms | share\n");
    for (k, (t, n)) in &s.phases {
        out.push_str(&format!(
            "{k} | {n} | {t:.3} | {:.3} | {:.1}%\n",
            t * 1e3 / *n as f64,
            100.0 * t / total.max(1e-12)
        ));
    }
    Some(out)
}
