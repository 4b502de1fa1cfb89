//! DeleteRecords (v0-v2): moves each partition's log start offset forward (-1: to the
//! high watermark), answered once the move is durable. Served by the partition's owner;
//! a request that lands on another shard is forwarded over the mesh, as Produce and
//! ListOffsets are. An offset past the high watermark (or below -1) is
//! OFFSET_OUT_OF_RANGE; the low watermark answered is the new log start offset.
//!
//! Partitions are handled one after another (each waits for its own fdatasync): an
//! admin call, not a hot path.

use std::rc::Rc;

use kafka_protocol::messages::delete_records_request::DeleteRecordsRequest;
use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsResponse, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::ResponseKind;
use shardlog_net::Reply;
use shardlog_shards::Shard;

use shardlog_shards::acl::AclOperation;

use super::authz::Caller;
use super::errors::{self, partition_error_code};

pub fn handle(shard: Rc<Shard>, caller: Caller, request: DeleteRecordsRequest) -> Reply {
    Box::pin(async move {
        let mut topics = Vec::with_capacity(request.topics.len());
        for topic in request.topics {
            let name = topic.name.0.as_str().to_string();
            let allowed = caller.topic(AclOperation::Delete, &name);
            let mut partitions = Vec::with_capacity(topic.partitions.len());
            for partition in topic.partitions {
                let index = partition.partition_index;
                let response = DeleteRecordsPartitionResult::default().with_partition_index(index);
                if !allowed {
                    let code = errors::TOPIC_AUTHORIZATION_FAILED;
                    partitions.push(response.with_error_code(code).with_low_watermark(-1));
                    continue;
                }
                partitions.push(match shard.delete_records(&name, index, partition.offset).await {
                    Ok(low_watermark) => {
                        response.with_error_code(errors::NONE).with_low_watermark(low_watermark)
                    }
                    Err(e) => {
                        response.with_error_code(partition_error_code(&e)).with_low_watermark(-1)
                    }
                });
            }
            topics.push(
                DeleteRecordsTopicResult::default()
                    .with_name(topic.name)
                    .with_partitions(partitions),
            );
        }
        Some(ResponseKind::DeleteRecords(DeleteRecordsResponse::default().with_topics(topics)))
    })
}
