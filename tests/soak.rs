//! Soak: for `TIMINGWHEEL_SOAK_SECS` seconds (default 20), threads add, cancel and drive a
//! real-clock `SystemTimer` at random; every task's outcome is counted at the end.
//!
//! Ignored by default (it runs for the whole duration). CI:
//!
//! ```text
//! TIMINGWHEEL_SOAK_SECS=20 cargo test --release --test soak -- --ignored --nocapture
//! ```
//!
//! Each task carries a one-byte slot shared with the thread that added it: running it or
//! winning a cancel bumps the slot, and a bump that finds it already set is a double (ran
//! twice, or ran and was cancelled). At the end, runs + cancels must equal adds (nothing
//! lost), drops must equal adds (nothing leaked), and no task may have run before the
//! instant of its `add` plus its delay (the default 1 ms tick guarantees that).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use timingwheel::{SystemTimer, Timer, TimerTask, TimerTaskEntry, timer_task};

mod common;
use common::rng::Rng;
use common::sync::{SetOnDrop, barrier};

/// Seconds of soak unless `TIMINGWHEEL_SOAK_SECS` says otherwise.
const DEFAULT_SOAK_SECS: u64 = 20;
/// Threads that add and cancel.
const ADDERS: usize = 3;
/// Threads that call `advance_clock` (Kafka uses one; two is harder).
const DRIVERS: usize = 2;
/// Adds per adder between two 1 ms pauses: bounds the rate to keep memory flat.
const ADDS_PER_PAUSE: u64 = 50;
/// How long every task may take to settle once the adders stop (delays are <= 2 s).
const SETTLE: Duration = Duration::from_secs(60);
/// Loose upper bound on how late a task may run.
const MAX_LATENESS: Duration = Duration::from_secs(10);

#[derive(Default)]
struct Stats {
    added: AtomicU64,
    ran: AtomicU64,
    cancelled: AtomicU64,
    dropped: AtomicU64,
    doubled: AtomicU64,
    early: AtomicU64,
    max_late_us: AtomicU64,
    nested_added: AtomicU64,
    nested_ran: AtomicU64,
}

impl Stats {
    /// Marks a slot settled; counts a double if it already was.
    fn settle(&self, slot: &AtomicU8) {
        if slot.fetch_add(1, Ordering::SeqCst) != 0 {
            self.doubled.fetch_add(1, Ordering::SeqCst);
        }
    }
}

struct SoakTask {
    delay_ms: i64,
    added: Instant,
    slot: Arc<AtomicU8>,
    stats: Arc<Stats>,
    /// Some tasks add one more (untracked but counted) task from inside `run`.
    reenter: Option<Arc<SystemTimer>>,
}

impl TimerTask for SoakTask {
    fn delay_ms(&self) -> i64 {
        self.delay_ms
    }
    fn run(self: Box<Self>) {
        let waited = self.added.elapsed();
        let delay = Duration::from_millis(self.delay_ms.max(0) as u64);
        if waited < delay {
            self.stats.early.fetch_add(1, Ordering::SeqCst);
        } else {
            let late = (waited - delay).as_micros() as u64;
            self.stats.max_late_us.fetch_max(late, Ordering::Relaxed);
        }
        self.stats.settle(&self.slot);
        self.stats.ran.fetch_add(1, Ordering::SeqCst);
        if let Some(timer) = &self.reenter {
            let stats = Arc::clone(&self.stats);
            self.stats.nested_added.fetch_add(1, Ordering::SeqCst);
            timer.add(timer_task((self.delay_ms & 15) - 3, move || {
                stats.nested_ran.fetch_add(1, Ordering::SeqCst);
            }));
        }
    }
}

impl Drop for SoakTask {
    fn drop(&mut self) {
        self.stats.dropped.fetch_add(1, Ordering::SeqCst);
    }
}

fn random_delay(rng: &mut Rng) -> i64 {
    match rng.below(100) {
        0..=59 => rng.below(50) as i64,
        60..=84 => rng.below(400) as i64,
        85..=94 => rng.below(2_000) as i64,
        95..=97 => -(rng.below(1_000) as i64),
        98 => i64::MIN,
        _ => i64::MAX,
    }
}

fn soak_secs() -> u64 {
    std::env::var("TIMINGWHEEL_SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(DEFAULT_SOAK_SECS)
}

#[test]
#[ignore = "soak: runs for TIMINGWHEEL_SOAK_SECS (default 20 s); use --release"]
fn soak_nothing_lost_doubled_or_early() {
    let duration = Duration::from_secs(soak_secs());
    let timer = Arc::new(SystemTimer::new("soak"));
    let stats = Arc::new(Stats::default());
    let stop_adding = AtomicBool::new(false);
    let stop_driving = AtomicBool::new(false);
    let start = Instant::now();
    thread::scope(|s| {
        let _stop_driving = SetOnDrop(&stop_driving);
        let _stop_adding = SetOnDrop(&stop_adding);
        for d in 0..DRIVERS {
            let (timer, stop) = (&timer, &stop_driving);
            s.spawn(move || {
                let mut rng = Rng::new(0xD1B5_4A32_D192_ED03 ^ d as u64);
                while !stop.load(Ordering::SeqCst) {
                    timer.advance_clock(rng.below(50) as i64);
                }
            });
        }
        let adders: Vec<_> = (0..ADDERS)
            .map(|a| {
                let (timer, stats, stop) = (&timer, &stats, &stop_adding);
                s.spawn(move || {
                    let mut rng = Rng::new(a as u64 + 1);
                    let mut held: Vec<(Arc<AtomicU8>, TimerTaskEntry)> = Vec::new();
                    let mut adds = 0u64;
                    let cancel = |slot: &AtomicU8, entry: &TimerTaskEntry| {
                        if entry.cancel() {
                            stats.settle(slot);
                            stats.cancelled.fetch_add(1, Ordering::SeqCst);
                        }
                    };
                    while !stop.load(Ordering::SeqCst) {
                        let delay_ms = random_delay(&mut rng);
                        let slot = Arc::new(AtomicU8::new(0));
                        let reenter = (rng.below(50) == 0).then(|| Arc::clone(timer));
                        let task = SoakTask {
                            delay_ms,
                            added: Instant::now(),
                            slot: Arc::clone(&slot),
                            stats: Arc::clone(stats),
                            reenter,
                        };
                        stats.added.fetch_add(1, Ordering::SeqCst);
                        let entry = timer.add(Box::new(task));
                        if delay_ms == i64::MAX || rng.below(3) == 0 {
                            held.push((slot, entry));
                        }
                        // Cancel a random held entry: pending, due, in flight or done.
                        if !held.is_empty() && (held.len() > 1_000 || rng.below(3) == 0) {
                            let at = rng.below(held.len() as u64) as usize;
                            let (slot, entry) = held.swap_remove(at);
                            cancel(&slot, &entry);
                            if entry.expiration_ms() == i64::MAX {
                                assert!(entry.cancelled(), "a task due at i64::MAX was cancelled");
                            }
                        }
                        adds += 1;
                        if adds % ADDS_PER_PAUSE == 0 {
                            thread::sleep(Duration::from_millis(1));
                        }
                    }
                    for (slot, entry) in held {
                        cancel(&slot, &entry);
                    }
                })
            })
            .collect();
        thread::sleep(duration);
        stop_adding.store(true, Ordering::SeqCst);
        for adder in adders {
            adder.join().unwrap();
        }
        let deadline = Instant::now() + SETTLE;
        loop {
            let added = stats.added.load(Ordering::SeqCst);
            let settled = stats.ran.load(Ordering::SeqCst) + stats.cancelled.load(Ordering::SeqCst);
            let nested_done = stats.nested_ran.load(Ordering::SeqCst)
                == stats.nested_added.load(Ordering::SeqCst);
            if settled >= added && nested_done && timer.size() == 0 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "not settled: {settled} of {added} tasks, {} of {} nested, size {}",
                stats.nested_ran.load(Ordering::SeqCst),
                stats.nested_added.load(Ordering::SeqCst),
                timer.size()
            );
            thread::sleep(Duration::from_millis(10));
        }
        // The last tasks' drops follow their runs: wait for the executor to pass them.
        barrier(&*timer);
        stop_driving.store(true, Ordering::SeqCst);
    });
    let elapsed = start.elapsed();
    let get = |counter: &AtomicU64| counter.load(Ordering::SeqCst);
    let added = get(&stats.added);
    eprintln!(
        "soak {elapsed:?}: added {added}, ran {}, cancelled {}, dropped {}, doubled {}, \
         early {}, nested {}/{}, max lateness {} us",
        get(&stats.ran),
        get(&stats.cancelled),
        get(&stats.dropped),
        get(&stats.doubled),
        get(&stats.early),
        get(&stats.nested_ran),
        get(&stats.nested_added),
        get(&stats.max_late_us),
    );
    assert!(added > 0);
    assert_eq!(
        get(&stats.doubled),
        0,
        "tasks ran twice or ran and were cancelled"
    );
    assert_eq!(get(&stats.ran) + get(&stats.cancelled), added, "tasks lost");
    assert_eq!(get(&stats.dropped), added, "tasks not freed");
    assert_eq!(get(&stats.early), 0, "tasks ran before add + delay");
    assert!(Duration::from_micros(get(&stats.max_late_us)) < MAX_LATENESS);
    timer.close();
}
