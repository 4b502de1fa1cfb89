//! TxnOffsetCommit (v0-v4; v4 only lets the broker answer KIP-890's TRANSACTION_ABORTABLE, never
//! sent here): offsets a transaction commits, sent to the group's coordinator
//! shard. They are durable there before the answer but pending: OffsetFetch shows them
//! only once the transaction commits (shards' `txn::offsets`). v3 carries the consumer's
//! generation and member id, checked as OffsetCommit's (KIP-447).

use std::rc::Rc;

use kafka_protocol::messages::txn_offset_commit_request::TxnOffsetCommitRequest;
use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponse, TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::ResponseKind;
use shardlog_net::Reply;
use shardlog_shards::group::OffsetCommitPartition;
use shardlog_shards::{GroupError, Shard};

use super::errors::group_error_code;

pub fn handle(shard: Rc<Shard>, request: TxnOffsetCommitRequest, version: i16) -> Reply {
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
                    commit_time_ms: None,
                });
            }
        }
        let (generation, member_id) = if version >= 3 {
            (request.generation_id, request.member_id.as_str())
        } else {
            (-1, "")
        };
        let results = shard
            .txn_offset_commit(
                request.group_id.0.as_str(),
                request.producer_id.0,
                generation,
                member_id,
                partitions,
            )
            .await;
        let code = |e: &GroupError| group_error_code(e);
        let mut index = 0;
        let mut next_code = || {
            let c = match &results {
                Ok(per_partition) => per_partition[index].err().map_or(0, |e| code(&e)),
                Err(e) => code(e),
            };
            index += 1;
            c
        };
        let topics = request
            .topics
            .into_iter()
            .map(|topic| {
                let partitions = topic
                    .partitions
                    .iter()
                    .map(|p| {
                        TxnOffsetCommitResponsePartition::default()
                            .with_partition_index(p.partition_index)
                            .with_error_code(next_code())
                    })
                    .collect();
                TxnOffsetCommitResponseTopic::default()
                    .with_name(topic.name)
                    .with_partitions(partitions)
            })
            .collect();
        Some(ResponseKind::TxnOffsetCommit(TxnOffsetCommitResponse::default().with_topics(topics)))
    })
}
