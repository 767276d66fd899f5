//! The command line: what to simulate.

use super::common::{flag_value, parse_flags};

/// What to simulate.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Config {
    /// Members of the group.
    pub(crate) members: u32,
    /// How often a live member heartbeats.
    pub(crate) heartbeat_ms: u32,
    /// How long the coordinator waits for a heartbeat before the session expires.
    pub(crate) session_timeout_ms: u32,
    /// Share of members that stop heartbeating (after 0 to 2 heartbeats).
    pub(crate) stop_ratio: f64,
    /// Worker threads that handle the expiries.
    pub(crate) workers: usize,
    /// The timer's tick.
    pub(crate) tick_ms: i64,
    /// The timer's wheel size.
    pub(crate) wheel_size: usize,
    /// Seed of which members stop, and when.
    pub(crate) seed: u64,
    /// Print a progress line on stderr while running.
    pub(crate) progress: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            members: 1_000_000,
            heartbeat_ms: 3_000,
            session_timeout_ms: 10_000,
            stop_ratio: 0.01,
            workers: 4,
            tick_ms: 1,
            wheel_size: 20,
            seed: 42,
            progress: true,
        }
    }
}

/// What the command line asked for.
pub(crate) type Command = super::common::Command<Config>;

pub(crate) const USAGE: &str = "\
Simulates a group coordinator's member sessions: every member heartbeats, and each
heartbeat starts its session timeout again (KeyedTimer::reschedule of the member's id);
the members that stop heartbeating expire once, as messages (send_task) to worker threads.

Usage: sessions [OPTIONS]

Options:
  --members N              members of the group                       [1000000]
  --heartbeat-ms MS        heartbeat interval of a live member        [3000]
  --session-timeout-ms MS  session timeout                            [10000]
  --stop-ratio R           share of members that stop heartbeating    [0.01]
  --workers N              threads that handle the expiries           [4]
  --tick-ms MS             timer tick                                 [1]
  --wheel-size N           buckets per timing wheel                   [20]
  --seed N                 random seed                                [42]
  --no-progress            no progress line on stderr
  -h, --help               print this help

Exit code: 0 if every member that stopped expired exactly once, no live member expired,
none early, and exactly the live members' timeouts are left; 1 if not; 2 on a bad
command line.";

/// Parses the command line (without the program name). Accepts `--flag value` and
/// `--flag=value`.
pub(crate) fn parse_args(args: impl IntoIterator<Item = String>) -> Result<Command, String> {
    let mut config = Config::default();
    let run = parse_flags(args, |flag, value| {
        match flag {
            "--members" => config.members = flag_value(flag, value())?,
            "--heartbeat-ms" => config.heartbeat_ms = flag_value(flag, value())?,
            "--session-timeout-ms" => config.session_timeout_ms = flag_value(flag, value())?,
            "--stop-ratio" => config.stop_ratio = flag_value(flag, value())?,
            "--workers" => config.workers = flag_value(flag, value())?,
            "--tick-ms" => config.tick_ms = flag_value(flag, value())?,
            "--wheel-size" => config.wheel_size = flag_value(flag, value())?,
            "--seed" => config.seed = flag_value(flag, value())?,
            "--no-progress" => config.progress = false,
            other => return Err(format!("unknown argument {other:?}")),
        }
        Ok(())
    })?;
    if !run {
        return Ok(Command::Help);
    }
    check(&config)?;
    Ok(Command::Run(config))
}

/// Refuses a configuration the simulation cannot run as described.
fn check(config: &Config) -> Result<(), String> {
    let positive = [
        ("--members", config.members == 0),
        ("--heartbeat-ms", config.heartbeat_ms == 0),
        ("--workers", config.workers == 0),
        ("--tick-ms", config.tick_ms <= 0),
        ("--wheel-size", config.wheel_size == 0),
    ];
    if let Some((flag, _)) = positive.iter().find(|(_, bad)| *bad) {
        return Err(format!("{flag} must be positive"));
    }
    if config.session_timeout_ms <= config.heartbeat_ms {
        return Err(format!(
            "--session-timeout-ms ({}) must be above --heartbeat-ms ({}): live members would expire",
            config.session_timeout_ms, config.heartbeat_ms
        ));
    }
    if !(0.0..=1.0).contains(&config.stop_ratio) {
        return Err(format!(
            "--stop-ratio must be within 0..=1, got {}",
            config.stop_ratio
        ));
    }
    Ok(())
}
