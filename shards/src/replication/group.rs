//! `RaftGroup`: the sans-IO driver of one raft group on one shard (raft-rs `RawNode`).
//!
//! The host (the shard's event loop; the simulation in tests/replication_sim.rs) feeds it
//! inputs and drains its outputs; the driver never blocks, sleeps, reads a clock or
//! touches a file or socket:
//!
//! | input | output to drain |
//! |---|---|
//! | `tick()` every tick interval | `take_messages()`: raft messages to send, any order, may be lost |
//! | `step(message)` from a peer | `take_writes()`: `WriteRequest`s to make durable, in order |
//! | `propose(data)` (a produce batch) | `take_committed()`: committed entries, in index order |
//! | `durable(number)` once a write is durable | `take_outcomes()`: what became of each proposal |
//! | | `take_snapshot()`: a leader's snapshot, installed before the next committed entries |
//!
//! Writes are asynchronous (raft-rs `advance_append_async` / `on_persist_ready`), so a
//! host can gather the writes of many groups (and the partitions' own appends) into one
//! group-commit fdatasync. What a follower may only say after its write is durable (its
//! append acknowledgements, its votes) is held here until the host reports that write.
//!
//! Kafka's words: the leader epoch is `term()`; acks=all is answered when a proposal's
//! outcome is `Committed` (durable on a majority, raft-rs counts the leader's own write
//! only once reported durable); the high watermark is `commit_index()`.
//!
//! Runs on the shard that owns the group; every call allocates (messages, entries), which
//! is fine for this slice and measured in docs/replication.md.
//!
//! Invariants:
//! 1. A message released from `take_messages()` never depends on a write the host has not
//!    reported durable (raft-rs's persisted messages are held until `durable`), except a
//!    heartbeat response, which depends on no write: it says only that this replica is
//!    alive and follows the sender's term, promises nothing about its log, and casts no
//!    vote (a vote is held as before). Sent at once, so a follower whose fdatasync is
//!    slow for a moment does not look dead to the leader's check-quorum (which would
//!    step down and cost an election once the disk is back).
//! 2. A proposal is reported `Committed` only when the entry committed at its index has
//!    its term (asserted: a leader never overwrites its own entries, and a proposal is
//!    pending only while its leader leads in its term). A proposal still pending when its
//!    leader steps down is reported `Abandoned` (its fate unknown here), so no proposal
//!    waits for ever.
//! 3. Write requests are handed out in increasing `number`, and `durable(n)` covers every
//!    request numbered up to n.
//! 4. A snapshot received from the leader (the metadata group's: docs/replication.md,
//!    "Metadata snapshots") is in a write request, handed out by `take_snapshot` before
//!    any committed entry after it (a host takes it first), and raft-rs hears it applied
//!    only once that write is durable (raft-rs refuses an applied index past what is
//!    persisted). Committed entries not yet taken when it arrives are below it and
//!    dropped: the snapshot holds their effect.
//! 5. A replica whose log lost what it acknowledged (a data dir replaced: raft assumes it
//!    never happens) neither panics nor stalls its group: a heartbeat that commits past
//!    its log commits nothing here (raft-rs would abort), and a leader that learns from a
//!    rejection that a voter's log ends below the match index it recorded probes that
//!    voter from its real end (raft-rs never lowers a match index), so it gets entries or
//!    a snapshot. A replica that started from nothing (no term, no entry) votes for no
//!    candidate with a non-empty log until its own log is non-empty: it may be one that
//!    voted in that term before it lost its data.

use std::collections::{BTreeSet, VecDeque};

use raft::eraftpb::{Entry, Message, MessageType, Snapshot};
use raft::{Config, RawNode, SnapshotStatus, StateRole};

use super::log::{LogImage, WriteRequest};

/// Settings of one group; ticks are the host's tick interval (docs/replication.md).
#[derive(Clone, Debug)]
pub struct GroupConfig {
    /// This replica's raft id (non-zero; `node_id + 1` within a group).
    pub id: u64,
    /// Ticks without a leader's word before a follower campaigns (randomized up to 2x).
    pub election_tick: usize,
    /// Ticks between a leader's heartbeats.
    pub heartbeat_tick: usize,
    /// A fixed election timeout (at least `election_tick`) instead of raft-rs's draw in
    /// `[election_tick, 2 * election_tick)` from the thread's own generator at every term:
    /// a deterministic simulation draws it from its seed, so a seed replays exactly.
    pub fixed_election_timeout: Option<usize>,
    /// Most entry bytes in one append message.
    pub max_size_per_msg: u64,
    /// Append messages in flight to one follower.
    pub max_inflight_msgs: usize,
    /// Most data one proposal may carry: what one entry of the host's log holds with its
    /// write request around it (`persist::max_entry_bytes`); larger ones are refused
    /// (`ProposeError::TooLarge`) rather than left for the log to refuse.
    pub max_entry_bytes: usize,
    /// Ticks after which a voter the leader has not heard from stops holding compaction
    /// back (`compactable`); it is sent a snapshot when it returns. None: every voter
    /// holds it back for as long as it is away (only for a group whose snapshots a
    /// follower can install: docs/replication.md, "Partition snapshots").
    pub compact_past_inactive_ticks: Option<u64>,
}

impl GroupConfig {
    /// The defaults: elections after 10-20 ticks, heartbeats every 2, check-quorum and
    /// pre-vote on (an isolated leader steps down; a rejoining node does not disrupt).
    pub fn new(id: u64) -> GroupConfig {
        GroupConfig {
            id,
            election_tick: 10,
            heartbeat_tick: 2,
            fixed_election_timeout: None,
            max_size_per_msg: 1 << 20,
            max_inflight_msgs: 256,
            max_entry_bytes: usize::MAX,
            compact_past_inactive_ticks: None,
        }
    }

    fn raft_config(&self, applied: u64) -> Config {
        let (min_election_tick, max_election_tick) = match self.fixed_election_timeout {
            Some(ticks) => (ticks, ticks + 1),
            None => (0, 0),
        };
        Config {
            id: self.id,
            election_tick: self.election_tick,
            heartbeat_tick: self.heartbeat_tick,
            min_election_tick,
            max_election_tick,
            applied,
            max_size_per_msg: self.max_size_per_msg,
            max_inflight_msgs: self.max_inflight_msgs,
            check_quorum: true,
            pre_vote: true,
            ..Config::default()
        }
    }
}

/// Where a proposal landed in the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Proposal {
    /// Log index of the entry.
    pub index: u64,
    /// Term it was proposed in (Kafka's leader epoch of the batch).
    pub term: u64,
}

/// What became of a proposal (invariant 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Committed: durable on a majority; acks=all may be answered.
    Committed(Proposal),
    /// This replica stopped leading before the proposal committed: it may still commit
    /// under the next leader, or not. Kafka answers NOT_LEADER_OR_FOLLOWER and the client
    /// retries (an idempotent producer's retry is then deduplicated).
    Abandoned(Proposal),
}

/// Why a proposal was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProposeError {
    /// This replica is not the leader (Kafka's NOT_LEADER_OR_FOLLOWER); the leader it
    /// knows of, if any.
    NotLeader { leader: Option<u64> },
    /// The leader refused it (a leadership transfer is under way, or too much is
    /// uncommitted); retry.
    Dropped,
    /// The data is larger than one entry of the log holds (`GroupConfig::max_entry_bytes`).
    TooLarge { size: usize, max: usize },
}

/// The driver of one raft group's replica.
pub struct RaftGroup {
    node: RawNode<LogImage>,
    /// Messages that may be sent now.
    messages: Vec<Message>,
    /// Write requests handed to the host, not yet drained.
    writes: Vec<WriteRequest>,
    /// Numbers of write requests not yet reported durable, in order.
    unsynced: VecDeque<u64>,
    /// Messages waiting for the write of their ready number (invariant 1).
    held: VecDeque<(u64, Vec<Message>)>,
    /// Highest ready number handled, and the highest reported to raft-rs as persisted.
    last_ready: u64,
    persisted_ready: u64,
    committed: Vec<Entry>,
    /// This replica's proposals not yet committed or abandoned.
    pending: BTreeSet<Proposal>,
    outcomes: Vec<Outcome>,
    /// A snapshot received from the leader, for the application to install (invariant 4).
    snapshot: Option<Snapshot>,
    /// The highest index handed out to apply (committed entries or a snapshot): raft-rs
    /// hears it applied once it is also persisted (invariant 4).
    handed_out: u64,
    /// Started from nothing and has no entry yet: votes only for empty logs (invariant 5).
    started_empty: bool,
    /// Times this replica, leading, found a voter's log shorter than its match index, or,
    /// following, got a commit index past its own log (invariant 5).
    lost_logs_seen: u64,
    /// `GroupConfig::max_entry_bytes`.
    max_entry_bytes: usize,
    /// On the leader, ticks since each voter was last heard from (raft-rs's
    /// `recent_active`), for `compact_past_inactive_ticks`.
    inactive_ticks: std::collections::BTreeMap<u64, u64>,
    compact_past_inactive_ticks: Option<u64>,
}

impl RaftGroup {
    /// Starts a replica from its durable log (`LogImage::new(voters)` for a new group).
    /// `applied` is the last index the host applied and will not need again (0: hand
    /// every committed entry out again).
    pub fn recover(config: &GroupConfig, log: LogImage, applied: u64) -> Result<RaftGroup, String> {
        log.check_recovered()?;
        let applied = applied.min(log.hard_state.commit);
        let started_empty = log.last_index() == 0 && log.hard_state.term == 0;
        let logger = slog::Logger::root(slog::Discard, slog::o!());
        let node = RawNode::new(&config.raft_config(applied), log, &logger)
            .map_err(|e| format!("raft group {}: {e}", config.id))?;
        Ok(RaftGroup {
            node,
            messages: Vec::new(),
            writes: Vec::new(),
            unsynced: VecDeque::new(),
            held: VecDeque::new(),
            last_ready: 0,
            persisted_ready: 0,
            committed: Vec::new(),
            pending: BTreeSet::new(),
            outcomes: Vec::new(),
            snapshot: None,
            handed_out: 0,
            started_empty,
            lost_logs_seen: 0,
            max_entry_bytes: config.max_entry_bytes,
            inactive_ticks: std::collections::BTreeMap::new(),
            compact_past_inactive_ticks: config.compact_past_inactive_ticks,
        })
    }

    // -- inputs ---------------------------------------------------------------------------

    /// One tick of the host's clock.
    pub fn tick(&mut self) {
        self.node.tick();
        self.count_inactive_ticks();
        self.handle_ready();
    }

    /// On the leader, counts the ticks each voter has not been heard from in a row (a
    /// voter heard from since raft-rs's last check-quorum round is `recent_active`).
    fn count_inactive_ticks(&mut self) {
        if !self.is_leader() {
            self.inactive_ticks.clear();
            return;
        }
        let me = self.id();
        for (id, progress) in self.node.raft.prs().iter() {
            let ticks = self.inactive_ticks.entry(*id).or_insert(0);
            *ticks = if *id == me || progress.recent_active { 0 } else { *ticks + 1 };
        }
    }

    /// A message from a peer. Errors name a message that cannot be stepped (from a
    /// non-member, or a local-only type): drop it.
    pub fn step(&mut self, mut message: Message) -> raft::Result<()> {
        if self.refuses_vote(&message) {
            return Ok(()); // as if lost: the candidate asks again, or another wins
        }
        let lost = self.survive_lost_log(&mut message);
        let stepped = self.node.step(message);
        self.handle_ready();
        self.messages.extend(lost);
        stepped
    }

    /// Invariant 5, the vote: a replica that started from nothing may have voted in this
    /// term before it lost its data dir, so it stays out of elections among replicas
    /// that have entries until it has some itself (a new cluster's first election is
    /// among empty logs, and goes ahead).
    fn refuses_vote(&mut self, message: &Message) -> bool {
        if self.started_empty && self.last_index() > 0 {
            self.started_empty = false;
        }
        let vote = matches!(
            message.get_msg_type(),
            MessageType::MsgRequestVote | MessageType::MsgRequestPreVote
        );
        self.started_empty && vote && message.index > 0
    }

    /// Invariant 5, the log: what raft-rs would abort on or never leave. Returns a
    /// message to send the leader after the step.
    fn survive_lost_log(&mut self, message: &mut Message) -> Option<Message> {
        match message.get_msg_type() {
            // A heartbeat commits at most what the leader matched here; past this log,
            // this replica lost what it acknowledged. Commit nothing from it, and tell
            // the leader where the log ends: an append rejection (it promises nothing, so
            // it need not wait for a write), as the leader sends no append to a voter it
            // thinks caught up.
            MessageType::MsgHeartbeat if message.commit > self.last_index() => {
                let mut rejection = Message {
                    to: message.from,
                    from: self.id(),
                    term: message.term,
                    index: message.commit,
                    reject: true,
                    reject_hint: self.last_index(),
                    ..Message::default()
                };
                rejection.set_msg_type(MessageType::MsgAppendResponse);
                message.commit = self.commit_index();
                self.lost_logs_seen += 1;
                return Some(rejection);
            }
            MessageType::MsgAppendResponse if message.reject && self.is_leader() => {
                let term = self.term();
                let progress = self.node.raft.mut_prs().get_mut(message.from)?;
                // Not a rejection raft-rs calls stale (below the match index: sent before
                // the follower had it), yet its log ends below that index.
                let current = message.term == term && message.index >= progress.matched;
                if current && message.reject_hint < progress.matched {
                    progress.become_probe();
                    progress.matched = 0;
                    progress.next_idx = message.reject_hint + 1;
                    self.lost_logs_seen += 1;
                }
            }
            _ => {}
        }
        None
    }

    /// Proposes `data` (one produce batch, later): only the leader accepts.
    pub fn propose(&mut self, data: Vec<u8>) -> Result<Proposal, ProposeError> {
        if !self.is_leader() {
            return Err(ProposeError::NotLeader { leader: self.leader_id() });
        }
        if data.len() > self.max_entry_bytes {
            return Err(ProposeError::TooLarge { size: data.len(), max: self.max_entry_bytes });
        }
        let before = self.node.raft.raft_log.last_index();
        if self.node.propose(Vec::new(), data).is_err() {
            return Err(ProposeError::Dropped);
        }
        // A leader appends a proposal to its own log at once: its index is the new last.
        let index = self.node.raft.raft_log.last_index();
        assert_eq!(index, before + 1, "a proposal appends exactly one entry");
        let proposal = Proposal { index, term: self.term() };
        self.pending.insert(proposal);
        self.handle_ready();
        Ok(proposal)
    }

    /// The host made every write request numbered up to `number` durable (invariant 3).
    pub fn durable(&mut self, number: u64) {
        assert!(number <= self.last_ready, "durable({number}) of a write never handed out");
        while self.unsynced.front().is_some_and(|&n| n <= number) {
            self.unsynced.pop_front();
        }
        self.release_durable();
        self.handle_ready();
    }

    // -- outputs --------------------------------------------------------------------------

    /// Messages to send to peers (`Message::to`); losing some is fine, raft retries.
    /// A snapshot handed out here counts as sent: raft-rs probes the follower again after
    /// its next heartbeat, and sends it again if it did not arrive.
    pub fn take_messages(&mut self) -> Vec<Message> {
        let messages = std::mem::take(&mut self.messages);
        for message in &messages {
            if message.get_msg_type() == MessageType::MsgSnapshot {
                self.node.report_snapshot(message.to, SnapshotStatus::Finish);
            }
        }
        messages
    }

    /// A snapshot from the leader to install before the entries `take_committed` hands
    /// out next (invariant 4): its metadata says the index it replaces the log up to,
    /// its data is the application's state (the metadata group's table).
    pub fn take_snapshot(&mut self) -> Option<Snapshot> {
        self.snapshot.take()
    }

    /// Writes to make durable in this order, each reported with `durable(number)`.
    pub fn take_writes(&mut self) -> Vec<WriteRequest> {
        std::mem::take(&mut self.writes)
    }

    /// Entries committed since the last call, in index order (no-op entries of new
    /// leaders included, with empty data).
    pub fn take_committed(&mut self) -> Vec<Entry> {
        std::mem::take(&mut self.committed)
    }

    /// What became of this replica's proposals since the last call.
    pub fn take_outcomes(&mut self) -> Vec<Outcome> {
        std::mem::take(&mut self.outcomes)
    }

    // -- queries --------------------------------------------------------------------------

    /// This replica's raft id.
    pub fn id(&self) -> u64 {
        self.node.raft.id
    }

    /// The current term: Kafka's leader epoch.
    pub fn term(&self) -> u64 {
        self.node.raft.term
    }

    /// The leader this replica knows of in the current term.
    pub fn leader_id(&self) -> Option<u64> {
        Some(self.node.raft.leader_id).filter(|&id| id != raft::INVALID_ID)
    }

    /// Whether this replica leads the group now.
    pub fn is_leader(&self) -> bool {
        self.node.raft.state == StateRole::Leader
    }

    /// The commit index: durable on a majority (the partition's high watermark, later).
    pub fn commit_index(&self) -> u64 {
        self.node.raft.raft_log.committed
    }

    /// Index of the last entry of this replica's log that is durable here (raft-rs's
    /// persisted index: reported with `durable`, lowered when a leader's entries replace
    /// some).
    pub fn persisted_index(&self) -> u64 {
        self.node.raft.raft_log.persisted
    }

    /// Index of the last entry this replica has written (durable or not).
    pub fn last_index(&self) -> u64 {
        self.node.raft.raft_log.last_index()
    }

    /// The replica's log as raft-rs reads it (everything written, durable or not).
    pub fn log(&self) -> &LogImage {
        self.node.store()
    }

    /// On the leader, the highest index every voter has durably and that is committed:
    /// what the group may compact (docs/replication.md, "Log compaction"). None on a
    /// follower, which does not know the others' progress. A voter the leader has not
    /// heard from since its election counts as having nothing (raft-rs's match index 0),
    /// except one not heard from for `compact_past_inactive_ticks`, which holds nothing
    /// back: it gets a snapshot when it returns ("Partition snapshots").
    pub fn compactable(&self) -> Option<u64> {
        if !self.is_leader() {
            return None;
        }
        let long_gone = |id: &u64| {
            let ticks = self.inactive_ticks.get(id).copied().unwrap_or(0);
            self.compact_past_inactive_ticks.is_some_and(|limit| ticks >= limit)
        };
        let voters = self.node.raft.prs().iter().filter(|(id, _)| !long_gone(id));
        let slowest = voters.map(|(_, progress)| progress.matched).min()?;
        Some(slowest.min(self.commit_index()))
    }

    /// On the leader, the voters not known to hold its snapshot point (their match index
    /// is below it): they can only catch up from a snapshot, so the application keeps
    /// its snapshot data fresh for them.
    pub fn voters_needing_snapshot(&self) -> Vec<u64> {
        if !self.is_leader() {
            return Vec::new();
        }
        let snapshot_index = self.log().snapshot_index;
        let prs = self.node.raft.prs().iter();
        prs.filter(|(_, p)| p.matched < snapshot_index).map(|(id, _)| *id).collect()
    }

    /// On the leader, each voter's raft id, match index and whether it was heard from lately
    /// (raft-rs's `recent_active`); None on a follower.
    pub fn progress(&self) -> Option<Vec<(u64, u64, bool)>> {
        if !self.is_leader() {
            return None;
        }
        let prs = self.node.raft.prs().iter();
        Some(prs.map(|(id, p)| (*id, p.matched, p.recent_active)).collect())
    }

    /// Compacts this replica's log up to `to`, no further than what raft-rs applied (so
    /// never an entry it still hands out). Returns whether anything was dropped. The
    /// snapshot data goes with it (`LogImage` invariant 4): set it again.
    pub fn compact(&mut self, to: u64) -> bool {
        let to = to.min(self.node.raft.raft_log.applied);
        self.node.mut_store().compact(to)
    }

    /// Keeps `data`, the application's state as of this replica's snapshot point or a
    /// later index it applied, as what a follower the log was compacted past is sent
    /// (`LogImage` invariant 4). Only for an application that skips entries it already
    /// applied (the metadata group); nothing without a snapshot point.
    pub fn set_snapshot_data(&mut self, data: bytes::Bytes) {
        if self.log().snapshot_index > 0 {
            self.node.mut_store().snapshot_data = data;
        }
    }

    /// Invariant 5's count: lost logs this replica saw (its own or a voter's).
    pub fn lost_logs_seen(&self) -> u64 {
        self.lost_logs_seen
    }

    /// On the leader, hands the leadership to the voter with the highest match index
    /// among those heard from lately (raft-rs's `recent_active`: a voter that is down is
    /// never picked while another is up), the lowest id on a tie (raft-rs's leader
    /// transfer: the target is caught up first, then campaigns at once; proposals are
    /// refused meanwhile, and the transfer is abandoned after an election timeout).
    /// Returns the target, or None on a follower or a group of one.
    pub fn transfer_leadership(&mut self) -> Option<u64> {
        if !self.is_leader() {
            return None;
        }
        let me = self.id();
        let progress = self.node.raft.prs().iter().filter(|(id, _)| **id != me);
        let rank = |(id, p): &(&u64, &raft::Progress)| {
            (p.recent_active, p.matched, std::cmp::Reverse(**id))
        };
        let (to, _) = progress.max_by_key(rank)?;
        let to = *to;
        self.transfer_leadership_to(to).then_some(to)
    }

    /// Hands the leadership to voter `to` (a raft id): raft-rs brings it up to date, then
    /// tells it to campaign at once; proposals are refused meanwhile (`Dropped`). False if
    /// this replica does not lead or `to` is not another voter.
    pub fn transfer_leadership_to(&mut self, to: u64) -> bool {
        if !self.is_leader() || to == self.id() || self.node.raft.prs().get(to).is_none() {
            return false;
        }
        self.node.transfer_leader(to);
        self.handle_ready();
        true
    }

    /// Starts an election now rather than after an election timeout (a new group's
    /// preferred replica: `partition_group`). With pre-vote it disrupts no group that has
    /// a live leader: the voters that hear from one refuse it.
    pub fn campaign(&mut self) {
        // Refused only for a replica that cannot be leader (not a voter): nothing to do.
        let _ = self.node.campaign();
        self.handle_ready();
    }

    // -- the ready loop -------------------------------------------------------------------

    /// Turns everything raft-rs has ready into outputs.
    fn handle_ready(&mut self) {
        while self.node.has_ready() {
            let mut ready = self.node.ready();
            let number = ready.number();
            self.messages.extend(ready.take_messages());
            let snapshot = Some(ready.snapshot()).filter(|s| !s.is_empty()).cloned();
            let write = WriteRequest {
                number,
                hard_state: ready.hs().cloned(),
                entries: ready.take_entries(),
                snapshot,
            };
            if let Some(snapshot) = &write.snapshot {
                // Invariant 4: what was committed before it is in it.
                self.committed.clear();
                self.handed_out = snapshot.get_metadata().index;
                self.snapshot = Some(snapshot.clone());
            }
            if !write.is_empty() {
                // raft-rs reads what it wrote before it is durable.
                self.node.mut_store().apply(&write);
                self.unsynced.push_back(number);
                self.writes.push(write);
            }
            // Invariant 1's exception, taken out in place (no second vector per ready).
            let mut held = ready.take_persisted_messages();
            let alive = |m: &mut Message| m.get_msg_type() == MessageType::MsgHeartbeatResponse;
            self.messages.extend(held.extract_if(.., alive));
            if !held.is_empty() {
                self.held.push_back((number, held));
            }
            let committed = ready.take_committed_entries();
            self.node.advance_append_async(ready);
            if let Some(last) = committed.last() {
                self.handed_out = last.index;
            }
            self.advance_apply();
            self.last_ready = number;
            self.deliver_committed(committed);
            self.release_durable();
        }
        self.abandon_if_deposed();
    }

    /// Invariant 2's last case: a deposed leader gives up its pending proposals.
    fn abandon_if_deposed(&mut self) {
        let (leading, term) = (self.is_leader(), self.term());
        let deposed = !leading || self.pending.iter().any(|p| p.term != term);
        if deposed && !self.pending.is_empty() {
            let abandoned = std::mem::take(&mut self.pending);
            self.outcomes.extend(abandoned.into_iter().map(Outcome::Abandoned));
        }
    }

    /// Everything up to the first unsynced write is durable: tell raft-rs, release what
    /// waited for it (invariant 1).
    fn release_durable(&mut self) {
        let durable = match self.unsynced.front() {
            Some(&first_unsynced) => first_unsynced - 1,
            None => self.last_ready,
        };
        if durable > self.persisted_ready {
            self.node.on_persist_ready(durable);
            self.persisted_ready = durable;
            self.advance_apply();
        }
        while self.held.front().is_some_and(|(n, _)| *n <= durable) {
            let (_, messages) = self.held.pop_front().expect("checked above");
            self.messages.extend(messages);
        }
    }

    /// Tells raft-rs what was handed out is applied, up to what it has persisted: a
    /// snapshot is handed out before it is durable (invariant 4), entries never are.
    fn advance_apply(&mut self) {
        let log = &self.node.raft.raft_log;
        let applied = self.handed_out.min(log.persisted);
        if applied > log.applied {
            self.node.advance_apply_to(applied);
        }
    }

    /// Resolves the proposals the committed entries cover (invariant 2).
    fn deliver_committed(&mut self, committed: Vec<Entry>) {
        let Some(last) = committed.last() else { return };
        let first_index = committed[0].index;
        let beyond = Proposal { index: last.index + 1, term: 0 };
        let still_pending = self.pending.split_off(&beyond);
        for proposal in std::mem::replace(&mut self.pending, still_pending) {
            // A proposal lands past the commit index, so past everything handed out before.
            assert!(proposal.index >= first_index, "{proposal:?} committed before {first_index}");
            let entry = &committed[(proposal.index - first_index) as usize];
            assert_eq!(entry.term, proposal.term, "{proposal:?} overwritten while leading");
            self.outcomes.push(Outcome::Committed(proposal));
        }
        self.committed.extend(committed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use raft::eraftpb::MessageType;

    /// Three replicas; replica 1 times out first, so it is elected first, then replica 2
    /// (equal fixed timeouts would split every vote in lockstep).
    fn three_replicas() -> Vec<RaftGroup> {
        (1..=3)
            .map(|id| {
                let mut config = GroupConfig::new(id);
                config.fixed_election_timeout = Some(10 + 7 * (id as usize - 1));
                RaftGroup::recover(&config, LogImage::new(&[1, 2, 3]), 0).unwrap()
            })
            .collect()
    }

    /// Writes made durable at once and messages delivered until nothing moves; messages
    /// to a replica past the end of `groups` are lost.
    fn settle(groups: &mut [RaftGroup]) {
        settle_keeping(groups, |_| false);
    }

    /// `settle`, except that the messages `keep` picks are not delivered but returned.
    fn settle_keeping(groups: &mut [RaftGroup], keep: impl Fn(&Message) -> bool) -> Vec<Message> {
        let mut kept = Vec::new();
        loop {
            let mut mail = Vec::new();
            for group in groups.iter_mut() {
                if let Some(last) = group.take_writes().last() {
                    group.durable(last.number);
                }
                mail.extend(group.take_messages());
            }
            let (picked, mail): (Vec<_>, Vec<_>) = mail.into_iter().partition(|m| keep(m));
            kept.extend(picked);
            if mail.is_empty() {
                return kept;
            }
            for message in mail {
                if let Some(to) = groups.get_mut(message.to as usize - 1) {
                    to.step(message).unwrap();
                }
            }
        }
    }

    fn elect_replica_1() -> Vec<RaftGroup> {
        let mut groups = three_replicas();
        for _ in 0..30 {
            groups.iter_mut().for_each(RaftGroup::tick);
            settle(&mut groups);
        }
        assert!(groups[0].is_leader());
        for group in groups.iter_mut() {
            group.take_committed();
        }
        groups
    }

    #[test]
    fn a_follower_refuses_proposals_and_names_the_leader() {
        let mut groups = elect_replica_1();
        assert_eq!(groups[1].leader_id(), Some(1));
        assert_eq!(groups[1].term(), groups[0].term());
        let refused = groups[1].propose(b"batch".to_vec());
        assert_eq!(refused, Err(ProposeError::NotLeader { leader: Some(1) }));
    }

    #[test]
    fn a_follower_whose_writes_are_slow_still_answers_heartbeats_and_the_leader_stays() {
        let mut groups = elect_replica_1();
        let term = groups[0].term();
        let proposal = groups[0].propose(b"batch".to_vec()).unwrap();
        // Several election timeouts in which the leader's writes are durable at once and
        // the followers' never: their append responses wait (invariant 1), their
        // heartbeat responses do not.
        for _ in 0..60 {
            groups.iter_mut().for_each(RaftGroup::tick);
            loop {
                if let Some(last) = groups[0].take_writes().last() {
                    groups[0].durable(last.number);
                }
                groups[1..].iter_mut().for_each(|g| drop(g.take_writes()));
                let mail: Vec<Message> =
                    groups.iter_mut().flat_map(|g| g.take_messages()).collect();
                if mail.is_empty() {
                    break;
                }
                for message in mail {
                    groups[message.to as usize - 1].step(message).unwrap();
                }
            }
        }
        assert!(groups[0].is_leader(), "check-quorum stepped the leader down");
        assert_eq!(groups[0].term(), term);
        assert!(groups[0].commit_index() < proposal.index, "committed without a durable copy");
    }

    #[test]
    fn a_proposal_larger_than_one_log_entry_holds_is_refused_and_appends_nothing() {
        let mut groups = elect_replica_1();
        groups[0].max_entry_bytes = 5;
        let last = groups[0].last_index();
        let refused = groups[0].propose(b"batch!".to_vec());
        assert_eq!(refused, Err(ProposeError::TooLarge { size: 6, max: 5 }));
        assert_eq!(groups[0].last_index(), last);
        assert!(groups[0].propose(b"batch".to_vec()).is_ok(), "at the bound it is taken");
    }

    #[test]
    fn a_follower_acknowledges_an_append_only_once_its_write_is_durable() {
        let mut groups = elect_replica_1();
        let proposal = groups[0].propose(b"batch".to_vec()).unwrap();
        let appends = groups[0].take_messages();
        let to_2 = appends.into_iter().find(|m| m.to == 2).expect("an append to replica 2");
        assert_eq!(to_2.get_msg_type(), MessageType::MsgAppend);
        groups[1].step(to_2).unwrap();
        let writes = groups[1].take_writes();
        assert_eq!(writes.len(), 1);
        assert_eq!(writes[0].entries.last().unwrap().index, proposal.index);
        assert!(groups[1].take_messages().is_empty(), "acknowledged before durable");
        groups[1].durable(writes[0].number);
        let acks = groups[1].take_messages();
        assert_eq!(acks.len(), 1);
        assert_eq!(acks[0].get_msg_type(), MessageType::MsgAppendResponse);
        assert_eq!(acks[0].index, proposal.index);
    }

    /// acks=1 is answered when the leader's persisted index passes its entry
    /// (`crate::leader_acks` invariant 1): never before the write is durable.
    #[test]
    fn the_leaders_persisted_index_passes_a_proposal_only_once_its_write_is_durable() {
        let mut groups = elect_replica_1();
        let proposal = groups[0].propose(b"batch".to_vec()).unwrap();
        let writes = groups[0].take_writes();
        assert!(groups[0].persisted_index() < proposal.index, "persisted before durable");
        groups[0].durable(writes.last().unwrap().number);
        assert!(groups[0].persisted_index() >= proposal.index);
    }

    #[test]
    fn a_proposal_commits_only_when_a_majority_including_the_leader_is_durable() {
        let mut groups = elect_replica_1();
        let proposal = groups[0].propose(b"batch".to_vec()).unwrap();
        let leader_writes = groups[0].take_writes();
        let to_2 = groups[0].take_messages().into_iter().find(|m| m.to == 2).unwrap();
        groups[1].step(to_2).unwrap();
        let number = groups[1].take_writes().last().unwrap().number;
        groups[1].durable(number);
        for ack in groups[1].take_messages() {
            groups[0].step(ack).unwrap();
        }
        // Replica 2 is durable, the leader's own write is not: no majority yet.
        assert!(groups[0].take_outcomes().is_empty());
        assert!(groups[0].commit_index() < proposal.index);
        groups[0].durable(leader_writes.last().unwrap().number);
        assert_eq!(groups[0].take_outcomes(), vec![Outcome::Committed(proposal)]);
        assert_eq!(groups[0].commit_index(), proposal.index);
        let committed = groups[0].take_committed();
        assert_eq!(committed.last().unwrap().data.as_ref(), b"batch");
    }

    #[test]
    fn only_what_every_voter_has_is_compactable_and_a_compacted_leader_still_serves() {
        let mut groups = elect_replica_1();
        assert_eq!(groups[1].compactable(), None, "a follower does not know the others");
        // Replica 3 hears nothing: what it lacks is never compactable.
        let cut_off = groups.remove(2);
        let mut proposals = Vec::new();
        for k in 0..5 {
            proposals.push(groups[0].propose(format!("batch {k}").into_bytes()).unwrap());
            settle(&mut groups[..2]);
        }
        let last = proposals.last().unwrap().index;
        assert_eq!(groups[0].commit_index(), last);
        let held_back = groups[0].compactable().unwrap();
        assert!(held_back < proposals[0].index, "{held_back} compactable, replica 3 lacks it");
        groups.push(cut_off);
        for _ in 0..4 {
            groups.iter_mut().for_each(RaftGroup::tick);
            settle(&mut groups);
        }
        assert_eq!(groups[2].log().last_index(), last, "replica 3 caught up from entries");
        assert_eq!(groups[0].compactable(), Some(last));
        for group in groups.iter_mut() {
            group.take_committed();
            assert!(group.compact(last - 1));
            assert_eq!(group.log().snapshot_index, last - 1);
        }
        // The compacted leader keeps replicating: a new entry reaches every replica.
        let next = groups[0].propose(b"after".to_vec()).unwrap();
        settle(&mut groups);
        for group in groups.iter_mut() {
            assert_eq!(group.commit_index(), next.index);
            assert_eq!(group.take_committed().last().unwrap().data.as_ref(), b"after");
        }
    }

    #[test]
    fn a_voter_long_gone_stops_holding_compaction_back_and_gets_a_snapshot_back() {
        let mut groups: Vec<RaftGroup> = (1..=3)
            .map(|id| {
                let mut config = GroupConfig::new(id);
                config.fixed_election_timeout = Some(10 + 7 * (id as usize - 1));
                config.compact_past_inactive_ticks = Some(40);
                RaftGroup::recover(&config, LogImage::new(&[1, 2, 3]), 0).unwrap()
            })
            .collect();
        for _ in 0..30 {
            groups.iter_mut().for_each(RaftGroup::tick);
            settle(&mut groups);
        }
        assert!(groups[0].is_leader());
        let cut_off = groups.remove(2);
        let first = groups[0].propose(b"batch 0".to_vec()).unwrap();
        settle(&mut groups[..2]);
        let mut ticks = 0;
        while groups[0].compactable() < Some(first.index) {
            // raft-rs notes a voter inactive at its next check-quorum round (an election
            // timeout, 10 ticks here), then the limit counts.
            assert!(ticks < 40 + 10, "held back past the limit: {ticks} ticks");
            groups.iter_mut().for_each(RaftGroup::tick);
            settle(&mut groups[..2]);
            ticks += 1;
        }
        assert!(ticks >= 40, "a voter away for {ticks} ticks held nothing back");
        let last = groups[0].commit_index();
        assert_eq!(groups[0].compactable(), Some(last));
        for group in groups.iter_mut() {
            group.take_committed();
            assert!(group.compact(last));
        }
        assert_eq!(groups[0].voters_needing_snapshot(), vec![3]);
        groups[0].set_snapshot_data(bytes::Bytes::from_static(b"manifest"));
        groups.push(cut_off);
        let mut installed = Vec::new();
        for _ in 0..20 {
            groups.iter_mut().for_each(RaftGroup::tick);
            settle(&mut groups);
            installed.extend(groups[2].take_snapshot());
        }
        assert_eq!(installed.len(), 1, "the returning voter gets the snapshot");
        assert_eq!(installed[0].get_metadata().index, last);
        assert!(groups[0].voters_needing_snapshot().is_empty());
        assert_eq!(groups[0].compactable(), Some(last), "it counts again once back");
    }

    /// Replica 3 with its data dir lost: a new empty log, as at a node's first start.
    fn wiped_replica_3() -> RaftGroup {
        let mut config = GroupConfig::new(3);
        config.fixed_election_timeout = Some(10 + 7 * 2);
        RaftGroup::recover(&config, LogImage::new(&[1, 2, 3]), 0).unwrap()
    }

    /// One entry committed, every log compacted up to it, the leader's snapshot data set to
    /// `data` (none if empty), then replica 3's data dir lost; the compaction index.
    fn compacted_then_replica_3_wiped(data: &'static [u8]) -> (Vec<RaftGroup>, u64) {
        let mut groups = elect_replica_1();
        groups[0].propose(b"batch".to_vec()).unwrap();
        settle(&mut groups);
        let last = groups[0].commit_index();
        for group in groups.iter_mut() {
            group.take_committed();
            assert!(group.compact(last));
        }
        groups[0].set_snapshot_data(bytes::Bytes::from_static(data));
        groups[2] = wiped_replica_3();
        (groups, last)
    }

    #[test]
    fn a_voter_that_lost_its_log_installs_the_leaders_snapshot_and_replicates_after_it() {
        let mut groups = elect_replica_1();
        for k in 0..5 {
            groups[0].propose(format!("batch {k}").into_bytes()).unwrap();
            settle(&mut groups);
        }
        let last = groups[0].commit_index();
        // Every replica applied and compacted; the leader keeps its state as snapshot data.
        for group in groups.iter_mut() {
            group.take_committed();
            assert!(group.compact(last));
        }
        let state = bytes::Bytes::from_static(b"the state at the compaction point");
        assert_eq!(groups[0].log().snapshot_to_send(), None, "compaction clears the data");
        groups[0].set_snapshot_data(state.clone());
        groups[2] = wiped_replica_3();
        // Replica 3's writes are made durable at once and kept, to replay them after.
        let (mut installed, mut written) = (Vec::new(), Vec::new());
        for _ in 0..20 {
            groups.iter_mut().for_each(RaftGroup::tick);
            loop {
                let writes = groups[2].take_writes();
                if let Some(last) = writes.last() {
                    groups[2].durable(last.number);
                }
                written.extend(writes);
                installed.extend(groups[2].take_snapshot());
                let mut mail = Vec::new();
                for group in groups.iter_mut() {
                    if let Some(last) = group.take_writes().last() {
                        group.durable(last.number);
                    }
                    mail.extend(group.take_messages());
                }
                if mail.is_empty() && groups[2].take_writes().is_empty() {
                    break;
                }
                for message in mail {
                    groups[message.to as usize - 1].step(message).unwrap();
                }
            }
        }
        assert!(groups[0].lost_logs_seen() > 0, "the leader saw replica 3's log end below");
        assert!(groups[2].lost_logs_seen() > 0, "replica 3 got a commit past its log");
        assert_eq!(installed.len(), 1, "one snapshot installed");
        assert_eq!((installed[0].get_metadata().index, &installed[0].data), (last, &state));
        assert!(groups[2].take_committed().is_empty(), "nothing at or below the snapshot");
        let (leader, wiped) = (groups[0].log(), groups[2].log());
        assert_eq!((wiped.snapshot_index, wiped.snapshot_term), (last, leader.snapshot_term));
        assert_eq!(wiped.hard_state.term, leader.hard_state.term);
        assert_eq!(wiped.hard_state.commit, last);
        assert_eq!(wiped.snapshot_to_send().unwrap().data, state, "it can send it on");
        // Durable: replaying what replica 3 wrote gives its log back.
        let mut replayed = LogImage::new(&[1, 2, 3]);
        written.iter().for_each(|write| replayed.apply(write));
        assert_eq!(&replayed, groups[2].log());
        // Later entries replicate to it as to the others.
        let next = groups[0].propose(b"after".to_vec()).unwrap();
        settle(&mut groups);
        assert_eq!(groups[0].compactable(), Some(next.index), "replica 3 caught up");
        let after = groups[2].take_committed();
        assert_eq!(after.iter().map(|e| e.index).collect::<Vec<_>>(), vec![next.index]);
        assert_eq!(after[0].data.as_ref(), b"after");
    }

    #[test]
    fn a_follower_acknowledges_a_snapshot_only_once_its_write_is_durable() {
        let (mut groups, last) = compacted_then_replica_3_wiped(b"state");
        // Deliver everything but the snapshot, which is kept.
        let mut snapshots = Vec::new();
        for _ in 0..20 {
            groups.iter_mut().for_each(RaftGroup::tick);
            let is_snapshot = |m: &Message| m.get_msg_type() == MessageType::MsgSnapshot;
            snapshots.extend(settle_keeping(&mut groups, is_snapshot));
        }
        let snapshot = snapshots.into_iter().next().expect("the leader sent a snapshot");
        groups[2].step(snapshot).unwrap();
        let writes = groups[2].take_writes();
        assert_eq!(writes.len(), 1);
        assert_eq!(writes[0].snapshot.as_ref().unwrap().get_metadata().index, last);
        assert!(groups[2].take_messages().is_empty(), "acknowledged before durable");
        assert!(groups[2].take_snapshot().is_some(), "handed out to install at once");
        groups[2].durable(writes[0].number);
        let acks = groups[2].take_messages();
        assert_eq!(acks.len(), 1);
        assert_eq!(acks[0].get_msg_type(), MessageType::MsgAppendResponse);
        assert_eq!((acks[0].index, acks[0].reject), (last, false));
    }

    #[test]
    fn a_replica_that_started_from_nothing_votes_only_among_empty_logs() {
        let mut wiped = wiped_replica_3();
        let vote = |index| {
            let mut m =
                Message { from: 1, to: 3, term: 9, index, log_term: 8, ..Default::default() };
            m.set_msg_type(MessageType::MsgRequestVote);
            m
        };
        wiped.step(vote(40)).unwrap();
        assert!(wiped.take_messages().is_empty() && wiped.take_writes().is_empty());
        assert_eq!(wiped.term(), 0, "the candidate's term is not even adopted");
        // A new cluster's first election: every log empty, the vote is given.
        wiped.step(Message { index: 0, log_term: 0, ..vote(0) }).unwrap();
        let writes = wiped.take_writes();
        wiped.durable(writes.last().unwrap().number);
        let granted = wiped.take_messages();
        assert_eq!(granted.len(), 1);
        assert_eq!(granted[0].get_msg_type(), MessageType::MsgRequestVoteResponse);
        assert!(!granted[0].reject);
    }

    #[test]
    fn a_partition_groups_log_compacted_past_a_voter_sends_no_snapshot() {
        let (mut groups, _) = compacted_then_replica_3_wiped(b"");
        for _ in 0..20 {
            groups.iter_mut().for_each(RaftGroup::tick);
            settle(&mut groups);
        }
        assert_eq!(groups[2].log().last_index(), 0, "no data: SnapshotTemporarilyUnavailable");
        assert!(groups[2].take_snapshot().is_none());
        assert_eq!(groups[0].compactable(), Some(0), "it holds compaction back");
    }

    #[test]
    fn a_leader_hands_its_leadership_to_the_most_caught_up_voter() {
        let mut groups = elect_replica_1();
        assert_eq!(groups[1].transfer_leadership(), None, "only the leader transfers");
        let term = groups[0].term();
        // Replica 3 misses the last entry: replica 2 is the one caught up.
        let cut_off = groups.remove(2);
        groups[0].propose(b"batch".to_vec()).unwrap();
        settle(&mut groups[..2]);
        groups.push(cut_off);
        assert_eq!(groups[0].transfer_leadership(), Some(2));
        settle(&mut groups);
        assert!(groups[1].is_leader() && !groups[0].is_leader());
        assert_eq!(groups[0].leader_id(), Some(2));
        assert_eq!(groups[1].term(), term + 1, "one campaign, no election timeout");
    }

    #[test]
    fn a_deposed_leader_abandons_its_pending_proposals() {
        let mut groups = elect_replica_1();
        let proposal = groups[0].propose(b"batch".to_vec()).unwrap();
        groups[0].take_messages(); // lost: replicas 2 and 3 never see the proposal
                                   // Replica 2 times out first, campaigns in a later term and wins with replica 3's vote.
        for _ in 0..60 {
            groups[1].tick();
            groups[2].tick();
            for message in groups[1].take_messages().into_iter().chain(groups[2].take_messages()) {
                let to = message.to as usize - 1;
                groups[to].step(message).unwrap();
            }
            for group in groups.iter_mut() {
                if let Some(last) = group.take_writes().last() {
                    group.durable(last.number);
                }
            }
        }
        assert!(groups[1].is_leader());
        settle(&mut groups);
        assert!(!groups[0].is_leader());
        assert_eq!(groups[0].take_outcomes(), vec![Outcome::Abandoned(proposal)]);
    }
}
