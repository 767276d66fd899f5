//! The one capturing logger: keeps every `error!` record of the test binary, so that a test
//! can see a caught panic reported.

use std::sync::Mutex;

use log::{Level, LevelFilter, Log, Metadata, Record};

struct Capture {
    errors: Mutex<Vec<String>>,
}

impl Log for Capture {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.level() <= Level::Error
    }
    fn log(&self, record: &Record<'_>) {
        if record.level() == Level::Error {
            self.errors.lock().unwrap().push(record.args().to_string());
        }
    }
    fn flush(&self) {}
}

static CAPTURE: Capture = Capture {
    errors: Mutex::new(Vec::new()),
};

/// Installs the capturing logger as the binary's logger; later calls find it there.
pub(crate) fn install() {
    let _ = log::set_logger(&CAPTURE);
    log::set_max_level(LevelFilter::Error);
}

/// The `error!` records logged so far (by any test of the binary) that contain `needle`.
pub(crate) fn errors_containing(needle: &str) -> Vec<String> {
    let errors = CAPTURE.errors.lock().unwrap();
    errors
        .iter()
        .filter(|message| message.contains(needle))
        .cloned()
        .collect()
}
