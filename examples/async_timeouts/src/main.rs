//! A tokio service whose request timeouts run on timingwheel's wheel.
//!
//! The service answers each request from one of its backends, under a timeout
//! ([`timingwheel::timeout`], 100 ms): the backend's reply if it comes in time, "timed out"
//! if not. 5 % of the backends are slow (200-400 ms), so their requests time out; the rest
//! answer in 1-20 ms and their timeouts are cancelled, which on the wheel is O(1) and frees
//! the timer task at once. A backend's work is simulated by a reply that a
//! [`timer_task`](timingwheel::timer_task) on the same wheel sends after the request's
//! latency. Clients keep 5,000 requests in flight until 1,000,000 are answered.
//!
//! ```text
//! cargo run --release -p timingwheel-async-timeouts
//! cargo run --release -p timingwheel-async-timeouts -- --requests 200000 --slow-percent 20
//! ```
//!
//! Progress goes to stderr five times a second; the table and the invariant (every request
//! answered exactly once, by its backend or by its timeout, and none timed out early) to
//! stdout. Exit code 1 if the invariant breaks.

#![allow(clippy::print_stdout)]

pub(crate) mod cli;
#[path = "../../common/mod.rs"]
pub(crate) mod common;
mod report;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use cli::Config;
use common::{Ledger, Progress, Rng, group};
use report::Report;
use timingwheel::{Elapsed, Sleep, SystemTimer, SystemTimerReaper, Timer, timeout, timer_task};
use tokio::sync::{mpsc, oneshot};

/// A request's work, queued at its backend.
struct Job {
    latency_ms: i64,
    reply: oneshot::Sender<()>,
}

/// A backend: a queue that a serving task reads.
struct Backend {
    jobs: mpsc::UnboundedSender<Job>,
}

impl Backend {
    /// Sends a request that takes `latency_ms` and waits for the reply.
    async fn call(&self, latency_ms: i64) {
        let (reply, replied) = oneshot::channel();
        self.jobs
            .send(Job { latency_ms, reply })
            .unwrap_or_else(|_| panic!("a backend stopped serving"));
        replied.await.expect("a backend dropped a request");
    }
}

/// The ways a request is answered, in its ledger: by its backend's reply (with how long it
/// waited), or by its timeout (with how late that came, beyond the timeout).
pub(crate) const BACKEND: usize = 0;
pub(crate) const TIMED_OUT: usize = 1;

/// The service's handler: the backend's reply, or "timed out" once `timeout_ms` passed.
async fn handle(
    timer: &Arc<dyn Timer>,
    timeout_ms: i64,
    backend: &Backend,
    latency_ms: i64,
) -> usize {
    match timeout(Arc::clone(timer), timeout_ms, backend.call(latency_ms)).await {
        Ok(()) => BACKEND,
        Err(Elapsed) => TIMED_OUT,
    }
}

/// What the backends share: replies nobody waited for any more, and jobs not yet replied.
#[derive(Default)]
struct Backlog {
    late_replies: AtomicUsize,
    outstanding: AtomicUsize,
}

/// A backend's serving loop: each job replies after its latency, a task on the same wheel
/// (the simulated work; the reply is sent from the timer's executor thread).
async fn serve(
    timer: Arc<dyn Timer>,
    mut jobs: mpsc::UnboundedReceiver<Job>,
    backlog: Arc<Backlog>,
) {
    while let Some(job) = jobs.recv().await {
        backlog.outstanding.fetch_add(1, Ordering::SeqCst);
        let backlog = Arc::clone(&backlog);
        timer.add(timer_task(job.latency_ms, move || {
            if job.reply.send(()).is_err() {
                // The request timed out before: its handler is gone.
                backlog.late_replies.fetch_add(1, Ordering::SeqCst);
            }
            backlog.outstanding.fetch_sub(1, Ordering::SeqCst);
        }));
    }
}

/// Request `id`'s backend and latency, from the seed: the same for every run.
pub(crate) fn route(config: &Config, id: usize) -> (usize, i64) {
    let z = Rng::nth(config.seed, id as u64);
    let backend = (z % config.backends as u64) as usize;
    let spread = z >> 32;
    let latency_ms = if is_slow(config, backend) {
        config.slow_min_ms + (spread % (config.slow_min_ms as u64 + 1)) as i64
    } else {
        1 + (spread % config.fast_max_ms as u64) as i64
    };
    (backend, latency_ms)
}

/// The first `slow_percent` % of the backends are the slow ones.
pub(crate) fn is_slow(config: &Config, backend: usize) -> bool {
    backend < config.backends * config.slow_percent / 100
}

/// Runs the service and its clients, and reports what happened.
pub(crate) fn run(config: &Config) -> Report {
    let timer: Arc<dyn Timer> = Arc::new(SystemTimerReaper::new(
        "timeouts-reaper",
        SystemTimer::new("timeouts"),
    ));
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if config.workers > 0 {
        builder.worker_threads(config.workers);
    }
    let runtime = builder.build().expect("a tokio runtime");
    let ledger = Arc::new(Ledger::new(config.requests));
    let backlog = Arc::new(Backlog::default());
    let done = AtomicBool::new(false);
    let start = Instant::now();

    let drained = thread::scope(|s| {
        s.spawn(|| {
            let line = || {
                let answered = group(ledger.settled().iter().sum::<u64>());
                format!("answered {answered} of {}", group(config.requests))
            };
            let ended = || done.load(Ordering::SeqCst);
            Progress::new(config.progress, start).wait(Duration::ZERO, ended, || true, line);
        });
        let drained = runtime.block_on(async {
            let backends: Arc<Vec<Backend>> = Arc::new(
                (0..config.backends)
                    .map(|_| {
                        let (jobs, queue) = mpsc::unbounded_channel();
                        tokio::spawn(serve(Arc::clone(&timer), queue, Arc::clone(&backlog)));
                        Backend { jobs }
                    })
                    .collect(),
            );
            let clients: Vec<_> = (0..config.in_flight.min(config.requests.max(1)))
                .map(|client| {
                    let (timer, backends, ledger) = (
                        Arc::clone(&timer),
                        Arc::clone(&backends),
                        Arc::clone(&ledger),
                    );
                    let config = config.clone();
                    tokio::spawn(async move {
                        for id in (client..config.requests).step_by(config.in_flight) {
                            let (backend, latency_ms) = route(&config, id);
                            let asked = Instant::now();
                            let answer =
                                handle(&timer, config.timeout_ms, &backends[backend], latency_ms)
                                    .await;
                            let mut figure_us = asked.elapsed().as_micros() as i64;
                            if answer == TIMED_OUT {
                                figure_us -= config.timeout_ms * 1_000;
                            }
                            ledger.settle(id, answer, figure_us);
                        }
                    })
                })
                .collect();
            for client in clients {
                client.await.expect("a client task panicked");
            }
            // The slow backends' last replies, which nobody waits for any more.
            let patience =
                Duration::from_millis(2 * config.slow_min_ms as u64) + Duration::from_secs(10);
            let give_up = Instant::now() + patience;
            while backlog.outstanding.load(Ordering::SeqCst) > 0 && Instant::now() < give_up {
                Sleep::new(Arc::clone(&timer), 5).await;
            }
            backlog.outstanding.load(Ordering::SeqCst) == 0
        });
        done.store(true, Ordering::SeqCst);
        drained
    });
    let wall = start.elapsed();
    drop(runtime);
    // Requests answered `way` at a backend that is slow, or not (`slow`).
    let count = |way, slow| {
        let at = |id| ledger.way(id) == Some(way) && is_slow(config, route(config, id).0) == slow;
        (0..config.requests).filter(|&id| at(id)).count() as u64
    };
    let report = Report {
        answers: ledger.tally(),
        slow_answered: count(BACKEND, true),
        fast_timed_out: count(TIMED_OUT, false),
        late_replies: backlog.late_replies.load(Ordering::SeqCst),
        backlog_drained: drained,
        pending_at_end: timer.size(),
        wall,
    };
    timer.close();
    report
}

fn main() {
    common::example_main("async_timeouts", cli::parse_args, |config| {
        run(config).table(config)
    });
}
