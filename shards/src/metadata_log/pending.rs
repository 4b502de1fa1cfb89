//! The controller's view of the table while it validates one request: the table as it
//! is, plus the changes accepted so far in that request (a later topic of the same
//! request sees an earlier one). Costs what the request touches, never a copy of the
//! table: that copy, per request, was what made the 4,000th topic cost three times the
//! first (issue 19).

use std::collections::BTreeMap;

use super::change::{ChangeRecord, TopicChange};
use crate::metadata::{NewTopic, TopicMeta, TopicTable, SINGLE_NODE_LIST};

/// The table plus the changes of one request, not yet written.
pub struct PendingTable<'a> {
    table: &'a TopicTable,
    /// The nodes new partitions are placed on (sorted; this node alone on a single node).
    nodes: &'a [u32],
    /// Topics this request created, changed (`Some`) or deleted (`None`).
    touched: BTreeMap<String, Option<TopicMeta>>,
    next_topic_number: u32,
    changes: Vec<TopicChange>,
}

impl<'a> PendingTable<'a> {
    /// A request on a single node: new partitions are placed on it.
    pub fn new(table: &'a TopicTable) -> Self {
        PendingTable::placing_on(table, SINGLE_NODE_LIST)
    }

    /// A request whose new partitions are placed over `nodes` (sorted node ids).
    pub fn placing_on(table: &'a TopicTable, nodes: &'a [u32]) -> Self {
        assert!(!nodes.is_empty(), "partitions placed on no node");
        PendingTable {
            table,
            nodes,
            touched: BTreeMap::new(),
            next_topic_number: table.next_topic_number,
            changes: Vec::new(),
        }
    }

    /// A topic as this request sees it.
    pub fn topic(&self, name: &str) -> Option<&TopicMeta> {
        match self.touched.get(name) {
            Some(touched) => touched.as_ref(),
            None => self.table.topic(name),
        }
    }

    pub fn nr_shards(&self) -> u32 {
        self.table.nr_shards
    }

    /// The nodes partitions are placed on.
    pub fn nodes(&self) -> &[u32] {
        self.nodes
    }

    /// The default owner shard and replica nodes of a partition of a topic with
    /// `replication_factor` replicas (`TopicTable::placement`).
    pub fn placement(
        &self,
        topic_number: u32,
        partition: u32,
        replication_factor: usize,
    ) -> (u32, Vec<u32>) {
        self.table.placement(topic_number, partition, self.nodes, replication_factor)
    }

    /// Creates a validated topic with the next topic number, placed by default.
    pub fn create(&mut self, topic: &NewTopic, topic_id: [u8; 16]) {
        let meta = self.table.new_topic_meta(topic, self.next_topic_number, topic_id, self.nodes);
        self.next_topic_number += 1;
        self.touched.insert(meta.name.clone(), Some(meta.clone()));
        self.changes.push(TopicChange::Create(meta));
    }

    /// Deletes a topic; false if it does not exist.
    pub fn delete(&mut self, name: &str) -> bool {
        let Some(topic_number) = self.topic(name).map(|m| m.topic_number) else {
            return false;
        };
        self.touched.insert(name.to_string(), None);
        self.changes.push(TopicChange::Delete { name: name.to_string(), topic_number });
        true
    }

    /// Appends partitions owned by `shards` on `replicas` to an existing topic (validated
    /// before).
    pub fn add_partitions(&mut self, name: &str, shards: &[u32], replicas: &[Vec<u32>]) {
        let mut meta = self.topic(name).cloned().expect("add_partitions to an existing topic");
        meta.partition_shards.extend_from_slice(shards);
        meta.partition_replicas.extend_from_slice(replicas);
        self.changes.push(TopicChange::AddPartitions {
            name: name.to_string(),
            topic_number: meta.topic_number,
            partition_shards: shards.to_vec(),
            partition_replicas: replicas.to_vec(),
        });
        self.touched.insert(name.to_string(), Some(meta));
    }

    /// Replaces an existing topic's explicit configs (validated before); no change is
    /// recorded when they are the same.
    pub fn set_configs(&mut self, name: &str, configs: Vec<(String, String)>) {
        let mut meta = self.topic(name).cloned().expect("configs of an existing topic");
        if meta.configs == configs {
            return;
        }
        meta.configs = configs.clone();
        self.changes.push(TopicChange::SetConfigs {
            name: name.to_string(),
            topic_number: meta.topic_number,
            configs,
        });
        self.touched.insert(name.to_string(), Some(meta));
    }

    /// The record of this request's changes, or None if it changed nothing.
    pub fn into_record(self) -> Option<ChangeRecord> {
        if self.changes.is_empty() {
            return None;
        }
        Some(ChangeRecord { base_version: self.table.version, changes: self.changes })
    }
}
