//! End-to-end figures through librdkafka (the `rdkafka` crate), against any Kafka-API
//! broker: throughput (N messages, acks=all, then a consumer reads them all back) and
//! produce->consume latency at a fixed rate with linger.ms=0.
//!
//! Usage: e2e-rdkafka [--bootstrap HOST:PORT] [--messages N] [--size BYTES]
//!                    [--partitions P] [--rate MSG_PER_S] [--secs S] [--skip-throughput]
//!                    [--skip-latency] [-X KEY=VALUE]...
//! `-X` sets a librdkafka property on every client (repeatable), e.g.
//! `-X security.protocol=ssl -X ssl.ca.location=ca.pem` for an SSL listener.
//! Prints a human table and `RESULT key=value ...` lines for scripts.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hdrhistogram::Histogram;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Offset, TopicPartitionList};

struct Args {
    bootstrap: String,
    messages: usize,
    size: usize,
    partitions: i32,
    rate: u64,
    secs: u64,
    throughput: bool,
    latency: bool,
    /// librdkafka properties for every client (`-X key=value`).
    properties: Vec<(String, String)>,
}

fn parse_args() -> Args {
    let mut args = Args {
        bootstrap: "127.0.0.1:9092".into(),
        messages: 100_000,
        size: 1024,
        partitions: 3,
        rate: 200,
        secs: 20,
        throughput: true,
        latency: true,
        properties: Vec::new(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| usage(&format!("{flag} needs a value")));
        match flag.as_str() {
            "--bootstrap" => args.bootstrap = value(),
            "--messages" => args.messages = value().parse().unwrap_or_else(|_| usage("--messages")),
            "--size" => args.size = value().parse().unwrap_or_else(|_| usage("--size")),
            "--partitions" => {
                args.partitions = value().parse().unwrap_or_else(|_| usage("--partitions"))
            }
            "--rate" => args.rate = value().parse().unwrap_or_else(|_| usage("--rate")),
            "--secs" => args.secs = value().parse().unwrap_or_else(|_| usage("--secs")),
            "--skip-throughput" => args.throughput = false,
            "--skip-latency" => args.latency = false,
            "-X" => {
                let property = value();
                let Some((key, value)) = property.split_once('=') else { usage("-X KEY=VALUE") };
                args.properties.push((key.into(), value.into()));
            }
            "--help" | "-h" => usage(""),
            other => usage(&format!("unknown flag {other}")),
        }
    }
    args
}

fn usage(error: &str) -> ! {
    if !error.is_empty() {
        eprintln!("error: {error}");
    }
    eprintln!(
        "usage: e2e-rdkafka [--bootstrap HOST:PORT] [--messages N] [--size BYTES] \
         [--partitions P] [--rate MSG_PER_S] [--secs S] [--skip-throughput] [--skip-latency] [-X KEY=VALUE]..."
    );
    std::process::exit(if error.is_empty() { 0 } else { 2 });
}

fn main() {
    let args = parse_args();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let run_id = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis();
    if args.throughput {
        let topic = format!("bench-tp-{run_id}");
        create_topic(&runtime, &args, &topic);
        throughput(&runtime, &args, &topic);
    }
    if args.latency {
        let topic = format!("bench-lat-{run_id}");
        create_topic(&runtime, &args, &topic);
        latency(&runtime, &args, &topic);
    }
}

/// The settings every client starts from: the bootstrap address and the `-X` properties.
fn client_config(args: &Args) -> ClientConfig {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", &args.bootstrap);
    for (key, value) in &args.properties {
        config.set(key, value);
    }
    config
}

fn create_topic(runtime: &tokio::runtime::Runtime, args: &Args, topic: &str) {
    let admin: AdminClient<DefaultClientContext> = client_config(args).create().unwrap();
    let new = NewTopic::new(topic, args.partitions, TopicReplication::Fixed(1));
    for result in runtime.block_on(admin.create_topics(&[new], &AdminOptions::new())).unwrap() {
        result.unwrap_or_else(|(t, e)| panic!("creating {t}: {e}"));
    }
}

fn producer(args: &Args, linger_ms: &str) -> FutureProducer {
    client_config(args)
        .set("acks", "all")
        .set("linger.ms", linger_ms)
        .set("queue.buffering.max.messages", "1000000")
        .set("message.timeout.ms", "60000")
        .create()
        .unwrap()
}

fn throughput(runtime: &tokio::runtime::Runtime, args: &Args, topic: &str) {
    let producer = producer(args, "5");
    let payload = vec![b'x'; args.size];
    let started = Instant::now();
    runtime.block_on(async {
        let mut deliveries = Vec::with_capacity(args.messages);
        for i in 0..args.messages {
            let key = format!("{}", i % 1000);
            let record = FutureRecord::to(topic).key(&key).payload(&payload);
            deliveries.push(producer.send_result(record).map_err(|(e, _)| e).expect("queued"));
        }
        for d in deliveries {
            d.await.expect("delivery report").map_err(|(e, _)| e).expect("delivered");
        }
    });
    let produce_secs = started.elapsed().as_secs_f64();

    let consumer = consumer(args, "500");
    let mut assignment = TopicPartitionList::new();
    for p in 0..args.partitions {
        assignment.add_partition_offset(topic, p, Offset::Beginning).unwrap();
    }
    consumer.assign(&assignment).unwrap();
    let started = Instant::now();
    let mut received = 0;
    while received < args.messages {
        if let Some(m) = consumer.poll(Duration::from_secs(10)) {
            m.expect("consume");
            received += 1;
        } else {
            panic!("consumer stalled at {received} of {} messages", args.messages);
        }
    }
    let consume_secs = started.elapsed().as_secs_f64();
    let mb = (args.messages * args.size) as f64 / 1e6;
    println!(
        "throughput: {} x {} B, acks=all, {} partitions",
        args.messages, args.size, args.partitions
    );
    println!(
        "  produce  {:>10.0} msg/s  {:>8.1} MB/s",
        args.messages as f64 / produce_secs,
        mb / produce_secs
    );
    println!(
        "  consume  {:>10.0} msg/s  {:>8.1} MB/s",
        args.messages as f64 / consume_secs,
        mb / consume_secs
    );
    println!(
        "RESULT workload=throughput messages={} size={} produce_msg_s={:.0} produce_mb_s={:.1} consume_msg_s={:.0} consume_mb_s={:.1}",
        args.messages,
        args.size,
        args.messages as f64 / produce_secs,
        mb / produce_secs,
        args.messages as f64 / consume_secs,
        mb / consume_secs
    );
}

fn consumer(args: &Args, fetch_wait_ms: &str) -> BaseConsumer {
    client_config(args)
        .set("group.id", "e2e-rdkafka-assign-only")
        .set("enable.auto.commit", "false")
        .set("fetch.wait.max.ms", fetch_wait_ms)
        .set("fetch.min.bytes", "1")
        .create()
        .unwrap()
}

fn now_micros() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_micros() as u64
}

fn latency(runtime: &tokio::runtime::Runtime, args: &Args, topic: &str) {
    let total = (args.rate * args.secs) as usize;
    let consumer = consumer(args, "500");
    let mut assignment = TopicPartitionList::new();
    for p in 0..args.partitions {
        assignment.add_partition_offset(topic, p, Offset::End).unwrap();
    }
    consumer.assign(&assignment).unwrap();
    // Let the consumer resolve its end offsets before the first message goes out.
    let _ = consumer.poll(Duration::from_millis(1000));
    let receiver = std::thread::spawn(move || {
        let mut e2e = Histogram::<u64>::new(3).unwrap();
        let deadline = Instant::now() + Duration::from_secs(120);
        while (e2e.len() as usize) < total && Instant::now() < deadline {
            if let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) {
                let sent = u64::from_be_bytes(m.payload().unwrap()[..8].try_into().unwrap());
                e2e.record(now_micros().saturating_sub(sent)).unwrap();
            }
        }
        e2e
    });
    let producer = producer(args, "0");
    let mut payload = vec![b'x'; args.size.max(8)];
    let mut acks = Histogram::<u64>::new(3).unwrap();
    let interval = Duration::from_nanos(1_000_000_000 / args.rate.max(1));
    runtime.block_on(async {
        let start = Instant::now();
        let mut pending = Vec::new();
        for i in 0..total {
            let due = start + interval * i as u32;
            tokio::time::sleep_until(due.into()).await;
            payload[..8].copy_from_slice(&now_micros().to_be_bytes());
            let key = format!("{}", i % 1000);
            let sent = Instant::now();
            let d = producer
                .send_result(FutureRecord::to(topic).key(&key).payload(&payload))
                .map_err(|(e, _)| e)
                .expect("queued");
            pending.push(tokio::spawn(async move {
                d.await.expect("report").map_err(|(e, _)| e).expect("delivered");
                sent.elapsed().as_micros() as u64
            }));
        }
        for p in pending {
            acks.record(p.await.unwrap()).unwrap();
        }
    });
    let e2e = receiver.join().unwrap();
    println!(
        "latency: {} msg/s for {} s, {} B, acks=all, linger.ms=0",
        args.rate, args.secs, args.size
    );
    for (name, h) in [("produce->ack", &acks), ("produce->consume", &e2e)] {
        println!(
            "  {name:<17} p50 {:>6} us  p99 {:>6} us  p99.9 {:>6} us  max {:>6} us  (n={})",
            h.value_at_quantile(0.5),
            h.value_at_quantile(0.99),
            h.value_at_quantile(0.999),
            h.max(),
            h.len()
        );
    }
    println!(
        "RESULT workload=latency rate={} secs={} size={} sent={} received={} ack_p50_us={} ack_p99_us={} e2e_p50_us={} e2e_p99_us={} e2e_p999_us={} e2e_max_us={}",
        args.rate,
        args.secs,
        args.size,
        total,
        e2e.len(),
        acks.value_at_quantile(0.5),
        acks.value_at_quantile(0.99),
        e2e.value_at_quantile(0.5),
        e2e.value_at_quantile(0.99),
        e2e.value_at_quantile(0.999),
        e2e.max()
    );
}
