//! A faithful, threaded port of Apache Kafka's hierarchical timing-wheel timer
//! (`SystemTimer`): O(1) to start a timeout, O(1) to cancel it, one thread advancing time.
//!
//! Services keep millions of pending timeouts — request deadlines, delayed operations,
//! "re-check this order in 30 minutes" — and nearly all of them are cancelled before they
//! fire. A timing wheel makes both ends of that life constant-time.
//!
//! # Hello, timer
//!
//! ```
//! use std::sync::mpsc;
//! use timingwheel::{timer_task, SystemTimer, SystemTimerReaper, Timer};
//!
//! // A SystemTimer with its own driver thread, as Kafka's purgatory uses it.
//! let timer = SystemTimerReaper::new("reaper", SystemTimer::new("orders"));
//! let (expired_tx, expired_rx) = mpsc::channel();
//!
//! // Schedule a check for order 7 in 20 ms, and one for order 8 in 30 minutes.
//! let tx = expired_tx.clone();
//! timer.add(timer_task(20, move || tx.send(7).unwrap()));
//! let check8 = timer.add(timer_task(30 * 60 * 1000, move || expired_tx.send(8).unwrap()));
//!
//! // Order 8 is paid: cancel its check. O(1), and the task is freed at once.
//! assert!(check8.cancel());
//! assert_eq!(expired_rx.recv().unwrap(), 7);
//! timer.close();
//! ```
//!
//! # Driving the timer
//!
//! A [`SystemTimer`] does not advance by itself: one thread calls
//! [`advance_clock`](Timer::advance_clock) in one of two loops, which differ in when they
//! end:
//!
//! ```no_run
//! # use timingwheel::{SystemTimer, Timer};
//! # let timer = SystemTimer::new("purgatory");
//! // Drain until idle, as Kafka's tests do (`while (timer.advanceClock(2000)) {}`): ends
//! // once 200 ms pass with nothing due. A task added later waits for the next loop.
//! while timer.advance_clock(200) {}
//!
//! // Drive until closed, as Kafka's reaper does (`while (running) timer.advanceClock(200)`):
//! // a service's driver thread. Another thread's `close` wakes and ends it.
//! while !timer.is_closed() {
//!     timer.advance_clock(200);
//! }
//! ```
//!
//! A [`SystemTimerReaper`] runs the second loop on a thread of its own, as Kafka's reaper
//! does.
//! Expired tasks run on the timer's executor: by default a thread of its own
//! (`executor-{name}`), never the driving thread; the builder can put them on a
//! `threadpool::ThreadPool` the service owns, or on any executor, and bound how many it
//! hands over at once ([`SystemTimerBuilder`]).
//!
//! # Testing code that uses a timer
//!
//! [`MockTimer`] runs tasks on the caller's thread when a test moves its [`MockTime`];
//! nothing sleeps and nothing races. [`SystemTimer::builder`] can also put the real wheel on
//! a `MockTime`.
//!
//! # Async code, periodic schedules, keyed timeouts
//!
//! [`Sleep`], [`timeout`] and [`Interval`] are futures on any `Arc<dyn Timer>`, for any
//! async runtime (they need nothing but std's [`Waker`](std::task::Waker)); with the cargo
//! feature `tokio`, a `WorkerTimer` wakes them from a tokio worker, as tokio's timer does.
//! [`schedule_periodic`] runs a closure every period on the executor; both follow a
//! [`MissedTicks`] policy when they fall behind. [`KeyedTimer`] keeps one timeout per key,
//! as Kafka's group coordinator keeps one session timeout per member, and [`send_task`]
//! turns an expiry into a message on a [`crossbeam_channel`], for worker threads of your
//! own.
//!
//! # Delayed operations: Kafka's purgatory
//!
//! On top of the timer, [`DelayedOperationPurgatory`] keeps requests that wait for a
//! condition or a timeout, whichever comes first — a produce waiting for replica
//! acknowledgements, a fetch waiting for bytes — watched under the keys they depend on.
//! Implement [`DelayedOperation`], wrap it in a [`Delayed`], and hand it to
//! [`try_complete_else_watch`](DelayedOperationPurgatory::try_complete_else_watch); call
//! [`check_and_complete`](DelayedOperationPurgatory::check_and_complete) when something
//! changes for a key:
//!
//! ```
//! use std::sync::atomic::{AtomicU32, Ordering};
//! use std::sync::Arc;
//! use timingwheel::{Delayed, DelayedOperation, DelayedOperationPurgatory, MockTimer};
//!
//! struct Produce { acks: AtomicU32 }
//! impl DelayedOperation for Produce {
//!     fn delay_ms(&self) -> i64 { 30_000 }
//!     fn try_complete(&self) -> bool { self.acks.load(Ordering::SeqCst) >= 3 }
//!     fn on_complete(&self) { /* send the response */ }
//!     fn on_expiration(&self) { /* count the timeout */ }
//! }
//!
//! // A MockTimer with the reaper off, so that this example drives time itself.
//! let purgatory = DelayedOperationPurgatory::<&str, Produce>::builder("Produce")
//!     .timer(Arc::new(MockTimer::new()))
//!     .reaper_enabled(false)
//!     .build();
//! let produce = Delayed::new(Produce { acks: AtomicU32::new(0) });
//! assert!(!purgatory.try_complete_else_watch(&produce, &["orders-0"]));
//! produce.operation().acks.store(3, Ordering::SeqCst); // three replicas caught up
//! assert_eq!(purgatory.check_and_complete(&"orders-0"), 1);
//! assert_eq!(purgatory.num_delayed(), 0, "its timeout was cancelled");
//! ```
//!
//! `on_complete` runs exactly once per operation, whatever races; see
//! [`DelayedOperationPurgatory`] and `docs/design.md`. The operation's locking is the one
//! KAFKA-19312 introduced: [`Delayed::force_complete`] takes the operation's re-entrant
//! lock, so `on_complete` never overlaps a `try_complete` in progress on another thread,
//! and an expired operation's `on_expiration` runs after that lock is released.
//!
//! # Metrics
//!
//! With the cargo feature `metrics` (off by default), timers and purgatories report through
//! the [`metrics`](https://docs.rs/metrics) facade under Kafka's names (`timer_pending`,
//! `purgatory_size`, ...): see [`SystemTimer::stats`] and
//! [`DelayedOperationPurgatory::expired_count`]. Install the recorder before building the
//! timer or purgatory; `add` pays nothing for metrics.
//!
//! # Guarantees
//!
//! Every task added to an open timer is either run once or cancelled once, never both;
//! cancel is O(1) and drops the task inside the call; with the default 1 ms tick no task
//! runs before the instant of its `add` plus its delay; a panicking task is caught and
//! logged; `close` and `stop` return once the tasks already handed to the executor have
//! finished (a bounded wait). `docs/guarantees.md` lists every promise with the test that
//! holds the crate to it.
//!
//! # Implementation
//!
//! Hierarchical timing wheels are due to Varghese and Lauck, "Hashed and Hierarchical
//! Timing Wheels: Data Structures for the Efficient Implementation of a Timer Facility"
//! (SOSP 1987). Kafka combines them with a `DelayQueue` of buckets, so the driving thread
//! sleeps until the next non-empty bucket is due instead of ticking through empty ones;
//! its request purgatory keeps millions of delayed operations on it. This crate ports
//! Kafka's `SystemTimer`, `TimingWheel`, `TimerTaskList`, `TimerTaskEntry`,
//! `SystemTimerReaper`, `MockTime` and `MockTimer` (the timer package as of Kafka 3.9.0,
//! unchanged in 4.3), and the purgatory's `DelayedOperation` and
//! `DelayedOperationPurgatory` (as of Kafka 4.x, the operation's locking as of 4.1), under
//! the Apache License 2.0, keeping their names and structure. Entries live in 32-byte
//! slots of per-thread shards, and a bucket is a chain of slot indices rather than a
//! linked list of entry objects, so a flush reads it in order and a cancel is still O(1).
//! Buckets above the lowest level move their first half down ahead of time, and a flush
//! re-adds its entries in short chunks outside the write lock, so a million timers
//! expiring together neither stall the driver nor the threads that add; see
//! `docs/design.md`.

#![deny(missing_docs)]
#![warn(rust_2018_idioms)]

mod delay_queue;
mod delayed_operation;
mod delayed_operation_purgatory;
mod executor;
mod future;
mod lateness;
mod lock_order;
mod metrics;
mod mock;
mod schedule;
mod store;
mod system_timer;
mod system_timer_reaper;
mod task;
mod time;
mod timer;
mod timer_task_entry;
mod timer_task_list;
mod timing_wheel;

pub use crossbeam_channel;
pub use delayed_operation::{Delayed, DelayedOperation};
pub use delayed_operation_purgatory::{
    DelayedOperationPurgatory, DelayedOperationPurgatoryBuilder,
};
#[cfg(all(feature = "tokio", unix))]
pub use future::WorkerTimer;
pub use future::{Elapsed, Interval, Sleep, Timeout, timeout};
pub use lateness::Lateness;
pub use metrics::TimerStats;
pub use mock::{MockTime, MockTimer};
pub use schedule::keyed::{KeyedTimer, Lapsed};
pub use schedule::missed_ticks::MissedTicks;
pub use schedule::periodic::{PeriodicHandle, schedule_periodic};
pub use schedule::send_task::send_task;
pub use system_timer::{SystemTimer, SystemTimerBuilder};
pub use system_timer_reaper::{SharedReaperTimer, SharedSystemTimerReaper, SystemTimerReaper};
pub use task::{FnTask, IntoDelayMs, TimerTask, timer_task};
/// The crate of the pool [`SystemTimerBuilder::threadpool`] takes, so that a caller's pool
/// is of the same version.
pub use threadpool;
pub use time::{SystemClock, Time, hi_res_clock_ms};
pub use timer::{AddError, Timer};
pub use timer_task_entry::TimerTaskEntry;

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
