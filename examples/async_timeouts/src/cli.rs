//! The example's command line.

use super::common::{flag_value, parse_flags};

/// What to simulate.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Config {
    /// Requests the clients send, in all.
    pub(crate) requests: usize,
    /// Requests in flight at once (one client task each).
    pub(crate) in_flight: usize,
    /// Backends the requests are spread over, uniformly.
    pub(crate) backends: usize,
    /// Percentage of the backends that are slow.
    pub(crate) slow_percent: usize,
    /// The timeout of every request.
    pub(crate) timeout_ms: i64,
    /// A fast backend answers in 1 ms to this.
    pub(crate) fast_max_ms: i64,
    /// A slow backend answers in this many ms, or up to twice as many.
    pub(crate) slow_min_ms: i64,
    /// Worker threads of the tokio runtime (0: one per core).
    pub(crate) workers: usize,
    /// Seed of each request's backend and latency.
    pub(crate) seed: u64,
    /// Print a progress line on stderr while running.
    pub(crate) progress: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            requests: 1_000_000,
            in_flight: 5_000,
            backends: 100,
            slow_percent: 5,
            timeout_ms: 100,
            fast_max_ms: 20,
            slow_min_ms: 200,
            workers: 0,
            seed: 42,
            progress: true,
        }
    }
}

/// What the command line asked for.
pub(crate) type Command = super::common::Command<Config>;

pub(crate) const USAGE: &str = "\
A tokio service that answers each request from one of its backends, under a timeout that
runs on timingwheel's wheel; some backends are slow.

Usage: async_timeouts [OPTIONS]

Options:
  --requests N        requests to answer                               [1000000]
  --in-flight N       requests in flight at once                       [5000]
  --backends N        backends the requests are spread over            [100]
  --slow-percent P    percentage of the backends that are slow         [5]
  --timeout-ms MS     every request's timeout                          [100]
  --fast-max-ms MS    a fast backend answers in 1..=MS ms              [20]
  --slow-min-ms MS    a slow backend answers in MS..=2*MS ms           [200]
  --workers N         tokio worker threads, 0 for one per core         [0]
  --seed N            random seed                                      [42]
  --no-progress       no progress line on stderr
  -h, --help          print this help

Exit code: 0 if every request was answered exactly once (by its backend or by its
timeout) and none timed out before its timeout, 1 if not, 2 on a bad command line.";

/// Parses the command line (without the program name): `--flag value` or `--flag=value`.
pub(crate) fn parse_args(args: impl IntoIterator<Item = String>) -> Result<Command, String> {
    let mut config = Config::default();
    let run = parse_flags(args, |flag, value| {
        match flag {
            "--no-progress" => config.progress = false,
            "--requests" => config.requests = flag_value(flag, value())?,
            "--in-flight" => config.in_flight = flag_value(flag, value())?,
            "--backends" => config.backends = flag_value(flag, value())?,
            "--slow-percent" => config.slow_percent = flag_value(flag, value())?,
            "--timeout-ms" => config.timeout_ms = flag_value(flag, value())?,
            "--fast-max-ms" => config.fast_max_ms = flag_value(flag, value())?,
            "--slow-min-ms" => config.slow_min_ms = flag_value(flag, value())?,
            "--workers" => config.workers = flag_value(flag, value())?,
            "--seed" => config.seed = flag_value(flag, value())?,
            other => return Err(format!("unknown argument {other:?}")),
        }
        Ok(())
    })?;
    if !run {
        return Ok(Command::Help);
    }
    let positive = [
        ("--in-flight", config.in_flight as i64),
        ("--backends", config.backends as i64),
        ("--timeout-ms", config.timeout_ms),
        ("--fast-max-ms", config.fast_max_ms),
        ("--slow-min-ms", config.slow_min_ms),
    ];
    if let Some((flag, _)) = positive.iter().find(|(_, value)| *value <= 0) {
        return Err(format!("{flag} must be positive"));
    }
    if config.slow_percent > 100 {
        return Err(format!(
            "--slow-percent must be at most 100, got {}",
            config.slow_percent
        ));
    }
    Ok(Command::Run(config))
}
