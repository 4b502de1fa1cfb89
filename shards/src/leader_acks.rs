//! acks=1 on a replicated partition (docs/replication.md, "acks=1: the leader's
//! fdatasync"): answered once the leader's own raft write of the entry is durable, before
//! the entry commits, at the offset its apply will give it.
//!
//! Offsets are assigned when an entry is applied (`partition_group`), after it commits, so
//! the leader predicts them when it proposes: a partition's next offset once every entry
//! before the new one applied is its log end now plus what the entries proposed since
//! and not yet applied will append. The leader knows that only when
//! - every entry of earlier terms is applied here (the group's applied term is the
//!   current one): what follows in its log are its own proposals of this term;
//! - each of those proposals for the partition appends a known number of records: a
//!   produce of plain batches (no producer id, not transactional, not control), whose
//!   apply appends all of them on every replica. An idempotent or transactional produce
//!   (its sequence checks decide at apply) or a transaction marker makes the partition's
//!   next offset unknown until it applies; acks=1 then waits for the apply as acks=all
//!   does. (Kafka clients send idempotent and transactional batches with acks=all only.)
//!
//! The entry's apply on the leader checks the prediction; a mismatch would be a bug, and
//! is logged and counted (`shardlog_replicated_early_ack_mispredictions_total`).
//!
//! Invariants:
//! 1. An acks=1 produce is answered early only with its entry durable in the leader's raft
//!    log in the term it was proposed in, with that replica leading the term (raft-rs's
//!    persisted index, reported after the fdatasync; `GroupSink::persisted`).
//! 2. The offset answered is the one the entry gets on every replica that applies it: a
//!    prediction is made only when every entry before it in the leader's log is applied
//!    or was proposed by this leader in this term with a known effect (module docs).
//! 3. If the leader loses the term before the entry commits, the entry may be lost, as an
//!    acks=1 record is in Kafka when its leader fails before the followers copied it; if
//!    it commits, it is at the offset answered (the log before it is the leader's).

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};

use glommio::channels::local_channel::{self, LocalReceiver, LocalSender};
use shardlog_storage::{Offset, PartitionId, RecordBatchHeader};

use crate::error::PartitionError;
use crate::ops::Queued;
use crate::txn::partition::{CONTROL, TRANSACTIONAL};

/// acks=1 answers on the leader's fdatasync since the shard started (`/metrics`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LeaderAckStats {
    /// acks=1 produces answered once the leader's raft write was durable, before commit.
    pub early_acks: u64,
    /// Applied entries whose offset differed from the one an early ack predicted (a bug).
    pub mispredictions: u64,
}

/// One led group's pending proposals, per partition, in one term.
struct Projection {
    term: u64,
    /// Partition -> (index of the last entry proposed for it in this term, the
    /// partition's next offset once that entry applied; None: not known).
    ends: HashMap<PartitionId, (u64, Option<Offset>)>,
}

/// (group, index) -> (the term it was proposed in, where to say its write is durable).
type Waiting = (u64, LocalSender<()>);

/// A shard's early acks of its led partition groups.
#[derive(Default)]
pub(crate) struct LeaderAcks {
    projections: RefCell<HashMap<u64, Projection>>,
    /// Early acks waiting for the leader's write.
    waiting: RefCell<BTreeMap<(u64, u64), Waiting>>,
    /// Predicted base offsets, checked when the entry applies: (group, index) -> (term,
    /// base offset).
    predicted: RefCell<HashMap<(u64, u64), (u64, Offset)>>,
    stats: Cell<LeaderAckStats>,
}

/// Where a group's leader stands when it proposes: its term, and the index and term of
/// the last entry it applied.
pub(crate) struct Standing {
    pub term: u64,
    pub applied_index: u64,
    pub applied_term: u64,
}

/// Records a produce's batches append if every replica's apply takes them whole: plain
/// batches only (module docs), else None.
pub(crate) fn plain_records(batches: &[(RecordBatchHeader, bytes::Bytes)]) -> Option<i64> {
    let plain =
        |h: &RecordBatchHeader| h.producer_id < 0 && h.attributes & (TRANSACTIONAL | CONTROL) == 0;
    match batches.iter().all(|(h, _)| plain(h)) {
        true => Some(batches.iter().map(|(h, _)| h.last_offset_delta as i64 + 1).sum()),
        false => None,
    }
}

impl LeaderAcks {
    pub(crate) fn stats(&self) -> LeaderAckStats {
        self.stats.get()
    }

    /// The offset at which the next entry proposed for `partition` in `group` will apply,
    /// if known (invariant 2); `log_end`: the partition's log end here now.
    pub(crate) fn next_offset(
        &self,
        group: u64,
        standing: &Standing,
        partition: PartitionId,
        log_end: Offset,
    ) -> Option<Offset> {
        if standing.applied_term != standing.term {
            return None; // entries of an earlier term may be unapplied
        }
        let projections = self.projections.borrow();
        let pending = projections
            .get(&group)
            .filter(|p| p.term == standing.term)
            .and_then(|p| p.ends.get(&partition))
            .filter(|(index, _)| *index > standing.applied_index);
        match pending {
            Some((_, end)) => *end,
            None => Some(log_end),
        }
    }

    /// An entry for `partition` proposed at `index` in `term`; `end`: the partition's next
    /// offset once it applied, if known. Every produce and marker the leader proposes is
    /// noted, known or not (invariant 2).
    pub(crate) fn note_proposed(
        &self,
        group: u64,
        term: u64,
        index: u64,
        partition: PartitionId,
        end: Option<Offset>,
    ) {
        let mut projections = self.projections.borrow_mut();
        let projection =
            projections.entry(group).or_insert_with(|| Projection { term, ends: HashMap::new() });
        if projection.term != term {
            *projection = Projection { term, ends: HashMap::new() };
        }
        projection.ends.insert(partition, (index, end));
    }

    /// Waits for the leader's write of the entry at `index` (proposed in `term`) to be
    /// durable while it leads `term` (invariant 1); the base offset `base` is checked when
    /// the entry applies. The receiver ends without a word if that cannot happen any more.
    pub(crate) fn wait_durable(
        &self,
        group: u64,
        index: u64,
        term: u64,
        base: Offset,
    ) -> LocalReceiver<()> {
        let (sender, receiver) = local_channel::new_bounded(1);
        self.waiting.borrow_mut().insert((group, index), (term, sender));
        self.predicted.borrow_mut().insert((group, index), (term, base));
        receiver
    }

    /// Stops waiting for the write at `index` (answered one way or the other).
    pub(crate) fn forget(&self, group: u64, index: u64) {
        self.waiting.borrow_mut().remove(&(group, index));
    }

    /// An early ack went out.
    pub(crate) fn count_early_ack(&self) {
        self.count(|s| s.early_acks += 1);
    }

    /// The leader's raft log of `group` is durable up to `persisted` while it leads
    /// `term`: the writes waited for up to there are answered if proposed in `term`
    /// (invariant 1); the others end unanswered (they wait for the apply).
    pub(crate) fn persisted(&self, group: u64, persisted: u64, term: u64) {
        let mut waiting = self.waiting.borrow_mut();
        let due: Vec<(u64, u64)> =
            waiting.range((group, 0)..=(group, persisted)).map(|(key, _)| *key).collect();
        for key in due {
            let (proposed_in, sender) = waiting.remove(&key).expect("a key just listed");
            if proposed_in == term {
                let _ = sender.try_send(());
            }
        }
    }

    /// The entry at `index` of `group` applied here in `term`, as `applied`; an early
    /// ack's prediction is checked (module docs).
    pub(crate) fn applied(
        &self,
        group: u64,
        index: u64,
        term: u64,
        applied: &Result<Queued, PartitionError>,
    ) {
        let Some((predicted_term, predicted)) = self.predicted.borrow_mut().remove(&(group, index))
        else {
            return;
        };
        let base = match applied {
            Ok(queued) => Some(queued.base_offset()),
            // Deleted since: the record went with its partition, wherever it was.
            Err(PartitionError::UnknownTopicOrPartition) => return,
            Err(_) => None,
        };
        if predicted_term == term && base != Some(predicted) {
            tracing::error!(
                group,
                index,
                predicted,
                ?base,
                "an early ack's offset was mispredicted"
            );
            self.count(|s| s.mispredictions += 1);
        }
    }

    fn count(&self, change: impl FnOnce(&mut LeaderAckStats)) {
        let mut stats = self.stats.get();
        change(&mut stats);
        self.stats.set(stats);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn standing(term: u64, applied_index: u64, applied_term: u64) -> Standing {
        Standing { term, applied_index, applied_term }
    }

    #[test]
    fn the_next_offset_is_the_log_end_plus_what_was_proposed_since() {
        let acks = LeaderAcks::default();
        let p = PartitionId(7);
        let now = standing(3, 10, 3);
        assert_eq!(acks.next_offset(1, &now, p, 100), Some(100));
        acks.note_proposed(1, 3, 11, p, Some(105));
        assert_eq!(acks.next_offset(1, &now, p, 100), Some(105));
        // Once entry 11 applied, the log end says it.
        assert_eq!(acks.next_offset(1, &standing(3, 11, 3), p, 105), Some(105));
        // Another partition of the group is not affected.
        assert_eq!(acks.next_offset(1, &now, PartitionId(8), 4), Some(4));
    }

    #[test]
    fn an_entry_of_unknown_effect_hides_the_next_offset_until_it_applies() {
        let acks = LeaderAcks::default();
        let p = PartitionId(7);
        acks.note_proposed(1, 3, 11, p, None);
        assert_eq!(acks.next_offset(1, &standing(3, 10, 3), p, 100), None);
        assert_eq!(acks.next_offset(1, &standing(3, 11, 3), p, 101), Some(101));
    }

    #[test]
    fn nothing_is_known_before_the_leader_applied_an_entry_of_its_term() {
        let acks = LeaderAcks::default();
        let p = PartitionId(7);
        assert_eq!(acks.next_offset(1, &standing(4, 10, 3), p, 100), None);
        // What was proposed in an earlier term does not count in the new one.
        acks.note_proposed(1, 3, 11, p, Some(105));
        assert_eq!(acks.next_offset(1, &standing(4, 12, 4), p, 100), Some(100));
    }

    /// Whether `receiver` was told (Some(true)), ended untold (Some(false)) or waits (None).
    fn told(receiver: &LocalReceiver<()>) -> Option<bool> {
        futures_lite::future::block_on(futures_lite::future::poll_once(receiver.recv()))
            .map(|told| told.is_some())
    }

    #[test]
    fn a_durable_write_answers_only_the_waiters_of_the_leaders_term() {
        let executor = glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound);
        executor.make().unwrap().run(async {
            let acks = LeaderAcks::default();
            let same = acks.wait_durable(1, 11, 3, 100);
            let older = acks.wait_durable(1, 12, 2, 101);
            let later = acks.wait_durable(1, 13, 3, 102);
            let other_group = acks.wait_durable(2, 11, 3, 0);
            acks.persisted(1, 12, 3);
            assert_eq!(told(&same), Some(true));
            assert_eq!(told(&older), Some(false), "an older term's waiter ends untold");
            assert_eq!(told(&later), None);
            assert_eq!(told(&other_group), None);
        });
    }

    #[test]
    fn a_misprediction_is_counted_only_in_the_predicted_term() {
        let acks = LeaderAcks::default();
        let at = |base| Ok(Queued::predicted(PartitionId(7), base, -1));
        for (index, base) in [(11, 100), (12, 101), (13, 102), (14, 103), (15, 104)] {
            let _ = acks.wait_durable(1, index, 3, base);
        }
        acks.applied(1, 11, 3, &at(100));
        acks.applied(1, 12, 4, &at(7)); // replaced by another term's entry
        acks.applied(1, 13, 3, &Err(PartitionError::UnknownTopicOrPartition)); // deleted
        assert_eq!(acks.stats().mispredictions, 0);
        acks.applied(1, 14, 3, &at(105));
        acks.applied(1, 15, 3, &Err(PartitionError::NotLeaderOrFollower));
        assert_eq!(acks.stats().mispredictions, 2);
    }

    #[test]
    fn only_plain_batches_have_a_known_record_count() {
        let batch = |producer_id: i64, attributes: i16, last_offset_delta: i32| {
            let header = RecordBatchHeader {
                base_offset: 0,
                batch_length: 0,
                partition_leader_epoch: 0,
                magic: 2,
                crc: 0,
                attributes,
                last_offset_delta,
                base_timestamp: 0,
                max_timestamp: 0,
                producer_id,
                producer_epoch: 0,
                base_sequence: 0,
                records_count: last_offset_delta + 1,
            };
            (header, bytes::Bytes::new())
        };
        assert_eq!(plain_records(&[batch(-1, 0, 2), batch(-1, 0, 0)]), Some(4));
        assert_eq!(plain_records(&[batch(-1, 0, 2), batch(5, 0, 0)]), None);
        assert_eq!(plain_records(&[batch(-1, TRANSACTIONAL, 0)]), None);
        assert_eq!(plain_records(&[batch(-1, CONTROL, 0)]), None);
    }
}
