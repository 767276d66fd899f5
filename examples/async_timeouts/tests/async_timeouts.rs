//! The `async_timeouts` example run small (its invariant holds, the report says so), and
//! its command line.

#[allow(dead_code)]
#[path = "../src/main.rs"]
mod example;

use example::cli::{Command, Config, parse_args};
use example::{is_slow, route, run};

/// A run small enough for a debug build on a shared 2-core machine, with both outcomes.
fn small() -> Config {
    Config {
        requests: 4_000,
        in_flight: 400,
        backends: 20,
        slow_percent: 10,
        timeout_ms: 40,
        fast_max_ms: 5,
        slow_min_ms: 200,
        workers: 2,
        seed: 7,
        progress: false,
    }
}

#[test]
fn a_small_run_answers_every_request_exactly_once_and_none_early() {
    let config = small();
    let report = run(&config);
    let (holds, rendered) = (
        report.table(&config).holds(),
        report.table(&config).render(),
    );
    assert!(holds, "{rendered}");
    let [by_backend, timed_out] = report.answers.settled;
    assert_eq!(by_backend + timed_out, config.requests as u64);
    let slow = (0..config.requests)
        .filter(|&id| is_slow(&config, route(&config, id).0))
        .count();
    assert!(
        slow > 0 && slow < config.requests,
        "both kinds of backend: {slow}"
    );
    // A slow backend never beats the timeout; only an overloaded machine times a fast one out.
    assert_eq!(report.slow_answered, 0);
    assert!(timed_out >= slow as u64);
    assert_eq!(report.late_replies as u64, timed_out);
    assert!(rendered.contains("result: OK"), "{rendered}");
    assert!(
        rendered.contains("0 more than once, 0 never  ok"),
        "{rendered}"
    );
}

#[test]
fn routes_are_seeded_and_latencies_stay_in_their_ranges() {
    let config = small();
    for id in 0..1_000 {
        let (backend, latency_ms) = route(&config, id);
        assert_eq!(route(&config, id), (backend, latency_ms));
        assert!(backend < config.backends);
        let range = if is_slow(&config, backend) {
            config.slow_min_ms..=2 * config.slow_min_ms
        } else {
            1..=config.fast_max_ms
        };
        assert!(
            range.contains(&latency_ms),
            "{id}: {latency_ms} ms at {backend}"
        );
    }
}

#[test]
fn the_command_line_sets_every_field_and_refuses_nonsense() {
    let args = |line: &str| parse_args(line.split_whitespace().map(str::to_owned));
    let parsed = args(
        "--requests 10 --in-flight=3 --backends 4 --slow-percent 50 --timeout-ms 7 \
         --fast-max-ms 2 --slow-min-ms 9 --workers 1 --seed 5 --no-progress",
    );
    assert_eq!(
        parsed,
        Ok(Command::Run(Config {
            requests: 10,
            in_flight: 3,
            backends: 4,
            slow_percent: 50,
            timeout_ms: 7,
            fast_max_ms: 2,
            slow_min_ms: 9,
            workers: 1,
            seed: 5,
            progress: false,
        }))
    );
    assert_eq!(args(""), Ok(Command::Run(Config::default())));
    assert_eq!(args("--help"), Ok(Command::Help));
    assert_eq!(
        args("--timeout-ms 0"),
        Err("--timeout-ms must be positive".to_owned())
    );
    assert_eq!(
        args("--in-flight -1"),
        Err("--in-flight: cannot parse \"-1\"".to_owned())
    );
    assert!(
        args("--slow-percent 101")
            .unwrap_err()
            .contains("at most 100")
    );
    assert!(args("--requests").unwrap_err().contains("needs a value"));
    assert!(args("--bogus").unwrap_err().contains("unknown argument"));
}
