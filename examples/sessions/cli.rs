//! The command line: what to simulate, and the help.

use super::common;

common::options! {
    /// Simulates a group coordinator's member sessions: every member heartbeats, and each
    /// heartbeat starts its session timeout again (KeyedTimer::reschedule of the member's id);
    /// the members that stop heartbeating expire once, as messages (send_task) to worker
    /// threads.
    ///
    /// Exit code: 0 if every member that stopped expired exactly once, no live member expired,
    /// none early, and exactly the live members' timeouts are left; 1 if not; 2 on a bad
    /// command line.
    Config {
        members: u32 = 1_000_000, "--members" N, "members of the group";
        heartbeat_ms: u32 = 3_000, "--heartbeat-ms" MS, "heartbeat interval of a live member";
        session_timeout_ms: u32 = 10_000, "--session-timeout-ms" MS, "session timeout";
        stop_ratio: f64 = 0.01, "--stop-ratio" R, "share of members that stop heartbeating";
        workers: usize = 4, "--workers" N, "threads that handle the expiries";
        tick_ms: i64 = 1, "--tick-ms" MS, "timer tick";
        wheel_size: usize = 20, "--wheel-size" N, "buckets per timing wheel";
        seed: u64 = 42, "--seed" N, "random seed";
    }
    check |c| [
        (c.members > 0, "--members must be positive"),
        (c.heartbeat_ms > 0, "--heartbeat-ms must be positive"),
        (c.workers > 0, "--workers must be positive"),
        (c.tick_ms > 0, "--tick-ms must be positive"),
        (c.wheel_size > 0, "--wheel-size must be positive"),
        (c.session_timeout_ms > c.heartbeat_ms,
            "--session-timeout-ms must be above --heartbeat-ms: live members would expire"),
        ((0.0..=1.0).contains(&c.stop_ratio), "--stop-ratio must be within 0..=1"),
    ]
}
