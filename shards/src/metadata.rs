//! The topic table: what topics exist, their partitions' owner shards, their configs.
//!
//! Shard 0 (the controller) owns the table and persists it through its log as the
//! metadata log (`metadata_log/`): a change record per answered request, and now and
//! then a snapshot of the whole table (fdatasync'd before any shard sees a change). Every
//! shard holds a read-only copy, built by applying the same change records.
//!
//! On-disk format of the snapshot payload: one version byte (`TABLE_FORMAT_VERSION`, 4)
//! followed by the rkyv archive of [`TopicTable`]. Older versions are still read:
//! version 3 is the table before placement over nodes (no `partition_replicas`: every
//! partition restores on node 0, the only node a data dir of that version can come
//! from), version 1 the table before ACLs and SASL users (no `acls`, no `users`, and no
//! placement over nodes). (Versions 2 and 5 are the change records',
//! `metadata_log/change.rs`.)
//!
//! Invariants:
//! 1. Topic numbers are never reused, so a log entry of a deleted topic can never be
//!    mistaken for one of a newer topic with the same name.
//! 2. `nr_shards` is fixed when the data dir is created; partitions name their owner shard
//!    within their node, and their replicas' nodes (`partition_replicas`, the leader
//!    first; one node until partition groups exist, docs/replication.md).

use std::borrow::Borrow;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use shardlog_storage::PartitionId;

use crate::acl::AclTable;
use crate::codec::{decode_versioned, encode_versioned};
use crate::error::TopicError;
use crate::metadata_log::users::UserCredentials;
use crate::topic_config::topic_config_def;
pub use crate::topic_config::validate_topic_configs;

/// Version byte in front of the rkyv archive.
pub const TABLE_FORMAT_VERSION: u8 = 4;
/// The snapshot format before placement over nodes: read, never written.
const TABLE_FORMAT_VERSION_3: u8 = 3;
/// The snapshot format before ACLs and SASL users: read, never written.
const TABLE_FORMAT_VERSION_1: u8 = 1;

/// The controller's view of every topic (a metadata log snapshot is this, archived).
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Debug, Default)]
pub struct TopicTable {
    /// Bumped on every change.
    pub version: u64,
    pub nr_shards: u32,
    pub next_topic_number: u32,
    /// Every topic by name, in name order. Each `TopicMeta` is shared with `by_name` (an
    /// `Arc`, archived inline as the `TopicMeta` itself: the snapshot bytes are those of a
    /// `BTreeMap<String, TopicMeta>`, tested). Change topics through the methods below,
    /// which keep `by_name` and `ids` in step.
    #[rkyv(with = rkyv::with::MapKV<rkyv::with::Identity, rkyv::with::Unshare>)]
    pub topics: BTreeMap<String, Arc<TopicMeta>>,
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
    /// The same topics hashed by name, for the lookups of every request (`topic`): a
    /// `BTreeMap<String, _>` lookup compares the name with ~16 keys, each behind its own
    /// pointer, which at 50,000 topics is a cache miss per compare (issue 19). Not archived,
    /// rebuilt by `decode`, kept by `insert_topic`, `update_topic` and `remove_topic`.
    #[rkyv(with = rkyv::with::Skip)]
    by_name: HashSet<ByName>,
}

/// A topic in `TopicTable::by_name`: hashed and compared by its name, so that the set is
/// looked up by `&str` (`Borrow<str>`; `Hash` is the name's, as `Borrow` requires).
#[derive(Clone, Debug)]
struct ByName(Arc<TopicMeta>);

impl Hash for ByName {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.name.as_str().hash(state)
    }
}

impl PartialEq for ByName {
    fn eq(&self, other: &Self) -> bool {
        self.0.name == other.0.name
    }
}

impl Eq for ByName {}

impl Borrow<str> for ByName {
    fn borrow(&self) -> &str {
        &self.0.name
    }
}

/// A snapshot of format version 1 (before ACLs and users), read and converted.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub(crate) struct TopicTableV1 {
    pub(crate) version: u64,
    pub(crate) nr_shards: u32,
    pub(crate) next_topic_number: u32,
    pub(crate) topics: BTreeMap<String, TopicMetaV3>,
}

/// A snapshot of format version 3 (before placement over nodes), read and converted.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub(crate) struct TopicTableV3 {
    pub(crate) version: u64,
    pub(crate) nr_shards: u32,
    pub(crate) next_topic_number: u32,
    pub(crate) topics: BTreeMap<String, TopicMetaV3>,
    pub(crate) acls: AclTable,
    pub(crate) users: UserCredentials,
}

/// A topic as formats 1 and 3 (and change records of format 2) archived it: every
/// partition on the one node there was.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Debug, PartialEq)]
pub(crate) struct TopicMetaV3 {
    pub(crate) name: String,
    pub(crate) topic_number: u32,
    pub(crate) topic_id: [u8; 16],
    pub(crate) partition_shards: Vec<u32>,
    pub(crate) configs: Vec<(String, String)>,
}

impl From<TopicMetaV3> for TopicMeta {
    fn from(old: TopicMetaV3) -> TopicMeta {
        let TopicMetaV3 { name, topic_number, topic_id, partition_shards, configs } = old;
        let partition_replicas = vec![vec![SINGLE_NODE]; partition_shards.len()];
        TopicMeta { name, topic_number, topic_id, partition_shards, partition_replicas, configs }
    }
}

/// The node id of a broker without `--peers` (broker ids = shards), and the node every
/// partition of a data dir written before placement over nodes is on.
pub const SINGLE_NODE: u32 = 0;

/// The nodes a single node places partitions on: itself.
pub const SINGLE_NODE_LIST: &[u32] = &[SINGLE_NODE];

/// One topic.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Debug, PartialEq)]
pub struct TopicMeta {
    pub name: String,
    pub topic_number: u32,
    pub topic_id: [u8; 16],
    /// Owner shard of each partition, by partition index (the same shard on every
    /// replica's node: shard s replicates with shard s).
    pub partition_shards: Vec<u32>,
    /// Node ids of each partition's replicas, by partition index, the preferred leader
    /// first. One node, or (replication factor > 1) every node of a raft group of
    /// (replica set, shard): docs/replication.md, "partition groups".
    pub partition_replicas: Vec<Vec<u32>>,
    /// Configs set explicitly (at creation or by AlterConfigs; others take the defaults of
    /// `topic_config::TOPIC_CONFIGS`).
    pub configs: Vec<(String, String)>,
}

/// A topic to create, as asked by a client.
#[derive(Clone, Debug, PartialEq, Eq)]
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
    /// Broker ids (`node_id * 1024 + shard`; on a single node, shard ids) per new
    /// partition, or None to place them as CreateTopics does.
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

    /// The node a partition is led from (its first replica); of a replicated partition,
    /// the preferred leader (the raft group's leader is the real one).
    pub fn leader_node(&self, partition: i32) -> Option<u32> {
        self.replicas(partition).and_then(|replicas| replicas.first().copied())
    }

    /// A partition's replicas' nodes, the preferred leader first.
    pub fn replicas(&self, partition: i32) -> Option<&[u32]> {
        let index = usize::try_from(partition).ok()?;
        self.partition_replicas.get(index).map(Vec::as_slice)
    }

    /// Indexes of the partitions with a replica on shard `shard` of node `node` (its
    /// only replica, or one of a raft group's).
    pub fn partitions_on(&self, node: u32, shard: usize) -> impl Iterator<Item = u32> + '_ {
        let placed = self.partition_shards.iter().zip(&self.partition_replicas);
        (0u32..).zip(placed).filter_map(move |(index, (s, replicas))| {
            (*s as usize == shard && replicas.contains(&node)).then_some(index)
        })
    }

    /// The replication factor (every partition of a topic has the same).
    pub fn replication_factor(&self) -> usize {
        self.partition_replicas.first().map_or(1, Vec::len)
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
    /// Equal tables hold the same topics, ACLs and users; `ids` and `by_name` follow from
    /// `topics`.
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

    /// The topic named `name`, in constant time whatever the number of topics.
    pub fn topic(&self, name: &str) -> Option<&TopicMeta> {
        self.by_name.get(name).map(|t| &*t.0)
    }

    /// The topic named `name`, shared: a reference count, not a copy of its name,
    /// placement and configs.
    pub fn topic_shared(&self, name: &str) -> Option<Arc<TopicMeta>> {
        self.by_name.get(name).map(|t| t.0.clone())
    }

    /// The topic with `id`, in constant time whatever the number of topics.
    pub fn topic_by_id(&self, id: [u8; 16]) -> Option<&TopicMeta> {
        self.topic(self.ids.get(&id)?)
    }

    pub fn encode(&self) -> Vec<u8> {
        encode_versioned(TABLE_FORMAT_VERSION, self)
    }

    pub fn decode(bytes: &[u8]) -> Result<TopicTable, String> {
        const WHAT: &str = "topic table snapshot";
        let converted =
            |topics: BTreeMap<String, TopicMetaV3>| -> BTreeMap<String, Arc<TopicMeta>> {
                topics.into_iter().map(|(name, meta)| (name, Arc::new(meta.into()))).collect()
            };
        let mut table: TopicTable = match bytes.first() {
            Some(&TABLE_FORMAT_VERSION_1) => {
                let old: TopicTableV1 = decode_versioned(TABLE_FORMAT_VERSION_1, WHAT, bytes)?;
                let TopicTableV1 { version, nr_shards, next_topic_number, topics } = old;
                let topics = converted(topics);
                TopicTable { version, nr_shards, next_topic_number, topics, ..Default::default() }
            }
            Some(&TABLE_FORMAT_VERSION_3) => {
                let old: TopicTableV3 = decode_versioned(TABLE_FORMAT_VERSION_3, WHAT, bytes)?;
                let TopicTableV3 { version, nr_shards, next_topic_number, topics, acls, users } =
                    old;
                let topics = converted(topics);
                TopicTable {
                    version,
                    nr_shards,
                    next_topic_number,
                    topics,
                    acls,
                    users,
                    ..Default::default()
                }
            }
            _ => decode_versioned(TABLE_FORMAT_VERSION, WHAT, bytes)?,
        };
        table.ids = table.topics.values().map(|t| (t.topic_id, t.name.clone())).collect();
        table.by_name = table.topics.values().map(|t| ByName(t.clone())).collect();
        Ok(table)
    }

    /// Adds a validated topic with the next topic number, placed by default on a single
    /// node.
    pub fn add_topic(&mut self, topic: &NewTopic, topic_id: [u8; 16]) -> &TopicMeta {
        let meta = self.new_topic_meta(topic, self.next_topic_number, topic_id, SINGLE_NODE_LIST);
        self.insert_topic(meta);
        &self.topics[&topic.name]
    }

    /// A validated topic numbered `topic_number`, placed over `nodes` (`placement`).
    pub fn new_topic_meta(
        &self,
        topic: &NewTopic,
        topic_number: u32,
        id: [u8; 16],
        nodes: &[u32],
    ) -> TopicMeta {
        let rf = topic.replication_factor.max(1) as usize;
        let placed =
            (0..topic.num_partitions as u32).map(|p| self.placement(topic_number, p, nodes, rf));
        let (partition_shards, partition_replicas) = placed.unzip();
        TopicMeta {
            name: topic.name.clone(),
            topic_number,
            topic_id: id,
            partition_shards,
            partition_replicas,
            configs: topic.configs.clone(),
        }
    }

    /// Adds a topic whose number and placement were chosen before (a change record); the
    /// next topic number moves past it (invariant 1).
    pub fn insert_topic(&mut self, meta: TopicMeta) {
        self.next_topic_number = self.next_topic_number.max(meta.topic_number + 1);
        self.version += 1;
        let (id, name, meta) = (meta.topic_id, meta.name.clone(), Arc::new(meta));
        if let Some(replaced) = self.topics.insert(name.clone(), meta.clone()) {
            self.ids.remove(&replaced.topic_id);
        }
        self.ids.insert(id, name);
        self.by_name.replace(ByName(meta));
    }

    /// Changes a topic in place (not its name or id); None if there is no such topic. A
    /// `TopicMeta` still shared with an older copy of the table is copied first.
    pub(crate) fn update_topic<R>(
        &mut self,
        name: &str,
        f: impl FnOnce(&mut TopicMeta) -> R,
    ) -> Option<R> {
        let meta = self.topics.get_mut(name)?;
        // Dropped from the index first, so that an unshared `TopicMeta` is not copied.
        self.by_name.remove(name);
        let (id, result) = {
            let meta = Arc::make_mut(meta);
            (meta.topic_id, f(meta))
        };
        assert!(meta.name == name && meta.topic_id == id, "update_topic renamed {name}");
        self.by_name.insert(ByName(meta.clone()));
        Some(result)
    }

    /// Replaces a topic's explicit configs (a change record: the version moves even if
    /// they are equal, as the record counted it).
    pub fn replace_topic_configs(&mut self, name: &str, configs: Vec<(String, String)>) {
        self.update_topic(name, |meta| meta.configs = configs)
            .expect("configs of an existing topic");
        self.version += 1;
    }

    /// The (shard, replica nodes) of a partition placed by default over `nodes` (sorted
    /// node ids, never empty): round-robin over the nodes from one that depends on the
    /// topic number, so leaders spread over nodes even for one-partition topics, and
    /// within a node round-robin over its shards from a shard that depends on the topic
    /// number (on a single node, `(topic_number + partition) % nr_shards` as always). With
    /// `replication_factor` r > 1 (validated: at most the nodes), the replicas are r
    /// consecutive nodes in sorted order from that node, on the same shard of each.
    /// CreateTopics and CreatePartitions alike.
    pub fn placement(
        &self,
        topic_number: u32,
        partition: u32,
        nodes: &[u32],
        replication_factor: usize,
    ) -> (u32, Vec<u32>) {
        assert!(!nodes.is_empty(), "placement over no node");
        let n = nodes.len() as u64;
        let (topic_number, partition) = (topic_number as u64, partition as u64);
        let first = ((topic_number + partition) % n) as usize;
        let replicas = replication_factor.clamp(1, nodes.len());
        let replicas = (0..replicas).map(|k| nodes[(first + k) % nodes.len()]).collect();
        let shard = (topic_number + partition / n) % self.nr_shards as u64;
        (shard as u32, replicas)
    }

    /// Appends partitions to an existing topic, owned by `shards` on `replicas` (validated
    /// before).
    pub fn add_partitions(&mut self, name: &str, shards: &[u32], replicas: &[Vec<u32>]) {
        assert_eq!(shards.len(), replicas.len(), "one shard and one replica list per partition");
        self.update_topic(name, |meta| {
            meta.partition_shards.extend_from_slice(shards);
            meta.partition_replicas.extend_from_slice(replicas);
        })
        .expect("add_partitions to an existing topic");
        self.version += 1;
    }

    pub fn remove_topic(&mut self, name: &str) -> Option<TopicMeta> {
        let removed = self.topics.remove(name)?;
        self.ids.remove(&removed.topic_id);
        self.by_name.remove(name);
        self.version += 1;
        Some(Arc::unwrap_or_clone(removed))
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
            topics: topics_v3(&table),
        };
        let bytes = encode_versioned(TABLE_FORMAT_VERSION_1, &old);
        assert_eq!(TopicTable::decode(&bytes).unwrap(), table);
    }

    /// A data dir written before placement over nodes (format 3, what every broker
    /// before this change wrote) restores with every partition on node 0, on the same
    /// shards, with its ACLs and users.
    #[test]
    fn a_snapshot_written_before_placement_over_nodes_restores_on_node_0() {
        let mut table = TopicTable::new(3);
        let topic = NewTopic {
            name: "t".into(),
            num_partitions: 4,
            replication_factor: 1,
            configs: vec![("retention.ms".into(), "7".into())],
        };
        table.add_topic(&topic, [1; 16]);
        table.users.apply(&test_credential()).unwrap();
        table.version += 1;
        let old = TopicTableV3 {
            version: table.version,
            nr_shards: 3,
            next_topic_number: table.next_topic_number,
            topics: topics_v3(&table),
            acls: table.acls.clone(),
            users: table.users.clone(),
        };
        let restored = TopicTable::decode(&encode_versioned(TABLE_FORMAT_VERSION_3, &old)).unwrap();
        assert_eq!(restored, table);
        let meta = restored.topic("t").unwrap();
        assert_eq!(meta.partition_shards, vec![1, 2, 0, 1]);
        assert_eq!(meta.partition_replicas, vec![vec![0]; 4]);
        assert_eq!(meta.partitions_on(0, 1).collect::<Vec<_>>(), vec![0, 3]);
        assert_eq!(meta.partitions_on(1, 1).count(), 0, "nothing on another node");
    }

    fn test_credential() -> crate::metadata_log::users::CredentialChange {
        use crate::metadata_log::users::{CredentialChange, StoredScramCredential, SCRAM_SHA_256};
        let credential = StoredScramCredential {
            mechanism: SCRAM_SHA_256,
            iterations: 4096,
            salt: vec![1; 16],
            stored_key: vec![2; 32],
            server_key: vec![3; 32],
        };
        CredentialChange::Upsert { user: "alice".into(), credential }
    }

    /// Placement over three nodes: leaders round-robin over the nodes from a start that
    /// depends on the topic number, each node's shards round-robin too; over one node it
    /// is the single node's placement.
    #[test]
    fn partitions_spread_over_nodes_and_their_shards() {
        let table = TopicTable::new(2);
        let placed: Vec<_> = (0..6).map(|p| table.placement(1, p, &[0, 1, 2], 1)).collect();
        let nodes: Vec<u32> = placed.iter().map(|(_, r)| r[0]).collect();
        let shards: Vec<u32> = placed.iter().map(|(s, _)| *s).collect();
        assert_eq!(nodes, vec![1, 2, 0, 1, 2, 0]);
        assert_eq!(shards, vec![1, 1, 1, 0, 0, 0]);
        let starts: Vec<u32> = (1..4).map(|t| table.placement(t, 0, &[0, 1, 2], 1).1[0]).collect();
        assert_eq!(starts, vec![1, 2, 0], "one-partition topics spread over the nodes");
        for p in 0..5 {
            assert_eq!(table.placement(3, p, &[0], 1), ((3 + p) % 2, vec![0]));
        }
    }

    /// Replication factor 3 over three nodes: every node holds every partition, on the
    /// same shard, the preferred leader first and spread as with one replica.
    #[test]
    fn replicas_are_consecutive_nodes_from_the_preferred_leader_on_one_shard() {
        let table = TopicTable::new(2);
        let placed: Vec<_> = (0..6).map(|p| table.placement(1, p, &[0, 4, 9], 3)).collect();
        let replicas: Vec<Vec<u32>> = placed.iter().map(|(_, r)| r.clone()).collect();
        let expected = [[4, 9, 0], [9, 0, 4], [0, 4, 9]];
        assert_eq!(replicas, [expected, expected].concat());
        let one: Vec<_> = (0..6).map(|p| table.placement(1, p, &[0, 4, 9], 1)).collect();
        for ((shard, replicas), (one_shard, one_replica)) in placed.iter().zip(&one) {
            assert_eq!((shard, replicas[0]), (one_shard, one_replica[0]));
        }
        assert_eq!(table.placement(1, 0, &[0, 4], 2).1, vec![4, 0]);
    }

    /// The topics as formats 1 and 3 archived them.
    fn topics_v3(table: &TopicTable) -> BTreeMap<String, TopicMetaV3> {
        let old = |m: &TopicMeta| TopicMetaV3 {
            name: m.name.clone(),
            topic_number: m.topic_number,
            topic_id: m.topic_id,
            partition_shards: m.partition_shards.clone(),
            configs: m.configs.clone(),
        };
        table.topics.iter().map(|(name, meta)| (name.clone(), old(meta))).collect()
    }

    /// The topics as the table held them before the indexes: by name, inline.
    fn plain_topics(table: &TopicTable) -> BTreeMap<String, TopicMeta> {
        table.topics.iter().map(|(name, meta)| (name.clone(), TopicMeta::clone(meta))).collect()
    }

    /// The indexes (by id, by name) are not part of the archive, and the shared
    /// `Arc<TopicMeta>` is archived inline: a snapshot is byte for byte what the table
    /// without them wrote (the format with a plain `BTreeMap<String, TopicMeta>`), and
    /// decoding rebuilds them.
    #[test]
    fn topic_ids_are_indexed_without_changing_the_snapshot_bytes() {
        #[derive(rkyv::Archive, rkyv::Serialize)]
        struct PlainTable {
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
        table.add_partitions("c", &[0, 1], &[vec![0], vec![0]]);
        table.replace_topic_configs("a", vec![("retention.ms".into(), "5".into())]);
        let before_index = PlainTable {
            version: table.version,
            nr_shards: table.nr_shards,
            next_topic_number: table.next_topic_number,
            topics: plain_topics(&table),
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

    /// Lookups by name (the hash index) and by id answer what the ordered map holds,
    /// through creates, deletes, re-creates under an old name, added partitions and config
    /// changes, on a table copied before each change (the shards' `Arc::make_mut`), and
    /// after a snapshot round trip; the copy keeps what it held.
    #[test]
    fn lookups_by_name_agree_with_the_ordered_map_across_changes() {
        fn check(table: &TopicTable, names: &[String]) {
            for name in names {
                let ordered = table.topics.get(name).map(|m| &**m);
                assert_eq!(table.topic(name), ordered, "{name}");
                if let Some(meta) = ordered {
                    assert_eq!(table.topic_by_id(meta.topic_id), Some(meta), "{name} by id");
                }
            }
            assert_eq!(table.by_name.len(), table.topics.len());
            assert_eq!(table.ids.len(), table.topics.len());
        }
        let names: Vec<String> = (0..40).map(|i| format!("topic-{i}")).collect();
        let mut table = Arc::new(TopicTable::new(3));
        let mut next_id = 0u64;
        // A small deterministic walk: each step changes one topic.
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        for step in 0..2_000 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let name = &names[(rng % names.len() as u64) as usize];
            let held = table.clone();
            let before = held.topic(name).cloned();
            let t = Arc::make_mut(&mut table);
            match (rng >> 8) % 4 {
                0 | 1 if t.topic(name).is_none() => {
                    next_id += 1;
                    let mut id = [0; 16];
                    id[..8].copy_from_slice(&next_id.to_le_bytes());
                    let topic = NewTopic {
                        name: name.clone(),
                        num_partitions: 1 + ((rng >> 16) % 4) as i32,
                        replication_factor: 1,
                        configs: Vec::new(),
                    };
                    t.add_topic(&topic, id);
                }
                0 | 1 => assert_eq!(t.remove_topic(name), before),
                2 if t.topic(name).is_some() => {
                    t.add_partitions(name, &[(step % 3) as u32], &[vec![0]])
                }
                3 => {
                    let configs = vec![("retention.ms".into(), step.to_string())];
                    assert_eq!(t.set_topic_configs(name, configs), before.is_some());
                }
                _ => {}
            }
            check(&table, &names);
            check(&held, &names);
            assert_eq!(held.topic(name).cloned(), before, "the held copy changed");
            if step % 100 == 0 {
                let decoded = TopicTable::decode(&table.encode()).unwrap();
                assert_eq!(decoded, *table);
                check(&decoded, &names);
            }
        }
        assert!(table.topics.len() > 5 && table.topics.len() < 35, "the walk was one-sided");
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
