//! A compacted topic for the power-loss test (issue 21): keyed values and tombstones while
//! the log cleaner runs passes, and power losses between and during them.
//!
//! Each shard runs one producer over its own topic `compact-<shard>` (2 partitions placed
//! by the controller, `cleanup.policy=compact`, `min.cleanable.dirty.ratio` and
//! `delete.retention.ms` drawn per seed): pipelined batches of 1-4 records over a few keys,
//! one record in six a tombstone; idempotent or not, drawn per incarnation (idempotent
//! batches make the cleaner keep each producer's last batch whole). The cleaner runs every
//! 0.2-2 ms with no rate limit, and its key map is sometimes tiny (a pass then stops where
//! it filled). It starts only after the checks, so a check reads a log no pass changes.
//!
//! Checked after every restart, on the shard that owns each partition, reading it from
//! offset 0 over the gaps cleaning left:
//! 1. offsets never change: a record present at an offset is the record acknowledged
//!    there (key and value), or one of a batch in flight at the power loss;
//! 2. every key's last record present is its latest acknowledged record, at its original
//!    offset, or one in flight sent after it;
//! 3. a key whose latest record is a tombstone has no older record present: the tombstone
//!    is there, or gone with every older record of its key; and it is gone only if its
//!    `delete.retention.ms` has passed since it was sent (or a record of its key was in
//!    flight and may have superseded it);
//! 4. the high watermark is the end of the last record present (the last batch is never
//!    cleaned), at least the end of everything acknowledged; the log start stays 0.
//!
//! What the checks find becomes the model: a batch in flight found present is then known
//! at its offsets, and a key with no record present must never show an older one again.

use super::*;
use shardlog_shards::compaction::CleanerConfig;
use shardlog_storage::for_each_record;

pub const PREFIX: &str = "compact-";
const PARTITIONS: i32 = 2;
const KEYS: u64 = 12;
/// Batches in flight per producer.
const IN_FLIGHT: usize = 3;

/// One record as its producer sent it.
#[derive(Clone, PartialEq, Eq)]
struct Rec {
    key: Vec<u8>,
    /// None: a tombstone.
    value: Option<Vec<u8>>,
    /// Wall clock when it was sent, milliseconds.
    sent_ms: i64,
}

impl std::fmt::Debug for Rec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        let value = self.value.as_deref().map(text);
        write!(f, "{}={value:?} sent at {} ms", text(&self.key), self.sent_ms)
    }
}

/// What the model says of one key of one partition.
#[derive(Clone, Debug)]
enum Latest {
    /// Its latest record, at this offset.
    Record(i64, Rec),
    /// No record of the key may be present below this offset (its tombstone is gone).
    Gone(i64),
}

#[derive(Default)]
struct PartitionModel {
    /// Every record acknowledged (or found present after a power loss), by offset.
    history: BTreeMap<i64, Rec>,
    latest: HashMap<Vec<u8>, Latest>,
    /// Offset after the last acknowledged record.
    acked_end: i64,
}

/// The compacted part of the model.
#[derive(Default)]
pub struct CompactModel {
    topics_acked: BTreeSet<String>,
    partitions: HashMap<Key, PartitionModel>,
    /// Per shard's producer: batches sent and not answered, in send order.
    in_flight: BTreeMap<usize, VecDeque<(Key, Vec<Rec>)>>,
    /// Cleaner probes per (incarnation, shard), the last seen.
    probes: HashMap<(u64, usize), (u64, u64, u64)>,
    /// Per topic: `delete.retention.ms`.
    retention_ms: HashMap<String, i64>,
    next_value: u64,
    pub acked_records: u64,
    /// Keys whose tombstone the checks found gone (with every older record).
    pub tombstones_gone: u64,
}

impl CompactModel {
    /// (passes, records removed, tombstones removed) of every incarnation.
    pub fn cleaner_totals(&self) -> (u64, u64, u64) {
        self.probes.values().fold((0, 0, 0), |t, p| (t.0 + p.0, t.1 + p.1, t.2 + p.2))
    }
}

fn wall_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The cleaner's settings for one incarnation (its own generator, so the workload's draws
/// stay what they were): often, unthrottled, now and then with a key map of a few keys.
pub fn cleaner_config(seed: u64, number: u64) -> CleanerConfig {
    let mut rng = XorShift::new(seed ^ (number << 40) ^ 0xC1EA_0E55);
    CleanerConfig {
        check_interval: Duration::from_micros(200 + rng.below(1800)),
        bytes_per_second: 1 << 40,
        max_keys: if rng.chance(1, 4) { 1 + rng.below(4) as usize } else { 1 << 20 },
    }
}

/// Whether `seed` runs this workload: every `SHARDLOG_POWER_LOSS_COMPACT_EVERY`-th seed
/// (0 turns it off), by default every 4th. It was opt-in for a while: runs with it hung
/// child processes in the glommio reactor stall more often (3 of 20 children in a
/// 1,000-seed run on 2026-12-02). Since vendor/glommio changes 6 and 7 (the mesh
/// builder's data race and the leaked parked tasks) no child has hung: 4,000 seeds with
/// it at every 4th seed, 80 children, none hung (docs/reliability.md).
pub fn enabled_every() -> Option<u64> {
    let every = match std::env::var("SHARDLOG_POWER_LOSS_COMPACT_EVERY") {
        Ok(every) => every.parse::<u64>().ok()?,
        Err(_) => DEFAULT_EVERY,
    };
    Some(every).filter(|&n| n > 0)
}

/// The share of seeds that run the compacted workload when nothing says otherwise.
const DEFAULT_EVERY: u64 = 4;

fn runs_in(seed: u64) -> bool {
    enabled_every().is_some_and(|every| seed.is_multiple_of(every))
}

pub fn spawn(world: &Arc<Incarnation>, shard: &Rc<Shard>) {
    if !runs_in(world.seed) {
        return;
    }
    world.model.lock().unwrap().compact.in_flight.remove(&shard.id);
    shard.spawn_cleaner();
    let (world, shard) = (world.clone(), shard.clone());
    glommio::spawn_local(async move { compact_loop(&world, &shard).await }).detach();
}

fn topic_configs(seed: u64) -> (Vec<(String, String)>, i64) {
    let mut rng = XorShift::new(seed ^ 0xC0_3AC7);
    let retention_ms = [0, 2, 10, 50][rng.below(4) as usize];
    let ratio = ["0.01", "0.2", "0.5"][rng.below(3) as usize];
    let configs = [
        ("cleanup.policy", "compact".to_string()),
        ("min.cleanable.dirty.ratio", ratio.to_string()),
        ("delete.retention.ms", retention_ms.to_string()),
        ("min.compaction.lag.ms", "0".to_string()),
    ];
    (configs.into_iter().map(|(k, v)| (k.to_string(), v)).collect(), retention_ms)
}

/// A batch of `records` (keys and nullable values), idempotent if `producer` says so.
fn batch(producer: ProducerFields, records: &[Rec]) -> Bytes {
    let mut out = Vec::new();
    let mut writer = RecordBatchWriter::with_producer(&mut out, wall_ms(), producer);
    for r in records {
        writer.push_nullable(Some(&r.key), r.value.as_deref());
    }
    writer.finish();
    Bytes::from(out)
}

async fn compact_loop(world: &Incarnation, shard: &Rc<Shard>) {
    let mut rng = world.rng(shard.id, 90);
    let topic = format!("{PREFIX}{}", shard.id);
    let (configs, retention_ms) = topic_configs(world.seed);
    let acked = world.model.lock().unwrap().compact.topics_acked.contains(&topic);
    if !acked {
        if !ensure_topic(world, shard, &topic, PARTITIONS, configs).await {
            return;
        }
        let mut model = world.model.lock().unwrap();
        model.compact.topics_acked.insert(topic.clone());
        model.compact.retention_ms.insert(topic.clone(), retention_ms);
    }
    let mut producer = ProducerFields::NONE;
    if rng.chance(1, 2) {
        let init = shard.init_producer_id(-1, -1).await;
        check_off(world).await;
        match init {
            Ok((producer_id, producer_epoch)) => {
                let mut model = world.model.lock().unwrap();
                if !model.producer_ids.insert(producer_id) {
                    drop(model);
                    return world.fail(format!("producer id {producer_id} handed out twice"));
                }
                producer = ProducerFields { producer_id, producer_epoch, base_sequence: 0 };
            }
            Err(e) => return world.fail(format!("InitProducerId: {e}")),
        }
    }
    let mut sequences: HashMap<i32, i32> = HashMap::new();
    let mut waits = VecDeque::new();
    loop {
        if let Some(result) = next_answer(world, &mut rng, &mut waits, IN_FLIGHT).await {
            if let Err(failure) = record_ack(world, shard, result.map(|a| a.base_offset)) {
                world.fail(failure);
                power_gone().await;
            }
            // Not counted toward the power-loss budget: the main workload sets the pace.
            continue;
        }
        let partition = rng.below(PARTITIONS as u64) as i32;
        let key = (topic.clone(), partition);
        let records: Vec<Rec> = {
            let mut model = world.model.lock().unwrap();
            (0..1 + rng.below(4))
                .map(|_| {
                    let key = format!("key-{}", rng.below(KEYS)).into_bytes();
                    let value = (!rng.chance(1, 6)).then(|| {
                        model.compact.next_value += 1;
                        let filler = "x".repeat(rng.below(200) as usize);
                        format!("{}:{}:{filler}", shard.id, model.compact.next_value).into_bytes()
                    });
                    Rec { key, value, sent_ms: wall_ms() }
                })
                .collect()
        };
        let mut fields = producer;
        if producer.producer_id >= 0 {
            let sequence = sequences.entry(partition).or_insert(0);
            fields.base_sequence = *sequence;
            *sequence += records.len() as i32;
        }
        let bytes = batch(fields, &records);
        world
            .model
            .lock()
            .unwrap()
            .compact
            .in_flight
            .entry(shard.id)
            .or_default()
            .push_back((key.clone(), records));
        check_off(world).await;
        waits.push_back(shard.produce(&key.0, key.1, bytes, -1, None).await);
    }
}

/// The answer to this shard's oldest batch in flight: its records become acknowledged.
fn record_ack(
    world: &Incarnation,
    shard: &Shard,
    result: Result<i64, String>,
) -> Result<(), String> {
    let mut model = world.model.lock().unwrap();
    let compact = &mut model.compact;
    let (key, records) =
        compact.in_flight.get_mut(&shard.id).and_then(|q| q.pop_front()).expect("in flight");
    let base_offset = result.map_err(|e| format!("produce to {key:?} failed: {e}"))?;
    let partition = compact.partitions.entry(key).or_default();
    compact.acked_records += records.len() as u64;
    for (i, rec) in records.into_iter().enumerate() {
        let offset = base_offset + i as i64;
        partition.acked_end = partition.acked_end.max(offset + 1);
        let newer = match partition.latest.get(&rec.key) {
            Some(Latest::Record(at, _)) | Some(Latest::Gone(at)) => offset > *at,
            None => true,
        };
        if newer {
            partition.latest.insert(rec.key.clone(), Latest::Record(offset, rec.clone()));
        }
        partition.history.insert(offset, rec);
    }
    let p = shard.log.probes();
    let probes = (p.cleaner_passes, p.cleaner_removed_records, p.cleaner_removed_tombstones);
    compact.probes.insert((world.number, shard.id), probes);
    Ok(())
}

/// One record read back.
struct Present {
    offset: i64,
    key: Vec<u8>,
    value: Option<Vec<u8>>,
}

impl std::fmt::Debug for Present {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let value = self.value.as_deref().map(String::from_utf8_lossy);
        write!(f, "{}={value:?} at {}", String::from_utf8_lossy(&self.key), self.offset)
    }
}

/// Every record of a partition from offset 0, over gaps; the high watermark and log start.
async fn read_compacted(shard: &Shard, key: &Key) -> Result<(Vec<Present>, i64, i64), String> {
    let mut out: Vec<Present> = Vec::new();
    let mut offset = 0;
    loop {
        let fetched = fetch_at(shard, key, offset, false, 1 << 20).await?;
        if fetched.records.is_empty() {
            if offset < fetched.high_watermark {
                return Err(format!(
                    "nothing read at {offset} below hw {}",
                    fetched.high_watermark
                ));
            }
            return Ok((out, fetched.high_watermark, fetched.log_start_offset));
        }
        for batch in batches(&fetched.records) {
            if !batch.crc_ok() || batch.next_offset() <= offset {
                return Err(format!(
                    "batch at {} is damaged or behind {offset}",
                    batch.base_offset
                ));
            }
            let walked = for_each_record(batch.bytes, |r| {
                out.push(Present {
                    offset: batch.base_offset + r.offset_delta,
                    key: r.key.unwrap_or_default().to_vec(),
                    value: r.value.map(<[u8]>::to_vec),
                })
            });
            walked.map_err(|e| format!("batch at {}: {e:?}", batch.base_offset))?;
            offset = batch.next_offset();
        }
    }
}

/// The checks after a restart (see the module's comment); every shard calls it.
pub async fn check(world: &Incarnation, shard: &Shard) {
    let topics: Vec<String> =
        world.model.lock().unwrap().compact.topics_acked.iter().cloned().collect();
    for topic in topics {
        if shard.topic(&topic).is_none() {
            world.fail(format!("acknowledged compacted topic {topic} is gone"));
            continue;
        }
        for partition in 0..PARTITIONS {
            if shard.owner_of(&topic, partition) != Ok(shard.id) {
                continue;
            }
            let key = (topic.clone(), partition);
            let checked = match read_compacted(shard, &key).await {
                Ok((present, hw, log_start)) => {
                    check_partition(world, &key, present, hw, log_start)
                }
                Err(e) => Err(format!("reading: {e}")),
            };
            if let Err(problem) = checked {
                world.fail(format!("compacted {key:?}: {problem}"));
            }
        }
    }
}

fn check_partition(
    world: &Incarnation,
    key: &Key,
    present: Vec<Present>,
    hw: i64,
    log_start: i64,
) -> Result<(), String> {
    let now_ms = wall_ms();
    let mut model = world.model.lock().unwrap();
    let compact = &mut model.compact;
    let retention_ms = compact.retention_ms[&key.0];
    let in_flight: Vec<Rec> = compact
        .in_flight
        .values()
        .flatten()
        .filter(|(k, _)| k == key)
        .flat_map(|(_, records)| records.iter().cloned())
        .collect();
    let partition = compact.partitions.entry(key.clone()).or_default();
    let mut tombstones_gone = 0;
    // 1. Offsets never change; 4. high watermark and log start.
    let mut adopted = Vec::new();
    for p in &present {
        match partition.history.get(&p.offset) {
            Some(rec) if rec.key == p.key && rec.value == p.value => {}
            Some(rec) => {
                return Err(format!("offset {} holds {p:?}, acknowledged {rec:?}", p.offset))
            }
            None => {
                let sent = in_flight.iter().find(|r| r.key == p.key && r.value == p.value);
                let rec = sent.ok_or(format!("{p:?} was never sent (or not at that offset)"))?;
                adopted.push((p.offset, rec.clone()));
            }
        }
    }
    let end = present.last().map_or(0, |p| p.offset + 1);
    if hw != end || hw < partition.acked_end || log_start != 0 {
        return Err(format!(
            "high watermark {hw}, log start {log_start}: records end at {end}, acknowledged to {}",
            partition.acked_end
        ));
    }
    // 2 and 3, key by key.
    let mut last: HashMap<&[u8], &Present> = HashMap::new();
    for p in &present {
        last.insert(&p.key, p);
    }
    for (k, latest) in &partition.latest {
        let shown = last.get(k.as_slice()).map(|p| p.offset);
        let in_flight_of_key = in_flight.iter().filter(|r| &r.key == k);
        let superseded = in_flight_of_key.clone().count() > 0;
        let deleted_in_flight = in_flight_of_key.clone().any(|r| r.value.is_none());
        let fine = match (latest, shown) {
            (Latest::Record(at, _), Some(o)) | (Latest::Gone(at), Some(o)) if o > *at => true,
            (Latest::Record(at, _), Some(o)) => o == *at,
            (Latest::Gone(_), None) => true,
            (Latest::Gone(_), Some(_)) => false,
            (Latest::Record(_, rec), None) if rec.value.is_none() => {
                let due = now_ms >= rec.sent_ms + retention_ms;
                tombstones_gone += u64::from(due);
                due || superseded
            }
            (Latest::Record(..), None) => deleted_in_flight,
        };
        if !fine {
            let key = String::from_utf8_lossy(k);
            let last = last.get(k.as_slice());
            return Err(format!(
                "key {key}: model {latest:?}, last record present {last:?} ({now_ms} ms now, \
                 delete.retention.ms {retention_ms}, in flight {superseded})"
            ));
        }
    }
    // What was found is the model from now on.
    for (offset, rec) in adopted {
        partition.history.insert(offset, rec);
    }
    partition.acked_end = end;
    for k in
        last.keys().map(|k| k.to_vec()).chain(partition.latest.keys().cloned()).collect::<Vec<_>>()
    {
        let now = match last.get(k.as_slice()) {
            Some(p) => Latest::Record(p.offset, partition.history[&p.offset].clone()),
            None => match &partition.latest[&k] {
                Latest::Record(at, _) | Latest::Gone(at) => Latest::Gone(*at),
            },
        };
        partition.latest.insert(k, now);
    }
    compact.tombstones_gone += tombstones_gone;
    Ok(())
}
