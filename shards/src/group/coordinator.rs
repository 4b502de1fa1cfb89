//! The group coordinator of one shard: parks JoinGroup/SyncGroup requests, delivers the
//! state machine's answers, expires sessions, and persists committed offsets.
//!
//! Runs on the coordinator shard only. No `RefCell` borrow is held across an `.await`:
//! each operation borrows, steps the state machine, releases, then waits.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use glommio::channels::local_channel::{self, LocalSender};
use shardlog_storage::{Durable, InternalEntry, InternalStream};
use tracing::{info, warn};

use super::offsets::{Committed, GroupOffsets, OffsetList, OffsetLogEntry, SNAPSHOT_EVERY};
use super::state::{Effect, Group, GroupState, JoinOutcome, JoinRequest, Step};
use crate::error::GroupError;
use crate::shard::Shard;

/// Group settings (Kafka's names in the comments).
#[derive(Clone, Debug)]
pub struct GroupConfig {
    /// group.min.session.timeout.ms
    pub min_session_timeout_ms: u64,
    /// group.max.session.timeout.ms
    pub max_session_timeout_ms: u64,
    /// offsets.retention.minutes, in ms: offsets of a group that stayed Empty this long expire.
    pub offsets_retention_ms: i64,
    /// offset.metadata.max.bytes
    pub offset_metadata_max_bytes: usize,
    /// How often sessions and rebalance deadlines are checked.
    pub tick_interval: Duration,
}

impl Default for GroupConfig {
    fn default() -> Self {
        GroupConfig {
            min_session_timeout_ms: 6_000,
            max_session_timeout_ms: 1_800_000,
            offsets_retention_ms: 7 * 24 * 3600 * 1000,
            offset_metadata_max_bytes: 4096,
            tick_interval: Duration::from_millis(100),
        }
    }
}

/// One partition of an OffsetCommit.
#[derive(Clone, Debug)]
pub struct OffsetCommitPartition {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: Option<String>,
    /// The commit time the client stated (OffsetCommit v1), else the broker's clock.
    pub commit_time_ms: Option<i64>,
}

/// What ListGroups / DescribeGroups show of a group.
#[derive(Clone, Debug)]
pub struct GroupSummary {
    pub group_id: String,
    pub state: GroupState,
    pub protocol_type: String,
    pub protocol: String,
    /// (member id, instance id, client id, client host, metadata, assignment)
    pub members: Vec<(String, Option<String>, String, String, Bytes, Bytes)>,
}

type JoinWaiters = HashMap<(String, String), LocalSender<JoinOutcome>>;
type SyncWaiters = HashMap<(String, String), LocalSender<Result<Bytes, GroupError>>>;

/// Per-shard group state.
pub struct GroupCoordinator {
    pub config: GroupConfig,
    groups: RefCell<BTreeMap<String, Group>>,
    /// Committed offsets as answered: an entry is applied once it is durable.
    offsets: RefCell<BTreeMap<String, GroupOffsets>>,
    /// Committed offsets as the log holds them: every entry applied when it is appended,
    /// in log order. Snapshots are taken from this map, so a snapshot summarises exactly
    /// the entries before it in the log, whatever order their writers resume in.
    logged: RefCell<BTreeMap<String, GroupOffsets>>,
    /// Wall-clock ms when each group became Empty (for offset retention).
    empty_since: RefCell<HashMap<String, i64>>,
    join_waiters: RefCell<JoinWaiters>,
    sync_waiters: RefCell<SyncWaiters>,
    entries_since_snapshot: Cell<u64>,
    origin: Instant,
}

fn wall_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

impl GroupCoordinator {
    pub fn new(config: GroupConfig) -> GroupCoordinator {
        GroupCoordinator {
            config,
            groups: RefCell::new(BTreeMap::new()),
            offsets: RefCell::new(BTreeMap::new()),
            logged: RefCell::new(BTreeMap::new()),
            empty_since: RefCell::new(HashMap::new()),
            join_waiters: RefCell::new(HashMap::new()),
            sync_waiters: RefCell::new(HashMap::new()),
            entries_since_snapshot: Cell::new(0),
            origin: Instant::now(),
        }
    }

    fn now_ms(&self) -> u64 {
        self.origin.elapsed().as_millis() as u64
    }

    /// Records an entry just appended to the log (call in append order). Every
    /// `SNAPSHOT_EVERY` entries returns the encoded snapshot to append next: all committed
    /// offsets as of this entry, durable or not yet, since the snapshot follows them in
    /// the log.
    fn logged_entry(&self, entry: OffsetLogEntry) -> Option<Vec<u8>> {
        let mut logged = self.logged.borrow_mut();
        entry.apply(&mut logged);
        let written = self.entries_since_snapshot.get() + 1;
        if written < SNAPSHOT_EVERY {
            self.entries_since_snapshot.set(written);
            return None;
        }
        self.entries_since_snapshot.set(0);
        Some(OffsetLogEntry::snapshot(&logged).encode())
    }

    /// Every group's committed offsets as one `GroupOffsets` snapshot entry's payload (a
    /// partition snapshot's offsets image: docs/replication.md, "Partition snapshots").
    pub(crate) fn offsets_image(&self) -> Vec<u8> {
        OffsetLogEntry::snapshot(&self.offsets.borrow()).encode()
    }

    /// Applies a change to the offsets as answered (OffsetFetch).
    pub(crate) fn apply_offsets(&self, entry: OffsetLogEntry) {
        entry.apply(&mut self.offsets.borrow_mut());
    }

    /// Forgets every group's membership, answering parked joins and syncs with
    /// NOT_COORDINATOR (this replica stopped coordinating: `group::replicated`); committed
    /// offsets stay.
    pub(crate) fn unload_membership(&self) {
        let joins: Vec<_> = self.join_waiters.borrow_mut().drain().collect();
        for ((_, member_id), waiter) in joins {
            let _ = waiter.try_send(JoinOutcome {
                result: Err(GroupError::NotCoordinator),
                member_id,
                generation: -1,
                protocol_type: None,
                protocol: None,
                leader: String::new(),
                members: Vec::new(),
            });
        }
        for (_, waiter) in self.sync_waiters.borrow_mut().drain() {
            let _ = waiter.try_send(Err(GroupError::NotCoordinator));
        }
        self.groups.borrow_mut().clear();
        self.empty_since.borrow_mut().clear();
    }

    /// Every group with committed offsets as an Empty group since now, as `restore` makes
    /// them (this replica starts coordinating: `group::replicated`), so offset retention
    /// counts from here.
    pub(crate) fn load_groups_with_offsets(&self) {
        let now = wall_ms();
        let mut groups = self.groups.borrow_mut();
        for group in self.offsets.borrow().keys() {
            groups.entry(group.clone()).or_insert_with(|| Group::new(group));
            self.empty_since.borrow_mut().entry(group.clone()).or_insert(now);
        }
    }

    /// Rebuilds committed offsets from the recovered `GroupOffsets` entries (in log order).
    pub fn restore(&self, entries: &[InternalEntry]) -> Result<(), String> {
        let mut offsets = self.offsets.borrow_mut();
        let mut replayed = 0u64;
        for entry in entries.iter().filter(|e| e.stream == InternalStream::GroupOffsets) {
            OffsetLogEntry::decode(&entry.payload)?.apply(&mut offsets);
            replayed += 1;
        }
        self.entries_since_snapshot.set(replayed);
        *self.logged.borrow_mut() = offsets.clone();
        let mut groups = self.groups.borrow_mut();
        let now = wall_ms();
        for group in offsets.keys() {
            groups.entry(group.clone()).or_insert_with(|| Group::new(group));
            self.empty_since.borrow_mut().insert(group.clone(), now);
        }
        if !offsets.is_empty() {
            info!(groups = offsets.len(), entries = replayed, "committed offsets restored");
        }
        Ok(())
    }

    fn deliver(&self, group_id: &str, effects: Vec<Effect>) {
        for effect in effects {
            match effect {
                Effect::Join(outcome) => {
                    let key = (group_id.to_string(), outcome.member_id.clone());
                    if let Some(waiter) = self.join_waiters.borrow_mut().remove(&key) {
                        let _ = waiter.try_send(outcome);
                    }
                }
                Effect::Sync { member_id, result } => {
                    let key = (group_id.to_string(), member_id);
                    if let Some(waiter) = self.sync_waiters.borrow_mut().remove(&key) {
                        let _ = waiter.try_send(result);
                    }
                }
            }
        }
        self.note_empty(group_id);
    }

    fn note_empty(&self, group_id: &str) {
        let empty =
            self.groups.borrow().get(group_id).is_some_and(|g| g.state == GroupState::Empty);
        let mut since = self.empty_since.borrow_mut();
        if empty {
            since.entry(group_id.to_string()).or_insert_with(wall_ms);
        } else {
            since.remove(group_id);
        }
    }

    /// TxnOffsetCommit's generation check (KIP-447), as OffsetCommit's.
    pub fn check_txn_commit(
        &self,
        group_id: &str,
        generation: i32,
        member_id: &str,
    ) -> Result<(), GroupError> {
        let now = self.now_ms();
        let mut groups = self.groups.borrow_mut();
        let group = groups.entry(group_id.to_string()).or_insert_with(|| Group::new(group_id));
        group.check_commit(now, generation, member_id)
    }

    /// Summaries of every group on this shard.
    pub fn list(&self) -> Vec<GroupSummary> {
        self.groups.borrow().values().map(summary).collect()
    }

    pub fn describe(&self, group_id: &str) -> Option<GroupSummary> {
        self.groups.borrow().get(group_id).map(summary)
    }

    /// Every committed offset of every group on this shard: (group, (topic, partition),
    /// offset), for metrics.
    pub fn all_committed(&self) -> Vec<(String, (String, i32), i64)> {
        let offsets = self.offsets.borrow();
        let all = offsets.iter().flat_map(|(group, partitions)| {
            partitions.iter().map(move |(key, c)| (group.clone(), key.clone(), c.offset))
        });
        all.collect()
    }

    /// Committed offsets of a group (all, or the asked partitions; -1 where none).
    pub fn committed(
        &self,
        group_id: &str,
        asked: Option<&[(String, i32)]>,
    ) -> Vec<((String, i32), Option<Committed>)> {
        let offsets = self.offsets.borrow();
        let group = offsets.get(group_id);
        match asked {
            Some(asked) => asked
                .iter()
                .map(|key| (key.clone(), group.and_then(|g| g.get(key)).cloned()))
                .collect(),
            None => group
                .map(|g| g.iter().map(|(k, v)| (k.clone(), Some(v.clone()))).collect())
                .unwrap_or_default(),
        }
    }
}

fn summary(group: &Group) -> GroupSummary {
    GroupSummary {
        group_id: group.group_id.clone(),
        state: group.state,
        protocol_type: group.protocol_type.clone().unwrap_or_default(),
        protocol: group.protocol.clone().unwrap_or_default(),
        members: group
            .members
            .iter()
            .map(|m| {
                let metadata = m
                    .protocols
                    .iter()
                    .find(|(n, _)| Some(n) == group.protocol.as_ref())
                    .map(|(_, md)| md.clone())
                    .unwrap_or_default();
                (
                    m.member_id.clone(),
                    m.group_instance_id.clone(),
                    m.client_id.clone(),
                    m.client_host.clone(),
                    metadata,
                    m.assignment.clone(),
                )
            })
            .collect(),
    }
}

impl Shard {
    /// NOT_COORDINATOR unless this shard of this node coordinates `group_id` now: on a
    /// single node its `coordinator_shard`; in a cluster that shard of the node that leads
    /// the shard's offsets group, once it applied everything committed before its term
    /// (`group::replicated`; COORDINATOR_LOAD_IN_PROGRESS until then).
    pub fn check_coordinator(&self, group_id: &str) -> Result<(), GroupError> {
        if group_id.is_empty() {
            return Err(GroupError::InvalidGroupId);
        }
        if super::coordinator_shard(group_id, self.nr_shards) != self.id {
            return Err(GroupError::NotCoordinator);
        }
        match self.offsets_group() {
            Some(group) => self.check_offsets_leader(group),
            None => Ok(()),
        }
    }

    /// JoinGroup: answered now, or parked until the rebalance completes.
    pub async fn join_group(&self, group_id: &str, request: JoinRequest) -> JoinOutcome {
        let coordinator = &self.groups;
        let asked_member_id = request.member_id.clone();
        let error = |e| JoinOutcome {
            result: Err(e),
            member_id: asked_member_id.clone(),
            generation: -1,
            protocol_type: None,
            protocol: None,
            leader: String::new(),
            members: Vec::new(),
        };
        if let Err(e) = self.check_coordinator(group_id) {
            return error(e);
        }
        let timeout = request.session_timeout_ms;
        if timeout < coordinator.config.min_session_timeout_ms
            || timeout > coordinator.config.max_session_timeout_ms
        {
            return error(GroupError::InvalidSessionTimeout);
        }
        let now = coordinator.now_ms();
        let (step, effects) = {
            let mut groups = coordinator.groups.borrow_mut();
            let group = groups.entry(group_id.to_string()).or_insert_with(|| Group::new(group_id));
            group.join(now, request)
        };
        let receiver = match &step {
            Step::Parked { member_id } => {
                let (sender, receiver) = local_channel::new_bounded(1);
                let key = (group_id.to_string(), member_id.clone());
                coordinator.join_waiters.borrow_mut().insert(key, sender);
                Some((member_id.clone(), receiver))
            }
            Step::Now(_) => None,
        };
        coordinator.deliver(group_id, effects);
        match (step, receiver) {
            (Step::Now(outcome), _) => outcome,
            (Step::Parked { .. }, Some((member_id, receiver))) => match receiver.recv().await {
                Some(outcome) => outcome,
                None => JoinOutcome { member_id, ..error(GroupError::UnknownMemberId) },
            },
            (Step::Parked { .. }, None) => unreachable!(),
        }
    }

    /// SyncGroup: the leader's carries every assignment; followers wait for it.
    pub async fn sync_group(
        &self,
        group_id: &str,
        generation: i32,
        member_id: &str,
        assignments: Vec<(String, Bytes)>,
    ) -> Result<Bytes, GroupError> {
        self.check_coordinator(group_id)?;
        let coordinator = &self.groups;
        let now = coordinator.now_ms();
        let (step, effects) = {
            let mut groups = coordinator.groups.borrow_mut();
            let group = groups.get_mut(group_id).ok_or(GroupError::UnknownMemberId)?;
            group.sync(now, generation, member_id, assignments)
        };
        let receiver = if let Step::Parked { member_id } = &step {
            let (sender, receiver) = local_channel::new_bounded(1);
            let key = (group_id.to_string(), member_id.clone());
            coordinator.sync_waiters.borrow_mut().insert(key, sender);
            Some(receiver)
        } else {
            None
        };
        coordinator.deliver(group_id, effects);
        match (step, receiver) {
            (Step::Now(result), _) => result,
            (Step::Parked { .. }, Some(receiver)) => {
                receiver.recv().await.unwrap_or(Err(GroupError::UnknownMemberId))
            }
            (Step::Parked { .. }, None) => unreachable!(),
        }
    }

    pub fn heartbeat(
        &self,
        group_id: &str,
        generation: i32,
        member_id: &str,
    ) -> Result<(), GroupError> {
        self.check_coordinator(group_id)?;
        let now = self.groups.now_ms();
        let mut groups = self.groups.groups.borrow_mut();
        let group = groups.get_mut(group_id).ok_or(GroupError::UnknownMemberId)?;
        group.heartbeat(now, generation, member_id)
    }

    /// LeaveGroup for several members; one result each.
    pub fn leave_group(
        &self,
        group_id: &str,
        members: &[(String, Option<String>)],
    ) -> Result<Vec<Result<(), GroupError>>, GroupError> {
        self.check_coordinator(group_id)?;
        let now = self.groups.now_ms();
        let mut results = Vec::with_capacity(members.len());
        for (member_id, instance_id) in members {
            let (result, effects) = {
                let mut groups = self.groups.groups.borrow_mut();
                match groups.get_mut(group_id) {
                    Some(group) => group.leave(now, member_id, instance_id.as_deref()),
                    None => (Err(GroupError::UnknownMemberId), Vec::new()),
                }
            };
            self.groups.deliver(group_id, effects);
            results.push(result);
        }
        Ok(results)
    }

    /// OffsetCommit: validated, written to the log, fdatasync'd, then applied.
    pub async fn commit_offsets(
        &self,
        group_id: &str,
        generation: i32,
        member_id: &str,
        partitions: Vec<OffsetCommitPartition>,
    ) -> Result<Vec<Result<(), GroupError>>, GroupError> {
        self.check_coordinator(group_id)?;
        let coordinator = &self.groups;
        {
            let now = coordinator.now_ms();
            let mut groups = coordinator.groups.borrow_mut();
            let group = groups.entry(group_id.to_string()).or_insert_with(|| Group::new(group_id));
            group.check_commit(now, generation, member_id)?;
        }
        let (results, offsets) = self.accept_commits(partitions);
        if !offsets.is_empty() {
            let entry = OffsetLogEntry::Commit { group: group_id.to_string(), offsets };
            self.write_offset_entry(entry).await?;
        }
        Ok(results)
    }

    /// Checks each partition of an OffsetCommit or TxnOffsetCommit (known partition,
    /// metadata size): the result per partition, and the accepted offsets.
    pub(crate) fn accept_commits(
        &self,
        partitions: Vec<OffsetCommitPartition>,
    ) -> (Vec<Result<(), GroupError>>, OffsetList) {
        let commit_time_ms = wall_ms();
        let max_metadata = self.groups.config.offset_metadata_max_bytes;
        let mut results = Vec::with_capacity(partitions.len());
        let mut offsets = Vec::new();
        for p in partitions {
            results.push(if self.locate(&p.topic, p.partition).is_none() {
                Err(GroupError::UnknownTopicOrPartition)
            } else if p.metadata.as_ref().is_some_and(|m| m.len() > max_metadata) {
                Err(GroupError::OffsetMetadataTooLarge)
            } else {
                let committed = Committed {
                    offset: p.offset,
                    leader_epoch: p.leader_epoch,
                    metadata: p.metadata,
                    commit_time_ms: p.commit_time_ms.unwrap_or(commit_time_ms),
                };
                offsets.push(((p.topic, p.partition), committed));
                Ok(())
            });
        }
        (results, offsets)
    }

    /// Makes one change to committed offsets durable and visible: on a single node written
    /// to the `GroupOffsets` stream, fdatasync'd, then applied; in a cluster proposed to the
    /// shard's offsets group and answered once applied here (`group::replicated`).
    pub(crate) async fn write_offset_entry(&self, entry: OffsetLogEntry) -> Result<(), GroupError> {
        if let Some(group) = self.offsets_group() {
            return self.replicate_offset_entry(group, &entry).await;
        }
        let durable = self.log_offset_entry(&entry)?;
        if let Err(e) = durable.wait().await {
            self.fatal_storage_error(&e);
        }
        self.groups.apply_offsets(entry);
        Ok(())
    }

    /// Appends one `GroupOffsets` entry (not waiting for it), and a snapshot of every
    /// group's offsets behind it every `SNAPSHOT_EVERY` entries.
    pub(crate) fn log_offset_entry(&self, entry: &OffsetLogEntry) -> Result<Durable, GroupError> {
        let durable = self
            .log
            .append_internal(InternalStream::GroupOffsets, false, &entry.encode())
            .map_err(|e| {
                warn!(shard = self.id, error = ?e, "writing committed offsets");
                GroupError::Storage
            })?;
        if let Some(snapshot) = self.groups.logged_entry(entry.clone()) {
            // Appended right behind the entries it summarises; replaces them in memory
            // only once durable, and never becomes durable before them (one log).
            if let Err(e) = self.log.append_internal(InternalStream::GroupOffsets, true, &snapshot)
            {
                warn!(shard = self.id, error = ?e, "writing an offsets snapshot");
            }
        }
        Ok(durable)
    }

    /// DeleteGroups: only Empty groups; their offsets are deleted durably.
    pub async fn delete_group(&self, group_id: &str) -> Result<(), GroupError> {
        self.check_coordinator(group_id)?;
        let state = self.groups.groups.borrow().get(group_id).map(|g| g.state);
        match state {
            None => return Err(GroupError::GroupIdNotFound),
            Some(GroupState::Empty) | Some(GroupState::Dead) => {}
            Some(_) => return Err(GroupError::NonEmptyGroup),
        }
        self.write_offset_entry(OffsetLogEntry::DeleteGroup { group: group_id.to_string() })
            .await?;
        self.groups.groups.borrow_mut().remove(group_id);
        self.groups.empty_since.borrow_mut().remove(group_id);
        Ok(())
    }

    /// OffsetDelete: refused per partition while the group is subscribed to the topic.
    pub async fn delete_offsets(
        &self,
        group_id: &str,
        partitions: Vec<(String, i32)>,
    ) -> Result<Vec<Result<(), GroupError>>, GroupError> {
        self.check_coordinator(group_id)?;
        let subscribed = match self.groups.groups.borrow().get(group_id) {
            None => return Err(GroupError::GroupIdNotFound),
            Some(g) => g.subscribed_topics(),
        };
        let mut results = Vec::with_capacity(partitions.len());
        let mut deleted = Vec::new();
        for (topic, partition) in partitions {
            if subscribed.contains(&topic) {
                results.push(Err(GroupError::GroupSubscribedToTopic));
            } else if self.locate(&topic, partition).is_none() {
                results.push(Err(GroupError::UnknownTopicOrPartition));
            } else {
                deleted.push((topic, partition));
                results.push(Ok(()));
            }
        }
        if !deleted.is_empty() {
            let entry = OffsetLogEntry::Delete { group: group_id.to_string(), partitions: deleted };
            self.write_offset_entry(entry).await?;
        }
        Ok(results)
    }

    /// Sessions, rebalance deadlines and offset retention, every `tick_interval`.
    pub fn spawn_group_ticker(self: &Rc<Self>) {
        let shard = self.clone();
        glommio::spawn_local(async move {
            loop {
                glommio::timer::sleep(shard.groups.config.tick_interval).await;
                shard.tick_groups();
                shard.expire_offsets().await;
            }
        })
        .detach();
    }

    fn tick_groups(&self) {
        let coordinator = &self.groups;
        let now = coordinator.now_ms();
        let ids: Vec<String> = coordinator.groups.borrow().keys().cloned().collect();
        for id in ids {
            let effects = match coordinator.groups.borrow_mut().get_mut(&id) {
                Some(group) => group.tick(now),
                None => continue,
            };
            coordinator.deliver(&id, effects);
        }
    }

    async fn expire_offsets(&self) {
        if self.offsets_group().is_some_and(|g| self.check_offsets_leader(g).is_err()) {
            return; // a replica that does not coordinate, or has not caught up: not its call
        }
        let coordinator = &self.groups;
        let cutoff = wall_ms() - coordinator.config.offsets_retention_ms;
        let expired: Vec<String> = coordinator
            .empty_since
            .borrow()
            .iter()
            .filter(|(group, since)| {
                let last_commit = coordinator.offsets.borrow().get(*group).map_or(i64::MIN, |o| {
                    o.values().map(|c| c.commit_time_ms).max().unwrap_or(i64::MIN)
                });
                **since < cutoff && last_commit < cutoff
            })
            .map(|(g, _)| g.clone())
            .collect();
        for group in expired {
            info!(shard = self.id, %group, "committed offsets expired (offsets.retention)");
            if self
                .write_offset_entry(OffsetLogEntry::DeleteGroup { group: group.clone() })
                .await
                .is_ok()
            {
                coordinator.groups.borrow_mut().remove(&group);
                coordinator.empty_since.borrow_mut().remove(&group);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn commit(group: &str, offset: i64) -> OffsetLogEntry {
        let committed = Committed { offset, leader_epoch: -1, metadata: None, commit_time_ms: 0 };
        OffsetLogEntry::Commit { group: group.into(), offsets: vec![(("t".into(), 0), committed)] }
    }

    /// Two commits share a flush and the later one's writer resumes first. The snapshot
    /// the later entry brings lands after both in the log, so it must hold the earlier
    /// commit too: recovery replays from it. (Taken from the offsets applied at resume
    /// time, as before, it held only the later one, and the earlier, answered commit was
    /// lost at the next restart.)
    #[test]
    fn a_snapshot_holds_every_entry_appended_before_it_whatever_order_writers_resume_in() {
        let coordinator = GroupCoordinator::new(GroupConfig::default());
        coordinator.entries_since_snapshot.set(SNAPSHOT_EVERY - 2);
        let (earlier, later) = (commit("a", 7), commit("b", 9));
        let mut log = vec![earlier.clone(), later.clone()];
        assert!(coordinator.logged_entry(earlier.clone()).is_none());
        let snapshot = coordinator.logged_entry(later.clone()).expect("a snapshot is due");
        log.push(OffsetLogEntry::decode(&snapshot).unwrap());
        later.apply(&mut coordinator.offsets.borrow_mut());
        earlier.apply(&mut coordinator.offsets.borrow_mut());

        let mut recovered = BTreeMap::new();
        for entry in log {
            entry.apply(&mut recovered);
        }
        assert_eq!(recovered, *coordinator.offsets.borrow());
        assert_eq!(recovered.len(), 2, "both groups' commits survive a restart");
    }
}
