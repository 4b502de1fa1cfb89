//! Model-based property test of the log cleaner: random keyed appends (values and
//! tombstones over a few keys), cleaning passes, checkpoints, crashes between entries and
//! power loss in the middle of a pass, against a map model. After every pass and every
//! recovery a consumer reading from the log start must see, for every key, its latest
//! record (a tombstone may be gone, with every older record of its key, once the pass's
//! tombstone horizon passed it), every record it sees must be the record the model
//! appended at that offset (offsets never change), and the log start and log end must not
//! move. `SHARDLOG_SEED` is not used: proptest prints the failing case and its seed.

mod common;

use std::collections::{BTreeMap, HashMap};

use common::*;
use proptest::prelude::*;
use shardlog_storage::*;

const PARTITIONS: u64 = 2;

#[derive(Clone, Debug)]
enum Op {
    /// (key, value size; None: a tombstone)
    Append {
        partition: u64,
        records: Vec<(u8, Option<usize>)>,
    },
    WaitDurable,
    Clean {
        partition: u64,
        horizon_percent: i64,
        max_keys: usize,
    },
    Checkpoint,
    /// Power loss; `during_pass`: (partition, horizon percent, executor turns) of a pass
    /// started just before.
    Crash {
        tear: bool,
        during_pass: Option<(u64, i64, u64)>,
    },
}

fn record() -> impl Strategy<Value = (u8, Option<usize>)> {
    (0..6u8, prop_oneof![4 => (1..400usize).prop_map(Some), 1 => Just(None)])
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        10 => (0..PARTITIONS, proptest::collection::vec(record(), 1..5))
            .prop_map(|(partition, records)| Op::Append { partition, records }),
        3 => Just(Op::WaitDurable),
        3 => (0..PARTITIONS, 0..=120i64, prop_oneof![Just(1usize << 20), 1..4usize])
            .prop_map(|(partition, horizon_percent, max_keys)| Op::Clean { partition, horizon_percent, max_keys }),
        1 => Just(Op::Checkpoint),
        3 => (any::<bool>(), proptest::option::of((0..PARTITIONS, 0..=120i64, 0..60u64)))
            .prop_map(|(tear, during_pass)| Op::Crash { tear, during_pass }),
    ]
}

type Record = (Vec<u8>, Option<Vec<u8>>);

#[derive(Default, Clone)]
struct PartitionModel {
    /// Every record appended and not lost in a crash, by offset.
    records: BTreeMap<Offset, Record>,
    next_offset: Offset,
    acked: Offset,
    /// The highest tombstone horizon any pass (finished or not) was given.
    horizon: Offset,
}

fn policy(
    log: &ShardLog<SimDisk>,
    partition: u64,
    horizon_percent: i64,
    max_keys: usize,
) -> CleanPolicy {
    let info = log.partition_info(PartitionId(partition)).unwrap();
    CleanPolicy {
        now_ms: 1 << 40,
        min_compaction_lag_ms: 0,
        tombstones_removable_below: info.high_watermark * horizon_percent / 100,
        bytes_per_second: u64::MAX / 4,
        max_keys,
    }
}

/// What a consumer reading the whole partition sees, against the model.
async fn check(log: &ShardLog<SimDisk>, partition: u64, model: &PartitionModel, when: &str) {
    let info = log.partition_info(PartitionId(partition)).unwrap();
    let seen = read_records(log, PartitionId(partition)).await;
    let mut previous = -1;
    let mut seen_latest: HashMap<Vec<u8>, (Offset, Option<Vec<u8>>)> = HashMap::new();
    for (offset, key, value) in seen {
        assert!(offset > previous, "{when}: offsets increase ({previous} then {offset})");
        previous = offset;
        let appended = model.records.get(&offset);
        assert_eq!(
            appended,
            Some(&(key.clone(), value.clone())),
            "{when}: the record at offset {offset} is the one appended there"
        );
        seen_latest.insert(key, (offset, value));
    }
    let mut latest: HashMap<&Vec<u8>, (Offset, &Option<Vec<u8>>)> = HashMap::new();
    for (offset, (key, value)) in model.records.range(..info.high_watermark) {
        latest.insert(key, (*offset, value));
    }
    for (key, (offset, value)) in latest {
        let got = seen_latest.get(key);
        match value {
            Some(_) => assert_eq!(
                got,
                Some(&(offset, value.clone())),
                "{when}: key {key:?} shows its latest value (offset {offset})"
            ),
            None => {
                let kept = got == Some(&(offset, None));
                let removed = got.is_none() && offset < model.horizon;
                assert!(
                    kept || removed,
                    "{when}: key {key:?} deleted at {offset} (horizon {}) shows {got:?}",
                    model.horizon
                );
            }
        }
    }
}

/// After recovery: every acknowledged record is there; forget what a crash took back.
fn reconcile(log: &ShardLog<SimDisk>, model: &mut [PartitionModel]) {
    for (p, m) in model.iter_mut().enumerate() {
        let info = log.partition_info(PartitionId(p as u64)).unwrap();
        assert!(info.high_watermark >= m.acked, "acknowledged data lost");
        assert!(info.log_end_offset <= m.next_offset, "recovered more than was appended");
        m.records.retain(|&o, _| o < info.log_end_offset);
        m.next_offset = info.log_end_offset;
    }
}

async fn execute(ops: Vec<Op>, seed: u64) {
    let config = LogConfig {
        segment_size_bytes: 32 << 10,
        tail_cache_bytes: 4 << 10,
        max_batch_bytes: 4096,
        blocking_flush_max_bytes: 0,
    };
    let mut disk = SimDisk::new(seed);
    let mut log = reopen(&disk, &config, PARTITIONS).await;
    let mut model = vec![PartitionModel::default(); PARTITIONS as usize];
    let mut pending: Vec<(usize, Offset, Durable)> = Vec::new();
    for (step, op) in ops.into_iter().enumerate() {
        match op {
            Op::Append { partition, records } => {
                let records: Vec<Record> = records
                    .iter()
                    .enumerate()
                    .map(|(i, (key, size))| {
                        let value =
                            size.map(|n| format!("{step}.{i}:{}", "v".repeat(n)).into_bytes());
                        (vec![b'k', *key], value)
                    })
                    .collect();
                let batch = keyed_batch(&records, step as i64);
                let a =
                    log.append_batches(PartitionId(partition), &validated(&batch)).expect("append");
                let m = &mut model[partition as usize];
                for (i, record) in records.into_iter().enumerate() {
                    m.records.insert(a.base_offset + i as i64, record);
                }
                m.next_offset = a.last_offset + 1;
                pending.push((partition as usize, a.last_offset + 1, a.durable));
            }
            Op::WaitDurable => {
                for (p, end, durable) in std::mem::take(&mut pending) {
                    durable.wait().await.expect("durable");
                    model[p].acked = model[p].acked.max(end);
                }
            }
            Op::Clean { partition, horizon_percent, max_keys } => {
                let id = PartitionId(partition);
                let before = log.partition_info(id).unwrap();
                let policy = policy(&log, partition, horizon_percent, max_keys);
                let m = &mut model[partition as usize];
                m.horizon = m.horizon.max(policy.tombstones_removable_below);
                log.clean(id, policy).await.expect("clean");
                let after = log.partition_info(id).unwrap();
                assert_eq!(after.log_start_offset, before.log_start_offset, "log start unmoved");
                assert_eq!(after.log_end_offset, before.log_end_offset, "log end unmoved");
                assert!(after.high_watermark >= before.high_watermark);
                check(&log, partition, m, &format!("step {step}: after a pass")).await;
            }
            Op::Checkpoint => log.checkpoint().await.expect("checkpoint"),
            Op::Crash { tear, during_pass } => {
                // Power loss, possibly `yields` executor turns into a pass.
                let pass = during_pass.map(|(partition, horizon_percent, yields)| {
                    let policy = policy(&log, partition, horizon_percent, 1 << 20);
                    let m = &mut model[partition as usize];
                    m.horizon = m.horizon.max(policy.tombstones_removable_below);
                    let cleaning = log.clone();
                    let task = glommio::spawn_local(async move {
                        cleaning.clean(PartitionId(partition), policy).await
                    });
                    (task, yields)
                });
                let pass = match pass {
                    Some((task, yields)) => {
                        for _ in 0..yields {
                            futures_lite::future::yield_now().await;
                        }
                        Some(task)
                    }
                    None => None,
                };
                disk.tear_on_crash(tear);
                let next = disk.crash();
                if let Some(task) = pass {
                    let _ = task.await; // fails on the dead disk, or ended before the crash
                }
                drop(log);
                pending.clear();
                disk = next;
                log = reopen(&disk, &config, PARTITIONS).await;
                reconcile(&log, &mut model);
                for p in 0..PARTITIONS {
                    let when =
                        format!("step {step}: after power loss (during a pass: {during_pass:?})");
                    check(&log, p, &model[p as usize], &when).await;
                }
            }
        }
    }
    for (p, m) in model.iter().enumerate() {
        check(&log, p as u64, m, "at the end").await;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn cleaning_keeps_every_keys_latest_record_across_crashes(ops in proptest::collection::vec(op(), 1..150), seed in any::<u64>()) {
        run(move || execute(ops, seed));
    }
}
