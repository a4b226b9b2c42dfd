//! Progress bars: indicatif's bar on a terminal; elsewhere (CI logs, `nohup`, a pipe) a plain
//! line on stderr every few seconds, where indicatif alone would print nothing.

use std::io::{IsTerminal, Write};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle, TermLike};

/// Time between two progress lines when stderr is not a terminal.
pub const LOG_INTERVAL: Duration = Duration::from_secs(5);

/// A bar over `len` units on stderr: drawn in place on a terminal, a plain line every
/// [`LOG_INTERVAL`] otherwise. Style it with [`style`].
pub fn bar(len: u64) -> ProgressBar {
    if std::io::stderr().is_terminal() {
        ProgressBar::new(len)
    } else {
        // One draw a second at most; `LogLines` keeps one every `LOG_INTERVAL`.
        let target = ProgressDrawTarget::term_like_with_hz(
            Box::new(LogLines::new(Box::new(std::io::stderr()), LOG_INTERVAL)),
            1,
        );
        ProgressBar::with_draw_target(Some(len), target)
    }
}

/// `template` on a terminal; without a terminal the same without the `{bar:N}` gauge, after the
/// elapsed time, so each log line reads `[00:01:05] 120/2000 3.1/s loss ...`.
pub fn style(template: &str) -> ProgressStyle {
    let template = if std::io::stderr().is_terminal() {
        template.to_string()
    } else {
        log_template(template)
    };
    ProgressStyle::with_template(&template).expect("valid template")
}

fn log_template(template: &str) -> String {
    let mut words: Vec<&str> = template
        .split(' ')
        .filter(|w| !(w.is_empty() || w.starts_with("{bar") || w.starts_with("{wide_bar")))
        .collect();
    words.insert(0, "[{elapsed_precise}]");
    words.join(" ")
}

/// A [`TermLike`] that turns indicatif's redraws into whole lines and writes at most one every
/// `interval` (the first at once).
struct LogLines {
    out: Mutex<Box<dyn Write + Send>>,
    interval: Duration,
    state: Mutex<LogState>,
}

#[derive(Default)]
struct LogState {
    /// The line being drawn.
    line: String,
    last: Option<Instant>,
}

impl LogLines {
    fn new(out: Box<dyn Write + Send>, interval: Duration) -> Self {
        Self {
            out: Mutex::new(out),
            interval,
            state: Mutex::new(LogState::default()),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, LogState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl std::fmt::Debug for LogLines {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogLines")
            .field("interval", &self.interval)
            .finish()
    }
}

impl TermLike for LogLines {
    fn width(&self) -> u16 {
        // Wide enough that indicatif never cuts a line; its padding is trimmed.
        1000
    }
    fn move_cursor_up(&self, _: usize) -> std::io::Result<()> {
        Ok(())
    }
    fn move_cursor_down(&self, _: usize) -> std::io::Result<()> {
        Ok(())
    }
    fn move_cursor_right(&self, _: usize) -> std::io::Result<()> {
        Ok(())
    }
    fn move_cursor_left(&self, _: usize) -> std::io::Result<()> {
        Ok(())
    }
    fn write_line(&self, s: &str) -> std::io::Result<()> {
        let mut st = self.state();
        st.line.push_str(s);
        st.line.push(' ');
        Ok(())
    }
    fn write_str(&self, s: &str) -> std::io::Result<()> {
        self.state().line.push_str(s);
        Ok(())
    }
    fn clear_line(&self) -> std::io::Result<()> {
        self.state().line.clear();
        Ok(())
    }
    fn flush(&self) -> std::io::Result<()> {
        let mut st = self.state();
        let line = std::mem::take(&mut st.line);
        let line = line.trim_matches(|c: char| c.is_whitespace());
        let now = Instant::now();
        if line.is_empty() || st.last.is_some_and(|t| now - t < self.interval) {
            return Ok(());
        }
        st.last = Some(now);
        let mut out = self.out.lock().unwrap_or_else(|e| e.into_inner());
        writeln!(out, "{line}")?;
        out.flush()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

    use super::{LogLines, log_template};

    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Sink {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// Drives a bar of 10 steps to the end on a log target; the lines it wrote.
    fn run(interval: Duration) -> Vec<String> {
        let sink = Sink::default();
        let target = ProgressDrawTarget::term_like(Box::new(LogLines::new(
            Box::new(sink.clone()),
            interval,
        )));
        let bar = ProgressBar::with_draw_target(Some(10), target);
        let template = log_template("{bar:30} step {pos}/{len} {msg}");
        bar.set_style(ProgressStyle::with_template(&template).unwrap());
        for step in 0..10 {
            bar.set_message(format!("loss {step}"));
            bar.set_position(step);
            // An information line printed around the bar, as `TrainPrinter` does.
            bar.suspend(|| {});
        }
        bar.finish();
        let text = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
        text.lines().map(str::to_string).collect()
    }

    #[test]
    fn log_lines_are_plain_whole_lines() {
        let lines = run(Duration::ZERO);
        // Every redraw is a line of its own, without the gauge, padding or carriage returns.
        assert!(lines.len() >= 10, "{lines:?}");
        for step in 1..10 {
            let want = format!("] step {step}/10 loss {step}");
            assert!(
                lines.iter().any(|l| l.ends_with(&want)),
                "no {want:?} in {lines:?}"
            );
        }
        for l in &lines {
            assert!(l.starts_with("[00:00:0"), "{l:?}");
            assert!(
                !l.contains('\r') && !l.contains('█') && l.trim() == l,
                "{l:?}"
            );
        }
    }

    #[test]
    fn log_lines_keep_one_line_per_interval() {
        // The first draw is written at once; the rest fall within the interval.
        let lines = run(Duration::from_secs(3600));
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(lines[0].ends_with("] step 0/10 loss 0"), "{lines:?}");
    }

    #[test]
    fn log_template_drops_the_gauge() {
        assert_eq!(
            log_template("{bar:30} frame {pos}/{len} {msg}"),
            "[{elapsed_precise}] frame {pos}/{len} {msg}"
        );
        assert_eq!(
            log_template("slam  {bar:30} frame {pos}/{len} {msg}"),
            "[{elapsed_precise}] slam frame {pos}/{len} {msg}"
        );
    }
}
