//! Kill -9 crash loop under real clients: idempotent librdkafka producers (acks=all) on
//! several partitions and a committing consumer group, while the broker is killed at
//! seeded random moments and restarted. A checker then reads everything back.
//!
//! Checked: every acknowledged record is present exactly once, at the offset it was
//! acknowledged with, with its content intact (checksum); offsets are dense; each
//! producer's records keep their order in each partition; every acknowledged offset
//! commit survives the kill that follows it.
//!
//! Bounded for CI (`SHARDLOG_CRASH_CYCLES`, default 20); seeded (`SHARDLOG_SEED`, printed
//! at start and on failure): `SHARDLOG_SEED=<seed> SHARDLOG_CRASH_CYCLES=<n>` replays a run.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::{create_topic, Broker};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use shardlog_storage::XorShift;

const TOPIC: &str = "crash-loop";
const PARTITIONS: i32 = 4;
const PRODUCERS: u32 = 3;
const GROUP: &str = "crash-loop-group";
const TIMEOUT: Duration = Duration::from_secs(60);

/// What a producer learnt about one of its records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    /// Acknowledged at this partition and offset.
    Acked(i32, i64),
    /// Reported as failed after librdkafka's retries (may or may not be stored).
    Failed,
}

/// Delivery reports of one producer, by sequence number.
#[derive(Default)]
struct Deliveries {
    outcomes: Mutex<HashMap<u64, Outcome>>,
    acked: AtomicU64,
}

struct DeliveryRecorder(Arc<Deliveries>);

impl ClientContext for DeliveryRecorder {}

impl ProducerContext for DeliveryRecorder {
    type DeliveryOpaque = Box<u64>;

    fn delivery(&self, result: &DeliveryResult<'_>, sequence: Box<u64>) {
        let outcome = match result {
            Ok(message) => {
                self.0.acked.fetch_add(1, Ordering::Relaxed);
                Outcome::Acked(message.partition(), message.offset())
            }
            Err(_) => Outcome::Failed,
        };
        self.0.outcomes.lock().unwrap().insert(*sequence, outcome);
    }
}

/// FNV-1a, 64 bits: the checksum each payload carries of its own content.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ *b as u64).wrapping_mul(0x100_0000_01b3))
}

/// `<producer>:<sequence>:<filler>:<checksum of what precedes>`.
fn payload(producer: u32, sequence: u64, rng: &mut XorShift) -> String {
    let filler: String =
        (0..8 + rng.below(120)).map(|_| (b'a' + rng.below(26) as u8) as char).collect();
    let content = format!("{producer}:{sequence}:{filler}");
    let checksum = fnv1a(content.as_bytes());
    format!("{content}:{checksum:016x}")
}

/// (producer, sequence) of an intact payload; None if the checksum does not match.
fn parse(payload: &[u8]) -> Option<(u32, u64)> {
    let text = std::str::from_utf8(payload).ok()?;
    let (content, checksum) = text.rsplit_once(':')?;
    if u64::from_str_radix(checksum, 16).ok()? != fnv1a(content.as_bytes()) {
        return None;
    }
    let mut fields = content.splitn(3, ':');
    Some((fields.next()?.parse().ok()?, fields.next()?.parse().ok()?))
}

/// One idempotent producer thread: sends until `stop`, then flushes.
fn spawn_producer(
    broker: &Broker,
    id: u32,
    seed: u64,
    stop: Arc<AtomicBool>,
) -> (Arc<Deliveries>, JoinHandle<u64>) {
    let deliveries = Arc::new(Deliveries::default());
    let producer: ThreadedProducer<DeliveryRecorder> = ClientConfig::new()
        .set("bootstrap.servers", broker.bootstrap())
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("max.in.flight", "5")
        .set("linger.ms", "2")
        .set("queue.buffering.max.messages", "20000")
        .set("message.timeout.ms", "120000")
        .set("reconnect.backoff.ms", "50")
        .set("reconnect.backoff.max.ms", "200")
        .create_with_context(DeliveryRecorder(deliveries.clone()))
        .expect("producer");
    let handle = std::thread::spawn(move || {
        let mut rng = XorShift::new(seed ^ (id as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let mut sequence = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let value = payload(id, sequence, &mut rng);
            let partition = rng.below(PARTITIONS as u64) as i32;
            let record = BaseRecord::<(), _, _>::with_opaque_to(TOPIC, Box::new(sequence))
                .payload(&value)
                .partition(partition);
            match producer.send(record) {
                Ok(()) => sequence += 1,
                Err((e, _)) => {
                    // Local queue full while the broker is down: let librdkafka drain.
                    assert!(e.to_string().contains("Queue full"), "producer {id}: {e}");
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
            // About a thousand records a second per producer: enough to keep every
            // partition busy at each kill, small enough to read back after 200 cycles.
            if sequence % 8 == 0 {
                std::thread::sleep(Duration::from_millis(4 + rng.below(8)));
            }
        }
        producer.flush(Duration::from_secs(180)).expect("every delivery reported");
        sequence
    });
    (deliveries, handle)
}

/// Commits acknowledged by the broker: per partition, the highest acknowledged offset.
type AckedCommits = Arc<Mutex<BTreeMap<i32, i64>>>;

fn group_consumer(broker: &Broker) -> BaseConsumer {
    ClientConfig::new()
        .set("bootstrap.servers", broker.bootstrap())
        .set("group.id", GROUP)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("session.timeout.ms", "6000")
        .set("heartbeat.interval.ms", "300")
        .set("fetch.wait.max.ms", "100")
        .set("reconnect.backoff.ms", "50")
        .set("reconnect.backoff.max.ms", "200")
        .create()
        .expect("consumer")
}

/// The consuming member of the group: polls and commits its position every ~100 ms
/// (CommitMode::Sync); records each commit the broker acknowledged.
fn spawn_committer(broker: &Broker, stop: Arc<AtomicBool>) -> (AckedCommits, JoinHandle<u64>) {
    let acked: AckedCommits = Arc::default();
    let consumer = group_consumer(broker);
    consumer.subscribe(&[TOPIC]).unwrap();
    let record = acked.clone();
    let handle = std::thread::spawn(move || {
        let mut commits = 0u64;
        let mut last_commit = Instant::now();
        while !stop.load(Ordering::Relaxed) {
            let _ = consumer.poll(Duration::from_millis(50));
            if last_commit.elapsed() < Duration::from_millis(100) {
                continue;
            }
            last_commit = Instant::now();
            let Ok(position) = consumer.position() else { continue };
            let mut commit = TopicPartitionList::new();
            for element in position.elements() {
                if matches!(element.offset(), Offset::Offset(_)) {
                    let partition = element.partition();
                    commit.add_partition_offset(TOPIC, partition, element.offset()).unwrap();
                }
            }
            if commit.count() == 0 {
                continue;
            }
            if consumer.commit(&commit, CommitMode::Sync).is_ok() {
                commits += 1;
                let mut acked = record.lock().unwrap();
                for element in commit.elements() {
                    if let Offset::Offset(offset) = element.offset() {
                        let entry = acked.entry(element.partition()).or_insert(offset);
                        *entry = (*entry).max(offset);
                    }
                }
            }
        }
        commits
    });
    (acked, handle)
}

/// Committed offsets of the group as the broker reports them now.
fn committed(checker: &BaseConsumer) -> BTreeMap<i32, Option<i64>> {
    common::committed_offsets(checker, TOPIC, PARTITIONS, TIMEOUT)
}

/// Every acknowledged commit made before the kill is still there (or overtaken).
fn check_commits(before_kill: &BTreeMap<i32, i64>, after: &BTreeMap<i32, Option<i64>>) -> u64 {
    for (partition, acked) in before_kill {
        let now = after.get(partition).copied().flatten();
        assert!(
            now.is_some_and(|n| n >= *acked),
            "partition {partition}: commit {acked} was acknowledged before the kill, \
             the broker now reports {now:?}"
        );
    }
    before_kill.len() as u64
}

fn total_acked(deliveries: &[Arc<Deliveries>]) -> u64 {
    deliveries.iter().map(|d| d.acked.load(Ordering::Relaxed)).sum()
}

/// Figures of one run.
#[derive(Debug, Default)]
struct Summary {
    acknowledged: u64,
    failed: u64,
    present: u64,
    lost: u64,
    duplicated: u64,
}

/// The checker: offsets dense, payloads intact, each acknowledged record exactly once at
/// its acknowledged offset, each producer's order kept within a partition.
fn check(stored: &common::Stored, deliveries: &[Arc<Deliveries>]) -> Summary {
    let mut seen: HashMap<(u32, u64), Vec<(i32, i64)>> = HashMap::new();
    for (partition, records) in stored {
        let mut last_sequence: HashMap<u32, u64> = HashMap::new();
        for (i, (offset, value)) in records.iter().enumerate() {
            assert_eq!(*offset, i as i64, "partition {partition}: offsets not dense");
            let (producer, sequence) = parse(value).unwrap_or_else(|| {
                panic!("partition {partition} offset {offset}: payload damaged: {value:?}")
            });
            if let Some(previous) = last_sequence.insert(producer, sequence) {
                assert!(
                    sequence > previous,
                    "partition {partition} offset {offset}: producer {producer} sequence \
                     {sequence} after {previous}"
                );
            }
            seen.entry((producer, sequence)).or_default().push((*partition, *offset));
        }
    }
    let duplicated = seen.values().map(|places| places.len() as u64 - 1).sum();
    let mut summary = Summary { duplicated, ..Summary::default() };
    for (producer, deliveries) in deliveries.iter().enumerate() {
        for (sequence, outcome) in deliveries.outcomes.lock().unwrap().iter() {
            let places = seen.get(&(producer as u32, *sequence));
            match outcome {
                Outcome::Failed => summary.failed += 1,
                Outcome::Acked(partition, offset) => {
                    summary.acknowledged += 1;
                    match places {
                        Some(places) => {
                            summary.present += 1;
                            assert_eq!(
                                places,
                                &vec![(*partition, *offset)],
                                "producer {producer} sequence {sequence}: acknowledged at \
                                 {partition}/{offset}"
                            );
                        }
                        None => summary.lost += 1,
                    }
                }
            }
        }
    }
    summary
}

#[test]
fn acknowledged_records_and_commits_survive_repeated_kill_9() {
    let seed = common::seed_from_env();
    let cycles: u64 =
        std::env::var("SHARDLOG_CRASH_CYCLES").ok().and_then(|s| s.parse().ok()).unwrap_or(20);
    eprintln!("crash_loop: SHARDLOG_SEED={seed} SHARDLOG_CRASH_CYCLES={cycles}");
    let _replay = common::SeedOnFailure { test: "crash_loop", seed };
    let mut rng = XorShift::new(seed);

    let mut broker = Broker::start(2, &["--checkpoint-interval-ms", "1000"]);
    create_topic(&broker, TOPIC, PARTITIONS);
    let stop = Arc::new(AtomicBool::new(false));
    let (deliveries, producers): (Vec<_>, Vec<_>) =
        (0..PRODUCERS).map(|id| spawn_producer(&broker, id, seed, stop.clone())).unzip();
    let (acked_commits, committer) = spawn_committer(&broker, stop.clone());
    let checker = group_consumer(&broker);

    let mut commits_checked = 0;
    for cycle in 0..cycles {
        // Each cycle makes progress before its kill: new acknowledgements after the restart.
        let before = total_acked(&deliveries);
        common::eventually(TIMEOUT, "records acknowledged after the restart", || {
            total_acked(&deliveries) > before
        });
        std::thread::sleep(Duration::from_millis(200 + rng.below(1300)));
        broker.kill();
        let before_kill = acked_commits.lock().unwrap().clone();
        broker.kill_and_restart();
        commits_checked += check_commits(&before_kill, &committed(&checker));
        eprintln!(
            "crash_loop: cycle {cycle}: {} acknowledged so far, {} commits checked",
            total_acked(&deliveries),
            commits_checked
        );
    }

    stop.store(true, Ordering::Relaxed);
    let sent: u64 = producers.into_iter().map(|p| p.join().expect("producer thread")).sum();
    let commits = committer.join().expect("committer thread");
    let reported: u64 = deliveries.iter().map(|d| d.outcomes.lock().unwrap().len() as u64).sum();
    assert_eq!(reported, sent, "every record sent got a delivery report");
    let summary = check(&common::read_topic(&broker, TOPIC, PARTITIONS), &deliveries);
    eprintln!(
        "crash_loop summary: seed={seed} cycles={cycles} acknowledged={} present={} lost={} \
         duplicated={} failed={} commits_acknowledged={commits} commits_checked={commits_checked}",
        summary.acknowledged, summary.present, summary.lost, summary.duplicated, summary.failed
    );
    assert_eq!(summary.lost, 0, "acknowledged records lost");
    assert_eq!(summary.duplicated, 0, "records stored more than once");
    assert!(summary.acknowledged > 0, "nothing was acknowledged: the run proves nothing");
    assert!(commits_checked > 0, "no acknowledged commit was checked: the run proves nothing");
}
