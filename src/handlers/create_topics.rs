//! CreateTopics (v0-v7; v0 has no validate_only, v0 answers carry no error message), through the controller on shard 0.
//!
//! Replication factor 1 is accepted, and on a cluster of n nodes also 2..=n
//! (`controller::validate_replication_factor`); -1 (and -1 partitions) takes the broker's
//! default (`--default-replication-factor`, `--default-partitions`), resolved by the
//! controller, and the answer carries the number used; anything else is refused with
//! INVALID_REPLICATION_FACTOR and the reason. Manual replica assignments are
//! refused with INVALID_REQUEST. A name given twice in one request fails both, as Kafka.

use std::collections::HashMap;
use std::rc::Rc;

use kafka_protocol::messages::create_topics_request::CreateTopicsRequest;
use kafka_protocol::messages::create_topics_response::{
    CreatableTopicResult, CreateTopicsResponse,
};
use kafka_protocol::messages::ResponseKind;
use shardlog_net::Reply;
use shardlog_shards::{NewTopic, Shard, TopicError};
use uuid::Uuid;

use super::authz::Caller;
use super::errors::{self, topic_error_code};
use super::str_bytes;

pub fn handle(shard: Rc<Shard>, caller: Caller, request: CreateTopicsRequest) -> Reply {
    Box::pin(async move {
        let mut counts: HashMap<String, usize> = HashMap::new();
        for topic in &request.topics {
            *counts.entry(topic.name.0.as_str().to_string()).or_default() += 1;
        }
        let mut results: Vec<Option<Result<(), TopicError>>> = Vec::new();
        let mut to_create = Vec::new();
        for topic in &request.topics {
            let name = topic.name.0.as_str().to_string();
            if !caller.create_topic(&name) {
                let message = "CREATE on the cluster or the topic is needed".to_string();
                results.push(Some(Err(TopicError::AuthorizationFailed(message))));
            } else if counts[&name] > 1 {
                let message = format!("topic {name:?} appears more than once in the request");
                results.push(Some(Err(TopicError::InvalidRequest(message))));
            } else if !topic.assignments.is_empty() {
                let message = "manual replica assignment is not supported".to_string();
                results.push(Some(Err(TopicError::InvalidRequest(message))));
            } else {
                results.push(None);
                let configs = topic
                    .configs
                    .iter()
                    .filter_map(|c| {
                        Some((c.name.as_str().to_string(), c.value.as_ref()?.as_str().to_string()))
                    })
                    .collect();
                to_create.push(NewTopic {
                    name,
                    num_partitions: topic.num_partitions,
                    replication_factor: topic.replication_factor,
                    configs,
                });
            }
        }
        let mut created = shard.create_topics(to_create, request.validate_only).await.into_iter();
        let mut topics = Vec::with_capacity(request.topics.len());
        for (topic, early) in request.topics.into_iter().zip(results) {
            let result = early.unwrap_or_else(|| created.next().expect("one result per topic"));
            let response = CreatableTopicResult::default().with_name(topic.name.clone());
            topics.push(match result {
                Ok(()) => {
                    let meta = shard.topic(topic.name.0.as_str());
                    // Validate-only creates nothing: the numbers it would have used, -1
                    // resolved as the controller (this node: others answer NOT_CONTROLLER)
                    // resolves it.
                    let config = &shard.config;
                    let partitions = meta
                        .as_ref()
                        .map_or(config.partitions_or_default(topic.num_partitions), |m| {
                            m.partition_shards.len() as i32
                        });
                    let replication_factor = meta.as_ref().map_or(
                        config.replication_factor_or_default(topic.replication_factor),
                        |m| m.replication_factor() as i16,
                    );
                    // null, not "", as Kafka: a client may print any message it gets.
                    response
                        .with_error_code(errors::NONE)
                        .with_error_message(None)
                        .with_topic_id(meta.map_or(Uuid::nil(), |m| Uuid::from_bytes(m.topic_id)))
                        .with_num_partitions(partitions)
                        .with_replication_factor(replication_factor)
                }
                Err(e) => response
                    .with_error_code(topic_error_code(&e))
                    .with_error_message(Some(str_bytes(&e.to_string())))
                    .with_num_partitions(-1)
                    .with_replication_factor(-1),
            });
        }
        Some(ResponseKind::CreateTopics(CreateTopicsResponse::default().with_topics(topics)))
    })
}
