//! SyncGroup (v0-v5): the leader hands out assignments; followers wait for them.

use std::rc::Rc;

use kafka_protocol::messages::sync_group_request::SyncGroupRequest;
use kafka_protocol::messages::sync_group_response::SyncGroupResponse;
use kafka_protocol::messages::ResponseKind;
use shardlog_net::Reply;
use shardlog_shards::Shard;

use shardlog_shards::acl::AclOperation::Read;

use super::authz::{refused, Caller};
use super::errors::GROUP_AUTHORIZATION_FAILED;
use super::errors::{self, group_error_code};

pub fn handle(shard: Rc<Shard>, caller: &Caller, request: SyncGroupRequest) -> Reply {
    if !caller.group(Read, request.group_id.0.as_str()) {
        let response = SyncGroupResponse::default().with_error_code(GROUP_AUTHORIZATION_FAILED);
        return refused(ResponseKind::SyncGroup(response));
    }
    Box::pin(async move {
        let assignments = request
            .assignments
            .iter()
            .map(|a| (a.member_id.as_str().to_string(), a.assignment.clone()))
            .collect();
        let group_id = request.group_id.0.as_str();
        let result = shard
            .sync_group(group_id, request.generation_id, request.member_id.as_str(), assignments)
            .await;
        let response = match result {
            Ok(assignment) => {
                let protocol = shard.groups.describe(group_id);
                SyncGroupResponse::default()
                    .with_error_code(errors::NONE)
                    .with_assignment(assignment)
                    .with_protocol_type(
                        protocol.as_ref().map(|g| super::str_bytes(&g.protocol_type)),
                    )
                    .with_protocol_name(protocol.as_ref().map(|g| super::str_bytes(&g.protocol)))
            }
            Err(e) => SyncGroupResponse::default().with_error_code(group_error_code(&e)),
        };
        Some(ResponseKind::SyncGroup(response))
    })
}
