//! Many topics (issue 19), a measurement, not a check: `#[ignore]`d, run by hand.
//!
//! Creates `SHARDLOG_MANY_TOPICS` topics (default 10,000) x 4 partitions, one CreateTopics
//! request each, on shard 0's own port of a 2-shard release broker, and prints per
//! thousand: the median and 90th-percentile create time and the bytes shard 0's log
//! flushed per create (`shardlog_fsync_bytes_sum`). Then kill -9, restart, and the time
//! from the restart to the first Metadata answer that names the last topic.
//!
//! ```text
//! cargo test --release --test many_topics -- --ignored --nocapture
//! SHARDLOG_BENCH_BIN=/work/main/target/release/shardlog cargo test ...   # another build
//! ```
//! Figures: docs/benchmarks.md, "Many topics".

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::{Broker, RawClient};
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreateTopicsRequest};
use kafka_protocol::messages::metadata_request::{MetadataRequest, MetadataRequestTopic};
use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind, TopicName};
use kafka_protocol::protocol::StrBytes;

fn topic_name(i: usize) -> TopicName {
    TopicName(StrBytes::from_string(format!("many-topics-{i:06}")))
}

fn create(client: &mut RawClient, i: usize) {
    let topic = CreatableTopic::default()
        .with_name(topic_name(i))
        .with_num_partitions(4)
        .with_replication_factor(1);
    let request = CreateTopicsRequest::default().with_topics(vec![topic]).with_timeout_ms(30_000);
    match client.call(ApiKey::CreateTopics, 5, RequestKind::CreateTopics(request)) {
        ResponseKind::CreateTopics(r) => assert_eq!(r.topics[0].error_code, 0, "topic {i}"),
        other => panic!("{other:?}"),
    }
}

/// Bytes shard 0's log has flushed so far.
fn shard0_flushed_bytes(broker: &Broker) -> f64 {
    let addr = SocketAddr::from(([127, 0, 0, 1], broker.admin_port));
    let mut stream = TcpStream::connect(addr).expect("the admin port");
    stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: bench\r\n\r\n").unwrap();
    let mut body = String::new();
    stream.read_to_string(&mut body).unwrap();
    let line = body
        .lines()
        .find(|l| l.starts_with("shardlog_fsync_bytes_sum{") && l.contains("shard=\"0\""))
        .expect("shard 0's flushed bytes");
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

/// Whether Metadata for topic `i` answers with its 4 partitions.
fn metadata_knows(addr: SocketAddr, i: usize) -> bool {
    let Ok(stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(100)) else {
        return false;
    };
    drop(stream);
    let mut client = RawClient::connect(addr);
    let topic = MetadataRequestTopic::default().with_name(Some(topic_name(i)));
    let request = MetadataRequest::default().with_topics(Some(vec![topic]));
    match client.call(ApiKey::Metadata, 9, RequestKind::Metadata(request)) {
        ResponseKind::Metadata(r) => {
            r.topics[0].error_code == 0 && r.topics[0].partitions.len() == 4
        }
        _ => false,
    }
}

fn percentile(sorted: &[Duration], p: usize) -> f64 {
    sorted[(sorted.len() - 1) * p / 100].as_secs_f64() * 1e3
}

#[test]
#[ignore = "a measurement: run by hand (docs/benchmarks.md, Many topics)"]
fn many_topics_create_cost_and_restart_time() {
    let topics: usize =
        std::env::var("SHARDLOG_MANY_TOPICS").map_or(10_000, |v| v.parse().unwrap());
    let mut broker = Broker::start(2, &["--segment-bytes", "134217728"]);
    let mut client = RawClient::connect(broker.shard_addr(0));
    let mut last_bytes = shard0_flushed_bytes(&broker);
    let mut window = Vec::with_capacity(1000);
    println!("thousand  create_ms_p50  create_ms_p90  shard0_bytes_per_create");
    for i in 0..topics {
        let started = Instant::now();
        create(&mut client, i);
        window.push(started.elapsed());
        if window.len() == 1000 || i + 1 == topics {
            window.sort();
            let bytes = shard0_flushed_bytes(&broker);
            let per_create = (bytes - last_bytes) / window.len() as f64;
            println!(
                "{:>8}  {:>13.3}  {:>13.3}  {:>23.0}",
                (i + 1).div_ceil(1000),
                percentile(&window, 50),
                percentile(&window, 90),
                per_create
            );
            last_bytes = bytes;
            window.clear();
        }
    }
    let shard0 = broker.data_dir().join("shard-000");
    let dir_bytes: u64 =
        std::fs::read_dir(&shard0).unwrap().map(|e| e.unwrap().metadata().unwrap().len()).sum();
    println!("shard 0 flushed {last_bytes:.0} bytes in all; its dir holds {dir_bytes} bytes");
    drop(client);
    broker.kill();
    let bootstrap: SocketAddr = broker.bootstrap().parse().unwrap();
    while TcpStream::connect_timeout(&bootstrap, Duration::from_millis(100)).is_ok() {
        std::thread::sleep(Duration::from_millis(10));
    }
    let restarted = Instant::now();
    broker.restart();
    let addr = broker.shard_addr(1);
    while !metadata_knows(addr, topics - 1) {
        std::thread::sleep(Duration::from_millis(5));
    }
    println!(
        "kill -9 after {topics} topics: Metadata answered {:.2} s after the restart began",
        restarted.elapsed().as_secs_f64()
    );
}
