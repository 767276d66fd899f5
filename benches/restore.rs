//! Timeouts back in after a restart (`restore`): a bulk `KeyedTimer::restore` against one
//! `schedule` each, the lateness of lapsed deadlines run at once or spread over a window,
//! and what a `pending` listing costs adders that go on meanwhile.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::{Acquire, Release};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use timingwheel::{KeyedTimer, Lapsed, SystemTimer, SystemTimerReaper, Timer, timer_task};

use crate::baselines::task;
use crate::harness::{atomics, delays, lateness, names, param, percentile, runs_table, table};

/// Restoring N (10^6) keys, delays uniform in 1-30 s, by one `restore` from a list of
/// `(key, SystemTime)` (the snapshot), against N `KeyedTimer::schedule` calls of the same
/// tasks: ns per key, each side on a `SystemTimer` of its own in the same round, the sides
/// alternating; the ratio per round (goal: at most 1.2×). Then LAPSED (10^5) deadlines all
/// past, each a check of WORK_US (5 µs) on the executor, restored with `RunNow` and with
/// `Spread(WINDOW_MS)` (1 s) on a driven timer: how late each ran against its due time
/// (its place in the window, from its scheduling), in ms.
/// Then `pending` of N keys while one thread goes on adding (see [`listing`]).
pub(crate) fn restore() {
    let n = param("n", 1_000_000, 20_000);
    let rounds = param("rounds", 5, 2);
    let deadlines = delays(n, 1_000, 30_000);
    // Untimed: the first timers of the process map their memory.
    let _warm = [bulk(&deadlines, true), bulk(&deadlines, false)];
    let pair = |round: usize| {
        // Restore first in even rounds, schedule in odd ones; restore's figure first.
        let odd = round % 2;
        let mut pair = [bulk(&deadlines, odd == 0), bulk(&deadlines, odd == 1)];
        pair.rotate_left(odd);
        pair.to_vec()
    };
    let per_key: Vec<Vec<f64>> = (0..rounds).map(pair).collect();
    let title = format!("{n} keys: ns per key, restore against schedule");
    table(&title, &["restore", "schedule"], &per_key, true);

    let lapsed = param("lapsed", 100_000, 10_000);
    let window_ms = param("window_ms", 1_000, 200);
    let window = Lapsed::Spread(Duration::from_millis(window_ms));
    let work = Duration::from_micros(param("work_us", 5, 5));
    let run = |policy| lapsed_run(lapsed, policy, work);
    let pair = |_| vec![run(Lapsed::RunNow), run(window)];
    let runs: Vec<_> = (0..rounds).map(pair).collect();
    println!(
        "\n{lapsed} lapsed deadlines, {work:?} of work each, RunNow against Spread({window_ms} ms): \
         lateness in ms\n"
    );
    let columns = "restore call ms | p50 | p99 | max | last ran, ms after the call";
    runs_table(columns, &["RunNow", "Spread"], &runs, &[2, 3]);

    listing(n, rounds);
}

/// One side of the bulk comparison: ns per key to restore (or schedule) `deadlines`.
fn bulk(deadlines: &[i64], restore: bool) -> f64 {
    let keyed = KeyedTimer::new(Arc::new(SystemTimer::new("bulk")));
    let start = if restore {
        let now = SystemTime::now();
        let at = |key: usize| now + Duration::from_millis(deadlines[key] as u64);
        let snapshot: Vec<(usize, SystemTime)> =
            (0..deadlines.len()).map(|key| (key, at(key))).collect();
        let start = Instant::now();
        let skipped = keyed.restore(snapshot, Lapsed::Skip, |&key| task(deadlines[key]));
        assert!(skipped.is_empty());
        start
    } else {
        let start = Instant::now();
        for (key, &delay_ms) in deadlines.iter().enumerate() {
            keyed.schedule(key, task(delay_ms));
        }
        start
    };
    let ns = start.elapsed().as_nanos() as f64 / deadlines.len() as f64;
    assert_eq!(keyed.len(), deadlines.len());
    // Dropped untimed: it cancels every key.
    ns
}

/// Restores `n` lapsed deadlines with `policy` on a driven timer; returns the call's ms,
/// the lateness p50, p99 and max in ms (against the instant each was scheduled, inside the
/// call, plus its place in the window), and when the last one ran.
fn lapsed_run(n: usize, policy: Lapsed, work: Duration) -> Vec<f64> {
    let timer = SystemTimer::new("lapsed");
    let timer = Arc::new(SystemTimerReaper::new("lapsed-reaper", timer));
    let keyed = KeyedTimer::new(timer.clone());
    let (ran_ns, mut made_ns) = (Arc::new(atomics(n, 0)), vec![0; n]);
    let past = SystemTime::now() - Duration::from_secs(3_600);
    let snapshot = (0..n).map(|key| (key, past - Duration::from_millis(key as u64)));
    let start = Instant::now();
    keyed.restore(snapshot, policy, |&key| {
        made_ns[key] = start.elapsed().as_nanos() as i64;
        let ran_ns = ran_ns.clone();
        timer_task(0, move || {
            ran_ns[key].store(start.elapsed().as_nanos() as i64, Release);
            let busy = Instant::now();
            while busy.elapsed() < work {}
        })
    });
    let call_ms = start.elapsed().as_secs_f64() * 1e3;
    while ran_ns.iter().any(|ns| ns.load(Acquire) == 0) {
        thread::sleep(Duration::from_millis(10));
    }
    timer.close();
    let window_ms = match policy {
        Lapsed::Spread(window) => window.as_millis() as i64,
        _ => 0,
    };
    // Its place in the window, in whole ms.
    let place_ns = |key: usize| window_ms * key as i64 / n as i64 * 1_000_000;
    let late_ns = |key: usize| ran_ns[key].load(Acquire) - made_ns[key] - place_ns(key);
    let mut late: Vec<i64> = (0..n).map(late_ns).collect();
    let late = lateness(&mut late, 1e6);
    assert_eq!(late[3], 0.0, "keys ran before their place in the window");
    let last_ns = ran_ns.iter().map(|ns| ns.load(Acquire)).max().unwrap_or(0);
    vec![call_ms, late[0], late[1], late[2], last_ns as f64 / 1e6]
}

/// `pending` of N keys (delays 60-90 s, nothing due) while one thread goes on scheduling
/// (10^5 keys beside them, in turn: an add, then a replacement), per round: how long the
/// listing took, and the adder's longest and 99.99th-percentile `schedule` while it ran,
/// against the same over as long a time right after. A `schedule` that waits for a lock
/// `pending` holds (a map's, while its keys are copied, or a timer shard's, while one
/// expiration is read) waits at most that lock's hold: the longest bounds the longest hold.
fn listing(n: usize, rounds: usize) {
    const ADDED: usize = 100_000;
    let keyed = KeyedTimer::new(Arc::new(SystemTimer::new("listing")));
    for (key, delay_ms) in delays(n, 60_000, 90_000).into_iter().enumerate() {
        keyed.schedule(key, task(delay_ms));
    }
    let runs: Vec<Vec<f64>> = (0..rounds)
        .map(|_| {
            let (listing, stop) = (AtomicBool::new(true), AtomicBool::new(false));
            let adder = || {
                let (mut during, mut after) = (Vec::new(), Vec::new());
                for key in (n..n + ADDED).cycle() {
                    let listing = listing.load(Acquire);
                    let begin = Instant::now();
                    keyed.schedule(key, task(75_000));
                    let ns = begin.elapsed().as_nanos() as f64;
                    match listing {
                        true => during.push(ns),
                        false if stop.load(Acquire) => return (during, after),
                        false => after.push(ns),
                    }
                }
                unreachable!()
            };
            let (took, listed, (mut during, mut after)) = thread::scope(|s| {
                let adder = s.spawn(adder);
                thread::sleep(Duration::from_millis(1));
                let begin = Instant::now();
                let listed = keyed.pending().len();
                let took = begin.elapsed();
                listing.store(false, Release);
                thread::sleep(took);
                stop.store(true, Release);
                (took, listed, adder.join().unwrap())
            });
            let mut figures = vec![took.as_secs_f64() * 1e3, listed as f64];
            for ns in [&mut during, &mut after] {
                ns.sort_by(f64::total_cmp);
                figures.extend([percentile(ns, 0.9999) / 1e3, ns[ns.len() - 1] / 1e3]);
            }
            figures
        })
        .collect();
    let title = format!("pending() of {n} keys while one thread schedules: ms, keys, µs");
    let sides = names(
        "pending ms | listed | add p99.99, listing | add max, listing | p99.99 after | max after",
    );
    table(&title, &sides, &runs, false);
}
