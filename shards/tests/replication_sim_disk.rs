//! Deterministic simulation of several nodes (3, or 5 in a quarter of the seeds), each
//! with its own `SimDisk` and `ShardLog`, hosting 2 or 3 raft groups with the same voters:
//! the groups' write requests share one shard log and one group-commit flush, as in the
//! broker. replication_sim.rs checks the driver over an abstract disk; raft_log.rs checks
//! the persistence over a `SimDisk` with writes no raft drove; this file puts the two
//! together, through the library's own paths:
//! - a group's write requests go onto its node's log through `persist::ShardLogSink` (as
//!   `GroupHost` drains a group), and the group hears `durable(number)` only once the
//!   flusher's `Durable` for that write resolved, in log order (`host.rs` invariant 4);
//! - a crash is a power loss of the `SimDisk`: each unsynced write is lost, kept or torn,
//!   and sometimes bits flip in what lands; the restart is the broker's start-up path:
//!   `ShardLog::open` recovers the log, `persist::replay` rebuilds each group's
//!   `LogImage`, `RaftGroup::recover` starts the replica from it;
//! - a failed fdatasync (EIO, `SimDisk::fail_next_sync`, mostly on a node with writes in
//!   flight) stops the log for good (storage's durability contract 3): the flush's writes
//!   and every later one are never reported durable, the sink refuses further raft writes
//!   (`Written::Failed`, the group's messages still go out as `GroupHost` sends them: the
//!   ones that wait for a write are held by the driver), and the node goes down 0 to 3
//!   steps later as the broker exits (70, `spawn_failure_watch`), its disk as a power loss
//!   leaves it (what the failed flush wrote may or may not have landed);
//! - compaction as `partition_group.rs` does it: a leader proposes a compaction entry up
//!   to `RaftGroup::compactable`, and every replica compacts its own log
//!   (`RaftGroup::compact`) when that entry commits; now and then a node appends a stream
//!   snapshot of its groups' images (`persist::encode_stream_snapshot`,
//!   `append_stream_snapshot`), forgets what a durable one superseded
//!   (`ShardLog::forget_superseded_internal`), and checkpoints its log.
//!
//! The network is replication_sim.rs's (`raft_sim::Network`): drops, delays, duplicates,
//! reorders, partitions; nodes tick with drifting clocks; clients propose unique values
//! (with 0 to 2 KiB of padding, so writes cross sectors and pages) to random groups on
//! random nodes. The invariants are `raft_sim::Checker`'s, one checker per group:
//! 1. at most one leader per term, 2. committed prefixes never diverge across replicas
//!    and lives, 3. a `Committed` outcome is the entry committed at its index, 4. a leader
//!    cut off in a minority never reports `Committed` for a proposal made there: after
//!    every step; then at the end of each seed every node loses power at once, all
//!    restart, the network heals, and every group must elect a leader and commit a new
//!    proposal onto every replica's log with every write reported durable (liveness);
//!    then every node loses power again, recovers, and 5. every acknowledged proposal is
//!    in every replica's recovered log at its index (or below its compaction point).
//!
//! Everything runs on one glommio `LocalExecutor`, one task driving the world in a loop
//! with one `XorShift` (the logs' flushers are the executor's other tasks; the world
//! yields to them a seeded number of times per step). A checkpoint is taken only when
//! every log is idle, so the blocking thread that encodes it cannot reorder what the
//! executor runs: a seed replays exactly.
//!
//! `SHARDLOG_SEED=N` replays seed N alone; `SHARDLOG_RAFT_SIM_DISK_SEEDS=N` runs N seeds
//! (default `DEFAULT_SEEDS`) from `SHARDLOG_RAFT_SIM_DISK_FIRST_SEED` (default 1). A
//! failure, or a panic, names its seed and step.

mod raft_sim;

use std::cell::Cell;
use std::collections::VecDeque;

use glommio::{LocalExecutorBuilder, Placement};
use raft_sim::{config, value_of, Checker, Network};
use shardlog_shards::replication::persist::{self, ShardLogSink};
use shardlog_shards::replication::{GroupSink, LogImage, Message, Proposal, RaftGroup, Written};
use shardlog_storage::{Durable, LogConfig, ShardLog, SimDisk, XorShift};

/// Seeds a plain `cargo test` runs.
const DEFAULT_SEEDS: u64 = 200;
/// Faulty steps per seed, then the healing phase.
const STEPS: u64 = 800;
/// Steps the healed groups get to converge before the seed fails for liveness.
const HEAL_STEPS: u64 = 3000;
/// Steps in which a deferred write waits for another write's flush before its own runs
/// out (`ShardLog::flush_deferred` on every node): the simulation's 5 ms of
/// `LogConfig::deferred_flush_after`.
const DEFERRAL_STEPS: u64 = 16;
/// Entry data: the value (8 bytes), then the kind.
const PRODUCE: u8 = 0;
const COMPACT: u8 = 1;

fn log_config() -> LogConfig {
    // Small segments, so the log rolls and a stream snapshot lets it forget segments.
    // Deferred writes (those that only move a commit index, `persist`) are written by the
    // next write's flush, or when the simulation's clock says their deferral ran out
    // (`DEFERRAL_STEPS`), never by the real clock, so a seed replays alike.
    LogConfig {
        segment_size_bytes: 64 << 10,
        tail_cache_bytes: 1 << 20,
        max_batch_bytes: 16 << 10,
        blocking_flush_max_bytes: 0,
        deferred_flush_after: std::time::Duration::from_secs(24 * 3600),
    }
}

/// Fault rates of one seed, drawn from it (so seeds differ in kind, not only in luck).
#[derive(Debug)]
struct Faults {
    drop_percent: u64,
    duplicate_percent: u64,
    max_delay_steps: u64,
    power_loss_per_mille: u64,
    flip_bits_percent: u64,
    partition_per_mille: u64,
    /// Most executor yields per step: how far the flushers get per step.
    max_yields: u64,
    /// Most yields per disk operation (`SimDisk::set_max_yields`): how long a flush's
    /// writes stay on the disk unsynced.
    max_disk_yields: u64,
    propose_percent: u64,
    compact_percent: u64,
    stream_snapshot_per_mille: u64,
    checkpoint_per_mille: u64,
    /// Chance per step that a node's next fdatasync fails (EIO).
    sync_failure_per_mille: u64,
}

impl Faults {
    fn draw(rng: &mut XorShift) -> Faults {
        Faults {
            drop_percent: rng.up_to(30),
            duplicate_percent: rng.up_to(10),
            max_delay_steps: 1 + rng.up_to(8),
            power_loss_per_mille: rng.up_to(20),
            flip_bits_percent: rng.up_to(50),
            partition_per_mille: rng.up_to(15),
            max_yields: rng.up_to(12),
            max_disk_yields: 1 + rng.up_to(6),
            propose_percent: 10 + rng.up_to(40),
            compact_percent: rng.up_to(10),
            stream_snapshot_per_mille: rng.up_to(30),
            checkpoint_per_mille: rng.up_to(10),
            sync_failure_per_mille: rng.up_to(6),
        }
    }

    fn none() -> Faults {
        Faults {
            drop_percent: 0,
            duplicate_percent: 0,
            max_delay_steps: 1,
            power_loss_per_mille: 0,
            flip_bits_percent: 0,
            partition_per_mille: 0,
            max_yields: 8,
            max_disk_yields: 3,
            propose_percent: 0,
            compact_percent: 0,
            stream_snapshot_per_mille: 0,
            checkpoint_per_mille: 0,
            sync_failure_per_mille: 0,
        }
    }
}

/// One replica of a group on a node, for one life.
struct Replica {
    group: RaftGroup,
    sink: ShardLogSink<SimDisk>,
    /// Index the next committed entry this life reports must have.
    next_committed: u64,
}

/// A node between two power losses.
struct Life {
    log: ShardLog<SimDisk>,
    /// Group g + 1's replica at g.
    replicas: Vec<Replica>,
    /// (group index, number, flush) of writes on the log not yet reported, in log order.
    flushes: VecDeque<(usize, u64, Durable)>,
    /// The last stream snapshot appended, until it is durable.
    stream_snapshot: Option<Durable>,
}

impl Life {
    /// Every append so far is durable.
    fn idle(&self) -> bool {
        self.flushes.back().is_none_or(|(_, _, d)| d.is_durable())
            && self.stream_snapshot.as_ref().is_none_or(Durable::is_durable)
    }

    /// The log stopped for good (a failed fdatasync): the broker exits.
    fn stopped(&self) -> bool {
        self.log.stopped_reason().is_some()
    }
}

struct SimNode {
    id: u64,
    disk: SimDisk,
    /// None while the power is off.
    life: Option<Life>,
    restart_at: u64,
    /// The step at which a node whose log stopped goes down (`stop_failed_logs`).
    down_at: Option<u64>,
}

#[derive(Default, Debug)]
struct Stats {
    five_node_seeds: u64,
    acknowledged: u64,
    abandoned: u64,
    power_losses: u64,
    /// fdatasyncs made to fail, and the nodes that went down for one.
    failed_syncs: u64,
    failed_sync_stops: u64,
    lost_writes: u64,
    torn_writes: u64,
    compactions: u64,
    stream_snapshots: u64,
    checkpoints: u64,
    isolated_proposals: u64,
    /// Write requests larger than one log entry, cut into several (`persist::split_write`).
    cut_writes: u64,
    max_term: u64,
}

struct World {
    seed: u64,
    step: u64,
    rng: XorShift,
    faults: Faults,
    /// The seed's faults as drawn (the healing phase has none), for a failure's message.
    drawn: String,
    /// Most padding bytes of a proposal: larger in every fourth seed, so that a follower
    /// behind by a few entries gets a write larger than one log entry holds (cut by
    /// `persist::split_write`). From the seed, not its generator: other seeds are unchanged.
    max_padding: u64,
    voters: Vec<u64>,
    nodes: Vec<SimNode>,
    /// (group index, message).
    network: Network<(usize, Message)>,
    next_value: u64,
    /// Group g + 1's checker at g.
    checkers: Vec<Checker>,
    stats: Stats,
}

thread_local! {
    /// (seed, step) of the world running, for a panic's message.
    static RUNNING: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
}

impl World {
    async fn new(seed: u64) -> Result<World, String> {
        let mut rng = XorShift::new(seed);
        let faults = Faults::draw(&mut rng);
        let node_count = if rng.chance(1, 4) { 5 } else { 3 };
        let group_count = 2 + rng.below(2) as usize;
        let voters: Vec<u64> = (1..=node_count as u64).collect();
        let nodes = voters
            .iter()
            .map(|&id| {
                let disk = SimDisk::new(rng.next_u64());
                disk.set_max_yields(faults.max_disk_yields);
                SimNode { id, disk, life: None, restart_at: 0, down_at: None }
            })
            .collect();
        let mut world = World {
            seed,
            step: 0,
            rng,
            drawn: format!("{faults:?}"),
            faults,
            max_padding: if seed % 4 == 3 { 16 << 10 } else { 2048 },
            voters,
            nodes,
            network: Network::new(node_count),
            next_value: 1,
            checkers: (0..group_count).map(|_| Checker::default()).collect(),
            stats: Stats { five_node_seeds: (node_count == 5) as u64, ..Stats::default() },
        };
        world.restart_due().await?;
        Ok(world)
    }

    fn fail(&self, what: String) -> String {
        format!(
            "seed {} step {}: {what} ({} nodes, {} groups, {}; replay: SHARDLOG_SEED={} \
             cargo test --release -p shardlog-shards --test replication_sim_disk)",
            self.seed,
            self.step,
            self.nodes.len(),
            self.checkers.len(),
            self.drawn,
            self.seed
        )
    }

    // -- power ------------------------------------------------------------------------------

    fn power_loss(&mut self, node: usize) {
        let n = &mut self.nodes[node];
        n.down_at = None;
        let Some(life) = n.life.take() else { return };
        self.stats.cut_writes += life.replicas.iter().map(|r| r.sink.cut_writes()).sum::<u64>();
        if self.rng.chance(self.faults.flip_bits_percent, 100) {
            n.disk.flip_bits_on_crash(1 + self.rng.below(3) as u32);
        }
        n.disk = n.disk.crash();
        // The old log's tasks fail on the dead disk handle and end.
        drop(life);
        n.restart_at = self.step + 1 + self.rng.up_to(60);
        self.stats.power_losses += 1;
    }

    /// The broker's start-up: recover the log, replay the `Raft` stream, start each group
    /// from its image.
    async fn start(&mut self, node: usize) -> Result<(), String> {
        let (id, disk) = (self.nodes[node].id, self.nodes[node].disk.clone());
        let (log, recovered, _) = ShardLog::open(disk, log_config())
            .await
            .map_err(|e| self.fail(format!("node {id}: the log does not recover: {e:?}")))?;
        let voters = self.voters.clone();
        let mut images = persist::replay(&recovered, |_| LogImage::new(&voters))
            .map_err(|e| self.fail(format!("node {id}: {e}")))?;
        let mut replicas = Vec::new();
        for g in 0..self.checkers.len() {
            let image = images.remove(&(g as u64 + 1)).unwrap_or_else(|| LogImage::new(&voters));
            // raft-rs hands committed entries out again from its snapshot point.
            let next_committed = image.snapshot_index + 1;
            // raft-rs's appends go up to 1 MiB, far more than one entry of these 64 KiB
            // segments holds: the sink cuts such writes into several entries.
            let config = config(id, &mut self.rng);
            let group = RaftGroup::recover(&config, image, 0)
                .map_err(|e| self.fail(format!("node {id} group {}: {e}", g + 1)))?;
            let sink = ShardLogSink::new(log.clone(), g as u64 + 1, Box::new(|_, _| {}));
            replicas.push(Replica { group, sink, next_committed });
        }
        if let Some(group) = images.keys().next() {
            return Err(self.fail(format!("node {id} recovered group {group}, never hosted")));
        }
        let life = Life { log, replicas, flushes: VecDeque::new(), stream_snapshot: None };
        self.nodes[node].life = Some(life);
        Ok(())
    }

    async fn restart_due(&mut self) -> Result<(), String> {
        for node in 0..self.nodes.len() {
            let n = &self.nodes[node];
            if n.life.is_none() && n.restart_at <= self.step {
                self.start(node).await?;
            }
        }
        Ok(())
    }

    // -- one step ---------------------------------------------------------------------------

    async fn run_step(&mut self) -> Result<(), String> {
        self.step += 1;
        RUNNING.set((self.seed, self.step));
        if self.rng.chance(self.faults.partition_per_mille, 1000) {
            self.network.change_partition(&mut self.rng);
        }
        self.restart_due().await?;
        for node in 0..self.nodes.len() {
            // Clocks drift: a node skips a tick now and then (all its groups alike).
            if !self.rng.chance(1, 10) {
                self.for_each_group(node, RaftGroup::tick)?;
            }
        }
        self.deliver_due()?;
        for node in 0..self.nodes.len() {
            self.report_flushes(node)?;
        }
        if self.rng.chance(self.faults.propose_percent, 100) {
            self.propose_somewhere()?;
        }
        if self.rng.chance(self.faults.compact_percent, 100) {
            self.propose_compaction()?;
        }
        for node in 0..self.nodes.len() {
            self.snapshot_stream(node)?;
        }
        if self.rng.chance(self.faults.checkpoint_per_mille, 1000) {
            self.checkpoint().await?;
        }
        self.check_leaders()?;
        if self.step.is_multiple_of(DEFERRAL_STEPS) {
            for life in self.nodes.iter().filter_map(|n| n.life.as_ref()) {
                life.log.flush_deferred(); // deferrals ran out
            }
        }
        self.let_flushers_run().await;
        Ok(())
    }

    /// Yields to the logs' flushers; a power loss strikes at a random yield, mostly a node
    /// with writes not yet durable, so often while a flush's writes are on the disk and
    /// its fdatasync is not done.
    async fn let_flushers_run(&mut self) {
        let yields = 1 + self.rng.up_to(self.faults.max_yields);
        let mut power_loss = None;
        if self.rng.chance(self.faults.power_loss_per_mille, 1000) {
            let node = self.mostly_busy((0..self.nodes.len()).collect()).expect("nodes");
            // After one yield at least: the flusher had a chance to start.
            power_loss = Some((node, 1 + self.rng.up_to(yields.saturating_sub(1))));
        }
        if self.rng.chance(self.faults.sync_failure_per_mille, 1000) {
            self.fail_a_sync();
        }
        for k in 0..=yields {
            if let Some((node, _)) = power_loss.take_if(|(_, at)| *at == k) {
                self.power_loss(node);
            }
            if k < yields {
                futures_lite::future::yield_now().await;
            }
        }
        self.stop_failed_logs();
    }

    /// One of `nodes`: in three draws of four one with writes not yet durable if there is
    /// one, so that a fault lands on a flush raft is waiting for; None if `nodes` is empty.
    fn mostly_busy(&mut self, nodes: Vec<usize>) -> Option<usize> {
        let busy = |k: &&usize| self.nodes[**k].life.as_ref().is_some_and(|life| !life.idle());
        let busy: Vec<usize> = nodes.iter().filter(busy).copied().collect();
        let among = if busy.is_empty() || self.rng.chance(1, 4) { nodes } else { busy };
        (!among.is_empty()).then(|| among[self.rng.below(among.len() as u64) as usize])
    }

    /// The next fdatasync of a running node fails (`mostly_busy`). A node that is down is
    /// left alone: its recovery's fdatasync failing would stop its start-up, which is not
    /// what this checks.
    fn fail_a_sync(&mut self) {
        let running = (0..self.nodes.len()).filter(|&k| self.nodes[k].life.is_some()).collect();
        if let Some(node) = self.mostly_busy(running) {
            self.nodes[node].disk.fail_next_sync();
            self.stats.failed_syncs += 1;
        }
    }

    /// A node whose log stopped goes down, as the broker exits on it, 0 to 3 steps later
    /// (the broker's failure watch is one task among others: the groups go on stepping,
    /// and must not take a write of the failed flush, or a later one, for durable
    /// meanwhile); its disk as a power loss leaves it (what the failed flush wrote may or
    /// may not be there).
    fn stop_failed_logs(&mut self) {
        for node in 0..self.nodes.len() {
            if !self.nodes[node].life.as_ref().is_some_and(Life::stopped) {
                continue;
            }
            let delay = self.rng.up_to(3);
            let down_at = *self.nodes[node].down_at.get_or_insert(self.step + delay);
            if down_at <= self.step {
                self.stats.failed_sync_stops += 1;
                self.power_loss(node);
            }
        }
    }

    fn for_each_group(&mut self, node: usize, f: impl Fn(&mut RaftGroup)) -> Result<(), String> {
        let Some(life) = &mut self.nodes[node].life else { return Ok(()) };
        life.replicas.iter_mut().for_each(|r| f(&mut r.group));
        (0..self.checkers.len()).try_for_each(|g| self.drain(node, g))
    }

    fn deliver_due(&mut self) -> Result<(), String> {
        let ends = |(_, m): &(usize, Message)| (m.from as usize - 1, m.to as usize - 1);
        let drop_percent = self.faults.drop_percent;
        for (g, message) in self.network.deliver(&mut self.rng, self.step, drop_percent, ends) {
            let node = message.to as usize - 1;
            let Some(life) = &mut self.nodes[node].life else { continue };
            // Errors are messages raft refuses (none expected from members): dropped.
            let _ = life.replicas[g].group.step(message);
            self.drain(node, g)?;
        }
        Ok(())
    }

    /// Reports each write durable once its flush is, in log order (`GroupHost`'s
    /// durability task).
    fn report_flushes(&mut self, node: usize) -> Result<(), String> {
        loop {
            let Some(life) = &mut self.nodes[node].life else { return Ok(()) };
            if !life.flushes.front().is_some_and(|(_, _, durable)| durable.is_durable()) {
                return Ok(());
            }
            let (g, number, _) = life.flushes.pop_front().expect("checked above");
            life.replicas[g].group.durable(number);
            self.drain(node, g)?;
        }
    }

    fn propose_somewhere(&mut self) -> Result<(), String> {
        let node = self.rng.below(self.nodes.len() as u64) as usize;
        let g = self.rng.below(self.checkers.len() as u64) as usize;
        let padding = vec![self.next_value as u8; self.rng.up_to(self.max_padding) as usize];
        if self.propose(node, g, PRODUCE, &padding).is_some() {
            self.stats.isolated_proposals += self.network.in_minority(node) as u64;
        }
        self.drain(node, g)
    }

    /// As a partition group's leader does every tick: a compaction up to what every voter
    /// has, applied by each replica when it commits (`apply_committed`).
    fn propose_compaction(&mut self) -> Result<(), String> {
        let node = self.rng.below(self.nodes.len() as u64) as usize;
        let g = self.rng.below(self.checkers.len() as u64) as usize;
        let Some(life) = &self.nodes[node].life else { return Ok(()) };
        let group = &life.replicas[g].group;
        let Some(to) = group.compactable().filter(|&to| to > group.log().snapshot_index) else {
            return Ok(());
        };
        self.propose(node, g, COMPACT, &to.to_be_bytes());
        self.drain(node, g)
    }

    /// Proposes the next value, of `kind`, to group `g` on `node`; the checker learns it.
    fn propose(&mut self, node: usize, g: usize, kind: u8, rest: &[u8]) -> Option<Proposal> {
        let isolated = self.network.in_minority(node).then_some(self.network.epoch);
        let life = self.nodes[node].life.as_mut()?;
        let value = self.next_value;
        let data = [&value.to_be_bytes()[..], &[kind], rest].concat();
        let proposal = life.replicas[g].group.propose(data).ok()?;
        self.next_value += 1;
        self.checkers[g].proposed(self.nodes[node].id, proposal, value, isolated);
        Some(proposal)
    }

    /// Takes group `g`'s outputs on `node` as `GroupHost::drain` does: writes to the shard
    /// log through its sink, messages to the network, committed entries and outcomes to
    /// the checker (and compaction entries to the replica).
    fn drain(&mut self, node: usize, g: usize) -> Result<(), String> {
        let id = self.nodes[node].id;
        let Some(life) = &mut self.nodes[node].life else { return Ok(()) };
        let replica = &mut life.replicas[g];
        let mut refused = false;
        loop {
            let writes = replica.group.take_writes();
            if writes.is_empty() {
                break;
            }
            match replica.sink.write(writes) {
                Written::Durable(number) => replica.group.durable(number),
                Written::OnFlush { number, durable } => {
                    life.flushes.push_back((g, number, durable));
                    break;
                }
                Written::Later => break,
                Written::Failed => {
                    refused = true;
                    break;
                }
            }
        }
        let messages = replica.group.take_messages();
        let committed = replica.group.take_committed();
        let outcomes = replica.group.take_outcomes();
        let mut next_committed = replica.next_committed;
        self.stats.max_term = self.stats.max_term.max(replica.group.term());
        // A stopped log refuses every write until the node goes down (`stop_failed_logs`);
        // meanwhile the group's outputs go where `GroupHost::drain` sends them.
        if refused && !life.stopped() {
            return Err(self.fail(format!("node {id}: the log refused a raft write")));
        }
        let shape = (self.faults.duplicate_percent, self.faults.max_delay_steps);
        for message in messages {
            self.network.send(&mut self.rng, self.step, shape, (g, message));
        }
        let mut compact_to = Vec::new();
        for entry in committed {
            let checked = (entry.index, entry.term, value_of(&entry.data));
            let committed = self.checkers[g].check_committed(id, &mut next_committed, checked);
            committed.map_err(|e| self.fail(format!("group {}: {e}", g + 1)))?;
            if let [_, _, _, _, _, _, _, _, COMPACT, to @ ..] = &entry.data[..] {
                compact_to.push(u64::from_be_bytes(to.try_into().expect("8 bytes")));
            }
        }
        let life = self.nodes[node].life.as_mut().expect("drained above");
        let replica = &mut life.replicas[g];
        replica.next_committed = next_committed;
        for to in compact_to {
            self.stats.compactions += replica.group.compact(to) as u64;
        }
        let isolated = (self.network.epoch, self.network.in_minority(node));
        for outcome in outcomes {
            let checked = self.checkers[g].check_outcome(id, outcome, isolated);
            checked.map_err(|e| self.fail(format!("group {}: {e}", g + 1)))?;
        }
        Ok(())
    }

    /// As the shard does every tick: a durable stream snapshot lets the log forget what it
    /// superseded; now and then a new one of every group's image.
    fn snapshot_stream(&mut self, node: usize) -> Result<(), String> {
        let draw = self.rng.chance(self.faults.stream_snapshot_per_mille, 1000);
        let Some(life) = &mut self.nodes[node].life else { return Ok(()) };
        if life.stream_snapshot.as_ref().is_some_and(Durable::is_durable) {
            life.log.forget_superseded_internal();
            life.stream_snapshot = None;
        }
        if !draw {
            return Ok(());
        }
        let images = life.replicas.iter().enumerate().map(|(g, r)| (g as u64 + 1, r.group.log()));
        let payload = persist::encode_stream_snapshot(images, []);
        // The broker writes one only up to half a segment (an entry never spans two).
        if payload.len() as u64 > log_config().segment_size_bytes / 2 {
            return Ok(());
        }
        match persist::append_stream_snapshot(&life.log, &payload) {
            Ok(durable) => life.stream_snapshot = Some(durable),
            Err(_) if life.stopped() => return Ok(()),
            Err(e) => return Err(self.fail(format!("a stream snapshot was refused: {e:?}"))),
        }
        self.stats.stream_snapshots += 1;
        Ok(())
    }

    /// A checkpoint of a random node's log, once every log is idle (module docs).
    async fn checkpoint(&mut self) -> Result<(), String> {
        let node = self.rng.below(self.nodes.len() as u64) as usize;
        let lives = || self.nodes.iter().filter_map(|n| n.life.as_ref());
        for life in lives() {
            life.log.flush_deferred();
        }
        // A stopped log never becomes idle; its node goes down at the end of the step.
        while !lives().all(|life| life.idle() || life.stopped()) {
            futures_lite::future::yield_now().await;
        }
        let Some(life) = &self.nodes[node].life else { return Ok(()) };
        match life.log.checkpoint().await {
            Ok(()) => self.stats.checkpoints += 1,
            Err(_) if life.stopped() => {}
            Err(e) => return Err(self.fail(format!("checkpoint: {e:?}"))),
        }
        Ok(())
    }

    /// Invariant 1, every group.
    fn check_leaders(&mut self) -> Result<(), String> {
        for node in &self.nodes {
            let Some(life) = &node.life else { continue };
            for (g, replica) in life.replicas.iter().enumerate() {
                if replica.group.is_leader() {
                    let leading = self.checkers[g].check_leader(node.id, replica.group.term());
                    leading.map_err(|e| self.fail(format!("group {}: {e}", g + 1)))?;
                }
            }
        }
        Ok(())
    }

    // -- healing: every node loses power, restarts, and every group must make progress ----

    async fn heal(&mut self) -> Result<(), String> {
        for node in 0..self.nodes.len() {
            self.power_loss(node);
            self.nodes[node].restart_at = self.step;
        }
        self.restart_due().await?;
        self.network.heal();
        self.faults = Faults::none();
        let mut last: Vec<Option<(u64, Proposal)>> = vec![None; self.checkers.len()];
        for _ in 0..HEAL_STEPS {
            self.run_step().await?;
            for (g, last) in last.iter_mut().enumerate() {
                // An abandoned final proposal is proposed again, to whoever leads now.
                let checker = &self.checkers[g];
                if last
                    .is_some_and(|(id, p)| !checker.pending(id, p) && !checker.is_acknowledged(p))
                {
                    *last = None;
                }
                if last.is_none() {
                    *last = self.propose_to_leader(g)?;
                }
            }
            if self.converged(&last) {
                return self.check_recovered_logs().await;
            }
        }
        Err(self.fail(format!("no progress after healing: final proposals {last:?}")))
    }

    fn propose_to_leader(&mut self, g: usize) -> Result<Option<(u64, Proposal)>, String> {
        for node in 0..self.nodes.len() {
            if let Some(proposal) = self.propose(node, g, PRODUCE, &[]) {
                self.drain(node, g)?;
                return Ok(Some((self.nodes[node].id, proposal)));
            }
        }
        Ok(None)
    }

    /// Every group's final proposal is acknowledged and on every replica's log, every
    /// write reported durable.
    fn converged(&self, last: &[Option<(u64, Proposal)>]) -> bool {
        last.iter().enumerate().all(|(g, last)| {
            let Some((_, p)) = last else { return false };
            self.checkers[g].is_acknowledged(*p)
                && self.nodes.iter().all(|n| {
                    let Some(life) = &n.life else { return false };
                    let log = life.replicas[g].group.log();
                    life.flushes.is_empty() && log.entry(p.index).is_some_and(|e| e.term == p.term)
                })
        })
    }

    /// Invariant 5: every node loses power once more and recovers; every group's
    /// recovered log holds every acknowledged proposal.
    async fn check_recovered_logs(&mut self) -> Result<(), String> {
        for node in 0..self.nodes.len() {
            self.power_loss(node);
            self.start(node).await?;
            let n = &self.nodes[node];
            let life = n.life.as_ref().expect("started");
            for (g, replica) in life.replicas.iter().enumerate() {
                let checked = self.checkers[g].check_durable_log(n.id, replica.group.log());
                checked.map_err(|e| self.fail(format!("group {}: {e}", g + 1)))?;
            }
        }
        Ok(())
    }

    fn finish(self) -> Stats {
        let mut stats = self.stats;
        stats.acknowledged = self.checkers.iter().map(Checker::acknowledged).sum();
        stats.abandoned = self.checkers.iter().map(|c| c.abandoned).sum();
        for node in &self.nodes {
            let replicas = node.life.iter().flat_map(|life| &life.replicas);
            stats.cut_writes += replicas.map(|r| r.sink.cut_writes()).sum::<u64>();
            let (lost, torn) = node.disk.crash_counts();
            stats.lost_writes += lost;
            stats.torn_writes += torn;
        }
        stats
    }
}

async fn run_seed(seed: u64) -> Result<Stats, String> {
    let mut world = World::new(seed).await?;
    for _ in 0..STEPS {
        world.run_step().await?;
    }
    world.heal().await?;
    Ok(world.finish())
}

#[test]
fn replicas_on_shard_logs_never_lose_or_diverge_on_acknowledged_proposals_under_power_loss() {
    let seeds = raft_sim::seeds("SHARDLOG_RAFT_SIM_DISK", DEFAULT_SEEDS);
    // A panic inside raft-rs, the driver or the log (an assertion) names its seed too.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let (seed, step) = RUNNING.get();
        eprintln!("seed {seed} step {step} panicked; replay: SHARDLOG_SEED={seed}");
        hook(info);
    }));
    let started = std::time::Instant::now();
    let executor = LocalExecutorBuilder::new(Placement::Unbound).make().expect("an executor");
    let count = seeds.len() as u64;
    let total = executor.run(async move {
        let mut total = Stats::default();
        for seed in seeds {
            let stats = run_seed(seed).await.unwrap_or_else(|failure| panic!("{failure}"));
            total.five_node_seeds += stats.five_node_seeds;
            total.acknowledged += stats.acknowledged;
            total.abandoned += stats.abandoned;
            total.power_losses += stats.power_losses;
            total.failed_syncs += stats.failed_syncs;
            total.failed_sync_stops += stats.failed_sync_stops;
            total.lost_writes += stats.lost_writes;
            total.torn_writes += stats.torn_writes;
            total.compactions += stats.compactions;
            total.stream_snapshots += stats.stream_snapshots;
            total.checkpoints += stats.checkpoints;
            total.isolated_proposals += stats.isolated_proposals;
            total.cut_writes += stats.cut_writes;
            total.max_term = total.max_term.max(stats.max_term);
        }
        total
    });
    println!(
        "{count} seeds ({} of 5 nodes) in {:.1} s: {} proposals acknowledged, {} abandoned, \
         {} power losses ({} unsynced writes lost, {} torn), {} fdatasyncs made to fail ({} \
         nodes down for one, counted in the power losses), {} compactions, {} stream \
         snapshots, {} checkpoints, {} proposals accepted by leaders cut off in a minority, \
         {} raft writes cut into several log entries, highest term {}",
        total.five_node_seeds,
        started.elapsed().as_secs_f64(),
        total.acknowledged,
        total.abandoned,
        total.power_losses,
        total.lost_writes,
        total.torn_writes,
        total.failed_syncs,
        total.failed_sync_stops,
        total.compactions,
        total.stream_snapshots,
        total.checkpoints,
        total.isolated_proposals,
        total.cut_writes,
        total.max_term
    );
    // The run must have exercised what it checks (the healing phase alone acks 2 per seed).
    assert!(total.acknowledged > 2 * count, "too few acknowledged proposals: {total:?}");
    if count >= 50 {
        assert!(total.power_losses > 0 && total.torn_writes > 0, "{total:?}");
        assert!(total.failed_sync_stops > 0, "no node went down on a failed fdatasync: {total:?}");
        assert!(total.compactions > 0 && total.stream_snapshots > 0, "{total:?}");
        assert!(total.checkpoints > 0 && total.isolated_proposals > 0, "{total:?}");
        assert!(total.cut_writes > 0, "no write was cut into several log entries: {total:?}");
    }
}
