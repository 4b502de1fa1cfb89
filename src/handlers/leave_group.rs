//! LeaveGroup (v0-v5): one member (v0-v2) or a batch of members (v3+).

use std::rc::Rc;

use kafka_protocol::messages::leave_group_request::LeaveGroupRequest;
use kafka_protocol::messages::leave_group_response::{LeaveGroupResponse, MemberResponse};
use kafka_protocol::messages::ResponseKind;
use shardlog_net::Reply;
use shardlog_shards::Shard;

use shardlog_shards::acl::AclOperation::Read;

use super::authz::{refused, Caller};
use super::errors::group_error_code;
use super::errors::GROUP_AUTHORIZATION_FAILED;

pub fn handle(
    shard: Rc<Shard>,
    caller: &Caller,
    request: LeaveGroupRequest,
    version: i16,
) -> Reply {
    if !caller.group(Read, request.group_id.0.as_str()) {
        let response = LeaveGroupResponse::default().with_error_code(GROUP_AUTHORIZATION_FAILED);
        return refused(ResponseKind::LeaveGroup(response));
    }
    let members: Vec<(String, Option<String>)> = if version >= 3 {
        request
            .members
            .iter()
            .map(|m| {
                let instance = m.group_instance_id.as_ref().map(|i| i.as_str().to_string());
                (m.member_id.as_str().to_string(), instance)
            })
            .collect()
    } else {
        vec![(request.member_id.as_str().to_string(), None)]
    };
    let response = match shard.leave_group(request.group_id.0.as_str(), &members) {
        Err(e) => LeaveGroupResponse::default().with_error_code(group_error_code(&e)),
        Ok(results) if version >= 3 => {
            let members = members
                .into_iter()
                .zip(results)
                .map(|((member_id, instance_id), result)| {
                    MemberResponse::default()
                        .with_member_id(super::str_bytes(&member_id))
                        .with_group_instance_id(instance_id.map(|i| super::str_bytes(&i)))
                        .with_error_code(result.err().map_or(0, |e| group_error_code(&e)))
                })
                .collect();
            LeaveGroupResponse::default().with_members(members)
        }
        Ok(results) => {
            let code = results.into_iter().next().and_then(|r| r.err());
            LeaveGroupResponse::default().with_error_code(code.map_or(0, |e| group_error_code(&e)))
        }
    };
    Box::pin(async move { Some(ResponseKind::LeaveGroup(response)) })
}
