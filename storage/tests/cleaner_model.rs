//! Model-based property test of the log cleaner: random keyed appends (values and
//! tombstones over a few keys, plain or in transactions of two producers that commit or
//! abort), cleaning passes, checkpoints, crashes between entries and power loss in the
//! middle of a pass, against a map model that knows read_committed semantics. After every
//! pass and every recovery:
//! - every record read back is the record the model appended at that offset (offsets
//!   never change), and the log start and log end do not move;
//! - a read_committed consumer reading from the log start (up to the model's last stable
//!   offset, dropping the data of the aborted transactions whose marker is still in the
//!   log, as the shard's aborted list does) sees, for every key, its latest committed
//!   record (a tombstone may be gone, with every older record of its key, once the pass's
//!   horizon passed it), and never a record of an aborted transaction;
//! - replaying the log from its start as a restart does (data opens a transaction, a
//!   marker closes it) finds exactly the model's open transactions: the last stable offset
//!   is unchanged, now and after a restart;
//! - no marker at or above the horizon is gone.
//!
//! `SHARDLOG_SEED` is not used: proptest prints the failing case and its seed.

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
    /// A transactional batch of producer `producer` (opens its transaction if none is).
    TxnAppend {
        partition: u64,
        producer: u8,
        records: Vec<(u8, Option<usize>)>,
    },
    /// A COMMIT or ABORT marker of the producer: it ends its open transaction, if any
    /// (else a transaction that wrote nothing to this partition ends).
    EndTxn {
        partition: u64,
        producer: u8,
        commit: bool,
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
        5 => (0..PARTITIONS, 0..2u8, proptest::collection::vec(record(), 1..4))
            .prop_map(|(partition, producer, records)| Op::TxnAppend { partition, producer, records }),
        3 => (0..PARTITIONS, 0..2u8, any::<bool>())
            .prop_map(|(partition, producer, commit)| Op::EndTxn { partition, producer, commit }),
        3 => Just(Op::WaitDurable),
        3 => (0..PARTITIONS, 0..=120i64, prop_oneof![Just(1usize << 20), 1..4usize])
            .prop_map(|(partition, horizon_percent, max_keys)| Op::Clean { partition, horizon_percent, max_keys }),
        1 => Just(Op::Checkpoint),
        3 => (any::<bool>(), proptest::option::of((0..PARTITIONS, 0..=120i64, 0..60u64)))
            .prop_map(|(tear, during_pass)| Op::Crash { tear, during_pass }),
    ]
}

type Record = (Vec<u8>, Option<Vec<u8>>);

/// A transaction of one producer in one partition.
#[derive(Clone, Debug)]
struct Txn {
    producer_id: i64,
    first_offset: Offset,
    /// Its marker's offset, once appended.
    marker: Option<Offset>,
    commit: bool,
    /// A crash took back all its data (and it had no marker).
    lost: bool,
}

#[derive(Default, Clone)]
struct PartitionModel {
    /// Every record appended and not lost in a crash, by offset (markers not included).
    records: BTreeMap<Offset, Record>,
    /// The transaction of each transactional record, by offset (index into `txns`).
    txn_of: BTreeMap<Offset, usize>,
    txns: Vec<Txn>,
    /// Offsets of every marker appended and not lost.
    markers: std::collections::BTreeSet<Offset>,
    next_offset: Offset,
    acked: Offset,
    /// The highest tombstone horizon any pass (finished or not) was given.
    horizon: Offset,
}

impl PartitionModel {
    fn open_txn(&self, producer_id: i64) -> Option<usize> {
        self.txns.iter().position(|t| t.producer_id == producer_id && t.marker.is_none() && !t.lost)
    }

    /// Transactions that hold the last stable offset back under `high_watermark`.
    fn open_txns(&self, high_watermark: Offset) -> Vec<(i64, Offset)> {
        let mut open: Vec<(i64, Offset)> = self
            .txns
            .iter()
            .filter(|t| !t.lost && t.first_offset < high_watermark)
            .filter(|t| t.marker.is_none_or(|m| m >= high_watermark))
            .map(|t| (t.producer_id, t.first_offset))
            .collect();
        open.sort_unstable();
        open
    }

    fn last_stable_offset(&self, high_watermark: Offset) -> Offset {
        let first = self.open_txns(high_watermark).iter().map(|&(_, first)| first).min();
        first.unwrap_or(high_watermark).min(high_watermark)
    }

    /// Whether the record at `offset` belongs to an aborted transaction.
    fn aborted(&self, offset: Offset) -> bool {
        self.txn_of
            .get(&offset)
            .is_some_and(|&t| self.txns[t].marker.is_some() && !self.txns[t].commit)
    }

    /// The shard's aborted list: aborted transactions whose marker is still in the log.
    fn aborted_list(&self, log: &ShardLog<SimDisk>, partition: u64) -> Vec<AbortedTxnRange> {
        self.txns
            .iter()
            .filter(|t| !t.commit && !t.lost)
            .filter_map(|t| t.marker.map(|m| (t, m)))
            .filter(|(_, m)| log.has_batch_at(PartitionId(partition), *m))
            .map(|(t, marker_offset)| AbortedTxnRange {
                producer_id: t.producer_id,
                first_offset: t.first_offset,
                marker_offset,
            })
            .collect()
    }
}

fn policy(
    log: &ShardLog<SimDisk>,
    partition: u64,
    model: &PartitionModel,
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
        upper_bound: model.last_stable_offset(info.high_watermark),
        aborted: model.aborted_list(log, partition),
    }
}

/// What a consumer reading the whole partition sees, against the model.
async fn check(log: &ShardLog<SimDisk>, partition: u64, model: &PartitionModel, when: &str) {
    let info = log.partition_info(PartitionId(partition)).unwrap();
    let batches = read_batches(log, PartitionId(partition)).await;
    check_markers_and_replay(&batches, model, info.high_watermark, when);
    let lso = model.last_stable_offset(info.high_watermark);
    let aborted = model.aborted_list(log, partition);
    let mut previous = -1;
    let mut seen_latest: HashMap<Vec<u8>, (Offset, Option<Vec<u8>>)> = HashMap::new();
    for (header, records) in &batches {
        if header.attributes & CONTROL != 0 {
            continue;
        }
        // read_committed drops what the aborted list covers, and stops at the LSO.
        let dropped = header.attributes & TRANSACTIONAL != 0
            && aborted.iter().any(|a| {
                a.producer_id == header.producer_id
                    && (a.first_offset..a.marker_offset).contains(&header.base_offset)
            });
        for (offset, key, value) in records {
            assert!(*offset > previous, "{when}: offsets increase ({previous} then {offset})");
            previous = *offset;
            let appended = model.records.get(offset);
            assert_eq!(
                appended,
                Some(&(key.clone(), value.clone())),
                "{when}: the record at offset {offset} is the one appended there"
            );
            if dropped || *offset >= lso {
                continue;
            }
            assert!(!model.aborted(*offset), "{when}: read_committed sees aborted offset {offset}");
            seen_latest.insert(key.clone(), (*offset, value.clone()));
        }
    }
    let mut latest: HashMap<&Vec<u8>, (Offset, &Option<Vec<u8>>)> = HashMap::new();
    for (offset, (key, value)) in model.records.range(..lso) {
        if !model.aborted(*offset) {
            latest.insert(key, (*offset, value));
        }
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

/// Markers at or above the horizon are all there, and a replay from the log start (what a
/// restart does) finds exactly the model's open transactions.
fn check_markers_and_replay(
    batches: &[ReadBatch],
    model: &PartitionModel,
    high_watermark: Offset,
    when: &str,
) {
    let mut open: HashMap<i64, Offset> = HashMap::new();
    let mut markers = std::collections::HashSet::new();
    for (header, _) in batches {
        if header.attributes & CONTROL != 0 {
            open.remove(&header.producer_id);
            markers.insert(header.base_offset);
        } else if header.attributes & TRANSACTIONAL != 0 {
            open.entry(header.producer_id).or_insert(header.base_offset);
        }
    }
    let mut replayed: Vec<(i64, Offset)> = open.into_iter().collect();
    replayed.sort_unstable();
    assert_eq!(replayed, model.open_txns(high_watermark), "{when}: replayed open transactions");
    for m in model.markers.range(model.horizon..).take_while(|&&m| m < high_watermark) {
        assert!(markers.contains(m), "{when}: marker at {m} gone above the horizon");
    }
}

/// After recovery: every acknowledged record is there; forget what a crash took back.
fn reconcile(log: &ShardLog<SimDisk>, model: &mut [PartitionModel]) {
    for (p, m) in model.iter_mut().enumerate() {
        let info = log.partition_info(PartitionId(p as u64)).unwrap();
        assert!(info.high_watermark >= m.acked, "acknowledged data lost");
        assert!(info.log_end_offset <= m.next_offset, "recovered more than was appended");
        let end = info.log_end_offset;
        m.records.retain(|&o, _| o < end);
        m.txn_of.retain(|&o, _| o < end);
        m.markers.retain(|&o| o < end);
        for t in &mut m.txns {
            // A lost marker: the transaction is open again (the coordinator would end it).
            t.marker = t.marker.filter(|&o| o < end);
            t.lost |= t.marker.is_none() && t.first_offset >= end;
        }
        m.next_offset = end;
    }
}

/// Appends `batch` to the model's partition and the log; returns its base offset.
fn append(
    log: &ShardLog<SimDisk>,
    model: &mut PartitionModel,
    pending: &mut Vec<(usize, Offset, Durable)>,
    partition: u64,
    batch: &bytes::Bytes,
) -> Offset {
    let a = log.append_batches(PartitionId(partition), &validated(batch)).expect("append");
    model.next_offset = a.last_offset + 1;
    pending.push((partition as usize, a.last_offset + 1, a.durable));
    a.base_offset
}

/// The model's records of step `step`.
fn records_of(step: usize, records: &[(u8, Option<usize>)]) -> Vec<Record> {
    records
        .iter()
        .enumerate()
        .map(|(i, (key, size))| {
            let value = size.map(|n| format!("{step}.{i}:{}", "v".repeat(n)).into_bytes());
            (vec![b'k', *key], value)
        })
        .collect()
}

async fn execute(ops: Vec<Op>, seed: u64) {
    let config = LogConfig {
        segment_size_bytes: 32 << 10,
        tail_cache_bytes: 4 << 10,
        max_batch_bytes: 4096,
        blocking_flush_max_bytes: 0,
        ..LogConfig::default()
    };
    let mut disk = SimDisk::new(seed);
    let mut log = reopen(&disk, &config, PARTITIONS).await;
    let mut model = vec![PartitionModel::default(); PARTITIONS as usize];
    let mut pending: Vec<(usize, Offset, Durable)> = Vec::new();
    for (step, op) in ops.into_iter().enumerate() {
        match op {
            Op::Append { partition, records } => {
                let records = records_of(step, &records);
                let batch = keyed_batch(&records, step as i64);
                let m = &mut model[partition as usize];
                let base = append(&log, m, &mut pending, partition, &batch);
                for (i, record) in records.into_iter().enumerate() {
                    m.records.insert(base + i as i64, record);
                }
            }
            Op::TxnAppend { partition, producer, records } => {
                let producer_id = 100 + i64::from(producer);
                let records = records_of(step, &records);
                let batch = transactional_batch(&records, step as i64, producer_id);
                let m = &mut model[partition as usize];
                let base = append(&log, m, &mut pending, partition, &batch);
                let txn = m.open_txn(producer_id).unwrap_or_else(|| {
                    m.txns.push(Txn {
                        producer_id,
                        first_offset: base,
                        marker: None,
                        commit: false,
                        lost: false,
                    });
                    m.txns.len() - 1
                });
                for (i, record) in records.into_iter().enumerate() {
                    m.records.insert(base + i as i64, record);
                    m.txn_of.insert(base + i as i64, txn);
                }
            }
            Op::EndTxn { partition, producer, commit } => {
                let producer_id = 100 + i64::from(producer);
                let m = &mut model[partition as usize];
                let batch = marker_batch(producer_id, commit, step as i64);
                let base = append(&log, m, &mut pending, partition, &batch);
                m.markers.insert(base);
                if let Some(txn) = m.open_txn(producer_id) {
                    m.txns[txn].marker = Some(base);
                    m.txns[txn].commit = commit;
                }
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
                let m = &mut model[partition as usize];
                let policy = policy(&log, partition, m, horizon_percent, max_keys);
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
                    let m = &mut model[partition as usize];
                    let policy = policy(&log, partition, m, horizon_percent, 1 << 20);
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
