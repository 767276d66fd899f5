//! The one capturing logger: keeps every `error!` and `warn!` record of the test binary, so
//! that a test can see a caught panic, or a warning, reported.

use std::sync::Mutex;

use log::{Level, LevelFilter, Log, Metadata, Record};

struct Capture {
    records: Mutex<Vec<(Level, String)>>,
}

impl Log for Capture {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.level() <= Level::Warn
    }
    fn log(&self, record: &Record<'_>) {
        if self.enabled(record.metadata()) {
            let message = record.args().to_string();
            self.records.lock().unwrap().push((record.level(), message));
        }
    }
    fn flush(&self) {}
}

static CAPTURE: Capture = Capture {
    records: Mutex::new(Vec::new()),
};

/// Installs the capturing logger as the binary's logger; later calls find it there.
pub(crate) fn install() {
    let _ = log::set_logger(&CAPTURE);
    log::set_max_level(LevelFilter::Warn);
}

/// The records at `level` logged so far (by any test of the binary) that contain `needle`.
fn containing(level: Level, needle: &str) -> Vec<String> {
    let records = CAPTURE.records.lock().unwrap();
    records
        .iter()
        .filter(|(at, message)| *at == level && message.contains(needle))
        .map(|(_, message)| message.clone())
        .collect()
}

/// The `error!` records logged so far (by any test of the binary) that contain `needle`.
pub(crate) fn errors_containing(needle: &str) -> Vec<String> {
    containing(Level::Error, needle)
}

/// The `warn!` records logged so far (by any test of the binary) that contain `needle`.
pub(crate) fn warnings_containing(needle: &str) -> Vec<String> {
    containing(Level::Warn, needle)
}
