//! Idempotent producers: per-partition producer state and its sequence checks.
//!
//! Runs on the shard that owns the partition, in phase one of a produce (so pipelined
//! requests are checked in arrival order). For each (partition, producer id) the shard
//! keeps the epoch and the last `BATCHES_KEPT` batches (sequence range and offsets), as
//! Kafka does, so that:
//! - a retried batch already written is answered with its original offsets, not written
//!   again (`Check::Duplicate`);
//! - a gap in sequence is OUT_OF_ORDER_SEQUENCE_NUMBER, an older epoch is
//!   INVALID_PRODUCER_EPOCH, and a producer the shard has no state for that does not
//!   start at sequence 0 is UNKNOWN_PRODUCER_ID (Kafka >= 2.5 semantics: the client bumps
//!   its epoch and starts again at 0).
//!
//! State is rebuilt on start-up from the last snapshot entry of the `ProducerState`
//! internal stream plus the batches written after it (`rebuild` in `producer_log.rs`).
//!
//! Invariants:
//! 1. Per producer, kept batches are in sequence order and at most `BATCHES_KEPT`.
//! 2. A batch is recorded only after it was queued in the log (never for a refusal).

use std::collections::HashMap;

use shardlog_storage::{Offset, PartitionId};

/// Batches remembered per producer and partition (Kafka keeps 5: max.in.flight).
pub const BATCHES_KEPT: usize = 5;

/// One remembered batch.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchMeta {
    pub first_sequence: i32,
    pub last_sequence: i32,
    pub base_offset: Offset,
    pub last_offset: Offset,
}

/// A producer's state in one partition.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct ProducerEntry {
    pub epoch: i16,
    /// Oldest first.
    pub batches: Vec<BatchMeta>,
    /// Wall-clock ms of the last append (for expiry).
    pub last_append_ms: i64,
}

/// The idempotence fields of one batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchSequence {
    pub producer_id: i64,
    pub epoch: i16,
    pub first_sequence: i32,
    pub last_sequence: i32,
}

impl BatchSequence {
    /// From a batch header: the last sequence wraps at i32::MAX, as Kafka's does.
    pub fn new(producer_id: i64, epoch: i16, base_sequence: i32, last_offset_delta: i32) -> Self {
        let last = (base_sequence as i64 + last_offset_delta as i64) % (i32::MAX as i64 + 1);
        BatchSequence {
            producer_id,
            epoch,
            first_sequence: base_sequence,
            last_sequence: last as i32,
        }
    }
}

/// What to do with an idempotent batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Check {
    Append,
    /// Already written: answer with these offsets.
    Duplicate {
        base_offset: Offset,
        last_offset: Offset,
    },
}

/// Why an idempotent batch is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SequenceError {
    OutOfOrder,
    InvalidEpoch,
    UnknownProducerId,
}

fn next_sequence(last: i32) -> i32 {
    if last == i32::MAX {
        0
    } else {
        last + 1
    }
}

/// All producer state of one shard.
#[derive(Default, Debug)]
pub struct ProducerStates {
    entries: HashMap<(PartitionId, i64), ProducerEntry>,
}

impl ProducerStates {
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Checks one batch against the producer's state.
    pub fn check(
        &self,
        partition: PartitionId,
        batch: BatchSequence,
    ) -> Result<Check, SequenceError> {
        let Some(entry) = self.entries.get(&(partition, batch.producer_id)) else {
            return if batch.first_sequence == 0 {
                Ok(Check::Append)
            } else {
                Err(SequenceError::UnknownProducerId)
            };
        };
        if batch.epoch < entry.epoch {
            return Err(SequenceError::InvalidEpoch);
        }
        if batch.epoch > entry.epoch {
            return if batch.first_sequence == 0 {
                Ok(Check::Append)
            } else {
                Err(SequenceError::OutOfOrder)
            };
        }
        let same = |b: &&BatchMeta| {
            b.first_sequence == batch.first_sequence && b.last_sequence == batch.last_sequence
        };
        if let Some(b) = entry.batches.iter().find(same) {
            return Ok(Check::Duplicate { base_offset: b.base_offset, last_offset: b.last_offset });
        }
        match entry.batches.last() {
            Some(last) if batch.first_sequence == next_sequence(last.last_sequence) => {
                Ok(Check::Append)
            }
            None if batch.first_sequence == 0 => Ok(Check::Append),
            _ => Err(SequenceError::OutOfOrder),
        }
    }

    /// Records a batch that was queued in the log at `base_offset..=last_offset`.
    pub fn record(
        &mut self,
        partition: PartitionId,
        batch: BatchSequence,
        base_offset: Offset,
        last_offset: Offset,
        now_ms: i64,
    ) {
        let entry = self.entries.entry((partition, batch.producer_id)).or_insert(ProducerEntry {
            epoch: batch.epoch,
            batches: Vec::new(),
            last_append_ms: now_ms,
        });
        if batch.epoch != entry.epoch {
            entry.epoch = batch.epoch;
            entry.batches.clear();
        }
        entry.batches.push(BatchMeta {
            first_sequence: batch.first_sequence,
            last_sequence: batch.last_sequence,
            base_offset,
            last_offset,
        });
        if entry.batches.len() > BATCHES_KEPT {
            entry.batches.remove(0);
        }
        entry.last_append_ms = entry.last_append_ms.max(now_ms);
        assert!(entry.batches.len() <= BATCHES_KEPT, "invariant 1");
    }

    /// A transaction marker of `producer_id` was written with `epoch`: a newer epoch fences
    /// the older one here too (its batches get INVALID_PRODUCER_EPOCH), and the producer's
    /// sequence starts again at 0.
    pub fn note_marker(
        &mut self,
        partition: PartitionId,
        producer_id: i64,
        epoch: i16,
        now_ms: i64,
    ) {
        let entry = self.entries.entry((partition, producer_id)).or_insert(ProducerEntry {
            epoch,
            batches: Vec::new(),
            last_append_ms: now_ms,
        });
        if epoch > entry.epoch {
            entry.epoch = epoch;
            entry.batches.clear();
        }
        entry.last_append_ms = entry.last_append_ms.max(now_ms);
    }

    /// Forgets producers idle for longer than `expiration_ms`; returns how many.
    pub fn expire(&mut self, now_ms: i64, expiration_ms: i64) -> usize {
        let before = self.entries.len();
        self.entries.retain(|_, e| now_ms - e.last_append_ms <= expiration_ms);
        before - self.entries.len()
    }

    pub fn drop_partition(&mut self, partition: PartitionId) {
        self.entries.retain(|(p, _), _| *p != partition);
    }

    /// Every entry, for a snapshot.
    pub fn snapshot(&self) -> Vec<(u64, i64, ProducerEntry)> {
        self.entries.iter().map(|((p, pid), e)| (p.0, *pid, e.clone())).collect()
    }

    /// The producers of one partition: (producer id, state), by id.
    pub fn of_partition(&self, partition: PartitionId) -> Vec<(i64, ProducerEntry)> {
        let of = self.entries.iter().filter(|((p, _), _)| *p == partition);
        let mut producers: Vec<_> = of.map(|((_, pid), e)| (*pid, e.clone())).collect();
        producers.sort_by_key(|(pid, _)| *pid);
        producers
    }

    /// Replaces one partition's producers (a replica installing its leader's partition
    /// snapshot: docs/replication.md, "Partition snapshots").
    pub fn replace_partition(
        &mut self,
        partition: PartitionId,
        producers: Vec<(i64, ProducerEntry)>,
    ) {
        self.drop_partition(partition);
        self.entries.extend(producers.into_iter().map(|(pid, e)| ((partition, pid), e)));
    }

    pub fn restore(&mut self, entries: Vec<(u64, i64, ProducerEntry)>) {
        self.entries = entries.into_iter().map(|(p, pid, e)| ((PartitionId(p), pid), e)).collect();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: PartitionId = PartitionId(1);

    fn seq(producer_id: i64, epoch: i16, first: i32, count: i32) -> BatchSequence {
        BatchSequence::new(producer_id, epoch, first, count - 1)
    }

    /// (batch, expected check) applied in order; appends are recorded at dense offsets.
    fn run(steps: &[(BatchSequence, Result<Check, SequenceError>)]) {
        let mut states = ProducerStates::default();
        let mut next_offset = 0;
        for (i, (batch, expected)) in steps.iter().enumerate() {
            let got = states.check(P, *batch);
            assert_eq!(got, *expected, "step {i}: {batch:?}");
            if got == Ok(Check::Append) {
                let count = (batch.last_sequence - batch.first_sequence + 1) as i64;
                states.record(P, *batch, next_offset, next_offset + count - 1, 0);
                next_offset += count;
            }
        }
    }

    #[test]
    fn sequences_follow_kafkas_table() {
        use Check::*;
        use SequenceError::*;
        run(&[
            (seq(7, 0, 0, 5), Ok(Append)),
            (seq(7, 0, 5, 5), Ok(Append)),
            // duplicate of the first batch: the original offsets
            (seq(7, 0, 0, 5), Ok(Duplicate { base_offset: 0, last_offset: 4 })),
            (seq(7, 0, 5, 5), Ok(Duplicate { base_offset: 5, last_offset: 9 })),
            // gap
            (seq(7, 0, 11, 1), Err(OutOfOrder)),
            (seq(7, 0, 10, 1), Ok(Append)),
            // old epoch fenced
            (seq(7, -1, 11, 1), Err(InvalidEpoch)),
            // new epoch must start at 0
            (seq(7, 1, 11, 1), Err(OutOfOrder)),
            (seq(7, 1, 0, 1), Ok(Append)),
            (seq(7, 1, 1, 1), Ok(Append)),
            // another producer, unknown, not at 0
            (seq(8, 0, 3, 1), Err(UnknownProducerId)),
            (seq(8, 0, 0, 1), Ok(Append)),
        ]);
    }

    #[test]
    fn only_the_last_five_batches_are_remembered() {
        let mut states = ProducerStates::default();
        for i in 0..7 {
            states.record(P, seq(1, 0, i, 1), i as i64, i as i64, 0);
        }
        assert_eq!(states.check(P, seq(1, 0, 0, 1)), Err(SequenceError::OutOfOrder));
        assert_eq!(
            states.check(P, seq(1, 0, 2, 1)),
            Ok(Check::Duplicate { base_offset: 2, last_offset: 2 })
        );
        assert_eq!(states.check(P, seq(1, 0, 7, 1)), Ok(Check::Append));
    }

    #[test]
    fn sequences_wrap_at_i32_max() {
        let mut states = ProducerStates::default();
        let near_end = BatchSequence::new(1, 0, i32::MAX - 1, 1);
        assert_eq!(near_end.last_sequence, i32::MAX);
        states.record(P, near_end, 0, 1, 0);
        assert_eq!(states.check(P, seq(1, 0, 0, 1)), Ok(Check::Append));
    }

    #[test]
    fn idle_producers_expire_and_then_must_restart_their_sequence() {
        let mut states = ProducerStates::default();
        states.record(P, seq(1, 0, 0, 1), 0, 0, 1_000);
        states.record(P, seq(2, 0, 0, 1), 1, 1, 5_000);
        assert_eq!(states.expire(6_500, 2_000), 1);
        assert_eq!(states.len(), 1);
        assert_eq!(states.check(P, seq(1, 0, 1, 1)), Err(SequenceError::UnknownProducerId));
        let mut restored = ProducerStates::default();
        restored.restore(states.snapshot());
        assert_eq!(restored.check(P, seq(2, 0, 1, 1)), Ok(Check::Append));
    }
}
