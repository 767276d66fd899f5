//! The operation's lock as in Kafka 4.1+ (KAFKA-19312, apache/kafka#19759): every way of
//! completing takes the operation's re-entrant lock, so `on_complete` never overlaps a
//! `try_complete` in progress on another thread; a `force_complete` from inside
//! `try_complete` still works; and the expiry runs `on_expiration` after the lock is
//! released (`if force_complete() { on_expiration() }`).
//!
//! Each test drives a `MockTimer` from the test (the reaper is off). Where a test waits for
//! another thread to reach the lock, it waits a bounded time: on code without the lock the
//! overlap shows within it, and on correct code the wait only proves less, never fails.
//!
//! See `docs/guarantees.md` ("Purgatory") for the map from each guarantee to its tests.

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread;
use std::time::Duration;

use common::{PATIENCE, driven_purgatory};
use timingwheel::{Delayed, DelayedOperation, DelayedOperationPurgatory, MockTimer, Timer};

/// How long a test gives another thread to reach (and, without the lock, run past) the
/// operation's lock before it lets the blocked `try_complete` go.
const OVERLAP_WINDOW: Duration = Duration::from_millis(100);

/// An operation that watches its own lock: it knows its `Delayed` (to ask
/// `is_locked_by_current_thread` and to call `force_complete` on itself), can stop inside
/// `try_complete` until released, and records what each callback saw.
#[derive(Default)]
struct Watchful {
    delay_ms: i64,
    /// Its own handle, set after creation; taken out at the end of a test (the cycle).
    me: Mutex<Option<Delayed<Watchful>>>,
    /// What `try_complete` answers.
    completable: AtomicBool,
    /// When set, `try_complete` calls `force_complete` on itself first.
    force_inside: AtomicBool,
    /// When set, the next `try_complete` reports on the first and waits on the second.
    gate: Mutex<Option<(mpsc::Sender<()>, mpsc::Receiver<()>)>>,
    /// True while a `try_complete` runs.
    in_try: AtomicBool,
    completions: AtomicUsize,
    expirations: AtomicUsize,
    /// Whether a `try_complete` was in progress when `on_complete` started.
    overlapped: AtomicBool,
    /// `is_locked_by_current_thread` as `on_complete` and `on_expiration` saw it.
    locked_in_on_complete: Mutex<Option<bool>>,
    locked_in_on_expiration: Mutex<Option<bool>>,
}

impl Watchful {
    /// A pending operation due `delay_ms` after it is watched, that knows its handle.
    fn delayed(delay_ms: i64) -> Delayed<Watchful> {
        let op = Delayed::new(Watchful {
            delay_ms,
            ..Watchful::default()
        });
        *op.operation().me.lock().unwrap() = Some(op.clone());
        op
    }

    fn me(&self) -> Delayed<Watchful> {
        self.me.lock().unwrap().clone().expect("set at creation")
    }

    /// Lets go of its own handle, so that the operation can be freed.
    fn forget_me(&self) {
        self.me.lock().unwrap().take();
    }

    /// Makes the next `try_complete` stop inside; returns (inside, release).
    fn close_gate(&self) -> (mpsc::Receiver<()>, mpsc::Sender<()>) {
        let (inside_tx, inside_rx) = mpsc::channel();
        let (release_tx, release_rx) = mpsc::channel();
        *self.gate.lock().unwrap() = Some((inside_tx, release_rx));
        (inside_rx, release_tx)
    }
}

impl DelayedOperation for Watchful {
    fn delay_ms(&self) -> i64 {
        self.delay_ms
    }
    fn try_complete(&self) -> bool {
        self.in_try.store(true, Ordering::SeqCst);
        let gate = self.gate.lock().unwrap().take();
        if let Some((inside, release)) = gate {
            inside.send(()).unwrap();
            release.recv_timeout(PATIENCE).unwrap();
        }
        if self.force_inside.load(Ordering::SeqCst) {
            self.me().force_complete();
        }
        let completable = self.completable.load(Ordering::SeqCst);
        self.in_try.store(false, Ordering::SeqCst);
        completable
    }
    fn on_complete(&self) {
        if self.in_try.load(Ordering::SeqCst) && !self.force_inside.load(Ordering::SeqCst) {
            self.overlapped.store(true, Ordering::SeqCst);
        }
        *self.locked_in_on_complete.lock().unwrap() = Some(self.me().is_locked_by_current_thread());
        self.completions.fetch_add(1, Ordering::SeqCst);
    }
    fn on_expiration(&self) {
        *self.locked_in_on_expiration.lock().unwrap() =
            Some(self.me().is_locked_by_current_thread());
        self.expirations.fetch_add(1, Ordering::SeqCst);
    }
}

type Purgatory = DelayedOperationPurgatory<u32, Watchful>;

#[test]
fn on_complete_never_overlaps_a_try_complete_in_progress_on_another_thread() {
    // Two ways another thread completes the operation while a check holds its lock: by
    // force, and by its timeout expiring (the expiry runs `force_complete`).
    type Complete = fn(&Purgatory, &Arc<MockTimer>, &Delayed<Watchful>) -> bool;
    let ways: [(&str, Complete); 2] = [
        ("force_complete", |_, _, op| op.force_complete()),
        ("expiry", |_, timer, op| {
            timer.advance_clock(op.operation().delay_ms);
            op.operation().expirations.load(Ordering::SeqCst) == 1
        }),
    ];
    for (way, complete) in ways {
        let timer = Arc::new(MockTimer::new());
        let purgatory = driven_purgatory("lock", &timer);
        let op = Watchful::delayed(1_000);
        assert!(!purgatory.try_complete_else_watch(&op, &[1]), "{way}");
        let (inside, release) = op.operation().close_gate();
        thread::scope(|s| {
            // A: a check that finds the operation not completable, slowly, holding its lock.
            let check = s.spawn(|| purgatory.check_and_complete(&1));
            inside.recv_timeout(PATIENCE).expect("the check is inside");
            // B: completes it meanwhile.
            let completer = s.spawn(|| complete(&purgatory, &timer, &op));
            let deadline = std::time::Instant::now() + OVERLAP_WINDOW;
            while op.operation().completions.load(Ordering::SeqCst) == 0
                && std::time::Instant::now() < deadline
            {
                thread::sleep(Duration::from_millis(2));
            }
            assert_eq!(
                op.operation().completions.load(Ordering::SeqCst),
                0,
                "{way}: on_complete ran while another thread was inside try_complete"
            );
            release.send(()).unwrap();
            assert_eq!(check.join().unwrap(), 0, "{way}: the check said no");
            assert!(completer.join().unwrap(), "{way}: then B completed it");
        });
        assert!(!op.operation().overlapped.load(Ordering::SeqCst), "{way}");
        assert_eq!(
            op.operation().completions.load(Ordering::SeqCst),
            1,
            "{way}"
        );
        op.operation().forget_me();
    }
}

#[test]
fn on_complete_runs_under_the_lock_and_on_expiration_after_it_is_released() {
    let timer = Arc::new(MockTimer::new());
    let purgatory = driven_purgatory("lock", &timer);
    let op = Watchful::delayed(10);
    assert!(!purgatory.try_complete_else_watch(&op, &[1]));
    assert!(purgatory.advance_clock(10));
    let seen = op.operation();
    assert_eq!(seen.expirations.load(Ordering::SeqCst), 1);
    assert_eq!(*seen.locked_in_on_complete.lock().unwrap(), Some(true));
    assert_eq!(
        *seen.locked_in_on_expiration.lock().unwrap(),
        Some(false),
        "on_expiration runs after the lock is released"
    );
    // Released for good: another thread takes it at once.
    let other = thread::scope(|s| s.spawn(|| op.try_complete()).join().unwrap());
    assert!(!other);
    op.operation().forget_me();
}

#[test]
fn on_expiration_lets_other_threads_take_the_lock_while_it_runs() {
    /// Takes its own lock on another thread from inside `on_expiration`.
    struct Blocking {
        me: Mutex<Option<Delayed<Blocking>>>,
        other_thread_got_the_lock: AtomicBool,
    }
    impl DelayedOperation for Blocking {
        fn delay_ms(&self) -> i64 {
            10
        }
        fn try_complete(&self) -> bool {
            false
        }
        fn on_complete(&self) {}
        fn on_expiration(&self) {
            let me = self.me.lock().unwrap().take().unwrap();
            // Delayed::try_complete takes the lock: it returns only if it is free.
            let (tx, rx) = mpsc::channel();
            thread::spawn(move || {
                let _ = tx.send(me.try_complete());
            });
            let got = rx.recv_timeout(PATIENCE);
            self.other_thread_got_the_lock
                .store(got == Ok(false), Ordering::SeqCst);
        }
    }
    let timer = Arc::new(MockTimer::new());
    let purgatory = DelayedOperationPurgatory::<u32, Blocking>::builder("lock")
        .timer(Arc::clone(&timer))
        .reaper_enabled(false)
        .build();
    let op = Delayed::new(Blocking {
        me: Mutex::new(None),
        other_thread_got_the_lock: AtomicBool::new(false),
    });
    *op.operation().me.lock().unwrap() = Some(op.clone());
    assert!(!purgatory.try_complete_else_watch(&op, &[1]));
    assert!(purgatory.advance_clock(10));
    assert!(
        op.operation()
            .other_thread_got_the_lock
            .load(Ordering::SeqCst),
        "on_expiration held the lock: another thread could not take it"
    );
}

#[test]
fn force_complete_from_inside_try_complete_completes_the_operation_once() {
    let timer = Arc::new(MockTimer::new());
    let purgatory = driven_purgatory("lock", &timer);
    let op = Watchful::delayed(1_000);
    assert!(!purgatory.try_complete_else_watch(&op, &[1, 2]));
    op.operation().force_inside.store(true, Ordering::SeqCst);
    op.operation().completable.store(true, Ordering::SeqCst);
    // The lock is re-entrant: the force_complete inside does not deadlock, and this call
    // counts the completion it made.
    assert_eq!(purgatory.check_and_complete(&1), 1);
    assert!(op.is_completed());
    let seen = op.operation();
    assert_eq!(seen.completions.load(Ordering::SeqCst), 1);
    assert_eq!(*seen.locked_in_on_complete.lock().unwrap(), Some(true));
    assert_eq!(purgatory.num_delayed(), 0, "its timeout was cancelled");
    assert_eq!(purgatory.check_and_complete(&2), 0);
    timer.advance_clock(1_000);
    assert_eq!(seen.completions.load(Ordering::SeqCst), 1);
    assert_eq!(seen.expirations.load(Ordering::SeqCst), 0);
    op.operation().forget_me();
}

#[test]
fn force_complete_inside_try_complete_during_the_watch_completes_it_there() {
    let timer = Arc::new(MockTimer::new());
    let purgatory = driven_purgatory("lock", &timer);
    let op = Watchful::delayed(1_000);
    op.operation().force_inside.store(true, Ordering::SeqCst);
    op.operation().completable.store(true, Ordering::SeqCst);
    assert!(purgatory.try_complete_else_watch(&op, &[1]));
    assert_eq!(op.operation().completions.load(Ordering::SeqCst), 1);
    assert_eq!((purgatory.watched(), purgatory.num_delayed()), (0, 0));
    op.operation().forget_me();
}
