//! Recovery: load the latest valid checkpoint, replay the log after it, truncate at the
//! first entry that does not verify. Runs once per shard at start-up (not a hot path).
//!
//! Contract:
//! 1. Only entries whose framing (version, kind, position, bounds) and CRC-32C verify are
//!    accepted; the scan stops at the first all-zero header (end of log) or bad entry.
//! 2. Bytes after the recovered end are zeroed on disk (the rest of the page keeps its
//!    verified prefix), later segment files are removed, and what was dropped is logged
//!    with `tracing::warn!`. So a later recovery can never see stale entries of an
//!    earlier incarnation behind new ones. Exception: after a clean close (checkpoint
//!    marked clean, at the end of the log) nothing follows the end, so the check is
//!    skipped and the prepared spare segments are kept.
//! 3. Every replayed segment is fdatasync'ed before the log serves reads: replayed entries
//!    that had been written but not synced before the crash are durable from now on, so
//!    high watermark = next offset is honest.
//! 4. Without checkpoints the same state is rebuilt from the log alone (as long as no
//!    segment was deleted by retention: deletion relies on the checkpoint).

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::checkpoint::{self, CheckpointV2};
use crate::disk::{Disk, IoBuffer, SegmentFile};
use crate::frame::{
    align_down, align_up, decode_header, next_entry_position, verify_payload, Decoded, EntryKind,
    ENTRY_HEADER_BYTES, PAGE_BYTES,
};
use crate::state::{Replayed, Segment, SegmentState};
use crate::{LogConfig, RecoveryReport, StorageError};

const WINDOW_BYTES: usize = 4 << 20;

/// Reads a segment through a sliding window of aligned reads.
struct SegmentReader<'a, D: Disk> {
    disk: &'a D,
    segment: SegmentFile,
    window_start: u64,
    window: Bytes,
}

impl<'a, D: Disk> SegmentReader<'a, D> {
    fn new(disk: &'a D, segment: SegmentFile) -> Self {
        SegmentReader { disk, segment, window_start: segment.base, window: Bytes::new() }
    }

    /// Bytes `[position, position + len)` of the log (within this segment).
    async fn get(&mut self, position: u64, len: usize) -> Result<Bytes, StorageError> {
        let end = position + len as u64;
        let window_end = self.window_start + self.window.len() as u64;
        if position < self.window_start || end > window_end {
            let start = align_down(position);
            let segment_end = self.segment.base + self.segment.len;
            let read_end = align_up(end).max(start + WINDOW_BYTES as u64).min(segment_end);
            let offset = start - self.segment.base;
            self.window =
                self.disk.read_at(self.segment.base, offset, (read_end - start) as usize).await?;
            self.window_start = start;
            if self.window.len() < (end - start) as usize {
                return Err(StorageError::Corrupt(format!("short read at {position}")));
            }
        }
        let from = (position - self.window_start) as usize;
        Ok(self.window.slice(from..from + len))
    }
}

/// What recovery hands to `ShardLog::open`.
pub(crate) struct Recovered {
    pub core: Replayed,
    pub segments: BTreeMap<u64, Segment>,
    pub end: u64,
    pub end_segment: (u64, u64),
    pub prefix: Vec<u8>,
    pub checkpoint_position: u64,
    pub report: RecoveryReport,
}

async fn load_checkpoint<D: Disk>(disk: &D, segments: &[SegmentFile]) -> Option<CheckpointV2> {
    let mut positions = disk.list_checkpoints().await.ok()?;
    positions.sort_unstable();
    for &position in positions.iter().rev() {
        let loaded = match disk.read_checkpoint(position).await {
            Ok(bytes) => checkpoint::decode(&bytes),
            Err(e) => Err(e.to_string()),
        };
        let in_log = segments.iter().any(|s| s.base <= position && position <= s.base + s.len);
        // A stream this broker does not know (a newer broker's) would be misread as
        // another: replay from an older checkpoint, or the log, refuses it instead.
        let streams_known = |c: &CheckpointV2| {
            c.internal.iter().all(|i| crate::InternalStream::from_u8(i.stream).is_some())
        };
        match loaded {
            Ok(ckpt)
                if ckpt.position == position
                    && in_log
                    && position % PAGE_BYTES == 0
                    && streams_known(&ckpt) =>
            {
                return Some(ckpt)
            }
            Ok(_) => tracing::warn!(position, "checkpoint does not match the log; ignored"),
            Err(e) => tracing::warn!(position, error = %e, "unreadable checkpoint; ignored"),
        }
    }
    None
}

enum Stop {
    End,
    Corrupt(String),
}

pub(crate) async fn recover<D: Disk>(
    disk: &D,
    config: &LogConfig,
) -> Result<Recovered, StorageError> {
    let mut files = disk.list_segments().await?;
    if files.is_empty() {
        disk.create_segment(0, config.segment_size_bytes).await?;
        files = disk.list_segments().await?;
    }
    let checkpoint = load_checkpoint(disk, &files).await;
    let mut report = RecoveryReport {
        checkpoint_position: checkpoint.as_ref().map(|c| c.position),
        ..RecoveryReport::default()
    };
    let (mut core, start) = match &checkpoint {
        Some(c) => (Replayed::from_checkpoint(c, config.tail_cache_bytes), c.position),
        None => (Replayed::new(config.tail_cache_bytes), files[0].base),
    };
    let mut index = files.iter().rposition(|s| s.base <= start).unwrap_or(0);
    let mut position = start.max(files[index].base);
    let first_replayed = index;
    let stop = loop {
        let segment = files[index];
        let segment_end = segment.base + segment.len;
        let mut reader = SegmentReader::new(disk, segment);
        let stop =
            scan_segment(&mut reader, &mut position, segment_end, &mut core, &mut report).await?;
        match stop {
            Some(stop) => break stop,
            None if index + 1 < files.len() && files[index + 1].base == segment_end => index += 1,
            None => break Stop::End,
        }
    };
    report.replayed_bytes = position - start;
    let end_segment = files[index];
    // After a clean close nothing was written past the checkpoint: the rest of the segment
    // and the spare segments after it are known to be zeros (contract 2 holds already).
    let clean = matches!(stop, Stop::End)
        && checkpoint.as_ref().is_some_and(|c| c.clean && c.position == position);
    let prefix = if clean {
        // The next writes make "nothing after the checkpoint" false: mark it unclean
        // (durably) before the log takes appends.
        let mut unclean = checkpoint.clone().expect("clean implies a checkpoint");
        unclean.clean = false;
        disk.write_checkpoint(unclean.position, checkpoint::encode(unclean)).await?;
        Vec::new()
    } else {
        truncate_after(disk, end_segment, position, &stop, &mut report).await?
    };
    let mut kept = index;
    for later in &files[index + 1..] {
        if clean && later.base == files[kept].base + files[kept].len {
            kept += 1;
            continue;
        }
        // Usually the prepared spare; after a crash it may hold torn bytes of a flush.
        tracing::info!(segment = later.base, "removing a segment after the end of the log");
        disk.remove_segment(later.base).await?;
    }
    for segment in &files[first_replayed..=index] {
        disk.sync(segment.base).await?;
    }
    for log in core.partitions.values_mut() {
        log.high_watermark = log.next_offset;
    }
    // Earlier segments are full; the rest of the current one may never have been written
    // (fallocate'd): the maintenance task zero-fills it in idle time.
    let segments = files[..=kept]
        .iter()
        .map(|s| {
            let written = if s.base == end_segment.base {
                align_up(position) - s.base
            } else if s.base > end_segment.base && disk.lazy_zero_fill() {
                0 // a kept spare: not known to be zero-filled
            } else {
                s.len
            };
            (s.base, Segment::new(s.len, SegmentState::Ready, written.min(s.len)))
        })
        .collect();
    Ok(Recovered {
        core,
        segments,
        end: position,
        end_segment: (end_segment.base, end_segment.base + end_segment.len),
        prefix,
        checkpoint_position: checkpoint.map_or(0, |c| c.position),
        report,
    })
}

/// Replays entries of one segment from `*position`; `None` when its end was reached.
async fn scan_segment<D: Disk>(
    reader: &mut SegmentReader<'_, D>,
    position: &mut u64,
    segment_end: u64,
    core: &mut Replayed,
    report: &mut RecoveryReport,
) -> Result<Option<Stop>, StorageError> {
    loop {
        let at = next_entry_position(*position);
        if at + ENTRY_HEADER_BYTES as u64 > segment_end {
            *position = segment_end;
            return Ok(None);
        }
        let header_bytes = reader.get(at, ENTRY_HEADER_BYTES).await?;
        let header = match decode_header(&header_bytes, at) {
            Decoded::End => {
                *position = at;
                return Ok(Some(Stop::End));
            }
            Decoded::Corrupt(why) => {
                *position = at;
                return Ok(Some(Stop::Corrupt(why.to_string())));
            }
            Decoded::Header(h) => h,
        };
        let end = at + ENTRY_HEADER_BYTES as u64 + header.payload_len as u64;
        if end > segment_end {
            *position = at;
            return Ok(Some(Stop::Corrupt("entry crosses the segment end".into())));
        }
        if header.kind != EntryKind::Pad {
            let payload =
                reader.get(at + ENTRY_HEADER_BYTES as u64, header.payload_len as usize).await?;
            if !verify_payload(&header_bytes, &payload) {
                *position = at;
                return Ok(Some(Stop::Corrupt("entry CRC mismatch".into())));
            }
            // Replayed batches are not put in the tail cache: copying a whole log into a
            // cache that keeps only its end doubled the replay time; reads after a restart
            // go to disk until new appends fill the cache.
            core.apply(&header, at, &payload, None)?;
            report.replayed_entries += 1;
        }
        *position = end;
    }
}

/// Zeroes the segment after `end` (keeping the verified prefix of its page); returns that
/// prefix for the batcher, which repeats it in its first write.
async fn truncate_after<D: Disk>(
    disk: &D,
    segment: SegmentFile,
    end: u64,
    stop: &Stop,
    report: &mut RecoveryReport,
) -> Result<Vec<u8>, StorageError> {
    let segment_end = segment.base + segment.len;
    let mut prefix = Vec::new();
    let mut last_nonzero: Option<u64> = None;
    let mut at = align_down(end);
    while at < segment_end {
        let len = (WINDOW_BYTES as u64).min(segment_end - at) as usize;
        let window = disk.read_at(segment.base, at - segment.base, len).await?;
        let skip = (end.saturating_sub(at) as usize).min(window.len());
        if at == align_down(end) {
            prefix = window[..skip].to_vec();
        }
        if let Some(i) = window[skip..].iter().rposition(|&b| b != 0) {
            last_nonzero = Some(at + (skip + i) as u64);
            let mut zeros = disk.alloc_buffer(len);
            zeros.as_mut_slice().fill(0);
            zeros.as_mut_slice()[..skip].copy_from_slice(&window[..skip]);
            disk.write_at(segment.base, at - segment.base, zeros).await?;
        }
        at += len as u64;
    }
    if let Some(last) = last_nonzero {
        let dropped = last + 1 - end;
        report.dropped_bytes += dropped;
        report.truncated_at = Some(end);
        let reason = match stop {
            Stop::Corrupt(why) => why.as_str(),
            Stop::End => "bytes after the end of the log",
        };
        tracing::warn!(position = end, dropped_bytes = dropped, reason, "truncated the log");
    }
    Ok(prefix)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{InternalStream, ShardLog, SimDisk};

    #[test]
    fn a_checkpoint_carrying_a_stream_this_broker_lacks_is_ignored_not_misread() {
        crate::fuzzing::run_local(async {
            let disk = SimDisk::new(1);
            let config = LogConfig {
                segment_size_bytes: 64 << 10,
                max_batch_bytes: 16 << 10,
                ..LogConfig::default()
            };
            let (log, _, _) = ShardLog::open(disk.clone(), config.clone()).await.unwrap();
            let durable = log.append_internal(InternalStream::Metadata, true, b"table").unwrap();
            durable.wait().await.unwrap();
            log.checkpoint().await.unwrap();
            drop(log);
            let position = disk.list_checkpoints().await.unwrap().into_iter().max().unwrap();
            let read = disk.read_checkpoint(position).await.unwrap();
            let mut newer = checkpoint::decode(&read).unwrap();
            let recovered = recover(&disk, &config).await.unwrap();
            assert_eq!(recovered.report.checkpoint_position, Some(position));

            // A newer broker's stream: the checkpoint is ignored and the log replayed.
            newer.internal[0].stream = 99;
            disk.write_checkpoint(position, checkpoint::encode(newer)).await.unwrap();
            let recovered = recover(&disk, &config).await.unwrap();
            assert_eq!(recovered.report.checkpoint_position, None);
            let internal = recovered.core.internal_entries();
            assert_eq!(internal.len(), 1);
            assert_eq!(internal[0].stream, InternalStream::Metadata);
            assert_eq!(&internal[0].payload[..], b"table");
        })
    }
}
