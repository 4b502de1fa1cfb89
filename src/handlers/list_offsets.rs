//! ListOffsets (v0-v9): earliest (-2), latest (-1, the high watermark; the last stable
//! offset with isolation_level=1, read_committed), by timestamp, the
//! largest timestamp (-3, v7+), the earliest local offset (-4, v8+: the earliest, as
//! nothing is tiered) and the latest tiered offset (-5, v9+: -1, as nothing is tiered).
//!
//! v0 answers a list (`old_style_offsets`, at most `max_num_offsets` long) instead of one
//! offset: shardlog keeps no per-partition segments whose base offsets Kafka listed there,
//! so the list holds the one offset v1 would answer (none when v1 finds none).
//!
//! v4+: current_leader_epoch is checked (-1: not), as in Fetch (FENCED_LEADER_EPOCH,
//! UNKNOWN_LEADER_EPOCH), and the answer carries its offset's leader epoch (KIP-320).

use std::rc::Rc;

use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsRequest};
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::ResponseKind;
use shardlog_net::Reply;
use shardlog_shards::Shard;

use shardlog_shards::acl::AclOperation;

use super::authz::Caller;
use super::errors::{self, partition_error_code};

pub fn handle(
    shard: Rc<Shard>,
    caller: Caller,
    request: ListOffsetsRequest,
    version: i16,
) -> Reply {
    Box::pin(async move {
        let read_committed = request.isolation_level == 1;
        let mut topics = Vec::with_capacity(request.topics.len());
        for topic in request.topics {
            let name = topic.name.0.as_str().to_string();
            let described = caller.topic(AclOperation::Describe, &name);
            let mut partitions = Vec::with_capacity(topic.partitions.len());
            for partition in topic.partitions {
                partitions.push(match described {
                    true => {
                        list_partition(&shard, &name, &partition, version, read_committed).await
                    }
                    false => ListOffsetsPartitionResponse::default()
                        .with_partition_index(partition.partition_index)
                        .with_error_code(errors::TOPIC_AUTHORIZATION_FAILED)
                        .with_offset(-1)
                        .with_timestamp(-1),
                });
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

async fn list_partition(
    shard: &Shard,
    topic: &str,
    partition: &ListOffsetsPartition,
    version: i16,
    read_committed: bool,
) -> ListOffsetsPartitionResponse {
    let response =
        ListOffsetsPartitionResponse::default().with_partition_index(partition.partition_index);
    let index = partition.partition_index;
    let found = shard
        .list_offsets(
            topic,
            index,
            partition.timestamp,
            read_committed,
            partition.current_leader_epoch,
        )
        .await;
    match found {
        Ok(listed) if version == 0 => {
            let wanted = usize::try_from(partition.max_num_offsets).unwrap_or(0);
            let offsets = if listed.offset >= 0 { vec![listed.offset] } else { Vec::new() };
            response
                .with_error_code(errors::NONE)
                .with_old_style_offsets(offsets.into_iter().take(wanted).collect())
                .with_timestamp(listed.timestamp)
        }
        Ok(listed) => {
            // leader_epoch exists from v4 (the encoder refuses it before): the epoch of
            // the offset's batch, from the partition's leader-epoch cache (KIP-320).
            let epoch = if version < 4 { -1 } else { listed.leader_epoch };
            response
                .with_error_code(errors::NONE)
                .with_offset(listed.offset)
                .with_timestamp(listed.timestamp)
                .with_leader_epoch(epoch)
        }
        Err(e) => {
            response.with_error_code(partition_error_code(&e)).with_offset(-1).with_timestamp(-1)
        }
    }
}
