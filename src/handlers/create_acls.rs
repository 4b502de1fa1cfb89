//! CreateAcls (v1-v3): ALTER on the cluster; each creation is checked as Kafka checks a
//! new ACL (INVALID_REQUEST with why), then the valid ones go through the controller in
//! one durable change (`shardlog_shards::acl::controller`).

use kafka_protocol::messages::create_acls_request::CreateAclsRequest;
use kafka_protocol::messages::create_acls_response::{AclCreationResult, CreateAclsResponse};
use kafka_protocol::messages::ResponseKind;
use shardlog_net::Reply;
use shardlog_shards::acl::{AclBinding, AclOperation};

use super::authz::Caller;
use super::errors::{self, topic_error_code};
use super::str_bytes;

pub fn handle(caller: Caller, request: CreateAclsRequest) -> Reply {
    Box::pin(async move {
        let failed = |code, message: String| {
            AclCreationResult::default()
                .with_error_code(code)
                .with_error_message(Some(str_bytes(&message)))
        };
        if !caller.cluster(AclOperation::Alter) {
            let refused = request
                .creations
                .iter()
                .map(|_| {
                    failed(
                        errors::CLUSTER_AUTHORIZATION_FAILED,
                        "ALTER on the cluster is needed to create ACLs".into(),
                    )
                })
                .collect();
            return Some(ResponseKind::CreateAcls(
                CreateAclsResponse::default().with_results(refused),
            ));
        }
        let checked: Vec<Result<AclBinding, String>> = request
            .creations
            .iter()
            .map(|c| {
                AclBinding::from_request(
                    c.resource_type,
                    c.resource_name.as_str(),
                    c.resource_pattern_type,
                    c.principal.as_str(),
                    c.host.as_str(),
                    c.operation,
                    c.permission_type,
                )
            })
            .collect();
        let valid: Vec<AclBinding> =
            checked.iter().filter_map(|c| c.as_ref().ok().cloned()).collect();
        let stored = match valid.is_empty() {
            true => Ok(()),
            false => caller.shard().create_acls(valid).await,
        };
        let results = checked
            .into_iter()
            .map(|c| match (c, &stored) {
                (Err(why), _) => failed(errors::INVALID_REQUEST, why),
                (Ok(_), Err(e)) => failed(topic_error_code(e), e.to_string()),
                (Ok(_), Ok(())) => AclCreationResult::default(),
            })
            .collect();
        Some(ResponseKind::CreateAcls(CreateAclsResponse::default().with_results(results)))
    })
}
