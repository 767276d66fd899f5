//! The command line: what to simulate, and the help.

use super::common;

common::options! {
    /// Simulates a shop: reserve stock per order, schedule a reconciliation check at its
    /// payment deadline, cancel the check when the order is paid, return the stock when it
    /// expires.
    ///
    /// A restart: with --state FILE and --stop-after SECS it stops early and writes its
    /// books, pending checks and payments to FILE; the next run with the same --state FILE
    /// restores them and finishes.
    ///
    /// Exit code: 0 if every order was paid or expired exactly once (or, stopped early,
    /// carried over) and no stock is left reserved, 1 if not, 2 on a bad command line.
    Config {
        orders: u32 = 1_000_000, "--orders" N, "orders to create, as fast as one thread can";
        deadline_min_ms: u32 = 1_000, "--deadline-min-ms" MS, "shortest payment deadline";
        deadline_max_ms: u32 = 3_000, "--deadline-max-ms" MS, "longest payment deadline";
        pay_ratio: f64 = 0.9, "--pay-ratio" R, "share of orders paid before their deadline";
        tick_ms: i64 = 1, "--tick-ms" MS, "timer tick";
        wheel_size: usize = 20, "--wheel-size" N, "buckets per timing wheel";
        seed: u64 = 42, "--seed" N, "random seed";
        state: String = String::new(), "--state" FILE, "file a stopped run leaves, the next reads";
        stop_after: f64 = 0.0, "--stop-after" SECS, "stop after SECS, leaving --state (0: never)";
        spread_ms: u32 = 1_000, "--spread-ms" MS, "spread lapsed restored checks over MS";
    }
    check |c| [
        (c.deadline_min_ms > 0, "--deadline-min-ms must be at least 1"),
        (c.deadline_min_ms <= c.deadline_max_ms, "--deadline-min-ms is above --deadline-max-ms"),
        ((0.0..=1.0).contains(&c.pay_ratio), "--pay-ratio must be within 0..=1"),
        (c.tick_ms > 0, "--tick-ms must be positive"),
        (c.wheel_size > 0, "--wheel-size must be positive"),
        (c.stop_after >= 0.0, "--stop-after must not be negative"),
        (c.stop_after == 0.0 || !c.state.is_empty(), "--stop-after needs --state"),
    ]
}
