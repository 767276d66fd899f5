//! The command line: what to simulate.

use super::common::{flag_value, parse_flags};

/// What to simulate.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Config {
    /// Requests the client sends.
    pub(crate) requests: u32,
    /// Requests per second, spread evenly.
    pub(crate) rate_per_s: u32,
    /// Threads of the service's pool, which runs the request work and the timeouts.
    pub(crate) threads: usize,
    /// How long a request may take before it is answered with a timeout.
    pub(crate) deadline_ms: i64,
    /// A request's work takes from 0 to this, uniformly.
    pub(crate) work_max_ms: u64,
    /// The timer's `max_in_flight`: timeouts handed to the pool and not finished (0: no
    /// bound).
    pub(crate) max_in_flight: usize,
    /// Seed of the work's durations.
    pub(crate) seed: u64,
    /// Print a progress line on stderr while running.
    pub(crate) progress: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            requests: 3_000,
            rate_per_s: 1_500,
            threads: 8,
            deadline_ms: 5,
            work_max_ms: 8,
            max_in_flight: 4,
            seed: 42,
            progress: true,
        }
    }
}

/// What the command line asked for.
pub(crate) type Command = super::common::Command<Config>;

pub(crate) const USAGE: &str = "\
Simulates a service that runs its request work and its request timeouts on one
threadpool::ThreadPool (SystemTimerBuilder::threadpool): each request is answered once,
by its response (which cancels its timeout) or by its timeout, whichever comes first.

Usage: shared_pool [OPTIONS]

Options:
  --requests N          requests the client sends                          [3000]
  --rate N              requests per second                                [1500]
  --threads N           threads of the shared pool                         [8]
  --deadline-ms MS      a request's timeout                                [5]
  --work-max-ms MS      a request's work takes 0 to this, uniformly        [8]
  --max-in-flight N     timeouts on the pool at once, at most (0: no bound) [4]
  --seed N              random seed                                        [42]
  --no-progress         no progress line on stderr
  -h, --help            print this help

Exit code: 0 if every request was answered exactly once, every timeout ran or was
cancelled exactly once, none before its deadline, and the timer was left with nothing; 1
if not; 2 on a bad command line.";

/// Parses the command line (without the program name). Accepts `--flag value` and
/// `--flag=value`.
pub(crate) fn parse_args(args: impl IntoIterator<Item = String>) -> Result<Command, String> {
    let mut config = Config::default();
    let run = parse_flags(args, |flag, value| {
        match flag {
            "--requests" => config.requests = flag_value(flag, value())?,
            "--rate" => config.rate_per_s = flag_value(flag, value())?,
            "--threads" => config.threads = flag_value(flag, value())?,
            "--deadline-ms" => config.deadline_ms = flag_value(flag, value())?,
            "--work-max-ms" => config.work_max_ms = flag_value(flag, value())?,
            "--max-in-flight" => config.max_in_flight = flag_value(flag, value())?,
            "--seed" => config.seed = flag_value(flag, value())?,
            "--no-progress" => config.progress = false,
            other => return Err(format!("unknown argument {other:?}")),
        }
        Ok(())
    })?;
    if !run {
        return Ok(Command::Help);
    }
    let positive = [
        ("--requests", config.requests == 0),
        ("--rate", config.rate_per_s == 0),
        ("--threads", config.threads == 0),
        ("--deadline-ms", config.deadline_ms <= 0),
    ];
    if let Some((flag, _)) = positive.iter().find(|(_, bad)| *bad) {
        return Err(format!("{flag} must be positive"));
    }
    Ok(Command::Run(config))
}
