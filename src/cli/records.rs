//! `shardlog produce` and `shardlog consume`: records in and out through the bootstrap
//! broker, which forwards each partition to the shard that owns it.
//!
//! Both print one line per record as they go (table: aligned columns under one header;
//! json: one object per line), so they can be piped.

use std::io::{BufRead, BufReader};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use clap::Args;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchRequest, FetchTopic};
use kafka_protocol::messages::produce_request::{
    PartitionProduceData, ProduceRequest, TopicProduceData,
};
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use shardlog_net::partitioner::partition_for_key;

use super::{
    check, emit, list_offsets, topic_metadata, topic_name, AdminArgs, Client, OutputFormat,
    EARLIEST, LATEST,
};

/// Records and value bytes per produce request at most (well under the broker's default
/// max_message_bytes); fewer when stdin has no more lines ready.
const MAX_BATCH_RECORDS: usize = 500;
const MAX_BATCH_BYTES: usize = 256 << 10;
/// Fetch and produce wait this long on the broker at most.
const REQUEST_TIMEOUT_MS: i32 = 30_000;
/// A fetch with nothing to return waits this long on the broker.
const FETCH_MAX_WAIT_MS: u64 = 500;
const FETCH_MAX_BYTES: i32 = 4 << 20;
const PARTITION_MAX_BYTES: i32 = 1 << 20;

#[derive(Args, Debug)]
pub struct ProduceArgs {
    topic: String,
    /// Key of every record; also chooses the partition as Kafka's default partitioner does.
    #[arg(long)]
    key: Option<String>,
    /// Partition to write to (default: by --key, else partition 0).
    #[arg(long)]
    partition: Option<i32>,
}

#[derive(Args, Debug)]
pub struct ConsumeArgs {
    topic: String,
    /// Start at each partition's log start offset instead of its end.
    #[arg(long)]
    from_beginning: bool,
    /// Read only this partition (default: all).
    #[arg(long)]
    partition: Option<i32>,
    /// Stop after this many records.
    #[arg(long)]
    max_messages: Option<u64>,
    /// Stop when no record arrived for this long (default: wait for records forever).
    #[arg(long)]
    timeout_ms: Option<u64>,
}

pub fn produce(args: ProduceArgs, admin: &AdminArgs) -> Result<(), String> {
    let mut client = admin.connect()?;
    let partition_count = topic_metadata(&mut client, &args.topic)?.partitions.len() as i32;
    let partition = match (args.partition, &args.key) {
        (Some(p), _) if !(0..partition_count).contains(&p) => {
            let topic = &args.topic;
            return Err(format!(
                "topic '{topic}' has no partition {p} ({partition_count} partitions)"
            ));
        }
        (Some(p), _) => p,
        (None, Some(key)) => partition_for_key(key.as_bytes(), partition_count),
        (None, None) => 0,
    };
    let key = args.key.map(Bytes::from);
    if admin.format == OutputFormat::Table {
        emit(&format!("{:<9}  OFFSET\n", "PARTITION"))?;
    }
    // Lines are sent as soon as stdin has no more ready, so an interactive user sees each
    // line's offset at once and a pipe still gets batches.
    let mut stdin = BufReader::with_capacity(64 << 10, std::io::stdin());
    let mut pending: Vec<Bytes> = Vec::new();
    let mut pending_bytes = 0;
    let mut line = String::new();
    loop {
        line.clear();
        let read = stdin.read_line(&mut line).map_err(|e| format!("cannot read stdin: {e}"))?;
        if read > 0 {
            let value = line.strip_suffix('\n').unwrap_or(&line);
            let value = value.strip_suffix('\r').unwrap_or(value);
            pending_bytes += value.len();
            pending.push(Bytes::copy_from_slice(value.as_bytes()));
        }
        let full = pending.len() >= MAX_BATCH_RECORDS || pending_bytes >= MAX_BATCH_BYTES;
        if (read == 0 || stdin.buffer().is_empty() || full) && !pending.is_empty() {
            let base_offset =
                send_batch(&mut client, &args.topic, partition, key.as_ref(), &pending)?;
            print_offsets(admin.format, partition, base_offset, pending.len())?;
            pending.clear();
            pending_bytes = 0;
        }
        if read == 0 {
            return Ok(());
        }
    }
}

/// Writes `values` as one record batch with acks=all; returns the first record's offset.
fn send_batch(
    client: &mut Client,
    topic: &str,
    partition: i32,
    key: Option<&Bytes>,
    values: &[Bytes],
) -> Result<i64, String> {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let records: Vec<Record> = values
        .iter()
        .enumerate()
        .map(|(i, value)| new_record(i as i64, now_ms, key.cloned(), value.clone()))
        .collect();
    let mut batch = BytesMut::new();
    let options = RecordEncodeOptions { version: 2, compression: Compression::None };
    RecordBatchEncoder::encode(&mut batch, records.iter(), &options)
        .map_err(|e| format!("cannot encode the record batch: {e}"))?;
    let data =
        PartitionProduceData::default().with_index(partition).with_records(Some(batch.freeze()));
    let request = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(REQUEST_TIMEOUT_MS)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(topic_name(topic))
            .with_partition_data(vec![data])]);
    let response = client.call(&request)?;
    let answer = response
        .responses
        .into_iter()
        .flat_map(|t| t.partition_responses)
        .find(|p| p.index == partition)
        .ok_or_else(|| format!("no answer for partition {partition} of topic '{topic}'"))?;
    check(
        answer.error_code,
        &format!("partition {partition} of topic '{topic}'"),
        answer.error_message.as_deref(),
    )?;
    Ok(answer.base_offset)
}

/// A record of a plain (not idempotent, not transactional) producer.
fn new_record(offset: i64, timestamp: i64, key: Option<Bytes>, value: Bytes) -> Record {
    Record {
        transactional: false,
        control: false,
        delete_horizon: false,
        partition_leader_epoch: -1,
        producer_id: -1,
        producer_epoch: -1,
        timestamp_type: TimestampType::Creation,
        offset,
        sequence: -1,
        timestamp,
        key,
        value: Some(value),
        headers: Default::default(),
    }
}

fn print_offsets(
    format: OutputFormat,
    partition: i32,
    base_offset: i64,
    count: usize,
) -> Result<(), String> {
    let mut out = String::new();
    for offset in base_offset..base_offset + count as i64 {
        out.push_str(&match format {
            OutputFormat::Table => format!("{partition:<9}  {offset}\n"),
            OutputFormat::Json => {
                format!("{}\n", serde_json::json!({"partition": partition, "offset": offset}))
            }
        });
    }
    emit(&out)
}

pub fn consume(args: ConsumeArgs, admin: &AdminArgs) -> Result<(), String> {
    let mut client = admin.connect()?;
    let topic = &args.topic;
    let mut partitions: Vec<i32> =
        topic_metadata(&mut client, topic)?.partitions.iter().map(|p| p.partition_index).collect();
    partitions.sort();
    if let Some(p) = args.partition {
        if !partitions.contains(&p) {
            return Err(format!("topic '{topic}' has no partition {p}"));
        }
        partitions = vec![p];
    }
    let start = if args.from_beginning { EARLIEST } else { LATEST };
    let mut positions = list_offsets(&mut client, topic, &partitions, start)?;
    if admin.format == OutputFormat::Table {
        emit(&format!("{:<9}  {:<8}  {:<8}  VALUE\n", "PARTITION", "OFFSET", "KEY"))?;
    }
    let mut printed = 0u64;
    let mut last_record = Instant::now();
    while args.max_messages.is_none_or(|max| printed < max) {
        let idle_left = args.timeout_ms.map(|t| {
            Duration::from_millis(t).saturating_sub(last_record.elapsed()).as_millis() as u64
        });
        if idle_left == Some(0) {
            break;
        }
        let max_wait_ms = idle_left.unwrap_or(FETCH_MAX_WAIT_MS).min(FETCH_MAX_WAIT_MS);
        let request = fetch_request(topic, &partitions, &positions, max_wait_ms as i32);
        let fetched = fetch_records(&mut client, topic, request)?;
        for (partition, record) in fetched {
            let index = partitions.iter().position(|p| *p == partition);
            let Some(index) = index.filter(|i| record.offset >= positions[*i]) else { continue };
            positions[index] = record.offset + 1;
            if args.max_messages.is_some_and(|max| printed >= max) {
                break;
            }
            print_record(admin.format, partition, &record)?;
            printed += 1;
            last_record = Instant::now();
        }
    }
    Ok(())
}

fn fetch_request(
    topic: &str,
    partitions: &[i32],
    positions: &[i64],
    max_wait_ms: i32,
) -> FetchRequest {
    let partitions = partitions
        .iter()
        .zip(positions)
        .map(|(p, offset)| {
            FetchPartition::default()
                .with_partition(*p)
                .with_fetch_offset(*offset)
                .with_partition_max_bytes(PARTITION_MAX_BYTES)
        })
        .collect();
    FetchRequest::default()
        .with_replica_id((-1).into())
        .with_max_wait_ms(max_wait_ms)
        .with_min_bytes(1)
        .with_max_bytes(FETCH_MAX_BYTES)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(topic_name(topic))
            .with_partitions(partitions)])
}

/// Sends one fetch; returns its records (not control records) with their partitions.
fn fetch_records(
    client: &mut Client,
    topic: &str,
    request: FetchRequest,
) -> Result<Vec<(i32, Record)>, String> {
    let response = client.call(&request)?;
    check(response.error_code, &format!("fetch from topic '{topic}'"), None)?;
    let mut records = Vec::new();
    for partition in response.responses.into_iter().flat_map(|t| t.partitions) {
        let index = partition.partition_index;
        check(partition.error_code, &format!("partition {index} of topic '{topic}'"), None)?;
        let bytes = partition.records.unwrap_or_default();
        let batches = complete_batches(bytes.clone());
        if batches.is_empty() && !bytes.is_empty() {
            // Refetching would return the same cut batch forever.
            return Err(format!(
                "partition {index} of topic '{topic}' holds a record batch larger than this \
                 consumer's fetch size ({PARTITION_MAX_BYTES} bytes)"
            ));
        }
        for mut batch in batches {
            let set = RecordBatchDecoder::decode(&mut batch).map_err(|e| {
                format!("cannot decode records of partition {index} of topic '{topic}': {e}")
            })?;
            records.extend(set.records.into_iter().filter(|r| !r.control).map(|r| (index, r)));
        }
    }
    Ok(records)
}

/// The whole batches in fetched bytes: a broker may cut the last one at the size limit.
fn complete_batches(mut records: Bytes) -> Vec<Bytes> {
    // base_offset i64, then batch_length i32 counting the bytes after it.
    const LENGTH_END: usize = 12;
    let mut batches = Vec::new();
    while records.len() >= LENGTH_END {
        let batch_length = i32::from_be_bytes([records[8], records[9], records[10], records[11]]);
        let total = LENGTH_END + usize::try_from(batch_length).unwrap_or(usize::MAX - LENGTH_END);
        if total > records.len() {
            break;
        }
        batches.push(records.split_to(total));
    }
    batches
}

fn print_record(format: OutputFormat, partition: i32, record: &Record) -> Result<(), String> {
    let text = |b: &Option<Bytes>| b.as_ref().map(|b| String::from_utf8_lossy(b).into_owned());
    let (key, value) = (text(&record.key), text(&record.value));
    let offset = record.offset;
    let line = match format {
        OutputFormat::Table => {
            let key = key.unwrap_or_else(|| "-".into());
            let value = value.unwrap_or_default();
            format!("{partition:<9}  {offset:<8}  {key:<8}  {value}\n")
        }
        OutputFormat::Json => {
            let object = serde_json::json!({
                "partition": partition, "offset": offset, "key": key, "value": value,
                "timestamp": record.timestamp,
            });
            format!("{object}\n")
        }
    };
    emit(&line)
}
