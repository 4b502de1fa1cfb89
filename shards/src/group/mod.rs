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
    use super::coordinator_shard;

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
}
