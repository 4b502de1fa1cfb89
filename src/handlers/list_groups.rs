//! ListGroups (v0-v5): the groups this shard coordinates (each shard is a broker; admin
//! clients ask every broker), optionally filtered by state (v4+).

use std::rc::Rc;

use kafka_protocol::messages::list_groups_request::ListGroupsRequest;
use kafka_protocol::messages::list_groups_response::{ListGroupsResponse, ListedGroup};
use kafka_protocol::messages::{GroupId, ResponseKind};
use shardlog_net::Reply;
use shardlog_shards::Shard;

use super::str_bytes;

pub fn handle(shard: Rc<Shard>, request: ListGroupsRequest) -> Reply {
    let wanted_state = |state: &str| {
        request.states_filter.is_empty()
            || request.states_filter.iter().any(|s| s.as_str().eq_ignore_ascii_case(state))
    };
    let groups = shard
        .groups
        .list()
        .into_iter()
        .filter(|g| wanted_state(g.state.name()))
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
