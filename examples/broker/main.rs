//! A broker's eight purgatories on one [`SharedSystemTimerReaper`] thread, where Kafka runs
//! an expiration reaper and an executor thread per purgatory.
//!
//! Each purgatory holds one kind of request (`KINDS`), watched under its key: produce
//! requests wait for the acks of a topic-partition's replicas, fetches for bytes to arrive,
//! heartbeats for the member's next one, and so on. A cluster thread plays the events:
//! each key sees one now and then (`event_ms` apart on average) and calls
//! `check_and_complete`, which completes what waited on it; the rest time out. The main
//! thread offers the requests at a steady rate, round the eight purgatories.
//!
//! Every purgatory is built with `.shared_reaper(&reaper)`, so its own `SystemTimer` is
//! driven by the one reaper thread, and `.threadpool(pool)`, so its expiries run on one
//! `threadpool::ThreadPool` of `--pool-threads` threads (0: an executor thread per timer,
//! as Kafka's).
//!
//! ```text
//! cargo run --release --example broker
//! cargo run --release --example broker -- --pool-threads 0
//! ```
//!
//! At the end a table goes to stdout (`report.rs`): per purgatory, what completed and what
//! expired, how late the expiries came, the process's threads beside Kafka's layout, and
//! the invariant (each request ended exactly one way). The exit code is 1 if it fails.

#![allow(clippy::print_stdout)]

pub(crate) mod cli;
#[path = "../common/mod.rs"]
mod common;
pub(crate) mod report;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use cli::Config;
use common::{Ledger, Progress, Rng, group};
use report::{Ending, Report};
use threadpool::ThreadPool;
use timingwheel::{Delayed, DelayedOperation, DelayedOperationPurgatory, SharedSystemTimerReaper};

fn main() {
    common::example_main("broker", cli::parse_args, |config| {
        run(config).table(config)
    });
}

/// A kind of request, a purgatory each: what it waits for, under which keys (how many),
/// its timeout, and the mean time between two events on a key.
pub(crate) struct Kind {
    pub(crate) name: &'static str,
    pub(crate) waits_for: &'static str,
    key: &'static str,
    keys: u32,
    pub(crate) timeout_ms: i64,
    event_ms: f64,
}

#[rustfmt::skip]
const fn kind(name: &'static str, waits_for: &'static str, key: &'static str, keys: u32,
    timeout_ms: i64, event_ms: f64) -> Kind {
    Kind { name, waits_for, key, keys, timeout_ms, event_ms }
}

/// Timeouts and event rates that expire a few percent of the requests, many of the fetches.
#[rustfmt::skip]
pub(crate) const KINDS: [Kind; 8] = [
    kind("Produce", "3 replicas' acks", "orders", 32, 300, 60.0),
    kind("Fetch", "fetch.min.bytes", "orders", 32, 100, 80.0),
    kind("DeleteRecords", "every low watermark", "orders", 32, 300, 100.0),
    kind("ElectLeader", "the new leader", "orders", 32, 500, 150.0),
    kind("Heartbeat", "the next heartbeat", "member", 64, 200, 70.0),
    kind("Rebalance", "every member's join", "group", 8, 400, 150.0),
    kind("AlterAcls", "every broker's ack", "acl", 16, 300, 100.0),
    kind("RemoteFetch", "the remote segment", "orders", 32, 250, 100.0),
];

/// A topic-partition (`("orders", 7)`), a group member, a group or an ACL.
type Key = (&'static str, u32);

/// How a request ends, in its purgatory's ledger (with how long it waited).
pub(crate) const COMPLETED: usize = 0;
pub(crate) const EXPIRED: usize = 1;

/// The books of one purgatory's requests.
struct Books {
    ledger: Ledger,
    /// `on_expiration` calls.
    expirations: AtomicU64,
}

/// A request waiting for the next event on its key (Kafka's `DelayedProduce`,
/// `DelayedFetch`, ... alike).
struct Request {
    item: usize,
    events: Arc<AtomicU64>,
    /// The key's events when it arrived.
    seen: u64,
    timeout_ms: i64,
    arrived: Instant,
    books: Arc<Books>,
}

impl DelayedOperation for Request {
    fn delay_ms(&self) -> i64 {
        self.timeout_ms
    }
    fn try_complete(&self) -> bool {
        self.events.load(Ordering::SeqCst) > self.seen
    }
    fn on_complete(&self) {
        let waited_us = self.arrived.elapsed().as_micros() as i64;
        self.books.ledger.settle(self.item, COMPLETED, waited_us);
    }
    fn on_expiration(&self) {
        self.books.ledger.reclassify(self.item, EXPIRED);
        self.books.expirations.fetch_add(1, Ordering::SeqCst);
    }
}

/// A purgatory of the broker, the events of its keys and the books of its requests.
struct Purgatory {
    kind: &'static Kind,
    delayed: DelayedOperationPurgatory<Key, Request>,
    events: Vec<Arc<AtomicU64>>,
    books: Arc<Books>,
}

impl Purgatory {
    fn open(
        kind: &'static Kind,
        reaper: &SharedSystemTimerReaper,
        pool: Option<&ThreadPool>,
        requests: usize,
    ) -> Purgatory {
        let builder = DelayedOperationPurgatory::builder(kind.name).shared_reaper(reaper);
        let builder = match pool {
            Some(pool) => builder.threadpool(pool.clone()),
            None => builder,
        };
        let events = (0..kind.keys).map(|_| Arc::default()).collect();
        let ledger = Ledger::new(requests);
        let books = Arc::new(Books {
            ledger,
            expirations: AtomicU64::new(0),
        });
        Purgatory {
            kind,
            delayed: builder.build(),
            events,
            books,
        }
    }

    fn key(&self, index: u32) -> Key {
        (self.kind.key, index)
    }
}

/// The threads the timers run on (named by the reaper, the executors and the pool).
const TIMER_THREADS: [&str; 3] = ["ExpirationReape", "executor-", "purgatory-pool"];

/// The process's threads, and how many of them the timers run (`/proc/self/task`, Linux).
fn threads_now() -> Option<(usize, usize)> {
    let tasks = std::fs::read_dir("/proc/self/task").ok()?.flatten();
    let names: Vec<String> = tasks
        .filter_map(|task| std::fs::read_to_string(task.path().join("comm")).ok())
        .collect();
    let of_timers = |name: &&String| TIMER_THREADS.iter().any(|t| name.starts_with(t));
    Some((names.len(), names.iter().filter(of_timers).count()))
}

/// Runs the simulation and returns what happened.
pub(crate) fn run(config: &Config) -> Report {
    let reaper = SharedSystemTimerReaper::new("ExpirationReaper-0");
    let threads = config.pool_threads;
    let pool = (threads > 0).then(|| ThreadPool::with_name(TIMER_THREADS[2].into(), threads));
    let purgatories: Vec<Purgatory> = (0..KINDS.len())
        .map(|p| {
            let requests = (config.requests + KINDS.len() - 1 - p) / KINDS.len();
            Purgatory::open(&KINDS[p], &reaper, pool.as_ref(), requests)
        })
        .collect();
    let (driven, stop, start) = (reaper.timers(), AtomicBool::new(false), Instant::now());
    let ended = |b: &Purgatory| b.books.ledger.settled().iter().sum::<u64>();
    let settled = || purgatories.iter().map(ended).sum::<u64>();
    let line = |sent: usize| format!("sent {:>7}  ended {:>7}", group(sent), group(settled()));
    let mut threads = None;
    thread::scope(|s| {
        s.spawn(|| cluster(&purgatories, &stop, config.seed));
        let mut progress = Progress::new(config.progress, start);
        let mut rng = Rng::new(config.seed + 1);
        for id in 0..config.requests {
            progress.tick(|| line(id));
            let due = start + Duration::from_secs_f64(id as f64 / f64::from(config.rate));
            thread::sleep(due.saturating_duration_since(Instant::now()));
            let purgatory = &purgatories[id % KINDS.len()];
            let index = rng.below(u64::from(purgatory.kind.keys)) as u32;
            let events = Arc::clone(&purgatory.events[index as usize]);
            let request = Delayed::new(Request {
                item: id / KINDS.len(),
                seen: events.load(Ordering::SeqCst),
                events,
                timeout_ms: purgatory.kind.timeout_ms,
                arrived: Instant::now(),
                books: Arc::clone(&purgatory.books),
            });
            purgatory
                .delayed
                .try_complete_else_watch(&request, &[purgatory.key(index)]);
        }
        let all_ended = || settled() == config.requests as u64;
        let patience = Duration::from_secs(10);
        progress.wait(patience, || true, all_ended, || line(config.requests));
        threads = threads_now();
        stop.store(true, Ordering::SeqCst);
    });
    let elapsed = start.elapsed();
    let endings = purgatories.iter().map(|purgatory| {
        let (delayed, books) = (&purgatory.delayed, &purgatory.books);
        // Expired requests stay in their key's list until its next check.
        for k in 0..purgatory.kind.keys {
            delayed.check_and_complete(&purgatory.key(k));
        }
        let left = (delayed.watched(), delayed.num_delayed());
        // Waits for the expiries under way: `on_expiration` follows `on_complete`.
        delayed.shutdown();
        let late_us = books.ledger.figures_us(EXPIRED).into_iter();
        let timeout_us = purgatory.kind.timeout_ms * 1_000;
        Ending {
            tally: books.ledger.tally(),
            late_us: late_us.map(|waited_us| waited_us - timeout_us).collect(),
            expirations: books.expirations.load(Ordering::SeqCst),
            expired_count: delayed.expired_count(),
            left,
        }
    });
    let endings = endings.collect();
    reaper.close();
    Report {
        endings,
        threads,
        driven,
        elapsed,
    }
}

/// The cluster: every key of every purgatory sees an event now and then (replica acks,
/// bytes arriving, a heartbeat), and its waiting requests are checked.
fn cluster(purgatories: &[Purgatory], stop: &AtomicBool, seed: u64) {
    let mut rng = Rng::new(seed);
    let mut last = Instant::now();
    while !stop.load(Ordering::SeqCst) {
        thread::sleep(Duration::from_millis(1));
        let elapsed_ms = last.elapsed().as_secs_f64() * 1e3;
        last = Instant::now();
        for purgatory in purgatories {
            for (k, events) in purgatory.events.iter().enumerate() {
                if rng.unit() < elapsed_ms / purgatory.kind.event_ms {
                    events.fetch_add(1, Ordering::SeqCst);
                    purgatory
                        .delayed
                        .check_and_complete(&purgatory.key(k as u32));
                }
            }
        }
    }
}
