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
//! Checked after every step:
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

use std::collections::{HashMap, VecDeque};

use shardlog_shards::replication::{
    GroupConfig, LogImage, Message, Outcome, Proposal, RaftGroup, WriteRequest,
};
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

/// A proposal a node accepted: its value, and the partition epoch it was made in if the
/// node was then cut off in a minority.
struct Proposed {
    value: u64,
    isolated_in: Option<u64>,
}

#[derive(Default)]
struct Stats {
    acknowledged: u64,
    abandoned: u64,
    crashes: u64,
    isolated_proposals: u64,
    max_term: u64,
}

/// Invariants 1-5 over everything the replicas report.
#[derive(Default)]
struct Checker {
    leader_of_term: HashMap<u64, u64>,
    /// index - 1 -> (term, value; 0 for a leader's empty entry).
    committed: Vec<(u64, u64)>,
    index_of_value: HashMap<u64, u64>,
    proposals: HashMap<(u64, Proposal), Proposed>,
    acknowledged: Vec<(Proposal, u64)>,
}

struct World {
    seed: u64,
    step: u64,
    rng: XorShift,
    faults: Faults,
    nodes: Vec<SimNode>,
    network: Vec<(u64, Message)>,
    /// Nodes with the same component number can talk.
    component: [u64; NODES],
    /// Bumped at every partition change (invariant 4's "still cut off").
    partition_epoch: u64,
    next_value: u64,
    checker: Checker,
    stats: Stats,
}

/// A replica's settings for one life: raft-rs draws election timeouts from its thread's
/// generator, so the simulation fixes each life's timeout from the seed instead (nodes
/// still differ, and a restarted node gets a new one).
fn config(id: u64, rng: &mut XorShift) -> GroupConfig {
    let mut config = GroupConfig::new(id);
    config.fixed_election_timeout = Some(config.election_tick + rng.below(10) as usize);
    config
}

fn value_of(data: &[u8]) -> u64 {
    if data.is_empty() {
        return 0;
    }
    u64::from_be_bytes(data.try_into().expect("values are 8 bytes"))
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
            network: Vec::new(),
            component: [0; NODES],
            partition_epoch: 0,
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
        let mine = self.component[node];
        self.component.iter().filter(|&&c| c == mine).count() * 2 < NODES + 1
    }

    fn connected(&self, from: u64, to: u64) -> bool {
        self.component[from as usize - 1] == self.component[to as usize - 1]
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

    fn change_partition(&mut self) {
        self.partition_epoch += 1;
        self.component = match self.rng.below(4) {
            0 | 1 => {
                let mut component = [0; NODES];
                component[self.rng.below(NODES as u64) as usize] = 1;
                component
            }
            2 => [0, 1, 2],
            _ => [0; NODES],
        };
    }

    fn inject_faults(&mut self) -> Result<(), String> {
        if self.rng.chance(self.faults.crash_per_mille, 1000) {
            let node = self.rng.below(NODES as u64) as usize;
            self.crash(node);
        }
        if self.rng.chance(self.faults.partition_per_mille, 1000) {
            self.change_partition();
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
        let (mut due, later): (Vec<_>, Vec<_>) =
            self.network.drain(..).partition(|(at, _)| *at <= self.step);
        self.network = later;
        for k in (1..due.len()).rev() {
            due.swap(k, self.rng.up_to(k as u64) as usize);
        }
        for (_, message) in due {
            if !self.connected(message.from, message.to)
                || self.rng.chance(self.faults.drop_percent, 100)
            {
                continue;
            }
            if let Some(group) = &mut self.nodes[message.to as usize - 1].group {
                // Errors are messages raft refuses (none expected from members): dropped.
                let _ = group.step(message);
            }
        }
    }

    fn send(&mut self, messages: Vec<Message>) {
        for message in messages {
            let copies = if self.rng.chance(self.faults.duplicate_percent, 100) { 2 } else { 1 };
            for _ in 0..copies {
                let at = self.step + 1 + self.rng.up_to(self.faults.max_delay_steps - 1);
                self.network.push((at, message.clone()));
            }
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
        let isolated = self.in_minority(node).then_some(self.partition_epoch);
        let n = &mut self.nodes[node];
        let Some(group) = &mut n.group else { return };
        let value = self.next_value;
        if let Ok(proposal) = group.propose(value.to_be_bytes().to_vec()) {
            self.next_value += 1;
            self.stats.isolated_proposals += isolated.is_some() as u64;
            let proposed = Proposed { value, isolated_in: isolated };
            self.checker.proposals.insert((n.id, proposal), proposed);
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
        for entry in committed {
            self.check_committed(node, entry.index, entry.term, value_of(&entry.data))?;
        }
        for outcome in outcomes {
            self.check_outcome(node, outcome)?;
        }
        Ok(())
    }

    // -- invariants -------------------------------------------------------------------------

    /// Invariant 1.
    fn check_leaders(&mut self) -> Result<(), String> {
        for node in &self.nodes {
            let Some(group) = &node.group else { continue };
            if group.is_leader() {
                let leader = *self.checker.leader_of_term.entry(group.term()).or_insert(node.id);
                if leader != node.id {
                    let term = group.term();
                    return Err(
                        self.fail(format!("nodes {leader} and {} lead term {term}", node.id))
                    );
                }
            }
        }
        Ok(())
    }

    /// Invariant 2.
    fn check_committed(
        &mut self,
        node: usize,
        index: u64,
        term: u64,
        value: u64,
    ) -> Result<(), String> {
        let id = self.nodes[node].id;
        if index != self.nodes[node].next_committed {
            let expected = self.nodes[node].next_committed;
            return Err(self.fail(format!("node {id} committed {index}, expected {expected}")));
        }
        self.nodes[node].next_committed += 1;
        let committed = &mut self.checker.committed;
        if committed.len() < index as usize {
            committed.push((term, value));
            if value != 0 {
                if let Some(at) = self.checker.index_of_value.insert(value, index) {
                    return Err(self.fail(format!("value {value} committed at {at} and {index}")));
                }
            }
        } else if committed[index as usize - 1] != (term, value) {
            let before = committed[index as usize - 1];
            return Err(self.fail(format!(
                "node {id} committed (term, value) {:?} at {index}, others {before:?}",
                (term, value)
            )));
        }
        Ok(())
    }

    /// Invariants 3 and 4.
    fn check_outcome(&mut self, node: usize, outcome: Outcome) -> Result<(), String> {
        let id = self.nodes[node].id;
        let proposal = match outcome {
            Outcome::Committed(p) => p,
            Outcome::Abandoned(p) => {
                // Its fate is unknown: nothing to check but that it was proposed here.
                self.stats.abandoned += 1;
                return match self.checker.proposals.remove(&(id, p)) {
                    Some(_) => Ok(()),
                    None => Err(self.fail(format!("node {id} abandoned {p:?}, never proposed"))),
                };
            }
        };
        let Some(proposed) = self.checker.proposals.remove(&(id, proposal)) else {
            return Err(self.fail(format!("node {id} reported {outcome:?}, never proposed")));
        };
        let at = self.checker.committed.get(proposal.index as usize - 1).copied();
        if at != Some((proposal.term, proposed.value)) {
            return Err(self.fail(format!("{outcome:?} of value {} but {at:?} is", proposed.value)));
        }
        if proposed.isolated_in == Some(self.partition_epoch) && self.in_minority(node) {
            return Err(self.fail(format!("node {id}, cut off in a minority, acked {proposal:?}")));
        }
        self.checker.acknowledged.push((proposal, proposed.value));
        self.stats.acknowledged += 1;
        Ok(())
    }

    /// Invariant 5, after the healing phase synced everything.
    fn check_durable_logs(&self) -> Result<(), String> {
        for node in &self.nodes {
            for &(proposal, value) in &self.checker.acknowledged {
                let entry = node.disk.durable.entry(proposal.index);
                let found = entry.map(|e| (e.term, value_of(&e.data)));
                if found != Some((proposal.term, value)) {
                    return Err(self.fail(format!(
                        "acknowledged value {value} at {proposal:?} is {found:?} on node {}",
                        node.id
                    )));
                }
            }
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
        self.component = [0; NODES];
        self.partition_epoch += 1;
        self.faults = Faults::none();
        let mut last: Option<(u64, Proposal)> = None;
        for _ in 0..HEAL_STEPS {
            self.run_step()?;
            // An abandoned final proposal is proposed again, to whoever leads now.
            let acked = |p: Proposal, c: &Checker| c.acknowledged.iter().any(|(a, _)| *a == p);
            if let Some((id, p)) = last {
                if !self.checker.proposals.contains_key(&(id, p)) && !acked(p, &self.checker) {
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
                let proposed = Proposed { value, isolated_in: None };
                self.checker.proposals.insert((node.id, proposal), proposed);
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
    Ok(world.stats)
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .map_or(default, |s| s.parse().unwrap_or_else(|_| panic!("{name} is a number, not {s:?}")))
}

#[test]
fn replicas_never_lose_or_diverge_on_acknowledged_proposals_under_faults() {
    let seeds: Vec<u64> = match std::env::var("SHARDLOG_SEED") {
        Ok(seed) => vec![seed.parse().expect("SHARDLOG_SEED is a number")],
        Err(_) => {
            let first = env_number("SHARDLOG_RAFT_SIM_FIRST_SEED", 1);
            (first..first + env_number("SHARDLOG_RAFT_SIM_SEEDS", DEFAULT_SEEDS)).collect()
        }
    };
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
