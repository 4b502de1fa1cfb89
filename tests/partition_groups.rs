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
//! idempotent come first, so no sequence check hides a second apply.
//!
//! Before that, the replicas that do not lead answer Produce, Fetch and ListOffsets
//! NOT_LEADER_OR_FOLLOWER, and replication factors 4 and 2 are refused
//! (INVALID_REPLICATION_FACTOR).
//!
//! Every wait has a deadline that fails with what it waited for; nothing asserts on speed.

mod common;

use std::collections::BTreeSet;
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::{read_topic, Broker, RawClient};
use kafka_protocol::messages::describe_log_dirs_request::DescribeLogDirsRequest;
use kafka_protocol::messages::metadata_request::MetadataRequest;
use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind};

const NODES: usize = 3;
/// Bootstrap, one Kafka shard port, one replication port, the admin port.
const PORTS_PER_NODE: usize = 4;
const TOPIC: &str = "replicated";
const PARTITIONS: i32 = 2;
/// Each wait's deadline: generous, the machine is shared; a hang fails, slowness does not.
const DEADLINE: Duration = Duration::from_secs(120);

/// One node's Metadata of the topic: per partition (error, leader broker, leader epoch,
/// replicas), or None if the node does not answer or does not know the topic.
type View = Vec<(i16, i32, i32, Vec<i32>)>;

fn view(broker: &Broker) -> Option<View> {
    let r = common::all_metadata(broker)?;
    let topic = r.topics.iter().find(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == TOPIC))?;
    let partitions = topic.partitions.iter().map(|p| {
        let replicas = p.replica_nodes.iter().map(|b| b.0).collect();
        (p.error_code, p.leader_id.0, p.leader_epoch, replicas)
    });
    Some(partitions.collect())
}

/// Polls the views of `nodes` until `done` holds, or fails after the deadline with them.
fn wait_for(cluster: &[Broker], nodes: &[usize], what: &str, done: impl Fn(&[View]) -> bool) {
    common::wait_for_views(DEADLINE, nodes, what, |n| view(&cluster[n]), done)
}

/// Every view names the same known leader for every partition, in the same epoch.
fn one_leader(views: &[View]) -> bool {
    let first = &views[0];
    first.len() == PARTITIONS as usize
        && first.iter().all(|(error, leader, _, _)| *error == 0 && *leader >= 0)
        && views.iter().all(|v| v == first)
}

fn node_of(broker_id: i32) -> usize {
    broker_id as usize / 1024
}

/// The size in bytes of each of the topic's partitions in `broker`'s log (DescribeLogDirs).
fn log_sizes(broker: &Broker) -> Vec<i64> {
    let mut client = RawClient::connect(broker.bootstrap().parse().unwrap());
    let request = DescribeLogDirsRequest::default().with_topics(None);
    let ResponseKind::DescribeLogDirs(r) =
        client.call(ApiKey::DescribeLogDirs, 1, RequestKind::DescribeLogDirs(request))
    else {
        panic!("not a DescribeLogDirs response")
    };
    let mut sizes = vec![-1; PARTITIONS as usize];
    let topics = r.results.iter().flat_map(|d| &d.topics).filter(|t| t.name.0.as_str() == TOPIC);
    for partition in topics.flat_map(|t| &t.partitions) {
        sizes[partition.partition_index as usize] = partition.partition_size;
    }
    sizes
}

/// The controller `broker` names in Metadata (-1 while none is known).
fn controller(broker: &Broker) -> i32 {
    let mut client = RawClient::connect(broker.bootstrap().parse().unwrap());
    let request = MetadataRequest::default().with_topics(Some(vec![]));
    match client.call(ApiKey::Metadata, 12, RequestKind::Metadata(request)) {
        ResponseKind::Metadata(r) => r.controller_id.0,
        other => panic!("{other:?}"),
    }
}

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

/// Produce, Fetch and ListOffsets of partition 0 sent to `broker`'s shard: their error
/// codes.
fn partition_request_errors(broker: &Broker) -> [i16; 3] {
    use kafka_protocol::messages::list_offsets_request::{
        ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic,
    };
    let mut client = RawClient::connect(broker.shard_addr(0));
    let batch = common::record_batch(&[(&b"k"[..], &b"v"[..])], 0);
    let (produce, _) = common::raw_produce(&mut client, TOPIC, 0, batch);
    let fetch = match client.call(ApiKey::Fetch, 12, common::fetch_request(TOPIC, 0, 0, 0)) {
        ResponseKind::Fetch(r) => r.responses[0].partitions[0].error_code,
        other => panic!("{other:?}"),
    };
    let partition = ListOffsetsPartition::default().with_partition_index(0).with_timestamp(-1);
    let topic = ListOffsetsTopic::default()
        .with_name(common::topic_name(TOPIC))
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

fn create_replicated_topic(broker: &Broker) {
    use rdkafka::admin::{AdminOptions, NewTopic, TopicReplication};
    let admin = common::admin_client(broker);
    let topic = NewTopic::new(TOPIC, PARTITIONS, TopicReplication::Fixed(NODES as i32));
    for result in
        common::runtime().block_on(admin.create_topics(&[topic], &AdminOptions::new())).unwrap()
    {
        result.expect("topic of replication factor 3 created");
    }
}

/// (partition, offset, value) of each acknowledged record.
type Acked = Arc<Mutex<Vec<(i32, i64, String)>>>;

/// Produces records `r-0`, `r-1`, ... (each padded with `pad` bytes) round-robin over the
/// partitions, ten in flight at a time, until `stop`; each acknowledged record is pushed
/// to `acked`. A record the producer gives up on fails the test (its message timeout is
/// far past an election).
fn produce_until(bootstrap: String, acked: Acked, stop: Arc<AtomicBool>, pad: usize) {
    use rdkafka::producer::{FutureProducer, FutureRecord};
    let producer: FutureProducer = rdkafka::config::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "1")
        .set("message.timeout.ms", "100000")
        .create()
        .expect("a librdkafka producer");
    let mut next = 0usize;
    common::runtime().block_on(async {
        while !stop.load(Ordering::SeqCst) {
            let mut pending = Vec::new();
            for _ in 0..10 {
                let value = format!("r-{next}-{}", "x".repeat(pad));
                let partition = (next % PARTITIONS as usize) as i32;
                let record = FutureRecord::<(), _>::to(TOPIC).payload(&value).partition(partition);
                let delivery = producer.send_result(record).map_err(|(e, _)| e).unwrap();
                pending.push((value, delivery));
                next += 1;
            }
            for (value, delivery) in pending {
                let (partition, offset) = match delivery.await.unwrap() {
                    Ok(delivered) => (delivered.partition, delivered.offset),
                    Err((e, _)) => panic!("record {value} was not acknowledged: {e}"),
                };
                acked.lock().unwrap().push((partition, offset, value));
            }
        }
    });
}

fn wait_for_acks(acked: &Acked, count: usize, what: &str) {
    common::eventually(DEADLINE, what, || acked.lock().unwrap().len() >= count);
}

/// Starts a producer thread (`produce_until`) over every node; returns what it
/// acknowledges, its stop flag and the thread.
fn start_producer(cluster: &[Broker], pad: usize) -> (Acked, Arc<AtomicBool>, JoinHandle<()>) {
    let acked: Acked = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let bootstrap = cluster.iter().map(Broker::bootstrap).collect::<Vec<_>>().join(",");
    let (thread_acked, thread_stop) = (acked.clone(), stop.clone());
    let thread =
        std::thread::spawn(move || produce_until(bootstrap, thread_acked, thread_stop, pad));
    (acked, stop, thread)
}

/// Waits until `node`'s listeners are closed (a killed process is gone), then restarts it.
fn restart_when_gone(node: &mut Broker) {
    let bootstrap: SocketAddr = node.bootstrap().parse().unwrap();
    common::eventually(DEADLINE, "the killed node's listeners to close", || {
        TcpStream::connect_timeout(&bootstrap, Duration::from_millis(100)).is_err()
    });
    node.restart();
}

/// The checker: every acknowledged record exactly once, at its offset, offsets dense.
/// Returns what is stored, read from `node` (librdkafka finds the leader).
fn check_acknowledged(node: &Broker, acked: &[(i32, i64, String)]) -> common::Stored {
    let stored = read_topic(node, TOPIC, PARTITIONS);
    for (partition, records) in &stored {
        for (k, (offset, _)) in records.iter().enumerate() {
            assert_eq!(*offset, k as i64, "partition {partition}: offsets dense from 0");
        }
    }
    let mut values = BTreeSet::new();
    for records in stored.values() {
        for (offset, value) in records {
            let value = String::from_utf8(value.clone()).unwrap();
            assert!(values.insert(value.clone()), "{value} stored twice (again at {offset})");
        }
    }
    for (partition, offset, value) in acked {
        let found = stored.get(partition).and_then(|r| r.get(*offset as usize));
        let found = found.map(|(o, v)| (*o, String::from_utf8_lossy(v).to_string()));
        assert_eq!(found, Some((*offset, value.clone())), "acknowledged {value}");
    }
    stored
}

/// Waits until the three copies are the same size, partition by partition (the same
/// batches at the same offsets), and returns the sizes.
fn wait_for_same_copies(cluster: &[Broker]) -> Vec<Vec<i64>> {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let sizes: Vec<Vec<i64>> = cluster.iter().map(log_sizes).collect();
        if sizes[0].iter().all(|s| *s > 0) && sizes.iter().all(|s| *s == sizes[0]) {
            return sizes;
        }
        assert!(Instant::now() < deadline, "the three copies differ: {sizes:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Every node names the same controller, which then creates the topic, and every node
/// names the same leader of it: the node index of that leader.
fn start_with_topic(cluster: &[Broker]) -> usize {
    // librdkafka's admin API goes to the controller it finds in Metadata.
    common::eventually(DEADLINE, "every node to name the same controller", || {
        let named: Vec<i32> = cluster.iter().map(controller).collect();
        named[0] >= 0 && named.iter().all(|c| *c == named[0])
    });
    create_replicated_topic(&cluster[0]);
    wait_for(cluster, &[0, 1, 2], "every node to name the same leader of the topic", one_leader);
    node_of(view(&cluster[0]).unwrap()[0].1) - 1
}

#[test]
fn a_replicated_topic_loses_no_acknowledged_record_across_a_kill_of_its_leader() {
    let mut cluster = Broker::start_cluster(NODES, 1, PORTS_PER_NODE);
    let all = [0, 1, 2];
    start_with_topic(&cluster);
    let before = view(&cluster[0]).unwrap();
    for (partition, (_, _, epoch, replicas)) in before.iter().enumerate() {
        assert_eq!(replicas.len(), NODES, "partition {partition}'s replicas: {replicas:?}");
        assert!(*epoch > 0, "partition {partition}'s leader epoch is a raft term: {epoch}");
    }
    let leader_node = node_of(before[0].1);
    assert!(before.iter().all(|p| node_of(p.1) == leader_node), "one group: {before:?}");

    // Replicas that do not lead answer NOT_LEADER_OR_FOLLOWER; replication factors other
    // than 1 and 3 are refused with the reason.
    for follower in all.iter().copied().filter(|n| *n + 1 != leader_node) {
        let errors = partition_request_errors(&cluster[follower]);
        assert_eq!(errors, [6; 3], "produce, fetch, list offsets on node {}", follower + 1);
    }
    let controller_node = node_of(controller(&cluster[0])) - 1;
    let (code, message) = raw_create_topic(&cluster[controller_node], "four", 4);
    assert_eq!(code, 38, "replication factor 4 on 3 nodes: {message}");
    assert!(message.contains("number of nodes in the cluster (3)"), "{message}");
    let (code, message) = raw_create_topic(&cluster[controller_node], "two", 2);
    assert_eq!(code, 38, "replication factor 2 on 3 nodes: {message}");

    // Records of a producer that is not idempotent first: a replica that applied their
    // entries again after its restart would store them twice (no sequence check would
    // stop it), which the copies' sizes below catch.
    common::produce_tagged(&cluster[0], TOPIC, PARTITIONS, "plain", 20);

    let (acked, stop, producer) = start_producer(&cluster, 0);
    wait_for_acks(&acked, 60, "60 records acknowledged before the kill");

    // The leader's node dies; the two others elect a new leader in a higher term.
    let dead = leader_node - 1;
    cluster[dead].kill();
    let acked_at_kill = acked.lock().unwrap().len();
    let survivors: Vec<usize> = all.iter().copied().filter(|n| *n != dead).collect();
    wait_for(&cluster, &survivors, "a new leader in a higher epoch", |views| {
        one_leader(views)
            && node_of(views[0][0].1) != leader_node
            && views[0].iter().zip(&before).all(|(now, then)| now.2 > then.2)
    });
    wait_for_acks(&acked, acked_at_kill + 60, "60 more records acknowledged after the kill");

    // The killed node restarts and catches up.
    restart_when_gone(&mut cluster[dead]);
    wait_for(&cluster, &all, "the restarted node to name the same leader", one_leader);
    let acked_at_restart = acked.lock().unwrap().len();
    wait_for_acks(&acked, acked_at_restart + 30, "30 more records after the restart");
    stop.store(true, Ordering::SeqCst);
    producer.join().expect("the producer thread");

    // Every acknowledged record exactly once, at its offset; offsets dense; the three
    // copies end the same (their sizes: the same batches at the same offsets).
    let acked = acked.lock().unwrap().clone();
    let stored = check_acknowledged(&cluster[survivors[0]], &acked);
    let sizes = wait_for_same_copies(&cluster);
    let after = view(&cluster[0]).unwrap();
    let ends: Vec<usize> = stored.values().map(Vec::len).collect();
    eprintln!(
        "{} records acknowledged ({acked_at_kill} before the kill, {acked_at_restart} before \
         the restart); stored per partition {ends:?}; log sizes {sizes:?}; leader and epoch \
         before {:?}, after {:?}",
        acked.len(),
        (before[0].1, before[0].2),
        (after[0].1, after[0].2)
    );
}

/// Bytes of padding per record in the compaction test: 640 of them are 20 MiB, past the
/// 8 MiB at which a shard writes a stream snapshot.
const PAD: usize = 32 << 10;
const PADDED_RECORDS: usize = 640;

/// Log compaction (docs/replication.md, "Log compaction"). With a follower down, the
/// leader keeps every entry the follower lacks (invariant 4 of `partition_group`: a
/// compaction past it would leave it unable to catch up, since no snapshot is sent); once
/// it is back and caught up from entries, every replica compacts its log, and every
/// node's `Raft` stream is snapshotted. Then the leader's node is killed and restarts
/// from its stream snapshot: records of a producer that is not idempotent, produced just
/// before, must not be applied twice (copies' sizes), and every acknowledged record is
/// there exactly once.
#[test]
fn raft_logs_compact_only_what_every_replica_has_and_a_node_restarts_from_a_stream_snapshot() {
    let mut cluster = Broker::start_cluster(NODES, 1, PORTS_PER_NODE);
    let leader = start_with_topic(&cluster);
    let follower = (leader + 1) % NODES;
    let metric = |node: &Broker, name: &str| node.metric_sum(name) as u64;
    cluster[follower].kill();

    let (acked, stop, producer) = start_producer(&cluster, PAD);
    wait_for_acks(&acked, PADDED_RECORDS, "the padded records acknowledged");
    stop.store(true, Ordering::SeqCst);
    producer.join().expect("the producer thread");
    let produced = (acked.lock().unwrap().len() * PAD) as u64;
    let held = metric(&cluster[leader], "shardlog_raft_log_entry_bytes");
    assert!(
        held >= produced / 2,
        "the leader compacted what the down follower lacks: {held} bytes held of {produced}"
    );

    // The follower returns and catches up from entries; then every replica compacts and
    // snapshots its stream.
    restart_when_gone(&mut cluster[follower]);
    wait_for(&cluster, &[0, 1, 2], "the follower to name the leader", one_leader);
    wait_for_same_copies(&cluster);
    // Each node's raft log entries and their bytes, compactions, stream snapshots, and the
    // bytes its shard log holds of the Raft stream (what memory and checkpoints carry).
    let figures = |node: &Broker| {
        let names = [
            "log_entry_bytes",
            "log_entries",
            "compactions_total",
            "stream_snapshots_total",
            "stream_held_bytes",
        ];
        names.map(|name| metric(node, &format!("shardlog_raft_{name}")))
    };
    let deadline = Instant::now() + DEADLINE;
    let compacted = loop {
        let now: Vec<[u64; 5]> = cluster.iter().map(figures).collect();
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
    common::produce_tagged(&cluster[leader], TOPIC, PARTITIONS, "plain", 20);
    cluster[leader].kill();
    restart_when_gone(&mut cluster[leader]);
    wait_for(&cluster, &[0, 1, 2], "the restarted node to name the leader", one_leader);
    let (more, stop, producer) = start_producer(&cluster, 0);
    wait_for_acks(&more, 30, "30 records after the restart");
    stop.store(true, Ordering::SeqCst);
    producer.join().expect("the producer thread");

    let mut acked = acked.lock().unwrap().clone();
    acked.extend(more.lock().unwrap().iter().cloned());
    let stored = check_acknowledged(&cluster[follower], &acked);
    let sizes = wait_for_same_copies(&cluster);
    let ends: Vec<usize> = stored.values().map(Vec::len).collect();
    eprintln!(
        "{} records acknowledged; stored per partition {ends:?}; log sizes {sizes:?}; raft \
         figures per node once compacted {compacted:?} ([log entry bytes, entries, \
         compactions, stream snapshots, stream bytes held])",
        acked.len()
    );
}
