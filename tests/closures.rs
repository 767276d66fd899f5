//! `timer_task(delay, closure)` on every timer of the crate.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use timingwheel::{MockTimer, SystemTimer, SystemTimerReaper, Timer, hi_res_clock_ms, timer_task};

#[test]
fn closure_task_reports_its_delay() {
    let task = timer_task(1_234, || {});
    assert_eq!(task.delay_ms(), 1_234);
    assert_eq!(timer_task(-7, || {}).delay_ms(), -7);
}

#[test]
fn closure_runs_once_on_mock_timer() {
    let timer = MockTimer::new();
    let runs = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&runs);
    let moved = String::from("captured by move");
    timer.add(timer_task(20, move || {
        assert_eq!(moved, "captured by move");
        counter.fetch_add(1, Ordering::SeqCst);
    }));
    assert!(!timer.advance_clock(19));
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    assert!(timer.advance_clock(1));
    assert!(!timer.advance_clock(1_000));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[test]
fn closure_runs_on_system_timer_driven_by_hand() {
    let timer = SystemTimer::new("closures");
    let (tx, rx) = mpsc::channel();
    let added = Instant::now();
    let added_ms = hi_res_clock_ms();
    let entry = timer.add(timer_task(30, move || tx.send(Instant::now()).unwrap()));
    assert!(entry.expiration_ms() >= added_ms + 30);
    let cancelled = timer.add(timer_task(30, || panic!("cancelled, must not run")));
    assert!(cancelled.cancel());

    let fired_at = loop {
        timer.advance_clock(200);
        if let Ok(at) = rx.try_recv() {
            break at;
        }
        assert!(added.elapsed() < Duration::from_secs(5), "never fired");
    };
    let after = fired_at.duration_since(added);
    assert!(
        after >= Duration::from_millis(30),
        "fired early, after {after:?}"
    );
    assert!(after < Duration::from_secs(5));
    assert_eq!(timer.size(), 0);
    timer.close();
}

#[test]
fn closure_runs_on_system_timer_reaper() {
    let timer = SystemTimerReaper::new("closures-reaper", SystemTimer::new("closures"));
    let (tx, rx) = mpsc::channel();
    for delay_ms in [0, 10, 20] {
        let tx = tx.clone();
        timer.add(timer_task(delay_ms, move || tx.send(delay_ms).unwrap()));
    }
    let mut fired: Vec<i64> = (0..3)
        .map(|_| {
            rx.recv_timeout(Duration::from_secs(5))
                .expect("a closure never ran")
        })
        .collect();
    fired.sort_unstable();
    assert_eq!(fired, [0, 10, 20]);
    timer.close();
}
