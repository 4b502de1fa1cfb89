//! Transactions through librdkafka: commit and abort as read_committed and
//! read_uncommitted consumers see them, consume-transform-produce with
//! send_offsets_to_transaction, fencing, timeouts, and kill -9 in the middle.

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::{create_topic, produce_tagged, Broker, RawClient};
use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};

const TIMEOUT: Duration = Duration::from_secs(30);

fn transactional_producer(
    broker: &Broker,
    transactional_id: &str,
    timeout_ms: u32,
) -> BaseProducer {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", broker.bootstrap())
        .set("transactional.id", transactional_id)
        .set("transaction.timeout.ms", timeout_ms.to_string())
        .set("linger.ms", "1")
        .create()
        .expect("a transactional producer");
    producer.init_transactions(TIMEOUT).expect("init_transactions");
    producer
}

fn send(producer: &BaseProducer, topic: &str, partition: i32, values: &[String]) {
    for value in values {
        let record = BaseRecord::<(), _>::to(topic).payload(value).partition(partition);
        producer.send(record).map_err(|(e, _)| e).expect("queued");
    }
    producer.flush(TIMEOUT).expect("flushed");
}

fn tagged(tag: &str, count: usize) -> Vec<String> {
    (0..count).map(|i| format!("{tag}-{i}")).collect()
}

fn consumer(broker: &Broker, isolation: &str, group: Option<&str>) -> BaseConsumer {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", broker.bootstrap())
        .set("isolation.level", isolation)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("enable.partition.eof", "true")
        .set("fetch.wait.max.ms", "100");
    config.set("group.id", group.unwrap_or("unused"));
    config.create().expect("a consumer")
}

/// Everything a consumer of `topic` partition `partition` reads from the start until it
/// reaches the end (partition EOF), in order.
fn read_all(broker: &Broker, isolation: &str, topic: &str, partition: i32) -> Vec<String> {
    let consumer = consumer(broker, isolation, None);
    let mut assignment = TopicPartitionList::new();
    assignment.add_partition_offset(topic, partition, Offset::Beginning).unwrap();
    consumer.assign(&assignment).unwrap();
    let mut values = Vec::new();
    let deadline = Instant::now() + TIMEOUT;
    loop {
        assert!(Instant::now() < deadline, "no end of partition; read so far: {values:?}");
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => values.push(String::from_utf8(m.payload().unwrap().to_vec()).unwrap()),
            Some(Err(KafkaError::PartitionEOF(_))) => return values,
            Some(Err(e)) => panic!("consume error: {e}"),
            None => {}
        }
    }
}

/// ListOffsets latest (-1) at isolation level `isolation` (0 or 1), through a raw client.
fn latest_offset(broker: &Broker, topic: &str, partition: i32, isolation: i8) -> i64 {
    let mut client = RawClient::connect(broker.shard_addr(0));
    common::latest_offset(&mut client, topic, partition, isolation)
}

#[test]
fn committed_transactions_are_seen_and_aborted_ones_dropped_by_read_committed_consumers() {
    let broker = Broker::start(2, &[]);
    create_topic(&broker, "tx", 2);
    let producer = transactional_producer(&broker, "tx-a", 60_000);
    for (tag, commit) in [("c1", true), ("a1", false), ("c2", true)] {
        producer.begin_transaction().unwrap();
        send(&producer, "tx", 0, &tagged(tag, 3));
        send(&producer, "tx", 1, &tagged(tag, 2));
        if commit {
            producer.commit_transaction(TIMEOUT).unwrap();
        } else {
            producer.abort_transaction(TIMEOUT).unwrap();
        }
    }
    let mut committed = tagged("c1", 3);
    committed.extend(tagged("c2", 3));
    assert_eq!(read_all(&broker, "read_committed", "tx", 0), committed);
    let mut everything = tagged("c1", 3);
    everything.extend(tagged("a1", 3));
    everything.extend(tagged("c2", 3));
    assert_eq!(read_all(&broker, "read_uncommitted", "tx", 0), everything);
    assert_eq!(
        read_all(&broker, "read_committed", "tx", 1),
        [tagged("c1", 2), tagged("c2", 2)].concat()
    );

    // An open transaction holds read_committed back at its first offset, also for the
    // records written after it by others; read_uncommitted sees everything.
    let end_before = latest_offset(&broker, "tx", 0, 0);
    producer.begin_transaction().unwrap();
    send(&producer, "tx", 0, &tagged("open", 2));
    produce_tagged(&broker, "tx", 1, "plain", 2); // partition 0 only (1 partition asked)
    assert_eq!(latest_offset(&broker, "tx", 0, 1), end_before, "LSO at the open transaction");
    assert_eq!(latest_offset(&broker, "tx", 0, 0), end_before + 4);
    assert_eq!(read_all(&broker, "read_committed", "tx", 0), committed);
    assert_eq!(read_all(&broker, "read_uncommitted", "tx", 0).len(), 9 + 4);
    producer.commit_transaction(TIMEOUT).unwrap();
    let after = read_all(&broker, "read_committed", "tx", 0);
    assert_eq!(after, [committed, tagged("open", 2), tagged("plain", 2)].concat());
    let end = latest_offset(&broker, "tx", 0, 0);
    assert_eq!(latest_offset(&broker, "tx", 0, 1), end, "LSO back at the high watermark");
}

/// DeleteRecords past an open transaction's first offset: the last stable offset follows
/// the log start (Kafka clamps its first unstable offset so), never an offset below it,
/// which a consumer would find out of range; the transaction's later records stay
/// hidden from read_committed until its commit.
#[test]
fn deleting_records_past_an_open_transaction_moves_the_last_stable_offset_to_the_log_start() {
    let broker = Broker::start(1, &[]);
    create_topic(&broker, "tx-trim", 1);
    let producer = transactional_producer(&broker, "tx-trim", 60_000);
    producer.begin_transaction().unwrap();
    send(&producer, "tx-trim", 0, &tagged("open", 4));
    produce_tagged(&broker, "tx-trim", 1, "plain", 2);
    assert_eq!(latest_offset(&broker, "tx-trim", 0, 1), 0, "LSO at the open transaction");

    let mut before = TopicPartitionList::new();
    before.add_partition_offset("tx-trim", 0, Offset::Offset(3)).unwrap();
    let admin = common::admin_client(&broker);
    let options = rdkafka::admin::AdminOptions::new();
    let deleted = common::runtime().block_on(admin.delete_records(&before, &options)).unwrap();
    assert!(deleted.find_partition("tx-trim", 0).unwrap().error().is_ok(), "{deleted:?}");
    assert_eq!(latest_offset(&broker, "tx-trim", 0, 1), 3, "LSO at the log start, not 0");
    assert_eq!(latest_offset(&broker, "tx-trim", 0, 0), 6);
    assert_eq!(read_all(&broker, "read_committed", "tx-trim", 0), Vec::<String>::new());

    producer.commit_transaction(TIMEOUT).unwrap();
    assert_eq!(latest_offset(&broker, "tx-trim", 0, 1), 7, "after the marker at 6");
    let after = read_all(&broker, "read_committed", "tx-trim", 0);
    assert_eq!(after, ["open-3", "plain-0", "plain-1"]);
}

#[test]
fn consume_transform_produce_commits_the_input_offsets_with_the_output() {
    let broker = Broker::start(2, &[]);
    create_topic(&broker, "in", 1);
    create_topic(&broker, "out", 1);
    produce_tagged(&broker, "in", 1, "in", 10);
    let consumer = consumer(&broker, "read_committed", Some("ctp"));
    consumer.subscribe(&["in"]).unwrap();
    let producer = transactional_producer(&broker, "ctp-1", 60_000);

    // Round one: five records transformed, committed with their offsets. Round two: the
    // next five, aborted: neither the output nor the offsets stay.
    let mut positions = Vec::new();
    for (round, commit) in [(0, true), (1, false)] {
        let mut values = Vec::new();
        let deadline = Instant::now() + TIMEOUT;
        while values.len() < 5 {
            assert!(Instant::now() < deadline, "round {round}: read only {values:?}");
            match consumer.poll(Duration::from_millis(100)) {
                Some(Ok(m)) => {
                    let v = String::from_utf8(m.payload().unwrap().to_vec()).unwrap();
                    values.push(v.replace("in", "out"));
                }
                Some(Err(KafkaError::PartitionEOF(_))) | None => {}
                Some(Err(e)) => panic!("consume error: {e}"),
            }
        }
        producer.begin_transaction().unwrap();
        send(&producer, "out", 0, &values);
        let position = consumer.position().unwrap();
        positions.push(position.find_partition("in", 0).unwrap().offset());
        let metadata = consumer.group_metadata().unwrap();
        producer.send_offsets_to_transaction(&position, &metadata, TIMEOUT).unwrap();
        if commit {
            producer.commit_transaction(TIMEOUT).unwrap();
        } else {
            producer.abort_transaction(TIMEOUT).unwrap();
        }
    }
    assert_eq!(positions, [Offset::Offset(5), Offset::Offset(10)]);
    let mut asked = TopicPartitionList::new();
    asked.add_partition("in", 0);
    let committed = consumer.committed_offsets(asked, TIMEOUT).unwrap();
    assert_eq!(committed.find_partition("in", 0).unwrap().offset(), Offset::Offset(5));
    assert_eq!(read_all(&broker, "read_committed", "out", 0), tagged("out", 5));
    assert_eq!(read_all(&broker, "read_uncommitted", "out", 0).len(), 10);
}

#[test]
fn a_second_producer_with_the_same_transactional_id_fences_the_first() {
    let broker = Broker::start(2, &[]);
    create_topic(&broker, "fence", 1);
    let first = transactional_producer(&broker, "fenced-id", 60_000);
    first.begin_transaction().unwrap();
    send(&first, "fence", 0, &tagged("zombie", 2));
    let second = transactional_producer(&broker, "fenced-id", 60_000);
    let refused = first.commit_transaction(TIMEOUT).expect_err("the first instance is fenced");
    let fatal = matches!(&refused, KafkaError::Transaction(e) if e.is_fatal());
    assert!(fatal, "fencing is fatal for the old instance: {refused:?}");
    second.begin_transaction().unwrap();
    send(&second, "fence", 0, &tagged("live", 2));
    second.commit_transaction(TIMEOUT).unwrap();
    assert_eq!(read_all(&broker, "read_committed", "fence", 0), tagged("live", 2));
}

#[test]
fn a_transaction_left_open_past_its_timeout_is_aborted_by_the_coordinator() {
    let broker = Broker::start(1, &["--transaction-check-interval-ms", "100"]);
    create_topic(&broker, "slow", 1);
    let producer = transactional_producer(&broker, "slow-id", 1_000);
    producer.begin_transaction().unwrap();
    send(&producer, "slow", 0, &tagged("late", 2));
    produce_tagged(&broker, "slow", 1, "plain", 1);
    // The coordinator aborts it: read_committed moves past it without its records.
    common::eventually(TIMEOUT, "the open transaction to be aborted", || {
        latest_offset(&broker, "slow", 0, 1) == latest_offset(&broker, "slow", 0, 0)
    });
    assert_eq!(read_all(&broker, "read_committed", "slow", 0), tagged("plain", 1));
    let refused = producer.commit_transaction(TIMEOUT).expect_err("aborted and fenced");
    assert!(matches!(refused, KafkaError::Transaction(_)), "{refused:?}");
}

#[test]
fn after_a_kill_9_committed_transactions_stay_visible_and_aborted_ones_invisible() {
    let mut broker = Broker::start(2, &[]);
    create_topic(&broker, "crash", 2);
    {
        let producer = transactional_producer(&broker, "crash-id", 60_000);
        for (tag, commit) in [("c1", true), ("a1", false)] {
            producer.begin_transaction().unwrap();
            send(&producer, "crash", 0, &tagged(tag, 3));
            send(&producer, "crash", 1, &tagged(tag, 3));
            if commit {
                producer.commit_transaction(TIMEOUT).unwrap();
            } else {
                producer.abort_transaction(TIMEOUT).unwrap();
            }
        }
        // One left open at the crash: it must not become visible either.
        producer.begin_transaction().unwrap();
        send(&producer, "crash", 0, &tagged("open", 2));
    }
    broker.kill_and_restart();
    for partition in [0, 1] {
        assert_eq!(read_all(&broker, "read_committed", "crash", partition), tagged("c1", 3));
    }
    // A new instance fences the old one and aborts its open transaction; what follows
    // is readable, the open one's records never.
    let producer = transactional_producer(&broker, "crash-id", 60_000);
    producer.begin_transaction().unwrap();
    send(&producer, "crash", 0, &tagged("c2", 2));
    producer.commit_transaction(TIMEOUT).unwrap();
    let seen: BTreeSet<String> =
        read_all(&broker, "read_committed", "crash", 0).into_iter().collect();
    let expected: BTreeSet<String> =
        [tagged("c1", 3), tagged("c2", 2)].concat().into_iter().collect();
    assert_eq!(seen, expected);
    broker.kill_and_restart();
    assert_eq!(
        read_all(&broker, "read_committed", "crash", 0),
        [tagged("c1", 3), tagged("c2", 2)].concat()
    );
    assert_eq!(read_all(&broker, "read_uncommitted", "crash", 0).len(), 3 + 3 + 2 + 2);
}

#[test]
fn out_of_order_and_fenced_calls_get_kafkas_error_codes() {
    use kafka_protocol::messages::end_txn_request::EndTxnRequest;
    use kafka_protocol::messages::find_coordinator_request::FindCoordinatorRequest;
    use kafka_protocol::messages::init_producer_id_request::InitProducerIdRequest;
    use kafka_protocol::messages::TransactionalId;
    use kafka_protocol::protocol::StrBytes;

    let broker = Broker::start(2, &["--transaction-max-timeout-ms", "60000"]);
    let id = || TransactionalId(StrBytes::from_static_str("raw-id"));
    let mut any = RawClient::connect(broker.shard_addr(0));
    let find = FindCoordinatorRequest::default()
        .with_key(StrBytes::from_static_str("raw-id"))
        .with_key_type(1);
    let coordinator = match any.call(ApiKey::FindCoordinator, 3, RequestKind::FindCoordinator(find))
    {
        ResponseKind::FindCoordinator(r) => {
            assert_eq!(r.error_code, 0);
            r.node_id.0 as usize
        }
        other => panic!("{other:?}"),
    };
    let init = |client: &mut RawClient, timeout_ms: i32| {
        let request = InitProducerIdRequest::default()
            .with_transactional_id(Some(id()))
            .with_transaction_timeout_ms(timeout_ms)
            .with_producer_id((-1).into())
            .with_producer_epoch(-1);
        match client.call(ApiKey::InitProducerId, 4, RequestKind::InitProducerId(request)) {
            ResponseKind::InitProducerId(r) => (r.error_code, r.producer_id.0, r.producer_epoch),
            other => panic!("{other:?}"),
        }
    };
    let end = |client: &mut RawClient, version: i16, producer: (i64, i16)| {
        let request = EndTxnRequest::default()
            .with_transactional_id(id())
            .with_producer_id(producer.0.into())
            .with_producer_epoch(producer.1)
            .with_committed(true);
        match client.call(ApiKey::EndTxn, version, RequestKind::EndTxn(request)) {
            ResponseKind::EndTxn(r) => r.error_code,
            other => panic!("{other:?}"),
        }
    };
    let mut other = RawClient::connect(broker.shard_addr(1 - coordinator));
    assert_eq!(init(&mut other, 10_000).0, 16, "NOT_COORDINATOR on the other shard");
    let mut client = RawClient::connect(broker.shard_addr(coordinator));
    assert_eq!(init(&mut client, 120_000).0, 50, "INVALID_TRANSACTION_TIMEOUT");
    let (error, producer_id, epoch) = init(&mut client, 10_000);
    assert_eq!((error, epoch), (0, 0));
    assert_eq!(end(&mut client, 3, (producer_id, 0)), 48, "INVALID_TXN_STATE: nothing open");
    assert_eq!(end(&mut client, 3, (producer_id + 1, 0)), 49, "INVALID_PRODUCER_ID_MAPPING");
    let (error, again, epoch) = init(&mut client, 10_000);
    assert_eq!((error, again, epoch), (0, producer_id, 1), "a new instance bumps the epoch");
    assert_eq!(end(&mut client, 3, (producer_id, 0)), 90, "PRODUCER_FENCED (v2+)");
    assert_eq!(end(&mut client, 1, (producer_id, 0)), 47, "INVALID_PRODUCER_EPOCH (v0-v1)");
}
