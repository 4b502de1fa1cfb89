//! `ShardLog`: the shard's one log. Appends, the flusher task (group commit), reads,
//! timestamp lookups, retention, checkpoints and the segment maintenance task.
//!
//! Runs on one shard (Rc/RefCell, never Send). Hot paths: `append_batches` (copies each
//! batch twice: into the write chunk and into the tail cache; one index entry per batch)
//! and `read` (cache hits are `Bytes` clones; one copy when several batches are joined).
//!
//! Durability contract:
//! 1. `Durable` resolves Ok only after a completed fdatasync covers the entry.
//! 2. A partition's high watermark moves only in the flusher, after that fdatasync; `read`
//!    never returns bytes at or past it. (`read_below_unflushed` may, from the tail cache
//!    only, for a caller whose appends are durable elsewhere: a replicated partition's
//!    committed entries, durable on a majority's raft logs before they are applied here.)
//! 3. A failed write or fdatasync poisons the log for good: every pending and later
//!    `Durable` resolves to `StorageError::Fatal`, appends are refused, nothing is retried.
//!    Reads keep working.
//! 4. No `RefCell` borrow is held across an `.await`.
//! 5. Appends made under `deferring_flush` (a replicated partition's applied copy, durable
//!    in the raft log already) do not start a flush: the next flush another append asks
//!    for carries them, or the flusher writes them `LogConfig::deferred_flush_after` after
//!    the first of them at the latest. Every other append is written as soon as the
//!    flusher is free (group commit); contracts 1-3 hold for both.

use std::cell::{Cell, RefCell};
use std::future::{poll_fn, Future};
use std::io;
use std::pin::Pin;
use std::rc::{Rc, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::{Bytes, BytesMut};

use crate::batch::{first_record_at_or_after, with_base_offset_and_epoch, RecordBatchHeader};
use crate::batcher::{Batcher, Flush};
use crate::checkpoint;
use crate::disk::{Disk, IoBuffer};
use crate::epochs::EpochEntry;
use crate::frame::{
    align_down, align_up, decode_header, verify_payload, Decoded, EntryHeader, EntryKind,
    ENTRY_HEADER_BYTES, PAGE_BYTES,
};
use crate::index::{BatchEntry, PartitionLog};
use crate::recovery::recover;
use crate::state::{CopyTurn, LiveInternal, Segment, SegmentState, State, Trims};
use crate::*;

/// Idle time after a flush before the maintenance task writes zeros.
const ZERO_FILL_AFTER_IDLE: std::time::Duration = std::time::Duration::from_millis(2);
/// DMA writes of one flush in flight at once (deeper queues measured slower here).
const WRITES_IN_FLIGHT: usize = 8;
/// Write chunks are at least this large (a lone append still writes one page).
pub(crate) const CHUNK_BYTES: usize = 1 << 20;
/// Batches of one read closer than this on disk are fetched with one read.
const COALESCE_GAP_BYTES: u64 = 256 << 10;
const MAX_READ_BYTES: u64 = 8 << 20;
/// Checkpoints kept on disk (the newest is used; the older one is a fallback).
const CHECKPOINTS_KEPT: usize = 2;
/// How much of a checkpoint's index copy one turn takes: as many partitions as a turn of
/// retention, fewer when they hold many batches (~40 bytes of copy each).
const CHECKPOINT_COPY_TURN: CopyTurn = CopyTurn { partitions: 256, batches: 16 << 10 };

/// Counters of one log (plain cells; read them with `ShardLog::probes`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogProbes {
    pub flushes: u64,
    /// Flushes done with blocking syscalls (`LogConfig::blocking_flush_max_bytes`).
    pub blocking_flushes: u64,
    pub flushed_bytes: u64,
    /// Time in DMA writes of flushes (all chunks of a flush in parallel).
    pub flush_write_us: u64,
    /// Time in fdatasync of flushes.
    pub flush_sync_us: u64,
    /// Time flushes waited for their segment to be prepared (the writer outran the spare).
    pub segment_wait_us: u64,
    pub zero_filled_bytes: u64,
    /// Time in the fdatasync(s) of each flush, in microseconds.
    pub fsync_duration_us: Histogram,
    /// Bytes each flush wrote and made durable (the group-commit batch, page-padded).
    pub fsync_bytes: Histogram,
    /// Entries each flush made durable.
    pub appends_per_fsync: Histogram,
    /// The stages of each flush (the storage part of a durable ack's latency budget):
    /// from the first append the flush carries to its DMA write submitted (waiting for the
    /// flush before it and for the flusher to run), the DMA write, then the fdatasync.
    pub flush_gather_us: Histogram,
    pub flush_write_duration_us: Histogram,
    pub flush_fdatasync_us: Histogram,
    /// Segment files deleted after retention freed them, and their bytes.
    pub retention_deleted_segments: u64,
    pub retention_deleted_bytes: u64,
    /// Log cleaner (compacted partitions): passes run, batch bytes they read, `Replace`
    /// bytes they wrote, records and tombstones they removed.
    pub cleaner_passes: u64,
    pub cleaner_read_bytes: u64,
    pub cleaner_written_bytes: u64,
    pub cleaner_removed_records: u64,
    pub cleaner_removed_tombstones: u64,
}

impl Default for LogProbes {
    fn default() -> Self {
        LogProbes {
            flushes: 0,
            blocking_flushes: 0,
            flushed_bytes: 0,
            flush_write_us: 0,
            flush_sync_us: 0,
            segment_wait_us: 0,
            zero_filled_bytes: 0,
            fsync_duration_us: Histogram::new(LATENCY_BOUNDS_US),
            fsync_bytes: Histogram::new(SIZE_BOUNDS_BYTES),
            appends_per_fsync: Histogram::new(COUNT_BOUNDS),
            flush_gather_us: Histogram::new(STAGE_BOUNDS_US),
            flush_write_duration_us: Histogram::new(STAGE_BOUNDS_US),
            flush_fdatasync_us: Histogram::new(STAGE_BOUNDS_US),
            retention_deleted_segments: 0,
            retention_deleted_bytes: 0,
            cleaner_passes: 0,
            cleaner_read_bytes: 0,
            cleaner_written_bytes: 0,
            cleaner_removed_records: 0,
            cleaner_removed_tombstones: 0,
        }
    }
}

/// Flush progress shared with `Durable` handles (which outlive nothing else).
#[derive(Default)]
pub(crate) struct Signal {
    probes: Cell<LogProbes>,
    durable: Cell<u64>,
    flushes: Cell<u64>,
    /// Batches appended under `deferring_flush` so far (readable before their flush).
    deferred_appends: Cell<u64>,
    fatal: RefCell<Option<String>>,
    waiters: RefCell<Vec<Waker>>,
}

impl Signal {
    fn wake_all(&self) {
        let waiters = std::mem::take(&mut *self.waiters.borrow_mut());
        for waker in waiters {
            waker.wake();
        }
    }

    async fn wait_until(&self, mut ready: impl FnMut(&Signal) -> bool) {
        poll_fn(|cx| {
            if ready(self) {
                Poll::Ready(())
            } else {
                self.waiters.borrow_mut().push(cx.waker().clone());
                Poll::Pending
            }
        })
        .await
    }

    fn fatal(&self) -> Option<String> {
        self.fatal.borrow().clone()
    }
}

/// Future resolved when an append is durable (covered by a completed fdatasync).
pub struct Durable {
    signal: Rc<Signal>,
    position: u64,
}

impl Durable {
    pub async fn wait(self) -> Result<(), StorageError> {
        let position = self.position;
        self.signal.wait_until(|s| s.durable.get() >= position || s.fatal.borrow().is_some()).await;
        if self.signal.durable.get() >= position {
            Ok(())
        } else {
            Err(StorageError::Fatal(self.signal.fatal().unwrap_or_default()))
        }
    }

    /// Whether the entry is already durable (no waiting).
    pub fn is_durable(&self) -> bool {
        self.signal.durable.get() >= self.position
    }
}

/// Result of queueing one or more batches.
pub struct Appended {
    pub base_offset: Offset,
    pub last_offset: Offset,
    pub durable: Durable,
}

pub(crate) struct Inner<D: Disk> {
    /// The maintenance task is doing IO (close waits for it: files must not be created
    /// after the log is closed).
    maintenance_busy: Cell<bool>,
    /// Inside `ShardLog::deferring_flush`: appends do not make the next flush due.
    deferring: Cell<bool>,
    disk: D,
    config: LogConfig,
    state: RefCell<State<D::Buffer>>,
    signal: Rc<Signal>,
}

impl<D: Disk> Drop for Inner<D> {
    fn drop(&mut self) {
        if self.signal.durable.get() < self.state.get_mut().batcher.position() {
            self.signal.fatal.borrow_mut().get_or_insert_with(|| "log dropped".into());
        }
        self.signal.wake_all();
        let state = self.state.get_mut();
        for waker in [state.flusher.take(), state.maintenance.take()].into_iter().flatten() {
            waker.wake();
        }
    }
}

/// Handle to a shard's log; cheap to clone (Rc inside), lives on one shard.
pub struct ShardLog<D: Disk = DmaDisk> {
    inner: Rc<Inner<D>>,
}

impl<D: Disk> Clone for ShardLog<D> {
    fn clone(&self) -> Self {
        ShardLog { inner: self.inner.clone() }
    }
}

/// One piece of a read: cached bytes, or a batch to fetch from a segment.
enum Piece {
    Cached(Bytes),
    Disk { segment_base: u64, batch: BatchEntry },
}

fn closed_error() -> StorageError {
    StorageError::Io { op: "append", source: io::Error::other("log is closed") }
}

fn invalid_config(why: &str) -> StorageError {
    StorageError::Io {
        op: "open log",
        source: io::Error::new(io::ErrorKind::InvalidInput, why.to_string()),
    }
}

impl<D: Disk> ShardLog<D> {
    /// Recovers the log and spawns its flusher on the current glommio executor.
    pub async fn open(
        disk: D,
        config: LogConfig,
    ) -> Result<(ShardLog<D>, Vec<InternalEntry>, RecoveryReport), StorageError> {
        if !config.segment_size_bytes.is_multiple_of(PAGE_BYTES)
            || config.segment_size_bytes < 4 * PAGE_BYTES
        {
            return Err(invalid_config("segment_size_bytes must be a multiple of 4096, >= 16 KiB"));
        }
        if config.max_batch_bytes as u64 + 2 * PAGE_BYTES > config.segment_size_bytes {
            return Err(invalid_config("max_batch_bytes must fit in a segment"));
        }
        let recovered = recover(&disk, &config).await?;
        let internal = recovered.core.internal_entries();
        let report = recovered.report.clone();
        let alloc_disk = disk.buffer_allocator();
        let batcher = Batcher::new(
            alloc_disk,
            CHUNK_BYTES,
            config.segment_size_bytes,
            recovered.end_segment,
            recovered.end,
            &recovered.prefix,
        );
        let mut state =
            recovered.core.into_state(batcher, recovered.segments, recovered.checkpoint_position);
        state.zero_fill = disk.lazy_zero_fill();
        let signal = Rc::new(Signal::default());
        signal.durable.set(recovered.end);
        let inner = Rc::new(Inner {
            maintenance_busy: Cell::new(false),
            deferring: Cell::new(false),
            disk,
            config,
            state: RefCell::new(state),
            signal,
        });
        glommio::spawn_local(run_flusher(Rc::downgrade(&inner))).detach();
        glommio::spawn_local(run_maintenance(Rc::downgrade(&inner))).detach();
        tracing::info!(?report, "shard log recovered");
        Ok((ShardLog { inner }, internal, report))
    }

    /// Makes `partition` known (offsets from 0) if it is not; the shard calls this for the
    /// partitions it owns, after `open` (partitions with data come back from recovery).
    pub fn ensure_partition(&self, partition: PartitionId) {
        let mut state = self.inner.state.borrow_mut();
        state.core.create_partition(partition, || PartitionLog::starting_at(0));
    }

    /// Forgets a partition (its data stays in the segments until they are deleted) and
    /// logs a DropPartition entry so that a replay forgets it too.
    pub fn drop_partition(&self, partition: PartitionId) {
        let mut state = self.inner.state.borrow_mut();
        if state.core.partitions.contains_key(&partition) {
            state.core.drop_partition(partition);
            let header = control_header(EntryKind::DropPartition, partition);
            // Best effort: if the log cannot take the entry, a replay without checkpoint
            // may bring the partition back; the upper layer's metadata drops it again.
            let logged = self.inner.check_writable(&state).is_ok()
                && self.inner.place_entries(&mut state, &[(header, &[])]).is_ok();
            state.note_trim(logged);
            if logged {
                self.inner.wake_flusher(&mut state);
            }
        }
    }

    /// Validated batches (from `split_batches`) appended all-or-nothing; offsets assigned.
    pub fn append_batches(
        &self,
        partition: PartitionId,
        batches: &[(RecordBatchHeader, Bytes)],
    ) -> Result<Appended, AppendError> {
        self.append_batches_in_epoch(partition, None, batches)
    }

    /// `append_batches`, each batch stamped with `partition_leader_epoch` if given (a
    /// leader's append: Kafka's `setPartitionLeaderEpoch`); the partition's leader-epoch
    /// cache learns a new epoch here (`epochs.rs`).
    pub fn append_batches_in_epoch(
        &self,
        partition: PartitionId,
        partition_leader_epoch: Option<i32>,
        batches: &[(RecordBatchHeader, Bytes)],
    ) -> Result<Appended, AppendError> {
        self.append(partition, Some(partition_leader_epoch), batches)
    }

    /// A replica's copy of its leader's batches (a partition snapshot's records), appended
    /// all-or-nothing at their own base offsets, bytes untouched: each must start at the
    /// partition's next offset (`NotAtEnd` otherwise; a gap is bridged by moving the log
    /// start first, `advance_log_start_past_end`).
    pub fn append_at_offsets(
        &self,
        partition: PartitionId,
        batches: &[(RecordBatchHeader, Bytes)],
    ) -> Result<Appended, AppendError> {
        self.append(partition, None, batches)
    }

    /// Appends `batches`, their offsets assigned and stamped with the epoch if given
    /// (`Some`), or kept as they are (`None`: `append_at_offsets`).
    fn append(
        &self,
        partition: PartitionId,
        assign: Option<Option<i32>>,
        batches: &[(RecordBatchHeader, Bytes)],
    ) -> Result<Appended, AppendError> {
        let inner = &*self.inner;
        let max = inner.config.max_batch_bytes;
        for (header, bytes) in batches {
            if bytes.len() > max {
                return Err(AppendError::TooLarge { size: bytes.len(), max });
            }
            if bytes.len() != header.total_bytes() {
                return Err(AppendError::InvalidBatch(BatchError::LengthMismatch {
                    declared: header.total_bytes(),
                    actual: bytes.len(),
                }));
            }
        }
        let mut state = inner.state.borrow_mut();
        let state = &mut *state;
        inner.check_writable(state)?;
        let next = state
            .core
            .partitions
            .get(&partition)
            .ok_or(AppendError::UnknownPartition(partition))?
            .next_offset;
        let mut offset = next;
        let mut stored: Vec<(EntryHeader, Bytes)> = Vec::with_capacity(batches.len());
        for (header, bytes) in batches {
            let bytes = match assign {
                Some(epoch) => with_base_offset_and_epoch(bytes, offset, epoch),
                None if header.base_offset != offset => {
                    let base_offset = header.base_offset;
                    return Err(AppendError::NotAtEnd { base_offset, next_offset: offset });
                }
                None => bytes.clone(),
            };
            offset += header.last_offset_delta as i64 + 1;
            stored.push((data_header(partition), bytes));
        }
        let entries: Vec<(EntryHeader, &[u8])> = stored.iter().map(|(h, b)| (*h, &b[..])).collect();
        let positions = inner.place_entries(state, &entries)?;
        for ((header, bytes), position) in stored.into_iter().zip(positions) {
            state.core.apply(&header, position, &bytes, Some(bytes.clone())).expect("valid batch");
        }
        if offset > next {
            state.batcher.note_high_watermark(partition, offset);
        }
        if inner.deferring.get() {
            let appended = &inner.signal.deferred_appends;
            appended.set(appended.get() + 1); // `deferring_flush` wakes the readers
        }
        inner.wake_flusher(state);
        Ok(Appended {
            base_offset: next,
            last_offset: offset - 1,
            durable: Durable { signal: inner.signal.clone(), position: state.batcher.position() },
        })
    }

    /// The largest payload `append_internal` takes: one entry fills at most a segment.
    pub fn max_internal_payload(&self) -> usize {
        (self.inner.config.segment_size_bytes - 2 * PAGE_BYTES) as usize - ENTRY_HEADER_BYTES
    }

    /// Appends one internal entry (committed offsets, producer state, metadata); a
    /// snapshot entry replaces every earlier entry of its stream at recovery.
    pub fn append_internal(
        &self,
        stream: InternalStream,
        snapshot: bool,
        payload: &[u8],
    ) -> Result<Durable, AppendError> {
        let inner = &*self.inner;
        let max = self.max_internal_payload();
        if payload.len() > max {
            return Err(AppendError::TooLarge { size: payload.len(), max });
        }
        let header = EntryHeader {
            kind: EntryKind::Internal,
            snapshot,
            stream: stream as u8,
            payload_len: 0,
            partition: PartitionId(0),
            position: 0,
        };
        let mut state = inner.state.borrow_mut();
        let state = &mut *state;
        inner.check_writable(state)?;
        let position = inner.place_entries(state, &[(header, payload)])?[0];
        let entry =
            LiveInternal { position, stream, snapshot, payload: Bytes::copy_from_slice(payload) };
        state.core.push_live_internal(entry, inner.signal.durable.get());
        inner.wake_flusher(state);
        Ok(Durable { signal: inner.signal.clone(), position: state.batcher.position() })
    }

    /// log_start_offset, high watermark, log end offset and size of a partition.
    pub fn partition_info(&self, partition: PartitionId) -> Option<PartitionInfo> {
        let state = self.inner.state.borrow();
        let log = state.core.partitions.get(&partition)?;
        Some(PartitionInfo {
            log_start_offset: log.log_start_offset,
            high_watermark: log.high_watermark,
            log_end_offset: log.next_offset,
            size_bytes: log.size_bytes,
        })
    }

    /// Where leader epoch `requested` ended in `partition` (OffsetForLeaderEpoch), as
    /// (epoch, end offset), `current_epoch` being its leader's epoch now
    /// (`LeaderEpochs::end_offset_for`); None for an unknown partition.
    pub fn end_offset_for_epoch(
        &self,
        partition: PartitionId,
        requested: i32,
        current_epoch: i32,
    ) -> Option<(i32, Offset)> {
        let state = self.inner.state.borrow();
        let log = state.core.partitions.get(&partition)?;
        Some(log.epochs.end_offset_for(requested, current_epoch, log.next_offset))
    }

    /// A partition's leader-epoch cache: (epoch, first offset) per epoch, in order.
    pub fn leader_epochs(&self, partition: PartitionId) -> Option<Vec<EpochEntry>> {
        let state = self.inner.state.borrow();
        Some(state.core.partitions.get(&partition)?.epochs.entries().to_vec())
    }

    /// The leader epoch of the batch holding `offset` in `partition` (ListOffsets), if a
    /// cached epoch covers it.
    pub fn epoch_of_offset(&self, partition: PartitionId, offset: Offset) -> Option<i32> {
        let state = self.inner.state.borrow();
        state.core.partitions.get(&partition)?.epochs.epoch_of(offset)
    }

    /// How many partitions the log holds.
    pub fn partition_count(&self) -> usize {
        self.inner.state.borrow().core.partitions.len()
    }

    /// Every partition's log end offset, in one pass over the log's partition map (the
    /// producer-state snapshot's `covered` list; docs/storage.md, "Checkpoints hold the
    /// executor").
    pub fn log_end_offsets(&self) -> Vec<(PartitionId, Offset)> {
        let state = self.inner.state.borrow();
        state.core.partitions.iter().map(|(&id, log)| (id, log.next_offset)).collect()
    }

    /// The largest record timestamp a consumer can read in `partition` (ListOffsets -3).
    pub fn max_timestamp(&self, partition: PartitionId) -> Option<i64> {
        self.inner.state.borrow().core.partitions.get(&partition)?.max_timestamp()
    }

    /// Whole batches from `from` up to the high watermark, at most `max_bytes` (but at
    /// least one batch if any is available, as Kafka KIP-74).
    pub async fn read(
        &self,
        partition: PartitionId,
        from: Offset,
        max_bytes: usize,
    ) -> Result<Bytes, ReadError> {
        self.read_below(partition, from, max_bytes, Offset::MAX).await
    }

    /// As [`ShardLog::read`], but only batches that start below `end` (a batch boundary,
    /// such as a last stable offset): read_committed fetches stop there.
    pub async fn read_below(
        &self,
        partition: PartitionId,
        from: Offset,
        max_bytes: usize,
        end: Offset,
    ) -> Result<Bytes, ReadError> {
        self.read_planned(self.plan_read(partition, from, max_bytes, end, false)?).await
    }

    /// As [`ShardLog::read_below`], but past the high watermark too, up to the log end:
    /// batches not durable here yet are served from the tail cache only, and the read
    /// stops at the first one the cache no longer holds (its bytes may not be written
    /// yet). Only for a partition whose appends are durable before they are appended
    /// here (a replicated partition's committed entries: durable on a majority, and
    /// appended again at the same offsets from the raft log after a crash); a partition
    /// whose own fdatasync makes its appends durable must use `read_below` (contract 2).
    pub async fn read_below_unflushed(
        &self,
        partition: PartitionId,
        from: Offset,
        max_bytes: usize,
        end: Offset,
    ) -> Result<Bytes, ReadError> {
        self.read_planned(self.plan_read(partition, from, max_bytes, end, true)?).await
    }

    async fn read_planned(&self, pieces: Vec<Piece>) -> Result<Bytes, ReadError> {
        let parts = self.inner.fetch(pieces).await.map_err(ReadError::Storage)?;
        Ok(match parts.len() {
            0 => Bytes::new(),
            1 => parts.into_iter().next().unwrap(),
            _ => {
                let mut out = BytesMut::with_capacity(parts.iter().map(|p| p.len()).sum());
                for part in parts {
                    out.extend_from_slice(&part);
                }
                out.freeze()
            }
        })
    }

    /// The pieces of a read; `unflushed`: up to the log end, batches past the high
    /// watermark from the cache only (`read_below_unflushed`).
    fn plan_read(
        &self,
        partition: PartitionId,
        from: Offset,
        max_bytes: usize,
        end: Offset,
        unflushed: bool,
    ) -> Result<Vec<Piece>, ReadError> {
        let state = self.inner.state.borrow();
        let log =
            state.core.partitions.get(&partition).ok_or(ReadError::UnknownPartition(partition))?;
        let readable = if unflushed { log.next_offset } else { log.high_watermark };
        if from < log.log_start_offset || from > readable {
            return Err(ReadError::OffsetOutOfRange {
                requested: from,
                log_start_offset: log.log_start_offset,
                high_watermark: readable,
            });
        }
        let mut pieces = Vec::new();
        let mut total = 0usize;
        let mut i = log.find_offset(from);
        while let Some(batch) = log.batches.get(i) {
            if batch.base_offset >= readable.min(end)
                || (total > 0 && total + batch.len as usize > max_bytes)
            {
                break;
            }
            let cached = log.cached_batch(i);
            if batch.base_offset >= log.high_watermark && cached.is_none() {
                break; // not durable here, and its bytes may not be written yet
            }
            total += batch.len as usize;
            pieces.push(match cached {
                Some(bytes) => Piece::Cached(bytes.clone()),
                None => Piece::Disk {
                    segment_base: state
                        .segment_of(batch.position)
                        .expect("indexed batch in a segment"),
                    batch: *batch,
                },
            });
            i += 1;
        }
        Ok(pieces)
    }

    /// Earliest offset whose record timestamp >= `timestamp_ms` (and that timestamp).
    pub async fn offset_for_timestamp(
        &self,
        partition: PartitionId,
        timestamp_ms: i64,
    ) -> Result<Option<(Offset, i64)>, ReadError> {
        let (piece, batch) = {
            let state = self.inner.state.borrow();
            let log = state
                .core
                .partitions
                .get(&partition)
                .ok_or(ReadError::UnknownPartition(partition))?;
            let Some(i) = log.find_timestamp(timestamp_ms) else { return Ok(None) };
            let batch = log.batches[i];
            let piece = match log.cached_batch(i) {
                Some(bytes) => Piece::Cached(bytes.clone()),
                None => Piece::Disk {
                    segment_base: state
                        .segment_of(batch.position)
                        .expect("indexed batch in a segment"),
                    batch,
                },
            };
            (piece, batch)
        };
        let bytes = self.inner.fetch(vec![piece]).await.map_err(ReadError::Storage)?.remove(0);
        let header = RecordBatchHeader::parse_unvalidated(&bytes)
            .map_err(|e| ReadError::Storage(StorageError::Corrupt(format!("{e:?}"))))?;
        // Compressed batches are not decompressed here (storage knows no codecs): the batch
        // base offset is returned, with the batch's max timestamp. LogAppendTime batches
        // stamp every record with max_timestamp, so their base offset is exact.
        if header.compression() != 0 || header.log_append_time() {
            return Ok(Some((batch.base_offset, batch.max_timestamp)));
        }
        Ok(Some(
            first_record_at_or_after(&bytes, timestamp_ms)
                .unwrap_or((batch.base_offset, batch.max_timestamp)),
        ))
    }

    /// Runs `appends` with their flush deferred (contract 5): what they append is written
    /// by the next flush another append makes due, or `deferred_flush_after` later. For
    /// appends nobody waits on to be durable soon, such as a replicated partition's applied
    /// copy (its entries are durable in the raft log, and apply again after a crash).
    /// Readers waiting for data (`more_to_read`) are woken when such appends added batches.
    pub fn deferring_flush<R>(&self, appends: impl FnOnce() -> R) -> R {
        let signal = &self.inner.signal;
        let before = signal.deferred_appends.get();
        let outer = self.inner.deferring.replace(true);
        let result = appends();
        self.inner.deferring.set(outer);
        if signal.deferred_appends.get() != before {
            signal.wake_all();
        }
        result
    }

    /// Makes what is gathered due now, deferred or not (contract 5): for a caller about to
    /// wait for every append so far to be durable.
    pub fn flush_deferred(&self) {
        let mut state = self.inner.state.borrow_mut();
        if state.batcher.has_gathered() {
            state.urgent = true;
            self.inner.wake_flusher(&mut state);
        }
    }

    /// Resolves after the next flush (high watermarks move) or the next batches appended
    /// under `deferring_flush` (a replicated partition's applied copy, which its readers
    /// read before its flush: `read_below_unflushed`): what a long-polling fetch waits for.
    /// Made before reading and awaited after, like `flushed`, it misses nothing that lands
    /// in between.
    pub fn more_to_read(&self) -> impl std::future::Future<Output = ()> + '_ {
        let signal = &self.inner.signal;
        let (flushes, deferred) = (signal.flushes.get(), signal.deferred_appends.get());
        signal.wait_until(move |s| {
            s.flushes.get() > flushes
                || s.deferred_appends.get() > deferred
                || s.fatal.borrow().is_some()
        })
    }

    /// Resolves after the next flush that completes after this call (high watermarks may
    /// have moved). Not an `async fn` on purpose: the flush count is read here, when the
    /// future is made, so a caller that makes it before reading and awaits it after the
    /// read cannot miss a flush that lands in between.
    pub fn flushed(&self) -> impl std::future::Future<Output = ()> + '_ {
        let seen = self.inner.signal.flushes.get();
        self.inner.signal.wait_until(move |s| s.flushes.get() > seen || s.fatal.borrow().is_some())
    }

    /// When the last flush completed (the log's opening, before the first flush).
    pub fn last_flush_done(&self) -> std::time::Instant {
        self.inner.state.borrow().last_flush_done
    }

    /// Moves log_start_offset forward by whole durable batches (time and size policy) and
    /// schedules the deletion of segments nobody needs any more. For one partition; a pass
    /// over many uses [`ShardLog::trim_by_retention`] per partition and
    /// [`ShardLog::release_segments`] once.
    pub fn apply_retention(&self, partition: PartitionId, policy: RetentionPolicy, now_ms: i64) {
        if self.trim_by_retention(partition, policy, now_ms) {
            self.release_segments();
        }
    }

    /// [`ShardLog::apply_retention`] without the segment release: whether the log start
    /// moved. Finding the segments nobody needs looks at every partition, so a pass that
    /// released after each moved partition was quadratic in the shard's partitions.
    pub fn trim_by_retention(
        &self,
        partition: PartitionId,
        policy: RetentionPolicy,
        now_ms: i64,
    ) -> bool {
        let inner = &*self.inner;
        let mut state = inner.state.borrow_mut();
        let state = &mut *state;
        let moved = state.core.trim(partition, |batch, size_bytes| {
            policy.retention_ms.is_some_and(|ms| batch.max_timestamp < now_ms.saturating_sub(ms))
                || policy.retention_bytes.is_some_and(|max| size_bytes > max)
        });
        let Some(log_start_offset) = moved else { return false };
        let payload = log_start_offset.to_le_bytes();
        let header = control_header(EntryKind::LogStart, partition);
        // Best effort: the checkpoint records log_start_offset as well.
        let logged = inner.check_writable(state).is_ok()
            && inner.place_entries(state, &[(header, &payload)]).is_ok();
        state.note_trim(logged);
        if logged {
            inner.wake_flusher(state);
        }
        true
    }

    /// Schedules the deletion of the segments no partition needs any more (state.rs
    /// invariant 8: not a pass over the partitions), once after a retention pass. They
    /// are removed once the trims that freed them are durable (state.rs invariant 2).
    pub fn release_segments(&self) {
        self.inner.release_segments(&mut self.inner.state.borrow_mut());
    }

    /// Moves a partition's log_start_offset forward to `offset` (Kafka's DeleteRecords),
    /// which may lie inside a batch: batches wholly below it leave the index, a batch that
    /// holds it stays (a fetch from the log start returns it whole, as Kafka does). Writes
    /// a LogStart entry even when nothing moves, so the returned `Durable` also covers a
    /// retention move still waiting for its flush: once it resolves, no crash can bring
    /// records below the returned log start back. Never moves the log start backward.
    pub fn advance_log_start(
        &self,
        partition: PartitionId,
        offset: Offset,
    ) -> Result<(Offset, Durable), LogStartError> {
        self.move_log_start(partition, offset, false)
    }

    /// `advance_log_start`; with `past_end`, `offset` may pass the high watermark when it
    /// is at the partition's end (`advance_log_start_past_end`).
    fn move_log_start(
        &self,
        partition: PartitionId,
        offset: Offset,
        past_end: bool,
    ) -> Result<(Offset, Durable), LogStartError> {
        let inner = &*self.inner;
        let mut state = inner.state.borrow_mut();
        let state = &mut *state;
        inner.check_writable(state).map_err(LogStartError::Append)?;
        let log = state
            .core
            .partitions
            .get(&partition)
            .ok_or(LogStartError::Append(AppendError::UnknownPartition(partition)))?;
        let all_durable = log.high_watermark == log.next_offset;
        if offset > log.high_watermark && !(past_end && all_durable) {
            return Err(LogStartError::AboveHighWatermark {
                requested: offset,
                high_watermark: log.high_watermark,
            });
        }
        let log_start_offset = offset.max(log.log_start_offset);
        let payload = log_start_offset.to_le_bytes();
        let header = control_header(EntryKind::LogStart, partition);
        let position =
            inner.place_entries(state, &[(header, &payload)]).map_err(LogStartError::Append)?[0];
        // The same code replay runs, so the live state and a recovered one agree.
        state.core.apply(&header, position, &payload, None).expect("a valid LogStart entry");
        state.note_trim(true);
        inner.wake_flusher(state);
        inner.release_segments(state);
        let durable = Durable { signal: inner.signal.clone(), position: state.batcher.position() };
        Ok((log_start_offset, durable))
    }

    /// A replica catching up from its leader's partition snapshot: moves the log start to
    /// `offset` even past the partition's end (the leader's log starts there), which then
    /// moves the end there too, as replay does with the same LogStart entry. Only when
    /// everything the partition holds is durable (its high watermark at its end), so no
    /// unflushed batch is left below the new start; otherwise `AboveHighWatermark`.
    pub fn advance_log_start_past_end(
        &self,
        partition: PartitionId,
        offset: Offset,
    ) -> Result<(Offset, Durable), LogStartError> {
        self.move_log_start(partition, offset, true)
    }

    /// The oldest segment (base log position) each partition keeps alive: a partition
    /// with long retention shows here as pinning an old segment.
    pub fn pinned_segments(&self) -> Vec<(PartitionId, u64)> {
        self.inner.state.borrow().pinned_segments()
    }

    /// Base positions of the segment files the log currently holds.
    pub fn segments(&self) -> Vec<u64> {
        self.inner.state.borrow().segments.keys().copied().collect()
    }

    /// Bytes appended and not yet handed to a flush: the shard bounds its in-flight
    /// produce requests with this (appends themselves never block).
    pub fn pending_bytes(&self) -> u64 {
        self.inner.state.borrow().batcher.gathered_bytes()
    }

    /// Size of each segment file (the broker's `--segment-bytes`).
    pub fn segment_size_bytes(&self) -> u64 {
        self.inner.config.segment_size_bytes
    }

    /// The log's counters so far.
    pub fn probes(&self) -> LogProbes {
        self.inner.signal.probes.get()
    }

    /// An internal stream's payload bytes the log holds in memory (since its latest
    /// durable snapshot, or the one before it until the next checkpoint or snapshot), which
    /// the next checkpoint carries. Walks the live internal entries: for a scrape.
    pub fn internal_stream_held_bytes(&self, stream: InternalStream) -> u64 {
        let state = self.inner.state.borrow();
        let live = state.core.internal.iter().filter(|e| e.stream == stream);
        live.map(|e| e.payload.len() as u64).sum()
    }

    /// An internal stream's payload bytes appended since its latest snapshot entry,
    /// durable or not: a writer's cue to write a snapshot (the `Raft` stream's,
    /// docs/replication.md). A counter, no walk.
    pub fn internal_bytes_since_snapshot(&self, stream: InternalStream) -> u64 {
        self.inner.state.borrow().core.since_snapshot.get(&stream).copied().unwrap_or(0)
    }

    /// Drops from memory the internal entries that durable snapshots of their streams
    /// superseded, as the next checkpoint or snapshot append would: for a writer whose
    /// snapshot replaced a large stream (the `Raft` stream's) and is now durable.
    pub fn forget_superseded_internal(&self) {
        let mut state = self.inner.state.borrow_mut();
        state.core.forget_superseded_internal(self.inner.signal.durable.get());
    }

    /// Why the log stopped (a failed write or fdatasync; see invariant 3), if it did.
    pub fn stopped_reason(&self) -> Option<String> {
        self.inner.signal.fatal()
    }

    /// Resolves, with the reason, once the log has stopped for good (a failed write or
    /// fdatasync, contract 3): the broker then exits rather than run a shard whose
    /// writes can no longer be made durable.
    pub async fn failure(&self) -> String {
        let signal = &self.inner.signal;
        signal.wait_until(|s| s.fatal.borrow().is_some()).await;
        signal.fatal().unwrap_or_default()
    }

    /// Durable log position (everything before it survived an fdatasync).
    pub fn durable_position(&self) -> u64 {
        self.inner.signal.durable.get()
    }

    /// The partitions the checkpoint copy in progress has not copied yet, in id order;
    /// `None` when no copy is in progress. For tests that change partitions between the
    /// copy's turns (not part of the storage API contract).
    #[doc(hidden)]
    pub fn checkpoint_copy_pending(&self) -> Option<Vec<PartitionId>> {
        self.inner.state.borrow().core.copy_pending()
    }

    /// Writes an index checkpoint covering everything appended before the call (none while
    /// the durable position is off a page boundary, as after a recovery that cut a torn
    /// entry, until the next flush: recovery would refuse it).
    pub async fn checkpoint(&self) -> Result<(), StorageError> {
        self.write_checkpoint(false).await
    }

    /// `clean`: written by `close` when nothing follows it in the log, so the next
    /// recovery may skip checking the rest of the segment (see recovery.rs).
    async fn write_checkpoint(&self, clean: bool) -> Result<(), StorageError> {
        let inner = &*self.inner;
        let target = inner.state.borrow().batcher.position();
        inner.signal.wait_until(|s| s.durable.get() >= target || s.fatal.borrow().is_some()).await;
        if let Some(fatal) = inner.signal.fatal() {
            return Err(StorageError::Fatal(fatal));
        }
        let Some((snapshot, trims)) = self.copy_in_turns(clean).await else { return Ok(()) };
        let position = snapshot.position;
        // The snapshot is owned data: sorting, encoding and the CRC run on a blocking
        // thread while the shard serves requests. What it describes is fixed at
        // `position`; appends meanwhile land after it and are replayed by a recovery.
        let bytes = glommio::executor()
            .spawn_blocking(move || {
                let started = std::time::Instant::now();
                let partitions = snapshot.partitions.len();
                let bytes = checkpoint::encode(snapshot);
                tracing::debug!(
                    position,
                    partitions,
                    bytes = bytes.len(),
                    encode_us = started.elapsed().as_micros() as u64,
                    "checkpoint encoded (blocking thread)"
                );
                bytes
            })
            .await;
        inner.disk.write_checkpoint(position, bytes).await?;
        let mut older = inner.disk.list_checkpoints().await?;
        older.sort_unstable();
        older.retain(|&p| p < position);
        let excess = older.len().saturating_sub(CHECKPOINTS_KEPT - 1);
        for p in &older[..excess] {
            inner.disk.remove_checkpoint(*p).await?;
        }
        // One more hold of the executor, timed with the copy's turns: asking for deletions
        // reads the oldest live position kept as partitions change (state.rs invariant 8).
        let started = std::time::Instant::now();
        let mut state = inner.state.borrow_mut();
        state.checkpoint_position = state.checkpoint_position.max(position);
        state.trims.checkpointed = state.trims.checkpointed.max(trims.unlogged);
        state.core.forget_superseded_internal(inner.signal.durable.get());
        inner.release_segments(&mut state);
        let release_us = started.elapsed().as_micros() as u64;
        tracing::debug!(position, release_us, "checkpoint written");
        Ok(())
    }

    /// The index copy of a checkpoint at the durable position, made in turns
    /// (`CHECKPOINT_COPY_TURN`) that give way to the shard's other tasks between them
    /// (state.rs invariant 7; docs/storage.md, "Checkpoints hold the executor"). `close`
    /// copies in one piece. `None`: nothing new since the last checkpoint. Also returns
    /// the trims as of the copy's start: it carries every one applied by then.
    async fn copy_in_turns(&self, clean: bool) -> Option<(checkpoint::CheckpointV2, Trims)> {
        let inner = &*self.inner;
        // One copy at a time. The broker never overlaps its checkpoints; a second caller
        // (a test) waits for the first.
        while inner.state.borrow().core.copy.is_some() {
            glommio::timer::sleep(Duration::from_millis(1)).await;
        }
        let started = std::time::Instant::now();
        let (position, trims) = {
            let mut state = inner.state.borrow_mut();
            let position = inner.signal.durable.get();
            if position <= state.checkpoint_position && !clean {
                return None;
            }
            // Off a page boundary only after a recovery that cut a torn entry mid-page,
            // until the next flush pads to one: recovery refuses a checkpoint there
            // (`load_checkpoint`), so one written now would release segments and older
            // checkpoints on the word of a checkpoint that is never read.
            if !position.is_multiple_of(PAGE_BYTES) {
                return None;
            }
            state.core.start_copy(position);
            (position, state.trims)
        };
        let start_us = started.elapsed().as_micros() as u64;
        let _abandon = AbandonCopyOnDrop(inner);
        // Timed because each turn holds the executor: in total, and the longest hold (the
        // start, a pass over the partition map, counts with the first turn): what a
        // request can wait behind.
        let (mut held, mut longest_hold, mut holds) = (Duration::ZERO, Duration::ZERO, 1);
        let mut hold_started = started;
        loop {
            let snapshot = {
                let mut state = inner.state.borrow_mut();
                let turn = if state.closing { CopyTurn::WHOLE } else { CHECKPOINT_COPY_TURN };
                let complete = state.core.copy_turn(turn);
                held += hold_started.elapsed();
                longest_hold = longest_hold.max(hold_started.elapsed());
                complete.then(|| {
                    let mut snapshot = state.core.finish_copy();
                    snapshot.clean = clean && state.closing && state.batcher.position() == position;
                    snapshot
                })
            };
            if let Some(snapshot) = snapshot {
                tracing::debug!(
                    position,
                    partitions = snapshot.partitions.len(),
                    snapshot_us = held.as_micros() as u64,
                    longest_hold_us = longest_hold.as_micros() as u64,
                    start_us,
                    holds,
                    copy_us = started.elapsed().as_micros() as u64,
                    "checkpoint state copied"
                );
                return Some((snapshot, trims));
            }
            // As `runtime::Turns` (shards): a timer lets the executor poll for I/O
            // between turns, which a yield within the task queue does not.
            glommio::timer::sleep(Duration::from_micros(1)).await;
            hold_started = std::time::Instant::now();
            holds += 1;
        }
    }

    /// Whether `close` has begun: appends are refused from then on, which a writer that
    /// would otherwise treat a refusal as fatal tells apart from a failure this way.
    pub fn is_closing(&self) -> bool {
        self.inner.state.borrow().closing
    }

    /// Flushes everything, writes a checkpoint and stops the log's tasks. Later appends
    /// are refused.
    pub async fn close(&self) -> Result<(), StorageError> {
        self.inner.state.borrow_mut().closing = true;
        let result = self.write_checkpoint(true).await;
        {
            let mut state = self.inner.state.borrow_mut();
            state.stopped = true;
            let state = &mut *state;
            self.inner.wake_flusher(state);
            self.inner.wake_maintenance(state);
        }
        let busy = &self.inner.maintenance_busy;
        self.inner.signal.wait_until(|_| !busy.get()).await;
        result
    }
}

/// Ends a checkpoint's index copy, if still in progress, when its future is dropped
/// between turns (a stopping shard): a copy left behind would go on copying partitions
/// for nobody and keep the next checkpoint waiting. After `finish_copy`, a no-op.
struct AbandonCopyOnDrop<'a, D: Disk>(&'a Inner<D>);

impl<D: Disk> Drop for AbandonCopyOnDrop<'_, D> {
    fn drop(&mut self) {
        // No borrow is held across an await (contract 4), so this one is free; `try_` so
        // that an unwinding test never panics twice.
        if let Ok(mut state) = self.0.state.try_borrow_mut() {
            state.core.abandon_copy();
        }
    }
}

/// What the log cleaner (`cleaner.rs`) needs of the log.
impl<D: Disk> ShardLog<D> {
    /// Adds a cleaning pass to the probes (also a pass cut short by an error: what it
    /// wrote before is applied).
    pub(crate) fn count_pass(&self, report: &crate::CleanReport) {
        let mut probes = self.inner.signal.probes.get();
        probes.cleaner_passes += 1;
        probes.cleaner_read_bytes += report.bytes_read;
        probes.cleaner_written_bytes += report.bytes_written;
        probes.cleaner_removed_records += report.records_removed;
        probes.cleaner_removed_tombstones += report.tombstones_removed;
        self.inner.signal.probes.set(probes);
    }

    pub(crate) fn with_partition<R>(
        &self,
        partition: PartitionId,
        f: impl FnOnce(&PartitionLog) -> R,
    ) -> Option<R> {
        self.inner.state.borrow().core.partitions.get(&partition).map(f)
    }

    /// Base offsets of the partition's batches below `clean_point` that lie in the oldest
    /// segment it keeps alive, unless that is the segment being written: a pass copies
    /// them forward even when it removes nothing from them (cleaner.rs invariant 4).
    pub(crate) fn oldest_segment_batches(
        &self,
        partition: PartitionId,
        clean_point: Offset,
    ) -> std::collections::HashSet<Offset> {
        let state = self.inner.state.borrow();
        let Some(log) = state.core.partitions.get(&partition) else { return Default::default() };
        let oldest = log.oldest_position().and_then(|p| state.segment_of(p));
        let Some(oldest) = oldest.filter(|&s| s != state.batcher.segment_base()) else {
            return Default::default();
        };
        log.batches
            .iter()
            .take_while(|b| b.base_offset < clean_point)
            .filter(|b| state.segment_of(b.position) == Some(oldest))
            .map(|b| b.base_offset)
            .collect()
    }

    /// Appends `Replace` entries (payloads in offset order) and waits until they are
    /// durable, hence applied (state.rs invariant 6).
    pub(crate) async fn append_replaces(
        &self,
        partition: PartitionId,
        payloads: Vec<Bytes>,
    ) -> Result<(), StorageError> {
        let inner = &*self.inner;
        let durable = {
            let mut state = inner.state.borrow_mut();
            let state = &mut *state;
            let refused = |e: AppendError| match e {
                AppendError::Storage(e) => e,
                other => StorageError::Corrupt(format!("cleaner append refused: {other:?}")),
            };
            inner.check_writable(state).map_err(refused)?;
            let header = control_header(EntryKind::Replace, partition);
            let entries: Vec<(EntryHeader, &[u8])> =
                payloads.iter().map(|p| (header, &p[..])).collect();
            let positions = inner.place_entries(state, &entries).map_err(refused)?;
            for (position, payload) in positions.into_iter().zip(payloads) {
                state.pending_replaces.push_back((position, header, payload));
            }
            inner.wake_flusher(state);
            Durable { signal: inner.signal.clone(), position: state.batcher.position() }
        };
        durable.wait().await
    }
}

pub(crate) fn data_header(partition: PartitionId) -> EntryHeader {
    EntryHeader {
        kind: EntryKind::RecordBatch,
        snapshot: false,
        stream: 0,
        payload_len: 0,
        partition,
        position: 0,
    }
}

fn control_header(kind: EntryKind, partition: PartitionId) -> EntryHeader {
    EntryHeader { kind, snapshot: false, stream: 0, payload_len: 0, partition, position: 0 }
}

impl<D: Disk> Inner<D> {
    fn check_writable(&self, state: &State<D::Buffer>) -> Result<(), AppendError> {
        if let Some(fatal) = self.signal.fatal() {
            return Err(AppendError::Storage(StorageError::Fatal(fatal)));
        }
        if state.closing {
            return Err(AppendError::Storage(closed_error()));
        }
        Ok(())
    }

    /// Places entries all-or-nothing: first checks every segment roll they need.
    fn place_entries(
        &self,
        state: &mut State<D::Buffer>,
        entries: &[(EntryHeader, &[u8])],
    ) -> Result<Vec<u64>, AppendError> {
        let sizes = entries.iter().map(|(_, p)| (ENTRY_HEADER_BYTES + p.len()) as u64);
        for base in state.batcher.plan_rolls(sizes) {
            let Some(segment) = state.segments.get_mut(&base) else { continue };
            let (kind, message) = match &segment.state {
                SegmentState::Failed(kind, message) | SegmentState::Retrying(kind, message) => {
                    (*kind, message.clone())
                }
                _ => continue,
            };
            // Refused, and the segment is prepared again (the next append that needs it
            // finds it Ready once space is back).
            segment.state = SegmentState::Retrying(kind, message.clone());
            self.wake_maintenance(state);
            let source = io::Error::new(kind, message);
            return Err(AppendError::Storage(StorageError::Io { op: "prepare segment", source }));
        }
        if !entries.is_empty() {
            state.gathering_since.get_or_insert_with(std::time::Instant::now);
            state.urgent |= !self.deferring.get(); // contract 5
        }
        let mut positions = Vec::with_capacity(entries.len());
        for (header, payload) in entries {
            if let Some(next) =
                state.batcher.needs_roll((ENTRY_HEADER_BYTES + payload.len()) as u64)
            {
                state.batcher.roll();
                let len = self.config.segment_size_bytes;
                state.segments.entry(next).or_insert(Segment::new(len, SegmentState::Wanted, 0));
                self.wake_maintenance(state);
            }
            positions.push(state.batcher.append(*header, payload));
        }
        Ok(positions)
    }

    /// Asks for the segments nobody needs to be deleted (once the trims that freed them
    /// are durable: state.rs invariant 2), and has maintenance remove those that are.
    fn release_segments(&self, state: &mut State<D::Buffer>) {
        state.request_deletions();
        if state.schedule_deletions() {
            self.wake_maintenance(state);
        }
    }

    fn wake_flusher(&self, state: &mut State<D::Buffer>) {
        if let Some(waker) = state.flusher.take() {
            waker.wake();
        }
    }

    fn wake_maintenance(&self, state: &mut State<D::Buffer>) {
        if let Some(waker) = state.maintenance.take() {
            waker.wake();
        }
    }

    fn poison(&self, error: &StorageError) {
        let message = format!("log write failed, the log is stopped: {error}");
        tracing::error!(%message);
        self.signal.fatal.borrow_mut().get_or_insert(message);
        self.signal.wake_all();
    }

    /// Writes one flush and fdatasyncs every segment it touched.
    async fn write_flush(
        &self,
        flush: &mut Flush<D::Buffer>,
        gathered_since: Option<std::time::Instant>,
    ) -> Result<(), StorageError> {
        let mut touched: Vec<u64> = flush.chunks.iter().map(|c| c.segment_base).collect();
        touched.dedup();
        let waiting = std::time::Instant::now();
        for &base in &touched {
            self.segment_ready(base).await?;
        }
        let mut probes = self.signal.probes.get();
        probes.segment_wait_us += waiting.elapsed().as_micros() as u64;
        self.signal.probes.set(probes);
        let (first, last) = (flush.chunks[0].start, flush.end);
        self.signal
            .wait_until(|_| {
                let zeroing = self.state.borrow().zeroing;
                zeroing.is_none_or(|(_, start, end)| end <= first || start >= last)
            })
            .await;
        let started = std::time::Instant::now();
        let blocking = flush.end - first <= self.config.blocking_flush_max_bytes;
        if blocking {
            for chunk in flush.chunks.drain(..) {
                let offset = chunk.offset_in_segment();
                self.disk.write_at_blocking(chunk.segment_base, offset, chunk.buf).await?;
            }
        } else {
            let writes: Vec<_> = flush
                .chunks
                .drain(..)
                .map(|chunk| {
                    let offset = chunk.offset_in_segment();
                    self.disk.write_at(chunk.segment_base, offset, chunk.buf)
                })
                .collect();
            join_all(writes, WRITES_IN_FLIGHT).await?;
        }
        let written = std::time::Instant::now();
        for base in touched {
            match blocking {
                true => self.disk.sync_blocking(base).await?,
                false => self.disk.sync(base).await?,
            }
        }
        let sync_us = written.elapsed().as_micros() as u64;
        let write_us = (written - started).as_micros() as u64;
        let mut probes = self.signal.probes.get();
        if let Some(since) = gathered_since {
            probes
                .flush_gather_us
                .record(started.saturating_duration_since(since).as_micros() as u64);
        }
        probes.flush_write_duration_us.record(write_us);
        probes.flush_fdatasync_us.record(sync_us);
        probes.flushes += 1;
        probes.blocking_flushes += blocking as u64;
        probes.flushed_bytes += flush.end - first;
        probes.flush_write_us += write_us;
        probes.flush_sync_us += sync_us;
        probes.fsync_duration_us.record(sync_us);
        probes.fsync_bytes.record(flush.end - first);
        probes.appends_per_fsync.record(flush.entries);
        self.signal.probes.set(probes);
        Ok(())
    }

    async fn segment_ready(&self, base: u64) -> Result<(), StorageError> {
        let mut outcome = None;
        self.signal
            .wait_until(|_| {
                let state = self.state.borrow();
                outcome = match state.segments.get(&base).map(|s| &s.state) {
                    Some(SegmentState::Ready) => Some(Ok(())),
                    Some(SegmentState::Failed(_, message)) => Some(Err(message.clone())),
                    None => Some(Err("segment vanished".into())),
                    _ => None,
                };
                outcome.is_some()
            })
            .await;
        outcome.unwrap().map_err(|m| {
            StorageError::Fatal(format!("segment {base} needed by queued appends: {m}"))
        })
    }

    /// Reads pieces, coalescing nearby disk batches; verifies each entry read from disk.
    async fn fetch(&self, pieces: Vec<Piece>) -> Result<Vec<Bytes>, StorageError> {
        let mut out = Vec::with_capacity(pieces.len());
        let mut i = 0;
        while i < pieces.len() {
            let (segment_base, first) = match &pieces[i] {
                Piece::Cached(bytes) => {
                    out.push(bytes.clone());
                    i += 1;
                    continue;
                }
                Piece::Disk { segment_base, batch } => (*segment_base, *batch),
            };
            let mut run = vec![first];
            while let Some(Piece::Disk { segment_base: s, batch }) = pieces.get(i + run.len()) {
                let last = run.last().unwrap();
                // A cleaned partition's batches are not in log order (index.rs invariant
                // 3): only a batch after the run's end joins the run.
                let last_end = last.position + last.len as u64;
                if *s != segment_base || batch.position < last_end {
                    break;
                }
                let gap = batch.position - last_end;
                let span = batch.position + batch.len as u64 - first.position;
                if gap > COALESCE_GAP_BYTES || span > MAX_READ_BYTES {
                    break;
                }
                run.push(*batch);
            }
            i += run.len();
            let start = align_down(first.position - ENTRY_HEADER_BYTES as u64);
            let last = run.last().unwrap();
            let end = align_up(last.position + last.len as u64);
            let bytes = self
                .disk
                .read_at(segment_base, start - segment_base, (end - start) as usize)
                .await?;
            for batch in run {
                out.push(verified_batch(&bytes, start, &batch)?);
            }
        }
        Ok(out)
    }
}

/// The batch bytes of `batch` inside `bytes` (read from log position `start`), verified.
fn verified_batch(bytes: &Bytes, start: u64, batch: &BatchEntry) -> Result<Bytes, StorageError> {
    let header_at = (batch.position - ENTRY_HEADER_BYTES as u64 - start) as usize;
    let payload_at = header_at + ENTRY_HEADER_BYTES;
    let payload_end = payload_at + batch.len as usize;
    let corrupt = || {
        StorageError::Corrupt(format!(
            "batch {} at log position {}",
            batch.base_offset, batch.position
        ))
    };
    if bytes.len() < payload_end {
        return Err(corrupt());
    }
    let header_bytes = &bytes[header_at..payload_at];
    let ok = matches!(decode_header(header_bytes, batch.position - ENTRY_HEADER_BYTES as u64), Decoded::Header(h) if h.payload_len == batch.len)
        && verify_payload(header_bytes, &bytes[payload_at..payload_end]);
    if !ok {
        return Err(corrupt());
    }
    Ok(bytes.slice(payload_at..payload_end))
}

/// Runs the futures with at most `limit` in flight; the first error wins.
async fn join_all<F: Future<Output = Result<(), StorageError>>>(
    futures: Vec<F>,
    limit: usize,
) -> Result<(), StorageError> {
    let mut waiting = futures.into_iter();
    let mut running: Vec<Pin<Box<F>>> = Vec::new();
    poll_fn(|cx: &mut Context<'_>| loop {
        while running.len() < limit {
            match waiting.next() {
                Some(future) => running.push(Box::pin(future)),
                None => break,
            }
        }
        if running.is_empty() {
            return Poll::Ready(Ok(()));
        }
        let before = running.len();
        let mut i = 0;
        while i < running.len() {
            match running[i].as_mut().poll(cx) {
                Poll::Ready(Ok(())) => {
                    running.swap_remove(i);
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => i += 1,
            }
        }
        if running.len() == before {
            return Poll::Pending;
        }
    })
    .await
}

/// Waits (holding only a weak reference) until `ready` or the log is gone/stopped.
async fn park<D: Disk>(
    weak: &Weak<Inner<D>>,
    flusher: bool,
    ready: fn(&State<D::Buffer>) -> bool,
) -> Option<Rc<Inner<D>>> {
    poll_fn(|cx| {
        let Some(inner) = weak.upgrade() else { return Poll::Ready(None) };
        let mut state = inner.state.borrow_mut();
        if state.stopped || inner.signal.fatal.borrow().is_some() {
            return Poll::Ready(None);
        }
        if ready(&state) {
            drop(state);
            return Poll::Ready(Some(inner));
        }
        let slot = if flusher { &mut state.flusher } else { &mut state.maintenance };
        *slot = Some(cx.waker().clone());
        Poll::Pending
    })
    .await
}

/// The group-commit loop: one write+fdatasync in flight; whatever gathered meanwhile goes
/// in the next one. A lone append is written as soon as the flusher runs, unless it was
/// deferred (contract 5): then the flusher waits for an append that is not, or for the
/// deferral's end.
async fn run_flusher<D: Disk>(weak: Weak<Inner<D>>) {
    while let Some(inner) = park(&weak, true, |s| s.batcher.has_gathered()).await {
        if let Some(left) = deferral_left(&inner) {
            drop(inner); // the log may be dropped meanwhile
            let urgent = async { park(&weak, true, |s| s.urgent).await.map(drop) };
            futures_lite::future::or(urgent, async {
                glommio::timer::sleep(left).await;
                None
            })
            .await;
            continue;
        }
        let (flush, gathered_since) = {
            let mut state = inner.state.borrow_mut();
            state.urgent = false;
            (state.batcher.take_flush(), state.gathering_since.take())
        };
        let Some(mut flush) = flush else { continue };
        if let Err(error) = inner.write_flush(&mut flush, gathered_since).await {
            inner.poison(&error);
            return;
        }
        let durable = {
            let mut state = inner.state.borrow_mut();
            let durable = state.batcher.flush_done();
            assert_eq!(durable, flush.end);
            state.apply_durable_replaces(durable);
            for (partition, high_watermark) in flush.high_watermarks {
                if let Some(log) = state.core.partitions.get_mut(&partition) {
                    log.high_watermark =
                        log.high_watermark.max(high_watermark.min(log.next_offset));
                }
            }
            durable
        };
        inner.state.borrow_mut().last_flush_done = std::time::Instant::now();
        inner.signal.durable.set(durable);
        inner.signal.flushes.set(inner.signal.flushes.get() + 1);
        inner.signal.wake_all();
        let mut state = inner.state.borrow_mut();
        // Deletions that waited for this flush's trims go ahead (state.rs invariant 2).
        if !state.batcher.has_gathered() || state.deletion_due() {
            inner.wake_maintenance(&mut state);
        }
    }
}

/// How much longer the gathered entries may wait, if they were all deferred and their
/// deferral has not run out (contract 5); None: flush now.
fn deferral_left<D: Disk>(inner: &Inner<D>) -> Option<Duration> {
    let state = inner.state.borrow();
    if state.urgent || state.stopped {
        return None;
    }
    let waited = state.gathering_since?.elapsed();
    Some(inner.config.deferred_flush_after.saturating_sub(waited)).filter(|left| !left.is_zero())
}

fn maintenance_due<B: IoBuffer>(state: &State<B>) -> bool {
    state.zero_work().is_some()
        || state.deletion_due()
        || !state.removals.is_empty()
        || state.segments.values().any(|s| s.state.needs_preparing())
        || state.segments.range(state.batcher.segment_base() + 1..).next().is_none()
}

/// Keeps one spare segment prepared (zero-filled) ahead of the writer, and removes
/// segments that retention freed.
async fn run_maintenance<D: Disk>(weak: Weak<Inner<D>>) {
    while let Some(inner) = park(&weak, false, maintenance_due).await {
        inner.maintenance_busy.set(true);
        maintain(&inner).await;
        inner.maintenance_busy.set(false);
        inner.signal.wake_all();
    }
}

/// One step of maintenance: remove a retired segment, prepare a wanted one, or zero-fill.
async fn maintain<D: Disk>(inner: &Inner<D>) {
    let removal = {
        let mut state = inner.state.borrow_mut();
        state.schedule_deletions();
        state.removals.pop()
    };
    if let Some((base, len)) = removal {
        match inner.disk.remove_segment(base).await {
            Ok(()) => {
                let mut probes = inner.signal.probes.get();
                probes.retention_deleted_segments += 1;
                probes.retention_deleted_bytes += len;
                inner.signal.probes.set(probes);
            }
            Err(error) => {
                tracing::warn!(segment = base, %error, "could not remove a retired segment")
            }
        }
        return;
    }
    let wanted = {
        let mut state = inner.state.borrow_mut();
        let current = state.batcher.segment_base();
        if state.segments.range(current + 1..).next().is_none() {
            let next = current + state.segments[&current].len;
            let len = inner.config.segment_size_bytes;
            state.segments.insert(next, Segment::new(len, SegmentState::Wanted, 0));
        }
        let found = state.segments.iter_mut().find(|(_, s)| s.state.needs_preparing());
        found.map(|(&base, segment)| {
            // A retried segment stays `Retrying` (refusing rolls) until it is Ready.
            if matches!(segment.state, SegmentState::Wanted) {
                segment.state = SegmentState::Preparing;
            }
            (base, segment.len)
        })
    };
    let Some((base, len)) = wanted else {
        // Zeros only after the log has been quiet for a moment: under load the flusher
        // writes into fallocate'd blocks at full bandwidth; when it idles, zeros make later
        // fdatasyncs flush data only (no extent conversion).
        let quiet = inner.state.borrow().last_flush_done.elapsed();
        if quiet < ZERO_FILL_AFTER_IDLE {
            glommio::timer::sleep(ZERO_FILL_AFTER_IDLE - quiet).await;
            return;
        }
        zero_fill_step(inner).await;
        return;
    };
    let result = inner.disk.create_segment(base, len).await;
    if let Some(segment) = inner.state.borrow_mut().segments.get_mut(&base) {
        segment.state = match result {
            Ok(()) => SegmentState::Ready,
            Err(error) => {
                tracing::warn!(segment = base, %error, "could not prepare a segment");
                match error {
                    StorageError::Io { source, .. } => {
                        SegmentState::Failed(source.kind(), source.to_string())
                    }
                    other => SegmentState::Failed(io::ErrorKind::Other, other.to_string()),
                }
            }
        };
    }
}

/// Writes zeros over the next idle range of a prepared segment (see `State::zero_work`).
async fn zero_fill_step<D: Disk>(inner: &Inner<D>) {
    let work = {
        let mut state = inner.state.borrow_mut();
        let work = state.zero_work();
        state.zeroing = work;
        work
    };
    let Some((base, start, end)) = work else { return };
    let result = inner.disk.zero_fill(base, start - base, end - start).await;
    let mut probes = inner.signal.probes.get();
    probes.zero_filled_bytes += end - start;
    inner.signal.probes.set(probes);
    let mut state = inner.state.borrow_mut();
    state.zeroing = None;
    if let Some(segment) = state.segments.get_mut(&base) {
        segment.zeroed_to = match result {
            Ok(()) => end - base,
            Err(error) => {
                tracing::warn!(segment = base, %error, "zero-fill failed; segment left as is");
                segment.len
            }
        };
    }
}
