//! The controller: shard 0 owns the topic table.
//!
//! Every change is (1) validated against the table plus the request's earlier changes,
//! (2) written to shard 0's log as one change record of the metadata log
//! (`metadata_log/`) and fdatasync'd, (3) sent to every other shard, which applies it to
//! its copy and creates or drops its partitions, and (4) only then answered. So when
//! CreateTopics returns, every shard can serve the new partitions, and a crash after the
//! answer cannot lose the topic. Snapshots of the whole table are written in the
//! background (`metadata_log::SnapshotPolicy`).
//!
//! Runs on shard 0 only (asserted); other shards reach it through the mesh.

use std::rc::Rc;

use std::sync::Arc;

use glommio::sync::StaticPermit;
use shardlog_storage::{InternalEntry, InternalStream};
use tracing::{info, warn};

use crate::error::TopicError;
use crate::message::{ShardReply, ShardRequest};
use crate::metadata::{validate_topic_configs, validate_topic_name, NewTopic, TopicTable};
use crate::metadata_log::{self, ChangeRecord, PendingTable};
use crate::shard::Shard;
use crate::topic_config::{apply_change, check_max_message_bytes, TopicConfigChange};

/// The controller is always shard 0.
pub const CONTROLLER_SHARD: usize = 0;

impl Shard {
    /// Start-up on shard 0: restore the table from the recovered internal entries (the
    /// newest `Metadata` snapshot and the change records after it) and hand it to every
    /// shard. A fresh data dir first gets a durable snapshot of the empty table
    /// (`metadata_log` invariant 3).
    pub async fn start_controller(
        self: &Rc<Self>,
        recovered: &[InternalEntry],
    ) -> Result<(), String> {
        assert_eq!(self.id, CONTROLLER_SHARD);
        let (table, schedule) = match metadata_log::restore(recovered)? {
            Some(restored) => restored,
            None => {
                let table = TopicTable::new(self.nr_shards as u32);
                let payload = table.encode();
                let durable = self
                    .log
                    .append_internal(InternalStream::Metadata, true, &payload)
                    .map_err(|e| format!("writing the first topic table snapshot: {e:?}"))?;
                durable.wait().await.map_err(|e| format!("the first topic table: {e:?}"))?;
                let mut schedule = metadata_log::SnapshotSchedule::default();
                schedule.snapshot_taken(payload.len());
                (table, schedule)
            }
        };
        if table.nr_shards as usize != self.nr_shards {
            return Err(format!(
                "the data dir was created with {} shards but the broker runs {}; \
                 start it with --cores {}",
                table.nr_shards, self.nr_shards, table.nr_shards
            ));
        }
        info!(
            topics = table.topics.len(),
            version = table.version,
            changes_since_snapshot = schedule.changes_since,
            "topic table restored"
        );
        *self.metadata_snapshots.borrow_mut() = schedule;
        self.publish_table(table).await;
        Ok(())
    }

    /// Create topics through the controller, from any shard.
    pub async fn create_topics(
        self: &Rc<Self>,
        topics: Vec<NewTopic>,
        validate_only: bool,
    ) -> Vec<Result<(), TopicError>> {
        if self.id == CONTROLLER_SHARD {
            return self.controller_create_topics(topics, validate_only).await;
        }
        let request = ShardRequest::CreateTopics { topics, validate_only };
        match self.mesh.call(CONTROLLER_SHARD, request).await {
            ShardReply::CreateTopics(results) => results,
            other => panic!("create topics answered with {other:?}"),
        }
    }

    /// Delete topics through the controller, from any shard.
    pub async fn delete_topics(self: &Rc<Self>, names: Vec<String>) -> Vec<Result<(), TopicError>> {
        if self.id == CONTROLLER_SHARD {
            return self.controller_delete_topics(names).await;
        }
        match self.mesh.call(CONTROLLER_SHARD, ShardRequest::DeleteTopics { names }).await {
            ShardReply::DeleteTopics(results) => results,
            other => panic!("delete topics answered with {other:?}"),
        }
    }

    pub(crate) async fn controller_create_topics(
        self: &Rc<Self>,
        topics: Vec<NewTopic>,
        validate_only: bool,
    ) -> Vec<Result<(), TopicError>> {
        assert_eq!(self.id, CONTROLLER_SHARD);
        let permit = self.controller_permit().await;
        let table = self.table();
        let mut pending = PendingTable::placing_on(&table, &self.config.nodes);
        let mut results = Vec::with_capacity(topics.len());
        let mut created = Vec::with_capacity(topics.len());
        for topic in topics {
            let topic = self.config.with_defaults(topic);
            let ceiling = self.config.topic_max_message_bytes_ceiling;
            let checked = validate_new_topic(&pending, &topic)
                .and_then(|()| check_max_message_bytes(&topic.configs, ceiling));
            let creates = checked.is_ok() && !validate_only;
            if creates {
                pending.create(&topic, random_topic_id());
            }
            created.push(creates.then_some((topic.name, topic.num_partitions)));
            results.push(checked);
        }
        let record = pending.into_record();
        drop(table);
        let results = self.commit_changes(permit, record, results).await;
        // Logged once the change is in: a cluster node that is not the controller answers
        // NOT_CONTROLLER and creates nothing.
        for (created, result) in created.iter().zip(&results) {
            if let (Some((name, partitions)), Ok(())) = (created, result) {
                info!(topic = %name, partitions, "topic created");
            }
        }
        results
    }

    pub(crate) async fn controller_delete_topics(
        self: &Rc<Self>,
        names: Vec<String>,
    ) -> Vec<Result<(), TopicError>> {
        assert_eq!(self.id, CONTROLLER_SHARD);
        let permit = self.controller_permit().await;
        let table = self.table();
        let mut pending = PendingTable::new(&table);
        let results: Vec<_> = names
            .iter()
            .map(|name| match pending.delete(name) {
                true => Ok(()),
                false => Err(TopicError::UnknownTopic(format!("topic {name:?} does not exist"))),
            })
            .collect();
        let record = pending.into_record();
        drop(table);
        self.commit_changes(permit, record, results).await
    }

    /// The controller lock: held from validation until the change is published, and by a
    /// snapshot until it is appended (`metadata_log` invariant 1).
    pub(crate) async fn controller_permit(&self) -> StaticPermit {
        let permit = self.controller_lock.acquire_static_permit(1).await;
        permit.expect("the controller lock is never closed")
    }

    /// Writes and publishes a request's change record, if it changed anything, before
    /// anyone is answered; if that fails, every result that succeeded fails with it.
    /// Called under the controller lock (`permit`), with no copy of the table held
    /// (shard 0 applies the record in place).
    ///
    /// In a cluster (`metadata_group.rs`) a node that is not the controller answers every
    /// result NOT_CONTROLLER, and the record goes through the metadata group, which
    /// applies it (and writes the snapshots).
    pub(crate) async fn commit_changes(
        self: &Rc<Self>,
        permit: StaticPermit,
        record: Option<ChangeRecord>,
        results: Vec<Result<(), TopicError>>,
    ) -> Vec<Result<(), TopicError>> {
        if let Some(group) = self.metadata_group() {
            let committed = match (self.check_controller(), record) {
                (Err(e), _) => Err(e),
                (Ok(()), None) => Ok(()),
                (Ok(()), Some(record)) => self.propose_change(&group, record).await,
            };
            drop(permit);
            return match committed {
                Ok(()) => results,
                // Kafka answers NOT_CONTROLLER whatever the request held.
                Err(e) => results.into_iter().map(|_| Err(e.clone())).collect(),
            };
        }
        let Some(record) = record else { return results };
        match self.persist_and_publish(record).await {
            Ok(()) => {
                if self.metadata_snapshots.borrow().due(&self.config.metadata_snapshot) {
                    self.spawn_metadata_snapshot(permit);
                }
                results
            }
            Err(e) => results.into_iter().map(|r| r.and(Err(e.clone()))).collect(),
        }
    }

    pub(crate) async fn persist_and_publish(
        self: &Rc<Self>,
        record: ChangeRecord,
    ) -> Result<(), TopicError> {
        let payload = record.encode();
        let durable = self
            .log
            .append_internal(InternalStream::Metadata, false, &payload)
            .map_err(|e| TopicError::Storage(format!("writing a topic change: {e:?}")))?;
        self.metadata_snapshots.borrow_mut().record_change(payload.len());
        if let Err(e) = durable.wait().await {
            self.fatal_storage_error(&e);
        }
        self.publish_changes(Arc::new(record)).await;
        Ok(())
    }

    /// Encodes the table on a blocking thread and appends it as a snapshot; nobody waits
    /// for it to be durable. The caller keeps any change record from being appended
    /// meanwhile (`metadata_log` invariant 1).
    pub(crate) async fn write_metadata_snapshot(&self) {
        let table = self.table();
        let payload = glommio::executor().spawn_blocking(move || table.encode()).await;
        match self.log.append_internal(InternalStream::Metadata, true, &payload) {
            Ok(_durable) => {
                self.metadata_snapshots.borrow_mut().snapshot_taken(payload.len());
                info!(bytes = payload.len(), "topic table snapshot written");
            }
            // Tried again after the next change (a full disk, a log closing).
            Err(e) => warn!(error = ?e, "topic table snapshot not written"),
        }
    }

    /// Sends the table to every other shard, waits for each to apply it, applies it here
    /// (start-up, and a metadata snapshot installed: `metadata_group`).
    pub(crate) async fn publish_table(self: &Rc<Self>, table: TopicTable) {
        let mut pending = Vec::with_capacity(self.nr_shards);
        for peer in (0..self.nr_shards).filter(|p| *p != self.id) {
            let request = ShardRequest::ApplyTopicTable(Box::new(table.clone()));
            pending.push(self.mesh.send(peer, request).await);
        }
        for reply in pending {
            reply.wait().await;
        }
        self.apply_table(table);
    }

    /// Sends a change record to every other shard, waits for each to apply it to its
    /// copy, applies it here.
    async fn publish_changes(self: &Rc<Self>, record: Arc<ChangeRecord>) {
        let mut pending = Vec::with_capacity(self.nr_shards);
        for peer in (0..self.nr_shards).filter(|p| *p != self.id) {
            let request = ShardRequest::ApplyTopicChanges(record.clone());
            pending.push(self.mesh.send(peer, request).await);
        }
        for reply in pending {
            reply.wait().await;
        }
        self.apply_changes(&record);
    }

    /// Writes a snapshot of the table in the background: the request that made it due is
    /// answered at once, and hands its controller lock (`permit`) to this task, which
    /// encodes the table on a blocking thread and appends it before releasing the lock,
    /// so no change record slips between the table it holds and its place in the log
    /// (`metadata_log` invariant 1), and a stream of topic requests cannot starve it.
    /// Nobody waits for it to be durable: until it is, storage keeps the older snapshot
    /// and the changes after it (storage `state.rs` invariant 4).
    fn spawn_metadata_snapshot(self: &Rc<Self>, permit: StaticPermit) {
        let shard = self.clone();
        glommio::spawn_local(async move {
            shard.write_metadata_snapshot().await;
            drop(permit);
        })
        .detach();
    }
}

fn validate_new_topic(table: &PendingTable, topic: &NewTopic) -> Result<(), TopicError> {
    validate_topic_name(&topic.name)?;
    if table.topic(&topic.name).is_some() {
        return Err(TopicError::AlreadyExists(format!("topic {:?} already exists", topic.name)));
    }
    if topic.num_partitions < 1 || topic.num_partitions > 100_000 {
        return Err(TopicError::InvalidPartitions(format!(
            "number of partitions must be between 1 and 100000, got {}",
            topic.num_partitions
        )));
    }
    validate_replication_factor(topic.replication_factor, table.nodes(), table.nr_shards())?;
    validate_topic_configs(&topic.configs)
}

/// Replication factor 1 (or -1, the default) anywhere; on a cluster of n nodes also
/// 2..=n, provided the raft group ids of the replica sets the cluster may place do not
/// collide (`replication::partition::check_group_ids`: every window of 2..=n
/// consecutive nodes that `TopicTable::placement` can pick, on every shard, so a set of
/// this factor is checked against those of every other).
pub(crate) fn validate_replication_factor(
    replication_factor: i16,
    nodes: &[u32],
    nr_shards: u32,
) -> Result<(), TopicError> {
    let n = nodes.len();
    let refuse = |why: String| Err(TopicError::InvalidReplicationFactor(why));
    match replication_factor {
        1 | -1 => Ok(()),
        r if r < 1 => refuse(format!("replication factor must be at least 1 (or -1), got {r}")),
        r if n == 1 => refuse(format!(
            "replication factor {r} is larger than the number of nodes: a single node keeps \
             replication factor 1 (run a cluster with --peers to replicate)"
        )),
        r if r as usize > n => refuse(format!(
            "replication factor {r} is larger than the number of nodes in the cluster ({n})"
        )),
        _ => {
            let window = |size: usize, first: usize| -> Vec<u32> {
                (0..size).map(|k| nodes[(first + k) % n]).collect()
            };
            let sets: Vec<Vec<u32>> = (2..=n)
                .flat_map(|size| (0..n).map(move |first| (size, first)))
                .map(|(size, first)| window(size, first))
                .collect();
            let placements =
                (0..nr_shards).flat_map(|shard| sets.iter().map(move |set| (&set[..], shard)));
            crate::replication::partition::check_group_ids(placements)
                .map_err(|e| TopicError::InvalidReplicationFactor(e.to_string()))
        }
    }
}

/// The broker's default replication factor (`ShardConfig::default_replication_factor`),
/// checked at start-up: a real number (not -1) that a topic may be created with on `nodes`,
/// so that no auto-creation or CreateTopics with -1 is refused for it later.
pub fn validate_default_replication_factor(
    replication_factor: i16,
    nodes: &[u32],
    nr_shards: u32,
) -> Result<(), TopicError> {
    if replication_factor < 1 {
        return Err(TopicError::InvalidReplicationFactor(format!(
            "the default replication factor must be at least 1, got {replication_factor}"
        )));
    }
    validate_replication_factor(replication_factor, nodes, nr_shards)
}

/// A random 16-byte topic id (KIP-516), never all zeros.
fn random_topic_id() -> [u8; 16] {
    use std::hash::{BuildHasher, Hasher};
    let mut id = [0u8; 16];
    for half in id.chunks_mut(8) {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        half.copy_from_slice(&hasher.finish().to_le_bytes());
    }
    id
}

/// Topic config changes (AlterConfigs, IncrementalAlterConfigs): like create and delete,
/// validated here, persisted (fdatasync'd change record) and published to every shard before
/// the answer, so a change is in force everywhere and survives a crash once answered.
impl Shard {
    /// Change topics' configs through the controller, from any shard; one result per change.
    pub async fn alter_topic_configs(
        self: &Rc<Self>,
        changes: Vec<TopicConfigChange>,
        validate_only: bool,
    ) -> Vec<Result<(), TopicError>> {
        if self.id == CONTROLLER_SHARD {
            return self.controller_alter_topic_configs(changes, validate_only).await;
        }
        let request = ShardRequest::AlterTopicConfigs { changes, validate_only };
        match self.mesh.call(CONTROLLER_SHARD, request).await {
            ShardReply::AlterTopicConfigs(results) => results,
            other => panic!("alter topic configs answered with {other:?}"),
        }
    }

    pub(crate) async fn controller_alter_topic_configs(
        self: &Rc<Self>,
        changes: Vec<TopicConfigChange>,
        validate_only: bool,
    ) -> Vec<Result<(), TopicError>> {
        assert_eq!(self.id, CONTROLLER_SHARD);
        let permit = self.controller_permit().await;
        let table = self.table();
        let mut pending = PendingTable::new(&table);
        let mut results = Vec::with_capacity(changes.len());
        for TopicConfigChange { topic, change } in changes {
            let Some(meta) = pending.topic(&topic) else {
                let why = format!("topic {topic:?} does not exist");
                results.push(Err(TopicError::UnknownTopic(why)));
                continue;
            };
            let ceiling = self.config.topic_max_message_bytes_ceiling;
            let checked = apply_change(&meta.configs, &change).and_then(|configs| {
                check_max_message_bytes(&configs, ceiling)?;
                Ok(configs)
            });
            if let (Ok(configs), false) = (&checked, validate_only) {
                pending.set_configs(&topic, configs.clone());
                info!(%topic, ?configs, "topic configs changed");
            }
            results.push(checked.map(|_| ()));
        }
        let record = pending.into_record();
        drop(table);
        self.commit_changes(permit, record, results).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shard::ShardConfig;

    /// The reason of an INVALID_REPLICATION_FACTOR refusal; panics on anything else.
    fn why(checked: Result<(), TopicError>) -> String {
        match checked {
            Err(TopicError::InvalidReplicationFactor(why)) => why,
            other => panic!("not refused as a replication factor: {other:?}"),
        }
    }

    fn refusal(rf: i16, nodes: &[u32]) -> String {
        why(validate_replication_factor(rf, nodes, 4))
    }

    #[test]
    fn replication_factor_is_one_to_the_nodes_and_never_more() {
        for nodes in [&[0][..], &[1, 2, 3][..]] {
            assert_eq!(validate_replication_factor(1, nodes, 4), Ok(()));
            assert_eq!(validate_replication_factor(-1, nodes, 4), Ok(()));
        }
        assert_eq!(validate_replication_factor(3, &[1, 2, 3], 4), Ok(()));
        assert_eq!(validate_replication_factor(2, &[5, 9], 1), Ok(()));
        assert_eq!(validate_replication_factor(2, &[1, 2, 3], 4), Ok(()));
        assert_eq!(validate_replication_factor(3, &[1, 2, 3, 4, 5], 8), Ok(()));
        assert!(refusal(4, &[1, 2, 3]).contains("number of nodes in the cluster (3)"));
        assert!(refusal(3, &[0]).contains("single node"));
        assert!(refusal(0, &[1, 2, 3]).contains("at least 1"));
        assert!(refusal(-2, &[1, 2, 3]).contains("at least 1"));
    }

    fn default_refusal(rf: i16, nodes: &[u32]) -> String {
        why(validate_default_replication_factor(rf, nodes, 4))
    }

    #[test]
    fn the_default_replication_factor_is_one_to_the_nodes_and_never_minus_one() {
        assert_eq!(validate_default_replication_factor(1, &[0], 4), Ok(()));
        assert_eq!(validate_default_replication_factor(3, &[1, 2, 3], 4), Ok(()));
        for rf in [0, -1, -3] {
            assert!(default_refusal(rf, &[1, 2, 3]).contains("at least 1, got"), "{rf}");
        }
        assert!(default_refusal(2, &[0]).contains("single node"));
        assert!(default_refusal(4, &[1, 2, 3]).contains("number of nodes in the cluster (3)"));
    }

    #[test]
    fn minus_one_takes_the_broker_defaults_and_a_number_is_kept() {
        let config = ShardConfig {
            default_partitions: 6,
            default_replication_factor: 3,
            ..ShardConfig::default()
        };
        let asked = |num_partitions, replication_factor| NewTopic {
            name: "t".into(),
            num_partitions,
            replication_factor,
            configs: vec![("cleanup.policy".into(), "compact".into())],
        };
        assert_eq!(config.with_defaults(asked(-1, -1)), asked(6, 3));
        assert_eq!(config.with_defaults(asked(2, 1)), asked(2, 1));
        assert_eq!(config.with_defaults(asked(-1, 2)), asked(6, 2));
        // Anything else is left for validation to refuse.
        assert_eq!(config.with_defaults(asked(0, -2)), asked(0, -2));
    }
}
