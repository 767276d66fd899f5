//! The integration tests, in one binary: one module per suite or guarantee (see
//! `docs/guarantees.md`, "Layout of `tests/`"), the helpers in `tests/common`. One binary
//! links the library and the helpers once instead of once per file, and its tests share one
//! pool of test threads.
//!
//! Run one module with a filter: `cargo test --test it -- system_timer::`.
//!
//! The tests here share a process, so none may rely on being alone in it: the capturing
//! logger is installed once for all (`common::logger`) and each test looks only for the
//! records it caused, by a needle no other test logs; `common::panic_location` catches the
//! location of its own thread's panic only; thread names in `/proc/self/task` are looked up
//! by a prefix only that test's timers use.
//!
//! Nine test files stay binaries of their own, because they need a process, or a release
//! build, of their own:
//!
//! - `leaks.rs` and `keyed_reschedule_alloc.rs`: a `#[global_allocator]` counts the heap of
//!   the whole process, and another test's allocations would show up in its count;
//! - `close_warning.rs`: a `close` that gives up waiting warns once; it waits out the
//!   close's whole 10 s bound, and looks for the one warning among every record the
//!   process logs;
//! - `process.rs`: it counts the threads of the process, which other tests start and join
//!   all the time;
//! - `metrics.rs`: only with the `metrics` feature; on its own, `cargo test --features
//!   metrics --test metrics` builds it and the library without building this binary again
//!   with the feature;
//! - `shared_pool.rs`: it builds the `shared_pool` example's sources, whose own modules
//!   resolve only from a crate root;
//! - `soak.rs`, and the examples' defaults in `reconcile.rs` and `sessions.rs` (ignored
//!   tests beside each example's small runs): CI runs them in release, each alone with the
//!   machine to itself, as their bounds on time need. As modules of this binary they would
//!   have CI build all of it in release: 66-76 s on the 2-core CI machine, against 14-19 s
//!   for the library and these three.

// Shared with the binaries of their own, hence outside `it/`.
#[path = "../common/mod.rs"]
mod common;

mod debug;
mod delayed_operation;
mod executor_pool;
mod executors;
mod futures;
mod in_flight;
mod keyed;
mod keyed_reschedule;
mod lateness;
mod missed_ticks;
mod mock_timer;
mod model;
mod next_expiration;
mod periodic;
mod purgatory;
mod purgatory_lock;
mod purgatory_stress;
mod refusal;
mod reschedule;
mod restore;
mod send_task;
mod shared_reaper;
mod shutdown;
mod stale_items;
mod stress;
mod system_timer;
mod system_timer_reaper;
mod timeout;
mod timer;
mod timer_task_list;
