//! The log cleaner through a real client (librdkafka): many values for few keys to a
//! compacted topic on small segments, then a consumer reading from the beginning sees each
//! key's latest value at the offset it was acknowledged with (gaps where older values
//! were), deleted keys are gone after `delete.retention.ms`, the segment files of the
//! superseded values are deleted, and all of it holds after kill -9 and a restart. The
//! same with a transactional producer that commits some transactions and aborts others:
//! after cleaning a read_committed consumer sees exactly each key's latest committed value
//! and a read_uncommitted one no aborted record.

mod common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use common::*;
use rdkafka::admin::{AdminOptions, NewTopic, TopicReplication};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseProducer, BaseRecord, FutureRecord, Producer};
use rdkafka::{Message, Offset, TopicPartitionList};

const TIMEOUT: Duration = Duration::from_secs(10);
const TOPIC: &str = "changelog";
const KEYS: usize = 20;
const ROUNDS: usize = 200;
const DELETED: [usize; 3] = [3, 7, 11];

/// One shard, 1 MiB segments, and no cleaning while the workload is written ("before" is
/// measured first; `start_cleaning` turns it on).
fn start_broker() -> Broker {
    Broker::start(
        1,
        &[
            "--segment-bytes",
            "1048576",
            "--max-message-bytes",
            "65536",
            "--checkpoint-interval-ms",
            "200",
            "--log-cleaner-interval-ms",
            "3600000",
        ],
    )
}

/// Restarts the broker (kill -9) with the cleaner every 200 ms.
fn start_cleaning(broker: &mut Broker) {
    let interval = broker.extra_args.iter().position(|a| a == "3600000").unwrap();
    broker.extra_args[interval] = "200".to_string();
    broker.kill_and_restart();
}

fn create_compacted(broker: &Broker, name: &str) {
    let topic = NewTopic::new(name, 1, TopicReplication::Fixed(1))
        .set("cleanup.policy", "compact")
        .set("min.cleanable.dirty.ratio", "0.01")
        .set("delete.retention.ms", "0");
    let admin = admin_client(broker);
    let results = runtime().block_on(admin.create_topics(&[topic], &AdminOptions::new())).unwrap();
    results[0].clone().expect("compacted topic created");
}

/// Produces every record (acks=all) and returns what was acknowledged at each offset.
fn produce(
    broker: &Broker,
    records: &[(String, Option<String>)],
) -> BTreeMap<i64, (String, Option<String>)> {
    let producer = acks_all_producer(broker);
    runtime().block_on(async {
        let sends: Vec<_> = records
            .iter()
            .map(|(key, value)| {
                let mut record = FutureRecord::<str, str>::to(TOPIC).key(key);
                if let Some(v) = value {
                    record = record.payload(v);
                }
                producer.send(record, TIMEOUT)
            })
            .collect();
        let mut acked = BTreeMap::new();
        for (send, record) in sends.into_iter().zip(records) {
            let offset = send.await.expect("acknowledged").offset;
            acked.insert(offset, record.clone());
        }
        acked
    })
}

/// Every record from the beginning to the high watermark: (offset, key, value).
fn consume_all(broker: &Broker) -> Vec<(i64, String, Option<String>)> {
    let consumer = assign_only_consumer(broker);
    let (_, high) = consumer.fetch_watermarks(TOPIC, 0, TIMEOUT).unwrap();
    let mut assignment = TopicPartitionList::new();
    assignment.add_partition_offset(TOPIC, 0, Offset::Beginning).unwrap();
    consumer.assign(&assignment).unwrap();
    let mut out = Vec::new();
    let mut next = 0;
    eventually(Duration::from_secs(30), "reading up to the high watermark", || {
        while let Some(message) = consumer.poll(Duration::from_millis(100)) {
            let message = message.expect("a record");
            let text = |b: Option<&[u8]>| b.map(|b| String::from_utf8(b.to_vec()).unwrap());
            out.push((message.offset(), text(message.key()).unwrap(), text(message.payload())));
            next = message.offset() + 1;
        }
        next >= high
    });
    out
}

/// Every record of partition 0 of `topic` from the beginning until partition EOF, read at
/// `isolation` (read_committed / read_uncommitted): (offset, key, value).
fn read_isolated(broker: &Broker, topic: &str, isolation: &str) -> Vec<(i64, String, String)> {
    let consumer: BaseConsumer = assign_only_config(broker)
        .set("isolation.level", isolation)
        .set("enable.partition.eof", "true")
        .create()
        .unwrap();
    let mut assignment = TopicPartitionList::new();
    assignment.add_partition_offset(topic, 0, Offset::Beginning).unwrap();
    consumer.assign(&assignment).unwrap();
    let mut out = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        assert!(std::time::Instant::now() < deadline, "no end of partition after {out:?}");
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                let text = |b: Option<&[u8]>| String::from_utf8(b.unwrap().to_vec()).unwrap();
                out.push((m.offset(), text(m.key()), text(m.payload())));
            }
            Some(Err(KafkaError::PartitionEOF(_))) => return out,
            Some(Err(e)) => panic!("consume error: {e}"),
            None => {}
        }
    }
}

/// Checks what a consumer from the beginning sees against what was acknowledged.
fn check(seen: &[(i64, String, Option<String>)], acked: &BTreeMap<i64, (String, Option<String>)>) {
    let mut latest: HashMap<&String, (i64, &Option<String>)> = HashMap::new();
    for (offset, (key, value)) in acked {
        latest.insert(key, (*offset, value));
    }
    let mut seen_latest: HashMap<&String, (i64, &Option<String>)> = HashMap::new();
    let mut previous = -1;
    for (offset, key, value) in seen {
        assert!(*offset > previous, "offsets increase");
        previous = *offset;
        assert_eq!(acked.get(offset), Some(&(key.clone(), value.clone())), "offset {offset}");
        seen_latest.insert(key, (*offset, value));
    }
    for (key, (offset, value)) in &latest {
        match value {
            Some(_) => assert_eq!(seen_latest.get(key), Some(&(*offset, *value)), "key {key}"),
            None => assert_eq!(seen_latest.get(key), None, "deleted key {key} is gone"),
        }
    }
}

#[test]
fn a_consumer_from_the_beginning_sees_each_keys_latest_value_after_cleaning_and_a_restart() {
    let mut broker = start_broker();
    create_compacted(&broker, TOPIC);
    let filler = "x".repeat(1000);
    let mut records: Vec<(String, Option<String>)> = Vec::new();
    for round in 0..ROUNDS {
        for key in 0..KEYS {
            records.push((format!("key-{key}"), Some(format!("{round}:{filler}"))));
        }
    }
    let mut acked = produce(&broker, &records);
    let deletes: Vec<_> = DELETED.iter().map(|k| (format!("key-{k}"), None)).collect();
    acked.extend(produce(&broker, &deletes));
    // A last value after the tombstones: the partition's last batch is never cleaned.
    acked.extend(produce(&broker, &[("key-0".to_string(), Some("last".to_string()))]));
    let before = broker.segment_files(0);
    assert!(before >= 4, "the workload filled several segments ({before})");

    // Restart (kill -9) with the cleaner every 200 ms.
    start_cleaning(&mut broker);
    let alive = KEYS - DELETED.len();
    eventually(Duration::from_secs(60), "cleaning and the segments it freed", || {
        let seen = consume_all(&broker);
        seen.len() <= alive + 1 && broker.segment_files(0) < before
    });
    let seen = consume_all(&broker);
    check(&seen, &acked);
    let after = broker.segment_files(0);
    println!("segment files: {before} before cleaning, {after} after; records seen {}", seen.len());

    broker.kill_and_restart();
    let seen = consume_all(&broker);
    check(&seen, &acked);
    assert!(seen.len() <= alive + 1, "the cleaned log came back cleaned: {} records", seen.len());
    let (_, high) = assign_only_consumer(&broker).fetch_watermarks(TOPIC, 0, TIMEOUT).unwrap();
    assert_eq!(high, *acked.keys().last().unwrap() + 1, "the high watermark is unchanged");
}

const TXN_TOPIC: &str = "txn-changelog";
const TXN_ROUNDS: usize = 200;

/// One transaction per round writing every key; rounds with `round % 3 == 2` abort (the
/// last one commits: a producer's last batch is kept whole, aborted or not).
/// Returns the values of the aborted rounds.
fn produce_transactions(broker: &Broker, filler: &str) -> HashSet<String> {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", broker.bootstrap())
        .set("transactional.id", "txn-changelog-writer")
        .set("linger.ms", "5")
        .create()
        .expect("a transactional producer");
    producer.init_transactions(TIMEOUT).expect("init_transactions");
    let mut aborted = HashSet::new();
    for round in 0..TXN_ROUNDS {
        producer.begin_transaction().unwrap();
        for key in 0..KEYS {
            let value = format!("{round}/{key}:{filler}");
            let key = format!("key-{key}");
            let record = BaseRecord::to(TXN_TOPIC).key(&key).payload(&value).partition(0);
            producer.send(record).map_err(|(e, _)| e).expect("queued");
            if round % 3 == 2 {
                aborted.insert(value);
            }
        }
        producer.flush(TIMEOUT).expect("flushed");
        if round % 3 == 2 {
            producer.abort_transaction(TIMEOUT).unwrap();
        } else {
            producer.commit_transaction(TIMEOUT).unwrap();
        }
    }
    aborted
}

#[test]
fn a_read_committed_consumer_sees_each_keys_latest_committed_value_after_cleaning_transactions() {
    let mut broker = start_broker();
    create_compacted(&broker, TXN_TOPIC);
    let aborted = produce_transactions(&broker, &"x".repeat(1000));
    assert_ne!((TXN_ROUNDS - 1) % 3, 2, "the last round commits");
    let committed_before = read_isolated(&broker, TXN_TOPIC, "read_committed");
    let uncommitted_before = read_isolated(&broker, TXN_TOPIC, "read_uncommitted");
    let appended: HashMap<i64, (String, String)> =
        uncommitted_before.iter().map(|(o, k, v)| (*o, (k.clone(), v.clone()))).collect();
    let mut latest: BTreeMap<String, (i64, String)> = BTreeMap::new();
    for (offset, key, value) in &committed_before {
        assert!(!aborted.contains(value), "read_committed never sees an aborted value");
        latest.insert(key.clone(), (*offset, value.clone()));
    }
    assert_eq!(latest.len(), KEYS);
    let before = broker.segment_files(0);
    assert!(before >= 4, "the workload filled several segments ({before})");

    // Restart (kill -9: the transaction state is rebuilt) with the cleaner every 200 ms.
    start_cleaning(&mut broker);
    eventually(Duration::from_secs(60), "cleaning and the segments it freed", || {
        let committed = read_isolated(&broker, TXN_TOPIC, "read_committed");
        let uncommitted = read_isolated(&broker, TXN_TOPIC, "read_uncommitted");
        let aborted_seen = uncommitted.iter().filter(|(_, _, v)| aborted.contains(v)).count();
        committed.len() == KEYS && aborted_seen == 0 && broker.segment_files(0) < before
    });
    let committed = read_isolated(&broker, TXN_TOPIC, "read_committed");
    let uncommitted = read_isolated(&broker, TXN_TOPIC, "read_uncommitted");
    for (offset, key, value) in committed.iter().chain(&uncommitted) {
        let original = appended.get(offset).map(|(k, v)| (k.as_str(), v.as_str()));
        assert_eq!(original, Some((key.as_str(), value.as_str())), "offset {offset} unchanged");
        assert!(!aborted.contains(value), "an aborted value at {offset} after cleaning");
    }
    let seen: BTreeMap<String, (i64, String)> =
        committed.iter().map(|(o, k, v)| (k.clone(), (*o, v.clone()))).collect();
    assert_eq!(seen, latest, "exactly each key's latest committed value, at its offset");
    let after = broker.segment_files(0);
    println!(
        "transactional workload: {TXN_ROUNDS} transactions x {KEYS} keys (1 in 3 aborted); \
         segment files (1 MiB each): {before} before cleaning, {after} after; records \
         read_uncommitted: {} before, {} after",
        uncommitted_before.len(),
        uncommitted.len()
    );
}
