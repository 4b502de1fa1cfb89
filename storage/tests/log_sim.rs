//! Scenario tests of `ShardLog` on `SimDisk`: group commit, reads, recovery, faults,
//! retention, checkpoints, internal entries.

mod common;

use std::collections::BTreeMap;

use bytes::Bytes;
use common::*;
use shardlog_storage::*;

const P0: PartitionId = PartitionId(0);
const P1: PartitionId = PartitionId(1);

async fn open(
    disk: &SimDisk,
    config: LogConfig,
) -> (ShardLog<SimDisk>, Vec<InternalEntry>, RecoveryReport) {
    let opened = ShardLog::open(disk.clone(), config).await.expect("open");
    opened.0.ensure_partition(P0);
    opened.0.ensure_partition(P1);
    opened
}

async fn read_all(log: &ShardLog<SimDisk>, p: PartitionId) -> Vec<(Offset, Bytes)> {
    let info = log.partition_info(p).unwrap();
    let mut out = Vec::new();
    let mut from = info.log_start_offset;
    while from < info.high_watermark {
        let bytes = log.read(p, from, 1 << 20).await.expect("read");
        let batches = batches_in(&bytes);
        assert!(!batches.is_empty());
        for (base, b) in batches {
            assert_eq!(base, from, "dense offsets");
            let h = RecordBatchHeader::parse_validated(&b).unwrap();
            from = base + h.last_offset_delta as i64 + 1;
            out.push((base, b));
        }
    }
    out
}

/// `read_below_unflushed` (a replicated partition's committed entries): past the high
/// watermark, batches the tail cache holds are served before their flush, and the read
/// stops at the first one the cache no longer holds; `read` keeps to the high watermark.
#[test]
fn an_unflushed_read_serves_cached_batches_past_the_high_watermark_and_stops_at_an_uncached_one() {
    run(|| async {
        let disk = SimDisk::new(3);
        // A 16 KiB tail cache: batches of ~6 KB, so the third evicts the first.
        let (log, _, _) = open(&disk, small_config()).await;
        let batches: Vec<Bytes> = (0..3).map(|k| batch_of(1, 6000, k, 100 + k as i64)).collect();
        let appended: Vec<_> =
            batches.iter().map(|b| log.append_batches(P0, &validated(b)).unwrap()).collect();
        let info = log.partition_info(P0).unwrap();
        assert_eq!((info.high_watermark, info.log_end_offset), (0, 3), "nothing durable yet");
        assert!(log.read(P0, 0, 1 << 20).await.unwrap().is_empty());
        // Batch 0 left the cache (evicted by batch 2) before its flush: nothing from 0.
        assert!(log.read_below_unflushed(P0, 0, 1 << 20, 3).await.unwrap().is_empty());
        let from_1 = log.read_below_unflushed(P0, 1, 1 << 20, 3).await.unwrap();
        let expected = [with_offset(&batches[1], 1).to_vec(), with_offset(&batches[2], 2).to_vec()];
        assert_eq!(from_1, Bytes::from(expected.concat()));
        assert_eq!(log.read_below_unflushed(P0, 1, 1 << 20, 2).await.unwrap(), expected[0]);
        let past_end = log.read_below_unflushed(P0, 4, 1 << 20, 5).await;
        assert!(matches!(past_end, Err(ReadError::OffsetOutOfRange { high_watermark: 3, .. })));
        for a in appended {
            a.durable.wait().await.unwrap();
        }
        // Durable: both reads serve everything, batch 0 from disk.
        let all = log.read_below_unflushed(P0, 0, 1 << 20, 3).await.unwrap();
        assert_eq!(all, log.read(P0, 0, 1 << 20).await.unwrap());
        assert_eq!(batches_in(&all).len(), 3);
    });
}

#[test]
fn append_then_read_returns_the_batch_with_its_assigned_offset() {
    run(|| async {
        let disk = SimDisk::new(1);
        let (log, _, _) = open(&disk, small_config()).await;
        let a = batch_of(3, 10, 1, 100);
        let b = batch_of(2, 10, 2, 200);
        let first = log.append_batches(P0, &validated(&a)).unwrap();
        let second = log.append_batches(P0, &validated(&b)).unwrap();
        assert_eq!((first.base_offset, first.last_offset), (0, 2));
        assert_eq!((second.base_offset, second.last_offset), (3, 4));
        assert!(log.read(P0, 0, 1 << 20).await.unwrap().is_empty(), "nothing durable yet");
        second.durable.wait().await.unwrap();
        first.durable.wait().await.unwrap();
        let info = log.partition_info(P0).unwrap();
        assert_eq!((info.high_watermark, info.log_end_offset), (5, 5));
        let read = log.read(P0, 0, 1 << 20).await.unwrap();
        assert_eq!(read, Bytes::from([a.to_vec(), with_offset(&b, 3).to_vec()].concat()));
        let from_middle = log.read(P0, 4, 1 << 20).await.unwrap();
        assert_eq!(from_middle, with_offset(&b, 3));
    });
}

#[test]
fn read_at_the_high_watermark_is_empty_and_outside_the_log_is_out_of_range() {
    run(|| async {
        let disk = SimDisk::new(2);
        let (log, _, _) = open(&disk, small_config()).await;
        log.append_batches(P0, &validated(&batch_of(2, 5, 0, 0)))
            .unwrap()
            .durable
            .wait()
            .await
            .unwrap();
        assert!(log.read(P0, 2, 100).await.unwrap().is_empty());
        assert!(matches!(
            log.read(P0, 3, 100).await,
            Err(ReadError::OffsetOutOfRange {
                requested: 3,
                log_start_offset: 0,
                high_watermark: 2
            })
        ));
        assert!(matches!(log.read(P0, -1, 100).await, Err(ReadError::OffsetOutOfRange { .. })));
        assert!(matches!(
            log.read(PartitionId(9), 0, 100).await,
            Err(ReadError::UnknownPartition(_))
        ));
    });
}

#[test]
fn a_read_returns_at_least_one_whole_batch_even_past_max_bytes() {
    run(|| async {
        let disk = SimDisk::new(3);
        let (log, _, _) = open(&disk, small_config()).await;
        let big = batch_of(4, 1000, 3, 0);
        log.append_batches(P0, &validated(&big)).unwrap();
        log.append_batches(P0, &validated(&big)).unwrap().durable.wait().await.unwrap();
        let read = log.read(P0, 0, 10).await.unwrap();
        assert_eq!(read, big, "exactly one batch (KIP-74)");
        let both = log.read(P0, 0, 2 * big.len()).await.unwrap();
        assert_eq!(both.len(), 2 * big.len());
    });
}

#[test]
fn a_lone_append_is_flushed_at_once_and_appends_during_a_flush_share_the_next_one() {
    run(|| async {
        let disk = SimDisk::new(4);
        disk.set_max_yields(5);
        let (log, _, _) = open(&disk, small_config()).await;
        let syncs_before = disk.sync_count();
        log.append_batches(P0, &validated(&batch_of(1, 10, 0, 0)))
            .unwrap()
            .durable
            .wait()
            .await
            .unwrap();
        assert_eq!(disk.sync_count() - syncs_before, 1, "one fdatasync for a lone append");
        let syncs_before = disk.sync_count();
        let mut pending = Vec::new();
        for i in 0..50 {
            pending
                .push(log.append_batches(P1, &validated(&batch_of(1, 10, i, 0))).unwrap().durable);
            futures_lite::future::yield_now().await;
        }
        for d in pending {
            d.wait().await.unwrap();
        }
        let syncs = disk.sync_count() - syncs_before;
        assert!(syncs < 50, "appends made during a flush share fdatasyncs ({syncs} for 50)");
        assert_eq!(log.partition_info(P1).unwrap().high_watermark, 50);
    });
}

/// Contract 5: appends under `deferring_flush` start no flush; the next append that is
/// not deferred has its flush carry them (one fdatasync for both), and deferred appends
/// alone are written once `deferred_flush_after` ran out.
#[test]
fn a_deferred_append_rides_the_next_flush_or_is_written_when_its_deferral_runs_out() {
    run(|| async {
        let disk = SimDisk::new(41);
        disk.set_max_yields(5);
        // A deferral far longer than the test: only another append can flush it.
        let config = LogConfig {
            deferred_flush_after: std::time::Duration::from_secs(3600),
            ..small_config()
        };
        let (log, _, _) = open(&disk, config).await;
        let syncs_before = disk.sync_count();
        // A reader waiting for data (a long-polling fetch) is woken by the deferred append.
        let woken = std::rc::Rc::new(std::cell::Cell::new(false));
        let reader = {
            let (log, woken) = (log.clone(), woken.clone());
            glommio::spawn_local(async move {
                log.more_to_read().await;
                woken.set(true);
            })
        };
        glommio::timer::sleep(std::time::Duration::from_millis(1)).await;
        assert!(!woken.get(), "nothing to read yet");
        let deferred =
            log.deferring_flush(|| log.append_batches(P0, &validated(&batch_of(1, 10, 0, 0))));
        let deferred = deferred.unwrap().durable;
        // The flusher gets every chance to run (its timer is an hour away).
        glommio::timer::sleep(std::time::Duration::from_millis(20)).await;
        assert!(!deferred.is_durable(), "a deferred append started a flush");
        assert!(woken.get(), "the waiting reader was not woken by the deferred append");
        reader.await;
        assert_eq!(disk.sync_count(), syncs_before);
        log.append_batches(P1, &validated(&batch_of(1, 10, 1, 0)))
            .unwrap()
            .durable
            .wait()
            .await
            .unwrap();
        assert!(deferred.is_durable(), "the next flush carried the deferred append");
        assert_eq!(disk.sync_count() - syncs_before, 1, "one fdatasync for both");
        assert_eq!(log.partition_info(P0).unwrap().high_watermark, 1);
        // `flush_deferred` makes a deferred append due at once.
        let deferred =
            log.deferring_flush(|| log.append_batches(P0, &validated(&batch_of(1, 10, 2, 0))));
        let deferred = deferred.unwrap().durable;
        glommio::timer::sleep(std::time::Duration::from_millis(20)).await;
        assert!(!deferred.is_durable());
        log.flush_deferred();
        deferred.wait().await.unwrap();
        drop(log);

        // A short deferral: a deferred append alone is written once it ran out.
        let disk = SimDisk::new(42);
        let config = LogConfig {
            deferred_flush_after: std::time::Duration::from_millis(2),
            ..small_config()
        };
        let (log, _, _) = open(&disk, config).await;
        let deferred =
            log.deferring_flush(|| log.append_batches(P0, &validated(&batch_of(1, 10, 0, 0))));
        deferred.unwrap().durable.wait().await.unwrap();
        assert_eq!(log.partition_info(P0).unwrap().high_watermark, 1);
    });
}

#[test]
fn crash_before_fsync_loses_only_unacknowledged_batches() {
    run(|| async {
        let disk = SimDisk::new(5);
        let (log, _, _) = open(&disk, small_config()).await;
        let acked: Vec<Bytes> = (0..5).map(|i| batch_of(2, 30, i, 0)).collect();
        for b in &acked {
            log.append_batches(P0, &validated(b)).unwrap().durable.wait().await.unwrap();
        }
        for i in 0..5 {
            let _ = log.append_batches(P0, &validated(&batch_of(2, 30, 100 + i, 0))).unwrap();
        }
        let disk = disk.crash();
        drop(log);
        let (log, _, report) = open(&disk, small_config()).await;
        let info = log.partition_info(P0).unwrap();
        assert!(info.high_watermark >= 10, "acknowledged batches survive: {report:?}");
        let recovered = read_all(&log, P0).await;
        for (i, b) in acked.iter().enumerate() {
            assert_eq!(recovered[i].1, with_offset(b, 2 * i as i64));
        }
        assert_eq!(info.high_watermark, info.log_end_offset, "recovered data is durable");
    });
}

#[test]
fn a_failed_fsync_poisons_the_log_and_every_pending_append_fails() {
    run(|| async {
        let disk = SimDisk::new(6);
        let (log, _, _) = open(&disk, small_config()).await;
        log.append_batches(P0, &validated(&batch_of(1, 10, 0, 0)))
            .unwrap()
            .durable
            .wait()
            .await
            .unwrap();
        disk.fail_next_sync();
        let a = log.append_batches(P0, &validated(&batch_of(1, 10, 1, 0))).unwrap();
        let b = log.append_batches(P0, &validated(&batch_of(1, 10, 2, 0))).unwrap();
        assert!(matches!(a.durable.wait().await, Err(StorageError::Fatal(_))));
        assert!(matches!(b.durable.wait().await, Err(StorageError::Fatal(_))));
        assert!(matches!(
            log.append_batches(P0, &validated(&batch_of(1, 10, 3, 0))),
            Err(AppendError::Storage(StorageError::Fatal(_)))
        ));
        assert_eq!(
            log.partition_info(P0).unwrap().high_watermark,
            1,
            "never advanced past the failure"
        );
        assert_eq!(
            log.read(P0, 0, 1 << 20).await.unwrap().len(),
            batch_of(1, 10, 0, 0).len(),
            "reads keep working"
        );
    });
}

#[test]
fn a_failed_write_is_fatal_too() {
    run(|| async {
        let disk = SimDisk::new(7);
        let (log, _, _) = open(&disk, small_config()).await;
        disk.fail_next_write();
        let a = log.append_batches(P0, &validated(&batch_of(1, 10, 1, 0))).unwrap();
        assert!(matches!(a.durable.wait().await, Err(StorageError::Fatal(_))));
    });
}

#[test]
fn enospc_preparing_a_segment_refuses_that_append_and_reads_keep_working() {
    run(|| async {
        let disk = SimDisk::new(8);
        let config = small_config();
        let (log, _, _) = open(&disk, config.clone()).await;
        // Let the first spare be prepared, then fill segment 0 (the next roll needs one more).
        for _ in 0..20 {
            futures_lite::future::yield_now().await;
        }
        disk.fail_next_create();
        let mut n = 0;
        let mut refused = None;
        for i in 0..200 {
            match log.append_batches(P0, &validated(&batch_of(1, 4000, i, 0))) {
                Ok(a) => {
                    a.durable.wait().await.unwrap();
                    n += 1;
                }
                Err(e) => {
                    refused = Some(e);
                    break;
                }
            }
        }
        let refused = refused.expect("an append was refused");
        match refused {
            AppendError::Storage(StorageError::Io { source, .. }) => {
                assert_eq!(source.raw_os_error().or(Some(28)), Some(28))
            }
            other => panic!("unexpected {other:?}"),
        }
        assert_eq!(log.partition_info(P0).unwrap().high_watermark, n);
        assert_eq!(
            read_all(&log, P0).await.len() as i64,
            n,
            "acknowledged data intact and readable"
        );
        // After the failure, preparation is retried and appends work again.
        let mut ok = false;
        for i in 0..100 {
            futures_lite::future::yield_now().await;
            if let Ok(a) = log.append_batches(P0, &validated(&batch_of(1, 4000, 1000 + i, 0))) {
                a.durable.wait().await.unwrap();
                ok = true;
                break;
            }
        }
        assert!(ok, "appends resume once a segment can be prepared");
    });
}

/// Appends one batch and waits for it; `Some(stored bytes)` if acknowledged, `None` if
/// refused with ENOSPC (anything else fails the test).
async fn append_or_enospc(log: &ShardLog<SimDisk>, batch: &Bytes) -> Option<Bytes> {
    match log.append_batches(P0, &validated(batch)) {
        Ok(appended) => {
            appended.durable.wait().await.expect("a full disk never makes the log fatal");
            Some(with_offset(batch, appended.base_offset))
        }
        Err(AppendError::Storage(StorageError::Io { source, .. })) => {
            assert_eq!(source.kind(), std::io::ErrorKind::StorageFull, "{source}");
            None
        }
        Err(other) => panic!("unexpected {other:?}"),
    }
}

#[test]
fn a_disk_that_stays_full_refuses_every_roll_keeps_serving_reads_and_resumes_when_space_returns() {
    run(|| async {
        let disk = SimDisk::new(18);
        let (log, _, _) = open(&disk, small_config()).await;
        for _ in 0..20 {
            futures_lite::future::yield_now().await;
        }
        disk.set_full(true);
        let mut acked = Vec::new();
        let mut refused = 0;
        for i in 0..120 {
            // Refused appends are retried at once, as concurrent produce requests would
            // be: none may roll into a segment whose creation then fails (fatal).
            match append_or_enospc(&log, &batch_of(1, 4000, i, 0)).await {
                Some(stored) => acked.push(stored),
                None => refused += 1,
            }
        }
        assert!(!acked.is_empty(), "the prepared segments were used first");
        assert!(refused > 50, "every append needing a new segment is refused: {refused}");
        let read: Vec<Bytes> = read_all(&log, P0).await.into_iter().map(|(_, b)| b).collect();
        assert!(read == acked, "acknowledged data intact and readable while full");
        assert!(log.checkpoint().await.is_err(), "a checkpoint cannot be written while full");

        disk.set_full(false);
        let mut resumed = 0;
        for i in 0..200 {
            if let Some(stored) = append_or_enospc(&log, &batch_of(1, 4000, 1000 + i, 0)).await {
                acked.push(stored);
                resumed += 1;
            }
            futures_lite::future::yield_now().await;
        }
        assert!(resumed > 150, "appends resume once segments can be created: {resumed}");
        log.checkpoint().await.expect("checkpoints resume too");

        let disk = disk.crash();
        drop(log);
        let (log, _, report) = open(&disk, small_config()).await;
        let read: Vec<Bytes> = read_all(&log, P0).await.into_iter().map(|(_, b)| b).collect();
        assert!(read == acked, "every acknowledged batch survives a crash: {report:?}");
    });
}

#[test]
fn reads_from_disk_after_cache_eviction_are_byte_identical_and_coalesced() {
    run(|| async {
        let disk = SimDisk::new(9);
        let config = LogConfig { tail_cache_bytes: 0, ..small_config() };
        let (log, _, _) = open(&disk, config).await;
        let mut expected = Vec::new();
        let mut last = None;
        for i in 0..60u64 {
            let p = if i % 3 == 0 { P1 } else { P0 };
            let b = batch_of(1 + (i % 4) as usize, 50 + i as usize * 7, i, i as i64);
            let appended = log.append_batches(p, &validated(&b)).unwrap();
            if p == P0 {
                expected.push(with_offset(&b, appended.base_offset));
            }
            last = Some(appended.durable);
        }
        last.unwrap().wait().await.unwrap();
        let all: Vec<Bytes> = read_all(&log, P0).await.into_iter().map(|(_, b)| b).collect();
        assert_eq!(all, expected);
    });
}

#[test]
fn offset_for_timestamp_returns_the_exact_record() {
    run(|| async {
        let disk = SimDisk::new(10);
        let (log, _, _) = open(&disk, LogConfig { tail_cache_bytes: 0, ..small_config() }).await;
        // batch 0: offsets 0..=3 at ts 100,110,120,130; batch 1: offsets 4..=5 at 500,510
        log.append_batches(P0, &validated(&record_batch(&vec![vec![1]; 4], 100, 10))).unwrap();
        let d =
            log.append_batches(P0, &validated(&record_batch(&vec![vec![2]; 2], 500, 10))).unwrap();
        d.durable.wait().await.unwrap();
        let table = [
            (0, Some((0, 100))),
            (111, Some((2, 120))),
            (130, Some((3, 130))),
            (131, Some((4, 500))),
            (505, Some((5, 510))),
            (511, None),
        ];
        for (ts, expected) in table {
            assert_eq!(log.offset_for_timestamp(P0, ts).await.unwrap(), expected, "ts {ts}");
        }
    });
}

#[test]
fn internal_entries_come_back_in_log_order_since_each_streams_latest_snapshot() {
    run(|| async {
        let disk = SimDisk::new(11);
        let (log, internal, _) = open(&disk, small_config()).await;
        assert!(internal.is_empty());
        log.append_internal(InternalStream::GroupOffsets, false, b"g1").unwrap();
        log.append_internal(InternalStream::Metadata, true, b"m-snap1").unwrap();
        log.append_internal(InternalStream::GroupOffsets, true, b"g-snap").unwrap();
        log.append_internal(InternalStream::Metadata, false, b"m2").unwrap();
        log.append_batches(P0, &validated(&batch_of(1, 10, 0, 0))).unwrap();
        let d = log.append_internal(InternalStream::GroupOffsets, false, b"g3").unwrap();
        d.wait().await.unwrap();
        let expect = |entries: &[InternalEntry]| {
            let got: Vec<&[u8]> = entries.iter().map(|e| &e.payload[..]).collect();
            assert_eq!(got, vec![&b"m-snap1"[..], b"g-snap", b"m2", b"g3"]);
            assert!(entries[0].snapshot && entries[1].snapshot && !entries[2].snapshot);
            assert_eq!(entries[1].stream, InternalStream::GroupOffsets);
        };
        drop(log);
        let disk = disk.crash();
        let (log, internal, _) = open(&disk, small_config()).await;
        expect(&internal);
        log.checkpoint().await.unwrap();
        drop(log);
        let disk = disk.crash();
        let (_, internal, report) = open(&disk, small_config()).await;
        assert!(report.checkpoint_position.is_some());
        expect(&internal);
    });
}

#[test]
fn deleting_all_checkpoints_rebuilds_the_same_state_from_the_log_alone() {
    run(|| async {
        let disk = SimDisk::new(12);
        let (log, _, _) = open(&disk, small_config()).await;
        let mut last = None;
        for i in 0..200u64 {
            let p = if i % 2 == 0 { P0 } else { P1 };
            last = Some(
                log.append_batches(p, &validated(&batch_of(2, 100, i, i as i64))).unwrap().durable,
            );
            if i == 120 {
                last.take().unwrap().wait().await.unwrap();
                log.checkpoint().await.unwrap();
                log.apply_retention(
                    P1,
                    RetentionPolicy { retention_bytes: Some(3000), retention_ms: None },
                    0,
                );
            }
        }
        last.unwrap().wait().await.unwrap();
        log.close().await.unwrap();
        drop(log);
        let snapshot = |log: &ShardLog<SimDisk>| [P0, P1].map(|p| log.partition_info(p).unwrap());
        let (with_ckpt, _, report) = open(&disk, small_config()).await;
        assert!(report.checkpoint_position.is_some());
        let expected = snapshot(&with_ckpt);
        let expected_data = (read_all(&with_ckpt, P0).await, read_all(&with_ckpt, P1).await);
        assert!(expected[1].log_start_offset > 0, "retention moved P1");
        drop(with_ckpt);
        let disk = disk.crash();
        disk.remove_all_checkpoints();
        let (rebuilt, _, report) = open(&disk, small_config()).await;
        assert_eq!(report.checkpoint_position, None);
        assert_eq!(snapshot(&rebuilt), expected);
        assert_eq!((read_all(&rebuilt, P0).await, read_all(&rebuilt, P1).await), expected_data);
    });
}

#[test]
fn retention_moves_log_start_by_whole_batches_and_frees_unpinned_segments() {
    run(|| async {
        let disk = SimDisk::new(13);
        let config = small_config();
        let (log, _, _) = open(&disk, config.clone()).await;
        // P1 gets one early batch and keeps it (long retention); P0 fills several segments.
        log.append_batches(P1, &validated(&batch_of(1, 100, 0, 0))).unwrap();
        let mut last = None;
        for i in 0..120u64 {
            last = Some(
                log.append_batches(P0, &validated(&batch_of(4, 500, i, i as i64 * 1000)))
                    .unwrap()
                    .durable,
            );
        }
        last.unwrap().wait().await.unwrap();
        log.checkpoint().await.unwrap();
        let before = log.segments();
        assert!(before.len() >= 4, "{before:?}");
        log.apply_retention(
            P0,
            RetentionPolicy { retention_ms: Some(10_000), retention_bytes: None },
            100_000,
        );
        let info = log.partition_info(P0).unwrap();
        assert_eq!(info.log_start_offset, 4 * 90, "batches older than now - 10 s are gone");
        assert!(matches!(log.read(P0, 0, 100).await, Err(ReadError::OffsetOutOfRange { .. })));
        assert_eq!(batches_in(&log.read(P0, 360, 1).await.unwrap())[0].0, 360);
        let pinned = log.pinned_segments();
        assert_eq!(pinned.iter().find(|(p, _)| *p == P1).unwrap().1, 0, "P1 pins segment 0");
        assert_eq!(log.segments(), before, "P1's batch keeps segment 0 (and so all after it)");
        log.apply_retention(
            P1,
            RetentionPolicy { retention_ms: Some(0), retention_bytes: None },
            100_000,
        );
        log.checkpoint().await.unwrap();
        for _ in 0..50 {
            futures_lite::future::yield_now().await;
        }
        let after = log.segments();
        assert!(after.len() < before.len(), "segments freed: {before:?} -> {after:?}");
        let p0_pin = log.pinned_segments().iter().find(|(p, _)| *p == P0).unwrap().1;
        assert_eq!(after[0], p0_pin, "the oldest remaining segment is the one P0 pins");
        // The probes count the deleted files and every flush (one histogram record each).
        let removed = before.iter().filter(|b| !after.contains(b)).count() as u64;
        for _ in 0..1000 {
            if log.probes().retention_deleted_segments == removed {
                break;
            }
            futures_lite::future::yield_now().await;
        }
        let probes = log.probes();
        assert_eq!(probes.retention_deleted_segments, removed);
        assert_eq!(probes.retention_deleted_bytes, removed * config.segment_size_bytes);
        assert_eq!(probes.fsync_duration_us.count(), probes.flushes);
        assert_eq!(probes.fsync_bytes.sum(), probes.flushed_bytes);
        assert!(probes.appends_per_fsync.sum() >= 121, "every batch was in a flush");
        // Size retention keeps the newest batches within the limit.
        log.apply_retention(
            P0,
            RetentionPolicy { retention_ms: None, retention_bytes: Some(10_000) },
            0,
        );
        let info = log.partition_info(P0).unwrap();
        assert!(info.size_bytes <= 10_000 && info.size_bytes > 10_000 - 2100, "{info:?}");
        log.checkpoint().await.unwrap(); // the LogStart entry is durable with the next flush
        drop(log);
        let disk = disk.crash();
        let (log, _, _) = open(&disk, config).await;
        assert_eq!(log.partition_info(P0).unwrap().log_start_offset, info.log_start_offset);
    });
}

#[test]
fn a_bit_flip_in_durable_data_truncates_there_and_reports_what_was_dropped() {
    run(|| async {
        let disk = SimDisk::new(14);
        let (log, _, _) = open(&disk, small_config()).await;
        for i in 0..10 {
            log.append_batches(P0, &validated(&batch_of(1, 100, i, 0)))
                .unwrap()
                .durable
                .wait()
                .await
                .unwrap();
        }
        drop(log);
        // Entry 5 sits on page 5 (one flush per append, each padded to a page).
        disk.flip_durable_bit(0, 5 * 4096 + 40, 3);
        let disk = disk.crash();
        let (log, _, report) = open(&disk, small_config()).await;
        assert_eq!(report.truncated_at, Some(5 * 4096));
        assert!(report.dropped_bytes > 4 * 4096, "{report:?}");
        assert_eq!(log.partition_info(P0).unwrap().high_watermark, 5);
        // The log continues cleanly after the truncation point.
        log.append_batches(P0, &validated(&batch_of(1, 100, 99, 0)))
            .unwrap()
            .durable
            .wait()
            .await
            .unwrap();
        drop(log);
        let (log, _, report) = open(&disk.crash(), small_config()).await;
        assert_eq!(report.truncated_at, None, "{report:?}");
        assert_eq!(log.partition_info(P0).unwrap().high_watermark, 6);
    });
}

/// Found by shards/tests/replication_sim_disk.rs (seed 2703): a recovery that truncates
/// a torn entry mid-page resumes with its durable position there, off a page boundary,
/// until the next flush pads to one. A checkpoint taken meanwhile was written at that
/// position (and old checkpoints and segments released on its word), then refused by
/// the next recovery, which takes page-aligned checkpoints only: the log replayed from
/// what segments were left, without the internal entries the released ones held.
#[test]
fn no_checkpoint_is_written_that_the_next_recovery_would_refuse() {
    run(|| async {
        let disk = SimDisk::new(17);
        let (log, _, _) = open(&disk, small_config()).await;
        let first = log.append_internal(InternalStream::Metadata, false, &[1; 100]).unwrap();
        first.wait().await.unwrap();
        // Two entries in one flush, on one page; the second one's bytes then rot.
        log.append_internal(InternalStream::Metadata, false, &[2; 100]).unwrap();
        let second = log.append_internal(InternalStream::Metadata, false, &[3; 100]).unwrap();
        second.wait().await.unwrap();
        drop(log);
        let bytes = disk.segment_bytes(0).unwrap();
        let third = bytes.windows(100).position(|w| w == [3; 100]).expect("on disk");
        assert_ne!(third / 4096, 0, "the first flush holds the first entry alone");
        disk.flip_durable_bit(0, third + 50, 3);
        let disk = disk.crash();
        let (log, internal, report) = open(&disk, small_config()).await;
        let truncated_at = report.truncated_at.expect("the rotten entry is cut off");
        assert_ne!(truncated_at % 4096, 0, "{report:?}");
        assert_eq!(internal.len(), 2, "{report:?}");
        log.checkpoint().await.unwrap();
        drop(log);
        let disk = disk.crash();
        let (log, internal, report) = open(&disk, small_config()).await;
        let written = disk.checkpoint_count() > 0;
        assert_eq!(written, report.checkpoint_position.is_some(), "{report:?}");
        assert_eq!(internal.len(), 2, "{report:?}");
        // After the next flush the log is on a page boundary again, and checkpoints there.
        let third = log.append_internal(InternalStream::Metadata, false, &[4; 100]).unwrap();
        third.wait().await.unwrap();
        log.checkpoint().await.unwrap();
        drop(log);
        let (_, internal, report) = open(&disk.crash(), small_config()).await;
        assert!(report.checkpoint_position.is_some(), "{report:?}");
        assert_eq!(internal.len(), 3, "{report:?}");
    });
}

#[test]
fn invalid_and_oversized_batches_are_refused_and_nothing_is_written() {
    run(|| async {
        let disk = SimDisk::new(15);
        let (log, _, _) = open(&disk, small_config()).await;
        let big = batch_of(1, 9000, 0, 0);
        assert!(matches!(
            log.append_batches(P0, &validated(&big)),
            Err(AppendError::TooLarge { .. })
        ));
        assert!(matches!(
            log.append_batches(PartitionId(77), &validated(&batch_of(1, 1, 0, 0))),
            Err(AppendError::UnknownPartition(_))
        ));
        let mut bad = batch_of(1, 10, 0, 0).to_vec();
        let n = bad.len();
        bad[n - 1] ^= 1;
        assert!(matches!(split_batches(&Bytes::from(bad)), Err(BatchError::CrcMismatch { .. })));
        assert_eq!(log.partition_info(P0).unwrap().log_end_offset, 0);
        assert_eq!(log.pending_bytes(), 0);
    });
}

#[test]
fn dropped_partitions_stay_dropped_after_recovery() {
    run(|| async {
        let disk = SimDisk::new(16);
        let (log, _, _) = open(&disk, small_config()).await;
        log.append_batches(P1, &validated(&batch_of(1, 10, 0, 0))).unwrap();
        log.drop_partition(P1);
        log.append_batches(P0, &validated(&batch_of(1, 10, 0, 0)))
            .unwrap()
            .durable
            .wait()
            .await
            .unwrap();
        drop(log);
        let (log, _, _) = ShardLog::open(disk.crash(), small_config()).await.unwrap();
        assert!(log.partition_info(P1).is_none());
        assert!(log.partition_info(P0).is_some());
    });
}

#[test]
fn idle_time_zero_fill_runs_ahead_of_the_writer_and_never_touches_log_data() {
    run(|| async {
        let disk = SimDisk::new(17);
        disk.set_lazy_zero_fill(true);
        let config = LogConfig { segment_size_bytes: 4 << 20, ..small_config() };
        let (log, _, _) = open(&disk, config.clone()).await;
        let mut expected = Vec::new();
        for i in 0..300u64 {
            let b = batch_of(2, 900, i, 0);
            let a = log.append_batches(P0, &validated(&b)).unwrap();
            expected.push(with_offset(&b, a.base_offset));
            if i % 3 == 0 {
                a.durable.wait().await.unwrap();
                for _ in 0..10 {
                    futures_lite::future::yield_now().await;
                }
            }
            if i % 50 == 0 {
                // Zeros are written only after the log has been quiet for a moment.
                glommio::timer::sleep(std::time::Duration::from_millis(5)).await;
            }
        }
        log.checkpoint().await.unwrap();
        assert!(disk.zero_fill_count() > 0, "zero-fill ran in idle time");
        assert!(log.probes().zero_filled_bytes > 0);
        drop(log);
        let (log, _, _) = open(&disk.crash(), config).await;
        let got: Vec<Bytes> = read_all(&log, P0).await.into_iter().map(|(_, b)| b).collect();
        assert_eq!(got, expected);
    });
}

#[test]
fn a_clean_close_keeps_the_spare_segment_and_a_crash_after_reopen_is_still_checked() {
    run(|| async {
        let disk = SimDisk::new(18);
        let (log, _, _) = open(&disk, small_config()).await;
        let mut last = None;
        for i in 0..20 {
            last = Some(log.append_batches(P0, &validated(&batch_of(2, 500, i, 0))).unwrap());
        }
        last.unwrap().durable.wait().await.unwrap();
        for _ in 0..20 {
            futures_lite::future::yield_now().await;
        }
        let segments = log.segments();
        log.close().await.unwrap();
        drop(log);
        let (log, _, report) = open(&disk, small_config()).await;
        assert_eq!(log.segments(), segments, "the prepared spare survives a clean close");
        assert_eq!(report.truncated_at, None);
        // Appends after the clean reopen, lost in a crash with torn bytes: not skipped.
        disk.flip_bits_on_crash(2);
        for i in 0..5 {
            let _ = log.append_batches(P0, &validated(&batch_of(2, 500, 100 + i, 0))).unwrap();
        }
        futures_lite::future::yield_now().await;
        let crashed = disk.crash();
        drop(log);
        let (log, _, _) = open(&crashed, small_config()).await;
        let info = log.partition_info(P0).unwrap();
        assert!(info.high_watermark >= 40);
        assert_eq!(read_all(&log, P0).await.len() as i64 * 2, info.high_watermark);
    });
}

/// DeleteRecords' storage half: the log start moves inside a batch, durably, through a
/// crash with and without a checkpoint, and retention never moves it back.
#[test]
fn advance_log_start_inside_a_batch_is_durable_and_survives_crashes_and_checkpoints() {
    run(|| async {
        let disk = SimDisk::new(21);
        let config = small_config();
        let (log, _, _) = open(&disk, config.clone()).await;
        // Offsets [0..=3] [4..=7] [8..=11].
        let mut last = None;
        for i in 0..3u64 {
            last = Some(log.append_batches(P0, &validated(&batch_of(4, 50, i, 1000))).unwrap());
        }
        last.unwrap().durable.wait().await.unwrap();
        let above = log.advance_log_start(P0, 13);
        let refused = matches!(
            above,
            Err(LogStartError::AboveHighWatermark { requested: 13, high_watermark: 12 })
        );
        assert!(refused, "past the high watermark is refused");
        let (start, durable) = log.advance_log_start(P0, 6).unwrap();
        assert_eq!(start, 6);
        assert!(!durable.is_durable(), "the LogStart entry waits for its flush");
        durable.wait().await.unwrap();
        let info = log.partition_info(P0).unwrap();
        assert_eq!((info.log_start_offset, info.high_watermark), (6, 12));
        assert!(matches!(log.read(P0, 5, 1 << 20).await, Err(ReadError::OffsetOutOfRange { .. })));
        let from_start = batches_in(&log.read(P0, 6, 1 << 20).await.unwrap());
        assert_eq!(from_start[0].0, 4, "the batch holding the log start comes back whole");
        let (lower, _) = log.advance_log_start(P0, 2).unwrap();
        assert_eq!(lower, 6, "never moves backward");
        // Crash without a checkpoint: the LogStart entry replays.
        drop(log);
        let disk = disk.crash();
        let (log, _, _) = open(&disk, config.clone()).await;
        assert_eq!(log.partition_info(P0).unwrap().log_start_offset, 6);
        // A checkpoint taken with the log start inside a batch restores it.
        log.checkpoint().await.unwrap();
        drop(log);
        let disk = disk.crash();
        let (log, _, _) = open(&disk, config.clone()).await;
        let info = log.partition_info(P0).unwrap();
        assert_eq!((info.log_start_offset, info.high_watermark), (6, 12));
        assert_eq!(batches_in(&log.read(P0, 6, 1 << 20).await.unwrap())[0].0, 4);
        // Retention that keeps everything leaves it; retention that drops the batch moves on.
        log.apply_retention(
            P0,
            RetentionPolicy { retention_ms: Some(i64::MAX), ..Default::default() },
            0,
        );
        assert_eq!(log.partition_info(P0).unwrap().log_start_offset, 6);
        let half = log.partition_info(P0).unwrap().size_bytes / 2 + 1;
        log.apply_retention(
            P0,
            RetentionPolicy { retention_bytes: Some(half), ..Default::default() },
            0,
        );
        assert_eq!(log.partition_info(P0).unwrap().log_start_offset, 8);
        let (end, durable) = log.advance_log_start(P0, 12).unwrap();
        durable.wait().await.unwrap();
        assert_eq!(end, 12);
        assert_eq!(log.read(P0, 12, 1 << 20).await.unwrap(), Bytes::new());
        drop(log);
        let (log, _, _) = open(&disk.crash(), config).await;
        assert_eq!(log.partition_info(P0).unwrap().log_start_offset, 12);
    });
}

#[test]
fn a_replicas_copy_keeps_its_leaders_offsets_and_bytes_and_survives_a_crash() {
    run(|| async {
        let config = small_config();
        // The leader: [0..=3] [4..=7] [8..=11], stamped with epoch 5.
        let (leader, _, _) = open(&SimDisk::new(31), config.clone()).await;
        let mut last = None;
        for i in 0..3u64 {
            let batch = validated(&batch_of(4, 50, i, 1000));
            last = Some(leader.append_batches_in_epoch(P0, Some(5), &batch).unwrap());
        }
        last.unwrap().durable.wait().await.unwrap();
        let copied = leader.read(P0, 4, 1 << 20).await.unwrap();
        // The follower holds nothing; its start moves past its end, to the leader's 4.
        let disk = SimDisk::new(32);
        let (follower, _, _) = open(&disk, config.clone()).await;
        let batches = validated(&copied);
        let refused = follower.append_at_offsets(P0, &batches);
        let not_at_end = matches!(refused, Err(AppendError::NotAtEnd { base_offset: 4, .. }));
        assert!(not_at_end, "a copy starts at the partition's next offset");
        let (start, durable) = follower.advance_log_start_past_end(P0, 4).unwrap();
        durable.wait().await.unwrap();
        assert_eq!(start, 4);
        let appended = follower.append_at_offsets(P0, &batches).unwrap();
        assert_eq!((appended.base_offset, appended.last_offset), (4, 11));
        // Past the end only with nothing unflushed below: the copy is not durable yet.
        let early = follower.advance_log_start_past_end(P0, 20);
        assert!(matches!(early, Err(LogStartError::AboveHighWatermark { .. })));
        appended.durable.wait().await.unwrap();
        assert_eq!(follower.read(P0, 4, 1 << 20).await.unwrap(), copied, "byte-identical");
        assert_eq!(follower.end_offset_for_epoch(P0, 5, 5), Some((5, 12)), "epochs from the copy");
        drop(follower);
        let (follower, _, _) = open(&disk.crash(), config).await;
        let info = follower.partition_info(P0).unwrap();
        assert_eq!((info.log_start_offset, info.high_watermark), (4, 12));
        assert_eq!(follower.read(P0, 4, 1 << 20).await.unwrap(), copied);
        // Later appends go on at the leader's next offset.
        let next = follower.append_batches(P0, &validated(&batch_of(1, 10, 9, 1))).unwrap();
        assert_eq!(next.base_offset, 12);
    });
}

#[test]
fn advancing_the_log_start_frees_the_segments_nobody_needs_any_more() {
    run(|| async {
        let disk = SimDisk::new(22);
        let (log, _, _) = open(&disk, small_config()).await;
        let mut last = None;
        for i in 0..120u64 {
            let batch = batch_of(4, 500, i, 1000);
            last = Some(log.append_batches(P0, &validated(&batch)).unwrap().durable);
        }
        last.unwrap().wait().await.unwrap();
        log.checkpoint().await.unwrap();
        let before = log.segments();
        assert!(before.len() >= 4, "{before:?}");
        let high_watermark = log.partition_info(P0).unwrap().high_watermark;
        let (start, durable) = log.advance_log_start(P0, high_watermark - 4).unwrap();
        durable.wait().await.unwrap();
        assert_eq!(start, high_watermark - 4);
        let last_batch = batch_of(4, 500, 119, 1000).len() as u64;
        let size = log.partition_info(P0).unwrap().size_bytes;
        assert_eq!(size, last_batch, "only the batch starting at the log start is left");
        log.checkpoint().await.unwrap();
        for _ in 0..50 {
            futures_lite::future::yield_now().await;
        }
        let after = log.segments();
        assert!(after.len() < before.len(), "segments freed: {before:?} -> {after:?}");
    });
}

/// How a test trims a partition wholly: retention, DeleteRecords, a dropped partition.
#[derive(Clone, Copy, Debug)]
enum WholeTrim {
    Retention,
    DeleteRecords,
    Drop,
}

impl WholeTrim {
    const ALL: [WholeTrim; 3] = [WholeTrim::Retention, WholeTrim::DeleteRecords, WholeTrim::Drop];

    fn apply(self, log: &ShardLog<SimDisk>, p: PartitionId) {
        match self {
            WholeTrim::Retention => {
                let everything = RetentionPolicy { retention_ms: Some(0), retention_bytes: None };
                log.apply_retention(p, everything, i64::MAX);
                assert_eq!(log.partition_info(p).unwrap().size_bytes, 0, "{self:?}");
            }
            WholeTrim::DeleteRecords => {
                let high_watermark = log.partition_info(p).unwrap().high_watermark;
                log.advance_log_start(p, high_watermark).unwrap();
            }
            WholeTrim::Drop => log.drop_partition(p),
        }
    }
}

/// P1 fills segment 0 and part of segment 1, then P0 a few more segments; everything is
/// durable and checkpointed (the checkpoint lists P1's batches in segment 0). Returns the
/// log and each partition's state.
async fn segment_0_held_by_p1(disk: &SimDisk) -> (ShardLog<SimDisk>, Vec<PartitionState>) {
    let (log, _, _) = open(disk, small_config()).await;
    let mut last = None;
    for (p, batches) in [(P1, 40u64), (P0, 80)] {
        for i in 0..batches {
            let batch = batch_of(4, 500, i, 1_000);
            last = Some(log.append_batches(p, &validated(&batch)).unwrap().durable);
        }
    }
    last.unwrap().wait().await.unwrap();
    log.checkpoint().await.unwrap();
    let segment_1 = small_config().segment_size_bytes;
    let pinned = log.pinned_segments();
    assert_eq!(pinned, [(P0, segment_1), (P1, 0)], "P1 alone keeps segment 0");
    let state = partitions_state(&log, &[P0, P1]).await;
    (log, state)
}

/// `segment_0_held_by_p1` on `SimDisk::new(seed)`, then P1 trimmed wholly by `trim` and
/// the segments released, as a retention pass ends. `stall`: the trim's flush never lands.
async fn p1_trimmed(
    seed: u64,
    trim: WholeTrim,
    stall: bool,
) -> (SimDisk, ShardLog<SimDisk>, Vec<PartitionState>) {
    let disk = SimDisk::new(seed);
    let (log, before) = segment_0_held_by_p1(&disk).await;
    if stall {
        disk.stall_writes_after(0);
    }
    trim.apply(&log, P1);
    log.release_segments();
    (disk, log, before)
}

/// Whether segment 0's file is removed within `yields` turns of the executor.
async fn segment_0_goes(disk: &SimDisk, yields: usize) -> bool {
    for _ in 0..yields {
        if disk.segment_bytes(0).is_none() {
            return true;
        }
        futures_lite::future::yield_now().await;
    }
    disk.segment_bytes(0).is_none()
}

/// Every partition the recovered log knows has its batches in segment files that exist,
/// and reads back whole.
async fn assert_every_indexed_batch_reads_back(log: &ShardLog<SimDisk>, what: &str) {
    let mut with_data: Vec<PartitionId> = [P0, P1]
        .into_iter()
        .filter(|&p| log.partition_info(p).is_some_and(|i| i.size_bytes > 0))
        .collect();
    let mut pinning: Vec<PartitionId> = log.pinned_segments().iter().map(|(p, _)| *p).collect();
    with_data.sort_unstable();
    pinning.sort_unstable();
    assert_eq!(
        pinning,
        with_data,
        "{what}: a partition's oldest batch lies in no segment file (segments {:?})",
        log.segments()
    );
    partitions_state(log, &with_data).await;
}

/// A trim (retention's or DeleteRecords' `LogStart`, a `DropPartition`) frees segment 0,
/// and the power goes out before the trim's entry is durable. The recovered log starts at
/// the checkpoint, which lists P1's batches in segment 0, and replays no trim: segment 0
/// must still be there (docs/storage.md, "Retention and pinning"; state.rs invariant 2).
#[test]
fn a_trim_frees_a_segment_only_once_its_entry_is_durable() {
    for trim in WholeTrim::ALL {
        run(move || async move {
            let (disk, log, before) = p1_trimmed(25, trim, true).await;
            // Time for maintenance to delete what it was told to (it did, before the fix).
            segment_0_goes(&disk, 200).await;
            drop(log);
            let (log, _, report) = open(&disk.crash(), small_config()).await;
            assert!(report.checkpoint_position.is_some());
            let what = format!("{trim:?}, not durable");
            assert_every_indexed_batch_reads_back(&log, &what).await;
            assert_eq!(partitions_state(&log, &[P0, P1]).await, before, "{what}");
        });
    }
}

/// The same trims, made durable: then the segment goes (without waiting for another
/// checkpoint), and a crash after that recovers the trim.
#[test]
fn a_durable_trim_frees_its_segment_without_another_checkpoint() {
    for trim in WholeTrim::ALL {
        run(move || async move {
            let (disk, log, _) = p1_trimmed(26, trim, false).await;
            let after = log.append_internal(InternalStream::GroupOffsets, false, b"o").unwrap();
            after.wait().await.unwrap();
            assert!(segment_0_goes(&disk, 1_000).await, "{trim:?}: segment 0 was not freed");
            drop(log);
            let (log, _, _) = open(&disk.crash(), small_config()).await;
            let what = format!("{trim:?}, durable");
            assert_every_indexed_batch_reads_back(&log, &what).await;
            let p1 = log.partition_info(P1).filter(|i| i.size_bytes > 0);
            assert!(p1.is_none(), "{what}: P1's trim was recovered: {p1:?}");
        });
    }
}

/// On a full disk a trim's entry can be refused (it needs a segment that cannot be
/// created): then only a checkpoint made after the trim carries it, and the segment it
/// freed stays until one is written (state.rs invariant 2). A crash before that recovers
/// P1's batches from the older checkpoint; a crash after it recovers the trim.
#[test]
fn a_trim_the_log_cannot_take_frees_its_segment_once_a_checkpoint_carries_it() {
    run(|| async {
        let disk = SimDisk::new(27);
        let (log, before) = segment_0_held_by_p1(&disk).await;
        disk.set_full(true);
        // Fill the current segment to its end with entries of a LogStart's size.
        let mut i = 0;
        while append_or_enospc(&log, &batch_of(1, 4000, 1000 + i, 0)).await.is_some() {
            i += 1;
        }
        while let Ok(d) = log.append_internal(InternalStream::GroupOffsets, false, &[0; 8]) {
            d.wait().await.unwrap();
        }
        WholeTrim::Retention.apply(&log, P1);
        log.release_segments();
        segment_0_goes(&disk, 200).await;
        {
            // A power loss now (on a copy of the disk; this log goes on).
            let crashed = SimDisk::from_image(disk.image()).crash();
            let (recovered, _, _) = open(&crashed, small_config()).await;
            assert_every_indexed_batch_reads_back(&recovered, "a trim in no entry").await;
            let p1 = partitions_state(&recovered, &[P1]).await;
            assert_eq!(p1[..], before[1..], "P1 as checkpointed");
            recovered.close().await.unwrap();
        }

        disk.set_full(false);
        while append_or_enospc(&log, &batch_of(1, 4000, 2000 + i, 0)).await.is_none() {
            futures_lite::future::yield_now().await; // the segment is created again
        }
        assert!(disk.segment_bytes(0).is_some(), "no checkpoint carries the trim yet");
        log.checkpoint().await.unwrap();
        assert!(segment_0_goes(&disk, 1_000).await, "the checkpoint carries the trim");
        drop(log);
        let (log, _, _) = open(&disk.crash(), small_config()).await;
        assert_every_indexed_batch_reads_back(&log, "a checkpointed trim").await;
        assert_eq!(log.partition_info(P1).unwrap().size_bytes, 0, "P1's trim recovered");
    });
}

/// A retention pass over many partitions trims each with `trim_by_retention` and frees
/// segments once at its end (`release_segments`): trimming alone frees nothing, the one
/// release frees what a release after every partition would have.
#[test]
fn a_retention_pass_trims_every_partition_and_frees_segments_once_at_its_end() {
    run(|| async {
        let disk = SimDisk::new(23);
        let (log, _, _) = open(&disk, small_config()).await;
        let partitions: Vec<_> = (0..40).map(|p| PartitionId::new(7, p)).collect();
        let mut last = None;
        for round in 0..6u64 {
            for (i, &p) in partitions.iter().enumerate() {
                log.ensure_partition(p);
                let batch = batch_of(2, 500, round * 100 + i as u64, round as i64 * 1000);
                last = Some(log.append_batches(p, &validated(&batch)).unwrap().durable);
            }
        }
        last.unwrap().wait().await.unwrap();
        log.checkpoint().await.unwrap();
        let before = log.segments();
        assert!(before.len() >= 4, "{before:?}");
        let policy = RetentionPolicy { retention_ms: Some(1_500), retention_bytes: None };
        let moved: Vec<bool> =
            partitions.iter().map(|&p| log.trim_by_retention(p, policy, 5_000)).collect();
        assert!(moved.iter().all(|m| *m), "every partition's old batches expired");
        for &p in &partitions {
            assert_eq!(log.partition_info(p).unwrap().log_start_offset, 8, "rounds 0-3 gone");
        }
        // P0 and P1 are empty and pin nothing. (A checkpoint releases segments too.)
        for _ in 0..50 {
            futures_lite::future::yield_now().await;
        }
        assert_eq!(log.segments(), before, "trimming alone frees no segment");
        log.release_segments();
        for _ in 0..50 {
            futures_lite::future::yield_now().await;
        }
        let after = log.segments();
        assert!(after.len() < before.len(), "segments freed: {before:?} -> {after:?}");
        let oldest_pin = log.pinned_segments().iter().map(|(_, base)| *base).min().unwrap();
        assert_eq!(after[0], oldest_pin, "the oldest segment left is the oldest one pinned");
        for &p in &partitions {
            assert_eq!(batches_in(&log.read(p, 8, 1).await.unwrap())[0].0, 8, "{p:?} readable");
        }
    });
}

/// What a retention pass over many partitions costs when segments are released after
/// each partition (`apply_retention`, as the shard's pass did) and once at its end. Run by
/// hand; it prints, asserts no time: `cargo test --release -p shardlog-storage --test
/// log_sim retention_pass_cost -- --ignored --nocapture`.
#[test]
#[ignore]
fn retention_pass_cost_per_partition_release_against_one_release() {
    for partitions in [5_000u32, 20_000, 50_000] {
        for once in [false, true] {
            run(move || async move {
                let disk = SimDisk::new(24);
                let (log, _, _) = open(&disk, small_config()).await;
                let ids: Vec<_> = (0..partitions).map(|p| PartitionId::new(9, p)).collect();
                let mut last = None;
                for &p in &ids {
                    log.ensure_partition(p);
                    let batch = batch_of(1, 10, p.0, 0);
                    last = Some(log.append_batches(p, &validated(&batch)).unwrap().durable);
                }
                last.unwrap().wait().await.unwrap();
                let policy = RetentionPolicy { retention_ms: Some(0), retention_bytes: None };
                let started = std::time::Instant::now();
                for &p in &ids {
                    if once {
                        log.trim_by_retention(p, policy, 1_000);
                    } else {
                        log.apply_retention(p, policy, 1_000);
                    }
                }
                if once {
                    log.release_segments();
                }
                let how = if once { "one release" } else { "release per partition" };
                println!("{partitions} partitions, {how}: {:?}", started.elapsed());
            });
        }
    }
}

/// Waits (bounded) until the simulated disk holds a segment file at `base`.
async fn wait_for_segment_file(disk: &SimDisk, base: u64) {
    for _ in 0..1000 {
        if disk.segment_bytes(base).is_some() {
            return;
        }
        glommio::timer::sleep(std::time::Duration::from_millis(1)).await;
    }
    panic!("segment {base} was never created");
}

/// Seed 1241 of the broker power-loss test: a checkpoint exactly at the end of segment T,
/// then the writer rolls into U before maintenance has created U. Deleting T then (the
/// checkpoint "covers" it) left no file holding the checkpoint position, so recovery
/// ignored the checkpoint and every internal entry that lived only in it was lost.
/// Here U's creation fails (ENOSPC: the window stays open) and the power goes out.
#[test]
fn a_checkpoint_at_a_segment_end_stays_usable_while_the_next_segment_does_not_exist() {
    run(|| async {
        let config = LogConfig { segment_size_bytes: 16 << 10, ..small_config() };
        let seg = config.segment_size_bytes;
        let disk = SimDisk::new(1241);
        let (log, _, _) = open(&disk, config.clone()).await;
        let metadata = log.append_internal(InternalStream::Metadata, true, b"topic table");
        metadata.unwrap().wait().await.unwrap();
        wait_for_segment_file(&disk, seg).await;
        // One page per awaited flush: the log fills segment 0, then segment T exactly.
        while log.durable_position() < seg {
            let d = log.append_internal(InternalStream::GroupOffsets, false, b"o").unwrap();
            d.wait().await.unwrap();
        }
        disk.fail_next_create(); // the spare after T (U) is never created
        while log.durable_position() < 2 * seg {
            let d = log.append_internal(InternalStream::GroupOffsets, false, b"o").unwrap();
            d.wait().await.unwrap();
        }
        assert_eq!(log.durable_position(), 2 * seg, "the log ends exactly at T's end");
        log.checkpoint().await.unwrap();
        drop(log);
        let disk = disk.crash();
        assert!(disk.segment_bytes(2 * seg).is_none(), "U does not exist");

        let (log, internal, report) = open(&disk, config.clone()).await;
        assert_eq!(report.checkpoint_position, Some(2 * seg));
        assert_eq!(&internal[0].payload[..], b"topic table");
        // The writer rolls into U (not created: ENOSPC); DeleteRecords reschedules deletions.
        disk.fail_next_create();
        let lost = log.append_internal(InternalStream::Metadata, false, b"never durable").unwrap();
        log.advance_log_start(P0, 0).unwrap();
        assert!(lost.wait().await.is_err(), "U could not be created: the log went fatal");
        drop(log);
        let disk = disk.crash();

        let (_, internal, report) = open(&disk, config).await;
        assert_eq!(report.checkpoint_position, Some(2 * seg), "the checkpoint is still usable");
        let payloads: Vec<&[u8]> = internal.iter().map(|e| &e.payload[..]).collect();
        assert_eq!(payloads.first(), Some(&&b"topic table"[..]), "internal entries: {payloads:?}");
        assert!(!payloads.contains(&&b"never durable"[..]));
    });
}

/// A checkpoint covers the durable position, and a snapshot entry appended after that
/// position (not yet durable) must not take the older entries of its stream out of it:
/// the controller writes the whole topic table as a `Metadata` snapshot per change, and a
/// checkpoint taken while the newest one was in flight held no `Metadata` entry at all,
/// so a power loss before that flush completed lost every acknowledged topic (seeds 628
/// and 7931 of the broker power-loss test).
#[test]
fn a_checkpoint_taken_while_a_newer_snapshot_is_in_flight_keeps_the_older_one() {
    run(|| async {
        let disk = SimDisk::new(628);
        let (log, _, _) = open(&disk, small_config()).await;
        let table = log.append_internal(InternalStream::Metadata, true, b"table v1").unwrap();
        table.wait().await.unwrap();
        // One more flush completes (Y); the one after it (the table's next version) never
        // lands: its write stalls until the power goes.
        disk.stall_writes_after(1);
        let y = log.append_internal(InternalStream::GroupOffsets, false, b"offsets").unwrap();
        let mut checkpoint = Box::pin(log.checkpoint());
        assert!(futures_lite::future::poll_once(&mut checkpoint).await.is_none());
        while log.pending_bytes() > 0 {
            futures_lite::future::yield_now().await; // the flusher takes Y
        }
        let newer = log.append_internal(InternalStream::Metadata, true, b"table v2").unwrap();
        checkpoint.await.unwrap();
        y.wait().await.unwrap();
        assert!(!newer.is_durable(), "the newer table's flush is still in flight");
        let covered = log.durable_position();
        drop(log);
        let disk = disk.crash();

        let (_, internal, report) = open(&disk, small_config()).await;
        assert_eq!(report.checkpoint_position, Some(covered), "recovery starts at the checkpoint");
        let entries: Vec<(InternalStream, &[u8])> =
            internal.iter().map(|e| (e.stream, &e.payload[..])).collect();
        assert_eq!(
            entries,
            [
                (InternalStream::Metadata, &b"table v1"[..]),
                (InternalStream::GroupOffsets, b"offsets")
            ],
            "the durable table and the offsets entry, in log order"
        );
    });
}

/// `internal_stream_held_bytes` and `internal_bytes_since_snapshot`: what a stream holds
/// and what came since its latest snapshot,
/// live and after a recovery (through a checkpoint and a replay), per stream.
#[test]
fn a_streams_bytes_since_its_snapshot_count_appends_and_restart_at_a_snapshot() {
    run(|| async {
        let disk = SimDisk::new(17);
        let (log, _, _) = open(&disk, small_config()).await;
        let bytes = |log: &ShardLog<SimDisk>| {
            let raft = InternalStream::Raft;
            (log.internal_stream_held_bytes(raft), log.internal_bytes_since_snapshot(raft))
        };
        assert_eq!(bytes(&log), (0, 0));
        log.append_internal(InternalStream::Raft, false, &[1; 100]).unwrap();
        log.append_internal(InternalStream::Metadata, true, &[2; 7]).unwrap();
        log.append_internal(InternalStream::Raft, false, &[3; 50]).unwrap();
        assert_eq!(bytes(&log), (150, 150), "the other stream's snapshot counts for it alone");
        let snapshot = log.append_internal(InternalStream::Raft, true, &[4; 30]).unwrap();
        assert_eq!(bytes(&log), (180, 0), "held until the snapshot is durable");
        snapshot.wait().await.unwrap();
        log.forget_superseded_internal();
        assert_eq!(bytes(&log), (30, 0), "forgotten once the snapshot is durable");
        log.checkpoint().await.unwrap();
        let after = log.append_internal(InternalStream::Raft, false, &[5; 20]).unwrap();
        assert_eq!(bytes(&log), (50, 20), "the snapshot and what came after it");
        after.wait().await.unwrap();
        drop(log);
        let (log, _, _) = open(&disk.crash(), small_config()).await;
        assert_eq!(bytes(&log), (50, 20), "recovered from the checkpoint and the replay");
    });
}

/// A fetch makes the `flushed()` future, reads, then awaits it: a flush that completes
/// during the read must still wake it (the flush count is taken when the future is made,
/// not when it is first polled).
#[test]
fn a_flush_between_making_and_awaiting_flushed_still_wakes_the_waiter() {
    run(|| async {
        let disk = SimDisk::new(5);
        let (log, _, _) = open(&disk, small_config()).await;
        let flushed = log.flushed();
        let appended = log.append_batches(P0, &validated(&batch_of(1, 10, 0, 0))).unwrap();
        appended.durable.wait().await.unwrap();
        // The flush is over; a waiter made before it must not wait for another one.
        let woken = futures_lite::future::or(
            async {
                flushed.await;
                true
            },
            async {
                glommio::timer::sleep(std::time::Duration::from_secs(5)).await;
                false
            },
        );
        assert!(woken.await, "flushed() made before a flush missed it");
    });
}

/// The checkpoint is encoded on a blocking thread while the shard goes on (docs/storage.md,
/// "Checkpoints hold the executor"): it must still describe the log at its position, and
/// what happens while it is encoded (appends, a new partition, a dropped one, a moved log
/// start) must come back from the replay after it. Partitions are created in an order
/// unlike their ids (the file holds them sorted).
#[test]
fn a_checkpoint_encoded_off_the_executor_recovers_the_log_exactly() {
    run(|| async {
        let (disk, log, ids) = scattered_partitions(19, 200, 1000).await;
        let mut last = None;
        for (i, &p) in ids.iter().enumerate() {
            let batch = batch_of(1 + i % 3, 20, i as u64, i as i64);
            last = Some(log.append_batches(p, &validated(&batch)).unwrap().durable);
        }
        last.unwrap().wait().await.unwrap();

        let mut checkpoint = Box::pin(log.checkpoint());
        assert!(
            futures_lite::future::poll_once(&mut checkpoint).await.is_none(),
            "the encoding is on its blocking thread"
        );
        let covered = log.durable_position();
        let (new, dropped) = (PartitionId(5000), ids[3]);
        log.ensure_partition(new);
        log.append_batches(new, &validated(&batch_of(2, 20, 1, 1))).unwrap();
        for (i, &p) in ids.iter().enumerate().step_by(7) {
            log.append_batches(p, &validated(&batch_of(1, 20, i as u64, 9))).unwrap();
        }
        log.drop_partition(dropped);
        // ids[14]: a batch of 3 records, and one more appended just above.
        log.advance_log_start(ids[14], 3).unwrap();
        checkpoint.await.unwrap();
        let last = log.append_internal(InternalStream::GroupOffsets, false, b"after").unwrap();
        last.wait().await.unwrap();

        let all: Vec<PartitionId> = ids.iter().copied().chain([new]).collect();
        let expected = partitions_state(&log, &all).await;
        let (log, report, recovered) = crash_and_recover(log, &disk, covered, &all).await;
        assert!(report.replayed_entries > 0, "what came after it is replayed");
        assert_eq!(recovered, expected);
        assert_eq!(log.partition_info(dropped), None, "the drop was replayed");
        assert_eq!(log.partition_info(ids[14]).unwrap().log_start_offset, 3);
    });
}

/// A fresh log (`small_config`) on `SimDisk::new(seed)` with `count` partitions, created
/// in an order unlike their ids (below `below`), which it returns in that order.
async fn scattered_partitions(
    seed: u64,
    count: u64,
    below: u64,
) -> (SimDisk, ShardLog<SimDisk>, Vec<PartitionId>) {
    let disk = SimDisk::new(seed);
    let (log, _, _) = ShardLog::open(disk.clone(), small_config()).await.unwrap();
    let ids: Vec<PartitionId> = (0..count).map(|i| PartitionId((i * 7919) % below)).collect();
    for &p in &ids {
        log.ensure_partition(p);
    }
    (disk, log, ids)
}

/// Crashes `disk` under `log` and recovers: recovery must start at the checkpoint at
/// `covered` and give back every partition's log end. Returns the recovered log, its
/// report and the state of partitions `ids`.
async fn crash_and_recover(
    log: ShardLog<SimDisk>,
    disk: &SimDisk,
    covered: u64,
    ids: &[PartitionId],
) -> (ShardLog<SimDisk>, RecoveryReport, Vec<PartitionState>) {
    let mut end_offsets = log.log_end_offsets();
    end_offsets.sort_unstable();
    drop(log);
    let disk = disk.crash();
    let (log, _, report) = ShardLog::open(disk, small_config()).await.unwrap();
    assert_eq!(report.checkpoint_position, Some(covered), "recovery starts at it");
    let mut recovered = log.log_end_offsets();
    recovered.sort_unstable();
    assert_eq!(recovered, end_offsets);
    let state = partitions_state(&log, ids).await;
    (log, report, state)
}

/// Each partition's info and stored bytes from its log start to its high watermark
/// (`None` for one the log does not know), to compare a log before a crash with what
/// recovery gives back. Read with `parse_unvalidated`: a cleaned batch has fewer records
/// than its offset range.
type PartitionState = (PartitionId, Option<PartitionInfo>, Option<Vec<Bytes>>);

async fn partitions_state(log: &ShardLog<SimDisk>, ids: &[PartitionId]) -> Vec<PartitionState> {
    let mut state = Vec::new();
    for &p in ids {
        let info = log.partition_info(p);
        let mut data = info.map(|_| Vec::new());
        if let (Some(info), Some(data)) = (info, data.as_mut()) {
            let mut from = info.log_start_offset;
            while from < info.high_watermark {
                let bytes = log.read(p, from, 1 << 20).await.expect("read");
                from = last_offset_in(&bytes) + 1;
                data.push(bytes);
            }
        }
        state.push((p, info, data));
    }
    state
}

/// The last offset of the last batch in `bytes` (whole batches, as `read` returns).
fn last_offset_in(bytes: &Bytes) -> Offset {
    assert!(!bytes.is_empty(), "a read below the high watermark returns a batch");
    let (mut at, mut last) = (0, 0);
    while at < bytes.len() {
        let header = RecordBatchHeader::parse_unvalidated(&bytes[at..]).expect("a batch");
        last = header.base_offset + header.last_offset_delta as i64;
        at += header.total_bytes();
    }
    last
}

fn record(key: &str, value: &str) -> KeyedRecord {
    (key.as_bytes().to_vec(), Some(value.as_bytes().to_vec()))
}

/// A checkpoint's index copy made in turns (docs/storage.md, "Checkpoints hold the
/// executor"; state.rs invariant 7) still describes the log at its position. Between its
/// turns, partitions it has not copied yet get the two changes that break a naive split
/// (`change_between_turns`); others are appended to or dropped, and new ones created. A
/// crash follows, and recovery from that checkpoint gives back every partition exactly.
#[test]
fn a_checkpoint_copied_in_turns_recovers_the_log_exactly() {
    run(|| async {
        // 1,100 partitions, created out of id order: five turns of 256. Three keyed batches
        // each (offsets 0-2, 3, 4): a cleaning pass rewrites the first (its `a` and `b`
        // are written again later, its `d` is not).
        let (disk, log, ids) = scattered_partitions(21, 1_100, 4096).await;
        let batches = [
            vec![record("a", "1"), record("b", "2"), record("d", "0")],
            vec![record("a", "3")],
            vec![record("b", "4")],
        ];
        let mut last = None;
        for &p in &ids {
            for records in &batches {
                let batch = keyed_batch(records, 1_000);
                last = Some(log.append_batches(p, &validated(&batch)).unwrap().durable);
            }
        }
        last.unwrap().wait().await.unwrap();

        // The model: each partition's (log start, log end), or `None` once dropped.
        let mut model: BTreeMap<PartitionId, Option<(Offset, Offset)>> =
            ids.iter().map(|&p| (p, Some((0, 5)))).collect();
        let covered = log.durable_position();
        let mut checkpoint = Box::pin(log.checkpoint());
        let (mut gaps, mut changed) = (0, Vec::new());
        let done = loop {
            if let Some(done) = futures_lite::future::poll_once(&mut checkpoint).await {
                break Some(done);
            }
            // Between two turns, or the copy is done and the encoding runs.
            let Some(mut pending) = log.checkpoint_copy_pending() else { break None };
            pending.retain(|p| !changed.contains(p));
            changed.extend_from_slice(&pending[..5]);
            model.extend(change_between_turns(&log, &pending, gaps).await);
            gaps += 1;
        };
        assert!(gaps >= 3, "changes between {gaps} turns only");
        match done {
            Some(done) => done.unwrap(),
            None => checkpoint.as_mut().await.unwrap(),
        }
        drop(checkpoint);
        let last = log.append_internal(InternalStream::GroupOffsets, false, b"after").unwrap();
        last.wait().await.unwrap();

        let all: Vec<PartitionId> = model.keys().copied().collect();
        let expected = partitions_state(&log, &all).await;
        let offsets = |state: &[PartitionState]| -> BTreeMap<_, _> {
            let span = |i: &PartitionInfo| (i.log_start_offset, i.log_end_offset);
            state.iter().map(|(p, info, _)| (*p, info.as_ref().map(span))).collect()
        };
        assert_eq!(offsets(&expected), model, "the live log");
        let (_, _, recovered) = crash_and_recover(log, &disk, covered, &all).await;
        assert_eq!(offsets(&recovered), model, "the recovered log");
        assert_eq!(recovered, expected, "bytes and infos as before the crash");
    });
}

/// Changes a checkpoint's copy must survive between two of its turns, to the first five
/// partitions of `pending` (not copied yet, not changed before). A cleaner's `Replace`
/// made durable: the cleaned first batch then lies past the checkpoint position, before
/// the partition's batches at offsets 3 and 4. A batch appended after the position, made
/// durable, then trimmed by retention, and another removed by DeleteRecords: the
/// partition then has no batch at or after the position. Also an append, an append then
/// a drop, and a new partition. Returns what the model expects of each partition
/// changed: (log start, log end), or `None` once dropped.
async fn change_between_turns(
    log: &ShardLog<SimDisk>,
    pending: &[PartitionId],
    gap: u64,
) -> [(PartitionId, Option<(Offset, Offset)>); 6] {
    let &[cleaned, trimmed, deleted, dropped, appended, ..] = pending else {
        panic!("only {} partitions left to copy", pending.len())
    };
    let policy = CleanPolicy {
        now_ms: 1 << 40,
        min_compaction_lag_ms: 0,
        tombstones_removable_below: 0,
        bytes_per_second: u64::MAX / 4,
        max_keys: 1_000,
        upper_bound: Offset::MAX,
        aborted: Vec::new(),
    };
    assert!(log.clean(cleaned, policy).await.unwrap().batches_rewritten >= 1);
    let one = |value: &str| validated(&keyed_batch(&[record("c", value)], 2_000));
    for p in [cleaned, trimmed, deleted, dropped, appended] {
        log.append_batches(p, &one("5")).unwrap().durable.wait().await.unwrap();
    }
    let everything = RetentionPolicy { retention_ms: None, retention_bytes: Some(0) };
    log.apply_retention(trimmed, everything, 0);
    assert_eq!(log.partition_info(trimmed).unwrap().log_start_offset, 6);
    log.advance_log_start(deleted, 6).unwrap();
    log.drop_partition(dropped);
    log.append_batches(cleaned, &one("6")).unwrap();
    let new = PartitionId(10_000 + gap);
    log.ensure_partition(new);
    log.append_batches(new, &one("7")).unwrap();
    [
        (cleaned, Some((0, 7))),
        (trimmed, Some((6, 6))),
        (deleted, Some((6, 6))),
        (dropped, None),
        (appended, Some((0, 6))),
        (new, Some((0, 1))),
    ]
}

/// `log_end_offsets` is `partition_info`'s log end offset for exactly the partitions the
/// log knows: created, appended to, dropped.
#[test]
fn log_end_offsets_lists_every_known_partition_once() {
    run(|| async {
        let disk = SimDisk::new(20);
        let (log, _, _) = ShardLog::open(disk.clone(), small_config()).await.unwrap();
        for p in 0..50u64 {
            log.ensure_partition(PartitionId(p));
            for i in 0..p % 4 {
                log.append_batches(PartitionId(p), &validated(&batch_of(2, 10, i, 0))).unwrap();
            }
        }
        for p in (0..50u64).step_by(5) {
            log.drop_partition(PartitionId(p));
        }
        let mut listed = log.log_end_offsets();
        listed.sort_unstable();
        let expected: Vec<(PartitionId, Offset)> = (0..50u64)
            .map(PartitionId)
            .filter_map(|p| log.partition_info(p).map(|i| (p, i.log_end_offset)))
            .collect();
        assert_eq!(listed.len(), 40);
        assert_eq!(listed, expected);
        assert_eq!(listed[1], (PartitionId(2), 4));
    });
}

/// KIP-320: batches appended in epochs 1, 1, 3 and 4 are stamped with them, and the
/// partition's leader-epoch cache answers alike live, after a recovery from a checkpoint
/// (taken between epochs 3 and 4, so the rest is replayed) and from the log alone.
#[test]
fn leader_epochs_are_stamped_and_rebuilt_by_recovery_with_and_without_a_checkpoint() {
    run(|| async {
        let disk = SimDisk::new(31);
        let (log, _, _) = open(&disk, small_config()).await;
        let append = |epoch: i32, seq: u64| {
            let batch = validated(&batch_of(2, 10, seq, 0));
            log.append_batches_in_epoch(P0, Some(epoch), &batch).unwrap().durable
        };
        for (seq, epoch) in [1, 1, 3].into_iter().enumerate() {
            append(epoch, seq as u64).wait().await.unwrap();
        }
        log.checkpoint().await.unwrap();
        append(4, 3).wait().await.unwrap();
        let answers = |log: &ShardLog<SimDisk>| {
            [0, 1, 2, 3, 4, 5].map(|e| log.end_offset_for_epoch(P0, e, 4).unwrap())
        };
        let want = [(0, 0), (1, 4), (1, 4), (3, 6), (4, 8), (-1, -1)];
        assert_eq!(answers(&log), want);
        assert_eq!((log.epoch_of_offset(P0, 5), log.epoch_of_offset(P0, 7)), (Some(3), Some(4)));
        let stamped: Vec<i32> = read_all(&log, P0)
            .await
            .iter()
            .map(|(_, b)| RecordBatchHeader::parse_validated(b).unwrap().partition_leader_epoch)
            .collect();
        assert_eq!(stamped, vec![1, 1, 3, 4]);
        drop(log);
        let disk = disk.crash();
        let (recovered, _, report) = open(&disk, small_config()).await;
        assert!(report.checkpoint_position.is_some());
        assert_eq!(answers(&recovered), want, "from the checkpoint and the replay after it");
        drop(recovered);
        let disk = disk.crash();
        disk.remove_all_checkpoints();
        let (rebuilt, _, report) = open(&disk, small_config()).await;
        assert_eq!(report.checkpoint_position, None);
        assert_eq!(answers(&rebuilt), want, "from the log alone");
    });
}
