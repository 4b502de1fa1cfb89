//! DescribeGroups (v0-v5): state, protocol, members with their metadata and assignments.
//! A group this shard does not know is reported as Dead, as Kafka does.

use std::rc::Rc;

use kafka_protocol::messages::describe_groups_request::DescribeGroupsRequest;
use kafka_protocol::messages::describe_groups_response::{
    DescribeGroupsResponse, DescribedGroup, DescribedGroupMember,
};
use kafka_protocol::messages::ResponseKind;
use shardlog_net::Reply;
use shardlog_shards::Shard;

use shardlog_shards::acl::AclOperation;

use super::authz::Caller;
use super::errors::{self, group_error_code};
use super::str_bytes;

pub fn handle(shard: Rc<Shard>, caller: &Caller, request: DescribeGroupsRequest) -> Reply {
    let groups = request
        .groups
        .iter()
        .map(|id| {
            let described = DescribedGroup::default().with_group_id(id.clone());
            if !caller.group(AclOperation::Describe, id.0.as_str()) {
                return described.with_error_code(errors::GROUP_AUTHORIZATION_FAILED);
            }
            if let Err(e) = shard.check_coordinator(id.0.as_str()) {
                return described.with_error_code(group_error_code(&e));
            }
            let Some(group) = shard.groups.describe(id.0.as_str()) else {
                return described.with_error_code(errors::NONE).with_group_state(str_bytes("Dead"));
            };
            let members = group
                .members
                .into_iter()
                .map(|(member_id, instance_id, client_id, client_host, metadata, assignment)| {
                    DescribedGroupMember::default()
                        .with_member_id(str_bytes(&member_id))
                        .with_group_instance_id(instance_id.map(|i| str_bytes(&i)))
                        .with_client_id(str_bytes(&client_id))
                        .with_client_host(str_bytes(&client_host))
                        .with_member_metadata(metadata)
                        .with_member_assignment(assignment)
                })
                .collect();
            described
                .with_error_code(errors::NONE)
                .with_group_state(str_bytes(group.state.name()))
                .with_protocol_type(str_bytes(&group.protocol_type))
                .with_protocol_data(str_bytes(&group.protocol))
                .with_members(members)
        })
        .collect();
    let response = DescribeGroupsResponse::default().with_groups(groups);
    Box::pin(async move { Some(ResponseKind::DescribeGroups(response)) })
}
