//! The topic table: what topics exist, their partitions' owner shards, their configs.
//!
//! Shard 0 (the controller) owns the table and persists it through its log as the
//! metadata log (`metadata_log/`): a change record per answered request, and now and
//! then a snapshot of the whole table (fdatasync'd before any shard sees a change). Every
//! shard holds a read-only copy, built by applying the same change records.
//!
//! On-disk format of the snapshot payload: one version byte (`TABLE_FORMAT_VERSION`, 3)
//! followed by the rkyv archive of [`TopicTable`]. Version 1 is the table before ACLs
//! and SASL users (no `acls`, no `users`), still read: it restores with neither. (Version
//! 2 is the change records', `metadata_log/change.rs`.)
//!
//! Invariants:
//! 1. Topic numbers are never reused, so a log entry of a deleted topic can never be
//!    mistaken for one of a newer topic with the same name.
//! 2. `nr_shards` is fixed when the data dir is created; partitions name their owner shard.

use std::collections::{BTreeMap, HashMap};

use shardlog_storage::PartitionId;

use crate::acl::AclTable;
use crate::codec::{decode_versioned, encode_versioned};
use crate::error::TopicError;
use crate::metadata_log::users::UserCredentials;
use crate::topic_config::topic_config_def;
pub use crate::topic_config::validate_topic_configs;

/// Version byte in front of the rkyv archive.
pub const TABLE_FORMAT_VERSION: u8 = 3;
/// The snapshot format before ACLs and SASL users: read, never written.
const TABLE_FORMAT_VERSION_1: u8 = 1;

/// The controller's view of every topic (a metadata log snapshot is this, archived).
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Debug, Default)]
pub struct TopicTable {
    /// Bumped on every change.
    pub version: u64,
    pub nr_shards: u32,
    pub next_topic_number: u32,
    pub topics: BTreeMap<String, TopicMeta>,
    /// Every ACL binding (`acl`), changed through the metadata log like the topics.
    pub acls: AclTable,
    /// SASL users' SCRAM credentials (`metadata_log/users.rs`).
    pub users: UserCredentials,
    /// Topic names by topic id, for the requests that name topics by id (Fetch v13+, which
    /// librdkafka 2.x sends, Metadata v10+, DeleteTopics v6+): kept by `insert_topic` and
    /// `remove_topic`, rebuilt by `decode`. Not archived (a zero-sized field in the
    /// archive: snapshots are byte-identical with and without it, tested).
    #[rkyv(with = rkyv::with::Skip)]
    ids: HashMap<[u8; 16], String>,
}

/// A snapshot of format version 1 (before ACLs and users), read and converted.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
struct TopicTableV1 {
    version: u64,
    nr_shards: u32,
    next_topic_number: u32,
    topics: BTreeMap<String, TopicMeta>,
}

/// One topic.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Debug, PartialEq)]
pub struct TopicMeta {
    pub name: String,
    pub topic_number: u32,
    pub topic_id: [u8; 16],
    /// Owner shard of each partition, by partition index.
    pub partition_shards: Vec<u32>,
    /// Configs set explicitly (at creation or by AlterConfigs; others take the defaults of
    /// `topic_config::TOPIC_CONFIGS`).
    pub configs: Vec<(String, String)>,
}

/// A topic to create, as asked by a client.
#[derive(Clone, Debug)]
pub struct NewTopic {
    pub name: String,
    pub num_partitions: i32,
    pub replication_factor: i16,
    pub configs: Vec<(String, String)>,
}

/// More partitions for an existing topic, as asked by a client (CreatePartitions).
#[derive(Clone, Debug)]
pub struct NewPartitions {
    pub topic: String,
    /// The new total number of partitions.
    pub count: i32,
    /// Broker ids (= shard ids) per new partition, or None to place them as CreateTopics does.
    pub assignments: Option<Vec<Vec<i32>>>,
}

impl TopicMeta {
    pub fn partition_id(&self, partition: i32) -> Option<PartitionId> {
        let index = u32::try_from(partition).ok()?;
        ((index as usize) < self.partition_shards.len())
            .then(|| PartitionId::new(self.topic_number, index))
    }

    pub fn owner(&self, partition: i32) -> Option<usize> {
        let index = usize::try_from(partition).ok()?;
        self.partition_shards.get(index).map(|s| *s as usize)
    }

    /// A config set explicitly on this topic.
    pub fn explicit_config(&self, key: &str) -> Option<&str> {
        self.configs.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// The effective value of a config: explicit, else the default.
    pub fn config(&self, key: &str) -> Option<&str> {
        self.configs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .or_else(|| topic_config_def(key).map(|d| d.default))
    }

    pub fn config_i64(&self, key: &str) -> Option<i64> {
        self.config(key).and_then(|v| v.parse().ok())
    }
}

impl PartialEq for TopicTable {
    /// Equal tables hold the same topics, ACLs and users; `ids` follows from `topics`.
    fn eq(&self, other: &Self) -> bool {
        fn fields(t: &TopicTable) -> impl PartialEq + '_ {
            (t.version, t.nr_shards, t.next_topic_number, &t.topics, &t.acls, &t.users)
        }
        fields(self) == fields(other)
    }
}

impl TopicTable {
    pub fn new(nr_shards: u32) -> Self {
        TopicTable { nr_shards, next_topic_number: 1, ..Default::default() }
    }

    pub fn topic(&self, name: &str) -> Option<&TopicMeta> {
        self.topics.get(name)
    }

    /// The topic with `id`, in constant time whatever the number of topics.
    pub fn topic_by_id(&self, id: [u8; 16]) -> Option<&TopicMeta> {
        self.topics.get(self.ids.get(&id)?)
    }

    pub fn encode(&self) -> Vec<u8> {
        encode_versioned(TABLE_FORMAT_VERSION, self)
    }

    pub fn decode(bytes: &[u8]) -> Result<TopicTable, String> {
        const WHAT: &str = "topic table snapshot";
        let mut table: TopicTable = if bytes.first() != Some(&TABLE_FORMAT_VERSION_1) {
            decode_versioned(TABLE_FORMAT_VERSION, WHAT, bytes)?
        } else {
            let old: TopicTableV1 = decode_versioned(TABLE_FORMAT_VERSION_1, WHAT, bytes)?;
            let TopicTableV1 { version, nr_shards, next_topic_number, topics } = old;
            TopicTable { version, nr_shards, next_topic_number, topics, ..Default::default() }
        };
        table.ids = table.topics.values().map(|t| (t.topic_id, t.name.clone())).collect();
        Ok(table)
    }

    /// Adds a validated topic with the next topic number, placed by default.
    pub fn add_topic(&mut self, topic: &NewTopic, topic_id: [u8; 16]) -> &TopicMeta {
        let meta = self.new_topic_meta(topic, self.next_topic_number, topic_id);
        self.insert_topic(meta);
        &self.topics[&topic.name]
    }

    /// A validated topic numbered `topic_number`; partitions are placed round-robin
    /// starting at a shard that depends on the topic number, so many small topics still
    /// spread over all shards.
    pub fn new_topic_meta(&self, topic: &NewTopic, topic_number: u32, id: [u8; 16]) -> TopicMeta {
        let partition_shards =
            (0..topic.num_partitions as u32).map(|p| self.placement(topic_number, p)).collect();
        TopicMeta {
            name: topic.name.clone(),
            topic_number,
            topic_id: id,
            partition_shards,
            configs: topic.configs.clone(),
        }
    }

    /// Adds a topic whose number and placement were chosen before (a change record); the
    /// next topic number moves past it (invariant 1).
    pub fn insert_topic(&mut self, meta: TopicMeta) {
        self.next_topic_number = self.next_topic_number.max(meta.topic_number + 1);
        self.version += 1;
        let (id, name) = (meta.topic_id, meta.name.clone());
        if let Some(replaced) = self.topics.insert(name.clone(), meta) {
            self.ids.remove(&replaced.topic_id);
        }
        self.ids.insert(id, name);
    }

    /// Replaces a topic's explicit configs (a change record: the version moves even if
    /// they are equal, as the record counted it).
    pub fn replace_topic_configs(&mut self, name: &str, configs: Vec<(String, String)>) {
        let meta = self.topics.get_mut(name).expect("configs of an existing topic");
        meta.configs = configs;
        self.version += 1;
    }

    /// The shard of a partition placed by default: round-robin from a shard that depends
    /// on the topic number (CreateTopics and CreatePartitions alike).
    pub fn placement(&self, topic_number: u32, partition: u32) -> u32 {
        (topic_number + partition) % self.nr_shards
    }

    /// Appends partitions to an existing topic, owned by `shards` (validated before).
    pub fn add_partitions(&mut self, name: &str, shards: &[u32]) {
        let meta = self.topics.get_mut(name).expect("add_partitions to an existing topic");
        meta.partition_shards.extend_from_slice(shards);
        self.version += 1;
    }

    pub fn remove_topic(&mut self, name: &str) -> Option<TopicMeta> {
        let removed = self.topics.remove(name);
        if let Some(meta) = &removed {
            self.ids.remove(&meta.topic_id);
            self.version += 1;
        }
        removed
    }
}

/// Kafka's topic name rule: 1..=249 chars of `[a-zA-Z0-9._-]`, not "." or "..".
pub fn validate_topic_name(name: &str) -> Result<(), TopicError> {
    let invalid = |why: &str| Err(TopicError::InvalidTopic(format!("topic name {name:?} {why}")));
    if name.is_empty() {
        return invalid("is empty");
    }
    if name == "." || name == ".." {
        return invalid("is not allowed");
    }
    if name.len() > 249 {
        return invalid("is longer than 249 characters");
    }
    if !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-') {
        return invalid("has characters other than ASCII letters, digits, '.', '_' and '-'");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_table_round_trips_through_its_snapshot_encoding() {
        let mut table = TopicTable::new(3);
        let topic = NewTopic {
            name: "trades".into(),
            num_partitions: 6,
            replication_factor: 1,
            configs: vec![("retention.ms".into(), "1000".into())],
        };
        table.add_topic(&topic, [7; 16]);
        let decoded = TopicTable::decode(&table.encode()).unwrap();
        assert_eq!(decoded, table);
        assert_eq!(decoded.topic("trades").unwrap().partition_shards, vec![1, 2, 0, 1, 2, 0]);
    }

    /// A data dir written before ACLs and SASL users holds version 1 snapshots: they
    /// still restore, with neither.
    #[test]
    fn a_snapshot_written_before_acls_and_users_restores_with_neither() {
        let mut table = TopicTable::new(2);
        let topic = NewTopic {
            name: "t".into(),
            num_partitions: 3,
            replication_factor: 1,
            configs: Vec::new(),
        };
        table.add_topic(&topic, [1; 16]);
        let old = TopicTableV1 {
            version: table.version,
            nr_shards: 2,
            next_topic_number: table.next_topic_number,
            topics: table.topics.clone(),
        };
        let bytes = encode_versioned(TABLE_FORMAT_VERSION_1, &old);
        assert_eq!(TopicTable::decode(&bytes).unwrap(), table);
    }

    /// The id index is not part of the archive: a snapshot is byte for byte what the table
    /// without it wrote (format 3 as written before the index), and decoding rebuilds it.
    #[test]
    fn topic_ids_are_indexed_without_changing_the_snapshot_bytes() {
        #[derive(rkyv::Archive, rkyv::Serialize)]
        struct TopicTableV3 {
            version: u64,
            nr_shards: u32,
            next_topic_number: u32,
            topics: BTreeMap<String, TopicMeta>,
            acls: AclTable,
            users: UserCredentials,
        }
        let mut table = TopicTable::new(2);
        for (name, id) in [("a", [1; 16]), ("b", [2; 16]), ("c", [3; 16])] {
            let topic = NewTopic {
                name: name.into(),
                num_partitions: 2,
                replication_factor: 1,
                configs: Vec::new(),
            };
            table.add_topic(&topic, id);
        }
        table.remove_topic("b");
        let before_index = TopicTableV3 {
            version: table.version,
            nr_shards: table.nr_shards,
            next_topic_number: table.next_topic_number,
            topics: table.topics.clone(),
            acls: table.acls.clone(),
            users: table.users.clone(),
        };
        assert_eq!(table.encode(), encode_versioned(TABLE_FORMAT_VERSION, &before_index));
        let decoded = TopicTable::decode(&table.encode()).unwrap();
        for t in [&table, &decoded] {
            assert_eq!(t.topic_by_id([1; 16]).map(|m| m.name.as_str()), Some("a"));
            assert_eq!(t.topic_by_id([3; 16]).map(|m| m.name.as_str()), Some("c"));
            assert!(t.topic_by_id([2; 16]).is_none(), "a deleted topic's id is gone");
        }
        // A topic re-created under its name gets a new id; the old one finds nothing.
        let again = NewTopic {
            name: "a".into(),
            num_partitions: 1,
            replication_factor: 1,
            configs: Vec::new(),
        };
        table.remove_topic("a");
        table.add_topic(&again, [9; 16]);
        assert!(table.topic_by_id([1; 16]).is_none());
        assert_eq!(table.topic_by_id([9; 16]).map(|m| m.name.as_str()), Some("a"));
    }

    #[test]
    fn snapshot_with_unknown_version_byte_is_refused() {
        let mut bytes = TopicTable::new(1).encode();
        bytes[0] = 99;
        assert!(TopicTable::decode(&bytes).is_err());
        assert!(TopicTable::decode(&[]).is_err());
    }

    #[test]
    fn topic_names_follow_kafkas_rules() {
        assert!(validate_topic_name("trades.eu_1-x").is_ok());
        for bad in ["", ".", "..", "a b", "ü", &"x".repeat(250)] {
            assert!(validate_topic_name(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn unknown_configs_and_bad_values_are_rejected() {
        let cfg = |k: &str, v: &str| vec![(k.to_string(), v.to_string())];
        assert!(validate_topic_configs(&cfg("cleanup.policy", "compact")).is_ok());
        assert!(validate_topic_configs(&cfg("foo.bar", "1")).is_err());
        assert!(validate_topic_configs(&cfg("retention.ms", "abc")).is_err());
        assert!(validate_topic_configs(&cfg("retention.ms", "-1")).is_ok());
    }
}
