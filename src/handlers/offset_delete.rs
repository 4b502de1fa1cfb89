//! OffsetDelete (v0): deletes a group's committed offsets for partitions of topics the
//! group is not subscribed to (GROUP_SUBSCRIBED_TO_TOPIC otherwise).

use std::rc::Rc;

use kafka_protocol::messages::offset_delete_request::OffsetDeleteRequest;
use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponse, OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::messages::ResponseKind;
use shardlog_net::Reply;
use shardlog_shards::Shard;

use shardlog_shards::acl::AclOperation;

use super::authz::Caller;
use super::errors::{self, group_error_code};

/// DELETE on the group; partitions of topics the caller may not READ are left as they are
/// and answered TOPIC_AUTHORIZATION_FAILED.
pub fn handle(shard: Rc<Shard>, caller: Caller, request: OffsetDeleteRequest) -> Reply {
    Box::pin(async move {
        if !caller.group(AclOperation::Delete, request.group_id.0.as_str()) {
            let code = errors::GROUP_AUTHORIZATION_FAILED;
            return Some(ResponseKind::OffsetDelete(
                OffsetDeleteResponse::default().with_error_code(code),
            ));
        }
        let readable = |topic: &str| caller.topic(AclOperation::Read, topic);
        let partitions: Vec<(String, i32)> = request
            .topics
            .iter()
            .filter(|t| readable(t.name.0.as_str()))
            .flat_map(|t| {
                t.partitions.iter().map(|p| (t.name.0.as_str().to_string(), p.partition_index))
            })
            .collect();
        let results = match shard.delete_offsets(request.group_id.0.as_str(), partitions).await {
            Ok(results) => results,
            Err(e) => {
                let response =
                    OffsetDeleteResponse::default().with_error_code(group_error_code(&e));
                return Some(ResponseKind::OffsetDelete(response));
            }
        };
        let mut results = results.into_iter();
        let topics = request
            .topics
            .into_iter()
            .map(|t| {
                let readable = readable(t.name.0.as_str());
                let partitions = t
                    .partitions
                    .iter()
                    .map(|p| {
                        let code = if !readable {
                            errors::TOPIC_AUTHORIZATION_FAILED
                        } else {
                            results.next().and_then(|r| r.err()).map_or(0, |e| group_error_code(&e))
                        };
                        OffsetDeleteResponsePartition::default()
                            .with_partition_index(p.partition_index)
                            .with_error_code(code)
                    })
                    .collect();
                OffsetDeleteResponseTopic::default().with_name(t.name).with_partitions(partitions)
            })
            .collect();
        Some(ResponseKind::OffsetDelete(OffsetDeleteResponse::default().with_topics(topics)))
    })
}
