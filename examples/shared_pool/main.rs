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

mod cli;
#[path = "../common/mod.rs"]
mod common;
pub(crate) mod report;

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use common::{ProgressLine, group};
use threadpool::ThreadPool;
use timingwheel::{SystemTimer, SystemTimerReaper, Timer, TimerTaskEntry, timer_task};

// `Command` is for the test that runs this example small.
#[allow(unused_imports)]
pub(crate) use cli::{Command, Config, USAGE, parse_args};
pub(crate) use report::Report;

fn main() {
    common::example_main("shared_pool", USAGE, parse_args, |config| {
        let report = run(config);
        (report.summary(config), report.invariant_holds())
    });
}

/// How a request was answered.
pub(crate) const PENDING: u8 = 0;
pub(crate) const RESPONDED: u8 = 1;
pub(crate) const TIMED_OUT: u8 = 2;

/// One request's books, written by whichever thread answers it.
#[derive(Default)]
pub(crate) struct Request {
    /// `PENDING` until answered, then how.
    pub(crate) answer: AtomicU8,
    /// Times its timeout task ran (must be 0 or 1).
    pub(crate) timeout_runs: AtomicU8,
    /// Times cancelling its timeout succeeded (must be 0 or 1, and not with a run).
    pub(crate) cancels: AtomicU8,
    /// When it was accepted, answered, and when its timeout ran, in µs since the start.
    pub(crate) accepted_us: AtomicU64,
    pub(crate) answered_us: AtomicU64,
    pub(crate) timed_out_us: AtomicU64,
}

impl Request {
    /// Answers the request `how` at `now_us`, unless it was answered already; true if this
    /// did.
    fn answer(&self, how: u8, now_us: u64) -> bool {
        let answered = self
            .answer
            .compare_exchange(PENDING, how, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if answered {
            self.answered_us.store(now_us, Ordering::Release);
        }
        answered
    }
}

/// What the requests' work did.
#[derive(Default)]
pub(crate) struct Work {
    /// Work that finished after its request had timed out (its response was dropped).
    pub(crate) finished_late: AtomicU64,
    /// Work skipped because its request had timed out before it started.
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
    let requests: Arc<Vec<Request>> =
        Arc::new((0..config.requests).map(|_| Request::default()).collect());
    let work = Arc::new(Work::default());

    // The client: one request every 1/rate s, on schedule.
    let interval = Duration::from_secs(1) / config.rate_per_s;
    let mut rng = config.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let progress = config.progress.then(ProgressLine::new);
    for id in 0..config.requests as usize {
        let show_progress = id % (config.rate_per_s as usize / 4).max(1) == 0;
        if let Some(progress) = progress.as_ref().filter(|_| show_progress) {
            progress.show(&format!(
                "{} requests sent, {} timeouts pending in the timer",
                group(id),
                group(timer.size())
            ));
        }
        let due = start + interval * id as u32;
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            thread::sleep(wait);
        }
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let work_ms = rng % (config.work_max_ms + 1);
        accept(
            config,
            &reaper,
            &pool,
            &requests,
            &work,
            id,
            work_ms,
            since_start_us,
        );
    }

    // Every request is answered within its deadline plus what the pool has queued.
    let answered = || {
        requests
            .iter()
            .all(|request| request.answer.load(Ordering::Acquire) != PENDING)
    };
    let patience = Instant::now() + Duration::from_secs(30);
    while !answered() && Instant::now() < patience {
        thread::sleep(Duration::from_millis(5));
    }
    pool.join();
    if let Some(progress) = &progress {
        progress.show(&format!(
            "{} requests sent, all answered",
            group(config.requests)
        ));
        progress.finish();
    }
    let (stats, lateness, size) = (timer.stats(), timer.lateness(), timer.size());
    reaper.close();
    Report::collect(
        config,
        &requests,
        &work,
        stats,
        lateness,
        size,
        pool.panic_count(),
        start.elapsed(),
    )
}

/// Accepts request `id`: its timeout to the timer, its work (`work_ms` long) to the pool.
#[allow(clippy::too_many_arguments)]
fn accept(
    config: &Config,
    timer: &SystemTimerReaper,
    pool: &ThreadPool,
    requests: &Arc<Vec<Request>>,
    work: &Arc<Work>,
    id: usize,
    work_ms: u64,
    since_start_us: impl Fn() -> u64 + Send + Copy + 'static,
) {
    requests[id]
        .accepted_us
        .store(since_start_us(), Ordering::Release);
    let on_timeout = Arc::clone(requests);
    let timeout: TimerTaskEntry = timer.add(timer_task(config.deadline_ms, move || {
        let request = &on_timeout[id];
        request.timeout_runs.fetch_add(1, Ordering::AcqRel);
        let now_us = since_start_us();
        request.timed_out_us.store(now_us, Ordering::Release);
        // Fails the request, unless its response came first.
        request.answer(TIMED_OUT, now_us);
    }));
    let (requests, work) = (Arc::clone(requests), Arc::clone(work));
    pool.execute(move || {
        let request = &requests[id];
        if request.answer.load(Ordering::Acquire) == TIMED_OUT {
            work.skipped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        thread::sleep(Duration::from_millis(work_ms));
        if request.answer(RESPONDED, since_start_us()) {
            // Answered in time: the timeout must never fire.
            if timeout.cancel() {
                request.cancels.fetch_add(1, Ordering::AcqRel);
            }
        } else {
            work.finished_late.fetch_add(1, Ordering::Relaxed);
        }
    });
}
