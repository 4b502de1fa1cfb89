//! Replicated partitions under repeated failures (docs/replication.md, "What exists:
//! partition groups"; issue 16, step 6): three broker processes on 127.0.0.1 (`--cores 1`
//! each, temp dirs, free ports) hold a topic of replication factor 3, and an idempotent
//! acks=all librdkafka producer writes unique records to it without pause while nodes
//! go down and come back:
//!
//! - **The seeded kill loop.** Each round draws from the seed whether to kill the node
//!   that leads the topic's raft group or one of the two followers, how long to wait
//!   before the kill and how long the node stays down; kills it with SIGKILL; waits for a
//!   new leader (in a higher epoch) if it led and for more acknowledgements while it is
//!   down; restarts it, waits until it names the same leader as the others and its copy
//!   has caught up with the leader's size at that moment, and for more acknowledgements.
//!   `SHARDLOG_SEED` (default `DEFAULT_SEED`) and `SHARDLOG_KILL_LOOP_ROUNDS` (default
//!   `DEFAULT_ROUNDS`, small for CI) replay a run; both are printed at the start, the seed
//!   again on failure, and a summary line at the end.
//! - **A rolling restart.** Each of the three nodes in turn is stopped with SIGTERM (the
//!   graceful shutdown of `src/shutdown.rs`: drain, checkpoint, close the log, exit 0),
//!   restarted and waited for in the same way.
//!
//! Checker, after either: every acknowledged record is present exactly once, at its
//! acknowledged offset, offsets dense from 0, read back from the leader with librdkafka;
//! the three copies end the same size per partition (DescribeLogDirs). Records of a
//! producer that is not idempotent come first, so a restarted node that applied its
//! group's entries twice would hold a larger copy (no sequence check would hide it). A
//! consumer group commits offsets before every failure (the kill loop) or before the first
//! (the rolling restart), and the last commit is read back after the last one. Its
//! coordinator is the leader of the shard's offsets group, here the topic's own group
//! (docs/replication.md, "Consumer-group offsets"), so a leader's kill moves it.
//!
//! Every wait has a deadline that fails with what it waited for; nothing asserts on speed.
//! The figures for a rolling restart (how long produce is unavailable) come from
//! `benches/scripts/failover.py rolling`, not from here.

mod common;
#[path = "common/replicated.rs"]
mod replicated;

use std::collections::BTreeMap;
use std::time::Duration;

use common::Broker;
use rdkafka::consumer::BaseConsumer;
use replicated::{node_of, Ack, Load, Topic, View, DEADLINE, NODES};
use shardlog_storage::XorShift;

const TOPIC: Topic = Topic { name: "kill-loop", partitions: 2, replicas: NODES };
const GROUP: &str = "kill-loop-group";
const ALL: [usize; NODES] = [0, 1, 2];
const DEFAULT_SEED: u64 = 16_006;
/// Rounds in CI: the whole test stays near a minute on the shared 2-core machine.
const DEFAULT_ROUNDS: u64 = 8;
/// Acknowledgements waited for while a node is down, and again after it caught up: each
/// round makes progress through the failure and after it.
const PROGRESS: usize = 30;

/// `name` from the environment as a number, or `default`.
fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|s| s.parse().ok()).unwrap_or(default)
}

/// How a node is taken down.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    /// SIGKILL: no drain, no clean checkpoint.
    Kill,
    /// SIGTERM: the graceful shutdown, which must exit 0.
    Terminate,
}

/// One round of the kill loop, drawn from the seed.
#[derive(Debug)]
struct Round {
    kill_leader: bool,
    /// Which of the two followers (0 or 1, in node order), when not the leader.
    follower: usize,
    pause_ms: u64,
    down_ms: u64,
}

impl Round {
    fn draw(rng: &mut XorShift) -> Round {
        Round {
            kill_leader: rng.chance(1, 2),
            follower: rng.below(2) as usize,
            pause_ms: rng.below(1_000),
            down_ms: rng.below(1_500),
        }
    }

    /// The index in the cluster of the node this round kills, given the leader's.
    fn victim(&self, leader: usize) -> usize {
        if self.kill_leader {
            return leader;
        }
        ALL.into_iter().filter(|n| *n != leader).nth(self.follower).unwrap()
    }
}

/// The index in the cluster of the node that leads the topic's group in `view`.
fn leader_index(view: &View) -> usize {
    let leader = node_of(view[0].1);
    assert!(view.iter().all(|p| node_of(p.1) == leader), "one group, one leader: {view:?}");
    leader - 1
}

/// Starts the cluster, creates the topic, writes the records of a producer that is not
/// idempotent, then starts the idempotent load and waits for its first records.
fn start_loaded_cluster() -> (Vec<Broker>, Load) {
    let (cluster, _) = TOPIC.start_cluster();
    common::produce_tagged(&cluster[0], TOPIC.name, TOPIC.partitions, "plain", 20);
    let load = Load::start(&cluster, TOPIC, "r");
    load.acked.wait_for(PROGRESS, "the first records acknowledged");
    (cluster, load)
}

/// Takes `broker` (named `node` in failures) down the way `how` says. A graceful stop
/// must exit 0.
fn stop(broker: &mut Broker, node: &str, how: Stop) {
    match how {
        Stop::Kill => broker.kill(),
        Stop::Terminate => {
            let sent = unsafe { libc::kill(broker.pid() as i32, libc::SIGTERM) };
            assert_eq!(sent, 0, "SIGTERM to {node}");
            let status = broker.wait_for_exit(DEADLINE);
            let status = status.unwrap_or_else(|| panic!("{node} exits after SIGTERM"));
            assert!(status.success(), "{node}'s graceful stop exited with {status}");
        }
    }
}

/// While `victim` is down: a new leader in a higher epoch if it led (`before`), then
/// `PROGRESS` more acknowledgements.
fn survive_without(cluster: &[Broker], load: &Load, victim: usize, before: &View) {
    let acked_at_stop = load.acked.len();
    let survivors: Vec<usize> = ALL.into_iter().filter(|n| *n != victim).collect();
    if leader_index(before) == victim {
        TOPIC.wait_for(cluster, &survivors, "a new leader in a higher epoch", |views| {
            TOPIC.one_leader(views)
                && node_of(views[0][0].1) != victim + 1
                && views[0].iter().zip(before).all(|(now, then)| now.2 > then.2)
        });
    }
    let what = format!("{PROGRESS} records acknowledged while node {} is down", victim + 1);
    load.acked.wait_for(acked_at_stop + PROGRESS, &what);
}

/// Restarts `victim`, waits until every node names the same leader and the victim's copy
/// holds at least what the leader's held then (caught up), then for `PROGRESS` more
/// acknowledgements.
fn restart_and_catch_up(cluster: &mut [Broker], load: &Load, victim: usize) {
    replicated::wait_for_listeners_closed(&cluster[victim]);
    cluster[victim].restart();
    let view = TOPIC.wait_for_one_leader(cluster, &ALL, "the restarted node to name the leader");
    let target = TOPIC.log_sizes(&cluster[leader_index(&view)]);
    let what = format!("node {} to catch up with the leader's sizes {target:?}", victim + 1);
    common::eventually(DEADLINE, &what, || {
        let sizes = TOPIC.log_sizes(&cluster[victim]);
        sizes.iter().zip(&target).all(|(size, target)| size >= target)
    });
    let what = format!("{PROGRESS} records acknowledged after node {} caught up", victim + 1);
    load.acked.wait_for(load.acked.len() + PROGRESS, &what);
}

/// One failure: the node `choose` picks given the leader's index goes down (`how`), the
/// others carry on, it comes back after `down` ms and catches up. Returns the node's index
/// and whether it led.
fn take_down_and_back(
    cluster: &mut [Broker],
    load: &Load,
    choose: impl FnOnce(usize) -> usize,
    how: Stop,
    down: u64,
) -> (usize, bool) {
    let before = TOPIC.wait_for_one_leader(cluster, &ALL, "every node to name the same leader");
    let leader = leader_index(&before);
    let victim = choose(leader);
    let role = if victim == leader { "the leader" } else { "a follower" };
    stop(&mut cluster[victim], &format!("node {} ({role})", victim + 1), how);
    survive_without(cluster, load, victim, &before);
    std::thread::sleep(Duration::from_millis(down));
    restart_and_catch_up(cluster, load, victim);
    (victim, victim == leader)
}

/// A consumer of the group, bootstrapped at every node.
fn group_consumer(cluster: &[Broker]) -> BaseConsumer {
    replicated::group_consumer(cluster, &ALL, GROUP)
}

fn commit_group_offsets(cluster: &[Broker], acked: &[Ack]) -> BTreeMap<i32, i64> {
    replicated::commit_group_offsets(cluster, TOPIC.name, GROUP, acked)
}

/// The group's committed offsets as the coordinator reports them now.
fn committed_offsets(cluster: &[Broker]) -> BTreeMap<i32, Option<i64>> {
    let consumer = group_consumer(cluster);
    common::committed_offsets(&consumer, TOPIC.name, TOPIC.partitions, DEADLINE)
}

/// The checker, after the load stopped: every acknowledged record once at its offset,
/// offsets dense (read from the leader), the three copies the same size, the group's
/// commits intact. Returns the records stored per partition and the copies' sizes.
fn check(
    cluster: &[Broker],
    acked: &[Ack],
    commits: &BTreeMap<i32, i64>,
) -> (Vec<usize>, Vec<Vec<i64>>) {
    let view = TOPIC.wait_for_one_leader(cluster, &ALL, "every node to name the same leader");
    let stored = common::read_topic(&cluster[leader_index(&view)], TOPIC.name, TOPIC.partitions);
    let ends = replicated::check_acknowledged(&stored, acked);
    let sizes = TOPIC.wait_for_equal_copies(cluster);
    let expected: BTreeMap<i32, Option<i64>> =
        commits.iter().map(|(partition, offset)| (*partition, Some(*offset))).collect();
    assert_eq!(committed_offsets(cluster), expected, "the group's committed offsets");
    (ends, sizes)
}

#[test]
fn acknowledged_records_survive_a_seeded_loop_of_kills_of_leaders_and_followers() {
    let seed = env_u64("SHARDLOG_SEED", DEFAULT_SEED);
    let rounds = env_u64("SHARDLOG_KILL_LOOP_ROUNDS", DEFAULT_ROUNDS);
    eprintln!("replication_kill_loop: SHARDLOG_SEED={seed} SHARDLOG_KILL_LOOP_ROUNDS={rounds}");
    let _replay = common::SeedOnFailure { test: "replication_kill_loop", seed };
    let mut rng = XorShift::new(seed);

    let (mut cluster, load) = start_loaded_cluster();
    let mut commits = commit_group_offsets(&cluster, &load.acked.records());
    let (mut leaders_killed, mut followers_killed) = (0, 0);
    for round in 0..rounds {
        let drawn = Round::draw(&mut rng);
        if round > 0 {
            commits = commit_group_offsets(&cluster, &load.acked.records());
        }
        std::thread::sleep(Duration::from_millis(drawn.pause_ms));
        let choose = |leader| drawn.victim(leader);
        let (victim, led) =
            take_down_and_back(&mut cluster, &load, choose, Stop::Kill, drawn.down_ms);
        *(if led { &mut leaders_killed } else { &mut followers_killed }) += 1;
        eprintln!(
            "replication_kill_loop: round {round}: {drawn:?}: killed node {}; {} acknowledged \
             so far",
            victim + 1,
            load.acked.len()
        );
    }
    let acked = load.stop();
    let (ends, sizes) = check(&cluster, &acked, &commits);
    eprintln!(
        "replication_kill_loop summary: seed={seed} rounds={rounds} acknowledged={} \
         killed_leaders={leaders_killed} killed_followers={followers_killed} stored={ends:?} \
         log_sizes={sizes:?} commits_checked={}",
        acked.len(),
        commits.len()
    );
}

#[test]
fn a_rolling_restart_under_load_loses_no_acknowledged_record() {
    let (mut cluster, load) = start_loaded_cluster();
    let commits = commit_group_offsets(&cluster, &load.acked.records());
    for node in ALL {
        let (_, led) = take_down_and_back(&mut cluster, &load, |_| node, Stop::Terminate, 0);
        eprintln!(
            "rolling restart: node {} (led: {led}) stopped with SIGTERM and back; {} \
             acknowledged so far",
            node + 1,
            load.acked.len()
        );
    }
    let acked = load.stop();
    let (ends, sizes) = check(&cluster, &acked, &commits);
    eprintln!(
        "rolling restart summary: acknowledged={} stored={ends:?} log_sizes={sizes:?}",
        acked.len()
    );
}

/// The checker itself fails on what it is there to catch: a record lost, stored twice,
/// stored at another offset than acknowledged, or a gap in the offsets.
#[test]
fn the_checker_fails_on_a_lost_duplicated_or_displaced_record() {
    let record = |offset: i64, value: &str| (offset, value.as_bytes().to_vec());
    let good: common::Stored =
        [(0, vec![record(0, "r-0"), record(1, "r-2")]), (1, vec![record(0, "r-1")])].into();
    let acked: Vec<Ack> = vec![(0, 0, "r-0".into()), (1, 0, "r-1".into()), (0, 1, "r-2".into())];
    assert_eq!(replicated::check_acknowledged(&good, &acked), vec![2, 1]);

    let mut lost = good.clone();
    lost.get_mut(&0).unwrap().pop();
    let mut twice = good.clone();
    twice.get_mut(&1).unwrap().push(record(1, "r-0"));
    let mut displaced = good.clone();
    displaced.insert(0, vec![record(0, "r-2"), record(1, "r-0")]);
    let mut gap = good.clone();
    gap.get_mut(&0).unwrap()[1].0 = 2;
    for (what, stored) in [("lost", lost), ("twice", twice), ("displaced", displaced), ("gap", gap)]
    {
        let checked = std::panic::catch_unwind(|| replicated::check_acknowledged(&stored, &acked));
        assert!(checked.is_err(), "the checker passed a {what} record: {stored:?}");
    }
}
