//! `e2e` mode: a fixed produce rate while consumers long-poll, end-to-end latency.
//!
//! Message k is due at `start + k / rate` and goes to partition `k % partitions`, alone
//! in its record batch and its Produce request (a client with linger.ms=0). Its value
//! starts with the send time in nanoseconds since a process-wide epoch; consumers (one
//! thread per leader, Fetch with `max_wait_ms`) take `now - send time` per record. The
//! stamp is the real send time, not the due time: a sender that falls behind shows up as
//! `achieved_rate` below `rate`, not as latency.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use kafka_protocol::messages::{ApiKey, ProduceRequest};
use shardlog_benches::load::cluster::TopicLayout;
use shardlog_benches::load::conn::Connection;
use shardlog_benches::load::record_batch::RecordBatchWriter;

use crate::args::E2eArgs;
use crate::consume::{FetchSettings, PartitionReader};
use crate::produce::{fill_value, now_ms, prepare_topic, produce_request};
use crate::report::{fresh_topic, new_histogram, record, Report};

/// How long consumers keep reading after the last send.
const DRAIN: Duration = Duration::from_secs(5);

struct Shared {
    epoch: Instant,
    start: Instant,
    total: u64,
    producing_done: AtomicBool,
    sent: AtomicU64,
    received: AtomicU64,
}

pub fn run_mode(args: &E2eArgs) -> Result<(), String> {
    if args.size < 16 || args.rate == 0 || args.in_flight == 0 {
        return Err("need --size >= 16, --rate >= 1 and --in-flight >= 1".into());
    }
    let topic = args.common.topic.clone().unwrap_or_else(|| fresh_topic("e2e"));
    let layout = prepare_topic(&args.common, &topic, args.partitions)?;
    let by_leader = layout.by_leader();
    let settings = FetchSettings {
        max_wait_ms: args.max_wait_ms,
        min_bytes: 1,
        partition_max_bytes: 1 << 20,
        max_bytes: 64 << 20,
    };
    let mut readers = Vec::new();
    let mut producers = Vec::new();
    for (leader, partitions) in &by_leader {
        readers.push(PartitionReader::new(leader, &topic, partitions, settings.clone())?);
        producers.push(Connection::connect(leader).map_err(|e| format!("{leader}: {e}"))?);
    }
    let now = Instant::now();
    let shared = Arc::new(Shared {
        epoch: now,
        start: now + Duration::from_millis(200),
        total: args.rate * args.secs,
        producing_done: AtomicBool::new(false),
        sent: AtomicU64::new(0),
        received: AtomicU64::new(0),
    });
    let consumer_handles: Vec<_> = readers
        .into_iter()
        .map(|reader| {
            let shared = shared.clone();
            std::thread::spawn(move || consume_until_done(reader, &shared))
        })
        .collect();
    let producer_handles: Vec<_> = producers
        .into_iter()
        .map(|conn| {
            let (shared, args, layout) = (shared.clone(), args.clone(), layout.clone());
            std::thread::spawn(move || produce_at_rate(conn, &args, &layout, &shared))
        })
        .collect();
    let mut ack = new_histogram();
    let mut produce_errors = 0;
    for handle in producer_handles {
        let (h, errors) = handle.join().map_err(|_| "a producer thread panicked")??;
        ack.add(&h).expect("same bounds");
        produce_errors += errors;
    }
    let producing_secs = shared.start.elapsed().as_secs_f64();
    shared.producing_done.store(true, Ordering::SeqCst);
    let mut e2e = new_histogram();
    for handle in consumer_handles {
        e2e.add(&handle.join().map_err(|_| "a consumer thread panicked")??).expect("same bounds");
    }
    let sent = shared.sent.load(Ordering::SeqCst);
    let received = shared.received.load(Ordering::SeqCst);
    let mut report = Report::new("e2e", &args.common.label);
    report
        .add("topic", &topic)
        .add("partitions", args.partitions)
        .add("replication_factor", args.common.replication_factor)
        .add("size", args.size)
        .add("acks", args.acks)
        .add("rate", args.rate)
        .add("secs", args.secs)
        .add_f("achieved_rate", sent as f64 / producing_secs)
        .add("sent", sent)
        .add("received", received)
        .add("produce_errors", produce_errors)
        .add_latency("e2e", &e2e)
        .add_latency("ack", &ack);
    report.print();
    Ok(())
}

fn produce_at_rate(
    mut conn: Connection,
    args: &E2eArgs,
    layout: &TopicLayout,
    shared: &Shared,
) -> Result<(Histogram<u64>, u64), String> {
    let version = conn.version(ApiKey::Produce).map_err(|e| e.to_string())?;
    let mine: Vec<bool> = layout.leaders.iter().map(|l| *l == conn.addr).collect();
    let partitions = args.partitions as u64;
    let interval_ns = 1e9 / args.rate as f64;
    let due = |k: u64| shared.start + Duration::from_nanos((k as f64 * interval_ns) as u64);
    let next_mine = |mut k: u64| {
        while k < shared.total && !mine[(k % partitions) as usize] {
            k += 1;
        }
        k
    };
    let mut histogram = new_histogram();
    let mut sent_at = std::collections::VecDeque::new();
    let mut value = vec![b'x'; args.size];
    let (mut k, mut errors) = (next_mine(0), 0u64);
    loop {
        while k < shared.total && conn.in_flight() < args.in_flight && due(k) <= Instant::now() {
            let mut buf = Vec::with_capacity(args.size + 128);
            let mut writer = RecordBatchWriter::new(&mut buf, now_ms());
            fill_value(&mut value, shared.epoch, k);
            writer.push(None, &value);
            writer.finish();
            let partition = (k % partitions) as i32;
            let request = produce_request(&layout.topic, partition, args.acks, buf.into());
            if args.acks == 0 {
                conn.send_no_response(&request, version).map_err(|e| e.to_string())?;
            } else {
                conn.send(&request, version).map_err(|e| e.to_string())?;
                sent_at.push_back(Instant::now());
            }
            shared.sent.fetch_add(1, Ordering::SeqCst);
            k = next_mine(k + 1);
        }
        if k >= shared.total && conn.in_flight() == 0 {
            return Ok((histogram, errors));
        }
        let wait = if k < shared.total {
            due(k).saturating_duration_since(Instant::now())
        } else {
            Duration::from_millis(100)
        };
        if conn.in_flight() == 0 {
            std::thread::sleep(wait);
            continue;
        }
        let answer = conn.recv_timeout::<ProduceRequest>(wait).map_err(|e| e.to_string())?;
        if let Some(response) = answer {
            record(&mut histogram, sent_at.pop_front().expect("in flight").elapsed());
            let failed = response.responses.iter().flat_map(|t| &t.partition_responses);
            errors += failed.filter(|p| p.error_code != 0).count() as u64;
        }
    }
}

fn consume_until_done(
    mut reader: PartitionReader,
    shared: &Shared,
) -> Result<Histogram<u64>, String> {
    let mut histogram = new_histogram();
    let mut drain_deadline = None;
    loop {
        let delivered = reader.fetch(true, false, |_, _, value| {
            let sent_ns = u64::from_be_bytes(value[..8].try_into().expect("values >= 16 bytes"));
            let now_ns = shared.epoch.elapsed().as_nanos() as u64;
            record(&mut histogram, Duration::from_nanos(now_ns.saturating_sub(sent_ns)));
        })?;
        let received = shared.received.fetch_add(delivered, Ordering::SeqCst) + delivered;
        if shared.producing_done.load(Ordering::SeqCst) {
            if received >= shared.sent.load(Ordering::SeqCst) {
                return Ok(histogram);
            }
            let deadline = *drain_deadline.get_or_insert_with(|| Instant::now() + DRAIN);
            if Instant::now() > deadline {
                return Ok(histogram);
            }
        }
    }
}
