//! Kafka's test fixtures `MockTime` and `MockTimer`, as public API for users' own tests.
//!
//! # Ground rules
//!
//! The lock order is in `crate::lock_order`. Here:
//!
//! - A [`MockTimer`]'s tasks sit in the slots of one pooled shard, as a `SystemTimer`'s do,
//!   so their handles are the same. The order in which they run is a
//!   [`Mutex`]-guarded map from (expiration, insertion number) to the entry. Lock order: the
//!   map, then the shard. Tasks run on the caller's thread with both locks released, so a
//!   task may add to, cancel on, or advance its own timer.
//! - As in [`SystemTimer`](crate::SystemTimer), a task is taken out of its slot under the
//!   shard's lock exactly once, by whoever runs, cancels or stops it. A cancel leaves the
//!   map's entry behind; `advance_clock` skips it, and the map is pruned of such entries
//!   once they outnumber the live ones, so memory follows the live set.
//! - `closed` is set under the map's lock, and `add` checks it again under that lock before
//!   inserting, so no task can slip in after `close` emptied the timer.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;

use super::mock_time::MockTime;
use crate::lateness::{RunningLate, late_us};
use crate::store::chunks::EntryKey;
use crate::store::shard::{Shard, Shards};
use crate::task::{TimerTask, due_at_once};
use crate::time::Time;
use crate::timer::{AddError, Timer};
use crate::timer_task_entry::TimerTaskEntry;

/// Kafka's `MockTimer`: a deterministic timer for users' own tests.
///
/// Nothing runs in the background. [`add`](Timer::add) of a task whose delay is zero or
/// negative runs it at once, inside `add`, on the caller's thread: a lock that the caller
/// holds across `add` and that the task takes deadlocks there (on a `SystemTimer` the task
/// runs on the executor thread instead, and only waits for the lock). [`advance_clock(t)`](Timer::advance_clock)
/// moves [`time`](MockTimer::time) forward by `t` ms, then runs every pending task with
/// `expiration_ms <= now`, on the caller's thread, in expiration order (ties: insertion
/// order), including tasks that those tasks add while it runs, and returns whether any ran.
/// Cancellation through the returned [`TimerTaskEntry`] works exactly as on
/// [`SystemTimer`](crate::SystemTimer).
///
/// # Examples
///
/// ```
/// use std::sync::{Arc, Mutex};
/// use timingwheel::{timer_task, MockTimer, Timer};
///
/// let timer = MockTimer::new();
/// let log = Arc::new(Mutex::new(Vec::new()));
/// for (name, delay) in [("b", 20), ("a", 10), ("c", 20)] {
///     let log = log.clone();
///     timer.add(timer_task(delay, move || log.lock().unwrap().push(name)));
/// }
/// assert!(!timer.advance_clock(9));
/// assert!(timer.advance_clock(11));
/// assert_eq!(*log.lock().unwrap(), ["a", "b", "c"]);
/// ```
///
/// # Shutting down
///
/// [`close`](Timer::close) and [`stop`](Timer::stop) never block: there is no executor to
/// wait for. They drop (or hand back) the tasks waiting in the timer; a task that another
/// thread's `advance_clock` has already taken out to run finishes on that thread, even if
/// that is after `close` returned. Dropping the timer closes it, so its waiting tasks are
/// dropped with it, and their handles' [`cancel`](TimerTaskEntry::cancel) returns false.
///
/// # Differences from Kafka
///
/// Kafka's `MockTimer` fires a task only once the clock is strictly past its expiration;
/// this one fires it at its expiration, as `SystemTimer` does. A panic in a task is not
/// caught: it reaches the test that called `add` or `advance_clock`. Its clock covers the
/// whole `i64` millisecond range (Kafka's stops after 292 years of nanoseconds).
pub struct MockTimer {
    time: MockTime,
    /// The order in which tasks run. Taken before the shard's lock.
    order: Mutex<Order>,
    /// The tasks: one shard, locked on its own (there is no wheel to guard).
    entries: Shards,
    /// Set once, under `order`'s lock.
    closed: AtomicBool,
}

/// Entries by (expiration, insertion number), and where each entry is in that order;
/// cancelled ones linger until pruned. A rescheduled entry gets a new insertion number, so
/// it runs after the tasks already due at its new expiration.
#[derive(Default)]
struct Order {
    by_expiration: BTreeMap<(i64, u64), EntryKey>,
    by_key: HashMap<EntryKey, (i64, u64)>,
    next_seq: u64,
}

impl Order {
    /// Puts `key` at `expiration_ms`, after everything already there.
    fn insert(&mut self, key: EntryKey, expiration_ms: i64) {
        let at = (expiration_ms, self.next_seq);
        self.next_seq += 1;
        self.by_expiration.insert(at, key);
        self.by_key.insert(key, at);
    }

    /// Forgets where `key` was.
    fn remove(&mut self, key: EntryKey) {
        if let Some(at) = self.by_key.remove(&key) {
            self.by_expiration.remove(&at);
        }
    }
}

impl MockTimer {
    /// Creates a timer on a new [`MockTime`].
    pub fn new() -> MockTimer {
        MockTimer::with_time(MockTime::new())
    }

    /// Creates a timer on `time`, which the caller may keep a clone of.
    ///
    /// # Examples
    ///
    /// ```
    /// use timingwheel::{MockTime, MockTimer, Timer};
    ///
    /// let time = MockTime::new();
    /// let timer = MockTimer::with_time(time.clone());
    /// timer.advance_clock(5);
    /// assert_eq!(time.hi_res_clock_ms(), MockTime::new().hi_res_clock_ms() + 5);
    /// ```
    pub fn with_time(time: MockTime) -> MockTimer {
        MockTimer {
            time,
            order: Mutex::new(Order::default()),
            entries: Shards::take(1, None, None),
            closed: AtomicBool::new(false),
        }
    }

    /// Returns the timer's clock.
    pub fn time(&self) -> &MockTime {
        &self.time
    }

    fn shard(&self) -> &'static Shard {
        self.entries[0]
    }

    /// Takes the first pending task due at `now_ms`, if any, with its expiration.
    fn take_due(&self, now_ms: i64) -> Option<(Box<dyn TimerTask>, i64)> {
        let mut order = self.order.lock();
        loop {
            let entry = order.by_expiration.first_entry()?;
            let expiration_ms = entry.key().0;
            if expiration_ms > now_ms {
                return None;
            }
            let key = entry.remove();
            order.by_key.remove(&key);
            // `None`: cancelled since; its map entry was all that was left.
            if let Some(task) = self.shard().lock().take(key) {
                return Some((task, expiration_ms));
            }
        }
    }

    /// Returns the earliest expiration among the pending tasks, or `None` when no task is
    /// pending: the next time [`advance_clock`](Timer::advance_clock) would run one.
    ///
    /// Drops the entries of cancelled tasks it finds ahead of it, so a call costs O(1)
    /// amortized, plus O(log n) per such entry.
    ///
    /// # Examples
    ///
    /// ```
    /// use timingwheel::{timer_task, MockTimer, Timer};
    ///
    /// let timer = MockTimer::new();
    /// let now = timer.time().hi_res_clock_ms();
    /// assert_eq!(timer.next_expiration_ms(), None);
    /// let first = timer.add(timer_task(20, || {}));
    /// timer.add(timer_task(30, || {}));
    /// assert_eq!(timer.next_expiration_ms(), Some(now + 20));
    /// first.cancel();
    /// assert_eq!(timer.next_expiration_ms(), Some(now + 30));
    /// ```
    pub fn next_expiration_ms(&self) -> Option<i64> {
        let mut order = self.order.lock();
        let shard = self.shard().lock();
        loop {
            let entry = order.by_expiration.first_entry()?;
            if shard.is_live(*entry.get()) {
                return Some(entry.key().0);
            }
            // Cancelled since: its map entry was all that was left.
            let key = entry.remove();
            order.by_key.remove(&key);
        }
    }
}

impl Default for MockTimer {
    fn default() -> Self {
        MockTimer::new()
    }
}

impl MockTimer {
    /// The clock's reading plus `delay_ms`, saturating.
    fn expiration_after(&self, delay_ms: i64) -> i64 {
        self.time.hi_res_clock_ms().saturating_add(delay_ms)
    }

    /// `add` and `try_add`: takes `task` at `expiration_ms` (running it now if it is due),
    /// or says why not.
    fn insert(
        &self,
        task: Box<dyn TimerTask>,
        expiration_ms: i64,
    ) -> Result<TimerTaskEntry, AddError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(AddError::Closed(task));
        }
        if due_at_once(task.delay_ms()) {
            task.run();
            return Ok(TimerTaskEntry::expired(expiration_ms));
        }
        let mut order = self.order.lock();
        // Checked again under the lock that `close` empties the timer under: a task is
        // either in the timer before `close` takes it, or refused.
        if self.closed.load(Ordering::Acquire) {
            return Err(AddError::Closed(task));
        }
        let mut shard = self.shard().lock();
        let key = match shard.insert_unlisted(task, expiration_ms) {
            Ok(key) => key,
            Err(task) => return Err(AddError::Full(task)),
        };
        let entry = TimerTaskEntry::pending(self.shard(), &mut shard, key, expiration_ms);
        let live = shard.len();
        // Cancelled entries outnumber live ones: drop them, in O(live) per O(live) cancels.
        if order.by_expiration.len() > 2 * live + 64 {
            order.by_expiration.retain(|_, key| shard.is_live(*key));
            order.by_key.retain(|key, _| shard.is_live(*key));
        }
        drop(shard);
        order.insert(key, expiration_ms);
        drop(order);
        Ok(entry)
    }
}

impl Timer for MockTimer {
    fn add(&self, task: Box<dyn TimerTask>) -> TimerTaskEntry {
        let expiration_ms = self.expiration_after(task.delay_ms());
        self.insert(task, expiration_ms)
            .unwrap_or_else(|_| TimerTaskEntry::refused(expiration_ms))
    }

    fn try_add(&self, task: Box<dyn TimerTask>) -> Result<TimerTaskEntry, AddError> {
        let expiration_ms = self.expiration_after(task.delay_ms());
        self.insert(task, expiration_ms)
    }

    fn reschedule(&self, entry: &TimerTaskEntry, delay_ms: i64) -> bool {
        let Some((shard, key)) = entry.location() else {
            return false;
        };
        if !std::ptr::eq(shard, self.shard()) {
            return false;
        }
        let expiration_ms = self.expiration_after(delay_ms);
        let mut order = self.order.lock();
        if self.closed.load(Ordering::Acquire) {
            return false;
        }
        let mut state = shard.lock();
        if due_at_once(delay_ms) {
            let Some(task) = state.take(key) else {
                return false;
            };
            entry.set_expiration(&mut state, expiration_ms);
            drop(state);
            order.remove(key);
            drop(order);
            task.run();
            return true;
        }
        if state.reschedule(key, expiration_ms, false).is_none() {
            return false;
        }
        entry.set_expiration(&mut state, expiration_ms);
        drop(state);
        order.remove(key);
        order.insert(key, expiration_ms);
        true
    }

    fn advance_clock(&self, timeout_ms: i64) -> bool {
        if self.closed.load(Ordering::Acquire) {
            return false;
        }
        self.time.sleep(timeout_ms.max(0));
        let now_ms = self.time.hi_res_clock_ms();
        let mut ran = false;
        while let Some((task, expiration_ms)) = self.take_due(now_ms) {
            // What a purgatory's expiry reports as its lateness, as on a `SystemTimer`.
            let _running = RunningLate::enter(late_us(self.time.nanoseconds_wide(), expiration_ms));
            task.run();
            ran = true;
        }
        ran
    }

    fn size(&self) -> usize {
        self.shard().lock().len()
    }

    /// Stops the timer; idempotent. The tasks still waiting are dropped without running, on
    /// this thread, before it returns. Never blocks (see "Shutting down" on [`MockTimer`]).
    fn close(&self) {
        // Dropped after the lock is released: a task's `Drop` may call back into the timer.
        drop(self.stop());
    }

    /// Stops the timer like [`close`](Timer::close) and hands back the tasks still waiting,
    /// in no particular order. Never blocks.
    fn stop(&self) -> Vec<Box<dyn TimerTask>> {
        let mut order = self.order.lock();
        if self.closed.swap(true, Ordering::AcqRel) {
            return Vec::new();
        }
        order.by_expiration.clear();
        order.by_key.clear();
        let cleared = self.shard().lock().clear();
        drop(order);
        cleared.into_tasks()
    }

    fn clock(&self) -> Arc<dyn Time> {
        Arc::new(self.time.clone())
    }
}

impl Drop for MockTimer {
    /// Closes the timer: its waiting tasks are dropped, not kept alive by their handles
    /// (which share only its emptied storage from now on).
    fn drop(&mut self) {
        self.close();
    }
}

impl fmt::Debug for MockTimer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MockTimer")
            .field("time", &self.time)
            .field("closed", &self.closed.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}
