//! Committed offsets and how they are written to the coordinator shard's log.
//!
//! Every OffsetCommit, OffsetDelete, DeleteGroups and expiry is one entry of the
//! `GroupOffsets` internal stream, fdatasync'd before it is answered or applied. Every
//! `SNAPSHOT_EVERY` entries the coordinator writes a snapshot entry holding all committed
//! offsets of the shard, so recovery replays at most that many entries after it.
//!
//! On-disk format of an entry payload: one version byte (`OFFSETS_FORMAT_VERSION`)
//! followed by the rkyv archive of [`OffsetLogEntry`].

use std::collections::BTreeMap;

use crate::codec::{decode_versioned, encode_versioned};

/// Version byte in front of each entry's rkyv archive.
pub const OFFSETS_FORMAT_VERSION: u8 = 1;

/// Entries between two snapshots of all committed offsets.
pub const SNAPSHOT_EVERY: u64 = 1000;

/// One committed offset.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Committed {
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: Option<String>,
    pub commit_time_ms: i64,
}

/// Committed offsets of one group: (topic, partition) -> offset.
pub type GroupOffsets = BTreeMap<(String, i32), Committed>;

/// A group's offsets as a list (the form they take inside a log entry).
pub type OffsetList = Vec<((String, i32), Committed)>;

/// What one log entry of the `GroupOffsets` stream says.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Debug, PartialEq)]
pub enum OffsetLogEntry {
    Commit { group: String, offsets: OffsetList },
    Delete { group: String, partitions: Vec<(String, i32)> },
    DeleteGroup { group: String },
    Snapshot { groups: Vec<(String, OffsetList)> },
}

impl OffsetLogEntry {
    pub fn encode(&self) -> Vec<u8> {
        encode_versioned(OFFSETS_FORMAT_VERSION, self)
    }

    pub fn decode(bytes: &[u8]) -> Result<OffsetLogEntry, String> {
        decode_versioned(OFFSETS_FORMAT_VERSION, "offset entry", bytes)
    }

    /// Applies this entry to the in-memory offsets of every group.
    pub fn apply(self, all: &mut BTreeMap<String, GroupOffsets>) {
        match self {
            OffsetLogEntry::Commit { group, offsets } => {
                all.entry(group).or_default().extend(offsets);
            }
            OffsetLogEntry::Delete { group, partitions } => {
                if let Some(offsets) = all.get_mut(&group) {
                    for key in partitions {
                        offsets.remove(&key);
                    }
                    if offsets.is_empty() {
                        all.remove(&group);
                    }
                }
            }
            OffsetLogEntry::DeleteGroup { group } => {
                all.remove(&group);
            }
            OffsetLogEntry::Snapshot { groups } => {
                *all = groups.into_iter().map(|(g, o)| (g, o.into_iter().collect())).collect();
            }
        }
    }

    /// A snapshot of every group's offsets.
    pub fn snapshot(all: &BTreeMap<String, GroupOffsets>) -> OffsetLogEntry {
        let groups = all
            .iter()
            .map(|(g, o)| (g.clone(), o.iter().map(|(k, v)| (k.clone(), v.clone())).collect()))
            .collect();
        OffsetLogEntry::Snapshot { groups }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn committed(offset: i64) -> Committed {
        Committed { offset, leader_epoch: -1, metadata: Some("m".into()), commit_time_ms: 5 }
    }

    #[test]
    fn replaying_entries_gives_the_last_commit_per_partition() {
        let entries = vec![
            OffsetLogEntry::Commit {
                group: "g".into(),
                offsets: vec![(("t".into(), 0), committed(5))],
            },
            OffsetLogEntry::Commit {
                group: "g".into(),
                offsets: vec![(("t".into(), 0), committed(9))],
            },
            OffsetLogEntry::Commit {
                group: "h".into(),
                offsets: vec![(("t".into(), 1), committed(1))],
            },
            OffsetLogEntry::Delete { group: "h".into(), partitions: vec![("t".into(), 1)] },
        ];
        let mut all = BTreeMap::new();
        for entry in entries {
            let decoded = OffsetLogEntry::decode(&entry.encode()).unwrap();
            assert_eq!(decoded, entry);
            decoded.apply(&mut all);
        }
        assert_eq!(all.len(), 1);
        assert_eq!(all["g"][&("t".to_string(), 0)].offset, 9);
        let mut restored = BTreeMap::new();
        OffsetLogEntry::decode(&OffsetLogEntry::snapshot(&all).encode())
            .unwrap()
            .apply(&mut restored);
        assert_eq!(restored, all);
    }

    /// `group::replicated` invariant 3: after a restart a replica applies again, on top of
    /// what its `GroupOffsets` stream recovered, the changes it had applied since the raft
    /// log's compaction point. Applying a run of changes a second time must leave what the
    /// first time left, whatever the offsets were before it.
    #[test]
    fn applying_a_run_of_changes_twice_leaves_what_applying_it_once_did() {
        use proptest::prelude::*;
        let key = (0..3u8, 0..2u8, 0..3i32);
        let change = prop_oneof![
            3 => (key.clone(), 0..100i64).prop_map(|((g, t, p), o)| OffsetLogEntry::Commit {
                group: format!("g{g}"),
                offsets: vec![((format!("t{t}"), p), committed(o))],
            }),
            1 => key.clone().prop_map(|(g, t, p)| OffsetLogEntry::Delete {
                group: format!("g{g}"),
                partitions: vec![(format!("t{t}"), p)],
            }),
            1 => (0..3u8).prop_map(|g| OffsetLogEntry::DeleteGroup { group: format!("g{g}") }),
        ];
        let runs = proptest::collection::vec(change, 0..12);
        proptest!(|(before in runs.clone(), run in runs)| {
            let mut once = BTreeMap::new();
            for entry in before {
                entry.apply(&mut once);
            }
            for entry in run.iter().cloned() {
                entry.apply(&mut once);
            }
            let mut twice = once.clone();
            for entry in run {
                entry.apply(&mut twice);
            }
            prop_assert_eq!(twice, once);
        });
    }

    #[test]
    fn garbage_and_unknown_versions_are_refused() {
        assert!(OffsetLogEntry::decode(&[]).is_err());
        assert!(OffsetLogEntry::decode(&[2, 0, 0]).is_err());
        assert!(OffsetLogEntry::decode(&[1, 0xff, 0xff, 0xff, 0xff]).is_err());
    }
}
