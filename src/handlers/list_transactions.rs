//! ListTransactions (v0-v1, KIP-664): the transactional ids this shard coordinates (each
//! shard is a broker; admin tools ask every broker), filtered by state, producer id and
//! (v1) how long the open transaction has run.

use std::rc::Rc;

use kafka_protocol::messages::list_transactions_request::ListTransactionsRequest;
use kafka_protocol::messages::list_transactions_response::{
    ListTransactionsResponse, TransactionState,
};
use kafka_protocol::messages::{ProducerId, ResponseKind, TransactionalId};
use shardlog_net::Reply;
use shardlog_shards::txn::state::TxnState;
use shardlog_shards::Shard;

use shardlog_shards::acl::AclOperation;

use super::authz::Caller;
use super::str_bytes;

const STATES: [TxnState; 6] = [
    TxnState::Empty,
    TxnState::Ongoing,
    TxnState::PrepareCommit,
    TxnState::PrepareAbort,
    TxnState::CompleteCommit,
    TxnState::CompleteAbort,
];

/// Only the transactional ids the caller may DESCRIBE, as Kafka.
pub fn handle(shard: Rc<Shard>, caller: &Caller, request: ListTransactionsRequest) -> Reply {
    let known = |s: &str| STATES.iter().any(|state| state.name() == s);
    let unknown_state_filters: Vec<_> =
        request.state_filters.iter().filter(|s| !known(s.as_str())).cloned().collect();
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let transaction_states = shard
        .coordinated_txns()
        .into_iter()
        .filter(|t| caller.transactional_id(AclOperation::Describe, &t.transactional_id))
        .filter(|t| {
            request.state_filters.is_empty()
                || request.state_filters.iter().any(|s| s.as_str() == t.state.name())
        })
        .filter(|t| {
            request.producer_id_filters.is_empty()
                || request.producer_id_filters.contains(&ProducerId(t.producer_id))
        })
        .filter(|t| {
            request.duration_filter < 0
                || (t.start_ms >= 0 && now_ms - t.start_ms > request.duration_filter)
        })
        .map(|t| {
            TransactionState::default()
                .with_transactional_id(TransactionalId(str_bytes(&t.transactional_id)))
                .with_producer_id(ProducerId(t.producer_id))
                .with_transaction_state(str_bytes(t.state.name()))
        })
        .collect();
    let response = ListTransactionsResponse::default()
        .with_unknown_state_filters(unknown_state_filters)
        .with_transaction_states(transaction_states);
    Box::pin(async move { Some(ResponseKind::ListTransactions(response)) })
}
