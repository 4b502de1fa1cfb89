//! Transaction calls across nodes (docs/transactions.md, "Replicated partitions"): a
//! coordinator's marker for a partition led on another node, a partition leader's
//! KIP-890 verification by a coordinator on another node, and a coordinator's resolution
//! of a transaction's pending offsets on another node's group coordinator. The wire
//! format is `replication::node_rpc`; asking and answering are `crate::node_calls`
//! (request ids, bounded asks, the shard 0 or owner shard reached over the mesh).
//!
//! - **Asking.** A marker sent twice is harmless: a second marker for a transaction no
//!   longer open changes nothing there.
//! - **Answering.** The shard that receives a call forwards it over its node's mesh to
//!   the shard that must answer (the partition's owner for a marker, the transactional
//!   id's coordinator shard for a verification, the group's coordinator shard for
//!   offsets), or serves it in place.
//!
//! Runs on every shard of a cluster (`PartitionGroups` exist); not a hot path.
//!
//! Invariants:
//! 1. A call that was not answered is never taken as done: a marker is then
//!    NOT_LEADER_OR_FOLLOWER (the transaction stays prepared, the ticker sends it again),
//!    a verification a retriable refusal (nothing appended).

use std::rc::Rc;

use super::coordinator_shard;
use crate::error::{GroupError, PartitionError, TxnError};
use crate::message::{ShardReply, ShardRequest};
use crate::node_calls::{start_call, PendingCall};
use crate::replication::node_rpc::{MarkerRequest, NodeRpc, VerifyRequest};
use crate::shard::Shard;

// The Kafka error codes the calls carry.
const NONE: i16 = 0;
const UNKNOWN_SERVER_ERROR: i16 = -1;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const NOT_LEADER_OR_FOLLOWER: i16 = 6;
const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
const NOT_COORDINATOR: i16 = 16;
const INVALID_REQUEST: i16 = 42;
const INVALID_TXN_STATE: i16 = 48;
const INVALID_PRODUCER_ID_MAPPING: i16 = 49;
const CONCURRENT_TRANSACTIONS: i16 = 51;
const PRODUCER_FENCED: i16 = 90;

/// The answer to a marker from another node's coordinator.
pub(crate) async fn answer_marker(shard: &Rc<Shard>, request: MarkerRequest) -> NodeRpc {
    let request_id = request.request_id;
    let error_code = marker_code(shard.serve_remote_marker(request).await);
    NodeRpc::MarkerAnswer { request_id, error_code }
}

/// The answer to a verification from another node's partition leader.
pub(crate) async fn answer_verify(shard: &Rc<Shard>, request: VerifyRequest) -> NodeRpc {
    let request_id = request.request_id;
    let (error_code, message) = verify_code(shard.serve_remote_verify(request).await);
    NodeRpc::VerifyAnswer { request_id, error_code, message }
}

/// The answer to an offsets resolution from another node's coordinator.
pub(crate) async fn answer_offsets(
    shard: &Rc<Shard>,
    request_id: u64,
    group: String,
    producer_id: i64,
    commit: bool,
) -> NodeRpc {
    let resolved = shard.serve_remote_offsets(group, producer_id, commit).await;
    NodeRpc::OffsetsAnswer { request_id, error_code: offsets_code(resolved) }
}

impl Shard {
    /// A marker from another node's coordinator, on the shard that received it: to the
    /// partition's owner here (which proposes it if it leads the partition's group).
    async fn serve_remote_marker(
        self: &Rc<Self>,
        request: MarkerRequest,
    ) -> Result<(), PartitionError> {
        let topic = self.table_ref().topic_by_id(request.topic_id).map(|t| t.name.clone());
        let topic = topic.ok_or(PartitionError::UnknownTopicOrPartition)?;
        let owner = self.owner_of(&topic, request.partition)?;
        let MarkerRequest { partition, producer_id, producer_epoch, commit, .. } = request;
        if owner == self.id {
            return self
                .clone()
                .write_txn_marker(topic, partition, producer_id, producer_epoch, commit)
                .await;
        }
        let request =
            ShardRequest::TxnMarker { topic, partition, producer_id, producer_epoch, commit };
        match self.mesh.call(owner, request).await {
            ShardReply::TxnMarker(result) => result,
            other => panic!("a transaction marker answered with {other:?}"),
        }
    }

    /// A verification from another node's partition leader, on the shard that received
    /// it: to the transactional id's coordinator shard here.
    async fn serve_remote_verify(&self, request: VerifyRequest) -> Result<(), TxnError> {
        let VerifyRequest {
            transactional_id, producer_id, producer_epoch, topic, partition, ..
        } = request;
        let coordinator = coordinator_shard(&transactional_id, self.nr_shards);
        if coordinator == self.id {
            let partition = (topic, partition);
            return self
                .verify_txn_partition(&transactional_id, producer_id, producer_epoch, partition)
                .await;
        }
        let request = ShardRequest::VerifyTxnPartition {
            transactional_id,
            producer_id,
            producer_epoch,
            topic,
            partition,
        };
        match self.mesh.call(coordinator, request).await {
            ShardReply::VerifyTxnPartition(answer) => answer,
            other => panic!("a transaction verification answered with {other:?}"),
        }
    }

    /// A transaction's offsets resolution from another node's coordinator, on the shard
    /// that received it: to the group's coordinator shard here.
    async fn serve_remote_offsets(
        &self,
        group: String,
        producer_id: i64,
        commit: bool,
    ) -> Result<(), GroupError> {
        let owner = coordinator_shard(&group, self.nr_shards);
        if owner == self.id {
            return self.resolve_txn_offsets(&group, producer_id, commit).await;
        }
        match self
            .mesh
            .call(owner, ShardRequest::TxnOffsetsMarker { group, producer_id, commit })
            .await
        {
            ShardReply::TxnOffsetsMarker(result) => result,
            other => panic!("an offsets marker answered with {other:?}"),
        }
    }

    /// Asks the group's coordinator on `node` to resolve the producer's pending offsets.
    pub(crate) async fn remote_txn_offsets(
        &self,
        node: u32,
        group: &str,
        producer_id: i64,
        commit: bool,
    ) -> Result<(), GroupError> {
        let groups = self.partition_groups().ok_or(GroupError::CoordinatorNotAvailable)?;
        let call = start_call(&groups, node as u64, |request_id| NodeRpc::Offsets {
            request_id,
            group: group.to_string(),
            producer_id,
            commit,
        });
        match call.wait().await {
            Some(NodeRpc::OffsetsAnswer { error_code: NONE, .. }) => Ok(()),
            Some(NodeRpc::OffsetsAnswer { error_code: NOT_COORDINATOR, .. }) => {
                Err(GroupError::NotCoordinator)
            }
            Some(NodeRpc::OffsetsAnswer { error_code: COORDINATOR_LOAD_IN_PROGRESS, .. }) => {
                Err(GroupError::CoordinatorLoadInProgress)
            }
            // Unanswered, or another failure: the transaction stays prepared (invariant 1).
            _ => Err(GroupError::CoordinatorNotAvailable),
        }
    }

    /// Sends a marker for `partition` of the topic `topic_id` to `node`, its leader.
    pub(crate) fn send_remote_marker(
        &self,
        node: u32,
        request: MarkerRequest,
    ) -> Result<PendingCall, PartitionError> {
        let groups = self.partition_groups().ok_or(PartitionError::NotLeaderOrFollower)?;
        Ok(start_call(&groups, node as u64, |request_id| {
            NodeRpc::Marker(MarkerRequest { request_id, ..request })
        }))
    }

    /// Asks the coordinator on `node` to verify a partition (`txn::verify`).
    pub(crate) async fn remote_verify(
        &self,
        node: u32,
        request: VerifyRequest,
    ) -> Result<(), TxnError> {
        let Some(groups) = self.partition_groups() else {
            return Err(TxnError::NotCoordinator);
        };
        let call = start_call(&groups, node as u64, |request_id| {
            NodeRpc::Verify(VerifyRequest { request_id, ..request })
        });
        match call.wait().await {
            Some(NodeRpc::VerifyAnswer { error_code, message, .. }) => {
                verify_result(error_code, message)
            }
            // Unanswered (invariant 1): retriable, as a coordinator still loading.
            _ => Err(TxnError::CoordinatorLoadInProgress),
        }
    }
}

/// A marker call's answer as the coordinator takes it (invariant 1).
pub(crate) fn marker_result(node: u32, answer: Option<NodeRpc>) -> Result<(), PartitionError> {
    match answer {
        Some(NodeRpc::MarkerAnswer { error_code: NONE, .. }) => Ok(()),
        Some(NodeRpc::MarkerAnswer { error_code: UNKNOWN_TOPIC_OR_PARTITION, .. }) => {
            Err(PartitionError::UnknownTopicOrPartition)
        }
        Some(NodeRpc::MarkerAnswer { error_code: NOT_LEADER_OR_FOLLOWER, .. }) | None => {
            Err(PartitionError::NotLeaderOrFollower)
        }
        Some(NodeRpc::MarkerAnswer { error_code, .. }) => Err(PartitionError::Storage(format!(
            "node {node} answered a marker with error code {error_code}"
        ))),
        Some(other) => Err(PartitionError::Storage(format!("node {node} answered {other:?}"))),
    }
}

fn marker_code(result: Result<(), PartitionError>) -> i16 {
    match result {
        Ok(()) => NONE,
        Err(PartitionError::UnknownTopicOrPartition) => UNKNOWN_TOPIC_OR_PARTITION,
        Err(PartitionError::NotLeaderOrFollower) => NOT_LEADER_OR_FOLLOWER,
        Err(error) => {
            tracing::warn!(%error, "a marker for another node's coordinator failed");
            UNKNOWN_SERVER_ERROR
        }
    }
}

fn offsets_code(result: Result<(), GroupError>) -> i16 {
    match result {
        Ok(()) => NONE,
        Err(GroupError::NotCoordinator) => NOT_COORDINATOR,
        Err(GroupError::CoordinatorLoadInProgress) => COORDINATOR_LOAD_IN_PROGRESS,
        Err(error) => {
            tracing::warn!(?error, "offsets of a transaction for another node's coordinator");
            UNKNOWN_SERVER_ERROR
        }
    }
}

fn verify_code(result: Result<(), TxnError>) -> (i16, String) {
    let code = match &result {
        Ok(()) => NONE,
        Err(TxnError::NotCoordinator) => NOT_COORDINATOR,
        Err(TxnError::CoordinatorLoadInProgress) => COORDINATOR_LOAD_IN_PROGRESS,
        Err(TxnError::InvalidProducerIdMapping) => INVALID_PRODUCER_ID_MAPPING,
        Err(TxnError::ProducerFenced) => PRODUCER_FENCED,
        Err(TxnError::ConcurrentTransactions | TxnError::MarkersPending(_)) => {
            CONCURRENT_TRANSACTIONS
        }
        Err(TxnError::InvalidTxnState(_)) => INVALID_TXN_STATE,
        Err(TxnError::EmptyTransactionalId) => INVALID_REQUEST,
        Err(_) => UNKNOWN_SERVER_ERROR,
    };
    (code, result.err().map(|e| e.to_string()).unwrap_or_default())
}

/// The inverse of `verify_code`, as `txn::verify` translates it for the producer.
fn verify_result(code: i16, message: String) -> Result<(), TxnError> {
    Err(match code {
        NONE => return Ok(()),
        NOT_COORDINATOR => TxnError::NotCoordinator,
        COORDINATOR_LOAD_IN_PROGRESS => TxnError::CoordinatorLoadInProgress,
        INVALID_PRODUCER_ID_MAPPING => TxnError::InvalidProducerIdMapping,
        PRODUCER_FENCED => TxnError::ProducerFenced,
        CONCURRENT_TRANSACTIONS => TxnError::ConcurrentTransactions,
        INVALID_TXN_STATE => TxnError::InvalidTxnState(message),
        INVALID_REQUEST => TxnError::EmptyTransactionalId,
        _ => TxnError::Storage(format!("the coordinator answered error code {code}: {message}")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_verification_answer_comes_back_as_the_coordinator_gave_it() {
        let answers = [
            Ok(()),
            Err(TxnError::NotCoordinator),
            Err(TxnError::CoordinatorLoadInProgress),
            Err(TxnError::InvalidProducerIdMapping),
            Err(TxnError::ProducerFenced),
            Err(TxnError::ConcurrentTransactions),
            Err(TxnError::InvalidTxnState("not added".to_string())),
            Err(TxnError::EmptyTransactionalId),
        ];
        for answer in answers {
            let (code, message) = verify_code(answer.clone());
            assert_eq!(format!("{:?}", verify_result(code, message)), format!("{answer:?}"));
        }
    }

    #[test]
    fn an_unanswered_or_refused_marker_leaves_the_transaction_prepared() {
        assert!(marker_result(1, None) == Err(PartitionError::NotLeaderOrFollower));
        let answer = |error_code| Some(NodeRpc::MarkerAnswer { request_id: 1, error_code });
        assert!(marker_result(1, answer(NONE)).is_ok());
        assert!(
            marker_result(1, answer(NOT_LEADER_OR_FOLLOWER))
                == Err(PartitionError::NotLeaderOrFollower)
        );
        assert!(matches!(marker_result(1, answer(-1)), Err(PartitionError::Storage(_))));
    }
}
