//! `produce` and `partitions` modes: N messages as fast as the in-flight window allows.
//!
//! Each producer opens one connection per partition leader, each on its own thread. A
//! connection keeps up to `in_flight` Produce requests outstanding, each carrying one
//! record batch of `batch` records for one partition, and times every request from the
//! write to its answer (produce->ack). With keys, message i has key `i % keys` and goes
//! where Kafka's murmur2 partitioner puts it; records fill a batch per partition in
//! arrival order, as a client with a full accumulator would. Without keys, whole batches
//! go round-robin over the partitions.

use std::collections::VecDeque;
use std::sync::{Arc, Barrier};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{ApiKey, InitProducerIdRequest, ProduceRequest, ProducerId};
use shardlog_benches::load::cluster::{self, topic_name, TopicLayout};
use shardlog_benches::load::conn::Connection;
use shardlog_benches::load::partitioner::partition_for_key;
use shardlog_benches::load::record_batch::{ProducerFields, RecordBatchWriter};

use crate::args::{Common, PartitionsArgs, ProduceArgs};
use crate::report::{fresh_topic, mb_per_s, new_histogram, record, Report};

/// Connects to the bootstrap broker, creates the topic (with `--replication-factor`) and
/// waits for its leaders.
pub fn prepare_topic(common: &Common, topic: &str, partitions: i32) -> Result<TopicLayout, String> {
    let bootstrap = &common.bootstrap;
    let mut conn = Connection::connect(bootstrap).map_err(|e| format!("{bootstrap}: {e}"))?;
    cluster::create_topic(&mut conn, topic, partitions, common.replication_factor)
        .map_err(|e| e.to_string())?;
    cluster::wait_for_layout(&mut conn, topic, partitions).map_err(|e| e.to_string())
}

pub fn run_mode(args: &ProduceArgs) -> Result<(), String> {
    let topic = args.common.topic.clone().unwrap_or_else(|| fresh_topic("produce"));
    let layout = prepare_topic(&args.common, &topic, args.partitions)?;
    let outcome = run_produce(args, &layout, args.keys)?;
    let mut report = Report::new("produce", &args.common.label);
    report
        .add("topic", &topic)
        .add("partitions", args.partitions)
        .add("replication_factor", args.common.replication_factor)
        .add("size", args.size)
        .add("acks", args.acks)
        .add("batch", args.batch)
        .add("producers", args.producers)
        .add("in_flight", args.in_flight)
        .add("idempotent", args.idempotent)
        .add("connections", outcome.connections);
    outcome.add_to(&mut report, args.size);
    report.print();
    Ok(())
}

pub fn run_partitions_mode(args: &PartitionsArgs) -> Result<(), String> {
    let mut produce = args.produce.clone();
    let most = args.counts.iter().copied().max().unwrap_or(1).max(1) as u64;
    // Every partition gets at least one full batch, and every count gets the same load.
    produce.messages = produce.messages.max(most * produce.batch as u64);
    let run = fresh_topic("partitions");
    let mut first_rate = None;
    for &count in &args.counts {
        produce.partitions = count;
        let topic = format!("{run}-{count}");
        let created = Instant::now();
        let layout = prepare_topic(&produce.common, &topic, count)?;
        let create_ms = created.elapsed().as_millis();
        let outcome = run_produce(&produce, &layout, 0)?;
        let rate = outcome.acked_messages as f64 / outcome.elapsed.as_secs_f64();
        let first = *first_rate.get_or_insert(rate);
        let mut report = Report::new("partitions", &produce.common.label);
        report
            .add("partitions", count)
            .add("size", produce.size)
            .add("acks", produce.acks)
            .add("batch", produce.batch)
            .add("in_flight", produce.in_flight)
            .add("connections", outcome.connections)
            .add("create_topic_ms", create_ms);
        outcome.add_to(&mut report, produce.size);
        report.add_f("ratio_to_first_pct", 100.0 * rate / first);
        report.print();
    }
    Ok(())
}

/// What a produce run measured.
pub struct ProduceOutcome {
    pub elapsed: Duration,
    pub sent_messages: u64,
    pub acked_messages: u64,
    pub error_partitions: u64,
    pub first_error: Option<String>,
    pub histogram: Histogram<u64>,
    pub connections: usize,
}

impl ProduceOutcome {
    pub fn new(connections: usize) -> ProduceOutcome {
        ProduceOutcome {
            elapsed: Duration::ZERO,
            sent_messages: 0,
            acked_messages: 0,
            error_partitions: 0,
            first_error: None,
            histogram: new_histogram(),
            connections,
        }
    }

    /// Releases the connection threads waiting at `barrier` (all connected) and merges
    /// what they measured; elapsed time runs from the release to the last one's end.
    pub fn collect(
        barrier: &Barrier,
        handles: Vec<JoinHandle<Result<ConnectionOutcome, String>>>,
    ) -> Result<ProduceOutcome, String> {
        barrier.wait();
        let started = Instant::now();
        let mut outcome = ProduceOutcome::new(handles.len());
        for handle in handles {
            outcome.merge(handle.join().map_err(|_| "a producer thread panicked".to_string())??);
        }
        outcome.elapsed = started.elapsed();
        Ok(outcome)
    }

    /// Adds one connection's counts and latencies.
    pub fn merge(&mut self, part: ConnectionOutcome) {
        self.sent_messages += part.sent_messages;
        self.acked_messages += part.acked_messages;
        self.error_partitions += part.error_partitions;
        self.first_error = self.first_error.take().or(part.first_error);
        self.histogram.add(&part.histogram).expect("same histogram bounds");
    }

    pub fn add_to(&self, report: &mut Report, size: usize) {
        let counted =
            self.acked_messages.max(if self.histogram.is_empty() { self.sent_messages } else { 0 });
        report
            .add("sent", self.sent_messages)
            .add("acked", self.acked_messages)
            .add("errors", self.error_partitions)
            .add_f("elapsed_ms", self.elapsed.as_secs_f64() * 1e3)
            .add_f("msg_per_s", counted as f64 / self.elapsed.as_secs_f64())
            .add_f("mb_per_s", mb_per_s(counted * size as u64, self.elapsed))
            .add_latency("ack", &self.histogram);
        if let Some(e) = &self.first_error {
            report.add("first_error", e.replace(' ', "_"));
        }
    }
}

/// Runs the produce load against `layout` and returns the merged outcome.
pub fn run_produce(
    args: &ProduceArgs,
    layout: &TopicLayout,
    keys: u64,
) -> Result<ProduceOutcome, String> {
    if args.size < 16 || args.batch == 0 || args.in_flight == 0 || args.producers == 0 {
        return Err("need --size >= 16, --batch, --in-flight and --producers >= 1".into());
    }
    if args.idempotent && (args.acks != -1 || args.in_flight > 5) {
        return Err("--idempotent needs --acks all and --in-flight <= 5".into());
    }
    let by_leader = layout.by_leader();
    let connections = args.producers * by_leader.len();
    let barrier = Arc::new(Barrier::new(connections + 1));
    let key_partitions: Arc<Vec<i32>> = Arc::new(
        (0..keys).map(|k| partition_for_key(k.to_string().as_bytes(), args.partitions)).collect(),
    );
    let mut handles = Vec::new();
    for producer in 0..args.producers {
        let producer_id =
            if args.idempotent { Some(init_producer_id(&args.common.bootstrap)?) } else { None };
        for (leader, partitions) in &by_leader {
            let mut mine = vec![false; args.partitions as usize];
            partitions.iter().for_each(|&p| mine[p as usize] = true);
            let plan = ConnectionPlan {
                leader: leader.clone(),
                topic: layout.topic.clone(),
                args: args.clone(),
                source: BatchSource::new(args, producer as u64, mine, key_partitions.clone()),
                producer_id,
            };
            let barrier = barrier.clone();
            handles.push(std::thread::spawn(move || produce_connection(plan, &barrier)));
        }
    }
    ProduceOutcome::collect(&barrier, handles)
}

struct ConnectionPlan {
    leader: String,
    topic: String,
    args: ProduceArgs,
    source: BatchSource,
    /// (producer id, epoch) of an idempotent producer.
    producer_id: Option<(i64, i16)>,
}

/// Asks the bootstrap broker for a producer id (idempotent, not transactional).
fn init_producer_id(bootstrap: &str) -> Result<(i64, i16), String> {
    let mut conn = Connection::connect(bootstrap).map_err(|e| format!("{bootstrap}: {e}"))?;
    let version = conn.version(ApiKey::InitProducerId).map_err(|e| e.to_string())?;
    let request = InitProducerIdRequest::default()
        .with_transaction_timeout_ms(60_000)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    let response = conn.call(&request, version).map_err(|e| e.to_string())?;
    if response.error_code != 0 {
        return Err(format!("InitProducerId error {}", response.error_code));
    }
    Ok((response.producer_id.0, response.producer_epoch))
}

/// The batches one connection sends: (partition, message indices).
struct BatchSource {
    keyed: bool,
    next: u64,
    step: u64,
    total: u64,
    batch: usize,
    partitions: i32,
    mine: Vec<bool>,
    key_partitions: Arc<Vec<i32>>,
    pending: Vec<Vec<u64>>,
    flush_cursor: usize,
}

impl BatchSource {
    fn new(args: &ProduceArgs, producer: u64, mine: Vec<bool>, keys: Arc<Vec<i32>>) -> Self {
        BatchSource {
            keyed: !keys.is_empty(),
            next: producer,
            step: args.producers as u64,
            total: args.messages,
            batch: args.batch,
            partitions: args.partitions,
            pending: vec![Vec::new(); if keys.is_empty() { 0 } else { mine.len() }],
            mine,
            key_partitions: keys,
            flush_cursor: 0,
        }
    }

    fn next_batch(&mut self) -> Option<(i32, Vec<u64>)> {
        if self.keyed {
            self.next_keyed()
        } else {
            self.next_round_robin()
        }
    }

    fn next_keyed(&mut self) -> Option<(i32, Vec<u64>)> {
        while self.next < self.total {
            let message = self.next;
            self.next += self.step;
            let keys = self.key_partitions.len() as u64;
            let partition = self.key_partitions[(message % keys) as usize];
            if !self.mine[partition as usize] {
                continue;
            }
            let pending = &mut self.pending[partition as usize];
            pending.push(message);
            if pending.len() == self.batch {
                return Some((partition, std::mem::take(pending)));
            }
        }
        // Linger is over: flush the partial batches.
        while self.flush_cursor < self.pending.len() {
            let partition = self.flush_cursor;
            self.flush_cursor += 1;
            if !self.pending[partition].is_empty() {
                return Some((partition as i32, std::mem::take(&mut self.pending[partition])));
            }
        }
        None
    }

    fn next_round_robin(&mut self) -> Option<(i32, Vec<u64>)> {
        let batch = self.batch as u64;
        loop {
            let global_batch = self.next;
            let first = global_batch * batch;
            if first >= self.total {
                return None;
            }
            self.next += self.step;
            let partition = (global_batch % self.partitions as u64) as i32;
            if self.mine[partition as usize] {
                return Some((partition, (first..(first + batch).min(self.total)).collect()));
            }
        }
    }
}

/// What one connection measured.
pub struct ConnectionOutcome {
    pub sent_messages: u64,
    pub acked_messages: u64,
    pub error_partitions: u64,
    pub first_error: Option<String>,
    pub histogram: Histogram<u64>,
}

impl ConnectionOutcome {
    pub fn new() -> ConnectionOutcome {
        ConnectionOutcome {
            sent_messages: 0,
            acked_messages: 0,
            error_partitions: 0,
            first_error: None,
            histogram: new_histogram(),
        }
    }

    /// Waits for the oldest Produce answer on `conn`, records its produce->ack time (sent
    /// at the front of `sent_at`) and counts its partitions' errors; returns the partitions
    /// it acknowledged and the ones it refused.
    pub fn await_ack(
        &mut self,
        conn: &mut Connection,
        sent_at: &mut VecDeque<Instant>,
    ) -> Result<(u64, u64), String> {
        let response = conn.recv::<ProduceRequest>().map_err(|e| e.to_string())?;
        let at = sent_at.pop_front().expect("a send time per request in flight");
        record(&mut self.histogram, at.elapsed());
        let (mut acked, mut refused) = (0, 0);
        for partition in response.responses.iter().flat_map(|t| &t.partition_responses) {
            if partition.error_code == 0 {
                acked += 1;
                continue;
            }
            refused += 1;
            self.error_partitions += 1;
            self.first_error.get_or_insert_with(|| {
                format!("partition {} error {}", partition.index, partition.error_code)
            });
        }
        Ok((acked, refused))
    }
}

/// Writes a value: send time (ns since `epoch`), the message index, then filler.
pub fn fill_value(value: &mut [u8], epoch: Instant, message: u64) {
    let now_ns = epoch.elapsed().as_nanos() as u64;
    value[..8].copy_from_slice(&now_ns.to_be_bytes());
    value[8..16].copy_from_slice(&message.to_be_bytes());
}

/// Builds a Produce request with one record batch for one partition.
pub fn produce_request(topic: &str, partition: i32, acks: i16, records: Bytes) -> ProduceRequest {
    ProduceRequest::default().with_acks(acks).with_timeout_ms(30_000).with_topic_data(vec![
        TopicProduceData::default().with_name(topic_name(topic)).with_partition_data(vec![
            PartitionProduceData::default().with_index(partition).with_records(Some(records)),
        ]),
    ])
}

/// Wall-clock milliseconds for record timestamps.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn produce_connection(
    mut plan: ConnectionPlan,
    barrier: &Barrier,
) -> Result<ConnectionOutcome, String> {
    let connected = Connection::connect(&plan.leader);
    barrier.wait();
    let mut conn = connected.map_err(|e| format!("{}: {e}", plan.leader))?;
    let version = conn.version(ApiKey::Produce).map_err(|e| e.to_string())?;
    let args = &plan.args;
    let epoch = Instant::now();
    let mut value = vec![b'x'; args.size];
    let mut key = String::new();
    let mut sent_at = VecDeque::new();
    let mut sizes = VecDeque::new();
    let mut out = ConnectionOutcome::new();
    let keys = plan.source.key_partitions.len() as u64;
    // Next sequence number per partition (idempotent producer only).
    let mut sequences = vec![0i32; plan.args.partitions as usize];
    loop {
        while conn.in_flight() < args.in_flight {
            let Some((partition, messages)) = plan.source.next_batch() else { break };
            let mut buf = Vec::with_capacity(messages.len() * (args.size + 24) + 64);
            let producer = match plan.producer_id {
                Some((producer_id, producer_epoch)) => {
                    let base_sequence = sequences[partition as usize];
                    sequences[partition as usize] += messages.len() as i32;
                    ProducerFields { producer_id, producer_epoch, base_sequence }
                }
                None => ProducerFields::NONE,
            };
            let mut writer = RecordBatchWriter::with_producer(&mut buf, now_ms(), producer);
            for &message in &messages {
                fill_value(&mut value, epoch, message);
                if keys > 0 {
                    use std::fmt::Write;
                    key.clear();
                    write!(key, "{}", message % keys).expect("write to a String");
                    writer.push(Some(key.as_bytes()), &value);
                } else {
                    writer.push(None, &value);
                }
            }
            writer.finish();
            let request = produce_request(&plan.topic, partition, args.acks, buf.into());
            let n = messages.len() as u64;
            out.sent_messages += n;
            if args.acks == 0 {
                conn.send_no_response(&request, version).map_err(|e| e.to_string())?;
            } else {
                conn.send(&request, version).map_err(|e| e.to_string())?;
                sent_at.push_back(Instant::now());
                sizes.push_back(n);
            }
        }
        // Nothing in flight means the source is exhausted (acks=0 never has any).
        if conn.in_flight() == 0 {
            break;
        }
        let (_, refused) = out.await_ack(&mut conn, &mut sent_at)?;
        let n = sizes.pop_front().expect("a size per request in flight");
        if refused == 0 {
            out.acked_messages += n;
        }
    }
    Ok(out)
}
