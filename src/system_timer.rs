//! Kafka's `SystemTimer`: a hierarchical timing wheel, a delay queue of buckets and an
//! executor.
//!
//! # Ground rules
//!
//! - `timing_wheel` is Kafka's reader-writer lock around the wheel, with its read side
//!   striped ([`ShardedRwLock`]): [`Timer::add`] holds the read lock of its thread's stripe
//!   (so adds on different threads share no lock word), [`Timer::advance_clock`] and
//!   [`Timer::close`] hold the write lock, every stripe, for their whole run. A flush
//!   therefore never sees a concurrent add, as in Kafka. Lock order: the wheel lock, then
//!   one shard of the entry store, then the delay queue's mutex. No user code runs, and no
//!   task is dropped, under any of them.
//! - `closed` only goes from false to true, under the write lock; `add` and
//!   `advance_clock` read it under the lock, so none of them acts on a closed timer.
//! - An entry's life: `add` stores it in a shard and links it into a bucket (or, already
//!   expired, hands its task straight to the executor). The bucket is offered to the delay
//!   queue when its expiration changes. `advance_clock` takes due buckets from the queue,
//!   advances the wheels to each one's expiration and re-adds its entries: into a finer
//!   bucket, or out of the store and to the executor. `cancel` takes the entry out of the
//!   store at any point before that. Whoever takes the task out of the store, under the
//!   shard's lock, owns it, so it is run or cancelled exactly once.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::delay_queue::DelayQueue;
use crate::entry_store::{EntryStore, Released, Slab, thread_hint};
use crate::executor::Executor;
use crate::sharded_rw_lock::ShardedRwLock;
use crate::time::hi_res_clock_ms_ceil;
use crate::timer_task_entry::EntryOwner;
use crate::timing_wheel::{BucketQueue, TimingWheel};
use crate::{SystemClock, Time, Timer, TimerTask, TimerTaskEntry};

/// Expired tasks handed to the executor per job during a flush.
const EXECUTOR_BATCH: usize = 1024;

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
    /// The entries. Its shards have their own locks (see the `entry_store` module).
    store: EntryStore,
    /// Due buckets. Has its own lock.
    delay_queue: Arc<BucketQueue>,
    /// Read for `add`, write for `advance_clock` and `close`.
    timing_wheel: ShardedRwLock<TimingWheel>,
    executor: Executor,
    /// Set once, under the write lock of `timing_wheel`.
    closed: AtomicBool,
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
}

/// Kafka's `addTimerTaskEntry`: puts the entry in slot `index` into the wheel, or, if the
/// wheel says it is expired, takes its task out of the store and into `expired`.
fn add_timer_task_entry(
    wheel: &TimingWheel,
    slab: &mut Slab,
    index: u32,
    expired: &mut Vec<Box<dyn TimerTask>>,
) {
    if !wheel.add(slab, index) {
        expired.push(slab.remove(index));
    }
}

impl Timer for SystemTimer {
    fn add(&self, task: Box<dyn TimerTask>) -> TimerTaskEntry {
        let delay_ms = task.delay_ms();
        let expiration_ms = hi_res_clock_ms_ceil(&*self.time).saturating_add(delay_ms);
        // The thread's stripe of the wheel lock and its shard of the store share one index.
        let hint = thread_hint();
        let wheel = self.timing_wheel.read_stripe(hint);
        if self.closed.load(Ordering::Acquire) {
            drop(wheel);
            drop(task);
            return TimerTaskEntry::refused(expiration_ms);
        }
        if delay_ms <= 0 {
            // Already expired, whatever the wheel's clock says (see "Differences"). Still
            // under the read lock, so a concurrent `close` waits for this hand-over and
            // then for the task.
            self.executor.submit(task);
            return TimerTaskEntry::expired(expiration_ms);
        }
        let shard = self.store.shard_for(hint);
        let mut slab = shard.lock();
        let key = slab.insert(task, expiration_ms);
        if wheel.add(&mut slab, key.index) {
            drop(slab);
            let owner: Arc<dyn EntryOwner> = Arc::<crate::entry_store::Shard>::clone(shard);
            TimerTaskEntry::pending(owner, key, expiration_ms)
        } else {
            let task = slab.remove(key.index);
            drop(slab);
            // Still under the read lock, as above.
            self.executor.submit(task);
            TimerTaskEntry::expired(expiration_ms)
        }
    }

    fn advance_clock(&self, timeout_ms: i64) -> bool {
        if self.is_closed() {
            return false;
        }
        let Some(first) = self.delay_queue.poll_timeout(timeout_ms) else {
            return false;
        };
        let wheel = self.timing_wheel.write();
        if self.is_closed() {
            return false;
        }
        let mut expired = Vec::new();
        let mut released = Released::default();
        let mut next = Some(first);
        while let Some((bucket, due_ms)) = next {
            // The due time the bucket was queued with, not its expiration now: the queue
            // only hands out items due by the clock, so the wheels never run ahead of it.
            wheel.advance_clock(due_ms, &wheel.proof());
            released.absorb(bucket.flush(&self.store, |slab, index| {
                add_timer_task_entry(&wheel, slab, index, &mut expired);
                if expired.len() >= EXECUTOR_BATCH {
                    self.executor.submit_batch(std::mem::take(&mut expired));
                }
            }));
            next = self.delay_queue.poll();
        }
        // Handed over under the write lock, so that a `close` waits for these tasks too.
        self.executor.submit_batch(expired);
        drop(wheel);
        // Freed last, outside the lock: the expired tasks are already on their way.
        drop(released);
        true
    }

    fn size(&self) -> usize {
        self.store.len()
    }

    fn close(&self) {
        drop(self.shut_down());
    }

    fn stop(&self) -> Vec<Box<dyn TimerTask>> {
        self.shut_down()
            .map_or_else(Vec::new, crate::entry_store::Cleared::into_tasks)
    }
}

impl SystemTimer {
    /// Closes the timer and returns what was still waiting (`None` if it was closed
    /// already), after waiting for the tasks already on the executor: in every caller,
    /// not only the one that closed it (Kafka's `close` awaits the executor in each call),
    /// up to one deadline that all callers share (see `Executor::wait_idle`).
    fn shut_down(&self) -> Option<crate::entry_store::Cleared> {
        let cleared = {
            // Taken also when closed already: a concurrent first caller may still be
            // clearing, and no task reaches the executor once `closed` is set under it.
            let _wheel = self.timing_wheel.write();
            if self.closed.swap(true, Ordering::AcqRel) {
                None
            } else {
                self.delay_queue.close();
                Some(self.store.clear())
            }
        };
        if let Some(cleared) = &cleared {
            log::debug!(
                "timer {}: closed with {} tasks still waiting",
                self.executor_name,
                cleared.len()
            );
        }
        if !self.executor.is_current_thread() {
            let left = self.executor.wait_idle(CLOSE_WAIT);
            if left > 0 {
                log::warn!(
                    "timer {}: {left} tasks still running after {CLOSE_WAIT:?}; not waiting longer",
                    self.executor_name
                );
            }
        }
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
            .field("size", &self.store.len())
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
}

impl SystemTimerBuilder {
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
        let delay_queue = Arc::new(DelayQueue::new(Arc::clone(&self.time)));
        let timing_wheel = TimingWheel::new(
            self.tick_ms,
            self.wheel_size,
            start_ms,
            Arc::clone(&delay_queue),
        );
        log::debug!(
            "timer {}: started (tick {} ms, wheel size {}, start {start_ms})",
            self.executor_name,
            timing_wheel.tick_ms(),
            self.wheel_size
        );
        let store = EntryStore::new();
        // One read stripe per shard: a thread's stripe and shard are the same index.
        let stripes = store.shards().len();
        SystemTimer {
            executor: Executor::new(format!("executor-{}", self.executor_name)),
            executor_name: self.executor_name,
            time: self.time,
            store,
            delay_queue,
            timing_wheel: ShardedRwLock::new(timing_wheel, stripes),
            closed: AtomicBool::new(false),
        }
    }
}
