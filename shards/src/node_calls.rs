//! Calls between the nodes of a cluster: a transaction's markers, verifications and
//! offsets resolutions (`txn::remote`, docs/transactions.md "Replicated partitions"), and
//! a topic auto-creation forwarded to the controller (`auto_create`, docs/replication.md,
//! metadata group). The wire format is `replication::node_rpc`; the calls ride the
//! replication transport, shard s of one node to shard s of another.
//!
//! - **Asking.** `start_call` gives the call a request id (this shard's, seeded from the
//!   clock so that an answer to a call made before a restart matches no call after it),
//!   registers where its answer goes and sends it; `PendingCall::wait` waits
//!   `CALL_TIMEOUT` for the answer and sends the same call again, `MAX_ASKS` times in
//!   all, then gives up (the caller answers a retriable error). Every call is safe to ask
//!   twice: a second marker for a transaction no longer open changes nothing there, a
//!   second creation of a topic is refused as existing.
//! - **Answering.** The shard that receives a call serves it (`answer`): forwarded over
//!   its node's mesh to the shard that must answer, or served in place, and sends the
//!   answer back to the asking node's same shard.
//!
//! Runs on every shard of a cluster (`PartitionGroups` exist); not a hot path.
//!
//! Invariants:
//! 1. An answer is used only by the call whose request id it carries, from the node that
//!    call went to; every other answer is dropped.
//! 2. A call that was not answered is never taken as done (each caller says what it
//!    answers instead).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use futures_lite::FutureExt;
use glommio::channels::local_channel::{self, LocalReceiver, LocalSender};

use crate::partition_group::PartitionGroups;
use crate::replication::node_rpc::NodeRpc;
use crate::shard::Shard;

/// How long one ask waits for its answer, and how many asks a call makes.
const CALL_TIMEOUT: Duration = Duration::from_secs(2);
const MAX_ASKS: u32 = 3;

/// A shard's calls in flight (invariant 1).
pub(crate) struct NodeCalls {
    next_id: Cell<u64>,
    /// request id -> (the node asked, where its answer goes).
    awaiting: RefCell<HashMap<u64, (u64, LocalSender<NodeRpc>)>>,
}

impl NodeCalls {
    pub(crate) fn new() -> NodeCalls {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        let seed = now.map(|d| d.as_nanos() as u64).unwrap_or(1);
        NodeCalls { next_id: Cell::new(seed), awaiting: RefCell::new(HashMap::new()) }
    }
}

/// A call sent and not answered yet; dropping it forgets the call.
pub(crate) struct PendingCall {
    groups: Rc<PartitionGroups>,
    node: u64,
    request_id: u64,
    bytes: Vec<u8>,
    answers: LocalReceiver<NodeRpc>,
}

/// Sends the call `make(request id)` to `node`'s same shard.
pub(crate) fn start_call(
    groups: &Rc<PartitionGroups>,
    node: u64,
    make: impl FnOnce(u64) -> NodeRpc,
) -> PendingCall {
    let calls = &groups.node_calls;
    let request_id = calls.next_id.get();
    calls.next_id.set(request_id.wrapping_add(1));
    let bytes = make(request_id).encode();
    let (sender, answers) = local_channel::new_bounded(4);
    calls.awaiting.borrow_mut().insert(request_id, (node, sender));
    // An unknown peer answers nothing: the call times out (invariant 2).
    let _ = groups.host.send_node_rpc(node, bytes.clone());
    PendingCall { groups: groups.clone(), node, request_id, bytes, answers }
}

impl PendingCall {
    /// The answer, asking again after each `CALL_TIMEOUT`; None after `MAX_ASKS`.
    pub(crate) async fn wait(self) -> Option<NodeRpc> {
        for ask in 0..MAX_ASKS {
            if ask > 0 {
                let _ = self.groups.host.send_node_rpc(self.node, self.bytes.clone());
            }
            let deadline = async {
                glommio::timer::sleep(CALL_TIMEOUT).await;
                None
            };
            if let Some(answer) = async { self.answers.recv().await }.or(deadline).await {
                return Some(answer);
            }
        }
        tracing::warn!(node = self.node, asks = MAX_ASKS, "a call to another node went unanswered");
        None
    }
}

impl Drop for PendingCall {
    fn drop(&mut self) {
        self.groups.node_calls.awaiting.borrow_mut().remove(&self.request_id);
    }
}

/// Starts the shard's task that serves calls and hands answers to their callers.
pub(crate) fn start(shard: &Rc<Shard>, groups: &Rc<PartitionGroups>) {
    if let Some(calls) = groups.host.take_node_rpc_receiver() {
        glommio::spawn_local(receive(shard.clone(), groups.clone(), calls)).detach();
    }
}

async fn receive(
    shard: Rc<Shard>,
    groups: Rc<PartitionGroups>,
    calls: LocalReceiver<(u64, Bytes)>,
) {
    while let Some((from, bytes)) = calls.recv().await {
        let rpc = match NodeRpc::decode(&bytes) {
            Ok(rpc) => rpc,
            Err(error) => {
                tracing::warn!(from, %error, "a call from another node dropped");
                continue;
            }
        };
        if rpc.is_answer() {
            let awaiting = groups.node_calls.awaiting.borrow();
            match awaiting.get(&rpc.request_id()) {
                Some((node, waiter)) if *node == from => {
                    let _ = waiter.try_send(rpc);
                }
                _ => tracing::debug!(from, "an answer from another node nobody waits for"),
            }
            continue;
        }
        let (shard, groups) = (shard.clone(), groups.clone());
        glommio::spawn_local(async move {
            let answer = answer(&shard, rpc).await;
            let _ = groups.host.send_node_rpc(from, answer.encode());
        })
        .detach();
    }
}

/// The answer to a call (never an answer: `receive` hands those to their callers).
async fn answer(shard: &Rc<Shard>, call: NodeRpc) -> NodeRpc {
    match call {
        NodeRpc::Marker(request) => crate::txn::remote::answer_marker(shard, request).await,
        NodeRpc::Verify(request) => crate::txn::remote::answer_verify(shard, request).await,
        NodeRpc::Offsets { request_id, group, producer_id, commit } => {
            crate::txn::remote::answer_offsets(shard, request_id, group, producer_id, commit).await
        }
        NodeRpc::CreateTopic { request_id, topic } => {
            crate::auto_create::answer_create(shard, request_id, topic).await
        }
        answer => unreachable!("an answer is not served: {answer:?}"),
    }
}
