//! [`SystemTimerBuilder`]: a `SystemTimer` with another tick, wheel size, start, clock,
//! bound or executor pool than Kafka's defaults.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize};

use super::SystemTimer;
use super::flush::{Chunking, Flusher};
use crate::metrics::TimerMetrics;
use crate::store::StripedRwLock;
use crate::threads::delay_queue::DelayQueue;
use crate::threads::executor::Executor;
use crate::time::{SystemClock, Time};
#[cfg(doc)]
use crate::timer::{AddError, Timer};
use crate::wheel::{Geometry, TimerTaskList, TimingWheel};

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
    /// False once `time` was given: only the default is known to be the system clock.
    system_clock: bool,
    chunking: Chunking,
    max_pending: Option<usize>,
    executor_threads: usize,
}

impl SystemTimerBuilder {
    /// Kafka's defaults: tick 1 ms, wheel size 20, started at the clock's reading when
    /// built, the system clock, one executor thread, no bound.
    pub(super) fn new(executor_name: &str) -> SystemTimerBuilder {
        SystemTimerBuilder {
            executor_name: executor_name.to_owned(),
            tick_ms: 1,
            wheel_size: 20,
            start_ms: None,
            time: Arc::new(SystemClock),
            system_clock: true,
            chunking: Chunking::DEFAULT,
            max_pending: None,
            executor_threads: 1,
        }
    }

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
        self.system_clock = false;
        self
    }

    /// Cuts flushes into chunks of `chunk` entries and stops each call's not-yet-urgent work
    /// after `budget` of them, so that tests can interleave adds and cancels with flushes.
    /// Both must be positive: every call then moves a flush on by a chunk at least.
    #[cfg(test)]
    pub(super) fn chunking(mut self, chunk: usize, budget: usize) -> Self {
        self.chunking = Chunking::new(chunk, budget);
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
        let timing_wheel = TimingWheel::new(geometry, start_ms, Arc::clone(&delay_queue));
        log::debug!(
            "timer {}: started (tick {} ms, wheel size {}, start {start_ms})",
            self.executor_name,
            timing_wheel.tick_ms(),
            self.wheel_size
        );
        let max_pending = self
            .max_pending
            .map(|max| (max, Arc::new(AtomicUsize::new(0))));
        let pending = max_pending.as_ref().map(|(_, pending)| Arc::clone(pending));
        SystemTimer {
            metrics: TimerMetrics::new(&self.executor_name),
            executor: Executor::new(
                &format!("executor-{}", self.executor_name),
                self.executor_threads,
            ),
            executor_name: self.executor_name,
            time: self.time,
            system_clock: self.system_clock,
            delay_queue,
            timing_wheel: StripedRwLock::new(
                timing_wheel,
                StripedRwLock::<TimingWheel>::default_stripes(),
                pending,
            ),
            flusher: Flusher::new(self.chunking),
            closed: AtomicBool::new(false),
            max_pending,
        }
    }
}
