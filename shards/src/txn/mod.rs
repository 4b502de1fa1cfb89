//! Transactions (exactly-once): the transaction coordinator, transactional offsets, and
//! the transaction state of partitions (last stable offset, aborted transactions).
//!
//! - The coordinator of a `transactional.id` is the shard `coordinator_shard(id)` (the
//!   same placement as groups; in a cluster, of the node leading that shard's offsets
//!   group). Its state machine is `state`; every transition is written to that shard's log
//!   (`log`, the `Transactions` stream) and fdatasync'd before the call is answered
//!   (`coordinator`); in a cluster it is committed in the offsets group first and applied
//!   by every replica, so the coordinator fails over with the group (`replicated`).
//! - EndTxn writes a COMMIT or ABORT control batch to every partition of the transaction,
//!   on the partition's owner shard (mesh `TxnMarker`; on another node, a transaction call
//!   over the replication transport, `remote`), and resolves the transaction's
//!   offsets on each group's coordinator shard (mesh `TxnOffsetsMarker`), all durable
//!   before the transaction is Complete and EndTxn is answered.
//! - Each owner shard tracks per partition its open and aborted transactions
//!   (`partition`): read_committed fetches stop at the last stable offset and carry the
//!   aborted list.
//! - A transaction's first batch in a partition is appended only once the coordinator
//!   confirmed the partition is in it (`verify`, KIP-890 part 1).
//!
//! Recovery: the stream's last snapshot plus the entries after it give the coordinator
//! state and pending offsets; partition state is the snapshot's plus a replay of the
//! batches after its `covered` offsets (with the producer-state replay). A transaction
//! found in PrepareCommit/PrepareAbort is completed by the coordinator's ticker, never
//! reverted.

pub mod coordinator;
pub mod log;
pub mod offsets;
pub mod partition;
pub mod recovery;
pub(crate) mod remote;
mod replicated;
pub mod state;
pub mod verify;

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};

use glommio::channels::local_channel::{self, LocalSender};
use shardlog_storage::PartitionId;

pub use crate::group::coordinator_shard;
use log::PendingOffsets;
use partition::PartitionTxns;
use state::TxnMetadata;

/// Transaction settings (Kafka's names in the comments).
#[derive(Clone, Debug)]
pub struct TxnConfig {
    /// transaction.max.timeout.ms: the largest transaction.timeout.ms a producer may ask.
    pub max_timeout_ms: i32,
    /// transaction.abort.timed.out.transaction.cleanup.interval.ms: how often the
    /// coordinator looks for timed-out transactions (and unfinished markers).
    pub check_interval: std::time::Duration,
}

impl Default for TxnConfig {
    fn default() -> Self {
        TxnConfig { max_timeout_ms: 900_000, check_interval: std::time::Duration::from_secs(1) }
    }
}

/// A shard's transaction state: as coordinator, as group coordinator (pending
/// transactional offsets), and as partition owner.
#[derive(Default)]
pub struct Transactions {
    pub config: TxnConfig,
    pub(crate) txns: RefCell<BTreeMap<String, TxnMetadata>>,
    /// Transactional ids with a call in progress (Kafka's pending state), each with the
    /// partition verifications waiting for it to end (`verify`).
    pub(crate) busy: RefCell<HashMap<String, Vec<LocalSender<()>>>>,
    pub(crate) pending: RefCell<PendingOffsets>,
    pub(crate) partitions: RefCell<HashMap<PartitionId, PartitionTxns>>,
    /// Owner side of KIP-890: (partition, producer id) → the epoch whose open transaction
    /// the coordinator confirmed holds the partition, until its marker (`verify`).
    pub(crate) verified: RefCell<HashMap<(PartitionId, i64), i16>>,
    /// Verifications in flight, by (partition, producer id, epoch), with the produces
    /// waiting for them.
    pub(crate) verifying: RefCell<HashMap<(PartitionId, i64, i16), verify::Verifying>>,
    /// Partition state is rebuilt: markers may be written.
    pub(crate) ready: Cell<bool>,
    /// The shard's log holds `Transactions` entries. Until it does, nothing transactional
    /// was ever written here: start-up replays nothing for transactions, and no snapshot
    /// is written (a data dir that never saw a transaction stays readable by a shardlog
    /// without them). The first transactional batch or marker writes a snapshot first.
    pub(crate) in_log: Cell<bool>,
}

impl Transactions {
    pub fn new(config: TxnConfig) -> Transactions {
        Transactions { config, ..Default::default() }
    }

    /// Every transactional id this shard coordinates.
    pub fn list(&self) -> Vec<TxnMetadata> {
        self.txns.borrow().values().cloned().collect()
    }

    pub fn describe(&self, transactional_id: &str) -> Option<TxnMetadata> {
        self.txns.borrow().get(transactional_id).cloned()
    }
}

/// Marks a transactional id busy until dropped.
pub(crate) struct Busy<'a> {
    busy: &'a RefCell<HashMap<String, Vec<LocalSender<()>>>>,
    id: String,
}

impl<'a> Busy<'a> {
    /// None if a call on `id` is already in progress.
    pub(crate) fn take(
        busy: &'a RefCell<HashMap<String, Vec<LocalSender<()>>>>,
        id: &str,
    ) -> Option<Busy<'a>> {
        let mut calls = busy.borrow_mut();
        if calls.contains_key(id) {
            return None;
        }
        calls.insert(id.to_string(), Vec::new());
        Some(Busy { busy, id: id.to_string() })
    }

    /// Waits until no call on `id` is in progress. A call's new metadata is visible in
    /// memory from the moment it is queued, before it is durable; what is read after this
    /// returns (with no `.await` in between) is durable.
    pub(crate) async fn settled(busy: &RefCell<HashMap<String, Vec<LocalSender<()>>>>, id: &str) {
        loop {
            let ended = match busy.borrow_mut().get_mut(id) {
                None => return,
                Some(waiting) => {
                    let (sender, receiver) = local_channel::new_bounded(1);
                    waiting.push(sender);
                    receiver
                }
            };
            // Another call may take the id before this task runs again: look again.
            ended.recv().await;
        }
    }
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        let waiting = self.busy.borrow_mut().remove(&self.id).unwrap_or_default();
        for sender in waiting {
            let _ = sender.try_send(());
        }
    }
}
