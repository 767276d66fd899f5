//! Where expired tasks run: the built-in fixed pool (Kafka's
//! `Executors.newFixedThreadPool(1)`, with any number of threads), a `threadpool::ThreadPool`
//! the caller owns, or any executor the caller gives as a function; how late each task
//! starts; and the bound on the tasks in flight (`max_in_flight`).
//!
//! # Ground rules
//!
//! - A task reaches the executor with its expiration ([`Expired`]). Just before it runs,
//!   the thread that runs it reads the timer's clock and counts how late it started in the
//!   timer's histogram (`crate::lateness`).
//! - The built-in pool: tasks go to its threads through one `crossbeam-channel` queue; any
//!   idle thread takes the next message. With one thread (Kafka's), a flush hands over its
//!   expired tasks a batch per message, and they run in the order they were handed over.
//!   With more, each task is a message of its own, so that no task ever waits behind a
//!   slow one while a thread is free; tasks that expired together then run concurrently,
//!   in no order. The timer names its threads and joins them at `close`.
//! - A caller's executor (a `threadpool::ThreadPool`, or a function): each task is a job of
//!   its own, a `Box<dyn FnOnce() + Send>`, handed to the caller's function with no lock
//!   held. The timer never names or joins those threads. A job dropped without being run
//!   (the executor broke its contract) is logged at `error!` and counted finished: its task
//!   is lost, and `close` does not wait for it forever. A panic out of the function itself
//!   is caught and logged the same way.
//! - `in_flight` counts tasks handed over and not yet finished (atomics). A `close` that
//!   waits for it registers in `waiters`, and while any does, every task that finishes
//!   wakes it (`idle`, with its mutex); otherwise finishing a task takes no lock. A job
//!   counts its tasks finished from a drop guard, so the count comes down even if it
//!   unwinds.
//! - A `close` that gave up waiting is logged once (`gave_up`).
//! - A task's panic is caught, logged at `error!`, and the executor goes on. So is a panic
//!   in the `Drop` of the panic's payload: nothing a task does unwinds out of [`run_task`].
//! - Every `close` of the timer waits for the tasks in flight, up to one deadline set by the
//!   first wait (`shutdown_deadline`), then stops the built-in pool's threads and joins
//!   them. A task cannot wait for itself: a `close` called from a task waits only for the
//!   other threads' tasks. On the built-in pool that is every task in flight but those of
//!   the threads waiting (with one thread: none, the tasks queued behind it run after it
//!   returns); on a caller's executor, whose threads the timer cannot see, the tasks that
//!   already started (`started`), not those the executor has yet to start, which may be
//!   queued behind the caller, nor those its own thread runs around it (an inline
//!   executor nests the task that an `add` of a task already due runs at once). The
//!   threads it cannot join (its own among them) are joined by the next `close` or the
//!   drop from outside the pool.
//!
//! # The bound on tasks in flight
//!
//! With `max_in_flight`, a task is handed over only with a permit: `in_flight` below the
//! bound, raised by a compare-and-swap ([`Shared::reserve`]). Every task that comes due on
//! such a timer is first *held* in the timer's store ([`HeldTasks`], the shards' backlog,
//! see `system_timer::backlog`), where it is pending and can be cancelled; then whoever
//! held it asks for a [`refill`](Executor::refill), which takes permits and hands held
//! tasks over, oldest first, while both last. Every thread that finishes tasks asks for a
//! refill too: while the executor has tasks queued, once an eighth of the bound is free, so
//! that it takes several at a time; with none queued, at once, so that no thread idles.
//! No hand-off is lost: a holder raises the held count, then reads `in_flight` (in
//! `reserve`); a finisher lowers `in_flight`, then reads the held count; both with
//! `SeqCst`, so at least one of them sees the other and refills (a finisher that finds
//! less than an eighth free, with tasks queued, leaves it to the thread that runs those:
//! it finishes them and looks again). A refill that
//! took fewer tasks than permits gives the rest back and looks again, blocking on the
//! shards' locks rather than spinning. A thread already refilling (a caller's executor
//! that runs jobs inline) does not start a second refill inside the first: the outer one
//! goes on until permits or held tasks run out.
//!
//! Lock order (see `crate::lock_order`): the executor's mutexes (`idle`'s, `threads`,
//! `buffers`) are leaves; none is held while a task runs, while the caller's function is
//! called, or while another lock is taken, and none is taken under a lock of the timer.
//! A refill takes one shard's lock at a time (through [`HeldTasks::take`]), with no other
//! lock held.

use std::any::Any;
use std::cell::Cell;
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use parking_lot::{Condvar, Mutex};

use crate::lateness::{Lateness, LatenessHistogram, RunningLate, late_us};
use crate::store::chunks::prefetch;
use crate::task::{Expired, TimerTask};
use crate::time::TimerClock;

/// Tasks per batch buffer: a flush hands over at most one chunk's expired tasks per job
/// (`system_timer::flush`'s chunk, 64 entries), and a refill at most this many at once.
const BATCH: usize = 64;

/// Emptied batch buffers kept for reuse (1.5 KiB each, 48 KiB in all): the executor can
/// fall this many jobs behind the driver before a flush allocates one.
const KEPT_BUFFERS: usize = 32;

/// A job for a caller's executor: run it once, on any thread.
pub(crate) type Job = Box<dyn FnOnce() + Send>;

/// A caller's executor, as a function that takes jobs.
pub(crate) type ExecuteFn = Arc<dyn Fn(Job) + Send + Sync>;

/// Where a timer's expired tasks run, as its builder was told.
#[derive(Clone)]
pub(crate) enum ExecutorKind {
    /// The built-in pool of this many threads, which the timer names and joins.
    Threads(usize),
    /// A `threadpool::ThreadPool` the caller owns.
    Threadpool(threadpool::ThreadPool),
    /// Any executor, as a function that takes jobs.
    Function(ExecuteFn),
}

impl fmt::Debug for ExecutorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExecutorKind::Threads(threads) => f.debug_tuple("Threads").field(threads).finish(),
            ExecutorKind::Threadpool(pool) => f.debug_tuple("Threadpool").field(pool).finish(),
            ExecutorKind::Function(_) => f.write_str("Function(..)"),
        }
    }
}

/// Tasks a timer holds back while its executor is at `max_in_flight`: the shards' backlog.
pub(crate) trait HeldTasks: Send + Sync {
    /// Returns the number of tasks held, as of now.
    fn len(&self) -> usize;
    /// Takes up to `max` held tasks out of the timer, oldest expiration first, appends them
    /// to `out` and counts them expired; returns how many. Takes nothing once the timer is
    /// closed.
    fn take(&self, max: usize, out: &mut Vec<Expired>) -> usize;
}

/// What the pool's threads receive.
enum PoolJob {
    /// Tasks to run in order (a pool of one thread).
    Batch(Vec<Expired>),
    /// One task: on a pool of several threads, or handed over alone (see
    /// [`Executor::hand_over_one`]).
    One(Expired),
    /// Ends the thread that receives it (one per thread, sent at shutdown).
    Stop,
}

/// How tasks reach the threads that run them.
enum Runner {
    /// The built-in pool: its queue and its size.
    Pool {
        jobs: Sender<PoolJob>,
        threads: usize,
    },
    /// A caller's executor: `threadpool` or `function`, for `Debug`.
    Caller {
        execute: ExecuteFn,
        kind: &'static str,
    },
}

/// The bound on tasks in flight, and where the tasks it holds back wait.
struct Limit {
    max: usize,
    held: Arc<dyn HeldTasks>,
    /// The permits a thread that finished tasks waits for before it refills while the
    /// executor has tasks queued: an eighth of the bound (at least 1), so that refills take
    /// held tasks a few at a time, one shard lock for several.
    refill_at: usize,
}

/// The executor of one timer.
pub(crate) struct Executor {
    shared: Arc<Shared>,
    /// `shared.limit.is_some()`, kept here: every `add` asks, and this is on the timer's
    /// own cache lines.
    bounded: bool,
    /// The built-in pool's threads not joined yet (none on a caller's executor).
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// Set when the stop messages are sent (once).
    stopped: AtomicBool,
    /// When every wait for the tasks in flight gives up; set by the first wait.
    shutdown_deadline: OnceLock<Instant>,
    /// Set by the first wait that gave up (see [`Executor::first_give_up`]).
    gave_up: AtomicBool,
}

/// What the executor shares with the threads and jobs that run its tasks.
struct Shared {
    runner: Runner,
    /// The timer's name, for the log.
    name: String,
    in_flight: AtomicUsize,
    /// On a caller's executor: tasks whose job started and has not finished (for `close`
    /// from a task, and to tell the tasks queued in it).
    started: AtomicUsize,
    /// Threads waiting in `wait_idle`: while there are any, each finished task wakes them.
    waiters: AtomicUsize,
    /// The tasks that those of them running this executor's tasks are running (one each,
    /// or several nested on an inline executor), still in flight.
    task_waiters: AtomicUsize,
    lock: Mutex<()>,
    idle: Condvar,
    /// Emptied batch buffers, handed back by the pool's threads for the next batches.
    buffers: Mutex<Vec<Vec<Expired>>>,
    /// The timer's clock, that lateness is read on.
    clock: TimerClock,
    lateness: Arc<LatenessHistogram>,
    limit: Option<Limit>,
}

thread_local! {
    /// The executor whose task this thread is running (0: none).
    static RUNNING_FOR: Cell<usize> = const { Cell::new(0) };
    /// How many of that executor's tasks this thread is running, one inside another: more
    /// than one only on a caller's executor that runs jobs inline, where a task's `add` of
    /// a task already due runs it at once.
    static RUNNING_DEPTH: Cell<usize> = const { Cell::new(0) };
    /// The executor this thread is refilling (0: none).
    static REFILLING: Cell<usize> = const { Cell::new(0) };
}

impl Executor {
    /// Starts the executor `kind` names for the timer `name` (the built-in pool's threads
    /// are `executor-{name}`, or `executor-{name}-{i}`), counting lateness in `lateness`
    /// on the timer's `clock`, and bounded by `limit`: `max_in_flight`, and
    /// where the tasks it holds back wait.
    ///
    /// # Panics
    ///
    /// Panics if a thread cannot be spawned, or if the pool has no thread.
    pub(crate) fn new(
        name: &str,
        kind: ExecutorKind,
        clock: TimerClock,
        lateness: Arc<LatenessHistogram>,
        limit: Option<(usize, Arc<dyn HeldTasks>)>,
    ) -> Executor {
        let mut queue = None;
        let runner = match kind {
            ExecutorKind::Threads(threads) => {
                assert!(threads > 0, "an executor needs at least one thread");
                let (jobs, receiver) = crossbeam_channel::unbounded();
                queue = Some(receiver);
                Runner::Pool { jobs, threads }
            }
            ExecutorKind::Threadpool(pool) => Runner::Caller {
                execute: Arc::new(move |job: Job| pool.execute(job)),
                kind: "threadpool",
            },
            ExecutorKind::Function(execute) => Runner::Caller {
                execute,
                kind: "function",
            },
        };
        let shared = Arc::new(Shared {
            runner,
            name: name.to_owned(),
            in_flight: AtomicUsize::new(0),
            started: AtomicUsize::new(0),
            waiters: AtomicUsize::new(0),
            task_waiters: AtomicUsize::new(0),
            lock: Mutex::new(()),
            idle: Condvar::new(),
            buffers: Mutex::new(Vec::new()),
            clock,
            lateness,
            limit: limit.map(|(max, held)| Limit {
                max,
                held,
                refill_at: (max / 8).max(1),
            }),
        });
        let handles = match (&shared.runner, queue) {
            (Runner::Pool { threads, .. }, Some(queue)) => (0..*threads)
                .map(|i| {
                    let thread_name = if *threads == 1 {
                        format!("executor-{name}")
                    } else {
                        format!("executor-{name}-{i}")
                    };
                    let queue = queue.clone();
                    let shared = Arc::clone(&shared);
                    std::thread::Builder::new()
                        .name(thread_name.clone())
                        .spawn(move || work(&queue, &shared))
                        .unwrap_or_else(|e| {
                            panic!("cannot spawn executor thread {thread_name:?}: {e}")
                        })
                })
                .collect(),
            _ => Vec::new(),
        };
        Executor {
            bounded: shared.limit.is_some(),
            shared,
            threads: Mutex::new(handles),
            stopped: AtomicBool::new(false),
            shutdown_deadline: OnceLock::new(),
            gave_up: AtomicBool::new(false),
        }
    }

    /// True if tasks that come due must be held and handed over by
    /// [`refill`](Executor::refill): the executor has a `max_in_flight` bound.
    pub(crate) fn is_bounded(&self) -> bool {
        self.bounded
    }

    /// Returns an empty buffer for a batch of up to 64 tasks: one the pool handed back, or
    /// a new one.
    ///
    /// The timer's driver fills these while it flushes. Reusing them keeps allocations off
    /// its path (see `crate::lock_order`: no allocation under a shard's lock).
    pub(crate) fn batch(&self) -> Vec<Expired> {
        self.shared.batch()
    }

    /// Hands `tasks` to the executor in two steps: this call counts them in flight, which
    /// the caller does under the lock that took them out of the store (so that a `close`
    /// waits for them); [`Handover::send`] passes them on, which the caller does once it has
    /// let go of that lock, so that a pool thread woken onto the caller's processor does not
    /// preempt it while other threads wait for the lock, and no user code (a caller's
    /// executor, or a task run inline) runs under it. Not for a bounded executor, whose
    /// tasks go through [`refill`](Executor::refill).
    pub(crate) fn hand_over(&self, tasks: Vec<Expired>) -> Handover<'_> {
        debug_assert!(tasks.is_empty() || !self.is_bounded());
        if !tasks.is_empty() {
            self.shared
                .in_flight
                .fetch_add(tasks.len(), Ordering::AcqRel);
        }
        Handover {
            shared: &self.shared,
            tasks,
            one: None,
        }
    }

    /// [`hand_over`](Executor::hand_over) for a single task: an add already expired. It
    /// travels as a job of its own, so that no buffer is allocated for it under the lock.
    pub(crate) fn hand_over_one(&self, task: Expired) -> Handover<'_> {
        debug_assert!(!self.is_bounded());
        self.shared.in_flight.fetch_add(1, Ordering::AcqRel);
        Handover {
            shared: &self.shared,
            tasks: Vec::new(),
            one: Some(task),
        }
    }

    /// Hands held tasks over, oldest first, while the bound leaves room for them: called,
    /// with no lock held, by whoever held a task (see "The bound on tasks in flight").
    pub(crate) fn refill(&self) {
        self.shared.refill(1);
    }

    /// Returns how late the tasks started so far started.
    pub(crate) fn lateness(&self) -> Lateness {
        self.shared.lateness.summary()
    }

    /// Returns how many of this executor's tasks the calling thread is running, one inside
    /// another (0: none).
    fn running_here(&self) -> usize {
        if RUNNING_FOR.with(Cell::get) == self.shared.id() {
            RUNNING_DEPTH.with(Cell::get)
        } else {
            0
        }
    }

    /// Waits until every task handed over so far has finished, but not past `timeout` after
    /// the first call: concurrent and later callers share that deadline. Called from one of
    /// this executor's tasks, it waits for the other threads' tasks only (see the ground
    /// rules). Returns the number still unfinished that it waited for.
    pub(crate) fn wait_idle(&self, timeout: Duration) -> usize {
        let deadline = *self
            .shutdown_deadline
            .get_or_init(|| Instant::now() + timeout);
        let shared = &self.shared;
        // The tasks this thread runs cannot finish before this returns: they are not
        // waited for (see `task_waiters`).
        let mine = self.running_here();
        let on_task = mine > 0;
        if on_task && matches!(shared.runner, Runner::Pool { threads: 1, .. }) {
            return 0;
        }
        let mut guard = shared.lock.lock();
        shared.waiters.fetch_add(1, Ordering::SeqCst);
        if on_task {
            shared.task_waiters.fetch_add(mine, Ordering::SeqCst);
        }
        let left = || {
            let task_waiters = shared.task_waiters.load(Ordering::SeqCst);
            match &shared.runner {
                // The tasks of the pool threads that wait here cannot finish before they
                // return, and once every thread waits here, nothing more can finish at all.
                Runner::Pool { threads, .. } if task_waiters == *threads => 0,
                _ if !on_task => shared.in_flight.load(Ordering::SeqCst),
                Runner::Pool { .. } => shared
                    .in_flight
                    .load(Ordering::SeqCst)
                    .saturating_sub(task_waiters),
                Runner::Caller { .. } => shared
                    .started
                    .load(Ordering::SeqCst)
                    .saturating_sub(task_waiters),
            }
        };
        let mut unfinished = left();
        while unfinished > 0 && !shared.idle.wait_until(&mut guard, deadline).timed_out() {
            unfinished = left();
        }
        unfinished = left();
        if on_task {
            shared.task_waiters.fetch_sub(mine, Ordering::SeqCst);
        }
        shared.waiters.fetch_sub(1, Ordering::SeqCst);
        drop(guard);
        // A task's thread leaving changes what the others wait for.
        shared.idle.notify_all();
        unfinished
    }

    /// Returns true the first time it is called after a [`wait_idle`](Executor::wait_idle)
    /// gave up with tasks unfinished, and false ever after: a timer warns about them once,
    /// not at every later `close` and at its drop.
    pub(crate) fn first_give_up(&self) -> bool {
        !self.gave_up.swap(true, Ordering::AcqRel)
    }

    /// Stops the built-in pool's threads once the queue before them is done (the first
    /// call sends the stop messages), and joins them unless `join` is false (tasks still
    /// running past the deadline) or this is a pool thread, which cannot join itself: those
    /// threads are left for a later call from outside the pool. Concurrent callers return
    /// once the first one has joined them. A caller's executor has nothing to stop.
    pub(crate) fn shut_down(&self, join: bool) {
        let Runner::Pool {
            jobs,
            threads: count,
        } = &self.shared.runner
        else {
            return;
        };
        let mut threads = self.threads.lock();
        if !self.stopped.swap(true, Ordering::AcqRel) {
            for _ in 0..*count {
                // Fails only if every thread already ended, which needs these very messages.
                let _ = jobs.send(PoolJob::Stop);
            }
        }
        if join && self.running_here() == 0 {
            for handle in threads.drain(..) {
                if handle.join().is_err() {
                    log::error!("an executor thread panicked");
                }
            }
        }
    }
}

impl Shared {
    fn id(self: &Arc<Self>) -> usize {
        Arc::as_ptr(self) as usize
    }

    fn batch(&self) -> Vec<Expired> {
        self.buffers
            .lock()
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(BATCH))
    }

    /// Keeps an emptied batch buffer for reuse, if it is one and there is room.
    fn recycle(&self, buffer: Vec<Expired>) {
        debug_assert!(buffer.is_empty());
        if buffer.capacity() == BATCH {
            let mut buffers = self.buffers.lock();
            if buffers.len() < KEPT_BUFFERS {
                buffers.push(buffer);
            }
        }
    }

    /// Passes tasks already counted in flight on to the threads that run them. A buffer
    /// from [`batch`](Shared::batch) goes back to be reused once its tasks ran (or at once,
    /// when they go one per job).
    fn send_counted(self: &Arc<Self>, mut tasks: Vec<Expired>) {
        if tasks.is_empty() {
            self.recycle(tasks);
            return;
        }
        match &self.runner {
            Runner::Pool { jobs, threads: 1 } => self.send_to_pool(jobs, PoolJob::Batch(tasks)),
            Runner::Pool { jobs, .. } => {
                for task in tasks.drain(..) {
                    self.send_to_pool(jobs, PoolJob::One(task));
                }
                self.recycle(tasks);
            }
            Runner::Caller { execute, .. } => {
                for task in tasks.drain(..) {
                    self.execute(execute, task);
                }
                self.recycle(tasks);
            }
        }
    }

    /// [`send_counted`](Shared::send_counted) for one task, as a job of its own.
    fn send_one(self: &Arc<Self>, task: Expired) {
        match &self.runner {
            Runner::Pool { jobs, .. } => self.send_to_pool(jobs, PoolJob::One(task)),
            Runner::Caller { execute, .. } => self.execute(execute, task),
        }
    }

    fn send_to_pool(&self, jobs: &Sender<PoolJob>, job: PoolJob) {
        if let Err(refused) = jobs.send(job) {
            // Unreachable while the executor lives: the pool's threads hold the receiver
            // until they are stopped, and no task is handed over after that.
            self.finished(refused.into_inner().len());
        }
    }

    /// Hands one task to the caller's executor as a job of its own.
    fn execute(self: &Arc<Self>, execute: &ExecuteFn, task: Expired) {
        let job = CallerJob {
            task: Some(task),
            shared: Arc::clone(self),
        };
        let executed = catch_unwind(AssertUnwindSafe(|| execute(Box::new(move || job.run()))));
        if let Err(payload) = executed {
            // The job was dropped, and counted finished, on the way out (or it is still
            // with the executor, which will run it).
            log::error!(
                "timer {}: the executor panicked when handed a task: {}",
                self.name,
                panic_message(&*payload)
            );
            drop_payload(payload);
        }
    }

    /// Runs one expired task here and now, counting how late it started.
    #[inline]
    fn run(&self, expired: Expired) {
        let late_us = late_us(self.clock.now_ns(), expired.expiration_ms);
        self.lateness.record(late_us);
        let _running = RunningLate::enter(late_us);
        run_task(expired.task);
    }

    /// Counts `count` tasks in flight finished, waking the `close` calls that wait.
    fn finished(&self, count: usize) {
        if count == 0 {
            return;
        }
        let left = self.in_flight.fetch_sub(count, Ordering::SeqCst) - count;
        if left == 0 || self.waiters.load(Ordering::SeqCst) > 0 {
            let _guard = self.lock.lock();
            self.idle.notify_all();
        }
    }

    /// Raises `in_flight` by as many permits as the bound `max` leaves, at most `want`, if
    /// that is `at_least`; returns how many.
    fn reserve(&self, max: usize, at_least: usize, want: usize) -> usize {
        let mut current = self.in_flight.load(Ordering::SeqCst);
        loop {
            let free = max.saturating_sub(current).min(want);
            if free == 0 || free < at_least {
                return 0;
            }
            match self.in_flight.compare_exchange_weak(
                current,
                current + free,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => return free,
                Err(actual) => current = actual,
            }
        }
    }

    /// The refill of a thread that finished tasks: while the executor has tasks queued, once
    /// an eighth of the bound is free (see `Limit::refill_at`); with none queued, at once, so
    /// that no thread idles while tasks are held.
    fn refill_after_finishing(self: &Arc<Self>) {
        if let Some(limit) = &self.limit {
            let at_least = if self.has_queued() {
                limit.refill_at
            } else {
                1
            };
            self.refill(at_least);
        }
    }

    /// True if tasks handed over wait in the executor for a thread to start them.
    fn has_queued(&self) -> bool {
        match &self.runner {
            Runner::Pool { jobs, .. } => !jobs.is_empty(),
            Runner::Caller { .. } => {
                self.in_flight.load(Ordering::SeqCst) > self.started.load(Ordering::SeqCst)
            }
        }
    }

    /// See [`Executor::refill`]; hands over nothing unless the bound leaves room for
    /// `at_least` tasks.
    fn refill(self: &Arc<Self>, at_least: usize) {
        let Some(limit) = &self.limit else {
            return;
        };
        let id = self.id();
        let outer = REFILLING.with(|refilling| refilling.replace(id));
        if outer == id {
            // The refill this thread is in (further up its stack) goes on.
            return;
        }
        let _done = Refilling { outer };
        while limit.held.len() > 0 {
            let permits = self.reserve(limit.max, at_least, BATCH);
            if permits == 0 {
                return;
            }
            let mut batch = self.batch();
            let taken = limit.held.take(permits, &mut batch);
            // Fewer held than permits: give the rest back, and look again while the held
            // count says there are more (each look blocks on the shards' locks, never spins).
            self.finished(permits - taken);
            self.send_counted(batch);
        }
    }
}

/// Ends this thread's refill when dropped, back to the refill of another executor that it
/// runs inside, if any.
struct Refilling {
    outer: usize,
}

impl Drop for Refilling {
    fn drop(&mut self) {
        REFILLING.with(|refilling| refilling.set(self.outer));
    }
}

/// Tasks counted in flight and not sent yet (see [`Executor::hand_over`]). Sent by
/// [`send`](Handover::send), or, should the caller unwind first, when dropped.
#[must_use = "send it once the lock is released"]
pub(crate) struct Handover<'a> {
    shared: &'a Arc<Shared>,
    tasks: Vec<Expired>,
    /// A task handed over alone (`Executor::hand_over_one`).
    one: Option<Expired>,
}

impl Handover<'_> {
    /// Passes the tasks on to the threads that run them.
    pub(crate) fn send(self) {
        drop(self);
    }
}

impl Drop for Handover<'_> {
    fn drop(&mut self) {
        if let Some(task) = self.one.take() {
            self.shared.send_one(task);
        }
        self.shared.send_counted(std::mem::take(&mut self.tasks));
    }
}

impl Drop for Executor {
    fn drop(&mut self) {
        // Joins the threads unless a task never ended (a close gave up waiting for it).
        let idle = self.shared.in_flight.load(Ordering::Acquire) == 0;
        self.shut_down(idle);
    }
}

impl PoolJob {
    /// The tasks in this job.
    fn len(&self) -> usize {
        match self {
            PoolJob::Batch(tasks) => tasks.len(),
            PoolJob::One(_) => 1,
            PoolJob::Stop => 0,
        }
    }
}

/// A built-in pool thread's loop: runs the jobs it receives until told to stop.
fn work(queue: &Receiver<PoolJob>, shared: &Arc<Shared>) {
    RUNNING_FOR.with(|running| running.set(shared.id()));
    RUNNING_DEPTH.with(|running| running.set(1));
    loop {
        match queue.recv() {
            Ok(PoolJob::Batch(mut tasks)) => {
                let _finished = Finished {
                    shared,
                    count: tasks.len(),
                };
                run_in_order(shared, &mut tasks);
                shared.recycle(tasks);
            }
            Ok(PoolJob::One(task)) => {
                let _finished = Finished { shared, count: 1 };
                shared.run(task);
            }
            Ok(PoolJob::Stop) | Err(_) => break,
        }
    }
    RUNNING_FOR.with(|running| running.set(0));
    RUNNING_DEPTH.with(|running| running.set(0));
}

/// One task as a job for a caller's executor. Counted finished when dropped, run or not.
struct CallerJob {
    /// `Some` until it runs.
    task: Option<Expired>,
    shared: Arc<Shared>,
}

impl CallerJob {
    fn run(mut self) {
        let Some(task) = self.task.take() else {
            return;
        };
        let shared = &self.shared;
        let outer = RUNNING_FOR.with(|running| running.replace(shared.id()));
        let depth = if outer == shared.id() {
            RUNNING_DEPTH.with(Cell::get) + 1
        } else {
            1
        };
        let outer_depth = RUNNING_DEPTH.with(|running| running.replace(depth));
        shared.started.fetch_add(1, Ordering::SeqCst);
        shared.run(task);
        shared.started.fetch_sub(1, Ordering::SeqCst);
        RUNNING_DEPTH.with(|running| running.set(outer_depth));
        RUNNING_FOR.with(|running| running.set(outer));
    }
}

impl Drop for CallerJob {
    fn drop(&mut self) {
        if let Some(lost) = self.task.take() {
            log::error!(
                "timer {}: the executor dropped a job without running it; its task is lost",
                self.shared.name
            );
            drop(lost);
        }
        self.shared.finished(1);
        self.shared.refill_after_finishing();
    }
}

/// Tasks whose boxes are asked for ahead of the one that runs: enough misses in flight to
/// overlap, few enough to stay cached until their turn.
const PREFETCH_AHEAD: usize = 8;

/// Runs `tasks` in order and leaves the buffer empty. The first read of a task's box is
/// likely a cache and TLB miss (it was allocated long before), so the boxes of the next
/// tasks are asked for ahead of time (see `prefetch`).
fn run_in_order(shared: &Shared, tasks: &mut Vec<Expired>) {
    tasks
        .iter()
        .take(PREFETCH_AHEAD)
        .for_each(|expired| prefetch(&*expired.task));
    for at in 0..tasks.len() {
        if let Some(ahead) = tasks.get(at + PREFETCH_AHEAD) {
            prefetch(&*ahead.task);
        }
        // Moved out by swapping in a task that does nothing (a zero-sized box: no
        // allocation), so that the rest stay where the prefetches point.
        let ran = Expired {
            task: Box::new(Ran),
            expiration_ms: 0,
        };
        shared.run(std::mem::replace(&mut tasks[at], ran));
    }
    tasks.clear();
}

/// Takes the place of a task of a batch that ran.
struct Ran;

impl TimerTask for Ran {
    fn delay_ms(&self) -> i64 {
        0
    }
    fn run(self: Box<Self>) {}
}

/// Counts a pool job's tasks finished when dropped (also if the job unwinds, after the
/// tasks not run yet are dropped), then hands held tasks over in their place.
struct Finished<'a> {
    shared: &'a Arc<Shared>,
    count: usize,
}

impl Drop for Finished<'_> {
    fn drop(&mut self) {
        self.shared.finished(self.count);
        self.shared.refill_after_finishing();
    }
}

/// Runs one task, catching and logging its panic; never unwinds.
pub(crate) fn run_task(task: Box<dyn TimerTask>) {
    if let Err(payload) = catch_unwind(AssertUnwindSafe(|| task.run())) {
        log::error!("timer task panicked: {}", panic_message(&*payload));
        drop_payload(payload);
    }
}

/// Drops a panic's payload, whose `Drop` is user code and may panic in turn. The payload of
/// that second panic is user data as well, so it is leaked rather than dropped: a few
/// bytes, once, instead of a chain of panics out of the executor's job.
fn drop_payload(payload: Box<dyn Any + Send>) {
    if let Err(again) = catch_unwind(AssertUnwindSafe(|| drop(payload))) {
        log::error!(
            "dropping a timer task's panic payload panicked: {}; leaking that panic's payload",
            panic_message(&*again)
        );
        std::mem::forget(again);
    }
}

/// The message of a caught panic, or `(no message)`.
pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

impl fmt::Debug for Executor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shared = &self.shared;
        let mut debug = f.debug_struct("Executor");
        match &shared.runner {
            Runner::Pool { threads, .. } => debug.field("threads", threads),
            Runner::Caller { kind, .. } => debug.field("caller", kind),
        };
        debug
            .field("in_flight", &shared.in_flight.load(Ordering::Relaxed))
            .field(
                "max_in_flight",
                &shared.limit.as_ref().map(|limit| limit.max),
            )
            .finish_non_exhaustive()
    }
}
