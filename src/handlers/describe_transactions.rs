//! DescribeTransactions (v0, KIP-664): state, producer, timeout, start time and partitions
//! of transactional ids, on their coordinator shard (NOT_COORDINATOR elsewhere,
//! TRANSACTIONAL_ID_NOT_FOUND for an id never initialised). Groups whose offsets the
//! transaction commits are not listed (Kafka shows them as __consumer_offsets partitions,
//! which do not exist here).

use std::rc::Rc;

use kafka_protocol::messages::describe_transactions_request::DescribeTransactionsRequest;
use kafka_protocol::messages::describe_transactions_response::{
    DescribeTransactionsResponse, TopicData, TransactionState,
};
use kafka_protocol::messages::{ProducerId, ResponseKind, TopicName};
use shardlog_net::Reply;
use shardlog_shards::Shard;

use shardlog_shards::acl::AclOperation;

use super::authz::Caller;
use super::{errors, str_bytes};

pub fn handle(shard: Rc<Shard>, caller: &Caller, request: DescribeTransactionsRequest) -> Reply {
    let states = request
        .transactional_ids
        .into_iter()
        .map(|id| {
            let base = TransactionState::default()
                .with_transactional_id(id.clone())
                .with_transaction_state(str_bytes(""))
                .with_transaction_start_time_ms(-1)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1);
            if !caller.transactional_id(AclOperation::Describe, id.0.as_str()) {
                return base.with_error_code(errors::TRANSACTIONAL_ID_AUTHORIZATION_FAILED);
            }
            if let Err(e) = shard.check_txn_coordinator(id.0.as_str()) {
                return base.with_error_code(errors::txn_error_code(&e, true));
            }
            let Some(t) = shard.txn.describe(id.0.as_str()) else {
                return base.with_error_code(errors::TRANSACTIONAL_ID_NOT_FOUND);
            };
            let mut topics: Vec<TopicData> = Vec::new();
            for (topic, partition) in &t.partitions {
                match topics.last_mut() {
                    Some(last) if last.topic.0.as_str() == topic => {
                        last.partitions.push(*partition)
                    }
                    _ => topics.push(
                        TopicData::default()
                            .with_topic(TopicName(str_bytes(topic)))
                            .with_partitions(vec![*partition]),
                    ),
                }
            }
            base.with_transaction_state(str_bytes(t.state.name()))
                .with_transaction_timeout_ms(t.timeout_ms)
                .with_transaction_start_time_ms(t.start_ms)
                .with_producer_id(ProducerId(t.producer_id))
                .with_producer_epoch(t.producer_epoch)
                .with_topics(topics)
        })
        .collect();
    let response = DescribeTransactionsResponse::default().with_transaction_states(states);
    Box::pin(async move { Some(ResponseKind::DescribeTransactions(response)) })
}
