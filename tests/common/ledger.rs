//! Per-task counters for the counting stress tests: each task owns a slot, `run` bumps its
//! run count, a `cancel()` that returned true bumps its cancel count, `Drop` bumps its drop
//! count. At the end a slot must show exactly one way the task ended, and one drop: a task
//! that ran twice, ran and was cancelled, or was lost (neither, or never freed) is reported
//! by id.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::thread;
use std::time::Duration;

use timingwheel::{Timer, TimerTask, TimerTaskEntry};

use super::rng::Rng;

/// One slot of counters per task.
pub(crate) struct Ledger {
    pub(crate) runs: Vec<AtomicU8>,
    pub(crate) cancels: Vec<AtomicU8>,
    pub(crate) drops: Vec<AtomicU8>,
}

fn read(counters: &[AtomicU8], id: usize) -> usize {
    usize::from(counters[id].load(Ordering::SeqCst))
}

impl Ledger {
    pub(crate) fn new(tasks: usize) -> Arc<Ledger> {
        let zeros = || (0..tasks).map(|_| AtomicU8::new(0)).collect();
        Arc::new(Ledger {
            runs: zeros(),
            cancels: zeros(),
            drops: zeros(),
        })
    }

    pub(crate) fn len(&self) -> usize {
        self.runs.len()
    }

    /// Task `id`, counting its runs and drops here.
    pub(crate) fn task(self: &Arc<Self>, id: usize, delay_ms: i64) -> Box<LedgerTask> {
        Box::new(LedgerTask {
            id,
            delay_ms,
            ledger: Arc::clone(self),
        })
    }

    /// Adds task `id` to `timer`.
    pub(crate) fn add(
        self: &Arc<Self>,
        timer: &dyn Timer,
        id: usize,
        delay_ms: i64,
    ) -> TimerTaskEntry {
        timer.add(self.task(id, delay_ms))
    }

    /// Marks task `id` as ended without running (replaced or cancelled by key, refused):
    /// it must then never run, and be dropped once.
    pub(crate) fn ended_unrun(&self, id: usize) {
        self.cancels[id].fetch_add(1, Ordering::SeqCst);
    }

    /// Cancels task `id` through `entry`, counting the cancel if it won.
    pub(crate) fn cancel(&self, entry: &TimerTaskEntry, id: usize) -> bool {
        let won = entry.cancel();
        if won {
            self.cancels[id].fetch_add(1, Ordering::SeqCst);
        }
        won
    }

    pub(crate) fn runs(&self, id: usize) -> usize {
        read(&self.runs, id)
    }

    pub(crate) fn cancels(&self, id: usize) -> usize {
        read(&self.cancels, id)
    }

    pub(crate) fn drops(&self, id: usize) -> usize {
        read(&self.drops, id)
    }

    pub(crate) fn total_runs(&self) -> usize {
        (0..self.len()).map(|id| self.runs(id)).sum()
    }

    /// Every task's drop count.
    pub(crate) fn all_drops(&self) -> Vec<usize> {
        (0..self.len()).map(|id| self.drops(id)).collect()
    }

    /// How many tasks ran or were cancelled.
    pub(crate) fn settled(&self) -> usize {
        (0..self.len())
            .filter(|&id| self.runs(id) + self.cancels(id) > 0)
            .count()
    }

    /// Asserts that every task ran once or was cancelled once, and was freed once; returns
    /// how many ran and how many were cancelled.
    pub(crate) fn assert_exactly_once(&self) -> (usize, usize) {
        self.assert_first_exactly_once(self.len())
    }

    /// [`assert_exactly_once`](Ledger::assert_exactly_once) for tasks `0..tasks` only, for a
    /// run that made fewer tasks than the ledger has slots.
    pub(crate) fn assert_first_exactly_once(&self, tasks: usize) -> (usize, usize) {
        let (mut ran, mut cancelled) = (0, 0);
        for id in 0..tasks {
            let (runs, cancels, drops) = (self.runs(id), self.cancels(id), self.drops(id));
            assert_eq!(
                (runs + cancels, drops),
                (1, 1),
                "task {id}: ran {runs} times, cancelled {cancels} times, dropped {drops} times"
            );
            ran += runs;
            cancelled += cancels;
        }
        (ran, cancelled)
    }
}

/// A task of a [`Ledger`].
pub(crate) struct LedgerTask {
    id: usize,
    delay_ms: i64,
    ledger: Arc<Ledger>,
}

impl TimerTask for LedgerTask {
    fn delay_ms(&self) -> i64 {
        self.delay_ms
    }
    fn run(self: Box<Self>) {
        self.ledger.runs[self.id].fetch_add(1, Ordering::SeqCst);
    }
}

impl Drop for LedgerTask {
    fn drop(&mut self) {
        self.ledger.drops[self.id].fetch_add(1, Ordering::SeqCst);
    }
}

/// Adds every task of `ledger` to `timer` from `adders` threads at once, each with a seeded
/// delay from 0 to 11 ms (`task` makes it from its id and delay), and cancels a random one
/// of the last 32 handles it kept (a third of them) as it goes, pausing 1 ms every 128
/// adds so that expiries interleave: the churn of the counting stress tests. Returns once
/// every task was added; a driver must run meanwhile for the due ones to expire.
pub(crate) fn churn(
    timer: &dyn Timer,
    ledger: &Arc<Ledger>,
    adders: usize,
    task: impl Fn(usize, i64) -> Box<dyn TimerTask> + Sync,
) {
    let tasks = ledger.len();
    thread::scope(|s| {
        for a in 0..adders {
            let task = &task;
            s.spawn(move || {
                let mut rng = Rng::new(a as u64 + 1);
                let mut kept: Vec<(usize, TimerTaskEntry)> = Vec::new();
                for id in (a..tasks).step_by(adders) {
                    let entry = timer.add(task(id, rng.below(12) as i64));
                    if rng.below(3) == 0 {
                        kept.push((id, entry));
                    }
                    if kept.len() > 32 {
                        let (id, entry) = kept.swap_remove(rng.below(32) as usize);
                        ledger.cancel(&entry, id);
                    }
                    if id % 128 < adders {
                        thread::sleep(Duration::from_millis(1));
                    }
                }
            });
        }
    });
}
