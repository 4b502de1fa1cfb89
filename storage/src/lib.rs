//! shardlog-storage: one durable, O_DIRECT, group-committed log per shard.
//!
//! CONTRACT FILE (public API): the signatures below are what `shards/` and `src/` program
//! against. Change a signature only together with its callers.
//!
//! Runs on one shard (thread-per-core): `ShardLog` is `Rc`-based and never crosses cores.
//! One log per shard holds the record batches of all its partitions plus internal entries,
//! in fixed-size preallocated segment files written with O_DIRECT, group-committed by one
//! flusher task (one write + fdatasync in flight; what gathers meanwhile goes next).
//!
//! Durability contract: an append's `Durable` resolves Ok only after a completed fdatasync
//! covers it; a partition's high watermark (what `read` serves up to) moves only then; a
//! failed write or fdatasync stops the log for good (`StorageError::Fatal`), never retried.
//! On-disk format (entry framing, version byte 1): `frame.rs` and docs/storage.md.
//!
//! Modules: `batch` (Kafka v2 batch validation), `cleaner` (the log cleaner of compacted
//! partitions), `epochs` (a partition's leader-epoch cache, KIP-320), `frame` (entry framing), `batcher` (the
//! group-commit state machine), `index` (per-partition index), `state` (in-memory state,
//! retention, checkpoint snapshots), `recovery`, `checkpoint` (rkyv file), `disk` (Disk
//! trait + DmaDisk), `sim` (SimDisk), `any` (AnyDisk: either, what the shards hold), `log`
//! (ShardLog, flusher and maintenance tasks), `bench_support` (hidden handles on the index
//! and the batcher, for criterion benches), `fuzzing` (fuzz target bodies, see
//! fuzz/README.md).

use std::fmt;

use bytes::Bytes;

/// A Kafka offset inside one partition.
pub type Offset = i64;

/// Opaque partition identity in the log: the upper layer packs (topic number, partition index).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PartitionId(pub u64);

impl PartitionId {
    pub fn new(topic_number: u32, partition_index: u32) -> Self {
        PartitionId(((topic_number as u64) << 32) | partition_index as u64)
    }
    pub fn topic_number(self) -> u32 {
        (self.0 >> 32) as u32
    }
    pub fn partition_index(self) -> u32 {
        self.0 as u32
    }
}

/// Streams of internal entries carried by the same log (one fdatasync covers them too).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum InternalStream {
    /// The controller's topic table (shard 0).
    Metadata = 1,
    /// Committed consumer-group offsets (coordinator shard).
    GroupOffsets = 2,
    /// Idempotent-producer state.
    ProducerState = 3,
    /// Transaction coordinator state, pending transactional offsets and the transaction
    /// state of partitions (shards' `txn` module).
    Transactions = 4,
    /// Raft groups' write requests (hard state, entries, snapshot markers), one group's
    /// request per entry (shards' `replication::persist`). A broker that predates it
    /// refuses to open a log holding one (docs/storage.md, "Format").
    Raft = 5,
}

/// One internal entry handed back by recovery, in log order.
#[derive(Clone, Debug)]
pub struct InternalEntry {
    pub stream: InternalStream,
    /// A snapshot entry replaces every earlier entry of its stream.
    pub snapshot: bool,
    pub payload: Bytes,
}

/// Tunables of one shard log.
#[derive(Clone, Debug)]
pub struct LogConfig {
    pub segment_size_bytes: u64,
    pub tail_cache_bytes: usize,
    pub max_batch_bytes: usize,
    /// A flush of at most this many bytes is written and fdatasync'd with blocking
    /// syscalls on the shard's thread instead of through io_uring (`Disk::sync_blocking`):
    /// fewer thread hand-offs and wake-ups for the small flushes of a lightly loaded
    /// shard, at the price of the shard doing nothing else meanwhile. 0: never.
    pub blocking_flush_max_bytes: u64,
    /// How long appends made under `ShardLog::deferring_flush` may wait for an append
    /// that needs a flush, whose flush then carries them too, before the flusher writes
    /// them on their own (contract 5 of `log.rs`).
    pub deferred_flush_after: std::time::Duration,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_size_bytes: 128 << 20,
            tail_cache_bytes: 64 << 20,
            max_batch_bytes: 1 << 20,
            blocking_flush_max_bytes: 0,
            deferred_flush_after: std::time::Duration::from_millis(5),
        }
    }
}

/// What recovery found and did, for the start-up log line.
#[derive(Clone, Debug, Default)]
pub struct RecoveryReport {
    pub checkpoint_position: Option<u64>,
    pub replayed_entries: u64,
    pub replayed_bytes: u64,
    pub truncated_at: Option<u64>,
    pub dropped_bytes: u64,
}

/// Per-partition figures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartitionInfo {
    pub log_start_offset: Offset,
    /// Last durable offset + 1: what consumers may read up to.
    pub high_watermark: Offset,
    /// Next offset to assign (>= high_watermark).
    pub log_end_offset: Offset,
    pub size_bytes: u64,
}

/// Retention of one partition.
#[derive(Clone, Copy, Debug, Default)]
pub struct RetentionPolicy {
    pub retention_ms: Option<i64>,
    pub retention_bytes: Option<u64>,
}

/// Why a record batch was refused (nothing was written).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BatchError {
    TooShort { len: usize },
    LengthMismatch { declared: usize, actual: usize },
    UnsupportedMagic(i8),
    CrcMismatch { stored: u32, computed: u32 },
    BadRecordCount { records: i32, last_offset_delta: i32 },
}

/// Errors of the disk or the log as a whole.
#[derive(Debug)]
pub enum StorageError {
    Io {
        op: &'static str,
        source: std::io::Error,
    },
    /// fdatasync failed or a log write hit EIO: the log stops for good (never retried).
    Fatal(String),
    Corrupt(String),
}

/// Why an append was refused.
#[derive(Debug)]
pub enum AppendError {
    InvalidBatch(BatchError),
    TooLarge {
        size: usize,
        max: usize,
    },
    UnknownPartition(PartitionId),
    Storage(StorageError),
    /// A replica's batch copied at its leader's offsets (`ShardLog::append_at_offsets`)
    /// does not start at the partition's next offset.
    NotAtEnd {
        base_offset: Offset,
        next_offset: Offset,
    },
}

/// Why a read was refused.
#[derive(Debug)]
pub enum ReadError {
    UnknownPartition(PartitionId),
    OffsetOutOfRange { requested: Offset, log_start_offset: Offset, high_watermark: Offset },
    Storage(StorageError),
}

/// Why a partition's log start could not be moved (`ShardLog::advance_log_start`); nothing
/// was written.
#[derive(Debug)]
pub enum LogStartError {
    /// Past the high watermark: only durable data can be deleted (index invariant 2).
    AboveHighWatermark { requested: Offset, high_watermark: Offset },
    /// Unknown partition, or the log cannot take the entry (closed, stopped, no segment).
    Append(AppendError),
}

impl fmt::Display for StorageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self:?}")
    }
}

mod any;
mod batch;
mod batcher;
/// For the criterion benches in `benches/` only (see the module header).
#[doc(hidden)]
pub mod bench_support;
mod checkpoint;
mod cleaner;
mod disk;
mod epochs;
mod frame;
pub mod fuzzing;
mod histogram;
mod index;
mod log;
mod recovery;
mod sim;
mod state;

pub use any::{AnyBuffer, AnyDisk};
pub use batch::{
    for_each_record, split_batches, with_log_append_time, RecordBatchHeader, RecordView,
    RecordsError, RECORD_BATCH_HEADER_BYTES,
};
pub use cleaner::{AbortedTxnRange, Bounds, CleanPolicy, CleanReport, Cleanable};
pub use disk::{Disk, DmaDisk, IoBuffer, SegmentFile, IOPOLL_PROBE_FILE};
pub use epochs::{EpochEntry, LeaderEpochs, UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET};
pub use frame::{EntryKind, ENTRY_HEADER_BYTES, FORMAT_VERSION, PAGE_BYTES};
pub use histogram::{
    Histogram, COUNT_BOUNDS, LATENCY_BOUNDS_US, MAX_BUCKETS, SIZE_BOUNDS_BYTES, STAGE_BOUNDS_US,
};
pub use log::{Appended, Durable, LogProbes, ShardLog};
pub use sim::{seed_from_env, SimDisk, SimImage, XorShift};
