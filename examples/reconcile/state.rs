//! What a run stopped early (`--stop-after`) leaves in `--state FILE` for the next one: the
//! books, the checks still pending and the payments not made yet. The crate picks no
//! storage; this is a text file, a record a line, times in ms since the Unix epoch:
//!
//! ```text
//! reconcile-state 1 ORDERS CREATED           the orders, and how many exist
//! stock RESERVED_TOTAL SOLD RETURNED         the stock counters
//! settled ORDER paid|expired FIGURE_US       an order settled, with its lateness
//! check ORDER QTY DEADLINE_MS                a check pending, from `KeyedTimer::pending`
//! pay ORDER QTY WHEN_MS                      a payment to make
//! ```

use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Write};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::books::{EXPIRED, PAID};

/// An order, its units of stock, and a time (a check's deadline, a payment's moment).
pub(crate) type Timed = (u32, u8, SystemTime);

/// The state a stopped run hands to the next.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct State {
    pub(crate) orders: u32,
    /// Orders `0..created` exist.
    pub(crate) created: u32,
    /// Units reserved over all runs, sold, returned.
    pub(crate) stock: [u64; 3],
    /// Orders settled: the way (`PAID`, `EXPIRED`) and its figure.
    pub(crate) settled: Vec<(u32, usize, i64)>,
    pub(crate) checks: Vec<Timed>,
    pub(crate) payments: Vec<Timed>,
}

const MAGIC: &str = "reconcile-state 1";

impl State {
    /// Writes the state to `path` (replacing the file).
    pub(crate) fn write(&self, path: &str) -> io::Result<()> {
        let mut out = BufWriter::new(File::create(path)?);
        let [total, sold, returned] = self.stock;
        writeln!(
            out,
            "{MAGIC} {} {}\nstock {total} {sold} {returned}",
            self.orders, self.created
        )?;
        for &(order, way, figure_us) in &self.settled {
            let way = if way == PAID { "paid" } else { "expired" };
            writeln!(out, "settled {order} {way} {figure_us}")?;
        }
        for (tag, timed) in [("check", &self.checks), ("pay", &self.payments)] {
            for &(order, qty, at) in timed {
                let ms = at
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |since| since.as_millis());
                writeln!(out, "{tag} {order} {qty} {ms}")?;
            }
        }
        out.into_inner()?.sync_all()
    }

    /// Reads the state at `path`; `None` if there is no such file.
    pub(crate) fn read(path: &str) -> io::Result<Option<State>> {
        let file = match File::open(path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            file => file?,
        };
        let bad =
            |line: &str| io::Error::new(io::ErrorKind::InvalidData, format!("{path}: {line:?}"));
        let mut state = State::default();
        for (at, line) in BufReader::new(file).lines().enumerate() {
            let line = line?;
            let words: Vec<&str> = line.split_whitespace().collect();
            let num = |i: usize| {
                words
                    .get(i)
                    .and_then(|w| w.parse::<u64>().ok())
                    .ok_or_else(|| bad(&line))
            };
            let time = |i| num(i).map(|ms| UNIX_EPOCH + Duration::from_millis(ms));
            match words.first() {
                _ if at == 0 && line.starts_with(MAGIC) => {
                    (state.orders, state.created) = (num(2)? as u32, num(3)? as u32);
                }
                _ if at == 0 => return Err(bad(&line)),
                Some(&"stock") => state.stock = [num(1)?, num(2)?, num(3)?],
                Some(&"settled") => {
                    let way = if words.get(2) == Some(&"paid") {
                        PAID
                    } else {
                        EXPIRED
                    };
                    let figure_us = words
                        .get(3)
                        .and_then(|w| w.parse().ok())
                        .ok_or_else(|| bad(&line))?;
                    state.settled.push((num(1)? as u32, way, figure_us));
                }
                Some(&"check") => state.checks.push((num(1)? as u32, num(2)? as u8, time(3)?)),
                Some(&"pay") => state
                    .payments
                    .push((num(1)? as u32, num(2)? as u8, time(3)?)),
                _ => return Err(bad(&line)),
            }
        }
        Ok(Some(state))
    }
}
