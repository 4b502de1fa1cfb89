//! Preferred leaders (docs/replication.md, "Preferred leaders"): each partition group has
//! a preferred replica (`replication::partition::preferred_leader`: the node the
//! placement started the set from, which is the first replica Metadata lists for its
//! partitions; for a set of every node, node `shard % n`, so the groups of a node's
//! shards lead from different nodes). A new group's preferred replica campaigns at once,
//! so leaders start where the placement spread them rather than where election timeouts
//! fall; and every `leader_imbalance_check_interval` (Kafka's
//! leader.imbalance.check.interval.seconds) a leader that is not its group's preferred
//! replica hands the leadership over once that replica is caught up (a node that returned
//! after a failure takes its leaderships back).
//!
//! Runs on the shard that hosts the groups, from its tick. Not a hot path.
//!
//! Invariants:
//! 1. A leadership is handed only to a voter this leader saw caught up at its last tick
//!    (its match index reached the leader's last index of the tick before, and heard from
//!    lately: the ISR's test), after its first tick as leader: never to a replica that is
//!    down or far behind. raft-rs then brings it up to the last index (proposals are
//!    refused meanwhile; raft-rs abandons the transfer after an election timeout) and
//!    tells it to campaign at once.
//! 2. A campaign at creation is made only for a group with no recovered log (a new group):
//!    a restarted replica waits for its election timeout as before (with pre-vote it could
//!    not disrupt a live leader anyway).

use std::time::Instant;

use crate::partition_group::PartitionGroups;
use crate::replication::partition::preferred_leader;
use crate::replication::raft_id;
use crate::shard::Shard;

impl Shard {
    /// This node is the preferred replica of the group of (`replicas`, this shard).
    pub(crate) fn prefers_here(&self, replicas: &[u32]) -> bool {
        preferred_leader(replicas, self.id as u32, &self.config.nodes) == self.config.node_id
    }

    /// Every TICK: once per `leader_imbalance_check_interval`, hands each group this
    /// replica leads to its preferred replica if that one is caught up (invariant 1).
    pub(crate) fn balance_leaders(&self, groups: &PartitionGroups) {
        let Some(interval) = self.config.leader_imbalance_check_interval else { return };
        let now = Instant::now();
        let last = groups.last_leader_balance.replace(Some(now));
        if last.is_some_and(|at| now - at < interval) {
            groups.last_leader_balance.set(last);
            return;
        }
        for (group, replicas) in groups.hosted_groups() {
            let preferred = preferred_leader(&replicas, self.id as u32, &self.config.nodes);
            if preferred == self.config.node_id || !groups.caught_up_lately(group, preferred, now) {
                continue;
            }
            let to = raft_id(preferred as u64);
            let handed = groups.host.with_group(group, |g| g.transfer_leadership_to(to));
            if handed == Some(true) {
                tracing::info!(
                    shard = self.id,
                    group = format!("{group:#x}"),
                    to = preferred,
                    "leadership handed to the preferred replica"
                );
            }
        }
    }
}
