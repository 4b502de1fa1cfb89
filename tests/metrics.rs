//! The admin endpoint: /metrics in Prometheus text format (parsed here by a tiny parser
//! that refuses anything malformed), /health, the console's pages (their HTML; the
//! browser test is tests/console/run.sh), and the HTTP refusals. Traffic comes from
//! rdkafka and raw requests whose counts are known.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use common::{admin_get as get, admin_http as http, create_topic, record_batch, Broker, RawClient};
use kafka_protocol::messages::produce_request::{
    PartitionProduceData, ProduceRequest, TopicProduceData,
};
use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind, TopicName};
use kafka_protocol::protocol::StrBytes;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::producer::FutureRecord;
use rdkafka::{Message, Offset, TopicPartitionList};

/// One sample line: `name{labels} value`.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// A parsed scrape: family types (from `# TYPE`) and samples in order.
struct Scrape {
    types: HashMap<String, String>,
    samples: Vec<Sample>,
}

impl Scrape {
    /// Parses the text format; panics naming the first line that does not parse.
    fn parse(text: &str) -> Scrape {
        let mut types = HashMap::new();
        let mut samples = Vec::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').expect("`# TYPE name kind`");
                assert!(types.insert(name.to_string(), kind.to_string()).is_none(), "{line}");
            } else if line.starts_with("# HELP ") {
                continue;
            } else {
                samples.push(parse_sample(line).unwrap_or_else(|| panic!("bad line: {line:?}")));
            }
        }
        Scrape { types, samples }
    }

    /// The family a sample belongs to (histogram samples carry a suffix).
    fn family<'a>(&self, sample_name: &'a str) -> &'a str {
        for suffix in ["_bucket", "_sum", "_count"] {
            if let Some(base) = sample_name.strip_suffix(suffix) {
                if self.types.get(base).is_some_and(|t| t == "histogram") {
                    return base;
                }
            }
        }
        sample_name
    }

    /// Sum of the samples named `name` whose labels include all of `labels`.
    fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let matching = self.samples.iter().filter(|s| {
            s.name == name
                && labels.iter().all(|(k, v)| s.labels.get(*k).map(|x| x.as_str()) == Some(v))
        });
        matching.map(|s| s.value).sum()
    }

    fn count(&self, name: &str) -> usize {
        self.samples.iter().filter(|s| s.name == name).count()
    }
}

fn parse_sample(line: &str) -> Option<Sample> {
    let name_end = line.find(['{', ' '])?;
    let name = &line[..name_end];
    let name_ok = name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':');
    if name.is_empty() || !name_ok {
        return None;
    }
    let mut rest = &line[name_end..];
    let mut labels = BTreeMap::new();
    if let Some(inner) = rest.strip_prefix('{') {
        rest = inner;
        loop {
            let (key, after) = rest.split_once("=\"")?;
            let mut value = String::new();
            let mut chars = after.char_indices();
            let end = loop {
                match chars.next()? {
                    (_, '\\') => match chars.next()?.1 {
                        'n' => value.push('\n'),
                        c @ ('\\' | '"') => value.push(c),
                        _ => return None,
                    },
                    (i, '"') => break i,
                    (_, c) => value.push(c),
                }
            };
            labels.insert(key.to_string(), value);
            rest = &after[end + 1..];
            if let Some(next) = rest.strip_prefix(',') {
                rest = next;
            } else {
                rest = rest.strip_prefix('}')?;
                break;
            }
        }
    }
    let value = rest.strip_prefix(' ')?;
    let value = if value == "+Inf" { f64::INFINITY } else { value.parse().ok()? };
    Some(Sample { name: name.to_string(), labels, value })
}

/// Every sample has a `# TYPE`; every histogram's buckets are cumulative and end with
/// `le="+Inf"` equal to its `_count`.
fn assert_well_formed(scrape: &Scrape) {
    for sample in &scrape.samples {
        let family = scrape.family(&sample.name);
        assert!(scrape.types.contains_key(family), "{} has no # TYPE", sample.name);
    }
    let mut buckets: BTreeMap<String, Vec<(String, f64)>> = BTreeMap::new();
    for sample in scrape.samples.iter().filter(|s| s.name.ends_with("_bucket")) {
        let mut series = sample.labels.clone();
        let le = series.remove("le").expect("a bucket has an le label");
        buckets.entry(format!("{}{series:?}", sample.name)).or_default().push((le, sample.value));
    }
    assert!(!buckets.is_empty(), "the scrape has histograms");
    for (series, bounds) in &buckets {
        assert!(bounds.windows(2).all(|w| w[0].1 <= w[1].1), "{series} is not cumulative");
        let (last_le, last) = bounds.last().unwrap();
        assert_eq!(last_le, "+Inf", "{series} does not end with +Inf");
        let les: Vec<f64> = bounds.iter().map(|(le, _)| le.parse::<f64>().unwrap()).collect();
        assert!(les.windows(2).all(|w| w[0] < w[1]), "{series}: le not increasing");
        let count_series = series.replacen("_bucket", "_count", 1);
        let count =
            scrape.samples.iter().find(|s| format!("{}{:?}", s.name, s.labels) == count_series);
        assert_eq!(count.map(|s| s.value), Some(*last), "{series}: +Inf bucket != _count");
    }
}

fn produce_raw(client: &mut RawClient, topic: &str, partition: i32, value: &[u8]) {
    let records = record_batch(&[(b"k", value)], 1_700_000_000_000);
    let request =
        ProduceRequest::default().with_acks(-1).with_timeout_ms(10_000).with_topic_data(vec![
            TopicProduceData::default()
                .with_name(TopicName(StrBytes::from_string(topic.to_string())))
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(partition)
                    .with_records(Some(records))]),
        ]);
    match client.call(ApiKey::Produce, 9, RequestKind::Produce(request)) {
        ResponseKind::Produce(r) => assert_eq!(r.responses[0].partition_responses[0].error_code, 0),
        other => panic!("{other:?}"),
    }
}

/// Produces `count` values of `size` bytes to `partition` with librdkafka; returns the
/// value bytes sent.
fn produce_rdkafka(broker: &Broker, topic: &str, partition: i32, count: usize, size: usize) -> u64 {
    let producer = common::acks_all_producer(broker);
    let value = vec![b'm'; size];
    common::runtime().block_on(async {
        for i in 0..count {
            let key = i.to_string();
            let record = FutureRecord::to(topic).partition(partition).key(&key).payload(&value);
            producer.send(record, Duration::from_secs(30)).await.expect("delivered");
        }
    });
    (count * size) as u64
}

/// Consumes `count` records of `partition` with librdkafka in `group`, then commits the
/// offset after the last one.
fn consume_and_commit(broker: &Broker, group: &str, topic: &str, partition: i32, count: usize) {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", broker.bootstrap())
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("fetch.wait.max.ms", "100")
        .create()
        .unwrap();
    let mut assignment = TopicPartitionList::new();
    assignment.add_partition_offset(topic, partition, Offset::Beginning).unwrap();
    consumer.assign(&assignment).unwrap();
    let mut next = 0;
    common::eventually(Duration::from_secs(30), "records consumed", || {
        if let Some(message) = consumer.poll(Duration::from_millis(100)) {
            let message = message.expect("a record");
            assert_eq!(message.offset(), next);
            next += 1;
        }
        next == count as i64
    });
    let mut commit = TopicPartitionList::new();
    commit.add_partition_offset(topic, partition, Offset::Offset(next)).unwrap();
    consumer.commit(&commit, CommitMode::Sync).unwrap();
}

#[test]
fn metrics_count_traffic_fsyncs_connections_partitions_and_lag() {
    let broker = Broker::start(2, &[]);
    create_topic(&broker, "observed", 3);
    let sent = produce_rdkafka(&broker, "observed", 0, 10, 300);
    let mut client = RawClient::connect(broker.bootstrap().parse().unwrap());
    let raw_produces = 5;
    for _ in 0..raw_produces {
        produce_raw(&mut client, "observed", 1, b"raw value");
    }
    consume_and_commit(&broker, "watchers", "observed", 0, 4);

    let (status, text) = get(&broker, "/metrics");
    assert_eq!(status, 200, "{text}");
    let scrape = Scrape::parse(&text);
    assert_well_formed(&scrape);
    let topic = [("topic", "observed")];
    let produced = scrape.sum("shardlog_produce_bytes_total", &topic);
    assert!(produced >= (sent + raw_produces * 9) as f64, "{produced} bytes < sent {sent}");
    assert!(scrape.sum("shardlog_produce_requests_total", &topic) >= 15.0);
    assert!(scrape.sum("shardlog_fetch_bytes_total", &topic) >= 4.0 * 300.0);
    assert!(scrape.sum("shardlog_fsync_duration_seconds_count", &[]) > 0.0);
    assert!(scrape.sum("shardlog_fsync_bytes_count", &[]) > 0.0);
    assert!(scrape.sum("shardlog_appends_per_fsync_sum", &[]) >= 15.0);
    let produce_requests =
        scrape.sum("shardlog_request_duration_seconds_count", &[("api", "Produce")]);
    assert!(produce_requests >= raw_produces as f64 + 10.0, "{produce_requests} Produce requests");
    assert!(scrape.sum("shardlog_connections", &[]) >= 1.0, "the raw client is connected");
    assert!(scrape.sum("shardlog_connections_accepted_total", &[]) >= 1.0);
    assert_eq!(scrape.sum("shardlog_partitions", &[]), 3.0);
    assert_eq!(scrape.count("shardlog_partitions"), 2, "one sample per shard");
    assert!(scrape.sum("shardlog_log_size_bytes", &topic) >= produced);
    let lag = [("group", "watchers"), ("topic", "observed"), ("partition", "0")];
    assert_eq!(scrape.count("shardlog_consumer_group_lag"), 1);
    assert_eq!(scrape.sum("shardlog_consumer_group_lag", &lag), 6.0, "10 produced, 4 committed");
    drop(client);
}

#[test]
fn every_metric_emitted_is_documented() {
    let broker = Broker::start(2, &[]);
    create_topic(&broker, "documented", 2);
    let mut client = RawClient::connect(broker.bootstrap().parse().unwrap());
    produce_raw(&mut client, "documented", 0, b"v");
    let (status, text) = get(&broker, "/metrics");
    assert_eq!(status, 200);
    let scrape = Scrape::parse(&text);
    let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/metrics.md"))
        .expect("docs/metrics.md");
    let mut missing: Vec<&String> =
        scrape.types.keys().filter(|name| !docs.contains(&format!("`{name}`"))).collect();
    missing.sort();
    assert!(missing.is_empty(), "metrics missing from docs/metrics.md: {missing:?}");
    assert!(scrape.types.len() >= 20, "the scrape has every family ({})", scrape.types.len());
}

#[test]
fn health_is_ok_when_every_shard_answers() {
    let broker = Broker::start(2, &[]);
    let (status, body) = get(&broker, "/health");
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, "ok\nshard 0: ok\nshard 1: ok\n");
}

#[test]
fn unknown_paths_bad_requests_and_oversized_or_stalled_heads_are_refused() {
    let broker = Broker::start(1, &[]);
    assert_eq!(get(&broker, "/nothing-here").0, 404);
    assert_eq!(http(&broker, b"POST /metrics HTTP/1.1\r\n\r\n").0, 405);
    let (status, body) = http(&broker, b"hello there\r\n\r\n");
    assert_eq!(status, 400);
    assert!(body.contains("METHOD TARGET"), "{body}");
    assert_eq!(http(&broker, b"\x16\x03\x01\x02\x00\x01\x00\r\n\r\n").0, 400);
    // One byte over the 8 KiB limit and no end of head: refused with 431. (Exactly that
    // many, so the broker has read everything sent and closes without a reset.)
    let mut huge = b"GET /metrics HTTP/1.1\r\nX-Pad: ".to_vec();
    huge.resize(8 * 1024 + 1, b'a');
    assert_eq!(http(&broker, &huge).0, 431);

    // Half a head, then silence: the broker closes the connection (no response).
    let addr = SocketAddr::from(([127, 0, 0, 1], broker.admin_port));
    let mut stalled = TcpStream::connect(addr).unwrap();
    stalled.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    stalled.write_all(b"GET /metrics HTTP/1.1\r\n").unwrap();
    let mut rest = Vec::new();
    assert_eq!(stalled.read_to_end(&mut rest).expect("closed by the broker"), 0);

    // The endpoint still serves after all that.
    assert_eq!(get(&broker, "/health").0, 200);
}

#[test]
fn the_broker_refuses_to_start_when_the_admin_port_is_taken_or_collides() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let admin = taken.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let kafka_port =
        std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let start = |admin_addr: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_shardlog"))
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .args(["--kafka-addr", &format!("127.0.0.1:{kafka_port}"), "--cores", "1"])
            .args(["--admin-addr", admin_addr])
            .output()
            .expect("running shardlog")
    };
    let output = start(&admin);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(stderr.contains(&format!("cannot listen on {admin}")), "{stderr}");

    let output = start(&format!("127.0.0.1:{}", kafka_port + 1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(stderr.contains("collides with the Kafka ports"), "{stderr}");
    drop(taken);
}

/// librdkafka 2.13+'s all-topics Metadata v12, byte for byte (librdkafka issue 5049: a
/// 4-byte placeholder where the 1-byte varint count of a null topic array belongs). Kafka
/// serves it as "all topics" and ignores the 3 bytes left over; so does shardlog, and
/// counts them.
#[test]
fn an_all_topics_metadata_with_librdkafkas_placeholder_count_is_answered_and_counted() {
    use bytes::Buf;
    use kafka_protocol::messages::ResponseHeader;
    use kafka_protocol::protocol::Decodable;
    let broker = Broker::start(2, &[]);
    create_topic(&broker, "listed", 2);
    let mut client = RawClient::connect(broker.shard_addr(0));
    let mut frame = vec![0, 3, 0, 12, 0, 0, 0, 41, 0, 7];
    frame.extend_from_slice(b"rdkafka");
    frame.push(0); // header tag buffer
    frame.extend_from_slice(&[0, 0, 0, 0, 1, 0, 0]);
    for _ in 0..2 {
        client.send_frame(&frame);
        let mut response = client.read_frame().expect("answered, not closed");
        let header = ResponseHeader::decode(&mut response, 1).unwrap();
        assert_eq!(header.correlation_id, 41);
        let body = ResponseKind::decode(ApiKey::Metadata, &mut response, 12).unwrap();
        assert_eq!(response.remaining(), 0);
        let ResponseKind::Metadata(body) = body else { panic!("not Metadata") };
        let names: Vec<String> =
            body.topics.iter().filter_map(|t| t.name.as_ref().map(|n| n.to_string())).collect();
        assert_eq!(names, ["listed"], "all topics");
        assert_eq!(body.brokers.len(), 2);
    }
    let (_, text) = get(&broker, "/metrics");
    let scrape = Scrape::parse(&text);
    let counted = scrape.sum("shardlog_requests_with_trailing_bytes_total", &[("shard", "0")]);
    assert_eq!(counted, 2.0, "{text}");
}

/// The stage histograms of the latency budget: every acknowledged produce is counted in
/// each of its request stages, every flush in each flush stage, and a fetch parked before
/// the produce is counted as woken by a flush.
#[test]
fn produce_and_flush_stages_and_fetch_wake_ups_are_counted() {
    let broker = Broker::start(1, &[]);
    create_topic(&broker, "staged", 1);
    let addr = broker.shard_addr(0);
    let parked = std::thread::spawn(move || {
        let mut client = RawClient::connect(addr);
        client.call(ApiKey::Fetch, 11, common::fetch_request("staged", 0, 0, 20_000))
    });
    std::thread::sleep(Duration::from_millis(300));
    let mut client = RawClient::connect(broker.bootstrap().parse().unwrap());
    let produces = 7;
    for _ in 0..produces {
        produce_raw(&mut client, "staged", 0, b"staged value");
    }
    let ResponseKind::Fetch(fetched) = parked.join().unwrap() else { panic!("not a Fetch") };
    assert!(fetched.responses[0].partitions[0].records.as_ref().is_some_and(|r| !r.is_empty()));

    let (_, text) = get(&broker, "/metrics");
    let scrape = Scrape::parse(&text);
    let name = "shardlog_request_stage_seconds_count";
    for stage in ["decoded_to_queued", "queued_to_ready", "ready_to_written"] {
        let counted = scrape.sum(name, &[("api", "Produce"), ("stage", stage)]);
        assert_eq!(counted, produces as f64, "Produce {stage}");
    }
    let flushes = scrape.sum("shardlog_fsync_duration_seconds_count", &[]);
    assert!(flushes >= produces as f64, "each acks=all produce waited for its own flush");
    for stage in ["gather", "write", "fdatasync"] {
        let counted = scrape.sum("shardlog_flush_stage_seconds_count", &[("stage", stage)]);
        assert_eq!(counted, flushes, "flush {stage}");
    }
    assert!(scrape.sum("shardlog_fetch_wake_seconds_count", &[]) >= 1.0, "{text}");
}

#[test]
fn the_console_shows_topics_partitions_group_lag_and_escapes_names() {
    let broker = Broker::start(2, &[]);
    create_topic(&broker, "console-seen", 3);
    produce_rdkafka(&broker, "console-seen", 0, 10, 100);
    let group = "<b>readers</b>";
    consume_and_commit(&broker, group, "console-seen", 0, 4);

    let (status, topics) = get(&broker, "/topics");
    assert_eq!(status, 200, "{topics}");
    assert!(topics.contains("<a href=\"/topics/console-seen\">console-seen</a></td><td>3</td>"));
    assert!(topics.contains("1 topics; page 1 of 1."), "{topics}");
    assert!(get(&broker, "/topics?page=7").1.contains("page 1 of 1."), "pages clamp");

    // Partition 0 holds the 10 records, the first 3 deleted (DeleteRecords); 1 and 2 are
    // empty. Columns: partition, owner shard, log start, high watermark, log end, bytes.
    let mut before = rdkafka::TopicPartitionList::new();
    before.add_partition_offset("console-seen", 0, Offset::Offset(3)).unwrap();
    let options = rdkafka::admin::AdminOptions::new();
    let admin = common::admin_client(&broker);
    let deleted = common::runtime().block_on(admin.delete_records(&before, &options)).unwrap();
    assert!(deleted.find_partition("console-seen", 0).unwrap().error().is_ok(), "{deleted:?}");
    let (status, topic) = get(&broker, "/topics/console-seen");
    assert_eq!(status, 200, "{topic}");
    let rows: Vec<&str> = topic.split("<tr><td><a href=\"/topics/console-seen/").skip(1).collect();
    assert_eq!(rows.len(), 3, "{topic}");
    let cells = |row: &str| -> Vec<String> {
        let row = row.split("</tr>").next().unwrap();
        row.split("<td>").skip(1).map(|c| c.split('<').next().unwrap().to_string()).collect()
    };
    let p0 = cells(rows[0]);
    assert_eq!(p0[1..4], ["3", "10", "10"], "log start 3, high watermark 10, log end 10: {topic}");
    assert!(p0[4].parse::<u64>().unwrap() > 1000, "10 records of 100 B: {topic}");
    for empty in &rows[1..] {
        assert_eq!(cells(empty)[1..], ["0", "0", "0", "0"], "{topic}");
    }
    assert_eq!(get(&broker, "/topics/nothing-here").0, 404);

    let (status, groups) = get(&broker, "/groups");
    assert_eq!(status, 200, "{groups}");
    assert!(!groups.contains("<b>readers</b>"), "a group name is escaped: {groups}");
    let row = "<td><a href=\"/groups/%3Cb%3Ereaders%3C%2Fb%3E\">&lt;b&gt;readers&lt;/b&gt;</a>\
               </td><td>Empty</td><td>0</td><td>1</td><td>6</td>";
    assert!(groups.contains(row), "no members, 1 partition committed, lag 6: {groups}");
    let (status, group) = get(&broker, "/groups/%3Cb%3Ereaders%3C%2Fb%3E");
    assert_eq!(status, 200, "{group}");
    assert!(!group.contains("<b>readers</b>"), "a group name is escaped: {group}");
    let row = "<td><a href=\"/topics/console-seen\">console-seen</a></td><td>0</td><td>4</td>\
               <td>10</td><td>6</td><td>-</td>";
    assert!(group.contains(row), "committed 4 of 10, lag 6: {group}");
    assert!(!group.contains("/actions/"), "no forms without --console-write: {group}");

    let (status, overview) = get(&broker, "/");
    assert_eq!(status, 200, "{overview}");
    let shards = overview.split("<table id=\"budget\">").next().unwrap();
    assert_eq!(shards.matches("<tr><td>").count(), 2, "one row per shard: {overview}");
    assert!(shards.contains(" MiB ("), "disk use, segment files × their size: {overview}");
    assert!(overview.contains("id=\"fsync-chart\""), "{overview}");
    // The latency budget: 10 produce requests in each produce stage.
    let budget = overview.split("<table id=\"budget\">").nth(1).expect("a budget table");
    for stage in ["decoded → queued", "queued → durable", "durable → response written"] {
        let row = format!("produce: {stage}");
        let cells = budget.split(&row).nth(1).unwrap_or_else(|| panic!("{row}: {budget}"));
        let count: u64 =
            cells.split("<td>").nth(1).unwrap().split('<').next().unwrap().parse().unwrap();
        assert!(count >= 10, "{row}: {budget}");
        assert!(cells.split("</tr>").next().unwrap().contains("≤ "), "{row}: {budget}");
    }
    assert!(budget.contains("flush: fdatasync"), "{budget}");
    assert!(overview.contains("<script src=\"/console.js\">"));
    let (status, js) = get(&broker, "/console.js");
    assert_eq!(status, 200);
    assert!(js.contains("/api/overview"));

    let (status, json) = get(&broker, "/api/overview");
    assert_eq!(status, 200, "{json}");
    let json: serde_json::Value = serde_json::from_str(&json).expect("JSON");
    assert!(json["produce_bytes"].as_u64().unwrap() >= 1000, "batches of 10 x 100 B: {json}");
    assert!(json["produce_us"]["count"].as_u64().unwrap() >= 10, "{json}");
    let buckets = json["fsync_us"]["cumulative"].as_array().expect("fsync buckets");
    assert!(!buckets.is_empty(), "{json}");
    assert!(json["fetch_bytes"].as_u64().unwrap() >= 400, "4 records consumed: {json}");

    // The topics page's rates come from /api/topics: that page's topics and their totals.
    assert!(topics.contains("data-topic=\"console-seen\" data-kind=\"produce\""), "{topics}");
    let (status, json) = get(&broker, "/api/topics?page=1");
    assert_eq!(status, 200, "{json}");
    let json: serde_json::Value = serde_json::from_str(&json).expect("JSON");
    let listed = json["topics"].as_array().expect("topics");
    assert_eq!(listed.len(), 1, "{json}");
    assert_eq!(listed[0]["topic"], "console-seen");
    assert_eq!(listed[0]["partitions"], 3);
    assert!(listed[0]["produce_bytes"].as_u64().unwrap() >= 1000, "{json}");
    assert!(listed[0]["fetch_bytes"].as_u64().unwrap() >= 400, "{json}");
    assert!(listed[0]["size_bytes"].as_u64().unwrap() > 0, "{json}");
    assert_eq!((json["page"].as_u64(), json["pages"].as_u64()), (Some(1), Some(1)));

    // A topic's partitions, 100 a page.
    create_topic(&broker, "wide", 130);
    let rows = |page: &str| page.matches("<tr><td><a href=\"/topics/wide/").count();
    let (_, first) = get(&broker, "/topics/wide");
    assert_eq!(rows(&first), 100, "{first}");
    assert!(first.contains("130 partitions; page 1 of 2."), "{first}");
    assert!(first.contains("<a href=\"/topics/wide?page=2\">next</a>"), "{first}");
    assert!(first.contains("<a href=\"/topics/wide/99\">99</a>"), "{first}");
    let (_, second) = get(&broker, "/topics/wide?page=2");
    assert_eq!(rows(&second), 30, "{second}");
    assert!(second.contains("<a href=\"/topics/wide/129\">129</a>"), "{second}");
    assert!(second.contains("<a href=\"/topics/wide?page=1\">previous</a>"), "{second}");
    assert!(get(&broker, "/topics/wide?page=9").1.contains("page 2 of 2."), "pages clamp");
}

/// The message browser (`/topics/NAME/P`): records of a partition owned by either shard,
/// a page at a time, as text, pretty JSON or hex, found by key or time, every byte escaped.
#[test]
fn the_console_message_browser_pages_through_records_as_json_hex_and_by_key() {
    use rdkafka::message::{Header, OwnedHeaders};
    let broker = Broker::start(2, &[]);
    create_topic(&broker, "browse", 2);
    let producer = common::acks_all_producer(&broker);
    common::runtime().block_on(async {
        for partition in 0..2 {
            for i in 0..60 {
                let key = format!("k{}", i % 3);
                let value = format!(r#"{{"n":{i},"tag":"<x>"}}"#);
                let headers = OwnedHeaders::new().insert(Header { key: "h", value: Some("<v>") });
                let record = FutureRecord::to("browse")
                    .partition(partition)
                    .key(&key)
                    .payload(&value)
                    .headers(headers);
                producer.send(record, Duration::from_secs(30)).await.expect("delivered");
            }
            let binary =
                FutureRecord::<(), [u8]>::to("browse").partition(partition).payload(&[0xff, 0x00]);
            producer.send(binary, Duration::from_secs(30)).await.expect("delivered");
        }
    });
    // Both partitions, so one of them is read through the other shard (the admin
    // endpoint runs on one shard).
    for partition in 0..2 {
        let path = |query: &str| format!("/topics/browse/{partition}?{query}");
        let (status, first) = get(&broker, &path("format=json"));
        assert_eq!(status, 200, "{first}");
        assert_eq!(first.matches("<tr><td>").count(), 50, "a page is 50 records: {first}");
        assert!(first.contains("<tr><td>0</td>"), "from the log start: {first}");
        assert!(
            first.contains("<pre class=\"json\">{\n  &quot;n&quot;: 0,\n  &quot;tag&quot;: &quot;&lt;x&gt;&quot;\n}</pre>"),
            "pretty-printed and escaped: {first}"
        );
        assert!(first.contains("h: &lt;v&gt;"), "headers, escaped: {first}");
        assert!(!first.contains("<x>") && !first.contains("<v>"), "nothing unescaped: {first}");
        let next = format!("href=\"/topics/browse/{partition}?offset=50&amp;format=json\"");
        assert!(first.contains(&next), "the next page keeps the format: {first}");

        let (_, second) = get(&broker, &path("offset=50&format=hex"));
        assert_eq!(second.matches("<tr><td>").count(), 11, "10 keyed + 1 binary: {second}");
        assert!(second.contains("<td>50</td>"), "{second}");
        assert!(second.contains("7b 22 6e 22"), "values as hex: {second}");
        assert!(second.contains("<code class=\"hex\">ff 00</code>"), "{second}");
        assert!(second.contains("<i>null</i>"), "the null key: {second}");
        assert!(!second.contains("id=\"next\""), "the last page: {second}");

        let (_, by_key) = get(&broker, &path("key=k1"));
        assert_eq!(by_key.matches("<tr><td>").count(), 20, "every third record: {by_key}");
        assert_eq!(by_key.matches("<td>k1</td>").count(), 20, "{by_key}");

        let (_, future) = get(&broker, &path("timestamp=99999999999999"));
        assert!(future.contains("No record has a timestamp at or after"), "{future}");
        let (_, past) = get(&broker, &path("timestamp=0"));
        assert!(past.contains("<tr><td>0</td>"), "the first record at or after 0: {past}");
        let (_, beyond) = get(&broker, &path("offset=1000"));
        assert!(beyond.contains("outside the partition"), "{beyond}");
    }
    assert_eq!(get(&broker, "/topics/browse/7").0, 404);
    assert_eq!(get(&broker, "/topics/nothing/0").0, 404);
}
