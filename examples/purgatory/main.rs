//! A broker's produce purgatory, Kafka's main use of the timer, in miniature.
//!
//! A producer sends `acks=all` requests: each appends one record to a partition of topic
//! `orders` and waits until all 3 replicas have it, or its timeout passes. It waits in a
//! `DelayedOperationPurgatory`, watched under its topic-partition. Three replica threads
//! fetch every millisecond and call `check_and_complete` when a partition's high
//! watermark moves. Replica 3 lags on one partition in 16 (it fetches those every 800 ms,
//! longer than the 500 ms timeout), so some requests there expire.
//!
//! ```text
//! cargo run --release --example purgatory
//! cargo run --release --example purgatory -- --requests 1000000 --rate 200000
//! ```
//!
//! Progress goes to stderr five times a second; the table and the invariant (every request
//! answered exactly once, none before its timeout) to stdout. Exit code 1 if it breaks.

#![allow(clippy::print_stdout)]

pub(crate) mod cli;
#[path = "../common/mod.rs"]
mod common;
mod report;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use cli::Config;
use common::{Ledger, Progress, Rng, group};
use report::Report;
use timingwheel::{Delayed, DelayedOperation, DelayedOperationPurgatory};

/// A produce request waiting for every replica of its partition (Kafka's `DelayedProduce`).
struct DelayedProduce {
    id: usize,
    partition: Arc<Partition>,
    /// The log end offset right after this request's record.
    required_offset: u64,
    timeout_ms: i64,
    arrived: Instant,
    ledger: Arc<Ledger>,
}

impl DelayedOperation for DelayedProduce {
    fn delay_ms(&self) -> i64 {
        self.timeout_ms
    }
    fn try_complete(&self) -> bool {
        self.partition.high_watermark.load(Ordering::SeqCst) >= self.required_offset
    }
    fn on_complete(&self) {
        // Sends the response: acknowledged, or timed out if on_expiration follows.
        let waited_us = self.arrived.elapsed().as_micros() as i64;
        self.ledger.settle(self.id, ACKED, waited_us);
    }
    fn on_expiration(&self) {
        self.ledger.reclassify(self.id, EXPIRED);
    }
}

/// The key requests are watched under.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct TopicPartition {
    topic: Arc<str>,
    partition: u32,
}

type ProducePurgatory = DelayedOperationPurgatory<TopicPartition, DelayedProduce>;

/// The ways a request is answered, in its ledger.
const ACKED: usize = 0;
const EXPIRED: usize = 1;

const REPLICAS: usize = 3;
const SLOW_REPLICA: usize = 2;
const FETCH_INTERVAL: Duration = Duration::from_millis(1);

/// One partition: its log end, what each replica has fetched, and the high watermark
/// (what all replicas have).
#[derive(Default)]
struct Partition {
    log_end: AtomicU64,
    fetched: [AtomicU64; REPLICAS],
    high_watermark: AtomicU64,
}

impl Partition {
    /// Appends a record; returns the log end offset after it.
    fn append(&self) -> u64 {
        self.log_end.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Replica `replica` fetches up to the log end. Returns true if that moved the high
    /// watermark.
    fn fetch(&self, replica: usize) -> bool {
        let log_end = self.log_end.load(Ordering::SeqCst);
        self.fetched[replica].fetch_max(log_end, Ordering::SeqCst);
        let all_have = self.fetched.iter().map(|f| f.load(Ordering::SeqCst)).min();
        let all_have = all_have.unwrap_or(0);
        self.high_watermark.fetch_max(all_have, Ordering::SeqCst) < all_have
    }
}

/// Runs the simulation and reports what happened.
pub(crate) fn run(config: &Config) -> Report {
    // Kafka's defaults: its own SystemTimer, an expiration reaper thread, purge every 1000.
    let purgatory = ProducePurgatory::new("Produce", 0);
    let topic: Arc<str> = Arc::from("orders");
    let keys: Vec<TopicPartition> = (0..config.partitions as u32)
        .map(|partition| TopicPartition {
            topic: Arc::clone(&topic),
            partition,
        })
        .collect();
    let partitions: Vec<Arc<Partition>> = (0..config.partitions).map(|_| Arc::default()).collect();
    let ledger = Arc::new(Ledger::new(config.requests));
    let checks = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let start = Instant::now();
    let mut producing = Duration::ZERO;

    thread::scope(|s| {
        for replica in 0..REPLICAS {
            let (purgatory, keys, partitions) = (&purgatory, &keys, &partitions);
            let (stop, checks) = (&stop, &checks);
            s.spawn(move || replicate(replica, config, purgatory, keys, partitions, stop, checks));
        }
        let line = |sent: usize| {
            let [acked, expired] = ledger.settled();
            format!(
                "sent {:>9}  answered {:>9} (expired {:>7})  waiting {:>7}  watched {:>7}",
                group(sent),
                group(acked + expired),
                group(expired),
                group(purgatory.num_delayed()),
                group(purgatory.watched())
            )
        };
        let mut progress = Progress::new(config.progress, start);

        // The producer, paced to the offered rate.
        let mut rng = Rng::new(config.seed);
        for id in 0..config.requests {
            progress.tick(|| line(id));
            let due = start + Duration::from_secs_f64(id as f64 / f64::from(config.rate));
            if let Some(ahead) = due.checked_duration_since(Instant::now()) {
                thread::sleep(ahead);
            }
            let p = rng.below(config.partitions as u64) as usize;
            let produce = Delayed::new(DelayedProduce {
                id,
                partition: Arc::clone(&partitions[p]),
                required_offset: partitions[p].append(),
                timeout_ms: config.timeout_ms,
                arrived: Instant::now(),
                ledger: Arc::clone(&ledger),
            });
            purgatory.try_complete_else_watch(&produce, std::slice::from_ref(&keys[p]));
        }
        producing = start.elapsed();

        let patience = Duration::from_millis(config.timeout_ms as u64 + config.slow_fetch_ms);
        let all_answered = || ledger.settled().iter().sum::<u64>() == config.requests as u64;
        let patience = patience + Duration::from_secs(10);
        progress.wait(patience, || true, all_answered, || line(config.requests));
        stop.store(true, Ordering::SeqCst);
    });
    let answering = start.elapsed();

    // Expired requests stay in their partition's list until its next check (or a purge).
    for key in &keys {
        purgatory.check_and_complete(key);
    }
    let (watched_at_end, delayed_at_end) = (purgatory.watched(), purgatory.num_delayed());
    // After the reaper's last expiration: an operation learns it expired after it completed.
    purgatory.shutdown();
    let answers = ledger.tally();
    Report {
        requests: config.requests,
        completed_by_acks: answers.settled[ACKED] as usize,
        expired: answers.settled[EXPIRED] as usize,
        answered_twice: answers.twice as usize,
        never_answered: answers.never as usize,
        acked: answers.figures[ACKED],
        timed_out: answers.figures[EXPIRED],
        producing,
        answering,
        check_and_complete_calls: checks.load(Ordering::SeqCst),
        watched_at_end,
        delayed_at_end,
    }
}

/// A replica's fetch loop: fetch every partition, and wake the requests of a partition
/// whose high watermark moved.
fn replicate(
    replica: usize,
    config: &Config,
    purgatory: &ProducePurgatory,
    keys: &[TopicPartition],
    partitions: &[Arc<Partition>],
    stop: &AtomicBool,
    checks: &AtomicUsize,
) {
    let slow_fetch = Duration::from_millis(config.slow_fetch_ms);
    let mut next_slow_fetch = Instant::now() + slow_fetch;
    while !stop.load(Ordering::SeqCst) {
        let slow_round = replica == SLOW_REPLICA && Instant::now() >= next_slow_fetch;
        for (p, partition) in partitions.iter().enumerate() {
            let lags = replica == SLOW_REPLICA && p % config.slow_every == 0;
            if (!lags || slow_round) && partition.fetch(replica) {
                purgatory.check_and_complete(&keys[p]);
                checks.fetch_add(1, Ordering::SeqCst);
            }
        }
        if slow_round {
            next_slow_fetch += slow_fetch;
        }
        thread::sleep(FETCH_INTERVAL);
    }
}

fn main() {
    common::example_main("purgatory", cli::parse_args, |config| {
        run(config).table(config)
    });
}
