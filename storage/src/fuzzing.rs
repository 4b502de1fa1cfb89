//! Fuzz target bodies: what `fuzz/fuzz_targets/*.rs` run on each input, and what
//! `tests/fuzz_corpus.rs` replays over the committed corpus in every test run.
//!
//! Not a hot path and never used by the broker. Each function takes arbitrary bytes and
//! must return normally: a panic, a hang or an unbounded allocation is a bug in the code
//! under test (contract 1 of `recovery.rs`: bad bytes end the log, they never crash it).

use std::cell::RefCell;
use std::future::Future;

use bytes::Bytes;

use crate::batch::first_record_at_or_after;
use crate::frame::{next_entry_position, ENTRY_HEADER_BYTES};
use crate::{
    split_batches, LogConfig, RecoveryReport, ShardLog, SimDisk, RECORD_BATCH_HEADER_BYTES,
};

/// Segment size of the fuzzed log: small, so one input can span several segments.
pub const FUZZ_SEGMENT_BYTES: u64 = 16 << 10;

/// Bit 0 of a `recover` input's first byte: re-stamp each entry's position and CRC-32C
/// before recovery, so mutated payloads reach replay instead of failing the CRC check.
pub const FIX_ENTRY_CRCS: u8 = 1;

fn fuzz_config() -> LogConfig {
    LogConfig {
        segment_size_bytes: FUZZ_SEGMENT_BYTES,
        tail_cache_bytes: 8 << 10,
        max_batch_bytes: 4 << 10,
        blocking_flush_max_bytes: 0,
        ..LogConfig::default()
    }
}

/// Bit 0 of a `batches` input's first byte: re-stamp each batch's CRC-32C before
/// validation, so mutated records reach the record scan instead of failing the CRC check.
pub const FIX_BATCH_CRCS: u8 = 1;

/// Record batch validation (what Produce runs on every batch) and the record timestamp
/// scan (ListOffsets by time) over arbitrary bytes: `data[0]` holds flags
/// (`FIX_BATCH_CRCS`), the rest is a Produce request's `records` field.
pub fn batches(data: &[u8]) {
    let Some((&flags, records)) = data.split_first() else { return };
    let mut records = records.to_vec();
    if flags & FIX_BATCH_CRCS != 0 {
        fix_batch_crcs(&mut records);
    }
    let data = &records[..];
    let records = Bytes::copy_from_slice(data);
    let Ok(batches) = split_batches(&records) else { return };
    let total: usize = batches.iter().map(|(header, _)| header.total_bytes()).sum();
    assert_eq!(total, data.len(), "accepted batches must cover the input exactly");
    for (header, bytes) in &batches {
        assert_eq!(header.total_bytes(), bytes.len());
        let _ = first_record_at_or_after(bytes, header.base_timestamp);
        let _ = first_record_at_or_after(bytes, i64::MIN);
    }
}

/// Walks `records` as `split_batches` does and gives each batch a matching CRC-32C.
fn fix_batch_crcs(records: &mut [u8]) {
    let mut at = 0usize;
    while records.len() - at >= RECORD_BATCH_HEADER_BYTES {
        let batch_length = i32::from_be_bytes(records[at + 8..at + 12].try_into().unwrap());
        let end = at as i64 + 12 + batch_length as i64;
        if batch_length < 0 || end > records.len() as i64 {
            return;
        }
        // Too short to hold a CRC: `split_batches` refuses it as it is.
        if end as usize - at < RECORD_BATCH_HEADER_BYTES {
            return;
        }
        let batch = &mut records[at..end as usize];
        let crc = crc32c::crc32c(&batch[21..]);
        batch[17..21].copy_from_slice(&crc.to_be_bytes());
        at = end as usize;
    }
}

/// Recovery over an arbitrary log image: `data[0]` holds flags (`FIX_ENTRY_CRCS`), the
/// rest is cut into segments of `FUZZ_SEGMENT_BYTES` (the last one zero-padded). Opening
/// the log must end in Ok or an error; after an Ok, a clean close and a second open must
/// succeed and find the same log end (recovery's result is a fixed point).
pub fn recover(data: &[u8]) {
    let _ = recover_report(data);
}

/// `recover`, returning what the first recovery reported (None: the input is empty or
/// the log refused to open).
pub fn recover_report(data: &[u8]) -> Option<RecoveryReport> {
    let (&flags, image) = data.split_first()?;
    let mut image = image.to_vec();
    if flags & FIX_ENTRY_CRCS != 0 {
        fix_entry_crcs(&mut image);
    }
    let disk = SimDisk::new(0);
    disk.set_max_yields(0);
    for (i, chunk) in image.chunks(FUZZ_SEGMENT_BYTES as usize).enumerate() {
        disk.put_segment(i as u64 * FUZZ_SEGMENT_BYTES, FUZZ_SEGMENT_BYTES, chunk);
    }
    run_local(recover_twice(disk))
}

async fn recover_twice(disk: SimDisk) -> Option<RecoveryReport> {
    let (log, _, first) = ShardLog::open(disk.clone(), fuzz_config()).await.ok()?;
    let end = log.durable_position();
    log.close().await.expect("closing a recovered log on a fault-free disk");
    drop(log);
    let (again, _, report) =
        ShardLog::open(disk, fuzz_config()).await.expect("reopening a cleanly closed log");
    assert_eq!(again.durable_position(), end, "second recovery moved the log end");
    assert_eq!(report.truncated_at, None, "second recovery truncated a clean log");
    again.close().await.expect("closing the reopened log");
    Some(first)
}

/// Walks the entries of `image` as the recovery scan would and makes each header claim
/// its own position and carry a matching CRC-32C.
fn fix_entry_crcs(image: &mut [u8]) {
    let segment = FUZZ_SEGMENT_BYTES as usize;
    let mut position = 0usize;
    loop {
        let at = next_entry_position(position as u64) as usize;
        let segment_end = (at / segment + 1) * segment;
        if at + ENTRY_HEADER_BYTES > image.len().min(segment_end) {
            return;
        }
        let header = &mut image[at..at + ENTRY_HEADER_BYTES];
        if header.iter().all(|&b| b == 0) {
            return;
        }
        header[16..24].copy_from_slice(&(at as u64).to_le_bytes());
        let payload_len = u32::from_le_bytes(header[4..8].try_into().unwrap()) as usize;
        let payload_end = at + ENTRY_HEADER_BYTES + payload_len;
        let is_pad = header[1] == 3;
        let crc = if is_pad {
            crc32c::crc32c(&header[..28])
        } else if payload_end <= image.len().min(segment_end) {
            let crc = crc32c::crc32c(&image[at..at + 28]);
            crc32c::crc32c_append(crc, &image[at + ENTRY_HEADER_BYTES..payload_end])
        } else {
            return;
        };
        image[at + 28..at + 32].copy_from_slice(&crc.to_le_bytes());
        position = payload_end;
    }
}

thread_local! {
    /// One executor per thread, reused across inputs: making one per input costs an
    /// io_uring set-up each time and would dominate the fuzzer's speed.
    static EXECUTOR: RefCell<Option<glommio::LocalExecutor>> = const { RefCell::new(None) };
}

/// Runs `future` on this thread's executor (also for the crate's own async unit tests).
pub(crate) fn run_local<T, F: Future<Output = T>>(future: F) -> T {
    EXECUTOR.with(|cell| {
        let mut slot = cell.borrow_mut();
        let executor = slot.get_or_insert_with(|| {
            glommio::LocalExecutorBuilder::default().make().expect("a glommio executor")
        });
        executor.run(future)
    })
}

/// A valid `recover` input: a log with batches of two partitions, internal entries, pads
/// and a segment roll, written by `ShardLog` itself (seeds the corpus; also a test that
/// the fuzz target is not vacuous).
pub fn sample_log_image(batches: &[Bytes]) -> Vec<u8> {
    let disk = SimDisk::new(7);
    disk.set_max_yields(0);
    run_local(write_sample_log(disk.clone(), batches.to_vec()));
    let mut image = vec![0u8];
    let mut base = 0;
    while let Some(bytes) = disk.segment_bytes(base) {
        image.extend_from_slice(&bytes);
        base += FUZZ_SEGMENT_BYTES;
    }
    let used = image.iter().rposition(|&b| b != 0).map_or(1, |i| i + 1);
    image.truncate(used);
    image
}

async fn write_sample_log(disk: SimDisk, batches: Vec<Bytes>) {
    let (log, _, _) = ShardLog::open(disk, fuzz_config()).await.expect("a fresh sample log");
    let partitions = [crate::PartitionId::new(1, 0), crate::PartitionId::new(2, 3)];
    for (i, batch) in batches.iter().enumerate() {
        let partition = partitions[i % partitions.len()];
        log.ensure_partition(partition);
        let validated = split_batches(batch).expect("sample batches are valid");
        let appended = log.append_batches(partition, &validated).expect("sample append");
        if i % 3 == 0 {
            let stream = crate::InternalStream::GroupOffsets;
            log.append_internal(stream, false, b"\x01offsets").expect("internal entry");
        }
        appended.durable.wait().await.expect("sample append is durable");
    }
    log.close().await.expect("closing the sample log");
}
