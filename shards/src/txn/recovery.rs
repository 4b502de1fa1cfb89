//! Start-up and snapshots of the transaction state (the `Transactions` stream).
//!
//! Runs on every shard: at start-up after the topic table arrived (with the producer-state
//! replay, which calls `replay_txn_batch` for the batches after `covered`), and with every
//! checkpoint (`snapshot_transactions`, not waited for: everything it summarises is in the
//! log before it).

use std::collections::HashMap;

use shardlog_storage::{InternalEntry, InternalStream, Offset, PartitionId, RecordBatchHeader};
use tracing::{info, warn};

use super::log::{Recovered, TxnLogEntry};
use super::partition::{batch_kind, BatchKind};
use crate::shard::Shard;

impl Shard {
    /// Loads the last snapshot and the entries after it; returns, per partition, the
    /// offset from which batches must be replayed into partition state, or None when the
    /// log holds nothing transactional (nothing to replay).
    pub fn restore_transactions(
        &self,
        recovered: &[InternalEntry],
    ) -> Result<Option<HashMap<u64, Offset>>, String> {
        let mut state = Recovered::default();
        let entries = recovered.iter().filter(|e| e.stream == InternalStream::Transactions);
        let mut any = false;
        for entry in entries {
            TxnLogEntry::decode(&entry.payload)?.apply(&mut state);
            any = true;
        }
        self.txn.in_log.set(any);
        if !any {
            return Ok(None);
        }
        let Recovered { txns, pending, partitions, covered } = state;
        if !txns.is_empty() || !pending.is_empty() {
            let prepared = txns.values().filter(|t| t.state.is_prepared()).count();
            info!(
                shard = self.id,
                transactional_ids = txns.len(),
                prepared,
                pending_offsets = pending.len(),
                "transaction state restored"
            );
        }
        *self.txn.txns.borrow_mut() = txns;
        *self.txn.pending.borrow_mut() = pending;
        *self.txn.partitions.borrow_mut() =
            partitions.into_iter().map(|(p, s)| (PartitionId(p), s)).collect();
        Ok(Some(covered))
    }

    /// One replayed batch (at or after the partition's `covered` offset).
    pub(crate) fn replay_txn_batch(
        &self,
        partition: PartitionId,
        header: &RecordBatchHeader,
        batch: &[u8],
    ) -> Result<(), String> {
        let kind = batch_kind(header, batch)?;
        if kind == BatchKind::Plain {
            return Ok(());
        }
        let mut partitions = self.txn.partitions.borrow_mut();
        let state = partitions.entry(partition).or_default();
        state.on_appended(kind, header.producer_id, header.base_offset, true);
        Ok(())
    }

    /// Partition state is complete: markers may be written here.
    pub(crate) fn transactions_ready(&self) {
        self.txn.ready.set(true);
        let partitions = self.txn.partitions.borrow();
        let open: usize = partitions.values().map(|p| p.open.len()).sum();
        if open > 0 {
            info!(shard = self.id, open_transactions = open, "partition transaction state rebuilt");
        }
    }

    /// Writes a snapshot of all transaction state, valid for each partition up to its log
    /// end offset now (with each checkpoint); nothing while the log holds nothing
    /// transactional.
    pub fn snapshot_transactions(&self) {
        if self.txn.in_log.get() {
            self.write_txn_snapshot();
        }
    }

    /// Before the first transactional batch or marker of a log: a snapshot, so that a
    /// start-up finds the stream and replays from here (the snapshot lands before the
    /// batch in the log, so a batch that survives a crash has it before it).
    pub(crate) fn ensure_txn_stream(&self) {
        if !self.txn.in_log.get() {
            self.write_txn_snapshot();
        }
    }

    fn write_txn_snapshot(&self) {
        let local = self.local_partitions();
        let mut covered = Vec::with_capacity(local.len());
        let mut partitions = Vec::new();
        {
            let mut states = self.txn.partitions.borrow_mut();
            states.retain(|p, _| local.contains(p));
            for partition in local {
                let Some(info) = self.log.partition_info(partition) else { continue };
                covered.push((partition.0, info.log_end_offset));
                if let Some(state) = states.get_mut(&partition) {
                    state.trim(info.log_start_offset);
                    let snapshot = state.snapshot();
                    if !snapshot.is_empty() {
                        partitions.push((partition.0, snapshot));
                    }
                }
            }
        }
        let entry = TxnLogEntry::Snapshot {
            txns: self.txn.txns.borrow().values().cloned().collect(),
            pending: self
                .txn
                .pending
                .borrow()
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            partitions,
            covered,
        };
        match self.log.append_internal(InternalStream::Transactions, true, &entry.encode()) {
            Ok(_) => self.txn.in_log.set(true),
            Err(e) => warn!(shard = self.id, error = ?e, "writing a transaction state snapshot"),
        }
    }
}
