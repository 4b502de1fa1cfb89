//! Replicated partitions (docs/replication.md, "What exists: partition groups"): three
//! broker processes on 127.0.0.1 (`--cores 1` each, temp dirs, free ports) hold a topic of
//! replication factor 3. An idempotent acks=all librdkafka producer writes to it while
//! the node that leads the partitions' raft group is killed with SIGKILL; the two others
//! elect a new leader (Metadata names it, in a higher leader epoch), the producer's later
//! records are acknowledged, and the killed node restarts and catches up. Checker: every
//! acknowledged record is present exactly once, at its acknowledged offset, offsets dense,
//! read back with a consumer from the leader; the three nodes' copies end the same size
//! (DescribeLogDirs), which a restarted node that applied its group's entries twice (the
//! applying-marker rule removed) would not be: records of a producer that is not
//! idempotent come first, so no sequence check hides a second apply. Metadata's ISR: all
//! three before the kill, the two survivors on both once the dead replica lagged for
//! replica.lag.time.max.ms (1 s here), all three again once the restarted node caught up;
//! meanwhile an acks=all produce to a topic of that group with min.insync.replicas 3 gets
//! NOT_ENOUGH_REPLICAS, and acks=1 does not.
//!
//! Before that, the replicas that do not lead answer Produce, Fetch and ListOffsets
//! NOT_LEADER_OR_FOLLOWER, and replication factor 4 is refused (INVALID_REPLICATION_FACTOR).
//!
//! A topic of replication factor 2 on the three nodes: every node, the one outside each
//! partition's replica set included, names the same leader, epoch and ISR (leader
//! notices), and the node outside answers NOT_LEADER_OR_FOLLOWER; with one node killed the
//! partitions it replicates have no leader on any node (two replicas need both for a raft
//! majority) while the other one takes produces; restarted, every node names the new
//! leaders, and every acknowledged record is there once, the two copies of each
//! partition the same.
//!
//! KIP-320 (a topic of one partition, replication factor 3): the batches carry the raft
//! term they were applied in as their partition leader epoch; after a kill of the leader,
//! the new one answers OffsetForLeaderEpoch from those terms (the old epoch ends where the
//! new term's first batch starts), fences an old current_leader_epoch (OffsetForLeaderEpoch,
//! Fetch, ListOffsets: 74) and refuses a newer one (75), and a follower answers
//! NOT_LEADER_OR_FOLLOWER; after a second kill, a third leader's copy carries the same
//! stamps and answers the same. A librdkafka consumer reading across the first kill
//! validates its position with OffsetForLeaderEpoch and reads every offset once.
//!
//! Every wait has a deadline that fails with what it waited for; nothing asserts on speed.

mod common;
#[path = "common/replicated.rs"]
mod replicated;

use std::time::{Duration, Instant};

use common::{read_topic, Broker, RawClient};
use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind};
use replicated::{controller, node_of, Load, Topic, View, NODES};

const TOPIC: Topic = Topic { name: "replicated", partitions: 2, replicas: NODES };

/// CreateTopics v5 of one topic with `replication_factor` straight to `broker`: its error
/// code and message.
fn raw_create_topic(broker: &Broker, name: &str, replication_factor: i16) -> (i16, String) {
    use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreateTopicsRequest};
    let mut client = RawClient::connect(broker.bootstrap().parse().unwrap());
    let topic = CreatableTopic::default()
        .with_name(common::topic_name(name))
        .with_num_partitions(1)
        .with_replication_factor(replication_factor);
    let request = CreateTopicsRequest::default().with_topics(vec![topic]).with_timeout_ms(10_000);
    match client.call(ApiKey::CreateTopics, 5, RequestKind::CreateTopics(request)) {
        ResponseKind::CreateTopics(r) => {
            let message = r.topics[0].error_message.as_ref().map(|m| m.to_string());
            (r.topics[0].error_code, message.unwrap_or_default())
        }
        other => panic!("{other:?}"),
    }
}

/// A topic of one partition, replication factor 3 and min.insync.replicas 3, created with
/// librdkafka's admin API: in the same raft group as `TOPIC` (the same replica set and
/// shard), so it shares its leader and ISR.
const STRICT: &str = "strict";

fn create_strict_topic(broker: &Broker) {
    use rdkafka::admin::{AdminOptions, NewTopic, TopicReplication};
    let topic = NewTopic::new(STRICT, 1, TopicReplication::Fixed(NODES as i32))
        .set("min.insync.replicas", "3");
    let admin = common::admin_client(broker);
    let results = common::runtime().block_on(admin.create_topics(&[topic], &AdminOptions::new()));
    results.unwrap()[0].clone().expect("the strict topic created");
}

/// An acks=`acks` produce of one record to the strict topic at the leader named in
/// `view` (whose leader is the group's): its error code.
fn produce_strict(cluster: &[Broker], view: &View, acks: i16) -> i16 {
    let leader = node_of(view[0].1) - 1;
    let mut client = RawClient::connect(cluster[leader].shard_addr(0));
    let batch = common::record_batch(&[(&b"k"[..], &b"v"[..])], 0);
    common::raw_produce_acks(&mut client, STRICT, 0, batch, acks).0
}

/// Produce, Fetch and ListOffsets of `topic`'s `partition` sent to `broker`'s shard: their
/// error codes.
fn partition_request_errors(broker: &Broker, topic: &str, partition: i32) -> [i16; 3] {
    use kafka_protocol::messages::list_offsets_request::{
        ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic,
    };
    let mut client = RawClient::connect(broker.shard_addr(0));
    let batch = common::record_batch(&[(&b"k"[..], &b"v"[..])], 0);
    let (produce, _) = common::raw_produce(&mut client, topic, partition, batch);
    let fetch = match client.call(ApiKey::Fetch, 12, common::fetch_request(topic, partition, 0, 0))
    {
        ResponseKind::Fetch(r) => r.responses[0].partitions[0].error_code,
        other => panic!("{other:?}"),
    };
    let partition =
        ListOffsetsPartition::default().with_partition_index(partition).with_timestamp(-1);
    let topic = ListOffsetsTopic::default()
        .with_name(common::topic_name(topic))
        .with_partitions(vec![partition]);
    let request =
        ListOffsetsRequest::default().with_replica_id((-1).into()).with_topics(vec![topic]);
    let list_offsets = match client.call(ApiKey::ListOffsets, 5, RequestKind::ListOffsets(request))
    {
        ResponseKind::ListOffsets(r) => r.topics[0].partitions[0].error_code,
        other => panic!("{other:?}"),
    };
    [produce, fetch, list_offsets]
}

#[test]
fn a_replicated_topic_loses_no_acknowledged_record_across_a_kill_of_its_leader() {
    let (mut cluster, before) = TOPIC.start_cluster();
    let all = [0, 1, 2];
    for (partition, (_, _, epoch, replicas)) in before.iter().enumerate() {
        assert_eq!(replicas.len(), NODES, "partition {partition}'s replicas: {replicas:?}");
        assert!(*epoch > 0, "partition {partition}'s leader epoch is a raft term: {epoch}");
    }
    let leader_node = node_of(before[0].1);
    assert!(before.iter().all(|p| node_of(p.1) == leader_node), "one group: {before:?}");

    // Replicas that do not lead answer NOT_LEADER_OR_FOLLOWER; a replication factor above
    // the nodes is refused with the reason.
    for follower in all.iter().copied().filter(|n| *n + 1 != leader_node) {
        let errors = partition_request_errors(&cluster[follower], TOPIC.name, 0);
        assert_eq!(errors, [6; 3], "produce, fetch, list offsets on node {}", follower + 1);
    }
    let controller_node = node_of(controller(&cluster[0])) - 1;
    let (code, message) = raw_create_topic(&cluster[controller_node], "four", 4);
    assert_eq!(code, 38, "replication factor 4 on 3 nodes: {message}");
    assert!(message.contains("number of nodes in the cluster (3)"), "{message}");

    // Records of a producer that is not idempotent first: a replica that applied their
    // entries again after its restart would store them twice (no sequence check would
    // stop it), which the copies' sizes below catch.
    common::produce_tagged(&cluster[0], TOPIC.name, TOPIC.partitions, "plain", 20);

    let load = Load::start(&cluster, TOPIC, "r");
    load.acked.wait_for(60, "60 records acknowledged before the kill");

    TOPIC.wait_for_isr(&cluster, &all, &[1, 2, 3]);
    create_strict_topic(&cluster[0]);
    let strict_view = |cluster: &[Broker], n: usize| TOPIC.view(&cluster[n]).unwrap();
    common::eventually(replicated::DEADLINE, "acks=all to the strict topic", || {
        produce_strict(&cluster, &strict_view(&cluster, 0), -1) == 0
    });

    // The leader's node dies; the two others elect a new leader in a higher term.
    let dead = leader_node - 1;
    cluster[dead].kill();
    let acked_at_kill = load.acked.len();
    let survivors: Vec<usize> = all.iter().copied().filter(|n| *n != dead).collect();
    TOPIC.wait_for(&cluster, &survivors, "a new leader in a higher epoch", |views| {
        TOPIC.one_leader(views)
            && node_of(views[0][0].1) != leader_node
            && views[0].iter().zip(&before).all(|(now, then)| now.2 > then.2)
    });
    load.acked.wait_for(acked_at_kill + 60, "60 more records acknowledged after the kill");
    // The dead replica leaves the ISR (after replica.lag.time.max.ms), on both survivors.
    let alive: Vec<usize> = survivors.iter().map(|n| n + 1).collect();
    TOPIC.wait_for_isr(&cluster, &survivors, &alive);
    // With 2 in sync of the 3 min.insync.replicas asks, acks=all is refused
    // (NOT_ENOUGH_REPLICAS), acks=1 is not.
    let view_now = strict_view(&cluster, survivors[0]);
    let under_replicated = |cluster: &[Broker], nodes: &[usize]| -> f64 {
        let metric = "shardlog_under_replicated_partitions";
        nodes.iter().map(|n| cluster[*n].metric_sum(metric)).sum()
    };
    // The leader's shard counts the topic's partitions and the strict topic's one.
    let expected = (TOPIC.partitions + 1) as f64;
    assert_eq!(under_replicated(&cluster, &survivors), expected, "under-replicated");
    assert_eq!(produce_strict(&cluster, &view_now, -1), 19, "acks=all below min.insync");
    assert_eq!(produce_strict(&cluster, &view_now, 1), 0, "acks=1 below min.insync");

    // The killed node restarts and catches up.
    replicated::wait_for_listeners_closed(&cluster[dead]);
    cluster[dead].restart();
    TOPIC.wait_for_one_leader(&cluster, &all, "the restarted node to name the same leader");
    let acked_at_restart = load.acked.len();
    load.acked.wait_for(acked_at_restart + 30, "30 more records after the restart");
    // Caught up, it is back in the ISR, on every node, and acks=all is taken again.
    TOPIC.wait_for_isr(&cluster, &all, &[1, 2, 3]);
    let view_now = strict_view(&cluster, 0);
    assert_eq!(produce_strict(&cluster, &view_now, -1), 0, "acks=all, all in sync again");
    assert_eq!(under_replicated(&cluster, &all), 0.0, "none under-replicated");
    let acked = load.stop();

    // Every acknowledged record exactly once, at its offset; offsets dense.
    let stored = read_topic(&cluster[survivors[0]], TOPIC.name, TOPIC.partitions);
    let ends = replicated::check_acknowledged(&stored, &acked);

    // The three copies end the same (their sizes: the same batches at the same offsets).
    let sizes = TOPIC.wait_for_equal_copies(&cluster);
    let after: View = TOPIC.view(&cluster[0]).unwrap();
    eprintln!(
        "{} records acknowledged ({acked_at_kill} before the kill, {acked_at_restart} before \
         the restart); stored per partition {ends:?}; log sizes {sizes:?}; leader and epoch \
         before {:?}, after {:?}",
        acked.len(),
        (before[0].1, before[0].2),
        (after[0].1, after[0].2)
    );
}

/// Bytes of each record in the compaction test: 640 of them are 20 MiB, past the 8 MiB
/// at which a shard writes a stream snapshot.
const PADDED_BYTES: usize = 32 << 10;
const PADDED_RECORDS: usize = 640;

/// Each node's raft figures from `/metrics`: log entry bytes, log entries, compactions,
/// stream snapshots, and the bytes its shard log holds of the Raft stream (what memory
/// and checkpoints carry).
fn raft_figures(node: &Broker) -> [u64; 5] {
    let names = [
        "log_entry_bytes",
        "log_entries",
        "compactions_total",
        "stream_snapshots_total",
        "stream_held_bytes",
    ];
    names.map(|name| node.metric_sum(&format!("shardlog_raft_{name}")) as u64)
}

/// Log compaction (docs/replication.md, "Log compaction"). With a follower down, the
/// leader keeps every entry the follower lacks (invariant 4 of `partition_group`: a
/// compaction past it would leave it unable to catch up, since no snapshot is sent); once
/// it is back and caught up from entries, every replica compacts its log, and every
/// node's `Raft` stream is snapshotted and its older entries forgotten. Then the leader's
/// node is killed and restarts from its stream snapshot: records of a producer that is
/// not idempotent, produced just before, must not be applied twice (the copies' sizes),
/// and every acknowledged record is there exactly once.
#[test]
fn raft_logs_compact_only_what_every_replica_has_and_a_node_restarts_from_a_stream_snapshot() {
    let (mut cluster, view) = TOPIC.start_cluster();
    let all = [0, 1, 2];
    let leader = node_of(view[0].1) - 1;
    let follower = (leader + 1) % NODES;
    cluster[follower].kill();

    // Records of PADDED_BYTES (a tag that long: the values stay unique).
    let tag: &'static str = Box::leak("p".repeat(PADDED_BYTES).into_boxed_str());
    let load = Load::start(&cluster, TOPIC, tag);
    load.acked.wait_for(PADDED_RECORDS, "the padded records acknowledged");
    let mut acked = load.stop();
    let produced = (acked.len() * PADDED_BYTES) as u64;
    let [held, ..] = raft_figures(&cluster[leader]);
    assert!(
        held >= produced / 2,
        "the leader compacted what the down follower lacks: {held} bytes held of {produced}"
    );

    // The follower returns and catches up from entries; then every replica compacts and
    // snapshots its stream.
    replicated::wait_for_listeners_closed(&cluster[follower]);
    cluster[follower].restart();
    TOPIC.wait_for_one_leader(&cluster, &all, "the follower to name the leader");
    TOPIC.wait_for_equal_copies(&cluster);
    let deadline = Instant::now() + replicated::DEADLINE;
    let compacted = loop {
        let now: Vec<[u64; 5]> = cluster.iter().map(raft_figures).collect();
        if now.iter().all(|[bytes, _, compactions, snapshots, stream]| {
            *bytes < 4 << 20 && *compactions > 0 && *snapshots > 0 && *stream < 4 << 20
        }) {
            break now;
        }
        assert!(
            Instant::now() < deadline,
            "every node to compact its log and snapshot its stream: per node [log entry \
             bytes, entries, compactions, stream snapshots, stream bytes held] {now:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };

    // The leader's node restarts from its stream snapshot; a producer that is not
    // idempotent wrote just before (an entry applied again would store its records twice).
    common::produce_tagged(&cluster[leader], TOPIC.name, TOPIC.partitions, "plain", 20);
    cluster[leader].kill();
    replicated::wait_for_listeners_closed(&cluster[leader]);
    cluster[leader].restart();
    TOPIC.wait_for_one_leader(&cluster, &all, "the restarted node to name the leader");
    let load = Load::start(&cluster, TOPIC, "r");
    load.acked.wait_for(30, "30 records after the restart");
    acked.extend(load.stop());

    let stored = read_topic(&cluster[follower], TOPIC.name, TOPIC.partitions);
    let ends = replicated::check_acknowledged(&stored, &acked);
    let sizes = TOPIC.wait_for_equal_copies(&cluster);
    eprintln!(
        "{} records acknowledged; stored per partition {ends:?}; log sizes {sizes:?}; raft \
         figures per node once compacted {compacted:?} ([log entry bytes, entries, \
         compactions, stream snapshots, stream bytes held])",
        acked.len()
    );
}

/// Replication factor 2 on 3 nodes (docs/replication.md, "Replication factors between 1
/// and n"): each node is outside one partition's replica set and learns its leader from
/// the leader's notices.
const TWO: Topic = Topic { name: "two-replicas", partitions: 3, replicas: 2 };

/// The node indexes (0-based) of a partition's replicas in a view.
fn replica_nodes(partition: &(i16, i32, i32, Vec<i32>)) -> Vec<usize> {
    partition.3.iter().map(|b| node_of(*b) - 1).collect()
}

#[test]
fn a_topic_of_two_replicas_on_three_nodes_is_named_by_every_node_and_loses_nothing() {
    let (mut cluster, before) = TWO.start_cluster();
    let all = [0, 1, 2];
    for (partition, p) in before.iter().enumerate() {
        let replicas = replica_nodes(p);
        assert_eq!(replicas.len(), 2, "partition {partition}'s replicas: {p:?}");
        assert!(replicas.contains(&(node_of(p.1) - 1)), "partition {partition}'s leader: {p:?}");
        // The node outside the set: not a replica, and says so.
        let outside = all.iter().copied().find(|n| !replicas.contains(n)).unwrap();
        let errors = partition_request_errors(&cluster[outside], TWO.name, partition as i32);
        assert_eq!(errors, [6; 3], "partition {partition} on node {}", outside + 1);
    }
    let outsiders: Vec<usize> = before
        .iter()
        .map(|p| all.iter().copied().find(|n| !replica_nodes(p).contains(n)).unwrap())
        .collect();
    assert_eq!(
        outsiders.iter().collect::<std::collections::BTreeSet<_>>().len(),
        NODES,
        "each node is outside one partition's set: {before:?}"
    );
    // Every node shows each partition's ISR: both replicas; and counts the notices heard.
    for node in &all {
        let heard = cluster[*node].metric_sum("shardlog_replication_leader_notices_received_total");
        assert!(heard > 0.0, "node {} heard no leader notice", node + 1);
        let isrs = TWO.isrs(&cluster[*node]).unwrap();
        for (isr, p) in isrs.iter().zip(&before) {
            let mut replicas: Vec<usize> = replica_nodes(p).iter().map(|n| n + 1).collect();
            replicas.sort_unstable();
            assert_eq!(*isr, replicas, "node {}'s ISR of {p:?}", node + 1);
        }
    }

    let load = Load::start(&cluster, TWO, "two");
    load.acked.wait_for(60, "60 records acknowledged before the kill");

    // A node dies: the partitions it replicates lose their raft majority and every live
    // node, the one outside their set too (its notice expires), says they have no leader;
    // the partition it does not replicate keeps its leader and takes a produce.
    let dead = 0;
    cluster[dead].kill();
    let survivors = [1, 2];
    let lost = |p: &(i16, i32, i32, Vec<i32>)| replica_nodes(p).contains(&dead);
    TWO.wait_for(&cluster, &survivors, "no leader for the dead node's partitions", |views| {
        views
            .iter()
            .all(|view| view.iter().all(|p| if lost(p) { p.0 == 5 && p.1 == -1 } else { p.0 == 0 }))
    });
    let (kept, p) = before.iter().enumerate().find(|(_, p)| !lost(p)).unwrap();
    let view_now = TWO.view(&cluster[survivors[0]]).unwrap();
    let mut client = RawClient::connect(cluster[node_of(view_now[kept].1) - 1].shard_addr(0));
    let batch = common::record_batch(&[(&b"k"[..], &b"during-the-outage"[..])], 0);
    let (code, offset) = common::raw_produce_acks(&mut client, TWO.name, kept as i32, batch, -1);
    assert_eq!(code, 0, "acks=all to partition {kept} ({p:?}) while node {} is down", dead + 1);

    // It restarts: elections in a higher term, named alike by every node.
    replicated::wait_for_listeners_closed(&cluster[dead]);
    cluster[dead].restart();
    let after = TWO.wait_for_one_leader(&cluster, &all, "every node to name the new leaders");
    for (then, now) in before.iter().zip(&after).filter(|(then, _)| lost(then)) {
        assert!(now.2 > then.2, "a higher epoch after the restart: {then:?} then {now:?}");
    }
    let acked_at_restart = load.acked.len();
    load.acked.wait_for(acked_at_restart + 30, "30 more records after the restart");
    let mut acked = load.stop();
    acked.push((kept as i32, offset, "during-the-outage".to_string()));

    let stored = read_topic(&cluster[1], TWO.name, TWO.partitions);
    let ends = replicated::check_acknowledged(&stored, &acked);
    // Each partition's two copies end the same size; the node outside holds none.
    common::eventually(replicated::DEADLINE, "each partition's two copies the same", || {
        let sizes: Vec<Vec<i64>> = cluster.iter().map(|b| TWO.log_sizes(b)).collect();
        (0..TWO.partitions as usize).all(|p| {
            let copies: Vec<i64> = sizes.iter().map(|s| s[p]).filter(|s| *s >= 0).collect();
            copies.len() == 2 && copies[0] > 0 && copies[0] == copies[1]
        })
    });
    eprintln!(
        "{} records acknowledged; stored per partition {ends:?}; before {before:?}; after \
         {after:?}",
        acked.len()
    );
}

/// Preferred leaders (docs/replication.md, "Preferred leaders"): with one shard per node
/// the topic's partitions share one group, whose preferred replica is node 1 (shard 0 of
/// nodes 1, 2, 3). Every node names node 1 the leader (its campaign at creation, or the
/// hand-over); node 1 is killed and another leads; node 1 restarts, catches up, and the
/// leader hands the group back to it (the leader imbalance check every second here), in a
/// higher epoch, while an idempotent producer writes throughout with nothing lost.
#[test]
fn a_returning_node_takes_back_the_leadership_it_prefers() {
    const BALANCED: Topic = Topic { name: "balanced", partitions: 2, replicas: NODES };
    let balance = ["--leader-imbalance-check-interval-ms", "1000"];
    let (mut cluster, _) = BALANCED.start_cluster_with(&balance);
    let all = [0, 1, 2];
    let led_by = |node: usize| {
        move |views: &[View]| {
            BALANCED.one_leader(views) && views[0].iter().all(|p| node_of(p.1) == node)
        }
    };
    BALANCED.wait_for(&cluster, &all, "every node to name node 1 the leader", led_by(1));
    let before = BALANCED.view(&cluster[0]).unwrap();
    let load = Load::start(&cluster, BALANCED, "b");
    load.acked.wait_for(30, "30 records acknowledged before the kill");

    cluster[0].kill();
    BALANCED.wait_for(&cluster, &[1, 2], "another leader", |views| {
        BALANCED.one_leader(views) && views[0].iter().all(|p| node_of(p.1) != 1)
    });
    let acked_at_kill = load.acked.len();
    load.acked.wait_for(acked_at_kill + 30, "30 more records while node 1 is down");

    replicated::wait_for_listeners_closed(&cluster[0]);
    cluster[0].restart();
    BALANCED.wait_for(&cluster, &all, "node 1 to lead again", led_by(1));
    let after = BALANCED.view(&cluster[0]).unwrap();
    assert!(after[0].2 > before[0].2 + 1, "two elections since: {before:?} then {after:?}");
    let acked_at_return = load.acked.len();
    load.acked.wait_for(acked_at_return + 30, "30 more records once node 1 leads again");
    let acked = load.stop();

    let stored = read_topic(&cluster[0], BALANCED.name, BALANCED.partitions);
    let ends = replicated::check_acknowledged(&stored, &acked);
    let sizes = BALANCED.wait_for_equal_copies(&cluster);
    eprintln!(
        "{} records acknowledged; stored per partition {ends:?}; log sizes {sizes:?}; leader \
         and epoch before {:?}, after {:?}",
        acked.len(),
        (before[0].1, before[0].2),
        (after[0].1, after[0].2)
    );
}

/// A topic of one partition and replication factor 3 for the KIP-320 test.
const EPOCHS: Topic = Topic { name: "epochs", partitions: 1, replicas: NODES };

/// Produces one record batch to `EPOCHS` at `node` until one is acknowledged (a leader
/// just elected may answer NOT_LEADER_OR_FOLLOWER first); then waits until the high
/// watermark passed it (a produce is answered before the applied copy's fdatasync):
/// the offset after it.
fn produce_until_acknowledged(cluster: &[Broker], node: usize) -> i64 {
    let mut client = RawClient::connect(cluster[node].shard_addr(0));
    let mut base_offset = -1;
    common::eventually(replicated::DEADLINE, "a produce acknowledged", || {
        let batch = common::record_batch(&[(&b"k"[..], &b"v"[..])], 0);
        let (error, base) = common::raw_produce(&mut client, EPOCHS.name, 0, batch);
        base_offset = base;
        error == 0
    });
    common::eventually(replicated::DEADLINE, "the high watermark past it", || {
        common::list_offset_epoch(&mut client, EPOCHS.name, 0, -1, -1).1 > base_offset
    });
    base_offset + 1
}

/// A librdkafka consumer of `EPOCHS`' partition 0 from offset 0 (assigned, no group).
fn librdkafka_reader(broker: &Broker) -> rdkafka::consumer::BaseConsumer {
    use rdkafka::consumer::Consumer;
    let consumer = common::assign_only_consumer(broker);
    let mut assignment = rdkafka::TopicPartitionList::new();
    assignment.add_partition_offset(EPOCHS.name, 0, rdkafka::Offset::Beginning).unwrap();
    consumer.assign(&assignment).unwrap();
    consumer
}

/// Polls `consumer` until `consumed` (the offsets read so far) holds `count` offsets.
fn read_until(consumer: &rdkafka::consumer::BaseConsumer, consumed: &mut Vec<i64>, count: usize) {
    use rdkafka::Message;
    let deadline = Instant::now() + replicated::DEADLINE;
    while consumed.len() < count {
        assert!(Instant::now() < deadline, "librdkafka read only {consumed:?} of {count}");
        if let Some(Ok(message)) = consumer.poll(Duration::from_millis(100)) {
            consumed.push(message.offset());
        }
    }
}

/// KIP-320 on three nodes: batches are stamped with the raft term they were applied in
/// (the Metadata leader epoch), and the new leader after a kill answers
/// OffsetForLeaderEpoch from those terms: the old epoch ends where the new term's first
/// batch starts, the current one at the log end; a current_leader_epoch of the old term is
/// FENCED_LEADER_EPOCH (OffsetForLeaderEpoch, Fetch and ListOffsets alike), a newer one
/// UNKNOWN_LEADER_EPOCH; a follower answers NOT_LEADER_OR_FOLLOWER. A librdkafka consumer
/// reading across the kill sends OffsetForLeaderEpoch (counted in `/metrics`) and reads
/// every offset once, in order. Then the restarted
/// node and the other survivor elect a leader again: that other replica's copy carries the
/// same stamps, and its answers (its cache, rebuilt at restart if it is the restarted one)
/// are the same.
#[test]
fn offset_for_leader_epoch_answers_from_the_raft_terms_stamped_on_the_batches() {
    let (mut cluster, before) = EPOCHS.start_cluster();
    let (first_leader, first_epoch) = (node_of(before[0].1) - 1, before[0].2);
    let mut old_end = 0;
    for _ in 0..3 {
        old_end = produce_until_acknowledged(&cluster, first_leader);
    }
    let topic = EPOCHS.name;
    // A librdkafka consumer reads across the kill: it validates its position with
    // OffsetForLeaderEpoch once Metadata shows the new epoch (KIP-320), and must go on
    // reading without a reset, skip or repeat.
    let bootstrap_node = [0, 1, 2].into_iter().find(|n| *n != first_leader).unwrap();
    let consumer = librdkafka_reader(&cluster[bootstrap_node]);
    let mut consumed = Vec::new();
    read_until(&consumer, &mut consumed, old_end as usize);
    let mut client = RawClient::connect(cluster[first_leader].shard_addr(0));
    let (error, batches) = common::fetch_batch_epochs(&mut client, topic, 0, 0, first_epoch);
    assert_eq!(error, 0);
    assert!(batches.iter().all(|(_, e)| *e == first_epoch), "{batches:?} in {first_epoch}");

    // The leader's node dies; the new leader's term is the partition's new leader epoch.
    cluster[first_leader].kill();
    let survivors: Vec<usize> = [0, 1, 2].into_iter().filter(|n| *n != first_leader).collect();
    let leader_apart_from = |cluster: &[Broker], nodes: &[usize], old: usize, what: &str| {
        let found = std::cell::Cell::new(None);
        EPOCHS.wait_for(cluster, nodes, what, |views| {
            let leader = node_of(views[0][0].1).wrapping_sub(1);
            let elected = EPOCHS.one_leader(views) && leader != old;
            if elected {
                found.set(Some((leader, views[0][0].2)));
            }
            elected
        });
        found.get().expect("the view that ended the wait")
    };
    let (leader, epoch) = leader_apart_from(&cluster, &survivors, first_leader, "a new leader");
    assert!(epoch > first_epoch, "a higher term: {epoch} after {first_epoch}");
    let mut log_end = 0;
    for _ in 0..2 {
        log_end = produce_until_acknowledged(&cluster, leader);
    }
    read_until(&consumer, &mut consumed, log_end as usize);
    assert_eq!(consumed, (0..log_end).collect::<Vec<_>>(), "librdkafka read each offset once");
    let validations: f64 = survivors
        .iter()
        .map(|n| {
            let count = "shardlog_request_duration_seconds_count";
            cluster[*n].metric_sum_labelled(count, "api=\"OffsetForLeaderEpoch\"")
        })
        .sum();
    assert!(validations >= 1.0, "librdkafka validated its position: {validations} requests");
    let mut client = RawClient::connect(cluster[leader].shard_addr(0));
    let (error, stored) = common::fetch_batch_epochs(&mut client, topic, 0, 0, epoch);
    assert_eq!(error, 0);
    let epochs: Vec<i32> = stored.iter().map(|(_, e)| *e).collect();
    let new_start = stored.iter().find(|(_, e)| *e == epoch).expect("a batch of the new term").0;
    assert_eq!(new_start, old_end, "the old term's batches, then the new term's: {stored:?}");
    assert!(epochs.iter().all(|e| *e == first_epoch || *e == epoch), "{stored:?}");
    let latest = common::list_offset_epoch(&mut client, topic, 0, -1, epoch);
    assert_eq!(latest, (0, log_end, epoch), "the latest offset, in the current epoch");
    assert_eq!(common::list_offset_epoch(&mut client, topic, 0, -2, -1), (0, 0, first_epoch));

    // OffsetForLeaderEpoch on the new leader.
    let mut asks = |current: i32, requested: i32| {
        common::offset_for_leader_epoch(&mut client, topic, 0, current, requested)
    };
    assert_eq!(asks(epoch, first_epoch), (0, first_epoch, new_start), "the old epoch's end");
    assert_eq!(asks(epoch, epoch), (0, epoch, log_end), "the current epoch: the log end");
    assert_eq!(asks(-1, epoch), (0, epoch, log_end), "no current epoch to check");
    // Below every epoch the log holds: Kafka's answer, the first epoch's start offset.
    assert_eq!(asks(epoch, 0), (0, 0, 0), "an epoch older than the log");
    assert_eq!(asks(-1, epoch + 1), (0, -1, -1), "an epoch the partition never had");
    assert_eq!(asks(first_epoch, first_epoch).0, 74, "a fenced current leader epoch");
    assert_eq!(asks(epoch + 1, first_epoch).0, 75, "an unknown current leader epoch");
    let ask_unknown = |client: &mut RawClient, topic: &str, partition: i32| {
        common::offset_for_leader_epoch(client, topic, partition, -1, epoch).0
    };
    assert_eq!(ask_unknown(&mut client, "no-such-topic", 0), 3);
    assert_eq!(ask_unknown(&mut client, topic, 7), 3);
    // The same checks in Fetch and ListOffsets.
    assert_eq!(common::fetch_batch_epochs(&mut client, topic, 0, 0, first_epoch).0, 74);
    assert_eq!(common::fetch_batch_epochs(&mut client, topic, 0, 0, epoch + 1).0, 75);
    assert_eq!(common::list_offset_epoch(&mut client, topic, 0, -1, first_epoch).0, 74);
    // A follower does not answer.
    let follower = survivors.iter().copied().find(|n| *n != leader).unwrap();
    let mut at_follower = RawClient::connect(cluster[follower].shard_addr(0));
    let answer = common::offset_for_leader_epoch(&mut at_follower, topic, 0, epoch, first_epoch);
    assert_eq!(answer.0, 6, "a follower: {answer:?}");

    // The killed node restarts and catches up; then the leader dies: the other replica
    // that leads now holds the same stamps and gives the same answers.
    replicated::wait_for_listeners_closed(&cluster[first_leader]);
    cluster[first_leader].restart();
    EPOCHS.wait_for_one_leader(&cluster, &[0, 1, 2], "the restarted node to name the leader");
    EPOCHS.wait_for_equal_copies(&cluster);
    cluster[leader].kill();
    let others: Vec<usize> = [0, 1, 2].into_iter().filter(|n| *n != leader).collect();
    let (third, third_epoch) = leader_apart_from(&cluster, &others, leader, "a third leader");
    let mut client = RawClient::connect(cluster[third].shard_addr(0));
    let (error, copy) = common::fetch_batch_epochs(&mut client, topic, 0, 0, third_epoch);
    assert_eq!((error, &copy), (0, &stored), "node {}'s copy", third + 1);
    let mut asks = |current: i32, requested: i32| {
        common::offset_for_leader_epoch(&mut client, topic, 0, current, requested)
    };
    assert_eq!(asks(third_epoch, first_epoch), (0, first_epoch, new_start));
    assert_eq!(asks(third_epoch, epoch), (0, epoch, log_end), "its end: the log end");
    assert_eq!(asks(third_epoch, third_epoch), (0, third_epoch, log_end));
    eprintln!(
        "epochs {first_epoch}, {epoch}, {third_epoch}; leaders {}, {}, {}; batches {stored:?}",
        first_leader + 1,
        leader + 1,
        third + 1
    );
}
