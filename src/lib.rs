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
//! [`advance_clock`](Timer::advance_clock) in a loop, as Kafka does:
//!
//! ```no_run
//! # use timingwheel::{SystemTimer, Timer};
//! # let timer = SystemTimer::new("purgatory");
//! # let running = || true;
//! while running() {
//!     timer.advance_clock(200);
//! }
//! ```
//!
//! or a [`SystemTimerReaper`] does it on a thread of its own. Expired tasks run on the
//! timer's executor thread (`executor-{name}`), never on the driving thread.
//!
//! # Testing code that uses a timer
//!
//! [`MockTimer`] runs tasks on the caller's thread when a test moves its [`MockTime`];
//! nothing sleeps and nothing races. [`SystemTimer::builder`] can also put the real wheel on
//! a `MockTime`.
//!
//! # Async code and periodic schedules
//!
//! [`Sleep`], [`timeout`] and [`Interval`] are futures on any `Arc<dyn Timer>`, for any
//! async runtime: they need nothing but std's [`Waker`](std::task::Waker), which the
//! timer's executor thread wakes. [`schedule_periodic`] runs a closure every period on the
//! executor, for threads. Both follow a [`MissedTicks`] policy when they fall behind.
//!
//! ```
//! use std::future::Future;
//! use std::pin::pin;
//! use std::sync::Arc;
//! use std::task::{Context, Poll, Waker};
//! use timingwheel::{timeout, Elapsed, MockTimer, Timer};
//!
//! let timer = Arc::new(MockTimer::new());
//! let mut cx = Context::from_waker(Waker::noop()); // any runtime's waker will do
//! let mut request = pin!(timeout(timer.clone(), 100, std::future::pending::<u32>()));
//! assert_eq!(request.as_mut().poll(&mut cx), Poll::Pending);
//! timer.advance_clock(100);
//! assert_eq!(request.as_mut().poll(&mut cx), Poll::Ready(Err(Elapsed)));
//! ```
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
//! [`DelayedOperationPurgatory`] and `docs/design.md`. The operation's locking follows
//! Kafka 4.1+ (KAFKA-19312): [`Delayed::force_complete`] takes the operation's re-entrant
//! lock, so `on_complete` never overlaps a `try_complete` in progress on another thread,
//! and an expired operation's `on_expiration` runs after that lock is released.
//!
//! # Metrics
//!
//! With the cargo feature `metrics` (off by default; it adds the
//! [`metrics`](https://docs.rs/metrics) facade crate as a dependency), timers and purgatories
//! report through whatever recorder the application installed (Prometheus, StatsD, ...),
//! under the names of Kafka's registry in the facade's style:
//!
//! - every [`SystemTimer`], labelled `timer = <executor name>`: gauge `timer_pending` and
//!   counters `timer_added_total`, `timer_expired_total`, `timer_cancelled_total` (its
//!   [`stats`](SystemTimer::stats)), after each `advance_clock` and at `close`;
//! - every [`DelayedOperationPurgatory`], labelled `delayed_operation = <purgatory name>`:
//!   gauges `purgatory_size` ([`watched`](DelayedOperationPurgatory::watched), Kafka's
//!   `PurgatorySize`) and `purgatory_num_delayed_operations`
//!   ([`num_delayed`](DelayedOperationPurgatory::num_delayed), `NumDelayedOperations`), and
//!   counter `purgatory_expires_total`
//!   ([`expired_count`](DelayedOperationPurgatory::expired_count), Kafka's
//!   `ExpiresPerSec` as a count), after each of its `advance_clock` steps and at shutdown.
//!
//! Install the recorder before building the timer or purgatory: the handles are registered
//! once, when it is built, so that `add` and `try_complete_else_watch` pay nothing for
//! metrics. Without the feature, nothing is registered or recorded.
//!
//! ```toml
//! [dependencies]
//! timingwheel = { version = "0.1", features = ["metrics"] }
//! ```
//!
//! # Expiries as messages, and one timeout per key
//!
//! [`send_task`] makes a task that sends a message into a [`crossbeam_channel`] when it
//! expires, so that any number of worker threads (or a `select!`) handle expiries instead
//! of the timer's executor; a cancel that returned true means the message is never sent.
//! [`KeyedTimer`] keeps one timeout per key, as Kafka's group coordinator keeps one session
//! timeout per member: scheduling under a key replaces its timeout, and the replaced one
//! never fires, even if it had already expired. Together they make a heartbeat monitor:
//!
//! ```
//! use std::sync::Arc;
//! use timingwheel::crossbeam_channel::unbounded;
//! use timingwheel::{send_task, KeyedTimer, MockTimer, Timer};
//!
//! let timer = Arc::new(MockTimer::new());
//! let sessions = KeyedTimer::new(timer.clone());
//! let (expired_tx, expired) = unbounded();
//! // A heartbeat starts the member's 10 s session timeout again.
//! let heartbeat = |member: u32| {
//!     sessions.schedule(member, send_task(10_000, expired_tx.clone(), member))
//! };
//!
//! heartbeat(1);
//! heartbeat(2);
//! timer.advance_clock(3_000);
//! heartbeat(1); // member 2 stopped heartbeating
//! timer.advance_clock(7_000);
//! assert_eq!(expired.try_recv(), Ok(2));
//! assert!(expired.try_recv().is_err(), "member 1's session lives on");
//! ```
//!
//! To move one pending task rather than replace it, [`Timer::reschedule`] moves its entry
//! in O(1) without allocating.
//!
//! # Guarantees
//!
//! - Exactly once: every task added to an open timer is either run once or cancelled once
//!   (one [`TimerTaskEntry::cancel`] returns true), never both, also when a cancel races
//!   with expiry.
//! - Cancel is O(1) and drops the task inside the call.
//! - No early firing: with the default 1 ms tick, no task runs before the instant of its
//!   `add` plus its delay (with a coarser tick, not before `expiration_ms - tick_ms`).
//! - Extreme delays (`i64::MIN`, `i64::MAX`) saturate; nothing overflows.
//! - A panicking task is caught and logged; the executor keeps going.
//! - After [`close`](Timer::close), `add` runs nothing and returns a cancelled entry,
//!   `advance_clock` returns false at once, and waiting tasks are dropped
//!   ([`stop`](Timer::stop) hands them back instead). Both return once the tasks already
//!   on the executor have finished (a bounded wait), in every thread that calls them.
//! - Purgatory: `on_complete` runs exactly once per operation and `on_expiration` at most
//!   once, only after an expiry; `on_complete` never overlaps a `try_complete` in progress
//!   on another thread (Kafka 4.1+); completing an operation cancels its timeout inside the
//!   call; a completion is never missed; an operation handed over after `shutdown` is
//!   answered at once, as expired, never left hanging.
//! - Memory follows the live set by itself, with no process-wide side effect: a cancel
//!   frees its task at once, and a timer's slots and lists live in memory it maps itself
//!   ([`SystemTimer::storage_bytes`]), which it unmaps as it empties, on the thread that
//!   emptied it. The crate never trims the process's heap and starts no thread that a
//!   timer, reaper or purgatory does not own and join when it closes. What the allocator
//!   then does with the freed task boxes is its own affair (`docs/performance.md`
//!   measures glibc's and mimalloc's).
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

mod channel;
mod delay;
mod future;
mod keyed;
mod metrics;
mod mock_timer;
mod periodic;
mod prefetch;
mod purgatory;
mod rt;
mod store;
mod system_timer;
mod system_timer_reaper;
mod ticks;
mod time;
mod timer;
mod timer_task;
mod timer_task_entry;
mod wheel;

pub use channel::send_task;
pub use crossbeam_channel;
pub use delay::IntoDelayMs;
pub use future::{Elapsed, Interval, Sleep, timeout};
pub use keyed::KeyedTimer;
pub use mock_timer::{MockTime, MockTimer};
pub use periodic::{PeriodicHandle, schedule_periodic};
pub use purgatory::{
    Delayed, DelayedOperation, DelayedOperationPurgatory, DelayedOperationPurgatoryBuilder,
};
pub use system_timer::{SystemTimer, SystemTimerBuilder, TimerStats};
pub use system_timer_reaper::SystemTimerReaper;
pub use ticks::MissedTicks;
pub use time::{SystemClock, Time, hi_res_clock_ms};
pub use timer::{AddError, Timer};
pub use timer_task::{FnTask, TimerTask, timer_task};
pub use timer_task_entry::TimerTaskEntry;

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
