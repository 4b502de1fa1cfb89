//! The `Transactions` internal stream: what the transaction side writes to its shard's log.
//!
//! On the coordinator shard of a transactional id: one `Txn` entry per transition, holding
//! the whole metadata, fdatasync'd before the call that caused it is answered. On the
//! coordinator shard of a group: `PendingOffsets` for each TxnOffsetCommit and
//! `OffsetsResolved` when the transaction ended; in a cluster, a `Coordinator` image when a
//! replica installs an offsets group's partition snapshot. On every shard, with each checkpoint: a
//! `Snapshot` of all of it plus the transaction state of the shard's partitions, valid
//! for each partition up to `covered` (batches after it are replayed at start-up).
//!
//! On-disk format of an entry payload: one version byte (`TXN_FORMAT_VERSION`) followed by
//! the rkyv archive of [`TxnLogEntry`].

use std::collections::{BTreeMap, HashMap};

use crate::codec::{decode_versioned, encode_versioned};
use crate::group::offsets::OffsetList;
use crate::txn::partition::PartitionTxns;
use crate::txn::state::TxnMetadata;

pub const TXN_FORMAT_VERSION: u8 = 1;

/// Pending transactional offsets, by (group, producer id).
pub type PendingOffsets = BTreeMap<(String, i64), OffsetList>;

/// One entry of the `Transactions` stream.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Debug, PartialEq)]
pub enum TxnLogEntry {
    /// A transactional id's metadata after a transition.
    Txn(TxnMetadata),
    /// Offsets a transaction commits to a group when it commits (TxnOffsetCommit).
    PendingOffsets { group: String, producer_id: i64, offsets: OffsetList },
    /// The transaction ended: its pending offsets were committed (in the `GroupOffsets`
    /// stream, before this entry) or dropped.
    OffsetsResolved { group: String, producer_id: i64 },
    /// Everything above, and the transaction state of partitions up to `covered`.
    Snapshot {
        txns: Vec<TxnMetadata>,
        pending: Vec<((String, i64), OffsetList)>,
        partitions: Vec<(u64, PartitionTxns)>,
        covered: Vec<(u64, i64)>,
    },
    /// The coordinator's whole state (every transactional id's metadata and the pending
    /// offsets), replacing what was before: installed from an offsets group's partition
    /// snapshot (`txn::replicated`). Partition state is untouched. Last, so that the
    /// archived tags of the variants above stay those already on disk.
    Coordinator { txns: Vec<TxnMetadata>, pending: Vec<((String, i64), OffsetList)> },
}

/// What the stream rebuilds at start-up.
#[derive(Default)]
pub struct Recovered {
    pub txns: BTreeMap<String, TxnMetadata>,
    pub pending: PendingOffsets,
    pub partitions: HashMap<u64, PartitionTxns>,
    /// Per partition, the offset from which batches must be replayed.
    pub covered: HashMap<u64, i64>,
}

impl TxnLogEntry {
    pub fn encode(&self) -> Vec<u8> {
        encode_versioned(TXN_FORMAT_VERSION, self)
    }

    pub fn decode(bytes: &[u8]) -> Result<TxnLogEntry, String> {
        decode_versioned(TXN_FORMAT_VERSION, "transaction entry", bytes)
    }

    /// Applies this entry (in log order) to what recovery rebuilds.
    pub fn apply(self, to: &mut Recovered) {
        match self {
            TxnLogEntry::Snapshot { txns, pending, partitions, covered } => {
                *to = Recovered {
                    txns: txns.into_iter().map(|t| (t.transactional_id.clone(), t)).collect(),
                    pending: pending.into_iter().collect(),
                    partitions: partitions.into_iter().collect(),
                    covered: covered.into_iter().collect(),
                };
            }
            change => change.apply_change(&mut to.txns, &mut to.pending),
        }
    }

    /// Applies a change (any entry but a snapshot, which is written, never proposed) to
    /// the coordinator's metadata and pending offsets: at recovery, and on every replica
    /// of a cluster's offsets group (`txn::replicated`). Each sets, merges per partition,
    /// removes or replaces, so a run applied twice leaves what applying it once did.
    pub fn apply_change(
        self,
        txns: &mut BTreeMap<String, TxnMetadata>,
        pending: &mut PendingOffsets,
    ) {
        match self {
            TxnLogEntry::Txn(metadata) => {
                txns.insert(metadata.transactional_id.clone(), metadata);
            }
            TxnLogEntry::PendingOffsets { group, producer_id, offsets } => {
                merge_pending(pending, group, producer_id, offsets);
            }
            TxnLogEntry::OffsetsResolved { group, producer_id } => {
                pending.remove(&(group, producer_id));
            }
            TxnLogEntry::Coordinator { txns: all, pending: all_pending } => {
                *txns = all.into_iter().map(|t| (t.transactional_id.clone(), t)).collect();
                *pending = all_pending.into_iter().collect();
            }
            TxnLogEntry::Snapshot { .. } => panic!("a snapshot is not a change"),
        }
    }
}

/// Adds offsets to a producer's pending ones for a group (a later one per partition wins).
pub fn merge_pending(
    pending: &mut PendingOffsets,
    group: String,
    producer_id: i64,
    offsets: OffsetList,
) {
    let list = pending.entry((group, producer_id)).or_default();
    for (key, committed) in offsets {
        match list.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = committed,
            None => list.push((key, committed)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::group::offsets::Committed;
    use crate::txn::state::TxnState;

    fn committed(offset: i64) -> Committed {
        Committed { offset, leader_epoch: -1, metadata: None, commit_time_ms: 1 }
    }

    #[test]
    fn entries_round_trip_and_replay_to_the_last_state() {
        let mut t = TxnMetadata::new("tx", 5, 60_000, 0);
        let entries = vec![
            TxnLogEntry::Txn(t.clone()),
            TxnLogEntry::PendingOffsets {
                group: "g".into(),
                producer_id: 5,
                offsets: vec![(("in".into(), 0), committed(3))],
            },
            TxnLogEntry::PendingOffsets {
                group: "g".into(),
                producer_id: 5,
                offsets: vec![(("in".into(), 0), committed(7)), (("in".into(), 1), committed(1))],
            },
            TxnLogEntry::OffsetsResolved { group: "h".into(), producer_id: 5 },
        ];
        let mut recovered = Recovered::default();
        for entry in entries {
            let decoded = TxnLogEntry::decode(&entry.encode()).unwrap();
            assert_eq!(decoded, entry);
            decoded.apply(&mut recovered);
        }
        let pending = &recovered.pending[&("g".to_string(), 5)];
        assert_eq!(pending.len(), 2);
        assert_eq!(pending[0].1.offset, 7);
        t.state = TxnState::Ongoing;
        TxnLogEntry::Txn(t.clone()).apply(&mut recovered);
        TxnLogEntry::OffsetsResolved { group: "g".into(), producer_id: 5 }.apply(&mut recovered);
        assert!(recovered.pending.is_empty());
        assert_eq!(recovered.txns["tx"].state, TxnState::Ongoing);
    }

    /// `group::replicated` invariant 3 for transaction state: after a restart the raft
    /// entries past the compaction point are applied again on top of what the stream
    /// recovered, which already holds them (any suffix of the run).
    #[test]
    fn applying_a_run_of_changes_again_from_any_entry_leaves_what_applying_it_once_did() {
        let open = TxnMetadata::new("tx", 5, 60_000, 0);
        let mut prepared = open.clone();
        prepared.state = TxnState::PrepareCommit;
        let pending = |partition: i32, offset: i64| TxnLogEntry::PendingOffsets {
            group: "g".into(),
            producer_id: 5,
            offsets: vec![(("in".into(), partition), committed(offset))],
        };
        let resolved = TxnLogEntry::OffsetsResolved { group: "g".into(), producer_id: 5 };
        let run = vec![
            TxnLogEntry::Txn(open),
            pending(0, 3),
            pending(1, 4),
            pending(0, 7),
            TxnLogEntry::Txn(prepared.clone()),
            resolved,
            TxnLogEntry::Coordinator { txns: vec![prepared], pending: vec![] },
            pending(1, 9),
        ];
        let applied = |entries: &[TxnLogEntry], state: &mut (BTreeMap<_, _>, PendingOffsets)| {
            for entry in entries {
                entry.clone().apply_change(&mut state.0, &mut state.1);
            }
        };
        let mut once = Default::default();
        applied(&run, &mut once);
        for from in 0..run.len() {
            let mut twice = once.clone();
            applied(&run[from..], &mut twice);
            assert_eq!(twice, once, "applied again from entry {from}");
        }
        assert_eq!(once.0["tx"].state, TxnState::PrepareCommit);
        assert_eq!(once.1[&("g".to_string(), 5)], vec![(("in".into(), 1), committed(9))]);
    }

    #[test]
    fn garbage_and_unknown_versions_are_refused() {
        assert!(TxnLogEntry::decode(&[]).is_err());
        assert!(TxnLogEntry::decode(&[2, 0, 0]).is_err());
        assert!(TxnLogEntry::decode(&[1, 0xff, 0xff, 0xff, 0xff]).is_err());
    }
}
