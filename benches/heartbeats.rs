//! Session heartbeats: one timeout per session key, moved at every heartbeat (a group
//! coordinator's member sessions, a ZooKeeper-style session tracker). Three ways, in the
//! same process, their rounds alternating:
//!
//! - `Timer::reschedule` of plain entries whose handles the caller keeps (no key lookup):
//!   the floor;
//! - `KeyedTimer::reschedule`: the heartbeat by key, moving the task the key has;
//! - `KeyedTimer::schedule` of a new task under the key, replacing the old one: how a
//!   heartbeat was written before `reschedule` existed.
//!
//! Part 1, per heartbeat: N sessions (10^6), each side on its own `SystemTimer` (not
//! driven: nothing expires); a round is one heartbeat per session, in one fixed
//! pseudo-random order of the sessions (heartbeats arrive in no particular order), the
//! delay of each from a table uniform in 1-30,000 ms. A table of every round's ns per
//! heartbeat, and the ratio to `Timer::reschedule` in the same round; also one round in
//! key order (sequential handles: the floor's best case).
//!
//! Part 2, throughput: two threads on disjoint halves of the sessions, each having
//! scheduled its own half (so that their entries sit in different shards of the timer, as
//! sessions scheduled by the threads that serve them do), heartbeat their halves as fast as
//! they can, in rounds alternating the three ways; heartbeats per second of wall time.
//!
//! A custom harness rather than criterion: the sides must alternate within one process, on
//! a shared 2-core machine whose load changes from minute to minute, for the ratios to mean
//! anything.
//!
//! `cargo bench -p timingwheel-benches --bench heartbeats`; `TIMINGWHEEL_BENCH_QUICK=1` for
//! 10^4 sessions and fewer rounds.

// This binary reports by printing tables.
#![allow(clippy::print_stdout)]

mod common;

use std::hint::black_box;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use common::{Rng, SEED, delays, median, quick, task};
use timingwheel::{KeyedTimer, SystemTimer, Timer, TimerTaskEntry};

/// Delays cycle through a table of this many entries.
const DELAY_TABLE: usize = 1 << 16;

struct Sizes {
    sessions: usize,
    /// Rounds of part 1 (each side one pass per round).
    rounds: usize,
    /// Rounds of part 2, and passes over its half per thread per round.
    throughput_rounds: usize,
    passes: usize,
}

fn sizes() -> Sizes {
    if quick() {
        Sizes {
            sessions: 10_000,
            rounds: 3,
            throughput_rounds: 3,
            passes: 20,
        }
    } else {
        Sizes {
            sessions: 1_000_000,
            rounds: 9,
            throughput_rounds: 7,
            passes: 4,
        }
    }
}

/// The three ways, as the tables name them.
const SIDES: [&str; 3] = [
    "Timer::reschedule",
    "KeyedTimer::reschedule",
    "KeyedTimer::schedule",
];

/// One way of moving the timeout of session `i` (an index into its sessions).
trait Heartbeat: Sync {
    fn beat(&self, i: usize, delay_ms: i64);
}

/// `Timer::reschedule` with the handles kept by the caller.
struct Plain {
    timer: SystemTimer,
    handles: Vec<TimerTaskEntry>,
}

impl Heartbeat for Plain {
    #[inline]
    fn beat(&self, i: usize, delay_ms: i64) {
        assert!(self.timer.reschedule(&self.handles[i], delay_ms));
    }
}

/// A keyed timer whose keys are the sessions' ids.
struct Keyed {
    timer: Arc<SystemTimer>,
    keyed: KeyedTimer<u64>,
    ids: Vec<u64>,
    /// Heartbeat by `schedule` (a new task) rather than `reschedule`.
    replace: bool,
}

impl Heartbeat for Keyed {
    #[inline]
    fn beat(&self, i: usize, delay_ms: i64) {
        let id = self.ids[i];
        if self.replace {
            self.keyed.schedule(id, task(delay_ms));
        } else {
            assert!(self.keyed.reschedule(&id, delay_ms));
        }
    }
}

/// Session ids as a service sees them: scattered 64-bit numbers.
fn session_ids(n: usize) -> Vec<u64> {
    let mut rng = Rng::new(SEED ^ 0x5E55);
    (0..n).map(|_| rng.next_u64()).collect()
}

/// A fixed pseudo-random permutation of `0..n` (Fisher-Yates).
fn shuffled(n: usize, seed: u64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    let mut rng = Rng::new(seed);
    for i in (1..n).rev() {
        order.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
    }
    order
}

/// Schedules every session on each side, from the calling thread.
fn schedule_sessions(plain: &mut Plain, keyed: &[&Keyed; 2], delays: &[i64], ids: &[u64]) {
    for i in 0..plain.handles.len() {
        let delay = delays[i % DELAY_TABLE];
        plain.handles[i] = plain.timer.add(task(delay));
        for side in keyed {
            side.keyed.schedule(ids[i], task(delay));
        }
    }
}

/// The three sides with `n` sessions, none scheduled yet (handles refused placeholders).
fn sides(n: usize, ids: &[u64]) -> (Plain, Keyed, Keyed) {
    let placeholder = SystemTimer::new("heartbeats-placeholder");
    placeholder.close();
    let plain = Plain {
        timer: SystemTimer::new("heartbeats-plain"),
        handles: (0..n).map(|_| placeholder.add(task(1))).collect(),
    };
    let keyed = |replace| {
        let timer = Arc::new(SystemTimer::new("heartbeats-keyed"));
        Keyed {
            keyed: KeyedTimer::new(timer.clone()),
            timer,
            ids: ids.to_vec(),
            replace,
        }
    };
    (plain, keyed(false), keyed(true))
}

/// One pass of heartbeats over `order`, the `k`-th heartbeat of the run given delay
/// `delays[(start + k) % table]`; returns ns per heartbeat.
fn pass(side: &dyn Heartbeat, order: &[usize], delays: &[i64], start: usize) -> f64 {
    let began = Instant::now();
    for (k, &i) in order.iter().enumerate() {
        side.beat(i, delays[(start + k) % DELAY_TABLE]);
    }
    began.elapsed().as_nanos() as f64 / order.len() as f64
}

/// Part 1: ns per heartbeat, every round of every side.
fn per_heartbeat(sizes: &Sizes, ids: &[u64], delays: &[i64]) {
    let n = sizes.sessions;
    let (mut plain, keyed, replace) = sides(n, ids);
    schedule_sessions(&mut plain, &[&keyed, &replace], delays, ids);
    let all: Vec<usize> = (0..n).collect();
    let sides: [&dyn Heartbeat; 3] = [&plain, &keyed, &replace];
    let order = shuffled(n, SEED);
    // Warm-up: one pass each (the wheel's lists and the maps' pages in place).
    for (s, side) in sides.iter().enumerate() {
        pass(*side, &order, delays, s);
    }
    let mut ns = vec![[0.0; 3]; sizes.rounds];
    for (round, row) in ns.iter_mut().enumerate() {
        for k in 0..3 {
            // Each round starts with another side, so that none always runs first.
            let s = (round + k) % 3;
            row[s] = pass(sides[s], &order, delays, round * n);
        }
    }
    let in_key_order: Vec<f64> = (0..3).map(|s| pass(sides[s], &all, delays, 7)).collect();
    println!(
        "\nper heartbeat, {n} sessions, one heartbeat per session per round in a fixed shuffled order, ns"
    );
    println!(
        "| round | {} | {} | {} | keyed reschedule / Timer::reschedule | keyed schedule / Timer::reschedule |",
        SIDES[0], SIDES[1], SIDES[2]
    );
    println!("|--:|--:|--:|--:|--:|--:|");
    let mut ratios = Vec::new();
    for (round, &[p, k, r]) in ns.iter().enumerate() {
        ratios.push(k / p);
        println!(
            "| {round} | {p:.0} | {k:.0} | {r:.0} | {:.2}x | {:.2}x |",
            k / p,
            r / p
        );
    }
    let med = |s: usize| median(ns.iter().map(|row| row[s]).collect());
    println!(
        "| median | {:.0} | {:.0} | {:.0} | {:.2}x | {:.2}x |",
        med(0),
        med(1),
        med(2),
        median(ratios.clone()),
        median(ns.iter().map(|row| row[2] / row[0]).collect())
    );
    println!(
        "| key order, one round | {:.0} | {:.0} | {:.0} | {:.2}x | {:.2}x |",
        in_key_order[0],
        in_key_order[1],
        in_key_order[2],
        in_key_order[1] / in_key_order[0],
        in_key_order[2] / in_key_order[0]
    );
    let worst = ratios.iter().copied().fold(0.0, f64::max);
    println!(
        "goal: keyed reschedule at most 1.6x Timer::reschedule per heartbeat: {} (median {:.2}x, worst round {worst:.2}x)",
        if worst <= 1.6 { "met" } else { "NOT met" },
        median(ratios)
    );
    assert_eq!(plain.timer.size(), n);
    assert_eq!((keyed.keyed.len(), keyed.timer.size()), (n, n));
    assert_eq!((replace.keyed.len(), replace.timer.size()), (n, n));
}

/// Two threads heartbeat their halves of the sessions for `passes` passes each; returns
/// heartbeats per second of wall time.
fn two_threads(
    side: &dyn Heartbeat,
    halves: &[Vec<usize>; 2],
    delays: &[i64],
    passes: usize,
) -> f64 {
    let barrier = Barrier::new(3);
    let (began, ended) = std::thread::scope(|s| {
        for (t, half) in halves.iter().enumerate() {
            let barrier = &barrier;
            s.spawn(move || {
                barrier.wait();
                for p in 0..passes {
                    black_box(pass(side, half, delays, (t * passes + p) * half.len()));
                }
                barrier.wait();
            });
        }
        barrier.wait();
        let began = Instant::now();
        barrier.wait();
        (began, Instant::now())
    });
    let beats = passes * (halves[0].len() + halves[1].len());
    beats as f64 / (ended - began).as_secs_f64()
}

/// Part 2: heartbeats per second from two threads on disjoint sessions.
fn throughput(sizes: &Sizes, ids: &[u64], delays: &[i64]) {
    let n = sizes.sessions;
    let (mut plain, keyed, replace) = sides(n, ids);
    // Session i belongs to thread i % 2, which schedules it, from a thread of its own.
    let halves: [Vec<usize>; 2] = [0, 1].map(|t| {
        let mut half: Vec<usize> = (t..n).step_by(2).collect();
        let order = shuffled(half.len(), SEED + t as u64);
        half = order.into_iter().map(|k| half[k]).collect();
        half
    });
    let scheduled: Vec<Vec<(usize, TimerTaskEntry)>> = std::thread::scope(|s| {
        let (timer, keyed, replace) = (&plain.timer, &keyed, &replace);
        let threads: Vec<_> = (0..2)
            .map(|t| {
                s.spawn(move || {
                    let mine = (t..n).step_by(2);
                    mine.map(|i| {
                        let delay = delays[i % DELAY_TABLE];
                        keyed.keyed.schedule(ids[i], task(delay));
                        replace.keyed.schedule(ids[i], task(delay));
                        (i, timer.add(task(delay)))
                    })
                    .collect()
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    for (i, handle) in scheduled.into_iter().flatten() {
        plain.handles[i] = handle;
    }
    let sides: [&dyn Heartbeat; 3] = [&plain, &keyed, &replace];
    for side in sides {
        two_threads(side, &halves, delays, 1);
    }
    let mut rates = vec![[0.0; 3]; sizes.throughput_rounds];
    for (round, row) in rates.iter_mut().enumerate() {
        for k in 0..3 {
            let s = (round + k) % 3;
            row[s] = two_threads(sides[s], &halves, delays, sizes.passes);
        }
    }
    println!(
        "\nthroughput, two threads on disjoint halves of {n} sessions (each scheduled its half), {} passes per thread per round, M heartbeats/s",
        sizes.passes
    );
    println!("| round | {} | {} | {} |", SIDES[0], SIDES[1], SIDES[2]);
    println!("|--:|--:|--:|--:|");
    for (round, &[p, k, r]) in rates.iter().enumerate() {
        println!(
            "| {round} | {:.2} | {:.2} | {:.2} |",
            p / 1e6,
            k / 1e6,
            r / 1e6
        );
    }
    let med = |s: usize| median(rates.iter().map(|row| row[s]).collect::<Vec<_>>()) / 1e6;
    println!("| median | {:.2} | {:.2} | {:.2} |", med(0), med(1), med(2));
    let worst = rates.iter().map(|row| row[1]).fold(f64::INFINITY, f64::min) / 1e6;
    println!(
        "goal: at least 8 M heartbeats/s from two threads with KeyedTimer::reschedule: {} (median {:.2}, worst round {worst:.2})",
        if worst >= 8.0 { "met" } else { "NOT met" },
        med(1)
    );
    assert_eq!((keyed.keyed.len(), keyed.timer.size()), (n, n));
}

fn main() {
    let sizes = sizes();
    let ids = session_ids(sizes.sessions);
    let delays = delays(DELAY_TABLE, 1, 30_000);
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "heartbeats: {} sessions, delays uniform in 1-30,000 ms, {cpus} hardware threads",
        sizes.sessions
    );
    let started = Instant::now();
    per_heartbeat(&sizes, &ids, &delays);
    throughput(&sizes, &ids, &delays);
    println!("\n(ran {:.1?})", started.elapsed().max(Duration::ZERO));
}
