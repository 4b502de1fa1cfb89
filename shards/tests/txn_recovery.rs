//! A transaction whose PrepareCommit (or PrepareAbort) is durable when the power goes is
//! completed after the restart, never reverted: one shard over a `SimDisk`, the
//! coordinator's prepared state written as `end_txn` writes it, then a crash that keeps
//! only what was fdatasync'd, a restart on the image, and the coordinator's ticker.

use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use shardlog_benches::load::record_batch::{self, ProducerFields};
use shardlog_shards::runtime::run_shards;
use shardlog_shards::txn::log::TxnLogEntry;
use shardlog_shards::txn::state::TxnState;
use shardlog_shards::{Mesh, NewTopic, PartitionRead, Shard, ShardConfig, ShardMeshBuilder};
use shardlog_storage::{AnyDisk, InternalStream, LogConfig, ShardLog, SimDisk, SimImage};

fn log_config() -> LogConfig {
    LogConfig {
        segment_size_bytes: 256 << 10,
        tail_cache_bytes: 16 << 10,
        max_batch_bytes: 64 << 10,
        blocking_flush_max_bytes: 0,
        ..LogConfig::default()
    }
}

/// A transactional batch of `count` records (the TRANSACTIONAL attribute set, CRC redone).
fn transactional_batch(producer_id: i64, epoch: i16, base_sequence: i32, count: usize) -> Bytes {
    let producer = ProducerFields { producer_id, producer_epoch: epoch, base_sequence };
    let values = (0..count).map(|i| format!("v{i}"));
    Bytes::from(record_batch::transactional_batch(producer, 1_700_000_000_000, values))
}

async fn start(builder: ShardMeshBuilder, disk: SimDisk) -> Rc<Shard> {
    let (mesh, receivers) = Mesh::join(builder).await;
    let (log, internal, _) = ShardLog::open(AnyDisk::Sim(disk), log_config()).await.unwrap();
    let config = ShardConfig { max_message_bytes: 64 << 10, ..ShardConfig::default() };
    let shard = Shard::new(log, mesh.clone(), config);
    shard.groups.restore(&internal).unwrap();
    mesh.spawn_receivers(receivers, shard.clone());
    shard.start_controller(&internal).await.unwrap();
    shard.wait_for_table().await;
    shard.rebuild_producer_state(&internal).await.unwrap();
    shard
}

async fn read(shard: &Shard, read_committed: bool) -> (i64, i64, Vec<(i64, i64)>, usize) {
    let read = PartitionRead {
        topic: "t".into(),
        partition: 0,
        fetch_offset: 0,
        partition_max_bytes: 1 << 20,
        read_committed,
        current_leader_epoch: -1,
    };
    let data = shard.fetch_local(&[read], Duration::ZERO, 0, 1 << 20).await;
    let fetched = data[0].result.clone().unwrap();
    let (hw, lso) = (fetched.high_watermark, fetched.last_stable_offset);
    (hw, lso, fetched.aborted_transactions, fetched.records.len())
}

/// Before the crash: a transaction with 3 records in t-0, its Prepare* durable, no marker.
async fn prepare_and_crash(shard: Rc<Shard>, disk: SimDisk, commit: bool) -> SimImage {
    let topic =
        NewTopic { name: "t".into(), num_partitions: 1, replication_factor: 1, configs: vec![] };
    shard.create_topics(vec![topic], false).await.remove(0).unwrap();
    let (producer_id, epoch) = shard.txn_init_producer_id("tx", 60_000, None).await.unwrap();
    shard.add_to_txn("tx", producer_id, epoch, &[("t".into(), 0)], None).await.unwrap();
    let batch = transactional_batch(producer_id, epoch, 0, 3);
    shard.produce("t", 0, batch, -1, Some("tx")).await.await.unwrap();
    assert_eq!(read(&shard, true).await.1, 0, "the open transaction holds the LSO");
    let mut prepared = shard.txn.describe("tx").unwrap();
    prepared.state = if commit { TxnState::PrepareCommit } else { TxnState::PrepareAbort };
    let entry = TxnLogEntry::Txn(prepared).encode();
    let durable = shard.log.append_internal(InternalStream::Transactions, false, &entry).unwrap();
    durable.wait().await.unwrap();
    disk.crash().image()
}

/// After the restart: the ticker finishes the transaction; returns what read_committed
/// and read_uncommitted fetches see then.
async fn restart_and_finish(shard: Rc<Shard>) -> ((i64, i64, Vec<(i64, i64)>, usize), usize) {
    let state = shard.txn.describe("tx").unwrap().state;
    assert!(state.is_prepared(), "restored in {state:?}");
    assert_eq!(read(&shard, true).await.1, 0, "still held before the markers");
    shard.spawn_txn_ticker();
    let deadline = Instant::now() + Duration::from_secs(30);
    while shard.txn.describe("tx").unwrap().state.is_prepared() {
        assert!(Instant::now() < deadline, "the prepared transaction was never finished");
        glommio::timer::sleep(Duration::from_millis(10)).await;
    }
    (read(&shard, true).await, read(&shard, false).await.3)
}

type Seen = (TxnState, (i64, i64, Vec<(i64, i64)>, usize), usize);

fn crash_in_prepare_then_restart(commit: bool) -> Seen {
    use std::sync::{Arc, Mutex};
    let image: Arc<Mutex<Option<SimImage>>> = Arc::new(Mutex::new(None));
    let keep = image.clone();
    run_shards(1, move |builder| async move {
        let disk = SimDisk::new(7);
        disk.hang_after_crash();
        let shard = start(builder, disk.clone()).await;
        *keep.lock().unwrap() = Some(prepare_and_crash(shard, disk, commit).await);
    })
    .unwrap();
    let result: Arc<Mutex<Option<Seen>>> = Arc::new(Mutex::new(None));
    let out = result.clone();
    run_shards(1, move |builder| async move {
        let image = image.lock().unwrap().take().expect("the crashed disk");
        let shard = start(builder, SimDisk::from_image(image)).await;
        let (committed, uncommitted_bytes) = restart_and_finish(shard.clone()).await;
        let state = shard.txn.describe("tx").unwrap().state;
        *out.lock().unwrap() = Some((state, committed, uncommitted_bytes));
        shard.log.close().await.unwrap();
    })
    .unwrap();
    let seen = result.lock().unwrap().take().expect("the restart ran");
    seen
}

#[test]
fn a_transaction_prepared_to_commit_at_a_crash_is_committed_after_the_restart() {
    let (state, (hw, lso, aborted, committed_bytes), all_bytes) =
        crash_in_prepare_then_restart(true);
    assert_eq!(state, TxnState::CompleteCommit);
    assert_eq!((hw, lso), (4, 4), "3 records and the COMMIT marker, all stable");
    assert!(aborted.is_empty());
    assert_eq!(committed_bytes, all_bytes, "read_committed sees the whole transaction");
}

#[test]
fn a_transaction_prepared_to_abort_at_a_crash_is_aborted_after_the_restart() {
    let (state, (hw, lso, aborted, _), _) = crash_in_prepare_then_restart(false);
    assert_eq!(state, TxnState::CompleteAbort);
    assert_eq!((hw, lso), (4, 4));
    assert_eq!(aborted.len(), 1, "the client is told to drop the aborted records");
    assert_eq!(aborted[0].1, 0);
}
