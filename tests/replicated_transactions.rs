//! Transactions on a replicated partition (docs/transactions.md, "Replicated partitions"),
//! on three broker processes on 127.0.0.1 (`--cores 1` each, temp dirs, free ports) and a
//! topic of one partition and replication factor 3:
//!
//! - a librdkafka transactional producer whose transactional id's coordinator is on the
//!   partition leader's node commits one transaction and aborts another (its batches and
//!   both markers go through the partition's raft group); while a third is open, the
//!   leader's ListOffsets at read_committed is held at its first offset, and moves past its
//!   COMMIT marker once it commits;
//! - a producer whose coordinator is on a node that does not lead the partition (its
//!   markers and its KIP-890 verifications cross nodes, `txn::remote`) commits, aborts and
//!   commits transactions spanning that partition and an RF-1 partition on the third node;
//!   read_committed sees exactly the committed records on both, read_uncommitted the
//!   aborted ones too;
//! - a transaction's offsets (`send_offsets_to_transaction`) reach a consumer group whose
//!   coordinator is on another node than the transactional id's;
//! - a read_committed consumer sees exactly the committed records, read_uncommitted sees
//!   the aborted ones too;
//! - the leader's node is killed with SIGKILL; at the new leader, read_committed still
//!   sees exactly the committed records and its LSO is its high watermark: its aborted
//!   list and closed transactions came from its own apply of the same entries;
//! - the killed node restarts and catches up (back in the ISR), then the second leader's
//!   node is killed: the third leader (the restarted node, whose state its restart rebuilt
//!   from its log, or the remaining one) answers the same.
//!
//! The transaction coordinator fails over with its node (phase 2b: its state goes through
//! the shard's offsets group, and the coordinator follows that group's leader):
//!
//! - a producer commits and leaves a transaction open, and its coordinator's node is killed
//!   with SIGKILL; a new instance with the same transactional id initializes at the new
//!   coordinator, which aborts the open transaction and fences the old instance (its next
//!   commit is refused); the new instance commits; read_committed sees exactly the commits;
//! - a transaction open at the kill with no client coming back is aborted by the new
//!   coordinator at its timeout, which releases the LSO.
//!
//! The tests that need a transactional id coordinated off a node run on nodes of two
//! shards: with one, every id is coordinated by the RF-3 partition's leader's node.
//!
//! A follower that lost its data dir while the leader compacted its raft log past it
//! (`--replica-snapshot-after-ms 1000`) rejoins from a partition snapshot: once it leads
//! (the other nodes' leaders killed in turn), its read_committed still leaves out the
//! aborted transaction's records and its LSO is its high watermark, from the transaction
//! state the manifest carried (its pulled batches alone would not tell it which
//! transactions were aborted had it not replayed them); and, being the coordinator then, it
//! knows the transactional id's last transaction was aborted (DescribeTransactions), from
//! the coordinator image the manifest carried (version 3).
//!
//! Every wait has a deadline that fails with what it waited for; nothing asserts on speed.

mod common;
#[path = "common/replicated.rs"]
mod replicated;

use std::time::{Duration, Instant};

use common::{Broker, RawClient};
use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};
use replicated::{node_of, Load, Topic, DEADLINE, NODES};

const TOPIC: Topic = Topic { name: "rtxn", partitions: 1, replicas: NODES };
/// Replication factor 1: each partition on one node (on `CORES` shards, at least one on
/// each of the three).
const SINGLE: Topic = Topic { name: "rtxn-single", partitions: 6, replicas: 1 };
/// Shards a node in the tests that need a transactional id coordinated off a node.
const CORES: usize = 2;

/// The node (1-based) FindCoordinator of `key_type` (0 group, 1 transaction) names for
/// `key`, asked of `broker`, once it names one (COORDINATOR_NOT_AVAILABLE while the
/// offsets group's leader is being elected).
fn coordinator_node(broker: &Broker, key: &str, key_type: i8) -> usize {
    use kafka_protocol::messages::find_coordinator_request::FindCoordinatorRequest;
    let mut client = RawClient::connect(broker.bootstrap().parse().unwrap());
    let request =
        FindCoordinatorRequest::default().with_key(key.to_string().into()).with_key_type(key_type);
    let mut node = 0;
    common::eventually(DEADLINE, "a coordinator", || {
        match client.call(ApiKey::FindCoordinator, 3, RequestKind::FindCoordinator(request.clone()))
        {
            ResponseKind::FindCoordinator(r) if r.error_code == 0 => {
                node = node_of(r.node_id.0);
                true
            }
            _ => false,
        }
    });
    node
}

/// The node (1-based) FindCoordinator names for transactional id `id`, asked of `broker`.
fn txn_coordinator_node(broker: &Broker, id: &str) -> usize {
    coordinator_node(broker, id, 1)
}

/// The first transactional id `rtxn-<n>` whose coordinator is (`on`) or is not (`!on`) on
/// node `node`, once there is one (the offsets groups' leaders may still be moving to their
/// preferred replicas).
fn transactional_id(broker: &Broker, node: usize, on: bool) -> String {
    let mut found = None;
    common::eventually(DEADLINE, "an id among 100 placed as asked", || {
        let mut ids = (0..100).map(|n| format!("rtxn-{n}"));
        found = ids.find(|id| (txn_coordinator_node(broker, id) == node) == on);
        found.is_some()
    });
    found.expect("found")
}

fn bootstrap(cluster: &[Broker]) -> String {
    cluster.iter().map(Broker::bootstrap).collect::<Vec<_>>().join(",")
}

fn transactional_producer(cluster: &[Broker], transactional_id: &str) -> BaseProducer {
    producer_with_timeout(cluster, transactional_id, 60_000)
}

/// `transactional_producer` with its `transaction.timeout.ms`.
fn producer_with_timeout(
    cluster: &[Broker],
    transactional_id: &str,
    timeout_ms: u32,
) -> BaseProducer {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap(cluster))
        .set("transactional.id", transactional_id)
        .set("transaction.timeout.ms", timeout_ms.to_string())
        .set("linger.ms", "1")
        .create()
        .expect("a transactional producer");
    producer.init_transactions(DEADLINE).expect("init_transactions");
    producer
}

fn tagged(tag: &str, count: usize) -> Vec<String> {
    (0..count).map(|i| format!("{tag}-{i}")).collect()
}

fn send(producer: &BaseProducer, values: &[String]) {
    send_to(producer, TOPIC.name, 0, values)
}

fn send_to(producer: &BaseProducer, topic: &str, partition: i32, values: &[String]) {
    for value in values {
        let record = BaseRecord::<(), _>::to(topic).payload(value).partition(partition);
        producer.send(record).map_err(|(e, _)| e).expect("queued");
    }
}

/// Everything a consumer at `isolation` reads of the partition from the start until the
/// end (partition EOF), in order, through `broker`.
fn read_all(broker: &Broker, isolation: &str) -> Vec<String> {
    read_partition(broker, TOPIC.name, 0, isolation)
}

/// `read_all` of any partition.
fn read_partition(broker: &Broker, topic: &str, partition: i32, isolation: &str) -> Vec<String> {
    let consumer: BaseConsumer = common::assign_only_config(broker)
        .set("isolation.level", isolation)
        .set("auto.offset.reset", "earliest")
        .set("enable.partition.eof", "true")
        .create()
        .expect("a consumer");
    let mut assignment = TopicPartitionList::new();
    assignment.add_partition_offset(topic, partition, Offset::Beginning).unwrap();
    consumer.assign(&assignment).unwrap();
    let mut values = Vec::new();
    let deadline = Instant::now() + DEADLINE;
    loop {
        assert!(Instant::now() < deadline, "no end of partition; read so far: {values:?}");
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => values.push(String::from_utf8(m.payload().unwrap().to_vec()).unwrap()),
            Some(Err(KafkaError::PartitionEOF(_))) => return values,
            Some(Err(e)) => eprintln!("consume error (retried by librdkafka): {e}"),
            None => {}
        }
    }
}

/// ListOffsets latest at `isolation` (0 read_uncommitted, 1 read_committed) asked of
/// `broker`'s shard that holds the partition (as `broker`'s Metadata names it).
fn latest(broker: &Broker, isolation: i8) -> i64 {
    let shard = TOPIC.view(broker).map_or(0, |view| view[0].1.max(0) as usize % 1024);
    let mut client = RawClient::connect(broker.shard_addr(shard));
    common::latest_offset(&mut client, TOPIC.name, 0, isolation)
}

/// Waits until the leader named in `view` answers ListOffsets read_committed with
/// `expected`; returns its (read_uncommitted, read_committed) answers.
fn wait_for_lso(leader: &Broker, expected: impl Fn(i64, i64) -> bool, what: &str) -> (i64, i64) {
    let mut seen = (0, 0);
    common::eventually(DEADLINE, what, || {
        seen = (latest(leader, 0), latest(leader, 1));
        expected(seen.0, seen.1)
    });
    seen
}

#[test]
fn committed_records_are_read_committed_on_every_replica_that_leads_after_a_kill() {
    let (mut cluster, view) = TOPIC.start_cluster();
    let leader = node_of(view[0].1);
    let at_leader = transactional_id(&cluster[0], leader, true);

    // One commit, one abort, through the partition's group.
    let producer = transactional_producer(&cluster, &at_leader);
    for (tag, commit) in [("c1", true), ("a1", false)] {
        producer.begin_transaction().unwrap();
        send(&producer, &tagged(tag, 3));
        producer.flush(DEADLINE).expect("flushed");
        match commit {
            true => producer.commit_transaction(DEADLINE).expect("commit"),
            false => producer.abort_transaction(DEADLINE).expect("abort"),
        }
    }
    // An open transaction holds the leader's LSO at its first offset (c1's 3 records, its
    // COMMIT, a1's 3 records and ABORT: 8); its COMMIT releases it.
    producer.begin_transaction().unwrap();
    send(&producer, &tagged("c2", 2));
    producer.flush(DEADLINE).expect("flushed");
    let leader_broker = &cluster[leader - 1];
    let held = wait_for_lso(leader_broker, |high, lso| high == 10 && lso == 8, "the LSO held at 8");
    assert_eq!(held, (10, 8), "high watermark, LSO with c2 open");
    producer.commit_transaction(DEADLINE).expect("commit c2");
    wait_for_lso(leader_broker, |high, lso| high == 11 && lso == 11, "the LSO past c2's COMMIT");

    let committed = [tagged("c1", 3), tagged("c2", 2)].concat();
    let everything = [tagged("c1", 3), tagged("a1", 3), tagged("c2", 2)].concat();
    assert_eq!(read_all(leader_broker, "read_committed"), committed);
    assert_eq!(read_all(leader_broker, "read_uncommitted"), everything);
    drop(producer);

    // The leader's node dies: the new leader's state is its own apply's.
    let all = [0, 1, 2];
    cluster[leader - 1].kill();
    let survivors: Vec<usize> = all.iter().copied().filter(|n| *n + 1 != leader).collect();
    let after = TOPIC.wait_for_one_leader(&cluster, &survivors, "a new leader");
    let after = loop_until_new_leader(&cluster, &survivors, after, leader);
    let new_leader = node_of(after[0].1);
    let new_broker = &cluster[new_leader - 1];
    // 11 offsets (8 records, 3 markers); none open: the LSO is the high watermark.
    let (high, lso) = wait_for_lso(new_broker, |high, _| high == 11, "the new leader's end");
    assert_eq!((high, lso), (11, 11), "the new leader's high watermark and LSO");
    assert_eq!(read_all(new_broker, "read_committed"), committed, "at node {new_leader}");
    assert_eq!(read_all(new_broker, "read_uncommitted"), everything, "at node {new_leader}");

    // The killed node restarts (its state rebuilt from its own log at start-up) and is made
    // to lead: the new leader's node is killed in turn.
    replicated::wait_for_listeners_closed(&cluster[leader - 1]);
    cluster[leader - 1].restart();
    TOPIC.wait_for_one_leader(&cluster, &all, "the restarted node to name the same leader");
    TOPIC.wait_for_isr(&cluster, &all, &[1, 2, 3]);
    cluster[new_leader - 1].kill();
    let third: Vec<usize> = all.iter().copied().filter(|n| *n + 1 != new_leader).collect();
    let last = TOPIC.wait_for_one_leader(&cluster, &third, "a third leader");
    let last = loop_until_new_leader(&cluster, &third, last, new_leader);
    let third_leader = node_of(last[0].1);
    let third_broker = &cluster[third_leader - 1];
    let (high, lso) = wait_for_lso(third_broker, |high, _| high == 11, "the third leader's end");
    assert_eq!((high, lso), (11, 11), "the third leader's high watermark and LSO");
    assert_eq!(read_all(third_broker, "read_committed"), committed, "at node {third_leader}");
    eprintln!(
        "leaders: node {leader}, then {new_leader}, then {third_leader}; transactional id \
         {at_leader:?} (coordinator on the leader's node)"
    );
}

/// Kills the node of the coordinator of transactional id `id` (with one shard a node, the
/// RF-3 partition's leader too) and waits until the survivors name a new partition leader
/// and a new coordinator: (the killed node, the new coordinator's node), 1-based.
fn kill_the_coordinator(cluster: &mut [Broker], id: &str) -> (usize, usize) {
    let killed = txn_coordinator_node(&cluster[0], id);
    cluster[killed - 1].kill();
    let survivors: Vec<usize> = (0..NODES).filter(|n| *n + 1 != killed).collect();
    let view = TOPIC.wait_for_one_leader(cluster, &survivors, "a leader among the survivors");
    loop_until_new_leader(cluster, &survivors, view, killed);
    let mut coordinator = killed;
    common::eventually(DEADLINE, "a coordinator among the survivors", || {
        coordinator = txn_coordinator_node(&cluster[survivors[0]], id);
        coordinator != killed
    });
    (killed, coordinator)
}

/// One transaction of `values` to the RF-3 partition, committed.
fn commit(producer: &BaseProducer, values: &[String]) {
    producer.begin_transaction().unwrap();
    send(producer, values);
    producer.flush(DEADLINE).expect("flushed");
    producer.commit_transaction(DEADLINE).expect("commit");
}

/// `commit` of `committed`, then a transaction of `open` left open (its records flushed).
fn commit_then_leave_open(producer: &BaseProducer, committed: &[String], open: &[String]) {
    commit(producer, committed);
    producer.begin_transaction().unwrap();
    send(producer, open);
    producer.flush(DEADLINE).expect("flushed");
}

/// A transactional producer that committed and left a transaction open when its
/// coordinator's node died: the client's next instance initializes at the new coordinator,
/// which aborts the open transaction and fences the old instance; the new instance commits.
#[test]
fn a_coordinator_killed_with_a_transaction_open_fails_over_and_fences_the_old_instance() {
    let (mut cluster, view) = TOPIC.start_cluster();
    let id = transactional_id(&cluster[0], node_of(view[0].1), true);
    let old = transactional_producer(&cluster, &id);
    commit_then_leave_open(&old, &tagged("c1", 3), &tagged("open", 2));

    let (killed, coordinator) = kill_the_coordinator(&mut cluster, &id);
    // The new instance's InitProducerId at the new coordinator: the open transaction is
    // aborted (its ABORT marker written at the new leader) and the old epoch fenced.
    let new = transactional_producer(&cluster, &id);
    commit(&new, &tagged("c2", 3));
    // The old instance, fenced: its next transaction call is refused.
    send(&old, &tagged("zombie", 1));
    let refused = old.commit_transaction(DEADLINE);
    assert!(refused.is_err(), "the old instance committed after the new one initialized");

    let leader = &cluster[node_of(TOPIC.view(&cluster[coordinator - 1]).unwrap()[0].1) - 1];
    // c1 and its COMMIT, the open transaction and its ABORT, c2 and its COMMIT.
    let ends = wait_for_lso(leader, |high, lso| high == 11 && lso == 11, "the LSO at 11");
    assert_eq!(ends, (11, 11), "the high watermark and LSO after the failover");
    let committed = [tagged("c1", 3), tagged("c2", 3)].concat();
    let everything = [tagged("c1", 3), tagged("open", 2), tagged("c2", 3)].concat();
    assert_eq!(read_all(leader, "read_committed"), committed);
    assert_eq!(read_all(leader, "read_uncommitted"), everything);
    eprintln!(
        "transactional id {id:?}: coordinator on node {killed}, killed; node {coordinator} \
         took over; the old instance got {refused:?}"
    );
}

/// A transaction open when its coordinator's node dies, and no client coming back: the new
/// coordinator (the offsets group's next leader) aborts it once it is past its timeout, so
/// the LSO is released; a new instance then commits.
#[test]
fn a_transaction_open_at_the_coordinators_kill_is_aborted_by_the_new_coordinator() {
    let (mut cluster, view) = TOPIC.start_cluster();
    let leader = node_of(view[0].1);
    let id = transactional_id(&cluster[0], leader, true);
    let timeout_ms = 15_000;
    let producer = producer_with_timeout(&cluster, &id, timeout_ms);
    commit_then_leave_open(&producer, &tagged("c1", 2), &tagged("open", 3));
    let leader_broker = &cluster[leader - 1];
    let held = wait_for_lso(leader_broker, |high, lso| high == 6 && lso == 3, "the LSO held at 3");
    assert_eq!(held, (6, 3), "high watermark, LSO with a transaction open");

    // Killed well within the transaction's timeout: only the new coordinator can abort it.
    let (killed, coordinator) = kill_the_coordinator(&mut cluster, &id);
    let new_leader = &cluster[node_of(TOPIC.view(&cluster[coordinator - 1]).unwrap()[0].1) - 1];
    let ends = wait_for_lso(new_leader, |high, lso| high == 7 && lso == 7, "the open one aborted");
    assert_eq!(ends, (7, 7), "the high watermark and LSO once the open transaction is aborted");
    assert_eq!(read_all(new_leader, "read_committed"), tagged("c1", 2));
    let next = transactional_producer(&cluster, &id);
    commit(&next, &tagged("c2", 2));
    wait_for_lso(new_leader, |high, lso| high == 10 && lso == 10, "the LSO past c2's COMMIT");
    assert_eq!(read_all(new_leader, "read_committed"), [tagged("c1", 2), tagged("c2", 2)].concat());
    drop(producer);
    eprintln!("coordinator on node {killed}, killed; node {coordinator} aborted the open one");
}

#[test]
fn a_coordinator_off_the_leaders_node_commits_and_aborts_through_markers_across_nodes() {
    // Two shards a node: the coordinator follows its shard's offsets group, which with one
    // shard is the RF-3 partition's own group (always led on the same node).
    let (cluster, view) = TOPIC.start_cluster_on(CORES, &[]);
    let leader = node_of(view[0].1);
    let id = transactional_id(&cluster[0], leader, false);
    let coordinator = txn_coordinator_node(&cluster[0], &id);
    let third = (1..=NODES).find(|n| *n != leader && *n != coordinator).expect("a third node");
    SINGLE.create(&cluster[0]);
    let all: Vec<usize> = (0..NODES).collect();
    let single = SINGLE.wait_for_one_leader(&cluster, &all, "the RF-1 topic's leaders");
    let on_third = single.iter().position(|p| node_of(p.1) == third);
    let on_third = on_third.expect("an RF-1 partition on the third node") as i32;

    // Commit, abort, commit: each transaction writes to the RF-3 partition (led on another
    // node than the coordinator's) and to the RF-1 partition on the third node.
    let producer = transactional_producer(&cluster, &id);
    for (tag, commit) in [("k1", true), ("j1", false), ("k2", true)] {
        producer.begin_transaction().unwrap();
        send(&producer, &tagged(tag, 3));
        send_to(&producer, SINGLE.name, on_third, &tagged(&format!("{tag}-single"), 2));
        producer.flush(DEADLINE).expect("flushed");
        match commit {
            true => producer.commit_transaction(DEADLINE).expect("commit"),
            false => producer.abort_transaction(DEADLINE).expect("abort"),
        }
    }
    drop(producer);

    let committed = [tagged("k1", 3), tagged("k2", 3)].concat();
    let everything = [tagged("k1", 3), tagged("j1", 3), tagged("k2", 3)].concat();
    let leader_broker = &cluster[leader - 1];
    // 9 records and 3 markers; none open.
    let ends = wait_for_lso(leader_broker, |high, lso| high == 12 && lso == 12, "the LSO at 12");
    assert_eq!(ends, (12, 12), "the RF-3 partition's high watermark and LSO");
    assert_eq!(read_all(leader_broker, "read_committed"), committed);
    assert_eq!(read_all(leader_broker, "read_uncommitted"), everything);
    let single_broker = &cluster[third - 1];
    let single_of = |tags: &[&str]| -> Vec<String> {
        tags.iter().flat_map(|tag| tagged(&format!("{tag}-single"), 2)).collect()
    };
    let read = |isolation| read_partition(single_broker, SINGLE.name, on_third, isolation);
    assert_eq!(read("read_committed"), single_of(&["k1", "k2"]), "the RF-1 partition");
    assert_eq!(read("read_uncommitted"), single_of(&["k1", "j1", "k2"]), "the RF-1 partition");
    for other in (0..SINGLE.partitions).filter(|p| *p != on_third) {
        let broker = &cluster[node_of(single[other as usize].1) - 1];
        let values = read_partition(broker, SINGLE.name, other, "read_uncommitted");
        assert_eq!(values, Vec::<String>::new(), "RF-1 partition {other}, not written");
    }
    eprintln!(
        "transactional id {id:?}: coordinator on node {coordinator}, RF-3 leader node \
         {leader}, RF-1 partition {on_third} on node {third}"
    );
}

/// The view of `nodes` once they name a leader other than node `old` (right after a kill
/// they may still name it until their election timeout).
fn loop_until_new_leader(
    cluster: &[Broker],
    nodes: &[usize],
    view: replicated::View,
    old: usize,
) -> replicated::View {
    if node_of(view[0].1) != old {
        return view;
    }
    let what = format!("a leader other than node {old}");
    TOPIC.wait_for(cluster, nodes, &what, |views| {
        TOPIC.one_leader(views) && node_of(views[0][0].1) != old
    });
    TOPIC.view(&cluster[nodes[0]]).expect("a view")
}

/// One commit of `c` and one abort of `a` (3 records each) by a producer whose
/// coordinator is on the partition leader's node: (its transactional id, committed values,
/// aborted values).
fn commit_one_abort_one(cluster: &[Broker], leader: usize) -> (String, Vec<String>, Vec<String>) {
    let id = transactional_id(&cluster[0], leader, true);
    let producer = transactional_producer(cluster, &id);
    for (tag, commit) in [("c", true), ("a", false)] {
        producer.begin_transaction().unwrap();
        send(&producer, &tagged(tag, 3));
        producer.flush(DEADLINE).expect("flushed");
        match commit {
            true => producer.commit_transaction(DEADLINE).expect("commit"),
            false => producer.abort_transaction(DEADLINE).expect("abort"),
        }
    }
    (id, tagged("c", 3), tagged("a", 3))
}

/// DescribeTransactions of `id` at `broker`'s shard 0 once it coordinates it: the state.
fn described_state(broker: &Broker, id: &str) -> String {
    use kafka_protocol::messages::describe_transactions_request::DescribeTransactionsRequest;
    use kafka_protocol::messages::TransactionalId;
    let mut client = RawClient::connect(broker.shard_addr(0));
    let request = DescribeTransactionsRequest::default()
        .with_transactional_ids(vec![TransactionalId(id.to_string().into())]);
    let mut state = None;
    common::eventually(DEADLINE, "the coordinator to take the ids over", || {
        let kind = RequestKind::DescribeTransactions(request.clone());
        let ResponseKind::DescribeTransactions(answer) =
            client.call(ApiKey::DescribeTransactions, 0, kind)
        else {
            panic!("not a DescribeTransactions response")
        };
        let described = &answer.transaction_states[0];
        // COORDINATOR_LOAD_IN_PROGRESS (14) and NOT_COORDINATOR (16) until it took over.
        if ![14, 16].contains(&described.error_code) {
            state = Some((described.error_code, described.transaction_state.to_string()));
        }
        state.is_some()
    });
    let (error_code, state) = state.expect("an answer");
    assert_eq!(error_code, 0, "DescribeTransactions of {id}: the rejoined coordinator knows it");
    state
}

#[test]
fn a_follower_rejoining_from_a_partition_snapshot_holds_the_transaction_state() {
    let (mut cluster, view) = TOPIC.start_cluster_with(&["--replica-snapshot-after-ms", "1000"]);
    let all = [0, 1, 2];
    let leader = node_of(view[0].1) - 1;
    let (id, committed, aborted) = commit_one_abort_one(&cluster, leader + 1);

    // A follower loses its data dir; the leader compacts past it.
    let wiped = (leader + 1) % NODES;
    cluster[wiped].kill();
    std::fs::remove_dir_all(cluster[wiped].data_dir()).unwrap();
    let compactions = |node: &Broker| node.metric_sum("shardlog_raft_compactions_total");
    let before = compactions(&cluster[leader]);
    let load = Load::start(&cluster, TOPIC, "plain");
    common::eventually(DEADLINE, "the leader to compact twice with the node away", || {
        compactions(&cluster[leader]) >= before + 2.0
    });
    let plain = load.stop().len();
    replicated::wait_for_listeners_closed(&cluster[wiped]);
    cluster[wiped].restart();
    let installed = |node: &Broker| node.metric_sum("shardlog_partition_snapshots_installed_total");
    common::eventually(DEADLINE, "the wiped node to install a partition snapshot", || {
        installed(&cluster[wiped]) > 0.0
    });
    TOPIC.wait_for_isr(&cluster, &all, &[1, 2, 3]);

    // Leaders other than the rejoined node are killed (and restarted) until it leads.
    let mut kills = 0;
    loop {
        let view = TOPIC.wait_for_one_leader(&cluster, &all, "one leader");
        let now = node_of(view[0].1) - 1;
        if now == wiped {
            break;
        }
        assert!(kills < 20, "the rejoined node never led after {kills} kills");
        cluster[now].kill();
        let others: Vec<usize> = all.iter().copied().filter(|n| *n != now).collect();
        TOPIC.wait_for_one_leader(&cluster, &others, "the two others to name a new leader");
        replicated::wait_for_listeners_closed(&cluster[now]);
        cluster[now].restart();
        TOPIC.wait_for_isr(&cluster, &all, &[1, 2, 3]);
        kills += 1;
    }
    let rejoined = &cluster[wiped];
    let end = (6 + 2 + plain) as i64; // the records, two markers, the plain records
    let (high, lso) = wait_for_lso(rejoined, |high, _| high == end, "the rejoined leader's end");
    assert_eq!((high, lso), (end, end), "the rejoined leader's high watermark and LSO");
    let read_committed = read_all(rejoined, "read_committed");
    let read_uncommitted = read_all(rejoined, "read_uncommitted");
    assert_eq!(read_committed.len(), 3 + plain, "read_committed at the rejoined leader");
    assert_eq!(read_committed[..3], committed[..]);
    assert!(!read_committed.iter().any(|v| aborted.contains(v)), "{read_committed:?}");
    assert_eq!(read_uncommitted[..6], [committed.clone(), aborted.clone()].concat()[..]);
    assert_eq!(read_uncommitted.len(), 6 + plain);
    // The coordinator's state came with the offsets group's snapshot (manifest version 3):
    // the rejoined leader coordinates the id and knows its last transaction was aborted.
    assert_eq!(described_state(rejoined, &id), "CompleteAbort");
    eprintln!(
        "node {} rejoined from a snapshot and leads after {kills} kills; {plain} plain records",
        wiped + 1
    );
}

/// The node (1-based) FindCoordinator names for consumer group `group`, asked of `broker`.
fn group_coordinator_node(broker: &Broker, group: &str) -> usize {
    coordinator_node(broker, group, 0)
}

#[test]
fn a_transactions_offsets_reach_a_group_coordinated_on_another_node() {
    // Two shards a node: a group and a transactional id of different shards are coordinated
    // by different offsets groups, led from different nodes once balanced.
    let (cluster, _) = TOPIC.start_cluster_on(CORES, &[]);
    let group = "rtxn-offsets";
    let group_node = group_coordinator_node(&cluster[0], group);
    let id = transactional_id(&cluster[0], group_node, false);
    let consumer: BaseConsumer = common::assign_only_config(&cluster[group_node - 1])
        .set("group.id", group)
        .set("isolation.level", "read_committed")
        .create()
        .expect("a consumer");
    let mut assignment = TopicPartitionList::new();
    assignment.add_partition_offset(TOPIC.name, 0, Offset::Beginning).unwrap();
    consumer.assign(&assignment).unwrap();
    let metadata = consumer.group_metadata().expect("the group's metadata");

    // Offsets 5 committed with a transaction, then 9 aborted with one.
    let producer = transactional_producer(&cluster, &id);
    for (offset, commit) in [(5, true), (9, false)] {
        producer.begin_transaction().unwrap();
        send(&producer, &tagged(&format!("o{offset}"), 1));
        producer.flush(DEADLINE).expect("flushed");
        let mut offsets = TopicPartitionList::new();
        offsets.add_partition_offset(TOPIC.name, 0, Offset::Offset(offset)).unwrap();
        producer.send_offsets_to_transaction(&offsets, &metadata, DEADLINE).unwrap();
        match commit {
            true => producer.commit_transaction(DEADLINE).expect("commit"),
            false => producer.abort_transaction(DEADLINE).expect("abort"),
        }
    }
    let mut asked = TopicPartitionList::new();
    asked.add_partition(TOPIC.name, 0);
    let committed = consumer.committed_offsets(asked, DEADLINE).expect("committed offsets");
    let offset = committed.find_partition(TOPIC.name, 0).unwrap().offset();
    assert_eq!(offset, Offset::Offset(5), "the group's committed offset");
    let txn_node = txn_coordinator_node(&cluster[0], &id);
    eprintln!("group {group:?} on node {group_node}, transactional id {id:?} on node {txn_node}");
}
