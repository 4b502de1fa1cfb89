//! JoinGroup (v0-v9): parked until the group's rebalance completes. From v4 a member
//! without an id first gets MEMBER_ID_REQUIRED with the id to use.

use std::rc::Rc;

use kafka_protocol::messages::join_group_request::JoinGroupRequest;
use kafka_protocol::messages::join_group_response::{JoinGroupResponse, JoinGroupResponseMember};
use kafka_protocol::messages::ResponseKind;
use shardlog_net::Reply;
use shardlog_shards::group::JoinRequest;
use shardlog_shards::Shard;

use shardlog_shards::acl::AclOperation::Read;

use super::authz::{refused, Caller};
use super::errors::group_error_code;
use super::errors::GROUP_AUTHORIZATION_FAILED;
use super::str_bytes;

pub fn handle(
    shard: Rc<Shard>,
    caller: &Caller,
    request: JoinGroupRequest,
    version: i16,
    client_id: String,
    client_host: String,
) -> Reply {
    if !caller.group(Read, request.group_id.0.as_str()) {
        let response = JoinGroupResponse::default().with_error_code(GROUP_AUTHORIZATION_FAILED);
        return refused(ResponseKind::JoinGroup(response));
    }
    Box::pin(async move {
        let join = JoinRequest {
            member_id: request.member_id.as_str().to_string(),
            group_instance_id: request.group_instance_id.as_ref().map(|s| s.as_str().to_string()),
            client_id,
            client_host,
            session_timeout_ms: request.session_timeout_ms.max(0) as u64,
            // v0 has no rebalance timeout: Kafka uses the session timeout.
            rebalance_timeout_ms: if version == 0 {
                request.session_timeout_ms.max(0) as u64
            } else {
                request.rebalance_timeout_ms.max(0) as u64
            },
            protocol_type: request.protocol_type.as_str().to_string(),
            protocols: request
                .protocols
                .iter()
                .map(|p| (p.name.as_str().to_string(), p.metadata.clone()))
                .collect(),
            require_known_member_id: version >= 4,
        };
        let outcome = shard.join_group(request.group_id.0.as_str(), join).await;
        let members = outcome
            .members
            .into_iter()
            .map(|(member_id, instance_id, metadata)| {
                JoinGroupResponseMember::default()
                    .with_member_id(str_bytes(&member_id))
                    .with_group_instance_id(instance_id.map(|i| str_bytes(&i)))
                    .with_metadata(metadata)
            })
            .collect();
        let response = JoinGroupResponse::default()
            .with_error_code(outcome.result.err().map_or(0, |e| group_error_code(&e)))
            .with_generation_id(outcome.generation)
            .with_protocol_type(outcome.protocol_type.map(|p| str_bytes(&p)))
            .with_protocol_name(outcome.protocol.map(|p| str_bytes(&p)))
            .with_leader(str_bytes(&outcome.leader))
            .with_member_id(str_bytes(&outcome.member_id))
            .with_members(members);
        Some(ResponseKind::JoinGroup(response))
    })
}
