//! Raft snapshots of partition groups on the shard (docs/replication.md, "Partition
//! snapshots"): the leader's manifest and the records it serves, the follower's catch-up
//! before it steps the `MsgSnapshot`.
//!
//! - **Leader.** Every TICK, for each group it leads with a voter whose match index is
//!   below the log's snapshot point (`RaftGroup::voters_needing_snapshot`: a voter that
//!   was away past a compaction, or lost its data dir), the shard builds a
//!   `SnapshotManifest` of the group as of the last entry its applier finished (never
//!   while an entry is half applied, invariant 1) and keeps it as the group's snapshot
//!   data, which raft-rs sends. It answers pulls (`replication::pull`) from its shard log
//!   (the Fetch read path: whole batches, up to the durable high watermark; `NotYet` past
//!   it).
//! - **Follower.** A `MsgSnapshot` of a partition group is held by the group's sink, not
//!   stepped. One catch-up task per group pulls each partition's batches from the sender
//!   (the same shard index of its node) from its own end to the manifest's end, as
//!   `replication::snapshot_transfer` decides, writes them at the leader's offsets
//!   (`ShardLog::append_at_offsets`, log starts moved first) and waits for each write's
//!   fdatasync; then installs the producers' state, the partitions' transaction state, the
//!   offsets image, the transaction coordinator's image and the manifest's log starts, appends an applying marker that says every entry up to the manifest's
//!   index A is applied (`replication::partition` invariant 3, with next offset -1), and
//!   only then steps the message into raft-rs. MsgSnapshots that arrive meanwhile are
//!   dropped (a duplicate) or extend the targets (a newer manifest). The pulls go through
//!   a `PullSource`: the replication transport, or the power-loss test's simulated leader
//!   (`partition_snapshots/tests.rs`, invariant 2).
//!
//! Runs on the shard that hosts the groups; not a hot path (a manifest per tick per group
//! with a voter behind; a pull per MiB of records while one catches up).
//!
//! Invariants:
//! 1. A manifest's index A and its partitions' next offsets, producers, offsets image and
//!    coordinator image are read in one step (no `.await` between), at a moment when the applier is between
//!    two entries of the group: they are the state after applying exactly the entries up
//!    to A.
//! 2. A follower steps the `MsgSnapshot` only after every pulled write is durable and the
//!    applying marker of A is appended (before the raft write of the snapshot, in one
//!    log: a recovered snapshot has its marker), so raft-rs never hears of a snapshot
//!    whose records a crash can take back, and the entries up to A are never applied
//!    again (partition entries get their offsets at apply time: applying one twice would
//!    store its records twice).
//! 3. Crash mid-transfer: what was written is a prefix of the leader's partition up to
//!    the manifest's end (`snapshot_transfer` invariant 1); the next transfer resumes from
//!    it. Nothing else changed (no marker, no producer state, raft-rs never heard).
//! 4. A transfer writes to the group's partitions alone: it starts only once the applier
//!    applied everything this replica's log commits (raft-rs hands it nothing more until
//!    the snapshot is stepped, the log ending before the snapshot's point), so the
//!    applier's re-application of its own log after a restart never races with it. A
//!    snapshot whose point this replica's log holds (a follower whose acknowledgements
//!    the leader lost) is stepped at once: raft-rs moves the commit index and the
//!    entries are applied from the log.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use futures_lite::FutureExt;
use glommio::channels::local_channel::{self, LocalReceiver, LocalSender};
use shardlog_storage::{split_batches, Durable, PartitionId, RecordBatchHeader};

use crate::partition_group::PartitionGroups;
use crate::replication::partition::ApplyingMarker;
use crate::replication::partition_snapshot::{PartitionManifest, SnapshotManifest};
use crate::replication::pull::{Pull, PullRefusal, PullRequest, PullResponse, MAX_PULL_BYTES};
use crate::replication::snapshot_transfer::{
    LocalPartition, Offered, PullRange, Pulled, PulledBatch, SnapshotTransfer, TransferError, Write,
};
use crate::replication::{node_of, persist, Message, RaftGroup};
use crate::shard::Shard;

/// How long a follower waits for one pull's answer before asking again, how often it
/// asks again for data not readable yet, and how many unanswered asks end a transfer
/// (raft-rs sends the snapshot again later, and the next transfer resumes).
const PULL_TIMEOUT: Duration = Duration::from_secs(2);
const NOT_YET_RETRY: Duration = Duration::from_millis(20);
const MAX_UNANSWERED: u32 = 10;

/// A shard's partition snapshot figures since its start (`/metrics`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PartitionSnapshotStats {
    /// Partitions installed from a leader's partition snapshot (a follower caught up).
    pub partitions_installed: u64,
    /// Transfers that stopped before installing (no answer, a refused write, a manifest
    /// behind what this replica holds, a misaligned batch); raft-rs sends again.
    pub transfers_failed: u64,
    /// Manifests a leader could not send: over the frame limit (`MAX_MANIFEST_BYTES`).
    pub manifests_refused: u64,
    /// Record bytes pulled (follower) and served (leader).
    pub bytes_pulled: u64,
    pub bytes_served: u64,
}

/// The shard's partition snapshot state (module docs).
pub(crate) struct PartitionSnapshots {
    /// Running transfers: group -> (the sender's node, the transfer).
    transfers: RefCell<HashMap<u64, (u64, SnapshotTransfer<Message>)>>,
    /// The answer each transfer waits for: group -> where it goes.
    awaiting: RefCell<HashMap<u64, LocalSender<PullResponse>>>,
    /// `MsgSnapshot`s the groups' sinks hold, to the catch-up dispatcher.
    pub(crate) held: Rc<LocalSender<(u64, Message)>>,
    held_receiver: RefCell<Option<LocalReceiver<(u64, Message)>>>,
    stats: Cell<PartitionSnapshotStats>,
}

impl PartitionSnapshots {
    pub(crate) fn new() -> PartitionSnapshots {
        let (held, held_receiver) = local_channel::new_bounded(1024);
        PartitionSnapshots {
            transfers: RefCell::new(HashMap::new()),
            awaiting: RefCell::new(HashMap::new()),
            held: Rc::new(held),
            held_receiver: RefCell::new(Some(held_receiver)),
            stats: Cell::new(PartitionSnapshotStats::default()),
        }
    }

    pub fn stats(&self) -> PartitionSnapshotStats {
        self.stats.get()
    }

    fn count(&self, change: impl FnOnce(&mut PartitionSnapshotStats)) {
        let mut stats = self.stats.get();
        change(&mut stats);
        self.stats.set(stats);
    }
}

/// Starts the shard's tasks: the pull messages' dispatcher and the catch-up dispatcher.
pub(crate) fn start(shard: &Rc<Shard>, groups: &Rc<PartitionGroups>) {
    if let Some(pulls) = groups.host.take_pull_receiver() {
        glommio::spawn_local(receive_pulls(shard.clone(), groups.clone(), pulls)).detach();
    }
    let held = groups.snapshots.held_receiver.borrow_mut().take();
    if let Some(held) = held {
        glommio::spawn_local(follow_snapshots(shard.clone(), groups.clone(), held)).detach();
    }
}

// -- the leader -------------------------------------------------------------------------

impl Shard {
    /// Every TICK: refreshes the snapshot data of each led group a voter needs a snapshot
    /// of (module docs, invariant 1).
    pub(crate) fn refresh_partition_manifests(&self, groups: &PartitionGroups) {
        for group in groups.hosted_groups().into_keys() {
            let needed = groups.host.with_group(group, |g| {
                let behind = !g.voters_needing_snapshot().is_empty();
                behind.then(|| g.log().snapshot_index)
            });
            let Some(Some(snapshot_index)) = needed else { continue };
            let Some(applied_index) = groups.applied_between_entries(group) else { continue };
            if applied_index < snapshot_index {
                continue; // not reached after a restart yet: the applier is on its way
            }
            let manifest = self.manifest_of(group, applied_index);
            match manifest.encode() {
                Ok(data) => {
                    let data = Bytes::from(data);
                    groups.host.with_group(group, |g| g.set_snapshot_data(data));
                }
                Err(error) => {
                    groups.snapshots.count(|s| s.manifests_refused += 1);
                    tracing::warn!(group = format!("{group:#x}"), %error, "no partition snapshot");
                }
            }
        }
    }

    /// The group's manifest as of `applied_index` (invariant 1: no `.await` here).
    fn manifest_of(&self, group: u64, applied_index: u64) -> SnapshotManifest {
        let table = self.table_ref();
        let mut partitions = Vec::new();
        for meta in table.topics.values() {
            for index in self.partitions_here(meta) {
                if self.replicated(meta, index as i32).map(|(g, _)| g) != Some(group) {
                    continue;
                }
                let Some(id) = meta.partition_id(index as i32) else { continue };
                let Some(info) = self.log.partition_info(id) else { continue };
                partitions.push(PartitionManifest {
                    topic_id: meta.topic_id,
                    partition: index as i32,
                    log_start_offset: info.log_start_offset,
                    next_offset: info.log_end_offset,
                    producers: self.producers.borrow().of_partition(id),
                    leader_epochs: self.log.leader_epochs(id).unwrap_or_default(),
                    transactions: self
                        .txn
                        .partitions
                        .borrow()
                        .get(&id)
                        .cloned()
                        .unwrap_or_default(),
                });
            }
        }
        let (offsets_image, coordinator_image) = match self.offsets_group() == Some(group) {
            true => (Bytes::from(self.groups.offsets_image()), self.txn_coordinator_image()),
            false => (Bytes::new(), Bytes::new()),
        };
        SnapshotManifest { applied_index, partitions, offsets_image, coordinator_image }
    }

    /// The answer to a follower's pull: whole batches from its `from` (or this log's
    /// start, past it), below its `to`, up to the durable high watermark.
    async fn serve_pull(&self, request: &PullRequest) -> PullResponse {
        let mut response = PullResponse {
            group: request.group,
            topic_id: request.topic_id,
            partition: request.partition,
            from: request.from,
            log_start_offset: 0,
            refusal: Some(PullRefusal::NotLeader),
            batches: Bytes::new(),
        };
        let Some(id) = self.partition_by_topic_id(request.topic_id, request.partition) else {
            return response;
        };
        let Some(info) = self.log.partition_info(id) else { return response };
        response.log_start_offset = info.log_start_offset;
        let from = request.from.max(info.log_start_offset);
        if from >= request.to {
            response.refusal = None; // nothing left to send below its end
            return response;
        }
        response.refusal = Some(PullRefusal::NotYet);
        if from >= info.high_watermark {
            return response; // applied here, not durable yet
        }
        let max_bytes = request.max_bytes.min(MAX_PULL_BYTES) as usize;
        match self.log.read_below(id, from, max_bytes, request.to).await {
            Ok(batches) if !batches.is_empty() => {
                response.refusal = None;
                response.batches = batches;
            }
            // Retention moved the start meanwhile: the follower asks again.
            Ok(_) | Err(_) => {}
        }
        response
    }

    fn partition_by_topic_id(&self, topic_id: [u8; 16], partition: i32) -> Option<PartitionId> {
        self.table_ref().topic_by_id(topic_id)?.partition_id(partition)
    }
}

/// Serves requests and hands responses to the transfer that waits for them.
async fn receive_pulls(
    shard: Rc<Shard>,
    groups: Rc<PartitionGroups>,
    pulls: LocalReceiver<(u64, Bytes)>,
) {
    while let Some((from, bytes)) = pulls.recv().await {
        match Pull::decode(&bytes) {
            Ok(Pull::Request(request)) => {
                let (shard, groups) = (shard.clone(), groups.clone());
                glommio::spawn_local(async move {
                    let response = shard.serve_pull(&request).await;
                    let served = response.batches.len() as u64;
                    groups.snapshots.count(|s| s.bytes_served += served);
                    let _ = groups.host.send_pull(from, response.encode());
                })
                .detach();
            }
            Ok(Pull::Response(response)) => {
                let awaiting = groups.snapshots.awaiting.borrow();
                if let Some(waiter) = awaiting.get(&response.group) {
                    let _ = waiter.try_send(response); // a stale one is checked there
                }
            }
            Err(error) => tracing::warn!(from, %error, "a partition snapshot pull dropped"),
        }
    }
}

// -- the follower -----------------------------------------------------------------------

/// Starts, extends or drops a transfer for each held `MsgSnapshot` (module docs).
async fn follow_snapshots(
    shard: Rc<Shard>,
    groups: Rc<PartitionGroups>,
    held: LocalReceiver<(u64, Message)>,
) {
    while let Some((group, message)) = held.recv().await {
        let name = format!("{group:#x}");
        match needs_transfer(&groups, group, &message) {
            Need::Transfer => {}
            Need::StepNow => {
                // Its log holds the snapshot's point: raft-rs moves the commit index there,
                // and the entries are applied as any others (invariant 4).
                groups.host.with_group(group, |g: &mut RaftGroup| g.step(message));
                continue;
            }
            Need::NotYet => continue, // raft-rs sends it again (invariant 4)
        }
        let manifest = match SnapshotManifest::decode(&message.get_snapshot().data) {
            Ok(manifest) => manifest,
            Err(error) => {
                groups.snapshots.count(|s| s.transfers_failed += 1);
                tracing::warn!(group = name, %error, "a partition snapshot's manifest is refused");
                continue;
            }
        };
        let Some(sender) = node_of(message.from) else { continue };
        let local =
            |topic_id: &[u8; 16], partition: i32| shard.held_of_partition(*topic_id, partition);
        let started = {
            let mut transfers = groups.snapshots.transfers.borrow_mut();
            let started = match transfers.get_mut(&group) {
                Some((_, transfer)) => match transfer.offer(manifest, message, local) {
                    Ok(Offered::Duplicate | Offered::Extended) => continue,
                    Err(error) => Err(error),
                },
                None => SnapshotTransfer::start(manifest, message, local),
            };
            started.map(|transfer| transfers.insert(group, (sender, transfer)))
        };
        match started {
            Ok(_) => {
                tracing::info!(group = name, sender, "partition snapshot: catching up");
                glommio::spawn_local(catch_up(shard.clone(), groups.clone(), group)).detach();
            }
            // Raft-rs sends the snapshot again: by then the table may know the partition.
            Err(TransferError::UnknownPartition { .. }) => {}
            Err(error) => {
                groups.snapshots.count(|s| s.transfers_failed += 1);
                tracing::warn!(group = name, %error, "partition snapshot: not taken");
            }
        }
    }
}

/// What a held `MsgSnapshot` calls for (invariant 4).
enum Need {
    Transfer,
    /// This replica's log has the snapshot's point (its index with its term), or commits
    /// past it: no records to pull.
    StepNow,
    /// The applier has not applied everything this replica's log commits (a restart
    /// applies its log again): a transfer now would race with it.
    NotYet,
}

fn needs_transfer(groups: &PartitionGroups, group: u64, message: &Message) -> Need {
    let point = message.get_snapshot().get_metadata();
    let (index, term) = (point.index, point.term);
    let hosted = groups.host.with_group(group, |g: &mut RaftGroup| {
        let has_point = g.log().entry(index).is_some_and(|e| e.term == term)
            || (g.log().snapshot_index, g.log().snapshot_term) == (index, term);
        (has_point || g.commit_index() >= index, g.commit_index())
    });
    let Some((has_point, commit_index)) = hosted else { return Need::NotYet };
    if has_point {
        return Need::StepNow;
    }
    let applied = groups.applied_between_entries(group).unwrap_or(0);
    match applied >= commit_index || commit_index == 0 {
        true => Need::Transfer,
        false => Need::NotYet,
    }
}

/// One group's catch-up (module docs): pull, write, install, step.
async fn catch_up(shard: Rc<Shard>, groups: Rc<PartitionGroups>, group: u64) {
    let source = TransportPulls { groups: &groups, group };
    let pulled = pull_all(&shard, &groups.snapshots, group, &source).await;
    groups.snapshots.awaiting.borrow_mut().remove(&group);
    let Some((_, transfer)) = groups.snapshots.transfers.borrow_mut().remove(&group) else {
        return;
    };
    if let Err(error) = pulled {
        groups.snapshots.count(|s| s.transfers_failed += 1);
        let group = format!("{group:#x}");
        tracing::warn!(group, %error, "partition snapshot: transfer stopped; resumes at the next");
        return;
    }
    if let Err(error) = shard.install_partition_snapshot(&groups, group, transfer).await {
        groups.snapshots.count(|s| s.transfers_failed += 1);
        tracing::warn!(group = format!("{group:#x}"), %error, "partition snapshot: not installed");
    }
}

/// Where a transfer's pulls are answered: the sender, over the replication transport
/// (`TransportPulls`), or a test's leader.
pub(crate) trait PullSource {
    /// The answer of node `sender` to a pull of `range`.
    async fn pull(&self, sender: u64, range: PullRange) -> Result<PullResponse, String>;
}

/// The pulls of `group`'s transfer, asked over the replication transport (`ask`).
struct TransportPulls<'a> {
    groups: &'a PartitionGroups,
    group: u64,
}

impl PullSource for TransportPulls<'_> {
    async fn pull(&self, sender: u64, range: PullRange) -> Result<PullResponse, String> {
        ask(self.groups, self.group, sender, range).await
    }
}

/// Pulls and writes until every partition reached its manifest's end (invariant 3).
async fn pull_all(
    shard: &Shard,
    snapshots: &PartitionSnapshots,
    group: u64,
    source: &impl PullSource,
) -> Result<(), String> {
    loop {
        let next = {
            let transfers = snapshots.transfers.borrow();
            let (sender, transfer) = transfers.get(&group).ok_or("the transfer is gone")?;
            transfer.next_request().map(|range| (*sender, range))
        };
        let Some((sender, range)) = next else { return Ok(()) };
        let response = source.pull(sender, range).await?;
        match response.refusal {
            Some(PullRefusal::NotYet) => {
                glommio::timer::sleep(NOT_YET_RETRY).await;
                continue;
            }
            Some(PullRefusal::NotLeader) => return Err(format!("node {sender} has no copy")),
            None => {}
        }
        let batches = split_batches(&response.batches).map_err(|e| format!("{e:?}"))?;
        let bytes = response.batches.len() as u64;
        snapshots.count(|s| s.bytes_pulled += bytes);
        let pulled = Pulled {
            topic_id: range.topic_id,
            partition: range.partition,
            log_start_offset: response.log_start_offset,
            batches: batches.into_iter().map(pulled_batch).collect(),
        };
        let writes = {
            let mut transfers = snapshots.transfers.borrow_mut();
            let (_, transfer) = transfers.get_mut(&group).ok_or("the transfer is gone")?;
            transfer.on_response(pulled).map_err(|e| e.to_string())?
        };
        shard.write_pulled(writes).await?;
    }
}

fn pulled_batch((header, bytes): (RecordBatchHeader, Bytes)) -> PulledBatch {
    let last_offset = header.base_offset + header.last_offset_delta as i64;
    PulledBatch { base_offset: header.base_offset, last_offset, bytes }
}

/// Sends `range`'s request to `sender` and waits for its answer, asking again after
/// `PULL_TIMEOUT`, at most `MAX_UNANSWERED` times.
async fn ask(
    groups: &PartitionGroups,
    group: u64,
    sender: u64,
    range: PullRange,
) -> Result<PullResponse, String> {
    let request = PullRequest {
        group,
        topic_id: range.topic_id,
        partition: range.partition,
        from: range.from,
        to: range.to,
        max_bytes: MAX_PULL_BYTES,
    };
    let (waiter, answers) = local_channel::new_bounded(16);
    groups.snapshots.awaiting.borrow_mut().insert(group, waiter);
    for _ in 0..MAX_UNANSWERED {
        groups.host.send_pull(sender, request.encode()).map_err(|e| e.to_string())?;
        let deadline = glommio::timer::sleep(PULL_TIMEOUT);
        let answer = async {
            loop {
                let response = answers.recv().await?;
                let ours = (response.topic_id, response.partition, response.from)
                    == (request.topic_id, request.partition, request.from);
                if ours {
                    return Some(response);
                }
            }
        };
        if let Some(response) = answer
            .or(async {
                deadline.await;
                None
            })
            .await
        {
            return Ok(response);
        }
    }
    Err(format!("node {sender} did not answer {MAX_UNANSWERED} pulls"))
}

impl Shard {
    /// What this replica's log holds of a partition, by topic id (None: not known here).
    fn held_of_partition(&self, topic_id: [u8; 16], partition: i32) -> Option<LocalPartition> {
        let info = self.log.partition_info(self.partition_by_topic_id(topic_id, partition)?)?;
        Some(LocalPartition {
            log_start_offset: info.log_start_offset,
            next_offset: info.log_end_offset,
        })
    }

    /// Makes the transfer's writes, each waited for until durable (invariant 2).
    async fn write_pulled(&self, writes: Vec<Write>) -> Result<(), String> {
        for write in writes {
            let durable = self.write_one_pulled(write)?;
            durable.wait().await.map_err(|e| format!("flush: {e:?}"))?;
        }
        Ok(())
    }

    fn write_one_pulled(&self, write: Write) -> Result<Durable, String> {
        let (topic_id, partition) = match &write {
            Write::LogStart { topic_id, partition, .. } => (*topic_id, *partition),
            Write::Batches { topic_id, partition, .. } => (*topic_id, *partition),
        };
        let id = self.partition_by_topic_id(topic_id, partition);
        let id = id.ok_or_else(|| format!("partition {partition} of a topic not known here"))?;
        match write {
            Write::LogStart { offset, .. } => {
                let moved = self.log.advance_log_start_past_end(id, offset);
                moved.map(|(_, durable)| durable).map_err(|e| format!("log start: {e:?}"))
            }
            Write::Batches { batches, .. } => {
                let mut parsed = Vec::with_capacity(batches.len());
                for batch in batches {
                    let header = RecordBatchHeader::parse_validated(&batch.bytes)
                        .map_err(|e| format!("{e:?}"))?;
                    parsed.push((header, batch.bytes));
                }
                let appended = self.log.append_at_offsets(id, &parsed);
                appended.map(|a| a.durable).map_err(|e| format!("append: {e:?}"))
            }
        }
    }

    /// Installs a pulled snapshot, then steps its message (invariant 2).
    async fn install_partition_snapshot(
        &self,
        groups: &PartitionGroups,
        group: u64,
        transfer: SnapshotTransfer<Message>,
    ) -> Result<(), String> {
        let (manifest, message, marker) = self.install_pulled(group, transfer).await?;
        // No `.await` from the install's last write to the step.
        groups.note_marker(marker);
        let snapshot_index = message.get_snapshot().get_metadata().index;
        let stepped = groups.host.with_group(group, |g: &mut RaftGroup| g.step(message));
        let count = manifest.partitions.len() as u64;
        groups.snapshots.count(|s| s.partitions_installed += count);
        tracing::info!(
            group = format!("{group:#x}"),
            snapshot_index,
            applied_index = manifest.applied_index,
            partitions = count,
            stepped = ?stepped.map(|s| s.is_ok()),
            "partition snapshot installed"
        );
        Ok(())
    }

    /// The install's writes, all in the log before the raft write of the snapshot that
    /// the caller's step makes (invariant 2): the manifest's log starts (each waited for
    /// until durable, as the pulled records were), the producers' state, the offsets
    /// image, the marker of A and snapshots of the producer and transaction state. Returns
    /// the manifest, the message to step and the marker, with no `.await` after the
    /// marker's append.
    async fn install_pulled(
        &self,
        group: u64,
        transfer: SnapshotTransfer<Message>,
    ) -> Result<(SnapshotManifest, Message, ApplyingMarker), String> {
        let log_starts = transfer.final_log_starts();
        self.write_pulled(log_starts).await?;
        let (manifest, message) = transfer.finish();
        let mut first_partition = None;
        let mut installed_txns = false;
        for p in &manifest.partitions {
            let Some(id) = self.partition_by_topic_id(p.topic_id, p.partition) else {
                return Err(format!("partition {} is gone", p.partition));
            };
            first_partition.get_or_insert(id);
            self.producers.borrow_mut().replace_partition(id, p.producers.clone());
            // The leader's transaction state as of A, whole: what this replica held of the
            // partition before is older, and the pulled batches may start past a
            // transaction's first offset (docs/transactions.md, "Replicated partitions").
            installed_txns |= !p.transactions.is_empty();
            self.txn.partitions.borrow_mut().insert(id, p.transactions.clone());
            p.producers
                .iter()
                .for_each(|(producer_id, _)| self.skip_past_producer_id(*producer_id));
        }
        if !manifest.offsets_image.is_empty() {
            self.apply_offsets_change(group, manifest.applied_index, &manifest.offsets_image)
                .map_err(|e| format!("offsets image: {e:?}"))?;
        }
        if !manifest.coordinator_image.is_empty() {
            self.install_txn_coordinator_image(&manifest.coordinator_image)
                .map_err(|e| format!("transaction coordinator image: {e}"))?;
        }
        // Every entry up to A applied (`applied_before_restart`: below the marker, or at it
        // with any next offset past -1).
        let marker = ApplyingMarker {
            group,
            index: manifest.applied_index,
            partition: first_partition.unwrap_or(PartitionId(0)),
            next_offset: -1,
        };
        persist::append_marker(&self.log, &marker).map_err(|e| format!("marker: {e:?}"))?;
        // The installed producers and transaction state, durable ahead of the raft write of
        // the snapshot (a restart replays the batches after this snapshot only).
        self.snapshot_producer_state();
        if installed_txns && !self.txn.in_log.get() {
            self.ensure_txn_stream(); // the stream's first snapshot
        } else {
            self.snapshot_transactions();
        }
        Ok((manifest, message, marker))
    }
}

#[cfg(test)]
mod tests;
