//! AlterUserScramCredentials (v0, KIP-554): upsertions carry a salt and the salted
//! password (the client ran PBKDF2; the password never crosses the wire), from which the
//! stored and server keys are derived here; deletions name a user and a mechanism. Through
//! the controller (`shards/src/credentials.rs`): durable and on every shard before the
//! answer. One result per user, as Kafka. ALTER on the cluster, as Kafka.

use kafka_protocol::messages::alter_user_scram_credentials_request::AlterUserScramCredentialsRequest;
use kafka_protocol::messages::alter_user_scram_credentials_response::{
    AlterUserScramCredentialsResponse, AlterUserScramCredentialsResult,
};
use kafka_protocol::messages::ResponseKind;
use shardlog_net::sasl::{ScramCredential, ScramMechanism};
use shardlog_net::Reply;
use shardlog_shards::acl::AclOperation;
use shardlog_shards::credentials::CredentialAlteration;
use shardlog_shards::metadata_log::users::StoredScramCredential;

use super::authz::{refused, Caller};
use super::errors::{self, credential_error_code};
use super::str_bytes;

pub fn handle(caller: Caller, request: AlterUserScramCredentialsRequest) -> Reply {
    if !caller.cluster(AclOperation::Alter) {
        let users = request.deletions.iter().map(|d| &d.name);
        let results = users
            .chain(request.upsertions.iter().map(|u| &u.name))
            .map(|user| {
                AlterUserScramCredentialsResult::default()
                    .with_user(user.clone())
                    .with_error_code(errors::CLUSTER_AUTHORIZATION_FAILED)
                    .with_error_message(Some(str_bytes(
                        "ALTER on the cluster is needed to alter SCRAM credentials",
                    )))
            })
            .collect();
        let response = AlterUserScramCredentialsResponse::default().with_results(results);
        return refused(ResponseKind::AlterUserScramCredentials(response));
    }
    let shard = caller.shard().clone();
    let mut alterations: Vec<CredentialAlteration> = request
        .deletions
        .iter()
        .map(|d| CredentialAlteration::Delete {
            user: d.name.to_string(),
            mechanism: u8::try_from(d.mechanism).unwrap_or(0),
        })
        .collect();
    for upsertion in &request.upsertions {
        let iterations = u32::try_from(upsertion.iterations).unwrap_or(0);
        let credential = match ScramMechanism::from_kafka_type(upsertion.mechanism) {
            // Left without keys: the controller refuses it with the reason.
            None => StoredScramCredential {
                mechanism: u8::try_from(upsertion.mechanism).unwrap_or(0),
                iterations,
                salt: Vec::new(),
                stored_key: Vec::new(),
                server_key: Vec::new(),
            },
            Some(_) if upsertion.salted_password.is_empty() => StoredScramCredential {
                mechanism: upsertion.mechanism as u8,
                iterations,
                salt: upsertion.salt.to_vec(),
                stored_key: Vec::new(),
                server_key: Vec::new(),
            },
            Some(mechanism) => {
                let salted = &upsertion.salted_password;
                let derived = ScramCredential::from_salted_password(
                    mechanism,
                    salted,
                    &upsertion.salt,
                    iterations,
                );
                crate::users::stored(mechanism, derived)
            }
        };
        alterations
            .push(CredentialAlteration::Upsert { user: upsertion.name.to_string(), credential });
    }
    Box::pin(async move {
        let results = shard
            .alter_scram_credentials(alterations)
            .await
            .into_iter()
            .map(|(user, result)| {
                let answer = AlterUserScramCredentialsResult::default().with_user(str_bytes(&user));
                match result {
                    Ok(()) => answer.with_error_code(errors::NONE),
                    Err(e) => answer
                        .with_error_code(credential_error_code(&e))
                        .with_error_message(Some(str_bytes(&format!("{e}")))),
                }
            })
            .collect();
        let response = AlterUserScramCredentialsResponse::default().with_results(results);
        Some(ResponseKind::AlterUserScramCredentials(response))
    })
}
