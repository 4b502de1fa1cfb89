//! What the raft simulations share (replication_sim.rs: one group over an abstract disk;
//! replication_sim_disk.rs: several groups per node over a `SimDisk` shard log): the
//! seeded network, the invariant checker of one group, and a life's group settings.
//!
//! Invariants the `Checker` holds one group to (each simulation's module docs say when it
//! checks them):
//! 1. at most one leader per term (ever, across crashes);
//! 2. committed entries never diverge: every replica's committed entry at an index has
//!    the term and value every other replica (and its own earlier life) committed there,
//!    each replica's committed entries of a life come in index order without gaps, and no
//!    value is committed twice;
//! 3. a proposal reported `Committed` is the entry committed at its index;
//! 4. a leader cut off in a minority never reports `Committed` for a proposal it
//!    accepted there, while still cut off;
//! 5. every acknowledged proposal is in a replica's durable log at its index (or below
//!    its compaction point, which then has the committed term at its index).

// Each simulation uses part of this module.
#![allow(dead_code)]

use std::collections::HashMap;

use shardlog_shards::replication::{GroupConfig, LogImage, Outcome, Proposal};
use shardlog_storage::XorShift;

/// A replica's settings for one life: raft-rs draws election timeouts from its thread's
/// generator, so the simulation fixes each life's timeout from the seed instead (nodes
/// still differ, and a restarted node gets a new one).
pub fn config(id: u64, rng: &mut XorShift) -> GroupConfig {
    let mut config = GroupConfig::new(id);
    config.fixed_election_timeout = Some(config.election_tick + rng.below(10) as usize);
    config
}

/// The value an entry carries: its first 8 bytes (0 for a leader's empty entry).
pub fn value_of(data: &[u8]) -> u64 {
    match data.get(..8) {
        Some(value) => u64::from_be_bytes(value.try_into().expect("8 bytes")),
        None => 0,
    }
}

/// The seeds to run: `SHARDLOG_SEED` alone if set, else `{prefix}_SEEDS` of them (default
/// `default`) from `{prefix}_FIRST_SEED` (default 1).
pub fn seeds(prefix: &str, default: u64) -> Vec<u64> {
    let number = |name: String, default: u64| {
        std::env::var(&name).map_or(default, |s| {
            s.parse().unwrap_or_else(|_| panic!("{name} is a number, not {s:?}"))
        })
    };
    match std::env::var("SHARDLOG_SEED") {
        Ok(seed) => vec![seed.parse().expect("SHARDLOG_SEED is a number")],
        Err(_) => {
            let first = number(format!("{prefix}_FIRST_SEED"), 1);
            (first..first + number(format!("{prefix}_SEEDS"), default)).collect()
        }
    }
}

/// Messages in flight between nodes `0..n`, and the partition that cuts them.
pub struct Network<M> {
    /// (step due, message).
    in_flight: Vec<(u64, M)>,
    /// Nodes with the same component number can talk.
    component: Vec<u64>,
    /// Bumped at every partition change (invariant 4's "still cut off").
    pub epoch: u64,
}

impl<M: Clone> Network<M> {
    pub fn new(nodes: usize) -> Network<M> {
        Network { in_flight: Vec::new(), component: vec![0; nodes], epoch: 0 }
    }

    pub fn connected(&self, a: usize, b: usize) -> bool {
        self.component[a] == self.component[b]
    }

    /// Whether node `node` is cut off from a majority.
    pub fn in_minority(&self, node: usize) -> bool {
        let mine = self.component[node];
        self.component.iter().filter(|&&c| c == mine).count() * 2 < self.component.len() + 1
    }

    /// Sends `message` (twice, at `duplicate_percent`), due 1 to `max_delay_steps` steps on.
    pub fn send(
        &mut self,
        rng: &mut XorShift,
        now: u64,
        (duplicate_percent, max_delay_steps): (u64, u64),
        message: M,
    ) {
        let copies = if rng.chance(duplicate_percent, 100) { 2 } else { 1 };
        for _ in 0..copies {
            let at = now + 1 + rng.up_to(max_delay_steps - 1);
            self.in_flight.push((at, message.clone()));
        }
    }

    /// Messages due at `now`, in random order, less those cut by the partition between
    /// `ends(message)` (node indexes) and those lost (at `drop_percent`).
    pub fn deliver(
        &mut self,
        rng: &mut XorShift,
        now: u64,
        drop_percent: u64,
        ends: impl Fn(&M) -> (usize, usize),
    ) -> Vec<M> {
        let (mut due, later): (Vec<_>, Vec<_>) =
            self.in_flight.drain(..).partition(|(at, _)| *at <= now);
        self.in_flight = later;
        for k in (1..due.len()).rev() {
            due.swap(k, rng.up_to(k as u64) as usize);
        }
        let mut delivered = Vec::with_capacity(due.len());
        for (_, message) in due {
            let (from, to) = ends(&message);
            if self.connected(from, to) && !rng.chance(drop_percent, 100) {
                delivered.push(message);
            }
        }
        delivered
    }

    /// A new partition: a minority cut off (one node; with five, sometimes two), every
    /// node apart, or none.
    pub fn change_partition(&mut self, rng: &mut XorShift) {
        self.epoch += 1;
        let n = self.component.len();
        self.component = match rng.below(4) {
            0 | 1 => {
                let mut component = vec![0; n];
                component[rng.below(n as u64) as usize] = 1;
                if n > 3 && rng.chance(1, 2) {
                    component[rng.below(n as u64) as usize] = 1;
                }
                component
            }
            2 => (0..n as u64).collect(),
            _ => vec![0; n],
        };
    }

    /// Every node can talk again.
    pub fn heal(&mut self) {
        self.component.iter_mut().for_each(|c| *c = 0);
        self.epoch += 1;
    }
}

/// A proposal a node accepted: its value, and the partition epoch it was made in if the
/// node was then cut off in a minority.
struct Proposed {
    value: u64,
    isolated_in: Option<u64>,
}

/// Invariants 1-5 of one group, over everything its replicas report. Errors are the
/// failure without its seed (the simulation adds it).
#[derive(Default)]
pub struct Checker {
    leader_of_term: HashMap<u64, u64>,
    /// index - 1 -> (term, value).
    committed: Vec<(u64, u64)>,
    index_of_value: HashMap<u64, u64>,
    proposals: HashMap<(u64, Proposal), Proposed>,
    acknowledged: Vec<(Proposal, u64)>,
    pub abandoned: u64,
}

impl Checker {
    /// Replica `id` accepted `proposal` of `value`, cut off in a minority in partition
    /// epoch `isolated_in` if so.
    pub fn proposed(&mut self, id: u64, proposal: Proposal, value: u64, isolated_in: Option<u64>) {
        self.proposals.insert((id, proposal), Proposed { value, isolated_in });
    }

    /// Whether replica `id`'s `proposal` is still waiting for its outcome.
    pub fn pending(&self, id: u64, proposal: Proposal) -> bool {
        self.proposals.contains_key(&(id, proposal))
    }

    pub fn is_acknowledged(&self, proposal: Proposal) -> bool {
        self.acknowledged.iter().any(|(a, _)| *a == proposal)
    }

    pub fn acknowledged(&self) -> u64 {
        self.acknowledged.len() as u64
    }

    /// Invariant 1: replica `id` leads `term`.
    pub fn check_leader(&mut self, id: u64, term: u64) -> Result<(), String> {
        let leader = *self.leader_of_term.entry(term).or_insert(id);
        if leader != id {
            return Err(format!("nodes {leader} and {id} lead term {term}"));
        }
        Ok(())
    }

    /// Invariant 2: replica `id` committed (`index`, `term`, `value`), the next of its life
    /// being expected at `next_committed`.
    pub fn check_committed(
        &mut self,
        id: u64,
        next_committed: &mut u64,
        (index, term, value): (u64, u64, u64),
    ) -> Result<(), String> {
        if index != *next_committed {
            return Err(format!("node {id} committed {index}, expected {next_committed}"));
        }
        *next_committed += 1;
        let committed = &mut self.committed;
        if committed.len() < index as usize {
            committed.push((term, value));
            if value != 0 {
                if let Some(at) = self.index_of_value.insert(value, index) {
                    return Err(format!("value {value} committed at {at} and {index}"));
                }
            }
        } else if committed[index as usize - 1] != (term, value) {
            let before = committed[index as usize - 1];
            return Err(format!(
                "node {id} committed (term, value) {:?} at {index}, others {before:?}",
                (term, value)
            ));
        }
        Ok(())
    }

    /// Invariants 3 and 4: replica `id` reported `outcome`; it is cut off in a minority of
    /// partition epoch `epoch` now if `isolated`.
    pub fn check_outcome(
        &mut self,
        id: u64,
        outcome: Outcome,
        (epoch, isolated): (u64, bool),
    ) -> Result<(), String> {
        let proposal = match outcome {
            Outcome::Committed(p) => p,
            Outcome::Abandoned(p) => {
                // Its fate is unknown: nothing to check but that it was proposed here.
                self.abandoned += 1;
                return match self.proposals.remove(&(id, p)) {
                    Some(_) => Ok(()),
                    None => Err(format!("node {id} abandoned {p:?}, never proposed")),
                };
            }
        };
        let Some(proposed) = self.proposals.remove(&(id, proposal)) else {
            return Err(format!("node {id} reported {outcome:?}, never proposed"));
        };
        let at = self.committed.get(proposal.index as usize - 1).copied();
        if at != Some((proposal.term, proposed.value)) {
            return Err(format!("{outcome:?} of value {} but {at:?} is", proposed.value));
        }
        if isolated && proposed.isolated_in == Some(epoch) {
            return Err(format!("node {id}, cut off in a minority, acked {proposal:?}"));
        }
        self.acknowledged.push((proposal, proposed.value));
        Ok(())
    }

    /// Invariant 5 for replica `id`'s durable `log`.
    pub fn check_durable_log(&self, id: u64, log: &LogImage) -> Result<(), String> {
        if log.snapshot_index > 0 {
            let term = self.committed.get(log.snapshot_index as usize - 1).map(|c| c.0);
            if term != Some(log.snapshot_term) {
                let point = (log.snapshot_index, log.snapshot_term);
                return Err(format!("node {id} compacted to {point:?}, committed term {term:?}"));
            }
        }
        for &(proposal, value) in &self.acknowledged {
            if proposal.index <= log.snapshot_index {
                continue; // compacted: committed, and the compaction point agrees
            }
            let entry = log.entry(proposal.index);
            let found = entry.map(|e| (e.term, value_of(&e.data)));
            if found != Some((proposal.term, value)) {
                return Err(format!(
                    "acknowledged value {value} at {proposal:?} is {found:?} on node {id}"
                ));
            }
        }
        Ok(())
    }
}
