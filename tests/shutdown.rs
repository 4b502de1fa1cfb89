//! Graceful shutdown: SIGTERM drains in-flight requests, checkpoints, closes the logs and
//! exits 0; the restart replays nothing; a second signal exits at once.

mod common;

use std::time::Duration;

use common::{create_topic, Broker, RawClient};
use kafka_protocol::messages::{ApiKey, ResponseKind};

const TOPIC: &str = "graceful";
const PARTITIONS: i32 = 4;
/// Far longer than a shutdown takes; only a hang reaches it.
const EXIT_LIMIT: Duration = Duration::from_secs(90);

/// Produces `count` acknowledged records "n-<i>" round-robin over the partitions.
fn produce(broker: &Broker, count: usize) {
    common::produce_tagged(broker, TOPIC, PARTITIONS, "n", count);
}

/// Every record of the topic, as numbers, sorted.
fn read_all(broker: &Broker) -> Vec<usize> {
    let stored = common::read_topic(broker, TOPIC, PARTITIONS);
    let mut values: Vec<usize> = stored
        .values()
        .flatten()
        .map(|(_, value)| std::str::from_utf8(value).unwrap())
        .map(|value| value.strip_prefix("n-").unwrap().parse().unwrap())
        .collect();
    values.sort_unstable();
    values
}

/// A Fetch at `offset` of partition 0 that parks on the broker for `max_wait_ms`.
fn send_parked_fetch(client: &mut RawClient, offset: i64, max_wait_ms: i32) -> i32 {
    client.send(ApiKey::Fetch, 11, &common::fetch_request(TOPIC, 0, offset, max_wait_ms))
}

fn signal(broker: &Broker, signal: i32) {
    // SAFETY: kill(2) on the pid of a child we started and have not reaped yet.
    let sent = unsafe { libc::kill(broker.pid() as i32, signal) };
    assert_eq!(sent, 0, "kill({signal})");
}

/// The broker's per-shard "log recovered" lines printed after byte `from` of its log.
fn recovery_lines(broker: &Broker, from: usize) -> Vec<String> {
    let log = broker.log();
    let lines = log[from..].lines();
    lines.filter(|l| l.contains("replayed_entries=")).map(str::to_string).collect()
}

#[test]
fn sigterm_answers_in_flight_requests_checkpoints_and_the_restart_replays_nothing() {
    let mut broker = Broker::start(2, &[]);
    create_topic(&broker, TOPIC, PARTITIONS);
    produce(&broker, 2000);
    let mut idle = RawClient::connect(broker.shard_addr(1));
    let mut parked = RawClient::connect(broker.shard_addr(0));
    let end_of_partition_0 = 2000 / PARTITIONS as i64;
    let correlation_id = send_parked_fetch(&mut parked, end_of_partition_0, 3000);
    // Let the broker read the fetch (and park it) before the signal.
    std::thread::sleep(Duration::from_millis(500));

    signal(&broker, libc::SIGTERM);
    match parked.receive(ApiKey::Fetch, 11, correlation_id) {
        ResponseKind::Fetch(r) => assert_eq!(r.responses[0].partitions[0].error_code, 0),
        other => panic!("{other:?}"),
    }
    assert!(parked.is_closed_by_broker(), "the connection closes after its last response");
    assert!(idle.is_closed_by_broker(), "an idle connection is closed");
    let status = broker.wait_for_exit(EXIT_LIMIT).expect("the broker exits after SIGTERM");
    assert_eq!(status.code(), Some(0), "clean exit:\n{}", broker.log());
    assert!(broker.log().contains("shutdown complete"), "{}", broker.log());

    let restarted_at = broker.log().len();
    broker.restart();
    let recovered = recovery_lines(&broker, restarted_at);
    assert_eq!(recovered.len(), 2, "one recovery line per shard: {recovered:?}");
    for line in &recovered {
        assert!(line.contains("replayed_entries=0"), "replayed beyond the checkpoint: {line}");
        assert!(line.contains("replayed_bytes=0"), "replayed beyond the checkpoint: {line}");
    }
    assert_eq!(read_all(&broker), (0..2000).collect::<Vec<_>>(), "every record is there");
}

#[test]
fn a_second_signal_during_shutdown_exits_at_once_with_a_failure_status() {
    let mut broker = Broker::start(1, &[]);
    create_topic(&broker, TOPIC, PARTITIONS);
    produce(&broker, 8);
    // A fetch parked for a minute holds the drain, so the second signal lands during it.
    let mut parked = RawClient::connect(broker.shard_addr(0));
    send_parked_fetch(&mut parked, 2, 60_000);
    std::thread::sleep(Duration::from_millis(500));
    signal(&broker, libc::SIGTERM);
    std::thread::sleep(Duration::from_millis(500));
    assert!(broker.is_running(), "still draining the parked fetch");
    signal(&broker, libc::SIGINT);
    let status = broker.wait_for_exit(EXIT_LIMIT).expect("the broker exits on the second signal");
    assert_eq!(status.code(), Some(128 + libc::SIGINT), "{}", broker.log());
    assert!(!broker.log().contains("shutdown complete"));
}
