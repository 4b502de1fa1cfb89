//! Deterministic simulation of one raft group of three replicas (`RaftGroup`, the sans-IO
//! driver in shards/src/replication/), in the spirit of power_loss.rs but with no
//! executor at all: one thread, one seeded generator, so a seed replays exactly.
//!
//! The world, per step: nodes tick (each skips some ticks: clocks drift); a network that
//! drops, delays, duplicates and reorders messages, and partitions the nodes (one node cut
//! off, or all three apart) and heals; a disk per node whose writes become durable only
//! when the simulation syncs it; crashes that keep only what was synced plus a random
//! prefix of the unsynced writes (each write whole, as a log entry is), and restarts
//! from that; clients proposing unique values to random nodes.
//!
//! Checked after every step, by `raft_sim::Checker` (shared with replication_sim_disk.rs,
//! which runs several groups per node over a `SimDisk` shard log):
//! 1. at most one leader per term (ever, across crashes);
//! 2. committed entries never diverge: every replica's committed entry at an index has
//!    the term and value every other replica (and its own earlier life) committed there,
//!    each replica's committed entries come in index order without gaps, and no value is
//!    committed twice;
//! 3. a proposal reported `Committed` is the entry committed at its index;
//! 4. a leader cut off in a minority never reports `Committed` for a proposal it
//!    accepted there, while still cut off.
//!
//! At the end of each seed every node crashes at once (unsynced writes lost as above),
//! all restart, the network heals, and the group must elect a leader, commit a new
//! proposal and bring every replica's durable log up to it (liveness); then:
//! 5. every acknowledged proposal is in every replica's durable log at its index.
//!
//! `SHARDLOG_SEED=N` replays seed N alone; `SHARDLOG_RAFT_SIM_SEEDS=N` runs N seeds
//! (default `DEFAULT_SEEDS`) from `SHARDLOG_RAFT_SIM_FIRST_SEED` (default 1). A failure
//! names its seed and step.

mod raft_sim;

use std::collections::VecDeque;

use raft_sim::{config, value_of, Checker, Network};
use shardlog_shards::replication::{LogImage, Message, Proposal, RaftGroup, WriteRequest};
use shardlog_storage::XorShift;

const NODES: usize = 3;
/// Seeds a plain `cargo test` runs (a few seconds in release on the 2-core machine).
const DEFAULT_SEEDS: u64 = 300;
/// Faulty steps per seed, then the healing phase.
const STEPS: u64 = 1500;
/// Steps the healed group gets to converge before the seed fails for liveness.
const HEAL_STEPS: u64 = 3000;

/// Fault rates of one seed, drawn from it (so seeds differ in kind, not only in luck).
#[derive(Debug)]
struct Faults {
    drop_percent: u64,
    duplicate_percent: u64,
    max_delay_steps: u64,
    crash_per_mille: u64,
    partition_per_mille: u64,
    sync_percent: u64,
    propose_percent: u64,
}

impl Faults {
    fn draw(rng: &mut XorShift) -> Faults {
        Faults {
            drop_percent: rng.up_to(30),
            duplicate_percent: rng.up_to(10),
            max_delay_steps: 1 + rng.up_to(8),
            crash_per_mille: rng.up_to(8),
            partition_per_mille: rng.up_to(15),
            sync_percent: 20 + rng.up_to(80),
            propose_percent: 10 + rng.up_to(40),
        }
    }

    fn none() -> Faults {
        Faults {
            drop_percent: 0,
            duplicate_percent: 0,
            max_delay_steps: 1,
            crash_per_mille: 0,
            partition_per_mille: 0,
            sync_percent: 100,
            propose_percent: 0,
        }
    }
}

/// A node's disk: what is durable, and writes handed to it but not yet synced.
struct SimRaftDisk {
    durable: LogImage,
    unsynced: VecDeque<WriteRequest>,
}

impl SimRaftDisk {
    /// fdatasync: every write so far is durable. Returns the last write's number.
    fn sync(&mut self) -> Option<u64> {
        let last = self.unsynced.back()?.number;
        for write in self.unsynced.drain(..) {
            self.durable.apply(&write);
        }
        Some(last)
    }

    /// Power loss: a random prefix of the unsynced writes reached the platter (each whole),
    /// the rest is gone.
    fn crash(&mut self, rng: &mut XorShift) {
        let kept = rng.up_to(self.unsynced.len() as u64) as usize;
        for write in self.unsynced.drain(..).take(kept) {
            self.durable.apply(&write);
        }
        self.unsynced.clear();
    }
}

struct SimNode {
    id: u64,
    /// None while crashed.
    group: Option<RaftGroup>,
    disk: SimRaftDisk,
    restart_at: u64,
    /// Index the next committed entry this life reports must have.
    next_committed: u64,
}

#[derive(Default)]
struct Stats {
    acknowledged: u64,
    abandoned: u64,
    crashes: u64,
    isolated_proposals: u64,
    max_term: u64,
}

struct World {
    seed: u64,
    step: u64,
    rng: XorShift,
    faults: Faults,
    nodes: Vec<SimNode>,
    network: Network<Message>,
    next_value: u64,
    checker: Checker,
    stats: Stats,
}

impl World {
    fn new(seed: u64) -> World {
        let mut rng = XorShift::new(seed);
        let faults = Faults::draw(&mut rng);
        let voters: Vec<u64> = (1..=NODES as u64).collect();
        let nodes = voters
            .iter()
            .map(|&id| SimNode {
                id,
                group: Some(
                    RaftGroup::recover(&config(id, &mut rng), LogImage::new(&voters), 0).unwrap(),
                ),
                disk: SimRaftDisk { durable: LogImage::new(&voters), unsynced: VecDeque::new() },
                restart_at: 0,
                next_committed: 1,
            })
            .collect();
        World {
            seed,
            step: 0,
            rng,
            faults,
            nodes,
            network: Network::new(NODES),
            next_value: 1,
            checker: Checker::default(),
            stats: Stats::default(),
        }
    }

    fn fail(&self, what: String) -> String {
        format!(
            "seed {} step {}: {what} (faults {:?}; replay: SHARDLOG_SEED={} cargo test \
             --release -p shardlog-shards --test replication_sim)",
            self.seed, self.step, self.faults, self.seed
        )
    }

    fn in_minority(&self, node: usize) -> bool {
        self.network.in_minority(node)
    }

    // -- faults -----------------------------------------------------------------------------

    fn crash(&mut self, node: usize) {
        let n = &mut self.nodes[node];
        if n.group.take().is_some() {
            n.disk.crash(&mut self.rng);
            n.restart_at = self.step + 1 + self.rng.up_to(60);
            self.stats.crashes += 1;
        }
    }

    fn restart_due(&mut self) -> Result<(), String> {
        for node in 0..NODES {
            let n = &self.nodes[node];
            if n.group.is_none() && n.restart_at <= self.step {
                let config = config(n.id, &mut self.rng);
                let group = RaftGroup::recover(&config, n.disk.durable.clone(), 0)
                    .map_err(|e| self.fail(format!("restart: {e}")))?;
                self.nodes[node].group = Some(group);
                self.nodes[node].next_committed = 1;
            }
        }
        Ok(())
    }

    fn inject_faults(&mut self) -> Result<(), String> {
        if self.rng.chance(self.faults.crash_per_mille, 1000) {
            let node = self.rng.below(NODES as u64) as usize;
            self.crash(node);
        }
        if self.rng.chance(self.faults.partition_per_mille, 1000) {
            self.network.change_partition(&mut self.rng);
        }
        self.restart_due()
    }

    // -- one step -----------------------------------------------------------------------------

    fn run_step(&mut self) -> Result<(), String> {
        self.step += 1;
        self.inject_faults()?;
        for node in 0..NODES {
            // Clocks drift: a node skips a tick now and then.
            if !self.rng.chance(1, 10) {
                if let Some(group) = &mut self.nodes[node].group {
                    group.tick();
                }
            }
        }
        self.deliver_due();
        self.sync_disks();
        if self.rng.chance(self.faults.propose_percent, 100) {
            self.propose_somewhere();
        }
        for node in 0..NODES {
            self.drain(node)?;
        }
        self.check_leaders()
    }

    /// Messages due now, in random order; each may be lost or cut by the partition.
    fn deliver_due(&mut self) {
        let ends = |m: &Message| (m.from as usize - 1, m.to as usize - 1);
        let drop_percent = self.faults.drop_percent;
        for message in self.network.deliver(&mut self.rng, self.step, drop_percent, ends) {
            if let Some(group) = &mut self.nodes[message.to as usize - 1].group {
                // Errors are messages raft refuses (none expected from members): dropped.
                let _ = group.step(message);
            }
        }
    }

    fn send(&mut self, messages: Vec<Message>) {
        let shape = (self.faults.duplicate_percent, self.faults.max_delay_steps);
        for message in messages {
            self.network.send(&mut self.rng, self.step, shape, message);
        }
    }

    fn sync_disks(&mut self) {
        for node in self.nodes.iter_mut() {
            let Some(group) = &mut node.group else { continue };
            if self.rng.chance(self.faults.sync_percent, 100) {
                if let Some(number) = node.disk.sync() {
                    group.durable(number);
                }
            }
        }
    }

    fn propose_somewhere(&mut self) {
        let node = self.rng.below(NODES as u64) as usize;
        let isolated = self.in_minority(node).then_some(self.network.epoch);
        let n = &mut self.nodes[node];
        let Some(group) = &mut n.group else { return };
        let value = self.next_value;
        if let Ok(proposal) = group.propose(value.to_be_bytes().to_vec()) {
            self.next_value += 1;
            self.stats.isolated_proposals += isolated.is_some() as u64;
            self.checker.proposed(n.id, proposal, value, isolated);
        }
    }

    /// Takes a node's outputs: messages to the network, writes to its disk, committed
    /// entries and outcomes to the checker.
    fn drain(&mut self, node: usize) -> Result<(), String> {
        let Some(group) = &mut self.nodes[node].group else { return Ok(()) };
        let messages = group.take_messages();
        let writes = group.take_writes();
        let committed = group.take_committed();
        let outcomes = group.take_outcomes();
        self.stats.max_term = self.stats.max_term.max(group.term());
        self.nodes[node].disk.unsynced.extend(writes);
        self.send(messages);
        let id = self.nodes[node].id;
        for entry in committed {
            let next = &mut self.nodes[node].next_committed;
            let entry = (entry.index, entry.term, value_of(&entry.data));
            self.checker.check_committed(id, next, entry).map_err(|e| self.fail(e))?;
        }
        for outcome in outcomes {
            let isolated = (self.network.epoch, self.in_minority(node));
            self.checker.check_outcome(id, outcome, isolated).map_err(|e| self.fail(e))?;
        }
        Ok(())
    }

    // -- invariants -------------------------------------------------------------------------

    /// Invariant 1.
    fn check_leaders(&mut self) -> Result<(), String> {
        for node in &self.nodes {
            let Some(group) = &node.group else { continue };
            if group.is_leader() {
                let leading = self.checker.check_leader(node.id, group.term());
                leading.map_err(|e| self.fail(e))?;
            }
        }
        Ok(())
    }

    /// Invariant 5, after the healing phase synced everything.
    fn check_durable_logs(&self) -> Result<(), String> {
        for node in &self.nodes {
            let checked = self.checker.check_durable_log(node.id, &node.disk.durable);
            checked.map_err(|e| self.fail(e))?;
        }
        Ok(())
    }

    // -- healing: every node crashes, restarts, and the group must make progress ----------

    fn heal(&mut self) -> Result<(), String> {
        for node in 0..NODES {
            self.crash(node);
            self.nodes[node].restart_at = self.step;
        }
        self.restart_due()?;
        self.network.heal();
        self.faults = Faults::none();
        let mut last: Option<(u64, Proposal)> = None;
        for _ in 0..HEAL_STEPS {
            self.run_step()?;
            // An abandoned final proposal is proposed again, to whoever leads now.
            let acked = |p: Proposal, c: &Checker| c.is_acknowledged(p);
            if let Some((id, p)) = last {
                if !self.checker.pending(id, p) && !acked(p, &self.checker) {
                    last = None;
                }
            }
            if last.is_none() {
                last = self.propose_to_leader();
            }
            let Some((_, p)) = last else { continue };
            let replicated =
                |n: &SimNode| n.disk.durable.entry(p.index).is_some_and(|e| e.term == p.term);
            if acked(p, &self.checker) && self.nodes.iter().all(replicated) {
                return self.check_durable_logs();
            }
        }
        let state: Vec<_> = self
            .nodes
            .iter()
            .map(|n| {
                let g = n.group.as_ref().unwrap();
                (g.term(), g.leader_id(), g.commit_index(), n.disk.durable.last_index())
            })
            .collect();
        Err(self.fail(format!(
            "no progress after healing: final proposal {last:?}, (term, leader, commit, \
             durable) {state:?}"
        )))
    }

    fn propose_to_leader(&mut self) -> Option<(u64, Proposal)> {
        let value = self.next_value;
        for node in &mut self.nodes {
            let group = node.group.as_mut()?;
            if let Ok(proposal) = group.propose(value.to_be_bytes().to_vec()) {
                self.next_value += 1;
                self.checker.proposed(node.id, proposal, value, None);
                return Some((node.id, proposal));
            }
        }
        None
    }
}

fn run_seed(seed: u64) -> Result<Stats, String> {
    let mut world = World::new(seed);
    for _ in 0..STEPS {
        world.run_step()?;
    }
    world.heal()?;
    world.stats.acknowledged = world.checker.acknowledged();
    world.stats.abandoned = world.checker.abandoned;
    Ok(world.stats)
}

#[test]
fn replicas_never_lose_or_diverge_on_acknowledged_proposals_under_faults() {
    let seeds = raft_sim::seeds("SHARDLOG_RAFT_SIM", DEFAULT_SEEDS);
    let mut total = Stats::default();
    for &seed in &seeds {
        // A panic inside raft-rs or the driver (an assertion) must name its seed too.
        let stats = std::panic::catch_unwind(|| run_seed(seed))
            .unwrap_or_else(|_| {
                Err(format!("seed {seed} panicked (above); replay: SHARDLOG_SEED={seed}"))
            })
            .unwrap_or_else(|failure| panic!("{failure}"));
        total.acknowledged += stats.acknowledged;
        total.abandoned += stats.abandoned;
        total.crashes += stats.crashes;
        total.isolated_proposals += stats.isolated_proposals;
        total.max_term = total.max_term.max(stats.max_term);
    }
    println!(
        "{} seeds: {} proposals acknowledged, {} abandoned, {} crashes, {} \
         proposals accepted by leaders cut off in a minority, highest term {}",
        seeds.len(),
        total.acknowledged,
        total.abandoned,
        total.crashes,
        total.isolated_proposals,
        total.max_term
    );
    // The run must have exercised what it checks (the healing phase alone acks one per seed).
    assert!(total.acknowledged > seeds.len() as u64, "too few acknowledged proposals");
    if seeds.len() >= 50 {
        assert!(total.crashes > 0 && total.isolated_proposals > 0 && total.abandoned > 0);
    }
}
