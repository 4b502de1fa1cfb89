//! ListGroups (v0-v5): the groups this shard coordinates (each shard is a broker; admin
//! clients ask every broker), optionally filtered by state (v4+).

use std::rc::Rc;

use kafka_protocol::messages::list_groups_request::ListGroupsRequest;
use kafka_protocol::messages::list_groups_response::{ListGroupsResponse, ListedGroup};
use kafka_protocol::messages::{GroupId, ResponseKind};
use shardlog_net::Reply;
use shardlog_shards::Shard;

use shardlog_shards::acl::AclOperation;

use super::authz::Caller;
use super::str_bytes;

/// Groups the caller may DESCRIBE (all of them with DESCRIBE on the cluster), as Kafka.
pub fn handle(shard: Rc<Shard>, caller: &Caller, request: ListGroupsRequest) -> Reply {
    let every_group = caller.cluster(AclOperation::Describe);
    let wanted_state = |state: &str| {
        request.states_filter.is_empty()
            || request.states_filter.iter().any(|s| s.as_str().eq_ignore_ascii_case(state))
    };
    let groups = shard
        .groups
        .list()
        .into_iter()
        .filter(|g| wanted_state(g.state.name()))
        .filter(|g| every_group || caller.group(AclOperation::Describe, &g.group_id))
        .map(|g| {
            ListedGroup::default()
                .with_group_id(GroupId(str_bytes(&g.group_id)))
                .with_protocol_type(str_bytes(&g.protocol_type))
                .with_group_state(str_bytes(g.state.name()))
                .with_group_type(str_bytes("classic"))
        })
        .collect();
    let response = ListGroupsResponse::default().with_groups(groups);
    Box::pin(async move { Some(ResponseKind::ListGroups(response)) })
}
