//! The parts of the examples' reports: the table at the end with the invariant's checks,
//! the figures in it, the progress line while a run goes, and the runs' random numbers.

use std::fmt::Display;
use std::io::{IsTerminal, Write as _};
use std::thread;
use std::time::{Duration, Instant};

/// The report a run prints: its title (what was simulated), a table of rows (label,
/// figure, note), paragraphs that explain them, and the invariant, a check a line.
pub(crate) struct Table {
    title: String,
    rows: Vec<[String; 3]>,
    notes: Vec<&'static str>,
    /// What the run shows, and whether that holds.
    checks: Vec<(String, bool)>,
}

impl Table {
    pub(crate) fn new(title: String) -> Table {
        let (rows, notes, checks) = (Vec::new(), Vec::new(), Vec::new());
        Table {
            title,
            rows,
            notes,
            checks,
        }
    }

    /// Adds a row: `label`, `figure` right-aligned with the others, then `note`.
    pub(crate) fn row(&mut self, label: impl Display, figure: impl Display, note: impl Display) {
        let row = [label.to_string(), figure.to_string(), note.to_string()];
        self.rows.push(row);
    }

    /// Adds a paragraph under the table.
    pub(crate) fn note(&mut self, text: &'static str) {
        self.notes.push(text);
    }

    /// Adds a check of the invariant: `what` the run shows, and whether that `holds`.
    pub(crate) fn check(&mut self, what: String, holds: bool) {
        self.checks.push((what, holds));
    }

    /// Whether every check holds: the invariant, and the exit code 0.
    pub(crate) fn holds(&self) -> bool {
        self.checks.iter().all(|(_, holds)| *holds)
    }

    /// The title, the table (the process's peak memory last), the notes, and each check
    /// with its verdict.
    pub(crate) fn render(mut self) -> String {
        let peak = peak_memory_kib().map(|kib| format!("{:.1} MiB", kib as f64 / 1024.0));
        let peak = peak.unwrap_or_else(|| "n/a".to_owned());
        self.row("peak memory of the process", peak, "");
        let width = |column: usize| self.rows.iter().map(|row| row[column].len()).max();
        let (labels, figures) = (width(0).unwrap_or(0), width(1).unwrap_or(0));
        let mut out = format!("{}\n\n", self.title);
        for [label, figure, note] in &self.rows {
            out += format!("{label:<labels$}  {figure:>figures$}  {note}").trim_end();
            out += "\n";
        }
        for note in &self.notes {
            out += &format!("\n{note}\n");
        }
        out += "\ninvariant\n";
        let verdict = |holds: bool| if holds { "ok" } else { "FAILED" };
        for (what, holds) in &self.checks {
            out += &format!("  {what}  {}\n", verdict(*holds));
        }
        out + &format!("  result: {}\n", verdict(self.holds()).to_uppercase())
    }
}

/// The process's peak resident set size in KiB (`VmHWM` in `/proc/self/status`), where
/// there is one (Linux).
fn peak_memory_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

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
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

/// `took` in seconds: `4.50 s`.
pub(crate) fn secs(took: Duration) -> String {
    format!("{:.2} s", took.as_secs_f64())
}

/// `n` operations in `took`: `1.34 M/s (748 ns per {what})`.
pub(crate) fn rate(n: u64, took: Duration, what: &str) -> String {
    let secs = took.as_secs_f64();
    let per_s = n as f64 / secs.max(1e-9);
    let ns = secs * 1e9 / n.max(1) as f64;
    format!("{:.2} M/s ({ns:.0} ns per {what})", per_s / 1e6)
}

/// The progress line on stderr while a run goes, at most five times a second, each
/// starting with the time since `start`: rewritten in place on a terminal, one line per
/// update otherwise; nothing with `--no-progress`.
pub(crate) struct Progress {
    start: Instant,
    /// Whether stderr is a terminal; `None` for no progress line.
    terminal: Option<bool>,
    shown: Option<Instant>,
}

impl Progress {
    pub(crate) fn new(enabled: bool, start: Instant) -> Progress {
        let terminal = enabled.then(|| std::io::stderr().is_terminal());
        Progress {
            start,
            terminal,
            shown: None,
        }
    }

    /// Shows `line()`, unless a line was shown less than 200 ms ago.
    pub(crate) fn tick(&mut self, line: impl FnOnce() -> String) {
        let due = self
            .shown
            .is_none_or(|at| at.elapsed() >= Duration::from_millis(200));
        if let Some(terminal) = self.terminal.filter(|_| due) {
            self.shown = Some(Instant::now());
            let line = format!("{:>6.2} s  {}", self.start.elapsed().as_secs_f64(), line());
            let mut err = std::io::stderr().lock();
            let _ = if terminal {
                write!(err, "\r{line}")
            } else {
                writeln!(err, "{line}")
            };
            let _ = err.flush();
        }
    }

    /// Shows the last `line()`, and ends the line rewritten in place.
    pub(crate) fn finish(mut self, line: impl FnOnce() -> String) {
        self.shown = None;
        self.tick(line);
        if self.terminal == Some(true) {
            eprintln!();
        }
    }

    /// Shows `line()` until `ended()`, then until `done()` or `patience` after that; a
    /// last time at the end.
    pub(crate) fn wait(
        mut self,
        patience: Duration,
        ended: impl Fn() -> bool,
        done: impl Fn() -> bool,
        line: impl Fn() -> String,
    ) {
        let mut ended_at: Option<Instant> = None;
        while !ended_at.is_some_and(|at| done() || at.elapsed() > patience) {
            thread::sleep(Duration::from_millis(1));
            self.tick(&line);
            if ended_at.is_none() && ended() {
                ended_at = Some(Instant::now());
            }
        }
        self.finish(line);
    }
}

/// Seeded random numbers (SplitMix64), so that a run repeats: `Rng::new(seed)` draws
/// `Rng::nth(seed, 0)`, `nth(seed, 1)`, ...; `nth` also serves choices made in any order.
pub(crate) struct Rng {
    seed: u64,
    drawn: u64,
}

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng { seed, drawn: 0 }
    }

    /// The `n`-th number drawn from `seed`.
    pub(crate) fn nth(seed: u64, n: u64) -> u64 {
        let mut z = seed.wrapping_add(n.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.drawn += 1;
        ((u128::from(Rng::nth(self.seed, self.drawn - 1)) * u128::from(n)) >> 64) as u64
    }

    /// Uniform in `[0, 1)`.
    pub(crate) fn unit(&mut self) -> f64 {
        self.drawn += 1;
        (Rng::nth(self.seed, self.drawn - 1) >> 11) as f64 / (1u64 << 53) as f64
    }
}
