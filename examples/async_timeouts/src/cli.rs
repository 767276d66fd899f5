//! The command line: what to simulate, and the help.

use super::common;

common::options! {
    /// A tokio service that answers each request from one of its backends, under a timeout that
    /// runs on timingwheel's wheel; some backends are slow.
    ///
    /// Exit code: 0 if every request was answered exactly once (by its backend or by its
    /// timeout) and none timed out before its timeout, 1 if not, 2 on a bad command line.
    Config {
        requests: usize = 1_000_000, "--requests" N, "requests to answer";
        in_flight: usize = 5_000, "--in-flight" N, "requests in flight at once";
        backends: usize = 100, "--backends" N, "backends the requests are spread over";
        slow_percent: usize = 5, "--slow-percent" P, "percentage of the backends that are slow";
        timeout_ms: i64 = 100, "--timeout-ms" MS, "every request's timeout";
        fast_max_ms: i64 = 20, "--fast-max-ms" MS, "a fast backend answers in 1..=MS ms";
        slow_min_ms: i64 = 200, "--slow-min-ms" MS, "a slow backend answers in MS..=2*MS ms";
        workers: usize = 0, "--workers" N, "tokio worker threads, 0 for one per core";
        seed: u64 = 42, "--seed" N, "random seed";
    }
    check |c| [
        (c.in_flight > 0, "--in-flight must be positive"),
        (c.backends > 0, "--backends must be positive"),
        (c.timeout_ms > 0, "--timeout-ms must be positive"),
        (c.fast_max_ms > 0, "--fast-max-ms must be positive"),
        (c.slow_min_ms > 0, "--slow-min-ms must be positive"),
        (c.slow_percent <= 100, "--slow-percent must be at most 100"),
    ]
}
