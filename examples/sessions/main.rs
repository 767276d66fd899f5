//! A group coordinator's member sessions, the way Kafka's group coordinator keeps them.
//!
//! Every member of a consumer group heartbeats every 3 s; each heartbeat starts the
//! member's 10 s session timeout again: `sessions.reschedule(&member, ...)` on a
//! [`KeyedTimer`] moves the timeout scheduled under the member's id (its join scheduled
//! it with `sessions.schedule`), so that it fires only 10 s after the last heartbeat. 1 %
//! of the members stop heartbeating (after joining, or after one or two heartbeats); their
//! sessions expire, each exactly once, about a tick after its deadline. An expiry is a
//! message ([`send_task`] into a `crossbeam-channel`) that one of 4 worker threads takes
//! and handles, as the coordinator would remove the member and rebalance the group.
//!
//! One thread sends the heartbeats on schedule (spread evenly over each interval), a
//! [`SystemTimerReaper`] drives the timer. A progress line goes to stderr while it runs; at
//! the end a table goes to stdout (`report.rs`), with the invariant checked per member:
//! every member that stopped expired exactly once, no live member ever did, none before
//! its deadline, and exactly the live members' timeouts are left. The exit code is 1 if it
//! fails.
//!
//! ```text
//! cargo run --release --example sessions
//! cargo run --release --example sessions -- --members 200000 --stop-ratio 0.05
//! cargo run --release --example sessions -- --help
//! ```
//!
//! This file holds the timer's part; `group.rs` the group's books, `cli.rs` the command
//! line, `report.rs` the table.

#![allow(clippy::print_stdout)]

pub(crate) mod cli;
#[path = "../common/mod.rs"]
pub(crate) mod common;
mod group;
pub(crate) mod report;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread;
use std::time::{Duration, Instant};

use timingwheel::crossbeam_channel::{self, Receiver, Sender};
use timingwheel::{KeyedTimer, SystemTimer, SystemTimerReaper, Timer, send_task};

use cli::Config;
use common::Progress;
use group::{Group, LAST_BEAT_MAX, LIVE, STOPPED};
use report::{BeatStats, Report};

fn main() {
    common::example_main("sessions", cli::parse_args, |config| {
        run(config).table(config)
    });
}

/// When the heartbeats end, in ms since the start: a quarter interval after the last
/// deadline of a member that stops (its last heartbeat is in the third interval at the
/// latest). A live member's next deadline is then still most of a session timeout away.
fn heartbeats_end_ms(config: &Config) -> u64 {
    let heartbeat_ms = u64::from(config.heartbeat_ms);
    heartbeat_ms * u64::from(LAST_BEAT_MAX + 1)
        + u64::from(config.session_timeout_ms)
        + heartbeat_ms / 4
}

/// Sends the heartbeats on schedule until `end_ms`: each member at its own offset in every
/// interval, its first one being its join. A heartbeat moves the member's session timeout;
/// the join, or a heartbeat that finds no timeout to move (it expired), schedules one.
fn heartbeat(
    config: &Config,
    group: &Group,
    sessions: &KeyedTimer<u32>,
    expired: Sender<u32>,
    start: Instant,
) -> BeatStats {
    let heartbeat_ms = u64::from(config.heartbeat_ms);
    let timeout_ms = i64::from(config.session_timeout_ms);
    let end_ms = heartbeats_end_ms(config);
    let mut stats = BeatStats::default();
    // Every millisecond of the schedule before `next_ms` has had its heartbeats.
    let mut next_ms = 0;
    while next_ms < end_ms {
        let now_ms = start.elapsed().as_millis() as u64;
        if next_ms > now_ms {
            thread::sleep(Duration::from_millis(next_ms - now_ms));
            continue;
        }
        stats.worst_lag_ms = stats.worst_lag_ms.max(now_ms - next_ms);
        let batch = Instant::now();
        while next_ms <= now_ms && next_ms < end_ms {
            let beat = (next_ms / heartbeat_ms) as u32;
            for member in group.beating_at((next_ms % heartbeat_ms) as u32) {
                if group.stops_after(member).is_some_and(|last| beat > last) {
                    continue;
                }
                let at_us = start.elapsed().as_micros() as u64;
                group.last_beat_us[member as usize].store(at_us, Ordering::Release);
                // The session timeout starts again: the same task, moved; a join (or a
                // session that expired meanwhile) gets a new one.
                if !sessions.reschedule(&member, timeout_ms) {
                    sessions.schedule(member, send_task(timeout_ms, expired.clone(), member));
                }
                stats.beats += 1;
            }
            next_ms += 1;
        }
        stats.schedule_time += batch.elapsed();
        group.beats.store(stats.beats, Ordering::Relaxed);
    }
    stats
}

/// A worker: handles expiries until the channel closes, and returns how many. Measures how
/// late each one is: the instant it handles it, minus (the member's last heartbeat + the
/// session timeout).
fn handle_expiries(config: &Config, group: &Group, expired: Receiver<u32>, start: Instant) -> u64 {
    let timeout_us = i64::from(config.session_timeout_ms) * 1_000;
    let mut handled = 0;
    for member in expired.iter() {
        let now_us = start.elapsed().as_micros() as i64;
        let last_beat_us = group.last_beat_us[member as usize].load(Ordering::Acquire) as i64;
        let way = if group.stops_after(member).is_some() {
            STOPPED
        } else {
            LIVE
        };
        let late_us = now_us - (last_beat_us + timeout_us);
        group.expiries.settle(member as usize, way, late_us);
        handled += 1;
    }
    handled
}

/// Runs the simulation and returns what happened.
pub(crate) fn run(config: &Config) -> Report {
    let start = Instant::now();
    let timer: Arc<dyn Timer> = Arc::new(SystemTimerReaper::new(
        "sessions-reaper",
        SystemTimer::builder("sessions")
            .tick_ms(config.tick_ms)
            .wheel_size(config.wheel_size)
            .build(),
    ));
    let sessions = KeyedTimer::new(Arc::clone(&timer));
    let group = Group::new(config);
    let stopping = group.stopping();
    let (expired_tx, expired) = crossbeam_channel::unbounded();
    // After the heartbeats end, how long to wait for the last expiries: half the margin a
    // live member's session still has.
    let patience = Duration::from_millis(u64::from(
        (config.session_timeout_ms - config.heartbeat_ms) / 2,
    ));

    let (beats, handled_by_worker, len_at_end, size_at_end) = thread::scope(|s| {
        let workers: Vec<_> = (0..config.workers)
            .map(|i| {
                let (group, expired) = (&group, expired.clone());
                thread::Builder::new()
                    .name(format!("session-worker-{i}"))
                    .spawn_scoped(s, move || handle_expiries(config, group, expired, start))
                    .expect("spawn a worker")
            })
            .collect();
        let heartbeater = {
            let (group, sessions, expired_tx) = (&group, &sessions, expired_tx.clone());
            thread::Builder::new()
                .name("heartbeats".into())
                .spawn_scoped(s, move || {
                    heartbeat(config, group, sessions, expired_tx, start)
                })
                .expect("spawn the heartbeat thread")
        };

        Progress::new(config.progress, start).wait(
            patience,
            || heartbeater.is_finished(),
            || group.expiries.settled()[STOPPED] >= stopping,
            || report::progress(&group, stopping),
        );
        let beats = heartbeater.join().expect("the heartbeat thread panicked");
        // What is left: one timeout per live member, and nothing else.
        let ends = (sessions.len(), timer.size());
        // Drops the live members' timeouts unsent, and with them their senders.
        timer.close();
        drop(expired_tx);
        let workers: Vec<u64> = workers
            .into_iter()
            .map(|w| w.join().expect("a worker panicked"))
            .collect();
        (beats, workers, ends.0, ends.1)
    });
    let late_us = group.expiries.figures_us(STOPPED);
    let within_a_tick = late_us
        .iter()
        .filter(|&&us| us <= config.tick_ms * 1_000)
        .count();
    Report {
        members: group.expiries.tally(),
        stopped: stopping,
        beats,
        handled_by_worker,
        tick_ms: config.tick_ms,
        within_a_tick: within_a_tick as u64,
        len_at_end,
        size_at_end,
        elapsed: start.elapsed(),
    }
}
