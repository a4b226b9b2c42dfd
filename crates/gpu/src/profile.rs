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
    window: Option<cubecl::client::ProfileWindow>,
    phases: BTreeMap<&'static str, (f64, u64)>,
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
    S.get_or_init(|| Mutex::new(State { last: None, window: None, phases: BTreeMap::new() }))
}

/// Start timing from now (the next mark's phase begins here).
pub fn start(gpu: &Gpu) {
    if enabled() {
        let _ = gpu.sync();
        let mut s = state().lock().unwrap();
        s.last = Some(Instant::now());
        if device_time() {
            if let Some(w) = s.window.take() {
                gpu.client().profile_abandon(w);
            }
            s.window = gpu.client().profile_start().ok();
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

/// Charge the device time since the last mark to `phase`.
pub fn mark(gpu: &Gpu, phase: &'static str) {
    if !enabled() {
        return;
    }
    if device_time() {
        let mut s = state().lock().unwrap();
        let Some(window) = s.window.take() else { return };
        let seconds = gpu
            .client()
            .profile_end(window)
            .ok()
            .and_then(|d| cubecl::future::block_on(d.resolve()))
            .map(|t| t.duration().as_secs_f64());
        if let Some(t) = seconds {
            let e = s.phases.entry(phase).or_insert((0.0, 0));
            e.0 += t;
            e.1 += 1;
        }
        s.window = gpu.client().profile_start().ok();
        return;
    }
    let _ = gpu.sync();
    let now = Instant::now();
    let mut s = state().lock().unwrap();
    if let Some(last) = s.last {
        let e = s.phases.entry(phase).or_insert((0.0, 0));
        e.0 += (now - last).as_secs_f64();
        e.1 += 1;
    }
    s.last = Some(now);
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
        out.push_str(&format!("{k} | {n} | {t:.3} | {:.3} | {:.1}%\n", t * 1e3 / *n as f64, 100.0 * t / total.max(1e-12)));
    }
    Some(out)
}
