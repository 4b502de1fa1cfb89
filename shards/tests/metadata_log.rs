//! The metadata log on two shards over `SimDisk`s: the bytes a create writes do not grow
//! with the number of topics, every answered change survives a crash (only what was
//! fdatasync'd is kept), the other shard's copy (built from change records) equals the
//! controller's table, and a data dir of whole-table snapshots (the format before change
//! records) recovers and takes change records after them. Each run also checks, on each
//! shard, the producer-state snapshot's `covered` list against the topic table.

use std::future::Future;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use shardlog_benches::load::record_batch::RecordBatchWriter;
use shardlog_shards::metadata_log::SnapshotPolicy;
use shardlog_shards::metrics::{MetricsScope, PartitionMetrics};
use shardlog_shards::runtime::run_shards;
use shardlog_shards::topic_config::{ConfigChange, TopicConfigChange};
use shardlog_shards::{Mesh, NewPartitions, NewTopic, Shard, ShardConfig, TopicTable};
use shardlog_storage::{AnyDisk, InternalStream, LogConfig, ShardLog, SimDisk, SimImage};

const SHARDS: usize = 2;

fn log_config() -> LogConfig {
    LogConfig {
        segment_size_bytes: 8 << 20,
        tail_cache_bytes: 1 << 20,
        max_batch_bytes: 64 << 10,
        blocking_flush_max_bytes: 0,
        ..LogConfig::default()
    }
}

fn new_topic(name: &str, partitions: i32) -> NewTopic {
    NewTopic {
        name: name.into(),
        num_partitions: partitions,
        replication_factor: 1,
        configs: vec![],
    }
}

/// What one run of the shards leaves: each shard's crashed disk and its table at the end.
struct Outcome {
    images: Vec<SimImage>,
    tables: Vec<TopicTable>,
    /// The `Metadata` entries shard 0 recovered at its start (snapshot, then changes).
    recovered_metadata: Vec<bool>,
}

/// Starts both shards on `images` (the broker's start-up minus the network), runs
/// `workload` on shard 0, then crashes both disks (everything unsynced is lost).
fn run<W, F>(images: Vec<SimImage>, policy: SnapshotPolicy, workload: W) -> Outcome
where
    W: FnOnce(Rc<Shard>) -> F + Clone + Send + 'static,
    F: Future<Output = ()> + 'static,
{
    let images = Arc::new(Mutex::new(images.into_iter().map(Some).collect::<Vec<_>>()));
    let tables = Arc::new(Mutex::new(vec![None; SHARDS]));
    let done = Arc::new(AtomicBool::new(false));
    let recovered = Arc::new(Mutex::new(Vec::new()));
    let (keep_images, keep_tables, keep_recovered) =
        (images.clone(), tables.clone(), recovered.clone());
    run_shards(SHARDS, move |builder| async move {
        let (mesh, receivers) = Mesh::join(builder).await;
        let id = mesh.shard_id();
        let disk = SimDisk::from_image(images.lock().unwrap()[id].take().unwrap());
        let (log, internal, _) = ShardLog::open(AnyDisk::Sim(disk.clone()), log_config())
            .await
            .expect("the log recovers");
        let config = ShardConfig {
            max_message_bytes: 64 << 10,
            metadata_snapshot: policy,
            ..ShardConfig::default()
        };
        let shard = Shard::new(log, mesh.clone(), config);
        mesh.spawn_receivers(receivers, shard.clone());
        if id == 0 {
            let metadata = internal.iter().filter(|e| e.stream == InternalStream::Metadata);
            *recovered.lock().unwrap() = metadata.map(|e| e.snapshot).collect();
            shard.start_controller(&internal).await.expect("the controller starts");
        }
        shard.wait_for_table().await;
        if id == 0 {
            workload(shard.clone()).await;
            done.store(true, SeqCst);
        }
        while !done.load(SeqCst) {
            glommio::timer::sleep(Duration::from_millis(1)).await;
        }
        assert_covered_is_the_table_walk(&shard);
        assert_scoped_snapshots_are_parts_of_the_whole(&shard).await;
        tables.lock().unwrap()[id] = Some((*shard.table()).clone());
        images.lock().unwrap()[id] = Some(disk.crash().image());
    })
    .unwrap();
    let images = keep_images.lock().unwrap().iter_mut().map(|i| i.take().unwrap()).collect();
    let tables = keep_tables.lock().unwrap().iter_mut().map(|t| t.take().unwrap()).collect();
    let recovered_metadata = keep_recovered.lock().unwrap().clone();
    Outcome { images, tables, recovered_metadata }
}

/// The producer-state snapshot's `covered` list, taken from the log's partition map, is
/// what walking the table for this shard's partitions and looking each up in the log gave
/// (the list before issue 19), after creates, deletes, new partitions and restarts.
fn assert_covered_is_the_table_walk(shard: &Shard) {
    let mut covered = shard.producer_state_covered();
    covered.sort_unstable();
    let mut walked: Vec<(u64, i64)> = shard
        .local_partitions()
        .into_iter()
        .filter_map(|p| shard.log.partition_info(p).map(|info| (p.0, info.log_end_offset)))
        .collect();
    walked.sort_unstable();
    assert_eq!(covered, walked, "shard {}", shard.id);
}

/// A metrics snapshot of a few topics (a console page) holds exactly their topic and
/// partition figures of the whole one, and one of the shard only none, with the same
/// partition count: after creates, deletes, new partitions and restarts.
async fn assert_scoped_snapshots_are_parts_of_the_whole(shard: &Shard) {
    let whole = shard.metrics_snapshot(&MetricsScope::all()).await;
    assert_eq!(whole.partition_count as usize, whole.partitions.len(), "shard {}", shard.id);
    let only_shard = shard.metrics_snapshot(&MetricsScope::shards()).await;
    assert_eq!(only_shard.partition_count, whole.partition_count);
    assert!(only_shard.topics.is_empty() && only_shard.partitions.is_empty());
    assert!(only_shard.committed.is_empty() && only_shard.groups.is_empty());
    let table = shard.table();
    // Every third topic of the table, and one that does not exist.
    let mut asked: Vec<String> = table.topics.keys().step_by(3).cloned().collect();
    asked.push("no-such-topic".to_string());
    let some = shard.metrics_snapshot(&MetricsScope::topics(asked.clone())).await;
    let is_asked = |topic: &String| asked.contains(topic);
    let whole_topics: Vec<&String> =
        whole.topics.iter().map(|t| &t.topic).filter(|t| is_asked(t)).collect();
    let mut some_topics: Vec<&String> = some.topics.iter().map(|t| &t.topic).collect();
    some_topics.sort();
    assert_eq!(some_topics, whole_topics, "shard {}", shard.id);
    let key = |p: &PartitionMetrics| (p.topic.clone(), p.partition, p.high_watermark, p.size_bytes);
    let mut expected: Vec<_> =
        whole.partitions.iter().filter(|p| is_asked(&p.topic)).map(key).collect();
    let mut got: Vec<_> = some.partitions.iter().map(key).collect();
    expected.sort();
    got.sort();
    assert_eq!(got, expected, "shard {}", shard.id);
}

fn fresh_images(seed: u64) -> Vec<SimImage> {
    (0..SHARDS).map(|s| SimDisk::new(seed + s as u64).image()).collect()
}

async fn create(shard: &Rc<Shard>, name: &str, partitions: i32) {
    let result = shard.create_topics(vec![new_topic(name, partitions)], false).await;
    result.into_iter().next().unwrap().expect("the topic is created");
}

/// One record to partition 0 of `topic`, acknowledged once durable.
async fn produce(shard: &Rc<Shard>, topic: &str) {
    let mut batch = Vec::new();
    let mut writer = RecordBatchWriter::new(&mut batch, 1_700_000_000_000);
    writer.push(None, b"value");
    writer.finish();
    let owner_local = shard.owner_of(topic, 0) == Ok(shard.id);
    let acked = shard.produce(topic, 0, batch.into(), -1, None).await.await;
    assert!(acked.is_ok(), "produce to {topic} (local: {owner_local}): {acked:?}");
}

const TOPICS: usize = 4_000;
const PER_WINDOW: usize = 1_000;

/// Creates `TOPICS` topics x 4 partitions, one request each; shard 0's flushed bytes
/// after every `PER_WINDOW`. Then a mix of deletes, config changes, new partitions and
/// produce, with a checkpoint in the middle.
async fn many_topics_then_churn(shard: Rc<Shard>, flushed: Arc<Mutex<Vec<u64>>>) {
    flushed.lock().unwrap().push(shard.log.probes().flushed_bytes);
    for i in 0..TOPICS {
        create(&shard, &format!("topic-{i:05}"), 4).await;
        if (i + 1) % PER_WINDOW == 0 {
            flushed.lock().unwrap().push(shard.log.probes().flushed_bytes);
        }
    }
    for i in 0..600usize {
        let name = format!("topic-{:05}", i * 5);
        match i % 4 {
            0 => assert!(shard.delete_topics(vec![name]).await.remove(0).is_ok()),
            1 => {
                let change = ConfigChange::Replace(vec![("retention.ms".into(), i.to_string())]);
                let request = TopicConfigChange { topic: name, change };
                assert!(shard.alter_topic_configs(vec![request], false).await.remove(0).is_ok());
            }
            2 => {
                let request = NewPartitions { topic: name, count: 6, assignments: None };
                assert!(shard.create_partitions(vec![request], false).await.remove(0).is_ok());
            }
            _ => produce(&shard, &name).await,
        }
        if i == 300 {
            shard.log.checkpoint().await.expect("a checkpoint");
        }
    }
}

#[test]
fn bytes_written_per_create_do_not_grow_with_topics_and_every_change_survives_a_crash() {
    // Snapshots well inside the run: the first after 64 KiB of change records.
    let policy = SnapshotPolicy { max_changes: 100_000, min_change_bytes: 64 << 10 };
    let flushed = Arc::new(Mutex::new(Vec::new()));
    let figures = flushed.clone();
    let before = run(fresh_images(11), policy, move |shard| many_topics_then_churn(shard, figures));
    let flushed = flushed.lock().unwrap().clone();
    let per_create: Vec<u64> =
        flushed.windows(2).map(|w| (w[1] - w[0]) / PER_WINDOW as u64).collect();
    println!(
        "shard 0 bytes flushed per create, per {PER_WINDOW} topics: {per_create:?} ({flushed:?})"
    );
    let (first, last) = (per_create[0], *per_create.last().unwrap());
    assert!(
        last <= first + first / 2,
        "creating topic {TOPICS} wrote {last} bytes, the first thousand {first} each"
    );
    let [controller, copy] = &before.tables[..] else { unreachable!() };
    assert_eq!(controller.topics.len(), TOPICS - 150);
    assert_eq!(copy, controller, "shard 1's copy, built from change records, is the table");
    // Everything above was answered, so all of it is durable: the crash keeps it all.
    let policy = SnapshotPolicy::default();
    let after = run(before.images, policy, |_| async {});
    for (shard, table) in after.tables.iter().enumerate() {
        assert_eq!(table, controller, "shard {shard} after the crash");
    }
    // Recovery started from a snapshot taken during the run, not from the empty table.
    let replayed = &after.recovered_metadata;
    println!("recovery: a snapshot, then {} change records", replayed.len() - 1);
    assert!(replayed[0] && replayed[1..].iter().all(|s| !s), "{replayed:?}");
    assert!(replayed.len() < TOPICS, "{} entries replayed", replayed.len());
}

/// What a broker before change records wrote: a whole-table snapshot per change.
async fn old_format_snapshots(shard: Rc<Shard>, tables: Arc<Mutex<Vec<TopicTable>>>) {
    let mut table = TopicTable::new(SHARDS as u32);
    for i in 0..20 {
        let meta_id = [i as u8 + 1; 16];
        table.add_topic(&new_topic(&format!("old-{i:02}"), 1 + i % 3), meta_id);
        if i % 7 == 6 {
            table.remove_topic(&format!("old-{:02}", i - 3));
        }
        let durable = shard.log.append_internal(InternalStream::Metadata, true, &table.encode());
        durable.unwrap().wait().await.unwrap();
    }
    tables.lock().unwrap().push(table);
}

#[test]
fn a_data_dir_of_whole_table_snapshots_recovers_and_takes_change_records_after_them() {
    let policy = SnapshotPolicy::default();
    let written = Arc::new(Mutex::new(Vec::new()));
    let keep = written.clone();
    // The shards start on a fresh dir (the controller writes its empty snapshot), then the
    // old format's snapshots follow it: recovery must take the last of them.
    let old = run(fresh_images(21), policy, move |shard| old_format_snapshots(shard, keep));
    let old_table = written.lock().unwrap().pop().unwrap();
    let middle = run(old.images, policy, |shard| async move {
        create(&shard, "new-topic", 3).await;
        assert!(shard.delete_topics(vec!["old-00".into()]).await.remove(0).is_ok());
    });
    let mut expected = old_table.clone();
    assert_eq!(middle.tables[0].topic("old-05"), expected.topic("old-05"));
    expected.remove_topic("old-00");
    assert!(expected.topic("new-topic").is_none());
    let after = run(middle.images, policy, |_| async {});
    for table in &after.tables {
        assert_eq!(table, &middle.tables[0]);
        assert!(table.topic("new-topic").is_some() && table.topic("old-00").is_none());
        assert_eq!(table.topic("old-19"), old_table.topic("old-19"));
        assert_eq!(table.next_topic_number, old_table.next_topic_number + 1);
    }
}
