//! The controller: shard 0 owns the topic table.
//!
//! Every change is (1) validated, (2) written to shard 0's log as a `Metadata` snapshot
//! entry and fdatasync'd, (3) sent to every other shard, which replaces its copy and
//! creates or drops its partitions, and (4) only then answered. So when CreateTopics
//! returns, every shard can serve the new partitions, and a crash after the answer
//! cannot lose the topic.
//!
//! Runs on shard 0 only (asserted); other shards reach it through the mesh.

use std::rc::Rc;

use shardlog_storage::{InternalEntry, InternalStream};
use tracing::info;

use crate::error::TopicError;
use crate::message::{ShardReply, ShardRequest};
use crate::metadata::{validate_topic_configs, validate_topic_name, NewTopic, TopicTable};
use crate::shard::Shard;
use crate::topic_config::{apply_change, check_max_message_bytes, TopicConfigChange};

/// The controller is always shard 0.
pub const CONTROLLER_SHARD: usize = 0;

impl Shard {
    /// Start-up on shard 0: restore the table from the recovered internal entries (the
    /// last `Metadata` snapshot) and hand it to every shard.
    pub async fn start_controller(
        self: &Rc<Self>,
        recovered: &[InternalEntry],
    ) -> Result<(), String> {
        assert_eq!(self.id, CONTROLLER_SHARD);
        let last = recovered.iter().rev().find(|e| e.stream == InternalStream::Metadata);
        let table = match last {
            Some(entry) => TopicTable::decode(&entry.payload)?,
            None => TopicTable::new(self.nr_shards as u32),
        };
        if table.nr_shards as usize != self.nr_shards {
            return Err(format!(
                "the data dir was created with {} shards but the broker runs {}; \
                 start it with --cores {}",
                table.nr_shards, self.nr_shards, table.nr_shards
            ));
        }
        info!(topics = table.topics.len(), version = table.version, "topic table restored");
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
        let _permit = self.controller_lock.acquire_permit(1).await;
        let mut table = (*self.table()).clone();
        let mut results = Vec::with_capacity(topics.len());
        for mut topic in topics {
            if topic.num_partitions == -1 {
                topic.num_partitions = self.config.default_partitions;
            }
            let ceiling = self.config.topic_max_message_bytes_ceiling;
            let checked = validate_new_topic(&table, &topic)
                .and_then(|()| check_max_message_bytes(&topic.configs, ceiling));
            if checked.is_ok() && !validate_only {
                table.add_topic(&topic, random_topic_id());
                info!(topic = %topic.name, partitions = topic.num_partitions, "topic created");
            }
            results.push(checked);
        }
        self.commit_table(table, results).await
    }

    pub(crate) async fn controller_delete_topics(
        self: &Rc<Self>,
        names: Vec<String>,
    ) -> Vec<Result<(), TopicError>> {
        assert_eq!(self.id, CONTROLLER_SHARD);
        let _permit = self.controller_lock.acquire_permit(1).await;
        let mut table = (*self.table()).clone();
        let results: Vec<_> = names
            .iter()
            .map(|name| match table.remove_topic(name) {
                Some(_) => Ok(()),
                None => Err(TopicError::UnknownTopic(format!("topic {name:?} does not exist"))),
            })
            .collect();
        self.commit_table(table, results).await
    }

    /// Persists and publishes `table` if it changed (before anyone is answered); if that
    /// fails, every result that succeeded fails with it.
    pub(crate) async fn commit_table(
        self: &Rc<Self>,
        table: TopicTable,
        results: Vec<Result<(), TopicError>>,
    ) -> Vec<Result<(), TopicError>> {
        if table.version == self.table().version {
            return results;
        }
        match self.persist_and_publish(table).await {
            Ok(()) => results,
            Err(e) => results.into_iter().map(|r| r.and(Err(e.clone()))).collect(),
        }
    }

    pub(crate) async fn persist_and_publish(
        self: &Rc<Self>,
        table: TopicTable,
    ) -> Result<(), TopicError> {
        let payload = table.encode();
        let durable = self
            .log
            .append_internal(InternalStream::Metadata, true, &payload)
            .map_err(|e| TopicError::Storage(format!("writing the topic table: {e:?}")))?;
        if let Err(e) = durable.wait().await {
            self.fatal_storage_error(&e);
        }
        self.publish_table(table).await;
        Ok(())
    }

    /// Sends the table to every other shard, waits for each to apply it, applies it here.
    async fn publish_table(self: &Rc<Self>, table: TopicTable) {
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
}

fn validate_new_topic(table: &TopicTable, topic: &NewTopic) -> Result<(), TopicError> {
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
    if topic.replication_factor != 1 && topic.replication_factor != -1 {
        return Err(TopicError::InvalidReplicationFactor(format!(
            "replication factor {} is not supported: this broker has no replication yet (use 1)",
            topic.replication_factor
        )));
    }
    validate_topic_configs(&topic.configs)
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
/// validated here, persisted (fdatasync'd snapshot) and published to every shard before
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
        let _permit = self.controller_lock.acquire_permit(1).await;
        let mut table = (*self.table()).clone();
        let mut results = Vec::with_capacity(changes.len());
        for TopicConfigChange { topic, change } in changes {
            let Some(meta) = table.topic(&topic) else {
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
                table.set_topic_configs(&topic, configs.clone());
                info!(%topic, ?configs, "topic configs changed");
            }
            results.push(checked.map(|_| ()));
        }
        self.commit_table(table, results).await
    }
}
