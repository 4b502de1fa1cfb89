//! Per-batch pieces of the produce path, one criterion group each: decoding a Produce
//! request (the broker's own `shardlog_net::decode_request`), CRC-32C over a
//! 16 KiB record batch, the storage crate's batch validation (`split_batches`: lengths,
//! header, CRC), and building a batch as the load generator does. A second group prices
//! the message format v0/v1 conversions of Produce v0-v2 / Fetch v0-v3
//! (`shardlog_net::legacy_format`) on the same 16 x 1 KiB records, plain and gzip.
//!
//! Run: `cargo bench -p shardlog-benches --bench wire`. Under `cargo test` (test mode)
//! each benchmark runs once, so they are compiled and exercised by the test suite.
//! Index lookup and the append into the DMA buffer are in `storage_hot_path.rs`, a mesh
//! round trip between two shards in `mesh.rs`.

use std::hint::black_box;

use bytes::{Bytes, BytesMut};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use kafka_protocol::messages::{ApiKey, ProduceRequest, RequestHeader};
use kafka_protocol::protocol::{Encodable, HeaderVersion, StrBytes};
use shardlog_benches::load::record_batch::RecordBatchWriter;

const RECORDS: usize = 16;
const VALUE_BYTES: usize = 1024;

/// A 16 x 1 KiB batch, as `shardlog-load produce` sends by default.
fn batch() -> Vec<u8> {
    let mut out = Vec::new();
    let mut writer = RecordBatchWriter::new(&mut out, 1_700_000_000_000);
    let value = vec![b'x'; VALUE_BYTES];
    for i in 0..RECORDS {
        writer.push(Some(format!("{}", i % 1000).as_bytes()), &value);
    }
    writer.finish();
    out
}

/// A Produce v9 request frame (without the length prefix) carrying one batch.
fn produce_frame(records: Bytes) -> Bytes {
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    let version = 9;
    let request =
        ProduceRequest::default().with_acks(-1).with_timeout_ms(30_000).with_topic_data(vec![
            TopicProduceData::default()
                .with_name(shardlog_benches::load::cluster::topic_name("bench"))
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(0)
                    .with_records(Some(records))]),
        ]);
    let header = RequestHeader::default()
        .with_request_api_key(ApiKey::Produce as i16)
        .with_request_api_version(version)
        .with_correlation_id(1)
        .with_client_id(Some(StrBytes::from_static_str("bench")));
    let mut out = BytesMut::new();
    header.encode(&mut out, ProduceRequest::header_version(version)).unwrap();
    request.encode(&mut out, version).unwrap();
    out.freeze()
}

fn benches(c: &mut Criterion) {
    let batch = Bytes::from(batch());
    let mut group = c.benchmark_group("produce_path");
    group.throughput(Throughput::Bytes(batch.len() as u64));

    let frame = produce_frame(batch.clone());
    group.bench_function("decode_produce_request_16k", |b| {
        b.iter(|| {
            let request = shardlog_net::decode_request(black_box(frame.clone()), |_| Some((0, 11)));
            black_box(request.expect("valid frame"))
        })
    });
    group.bench_function("crc32c_16k", |b| b.iter(|| crc32c::crc32c(black_box(&batch[21..]))));
    group.bench_function("split_batches_validate_16k", |b| {
        b.iter(|| shardlog_storage::split_batches(black_box(&batch)).expect("valid batch"))
    });
    group.bench_function("build_record_batch_16k", |b| b.iter(|| black_box(self::batch())));
    group.finish();
}

fn legacy_format_benches(c: &mut Criterion) {
    use shardlog_net::legacy_format::{
        encode_message_set, message_set_to_record_batch, record_batches_to_message_set, Codec,
        LegacyMessage,
    };
    let value = Bytes::from(vec![b'x'; VALUE_BYTES]);
    let messages: Vec<LegacyMessage> = (0..RECORDS as i64)
        .map(|i| LegacyMessage {
            offset: i,
            magic: 1,
            attributes: 0,
            timestamp: 1_700_000_000_000 + i,
            key: Some(Bytes::from(format!("{}", i % 1000))),
            value: Some(value.clone()),
        })
        .collect();
    let mut group = c.benchmark_group("legacy_format");
    group.throughput(Throughput::Bytes((RECORDS * VALUE_BYTES) as u64));
    for codec in [Codec::None, Codec::Gzip] {
        let set = encode_message_set(&messages, codec);
        let batch = message_set_to_record_batch(&set, 1 << 26).expect("valid set");
        group.bench_function(format!("up_magic1_{codec:?}_16k"), |b| {
            b.iter(|| message_set_to_record_batch(black_box(&set), 1 << 26).expect("valid set"))
        });
        group.bench_function(format!("down_magic1_{codec:?}_16k"), |b| {
            b.iter(|| {
                record_batches_to_message_set(black_box(&batch), 1, 0, 1 << 20, 1 << 26)
                    .expect("valid")
            })
        });
    }
    group.finish();
}

criterion_group!(wire, benches, legacy_format_benches);
criterion_main!(wire);
