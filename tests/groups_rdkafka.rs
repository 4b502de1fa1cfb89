//! Consumer groups through librdkafka: membership, rebalances, durable commits.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use common::{acks_all_producer, create_topic, produce_tagged as produce, runtime, Broker};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::FutureRecord;
use rdkafka::{Offset, TopicPartitionList};

const TIMEOUT: Duration = Duration::from_secs(30);

fn group_consumer(broker: &Broker, group: &str) -> BaseConsumer {
    ClientConfig::new()
        .set("bootstrap.servers", broker.bootstrap())
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("session.timeout.ms", "6000")
        .set("heartbeat.interval.ms", "300")
        .set("fetch.wait.max.ms", "100")
        .create()
        .unwrap()
}

fn assigned(consumer: &BaseConsumer) -> usize {
    consumer.assignment().map_or(0, |a| a.count())
}

/// Polls every consumer in turn until `done` says stop; returns what each received.
fn poll_all(
    consumers: &[&BaseConsumer],
    limit: Duration,
    mut done: impl FnMut(&[Vec<(i32, i64, String)>]) -> bool,
) -> Vec<Vec<(i32, i64, String)>> {
    let mut received = vec![Vec::new(); consumers.len()];
    let deadline = Instant::now() + limit;
    while !done(&received) {
        assert!(
            Instant::now() < deadline,
            "timed out; received so far: {:?}",
            received.iter().map(Vec::len).collect::<Vec<_>>()
        );
        for (i, consumer) in consumers.iter().enumerate() {
            if let Some(message) = consumer.poll(Duration::from_millis(50)) {
                let m = message.expect("consume error");
                let value = String::from_utf8(m.payload().unwrap().to_vec()).unwrap();
                received[i].push((m.partition(), m.offset(), value));
            }
        }
    }
    received
}

#[test]
fn two_consumers_split_a_topic_and_the_survivor_takes_over_without_loss_or_repeats() {
    let broker = Broker::start(2, &[]);
    create_topic(&broker, "shared", 4);
    produce(&broker, "shared", 4, "first", 400);
    let a = group_consumer(&broker, "splitters");
    let b = group_consumer(&broker, "splitters");
    a.subscribe(&["shared"]).unwrap();
    b.subscribe(&["shared"]).unwrap();
    // Before the first commit a partition may be read twice (by its owner before and
    // after a rebalance): count distinct messages.
    let first = poll_all(&[&a, &b], Duration::from_secs(60), |r| {
        let distinct: BTreeSet<&String> = r.iter().flatten().map(|(_, _, v)| v).collect();
        distinct.len() >= 400 && assigned(&a) == 2 && assigned(&b) == 2
    });
    let firsts: BTreeSet<String> = first.iter().flatten().map(|(_, _, v)| v.clone()).collect();
    assert_eq!(firsts.len(), 400, "every first message seen");
    a.commit_consumer_state(CommitMode::Sync).unwrap();
    b.commit_consumer_state(CommitMode::Sync).unwrap();
    // Both saw messages: the partitions were split between them.
    assert!(!first[0].is_empty() || !first[1].is_empty());

    drop(b); // closes: LeaveGroup, the group rebalances onto a alone
    let handover = poll_all(&[&a], Duration::from_secs(60), |_| assigned(&a) == 4);
    assert!(handover[0].is_empty(), "committed messages were read again: {:?}", handover[0]);
    produce(&broker, "shared", 4, "second", 400);
    let second = poll_all(&[&a], Duration::from_secs(60), |r| {
        r[0].iter().filter(|(_, _, v)| v.starts_with("second")).count() >= 400
    });
    let again: Vec<&String> =
        second[0].iter().map(|(_, _, v)| v).filter(|v| v.starts_with("first")).collect();
    assert!(again.is_empty(), "committed messages were read again: {}", again.len());
    let seconds: BTreeSet<&String> = second[0].iter().map(|(_, _, v)| v).collect();
    assert_eq!(seconds.len(), 400, "no second message lost or repeated");
}

#[test]
fn a_commit_answered_before_a_kill_9_is_there_after_restart() {
    let mut broker = Broker::start(2, &[]);
    create_topic(&broker, "positions", 1);
    produce(&broker, "positions", 1, "m", 100);
    let consumer = group_consumer(&broker, "survivors");
    consumer.subscribe(&["positions"]).unwrap();
    let got = poll_all(&[&consumer], Duration::from_secs(60), |r| r[0].len() >= 37);
    assert_eq!(got[0][0].1, 0);
    let mut position = TopicPartitionList::new();
    position.add_partition_offset("positions", 0, Offset::Offset(37)).unwrap();
    consumer.commit(&position, CommitMode::Sync).unwrap();
    broker.kill_and_restart();
    drop(consumer);

    let resumed = group_consumer(&broker, "survivors");
    let mut asked = TopicPartitionList::new();
    asked.add_partition("positions", 0);
    let committed = resumed.committed_offsets(asked, TIMEOUT).unwrap();
    assert_eq!(committed.find_partition("positions", 0).unwrap().offset(), Offset::Offset(37));
    resumed.subscribe(&["positions"]).unwrap();
    let next = poll_all(&[&resumed], Duration::from_secs(60), |r| !r[0].is_empty());
    assert_eq!(next[0][0].1, 37, "the group resumes exactly at the commit");
}

#[test]
fn a_second_group_replays_everything_while_the_first_keeps_its_position() {
    let broker = Broker::start(2, &[]);
    create_topic(&broker, "replayed", 2);
    produce(&broker, "replayed", 2, "r", 60);
    let first = group_consumer(&broker, "first-group");
    let mut commit = TopicPartitionList::new();
    commit.add_partition_offset("replayed", 0, Offset::Offset(10)).unwrap();
    commit.add_partition_offset("replayed", 1, Offset::Offset(20)).unwrap();
    first.assign(&commit).unwrap();
    first.commit(&commit, CommitMode::Sync).unwrap();

    let second = group_consumer(&broker, "second-group");
    second.subscribe(&["replayed"]).unwrap();
    let all = poll_all(&[&second], Duration::from_secs(60), |r| r[0].len() >= 60);
    let per_partition: BTreeMap<i32, usize> =
        all[0].iter().fold(BTreeMap::new(), |mut m, (p, _, _)| {
            *m.entry(*p).or_default() += 1;
            m
        });
    assert_eq!(per_partition, BTreeMap::from([(0, 30), (1, 30)]));

    let mut asked = TopicPartitionList::new();
    asked.add_partition("replayed", 0);
    asked.add_partition("replayed", 1);
    let committed = first.committed_offsets(asked, TIMEOUT).unwrap();
    assert_eq!(committed.find_partition("replayed", 0).unwrap().offset(), Offset::Offset(10));
    assert_eq!(committed.find_partition("replayed", 1).unwrap().offset(), Offset::Offset(20));
}

#[test]
fn group_listing_shows_members_assignments_and_state() {
    let broker = Broker::start(2, &[]);
    create_topic(&broker, "listed", 2);
    produce(&broker, "listed", 2, "l", 10);
    let consumer = group_consumer(&broker, "watched");
    consumer.subscribe(&["listed"]).unwrap();
    poll_all(&[&consumer], Duration::from_secs(60), |r| r[0].len() >= 10);
    let groups = consumer.fetch_group_list(Some("watched"), TIMEOUT).unwrap();
    let group = groups.groups().iter().find(|g| g.name() == "watched").expect("group listed");
    assert_eq!(group.state(), "Stable");
    assert_eq!(group.protocol_type(), "consumer");
    assert_eq!(group.members().len(), 1);
    let member = &group.members()[0];
    assert!(!member.assignment().unwrap_or_default().is_empty(), "assignment is shown");
    let all = consumer.fetch_group_list(None, TIMEOUT).unwrap();
    assert!(all.groups().iter().any(|g| g.name() == "watched"));
}

#[test]
fn every_client_side_assignor_splits_the_partitions() {
    let broker = Broker::start(2, &[]);
    create_topic(&broker, "assigned", 4);
    produce(&broker, "assigned", 4, "m", 200);
    for strategy in ["range", "roundrobin", "cooperative-sticky"] {
        let group = format!("assignor-{strategy}");
        let make = || {
            ClientConfig::new()
                .set("bootstrap.servers", broker.bootstrap())
                .set("group.id", &group)
                .set("partition.assignment.strategy", strategy)
                .set("enable.auto.commit", "false")
                .set("auto.offset.reset", "earliest")
                .set("session.timeout.ms", "6000")
                .set("heartbeat.interval.ms", "300")
                .set("fetch.wait.max.ms", "100")
                .create::<BaseConsumer>()
                .unwrap()
        };
        let (a, b) = (make(), make());
        a.subscribe(&["assigned"]).unwrap();
        b.subscribe(&["assigned"]).unwrap();
        let got = poll_all(&[&a, &b], Duration::from_secs(60), |r| {
            let distinct: BTreeSet<&String> = r.iter().flatten().map(|(_, _, v)| v).collect();
            distinct.len() >= 200 && assigned(&a) == 2 && assigned(&b) == 2
        });
        assert!(!got[0].is_empty() || !got[1].is_empty(), "{strategy}");
    }
}

/// Polls once; a record received goes into `latency` with the time since it was sent.
fn receive(
    consumer: &BaseConsumer,
    sent: &BTreeMap<String, Instant>,
    latency: &mut BTreeMap<String, Duration>,
) {
    if let Some(message) = consumer.poll(Duration::from_millis(10)) {
        let m = message.expect("consume error");
        let value = String::from_utf8(m.payload().unwrap().to_vec()).unwrap();
        latency.insert(value.clone(), sent[&value].elapsed());
    }
}

/// Issue 13's start-up tail, through the client that showed it. A new group's consumer
/// long-polls partitions that are still empty, with fetch.wait.max.ms at 30 s; records
/// produced one at a time to each partition in turn, from the moment of the assignment
/// on, must each be handed over by the flush that makes them durable, not when a 30 s
/// long poll runs out. (The figures, with librdkafka's own start-up waits, are in
/// docs/benchmarks.md under "Start-up tail".)
#[test]
fn records_sent_right_after_assignment_reach_a_long_polling_group_consumer_before_its_fetch_wait() {
    const FETCH_WAIT: Duration = Duration::from_secs(30);
    const RECORDS: usize = 12;
    let broker = Broker::start(2, &[]);
    create_topic(&broker, "first-second", 3);
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", broker.bootstrap())
        .set("group.id", "first-second")
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("fetch.wait.max.ms", FETCH_WAIT.as_millis().to_string())
        .create()
        .unwrap();
    consumer.subscribe(&["first-second"]).unwrap();
    let deadline = Instant::now() + TIMEOUT;
    while assigned(&consumer) < 3 {
        assert!(Instant::now() < deadline, "no assignment in {TIMEOUT:?}");
        assert!(consumer.poll(Duration::from_millis(20)).is_none(), "the topic is empty");
    }

    let producer = acks_all_producer(&broker);
    let runtime = runtime();
    let mut sent = BTreeMap::new();
    let mut latency = BTreeMap::new();
    for i in 0..RECORDS {
        // 100 ms apart, each partition in turn: every record lands on partitions whose
        // fetch is parked, so each one needs its own wake-up.
        let value = format!("record-{i}");
        let record =
            FutureRecord::<(), _>::to("first-second").payload(&value).partition(i as i32 % 3);
        sent.insert(value.clone(), Instant::now());
        runtime.block_on(producer.send(record, TIMEOUT)).map_err(|(e, _)| e).unwrap();
        let next = Instant::now() + Duration::from_millis(100);
        while Instant::now() < next {
            receive(&consumer, &sent, &mut latency);
        }
    }
    // Long enough for a missed wake-up to show as a latency near FETCH_WAIT, not a timeout.
    let deadline = Instant::now() + FETCH_WAIT + Duration::from_secs(15);
    while latency.len() < RECORDS && Instant::now() < deadline {
        receive(&consumer, &sent, &mut latency);
    }
    assert_eq!(latency.len(), RECORDS, "every record delivered; latencies: {latency:?}");
    let worst = latency.values().max().unwrap();
    assert!(
        *worst < FETCH_WAIT / 3,
        "a record waited {worst:?} of a {FETCH_WAIT:?} long poll: {latency:?}"
    );
}
