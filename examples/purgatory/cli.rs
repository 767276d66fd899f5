//! The command line: what to simulate, and the help.

use super::common;

common::options! {
    /// Simulates a broker's produce purgatory: acks=all requests wait until the 3 replicas of
    /// their partition have their offset, or time out.
    ///
    /// Exit code: 0 if every request was answered exactly once and none expired before its
    /// timeout, 1 if not, 2 on a bad command line.
    Config {
        requests: usize = 200_000, "--requests" N, "produce requests to send";
        rate: u32 = 100_000, "--rate" N, "requests per second offered";
        partitions: usize = 64, "--partitions" N, "partitions of the topic";
        timeout_ms: i64 = 500, "--timeout-ms" MS, "request timeout";
        slow_every: usize = 16, "--slow-every" N, "replica 3 lags on every N-th partition";
        slow_fetch_ms: u64 = 800, "--slow-fetch-ms" MS, "...where it fetches only this often";
        seed: u64 = 42, "--seed" N, "random seed";
    }
    check |c| [
        (c.rate > 0, "--rate must be positive"),
        (c.partitions > 0, "--partitions must be positive"),
        (c.timeout_ms > 0, "--timeout-ms must be positive"),
        (c.slow_every > 0, "--slow-every must be positive"),
    ]
}
