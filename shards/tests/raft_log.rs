//! Raft write requests on the shard log, over a `SimDisk` that loses, keeps or tears each
//! unsynced write at a power loss and flips bits in what lands: per seed, three groups'
//! write requests (hard state, appends that replace conflicting suffixes, entries of 0 to
//! 3 KiB so they cross pages and segments) go through `ShardLog::append_internal` on the
//! `Raft` stream, between record batches of a partition whose retention deletes old
//! segments, with checkpoints; the power fails at a random point (between flushes, during
//! one), the log recovers, and `persist::replay` of the recovered stream must equal
//! `LogImage::apply` of a prefix of the appended writes that holds every write whose
//! `Durable` had resolved. Several lives per seed, each starting from the last.
//!
//! Now and then a life compacts each group's image to a random committed index and
//! appends a stream snapshot of the images (`persist::encode_stream_snapshot`, with the
//! log's snapshot flag), as a shard does (docs/replication.md, "Log compaction"): the
//! prefix is then of writes and snapshots, a snapshot replacing every image before it,
//! so the log forgetting what a durable snapshot superseded (and checkpoints carrying
//! only what follows it) must still recover the images of a prefix.
//!
//! A failing seed is printed; `SHARDLOG_SEED=<seed> cargo test --release -p
//! shardlog-shards --test raft_log` replays it; `SHARDLOG_RAFT_LOG_SEEDS=5000` runs more.

use std::collections::BTreeMap;

use bytes::Bytes;
use glommio::{LocalExecutorBuilder, Placement};
use shardlog_benches::load::record_batch::RecordBatchWriter;
use shardlog_shards::replication::persist::{encode, encode_stream_snapshot, replay};
use shardlog_shards::replication::{Entry, HardState, LogImage, WriteRequest};
use shardlog_storage::{
    split_batches, Durable, InternalStream, LogConfig, PartitionId, RetentionPolicy, ShardLog,
    SimDisk, XorShift,
};

const GROUPS: u64 = 3;
const VOTERS: [u64; 3] = [1, 2, 3];
const PARTITION: PartitionId = PartitionId(1);

fn log_config() -> LogConfig {
    LogConfig {
        segment_size_bytes: 64 << 10,
        tail_cache_bytes: 1 << 20,
        max_batch_bytes: 16 << 10,
        blocking_flush_max_bytes: 0,
        ..LogConfig::default()
    }
}

/// A next write request for a group whose appended writes give `image`: raft's shapes
/// (the commit index never passes the last entry, an append never cuts below it).
fn next_write(rng: &mut XorShift, image: &LogImage, number: u64) -> WriteRequest {
    let (last, commit) = (image.last_index(), image.hard_state.commit);
    let term = image.hard_state.term.max(1) + rng.below(2);
    let mut write = WriteRequest { number, ..WriteRequest::default() };
    let mut new_last = last;
    if rng.chance(3, 4) {
        let first = commit + 1 + rng.up_to(last - commit);
        let count = 1 + rng.below(4);
        write.entries = (first..first + count)
            .map(|index| {
                let len = if rng.chance(1, 3) { 0 } else { rng.up_to(3000) as usize };
                let data: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
                Entry { index, term, data: Bytes::from(data), ..Entry::default() }
            })
            .collect();
        new_last = first + count - 1;
    }
    if write.entries.is_empty() || rng.chance(1, 2) {
        let commit = commit + rng.up_to(new_last - commit);
        let vote = rng.up_to(3);
        write.hard_state = Some(HardState { term, vote, commit, ..HardState::default() });
    }
    write
}

/// What a life appended to the `Raft` stream, in order.
#[derive(Clone)]
enum Appended {
    Write(u64, WriteRequest),
    /// A stream snapshot of these (compacted) images.
    Snapshot(BTreeMap<u64, LogImage>),
}

/// The images `appended` gives, replayed in order.
fn images_of(appended: &[Appended]) -> BTreeMap<u64, LogImage> {
    let mut images = BTreeMap::new();
    for appended in appended {
        match appended {
            Appended::Write(group, write) => {
                images.entry(*group).or_insert_with(|| LogImage::new(&VOTERS)).apply(write);
            }
            Appended::Snapshot(snapshot) => images = snapshot.clone(),
        }
    }
    images
}

fn record_batch(rng: &mut XorShift) -> Bytes {
    let mut batch = Vec::new();
    let mut writer = RecordBatchWriter::new(&mut batch, 1_700_000_000_000);
    let value: Vec<u8> = (0..rng.up_to(4000)).map(|_| rng.next_u64() as u8).collect();
    writer.push(None, &value);
    writer.finish();
    Bytes::from(batch)
}

/// Counts over all seeds, to show the run reached what it claims to test.
#[derive(Default, Debug)]
struct Totals {
    writes: u64,
    lost_unsynced: u64,
    deleted_segments: u64,
    checkpoints: u64,
    stream_snapshots: u64,
}

/// One life: appends until the power fails. Returns the crashed disk and how many of
/// `writes` (all appended so far) were durable at the crash.
async fn live(
    rng: &mut XorShift,
    log: &ShardLog<SimDisk>,
    disk: &SimDisk,
    writes: &mut Vec<Appended>,
    totals: &mut Totals,
) -> (SimDisk, usize) {
    let mut images = images_of(writes);
    let mut durables: Vec<Durable> = Vec::new();
    let from = writes.len();
    for step in 0..rng.up_to(80) {
        let group = 1 + rng.below(GROUPS);
        let image = images.entry(group).or_insert_with(|| LogImage::new(&VOTERS));
        let write = next_write(rng, image, step + 1);
        image.apply(&write);
        let payload = encode(group, &write);
        let durable = log.append_internal(InternalStream::Raft, false, &payload).unwrap();
        durables.push(durable);
        writes.push(Appended::Write(group, write));
        totals.writes += 1;
        if rng.chance(1, 8) {
            // Mostly near the commit index, as a group whose voters keep up compacts.
            for image in images.values_mut() {
                let commit = image.hard_state.commit;
                image.compact(commit - rng.up_to(commit.min(4)));
            }
            let payload = encode_stream_snapshot(images.iter().map(|(g, i)| (*g, i)), []);
            // The broker writes a snapshot only up to half a segment (an entry never spans
            // segments); the images stay compacted either way.
            if payload.len() as u64 <= log_config().segment_size_bytes / 2 {
                let durable = log.append_internal(InternalStream::Raft, true, &payload).unwrap();
                durables.push(durable);
                writes.push(Appended::Snapshot(images.clone()));
                totals.stream_snapshots += 1;
            }
        }
        if rng.chance(1, 3) {
            let batch = record_batch(rng);
            let batches = split_batches(&batch).unwrap();
            log.append_batches(PARTITION, &batches).unwrap();
        }
        match rng.below(10) {
            0 => {
                let info = log.partition_info(PARTITION).unwrap();
                let keep = Some(rng.up_to(16 << 10));
                let policy = RetentionPolicy { retention_bytes: keep, retention_ms: None };
                log.apply_retention(PARTITION, policy, 0);
                if rng.chance(1, 2) && info.high_watermark > 0 {
                    let _ = log.advance_log_start(PARTITION, info.high_watermark);
                }
            }
            1 => {
                log.checkpoint().await.unwrap();
                totals.checkpoints += 1;
            }
            2 => log.flushed().await,
            _ => {
                for _ in 0..rng.up_to(3) {
                    futures_lite::future::yield_now().await;
                }
            }
        }
    }
    if rng.chance(1, 3) {
        disk.flip_bits_on_crash(1 + rng.below(3) as u32);
    }
    let durable = durables.iter().take_while(|d| d.is_durable()).count();
    totals.deleted_segments += log.probes().retention_deleted_segments;
    (disk.crash(), from + durable)
}

/// Lives of one seed, each recovering from the power loss that ended the one before.
async fn run_seed(seed: u64, totals: &mut Totals) {
    let mut rng = XorShift::new(seed);
    let mut disk = SimDisk::new(seed);
    let mut writes: Vec<Appended> = Vec::new();
    let mut durable = 0;
    for life in 0..2 + rng.below(4) {
        let (log, recovered, _) = ShardLog::open(disk.clone(), log_config())
            .await
            .unwrap_or_else(|e| panic!("seed {seed} life {life}: the log recovers: {e:?}"));
        let images = replay(&recovered, |_| LogImage::new(&VOTERS))
            .unwrap_or_else(|e| panic!("seed {seed} life {life}: the raft stream replays: {e}"));
        // The recovered log is a prefix of what was appended that holds every durable
        // write: find it, the shortest first.
        let kept = (durable..=writes.len()).find(|&k| images_of(&writes[..k]) == images);
        let Some(kept) = kept else {
            panic!(
                "seed {seed} life {life}: the recovered images are no prefix of the {} writes \
                 appended holding the {durable} durable ones",
                writes.len()
            )
        };
        totals.lost_unsynced += (writes.len() - kept) as u64;
        writes.truncate(kept);
        log.ensure_partition(PARTITION);
        (disk, durable) = live(&mut rng, &log, &disk, &mut writes, totals).await;
    }
}

#[test]
fn recovered_raft_images_equal_the_durable_writes_after_every_power_loss() {
    let first = shardlog_storage::seed_from_env(0);
    let seeds: u64 = std::env::var("SHARDLOG_RAFT_LOG_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(if std::env::var("SHARDLOG_SEED").is_ok() { 1 } else { 200 });
    let executor = LocalExecutorBuilder::new(Placement::Unbound).make().expect("an executor");
    let totals = executor.run(async move {
        let mut totals = Totals::default();
        for seed in first..first + seeds {
            run_seed(seed, &mut totals).await;
        }
        totals
    });
    println!("{seeds} seeds: {totals:?}");
    // The run reached what it claims to test.
    assert!(totals.writes > seeds * 50, "{totals:?}");
    if seeds >= 100 {
        assert!(totals.lost_unsynced > 0 && totals.deleted_segments > 0, "{totals:?}");
        assert!(totals.checkpoints > 0 && totals.stream_snapshots > 0, "{totals:?}");
    }
}
