//! EndTxn (v0-v4; v4 only lets the broker answer KIP-890's TRANSACTION_ABORTABLE, never
//! sent here): commit or abort the producer's transaction. Answered once the COMMIT or
//! ABORT marker is durable in every partition of the transaction, the transaction's
//! offsets are committed or dropped on their groups' coordinators, and the coordinator's
//! Complete state is durable (shards' `txn::coordinator`).

use std::rc::Rc;

use kafka_protocol::messages::end_txn_request::EndTxnRequest;
use kafka_protocol::messages::end_txn_response::EndTxnResponse;
use kafka_protocol::messages::ResponseKind;
use shardlog_net::Reply;
use shardlog_shards::Shard;
use tracing::warn;

use shardlog_shards::acl::AclOperation;

use super::authz::Caller;
use super::errors;

pub fn handle(shard: Rc<Shard>, caller: Caller, request: EndTxnRequest, version: i16) -> Reply {
    Box::pin(async move {
        let transactional_id = request.transactional_id.0.as_str();
        if !caller.transactional_id(AclOperation::Write, transactional_id) {
            let code = errors::TRANSACTIONAL_ID_AUTHORIZATION_FAILED;
            return Some(ResponseKind::EndTxn(EndTxnResponse::default().with_error_code(code)));
        }
        let result = shard
            .end_txn(
                transactional_id,
                request.producer_id.0,
                request.producer_epoch,
                request.committed,
            )
            .await;
        let code = match result {
            Ok(()) => errors::NONE,
            Err(e) => {
                warn!(transactional_id, error = %e, "EndTxn refused");
                errors::txn_error_code(&e, version >= 2)
            }
        };
        Some(ResponseKind::EndTxn(EndTxnResponse::default().with_error_code(code)))
    })
}
