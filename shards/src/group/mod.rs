//! Consumer groups: the classic membership protocol and durable committed offsets.
//!
//! A group lives on its coordinator shard, `coordinator_shard(group_id)`: on a single
//! node that shard of the node; in a cluster that shard of the node that leads the shard's
//! offsets group (`replicated`). Requests for it that reach another shard or node get
//! NOT_COORDINATOR, and clients re-ask FindCoordinator, which names that broker from any
//! node. Membership is in memory (`state`); committed offsets are written through the
//! shard's log and fdatasync'd before OffsetCommit is answered (`offsets`), in a cluster
//! on a majority of the nodes first (`replicated`), and rebuilt from the log on start-up.

pub mod admin;
pub mod coordinator;
pub mod offsets;
pub mod replicated;
pub mod state;

pub use admin::{GroupDescription, ResetResults};
pub use coordinator::{GroupConfig, GroupCoordinator, GroupSummary, OffsetCommitPartition};
pub use state::{GroupState, JoinOutcome, JoinRequest};

/// The shard that coordinates `group_id`: FNV-1a of the id, modulo the shard count.
/// This must never change for a data dir: offsets live in that shard's log.
pub fn coordinator_shard(group_id: &str, nr_shards: usize) -> usize {
    key_hash(group_id) as usize % nr_shards
}

/// The node that coordinates transactional id `key` among `nodes` (sorted, every node of
/// the cluster; consumer groups follow their offsets group's leader instead: `replicated`):
/// the hash modulo all the cluster's brokers (nodes x shards) names one broker, whose
/// shard is `coordinator_shard` (the shard count divides the broker count), and whose node
/// is this. The same on every node, so FindCoordinator names the same broker whichever
/// node is asked; a single node is its own.
pub fn coordinator_node(key: &str, nodes: &[u32], nr_shards: usize) -> u32 {
    let broker = key_hash(key) as usize % (nodes.len() * nr_shards);
    nodes[broker / nr_shards]
}

/// FNV-1a of a coordinator key.
fn key_hash(key: &str) -> u32 {
    let mut hash: u32 = 0x811c_9dc5;
    for byte in key.bytes() {
        hash ^= byte as u32;
        hash = hash.wrapping_mul(0x0100_0193);
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::{coordinator_node, coordinator_shard, key_hash};

    #[test]
    fn coordinator_placement_is_stable_and_spreads_groups() {
        // Fixed values: changing the hash would strand committed offsets.
        assert_eq!(coordinator_shard("", 7), 0x811c_9dc5 % 7);
        let counts = (0..1000).fold([0usize; 4], |mut c, i| {
            c[coordinator_shard(&format!("group-{i}"), 4)] += 1;
            c
        });
        assert!(counts.iter().all(|&c| c > 150), "{counts:?}");
    }

    /// Over nodes x shards brokers, each key's broker is (its node, its shard as on one
    /// node): a group's offsets stay in the same shard's log, and keys spread over nodes.
    #[test]
    fn coordinators_spread_over_nodes_and_keep_their_shard() {
        let nodes = [1, 2, 5];
        let mut counts = [0usize; 3];
        for i in 0..1000 {
            let key = format!("group-{i}");
            let node = coordinator_node(&key, &nodes, 4);
            let broker = key_hash(&key) as usize % 12;
            assert_eq!((node, broker % 4), (nodes[broker / 4], coordinator_shard(&key, 4)));
            counts[nodes.iter().position(|n| *n == node).unwrap()] += 1;
            assert_eq!(coordinator_node(&key, &[0], 4), 0, "a single node is its own");
        }
        assert!(counts.iter().all(|&c| c > 250), "{counts:?}");
    }
}
