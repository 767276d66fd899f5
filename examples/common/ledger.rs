//! The books of a run's items (orders, requests, members): each is to be settled exactly
//! once, one of two ways, which is where every example's invariant starts.

use std::sync::atomic::{AtomicI64, AtomicU8, AtomicU64, Ordering};

use super::{Percentiles, Table, group};

/// Each item's settles: how many (a second one is counted, not hidden), which way the first
/// went, and the figure that came with it, in µs (how long it waited, how late it came).
pub(crate) struct Ledger {
    settles: Vec<AtomicU8>,
    /// 1 + the way, 0 while pending.
    ways: Vec<AtomicU8>,
    figures_us: Vec<AtomicI64>,
    /// Items settled each way so far.
    settled: [AtomicU64; 2],
}

impl Ledger {
    pub(crate) fn new(items: usize) -> Ledger {
        Ledger {
            settles: (0..items).map(|_| AtomicU8::new(0)).collect(),
            ways: (0..items).map(|_| AtomicU8::new(0)).collect(),
            figures_us: (0..items).map(|_| AtomicI64::new(0)).collect(),
            settled: Default::default(),
        }
    }

    /// Settles `item` the way `way` (0 or 1) with `figure_us`; true if it was pending. A
    /// second settle only counts: the invariant fails.
    pub(crate) fn settle(&self, item: usize, way: usize, figure_us: i64) -> bool {
        let first = self.settles[item].fetch_add(1, Ordering::AcqRel) == 0;
        first && self.record(item, way, figure_us)
    }

    /// Settles `item` unless it was settled already, which is no fault here: of two ways
    /// that race (a response and a timeout), the first settles it. True if this one did.
    pub(crate) fn try_settle(&self, item: usize, way: usize, figure_us: i64) -> bool {
        let settles = &self.settles[item];
        let first = settles.compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire);
        first.is_ok() && self.record(item, way, figure_us)
    }

    fn record(&self, item: usize, way: usize, figure_us: i64) -> bool {
        self.figures_us[item].store(figure_us, Ordering::Relaxed);
        self.ways[item].store(way as u8 + 1, Ordering::Release);
        self.settled[way].fetch_add(1, Ordering::Release);
        true
    }

    /// Moves `item`, settled already, to the way `way`: for a way known only after the
    /// settle (a purgatory's operation completes, then learns that it expired).
    pub(crate) fn reclassify(&self, item: usize, way: usize) {
        let was = self.ways[item].swap(way as u8 + 1, Ordering::AcqRel);
        if let Some(was) = (was as usize).checked_sub(1).filter(|&was| was != way) {
            self.settled[was].fetch_sub(1, Ordering::AcqRel);
            self.settled[way].fetch_add(1, Ordering::AcqRel);
        }
    }

    /// The way `item` was settled, if it was.
    pub(crate) fn way(&self, item: usize) -> Option<usize> {
        let way = self.ways[item].load(Ordering::Acquire);
        (way as usize).checked_sub(1)
    }

    /// Items settled each way so far.
    pub(crate) fn settled(&self) -> [u64; 2] {
        self.settled.each_ref().map(|n| n.load(Ordering::Acquire))
    }

    /// The figures of the items settled the way `way`.
    pub(crate) fn figures_us(&self, way: usize) -> Vec<i64> {
        let items = (0..self.ways.len()).filter(|&item| self.way(item) == Some(way));
        items
            .map(|item| self.figures_us[item].load(Ordering::Relaxed))
            .collect()
    }

    /// Counts the books, once the run is over.
    pub(crate) fn tally(&self) -> Tally {
        let settles = |times: fn(u8) -> bool| {
            let count = self
                .settles
                .iter()
                .filter(|s| times(s.load(Ordering::Acquire)));
            count.count() as u64
        };
        Tally {
            items: self.settles.len() as u64,
            settled: self.settled(),
            twice: settles(|times| times > 1),
            never: settles(|times| times == 0),
            figures: [0, 1].map(|way| Percentiles::of(self.figures_us(way))),
        }
    }
}

/// A ledger counted.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Tally {
    pub(crate) items: u64,
    /// Items settled each way (the way of their first settle).
    pub(crate) settled: [u64; 2],
    /// Items settled more than once, and never.
    pub(crate) twice: u64,
    pub(crate) never: u64,
    /// The figures of the items settled each way.
    pub(crate) figures: [Percentiles; 2],
}

impl Tally {
    /// Checks in `table` that each item was settled exactly once: `{what}: 5 {ways[0]} +
    /// 3 {ways[1]} = 8 of 8; 0 more than once, 0 never`.
    pub(crate) fn check_once(&self, table: &mut Table, what: &str, ways: [&str; 2]) {
        let [first, second] = self.settled;
        let line = format!(
            "{what}: {} {} + {} {} = {} of {}; {} more than once, {} never",
            group(first),
            ways[0],
            group(second),
            ways[1],
            group(first + second),
            group(self.items),
            self.twice,
            self.never
        );
        let once = self.twice == 0 && self.never == 0 && first + second == self.items;
        table.check(line, once);
    }
}
