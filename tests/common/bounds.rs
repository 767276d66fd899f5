//! Never-early checks on the real clock: when each task may run at the earliest (the
//! instant of its `add`, or of the last `reschedule` that moved it, plus the delay), and
//! when it ran.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Instant;

use timingwheel::TimerTask;

use super::ledger::{Ledger, LedgerTask};

/// When each task may run at the earliest, and when it ran: nanoseconds since `base`.
pub(crate) struct Bounds {
    base: Instant,
    pub(crate) not_before_ns: Vec<AtomicI64>,
    pub(crate) ran_at_ns: Vec<AtomicI64>,
}

impl Bounds {
    pub(crate) fn new(tasks: usize) -> Arc<Bounds> {
        let zeros = || (0..tasks).map(|_| AtomicI64::new(-1)).collect();
        Arc::new(Bounds {
            base: Instant::now(),
            not_before_ns: zeros(),
            ran_at_ns: zeros(),
        })
    }

    pub(crate) fn now_ns(&self) -> i64 {
        self.base.elapsed().as_nanos() as i64
    }

    /// Task `id` of `ledger`, recording when it ran here.
    pub(crate) fn task(
        self: &Arc<Self>,
        ledger: &Arc<Ledger>,
        id: usize,
        delay_ms: i64,
    ) -> Box<dyn TimerTask> {
        let bounds = Arc::clone(self);
        let inner = ledger.task(id, delay_ms);
        Box::new(Timed {
            bounds,
            inner: Some(inner),
            id,
            delay_ms,
        })
    }

    /// Asserts that no task that ran ran before its bound.
    pub(crate) fn assert_never_early(&self, ledger: &Ledger) {
        for id in 0..self.ran_at_ns.len() {
            if ledger.runs(id) == 1 {
                let (ran, bound) = (
                    self.ran_at_ns[id].load(Ordering::SeqCst),
                    self.not_before_ns[id].load(Ordering::SeqCst),
                );
                assert!(
                    ran >= bound,
                    "task {id} ran {} µs early",
                    (bound - ran) / 1_000
                );
            }
        }
    }
}

/// A ledger task that also records when it ran.
struct Timed {
    bounds: Arc<Bounds>,
    inner: Option<Box<LedgerTask>>,
    id: usize,
    delay_ms: i64,
}

impl TimerTask for Timed {
    fn delay_ms(&self) -> i64 {
        self.delay_ms
    }
    fn run(mut self: Box<Self>) {
        self.bounds.ran_at_ns[self.id].store(self.bounds.now_ns(), Ordering::SeqCst);
        if let Some(inner) = self.inner.take() {
            inner.run();
        }
    }
}
