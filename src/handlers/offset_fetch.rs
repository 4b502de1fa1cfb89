//! OffsetFetch (v1-v9): committed offsets of one group (v1-v7) or several (v8+), all of a
//! group's partitions when none are named. -1 means nothing committed. Offsets a
//! transaction commits are not shown before it commits; with `require_stable` (v7+) a
//! partition that has such pending offsets gets UNSTABLE_OFFSET_COMMIT (retriable), as
//! in Kafka.

use std::rc::Rc;

use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequest;
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponse, OffsetFetchResponseGroup, OffsetFetchResponsePartition,
    OffsetFetchResponsePartitions, OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::{GroupId, ResponseKind, TopicName};
use shardlog_net::Reply;
use shardlog_shards::group::offsets::Committed;
use shardlog_shards::Shard;

use shardlog_shards::acl::AclOperation;

use super::authz::Caller;
use super::errors::{self, group_error_code};
use super::str_bytes;

/// Per partition: the committed offset, and an error code (UNSTABLE_OFFSET_COMMIT or 0).
type Found = Vec<((String, i32), Option<Committed>, i16)>;
type ByTopic = Vec<(String, Vec<(i32, Option<Committed>, i16)>)>;

pub fn handle(
    shard: Rc<Shard>,
    caller: &Caller,
    request: OffsetFetchRequest,
    version: i16,
) -> Reply {
    let response = if version >= 8 {
        let groups = request
            .groups
            .iter()
            .map(|g| {
                let asked = g.topics.as_ref().map(|topics| {
                    topics
                        .iter()
                        .flat_map(|t| {
                            t.partition_indexes.iter().map(|p| (t.name.0.as_str().to_string(), *p))
                        })
                        .collect::<Vec<_>>()
                });
                let group = OffsetFetchResponseGroup::default().with_group_id(g.group_id.clone());
                match lookup(&shard, caller, &g.group_id, asked, request.require_stable) {
                    Ok(found) => group.with_topics(group_topics(found)),
                    Err(code) => group.with_error_code(code),
                }
            })
            .collect();
        OffsetFetchResponse::default().with_groups(groups)
    } else {
        let asked = request.topics.as_ref().map(|topics| {
            topics
                .iter()
                .flat_map(|t| {
                    t.partition_indexes.iter().map(|p| (t.name.0.as_str().to_string(), *p))
                })
                .collect::<Vec<_>>()
        });
        match lookup(&shard, caller, &request.group_id, asked, request.require_stable) {
            Ok(found) => OffsetFetchResponse::default().with_topics(single_topics(found)),
            // v1 has no top-level error code: the error goes on every asked partition.
            Err(code) if version < 2 => {
                let found = request.topics.iter().flatten().flat_map(|t| {
                    let name = t.name.0.as_str();
                    t.partition_indexes.iter().map(move |p| ((name.to_string(), *p), None, 0))
                });
                let mut topics = single_topics(found.collect());
                topics
                    .iter_mut()
                    .flat_map(|t| t.partitions.iter_mut())
                    .for_each(|p| p.error_code = code);
                OffsetFetchResponse::default().with_topics(topics)
            }
            Err(code) => OffsetFetchResponse::default().with_error_code(code),
        }
    };
    Box::pin(async move { Some(ResponseKind::OffsetFetch(response)) })
}

/// DESCRIBE on the group; partitions of topics the caller may not DESCRIBE get
/// TOPIC_AUTHORIZATION_FAILED when named, and are left out of "all partitions".
fn lookup(
    shard: &Shard,
    caller: &Caller,
    group_id: &GroupId,
    asked: Option<Vec<(String, i32)>>,
    require_stable: bool,
) -> Result<Found, i16> {
    let group_id = group_id.0.as_str();
    if !caller.group(AclOperation::Describe, group_id) {
        return Err(errors::GROUP_AUTHORIZATION_FAILED);
    }
    shard.check_coordinator(group_id).map_err(|e| group_error_code(&e))?;
    let named = asked.is_some();
    let committed = shard.groups.committed(group_id, asked.as_deref());
    let unstable = |key: &(String, i32)| {
        require_stable && shard.has_pending_offsets(group_id, Some(std::slice::from_ref(key)))
    };
    Ok(committed
        .into_iter()
        .filter(|(key, _)| named || caller.topic(AclOperation::Describe, &key.0))
        .map(|(key, c)| {
            if !caller.topic(AclOperation::Describe, &key.0) {
                (key, None, errors::TOPIC_AUTHORIZATION_FAILED)
            } else if unstable(&key) {
                (key, None, errors::UNSTABLE_OFFSET_COMMIT)
            } else {
                (key, c, errors::NONE)
            }
        })
        .collect())
}

/// Groups consecutive partitions of one topic (input is in request or key order).
fn by_topic(found: Found) -> ByTopic {
    let mut out: ByTopic = Vec::new();
    for ((topic, partition), committed, code) in found {
        match out.last_mut() {
            Some((last, partitions)) if *last == topic => {
                partitions.push((partition, committed, code))
            }
            _ => out.push((topic, vec![(partition, committed, code)])),
        }
    }
    out
}

/// v1-v7 (`...Topic`) and v8+ (`...Topics`) responses use distinct generated types with
/// the same fields: one body for both.
macro_rules! response_topics {
    ($name:ident, $topic:ty, $partition:ty) => {
        fn $name(found: Found) -> Vec<$topic> {
            by_topic(found)
                .into_iter()
                .map(|(topic, partitions)| {
                    let partitions = partitions
                        .into_iter()
                        .map(|(index, c, code)| {
                            let (offset, epoch, metadata) = fields(c);
                            <$partition>::default()
                                .with_partition_index(index)
                                .with_error_code(code)
                                .with_committed_offset(offset)
                                .with_committed_leader_epoch(epoch)
                                .with_metadata(metadata)
                        })
                        .collect();
                    <$topic>::default()
                        .with_name(TopicName(str_bytes(&topic)))
                        .with_partitions(partitions)
                })
                .collect()
        }
    };
}

response_topics!(single_topics, OffsetFetchResponseTopic, OffsetFetchResponsePartition);
response_topics!(group_topics, OffsetFetchResponseTopics, OffsetFetchResponsePartitions);

fn fields(committed: Option<Committed>) -> (i64, i32, Option<kafka_protocol::protocol::StrBytes>) {
    match committed {
        Some(c) => (c.offset, c.leader_epoch, Some(str_bytes(c.metadata.as_deref().unwrap_or("")))),
        None => (-1, -1, Some(str_bytes(""))),
    }
}
