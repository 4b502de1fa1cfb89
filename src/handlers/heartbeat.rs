//! Heartbeat (v0-v4): keeps a member's session; says when the group is rebalancing.

use std::rc::Rc;

use kafka_protocol::messages::heartbeat_request::HeartbeatRequest;
use kafka_protocol::messages::heartbeat_response::HeartbeatResponse;
use kafka_protocol::messages::ResponseKind;
use shardlog_net::Reply;
use shardlog_shards::Shard;

use shardlog_shards::acl::AclOperation::Read;

use super::authz::{refused, Caller};
use super::errors::group_error_code;
use super::errors::GROUP_AUTHORIZATION_FAILED;

pub fn handle(shard: Rc<Shard>, caller: &Caller, request: HeartbeatRequest) -> Reply {
    if !caller.group(Read, request.group_id.0.as_str()) {
        let response = HeartbeatResponse::default().with_error_code(GROUP_AUTHORIZATION_FAILED);
        return refused(ResponseKind::Heartbeat(response));
    }
    let result = shard.heartbeat(
        request.group_id.0.as_str(),
        request.generation_id,
        request.member_id.as_str(),
    );
    let code = result.err().map_or(0, |e| group_error_code(&e));
    let response = HeartbeatResponse::default().with_error_code(code);
    Box::pin(async move { Some(ResponseKind::Heartbeat(response)) })
}
