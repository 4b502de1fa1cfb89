//! The transaction coordinator's state in a cluster (docs/transactions.md, "Replicated
//! partitions", phase 2b): it fails over with its node.
//!
//! On a node with peers, shard s keeps the state of the transactional ids it coordinates
//! (`coordinator_shard`) and the pending TxnOffsetCommit offsets of its consumer groups in
//! the shard's offsets group (`group::replicated`: the raft group of every node on shard
//! s), as consumer-group offsets are kept there. That group's leader is the coordinator of
//! the shard's transactional ids, as it is of its consumer groups:
//!
//! - FindCoordinator (key type 1), on any node, names the leader's broker for the id's
//!   shard (COORDINATOR_NOT_AVAILABLE while none is known); another replica answers the
//!   transaction calls NOT_COORDINATOR, and COORDINATOR_LOAD_IN_PROGRESS while it leads but
//!   has not taken the groups over in its term (`check_offsets_leader`).
//! - Every change (a `Txn` transition, `PendingOffsets`, `OffsetsResolved`) is proposed
//!   as a transaction state entry (`replication::partition`, kind 7) and the call waits
//!   until it is committed and applied here. Every replica applies the committed entry to
//!   its own copy: its `Transactions` stream, as a single node writes it, and its
//!   in-memory state. So a new leader holds every transition the old one answered.
//! - A follower's apply changes state only. Its ticker does nothing while it does not
//!   coordinate (no marker, no timeout abort: the leader does those, and would otherwise
//!   be raced).
//! - A new leader takes the ids over with the consumer groups, on the first tick after
//!   it applied an entry of its term (everything committed before its election is then
//!   applied). From then its ticker (every `--transaction-check-interval-ms`) finishes the
//!   transactions it found in PrepareCommit/PrepareAbort (the markers again, through the
//!   phase 2a routing, then Complete*), and aborts the Ongoing ones past their timeout
//!   (measured from the last transition's time, as the old leader wrote it). An Ongoing
//!   transaction within its timeout stays open, as after a restart: the producer's next
//!   InitProducerId fences and aborts it, with the epoch the old coordinator gave.
//!
//! A single node writes the same entries to its shard log and waits for their fdatasync
//! (`write_txn_entry`), as before.
//!
//! Runs on the coordinator shard of the ids; not a hot path (one raft entry per call).
//!
//! Invariants:
//! 1. A call on a transactional id is answered only once its change is committed (durable
//!    in a majority's raft logs) and applied to the answering replica's copy; as for
//!    offsets, that copy's `Transactions` append is made durable by the next group commit,
//!    not waited for (`group::replicated` invariant 2).
//! 2. Every replica applies the same changes in the same order. A change sets a whole
//!    value (a `Txn` entry holds the id's whole metadata; pending offsets are merged per
//!    partition, a later one winning; a resolution removes), so entries applied again after
//!    a restart, on top of what the stream recovered, leave what applying them once did.

use super::log::TxnLogEntry;
use crate::error::{GroupError, TxnError};
use crate::partition_group::OffsetsApplied;
use crate::replication::partition::PartitionEntry;
use crate::shard::Shard;
use bytes::Bytes;
use shardlog_storage::InternalStream;

impl Shard {
    /// Makes one change to the coordinator's state durable and visible: on a single node
    /// written to the `Transactions` stream (in memory once queued) and fdatasync'd; in a
    /// cluster proposed to this shard's offsets group and answered once applied here
    /// (invariant 1).
    pub(crate) async fn write_txn_entry(&self, entry: TxnLogEntry) -> Result<(), GroupError> {
        let bytes = entry.encode();
        if let Some(group) = self.offsets_group() {
            let entry = PartitionEntry::encode_txn_state(&bytes);
            return self.replicate_in_offsets_group(group, entry).await;
        }
        let durable = self.append_txn_bytes(&bytes)?;
        self.apply_txn_entry(entry);
        if let Err(e) = durable.wait().await {
            self.fatal_storage_error(&e);
        }
        Ok(())
    }

    /// Applies a committed transaction state entry of `group` (entry `index`) to this
    /// replica's copy (invariant 2): appended to the `Transactions` stream, then in memory.
    pub(crate) fn apply_txn_state_change(
        &self,
        group: u64,
        index: u64,
        change: &[u8],
    ) -> OffsetsApplied {
        let entry = match TxnLogEntry::decode(change) {
            Ok(TxnLogEntry::Snapshot { .. }) => Err("a snapshot is never proposed".to_string()),
            decoded => decoded,
        };
        let entry = entry.unwrap_or_else(|e| {
            // As for an offsets entry: every replica writes what it reads; never guessed at.
            tracing::error!(group, index, error = %e, "a transaction state entry does not decode");
            crate::runtime::exit_process(crate::runtime::SHARD_STOPPED_EXIT_CODE);
        });
        let logged = self.append_txn_bytes(change);
        if logged.is_err() {
            self.unstorable_committed_entry(group, index, "the transaction state was refused");
        }
        self.apply_txn_entry(entry);
        logged.map(|_durable| ()) // not waited for (invariant 1)
    }

    /// One change to the in-memory coordinator state (every entry but a snapshot).
    fn apply_txn_entry(&self, entry: TxnLogEntry) {
        let mut txns = self.txn.txns.borrow_mut();
        entry.apply_change(&mut txns, &mut self.txn.pending.borrow_mut());
    }

    /// Appends an encoded entry to the `Transactions` stream (not waiting for it).
    fn append_txn_bytes(&self, bytes: &[u8]) -> Result<shardlog_storage::Durable, GroupError> {
        let appended = self.log.append_internal(InternalStream::Transactions, false, bytes);
        let durable = appended.map_err(|e| {
            tracing::warn!(shard = self.id, error = ?e, "writing transaction state");
            GroupError::Storage
        })?;
        self.txn.in_log.set(true);
        Ok(durable)
    }

    /// The coordinator's image for a partition snapshot of this shard's offsets group: its
    /// state after every entry applied here (`TxnLogEntry::Coordinator`); empty: none.
    pub(crate) fn txn_coordinator_image(&self) -> Bytes {
        let txns = self.txn.list();
        let pending: Vec<_> = self.txn.pending.borrow().clone().into_iter().collect();
        if txns.is_empty() && pending.is_empty() {
            return Bytes::new();
        }
        Bytes::from(TxnLogEntry::Coordinator { txns, pending }.encode())
    }

    /// Installs a partition snapshot's coordinator image: it replaces this replica's
    /// coordinator state (older than the snapshot's index), in the `Transactions` stream
    /// and in memory. An image that does not decode is refused (the install fails).
    pub(crate) fn install_txn_coordinator_image(&self, image: &[u8]) -> Result<(), String> {
        let entry = match TxnLogEntry::decode(image)? {
            entry @ TxnLogEntry::Coordinator { .. } => entry,
            _ => return Err("not a coordinator image".to_string()),
        };
        self.append_txn_bytes(image).map_err(|e| format!("{e:?}"))?;
        self.apply_txn_entry(entry);
        Ok(())
    }

    /// Whether this shard of this node coordinates transactional id `key` now: on a single
    /// node its `coordinator_shard`; in a cluster that shard of the node that leads the
    /// shard's offsets group, once it took the ids over in its term (module docs).
    pub(crate) fn check_coordinates(&self, key: &str) -> Result<(), TxnError> {
        if crate::group::coordinator_shard(key, self.nr_shards) != self.id {
            return Err(TxnError::NotCoordinator);
        }
        self.coordinating_here()
    }

    /// Every transactional id this shard coordinates now: none on a replica of the offsets
    /// group that does not (its copy of their state is the leader's, served there).
    pub fn coordinated_txns(&self) -> Vec<super::state::TxnMetadata> {
        match self.coordinating_here() {
            Ok(()) => self.txn.list(),
            Err(_) => Vec::new(),
        }
    }

    /// Whether this shard coordinates its transactional ids now (module docs).
    pub(crate) fn coordinating_here(&self) -> Result<(), TxnError> {
        let Some(group) = self.offsets_group() else { return Ok(()) };
        match self.check_offsets_leader(group) {
            Ok(()) => Ok(()),
            Err(GroupError::CoordinatorLoadInProgress) => Err(TxnError::CoordinatorLoadInProgress),
            Err(_) => Err(TxnError::NotCoordinator),
        }
    }
}

/// A failed change to the coordinator's state, as a transaction call answers it: a replica
/// that lost the leadership is NOT_COORDINATOR (the client finds the new one and retries),
/// no commit in time COORDINATOR_LOAD_IN_PROGRESS (retriable; the change may still commit).
pub(crate) fn txn_write_error(error: GroupError) -> TxnError {
    match error {
        GroupError::NotCoordinator => TxnError::NotCoordinator,
        GroupError::CoordinatorNotAvailable | GroupError::CoordinatorLoadInProgress => {
            TxnError::CoordinatorLoadInProgress
        }
        other => TxnError::Storage(format!("writing transaction state: {other:?}")),
    }
}
