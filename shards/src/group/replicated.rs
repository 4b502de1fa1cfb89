//! Consumer-group offsets in a cluster (docs/replication.md, "Consumer-group offsets").
//!
//! On a node with peers, shard s keeps the committed offsets of the groups it coordinates
//! (`coordinator_shard`) in the raft group of every node on shard s (`offsets_group`): the
//! partition group that also carries the partitions replicated on every node, as Kafka
//! keeps offsets in the replicated `__consumer_offsets` partitions. That group's leader is
//! the groups' coordinator:
//!
//! - FindCoordinator, on any node, names the leader's broker for the group's shard (each
//!   shard knows every group's leader: `partition_leader`); COORDINATOR_NOT_AVAILABLE
//!   while none is known.
//! - Every change to committed offsets (OffsetCommit, OffsetDelete, DeleteGroups, offset
//!   expiry, a transaction's offsets when it commits) is proposed as an offsets entry
//!   (`replication::partition`, kind 3). Every replica applies the committed entry to its
//!   own copy: its `GroupOffsets` stream, as a single node writes it, and its in-memory
//!   offsets. So a new leader holds every offset the old one acknowledged. The
//!   coordinator answers once the entry is committed and applied here, without waiting
//!   for its copy's fdatasync (invariant 2).
//! - A leader takes the groups over on the first tick after it applied an entry of its
//!   own term (raft's empty entry: everything committed before its election is then
//!   applied); it answers COORDINATOR_LOAD_IN_PROGRESS until then. A replica that stops
//!   leading forgets the groups' membership (members rejoin at the new coordinator, as
//!   when a Kafka coordinator moves); their committed offsets stay.
//!
//! Runs on the shard that coordinates the groups; not a hot path (one raft entry per
//! change, as a produce).
//!
//! Invariants:
//! 1. A replica serves a group (joins, commits, fetches of offsets) only while it leads the
//!    offsets group and has taken its groups over in the current term (`check_offsets_leader`).
//! 2. A change is answered only once committed (durable in a majority's raft logs) and
//!    applied to the answering replica's own copy. That copy's append is made durable by
//!    the next group commit, not waited for: until then the raft log holds the change,
//!    and compaction drops it from there only after a stream snapshot written behind the
//!    append (`partition_group` invariant 4).
//! 3. Every replica applies the same changes in the same order. After a restart the
//!    entries past the raft log's compaction point are applied again on top of what the
//!    `GroupOffsets` stream recovered; each change sets or removes values, so applying a
//!    run of changes twice leaves what applying it once did.

use crate::error::GroupError;
use crate::group::offsets::OffsetLogEntry;
use crate::metadata_group::COMMIT_WAIT;
use crate::partition_group::{OffsetsApplied, PartitionGroups};
use crate::replication::partition::{partition_group_id, PartitionEntry};
use crate::shard::Shard;
use futures_lite::FutureExt;

impl Shard {
    /// The raft group that carries this shard's committed offsets: the group of every node
    /// on this shard. None on a single node.
    pub fn offsets_group(&self) -> Option<u64> {
        self.offsets_group_of(self.id)
    }

    pub(crate) fn offsets_group_of(&self, shard: usize) -> Option<u64> {
        let nodes = &self.config.nodes;
        (nodes.len() > 1).then(|| partition_group_id(nodes, shard as u32))
    }

    /// The node that coordinates `group_id` (a consumer group or a transactional id) now,
    /// as this shard knows it: in a cluster the leader of the offsets group of the key's
    /// shard (None while none is known), on a single node this node.
    pub fn group_coordinator_node(&self, group_id: &str) -> Option<u32> {
        let shard = super::coordinator_shard(group_id, self.nr_shards);
        match self.offsets_group_of(shard) {
            Some(group) => self.partition_leader(group).0,
            None => Some(self.config.node_id),
        }
    }

    /// Invariant 1 for this shard's offsets group `group`.
    pub(crate) fn check_offsets_leader(&self, group: u64) -> Result<(), GroupError> {
        let groups = self.partition_groups().ok_or(GroupError::NotCoordinator)?;
        match groups.leadership(group) {
            (false, _) => Err(GroupError::NotCoordinator),
            (true, term) if groups.offsets_loaded() == Some(term) => Ok(()),
            (true, _) => Err(GroupError::CoordinatorLoadInProgress),
        }
    }

    /// Proposes `entry` to `group` and waits until it is committed and applied here
    /// (invariant 2).
    pub(crate) async fn replicate_offset_entry(
        &self,
        group: u64,
        entry: &OffsetLogEntry,
    ) -> Result<(), GroupError> {
        let entry = PartitionEntry::encode_offsets(&entry.encode());
        self.replicate_in_offsets_group(group, entry).await
    }

    /// Proposes `entry` (an offsets or transaction state entry) to `group` and waits until
    /// it is committed and applied here (invariant 2).
    pub(crate) async fn replicate_in_offsets_group(
        &self,
        group: u64,
        entry: Vec<u8>,
    ) -> Result<(), GroupError> {
        let groups = self.partition_groups().ok_or(GroupError::NotCoordinator)?;
        let (index, receiver) = groups.propose_offsets(group, entry)?;
        let applied = async { receiver.recv().await }
            .or(async {
                glommio::timer::sleep(COMMIT_WAIT).await;
                None
            })
            .await;
        groups.forget_offsets_waiter(group, index);
        // No answer in time: no quorum. Retriable; the change may still commit.
        applied.unwrap_or(Err(GroupError::CoordinatorNotAvailable))
    }

    /// Applies a committed offsets entry of `group` (entry `index`) to this replica's copy
    /// (invariant 3): appended to the `GroupOffsets` stream, then visible to OffsetFetch
    /// (it is committed already).
    pub(crate) fn apply_offsets_change(
        &self,
        group: u64,
        index: u64,
        change: &[u8],
    ) -> OffsetsApplied {
        let entry = OffsetLogEntry::decode(change).unwrap_or_else(|e| {
            // As for a partition entry: every replica writes what it reads; never guessed at.
            tracing::error!(group, index, error = %e, "an offsets entry does not decode");
            crate::runtime::exit_process(crate::runtime::SHARD_STOPPED_EXIT_CODE);
        });
        let logged = self.log_offset_entry(&entry);
        if logged.is_err() {
            self.unstorable_committed_entry(group, index, "the offsets entry was refused");
        }
        self.groups.apply_offsets(entry);
        logged.map(|_durable| ()) // not waited for (invariant 2)
    }

    /// Every TICK: takes the consumer groups over once this replica leads the offsets group
    /// and applied an entry of its term; forgets their membership once it does not lead
    /// (module docs).
    pub(crate) fn follow_offsets_leadership(&self, groups: &PartitionGroups) {
        let Some(group) = self.offsets_group() else { return };
        let (leads, term) = groups.leadership(group);
        let ready = leads && groups.applied_term(group) == term;
        match (ready, groups.offsets_loaded()) {
            (true, Some(loaded)) if loaded == term => {}
            (true, _) => {
                self.groups.unload_membership();
                self.groups.load_groups_with_offsets();
                groups.set_offsets_loaded(Some(term));
                tracing::info!(shard = self.id, term, "coordinating this shard's consumer groups");
            }
            (false, Some(_)) if !leads => {
                self.groups.unload_membership();
                groups.set_offsets_loaded(None);
                tracing::info!(shard = self.id, "no longer coordinating consumer groups");
            }
            (false, _) => {}
        }
    }
}
