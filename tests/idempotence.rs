//! Idempotent producers: retries are never written twice, across reconnects and restarts.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use common::{idempotent_batch, Broker, RawClient};
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreateTopicsRequest};
use kafka_protocol::messages::init_producer_id_request::InitProducerIdRequest;
use kafka_protocol::messages::produce_request::{
    PartitionProduceData, ProduceRequest, TopicProduceData,
};
use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind, TopicName, TransactionalId};
use kafka_protocol::protocol::StrBytes;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Offset, TopicPartitionList};

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

fn init_producer_id(client: &mut RawClient, transactional_id: Option<&str>) -> (i16, i64, i16) {
    let request = InitProducerIdRequest::default()
        .with_transactional_id(
            transactional_id.map(|t| TransactionalId(StrBytes::from_string(t.into()))),
        )
        .with_transaction_timeout_ms(60_000)
        .with_producer_id((-1).into())
        .with_producer_epoch(-1);
    match client.call(ApiKey::InitProducerId, 4, RequestKind::InitProducerId(request)) {
        ResponseKind::InitProducerId(r) => (r.error_code, r.producer_id.0, r.producer_epoch),
        other => panic!("{other:?}"),
    }
}

fn produce(client: &mut RawClient, records: Bytes) -> (i16, i64) {
    let request =
        ProduceRequest::default().with_acks(-1).with_timeout_ms(10_000).with_topic_data(vec![
            TopicProduceData::default().with_name(name("idem")).with_partition_data(vec![
                PartitionProduceData::default().with_index(0).with_records(Some(records)),
            ]),
        ]);
    match client.call(ApiKey::Produce, 9, RequestKind::Produce(request)) {
        ResponseKind::Produce(r) => {
            let p = &r.responses[0].partition_responses[0];
            (p.error_code, p.base_offset)
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn retried_batches_are_answered_with_their_first_offsets_even_after_a_kill_9() {
    let mut broker = Broker::start(1, &[]);
    let mut client = RawClient::connect(broker.shard_addr(0));
    let create = CreateTopicsRequest::default().with_topics(vec![CreatableTopic::default()
        .with_name(name("idem"))
        .with_num_partitions(1)
        .with_replication_factor(1)]);
    client.call(ApiKey::CreateTopics, 5, RequestKind::CreateTopics(create));
    let (error, pid, epoch) = init_producer_id(&mut client, None);
    assert_eq!((error, epoch), (0, 0));
    assert!(pid >= 0);
    let (error, txn_pid, _) = init_producer_id(&mut client, Some("tx"));
    assert_eq!(error, 0, "a transactional id gets its own producer id");
    assert_ne!(txn_pid, pid);

    let batch = |seq: i32, n: usize| {
        let records: Vec<(&[u8], &[u8])> = (0..n).map(|_| (&b"k"[..], &b"v"[..])).collect();
        idempotent_batch(&records, 1, pid, 0, seq)
    };
    assert_eq!(produce(&mut client, batch(0, 3)), (0, 0));
    assert_eq!(produce(&mut client, batch(3, 2)), (0, 3));
    assert_eq!(produce(&mut client, batch(0, 3)), (0, 0), "duplicate: original offset");
    assert_eq!(produce(&mut client, batch(9, 1)), (45, -1), "OUT_OF_ORDER_SEQUENCE_NUMBER");
    let stranger = idempotent_batch(&[(b"k", b"v")], 1, pid + 1, 0, 4);
    assert_eq!(produce(&mut client, stranger), (59, -1), "UNKNOWN_PRODUCER_ID");
    let old_epoch = idempotent_batch(&[(b"k", b"v")], 1, pid, -1, 5);
    assert_eq!(produce(&mut client, old_epoch).0, 47, "INVALID_PRODUCER_EPOCH");

    broker.kill_and_restart();
    let mut client = RawClient::connect(broker.shard_addr(0));
    assert_eq!(produce(&mut client, batch(3, 2)), (0, 3), "dedup survives the restart");
    assert_eq!(produce(&mut client, batch(5, 1)), (0, 5));
    let (_, new_pid, _) = init_producer_id(&mut client, None);
    assert_ne!(new_pid, pid, "producer ids are not reused after a restart");
}

#[test]
fn librdkafka_idempotent_producer_writes_each_message_once_across_broker_kills() {
    let mut broker = Broker::start(2, &[]);
    let total = 100_000usize;
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", broker.bootstrap())
        .set("enable.idempotence", "true")
        .set("max.in.flight", "5")
        .set("linger.ms", "2")
        .set("message.timeout.ms", "120000")
        .set("reconnect.backoff.ms", "50")
        .set("reconnect.backoff.max.ms", "200")
        .create()
        .unwrap();
    let runtime = common::runtime();
    common::create_topic(&broker, "exactly-once", 3);
    let mut deliveries = Vec::with_capacity(total);
    for i in 0..total {
        let value = format!("{:03}-{i:07}", i % 3);
        loop {
            let record =
                FutureRecord::<(), _>::to("exactly-once").payload(&value).partition((i % 3) as i32);
            match producer.send_result(record) {
                Ok(delivery) => break deliveries.push(delivery),
                Err((e, _)) => {
                    // Local queue full while the broker is down: let librdkafka drain.
                    assert!(e.to_string().contains("Queue full"), "{e}");
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        }
        if i > 0 && i % 30_000 == 0 {
            broker.kill_and_restart();
        }
    }
    runtime.block_on(async {
        for d in deliveries {
            d.await.unwrap().map_err(|(e, _)| e).expect("delivered");
        }
    });

    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", broker.bootstrap())
        .set("group.id", "unused-assign-only")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut assignment = TopicPartitionList::new();
    for p in 0..3 {
        assignment.add_partition_offset("exactly-once", p, Offset::Beginning).unwrap();
    }
    consumer.assign(&assignment).unwrap();
    let mut per_partition: BTreeMap<i32, Vec<String>> = BTreeMap::new();
    let mut received = 0;
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while received < total {
        assert!(std::time::Instant::now() < deadline, "received only {received}");
        if let Some(m) = consumer.poll(Duration::from_millis(500)) {
            let m = m.unwrap();
            per_partition
                .entry(m.partition())
                .or_default()
                .push(String::from_utf8(m.payload().unwrap().to_vec()).unwrap());
            received += 1;
        }
    }
    // Nothing more arrives: no duplicates beyond the total.
    assert!(consumer.poll(Duration::from_secs(2)).is_none(), "more than {total} messages stored");
    for (partition, values) in per_partition {
        let expected: Vec<String> = (0..total)
            .filter(|i| i % 3 == partition as usize)
            .map(|i| format!("{:03}-{i:07}", i % 3))
            .collect();
        assert_eq!(values.len(), expected.len(), "partition {partition}: count");
        assert!(values == expected, "partition {partition}: not exactly once, in send order");
    }
}
