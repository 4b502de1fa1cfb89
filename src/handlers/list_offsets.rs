//! ListOffsets (v1-v6): earliest (-2), latest (-1, the high watermark) and by timestamp.

use std::rc::Rc;

use kafka_protocol::messages::list_offsets_request::ListOffsetsRequest;
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::ResponseKind;
use shardlog_net::Reply;
use shardlog_shards::Shard;

use super::errors::{self, partition_error_code};

pub fn handle(shard: Rc<Shard>, request: ListOffsetsRequest, version: i16) -> Reply {
    Box::pin(async move {
        let mut topics = Vec::with_capacity(request.topics.len());
        for topic in request.topics {
            let name = topic.name.0.as_str().to_string();
            let mut partitions = Vec::with_capacity(topic.partitions.len());
            for partition in topic.partitions {
                let response = ListOffsetsPartitionResponse::default()
                    .with_partition_index(partition.partition_index);
                let response = match shard
                    .list_offsets(&name, partition.partition_index, partition.timestamp)
                    .await
                {
                    Ok((offset, timestamp)) => response
                        .with_error_code(errors::NONE)
                        .with_offset(offset)
                        .with_timestamp(timestamp)
                        // leader_epoch exists from v4 (the encoder refuses it before).
                        .with_leader_epoch(if version >= 4 { 0 } else { -1 }),
                    Err(e) => response
                        .with_error_code(partition_error_code(&e))
                        .with_offset(-1)
                        .with_timestamp(-1),
                };
                partitions.push(response);
            }
            topics.push(
                ListOffsetsTopicResponse::default()
                    .with_name(topic.name)
                    .with_partitions(partitions),
            );
        }
        Some(ResponseKind::ListOffsets(ListOffsetsResponse::default().with_topics(topics)))
    })
}
