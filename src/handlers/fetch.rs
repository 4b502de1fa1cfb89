//! Fetch (v0-v18): the read hot path, top to bottom.
//!
//! Each partition is read on its owner shard from the stored batch bytes (no
//! re-encoding from v4 on), never above the high watermark; with isolation_level=1
//! (read_committed) never above the last stable offset, with the aborted transactions the
//! client must drop (see shards' `txn::partition`). With fewer than `min_bytes` available
//! the request parks until a flush moves a high watermark or `max_wait_ms` passes.
//!
//! Fetch sessions (KIP-227): this broker declines them by answering session id 0, which
//! clients treat as "send full requests"; a request naming a session we never created
//! gets FETCH_SESSION_ID_NOT_FOUND.
//!
//! v13+ name topics by id: ids are resolved through this shard's topic table, and an
//! unknown id gets UNKNOWN_TOPIC_ID on each of its partitions.
//!
//! v0-v3 read message format v0 (v0-v1) or v1 (v2-v3): the stored batches are converted
//! down (`shardlog_net::legacy_format`), which copies every record; the converted bytes
//! count against `partition_max_bytes` and, in v3, the request's `max_bytes`.

use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::fetch_request::FetchRequest;
use kafka_protocol::messages::fetch_response::{
    AbortedTransaction, FetchResponse, FetchableTopicResponse, PartitionData,
};
use kafka_protocol::messages::{ProducerId, ResponseKind, TopicName};
use kafka_protocol::protocol::StrBytes;
use shardlog_net::{legacy_format, Reply};
use shardlog_shards::{PartitionRead, Shard};
use uuid::Uuid;

use shardlog_shards::acl::AclOperation;

use super::authz::Caller;
use super::errors::{self, partition_error_code};
use super::str_bytes;

/// Kafka's fetch.max.wait.ms upper bound is the client's business; this caps a hostile one.
const MAX_WAIT_CAP: Duration = Duration::from_secs(60);

/// The broker's limits on a Fetch.
pub struct Limits {
    /// Caps the request's own `max_bytes` (--fetch-max-bytes).
    pub fetch_max_bytes: usize,
    /// What a stored compressed batch may decompress to for Fetch v0-v3.
    pub max_records_bytes: usize,
}

pub fn handle(
    shard: Rc<Shard>,
    caller: Caller,
    request: FetchRequest,
    version: i16,
    limits: Limits,
) -> Reply {
    Box::pin(async move {
        if request.session_id != 0 && request.session_epoch != -1 {
            let response = FetchResponse::default()
                .with_error_code(errors::FETCH_SESSION_ID_NOT_FOUND)
                .with_session_id(0);
            return Some(ResponseKind::Fetch(response));
        }
        let read_committed = request.isolation_level == 1;
        let mut reads = Vec::new();
        // Topics answered without a read: unknown ids, topics the caller may not READ.
        let mut refused = Vec::new();
        // (name, id) of each topic asked for by id (v13+), to answer with its id.
        let mut ids = Vec::new();
        let table = shard.table();
        for topic in &request.topics {
            let name = if version >= 13 {
                let id = topic.topic_id;
                match table.topic_by_id(id.into_bytes()) {
                    Some(meta) => {
                        ids.push((meta.name.clone(), id));
                        meta.name.clone()
                    }
                    None => {
                        let partitions = topic.partitions.iter().map(|p| p.partition);
                        let code = errors::UNKNOWN_TOPIC_ID;
                        refused.push(refused_topic("", id, partitions, code));
                        continue;
                    }
                }
            } else {
                topic.topic.0.as_str().to_string()
            };
            if !caller.topic(AclOperation::Read, &name) {
                let partitions = topic.partitions.iter().map(|p| p.partition);
                let code = errors::TOPIC_AUTHORIZATION_FAILED;
                refused.push(refused_topic(&name, topic.topic_id, partitions, code));
                continue;
            }
            for partition in &topic.partitions {
                reads.push(PartitionRead {
                    topic: name.clone(),
                    partition: partition.partition,
                    fetch_offset: partition.fetch_offset,
                    partition_max_bytes: partition.partition_max_bytes.max(0) as usize,
                    read_committed,
                    // v9+ (the decoder leaves -1 before): checked on the owner (KIP-320).
                    current_leader_epoch: partition.current_leader_epoch,
                });
            }
        }
        // Not held across the long poll: a topic change applied meanwhile would copy the
        // whole table (`Shard::apply_changes`).
        drop(table);
        let max_wait = Duration::from_millis(request.max_wait_ms.max(0) as u64).min(MAX_WAIT_CAP);
        let min_bytes = request.min_bytes.max(0) as usize;
        let max_bytes = (request.max_bytes.max(0) as usize).min(limits.fetch_max_bytes);
        let mut legacy = (version < 4).then(|| LegacyFetch {
            reads: reads.clone(),
            budget: max_bytes,
            max_records_bytes: limits.max_records_bytes,
        });
        let results = shard.fetch(reads, max_wait, min_bytes, max_bytes).await;
        let mut responses: Vec<FetchableTopicResponse> = Vec::new();
        for mut data in results {
            if let (Some(legacy), Ok(fetched)) = (&mut legacy, &mut data.result) {
                match legacy.down_convert(version, &data.topic, data.partition, &fetched.records) {
                    Ok(message_set) => fetched.records = message_set,
                    Err(code) => {
                        let failed = PartitionData::default()
                            .with_error_code(code)
                            .with_high_watermark(fetched.high_watermark)
                            .with_records(Some(Bytes::new()));
                        push_partition(
                            &mut responses,
                            &ids,
                            &data.topic,
                            failed.with_partition_index(data.partition),
                        );
                        continue;
                    }
                }
            }
            let partition = match data.result {
                Ok(fetched) => PartitionData::default()
                    .with_error_code(errors::NONE)
                    .with_high_watermark(fetched.high_watermark)
                    .with_last_stable_offset(fetched.last_stable_offset)
                    .with_log_start_offset(fetched.log_start_offset)
                    .with_aborted_transactions(
                        read_committed.then(|| aborted_transactions(&fetched.aborted_transactions)),
                    )
                    .with_records(Some(fetched.records)),
                Err(e) => PartitionData::default()
                    .with_error_code(partition_error_code(&e))
                    .with_high_watermark(-1)
                    .with_records(Some(Bytes::new()))
                    .with_aborted_transactions(read_committed.then(Vec::new)),
            }
            .with_partition_index(data.partition)
            .with_preferred_read_replica((-1).into());
            push_partition(&mut responses, &ids, &data.topic, partition);
        }
        responses.extend(refused);
        let response = FetchResponse::default().with_session_id(0).with_responses(responses);
        Some(ResponseKind::Fetch(response))
    })
}

/// Adds `partition` to the response, under its topic's entry (results come grouped by topic).
fn push_partition(
    responses: &mut Vec<FetchableTopicResponse>,
    ids: &[(String, Uuid)],
    topic: &str,
    partition: PartitionData,
) {
    match responses.last_mut() {
        Some(last) if last.topic.0.as_str() == topic => last.partitions.push(partition),
        _ => {
            let id = ids.iter().find(|(name, _)| name == topic);
            responses.push(
                FetchableTopicResponse::default()
                    .with_topic(TopicName(str_bytes(topic)))
                    .with_topic_id(id.map_or(Uuid::nil(), |(_, id)| *id))
                    .with_partitions(vec![partition]),
            )
        }
    }
}

/// Fetch v0-v3: what down-conversion needs to know of the request.
struct LegacyFetch {
    reads: Vec<PartitionRead>,
    /// What is left of the request's `max_bytes` (v3; v0-v2 have no such limit).
    budget: usize,
    max_records_bytes: usize,
}

impl LegacyFetch {
    /// One partition's stored batches as a message set of magic 0 (Fetch v0-v1) or 1
    /// (v2-v3); an error code when they cannot be converted.
    fn down_convert(
        &mut self,
        version: i16,
        topic: &str,
        partition: i32,
        stored: &Bytes,
    ) -> Result<Bytes, i16> {
        let Some(read) = self.reads.iter().find(|r| r.topic == topic && r.partition == partition)
        else {
            return Ok(Bytes::new());
        };
        let magic = if version < 2 { 0 } else { 1 };
        let limit = read.partition_max_bytes.min(self.budget);
        let fetch_offset = read.fetch_offset;
        let max_records_bytes = self.max_records_bytes;
        match legacy_format::record_batches_to_message_set(
            stored,
            magic,
            fetch_offset,
            limit,
            max_records_bytes,
        ) {
            Ok(message_set) => {
                self.budget = self.budget.saturating_sub(message_set.len());
                Ok(message_set)
            }
            Err(e) => {
                tracing::warn!(topic, partition, "cannot down-convert to magic {magic}: {e}");
                Err(errors::legacy_format_error_code(&e))
            }
        }
    }
}

/// The aborted transactions (producer id, first offset) of a read_committed answer.
fn aborted_transactions(aborted: &[(i64, i64)]) -> Vec<AbortedTransaction> {
    let to_wire = |&(producer_id, first_offset): &(i64, i64)| {
        AbortedTransaction::default()
            .with_producer_id(ProducerId(producer_id))
            .with_first_offset(first_offset)
    };
    aborted.iter().map(to_wire).collect()
}

/// The answer for a topic not read: an id this broker does not know (v13+), a topic the
/// caller may not READ.
fn refused_topic(
    name: &str,
    id: Uuid,
    partitions: impl Iterator<Item = i32>,
    code: i16,
) -> FetchableTopicResponse {
    let partitions = partitions
        .map(|index| {
            PartitionData::default()
                .with_partition_index(index)
                .with_error_code(code)
                .with_high_watermark(-1)
                .with_preferred_read_replica((-1).into())
                .with_records(Some(Bytes::new()))
        })
        .collect();
    FetchableTopicResponse::default()
        .with_topic(TopicName(StrBytes::from_string(name.to_string())))
        .with_topic_id(id)
        .with_partitions(partitions)
}
