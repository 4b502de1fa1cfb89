//! Change records: one entry of the `Metadata` stream per answered topic request.
//!
//! A record names the table version it applies to and the changes, in order; applying a
//! change bumps the table version by one, exactly as the table's own methods do, so the
//! controller, the other shards and recovery reach the same table.
//!
//! On-disk format of a change payload: one version byte (`CHANGE_FORMAT_VERSION` = 5)
//! followed by the rkyv archive of [`ChangeRecord`]. Snapshots keep the topic table's
//! format (version bytes 1, 3 and 4, `metadata.rs`). Version 2 is the record before
//! placement over nodes (a `Create` without `partition_replicas`, an `AddPartitions`
//! without its nodes): still read, every partition it names on node 0. A broker that
//! predates change records reads them as "topic table snapshot format version 2 (or 5)
//! is not supported", and one that predates placement over nodes reads version 5 as
//! "topic change record format version 5 is not supported": each refuses to start
//! rather than misread the log.

use super::users::CredentialChange;
use crate::acl::AclBinding;
use crate::codec::{decode_versioned, encode_versioned};
use crate::metadata::{TopicMeta, TopicMetaV3, TopicTable, SINGLE_NODE};

/// Version byte in front of a change record's rkyv archive.
pub const CHANGE_FORMAT_VERSION: u8 = 5;
/// The change record format before placement over nodes: read, never written.
const CHANGE_FORMAT_VERSION_2: u8 = 2;

/// The changes of one request, applied to the table at `base_version`.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Debug, PartialEq)]
pub struct ChangeRecord {
    pub base_version: u64,
    pub changes: Vec<TopicChange>,
}

/// One change of the topic table.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Debug, PartialEq)]
pub enum TopicChange {
    /// A new topic, with its topic number and placement already chosen.
    Create(TopicMeta),
    /// A topic deleted; its number names it, so a record can never drop a newer namesake.
    Delete { name: String, topic_number: u32 },
    /// Partitions appended to a topic: the owner shard of each new one, and its replicas'
    /// nodes.
    AddPartitions {
        name: String,
        topic_number: u32,
        partition_shards: Vec<u32>,
        partition_replicas: Vec<Vec<u32>>,
    },
    /// A topic's explicit configs replaced.
    SetConfigs { name: String, topic_number: u32, configs: Vec<(String, String)> },
    /// ACL bindings added (none already there).
    CreateAcls(Vec<AclBinding>),
    /// ACL bindings removed (each one there).
    DeleteAcls(Vec<AclBinding>),
    /// A SASL user's SCRAM credential added, replaced or removed (`users.rs`). Boxed: the
    /// archived variant must stay smaller than `Create`, or older records would not read.
    Credentials(Box<CredentialChange>),
}

impl ChangeRecord {
    pub fn encode(&self) -> Vec<u8> {
        encode_versioned(CHANGE_FORMAT_VERSION, self)
    }

    pub fn decode(bytes: &[u8]) -> Result<ChangeRecord, String> {
        const WHAT: &str = "topic change record";
        if bytes.first() == Some(&CHANGE_FORMAT_VERSION_2) {
            let old: ChangeRecordV2 = decode_versioned(CHANGE_FORMAT_VERSION_2, WHAT, bytes)?;
            return Ok(old.into());
        }
        decode_versioned(CHANGE_FORMAT_VERSION, WHAT, bytes)
    }

    /// The table version once this record is applied.
    pub fn end_version(&self) -> u64 {
        self.base_version + self.changes.len() as u64
    }

    /// Applies every change in order. Returns the topics deleted, for the caller to drop
    /// their partitions. An error means the record does not follow `table` (a wrong
    /// version, a topic that is not there): recovery refuses the log rather than guess, and
    /// the table is then left half-changed, so the caller must discard it.
    pub fn apply(&self, table: &mut TopicTable) -> Result<Vec<TopicMeta>, String> {
        if table.version != self.base_version {
            return Err(format!(
                "a topic change record for table version {} follows table version {}",
                self.base_version, table.version
            ));
        }
        let mut deleted = Vec::new();
        for change in &self.changes {
            deleted.extend(change.apply(table)?);
        }
        Ok(deleted)
    }
}

impl TopicChange {
    /// Applies one change (version + 1); the deleted topic for a `Delete`.
    fn apply(&self, table: &mut TopicTable) -> Result<Option<TopicMeta>, String> {
        let existing = |table: &TopicTable, name: &str, number: u32| match table.topic(name) {
            Some(meta) if meta.topic_number == number => Ok(()),
            _ => Err(format!(
                "a topic change names topic {name:?} number {number}, not in the table"
            )),
        };
        match self {
            TopicChange::Create(meta) => {
                if table.topic(&meta.name).is_some() || meta.topic_number < table.next_topic_number
                {
                    return Err(format!(
                        "a topic change creates {:?} number {} again",
                        meta.name, meta.topic_number
                    ));
                }
                table.insert_topic(meta.clone());
                Ok(None)
            }
            TopicChange::Delete { name, topic_number } => {
                existing(table, name, *topic_number)?;
                Ok(table.remove_topic(name))
            }
            TopicChange::AddPartitions {
                name,
                topic_number,
                partition_shards,
                partition_replicas,
            } => {
                existing(table, name, *topic_number)?;
                if partition_shards.len() != partition_replicas.len() {
                    return Err(format!(
                        "a topic change adds {} partitions to {name:?} with {} replica lists",
                        partition_shards.len(),
                        partition_replicas.len()
                    ));
                }
                table.add_partitions(name, partition_shards, partition_replicas);
                Ok(None)
            }
            TopicChange::SetConfigs { name, topic_number, configs } => {
                existing(table, name, *topic_number)?;
                table.replace_topic_configs(name, configs.clone());
                Ok(None)
            }
            TopicChange::CreateAcls(bindings) => {
                crate::acl::controller::apply_create(table, bindings)
            }
            TopicChange::DeleteAcls(bindings) => {
                crate::acl::controller::apply_delete(table, bindings)
            }
            TopicChange::Credentials(change) => {
                table.users.apply(change)?;
                table.version += 1;
                Ok(None)
            }
        }
    }
}

/// A change record of format 2 (before placement over nodes), read and converted: the
/// same shape as `ChangeRecord` then, variant for variant (rkyv archives enums by their
/// variants' order).
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Debug, PartialEq)]
pub(crate) struct ChangeRecordV2 {
    pub(crate) base_version: u64,
    pub(crate) changes: Vec<TopicChangeV2>,
}

#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Debug, PartialEq)]
pub(crate) enum TopicChangeV2 {
    Create(TopicMetaV3),
    Delete { name: String, topic_number: u32 },
    AddPartitions { name: String, topic_number: u32, partition_shards: Vec<u32> },
    SetConfigs { name: String, topic_number: u32, configs: Vec<(String, String)> },
    CreateAcls(Vec<AclBinding>),
    DeleteAcls(Vec<AclBinding>),
    Credentials(Box<CredentialChange>),
}

impl ChangeRecordV2 {
    /// The bytes a broker before placement over nodes wrote (tests write old data dirs).
    #[cfg(test)]
    pub(crate) fn encode(&self) -> Vec<u8> {
        encode_versioned(CHANGE_FORMAT_VERSION_2, self)
    }
}

impl From<ChangeRecordV2> for ChangeRecord {
    fn from(old: ChangeRecordV2) -> ChangeRecord {
        let changes = old.changes.into_iter().map(TopicChange::from).collect();
        ChangeRecord { base_version: old.base_version, changes }
    }
}

impl From<TopicChangeV2> for TopicChange {
    fn from(old: TopicChangeV2) -> TopicChange {
        match old {
            TopicChangeV2::Create(meta) => TopicChange::Create(meta.into()),
            TopicChangeV2::Delete { name, topic_number } => {
                TopicChange::Delete { name, topic_number }
            }
            TopicChangeV2::AddPartitions { name, topic_number, partition_shards } => {
                let partition_replicas = vec![vec![SINGLE_NODE]; partition_shards.len()];
                TopicChange::AddPartitions {
                    name,
                    topic_number,
                    partition_shards,
                    partition_replicas,
                }
            }
            TopicChangeV2::SetConfigs { name, topic_number, configs } => {
                TopicChange::SetConfigs { name, topic_number, configs }
            }
            TopicChangeV2::CreateAcls(bindings) => TopicChange::CreateAcls(bindings),
            TopicChangeV2::DeleteAcls(bindings) => TopicChange::DeleteAcls(bindings),
            TopicChangeV2::Credentials(change) => TopicChange::Credentials(change),
        }
    }
}
