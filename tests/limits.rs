//! Limits and back-pressure (docs/reliability.md), each driven with raw requests
//! against a broker started with a small value of its flag.
//!
//! The idle / half-open connection timeout is tested in `broker_protocol.rs`
//! (`a_client_that_stalls_mid_frame_is_disconnected_after_the_idle_timeout`).

mod common;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use common::{eventually, record_batch, Broker, RawClient};
use kafka_protocol::messages::api_versions_request::ApiVersionsRequest;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreateTopicsRequest};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchRequest, FetchTopic};
use kafka_protocol::messages::produce_request::{
    PartitionProduceData, ProduceRequest, TopicProduceData,
};
use kafka_protocol::messages::{ApiKey, RequestHeader, RequestKind, ResponseKind, TopicName};
use kafka_protocol::protocol::{Encodable, StrBytes};
use shardlog_storage::split_batches;

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

fn create_topic(client: &mut RawClient, topic: &str, partitions: i32) {
    let request = CreateTopicsRequest::default().with_topics(vec![CreatableTopic::default()
        .with_name(name(topic))
        .with_num_partitions(partitions)
        .with_replication_factor(1)]);
    match client.call(ApiKey::CreateTopics, 5, RequestKind::CreateTopics(request)) {
        ResponseKind::CreateTopics(r) => assert_eq!(r.topics[0].error_code, 0),
        other => panic!("{other:?}"),
    }
}

fn produce_request(topic: &str, partition: i32, acks: i16, records: Bytes) -> RequestKind {
    RequestKind::Produce(
        ProduceRequest::default().with_acks(acks).with_timeout_ms(30_000).with_topic_data(vec![
            TopicProduceData::default().with_name(name(topic)).with_partition_data(vec![
                PartitionProduceData::default().with_index(partition).with_records(Some(records)),
            ]),
        ]),
    )
}

/// (error code, base offset) of a one-partition produce response.
fn produce_result(response: ResponseKind) -> (i16, i64) {
    match response {
        ResponseKind::Produce(r) => {
            let p = &r.responses[0].partition_responses[0];
            (p.error_code, p.base_offset)
        }
        other => panic!("{other:?}"),
    }
}

fn fetch_request(
    topic: &str,
    partition: i32,
    offset: i64,
    max_wait_ms: i32,
    max_bytes: i32,
) -> RequestKind {
    RequestKind::Fetch(
        FetchRequest::default()
            .with_max_wait_ms(max_wait_ms)
            .with_min_bytes(1)
            .with_max_bytes(max_bytes)
            .with_session_epoch(-1)
            .with_topics(vec![FetchTopic::default().with_topic(name(topic)).with_partitions(
                vec![FetchPartition::default()
                    .with_partition(partition)
                    .with_fetch_offset(offset)
                    .with_partition_max_bytes(max_bytes)],
            )]),
    )
}

/// (error code, high watermark, records) of a one-partition fetch response.
fn fetch_result(response: ResponseKind) -> (i16, i64, Bytes) {
    match response {
        ResponseKind::Fetch(r) => {
            let p = &r.responses[0].partitions[0];
            (p.error_code, p.high_watermark, p.records.clone().unwrap_or_default())
        }
        other => panic!("{other:?}"),
    }
}

/// A one-record batch whose value is `size` bytes, all different per `seed`.
fn batch_of_size(seed: u32, size: usize) -> Bytes {
    let mut value = seed.to_be_bytes().to_vec();
    value.resize(size, (seed % 251) as u8);
    record_batch(&[(b"k", &value)], 1_000 + seed as i64)
}

/// Every batch of `topic`/`partition` up to its high watermark, without base offsets.
/// A produced batch as `read_all` returns it: without its base offset, and with the
/// partition leader epoch the broker stamps (0: one replica; KIP-320).
fn as_stored(batch: &Bytes) -> Bytes {
    let mut stored = batch[8..].to_vec();
    stored[4..8].copy_from_slice(&0i32.to_be_bytes());
    Bytes::from(stored)
}

fn read_all(client: &mut RawClient, topic: &str, partition: i32) -> Vec<Bytes> {
    let mut batches = Vec::new();
    let mut offset = 0;
    loop {
        let response =
            client.call(ApiKey::Fetch, 11, fetch_request(topic, partition, offset, 0, 1 << 20));
        let (error, high_watermark, records) = fetch_result(response);
        assert_eq!(error, 0);
        for (header, bytes) in split_batches(&records).unwrap() {
            offset = header.base_offset + header.last_offset_delta as i64 + 1;
            batches.push(bytes.slice(8..));
        }
        if offset >= high_watermark {
            return batches;
        }
    }
}

/// A raw ApiVersions round trip on a fresh connection: the stream if the broker answered,
/// `None` if it closed the connection instead.
fn connect_and_get_answered(addr: SocketAddr) -> Option<TcpStream> {
    let mut stream = TcpStream::connect(addr).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    answers_api_versions(&mut stream).then_some(stream)
}

fn answers_api_versions(stream: &mut TcpStream) -> bool {
    let header = RequestHeader::default()
        .with_request_api_key(ApiKey::ApiVersions as i16)
        .with_request_api_version(0)
        .with_correlation_id(1);
    let mut frame = BytesMut::new();
    header.encode(&mut frame, ApiKey::ApiVersions.request_header_version(0)).unwrap();
    ApiVersionsRequest::default().encode(&mut frame, 0).unwrap();
    let mut out = (frame.len() as i32).to_be_bytes().to_vec();
    out.extend_from_slice(&frame);
    if stream.write_all(&out).is_err() {
        return false;
    }
    let mut len = [0u8; 4];
    if stream.read_exact(&mut len).is_err() {
        return false;
    }
    let mut response = vec![0u8; i32::from_be_bytes(len) as usize];
    stream.read_exact(&mut response).is_ok()
}

/// Bytes of the frame `RawClient::send` makes of `body` (length prefix excluded).
fn frame_bytes(api_key: ApiKey, version: i16, body: &RequestKind) -> usize {
    let header = RequestHeader::default()
        .with_request_api_key(api_key as i16)
        .with_request_api_version(version)
        .with_client_id(Some(StrBytes::from_static_str("raw-test")));
    let mut frame = BytesMut::new();
    header.encode(&mut frame, api_key.request_header_version(version)).unwrap();
    body.encode(&mut frame, version).unwrap();
    frame.len()
}

#[test]
fn a_request_at_the_size_limit_is_served_and_one_byte_more_closes_its_connection() {
    let at_limit = produce_request("sized", 0, -1, batch_of_size(1, 500));
    let over_limit = produce_request("sized", 0, -1, batch_of_size(2, 501));
    let limit = frame_bytes(ApiKey::Produce, 9, &at_limit);
    assert_eq!(frame_bytes(ApiKey::Produce, 9, &over_limit), limit + 1);
    let broker = Broker::start(1, &["--max-request-bytes", &limit.to_string()]);
    let mut client = RawClient::connect(broker.shard_addr(0));
    create_topic(&mut client, "sized", 1);
    assert_eq!(produce_result(client.call(ApiKey::Produce, 9, at_limit)), (0, 0));
    client.send(ApiKey::Produce, 9, &over_limit);
    assert!(client.is_closed_by_broker(), "a frame over --max-request-bytes is refused");
    // Only that connection: the broker serves the next one, and wrote nothing of the refused.
    let mut next = RawClient::connect(broker.shard_addr(0));
    assert_eq!(read_all(&mut next, "sized", 0).len(), 1);
}

#[test]
fn connections_over_the_per_shard_limit_are_closed_and_a_freed_slot_is_reused() {
    let broker = Broker::start(1, &["--max-connections-per-shard", "2"]);
    // The harness's readiness probes may hold slots until the broker sees them close.
    let mut first = None;
    eventually(Duration::from_secs(10), "a first connection", || {
        first = connect_and_get_answered(broker.shard_addr(0));
        first.is_some()
    });
    let mut first = first.unwrap();
    // The bootstrap listener counts against the same shard's limit.
    let bootstrap: SocketAddr = broker.bootstrap().parse().unwrap();
    let mut second = None;
    eventually(Duration::from_secs(10), "a second connection", || {
        second = connect_and_get_answered(bootstrap);
        second.is_some()
    });
    let mut second = second.unwrap();

    let mut third = RawClient::connect(broker.shard_addr(0));
    assert!(third.is_closed_by_broker(), "a third connection is closed right after accept");
    assert!(connect_and_get_answered(bootstrap).is_none(), "on either listener");
    assert!(broker.log().contains("connection limit reached"), "the refusal is logged");
    assert!(answers_api_versions(&mut first), "open connections keep working");
    assert!(answers_api_versions(&mut second));

    drop(first);
    let mut replacement = None;
    eventually(Duration::from_secs(10), "the freed slot to be reused", || {
        replacement = connect_and_get_answered(broker.shard_addr(0));
        replacement.is_some()
    });
    assert!(answers_api_versions(&mut second));
}

#[test]
fn a_pipelining_client_over_the_in_flight_limit_gets_every_answer_in_order() {
    let broker = Broker::start(1, &["--max-inflight-requests-per-connection", "2"]);
    let mut client = RawClient::connect(broker.shard_addr(0));
    create_topic(&mut client, "piped", 1);
    // 40 requests written before any answer is read: produces and ApiVersions interleaved.
    let mut sent = Vec::new();
    for i in 0..40u32 {
        if i % 4 == 3 {
            let request = RequestKind::ApiVersions(ApiVersionsRequest::default());
            sent.push((ApiKey::ApiVersions, 3, client.send(ApiKey::ApiVersions, 3, &request)));
        } else {
            let request = produce_request("piped", 0, -1, batch_of_size(i, 100));
            sent.push((ApiKey::Produce, 9, client.send(ApiKey::Produce, 9, &request)));
        }
    }
    let mut next_offset = 0;
    for (api_key, version, correlation_id) in sent {
        // `receive` asserts the correlation id: answers come back in request order.
        let response = client.receive(api_key, version, correlation_id);
        if api_key == ApiKey::Produce {
            assert_eq!(produce_result(response), (0, next_offset));
            next_offset += 1;
        }
    }
    assert_eq!(read_all(&mut client, "piped", 0).len(), 30);
}

/// Requests read through the connection's receive buffer (8 KiB, `READ_BUFFER_BYTES`):
/// frames smaller than it, around its size and several times it, written all at once (many
/// frames in one buffer, frames straddling its end, reads that bypass it) and then in
/// 7-byte pieces (a frame split over many reads). Every answer comes back in order and
/// every record is written whole.
#[test]
fn frames_of_every_size_around_the_read_buffer_are_read_whole_in_order() {
    let broker = Broker::start(1, &[]);
    let mut client = RawClient::connect(broker.shard_addr(0));
    create_topic(&mut client, "buffered", 1);
    let sizes = [10, 7_950, 8_000, 8_050, 8_100, 20_000, 50, 16_384, 3];
    let mut expected = Vec::new();
    for pieces in [None, Some(7)] {
        let mut bytes = BytesMut::new();
        let mut sent = Vec::new();
        for (i, size) in sizes.iter().enumerate() {
            let seed = (expected.len() + i) as u32;
            let batch = batch_of_size(seed, *size);
            let request = produce_request("buffered", 0, -1, batch.clone());
            let (correlation_id, frame) = client.frame(ApiKey::Produce, 9, &request);
            bytes.extend_from_slice(&frame);
            sent.push((ApiKey::Produce, 9, correlation_id));
            let versions = RequestKind::ApiVersions(ApiVersionsRequest::default());
            let (correlation_id, frame) = client.frame(ApiKey::ApiVersions, 3, &versions);
            bytes.extend_from_slice(&frame);
            sent.push((ApiKey::ApiVersions, 3, correlation_id));
            expected.push(batch);
        }
        match pieces {
            None => client.send_raw(&bytes),
            Some(n) => {
                client.stream().set_nodelay(true).unwrap();
                for piece in bytes.chunks(n) {
                    client.send_raw(piece);
                }
            }
        }
        let mut next_offset = (expected.len() - sizes.len()) as i64;
        for (api_key, version, correlation_id) in sent {
            // `receive` asserts the correlation id: answers come back in request order.
            let response = client.receive(api_key, version, correlation_id);
            if api_key == ApiKey::Produce {
                assert_eq!(produce_result(response), (0, next_offset));
                next_offset += 1;
            }
        }
    }
    let written = read_all(&mut client, "buffered", 0);
    assert_eq!(written.len(), expected.len());
    for (got, want) in written.iter().zip(&expected) {
        assert_eq!(got[..], as_stored(want)[..], "a batch changed on its way in");
    }
}

/// A long-poll fetch, then a produce that would wake it, both sent before reading: with
/// one request in flight the broker must not read the produce until the fetch is answered.
fn fetch_then_produce_pipelined(max_in_flight: &str) -> (i64, usize) {
    let broker = Broker::start(1, &["--max-inflight-requests-per-connection", max_in_flight]);
    let mut client = RawClient::connect(broker.shard_addr(0));
    create_topic(&mut client, "woken", 1);
    let fetch = client.send(ApiKey::Fetch, 11, &fetch_request("woken", 0, 0, 1_500, 1 << 20));
    let produce = produce_request("woken", 0, -1, batch_of_size(1, 10));
    let produced = client.send(ApiKey::Produce, 9, &produce);
    let (error, high_watermark, records) = fetch_result(client.receive(ApiKey::Fetch, 11, fetch));
    assert_eq!(error, 0);
    assert_eq!(produce_result(client.receive(ApiKey::Produce, 9, produced)), (0, 0));
    (high_watermark, records.len())
}

#[test]
fn at_the_in_flight_limit_the_broker_reads_no_further_request_from_that_connection() {
    let (high_watermark, fetched) = fetch_then_produce_pipelined("1");
    assert_eq!(
        (high_watermark, fetched),
        (0, 0),
        "the produce was read while the fetch was pending"
    );
    // Control: with room for two, the produce is read at once and wakes the fetch.
    let (high_watermark, fetched) = fetch_then_produce_pipelined("2");
    assert_eq!(high_watermark, 1);
    assert!(fetched > 0);
}

#[test]
fn concurrent_producers_within_a_small_produce_budget_all_complete_and_every_record_is_written() {
    // 4 KiB per shard; requests of about 1 KiB, 8 at a time per producer, and one request
    // of 12 KiB that must proceed alone rather than wait forever.
    let budget = 4096;
    let broker = Broker::start(2, &["--max-pending-produce-bytes-per-shard", &budget.to_string()]);
    let mut admin = RawClient::connect(broker.shard_addr(0));
    create_topic(&mut admin, "budget", 2);
    let bootstrap: SocketAddr = broker.bootstrap().parse().unwrap();
    let producers: Vec<_> = (0..4u32)
        .map(|producer| {
            std::thread::spawn(move || {
                let mut client = RawClient::connect(bootstrap);
                let mut sent = Vec::new();
                let mut pending = Vec::new();
                for i in 0..24u32 {
                    let seed = producer * 1000 + i;
                    let size = if producer == 0 && i == 5 { 3 * budget } else { 1000 };
                    let batch = batch_of_size(seed, size);
                    // Producer 3 does not wait for acknowledgements (acks=0).
                    let acks = if producer == 3 { 0 } else { -1 };
                    let request = produce_request("budget", (seed % 2) as i32, acks, batch.clone());
                    let id = client.send(ApiKey::Produce, 9, &request);
                    if acks != 0 {
                        pending.push(id);
                    }
                    sent.push((seed % 2, batch.clone()));
                    if pending.len() == 8 {
                        for id in pending.drain(..) {
                            assert_eq!(produce_result(client.receive(ApiKey::Produce, 9, id)).0, 0);
                        }
                    }
                }
                for id in pending {
                    assert_eq!(produce_result(client.receive(ApiKey::Produce, 9, id)).0, 0);
                }
                sent
            })
        })
        .collect();
    let sent: Vec<(u32, Bytes)> =
        producers.into_iter().flat_map(|p| p.join().expect("producer")).collect();
    for partition in 0..2 {
        let expected: BTreeSet<Bytes> =
            sent.iter().filter(|(p, _)| *p == partition).map(|(_, b)| as_stored(b)).collect();
        let mut written = BTreeSet::new();
        // acks=0 batches become readable with a later flush.
        eventually(Duration::from_secs(20), "every produced batch to be readable", || {
            written = read_all(&mut admin, "budget", partition as i32).into_iter().collect();
            written.len() >= expected.len()
        });
        assert_eq!(written, expected, "partition {partition}");
    }
}

#[test]
fn a_fetch_response_is_capped_by_fetch_max_bytes_but_always_carries_a_batch() {
    let broker = Broker::start(1, &["--fetch-max-bytes", "1000"]);
    let mut client = RawClient::connect(broker.shard_addr(0));
    create_topic(&mut client, "capped", 1);
    let small: Vec<Bytes> = (0..6).map(|i| batch_of_size(i, 300)).collect();
    for batch in &small {
        client.call(ApiKey::Produce, 9, produce_request("capped", 0, -1, batch.clone()));
    }
    let big = batch_of_size(99, 3000);
    client.call(ApiKey::Produce, 9, produce_request("capped", 0, -1, big.clone()));

    // The client asks for 1 MiB; the broker returns whole batches up to 1000 bytes.
    let response = client.call(ApiKey::Fetch, 11, fetch_request("capped", 0, 0, 0, 1 << 20));
    let (error, high_watermark, records) = fetch_result(response);
    assert_eq!((error, high_watermark), (0, 7));
    let fetched = split_batches(&records).unwrap();
    let fits = 1000 / small[0].len();
    assert_eq!(fetched.len(), fits, "{} bytes in {} batches", records.len(), fetched.len());
    assert!(records.len() <= 1000);

    // A batch larger than the cap still comes back whole, alone.
    let response = client.call(ApiKey::Fetch, 11, fetch_request("capped", 0, 6, 0, 1 << 20));
    let (_, _, records) = fetch_result(response);
    assert_eq!(records.slice(8..), as_stored(&big));

    // Every batch is reachable through the cap.
    let all = read_all(&mut client, "capped", 0);
    let expected: Vec<Bytes> = small.iter().chain([&big]).map(as_stored).collect();
    assert_eq!(all, expected);
}
