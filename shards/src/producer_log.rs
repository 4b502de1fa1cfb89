//! Producer ids and the persistence of producer state (the `ProducerState` stream).
//!
//! Producer ids are allocated by the shard that receives InitProducerId, from its own
//! space: `counter << 10 | shard`, so ids are unique across shards without a hop. Counters
//! are reserved in blocks of `PID_BLOCK` written to the shard's log (fdatasync'd before an
//! id of a new block is handed out), so ids are never reused after a restart.
//!
//! Producer state is snapshotted into the log with every checkpoint; on start-up the last
//! snapshot is loaded and the batches written after it are replayed, so dedup works for a
//! producer retrying across a broker restart.
//!
//! On-disk format of an entry payload: one version byte (`PRODUCER_FORMAT_VERSION`)
//! followed by the rkyv archive of [`ProducerLogEntry`].

use std::collections::HashMap;
use std::time::{SystemTime, UNIX_EPOCH};

use shardlog_storage::{InternalEntry, InternalStream, PartitionId, RecordBatchHeader};
use tracing::{info, warn};

use crate::codec::{decode_versioned, encode_versioned};
use crate::producer::{BatchSequence, ProducerEntry};
use crate::shard::Shard;

pub const PRODUCER_FORMAT_VERSION: u8 = 1;

/// Producer-id counters reserved per log write.
pub const PID_BLOCK: u64 = 1000;

/// Bits of a producer id that name the shard.
const SHARD_BITS: u32 = 10;
/// Bits of a producer id for the shard's counter. Above them, the node id (the 21 bits
/// left: node ids are at most 2,097,151), so ids are unique across a cluster's nodes (two
/// nodes' producers may write to one replicated partition, and one id would share its
/// sequence state), and a single node's ids (node 0) are what they were before clusters.
const COUNTER_BITS: u32 = 32;

/// The id of shard `shard`'s `counter`-th producer on node `node`; None once the counter
/// or the node id does not fit its bits.
fn new_producer_id(node: u32, shard: usize, counter: u64) -> Option<i64> {
    let node_bits = 63 - COUNTER_BITS - SHARD_BITS;
    if counter >= 1 << COUNTER_BITS || u64::from(node) >= 1 << node_bits {
        return None;
    }
    let id = u64::from(node) << (COUNTER_BITS + SHARD_BITS) | counter << SHARD_BITS | shard as u64;
    Some(id as i64)
}

/// The counter of `producer_id` if node `node`'s shard `shard` handed it out.
fn counter_of(node: u32, shard: usize, producer_id: i64) -> Option<u64> {
    let id = u64::try_from(producer_id).ok()?;
    let ours = id >> (COUNTER_BITS + SHARD_BITS) == u64::from(node)
        && id & ((1 << SHARD_BITS) - 1) == shard as u64;
    ours.then_some(id >> SHARD_BITS & ((1 << COUNTER_BITS) - 1))
}

/// One entry of the `ProducerState` stream.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Debug, PartialEq)]
pub enum ProducerLogEntry {
    /// Counters below `reserved_until` may have been handed out.
    PidBlock { reserved_until: u64 },
    /// Every producer's state, valid for each partition up to `covered` (its log end
    /// offset when the snapshot was taken).
    Snapshot {
        reserved_until: u64,
        covered: Vec<(u64, i64)>,
        entries: Vec<(u64, i64, ProducerEntry)>,
    },
}

impl ProducerLogEntry {
    pub fn encode(&self) -> Vec<u8> {
        encode_versioned(PRODUCER_FORMAT_VERSION, self)
    }

    pub fn decode(bytes: &[u8]) -> Result<ProducerLogEntry, String> {
        decode_versioned(PRODUCER_FORMAT_VERSION, "producer entry", bytes)
    }
}

/// Where the start-up replay of one partition begins, for each kind of state.
#[derive(Clone, Copy)]
struct Replay {
    producers: i64,
    transactions: i64,
}

pub(crate) fn wall_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

impl Shard {
    /// InitProducerId without a transactional id: a fresh id, or the same id with the next
    /// epoch when the client asks for a bump (KIP-360). Returns (producer id, epoch).
    pub async fn init_producer_id(
        &self,
        producer_id: i64,
        epoch: i16,
    ) -> Result<(i64, i16), String> {
        if producer_id >= 0 && (0..i16::MAX).contains(&epoch) {
            return Ok((producer_id, epoch + 1));
        }
        let _permit = self.pid_lock.acquire_permit(1).await;
        if self.pid_next.get() >= self.pid_reserved.get() {
            let reserved_until = self.pid_next.get() + PID_BLOCK;
            let entry = ProducerLogEntry::PidBlock { reserved_until };
            let durable = self
                .log
                .append_internal(InternalStream::ProducerState, false, &entry.encode())
                .map_err(|e| format!("reserving producer ids: {e:?}"))?;
            // Set before the wait: a snapshot taken meanwhile lands after this entry in the
            // log and must carry the new reservation, or a restart would restore the old
            // one from it and hand the same ids out again (tests/power_loss.rs).
            self.pid_reserved.set(reserved_until);
            if let Err(e) = durable.wait().await {
                self.fatal_storage_error(&e);
            }
        }
        let counter = self.pid_next.get();
        let id = new_producer_id(self.config.node_id, self.id, counter)
            .ok_or_else(|| format!("shard {} has handed out every producer id", self.id))?;
        self.pid_next.set(counter + 1);
        Ok((id, 0))
    }

    /// Start-up, after the topic table arrived: restores producer ids and producer state
    /// from the last snapshot, then replays the idempotent batches written after it; the
    /// same pass rebuilds the transaction state of partitions (`txn::recovery`).
    pub async fn rebuild_producer_state(&self, recovered: &[InternalEntry]) -> Result<(), String> {
        let mut covered: HashMap<u64, i64> = HashMap::new();
        for entry in recovered.iter().filter(|e| e.stream == InternalStream::ProducerState) {
            match ProducerLogEntry::decode(&entry.payload)? {
                ProducerLogEntry::PidBlock { reserved_until } => self.restore_pids(reserved_until),
                ProducerLogEntry::Snapshot { reserved_until, covered: c, entries } => {
                    self.restore_pids(reserved_until);
                    covered = c.into_iter().collect();
                    self.producers.borrow_mut().restore(entries);
                }
            }
        }
        let txn_covered = self.restore_transactions(recovered)?;
        let partitions = self.local_partitions();
        let mut replayed = 0u64;
        for partition in partitions {
            let Some(info) = self.log.partition_info(partition) else { continue };
            let from = Replay {
                producers: covered.get(&partition.0).copied().unwrap_or(0),
                transactions: match &txn_covered {
                    Some(covered) => covered.get(&partition.0).copied().unwrap_or(0),
                    None => i64::MAX, // nothing transactional in this log
                },
            };
            let mut offset = from.producers.min(from.transactions).max(info.log_start_offset);
            while offset < info.high_watermark {
                let bytes = self
                    .log
                    .read(partition, offset, 1 << 20)
                    .await
                    .map_err(|e| format!("replaying producer state: {e:?}"))?;
                if bytes.is_empty() {
                    break;
                }
                offset = self.replay_batches(partition, &bytes, from, &mut replayed)?;
            }
        }
        self.transactions_ready();
        // From here on a start-up replays only what follows this snapshot.
        self.snapshot_transactions();
        let count = self.producers.borrow().len();
        if count > 0 || replayed > 0 {
            info!(
                shard = self.id,
                producers = count,
                replayed_batches = replayed,
                "producer state rebuilt"
            );
        }
        Ok(())
    }

    /// A producer id found in a partition snapshot this replica installed
    /// (`crate::partition_snapshots`): if this shard handed it out, it did so before its
    /// data dir was lost (the counter restarted at 0), so it never hands it out again: a
    /// new producer with that id would meet the old one's sequence state.
    pub(crate) fn skip_past_producer_id(&self, producer_id: i64) {
        let Some(counter) = counter_of(self.config.node_id, self.id, producer_id) else {
            return;
        };
        if counter >= self.pid_next.get() {
            // At or past the reservation, the next InitProducerId reserves a block first.
            self.pid_next.set(counter + 1);
        }
    }

    fn restore_pids(&self, reserved_until: u64) {
        // Ids of the last reserved block may have been handed out: start after it.
        self.pid_reserved.set(reserved_until);
        self.pid_next.set(reserved_until);
    }

    /// Records the idempotent batches in `bytes` (those at or after `from.producers`) and
    /// the transactional ones (at or after `from.transactions`); returns the offset after
    /// the last one.
    fn replay_batches(
        &self,
        partition: PartitionId,
        bytes: &[u8],
        from: Replay,
        replayed: &mut u64,
    ) -> Result<i64, String> {
        let mut at = 0;
        let mut next = 0;
        while at < bytes.len() {
            let header = RecordBatchHeader::parse_unvalidated(&bytes[at..])
                .map_err(|e| format!("replaying producer state: {e:?}"))?;
            let batch = &bytes[at..(at + header.total_bytes()).min(bytes.len())];
            let last_offset = header.base_offset + header.last_offset_delta as i64;
            if header.base_offset >= from.transactions {
                self.replay_txn_batch(partition, &header, batch)?;
            }
            if header.producer_id >= 0 && header.base_offset >= from.producers {
                let mut producers = self.producers.borrow_mut();
                if header.attributes & crate::txn::partition::CONTROL != 0 {
                    producers.note_marker(
                        partition,
                        header.producer_id,
                        header.producer_epoch,
                        wall_ms(),
                    );
                } else {
                    let sequence = BatchSequence::new(
                        header.producer_id,
                        header.producer_epoch,
                        header.base_sequence,
                        header.last_offset_delta,
                    );
                    producers.record(
                        partition,
                        sequence,
                        header.base_offset,
                        last_offset,
                        wall_ms(),
                    );
                }
                *replayed += 1;
            }
            next = last_offset + 1;
            at += header.total_bytes();
        }
        Ok(next)
    }

    /// The partitions this shard owns according to its table.
    pub fn local_partitions(&self) -> Vec<PartitionId> {
        let table = self.table();
        let mut out = Vec::new();
        for meta in table.topics.values() {
            out.extend(self.partitions_here(meta).map(|i| PartitionId::new(meta.topic_number, i)));
        }
        out
    }

    /// The snapshot's `covered` list: each partition's log end offset, from one pass over
    /// the log's own partition map (it used to walk the topic table and look each local
    /// partition up: docs/storage.md, "Checkpoints hold the executor"). The log's map holds
    /// this shard's partitions of the table (made known with `ensure_partition` when a
    /// topic or partition is created, forgotten with `drop_partition` when it is deleted).
    /// A partition the log knows and the table does not would only add an entry that
    /// `rebuild_producer_state` never looks up: topic numbers are not reused.
    pub fn producer_state_covered(&self) -> Vec<(u64, i64)> {
        self.log.log_end_offsets().into_iter().map(|(p, offset)| (p.0, offset)).collect()
    }

    /// Writes a snapshot of all producer state (with the checkpoint), and expires idle
    /// producers first.
    pub fn snapshot_producer_state(&self) {
        let expired =
            self.producers.borrow_mut().expire(wall_ms(), self.config.producer_id_expiration_ms);
        if expired > 0 {
            info!(shard = self.id, expired, "idle producers expired (producer.id.expiration.ms)");
        }
        let started = std::time::Instant::now();
        let entry = ProducerLogEntry::Snapshot {
            reserved_until: self.pid_reserved.get(),
            covered: self.producer_state_covered(),
            entries: self.producers.borrow().snapshot(),
        };
        let encoded = entry.encode();
        // It holds the executor, linear in the local partitions and the producers
        // (docs/storage.md, "Checkpoints hold the executor"): timed for that reason.
        tracing::debug!(
            shard = self.id,
            bytes = encoded.len(),
            us = started.elapsed().as_micros() as u64,
            "producer state snapshot encoded"
        );
        // Not waited for: everything it summarises is in the log before it.
        if let Err(e) = self.log.append_internal(InternalStream::ProducerState, true, &encoded) {
            warn!(shard = self.id, error = ?e, "writing a producer state snapshot");
        }
        self.snapshot_transactions();
    }
}

#[cfg(test)]
mod tests {
    use super::new_producer_id as producer_id;

    #[test]
    fn producer_ids_name_node_counter_and_shard_and_a_single_nodes_ids_are_unchanged() {
        // Node 0 (a single node): the ids of before clusters, counter above the shard.
        assert_eq!(producer_id(0, 3, 7), Some(7 << 10 | 3));
        // The same counter and shard on other nodes: other ids, never negative.
        let ids: Vec<i64> = [0, 1, 2, 2_097_151].map(|n| producer_id(n, 3, 7).unwrap()).into();
        for (i, a) in ids.iter().enumerate() {
            assert!(*a >= 0, "{a}");
            assert!(ids[i + 1..].iter().all(|b| b != a), "{ids:?}");
        }
        assert_eq!(producer_id(1, 0, 0), Some(1 << 42));
        // The largest counter fits; the next, or a node id past 21 bits, is refused.
        assert_eq!(producer_id(5, 1023, (1 << 32) - 1).map(|id| id >> 42), Some(5));
        assert_eq!(producer_id(5, 0, 1 << 32), None);
        assert_eq!(producer_id(2_097_152, 0, 0), None);
    }

    #[test]
    fn a_producer_ids_counter_is_found_only_for_the_node_and_shard_that_handed_it_out() {
        use super::counter_of;
        for (node, shard, counter) in [(0, 0, 0), (3, 7, 12_345), (2_097_151, 1023, (1 << 32) - 1)]
        {
            let id = producer_id(node, shard, counter).unwrap();
            assert_eq!(counter_of(node, shard, id), Some(counter));
            assert_eq!(counter_of(node + 1, shard, id), None, "another node's");
            assert_eq!(counter_of(node, (shard + 1) % 1024, id), None, "another shard's");
        }
        assert_eq!(counter_of(0, 0, -1), None, "no producer");
    }
}
