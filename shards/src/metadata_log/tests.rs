//! Table tests of the metadata log: change records against the table, recovery from
//! snapshots plus changes (and from old data dirs of snapshots only), the snapshot policy.

use bytes::Bytes;
use shardlog_storage::{InternalEntry, InternalStream};

use super::*;
use crate::metadata::NewTopic;

fn new_topic(name: &str, partitions: i32) -> NewTopic {
    NewTopic {
        name: name.into(),
        num_partitions: partitions,
        replication_factor: 1,
        configs: vec![("retention.ms".into(), "1000".into())],
    }
}

fn entry(snapshot: bool, payload: Vec<u8>) -> InternalEntry {
    InternalEntry { stream: InternalStream::Metadata, snapshot, payload: Bytes::from(payload) }
}

/// Applies one request's changes to `table` as the controller does; its entry.
fn change(table: &mut TopicTable, f: impl FnOnce(&mut PendingTable)) -> InternalEntry {
    let mut pending = PendingTable::new(table);
    f(&mut pending);
    let record = pending.into_record().expect("the request changed something");
    let payload = record.encode();
    record.apply(table).unwrap();
    entry(false, payload)
}

#[test]
fn change_records_replayed_after_the_newest_snapshot_give_the_controllers_table() {
    let mut table = TopicTable::new(3);
    let mut log = vec![entry(true, table.encode())];
    log.push(change(&mut table, |p| {
        p.create(&new_topic("a", 2), [1; 16]);
        p.create(&new_topic("b", 1), [2; 16]);
    }));
    log.push(change(&mut table, |p| assert!(p.delete("a"))));
    log.push(entry(true, table.encode()));
    log.push(change(&mut table, |p| p.create(&new_topic("a", 4), [3; 16])));
    log.push(change(&mut table, |p| p.add_partitions("b", &[2, 0], &[vec![0], vec![0]])));
    log.push(change(&mut table, |p| p.set_configs("b", vec![("retention.ms".into(), "5".into())])));
    let (restored, schedule) = restore(&log).unwrap().unwrap();
    assert_eq!(restored, table);
    assert_eq!(restored.topic("a").unwrap().topic_number, 3, "numbers are never reused");
    assert_eq!(restored.topic("b").unwrap().partition_shards, vec![2, 2, 0]);
    assert_eq!(restored.topic("b").unwrap().config("retention.ms"), Some("5"));
    assert_eq!(schedule.changes_since, 3);
    assert_eq!(restored.version, 6, "one version per change, as the table's own methods");
}

/// What every broker before placement over nodes wrote (snapshot format 3, change
/// records format 2: encoded here with copies of those types) restores to the table the
/// same requests give now, every partition on node 0; a data dir then carries on with
/// records of the new format after them.
#[test]
fn a_data_dir_written_before_placement_over_nodes_restores_on_node_0() {
    use super::change::{ChangeRecordV2, TopicChangeV2};
    use crate::metadata::{TopicMetaV3, TopicTableV3};
    let old_meta = |name: &str, number: u32, shards: Vec<u32>| TopicMetaV3 {
        name: name.into(),
        topic_number: number,
        topic_id: [number as u8; 16],
        partition_shards: shards,
        configs: vec![("retention.ms".into(), "1000".into())],
    };
    let snapshot = TopicTableV3 {
        version: 1,
        nr_shards: 3,
        next_topic_number: 2,
        topics: [("a".to_string(), old_meta("a", 1, vec![1, 2]))].into(),
        acls: Default::default(),
        users: Default::default(),
    };
    let records = [
        ChangeRecordV2 {
            base_version: 1,
            changes: vec![TopicChangeV2::Create(old_meta("b", 2, vec![2, 0, 1]))],
        },
        ChangeRecordV2 {
            base_version: 2,
            changes: vec![TopicChangeV2::AddPartitions {
                name: "a".into(),
                topic_number: 1,
                partition_shards: vec![0],
            }],
        },
    ];
    let mut log = vec![entry(true, crate::codec::encode_versioned(3, &snapshot))];
    log.extend(records.iter().map(|r| entry(false, r.encode())));
    // The same requests today, on one node.
    let mut table = TopicTable::new(3);
    table.add_topic(&new_topic("a", 2), [1; 16]);
    table.add_topic(&new_topic("b", 3), [2; 16]);
    table.add_partitions("a", &[0], &[vec![0]]);
    let (restored, _) = restore(&log).unwrap().unwrap();
    assert_eq!(restored, table);
    assert_eq!(restored.topic("a").unwrap().partition_replicas, vec![vec![0]; 3]);
    // And new records follow the old ones.
    log.push(change(&mut table, |p| p.create(&new_topic("c", 1), [3; 16])));
    let (restored, schedule) = restore(&log).unwrap().unwrap();
    assert_eq!(restored, table);
    assert_eq!(schedule.changes_since, 3);
}

#[test]
fn a_data_dir_of_whole_table_snapshots_restores_its_last_table() {
    // What a broker before change records wrote: one snapshot per change.
    let mut table = TopicTable::new(2);
    let mut log = Vec::new();
    for name in ["x", "y", "z"] {
        table.add_topic(&new_topic(name, 3), [9; 16]);
        log.push(entry(true, table.encode()));
    }
    table.remove_topic("y");
    log.push(entry(true, table.encode()));
    let (restored, schedule) = restore(&log).unwrap().unwrap();
    assert_eq!(restored, table);
    assert_eq!(schedule.changes_since, 0);
    assert_eq!(restore(&[]).unwrap(), None, "a fresh dir");
}

#[test]
fn recovery_refuses_a_change_record_that_does_not_follow_its_table() {
    let mut table = TopicTable::new(1);
    let snapshot = entry(true, table.encode());
    let first = change(&mut table, |p| p.create(&new_topic("a", 1), [1; 16]));
    let second = change(&mut table, |p| p.create(&new_topic("b", 1), [2; 16]));
    let skipped = restore(&[snapshot.clone(), second.clone()]).unwrap_err();
    assert!(skipped.contains("version 1 follows table version 0"), "{skipped}");
    let twice = restore(&[snapshot, first.clone(), first.clone()]).unwrap_err();
    assert!(twice.contains("follows"), "{twice}");
    let orphan = restore(&[first]).unwrap_err();
    assert!(orphan.contains("no snapshot"), "{orphan}");
    // A change payload read as a snapshot (an older broker) is refused by its version byte.
    let old_reader = TopicTable::decode(&second.payload).unwrap_err();
    assert!(old_reader.contains("format version 5 is not supported"), "{old_reader}");
}

#[test]
fn a_request_sees_its_own_earlier_changes_and_applies_them_in_order() {
    let mut table = TopicTable::new(2);
    change(&mut table, |p| p.create(&new_topic("t", 1), [1; 16]));
    let mut pending = PendingTable::new(&table);
    pending.set_configs("t", vec![("retention.ms".into(), "7".into())]);
    pending.set_configs("t", vec![("retention.ms".into(), "7".into())]);
    assert_eq!(pending.topic("t").unwrap().config("retention.ms"), Some("7"));
    assert!(pending.delete("t"));
    assert!(!pending.delete("t"), "deleted earlier in the same request");
    assert!(pending.topic("t").is_none());
    let record = pending.into_record().unwrap();
    assert_eq!(record.changes.len(), 2, "an unchanged config is no change");
    let deleted = record.apply(&mut table).unwrap();
    assert_eq!(deleted.len(), 1);
    assert!(table.topics.is_empty());
    assert!(PendingTable::new(&table).into_record().is_none());
}

#[test]
fn the_snapshot_schedule_follows_its_policy() {
    let policy = SnapshotPolicy { max_changes: 4, min_change_bytes: 100 };
    let mut schedule = SnapshotSchedule::default();
    // (change bytes, due after it)
    let table = [(30, false), (30, false), (30, false), (10, true)];
    for (bytes, due) in table {
        schedule.record_change(bytes);
        assert_eq!(schedule.due(&policy), due, "{schedule:?}");
    }
    schedule.snapshot_taken(250);
    assert!(!schedule.due(&policy), "nothing since the snapshot");
    schedule.record_change(200);
    assert!(!schedule.due(&policy), "fewer bytes than the last snapshot");
    schedule.record_change(50);
    assert!(schedule.due(&policy), "as many bytes as the last snapshot");
}

/// Payload bytes written per create, averaged over the first `n` creates, with the
/// controller's policy: change records plus the snapshots it decides to write.
fn average_bytes_per_create(policy: SnapshotPolicy, n: usize) -> Vec<f64> {
    let mut table = TopicTable::new(2);
    let mut schedule = SnapshotSchedule::default();
    let mut written = table.encode().len() as u64;
    let mut averages = Vec::new();
    for i in 1..=n {
        let e = change(&mut table, |p| p.create(&new_topic(&format!("topic-{i:06}"), 4), [1; 16]));
        written += e.payload.len() as u64;
        schedule.record_change(e.payload.len());
        if schedule.due(&policy) {
            let snapshot = table.encode().len();
            written += snapshot as u64;
            schedule.snapshot_taken(snapshot);
        }
        if i % 1000 == 0 {
            averages.push(written as f64 / i as f64);
        }
    }
    averages
}

#[test]
fn bytes_written_per_create_do_not_grow_with_the_number_of_topics() {
    let policy = SnapshotPolicy { max_changes: 100_000, min_change_bytes: 64 << 10 };
    let averages = average_bytes_per_create(policy, 20_000);
    let (first, last) = (averages[0], *averages.last().unwrap());
    assert!(last <= 2.0 * first, "per create: {first:.0} bytes over 1,000, {last:.0} over 20,000");
    // The old scheme (a whole-table snapshot per change) fails the same check.
    let every_change = SnapshotPolicy { max_changes: 1, min_change_bytes: 0 };
    let old = average_bytes_per_create(every_change, 4_000);
    assert!(old[3] > 2.0 * old[0], "whole-table snapshots: {old:?}");
}
