//! What the examples share for their reports and command lines: nothing of the timer.

use std::fmt::Display;
use std::io::{IsTerminal, Write as _};
use std::str::FromStr;

/// Nearest-rank percentiles of a set of durations in microseconds, and how many there were.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Percentiles {
    pub(crate) count: usize,
    pub(crate) min_us: i64,
    pub(crate) p50_us: i64,
    pub(crate) p99_us: i64,
    pub(crate) max_us: i64,
}

impl Percentiles {
    /// Summarises `samples` (µs, any order); all zero if there are none.
    pub(crate) fn of(mut samples: Vec<i64>) -> Percentiles {
        samples.sort_unstable();
        let (Some(&min_us), Some(&max_us)) = (samples.first(), samples.last()) else {
            return Percentiles::default();
        };
        let rank = |p: usize| samples[(samples.len() * p).div_ceil(100).max(1) - 1];
        Percentiles {
            count: samples.len(),
            min_us,
            p50_us: rank(50),
            p99_us: rank(99),
            max_us,
        }
    }

    /// `p50 0.53 ms, p99 1.08 ms, max 4.70 ms (min 0.03 ms)`.
    pub(crate) fn describe(&self) -> String {
        let ms = |us: i64| us as f64 / 1e3;
        format!(
            "p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms (min {:.2} ms)",
            ms(self.p50_us),
            ms(self.p99_us),
            ms(self.max_us),
            ms(self.min_us)
        )
    }
}

/// A non-negative integer with thousands separators: `1234567` as `1,234,567`.
pub(crate) fn group(n: impl Display) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

/// The process's peak resident set size in KiB (`VmHWM` in `/proc/self/status`), where
/// there is one (Linux).
pub(crate) fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// A progress line on stderr: rewritten in place on a terminal, one line per update
/// otherwise.
pub(crate) struct ProgressLine {
    terminal: bool,
}

impl ProgressLine {
    pub(crate) fn new() -> ProgressLine {
        ProgressLine {
            terminal: std::io::stderr().is_terminal(),
        }
    }

    /// Shows `line`.
    pub(crate) fn show(&self, line: &str) {
        let mut err = std::io::stderr().lock();
        let _ = if self.terminal {
            write!(err, "\r{line}")
        } else {
            writeln!(err, "{line}")
        };
        let _ = err.flush();
    }

    /// Ends the line rewritten in place, so that what follows starts on a line of its own.
    pub(crate) fn finish(&self) {
        if self.terminal {
            let _ = writeln!(std::io::stderr());
        }
    }
}

/// Parses the value `raw` given to `flag`.
pub(crate) fn flag_value<T: FromStr>(flag: &str, raw: Option<String>) -> Result<T, String> {
    let raw = raw.ok_or_else(|| format!("{flag} needs a value"))?;
    raw.parse()
        .map_err(|_| format!("{flag}: cannot parse {raw:?}"))
}
