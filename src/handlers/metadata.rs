//! Metadata (v0-v12): every shard is a broker (node id = shard id, its own port), and each
//! partition's leader is its owner shard, so clients send each partition's traffic
//! straight to the core that owns it.
//!
//! Unknown topics are created on the spot when the request allows it (v4+, always before)
//! and the broker's auto-create setting is on, as Kafka's auto.create.topics.enable.

use std::rc::Rc;

use kafka_protocol::messages::metadata_request::MetadataRequest;
use kafka_protocol::messages::metadata_response::{
    MetadataResponse, MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, ResponseKind, TopicName};
use shardlog_net::Reply;
use shardlog_shards::metadata::validate_topic_name;
use shardlog_shards::{NewTopic, TopicMeta};
use uuid::Uuid;

use shardlog_shards::acl::AclOperation;

use super::authz::Caller;
use super::errors::{self, topic_error_code};
use super::{str_bytes, KafkaHandler};

/// The cluster id clients see (one node for now).
pub const CLUSTER_ID: &str = "shardlog-single-node";

pub fn handle(
    handler: Rc<KafkaHandler>,
    caller: Caller,
    request: MetadataRequest,
    version: i16,
) -> Reply {
    Box::pin(async move {
        let shard = &handler.shard;
        let allow_create =
            (version < 4 || request.allow_auto_topic_creation) && shard.config.auto_create_topics;
        // v0: an empty list means all topics; v1+: null means all topics.
        let requested: Option<Vec<_>> = match request.topics {
            Some(topics) if version == 0 && topics.is_empty() => None,
            other => other,
        };
        let topics = match requested {
            // Topics the caller may not DESCRIBE are left out, as Kafka does.
            None => (shard.table().topics.values())
                .filter(|meta| caller.topic(AclOperation::Describe, &meta.name))
                .map(|meta| topic_response(meta))
                .collect(),
            Some(requested) => {
                let mut out = Vec::with_capacity(requested.len());
                for topic in requested {
                    out.push(match topic.name {
                        Some(name) => {
                            named_topic(&handler, &caller, name.0.as_str(), allow_create).await
                        }
                        None => topic_by_id(&handler, &caller, topic.topic_id),
                    });
                }
                out
            }
        };
        let brokers = (0..shard.nr_shards)
            .map(|s| {
                MetadataResponseBroker::default()
                    .with_node_id(BrokerId(s as i32))
                    .with_host(str_bytes(&handler.listener.host))
                    .with_port(handler.listener.shard_port(s) as i32)
            })
            .collect();
        let response = MetadataResponse::default()
            .with_brokers(brokers)
            .with_cluster_id(Some(str_bytes(CLUSTER_ID)))
            .with_controller_id(BrokerId(0))
            .with_topics(topics);
        Some(ResponseKind::Metadata(response))
    })
}

async fn named_topic(
    handler: &KafkaHandler,
    caller: &Caller,
    name: &str,
    allow_create: bool,
) -> MetadataResponseTopic {
    let shard = &handler.shard;
    let error = |code| {
        MetadataResponseTopic::default()
            .with_name(Some(TopicName(str_bytes(name))))
            .with_error_code(code)
    };
    let describable = caller.topic(AclOperation::Describe, name);
    if let Some(meta) = shard.topic(name) {
        return match describable {
            true => topic_response(&meta),
            false => error(errors::TOPIC_AUTHORIZATION_FAILED),
        };
    }
    // Kafka: auto-creation needs CREATE (on the cluster or the topic); without it, or
    // without DESCRIBE when nothing is created, the answer is an authorization failure.
    let refused = match allow_create {
        true => !caller.create_topic(name),
        false => !describable,
    };
    if refused {
        return error(errors::TOPIC_AUTHORIZATION_FAILED);
    }
    if let Err(e) = validate_topic_name(name) {
        return error(topic_error_code(&e));
    }
    if !allow_create {
        return error(errors::UNKNOWN_TOPIC_OR_PARTITION);
    }
    let new_topic = NewTopic {
        name: name.to_string(),
        num_partitions: shard.config.default_partitions,
        replication_factor: 1,
        configs: Vec::new(),
    };
    let result = shard.create_topics(vec![new_topic], false).await.pop();
    match (result, shard.topic(name)) {
        // Created here, or by a concurrent request: either way it exists now.
        (_, Some(meta)) => topic_response(&meta),
        (Some(Err(e)), None) => error(topic_error_code(&e)),
        (_, None) => error(errors::UNKNOWN_TOPIC_OR_PARTITION),
    }
}

fn topic_by_id(handler: &KafkaHandler, caller: &Caller, id: Uuid) -> MetadataResponseTopic {
    let table = handler.shard.table();
    match table.topic_by_id(id.into_bytes()) {
        Some(meta) if caller.topic(AclOperation::Describe, &meta.name) => topic_response(meta),
        Some(_) => MetadataResponseTopic::default()
            .with_topic_id(id)
            .with_error_code(errors::TOPIC_AUTHORIZATION_FAILED),
        None => MetadataResponseTopic::default()
            .with_topic_id(id)
            .with_error_code(errors::UNKNOWN_TOPIC_ID),
    }
}

fn topic_response(meta: &TopicMeta) -> MetadataResponseTopic {
    let placed = meta.partition_shards.iter().zip(&meta.partition_replicas);
    let partitions = placed
        .enumerate()
        .map(|(index, (shard, replicas))| {
            let leader = BrokerId(broker_id(replicas[0], *shard));
            MetadataResponsePartition::default()
                .with_partition_index(index as i32)
                .with_leader_id(leader)
                .with_leader_epoch(0)
                .with_replica_nodes(vec![leader])
                .with_isr_nodes(vec![leader])
        })
        .collect();
    MetadataResponseTopic::default()
        .with_name(Some(TopicName(str_bytes(&meta.name))))
        .with_topic_id(Uuid::from_bytes(meta.topic_id))
        .with_partitions(partitions)
}

/// The broker id of shard `shard` of node `node`: `node * 1024 + shard` (on a single
/// node, node 0: the shard id). `cluster.rs` keeps it within an int32.
pub fn broker_id(node: u32, shard: u32) -> i32 {
    (node * BROKERS_PER_NODE + shard) as i32
}

/// Broker ids leave this many per node (`cluster.rs`, invariant 1).
const BROKERS_PER_NODE: u32 = 1024;
