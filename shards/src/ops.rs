//! Partition operations: the produce and fetch hot paths, top to bottom.
//!
//! Runs on the shard that owns the partition. Produce: look up the partition, check the
//! size limit, split and validate the batches (CRC-32C, lengths, magic), queue them in the
//! shard log (offsets assigned, phase one), then wait for the fdatasync that covers them
//! (phase two). Fetch: read whole stored batches up to the high watermark; if fewer than
//! `min_bytes` are available, park until a flush moves a high watermark (or a replicated
//! partition's apply adds batches) or `max_wait_ms` passes.
//!
//! Hot path: allocates one `Vec` of batch handles per produced partition; batch bytes
//! are `Bytes` slices of the request frame until the log copies them into its DMA buffer.
//!
//! Durability contract: a produce is answered only after the fdatasync that covers it,
//! unless its topic has `write.caching=true` (then within the bounds of `write_caching`);
//! a fetch never returns data above the high watermark (durable data only).

use std::future::Future;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use shardlog_storage::{
    for_each_record, split_batches, with_log_append_time, AppendError, BatchError, Offset,
    PartitionId, PartitionInfo, ReadError, RecordBatchHeader, RecordsError, StorageError,
};
use tracing::error;

use crate::error::PartitionError;
use crate::message::{
    FetchedRecords, ListedOffset, PartitionData, PartitionRead, ProduceAck, ShardReply,
    ShardRequest,
};
use crate::metadata::TopicMeta;
use crate::producer::{BatchSequence, Check, SequenceError};
use crate::shard::Shard;
use crate::topic_config::ProducePolicy;
use crate::txn::partition::{BatchKind, CONTROL, TRANSACTIONAL};

/// What a produce returns after phase one: the wait for durability.
pub type ProduceWait = std::pin::Pin<Box<dyn Future<Output = Result<ProduceAck, PartitionError>>>>;

impl Shard {
    /// Produce to a partition on whichever shard owns it. Phase one (validation and
    /// queueing, or enqueueing the forward) is done when this returns. `transactional_id`:
    /// the request's (Produce v3+), for transactional batches.
    pub async fn produce(
        self: &Rc<Self>,
        topic: &str,
        partition: i32,
        records: Bytes,
        acks: i16,
        transactional_id: Option<&str>,
    ) -> ProduceWait {
        if acks == -1 {
            if let Err(e) = self.check_min_insync(topic, partition) {
                return Box::pin(async { Err(e) });
            }
        }
        match self.owner_of(topic, partition) {
            Err(e) => Box::pin(async { Err(e) }),
            Ok(owner) if owner == self.id => {
                self.produce_local(topic, partition, records, acks, transactional_id)
            }
            Ok(owner) => {
                self.count_forward();
                let request = ShardRequest::Produce {
                    topic: topic.to_string(),
                    partition,
                    records,
                    acks,
                    transactional_id: transactional_id.map(str::to_string),
                };
                let pending = self.mesh.send(owner, request).await;
                Box::pin(async move {
                    match pending.wait().await {
                        ShardReply::Produce(result) => result,
                        other => panic!("produce answered with {other:?}"),
                    }
                })
            }
        }
    }

    /// Phase one on the owner: validate and queue; the returned future waits for fdatasync.
    /// A transaction's first batch here waits for its coordinator's word first (KIP-890,
    /// `txn::verify`), and the produces behind it wait in line. `acks` (1 or -1; 0 is
    /// answered as 1 and the answer dropped) matters on replicated partitions only
    /// (`crate::leader_acks`).
    pub fn produce_local(
        self: &Rc<Self>,
        topic: &str,
        partition: i32,
        records: Bytes,
        acks: i16,
        transactional_id: Option<&str>,
    ) -> ProduceWait {
        if let Some(group) = self.partition_group_of(topic, partition) {
            // Before any verification: a follower answers at once, not after asking the
            // transaction's coordinator (which may be on another node: `txn::remote`).
            if let Err(e) = self.leading(group) {
                return Box::pin(async { Err(e) });
            }
        }
        if let Some(deferred) =
            self.defer_until_txn_verified(topic, partition, &records, transactional_id)
        {
            return deferred;
        }
        self.produce_verified(topic, partition, records, acks)
    }

    /// Phase one of a produce that needs no (more) transaction verification: queued here,
    /// or proposed in its partition group for a replicated partition.
    pub(crate) fn produce_verified(
        self: &Rc<Self>,
        topic: &str,
        partition: i32,
        records: Bytes,
        acks: i16,
    ) -> ProduceWait {
        if let Some(group) = self.partition_group_of(topic, partition) {
            return self.produce_replicated(group, topic, partition, records, acks);
        }
        let queued = self.queue_append(topic, partition, records);
        let shard = self.clone();
        Box::pin(async move { shard.acknowledge(queued?).await })
    }

    /// Phase two of a produce: waits for what its append's acknowledgement needs.
    pub(crate) async fn acknowledge(
        &self,
        mut appended: Queued,
    ) -> Result<ProduceAck, PartitionError> {
        match std::mem::replace(&mut appended.wait, Wait::Nothing) {
            Wait::Durable(durable) => {
                if let Err(e) = durable.wait().await {
                    self.fatal_storage_error(&e);
                }
            }
            // write.caching=true within its bounds: acknowledged before fdatasync.
            Wait::Nothing => {}
            Wait::HighWatermarkPast(partition_id, last_offset) => loop {
                let flushed = self.log.flushed();
                let info = self.log.partition_info(partition_id);
                if info.is_none_or(|i| i.high_watermark > last_offset) {
                    break;
                }
                flushed.await;
            },
        }
        Ok(self.answer_of(&appended))
    }

    /// The answer to a produce whose append is `appended`, whatever it waited for.
    pub(crate) fn answer_of(&self, appended: &Queued) -> ProduceAck {
        let log_start_offset =
            self.log.partition_info(appended.partition_id).map_or(0, |info| info.log_start_offset);
        ProduceAck {
            base_offset: appended.base_offset,
            log_start_offset,
            log_append_time_ms: appended.log_append_time_ms,
        }
    }

    fn queue_append(
        &self,
        topic: &str,
        partition: i32,
        records: Bytes,
    ) -> Result<Queued, PartitionError> {
        let table = self.table();
        let meta = table.topic(topic).ok_or(PartitionError::UnknownTopicOrPartition)?;
        let partition_id =
            meta.partition_id(partition).ok_or(PartitionError::UnknownTopicOrPartition)?;
        assert_eq!(meta.owner(partition), Some(self.id), "queue_append on a non-owner shard");
        let policy = ProducePolicy::of(meta, self.config.max_message_bytes);
        let batches = validate_batches(topic, partition, &policy, &records)?;
        let log_append_time_ms = match policy.log_append_time {
            true => crate::producer_log::wall_ms(),
            false => -1,
        };
        self.append_produced(meta, partition_id, &policy, batches, log_append_time_ms, None)
    }

    /// The append of validated batches of one produce: the idempotence checks, the
    /// LogAppendTime stamp (`log_append_time_ms`, or -1), the append and the producer
    /// state. `applying`: (group, raft index, the entry's term as a leader epoch) of a
    /// replicated partition's committed entry, whose applying marker goes on the log right
    /// before the batches
    /// (`replication::partition` invariant 3); its ack waits for the fdatasync whatever
    /// write.caching says.
    pub(crate) fn append_produced(
        &self,
        meta: &TopicMeta,
        partition_id: PartitionId,
        policy: &ProducePolicy,
        mut batches: Vec<(RecordBatchHeader, Bytes)>,
        log_append_time_ms: i64,
        applying: Option<(u64, u64, i32)>,
    ) -> Result<Queued, PartitionError> {
        let sequences = match self.check_sequences(partition_id, &batches)? {
            Sequencing::Duplicate { base_offset, last_offset } => {
                // Already written: answer with the original offsets once they are durable.
                return Ok(Queued {
                    partition_id,
                    base_offset,
                    log_append_time_ms: -1,
                    wait: Wait::HighWatermarkPast(partition_id, last_offset),
                });
            }
            Sequencing::NotIdempotent => Vec::new(),
            Sequencing::Append(sequences) => sequences,
        };
        if log_append_time_ms >= 0 {
            stamp_log_append_time(&mut batches, log_append_time_ms);
        }
        let transactional = batches[0].0.attributes & TRANSACTIONAL != 0;
        if transactional {
            self.ensure_txn_stream();
        }
        // The partition leader epoch stamped on the batches (KIP-320): the applied entry's
        // term, or 0 for a partition of one replica (a leader that never moved).
        let mut partition_leader_epoch = 0;
        if let Some((group, index, term_epoch)) = applying {
            self.append_applying_marker(group, index, partition_id)?;
            partition_leader_epoch = term_epoch;
        }
        let appended = self
            .log
            .append_batches_in_epoch(partition_id, Some(partition_leader_epoch), &batches)
            .map_err(append_error)?;
        if transactional {
            // A transaction's first batch here holds the last stable offset from now on.
            let mut partitions = self.txn.partitions.borrow_mut();
            let state = partitions.entry(partition_id).or_default();
            let producer_id = batches[0].0.producer_id;
            state.on_appended(BatchKind::Transactional, producer_id, appended.base_offset, false);
        }
        if !sequences.is_empty() {
            // Invariant 2 of `producer`: recorded only once queued. The time is this
            // node's clock (producer expiry: not replicated, docs/replication.md).
            let mut producers = self.producers.borrow_mut();
            let mut base = appended.base_offset;
            let now_ms = crate::producer_log::wall_ms();
            for ((header, _), sequence) in batches.iter().zip(sequences) {
                let last = base + header.last_offset_delta as i64;
                producers.record(partition_id, sequence, base, last, now_ms);
                base = last + 1;
            }
        }
        let bytes: usize = batches.iter().map(|(_, b)| b.len()).sum();
        self.probes.produce_batches.set(self.probes.produce_batches.get() + batches.len() as u64);
        self.probes.produce_bytes.set(self.probes.produce_bytes.get() + bytes as u64);
        self.count_produce(meta.topic_number, batches.len(), bytes);
        let write_caching = if applying.is_some() { None } else { policy.write_caching };
        let wait = match write_caching {
            None => Wait::Durable(appended.durable),
            Some(bounds) => {
                let records = batches.iter().map(|(h, _)| h.records_count as u64).sum();
                let mut unsynced = self.unsynced_acks.borrow_mut();
                match unsynced.try_ack(appended.durable, records, bounds, Instant::now()) {
                    Ok(()) => Wait::Nothing,
                    Err(durable) => Wait::Durable(durable),
                }
            }
        };
        Ok(Queued { partition_id, base_offset: appended.base_offset, log_append_time_ms, wait })
    }

    /// Idempotence checks of the batches of one produce (all from one producer).
    fn check_sequences(
        &self,
        partition: PartitionId,
        batches: &[(RecordBatchHeader, Bytes)],
    ) -> Result<Sequencing, PartitionError> {
        if batches.iter().any(|(h, _)| h.attributes & CONTROL != 0) {
            let why = "control batches are written by the transaction coordinator only";
            return Err(PartitionError::InvalidRecord(why.to_string()));
        }
        if batches.iter().all(|(h, _)| h.producer_id < 0 && h.attributes & TRANSACTIONAL == 0) {
            return Ok(Sequencing::NotIdempotent);
        }
        let first = &batches[0].0;
        if batches.iter().any(|(h, _)| {
            h.producer_id != first.producer_id
                || h.producer_epoch != first.producer_epoch
                || (h.attributes ^ first.attributes) & TRANSACTIONAL != 0
        }) {
            let why = "batches of one partition come from different producers or transactions";
            return Err(PartitionError::InvalidRecord(why.to_string()));
        }
        if first.producer_id < 0 {
            let why = "a transactional batch without a producer id";
            return Err(PartitionError::InvalidRecord(why.to_string()));
        }
        let sequences: Vec<BatchSequence> = batches
            .iter()
            .map(|(h, _)| {
                BatchSequence::new(
                    h.producer_id,
                    h.producer_epoch,
                    h.base_sequence,
                    h.last_offset_delta,
                )
            })
            .collect();
        let check =
            self.producers.borrow().check(partition, sequences[0]).map_err(sequence_error)?;
        match check {
            Check::Duplicate { base_offset, last_offset } if sequences.len() == 1 => {
                Ok(Sequencing::Duplicate { base_offset, last_offset })
            }
            Check::Duplicate { .. } => Err(PartitionError::OutOfOrderSequence),
            Check::Append => {
                let chained = sequences.windows(2).all(|w| {
                    w[1].first_sequence
                        == if w[0].last_sequence == i32::MAX { 0 } else { w[0].last_sequence + 1 }
                });
                if chained {
                    Ok(Sequencing::Append(sequences))
                } else {
                    Err(PartitionError::OutOfOrderSequence)
                }
            }
        }
    }

    /// A failed fdatasync or EIO: the shard cannot keep what it acknowledged. Stop the
    /// broker rather than answer (ARCHITECTURE: a failed fsync is never retried).
    pub fn fatal_storage_error(&self, error: &StorageError) -> ! {
        error!(shard = self.id, %error, "fatal storage error: stopping the broker");
        crate::runtime::exit_process(crate::runtime::SHARD_STOPPED_EXIT_CODE);
    }

    /// Fetch partitions owned by this shard, long-polling until `min_bytes` are available
    /// or `max_wait` passes.
    pub async fn fetch_local(
        &self,
        reads: &[PartitionRead],
        max_wait: Duration,
        min_bytes: usize,
        max_bytes: usize,
    ) -> Vec<PartitionData> {
        let deadline = Instant::now() + max_wait;
        loop {
            // Registered before reading so a flush, or a replicated partition's apply
            // (read before its flush), that lands during the reads wakes us.
            let more = self.log.more_to_read();
            let results = self.read_partitions(reads, max_bytes).await;
            let total: usize =
                results.iter().map(|d| d.result.as_ref().map_or(0, |r| r.records.len())).sum();
            let any_error = results.iter().any(|d| d.result.is_err());
            let now = Instant::now();
            if total >= min_bytes.max(1) || any_error || now >= deadline {
                self.probes.fetch_bytes.set(self.probes.fetch_bytes.get() + total as u64);
                self.count_fetches(&results);
                return results;
            }
            let timeout = async {
                glommio::timer::sleep(deadline - now).await;
                false
            };
            let woken = futures_lite::future::or(
                async {
                    more.await;
                    true
                },
                timeout,
            )
            .await;
            if woken {
                let wake_us = self.log.last_flush_done().elapsed().as_micros() as u64;
                self.probes.fetch_wake_us.borrow_mut().record(wake_us);
            }
        }
    }

    async fn read_partitions(
        &self,
        reads: &[PartitionRead],
        max_bytes: usize,
    ) -> Vec<PartitionData> {
        let mut remaining = max_bytes;
        let mut out = Vec::with_capacity(reads.len());
        for read in reads {
            let result = self.read_partition(read, remaining).await;
            if let Ok(records) = &result {
                remaining = remaining.saturating_sub(records.records.len());
            }
            out.push(PartitionData {
                topic: read.topic.clone(),
                partition: read.partition,
                result,
            });
        }
        out
    }

    /// A partition this shard serves to Fetch and ListOffsets (`Readable`), once the
    /// request's `current_leader_epoch` passed `check_leader_epoch`; its group is looked
    /// up once for both.
    fn readable_partition(
        &self,
        topic: &str,
        partition: i32,
        current_leader_epoch: i32,
    ) -> Result<Readable, PartitionError> {
        let group = self.partition_group_of(topic, partition);
        let leader_epoch = self.check_group_leader_epoch(group, current_leader_epoch)?;
        let partition_id = self
            .local_partition(topic, partition)
            .ok_or(PartitionError::UnknownTopicOrPartition)?;
        let mut info =
            self.log.partition_info(partition_id).ok_or(PartitionError::UnknownTopicOrPartition)?;
        let replicated = group.is_some();
        if replicated {
            info.high_watermark = info.log_end_offset;
        }
        Ok(Readable { partition_id, info, leader_epoch, replicated })
    }

    async fn read_partition(
        &self,
        read: &PartitionRead,
        remaining: usize,
    ) -> Result<FetchedRecords, PartitionError> {
        let Readable { partition_id, info, replicated, .. } =
            self.readable_partition(&read.topic, read.partition, read.current_leader_epoch)?;
        let limit = read.partition_max_bytes.min(remaining);
        let last_stable_offset = self.last_stable_offset(partition_id, &info);
        let end = if read.read_committed { last_stable_offset } else { info.high_watermark };
        let at_end = read.fetch_offset >= end && read.fetch_offset <= info.high_watermark;
        let from = read.fetch_offset;
        let records = match (limit == 0 || at_end, replicated) {
            (true, _) => Ok(Bytes::new()),
            (false, true) => self.log.read_below_unflushed(partition_id, from, limit, end).await,
            (false, false) => self.log.read_below(partition_id, from, limit, end).await,
        }
        .map_err(read_error)?;
        let aborted_transactions = match self.txn.partitions.borrow().get(&partition_id) {
            Some(state) if read.read_committed => state.aborted_between(read.fetch_offset, end),
            _ => Vec::new(),
        };
        Ok(FetchedRecords {
            high_watermark: info.high_watermark,
            last_stable_offset,
            log_start_offset: info.log_start_offset,
            aborted_transactions,
            records,
        })
    }

    /// The last stable offset of a partition this shard owns (`info` its figures): the
    /// high watermark unless a transaction is open (see `txn::partition`), and never below
    /// the log start (as Kafka clamps its first unstable offset): DeleteRecords or retention
    /// may move the log start past an open transaction's first offset, and an offset
    /// below the log start is out of range for a consumer.
    pub fn last_stable_offset(&self, partition: PartitionId, info: &PartitionInfo) -> Offset {
        let high_watermark = info.high_watermark;
        let lso = match self.txn.partitions.borrow_mut().get_mut(&partition) {
            Some(state) => state.last_stable_offset(high_watermark),
            None => high_watermark,
        };
        lso.max(info.log_start_offset)
    }

    /// ListOffsets on the owner: -1 latest (high watermark, or the last stable offset for
    /// read_committed), -2 earliest, else by time; each with the leader epoch of its batch
    /// (KIP-320: the latest is in the current epoch, as Kafka answers).
    pub async fn list_offsets_local(
        &self,
        topic: &str,
        partition: i32,
        timestamp_ms: i64,
        read_committed: bool,
        current_leader_epoch: i32,
    ) -> Result<ListedOffset, PartitionError> {
        let Readable { partition_id, info, leader_epoch: current_epoch, .. } =
            self.readable_partition(topic, partition, current_leader_epoch)?;
        let listed = |offset: Offset, timestamp: i64, leader_epoch: i32| ListedOffset {
            offset,
            timestamp,
            leader_epoch,
        };
        let of_batch = |found: Option<(Offset, i64)>| match found {
            None => listed(-1, -1, -1),
            Some((offset, timestamp)) => {
                let epoch = self.log.epoch_of_offset(partition_id, offset).unwrap_or(-1);
                listed(offset, timestamp, epoch)
            }
        };
        match timestamp_ms {
            -1 if read_committed => {
                Ok(listed(self.last_stable_offset(partition_id, &info), -1, current_epoch))
            }
            -1 => Ok(listed(info.high_watermark, -1, current_epoch)),
            // -4, the earliest local offset: nothing is tiered, so the earliest.
            -2 | -4 => {
                let epoch = self.log.epoch_of_offset(partition_id, info.log_start_offset);
                Ok(listed(info.log_start_offset, -1, epoch.unwrap_or(-1)))
            }
            // The latest tiered offset: nothing is tiered (Kafka answers so without
            // remote storage).
            -5 => Ok(listed(-1, -1, -1)),
            // The record with the largest timestamp: the first that carries it.
            -3 => match self.log.max_timestamp(partition_id) {
                None => Ok(listed(-1, -1, -1)),
                Some(max) => {
                    let found = self
                        .log
                        .offset_for_timestamp(partition_id, max)
                        .await
                        .map_err(read_error)?;
                    Ok(of_batch(found))
                }
            },
            t if t >= 0 => {
                let found =
                    self.log.offset_for_timestamp(partition_id, t).await.map_err(read_error)?;
                Ok(of_batch(found))
            }
            _ => Err(PartitionError::InvalidRecord(format!(
                "ListOffsets timestamp {timestamp_ms} is not supported"
            ))),
        }
    }

    /// ListOffsets on whichever shard owns the partition.
    pub async fn list_offsets(
        &self,
        topic: &str,
        partition: i32,
        timestamp_ms: i64,
        read_committed: bool,
        current_leader_epoch: i32,
    ) -> Result<ListedOffset, PartitionError> {
        match self.owner_of(topic, partition) {
            Err(e) => Err(e),
            Ok(owner) if owner == self.id => {
                self.list_offsets_local(
                    topic,
                    partition,
                    timestamp_ms,
                    read_committed,
                    current_leader_epoch,
                )
                .await
            }
            Ok(owner) => {
                self.count_forward();
                let topic = topic.to_string();
                let request = ShardRequest::ListOffsets {
                    topic,
                    partition,
                    timestamp_ms,
                    read_committed,
                    current_leader_epoch,
                };
                match self.mesh.call(owner, request).await {
                    ShardReply::ListOffsets(result) => result,
                    other => panic!("list offsets answered with {other:?}"),
                }
            }
        }
    }

    /// OffsetForLeaderEpoch on the owner (KIP-320): where `leader_epoch` ended in the
    /// partition, as (epoch, end offset) from its leader-epoch cache, once
    /// `current_leader_epoch` passed `check_leader_epoch`.
    pub fn offset_for_leader_epoch_local(
        &self,
        topic: &str,
        partition: i32,
        current_leader_epoch: i32,
        leader_epoch: i32,
    ) -> Result<(i32, Offset), PartitionError> {
        let current_epoch = self.check_leader_epoch(topic, partition, current_leader_epoch)?;
        let partition_id = self
            .local_partition(topic, partition)
            .ok_or(PartitionError::UnknownTopicOrPartition)?;
        self.log
            .end_offset_for_epoch(partition_id, leader_epoch, current_epoch)
            .ok_or(PartitionError::UnknownTopicOrPartition)
    }

    /// OffsetForLeaderEpoch on whichever shard owns the partition.
    pub async fn offset_for_leader_epoch(
        &self,
        topic: &str,
        partition: i32,
        current_leader_epoch: i32,
        leader_epoch: i32,
    ) -> Result<(i32, Offset), PartitionError> {
        match self.owner_of(topic, partition) {
            Err(e) => Err(e),
            Ok(owner) if owner == self.id => self.offset_for_leader_epoch_local(
                topic,
                partition,
                current_leader_epoch,
                leader_epoch,
            ),
            Ok(owner) => {
                self.count_forward();
                let topic = topic.to_string();
                let request = ShardRequest::OffsetForLeaderEpoch {
                    topic,
                    partition,
                    current_leader_epoch,
                    leader_epoch,
                };
                match self.mesh.call(owner, request).await {
                    ShardReply::OffsetForLeaderEpoch(result) => result,
                    other => panic!("offset for leader epoch answered with {other:?}"),
                }
            }
        }
    }

    pub(crate) fn count_forward(&self) {
        self.probes.forwarded_requests.set(self.probes.forwarded_requests.get() + 1);
    }
}

pub(crate) struct Queued {
    partition_id: PartitionId,
    base_offset: Offset,
    /// The append time stamped on the batches (LogAppendTime topics), else -1.
    log_append_time_ms: i64,
    wait: Wait,
}

impl Queued {
    /// An acks=1 produce on a replicated partition answered before its apply, at the
    /// offset its apply will give it (`crate::leader_acks`).
    pub(crate) fn predicted(
        partition_id: PartitionId,
        base_offset: Offset,
        log_append_time_ms: i64,
    ) -> Queued {
        Queued { partition_id, base_offset, log_append_time_ms, wait: Wait::Nothing }
    }

    pub(crate) fn base_offset(&self) -> Offset {
        self.base_offset
    }

    /// A transaction marker appended by a replica's apply (`partition_group`): its
    /// offset, and the fdatasync that covers it.
    pub(crate) fn marker(
        partition_id: PartitionId,
        base_offset: Offset,
        durable: shardlog_storage::Durable,
    ) -> Queued {
        Queued { partition_id, base_offset, log_append_time_ms: -1, wait: Wait::Durable(durable) }
    }
}

/// What phase two of a produce waits for.
pub(crate) enum Wait {
    /// The fdatasync that covers the appended batches.
    Durable(shardlog_storage::Durable),
    /// A duplicate of a batch already queued: until that batch is durable.
    HighWatermarkPast(PartitionId, Offset),
    /// Nothing: a relaxed ack (write.caching=true, within flush.ms / flush.messages).
    Nothing,
}

/// Splits and checks the batches of one produce against the topic's policy (lengths,
/// CRC, magic, max.message.bytes, keys of a compacted topic); nothing is written.
pub(crate) fn validate_batches(
    topic: &str,
    partition: i32,
    policy: &ProducePolicy,
    records: &Bytes,
) -> Result<Vec<(RecordBatchHeader, Bytes)>, PartitionError> {
    let batches = split_batches(records).map_err(batch_error)?;
    // max.message.bytes bounds each record batch, as in Kafka.
    let max = policy.max_batch_bytes;
    if let Some(size) = batches.iter().map(|(_, b)| b.len()).find(|len| *len > max) {
        return Err(PartitionError::MessageTooLarge { size, max });
    }
    if policy.keys_required {
        check_keys(topic, partition, &batches)?;
    }
    Ok(batches)
}

/// Stamps each batch with the append time (message.timestamp.type=LogAppendTime); the
/// copy is the price of that topic setting, CreateTime batches are stored as sent.
fn stamp_log_append_time(batches: &mut [(RecordBatchHeader, Bytes)], now_ms: i64) {
    for (header, bytes) in batches.iter_mut() {
        *bytes = with_log_append_time(bytes, now_ms);
        *header = RecordBatchHeader::parse_unvalidated(bytes).expect("a validated batch");
    }
}

/// cleanup.policy=compact: every record needs a key, since cleaning keeps the latest value
/// per key (Kafka's LogValidator). A produce with any keyless record is refused whole,
/// naming each keyless record's index (KIP-467); nothing is written.
fn check_keys(
    topic: &str,
    partition: i32,
    batches: &[(RecordBatchHeader, Bytes)],
) -> Result<(), PartitionError> {
    let mut keyless = Vec::new();
    let mut first_index = 0;
    for (header, bytes) in batches {
        let walked = for_each_record(bytes, |record| {
            if record.key.is_none() {
                keyless.push(first_index + record.index);
            }
        });
        match walked {
            Ok(()) => {}
            Err(RecordsError::Compressed(codec)) => {
                return Err(PartitionError::InvalidRecord(format!(
                    "compressed record batches (codec {codec}) are not accepted by compacted \
                     topics yet (cleanup.policy=compact): produce to {topic} uncompressed"
                )))
            }
            Err(RecordsError::Malformed { index }) => {
                return Err(PartitionError::CorruptMessage(format!(
                    "record {} of the produced batches is malformed",
                    first_index + index
                )))
            }
        }
        first_index += header.records_count;
    }
    if keyless.is_empty() {
        return Ok(());
    }
    Err(PartitionError::InvalidRecords {
        message: format!(
            "Compacted topic cannot accept message without key in topic partition \
             {topic}-{partition}."
        ),
        record_indexes: keyless,
    })
}

/// The outcome of the idempotence checks.
enum Sequencing {
    NotIdempotent,
    Append(Vec<BatchSequence>),
    Duplicate { base_offset: Offset, last_offset: Offset },
}

fn sequence_error(error: SequenceError) -> PartitionError {
    match error {
        SequenceError::OutOfOrder => PartitionError::OutOfOrderSequence,
        SequenceError::InvalidEpoch => PartitionError::InvalidProducerEpoch,
        SequenceError::UnknownProducerId => PartitionError::UnknownProducerId,
    }
}

fn batch_error(error: BatchError) -> PartitionError {
    match error {
        BatchError::CrcMismatch { .. }
        | BatchError::TooShort { .. }
        | BatchError::LengthMismatch { .. } => PartitionError::CorruptMessage(format!("{error:?}")),
        BatchError::UnsupportedMagic(_) => PartitionError::UnsupportedForMessageFormat,
        BatchError::BadRecordCount { .. } => PartitionError::InvalidRecord(format!("{error:?}")),
    }
}

pub(crate) fn append_error(error: AppendError) -> PartitionError {
    match error {
        AppendError::InvalidBatch(e) => batch_error(e),
        AppendError::TooLarge { size, max } => PartitionError::MessageTooLarge { size, max },
        AppendError::UnknownPartition(_) => PartitionError::UnknownTopicOrPartition,
        AppendError::Storage(e) => PartitionError::Storage(e.to_string()),
        AppendError::NotAtEnd { base_offset, next_offset } => PartitionError::Storage(format!(
            "a copied batch at {base_offset} does not start at the next offset {next_offset}"
        )),
    }
}

/// A partition as Fetch and ListOffsets serve it (`Shard::readable_partition`).
struct Readable {
    partition_id: PartitionId,
    /// Its figures, with the high watermark consumers are answered and read up to: of a
    /// replicated partition its log end, of any other its durable end. A replicated
    /// partition appends only committed entries, as they are applied (durable on a
    /// majority's raft logs, and applied again at the same offsets after a crash), and its
    /// produces are answered once applied, so a read right after an acks=all answer sees
    /// the record, as Kafka's leader (which answers once its high watermark passed it)
    /// does; its batches not yet durable here are read from the tail cache
    /// (`ShardLog::read_below_unflushed`; docs/replication.md, "Read after ack").
    info: PartitionInfo,
    /// Its leader epoch on this replica (`check_leader_epoch`).
    leader_epoch: i32,
    replicated: bool,
}

fn read_error(error: ReadError) -> PartitionError {
    match error {
        ReadError::UnknownPartition(_) => PartitionError::UnknownTopicOrPartition,
        ReadError::OffsetOutOfRange { .. } => PartitionError::OffsetOutOfRange,
        ReadError::Storage(e) => PartitionError::Storage(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardlog_benches::load::record_batch::RecordBatchWriter;

    fn batches(groups: &[&[Option<&[u8]>]]) -> Vec<(RecordBatchHeader, Bytes)> {
        let mut out = Vec::new();
        for keys in groups {
            let mut writer = RecordBatchWriter::new(&mut out, 1_000);
            for key in *keys {
                writer.push(*key, b"value");
            }
            writer.finish();
        }
        split_batches(&Bytes::from(out)).unwrap()
    }

    #[test]
    fn keyless_records_are_named_by_their_index_across_the_produced_batches() {
        let keyed = batches(&[&[Some(b"a"), Some(b"b")], &[Some(b"c")]]);
        assert_eq!(check_keys("t", 0, &keyed), Ok(()));
        let mixed = batches(&[&[Some(b"a"), None], &[None, Some(b"d"), None]]);
        match check_keys("t", 3, &mixed) {
            Err(PartitionError::InvalidRecords { message, record_indexes }) => {
                assert_eq!(record_indexes, vec![1, 2, 4]);
                assert!(message.contains("t-3"), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_compressed_batch_to_a_compacted_topic_is_refused_with_a_reason() {
        let mut out = Vec::new();
        let mut writer = RecordBatchWriter::new(&mut out, 1_000);
        writer.push(Some(b"k"), b"v");
        writer.finish();
        out[22] |= 2; // snappy: the records are then not readable here
        let crc = crc32c::crc32c(&out[21..]);
        out[17..21].copy_from_slice(&crc.to_be_bytes());
        let compressed = split_batches(&Bytes::from(out)).unwrap();
        match check_keys("t", 0, &compressed) {
            Err(PartitionError::InvalidRecord(why)) => assert!(why.contains("compressed"), "{why}"),
            other => panic!("{other:?}"),
        }
    }
}
