//! Fetch (v4-v18): the read hot path, top to bottom.
//!
//! Each partition is read on its owner shard from the stored batch bytes (no
//! re-encoding), never above the high watermark; with isolation_level=1 (read_committed)
//! never above the last stable offset, with the aborted transactions the client must
//! drop (see shards' `txn::partition`). With fewer than `min_bytes` available
//! the request parks until a flush moves a high watermark or `max_wait_ms` passes.
//!
//! Fetch sessions (KIP-227): this broker declines them by answering session id 0, which
//! clients treat as "send full requests"; a request naming a session we never created
//! gets FETCH_SESSION_ID_NOT_FOUND.
//!
//! v13+ name topics by id: ids are resolved through this shard's topic table, and an
//! unknown id gets UNKNOWN_TOPIC_ID on each of its partitions. Fetch v0-v3 (message
//! format v0/v1) are refused before decoding: the log stores magic-2 batches only.

use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::fetch_request::FetchRequest;
use kafka_protocol::messages::fetch_response::{
    AbortedTransaction, FetchResponse, FetchableTopicResponse, PartitionData,
};
use kafka_protocol::messages::{ProducerId, ResponseKind, TopicName};
use kafka_protocol::protocol::StrBytes;
use shardlog_net::Reply;
use shardlog_shards::{PartitionRead, Shard};
use uuid::Uuid;

use super::errors::{self, partition_error_code};
use super::str_bytes;

/// Kafka's fetch.max.wait.ms upper bound is the client's business; this caps a hostile one.
const MAX_WAIT_CAP: Duration = Duration::from_secs(60);

/// `fetch_max_bytes` caps the request's own `max_bytes` (--fetch-max-bytes).
pub fn handle(
    shard: Rc<Shard>,
    request: FetchRequest,
    version: i16,
    fetch_max_bytes: usize,
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
        let mut unknown_ids = Vec::new();
        // (name, id) of each topic asked for by id (v13+), to answer with its id.
        let mut ids = Vec::new();
        let table = shard.table();
        for topic in &request.topics {
            let name = if version >= 13 {
                let id = topic.topic_id;
                match table.topics.values().find(|t| Uuid::from_bytes(t.topic_id) == id) {
                    Some(meta) => {
                        ids.push((meta.name.clone(), id));
                        meta.name.clone()
                    }
                    None => {
                        let partitions = topic.partitions.iter().map(|p| p.partition);
                        unknown_ids.push(unknown_topic_id(id, partitions));
                        continue;
                    }
                }
            } else {
                topic.topic.0.as_str().to_string()
            };
            for partition in &topic.partitions {
                reads.push(PartitionRead {
                    topic: name.clone(),
                    partition: partition.partition,
                    fetch_offset: partition.fetch_offset,
                    partition_max_bytes: partition.partition_max_bytes.max(0) as usize,
                    read_committed,
                });
            }
        }
        let max_wait = Duration::from_millis(request.max_wait_ms.max(0) as u64).min(MAX_WAIT_CAP);
        let min_bytes = request.min_bytes.max(0) as usize;
        let max_bytes = (request.max_bytes.max(0) as usize).min(fetch_max_bytes);
        let results = shard.fetch(reads, max_wait, min_bytes, max_bytes).await;
        let mut responses: Vec<FetchableTopicResponse> = Vec::new();
        for data in results {
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
            match responses.last_mut() {
                Some(last) if last.topic.0.as_str() == data.topic => {
                    last.partitions.push(partition)
                }
                _ => {
                    let id = ids.iter().find(|(name, _)| *name == data.topic);
                    responses.push(
                        FetchableTopicResponse::default()
                            .with_topic(TopicName(str_bytes(&data.topic)))
                            .with_topic_id(id.map_or(Uuid::nil(), |(_, id)| *id))
                            .with_partitions(vec![partition]),
                    )
                }
            }
        }
        responses.extend(unknown_ids);
        let response = FetchResponse::default().with_session_id(0).with_responses(responses);
        Some(ResponseKind::Fetch(response))
    })
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

/// The answer for a topic id this broker does not know (v13+).
fn unknown_topic_id(id: Uuid, partitions: impl Iterator<Item = i32>) -> FetchableTopicResponse {
    let partitions = partitions
        .map(|index| {
            PartitionData::default()
                .with_partition_index(index)
                .with_error_code(errors::UNKNOWN_TOPIC_ID)
                .with_high_watermark(-1)
                .with_preferred_read_replica((-1).into())
                .with_records(Some(Bytes::new()))
        })
        .collect();
    FetchableTopicResponse::default()
        .with_topic(TopicName(StrBytes::default()))
        .with_topic_id(id)
        .with_partitions(partitions)
}
