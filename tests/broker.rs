//! The `broker` example's core, run small: eight purgatories on one shared reaper, every
//! request completed or expired exactly once, none early, every purgatory left empty, on
//! fewer timer threads than one reaper per purgatory's, with the purgatories' own executor
//! threads and on a pool; that its invariant can fail; and its command line.

mod common;

#[allow(dead_code)]
#[path = "../examples/broker/main.rs"]
mod broker;

use broker::cli::{Command, Config, parse_args};
use broker::report::{KAFKA_TIMER_THREADS, Report};
use broker::run;

use common::args;

/// A run small enough for a debug build on a shared 2-core machine: half a second.
fn small(pool_threads: usize) -> Config {
    Config {
        requests: 2_000,
        rate: 4_000,
        pool_threads,
        progress: false,
        ..Config::default()
    }
}

fn holds(report: &Report, config: &Config) -> (bool, String) {
    let table = report.table(config);
    (table.holds(), table.render())
}

#[test]
fn every_request_ends_once_on_fewer_threads_than_a_reaper_per_purgatory() {
    for pool_threads in [0, 2] {
        let config = small(pool_threads);
        let report = run(&config);
        let (holds, summary) = holds(&report, &config);
        assert!(holds, "invariant failed:\n{summary}");
        assert!(summary.contains("result: OK"), "{summary}");
        let [completed, expired] = report.requests().settled;
        assert_eq!(completed + expired, 2_000, "{summary}");
        assert!(expired > 0, "nothing expired:\n{summary}");
        for ending in &report.endings {
            assert_eq!(ending.tally.items, 250, "{summary}");
            assert!(ending.tally.settled[0] > 0, "none completed:\n{summary}");
            // Never early (the invariant); a loose bound on late.
            assert!(ending.late_us.iter().all(|&us| us < 5_000_000), "{summary}");
        }
        assert_eq!(report.driven, 8);
        if cfg!(target_os = "linux") {
            let (_, timers) = report.threads.expect("/proc/self/task");
            // The shared reaper, and an executor per purgatory or the pool's threads.
            let executors = if pool_threads == 0 { 8 } else { pool_threads };
            assert_eq!(timers, 1 + executors, "{summary}");
            assert!(timers < KAFKA_TIMER_THREADS);
        }
    }
}

#[test]
fn the_invariant_check_can_fail() {
    let config = small(0);
    let report = Report {
        endings: vec![Default::default(); 8],
        threads: Some((20, 2)),
        driven: 8,
        elapsed: Default::default(),
    };
    assert!(holds(&report, &config).0, "an empty run holds");
    let mut twice = report.clone();
    twice.endings[3].tally.items = 1;
    twice.endings[3].tally.settled = [1, 1];
    twice.endings[3].tally.twice = 1;
    let mut early = report.clone();
    early.endings[1].late_us = vec![-1];
    let mut left = report.clone();
    left.endings[7].left = (1, 0);
    let mut threads = report.clone();
    threads.threads = Some((20, KAFKA_TIMER_THREADS));
    for failing in [twice, early, left, threads] {
        let (holds, summary) = holds(&failing, &config);
        assert!(!holds && summary.contains("result: FAILED"), "{summary}");
    }
}

#[test]
fn the_command_line_sets_every_field_and_refuses_nonsense() {
    let parsed = parse_args(args(
        "--requests 10 --rate=20 --pool-threads 3 --seed 5 --no-progress",
    ));
    let expected = Config {
        requests: 10,
        rate: 20,
        pool_threads: 3,
        seed: 5,
        progress: false,
    };
    assert_eq!(parsed, Ok(Command::Run(expected)));
    assert_eq!(parse_args(args("--help")), Ok(Command::Help));
    for line in [
        "--requests 0",
        "--rate 0",
        "--pool-threads many",
        "--frobnicate",
    ] {
        assert!(parse_args(args(line)).is_err(), "accepted {line:?}");
    }
}
