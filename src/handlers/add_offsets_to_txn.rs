//! AddOffsetsToTxn (v0-v4; v4 only lets the broker answer KIP-890's TRANSACTION_ABORTABLE, never
//! sent here): the producer's open transaction will commit offsets of this
//! group (TxnOffsetCommit to the group's coordinator follows); durable on the transaction
//! coordinator before the answer.

use std::rc::Rc;

use kafka_protocol::messages::add_offsets_to_txn_request::AddOffsetsToTxnRequest;
use kafka_protocol::messages::add_offsets_to_txn_response::AddOffsetsToTxnResponse;
use kafka_protocol::messages::ResponseKind;
use shardlog_net::Reply;
use shardlog_shards::Shard;

use shardlog_shards::acl::AclOperation;

use super::authz::Caller;
use super::errors;

pub fn handle(
    shard: Rc<Shard>,
    caller: Caller,
    request: AddOffsetsToTxnRequest,
    version: i16,
) -> Reply {
    Box::pin(async move {
        let group = request.group_id.0.as_str();
        let transactional_id = request.transactional_id.0.as_str();
        let code = if !caller.transactional_id(AclOperation::Write, transactional_id) {
            errors::TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        } else if !caller.group(AclOperation::Read, group) {
            errors::GROUP_AUTHORIZATION_FAILED
        } else if group.is_empty() {
            errors::INVALID_GROUP_ID
        } else {
            let result = shard
                .add_to_txn(
                    request.transactional_id.0.as_str(),
                    request.producer_id.0,
                    request.producer_epoch,
                    &[],
                    Some(group),
                )
                .await;
            result.map_or_else(|e| errors::txn_error_code(&e, version >= 2), |_| errors::NONE)
        };
        let response = AddOffsetsToTxnResponse::default().with_error_code(code);
        Some(ResponseKind::AddOffsetsToTxn(response))
    })
}
