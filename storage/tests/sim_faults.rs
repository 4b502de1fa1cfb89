//! Fault-injected simulation over many seeds: random appends, reads and checkpoints,
//! then power loss (lost, kept or torn unsynced writes, flipped bits), failed fsyncs.
//! Checkers after every recovery: every acknowledged batch is present and byte-identical,
//! the recovered partition is a gap-free prefix of what was appended, offsets are dense,
//! and the high watermark never exceeds what is durable.
//!
//! A failing seed is printed; `SHARDLOG_SEED=<seed> cargo test -p shardlog-storage
//! --test sim_faults` replays exactly that seed; `SHARDLOG_SIM_SEEDS=5000` runs a longer
//! soak of 5000 seeds.

mod common;

use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use shardlog_storage::*;

#[derive(Default)]
struct Model {
    /// Per partition: (base_offset, stored bytes) of every batch appended and not lost.
    appended: Vec<Vec<(Offset, Bytes)>>,
    /// Per partition: every offset below this was acknowledged durable.
    acked: Vec<Offset>,
}

async fn check(log: &ShardLog<SimDisk>, model: &RefCell<Model>, seed: u64) {
    let partitions = model.borrow().appended.len();
    for p in 0..partitions {
        let id = PartitionId(p as u64);
        let info = log.partition_info(id).unwrap_or(PartitionInfo {
            log_start_offset: 0,
            high_watermark: 0,
            log_end_offset: 0,
            size_bytes: 0,
        });
        assert_eq!(
            info.high_watermark, info.log_end_offset,
            "seed {seed}: recovered data is durable"
        );
        let acked = model.borrow().acked[p];
        assert!(
            info.high_watermark >= acked,
            "seed {seed}: partition {p} lost acknowledged data: hw {} < acked {}",
            info.high_watermark,
            acked
        );
        let mut recovered = Vec::new();
        let mut from = info.log_start_offset;
        while from < info.high_watermark {
            let bytes = log.read(id, from, 64 << 10).await.expect("read");
            for (base, b) in batches_in(&bytes) {
                assert_eq!(base, from, "seed {seed}: dense offsets");
                from = base
                    + RecordBatchHeader::parse_validated(&b).unwrap().last_offset_delta as i64
                    + 1;
                recovered.push((base, b));
            }
        }
        let expected: Vec<(Offset, Bytes)> = model.borrow().appended[p]
            .iter()
            .filter(|(b, _)| *b < info.high_watermark)
            .cloned()
            .collect();
        assert_eq!(
            recovered.len(),
            expected.len(),
            "seed {seed}: partition {p} is a gap-free prefix"
        );
        assert!(recovered == expected, "seed {seed}: partition {p} batches byte-identical");
        model.borrow_mut().appended[p] = expected;
    }
}

async fn scenario(seed: u64) -> (u64, u64) {
    let mut truncations = 0;
    let mut rng = XorShift::new(seed);
    let mut disk = SimDisk::new(seed);
    disk.set_max_yields(rng.below(4));
    disk.set_lazy_zero_fill(rng.chance(1, 2));
    let config = LogConfig {
        segment_size_bytes: (4 + rng.below(13)) * 4096,
        tail_cache_bytes: rng.below(3) as usize * 8192,
        max_batch_bytes: 4096,
        // A quarter of the seeds take the blocking flush path for flushes up to 8 KiB.
        blocking_flush_max_bytes: if seed.is_multiple_of(4) { 8192 } else { 0 },
        ..LogConfig::default()
    };
    let partitions = 1 + rng.below(4) as usize;
    let model = Rc::new(RefCell::new(Model {
        appended: vec![Vec::new(); partitions],
        acked: vec![0; partitions],
    }));
    for _round in 0..2 + rng.below(3) {
        let (log, _, report) = ShardLog::open(disk.clone(), config.clone()).await.expect("open");
        truncations += report.truncated_at.is_some() as u64;
        for p in 0..partitions {
            log.ensure_partition(PartitionId(p as u64));
        }
        check(&log, &model, seed).await;
        for _ in 0..rng.below(80) {
            match rng.below(12) {
                0..=6 => {
                    let p = rng.below(partitions as u64) as usize;
                    let records = 1 + rng.below(3) as usize;
                    let batch = batch_of(records, 1 + rng.below(700) as usize, rng.next_u64(), 0);
                    let Ok(appended) =
                        log.append_batches(PartitionId(p as u64), &validated(&batch))
                    else {
                        continue;
                    };
                    let stored = with_offset(&batch, appended.base_offset);
                    model.borrow_mut().appended[p].push((appended.base_offset, stored));
                    let model = model.clone();
                    let end = appended.last_offset + 1;
                    glommio::spawn_local(async move {
                        if appended.durable.wait().await.is_ok() {
                            let mut m = model.borrow_mut();
                            m.acked[p] = m.acked[p].max(end);
                        }
                    })
                    .detach();
                }
                7 | 8 => {
                    for _ in 0..rng.below(6) {
                        futures_lite::future::yield_now().await;
                    }
                    if rng.chance(1, 40) {
                        // A quiet moment: idle-time zero-fill runs (when enabled).
                        glommio::timer::sleep(Duration::from_millis(3)).await;
                    }
                }
                9 => {
                    let _ = log.checkpoint().await;
                }
                10 => {
                    if rng.chance(1, 6) {
                        disk.fail_next_sync();
                    }
                }
                _ => {
                    let p = PartitionId(rng.below(partitions as u64));
                    let info = log.partition_info(p).unwrap();
                    assert!(info.high_watermark <= info.log_end_offset);
                    let span = (info.high_watermark - info.log_start_offset + 1) as u64;
                    let from = info.log_start_offset + rng.below(span) as i64;
                    let bytes = log.read(p, from, rng.below(3000) as usize).await.expect("read");
                    let m = model.borrow();
                    for (base, b) in batches_in(&bytes) {
                        assert!(
                            base < info.high_watermark,
                            "seed {seed}: read past the high watermark"
                        );
                        let found = m.appended[p.0 as usize].iter().find(|(o, _)| *o == base);
                        assert_eq!(found.map(|(_, x)| x), Some(&b), "seed {seed}: read bytes");
                    }
                }
            }
        }
        if rng.chance(1, 4) {
            // A clean close (its checkpoint lets the next recovery skip the tail check)
            // followed by power loss; the next round's crash must still be checked.
            let _ = log.close().await;
        }
        if rng.chance(1, 3) {
            disk.flip_bits_on_crash(1 + rng.below(3) as u32);
        }
        let next = disk.crash();
        drop(log);
        for _ in 0..20 {
            futures_lite::future::yield_now().await;
        }
        disk = next;
    }
    let (log, _, _) = ShardLog::open(disk.clone(), config).await.expect("open");
    for p in 0..partitions {
        log.ensure_partition(PartitionId(p as u64));
    }
    check(&log, &model, seed).await;
    let acked = model.borrow().acked.iter().sum::<i64>() as u64;
    (acked, truncations)
}

#[test]
fn many_seeds_of_power_loss_torn_writes_and_failed_fsyncs_keep_every_acknowledged_batch() {
    let replay = std::env::var("SHARDLOG_SEED").is_ok();
    let first = seed_from_env(1);
    // SHARDLOG_SIM_SEEDS=N runs N seeds (a longer soak); by default at most 400 in ~4 s.
    let max_seeds: u64 =
        std::env::var("SHARDLOG_SIM_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(400);
    let soak = std::env::var("SHARDLOG_SIM_SEEDS").is_ok();
    let deadline = Instant::now() + Duration::from_secs(4);
    let mut seeds = 0;
    let (mut acked, mut truncations) = (0, 0);
    for seed in first.. {
        let result = glommio::LocalExecutorBuilder::default()
            .spawn(move || scenario(seed))
            .expect("spawn executor")
            .join();
        match result {
            Ok((a, t)) => {
                acked += a;
                truncations += t;
            }
            Err(_) => panic!("seed {seed} failed; replay with SHARDLOG_SEED={seed}"),
        }
        seeds += 1;
        if replay || (!soak && seeds >= 50 && Instant::now() > deadline) || seeds >= max_seeds {
            break;
        }
    }
    eprintln!("simulated {seeds} seeds from {first}: {acked} acknowledged records, {truncations} torn tails truncated");
    assert!(
        acked > 0 && (replay || truncations > 0),
        "the simulation exercises acks and torn tails"
    );
}
