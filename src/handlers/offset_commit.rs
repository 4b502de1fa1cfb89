//! OffsetCommit (v0-v9): the commit is written to the coordinator shard's log and
//! fdatasync'd before it is answered, so an answered commit survives a crash.
//!
//! v0 carries no generation or member (-1 and "": accepted while the group has no
//! members, as Kafka does for commits from outside a group). v1's per-partition commit
//! timestamp, when set, is stored as the commit time (offset retention counts from it).
//! v2-v4's retention time is decoded but not honoured: the group-level
//! `offsets.retention` applies (docs/compatibility.md).

use std::rc::Rc;

use kafka_protocol::messages::offset_commit_request::OffsetCommitRequest;
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponse, OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::{ResponseKind, TopicName};
use kafka_protocol::protocol::StrBytes;
use shardlog_net::Reply;
use shardlog_shards::group::OffsetCommitPartition;
use shardlog_shards::{GroupError, Shard};

use super::errors::group_error_code;

pub fn handle(shard: Rc<Shard>, request: OffsetCommitRequest) -> Reply {
    Box::pin(async move {
        let mut partitions = Vec::new();
        for topic in &request.topics {
            for p in &topic.partitions {
                let mut partition = commit_partition(
                    &topic.name,
                    p.partition_index,
                    p.committed_offset,
                    p.committed_leader_epoch,
                    p.committed_metadata.as_ref(),
                );
                partition.commit_time_ms = (p.commit_timestamp >= 0).then_some(p.commit_timestamp);
                partitions.push(partition);
            }
        }
        let results = shard
            .commit_offsets(
                request.group_id.0.as_str(),
                request.generation_id_or_member_epoch,
                request.member_id.as_str(),
                partitions,
            )
            .await;
        let topics = response_topics!(
            request.topics,
            &results,
            OffsetCommitResponseTopic,
            OffsetCommitResponsePartition
        );
        Some(ResponseKind::OffsetCommit(OffsetCommitResponse::default().with_topics(topics)))
    })
}

/// OffsetCommit and TxnOffsetCommit answer with distinct generated types of the same shape
/// (topics of partitions with an error code, in request order): one body for both.
macro_rules! response_topics {
    ($request_topics:expr, $results:expr, $topic:ty, $partition:ty) => {{
        let count = $request_topics.iter().map(|t| t.partitions.len()).sum();
        let mut codes =
            $crate::handlers::offset_commit::partition_codes($results, count).into_iter();
        $request_topics
            .into_iter()
            .map(|topic| {
                let partitions = topic
                    .partitions
                    .iter()
                    .map(|p| {
                        <$partition>::default()
                            .with_partition_index(p.partition_index)
                            .with_error_code(codes.next().expect("a code per partition"))
                    })
                    .collect();
                <$topic>::default().with_name(topic.name).with_partitions(partitions)
            })
            .collect()
    }};
}
pub(super) use response_topics;

/// One partition of an OffsetCommit or TxnOffsetCommit, as the group coordinator takes it.
pub(super) fn commit_partition(
    topic: &TopicName,
    partition: i32,
    offset: i64,
    leader_epoch: i32,
    metadata: Option<&StrBytes>,
) -> OffsetCommitPartition {
    OffsetCommitPartition {
        topic: topic.0.as_str().to_string(),
        partition,
        offset,
        leader_epoch,
        metadata: metadata.map(|m| m.as_str().to_string()),
        commit_time_ms: None,
    }
}

/// The error code of each partition, in request order: a group-level error applies to
/// every partition of the request.
pub(super) fn partition_codes(
    results: &Result<Vec<Result<(), GroupError>>, GroupError>,
    partitions: usize,
) -> Vec<i16> {
    match results {
        Ok(per_partition) => {
            per_partition.iter().map(|r| r.map_or_else(|e| group_error_code(&e), |_| 0)).collect()
        }
        Err(e) => vec![group_error_code(e); partitions],
    }
}
