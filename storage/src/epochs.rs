//! A partition's leader-epoch cache (KIP-320; Kafka's `LeaderEpochFileCache`): each
//! partition leader epoch its batches carry, with the first offset written in it, so
//! OffsetForLeaderEpoch can say where an epoch ended.
//!
//! Runs on the shard that owns the partition. Append hot path: an append compares its
//! batch's epoch with the last one (O(1)); only a new epoch pushes an entry (one per
//! leader change, never per batch). Built at recovery from the batch headers the replay
//! visits and from the checkpoint (format version 2 carries it: `checkpoint.rs`).
//!
//! Invariants:
//! 1. Epochs strictly increase, and so do their start offsets.
//! 2. A batch whose epoch is negative (a producer's -1, written by a broker that did not
//!    stamp epochs) or lower than the last cached one adds nothing, as in Kafka.
//! 3. After a trim of the log start to `s`, no entry starts below `s`: the epoch of the
//!    first offset still in the log then starts at `s` (at the log end, if the trim
//!    emptied the log: the next new epoch replaces it there).

use crate::Offset;

/// Kafka's UNDEFINED_EPOCH and UNDEFINED_EPOCH_OFFSET (both -1).
pub const UNDEFINED_EPOCH: i32 = -1;
pub const UNDEFINED_EPOCH_OFFSET: Offset = -1;

/// One epoch and the first offset written in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EpochEntry {
    pub epoch: i32,
    pub start_offset: Offset,
}

/// A partition's epochs in order (invariant 1); most partitions hold one or none.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LeaderEpochs {
    entries: Vec<EpochEntry>,
}

impl LeaderEpochs {
    /// The cache as a checkpoint held it (asserted in order: `checkpoint::decode` refuses
    /// a checkpoint whose epochs are not, so only a bug here could trip it).
    pub fn from_entries(entries: Vec<EpochEntry>) -> LeaderEpochs {
        for pair in entries.windows(2) {
            assert!(
                pair[0].epoch < pair[1].epoch && pair[0].start_offset < pair[1].start_offset,
                "leader epochs in order (invariant 1): {pair:?}"
            );
        }
        LeaderEpochs { entries }
    }

    pub fn entries(&self) -> &[EpochEntry] {
        &self.entries
    }

    /// The last epoch cached, if any.
    pub fn latest(&self) -> Option<i32> {
        self.entries.last().map(|e| e.epoch)
    }

    /// A batch of `epoch` appended at `base_offset` (invariant 2).
    pub fn note(&mut self, epoch: i32, base_offset: Offset) {
        if epoch < 0 || self.latest().is_some_and(|last| epoch <= last) {
            return;
        }
        // A trim to the log end left the last epoch starting at this very offset
        // (invariant 3): the new epoch replaces it there, as Kafka's `assign` does.
        while self.entries.last().is_some_and(|last| last.start_offset >= base_offset) {
            self.entries.pop();
        }
        if self.entries.capacity() == 0 {
            self.entries.reserve_exact(1); // most partitions never see a second epoch
        }
        self.entries.push(EpochEntry { epoch, start_offset: base_offset });
    }

    /// The log start moved to `log_start_offset` (retention, DeleteRecords): invariant 3.
    pub fn trim_start(&mut self, log_start_offset: Offset) {
        let below = self.entries.iter().take_while(|e| e.start_offset <= log_start_offset).count();
        if below == 0 {
            return;
        }
        self.entries.drain(..below - 1);
        self.entries[0].start_offset = log_start_offset;
    }

    /// The epochs as of `next_offset`: those that start below it (a checkpoint's copy of a
    /// partition whose batches from `next_offset` on lie past its position).
    pub fn before(&self, next_offset: Offset) -> Vec<EpochEntry> {
        self.entries.iter().take_while(|e| e.start_offset < next_offset).copied().collect()
    }

    /// The epoch of the batch holding `offset` (ListOffsets' leader_epoch): the last epoch
    /// that starts at or below it; None when no cached epoch does.
    pub fn epoch_of(&self, offset: Offset) -> Option<i32> {
        let after = self.entries.partition_point(|e| e.start_offset <= offset);
        after.checked_sub(1).map(|i| self.entries[i].epoch)
    }

    /// Where epoch `requested` ended, as (epoch, end offset), as Kafka's
    /// `LeaderEpochFileCache.endOffsetFor` answers on a leader, whose cache always holds
    /// its current epoch: `current_epoch` (the partition's leader epoch now) counts as
    /// starting at `log_end_offset` when no batch of it was written yet.
    /// - requested -1: (-1, -1);
    /// - requested the current epoch: (it, the log end offset);
    /// - no epoch above requested: (-1, -1);
    /// - none at or below requested: (requested, the first epoch's start offset), the log's
    ///   older epochs being gone;
    /// - else (the largest epoch at or below requested, the next epoch's start offset).
    pub fn end_offset_for(
        &self,
        requested: i32,
        current_epoch: i32,
        log_end_offset: Offset,
    ) -> (i32, Offset) {
        if requested == UNDEFINED_EPOCH {
            return (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET);
        }
        // A leader caches its epoch when it takes over (Kafka's `makeLeader`); here the
        // current epoch is in the cache once a batch of it was written, else it is added
        // to this view, starting at the log end.
        let current = match self.latest() {
            Some(latest) if latest >= current_epoch => None,
            _ => Some(EpochEntry { epoch: current_epoch, start_offset: log_end_offset }),
        };
        if current.map(|c| c.epoch).or(self.latest()) == Some(requested) {
            return (requested, log_end_offset);
        }
        let mut view = self.entries.iter().copied().chain(current);
        let Some(higher) = view.find(|e| e.epoch > requested) else {
            return (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET);
        };
        match self.entries.iter().rev().find(|e| e.epoch <= requested) {
            None => (requested, higher.start_offset),
            Some(floor) => (floor.epoch, higher.start_offset),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(entries: &[(i32, Offset)]) -> LeaderEpochs {
        let mut epochs = LeaderEpochs::default();
        for (epoch, start) in entries {
            epochs.note(*epoch, *start);
        }
        epochs
    }

    #[test]
    fn a_batch_adds_an_epoch_only_when_it_is_new_and_not_negative() {
        let mut epochs = LeaderEpochs::default();
        epochs.note(-1, 0);
        assert_eq!(epochs.latest(), None);
        epochs.note(2, 3);
        epochs.note(2, 5);
        epochs.note(1, 7);
        epochs.note(4, 9);
        let want =
            [EpochEntry { epoch: 2, start_offset: 3 }, EpochEntry { epoch: 4, start_offset: 9 }];
        assert_eq!(epochs.entries(), &want);
    }

    /// Kafka's `endOffsetFor` on a leader of epoch 6 (log end 20) whose log holds epochs
    /// 2 from 0, 4 from 10 and 5 from 15.
    #[test]
    fn end_offset_for_answers_as_kafka_on_a_leader() {
        let epochs = cache(&[(2, 0), (4, 10), (5, 15)]);
        let table = [
            (-1, (-1, -1)), // undefined
            (6, (6, 20)),   // the current epoch: the log end
            (5, (5, 20)),   // the last one written: ends where the current one starts
            (4, (4, 15)),   // a known epoch: the next one's start
            (3, (2, 10)),   // between: the largest below, the next one's start
            (2, (2, 10)),   // the first
            (1, (1, 0)),    // below every epoch: the first one's start
            (7, (-1, -1)),  // above the current: unknown
        ];
        for (requested, want) in table {
            assert_eq!(epochs.end_offset_for(requested, 6, 20), want, "epoch {requested}");
        }
    }

    #[test]
    fn the_current_epoch_ends_at_the_log_end_whether_or_not_it_wrote_a_batch() {
        let written = cache(&[(1, 0), (3, 4)]);
        assert_eq!(written.end_offset_for(3, 3, 9), (3, 9));
        assert_eq!(written.end_offset_for(2, 3, 9), (1, 4));
        let empty = LeaderEpochs::default();
        assert_eq!(empty.end_offset_for(0, 0, 5), (0, 5), "a partition of one replica");
        assert_eq!(empty.end_offset_for(1, 0, 5), (-1, -1));
    }

    #[test]
    fn a_trim_keeps_the_epoch_of_the_new_log_start() {
        let mut epochs = cache(&[(1, 0), (2, 10), (3, 20)]);
        epochs.trim_start(5);
        assert_eq!(epochs.entries()[0], EpochEntry { epoch: 1, start_offset: 5 });
        epochs.trim_start(12);
        let want =
            [EpochEntry { epoch: 2, start_offset: 12 }, EpochEntry { epoch: 3, start_offset: 20 }];
        assert_eq!(epochs.entries(), &want);
        epochs.trim_start(20);
        assert_eq!(epochs.entries(), &[EpochEntry { epoch: 3, start_offset: 20 }]);
        assert_eq!(epochs.epoch_of(25), Some(3));
        assert_eq!(epochs.epoch_of(19), None);
    }

    /// Retention or DeleteRecords up to the log end, then a batch of a new epoch at that
    /// offset: it takes the place of the epoch the trim kept there.
    #[test]
    fn a_new_epoch_at_the_offset_a_trim_to_the_log_end_left_replaces_the_kept_one() {
        let mut epochs = cache(&[(1, 0), (2, 10)]);
        epochs.trim_start(15);
        epochs.note(3, 15);
        assert_eq!(epochs.entries(), &[EpochEntry { epoch: 3, start_offset: 15 }]);
        assert_eq!(epochs.end_offset_for(2, 3, 16), (2, 15));
    }

    #[test]
    fn the_epochs_before_an_offset_are_what_a_checkpoint_copies() {
        let epochs = cache(&[(1, 0), (2, 10)]);
        assert_eq!(epochs.before(10), vec![EpochEntry { epoch: 1, start_offset: 0 }]);
        assert_eq!(LeaderEpochs::from_entries(epochs.before(11)), epochs);
    }
}
