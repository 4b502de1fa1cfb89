//! Group operations for the admin endpoint (the web console), from any shard: describe a
//! group with its committed offsets, and reset the committed offsets of a group that has
//! no members. Each runs on the group's coordinator shard (asked over the mesh when the
//! caller is another shard), through the same state machine and offset log as
//! DescribeGroups and OffsetCommit.
//!
//! Not a hot path: one mesh call per console page or action.
//!
//! Invariants:
//! 1. A reset is refused with NON_EMPTY_GROUP unless the group is Empty, Dead or unknown,
//!    and the state is checked and the commit validated with no `.await` between them, so
//!    no member can join in between.
//! 2. A reset is answered once its offsets are durable (it is an OffsetCommit with no
//!    generation and no member, written through `commit_offsets`).

use std::rc::Rc;

use super::coordinator::{GroupSummary, OffsetCommitPartition};
use super::state::GroupState;
use crate::error::GroupError;
use crate::message::{ShardReply, ShardRequest};
use crate::shard::Shard;

/// A group as its coordinator knows it: membership (`None` if the coordinator has no
/// group of that name) and every committed offset, by (topic, partition).
#[derive(Clone, Debug)]
pub struct GroupDescription {
    pub summary: Option<GroupSummary>,
    pub committed: Vec<((String, i32), i64)>,
}

/// Per partition, the outcome of a reset; or one error for the whole group.
pub type ResetResults = Result<Vec<Result<(), GroupError>>, GroupError>;

impl Shard {
    /// The group's membership and committed offsets, from its coordinator.
    pub async fn describe_group(&self, group_id: &str) -> GroupDescription {
        let coordinator = super::coordinator_shard(group_id, self.nr_shards);
        if coordinator == self.id {
            return self.describe_group_local(group_id);
        }
        let request = ShardRequest::DescribeGroup { group: group_id.to_string() };
        match self.mesh.call(coordinator, request).await {
            ShardReply::DescribeGroup(description) => *description,
            other => panic!("describe group answered with {other:?}"),
        }
    }

    pub(crate) fn describe_group_local(&self, group_id: &str) -> GroupDescription {
        let committed = self.groups.committed(group_id, None);
        GroupDescription {
            summary: self.groups.describe(group_id),
            committed: committed
                .into_iter()
                .filter_map(|(key, c)| Some((key, c?.offset)))
                .collect(),
        }
    }

    /// Commits `offsets` (topic, partition, offset) for a group without members, on its
    /// coordinator (invariants 1 and 2).
    pub async fn reset_group_offsets(
        &self,
        group_id: &str,
        offsets: Vec<(String, i32, i64)>,
    ) -> ResetResults {
        let coordinator = super::coordinator_shard(group_id, self.nr_shards);
        if coordinator == self.id {
            return self.reset_group_offsets_local(group_id, offsets).await;
        }
        let request = ShardRequest::ResetGroupOffsets { group: group_id.to_string(), offsets };
        match self.mesh.call(coordinator, request).await {
            ShardReply::ResetGroupOffsets(results) => results,
            other => panic!("reset group offsets answered with {other:?}"),
        }
    }

    pub(crate) async fn reset_group_offsets_local(
        &self,
        group_id: &str,
        offsets: Vec<(String, i32, i64)>,
    ) -> ResetResults {
        let state = self.groups.describe(group_id).map(|g| g.state);
        if !matches!(state, None | Some(GroupState::Empty) | Some(GroupState::Dead)) {
            return Err(GroupError::NonEmptyGroup);
        }
        let partitions = offsets
            .into_iter()
            .map(|(topic, partition, offset)| OffsetCommitPartition {
                topic,
                partition,
                offset,
                leader_epoch: -1,
                metadata: None,
                commit_time_ms: None,
            })
            .collect();
        // Invariant 1: no await between the state check above and the commit's own
        // generation check (the first thing commit_offsets does, before its write).
        self.commit_offsets(group_id, -1, "", partitions).await
    }
}

/// Reset requests the coordinator answers (from `service.rs`).
pub(crate) async fn answer(shard: Rc<Shard>, request: ShardRequest) -> ShardReply {
    match request {
        ShardRequest::DescribeGroup { group } => {
            ShardReply::DescribeGroup(Box::new(shard.describe_group_local(&group)))
        }
        ShardRequest::ResetGroupOffsets { group, offsets } => {
            ShardReply::ResetGroupOffsets(shard.reset_group_offsets_local(&group, offsets).await)
        }
        other => panic!("not a group admin request: {other:?}"),
    }
}
