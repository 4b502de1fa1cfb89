//! DeleteTopics (v0-v6), through the controller on shard 0. v6 may name topics by id.

use std::rc::Rc;

use kafka_protocol::messages::delete_topics_request::DeleteTopicsRequest;
use kafka_protocol::messages::delete_topics_response::{
    DeletableTopicResult, DeleteTopicsResponse,
};
use kafka_protocol::messages::{ResponseKind, TopicName};
use shardlog_net::Reply;
use shardlog_shards::Shard;
use uuid::Uuid;

use shardlog_shards::acl::AclOperation;

use super::authz::Caller;
use super::errors::{self, topic_error_code};
use super::str_bytes;

pub fn handle(shard: Rc<Shard>, caller: Caller, request: DeleteTopicsRequest) -> Reply {
    Box::pin(async move {
        // (name if known, id as asked)
        let mut asked: Vec<(Option<String>, Uuid)> = request
            .topic_names
            .iter()
            .map(|n| (Some(n.0.as_str().to_string()), Uuid::nil()))
            .collect();
        let table = shard.table();
        for state in &request.topics {
            let name = match &state.name {
                Some(name) => Some(name.0.as_str().to_string()),
                None => table.topic_by_id(state.topic_id.into_bytes()).map(|t| t.name.clone()),
            };
            asked.push((name, state.topic_id));
        }
        // Not held while the controller applies the deletes: that would copy the table.
        drop(table);
        let allowed = |name: &String| caller.topic(AclOperation::Delete, name);
        let names: Vec<String> =
            asked.iter().filter_map(|(n, _)| n.clone()).filter(allowed).collect();
        let mut deleted = shard.delete_topics(names).await.into_iter();
        let responses = asked
            .into_iter()
            .map(|(name, id)| {
                let response = DeletableTopicResult::default().with_topic_id(id);
                let Some(name) = name else {
                    return response.with_error_code(errors::UNKNOWN_TOPIC_ID);
                };
                let response = response.with_name(Some(TopicName(str_bytes(&name))));
                if !allowed(&name) {
                    return response.with_error_code(errors::TOPIC_AUTHORIZATION_FAILED);
                }
                match deleted.next().expect("one result per named topic") {
                    Ok(()) => response.with_error_code(errors::NONE),
                    Err(e) => response
                        .with_error_code(topic_error_code(&e))
                        .with_error_message(Some(str_bytes(&e.to_string()))),
                }
            })
            .collect();
        Some(ResponseKind::DeleteTopics(DeleteTopicsResponse::default().with_responses(responses)))
    })
}
