//! Figures of the log cleaner on real IO (glommio, O_DIRECT, a temp dir): cleaning
//! throughput (MB/s of batch bytes read) unthrottled and with a byte budget, and bytes on
//! disk before and after, for a keyed workload. Ignored by default (a measurement, not a
//! check; it asserts only what cleaning must do, never a time):
//!
//! `cargo test --release -p shardlog-storage --test cleaner_figures -- --ignored --nocapture`
//!
//! `SHARDLOG_CLEANER_BENCH_MB` sets the workload size (default 64).

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use shardlog_storage::*;

const KEYS: usize = 1000;
const VALUE_BYTES: usize = 1000;
const RECORDS_PER_BATCH: usize = 50;

fn bytes_on_disk(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".log"))
        .map(|e| e.metadata().unwrap().len())
        .sum()
}

/// Appends `mb` MiB of keyed batches (KEYS keys updated round-robin) to one partition.
async fn fill(log: &ShardLog<DmaDisk>, partition: PartitionId, mb: usize) {
    let records = (mb << 20) / (VALUE_BYTES + 20);
    let mut last = None;
    for start in (0..records).step_by(RECORDS_PER_BATCH) {
        let batch: Vec<KeyedRecord> = (start..(start + RECORDS_PER_BATCH).min(records))
            .map(|i| {
                let key = format!("key-{}", i % KEYS).into_bytes();
                (key, Some(vec![b'0' + (i % 10) as u8; VALUE_BYTES]))
            })
            .collect();
        let appended =
            log.append_batches(partition, &validated(&keyed_batch(&batch, 1_000))).unwrap();
        if log.pending_bytes() > 8 << 20 {
            appended.durable.wait().await.unwrap();
        } else {
            last = Some(appended.durable);
        }
    }
    if let Some(durable) = last {
        durable.wait().await.unwrap();
    }
}

/// One pass with `budget` bytes per second: (report, seconds).
async fn timed_pass(
    log: &ShardLog<DmaDisk>,
    partition: PartitionId,
    budget: u64,
) -> (CleanReport, f64) {
    let policy = CleanPolicy {
        now_ms: 1 << 40,
        min_compaction_lag_ms: 0,
        tombstones_removable_below: 0,
        bytes_per_second: budget,
        max_keys: 1 << 20,
        upper_bound: Offset::MAX,
        aborted: Vec::new(),
    };
    let started = Instant::now();
    let report = log.clean(partition, policy).await.expect("pass");
    (report, started.elapsed().as_secs_f64())
}

#[test]
#[ignore]
fn cleaning_throughput_and_bytes_on_disk_for_a_keyed_workload() {
    let mb: usize =
        std::env::var("SHARDLOG_CLEANER_BENCH_MB").ok().and_then(|v| v.parse().ok()).unwrap_or(64);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    run(move || async move {
        let config = LogConfig {
            segment_size_bytes: 8 << 20,
            tail_cache_bytes: 4 << 20,
            max_batch_bytes: 1 << 20,
            blocking_flush_max_bytes: 0,
            ..LogConfig::default()
        };
        let disk = DmaDisk::open(path.clone()).await.unwrap();
        let (log, _, _) = ShardLog::open(disk, config).await.unwrap();
        let (throttled, unthrottled) = (PartitionId(1), PartitionId(2));
        for p in [throttled, unthrottled] {
            log.ensure_partition(p);
            fill(&log, p, mb / 2).await;
        }
        log.checkpoint().await.unwrap();
        let before = bytes_on_disk(&path);
        let size = |p| log.partition_info(p).unwrap().size_bytes as f64 / 1e6;
        let (size_a, size_b) = (size(unthrottled), size(throttled));
        let (fast, fast_s) = timed_pass(&log, unthrottled, u64::MAX / 4).await;
        let budget = 16 << 20;
        let (slow, slow_s) = timed_pass(&log, throttled, budget).await;
        for _ in 0..3 {
            log.checkpoint().await.unwrap();
            glommio::timer::sleep(Duration::from_millis(200)).await;
        }
        let after = bytes_on_disk(&path);
        let mbps = |r: &CleanReport, s: f64| r.bytes_read as f64 / 1e6 / s;
        println!("CLEANER-FIGURES workload {mb} MiB, {KEYS} keys, {VALUE_BYTES} B values");
        println!(
            "unthrottled: partition {size_a:.1} MB, read {:.1} MB, wrote {:.2} MB in {fast_s:.2} s = {:.0} MB/s of input ({:.0} MB/s of partition)",
            fast.bytes_read as f64 / 1e6,
            fast.bytes_written as f64 / 1e6,
            mbps(&fast, fast_s),
            size_a / fast_s
        );
        println!(
            "budget {} MiB/s: partition {size_b:.1} MB, read {:.1} MB, wrote {:.2} MB in {slow_s:.2} s = {:.1} MB/s read+written",
            budget >> 20,
            slow.bytes_read as f64 / 1e6,
            slow.bytes_written as f64 / 1e6,
            (slow.bytes_read + slow.bytes_written) as f64 / 1e6 / slow_s
        );
        println!(
            "segment files on disk: {:.1} MB before, {:.1} MB after; partitions now {:.2} + {:.2} MB",
            before as f64 / 1e6,
            after as f64 / 1e6,
            size(unthrottled),
            size(throttled)
        );
        assert!(fast.records_removed > 0 && slow.records_removed > 0);
        assert!(after < before, "cleaning freed segment files");
        log.close().await.unwrap();
    });
}
