//! Model-based property test: random append / read / retention / checkpoint / crash /
//! recover sequences against a plain `Vec` model of each partition.

mod common;

use bytes::Bytes;
use common::*;
use proptest::prelude::*;
use shardlog_storage::*;

#[derive(Clone, Debug)]
enum Op {
    Append { partition: u64, records: usize, value_bytes: usize },
    Read { partition: u64, from_percent: u64, max_bytes: usize },
    Retention { partition: u64, keep_bytes: u64 },
    WaitDurable,
    Checkpoint,
    Crash { tear: bool },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..3u64, 1..4usize, 1..900usize).prop_map(|(partition, records, value_bytes)| Op::Append { partition, records, value_bytes }),
        3 => (0..3u64, 0..=100u64, 1..6000usize).prop_map(|(partition, from_percent, max_bytes)| Op::Read { partition, from_percent, max_bytes }),
        1 => (0..3u64, 0..8000u64).prop_map(|(partition, keep_bytes)| Op::Retention { partition, keep_bytes }),
        2 => Just(Op::WaitDurable),
        1 => Just(Op::Checkpoint),
        1 => any::<bool>().prop_map(|tear| Op::Crash { tear }),
    ]
}

#[derive(Default, Clone)]
struct PartitionModel {
    /// (base_offset, last_offset, stored bytes)
    batches: Vec<(Offset, Offset, Bytes)>,
    log_start_offset: Offset,
    next_offset: Offset,
    acked: Offset,
}

impl PartitionModel {
    fn live(&self) -> impl Iterator<Item = &(Offset, Offset, Bytes)> {
        self.batches.iter().filter(|b| b.1 >= self.log_start_offset)
    }
}

const PARTITIONS: u64 = 3;

/// After recovery: the log is a prefix of the model holding at least the acked part.
fn reconcile(log: &ShardLog<SimDisk>, model: &mut [PartitionModel]) {
    for (p, m) in model.iter_mut().enumerate() {
        let info = log.partition_info(PartitionId(p as u64)).unwrap();
        assert!(info.high_watermark >= m.acked, "acknowledged data lost");
        assert!(info.log_end_offset <= m.next_offset, "recovered more than was appended");
        assert_eq!(info.high_watermark, info.log_end_offset);
        assert!(info.log_start_offset <= m.log_start_offset.max(info.log_start_offset));
        m.batches.retain(|b| b.0 < info.log_end_offset);
        m.next_offset = info.log_end_offset;
        m.log_start_offset = info.log_start_offset;
    }
}

async fn execute(ops: Vec<Op>, seed: u64) {
    let config = LogConfig {
        segment_size_bytes: 32 << 10,
        tail_cache_bytes: 6 << 10,
        max_batch_bytes: 4096,
        // A third of the seeds take the blocking flush path for flushes up to 8 KiB.
        blocking_flush_max_bytes: if seed.is_multiple_of(3) { 8 << 10 } else { 0 },
        ..LogConfig::default()
    };
    let mut disk = SimDisk::new(seed);
    disk.set_lazy_zero_fill(seed.is_multiple_of(2));
    let mut log = reopen(&disk, &config, PARTITIONS).await;
    let mut model = vec![PartitionModel::default(); PARTITIONS as usize];
    let mut pending: Vec<(usize, Offset, Durable)> = Vec::new();
    for (step, op) in ops.into_iter().enumerate() {
        match op {
            Op::Append { partition, records, value_bytes } => {
                let batch = batch_of(records, value_bytes, step as u64, step as i64 * 10);
                let a =
                    log.append_batches(PartitionId(partition), &validated(&batch)).expect("append");
                let m = &mut model[partition as usize];
                assert_eq!(a.base_offset, m.next_offset, "offsets are dense");
                m.batches.push((a.base_offset, a.last_offset, with_offset(&batch, a.base_offset)));
                m.next_offset = a.last_offset + 1;
                pending.push((partition as usize, a.last_offset + 1, a.durable));
            }
            Op::WaitDurable => {
                for (p, end, durable) in std::mem::take(&mut pending) {
                    durable.wait().await.expect("durable");
                    model[p].acked = model[p].acked.max(end);
                }
            }
            Op::Read { partition, from_percent, max_bytes } => {
                let info = log.partition_info(PartitionId(partition)).unwrap();
                let m = &model[partition as usize];
                assert_eq!(info.log_start_offset, m.log_start_offset);
                assert!(
                    info.high_watermark <= info.log_end_offset
                        && info.log_end_offset == m.next_offset
                );
                let span = info.high_watermark - info.log_start_offset;
                let from = info.log_start_offset + span * from_percent as i64 / 100;
                let got = log.read(PartitionId(partition), from, max_bytes).await.expect("read");
                let mut expected = Vec::new();
                for (base, last, bytes) in
                    m.live().filter(|b| b.1 >= from && b.0 < info.high_watermark)
                {
                    let _ = (base, last);
                    if !expected.is_empty() && expected.len() + bytes.len() > max_bytes {
                        break;
                    }
                    expected.extend_from_slice(bytes);
                }
                assert_eq!(got, Bytes::from(expected), "read {from} max {max_bytes}");
                if from > 0 && from == info.log_start_offset && info.log_start_offset > 0 {
                    let below = log.read(PartitionId(partition), from - 1, 100).await;
                    assert!(matches!(below, Err(ReadError::OffsetOutOfRange { .. })));
                }
            }
            Op::Retention { partition, keep_bytes } => {
                let info = log.partition_info(PartitionId(partition)).unwrap();
                let m = &mut model[partition as usize];
                let mut size: u64 = m.live().map(|b| b.2.len() as u64).sum();
                assert_eq!(size, info.size_bytes);
                let mut start = m.log_start_offset;
                for (_, last, bytes) in m.live() {
                    if *last >= info.high_watermark || size <= keep_bytes {
                        break;
                    }
                    size -= bytes.len() as u64;
                    start = last + 1;
                }
                let policy =
                    RetentionPolicy { retention_ms: None, retention_bytes: Some(keep_bytes) };
                log.apply_retention(PartitionId(partition), policy, 0);
                assert_eq!(
                    log.partition_info(PartitionId(partition)).unwrap().log_start_offset,
                    start
                );
                m.log_start_offset = start;
            }
            Op::Checkpoint => log.checkpoint().await.expect("checkpoint"),
            Op::Crash { tear } => {
                disk.tear_on_crash(tear);
                let next = disk.crash();
                drop(log);
                pending.clear();
                disk = next;
                log = reopen(&disk, &config, PARTITIONS).await;
                reconcile(&log, &mut model);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn the_log_behaves_like_a_vec_model_across_crashes(ops in proptest::collection::vec(op(), 1..120), seed in any::<u64>()) {
        run(move || execute(ops, seed));
    }
}
