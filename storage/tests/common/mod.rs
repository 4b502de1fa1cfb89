//! Helpers shared by the integration tests: Kafka v2 batch builder, executor runner.
#![allow(dead_code)]

use std::future::Future;

use bytes::Bytes;
use shardlog_storage::*;

fn write_varlong(out: &mut Vec<u8>, value: i64) {
    let mut raw = ((value << 1) ^ (value >> 63)) as u64;
    loop {
        if raw < 0x80 {
            out.push(raw as u8);
            return;
        }
        out.push((raw as u8 & 0x7f) | 0x80);
        raw >>= 7;
    }
}

/// A valid uncompressed v2 batch of `values`, record i stamped `base_ts + i * step`.
pub fn record_batch(values: &[Vec<u8>], base_ts: i64, step: i64) -> Bytes {
    let mut records = Vec::new();
    for (i, value) in values.iter().enumerate() {
        let mut body = vec![0u8];
        write_varlong(&mut body, i as i64 * step);
        write_varlong(&mut body, i as i64);
        write_varlong(&mut body, -1);
        write_varlong(&mut body, value.len() as i64);
        body.extend_from_slice(value);
        write_varlong(&mut body, 0);
        write_varlong(&mut records, body.len() as i64);
        records.extend_from_slice(&body);
    }
    let count = values.len() as i32;
    let max_ts = base_ts + (count as i64 - 1).max(0) * step;
    frame_batch(&records, count, base_ts, max_ts)
}

/// A v2 batch header (base offset 0, no producer) around `records`, CRC computed.
fn frame_batch(records: &[u8], count: i32, base_ts: i64, max_ts: i64) -> Bytes {
    frame_producer_batch(records, count, (base_ts, max_ts), 0, -1)
}

/// A v2 batch header (base offset 0) with `attributes` and producer `producer_id` (epoch
/// 0, base sequence 0; -1 for none) around `records`, CRC computed.
fn frame_producer_batch(
    records: &[u8],
    count: i32,
    (base_ts, max_ts): (i64, i64),
    attributes: i16,
    producer_id: i64,
) -> Bytes {
    let none = producer_id < 0;
    let mut b = Vec::with_capacity(61 + records.len());
    b.extend_from_slice(&0i64.to_be_bytes());
    b.extend_from_slice(&((49 + records.len()) as i32).to_be_bytes());
    b.extend_from_slice(&0i32.to_be_bytes());
    b.push(2);
    b.extend_from_slice(&[0; 4]);
    b.extend_from_slice(&attributes.to_be_bytes());
    b.extend_from_slice(&(count - 1).to_be_bytes());
    b.extend_from_slice(&base_ts.to_be_bytes());
    b.extend_from_slice(&max_ts.to_be_bytes());
    b.extend_from_slice(&producer_id.to_be_bytes());
    b.extend_from_slice(&(if none { -1i16 } else { 0 }).to_be_bytes());
    b.extend_from_slice(&(if none { -1i32 } else { 0 }).to_be_bytes());
    b.extend_from_slice(&count.to_be_bytes());
    b.extend_from_slice(records);
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    Bytes::from(b)
}

/// A batch of `records` records of `value_bytes` bytes each, filled from `seed`.
pub fn batch_of(records: usize, value_bytes: usize, seed: u64, ts: i64) -> Bytes {
    let values: Vec<Vec<u8>> = (0..records)
        .map(|i| {
            let mut x = seed.wrapping_mul(31).wrapping_add(i as u64);
            (0..value_bytes)
                .map(|_| {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    (x >> 56) as u8
                })
                .collect()
        })
        .collect();
    record_batch(&values, ts, 1)
}

pub fn validated(batch: &Bytes) -> Vec<(RecordBatchHeader, Bytes)> {
    split_batches(batch).expect("valid test batch")
}

/// The batch as the log stores it: base offset rewritten.
pub fn with_offset(batch: &Bytes, offset: Offset) -> Bytes {
    let mut v = batch.to_vec();
    v[..8].copy_from_slice(&offset.to_be_bytes());
    Bytes::from(v)
}

/// Splits a read result into (base_offset, batch bytes).
pub fn batches_in(bytes: &Bytes) -> Vec<(Offset, Bytes)> {
    split_batches(bytes)
        .expect("read returns valid batches")
        .into_iter()
        .map(|(h, b)| (h.base_offset, b))
        .collect()
}

/// Runs `make()` on a fresh glommio executor thread and waits for it.
pub fn run<F, Fut>(make: F)
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = ()> + 'static,
{
    glommio::LocalExecutorBuilder::default()
        .spawn(make)
        .expect("spawn executor")
        .join()
        .expect("executor thread");
}

pub fn small_config() -> LogConfig {
    LogConfig {
        segment_size_bytes: 64 << 10,
        tail_cache_bytes: 16 << 10,
        max_batch_bytes: 8 << 10,
        blocking_flush_max_bytes: 0,
        ..LogConfig::default()
    }
}

/// One keyed record: key, and value (None: a tombstone).
pub type KeyedRecord = (Vec<u8>, Option<Vec<u8>>);

/// A valid uncompressed v2 batch of keyed records, all stamped `ts`.
pub fn keyed_batch(records: &[KeyedRecord], ts: i64) -> Bytes {
    let (body, count) = keyed_records(records);
    frame_batch(&body, count, ts, ts)
}

/// Batch attribute bits (Kafka's).
pub const TRANSACTIONAL: i16 = 0x10;
pub const CONTROL: i16 = 0x20;

/// A transactional batch of keyed records of `producer_id`, all stamped `ts`.
pub fn transactional_batch(records: &[KeyedRecord], ts: i64, producer_id: i64) -> Bytes {
    let (body, count) = keyed_records(records);
    frame_producer_batch(&body, count, (ts, ts), TRANSACTIONAL, producer_id)
}

/// A COMMIT or ABORT marker of `producer_id` (Kafka's control batch: key = version 0 and
/// the type, value = version 0 and a coordinator epoch).
pub fn marker_batch(producer_id: i64, commit: bool, ts: i64) -> Bytes {
    let key = vec![0, 0, 0, u8::from(commit)];
    let (body, count) = keyed_records(&[(key, Some(vec![0; 6]))]);
    frame_producer_batch(&body, count, (ts, ts), TRANSACTIONAL | CONTROL, producer_id)
}

/// The records of a v2 batch of `records`, and their count.
fn keyed_records(records: &[KeyedRecord]) -> (Vec<u8>, i32) {
    let mut body = Vec::new();
    for (i, (key, value)) in records.iter().enumerate() {
        let mut r = vec![0u8];
        write_varlong(&mut r, 0);
        write_varlong(&mut r, i as i64);
        write_varlong(&mut r, key.len() as i64);
        r.extend_from_slice(key);
        match value {
            Some(v) => {
                write_varlong(&mut r, v.len() as i64);
                r.extend_from_slice(v);
            }
            None => write_varlong(&mut r, -1),
        }
        write_varlong(&mut r, 0);
        write_varlong(&mut body, r.len() as i64);
        body.extend_from_slice(&r);
    }
    (body, records.len() as i32)
}

/// Opens the log on `disk` and makes partitions `0..partitions` known.
pub async fn reopen(disk: &SimDisk, config: &LogConfig, partitions: u64) -> ShardLog<SimDisk> {
    let (log, _, _) = ShardLog::open(disk.clone(), config.clone()).await.expect("open");
    for p in 0..partitions {
        log.ensure_partition(PartitionId(p));
    }
    log
}

/// One stored batch as read back: its header and its records (offset, key, value).
pub type ReadBatch = (RecordBatchHeader, Vec<(Offset, Vec<u8>, Option<Vec<u8>>)>);

/// Every record of `partition` from its log start to its high watermark, as (offset, key,
/// value), read through `ShardLog::read` in small chunks (so reads start inside gaps).
pub async fn read_records<D: Disk>(
    log: &ShardLog<D>,
    partition: PartitionId,
) -> Vec<(Offset, Vec<u8>, Option<Vec<u8>>)> {
    read_batches(log, partition).await.into_iter().flat_map(|(_, records)| records).collect()
}

/// Every batch of `partition` from its log start to its high watermark, verified.
pub async fn read_batches<D: Disk>(log: &ShardLog<D>, partition: PartitionId) -> Vec<ReadBatch> {
    let info = log.partition_info(partition).expect("known partition");
    let mut out = Vec::new();
    let mut from = info.log_start_offset;
    while from < info.high_watermark {
        let bytes = log.read(partition, from, 1).await.expect("read");
        if bytes.is_empty() {
            break;
        }
        let mut at = 0;
        while at < bytes.len() {
            let header = RecordBatchHeader::parse_unvalidated(&bytes[at..]).unwrap();
            let batch = &bytes[at..at + header.total_bytes()];
            match RecordBatchHeader::parse_validated(batch) {
                // A cleaned batch has fewer records than its offset range: the count check
                // of produce does not apply; lengths, magic and CRC still must verify.
                Ok(_) | Err(BatchError::BadRecordCount { .. }) => {}
                Err(e) => panic!("stored batch does not verify: {e:?}"),
            }
            let mut records = Vec::new();
            for_each_record(batch, |r| {
                records.push((
                    header.base_offset + r.offset_delta,
                    r.key.expect("keyed").to_vec(),
                    r.value.map(|v| v.to_vec()),
                ))
            })
            .expect("records decode");
            out.push((header, records));
            from = header.base_offset + header.last_offset_delta as i64 + 1;
            at += header.total_bytes();
        }
    }
    out
}
