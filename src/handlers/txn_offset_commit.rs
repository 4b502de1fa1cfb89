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
use shardlog_shards::Shard;

use shardlog_shards::acl::AclOperation::Write;
use shardlog_shards::GroupError;

use super::authz::Caller;
use super::offset_commit::{commit_allowed, commit_partition, response_topics};

pub fn handle(
    shard: Rc<Shard>,
    caller: Caller,
    request: TxnOffsetCommitRequest,
    version: i16,
) -> Reply {
    Box::pin(async move {
        let mut partitions = Vec::new();
        for topic in &request.topics {
            for p in &topic.partitions {
                partitions.push(commit_partition(
                    &topic.name,
                    p.partition_index,
                    p.committed_offset,
                    p.committed_leader_epoch,
                    p.committed_metadata.as_ref(),
                ));
            }
        }
        let (generation, member_id) = if version >= 3 {
            (request.generation_id, request.member_id.as_str())
        } else {
            (-1, "")
        };
        let group_id = request.group_id.0.as_str();
        let commit = |allowed| {
            shard.txn_offset_commit(group_id, request.producer_id.0, generation, member_id, allowed)
        };
        let results = match caller.transactional_id(Write, request.transactional_id.as_str()) {
            true => commit_allowed(&caller, group_id, partitions, commit).await,
            false => Err(GroupError::TransactionalIdAuthorizationFailed),
        };
        let topics = response_topics!(
            request.topics,
            &results,
            TxnOffsetCommitResponseTopic,
            TxnOffsetCommitResponsePartition
        );
        Some(ResponseKind::TxnOffsetCommit(TxnOffsetCommitResponse::default().with_topics(topics)))
    })
}
