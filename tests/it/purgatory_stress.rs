//! Concurrency stress of the purgatory: every operation is counted.
//!
//! Each operation owns a slot in a `Ledger`: its `on_complete` and `on_expiration` calls,
//! and its drop. Every way of completing one reports whether it did (`try_complete_else_watch`
//! and `force_complete` return a bool, `check_and_complete` a count, expiry calls
//! `on_expiration`), and the reported completions must add up to exactly one per operation.
//! At the end every slot must read one `on_complete`, at most one `on_expiration` (only for an
//! operation whose timeout had passed, never early), and one drop.

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use common::rng::Rng;
use timingwheel::{Delayed, DelayedOperation, DelayedOperationPurgatory};

/// Threads completing, forcing and watching at once.
const THREADS: usize = 8;
/// Operations in all; each thread watches `OPERATIONS / THREADS` of them.
const OPERATIONS: usize = 4_000;
/// Keys of the watch lists; each operation is watched under `KEYS_PER_OPERATION` of them.
const KEYS: u32 = 64;
const KEYS_PER_OPERATION: usize = 3;
/// Every `SHORT_EVERY`-th operation times out after 1..=`SHORT_MAX_MS`; the others after
/// `LONG_MS`, which no test run reaches: they must be completed by the threads.
const SHORT_EVERY: usize = 4;
const SHORT_MAX_MS: u64 = 20;
const LONG_MS: i64 = 600_000;
/// Actions (ack + check, ack + try, force) each thread takes besides watching its
/// operations.
const ACTIONS_PER_THREAD: usize = 1_500;
/// How long the purgatory may take to settle once the threads are done.
const SETTLE: Duration = Duration::from_secs(30);

/// Per-operation counters.
struct Ledger {
    completions: Vec<AtomicU8>,
    expirations: Vec<AtomicU8>,
    drops: Vec<AtomicU8>,
    /// Expirations that came before the operation's delay had passed.
    early: AtomicUsize,
    /// `on_expiration` calls not right after this operation's own `on_complete`.
    expired_uncompleted: AtomicUsize,
}

impl Ledger {
    fn new(operations: usize) -> Arc<Ledger> {
        let zeros = || (0..operations).map(|_| AtomicU8::new(0)).collect();
        Arc::new(Ledger {
            completions: zeros(),
            expirations: zeros(),
            drops: zeros(),
            early: AtomicUsize::new(0),
            expired_uncompleted: AtomicUsize::new(0),
        })
    }

    fn expirations(&self) -> usize {
        self.expirations
            .iter()
            .map(|e| usize::from(e.load(Ordering::SeqCst)))
            .sum()
    }

    /// Asserts every operation completed once, expired at most once and never early.
    fn assert_exactly_once(&self) {
        let count = |v: &[AtomicU8], id: usize| v[id].load(Ordering::SeqCst);
        for id in 0..self.completions.len() {
            assert_eq!(
                count(&self.completions, id),
                1,
                "on_complete of operation {id}"
            );
            assert!(count(&self.expirations, id) <= 1, "on_expiration of {id}");
        }
        assert_eq!(self.early.load(Ordering::SeqCst), 0, "expired early");
        assert_eq!(self.expired_uncompleted.load(Ordering::SeqCst), 0);
    }

    fn assert_all_dropped(&self) {
        for (id, drops) in self.drops.iter().enumerate() {
            assert_eq!(drops.load(Ordering::SeqCst), 1, "drops of operation {id}");
        }
    }
}

/// An operation that completes once it has `needed_acks` acknowledgements.
struct Counted {
    id: usize,
    delay_ms: i64,
    keys: [u32; KEYS_PER_OPERATION],
    needed_acks: u32,
    acks: AtomicU32,
    /// Taken just before the operation is watched: its expiry may not come earlier than
    /// this plus the delay.
    watched_at: Instant,
    ledger: Arc<Ledger>,
}

impl DelayedOperation for Counted {
    fn delay_ms(&self) -> i64 {
        self.delay_ms
    }
    fn try_complete(&self) -> bool {
        self.acks.load(Ordering::SeqCst) >= self.needed_acks
    }
    fn on_complete(&self) {
        self.ledger.completions[self.id].fetch_add(1, Ordering::SeqCst);
    }
    fn on_expiration(&self) {
        let ledger = &self.ledger;
        ledger.expirations[self.id].fetch_add(1, Ordering::SeqCst);
        if self.watched_at.elapsed() < Duration::from_millis(self.delay_ms as u64) {
            ledger.early.fetch_add(1, Ordering::SeqCst);
        }
        if ledger.completions[self.id].load(Ordering::SeqCst) != 1 {
            ledger.expired_uncompleted.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.ledger.drops[self.id].fetch_add(1, Ordering::SeqCst);
    }
}

/// `KEYS_PER_OPERATION` distinct keys.
fn distinct_keys(rng: &mut Rng) -> [u32; KEYS_PER_OPERATION] {
    let mut keys = [0; KEYS_PER_OPERATION];
    for i in 0..KEYS_PER_OPERATION {
        keys[i] = loop {
            let key = rng.below(u64::from(KEYS)) as u32;
            if !keys[..i].contains(&key) {
                break key;
            }
        };
    }
    keys
}

/// What each way of completing reported, summed over the threads.
#[derive(Default)]
struct Reported {
    by_watch: AtomicUsize,
    by_check: AtomicUsize,
    by_force: AtomicUsize,
    by_try: AtomicUsize,
}

impl Reported {
    fn total(&self) -> usize {
        [&self.by_watch, &self.by_check, &self.by_force, &self.by_try]
            .iter()
            .map(|c| c.load(Ordering::SeqCst))
            .sum()
    }
}

#[test]
fn eight_threads_completing_and_forcing_while_operations_expire_complete_each_exactly_once() {
    let ledger = Ledger::new(OPERATIONS);
    let purgatory = DelayedOperationPurgatory::<u32, Counted>::builder("stress")
        .purge_interval(16)
        .reaper_poll_ms(5)
        .build();
    // Published before being watched, so other threads race with the watching too.
    let slots: Vec<OnceLock<Delayed<Counted>>> = (0..OPERATIONS).map(|_| OnceLock::new()).collect();
    let reported = Reported::default();

    thread::scope(|s| {
        for t in 0..THREADS {
            let (ledger, purgatory, slots, reported) = (&ledger, &purgatory, &slots, &reported);
            s.spawn(move || {
                let mut rng = Rng::new(t as u64 + 1);
                let mut own = (t..OPERATIONS).step_by(THREADS).peekable();
                let mut actions = 0;
                while own.peek().is_some() || actions < ACTIONS_PER_THREAD {
                    let roll = rng.below(10);
                    if roll < 3 && own.peek().is_some() || actions >= ACTIONS_PER_THREAD {
                        let Some(id) = own.next() else { continue };
                        let delay_ms = if id % SHORT_EVERY == 0 {
                            1 + rng.below(SHORT_MAX_MS) as i64
                        } else {
                            LONG_MS
                        };
                        let op = Delayed::new(Counted {
                            id,
                            delay_ms,
                            keys: distinct_keys(&mut rng),
                            needed_acks: 1 + rng.below(3) as u32,
                            acks: AtomicU32::new(0),
                            watched_at: Instant::now(),
                            ledger: Arc::clone(ledger),
                        });
                        let op = slots[id].get_or_init(|| op);
                        if purgatory.try_complete_else_watch(op, &op.operation().keys) {
                            reported.by_watch.fetch_add(1, Ordering::SeqCst);
                        }
                        continue;
                    }
                    actions += 1;
                    let Some(op) = slots[rng.below(OPERATIONS as u64) as usize].get() else {
                        continue;
                    };
                    match roll {
                        0..=5 => {
                            op.operation().acks.fetch_add(1, Ordering::SeqCst);
                            let key = op.operation().keys[rng.below(3) as usize];
                            let completed = purgatory.check_and_complete(&key);
                            reported.by_check.fetch_add(completed, Ordering::SeqCst);
                        }
                        6..=7 => {
                            if op.force_complete() {
                                reported.by_force.fetch_add(1, Ordering::SeqCst);
                            }
                        }
                        _ => {
                            op.operation().acks.fetch_add(1, Ordering::SeqCst);
                            if op.try_complete() {
                                reported.by_try.fetch_add(1, Ordering::SeqCst);
                            }
                        }
                    }
                }
            });
        }
    });

    // The long operations left are completed the ordinary way; the short ones must expire
    // by themselves.
    for op in slots.iter().filter_map(OnceLock::get) {
        if op.operation().delay_ms == LONG_MS && !op.is_completed() {
            op.operation().acks.store(u32::MAX, Ordering::SeqCst);
            for key in op.operation().keys {
                let completed = purgatory.check_and_complete(&key);
                reported.by_check.fetch_add(completed, Ordering::SeqCst);
            }
        }
    }
    // `num_delayed` stops counting an operation once its expiry is handed to the executor,
    // before that runs it: wait for the completions too.
    let start = Instant::now();
    while purgatory.num_delayed() > 0 || reported.total() + ledger.expirations() < OPERATIONS {
        assert!(
            start.elapsed() < SETTLE,
            "{} still delayed, {} of {OPERATIONS} completions seen",
            purgatory.num_delayed(),
            reported.total() + ledger.expirations()
        );
        thread::sleep(Duration::from_millis(5));
    }

    ledger.assert_exactly_once();
    let expired = ledger.expirations();
    assert_eq!(
        reported.total() + expired,
        OPERATIONS,
        "completions reported: watch {}, check {}, force {}, try {}, expired {expired}",
        reported.by_watch.load(Ordering::SeqCst),
        reported.by_check.load(Ordering::SeqCst),
        reported.by_force.load(Ordering::SeqCst),
        reported.by_try.load(Ordering::SeqCst),
    );
    for (id, op) in slots.iter().enumerate() {
        let op = op.get().expect("every operation was watched");
        let expirations = ledger.expirations[id].load(Ordering::SeqCst);
        assert!(
            expirations == 0 || op.operation().delay_ms != LONG_MS,
            "operation {id} expired before its timeout"
        );
    }
    for (way, count) in [
        ("check", &reported.by_check),
        ("force", &reported.by_force),
        ("try", &reported.by_try),
    ] {
        assert!(count.load(Ordering::SeqCst) > 0, "no completion by {way}");
    }
    assert!(expired > 0, "no completion by expiry");

    // Nothing is left behind: the watch lists empty out, and every operation is freed.
    for key in 0..KEYS {
        assert_eq!(purgatory.check_and_complete(&key), 0);
    }
    assert_eq!(purgatory.watched(), 0);
    purgatory.shutdown();
    // Shut down: the executor has finished every expiry it was handed.
    assert_eq!(
        purgatory.expired_count(),
        ledger.expirations() as u64,
        "expired_count counts each expiry once"
    );
    drop(purgatory);
    drop(slots);
    ledger.assert_all_dropped();
}

/// An operation made completable by another thread, at any moment of its watching.
struct Racing {
    id: usize,
    completable: AtomicBool,
    /// Whether the first `try_complete` lingers after reading `completable`, so that the
    /// other thread's check often falls between that read and the watching.
    lingers: bool,
    tries: AtomicUsize,
    ledger: Arc<Ledger>,
}

impl Racing {
    fn new(id: usize, lingers: bool, ledger: &Arc<Ledger>) -> Delayed<Racing> {
        Delayed::new(Racing {
            id,
            completable: AtomicBool::new(false),
            lingers,
            tries: AtomicUsize::new(0),
            ledger: Arc::clone(ledger),
        })
    }
}

impl DelayedOperation for Racing {
    fn delay_ms(&self) -> i64 {
        LONG_MS
    }
    fn try_complete(&self) -> bool {
        let completable = self.completable.load(Ordering::SeqCst);
        if self.lingers && self.tries.fetch_add(1, Ordering::SeqCst) == 0 {
            thread::sleep(LINGER);
        }
        completable
    }
    fn on_complete(&self) {
        self.ledger.completions[self.id].fetch_add(1, Ordering::SeqCst);
    }
    fn on_expiration(&self) {
        self.ledger.expirations[self.id].fetch_add(1, Ordering::SeqCst);
    }
}

impl Drop for Racing {
    fn drop(&mut self) {
        self.ledger.drops[self.id].fetch_add(1, Ordering::SeqCst);
    }
}

/// Operations of the watch-versus-complete race.
const RACING_OPERATIONS: usize = 5_000;
/// Every `LINGER_EVERY`-th of them lingers `LINGER` in its first `try_complete`.
const LINGER_EVERY: usize = 4;
const LINGER: Duration = Duration::from_micros(50);

#[test]
fn completions_racing_try_complete_else_watch_are_never_missed() {
    let ledger = Ledger::new(RACING_OPERATIONS);
    let purgatory = DelayedOperationPurgatory::<usize, Racing>::new("race", 0);
    let reported = Reported::default();
    let (tx, rx) = mpsc::channel::<Delayed<Racing>>();
    thread::scope(|s| {
        // The completer makes each operation completable and checks its key exactly once,
        // whenever that falls relative to the watching.
        s.spawn(|| {
            for op in rx {
                op.operation().completable.store(true, Ordering::SeqCst);
                let completed = purgatory.check_and_complete(&op.operation().id);
                reported.by_check.fetch_add(completed, Ordering::SeqCst);
            }
        });
        for id in 0..RACING_OPERATIONS {
            let op = Racing::new(id, id % LINGER_EVERY == 0, &ledger);
            tx.send(op.clone()).unwrap();
            if purgatory.try_complete_else_watch(&op, &[id, RACING_OPERATIONS + id % 8]) {
                reported.by_watch.fetch_add(1, Ordering::SeqCst);
            }
        }
        drop(tx);
    });
    // No check after the completer's: whatever it missed would stay pending.
    let pending: Vec<usize> = (0..RACING_OPERATIONS)
        .filter(|&id| ledger.completions[id].load(Ordering::SeqCst) == 0)
        .collect();
    assert!(
        pending.is_empty(),
        "{} completions missed, the first: {:?}",
        pending.len(),
        &pending[..pending.len().min(10)]
    );
    ledger.assert_exactly_once();
    assert_eq!(reported.total(), RACING_OPERATIONS);
    assert_eq!(ledger.expirations(), 0);
    assert_eq!(purgatory.num_delayed(), 0, "every timeout cancelled");
    purgatory.shutdown();
    drop(purgatory);
    ledger.assert_all_dropped();
}

/// Operations all watched under one hot key.
const HOT_OPERATIONS: usize = 2_000;
/// The key every thread checks.
const HOT: u32 = u32::MAX;

#[test]
fn many_threads_checking_one_key_complete_each_operation_once() {
    let ledger = Ledger::new(HOT_OPERATIONS);
    let purgatory = DelayedOperationPurgatory::<u32, Racing>::builder("hot")
        .purge_interval(16)
        .reaper_poll_ms(5)
        .build();
    let ops: Vec<Delayed<Racing>> = (0..HOT_OPERATIONS)
        .map(|id| {
            let op = Racing::new(id, false, &ledger);
            assert!(!purgatory.try_complete_else_watch(&op, &[HOT, id as u32 % 32]));
            op
        })
        .collect();
    let by_check = AtomicUsize::new(0);
    thread::scope(|s| {
        for t in 0..THREADS {
            let (ops, purgatory, by_check) = (&ops, &purgatory, &by_check);
            s.spawn(move || {
                for op in ops.iter().skip(t).step_by(THREADS) {
                    op.operation().completable.store(true, Ordering::SeqCst);
                    by_check.fetch_add(purgatory.check_and_complete(&HOT), Ordering::SeqCst);
                }
            });
        }
    });
    assert_eq!(by_check.load(Ordering::SeqCst), HOT_OPERATIONS);
    ledger.assert_exactly_once();
    assert_eq!(purgatory.num_delayed(), 0);
    for key in 0..32 {
        assert_eq!(purgatory.check_and_complete(&key), 0);
    }
    assert_eq!(purgatory.watched(), 0);
    drop(purgatory);
    drop(ops);
    ledger.assert_all_dropped();
}

/// Rounds of the all-at-once race; in each, every thread tries to complete one operation.
const ROUNDS: usize = 5_000;

#[test]
fn threads_completing_one_operation_at_once_run_on_complete_once() {
    let ledger = Ledger::new(ROUNDS);
    let purgatory = DelayedOperationPurgatory::<usize, Racing>::builder("at-once")
        .timer(timingwheel::MockTimer::new())
        .reaper_enabled(false)
        .build();
    let ops: Vec<Delayed<Racing>> = (0..ROUNDS)
        .map(|id| {
            let op = Racing::new(id, false, &ledger);
            assert!(!purgatory.try_complete_else_watch(&op, &[id]));
            op.operation().completable.store(true, Ordering::SeqCst);
            op
        })
        .collect();
    let barrier = std::sync::Barrier::new(THREADS);
    let winners = AtomicUsize::new(0);
    thread::scope(|s| {
        for t in 0..THREADS {
            let (ops, purgatory, barrier, winners) = (&ops, &purgatory, &barrier, &winners);
            s.spawn(move || {
                for (id, op) in ops.iter().enumerate() {
                    barrier.wait();
                    // Half the threads force it; the others complete it the ordinary ways.
                    let won = match t % 4 {
                        0 | 1 => usize::from(op.force_complete()),
                        2 => usize::from(op.try_complete()),
                        _ => purgatory.check_and_complete(&id),
                    };
                    winners.fetch_add(won, Ordering::SeqCst);
                }
            });
        }
    });
    assert_eq!(
        winners.load(Ordering::SeqCst),
        ROUNDS,
        "one winner per operation"
    );
    ledger.assert_exactly_once();
    assert_eq!(purgatory.num_delayed(), 0);
}

/// Operations handed to the purgatory while it shuts down: the first quarter before
/// `shutdown` is called, the last quarter after it returned, the rest whenever the threads
/// get to them.
const SHUTDOWN_RACE_OPERATIONS: usize = 4_000;

#[test]
fn operations_given_while_the_purgatory_shuts_down_are_answered_at_most_once_and_never_left_unanswered_after_it()
 {
    const N: usize = SHUTDOWN_RACE_OPERATIONS;
    let ledger = Ledger::new(N);
    let purgatory = DelayedOperationPurgatory::<usize, Racing>::new("shutdown-race", 0);
    // Whether operation i was handed over only after `shutdown` had returned.
    let after: Vec<AtomicBool> = (0..N).map(|_| AtomicBool::new(false)).collect();
    let next = AtomicUsize::new(0);
    let shutdown_returned = AtomicBool::new(false);
    let mut ops = Vec::new();
    thread::scope(|s| {
        let workers: Vec<_> = (0..THREADS)
            .map(|_| {
                let (ledger, purgatory, after, next, shutdown_returned) =
                    (&ledger, &purgatory, &after, &next, &shutdown_returned);
                s.spawn(move || {
                    let mut own = Vec::new();
                    loop {
                        let id = next.fetch_add(1, Ordering::SeqCst);
                        if id >= N {
                            return own;
                        }
                        if id >= N * 3 / 4 {
                            common::sync::eventually(common::PATIENCE, "shutdown", || {
                                shutdown_returned.load(Ordering::SeqCst)
                            });
                        }
                        let op = Racing::new(id, false, ledger);
                        let returned = shutdown_returned.load(Ordering::SeqCst);
                        after[id].store(returned, Ordering::SeqCst);
                        assert!(!purgatory.try_complete_else_watch(&op, &[id % 16]));
                        own.push(op);
                    }
                })
            })
            .collect();
        common::sync::eventually(common::PATIENCE, "a quarter handed over", || {
            next.load(Ordering::SeqCst) >= N / 4
        });
        purgatory.shutdown();
        shutdown_returned.store(true, Ordering::SeqCst);
        for worker in workers {
            ops.extend(worker.join().unwrap());
        }
    });

    let count = |v: &[AtomicU8], id: usize| v[id].load(Ordering::SeqCst);
    let (mut answered_after, mut left_pending) = (0, 0);
    for (id, after) in after.iter().enumerate() {
        let completions = count(&ledger.completions, id);
        // Never completable: answered only as expired, or (watched before the shutdown, as
        // in Kafka) left pending.
        assert_eq!(
            completions,
            count(&ledger.expirations, id),
            "operation {id}"
        );
        assert!(
            completions <= 1,
            "operation {id} completed {completions} times"
        );
        if after.load(Ordering::SeqCst) {
            assert_eq!(completions, 1, "operation {id}, handed over after shutdown");
            answered_after += 1;
        } else if completions == 0 {
            left_pending += 1;
        }
    }
    assert!(
        answered_after >= N / 4,
        "answered after shutdown: {answered_after}"
    );
    assert!(left_pending >= N / 4, "left pending: {left_pending}");
    assert_eq!(purgatory.expired_count(), ledger.expirations() as u64);
    drop(purgatory);
    drop(ops);
    ledger.assert_all_dropped();
}
