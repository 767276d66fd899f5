//! Waiting without hanging: the executor barrier, and guards that turn a deadlock or a
//! stuck thread into a failed test.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use timingwheel::{Timer, timer_task};

/// How long [`barrier`] waits for the executor: it may have a million tasks before it.
const BARRIER_PATIENCE: Duration = Duration::from_secs(60);

/// Waits until every task handed to `timer`'s executor so far has run (on `MockTimer`, the
/// barrier task runs inside `add`).
pub(crate) fn barrier(timer: &dyn Timer) {
    let (tx, rx) = mpsc::channel();
    // i64::MIN saturates far below every wheel's time: handed over inside `add`.
    let entry = timer.add(timer_task(i64::MIN, move || tx.send(()).unwrap()));
    assert!(!entry.cancel(), "a barrier goes straight to the executor");
    rx.recv_timeout(BARRIER_PATIENCE)
        .expect("the executor did not reach the barrier");
}

/// Runs `f` on a thread of its own and returns its result, or panics naming `what` if it
/// takes more than `limit` (a deadlock fails the test instead of hanging the suite).
pub(crate) fn within<T: Send + 'static>(
    limit: Duration,
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = mpsc::channel();
    let worker = thread::spawn(move || {
        let _ = tx.send(f());
    });
    let result = rx
        .recv_timeout(limit)
        .unwrap_or_else(|_| panic!("{what} did not return within {limit:?}"));
    worker.join().unwrap();
    result
}

/// Waits until `done()` holds, checking every few milliseconds; panics naming `what` after
/// `limit`.
pub(crate) fn eventually(limit: Duration, what: &str, done: impl Fn() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "{what}: not after {limit:?}");
        thread::sleep(Duration::from_millis(2));
    }
}

/// Sets a stop flag when dropped, also while unwinding: a failed assertion inside a
/// `thread::scope` must stop the driver threads, or the scope would wait for them forever.
pub(crate) struct SetOnDrop<'a>(pub(crate) &'a AtomicBool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Holds every thread of a timer's executor pool busy until it is opened (or dropped): one
/// task per thread, each of which reports that it started, then waits.
pub(crate) struct ExecutorGate {
    /// Dropped to open the gate: every waiting task's `recv` then returns.
    open: Option<timingwheel::crossbeam_channel::Sender<()>>,
}

impl ExecutorGate {
    /// Hands `threads` gate tasks to `timer`'s executor and returns once all of them run,
    /// each on a thread of its own (they wait for each other's start only through the
    /// gate, so `threads` must not exceed the pool's size).
    pub(crate) fn shut(timer: &dyn Timer, threads: usize) -> ExecutorGate {
        let (open, wait) = timingwheel::crossbeam_channel::unbounded::<()>();
        let (started_tx, started) = mpsc::channel();
        for _ in 0..threads {
            let (wait, started_tx) = (wait.clone(), started_tx.clone());
            timer.add(timer_task(0, move || {
                started_tx.send(()).unwrap();
                let _ = wait.recv();
            }));
        }
        for i in 0..threads {
            started
                .recv_timeout(BARRIER_PATIENCE)
                .unwrap_or_else(|_| panic!("only {i} of {threads} gate tasks started"));
        }
        ExecutorGate { open: Some(open) }
    }

    /// Lets the gate tasks finish.
    pub(crate) fn open(mut self) {
        self.open.take();
    }
}

impl Drop for ExecutorGate {
    fn drop(&mut self) {
        self.open.take();
    }
}

/// Runs `f` while another thread drives `timer` (`advance_clock(poll_ms)` in a loop), and
/// stops that thread when `f` returns or panics.
pub(crate) fn driven<T>(timer: &dyn Timer, poll_ms: i64, f: impl FnOnce() -> T) -> T {
    let stop = AtomicBool::new(false);
    thread::scope(|s| {
        let _stop = SetOnDrop(&stop);
        s.spawn(|| {
            while !stop.load(Ordering::SeqCst) {
                timer.advance_clock(poll_ms);
            }
        });
        f()
    })
}

/// Checks `close` called from a task of `timer`, whose executor runs one task at a time
/// (Kafka's one thread, or a caller's pool of one): the tasks queued behind it cannot run
/// until it returns, so it must not wait for them, nor for itself; they still run after.
pub(crate) fn assert_close_from_the_only_executor_thread_skips_the_queue(timer: Arc<dyn Timer>) {
    let (go, wait) = mpsc::channel::<()>();
    let (tx, rx) = mpsc::channel();
    let inner = Arc::clone(&timer);
    timer.add(timer_task(0, move || {
        wait.recv().unwrap();
        let closing = Instant::now();
        inner.close();
        tx.send(closing.elapsed()).unwrap();
    }));
    let behind = Arc::new(AtomicUsize::new(0));
    for _ in 0..5 {
        let behind = Arc::clone(&behind);
        timer.add(timer_task(0, move || {
            behind.fetch_add(1, Ordering::SeqCst);
        }));
    }
    go.send(()).unwrap();
    let took = rx
        .recv_timeout(super::PATIENCE)
        .expect("the inner close returned");
    assert!(
        took < Duration::from_secs(2),
        "the inner close took {took:?}"
    );
    eventually(
        super::PATIENCE,
        "the tasks queued behind it still run",
        || behind.load(Ordering::SeqCst) == 5,
    );
}
