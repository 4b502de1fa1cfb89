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

use shardlog_shards::acl::AclOperation;

use super::authz::Caller;
use super::errors::group_error_code;

pub fn handle(shard: Rc<Shard>, caller: Caller, request: OffsetCommitRequest) -> Reply {
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
        let group_id = request.group_id.0.as_str();
        let commit = |allowed| {
            let (generation, member_id) =
                (request.generation_id_or_member_epoch, request.member_id.as_str());
            shard.commit_offsets(group_id, generation, member_id, allowed)
        };
        let results = commit_allowed(&caller, group_id, partitions, commit).await;
        let topics = response_topics!(
            request.topics,
            &results,
            OffsetCommitResponseTopic,
            OffsetCommitResponsePartition
        );
        Some(ResponseKind::OffsetCommit(OffsetCommitResponse::default().with_topics(topics)))
    })
}

/// OffsetCommit and TxnOffsetCommit: READ on the group, then commits only the partitions
/// of topics the caller may READ; the others get TOPIC_AUTHORIZATION_FAILED.
pub(super) async fn commit_allowed<F, Fut>(
    caller: &Caller,
    group_id: &str,
    partitions: Vec<OffsetCommitPartition>,
    commit: F,
) -> CommitResults
where
    F: FnOnce(Vec<OffsetCommitPartition>) -> Fut,
    Fut: std::future::Future<Output = CommitResults>,
{
    if !caller.group(AclOperation::Read, group_id) {
        return Err(GroupError::GroupAuthorizationFailed);
    }
    let allowed: Vec<bool> =
        partitions.iter().map(|p| caller.topic(AclOperation::Read, &p.topic)).collect();
    if allowed.iter().all(|a| *a) {
        return commit(partitions).await;
    }
    let to_commit: Vec<_> =
        partitions.into_iter().zip(&allowed).filter_map(|(p, a)| a.then_some(p)).collect();
    let count = to_commit.len();
    let committed = match count {
        0 => Vec::new(),
        _ => commit(to_commit).await.unwrap_or_else(|e| vec![Err(e); count]),
    };
    let mut committed = committed.into_iter();
    let merged = allowed.iter().map(|allowed| match allowed {
        true => committed.next().expect("a result per committed partition"),
        false => Err(GroupError::TopicAuthorizationFailed),
    });
    Ok(merged.collect())
}

/// What the coordinator answers a commit: per partition, or one error for all.
pub(super) type CommitResults = Result<Vec<Result<(), GroupError>>, GroupError>;

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
