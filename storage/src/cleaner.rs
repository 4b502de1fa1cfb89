//! The log cleaner of compacted partitions (`cleanup.policy=compact`): one pass keeps, for
//! every key, its latest committed record below the pass's clean point and removes the
//! older ones, and the aborted transactional data, with offsets unchanged. docs/storage.md
//! ("Compaction") has the design and the argument.
//!
//! Runs on the shard that owns the partition, in a background task the shard schedules
//! (never on the produce or fetch path), at a bounded rate of bytes read and written
//! (`CleanPolicy::bytes_per_second`). Allocates freely: a key map per pass (the exact key
//! bytes, at most `CleanPolicy::max_keys`), one cleaned copy per rewritten batch.
//!
//! A pass, for one partition:
//! 1. Clean point: the base offset of the first batch that is the partition's last batch,
//!    not wholly below the high watermark and `CleanPolicy::upper_bound` (the shard's last
//!    stable offset), or younger than `min.compaction.lag.ms`.
//! 2. Key map: read `[log start, clean point)` and keep key -> latest offset, over plain
//!    and committed transactional records (a transactional batch is aborted when one of
//!    `CleanPolicy::aborted` covers it, committed otherwise: below the last stable offset
//!    every transaction has its marker).
//! 3. Copy forward, in offset order: each batch with a dead record gets a `Replace` entry
//!    (frame.rs) holding the batch with only its live records (same base offset, same
//!    last offset delta, producer fields, attributes and timestamps; count, length and CRC
//!    recomputed), or the removed range when no record lives; an aborted batch is removed
//!    whole; a marker is removed once its transaction has no data left (invariant 6). The
//!    flusher applies a `Replace` to the index once it is durable (state.rs invariant 6).
//!
//! Invariants (the assertions and tests cite them):
//! 1. A record is removed only if its key has a committed record at a higher offset below
//!    the clean point that the pass keeps, or if its batch is aborted, so any prefix of a
//!    pass's `Replace` entries (what a crash leaves) keeps every key's latest committed
//!    record.
//! 2. A tombstone is removed only below `CleanPolicy::tombstones_removable_below`, and only
//!    if no older record of its key can outlive it: not if the key has a record in a batch
//!    the pass keeps whole (a producer's last data batch, committed or aborted), nor if the
//!    range holds a batch whose keys cannot be read (compressed, malformed). Its older
//!    records are removed by `Replace` entries earlier in the log than its own.
//! 3. Offsets never change; a batch keeps its base offset and last offset delta.
//! 4. Kept whole, never rewritten: compressed or malformed batches, each producer's last
//!    data batch below the clean point (producer state and its sequence are rebuilt from it
//!    after a restart; it may be aborted data: then its marker stays too) and each
//!    producer's last marker (a marker may carry an epoch bump that fences a zombie).
//!    Such a batch is only moved, unchanged, when it lies in the oldest segment the
//!    partition keeps alive, so a long-lived batch does not pin old segments of the log.
//! 5. The partition's last batch is never cleaned: a fetch from any offset below the log
//!    end finds a batch at or after it.
//! 6. A COMMIT/ABORT marker is removed only when no data batch of its transaction is left
//!    (the ones before it in the log, since its producer's previous marker) and it lies
//!    below `tombstones_removable_below` (delete.retention.ms, as tombstones). Data come
//!    before their marker and a pass writes in offset order, so a crash never leaves data
//!    without its marker: a restart would rebuild an open transaction from them and hold
//!    the last stable offset back forever.

use std::collections::{HashMap, HashSet};

use bytes::Bytes;

use crate::batch::{for_each_record, RecordBatchHeader, RECORD_BATCH_HEADER_BYTES};
use crate::disk::Disk;
use crate::index::PartitionLog;
use crate::log::ShardLog;
use crate::{Offset, PartitionId, ReadError, StorageError};

/// `attributes` bits of a v2 batch (Kafka's `DefaultRecordBatch`).
const TRANSACTIONAL: i16 = 0x10;
const CONTROL: i16 = 0x20;
const CRC_START: usize = 21;
/// Bytes of batches read per `ShardLog::read` call of a pass.
const READ_CHUNK_BYTES: usize = 1 << 20;
/// `Replace` bytes a pass appends before it waits for them to be durable.
const WRITE_GROUP_BYTES: usize = 256 << 10;

/// An aborted transaction of the partition, as the shard knows it (its aborted list): the
/// transactional batches of `producer_id` in `[first_offset, marker_offset)` are aborted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AbortedTxnRange {
    pub producer_id: i64,
    pub first_offset: Offset,
    pub marker_offset: Offset,
}

/// How one pass runs (the shard derives it from the topic's configs).
#[derive(Clone, Debug)]
pub struct CleanPolicy {
    /// Wall clock, milliseconds since the epoch.
    pub now_ms: i64,
    /// `min.compaction.lag.ms`: batches younger than this are not cleaned.
    pub min_compaction_lag_ms: i64,
    /// Tombstones below this offset may be removed (invariant 2); the shard sets it from
    /// `delete.retention.ms` and the clean points of its earlier passes.
    pub tombstones_removable_below: Offset,
    /// Budget of bytes read plus bytes written per second.
    pub bytes_per_second: u64,
    /// Most distinct keys one pass maps; a pass whose range holds more stops its clean
    /// point at the batch where the map filled.
    pub max_keys: usize,
    /// Nothing at or above this offset is cleaned: the shard passes the partition's last
    /// stable offset, so every transaction with data below the clean point has a durable
    /// marker and a known outcome (`Offset::MAX` when the partition has no transactions).
    pub upper_bound: Offset,
    /// The partition's aborted transactions (any order); a transactional batch below the
    /// clean point that none covers is committed.
    pub aborted: Vec<AbortedTxnRange>,
}

/// What a pass did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CleanReport {
    /// The pass cleaned `[log start, clean_point)`.
    pub clean_point: Offset,
    pub bytes_read: u64,
    pub bytes_written: u64,
    /// Batches rewritten with fewer records, or moved unchanged (invariant 4).
    pub batches_rewritten: u64,
    pub batches_removed: u64,
    pub records_removed: u64,
    pub tombstones_removed: u64,
    /// Tombstones that are their key's latest record and were kept only because
    /// `tombstones_removable_below` did not reach them yet.
    pub tombstones_waiting: u64,
    /// Aborted transactional batches removed (also counted in `batches_removed`).
    pub aborted_batches_removed: u64,
    /// COMMIT/ABORT markers removed (invariant 6; also counted in `batches_removed`).
    pub markers_removed: u64,
    /// Markers whose transaction has no data left, kept only because
    /// `tombstones_removable_below` did not reach them yet.
    pub markers_waiting: u64,
}

impl CleanReport {
    fn add(&mut self, stats: &BatchStats) {
        self.records_removed += stats.records_removed;
        self.tombstones_removed += stats.tombstones_removed;
        self.tombstones_waiting += stats.tombstones_waiting;
        self.aborted_batches_removed += stats.aborted_batches_removed;
        self.markers_removed += stats.markers_removed;
        self.markers_waiting += stats.markers_waiting;
    }
}

/// How dirty a compacted partition is (`ShardLog::cleanable`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cleanable {
    /// Where a pass started now would stop.
    pub clean_point: Offset,
    /// Bytes of batches below the caller's last clean point.
    pub clean_bytes: u64,
    /// Bytes of batches from there to `clean_point`.
    pub dirty_bytes: u64,
    /// Max timestamp of the first dirty batch (for `max.compaction.lag.ms`).
    pub first_dirty_timestamp: Option<i64>,
}

/// Invariants 1 and 5: the base offset of the first batch a pass may not clean.
pub(crate) fn clean_point(log: &PartitionLog, bounds: &Bounds) -> Offset {
    let Some(last) = log.batches.back() else { return log.log_start_offset };
    let limit = last.base_offset.min(log.high_watermark).min(bounds.upper_bound);
    let (now_ms, min_compaction_lag_ms) = (bounds.now_ms, bounds.min_compaction_lag_ms);
    let young = now_ms.saturating_sub(min_compaction_lag_ms);
    log.batches
        .iter()
        .find(|b| b.last_offset >= limit || b.max_timestamp > young)
        .map_or(limit, |b| b.base_offset)
}

/// What bounds a pass's clean point besides the log itself.
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    /// Wall clock, milliseconds since the epoch.
    pub now_ms: i64,
    /// `min.compaction.lag.ms`.
    pub min_compaction_lag_ms: i64,
    /// See `CleanPolicy::upper_bound`.
    pub upper_bound: Offset,
}

impl CleanPolicy {
    fn bounds(&self) -> Bounds {
        Bounds {
            now_ms: self.now_ms,
            min_compaction_lag_ms: self.min_compaction_lag_ms,
            upper_bound: self.upper_bound,
        }
    }
}

pub(crate) fn cleanable(log: &PartitionLog, cleaned_to: Offset, bounds: &Bounds) -> Cleanable {
    let clean_point = clean_point(log, bounds);
    let mut report =
        Cleanable { clean_point, clean_bytes: 0, dirty_bytes: 0, first_dirty_timestamp: None };
    for b in log.batches.iter().take_while(|b| b.base_offset < clean_point) {
        if b.base_offset < cleaned_to {
            report.clean_bytes += b.len as u64;
        } else {
            report.dirty_bytes += b.len as u64;
            report.first_dirty_timestamp.get_or_insert(b.max_timestamp);
        }
    }
    report
}

/// What a stored batch is to the cleaner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BatchClass {
    /// Not transactional.
    Plain,
    /// Transactional data whose transaction committed.
    Committed,
    /// Transactional data whose transaction aborted.
    Aborted,
    /// A COMMIT or ABORT control batch.
    Marker,
    /// Compressed: its keys cannot be read here (invariants 2 and 4).
    Opaque,
}

/// What phase 1 of a pass learns from the batches below the clean point.
#[derive(Debug, Default)]
pub(crate) struct KeyMap {
    /// Key -> offset of its latest plain or committed record in a batch that may be cleaned.
    latest: HashMap<Vec<u8>, Offset>,
    /// Keys with a record in a batch kept whole (invariant 2).
    pinned: HashSet<Vec<u8>>,
    /// A batch whose keys could not be read lies below the clean point.
    opaque: bool,
    /// Per producer: base offset and keys of its last data batch so far (invariant 4).
    producer_last: HashMap<i64, (Offset, Vec<Vec<u8>>)>,
    /// Per producer: base offset of its last marker so far (invariant 4).
    producer_last_marker: HashMap<i64, Offset>,
    /// Base offsets of the batches kept whole (filled by `finish`).
    kept_whole: HashSet<Offset>,
    /// Per producer: its aborted transactions, (first offset, marker offset), in order.
    aborted: HashMap<i64, Vec<(Offset, Offset)>>,
}

impl KeyMap {
    pub fn new(aborted: &[AbortedTxnRange]) -> KeyMap {
        let mut map = KeyMap::default();
        for a in aborted {
            map.aborted.entry(a.producer_id).or_default().push((a.first_offset, a.marker_offset));
        }
        for ranges in map.aborted.values_mut() {
            ranges.sort_unstable_by_key(|&(_, marker)| marker);
        }
        map
    }

    pub fn len(&self) -> usize {
        self.latest.len()
    }

    fn class(&self, header: &RecordBatchHeader) -> BatchClass {
        if header.attributes & CONTROL != 0 {
            BatchClass::Marker
        } else if header.compression() != 0 {
            BatchClass::Opaque
        } else if header.attributes & TRANSACTIONAL == 0 {
            BatchClass::Plain
        } else if self.is_aborted(header.producer_id, header.base_offset) {
            BatchClass::Aborted
        } else {
            BatchClass::Committed
        }
    }

    /// Whether an aborted transaction of `producer_id` holds `offset` (its ranges are
    /// disjoint and ordered, so one binary search answers).
    fn is_aborted(&self, producer_id: i64, offset: Offset) -> bool {
        let Some(ranges) = self.aborted.get(&producer_id) else { return false };
        let i = ranges.partition_point(|&(_, marker)| marker <= offset);
        ranges.get(i).is_some_and(|&(first, _)| first <= offset)
    }

    /// Adds one stored batch (phase 1).
    pub fn add(&mut self, batch: &[u8]) {
        let Ok(header) = RecordBatchHeader::parse_unvalidated(batch) else {
            self.opaque = true;
            return;
        };
        let class = self.class(&header);
        if class == BatchClass::Marker {
            self.producer_last_marker.insert(header.producer_id, header.base_offset);
            return;
        }
        let mut keys = Vec::new();
        let walked = for_each_record(batch, |r| {
            if let Some(key) = r.key {
                keys.push((key.to_vec(), header.base_offset + r.offset_delta));
            }
        });
        if walked.is_err() {
            self.opaque = true;
            self.kept_whole.insert(header.base_offset);
            return;
        }
        if class == BatchClass::Opaque {
            self.kept_whole.insert(header.base_offset);
            self.pinned.extend(keys.into_iter().map(|(k, _)| k));
            return;
        }
        if header.producer_id >= 0 {
            let batch_keys = keys.iter().map(|(k, _)| k.clone()).collect();
            self.producer_last.insert(header.producer_id, (header.base_offset, batch_keys));
        }
        if class == BatchClass::Aborted {
            return; // never any key's latest: an aborted value must not remove a committed one
        }
        for (key, offset) in keys {
            self.latest.insert(key, offset);
        }
    }

    /// Ends phase 1: each producer's last data batch is kept whole and pins its keys; its
    /// last marker is kept whole (invariant 4).
    pub fn finish(&mut self) {
        for (_, (base, keys)) in self.producer_last.drain() {
            self.kept_whole.insert(base);
            self.pinned.extend(keys);
        }
        self.kept_whole.extend(self.producer_last_marker.drain().map(|(_, base)| base));
    }
}

/// What phase 2 does with one batch.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    Unchanged,
    /// Every record is dead: the range is removed.
    Removed,
    /// The batch with only its live records.
    Rewritten(Bytes),
}

/// Counts of one batch's cleaning.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct BatchStats {
    pub records_removed: u64,
    pub tombstones_removed: u64,
    pub tombstones_waiting: u64,
    pub aborted_batches_removed: u64,
    pub markers_removed: u64,
    pub markers_waiting: u64,
}

/// Phase 2: decides each batch, in offset order (invariants 1-4 and 6).
pub(crate) struct Copier<'a> {
    map: &'a KeyMap,
    /// See `CleanPolicy::tombstones_removable_below` (also the markers' horizon).
    tombstones_below: Offset,
    /// Producers with a data batch kept since their last marker: their next marker stays.
    data_kept: HashSet<i64>,
}

impl<'a> Copier<'a> {
    pub fn new(map: &'a KeyMap, tombstones_below: Offset) -> Copier<'a> {
        Copier { map, tombstones_below, data_kept: HashSet::new() }
    }

    /// The verdict on the next stored batch of the pass.
    pub fn clean_batch(&mut self, batch: &[u8]) -> (Verdict, BatchStats) {
        let Ok(header) = RecordBatchHeader::parse_unvalidated(batch) else {
            return (Verdict::Unchanged, BatchStats::default());
        };
        let class = self.map.class(&header);
        if class == BatchClass::Marker {
            return self.marker(&header);
        }
        let kept_whole = self.map.kept_whole.contains(&header.base_offset);
        let (verdict, stats) = match class {
            _ if kept_whole || class == BatchClass::Opaque => {
                (Verdict::Unchanged, BatchStats::default())
            }
            BatchClass::Aborted => {
                let stats = BatchStats {
                    records_removed: header.records_count.max(0) as u64,
                    aborted_batches_removed: 1,
                    ..BatchStats::default()
                };
                (Verdict::Removed, stats)
            }
            _ => clean_records(self.map, &header, batch, self.tombstones_below),
        };
        if header.attributes & TRANSACTIONAL != 0 && verdict != Verdict::Removed {
            self.data_kept.insert(header.producer_id);
        }
        (verdict, stats)
    }

    /// Invariant 6: a marker goes once its transaction's data are gone and the horizon
    /// passed it, unless it is its producer's last (invariant 4).
    fn marker(&mut self, header: &RecordBatchHeader) -> (Verdict, BatchStats) {
        let data_kept = self.data_kept.remove(&header.producer_id);
        let mut stats = BatchStats::default();
        if data_kept || self.map.kept_whole.contains(&header.base_offset) {
            return (Verdict::Unchanged, stats);
        }
        if header.base_offset >= self.tombstones_below {
            stats.markers_waiting = 1;
            return (Verdict::Unchanged, stats);
        }
        stats.markers_removed = 1;
        (Verdict::Removed, stats)
    }
}

/// The records of a plain or committed batch: only each key's latest stays, and a
/// tombstone goes past its horizon unless its key is pinned (invariants 1 and 2).
fn clean_records(
    map: &KeyMap,
    header: &RecordBatchHeader,
    batch: &[u8],
    tombstones_below: Offset,
) -> (Verdict, BatchStats) {
    let mut stats = BatchStats::default();
    let mut live: Vec<&[u8]> = Vec::new();
    let mut records = 0;
    let walked = for_each_record(batch, |r| {
        records += 1;
        let offset = header.base_offset + r.offset_delta;
        let Some(key) = r.key else {
            live.push(r.bytes); // keyless (the topic was not always compacted): kept
            return;
        };
        // A key the map does not know (it filled up) has no later record in the pass.
        let latest = map.latest.get(key).is_none_or(|&at| at <= offset);
        if !latest {
            stats.records_removed += 1;
            return;
        }
        if r.value.is_none() {
            let removable = offset < tombstones_below && !map.opaque && !map.pinned.contains(key);
            if removable {
                stats.records_removed += 1;
                stats.tombstones_removed += 1;
                return;
            }
            if offset >= tombstones_below {
                stats.tombstones_waiting += 1;
            }
        }
        live.push(r.bytes);
    });
    if walked.is_err() {
        return (Verdict::Unchanged, BatchStats::default());
    }
    let verdict = match live.len() {
        n if n == records => Verdict::Unchanged,
        0 => Verdict::Removed,
        _ => Verdict::Rewritten(rebuild(batch, &live)),
    };
    (verdict, stats)
}

/// `batch` with only the records `live` (slices of it, in order): the header kept, the
/// record count, length and CRC recomputed (invariant 3).
fn rebuild(batch: &[u8], live: &[&[u8]]) -> Bytes {
    let len = RECORD_BATCH_HEADER_BYTES + live.iter().map(|r| r.len()).sum::<usize>();
    let mut out = Vec::with_capacity(len);
    out.extend_from_slice(&batch[..RECORD_BATCH_HEADER_BYTES]);
    for record in live {
        out.extend_from_slice(record);
    }
    out[8..12].copy_from_slice(&((len - 12) as i32).to_be_bytes());
    out[57..61].copy_from_slice(&(live.len() as i32).to_be_bytes());
    let crc = crc32c::crc32c(&out[CRC_START..]);
    out[17..21].copy_from_slice(&crc.to_be_bytes());
    Bytes::from(out)
}

/// Keeps a pass within its bytes-per-second budget.
struct Throttle {
    bytes_per_second: u64,
    started: std::time::Instant,
    bytes: u64,
}

impl Throttle {
    fn new(bytes_per_second: u64) -> Throttle {
        Throttle {
            bytes_per_second: bytes_per_second.max(1),
            started: std::time::Instant::now(),
            bytes: 0,
        }
    }

    async fn spend(&mut self, bytes: u64) {
        self.bytes += bytes;
        let due =
            std::time::Duration::from_secs_f64(self.bytes as f64 / self.bytes_per_second as f64);
        let elapsed = self.started.elapsed();
        if due > elapsed {
            glommio::timer::sleep(due - elapsed).await;
        } else {
            glommio::yield_if_needed().await;
        }
    }
}

/// The stored batches in the bytes of one read, in order.
fn batches_of(bytes: &Bytes) -> Vec<(RecordBatchHeader, Bytes)> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let Ok(header) = RecordBatchHeader::parse_unvalidated(&bytes[at..]) else { break };
        let end = (at + header.total_bytes()).min(bytes.len());
        out.push((header, bytes.slice(at..end)));
        at = end;
    }
    out
}

impl<D: Disk> ShardLog<D> {
    /// How dirty a partition is, given the clean point of its last pass (`cleaned_to`; the
    /// log start after a restart).
    pub fn cleanable(
        &self,
        partition: PartitionId,
        cleaned_to: Offset,
        bounds: &Bounds,
    ) -> Option<Cleanable> {
        self.with_partition(partition, |log| cleanable(log, cleaned_to, bounds))
    }

    /// Whether a batch of `partition` starts at `offset` (a cleaning pass may have removed
    /// it: the shard drops the aborted transactions whose marker is gone).
    pub fn has_batch_at(&self, partition: PartitionId, offset: Offset) -> bool {
        self.with_partition(partition, |log| {
            log.batches.get(log.find_offset(offset)).is_some_and(|b| b.base_offset == offset)
        })
        .unwrap_or(false)
    }

    /// One cleaning pass over `partition` (see the module header). Returns once every
    /// `Replace` entry it wrote is durable and applied. Errors: the log stopped or cannot
    /// take entries (nothing is lost: a prefix of the pass is applied), or a read failed.
    pub async fn clean(
        &self,
        partition: PartitionId,
        policy: CleanPolicy,
    ) -> Result<CleanReport, StorageError> {
        let mut report = CleanReport::default();
        let result = self.clean_pass(partition, policy, &mut report).await;
        self.count_pass(&report);
        result.map(|()| report)
    }

    async fn clean_pass(
        &self,
        partition: PartitionId,
        policy: CleanPolicy,
        report: &mut CleanReport,
    ) -> Result<(), StorageError> {
        let mut throttle = Throttle::new(policy.bytes_per_second);
        let bounds = policy.bounds();
        let Some(mut clean_point) = self.with_partition(partition, |log| clean_point(log, &bounds))
        else {
            return Ok(());
        };
        // Phase 1: the key map.
        let mut map = KeyMap::new(&policy.aborted);
        let mut from = self.with_partition(partition, |log| log.log_start_offset).unwrap_or(0);
        'map: while from < clean_point {
            let Some(bytes) = self.read_for_cleaning(partition, &mut from).await? else { break };
            throttle.spend(bytes.len() as u64).await;
            report.bytes_read += bytes.len() as u64;
            for (header, batch) in batches_of(&bytes) {
                if header.base_offset >= clean_point {
                    break 'map;
                }
                if map.len() >= policy.max_keys {
                    clean_point = header.base_offset;
                    break 'map;
                }
                map.add(&batch);
                from = header.base_offset + header.last_offset_delta as i64 + 1;
            }
        }
        map.finish();
        report.clean_point = clean_point;
        // Phase 2: copy forward, in offset order (invariant 1's prefix argument).
        let movable = self.oldest_segment_batches(partition, clean_point);
        let mut group: Vec<Bytes> = Vec::new();
        let mut group_bytes = 0;
        let mut copier = Copier::new(&map, policy.tombstones_removable_below);
        let mut from = self.with_partition(partition, |log| log.log_start_offset).unwrap_or(0);
        'copy: while from < clean_point {
            let Some(bytes) = self.read_for_cleaning(partition, &mut from).await? else { break };
            throttle.spend(bytes.len() as u64).await;
            report.bytes_read += bytes.len() as u64;
            for (header, batch) in batches_of(&bytes) {
                if header.base_offset >= clean_point {
                    break 'copy;
                }
                let last = header.base_offset + header.last_offset_delta as i64;
                from = last + 1;
                let (verdict, stats) = copier.clean_batch(&batch);
                report.add(&stats);
                let payload = match verdict {
                    Verdict::Unchanged if movable.contains(&header.base_offset) => batch,
                    Verdict::Unchanged => continue,
                    Verdict::Removed => {
                        report.batches_removed += 1;
                        removed_range(header.base_offset, last)
                    }
                    Verdict::Rewritten(copy) => copy,
                };
                if payload.len() > crate::state::REMOVED_RANGE_BYTES {
                    report.batches_rewritten += 1;
                }
                group_bytes += payload.len();
                group.push(payload);
                if group_bytes >= WRITE_GROUP_BYTES {
                    report.bytes_written += group_bytes as u64;
                    throttle.spend(group_bytes as u64).await;
                    self.append_replaces(partition, std::mem::take(&mut group)).await?;
                    group_bytes = 0;
                }
            }
        }
        if !group.is_empty() {
            report.bytes_written += group_bytes as u64;
            self.append_replaces(partition, group).await?;
        }
        Ok(())
    }

    /// Reads batches from `*from` (moved to the log start if retention passed it); `None`
    /// when nothing is left below the high watermark.
    async fn read_for_cleaning(
        &self,
        partition: PartitionId,
        from: &mut Offset,
    ) -> Result<Option<Bytes>, StorageError> {
        loop {
            match self.read(partition, *from, READ_CHUNK_BYTES).await {
                Ok(bytes) if bytes.is_empty() => return Ok(None),
                Ok(bytes) => return Ok(Some(bytes)),
                Err(ReadError::OffsetOutOfRange { log_start_offset, .. })
                    if log_start_offset > *from =>
                {
                    *from = log_start_offset
                }
                Err(ReadError::Storage(e)) => return Err(e),
                Err(_) => return Ok(None),
            }
        }
    }
}

/// The payload of a `Replace` entry removing `[base, last]`.
fn removed_range(base: Offset, last: Offset) -> Bytes {
    let mut payload = Vec::with_capacity(crate::state::REMOVED_RANGE_BYTES);
    payload.extend_from_slice(&base.to_le_bytes());
    payload.extend_from_slice(&last.to_le_bytes());
    Bytes::from(payload)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn varlong(out: &mut Vec<u8>, value: i64) {
        let mut raw = ((value << 1) ^ (value >> 63)) as u64;
        while raw >= 0x80 {
            out.push((raw as u8 & 0x7f) | 0x80);
            raw >>= 7;
        }
        out.push(raw as u8);
    }

    /// A stored batch at `base` of (key, value) records; `attributes` and producer id as
    /// given.
    fn batch(base: Offset, records: &[(&str, Option<&str>)], attributes: i16, pid: i64) -> Bytes {
        let mut body = Vec::new();
        for (i, (key, value)) in records.iter().enumerate() {
            let mut r = vec![0u8];
            varlong(&mut r, 0);
            varlong(&mut r, i as i64);
            varlong(&mut r, key.len() as i64);
            r.extend_from_slice(key.as_bytes());
            match value {
                Some(v) => {
                    varlong(&mut r, v.len() as i64);
                    r.extend_from_slice(v.as_bytes());
                }
                None => varlong(&mut r, -1),
            }
            varlong(&mut r, 0);
            varlong(&mut body, r.len() as i64);
            body.extend_from_slice(&r);
        }
        let mut b = Vec::new();
        b.extend_from_slice(&base.to_be_bytes());
        b.extend_from_slice(&((49 + body.len()) as i32).to_be_bytes());
        b.extend_from_slice(&0i32.to_be_bytes());
        b.push(2);
        b.extend_from_slice(&[0; 4]);
        b.extend_from_slice(&attributes.to_be_bytes());
        b.extend_from_slice(&(records.len() as i32 - 1).to_be_bytes());
        b.extend_from_slice(&5i64.to_be_bytes());
        b.extend_from_slice(&5i64.to_be_bytes());
        b.extend_from_slice(&pid.to_be_bytes());
        b.extend_from_slice(&0i16.to_be_bytes());
        b.extend_from_slice(&0i32.to_be_bytes());
        b.extend_from_slice(&(records.len() as i32).to_be_bytes());
        b.extend_from_slice(&body);
        let crc = crc32c::crc32c(&b[CRC_START..]);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
        Bytes::from(b)
    }

    /// (offset, key, value) of the records of a batch whose lengths and CRC verify.
    fn records(batch: &[u8]) -> Vec<(Offset, String, Option<String>)> {
        let header = RecordBatchHeader::parse_unvalidated(batch).unwrap();
        assert_eq!(header.total_bytes(), batch.len());
        assert_eq!(crc32c::crc32c(&batch[CRC_START..]), header.crc, "CRC recomputed");
        let mut out = Vec::new();
        for_each_record(batch, |r| {
            out.push((
                header.base_offset + r.offset_delta,
                String::from_utf8(r.key.unwrap().to_vec()).unwrap(),
                r.value.map(|v| String::from_utf8(v.to_vec()).unwrap()),
            ))
        })
        .unwrap();
        out
    }

    fn map_of(batches: &[Bytes]) -> KeyMap {
        map_with_aborted(batches, &[])
    }

    /// The key map of `batches` given aborted transactions (producer id, first offset,
    /// marker offset).
    fn map_with_aborted(batches: &[Bytes], aborted: &[(i64, Offset, Offset)]) -> KeyMap {
        let aborted: Vec<AbortedTxnRange> = aborted
            .iter()
            .map(|&(producer_id, first_offset, marker_offset)| AbortedTxnRange {
                producer_id,
                first_offset,
                marker_offset,
            })
            .collect();
        let mut map = KeyMap::new(&aborted);
        for b in batches {
            map.add(b);
        }
        map.finish();
        map
    }

    /// Phase 2 of one batch out of its pass (not for markers: they depend on the batches
    /// before them).
    fn clean_batch(map: &KeyMap, batch: &[u8], tombstones_below: Offset) -> (Verdict, BatchStats) {
        Copier::new(map, tombstones_below).clean_batch(batch)
    }

    /// Phase 2 of a whole pass over `batches`, in order.
    fn verdicts(map: &KeyMap, batches: &[Bytes], tombstones_below: Offset) -> Vec<Verdict> {
        let mut copier = Copier::new(map, tombstones_below);
        batches.iter().map(|b| copier.clean_batch(b).0).collect()
    }

    /// A COMMIT (or ABORT) marker of `pid` at `base`.
    fn marker(base: Offset, pid: i64, commit: bool) -> Bytes {
        let key = if commit { "\0\0\0\x01" } else { "\0\0\0\0" };
        batch(base, &[(key, Some("\0\0\0\0\0\0"))], TRANSACTIONAL | CONTROL, pid)
    }

    #[test]
    fn a_batch_keeps_only_its_keys_latest_records_with_their_offsets() {
        let b0 = batch(0, &[("a", Some("1")), ("b", Some("1")), ("a", Some("2"))], 0, -1);
        let b3 = batch(3, &[("b", Some("2")), ("c", Some("1"))], 0, -1);
        let map = map_of(&[b0.clone(), b3.clone()]);
        let (verdict, stats) = clean_batch(&map, &b0, 0);
        let Verdict::Rewritten(copy) = verdict else { panic!("{verdict:?}") };
        assert_eq!(records(&copy), vec![(2, "a".into(), Some("2".into()))]);
        let header = RecordBatchHeader::parse_unvalidated(&copy).unwrap();
        assert_eq!((header.last_offset_delta, header.records_count), (2, 1), "range kept");
        assert_eq!(stats.records_removed, 2);
        assert_eq!(clean_batch(&map, &b3, 0).0, Verdict::Unchanged);
    }

    #[test]
    fn a_batch_of_dead_records_is_removed_and_tombstones_wait_for_their_horizon() {
        let b0 = batch(0, &[("a", Some("1"))], 0, -1);
        let b1 = batch(1, &[("a", None)], 0, -1);
        let b2 = batch(2, &[("z", Some("1"))], 0, -1);
        let map = map_of(&[b0.clone(), b1.clone(), b2]);
        assert_eq!(clean_batch(&map, &b0, 0).0, Verdict::Removed);
        // (tombstones removable below, verdict of the tombstone's batch)
        let table = [(0, false), (1, false), (2, true)];
        for (below, removed) in table {
            let (verdict, stats) = clean_batch(&map, &b1, below);
            assert_eq!(verdict == Verdict::Removed, removed, "below {below}");
            assert_eq!(stats.tombstones_waiting, u64::from(!removed && below <= 1));
        }
    }

    #[test]
    fn committed_transactional_records_are_cleaned_like_plain_ones() {
        let t0 = batch(0, &[("a", Some("t1")), ("c", Some("t1"))], TRANSACTIONAL, 7);
        let m2 = marker(2, 7, true);
        let t3 = batch(3, &[("a", Some("t2"))], TRANSACTIONAL, 7);
        let m4 = marker(4, 7, true);
        let p5 = batch(5, &[("d", Some("1"))], 0, -1);
        let all = [t0.clone(), m2, t3, m4, p5];
        let map = map_of(&all);
        let v = verdicts(&map, &all, 10);
        let Verdict::Rewritten(copy) = &v[0] else { panic!("{v:?}") };
        assert_eq!(records(copy), vec![(1, "c".into(), Some("t1".into()))]);
        let (old, new) =
            (RecordBatchHeader::parse_unvalidated(&t0), RecordBatchHeader::parse_unvalidated(copy));
        let (old, new) = (old.unwrap(), new.unwrap());
        assert_eq!(
            (new.attributes, new.producer_id, new.producer_epoch, new.base_sequence),
            (old.attributes, old.producer_id, old.producer_epoch, old.base_sequence),
            "a cleaned transactional batch keeps its attributes and producer fields"
        );
        assert_eq!(new.last_offset_delta, 1);
        // The marker's transaction still has data; t3 and m4 are producer 7's last batches.
        assert_eq!(
            &v[1..],
            &[Verdict::Unchanged, Verdict::Unchanged, Verdict::Unchanged, Verdict::Unchanged]
        );
    }

    #[test]
    fn aborted_batches_are_removed_whole_and_never_supersede_a_committed_value() {
        let p0 = batch(0, &[("a", Some("1"))], 0, -1);
        let t1 = batch(1, &[("a", Some("x")), ("b", None)], TRANSACTIONAL, 7);
        let m3 = marker(3, 7, false);
        let t4 = batch(4, &[("z", Some("1"))], TRANSACTIONAL, 7);
        let m5 = marker(5, 7, true);
        let all = [p0, t1, m3, t4, m5];
        let map = map_with_aborted(&all, &[(7, 1, 3)]);
        // (tombstone and marker horizon, verdicts)
        let table = [
            (0, [false, true, false, false, false]),
            (3, [false, true, false, false, false]),
            (4, [false, true, true, false, false]),
        ];
        for (below, removed) in table {
            let v = verdicts(&map, &all, below);
            let got: Vec<bool> = v.iter().map(|v| *v == Verdict::Removed).collect();
            assert_eq!(got, removed, "horizon {below}: {v:?}");
        }
        let (_, stats) = clean_batch(&map, &all[1], 0);
        assert_eq!((stats.aborted_batches_removed, stats.records_removed), (1, 2));
    }

    #[test]
    fn a_marker_stays_while_any_data_of_its_transaction_stays() {
        // Two transactions of producer 7 commit "a" twice; plain values of "a" follow.
        let t0 = batch(0, &[("a", Some("t1"))], TRANSACTIONAL, 7);
        let t1 = batch(1, &[("b", Some("t1"))], TRANSACTIONAL, 7);
        let m2 = marker(2, 7, true);
        let t3 = batch(3, &[("a", Some("t2"))], TRANSACTIONAL, 7);
        let m4 = marker(4, 7, true);
        let p5 = batch(5, &[("a", Some("p")), ("b", Some("p"))], 0, -1);
        let p7 = batch(7, &[("z", Some("p"))], 0, -1);
        let all = [t0, t1, m2, t3, m4, p5, p7];
        let v = verdicts(&map_of(&all), &all, 10);
        // t0 and t1 hold only dead values: removed, and so m2. t3 is producer 7's last data
        // batch (kept whole), so its marker m4 stays, and is producer 7's last marker too.
        let removed: Vec<bool> = v.iter().map(|v| *v == Verdict::Removed).collect();
        assert_eq!(removed, [true, true, true, false, false, false, false], "{v:?}");
        // Without the plain values, t1 holds the latest "b": m2 stays.
        let all = all[..5].to_vec();
        let v = verdicts(&map_of(&all), &all, 10);
        assert_eq!(v[2], Verdict::Unchanged, "m2's transaction still has data: {v:?}");
    }

    #[test]
    fn a_producers_last_batch_is_kept_whole_even_aborted_and_keeps_its_marker() {
        let t0 = batch(0, &[("a", Some("x"))], TRANSACTIONAL, 7);
        let m1 = marker(1, 7, false);
        let m2 = marker(2, 7, true); // a later transaction with no data here
        let p3 = batch(3, &[("a", None)], 0, -1);
        let p4 = batch(4, &[("z", Some("1"))], 0, -1);
        let all = [t0, m1, m2, p3, p4];
        let map = map_with_aborted(&all, &[(7, 0, 1)]);
        let v = verdicts(&map, &all, 10);
        assert_eq!(v[0], Verdict::Unchanged, "producer 7's last data batch: {v:?}");
        assert_eq!(v[1], Verdict::Unchanged, "its data stays, so its marker does");
        assert_eq!(v[2], Verdict::Unchanged, "producer 7's last marker");
        assert_eq!(v[3], Verdict::Unchanged, "a's tombstone is pinned by the kept batch");
    }

    #[test]
    fn an_idempotent_producers_last_batch_is_kept_whole() {
        let b0 = batch(0, &[("a", Some("1"))], 0, 9);
        let b1 = batch(1, &[("a", Some("2")), ("b", Some("1"))], 0, 9);
        let b3 = batch(3, &[("b", Some("2")), ("a", None), ("b", Some("3"))], 0, -1);
        let map = map_of(&[b0.clone(), b1.clone(), b3.clone()]);
        assert_eq!(clean_batch(&map, &b0, 10).0, Verdict::Removed);
        assert_eq!(clean_batch(&map, &b1, 10).0, Verdict::Unchanged, "producer 9's last");
        let Verdict::Rewritten(copy) = clean_batch(&map, &b3, 10).0 else { panic!() };
        // "a" has a record in the batch kept whole: its tombstone stays.
        assert_eq!(records(&copy), vec![(4, "a".into(), None), (5, "b".into(), Some("3".into()))]);
    }

    #[test]
    fn a_compressed_batch_below_the_clean_point_keeps_every_tombstone() {
        let mut compressed = batch(0, &[("a", Some("1"))], 0, -1).to_vec();
        compressed[22] |= 1; // gzip codec bits: the records cannot be read here
        let tomb = batch(1, &[("a", None)], 0, -1);
        let map = map_of(&[Bytes::from(compressed), tomb.clone()]);
        assert_eq!(clean_batch(&map, &tomb, 10).0, Verdict::Unchanged);
    }
}
