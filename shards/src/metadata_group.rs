//! The metadata raft group: the cluster's topic table (topics, placement, configs, ACLs,
//! SCRAM users) as one raft group of every node, on each node's shard 0
//! (docs/replication.md, "Metadata is a raft group"). Only when `--peers` names other
//! nodes; a single node keeps the controller of `controller.rs` alone.
//!
//! - The controller is the group's leader. A request is validated there against its table,
//!   its change record (`metadata_log::ChangeRecord`, the bytes the metadata log already
//!   holds) proposed as one raft entry, and answered once the entry is committed and
//!   applied on that node. A node that does not lead answers NOT_CONTROLLER (also when no
//!   leader is known, or the leader stepped down before the entry committed, or it did not
//!   commit within `COMMIT_WAIT`): Kafka clients refresh their metadata and try again at the
//!   controller.
//! - Every node applies the committed entries in index order, one task (`apply_committed`),
//!   through the same path as a single node's controller: the record appended to its own
//!   metadata log and fdatasync'd, then published to its shards (`persist_and_publish`).
//!   That task is the only writer of the node's metadata log in a cluster, so it also
//!   writes the table's snapshots, between two records (`metadata_log` invariant 1
//!   without the controller lock).
//! - The group's raft writes are entries of shard 0's log (`replication::persist`),
//!   replayed at start-up; the group restarts with applied index 0, so raft hands every
//!   committed entry out again.
//!
//! Runs on shard 0 only. Not a hot path: one entry per answered metadata request.
//!
//! Invariants:
//! 1. Applying is idempotent by table version: a record applies only to the table
//!    version it names (`base_version`), and is skipped otherwise. A record committed
//!    after the table moved past its base (already applied before a restart, or proposed
//!    by a leader whose table was stale) is skipped on every node alike, because every
//!    node applies the same committed entries in the same order from the same empty table,
//!    and a restarted node's restored table is the table after a prefix of them (a
//!    proposal's base is the version after a prefix of the log before it, so a record
//!    skipped once is skipped again). Nothing but the table itself needs persisting to
//!    apply each record exactly once.
//! 2. A request is answered Ok only once its own entry (index and term) applied on this
//!    node; an entry of another term at its index, a skipped record, a leader that
//!    stepped down, or the wait's end answers NOT_CONTROLLER.
//! 3. Log compaction as for partition groups (`partition_group` invariant 4,
//!    docs/replication.md "Log compaction"): the leader proposes a compaction entry (the
//!    partition groups' format, `PartitionEntry::encode_compact`: its first byte, 1, is
//!    never a change record's in the group, whose version byte is 5) up to what every
//!    voter has; every node compacts when its applier reaches it, so every entry before
//!    it is in the node's metadata log, fdatasync'd. A restarted node's table is then the
//!    table after a prefix at least as long as the compacted one, and the entries after
//!    the compaction point are skipped by version where they applied before (invariant 1).
//! 4. Metadata snapshots (docs/replication.md, "Metadata snapshots"): the group's image
//!    keeps, as its snapshot data, the table (`TopicTable::encode`, the metadata log's
//!    snapshot format) as of its compaction point or later: set when the applier compacts
//!    and at start-up, so the leader can send it to a voter the log was compacted past
//!    (one that lost its data dir). That voter's applier installs it before any later
//!    entry: only if its version is above its own table's (the same rule as invariant 1,
//!    so a table later than the snapshot's index is as good as the one at it), as a
//!    snapshot in its metadata log, fdatasync'd, then published to its shards. A node
//!    that crashed after the snapshot's raft write was durable and before the install was
//!    installs it at start-up (its image carries the data).

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

use futures_lite::FutureExt;
use glommio::channels::local_channel::{self, LocalReceiver, LocalSender};
use shardlog_storage::{InternalEntry, InternalStream};
use tracing::info;

use crate::controller::CONTROLLER_SHARD;
use crate::error::TopicError;
use crate::metadata::TopicTable;
use crate::metadata_log::ChangeRecord;
use crate::replication::partition::PartitionEntry;
use crate::replication::persist::{self, ShardLogSink};
use crate::replication::{
    node_of, raft_id, Entry, GroupConfig, GroupHost, LogImage, Outcome, ProposeError, RaftGroup,
    Snapshot,
};
use crate::shard::Shard;

/// The raft group id of the metadata group, reserved: partition groups take ids with the
/// top bit set (`replication::partition::partition_group_id`), never this one.
pub const METADATA_GROUP: u64 = 0;

/// How long a request waits for its entry to commit and apply before it is answered
/// NOT_CONTROLLER (the leader lost its quorum): a few elections' worth (1-2 s each at
/// the broker's tick), below librdkafka's default request timeout (30 s).
pub const COMMIT_WAIT: Duration = Duration::from_secs(10);

/// What became of a proposal (invariant 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Applied {
    /// Its record applied here.
    Yes,
    /// Its record was skipped (the table moved past its base version).
    Skipped,
    /// Another entry took its index, or its leader stepped down before it committed.
    Lost,
}

/// What the applier gets from the group, in order.
enum ToApply {
    /// Committed entries and this node's proposals' outcomes.
    Committed(Vec<Entry>, Vec<Outcome>),
    /// A snapshot from the leader, before the entries after it (invariant 4).
    Snapshot(Snapshot),
}

/// Shard 0's handle on the metadata group.
pub struct MetadataGroup {
    host: Rc<GroupHost>,
    /// Proposals of this node waiting for their entry: index -> (term, where to say).
    waiters: RefCell<BTreeMap<u64, (u64, LocalSender<Applied>)>>,
    /// The last index applied here (the applier's progress).
    applied_index: Cell<u64>,
}

impl MetadataGroup {
    /// The node that leads the group (the controller), if one is known.
    pub fn leader_node(&self) -> Option<u64> {
        self.host.with_group(METADATA_GROUP, |g| g.leader_id()).flatten().and_then(node_of)
    }

    /// The last raft index applied on this node.
    pub fn applied_index(&self) -> u64 {
        self.applied_index.get()
    }

    fn resolve(&self, index: u64, term: u64, applied: Applied) {
        let mut waiters = self.waiters.borrow_mut();
        if let Some((wanted_term, _)) = waiters.get(&index) {
            let applied = if *wanted_term == term { applied } else { Applied::Lost };
            let (_, sender) = waiters.remove(&index).expect("just found");
            // The request may have stopped waiting (`COMMIT_WAIT`).
            let _ = sender.try_send(applied);
        }
    }
}

/// The group's durable image from the recovered internal entries of shard 0 (its `Raft`
/// stream), or a new one of `nodes` (every node's id) on a fresh data dir.
pub fn recover_image(recovered: &[InternalEntry], nodes: &[u32]) -> Result<LogImage, String> {
    let voters: Vec<u64> = nodes.iter().map(|n| raft_id(*n as u64)).collect();
    let mut images = persist::replay(recovered, |_| LogImage::new(&voters))
        .map_err(|e| format!("the metadata group's raft log: {e}"))?;
    // Partition groups' ids have the top bit set (`replication::partition_group_id`).
    let unknown = |g: &u64| *g != METADATA_GROUP && *g >> 63 == 0;
    if let Some(group) = images.keys().find(|g| unknown(g)) {
        return Err(format!("shard 0's raft log holds raft group {group}, unknown here"));
    }
    Ok(images.remove(&METADATA_GROUP).unwrap_or_else(|| LogImage::new(&voters)))
}

impl Shard {
    /// Starts the metadata group on shard 0 (`host` is the shard's replication host) from
    /// its recovered image, and the task that applies what it commits.
    pub fn start_metadata_group(
        self: &Rc<Self>,
        host: Rc<GroupHost>,
        image: LogImage,
    ) -> Result<(), String> {
        assert_eq!(self.id, CONTROLLER_SHARD);
        // Invariant 1 needs every node's table to start empty: a table with changes but no
        // group log was written by a single node (whose records never went through the
        // group), and applying the cluster's records over it would diverge unseen. A node
        // of the cluster always has its group log: a checkpoint carries the Raft stream.
        let version = self.table_ref().version;
        if version > 0 && image.last_index() == 0 {
            return Err(format!(
                "the data dir holds a topic table (version {version}) changed outside the \
                 metadata group, by a single node: a node joins a cluster with an empty data \
                 dir (docs/replication.md)"
            ));
        }
        let mut config = GroupConfig::new(raft_id(self.config.node_id as u64));
        config.max_entry_bytes = persist::max_entry_bytes(self.log.max_internal_payload());
        // Applied index 0: every committed entry is handed out again, and skipped by
        // version where it applied before (invariant 1).
        let (to_apply_sender, to_apply) = local_channel::new_unbounded();
        let committed = Rc::new(to_apply_sender);
        // Invariant 4: a snapshot the image holds is installed first, if the metadata log
        // lacks it (a crash between the two); otherwise the image keeps the table
        // restored here, which is as of its compaction point or later (invariant 3).
        let mut image = image;
        match image.snapshot_to_send() {
            Some(snapshot) => {
                let _ = committed.try_send(ToApply::Snapshot(snapshot));
            }
            None if image.snapshot_index > 0 => {
                image.snapshot_data = self.table_ref().encode().into();
            }
            None => {}
        }
        let group = RaftGroup::recover(&config, image, 0)?;
        let installs = committed.clone();
        let on_apply = Box::new(move |entries: Vec<Entry>, outcomes: Vec<Outcome>| {
            // Refused only once the applier ended (the shard is stopping).
            let _ = committed.try_send(ToApply::Committed(entries, outcomes));
        });
        let on_install = Box::new(move |snapshot: Snapshot| {
            let _ = installs.try_send(ToApply::Snapshot(snapshot));
        });
        let sink =
            ShardLogSink::new(self.log.clone(), METADATA_GROUP, on_apply).with_install(on_install);
        host.add_group(METADATA_GROUP, group, Box::new(sink)).map_err(|e| e.to_string())?;
        let metadata = Rc::new(MetadataGroup {
            host,
            waiters: RefCell::new(BTreeMap::new()),
            applied_index: Cell::new(0),
        });
        *self.metadata_group.borrow_mut() = Some(metadata.clone());
        glommio::spawn_local(apply_committed(self.clone(), metadata, to_apply)).detach();
        Ok(())
    }

    /// Shard 0's metadata group, when the node has peers.
    pub fn metadata_group(&self) -> Option<Rc<MetadataGroup>> {
        self.metadata_group.borrow().clone()
    }

    /// The node leading the metadata group as shard 0 knows it, from any shard: `Ok(None)`
    /// when none is known, `Err(())` on a single node (it is its own controller).
    pub async fn controller_node(&self) -> Result<Option<u64>, ()> {
        if self.config.nodes.len() < 2 {
            return Err(());
        }
        if self.id == CONTROLLER_SHARD {
            return Ok(self.metadata_group().and_then(|g| g.leader_node()));
        }
        match self.mesh.call(CONTROLLER_SHARD, crate::message::ShardRequest::ControllerNode).await {
            crate::message::ShardReply::ControllerNode(node) => Ok(node),
            other => panic!("controller node answered with {other:?}"),
        }
    }

    /// NOT_CONTROLLER unless this node leads the metadata group (a cluster's check before
    /// a request is answered); Ok on a single node.
    pub(crate) fn check_controller(&self) -> Result<(), TopicError> {
        let Some(group) = self.metadata_group() else { return Ok(()) };
        let own = self.config.node_id as u64;
        match group.leader_node() {
            Some(node) if node == own => Ok(()),
            Some(node) => Err(not_controller(format!(
                "node {own} is not the controller: node {node} leads the metadata group"
            ))),
            None => Err(not_controller(format!(
                "node {own} is not the controller: no controller is elected yet"
            ))),
        }
    }

    /// Proposes `record` to the metadata group and waits until it applied here
    /// (invariant 2). Called under the controller lock, on the leader.
    pub(crate) async fn propose_change(
        self: &Rc<Self>,
        group: &MetadataGroup,
        record: ChangeRecord,
    ) -> Result<(), TopicError> {
        let proposed = group.host.with_group(METADATA_GROUP, |g| g.propose(record.encode()));
        let proposal = match proposed.expect("shard 0 hosts the metadata group") {
            Ok(proposal) => proposal,
            Err(ProposeError::NotLeader { .. }) => {
                let moved = || not_controller("the controller moved; try again".into());
                return Err(self.check_controller().err().unwrap_or_else(moved));
            }
            Err(ProposeError::Dropped) => {
                return Err(not_controller("the metadata group refused the proposal".into()))
            }
            Err(ProposeError::TooLarge { size, max }) => {
                let why = format!("the change is {size} bytes; one metadata log entry holds {max}");
                return Err(TopicError::InvalidRequest(why));
            }
        };
        let (sender, receiver) = local_channel::new_bounded(1);
        group.waiters.borrow_mut().insert(proposal.index, (proposal.term, sender));
        let applied = async { receiver.recv().await }
            .or(async {
                glommio::timer::sleep(COMMIT_WAIT).await;
                None
            })
            .await;
        group.waiters.borrow_mut().remove(&proposal.index);
        match applied {
            Some(Applied::Yes) => Ok(()),
            Some(Applied::Skipped) => Err(not_controller(
                "the topic table changed under this request (a new controller); try again".into(),
            )),
            Some(Applied::Lost) => Err(not_controller(
                "the controller stepped down before the change committed; try again".into(),
            )),
            None => Err(not_controller(format!(
                "the change did not commit within {COMMIT_WAIT:?} (no quorum?); try again"
            ))),
        }
    }

    /// Applies one committed entry of the metadata group (invariant 1); whether its
    /// record applied.
    async fn apply_metadata_entry(self: &Rc<Self>, entry: &Entry) -> Applied {
        if entry.data.is_empty() {
            return Applied::Skipped; // a new leader's empty entry
        }
        if let Ok(PartitionEntry::Compact { to }) = PartitionEntry::decode(&entry.data) {
            // Invariant 3: every entry up to `to` applied here before this one.
            if let Some(groups) = self.partition_groups() {
                groups.compact(METADATA_GROUP, to);
            }
            self.keep_metadata_snapshot().await;
            return Applied::Skipped;
        }
        let record = ChangeRecord::decode(&entry.data).unwrap_or_else(|e| {
            // Every node writes the formats it reads: a committed entry that does not
            // decode is a bug (or a node of a newer version), never to be guessed at.
            panic!("metadata group entry {} does not decode: {e}", entry.index)
        });
        if self.table_ref().version != record.base_version {
            return Applied::Skipped;
        }
        if let Err(e) = self.persist_and_publish(record).await {
            // Its log refused the record (it stopped, or the disk is full). Skipping it
            // would leave this node's table behind every later record: stop the broker,
            // as for any fatal storage error (unless the shard is shutting down); the
            // entry is applied again at restart.
            self.unstorable_committed_entry(METADATA_GROUP, entry.index, &e.to_string());
            return Applied::Skipped;
        }
        if self.metadata_snapshots.borrow().due(&self.config.metadata_snapshot) {
            self.write_metadata_snapshot().await;
        }
        Applied::Yes
    }
}

impl Shard {
    /// Invariant 4, the leader's side: the table as the group's snapshot data, after a
    /// compaction (the table is as of this entry, past the compaction point).
    async fn keep_metadata_snapshot(&self) {
        let table = self.table();
        let data = glommio::executor().spawn_blocking(move || table.encode()).await;
        let Some(group) = self.metadata_group() else { return };
        group.host.with_group(METADATA_GROUP, |g| g.set_snapshot_data(data.into()));
    }

    /// Invariant 4, the follower's side: installs the leader's table at `snapshot`'s
    /// index unless this node's table is there already.
    async fn install_metadata_snapshot(self: &Rc<Self>, snapshot: &Snapshot) {
        let index = snapshot.get_metadata().index;
        let table = TopicTable::decode(&snapshot.data).unwrap_or_else(|e| {
            // As for a committed record that does not decode (`apply_metadata_entry`).
            panic!("the metadata snapshot at {index} does not decode: {e}")
        });
        let (theirs, ours) = (table.version, self.table_ref().version);
        if theirs <= ours {
            info!(index, version = ours, "metadata snapshot not installed: the table is there");
            return;
        }
        let appended = self.log.append_internal(InternalStream::Metadata, true, &snapshot.data);
        let durable = match appended {
            Ok(durable) => durable,
            Err(e) => {
                self.unstorable_committed_entry(METADATA_GROUP, index, &format!("{e:?}"));
                return;
            }
        };
        if let Err(e) = durable.wait().await {
            self.fatal_storage_error(&e);
        }
        self.metadata_snapshots.borrow_mut().snapshot_taken(snapshot.data.len());
        self.publish_table(table).await;
        info!(index, from = ours, to = theirs, "metadata snapshot installed");
    }
}

/// Applies what the group commits, in index order, one entry at a time, and the leader's
/// snapshots before the entries after them.
async fn apply_committed(
    shard: Rc<Shard>,
    group: Rc<MetadataGroup>,
    to_apply: LocalReceiver<ToApply>,
) {
    while let Some(item) = to_apply.recv().await {
        let (entries, outcomes) = match item {
            ToApply::Committed(entries, outcomes) => (entries, outcomes),
            ToApply::Snapshot(snapshot) => {
                shard.install_metadata_snapshot(&snapshot).await;
                let index = snapshot.get_metadata().index;
                group.applied_index.set(group.applied_index.get().max(index));
                // Proposals at or below it: their fate is inside the snapshot, unknown here.
                let lost: Vec<(u64, u64)> = group
                    .waiters
                    .borrow()
                    .range(..=index)
                    .map(|(i, (term, _))| (*i, *term))
                    .collect();
                for (index, term) in lost {
                    group.resolve(index, term, Applied::Lost);
                }
                continue;
            }
        };
        for entry in entries {
            assert!(entry.index > group.applied_index.get(), "metadata entries out of order");
            let applied = shard.apply_metadata_entry(&entry).await;
            group.applied_index.set(entry.index);
            group.resolve(entry.index, entry.term, applied);
        }
        for outcome in outcomes {
            if let Outcome::Abandoned(proposal) = outcome {
                group.resolve(proposal.index, proposal.term, Applied::Lost);
            }
        }
    }
}

fn not_controller(why: String) -> TopicError {
    TopicError::NotController(why)
}
