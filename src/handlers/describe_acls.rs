//! DescribeAcls (v1-v3): DESCRIBE on the cluster; the bindings the filter matches, from
//! this shard's copy, grouped by resource pattern as Kafka answers.

use std::collections::BTreeMap;

use kafka_protocol::messages::describe_acls_request::DescribeAclsRequest;
use kafka_protocol::messages::describe_acls_response::{
    AclDescription, DescribeAclsResource, DescribeAclsResponse,
};
use kafka_protocol::messages::ResponseKind;
use shardlog_net::Reply;
use shardlog_shards::acl::{AclFilter, AclOperation};

use super::authz::Caller;
use super::errors;
use super::str_bytes;

pub fn handle(caller: Caller, request: DescribeAclsRequest) -> Reply {
    let response = DescribeAclsResponse::default();
    let response = if !caller.cluster(AclOperation::Describe) {
        response
            .with_error_code(errors::CLUSTER_AUTHORIZATION_FAILED)
            .with_error_message(Some(str_bytes("DESCRIBE on the cluster is needed to list ACLs")))
    } else {
        match AclFilter::from_request(
            request.resource_type_filter,
            request.resource_name_filter.as_deref(),
            request.pattern_type_filter,
            request.principal_filter.as_deref(),
            request.host_filter.as_deref(),
            request.operation,
            request.permission_type,
        ) {
            Err(why) => response
                .with_error_code(errors::INVALID_REQUEST)
                .with_error_message(Some(str_bytes(&why))),
            Ok(filter) => response.with_resources(resources(&caller, &filter)),
        }
    };
    Box::pin(async move { Some(ResponseKind::DescribeAcls(response)) })
}

fn resources(caller: &Caller, filter: &AclFilter) -> Vec<DescribeAclsResource> {
    let mut by_pattern: BTreeMap<(i8, String, i8), Vec<AclDescription>> = BTreeMap::new();
    for b in caller.shard().describe_acls(filter) {
        let key = (b.resource_type.code(), b.name.clone(), b.pattern_type.code());
        by_pattern.entry(key).or_default().push(
            AclDescription::default()
                .with_principal(str_bytes(&b.principal))
                .with_host(str_bytes(&b.host))
                .with_operation(b.operation.code())
                .with_permission_type(b.permission.code()),
        );
    }
    by_pattern
        .into_iter()
        .map(|((resource_type, name, pattern_type), acls)| {
            DescribeAclsResource::default()
                .with_resource_type(resource_type)
                .with_resource_name(str_bytes(&name))
                .with_pattern_type(pattern_type)
                .with_acls(acls)
        })
        .collect()
}
