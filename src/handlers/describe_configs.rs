//! DescribeConfigs (v0-v4): every topic config this broker implements (explicit values and
//! defaults, with their sources, synonyms and one-line docs), and the broker settings
//! that exist (read-only: they are command-line flags).
//!
//! Sources: a value set on the topic is DYNAMIC_TOPIC_CONFIG, one left to its default is
//! DEFAULT_CONFIG (two defaults come from broker flags: `max.message.bytes` from
//! `--max-message-bytes`, `segment.bytes` from `--segment-bytes`). v0 carries `is_default`
//! instead of the source (true for DEFAULT_CONFIG) and no synonyms.

use std::rc::Rc;

use kafka_protocol::messages::describe_configs_request::{
    DescribeConfigsRequest, DescribeConfigsResource,
};
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResponse, DescribeConfigsResult,
    DescribeConfigsSynonym,
};
use kafka_protocol::messages::ResponseKind;
use shardlog_net::Reply;
use shardlog_shards::topic_config::{TopicConfigDef, TOPIC_CONFIGS};
use shardlog_shards::{Shard, TopicMeta};

use shardlog_shards::acl::AclOperation::DescribeConfigs;

use super::authz::Caller;
use super::errors;
use super::{str_bytes, KafkaHandler};

pub(super) const RESOURCE_TOPIC: i8 = 2;
pub(super) const RESOURCE_BROKER: i8 = 4;
const SOURCE_DYNAMIC_TOPIC: i8 = 1;
const SOURCE_STATIC_BROKER: i8 = 4;
const SOURCE_DEFAULT: i8 = 5;
const TYPE_STRING: i8 = 2;
const TYPE_LONG: i8 = 5;

/// One described config, before it becomes a response entry.
struct Described {
    name: String,
    value: String,
    source: i8,
    read_only: bool,
    config_type: i8,
    doc: Option<&'static str>,
    /// (name, value, source), most specific first (Kafka's order).
    synonyms: Vec<(String, String, i8)>,
}

pub fn handle(handler: Rc<KafkaHandler>, caller: Caller, request: DescribeConfigsRequest) -> Reply {
    Box::pin(async move {
        let results = request
            .resources
            .iter()
            .map(|r| {
                match caller.config_refusal(DescribeConfigs, r.resource_type, &r.resource_name) {
                    Some((code, why)) => refused(r, code, &why),
                    None => describe(
                        &handler,
                        r,
                        request.include_synonyms,
                        request.include_documentation,
                    ),
                }
            })
            .collect();
        Some(ResponseKind::DescribeConfigs(
            DescribeConfigsResponse::default().with_results(results),
        ))
    })
}

fn refused(resource: &DescribeConfigsResource, code: i16, why: &str) -> DescribeConfigsResult {
    DescribeConfigsResult::default()
        .with_resource_type(resource.resource_type)
        .with_resource_name(resource.resource_name.clone())
        .with_error_code(code)
        .with_error_message(Some(str_bytes(why)))
}

fn describe(
    handler: &KafkaHandler,
    resource: &DescribeConfigsResource,
    include_synonyms: bool,
    include_documentation: bool,
) -> DescribeConfigsResult {
    let name = resource.resource_name.as_str();
    let result = DescribeConfigsResult::default()
        .with_resource_type(resource.resource_type)
        .with_resource_name(resource.resource_name.clone());
    let entries = match resource.resource_type {
        RESOURCE_TOPIC => match handler.shard.topic(name) {
            Some(meta) => TOPIC_CONFIGS
                .iter()
                .map(|def| describe_topic_config(&handler.shard, &meta, def))
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
            broker_configs(&handler.shard)
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
        .filter(|d| wanted(&d.name))
        .map(|d| response_entry(d, include_synonyms, include_documentation))
        .collect();
    // A null message on success, as Kafka (the codec defaults to "").
    result.with_error_code(errors::NONE).with_error_message(None).with_configs(configs)
}

fn describe_topic_config(shard: &Shard, meta: &TopicMeta, def: &TopicConfigDef) -> Described {
    let default = match def.name {
        "max.message.bytes" => shard.config.max_message_bytes.to_string(),
        "segment.bytes" => shard.log.segment_size_bytes().to_string(),
        _ => def.default.to_string(),
    };
    let default_synonym =
        (def.broker_synonym.unwrap_or(def.name).to_string(), default, SOURCE_DEFAULT);
    let (value, source, synonyms) = match meta.explicit_config(def.name) {
        Some(value) => {
            let explicit = (def.name.to_string(), value.to_string(), SOURCE_DYNAMIC_TOPIC);
            (value.to_string(), SOURCE_DYNAMIC_TOPIC, vec![explicit, default_synonym])
        }
        None => (default_synonym.1.clone(), SOURCE_DEFAULT, vec![default_synonym]),
    };
    Described {
        name: def.name.to_string(),
        value,
        source,
        read_only: false,
        config_type: def.config_type as i8,
        doc: Some(def.doc),
        synonyms,
    }
}

/// The broker settings that exist: command-line flags, so static and read-only.
fn broker_configs(shard: &Shard) -> Vec<Described> {
    let config = &shard.config;
    let flags = [
        ("num.partitions", config.default_partitions.to_string()),
        ("default.replication.factor", config.default_replication_factor.to_string()),
        ("auto.create.topics.enable", config.auto_create_topics.to_string()),
        ("message.max.bytes", config.max_message_bytes.to_string()),
        ("log.segment.bytes", shard.log.segment_size_bytes().to_string()),
    ];
    flags
        .into_iter()
        .map(|(name, value)| Described {
            name: name.to_string(),
            config_type: if value.parse::<i64>().is_ok() { TYPE_LONG } else { TYPE_STRING },
            synonyms: vec![(name.to_string(), value.clone(), SOURCE_STATIC_BROKER)],
            value,
            source: SOURCE_STATIC_BROKER,
            read_only: true,
            doc: None,
        })
        .collect()
}

fn response_entry(
    described: Described,
    include_synonyms: bool,
    include_documentation: bool,
) -> DescribeConfigsResourceResult {
    let synonyms = if include_synonyms {
        described
            .synonyms
            .iter()
            .map(|(name, value, source)| {
                DescribeConfigsSynonym::default()
                    .with_name(str_bytes(name))
                    .with_value(Some(str_bytes(value)))
                    .with_source(*source)
            })
            .collect()
    } else {
        Vec::new()
    };
    let documentation = described.doc.filter(|_| include_documentation).map(str_bytes);
    DescribeConfigsResourceResult::default()
        .with_name(str_bytes(&described.name))
        .with_value(Some(str_bytes(&described.value)))
        .with_config_source(described.source)
        .with_is_default(described.source == SOURCE_DEFAULT)
        .with_config_type(described.config_type)
        .with_read_only(described.read_only)
        .with_synonyms(synonyms)
        .with_documentation(documentation)
}
