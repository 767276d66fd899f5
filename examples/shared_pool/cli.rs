//! The command line: what to simulate, and the help.

use super::common;

common::options! {
    /// Simulates a service that runs its request work and its request timeouts on one
    /// threadpool::ThreadPool (SystemTimerBuilder::threadpool): each request is answered once,
    /// by its response (which cancels its timeout) or by its timeout, whichever comes first.
    ///
    /// Exit code: 0 if every request was answered exactly once, every timeout ran or was
    /// cancelled exactly once, none before its deadline, and the timer was left with nothing; 1
    /// if not; 2 on a bad command line.
    Config {
        requests: u32 = 3_000, "--requests" N, "requests the client sends";
        rate: u32 = 1_500, "--rate" N, "requests per second, spread evenly";
        threads: usize = 8, "--threads" N, "threads of the shared pool";
        deadline_ms: i64 = 5, "--deadline-ms" MS, "a request's timeout";
        work_max_ms: u64 = 8, "--work-max-ms" MS, "a request's work takes 0 to this, uniformly";
        max_in_flight: usize = 4, "--max-in-flight" N,
            "timeouts on the pool at once, at most (0: no bound)";
        seed: u64 = 42, "--seed" N, "random seed";
    }
    check |c| [
        (c.requests > 0, "--requests must be positive"),
        (c.rate > 0, "--rate must be positive"),
        (c.threads > 0, "--threads must be positive"),
        (c.deadline_ms > 0, "--deadline-ms must be positive"),
    ]
}
