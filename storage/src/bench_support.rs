//! Handles on crate-private pieces of the hot path, for the criterion benches in
//! `benches/benches/` only. `#[doc(hidden)]`: not part of the storage API contract, and
//! nothing in `shards/` or `src/` may use it.
//!
//! Each handle runs the real code, not a copy of it: the per-partition index's lookups
//! (`PartitionLog`, re-exported as is) and the group-commit batcher's append (placement,
//! entry header with its CRC-32C, copy into the page-aligned chunk buffer), without I/O.

use crate::batcher::Batcher;
use crate::disk::IoBuffer;
use crate::frame::ENTRY_HEADER_BYTES;
use crate::log::{data_header, CHUNK_BYTES};
use crate::PartitionId;

pub use crate::index::PartitionLog;

/// The batcher's append path as `ShardLog::append_batches` drives it, with flushes that
/// complete at once instead of going to a disk.
pub struct AppendPath<B: IoBuffer> {
    batcher: Batcher<B>,
}

impl<B: IoBuffer> AppendPath<B> {
    /// An empty log at position 0, chunks of the log's size (1 MiB), buffers from `alloc`.
    pub fn new(alloc: Box<dyn Fn(usize) -> B>, segment_size_bytes: u64) -> AppendPath<B> {
        let segment = (0, segment_size_bytes);
        AppendPath {
            batcher: Batcher::new(alloc, CHUNK_BYTES, segment_size_bytes, segment, 0, &[]),
        }
    }

    /// Places one record-batch entry (rolling to the next segment when it does not fit, as
    /// `ShardLog` does); returns its log position.
    pub fn append_record_batch(&mut self, partition: PartitionId, payload: &[u8]) -> u64 {
        if self.batcher.needs_roll((ENTRY_HEADER_BYTES + payload.len()) as u64).is_some() {
            self.batcher.roll();
        }
        self.batcher.append(data_header(partition), payload)
    }

    /// Bytes appended since the last flush.
    pub fn gathered_bytes(&self) -> u64 {
        self.batcher.gathered_bytes()
    }

    /// Seals what gathered into a flush (padded to the page) and completes it without
    /// writing it anywhere: the chunk buffers are dropped. Returns the bytes it held.
    pub fn complete_flush_without_io(&mut self) -> usize {
        let Some(flush) = self.batcher.take_flush() else { return 0 };
        let bytes = flush.chunks.iter().map(|chunk| chunk.buf.as_slice().len()).sum();
        self.batcher.flush_done();
        bytes
    }
}
