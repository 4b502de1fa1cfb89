//! AddPartitionsToTxn (v0-v3, the client form): adds partitions to the producer's open
//! transaction on its coordinator shard, durable before the answer. An unknown partition
//! fails the whole call: it gets UNKNOWN_TOPIC_OR_PARTITION and the others
//! OPERATION_NOT_ATTEMPTED, as in Kafka. A partition led on another node than the
//! coordinator's is taken: its markers and verification cross nodes (`txn::remote`,
//! docs/transactions.md, "Replicated partitions"). v4+ (KIP-890's batched broker form) is
//! not advertised.

use std::rc::Rc;

use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnRequest;
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResponse, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::ResponseKind;
use shardlog_net::Reply;
use shardlog_shards::Shard;

use shardlog_shards::acl::AclOperation;

use super::authz::Caller;
use super::errors;

pub fn handle(
    shard: Rc<Shard>,
    caller: Caller,
    request: AddPartitionsToTxnRequest,
    version: i16,
) -> Reply {
    Box::pin(async move {
        let asked: Vec<(String, i32)> = request
            .v3_and_below_topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| (t.name.0.as_str().to_string(), *p)))
            .collect();
        let transactional_id = request.v3_and_below_transactional_id.0.as_str();
        let unknown =
            |(topic, partition): &(String, i32)| shard.locate(topic, *partition).is_none();
        // WRITE on the transactional id, then on every topic (Kafka's order).
        let writable = |(topic, _): &(String, i32)| caller.topic(AclOperation::Write, topic);
        // One code for every partition, or (None) the per-partition refusal.
        let shared_code = if !caller.transactional_id(AclOperation::Write, transactional_id) {
            Some(errors::TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        } else if !asked.iter().all(writable) || asked.iter().any(unknown) {
            None
        } else {
            let result = shard
                .add_to_txn(
                    request.v3_and_below_transactional_id.0.as_str(),
                    request.v3_and_below_producer_id.0,
                    request.v3_and_below_producer_epoch,
                    &asked,
                    None,
                )
                .await;
            Some(result.map_or_else(|e| errors::txn_error_code(&e, version >= 2), |_| errors::NONE))
        };
        let code_of = |p: &(String, i32)| match shared_code {
            Some(code) => code,
            None if !writable(p) => errors::TOPIC_AUTHORIZATION_FAILED,
            None if unknown(p) => errors::UNKNOWN_TOPIC_OR_PARTITION,
            None => errors::OPERATION_NOT_ATTEMPTED,
        };
        let results = request
            .v3_and_below_topics
            .iter()
            .map(|topic| {
                let name = topic.name.0.as_str().to_string();
                let partitions = topic
                    .partitions
                    .iter()
                    .map(|p| {
                        AddPartitionsToTxnPartitionResult::default()
                            .with_partition_index(*p)
                            .with_partition_error_code(code_of(&(name.clone(), *p)))
                    })
                    .collect();
                AddPartitionsToTxnTopicResult::default()
                    .with_name(topic.name.clone())
                    .with_results_by_partition(partitions)
            })
            .collect();
        let response =
            AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(results);
        Some(ResponseKind::AddPartitionsToTxn(response))
    })
}
