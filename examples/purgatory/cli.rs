//! The example's command line.

use super::common::{flag_value, parse_flags};

/// What to simulate.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Config {
    /// Produce requests to send.
    pub(crate) requests: usize,
    /// Requests per second the producer offers.
    pub(crate) rate: u32,
    /// Partitions of the topic.
    pub(crate) partitions: usize,
    /// How long a request waits for its acknowledgements (the request timeout).
    pub(crate) timeout_ms: i64,
    /// The slow replica lags on every this-many-th partition.
    pub(crate) slow_every: usize,
    /// How often the slow replica fetches the partitions it lags on.
    pub(crate) slow_fetch_ms: u64,
    /// Seed of the partition each request goes to.
    pub(crate) seed: u64,
    /// Print a progress line on stderr while running.
    pub(crate) progress: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            requests: 200_000,
            rate: 100_000,
            partitions: 64,
            timeout_ms: 500,
            slow_every: 16,
            slow_fetch_ms: 800,
            seed: 42,
            progress: true,
        }
    }
}

/// What the command line asked for.
pub(crate) type Command = super::common::Command<Config>;

pub(crate) const USAGE: &str = "\
Simulates a broker's produce purgatory: acks=all requests wait until the 3 replicas of
their partition have their offset, or time out.

Usage: purgatory [OPTIONS]

Options:
  --requests N        produce requests to send                        [200000]
  --rate N            requests per second offered                     [100000]
  --partitions N      partitions of the topic                         [64]
  --timeout-ms MS     request timeout                                 [500]
  --slow-every N      replica 3 lags on every N-th partition          [16]
  --slow-fetch-ms MS  ...where it fetches only this often             [800]
  --seed N            random seed                                     [42]
  --no-progress       no progress line on stderr
  -h, --help          print this help

Exit code: 0 if every request was answered exactly once and none expired before its
timeout, 1 if not, 2 on a bad command line.";

/// Parses the command line (without the program name): `--flag value` or `--flag=value`.
pub(crate) fn parse_args(args: impl IntoIterator<Item = String>) -> Result<Command, String> {
    let mut config = Config::default();
    let run = parse_flags(args, |flag, value| {
        match flag {
            "--no-progress" => config.progress = false,
            "--requests" => config.requests = flag_value(flag, value())?,
            "--rate" => config.rate = flag_value(flag, value())?,
            "--partitions" => config.partitions = flag_value(flag, value())?,
            "--timeout-ms" => config.timeout_ms = flag_value(flag, value())?,
            "--slow-every" => config.slow_every = flag_value(flag, value())?,
            "--slow-fetch-ms" => config.slow_fetch_ms = flag_value(flag, value())?,
            "--seed" => config.seed = flag_value(flag, value())?,
            other => return Err(format!("unknown argument {other:?}")),
        }
        Ok(())
    })?;
    if !run {
        return Ok(Command::Help);
    }
    let positive = [
        ("--rate", config.rate as u64),
        ("--partitions", config.partitions as u64),
        ("--timeout-ms", config.timeout_ms.max(0) as u64),
        ("--slow-every", config.slow_every as u64),
    ];
    match positive.iter().find(|(_, value)| *value == 0) {
        Some((flag, _)) => Err(format!("{flag} must be positive")),
        None => Ok(Command::Run(config)),
    }
}
