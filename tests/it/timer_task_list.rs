//! Kafka's `TimerTaskListTest`, ported.
//!
//! Source: apache/kafka `server-common/src/test/java/org/apache/kafka/server/util/timer/
//! TimerTaskListTest.java` (checked against commit 6d8f061: nothing added since the port),
//! Apache License 2.0.
//!
//! `testGetDelay` is ported in `src/delay_queue.rs`
//! (`delay_queue::tests::a_bucket_is_due_at_its_expiration_and_not_before`): this port's
//! buckets are due through its delay queue, which is crate-private.
//!
//! Deviations in `testAll`:
//! - The lists are three buckets of one `SystemTimer` (tick 1 ms, wheel size 20, on a
//!   `MockTime`), due 10, 14 and 18 ms after the start; `TimerTaskList` itself is
//!   crate-private. The test also runs on a `MockTimer`, whose "buckets" are expirations.
//! - Kafka moves a task to another list by adding it again in a new `TimerTaskEntry`;
//!   here `Timer::reschedule` moves it (true each time: it was waiting).
//! - The shared counter is the timer's `size()`. A list's size is the number of tasks still
//!   waiting whose handle's `expiration_ms()` is the bucket's time; a second timer built
//!   the same way then has its buckets expired one by one, which confirms those counts by
//!   the tasks that run in each.
//! - Kafka cancels through `TimerTask.cancel()` and checks only the lists; here each
//!   `TimerTaskEntry::cancel` must return true, and the timer's `size()` falls with them.

use std::sync::Arc;

use timingwheel::{MockTime, MockTimer, SystemTimer, Timer, TimerTaskEntry};

use crate::common;
use common::ledger::Ledger;
use common::sync::barrier;

/// The three lists: buckets due this long after the start.
const LISTS_MS: [i64; 3] = [10, 14, 18];

/// A timer on a mock clock, and whether it runs tasks on an executor.
struct Clocked {
    timer: Box<dyn Timer>,
    time: MockTime,
    executor: bool,
}

fn timers() -> Vec<(&'static str, Clocked)> {
    let system = {
        let time = MockTime::new();
        let timer = SystemTimer::builder("list")
            .time(time.clone())
            .tick_ms(1)
            .wheel_size(20)
            .build();
        Clocked {
            timer: Box::new(timer),
            time,
            executor: true,
        }
    };
    let mock = {
        let time = MockTime::new();
        Clocked {
            timer: Box::new(MockTimer::with_time(time.clone())),
            time,
            executor: false,
        }
    };
    vec![("SystemTimer", system), ("MockTimer", mock)]
}

/// Kafka's `size(list)`: the tasks still waiting in the bucket due `list_ms` after `start`.
fn size(entries: &[TimerTaskEntry], ledger: &Ledger, start: i64, list_ms: i64) -> usize {
    entries
        .iter()
        .enumerate()
        .filter(|(id, entry)| {
            ledger.runs(*id) == 0 && !entry.cancelled() && entry.expiration_ms() == start + list_ms
        })
        .count()
}

/// Adds the ten tasks to the first list, checking the counter after each add.
fn fill(timer: &dyn Timer, ledger: &Arc<Ledger>) -> Vec<TimerTaskEntry> {
    (0..10)
        .map(|i| {
            let entry = ledger.add(timer, i, LISTS_MS[0]);
            assert_eq!(timer.size(), i + 1);
            entry
        })
        .collect()
}

/// Moves `tasks` to `list`, checking that the counter stays.
fn move_to(timer: &dyn Timer, tasks: &[TimerTaskEntry], start: i64, now: i64, list: usize) {
    for entry in tasks {
        let before = timer.size();
        assert!(timer.reschedule(entry, start + LISTS_MS[list] - now));
        assert_eq!(
            timer.size(),
            before,
            "moving a task does not change the count"
        );
    }
}

#[test]
fn all() {
    for (name, clocked) in timers() {
        let timer = &*clocked.timer;
        let start = clocked.time.hi_res_clock_ms();
        let now = start;
        let ledger = Ledger::new(10);
        let tasks = fill(timer, &ledger);
        let sizes = || LISTS_MS.map(|list_ms| size(&tasks, &ledger, start, list_ms));
        assert_eq!(timer.size(), tasks.len(), "{name}");

        // Moving the existing tasks does not change the count.
        move_to(timer, &tasks[..4], start, now, 1);
        assert_eq!(sizes()[..2], [10 - 4, 4], "{name}");
        assert_eq!(timer.size(), tasks.len(), "{name}");

        move_to(timer, &tasks[4..], start, now, 2);
        assert_eq!(sizes(), [0, 4, 6], "{name}");
        assert_eq!(timer.size(), tasks.len(), "{name}");

        // Cancel the tasks of each list in turn.
        let cancel_list = |list: usize| {
            for (id, entry) in tasks.iter().enumerate() {
                if entry.expiration_ms() == start + LISTS_MS[list] && !entry.cancelled() {
                    assert!(ledger.cancel(entry, id), "{name}: task {id}");
                }
            }
        };
        cancel_list(0);
        assert_eq!(sizes(), [0, 4, 6], "{name}");
        cancel_list(1);
        assert_eq!(sizes(), [0, 0, 6], "{name}");
        assert_eq!(timer.size(), 6, "{name}");
        cancel_list(2);
        assert_eq!(sizes(), [0, 0, 0], "{name}");
        assert_eq!(timer.size(), 0, "{name}");
        assert_eq!(ledger.assert_exactly_once(), (0, 10), "{name}");
    }
}

/// The counts `all` reads from the handles, confirmed by the timer itself: the same moves
/// on a second timer, then each bucket expired in turn runs exactly the tasks moved to it.
#[test]
fn all_list_sizes_are_the_tasks_each_bucket_runs() {
    for (name, clocked) in timers() {
        let timer = &*clocked.timer;
        let start = clocked.time.hi_res_clock_ms();
        let ledger = Ledger::new(10);
        let tasks = fill(timer, &ledger);
        move_to(timer, &tasks[..4], start, start, 1);
        move_to(timer, &tasks[4..], start, start, 2);

        let mut ran_by_list: Vec<Vec<usize>> = Vec::new();
        let mut elapsed = 0;
        for list_ms in LISTS_MS {
            if clocked.executor {
                clocked.time.sleep(list_ms - elapsed);
                while timer.advance_clock(0) {}
                barrier(timer);
            } else {
                timer.advance_clock(list_ms - elapsed);
            }
            elapsed = list_ms;
            let ran_before: Vec<usize> = ran_by_list.concat();
            let ran_now = (0..10)
                .filter(|&id| ledger.runs(id) == 1 && !ran_before.contains(&id))
                .collect();
            ran_by_list.push(ran_now);
        }
        assert_eq!(
            ran_by_list,
            [vec![], vec![0, 1, 2, 3], vec![4, 5, 6, 7, 8, 9]],
            "{name}: the tasks each bucket ran"
        );
        assert_eq!(ledger.assert_exactly_once(), (10, 0), "{name}");
        assert_eq!(timer.size(), 0, "{name}");
    }
}
