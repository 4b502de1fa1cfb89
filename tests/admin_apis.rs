//! Admin APIs: CreatePartitions and DeleteRecords through librdkafka's AdminClient (and
//! raw requests for what it cannot send), DescribeCluster and DescribeLogDirs raw.

mod common;

use std::time::Duration;

use common::{
    acks_all_producer, admin_client, assign_only_consumer as consumer, create_topic, leaders,
    raw_produce, record_batch, runtime, topic_name, Broker, RawClient,
};
use kafka_protocol::messages::create_partitions_request::{
    CreatePartitionsAssignment, CreatePartitionsRequest, CreatePartitionsTopic,
};
use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::delete_records_request::{
    DeleteRecordsPartition, DeleteRecordsRequest, DeleteRecordsTopic,
};
use kafka_protocol::messages::delete_records_response::DeleteRecordsPartitionResult;
use kafka_protocol::messages::describe_cluster_request::DescribeClusterRequest;
use kafka_protocol::messages::describe_cluster_response::DescribeClusterResponse;
use kafka_protocol::messages::describe_log_dirs_request::{
    DescribableLogDirTopic, DescribeLogDirsRequest,
};
use kafka_protocol::messages::describe_log_dirs_response::DescribeLogDirsResult;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchRequest, FetchTopic};
use kafka_protocol::messages::{ApiKey, BrokerId, RequestKind, ResponseKind};
use rdkafka::admin::{AdminOptions, NewPartitions, NewTopic, TopicReplication};
use rdkafka::consumer::Consumer;
use rdkafka::message::Message;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};

const TIMEOUT: Duration = Duration::from_secs(30);
const OFFSET_OUT_OF_RANGE: i16 = 1;
const INVALID_PARTITIONS: i16 = 37;
const INVALID_REPLICA_ASSIGNMENT: i16 = 39;
const INVALID_REQUEST: i16 = 42;
const UNSUPPORTED_ENDPOINT_TYPE: i16 = 115;

/// Sends `value` to an explicit partition; its offset.
fn produce_to(producer: &FutureProducer, topic: &str, partition: i32, value: &str) -> i64 {
    let record = FutureRecord::<(), _>::to(topic).partition(partition).payload(value);
    let delivered = runtime().block_on(producer.send(record, TIMEOUT));
    let delivery =
        delivered.unwrap_or_else(|(e, _)| panic!("delivery to partition {partition}: {e}"));
    assert_eq!(delivery.partition, partition);
    delivery.offset
}

/// Reads `expected` messages from the start of the given partitions: (partition, offset,
/// value) in arrival order.
fn consume(
    broker: &Broker,
    topic: &str,
    partitions: &[i32],
    expected: usize,
) -> Vec<(i32, i64, String)> {
    let consumer = consumer(broker);
    let mut assignment = TopicPartitionList::new();
    for p in partitions {
        assignment.add_partition_offset(topic, *p, Offset::Beginning).unwrap();
    }
    consumer.assign(&assignment).unwrap();
    let mut out = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while out.len() < expected {
        assert!(std::time::Instant::now() < deadline, "consumed only {out:?}");
        if let Some(message) = consumer.poll(Duration::from_millis(500)) {
            let message = message.expect("consume error");
            let value = String::from_utf8(message.payload().unwrap().to_vec()).unwrap();
            out.push((message.partition(), message.offset(), value));
        }
    }
    out.sort();
    out
}

fn partition_count(broker: &Broker, topic: &str) -> usize {
    let metadata = consumer(broker).fetch_metadata(Some(topic), TIMEOUT).unwrap();
    metadata.topics()[0].partitions().len()
}

fn grow(
    broker: &Broker,
    topic: &str,
    count: usize,
    validate_only: bool,
) -> Result<(), RDKafkaErrorCode> {
    let options = AdminOptions::new().validate_only(validate_only);
    let request = NewPartitions::new(topic, count);
    let results = runtime().block_on(admin_client(broker).create_partitions([&request], &options));
    results.unwrap().pop().unwrap().map(|_| ()).map_err(|(_, code)| code)
}

#[test]
fn new_partitions_take_produce_and_fetch_and_survive_kill_9() {
    let mut broker = Broker::start(2, &[]);
    create_topic(&broker, "grow", 1);
    assert_eq!(produce_to(&acks_all_producer(&broker), "grow", 0, "before"), 0);
    assert_eq!(grow(&broker, "grow", 3, false), Ok(()));
    assert_eq!(partition_count(&broker, "grow"), 3, "answered only once every shard has them");
    // A client that refreshes metadata (here: a new one) sees and uses them.
    let producer = acks_all_producer(&broker);
    assert_eq!(produce_to(&producer, "grow", 1, "new-1"), 0);
    assert_eq!(produce_to(&producer, "grow", 2, "new-2"), 0);
    let expected = vec![
        (0, 0, "before".to_string()),
        (1, 0, "new-1".to_string()),
        (2, 0, "new-2".to_string()),
    ];
    assert_eq!(consume(&broker, "grow", &[0, 1, 2], 3), expected, "old data untouched");
    broker.kill_and_restart();
    assert_eq!(partition_count(&broker, "grow"), 3, "the grown table survives kill -9");
    assert_eq!(consume(&broker, "grow", &[0, 1, 2], 3), expected);
    assert_eq!(produce_to(&producer, "grow", 2, "after"), 1, "the same producer goes on");
}

#[test]
fn create_partitions_refuses_bad_requests_with_kafka_error_codes() {
    let broker = Broker::start(2, &[]);
    create_topic(&broker, "fixed", 2);
    assert_eq!(grow(&broker, "fixed", 2, false), Err(RDKafkaErrorCode::InvalidPartitions));
    assert_eq!(grow(&broker, "fixed", 1, false), Err(RDKafkaErrorCode::InvalidPartitions));
    assert_eq!(grow(&broker, "missing", 4, false), Err(RDKafkaErrorCode::UnknownTopicOrPartition));
    assert_eq!(grow(&broker, "fixed", 4, true), Ok(()), "validate_only accepts");
    assert_eq!(partition_count(&broker, "fixed"), 2, "validate_only changes nothing");

    // What librdkafka cannot send: duplicates, explicit assignments; and the message.
    let mut client = RawClient::connect(broker.shard_addr(1));
    let results = create_partitions_raw(&mut client, &[("fixed", 3, None), ("fixed", 4, None)]);
    assert_eq!(codes(&results), vec![INVALID_REQUEST, INVALID_REQUEST]);
    let results = create_partitions_raw(&mut client, &[("fixed", 1, None)]);
    assert_eq!(results[0].error_code, INVALID_PARTITIONS);
    let message = results[0].error_message.as_ref().unwrap().to_string();
    assert!(message.contains("has 2 partitions"), "{message}");
    let bad = [
        ("fixed", 3, Some(vec![vec![2]])),
        ("fixed", 3, Some(vec![vec![0, 1]])),
        ("fixed", 4, Some(vec![vec![0]])),
    ];
    for request in bad {
        let results = create_partitions_raw(&mut client, std::slice::from_ref(&request));
        assert_eq!(codes(&results), vec![INVALID_REPLICA_ASSIGNMENT], "{request:?}");
    }
    assert_eq!(partition_count(&broker, "fixed"), 2, "refusals change nothing");
    // An assignment that names one shard is honoured.
    let results = create_partitions_raw(&mut client, &[("fixed", 4, Some(vec![vec![1], vec![1]]))]);
    assert_eq!(codes(&results), vec![0]);
    let leaders = leaders(&mut client, "fixed");
    assert_eq!(leaders.len(), 4);
    assert_eq!(leaders[2..], [1, 1], "placed where asked");
}

type Grow<'a> = (&'a str, i32, Option<Vec<Vec<i32>>>);

fn create_partitions_raw(
    client: &mut RawClient,
    topics: &[Grow],
) -> Vec<CreatePartitionsTopicResult> {
    let topics = topics
        .iter()
        .map(|(topic, count, assignments)| {
            let assignments = assignments.as_ref().map(|a| {
                a.iter()
                    .map(|brokers| {
                        CreatePartitionsAssignment::default()
                            .with_broker_ids(brokers.iter().map(|b| BrokerId(*b)).collect())
                    })
                    .collect()
            });
            CreatePartitionsTopic::default()
                .with_name(topic_name(topic))
                .with_count(*count)
                .with_assignments(assignments)
        })
        .collect();
    let request = CreatePartitionsRequest::default().with_timeout_ms(10_000).with_topics(topics);
    match client.call(ApiKey::CreatePartitions, 3, RequestKind::CreatePartitions(request)) {
        ResponseKind::CreatePartitions(r) => r.results,
        other => panic!("{other:?}"),
    }
}

fn codes(results: &[CreatePartitionsTopicResult]) -> Vec<i16> {
    results.iter().map(|r| r.error_code).collect()
}

/// librdkafka's DeleteRecords: the low watermark, or the partition's error.
fn delete_records(broker: &Broker, topic: &str, offset: Offset) -> Result<i64, RDKafkaErrorCode> {
    let mut offsets = TopicPartitionList::new();
    offsets.add_partition_offset(topic, 0, offset).unwrap();
    let options = AdminOptions::new().operation_timeout(Some(TIMEOUT));
    let result =
        runtime().block_on(admin_client(broker).delete_records(&offsets, &options)).unwrap();
    let element = result.find_partition(topic, 0).unwrap();
    match element.error() {
        Ok(()) => Ok(element.offset().to_raw().unwrap()),
        Err(rdkafka::error::KafkaError::OffsetFetch(code)) => Err(code),
        Err(other) => panic!("{other:?}"),
    }
}

/// (error code, log start offset, high watermark, first batch's base offset) of a raw fetch.
fn fetch(client: &mut RawClient, topic: &str, offset: i64) -> (i16, i64, i64, Option<i64>) {
    let request = FetchRequest::default()
        .with_max_wait_ms(0)
        .with_max_bytes(1 << 20)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default().with_topic(topic_name(topic)).with_partitions(
            vec![FetchPartition::default()
                .with_fetch_offset(offset)
                .with_partition_max_bytes(1 << 20)],
        )]);
    match client.call(ApiKey::Fetch, 11, RequestKind::Fetch(request)) {
        ResponseKind::Fetch(r) => {
            let p = &r.responses[0].partitions[0];
            let records = p.records.clone().unwrap_or_default();
            let base =
                (records.len() >= 8).then(|| i64::from_be_bytes(records[..8].try_into().unwrap()));
            (p.error_code, p.log_start_offset, p.high_watermark, base)
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn delete_records_moves_the_log_start_durably_through_kill_9_and_checkpoints() {
    let args = ["--checkpoint-interval-ms", "100", "--retention-check-interval-ms", "100"];
    let mut broker = Broker::start(2, &args);
    create_topic(&broker, "trim", 1);
    let owner = leaders(&mut RawClient::connect(broker.shard_addr(0)), "trim")[0] as usize;
    let mut client = RawClient::connect(broker.shard_addr(owner));
    // Two batches of five records: offsets [0..=4] and [5..=9], stamped now (retention
    // runs every 100 ms and would drop old timestamps).
    for first in [0, 5] {
        let values: Vec<(&[u8], &[u8])> = vec![(b"k", b"value"); 5];
        let batch = record_batch(&values, now_ms());
        assert_eq!(raw_produce(&mut client, "trim", 0, batch), (0, first));
    }
    // Offset 3 lies inside the first batch.
    assert_eq!(delete_records(&broker, "trim", Offset::Offset(3)), Ok(3));
    let watermarks = consumer(&broker).fetch_watermarks("trim", 0, TIMEOUT).unwrap();
    assert_eq!(watermarks, (3, 10), "ListOffsets earliest is the new log start");
    assert_eq!(fetch(&mut client, "trim", 2).0, OFFSET_OUT_OF_RANGE, "below the log start");
    assert_eq!(fetch(&mut client, "trim", 3), (0, 3, 10, Some(0)), "the batch comes back whole");
    let first = consume(&broker, "trim", &[0], 1);
    assert_eq!(first[0].1, 3, "a consumer from the beginning starts at the log start");
    let refused = delete_records(&broker, "trim", Offset::Offset(11));
    assert_eq!(refused, Err(RDKafkaErrorCode::OffsetOutOfRange), "past the high watermark");
    assert_eq!(delete_records(&broker, "trim", Offset::Offset(2)), Ok(3), "never backward");

    wait_for_a_checkpoint_after_now(&broker, owner, &mut client, "trim");
    broker.kill_and_restart();
    let watermarks = consumer(&broker).fetch_watermarks("trim", 0, TIMEOUT).unwrap();
    assert_eq!(watermarks, (3, 12), "the log start survives kill -9 and a checkpoint");
    let mut client = RawClient::connect(broker.shard_addr(owner));
    assert_eq!(fetch(&mut client, "trim", 2).0, OFFSET_OUT_OF_RANGE);
    assert_eq!(fetch(&mut client, "trim", 3), (0, 3, 12, Some(0)));
    // -1 deletes up to the high watermark; kill -9 right after the answer.
    assert_eq!(delete_records(&broker, "trim", Offset::End), Ok(12));
    broker.kill_and_restart();
    let watermarks = consumer(&broker).fetch_watermarks("trim", 0, TIMEOUT).unwrap();
    assert_eq!(watermarks, (12, 12));
}

#[test]
fn delete_records_on_a_compact_only_topic_is_a_policy_violation_and_deletes_nothing() {
    let broker = Broker::start(2, &[]);
    let admin = admin_client(&broker);
    let topics = [
        NewTopic::new("compacted", 1, TopicReplication::Fixed(1)).set("cleanup.policy", "compact"),
        NewTopic::new("both", 1, TopicReplication::Fixed(1))
            .set("cleanup.policy", "compact,delete"),
    ];
    let created = runtime().block_on(admin.create_topics(&topics, &AdminOptions::new())).unwrap();
    assert!(created.iter().all(Result::is_ok), "{created:?}");
    for topic in ["compacted", "both"] {
        let owner = leaders(&mut RawClient::connect(broker.shard_addr(0)), topic)[0] as usize;
        let mut client = RawClient::connect(broker.shard_addr(owner));
        let batch = record_batch(&[(b"k", b"v1"), (b"k", b"v2")], now_ms());
        assert_eq!(raw_produce(&mut client, topic, 0, batch), (0, 0));
    }
    let refused = delete_records(&broker, "compacted", Offset::Offset(1));
    assert_eq!(refused, Err(RDKafkaErrorCode::PolicyViolation));
    let watermarks = consumer(&broker).fetch_watermarks("compacted", 0, TIMEOUT).unwrap();
    assert_eq!(watermarks, (0, 2), "nothing deleted");
    // With delete listed too, DeleteRecords works as on any topic.
    assert_eq!(delete_records(&broker, "both", Offset::Offset(1)), Ok(1));
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}

/// Log positions of the checkpoint files of one shard.
fn checkpoint_positions(broker: &Broker, shard: usize) -> Vec<u64> {
    let dir = broker.data_dir().join(format!("shard-{shard:03}"));
    let names = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name());
    let names: Vec<String> = names.map(|n| n.to_string_lossy().into_owned()).collect();
    names.iter().filter_map(|n| n.strip_suffix(".ckpt")?.parse().ok()).collect()
}

/// Waits until a checkpoint that started after this call has been written: two new ones
/// in turn (the first may have started earlier), each after a produce gave it new data.
fn wait_for_a_checkpoint_after_now(
    broker: &Broker,
    shard: usize,
    client: &mut RawClient,
    topic: &str,
) {
    for round in 0..2 {
        let seen = checkpoint_positions(broker, shard).into_iter().max().unwrap_or(0);
        let batch = record_batch(&[(b"k", b"more")], now_ms() + round);
        assert_eq!(raw_produce(client, topic, 0, batch).0, 0);
        common::eventually(TIMEOUT, "a new checkpoint", || {
            checkpoint_positions(broker, shard).into_iter().max().unwrap_or(0) > seen
        });
    }
}

#[test]
fn delete_records_sent_to_the_wrong_shard_is_forwarded_and_bad_offsets_are_refused() {
    let broker = Broker::start(2, &[]);
    let mut client = RawClient::connect(broker.shard_addr(0));
    create_topic(&broker, "fwd", 1);
    let owner = leaders(&mut client, "fwd")[0] as usize;
    let mut owner_client = RawClient::connect(broker.shard_addr(owner));
    for i in 0..3 {
        let (code, _) = raw_produce(&mut owner_client, "fwd", 0, record_batch(&[(b"k", b"v")], i));
        assert_eq!(code, 0);
    }
    let mut other = RawClient::connect(broker.shard_addr(1 - owner));
    let answer = |client: &mut RawClient, offset| delete_records_raw(client, "fwd", offset);
    assert_eq!(answer(&mut other, 2), (0, 2), "forwarded to the owner");
    assert_eq!(answer(&mut other, 4).0, OFFSET_OUT_OF_RANGE, "past the high watermark");
    assert_eq!(answer(&mut owner_client, -2).0, OFFSET_OUT_OF_RANGE, "negative, not -1");
    assert_eq!(answer(&mut owner_client, 3), (0, 3), "up to the high watermark");
    assert_eq!(delete_records_raw(&mut other, "nope", 0).0, 3, "UNKNOWN_TOPIC_OR_PARTITION");
}

/// (error code, low watermark) of a raw DeleteRecords v2 on partition 0.
fn delete_records_raw(client: &mut RawClient, topic: &str, offset: i64) -> (i16, i64) {
    let request = DeleteRecordsRequest::default().with_timeout_ms(10_000).with_topics(vec![
        DeleteRecordsTopic::default()
            .with_name(topic_name(topic))
            .with_partitions(vec![DeleteRecordsPartition::default().with_offset(offset)]),
    ]);
    match client.call(ApiKey::DeleteRecords, 2, RequestKind::DeleteRecords(request)) {
        ResponseKind::DeleteRecords(r) => {
            let p: &DeleteRecordsPartitionResult = &r.topics[0].partitions[0];
            (p.error_code, p.low_watermark)
        }
        other => panic!("{other:?}"),
    }
}

fn describe_cluster(
    client: &mut RawClient,
    version: i16,
    endpoint_type: i8,
) -> DescribeClusterResponse {
    let request = DescribeClusterRequest::default().with_endpoint_type(endpoint_type);
    match client.call(ApiKey::DescribeCluster, version, RequestKind::DescribeCluster(request)) {
        ResponseKind::DescribeCluster(r) => r,
        other => panic!("{other:?}"),
    }
}

#[test]
fn describe_cluster_lists_every_shard_as_a_broker_with_its_metadata_address() {
    let broker = Broker::start(2, &[]);
    let mut client = RawClient::connect(broker.bootstrap().parse().unwrap());
    for version in [0, 1] {
        let response = describe_cluster(&mut client, version, 1);
        assert_eq!(response.error_code, 0);
        assert_eq!(response.cluster_id.as_str(), "shardlog-single-node");
        assert_eq!(response.controller_id, BrokerId(0));
        let brokers: Vec<(i32, String, i32)> =
            response.brokers.iter().map(|b| (b.broker_id.0, b.host.to_string(), b.port)).collect();
        let expected: Vec<(i32, String, i32)> = (0..2)
            .map(|s| (s as i32, "127.0.0.1".to_string(), broker.shard_addr(s).port() as i32))
            .collect();
        assert_eq!(brokers, expected);
        assert_eq!(response.cluster_authorized_operations, i32::MIN);
    }
    let controllers = describe_cluster(&mut client, 1, 2);
    assert_eq!(controllers.error_code, UNSUPPORTED_ENDPOINT_TYPE);
    assert!(controllers.brokers.is_empty());
}

fn describe_log_dirs(
    client: &mut RawClient,
    version: i16,
    topics: Option<Vec<DescribableLogDirTopic>>,
) -> DescribeLogDirsResult {
    let request = DescribeLogDirsRequest::default().with_topics(topics);
    match client.call(ApiKey::DescribeLogDirs, version, RequestKind::DescribeLogDirs(request)) {
        ResponseKind::DescribeLogDirs(mut r) => {
            assert_eq!(r.error_code, 0);
            assert_eq!(r.results.len(), 1, "one log dir per shard");
            r.results.pop().unwrap()
        }
        other => panic!("{other:?}"),
    }
}

/// (partition, size) of `topic` in a DescribeLogDirs result.
fn sizes(result: &DescribeLogDirsResult, topic: &str) -> Vec<(i32, i64)> {
    result
        .topics
        .iter()
        .filter(|t| t.name.0.as_str() == topic)
        .flat_map(|t| t.partitions.iter().map(|p| (p.partition_index, p.partition_size)))
        .collect()
}

#[test]
fn describe_log_dirs_reports_each_shards_partitions_and_their_sizes_grow() {
    let broker = Broker::start(2, &[]);
    let mut client = RawClient::connect(broker.shard_addr(0));
    create_topic(&broker, "dirs", 4);
    let leaders = leaders(&mut client, "dirs");
    let mine: Vec<i32> = (0..4).filter(|p| leaders[*p as usize] == 0).collect();
    assert!(!mine.is_empty());

    let result = describe_log_dirs(&mut client, 4, None);
    assert_eq!(result.error_code, 0);
    assert_eq!(result.log_dir.as_str(), broker.data_dir().join("shard-000").to_str().unwrap());
    assert_eq!(sizes(&result, "dirs"), mine.iter().map(|p| (*p, 0)).collect::<Vec<_>>());
    assert!(result.total_bytes > 0 && result.usable_bytes > 0, "{result:?}");
    assert!(result.usable_bytes <= result.total_bytes);
    assert!(result
        .topics
        .iter()
        .flat_map(|t| &t.partitions)
        .all(|p| p.offset_lag == 0 && !p.is_future_key));

    // Produce to one of shard 0's partitions: its size grows by exactly the batch bytes.
    let partition = mine[0];
    let batch = record_batch(&[(b"key", &[7u8; 300][..])], 1);
    assert_eq!(raw_produce(&mut client, "dirs", partition, batch.clone()), (0, 0));
    let wanted = vec![DescribableLogDirTopic::default()
        .with_topic(topic_name("dirs"))
        .with_partitions(vec![partition])];
    let result = describe_log_dirs(&mut client, 1, Some(wanted.clone()));
    let expected = vec![(partition, batch.len() as i64)];
    assert_eq!(sizes(&result, "dirs"), expected, "only what was asked, one batch of bytes");
    assert_eq!(result.topics.len(), 1);
    assert_eq!(result.total_bytes, -1, "v1 has no disk figures");
    assert_eq!(raw_produce(&mut client, "dirs", partition, batch.clone()), (0, 1));
    let result = describe_log_dirs(&mut client, 4, Some(wanted));
    assert_eq!(sizes(&result, "dirs"), vec![(partition, 2 * batch.len() as i64)]);
    // Shard 1 answers for its own partitions only.
    let other = describe_log_dirs(&mut RawClient::connect(broker.shard_addr(1)), 4, None);
    assert!(other.log_dir.as_str().ends_with("shard-001"));
    let theirs: Vec<i32> = sizes(&other, "dirs").iter().map(|(p, _)| *p).collect();
    assert_eq!(theirs, (0..4).filter(|p| leaders[*p as usize] == 1).collect::<Vec<_>>());
}
