//! InitProducerId (v0-v5; v5 only adds an error code transactions would use), for
//! idempotent producers: a producer id unique across shards and restarts, or the next
//! epoch of a known one (KIP-360). Transactional ids are refused with a message until
//! transactions exist.

use std::rc::Rc;

use kafka_protocol::messages::init_producer_id_request::InitProducerIdRequest;
use kafka_protocol::messages::init_producer_id_response::InitProducerIdResponse;
use kafka_protocol::messages::{ProducerId, ResponseKind};
use shardlog_net::Reply;
use shardlog_shards::Shard;
use tracing::warn;

use super::errors;

pub fn handle(shard: Rc<Shard>, request: InitProducerIdRequest) -> Reply {
    Box::pin(async move {
        let refused = |code| {
            InitProducerIdResponse::default()
                .with_error_code(code)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1)
        };
        let transactional = request.transactional_id.as_ref().is_some_and(|id| !id.0.is_empty());
        let response = if transactional {
            warn!("a transactional producer asked for an id: transactions are not supported yet");
            refused(errors::TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
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
