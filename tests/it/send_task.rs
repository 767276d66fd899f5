//! `send_task`: expiries as messages on a `crossbeam-channel`.
//!
//! Sent iff the task runs: never after a cancel that returned true, nor after `close`
//! dropped the task; a full bounded channel holds the executor thread until there is room;
//! a channel with no receivers drops the message. A counting stress test runs four workers
//! on one receiver while adders cancel at random: each message arrives once or its cancel
//! won, never both, and every message is dropped once.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use timingwheel::crossbeam_channel::{self, RecvTimeoutError, select};
use timingwheel::{
    MockTimer, SystemTimer, SystemTimerReaper, Timer, TimerTaskEntry, hi_res_clock_ms, send_task,
    timer_task,
};

use crate::common;
use common::PATIENCE;
use common::rng::Rng;
use common::sync::{driven, eventually};

/// A message that counts its drops.
struct Note {
    id: usize,
    drops: Arc<Vec<AtomicU8>>,
}

impl Drop for Note {
    fn drop(&mut self) {
        self.drops[self.id].fetch_add(1, Ordering::SeqCst);
    }
}

fn drop_counters(n: usize) -> Arc<Vec<AtomicU8>> {
    Arc::new((0..n).map(|_| AtomicU8::new(0)).collect())
}

fn note(id: usize, drops: &Arc<Vec<AtomicU8>>) -> Note {
    Note {
        id,
        drops: Arc::clone(drops),
    }
}

fn count(drops: &[AtomicU8], id: usize) -> u8 {
    drops[id].load(Ordering::SeqCst)
}

#[test]
fn the_message_is_sent_when_the_task_runs_and_not_before() {
    let timer = MockTimer::new();
    let (tx, rx) = crossbeam_channel::unbounded();
    let entry = timer.add(send_task(100, tx.clone(), "expired"));
    assert_eq!(entry.expiration_ms(), timer.time().hi_res_clock_ms() + 100);
    timer.advance_clock(99);
    assert!(rx.try_recv().is_err());
    timer.advance_clock(1);
    assert_eq!(rx.try_recv(), Ok("expired"));
    assert!(rx.try_recv().is_err(), "sent once");

    let later = timer.add(send_task(Duration::from_micros(1_500), tx, "rounded up"));
    assert_eq!(later.expiration_ms(), timer.time().hi_res_clock_ms() + 2);
}

#[test]
fn a_cancel_that_won_means_nothing_is_ever_sent() {
    let timer = MockTimer::new();
    let drops = drop_counters(2);
    let (tx, rx) = crossbeam_channel::unbounded();
    let cancelled = timer.add(send_task(100, tx.clone(), note(0, &drops)));
    timer.add(send_task(100, tx, note(1, &drops)));
    assert!(cancelled.cancel());
    assert_eq!(count(&drops, 0), 1, "the message is dropped inside cancel");
    timer.advance_clock(1_000);
    let received: Vec<usize> = rx.try_iter().map(|note| note.id).collect();
    assert_eq!(received, [1]);
    assert!(!cancelled.cancel(), "and stays cancelled");
}

#[test]
fn a_task_dropped_by_close_sends_nothing() {
    let timer = SystemTimer::new("send-close");
    let drops = drop_counters(1);
    let (tx, rx) = crossbeam_channel::unbounded();
    timer.add(send_task(60_000, tx, note(0, &drops)));
    timer.close();
    assert_eq!(count(&drops, 0), 1);
    assert!(
        matches!(
            rx.recv_timeout(Duration::from_millis(50)),
            Err(RecvTimeoutError::Disconnected)
        ),
        "dropped unsent, with its sender"
    );
}

#[test]
fn a_full_bounded_channel_makes_the_executor_thread_wait_for_room() {
    let timer = SystemTimer::new("send-full");
    let (tx, rx) = crossbeam_channel::bounded(1);
    let after = Arc::new(AtomicBool::new(false));
    timer.add(send_task(0, tx.clone(), 1));
    timer.add(send_task(0, tx, 2));
    let flag = after.clone();
    timer.add(timer_task(0, move || flag.store(true, Ordering::SeqCst)));
    eventually(PATIENCE, "the first message is sent", || rx.len() == 1);
    // The executor now waits in the second send; the task behind it cannot start.
    thread::sleep(Duration::from_millis(100));
    assert!(
        !after.load(Ordering::SeqCst),
        "a task ran while the executor thread should wait for room"
    );
    assert_eq!(rx.len(), 1);
    assert_eq!(rx.recv_timeout(PATIENCE), Ok(1));
    assert_eq!(rx.recv_timeout(PATIENCE), Ok(2), "sent once there was room");
    eventually(PATIENCE, "the task behind it ran", || {
        after.load(Ordering::SeqCst)
    });
    timer.close();
}

#[test]
fn a_channel_without_receivers_drops_the_message_and_the_executor_goes_on() {
    let timer = SystemTimer::new("send-gone");
    let drops = drop_counters(1);
    let (tx, rx) = crossbeam_channel::unbounded();
    drop(rx);
    let ran_after = Arc::new(AtomicBool::new(false));
    timer.add(send_task(0, tx, note(0, &drops)));
    let flag = ran_after.clone();
    timer.add(timer_task(0, move || flag.store(true, Ordering::SeqCst)));
    eventually(PATIENCE, "the next task runs", || {
        ran_after.load(Ordering::SeqCst)
    });
    assert_eq!(count(&drops, 0), 1, "the message was dropped, once");
    timer.close();
}

/// Real clock: a `select!` loop waits on expiries beside a channel of requests; each
/// timeout arrives no earlier than its delay after its `add` (strict lower bound) and
/// within a loose upper one.
#[test]
fn a_select_loop_sees_timeouts_beside_other_messages_never_early() {
    const TIMEOUTS: usize = 20;
    let timer = SystemTimerReaper::new("send-select-reaper", SystemTimer::new("send-select"));
    let (timeouts_tx, timeouts) = crossbeam_channel::unbounded();
    let (requests_tx, requests) = crossbeam_channel::unbounded();
    let mut added = Vec::new();
    for i in 0..TIMEOUTS {
        let delay_ms = 5 + 5 * i as i64;
        added.push((hi_res_clock_ms(), delay_ms));
        timer.add(send_task(delay_ms, timeouts_tx.clone(), i));
    }
    requests_tx.send("request").unwrap();
    let (mut got_timeouts, mut got_requests) = (Vec::new(), 0);
    let deadline = Instant::now() + PATIENCE;
    while got_timeouts.len() < TIMEOUTS {
        assert!(Instant::now() < deadline, "only {got_timeouts:?} arrived");
        select! {
            recv(requests) -> _ => got_requests += 1,
            recv(timeouts) -> i => got_timeouts.push((i.unwrap(), hi_res_clock_ms())),
        }
    }
    assert_eq!(got_requests, 1);
    for (i, at) in got_timeouts {
        let (added_at, delay_ms) = added[i];
        let late_ms = at - (added_at + delay_ms);
        assert!(late_ms >= 0, "timeout {i} arrived {} ms early", -late_ms);
        assert!(late_ms < 2_000, "timeout {i} arrived {late_ms} ms late");
    }
    timer.close();
}

/// Adders per stress run.
const ADDERS: usize = 2;
/// Workers on the one receiver.
const WORKERS: usize = 4;
/// Tasks per adder.
const PER_ADDER: usize = 25_000;

#[test]
fn four_workers_on_one_receiver_see_each_expiry_once_unless_its_cancel_won() {
    let timer = SystemTimer::new("send-stress");
    let tasks = ADDERS * PER_ADDER;
    let drops = drop_counters(tasks);
    let received: Vec<AtomicU8> = (0..tasks).map(|_| AtomicU8::new(0)).collect();
    let cancelled: Vec<AtomicU8> = (0..tasks).map(|_| AtomicU8::new(0)).collect();
    let per_worker: Vec<AtomicUsize> = (0..WORKERS).map(|_| AtomicUsize::new(0)).collect();
    let (tx, rx) = crossbeam_channel::unbounded::<Note>();
    driven(&timer, 2, || {
        thread::scope(|s| {
            for w in 0..WORKERS {
                let (rx, received, per_worker) = (rx.clone(), &received, &per_worker);
                s.spawn(move || {
                    for note in rx.iter() {
                        received[note.id].fetch_add(1, Ordering::SeqCst);
                        per_worker[w].fetch_add(1, Ordering::Relaxed);
                    }
                });
            }
            let adders: Vec<_> = (0..ADDERS)
                .map(|a| {
                    let (timer, tx, drops, cancelled) = (&timer, tx.clone(), &drops, &cancelled);
                    s.spawn(move || {
                        let mut rng = Rng::new(a as u64 + 3);
                        let mut held: Vec<(usize, TimerTaskEntry)> = Vec::new();
                        for id in (a..tasks).step_by(ADDERS) {
                            let delay = rng.below(8) as i64;
                            let entry = timer.add(send_task(delay, tx.clone(), note(id, drops)));
                            if rng.below(3) == 0 {
                                held.push((id, entry));
                            }
                            if held.len() > 64 {
                                let (id, entry) = held.swap_remove(rng.below(64) as usize);
                                if entry.cancel() {
                                    cancelled[id].fetch_add(1, Ordering::SeqCst);
                                }
                            }
                            if id % 256 < ADDERS {
                                thread::sleep(Duration::from_millis(1));
                            }
                        }
                        for (id, entry) in held {
                            if entry.cancel() {
                                cancelled[id].fetch_add(1, Ordering::SeqCst);
                            }
                        }
                    })
                })
                .collect();
            for adder in adders {
                adder.join().unwrap();
            }
            drop(tx);
            eventually(PATIENCE, "every message received or cancelled", || {
                (0..tasks).all(|id| count(&drops, id) > 0)
            });
            timer.close(); // drops the last senders: the workers' loops end
        })
    });
    let (mut sent, mut won) = (0, 0);
    for id in 0..tasks {
        let (r, c, d) = (
            received[id].load(Ordering::SeqCst),
            cancelled[id].load(Ordering::SeqCst),
            count(&drops, id),
        );
        assert_eq!(
            (r + c, d),
            (1, 1),
            "task {id}: received {r}, cancelled {c}, dropped {d}"
        );
        sent += usize::from(r);
        won += usize::from(c);
    }
    assert!(
        sent > 1_000 && won > 1_000,
        "both outcomes: sent {sent}, cancelled {won}"
    );
    let busy = per_worker
        .iter()
        .filter(|n| n.load(Ordering::Relaxed) > 0)
        .count();
    assert!(busy >= 2, "the workers shared the messages: {per_worker:?}");
}
