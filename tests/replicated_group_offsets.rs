//! Consumer-group offsets in a cluster (docs/replication.md, "Consumer-group offsets"):
//! three broker processes on 127.0.0.1 (`--cores 1` each, temp dirs, free ports). A
//! librdkafka consumer commits a group's offsets; the node that coordinates the group (the
//! leader of its shard's offsets group) is killed with SIGKILL; every surviving node names
//! a new coordinator, which answers the offsets committed before the kill and takes new
//! commits. The killed node restarts; then the second coordinator's node is killed, and the
//! third coordinator (one of the two that saw the second's commits, or the restarted
//! node once it caught up) answers the newest offsets; once it is killed too, the node
//! left alone names no coordinator (COORDINATOR_NOT_AVAILABLE). With offsets written only
//! to the coordinator's own log, as a single node writes them, the first check after the
//! kill finds no committed offsets.
//!
//! A second test gives the group a member: a subscribed librdkafka consumer reads half of
//! a topic and commits; the coordinator's node (which also leads the topic) is killed;
//! the consumer finds the new coordinator, rejoins, reads on from its commit to the end
//! and commits again; the group's committed offsets end at the topic's end offsets.
//!
//! Every wait has a deadline that fails with what it waited for; nothing asserts on speed.

mod common;
#[path = "common/replicated.rs"]
mod replicated;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::{find_coordinator, Broker};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use replicated::{node_of, Topic, DEADLINE, NODES};

const TOPIC: Topic = Topic { name: "consumed", partitions: 2, replicas: NODES };
const GROUP: &str = "replicated-offsets";

/// The node (index into the cluster) every one of `nodes` names as the group's
/// coordinator, once they agree on one other than `not`.
fn wait_for_coordinator(
    cluster: &[Broker],
    group: &str,
    nodes: &[usize],
    not: Option<usize>,
) -> usize {
    let named = |n: usize| Some(find_coordinator(&cluster[n], group));
    let agreed = |answers: &[(i16, i32, i32)]| {
        answers.iter().all(|a| *a == answers[0] && a.0 == 0)
            && not.is_none_or(|dead| node_of(answers[0].1) != dead + 1)
    };
    common::wait_for_views(DEADLINE, nodes, "one coordinator named by every node", named, agreed);
    node_of(find_coordinator(&cluster[nodes[0]], group).1) - 1
}

/// A consumer of `group` that only commits and reads commits (no membership),
/// bootstrapped at `nodes`.
fn consumer(cluster: &[Broker], group: &str, nodes: &[usize]) -> BaseConsumer {
    let bootstrap: Vec<String> = nodes.iter().map(|n| cluster[*n].bootstrap()).collect();
    let mut config = common::assign_only_config(&cluster[nodes[0]]);
    config.set("bootstrap.servers", bootstrap.join(",")).set("group.id", group);
    config.create().unwrap()
}

/// Commits `offsets` (per partition), retrying while the coordinator moves or loads.
fn commit(consumer: &BaseConsumer, offsets: &[i64]) {
    let mut list = TopicPartitionList::new();
    for (partition, offset) in offsets.iter().enumerate() {
        list.add_partition_offset(TOPIC.name, partition as i32, Offset::Offset(*offset)).unwrap();
    }
    let deadline = Instant::now() + DEADLINE;
    while let Err(e) = consumer.commit(&list, CommitMode::Sync) {
        assert!(Instant::now() < deadline, "commit of {offsets:?}: {e}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The group's committed offsets as `consumer`'s coordinator answers them.
fn committed(consumer: &BaseConsumer) -> BTreeMap<i32, Option<i64>> {
    common::committed_offsets(consumer, TOPIC.name, TOPIC.partitions, DEADLINE)
}

fn expected(offsets: &[i64]) -> BTreeMap<i32, Option<i64>> {
    offsets.iter().enumerate().map(|(p, o)| (p as i32, Some(*o))).collect()
}

#[test]
fn committed_offsets_survive_the_kill_of_each_coordinator_in_turn() {
    let (mut cluster, _) = TOPIC.start_cluster();
    let all = [0, 1, 2];
    let first = wait_for_coordinator(&cluster, GROUP, &all, None);
    commit(&consumer(&cluster, GROUP, &all), &[5, 7]);
    assert_eq!(committed(&consumer(&cluster, GROUP, &all)), expected(&[5, 7]));

    // The coordinator's node dies: the two others name a new coordinator, which has the
    // offsets the first acknowledged, and takes new commits.
    cluster[first].kill();
    let survivors: Vec<usize> = all.iter().copied().filter(|n| *n != first).collect();
    let second = wait_for_coordinator(&cluster, GROUP, &survivors, Some(first));
    let after_kill = consumer(&cluster, GROUP, &survivors);
    assert_eq!(committed(&after_kill), expected(&[5, 7]), "after the first coordinator's kill");
    commit(&after_kill, &[9, 11]);
    assert_eq!(committed(&after_kill), expected(&[9, 11]));
    drop(after_kill);

    // The first node restarts; the second coordinator's node dies. The third coordinator
    // (the restarted node or the remaining one) has the newest offsets.
    replicated::wait_for_listeners_closed(&cluster[first]);
    cluster[first].restart();
    wait_for_coordinator(&cluster, GROUP, &all, None);
    cluster[second].kill();
    let survivors: Vec<usize> = all.iter().copied().filter(|n| *n != second).collect();
    let third = wait_for_coordinator(&cluster, GROUP, &survivors, Some(second));
    let last = consumer(&cluster, GROUP, &survivors);
    assert_eq!(committed(&last), expected(&[9, 11]), "after the second coordinator's kill");

    // A node left alone has no quorum: its leader steps down (check-quorum) and it names
    // no coordinator, COORDINATOR_NOT_AVAILABLE (15), which clients retry.
    let alone = survivors.iter().copied().find(|n| *n != third).unwrap();
    cluster[third].kill();
    common::eventually(DEADLINE, "COORDINATOR_NOT_AVAILABLE from a node alone", || {
        find_coordinator(&cluster[alone], GROUP).0 == 15
    });
    eprintln!("coordinators: node {}, then {}, then {}", first + 1, second + 1, third + 1);
}

/// The topic's end offset per partition after `produce_tagged` of `records` records.
fn ends(topic: Topic, records: usize) -> BTreeMap<i32, i64> {
    let (n, p) = (records as i64, topic.partitions as i64);
    (0..topic.partitions).map(|i| (i, n / p + i64::from((i as i64) < n % p))).collect()
}

/// Polls the member and commits its position until a commit of `target` (per partition)
/// is acknowledged, or fails after the deadline. A commit the coordinator refuses (a
/// member it does not know: it moved) makes librdkafka rejoin; the member then reads
/// again from the group's last commit, as any Kafka consumer after a rebalance.
fn consume_and_commit(member: &BaseConsumer, topic: Topic, target: &BTreeMap<i32, i64>) {
    let deadline = Instant::now() + DEADLINE;
    let mut refusals = Vec::new();
    loop {
        assert!(Instant::now() < deadline, "the member never committed {target:?}: {refusals:?}");
        member.poll(Duration::from_millis(100));
        let Ok(position) = member.position() else { continue };
        let at = |p: &i32| position.find_partition(topic.name, *p).map(|e| e.offset());
        let mut commit = TopicPartitionList::new();
        for (p, offset) in target {
            match at(p) {
                Some(Offset::Offset(o)) if o >= *offset => {}
                _ => break,
            }
            commit.add_partition_offset(topic.name, *p, Offset::Offset(*offset)).unwrap();
        }
        if commit.count() < target.len() {
            continue;
        }
        match member.commit(&commit, CommitMode::Sync) {
            Ok(()) => return,
            Err(e) => refusals.push(e.to_string()),
        }
    }
}

#[test]
fn a_member_rejoins_at_the_new_coordinator_and_commits_after_its_kill() {
    const RECORDS: usize = 200;
    let topic = Topic { name: "membered", partitions: 2, replicas: NODES };
    let (mut cluster, _) = topic.start_cluster();
    let all = [0, 1, 2];
    common::produce_tagged(&cluster[0], topic.name, topic.partitions, "m", RECORDS);
    let member_group = "members";
    let bootstrap: Vec<String> = cluster.iter().map(Broker::bootstrap).collect();
    let member: BaseConsumer = rdkafka::config::ClientConfig::new()
        .set("bootstrap.servers", bootstrap.join(","))
        .set("group.id", member_group)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("session.timeout.ms", "6000")
        .set("heartbeat.interval.ms", "500")
        .set("max.poll.interval.ms", "60000")
        .set("fetch.wait.max.ms", "100")
        .set("max.partition.fetch.bytes", "256")
        .create()
        .unwrap();
    member.subscribe(&[topic.name]).unwrap();
    let ends = ends(topic, RECORDS);
    let half: BTreeMap<i32, i64> = ends.iter().map(|(p, end)| (*p, end / 2)).collect();
    consume_and_commit(&member, topic, &half);

    let coordinator = wait_for_coordinator(&cluster, member_group, &all, None);
    cluster[coordinator].kill();
    consume_and_commit(&member, topic, &ends);

    let survivors: Vec<usize> = all.iter().copied().filter(|n| *n != coordinator).collect();
    let reader = consumer(&cluster, member_group, &survivors);
    let committed = common::committed_offsets(&reader, topic.name, topic.partitions, DEADLINE);
    let expected: BTreeMap<i32, Option<i64>> = ends.iter().map(|(p, o)| (*p, Some(*o))).collect();
    assert_eq!(committed, expected, "the member's commits after the coordinator's kill");
}
