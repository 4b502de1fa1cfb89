//! The storage crate's per-batch hot-path pieces that need its internals (reached through
//! `shardlog_storage::bench_support`, which wraps the real code):
//!
//! - `index`: a partition's index lookups, offset → batch (`find_offset`, every Fetch) and
//!   timestamp → batch (`find_timestamp`, ListOffsets by time), at random keys, on indexes
//!   of 10,000 and 1,000,000 batches.
//! - `append`: the group-commit batcher's append of one record batch (placement, entry
//!   header with its CRC-32C over the batch, copy into the 4 KiB-aligned DMA chunk), for
//!   a batch of one 1 KiB record (the latency workload) and of sixteen (the throughput one). Buffers come from glommio's global DMA allocator as in
//!   `DmaDisk`; every ~1 MiB gathered, a flush is sealed and completed without I/O, so a
//!   chunk allocation and a seal are amortized into the figure as they are in the log.
//!
//! Run: `cargo bench -p shardlog-benches --bench storage_hot_path`. Under `cargo test`
//! (criterion's test mode) each benchmark runs once.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use shardlog_benches::load::record_batch::RecordBatchWriter;
use shardlog_storage::bench_support::{AppendPath, PartitionLog};
use shardlog_storage::{PartitionId, XorShift};

/// Records per indexed batch: the load generator's default batch of 16.
const RECORDS_PER_BATCH: i64 = 16;
/// Random keys looked up in turn, so each lookup walks a different path.
const QUERIES: usize = 4096;

/// An index of `batches` batches of 16 records, 16 KiB apart in the log, one ms apart.
fn index_of(batches: u64) -> PartitionLog {
    let mut log = PartitionLog::starting_at(0);
    for i in 0..batches {
        let base = log.next_offset;
        let timestamp_ms = 1_700_000_000_000 + i as i64;
        log.push(base, base + RECORDS_PER_BATCH - 1, i * 16_672, 16_611, timestamp_ms);
    }
    log.high_watermark = log.next_offset;
    log
}

fn random_keys(bound: u64, from: i64) -> Vec<i64> {
    let mut random = XorShift::new(6);
    (0..QUERIES).map(|_| from + random.below(bound) as i64).collect()
}

fn index_benches(c: &mut Criterion) {
    let mut group = c.benchmark_group("index");
    for batches in [10_000u64, 1_000_000] {
        let log = index_of(batches);
        let offsets = random_keys(log.next_offset as u64, 0);
        let mut next = offsets.iter().cycle();
        group.bench_function(BenchmarkId::new("find_offset", batches), |b| {
            b.iter(|| log.find_offset(black_box(*next.next().unwrap())))
        });
        let timestamps = random_keys(batches, 1_700_000_000_000);
        let mut next = timestamps.iter().cycle();
        group.bench_function(BenchmarkId::new("find_timestamp", batches), |b| {
            b.iter(|| log.find_timestamp(black_box(*next.next().unwrap())).expect("indexed"))
        });
    }
    group.finish();
}

/// A record batch of `records` keyed 1 KiB records, as the load generator sends.
fn record_batch(records: usize) -> Vec<u8> {
    let mut out = Vec::new();
    let mut writer = RecordBatchWriter::new(&mut out, 1_700_000_000_000);
    for i in 0..records {
        writer.push(Some(format!("{i}").as_bytes()), &[b'x'; 1024]);
    }
    writer.finish();
    out
}

fn append_benches(c: &mut Criterion) {
    let mut group = c.benchmark_group("append");
    for records in [1, 16] {
        let payload = record_batch(records);
        let batch_bytes = payload.len();
        let mut log = AppendPath::new(Box::new(glommio::allocate_dma_buffer_global), 128 << 20);
        group.throughput(Throughput::Bytes(batch_bytes as u64));
        group.bench_function(BenchmarkId::new("record_batch_into_dma_chunk", batch_bytes), |b| {
            b.iter(|| {
                let position = log.append_record_batch(PartitionId(7), black_box(&payload));
                if log.gathered_bytes() >= 1 << 20 {
                    black_box(log.complete_flush_without_io());
                }
                position
            })
        });
    }
    group.finish();
}

criterion_group!(storage_hot_path, index_benches, append_benches);
criterion_main!(storage_hot_path);
