//! Replicated partitions (docs/replication.md, "What exists: partition groups"): a topic
//! with replication factor r > 1 has its partitions replicated by raft groups, one per
//! (replica set, shard), shared by every partition with that replica set on that shard.
//! Shard s of every node in the set hosts the group (`replication::partition_group_id`),
//! on its `GroupHost`, its writes on the shard's log (`persist::ShardLogSink`).
//!
//! - Produce: the shard that hosts the group and leads it validates the batches and
//!   proposes one `ProduceEntry` (topic id, partition index, the table version, its clock
//!   for LogAppendTime, the batches). Offsets are assigned when the entry is *applied*.
//!   A replica that does not lead answers NOT_LEADER_OR_FOLLOWER, as when no leader is
//!   known. acks=all is answered once the leader applied the committed entry (invariant 5);
//!   acks=1 once the leader's own write of the entry is durable, at the offset its apply
//!   will give it, when the leader knows that offset then (`crate::leader_acks`), else
//!   as acks=all.
//! - Apply: one task per shard applies each group's committed entries in index order,
//!   through the produce path's own append (`Shard::append_produced`: sequence checks,
//!   LogAppendTime stamp, append, producer state), on every replica alike, so every replica
//!   assigns the same offsets and the partition log holds only committed data. Each batch
//!   is stamped with the entry's raft term as its partition leader epoch (KIP-320), which
//!   `check_leader_epoch` compares with a request's current_leader_epoch.
//! - Transactions (docs/transactions.md, "Replicated partitions"): a transactional produce
//!   is verified on the leader and proposed as any produce; its apply opens the
//!   transaction in the partition's `PartitionTxns` on every replica. The coordinator's
//!   COMMIT/ABORT marker is proposed by the leader as a `TxnMarkerEntry`
//!   (`propose_txn_marker`) and answered like a produce; every replica's apply appends the
//!   control batch at its next offset and closes the transaction (`apply_txn_marker`).
//! - Consumer-group offsets (`group::replicated`): every shard of a node with peers hosts
//!   the group of (every node, its shard), whether or not a partition is placed on it; its
//!   offsets entries are applied by the same task, in the same index order.
//! - ISR (docs/replication.md, "The ISR"): every TICK a leader notes which voters' match
//!   index reached its own last index of the tick before (caught up, and heard from
//!   lately); a voter not caught up for `replica_lag_time_max` leaves the ISR, and one
//!   caught up again rejoins. A change is proposed as an ISR entry, so every replica's
//!   Metadata shows the same ISR from when it applies it (`ShardRequest::PartitionIsr`).
//! - Preferred leaders (`crate::leader_balance`): a new group's preferred replica campaigns
//!   at once, and a leader hands the group back to it once it is caught up.
//! - Leaders: every TICK the hosting shard compares each group's (leader, term) with what
//!   it last published, and sends changes to the node's other shards
//!   (`ShardRequest::PartitionLeader`), so Metadata on any shard reads its own map.
//!   Nodes outside a group's replica set (replication factor r < n) learn its leader and
//!   ISR from the leader's notices (`crate::leader_notices`).
//! - Log compaction (docs/replication.md, "Log compaction"): every TICK a leader whose
//!   voters all have at least `COMPACT_AFTER_ENTRIES` committed entries (or
//!   `COMPACT_AFTER_BYTES` of them) past its log's snapshot point proposes a compaction
//!   entry up to the slowest voter's match index (a voter not heard from for
//!   `replica_snapshot_after` aside: it catches up from a partition snapshot,
//!   `crate::partition_snapshots`); every replica compacts its own log when it applies
//!   that entry. When the shard's `Raft` stream grew by
//!   `STREAM_SNAPSHOT_BYTES` since its last stream snapshot, and a new one would be small
//!   (at most half that growth and half a segment), the shard writes it (every group's
//!   compacted image, every partition group's last applying marker), so the shard log
//!   forgets the stream's older entries: memory and checkpoints hold the groups' logs
//!   since their compaction point, not since their first entry.
//!
//! Runs on the shard that hosts the groups. Not a hot path yet: a produce costs one raft
//! entry (the batches copied once into it) and one channel hop to the applier.
//!
//! Invariants:
//! 1. Entries are applied in index order, each once in a life; across restarts the
//!    applying marker decides (`replication::partition` invariant 3).
//! 2. A replica applies an entry only once its topic table reached the entry's
//!    `table_version`; the topic is then known, or deleted since (the entry is skipped on
//!    every replica that has the deletion, and the others drop the partition when they
//!    apply it).
//! 3. A produce is answered with its own entry's apply (index and term), never another's.
//! 4. A replica compacts its log only up to an index every voter has durably (the
//!    leader's match indexes when it proposed; a voter the leader had not heard from for
//!    `replica_snapshot_after` excepted, which then needs a partition snapshot) and it has
//!    applied itself: no voter that was around needs a compacted entry from it, and no
//!    entry is dropped before its data is on the shard log (its batches precede the
//!    stream snapshot that drops the entry).
//! 5. A produce is answered once its entry is committed (durable in a majority's raft
//!    logs) and applied on the leader, without waiting for the fdatasync of the applied
//!    copy (the partition's batches): should the leader's node die before that, the
//!    entry applies again at its restart, from the group's log (its own or the new
//!    leader's; invariant 1, the applying marker), at the same offsets, and the other
//!    replicas apply it alike. What consumers read is unchanged: the leader's durable
//!    partition log.
//! 6. The applied copy of a produce or a marker (applying marker and batches) is appended
//!    under `ShardLog::deferring_flush`: it starts no flush of its own, and is written
//!    with the next raft write's flush (or after `LogConfig::deferred_flush_after`). Nothing
//!    waits for it: the entry is durable in this replica's raft log before it is applied
//!    (raft-rs hands out only persisted entries), and invariant 5 covers a crash before
//!    the copy is durable.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_lite::FutureExt;
use glommio::channels::local_channel::{self, LocalReceiver, LocalSender};
use shardlog_storage::{
    split_batches, Durable, InternalEntry, InternalStream, Offset, PartitionId, RecordBatchHeader,
};

use crate::error::{GroupError, PartitionError};
use crate::leader_acks::{self, LeaderAckStats, LeaderAcks, Standing};
use crate::leader_notices::LeaderNotices;
use crate::message::{ShardReply, ShardRequest};
use crate::metadata::TopicMeta;
use crate::metadata_group::{COMMIT_WAIT, METADATA_GROUP};
use crate::ops::{append_error, validate_batches, ProduceWait, Queued};
use crate::partition_snapshots::{PartitionSnapshotStats, PartitionSnapshots};
use crate::replication::partition::{
    applied_before_restart, partition_group_id, ApplyingMarker, PartitionEntry, ProduceEntry,
    TxnMarkerEntry,
};
use crate::replication::persist::{self, ShardLogSink};
use crate::replication::{
    node_of, raft_id, Entry, GroupConfig, GroupHost, LogImage, Outcome, Proposal, ProposeError,
    RaftGroup, TICK,
};
use crate::shard::Shard;
use crate::topic_config::ProducePolicy;
use crate::txn::partition::{control_batch, BatchKind};

/// How often the applier looks again at a table behind an entry (invariant 2): rare (a
/// topic created a moment ago), so a poll, not a notification.
pub(crate) const TABLE_WAIT_POLL: Duration = Duration::from_millis(5);

/// Entries, or bytes of entry data, a leader lets pass its log's snapshot point before it
/// proposes a compaction: at most one compaction entry per this much, and per tick, so an
/// idle group proposes none.
const COMPACT_AFTER_ENTRIES: u64 = 64;
const COMPACT_AFTER_BYTES: u64 = 1 << 20;

/// Bytes the shard's `Raft` stream grows by before the shard writes a stream snapshot,
/// which it writes only when it would be at most half that growth (so rewriting the
/// groups' images costs at most half of what they wrote, and a snapshot is written only
/// once compaction made most of the stream dead) and at most half a segment (an entry
/// never spans segments).
const STREAM_SNAPSHOT_BYTES: u64 = 8 << 20;

/// An entry proposed in a partition group whose apply answers its proposer (a produce, a
/// transaction marker): `PartitionGroups::propose_answered`.
pub(crate) struct Proposed {
    groups: Rc<PartitionGroups>,
    group: u64,
    index: u64,
    term: u64,
    receiver: LocalReceiver<Applied>,
    /// An acks=1 produce's answer, given once the leader's write is durable if that comes
    /// first (`crate::leader_acks`).
    early: Option<(Queued, LocalReceiver<()>)>,
}

impl Proposed {
    /// Waits until the entry is committed and applied on this replica (invariant 5); no
    /// answer within `COMMIT_WAIT` (no quorum, or the leader moved) is
    /// NOT_LEADER_OR_FOLLOWER, retriable: an idempotent producer's retry is deduplicated
    /// if the entry committed after all, and a second marker for a transaction no longer
    /// open changes nothing.
    pub(crate) async fn wait(self) -> Applied {
        let Proposed { groups, group, index, term: _, receiver, early } = self;
        let applied = match early {
            None => within_commit_wait(receiver).await,
            Some((answer, durable)) => {
                enum First {
                    Durable,
                    Applied(Option<Applied>),
                }
                let on_durable = async move {
                    match durable.recv().await {
                        Some(()) => First::Durable,
                        None => std::future::pending().await, // the apply answers
                    }
                };
                let on_apply = async move { First::Applied(within_commit_wait(receiver).await) };
                let first = on_durable.or(on_apply).await;
                groups.leader_acks.forget(group, index);
                match first {
                    First::Durable => {
                        groups.leader_acks.count_early_ack();
                        Some(Ok(answer))
                    }
                    First::Applied(applied) => applied,
                }
            }
        };
        groups.waiters.borrow_mut().remove(&(group, index));
        applied.unwrap_or(Err(PartitionError::NotLeaderOrFollower))
    }
}

/// What the applier tells a waiting produce: its append, or why there is none.
type Applied = Result<Queued, PartitionError>;

/// Committed entries of a group and its proposals' outcomes, for the applier.
type Committed = (u64, Vec<Entry>, Vec<Outcome>);

/// What the applier tells a waiting change to committed offsets (`group::replicated`):
/// applied here, or why not.
pub(crate) type OffsetsApplied = Result<(), GroupError>;

/// What the applier tells a waiting DeleteRecords: the partition's new log start.
pub(crate) type LogStartApplied = Result<Offset, PartitionError>;

/// Waiters of one kind: (group, index) -> (the proposal's term, where to answer).
type Waiters<T> = RefCell<BTreeMap<(u64, u64), (u64, LocalSender<T>)>>;

/// A partition group's leader as a shard knows it: (leader node, raft term).
pub type GroupLeader = (Option<u32>, u64);

/// A shard's partition groups (only on a node with peers).
pub struct PartitionGroups {
    pub(crate) host: Rc<GroupHost>,
    /// Hosted groups: id -> replica nodes (sorted).
    groups: RefCell<BTreeMap<u64, Vec<u32>>>,
    /// Images recovered at start-up, taken when their group is created.
    recovered: RefCell<BTreeMap<u64, LogImage>>,
    /// Each group's last applying marker, recovered at start-up or written since
    /// (invariant 1; a stream snapshot carries them).
    markers: RefCell<BTreeMap<u64, ApplyingMarker>>,
    /// Each led group's last compaction proposal (invariant 4).
    compactions_proposed: RefCell<HashMap<u64, Proposal>>,
    /// The last stream snapshot, until it is durable and the log forgot what it replaced.
    stream_snapshot: RefCell<Option<Durable>>,
    stats: Cell<CompactionStats>,
    /// Produces of this shard waiting for their entry: (group, index) -> (term, answer).
    waiters: Waiters<Applied>,
    /// Changes to committed offsets waiting for their entry, likewise.
    offset_waiters: Waiters<OffsetsApplied>,
    /// DeleteRecords waiting for their log start entry (`crate::replicated_delete_records`).
    log_start_waiters: Waiters<LogStartApplied>,
    /// The term of the last entry applied, per group.
    applied_terms: RefCell<HashMap<u64, u64>>,
    /// The term in which this replica took over the groups of the shard's offsets group,
    /// while it leads it (`group::replicated`).
    offsets_loaded: Cell<Option<u64>>,
    /// Committed entries to the applier: (group, entries, outcomes).
    to_apply: Rc<LocalSender<Committed>>,
    /// (leader, term) of each hosted group as last published to the node's shards.
    published: RefCell<HashMap<u64, GroupLeader>>,
    /// Each led group's view of its voters' catching up (the ISR).
    in_sync: RefCell<HashMap<u64, InSync>>,
    /// Leader notices sent and heard (`crate::leader_notices`).
    pub(crate) notices: RefCell<LeaderNotices>,
    /// When leaders were last handed to preferred replicas (`crate::leader_balance`).
    pub(crate) last_leader_balance: Cell<Option<Instant>>,
    /// The index of the last entry the applier finished, per group, and the group whose
    /// entry it is applying now (`crate::partition_snapshots` invariant 1).
    applied_indexes: RefCell<HashMap<u64, u64>>,
    applying: Cell<Option<u64>>,
    /// Partition snapshots sent and installed (`crate::partition_snapshots`).
    pub(crate) snapshots: PartitionSnapshots,
    /// Calls to other nodes in flight (`crate::node_calls`).
    pub(crate) node_calls: crate::node_calls::NodeCalls,
    /// Topic auto-creations forwarded to the controller and not answered yet, by name
    /// (`crate::auto_create` invariant 1).
    pub(crate) auto_creates: RefCell<HashSet<String>>,
    /// acks=1 answered on the leader's fdatasync (`crate::leader_acks`).
    leader_acks: Rc<LeaderAcks>,
}

/// A leader's view of its voters' catching up, for the ISR (module docs), in one term.
struct InSync {
    term: u64,
    /// The tick this view started (the applied ISR counts as caught up then, unseen).
    since: Instant,
    /// The leader's last index at the previous tick: a voter whose match index reached it
    /// is caught up now.
    last_index: u64,
    /// When each voter (node id) was last caught up; a voter the applied ISR left out has
    /// no entry until it catches up.
    caught_up_at: BTreeMap<u32, Instant>,
    /// The last ISR entry proposed in this term.
    proposed: Option<Proposal>,
}

/// A shard's log compaction figures since its start (`/metrics`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CompactionStats {
    /// Compaction entries applied that dropped entries from a group's log.
    pub compactions: u64,
    /// Stream snapshots written.
    pub stream_snapshots: u64,
    /// Stream snapshots the log refused (a stopped log).
    pub stream_snapshot_failures: u64,
}

impl PartitionGroups {
    /// Compaction figures since the start.
    pub fn compaction_stats(&self) -> CompactionStats {
        self.stats.get()
    }

    /// Compacts `group`'s log up to `to` (a compaction entry applied: invariant 4), and
    /// counts it if anything was dropped.
    pub(crate) fn compact(&self, group: u64, to: u64) {
        if self.host.with_group(group, |g| g.compact(to)) == Some(true) {
            self.count(|s| s.compactions += 1);
        }
    }

    fn count(&self, change: impl FnOnce(&mut CompactionStats)) {
        let mut stats = self.stats.get();
        change(&mut stats);
        self.stats.set(stats);
    }

    /// The index of the last entry of `group` the applier finished, unless it is in the
    /// middle of one of the group's entries (`crate::partition_snapshots` invariant 1).
    pub(crate) fn applied_between_entries(&self, group: u64) -> Option<u64> {
        if self.applying.get() == Some(group) {
            return None;
        }
        self.applied_indexes.borrow().get(&group).copied()
    }

    /// Keeps `marker` as the group's last applying marker (for the next stream snapshot).
    pub(crate) fn note_marker(&self, marker: ApplyingMarker) {
        self.markers.borrow_mut().insert(marker.group, marker);
    }

    /// Partition snapshot figures since the start.
    pub fn partition_snapshot_stats(&self) -> PartitionSnapshotStats {
        self.snapshots.stats()
    }

    /// The groups hosted here: id -> replica nodes (sorted), a copy.
    pub(crate) fn hosted_groups(&self) -> BTreeMap<u64, Vec<u32>> {
        self.groups.borrow().clone()
    }

    /// Whether this replica leads `group` and saw voter `node` caught up (the ISR's test,
    /// `propose_isr_changes`) at this tick or the one before, after its first tick as
    /// leader (`leader_balance` invariant 1).
    pub(crate) fn caught_up_lately(&self, group: u64, node: u32, now: Instant) -> bool {
        let in_sync = self.in_sync.borrow();
        let Some(state) = in_sync.get(&group) else { return false };
        let seen = state.caught_up_at.get(&node).filter(|at| **at > state.since);
        self.leads(group) && seen.is_some_and(|at| now.saturating_duration_since(*at) <= 2 * TICK)
    }

    /// Whether this replica leads group `group` now.
    fn leads(&self, group: u64) -> bool {
        self.host.with_group(group, |g| g.is_leader()).unwrap_or(false)
    }

    fn resolve(&self, group: u64, index: u64, term: u64, applied: Applied) {
        answer(
            &self.waiters,
            (group, index),
            term,
            applied,
            Err(PartitionError::NotLeaderOrFollower),
        );
    }

    fn resolve_offsets(&self, group: u64, index: u64, term: u64, applied: OffsetsApplied) {
        answer(
            &self.offset_waiters,
            (group, index),
            term,
            applied,
            Err(GroupError::NotCoordinator),
        );
    }

    pub(crate) fn resolve_log_start(
        &self,
        group: u64,
        index: u64,
        term: u64,
        applied: LogStartApplied,
    ) {
        let lost = Err(PartitionError::NotLeaderOrFollower);
        answer(&self.log_start_waiters, (group, index), term, applied, lost);
    }

    /// Proposes a partition entry in `group` if this replica leads it; a replica that does
    /// not (or no longer) is NOT_LEADER_OR_FOLLOWER, retriable.
    pub(crate) fn propose_partition_entry(
        &self,
        group: u64,
        entry: Vec<u8>,
    ) -> Result<Proposal, PartitionError> {
        match self.host.with_group(group, |g| g.propose(entry)) {
            Some(Ok(proposal)) => Ok(proposal),
            Some(Err(ProposeError::NotLeader { .. } | ProposeError::Dropped)) | None => {
                Err(PartitionError::NotLeaderOrFollower)
            }
            Some(Err(ProposeError::TooLarge { size, max })) => {
                Err(PartitionError::MessageTooLarge { size, max })
            }
        }
    }

    /// Proposes `entry` and registers where its apply answers (`Proposed::wait`).
    fn propose_answered(
        self: &Rc<Self>,
        group: u64,
        entry: Vec<u8>,
    ) -> Result<Proposed, PartitionError> {
        let proposal = self.propose_partition_entry(group, entry)?;
        let (sender, receiver) = local_channel::new_bounded(1);
        self.waiters.borrow_mut().insert((group, proposal.index), (proposal.term, sender));
        let (index, term) = (proposal.index, proposal.term);
        Ok(Proposed { groups: self.clone(), group, index, term, receiver, early: None })
    }

    /// Where this replica, leading `group` in `term`, stands for `crate::leader_acks`.
    fn standing(&self, group: u64, term: u64) -> Standing {
        Standing {
            term,
            applied_index: self.applied_indexes.borrow().get(&group).copied().unwrap_or(0),
            applied_term: self.applied_term(group),
        }
    }

    /// acks=1 answers on the leader's fdatasync so far (`/metrics`).
    pub fn leader_ack_stats(&self) -> LeaderAckStats {
        self.leader_acks.stats()
    }

    /// Where the apply of `proposal`, a log start entry of `group`, answers.
    pub(crate) fn wait_for_log_start(
        &self,
        group: u64,
        proposal: Proposal,
    ) -> LocalReceiver<LogStartApplied> {
        let (sender, receiver) = local_channel::new_bounded(1);
        let waiter = (proposal.term, sender);
        self.log_start_waiters.borrow_mut().insert((group, proposal.index), waiter);
        receiver
    }

    /// Stops waiting for the log start entry at `index` of `group`.
    pub(crate) fn forget_log_start_waiter(&self, group: u64, index: u64) {
        self.log_start_waiters.borrow_mut().remove(&(group, index));
    }

    /// Whether this replica leads `group`, and its term.
    pub(crate) fn leadership(&self, group: u64) -> (bool, u64) {
        self.host.with_group(group, |g| (g.is_leader(), g.term())).unwrap_or((false, 0))
    }

    /// The term in which this replica took over the offsets group's consumer groups.
    pub(crate) fn offsets_loaded(&self) -> Option<u64> {
        self.offsets_loaded.get()
    }

    pub(crate) fn set_offsets_loaded(&self, term: Option<u64>) {
        self.offsets_loaded.set(term);
    }

    /// The term of the last entry of `group` applied here (0: none yet).
    pub(crate) fn applied_term(&self, group: u64) -> u64 {
        self.applied_terms.borrow().get(&group).copied().unwrap_or(0)
    }

    /// Proposes `entry` in `group`, which this replica leads: a change to committed
    /// offsets (`PartitionEntry::encode_offsets`) or to the transaction coordinator's state
    /// (`encode_txn_state`), both answered through the offsets waiters: the entry's index
    /// and where its apply answers.
    pub(crate) fn propose_offsets(
        &self,
        group: u64,
        entry: Vec<u8>,
    ) -> Result<(u64, LocalReceiver<OffsetsApplied>), GroupError> {
        let proposal = match self.host.with_group(group, |g| g.propose(entry)) {
            Some(Ok(proposal)) => proposal,
            // As on one node, where the log refuses an entry over a segment.
            Some(Err(ProposeError::TooLarge { size, max })) => {
                tracing::warn!(group, size, max, "an offsets change larger than a log entry");
                return Err(GroupError::Storage);
            }
            Some(Err(_)) | None => return Err(GroupError::NotCoordinator),
        };
        let (sender, receiver) = local_channel::new_bounded(1);
        self.offset_waiters.borrow_mut().insert((group, proposal.index), (proposal.term, sender));
        Ok((proposal.index, receiver))
    }

    /// Stops waiting for the offsets change at `index` of `group` (answered or given up).
    pub(crate) fn forget_offsets_waiter(&self, group: u64, index: u64) {
        self.offset_waiters.borrow_mut().remove(&(group, index));
    }
}

/// What the applier answers on `receiver`, or None after `COMMIT_WAIT` (no quorum, or
/// the leader moved).
pub(crate) async fn within_commit_wait<T>(receiver: LocalReceiver<T>) -> Option<T> {
    async { receiver.recv().await }
        .or(async {
            glommio::timer::sleep(COMMIT_WAIT).await;
            None
        })
        .await
}

/// Answers the waiter of entry `key` with `applied` if the entry is the one it proposed
/// (same term), else with `lost` (invariant 3).
fn answer<T>(waiters: &Waiters<T>, key: (u64, u64), term: u64, applied: T, lost: T) {
    let mut waiters = waiters.borrow_mut();
    if let Some((wanted_term, _)) = waiters.get(&key) {
        let applied = if *wanted_term == term { applied } else { lost };
        let (_, sender) = waiters.remove(&key).expect("just found");
        // The proposer may have stopped waiting (`COMMIT_WAIT`).
        let _ = sender.try_send(applied);
    }
}

/// Every raft group image recovered from a shard's `Raft` stream and each partition
/// group's last applying marker; a partition group's voters are its replicas' raft ids
/// (from the table: `replicas_of`), the metadata group's every node's.
pub fn recover(
    recovered: &[InternalEntry],
    nodes: &[u32],
    replicas_of: &BTreeMap<u64, Vec<u32>>,
) -> Result<persist::Replayed, String> {
    let voters = |nodes: &[u32]| nodes.iter().map(|n| raft_id(*n as u64)).collect::<Vec<_>>();
    let new_image = |group: u64| match (group, replicas_of.get(&group)) {
        (METADATA_GROUP, _) => LogImage::new(&voters(nodes)),
        (_, Some(replicas)) => LogImage::new(&voters(replicas)),
        // A group of a deleted topic: replayed (to check the log) and never hosted.
        (_, None) => LogImage::new(&[]),
    };
    persist::replay_with_markers(recovered, new_image).map_err(|e| format!("raft groups: {e}"))
}

impl Shard {
    /// The partition groups this shard hosts, for the table's replicated partitions and
    /// for its committed offsets (`offsets_group`, on a node with peers): group id ->
    /// replica nodes (sorted).
    pub fn partition_groups_to_host(&self) -> BTreeMap<u64, Vec<u32>> {
        let mut groups = BTreeMap::new();
        if let Some(group) = self.offsets_group() {
            groups.insert(group, self.config.nodes.clone());
        }
        for meta in self.table_ref().topics.values() {
            for index in self.partitions_here(meta) {
                if let Some((group, replicas)) = self.replicated(meta, index as i32) {
                    groups.entry(group).or_insert(replicas);
                }
            }
        }
        groups
    }

    /// A replicated partition's group id and sorted replica nodes; None for one replica.
    pub(crate) fn replicated(&self, meta: &TopicMeta, partition: i32) -> Option<(u64, Vec<u32>)> {
        let replicas = meta.replicas(partition).filter(|r| r.len() > 1)?;
        let mut sorted = replicas.to_vec();
        sorted.sort_unstable();
        let shard = meta.owner(partition)? as u32;
        Some((partition_group_id(&sorted, shard), sorted))
    }

    /// The group of a replicated partition (`None`: not replicated, or unknown). A node
    /// without peers hosts no groups, so its produce path skips the table lookup here.
    pub fn partition_group_of(&self, topic: &str, partition: i32) -> Option<u64> {
        self.partition_groups.borrow().as_ref()?;
        let table = self.table_ref();
        self.replicated(table.topic(topic)?, partition).map(|(group, _)| group)
    }

    /// Starts this shard's partition groups (`host`: its replication host) from what its
    /// log recovered, the task that applies what they commit, and the one that publishes
    /// their leaders.
    pub fn start_partition_groups(
        self: &Rc<Self>,
        host: Rc<GroupHost>,
        replayed: persist::Replayed,
    ) -> Result<(), String> {
        let (to_apply, committed) = local_channel::new_unbounded();
        // Every recovered image stays here until its group is hosted (the metadata group's
        // on shard 0 too), so a stream snapshot never leaves out a group not hosted yet.
        let groups = Rc::new(PartitionGroups {
            host,
            groups: RefCell::new(BTreeMap::new()),
            recovered: RefCell::new(replayed.images),
            markers: RefCell::new(replayed.markers),
            compactions_proposed: RefCell::new(HashMap::new()),
            stream_snapshot: RefCell::new(None),
            stats: Cell::new(CompactionStats::default()),
            waiters: RefCell::new(BTreeMap::new()),
            offset_waiters: RefCell::new(BTreeMap::new()),
            log_start_waiters: RefCell::new(BTreeMap::new()),
            applied_terms: RefCell::new(HashMap::new()),
            offsets_loaded: Cell::new(None),
            to_apply: Rc::new(to_apply),
            published: RefCell::new(HashMap::new()),
            in_sync: RefCell::new(HashMap::new()),
            notices: RefCell::default(),
            last_leader_balance: Cell::new(None),
            applied_indexes: RefCell::new(HashMap::new()),
            applying: Cell::new(None),
            snapshots: PartitionSnapshots::new(),
            node_calls: crate::node_calls::NodeCalls::new(),
            auto_creates: RefCell::default(),
            leader_acks: Rc::new(LeaderAcks::default()),
        });
        *self.partition_groups.borrow_mut() = Some(groups.clone());
        // Groups restored from the log are served only once this replica leads the
        // offsets group (`group::replicated`).
        self.groups.unload_membership();
        for (group, replicas) in self.partition_groups_to_host() {
            self.host_partition_group(&groups, group, replicas)?;
        }
        glommio::spawn_local(apply_committed(self.clone(), groups.clone(), committed)).detach();
        crate::partition_snapshots::start(self, &groups);
        crate::node_calls::start(self, &groups);
        glommio::spawn_local(every_tick(self.clone(), groups)).detach();
        Ok(())
    }

    /// Appends the applying marker of entry `index` of `group`, about to be applied to
    /// `partition` (`replication::partition` invariant 3), and keeps it for the next
    /// stream snapshot.
    pub(crate) fn append_applying_marker(
        &self,
        group: u64,
        index: u64,
        partition: PartitionId,
    ) -> Result<(), PartitionError> {
        let next_offset = self.log.partition_info(partition).map_or(0, |i| i.log_end_offset);
        let marker = ApplyingMarker { group, index, partition, next_offset };
        persist::append_marker(&self.log, &marker).map_err(crate::ops::append_error)?;
        if let Some(groups) = self.partition_groups() {
            groups.markers.borrow_mut().insert(group, marker);
        }
        Ok(())
    }

    /// This shard's partition groups, on a node with peers once started.
    pub fn partition_groups(&self) -> Option<Rc<PartitionGroups>> {
        self.partition_groups.borrow().clone()
    }

    /// Hosts the group of a replicated partition this shard just got (a topic change), if
    /// the groups are started (at start-up they are created from the table instead).
    pub(crate) fn ensure_partition_group(&self, meta: &TopicMeta, partition: i32) {
        let (Some(groups), Some((group, replicas))) =
            (self.partition_groups(), self.replicated(meta, partition))
        else {
            return;
        };
        if let Err(e) = self.host_partition_group(&groups, group, replicas) {
            // Only a recovered image raft refuses: the log was checked at start-up.
            tracing::error!(shard = self.id, group, error = %e, "a partition group did not start");
            crate::runtime::exit_process(crate::runtime::SHARD_STOPPED_EXIT_CODE);
        }
    }

    fn host_partition_group(
        &self,
        groups: &PartitionGroups,
        group: u64,
        replicas: Vec<u32>,
    ) -> Result<(), String> {
        if groups.groups.borrow().contains_key(&group) {
            return Ok(());
        }
        let voters: Vec<u64> = replicas.iter().map(|n| raft_id(*n as u64)).collect();
        let image = groups.recovered.borrow_mut().remove(&group);
        let new_group = image.is_none();
        let image = image.unwrap_or_else(|| LogImage::new(&voters));
        // Entries up to the snapshot point are applied (raft-rs hands out those after it).
        groups.applied_indexes.borrow_mut().entry(group).or_insert(image.snapshot_index);
        let mut config = GroupConfig::new(raft_id(self.config.node_id as u64));
        config.max_entry_bytes = persist::max_entry_bytes(self.log.max_internal_payload());
        // A voter away this long stops holding compaction back (`crate::partition_snapshots`).
        config.compact_past_inactive_ticks = self
            .config
            .replica_snapshot_after
            .map(|after| (after.as_millis() / TICK.as_millis()).max(1) as u64);
        // Applied index 0: raft hands every committed entry out again; the markers say
        // which applied before (invariant 1).
        let raft = RaftGroup::recover(&config, image, 0)?;
        let to_apply = groups.to_apply.clone();
        let on_apply = Box::new(move |entries: Vec<Entry>, outcomes: Vec<Outcome>| {
            // Refused only once the applier ended (the shard is stopping).
            let _ = to_apply.try_send((group, entries, outcomes));
        });
        let held = groups.snapshots.held.clone();
        let hold = Box::new(move |message| {
            // Full only if a thousand snapshots wait: raft-rs sends again.
            let _ = held.try_send((group, message));
        });
        // Installed before the message was stepped (`crate::partition_snapshots`).
        let installed = Box::new(|_| {});
        let leader_acks = groups.leader_acks.clone();
        let persisted = Box::new(move |index, term| leader_acks.persisted(group, index, term));
        let sink = ShardLogSink::new(self.log.clone(), group, on_apply)
            .with_held_snapshots(hold)
            .with_install(installed)
            .with_persisted(persisted);
        groups.host.add_group(group, raft, Box::new(sink)).map_err(|e| e.to_string())?;
        if new_group && self.prefers_here(&replicas) {
            groups.host.with_group(group, RaftGroup::campaign); // `leader_balance` invariant 2
        }
        groups.groups.borrow_mut().insert(group, replicas);
        tracing::info!(shard = self.id, group = format!("{group:#x}"), "partition group hosted");
        Ok(())
    }

    /// The partition's leader epoch on this replica if it serves the partition, after
    /// the request's `current_leader_epoch` (-1: none) is checked against it (KIP-320; as
    /// Kafka's `Partition.getLocalLog`, the epoch first, then the leadership): newer than
    /// this replica's is UNKNOWN_LEADER_EPOCH, older is FENCED_LEADER_EPOCH, and a replica
    /// that does not lead the group is NOT_LEADER_OR_FOLLOWER. The epoch of a replicated
    /// partition is its group's raft term, the one stamped on the batches applied in it
    /// (`apply_partition_entry`); a partition of one replica never moves: 0.
    pub(crate) fn check_leader_epoch(
        &self,
        topic: &str,
        partition: i32,
        current_leader_epoch: i32,
    ) -> Result<i32, PartitionError> {
        self.check_group_leader_epoch(
            self.partition_group_of(topic, partition),
            current_leader_epoch,
        )
    }

    /// `check_leader_epoch` of a partition whose group (`partition_group_of`) is known.
    pub(crate) fn check_group_leader_epoch(
        &self,
        group: Option<u64>,
        current_leader_epoch: i32,
    ) -> Result<i32, PartitionError> {
        let (leads, epoch) = match group {
            None => (true, 0),
            Some(group) => {
                let groups = self.partition_groups().ok_or(PartitionError::NotLeaderOrFollower)?;
                let hosted = groups.host.with_group(group, |g| (g.is_leader(), g.term()));
                let (leads, term) = hosted.ok_or(PartitionError::NotLeaderOrFollower)?;
                (leads, leader_epoch_of_term(term))
            }
        };
        match current_leader_epoch {
            -1 => {}
            requested if requested > epoch => return Err(PartitionError::UnknownLeaderEpoch),
            requested if requested < epoch => return Err(PartitionError::FencedLeaderEpoch),
            _ => {}
        }
        if !leads {
            return Err(PartitionError::NotLeaderOrFollower);
        }
        Ok(epoch)
    }

    /// The partition groups of this shard, if this replica leads `group`; else
    /// NOT_LEADER_OR_FOLLOWER (a follower's answer to a produce or a marker).
    pub(crate) fn leading(&self, group: u64) -> Result<Rc<PartitionGroups>, PartitionError> {
        let groups = self.partition_groups().ok_or(PartitionError::NotLeaderOrFollower)?;
        match groups.leads(group) {
            true => Ok(groups),
            false => Err(PartitionError::NotLeaderOrFollower),
        }
    }

    /// A produce to a replicated partition (`group` its group) on the shard that hosts the
    /// group: validated and proposed here if this replica leads, answered once the entry
    /// applied here (invariant 5), or for acks=1 (`acks` other than -1) once the leader's
    /// own write of it is durable when its offset is known then (`crate::leader_acks`).
    pub(crate) fn produce_replicated(
        self: &Rc<Self>,
        group: u64,
        topic: &str,
        partition: i32,
        records: Bytes,
        acks: i16,
    ) -> ProduceWait {
        let proposed = self.propose_produce(group, topic, partition, records, acks);
        let shard = self.clone();
        Box::pin(async move {
            let queued = proposed?.wait().await?;
            Ok(shard.answer_of(&queued)) // invariant 5
        })
    }

    fn propose_produce(
        &self,
        group: u64,
        topic: &str,
        partition: i32,
        records: Bytes,
        acks: i16,
    ) -> Result<Proposed, PartitionError> {
        let groups = self.leading(group)?;
        let (entry, partition_id, appends, answered_time) = {
            let table = self.table_ref();
            let meta = table.topic(topic).ok_or(PartitionError::UnknownTopicOrPartition)?;
            let partition_id =
                meta.partition_id(partition).ok_or(PartitionError::UnknownTopicOrPartition)?;
            let policy = ProducePolicy::of(meta, self.config.max_message_bytes);
            // A transactional batch was verified with its coordinator before it got here
            // (`produce_local`, `txn::verify`); its transaction opens on every replica
            // when they apply the entry (`append_produced`).
            let batches = validate_batches(topic, partition, &policy, &records)?;
            let now_ms = crate::producer_log::wall_ms();
            let entry = ProduceEntry {
                topic_id: meta.topic_id,
                partition,
                table_version: table.version,
                log_append_time_ms: now_ms,
                records,
            };
            let answered_time = if policy.log_append_time { now_ms } else { -1 };
            (entry, partition_id, leader_acks::plain_records(&batches), answered_time)
        };
        let mut proposed = groups.propose_answered(group, entry.encode())?;
        let (index, term) = (proposed.index, proposed.term);
        // Where the entry will apply, if known (`crate::leader_acks` invariant 2). Nothing
        // applied meanwhile: proposing only hands committed entries to the applier task.
        let standing = groups.standing(group, term);
        let log_end = self.log.partition_info(partition_id).map(|info| info.log_end_offset);
        let base = appends.and(log_end).and_then(|log_end| {
            groups.leader_acks.next_offset(group, &standing, partition_id, log_end)
        });
        let end = base.zip(appends).map(|(base, n)| base + n);
        groups.leader_acks.note_proposed(group, term, index, partition_id, end);
        if let (Some(base), true) = (base, end.is_some() && acks != -1) {
            let durable = groups.leader_acks.wait_durable(group, index, term, base);
            proposed.early = Some((Queued::predicted(partition_id, base, answered_time), durable));
        }
        Ok(proposed)
    }

    /// Proposes a transaction's COMMIT/ABORT marker for a replicated partition (`group` its
    /// group) on the shard that hosts the group, if this replica leads: the entry's index
    /// and where its apply answers (`Proposed::wait`). A replica that does not lead is
    /// NOT_LEADER_OR_FOLLOWER, and the coordinator tries again (docs/transactions.md,
    /// "Replicated partitions").
    pub(crate) fn propose_txn_marker(
        &self,
        group: u64,
        topic: &str,
        partition: i32,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
    ) -> Result<Proposed, PartitionError> {
        let groups = self.leading(group)?;
        let (entry, partition_id) = {
            let table = self.table_ref();
            let meta = table.topic(topic).ok_or(PartitionError::UnknownTopicOrPartition)?;
            let partition_id =
                meta.partition_id(partition).ok_or(PartitionError::UnknownTopicOrPartition)?;
            let entry = TxnMarkerEntry {
                topic_id: meta.topic_id,
                partition,
                table_version: table.version,
                producer_id,
                producer_epoch,
                commit,
                timestamp_ms: crate::producer_log::wall_ms(),
            };
            (entry, partition_id)
        };
        let proposed = groups.propose_answered(group, entry.encode())?;
        // A marker's effect on the next offset is left to its apply (`leader_acks`).
        let (index, term) = (proposed.index, proposed.term);
        groups.leader_acks.note_proposed(group, term, index, partition_id, None);
        Ok(proposed)
    }

    /// `propose_txn_marker`, then its wait.
    pub(crate) async fn replicated_txn_marker(
        &self,
        group: u64,
        topic: &str,
        partition: i32,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
    ) -> Result<(), PartitionError> {
        self.propose_txn_marker(group, topic, partition, producer_id, producer_epoch, commit)?
            .wait()
            .await
            .map(|_| ())
    }

    /// Applies a committed transaction marker entry (invariants 1 and 2), on every replica
    /// alike: the control batch at the partition's next offset in the entry's term, then
    /// the partition's transaction state and producer state, as a marker on one node
    /// (`queue_txn_marker`). None: applied before the restart.
    async fn apply_txn_marker(
        &self,
        groups: &PartitionGroups,
        group: u64,
        entry: &Entry,
        marker: &TxnMarkerEntry,
    ) -> Option<Applied> {
        while self.table_ref().version < marker.table_version {
            glommio::timer::sleep(TABLE_WAIT_POLL).await; // invariant 2
        }
        let partition_id = {
            let table = self.table_ref();
            let meta = table.topic_by_id(marker.topic_id);
            match meta.and_then(|meta| meta.partition_id(marker.partition)) {
                Some(id) => id,
                None => return Some(Err(PartitionError::UnknownTopicOrPartition)),
            }
        };
        let next_offset = |p: PartitionId| self.log.partition_info(p).map(|i| i.log_end_offset);
        let markers = groups.markers.borrow();
        if applied_before_restart(markers.get(&group), entry.index, next_offset) {
            return None;
        }
        drop(markers);
        let (producer_id, epoch, commit) =
            (marker.producer_id, marker.producer_epoch, marker.commit);
        let batch = control_batch(producer_id, epoch, commit, marker.timestamp_ms);
        let header = RecordBatchHeader::parse_unvalidated(&batch).expect("a control batch");
        self.ensure_txn_stream();
        // The applied copy's flush rides the next raft write's (invariant 6).
        let appended = self.log.deferring_flush(|| {
            self.append_applying_marker(group, entry.index, partition_id).and_then(|()| {
                let epoch = Some(leader_epoch_of_term(entry.term));
                let batches = [(header, batch)];
                self.log
                    .append_batches_in_epoch(partition_id, epoch, &batches)
                    .map_err(append_error)
            })
        });
        let appended = match appended {
            Ok(appended) => appended,
            Err(e) => {
                if let PartitionError::Storage(why) = &e {
                    self.unstorable_committed_entry(group, entry.index, why);
                }
                return Some(Err(e));
            }
        };
        self.forget_txn_verification(partition_id, producer_id);
        let mut partitions = self.txn.partitions.borrow_mut();
        let state = partitions.entry(partition_id).or_default();
        state.on_appended(BatchKind::Marker { commit }, producer_id, appended.base_offset, false);
        drop(partitions);
        let at = marker.timestamp_ms;
        self.producers.borrow_mut().note_marker(partition_id, producer_id, epoch, at);
        Some(Ok(Queued::marker(partition_id, appended.base_offset, appended.durable)))
    }

    /// Applies one committed entry of a partition group (invariants 1 and 2): the append's
    /// result, or None when there is nothing to answer (an empty entry of a new leader,
    /// an entry applied before the restart).
    async fn apply_partition_entry(
        &self,
        groups: &PartitionGroups,
        group: u64,
        entry: &Entry,
    ) -> Option<Applied> {
        if entry.data.is_empty() {
            return None;
        }
        let decoded = PartitionEntry::decode(&entry.data).unwrap_or_else(|e| {
            // Every replica writes the formats it reads: a committed entry that does not
            // decode is a bug (or a node of a newer version), never to be guessed at.
            let index = entry.index;
            tracing::error!(group, index, error = %e, "a partition group entry does not decode");
            crate::runtime::exit_process(crate::runtime::SHARD_STOPPED_EXIT_CODE);
        });
        let produce = match decoded {
            PartitionEntry::Produce(produce) => produce,
            PartitionEntry::Offsets(change) => {
                let applied = self.apply_offsets_change(group, entry.index, &change);
                groups.resolve_offsets(group, entry.index, entry.term, applied);
                return None;
            }
            PartitionEntry::TxnState(change) => {
                let applied = self.apply_txn_state_change(group, entry.index, &change);
                groups.resolve_offsets(group, entry.index, entry.term, applied);
                return None;
            }
            PartitionEntry::Isr(isr) => {
                self.publish_isr(group, isr);
                return None;
            }
            PartitionEntry::LogStart(log_start) => {
                let applied = self.apply_log_start(group, entry.index, &log_start).await;
                groups.resolve_log_start(group, entry.index, entry.term, applied);
                return None;
            }
            PartitionEntry::TxnMarker(marker) => {
                return self.apply_txn_marker(groups, group, entry, &marker).await;
            }
            PartitionEntry::Compact { to } => {
                // Invariant 4: every entry up to `to` applied here before this one.
                groups.compact(group, to);
                return None;
            }
        };
        while self.table_ref().version < produce.table_version {
            // Invariant 2: the metadata group has not brought this node's table there yet.
            glommio::timer::sleep(TABLE_WAIT_POLL).await;
        }
        let table = self.table();
        let Some(meta) = table.topic_by_id(produce.topic_id) else {
            return Some(Err(PartitionError::UnknownTopicOrPartition)); // deleted since
        };
        let Some(partition_id) = meta.partition_id(produce.partition) else {
            return Some(Err(PartitionError::UnknownTopicOrPartition));
        };
        let next_offset = |p: PartitionId| self.log.partition_info(p).map(|i| i.log_end_offset);
        let markers = groups.markers.borrow();
        if applied_before_restart(markers.get(&group), entry.index, next_offset) {
            return None;
        }
        drop(markers);
        let policy = ProducePolicy::of(meta, self.config.max_message_bytes);
        let batches = match split_batches(&produce.records) {
            Ok(batches) => batches,
            Err(e) => return Some(Err(PartitionError::CorruptMessage(format!("{e:?}")))),
        };
        let time = if policy.log_append_time { produce.log_append_time_ms } else { -1 };
        // Every replica applies the entry in its term: the copies stay identical.
        let applying = Some((group, entry.index, leader_epoch_of_term(entry.term)));
        // The applied copy's flush rides the next raft write's (invariant 6).
        let applied = self.log.deferring_flush(|| {
            self.append_produced(meta, partition_id, &policy, batches, time, applying)
        });
        if let Err(PartitionError::Storage(e)) = &applied {
            // Every other refusal is decided by what every replica holds alike (sequence
            // checks, the table); a committed entry this replica cannot store would make
            // its copy differ from the others' from here on: stop instead, unless the log
            // refused it because the shard is shutting down (the entry applies at restart).
            self.unstorable_committed_entry(group, entry.index, e);
        }
        Some(applied)
    }

    /// A committed entry of raft group `group` that this replica's log refused: the
    /// broker stops (exit 70), since skipping it would leave this replica's state behind
    /// every later entry, except while the shard shuts down (its log closing: `GroupHost::
    /// stop` stopped the groups, and the applier finishes what it was handed), when the
    /// entry is applied again at restart (the applying markers say it was not).
    pub(crate) fn unstorable_committed_entry(&self, group: u64, index: u64, error: &str) {
        if self.log.is_closing() {
            tracing::debug!(
                group,
                index,
                "a committed entry is left for the restart: shutting down"
            );
            return;
        }
        tracing::error!(group, index, error, "a committed entry could not be stored: stopping");
        crate::runtime::exit_process(crate::runtime::SHARD_STOPPED_EXIT_CODE);
    }

    /// A replicated partition's leader as this shard knows it (Metadata).
    pub fn partition_leader(&self, group: u64) -> GroupLeader {
        self.partition_leaders.borrow().get(&group).copied().unwrap_or((None, 0))
    }

    /// Records a group's leader (`ShardRequest::PartitionLeader`, or this shard's own).
    pub fn set_partition_leader(&self, group: u64, leader: GroupLeader) {
        self.partition_leaders.borrow_mut().insert(group, leader);
    }
}

/// A raft term as a Kafka leader epoch (an i32; Metadata reports the same).
pub(crate) fn leader_epoch_of_term(term: u64) -> i32 {
    term.min(i32::MAX as u64) as i32
}

/// Applies what the groups commit, each group's entries in index order (invariant 1).
async fn apply_committed(
    shard: Rc<Shard>,
    groups: Rc<PartitionGroups>,
    committed: LocalReceiver<Committed>,
) {
    while let Some((group, entries, outcomes)) = committed.recv().await {
        for entry in entries {
            groups.applying.set(Some(group));
            let applied = shard.apply_partition_entry(&groups, group, &entry).await;
            groups.applied_indexes.borrow_mut().insert(group, entry.index);
            groups.applying.set(None);
            let applied = applied.unwrap_or(Err(PartitionError::NotLeaderOrFollower));
            groups.leader_acks.applied(group, entry.index, entry.term, &applied);
            groups.resolve(group, entry.index, entry.term, applied);
            groups.applied_terms.borrow_mut().insert(group, entry.term);
        }
        for outcome in outcomes {
            if let Outcome::Abandoned(proposal) = outcome {
                let lost = Err(PartitionError::NotLeaderOrFollower);
                groups.resolve(group, proposal.index, proposal.term, lost);
                let lost = Err(GroupError::NotCoordinator);
                groups.resolve_offsets(group, proposal.index, proposal.term, lost);
                let lost = Err(PartitionError::NotLeaderOrFollower);
                groups.resolve_log_start(group, proposal.index, proposal.term, lost);
            }
        }
    }
}

/// Every TICK: publishes leaders, proposes compactions, writes a stream snapshot when due
/// (module docs).
async fn every_tick(shard: Rc<Shard>, groups: Rc<PartitionGroups>) {
    loop {
        glommio::timer::sleep(TICK).await;
        if shard.log.is_closing() {
            return; // shutting down: the host is stopped, the log takes nothing more
        }
        publish_leaders(&shard, &groups);
        shard.exchange_leader_notices(&groups);
        propose_isr_changes(&shard, &groups);
        shard.follow_offsets_leadership(&groups);
        propose_compactions(&groups);
        shard.refresh_partition_manifests(&groups);
        shard.snapshot_stream_if_due(&groups);
        shard.balance_leaders(&groups);
    }
}

/// Proposes, in each group this replica leads, a compaction up to what every voter has,
/// once that is `COMPACT_AFTER_ENTRIES` or `COMPACT_AFTER_BYTES` past the log's snapshot
/// point and no earlier compaction of this term is still uncommitted (invariant 4).
fn propose_compactions(groups: &PartitionGroups) {
    let mut hosted: Vec<u64> = groups.groups.borrow().keys().copied().collect();
    // The metadata group (shard 0) compacts alike: its applier compacts on the same entry
    // (`metadata_group` invariant 3).
    if groups.host.with_group(METADATA_GROUP, |_| ()).is_some() {
        hosted.push(METADATA_GROUP);
    }
    for group in hosted {
        let proposed = groups.compactions_proposed.borrow().get(&group).copied();
        let proposal = groups.host.with_group(group, |g| {
            let to = g.compactable()?;
            let in_flight =
                proposed.is_some_and(|p| p.term == g.term() && g.commit_index() < p.index);
            let log = g.log();
            let compactable = &log.entries[..to.saturating_sub(log.snapshot_index) as usize];
            let bytes: u64 = compactable.iter().map(|e| e.data.len() as u64).sum();
            let due =
                compactable.len() as u64 >= COMPACT_AFTER_ENTRIES || bytes >= COMPACT_AFTER_BYTES;
            if in_flight || !due {
                return None;
            }
            g.propose(PartitionEntry::encode_compact(to)).ok()
        });
        if let Some(Some(proposal)) = proposal {
            groups.compactions_proposed.borrow_mut().insert(group, proposal);
        }
    }
}

impl Shard {
    /// Writes a stream snapshot of the shard's groups when the `Raft` stream grew enough
    /// since the last and the snapshot would be small enough (`STREAM_SNAPSHOT_BYTES`).
    /// Until then (a voter down holds compaction back) the stream keeps its entries, as
    /// it did before compaction existed. A snapshot the log refuses is counted and logged.
    fn snapshot_stream_if_due(&self, groups: &PartitionGroups) {
        let mut written = groups.stream_snapshot.borrow_mut();
        if written.as_ref().is_some_and(Durable::is_durable) {
            // Memory goes back now, not at the next checkpoint.
            self.log.forget_superseded_internal();
            *written = None;
        }
        drop(written);
        let grown = self.log.internal_bytes_since_snapshot(InternalStream::Raft);
        if grown < STREAM_SNAPSHOT_BYTES {
            return;
        }
        // The encoding's size, to within each group's fixed fields (no copy: while a voter
        // is down the images are large and this is all a tick does).
        let size = |image: &LogImage| 128 + image.entry_bytes() + 25 * image.entries.len() as u64;
        let recovered_size: u64 = groups.recovered.borrow().values().map(size).sum();
        let estimate = recovered_size
            + groups.host.with_logs(|logs| logs.iter().map(|(_, log)| size(log)).sum::<u64>());
        if estimate > grown / 2 || estimate > self.log.segment_size_bytes() / 2 {
            return;
        }
        let payload = groups.host.with_logs(|hosted| {
            let mut recovered = groups.recovered.borrow_mut();
            recovered.retain(|id, _| !hosted.iter().any(|(h, _)| h == id));
            let images = hosted.iter().copied().chain(recovered.iter().map(|(id, i)| (*id, i)));
            persist::encode_stream_snapshot(images, groups.markers.borrow().values())
        });
        let bytes = payload.len() as u64;
        match persist::append_stream_snapshot(&self.log, &payload) {
            Ok(durable) => {
                *groups.stream_snapshot.borrow_mut() = Some(durable);
                groups.count(|s| s.stream_snapshots += 1);
            }
            Err(error) => {
                tracing::warn!(
                    shard = self.id,
                    bytes,
                    ?error,
                    "a raft stream snapshot was refused"
                );
                groups.count(|s| s.stream_snapshot_failures += 1);
            }
        }
    }
}

/// In each group this replica leads, notes the voters caught up since the last tick and
/// proposes an ISR entry when the ISR differs from the one applied (module docs).
fn propose_isr_changes(shard: &Shard, groups: &PartitionGroups) {
    let now = Instant::now();
    let lag = shard.config.replica_lag_time_max;
    let hosted = groups.hosted_groups();
    let mut in_sync = groups.in_sync.borrow_mut();
    for (group, replicas) in hosted {
        let view = groups.host.with_group(group, |g| {
            Some((g.term(), g.last_index(), g.commit_index(), g.progress()?))
        });
        let Some(Some((term, last_index, commit_index, progress))) = view else {
            in_sync.remove(&group); // not leading it
            continue;
        };
        let applied = shard.partition_isr(group).unwrap_or_else(|| replicas.clone());
        let state = in_sync.entry(group).or_insert_with(|| InSync::new(term, &applied, now));
        if state.term != term {
            *state = InSync::new(term, &applied, now);
        }
        for (id, matched, recent_active) in progress {
            let Some(node) = node_of(id) else { continue };
            if recent_active && matched >= state.last_index {
                state.caught_up_at.insert(node as u32, now);
            }
        }
        state.last_index = last_index;
        let caught_up = |n: &&u32| state.caught_up_at.get(n).is_some_and(|t| now - *t <= lag);
        let isr: Vec<u32> = replicas.iter().filter(caught_up).copied().collect();
        let in_flight = state.proposed.is_some_and(|p| p.term == term && commit_index < p.index);
        if isr == applied || isr.is_empty() || in_flight {
            continue;
        }
        let entry = PartitionEntry::encode_isr(&isr);
        if let Some(Ok(proposal)) = groups.host.with_group(group, |g| g.propose(entry)) {
            tracing::info!(group = format!("{group:#x}"), ?isr, "ISR change proposed");
            state.proposed = Some(proposal);
        }
    }
}

impl InSync {
    /// A new leadership: the applied ISR's voters count as caught up now.
    fn new(term: u64, applied: &[u32], now: Instant) -> InSync {
        let caught_up_at = applied.iter().map(|n| (*n, now)).collect();
        InSync { term, since: now, last_index: 0, caught_up_at, proposed: None }
    }
}

impl Shard {
    /// A replicated partition group's ISR as this shard knows it (node ids, ascending);
    /// None while no ISR entry was applied: every replica is in sync.
    pub fn partition_isr(&self, group: u64) -> Option<Vec<u32>> {
        self.partition_isrs.borrow().get(&group).cloned()
    }

    /// Partitions of this shard whose group this replica leads and whose applied ISR is
    /// smaller than their replica set (`/metrics`). Walks the table only when such a group
    /// exists (rare: a replica down or behind), so a scrape costs a pass over the groups.
    pub fn under_replicated_partitions(&self) -> u64 {
        let Some(groups) = self.partition_groups() else { return 0 };
        let hosted: Vec<(u64, usize)> =
            groups.groups.borrow().iter().map(|(g, r)| (*g, r.len())).collect();
        let short: Vec<u64> = hosted
            .into_iter()
            .filter(|(g, replicas)| {
                groups.leads(*g) && self.partition_isr(*g).is_some_and(|isr| isr.len() < *replicas)
            })
            .map(|(g, _)| g)
            .collect();
        if short.is_empty() {
            return 0;
        }
        let table = self.table_ref();
        let mut count = 0;
        for meta in table.topics.values() {
            for index in self.partitions_here(meta) {
                let group = self.replicated(meta, index as i32).map(|(g, _)| g);
                count += u64::from(group.is_some_and(|g| short.contains(&g)));
            }
        }
        count
    }

    /// NOT_ENOUGH_REPLICAS for an acks=all produce while the partition has fewer in-sync
    /// replicas than its topic's min.insync.replicas (a partition of one replica has one).
    pub(crate) fn check_min_insync(
        &self,
        topic: &str,
        partition: i32,
    ) -> Result<(), PartitionError> {
        let table = self.table_ref();
        let Some(meta) = table.topic(topic) else { return Ok(()) }; // answered by the produce
                                                                    // Only an explicit setting can ask for more than the default (1): no walk of the
                                                                    // config definitions on every acks=all produce.
        let explicit = meta.explicit_config("min.insync.replicas");
        let min = explicit.and_then(|v| v.parse::<i64>().ok()).unwrap_or(1);
        if min <= 1 {
            return Ok(());
        }
        let in_sync = match self.replicated(meta, partition) {
            Some((group, replicas)) => {
                self.partition_isr(group).map_or(replicas.len(), |i| i.len())
            }
            None => 1,
        };
        if (in_sync as i64) < min {
            return Err(PartitionError::NotEnoughReplicas(format!(
                "{topic}-{partition} has {in_sync} in-sync replicas, min.insync.replicas is {min}"
            )));
        }
        Ok(())
    }

    /// Records an applied ISR entry of `group` here and on the node's other shards.
    pub(crate) fn publish_isr(&self, group: u64, isr: Vec<u32>) {
        if self.partition_isrs.borrow().get(&group) == Some(&isr) {
            return;
        }
        self.partition_isrs.borrow_mut().insert(group, isr.clone());
        tell_other_shards(self, || ShardRequest::PartitionIsr { group, isr: isr.clone() });
    }
}

/// Sends a partition group notice (`PartitionLeader`, `PartitionIsr`) to the node's other
/// shards, without waiting for their answers.
pub(crate) fn tell_other_shards(shard: &Shard, notice: impl Fn() -> ShardRequest) {
    for to in (0..shard.nr_shards).filter(|s| *s != shard.id) {
        let (mesh, request) = (shard.mesh.clone(), notice());
        glommio::spawn_local(async move {
            match mesh.call(to, request).await {
                ShardReply::PartitionLeader | ShardReply::PartitionIsr => {}
                other => panic!("a partition group notice answered with {other:?}"),
            }
        })
        .detach();
    }
}

/// Sends each hosted group's (leader, term) to the node's shards when it changed (module
/// docs).
fn publish_leaders(shard: &Rc<Shard>, groups: &PartitionGroups) {
    let hosted: Vec<u64> = groups.groups.borrow().keys().copied().collect();
    for group in hosted {
        let Some(now) = groups.host.with_group(group, |g| {
            let leader = g.leader_id().and_then(node_of).map(|n| n as u32);
            (leader, g.term())
        }) else {
            continue;
        };
        if groups.published.borrow_mut().insert(group, now) == Some(now) {
            continue;
        }
        shard.set_partition_leader(group, now);
        let (leader, term) = now;
        tell_other_shards(shard, || ShardRequest::PartitionLeader { group, leader, term });
    }
}
