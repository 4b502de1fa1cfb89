//! The console with the authorizer on (docs/console.md, "Login and ACLs"): a login checked
//! against the broker's SCRAM users, signed session cookies, and every page and action
//! asking the authorizer as the Kafka API for the same data would, checked over HTTP and,
//! for changes, through librdkafka. Users are made with `shardlog user create` and ACLs
//! with CreateAcls, both as User:ANONYMOUS over PLAINTEXT (a super user here).

#[path = "common/acl.rs"]
mod acl;
mod common;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use acl::{allow, DELETE, DESCRIBE, GROUP, READ, TOPIC};
use common::{admin_exchange, create_topic, Broker, RawClient};
use rdkafka::consumer::Consumer;
use rdkafka::producer::FutureRecord;

/// One core, the authorizer on, User:ANONYMOUS a super user, `--console-write`.
fn secured_broker() -> Broker {
    let args = ["--authorizer", "true", "--super-users", "User:ANONYMOUS", "--console-write"];
    Broker::start(1, &args)
}

fn create_user(broker: &Broker, user: &str, password: &str) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_shardlog"))
        .args(["user", "create", user, "--password-stdin", "--bootstrap", &broker.bootstrap()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(format!("{password}\n").as_bytes()).unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
}

/// A response: status, head, body.
struct Answer {
    status: u16,
    head: String,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        let prefix = format!("{}: ", name.to_ascii_lowercase());
        self.head.lines().find_map(|line| {
            let lower = line.to_ascii_lowercase();
            lower.starts_with(&prefix).then(|| &line[prefix.len()..])
        })
    }
}

/// A request to the admin endpoint with `cookie` (the session's value) and, for a POST,
/// the form `fields` sent from the endpoint's own origin.
fn send(
    broker: &Broker,
    method: &str,
    path: &str,
    cookie: Option<&str>,
    fields: &[(&str, &str)],
) -> Answer {
    let body: Vec<String> =
        fields.iter().map(|(k, v)| format!("{k}={}", common::form_encode(v))).collect();
    let body = body.join("&");
    let cookie = cookie.map_or_else(String::new, |c| format!("Cookie: shardlog_session={c}\r\n"));
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nOrigin: http://127.0.0.1:{port}\r\n\
         {cookie}Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n\
         {body}",
        body.len(),
        port = broker.admin_port,
    );
    let (status, head, body) = admin_exchange(broker, request.as_bytes());
    Answer { status, head, body }
}

fn get(broker: &Broker, path: &str, cookie: Option<&str>) -> Answer {
    send(broker, "GET", path, cookie, &[])
}

/// Logs in; the session cookie's value.
fn log_in(broker: &Broker, user: &str, password: &str) -> String {
    let fields = [("user", user), ("password", password), ("next", "/topics")];
    let answer = send(broker, "POST", "/login", None, &fields);
    assert_eq!(answer.status, 303, "{}", answer.body);
    assert_eq!(answer.header("Location"), Some("/topics"));
    let set = answer.header("Set-Cookie").expect("a session cookie");
    for flag in ["HttpOnly", "SameSite=Strict"] {
        assert!(set.contains(flag), "{set}");
    }
    let value = set.strip_prefix("shardlog_session=").expect("the session cookie");
    value.split(';').next().unwrap().to_string()
}

/// The CSRF token of the form for `action` on `page`, as `cookie`'s session sees it.
fn token(broker: &Broker, page: &str, action: &str, cookie: &str) -> String {
    let answer = get(broker, page, Some(cookie));
    assert_eq!(answer.status, 200, "{}", answer.body);
    let form = answer
        .body
        .split(&format!("action=\"/{action}\""))
        .nth(1)
        .unwrap_or_else(|| panic!("no {action} form on {page}: {}", answer.body));
    let value = form.split("name=\"csrf\" value=\"").nth(1).expect("a csrf field");
    value.split('"').next().unwrap().to_string()
}

fn topic_exists(broker: &Broker, topic: &str) -> bool {
    let consumer = common::assign_only_consumer(broker);
    let metadata = consumer.fetch_metadata(None, Duration::from_secs(10)).expect("metadata");
    metadata.topics().iter().any(|t| t.name() == topic)
}

fn is_login_redirect(answer: &Answer) -> bool {
    answer.status == 303 && answer.header("Location").is_some_and(|l| l.starts_with("/login"))
}

#[test]
fn the_console_needs_a_login_and_shows_and_does_only_what_the_acls_allow() {
    let broker = secured_broker();
    create_topic(&broker, "t1", 1);
    create_topic(&broker, "t2", 1);
    let producer = common::acks_all_producer(&broker);
    let record = FutureRecord::<(), _>::to("t1").partition(0).payload("secret-value");
    common::runtime().block_on(producer.send(record, Duration::from_secs(30))).unwrap();
    create_user(&broker, "alice", "alice-pw");
    create_user(&broker, "bob", "bob-pw");
    let mut operator = RawClient::connect(broker.shard_addr(0));
    allow(&mut operator, TOPIC, "t1", "User:alice", DESCRIBE);
    allow(&mut operator, TOPIC, "t2", "User:bob", DELETE);

    // No session: pages go to the login page, the scripts' JSON gets 401, actions 401.
    let topics = get(&broker, "/topics", None);
    assert!(is_login_redirect(&topics), "{} {}", topics.head, topics.body);
    assert_eq!(topics.header("Location"), Some("/login?next=%2Ftopics"));
    assert!(!topics.body.contains("t1"), "{}", topics.body);
    assert_eq!(get(&broker, "/api/overview", None).status, 401);
    assert_eq!(get(&broker, "/api/topics", None).status, 401);
    assert!(is_login_redirect(&get(&broker, "/topics/t1/0", None)));
    let delete = [("topic", "t2"), ("confirm", "yes")];
    assert_eq!(send(&broker, "POST", "/actions/delete-topic", None, &delete).status, 401);
    assert_eq!(get(&broker, "/login", None).status, 200);

    // A wrong password or an unknown user: refused, no cookie.
    for (user, password) in [("alice", "bob-pw"), ("nobody", "alice-pw"), ("alice", "")] {
        let fields = [("user", user), ("password", password)];
        let refused = send(&broker, "POST", "/login", None, &fields);
        assert_eq!(refused.status, 401, "{user}/{password}: {}", refused.body);
        assert!(refused.body.contains("Wrong user name or password"), "{}", refused.body);
        assert!(refused.header("Set-Cookie").is_none());
    }

    // alice: DESCRIBE on t1 only.
    let alice = log_in(&broker, "alice", "alice-pw");
    let listed = get(&broker, "/topics", Some(&alice));
    assert_eq!(listed.status, 200);
    assert!(listed.body.contains("href=\"/topics/t1\""), "{}", listed.body);
    assert!(!listed.body.contains("t2"), "alice sees t2: {}", listed.body);
    assert!(listed.body.contains("1 topics"), "{}", listed.body);
    let rates = get(&broker, "/api/topics", Some(&alice));
    assert_eq!(rates.status, 200);
    assert!(rates.body.contains("\"topic\":\"t1\""), "{}", rates.body);
    assert!(!rates.body.contains("t2"), "alice sees t2's rates: {}", rates.body);
    assert_eq!(get(&broker, "/topics/t1", Some(&alice)).status, 200);
    let t2 = get(&broker, "/topics/t2", Some(&alice));
    assert_eq!(t2.status, 403);
    assert!(t2.body.contains("DESCRIBE on TOPIC t2"), "{}", t2.body);
    let unknown = get(&broker, "/topics/no-such-topic", Some(&alice));
    assert_eq!(unknown.status, 403, "a refusal does not tell what exists");
    let browse = get(&broker, "/topics/t1/0", Some(&alice));
    assert_eq!(browse.status, 403, "{}", browse.body);
    assert!(browse.body.contains("READ on TOPIC t1"), "{}", browse.body);
    assert!(!browse.body.contains("secret-value"));

    // alice may not delete t2 (nor t1), even with a valid token of her own session.
    let alice_delete = token(&broker, "/topics/t1", "actions/delete-topic", &alice);
    for topic in ["t2", "t1"] {
        let fields = [("topic", topic), ("csrf", &alice_delete), ("confirm", "yes")];
        let refused = send(&broker, "POST", "/actions/delete-topic", Some(&alice), &fields);
        assert_eq!(refused.status, 403, "{}", refused.body);
        assert!(refused.body.contains(&format!("DELETE on TOPIC {topic}")), "{}", refused.body);
    }
    assert!(topic_exists(&broker, "t2") && topic_exists(&broker, "t1"), "nothing deleted");

    // bob: DELETE (so DESCRIBE) on t2. alice's token is refused in bob's session.
    let bob = log_in(&broker, "bob", "bob-pw");
    let fields = [("topic", "t2"), ("csrf", alice_delete.as_str()), ("confirm", "yes")];
    let crossed = send(&broker, "POST", "/actions/delete-topic", Some(&bob), &fields);
    assert_eq!(crossed.status, 403, "{}", crossed.body);
    assert!(crossed.body.contains("CSRF"), "{}", crossed.body);
    assert!(topic_exists(&broker, "t2"));
    let bob_delete = token(&broker, "/topics/t2", "actions/delete-topic", &bob);
    let fields = [("topic", "t2"), ("csrf", bob_delete.as_str()), ("confirm", "yes")];
    let deleted = send(&broker, "POST", "/actions/delete-topic", Some(&bob), &fields);
    assert_eq!(deleted.status, 200, "{}", deleted.body);
    assert!(!topic_exists(&broker, "t2"), "bob deleted t2");
    assert!(topic_exists(&broker, "t1"));

    // Forged and altered cookies (another user, a later or earlier expiry under alice's
    // MAC, garbage, a cut MAC): back to the login page. (An expired one: session.rs tests.)
    let part: Vec<&str> = alice.split('.').collect();
    let bob_hex: String = "bob".bytes().map(|b| format!("{b:02x}")).collect();
    let as_bob = format!("{bob_hex}.{}.{}.{}", part[1], part[2], part[3]);
    let later = format!("{}.99999999999.{}.{}", part[0], part[2], part[3]);
    let earlier = format!("{}.1.{}.{}", part[0], part[2], part[3]);
    for forged in [as_bob.as_str(), &later, &earlier, "garbage", "", &alice[..alice.len() - 2]] {
        let answer = get(&broker, "/topics/t1", Some(forged));
        assert!(is_login_redirect(&answer), "{forged:?}: {} {}", answer.head, answer.body);
    }

    // Logout ends the session on the broker, not only in the browser.
    let logout = token(&broker, "/login", "logout", &alice);
    let out = send(&broker, "POST", "/logout", Some(&alice), &[("csrf", &logout)]);
    assert_eq!(out.status, 200, "{}", out.body);
    assert!(out.header("Set-Cookie").is_some_and(|c| c.contains("Max-Age=0")));
    assert!(is_login_redirect(&get(&broker, "/topics/t1", Some(&alice))));
    assert_eq!(get(&broker, "/topics/t2", Some(&bob)).status, 404, "bob's session goes on");
}

#[test]
fn the_console_shows_groups_and_records_and_resets_offsets_only_with_the_acls() {
    let broker = secured_broker();
    create_topic(&broker, "seen", 1);
    create_topic(&broker, "private", 1);
    let producer = common::acks_all_producer(&broker);
    common::runtime().block_on(async {
        for topic in ["seen", "private"] {
            let record = FutureRecord::<(), _>::to(topic).partition(0).payload("record-value");
            producer.send(record, Duration::from_secs(30)).await.unwrap();
        }
    });
    // A group with offsets on both topics, committed as the operator.
    let consumer: rdkafka::consumer::BaseConsumer = rdkafka::config::ClientConfig::new()
        .set("bootstrap.servers", broker.bootstrap())
        .set("group.id", "readers")
        .create()
        .unwrap();
    let mut offsets = rdkafka::TopicPartitionList::new();
    for topic in ["seen", "private"] {
        offsets.add_partition_offset(topic, 0, rdkafka::Offset::Offset(1)).unwrap();
    }
    consumer.commit(&offsets, rdkafka::consumer::CommitMode::Sync).unwrap();
    create_user(&broker, "carol", "carol-pw");
    let mut operator = RawClient::connect(broker.shard_addr(0));
    allow(&mut operator, TOPIC, "seen", "User:carol", READ);
    let carol = log_in(&broker, "carol", "carol-pw");

    // Records: READ on seen, none on private.
    let records = get(&broker, "/topics/seen/0", Some(&carol));
    assert_eq!(records.status, 200, "{}", records.body);
    assert!(records.body.contains("record-value"));
    assert_eq!(get(&broker, "/topics/private/0", Some(&carol)).status, 403);

    // Groups: nothing without DESCRIBE on the group.
    let list = get(&broker, "/groups", Some(&carol));
    assert!(!list.body.contains("readers"), "{}", list.body);
    let page = get(&broker, "/groups/readers", Some(&carol));
    assert_eq!(page.status, 403);
    assert!(page.body.contains("DESCRIBE on GROUP readers"), "{}", page.body);
    assert_eq!(get(&broker, "/api/groups/readers", Some(&carol)).status, 403);

    // READ on the group: listed, with the offsets of the topics carol may describe only.
    allow(&mut operator, GROUP, "readers", "User:carol", READ);
    let list = get(&broker, "/groups", Some(&carol));
    assert!(list.body.contains("readers"), "{}", list.body);
    let page = get(&broker, "/groups/readers", Some(&carol));
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("href=\"/topics/seen\""), "{}", page.body);
    assert!(!page.body.contains("private"), "offsets of a topic carol may not see: {}", page.body);

    // A reset of every committed partition touches private: refused, nothing changes. Of seen
    // alone: done.
    let reset = token(&broker, "/groups/readers", "actions/reset-offsets", &carol);
    let every = [("group", "readers"), ("to", "earliest"), ("csrf", &reset), ("confirm", "yes")];
    let refused = send(&broker, "POST", "/actions/reset-offsets", Some(&carol), &every);
    assert_eq!(refused.status, 403, "{}", refused.body);
    assert!(refused.body.contains("READ on TOPIC private"), "{}", refused.body);
    let committed = |topic: &str| {
        let mut asked = rdkafka::TopicPartitionList::new();
        asked.add_partition(topic, 0);
        let answer = consumer.committed_offsets(asked, Duration::from_secs(10)).unwrap();
        answer.find_partition(topic, 0).unwrap().offset()
    };
    assert_eq!(committed("seen"), rdkafka::Offset::Offset(1), "nothing reset");
    assert_eq!(committed("private"), rdkafka::Offset::Offset(1));
    let mut one = every.to_vec();
    one.push(("topic", "seen"));
    let done = send(&broker, "POST", "/actions/reset-offsets", Some(&carol), &one);
    assert_eq!(done.status, 200, "{}", done.body);
    assert_eq!(committed("seen"), rdkafka::Offset::Offset(0));
    assert_eq!(committed("private"), rdkafka::Offset::Offset(1));
}
