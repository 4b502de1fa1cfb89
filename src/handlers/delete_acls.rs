//! DeleteAcls (v1-v3): ALTER on the cluster; per filter, the bindings it removed. The
//! valid filters go through the controller in one durable change; a filter with an
//! unknown code gets INVALID_REQUEST alone.

use kafka_protocol::messages::delete_acls_request::DeleteAclsRequest;
use kafka_protocol::messages::delete_acls_response::{
    DeleteAclsFilterResult, DeleteAclsMatchingAcl, DeleteAclsResponse,
};
use kafka_protocol::messages::ResponseKind;
use shardlog_net::Reply;
use shardlog_shards::acl::{AclBinding, AclFilter, AclOperation};

use super::authz::Caller;
use super::errors::{self, topic_error_code};
use super::str_bytes;

pub fn handle(caller: Caller, request: DeleteAclsRequest) -> Reply {
    Box::pin(async move {
        let failed = |code, message: &str| {
            DeleteAclsFilterResult::default()
                .with_error_code(code)
                .with_error_message(Some(str_bytes(message)))
        };
        if !caller.cluster(AclOperation::Alter) {
            let why = "ALTER on the cluster is needed to delete ACLs";
            let refused =
                request.filters.iter().map(|_| failed(errors::CLUSTER_AUTHORIZATION_FAILED, why));
            let response = DeleteAclsResponse::default().with_filter_results(refused.collect());
            return Some(ResponseKind::DeleteAcls(response));
        }
        let checked: Vec<Result<AclFilter, String>> = request
            .filters
            .iter()
            .map(|f| {
                AclFilter::from_request(
                    f.resource_type_filter,
                    f.resource_name_filter.as_deref(),
                    f.pattern_type_filter,
                    f.principal_filter.as_deref(),
                    f.host_filter.as_deref(),
                    f.operation,
                    f.permission_type,
                )
            })
            .collect();
        let valid: Vec<AclFilter> =
            checked.iter().filter_map(|c| c.as_ref().ok().cloned()).collect();
        let mut removed = match valid.is_empty() {
            true => Ok(Vec::new()),
            false => caller.shard().delete_acls(valid).await,
        }
        .map(Vec::into_iter);
        let results = checked
            .into_iter()
            .map(|c| match (c, &mut removed) {
                (Err(why), _) => failed(errors::INVALID_REQUEST, &why),
                (Ok(_), Err(e)) => failed(topic_error_code(e), &e.to_string()),
                (Ok(_), Ok(removed)) => {
                    let bindings = removed.next().expect("one result per valid filter");
                    DeleteAclsFilterResult::default()
                        .with_matching_acls(bindings.iter().map(matching_acl).collect())
                }
            })
            .collect();
        Some(ResponseKind::DeleteAcls(DeleteAclsResponse::default().with_filter_results(results)))
    })
}

fn matching_acl(b: &AclBinding) -> DeleteAclsMatchingAcl {
    DeleteAclsMatchingAcl::default()
        .with_resource_type(b.resource_type.code())
        .with_resource_name(str_bytes(&b.name))
        .with_pattern_type(b.pattern_type.code())
        .with_principal(str_bytes(&b.principal))
        .with_host(str_bytes(&b.host))
        .with_operation(b.operation.code())
        .with_permission_type(b.permission.code())
}
