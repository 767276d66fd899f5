//! The command line: what to simulate.

use super::common::{flag_value, parse_flags};

/// What to simulate.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Config {
    /// Orders to create.
    pub(crate) orders: u32,
    /// Shortest payment deadline, from the order's creation.
    pub(crate) deadline_min_ms: u32,
    /// Longest payment deadline (deadlines are uniform in min..=max).
    pub(crate) deadline_max_ms: u32,
    /// Share of orders that are paid (at a uniform moment before their deadline).
    pub(crate) pay_ratio: f64,
    /// The timer's tick.
    pub(crate) tick_ms: i64,
    /// The timer's wheel size.
    pub(crate) wheel_size: usize,
    /// Seed of the random deadlines, quantities and payment moments.
    pub(crate) seed: u64,
    /// Print a progress line on stderr while running.
    pub(crate) progress: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            orders: 1_000_000,
            deadline_min_ms: 1_000,
            deadline_max_ms: 3_000,
            pay_ratio: 0.9,
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
Simulates a shop: reserve stock per order, schedule a reconciliation check at its payment
deadline, cancel the check when the order is paid, return the stock when it expires.

Usage: reconcile [OPTIONS]

Options:
  --orders N            orders to create, as fast as one thread can   [1000000]
  --deadline-min-ms MS  shortest payment deadline                     [1000]
  --deadline-max-ms MS  longest payment deadline                      [3000]
  --pay-ratio R         share of orders paid before their deadline    [0.9]
  --tick-ms MS          timer tick                                    [1]
  --wheel-size N        buckets per timing wheel                      [20]
  --seed N              random seed                                   [42]
  --no-progress         no progress line on stderr
  -h, --help            print this help

Exit code: 0 if every order was paid or expired exactly once and no stock is left
reserved, 1 if not, 2 on a bad command line.";

/// Parses the command line (without the program name). Accepts `--flag value` and
/// `--flag=value`.
pub(crate) fn parse_args(args: impl IntoIterator<Item = String>) -> Result<Command, String> {
    let mut config = Config::default();
    let run = parse_flags(args, |flag, value| {
        match flag {
            "--orders" => config.orders = flag_value(flag, value())?,
            "--deadline-min-ms" => config.deadline_min_ms = flag_value(flag, value())?,
            "--deadline-max-ms" => config.deadline_max_ms = flag_value(flag, value())?,
            "--pay-ratio" => config.pay_ratio = flag_value(flag, value())?,
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
    if config.deadline_min_ms == 0 {
        return Err("--deadline-min-ms must be at least 1".into());
    }
    if config.deadline_min_ms > config.deadline_max_ms {
        return Err(format!(
            "--deadline-min-ms ({}) is above --deadline-max-ms ({})",
            config.deadline_min_ms, config.deadline_max_ms
        ));
    }
    if !(0.0..=1.0).contains(&config.pay_ratio) {
        return Err(format!(
            "--pay-ratio must be within 0..=1, got {}",
            config.pay_ratio
        ));
    }
    if config.tick_ms <= 0 {
        return Err(format!(
            "--tick-ms must be positive, got {}",
            config.tick_ms
        ));
    }
    if config.wheel_size == 0 {
        return Err("--wheel-size must be positive".into());
    }
    Ok(Command::Run(config))
}
