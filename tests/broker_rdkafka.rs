//! The broker driven by a real client: librdkafka through the `rdkafka` crate.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{assign_only_consumer as consumer, create_topic, runtime, Broker};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Offset, TopicPartitionList};

const TIMEOUT: Duration = Duration::from_secs(30);

fn producer(broker: &Broker) -> FutureProducer {
    ClientConfig::new()
        .set("bootstrap.servers", broker.bootstrap())
        .set("acks", "all")
        .set("linger.ms", "5")
        .set("message.timeout.ms", "30000")
        .create()
        .unwrap()
}

/// Produces `count` keyed messages; returns partition -> values in offset order.
fn produce_keyed(broker: &Broker, topic: &str, count: usize) -> BTreeMap<i32, Vec<(i64, String)>> {
    let producer = producer(broker);
    let deliveries = runtime().block_on(async {
        let mut futures = Vec::with_capacity(count);
        for i in 0..count {
            let key = format!("key-{}", i % 100);
            let value = format!("value-{i:06}");
            let record = FutureRecord::to(topic).key(&key).payload(&value);
            let delivery = producer.send_result(record).map_err(|(e, _)| e).expect("queued");
            futures.push((value.clone(), delivery));
        }
        let mut out = Vec::with_capacity(count);
        for (value, delivery) in futures {
            let delivery = delivery.await.expect("delivery report");
            let delivery = delivery.unwrap_or_else(|(e, _)| panic!("delivery failed: {e}"));
            out.push((delivery.partition, delivery.offset, value));
        }
        out
    });
    let mut by_partition: BTreeMap<i32, Vec<(i64, String)>> = BTreeMap::new();
    for (partition, offset, value) in deliveries {
        by_partition.entry(partition).or_default().push((offset, value));
    }
    for values in by_partition.values_mut() {
        values.sort();
    }
    by_partition
}

/// Reads `expected` messages from every partition from the beginning.
fn consume_all(
    broker: &Broker,
    topic: &str,
    partitions: i32,
    expected: usize,
) -> BTreeMap<i32, Vec<(i64, String)>> {
    let consumer = consumer(broker);
    let mut assignment = TopicPartitionList::new();
    for p in 0..partitions {
        assignment.add_partition_offset(topic, p, Offset::Beginning).unwrap();
    }
    consumer.assign(&assignment).unwrap();
    let mut out: BTreeMap<i32, Vec<(i64, String)>> = BTreeMap::new();
    let mut received = 0;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while received < expected {
        assert!(std::time::Instant::now() < deadline, "consumed only {received} of {expected}");
        if let Some(message) = consumer.poll(Duration::from_millis(500)) {
            let message = message.expect("consume error");
            let value = String::from_utf8(message.payload().unwrap().to_vec()).unwrap();
            out.entry(message.partition()).or_default().push((message.offset(), value));
            received += 1;
        }
    }
    out
}

#[test]
fn keyed_messages_come_back_in_partition_order_before_and_after_a_restart() {
    let mut broker = Broker::start(2, &[]);
    create_topic(&broker, "trades", 6);
    let produced = produce_keyed(&broker, "trades", 10_000);
    assert_eq!(produced.len(), 6, "keys spread over all six partitions");
    for values in produced.values() {
        let offsets: Vec<i64> = values.iter().map(|(o, _)| *o).collect();
        let dense: Vec<i64> = (0..values.len() as i64).collect();
        assert_eq!(offsets, dense, "offsets are dense from 0");
    }
    let consumed = consume_all(&broker, "trades", 6, 10_000);
    assert_eq!(consumed, produced);

    broker.kill_and_restart();
    let consumed = consume_all(&broker, "trades", 6, 10_000);
    assert_eq!(consumed, produced, "everything acknowledged is there after kill -9");
}

#[test]
fn offsets_for_times_finds_the_first_record_at_or_after_a_timestamp() {
    let broker = Broker::start(2, &[]);
    create_topic(&broker, "ticks", 1);
    let producer = producer(&broker);
    let base = 1_700_000_000_000i64;
    runtime().block_on(async {
        for i in 0..10i64 {
            let payload = format!("tick-{i}");
            let record =
                FutureRecord::<(), _>::to("ticks").payload(&payload).timestamp(base + i * 1000);
            producer.send(record, TIMEOUT).await.map_err(|(e, _)| e).unwrap();
        }
    });
    let consumer = consumer(&broker);
    let mut query = TopicPartitionList::new();
    query.add_partition_offset("ticks", 0, Offset::Offset(base + 4_500)).unwrap();
    let found = consumer.offsets_for_times(query, TIMEOUT).unwrap();
    assert_eq!(found.find_partition("ticks", 0).unwrap().offset(), Offset::Offset(5));

    let mut query = TopicPartitionList::new();
    query.add_partition_offset("ticks", 0, Offset::Offset(base + 60_000)).unwrap();
    let found = consumer.offsets_for_times(query, TIMEOUT).unwrap();
    assert_eq!(found.find_partition("ticks", 0).unwrap().offset(), Offset::End);
}

#[test]
fn a_consumer_at_the_end_receives_a_message_produced_later() {
    let broker = Broker::start(2, &[]);
    create_topic(&broker, "live", 1);
    let consumer = ClientConfig::new()
        .set("bootstrap.servers", broker.bootstrap())
        .set("group.id", "unused-assign-only")
        .set("enable.auto.commit", "false")
        .set("fetch.wait.max.ms", "5000")
        .create::<BaseConsumer>()
        .unwrap();
    let mut assignment = TopicPartitionList::new();
    assignment.add_partition_offset("live", 0, Offset::End).unwrap();
    consumer.assign(&assignment).unwrap();
    assert!(consumer.poll(Duration::from_millis(1500)).is_none());
    let producer = producer(&broker);
    runtime().block_on(async {
        let record = FutureRecord::to("live").key("k").payload("late");
        producer.send(record, TIMEOUT).await.map_err(|(e, _)| e).unwrap();
    });
    let message = consumer.poll(TIMEOUT).expect("message arrives").expect("no error");
    assert_eq!(message.payload(), Some(&b"late"[..]));
    assert_eq!(message.offset(), 0);
}

#[test]
fn producing_to_an_unknown_topic_fails_when_auto_create_is_off() {
    let broker = Broker::start(1, &["--auto-create-topics", "false"]);
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", broker.bootstrap())
        .set("message.timeout.ms", "20000")
        .set("topic.metadata.propagation.max.ms", "1000")
        .create()
        .unwrap();
    let result = runtime().block_on(async {
        producer.send(FutureRecord::to("missing").key("k").payload("v"), TIMEOUT).await
    });
    let (error, _) = result.expect_err("delivery to a missing topic must fail");
    let text = error.to_string();
    assert!(text.contains("Unknown topic") || text.contains("UnknownTopic"), "{text}");
}

#[test]
fn an_oversized_batch_is_refused_with_message_too_large() {
    let broker = Broker::start(1, &["--max-message-bytes", "10000"]);
    create_topic(&broker, "small", 1);
    let producer = producer(&broker);
    let big = vec![b'x'; 20_000];
    let result = runtime().block_on(async {
        producer.send(FutureRecord::<(), _>::to("small").payload(&big), TIMEOUT).await
    });
    let (error, _) = result.expect_err("oversized batch must fail");
    assert!(error.to_string().contains("too large"), "{error}");
}

#[test]
fn the_broker_starts_every_time() {
    // A start-up that stalls fails the harness's readiness wait. (Shard tasks in a
    // glommio Latency::Matters queue stalled 2-3 times in 40 start-ups.)
    for _ in 0..40 {
        let broker = Broker::start(2, &[]);
        drop(broker);
    }
}
