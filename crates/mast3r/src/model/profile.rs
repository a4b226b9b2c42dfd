//! Opt-in phase timing of the network: with `RUST3R_PROFILE=1`, [`mark`] waits for the device and
//! charges the time since the previous mark to a named phase; [`report`] returns the totals.
//! Without the variable nothing waits, so the marks stay in the forward pass.

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use burn::tensor::Device;

struct State {
    last: Option<Instant>,
    phases: BTreeMap<&'static str, (f64, u64)>,
}

/// Whether `RUST3R_PROFILE` is set (and not `0`).
pub fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("RUST3R_PROFILE").is_ok_and(|v| v != "0"))
}

fn state() -> &'static Mutex<State> {
    static S: OnceLock<Mutex<State>> = OnceLock::new();
    S.get_or_init(|| {
        Mutex::new(State {
            last: None,
            phases: BTreeMap::new(),
        })
    })
}

/// Charges the device time since the previous mark (or start) to `phase`.
pub(crate) fn mark(device: &Device, phase: &'static str) {
    if !enabled() {
        return;
    }
    let _ = device.sync();
    let now = Instant::now();
    let mut s = state().lock().unwrap_or_else(|e| e.into_inner());
    if let Some(last) = s.last {
        let e = s.phases.entry(phase).or_insert((0.0, 0));
        e.0 += (now - last).as_secs_f64();
        e.1 += 1;
    }
    s.last = Some(now);
}

/// Starts a new phase interval now.
pub(crate) fn start(device: &Device) {
    if enabled() {
        let _ = device.sync();
        state().lock().unwrap_or_else(|e| e.into_inner()).last = Some(Instant::now());
    }
}

/// Total seconds and call count per phase since the last [`reset`].
pub fn report() -> BTreeMap<&'static str, (f64, u64)> {
    state()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .phases
        .clone()
}

/// Clears the totals.
pub fn reset() {
    let mut s = state().lock().unwrap_or_else(|e| e.into_inner());
    s.phases.clear();
    s.last = None;
}
