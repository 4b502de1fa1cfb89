//! `GroupHost`: one shard's replication event loop. It owns the shard's `Transport` and
//! the raft groups the shard replicates, steps each group with the messages the transport
//! delivers for it, ticks every group on a timer, and after every input drains the
//! group: its messages go to the transport, its write requests, committed entries and
//! proposal outcomes to the group's `GroupSink` (`persist::ShardLogSink`: the shard log,
//! and the applier of the metadata group or of the shard's partition groups).
//! When a sink's writes ride a shard log flush, the host's durability task reports them
//! to the group when that flush's `Durable` resolves.
//!
//! Runs on the shard that owns it, on its glommio executor; shard-local (`Rc`, `RefCell`,
//! `Cell`; no borrow lives across an `.await`). Not a hot path yet: one call of a group
//! per message, and every drain allocates (as `RaftGroup` does).
//!
//! Raft ids are node ids plus one (`raft_id`): raft-rs reserves id 0, and node 0 is a valid
//! node.
//!
//! Leader notices (`notice.rs`) travel as messages of the reserved group `NOTICE_GROUP`:
//! `send_notice` queues one for a peer, and what arrives is kept, not stepped, until the
//! shard takes it (`take_notices`; at most `MAX_PENDING_NOTICES`, the oldest dropped).
//! Partition snapshot pulls (`pull.rs`) travel alike under `PULL_GROUP`: `send_pull`, and
//! what arrives goes to the receiver the shard took once (`take_pull_receiver`; at most
//! `MAX_PENDING_PULLS` waiting, more are dropped and counted: the puller asks again).
//! Calls between nodes (`node_rpc.rs`: transaction markers, KIP-890 verifications,
//! forwarded topic auto-creations) travel alike under `NODE_RPC_GROUP`: `send_node_rpc`, and `take_node_rpc_receiver` (at most
//! `MAX_PENDING_NODE_RPCS` waiting, more are dropped and counted: the asker asks again).
//! A `MsgSnapshot` for a group whose sink holds it (`GroupSink::hold_snapshot`: a
//! partition group, whose records are pulled first) is not stepped here; the sink steps
//! it later through `with_group`.
//!
//! Invariants:
//! 1. A group's outputs are drained after every input the host gives it (a message, a
//!    tick, `durable`, a call through `with_group`), so nothing it emits waits for another
//!    input and nothing accumulates in it.
//! 2. A message for a group this shard does not host, or one raft refuses, is dropped and
//!    counted, never a panic: raft tolerates lost messages, and a peer may host a group
//!    this node does not have yet.
//! 3. Dropping the `GroupHost` stops its tasks and its transport; `stop` stops its tasks
//!    and every input at once (a shard shutting down, before its log closes), after which
//!    no group emits anything: no write reaches the closing log.
//! 4. A group hears `durable(number)` for a write on the shard log only after the
//!    flusher's `Durable` for that write's entry resolved Ok (a completed fdatasync
//!    covers it), in log order; a write whose flush failed is never reported.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::io;
use std::rc::Rc;
use std::time::Duration;

use glommio::channels::local_channel::{self, LocalReceiver, LocalSender};
use glommio::Task;
use raft::eraftpb::{Entry, Snapshot};
use shardlog_storage::Durable;

use super::group::{Outcome, RaftGroup};
use super::log::{LogImage, WriteRequest};
use super::node_rpc::NODE_RPC_GROUP;
use super::notice::NOTICE_GROUP;
use super::pull::PULL_GROUP;
use super::transport::{Inbound, Transport, TransportConfig, UnknownPeer};
use super::Message;

/// The tick interval of the broker's groups: raft-rs's elections after 10-20 ticks are
/// then 1-2 s, heartbeats every 200 ms (`GroupConfig::new`; docs/replication.md's
/// figures assume it).
pub const TICK: Duration = Duration::from_millis(100);

/// Leader notice messages kept until the shard takes them (it does every tick; each
/// peer sends one per tick at most).
const MAX_PENDING_NOTICES: usize = 1024;

/// Pull messages waiting for the shard's pull task (a follower has one request in flight
/// per group it catches up, a leader answers each).
const MAX_PENDING_PULLS: usize = 1024;

/// Calls between nodes waiting for the shard's call task (one per marker, verification or
/// forwarded auto-creation in flight with another node).
const MAX_PENDING_NODE_RPCS: usize = 1024;

/// The raft id of node `node_id` in every group (raft-rs reserves 0).
pub fn raft_id(node_id: u64) -> u64 {
    node_id + 1
}

/// The node of raft id `raft_id`; `None` for raft's reserved 0.
pub fn node_of(raft_id: u64) -> Option<u64> {
    raft_id.checked_sub(1)
}

/// What a sink did with a group's write requests.
pub enum Written {
    /// They are durable already, up to this `number` (a sink that keeps them in memory).
    Durable(u64),
    /// The sink reports them later with `GroupHost::durable`.
    Later,
    /// They are entries of the shard log: durable, up to `number`, once `durable` (the
    /// flush covering the last of them) resolves; the host reports it then (invariant 4).
    OnFlush { number: u64, durable: Durable },
    /// The sink could not take them (its log stopped): they are never reported durable.
    Failed,
}

/// Where a hosted group's outputs other than messages go.
pub trait GroupSink {
    /// Takes the group's next write requests, in order, to make durable.
    fn write(&mut self, writes: Vec<WriteRequest>) -> Written;

    /// Entries committed since the last call, in index order, and what became of this
    /// replica's proposals.
    fn apply(&mut self, committed: Vec<Entry>, outcomes: Vec<Outcome>);

    /// A snapshot from the leader: the application's state replaces everything up to its
    /// index, before any entry `apply` gets after this call (`RaftGroup` invariant 4).
    /// The metadata group installs its table here (docs/replication.md, "Metadata
    /// snapshots"); a partition group installed its manifest before the message was
    /// stepped (`hold_snapshot`); a sink of a group that never has one keeps this
    /// default, a bug if called.
    fn install(&mut self, snapshot: Snapshot) {
        let index = snapshot.get_metadata().index;
        panic!("a raft snapshot at {index} for a group whose application cannot install one");
    }

    /// The replica leads the group in `term` and its log is durable up to `index` (its
    /// persisted index grew): acks=1 may be answered (`crate::leader_acks`). By default
    /// nothing.
    fn persisted(&mut self, _index: u64, _term: u64) {}

    /// A `MsgSnapshot` that arrived for the group: the sink may keep it (returns None) to
    /// step it itself once its application fetched what the snapshot names (a partition
    /// group's records: docs/replication.md, "Partition snapshots"); by default it is
    /// stepped at once.
    fn hold_snapshot(&mut self, message: Message) -> Option<Message> {
        Some(message)
    }
}

/// Counters of a host since its start.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostStats {
    /// Ticks given to the groups (one per tick interval, whatever the number of groups).
    pub ticks: u64,
    /// Messages stepped into a group that accepted them.
    pub messages_stepped: u64,
    /// Messages for a group this shard does not host (invariant 2).
    pub dropped_unknown_group: u64,
    /// Messages a group refused (from a non-member, a local-only type).
    pub dropped_refused: u64,
    /// Messages a group addressed to a node that is not a peer (a misconfigured group).
    pub dropped_unknown_peer: u64,
    /// Leader notice messages received, and those dropped untaken (`MAX_PENDING_NOTICES`).
    pub notices_received: u64,
    pub dropped_notices: u64,
    /// Pull messages dropped because `MAX_PENDING_PULLS` were waiting.
    pub dropped_pulls: u64,
    /// Calls between nodes dropped because `MAX_PENDING_NODE_RPCS` were waiting.
    pub dropped_node_rpcs: u64,
}

/// A group id hosted twice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupExists(pub u64);

impl std::fmt::Display for GroupExists {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "raft group {} is hosted already", self.0)
    }
}

impl std::error::Error for GroupExists {}

/// One shard's replication event loop (module docs). Dropping it stops it (invariant 3).
pub struct GroupHost {
    inner: Rc<Inner>,
    /// The receive loop, the ticker and the durability task; dropping a glommio `Task`
    /// cancels it (`stop` does).
    tasks: RefCell<Vec<Task<()>>>,
}

struct Inner {
    transport: Transport,
    groups: RefCell<BTreeMap<u64, Hosted>>,
    stats: Cell<HostStats>,
    /// Set by `GroupHost::stop` (invariant 3).
    stopped: Cell<bool>,
    /// Leader notices received and not taken yet: (sender node, notice bytes).
    notices: RefCell<Vec<(u64, bytes::Bytes)>>,
    /// Pull messages to the shard's pull task: (sender node, pull bytes).
    pulls: LocalSender<(u64, bytes::Bytes)>,
    pull_receiver: RefCell<Option<LocalReceiver<(u64, bytes::Bytes)>>>,
    /// Calls between nodes to the shard's call task: (sender node, call bytes).
    node_rpcs: LocalSender<(u64, bytes::Bytes)>,
    node_rpc_receiver: RefCell<Option<LocalReceiver<(u64, bytes::Bytes)>>>,
    /// (group, number, flush) of writes on the shard log not yet reported, in log order
    /// (so in the order their flushes complete), to the durability task. Bounded by what
    /// the groups write while one flush is in flight.
    flushes: LocalSender<(u64, u64, Durable)>,
}

struct Hosted {
    group: RaftGroup,
    sink: Box<dyn GroupSink>,
    /// The persisted index last told to the sink (`GroupSink::persisted`).
    persisted_told: u64,
}

impl GroupHost {
    /// Starts the transport (binding its listener) and the host's loops on the current
    /// executor; the groups tick every `tick`.
    pub fn start(config: TransportConfig, tick: Duration) -> io::Result<GroupHost> {
        let (transport, inbound) = Transport::start(config)?;
        let (flushes, flushed) = local_channel::new_unbounded();
        let (pulls, pull_receiver) = local_channel::new_bounded(MAX_PENDING_PULLS);
        let (node_rpcs, node_rpc_receiver) = local_channel::new_bounded(MAX_PENDING_NODE_RPCS);
        let inner = Rc::new(Inner {
            transport,
            groups: RefCell::new(BTreeMap::new()),
            stats: Cell::new(HostStats::default()),
            stopped: Cell::new(false),
            notices: RefCell::new(Vec::new()),
            pulls,
            pull_receiver: RefCell::new(Some(pull_receiver)),
            node_rpcs,
            node_rpc_receiver: RefCell::new(Some(node_rpc_receiver)),
            flushes,
        });
        let tasks = vec![
            glommio::spawn_local(receive(inner.clone(), inbound)),
            glommio::spawn_local(ticker(inner.clone(), tick)),
            glommio::spawn_local(report_flushes(inner.clone(), flushed)),
        ];
        Ok(GroupHost { inner, tasks: RefCell::new(tasks) })
    }

    /// Stops the host for good (invariant 3): its tasks end, `with_group` answers `None`
    /// and nothing is drained from a group again. For a shard shutting down: its groups
    /// then write nothing more to the log it is about to close (peers see a silent
    /// replica, as when it dies, and elect another leader if it led).
    pub fn stop(&self) {
        self.inner.stopped.set(true);
        self.tasks.borrow_mut().clear();
    }

    /// Hosts `group` as group `id` (never `NOTICE_GROUP`, reserved: its messages would go
    /// to the notices); its outputs go to `sink` from now on.
    pub fn add_group(
        &self,
        id: u64,
        group: RaftGroup,
        sink: Box<dyn GroupSink>,
    ) -> Result<(), GroupExists> {
        let mut groups = self.inner.groups.borrow_mut();
        if groups.contains_key(&id) {
            return Err(GroupExists(id));
        }
        let hosted = groups.entry(id).or_insert(Hosted { group, sink, persisted_told: 0 });
        self.inner.drain(id, hosted);
        Ok(())
    }

    /// Calls `f` on group `id` (a proposal, a query), then drains the group (invariant
    /// 1). `None` if the shard does not host it. `f` must not call back into the host.
    pub fn with_group<R>(&self, id: u64, f: impl FnOnce(&mut RaftGroup) -> R) -> Option<R> {
        if self.inner.stopped.get() {
            return None;
        }
        let mut groups = self.inner.groups.borrow_mut();
        let hosted = groups.get_mut(&id)?;
        let result = f(&mut hosted.group);
        self.inner.drain(id, hosted);
        Some(result)
    }

    /// The sink of group `id` made its write requests up to `number` durable.
    pub fn durable(&self, id: u64, number: u64) {
        let hosted = self.with_group(id, |group| group.durable(number));
        let known = hosted.is_some() || self.inner.stopped.get();
        assert!(known, "durable({number}) for raft group {id}, which is not hosted");
    }

    /// Calls `f` with every hosted group's log (id, image), in id order, for a read (no
    /// input: nothing to drain); the logs are borrowed, not copied. `f` must not call back
    /// into the host.
    pub fn with_logs<R>(&self, f: impl FnOnce(Vec<(u64, &LogImage)>) -> R) -> R {
        let groups = self.inner.groups.borrow();
        f(groups.iter().map(|(&id, hosted)| (id, hosted.group.log())).collect())
    }

    /// Lost logs the hosted groups saw (`RaftGroup::lost_logs_seen`: a voter's log, or
    /// this replica's own, ending below what it had acknowledged, as after a data dir
    /// was replaced).
    pub fn lost_logs_seen(&self) -> u64 {
        self.inner.groups.borrow().values().map(|hosted| hosted.group.lost_logs_seen()).sum()
    }

    /// Hands the leadership of every group this replica leads to its most caught-up
    /// voter (`RaftGroup::transfer_leadership`): before a graceful stop, so clients move
    /// to a leader elected at once rather than after an election timeout. Returns how
    /// many transfers began.
    pub fn transfer_leaderships(&self) -> usize {
        let ids: Vec<u64> = self.inner.groups.borrow().keys().copied().collect();
        let started =
            ids.into_iter().filter_map(|id| self.with_group(id, |g| g.transfer_leadership()));
        started.filter(Option::is_some).count()
    }

    /// Whether this replica leads any hosted group.
    pub fn leads_any(&self) -> bool {
        self.inner.groups.borrow().values().any(|hosted| hosted.group.is_leader())
    }

    /// Groups hosted.
    pub fn group_count(&self) -> usize {
        self.inner.groups.borrow().len()
    }

    /// Counters since the start.
    pub fn stats(&self) -> HostStats {
        self.inner.stats.get()
    }

    /// Queues leader notices (`notice::encode`) for node `to`'s same shard.
    pub fn send_notice(&self, to: u64, notices: Vec<u8>) -> Result<(), UnknownPeer> {
        self.send_context(to, NOTICE_GROUP, notices)
    }

    /// The leader notices received since the last call: (sender node, notice bytes), in
    /// the order they arrived.
    pub fn take_notices(&self) -> Vec<(u64, bytes::Bytes)> {
        std::mem::take(&mut *self.inner.notices.borrow_mut())
    }

    /// Queues a pull message (`pull.rs`) for node `to`'s same shard.
    pub fn send_pull(&self, to: u64, pull: Vec<u8>) -> Result<(), UnknownPeer> {
        self.send_context(to, PULL_GROUP, pull)
    }

    /// Where the pull messages that arrive go: (sender node, bytes); the first call takes
    /// it, later ones get None.
    pub fn take_pull_receiver(&self) -> Option<LocalReceiver<(u64, bytes::Bytes)>> {
        self.inner.pull_receiver.borrow_mut().take()
    }

    /// Queues a call between nodes (`node_rpc.rs`) for node `to`'s same shard.
    pub fn send_node_rpc(&self, to: u64, rpc: Vec<u8>) -> Result<(), UnknownPeer> {
        self.send_context(to, NODE_RPC_GROUP, rpc)
    }

    /// Queues `bytes` for node `to`'s same shard as the context of a message of the
    /// reserved `group` (notices, pulls, calls between nodes: never stepped).
    fn send_context(&self, to: u64, group: u64, bytes: Vec<u8>) -> Result<(), UnknownPeer> {
        let mut message = Message::default();
        message.set_context(bytes.into());
        self.inner.transport.send(to, group, message)
    }

    /// Where the calls between nodes that arrive go: (sender node, bytes); the first call
    /// takes it, later ones get None.
    pub fn take_node_rpc_receiver(&self) -> Option<LocalReceiver<(u64, bytes::Bytes)>> {
        self.inner.node_rpc_receiver.borrow_mut().take()
    }

    /// The shard's transport (its counters, its address).
    pub fn transport(&self) -> &Transport {
        &self.inner.transport
    }
}

impl Inner {
    fn count(&self, change: impl FnOnce(&mut HostStats)) {
        let mut stats = self.stats.get();
        change(&mut stats);
        self.stats.set(stats);
    }

    fn step(&self, inbound: Inbound) {
        let Inbound { from, group: id, mut message } = inbound;
        if id == NOTICE_GROUP {
            let mut notices = self.notices.borrow_mut();
            if notices.len() >= MAX_PENDING_NOTICES {
                notices.remove(0);
                self.count(|s| s.dropped_notices += 1);
            }
            notices.push((from, message.take_context()));
            self.count(|s| s.notices_received += 1);
            return;
        }
        if id == PULL_GROUP {
            if self.pulls.try_send((from, message.take_context())).is_err() {
                self.count(|s| s.dropped_pulls += 1);
            }
            return;
        }
        if id == NODE_RPC_GROUP {
            if self.node_rpcs.try_send((from, message.take_context())).is_err() {
                self.count(|s| s.dropped_node_rpcs += 1);
            }
            return;
        }
        let mut groups = self.groups.borrow_mut();
        let Some(hosted) = groups.get_mut(&id) else {
            self.count(|s| s.dropped_unknown_group += 1);
            tracing::debug!(from, group = id, "replication: a message for a group not hosted here");
            return;
        };
        let message = if message.get_msg_type() == super::MessageType::MsgSnapshot {
            match hosted.sink.hold_snapshot(message) {
                Some(message) => message,
                None => return, // the sink steps it once its application is ready
            }
        } else {
            message
        };
        match hosted.group.step(message) {
            Ok(()) => self.count(|s| s.messages_stepped += 1),
            Err(e) => {
                self.count(|s| s.dropped_refused += 1);
                tracing::debug!(from, group = id, "replication: raft refused a message: {e}");
            }
        }
        self.drain(id, hosted);
    }

    fn tick(&self) {
        self.count(|s| s.ticks += 1);
        for (&id, hosted) in self.groups.borrow_mut().iter_mut() {
            hosted.group.tick();
            self.drain(id, hosted);
        }
    }

    /// Everything group `id` emitted (invariant 1); nothing once stopped (invariant 3).
    fn drain(&self, id: u64, hosted: &mut Hosted) {
        if self.stopped.get() {
            return;
        }
        loop {
            let writes = hosted.group.take_writes();
            if writes.is_empty() {
                break;
            }
            match hosted.sink.write(writes) {
                // Reporting them may release held messages and emit more writes.
                Written::Durable(number) => hosted.group.durable(number),
                Written::OnFlush { number, durable } => {
                    // Refused only once the durability task ended on a failed flush:
                    // nothing after it is ever reported (invariant 4).
                    let _ = self.flushes.try_send((id, number, durable));
                    break;
                }
                Written::Later | Written::Failed => break,
            }
        }
        for message in hosted.group.take_messages() {
            let to = node_of(message.to);
            let sent = to.map(|to| self.transport.send(to, id, message));
            if !matches!(sent, Some(Ok(()))) {
                self.count(|s| s.dropped_unknown_peer += 1);
                tracing::warn!(group = id, ?to, "replication: a message for a node not in --peers");
            }
        }
        if let Some(snapshot) = hosted.group.take_snapshot() {
            hosted.sink.install(snapshot);
        }
        let persisted = hosted.group.persisted_index();
        if persisted > hosted.persisted_told && hosted.group.is_leader() {
            hosted.sink.persisted(persisted, hosted.group.term());
        }
        hosted.persisted_told = persisted;
        let committed = hosted.group.take_committed();
        let outcomes = hosted.group.take_outcomes();
        if !committed.is_empty() || !outcomes.is_empty() {
            hosted.sink.apply(committed, outcomes);
        }
    }
}

/// Reports each write on the shard log durable once its flush is (invariant 4). Ends when
/// a flush fails: the log is stopped for good, and nothing after it becomes durable.
async fn report_flushes(inner: Rc<Inner>, flushed: LocalReceiver<(u64, u64, Durable)>) {
    while let Some((id, number, durable)) = flushed.recv().await {
        if let Err(error) = durable.wait().await {
            tracing::error!(group = id, number, %error, "replication: a raft write's flush failed");
            return;
        }
        let mut groups = inner.groups.borrow_mut();
        if let Some(hosted) = groups.get_mut(&id) {
            hosted.group.durable(number);
            inner.drain(id, hosted);
        }
    }
}

/// Steps what arrives; ends when the transport stops (its readers hold the senders).
async fn receive(inner: Rc<Inner>, inbound: LocalReceiver<Inbound>) {
    while let Some(message) = inbound.recv().await {
        inner.step(message);
    }
}

/// Ticks every group every `tick` (a timer, not a clock: a late tick is late, not
/// doubled).
async fn ticker(inner: Rc<Inner>, tick: Duration) {
    loop {
        glommio::timer::sleep(tick).await;
        inner.tick();
    }
}
