//! DescribeConfigs (v1-v4): the topic configs this broker implements (explicit values
//! and defaults, with their sources), and the broker settings that exist.

use std::rc::Rc;

use kafka_protocol::messages::describe_configs_request::{
    DescribeConfigsRequest, DescribeConfigsResource,
};
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResponse, DescribeConfigsResult,
};
use kafka_protocol::messages::ResponseKind;
use shardlog_net::Reply;
use shardlog_shards::metadata::TOPIC_CONFIG_DEFAULTS;

use super::errors;
use super::{str_bytes, KafkaHandler};

const RESOURCE_TOPIC: i8 = 2;
const RESOURCE_BROKER: i8 = 4;
const SOURCE_DYNAMIC_TOPIC: i8 = 1;
const SOURCE_STATIC_BROKER: i8 = 4;
const SOURCE_DEFAULT: i8 = 5;
const TYPE_STRING: i8 = 2;
const TYPE_LONG: i8 = 5;

pub fn handle(handler: Rc<KafkaHandler>, request: DescribeConfigsRequest) -> Reply {
    Box::pin(async move {
        let results = request.resources.iter().map(|r| describe(&handler, r)).collect();
        Some(ResponseKind::DescribeConfigs(
            DescribeConfigsResponse::default().with_results(results),
        ))
    })
}

fn describe(handler: &KafkaHandler, resource: &DescribeConfigsResource) -> DescribeConfigsResult {
    let name = resource.resource_name.as_str();
    let result = DescribeConfigsResult::default()
        .with_resource_type(resource.resource_type)
        .with_resource_name(resource.resource_name.clone());
    let entries: Vec<(String, String, i8)> = match resource.resource_type {
        RESOURCE_TOPIC => match handler.shard.topic(name) {
            Some(meta) => TOPIC_CONFIG_DEFAULTS
                .iter()
                .map(|(key, default)| match meta.configs.iter().find(|(k, _)| k == key) {
                    Some((_, v)) => (key.to_string(), v.clone(), SOURCE_DYNAMIC_TOPIC),
                    None if *key == "max.message.bytes" => {
                        let broker = handler.shard.config.max_message_bytes.to_string();
                        (key.to_string(), broker, SOURCE_DEFAULT)
                    }
                    None => (key.to_string(), default.to_string(), SOURCE_DEFAULT),
                })
                .collect(),
            None => {
                return result
                    .with_error_code(errors::UNKNOWN_TOPIC_OR_PARTITION)
                    .with_error_message(Some(str_bytes(&format!("topic {name:?} does not exist"))))
            }
        },
        RESOURCE_BROKER
            if name.is_empty()
                || name.parse::<usize>().is_ok_and(|n| n < handler.shard.nr_shards) =>
        {
            let config = &handler.shard.config;
            vec![
                (
                    "num.partitions".into(),
                    config.default_partitions.to_string(),
                    SOURCE_STATIC_BROKER,
                ),
                (
                    "auto.create.topics.enable".into(),
                    config.auto_create_topics.to_string(),
                    SOURCE_STATIC_BROKER,
                ),
                (
                    "message.max.bytes".into(),
                    config.max_message_bytes.to_string(),
                    SOURCE_STATIC_BROKER,
                ),
            ]
        }
        other => {
            return result.with_error_code(errors::INVALID_REQUEST).with_error_message(Some(
                str_bytes(&format!(
                    "resource type {other} named {name:?} cannot be described here"
                )),
            ))
        }
    };
    let wanted = |key: &str| {
        resource
            .configuration_keys
            .as_ref()
            .is_none_or(|keys| keys.iter().any(|k| k.as_str() == key))
    };
    let configs = entries
        .into_iter()
        .filter(|(key, _, _)| wanted(key))
        .map(|(key, value, source)| {
            let config_type = if value.parse::<i64>().is_ok() { TYPE_LONG } else { TYPE_STRING };
            DescribeConfigsResourceResult::default()
                .with_name(str_bytes(&key))
                .with_value(Some(str_bytes(&value)))
                .with_config_source(source)
                .with_config_type(config_type)
                .with_read_only(true)
        })
        .collect();
    result.with_error_code(errors::NONE).with_configs(configs)
}
