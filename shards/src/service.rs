//! Requests that arrive from peer shards, and fetch routing across shards.

use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

use glommio::channels::local_channel;

use crate::mesh::{MeshService, ReplyFuture};
use crate::message::{PartitionData, PartitionRead, ShardReply, ShardRequest};
use crate::shard::Shard;

impl MeshService for Shard {
    fn handle(self: Rc<Self>, _from: usize, request: ShardRequest) -> ReplyFuture {
        match request {
            ShardRequest::Produce { topic, partition, records, acks, transactional_id } => {
                // Phase one (the append, or joining its transaction's verification) happens
                // here, in arrival order.
                let transactional_id = transactional_id.as_deref();
                let wait = self.produce_local(&topic, partition, records, acks, transactional_id);
                Box::pin(async move { ShardReply::Produce(wait.await) })
            }
            ShardRequest::Fetch { reads, max_wait_ms, min_bytes, max_bytes } => {
                Box::pin(async move {
                    let max_wait = Duration::from_millis(max_wait_ms);
                    ShardReply::Fetch(
                        self.fetch_local(&reads, max_wait, min_bytes, max_bytes).await,
                    )
                })
            }
            ShardRequest::ListOffsets {
                topic,
                partition,
                timestamp_ms,
                read_committed,
                current_leader_epoch,
            } => Box::pin(async move {
                let listed = self.list_offsets_local(
                    &topic,
                    partition,
                    timestamp_ms,
                    read_committed,
                    current_leader_epoch,
                );
                ShardReply::ListOffsets(listed.await)
            }),
            ShardRequest::OffsetForLeaderEpoch {
                topic,
                partition,
                current_leader_epoch,
                leader_epoch,
            } => {
                let found = self.offset_for_leader_epoch_local(
                    &topic,
                    partition,
                    current_leader_epoch,
                    leader_epoch,
                );
                Box::pin(async move { ShardReply::OffsetForLeaderEpoch(found) })
            }
            ShardRequest::CreateTopics { topics, validate_only } => Box::pin(async move {
                ShardReply::CreateTopics(self.controller_create_topics(topics, validate_only).await)
            }),
            ShardRequest::DeleteTopics { names } => Box::pin(async move {
                ShardReply::DeleteTopics(self.controller_delete_topics(names).await)
            }),
            ShardRequest::ApplyTopicTable(table) => {
                self.apply_table(*table);
                Box::pin(async { ShardReply::ApplyTopicTable })
            }
            ShardRequest::ApplyTopicChanges(record) => {
                self.apply_changes(&record);
                Box::pin(async { ShardReply::ApplyTopicChanges })
            }
            ShardRequest::ControllerNode => {
                let node = self.metadata_group().and_then(|g| g.leader_node());
                Box::pin(async move { ShardReply::ControllerNode(node) })
            }
            ShardRequest::PartitionLeader { group, leader, term } => {
                self.set_partition_leader(group, (leader, term));
                Box::pin(async { ShardReply::PartitionLeader })
            }
            ShardRequest::PartitionIsr { group, isr } => {
                self.partition_isrs.borrow_mut().insert(group, isr);
                Box::pin(async { ShardReply::PartitionIsr })
            }
            ShardRequest::AlterTopicConfigs { changes, validate_only } => Box::pin(async move {
                let results = self.controller_alter_topic_configs(changes, validate_only).await;
                ShardReply::AlterTopicConfigs(results)
            }),
            ShardRequest::AlterScramCredentials { alterations } => Box::pin(async move {
                let results = self.controller_alter_scram_credentials(alterations).await;
                ShardReply::AlterScramCredentials(results)
            }),
            ShardRequest::Metrics(scope) => Box::pin(async move {
                ShardReply::Metrics(Box::new(self.metrics_snapshot(&scope).await))
            }),
            ShardRequest::Health => {
                let stopped = self.log.stopped_reason();
                Box::pin(async { ShardReply::Health(stopped) })
            }
            ShardRequest::CreatePartitions { topics, validate_only } => Box::pin(async move {
                let results = self.controller_create_partitions(topics, validate_only).await;
                ShardReply::CreatePartitions(results)
            }),
            ShardRequest::DeleteRecords { topic, partition, offset } => Box::pin(async move {
                ShardReply::DeleteRecords(
                    self.delete_records_local(&topic, partition, offset).await,
                )
            }),
            ShardRequest::TxnMarker { topic, partition, producer_id, producer_epoch, commit } => {
                Box::pin(async move {
                    ShardReply::TxnMarker(
                        self.write_txn_marker(
                            topic,
                            partition,
                            producer_id,
                            producer_epoch,
                            commit,
                        )
                        .await,
                    )
                })
            }
            ShardRequest::VerifyTxnPartition {
                transactional_id,
                producer_id,
                producer_epoch,
                topic,
                partition,
            } => Box::pin(async move {
                let partition = (topic, partition);
                let answer = self
                    .verify_txn_partition(&transactional_id, producer_id, producer_epoch, partition)
                    .await;
                ShardReply::VerifyTxnPartition(answer)
            }),
            ShardRequest::TxnOffsetsMarker { group, producer_id, commit } => Box::pin(async move {
                ShardReply::TxnOffsetsMarker(
                    self.resolve_txn_offsets(&group, producer_id, commit).await,
                )
            }),
            ShardRequest::CreateAcls { bindings } => Box::pin(async move {
                ShardReply::CreateAcls(self.controller_create_acls(bindings).await)
            }),
            ShardRequest::DeleteAcls { filters } => Box::pin(async move {
                ShardReply::DeleteAcls(self.controller_delete_acls(filters).await)
            }),
            request @ (ShardRequest::DescribeGroup { .. }
            | ShardRequest::ResetGroupOffsets { .. }) => {
                Box::pin(crate::group::admin::answer(self, request))
            }
        }
    }
}

impl Shard {
    /// Fetch from partitions on any shards: local ones directly, the others forwarded to
    /// their owners, each long-polling on its own. The first owner to answer with data
    /// (or an error) ends the wait for all: the others are asked again without waiting,
    /// so no partition's records wait out `max_wait` behind another shard's empty
    /// partitions. Results keep the request's order.
    pub async fn fetch(
        self: &Rc<Self>,
        reads: Vec<PartitionRead>,
        max_wait: Duration,
        min_bytes: usize,
        max_bytes: usize,
    ) -> Vec<PartitionData> {
        // The common case (clients follow metadata): every partition is ours, so no task
        // per owner and no regrouping.
        if reads.iter().all(|r| self.owner_of(&r.topic, r.partition) == Ok(self.id)) {
            return self.fetch_local(&reads, max_wait, min_bytes, max_bytes).await;
        }
        let mut by_owner: BTreeMap<usize, Vec<(usize, PartitionRead)>> = BTreeMap::new();
        let mut results: Vec<Option<PartitionData>> = vec![None; reads.len()];
        for (index, read) in reads.into_iter().enumerate() {
            match self.owner_of(&read.topic, read.partition) {
                Ok(owner) => by_owner.entry(owner).or_default().push((index, read)),
                Err(error) => {
                    results[index] = Some(PartitionData {
                        topic: read.topic,
                        partition: read.partition,
                        result: Err(error),
                    })
                }
            }
        }
        let groups: BTreeMap<usize, (Vec<usize>, Vec<PartitionRead>)> =
            by_owner.into_iter().map(|(owner, group)| (owner, group.into_iter().unzip())).collect();
        let (sender, answers) = local_channel::new_bounded(groups.len().max(1));
        let sender = Rc::new(sender);
        for (&owner, (_, group)) in &groups {
            let (shard, group, sender) = (self.clone(), group.clone(), sender.clone());
            glommio::spawn_local(async move {
                let data = shard.fetch_from(owner, group, max_wait, min_bytes, max_bytes).await;
                // The receiver is gone when another owner's data already ended the wait.
                let _ = sender.try_send((owner, data));
            })
            .detach();
        }
        drop(sender);
        let mut answered: BTreeMap<usize, Vec<PartitionData>> = BTreeMap::new();
        while answered.len() < groups.len() {
            let (owner, data) = answers.recv().await.expect("every owner task answers");
            let bytes: usize =
                data.iter().map(|d| d.result.as_ref().map_or(0, |r| r.records.len())).sum();
            let ends_the_wait = bytes >= min_bytes.max(1) || data.iter().any(|d| d.result.is_err());
            answered.insert(owner, data);
            if ends_the_wait {
                let parked: Vec<usize> =
                    groups.keys().copied().filter(|o| !answered.contains_key(o)).collect();
                for other in parked {
                    let group = groups[&other].1.clone();
                    let now = self.fetch_from(other, group, Duration::ZERO, 0, max_bytes).await;
                    answered.insert(other, now);
                }
            }
        }
        for (owner, data) in answered {
            let indexes = &groups[&owner].0;
            assert_eq!(indexes.len(), data.len(), "a fetch reply lost partitions");
            for (&index, partition_data) in indexes.iter().zip(data) {
                results[index] = Some(partition_data);
            }
        }
        results.into_iter().map(|d| d.expect("every partition answered")).collect()
    }

    /// One owner's part of a fetch: read here, or forwarded over the mesh.
    async fn fetch_from(
        self: &Rc<Self>,
        owner: usize,
        reads: Vec<PartitionRead>,
        max_wait: Duration,
        min_bytes: usize,
        max_bytes: usize,
    ) -> Vec<PartitionData> {
        if owner == self.id {
            return self.fetch_local(&reads, max_wait, min_bytes, max_bytes).await;
        }
        self.count_forward();
        let max_wait_ms = max_wait.as_millis() as u64;
        let request = ShardRequest::Fetch { reads, max_wait_ms, min_bytes, max_bytes };
        match self.mesh.call(owner, request).await {
            ShardReply::Fetch(data) => data,
            other => panic!("fetch answered with {other:?}"),
        }
    }
}
