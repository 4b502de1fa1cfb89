//! OffsetForLeaderEpoch (v2-v4, KIP-320): where a leader epoch ended in a partition, from
//! its leader-epoch cache (`shardlog_storage::LeaderEpochs`), so a consumer can tell
//! whether the log it read was truncated under it after a leader change. Answered by the
//! partition's leader only, on the shard that owns it (routed as ListOffsets is).
//!
//! current_leader_epoch (-1: none) is checked first: older than the
//! partition's epoch is FENCED_LEADER_EPOCH, newer is UNKNOWN_LEADER_EPOCH. replica_id
//! (v3+) is -1 for a consumer; a follower's request (>= 0) gets the same answer. As Kafka
//! since KIP-320, ClusterAction on the cluster or Describe on the topic authorizes.

use std::rc::Rc;

use kafka_protocol::messages::offset_for_leader_epoch_request::{
    OffsetForLeaderEpochRequest, OffsetForLeaderPartition,
};
use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderEpochResponse, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::ResponseKind;
use shardlog_net::Reply;
use shardlog_shards::acl::AclOperation;
use shardlog_shards::Shard;

use super::authz::Caller;
use super::errors::{self, partition_error_code};

pub fn handle(shard: Rc<Shard>, caller: Caller, request: OffsetForLeaderEpochRequest) -> Reply {
    Box::pin(async move {
        let cluster_action = caller.cluster(AclOperation::ClusterAction);
        let mut topics = Vec::with_capacity(request.topics.len());
        for topic in request.topics {
            let name = topic.topic.0.as_str().to_string();
            let authorized = cluster_action || caller.topic(AclOperation::Describe, &name);
            let mut partitions = Vec::with_capacity(topic.partitions.len());
            for partition in topic.partitions {
                partitions.push(match authorized {
                    true => end_offset(&shard, &name, &partition).await,
                    false => EpochEndOffset::default()
                        .with_partition(partition.partition)
                        .with_error_code(errors::TOPIC_AUTHORIZATION_FAILED),
                });
            }
            topics.push(
                OffsetForLeaderTopicResult::default()
                    .with_topic(topic.topic)
                    .with_partitions(partitions),
            );
        }
        let response = OffsetForLeaderEpochResponse::default().with_topics(topics);
        Some(ResponseKind::OffsetForLeaderEpoch(response))
    })
}

async fn end_offset(
    shard: &Shard,
    topic: &str,
    partition: &OffsetForLeaderPartition,
) -> EpochEndOffset {
    let response = EpochEndOffset::default().with_partition(partition.partition);
    let found = shard
        .offset_for_leader_epoch(
            topic,
            partition.partition,
            partition.current_leader_epoch,
            partition.leader_epoch,
        )
        .await;
    match found {
        Ok((leader_epoch, end_offset)) => response
            .with_error_code(errors::NONE)
            .with_leader_epoch(leader_epoch)
            .with_end_offset(end_offset),
        // The defaults: leader_epoch -1, end_offset -1 (Kafka's UNDEFINED answers).
        Err(e) => response.with_error_code(partition_error_code(&e)),
    }
}
