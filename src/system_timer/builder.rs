//! [`SystemTimerBuilder`]: a `SystemTimer` with another tick, wheel size, start, clock,
//! bound or executor than Kafka's defaults.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::time::Duration;

use super::SystemTimer;
use super::backlog::Backlog;
use super::flush::Flusher;
use crate::delay_queue::DelayQueue;
use crate::executor::{Executor, ExecutorKind, HeldTasks};
use crate::lateness::LatenessHistogram;
use crate::metrics::TimerMetrics;
use crate::store::shard::StripedRwLock;
use crate::time::{Time, TimerClock};
#[cfg(doc)]
use crate::timer::{AddError, Timer};
use crate::timer_task_list::TimerTaskList;
use crate::timing_wheel::{Geometry, TimingWheel};

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
    clock: TimerClock,
    flusher: Flusher,
    max_pending: Option<usize>,
    executor: ExecutorKind,
    max_in_flight: Option<usize>,
    close_timeout: Duration,
}

impl SystemTimerBuilder {
    /// Kafka's defaults: tick 1 ms, wheel size 20, started at the clock's reading when
    /// built, the system clock, one executor thread, no bounds, `close` waiting up to 10 s.
    pub(super) fn new(executor_name: &str) -> SystemTimerBuilder {
        SystemTimerBuilder {
            executor_name: executor_name.to_owned(),
            tick_ms: 1,
            wheel_size: 20,
            start_ms: None,
            clock: TimerClock::system(),
            flusher: Flusher::default(),
            max_pending: None,
            executor: ExecutorKind::Threads(1),
            max_in_flight: None,
            close_timeout: Duration::from_secs(10),
        }
    }

    /// Bounds the tasks that wait at once (Netty's `maxPendingTimeouts`): beyond
    /// `max_pending`, [`try_add`](Timer::try_add) returns [`AddError::Full`] and
    /// [`add`](Timer::add) a refused entry. A task whose delay is zero or negative never
    /// waits, so it is never refused for being full, unless
    /// [`max_in_flight`](Self::max_in_flight) makes it wait. Nor is a task added with
    /// [`try_add_unbounded`](Timer::try_add_unbounded), such as a periodic schedule's next
    /// tick: each live schedule may hold one place over the bound. Default: no bound but
    /// the storage's (2^24 tasks per shard).
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
    /// named `executor-{name}-{i}`, `i` from 0. The timer starts these threads and joins
    /// them when it closes.
    ///
    /// With one thread, tasks run one after another in the order they expired. With more,
    /// a slow task holds up only its own thread: the tasks that expired with it run on the
    /// others, so tasks can run concurrently and out of expiry order. Exactly-once, the
    /// catching of panics and `close`'s waiting hold for any count; `close` called from a
    /// task waits for the other threads' tasks, not for its own.
    ///
    /// This, [`threadpool`](Self::threadpool) and [`executor`](Self::executor) each say
    /// where expired tasks run: the last one called wins.
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
        self.executor = ExecutorKind::Threads(threads);
        self
    }

    /// Runs expired tasks on `pool`, a [`threadpool::ThreadPool`] the caller owns and may
    /// share with other work: a service's request work and its timeouts on one pool.
    ///
    /// The timer starts no thread of its own to run tasks, and never names or joins the
    /// pool's threads. Each expired task is a job of its own (`pool.execute`), so tasks due
    /// together run concurrently, in no order, as the pool's threads allow. Exactly-once and
    /// the catching and logging of a task's panic hold as on the built-in pool (the pool
    /// never sees the panic). [`close`](Timer::close) and [`stop`](Timer::stop) wait, within
    /// their bound, for the tasks this timer handed to the pool, not for the pool's other
    /// work; called from one of those tasks, they wait for the ones already running on
    /// other threads, not for those still queued in the pool (they may be queued behind
    /// the caller). Dropping the timer does not stop the pool.
    ///
    /// Replaces [`executor_threads`](Self::executor_threads) and
    /// [`executor`](Self::executor): the last one called wins.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::mpsc;
    /// use timingwheel::threadpool::ThreadPool; // re-exported: the version the timer takes
    /// use timingwheel::{timer_task, SystemTimer, Timer};
    ///
    /// let pool = ThreadPool::with_name("service".into(), 4);
    /// let timer = SystemTimer::builder("timeouts").threadpool(pool.clone()).build();
    /// let (tx, rx) = mpsc::channel();
    /// timer.add(timer_task(0, move || {
    ///     tx.send(std::thread::current().name().map(str::to_owned)).unwrap()
    /// }));
    /// assert_eq!(rx.recv().unwrap().as_deref(), Some("service"));
    /// timer.close();
    /// pool.join(); // the pool is the caller's: it outlives the timer
    /// ```
    pub fn threadpool(self, pool: threadpool::ThreadPool) -> Self {
        self.executor(move |job| pool.execute(job))
    }

    /// Runs expired tasks through `execute`, which is given each task as a job,
    /// `Box<dyn FnOnce() + Send>`, and must call every job it is given exactly once, on any
    /// thread: `rayon::spawn`, tokio's `spawn_blocking` (through a runtime handle), or
    /// `|job| job()` to run tiny tasks inline, on the thread that hands them over (the
    /// driver calling [`advance_clock`](Timer::advance_clock), or, for a task due at once,
    /// the caller of [`add`](Timer::add)).
    ///
    /// `execute` is called with no lock of the timer held, once per task. The contract is
    /// the built-in pool's: exactly-once; a task's panic caught and logged inside the job;
    /// [`close`](Timer::close) and [`stop`](Timer::stop) wait, within their bound, for the
    /// jobs handed over (called from one of them: for those already running on other
    /// threads). A job dropped without being run breaks exactly-once: its task is dropped,
    /// unrun, and the timer logs it at `error!` (and so a panic out of `execute`).
    ///
    /// An executor that runs jobs inline runs a task inside the call that hands it over:
    /// `advance_clock`, or an `add` or `reschedule` of a task due at once, as
    /// [`MockTimer`](crate::MockTimer) does (with [`max_in_flight`](Self::max_in_flight),
    /// any call that holds a due task may hand over, and so run, other held ones). A lock
    /// that the caller holds across such a call and that the task takes deadlocks there.
    ///
    /// Replaces [`executor_threads`](Self::executor_threads) and
    /// [`threadpool`](Self::threadpool): the last one called wins.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use std::sync::Arc;
    /// use timingwheel::{timer_task, MockTime, SystemTimer, Timer};
    ///
    /// // Tiny tasks, run inline by whoever drives the timer.
    /// let time = MockTime::new();
    /// let timer = SystemTimer::builder("inline")
    ///     .time(time.clone())
    ///     .executor(|job| job())
    ///     .build();
    /// let fired = Arc::new(AtomicUsize::new(0));
    /// let counter = fired.clone();
    /// timer.add(timer_task(10, move || {
    ///     counter.fetch_add(1, Ordering::SeqCst);
    /// }));
    /// time.sleep(10);
    /// assert!(timer.advance_clock(0));
    /// assert_eq!(fired.load(Ordering::SeqCst), 1, "ran inside advance_clock");
    /// ```
    pub fn executor(
        mut self,
        execute: impl Fn(Box<dyn FnOnce() + Send>) + Send + Sync + 'static,
    ) -> Self {
        self.executor = ExecutorKind::Function(Arc::new(execute));
        self
    }

    /// Bounds the tasks handed to the executor and not yet finished to `max`. Default: no
    /// bound (Kafka's, which queues expired tasks on its executor however far behind it
    /// falls).
    ///
    /// At the bound, tasks that come due stay in the timer: still pending, counted by
    /// [`size`](Timer::size) and [`stats`](SystemTimer::stats)' `pending` (not `expired`),
    /// and [`cancel`](crate::TimerTaskEntry::cancel) on them returns true and drops them at
    /// once. As running tasks finish, the threads that ran them hand held ones over, oldest
    /// expiration first across all the threads that added them, and tasks of the same
    /// expiration in the order they came due (added from different threads, in no promised
    /// order, as tasks due in the same tick run in none). Nothing busy-waits and nothing is
    /// lost.
    ///
    /// - A task added with a delay of zero or less, or rescheduled to one, is held like any
    ///   other that comes due: its entry is pending (not already handed over), and with
    ///   [`max_pending`](Self::max_pending) it counts against that bound too.
    /// - [`advance_clock`](Timer::advance_clock) keeps its contract: it flushes due lists
    ///   whatever the executor's backlog, and holds what comes due.
    /// - [`close`](Timer::close) drops the held tasks, [`stop`](Timer::stop) hands them
    ///   back, as any task still waiting.
    /// - [`reschedule`](Timer::reschedule) of a held task moves it back into the wheel (or,
    ///   to a delay of zero or less, to its new place in the backlog) and returns true.
    ///
    /// A held task costs what a pending one does (a 32-byte slot, in the timer's own
    /// memory), not a job on the executor's queue.
    ///
    /// # Panics
    ///
    /// Panics if `max` is 0.
    ///
    /// # Examples
    ///
    /// ```
    /// use timingwheel::{timer_task, MockTime, SystemTimer, Timer};
    ///
    /// let time = MockTime::new();
    /// let timer = SystemTimer::builder("bounded")
    ///     .time(time.clone())
    ///     .max_in_flight(1)
    ///     .build();
    /// let (release, wait) = std::sync::mpsc::channel::<()>();
    /// timer.add(timer_task(10, move || wait.recv().unwrap())); // holds the executor
    /// let second = timer.add(timer_task(10, || unreachable!("cancelled while held")));
    /// time.sleep(10);
    /// assert!(timer.advance_clock(0));
    /// assert_eq!(timer.size(), 1, "the second is due, held, still pending");
    /// assert!(second.cancel());
    /// release.send(()).unwrap();
    /// timer.close();
    /// ```
    #[track_caller]
    pub fn max_in_flight(mut self, max: usize) -> Self {
        assert!(
            max > 0,
            "SystemTimerBuilder::max_in_flight: max must be positive, got {max}"
        );
        self.max_in_flight = Some(max);
        self
    }

    /// Bounds how long [`close`](Timer::close), [`stop`](Timer::stop) and the drop wait for
    /// the tasks already handed to the executor, counted from the timer's first `close` or
    /// `stop` (a deadline all callers share). Past it they log a warning naming the tasks
    /// still running and return; those tasks still finish on their threads. Zero: they do
    /// not wait. More than a year (`Duration::MAX`, say) is taken as a year, so that the
    /// deadline fits the clock.
    ///
    /// Default 10 s, what Kafka 3.9's `close` allows (5 s, then 5 s more after interrupting
    /// the tasks, which Rust cannot do); Kafka 4.x waits 5 s (KAFKA-16688). The longer
    /// default keeps a slow task's work over cutting it off; a service that must stop
    /// sooner sets less.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use timingwheel::{timer_task, SystemTimer, Timer};
    ///
    /// let timer = SystemTimer::builder("quick")
    ///     .close_timeout(Duration::from_secs(5)) // Kafka 4.x's wait
    ///     .build();
    /// timer.add(timer_task(60_000, || {}));
    /// timer.close(); // nothing was running: returns at once
    /// ```
    pub fn close_timeout(mut self, close_timeout: Duration) -> Self {
        self.close_timeout = close_timeout.min(Duration::from_secs(365 * 24 * 60 * 60));
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

    /// Sets the clock the timer runs on (default [`SystemClock`](crate::SystemClock)).
    pub fn time(mut self, time: impl Time + 'static) -> Self {
        self.clock = TimerClock::of(Arc::new(time));
        self
    }

    /// Cuts flushes into chunks of `chunk` entries and stops each call's not-yet-urgent work
    /// after `budget` of them, so that tests can interleave adds and cancels with flushes.
    /// Both must be positive: every call then moves a flush on by a chunk at least.
    #[cfg(test)]
    pub(super) fn chunking(mut self, chunk: usize, budget: usize) -> Self {
        self.flusher = Flusher::new(chunk, budget);
        self
    }

    /// Creates the timer and starts its executor thread.
    ///
    /// # Panics
    ///
    /// Panics, naming the argument and its value, if `tick_ms <= 0` or `wheel_size == 0`,
    /// or if `wheel_size` is so large that the buckets of all levels would exceed 2^31.
    /// Panics if the process would hold more than 2^20 - 1 timer shards at once (a
    /// `SystemTimer` takes 4 per hardware thread, at most 64; a `MockTimer` 1): some 16,000
    /// timers alive together.
    #[track_caller]
    pub fn build(self) -> SystemTimer {
        let time = Arc::clone(&self.clock.time);
        let now_ms = time.hi_res_clock_ms();
        // A wheel ahead of its clock would take tasks due before its start for expired
        // and run them early (Kafka does); start it at the clock instead.
        let start_ms = self
            .start_ms
            .map_or(now_ms, |start_ms| start_ms.min(now_ms));
        let geometry = Arc::new(Geometry::new(self.tick_ms, self.wheel_size, start_ms));
        let delay_queue = Arc::new(DelayQueue::pruning(
            Arc::clone(&time),
            |list: &Arc<TimerTaskList>, due_ms| list.expiration_ms() != due_ms,
        ));
        let timing_wheel = TimingWheel::new(geometry, start_ms, Arc::clone(&delay_queue));
        log::debug!(
            "timer {}: started (tick {} ms, wheel size {}, start {start_ms})",
            self.executor_name,
            timing_wheel.tick_ms(),
            self.wheel_size
        );
        let max_pending = self.max_pending.map(|max| (max, Arc::default()));
        let pending = max_pending.as_ref().map(|(_, pending)| Arc::clone(pending));
        let held = self.max_in_flight.map(|_| Arc::new(AtomicUsize::new(0)));
        let timing_wheel = StripedRwLock::new(
            timing_wheel,
            StripedRwLock::<TimingWheel>::default_stripes(),
            pending,
            held.clone(),
        );
        let closed = Arc::new(AtomicBool::new(false));
        let limit = self.max_in_flight.zip(held).map(|(max, held)| {
            let backlog = Backlog::new(timing_wheel.shards(), Arc::clone(&closed), held);
            (max, Arc::new(backlog) as Arc<dyn HeldTasks>)
        });
        let lateness = Arc::new(LatenessHistogram::new());
        SystemTimer {
            metrics: TimerMetrics::new(&self.executor_name, &lateness),
            executor: Executor::new(
                &self.executor_name,
                self.executor,
                self.clock.clone(),
                lateness,
                limit,
            ),
            executor_name: self.executor_name,
            clock: self.clock,
            delay_queue,
            timing_wheel,
            flusher: self.flusher,
            close_timeout: self.close_timeout,
            closed,
            max_pending,
        }
    }
}
