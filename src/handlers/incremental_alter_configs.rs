//! IncrementalAlterConfigs (v0-v1): SET, DELETE (back to the default), APPEND and
//! SUBTRACT (list-typed keys only, else INVALID_CONFIG) on single topic configs, through
//! the controller on shard 0; `validate_only` checks without changing anything. Broker
//! resources are refused as in AlterConfigs (`alter_configs.rs`, which holds the shared
//! part).

use std::rc::Rc;

use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, IncrementalAlterConfigsRequest,
};
use kafka_protocol::messages::incremental_alter_configs_response::{
    AlterConfigsResourceResponse, IncrementalAlterConfigsResponse,
};
use kafka_protocol::messages::ResponseKind;
use shardlog_net::Reply;
use shardlog_shards::topic_config::{ConfigChange, ConfigOp};
use shardlog_shards::{Shard, TopicError};

use super::alter_configs::alter;
use super::authz::Caller;

pub fn handle(shard: Rc<Shard>, caller: Caller, request: IncrementalAlterConfigsRequest) -> Reply {
    Box::pin(async move {
        let requested = request
            .resources
            .iter()
            .map(|r| (r.resource_type, r.resource_name.to_string(), operations(r)))
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
        Some(ResponseKind::IncrementalAlterConfigs(
            IncrementalAlterConfigsResponse::default().with_responses(responses),
        ))
    })
}

fn operations(resource: &AlterConfigsResource) -> Result<ConfigChange, TopicError> {
    let ops = resource
        .configs
        .iter()
        .map(|c| {
            let op = ConfigOp::from_code(c.config_operation).ok_or_else(|| {
                TopicError::InvalidRequest(format!(
                    "config operation {} on {} is not one of SET (0), DELETE (1), APPEND (2), \
                     SUBTRACT (3)",
                    c.config_operation, c.name
                ))
            })?;
            Ok((c.name.to_string(), op, c.value.as_ref().map(|v| v.to_string())))
        })
        .collect::<Result<Vec<_>, TopicError>>()?;
    Ok(ConfigChange::Incremental(ops))
}
