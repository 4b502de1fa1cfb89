//! Admin operations on partitions: CreatePartitions (on the controller, shard 0) and
//! DeleteRecords (on the partition's owner shard).
//!
//! CreatePartitions follows the controller's contract (`controller.rs`): validated under
//! the controller lock, a change record written to shard 0's log and fdatasync'd, sent to
//! every shard (each creates the partitions it owns), and only then answered. Existing
//! partitions keep their data and owners; new ones are placed like CreateTopics places
//! them, or on the shards the client names.
//!
//! DeleteRecords moves a partition's log start offset forward on its owner (forwarded
//! over the mesh like Produce and ListOffsets when the request lands elsewhere) and is
//! answered only once the log's LogStart entry is durable, so no crash after the answer
//! brings the deleted records back. Not a hot path.

use std::rc::Rc;

use shardlog_storage::{LogStartError, Offset};

use crate::controller::CONTROLLER_SHARD;
use crate::error::{PartitionError, TopicError};
use crate::message::{ShardReply, ShardRequest};
use crate::metadata::NewPartitions;
use crate::metadata_log::PendingTable;
use crate::ops::append_error;
use crate::shard::Shard;
use crate::topic_config::CleanupPolicy;

/// Kafka's sentinel for "up to the high watermark" in DeleteRecords.
pub const DELETE_TO_HIGH_WATERMARK: Offset = -1;

/// The most partitions a topic may have (as CreateTopics).
const MAX_PARTITIONS: i32 = 100_000;

impl Shard {
    /// Add partitions to existing topics through the controller, from any shard.
    pub async fn create_partitions(
        self: &Rc<Self>,
        topics: Vec<NewPartitions>,
        validate_only: bool,
    ) -> Vec<Result<(), TopicError>> {
        if self.id == CONTROLLER_SHARD {
            return self.controller_create_partitions(topics, validate_only).await;
        }
        let request = ShardRequest::CreatePartitions { topics, validate_only };
        match self.mesh.call(CONTROLLER_SHARD, request).await {
            ShardReply::CreatePartitions(results) => results,
            other => panic!("create partitions answered with {other:?}"),
        }
    }

    pub(crate) async fn controller_create_partitions(
        self: &Rc<Self>,
        topics: Vec<NewPartitions>,
        validate_only: bool,
    ) -> Vec<Result<(), TopicError>> {
        assert_eq!(self.id, CONTROLLER_SHARD);
        let permit = self.controller_permit().await;
        let table = self.table();
        let mut pending = PendingTable::placing_on(&table, &self.config.nodes);
        let mut results = Vec::with_capacity(topics.len());
        for request in &topics {
            let placed = place_new_partitions(&pending, request);
            if let Ok((shards, replicas)) = &placed {
                if !validate_only {
                    pending.add_partitions(&request.topic, shards, replicas);
                    tracing::info!(topic = %request.topic, partitions = request.count,
                        "partitions added");
                }
            }
            results.push(placed.map(|_| ()));
        }
        let record = pending.into_record();
        drop(table);
        self.commit_changes(permit, record, results).await
    }

    /// DeleteRecords of one partition on whichever shard owns it: the new log start offset.
    pub async fn delete_records(
        &self,
        topic: &str,
        partition: i32,
        offset: Offset,
    ) -> Result<Offset, PartitionError> {
        match self.owner_of(topic, partition) {
            Err(e) => Err(e),
            Ok(owner) if owner == self.id => {
                self.delete_records_local(topic, partition, offset).await
            }
            Ok(owner) => {
                self.count_forward();
                let request =
                    ShardRequest::DeleteRecords { topic: topic.to_string(), partition, offset };
                match self.mesh.call(owner, request).await {
                    ShardReply::DeleteRecords(result) => result,
                    other => panic!("delete records answered with {other:?}"),
                }
            }
        }
    }

    /// On the owner: moves the log start to `offset` (-1: the high watermark) and waits
    /// until the move is durable. An offset below the current log start changes nothing
    /// and answers the current one, as Kafka does.
    pub async fn delete_records_local(
        &self,
        topic: &str,
        partition: i32,
        offset: Offset,
    ) -> Result<Offset, PartitionError> {
        let partition_id = self
            .local_partition(topic, partition)
            .ok_or(PartitionError::UnknownTopicOrPartition)?;
        self.check_leader_epoch(topic, partition, -1)?; // the leadership only
                                                        // As Kafka: only a topic whose cleanup.policy lists delete may lose records this way.
        if self.table().topic(topic).is_some_and(|meta| !CleanupPolicy::of(meta).delete) {
            return Err(PartitionError::PolicyViolation(format!(
                "Records of partition {topic}-{partition} can not be deleted due to the \
                 configured policy (cleanup.policy without delete)"
            )));
        }
        if let Some(group) = self.partition_group_of(topic, partition) {
            // Through the group, so every replica's copy moves (the module's docs).
            return self.delete_records_replicated(group, topic, partition, offset).await;
        }
        let info =
            self.log.partition_info(partition_id).ok_or(PartitionError::UnknownTopicOrPartition)?;
        let target = match offset {
            DELETE_TO_HIGH_WATERMARK => info.high_watermark,
            o if o < 0 => return Err(PartitionError::OffsetOutOfRange),
            o => o,
        };
        let (log_start_offset, durable) =
            self.log.advance_log_start(partition_id, target).map_err(|e| match e {
                LogStartError::AboveHighWatermark { .. } => PartitionError::OffsetOutOfRange,
                LogStartError::Append(e) => append_error(e),
            })?;
        if let Err(e) = durable.wait().await {
            self.fatal_storage_error(&e);
        }
        tracing::info!(shard = self.id, topic, partition, log_start_offset, "records deleted");
        Ok(log_start_offset)
    }
}

/// Checks one CreatePartitions request against the table; the owner shard and replica
/// nodes of each new partition if it is valid.
fn place_new_partitions(
    table: &PendingTable,
    request: &NewPartitions,
) -> Result<(Vec<u32>, Vec<Vec<u32>>), TopicError> {
    let name = &request.topic;
    let meta = table
        .topic(name)
        .ok_or_else(|| TopicError::UnknownTopic(format!("topic {name:?} does not exist")))?;
    let current = meta.partition_shards.len() as i32;
    if request.count <= current {
        return Err(TopicError::InvalidPartitions(format!(
            "topic {name:?} has {current} partitions; the new count must be higher, got {}",
            request.count
        )));
    }
    if request.count > MAX_PARTITIONS {
        return Err(TopicError::InvalidPartitions(format!(
            "number of partitions must be at most {MAX_PARTITIONS}, got {}",
            request.count
        )));
    }
    let new = (current as u32)..(request.count as u32);
    let Some(assignments) = &request.assignments else {
        let rf = meta.replication_factor();
        return Ok(new.map(|p| table.placement(meta.topic_number, p, rf)).unzip());
    };
    if meta.replication_factor() > 1 {
        return Err(TopicError::InvalidReplicaAssignment(format!(
            "topic {name:?} is replicated: explicit assignments of a replicated topic's \
             partitions are not supported yet (omit them to place the new partitions)"
        )));
    }
    if assignments.len() != new.len() {
        return Err(TopicError::InvalidReplicaAssignment(format!(
            "{} new partitions but {} assignments",
            new.len(),
            assignments.len()
        )));
    }
    let placed: Result<Vec<(u32, Vec<u32>)>, TopicError> = assignments
        .iter()
        .map(|brokers| assigned_broker(table.nr_shards(), table.nodes(), brokers))
        .collect();
    Ok(placed?.into_iter().unzip())
}

/// The shard and node an explicit assignment names: exactly one broker id (partitions
/// have one replica until partition groups exist), `node_id * 1024 + shard` of a node
/// and shard of the cluster (on a single node, a shard id).
fn assigned_broker(
    nr_shards: u32,
    nodes: &[u32],
    brokers: &[i32],
) -> Result<(u32, Vec<u32>), TopicError> {
    let [broker] = brokers else {
        return Err(TopicError::InvalidReplicaAssignment(format!(
            "assignment {brokers:?} has {} replicas; partitions have one replica until \
             replication's partition groups exist (use 1)",
            brokers.len()
        )));
    };
    let (node, shard) = (broker.div_euclid(1024), broker.rem_euclid(1024));
    match u32::try_from(node) {
        Ok(node) if nodes.contains(&node) && (shard as u32) < nr_shards => {
            Ok((shard as u32, vec![node]))
        }
        _ => Err(TopicError::InvalidReplicaAssignment(format!(
            "broker {broker} does not exist: the brokers are node_id * 1024 + shard for nodes \
             {nodes:?} and shards 0..{nr_shards}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::{NewTopic, TopicTable};

    fn table_with(partitions: i32) -> TopicTable {
        let mut table = TopicTable::new(3);
        let topic = NewTopic {
            name: "t".into(),
            num_partitions: partitions,
            replication_factor: 1,
            configs: Vec::new(),
        };
        table.add_topic(&topic, [1; 16]);
        table
    }

    fn request(count: i32, assignments: Option<Vec<Vec<i32>>>) -> NewPartitions {
        NewPartitions { topic: "t".into(), count, assignments }
    }

    #[test]
    fn new_partitions_continue_the_default_placement() {
        let table = table_with(2);
        let placed = place_new_partitions(&PendingTable::new(&table), &request(5, None)).unwrap();
        let whole = table_with(5).topic("t").unwrap().clone();
        assert_eq!(placed.0, whole.partition_shards[2..], "as if created with 5");
        assert_eq!(placed.1, whole.partition_replicas[2..], "as if created with 5");
    }

    #[test]
    fn create_partitions_refusals_carry_the_right_error() {
        let table = table_with(2);
        let cases = [
            (request(2, None), "InvalidPartitions"),
            (request(1, None), "InvalidPartitions"),
            (request(100_001, None), "InvalidPartitions"),
            (request(4, Some(vec![vec![0]])), "InvalidReplicaAssignment"),
            (request(3, Some(vec![vec![3]])), "InvalidReplicaAssignment"),
            (request(3, Some(vec![vec![-1]])), "InvalidReplicaAssignment"),
            (request(3, Some(vec![vec![0, 1]])), "InvalidReplicaAssignment"),
            (NewPartitions { topic: "nope".into(), count: 3, assignments: None }, "UnknownTopic"),
        ];
        for (req, expected) in cases {
            let error = place_new_partitions(&PendingTable::new(&table), &req).unwrap_err();
            assert!(format!("{error:?}").starts_with(expected), "{req:?}: {error:?}");
        }
        let pending = PendingTable::new(&table);
        let assigned = place_new_partitions(&pending, &request(4, Some(vec![vec![2], vec![0]])));
        let assigned = assigned.unwrap();
        assert_eq!(assigned, (vec![2, 0], vec![vec![0], vec![0]]), "explicit shards are honoured");
        let nodes = [0, 3];
        let cluster = PendingTable::placing_on(&table, &nodes);
        let remote = place_new_partitions(&cluster, &request(4, Some(vec![vec![3073], vec![1]])));
        assert_eq!(remote.unwrap(), (vec![1, 1], vec![vec![3], vec![0]]), "node 3's shard 1");
        for broker in [1025, 3075] {
            let refused = place_new_partitions(&cluster, &request(3, Some(vec![vec![broker]])));
            assert!(matches!(refused, Err(TopicError::InvalidReplicaAssignment(_))), "{broker}");
        }
    }
}
