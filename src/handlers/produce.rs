//! Produce (v3-v11; advertised from v0): the write hot path, top to bottom.
//!
//! Phase one, in arrival order: for each partition, route to the owner shard, where the
//! batches are validated and queued in the shard log (offsets assigned). Phase two: wait
//! for the fdatasync that covers each partition's batches, then answer. acks=0: no
//! response at all (the appends still become durable with the next flush).

use std::rc::Rc;

use kafka_protocol::messages::produce_request::ProduceRequest;
use kafka_protocol::messages::produce_response::{
    PartitionProduceResponse, ProduceResponse, TopicProduceResponse,
};
use kafka_protocol::messages::ResponseKind;
use shardlog_net::Reply;
use shardlog_shards::{PartitionError, Shard};

use super::errors::{self, partition_error_code, partition_error_message};
use super::str_bytes;

pub async fn handle(shard: &Rc<Shard>, request: ProduceRequest, _version: i16) -> Reply {
    let acks = request.acks;
    // Transactional batches need no more here than idempotent ones: the owner opens the
    // partition's transaction at its first batch (shards' `txn::partition`).
    let refuse_all = if !matches!(acks, -1..=1) {
        Some((errors::INVALID_REQUIRED_ACKS, "acks must be -1, 0 or 1"))
    } else {
        None
    };
    let mut topics = Vec::with_capacity(request.topic_data.len());
    for topic in request.topic_data {
        let name = topic.name.0.as_str().to_string();
        let mut partitions = Vec::with_capacity(topic.partition_data.len());
        for data in topic.partition_data {
            let wait = match (refuse_all, data.records) {
                (Some((code, message)), _) => Err((code, message.to_string())),
                (None, None) => Err((errors::CORRUPT_MESSAGE, "records are null".to_string())),
                (None, Some(records)) => Ok(shard.produce(&name, data.index, records, acks).await),
            };
            partitions.push((data.index, wait));
        }
        topics.push((topic.name, partitions));
    }
    if acks == 0 {
        return Box::pin(async { None });
    }
    Box::pin(async move {
        let mut responses = Vec::with_capacity(topics.len());
        for (name, partitions) in topics {
            let mut partition_responses = Vec::with_capacity(partitions.len());
            for (index, wait) in partitions {
                let result = match wait {
                    Ok(wait) => wait.await.map_err(|e: PartitionError| {
                        (partition_error_code(&e), partition_error_message(&e))
                    }),
                    Err(refused) => Err(refused),
                };
                partition_responses.push(partition_response(index, result));
            }
            responses.push(
                TopicProduceResponse::default()
                    .with_name(name)
                    .with_partition_responses(partition_responses),
            );
        }
        Some(ResponseKind::Produce(ProduceResponse::default().with_responses(responses)))
    })
}

fn partition_response(
    index: i32,
    result: Result<shardlog_shards::ProduceAck, (i16, String)>,
) -> PartitionProduceResponse {
    let response =
        PartitionProduceResponse::default().with_index(index).with_log_append_time_ms(-1);
    match result {
        Ok(ack) => response
            .with_error_code(errors::NONE)
            .with_base_offset(ack.base_offset)
            .with_log_start_offset(ack.log_start_offset)
            .with_log_append_time_ms(ack.log_append_time_ms),
        Err((code, message)) => response
            .with_error_code(code)
            .with_base_offset(-1)
            .with_log_start_offset(-1)
            .with_error_message(Some(str_bytes(&message))),
    }
}
