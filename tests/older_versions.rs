//! The version-specific fields of the request versions Kafka 3.9 serves and 4.0 dropped
//! (issue 20): each test states what an old client relies on, over raw requests.

mod common;

use bytes::Bytes;
use common::{raw_produce, record_batch, topic_name, Broker, RawClient};
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreateTopicsRequest};
use kafka_protocol::messages::describe_configs_request::{
    DescribeConfigsRequest, DescribeConfigsResource,
};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchRequest, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{
    ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic,
};
use kafka_protocol::messages::list_offsets_response::ListOffsetsPartitionResponse;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequest, OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::{OffsetFetchRequest, OffsetFetchRequestTopic};
use kafka_protocol::messages::produce_request::{
    PartitionProduceData, ProduceRequest, TopicProduceData,
};
use kafka_protocol::messages::{ApiKey, GroupId, RequestKind, ResponseKind};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{Record, RecordBatchDecoder};
use shardlog_net::legacy_format::{
    self, encode_message_set, read_message_set, Codec, LegacyMessage,
};
use uuid::Uuid;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// Creates `name` (one partition) and returns its topic id.
fn create_topic(client: &mut RawClient, name: &str) -> Uuid {
    let request = CreateTopicsRequest::default().with_topics(vec![CreatableTopic::default()
        .with_name(topic_name(name))
        .with_num_partitions(1)
        .with_replication_factor(1)]);
    match client.call(ApiKey::CreateTopics, 7, RequestKind::CreateTopics(request)) {
        ResponseKind::CreateTopics(r) => {
            assert_eq!(r.topics[0].error_code, 0, "{r:?}");
            r.topics[0].topic_id
        }
        other => panic!("{other:?}"),
    }
}

fn commit(
    client: &mut RawClient,
    version: i16,
    group: &str,
    partition: OffsetCommitRequestPartition,
) {
    let request =
        OffsetCommitRequest::default().with_group_id(GroupId(s(group))).with_topics(vec![
            OffsetCommitRequestTopic::default()
                .with_name(topic_name("t"))
                .with_partitions(vec![partition]),
        ]);
    match client.call(ApiKey::OffsetCommit, version, RequestKind::OffsetCommit(request)) {
        ResponseKind::OffsetCommit(r) => {
            assert_eq!(r.topics[0].partitions[0].error_code, 0, "OffsetCommit v{version}: {r:?}")
        }
        other => panic!("{other:?}"),
    }
}

fn committed(client: &mut RawClient, version: i16, group: &str) -> (i64, Option<String>) {
    let request =
        OffsetFetchRequest::default().with_group_id(GroupId(s(group))).with_topics(Some(vec![
            OffsetFetchRequestTopic::default()
                .with_name(topic_name("t"))
                .with_partition_indexes(vec![0]),
        ]));
    match client.call(ApiKey::OffsetFetch, version, RequestKind::OffsetFetch(request)) {
        ResponseKind::OffsetFetch(r) => {
            let p = &r.topics[0].partitions[0];
            assert_eq!(p.error_code, 0, "OffsetFetch v{version}: {r:?}");
            (p.committed_offset, p.metadata.as_ref().map(|m| m.to_string()))
        }
        other => panic!("{other:?}"),
    }
}

/// sarama 1.22 commits with OffsetCommit v1 whatever Kafka version it is configured for;
/// before issue 20 the broker closed the connection and the group never committed.
#[test]
fn offset_commit_v0_and_v1_are_stored_and_read_back_by_offset_fetch_v0() {
    let broker = Broker::start(1, &[]);
    let mut client = RawClient::connect(broker.shard_addr(0));
    create_topic(&mut client, "t");
    let partition = |offset: i64, metadata: &str| {
        OffsetCommitRequestPartition::default()
            .with_committed_offset(offset)
            .with_committed_metadata(Some(s(metadata)))
    };
    commit(&mut client, 0, "g0", partition(3, "from v0"));
    // v1: a standalone consumer (generation -1, no member) states its commit time.
    commit(&mut client, 1, "g1", partition(7, "from v1").with_commit_timestamp(1_000));
    commit(&mut client, 2, "g2", partition(9, "from v2"));
    for version in [0, 1, 7] {
        assert_eq!(committed(&mut client, version, "g0"), (3, Some("from v0".into())));
        assert_eq!(committed(&mut client, version, "g1"), (7, Some("from v1".into())));
        assert_eq!(committed(&mut client, version, "g2"), (9, Some("from v2".into())));
    }
}

fn list_offset(
    client: &mut RawClient,
    version: i16,
    topic: &str,
    partition: ListOffsetsPartition,
) -> ListOffsetsPartitionResponse {
    let request = ListOffsetsRequest::default().with_replica_id((-1).into()).with_topics(vec![
        ListOffsetsTopic::default().with_name(topic_name(topic)).with_partitions(vec![partition]),
    ]);
    match client.call(ApiKey::ListOffsets, version, RequestKind::ListOffsets(request)) {
        ResponseKind::ListOffsets(mut r) => r.topics.remove(0).partitions.remove(0),
        other => panic!("{other:?}"),
    }
}

#[test]
fn list_offsets_v0_answers_old_style_offsets_up_to_max_num_offsets() {
    let broker = Broker::start(1, &[]);
    let mut client = RawClient::connect(broker.shard_addr(0));
    create_topic(&mut client, "t");
    let (code, _) =
        raw_produce(&mut client, "t", 0, record_batch(&[(b"k", b"a"), (b"k", b"b")], 10));
    assert_eq!(code, 0);
    let at = |timestamp: i64, max: i32| {
        ListOffsetsPartition::default().with_timestamp(timestamp).with_max_num_offsets(max)
    };
    let latest = list_offset(&mut client, 0, "t", at(-1, 1));
    assert_eq!((latest.error_code, latest.old_style_offsets), (0, vec![2]));
    let earliest = list_offset(&mut client, 0, "t", at(-2, 5));
    assert_eq!((earliest.error_code, earliest.old_style_offsets), (0, vec![0]));
    let none_wanted = list_offset(&mut client, 0, "t", at(-1, 0));
    assert_eq!((none_wanted.error_code, none_wanted.old_style_offsets), (0, vec![]));
    let unknown = list_offset(&mut client, 0, "missing", at(-1, 1));
    assert_eq!((unknown.error_code, unknown.old_style_offsets), (3, vec![]));
}

#[test]
fn list_offsets_v7_to_v9_answer_max_timestamp_earliest_local_and_latest_tiered() {
    let broker = Broker::start(1, &[]);
    let mut client = RawClient::connect(broker.shard_addr(0));
    create_topic(&mut client, "t");
    // Batches of two records stamped 5, 10, 7: the largest (10) is first at offset 2.
    for base in [5, 10, 7] {
        let (code, _) =
            raw_produce(&mut client, "t", 0, record_batch(&[(b"k", b"x"), (b"k", b"y")], base));
        assert_eq!(code, 0);
    }
    let at = |timestamp: i64| ListOffsetsPartition::default().with_timestamp(timestamp);
    let max = list_offset(&mut client, 7, "t", at(-3));
    assert_eq!((max.error_code, max.offset, max.timestamp), (0, 2, 10), "{max:?}");
    let earliest_local = list_offset(&mut client, 8, "t", at(-4));
    assert_eq!((earliest_local.error_code, earliest_local.offset), (0, 0));
    let tiered = list_offset(&mut client, 9, "t", at(-5));
    assert_eq!((tiered.error_code, tiered.offset, tiered.leader_epoch), (0, -1, -1));
    create_topic(&mut client, "empty");
    let empty = list_offset(&mut client, 7, "empty", at(-3));
    assert_eq!((empty.error_code, empty.offset), (0, -1));
}

fn fetch_by_id(client: &mut RawClient, version: i16, topic_id: Uuid) -> (Uuid, i16, usize) {
    let request = FetchRequest::default()
        .with_max_bytes(1 << 20)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default()
            .with_topic_id(topic_id)
            .with_partitions(vec![FetchPartition::default().with_partition_max_bytes(1 << 20)])]);
    match client.call(ApiKey::Fetch, version, RequestKind::Fetch(request)) {
        ResponseKind::Fetch(r) => {
            let topic = &r.responses[0];
            let p = &topic.partitions[0];
            (topic.topic_id, p.error_code, p.records.as_ref().map_or(0, |b| b.len()))
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn fetch_v13_and_later_find_topics_by_id_and_refuse_unknown_ids() {
    let broker = Broker::start(2, &[]);
    // Shard 0 need not own the partition: the read is forwarded, the id resolved here.
    let mut client = RawClient::connect(broker.shard_addr(0));
    let id = create_topic(&mut client, "t");
    let batch = record_batch(&[(b"k", b"v")], 10);
    let (code, _) = raw_produce(&mut client, "t", 0, batch.clone());
    assert_eq!(code, 0);
    for version in 13..=18 {
        assert_eq!(fetch_by_id(&mut client, version, id), (id, 0, batch.len()), "v{version}");
        let unknown = Uuid::from_u128(42);
        assert_eq!(fetch_by_id(&mut client, version, unknown), (unknown, 100, 0), "v{version}");
    }
}

#[test]
fn describe_configs_v0_says_which_values_are_defaults() {
    let broker = Broker::start(1, &[]);
    let mut client = RawClient::connect(broker.shard_addr(0));
    let request = CreateTopicsRequest::default().with_topics(vec![CreatableTopic::default()
        .with_name(topic_name("t"))
        .with_num_partitions(1)
        .with_replication_factor(1)
        .with_configs(vec![
            kafka_protocol::messages::create_topics_request::CreatableTopicConfig::default()
                .with_name(s("retention.ms"))
                .with_value(Some(s("1000"))),
        ])]);
    client.call(ApiKey::CreateTopics, 0, RequestKind::CreateTopics(request));
    let request =
        DescribeConfigsRequest::default().with_resources(vec![DescribeConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(s("t"))
            .with_configuration_keys(Some(vec![s("retention.ms"), s("retention.bytes")]))]);
    let configs =
        match client.call(ApiKey::DescribeConfigs, 0, RequestKind::DescribeConfigs(request)) {
            ResponseKind::DescribeConfigs(mut r) => r.results.remove(0).configs,
            other => panic!("{other:?}"),
        };
    let mut by_name: Vec<(String, bool)> =
        configs.iter().map(|c| (c.name.to_string(), c.is_default)).collect();
    by_name.sort();
    assert_eq!(by_name, vec![("retention.bytes".into(), true), ("retention.ms".into(), false)]);
}

/// A legacy message (message format v0/v1) at `offset`, for Produce v0-v2.
fn legacy(offset: i64, magic: i8, key: Option<&str>, value: &str) -> LegacyMessage {
    LegacyMessage {
        offset,
        magic,
        attributes: 0,
        timestamp: if magic == 0 { -1 } else { 1_700_000_000_000 + offset },
        key: key.map(|k| Bytes::copy_from_slice(k.as_bytes())),
        value: Some(Bytes::copy_from_slice(value.as_bytes())),
    }
}

/// Produce `set` to partition 0 of `topic` at `version`: (error code, base offset, log
/// append time).
fn produce_legacy(
    client: &mut RawClient,
    version: i16,
    topic: &str,
    set: Bytes,
) -> (i16, i64, i64) {
    let request =
        ProduceRequest::default().with_acks(-1).with_timeout_ms(10_000).with_topic_data(vec![
            TopicProduceData::default().with_name(topic_name(topic)).with_partition_data(vec![
                PartitionProduceData::default().with_index(0).with_records(Some(set)),
            ]),
        ]);
    match client.call(ApiKey::Produce, version, RequestKind::Produce(request)) {
        ResponseKind::Produce(r) => {
            let p = &r.responses[0].partition_responses[0];
            (p.error_code, p.base_offset, p.log_append_time_ms)
        }
        other => panic!("{other:?}"),
    }
}

/// Fetch `topic`'s partition 0 from `offset` at `version`: (error, high watermark, records).
fn fetch_at(
    client: &mut RawClient,
    version: i16,
    topic: &str,
    offset: i64,
    max_bytes: i32,
) -> (i16, i64, Bytes) {
    let request = FetchRequest::default()
        .with_max_bytes(max_bytes)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default().with_topic(topic_name(topic)).with_partitions(
            vec![FetchPartition::default()
                .with_fetch_offset(offset)
                .with_partition_max_bytes(max_bytes)],
        )]);
    match client.call(ApiKey::Fetch, version, RequestKind::Fetch(request)) {
        ResponseKind::Fetch(r) => {
            let p = &r.responses[0].partitions[0];
            (p.error_code, p.high_watermark, p.records.clone().unwrap_or_default())
        }
        other => panic!("{other:?}"),
    }
}

/// The messages of a fetched message set, wrappers opened, offsets made absolute.
fn open_message_set(set: &Bytes) -> Vec<LegacyMessage> {
    let mut out = Vec::new();
    for message in read_message_set(set).unwrap() {
        let codec = message.attributes & 0x07;
        if codec == 0 {
            out.push(message);
            continue;
        }
        // The broker's own conversion reads a wrapper back into one batch: reuse it to
        // decompress, then read the records of that batch.
        let one = legacy_format::encode_message_set(std::slice::from_ref(&message), Codec::None);
        let batch = legacy_format::message_set_to_record_batch(&one, 1 << 20).unwrap();
        let records = RecordBatchDecoder::decode(&mut batch.clone()).unwrap().records;
        let base = message.offset - (records.len() as i64 - 1);
        for (i, r) in records.iter().enumerate() {
            let timestamp = if message.magic == 0 { -1 } else { r.timestamp };
            out.push(LegacyMessage {
                offset: base + i as i64,
                magic: message.magic,
                attributes: 0,
                timestamp,
                key: r.key.clone(),
                value: r.value.clone(),
            });
        }
    }
    out
}

/// Produce v0-v2 carry message sets of format v0/v1, plain or compressed: each is stored
/// as one record batch at consecutive offsets, and Fetch v0-v3 read every record back
/// (magic 0 for v0-v1, magic 1 for v2-v3) next to records produced as batches, which
/// Fetch v4+ read as batches.
#[test]
fn produce_v0_to_v2_and_fetch_v0_to_v3_convert_message_sets_both_ways() {
    let broker = Broker::start(1, &[]);
    let mut client = RawClient::connect(broker.shard_addr(0));
    create_topic(&mut client, "legacy");
    let mut sent: Vec<LegacyMessage> = Vec::new();
    let sets = [
        (0, Codec::None, vec![legacy(0, 0, Some("a"), "v0-0"), legacy(1, 0, None, "v0-1")]),
        (1, Codec::Gzip, (0..3).map(|i| legacy(i, 0, Some("g"), &format!("gzip-{i}"))).collect()),
        (
            2,
            Codec::Snappy,
            vec![legacy(0, 1, None, "snappy-0"), legacy(1, 1, Some("s"), "snappy-1")],
        ),
        (2, Codec::Lz4, vec![legacy(0, 1, Some("l"), "lz4-0")]),
        (2, Codec::None, vec![legacy(0, 1, Some("k"), "v1-0"), legacy(1, 1, None, "")]),
    ];
    for (version, codec, messages) in sets {
        let (code, base_offset, append_time) =
            produce_legacy(&mut client, version, "legacy", encode_message_set(&messages, codec));
        assert_eq!((code, base_offset), (0, sent.len() as i64), "Produce v{version} {codec:?}");
        assert_eq!(append_time, -1, "CreateTime topic");
        for (i, m) in messages.into_iter().enumerate() {
            sent.push(LegacyMessage { offset: base_offset + i as i64, ..m });
        }
    }
    let (code, base_offset) =
        raw_produce(&mut client, "legacy", 0, record_batch(&[(b"n", b"new")], 5));
    assert_eq!((code, base_offset), (0, sent.len() as i64));
    sent.push(LegacyMessage { timestamp: 5, ..legacy(base_offset, 1, Some("n"), "new") });

    for version in 0..=3 {
        let magic = if version < 2 { 0 } else { 1 };
        let (code, high_watermark, set) = fetch_at(&mut client, version, "legacy", 0, 1 << 20);
        assert_eq!((code, high_watermark), (0, sent.len() as i64), "Fetch v{version}");
        let read = open_message_set(&set);
        let expected: Vec<LegacyMessage> = sent
            .iter()
            .map(|m| LegacyMessage {
                magic,
                timestamp: if magic == 0 { -1 } else { m.timestamp },
                ..m.clone()
            })
            .collect();
        assert_eq!(read, expected, "Fetch v{version}");
    }
    // The batches themselves, as Fetch v4+ clients read them.
    let (code, _, batches) = fetch_at(&mut client, 4, "legacy", 0, 1 << 20);
    assert_eq!(code, 0);
    let records: Vec<Record> = RecordBatchDecoder::decode_all(&mut batches.clone())
        .unwrap()
        .into_iter()
        .flat_map(|set| set.records)
        .collect();
    let values: Vec<_> =
        records.iter().map(|r| (r.offset, r.key.clone(), r.value.clone())).collect();
    let expected: Vec<_> =
        sent.iter().map(|m| (m.offset, m.key.clone(), m.value.clone())).collect();
    assert_eq!(values, expected);
    assert!(records.iter().all(|r| r.headers.is_empty()));

    // From the middle, with a limit: whole messages from the fetch offset on, at least one.
    let (code, _, set) = fetch_at(&mut client, 3, "legacy", 9, 1);
    assert_eq!(code, 0);
    let read = open_message_set(&set);
    assert_eq!(read.iter().map(|m| m.offset).collect::<Vec<_>>(), vec![9]);
}

/// A message set that is corrupt or not allowed gets its Kafka error for its partition;
/// nothing of it is stored, and the connection goes on serving.
#[test]
fn bad_message_sets_get_corrupt_message_invalid_record_or_unsupported_compression() {
    let broker = Broker::start(1, &[]);
    let mut client = RawClient::connect(broker.shard_addr(0));
    create_topic(&mut client, "bad");
    let good = encode_message_set(&[legacy(0, 1, Some("k"), "value")], Codec::None);
    let mut bad_crc = good.to_vec();
    *bad_crc.last_mut().unwrap() ^= 1;
    let mut zstd = legacy(0, 1, None, "z");
    zstd.attributes = 4;
    let cases: [(&str, Bytes, i16); 5] = [
        ("bad CRC", Bytes::from(bad_crc), 2),
        ("truncated", good.slice(..good.len() - 3), 2),
        ("only part of the header", good.slice(..7), 2),
        ("a v2 batch", record_batch(&[(b"k", b"v")], 0), 87),
        ("zstd", encode_message_set(&[zstd], Codec::None), 76),
    ];
    for (what, set, expected) in cases {
        let (code, base_offset, _) = produce_legacy(&mut client, 2, "bad", set);
        assert_eq!((code, base_offset), (expected, -1), "{what}");
    }
    let (code, high_watermark, set) = fetch_at(&mut client, 2, "bad", 0, 1 << 20);
    assert_eq!((code, high_watermark, set.len()), (0, 0, 0), "nothing stored");
    assert_eq!(produce_legacy(&mut client, 2, "bad", good).0, 0, "the connection still serves");
}

/// Kafka wire bytes, written by hand from Kafka 3.9's message schemas.
#[derive(Default)]
struct Wire(Vec<u8>);

impl Wire {
    fn i8(mut self, v: i8) -> Self {
        self.0.push(v as u8);
        self
    }
    fn i16(mut self, v: i16) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn i32(mut self, v: i32) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn i64(mut self, v: i64) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn str(self, v: &str) -> Self {
        let mut w = self.i16(v.len() as i16);
        w.0.extend_from_slice(v.as_bytes());
        w
    }
}

/// Sends `body` as `api` v`version` (header v1, no client id) and returns the response
/// body after the correlation id.
fn exchange(client: &mut RawClient, api: ApiKey, version: i16, body: Wire) -> Vec<u8> {
    let frame = Wire::default().i16(api as i16).i16(version).i32(99).i16(-1);
    let mut frame = frame.0;
    frame.extend_from_slice(&body.0);
    client.send_frame(&frame);
    let response = client.read_frame().expect("a response, not a closed connection");
    assert_eq!(&response[..4], &99i32.to_be_bytes());
    response[4..].to_vec()
}

/// Byte-exact requests and responses of the versions restored in the vendored codec: a
/// round trip through the codec alone agreed with its own mistakes (OffsetCommit v1 read
/// a retention time v1 does not carry; CreateTopics v0 answered a throttle time), which
/// sarama 1.22 and kafka-go 0.2.1 found.
#[test]
fn old_versions_match_kafka_wire_layouts() {
    let broker = Broker::start(1, &[]);
    let mut client = RawClient::connect(broker.shard_addr(0));
    // CreateTopics v0: topics [name, partitions, replication, assignments, configs], timeout.
    let body = Wire::default().i32(1).str("t").i32(1).i16(1).i32(0);
    let body = body.i32(1).str("retention.ms").str("1000").i32(5000);
    let response = exchange(&mut client, ApiKey::CreateTopics, 0, body);
    assert_eq!(response, Wire::default().i32(1).str("t").i16(0).0, "CreateTopics v0");
    // v1 adds validate_only; its answer adds a nullable error message.
    let body = Wire::default().i32(1).str("t1").i32(1).i16(1).i32(0).i32(0).i32(5000).i8(0);
    let response = exchange(&mut client, ApiKey::CreateTopics, 1, body);
    assert_eq!(response, Wire::default().i32(1).str("t1").i16(0).i16(-1).0, "CreateTopics v1");

    // OffsetCommit v1 as sarama 1.22 sends it: group, generation, member, topics
    // [name, partitions [index, offset, commit timestamp, metadata]].
    let body = Wire::default().str("g1").i32(-1).str("").i32(1).str("t").i32(1);
    let body = body.i32(0).i64(4).i64(-1).str("m");
    let response = exchange(&mut client, ApiKey::OffsetCommit, 1, body);
    let committed_ok = Wire::default().i32(1).str("t").i32(1).i32(0).i16(0).0;
    assert_eq!(response, committed_ok, "OffsetCommit v1");
    // v0: group, topics [name, partitions [index, offset, metadata]].
    let body = Wire::default().str("g0").i32(1).str("t").i32(1).i32(0).i64(6).str("");
    let response = exchange(&mut client, ApiKey::OffsetCommit, 0, body);
    assert_eq!(response, committed_ok, "OffsetCommit v0");

    // OffsetFetch v0: group, topics [name, [index]] -> [name, [index, offset, metadata,
    // error]], no top-level error code, no throttle time.
    let body = Wire::default().str("g1").i32(1).str("t").i32(1).i32(0);
    let response = exchange(&mut client, ApiKey::OffsetFetch, 0, body);
    let expected = Wire::default().i32(1).str("t").i32(1).i32(0).i64(4).str("m").i16(0);
    assert_eq!(response, expected.0, "OffsetFetch v0");

    // ListOffsets v0: replica, topics [name, [index, timestamp, max_num_offsets]] ->
    // [name, [index, error, [offsets]]].
    let (code, _) = raw_produce(&mut client, "t", 0, record_batch(&[(b"k", b"v")], 10));
    assert_eq!(code, 0);
    let body = Wire::default().i32(-1).i32(1).str("t").i32(1).i32(0).i64(-1).i32(1);
    let response = exchange(&mut client, ApiKey::ListOffsets, 0, body);
    let expected = Wire::default().i32(1).str("t").i32(1).i32(0).i16(0).i32(1).i64(1);
    assert_eq!(response, expected.0, "ListOffsets v0");

    // DescribeConfigs v0: resources [type, name, keys] -> throttle, results [error,
    // message, type, name, configs [name, value, read_only, is_default, is_sensitive]].
    let body = Wire::default().i32(1).i8(2).str("t").i32(1).str("retention.ms");
    let response = exchange(&mut client, ApiKey::DescribeConfigs, 0, body);
    let expected = Wire::default().i32(0).i32(1).i16(0).i16(-1).i8(2).str("t").i32(1);
    let expected = expected.str("retention.ms").str("1000").i8(0).i8(0).i8(0);
    assert_eq!(response, expected.0, "DescribeConfigs v0");

    // DeleteTopics v0: names, timeout -> [name, error], no throttle time.
    let body = Wire::default().i32(1).str("t1").i32(5000);
    let response = exchange(&mut client, ApiKey::DeleteTopics, 0, body);
    assert_eq!(response, Wire::default().i32(1).str("t1").i16(0).0, "DeleteTopics v0");
}

/// Produce v0-v2 and Fetch v0-v2 byte for byte, from Kafka 3.9's schemas: the message set
/// is written by hand too (CRC-32 IEEE over magic..value), and a magic-0 message fetched
/// with Fetch v0 comes back as the same bytes.
#[test]
fn produce_and_fetch_v0_to_v2_match_kafka_wire_layouts() {
    let broker = Broker::start(1, &[]);
    let mut client = RawClient::connect(broker.shard_addr(0));
    create_topic(&mut client, "w");
    // One magic-0 message: offset, size, crc, magic, attributes, key (null), value "hi".
    let body = Wire::default().i8(0).i8(0).i32(-1).i32(2);
    let mut body = body.0;
    body.extend_from_slice(b"hi");
    let crc = kafka_protocol::records::IEEE.checksum(&body);
    let mut set = Wire::default().i64(0).i32(4 + body.len() as i32).i32(crc as i32).0;
    set.extend_from_slice(&body);
    let produce = |set: &[u8]| {
        let mut w = Wire::default().i16(-1).i32(5000).i32(1).str("w").i32(1).i32(0);
        w = w.i32(set.len() as i32);
        w.0.extend_from_slice(set);
        w
    };
    // v0: acks, timeout, [topic, [partition, message set]] -> [topic, [partition, error,
    // base offset]]; v1 adds a throttle time at the end; v2 a log append time per partition.
    let response = exchange(&mut client, ApiKey::Produce, 0, produce(&set));
    let expected = Wire::default().i32(1).str("w").i32(1).i32(0).i16(0).i64(0);
    assert_eq!(response, expected.0, "Produce v0");
    let response = exchange(&mut client, ApiKey::Produce, 1, produce(&set));
    let expected = Wire::default().i32(1).str("w").i32(1).i32(0).i16(0).i64(1).i32(0);
    assert_eq!(response, expected.0, "Produce v1");
    let response = exchange(&mut client, ApiKey::Produce, 2, produce(&set));
    let expected = Wire::default().i32(1).str("w").i32(1).i32(0).i16(0).i64(2).i64(-1).i32(0);
    assert_eq!(response, expected.0, "Produce v2");

    // Fetch v0: replica, max wait, min bytes, [topic, [partition, offset, max bytes]] ->
    // [topic, [partition, error, high watermark, message set]]; v1 adds a throttle time
    // first. The first message comes back as it was sent.
    let fetch = Wire::default().i32(-1).i32(0).i32(0).i32(1).str("w").i32(1).i32(0).i64(0);
    let fetch = fetch.i32(set.len() as i32);
    let response = exchange(&mut client, ApiKey::Fetch, 0, fetch);
    let mut expected = Wire::default().i32(1).str("w").i32(1).i32(0).i16(0).i64(3);
    expected = expected.i32(set.len() as i32);
    expected.0.extend_from_slice(&set);
    assert_eq!(response, expected.0, "Fetch v0");
    let fetch = Wire::default().i32(-1).i32(0).i32(0).i32(1).str("w").i32(1).i32(0).i64(2);
    let fetch = fetch.i32(1 << 20);
    let response = exchange(&mut client, ApiKey::Fetch, 1, fetch);
    let mut expected = Wire::default().i32(0).i32(1).str("w").i32(1).i32(0).i16(0).i64(3);
    let mut at_2 = set.clone();
    at_2[..8].copy_from_slice(&2i64.to_be_bytes());
    expected = expected.i32(at_2.len() as i32);
    expected.0.extend_from_slice(&at_2);
    assert_eq!(response, expected.0, "Fetch v1 from offset 2");
}

/// A gzip set of a few KB whose records decompress past --max-request-bytes (no topic
/// could take such a batch) is refused with MESSAGE_TOO_LARGE, not decompressed whole.
#[test]
fn a_compression_bomb_in_produce_v2_is_message_too_large() {
    let broker = Broker::start(1, &["--max-request-bytes", "1048576"]);
    let mut client = RawClient::connect(broker.shard_addr(0));
    create_topic(&mut client, "bomb");
    let mut bomb = legacy(0, 1, None, "");
    bomb.value = Some(Bytes::from(vec![0u8; 8 << 20]));
    let set = encode_message_set(&[bomb], Codec::Gzip);
    assert!(set.len() < 64 << 10, "{} bytes", set.len());
    let (code, base_offset, _) = produce_legacy(&mut client, 2, "bomb", set);
    assert_eq!((code, base_offset), (10, -1), "MESSAGE_TOO_LARGE");
    let small = encode_message_set(&[legacy(0, 1, None, "ok")], Codec::Gzip);
    assert_eq!(produce_legacy(&mut client, 2, "bomb", small).0, 0);
}
