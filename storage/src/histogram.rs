//! A fixed-bucket histogram for probes: recording is a short search over at most
//! [`MAX_BUCKETS`] bounds and three adds; no allocation, no formatting, `Copy`.
//!
//! Runs on one shard inside its probes (a `Cell` or `RefCell`); snapshots cross cores by
//! value. Values are integers in the unit the owner chose (microseconds, bytes, entries);
//! whoever renders them converts the unit once.
//!
//! Invariants:
//! 1. `bounds` is strictly increasing and has at most `MAX_BUCKETS` entries.
//! 2. `count` equals the sum of `counts` (the last slot counts values above every bound).

/// Most bounds a histogram may have (one more slot holds values above the last bound).
pub const MAX_BUCKETS: usize = 16;

/// Latency bounds in microseconds, 25 µs .. 5 s.
pub const LATENCY_BOUNDS_US: &[u64] = &[
    25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000,
    1_000_000, 5_000_000,
];
/// Finer latency bounds in microseconds, 10 µs .. 1 s, for the stages of one request or
/// flush (the latency budget: a durable ack is ~100-1000 µs, split in a few stages).
pub const STAGE_BOUNDS_US: &[u64] =
    &[10, 20, 35, 50, 75, 100, 150, 200, 300, 500, 750, 1_000, 2_000, 5_000, 20_000, 1_000_000];
/// Byte-size bounds, 4 KiB .. 64 MiB.
pub const SIZE_BOUNDS_BYTES: &[u64] =
    &[4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20];
/// Count bounds (entries per flush), 1 .. 1024.
pub const COUNT_BOUNDS: &[u64] = &[1, 2, 4, 8, 16, 32, 64, 128, 256, 1024];

/// Counts of values per bucket, with their sum.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Histogram {
    bounds: &'static [u64],
    counts: [u64; MAX_BUCKETS + 1],
    count: u64,
    sum: u64,
}

impl Histogram {
    /// An empty histogram over `bounds` (upper bounds, inclusive, strictly increasing).
    pub const fn new(bounds: &'static [u64]) -> Histogram {
        assert!(bounds.len() <= MAX_BUCKETS, "too many histogram bounds (invariant 1)");
        Histogram { bounds, counts: [0; MAX_BUCKETS + 1], count: 0, sum: 0 }
    }

    /// Counts one value.
    pub fn record(&mut self, value: u64) {
        let bucket = self.bounds.partition_point(|&bound| bound < value);
        self.counts[bucket] += 1;
        self.count += 1;
        self.sum = self.sum.saturating_add(value);
    }

    /// Adds another histogram over the same bounds (a bug otherwise).
    pub fn merge(&mut self, other: &Histogram) {
        assert_eq!(self.bounds, other.bounds, "merging histograms with different bounds");
        for (mine, theirs) in self.counts.iter_mut().zip(other.counts.iter()) {
            *mine += theirs;
        }
        self.count += other.count;
        self.sum = self.sum.saturating_add(other.sum);
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn sum(&self) -> u64 {
        self.sum
    }

    /// The upper bound of the bucket holding the `q`-quantile (0 < q <= 1), or `None` when
    /// empty or when it lies above every bound. For one-line summaries, not for math.
    pub fn quantile_bound(&self, q: f64) -> Option<u64> {
        let rank = ((self.count as f64 * q).ceil() as u64).max(1);
        if self.count == 0 {
            return None;
        }
        self.cumulative().find(|&(_, at_or_below)| at_or_below >= rank).map(|(bound, _)| bound)
    }

    /// `(upper bound, values at or below it)` for every bound, cumulative as Prometheus
    /// buckets are; the `+Inf` bucket is `count()`.
    pub fn cumulative(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        let mut running = 0;
        self.bounds.iter().zip(self.counts.iter()).map(move |(&bound, &n)| {
            running += n;
            (bound, running)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_land_in_the_first_bucket_whose_bound_covers_them() {
        let mut h = Histogram::new(&[10, 100]);
        for value in [0, 10, 11, 100, 101, 5000] {
            h.record(value);
        }
        assert_eq!(h.cumulative().collect::<Vec<_>>(), vec![(10, 2), (100, 4)]);
        assert_eq!(h.count(), 6);
        assert_eq!(h.sum(), 5222);
    }

    #[test]
    fn quantile_bound_is_the_bound_of_the_bucket_holding_the_rank() {
        let mut h = Histogram::new(&[10, 100, 1000]);
        assert_eq!(h.quantile_bound(0.5), None);
        for value in [5, 50, 60, 70, 5000] {
            h.record(value);
        }
        assert_eq!(h.quantile_bound(0.2), Some(10));
        assert_eq!(h.quantile_bound(0.5), Some(100));
        assert_eq!(h.quantile_bound(0.8), Some(100));
        assert_eq!(h.quantile_bound(1.0), None, "above every bound");
    }

    #[test]
    fn merge_adds_counts_and_sums() {
        let mut a = Histogram::new(COUNT_BOUNDS);
        let mut b = Histogram::new(COUNT_BOUNDS);
        a.record(1);
        b.record(3);
        b.record(2000);
        a.merge(&b);
        assert_eq!(a.count(), 3);
        assert_eq!(a.sum(), 2004);
        assert_eq!(a.cumulative().last(), Some((1024, 2)));
    }
}
