//! InitProducerId (v0-v5; v5 only adds an error code, KIP-890's TRANSACTION_ABORTABLE,
//! never sent here). Idempotent producers get a producer id unique across shards and
//! restarts, or the next epoch of a known one (KIP-360). A transactional id goes to its
//! coordinator shard (NOT_COORDINATOR elsewhere), which fences earlier instances.

use std::rc::Rc;

use kafka_protocol::messages::init_producer_id_request::InitProducerIdRequest;
use kafka_protocol::messages::init_producer_id_response::InitProducerIdResponse;
use kafka_protocol::messages::{ProducerId, ResponseKind};
use shardlog_net::Reply;
use shardlog_shards::Shard;
use tracing::warn;

use kafka_protocol::messages::TransactionalId;
use shardlog_shards::acl::{AclOperation, ResourceType};

use super::authz::Caller;
use super::errors;

pub fn handle(
    shard: Rc<Shard>,
    caller: Caller,
    request: InitProducerIdRequest,
    version: i16,
) -> Reply {
    Box::pin(async move {
        let refused = |code| {
            InitProducerIdResponse::default()
                .with_error_code(code)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1)
        };
        let transactional_id = request.transactional_id.as_ref().filter(|id| !id.0.is_empty());
        let response = if let Some(refusal) = refusal(&caller, transactional_id) {
            refused(refusal)
        } else if let Some(transactional_id) = transactional_id {
            let asked = (request.producer_id.0 >= 0)
                .then_some((request.producer_id.0, request.producer_epoch));
            let timeout_ms = request.transaction_timeout_ms;
            match shard.txn_init_producer_id(transactional_id.0.as_str(), timeout_ms, asked).await {
                Ok((id, epoch)) => InitProducerIdResponse::default()
                    .with_producer_id(ProducerId(id))
                    .with_producer_epoch(epoch),
                Err(e) => refused(errors::txn_error_code(&e, version >= 4)),
            }
        } else {
            match shard.init_producer_id(request.producer_id.0, request.producer_epoch).await {
                Ok((id, epoch)) => InitProducerIdResponse::default()
                    .with_producer_id(ProducerId(id))
                    .with_producer_epoch(epoch),
                Err(message) => {
                    warn!(%message, "InitProducerId failed");
                    refused(errors::KAFKA_STORAGE_ERROR)
                }
            }
        };
        Some(ResponseKind::InitProducerId(response))
    })
}

/// WRITE on the transactional id; without one, IDEMPOTENT_WRITE on the cluster or WRITE on
/// some topic (Kafka 3.x). The error code when refused.
fn refusal(caller: &Caller, transactional_id: Option<&TransactionalId>) -> Option<i16> {
    match transactional_id {
        Some(id) if !caller.transactional_id(AclOperation::Write, id.0.as_str()) => {
            Some(errors::TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        }
        Some(_) => None,
        None if caller.cluster(AclOperation::IdempotentWrite)
            || caller.any_resource(AclOperation::Write, ResourceType::Topic) =>
        {
            None
        }
        None => Some(errors::CLUSTER_AUTHORIZATION_FAILED),
    }
}
