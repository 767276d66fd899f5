//! What the examples share: their `main`, their command lines and pieces of their reports;
//! nothing of the timer.

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
    let groups: Vec<&str> = (digits.as_bytes().rchunks(3).rev())
        .map(|group| std::str::from_utf8(group).expect("a number's digits are ASCII"))
        .collect();
    groups.join(",")
}

/// The process's peak resident set size in KiB (`VmHWM` in `/proc/self/status`), where
/// there is one (Linux).
pub(crate) fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// A size in KiB as `236.1 MiB`, or `n/a` where there is none.
pub(crate) fn mib(kib: Option<u64>) -> String {
    kib.map_or_else(
        || "n/a".to_owned(),
        |kib| format!("{:.1} MiB", kib as f64 / 1024.0),
    )
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

/// Walks a command line (without the program name) of `--flag value` and `--flag=value`
/// arguments, handing each flag to `on_flag` with a function that takes its value. Returns
/// `Ok(false)` as soon as `-h` or `--help` comes, else `Ok(true)` at the end, or the first
/// error of `on_flag`.
pub(crate) fn parse_flags(
    args: impl IntoIterator<Item = String>,
    mut on_flag: impl FnMut(&str, &mut dyn FnMut() -> Option<String>) -> Result<(), String>,
) -> Result<bool, String> {
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let (flag, mut inline) = match arg.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => {
                (flag.to_owned(), Some(value.to_owned()))
            }
            _ => (arg, None),
        };
        if flag == "-h" || flag == "--help" {
            return Ok(false);
        }
        on_flag(&flag, &mut || inline.take().or_else(|| args.next()))?;
    }
    Ok(true)
}

/// What a command line asked for: a run with its configuration, or the help.
#[derive(Debug, PartialEq)]
pub(crate) enum Command<C> {
    Run(C),
    Help,
}

/// The `main` of every example: parses the command line with `parse`, prints `usage` for
/// `--help` (exit code 0) or after a bad command line (2), else runs the simulation with
/// `run`, prints the report it returns, and exits with 1 if its invariant (the returned
/// flag) failed.
pub(crate) fn example_main<C>(
    name: &str,
    usage: &str,
    parse: impl FnOnce(Vec<String>) -> Result<Command<C>, String>,
    run: impl FnOnce(&C) -> (String, bool),
) {
    let config = match parse(std::env::args().skip(1).collect()) {
        Ok(Command::Run(config)) => config,
        Ok(Command::Help) => {
            println!("{usage}");
            return;
        }
        Err(message) => {
            eprintln!("{name}: {message}\n\n{usage}");
            std::process::exit(2);
        }
    };
    let (report, invariant_holds) = run(&config);
    print!("{report}");
    if !invariant_holds {
        std::process::exit(1);
    }
}
