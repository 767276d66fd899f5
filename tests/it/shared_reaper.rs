//! `SharedSystemTimerReaper`: one driver thread for several timers (KAFKA-19937). Every task
//! of every timer runs once or is cancelled once, none early; one timer's flood holds
//! another's due task back by about one flush budget; a panicking task, a closed timer or a
//! timer's turn do not stop the thread; closing the reaper closes every timer it drives.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use crate::common::PATIENCE;
use crate::common::ledger::Ledger;
use crate::common::probe::{Callback, Probe};
use crate::common::rng::Rng;
use crate::common::sync::eventually;
use timingwheel::{
    DelayedOperationPurgatory, MockTime, MockTimer, SharedSystemTimerReaper, SystemTimer, Timer,
    TimerTask, hi_res_clock_ms, timer_task,
};

/// Timers on the one reaper, and tasks added to each, in the counting stress test.
const TIMERS: usize = 8;
const TASKS_PER_TIMER: usize = 3_000;

/// Records when it ran against the instant of its add plus its delay.
struct Deadline {
    delay_ms: i64,
    due_ms: i64,
    early: Arc<AtomicUsize>,
    ledger_task: Box<dyn TimerTask>,
}

impl TimerTask for Deadline {
    fn delay_ms(&self) -> i64 {
        self.delay_ms
    }
    fn run(self: Box<Self>) {
        if hi_res_clock_ms() < self.due_ms {
            self.early.fetch_add(1, Ordering::SeqCst);
        }
        self.ledger_task.run();
    }
}

#[test]
fn every_task_of_every_timer_runs_once_or_is_cancelled_once_and_none_early() {
    let reaper = SharedSystemTimerReaper::new("shared-stress");
    let timers: Vec<_> = (0..TIMERS)
        .map(|i| reaper.drive(SystemTimer::new(&format!("shared-{i}"))))
        .collect();
    let ledger = Ledger::new(TIMERS * TASKS_PER_TIMER);
    let early = Arc::new(AtomicUsize::new(0));
    thread::scope(|s| {
        for (t, timer) in timers.iter().enumerate() {
            let (ledger, early) = (&ledger, &early);
            s.spawn(move || {
                let mut rng = Rng::new(t as u64 + 1);
                let mut entries = Vec::new();
                for i in 0..TASKS_PER_TIMER {
                    let id = t * TASKS_PER_TIMER + i;
                    let delay_ms = rng.below(300) as i64;
                    entries.push((
                        id,
                        timer.add(Box::new(Deadline {
                            delay_ms,
                            due_ms: hi_res_clock_ms() + delay_ms,
                            early: Arc::clone(early),
                            ledger_task: ledger.task(id, delay_ms),
                        })),
                    ));
                    if rng.below(3) == 0 {
                        let (id, entry) = &entries[rng.below(entries.len() as u64) as usize];
                        ledger.cancel(entry, *id);
                    }
                }
            });
        }
    });
    eventually(PATIENCE, "every timer drained", || {
        timers.iter().all(|timer| timer.size() == 0)
    });
    reaper.close();
    let (ran, cancelled) = ledger.assert_exactly_once();
    assert!(ran > 0 && cancelled > 0, "ran {ran}, cancelled {cancelled}");
    assert_eq!(early.load(Ordering::SeqCst), 0, "tasks ran early");
}

#[test]
fn a_flood_on_one_timer_holds_another_timers_due_task_back_by_one_budget_at_most() {
    const FLOOD: usize = 30_000;
    let time = MockTime::new();
    let order = Arc::new(Mutex::new(Vec::with_capacity(FLOOD + 1)));
    // Inline executors: each task runs inside the turn that found it due, so the order of
    // runs is the order in which the driver took the two timers' work.
    let timer = |name: &str| {
        SystemTimer::builder(name)
            .time(time.clone())
            .executor(|job| job())
            .build()
    };
    let reaper = SharedSystemTimerReaper::new("shared-fair");
    let flooded = reaper.drive(timer("flooded"));
    let other = reaper.drive(timer("other"));
    for _ in 0..FLOOD {
        let order = Arc::clone(&order);
        flooded.add(timer_task(50, move || order.lock().unwrap().push('f')));
    }
    let (done, done_rx) = mpsc::channel();
    let order_other = Arc::clone(&order);
    other.add(timer_task(50, move || {
        order_other.lock().unwrap().push('o');
        done.send(()).unwrap();
    }));
    time.sleep(60);
    done_rx
        .recv_timeout(PATIENCE)
        .expect("the other timer's task ran");
    // The pending count falls as a chunk leaves its slots, before its tasks have run.
    let ran = || order.lock().unwrap().len();
    eventually(PATIENCE, "the flood ran", || ran() == FLOOD + 1);
    assert_eq!(flooded.size(), 0);
    let order = order.lock().unwrap();
    let before = order.iter().position(|&c| c == 'o').unwrap();
    assert!(
        before <= 8_192 + 64,
        "{before} flooded tasks ran before the other timer's turn"
    );
    reaper.close();
}

#[test]
fn an_add_wakes_the_thread_out_of_its_sleep() {
    let reaper = SharedSystemTimerReaper::new("shared-wake");
    let timer = reaper.drive(SystemTimer::new("woken"));
    // With nothing queued the thread sleeps 200 ms at a time: unwoken, a 1 ms task would
    // wait for the end of that sleep, at a phase that moves 30 ms with each add (a median
    // near 100 ms). Woken by the add, it runs in about 1 ms.
    let mut waits: Vec<Duration> = (0..7)
        .map(|_| {
            thread::sleep(Duration::from_millis(230));
            let (fired, fired_rx) = mpsc::channel();
            let start = Instant::now();
            timer.add(timer_task(1, move || fired.send(()).unwrap()));
            fired_rx.recv_timeout(PATIENCE).expect("the task ran");
            start.elapsed()
        })
        .collect();
    waits.sort();
    assert!(waits[3] < Duration::from_millis(50), "waits {waits:?}");
    reaper.close();
}

#[test]
fn a_panicking_task_or_a_closed_timer_does_not_stop_the_driver() {
    let reaper = SharedSystemTimerReaper::new("shared-survives");
    let first = reaper.drive(SystemTimer::builder("inline").executor(|job| job()).build());
    let second = reaper.drive(SystemTimer::new("second"));
    first.add(timer_task(1, || panic!("a task panicked on purpose")));
    first.close();
    assert_eq!(reaper.timers(), 1, "a closed timer leaves the rotation");
    let (fired, fired_rx) = mpsc::channel();
    second.add(timer_task(5, move || fired.send(()).unwrap()));
    fired_rx.recv_timeout(PATIENCE).expect("still driven");
    reaper.close();
}

#[test]
fn closing_the_reaper_closes_every_timer_it_drives_and_later_ones_at_once() {
    let reaper = SharedSystemTimerReaper::new("shared-close");
    let clone = reaper.clone();
    let timers: Vec<_> = (0..3)
        .map(|i| reaper.drive(SystemTimer::new(&format!("closed-{i}"))))
        .collect();
    timers[0].add(timer_task(60_000, || {}));
    assert_eq!(reaper.timers(), 3);
    clone.close();
    assert_eq!(reaper.timers(), 0);
    assert!(timers.iter().all(|timer| timer.get_ref().is_closed()));
    assert_eq!(timers[0].size(), 0, "its waiting task was dropped");
    let late = reaper.drive(SystemTimer::new("late"));
    assert!(late.get_ref().is_closed(), "a closed reaper drives nothing");
    assert!(late.add(timer_task(1, || {})).cancelled());
    reaper.close();
}

#[test]
fn dropping_the_last_clone_closes_the_reaper() {
    let reaper = SharedSystemTimerReaper::new("shared-drop");
    let timer = reaper.drive(SystemTimer::new("dropped"));
    let clone = reaper.clone();
    drop(reaper);
    assert!(
        !timer.get_ref().is_closed(),
        "a clone still holds the thread"
    );
    drop(clone);
    assert!(timer.get_ref().is_closed());
}

#[test]
fn purgatories_on_one_shared_reaper_expire_complete_and_purge_without_a_thread_of_their_own() {
    let reaper = SharedSystemTimerReaper::new("shared-purgatories");
    const POLL_MS: i64 = 50;
    let purgatory = |name: &str| {
        DelayedOperationPurgatory::<u32, Probe>::builder(name)
            .shared_reaper(&reaper)
            .purge_interval(2)
            .reaper_poll_ms(POLL_MS)
            .build()
    };
    let (produce, fetch) = (purgatory("Produce"), purgatory("Fetch"));
    assert_eq!(reaper.timers(), 2);
    assert!(
        produce.system_timer().is_some(),
        "its own timer, on the shared reaper"
    );
    // Expiry: driven by the shared thread.
    let expiring = Probe::delayed(5);
    assert!(!produce.try_complete_else_watch(&expiring, &[1]));
    eventually(PATIENCE, "the timeout expired the operation", || {
        expiring.operation().expirations() == 1
    });
    // Completion, then a purge from a later watch: no thread of the purgatory's does it.
    let ops: Vec<_> = (0..5).map(|_| Probe::delayed(60_000)).collect();
    let started = Instant::now();
    for op in &ops {
        assert!(!fetch.try_complete_else_watch(op, &[7, 8]));
        op.force_complete();
    }
    assert_eq!(fetch.num_delayed(), 0, "completing cancelled the timeouts");
    // Within one poll of the first watch no purge may run; a loaded machine may take longer.
    if started.elapsed() < Duration::from_millis(POLL_MS as u64 - 1) {
        assert_eq!(
            fetch.watched(),
            10,
            "completed, still in the lists of keys 7 and 8"
        );
    }
    thread::sleep(Duration::from_millis(POLL_MS as u64 + 5));
    let later = Probe::delayed(60_000);
    assert!(!fetch.try_complete_else_watch(&later, &[9]));
    assert_eq!(fetch.watched(), 1, "the watch purged the completed entries");
    fetch.shutdown();
    assert_eq!(
        reaper.timers(),
        1,
        "the other purgatory's timer is still driven"
    );
    reaper.close();
    assert!(produce.system_timer().unwrap().is_closed());
}

#[test]
fn purgatories_on_one_shared_reaper_and_one_pool_run_their_expiries_on_the_pool() {
    let reaper = SharedSystemTimerReaper::new("shared-pool");
    let pool = timingwheel::threadpool::Builder::new()
        .num_threads(2)
        .thread_name("service-pool".into())
        .build();
    let purgatories: Vec<_> = ["Produce", "Fetch"]
        .into_iter()
        .map(|name| {
            DelayedOperationPurgatory::<u32, Probe>::builder(name)
                .shared_reaper(&reaper)
                .threadpool(pool.clone())
                .build()
        })
        .collect();
    assert_eq!(reaper.timers(), 2);
    for (key, purgatory) in (0..).zip(&purgatories) {
        let expiring = Probe::delayed(5);
        let expired = expiring.operation().subscribe();
        assert!(!purgatory.try_complete_else_watch(&expiring, &[key]));
        // An expiry completes the operation, then calls on_expiration, both on the pool.
        for callback in [Callback::OnComplete, Callback::OnExpiration] {
            let event = expired
                .recv_timeout(PATIENCE)
                .expect("the timeout expired it");
            assert_eq!(event.callback, callback);
            assert_eq!(event.thread.as_deref(), Some("service-pool"));
        }
    }
    reaper.close();
    pool.join();
}

#[test]
fn a_purgatory_given_a_timer_and_a_setting_for_its_own_timer_panics_naming_both() {
    let reaper = SharedSystemTimerReaper::new("shared-both");
    type Builder = timingwheel::DelayedOperationPurgatoryBuilder<u32, Probe>;
    type Set = fn(Builder, &SharedSystemTimerReaper) -> Builder;
    let settings: [(&str, Set); 2] = [
        ("`.shared_reaper(..)`", |b, reaper| b.shared_reaper(reaper)),
        ("`.threadpool(..)`", |b, _| {
            b.threadpool(timingwheel::threadpool::ThreadPool::new(1))
        }),
    ];
    for (setting, set) in settings {
        let (message, location) = crate::common::panic_message_and_location("both", || {
            let builder = DelayedOperationPurgatory::<u32, Probe>::builder("both");
            set(builder.timer(MockTimer::new()), &reaper).build()
        });
        assert!(
            message.contains(&format!("`.timer(..)` and {setting}")),
            "{message}"
        );
        assert_eq!(location.as_deref(), Some(file!()), "reported at the caller");
    }
    reaper.close();
}
