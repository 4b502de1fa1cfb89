//! DescribeUserScramCredentials (v0, KIP-554): each user's SCRAM mechanisms and
//! iterations, from this shard's copy of the cluster metadata (never salts or keys).
//! DESCRIBE on the cluster, as Kafka.

use kafka_protocol::messages::describe_user_scram_credentials_request::DescribeUserScramCredentialsRequest;
use kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResponse, DescribeUserScramCredentialsResult,
};
use kafka_protocol::messages::ResponseKind;
use shardlog_net::Reply;
use shardlog_shards::acl::AclOperation;

use super::authz::{refused, Caller};
use super::errors;
use super::str_bytes;

pub fn handle(caller: Caller, request: DescribeUserScramCredentialsRequest) -> Reply {
    if !caller.cluster(AclOperation::Describe) {
        let response = DescribeUserScramCredentialsResponse::default()
            .with_error_code(errors::CLUSTER_AUTHORIZATION_FAILED)
            .with_error_message(Some(str_bytes(
                "DESCRIBE on the cluster is needed to describe SCRAM credentials",
            )));
        return refused(ResponseKind::DescribeUserScramCredentials(response));
    }
    let table = caller.shard().table();
    let users = &table.users.users;
    // Null or empty: every user (as Kafka).
    let asked: Vec<String> = match request.users.filter(|u| !u.is_empty()) {
        None => users.keys().cloned().collect(),
        Some(names) => names.into_iter().map(|u| u.name.to_string()).collect(),
    };
    let results = asked
        .iter()
        .enumerate()
        .map(|(i, user)| {
            let result = DescribeUserScramCredentialsResult::default().with_user(str_bytes(user));
            let (code, message) = if asked[..i].contains(user) || asked[i + 1..].contains(user) {
                (errors::DUPLICATE_RESOURCE, "the user is named twice in one request")
            } else if let Some(credentials) = users.get(user) {
                let infos = credentials
                    .iter()
                    .map(|c| {
                        CredentialInfo::default()
                            .with_mechanism(c.mechanism as i8)
                            .with_iterations(c.iterations as i32)
                    })
                    .collect();
                return result.with_credential_infos(infos);
            } else {
                (errors::RESOURCE_NOT_FOUND, "the user has no SCRAM credential")
            };
            result.with_error_code(code).with_error_message(Some(str_bytes(message)))
        })
        .collect();
    let response = DescribeUserScramCredentialsResponse::default().with_results(results);
    Box::pin(async move { Some(ResponseKind::DescribeUserScramCredentials(response)) })
}
