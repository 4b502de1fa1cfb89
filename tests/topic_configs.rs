//! Topic configs through real clients: librdkafka's AdminClient (DescribeConfigs,
//! AlterConfigs), its producer and consumer, and raw IncrementalAlterConfigs requests.

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{
    acks_all_producer, admin_client, produce_request, record_batch, runtime, Broker, RawClient,
};
use kafka_protocol::messages::describe_configs_request::{
    DescribeConfigsRequest, DescribeConfigsResource,
};
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig, IncrementalAlterConfigsRequest,
};
use kafka_protocol::messages::produce_request::{
    PartitionProduceData, ProduceRequest, TopicProduceData,
};
use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind, TopicName};
use kafka_protocol::protocol::StrBytes;
use rdkafka::admin::{
    AdminOptions, AlterConfig, ConfigEntry, ConfigSource, NewTopic, ResourceSpecifier,
    TopicReplication,
};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Message, Timestamp};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Offset, TopicPartitionList};

const TIMEOUT: Duration = Duration::from_secs(30);

/// Creates a topic with `configs`; the broker's answer for it.
fn create(broker: &Broker, name: &str, configs: &[(&str, &str)]) -> Result<(), RDKafkaErrorCode> {
    let mut topic = NewTopic::new(name, 1, TopicReplication::Fixed(1));
    for (key, value) in configs {
        topic = topic.set(key, value);
    }
    let results = runtime()
        .block_on(admin_client(broker).create_topics(&[topic], &AdminOptions::new()))
        .expect("create request answered");
    results[0].clone().map(|_| ()).map_err(|(_, code)| code)
}

fn describe(broker: &Broker, topic: &str) -> Vec<ConfigEntry> {
    let resource = ResourceSpecifier::Topic(topic);
    let mut results = runtime()
        .block_on(admin_client(broker).describe_configs(&[resource], &AdminOptions::new()))
        .expect("describe request answered");
    results.remove(0).expect("topic described").entries
}

fn entry<'a>(entries: &'a [ConfigEntry], name: &str) -> &'a ConfigEntry {
    entries.iter().find(|e| e.name == name).unwrap_or_else(|| panic!("{name} not described"))
}

/// AlterConfigs (API 33, librdkafka's alter_configs). The rdkafka crate (0.38) drops the
/// per-resource error of the answer, so error codes are checked with raw requests below.
fn alter(broker: &Broker, specifier: ResourceSpecifier, configs: &[(&str, &str)]) {
    let mut change = AlterConfig::new(specifier);
    for (key, value) in configs {
        change = change.set(key, value);
    }
    let results = runtime()
        .block_on(admin_client(broker).alter_configs(&[change], &AdminOptions::new()))
        .expect("alter request answered");
    assert_eq!(results.len(), 1);
}

fn send(
    producer: &FutureProducer,
    topic: &str,
    payload: &[u8],
    timestamp: Option<i64>,
) -> Result<i64, KafkaError> {
    send_keyed(producer, topic, None, payload, timestamp)
}

fn send_keyed(
    producer: &FutureProducer,
    topic: &str,
    key: Option<&[u8]>,
    payload: &[u8],
    timestamp: Option<i64>,
) -> Result<i64, KafkaError> {
    runtime().block_on(async {
        let mut record = FutureRecord::<[u8], _>::to(topic).payload(payload);
        if let Some(k) = key {
            record = record.key(k);
        }
        if let Some(t) = timestamp {
            record = record.timestamp(t);
        }
        producer.send(record, TIMEOUT).await.map(|d| d.offset).map_err(|(e, _)| e)
    })
}

fn consumer(broker: &Broker, topic: &str) -> BaseConsumer {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", broker.bootstrap())
        .set("group.id", "unused-assign-only")
        .set("enable.auto.commit", "false")
        .set("fetch.wait.max.ms", "100")
        .create()
        .unwrap();
    let mut assignment = TopicPartitionList::new();
    assignment.add_partition_offset(topic, 0, Offset::Beginning).unwrap();
    consumer.assign(&assignment).unwrap();
    consumer
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

#[test]
fn describe_shows_every_config_with_its_default_or_explicit_value_and_source() {
    let broker = Broker::start(2, &["--max-message-bytes", "500000"]);
    create(&broker, "described", &[("retention.ms", "3600000")]).unwrap();
    let entries = describe(&broker, "described");
    let retention = entry(&entries, "retention.ms");
    assert_eq!(retention.value.as_deref(), Some("3600000"));
    assert_eq!(retention.source, ConfigSource::DynamicTopic);
    assert!(!retention.is_default && !retention.is_read_only);
    let caching = entry(&entries, "write.caching");
    assert_eq!(caching.value.as_deref(), Some("false"));
    assert_eq!(caching.source, ConfigSource::Default);
    assert!(caching.is_default);
    // This default comes from the broker's --max-message-bytes.
    assert_eq!(entry(&entries, "max.message.bytes").value.as_deref(), Some("500000"));
    for key in [
        "cleanup.policy",
        "flush.messages",
        "flush.ms",
        "message.timestamp.type",
        "retention.bytes",
        "segment.bytes",
        "segment.ms",
    ] {
        assert_eq!(entry(&entries, key).source, ConfigSource::Default, "{key}");
    }
}

#[test]
fn an_altered_config_set_replaces_the_old_one_and_survives_a_kill_9_restart() {
    let mut broker = Broker::start(2, &[]);
    create(&broker, "altered", &[("retention.bytes", "1000000")]).unwrap();
    let topic = ResourceSpecifier::Topic("altered");
    alter(&broker, topic, &[("retention.ms", "5000"), ("write.caching", "true")]);
    let check = |broker: &Broker| {
        let entries = describe(broker, "altered");
        assert_eq!(entry(&entries, "retention.ms").value.as_deref(), Some("5000"));
        assert_eq!(entry(&entries, "retention.ms").source, ConfigSource::DynamicTopic);
        assert_eq!(entry(&entries, "write.caching").value.as_deref(), Some("true"));
        // AlterConfigs replaces the whole set: retention.bytes went back to its default.
        assert_eq!(entry(&entries, "retention.bytes").value.as_deref(), Some("-1"));
        assert_eq!(entry(&entries, "retention.bytes").source, ConfigSource::Default);
    };
    check(&broker);
    broker.kill_and_restart();
    check(&broker);
}

#[test]
fn invalid_values_are_refused_and_change_nothing() {
    let broker = Broker::start(1, &[]);
    create(&broker, "strict", &[("retention.ms", "60000")]).unwrap();
    let topic = ResourceSpecifier::Topic("strict");
    alter(&broker, topic, &[("retention.ms", "soon")]);
    alter(&broker, topic, &[("cleanup.policy", "tidy")]);
    alter(&broker, topic, &[("min.cleanable.dirty.ratio", "2")]);
    alter(&broker, topic, &[("no.such.key", "1")]);
    let entries = describe(&broker, "strict");
    assert_eq!(entry(&entries, "retention.ms").value.as_deref(), Some("60000"), "unchanged");
    assert_eq!(entry(&entries, "cleanup.policy").value.as_deref(), Some("delete"));
    assert_eq!(entry(&entries, "min.cleanable.dirty.ratio").value.as_deref(), Some("0.5"));
    for bad in [
        ("cleanup.policy", "compacted"),
        ("delete.retention.ms", "-1"),
        ("min.compaction.lag.ms", "later"),
        ("max.compaction.lag.ms", "0"),
    ] {
        assert_eq!(create(&broker, "compacted", &[bad]), Err(RDKafkaErrorCode::InvalidConfig));
    }
    let conflicting = [("min.compaction.lag.ms", "10000"), ("max.compaction.lag.ms", "5000")];
    assert_eq!(create(&broker, "compacted", &conflicting), Err(RDKafkaErrorCode::InvalidConfig));
    assert_eq!(
        create(&broker, "stamped", &[("message.timestamp.type", "Whenever")]),
        Err(RDKafkaErrorCode::InvalidConfig)
    );
}

#[test]
fn max_message_bytes_is_enforced_per_topic_and_a_change_applies_at_once() {
    let broker = Broker::start(1, &[]);
    create(&broker, "small", &[("max.message.bytes", "1000")]).unwrap();
    create(&broker, "roomy", &[]).unwrap();
    let producer = acks_all_producer(&broker);
    let payload = vec![b'x'; 2000];
    let refused = send(&producer, "small", &payload, None).expect_err("over max.message.bytes");
    assert_eq!(
        refused.rdkafka_error_code(),
        Some(RDKafkaErrorCode::MessageSizeTooLarge),
        "{refused}"
    );
    assert_eq!(send(&producer, "roomy", &payload, None).unwrap(), 0);
    assert_eq!(send(&producer, "small", b"fits", None).unwrap(), 0);
    alter(&broker, ResourceSpecifier::Topic("small"), &[("max.message.bytes", "10000")]);
    assert_eq!(send(&producer, "small", &payload, None).unwrap(), 1);
}

/// A topic's max.message.bytes overrides the broker's message.max.bytes upwards too (as in
/// Kafka), up to what a segment and a request frame hold.
#[test]
fn a_topic_max_message_bytes_above_the_broker_default_admits_a_1_mib_record() {
    let broker = Broker::start(1, &[]);
    create(&broker, "large", &[("max.message.bytes", "3145728")]).unwrap();
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", broker.bootstrap())
        .set("acks", "all")
        .set("message.max.bytes", "8000000")
        .create()
        .unwrap();
    let mib: Vec<u8> =
        (0..1u32 << 20).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    assert_eq!(send(&producer, "large", &mib, None).unwrap(), 0);
    let consumer = consumer(&broker, "large");
    let message = consumer.poll(TIMEOUT).expect("the 1 MiB record within 30 s");
    let read = message.expect("read").payload().unwrap().to_vec();
    assert!(read == mib, "1 MiB record read back differs");

    // 4 MiB is over the topic's limit: MESSAGE_TOO_LARGE, with a message naming it.
    let mut client = RawClient::connect(broker.bootstrap().parse().unwrap());
    let four_mib = vec![b'q'; 4 << 20];
    let request = produce_request("large", 0, record_batch(&[(b"k", &four_mib)], now_ms()));
    let ResponseKind::Produce(response) = client.call(ApiKey::Produce, 9, request) else {
        panic!("not a Produce response")
    };
    let partition = &response.responses[0].partition_responses[0];
    assert_eq!(partition.error_code, 10, "MESSAGE_TOO_LARGE");
    let message = partition.error_message.as_ref().map(|m| m.to_string()).unwrap_or_default();
    assert!(message.contains("limit of 3145728 bytes"), "{message}");

    // Above what a segment holds (tests run with 8 MiB segments): refused at creation.
    assert_eq!(
        create(&broker, "huge", &[("max.message.bytes", "9000000")]),
        Err(RDKafkaErrorCode::InvalidConfig)
    );
}

/// Kafka 3.x's smallest segment.bytes (14) is accepted, 13 refused. The value is stored
/// and described, but a shard's one log keeps its `--segment-bytes` segments: records of
/// such topics, many times the topic's segment.bytes, roll no segment of their own.
#[test]
fn a_tiny_segment_bytes_is_accepted_and_stored_and_rolls_no_segment_per_record() {
    let broker = Broker::start(1, &[]);
    assert_eq!(
        create(&broker, "too-tiny", &[("segment.bytes", "13")]),
        Err(RDKafkaErrorCode::InvalidConfig)
    );
    create(&broker, "tiny", &[("segment.bytes", "14")]).unwrap();
    create(&broker, "librdkafka-0129", &[("segment.bytes", "20000")]).unwrap();
    for (topic, value) in [("tiny", "14"), ("librdkafka-0129", "20000")] {
        let described = describe(&broker, topic);
        let segment_bytes = entry(&described, "segment.bytes");
        assert_eq!(segment_bytes.value.as_deref(), Some(value), "{topic}");
        assert_eq!(segment_bytes.source, ConfigSource::DynamicTopic, "{topic}");
    }
    let segments_before = broker.segment_files(0);
    let producer = acks_all_producer(&broker);
    let payload = vec![b's'; 500];
    let count = 100; // 50 KB a topic: 2.5 times 20000, thousands of times 14
    for topic in ["tiny", "librdkafka-0129"] {
        for i in 0..count {
            assert_eq!(send(&producer, topic, &payload, None).unwrap(), i, "{topic}");
        }
        let consumer = consumer(&broker, topic);
        for i in 0..count {
            let message = consumer.poll(TIMEOUT).expect("every record back").expect("no error");
            assert_eq!((message.offset(), message.payload()), (i, Some(&payload[..])));
        }
    }
    assert_eq!(broker.segment_files(0), segments_before, "100 KB in 8 MiB segments");
}

#[test]
fn a_log_append_time_topic_gives_consumers_the_brokers_append_time() {
    let broker = Broker::start(1, &[]);
    create(&broker, "stamped", &[("message.timestamp.type", "LogAppendTime")]).unwrap();
    create(&broker, "created", &[]).unwrap();
    let producer = acks_all_producer(&broker);
    let before = now_ms();
    // The producer claims 1970; the LogAppendTime topic replaces it with the append time.
    send(&producer, "stamped", b"a", Some(1_000)).unwrap();
    send(&producer, "created", b"b", Some(1_000)).unwrap();
    let after = now_ms();
    let first = |topic: &str| {
        let consumer = consumer(&broker, topic);
        let message = consumer.poll(TIMEOUT).expect("a message").expect("no error");
        message.timestamp()
    };
    match first("stamped") {
        Timestamp::LogAppendTime(t) => assert!((before..=after).contains(&t), "{t}"),
        other => panic!("expected LogAppendTime, got {other:?}"),
    }
    assert_eq!(first("created"), Timestamp::CreateTime(1_000));
}

#[test]
fn a_write_caching_topic_produces_and_consumes_every_record_in_order() {
    let broker = Broker::start(2, &[]);
    let configs = [("write.caching", "true"), ("flush.messages", "10"), ("flush.ms", "50")];
    create(&broker, "cached", &configs).unwrap();
    let producer = acks_all_producer(&broker);
    let count = 500;
    let offsets = runtime().block_on(async {
        let mut deliveries = Vec::with_capacity(count);
        for i in 0..count {
            let value = format!("value-{i:04}");
            let record = FutureRecord::<(), _>::to("cached").payload(&value);
            deliveries.push(producer.send_result(record).map_err(|(e, _)| e).unwrap());
        }
        let mut offsets = Vec::with_capacity(count);
        for delivery in deliveries {
            offsets.push(delivery.await.unwrap().map_err(|(e, _)| e).unwrap().offset);
        }
        offsets
    });
    assert_eq!(offsets, (0..count as i64).collect::<Vec<_>>());
    let consumer = consumer(&broker, "cached");
    let mut received = Vec::with_capacity(count);
    while received.len() < count {
        let message = consumer.poll(TIMEOUT).expect("more messages").expect("no error");
        let value = String::from_utf8(message.payload().unwrap().to_vec()).unwrap();
        assert_eq!(value, format!("value-{:04}", message.offset()));
        received.push(message.offset());
    }
    assert_eq!(received, offsets);
}

#[test]
fn altering_retention_ms_takes_effect_without_a_restart() {
    let broker = Broker::start(1, &["--retention-check-interval-ms", "100"]);
    create(&broker, "kept", &[]).unwrap();
    let producer = acks_all_producer(&broker);
    for i in 0..5 {
        send(&producer, "kept", format!("v{i}").as_bytes(), Some(now_ms() - 60_000)).unwrap();
    }
    let consumer = consumer(&broker, "kept");
    let low = || consumer.fetch_watermarks("kept", 0, TIMEOUT).unwrap().0;
    assert_eq!(low(), 0, "a minute old is well within the default seven days");
    alter(&broker, ResourceSpecifier::Topic("kept"), &[("retention.ms", "1000")]);
    common::eventually(Duration::from_secs(20), "retention to move the log start", || low() > 0);
}

// ---- cleanup.policy=compact -------------------------------------------------------------

const COMPACTED: [(&str, &str); 5] = [
    ("cleanup.policy", "compact"),
    ("delete.retention.ms", "1000"),
    ("min.compaction.lag.ms", "10"),
    ("max.compaction.lag.ms", "60000"),
    ("min.cleanable.dirty.ratio", "0.1"),
];

#[test]
fn a_compacted_topics_configs_are_described_and_survive_a_kill_9_restart() {
    let mut broker = Broker::start(2, &[]);
    create(&broker, "changelog", &COMPACTED).unwrap();
    let check = |broker: &Broker| {
        let entries = describe(broker, "changelog");
        for (key, value) in COMPACTED {
            let described = entry(&entries, key);
            assert_eq!(described.value.as_deref(), Some(value), "{key}");
            assert_eq!(described.source, ConfigSource::DynamicTopic, "{key}");
        }
    };
    check(&broker);
    broker.kill_and_restart();
    check(&broker);
    let defaults = describe(&broker, "changelog");
    create(&broker, "plain", &[]).unwrap();
    let plain = describe(&broker, "plain");
    assert_eq!(entry(&plain, "delete.retention.ms").value.as_deref(), Some("86400000"));
    assert_eq!(entry(&plain, "min.cleanable.dirty.ratio").value.as_deref(), Some("0.5"));
    assert_eq!(entry(&defaults, "retention.ms").source, ConfigSource::Default);
}

/// A record batch of (key, value) records; a None key is a null key.
fn keyed_batch(records: &[(Option<&[u8]>, &[u8])]) -> bytes::Bytes {
    use shardlog_benches::load::record_batch::RecordBatchWriter;
    let mut out = Vec::new();
    let mut writer = RecordBatchWriter::new(&mut out, now_ms());
    for (key, value) in records {
        writer.push(*key, value);
    }
    writer.finish();
    bytes::Bytes::from(out)
}

/// Produce v9 of `records` to partition 0: (error code, record_errors, error message).
fn produce_raw(client: &mut RawClient, topic: &str, records: bytes::Bytes) -> ProduceAnswer {
    let ResponseKind::Produce(response) =
        client.call(ApiKey::Produce, 9, produce_request(topic, 0, records))
    else {
        panic!("not a Produce response")
    };
    let partition = &response.responses[0].partition_responses[0];
    let record_errors = partition
        .record_errors
        .iter()
        .map(|e| {
            let message = e.batch_index_error_message.as_ref().map(|m| m.to_string());
            (e.batch_index, message.unwrap_or_default())
        })
        .collect();
    let message = partition.error_message.as_ref().map(|m| m.to_string()).unwrap_or_default();
    ProduceAnswer { code: partition.error_code, record_errors, message }
}

struct ProduceAnswer {
    code: i16,
    record_errors: Vec<(i32, String)>,
    message: String,
}

const INVALID_RECORD: i16 = 87;

#[test]
fn a_compacted_topic_refuses_keyless_records_with_invalid_record_and_writes_nothing() {
    let broker = Broker::start(2, &[]);
    create(&broker, "keyed", &COMPACTED).unwrap();
    let producer = acks_all_producer(&broker);
    assert_eq!(send_keyed(&producer, "keyed", Some(b"k1"), b"v1", None).unwrap(), 0);
    let refused = send(&producer, "keyed", b"no key", None).expect_err("a keyless record");
    assert_eq!(refused.rdkafka_error_code(), Some(RDKafkaErrorCode::InvalidRecord), "{refused}");

    // Through shard 1 (forwarded if shard 0 owns the partition): every keyless record named.
    let mut client = RawClient::connect(broker.shard_addr(1));
    let mixed = keyed_batch(&[(Some(b"a"), b"1"), (None, b"2"), (Some(b"b"), b"3"), (None, b"")]);
    let answer = produce_raw(&mut client, "keyed", mixed);
    assert_eq!(answer.code, INVALID_RECORD);
    let indexes: Vec<i32> = answer.record_errors.iter().map(|(i, _)| *i).collect();
    assert_eq!(indexes, vec![1, 3]);
    for (_, why) in &answer.record_errors {
        assert!(why.contains("without key in topic partition keyed-0"), "{why}");
    }
    assert!(answer.message.contains("2 record errors"), "{}", answer.message);

    // Nothing of the refused batch was written: the next keyed record takes offset 1, and a
    // tombstone (a key with a null value is what a delete is) is accepted.
    let answer = produce_raw(&mut client, "keyed", keyed_batch(&[(Some(b"a"), b"1")]));
    assert_eq!((answer.code, answer.record_errors.len()), (0, 0), "{}", answer.message);
    assert_eq!(send_keyed(&producer, "keyed", Some(b"k1"), b"v2", None).unwrap(), 2);
    let consumer = consumer(&broker, "keyed");
    let (low, high) = consumer.fetch_watermarks("keyed", 0, TIMEOUT).unwrap();
    assert_eq!((low, high), (0, 3));
    for expected in 0..3 {
        let message = consumer.poll(TIMEOUT).expect("a record").expect("no error");
        assert_eq!(message.offset(), expected);
        assert!(message.key().is_some(), "only keyed records were written");
    }

    // A plain topic takes keyless records as before.
    create(&broker, "plain", &[]).unwrap();
    assert_eq!(send(&producer, "plain", b"no key", None).unwrap(), 0);
}

#[test]
fn retention_never_trims_a_compact_only_topic_but_does_trim_compact_delete() {
    let broker = Broker::start(1, &["--retention-check-interval-ms", "100"]);
    create(&broker, "compact-only", &[("cleanup.policy", "compact"), ("retention.ms", "1000")])
        .unwrap();
    let both = [("cleanup.policy", "compact,delete"), ("retention.ms", "1000")];
    create(&broker, "compact-delete", &both).unwrap();
    let producer = acks_all_producer(&broker);
    for topic in ["compact-only", "compact-delete"] {
        for i in 0..5 {
            let key = format!("k{i}");
            let old = Some(now_ms() - 60_000);
            send_keyed(&producer, topic, Some(key.as_bytes()), b"v", old).unwrap();
        }
    }
    let consumer = consumer(&broker, "compact-only");
    let low = |topic: &str| consumer.fetch_watermarks(topic, 0, TIMEOUT).unwrap().0;
    common::eventually(Duration::from_secs(20), "retention of compact,delete", || {
        low("compact-delete") > 0
    });
    // One shard applies retention to all its topics in one pass: this one was passed over.
    assert_eq!(low("compact-only"), 0);
}

// ---- raw IncrementalAlterConfigs -------------------------------------------------------

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

fn op(name: &str, operation: i8, value: Option<&str>) -> AlterableConfig {
    AlterableConfig::default()
        .with_name(s(name))
        .with_config_operation(operation)
        .with_value(value.map(s))
}

const SET: i8 = 0;
const DELETE: i8 = 1;
const APPEND: i8 = 2;

/// IncrementalAlterConfigs v1 on one resource: (error code, message).
fn incremental(
    client: &mut RawClient,
    resource_type: i8,
    name: &str,
    configs: Vec<AlterableConfig>,
    validate_only: bool,
) -> (i16, String) {
    let request = IncrementalAlterConfigsRequest::default()
        .with_validate_only(validate_only)
        .with_resources(vec![AlterConfigsResource::default()
            .with_resource_type(resource_type)
            .with_resource_name(s(name))
            .with_configs(configs)]);
    match client.call(
        ApiKey::IncrementalAlterConfigs,
        1,
        RequestKind::IncrementalAlterConfigs(request),
    ) {
        ResponseKind::IncrementalAlterConfigs(r) => {
            let response = &r.responses[0];
            let message = response.error_message.as_ref().map(|m| m.to_string());
            (response.error_code, message.unwrap_or_default())
        }
        other => panic!("{other:?}"),
    }
}

/// DescribeConfigs v4 of one topic key: (value, source, documentation).
fn described(client: &mut RawClient, topic: &str, key: &str) -> (String, i8, Option<String>) {
    let request = DescribeConfigsRequest::default()
        .with_include_synonyms(true)
        .with_include_documentation(true)
        .with_resources(vec![DescribeConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(s(topic))
            .with_configuration_keys(Some(vec![s(key)]))]);
    match client.call(ApiKey::DescribeConfigs, 4, RequestKind::DescribeConfigs(request)) {
        ResponseKind::DescribeConfigs(r) => {
            let config = &r.results[0].configs[0];
            (
                config.value.as_ref().unwrap().to_string(),
                config.config_source,
                config.documentation.as_ref().map(|d| d.to_string()),
            )
        }
        other => panic!("{other:?}"),
    }
}

const TOPIC: i8 = 2;
const BROKER: i8 = 4;
const DYNAMIC_TOPIC_CONFIG: i8 = 1;
const DEFAULT_CONFIG: i8 = 5;
const INVALID_CONFIG: i16 = 40;
const INVALID_REQUEST: i16 = 42;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;

#[test]
fn incremental_alter_configs_sets_deletes_appends_and_validates_through_shard_1() {
    let broker = Broker::start(2, &[]);
    create(&broker, "inc", &[]).unwrap();
    // Shard 1 is not the controller: every change crosses the mesh to shard 0.
    let mut client = RawClient::connect(broker.shard_addr(1));

    let set = || vec![op("retention.ms", SET, Some("120000"))];
    assert_eq!(incremental(&mut client, TOPIC, "inc", set(), true), (0, String::new()));
    assert_eq!(described(&mut client, "inc", "retention.ms").1, DEFAULT_CONFIG, "validate_only");
    assert_eq!(incremental(&mut client, TOPIC, "inc", set(), false).0, 0);
    let (value, source, doc) = described(&mut client, "inc", "retention.ms");
    assert_eq!((value.as_str(), source), ("120000", DYNAMIC_TOPIC_CONFIG));
    assert!(doc.is_some_and(|d| !d.is_empty()), "include_documentation gives a doc line");

    let (code, message) =
        incremental(&mut client, TOPIC, "inc", vec![op("retention.ms", APPEND, Some("1"))], false);
    assert_eq!(code, INVALID_CONFIG);
    assert!(message.contains("retention.ms") && message.contains("list"), "{message}");
    let appended = vec![op("cleanup.policy", APPEND, Some("delete"))];
    assert_eq!(incremental(&mut client, TOPIC, "inc", appended, false).0, 0);
    // librdkafka's test 0011 makes its topic compacted this way.
    let compact = vec![op("cleanup.policy", APPEND, Some("compact"))];
    assert_eq!(incremental(&mut client, TOPIC, "inc", compact, false).0, 0);
    let (value, source, _) = described(&mut client, "inc", "cleanup.policy");
    assert_eq!((value.as_str(), source), ("delete,compact", DYNAMIC_TOPIC_CONFIG));
    let (code, message) = incremental(
        &mut client,
        TOPIC,
        "inc",
        vec![op("cleanup.policy", APPEND, Some("tidy"))],
        false,
    );
    assert_eq!(code, INVALID_CONFIG);
    assert!(message.contains("not a cleanup policy"), "{message}");

    let deleted = vec![op("retention.ms", DELETE, None)];
    assert_eq!(incremental(&mut client, TOPIC, "inc", deleted, false).0, 0);
    let (value, source, _) = described(&mut client, "inc", "retention.ms");
    assert_eq!((value.as_str(), source), ("604800000", DEFAULT_CONFIG));

    let unknown_op = vec![op("retention.ms", 9, Some("1"))];
    assert_eq!(incremental(&mut client, TOPIC, "inc", unknown_op, false).0, INVALID_REQUEST);
    let (code, message) = incremental(&mut client, BROKER, "0", set(), false);
    assert_eq!(code, INVALID_REQUEST);
    assert!(message.contains("dynamic broker configs are not supported"), "{message}");
    assert_eq!(incremental(&mut client, TOPIC, "nope", set(), false).0, UNKNOWN_TOPIC_OR_PARTITION);
}

/// AlterConfigs v2 on one resource: (error code, message).
fn alter_raw(
    client: &mut RawClient,
    resource_type: i8,
    name: &str,
    configs: &[(&str, &str)],
    validate_only: bool,
) -> (i16, String) {
    use kafka_protocol::messages::alter_configs_request as request;
    let configs = configs
        .iter()
        .map(|(k, v)| request::AlterableConfig::default().with_name(s(k)).with_value(Some(s(v))))
        .collect();
    let body = request::AlterConfigsRequest::default()
        .with_validate_only(validate_only)
        .with_resources(vec![request::AlterConfigsResource::default()
            .with_resource_type(resource_type)
            .with_resource_name(s(name))
            .with_configs(configs)]);
    match client.call(ApiKey::AlterConfigs, 2, RequestKind::AlterConfigs(body)) {
        ResponseKind::AlterConfigs(r) => {
            let response = &r.responses[0];
            let message = response.error_message.as_ref().map(|m| m.to_string());
            (response.error_code, message.unwrap_or_default())
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn alter_configs_answers_invalid_config_unknown_topic_and_invalid_request() {
    let broker = Broker::start(1, &[]);
    create(&broker, "raw", &[]).unwrap();
    let mut client = RawClient::connect(broker.shard_addr(0));
    let (code, message) = alter_raw(&mut client, TOPIC, "raw", &[("retention.ms", "soon")], false);
    assert_eq!(code, INVALID_CONFIG);
    assert!(message.contains("retention.ms"), "{message}");
    let (code, message) =
        alter_raw(&mut client, TOPIC, "raw", &[("min.cleanable.dirty.ratio", "1.5")], false);
    assert_eq!(code, INVALID_CONFIG);
    assert!(message.contains("min.cleanable.dirty.ratio"), "{message}");
    let (code, message) = alter_raw(&mut client, TOPIC, "raw", &[("no.such.key", "1")], false);
    assert_eq!(code, INVALID_CONFIG);
    assert!(message.contains("no.such.key"), "{message}");
    let missing = alter_raw(&mut client, TOPIC, "missing", &[("retention.ms", "1")], false);
    assert_eq!(missing.0, UNKNOWN_TOPIC_OR_PARTITION);
    let (code, message) = alter_raw(&mut client, BROKER, "0", &[("num.partitions", "3")], false);
    assert_eq!(code, INVALID_REQUEST);
    assert!(message.contains("dynamic broker configs are not supported"), "{message}");
    assert_eq!(alter_raw(&mut client, TOPIC, "raw", &[("retention.ms", "1")], true).0, 0);
    assert_eq!(described(&mut client, "raw", "retention.ms").1, DEFAULT_CONFIG, "validate_only");
    assert_eq!(alter_raw(&mut client, TOPIC, "raw", &[("retention.ms", "1")], false).0, 0);
    assert_eq!(described(&mut client, "raw", "retention.ms").0, "1");
}

#[test]
fn produce_to_a_log_append_time_topic_answers_with_the_append_time() {
    let broker = Broker::start(1, &[]);
    create(&broker, "appended", &[("message.timestamp.type", "LogAppendTime")]).unwrap();
    create(&broker, "plain", &[]).unwrap();
    let mut client = RawClient::connect(broker.shard_addr(0));
    let mut log_append_time = |topic: &str| {
        let request = ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(10_000)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(TopicName(s(topic)))
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(0)
                    .with_records(Some(record_batch(&[(b"k", b"v")], 1_000)))])]);
        match client.call(ApiKey::Produce, 9, RequestKind::Produce(request)) {
            ResponseKind::Produce(r) => {
                let partition = &r.responses[0].partition_responses[0];
                assert_eq!(partition.error_code, 0);
                partition.log_append_time_ms
            }
            other => panic!("{other:?}"),
        }
    };
    let before = now_ms();
    let stamped = log_append_time("appended");
    assert!((before..=now_ms()).contains(&stamped), "{stamped}");
    assert_eq!(log_append_time("plain"), -1);
}

/// min.insync.replicas: an acks=all produce to a partition with fewer in-sync replicas
/// (one, for a topic of one replica) is refused with NOT_ENOUGH_REPLICAS (19) and a message
/// naming both counts, nothing stored; acks=1 is not affected; 0 is INVALID_CONFIG. (The
/// ISR of a replicated partition: tests/partition_groups.rs.)
#[test]
fn min_insync_replicas_refuses_acks_all_below_it_and_not_acks_1() {
    let broker = Broker::start(1, &[]);
    create(&broker, "insync", &[("min.insync.replicas", "2")]).unwrap();
    let refused = create(&broker, "zero", &[("min.insync.replicas", "0")]);
    assert_eq!(refused, Err(RDKafkaErrorCode::InvalidConfig));
    assert_eq!(
        entry(&describe(&broker, "insync"), "min.insync.replicas").value.as_deref(),
        Some("2")
    );

    let mut client = RawClient::connect(broker.bootstrap().parse().unwrap());
    let batch = || record_batch(&[(b"k", b"v")], now_ms());
    let (code, _) = common::raw_produce_acks(&mut client, "insync", 0, batch(), -1);
    assert_eq!(code, 19, "acks=all with 1 in-sync replica of 2 required");
    let (code, offset) = common::raw_produce_acks(&mut client, "insync", 0, batch(), 1);
    assert_eq!((code, offset), (0, 0), "acks=1 is not affected, and nothing was stored before");
}
