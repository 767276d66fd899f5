//! Kafka's `SystemTimer`: a hierarchical timing wheel, a delay queue of its lists and an
//! executor. `add` and `advance_clock` read as Kafka's do, each step one file down: the
//! store keeps an entry, the wheel puts it in a list, the delay queue says when a list is
//! due, the flush moves the due lists' entries down the wheel or to the executor. Work Kafka
//! does not do has a file of its own: the chunked flush ([`flush`]) and the backlog of a
//! timer with `max_in_flight` ([`backlog`]).
//!
//! # Ground rules
//!
//! The lock order is in `crate::lock_order`. Here:
//!
//! - `closed` only goes from false to true, under the write lock; `add`, `reschedule`,
//!   `advance_clock` and each flush chunk read it under a lock, so none of them acts on a
//!   closed timer.
//! - An entry's life: `add` stores it in a slot of its thread's shard and appends it to a
//!   list (or, already expired, hands its task to the executor). The list is offered to the
//!   delay queue when its expiration changes. `advance_clock` polls due lists, moves the
//!   wheel's clocks and detaches each due list in every shard (write lock), then re-adds the
//!   detached entries a chunk at a time (read lock of the shard): into a finer list, or out
//!   of the store and to the executor. `cancel` and `reschedule` take the entry out of its
//!   list at any point before that. Whoever takes the task out of the store, under the
//!   shard's lock, owns it, so it is run or cancelled exactly once.

mod backlog;
mod builder;
mod flush;

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::delay_queue::deadline_after;
use crate::executor::Executor;
use crate::lateness::Lateness;
use crate::metrics::{TimerMetrics, TimerStats};
use crate::store::chunks::EntryKey;
use crate::store::shard::{Count, Entry, ReadGuard, Released, StripedRwLock, thread_hint};
use crate::task::{Expired, TimerTask, due_at_once};
use crate::time::{Time, TimerClock};
use crate::timer::{AddError, Timer};
use crate::timer_task_entry::TimerTaskEntry;
use crate::timing_wheel::{BucketQueue, TimingWheel};

pub use builder::SystemTimerBuilder;
use flush::{Expiring, Flusher, Parts, add_timer_task_entry};

/// Kafka's `SystemTimer`: a hierarchical timing wheel with O(1) add and cancel, a delay
/// queue of buckets, and an executor that runs expired tasks (a pool of its own of one
/// thread by default, as in Kafka).
///
/// Something must drive it: call [`advance_clock`](Timer::advance_clock) in a loop, or wrap
/// it in a [`SystemTimerReaper`](crate::SystemTimerReaper), which does that on its own thread as Kafka's reaper does
/// (`while (running) timer.advanceClock(200)`).
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
/// # Order of tasks due together
///
/// Tasks due in the same millisecond run in no promised order. Kafka's bucket keeps its
/// entries in insertion order; here a bucket's entries are kept per shard (adding threads
/// are spread over shards) and flushed shard by shard, a cancel moves the last entry of
/// its chain into the hole it leaves, and an entry that moved down from a coarser wheel
/// joins a finer bucket after the entries added to it directly. Within one shard and with
/// no cancels, entries that entered a bucket together come out in the order they entered.
/// With [`executor_threads`](SystemTimerBuilder::executor_threads) above 1, or on a
/// caller's executor, tasks due together also run concurrently.
///
/// # Where tasks run, and how far behind they may fall
///
/// By default on a thread of the timer's own, `executor-{name}`, as Kafka's
/// `newFixedThreadPool(1)`; [`executor_threads`](SystemTimerBuilder::executor_threads)
/// gives it more. [`threadpool`](SystemTimerBuilder::threadpool) runs them on a
/// `threadpool::ThreadPool` the service owns, and [`executor`](SystemTimerBuilder::executor)
/// on any executor (rayon, tokio's blocking pool, or inline on the driver's thread).
/// Like Kafka's, the executor takes every task that comes due, however far behind it
/// falls, and a task handed over can no longer be cancelled;
/// [`max_in_flight`](SystemTimerBuilder::max_in_flight) bounds that: beyond it, due tasks
/// wait in the timer, pending and cancellable. [`lateness`](SystemTimer::lateness) says how
/// late the tasks started, and [`next_expiration_ms`](SystemTimer::next_expiration_ms) when
/// the next one is due.
///
/// # Memory
///
/// An empty timer takes about 39 KiB of RSS, its executor thread included; each shard an
/// adding thread uses maps 128 KiB at its first add (4 shards per hardware thread, at most
/// 64): 177 KiB after one add, 1.1 MiB after adds from 32 threads on 2 hardware threads.
/// Share one timer rather than make one per connection. (Measured with `cargo run --release
/// --example footprint`: `docs/performance.md`, "Memory".)
///
/// # Flushing in chunks
///
/// Kafka moves a bucket's entries down when the bucket's range begins, all at once, under
/// the write lock. Here a bucket above the lowest wheel has two lists, and the first half
/// of its range moves down half a bucket early; a flush re-adds its entries a chunk of 64
/// at a time under one shard's lock, most urgent flush first, and one `advance_clock`
/// call re-adds at most 8,192 entries of flushes that are not yet urgent, leaving the rest
/// to the next call. So [`advance_clock`](Timer::advance_clock) can return true with no
/// task newly due (see its docs), and a million timers expiring together hold up neither
/// the threads that add nor the tasks that are due.
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
    /// Its clock: expirations are on it.
    clock: TimerClock,
    /// Lists by due time. Has its own lock.
    delay_queue: Arc<BucketQueue>,
    /// The wheel, behind Kafka's reader-writer lock; the lock's stripes are the shards that
    /// hold the entries (see `store::shard`).
    timing_wheel: StripedRwLock<TimingWheel>,
    /// Moves due lists' entries on, a chunk at a time, most urgent first.
    flusher: Flusher,
    executor: Executor,
    /// How long `close` waits for the executor's tasks
    /// ([`SystemTimerBuilder::close_timeout`]).
    close_timeout: Duration,
    /// Set once, under the write lock. Shared with the backlog, which takes no held task
    /// once it is set.
    closed: Arc<AtomicBool>,
    /// The bound of [`SystemTimerBuilder::max_pending`], with the exact count of pending
    /// entries it is checked against (kept by the store).
    max_pending: Option<(usize, Arc<AtomicUsize>)>,
    /// Its gauge and counters (the `metrics` feature; empty without it).
    metrics: TimerMetrics,
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
    /// or if `wheel_size` is so large that the buckets of all levels would exceed 2^31; and
    /// as [`SystemTimerBuilder::build`] does.
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
        SystemTimerBuilder::new(executor_name)
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
        TimerStats {
            pending: self.size() as u64,
            ..self.timing_wheel.shards().counts()
        }
    }

    /// Returns how late tasks started since the timer was built: each task's start on the
    /// executor minus its `expiration_ms`, in microseconds (count, median, 99th and 99.9th
    /// percentiles, maximum).
    ///
    /// The executor reads the timer's clock just before it runs each task, on the thread
    /// that runs it, so this is what the tasks saw: the wheel's tick, the driver's
    /// lateness, the wait for the executor (and, with
    /// [`max_in_flight`](SystemTimerBuilder::max_in_flight), in the backlog) all count.
    /// Percentiles are within 1.6 % of the exact ones (a histogram of fixed buckets, 15 KiB
    /// per timer); count and maximum are exact. A task that started early (by up to a tick
    /// coarser than 1 ms) counts as 0; one added with a negative delay counts as late by
    /// that delay. Cheap to read; counting costs each task a clock reading and two atomic
    /// operations (`docs/performance.md`). With the `metrics` feature, the same figures go
    /// to the histogram `timer_lateness_seconds`.
    ///
    /// # Examples
    ///
    /// ```
    /// use timingwheel::{timer_task, MockTime, SystemTimer, Timer};
    ///
    /// let time = MockTime::new();
    /// let timer = SystemTimer::builder("late")
    ///     .time(time.clone())
    ///     .executor(|job| job())
    ///     .build();
    /// timer.add(timer_task(10, || {}));
    /// time.sleep(13); // the driver comes 3 ms late
    /// timer.advance_clock(0);
    /// let lateness = timer.lateness();
    /// assert_eq!((lateness.count, lateness.max_us), (1, 3_000));
    /// ```
    pub fn lateness(&self) -> Lateness {
        self.executor.lateness()
    }

    /// Returns the earliest expiration among the pending tasks, exact (a task's own
    /// `expiration_ms`, not its bucket's start), or `None` when no task is pending: how long
    /// a caller that drives the timer from its own loop may sleep.
    ///
    /// Tasks held back by [`max_in_flight`](crate::SystemTimerBuilder::max_in_flight) are
    /// pending, and due: with any held, the result is at or before the clock's reading with
    /// a 1 ms tick, at most a tick after it with a coarser one.
    ///
    /// # Cost
    ///
    /// It locks the shards one at a time, briefly, and reads the expirations of the entries of the
    /// earliest lists: at the lowest level, the tasks due in the earliest millisecond that
    /// has any; when the earliest list is a coarser one (the next task is far away), that
    /// list's tasks; with tasks held, the oldest of each shard. Its cost grows with those
    /// lists' entries; adds and cancels pay nothing for it.
    ///
    /// While other threads add, cancel or flush, the result may miss what they do
    /// meanwhile; on a quiet timer it is exact.
    ///
    /// # Examples
    ///
    /// ```
    /// use timingwheel::{timer_task, MockTime, SystemTimer, Timer};
    ///
    /// let time = MockTime::new();
    /// let timer = SystemTimer::builder("loop").time(time.clone()).build();
    /// assert_eq!(timer.next_expiration_ms(), None);
    /// let now = time.hi_res_clock_ms();
    /// let soon = timer.add(timer_task(250, || {}));
    /// timer.add(timer_task(90_000, || {}));
    /// assert_eq!(timer.next_expiration_ms(), Some(now + 250));
    /// soon.cancel();
    /// assert_eq!(timer.next_expiration_ms(), Some(now + 90_000));
    /// ```
    pub fn next_expiration_ms(&self) -> Option<i64> {
        let mut candidates = {
            let read = self.timing_wheel.read(thread_hint());
            let mut lists = Vec::new();
            read.value().queued_lists(&mut lists);
            lists
        };
        self.flusher.unfinished_lists(&mut candidates);
        // One read per list, at its lowest bound, in the order of the bounds.
        candidates.sort_unstable_by_key(|&(lower_ms, id)| (id, lower_ms));
        candidates.dedup_by_key(|&mut (_, id)| id);
        candidates.sort_unstable();
        let mut earliest: Option<i64> = None;
        for stripe in 0..self.timing_wheel.stripes() {
            let mut read = self.timing_wheel.read(stripe);
            let shard = read.shard();
            earliest = earliest.into_iter().chain(shard.oldest_held_ms()).min();
            for &(lower_ms, id) in &candidates {
                if earliest.is_some_and(|earliest| lower_ms >= earliest) {
                    break;
                }
                if let Some(min) = shard.min_expiration(id) {
                    earliest = Some(earliest.map_or(min, |earliest| earliest.min(min)));
                }
            }
        }
        earliest
    }

    /// Returns how many times its flushes moved an entry on to another list instead of
    /// expiring it, since the timer was built: down a level of the wheel, or on to a later
    /// list after a [`reschedule`](Timer::reschedule) pushed its deadline back. (A
    /// reschedule to a later deadline leaves the entry where it is, and its list's flush
    /// re-places it: at most once per list it passes, however often it is pushed back.)
    ///
    /// # Examples
    ///
    /// ```
    /// use timingwheel::{timer_task, MockTime, SystemTimer, Timer};
    ///
    /// let time = MockTime::new();
    /// let timer = SystemTimer::builder("heartbeats").time(time.clone()).build();
    /// let session = timer.add(timer_task(10, || {}));
    /// for _ in 0..100 {
    ///     time.sleep(1);
    ///     assert!(timer.reschedule(&session, 10)); // a heartbeat pushes the deadline back
    ///     timer.advance_clock(0);
    /// }
    /// assert_eq!(timer.size(), 1, "never expired");
    /// // Moved on each time its list came due, about every 10 ms, not at every heartbeat.
    /// assert!(timer.cascades() <= 10, "{}", timer.cascades());
    /// ```
    pub fn cascades(&self) -> u64 {
        self.timing_wheel.shards().count(Count::Cascaded)
    }

    /// Returns the bytes of memory the timer holds for its pending entries: their slots
    /// and their places in the wheel's lists, not the tasks themselves (each task is the
    /// caller's `Box`).
    ///
    /// The timer maps this memory from the operating system itself, in 64 KiB chunks, and
    /// unmaps a chunk as soon as its last entry leaves (keeping at most one empty chunk of
    /// slots and one of list blocks per shard), so this follows the pending entries and is
    /// resident memory (RSS) of the process, not memory kept by the heap's allocator. Locks
    /// each shard briefly.
    ///
    /// # Examples
    ///
    /// ```
    /// use timingwheel::{timer_task, SystemTimer, Timer};
    ///
    /// let timer = SystemTimer::new("memory");
    /// let empty = timer.storage_bytes();
    /// let entries: Vec<_> = (0..10_000).map(|_| timer.add(timer_task(60_000, || {}))).collect();
    /// assert!(timer.storage_bytes() >= empty + 10_000 * 32, "a 32-byte slot each, at least");
    /// entries.iter().for_each(|entry| assert!(entry.cancel()));
    /// assert!(timer.storage_bytes() <= empty + 512 * 1024, "given back but a spare per shard");
    /// ```
    pub fn storage_bytes(&self) -> usize {
        self.timing_wheel.shards().mapped_bytes()
    }
}

/// Counts a refusal in `read`'s shard and returns `error`.
#[cold]
fn refuse(read: ReadGuard<'_, TimingWheel>, error: AddError) -> AddError {
    read.count(Count::Refused, 1);
    error
}

impl SystemTimer {
    /// `add`, `try_add` and `try_add_unbounded`: takes `task`, due `delay_ms` from now, or says
    /// why not; refuses it for `max_pending` only if `bounded`.
    #[inline]
    fn insert(
        &self,
        task: Box<dyn TimerTask>,
        delay_ms: i64,
        bounded: bool,
    ) -> Result<TimerTaskEntry, AddError> {
        let expiration_ms = self.expiration_after(delay_ms);
        let read = self.timing_wheel.read(thread_hint());
        if self.is_closed() {
            return Err(refuse(read, AddError::Closed(task)));
        }
        // Due at once, or when the wheel says (only a tick coarser than 1 ms can make a
        // positive delay expired at its add).
        let placement = if due_at_once(delay_ms) {
            None
        } else {
            read.value().place(expiration_ms)
        };
        let Some(placement) = placement else {
            return self.insert_due(read, task, expiration_ms);
        };
        if !self.reserve_pending(bounded) {
            return Err(refuse(read, AddError::Full(task)));
        }
        let mut read = read;
        let id = placement.list.id();
        let key = match read.shard().insert(task, expiration_ms, id) {
            Ok(key) => key,
            Err(task) => {
                // A read lock is held throughout, so the wheel's clocks do not move:
                // `placement` holds in any shard.
                let (mut other, key) = self.elsewhere(read, task, expiration_ms, Some(id))?;
                placement.joined();
                return Ok(TimerTaskEntry::pending(
                    other.home(),
                    other.shard(),
                    key,
                    expiration_ms,
                ));
            }
        };
        read.count(Count::Added, 1);
        placement.joined();
        Ok(TimerTaskEntry::pending(
            read.home(),
            read.shard(),
            key,
            expiration_ms,
        ))
    }

    /// `insert` for a task already expired: hands it to the executor; or, on a timer with
    /// `max_in_flight`, stores it and holds it like any task that comes due (see
    /// [`Expiring`]).
    #[cold]
    fn insert_due(
        &self,
        read: ReadGuard<'_, TimingWheel>,
        task: Box<dyn TimerTask>,
        expiration_ms: i64,
    ) -> Result<TimerTaskEntry, AddError> {
        if !self.executor.is_bounded() {
            read.count(Count::Added, 1);
            read.count(Count::Expired, 1);
            // Counted under the read lock, so a concurrent `close` waits for the task; sent
            // once the lock is released (see `Executor::hand_over`).
            let handover = self.executor.hand_over_one(Expired {
                task,
                expiration_ms,
            });
            drop(read);
            handover.send();
            return Ok(TimerTaskEntry::expired(expiration_ms));
        }
        // A due task never waits, so it is never refused for being full: held, it counts as
        // pending, past `max_pending` if need be.
        self.reserve_pending(false);
        let mut read = read;
        let (mut read, key) = match read.shard().insert_unlisted(task, expiration_ms) {
            Ok(key) => {
                read.count(Count::Added, 1);
                (read, key)
            }
            Err(task) => self.elsewhere(read, task, expiration_ms, None)?,
        };
        let mut expiring = Expiring::unbatched(&self.executor);
        let index = key.index;
        expiring.expire(
            read.shard(),
            Entry {
                index,
                expiration_ms,
            },
        );
        let handle = TimerTaskEntry::pending(read.home(), read.shard(), key, expiration_ms);
        expiring.finish(&self.executor, read);
        Ok(handle)
    }

    /// For an insert whose own shard (`own`, locked) is full: stores `task` in list `list`
    /// (`None`: in no list) of another shard with room, whose read lock it returns with `own`
    /// released; or refuses `task`, giving back its `max_pending` place, if every shard is
    /// full. It only tries the others while `own` is held, never waiting for two locks.
    #[cold]
    fn elsewhere<'a>(
        &'a self,
        own: ReadGuard<'a, TimingWheel>,
        task: Box<dyn TimerTask>,
        expiration_ms: i64,
        list: Option<u32>,
    ) -> Result<(ReadGuard<'a, TimingWheel>, EntryKey), AddError> {
        let other = (0..self.timing_wheel.stripes()).find_map(|stripe| {
            let mut other = self.timing_wheel.try_read(stripe)?;
            (!other.shard().is_full()).then_some(other)
        });
        let Some(mut other) = other else {
            if let Some((_, pending)) = &self.max_pending {
                pending.fetch_sub(1, Ordering::AcqRel);
            }
            return Err(refuse(own, AddError::Full(task)));
        };
        drop(own);
        let key = match list {
            Some(id) => other.shard().insert(task, expiration_ms, id),
            None => other.shard().insert_unlisted(task, expiration_ms),
        };
        let Ok(key) = key else {
            unreachable!("a shard with room took no entry")
        };
        other.count(Count::Added, 1);
        Ok((other, key))
    }

    /// Counts one more pending entry against `max_pending`; false, counting nothing, if
    /// the timer holds its maximum already and the entry is `bounded`.
    fn reserve_pending(&self, bounded: bool) -> bool {
        let Some((max, pending)) = &self.max_pending else {
            return true;
        };
        let bump = |n| (n < *max || !bounded).then_some(n + 1);
        pending
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, bump)
            .is_ok()
    }

    /// The instant of a call plus `delay_ms`, on the timer's clock, never early (see
    /// "Differences from Kafka").
    #[inline]
    fn expiration_after(&self, delay_ms: i64) -> i64 {
        self.clock.ms_ceil().saturating_add(delay_ms)
    }

    /// One turn of a driver shared with other timers (`SharedSystemTimerReaper`): flushes
    /// what is due without waiting, at most one flush budget of entries, and returns when
    /// the timer next needs a turn: at once with work left, until its earliest due list, or
    /// `None` with nothing queued (or once closed).
    pub(crate) fn turn(&self) -> Option<Duration> {
        let _metrics = self.metrics.record_on_return(|| self.stats());
        if self.is_closed() {
            return None;
        }
        self.flusher
            .flush(self.delay_queue.poll(), &self.parts(), true);
        if self.flusher.has_unfinished() {
            return Some(Duration::ZERO);
        }
        self.delay_queue.time_until_head()
    }

    /// Calls `wake` when an add (or a reschedule) makes a list due earlier than every list
    /// queued before: what wakes a driver shared with other timers.
    pub(crate) fn set_waker(&self, wake: impl Fn() + Send + Sync + 'static) {
        self.delay_queue.set_waker(wake);
    }

    /// The parts of the timer a flush works on.
    fn parts(&self) -> Parts<'_> {
        Parts {
            queue: &self.delay_queue,
            wheel: &self.timing_wheel,
            executor: &self.executor,
            closed: &self.closed,
            time: &*self.clock.time,
        }
    }

    /// Closes the timer and returns what was still waiting (`None` if it was closed
    /// already), after waiting for the tasks already on the executor: in every caller,
    /// not only the one that closed it (Kafka's `close` awaits the executor in each call),
    /// up to one deadline that all callers share (see `Executor::wait_idle`).
    fn shut_down(&self) -> Option<Released> {
        let cleared = {
            // Taken also when closed already: a concurrent first caller may still be
            // clearing, and no task reaches the executor once `closed` is set under it.
            let mut write = self.timing_wheel.write();
            if self.closed.swap(true, Ordering::AcqRel) {
                None
            } else {
                self.delay_queue.close();
                self.flusher.forget_unfinished();
                let mut cleared = Released::default();
                write
                    .shards_mut()
                    .iter_mut()
                    .for_each(|s| cleared.absorb(s.clear()));
                Some(cleared)
            }
        };
        if let Some(cleared) = &cleared {
            let waiting = cleared.task_count();
            log::debug!(
                "timer {}: closed, {waiting} tasks waiting",
                self.executor_name
            );
        }
        let left = self.executor.wait_idle(self.close_timeout);
        // Once per timer: later closes, and the drop, give up at the same deadline.
        if left > 0 && self.executor.first_give_up() {
            log::warn!(
                "timer {}: {left} tasks handed to the executor still unfinished after {:?}; \
                 not waiting longer",
                self.executor_name,
                self.close_timeout,
            );
        }
        self.executor.shut_down(left == 0);
        self.metrics.record(&self.stats());
        cleared
    }
}

impl Timer for SystemTimer {
    fn add(&self, task: Box<dyn TimerTask>) -> TimerTaskEntry {
        let delay_ms = task.delay_ms();
        self.insert(task, delay_ms, true)
            .unwrap_or_else(|_| TimerTaskEntry::refused(self.expiration_after(delay_ms)))
    }

    fn try_add(&self, task: Box<dyn TimerTask>) -> Result<TimerTaskEntry, AddError> {
        let delay_ms = task.delay_ms();
        self.insert(task, delay_ms, true)
    }

    fn try_add_unbounded(&self, task: Box<dyn TimerTask>) -> Result<TimerTaskEntry, AddError> {
        let delay_ms = task.delay_ms();
        self.insert(task, delay_ms, false)
    }

    fn reschedule(&self, entry: &TimerTaskEntry, delay_ms: i64) -> bool {
        let Some((shard, key)) = entry.location() else {
            return false;
        };
        let Some(stripe) = self.timing_wheel.stripe_of(shard) else {
            return false;
        };
        let expiration_ms = self.expiration_after(delay_ms);
        let mut read = self.timing_wheel.read(stripe);
        if self.is_closed() {
            return false;
        }
        let timing_wheel = read.value();
        let state = read.shard();
        // A later deadline is a store: the entry stays in its list, whose flush re-places it
        // by its own expiration. A due one goes to the executor inside the call.
        let due = due_at_once(delay_ms);
        let Some(moved) = state.reschedule(key, expiration_ms, !due) else {
            return false;
        };
        entry.set_expiration(state, expiration_ms);
        let Some(moved) = moved else {
            return true;
        };
        let mut expiring = Expiring::unbatched(&self.executor);
        if due {
            expiring.expire(state, moved);
        } else {
            add_timer_task_entry(timing_wheel, state, moved, &mut expiring);
        }
        if expiring.len() > 0 {
            expiring.finish(&self.executor, read);
        }
        true
    }

    fn advance_clock(&self, timeout_ms: i64) -> bool {
        let _metrics = self.metrics.record_on_return(|| self.stats());
        let deadline = deadline_after(timeout_ms);
        while !self.is_closed() {
            // A due list, or (with a flush left unfinished) a short pause first.
            let Some(first) = self.flusher.poll(&self.delay_queue, deadline) else {
                return false;
            };
            // Moves the clocks, then every due list's entries down the wheel or to the
            // executor: Kafka's `while (bucket != null)` loop, in chunks (see `flush`).
            if self.flusher.flush(first, &self.parts(), false) {
                return true;
            }
            // Nothing was flushed: the lists that came due went stale after the poll took
            // them (queued again, or flushed by another driver), or the timer was closed.
            // An open timer waits on for the rest of the timeout, as `Timer::advance_clock`
            // promises, and flushes a list that comes due meanwhile.
            if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                return false;
            }
        }
        false
    }

    fn size(&self) -> usize {
        match &self.max_pending {
            // A bounded timer keeps the count exactly, one shared counter: never a moment
            // above the bound (but for due tasks held), as a sum of the shards' could be.
            Some((_, pending)) => pending.load(Ordering::Acquire),
            None => self.timing_wheel.shards().counts().pending as usize,
        }
    }

    fn close(&self) {
        drop(self.shut_down());
    }

    fn stop(&self) -> Vec<Box<dyn TimerTask>> {
        self.shut_down().map_or_else(Vec::new, Released::into_tasks)
    }

    fn clock(&self) -> Arc<dyn Time> {
        Arc::clone(&self.clock.time)
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
            .field("size", &self.size())
            .field("closed", &self.is_closed())
            .finish_non_exhaustive()
    }
}
