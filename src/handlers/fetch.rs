//! Fetch (v4-v12): the read hot path, top to bottom.
//!
//! Each partition is read on its owner shard from the stored batch bytes (no
//! re-encoding), never above the high watermark. With fewer than `min_bytes` available
//! the request parks until a flush moves a high watermark or `max_wait_ms` passes.
//!
//! Fetch sessions (KIP-227): this broker declines them by answering session id 0, which
//! clients treat as "send full requests"; a request naming a session we never created
//! gets FETCH_SESSION_ID_NOT_FOUND.

use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::fetch_request::FetchRequest;
use kafka_protocol::messages::fetch_response::{
    FetchResponse, FetchableTopicResponse, PartitionData,
};
use kafka_protocol::messages::{ResponseKind, TopicName};
use shardlog_net::Reply;
use shardlog_shards::{PartitionRead, Shard};

use super::errors::{self, partition_error_code};
use super::str_bytes;

/// Kafka's fetch.max.wait.ms upper bound is the client's business; this caps a hostile one.
const MAX_WAIT_CAP: Duration = Duration::from_secs(60);

/// `fetch_max_bytes` caps the request's own `max_bytes` (--fetch-max-bytes).
pub fn handle(shard: Rc<Shard>, request: FetchRequest, fetch_max_bytes: usize) -> Reply {
    Box::pin(async move {
        if request.session_id != 0 && request.session_epoch != -1 {
            let response = FetchResponse::default()
                .with_error_code(errors::FETCH_SESSION_ID_NOT_FOUND)
                .with_session_id(0);
            return Some(ResponseKind::Fetch(response));
        }
        let read_committed = request.isolation_level == 1;
        let mut reads = Vec::new();
        for topic in &request.topics {
            for partition in &topic.partitions {
                reads.push(PartitionRead {
                    topic: topic.topic.0.as_str().to_string(),
                    partition: partition.partition,
                    fetch_offset: partition.fetch_offset,
                    partition_max_bytes: partition.partition_max_bytes.max(0) as usize,
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
                    .with_last_stable_offset(fetched.high_watermark)
                    .with_log_start_offset(fetched.log_start_offset)
                    .with_records(Some(fetched.records)),
                Err(e) => PartitionData::default()
                    .with_error_code(partition_error_code(&e))
                    .with_high_watermark(-1)
                    .with_records(Some(Bytes::new())),
            }
            .with_partition_index(data.partition)
            .with_aborted_transactions(read_committed.then(Vec::new))
            .with_preferred_read_replica((-1).into());
            match responses.last_mut() {
                Some(last) if last.topic.0.as_str() == data.topic => {
                    last.partitions.push(partition)
                }
                _ => responses.push(
                    FetchableTopicResponse::default()
                        .with_topic(TopicName(str_bytes(&data.topic)))
                        .with_partitions(vec![partition]),
                ),
            }
        }
        let response = FetchResponse::default().with_session_id(0).with_responses(responses);
        Some(ResponseKind::Fetch(response))
    })
}
