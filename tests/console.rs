//! The web console's actions over HTTP (`--console-write`): refused when the console is
//! read-only, refused without the form's CSRF token or from another origin, bad input
//! answered with Kafka's error on the page, and each change checked through the Kafka API
//! with librdkafka. Also the group page (members, assignments, lag) and its JSON. The
//! browser test of the same forms is tests/console/webdriver.py.

mod common;

use std::time::Duration;

use common::{admin_client, admin_get as get, admin_http as http, create_topic, runtime, Broker};
use rdkafka::admin::{AdminOptions, ResourceSpecifier};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::producer::FutureRecord;
use rdkafka::{Offset, TopicPartitionList};
use shardlog_shards::group::coordinator_shard;

/// POSTs a form to `/actions/ACTION` with `origin` as its Origin header (none if `None`).
fn post_from(
    broker: &Broker,
    action: &str,
    fields: &[(&str, &str)],
    origin: Option<&str>,
) -> (u16, String) {
    let body: Vec<String> =
        fields.iter().map(|(k, v)| format!("{k}={}", common::form_encode(v))).collect();
    let body = body.join("&");
    let origin = origin.map_or_else(String::new, |o| format!("Origin: {o}\r\n"));
    let request = format!(
        "POST /actions/{action} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{origin}\
         Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{body}",
        body.len(),
        port = broker.admin_port,
    );
    http(broker, request.as_bytes())
}

/// POSTs a form as the console's own page would (its Origin).
fn post(broker: &Broker, action: &str, fields: &[(&str, &str)]) -> (u16, String) {
    let origin = format!("http://127.0.0.1:{}", broker.admin_port);
    post_from(broker, action, fields, Some(&origin))
}

/// The CSRF token of the form for `action` on `page`.
fn token(broker: &Broker, page: &str, action: &str) -> String {
    let (status, html) = get(broker, page);
    assert_eq!(status, 200, "{html}");
    let form = html
        .split(&format!("action=\"/actions/{action}\""))
        .nth(1)
        .unwrap_or_else(|| panic!("no {action} form on {page}: {html}"));
    let value = form.split("name=\"csrf\" value=\"").nth(1).expect("a csrf field");
    value.split('"').next().unwrap().to_string()
}

fn topic_partitions(broker: &Broker, topic: &str) -> Option<usize> {
    let consumer = common::assign_only_consumer(broker);
    let metadata = consumer.fetch_metadata(None, Duration::from_secs(10)).expect("metadata");
    let found = metadata.topics().iter().find(|t| t.name() == topic)?;
    Some(found.partitions().len())
}

fn topic_config(broker: &Broker, topic: &str, key: &str) -> Option<String> {
    let admin = admin_client(broker);
    let resources = [ResourceSpecifier::Topic(topic)];
    let described = runtime().block_on(admin.describe_configs(&resources, &AdminOptions::new()));
    let resource = described.unwrap().pop().unwrap().expect("the topic's configs");
    resource.get(key).and_then(|entry| entry.value.clone())
}

fn group_consumer(broker: &Broker, group: &str) -> BaseConsumer {
    ClientConfig::new()
        .set("bootstrap.servers", broker.bootstrap())
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("fetch.wait.max.ms", "100")
        .set("session.timeout.ms", "6000")
        .create()
        .unwrap()
}

fn committed(broker: &Broker, group: &str, topic: &str, partition: i32) -> Offset {
    let consumer = group_consumer(broker, group);
    let mut asked = TopicPartitionList::new();
    asked.add_partition(topic, partition);
    let answer = consumer.committed_offsets(asked, Duration::from_secs(10)).expect("committed");
    answer.find_partition(topic, partition).expect("the partition").offset()
}

fn produce(broker: &Broker, topic: &str, partition: i32, count: usize) {
    let producer = common::acks_all_producer(broker);
    runtime().block_on(async {
        for i in 0..count {
            let value = format!("v{i}");
            let record = FutureRecord::<(), _>::to(topic).partition(partition).payload(&value);
            producer.send(record, Duration::from_secs(30)).await.expect("delivered");
        }
    });
}

/// A group name the broker's `cores` shards place on `shard` (so the console, on shard 0,
/// asks another shard's coordinator over the mesh when `shard` is not 0).
fn group_on_shard(prefix: &str, shard: usize, cores: usize) -> String {
    (0..).map(|i| format!("{prefix}-{i}")).find(|g| coordinator_shard(g, cores) == shard).unwrap()
}

#[test]
fn console_actions_are_refused_with_403_when_the_console_is_read_only() {
    let broker = Broker::start(1, &[]);
    create_topic(&broker, "kept", 1);
    let (_, topics) = get(&broker, "/topics");
    assert!(!topics.contains("/actions/"), "no forms without --console-write: {topics}");
    let (_, topic) = get(&broker, "/topics/kept");
    assert!(!topic.contains("/actions/"), "{topic}");

    let fields = [("name", "made"), ("partitions", "1"), ("csrf", "00"), ("confirm", "yes")];
    for (action, fields) in [
        ("create-topic", &fields[..]),
        ("delete-topic", &[("topic", "kept"), ("csrf", "00"), ("confirm", "yes")][..]),
        ("alter-configs", &[("topic", "kept"), ("set", "retention.ms=1"), ("confirm", "yes")]),
        ("reset-offsets", &[("group", "g"), ("to", "earliest"), ("confirm", "yes")]),
    ] {
        let (status, body) = post(&broker, action, fields);
        assert_eq!(status, 403, "{action}: {body}");
        assert!(body.contains("read-only") && body.contains("--console-write"), "{body}");
    }
    assert_eq!(topic_partitions(&broker, "made"), None, "nothing created");
    assert_eq!(topic_partitions(&broker, "kept"), Some(1), "nothing deleted");
    assert_eq!(topic_config(&broker, "kept", "retention.ms").as_deref(), Some("604800000"));
    // POST elsewhere is still not served.
    assert_eq!(http(&broker, b"POST /metrics HTTP/1.1\r\n\r\n").0, 405);
}

#[test]
fn console_actions_need_the_forms_csrf_token_and_the_endpoints_origin() {
    let broker = Broker::start(1, &["--console-write"]);
    let create = token(&broker, "/topics", "create-topic");
    create_topic(&broker, "kept", 1);
    let delete = token(&broker, "/topics/kept", "delete-topic");
    let fields =
        |csrf| vec![("name", "forged"), ("partitions", "1"), ("csrf", csrf), ("confirm", "yes")];
    let own = format!("http://127.0.0.1:{}", broker.admin_port);
    let localhost = format!("http://localhost:{}", broker.admin_port);
    let refused = [
        (fields(""), Some(own.as_str()), "CSRF token"),
        (fields("ab12"), Some(&own), "CSRF token"),
        (fields(&delete), Some(&own), "CSRF token"), // another action's token
        (fields(&create), Some("http://evil.example"), "not this admin endpoint"),
        (fields(&create), Some("http://evil.example:1234"), "not this admin endpoint"),
        (fields(&create), None, "no Origin or Referer"),
    ];
    for (fields, origin, why) in refused {
        let (status, body) = post_from(&broker, "create-topic", &fields, origin);
        assert_eq!(status, 403, "{origin:?} {fields:?}: {body}");
        assert!(body.contains(why), "{why}: {body}");
    }
    assert_eq!(topic_partitions(&broker, "forged"), None, "nothing created");
    let (status, body) =
        post(&broker, "delete-topic", &[("topic", "kept"), ("csrf", &create), ("confirm", "yes")]);
    assert_eq!(status, 403, "{body}");
    assert_eq!(topic_partitions(&broker, "kept"), Some(1), "nothing deleted");

    // The endpoint's own origin under its other loopback name is accepted (a confirmation).
    let (status, body) =
        post_from(&broker, "create-topic", &fields(&create)[..3], Some(&localhost));
    assert_eq!(status, 200, "{body}");
    // A body announced over 64 KiB is refused from the head alone (sent without it, so
    // the broker has read everything and closes without a reset).
    let head = format!(
        "POST /actions/create-topic HTTP/1.1\r\nOrigin: {own}\r\nContent-Length: {}\r\n\r\n",
        64 * 1024 + 1
    );
    assert_eq!(http(&broker, head.as_bytes()).0, 413);
    let head = "POST /actions/create-topic HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
    assert_eq!(http(&broker, head.as_bytes()).0, 411);
    assert_eq!(get(&broker, "/health").0, 200, "still serving");
}

#[test]
fn console_creates_alters_and_deletes_topics_with_kafkas_validation() {
    let broker = Broker::start(2, &["--console-write"]);
    let csrf = token(&broker, "/topics", "create-topic");
    let create = |name, partitions, configs, confirm| {
        let fields = [
            ("name", name),
            ("partitions", partitions),
            ("configs", configs),
            ("csrf", csrf.as_str()),
            ("confirm", confirm),
        ];
        post(&broker, "create-topic", &fields)
    };
    // The first POST only asks: the topic is validated (validate_only) and not created.
    let (status, page) = create("orders", "3", "retention.ms=3600000\ncleanup.policy=delete", "");
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("Create topic <b>orders</b> with 3 partitions"), "{page}");
    assert!(page.contains("name=\"confirm\" value=\"yes\""), "{page}");
    assert_eq!(topic_partitions(&broker, "orders"), None, "not created before confirmation");
    // Bad input: Kafka's error name and message on the page, nothing created.
    let bad = [
        (("orders", "3", "retention.ms=soon"), 400, "INVALID_CONFIG"),
        (("orders", "3", "no.such.key=1"), 400, "INVALID_CONFIG"),
        (("orders", "0", ""), 400, "INVALID_PARTITIONS"),
        (("orders", "three", ""), 400, "whole number"),
        (("orders", "3", "retention.ms"), 400, "not a key=value line"),
        (("bad/name", "1", ""), 400, "INVALID_TOPIC_EXCEPTION"),
        (("", "1", ""), 400, "INVALID_TOPIC_EXCEPTION"),
    ];
    for ((name, partitions, configs), status, error) in bad {
        for confirm in ["", "yes"] {
            let (got, page) = create(name, partitions, configs, confirm);
            assert_eq!(got, status, "{name} {partitions} {configs}: {page}");
            assert!(page.contains(error), "{error}: {page}");
        }
    }
    assert_eq!(topic_partitions(&broker, "orders"), None);

    let (status, page) = create("orders", "3", "retention.ms=3600000", "yes");
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("Topic <a href=\"/topics/orders\">orders</a> created."), "{page}");
    assert_eq!(topic_partitions(&broker, "orders"), Some(3));
    assert_eq!(topic_config(&broker, "orders", "retention.ms").as_deref(), Some("3600000"));
    let (status, page) = create("orders", "3", "", "yes");
    assert_eq!(status, 409, "{page}");
    assert!(page.contains("TOPIC_ALREADY_EXISTS"), "{page}");

    // Alter: a bad value is refused with Kafka's message; a good one is asked, then set.
    let csrf = token(&broker, "/topics/orders", "alter-configs");
    let alter = |set: &str, delete: &str, confirm| {
        let fields = [
            ("topic", "orders"),
            ("set", set),
            ("delete", delete),
            ("csrf", csrf.as_str()),
            ("confirm", confirm),
        ];
        post(&broker, "alter-configs", &fields)
    };
    let (status, page) = alter("retention.ms=-7", "", "yes");
    assert_eq!(status, 400, "{page}");
    assert!(page.contains("INVALID_CONFIG: "), "{page}");
    let (status, page) = alter("", "", "yes");
    assert_eq!(status, 400, "{page}");
    assert!(page.contains("Nothing to change"), "{page}");
    let (status, page) = alter("retention.ms=5000\nmax.message.bytes=2000", "", "");
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("Change the configs of topic <b>orders</b>"), "{page}");
    assert_eq!(topic_config(&broker, "orders", "retention.ms").as_deref(), Some("3600000"));
    let (status, page) = alter("retention.ms=5000\nmax.message.bytes=2000", "", "yes");
    assert_eq!(status, 200, "{page}");
    assert_eq!(topic_config(&broker, "orders", "retention.ms").as_deref(), Some("5000"));
    assert_eq!(topic_config(&broker, "orders", "max.message.bytes").as_deref(), Some("2000"));
    let (status, page) = alter("", "retention.ms", "yes");
    assert_eq!(status, 200, "{page}");
    assert_eq!(topic_config(&broker, "orders", "retention.ms").as_deref(), Some("604800000"));

    // Delete: asked, then done; an unknown topic is UNKNOWN_TOPIC_OR_PARTITION.
    let csrf = token(&broker, "/topics/orders", "delete-topic");
    let delete = |topic, confirm| {
        let fields = [("topic", topic), ("csrf", csrf.as_str()), ("confirm", confirm)];
        post(&broker, "delete-topic", &fields)
    };
    let (status, page) = delete("orders", "");
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("its 3 partitions"), "{page}");
    assert_eq!(topic_partitions(&broker, "orders"), Some(3), "not deleted before confirmation");
    let (status, page) = delete("orders", "yes");
    assert_eq!(status, 200, "{page}");
    assert_eq!(topic_partitions(&broker, "orders"), None, "deleted");
    let (status, page) = delete("orders", "yes");
    assert_eq!(status, 404, "{page}");
    assert!(page.contains("UNKNOWN_TOPIC_OR_PARTITION"), "{page}");
}

#[test]
fn console_resets_an_empty_groups_offsets_and_refuses_a_group_with_members() {
    let broker = Broker::start(2, &["--console-write"]);
    create_topic(&broker, "ticks", 2);
    produce(&broker, "ticks", 0, 10);
    produce(&broker, "ticks", 1, 4);
    // One group on each coordinator shard: shard 1's is reached over the mesh.
    for shard in [0, 1] {
        let group = group_on_shard("readers", shard, 2);
        let consumer = group_consumer(&broker, &group);
        let mut commit = TopicPartitionList::new();
        commit.add_partition_offset("ticks", 0, Offset::Offset(10)).unwrap();
        commit.add_partition_offset("ticks", 1, Offset::Offset(4)).unwrap();
        consumer.commit(&commit, CommitMode::Sync).unwrap();
        drop(consumer);
        let page = format!("/groups/{group}");
        let (status, html) = get(&broker, &page);
        assert_eq!(status, 200, "{html}");
        assert!(html.contains("total lag <b id=\"total-lag\">0</b>"), "{html}");
        let csrf = token(&broker, &page, "reset-offsets");
        let reset = |to, timestamp, topic, confirm| {
            let fields = [
                ("group", group.as_str()),
                ("to", to),
                ("timestamp", timestamp),
                ("topic", topic),
                ("csrf", csrf.as_str()),
                ("confirm", confirm),
            ];
            post(&broker, "reset-offsets", &fields)
        };
        let (status, html) = reset("earliest", "", "", "");
        assert_eq!(status, 200, "{html}");
        assert!(html.contains("<td>ticks</td><td>0</td><td>10</td><td>0</td>"), "{html}");
        assert_eq!(committed(&broker, &group, "ticks", 0), Offset::Offset(10), "only asked");
        let (status, html) = reset("earliest", "", "", "yes");
        assert_eq!(status, 200, "{html}");
        assert_eq!(committed(&broker, &group, "ticks", 0), Offset::Offset(0));
        assert_eq!(committed(&broker, &group, "ticks", 1), Offset::Offset(0));
        let (_, html) = get(&broker, &page);
        assert!(html.contains("total lag <b id=\"total-lag\">14</b>"), "lag rose: {html}");
        let (_, json) = get(&broker, &format!("/api/groups/{group}"));
        let json: serde_json::Value = serde_json::from_str(&json).expect("JSON");
        assert_eq!(json["total_lag"], 14, "{json}");
        assert_eq!(json["state"], "Empty", "{json}");

        let (status, html) = reset("latest", "", "ticks", "yes");
        assert_eq!(status, 200, "{html}");
        assert_eq!(committed(&broker, &group, "ticks", 0), Offset::Offset(10));
        assert_eq!(committed(&broker, &group, "ticks", 1), Offset::Offset(4));
        // A time after every record: the end, as Kafka's --to-datetime.
        let (status, html) = reset("timestamp", "0", "", "yes");
        assert_eq!(status, 200, "{html}");
        assert_eq!(committed(&broker, &group, "ticks", 0), Offset::Offset(0), "{html}");
        let (status, html) = reset("timestamp", "99999999999999", "", "yes");
        assert_eq!(status, 200, "{html}");
        assert_eq!(committed(&broker, &group, "ticks", 0), Offset::Offset(10), "{html}");

        for (to, timestamp, topic, error) in [
            ("sideways", "", "", "Choose earliest, latest or timestamp"),
            ("timestamp", "yesterday", "", "milliseconds since the epoch"),
            ("earliest", "", "no-such-topic", "UNKNOWN_TOPIC_OR_PARTITION"),
        ] {
            let (status, html) = reset(to, timestamp, topic, "yes");
            assert!(status == 400 || status == 404, "{status}: {html}");
            assert!(html.contains(error), "{error}: {html}");
        }
    }

    // A group with a member: its page shows it; a reset is NON_EMPTY_GROUP and changes
    // nothing.
    let group = group_on_shard("live", 1, 2);
    let consumer = group_consumer(&broker, &group);
    consumer.subscribe(&["ticks"]).unwrap();
    let page = format!("/groups/{group}");
    common::eventually(Duration::from_secs(30), "the member is assigned", || {
        let _ = consumer.poll(Duration::from_millis(100));
        get(&broker, &page).1.contains("ticks: 0, 1")
    });
    let mut commit = TopicPartitionList::new();
    commit.add_partition_offset("ticks", 0, Offset::Offset(3)).unwrap();
    consumer.commit(&commit, CommitMode::Sync).unwrap();
    let (_, html) = get(&broker, &page);
    assert!(html.contains("State <b>Stable</b>, protocol type <code>consumer</code>"), "{html}");
    assert!(html.contains("<td>rdkafka</td>"), "the member's client id: {html}");
    let (_, list) = get(&broker, "/groups");
    let row = format!("{group}</a></td><td>Stable</td><td>1</td><td>1</td><td>7</td>");
    assert!(list.contains(&row), "state, members, partitions, lag: {list}");
    let csrf = token(&broker, &page, "reset-offsets");
    let fields =
        [("group", group.as_str()), ("to", "earliest"), ("csrf", &csrf), ("confirm", "yes")];
    let (status, html) = post(&broker, "reset-offsets", &fields);
    assert_eq!(status, 409, "{html}");
    assert!(html.contains("NON_EMPTY_GROUP"), "{html}");
    assert_eq!(committed(&broker, &group, "ticks", 0), Offset::Offset(3), "unchanged");
    assert_eq!(get(&broker, "/groups/nobody-here").0, 404);
}

#[test]
fn a_groups_offsets_are_shown_a_hundred_partitions_a_page() {
    let broker = Broker::start(1, &[]);
    create_topic(&broker, "wide", 130);
    let consumer = group_consumer(&broker, "wide-readers");
    let mut offsets = TopicPartitionList::new();
    for partition in 0..130 {
        offsets.add_partition_offset("wide", partition, Offset::Offset(0)).unwrap();
    }
    consumer.commit(&offsets, CommitMode::Sync).expect("committed");
    // Rows of the offsets table, its header row left out.
    let rows = |html: &str| {
        let table = html.split("<table id=\"offsets\">").nth(1).expect("the offsets table");
        table.split("</table>").next().unwrap().matches("<tr>").count() - 1
    };
    let (status, first) = get(&broker, "/groups/wide-readers");
    assert_eq!(status, 200, "{first}");
    assert!(first.contains("130 partitions; page 1 of 2."), "{first}");
    assert_eq!(rows(&first), 100);
    assert!(first.contains("href=\"/groups/wide-readers?page=2\">next"), "{first}");
    let (_, second) = get(&broker, "/groups/wide-readers?page=2");
    assert!(second.contains("page 2 of 2"), "{second}");
    assert_eq!(rows(&second), 30);
    assert!(second.contains("href=\"/groups/wide-readers?page=1\">previous"), "{second}");
    let (_, clamped) = get(&broker, "/groups/wide-readers?page=99");
    assert!(clamped.contains("page 2 of 2"), "{clamped}");
    assert_eq!(rows(&clamped), 30);
}
