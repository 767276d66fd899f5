//! Kafka's `SystemTimer`: a hierarchical timing wheel, a delay queue of lists and an
//! executor.
//!
//! # Ground rules
//!
//! This is the one place that states the timer's lock order; the other modules link here.
//!
//! - Locks, in the order they may be taken:
//!   1. the wheel's reader-writer lock (`timing_wheel`, a [`ShardedRwLock`]): a *read* lock
//!      is one stripe, which is one shard of the entry store, and is taken by `add`, by a
//!      handle's `cancel` (the shard of its entry) and by each chunk of a flush (the shard it
//!      re-adds in); the *write* lock is every stripe in index order, taken by
//!      `advance_clock` to move the wheel's clocks and detach the due lists, and by
//!      `close`/`stop`;
//!   2. the delay queue's mutex (offers happen under a read lock; polls under none);
//!   3. the executor's job channel (a task is handed over under the lock that took it out
//!      of the store, so that `close` waits for it too).
//!
//!   `unfinished` is taken alone. No user code runs and no task is dropped under any lock:
//!   `delay_ms` is called before locking, tasks run on the executor thread, and tasks that
//!   are cancelled or closed away are dropped after the locks are released.
//! - `closed` only goes from false to true, under the write lock; `add`, `advance_clock`
//!   and each flush chunk read it under a lock, so none of them acts on a closed timer.
//! - An entry's life: `add` stores it in a slot of its thread's shard and appends it to a
//!   list (or, already expired, hands its task to the executor). The list is offered to the
//!   delay queue when its expiration changes. `advance_clock` polls due lists, moves the
//!   wheel's clocks and detaches each due list in every shard (write lock), then re-adds the
//!   detached entries a chunk at a time (read lock of the shard): into a finer list, or out
//!   of the store and to the executor. `cancel` takes the entry out of the store at any
//!   point before that. Whoever takes the task out of the store, under the shard's lock,
//!   owns it, so it is run or cancelled exactly once.
//! - Flushes run most urgent first: by the time the earliest entry of each detached list
//!   may be due. A flush whose entries are still far from due may be left unfinished in
//!   `unfinished` once a call has re-added [`FLUSH_BUDGET`] such entries; the next call goes on
//!   with it before it waits for anything. Lowest-level lists, whose entries are due, and
//!   flushes past half of their lead, always finish within the call.

use std::cmp::{Ordering as CmpOrdering, Reverse};
use std::collections::BinaryHeap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::Mutex;

use crate::delay_queue::{DelayQueue, Due};
use crate::entry_store::{Cleared, Entry, EntryStore, ShardState};
use crate::executor::Executor;
use crate::sharded_rw_lock::{ShardedRwLock, thread_hint};
use crate::time::hi_res_clock_ms_ceil;
use crate::timer_task_list::TimerTaskList;
use crate::timing_wheel::{Geometry, TimingWheel};
use crate::{AddError, SystemClock, Time, Timer, TimerTask, TimerTaskEntry};

/// Entries a flush re-adds per lock hold, so that an `add` or `cancel` on the same stripe
/// waits for at most one chunk. (At most one executor batch expires per chunk.)
const FLUSH_CHUNK: usize = 512;

/// Entries of flushes that are not yet urgent that one `advance_clock` call re-adds before
/// it returns, leaving the rest to the next call.
const FLUSH_BUDGET: usize = 8 * 1024;

/// How a flush is cut up: entries per lock hold, and entries of not-yet-urgent flushes per
/// `advance_clock` call.
#[derive(Clone, Copy, Debug)]
struct Chunking {
    chunk: usize,
    budget: usize,
}

impl Chunking {
    const DEFAULT: Chunking = Chunking {
        chunk: FLUSH_CHUNK,
        budget: FLUSH_BUDGET,
    };
}

/// How long `close` waits for tasks already handed to the executor (Kafka waits twice 5 s).
const CLOSE_WAIT: Duration = Duration::from_secs(10);

/// Kafka's `SystemTimer`: a hierarchical timing wheel with O(1) add and cancel, a delay
/// queue of buckets, and one executor thread that runs expired tasks.
///
/// Something must drive it: call [`advance_clock`](Timer::advance_clock) in a loop (Kafka's
/// `while (timer.advanceClock(200))`), or wrap it in a
/// [`SystemTimerReaper`](crate::SystemTimerReaper), which does that on its own thread.
///
/// # Examples
///
/// ```
/// use std::sync::mpsc;
/// use timingwheel::{timer_task, SystemTimer, Timer};
///
/// let timer = SystemTimer::new("example");
/// let (fired, fired_rx) = mpsc::channel();
/// let slow = timer.add(timer_task(60_000, || unreachable!("cancelled below")));
/// timer.add(timer_task(5, move || fired.send("done").unwrap()));
/// assert_eq!(timer.size(), 2);
///
/// assert!(slow.cancel());
/// while fired_rx.try_recv().is_err() {
///     timer.advance_clock(200);
/// }
/// assert_eq!(timer.size(), 0);
/// timer.close();
/// ```
///
/// # Differences from Kafka
///
/// - Expirations are computed from the instant `add` is called, rounded *up* to the next
///   millisecond, so with a 1 ms tick no task runs before that instant plus its delay.
///   (Kafka reads the clock after taking the lock and rounds down.)
/// - A task whose delay is zero or negative goes to the executor at once. (Kafka puts it
///   in the wheel if the wheel's clock lags, as it does after an idle spell, and it then
///   waits for the next `advance_clock`.)
/// - A closed timer refuses new tasks (their entries report [`cancelled`]), its
///   `advance_clock` returns false at once, and the tasks still waiting are dropped at
///   `close`. Kafka's throws `RejectedExecutionException` or keeps them forever.
/// - A panicking task is logged with `log::error!`.
///
/// [`cancelled`]: TimerTaskEntry::cancelled
pub struct SystemTimer {
    executor_name: String,
    time: Arc<dyn Time>,
    /// Lists by due time. Has its own lock.
    delay_queue: Arc<DelayQueue<Arc<TimerTaskList>>>,
    /// The wheel, behind Kafka's reader-writer lock, whose stripes are the shards of the
    /// entries (see the ground rules).
    timing_wheel: ShardedRwLock<TimingWheel>,
    /// Flushes an earlier `advance_clock` call left for the next one.
    unfinished: Mutex<Vec<Flush>>,
    /// How a flush is cut up: [`FLUSH_CHUNK`] and [`FLUSH_BUDGET`], smaller in unit tests.
    chunking: Chunking,
    executor: Executor,
    /// Set once, under the write lock of `timing_wheel`.
    closed: AtomicBool,
    /// The bound of [`SystemTimerBuilder::max_pending`], with the exact count of pending
    /// entries it is checked against (kept by the store).
    max_pending: Option<(usize, Arc<AtomicUsize>)>,
    /// Its gauge and counters (the `metrics` feature; empty without it).
    metrics: crate::metrics::TimerMetrics,
}

/// What a [`SystemTimer`] did since it was built: see [`SystemTimer::stats`].
///
/// Counted per shard under the locks `add` and `cancel` take anyway, so keeping them costs
/// an `add` nothing measurable; read without a lock, so a reading taken while other threads
/// add or flush may be a moment behind. Exact once the timer is quiet.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimerStats {
    /// Tasks the timer took (refused ones not counted).
    pub added: u64,
    /// Tasks handed to the executor, those whose delay was <= 0 included.
    pub expired: u64,
    /// Successful [`TimerTaskEntry::cancel`] calls.
    pub cancelled: u64,
    /// `add` and `try_add` calls that did not take their task.
    pub refused: u64,
    /// Tasks waiting: the same as [`size`](Timer::size).
    pub pending: u64,
}

impl SystemTimer {
    /// Creates a timer with tick 1 ms and wheel size 20, started at [`hi_res_clock_ms`],
    /// whose executor thread is named `executor-{executor_name}`.
    ///
    /// [`hi_res_clock_ms`]: crate::hi_res_clock_ms
    ///
    /// # Examples
    ///
    /// ```
    /// use timingwheel::{SystemTimer, Timer};
    ///
    /// let timer = SystemTimer::new("purgatory");
    /// assert_eq!(timer.size(), 0);
    /// ```
    pub fn new(executor_name: &str) -> SystemTimer {
        SystemTimer::builder(executor_name).build()
    }

    /// Creates a timer with the given tick, wheel size and start time (on the
    /// [`hi_res_clock_ms`] clock), like Kafka's four-argument constructor. A `start_ms`
    /// later than the clock is taken as the clock's reading, so that nothing runs early.
    ///
    /// [`hi_res_clock_ms`]: crate::hi_res_clock_ms
    ///
    /// # Examples
    ///
    /// ```
    /// use timingwheel::{hi_res_clock_ms, SystemTimer, Timer};
    ///
    /// let timer = SystemTimer::with_config("test", 1, 3, hi_res_clock_ms());
    /// assert_eq!(timer.size(), 0);
    /// ```
    ///
    /// # Panics
    ///
    /// Panics, naming the argument and its value, if `tick_ms <= 0` or `wheel_size == 0`,
    /// or if `wheel_size` is so large that the buckets of all levels would exceed 2^31.
    #[track_caller]
    pub fn with_config(
        executor_name: &str,
        tick_ms: i64,
        wheel_size: usize,
        start_ms: i64,
    ) -> SystemTimer {
        SystemTimer::builder(executor_name)
            .tick_ms(tick_ms)
            .wheel_size(wheel_size)
            .start_ms(start_ms)
            .build()
    }

    /// Returns a builder, for a timer on another clock (such as a
    /// [`MockTime`](crate::MockTime)) or with another tick and wheel size.
    ///
    /// # Examples
    ///
    /// ```
    /// use timingwheel::{timer_task, MockTime, SystemTimer, Timer};
    ///
    /// let time = MockTime::new();
    /// let timer = SystemTimer::builder("mocked").time(time.clone()).build();
    /// timer.add(timer_task(10, || {}));
    /// assert!(!timer.advance_clock(0), "nothing is due yet");
    /// time.sleep(10);
    /// assert!(timer.advance_clock(0));
    /// ```
    pub fn builder(executor_name: &str) -> SystemTimerBuilder {
        SystemTimerBuilder {
            executor_name: executor_name.to_owned(),
            tick_ms: 1,
            wheel_size: 20,
            start_ms: None,
            time: Arc::new(SystemClock),
            chunking: Chunking::DEFAULT,
            max_pending: None,
            executor_threads: 1,
        }
    }

    /// Returns the name given at creation (the executor thread is `executor-{name}`).
    pub fn executor_name(&self) -> &str {
        &self.executor_name
    }

    /// True once [`close`](Timer::close) was called.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Returns what the timer did since it was built: tasks added, expired, cancelled and
    /// refused, and how many wait now.
    ///
    /// Cheap: a few relaxed loads per shard, no lock. While other threads add, cancel or
    /// flush, a reading can lag them by a moment; once the timer is quiet it is exact, and
    /// `added == expired + cancelled + pending` until the timer is closed (closing drops
    /// the waiting tasks without counting them as expired or cancelled).
    ///
    /// # Examples
    ///
    /// ```
    /// use timingwheel::{timer_task, MockTime, SystemTimer, Timer, TimerStats};
    ///
    /// let time = MockTime::new();
    /// let timer = SystemTimer::builder("stats").time(time.clone()).max_pending(2).build();
    /// let a = timer.add(timer_task(10, || {}));
    /// timer.add(timer_task(20, || {}));
    /// timer.add(timer_task(30, || {})); // refused: two are pending
    /// assert!(a.cancel());
    /// time.sleep(20);
    /// while timer.advance_clock(0) {}
    /// let stats = timer.stats();
    /// assert_eq!(
    ///     stats,
    ///     TimerStats { added: 2, expired: 1, cancelled: 1, refused: 1, pending: 0 }
    /// );
    /// ```
    pub fn stats(&self) -> TimerStats {
        let counts = self.timing_wheel.counts();
        TimerStats {
            added: counts.added,
            expired: counts.expired,
            cancelled: counts.cancelled,
            refused: counts.refused,
            pending: self.size() as u64,
        }
    }
}

/// Kafka's `addTimerTaskEntry`: puts `entry` of `shard` into the wheel, or, if the wheel
/// says it is expired, takes its task out of the store and into `expired`.
fn add_timer_task_entry(
    wheel: &TimingWheel,
    shard: &mut ShardState,
    entry: Entry,
    expired: &mut Vec<Box<dyn TimerTask>>,
) {
    if !wheel.add(shard, entry) {
        expired.push(shard.remove(entry.index));
        shard.counts.expired += 1;
    }
}

/// A list being flushed: detached in every shard, its entries re-added a chunk at a time.
struct Flush {
    list: Arc<TimerTaskList>,
    /// When the list's earliest entry may be due: flushes run in this order.
    deadline_ms: i64,
    /// From then on the flush finishes within the call that works on it.
    urgent_ms: i64,
    /// The next stripe to take entries from.
    stripe: usize,
}

impl Flush {
    fn new(list: Arc<TimerTaskList>, due_ms: i64) -> Flush {
        let slack_ms = list.slack_ms();
        Flush {
            deadline_ms: due_ms.saturating_add(slack_ms),
            urgent_ms: due_ms.saturating_add(slack_ms / 2),
            stripe: 0,
            list,
        }
    }
}

impl PartialEq for Flush {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == CmpOrdering::Equal
    }
}
impl Eq for Flush {}
impl PartialOrd for Flush {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}
impl Ord for Flush {
    fn cmp(&self, other: &Self) -> CmpOrdering {
        (self.deadline_ms, self.list.id()).cmp(&(other.deadline_ms, other.list.id()))
    }
}

impl SystemTimer {
    /// Takes every due list out of `due` and the delay queue, moves the wheel's clocks to the
    /// latest clock reading among them, and detaches each list in every shard (write lock).
    /// Returns false if the timer is closed.
    fn begin_flushes(
        &self,
        due: &mut Vec<Due<Arc<TimerTaskList>>>,
        flushes: &mut BinaryHeap<Reverse<Flush>>,
    ) -> bool {
        while let Some(next) = self.delay_queue.poll() {
            due.push(next);
        }
        let mut write = self.timing_wheel.write();
        if self.is_closed() {
            return false;
        }
        if let Some(now_ms) = due.iter().map(|d| d.now_ms).max() {
            // The clock's reading, not the list's expiration (Kafka): one flush then
            // expires everything due, and the wheels never run ahead of the clock.
            write.value().advance_clock(now_ms, &write);
        }
        for Due {
            value: list,
            due_ms,
            ..
        } in due.drain(..)
        {
            // Queued again for another time since, or already flushed: stale.
            if list.expiration_ms() != due_ms {
                continue;
            }
            list.reset_expiration();
            for shard in write.shards_mut() {
                shard.detach(list.id());
            }
            flushes.push(Reverse(Flush::new(list, due_ms)));
        }
        true
    }

    /// Re-adds up to a chunk of entries of `flush`, one stripe at a time, handing the
    /// expired ones to the executor. Returns how many it re-added and whether the flush is
    /// done, or `None` if the timer is closed.
    fn flush_chunk(&self, flush: &mut Flush) -> Option<(usize, bool)> {
        let mut count = 0;
        while flush.stripe < self.timing_wheel.stripes() {
            let mut read = self.timing_wheel.read_stripe_urgent(flush.stripe);
            if self.is_closed() {
                return None;
            }
            let (wheel, shard) = read.parts();
            let mut expired = self.executor.batch();
            count += flush
                .list
                .flush(shard, self.chunking.chunk - count, |shard, entry| {
                    add_timer_task_entry(wheel, shard, entry, &mut expired);
                });
            // Handed over under the lock that took them out of the store, so that a `close`
            // waits for these tasks too; and once `size()` no longer counts them.
            read.publish_len();
            self.executor.submit_batch(expired);
            if count == self.chunking.chunk {
                return Some((count, false));
            }
            flush.stripe += 1;
        }
        Some((count, true))
    }
}

impl SystemTimer {
    /// `add` and `try_add`: takes `task` at `expiration_ms`, or says why not.
    fn insert(
        &self,
        task: Box<dyn TimerTask>,
        delay_ms: i64,
        expiration_ms: i64,
    ) -> Result<TimerTaskEntry, AddError> {
        let mut read = self.timing_wheel.read_stripe(thread_hint());
        if self.closed.load(Ordering::Acquire) {
            read.parts().1.counts.refused += 1;
            return Err(AddError::Closed(task));
        }
        let mut expired = Vec::new();
        if delay_ms <= 0 {
            // Already expired, whatever the wheel's clock says (see "Differences").
            let counts = &mut read.parts().1.counts;
            counts.added += 1;
            counts.expired += 1;
            expired.push(task);
        } else {
            if !self.reserve_pending() {
                read.parts().1.counts.refused += 1;
                return Err(AddError::Full(task));
            }
            if read.parts().1.is_full() {
                match self.stripe_with_room() {
                    Some(other) => read = other,
                    None => {
                        self.unreserve_pending();
                        read.parts().1.counts.refused += 1;
                        return Err(AddError::Full(task));
                    }
                }
            }
            let (wheel, shard) = read.parts();
            let key = shard.insert(task, expiration_ms);
            shard.counts.added += 1;
            let entry = Entry {
                index: key.index,
                expiration_ms,
            };
            add_timer_task_entry(wheel, shard, entry, &mut expired);
            if expired.is_empty() {
                return Ok(TimerTaskEntry::pending(read.shard(), key, expiration_ms));
            }
            read.publish_len();
        }
        // Still under the read lock, so a concurrent `close` waits for this hand-over and
        // then for the task.
        self.executor.submit_batch(expired);
        Ok(TimerTaskEntry::expired(expiration_ms))
    }

    /// Counts one more pending entry against `max_pending`; false, counting nothing, if
    /// the timer holds its maximum already.
    fn reserve_pending(&self) -> bool {
        match &self.max_pending {
            None => true,
            Some((max, pending)) => pending
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                    (n < *max).then_some(n + 1)
                })
                .is_ok(),
        }
    }

    /// Takes back a [`reserve_pending`](Self::reserve_pending) whose entry was not stored.
    fn unreserve_pending(&self) {
        if let Some((_, pending)) = &self.max_pending {
            pending.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// The instant of a call plus `delay_ms`, on the timer's clock, never early (see
    /// "Differences from Kafka").
    fn expiration_after(&self, delay_ms: i64) -> i64 {
        hi_res_clock_ms_ceil(&*self.time).saturating_add(delay_ms)
    }
}

impl Timer for SystemTimer {
    fn add(&self, task: Box<dyn TimerTask>) -> TimerTaskEntry {
        let delay_ms = task.delay_ms();
        let expiration_ms = self.expiration_after(delay_ms);
        match self.insert(task, delay_ms, expiration_ms) {
            Ok(entry) => entry,
            Err(refused) => {
                drop(refused);
                TimerTaskEntry::refused(expiration_ms)
            }
        }
    }

    fn try_add(&self, task: Box<dyn TimerTask>) -> Result<TimerTaskEntry, AddError> {
        let delay_ms = task.delay_ms();
        let expiration_ms = self.expiration_after(delay_ms);
        self.insert(task, delay_ms, expiration_ms)
    }

    fn reschedule(&self, entry: &TimerTaskEntry, delay_ms: i64) -> bool {
        let Some((shard, key)) = entry.location() else {
            return false;
        };
        let Some(stripe) = self.timing_wheel.stripe_of(shard) else {
            return false;
        };
        let expiration_ms = self.expiration_after(delay_ms);
        let mut read = self.timing_wheel.read_stripe(stripe);
        if self.is_closed() {
            return false;
        }
        let (wheel, state) = read.parts();
        let mut expired = Vec::new();
        if delay_ms <= 0 {
            let Some(task) = state.take(key) else {
                return false;
            };
            state.counts.expired += 1;
            expired.push(task);
        } else {
            let Some(moved) = state.reschedule(key, expiration_ms) else {
                return false;
            };
            add_timer_task_entry(wheel, state, moved, &mut expired);
        }
        entry.set_expiration(state, expiration_ms);
        if !expired.is_empty() {
            read.publish_len();
            self.executor.submit_batch(expired);
        }
        true
    }

    fn advance_clock(&self, timeout_ms: i64) -> bool {
        let _metrics = self.metrics.record_on_return(|| self.stats());
        if self.is_closed() {
            return false;
        }
        let mut flushes: BinaryHeap<Reverse<Flush>> =
            self.unfinished.lock().drain(..).map(Reverse).collect();
        let mut due = Vec::new();
        if flushes.is_empty() {
            match self.delay_queue.poll_timeout(timeout_ms) {
                Some(first) => due.push(first),
                None => return false,
            }
        }
        let mut flushed = false;
        let mut budget = self.chunking.budget;
        loop {
            if due.is_empty() {
                due.extend(self.delay_queue.poll());
            }
            if !due.is_empty() && !self.begin_flushes(&mut due, &mut flushes) {
                return flushed;
            }
            let Some(Reverse(mut flush)) = flushes.pop() else {
                return flushed;
            };
            let urgent = self.time.hi_res_clock_ms() >= flush.urgent_ms;
            if budget == 0 && !urgent {
                flushes.push(Reverse(flush));
                self.unfinished
                    .lock()
                    .extend(flushes.into_iter().map(|Reverse(f)| f));
                return true;
            }
            let Some((count, done)) = self.flush_chunk(&mut flush) else {
                return flushed;
            };
            flushed = true;
            if !urgent {
                budget = budget.saturating_sub(count);
            }
            if !done {
                flushes.push(Reverse(flush));
            }
        }
    }

    fn size(&self) -> usize {
        self.timing_wheel.len()
    }

    fn close(&self) {
        drop(self.shut_down());
    }

    fn stop(&self) -> Vec<Box<dyn TimerTask>> {
        self.shut_down().map_or_else(Vec::new, Cleared::into_tasks)
    }
}

impl SystemTimer {
    /// Returns the read lock of a stripe whose shard has room, for an `add` whose own
    /// stripe is full; `None` if every shard is full. Called with the own stripe locked:
    /// it only tries the others (never waiting for two locks at once).
    #[cold]
    fn stripe_with_room(&self) -> Option<crate::sharded_rw_lock::ReadGuard<'_, TimingWheel>> {
        (0..self.timing_wheel.stripes()).find_map(|stripe| {
            let mut read = self.timing_wheel.try_read_stripe(stripe)?;
            (!read.parts().1.is_full()).then_some(read)
        })
    }

    /// Closes the timer and returns what was still waiting (`None` if it was closed
    /// already), after waiting for the tasks already on the executor: in every caller,
    /// not only the one that closed it (Kafka's `close` awaits the executor in each call),
    /// up to one deadline that all callers share (see `Executor::wait_idle`).
    fn shut_down(&self) -> Option<Cleared> {
        let cleared = {
            // Taken also when closed already: a concurrent first caller may still be
            // clearing, and no task reaches the executor once `closed` is set under it.
            let mut write = self.timing_wheel.write();
            if self.closed.swap(true, Ordering::AcqRel) {
                None
            } else {
                self.delay_queue.close();
                let mut cleared = Cleared::default();
                for shard in write.shards_mut() {
                    cleared.absorb(shard.clear());
                }
                self.unfinished.lock().clear();
                Some(cleared)
            }
        };
        if let Some(cleared) = &cleared {
            log::debug!(
                "timer {}: closed with {} tasks still waiting",
                self.executor_name,
                cleared.len()
            );
        }
        let left = self.executor.wait_idle(CLOSE_WAIT);
        if left > 0 {
            log::warn!(
                "timer {}: {left} tasks still running after {CLOSE_WAIT:?}; not waiting longer",
                self.executor_name
            );
        }
        self.executor.shut_down(left == 0);
        self.metrics.record(&self.stats());
        cleared
    }
}

impl Drop for SystemTimer {
    fn drop(&mut self) {
        self.close();
    }
}

impl fmt::Debug for SystemTimer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SystemTimer")
            .field("executor_name", &self.executor_name)
            .field("size", &self.timing_wheel.len())
            .field("closed", &self.is_closed())
            .finish_non_exhaustive()
    }
}

/// Configures a [`SystemTimer`]; made by [`SystemTimer::builder`].
///
/// # Examples
///
/// ```
/// use timingwheel::{SystemTimer, Timer};
///
/// let timer = SystemTimer::builder("coarse").tick_ms(10).wheel_size(64).build();
/// assert_eq!(timer.size(), 0);
/// ```
#[derive(Debug)]
pub struct SystemTimerBuilder {
    executor_name: String,
    tick_ms: i64,
    wheel_size: usize,
    start_ms: Option<i64>,
    time: Arc<dyn Time>,
    chunking: Chunking,
    max_pending: Option<usize>,
    executor_threads: usize,
}

impl SystemTimerBuilder {
    /// Bounds the tasks that wait at once (Netty's `maxPendingTimeouts`): beyond
    /// `max_pending`, [`try_add`](Timer::try_add) returns [`AddError::Full`] and
    /// [`add`](Timer::add) a refused entry. A task whose delay is zero or negative never
    /// waits, so it is never refused for being full. Default: no bound but the storage's
    /// (2^24 tasks per shard).
    ///
    /// The count is exact across threads: a bounded timer keeps one more shared counter,
    /// which every add and every departure of a task updates.
    ///
    /// # Examples
    ///
    /// ```
    /// use timingwheel::{timer_task, SystemTimer, Timer};
    ///
    /// let timer = SystemTimer::builder("bounded").max_pending(1).build();
    /// let first = timer.add(timer_task(60_000, || {}));
    /// assert!(timer.add(timer_task(60_000, || {})).cancelled(), "refused: one is pending");
    /// assert!(timer.add(timer_task(0, || {})).cancelled() == false, "due now: never refused");
    /// assert!(first.cancel());
    /// assert!(timer.try_add(timer_task(60_000, || {})).is_ok(), "room again");
    /// ```
    pub fn max_pending(mut self, max_pending: usize) -> Self {
        self.max_pending = Some(max_pending);
        self
    }

    /// Sets the number of threads of the executor pool that runs expired tasks (default 1,
    /// as Kafka's `newFixedThreadPool(1)`). One thread is named `executor-{name}`; more are
    /// named `executor-{name}-{i}`, `i` from 0.
    ///
    /// With one thread, tasks run one after another in the order they expired. With more,
    /// a slow task holds up only its own thread: the tasks that expired with it run on the
    /// others, so tasks can run concurrently and out of expiry order. Exactly-once, the
    /// catching of panics and `close`'s waiting hold for any count; `close` called from a
    /// task waits for the other threads' tasks, not for its own.
    ///
    /// # Panics
    ///
    /// Panics if `threads` is 0.
    ///
    /// # Examples
    ///
    /// ```
    /// use timingwheel::{timer_task, SystemTimer, Timer};
    ///
    /// let timer = SystemTimer::builder("pool").executor_threads(4).build();
    /// let (tx, rx) = std::sync::mpsc::channel();
    /// timer.add(timer_task(0, move || {
    ///     tx.send(std::thread::current().name().map(str::to_owned)).unwrap()
    /// }));
    /// let name = rx.recv().unwrap().unwrap();
    /// assert!(name.starts_with("executor-pool-"), "{name}");
    /// ```
    #[track_caller]
    pub fn executor_threads(mut self, threads: usize) -> Self {
        assert!(
            threads > 0,
            "SystemTimerBuilder::executor_threads: threads must be positive, got {threads}"
        );
        self.executor_threads = threads;
        self
    }

    /// Sets the width of a bucket of the lowest wheel, in milliseconds (default 1).
    pub fn tick_ms(mut self, tick_ms: i64) -> Self {
        self.tick_ms = tick_ms;
        self
    }

    /// Sets the number of buckets per wheel (default 20).
    pub fn wheel_size(mut self, wheel_size: usize) -> Self {
        self.wheel_size = wheel_size;
        self
    }

    /// Sets the wheel's start time on the timer's clock (default: the clock's
    /// [`hi_res_clock_ms`](Time::hi_res_clock_ms) when [`build`](Self::build) is called).
    ///
    /// A start later than the clock is taken as the clock's reading: a wheel ahead of its
    /// clock would run tasks early. (Kafka takes it as given.)
    pub fn start_ms(mut self, start_ms: i64) -> Self {
        self.start_ms = Some(start_ms);
        self
    }

    /// Sets the clock the timer runs on (default [`SystemClock`]).
    pub fn time(mut self, time: impl Time + 'static) -> Self {
        self.time = Arc::new(time);
        self
    }

    /// Cuts flushes into chunks of `chunk` entries and stops each call's not-yet-urgent work
    /// after `budget` of them, so that tests can interleave adds and cancels with flushes.
    /// Both must be positive: every call then moves a flush on by a chunk at least.
    #[cfg(test)]
    fn chunking(mut self, chunk: usize, budget: usize) -> Self {
        assert!(chunk > 0 && budget > 0);
        self.chunking = Chunking { chunk, budget };
        self
    }

    /// Creates the timer and starts its executor thread.
    ///
    /// # Panics
    ///
    /// Panics, naming the argument and its value, if `tick_ms <= 0` or `wheel_size == 0`,
    /// or if `wheel_size` is so large that the buckets of all levels would exceed 2^31.
    #[track_caller]
    pub fn build(self) -> SystemTimer {
        let now_ms = self.time.hi_res_clock_ms();
        // A wheel ahead of its clock would take tasks due before its start for expired
        // and run them early (Kafka does); start it at the clock instead.
        let start_ms = self
            .start_ms
            .map_or(now_ms, |start_ms| start_ms.min(now_ms));
        let geometry = Arc::new(Geometry::new(self.tick_ms, self.wheel_size, start_ms));
        let delay_queue = Arc::new(DelayQueue::pruning(
            Arc::clone(&self.time),
            |list: &Arc<TimerTaskList>, due_ms| list.expiration_ms() != due_ms,
        ));
        let timing_wheel =
            TimingWheel::new(Arc::clone(&geometry), start_ms, Arc::clone(&delay_queue));
        log::debug!(
            "timer {}: started (tick {} ms, wheel size {}, start {start_ms})",
            self.executor_name,
            timing_wheel.tick_ms(),
            self.wheel_size
        );
        let max_pending = self
            .max_pending
            .map(|max| (max, Arc::new(AtomicUsize::new(0))));
        SystemTimer {
            metrics: crate::metrics::TimerMetrics::new(&self.executor_name),
            executor: Executor::new(
                &format!("executor-{}", self.executor_name),
                self.executor_threads,
            ),
            executor_name: self.executor_name,
            time: self.time,
            delay_queue,
            timing_wheel: ShardedRwLock::new(
                timing_wheel,
                EntryStore::default_shards(),
                Some(geometry),
                max_pending.as_ref().map(|(_, pending)| Arc::clone(pending)),
            ),
            unfinished: Mutex::new(Vec::new()),
            chunking: self.chunking,
            closed: AtomicBool::new(false),
            max_pending,
        }
    }
}

/// A model of the timer with its flushes cut into chunks of one to three entries and almost
/// no budget per call, so that adds, cancels and clock steps land between the chunks of a
/// flush. (`tests/model.rs` checks the timer against a model with full-size chunks.)
#[cfg(test)]
mod tests {
    use super::*;
    use crate::MockTime;
    use proptest::prelude::*;
    use std::sync::atomic::{AtomicI64, AtomicUsize};
    use std::sync::mpsc;

    #[derive(Clone, Debug)]
    enum Op {
        Add(i64),
        Cancel(usize),
        /// Move the clock, then call `advance_clock(0)` this many times (1 to 3).
        Step(i64, u8),
    }

    /// What happened to one task.
    #[derive(Default)]
    struct Record {
        runs: AtomicUsize,
        drops: AtomicUsize,
        ran_at_ms: AtomicI64,
    }

    struct Probe {
        delay_ms: i64,
        time: MockTime,
        record: Arc<Record>,
    }

    impl TimerTask for Probe {
        fn delay_ms(&self) -> i64 {
            self.delay_ms
        }
        fn run(self: Box<Self>) {
            self.record
                .ran_at_ms
                .store(self.time.hi_res_clock_ms(), Ordering::SeqCst);
            self.record.runs.fetch_add(1, Ordering::SeqCst);
        }
    }

    impl Drop for Probe {
        fn drop(&mut self) {
            self.record.drops.fetch_add(1, Ordering::SeqCst);
        }
    }

    struct Task {
        due_ms: i64,
        entry: TimerTaskEntry,
        record: Arc<Record>,
        cancelled: bool,
    }

    /// Waits until the executor has run everything handed to it so far.
    fn barrier(timer: &SystemTimer) {
        let (tx, rx) = mpsc::channel();
        timer.add(crate::timer_task(0, move || tx.send(()).unwrap()));
        rx.recv_timeout(Duration::from_secs(10))
            .expect("executor barrier");
    }

    /// Checks every task against the clock: a task ran iff its bucket's time has come and
    /// it was not cancelled (`drained`: the timer has nothing due left), never twice, never
    /// both run and cancelled.
    fn check(tasks: &[Task], now_ms: i64, drained: bool) {
        for (id, task) in tasks.iter().enumerate() {
            let runs = task.record.runs.load(Ordering::SeqCst);
            assert!(runs <= 1, "task {id} ran {runs} times");
            if runs == 1 {
                assert!(!task.cancelled, "task {id} ran and was cancelled");
                assert!(
                    task.due_ms <= now_ms,
                    "task {id} ran before its bucket's time"
                );
                assert!(task.record.ran_at_ms.load(Ordering::SeqCst) >= task.due_ms);
            } else if drained && !task.cancelled {
                assert!(task.due_ms > now_ms, "task {id} is due and did not run");
            }
        }
    }

    fn run_model(tick_ms: i64, wheel_size: usize, chunk: usize, budget: usize, ops: &[Op]) {
        let time = MockTime::new();
        let timer = SystemTimer::builder("chunks")
            .time(time.clone())
            .tick_ms(tick_ms)
            .wheel_size(wheel_size)
            .chunking(chunk, budget)
            .build();
        let mut tasks: Vec<Task> = Vec::new();
        for op in ops {
            match *op {
                Op::Add(delay_ms) => {
                    let record = Arc::new(Record::default());
                    let expiration_ms = time.hi_res_clock_ms() + delay_ms;
                    let entry = timer.add(Box::new(Probe {
                        delay_ms,
                        time: time.clone(),
                        record: Arc::clone(&record),
                    }));
                    tasks.push(Task {
                        due_ms: expiration_ms - expiration_ms.rem_euclid(tick_ms),
                        entry,
                        record,
                        cancelled: false,
                    });
                }
                Op::Cancel(k) if !tasks.is_empty() => {
                    let at = k % tasks.len();
                    let task = &mut tasks[at];
                    if task.entry.cancel() {
                        assert!(!task.cancelled, "task {at} cancelled twice");
                        assert_eq!(task.record.drops.load(Ordering::SeqCst), 1);
                        task.cancelled = true;
                    }
                }
                Op::Cancel(_) => {}
                Op::Step(ms, calls) => {
                    time.sleep(ms);
                    for _ in 0..calls {
                        timer.advance_clock(0);
                    }
                    barrier(&timer);
                    check(&tasks, time.hi_res_clock_ms(), false);
                }
            }
        }
        while timer.advance_clock(0) {}
        barrier(&timer);
        let now_ms = time.hi_res_clock_ms();
        check(&tasks, now_ms, true);
        let pending = tasks
            .iter()
            .filter(|t| !t.cancelled && t.record.runs.load(Ordering::SeqCst) == 0)
            .count();
        assert_eq!(timer.size(), pending);
        timer.close();
        for (id, task) in tasks.iter().enumerate() {
            assert_eq!(task.record.drops.load(Ordering::SeqCst), 1, "task {id}");
        }
    }

    /// Cases per run: 64, or `PROPTEST_CASES`.
    fn cases() -> u32 {
        std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|cases| cases.parse().ok())
            .unwrap_or(64)
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => prop_oneof![1..=40i64, 1..=3_000i64, 1..=200_000i64].prop_map(Op::Add),
            2 => any::<usize>().prop_map(Op::Cancel),
            3 => (prop_oneof![0..=30i64, 0..=3_000i64], 1..=3u8).prop_map(|(ms, calls)| Op::Step(ms, calls)),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(cases()))]

        #[test]
        fn adds_cancels_and_clock_steps_between_the_chunks_of_a_flush_agree_with_the_model(
            (tick_ms, wheel_size) in prop_oneof![Just((1, 20)), Just((1, 3)), Just((3, 2)), Just((2, 1))],
            chunk in 1..=3usize,
            budget in 1..=4usize,
            ops in proptest::collection::vec(op(), 1..300),
        ) {
            run_model(tick_ms, wheel_size, chunk, budget, &ops);
        }
    }
}
