//! Per-partition index: offset -> log position, timestamp -> batch, and the tail cache.
//!
//! Runs on the shard; append hot path pushes one 48-byte entry per batch (amortized, no
//! other allocation). Lookups are binary searches: O(log batches).
//!
//! Invariants:
//! 1. Offsets are strictly increasing; an append's base_offset == next_offset. Gaps exist
//!    only where the log cleaner removed a whole batch (a `Replace` entry, `cleaner.rs`).
//! 2. `log_start_offset <= high_watermark <= next_offset`.
//! 3. Index entries are sorted by base_offset, and by log position until the cleaner
//!    replaced a batch (`replaced`): a cleaned copy lies after newer batches, so the
//!    oldest position a partition keeps alive is then the minimum over its batches, not
//!    the front's. `running_max_timestamp` is non-decreasing.
//! 4. The cached batches are a suffix of the index.

use std::collections::VecDeque;

use bytes::Bytes;

use crate::Offset;

/// One batch of a partition in the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchEntry {
    pub base_offset: Offset,
    pub last_offset: Offset,
    /// Log position of the batch bytes (the entry header is 32 bytes before).
    pub position: u64,
    pub len: u32,
    pub max_timestamp: i64,
    /// max(max_timestamp) over this and all earlier batches still indexed or not.
    pub running_max_timestamp: i64,
}

#[derive(Debug, Default)]
pub struct PartitionLog {
    pub batches: VecDeque<BatchEntry>,
    pub log_start_offset: Offset,
    pub next_offset: Offset,
    pub high_watermark: Offset,
    pub size_bytes: u64,
    /// Batch bytes of the newest batches (a suffix of `batches`), base offset rewritten.
    pub cached: VecDeque<Bytes>,
    /// Whether positions may be out of offset order (a batch was replaced; invariant 3).
    pub replaced: bool,
    /// The latest checkpoint copy that copied this partition, or that started before it
    /// was created (`state::CheckpointCopy::generation`).
    pub copied_generation: u32,
    /// The page where `state::OldestPositions` counts this partition's oldest batch.
    pub oldest_page: Option<u64>,
    /// Waiting in `state::OldestPositions::stale` to be counted again.
    pub oldest_stale: bool,
    /// Each leader epoch its batches carry, from its first offset (KIP-320).
    pub epochs: crate::epochs::LeaderEpochs,
}

impl PartitionLog {
    pub fn starting_at(offset: Offset) -> PartitionLog {
        PartitionLog {
            log_start_offset: offset,
            next_offset: offset,
            high_watermark: offset,
            ..PartitionLog::default()
        }
    }

    /// Adds a batch at the end (invariant 1 asserted).
    pub fn push(
        &mut self,
        base_offset: Offset,
        last_offset: Offset,
        position: u64,
        len: u32,
        max_timestamp: i64,
    ) {
        assert_eq!(base_offset, self.next_offset, "offsets are dense (invariant 1)");
        if let Some(last) = self.batches.back() {
            assert!(position > last.position, "log positions increase (invariant 3)");
        }
        self.push_unchecked(base_offset, last_offset, position, len, max_timestamp);
    }

    fn push_unchecked(
        &mut self,
        base_offset: Offset,
        last_offset: Offset,
        position: u64,
        len: u32,
        max_timestamp: i64,
    ) {
        assert!(last_offset >= base_offset);
        let running = self
            .batches
            .back()
            .map_or(max_timestamp, |b| b.running_max_timestamp.max(max_timestamp));
        push_back_small(
            &mut self.batches,
            BatchEntry {
                base_offset,
                last_offset,
                position,
                len,
                max_timestamp,
                running_max_timestamp: running,
            },
        );
        self.next_offset = last_offset + 1;
        self.size_bytes += len as u64;
    }

    /// Adds a batch from a checkpoint: after the previous one, gaps allowed (invariant 1),
    /// positions in any order (invariant 3).
    pub fn restore(&mut self, batch: BatchEntry) {
        if let Some(last) = self.batches.back() {
            assert!(batch.base_offset > last.last_offset, "offsets increase (invariant 1)");
            self.replaced |= batch.position < last.position;
        }
        self.push_unchecked(
            batch.base_offset,
            batch.last_offset,
            batch.position,
            batch.len,
            batch.max_timestamp,
        );
    }

    /// Applies a cleaned copy of the batch `[base_offset, last_offset]`: its new place
    /// `Some((position, len))`, or `None` when the cleaner removed the whole batch. Returns
    /// the bytes dropped from the cache, or `None` if no batch has exactly that range (it
    /// left by retention, or the partition was recreated): then nothing changes.
    pub fn replace(
        &mut self,
        base_offset: Offset,
        last_offset: Offset,
        copy: Option<(u64, u32)>,
    ) -> Option<usize> {
        let i = self.find_offset(base_offset);
        let batch = self.batches.get(i)?;
        if batch.base_offset != base_offset || batch.last_offset != last_offset {
            return None;
        }
        // The cache stays a suffix (invariant 4): drop it up to and including this batch.
        let first_cached = self.batches.len() - self.cached.len();
        let mut uncached = 0;
        for _ in first_cached..=i {
            uncached += self.cached.pop_front().map_or(0, |b| b.len());
        }
        self.size_bytes -= batch.len as u64;
        self.replaced = true;
        match copy {
            Some((position, len)) => {
                let batch = &mut self.batches[i];
                batch.position = position;
                batch.len = len;
                self.size_bytes += len as u64;
            }
            None => {
                self.batches.remove(i);
            }
        }
        Some(uncached)
    }

    /// Index of the batch holding `offset`, or of the first batch after it.
    pub fn find_offset(&self, offset: Offset) -> usize {
        self.batches.partition_point(|b| b.last_offset < offset)
    }

    /// Index of the first batch holding a timestamp >= `timestamp_ms`, below `high_watermark`.
    pub fn find_timestamp(&self, timestamp_ms: i64) -> Option<usize> {
        let i = self.batches.partition_point(|b| b.running_max_timestamp < timestamp_ms);
        let batch = self.batches.get(i)?;
        (batch.last_offset < self.high_watermark).then_some(i)
    }

    /// The largest record timestamp below the high watermark (None when nothing is).
    pub fn max_timestamp(&self) -> Option<i64> {
        let durable = self.batches.partition_point(|b| b.last_offset < self.high_watermark);
        durable.checked_sub(1).map(|i| self.batches[i].running_max_timestamp)
    }

    /// The cached bytes of batch `i`, if it is in the tail cache.
    pub fn cached_batch(&self, i: usize) -> Option<&Bytes> {
        let first_cached = self.batches.len() - self.cached.len();
        i.checked_sub(first_cached).and_then(|j| self.cached.get(j))
    }

    /// Drops whole batches from the front while `drop(batch, size_bytes)` says so, only
    /// below the high watermark. Returns the bytes removed from the cache.
    pub fn trim_front(&mut self, drop: impl FnMut(&BatchEntry, u64) -> bool) -> usize {
        self.trim_front_below(self.high_watermark, drop)
    }

    fn trim_front_below(
        &mut self,
        limit: Offset,
        mut drop: impl FnMut(&BatchEntry, u64) -> bool,
    ) -> usize {
        let mut uncached = 0;
        while let Some(first) = self.batches.front() {
            if first.last_offset >= limit || !drop(first, self.size_bytes) {
                break;
            }
            if self.cached.len() == self.batches.len() {
                uncached += self.cached.pop_front().map_or(0, |b| b.len());
            }
            let first = self.batches.pop_front().unwrap();
            self.size_bytes -= first.len as u64;
            self.log_start_offset = first.last_offset + 1;
        }
        uncached
    }

    /// Moves log_start_offset to at least `offset` (replay of a LogStart entry).
    pub fn advance_log_start(&mut self, offset: Offset) -> usize {
        // Replay: the entry was written after the batches it trims became durable.
        let uncached = self.trim_front_below(Offset::MAX, |b, _| b.last_offset < offset);
        self.log_start_offset = self.log_start_offset.max(offset);
        uncached
    }

    /// The oldest log position this partition keeps alive (invariant 3).
    pub fn oldest_position(&self) -> Option<u64> {
        if self.replaced {
            return self.batches.iter().map(|b| b.position).min();
        }
        self.batches.front().map(|b| b.position)
    }
}

/// `push_back` whose first allocation holds one item, not the four a `VecDeque` starts
/// with: with many partitions, most hold a batch or two, and each of them would carry
/// the unused three (docs/benchmarks.md, "Memory per partition"). Later pushes grow the
/// deque as usual (doubling).
pub(crate) fn push_back_small<T>(deque: &mut VecDeque<T>, item: T) {
    if deque.capacity() == 0 {
        deque.reserve_exact(1);
    }
    deque.push_back(item);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partition_with_one_batch_allocates_one_index_entry() {
        let mut p = PartitionLog::starting_at(0);
        p.push(0, 0, 0, 100, 0);
        assert_eq!(p.batches.capacity(), 1);
        for i in 1..10 {
            p.push(i, i, 1000 * i as u64, 100, 0);
        }
        assert_eq!(p.batches.len(), 10);
        assert!(p.batches.capacity() >= 10);
    }

    fn partition() -> PartitionLog {
        let mut p = PartitionLog::starting_at(0);
        // (records, max_timestamp)
        for (i, (records, ts)) in [(3, 100), (1, 90), (5, 200), (2, 150)].into_iter().enumerate() {
            let base = p.next_offset;
            p.push(base, base + records - 1, 1000 * i as u64, 100, ts);
        }
        p.high_watermark = p.next_offset;
        p
    }

    #[test]
    fn offset_lookup_finds_the_batch_holding_the_offset() {
        let p = partition();
        // offsets: [0..=2] [3] [4..=8] [9..=10]
        let table = [(0, 0), (2, 0), (3, 1), (4, 2), (8, 2), (9, 3), (10, 3), (11, 4)];
        for (offset, batch) in table {
            assert_eq!(p.find_offset(offset), batch, "offset {offset}");
        }
    }

    #[test]
    fn timestamp_lookup_uses_the_running_maximum() {
        let p = partition();
        let table = [(0, Some(0)), (100, Some(0)), (101, Some(2)), (160, Some(2)), (201, None)];
        for (ts, batch) in table {
            assert_eq!(p.find_timestamp(ts), batch, "timestamp {ts}");
        }
    }

    #[test]
    #[should_panic(expected = "dense")]
    fn a_gap_in_offsets_is_a_bug() {
        let mut p = partition();
        let next = p.next_offset;
        p.push(next + 1, next + 1, 99_999, 10, 0);
    }

    #[test]
    fn a_cleaned_partition_keeps_its_oldest_position_as_the_minimum_over_its_batches() {
        let mut p = partition();
        // offsets: [0..=2]@0 [3]@1000 [4..=8]@2000 [9..=10]@3000
        assert_eq!(p.replace(0, 2, Some((5000, 40))), Some(0));
        assert_eq!(p.oldest_position(), Some(1000), "not the front's 5000");
        assert_eq!(p.replace(3, 3, None), Some(0));
        assert_eq!(p.oldest_position(), Some(2000));
        assert_eq!(p.size_bytes, 40 + 100 + 100);
        // A range the index does not hold exactly is left alone.
        assert_eq!(p.replace(4, 7, None), None);
        assert_eq!(p.replace(3, 3, None), None);
        // A fetch from the removed offset 3 starts at the next batch.
        assert_eq!(p.batches[p.find_offset(3)].base_offset, 4);
        // A checkpoint of it restores the same index, gaps and positions as they are.
        let mut restored = PartitionLog::starting_at(0);
        for b in &p.batches {
            restored.restore(*b);
        }
        assert_eq!(restored.batches, p.batches);
        assert_eq!(restored.oldest_position(), Some(2000));
    }

    #[test]
    fn replacing_a_cached_batch_uncaches_up_to_it_so_the_cache_stays_a_suffix() {
        let mut p = partition();
        for len in [10, 20, 30] {
            p.cached.push_back(Bytes::from(vec![0; len]));
        }
        assert_eq!(p.replace(4, 8, Some((9000, 50))), Some(30), "batches 1 and 2 uncached");
        assert_eq!(p.cached.len(), 1);
        assert_eq!(p.cached_batch(3).map(|b| b.len()), Some(30));
    }

    #[test]
    fn retention_trims_whole_batches_below_the_high_watermark_only() {
        let mut p = partition();
        p.high_watermark = 9;
        p.trim_front(|_, _| true);
        assert_eq!(p.log_start_offset, 9);
        assert_eq!(p.batches.len(), 1);
        assert_eq!(p.size_bytes, 100);
        let mut q = partition();
        q.trim_front(|b, size| b.max_timestamp < 95 || size > 250);
        assert_eq!(q.log_start_offset, 4, "size keeps the newest 200 bytes");
    }
}
