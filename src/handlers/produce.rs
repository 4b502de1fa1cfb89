//! Produce (v0-v11): the write hot path, top to bottom.
//!
//! v0-v2 carry a message set of format v0/v1 (magic 0/1): each partition's set is
//! converted to one v2 record batch (`shardlog_net::legacy_format`) and then takes the
//! same path as a v3+ batch; a set that does not convert is refused for its partition.
//!
//! Phase one, in arrival order: for each partition, route to the owner shard, where the
//! batches are validated and queued in the shard log (offsets assigned). Phase two: wait
//! for the fdatasync that covers each partition's batches, then answer. acks=0: no
//! response at all (the appends still become durable with the next flush).

use std::rc::Rc;

use kafka_protocol::messages::produce_request::ProduceRequest;
use kafka_protocol::messages::produce_response::{
    BatchIndexAndErrorMessage, PartitionProduceResponse, ProduceResponse, TopicProduceResponse,
};
use kafka_protocol::messages::ResponseKind;
use shardlog_net::{legacy_format, Reply};
use shardlog_shards::{PartitionError, Shard};

use shardlog_shards::acl::AclOperation::Write;

use super::authz::Caller;
use super::errors::{self, partition_error_code, partition_error_message};
use super::str_bytes;

/// `max_records_bytes`: what a compressed v0/v1 message set may decompress to.
pub async fn handle(
    shard: &Rc<Shard>,
    caller: &Caller,
    request: ProduceRequest,
    version: i16,
    max_records_bytes: usize,
) -> Reply {
    let acks = request.acks;
    // The owner verifies a transaction's first batch in a partition with the transactional
    // id's coordinator (shards' `txn::verify`, KIP-890), so the id goes along.
    let transactional_id = request.transactional_id.as_ref().map(|id| id.0.as_str());
    let refuse_all = if !matches!(acks, -1..=1) {
        Some((errors::INVALID_REQUIRED_ACKS, "acks must be -1, 0 or 1"))
    } else if transactional_id.is_some_and(|id| !caller.transactional_id(Write, id)) {
        let code = errors::TRANSACTIONAL_ID_AUTHORIZATION_FAILED;
        Some((code, "WRITE on the transactional id is needed"))
    } else {
        None
    };
    let mut topics = Vec::with_capacity(request.topic_data.len());
    for topic in request.topic_data {
        let name = topic.name.0.as_str().to_string();
        let writable = caller.topic(Write, &name);
        let mut partitions = Vec::with_capacity(topic.partition_data.len());
        for data in topic.partition_data {
            let wait = match (refuse_all, data.records) {
                (Some((code, message)), _) => Err((code, message.to_string())),
                (None, _) if !writable => {
                    let code = errors::TOPIC_AUTHORIZATION_FAILED;
                    Err((code, "WRITE on the topic is needed".to_string()))
                }
                (None, None) => Err((errors::CORRUPT_MESSAGE, "records are null".to_string())),
                (None, Some(records)) if version < 3 => {
                    match legacy_format::message_set_to_record_batch(&records, max_records_bytes) {
                        Ok(batch) => Ok(shard.produce(&name, data.index, batch, acks, None).await),
                        Err(e) => {
                            // Produce v0-v2 responses carry no error message: say it here.
                            tracing::debug!(topic = %name, partition = data.index, "refused message set: {e}");
                            Err((errors::legacy_format_error_code(&e), e.to_string()))
                        }
                    }
                }
                (None, Some(records)) => {
                    Ok(shard.produce(&name, data.index, records, acks, transactional_id).await)
                }
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
                    Ok(wait) => wait.await.map_err(|e: PartitionError| Refused {
                        code: partition_error_code(&e),
                        message: partition_error_message(&e),
                        record_errors: record_errors(&e),
                    }),
                    Err((code, message)) => {
                        Err(Refused { code, message, record_errors: Vec::new() })
                    }
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

/// A partition's refusal as the response carries it.
struct Refused {
    code: i16,
    message: String,
    /// KIP-467 (Produce v8+): the records that caused the refusal, by index.
    record_errors: Vec<BatchIndexAndErrorMessage>,
}

fn record_errors(error: &PartitionError) -> Vec<BatchIndexAndErrorMessage> {
    match error {
        PartitionError::InvalidRecords { message, record_indexes } => record_indexes
            .iter()
            .map(|index| {
                BatchIndexAndErrorMessage::default()
                    .with_batch_index(*index)
                    .with_batch_index_error_message(Some(str_bytes(message)))
            })
            .collect(),
        _ => Vec::new(),
    }
}

fn partition_response(
    index: i32,
    result: Result<shardlog_shards::ProduceAck, Refused>,
) -> PartitionProduceResponse {
    let response =
        PartitionProduceResponse::default().with_index(index).with_log_append_time_ms(-1);
    match result {
        Ok(ack) => response
            .with_error_code(errors::NONE)
            .with_base_offset(ack.base_offset)
            .with_log_start_offset(ack.log_start_offset)
            .with_log_append_time_ms(ack.log_append_time_ms),
        Err(refused) => response
            .with_error_code(refused.code)
            .with_base_offset(-1)
            .with_log_start_offset(-1)
            .with_error_message(Some(str_bytes(&refused.message)))
            .with_record_errors(refused.record_errors),
    }
}
