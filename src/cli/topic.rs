//! `shardlog topic create|list|describe|delete|alter-config`.

use std::collections::BTreeMap;

use clap::Subcommand;
use kafka_protocol::messages::create_topics_request::{
    CreatableTopic, CreatableTopicConfig, CreateTopicsRequest,
};
use kafka_protocol::messages::delete_topics_request::{DeleteTopicState, DeleteTopicsRequest};
use kafka_protocol::messages::describe_configs_request::{
    DescribeConfigsRequest, DescribeConfigsResource,
};
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig, IncrementalAlterConfigsRequest,
};
use serde::Serialize;

use super::output::{print_json, Table};
use super::{
    check, emit, key_value, list_offsets, metadata, str_bytes, topic_metadata, topic_name,
    AdminArgs, Client, OutputFormat, EARLIEST, LATEST,
};

/// Kafka's resource type of a topic in the config APIs.
const TOPIC_RESOURCE: i8 = 2;
/// DescribeConfigs' config_source of a value set on the topic itself.
const SOURCE_TOPIC: i8 = 1;
/// IncrementalAlterConfigs operations.
const OP_SET: i8 = 0;
const OP_DELETE: i8 = 1;
/// How long the broker may take to create or delete a topic.
const TOPIC_TIMEOUT_MS: i32 = 30_000;

#[derive(Subcommand, Debug)]
pub enum TopicCommand {
    /// Create a topic.
    Create {
        name: String,
        /// Number of partitions (default: the broker's --default-partitions).
        #[arg(long)]
        partitions: Option<i32>,
        /// A topic config, e.g. retention.ms=3600000 (repeatable).
        #[arg(long = "config", value_name = "KEY=VALUE", value_parser = key_value)]
        configs: Vec<(String, String)>,
    },
    /// List topics and their partition counts.
    List,
    /// Show a topic's partitions (leader shard, log start and end offsets) and configs.
    Describe { name: String },
    /// Delete a topic and its data.
    Delete { name: String },
    /// Set or remove topic configs (IncrementalAlterConfigs).
    AlterConfig {
        name: String,
        /// A config to set, KEY=VALUE (repeatable).
        #[arg(long = "set", value_name = "KEY=VALUE", value_parser = key_value)]
        set: Vec<(String, String)>,
        /// A config to remove, back to its default (repeatable).
        #[arg(long = "delete", value_name = "KEY")]
        delete: Vec<String>,
    },
}

pub fn run(command: TopicCommand, admin: &AdminArgs) -> Result<(), String> {
    let mut client = admin.connect()?;
    match command {
        TopicCommand::Create { name, partitions, configs } => {
            create(&mut client, admin.format, &name, partitions, &configs)
        }
        TopicCommand::List => list(&mut client, admin.format),
        TopicCommand::Describe { name } => describe(&mut client, admin.format, &name),
        TopicCommand::Delete { name } => delete(&mut client, admin.format, &name),
        TopicCommand::AlterConfig { name, set, delete } => {
            alter_config(&mut client, admin.format, &name, &set, &delete)
        }
    }
}

fn create(
    client: &mut Client,
    format: OutputFormat,
    name: &str,
    partitions: Option<i32>,
    configs: &[(String, String)],
) -> Result<(), String> {
    let configs = configs
        .iter()
        .map(|(k, v)| {
            CreatableTopicConfig::default().with_name(str_bytes(k)).with_value(Some(str_bytes(v)))
        })
        .collect();
    let topic = CreatableTopic::default()
        .with_name(topic_name(name))
        .with_num_partitions(partitions.unwrap_or(-1))
        .with_replication_factor(-1)
        .with_configs(configs);
    let request =
        CreateTopicsRequest::default().with_topics(vec![topic]).with_timeout_ms(TOPIC_TIMEOUT_MS);
    let response = client.call(&request)?;
    let result = response.topics.into_iter().next().ok_or("no result for the topic")?;
    check(result.error_code, &format!("topic '{name}'"), result.error_message.as_deref())?;
    let partitions = result.num_partitions;
    match format {
        OutputFormat::Table => {
            let plural = if partitions == 1 { "" } else { "s" };
            emit(&format!("created topic '{name}' with {partitions} partition{plural}\n"))
        }
        OutputFormat::Json => {
            print_json(&serde_json::json!({"topic": name, "partitions": partitions}))
        }
    }
}

#[derive(Serialize)]
struct TopicSummary {
    name: String,
    partitions: usize,
}

fn list(client: &mut Client, format: OutputFormat) -> Result<(), String> {
    let response = metadata(client, None)?;
    let mut topics: Vec<TopicSummary> = response
        .topics
        .iter()
        .map(|t| TopicSummary {
            name: t.name.as_ref().map(|n| n.0.to_string()).unwrap_or_default(),
            partitions: t.partitions.len(),
        })
        .collect();
    topics.sort_by(|a, b| a.name.cmp(&b.name));
    match format {
        OutputFormat::Json => print_json(&topics),
        OutputFormat::Table => {
            let mut table = Table::new(&["TOPIC", "PARTITIONS"]);
            for t in &topics {
                table.row(vec![t.name.clone(), t.partitions.to_string()]);
            }
            emit(&table.render())
        }
    }
}

#[derive(Serialize)]
struct PartitionDescription {
    partition: i32,
    /// The shard (broker node id) that owns the partition.
    leader: i32,
    log_start_offset: i64,
    log_end_offset: i64,
}

#[derive(Serialize)]
struct ConfigValue {
    value: Option<String>,
    /// True when the topic does not set it (a default of the topic or the broker).
    is_default: bool,
}

#[derive(Serialize)]
struct TopicDescription {
    name: String,
    partitions: Vec<PartitionDescription>,
    configs: BTreeMap<String, ConfigValue>,
}

fn describe(client: &mut Client, format: OutputFormat, name: &str) -> Result<(), String> {
    let topic = topic_metadata(client, name)?;
    let mut partitions: Vec<(i32, i32)> =
        topic.partitions.iter().map(|p| (p.partition_index, p.leader_id.0)).collect();
    partitions.sort();
    let indexes: Vec<i32> = partitions.iter().map(|(p, _)| *p).collect();
    let starts = list_offsets(client, name, &indexes, EARLIEST)?;
    let ends = list_offsets(client, name, &indexes, LATEST)?;
    let description = TopicDescription {
        name: name.to_string(),
        partitions: partitions
            .iter()
            .zip(starts.iter().zip(&ends))
            .map(|((partition, leader), (start, end))| PartitionDescription {
                partition: *partition,
                leader: *leader,
                log_start_offset: *start,
                log_end_offset: *end,
            })
            .collect(),
        configs: topic_configs(client, name)?,
    };
    match format {
        OutputFormat::Json => print_json(&description),
        OutputFormat::Table => emit(&describe_table(&description)),
    }
}

fn describe_table(description: &TopicDescription) -> String {
    let mut table =
        Table::new(&["PARTITION", "LEADER_SHARD", "LOG_START_OFFSET", "LOG_END_OFFSET"]);
    for p in &description.partitions {
        table.row(vec![
            p.partition.to_string(),
            p.leader.to_string(),
            p.log_start_offset.to_string(),
            p.log_end_offset.to_string(),
        ]);
    }
    let mut configs = Table::new(&["CONFIG", "VALUE", "SOURCE"]);
    for (key, config) in &description.configs {
        let value = config.value.clone().unwrap_or_else(|| "(null)".into());
        let source = if config.is_default { "default" } else { "topic" };
        configs.row(vec![key.clone(), value, source.into()]);
    }
    format!("topic: {}\n\n{}\n{}", description.name, table.render(), configs.render())
}

/// The topic's configs as DescribeConfigs reports them (explicit and default values).
fn topic_configs(client: &mut Client, name: &str) -> Result<BTreeMap<String, ConfigValue>, String> {
    let resource = DescribeConfigsResource::default()
        .with_resource_type(TOPIC_RESOURCE)
        .with_resource_name(str_bytes(name))
        .with_configuration_keys(None);
    let request = DescribeConfigsRequest::default().with_resources(vec![resource]);
    let response = client.call(&request)?;
    let result = response.results.into_iter().next().ok_or("no configs for the topic")?;
    check(
        result.error_code,
        &format!("configs of topic '{name}'"),
        result.error_message.as_deref(),
    )?;
    Ok(result
        .configs
        .into_iter()
        .map(|c| {
            let value = c.value.map(|v| v.to_string());
            (c.name.to_string(), ConfigValue { value, is_default: c.config_source != SOURCE_TOPIC })
        })
        .collect())
}

fn delete(client: &mut Client, format: OutputFormat, name: &str) -> Result<(), String> {
    let request = DeleteTopicsRequest::default()
        .with_topics(vec![DeleteTopicState::default().with_name(Some(topic_name(name)))])
        .with_timeout_ms(TOPIC_TIMEOUT_MS);
    let response = client.call(&request)?;
    let result = response.responses.into_iter().next().ok_or("no result for the topic")?;
    check(result.error_code, &format!("topic '{name}'"), result.error_message.as_deref())?;
    match format {
        OutputFormat::Table => emit(&format!("deleted topic '{name}'\n")),
        OutputFormat::Json => print_json(&serde_json::json!({"topic": name, "deleted": true})),
    }
}

fn alter_config(
    client: &mut Client,
    format: OutputFormat,
    name: &str,
    set: &[(String, String)],
    delete: &[String],
) -> Result<(), String> {
    if set.is_empty() && delete.is_empty() {
        return Err("nothing to change: give --set KEY=VALUE or --delete KEY".into());
    }
    let sets = set.iter().map(|(k, v)| {
        AlterableConfig::default()
            .with_name(str_bytes(k))
            .with_config_operation(OP_SET)
            .with_value(Some(str_bytes(v)))
    });
    let deletes = delete.iter().map(|k| {
        AlterableConfig::default().with_name(str_bytes(k)).with_config_operation(OP_DELETE)
    });
    let resource = AlterConfigsResource::default()
        .with_resource_type(TOPIC_RESOURCE)
        .with_resource_name(str_bytes(name))
        .with_configs(sets.chain(deletes).collect());
    let request = IncrementalAlterConfigsRequest::default().with_resources(vec![resource]);
    let response = client.call(&request)?;
    let result = response.responses.into_iter().next().ok_or("no result for the topic")?;
    check(
        result.error_code,
        &format!("configs of topic '{name}'"),
        result.error_message.as_deref(),
    )?;
    match format {
        OutputFormat::Table => emit(&format!("altered configs of topic '{name}'\n")),
        OutputFormat::Json => print_json(&serde_json::json!({
            "topic": name,
            "set": set.iter().cloned().collect::<BTreeMap<String, String>>(),
            "deleted": delete,
        })),
    }
}
