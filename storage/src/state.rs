//! The in-memory state of a shard log and the rules that change it, without IO: applying
//! entries (live appends and replay share this code), the tail cache, retention, segment
//! bookkeeping and checkpoint snapshots. Runs on the shard; append hot path.
//!
//! Invariants:
//! 1. Every indexed batch lies in a segment listed in `segments`.
//! 2. A segment is removed only when no partition's live batch lies in it and it ends
//!    before the last durable checkpoint position (internal entries live on in it). The
//!    segment holding that position, also one ending exactly there, is kept, so recovery
//!    always finds a segment file holding the checkpoint position. "No live batch" counts
//!    only trims a crash cannot take back: a segment freed by a trim (`LogStart`,
//!    `DropPartition`) is removed once that trim's entry is durable, or, for a trim whose
//!    entry could not be appended, once a checkpoint carries it (`DeletionRequest`). A
//!    recovery replays the checkpoint's index without the lost trim otherwise, and its
//!    index points into a segment that is gone.
//! 3. `cache_bytes` is the sum of the lengths of all partitions' cached batches.
//! 4. `core.internal` holds, per stream, every entry since the stream's latest *durable*
//!    snapshot, in log order. A snapshot appended and not yet durable does not replace
//!    the entries before it: a checkpoint covers only the durable position, so it must
//!    still carry them (a checkpoint without them, followed by a power loss before the
//!    new snapshot's flush, lost the whole topic table: seeds 628 and 7931 of the broker
//!    power-loss test).
//! 5. A checkpoint carries at least one entry of every stream that has an entry before
//!    its position (asserted when it is made, the moment a crash would lose the stream).
//! 6. A `Replace` entry changes the index only once durable, and before the durable
//!    position that covers it is published (`apply_durable_replaces`): every index entry
//!    points at durable bytes, and a checkpoint at or past a `Replace` holds its effect.
//! 7. A checkpoint copied in turns (`CheckpointCopy`, at durable position `P`) is the copy
//!    one pass would have made when it started, and a recovery from it replays every
//!    entry at or after `P`. So each change made between turns must be in the copy not
//!    at all, only in the log after `P`: a partition not copied yet is copied first,
//!    before anything but an append changes it (`copy_if_pending`: `trim`, the `LogStart`
//!    arm of `apply`, `apply_replace`, `drop_partition`), and an append needs nothing, as
//!    it lies at or after `P`, which a copy leaves out (`copy_at`). A partition created
//!    after the start is not in the copy; one dropped is, and the replay of its
//!    `DropPartition` drops it again. The start is not a pass: pending means existing at
//!    the start with a `copied_generation` other than the copy's, and a partition is made
//!    only by `partition_or_create`, which gives it the current generation; the turns
//!    walk the ids in order (`ids`), resuming after the last one they saw.
//!    docs/storage.md, "Checkpoints hold the executor".
//! 8. `OldestPositions` counts every partition with a batch, in the page of its oldest
//!    batch, or lists it as stale (a cleaned partition changed since it was counted):
//!    every change that can move a partition's oldest batch (its first append, a trim, a
//!    `Replace`, a drop, a restore) updates it, so `oldest_live_page` equals one pass over
//!    every partition without making one (`schedule_deletions` after each checkpoint held
//!    the executor for a median 24 ms at 100,000 partitions).

use std::collections::{hash_map, BTreeMap, BTreeSet, HashMap, VecDeque};
use std::io;
use std::ops::Bound;

use bytes::Bytes;

use crate::batch::RecordBatchHeader;
use crate::batcher::Batcher;
use crate::checkpoint::{BatchV1, CheckpointV2, EpochV2, InternalV1, PartitionV2};
use crate::epochs::{EpochEntry, LeaderEpochs};
use crate::frame::{EntryHeader, EntryKind, ENTRY_HEADER_BYTES};
use crate::index::PartitionLog;
use crate::{InternalEntry, InternalStream, Offset, PartitionId, StorageError};

/// Life cycle of a segment file.
#[derive(Debug)]
pub(crate) enum SegmentState {
    /// Needed (the log will roll into it); the maintenance task will create it.
    Wanted,
    Preparing,
    Ready,
    /// Creation failed (e.g. ENOSPC): appends that need it are refused until retried.
    Failed(io::ErrorKind, String),
    /// Creation failed and is being tried again (an append needed it). Appends that need
    /// it are still refused, with the last failure: rolling into it would tie queued
    /// appends to a creation that may fail again (which would have to be fatal).
    Retrying(io::ErrorKind, String),
}

#[derive(Debug)]
pub(crate) struct Segment {
    pub len: u64,
    pub state: SegmentState,
    /// Bytes from the segment start known to have been written (with zeros or data) since
    /// creation; the rest may be fallocate'd unwritten extents (see `Disk::lazy_zero_fill`).
    pub zeroed_to: u64,
}

impl SegmentState {
    /// Whether the maintenance task has to create this segment.
    pub fn needs_preparing(&self) -> bool {
        matches!(self, SegmentState::Wanted | SegmentState::Retrying(..))
    }
}

impl Segment {
    pub fn new(len: u64, state: SegmentState, zeroed_to: u64) -> Segment {
        Segment { len, state, zeroed_to }
    }
}

/// A live internal entry (since the latest snapshot of its stream).
#[derive(Clone, Debug)]
pub(crate) struct LiveInternal {
    pub position: u64,
    pub stream: InternalStream,
    pub snapshot: bool,
    pub payload: Bytes,
}

pub(crate) struct State<B> {
    pub batcher: Batcher<B>,
    /// Partitions, internal entries and the tail cache.
    pub core: Replayed,
    pub segments: BTreeMap<u64, Segment>,
    /// Position covered by the latest durable checkpoint (0 = none).
    pub checkpoint_position: u64,
    /// Segments to delete: (base, length).
    pub removals: Vec<(u64, u64)>,
    pub closing: bool,
    pub stopped: bool,
    /// Whether the disk's new segments need background zero-filling.
    pub zero_fill: bool,
    /// Log range `[start, end)` the maintenance task is writing zeros to: the flusher
    /// does not write there until it is released.
    pub zeroing: Option<(u64, u64, u64)>,
    /// When the last flush completed (idle-time zero-fill waits for a quiet moment).
    pub last_flush_done: std::time::Instant,
    /// When the first entry the next flush will carry was appended.
    pub gathering_since: Option<std::time::Instant>,
    /// The next flush carries an entry appended outside `ShardLog::deferring_flush`:
    /// it is due now (log.rs contract 5).
    pub urgent: bool,
    pub flusher: Option<std::task::Waker>,
    pub maintenance: Option<std::task::Waker>,
    /// `Replace` entries appended and not yet durable, in log order: (position, header,
    /// payload). The flusher applies them once a completed fdatasync covers them.
    pub pending_replaces: VecDeque<(u64, EntryHeader, Bytes)>,
    /// The trims applied so far, as deletions must wait for them (invariant 2).
    pub trims: Trims,
    /// Segments found free and not yet removed: waiting for the trims that freed them.
    deletion: Option<DeletionRequest>,
    /// Deletions were asked for again while `deletion` waited.
    deletion_again: bool,
}

/// Where the trims applied in memory stand (invariant 2). A trim (retention, DeleteRecords,
/// a dropped partition) changes the index at once and appends its entry, durable with a
/// later flush; a crash before that flush recovers the index without it.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Trims {
    /// End of the latest trim entry appended: once durable, so is every logged trim.
    pub logged_to: u64,
    /// Trims whose entry could not be appended (the log is closing, or full), counted.
    /// A checkpoint whose copy started after them carries them.
    pub unlogged: u64,
    /// `unlogged` when the copy of the latest checkpoint written started.
    pub checkpointed: u64,
}

/// The segments nobody needs as of the moment deletions were asked for, removed once the
/// trims applied by then cannot be taken back by a crash (invariant 2). Waiting for later
/// trims too would let a steady stream of them (DeleteRecords from two clients, a retention
/// pass in turns) hold every deletion. Later changes never make the bound wrong: a batch
/// appended or copied by the cleaner lies past every segment that can be deleted.
#[derive(Clone, Copy, Debug)]
struct DeletionRequest {
    /// The oldest position any partition kept alive (`u64::MAX`: none).
    oldest_live: u64,
    trims: Trims,
}

/// A checkpoint's index copy, made in turns so that it never holds the shard's executor
/// for long (invariant 7): what is copied so far, and where the turns are.
pub(crate) struct CheckpointCopy {
    position: u64,
    /// `Replayed::copy_generation` of this copy: a partition whose `copied_generation`
    /// differs existed at the start and is not copied yet.
    generation: u32,
    /// The turns walk `Replayed::ids` in order; the next one starts after this id.
    walked_to: Option<PartitionId>,
    walked: bool,
    done: Vec<PartitionV2>,
    internal: Vec<InternalV1>,
}

/// How much one turn of a checkpoint copy may take (`Replayed::copy_turn`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct CopyTurn {
    pub partitions: usize,
    pub batches: usize,
}

impl CopyTurn {
    /// Everything in one turn (`close`, tests).
    pub const WHOLE: CopyTurn = CopyTurn { partitions: usize::MAX, batches: usize::MAX };
}

/// Where each partition's oldest live batch lies, kept up to date as partitions change, so
/// that finding the segments nobody needs does not look at every partition (invariant 8):
/// how many partitions have their oldest batch in each page. Keyed by page, not by
/// position: partitions written together share pages (fewer entries), and segment ends
/// are page-aligned, so the page bound frees exactly what the position would.
#[derive(Default)]
struct OldestPositions {
    /// Page start (a log position) -> partitions whose oldest batch starts in it.
    pages: BTreeMap<u64, u32>,
    /// Cleaned partitions to count again (`PartitionLog::oldest_stale`): their oldest
    /// position is a minimum over every batch (index.rs invariant 3), so it is found when
    /// deletions are asked for, once, not at each of a cleaning pass's `Replace` entries.
    stale: Vec<PartitionId>,
}

impl OldestPositions {
    /// Counts `log` with its oldest batch at `oldest` (none: not counted).
    fn count(&mut self, log: &mut PartitionLog, oldest: Option<u64>) {
        let page = oldest.map(crate::frame::align_down);
        if page == log.oldest_page {
            return;
        }
        self.forget(log);
        if let Some(page) = page {
            *self.pages.entry(page).or_insert(0) += 1;
        }
        log.oldest_page = page;
    }

    /// After a change that may have moved `log`'s oldest batch (a trim, a `Replace`).
    fn recount(&mut self, id: PartitionId, log: &mut PartitionLog) {
        if !log.replaced {
            let oldest = log.oldest_position(); // the front's
            return self.count(log, oldest);
        }
        if !std::mem::replace(&mut log.oldest_stale, true) {
            self.stale.push(id);
        }
    }

    /// Takes `log` out of the count (a dropped partition, or before counting it again).
    fn forget(&mut self, log: &PartitionLog) {
        let Some(page) = log.oldest_page else { return };
        let partitions = self.pages.get_mut(&page).expect("a counted page (invariant 8)");
        *partitions -= 1;
        if *partitions == 0 {
            self.pages.remove(&page);
        }
    }
}

/// Rebuilt state before the batcher exists (recovery).
pub(crate) struct Replayed {
    pub partitions: HashMap<PartitionId, PartitionLog>,
    pub internal: Vec<LiveInternal>,
    /// The checkpoint copy in progress (live only: a replay never has one).
    pub copy: Option<CheckpointCopy>,
    /// Where the partitions' oldest batches lie (invariant 8).
    oldest: OldestPositions,
    /// The ids of `partitions`, in order: a copy's turns resume their walk here across
    /// changes, which an iteration of the `HashMap` cannot (invariant 7).
    ids: BTreeSet<PartitionId>,
    /// Counts the checkpoint copies started (invariant 7).
    copy_generation: u32,
    /// Position of the first entry of each stream this log has held (from the checkpoint,
    /// replay or an append); never forgotten (invariant 5).
    first_internal: HashMap<InternalStream, u64>,
    /// Payload bytes of each stream's entries since its latest snapshot entry (durable or
    /// not), or since the log's first entry of it: when a writer should snapshot again.
    pub since_snapshot: HashMap<InternalStream, u64>,
    cache_fifo: VecDeque<(PartitionId, Offset)>,
    cache_bytes: usize,
    cache_limit: usize,
}

impl Replayed {
    pub fn new(cache_limit: usize) -> Replayed {
        Replayed {
            partitions: HashMap::new(),
            internal: Vec::new(),
            copy: None,
            oldest: OldestPositions::default(),
            ids: BTreeSet::new(),
            copy_generation: 0,
            first_internal: HashMap::new(),
            since_snapshot: HashMap::new(),
            cache_fifo: VecDeque::new(),
            cache_bytes: 0,
            cache_limit,
        }
    }

    pub fn from_checkpoint(checkpoint: &CheckpointV2, cache_limit: usize) -> Replayed {
        let mut replayed = Replayed::new(cache_limit);
        for p in &checkpoint.partitions {
            let mut log = PartitionLog::starting_at(p.log_start_offset);
            for b in &p.batches {
                // The first batch may start below the log start (DeleteRecords can move it
                // into a batch); later ones follow, with gaps where the cleaner removed
                // batches and positions out of order where it copied them.
                log.restore(crate::index::BatchEntry {
                    base_offset: b.base_offset,
                    last_offset: b.last_offset,
                    position: b.position,
                    len: b.len,
                    max_timestamp: b.max_timestamp,
                    running_max_timestamp: 0, // recomputed by `push`
                });
            }
            log.next_offset = log.next_offset.max(p.next_offset);
            log.high_watermark = log.next_offset;
            let epochs = p
                .epochs
                .iter()
                .map(|e| EpochEntry { epoch: e.epoch, start_offset: e.start_offset });
            log.epochs = LeaderEpochs::from_entries(epochs.collect());
            let oldest = log.oldest_position();
            replayed.oldest.count(&mut log, oldest);
            replayed.create_partition(PartitionId(p.id), || log);
        }
        for i in &checkpoint.internal {
            replayed.keep_internal(LiveInternal {
                position: i.position,
                // `load_checkpoint` refuses a checkpoint with a stream this broker lacks.
                stream: InternalStream::from_u8(i.stream).expect("a known internal stream"),
                snapshot: i.snapshot,
                payload: Bytes::from(i.payload.clone()),
            });
        }
        replayed
    }

    /// Applies one verified entry found at `position` (live append or replay).
    pub fn apply(
        &mut self,
        header: &EntryHeader,
        position: u64,
        payload: &[u8],
        cached: Option<Bytes>,
    ) -> Result<(), StorageError> {
        match header.kind {
            EntryKind::RecordBatch => {
                let batch = RecordBatchHeader::parse_unvalidated(payload)
                    .map_err(|e| StorageError::Corrupt(format!("batch at {position}: {e:?}")))?;
                let log = partition_or_create(
                    &mut self.partitions,
                    &mut self.ids,
                    self.copy_generation,
                    header.partition,
                    || PartitionLog::starting_at(batch.base_offset),
                );
                if batch.base_offset != log.next_offset {
                    return Err(StorageError::Corrupt(format!(
                        "partition {:?}: batch at {position} has base offset {} but {} was next",
                        header.partition, batch.base_offset, log.next_offset
                    )));
                }
                // Our CRC verified, so only a bug or a forged log gets here; refuse it
                // rather than let the index's assertions abort the shard at every start.
                let last = batch.base_offset.checked_add(batch.last_offset_delta as i64);
                let last = match last {
                    Some(last) if batch.last_offset_delta >= 0 => last,
                    _ => {
                        return Err(StorageError::Corrupt(format!(
                            "batch at {position}: last offset delta {}",
                            batch.last_offset_delta
                        )))
                    }
                };
                let at = position + ENTRY_HEADER_BYTES as u64;
                // The high watermark moves in the flusher (live) or after recovery's sync.
                log.push(batch.base_offset, last, at, payload.len() as u32, batch.max_timestamp);
                // Replay and live appends alike: recovery needs no pass of its own.
                log.epochs.note(batch.partition_leader_epoch, batch.base_offset);
                // Only a partition's first batch can be its oldest: later ones lie after it.
                if log.oldest_page.is_none() && !log.oldest_stale {
                    self.oldest.count(log, Some(at));
                }
                if let Some(bytes) = cached {
                    self.cache_push(header.partition, batch.base_offset, bytes);
                }
            }
            EntryKind::Internal => {
                let stream = InternalStream::from_u8(header.stream).ok_or_else(|| {
                    StorageError::Corrupt(format!("unknown internal stream at {position}"))
                })?;
                self.push_internal(LiveInternal {
                    position,
                    stream,
                    snapshot: header.snapshot,
                    payload: Bytes::copy_from_slice(payload),
                });
            }
            EntryKind::LogStart => {
                let offset = i64::from_le_bytes(payload.try_into().map_err(|_| {
                    StorageError::Corrupt(format!("bad LogStart entry at {position}"))
                })?);
                self.copy_if_pending(header.partition);
                if let Some(log) = self.partitions.get_mut(&header.partition) {
                    let uncached = log.advance_log_start(offset);
                    self.cache_bytes -= uncached;
                    log.epochs.trim_start(log.log_start_offset);
                    log.next_offset = log.next_offset.max(offset);
                    log.high_watermark = log.high_watermark.max(offset);
                    self.oldest.recount(header.partition, log);
                } else {
                    self.create_partition(header.partition, || PartitionLog::starting_at(offset));
                }
            }
            EntryKind::Replace => self.apply_replace(header, position, payload)?,
            EntryKind::DropPartition => self.drop_partition(header.partition),
            EntryKind::Pad => {}
        }
        Ok(())
    }

    /// A `Replace` entry (`frame::EntryKind::Replace`): the cleaned copy of one batch, or
    /// its removal. Applied only once durable (live: by the flusher after the fdatasync
    /// that covers it; replay: as found), so a range is always either its original batch
    /// or a complete copy. A range the index no longer holds exactly is left alone.
    fn apply_replace(
        &mut self,
        header: &EntryHeader,
        position: u64,
        payload: &[u8],
    ) -> Result<(), StorageError> {
        let corrupt = |why: &str| StorageError::Corrupt(format!("Replace at {position}: {why}"));
        let (base, last, copy) = if payload.len() == REMOVED_RANGE_BYTES {
            let base = i64::from_le_bytes(payload[..8].try_into().unwrap());
            let last = i64::from_le_bytes(payload[8..].try_into().unwrap());
            (base, last, None)
        } else {
            let batch = RecordBatchHeader::parse_unvalidated(payload)
                .map_err(|e| corrupt(&format!("{e:?}")))?;
            let last = batch.base_offset.checked_add(batch.last_offset_delta as i64);
            let last = last.filter(|_| batch.last_offset_delta >= 0).ok_or_else(|| {
                corrupt(&format!("last offset delta {}", batch.last_offset_delta))
            })?;
            let at = position + ENTRY_HEADER_BYTES as u64;
            (batch.base_offset, last, Some((at, payload.len() as u32)))
        };
        if base > last {
            return Err(corrupt(&format!("range {base}..={last}")));
        }
        self.copy_if_pending(header.partition);
        if let Some(log) = self.partitions.get_mut(&header.partition) {
            self.cache_bytes -= log.replace(base, last, copy).unwrap_or(0);
            self.oldest.recount(header.partition, log);
        }
        Ok(())
    }

    /// A replayed internal entry: everything replayed before it is durable once recovery
    /// ends (it fdatasyncs what it replayed), so a snapshot replaces its stream at once.
    pub fn push_internal(&mut self, entry: LiveInternal) {
        if entry.snapshot {
            self.internal.retain(|e| e.stream != entry.stream);
        }
        self.keep_internal(entry);
    }

    fn keep_internal(&mut self, entry: LiveInternal) {
        self.first_internal.entry(entry.stream).or_insert(entry.position);
        let since = self.since_snapshot.entry(entry.stream).or_insert(0);
        *since = match entry.snapshot {
            true => 0,
            false => *since + entry.payload.len() as u64,
        };
        self.internal.push(entry);
    }

    /// A live internal entry, appended and not yet durable. A snapshot replaces the older
    /// entries of its stream only once it is durable (invariant 4): until then a
    /// checkpoint at the durable position must still carry them. What durable snapshots
    /// superseded is dropped when a snapshot is appended and at each checkpoint, so an
    /// entry that is not a snapshot costs no scan (a `GroupOffsets` entry per commit).
    pub fn push_live_internal(&mut self, entry: LiveInternal, durable: u64) {
        let snapshot = entry.snapshot;
        self.keep_internal(entry);
        if snapshot {
            self.forget_superseded_internal(durable);
        }
    }

    /// Drops the entries of each stream that lie before its latest durable snapshot
    /// (entirely before `durable`: a flush ends at `durable`, no entry straddles it).
    pub fn forget_superseded_internal(&mut self, durable: u64) {
        let latest = latest_snapshots(&self.internal, durable);
        self.internal.retain(|e| !superseded(e, &latest));
    }

    pub fn drop_partition(&mut self, partition: PartitionId) {
        self.copy_if_pending(partition);
        if let Some(log) = self.partitions.remove(&partition) {
            self.ids.remove(&partition);
            self.cache_bytes -= log.cached.iter().map(|b| b.len()).sum::<usize>();
            self.oldest.forget(&log);
        }
    }

    pub fn cache_push(&mut self, partition: PartitionId, base_offset: Offset, bytes: Bytes) {
        if self.cache_limit == 0 {
            return;
        }
        let log = self.partitions.get_mut(&partition).expect("cached batch of a known partition");
        // Pushed right after its index entry, so the cache stays a suffix of the index.
        self.cache_bytes += bytes.len();
        crate::index::push_back_small(&mut log.cached, bytes);
        self.cache_fifo.push_back((partition, base_offset));
        while self.cache_bytes > self.cache_limit {
            let Some((p, base)) = self.cache_fifo.pop_front() else { break };
            let Some(log) = self.partitions.get_mut(&p) else { continue };
            let first_cached = log.batches.len() - log.cached.len();
            if log.batches.get(first_cached).is_some_and(|b| b.base_offset == base) {
                self.cache_bytes -= log.cached.pop_front().map_or(0, |b| b.len());
            }
        }
    }

    pub fn trim(
        &mut self,
        partition: PartitionId,
        drop: impl FnMut(&crate::index::BatchEntry, u64) -> bool,
    ) -> Option<Offset> {
        self.copy_if_pending(partition);
        let log = self.partitions.get_mut(&partition)?;
        let before = log.log_start_offset;
        let uncached = log.trim_front(drop);
        self.cache_bytes -= uncached;
        if log.log_start_offset == before {
            return None;
        }
        log.epochs.trim_start(log.log_start_offset);
        self.oldest.recount(partition, log);
        Some(log.log_start_offset)
    }

    /// The start of the page holding the oldest batch any partition keeps alive (invariant
    /// 8): a page-aligned segment end lies at or before it exactly when it lies at or
    /// before that batch. Counts the cleaned partitions changed since the last call again.
    pub fn oldest_live_page(&mut self) -> Option<u64> {
        for id in std::mem::take(&mut self.oldest.stale) {
            let Some(log) = self.partitions.get_mut(&id) else { continue };
            if std::mem::take(&mut log.oldest_stale) {
                let oldest = log.oldest_position();
                self.oldest.count(log, oldest);
            }
        }
        self.oldest.pages.keys().next().copied()
    }

    /// Starts a checkpoint copy at durable position `position` (one at a time): the
    /// internal entries now (they are few), every partition later, in turns
    /// (`copy_turn`) or before it changes (`copy_if_pending`; invariant 7).
    pub fn start_copy(&mut self, position: u64) {
        assert!(self.copy.is_none(), "one checkpoint copy at a time");
        let internal = self.internal_at(position);
        // Every partition now is pending: none has this generation yet. No pass over them.
        self.copy_generation = self.copy_generation.wrapping_add(1);
        self.copy = Some(CheckpointCopy {
            position,
            generation: self.copy_generation,
            walked_to: None,
            walked: false,
            done: Vec::with_capacity(self.partitions.len()),
            internal,
        });
    }

    /// Makes partition `id` with `make` unless it exists (live: `ShardLog::ensure_partition`;
    /// replay). A partition made while a copy runs is not pending (invariant 7).
    pub fn create_partition(
        &mut self,
        id: PartitionId,
        make: impl FnOnce() -> PartitionLog,
    ) -> &mut PartitionLog {
        partition_or_create(&mut self.partitions, &mut self.ids, self.copy_generation, id, make)
    }

    /// The partitions the copy in progress has not copied yet, in id order.
    pub fn copy_pending(&self) -> Option<Vec<PartitionId>> {
        let copy = self.copy.as_ref()?;
        let pending =
            self.partitions.iter().filter(|(_, log)| log.copied_generation != copy.generation);
        let mut pending: Vec<PartitionId> = pending.map(|(&id, _)| id).collect();
        pending.sort_unstable();
        Some(pending)
    }

    /// One turn of the copy in progress: the next partitions of its order (those a change
    /// has not copied already), up to `turn.partitions` of them or until `turn.batches`
    /// index entries are copied (a partition is never split; at least one per turn).
    /// Returns whether every partition is copied.
    pub fn copy_turn(&mut self, turn: CopyTurn) -> bool {
        let copy = self.copy.as_mut().expect("a checkpoint copy in progress");
        let from = copy.walked_to.map_or(Bound::Unbounded, Bound::Excluded);
        let mut walk = self.ids.range((from, Bound::Unbounded));
        let (mut partitions, mut batches) = (0, 0);
        while partitions < turn.partitions && batches < turn.batches {
            let Some(&id) = walk.next() else {
                copy.walked = true;
                break;
            };
            partitions += 1;
            copy.walked_to = Some(id);
            let log = self.partitions.get_mut(&id).expect("ids lists the partitions");
            if log.copied_generation != copy.generation {
                log.copied_generation = copy.generation;
                batches += log.batches.len();
                copy.done.push(copy_at(id, log, copy.position));
            }
        }
        // A turn that ends on the last id says so now, not one turn later.
        copy.walked |= walk.next().is_none();
        copy.walked
    }

    /// Copies `partition` now if the copy in progress has not yet: it is about to change
    /// by more than an append (invariant 7). One `Option` test when no copy runs.
    fn copy_if_pending(&mut self, partition: PartitionId) {
        let Some(copy) = self.copy.as_mut() else { return };
        if let Some(log) = self.partitions.get_mut(&partition) {
            if log.copied_generation != copy.generation {
                log.copied_generation = copy.generation;
                copy.done.push(copy_at(partition, log, copy.position));
            }
        }
    }

    /// The checkpoint once every turn is done (`copy_turn` returned true).
    pub fn finish_copy(&mut self) -> CheckpointV2 {
        let copy = self.copy.take().expect("a checkpoint copy in progress");
        assert!(copy.walked, "a checkpoint copy finished before its turns");
        CheckpointV2 {
            position: copy.position,
            partitions: copy.done,
            internal: copy.internal,
            clean: false,
        }
    }

    /// Gives up the copy in progress, if any (its checkpoint is not written).
    pub fn abandon_copy(&mut self) {
        self.copy = None;
    }

    /// The state as of durable position `position` (entries at or after it left out), in
    /// one piece, partitions in map order (`checkpoint::encode` sorts them).
    #[cfg(test)]
    pub fn snapshot(&mut self, position: u64) -> CheckpointV2 {
        self.start_copy(position);
        assert!(self.copy_turn(CopyTurn::WHOLE));
        self.finish_copy()
    }

    /// Per stream, what a recovery from `position` must start from: the entries since its
    /// latest snapshot before `position` (a later snapshot is not durable yet).
    fn internal_at(&self, position: u64) -> Vec<InternalV1> {
        let latest = latest_snapshots(&self.internal, position);
        let internal: Vec<InternalV1> = self
            .internal
            .iter()
            .filter(|e| e.position < position && !superseded(e, &latest))
            .map(|e| InternalV1 {
                position: e.position,
                stream: e.stream as u8,
                snapshot: e.snapshot,
                payload: e.payload.to_vec(),
            })
            .collect();
        for (&stream, &first) in &self.first_internal {
            assert!(
                first >= position || internal.iter().any(|e| e.stream == stream as u8),
                "invariant 5: a checkpoint at {position} carries no {stream:?} entry, though \
                 the log has held one since {first}: a recovery from it would lose the stream"
            );
        }
        internal
    }

    pub fn into_state<B>(
        self,
        batcher: Batcher<B>,
        segments: BTreeMap<u64, Segment>,
        checkpoint_position: u64,
    ) -> State<B> {
        State {
            batcher,
            core: self,
            segments,
            checkpoint_position,
            removals: Vec::new(),
            closing: false,
            stopped: false,
            zero_fill: false,
            zeroing: None,
            last_flush_done: std::time::Instant::now(),
            gathering_since: None,
            urgent: false,
            flusher: None,
            maintenance: None,
            pending_replaces: VecDeque::new(),
            trims: Trims::default(),
            deletion: None,
            deletion_again: false,
        }
    }

    pub fn internal_entries(&self) -> Vec<InternalEntry> {
        self.internal
            .iter()
            .map(|e| InternalEntry {
                stream: e.stream,
                snapshot: e.snapshot,
                payload: e.payload.clone(),
            })
            .collect()
    }
}

/// Payload of a `Replace` entry that removes a whole range: first and last offset, i64 LE.
/// (A cleaned batch is never this short: a batch header alone is 61 bytes.)
pub(crate) const REMOVED_RANGE_BYTES: usize = 16;

/// Per stream, the position of its latest snapshot entry before `position`.
fn latest_snapshots(internal: &[LiveInternal], position: u64) -> HashMap<InternalStream, u64> {
    internal
        .iter()
        .filter(|e| e.snapshot && e.position < position)
        .map(|e| (e.stream, e.position))
        .collect()
}

/// Whether `entry` lies before its stream's snapshot in `latest`.
fn superseded(entry: &LiveInternal, latest: &HashMap<InternalStream, u64>) -> bool {
    latest.get(&entry.stream).is_some_and(|&at| entry.position < at)
}

impl<B: crate::disk::IoBuffer> State<B> {
    /// The next range to zero-fill `(segment base, start, end)` in log positions: only when
    /// the flusher is idle, never at or behind the writer, starting before
    /// `ZERO_AHEAD_BYTES` ahead of it, and always a whole step (or up to the segment's end).
    pub fn zero_work(&self) -> Option<(u64, u64, u64)> {
        // Small steps a little ahead of the writer: an append that arrives during a step
        // waits for one small write at most.
        const ZERO_STEP_BYTES: u64 = 256 << 10;
        const WRITER_MARGIN_BYTES: u64 = 64 << 10;
        // Zeroing whole segments (256 MiB with the spare) took a step in nearly every idle
        // gap of a slow producer for minutes after start-up and after every roll, and each
        // step's write and fdatasync delayed the produce that arrived during it (the
        // latency budget showed DMA writes of ~360 µs mean at 200 msg/s). A bounded
        // lookahead is written once, then only refilled as the writer advances.
        const ZERO_AHEAD_BYTES: u64 = 32 << 20;
        // A step ends where a whole step ends, not at the horizon: ending at the horizon
        // made a slow producer's every flush pull the horizon one page further and cost a
        // 4 KiB zero write into unwritten blocks plus its own fdatasync (an inode write and a
        // cache flush), so each message paid two writes, two cache flushes and an inode
        // write (block trace in docs/storage.md, "Zero-fill lookahead").
        if !self.zero_fill
            || self.zeroing.is_some()
            || self.batcher.is_flushing()
            || self.batcher.has_gathered()
        {
            return None;
        }
        let current = self.batcher.segment_base();
        let writer = crate::frame::align_up(self.batcher.position()) + WRITER_MARGIN_BYTES;
        let horizon = writer + ZERO_AHEAD_BYTES;
        let work = |(&base, segment): (&u64, &Segment)| {
            if !matches!(segment.state, SegmentState::Ready) {
                return None;
            }
            let end = base + segment.len;
            let start = (base + segment.zeroed_to).max(writer);
            (start < end.min(horizon)).then(|| (base, start, (start + ZERO_STEP_BYTES).min(end)))
        };
        self.segments.range(current..).find_map(work)
    }

    /// Applies the `Replace` entries that `durable` now covers (the flusher, right after
    /// the fdatasync: before any checkpoint can cover them, so a checkpoint at or past a
    /// `Replace` always holds its effect).
    pub fn apply_durable_replaces(&mut self, durable: u64) {
        while self.pending_replaces.front().is_some_and(|(position, ..)| *position < durable) {
            let (position, header, payload) = self.pending_replaces.pop_front().unwrap();
            self.core
                .apply(&header, position, &payload, None)
                .expect("a Replace made by the cleaner");
        }
    }

    /// The segment base holding log position `position`.
    pub fn segment_of(&self, position: u64) -> Option<u64> {
        let (&base, segment) = self.segments.range(..=position).next_back()?;
        (position < base + segment.len).then_some(base)
    }

    /// The oldest segment each partition keeps alive.
    pub fn pinned_segments(&self) -> Vec<(PartitionId, u64)> {
        let mut pinned: Vec<(PartitionId, u64)> = self
            .core
            .partitions
            .iter()
            .filter_map(|(&p, log)| Some((p, self.segment_of(log.oldest_position()?)?)))
            .collect();
        pinned.sort_unstable();
        pinned
    }

    /// A trim was applied to the index; `logged`: its entry was appended (the last one).
    pub fn note_trim(&mut self, logged: bool) {
        match logged {
            true => self.trims.logged_to = self.batcher.position(),
            false => self.trims.unlogged += 1,
        }
    }

    /// Asks for the segments nobody needs now to be removed, once the trims that freed
    /// them are durable (`schedule_deletions`; invariant 2).
    pub fn request_deletions(&mut self) {
        if self.deletion.is_some() {
            self.deletion_again = true;
            return;
        }
        let oldest_live = self.core.oldest_live_page().unwrap_or(u64::MAX);
        self.deletion = Some(DeletionRequest { oldest_live, trims: self.trims });
    }

    /// Whether the deletion asked for can go ahead: the trim entries appended when it was
    /// asked for are durable, and a checkpoint carries the trims that have none.
    pub fn deletion_due(&self) -> bool {
        self.deletion.is_some_and(|request| {
            self.batcher.durable() >= request.trims.logged_to
                && self.trims.checkpointed >= request.trims.unlogged
        })
    }

    /// Moves deletable segments (invariant 2) from `segments` to `removals`, for the
    /// deletion asked for if it is due (and then for one asked for again since).
    pub fn schedule_deletions(&mut self) -> bool {
        let mut scheduled = false;
        while self.deletion_due() {
            let request = self.deletion.take().expect("a due deletion");
            scheduled |= self.remove_segments_before(request.oldest_live);
            if !std::mem::take(&mut self.deletion_again) {
                break;
            }
            self.request_deletions();
        }
        scheduled
    }

    /// Moves the segments that end at or before `oldest_live` to `removals`, except the
    /// current one and those a checkpoint does not cover.
    ///
    /// The segment holding the checkpoint position is kept, also when the position is
    /// exactly its end: recovery uses a checkpoint only if a segment file holds its
    /// position, and the next segment may not exist yet (the writer can roll into a
    /// segment before maintenance has created it, and maintenance removes before it
    /// prepares). Deleting it then made a crash lose the checkpoint and every internal
    /// entry that lived only in it (seed 1241 of the broker power-loss test).
    fn remove_segments_before(&mut self, oldest_live: u64) -> bool {
        let checkpoint = self.checkpoint_position;
        let current = self.batcher.segment_base();
        let deletable: Vec<(u64, u64)> = self
            .segments
            .iter()
            .filter(|(&base, s)| {
                let end = base + s.len;
                base < current && end < checkpoint && end <= oldest_live
            })
            .map(|(&base, s)| (base, s.len))
            .collect();
        for &(base, len) in &deletable {
            self.segments.remove(&base);
            self.removals.push((base, len));
        }
        !deletable.is_empty()
    }
}

/// `partitions[id]`, made with `make` (and listed in `ids`, copied by the copies up to
/// `generation`) if it does not exist: the one way a partition is created (invariant 7).
fn partition_or_create<'a>(
    partitions: &'a mut HashMap<PartitionId, PartitionLog>,
    ids: &mut BTreeSet<PartitionId>,
    generation: u32,
    id: PartitionId,
    make: impl FnOnce() -> PartitionLog,
) -> &'a mut PartitionLog {
    match partitions.entry(id) {
        hash_map::Entry::Occupied(entry) => entry.into_mut(),
        hash_map::Entry::Vacant(entry) => {
            ids.insert(id);
            let mut log = make();
            log.copied_generation = generation;
            entry.insert(log)
        }
    }
}

/// One partition as of durable position `position`: its batches before it, and as next
/// offset the base offset of its first batch at or after it (an append since), else its
/// live next offset. Right only while every batch before `position` comes before every
/// batch at or after it, which holds until a `Replace` past `position` is applied or a
/// trim drops batches past it: hence `copy_if_pending` (invariant 7).
fn copy_at(id: PartitionId, log: &PartitionLog, position: u64) -> PartitionV2 {
    let batches: Vec<BatchV1> = log
        .batches
        .iter()
        .take_while(|b| b.position < position)
        .map(|b| BatchV1 {
            base_offset: b.base_offset,
            last_offset: b.last_offset,
            position: b.position,
            len: b.len,
            max_timestamp: b.max_timestamp,
        })
        .collect();
    let next_offset = log
        .batches
        .iter()
        .find(|b| b.position >= position)
        .map_or(log.next_offset, |b| b.base_offset);
    let epochs = log.epochs.before(next_offset);
    let epochs = epochs.iter().map(|e| EpochV2 { epoch: e.epoch, start_offset: e.start_offset });
    PartitionV2 {
        id: id.0,
        log_start_offset: log.log_start_offset,
        next_offset,
        batches,
        epochs: epochs.collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batcher::Batcher;

    const SEGMENT: u64 = 128 << 20;

    /// A fresh log at position 0 with the current segment and its spare both Ready and
    /// zeroed up to `zeroed` (bytes from each segment's start).
    fn state(zeroed: [u64; 2]) -> State<Vec<u8>> {
        let alloc: Box<dyn Fn(usize) -> Vec<u8>> = Box::new(|len| vec![0; len]);
        let batcher = Batcher::new(alloc, 1 << 20, SEGMENT, (0, SEGMENT), 0, &[]);
        let segments = BTreeMap::from([
            (0, Segment::new(SEGMENT, SegmentState::Ready, zeroed[0])),
            (SEGMENT, Segment::new(SEGMENT, SegmentState::Ready, zeroed[1])),
        ]);
        let mut state = Replayed::new(0).into_state(batcher, segments, 0);
        state.zero_fill = true;
        state
    }

    #[test]
    fn zero_fill_stays_within_its_lookahead_of_the_writer() {
        // (zeroed so far in each segment, the step expected next)
        type Step = Option<(u64, u64, u64)>;
        let cases: [([u64; 2], Step); 4] = [
            // From the writer's margin on, 256 KiB steps.
            ([0, 0], Some((0, 64 << 10, 320 << 10))),
            ([1 << 20, 0], Some((0, 1 << 20, (1 << 20) + (256 << 10)))),
            // The last step starts before the horizon (writer + margin + 32 MiB) and is
            // whole: it ends past the horizon.
            ([32 << 20, 0], Some((0, 32 << 20, (32 << 20) + (256 << 10)))),
            // At the horizon nothing more is zeroed, not even the spare.
            ([(32 << 20) + (64 << 10), 0], None),
        ];
        for (zeroed, expected) in cases {
            assert_eq!(state(zeroed).zero_work(), expected, "zeroed {zeroed:?}");
        }
    }

    /// A slow producer: the writer advances a page at a time, and the zero-fill runs in
    /// every gap between flushes. The lookahead is refilled by whole steps, one per step's
    /// worth of writing, never by a page per flush.
    #[test]
    fn a_writer_advancing_page_by_page_gets_one_whole_zero_step_per_step_written() {
        let alloc = || -> Box<dyn Fn(usize) -> Vec<u8>> { Box::new(|len| vec![0; len]) };
        // Zeroing starts at the writer's margin (64 KiB ahead of it).
        let mut zeroed = 64 << 10;
        let mut steps = Vec::new();
        for page in 0..(4 << 20) / 4096 {
            let mut state = state([zeroed, 0]);
            state.batcher = Batcher::new(alloc(), 1 << 20, SEGMENT, (0, SEGMENT), page * 4096, &[]);
            while let Some((base, start, end)) = state.zero_work() {
                assert_eq!((base, start), (0, zeroed), "zeroing continues where it stopped");
                steps.push(end - start);
                zeroed = end;
                state.segments.get_mut(&0).unwrap().zeroed_to = zeroed;
            }
        }
        // The first fill reaches the horizon, then 4 MiB of writing needs 16 more steps.
        let first_fill = (32 << 20) / (256 << 10);
        let partial = steps.iter().filter(|&&bytes| bytes != 256 << 10).count();
        assert_eq!(partial, 0, "{partial} of {} steps were not whole", steps.len());
        assert_eq!(steps.len(), first_fill + 16);
    }

    #[test]
    fn near_a_segment_end_the_lookahead_continues_into_the_spare() {
        let mut state = state([SEGMENT, 0]);
        state.batcher = {
            let alloc: Box<dyn Fn(usize) -> Vec<u8>> = Box::new(|len| vec![0; len]);
            let position = SEGMENT - (1 << 20);
            Batcher::new(alloc, 1 << 20, SEGMENT, (0, SEGMENT), position, &[])
        };
        assert_eq!(state.zero_work(), Some((SEGMENT, SEGMENT, SEGMENT + (256 << 10))));
    }

    /// Which internal entries a checkpoint carries, and which the log keeps in memory, as
    /// live appends (`M` Metadata, `G` GroupOffsets; upper case = snapshot) become durable.
    #[test]
    fn a_checkpoint_carries_each_stream_since_its_latest_snapshot_before_its_position() {
        let entry = |position: u64, name: char| LiveInternal {
            position,
            stream: match name.to_ascii_lowercase() {
                'm' => InternalStream::Metadata,
                _ => InternalStream::GroupOffsets,
            },
            snapshot: name.is_ascii_uppercase(),
            payload: Bytes::new(),
        };
        let appended = [(0, 'M'), (4096, 'g'), (8192, 'M'), (12288, 'G'), (16384, 'g')];
        // (durable position when all were appended, checkpoint position, carried, kept)
        let cases: [(u64, u64, &[u64], &[u64]); 5] = [
            (4096, 4096, &[0], &[0, 4096, 8192, 12288, 16384]),
            // The newer table (8192) is not durable: the older one stays in the checkpoint.
            (8192, 8192, &[0, 4096], &[0, 4096, 8192, 12288, 16384]),
            (12288, 12288, &[4096, 8192], &[4096, 8192, 12288, 16384]),
            (16384, 16384, &[8192, 12288], &[8192, 12288, 16384]),
            (20480, 20480, &[8192, 12288, 16384], &[8192, 12288, 16384]),
        ];
        for (durable, checkpoint, carried, kept) in cases {
            let mut state = state([0, 0]);
            for (position, name) in appended {
                state.core.push_live_internal(entry(position, name), durable);
            }
            let snapshot = state.core.snapshot(checkpoint);
            let positions: Vec<u64> = snapshot.internal.iter().map(|e| e.position).collect();
            assert_eq!(positions, carried, "checkpoint at {checkpoint}");
            let in_memory: Vec<u64> = state.core.internal.iter().map(|e| e.position).collect();
            assert_eq!(in_memory, kept, "kept in memory, durable {durable}");
        }
    }

    /// The changes a checkpoint copy in turns meets between its turns (indices pick a
    /// partition or a batch modulo what exists).
    #[derive(Clone, Debug)]
    enum Change {
        /// An append, made durable (the high watermark follows).
        Append(usize),
        /// The cleaner's copy of a batch, or its removal, made durable.
        Replace {
            partition: usize,
            batch: usize,
            removed: bool,
        },
        /// Retention: batches wholly below a cut, up to the high watermark.
        Trim(usize, usize),
        /// DeleteRecords.
        LogStart(usize, usize),
        Drop(usize),
        /// A new partition, or one of the first ones again (after a drop).
        Create(usize),
        /// One turn of at most `1 + partitions % 5` partitions and `1 + batches % 7` batches.
        Turn(usize, usize),
    }

    fn change() -> impl proptest::strategy::Strategy<Value = Change> {
        use proptest::prelude::*;
        let i = || 0..64usize;
        prop_oneof![
            3 => i().prop_map(Change::Append),
            2 => (i(), i(), any::<bool>())
                .prop_map(|(partition, batch, removed)| Change::Replace { partition, batch, removed }),
            2 => (i(), i()).prop_map(|(p, cut)| Change::Trim(p, cut)),
            2 => (i(), i()).prop_map(|(p, cut)| Change::LogStart(p, cut)),
            1 => i().prop_map(Change::Drop),
            1 => i().prop_map(Change::Create),
            3 => (i(), i()).prop_map(|(p, b)| Change::Turn(p, b)),
        ]
    }

    /// Entries of the test's log, from `position` on (one per 4 KiB).
    struct Entries {
        position: u64,
    }

    impl Entries {
        fn apply(&mut self, core: &mut Replayed, kind: EntryKind, id: PartitionId, payload: &[u8]) {
            let header = EntryHeader {
                kind,
                snapshot: false,
                stream: 0,
                payload_len: payload.len() as u32,
                partition: id,
                position: self.position,
            };
            core.apply(&header, self.position, payload, None).unwrap();
            self.position += 4096;
        }

        /// A durable batch of `records` at the end of partition `id`.
        fn append(&mut self, core: &mut Replayed, id: PartitionId, records: usize) {
            let base = core.partitions.get(&id).map_or(0, |log| log.next_offset);
            let values = vec![&b"v"[..]; records];
            let batch = crate::batch::with_base_offset(
                &crate::batch::tests::record_batch(&values, base, 1),
                base,
            );
            self.apply(core, EntryKind::RecordBatch, id, &batch);
            let log = core.partitions.get_mut(&id).unwrap();
            log.high_watermark = log.next_offset;
        }

        /// The cleaner's copy of the batch `base..=last` of `id` (same offsets), or the
        /// removal of that range.
        fn replace(
            &mut self,
            core: &mut Replayed,
            id: PartitionId,
            range: (i64, i64),
            removed: bool,
        ) {
            let (base, last) = range;
            let payload = if removed {
                [base.to_le_bytes(), last.to_le_bytes()].concat()
            } else {
                let values = vec![&b"c"[..]; (last - base + 1) as usize];
                let copy = crate::batch::tests::record_batch(&values, base, 1);
                crate::batch::with_base_offset(&copy, base).to_vec()
            };
            self.apply(core, EntryKind::Replace, id, &payload);
        }
    }

    /// The partitions a copy starts from: 24, ids out of order, 1-4 durable batches of 1-3
    /// records each, every fifth with a batch already cleaned (positions out of offset
    /// order), every third with a batch appended and not durable (at or after the copy's
    /// position). Returns the state, the copy's position and the test's entries after it.
    fn partitions_for_copy() -> (Replayed, u64, Entries) {
        let ids: Vec<PartitionId> = (0..24u64).map(|i| PartitionId(i * 37 % 101)).collect();
        let mut core = Replayed::new(1 << 20);
        let mut entries = Entries { position: 0 };
        for round in 0..4 {
            for (k, &id) in ids.iter().enumerate() {
                if round <= k % 4 {
                    entries.append(&mut core, id, 1 + (k + round) % 3);
                }
            }
        }
        for &id in ids.iter().step_by(5) {
            let first = core.partitions[&id].batches[0];
            entries.replace(&mut core, id, (first.base_offset, first.last_offset), false);
        }
        let position = entries.position;
        for &id in ids.iter().step_by(3) {
            let high_watermark = core.partitions[&id].high_watermark;
            entries.append(&mut core, id, 2);
            core.partitions.get_mut(&id).unwrap().high_watermark = high_watermark;
        }
        (core, position, entries)
    }

    fn in_id_order(mut checkpoint: CheckpointV2) -> CheckpointV2 {
        checkpoint.partitions.sort_unstable_by_key(|p| p.id);
        checkpoint
    }

    impl Change {
        /// Applies the change; for a turn, returns whether the copy is complete.
        fn apply(&self, core: &mut Replayed, entries: &mut Entries) -> bool {
            let mut ids: Vec<PartitionId> = core.partitions.keys().copied().collect();
            ids.sort_unstable();
            let pick = |i: usize| ids[i % ids.len()];
            match *self {
                Change::Turn(partitions, batches) => {
                    let turn =
                        CopyTurn { partitions: 1 + partitions % 5, batches: 1 + batches % 7 };
                    return core.copy_turn(turn);
                }
                Change::Create(i) => {
                    let id = match i % 2 {
                        0 => PartitionId(i as u64 * 37 % 101),
                        _ => PartitionId(1_000 + i as u64),
                    };
                    core.create_partition(id, || PartitionLog::starting_at(0));
                }
                _ if ids.is_empty() => {}
                Change::Append(p) => entries.append(core, pick(p), 1 + p % 3),
                Change::Replace { partition, batch, removed } => {
                    let id = pick(partition);
                    let log = &core.partitions[&id];
                    if let Some(b) = log.batches.get(batch % log.batches.len().max(1)) {
                        if b.last_offset < log.high_watermark {
                            let range = (b.base_offset, b.last_offset);
                            entries.replace(core, id, range, removed);
                        }
                    }
                }
                Change::Trim(p, cut) => {
                    let id = pick(p);
                    let below = core.partitions[&id].log_start_offset + (cut % 4) as i64;
                    core.trim(id, |b, _| b.last_offset < below);
                }
                Change::LogStart(p, cut) => {
                    let id = pick(p);
                    let log = &core.partitions[&id];
                    let span = (log.high_watermark - log.log_start_offset + 1) as usize;
                    let offset = log.log_start_offset + (cut % span) as i64;
                    entries.apply(core, EntryKind::LogStart, id, &offset.to_le_bytes());
                }
                Change::Drop(p) => {
                    let id = pick(p);
                    entries.apply(core, EntryKind::DropPartition, id, &[]);
                }
            }
            false
        }
    }

    /// Invariant 2: a deletion waits for the trims applied when it was asked for, and only
    /// for those: one asked for again meanwhile goes ahead after the next flush, with the
    /// bound of its own moment.
    #[test]
    fn a_deletion_waits_for_its_own_trims_and_not_for_later_ones() {
        let (a, b) = (PartitionId(1), PartitionId(2));
        let mut core = Replayed::new(0);
        // A's batch in segment 0, B's in segment 1; the writer is in segment 2.
        Entries { position: 0 }.append(&mut core, a, 1);
        Entries { position: SEGMENT }.append(&mut core, b, 1);
        let alloc: Box<dyn Fn(usize) -> Vec<u8>> = Box::new(|len| vec![0; len]);
        let writer = (2 * SEGMENT, 3 * SEGMENT);
        let batcher = Batcher::new(alloc, 1 << 20, SEGMENT, writer, 2 * SEGMENT, &[]);
        let segments = (0..3).map(|k| (k * SEGMENT, Segment::new(SEGMENT, SegmentState::Ready, 0)));
        let mut state = core.into_state(batcher, segments.collect(), 2 * SEGMENT + 4096);
        let trim = |state: &mut State<Vec<u8>>, id: PartitionId| {
            state.core.trim(id, |_, _| true).expect("trimmed");
            let header = EntryHeader {
                kind: EntryKind::LogStart,
                snapshot: false,
                stream: 0,
                payload_len: 0,
                partition: id,
                position: 0,
            };
            state.batcher.append(header, &1i64.to_le_bytes());
            state.note_trim(true);
            state.request_deletions();
        };
        let flush = |state: &mut State<Vec<u8>>| {
            assert!(state.batcher.take_flush().is_some());
            state.batcher.flush_done();
            state.schedule_deletions();
            state.removals.iter().map(|&(base, _)| base).collect::<Vec<u64>>()
        };
        trim(&mut state, a);
        assert!(!state.deletion_due(), "A's LogStart is not durable");
        assert!(state.batcher.take_flush().is_some(), "A's LogStart is in flight");
        trim(&mut state, b); // appended during that flush
        state.batcher.flush_done();
        assert!(state.deletion_due(), "A's trim is durable, B's is not: A's request is due");
        state.schedule_deletions();
        let removed: Vec<u64> = state.removals.iter().map(|&(base, _)| base).collect();
        assert_eq!(removed, [0], "segment 0 only: B's trim may still be lost");
        assert!(!state.deletion_due(), "the request made again waits for B's LogStart");
        assert_eq!(flush(&mut state), [0, SEGMENT]);
    }

    /// What a checkpoint copy at `position` stands for: one pass over every partition.
    fn one_pass_copy(core: &Replayed, position: u64) -> CheckpointV2 {
        let partitions = core.partitions.iter().map(|(&id, log)| copy_at(id, log, position));
        CheckpointV2 {
            position,
            partitions: partitions.collect(),
            internal: core.internal_at(position),
            clean: false,
        }
    }

    /// What `oldest_live_page` stands for: one pass over every partition.
    fn oldest_live_page_in_one_pass(core: &Replayed) -> Option<u64> {
        let oldest = core.partitions.values().filter_map(|log| log.oldest_position()).min();
        oldest.map(crate::frame::align_down)
    }

    proptest::proptest! {
        /// Invariant 8: whatever changes the partitions get (appends, the cleaner's copies
        /// and removals, retention, DeleteRecords, drops, new partitions, a dropped one
        /// created again, a restart from a checkpoint), the oldest live page kept as they
        /// change is the one a pass over every partition finds.
        #[test]
        fn the_oldest_live_page_kept_as_partitions_change_equals_one_pass(
            changes in proptest::collection::vec(change(), 0..160)
        ) {
            let (mut core, _, mut entries) = partitions_for_copy();
            proptest::prop_assert_eq!(core.oldest_live_page(), oldest_live_page_in_one_pass(&core));
            for change in &changes {
                if let Change::Turn(..) = change {
                    // A restart: the log as a checkpoint of everything so far gives it back.
                    let checkpoint = core.snapshot(entries.position);
                    core = Replayed::from_checkpoint(&checkpoint, 1 << 20);
                } else {
                    change.apply(&mut core, &mut entries);
                }
                let expected = oldest_live_page_in_one_pass(&core);
                proptest::prop_assert_eq!(core.oldest_live_page(), expected, "after {:?}", change);
            }
        }

        /// Invariant 7: whatever changes the partitions get between its turns (appends,
        /// the cleaner's copies and removals made durable, retention, DeleteRecords, drops,
        /// new partitions, a dropped one created again), a copy in turns assembles the
        /// checkpoint one pass over the same state made at its start.
        #[test]
        fn a_copy_in_turns_equals_one_pass_at_its_start(
            changes in proptest::collection::vec(change(), 0..160)
        ) {
            let (mut core, mut position, mut entries) = partitions_for_copy();
            // Two copies, the second over what the changes made of the partitions.
            for _ in 0..2 {
                let expected = in_id_order(one_pass_copy(&core, position));
                core.start_copy(position);
                let mut complete = false;
                for change in &changes {
                    complete = change.apply(&mut core, &mut entries);
                    if complete {
                        break;
                    }
                }
                let small = CopyTurn { partitions: 3, batches: 4 };
                while !complete {
                    complete = core.copy_turn(small);
                }
                proptest::prop_assert_eq!(in_id_order(core.finish_copy()), expected);
                position = entries.position;
            }
        }
    }
}
