//! Partition snapshots (docs/replication.md, "Partition snapshots"): three broker
//! processes on 127.0.0.1 (`--cores 1` each, temp dirs, free ports) hold a topic of two
//! partitions and replication factor 3, whose group is also shard 0's offsets group. A
//! producer that is not idempotent writes first (a second apply of its entries would store
//! its records twice), then an idempotent acks=all librdkafka producer, a raw idempotent
//! batch (sequence 0 of a producer id the node to be wiped handed out) and a consumer
//! group's commit. A follower's node is
//! killed with SIGKILL and its data dir deleted; more records are produced until the
//! leader compacted its raft log with that node away (`--replica-snapshot-after-ms 1000`);
//! 20 more of the producer that is not idempotent follow (their entries lie between the
//! compaction point and the snapshot's index: the catch-up must not apply them again);
//! the node restarts with the same id and an empty dir, and must catch up from a
//! partition snapshot (its log says so, `shardlog_partition_snapshots_installed_total`
//! counts it, the three copies end the same size), and a producer id it hands out then is
//! not the one it handed out before (its first batch is stored). Then leaders other than
//! the rejoined
//! node are killed in turn until it leads: every acknowledged record is read back from it
//! exactly once at its acknowledged offset, the raw batch sent again is answered as a
//! duplicate at its first offset, and the group's committed offsets are intact. Before
//! that read-back, a follower's node is killed (its data kept) while the rejoined leader
//! compacts twice, and restarted: it catches up from a snapshot as well.
//!
//! Every wait has a deadline that fails with what it waited for; nothing asserts on speed.

mod common;
#[path = "common/replicated.rs"]
mod replicated;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{Broker, RawClient};
use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind};
use replicated::{node_of, Ack, Load, Topic, DEADLINE, NODES};

const TOPIC: Topic = Topic { name: "snapshotted", partitions: 2, replicas: NODES };
const GROUP: &str = "snapshotted-group";
const ALL: [usize; NODES] = [0, 1, 2];

/// Commits, per partition, the offset after the last acknowledged record.
fn commit_group_offsets(cluster: &[Broker], acked: &[Ack]) -> BTreeMap<i32, Option<i64>> {
    let offsets = replicated::commit_group_offsets(cluster, TOPIC.name, GROUP, acked);
    offsets.into_iter().map(|(p, o)| (p, Some(o))).collect()
}

/// InitProducerId v4 without a transactional id at `broker`: its producer id.
fn init_producer_id(broker: &Broker) -> i64 {
    use kafka_protocol::messages::init_producer_id_request::InitProducerIdRequest;
    let request = InitProducerIdRequest::default()
        .with_transaction_timeout_ms(60_000)
        .with_producer_id((-1).into())
        .with_producer_epoch(-1);
    let mut client = RawClient::connect(broker.shard_addr(0));
    match client.call(ApiKey::InitProducerId, 4, RequestKind::InitProducerId(request)) {
        ResponseKind::InitProducerId(r) if r.error_code == 0 => r.producer_id.0,
        other => panic!("InitProducerId: {other:?}"),
    }
}

/// A raw idempotent batch of `producer_id` (epoch 0, sequence 0) to partition 0 at
/// `broker`: (error code, base offset).
fn produce_raw_idempotent(broker: &Broker, producer_id: i64, value: &str) -> (i16, i64) {
    let records = [(&b"k"[..], value.as_bytes())];
    let batch = common::idempotent_batch(&records, 0, producer_id, 0, 0);
    let mut client = RawClient::connect(broker.shard_addr(0));
    common::raw_produce(&mut client, TOPIC.name, 0, batch)
}

fn leader_of(cluster: &[Broker], nodes: &[usize]) -> usize {
    let view = TOPIC.wait_for_one_leader(cluster, nodes, "the running nodes to name one leader");
    node_of(view[0].1) - 1
}

#[test]
fn a_node_that_lost_its_data_dir_rejoins_its_partition_groups_from_a_snapshot() {
    let (mut cluster, view) = TOPIC.start_cluster_with(&["--replica-snapshot-after-ms", "1000"]);
    let leader = node_of(view[0].1) - 1;
    let wiped = (leader + 1) % NODES;
    common::produce_tagged(&cluster[leader], TOPIC.name, TOPIC.partitions, "plain", 20);
    // A producer id handed out by the node to be wiped (whose counter restarts at 0).
    let old_producer = init_producer_id(&cluster[wiped]);
    let (error, raw_offset) = produce_raw_idempotent(&cluster[leader], old_producer, "raw-old");
    assert_eq!(error, 0, "the raw idempotent batch");
    let load = Load::start(&cluster, TOPIC, "a");
    load.acked.wait_for(100, "100 records before the wipe");
    let mut acked = load.stop();
    let commits = commit_group_offsets(&cluster, &acked);

    cluster[wiped].kill();
    std::fs::remove_dir_all(cluster[wiped].data_dir()).unwrap();
    let compactions = |node: &Broker| node.metric_sum("shardlog_raft_compactions_total");
    let before = compactions(&cluster[leader]);
    let load = Load::start(&cluster, TOPIC, "b");
    common::eventually(DEADLINE, "the leader to compact twice with the node away", || {
        compactions(&cluster[leader]) >= before + 2.0
    });
    load.acked.wait_for(load.acked.len() + 50, "50 more records");
    acked.extend(load.stop());
    // Records of a producer that is not idempotent in entries after the last compaction
    // point (so at or below the snapshot's index A, not in its snapshot point): applied
    // again, they would be stored twice. Again until no compaction followed them.
    let mut rounds = 0;
    loop {
        let before = compactions(&cluster[leader]);
        let tag: &'static str = Box::leak(format!("late{rounds}").into_boxed_str());
        common::produce_tagged(&cluster[leader], TOPIC.name, TOPIC.partitions, tag, 20);
        std::thread::sleep(Duration::from_millis(500)); // five ticks: time to compact
        if compactions(&cluster[leader]) == before {
            break;
        }
        rounds += 1;
        assert!(rounds < 10, "a compaction followed every round of late records");
    }
    let held = cluster[leader].metric_sum("shardlog_raft_log_entries");
    assert!(held < 200.0, "the leader still holds {held} raft entries: nothing compacted");

    replicated::wait_for_listeners_closed(&cluster[wiped]);
    cluster[wiped].restart();
    let installed = |node: &Broker| node.metric_sum("shardlog_partition_snapshots_installed_total");
    common::eventually(DEADLINE, "the wiped node to install a partition snapshot", || {
        installed(&cluster[wiped]) > 0.0
    });
    let log = cluster[wiped].log();
    let line = log.lines().find(|l| l.contains("partition snapshot installed"));
    eprintln!("the rejoined node: {}", line.expect("the rejoined node's log says it installed"));
    // The rejoined node hands out no id it handed out before the wipe: a new producer's
    // first batch is stored, not taken for an old producer's duplicate or out of order.
    let new_producer = init_producer_id(&cluster[wiped]);
    assert_ne!(new_producer, old_producer, "a producer id handed out again after the wipe");
    let leader_now = leader_of(&cluster, &ALL);
    let (error, offset) = produce_raw_idempotent(&cluster[leader_now], new_producer, "raw-new");
    assert_eq!(error, 0, "the new producer's first batch");
    assert!(offset > raw_offset, "stored at {offset}, after the old producer's {raw_offset}");
    acked.push((0, offset, "raw-new".to_string()));
    let load = Load::start(&cluster, TOPIC, "c");
    load.acked.wait_for(30, "30 records after the rejoin");
    acked.extend(load.stop());
    let sizes = TOPIC.wait_for_equal_copies(&cluster);

    // Leaders other than the rejoined node are killed in turn until it leads.
    let mut kills = 0;
    loop {
        let leader = leader_of(&cluster, &ALL);
        if leader == wiped {
            break;
        }
        assert!(kills < 20, "the rejoined node never led after {kills} kills");
        cluster[leader].kill();
        let others: Vec<usize> = ALL.iter().copied().filter(|n| *n != leader).collect();
        TOPIC.wait_for_one_leader(&cluster, &others, "the two others to name a new leader");
        replicated::wait_for_listeners_closed(&cluster[leader]);
        cluster[leader].restart();
        kills += 1;
    }
    let load = Load::start(&cluster, TOPIC, "d");
    load.acked.wait_for(30, "30 records with the rejoined node leading");
    acked.extend(load.stop());

    // A follower that is only away (its data dir kept) past the compaction point catches
    // up from a snapshot too, resuming from what it holds.
    let away = (wiped + 1) % NODES;
    cluster[away].kill();
    // Away long enough first (1 s, noted at the leader's next check-quorum round, 1 s
    // later; with room for a loaded machine: 3 s once failed in CI, the node came back
    // before the compactions passed what it held), so that the compactions counted pass
    // what it holds: then the leader holds few entries however long the load runs.
    std::thread::sleep(Duration::from_secs(8));
    let before = compactions(&cluster[wiped]);
    let load = Load::start(&cluster, TOPIC, "e");
    common::eventually(DEADLINE, "the rejoined leader to compact twice, a node away", || {
        compactions(&cluster[wiped]) >= before + 2.0
            && load.acked.len() >= 300
            && cluster[wiped].metric_sum("shardlog_raft_log_entries") < 200.0
    });
    load.acked.wait_for(load.acked.len() + 50, "50 more records");
    acked.extend(load.stop());
    replicated::wait_for_listeners_closed(&cluster[away]);
    cluster[away].restart();
    common::eventually(DEADLINE, "the node that was away to install a snapshot", || {
        installed(&cluster[away]) > 0.0
    });
    TOPIC.wait_for_one_leader(&cluster, &ALL, "every node to name the rejoined leader");
    TOPIC.wait_for_equal_copies(&cluster);

    let stored = common::read_topic(&cluster[wiped], TOPIC.name, TOPIC.partitions);
    let ends = replicated::check_acknowledged(&stored, &acked);
    assert_eq!(
        produce_raw_idempotent(&cluster[wiped], old_producer, "raw-old"),
        (0, raw_offset),
        "the raw batch sent again: a duplicate, answered with its first offset"
    );
    let stored_again = common::read_topic(&cluster[wiped], TOPIC.name, TOPIC.partitions);
    assert_eq!(stored_again, stored, "the duplicate stored nothing");
    let consumer = replicated::group_consumer(&cluster, &[wiped], GROUP);
    let committed = common::committed_offsets(&consumer, TOPIC.name, TOPIC.partitions, DEADLINE);
    assert_eq!(committed, commits, "the group's committed offsets, from the rejoined node");
    eprintln!(
        "{} records acknowledged; stored per partition {ends:?}; sizes after the rejoin \
         {sizes:?}; {kills} leader kills until the rejoined node led; partitions installed \
         {} (the node that was away: {}); bytes pulled {}",
        acked.len(),
        installed(&cluster[wiped]),
        installed(&cluster[away]),
        cluster[wiped].metric_sum("shardlog_partition_snapshot_bytes_pulled_total"),
    );
}
