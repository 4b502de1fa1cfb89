//! Relaxed acks (`write.caching=true`, modelled on Redpanda's write caching): a produce is
//! answered once its batches are handed to the shard's flusher, before the fdatasync that
//! covers them, within the bounds of the topic's `flush.messages` and `flush.ms`.
//!
//! Runs on the partition's owner shard, in phase one of produce (no `.await`). A plain
//! state machine over anything that can say whether it is synced, table-tested below with
//! a fake; the shard uses `shardlog_storage::Durable`.
//!
//! How the bounds are honoured in a flusher that never waits on a timer (group commit: one
//! write+fdatasync in flight, the next starts as soon as it completes):
//! - `flush.messages`: records acknowledged but not yet synced are counted over the whole
//!   shard (one fdatasync covers every partition of the shard's log), so the count of any
//!   one partition is never above it. A relaxed produce that would take the count above
//!   the topic's `flush.messages` waits for its fdatasync instead.
//! - `flush.ms`: syncs cannot be made to come sooner (the flusher is already always busy
//!   when there is data). When the oldest acknowledged-but-unsynced batch has waited longer
//!   than `flush.ms` (a slow or stalled disk), new relaxed produces wait for fdatasync
//!   until the flusher catches up.
//!
//! Durability contract: relaxed acks can lose acknowledged records on a crash or power loss
//! (at most the bounds above); the high watermark still moves only after fdatasync, so a
//! consumer never reads a record a crash could take back.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use shardlog_storage::Durable;

use crate::topic_config::RelaxedAckBounds;

/// Something that is, eventually, covered by a completed fdatasync.
pub trait Synced {
    fn is_synced(&self) -> bool;
}

impl Synced for Durable {
    fn is_synced(&self) -> bool {
        self.is_durable()
    }
}

/// One relaxed ack not yet covered by an fdatasync.
struct Unsynced<D> {
    durable: D,
    records: u64,
    acked_at: Instant,
}

/// The shard's acknowledged-but-unsynced appends, oldest first (appends are synced in
/// log order, so the front is always the first to become durable).
pub struct UnsyncedAcks<D: Synced> {
    entries: VecDeque<Unsynced<D>>,
    records: u64,
}

impl<D: Synced> Default for UnsyncedAcks<D> {
    fn default() -> Self {
        UnsyncedAcks { entries: VecDeque::new(), records: 0 }
    }
}

impl<D: Synced> UnsyncedAcks<D> {
    /// Records acknowledged and not yet synced.
    pub fn records(&mut self) -> u64 {
        self.forget_synced();
        self.records
    }

    /// Whether an append of `records` may be acknowledged now: if so it is remembered
    /// until synced and `Ok(())` returned; otherwise the caller waits on the returned
    /// `durable`.
    pub fn try_ack(
        &mut self,
        durable: D,
        records: u64,
        bounds: RelaxedAckBounds,
        now: Instant,
    ) -> Result<(), D> {
        self.forget_synced();
        let too_old = self.entries.front().is_some_and(|oldest| {
            now.saturating_duration_since(oldest.acked_at) > Duration::from_millis(bounds.flush_ms)
        });
        if too_old || self.records.saturating_add(records) > bounds.flush_messages {
            return Err(durable);
        }
        self.records += records;
        self.entries.push_back(Unsynced { durable, records, acked_at: now });
        Ok(())
    }

    fn forget_synced(&mut self) {
        while self.entries.front().is_some_and(|e| e.durable.is_synced()) {
            let synced = self.entries.pop_front().expect("front exists");
            self.records -= synced.records;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::rc::Rc;

    use super::*;

    /// A fake durable: synced once the shared "durable position" passes it.
    struct SimDurable {
        position: u64,
        durable: Rc<Cell<u64>>,
    }

    impl Synced for SimDurable {
        fn is_synced(&self) -> bool {
            self.durable.get() >= self.position
        }
    }

    fn bounds(flush_ms: u64, flush_messages: u64) -> RelaxedAckBounds {
        RelaxedAckBounds { flush_ms, flush_messages }
    }

    #[test]
    fn acks_wait_once_flush_messages_records_are_unsynced_and_resume_after_a_sync() {
        let durable = Rc::new(Cell::new(0));
        let at = |position| SimDurable { position, durable: durable.clone() };
        let mut acks = UnsyncedAcks::default();
        let t0 = Instant::now();
        let b = bounds(1_000_000, 10);
        assert!(acks.try_ack(at(1), 4, b, t0).is_ok());
        assert!(acks.try_ack(at(2), 6, b, t0).is_ok());
        assert!(acks.try_ack(at(3), 1, b, t0).is_err(), "11 unsynced records > 10");
        assert_eq!(acks.records(), 10);
        durable.set(1);
        assert!(acks.try_ack(at(3), 4, b, t0).is_ok(), "4 freed by the sync");
        durable.set(3);
        assert_eq!(acks.records(), 0);
    }

    #[test]
    fn acks_wait_while_the_oldest_unsynced_ack_is_older_than_flush_ms() {
        let durable = Rc::new(Cell::new(0));
        let at = |position| SimDurable { position, durable: durable.clone() };
        let mut acks = UnsyncedAcks::default();
        let t0 = Instant::now();
        let b = bounds(100, u64::MAX);
        assert!(acks.try_ack(at(1), 1, b, t0).is_ok());
        assert!(acks.try_ack(at(2), 1, b, t0 + Duration::from_millis(100)).is_ok());
        assert!(acks.try_ack(at(3), 1, b, t0 + Duration::from_millis(101)).is_err());
        durable.set(1);
        // The oldest left is from t0 + 100 ms.
        assert!(acks.try_ack(at(3), 1, b, t0 + Duration::from_millis(150)).is_ok());
    }

    #[test]
    fn a_batch_larger_than_flush_messages_is_never_acked_early() {
        let durable = Rc::new(Cell::new(0));
        let mut acks = UnsyncedAcks::default();
        let fake = SimDurable { position: 1, durable };
        assert!(acks.try_ack(fake, 5, bounds(100, 4), Instant::now()).is_err());
        assert_eq!(acks.records(), 0);
    }
}
