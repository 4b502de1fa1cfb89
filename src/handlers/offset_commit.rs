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
use kafka_protocol::messages::ResponseKind;
use shardlog_net::Reply;
use shardlog_shards::group::OffsetCommitPartition;
use shardlog_shards::Shard;

use super::errors::group_error_code;

pub fn handle(shard: Rc<Shard>, request: OffsetCommitRequest) -> Reply {
    Box::pin(async move {
        let mut partitions = Vec::new();
        for topic in &request.topics {
            for p in &topic.partitions {
                partitions.push(OffsetCommitPartition {
                    topic: topic.name.0.as_str().to_string(),
                    partition: p.partition_index,
                    offset: p.committed_offset,
                    leader_epoch: p.committed_leader_epoch,
                    metadata: p.committed_metadata.as_ref().map(|m| m.as_str().to_string()),
                    commit_time_ms: (p.commit_timestamp >= 0).then_some(p.commit_timestamp),
                });
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
        // A group-level error applies to every partition of the request.
        let mut index = 0;
        let mut next_code = || {
            let code = match &results {
                Ok(per_partition) => per_partition[index].err().map_or(0, |e| group_error_code(&e)),
                Err(e) => group_error_code(e),
            };
            index += 1;
            code
        };
        let topics = request
            .topics
            .into_iter()
            .map(|topic| {
                let partitions = topic
                    .partitions
                    .iter()
                    .map(|p| {
                        OffsetCommitResponsePartition::default()
                            .with_partition_index(p.partition_index)
                            .with_error_code(next_code())
                    })
                    .collect();
                OffsetCommitResponseTopic::default()
                    .with_name(topic.name)
                    .with_partitions(partitions)
            })
            .collect();
        Some(ResponseKind::OffsetCommit(OffsetCommitResponse::default().with_topics(topics)))
    })
}
