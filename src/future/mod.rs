//! Futures on the wheel, for any async runtime: [`Sleep`], [`timeout()`] and [`Interval`].
//!
//! They need nothing but std's [`Waker`](std::task::Waker): the timer's executor thread
//! wakes the task that last polled a future when its task expires, whatever runtime that
//! task lives on (tokio's current-thread or multi-thread scheduler, smol, async-std,
//! `futures::executor`). No runtime is a dependency of this crate.
//!
//! A wake from the executor thread is a wake from outside the runtime: tokio queues the
//! woken task in its global queue, behind a burst of spawned tasks that overflowed a
//! worker's local queue. With the cargo feature `tokio`, `WorkerTimer` wraps a timer so
//! that its expired tasks, and so the wakes, run on a worker of the runtime, which queues
//! the woken task locally, as tokio's own timer does (module `worker`).
//!
//! # Ground rules
//!
//! - A [`Sleep`] owns one timer task at a time, a token task (`schedule::token`) that
//!   shares the sleep's state (an `Arc`) and whose token is the number of the deadline it
//!   was made for. The state is the current deadline's number (an atomic) and one mutex
//!   over (elapsed, waker); the mutex is a leaf (see `crate::lock_order`): no other lock is
//!   taken under it, no timer is called under it, and no waker is woken under it.
//! - The task fires when it runs on the executor, and when a closed timer drops it unrun. Firing sets "elapsed" and wakes the stored
//!   waker, but only if the wake's deadline number is still the sleep's: a wake for an old
//!   deadline changes nothing. So a sleep completes when its deadline passes, or at once
//!   when its timer can no longer keep the deadline (closed, or full).
//! - `reset` first moves the pending task with [`Timer::reschedule`](crate::Timer::reschedule)
//!   (same task, same deadline number: exactly once holds). Only when that fails, because the
//!   task already fired or was handed to the executor, does it number a new deadline, clear
//!   "elapsed", cancel the old task and add a new one; the old one, if it still runs, is
//!   ignored.
//! - Dropping a sleep numbers a new deadline (no lock: one atomic add) before it cancels its
//!   task, so that the cancelled task's drop wakes nobody.
//! - Timers are called with no lock of this module held: a `MockTimer` runs a task whose
//!   delay is <= 0 inside `add` or `reschedule`, on the calling thread.

pub(crate) mod interval;
mod sleep;
mod timeout;
#[cfg(all(feature = "tokio", unix))]
mod worker;

pub use interval::Interval;
pub use sleep::Sleep;
pub use timeout::{Elapsed, Timeout, timeout};
#[cfg(all(feature = "tokio", unix))]
pub use worker::WorkerTimer;
