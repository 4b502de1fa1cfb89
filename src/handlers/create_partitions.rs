//! CreatePartitions (v0-v3): more partitions for existing topics, through the controller
//! on shard 0 (persisted and published to every shard before the answer).
//!
//! Explicit assignments are honoured when each new partition names exactly one broker
//! that is a shard of this broker (node id = shard id); otherwise the topic fails with
//! INVALID_REPLICA_ASSIGNMENT, as Kafka answers bad assignments. A topic named twice in
//! one request fails both times with INVALID_REQUEST, as Kafka.

use std::collections::HashMap;
use std::rc::Rc;

use kafka_protocol::messages::create_partitions_request::{
    CreatePartitionsRequest, CreatePartitionsTopic,
};
use kafka_protocol::messages::create_partitions_response::{
    CreatePartitionsResponse, CreatePartitionsTopicResult,
};
use kafka_protocol::messages::ResponseKind;
use shardlog_net::Reply;
use shardlog_shards::{NewPartitions, Shard, TopicError};

use shardlog_shards::acl::AclOperation;

use super::authz::Caller;
use super::errors::{self, topic_error_code};
use super::str_bytes;

pub fn handle(shard: Rc<Shard>, caller: Caller, request: CreatePartitionsRequest) -> Reply {
    Box::pin(async move {
        let mut counts: HashMap<&str, usize> = HashMap::new();
        for topic in &request.topics {
            *counts.entry(topic.name.0.as_str()).or_default() += 1;
        }
        // Duplicates are answered here; the rest go to the controller in one call.
        let mut early: Vec<Option<Result<(), TopicError>>> = Vec::new();
        let mut to_grow = Vec::new();
        for topic in &request.topics {
            let name = topic.name.0.as_str();
            if !caller.topic(AclOperation::Alter, name) {
                let message = "ALTER on the topic is needed".to_string();
                early.push(Some(Err(TopicError::AuthorizationFailed(message))));
            } else if counts[name] > 1 {
                let message = format!("topic {name:?} appears more than once in the request");
                early.push(Some(Err(TopicError::InvalidRequest(message))));
            } else {
                early.push(None);
                to_grow.push(new_partitions(topic));
            }
        }
        let mut grown = shard.create_partitions(to_grow, request.validate_only).await.into_iter();
        let results = request
            .topics
            .into_iter()
            .zip(early)
            .map(|(topic, early)| {
                let result = early.unwrap_or_else(|| grown.next().expect("one result per topic"));
                let response = CreatePartitionsTopicResult::default().with_name(topic.name);
                match result {
                    Ok(()) => response.with_error_code(errors::NONE),
                    Err(e) => response
                        .with_error_code(topic_error_code(&e))
                        .with_error_message(Some(str_bytes(&e.to_string()))),
                }
            })
            .collect();
        let response = CreatePartitionsResponse::default().with_results(results);
        Some(ResponseKind::CreatePartitions(response))
    })
}

fn new_partitions(topic: &CreatePartitionsTopic) -> NewPartitions {
    let assignments = topic.assignments.as_ref().map(|assignments| {
        assignments.iter().map(|a| a.broker_ids.iter().map(|b| b.0).collect()).collect()
    });
    NewPartitions { topic: topic.name.0.as_str().to_string(), count: topic.count, assignments }
}
