//! Transaction calls across nodes (docs/transactions.md, "Replicated partitions"): a
//! coordinator's marker for a partition led on another node, and a partition leader's
//! KIP-890 verification by a coordinator on another node. The wire format is
//! `replication::txn_rpc`; the calls ride the replication transport, shard s of one node
//! to shard s of another.
//!
//! - **Asking.** `start_call` gives the call a request id (this shard's, seeded from the
//!   clock so that an answer to a call made before a restart matches no call after it),
//!   registers where its answer goes and sends it; `PendingCall::wait` waits
//!   `CALL_TIMEOUT` for the answer and sends the same call again, `MAX_ASKS` times in
//!   all, then gives up (the caller answers a retriable error). A marker sent twice is
//!   harmless: a second marker for a transaction no longer open changes nothing there.
//! - **Answering.** The shard that receives a call forwards it over its node's mesh to
//!   the shard that must answer (the partition's owner for a marker, the transactional
//!   id's coordinator shard for a verification), or serves it in place, and sends the
//!   answer back to the asking node's same shard.
//!
//! Runs on every shard of a cluster (`PartitionGroups` exist); not a hot path.
//!
//! Invariants:
//! 1. An answer is used only by the call whose request id it carries, from the node that
//!    call went to; every other answer is dropped.
//! 2. A call that was not answered is never taken as done: a marker is then
//!    NOT_LEADER_OR_FOLLOWER (the transaction stays prepared, the ticker sends it again),
//!    a verification a retriable refusal (nothing appended).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use futures_lite::FutureExt;
use glommio::channels::local_channel::{self, LocalReceiver, LocalSender};

use super::coordinator_shard;
use crate::error::{GroupError, PartitionError, TxnError};
use crate::message::{ShardReply, ShardRequest};
use crate::partition_group::PartitionGroups;
use crate::replication::txn_rpc::{MarkerRequest, TxnRpc, VerifyRequest};
use crate::shard::Shard;

/// How long one ask waits for its answer, and how many asks a call makes.
const CALL_TIMEOUT: Duration = Duration::from_secs(2);
const MAX_ASKS: u32 = 3;

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

/// A shard's calls in flight (invariant 1).
pub(crate) struct TxnCalls {
    next_id: Cell<u64>,
    /// request id -> (the node asked, where its answer goes).
    awaiting: RefCell<HashMap<u64, (u64, LocalSender<TxnRpc>)>>,
}

impl TxnCalls {
    pub(crate) fn new() -> TxnCalls {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        let seed = now.map(|d| d.as_nanos() as u64).unwrap_or(1);
        TxnCalls { next_id: Cell::new(seed), awaiting: RefCell::new(HashMap::new()) }
    }
}

/// A call sent and not answered yet; dropping it forgets the call.
pub(crate) struct PendingCall {
    groups: Rc<PartitionGroups>,
    node: u64,
    request_id: u64,
    bytes: Vec<u8>,
    answers: LocalReceiver<TxnRpc>,
}

/// Sends the call `make(request id)` to `node`'s same shard.
pub(crate) fn start_call(
    groups: &Rc<PartitionGroups>,
    node: u64,
    make: impl FnOnce(u64) -> TxnRpc,
) -> PendingCall {
    let calls = &groups.txn_calls;
    let request_id = calls.next_id.get();
    calls.next_id.set(request_id.wrapping_add(1));
    let bytes = make(request_id).encode();
    let (sender, answers) = local_channel::new_bounded(4);
    calls.awaiting.borrow_mut().insert(request_id, (node, sender));
    // An unknown peer answers nothing: the call times out (invariant 2).
    let _ = groups.host.send_txn_rpc(node, bytes.clone());
    PendingCall { groups: groups.clone(), node, request_id, bytes, answers }
}

impl PendingCall {
    /// The answer, asking again after each `CALL_TIMEOUT`; None after `MAX_ASKS`.
    pub(crate) async fn wait(self) -> Option<TxnRpc> {
        for ask in 0..MAX_ASKS {
            if ask > 0 {
                let _ = self.groups.host.send_txn_rpc(self.node, self.bytes.clone());
            }
            let deadline = async {
                glommio::timer::sleep(CALL_TIMEOUT).await;
                None
            };
            if let Some(answer) = async { self.answers.recv().await }.or(deadline).await {
                return Some(answer);
            }
        }
        tracing::warn!(node = self.node, asks = MAX_ASKS, "a transaction call went unanswered");
        None
    }
}

impl Drop for PendingCall {
    fn drop(&mut self) {
        self.groups.txn_calls.awaiting.borrow_mut().remove(&self.request_id);
    }
}

/// Starts the shard's task that serves calls and hands answers to their callers.
pub(crate) fn start(shard: &Rc<Shard>, groups: &Rc<PartitionGroups>) {
    if let Some(calls) = groups.host.take_txn_receiver() {
        glommio::spawn_local(receive(shard.clone(), groups.clone(), calls)).detach();
    }
}

async fn receive(
    shard: Rc<Shard>,
    groups: Rc<PartitionGroups>,
    calls: LocalReceiver<(u64, Bytes)>,
) {
    while let Some((from, bytes)) = calls.recv().await {
        let rpc = match TxnRpc::decode(&bytes) {
            Ok(rpc) => rpc,
            Err(error) => {
                tracing::warn!(from, %error, "a transaction call dropped");
                continue;
            }
        };
        match rpc {
            TxnRpc::Marker(request) => {
                let (shard, groups) = (shard.clone(), groups.clone());
                glommio::spawn_local(async move {
                    let request_id = request.request_id;
                    let error_code = marker_code(shard.serve_remote_marker(request).await);
                    let answer = TxnRpc::MarkerAnswer { request_id, error_code };
                    let _ = groups.host.send_txn_rpc(from, answer.encode());
                })
                .detach();
            }
            TxnRpc::Verify(request) => {
                let (shard, groups) = (shard.clone(), groups.clone());
                glommio::spawn_local(async move {
                    let request_id = request.request_id;
                    let (error_code, message) =
                        verify_code(shard.serve_remote_verify(request).await);
                    let answer = TxnRpc::VerifyAnswer { request_id, error_code, message };
                    let _ = groups.host.send_txn_rpc(from, answer.encode());
                })
                .detach();
            }
            TxnRpc::Offsets { request_id, group, producer_id, commit } => {
                let (shard, groups) = (shard.clone(), groups.clone());
                glommio::spawn_local(async move {
                    let resolved = shard.serve_remote_offsets(group, producer_id, commit).await;
                    let answer =
                        TxnRpc::OffsetsAnswer { request_id, error_code: offsets_code(resolved) };
                    let _ = groups.host.send_txn_rpc(from, answer.encode());
                })
                .detach();
            }
            answer => {
                let awaiting = groups.txn_calls.awaiting.borrow();
                match awaiting.get(&answer.request_id()) {
                    Some((node, waiter)) if *node == from => {
                        let _ = waiter.try_send(answer);
                    }
                    _ => tracing::debug!(from, "a transaction call's answer nobody waits for"),
                }
            }
        }
    }
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
        let call = start_call(&groups, node as u64, |request_id| TxnRpc::Offsets {
            request_id,
            group: group.to_string(),
            producer_id,
            commit,
        });
        match call.wait().await {
            Some(TxnRpc::OffsetsAnswer { error_code: NONE, .. }) => Ok(()),
            Some(TxnRpc::OffsetsAnswer { error_code: NOT_COORDINATOR, .. }) => {
                Err(GroupError::NotCoordinator)
            }
            Some(TxnRpc::OffsetsAnswer { error_code: COORDINATOR_LOAD_IN_PROGRESS, .. }) => {
                Err(GroupError::CoordinatorLoadInProgress)
            }
            // Unanswered, or another failure: the transaction stays prepared (invariant 2).
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
            TxnRpc::Marker(MarkerRequest { request_id, ..request })
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
            TxnRpc::Verify(VerifyRequest { request_id, ..request })
        });
        match call.wait().await {
            Some(TxnRpc::VerifyAnswer { error_code, message, .. }) => {
                verify_result(error_code, message)
            }
            // Unanswered (invariant 2): retriable, as a coordinator still loading.
            _ => Err(TxnError::CoordinatorLoadInProgress),
        }
    }
}

/// A marker call's answer as the coordinator takes it (invariant 2).
pub(crate) fn marker_result(node: u32, answer: Option<TxnRpc>) -> Result<(), PartitionError> {
    match answer {
        Some(TxnRpc::MarkerAnswer { error_code: NONE, .. }) => Ok(()),
        Some(TxnRpc::MarkerAnswer { error_code: UNKNOWN_TOPIC_OR_PARTITION, .. }) => {
            Err(PartitionError::UnknownTopicOrPartition)
        }
        Some(TxnRpc::MarkerAnswer { error_code: NOT_LEADER_OR_FOLLOWER, .. }) | None => {
            Err(PartitionError::NotLeaderOrFollower)
        }
        Some(TxnRpc::MarkerAnswer { error_code, .. }) => Err(PartitionError::Storage(format!(
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
        let answer = |error_code| Some(TxnRpc::MarkerAnswer { request_id: 1, error_code });
        assert!(marker_result(1, answer(NONE)).is_ok());
        assert!(
            marker_result(1, answer(NOT_LEADER_OR_FOLLOWER))
                == Err(PartitionError::NotLeaderOrFollower)
        );
        assert!(matches!(marker_result(1, answer(-1)), Err(PartitionError::Storage(_))));
    }
}
