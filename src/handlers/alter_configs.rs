//! AlterConfigs (v0-v2): replaces a topic's whole explicit config set (keys not given go
//! back to their defaults), through the controller on shard 0; `validate_only` checks
//! without changing anything. Also the shared part of IncrementalAlterConfigs.
//!
//! Broker resources are refused with INVALID_REQUEST: broker settings are command-line
//! flags (dynamic broker configs are not supported). A resource named twice in one
//! request fails each time, as Kafka.

use std::collections::HashMap;
use std::rc::Rc;

use kafka_protocol::messages::alter_configs_request::{AlterConfigsRequest, AlterConfigsResource};
use kafka_protocol::messages::alter_configs_response::{
    AlterConfigsResourceResponse, AlterConfigsResponse,
};
use kafka_protocol::messages::ResponseKind;
use kafka_protocol::protocol::StrBytes;
use shardlog_net::Reply;
use shardlog_shards::topic_config::{ConfigChange, TopicConfigChange};
use shardlog_shards::{Shard, TopicError};

use shardlog_shards::acl::AclOperation;

use super::authz::Caller;
use super::describe_configs::{RESOURCE_BROKER, RESOURCE_TOPIC};
use super::errors::{self, topic_error_code};
use super::str_bytes;

pub fn handle(shard: Rc<Shard>, caller: Caller, request: AlterConfigsRequest) -> Reply {
    Box::pin(async move {
        let requested = request
            .resources
            .iter()
            .map(|r| (r.resource_type, r.resource_name.to_string(), replace(r)))
            .collect();
        let outcomes = alter(&shard, &caller, requested, request.validate_only).await;
        let responses = (request.resources.into_iter().zip(outcomes))
            .map(|(resource, (code, message))| {
                AlterConfigsResourceResponse::default()
                    .with_resource_type(resource.resource_type)
                    .with_resource_name(resource.resource_name)
                    .with_error_code(code)
                    .with_error_message(message)
            })
            .collect();
        Some(ResponseKind::AlterConfigs(AlterConfigsResponse::default().with_responses(responses)))
    })
}

/// AlterConfigs' configs: the new explicit set (a null value leaves the key at its default).
fn replace(resource: &AlterConfigsResource) -> Result<ConfigChange, TopicError> {
    let configs = resource
        .configs
        .iter()
        .filter_map(|c| Some((c.name.to_string(), c.value.as_ref()?.to_string())))
        .collect();
    Ok(ConfigChange::Replace(configs))
}

/// One resource of an alter request: its type, its name, and the change it asks for (or
/// why the request itself is wrong).
pub(super) type Requested = (i8, String, Result<ConfigChange, TopicError>);

/// Sends the topic changes to the controller in one call and answers every resource, in
/// request order: (error code, error message).
pub(super) async fn alter(
    shard: &Rc<Shard>,
    caller: &Caller,
    requested: Vec<Requested>,
    validate_only: bool,
) -> Vec<(i16, Option<StrBytes>)> {
    let refusals: Vec<Option<(i16, String)>> = requested
        .iter()
        .map(|(kind, name, _)| caller.config_refusal(AclOperation::AlterConfigs, *kind, name))
        .collect();
    let mut counts: HashMap<(i8, String), usize> = HashMap::new();
    for (resource_type, name, _) in &requested {
        *counts.entry((*resource_type, name.clone())).or_default() += 1;
    }
    let checked: Vec<Result<TopicConfigChange, TopicError>> = (requested.into_iter())
        .zip(&refusals)
        .map(|((resource_type, name, change), refused)| {
            match (refused, counts[&(resource_type, name.clone())]) {
                (Some((_, why)), _) => Err(TopicError::AuthorizationFailed(why.clone())),
                (None, 1) => topic_change(resource_type, name, change),
                (None, _) => Err(TopicError::InvalidRequest(format!(
                    "resource {name:?} appears more than once in the request"
                ))),
            }
        })
        .collect();
    let changes: Vec<TopicConfigChange> =
        checked.iter().filter_map(|r| r.as_ref().ok().cloned()).collect();
    let mut done = if changes.is_empty() {
        Vec::new().into_iter()
    } else {
        shard.alter_topic_configs(changes, validate_only).await.into_iter()
    };
    (checked.into_iter().zip(refusals))
        .map(|(r, refused)| match r.and_then(|_| done.next().expect("one result per change")) {
            Ok(()) => (errors::NONE, None),
            Err(e) => match refused {
                // A broker resource is refused with CLUSTER_AUTHORIZATION_FAILED.
                Some((code, why)) => (code, Some(str_bytes(&why))),
                None => (topic_error_code(&e), Some(str_bytes(&e.to_string()))),
            },
        })
        .collect()
}

/// Topic resources become controller changes; everything else is refused here.
fn topic_change(
    resource_type: i8,
    name: String,
    change: Result<ConfigChange, TopicError>,
) -> Result<TopicConfigChange, TopicError> {
    match resource_type {
        RESOURCE_TOPIC => Ok(TopicConfigChange { topic: name, change: change? }),
        RESOURCE_BROKER => Err(TopicError::InvalidRequest(
            "dynamic broker configs are not supported: broker settings are command-line flags"
                .to_string(),
        )),
        other => Err(TopicError::InvalidRequest(format!(
            "resource type {other} named {name:?} cannot be altered here"
        ))),
    }
}
