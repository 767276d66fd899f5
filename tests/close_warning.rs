//! A `close` that gave up waiting for the tasks on the executor warns once, saying how many
//! it left running, not again at later closes or the drop.
//!
//! A binary of its own: it counts the warnings of its process.

mod common;

use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::logger;

/// How long the timer's `close` waits for its tasks.
const BOUND: Duration = Duration::from_millis(300);
use timingwheel::crossbeam_channel::{Receiver, unbounded};
use timingwheel::{SystemTimer, Timer, TimerTask, timer_task};

/// A task that tells it started, then waits until its gate opens.
struct Stuck {
    started: mpsc::Sender<()>,
    gate: Receiver<()>,
}

impl TimerTask for Stuck {
    fn delay_ms(&self) -> i64 {
        0
    }
    fn run(self: Box<Self>) {
        self.started.send(()).unwrap();
        let _ = self.gate.recv();
    }
}

#[test]
fn a_close_that_gave_up_warns_once_counting_the_tasks_left_running() {
    logger::install();
    let timer = SystemTimer::builder("stuck")
        .executor_threads(2)
        .close_timeout(BOUND)
        .build();
    let (open, gate) = unbounded::<()>();
    let (started_tx, started) = mpsc::channel();
    timer.add(Box::new(Stuck {
        started: started_tx.clone(),
        gate: gate.clone(),
    }));
    let (gate2, started2) = (gate.clone(), started_tx.clone());
    timer.add(timer_task(0, move || {
        started2.send(()).unwrap();
        let _ = gate2.recv();
    }));
    for _ in 0..2 {
        started.recv_timeout(Duration::from_secs(20)).unwrap();
    }

    let start = Instant::now();
    timer.close();
    assert!(start.elapsed() >= BOUND, "it waited its bound");
    let warnings = logger::warnings_containing("timer stuck:");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    let warning = &warnings[0];
    assert!(warning.contains("2 tasks"), "{warning}");

    timer.close();
    timer.close();
    drop(open);
    drop(timer);
    assert_eq!(
        logger::warnings_containing("timer stuck:").len(),
        1,
        "no warning at later closes or the drop"
    );
}
