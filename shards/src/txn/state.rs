//! The transaction state machine of one `transactional.id`, without IO.
//!
//! Runs on the transaction coordinator shard. Each method checks a client call against the
//! current metadata and returns the metadata to write (the caller makes it durable before
//! it answers), or the Kafka error the call gets. The transitions follow Apache Kafka's
//! `TransactionMetadata`:
//!
//! ```text
//! Empty ──AddPartitions/AddOffsets──▶ Ongoing ──EndTxn(commit)──▶ PrepareCommit ──markers──▶ CompleteCommit
//!   ▲                                  │  └──EndTxn(abort), timeout, fence──▶ PrepareAbort ──markers──▶ CompleteAbort
//!   └──────────InitProducerId (epoch bump) from Empty / Complete*───────────────────────────────┘
//! ```
//!
//! Invariants:
//! 1. `partitions` and `groups` are empty unless the state is Ongoing or Prepare*.
//! 2. The epoch only grows for one producer id; a new producer id starts at epoch 0.

use std::collections::BTreeSet;

use crate::error::TxnError;

/// Kafka's transaction states (DescribeTransactions names them the same way).
#[derive(
    rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash,
)]
pub enum TxnState {
    Empty,
    Ongoing,
    PrepareCommit,
    PrepareAbort,
    CompleteCommit,
    CompleteAbort,
}

impl TxnState {
    /// The name Kafka's tools print.
    pub fn name(self) -> &'static str {
        match self {
            TxnState::Empty => "Empty",
            TxnState::Ongoing => "Ongoing",
            TxnState::PrepareCommit => "PrepareCommit",
            TxnState::PrepareAbort => "PrepareAbort",
            TxnState::CompleteCommit => "CompleteCommit",
            TxnState::CompleteAbort => "CompleteAbort",
        }
    }

    /// Whether markers are being written (the coordinator must finish, even after a crash).
    pub fn is_prepared(self) -> bool {
        matches!(self, TxnState::PrepareCommit | TxnState::PrepareAbort)
    }
}

/// Everything the coordinator keeps for one transactional id: one log entry holds one.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct TxnMetadata {
    pub transactional_id: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub timeout_ms: i32,
    pub state: TxnState,
    /// Partitions of the open transaction: (topic, partition).
    pub partitions: BTreeSet<(String, i32)>,
    /// Consumer groups whose offsets the open transaction commits (AddOffsetsToTxn).
    pub groups: BTreeSet<String>,
    /// Wall-clock ms when the open transaction began (first AddPartitions/AddOffsets).
    pub start_ms: i64,
    /// Wall-clock ms of the last transition.
    pub update_ms: i64,
}

impl TxnMetadata {
    /// A transactional id seen for the first time.
    pub fn new(transactional_id: &str, producer_id: i64, timeout_ms: i32, now_ms: i64) -> Self {
        TxnMetadata {
            transactional_id: transactional_id.to_string(),
            producer_id,
            producer_epoch: 0,
            timeout_ms,
            state: TxnState::Empty,
            partitions: BTreeSet::new(),
            groups: BTreeSet::new(),
            start_ms: -1,
            update_ms: now_ms,
        }
    }

    /// The producer id and epoch of a call must be the current ones.
    pub fn check_producer(&self, producer_id: i64, epoch: i16) -> Result<(), TxnError> {
        if producer_id != self.producer_id {
            return Err(TxnError::InvalidProducerIdMapping);
        }
        if epoch != self.producer_epoch {
            return Err(TxnError::ProducerFenced);
        }
        Ok(())
    }

    /// AddPartitionsToTxn / AddOffsetsToTxn: the metadata to write, or None when the
    /// transaction already holds everything asked (nothing to write).
    pub fn add(
        &self,
        producer_id: i64,
        epoch: i16,
        partitions: &[(String, i32)],
        group: Option<&str>,
        now_ms: i64,
    ) -> Result<Option<TxnMetadata>, TxnError> {
        self.check_producer(producer_id, epoch)?;
        if self.state.is_prepared() {
            return Err(TxnError::ConcurrentTransactions);
        }
        let known = partitions.iter().all(|p| self.partitions.contains(p))
            && group.is_none_or(|g| self.groups.contains(g));
        if self.state == TxnState::Ongoing && known {
            return Ok(None);
        }
        let mut next = self.clone();
        if self.state != TxnState::Ongoing {
            next.state = TxnState::Ongoing;
            next.start_ms = now_ms;
        }
        next.partitions.extend(partitions.iter().cloned());
        if let Some(group) = group {
            next.groups.insert(group.to_string());
        }
        next.update_ms = now_ms;
        Ok(Some(next))
    }

    /// KIP-890 part 1: whether a partition's owner may append a transactional batch of
    /// (`producer_id`, `epoch`) to `partition`, i.e. the partition is in this id's open
    /// transaction at that epoch. Kafka's `handleVerifyPartitionsInTransaction`: the call's
    /// producer must be the current one; while markers are written the answer is
    /// CONCURRENT_TRANSACTIONS; a partition never added is INVALID_TXN_STATE. Partitions are
    /// held only while Ongoing or Prepare* (invariant 1), so Empty and Complete* refuse.
    pub fn verify_partition(
        &self,
        producer_id: i64,
        epoch: i16,
        partition: &(String, i32),
    ) -> Result<(), TxnError> {
        self.check_producer(producer_id, epoch)?;
        if self.state.is_prepared() {
            return Err(TxnError::ConcurrentTransactions);
        }
        if !self.partitions.contains(partition) {
            let (topic, index) = partition;
            return Err(TxnError::InvalidTxnState(format!(
                "partition {topic}-{index} was not added to the transaction of {}",
                self.transactional_id
            )));
        }
        Ok(())
    }

    /// EndTxn: the Prepare* metadata to write, or that a retry already completed.
    pub fn end(
        &self,
        producer_id: i64,
        epoch: i16,
        commit: bool,
        now_ms: i64,
    ) -> Result<Option<TxnMetadata>, TxnError> {
        self.check_producer(producer_id, epoch)?;
        let (done, prepared) = if commit {
            (TxnState::CompleteCommit, TxnState::PrepareCommit)
        } else {
            (TxnState::CompleteAbort, TxnState::PrepareAbort)
        };
        match self.state {
            TxnState::Ongoing => {
                let mut next = self.clone();
                next.state = prepared;
                next.update_ms = now_ms;
                Ok(Some(next))
            }
            s if s == done => Ok(None),
            s if s == prepared => Err(TxnError::ConcurrentTransactions),
            s => Err(TxnError::InvalidTxnState(format!(
                "EndTxn({}) in state {}",
                if commit { "commit" } else { "abort" },
                s.name()
            ))),
        }
    }

    /// The coordinator aborts the open transaction itself (timeout, or a new instance of
    /// the producer): the epoch is bumped so that the old instance is fenced.
    pub fn fence_and_abort(&self, now_ms: i64) -> TxnMetadata {
        assert_eq!(self.state, TxnState::Ongoing, "only an open transaction is fenced");
        let mut next = self.clone();
        next.producer_epoch = self.producer_epoch.saturating_add(1);
        next.state = TxnState::PrepareAbort;
        next.update_ms = now_ms;
        next
    }

    /// After the markers: Complete*, partitions and groups forgotten (invariant 1).
    pub fn complete(&self, now_ms: i64) -> TxnMetadata {
        let mut next = self.clone();
        next.state = match self.state {
            TxnState::PrepareCommit => TxnState::CompleteCommit,
            TxnState::PrepareAbort => TxnState::CompleteAbort,
            other => panic!("complete from {other:?}"),
        };
        next.partitions.clear();
        next.groups.clear();
        next.start_ms = -1;
        next.update_ms = now_ms;
        next
    }

    /// InitProducerId for a known id in Empty or Complete*: the next epoch (or a new
    /// producer id once the epoch is exhausted). `asked` is KIP-360's (producer id, epoch)
    /// of a client recovering; it must be the current one.
    pub fn bump(
        &self,
        asked: Option<(i64, i16)>,
        timeout_ms: i32,
        new_producer_id: impl FnOnce() -> i64,
        now_ms: i64,
    ) -> Result<TxnMetadata, TxnError> {
        if self.state.is_prepared() || self.state == TxnState::Ongoing {
            return Err(TxnError::ConcurrentTransactions);
        }
        if let Some((producer_id, epoch)) = asked {
            self.check_producer(producer_id, epoch)?;
        }
        let mut next = self.clone();
        if self.producer_epoch >= i16::MAX - 1 {
            next.producer_id = new_producer_id();
            next.producer_epoch = 0;
        } else {
            next.producer_epoch += 1;
        }
        next.state = TxnState::Empty;
        next.timeout_ms = timeout_ms;
        next.update_ms = now_ms;
        assert!(next.partitions.is_empty() && next.groups.is_empty(), "invariant 1");
        Ok(next)
    }

    /// Whether an open transaction ran past its timeout at `now_ms`.
    pub fn timed_out(&self, now_ms: i64) -> bool {
        self.state == TxnState::Ongoing && now_ms - self.start_ms > self.timeout_ms as i64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(topic: &str, partition: i32) -> (String, i32) {
        (topic.to_string(), partition)
    }

    #[test]
    fn a_transaction_goes_through_kafkas_states() {
        let t = TxnMetadata::new("tx", 7, 60_000, 0);
        let t = t.add(7, 0, &[p("a", 0)], None, 1).unwrap().unwrap();
        assert_eq!((t.state, t.start_ms), (TxnState::Ongoing, 1));
        assert_eq!(t.add(7, 0, &[p("a", 0)], None, 2), Ok(None), "nothing new to write");
        let t = t.add(7, 0, &[p("a", 1)], Some("g"), 3).unwrap().unwrap();
        assert_eq!(t.start_ms, 1);
        let prepared = t.end(7, 0, true, 4).unwrap().unwrap();
        assert_eq!(prepared.state, TxnState::PrepareCommit);
        assert_eq!(prepared.end(7, 0, true, 5), Err(TxnError::ConcurrentTransactions));
        assert!(matches!(prepared.end(7, 0, false, 5), Err(TxnError::InvalidTxnState(_))));
        assert_eq!(
            prepared.add(7, 0, &[p("a", 2)], None, 5),
            Err(TxnError::ConcurrentTransactions)
        );
        let done = prepared.complete(6);
        assert_eq!(done.state, TxnState::CompleteCommit);
        assert!(done.partitions.is_empty() && done.groups.is_empty());
        assert_eq!(done.end(7, 0, true, 7), Ok(None), "a retried commit succeeds");
        assert!(matches!(done.end(7, 0, false, 7), Err(TxnError::InvalidTxnState(_))));
        let next = done.add(7, 0, &[p("b", 0)], None, 8).unwrap().unwrap();
        assert_eq!((next.state, next.start_ms), (TxnState::Ongoing, 8));
    }

    #[test]
    fn calls_out_of_order_or_from_another_instance_are_refused() {
        let t = TxnMetadata::new("tx", 7, 60_000, 0);
        assert!(matches!(t.end(7, 0, true, 1), Err(TxnError::InvalidTxnState(_))));
        assert_eq!(t.add(8, 0, &[], None, 1), Err(TxnError::InvalidProducerIdMapping));
        let bumped = t.bump(None, 60_000, || unreachable!(), 1).unwrap();
        assert_eq!(bumped.producer_epoch, 1);
        assert_eq!(bumped.add(7, 0, &[p("a", 0)], None, 2), Err(TxnError::ProducerFenced));
        assert_eq!(bumped.bump(Some((7, 0)), 1, || 0, 2), Err(TxnError::ProducerFenced));
        let open = bumped.add(7, 1, &[p("a", 0)], None, 2).unwrap().unwrap();
        assert_eq!(open.bump(None, 1, || 0, 3), Err(TxnError::ConcurrentTransactions));
        let fenced = open.fence_and_abort(3);
        assert_eq!((fenced.state, fenced.producer_epoch), (TxnState::PrepareAbort, 2));
        assert_eq!(fenced.complete(4).end(7, 1, false, 5), Err(TxnError::ProducerFenced));
    }

    #[test]
    fn a_partition_verifies_only_inside_the_current_epochs_open_transaction() {
        let empty = TxnMetadata::new("tx", 7, 60_000, 0);
        let open = empty.add(7, 0, &[p("a", 0)], None, 1).unwrap().unwrap();
        let prepared = open.end(7, 0, true, 2).unwrap().unwrap();
        let done = prepared.complete(3);
        let not_added = |r: Result<(), TxnError>| matches!(r, Err(TxnError::InvalidTxnState(_)));
        assert_eq!(open.verify_partition(7, 0, &p("a", 0)), Ok(()));
        assert!(not_added(open.verify_partition(7, 0, &p("a", 1))), "never added");
        assert!(not_added(open.verify_partition(7, 0, &p("b", 0))));
        assert!(not_added(empty.verify_partition(7, 0, &p("a", 0))), "no transaction yet");
        assert!(not_added(done.verify_partition(7, 0, &p("a", 0))), "its marker is written");
        assert_eq!(
            prepared.verify_partition(7, 0, &p("a", 0)),
            Err(TxnError::ConcurrentTransactions),
            "markers are being written"
        );
        assert_eq!(
            open.verify_partition(8, 0, &p("a", 0)),
            Err(TxnError::InvalidProducerIdMapping)
        );
        assert_eq!(open.verify_partition(7, 1, &p("a", 0)), Err(TxnError::ProducerFenced));
        let fenced = open.fence_and_abort(4);
        assert_eq!(fenced.verify_partition(7, 0, &p("a", 0)), Err(TxnError::ProducerFenced));
    }

    #[test]
    fn an_exhausted_epoch_moves_to_a_new_producer_id() {
        let mut t = TxnMetadata::new("tx", 7, 60_000, 0);
        t.producer_epoch = i16::MAX - 1;
        let next = t.bump(None, 60_000, || 99, 1).unwrap();
        assert_eq!((next.producer_id, next.producer_epoch), (99, 0));
    }

    #[test]
    fn only_open_transactions_time_out() {
        let t = TxnMetadata::new("tx", 7, 1_000, 0);
        assert!(!t.timed_out(10_000));
        let open = t.add(7, 0, &[p("a", 0)], None, 100).unwrap().unwrap();
        assert!(!open.timed_out(1_100));
        assert!(open.timed_out(1_101));
    }
}
