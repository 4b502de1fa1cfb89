//! Leaders of partitions this node does not replicate (docs/replication.md, "Replication
//! factors between 1 and n"): with replication factor r < n, a node outside a
//! partition's replica set hosts no group of it, and learns its leader, term and ISR from
//! the leader's notices (`replication::notice`, which says when they are sent and when a
//! heard leader expires). Every TICK each shard sends the notices of the groups it leads
//! and takes what arrived; a change is published to the node's shards as a member's is
//! (`ShardRequest::PartitionLeader`, `PartitionIsr`), so Metadata on any shard reads its
//! own maps and never asks another node.
//!
//! Runs on every shard of a node with peers (shard s hears the groups of shard s: a
//! partition sits on the same shard of every replica). Not a hot path: one message per
//! peer outside a set per tick at most.
//!
//! Invariants:
//! 1. A group this shard hosts is never taken from a notice: its members know their
//!    leader from raft.
//! 2. A notice of a lower term than one heard is ignored, and only a group's leader
//!    announces it (a notice naming another node than its sender is dropped): a deposed
//!    leader's late notice never replaces its successor.
//! 3. A leader heard of no notice for `EXPIRY_TICKS` is forgotten (Metadata: no leader),
//!    never kept for ever.

use std::collections::{BTreeMap, HashMap};

use crate::message::ShardRequest;
use crate::partition_group::{tell_other_shards, PartitionGroups};
use crate::replication::notice::{self, LeaderNotice, EXPIRY_TICKS, REFRESH_TICKS};
use crate::shard::Shard;

/// A shard's notices sent and heard.
#[derive(Default)]
pub struct LeaderNotices {
    /// Ticks since the groups started.
    tick: u64,
    /// Per group this replica leads (and whose set is not every node): the notice last
    /// sent, and when.
    sent: HashMap<u64, (LeaderNotice, u64)>,
    /// Per group not hosted here: the last notice taken (invariant 2), when, and whether
    /// it expired since (invariant 3).
    heard: HashMap<u64, Heard>,
}

struct Heard {
    notice: LeaderNotice,
    at: u64,
    expired: bool,
}

impl Shard {
    /// Every TICK: sends this shard's due notices, takes those that arrived, forgets the
    /// expired (module docs).
    pub(crate) fn exchange_leader_notices(&self, groups: &PartitionGroups) {
        let tick = {
            let mut state = groups.notices.borrow_mut();
            state.tick += 1;
            state.tick
        };
        self.send_leader_notices(groups, tick);
        self.take_leader_notices(groups, tick);
        self.expire_leader_notices(groups, tick);
    }

    fn send_leader_notices(&self, groups: &PartitionGroups, tick: u64) {
        let nodes = &self.config.nodes;
        let hosted = groups.hosted_groups();
        let mut outgoing: BTreeMap<u32, Vec<LeaderNotice>> = BTreeMap::new();
        let mut state = groups.notices.borrow_mut();
        for (group, replicas) in hosted.into_iter().filter(|(_, r)| r.len() < nodes.len()) {
            let (leads, term) = groups.leadership(group);
            if !leads {
                state.sent.remove(&group);
                continue;
            }
            let isr = self.partition_isr(group).unwrap_or_else(|| replicas.clone());
            let leader = self.config.node_id;
            let notice = LeaderNotice { group, leader, term, isr };
            let due = state
                .sent
                .get(&group)
                .is_none_or(|(last, at)| *last != notice || tick - at >= REFRESH_TICKS);
            if !due {
                continue;
            }
            for outside in nodes.iter().filter(|n| !replicas.contains(n)) {
                outgoing.entry(*outside).or_default().push(notice.clone());
            }
            state.sent.insert(group, (notice, tick));
        }
        for (to, notices) in outgoing {
            if let Err(e) = groups.host.send_notice(to as u64, notice::encode(&notices)) {
                tracing::warn!(shard = self.id, error = %e, "a leader notice for no peer");
            }
        }
    }

    fn take_leader_notices(&self, groups: &PartitionGroups, tick: u64) {
        let arrived = groups.host.take_notices();
        if arrived.is_empty() {
            return;
        }
        let hosted = groups.hosted_groups();
        for (from, bytes) in arrived {
            let notices = match notice::decode(&bytes) {
                Ok(notices) => notices,
                Err(e) => {
                    tracing::warn!(shard = self.id, from, error = %e, "a leader notice dropped");
                    continue;
                }
            };
            for notice in notices {
                if hosted.contains_key(&notice.group) || notice.leader as u64 != from {
                    continue; // invariants 1 and 2
                }
                let mut state = groups.notices.borrow_mut();
                let previous = state.heard.get(&notice.group);
                if previous.is_some_and(|h| notice.term < h.notice.term) {
                    continue; // invariant 2
                }
                let changed = previous.is_none_or(|h| h.expired || h.notice != notice);
                let heard = Heard { notice: notice.clone(), at: tick, expired: false };
                state.heard.insert(notice.group, heard);
                drop(state);
                if changed {
                    self.publish_heard_leader(notice.group, Some(notice.leader), notice.term);
                    self.publish_isr(notice.group, notice.isr);
                }
            }
        }
    }

    fn expire_leader_notices(&self, groups: &PartitionGroups, tick: u64) {
        let mut expired = Vec::new();
        for (group, heard) in groups.notices.borrow_mut().heard.iter_mut() {
            if !heard.expired && tick - heard.at > EXPIRY_TICKS {
                heard.expired = true;
                expired.push((*group, heard.notice.term));
            }
        }
        for (group, term) in expired {
            tracing::info!(shard = self.id, group = format!("{group:#x}"), "leader notice expired");
            self.publish_heard_leader(group, None, term);
        }
    }

    /// Records a group's leader here and on the node's other shards.
    fn publish_heard_leader(&self, group: u64, leader: Option<u32>, term: u64) {
        self.set_partition_leader(group, (leader, term));
        tell_other_shards(self, || ShardRequest::PartitionLeader { group, leader, term });
    }
}
