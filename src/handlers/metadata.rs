//! Metadata (v0-v12): every shard of every node is a broker (broker id `node_id * 1024 +
//! shard`, its own port; on a single node the shard id), and each partition's leader is
//! its owner shard on its node, so clients send each partition's traffic straight to the
//! core that owns it. A replicated partition's leader is the owner shard on the node
//! that leads its raft group, in the group's term as leader epoch (-1 and
//! LEADER_NOT_AVAILABLE while none is known; `partition_group.rs`). The controller is
//! shard 0 of the metadata group's leader (`metadata_group.rs`; -1 while none is known).
//!
//! Unknown topics are created on the spot when the request allows it (v4+, always before)
//! and the broker's auto-create setting is on, as Kafka's auto.create.topics.enable. On a
//! cluster node that is not the controller the creation is forwarded to the controller
//! (`shardlog_shards::auto_create`), and the topic is LEADER_NOT_AVAILABLE, as Kafka
//! answers while it auto-creates, until it is in this node's table.

use std::rc::Rc;

use kafka_protocol::messages::metadata_request::MetadataRequest;
use kafka_protocol::messages::metadata_response::{
    MetadataResponse, MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, ResponseKind, TopicName};
use shardlog_net::Reply;
use shardlog_shards::metadata::validate_topic_name;
use shardlog_shards::{AutoCreate, NewTopic, Shard, TopicMeta};
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
                .map(|meta| topic_response(shard, meta))
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
        let brokers = advertised_brokers(&handler)
            .into_iter()
            .map(|b| {
                MetadataResponseBroker::default()
                    .with_node_id(BrokerId(b.id))
                    .with_host(str_bytes(&b.host))
                    .with_port(b.port)
            })
            .collect();
        let response = MetadataResponse::default()
            .with_brokers(brokers)
            .with_cluster_id(Some(str_bytes(CLUSTER_ID)))
            .with_controller_id(BrokerId(controller_id(shard).await))
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
            true => topic_response(&handler.shard, &meta),
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
        // The broker default, resolved by the controller, which a forwarded creation
        // reaches (`auto_create`).
        replication_factor: -1,
        configs: Vec::new(),
    };
    let created = shard.auto_create_topic(new_topic).await;
    match (created, shard.topic(name)) {
        // Created here, or by a concurrent request: either way it exists now.
        (_, Some(meta)) => topic_response(shard, &meta),
        (AutoCreate::Done(Err(e)), None) => error(topic_error_code(&e)),
        (AutoCreate::Pending, None) => error(errors::LEADER_NOT_AVAILABLE),
        (AutoCreate::Done(Ok(())), None) => error(errors::UNKNOWN_TOPIC_OR_PARTITION),
    }
}

fn topic_by_id(handler: &KafkaHandler, caller: &Caller, id: Uuid) -> MetadataResponseTopic {
    let table = handler.shard.table();
    match table.topic_by_id(id.into_bytes()) {
        Some(meta) if caller.topic(AclOperation::Describe, &meta.name) => {
            topic_response(&handler.shard, meta)
        }
        Some(_) => MetadataResponseTopic::default()
            .with_topic_id(id)
            .with_error_code(errors::TOPIC_AUTHORIZATION_FAILED),
        None => MetadataResponseTopic::default()
            .with_topic_id(id)
            .with_error_code(errors::UNKNOWN_TOPIC_ID),
    }
}

fn topic_response(shard: &Shard, meta: &TopicMeta) -> MetadataResponseTopic {
    let placed = meta.partition_shards.iter().zip(&meta.partition_replicas);
    let partitions = placed
        .enumerate()
        .map(|(index, (owner, replicas))| partition_response(shard, meta, index, *owner, replicas))
        .collect();
    MetadataResponseTopic::default()
        .with_name(Some(TopicName(str_bytes(&meta.name))))
        .with_topic_id(Uuid::from_bytes(meta.topic_id))
        .with_partitions(partitions)
}

/// One partition: of one replica, its owner shard leads (epoch 0); of a replicated
/// partition, the raft leader of its group as this shard last heard it (epoch: the raft
/// term), or -1 with LEADER_NOT_AVAILABLE while none is known. Replicas are the replica
/// set's brokers (the same shard on each node); the ISR is the group's last applied ISR
/// entry, all the replicas before one (docs/replication.md, "The ISR").
fn partition_response(
    shard: &Shard,
    meta: &TopicMeta,
    index: usize,
    owner: u32,
    replicas: &[u32],
) -> MetadataResponsePartition {
    let brokers: Vec<BrokerId> = replicas.iter().map(|n| BrokerId(broker_id(*n, owner))).collect();
    let response = MetadataResponsePartition::default().with_partition_index(index as i32);
    let Some(group) = shard.partition_group_of(&meta.name, index as i32) else {
        return response
            .with_leader_id(brokers[0])
            .with_leader_epoch(0)
            .with_isr_nodes(brokers.clone())
            .with_replica_nodes(brokers);
    };
    let (leader, term) = shard.partition_leader(group);
    let (leader, error) = match leader {
        Some(node) => (BrokerId(broker_id(node, owner)), 0),
        None => (BrokerId(-1), errors::LEADER_NOT_AVAILABLE),
    };
    let isr = match shard.partition_isr(group) {
        Some(nodes) => nodes.iter().map(|n| BrokerId(broker_id(*n, owner))).collect(),
        None => brokers.clone(),
    };
    response
        .with_error_code(error)
        .with_leader_id(leader)
        .with_leader_epoch(term.min(i32::MAX as u64) as i32)
        .with_isr_nodes(isr)
        .with_replica_nodes(brokers)
}

/// One broker (a shard of a node) as clients reach it.
pub struct AdvertisedBroker {
    pub id: i32,
    pub host: String,
    pub port: i32,
}

/// Every broker of the cluster, by node then shard: this node's shards at this listener's
/// advertised host and shard ports, each other node's at its `--peers` host and the shard
/// ports that follow from its bootstrap port (`P + 1 + s`, as `listeners.rs` gives them).
pub fn advertised_brokers(handler: &KafkaHandler) -> Vec<AdvertisedBroker> {
    let shards = handler.shard.nr_shards;
    let own = handler.shard.config.node_id;
    let mut brokers = Vec::with_capacity(shards * (1 + handler.peers.len()));
    for node in &handler.shard.config.nodes {
        for s in 0..shards {
            let (host, port) = match handler.peers.iter().find(|p| p.id == *node as u64) {
                Some(peer) if *node != own => {
                    (peer.host().to_string(), peer.bootstrap.port() as i32 + 1 + s as i32)
                }
                _ => (handler.listener.host.clone(), handler.listener.shard_port(s) as i32),
            };
            brokers.push(AdvertisedBroker { id: broker_id(*node, s as u32), host, port });
        }
    }
    brokers
}

/// The controller's broker id: shard 0 of the metadata group's leader, -1 while none is
/// known; on a single node, shard 0.
pub async fn controller_id(shard: &shardlog_shards::Shard) -> i32 {
    match shard.controller_node().await {
        Ok(Some(node)) => broker_id(node as u32, 0),
        Ok(None) => -1,
        Err(()) => broker_id(shard.config.node_id, 0),
    }
}

/// The broker id of shard `shard` of node `node`: `node * 1024 + shard` (on a single
/// node, node 0: the shard id). `cluster.rs` keeps it within an int32.
pub fn broker_id(node: u32, shard: u32) -> i32 {
    (node * BROKERS_PER_NODE + shard) as i32
}

/// Broker ids leave this many per node (`cluster.rs`, invariant 1).
const BROKERS_PER_NODE: u32 = 1024;
