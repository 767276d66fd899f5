//! A service that runs its request work and its request timeouts on one
//! `threadpool::ThreadPool`.
//!
//! A client thread sends requests at a steady rate. The service accepts each one by handing
//! its work to its pool and its deadline to a `SystemTimer` whose expiries run on that same
//! pool ([`SystemTimerBuilder::threadpool`]): no executor thread of the timer's own.
//! Whichever comes first answers the request: the work's response, which cancels the
//! timeout, or the timeout, which fails the request (work that has not started by then is
//! skipped). The timer is bounded with [`SystemTimerBuilder::max_in_flight`], so timeouts
//! never hold more than that many of the pool's threads; the ones due beyond it wait in the
//! timer, still cancellable. A [`SystemTimerReaper`] drives the timer.
//!
//! At the end a table goes to stdout (`report.rs`), with the invariant checked per request:
//! answered exactly once; its timeout ran or was cancelled, exactly once, never both; no
//! timeout ran before its deadline; the timer's counts agree and nothing is left in it. The
//! exit code is 1 if it fails.
//!
//! ```text
//! cargo run --release --example shared_pool
//! cargo run --release --example shared_pool -- --threads 4 --max-in-flight 0
//! cargo run --release --example shared_pool -- --help
//! ```
//!
//! This file holds the service's part; `cli.rs` the command line, `report.rs` the table.
//!
//! [`SystemTimerBuilder::threadpool`]: timingwheel::SystemTimerBuilder::threadpool
//! [`SystemTimerBuilder::max_in_flight`]: timingwheel::SystemTimerBuilder::max_in_flight

#![allow(clippy::print_stdout)]

pub(crate) mod cli;
#[path = "../common/mod.rs"]
mod common;
pub(crate) mod report;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use cli::Config;
use common::{Ledger, Progress, Rng, group};
use threadpool::ThreadPool;
use timingwheel::{SystemTimer, SystemTimerReaper, Timer, TimerTaskEntry, timer_task};

use report::Report;

fn main() {
    common::example_main("shared_pool", cli::parse_args, |config| {
        run(config).table(config)
    });
}

/// The ways a request is answered, in its ledger, each with the time from its acceptance.
pub(crate) const RESPONDED: usize = 0;
pub(crate) const TIMED_OUT: usize = 1;
/// The ways a request's timeout ends, in its ledger: it ran (with how late, after the
/// deadline), or it was cancelled.
pub(crate) const RAN: usize = 0;
pub(crate) const CANCELLED: usize = 1;

/// The books of the requests, written by whichever thread answers each.
pub(crate) struct Requests {
    /// Each answered once: the first of its response and its timeout does.
    pub(crate) answers: Ledger,
    /// Each request's timeout ran or was cancelled, exactly once.
    pub(crate) timeouts: Ledger,
    /// Work that finished after its request had timed out (its response was dropped), and
    /// work skipped because its request had timed out before it started.
    pub(crate) finished_late: AtomicU64,
    pub(crate) skipped: AtomicU64,
}

/// Runs the simulation and returns what happened.
pub(crate) fn run(config: &Config) -> Report {
    let start = Instant::now();
    let since_start_us = move || start.elapsed().as_micros() as u64;
    let pool = ThreadPool::with_name("service".into(), config.threads);
    let mut builder = SystemTimer::builder("request-timeouts").threadpool(pool.clone());
    if config.max_in_flight > 0 {
        builder = builder.max_in_flight(config.max_in_flight);
    }
    let reaper = SystemTimerReaper::new("request-timeouts-reaper", builder.build());
    let timer: &SystemTimer = reaper.get_ref().expect("the reaper drives a SystemTimer");
    let requests = Arc::new(Requests {
        answers: Ledger::new(config.requests as usize),
        timeouts: Ledger::new(config.requests as usize),
        finished_late: AtomicU64::new(0),
        skipped: AtomicU64::new(0),
    });

    // The client: one request every 1/rate s, on schedule.
    let interval = Duration::from_secs(1) / config.rate;
    let mut rng = Rng::new(config.seed);
    let mut progress = Progress::new(config.progress, start);
    for id in 0..config.requests as usize {
        progress.tick(|| {
            let pending = group(timer.size());
            format!(
                "{} requests sent, {pending} timeouts pending in the timer",
                group(id)
            )
        });
        let due = start + interval * id as u32;
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            thread::sleep(wait);
        }
        let work_ms = rng.below(config.work_max_ms + 1);
        accept(
            config,
            &reaper,
            &pool,
            &requests,
            id,
            work_ms,
            since_start_us,
        );
    }

    // Every request is answered within its deadline plus what the pool has queued.
    let answered = || requests.answers.settled().iter().sum::<u64>() == u64::from(config.requests);
    let patience = Instant::now() + Duration::from_secs(30);
    while !answered() && Instant::now() < patience {
        thread::sleep(Duration::from_millis(5));
    }
    pool.join();
    progress.finish(|| format!("{} requests sent, all answered", group(config.requests)));
    let (stats, lateness, size) = (timer.stats(), timer.lateness(), timer.size());
    reaper.close();
    Report {
        answers: requests.answers.tally(),
        timeouts: requests.timeouts.tally(),
        finished_late: requests.finished_late.load(Ordering::Relaxed),
        skipped: requests.skipped.load(Ordering::Relaxed),
        stats,
        size_at_end: size,
        lateness,
        pool_panics: pool.panic_count(),
        elapsed: start.elapsed(),
    }
}

/// Accepts request `id`: its timeout to the timer, its work (`work_ms` long) to the pool.
fn accept(
    config: &Config,
    timer: &SystemTimerReaper,
    pool: &ThreadPool,
    requests: &Arc<Requests>,
    id: usize,
    work_ms: u64,
    since_start_us: impl Fn() -> u64 + Send + Copy + 'static,
) {
    let accepted_us = since_start_us();
    let waited_us = move || (since_start_us() - accepted_us) as i64;
    let deadline_us = config.deadline_ms * 1_000;
    let on_timeout = Arc::clone(requests);
    let timeout: TimerTaskEntry = timer.add(timer_task(config.deadline_ms, move || {
        let waited_us = waited_us();
        on_timeout.timeouts.settle(id, RAN, waited_us - deadline_us);
        // Fails the request, unless its response came first.
        on_timeout.answers.try_settle(id, TIMED_OUT, waited_us);
    }));
    let requests = Arc::clone(requests);
    pool.execute(move || {
        if requests.answers.way(id) == Some(TIMED_OUT) {
            requests.skipped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        thread::sleep(Duration::from_millis(work_ms));
        if requests.answers.try_settle(id, RESPONDED, waited_us()) {
            // Answered in time: the timeout must never fire.
            if timeout.cancel() {
                requests.timeouts.settle(id, CANCELLED, 0);
            }
        } else {
            requests.finished_late.fetch_add(1, Ordering::Relaxed);
        }
    });
}
