//! Power loss around a partition snapshot's install (invariant 2): a follower shard over a
//! `SimDisk` pulls a leader's partitions from a simulated leader (`SimLeader`, a
//! `PullSource`), installs the manifest, and steps the `MsgSnapshot` into a raft group
//! whose writes go to the same shard log, as the broker's sink makes them. The disk is
//! imaged as a power loss would leave it at two moments, and each image is recovered:
//! - at the step: every record the install claims (each partition from the manifest's
//!   log start to its end, byte-identical) and the log starts must be there;
//! - once the follower's acknowledgement of the snapshot is released (raft-rs's
//!   `MsgAppendResponse` at the snapshot's index, after the raft write is durable): also
//!   the producers' state, the marker of A and the raft snapshot. Raft counts this
//!   replica as holding the entries up to the snapshot from then on.
//!
//! Seeded: partitions, batch sizes, the leader's log start (at 0, at a batch, inside one,
//! past what the follower holds), a prefix the follower holds already, the disk's yields
//! and slow fdatasyncs, and which unsynced writes a power loss keeps, loses or tears.
//! `SHARDLOG_SEED=N` replays one seed; `SHARDLOG_PARTITION_SNAPSHOT_SEEDS` sets how many.

use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use raft::eraftpb::{MessageType, Snapshot};
use shardlog_benches::load::record_batch::{ProducerFields, RecordBatchWriter};
use shardlog_storage::{AnyDisk, InternalEntry, LogConfig, Offset, RecordBatchHeader};
use shardlog_storage::{ShardLog, SimDisk, SimImage, XorShift};

use super::{pull_all, PartitionSnapshots, PullSource};
use crate::producer::{BatchMeta, ProducerEntry};
use crate::producer_log::wall_ms;
use crate::replication::partition_snapshot::{PartitionManifest, SnapshotManifest};
use crate::replication::persist::{self, ShardLogSink};
use crate::replication::pull::PullResponse;
use crate::replication::snapshot_transfer::{PullRange, SnapshotTransfer};
use crate::replication::{raft_id, GroupConfig, GroupSink, LogImage, Message, RaftGroup, Written};
use crate::runtime::run_shards;
use crate::{Mesh, NewTopic, Shard, ShardConfig, TopicMeta};

/// The group, the follower (node 0) and the leader that sends the snapshot (node 1).
const GROUP: u64 = 0x5eed;
const FOLLOWER: u64 = 0;
const LEADER: u64 = 1;
const VOTERS: [u64; 3] = [1, 2, 3];
/// The snapshot's raft point i and the manifest's applied index A >= i.
const SNAPSHOT_INDEX: u64 = 40;
const SNAPSHOT_TERM: u64 = 2;
const APPLIED_INDEX: u64 = 47;
/// Small pulls, so a transfer takes many writes.
const PULL_MAX_BYTES: usize = 6 << 10;

fn log_config() -> LogConfig {
    LogConfig {
        segment_size_bytes: 256 << 10,
        tail_cache_bytes: 16 << 10,
        max_batch_bytes: 64 << 10,
        blocking_flush_max_bytes: 0,
        ..LogConfig::default()
    }
}

/// One batch of the leader's partition: its first and last offsets and its bytes.
#[derive(Clone)]
struct LeaderBatch {
    base_offset: Offset,
    last_offset: Offset,
    bytes: Bytes,
}

/// A leader's partition: its log start and its whole batches from offset 0.
#[derive(Clone)]
struct LeaderPartition {
    log_start_offset: Offset,
    batches: Vec<LeaderBatch>,
    producers: Vec<(i64, ProducerEntry)>,
    /// How many of the first batches the follower holds before the snapshot arrives.
    follower_holds: usize,
}

impl LeaderPartition {
    fn next_offset(&self) -> Offset {
        self.batches.last().map_or(0, |b| b.last_offset + 1)
    }

    /// The batches a fetch from the log start returns (the one holding it kept whole).
    fn read_from_log_start(&self) -> Vec<u8> {
        let kept = self.batches.iter().filter(|b| b.last_offset >= self.log_start_offset);
        kept.flat_map(|b| b.bytes.iter().copied()).collect()
    }
}

/// The leader's side of the pulls, as `Shard::serve_pull` answers them: whole batches
/// from the request's `from` (or the log start, past it), none starting at or past `to`.
struct SimLeader {
    topic_id: [u8; 16],
    partitions: Vec<LeaderPartition>,
}

impl PullSource for SimLeader {
    async fn pull(&self, sender: u64, range: PullRange) -> Result<PullResponse, String> {
        assert_eq!(sender, LEADER, "a pull sent to a node that sent no snapshot");
        let leader = &self.partitions[range.partition as usize];
        let from = range.from.max(leader.log_start_offset);
        let mut batches = Vec::new();
        let wanted = leader.batches.iter().filter(|b| b.last_offset >= from);
        for batch in wanted.take_while(|b| b.base_offset < range.to) {
            if !batches.is_empty() && batches.len() + batch.bytes.len() > PULL_MAX_BYTES {
                break;
            }
            batches.extend_from_slice(&batch.bytes);
        }
        Ok(PullResponse {
            group: GROUP,
            topic_id: self.topic_id,
            partition: range.partition,
            from: range.from,
            log_start_offset: leader.log_start_offset,
            refusal: None,
            batches: Bytes::from(batches),
        })
    }
}

/// A leader's partition of 2-12 batches of 1-5 records from two idempotent producers,
/// its log start anywhere up to its end, and the follower holding a prefix of it or not.
fn leader_partition(rng: &mut XorShift, partition: i64) -> LeaderPartition {
    let mut batches = Vec::new();
    let mut sequences = [0i32; 2];
    let mut metas: [Vec<BatchMeta>; 2] = [Vec::new(), Vec::new()];
    let mut next_offset: Offset = 0;
    for _ in 0..2 + rng.below(11) {
        let which = rng.below(2) as usize;
        let producer_id = 1000 + 2 * partition + which as i64;
        let base_sequence = sequences[which];
        let producer = ProducerFields { producer_id, producer_epoch: 0, base_sequence };
        let mut bytes = Vec::new();
        let mut writer = RecordBatchWriter::with_producer(&mut bytes, 1_700_000_000_000, producer);
        let records = 1 + rng.below(5) as i64;
        for r in 0..records {
            let value = vec![b'a' + (r % 26) as u8; 10 + rng.below(2_000) as usize];
            writer.push(None, &value);
        }
        writer.finish();
        // Offsets are outside the batch's CRC: the leader's are written over the zeros.
        bytes[..8].copy_from_slice(&next_offset.to_be_bytes());
        let last_offset = next_offset + records - 1;
        sequences[which] += records as i32;
        metas[which].push(BatchMeta {
            first_sequence: base_sequence,
            last_sequence: sequences[which] - 1,
            base_offset: next_offset,
            last_offset,
        });
        batches.push(LeaderBatch { base_offset: next_offset, last_offset, bytes: bytes.into() });
        next_offset = last_offset + 1;
    }
    let producers = (0..2)
        .filter(|&which| !metas[which].is_empty())
        .map(|which| {
            let recent = metas[which].len().saturating_sub(5);
            let entry = ProducerEntry {
                epoch: 0,
                batches: metas[which][recent..].to_vec(),
                last_append_ms: wall_ms(),
            };
            (1000 + 2 * partition + which as i64, entry)
        })
        .collect();
    let log_start_offset = match rng.below(3) {
        0 => 0,
        1 => batches[rng.below(batches.len() as u64) as usize].base_offset,
        _ => rng.below(next_offset as u64 + 1) as i64, // inside a batch, or at the end
    };
    let follower_holds = match rng.chance(1, 2) {
        true => rng.below(batches.len() as u64 + 1) as usize,
        false => 0,
    };
    LeaderPartition { log_start_offset, batches, producers, follower_holds }
}

/// What a seed's leader has, and the snapshot message it sends.
#[derive(Clone)]
struct Scenario {
    partitions: Vec<LeaderPartition>,
}

impl Scenario {
    fn new(seed: u64) -> Scenario {
        let mut rng = XorShift::new(seed);
        let count = 1 + rng.below(3) as i64;
        Scenario { partitions: (0..count).map(|p| leader_partition(&mut rng, p)).collect() }
    }

    fn manifest(&self, topic_id: [u8; 16]) -> SnapshotManifest {
        let partitions = self.partitions.iter().enumerate().map(|(p, leader)| PartitionManifest {
            topic_id,
            partition: p as i32,
            log_start_offset: leader.log_start_offset,
            next_offset: leader.next_offset(),
            producers: leader.producers.clone(),
            leader_epochs: Vec::new(),
            transactions: Default::default(),
        });
        let partitions = partitions.collect();
        SnapshotManifest {
            applied_index: APPLIED_INDEX,
            partitions,
            offsets_image: Bytes::new(),
            coordinator_image: Bytes::new(),
        }
    }

    /// The leader's `MsgSnapshot` to the follower, the manifest as its data.
    fn message(&self, manifest: &SnapshotManifest) -> Message {
        let data = manifest.encode().expect("a small manifest").into();
        let mut snapshot = Snapshot { data, ..Snapshot::default() };
        let metadata = snapshot.mut_metadata();
        (metadata.index, metadata.term) = (SNAPSHOT_INDEX, SNAPSHOT_TERM);
        metadata.mut_conf_state().voters = VOTERS.to_vec();
        let mut message = Message::default();
        message.set_msg_type(MessageType::MsgSnapshot);
        (message.from, message.to) = (raft_id(LEADER), raft_id(FOLLOWER));
        message.term = SNAPSHOT_TERM;
        message.set_snapshot(snapshot);
        message
    }
}

/// A shard on `disk` as the broker starts one: the topic table, the consumer groups and
/// the producers' state recovered from its log. Returns the log's internal entries too.
async fn start(builder: crate::ShardMeshBuilder, disk: SimDisk) -> (Rc<Shard>, Vec<InternalEntry>) {
    let (mesh, receivers) = Mesh::join(builder).await;
    let opened = ShardLog::open(AnyDisk::Sim(disk), log_config()).await;
    let (log, internal, _) = opened.expect("the shard log opens");
    let shard = Shard::new(log, mesh.clone(), ShardConfig::default());
    shard.groups.restore(&internal).expect("consumer groups recover");
    mesh.spawn_receivers(receivers, shard.clone());
    shard.start_controller(&internal).await.expect("the topic table recovers");
    shard.wait_for_table().await;
    shard.rebuild_producer_state(&internal).await.expect("the producers' state recovers");
    (shard, internal)
}

/// The disk as a power loss now would leave it; the disk itself goes on.
fn power_loss_now(disk: &SimDisk) -> SimImage {
    SimDisk::from_image(disk.image()).crash().image()
}

/// The two power-loss images of one seed: at the step, and once the acknowledgement of
/// the snapshot was released.
struct Images {
    at_step: SimImage,
    at_acknowledgement: SimImage,
}

/// The follower's side: topic, held prefix, transfer, install, step, raft write.
async fn follow(scenario: &Scenario, shard: &Rc<Shard>, disk: &SimDisk) -> Result<Images, String> {
    let topic = NewTopic {
        name: "t".into(),
        num_partitions: scenario.partitions.len() as i32,
        replication_factor: 1,
        configs: vec![],
    };
    shard.create_topics(vec![topic], false).await.remove(0).map_err(|e| format!("{e:?}"))?;
    let meta = shard.topic("t").expect("the topic just created");
    hold_prefixes(scenario, shard, &meta).await?;
    // As in the broker, the follower heard the leader's term before its snapshot (raft-rs
    // sends one in answer to a heartbeat's response or a refused append), so the group's
    // hard state is in the log before the install's marker: replay refuses a marker before
    // any write of its group.
    let config = GroupConfig::new(raft_id(FOLLOWER));
    let mut raft = RaftGroup::recover(&config, LogImage::new(&VOTERS), 0)?;
    let mut sink = ShardLogSink::new(shard.log.clone(), GROUP, Box::new(|_, _| {}));
    let mut heartbeat = Message::default();
    heartbeat.set_msg_type(MessageType::MsgHeartbeat);
    (heartbeat.from, heartbeat.to, heartbeat.term) =
        (raft_id(LEADER), raft_id(FOLLOWER), SNAPSHOT_TERM);
    raft.step(heartbeat).map_err(|e| format!("a heartbeat stepped: {e}"))?;
    write_durably(&mut raft, &mut sink).await?;

    let manifest = scenario.manifest(meta.topic_id);
    let message = scenario.message(&manifest);
    let local = |topic_id: &[u8; 16], partition| shard.held_of_partition(*topic_id, partition);
    let transfer = SnapshotTransfer::start(manifest, message, local).map_err(|e| e.to_string())?;
    let snapshots = PartitionSnapshots::new();
    snapshots.transfers.borrow_mut().insert(GROUP, (LEADER, transfer));
    let leader = SimLeader { topic_id: meta.topic_id, partitions: scenario.partitions.clone() };
    pull_all(shard, &snapshots, GROUP, &leader).await?;
    let (_, transfer) = snapshots.transfers.borrow_mut().remove(&GROUP).expect("its transfer");
    let (_, message, _) = shard.install_pulled(GROUP, transfer).await?;

    let at_step = power_loss_now(disk);
    raft.step(message).map_err(|e| format!("the snapshot stepped: {e}"))?;
    write_durably(&mut raft, &mut sink).await?;
    let acknowledged = raft.take_messages().iter().any(|m| {
        let ack = (m.get_msg_type(), m.to, m.index, m.reject);
        ack == (MessageType::MsgAppendResponse, raft_id(LEADER), SNAPSHOT_INDEX, false)
    });
    if !acknowledged {
        return Err("no acknowledgement of the snapshot once its write was durable".into());
    }
    Ok(Images { at_step, at_acknowledgement: disk.crash().image() })
}

/// What the follower held before the snapshot arrived: a prefix of each leader partition
/// (from an earlier life of its group), durable.
async fn hold_prefixes(scenario: &Scenario, shard: &Shard, meta: &TopicMeta) -> Result<(), String> {
    for (p, leader) in scenario.partitions.iter().enumerate() {
        let id = meta.partition_id(p as i32).expect("a partition of the topic");
        for batch in &leader.batches[..leader.follower_holds] {
            let header =
                RecordBatchHeader::parse_validated(&batch.bytes).map_err(|e| format!("{e:?}"))?;
            let appended = shard.log.append_at_offsets(id, &[(header, batch.bytes.clone())]);
            let durable = appended.map_err(|e| format!("the held prefix: {e:?}"))?.durable;
            durable.wait().await.map_err(|e| format!("{e:?}"))?;
        }
    }
    Ok(())
}

/// Appends the group's write requests as the broker's sink does, waits for their flush
/// and reports them durable: raft-rs's persisted messages are released then.
async fn write_durably(
    raft: &mut RaftGroup,
    sink: &mut ShardLogSink<AnyDisk>,
) -> Result<(), String> {
    let Written::OnFlush { number, durable } = sink.write(raft.take_writes()) else {
        return Err("the group's writes were not appended".into());
    };
    durable.wait().await.map_err(|e| format!("{e:?}"))?;
    raft.durable(number);
    Ok(())
}

/// What a shard recovered from an image holds of the scenario's topic.
struct Recovered {
    /// Per partition: log start, next offset, the bytes of a read from the log start.
    partitions: Vec<(Offset, Offset, Vec<u8>)>,
    producers: Vec<Vec<(i64, ProducerEntry)>>,
    /// The group's raft snapshot index and its last applying marker's index.
    snapshot_index: u64,
    marker_index: Option<u64>,
}

async fn recovered(builder: crate::ShardMeshBuilder, image: SimImage) -> Recovered {
    let (shard, internal) = start(builder, SimDisk::from_image(image)).await;
    let meta = shard.topic("t").expect("the topic survives: created before the transfer");
    let mut partitions = Vec::new();
    let mut producers = Vec::new();
    for p in 0..meta.partition_shards.len() as i32 {
        let id = meta.partition_id(p).expect("a partition of the topic");
        let info = shard.log.partition_info(id).expect("a partition of the topic");
        let (start, end) = (info.log_start_offset, info.log_end_offset);
        let bytes = match start < end {
            true => shard.log.read_below(id, start, 1 << 20, end).await.expect("a read").to_vec(),
            false => Vec::new(),
        };
        partitions.push((start, end, bytes));
        producers.push(shard.producers.borrow().of_partition(id));
    }
    let replayed = persist::replay_with_markers(&internal, |_| LogImage::new(&VOTERS))
        .expect("the raft stream replays");
    let snapshot_index = replayed.images.get(&GROUP).map_or(0, |image| image.snapshot_index);
    let marker_index = replayed.markers.get(&GROUP).map(|marker| marker.index);
    shard.log.close().await.expect("the log closes");
    Recovered { partitions, producers, snapshot_index, marker_index }
}

/// Invariant 2 at the step: what the install claims is durable. Once acknowledged: also
/// the producers, the marker of A and the snapshot.
fn check(scenario: &Scenario, found: &Recovered, acknowledged: bool) -> Result<(), String> {
    let moment = if acknowledged { "once the snapshot was acknowledged" } else { "at the step" };
    for (p, (leader, held)) in scenario.partitions.iter().zip(&found.partitions).enumerate() {
        let (start, end, bytes) = held;
        let claimed = (leader.log_start_offset, leader.next_offset());
        if (*start, *end) != claimed {
            return Err(format!(
                "a power loss {moment} left partition {p} at [{start}, {end}), the install \
                 claimed [{}, {})",
                claimed.0, claimed.1
            ));
        }
        if *bytes != leader.read_from_log_start() {
            return Err(format!("partition {p}'s records differ from the leader's ({moment})"));
        }
        if acknowledged && found.producers[p] != leader.producers {
            return Err(format!(
                "partition {p}'s producers after a power loss {moment}: {:?}, installed {:?}",
                found.producers[p], leader.producers
            ));
        }
    }
    if acknowledged && found.marker_index != Some(APPLIED_INDEX) {
        return Err(format!("the marker of A={APPLIED_INDEX} lost: {:?}", found.marker_index));
    }
    if acknowledged && found.snapshot_index != SNAPSHOT_INDEX {
        return Err(format!("the acknowledged snapshot lost: at {}", found.snapshot_index));
    }
    Ok(())
}

fn run_seed(seed: u64) -> Result<(), String> {
    let scenario = Scenario::new(seed);
    let images: Arc<Mutex<Option<Result<Images, String>>>> = Arc::default();
    let (out, follower) = (images.clone(), scenario.clone());
    run_shards(1, move |builder| async move {
        let mut rng = XorShift::new(seed ^ 0xd15c);
        let disk = SimDisk::new(rng.next_u64());
        disk.hang_after_crash();
        disk.set_max_yields(rng.below(4));
        if rng.chance(1, 3) {
            disk.set_max_sync_delay(Duration::from_micros(rng.below(2_000)));
        }
        let (shard, _) = start(builder, disk.clone()).await;
        *out.lock().unwrap() = Some(follow(&follower, &shard, &disk).await);
    })?;
    let images = images.lock().unwrap().take().expect("the follower ran")?;
    for (image, acknowledged) in [(images.at_step, false), (images.at_acknowledgement, true)] {
        let found: Arc<Mutex<Option<Recovered>>> = Arc::default();
        let (out, image) = (found.clone(), Mutex::new(Some(image)));
        let image = Arc::new(image);
        run_shards(1, move |builder| async move {
            let image = image.lock().unwrap().take().expect("one recovery per image");
            *out.lock().unwrap() = Some(recovered(builder, image).await);
        })?;
        let found = found.lock().unwrap().take().expect("the recovery ran");
        check(&scenario, &found, acknowledged)?;
    }
    Ok(())
}

#[test]
fn a_follower_that_acknowledged_a_partition_snapshot_keeps_it_across_a_power_loss() {
    let seeds: u64 = std::env::var("SHARDLOG_PARTITION_SNAPSHOT_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(40);
    let only = std::env::var("SHARDLOG_SEED").ok().and_then(|s| s.parse().ok());
    for seed in only.map_or(0..seeds, |seed: u64| seed..seed + 1) {
        if let Err(error) = run_seed(seed) {
            panic!("seed {seed} (SHARDLOG_SEED={seed} replays it): {error}");
        }
    }
}
