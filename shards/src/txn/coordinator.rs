//! The transaction coordinator: InitProducerId with a transactional id, AddPartitionsToTxn,
//! AddOffsetsToTxn, EndTxn, the markers they lead to, timeouts and recovery.
//!
//! Runs on the coordinator shard of each transactional id. One call per transactional id
//! at a time (`Busy`; a second gets CONCURRENT_TRANSACTIONS, retriable, as Kafka's
//! pending state). No `RefCell` borrow is held across an `.await`.
//!
//! Durability contract: a transition is in the log and fdatasync'd before the call that
//! caused it is answered (in a cluster: committed in the shard's offsets group and applied
//! here, `txn::replicated`). EndTxn: Prepare* is durable before the first marker is queued;
//! every marker and offsets resolution is durable before Complete* is written; Complete*
//! is durable before EndTxn is answered. A crash in between leaves Prepare* in the log,
//! and the ticker finishes it after the restart (markers again: a second marker for a
//! transaction that is no longer open changes nothing).
//!
//! A replicated partition's marker is an entry of its partition group, proposed where the
//! group is led (docs/transactions.md, "Replicated partitions"); a replica that does not
//! lead refuses it, the transaction stays prepared (`TxnError::MarkersPending`, answered
//! CONCURRENT_TRANSACTIONS) and the ticker proposes it again. A partition led on another
//! node (as this node knows its leader) gets its marker through a transaction call over the
//! replication transport (`txn::remote`); NOT_LEADER_OR_FOLLOWER or no answer there is the
//! same refusal.

use std::rc::Rc;

use shardlog_storage::{Durable, RecordBatchHeader};
use tracing::{info, warn};

use super::log::TxnLogEntry;
use super::partition::control_batch;
use super::replicated::txn_write_error;
use super::state::{TxnMetadata, TxnState};
use super::{coordinator_shard, Busy};
use crate::error::{PartitionError, TxnError};
use crate::message::{ShardReply, ShardRequest};
use crate::node_calls::PendingCall;
use crate::ops::append_error;
use crate::partition_group::Proposed;
use crate::producer_log::wall_ms;
use crate::replication::node_rpc::MarkerRequest;
use crate::shard::Shard;
use crate::txn::remote::marker_result;

/// A marker or offsets resolution on its way.
enum Marking {
    Local(Result<Durable, PartitionError>),
    /// A replicated partition whose group this shard hosts: proposed in the group.
    Replicated(Result<Proposed, PartitionError>),
    Remote(crate::mesh::PendingReply),
    /// A partition led on another node: a call over the replication transport.
    Node(u32, PendingCall),
    /// No leader to send it to (now): the transaction stays prepared.
    Refused(PartitionError),
}

/// Where a partition's marker goes.
enum MarkerRoute {
    /// The owner shard on this node (which proposes it, for a replicated partition).
    Owner(usize),
    /// The partition's leader on another node, and the topic's id.
    Node(u32, [u8; 16]),
}

impl Shard {
    /// NOT_COORDINATOR unless this shard coordinates `transactional_id` now (in a cluster:
    /// leads its shard's offsets group, `txn::replicated`).
    pub fn check_txn_coordinator(&self, transactional_id: &str) -> Result<(), TxnError> {
        if transactional_id.is_empty() {
            return Err(TxnError::EmptyTransactionalId);
        }
        self.check_coordinates(transactional_id)
    }

    fn txn_busy(&self, transactional_id: &str) -> Result<Busy<'_>, TxnError> {
        Busy::take(&self.txn.busy, transactional_id).ok_or(TxnError::ConcurrentTransactions)
    }

    fn txn_metadata(&self, transactional_id: &str) -> Option<TxnMetadata> {
        self.txn.txns.borrow().get(transactional_id).cloned()
    }

    /// Writes a transition and waits until it is durable (in a cluster: committed in the
    /// offsets group and applied here, `txn::replicated`). On a single node it is applied
    /// in memory when queued, so a snapshot taken meanwhile (which lands after it in the
    /// log) holds it.
    async fn write_txn(&self, metadata: TxnMetadata) -> Result<(), TxnError> {
        self.write_txn_entry(TxnLogEntry::Txn(metadata)).await.map_err(txn_write_error)
    }

    /// InitProducerId with a transactional id: a producer id and a new epoch, fencing any
    /// earlier instance (its open transaction is aborted first). `asked` is the client's
    /// current (producer id, epoch) when it has one (KIP-360).
    pub async fn txn_init_producer_id(
        &self,
        transactional_id: &str,
        timeout_ms: i32,
        asked: Option<(i64, i16)>,
    ) -> Result<(i64, i16), TxnError> {
        self.check_txn_coordinator(transactional_id)?;
        if timeout_ms <= 0 || timeout_ms > self.txn.config.max_timeout_ms {
            return Err(TxnError::InvalidTransactionTimeout);
        }
        let _busy = self.txn_busy(transactional_id)?;
        let now = wall_ms();
        let next = match self.txn_metadata(transactional_id) {
            None => {
                let (producer_id, _) =
                    self.init_producer_id(-1, -1).await.map_err(TxnError::Storage)?;
                TxnMetadata::new(transactional_id, producer_id, timeout_ms, now)
            }
            Some(current) => {
                let current = if current.state == TxnState::Ongoing {
                    // A new instance: the old one's transaction is aborted and it is fenced.
                    if let Some((producer_id, epoch)) = asked {
                        current.check_producer(producer_id, epoch)?;
                    }
                    info!(shard = self.id, transactional_id, "fencing an earlier instance");
                    self.abort_fenced(current, now).await?
                } else {
                    current
                };
                let new_id = if current.producer_epoch >= i16::MAX - 1 {
                    Some(self.init_producer_id(-1, -1).await.map_err(TxnError::Storage)?.0)
                } else {
                    None
                };
                let asked = asked.filter(|(id, epoch)| *id >= 0 && *epoch >= 0);
                current.bump(asked, timeout_ms, || new_id.expect("a new producer id"), now)?
            }
        };
        let answer = (next.producer_id, next.producer_epoch);
        self.write_txn(next).await?;
        Ok(answer)
    }

    /// AddPartitionsToTxn (partitions known to exist) and AddOffsetsToTxn (a group).
    pub async fn add_to_txn(
        &self,
        transactional_id: &str,
        producer_id: i64,
        epoch: i16,
        partitions: &[(String, i32)],
        group: Option<&str>,
    ) -> Result<(), TxnError> {
        self.check_txn_coordinator(transactional_id)?;
        let _busy = self.txn_busy(transactional_id)?;
        let current =
            self.txn_metadata(transactional_id).ok_or(TxnError::InvalidProducerIdMapping)?;
        match current.add(producer_id, epoch, partitions, group, wall_ms())? {
            Some(next) => self.write_txn(next).await,
            None => Ok(()),
        }
    }

    /// EndTxn: answered once every marker and Complete* are durable.
    pub async fn end_txn(
        &self,
        transactional_id: &str,
        producer_id: i64,
        epoch: i16,
        commit: bool,
    ) -> Result<(), TxnError> {
        self.check_txn_coordinator(transactional_id)?;
        let _busy = self.txn_busy(transactional_id)?;
        let current =
            self.txn_metadata(transactional_id).ok_or(TxnError::InvalidProducerIdMapping)?;
        let Some(prepared) = current.end(producer_id, epoch, commit, wall_ms())? else {
            return Ok(()); // a retry of a completed EndTxn
        };
        self.write_txn(prepared.clone()).await?;
        self.finish_txn(prepared).await.map(|_| ())
    }

    /// Aborts an open transaction with the next epoch (fencing its producer).
    async fn abort_fenced(&self, open: TxnMetadata, now: i64) -> Result<TxnMetadata, TxnError> {
        let prepared = open.fence_and_abort(now);
        self.write_txn(prepared.clone()).await?;
        self.finish_txn(prepared).await
    }

    /// Writes the markers and offsets resolutions of a prepared transaction, then
    /// Complete*. Returns the completed metadata.
    async fn finish_txn(&self, prepared: TxnMetadata) -> Result<TxnMetadata, TxnError> {
        let commit = match prepared.state {
            TxnState::PrepareCommit => true,
            TxnState::PrepareAbort => false,
            other => panic!("finish_txn in {other:?}"),
        };
        let (producer_id, epoch) = (prepared.producer_id, prepared.producer_epoch);
        // Phase one for every partition, so all markers share fdatasyncs; then wait.
        let mut marking = Vec::with_capacity(prepared.partitions.len());
        for (topic, partition) in &prepared.partitions {
            let route = match self.marker_route(topic, *partition) {
                Ok(route) => route,
                // Deleted meanwhile: nothing left to mark.
                Err(PartitionError::UnknownTopicOrPartition) => continue,
                Err(e) => {
                    marking.push(Marking::Refused(e));
                    continue;
                }
            };
            marking.push(match route {
                MarkerRoute::Node(node, topic_id) => {
                    let request = MarkerRequest {
                        request_id: 0,
                        topic_id,
                        partition: *partition,
                        producer_id,
                        producer_epoch: epoch,
                        commit,
                    };
                    match self.send_remote_marker(node, request) {
                        Ok(call) => Marking::Node(node, call),
                        Err(e) => Marking::Refused(e),
                    }
                }
                MarkerRoute::Owner(owner) if owner == self.id => {
                    match self.partition_group_of(topic, *partition) {
                        Some(group) => Marking::Replicated(self.propose_txn_marker(
                            group,
                            topic,
                            *partition,
                            producer_id,
                            epoch,
                            commit,
                        )),
                        None => Marking::Local(self.queue_txn_marker(
                            topic,
                            *partition,
                            producer_id,
                            epoch,
                            commit,
                        )),
                    }
                }
                MarkerRoute::Owner(owner) => {
                    let request = ShardRequest::TxnMarker {
                        topic: topic.clone(),
                        partition: *partition,
                        producer_id,
                        producer_epoch: epoch,
                        commit,
                    };
                    Marking::Remote(self.mesh.send(owner, request).await)
                }
            });
        }
        // Every marker is waited for, even after a refusal, so none is left in flight when
        // the ticker tries again.
        let mut refused = None;
        for mark in marking {
            let result = match mark {
                Marking::Local(queued) => match queued {
                    Ok(durable) => durable.wait().await.map_err(|e| self.fatal_storage_error(&e)),
                    Err(e) => Err(e),
                },
                Marking::Replicated(proposed) => match proposed {
                    Ok(proposed) => proposed.wait().await.map(|_| ()),
                    Err(e) => Err(e),
                },
                Marking::Remote(pending) => match pending.wait().await {
                    ShardReply::TxnMarker(result) => result,
                    other => panic!("a transaction marker answered with {other:?}"),
                },
                Marking::Node(node, call) => marker_result(node, call.wait().await),
                Marking::Refused(e) => Err(e),
            };
            match result {
                // The topic was deleted meanwhile: nothing left to mark.
                Ok(()) | Err(PartitionError::UnknownTopicOrPartition) => {}
                // A replicated partition whose group the replica asked does not lead (now),
                // or a leader on another node that did not answer: the transaction stays
                // prepared and the ticker writes the marker again.
                Err(PartitionError::NotLeaderOrFollower) => {
                    let why = "a marker waits for its partition's leader";
                    refused.get_or_insert(TxnError::MarkersPending(why.to_string()));
                }
                Err(e) => {
                    refused.get_or_insert(TxnError::Storage(format!("writing a marker: {e}")));
                }
            }
        }
        if let Some(refused) = refused {
            return Err(refused);
        }
        for group in &prepared.groups {
            let owner = coordinator_shard(group, self.nr_shards);
            // In a cluster the group's coordinator is its shard's offsets group's leader,
            // which may be another node (docs/replication.md, "Consumer-group offsets").
            let node = self.offsets_group_of(owner).and_then(|g| self.partition_leader(g).0);
            let result = if let Some(node) = node.filter(|n| *n != self.config.node_id) {
                self.remote_txn_offsets(node, group, producer_id, commit).await
            } else if owner == self.id {
                self.resolve_txn_offsets(group, producer_id, commit).await
            } else {
                let request =
                    ShardRequest::TxnOffsetsMarker { group: group.clone(), producer_id, commit };
                match self.mesh.call(owner, request).await {
                    ShardReply::TxnOffsetsMarker(result) => result,
                    other => panic!("an offsets marker answered with {other:?}"),
                }
            };
            result
                .map_err(|e| TxnError::Storage(format!("resolving offsets of {group}: {e:?}")))?;
        }
        let done = prepared.complete(wall_ms());
        self.write_txn(done.clone()).await?;
        Ok(done)
    }

    /// Where the marker of `partition` of `topic` goes: the node that leads it as this
    /// node knows it (`partition_leader` of a replicated partition, the one replica of
    /// another), this node's owner shard when that is this node. A replicated partition
    /// whose leader is unknown goes to the replica here (which refuses it unless it
    /// leads), or is NOT_LEADER_OR_FOLLOWER when there is none.
    fn marker_route(&self, topic: &str, partition: i32) -> Result<MarkerRoute, PartitionError> {
        let node = self.config.node_id;
        let (topic_id, replicas) = {
            let table = self.table_ref();
            let meta = table.topic(topic).ok_or(PartitionError::UnknownTopicOrPartition)?;
            let replicas =
                meta.replicas(partition).ok_or(PartitionError::UnknownTopicOrPartition)?;
            (meta.topic_id, replicas.to_vec())
        };
        let leader = match self.partition_group_of(topic, partition) {
            Some(group) => self.partition_leader(group).0,
            None => replicas.first().copied(),
        };
        match leader {
            Some(leader) if leader != node => Ok(MarkerRoute::Node(leader, topic_id)),
            _ => self.owner_of(topic, partition).map(MarkerRoute::Owner),
        }
    }

    /// On the partition's owner: queues a COMMIT/ABORT marker; the future is its fdatasync.
    pub fn queue_txn_marker(
        &self,
        topic: &str,
        partition: i32,
        producer_id: i64,
        epoch: i16,
        commit: bool,
    ) -> Result<Durable, PartitionError> {
        assert!(self.txn.ready.get(), "markers wait for the partition state to be rebuilt");
        assert!(
            self.partition_group_of(topic, partition).is_none(),
            "a replicated partition's marker goes through its group (`propose_txn_marker`)"
        );
        let partition_id = self
            .local_partition(topic, partition)
            .ok_or(PartitionError::UnknownTopicOrPartition)?;
        self.ensure_txn_stream();
        let now = wall_ms();
        let batch = control_batch(producer_id, epoch, commit, now);
        let header = RecordBatchHeader::parse_unvalidated(&batch).expect("a control batch");
        // Epoch 0: transactions are refused on replicated partitions (a leader that never
        // moves), as `append_produced` stamps their data.
        let appended = self
            .log
            .append_batches_in_epoch(partition_id, Some(0), &[(header, batch)])
            .map_err(append_error)?;
        self.forget_txn_verification(partition_id, producer_id);
        let mut partitions = self.txn.partitions.borrow_mut();
        let state = partitions.entry(partition_id).or_default();
        state.on_marker(producer_id, commit, appended.base_offset, false);
        self.producers.borrow_mut().note_marker(partition_id, producer_id, epoch, now);
        Ok(appended.durable)
    }

    /// A peer's marker request: waits (start-up only) until partition state is rebuilt.
    pub async fn write_txn_marker(
        self: Rc<Self>,
        topic: String,
        partition: i32,
        producer_id: i64,
        epoch: i16,
        commit: bool,
    ) -> Result<(), PartitionError> {
        while !self.txn.ready.get() {
            glommio::timer::sleep(std::time::Duration::from_millis(10)).await;
        }
        if let Some(group) = self.partition_group_of(&topic, partition) {
            let marked =
                self.replicated_txn_marker(group, &topic, partition, producer_id, epoch, commit);
            return marked.await;
        }
        let durable = self.queue_txn_marker(&topic, partition, producer_id, epoch, commit)?;
        if let Err(e) = durable.wait().await {
            self.fatal_storage_error(&e);
        }
        Ok(())
    }

    /// Aborts timed-out transactions and finishes prepared ones (after a restart, or a
    /// failed marker), every `check_interval`, on every shard.
    pub fn spawn_txn_ticker(self: &Rc<Self>) {
        let shard = self.clone();
        glommio::spawn_local(async move {
            loop {
                shard.txn_tick().await;
                glommio::timer::sleep(shard.txn.config.check_interval).await;
            }
        })
        .detach();
    }

    async fn txn_tick(&self) {
        if self.coordinating_here().is_err() {
            // A follower of the offsets group holds the state only (`txn::replicated`).
            return;
        }
        let now = wall_ms();
        let due: Vec<TxnMetadata> = self
            .txn
            .txns
            .borrow()
            .values()
            .filter(|t| t.state.is_prepared() || t.timed_out(now))
            .cloned()
            .collect();
        for txn in due {
            let Ok(_busy) = self.txn_busy(&txn.transactional_id) else { continue };
            // Re-read under the busy mark: a call may have moved it on meanwhile.
            let Some(current) = self.txn_metadata(&txn.transactional_id) else { continue };
            let id = current.transactional_id.clone();
            let result = if current.state.is_prepared() {
                info!(shard = self.id, transactional_id = %id, state = current.state.name(),
                    "finishing a prepared transaction");
                self.finish_txn(current).await.map(|_| ())
            } else if current.timed_out(now) {
                info!(shard = self.id, transactional_id = %id, timeout_ms = current.timeout_ms,
                    "aborting a transaction past its timeout");
                self.abort_fenced(current, now).await.map(|_| ())
            } else {
                Ok(())
            };
            if let Err(e) = result {
                warn!(shard = self.id, transactional_id = %id, error = %e,
                    "transaction not finished; retrying");
            }
        }
    }
}
