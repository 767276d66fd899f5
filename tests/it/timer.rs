//! Kafka's `TimerTest`, ported.
//!
//! Source: apache/kafka `server-common/src/test/java/org/apache/kafka/server/util/timer/
//! TimerTest.java` (checked against commit 2e5fb87: nothing added since the port), Apache
//! License 2.0.
//!
//! Deviations:
//! - Tasks report to a shared `Mutex<Vec<i64>>` and a channel instead of `CountDownLatch`es;
//!   the test waits for the expected number of reports with a generous timeout.
//! - Kafka's teardown waits for the executor to terminate; here `close()` itself waits for
//!   the tasks already handed to the executor, and the test checks that nothing ran twice.
//! - `testTaskExpiration` additionally checks that no task ran before its expiration.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};

use timingwheel::{SystemTimer, Timer, TimerTask, hi_res_clock_ms};

use crate::common::PATIENCE;

struct TestTask {
    delay_ms: i64,
    id: i64,
    completed: AtomicBool,
    output: Arc<Mutex<Vec<i64>>>,
    done: Sender<(i64, i64)>,
    expiration_ms: i64,
}

impl TestTask {
    fn new(
        delay_ms: i64,
        id: i64,
        output: &Arc<Mutex<Vec<i64>>>,
        done: &Sender<(i64, i64)>,
    ) -> Self {
        TestTask {
            delay_ms,
            id,
            completed: AtomicBool::new(false),
            output: Arc::clone(output),
            done: done.clone(),
            // Computed before `add`, so it is at or before the timer's own expiration.
            expiration_ms: hi_res_clock_ms() + delay_ms,
        }
    }
}

impl TimerTask for TestTask {
    fn delay_ms(&self) -> i64 {
        self.delay_ms
    }

    fn run(self: Box<Self>) {
        if !self.completed.swap(true, Ordering::SeqCst) {
            self.output.lock().unwrap().push(self.id);
            let _ = self
                .done
                .send((self.id, hi_res_clock_ms() - self.expiration_ms));
        }
    }
}

fn timer() -> SystemTimer {
    SystemTimer::with_config("test", 1, 3, hi_res_clock_ms())
}

fn wait_for(done: &Receiver<(i64, i64)>, count: usize) -> Vec<(i64, i64)> {
    (0..count)
        .map(|i| {
            done.recv_timeout(PATIENCE)
                .unwrap_or_else(|_| panic!("only {i} of {count} tasks ran within {PATIENCE:?}"))
        })
        .collect()
}

#[test]
fn already_expired_tasks_run_at_once() {
    let timer = timer();
    let output = Arc::new(Mutex::new(Vec::new()));
    let (done, reports) = channel();
    for i in -5..0 {
        timer.add(Box::new(TestTask::new(i, i, &output, &done)));
    }
    timer.advance_clock(0);
    wait_for(&reports, 5);
    let mut ids = output.lock().unwrap().clone();
    ids.sort();
    assert_eq!(ids, [-5, -4, -3, -2, -1], "output of already expired tasks");
    timer.close();
    assert_eq!(output.lock().unwrap().len(), 5);
}

#[test]
fn every_task_expires_exactly_once() {
    let timer = timer();
    let output = Arc::new(Mutex::new(Vec::new()));
    let (done, reports) = channel();
    let mut tasks = Vec::new();
    let mut ids = Vec::new();
    for i in 0..5 {
        tasks.push(TestTask::new(i, i, &output, &done));
        ids.push(i);
    }
    for i in 10..100 {
        tasks.push(TestTask::new(i, i, &output, &done));
        tasks.push(TestTask::new(i, i, &output, &done));
        ids.push(i);
        ids.push(i);
    }
    for i in 100..500 {
        tasks.push(TestTask::new(i, i, &output, &done));
        ids.push(i);
    }
    for task in tasks {
        timer.add(Box::new(task));
    }

    while timer.advance_clock(2000) {}

    let lateness = wait_for(&reports, ids.len());
    let mut fired = output.lock().unwrap().clone();
    fired.sort();
    assert_eq!(fired, ids, "output should match");
    for (id, late_ms) in lateness {
        assert!(late_ms >= 0, "task {id} ran {} ms early", -late_ms);
    }
    assert_eq!(timer.size(), 0);
    timer.close();
    assert_eq!(output.lock().unwrap().len(), ids.len(), "nothing ran twice");
}
