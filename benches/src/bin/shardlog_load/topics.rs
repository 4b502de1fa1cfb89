//! `topics` mode: N topics x P partitions created up front, then a produce load spread
//! over every partition of every topic, once per request shape.
//!
//! Set-up: CreateTopics `--create-batch` topics per request, then Metadata for the same
//! chunks until every partition has a leader; the broker's RSS before and after (with
//! `--broker-pid`), and, with `--touch-each`, after one record in every partition. With
//! `--requests`, the latency of single-partition requests (`requests.rs`).
//!
//! Load: one connection per leader. A connection walks its partitions in topic order,
//! round-robin, one record batch of `--batch` records per partition visit, so every
//! partition gets batches at the same rate and each shape carries the same records
//! whatever the topic count. Shapes: `many` puts up to `--partitions-per-request`
//! batches (different partitions, grouped by topic) in one Produce request, as the Java
//! client drains its accumulator per broker; `one` sends each batch in its own request,
//! as librdkafka does. Bytes flushed per message come from the broker's
//! `shardlog_fsync_bytes_sum` (before and after, all shards).

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{ApiKey, ProduceRequest, TopicName};
use shardlog_benches::load::cluster::{self, topic_name, TopicLayout};
use shardlog_benches::load::conn::Connection;
use shardlog_benches::load::record_batch::RecordBatchWriter;

use crate::args::TopicsArgs;
use crate::probe;
use crate::produce::{fill_value, now_ms, ConnectionOutcome, ProduceOutcome};
use crate::report::{fresh_topic, Report};
use crate::requests;

const FSYNC_BYTES: &str = "shardlog_fsync_bytes_sum";
const FSYNCS: &str = "shardlog_fsync_bytes_count";

pub fn run_mode(args: &TopicsArgs) -> Result<(), String> {
    if args.size < 16 || args.batch == 0 || args.in_flight == 0 || args.topics == 0 {
        return Err("need --size >= 16, --batch, --in-flight and --topics >= 1".into());
    }
    if args.partitions < 1 || args.partitions_per_request == 0 {
        return Err("need --partitions and --partitions-per-request >= 1".into());
    }
    let shapes = shapes(&args.shapes)?;
    let probe = Probe { args };
    let prefix = args.prefix.clone().unwrap_or_else(|| fresh_topic("topics"));
    let names: Vec<String> = (0..args.topics).map(|i| format!("{prefix}-{i}")).collect();
    let rss_empty = probe.rss()?;
    let mut conn =
        Connection::connect(&args.bootstrap).map_err(|e| format!("{}: {e}", args.bootstrap))?;
    let started = Instant::now();
    cluster::create_topics(&mut conn, &names, args.partitions, 1, args.create_batch)
        .map_err(|e| e.to_string())?;
    let created = started.elapsed();
    let layouts = cluster::wait_for_layouts(&mut conn, &names, args.partitions, args.create_batch)
        .map_err(|e| e.to_string())?;
    let ready = started.elapsed();
    drop(conn);
    let plan = LoadPlan::new(&layouts);
    let total_partitions = plan.partitions();
    let rss_created = probe.rss()?;

    let mut report = Report::new("topics_setup", &args.label);
    report
        .add("topics", args.topics)
        .add("partitions_per_topic", args.partitions)
        .add("partitions", total_partitions)
        .add_f("create_ms", created.as_secs_f64() * 1e3)
        .add_f("ready_ms", ready.as_secs_f64() * 1e3);
    add_rss(&mut report, "rss_empty_kib", rss_empty);
    add_rss(&mut report, "rss_created_kib", rss_created);
    add_per_partition(
        &mut report,
        "idle_bytes_per_partition",
        rss_empty,
        rss_created,
        total_partitions,
    );
    if args.touch_each {
        // One record in each partition, --partitions-per-request of them per request.
        let touch = Load { shape: Shape::Many, batch: 1, batches: total_partitions as u64 };
        let outcome = plan.run(args, &touch)?;
        if outcome.acked_messages != total_partitions as u64 {
            return Err(format!(
                "touching every partition: {} of {total_partitions} acknowledged ({})",
                outcome.acked_messages,
                outcome.first_error.unwrap_or_default()
            ));
        }
        let rss_touched = probe.rss()?;
        add_rss(&mut report, "rss_one_record_each_kib", rss_touched);
        add_per_partition(
            &mut report,
            "one_record_bytes_per_partition",
            rss_empty,
            rss_touched,
            total_partitions,
        );
    }
    report.print();
    if args.requests > 0 {
        requests::run(&args.bootstrap, &layouts, args.requests, args.requests_among, &args.label)?;
    }

    let batches = args.messages.div_ceil(args.batch as u64).max(total_partitions as u64);
    for shape in shapes {
        let load = Load { shape, batch: args.batch, batches };
        let before = probe.metrics()?;
        let outcome = plan.run(args, &load)?;
        let after = probe.metrics()?;
        let mut report = Report::new("topics", &args.label);
        report
            .add("shape", shape.name())
            .add("topics", args.topics)
            .add("partitions", total_partitions)
            .add("size", args.size)
            .add("acks", args.acks)
            .add("batch", args.batch)
            .add("partitions_per_request", load.partitions_per_request(args))
            .add("in_flight", args.in_flight)
            .add("connections", outcome.connections);
        outcome.add_to(&mut report, args.size);
        if let (Some(before), Some(after)) = (before, after) {
            let acked = outcome.acked_messages.max(1) as f64;
            let bytes =
                probe::sum_samples(&after, FSYNC_BYTES) - probe::sum_samples(&before, FSYNC_BYTES);
            let fsyncs = probe::sum_samples(&after, FSYNCS) - probe::sum_samples(&before, FSYNCS);
            report
                .add_f("flushed_bytes_per_msg", bytes / acked)
                .add_f("msgs_per_flush", acked / fsyncs.max(1.0));
        }
        add_rss(&mut report, "rss_after_kib", probe.rss()?);
        report.print();
    }
    Ok(())
}

fn shapes(names: &[String]) -> Result<Vec<Shape>, String> {
    let mut shapes = Vec::new();
    for name in names {
        match name.as_str() {
            "many" => shapes.push(Shape::Many),
            "one" => shapes.push(Shape::One),
            "none" | "" => {}
            other => return Err(format!("--shapes takes many, one or none, not {other}")),
        }
    }
    Ok(shapes)
}

fn add_rss(report: &mut Report, key: &str, rss_kib: Option<u64>) {
    if let Some(rss_kib) = rss_kib {
        report.add(key, rss_kib);
    }
}

fn add_per_partition(
    report: &mut Report,
    key: &str,
    before_kib: Option<u64>,
    after_kib: Option<u64>,
    partitions: usize,
) {
    if let (Some(before), Some(after)) = (before_kib, after_kib) {
        let delta = after as f64 - before as f64;
        report.add_f(key, delta * 1024.0 / partitions as f64);
    }
}

/// The broker-side readings the flags ask for.
struct Probe<'a> {
    args: &'a TopicsArgs,
}

impl Probe<'_> {
    fn rss(&self) -> Result<Option<u64>, String> {
        let Some(pid) = self.args.broker_pid else { return Ok(None) };
        std::thread::sleep(Duration::from_millis(self.args.settle_ms));
        probe::rss_kib(pid).map(Some)
    }

    fn metrics(&self) -> Result<Option<String>, String> {
        self.args.admin_addr.as_deref().map(probe::scrape).transpose()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    Many,
    One,
}

impl Shape {
    fn name(self) -> &'static str {
        match self {
            Shape::Many => "many",
            Shape::One => "one",
        }
    }
}

/// One produce load: `batches` record batches of `batch` records, in `shape`.
#[derive(Debug, Clone, Copy)]
struct Load {
    shape: Shape,
    batch: usize,
    batches: u64,
}

impl Load {
    fn partitions_per_request(&self, args: &TopicsArgs) -> usize {
        match self.shape {
            Shape::Many => args.partitions_per_request,
            Shape::One => 1,
        }
    }
}

/// Every partition, grouped by leader, each leader's in topic order.
struct LoadPlan {
    topics: Arc<Vec<TopicName>>,
    /// leader address -> (topic index, partition) pairs.
    by_leader: BTreeMap<String, Arc<Vec<(u32, i32)>>>,
}

impl LoadPlan {
    fn new(layouts: &[TopicLayout]) -> LoadPlan {
        let mut by_leader: BTreeMap<String, Vec<(u32, i32)>> = BTreeMap::new();
        for (topic, layout) in layouts.iter().enumerate() {
            for (leader, partitions) in layout.by_leader() {
                let mine = by_leader.entry(leader).or_default();
                mine.extend(partitions.into_iter().map(|p| (topic as u32, p)));
            }
        }
        LoadPlan {
            topics: Arc::new(layouts.iter().map(|l| topic_name(&l.topic)).collect()),
            by_leader: by_leader.into_iter().map(|(k, v)| (k, Arc::new(v))).collect(),
        }
    }

    fn partitions(&self) -> usize {
        self.by_leader.values().map(|v| v.len()).sum()
    }

    /// Runs `load` over every leader at once; each gets batches in proportion to its
    /// partitions, and at least one per partition.
    fn run(&self, args: &TopicsArgs, load: &Load) -> Result<ProduceOutcome, String> {
        let total = self.partitions() as u64;
        let barrier = Arc::new(Barrier::new(self.by_leader.len() + 1));
        let mut handles = Vec::new();
        for (leader, partitions) in &self.by_leader {
            let share = (load.batches * partitions.len() as u64).div_ceil(total);
            let connection = LeaderLoad {
                leader: leader.clone(),
                topics: self.topics.clone(),
                partitions: partitions.clone(),
                batches: share.max(partitions.len() as u64),
                per_request: load.partitions_per_request(args).min(partitions.len()),
                batch: load.batch,
                size: args.size,
                acks: args.acks,
                in_flight: args.in_flight,
            };
            let barrier = barrier.clone();
            handles.push(std::thread::spawn(move || connection.run(&barrier)));
        }
        ProduceOutcome::collect(&barrier, handles)
    }
}

/// What one connection (one leader) sends.
struct LeaderLoad {
    leader: String,
    topics: Arc<Vec<TopicName>>,
    partitions: Arc<Vec<(u32, i32)>>,
    batches: u64,
    per_request: usize,
    batch: usize,
    size: usize,
    acks: i16,
    in_flight: usize,
}

impl LeaderLoad {
    fn run(self, barrier: &Barrier) -> Result<ConnectionOutcome, String> {
        let connected = Connection::connect(&self.leader);
        barrier.wait();
        let mut conn = connected.map_err(|e| format!("{}: {e}", self.leader))?;
        let version = conn.version(ApiKey::Produce).map_err(|e| e.to_string())?;
        let epoch = Instant::now();
        let mut value = vec![b'x'; self.size];
        let mut out = ConnectionOutcome::new();
        let mut sent_at = VecDeque::new();
        let (mut cursor, mut sent_batches, mut message) = (0usize, 0u64, 0u64);
        loop {
            while conn.in_flight() < self.in_flight && sent_batches < self.batches {
                let n = (self.per_request as u64).min(self.batches - sent_batches) as usize;
                let mut topic_data: Vec<TopicProduceData> = Vec::new();
                for _ in 0..n {
                    let (topic, partition) = self.partitions[cursor];
                    cursor = (cursor + 1) % self.partitions.len();
                    let mut buf = Vec::with_capacity(self.batch * (self.size + 24) + 64);
                    let mut writer = RecordBatchWriter::new(&mut buf, now_ms());
                    for _ in 0..self.batch {
                        fill_value(&mut value, epoch, message);
                        writer.push(None, &value);
                        message += 1;
                    }
                    writer.finish();
                    let data = PartitionProduceData::default()
                        .with_index(partition)
                        .with_records(Some(buf.into()));
                    let name = &self.topics[topic as usize];
                    match topic_data.last_mut() {
                        Some(last) if last.name == *name => last.partition_data.push(data),
                        _ => topic_data.push(
                            TopicProduceData::default()
                                .with_name(name.clone())
                                .with_partition_data(vec![data]),
                        ),
                    }
                }
                let request = ProduceRequest::default()
                    .with_acks(self.acks)
                    .with_timeout_ms(30_000)
                    .with_topic_data(topic_data);
                sent_batches += n as u64;
                out.sent_messages += (n * self.batch) as u64;
                if self.acks == 0 {
                    conn.send_no_response(&request, version).map_err(|e| e.to_string())?;
                } else {
                    conn.send(&request, version).map_err(|e| e.to_string())?;
                    sent_at.push_back(Instant::now());
                }
            }
            if conn.in_flight() == 0 {
                break;
            }
            let (acked, _) = out.await_ack(&mut conn, &mut sent_at)?;
            out.acked_messages += acked * self.batch as u64;
        }
        Ok(out)
    }
}
