//! DeleteGroups (v0-v2): only Empty groups; their committed offsets are deleted durably.

use std::rc::Rc;

use kafka_protocol::messages::delete_groups_request::DeleteGroupsRequest;
use kafka_protocol::messages::delete_groups_response::{
    DeletableGroupResult, DeleteGroupsResponse,
};
use kafka_protocol::messages::ResponseKind;
use shardlog_net::Reply;
use shardlog_shards::Shard;

use shardlog_shards::acl::AclOperation;

use super::authz::Caller;
use super::errors::{group_error_code, GROUP_AUTHORIZATION_FAILED};

pub fn handle(shard: Rc<Shard>, caller: Caller, request: DeleteGroupsRequest) -> Reply {
    Box::pin(async move {
        let mut results = Vec::with_capacity(request.groups_names.len());
        for id in request.groups_names {
            let code = match caller.group(AclOperation::Delete, id.0.as_str()) {
                true => shard
                    .delete_group(id.0.as_str())
                    .await
                    .err()
                    .map_or(0, |e| group_error_code(&e)),
                false => GROUP_AUTHORIZATION_FAILED,
            };
            results.push(DeletableGroupResult::default().with_group_id(id).with_error_code(code));
        }
        Some(ResponseKind::DeleteGroups(DeleteGroupsResponse::default().with_results(results)))
    })
}
