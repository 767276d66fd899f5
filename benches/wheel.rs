//! The benchmarks of timingwheel, each against its baselines in the same run: one binary,
//! one function per workload, listed below (the workloads that count the allocator's bytes
//! are in `memory.rs`, a binary of its own).
//!
//! `cargo bench -p timingwheel-benches --bench wheel -- WORKLOAD [key=value ...]` runs one
//! (`all`: each in turn); with no workload, the list. A parameter is `key=value` or the
//! environment's `TIMINGWHEEL_<KEY>`; `TIMINGWHEEL_BENCH_QUICK=1` runs every workload at a
//! reduced size, in seconds. Each prints markdown tables: every run's figures, the
//! baseline's from the same run, and the ratio within each run.

#![allow(clippy::print_stdout)]

mod baselines;
mod everyday;
mod expiry;
mod harness;
mod restore;

/// Every workload of this binary, each documented at its function: a new one is a function
/// and a line here.
const WORKLOADS: &[harness::Workload] = &[
    ("everyday", everyday::everyday), // add, cancel, reschedule vs tokio-util, nexus-timer
    ("add_parts", everyday::add_parts), // where an add's nanoseconds go
    ("instructions", everyday::instructions), // instructions per operation (callgrind)
    ("threads", everyday::threads),   // add + cancel from 1, 2, 4, ... threads
    ("locks", everyday::locks),       // the striped lock vs RwLock read + a mutex
    ("heartbeats", everyday::heartbeats), // KeyedTimer::reschedule vs tokio-util reset
    ("load", expiry::load),           // lateness while 10^6 or 10^7 are added
    ("executors", expiry::executors), // each place to run expiries, send_task + 4 workers
    ("purgatory", expiry::purgatory), // watch + complete vs a Mutex<HashMap> purgatory
    ("async_wakes", expiry::async_wakes), // wake lateness on a busy runtime vs tokio
    ("sessions", expiry::sessions),   // 10^6 sessions heartbeating for 60 s, 2 % silent
    ("shared_driver", expiry::shared_driver), // 8 timers: one shared driver vs 8 reapers
    ("restore", restore::restore),    // bulk restore vs schedule, lapsed RunNow vs Spread, pending
];

fn main() {
    harness::main(WORKLOADS);
}
