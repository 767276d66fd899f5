//! The command line: what to simulate, and the help.

use super::common;

common::options! {
    /// Simulates a broker's eight purgatories on one SharedSystemTimerReaper: requests of each
    /// kind wait under their key (a topic-partition, a group member, an ACL) until an event on
    /// it (replica acks, bytes arriving, a heartbeat) completes them, or time out.
    ///
    /// Exit code: 0 if every request ended exactly one way (completed or expired), none expired
    /// early, every purgatory was left empty and the timers ran on fewer threads than one
    /// reaper per purgatory; 1 if not; 2 on a bad command line.
    Config {
        requests: usize = 48_000, "--requests" N, "requests, spread evenly over the purgatories";
        rate: u32 = 16_000, "--rate" N, "requests per second offered";
        pool_threads: usize = 4, "--pool-threads" N,
            "expiries on a pool of N threads (0: each purgatory's executor thread)";
        seed: u64 = 42, "--seed" N, "random seed";
    }
    check |c| [
        (c.requests > 0, "--requests must be positive"),
        (c.rate > 0, "--rate must be positive"),
    ]
}
