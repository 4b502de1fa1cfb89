//! KIP-890 part 1, the server-side defence against hanging transactions: a partition
//! appends a producer's first transactional batch of a transaction only once the
//! transactional id's coordinator confirmed that the partition is in that producer's open
//! transaction at that epoch (Kafka 3.6+: `appendRecordsWithTransactionVerification`, a
//! verify-only AddPartitionsToTxn v4). A late or stray batch of a producer that never added
//! the partition is refused, instead of opening a transaction nothing would ever close.
//!
//! Runs on the partition's owner (`defer_until_txn_verified`, one call on the produce path
//! before a produce is queued) and on the coordinator shard (`verify_txn_partition`,
//! answered from memory; a mesh `VerifyTxnPartition` when it is another shard, a call over
//! the replication transport when it is on another node: `txn::remote`). The
//! coordinator answers only about durable metadata: a call on the id in progress (say an
//! AddPartitionsToTxn whose entry is queued but not yet fdatasync'd) is waited for, so a
//! partition is never confirmed by a transition that a crash could take back.
//!
//! Hot path: a batch that is not transactional costs a header read; a transactional one
//! of a producer verified here costs one hash lookup. Only a transaction's first produce
//! to a partition allocates (its place in the queue) and waits for the coordinator.
//!
//! Ordering: while a verification is in flight, later produces of the same producer and
//! epoch to the partition queue behind it; once the answer comes they are appended (or
//! refused) in arrival order, so an idempotent producer's pipelined batches keep their
//! sequence order.
//!
//! Invariants:
//! 1. A transactional batch is appended only if `verified` holds (partition, producer id)
//!    at its epoch, which only a positive answer of the coordinator puts there.
//! 2. A marker queued for (partition, producer id) removes that entry and spoils the
//!    verifications in flight for it: the next transaction is verified again, and an
//!    answer given before the marker is never used after it.
//!
//! Durability: nothing here is written; the cache is memory only. After a restart a
//! transaction still open in a partition is verified again at its next batch.
//!
//! Errors a producer sees (Kafka's translation in ReplicaManager and
//! AddPartitionsToTxnManager, for clients before KIP-890 part 2): a partition not in the
//! transaction INVALID_TXN_STATE, which librdkafka and the Java client make an abortable
//! transaction error; an older or newer epoch INVALID_PRODUCER_EPOCH (fenced); another
//! producer id INVALID_PRODUCER_ID_MAPPING; a coordinator writing markers, still loading at
//! start-up, or a shard that does not coordinate the id, NOT_ENOUGH_REPLICAS, which clients
//! retry. A transactional
//! batch in a produce without a transactional id is TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
//! as Kafka answers it.

use std::rc::Rc;

use bytes::Bytes;
use glommio::channels::local_channel::{self, LocalSender};
use shardlog_storage::{PartitionId, RecordBatchHeader};

use super::partition::{CONTROL, TRANSACTIONAL};
use super::{coordinator_shard, Busy};
use crate::error::{PartitionError, TxnError};
use crate::message::{ShardReply, ShardRequest};
use crate::ops::ProduceWait;
use crate::replication::node_rpc::VerifyRequest;
use crate::shard::Shard;

/// Produces of one (partition, producer id, epoch) waiting for the coordinator's answer.
#[derive(Default)]
pub(crate) struct Verifying {
    /// A marker for the producer was queued here meanwhile (invariant 2).
    spoiled: bool,
    /// In arrival order: the records, and where their produce's wait goes.
    waiting: Vec<(Bytes, LocalSender<ProduceWait>)>,
}

/// What the verification of a transaction's first batch is about.
struct Ask {
    transactional_id: String,
    producer_id: i64,
    producer_epoch: i16,
    topic: String,
    partition: i32,
    partition_id: PartitionId,
}

impl Shard {
    /// On the partition's owner, before a produce is queued: None when its batches may be
    /// queued now (not transactional, or their producer's transaction is verified here);
    /// else the produce, appended once the coordinator confirms the partition, or refused.
    /// Malformed batches and unknown partitions go on, for `queue_append` to refuse.
    pub(crate) fn defer_until_txn_verified(
        self: &Rc<Self>,
        topic: &str,
        partition: i32,
        records: &Bytes,
        transactional_id: Option<&str>,
    ) -> Option<ProduceWait> {
        let header = RecordBatchHeader::parse_unvalidated(records).ok()?;
        let transactional = header.attributes & (TRANSACTIONAL | CONTROL) == TRANSACTIONAL;
        if !transactional || header.producer_id < 0 {
            return None;
        }
        let partition_id = self.local_partition(topic, partition)?;
        let key = (partition_id, header.producer_id);
        if self.txn.verified.borrow().get(&key) == Some(&header.producer_epoch) {
            return None;
        }
        let transactional_id = match transactional_id {
            None => return Some(refused(PartitionError::TransactionalIdMissing)),
            Some("") => {
                let why = "an empty transactional id".to_string();
                return Some(refused(PartitionError::InvalidRequest(why)));
            }
            Some(id) => id,
        };
        let (sender, receiver) = local_channel::new_bounded(1);
        let first = {
            let mut verifying = self.txn.verifying.borrow_mut();
            let entry = verifying.entry((partition_id, header.producer_id, header.producer_epoch));
            let queue = entry.or_default();
            queue.waiting.push((records.clone(), sender));
            queue.waiting.len() == 1
        };
        if first {
            let ask = Ask {
                transactional_id: transactional_id.to_string(),
                producer_id: header.producer_id,
                producer_epoch: header.producer_epoch,
                topic: topic.to_string(),
                partition,
                partition_id,
            };
            let shard = self.clone();
            glommio::spawn_local(async move { shard.verify_and_append(ask).await }).detach();
        }
        Some(Box::pin(async move {
            match receiver.recv().await {
                Some(wait) => wait.await,
                None => unreachable!("a verification answers every produce it queued"),
            }
        }))
    }

    /// Asks the coordinator, then appends (or refuses) every produce queued meanwhile, in
    /// arrival order, with no `.await` between them.
    async fn verify_and_append(self: Rc<Self>, ask: Ask) {
        let coordinator = coordinator_shard(&ask.transactional_id, self.nr_shards);
        // The leader of the id's shard's offsets group as this node knows it
        // (`txn::replicated`); none known: retriable, as a coordinator still loading.
        let node = self.group_coordinator_node(&ask.transactional_id);
        let answer = if node.is_none() {
            Err(TxnError::CoordinatorLoadInProgress)
        } else if let Some(node) = node.filter(|n| *n != self.config.node_id) {
            let request = VerifyRequest {
                request_id: 0,
                transactional_id: ask.transactional_id.clone(),
                producer_id: ask.producer_id,
                producer_epoch: ask.producer_epoch,
                topic: ask.topic.clone(),
                partition: ask.partition,
            };
            self.remote_verify(node, request).await
        } else if coordinator == self.id {
            let partition = (ask.topic.clone(), ask.partition);
            self.verify_txn_partition(
                &ask.transactional_id,
                ask.producer_id,
                ask.producer_epoch,
                partition,
            )
            .await
        } else {
            let request = ShardRequest::VerifyTxnPartition {
                transactional_id: ask.transactional_id.clone(),
                producer_id: ask.producer_id,
                producer_epoch: ask.producer_epoch,
                topic: ask.topic.clone(),
                partition: ask.partition,
            };
            match self.mesh.call(coordinator, request).await {
                ShardReply::VerifyTxnPartition(answer) => answer,
                other => panic!("a transaction verification answered with {other:?}"),
            }
        };
        let key = (ask.partition_id, ask.producer_id, ask.producer_epoch);
        let queued = self.txn.verifying.borrow_mut().remove(&key).expect("queued produces");
        let answer = match answer {
            Ok(()) if queued.spoiled => Err(PartitionError::NotInTransaction(
                "the transaction ended while the partition was being verified".to_string(),
            )),
            Ok(()) => Ok(()),
            Err(e) => Err(refusal(e)),
        };
        if answer.is_ok() {
            let mut verified = self.txn.verified.borrow_mut();
            verified.insert((ask.partition_id, ask.producer_id), ask.producer_epoch);
        }
        for (records, reply) in queued.waiting {
            let wait = match &answer {
                // Transactional batches are answered after their apply whatever the acks
                // (`crate::leader_acks`): -1.
                Ok(()) => self.produce_verified(&ask.topic, ask.partition, records, -1),
                Err(e) => refused(e.clone()),
            };
            // The produce may have been dropped (acks=0 sends no response); the append
            // above happened anyway.
            let _ = reply.try_send(wait);
        }
    }

    /// On the coordinator shard: whether `partition` is in the open transaction of
    /// `transactional_id` at (`producer_id`, `epoch`), as durable: a call on the id in
    /// progress (its new metadata is in memory before it is durable) is waited for first.
    pub async fn verify_txn_partition(
        &self,
        transactional_id: &str,
        producer_id: i64,
        epoch: i16,
        partition: (String, i32),
    ) -> Result<(), TxnError> {
        self.check_txn_coordinator(transactional_id)?;
        if !self.txn.ready.get() {
            // Still rebuilding at start-up: the metadata may not be loaded yet.
            return Err(TxnError::CoordinatorLoadInProgress);
        }
        Busy::settled(&self.txn.busy, transactional_id).await;
        let txns = self.txn.txns.borrow();
        let current = txns.get(transactional_id).ok_or(TxnError::InvalidProducerIdMapping)?;
        current.verify_partition(producer_id, epoch, &partition)
    }

    /// A marker for `producer_id` is queued in `partition`: its transaction there is over
    /// (invariant 2).
    pub(crate) fn forget_txn_verification(&self, partition: PartitionId, producer_id: i64) {
        self.txn.verified.borrow_mut().remove(&(partition, producer_id));
        let mut verifying = self.txn.verifying.borrow_mut();
        for ((p, id, _), queue) in verifying.iter_mut() {
            if *p == partition && *id == producer_id {
                queue.spoiled = true;
            }
        }
    }
}

/// The coordinator's refusal as the producer sees it (Kafka's translation, module docs).
fn refusal(error: TxnError) -> PartitionError {
    match error {
        TxnError::InvalidTxnState(why) => PartitionError::NotInTransaction(format!(
            "Partition was not added to the transaction: {why}"
        )),
        TxnError::ProducerFenced => PartitionError::InvalidProducerEpoch,
        TxnError::InvalidProducerIdMapping => PartitionError::InvalidProducerIdMapping,
        TxnError::EmptyTransactionalId => {
            PartitionError::InvalidRequest("an empty transactional id".to_string())
        }
        other => PartitionError::TxnNotVerified(format!(
            "Unable to verify the partition has been added to the transaction. Underlying \
             error: {other}"
        )),
    }
}

fn refused(error: PartitionError) -> ProduceWait {
    Box::pin(async move { Err(error) })
}
