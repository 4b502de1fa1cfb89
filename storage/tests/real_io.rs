//! Real IO on glommio (O_DIRECT, io_uring) in a temp dir on the real filesystem.

mod common;

use std::path::PathBuf;

use bytes::Bytes;
use common::*;
use shardlog_storage::*;

fn config() -> LogConfig {
    LogConfig {
        segment_size_bytes: 1 << 20,
        tail_cache_bytes: 64 << 10,
        max_batch_bytes: 64 << 10,
        blocking_flush_max_bytes: 0,
        ..LogConfig::default()
    }
}

/// How the reopen tests make flushes durable.
#[derive(Clone, Copy)]
struct Sync {
    dsync_writes: bool,
    blocking_flush_max_bytes: u64,
}

#[test]
fn a_fresh_dir_reads_back_through_dmafile_after_the_iopoll_probe() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    run(move || async move {
        let disk = DmaDisk::open(path.clone()).await.unwrap();
        disk.create_segment(0, 64 << 10).await.unwrap();
        let mut page = disk.alloc_buffer(4096);
        page.as_mut_slice().fill(0x5A);
        disk.write_at(0, 4096, page).await.unwrap();
        disk.sync(0).await.unwrap();
        // Fails with EOPNOTSUPP (os error 95) if glommio marked the device pollable.
        let read = disk.read_at(0, 0, 8192).await.expect("DmaFile read works on a fresh dir");
        assert!(read[..4096].iter().all(|&b| b == 0));
        assert!(read[4096..].iter().all(|&b| b == 0x5A));
        let file = glommio::io::DmaFile::open(path.join("00000000000000000000.log")).await.unwrap();
        assert_eq!(file.read_at(4096, 10).await.unwrap().len(), 10);
        file.close().await.unwrap();
    });
}

fn nth_batch(start_seed: u64, i: u64) -> (PartitionId, Bytes) {
    let b = batch_of(1 + (i % 5) as usize, 200 + (i % 7) as usize * 100, start_seed + i, i as i64);
    (PartitionId(i % 3), b)
}

fn append_some(
    path: PathBuf,
    start_seed: u64,
    count: u64,
    await_every: u64,
    sync: Sync,
) -> Vec<(PartitionId, Offset)> {
    let (tx, rx) = std::sync::mpsc::channel();
    run(move || async move {
        let disk = DmaDisk::open(path).await.unwrap();
        disk.set_dsync_writes(sync.dsync_writes);
        let config =
            LogConfig { blocking_flush_max_bytes: sync.blocking_flush_max_bytes, ..config() };
        let (log, _, _) = ShardLog::open(disk, config).await.unwrap();
        let mut acked = Vec::new();
        for i in 0..count {
            let (p, b) = nth_batch(start_seed, i);
            log.ensure_partition(p);
            let a = log.append_batches(p, &validated(&b)).unwrap();
            if i % await_every == 0 {
                a.durable.wait().await.unwrap();
                acked.push((p, a.last_offset));
            }
        }
        let probes = log.probes();
        match sync.blocking_flush_max_bytes {
            0 => assert_eq!(probes.blocking_flushes, 0),
            _ => assert!(probes.blocking_flushes > 0, "no flush took the blocking path"),
        }
        // Dropped without close: the executor ends with appends still queued.
        tx.send(acked).unwrap();
    });
    rx.recv().unwrap()
}

#[test]
fn appends_survive_dropping_the_log_without_close_and_reopen_byte_identical() {
    appends_survive_a_drop_and_reopen(Sync { dsync_writes: false, blocking_flush_max_bytes: 0 });
}

/// The same with flushes of up to 16 KiB written and fdatasync'd by blocking syscalls
/// (`--log-blocking-flush-max-bytes`), larger ones through io_uring.
#[test]
fn with_blocking_flushes_appends_survive_dropping_the_log_and_reopen_byte_identical() {
    appends_survive_a_drop_and_reopen(Sync {
        dsync_writes: false,
        blocking_flush_max_bytes: 16 << 10,
    });
}

/// The same with segment files opened O_DSYNC (`--log-sync dsync`): the log's `sync` is
/// then a no-op, and the reopened log must still find every acknowledged batch.
#[test]
fn with_dsync_writes_appends_survive_dropping_the_log_and_reopen_byte_identical() {
    appends_survive_a_drop_and_reopen(Sync { dsync_writes: true, blocking_flush_max_bytes: 0 });
    appends_survive_a_drop_and_reopen(Sync {
        dsync_writes: true,
        blocking_flush_max_bytes: 16 << 10,
    });
}

fn appends_survive_a_drop_and_reopen(sync: Sync) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    let acked = append_some(path.clone(), 0, 3000, 7, sync);
    let acked2 = acked.clone();
    run(move || async move {
        let disk = DmaDisk::open(path).await.unwrap();
        disk.set_dsync_writes(sync.dsync_writes);
        let (log, _, report) = ShardLog::open(disk, config()).await.unwrap();
        assert_eq!(report.checkpoint_position, None);
        let mut expected: Vec<Vec<(Offset, Bytes)>> = vec![Vec::new(); 3];
        let mut next = [0i64; 3];
        for i in 0..3000 {
            let (p, b) = nth_batch(0, i);
            let n = &mut next[p.0 as usize];
            expected[p.0 as usize].push((*n, with_offset(&b, *n)));
            *n += 1 + (i % 5) as i64;
        }
        for p in 0..3 {
            let p = PartitionId(p);
            let info = log.partition_info(p).unwrap();
            let last_acked = acked2.iter().filter(|(q, _)| *q == p).map(|(_, o)| *o).max().unwrap();
            assert!(info.high_watermark > last_acked, "{report:?}");
            let mut from = 0;
            let mut got = Vec::new();
            while from < info.high_watermark {
                let bytes = log.read(p, from, 256 << 10).await.unwrap();
                for (base, b) in batches_in(&bytes) {
                    assert_eq!(base, from);
                    let h = RecordBatchHeader::parse_validated(&b).unwrap();
                    from = base + h.last_offset_delta as i64 + 1;
                    got.push((base, b));
                }
            }
            assert!(got[..] == expected[p.0 as usize][..got.len()], "a byte-identical prefix");
        }
        assert!(log.segments().len() > 1, "several 1 MiB segments were used");
    });
    assert!(!acked.is_empty());
}

#[test]
fn close_writes_a_checkpoint_that_the_next_open_uses() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    run(move || async move {
        let disk = DmaDisk::open(path.clone()).await.unwrap();
        let (log, _, _) = ShardLog::open(disk, config()).await.unwrap();
        let p = PartitionId::new(1, 0);
        log.ensure_partition(p);
        let mut expected = Vec::new();
        for i in 0..500 {
            let b = batch_of(2, 300, i, i as i64);
            let a = log.append_batches(p, &validated(&b)).unwrap();
            expected.extend_from_slice(&with_offset(&b, a.base_offset));
        }
        log.append_internal(InternalStream::Metadata, true, b"topics v1").unwrap();
        log.close().await.unwrap();
        drop(log);
        let disk = DmaDisk::open(path).await.unwrap();
        let (log, internal, report) = ShardLog::open(disk, config()).await.unwrap();
        assert!(report.checkpoint_position.is_some(), "{report:?}");
        assert_eq!(internal.len(), 1);
        assert_eq!(&internal[0].payload[..], b"topics v1");
        let mut got = Vec::new();
        let mut from = 0;
        while from < 1000 {
            let bytes = log.read(p, from, 1 << 20).await.unwrap();
            for (base, b) in batches_in(&bytes) {
                from = base + 2;
                got.extend_from_slice(&b);
            }
        }
        assert_eq!(Bytes::from(got), Bytes::from(expected));
        let ts = log.offset_for_timestamp(p, 250).await.unwrap();
        // Batch i holds offsets 2i, 2i+1 stamped i, i+1: ts 250 first appears at offset 499.
        assert_eq!(ts, Some((499, 250)));
    });
}

/// Child side of the kill -9 test: appends forever, printing each acknowledged batch.
fn kill_child(path: PathBuf) {
    use std::io::Write;
    run(move || async move {
        let disk = DmaDisk::open(path).await.unwrap();
        let (log, _, _) = ShardLog::open(disk, config()).await.unwrap();
        for p in 0..3 {
            log.ensure_partition(PartitionId(p));
        }
        let mut pending = std::collections::VecDeque::new();
        for i in 0u64.. {
            let (p, b) = nth_batch(7, i);
            let a = log.append_batches(p, &validated(&b)).unwrap();
            pending.push_back((i, a));
            if pending.len() >= 32 {
                let (i, a) = pending.pop_front().unwrap();
                a.durable.wait().await.unwrap();
                let mut out = std::io::stdout().lock();
                writeln!(out, "ACK {i} {} {}", a.base_offset, a.last_offset).unwrap();
                out.flush().unwrap();
            }
        }
    });
}

#[test]
fn kill_9_mid_stream_loses_no_acknowledged_batch() {
    use std::io::BufRead;
    if let Ok(dir) = std::env::var("SHARDLOG_KILL_CHILD_DIR") {
        kill_child(PathBuf::from(dir));
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "kill_9_mid_stream_loses_no_acknowledged_batch", "--nocapture"])
        .env("SHARDLOG_KILL_CHILD_DIR", &path)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut acked = Vec::new();
    for line in std::io::BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        if let Some(rest) = line.strip_prefix("ACK ") {
            let v: Vec<i64> = rest.split(' ').map(|x| x.parse().unwrap()).collect();
            acked.push((v[0] as u64, v[1], v[2]));
            if acked.len() == 1500 {
                child.kill().unwrap(); // SIGKILL, mid-stream
                break;
            }
        }
    }
    child.wait().unwrap();
    assert_eq!(acked.len(), 1500);
    run(move || async move {
        let disk = DmaDisk::open(path).await.unwrap();
        let (log, _, report) = ShardLog::open(disk, config()).await.unwrap();
        for (i, base, last) in acked {
            let (p, b) = nth_batch(7, i);
            let info = log.partition_info(p).unwrap();
            assert!(info.high_watermark > last, "acked batch {i} lost: {report:?}");
            let read = log.read(p, base, 1).await.unwrap();
            assert_eq!(read, with_offset(&b, base), "batch {i} byte-identical");
        }
    });
}
