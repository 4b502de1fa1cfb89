//! Kill -9 crash loop under an exactly-once pipeline: a librdkafka consume-transform-produce
//! loop reads an input topic (read_committed, standalone consumer of group `txn-pipe`),
//! writes each record transformed to the same partition of an output topic and commits the
//! input offsets with the output in one transaction (`send_offsets_to_transaction`), while
//! the broker is killed at seeded moments and restarted. The application crashes too: at
//! seeded moments it drops its producer and consumer in the middle of a transaction, after
//! its records (and sometimes its offsets) were sent. After such a crash, or any error, the
//! pipeline starts again: the new producer's InitProducerId fences the old instance and
//! completes or aborts its transaction, and the consumer resumes from the committed
//! offsets, as an exactly-once application does.
//!
//! Checked at the end: the output read with read_committed is exactly the input
//! transformed, partition by partition, in order (nothing lost, nothing twice), and the
//! group's committed offsets are the input's ends.
//!
//! Bounded for CI (`SHARDLOG_TXN_CRASH_CYCLES`, default 6); seeded (`SHARDLOG_SEED`, printed
//! at start and on failure).

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{create_topic, produce_tagged, Broker};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};
use shardlog_storage::XorShift;

const INPUT: &str = "txn-in";
const OUTPUT: &str = "txn-out";
const PARTITIONS: i32 = 3;
const GROUP: &str = "txn-pipe";
/// Input records per crash cycle; the killer strikes before half of it is processed.
const RECORDS_PER_CYCLE: usize = 60;
/// Records of one transaction at most.
const TRANSACTION_RECORDS: usize = 8;
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
const TIMEOUT: Duration = Duration::from_secs(120);

fn transform(value: &str) -> String {
    format!("out:{value}")
}

fn client_config(bootstrap: &str) -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", bootstrap)
        .set("reconnect.backoff.ms", "50")
        .set("reconnect.backoff.max.ms", "200");
    config
}

fn consumer(bootstrap: &str, isolation: &str) -> BaseConsumer {
    client_config(bootstrap)
        .set("group.id", GROUP)
        .set("isolation.level", isolation)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("enable.partition.eof", "true")
        .set("fetch.wait.max.ms", "50")
        .create()
        .expect("consumer")
}

fn partitions(topic: &str) -> TopicPartitionList {
    let mut list = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        list.add_partition(topic, p);
    }
    list
}

/// What the pipeline did, shared with the killer and the checker.
#[derive(Default)]
struct Progress {
    /// Input records whose transaction committed (as the producer was told).
    processed: AtomicU64,
    commits: AtomicU64,
    /// Pipeline instances started (each fences the previous producer).
    incarnations: AtomicU64,
    /// Application crashes simulated mid-transaction.
    crashes: AtomicU64,
    done: AtomicBool,
}

/// Why a pipeline instance ended early.
#[derive(Debug)]
enum Ended {
    Error(KafkaError),
    /// The application "crashed" mid-transaction (seeded): producer and consumer dropped.
    Crashed,
}

impl From<KafkaError> for Ended {
    fn from(e: KafkaError) -> Ended {
        Ended::Error(e)
    }
}

/// One pipeline instance: Ok when the whole input is processed, Err when it ended early
/// (the caller starts a new instance).
fn run_instance(
    bootstrap: &str,
    ends: &BTreeMap<i32, i64>,
    progress: &Progress,
    rng: &mut XorShift,
) -> Result<(), Ended> {
    let producer: BaseProducer = client_config(bootstrap)
        .set("transactional.id", "txn-pipe-1")
        .set("transaction.timeout.ms", "10000")
        .set("linger.ms", "1")
        .create()?;
    producer.init_transactions(CALL_TIMEOUT)?;
    let consumer = consumer(bootstrap, "read_committed");
    let committed = consumer.committed_offsets(partitions(INPUT), CALL_TIMEOUT)?;
    let mut assignment = TopicPartitionList::new();
    let mut positions = BTreeMap::new();
    for element in committed.elements() {
        let start = match element.offset() {
            Offset::Offset(o) => o,
            _ => 0,
        };
        positions.insert(element.partition(), start);
        assignment.add_partition_offset(INPUT, element.partition(), Offset::Offset(start))?;
    }
    consumer.assign(&assignment)?;
    loop {
        if positions.iter().all(|(p, at)| ends.get(p) == Some(at)) {
            return Ok(());
        }
        let mut batch = Vec::new();
        let gathering = Instant::now();
        while batch.len() < TRANSACTION_RECORDS && gathering.elapsed() < Duration::from_millis(50) {
            match consumer.poll(Duration::from_millis(10)) {
                Some(Ok(m)) => {
                    let value = String::from_utf8(m.payload().unwrap_or_default().to_vec())
                        .expect("utf-8 input");
                    positions.insert(m.partition(), m.offset() + 1);
                    batch.push((m.partition(), m.offset(), value));
                }
                Some(Err(KafkaError::PartitionEOF(_))) | None => {}
                Some(Err(e)) => return Err(e.into()),
            }
        }
        if batch.is_empty() {
            continue;
        }
        producer.begin_transaction()?;
        for (partition, _, value) in &batch {
            let out = transform(value);
            let record = BaseRecord::<(), _>::to(OUTPUT).payload(&out).partition(*partition);
            producer.send(record).map_err(|(e, _)| e)?;
        }
        let mut offsets = TopicPartitionList::new();
        for (partition, at) in &positions {
            offsets.add_partition_offset(INPUT, *partition, Offset::Offset(*at))?;
        }
        // One transaction in twelve, the application dies before committing: after its
        // records are flushed, or after its offsets are sent too.
        let crash = rng.below(12);
        if crash == 0 {
            producer.flush(CALL_TIMEOUT)?;
            return Err(Ended::Crashed);
        }
        let metadata = consumer.group_metadata().expect("a group id is set");
        producer.send_offsets_to_transaction(&offsets, &metadata, CALL_TIMEOUT)?;
        if crash == 1 {
            return Err(Ended::Crashed);
        }
        producer.commit_transaction(CALL_TIMEOUT)?;
        progress.processed.fetch_add(batch.len() as u64, Ordering::Relaxed);
        progress.commits.fetch_add(1, Ordering::Relaxed);
    }
}

/// Runs pipeline instances until the input is processed, or `TIMEOUT` passes without a
/// committed transaction.
fn spawn_pipeline(
    bootstrap: String,
    ends: BTreeMap<i32, i64>,
    progress: Arc<Progress>,
    seed: u64,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut rng = XorShift::new(seed ^ 0x7069_7065);
        // Gives up only after TIMEOUT without a committed transaction.
        let (mut last_processed, mut since) = (0, Instant::now());
        while since.elapsed() < TIMEOUT {
            progress.incarnations.fetch_add(1, Ordering::Relaxed);
            match run_instance(&bootstrap, &ends, &progress, &mut rng) {
                Ok(()) => {
                    progress.done.store(true, Ordering::Relaxed);
                    return;
                }
                Err(Ended::Crashed) => {
                    progress.crashes.fetch_add(1, Ordering::Relaxed);
                }
                Err(Ended::Error(e)) => {
                    eprintln!("txn_crash_loop: pipeline instance ended: {e}");
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
            let processed = progress.processed.load(Ordering::Relaxed);
            if processed != last_processed {
                (last_processed, since) = (processed, Instant::now());
            }
        }
    })
}

/// Everything in `topic` a reader at `isolation` sees, per partition in offset order.
fn read_all(broker: &Broker, topic: &str, isolation: &str) -> BTreeMap<i32, Vec<String>> {
    let consumer = consumer(&broker.bootstrap(), isolation);
    let mut assignment = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        assignment.add_partition_offset(topic, p, Offset::Beginning).unwrap();
    }
    consumer.assign(&assignment).unwrap();
    let mut seen: BTreeMap<i32, Vec<String>> = BTreeMap::new();
    let mut at_end = std::collections::BTreeSet::new();
    let deadline = Instant::now() + TIMEOUT;
    while at_end.len() < PARTITIONS as usize {
        assert!(Instant::now() < deadline, "no end of {topic} for {isolation}");
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                let value = String::from_utf8(m.payload().unwrap_or_default().to_vec()).unwrap();
                seen.entry(m.partition()).or_default().push(value);
            }
            Some(Err(KafkaError::PartitionEOF(p))) => {
                at_end.insert(p);
            }
            Some(Err(e)) => panic!("{isolation} read of {topic}: {e}"),
            None => {}
        }
    }
    seen
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|s| s.parse().ok())
}

#[test]
fn an_exactly_once_pipeline_keeps_exactly_once_across_repeated_kill_9() {
    let seed = common::seed_from_env();
    let cycles = env_u64("SHARDLOG_TXN_CRASH_CYCLES").unwrap_or(6);
    eprintln!("txn_crash_loop: SHARDLOG_SEED={seed} SHARDLOG_TXN_CRASH_CYCLES={cycles}");
    let _replay = common::SeedOnFailure { test: "txn_crash_loop", seed };
    let mut rng = XorShift::new(seed);

    let mut broker = Broker::start(2, &["--checkpoint-interval-ms", "1000"]);
    create_topic(&broker, INPUT, PARTITIONS);
    create_topic(&broker, OUTPUT, PARTITIONS);
    let records = RECORDS_PER_CYCLE * (cycles as usize + 1);
    produce_tagged(&broker, INPUT, PARTITIONS, "in", records);
    let input = read_all(&broker, INPUT, "read_committed");
    let ends: BTreeMap<i32, i64> = input.iter().map(|(p, v)| (*p, v.len() as i64)).collect();
    assert_eq!(ends.values().sum::<i64>(), records as i64);

    let progress = Arc::new(Progress::default());
    let pipeline = spawn_pipeline(broker.bootstrap(), ends.clone(), progress.clone(), seed);
    let mut kills = 0u64;
    for cycle in 0..cycles {
        // Strike after some progress since the restart, at a random point of a transaction.
        let from = progress.processed.load(Ordering::Relaxed);
        let after = from + 1 + rng.below(RECORDS_PER_CYCLE as u64 / 2);
        common::eventually(TIMEOUT, "pipeline progress after the restart", || {
            progress.processed.load(Ordering::Relaxed) >= after
                || progress.done.load(Ordering::Relaxed)
        });
        if progress.done.load(Ordering::Relaxed) {
            break;
        }
        std::thread::sleep(Duration::from_millis(rng.below(30)));
        broker.kill_and_restart();
        kills += 1;
        eprintln!(
            "txn_crash_loop: cycle {cycle}: killed with {} records processed in {} commits",
            progress.processed.load(Ordering::Relaxed),
            progress.commits.load(Ordering::Relaxed)
        );
    }
    // The pipeline ends when the input is processed, or gives up after TIMEOUT without
    // progress.
    pipeline.join().expect("pipeline thread");
    assert!(progress.done.load(Ordering::Relaxed), "the pipeline gave up (see its errors)");

    let output = read_all(&broker, OUTPUT, "read_committed");
    let mut lost = 0;
    let mut duplicated = 0;
    for (partition, values) in &input {
        let expected: Vec<String> = values.iter().map(|v| transform(v)).collect();
        let got = output.get(partition).cloned().unwrap_or_default();
        let mut counts: BTreeMap<&str, i64> = expected.iter().map(|v| (v.as_str(), 0)).collect();
        for value in &got {
            *counts.entry(value.as_str()).or_default() += 1;
        }
        lost += counts.values().filter(|c| **c == 0).count();
        duplicated += counts.values().map(|c| (c - 1).max(0)).sum::<i64>();
        assert_eq!(got, expected, "partition {partition}: read_committed output");
    }
    let checker = consumer(&broker.bootstrap(), "read_committed");
    let committed = checker.committed_offsets(partitions(INPUT), CALL_TIMEOUT).unwrap();
    for element in committed.elements() {
        let end = ends[&element.partition()];
        assert_eq!(element.offset(), Offset::Offset(end), "committed offset of {element:?}");
    }
    let uncommitted: usize =
        read_all(&broker, OUTPUT, "read_uncommitted").values().map(Vec::len).sum();
    eprintln!(
        "txn_crash_loop summary: seed={seed} cycles={cycles} kills={kills} input={records} \
         commits={} incarnations={} application_crashes={} aborted_records={} lost={lost} \
         duplicated={duplicated}",
        progress.commits.load(Ordering::Relaxed),
        progress.incarnations.load(Ordering::Relaxed),
        progress.crashes.load(Ordering::Relaxed),
        uncommitted - records,
    );
    assert!(kills > 0, "no kill landed while the pipeline ran: the run proves nothing");
}
