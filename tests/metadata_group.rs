//! The metadata raft group (docs/replication.md, "What exists: the metadata group"): three
//! broker processes on 127.0.0.1 (`--cores 1` each, temp dirs, free ports) are one
//! cluster for metadata. A topic created through librdkafka's admin API appears in every
//! node's Metadata with the same placement, spread over the three nodes; an acks=all
//! producer writes to every partition and a consumer reads every record back exactly once,
//! in order; a node that is not the controller answers CreateTopics NOT_CONTROLLER; the
//! controller's node is killed with SIGKILL, a new controller is elected and a second
//! topic created; the killed node restarts, catches up (it missed a record, and replays
//! the ones it had applied without applying them twice) and answers a partition request
//! for a partition placed elsewhere NOT_LEADER_OR_FOLLOWER.
//!
//! Every wait has a deadline that fails with what it waited for; nothing asserts on speed.

mod common;

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use common::{
    create_topic, find_coordinator, produce_tagged, raw_produce, read_topic, record_batch, Broker,
    RawClient,
};
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreateTopicsRequest};
use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind};

const NODES: usize = 3;
/// Bootstrap, one Kafka shard port, one replication port, the admin port.
const PORTS_PER_NODE: usize = 4;
/// Each wait's deadline: generous, the machine is shared; a hang fails, slowness does not.
const DEADLINE: Duration = Duration::from_secs(120);

/// What one node's Metadata says: the controller and each topic's partition leaders.
#[derive(Clone, Debug, PartialEq, Eq)]
struct View {
    controller: i32,
    brokers: Vec<(i32, i32)>,
    leaders: BTreeMap<String, Vec<i32>>,
}

fn view(broker: &Broker) -> Option<View> {
    let r = common::all_metadata(broker)?;
    let leaders = r
        .topics
        .iter()
        .map(|t| {
            let name = t.name.as_ref().unwrap().0.to_string();
            (name, t.partitions.iter().map(|p| p.leader_id.0).collect())
        })
        .collect();
    let brokers = r.brokers.iter().map(|b| (b.node_id.0, b.port)).collect();
    Some(View { controller: r.controller_id.0, brokers, leaders })
}

/// Polls `what` until it holds, or fails after the deadline with the last views.
fn wait_for(cluster: &[Broker], nodes: &[usize], what: &str, done: impl Fn(&[View]) -> bool) {
    common::wait_for_views(DEADLINE, nodes, what, |n| view(&cluster[n]), done)
}

/// Every view names the same controller, a known one.
fn one_controller(views: &[View]) -> bool {
    views[0].controller >= 0 && views.iter().all(|v| v.controller == views[0].controller)
}

fn node_of(broker_id: i32) -> usize {
    broker_id as usize / 1024
}

/// CreateTopics v5 of one topic of one partition straight to `broker`: its error code.
fn raw_create_topic(broker: &Broker, name: &str) -> i16 {
    raw_create_topic_of(broker, name, 1)
}

/// CreateTopics v5 of one topic of `partitions` straight to `broker`: its error code.
fn raw_create_topic_of(broker: &Broker, name: &str, partitions: i32) -> i16 {
    let mut client = RawClient::connect(broker.bootstrap().parse().unwrap());
    let topic = CreatableTopic::default()
        .with_name(common::topic_name(name))
        .with_num_partitions(partitions)
        .with_replication_factor(1);
    let request = CreateTopicsRequest::default().with_topics(vec![topic]).with_timeout_ms(10_000);
    match client.call(ApiKey::CreateTopics, 5, RequestKind::CreateTopics(request)) {
        ResponseKind::CreateTopics(r) => r.topics[0].error_code,
        other => panic!("{other:?}"),
    }
}

/// Heartbeat v3 of an unknown member of `group` to `broker`: its error code.
fn heartbeat(broker: &Broker, group: &str) -> i16 {
    use kafka_protocol::messages::heartbeat_request::HeartbeatRequest;
    let mut client = RawClient::connect(broker.bootstrap().parse().unwrap());
    let request = HeartbeatRequest::default()
        .with_group_id(kafka_protocol::messages::GroupId(group.to_string().into()))
        .with_generation_id(1)
        .with_member_id("nobody".to_string().into());
    match client.call(ApiKey::Heartbeat, 3, RequestKind::Heartbeat(request)) {
        ResponseKind::Heartbeat(r) => r.error_code,
        other => panic!("{other:?}"),
    }
}

/// InitProducerId v2 (no transactional id) asked of `broker`'s bootstrap port: the id.
fn new_producer_id(broker: &Broker) -> i64 {
    use kafka_protocol::messages::init_producer_id_request::InitProducerIdRequest;
    let mut client = RawClient::connect(broker.bootstrap().parse().unwrap());
    let request = InitProducerIdRequest::default()
        .with_transaction_timeout_ms(60_000)
        .with_producer_id((-1).into())
        .with_producer_epoch(-1);
    match client.call(ApiKey::InitProducerId, 2, RequestKind::InitProducerId(request)) {
        ResponseKind::InitProducerId(r) if r.error_code == 0 => r.producer_id.0,
        other => panic!("{other:?}"),
    }
}

/// Every node names the same coordinator for each of a few groups: the node that leads the
/// offsets group of the groups' shard (one shard per node here, so one node for all), once
/// one is elected; only that node accepts the group's requests (others: NOT_COORDINATOR).
fn check_coordinators(cluster: &[Broker]) {
    let mut coordinator_nodes = Vec::new();
    for g in 0..12 {
        let group = format!("group-{g}");
        let all: Vec<usize> = (0..cluster.len()).collect();
        let named = |n: usize| Some(find_coordinator(&cluster[n], &group));
        let agreed =
            |answers: &[(i16, i32, i32)]| answers.iter().all(|a| *a == answers[0] && a.0 == 0);
        common::wait_for_views(DEADLINE, &all, &group, named, agreed);
        let answer = find_coordinator(&cluster[0], &group);
        let node = node_of(answer.1);
        assert_eq!(answer.2, cluster[node - 1].port as i32 + 1, "{group}'s port");
        for (n, broker) in cluster.iter().enumerate() {
            let expected = if n + 1 == node { 25 } else { 16 }; // UNKNOWN_MEMBER_ID, NOT_COORDINATOR
            let what = format!("{group} on node {}", n + 1);
            common::eventually(DEADLINE, &what, || heartbeat(broker, &group) == expected);
        }
        coordinator_nodes.push(node);
    }
    coordinator_nodes.dedup();
    assert_eq!(coordinator_nodes.len(), 1, "one offsets group leader: {coordinator_nodes:?}");
}

#[test]
fn three_nodes_are_one_cluster_for_metadata_across_a_controller_kill() {
    // Node ids 1..=3: broker ids 1024, 2048, 3072.
    let mut cluster = Broker::start_cluster(NODES, 1, PORTS_PER_NODE);
    let all = [0, 1, 2];
    wait_for(&cluster, &all, "every node to name the same controller", one_controller);
    let first = view(&cluster[0]).unwrap();
    let ids: Vec<(i32, i32)> = cluster
        .iter()
        .enumerate()
        .map(|(n, b)| ((n as i32 + 1) * 1024, b.port as i32 + 1))
        .collect();
    assert_eq!(first.brokers, ids, "every node's shard, at its own port");
    let controller = node_of(first.controller) - 1;
    check_coordinators(&cluster);
    // Producer ids are the cluster's, not a node's: producers that started at different
    // nodes may write to one (replicated) partition, where one id shares sequence state.
    let mut producer_ids: Vec<i64> = cluster.iter().map(new_producer_id).collect();
    producer_ids.sort();
    producer_ids.dedup();
    assert_eq!(producer_ids.len(), NODES, "one id per node's first producer: {producer_ids:?}");

    // A node that is not the controller refuses to change the table itself.
    let follower = (controller + 1) % NODES;
    assert_eq!(raw_create_topic(&cluster[follower], "refused"), 41, "NOT_CONTROLLER");

    // The admin API finds the controller from any node.
    create_topic(&cluster[follower], "spread", 6);
    let placed = |views: &[View]| {
        views[0].leaders.get("spread").is_some_and(|l| l.len() == 6)
            && views.iter().all(|v| v.leaders == views[0].leaders)
    };
    wait_for(&cluster, &all, "every node to show topic spread, placed alike", placed);
    let leaders = view(&cluster[2]).unwrap().leaders["spread"].clone();
    let mut nodes: Vec<usize> = leaders.iter().map(|l| node_of(*l)).collect();
    nodes.sort();
    assert_eq!(nodes, vec![1, 1, 2, 2, 3, 3], "leaders spread over the nodes: {leaders:?}");
    assert!(!view(&cluster[1]).unwrap().leaders.contains_key("refused"));

    // acks=all to every partition, each read back exactly once, in order.
    produce_tagged(&cluster[0], "spread", 6, "a", 60);
    let stored = read_topic(&cluster[1], "spread", 6);
    for p in 0..6 {
        let expected: Vec<(i64, Vec<u8>)> =
            (0..10).map(|k| (k as i64, format!("a-{}", p + 6 * k).into_bytes())).collect();
        assert_eq!(stored.get(&p), Some(&expected), "partition {p}");
    }

    // The controller's node dies; the others elect a new controller and go on.
    cluster[controller].kill();
    let survivors: Vec<usize> = all.iter().copied().filter(|n| *n != controller).collect();
    let dead = first.controller;
    wait_for(&cluster, &survivors, "a new controller among the survivors", |views| {
        one_controller(views) && views[0].controller != dead
    });
    create_topic(&cluster[survivors[0]], "second", 2);
    let both = |views: &[View]| {
        views.iter().all(|v| v.leaders.contains_key("second"))
            && views.iter().all(|v| v.leaders == views[0].leaders)
    };
    wait_for(&cluster, &survivors, "the survivors to show topic second", both);

    // The killed node restarts and catches up on what it missed.
    let bootstrap: SocketAddr = cluster[controller].bootstrap().parse().unwrap();
    common::eventually(DEADLINE, "the killed node's listeners to close", || {
        TcpStream::connect_timeout(&bootstrap, Duration::from_millis(100)).is_err()
    });
    cluster[controller].restart();
    wait_for(&cluster, &all, "the restarted node to show both topics as the others", |v| {
        both(v) && one_controller(v)
    });
    let restarted = view(&cluster[controller]).unwrap();
    assert_eq!(restarted.leaders["spread"], leaders, "the same placement after the restart");

    // A partition request to a node the partition is not on: NOT_LEADER_OR_FOLLOWER.
    let own = controller + 1;
    let elsewhere = leaders.iter().position(|l| node_of(*l) != own).unwrap() as i32;
    let mut client = RawClient::connect(cluster[controller].shard_addr(0));
    let batch = record_batch(&[(&b"k"[..], &b"v"[..])], 0);
    let (code, _) = raw_produce(&mut client, "spread", elsewhere, batch.clone());
    assert_eq!(code, 6, "produce to partition {elsewhere} on another node");
    let here = leaders.iter().position(|l| node_of(*l) == own).unwrap() as i32;
    let (code, offset) = raw_produce(&mut client, "spread", here, batch);
    assert_eq!((code, offset), (0, 10), "partition {here} kept its records on its node");
}

/// Creates topic `name` at the controller that node `nodes[0]` names, once it names one
/// of `nodes` (the running ones: right after a kill it may still name the killed node).
fn create_at_controller(cluster: &[Broker], nodes: &[usize], name: &str) {
    create_at_controller_of(cluster, nodes, name, 1)
}

/// As `create_at_controller`, a topic of `partitions`.
fn create_at_controller_of(cluster: &[Broker], nodes: &[usize], name: &str, partitions: i32) {
    let what = format!("topic {name} created at the controller");
    common::eventually(DEADLINE, &what, || {
        let controller = node_of(view(&cluster[nodes[0]]).unwrap().controller);
        let running = controller > 0 && nodes.contains(&(controller - 1));
        running && raw_create_topic_of(&cluster[controller - 1], name, partitions) == 0
    });
}

/// Starts three nodes, creates `topics` topics of `partitions` each and waits until every
/// node compacted the metadata group's log; returns the nodes and each one's (raft log
/// entries, compactions).
fn cluster_with_a_compacted_metadata_log(
    topics: usize,
    partitions: i32,
) -> (Vec<Broker>, Vec<(f64, f64)>) {
    let cluster = Broker::start_cluster(NODES, 1, PORTS_PER_NODE);
    let all = [0, 1, 2];
    wait_for(&cluster, &all, "every node to name the same controller", one_controller);
    for t in 0..topics {
        create_at_controller_of(&cluster, &all, &format!("many-{t}"), partitions);
    }
    let figures = |b: &Broker| {
        let entries = b.metric_sum("shardlog_raft_log_entries");
        (entries, b.metric_sum("shardlog_raft_compactions_total"))
    };
    let compacted = |(entries, compactions): (f64, f64)| entries < 64.0 && compactions >= 1.0;
    common::eventually(DEADLINE, "every node to compact the metadata group's log", || {
        cluster.iter().map(figures).all(compacted)
    });
    let shown = cluster.iter().map(figures).collect();
    (cluster, shown)
}

/// Kills node `down` with SIGKILL and waits until its listeners are closed.
fn kill_node(cluster: &mut [Broker], down: usize) {
    cluster[down].kill();
    let bootstrap: std::net::SocketAddr = cluster[down].bootstrap().parse().unwrap();
    common::eventually(DEADLINE, "the killed node's listeners to close", || {
        TcpStream::connect_timeout(&bootstrap, Duration::from_millis(100)).is_err()
    });
}

/// Every node shows `topics` topics, placed alike.
fn every_node_shows(topics: usize) -> impl Fn(&[View]) -> bool {
    move |views: &[View]| {
        views.iter().all(|v| v.leaders.len() == topics && v.leaders == views[0].leaders)
    }
}

/// The metadata group compacts its raft log as the partition groups do (docs/replication.md,
/// "Log compaction"): after 100 topic creations every node's shard 0 holds fewer than the
/// 64 entries past the compaction point that trigger one (a compaction applied). A node
/// killed with SIGKILL misses a topic created while it is down, restarts past the
/// compaction, and shows every topic as the others do. Without the applier's compaction
/// the entries stay (the first wait fails with the counts).
#[test]
fn the_metadata_groups_raft_log_is_compacted_and_a_node_restarts_past_it() {
    const TOPICS: usize = 100;
    let (mut cluster, shown) = cluster_with_a_compacted_metadata_log(TOPICS, 1);
    let down = 2;
    kill_node(&mut cluster, down);
    create_at_controller(&cluster, &[0, 1], "while-down");
    cluster[down].restart();
    let what = "every node to show every topic, placed alike";
    wait_for(&cluster, &[0, 1, 2], what, every_node_shows(TOPICS + 1));
    eprintln!("raft log entries and compactions per node after {TOPICS} creations: {shown:?}");
}

/// Kills a node that is not the controller, deletes its data dir, creates a topic while it
/// is down, restarts it with an empty data dir and waits until it shows the `topics` + 1
/// topics as the others do, installed from a snapshot (its log says so); returns the
/// (controller, wiped node) indexes.
fn wipe_a_follower_and_rejoin(cluster: &mut [Broker], topics: usize) -> (usize, usize) {
    let all = [0, 1, 2];
    let controller = node_of(view(&cluster[0]).unwrap().controller) - 1;
    let down = (controller + 1) % NODES;
    let up: Vec<usize> = all.iter().copied().filter(|n| *n != down).collect();
    kill_node(cluster, down);
    std::fs::remove_dir_all(cluster[down].data_dir()).unwrap();
    create_at_controller(cluster, &up, "while-wiped");
    cluster[down].restart();
    let what = "the wiped node to show every topic, placed alike";
    wait_for(cluster, &all, what, every_node_shows(topics + 1));
    assert!(cluster[down].log().contains("metadata snapshot installed"), "not from a snapshot");
    (controller, down)
}

/// A node that lost its data dir rejoins the metadata group through a raft snapshot
/// (docs/replication.md, "Metadata snapshots"): after 100 creations the group's log is
/// compacted on every node; a node that is not the controller is killed, its data dir
/// deleted, a topic created meanwhile, and it restarts with the same node id and an empty
/// data dir. The controller still records the match index of that node's lost log, so
/// this also takes the lost-log path (`RaftGroup` invariant 5). The node must install
/// the controller's table (its log says so) and show every topic placed as the others do,
/// and a topic created afterwards reaches it as an entry. Then the controller's node
/// loses its data dir too: a new controller is elected, and the node rejoins from the new
/// controller's snapshot. With `LogImage::snapshot` answering "temporarily unavailable"
/// again (by hand), the first wait for every topic fails.
#[test]
fn a_node_that_lost_its_data_dir_rejoins_the_metadata_group_from_a_snapshot() {
    const TOPICS: usize = 100;
    let (mut cluster, _) = cluster_with_a_compacted_metadata_log(TOPICS, 1);
    let all = [0, 1, 2];
    let (controller, down) = wipe_a_follower_and_rejoin(&mut cluster, TOPICS);
    create_at_controller(&cluster, &all, "after-rejoin");
    let what = "every node to show the topic created after the rejoin";
    wait_for(&cluster, &all, what, every_node_shows(TOPICS + 2));
    let lost: f64 =
        cluster.iter().map(|b| b.metric_sum("shardlog_raft_lost_logs_seen_total")).sum();
    assert!(lost > 0.0, "the wiped node's lost log is counted");
    let what = "the rejoined node's raft log to start at the snapshot";
    common::eventually(DEADLINE, what, || {
        cluster[down].metric_sum("shardlog_raft_log_entries") < 64.0
    });
    // Now the controller's node loses its data dir: the other two elect a new leader
    // (whose progress of the wiped node starts at 0, the path without a stale match
    // index), which sends its own snapshot.
    kill_node(&mut cluster, controller);
    std::fs::remove_dir_all(cluster[controller].data_dir()).unwrap();
    let up: Vec<usize> = all.iter().copied().filter(|n| *n != controller).collect();
    let new_controller =
        |views: &[View]| one_controller(views) && node_of(views[0].controller) - 1 != controller;
    wait_for(&cluster, &up, "the other two to elect a new controller", new_controller);
    create_at_controller(&cluster, &up, "controller-wiped");
    cluster[controller].restart();
    let what = "the wiped controller's node to show every topic, placed alike";
    wait_for(&cluster, &all, what, every_node_shows(TOPICS + 3));
    assert!(cluster[controller].log().contains("metadata snapshot installed"));
}

/// A node that lost its data dir rejoins the metadata group through a raft snapshot larger
/// than a transport frame (docs/replication.md, "Messages larger than a frame"): 400 topics
/// of 1,000 partitions each (replication factor 1) make a topic table of about 6.4 MB (16 KB
/// a topic), and the snapshot is the table as of the last compaction (every 64 entries or
/// so), over the frame body's 4 MiB, so the controller's `MsgSnapshot` goes in pieces. The wiped
/// node must install it and show every topic as the others do. With messages larger than
/// a frame dropped, as before (by hand), the wait for every topic fails.
#[test]
fn a_node_that_lost_its_data_dir_rejoins_from_a_snapshot_larger_than_a_frame() {
    const TOPICS: usize = 400;
    let (mut cluster, _) = cluster_with_a_compacted_metadata_log(TOPICS, 1000);
    let (controller, down) = wipe_a_follower_and_rejoin(&mut cluster, TOPICS);
    let cut = cluster[controller].metric_sum("shardlog_replication_messages_cut_total");
    let reassembled = cluster[down].metric_sum("shardlog_replication_messages_reassembled_total");
    assert!(
        cut >= 1.0 && reassembled >= 1.0,
        "sent in pieces: cut {cut}, put together {reassembled}"
    );
}
