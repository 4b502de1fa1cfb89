//! The replication transport (shards/src/replication/transport.rs) over real sockets on
//! 127.0.0.1, with free ports.
//!
//! The main test: three nodes, each a thread with its own glommio executor hosting one
//! `RaftGroup` whose durable state is an in-memory `LogImage` (node 2 reports its writes
//! durable only at its next tick, the others at once), connected only through the
//! transport. A leader is elected and proposals commit on all three in the same order;
//! the leader's node is stopped (its executor ends, its sockets close, what it had not
//! reported durable is lost), a new leader is elected and commits; the stopped node
//! restarts from its durable image on the same address, reconnects, and catches up to the
//! same committed sequence. Checked at every poll: the three committed sequences are
//! prefixes of one another.
//!
//! Then the transport's own rules, two transports on one executor: a batch queued in one
//! turn leaves as one frame; an outbox toward a peer that is down stays within its bound
//! (dropping the oldest) and what it kept arrives, in order, once the peer is up; a peer
//! that went away (its connection lost) is sent nothing of the time it was gone; a message
//! larger than a frame arrives whole (sent in pieces, one such message at a time); a peer
//! with another shard count or another node id is refused at the hand-shake.
//!
//! Every wait has a deadline that fails the test with what it waited for; nothing asserts
//! on speed.

use std::net::SocketAddr;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use futures_lite::future;
use glommio::channels::local_channel::LocalReceiver;
use glommio::{LocalExecutorBuilder, Placement};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use shardlog_shards::replication::persist::{replay, ShardLogSink};
use shardlog_shards::replication::{
    raft_id, Entry, GroupConfig, GroupExists, GroupHost, GroupSink, Inbound, LogImage, Message,
    MessageType, Outcome, RaftGroup, Transport, TransportConfig, WriteRequest, Written,
};
use shardlog_storage::{LogConfig, ShardLog, SimDisk};

const NODES: u64 = 3;
const GROUP: u64 = 7;
const TICK: Duration = Duration::from_millis(10);
/// Each phase's deadline: generous, the machine is shared; a hang fails, slowness does not.
const PHASE: Duration = Duration::from_secs(60);

fn free_addrs(count: usize) -> Vec<SocketAddr> {
    // Held together so they differ; released before the transports bind them.
    let listeners: Vec<_> =
        (0..count).map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap()).collect();
    listeners.iter().map(|l| l.local_addr().unwrap()).collect()
}

/// What a node shows the test thread.
#[derive(Clone, Default)]
struct View {
    term: u64,
    leader: bool,
    /// (index, term, data) of every entry committed in this life, in order.
    committed: Vec<(u64, u64, Vec<u8>)>,
    connects: u64,
}

enum Command {
    Propose(Vec<u8>),
    Stop,
}

struct Node {
    commands: mpsc::Sender<Command>,
    view: Arc<Mutex<View>>,
    thread: thread::JoinHandle<LogImage>,
}

fn start_node(id: u64, addrs: &[SocketAddr], image: LogImage) -> Node {
    let (commands, received) = mpsc::channel();
    let view = Arc::new(Mutex::new(View::default()));
    let shown = view.clone();
    let addrs = addrs.to_vec();
    let thread = thread::Builder::new()
        .name(format!("node-{id}"))
        .spawn(move || {
            let ex = LocalExecutorBuilder::new(Placement::Unbound).make().expect("an executor");
            let image = ex.run(run_node(id, addrs, image, received, shown));
            drop(ex);
            image
        })
        .unwrap();
    Node { commands, view, thread }
}

/// Binds, retrying while the address is still held (a restart on the same port).
fn start_transport(config: TransportConfig) -> (Transport, LocalReceiver<Inbound>) {
    let deadline = Instant::now() + PHASE;
    loop {
        match Transport::start(config.clone()) {
            Ok(started) => return started,
            Err(e) if Instant::now() < deadline => {
                eprintln!("node {}: bind {}: {e}; retrying", config.node_id, config.listen);
                thread::sleep(Duration::from_millis(50));
            }
            Err(e) => panic!("node {}: cannot bind {}: {e}", config.node_id, config.listen),
        }
    }
}

/// One node's life: the raft group driven by ticks, inbound messages and the test's
/// commands; returns its durable image when told to stop.
async fn run_node(
    id: u64,
    addrs: Vec<SocketAddr>,
    image: LogImage,
    commands: mpsc::Receiver<Command>,
    view: Arc<Mutex<View>>,
) -> LogImage {
    let peers = (0..NODES).filter(|&n| n != id).map(|n| (n, addrs[n as usize])).collect();
    let mut config = TransportConfig::new(id, 0, 1, addrs[id as usize], peers);
    config.backoff_min = Duration::from_millis(10);
    config.backoff_max = Duration::from_millis(200);
    let (transport, inbound) = start_transport(config);
    let mut group_config = GroupConfig::new(id + 1);
    group_config.election_tick = 20;
    group_config.heartbeat_tick = 3;
    let mut group = RaftGroup::recover(&group_config, image.clone(), 0).unwrap();
    let mut durable = image;
    let durable_at_tick = id == 2;
    let mut unsynced = Vec::new();
    let mut next_tick = Instant::now() + TICK;
    loop {
        loop {
            match commands.try_recv() {
                Ok(Command::Propose(data)) => {
                    let _ = group.propose(data); // a follower refuses: the test retries
                }
                Ok(Command::Stop) | Err(mpsc::TryRecvError::Disconnected) => return durable,
                Err(mpsc::TryRecvError::Empty) => break,
            }
        }
        let wait = next_tick.saturating_duration_since(Instant::now());
        let received = future::or(inbound.recv(), async {
            glommio::timer::sleep(wait).await;
            None
        })
        .await;
        if let Some(inbound) = received {
            // Errors are messages raft refuses; none are expected, dropping is what raft wants.
            let _ = group.step(inbound.message);
        }
        if Instant::now() >= next_tick {
            group.tick();
            next_tick = (next_tick + TICK).max(Instant::now());
            if durable_at_tick {
                make_durable(&mut group, &mut durable, std::mem::take(&mut unsynced));
            }
        }
        loop {
            let writes = group.take_writes();
            if writes.is_empty() {
                break;
            }
            if durable_at_tick {
                unsynced.extend(writes);
                break;
            }
            make_durable(&mut group, &mut durable, writes);
        }
        for message in group.take_messages() {
            transport.send(message.to - 1, GROUP, message).expect("a peer");
        }
        let mut shown = view.lock().unwrap();
        shown.term = group.term();
        shown.leader = group.is_leader();
        shown.connects = transport.stats().connects;
        let committed = group.take_committed().into_iter();
        shown.committed.extend(committed.map(|e| (e.index, e.term, e.data.to_vec())));
    }
}

fn make_durable(
    group: &mut RaftGroup,
    durable: &mut LogImage,
    writes: Vec<shardlog_shards::replication::WriteRequest>,
) {
    let Some(last) = writes.last().map(|w| w.number) else { return };
    for write in &writes {
        durable.apply(write);
    }
    group.durable(last);
}

struct Cluster {
    nodes: Vec<Option<Node>>,
}

impl Cluster {
    fn views(&self) -> Vec<Option<View>> {
        let view = |n: &Node| n.view.lock().unwrap().clone();
        self.nodes.iter().map(|n| n.as_ref().map(view)).collect()
    }

    /// Polls until `done` says yes; checks at every poll that the running nodes' committed
    /// sequences are prefixes of one another (the same entries in the same order).
    fn wait_for<T>(&self, what: &str, mut done: impl FnMut(&[Option<View>]) -> Option<T>) -> T {
        let deadline = Instant::now() + PHASE;
        loop {
            let views = self.views();
            let running: Vec<&View> = views.iter().flatten().collect();
            for a in &running {
                for b in &running {
                    let n = a.committed.len().min(b.committed.len());
                    assert_eq!(a.committed[..n], b.committed[..n], "committed sequences diverge");
                }
            }
            if let Some(found) = done(&views) {
                return found;
            }
            let summary: Vec<_> = views
                .iter()
                .map(|v| v.as_ref().map(|v| (v.term, v.leader, v.committed.len())))
                .collect();
            assert!(
                Instant::now() < deadline,
                "waited {PHASE:?} for {what}; (term, leader, committed) per node: {summary:?}"
            );
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// The running leader in a term above `above`, once there is one.
    fn leader_above(&self, above: u64) -> (usize, u64) {
        self.wait_for(&format!("a leader in a term above {above}"), |views| {
            views.iter().enumerate().find_map(|(k, v)| {
                v.as_ref().filter(|v| v.leader && v.term > above).map(|v| (k, v.term))
            })
        })
    }

    /// Proposes `value` to whichever node leads, again whenever the leader or its term
    /// changes before some node has committed it (a proposal dies with its leader's term).
    fn commit(&self, value: &[u8]) {
        let committed = |views: &[Option<View>]| {
            views.iter().flatten().any(|v| v.committed.iter().any(|(_, _, d)| d == value))
        };
        let deadline = Instant::now() + PHASE;
        while !committed(&self.views()) {
            assert!(Instant::now() < deadline, "waited {PHASE:?} to commit {value:?}");
            let leader = self.leader_above(0);
            let node = self.nodes[leader.0].as_ref().unwrap();
            node.commands.send(Command::Propose(value.to_vec())).unwrap();
            let still_leads = |views: &[Option<View>]| {
                views[leader.0].as_ref().is_some_and(|v| v.leader && v.term == leader.1)
            };
            loop {
                let views = self.views();
                if committed(&views) || !still_leads(&views) {
                    break;
                }
                assert!(Instant::now() < deadline, "waited {PHASE:?} to commit {value:?}");
                thread::sleep(Duration::from_millis(10));
            }
        }
    }

    /// Waits until every node runs and has committed the same sequence, holding every one
    /// of `values`; returns it.
    fn converged(&self, values: &[Vec<u8>]) -> Vec<(u64, u64, Vec<u8>)> {
        self.wait_for("every node to commit the same sequence", |views| {
            let first = views[0].as_ref()?;
            let all_same =
                views.iter().all(|v| v.as_ref().is_some_and(|v| v.committed == first.committed));
            let data: Vec<&Vec<u8>> =
                first.committed.iter().map(|(_, _, d)| d).filter(|d| !d.is_empty()).collect();
            let holds_all = values.iter().all(|v| data.contains(&v));
            (all_same && holds_all).then(|| first.committed.clone())
        })
    }

    fn stop(&mut self, node: usize) -> LogImage {
        let stopped = self.nodes[node].take().unwrap();
        stopped.commands.send(Command::Stop).unwrap();
        stopped.thread.join().expect("the node's thread ends")
    }
}

#[test]
fn three_nodes_elect_commit_fail_over_and_catch_up_over_real_sockets() {
    let addrs = free_addrs(NODES as usize);
    let voters: Vec<u64> = (1..=NODES).collect();
    let nodes = (0..NODES).map(|id| Some(start_node(id, &addrs, LogImage::new(&voters))));
    let mut cluster = Cluster { nodes: nodes.collect() };

    cluster.leader_above(0);
    let first: Vec<Vec<u8>> = (0..5).map(|k| format!("first-{k}").into_bytes()).collect();
    for value in &first {
        cluster.commit(value);
    }
    let before = cluster.converged(&first);

    // Leadership may have moved since: stop the node that leads now.
    let (first_leader, first_term) = cluster.leader_above(0);
    let image = cluster.stop(first_leader);
    assert!(image.hard_state.commit > 0, "the stopped leader's durable image is empty");
    let (second_leader, second_term) = cluster.leader_above(first_term);
    assert_ne!(second_leader, first_leader);
    let second: Vec<Vec<u8>> = (0..5).map(|k| format!("second-{k}").into_bytes()).collect();
    for value in &second {
        cluster.commit(value);
    }

    cluster.nodes[first_leader] = Some(start_node(first_leader as u64, &addrs, image));
    let all: Vec<Vec<u8>> = first.iter().chain(&second).cloned().collect();
    let after = cluster.converged(&all);
    assert_eq!(after[..before.len()], before[..], "the first sequence was rewritten");
    let views = cluster.views();
    let restarted = views[first_leader].as_ref().unwrap();
    assert!(restarted.connects > 0, "the restarted node never connected to a peer");
    eprintln!(
        "leaders: node {first_leader} in term {first_term}, then node {second_leader} in term \
         {second_term}; {} entries committed on every node",
        after.len()
    );
    for id in 0..NODES as usize {
        cluster.stop(id);
    }
}

// ---- the transport's own rules, two transports on one executor ----

fn run_local<T>(main: impl std::future::Future<Output = T>) -> T {
    let ex = LocalExecutorBuilder::new(Placement::Unbound).make().expect("an executor");
    let out = ex.run(main);
    drop(ex);
    out
}

fn heartbeat(to: u64, commit: u64) -> Message {
    let mut message = Message::default();
    message.set_msg_type(MessageType::MsgHeartbeat);
    message.to = to;
    message.commit = commit;
    message
}

/// Receives `count` messages, or fails after the deadline.
async fn receive(inbound: &LocalReceiver<Inbound>, count: usize) -> Vec<Inbound> {
    let mut received = Vec::new();
    let deadline = Instant::now() + PHASE;
    while received.len() < count {
        let wait = deadline.saturating_duration_since(Instant::now());
        let next = future::or(inbound.recv(), async {
            glommio::timer::sleep(wait).await;
            None
        })
        .await;
        let got = received.len();
        received.push(next.unwrap_or_else(|| panic!("{got} of {count} messages within {PHASE:?}")));
    }
    received
}

/// Waits until `done` or fails after the deadline.
async fn wait_until(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + PHASE;
    while !done() {
        assert!(Instant::now() < deadline, "waited {PHASE:?} for {what}");
        glommio::timer::sleep(Duration::from_millis(5)).await;
    }
}

fn config(node_id: u64, listen: SocketAddr, peers: Vec<(u64, SocketAddr)>) -> TransportConfig {
    let mut config = TransportConfig::new(node_id, 0, 1, listen, peers);
    config.backoff_min = Duration::from_millis(5);
    config.backoff_max = Duration::from_millis(50);
    config
}

#[test]
fn messages_queued_in_one_turn_leave_as_one_frame_in_order() {
    let addrs = free_addrs(2);
    run_local(async move {
        let (a, _) = Transport::start(config(1, addrs[0], vec![(2, addrs[1])])).unwrap();
        let (b, inbound) = Transport::start(config(2, addrs[1], vec![(1, addrs[0])])).unwrap();
        for commit in 0..100 {
            a.send(2, GROUP, heartbeat(2, commit)).unwrap();
        }
        let received = receive(&inbound, 100).await;
        let commits: Vec<u64> = received.iter().map(|m| m.message.commit).collect();
        assert_eq!(commits, (0..100).collect::<Vec<_>>());
        assert!(received.iter().all(|m| m.from == 1 && m.group == GROUP));
        let (sent, got) = (a.stats(), b.stats());
        assert_eq!((sent.frames_sent, sent.messages_sent), (1, 100), "{sent:?}");
        assert_eq!((got.frames_received, got.messages_received), (1, 100), "{got:?}");
        assert_eq!(a.outbox_bytes(2), Some(0));
    });
}

/// A raft snapshot message whose data is `len` bytes (a large topic table's).
fn snapshot_message(to: u64, len: usize) -> Message {
    let mut message = Message::default();
    message.set_msg_type(MessageType::MsgSnapshot);
    message.to = to;
    let snapshot = message.mut_snapshot();
    snapshot.data = (0..len).map(|i| (i % 251) as u8).collect::<Vec<u8>>().into();
    snapshot.mut_metadata().index = 120;
    message
}

#[test]
fn a_message_larger_than_a_frame_arrives_whole_in_pieces_one_at_a_time() {
    let addrs = free_addrs(2);
    run_local(async move {
        let (a, _) = Transport::start(config(1, addrs[0], vec![(2, addrs[1])])).unwrap();
        let (b, inbound) = Transport::start(config(2, addrs[1], vec![(1, addrs[0])])).unwrap();
        // 10 MiB of snapshot data: two and a half frames' worth, 11 pieces.
        let large = snapshot_message(2, 10 << 20);
        a.send(2, GROUP, heartbeat(2, 1)).unwrap();
        a.send(2, GROUP, large.clone()).unwrap();
        a.send(2, GROUP, heartbeat(2, 2)).unwrap();
        // Another large one while the first is in pieces: dropped (raft sends it again).
        a.send(2, GROUP, snapshot_message(2, 5 << 20)).unwrap();
        let received = receive(&inbound, 3).await;
        // One piece a frame, the outbox after it: the heartbeats queued before and after
        // the large message go in its first piece's frame, not behind all its pieces.
        assert_eq!(received[0].message, heartbeat(2, 1));
        assert_eq!(received[1].message, heartbeat(2, 2));
        assert!(received[2].message == large, "the large message arrives whole, last");
        assert!(received.iter().all(|m| m.from == 1 && m.group == GROUP));
        assert_eq!(a.stats().dropped_overflow, 1);
        // Once they are sent, the next one on the same connection.
        a.send(2, GROUP, large.clone()).unwrap();
        assert!(receive(&inbound, 1).await[0].message == large);
        let (sent, got) = (a.stats(), b.stats());
        assert_eq!((sent.messages_cut, sent.dropped_too_large), (2, 0), "{sent:?}");
        assert_eq!((got.messages_reassembled, got.reassemblies_abandoned), (2, 0), "{got:?}");
        assert_eq!(sent.frames_sent, 22, "one frame per 1 MiB piece, 11 a message: {sent:?}");
        assert_eq!(a.outbox_bytes(2), Some(0));
    });
}

#[test]
fn an_outbox_to_a_peer_that_is_down_keeps_its_bound_and_delivers_the_newest_once_it_is_up() {
    let addrs = free_addrs(2);
    run_local(async move {
        let mut sender = config(1, addrs[0], vec![(2, addrs[1])]);
        sender.outbox_max_bytes = 4096;
        let (a, _) = Transport::start(sender).unwrap();
        let big = |k: u64| {
            let mut message = heartbeat(2, k);
            message.context = vec![0xcd; 100].into();
            message
        };
        for k in 0..1000 {
            a.send(2, GROUP, big(k)).unwrap();
            // Let the writer try (and fail) to connect now and then.
            if k % 100 == 0 {
                glommio::timer::sleep(Duration::from_millis(2)).await;
            }
        }
        let queued = a.outbox_bytes(2).unwrap();
        assert!(queued <= 4096, "outbox of {queued} bytes, bound 4096");
        let dropped = a.stats().dropped_overflow;
        assert!(dropped > 900, "only {dropped} of 1000 dropped with room for ~35");
        assert!(a.stats().connect_failures > 0, "{:?}", a.stats());
        assert_eq!(a.send(9, GROUP, big(0)), Err(shardlog_shards::replication::UnknownPeer(9)));

        let (_b, inbound) = Transport::start(config(2, addrs[1], vec![(1, addrs[0])])).unwrap();
        let kept = 1000 - dropped as usize;
        let received = receive(&inbound, kept).await;
        let commits: Vec<u64> = received.iter().map(|m| m.message.commit).collect();
        assert_eq!(commits, (1000 - kept as u64..1000).collect::<Vec<_>>(), "the newest, in order");
        wait_until("the sender to count its connection", || a.stats().connects == 1).await;
    });
}

#[test]
fn a_peer_that_went_away_is_sent_nothing_of_the_time_it_was_gone() {
    let addrs = free_addrs(2);
    run_local(async move {
        let (a, _) = Transport::start(config(1, addrs[0], vec![(2, addrs[1])])).unwrap();
        let (b, inbound) = start_transport(config(2, addrs[1], vec![(1, addrs[0])]));
        a.send(2, GROUP, heartbeat(2, 1)).unwrap();
        assert_eq!(receive(&inbound, 1).await[0].message.commit, 1);
        drop((b, inbound));
        wait_until("node 1 to see node 2 gone", || a.connected_peers() == 0).await;
        for k in 2..102 {
            a.send(2, GROUP, heartbeat(2, k)).unwrap();
        }
        assert_eq!(a.outbox_bytes(2), Some(0), "messages queued for a peer that went away");
        let dropped = a.stats().dropped_away;
        assert!(dropped >= 100, "{dropped} of 100 messages dropped while node 2 was gone");

        // Node 2 back on the same address: once node 1's connection to it passed its
        // hand-shake, the first message it receives is the first one sent since.
        let (_b, inbound) = start_transport(config(2, addrs[1], vec![(1, addrs[0])]));
        wait_until("node 1 to connect again", || a.stats().connects == 2).await;
        a.send(2, GROUP, heartbeat(2, 1000)).unwrap();
        let received = receive(&inbound, 1).await;
        assert_eq!(received[0].message.commit, 1000, "a message of the time node 2 was gone");
        assert_eq!(a.stats().dropped_away, dropped, "dropped once node 2 was back");
    });
}

#[test]
fn a_peer_with_another_shard_count_or_node_id_is_refused_at_the_hand_shake() {
    let addrs = free_addrs(3);
    run_local(async move {
        // Node 1 runs 1 shard, node 2 runs 2.
        let (a, _) = Transport::start(config(1, addrs[0], vec![(2, addrs[1])])).unwrap();
        let mut two_shards = config(2, addrs[1], vec![(1, addrs[0])]);
        two_shards.shard_count = 2;
        let (b, _) = Transport::start(two_shards).unwrap();
        a.send(2, GROUP, heartbeat(2, 1)).unwrap();
        wait_until("both sides to refuse", || {
            a.stats().refused_hellos > 0 && b.stats().refused_hellos > 0
        })
        .await;
        assert_eq!(a.stats().connects, 0);
        assert_eq!(b.stats().messages_received, 0, "a message crossed a refused hand-shake");

        // Node 3 lists node 9 at node 1's address: node 1 answers as node 1 (refused by
        // node 3) and does not know node 3 (refused by node 1).
        let (c, _) = Transport::start(config(3, addrs[2], vec![(9, addrs[0])])).unwrap();
        c.send(9, GROUP, heartbeat(9, 1)).unwrap();
        wait_until("node 3's hand-shake to be refused", || c.stats().refused_hellos > 0).await;
        assert_eq!(c.stats().connects, 0);
    });
}

#[test]
fn a_dropped_transport_closes_its_listener_and_its_peers_notice() {
    let addrs = free_addrs(2);
    run_local(async move {
        let (a, _) = Transport::start(config(1, addrs[0], vec![(2, addrs[1])])).unwrap();
        let (b, inbound) = Transport::start(config(2, addrs[1], vec![(1, addrs[0])])).unwrap();
        a.send(2, GROUP, heartbeat(2, 1)).unwrap();
        b.send(1, GROUP, heartbeat(1, 1)).unwrap();
        receive(&inbound, 1).await;
        wait_until("both to connect", || a.stats().connects == 1 && b.stats().connects == 1).await;
        drop(a);
        wait_until("node 1's listener to close", || {
            std::net::TcpStream::connect(addrs[0]).is_err()
        })
        .await;
        // Node 2's connection to node 1 is gone too: its writes fail, then it cannot
        // connect again.
        wait_until("node 2 to fail to reach node 1", || {
            b.send(1, GROUP, heartbeat(1, 2)).unwrap();
            b.stats().connect_failures > 0
        })
        .await;
    });
}

// ---- the shard's event loop: a GroupHost per node, one executor ----

/// The hosts' tick: elections after 0.4-0.8 s (20-40 ticks), heartbeats every 60 ms. The
/// three hosts share one executor, so a stall of the machine stalls them alike.
const HOST_TICK: Duration = Duration::from_millis(20);

/// A group's durable state and what it applied, in memory: every write is durable at once.
struct MemorySink {
    durable: LogImage,
    applied: Rc<RefCell<Applied>>,
}

#[derive(Default)]
struct Applied {
    /// Data of the non-empty entries committed, in order.
    committed: Vec<Vec<u8>>,
    outcomes: Vec<Outcome>,
}

impl GroupSink for MemorySink {
    fn write(&mut self, writes: Vec<WriteRequest>) -> Written {
        for write in &writes {
            self.durable.apply(write);
        }
        writes.last().map_or(Written::Later, |w| Written::Durable(w.number))
    }

    fn apply(&mut self, committed: Vec<Entry>, outcomes: Vec<Outcome>) {
        self.applied.borrow_mut().record(committed, outcomes);
    }
}

impl Applied {
    fn record(&mut self, committed: Vec<Entry>, outcomes: Vec<Outcome>) {
        let data = committed.into_iter().map(|e| e.data.to_vec()).filter(|d| !d.is_empty());
        self.committed.extend(data);
        self.outcomes.extend(outcomes);
    }
}

/// Node `node_id`'s replica of a group from `image`, with the hosts' election timing.
fn host_replica(node_id: u64, image: LogImage) -> RaftGroup {
    let mut group_config = GroupConfig::new(raft_id(node_id));
    group_config.election_tick = 20;
    group_config.heartbeat_tick = 3;
    RaftGroup::recover(&group_config, image, 0).unwrap()
}

/// Hosts group `id` of `voters` (node ids) on `host`; returns what it applies.
fn host_group(host: &GroupHost, node_id: u64, id: u64, voters: &[u64]) -> Rc<RefCell<Applied>> {
    let raft_ids: Vec<u64> = voters.iter().map(|&n| raft_id(n)).collect();
    let group = host_replica(node_id, LogImage::new(&raft_ids));
    add_recorded_group(host, id, group, |applied| {
        Box::new(MemorySink { durable: LogImage::new(&raft_ids), applied })
    })
}

/// Hosts `group` as `id` on `host` with the sink `sink` makes around what it applies.
fn add_recorded_group(
    host: &GroupHost,
    id: u64,
    group: RaftGroup,
    sink: impl FnOnce(Rc<RefCell<Applied>>) -> Box<dyn GroupSink>,
) -> Rc<RefCell<Applied>> {
    let applied = Rc::new(RefCell::new(Applied::default()));
    host.add_group(id, group, sink(applied.clone())).unwrap();
    applied
}

#[test]
fn group_hosts_step_what_arrives_send_what_their_groups_emit_and_drop_unknown_groups() {
    // Node ids 0, 1, 2: node 0 is raft id 1 (raft-rs reserves 0).
    let addrs = free_addrs(3);
    run_local(async move {
        let hosts: Vec<GroupHost> = (0..3u64)
            .map(|n| {
                let peers = (0..3).filter(|&p| p != n).map(|p| (p, addrs[p as usize])).collect();
                GroupHost::start(config(n, addrs[n as usize], peers), HOST_TICK).unwrap()
            })
            .collect();
        let applied: Vec<_> =
            (0..3).map(|n| host_group(&hosts[n], n as u64, GROUP, &[0, 1, 2])).collect();
        // Only node 0 hosts group 8: what it sends for it reaches hosts that drop it.
        host_group(&hosts[0], 0, GROUP + 1, &[0, 1, 2]);
        assert_eq!(
            hosts[0].add_group(GROUP, dummy_group(0), Box::new(NoSink)),
            Err(GroupExists(GROUP))
        );
        assert!(hosts[1].with_group(GROUP + 1, |g| g.term()).is_none());

        let leads = |h: &GroupHost| h.with_group(GROUP, |g| g.is_leader()).unwrap();
        wait_until("a leader of group 7", || hosts.iter().any(leads)).await;
        let leader = hosts.iter().position(leads).unwrap();
        let values: Vec<Vec<u8>> = (0..5).map(|k| format!("value-{k}").into_bytes()).collect();
        let proposals: Vec<_> = values
            .iter()
            .map(|v| hosts[leader].with_group(GROUP, |g| g.propose(v.clone())).unwrap())
            .map(|p| p.expect("the leader just elected accepts proposals"))
            .collect();
        wait_until("every node to commit the five values", || {
            applied.iter().all(|a| a.borrow().committed == values)
        })
        .await;
        let committed: Vec<Outcome> = proposals.into_iter().map(Outcome::Committed).collect();
        wait_until("the leader's outcomes", || applied[leader].borrow().outcomes == committed)
            .await;
        wait_until("hosts 1 and 2 to drop group 8's messages", || {
            hosts[1..].iter().all(|h| h.stats().dropped_unknown_group > 0)
        })
        .await;
        for host in &hosts {
            let stats = host.stats();
            assert!(stats.messages_stepped > 0 && stats.ticks > 0, "{stats:?}");
            assert_eq!((stats.dropped_refused, stats.dropped_unknown_peer), (0, 0), "{stats:?}");
            assert_eq!(host.transport().connected_peers(), 2);
        }
        assert_eq!(hosts[0].stats().dropped_unknown_group, 0, "nobody else hosts a group 0 lacks");
        assert_eq!(hosts[0].group_count(), 2);

        drop(hosts);
        wait_until("the dropped hosts' listeners to close", || {
            addrs.iter().all(|a| std::net::TcpStream::connect(a).is_err())
        })
        .await;
    });
}

fn dummy_group(node_id: u64) -> RaftGroup {
    let voters = [raft_id(node_id)];
    RaftGroup::recover(&GroupConfig::new(raft_id(node_id)), LogImage::new(&voters), 0).unwrap()
}

/// A sink for a group that is refused before it runs.
struct NoSink;

impl GroupSink for NoSink {
    fn write(&mut self, _: Vec<WriteRequest>) -> Written {
        unreachable!("a refused group never writes")
    }

    fn apply(&mut self, _: Vec<Entry>, _: Vec<Outcome>) {
        unreachable!("a refused group never applies")
    }
}

// ---- write requests on the shard log: ShardLogSink, durability from the flusher ----

fn small_log() -> LogConfig {
    LogConfig {
        segment_size_bytes: 256 << 10,
        tail_cache_bytes: 1 << 20,
        max_batch_bytes: 64 << 10,
        blocking_flush_max_bytes: 0,
        ..LogConfig::default()
    }
}

/// Hosts group `id` on `host` from `image`, its writes on `log`; returns what it applies.
fn host_logged_group(
    host: &GroupHost,
    log: &ShardLog<SimDisk>,
    node_id: u64,
    id: u64,
    image: LogImage,
) -> Rc<RefCell<Applied>> {
    add_recorded_group(host, id, host_replica(node_id, image), |applied| {
        let on_apply = move |committed: Vec<Entry>, outcomes: Vec<Outcome>| {
            applied.borrow_mut().record(committed, outcomes)
        };
        Box::new(ShardLogSink::new(log.clone(), id, Box::new(on_apply)))
    })
}

#[test]
fn a_group_hears_a_write_durable_only_once_the_shard_log_flushed_it() {
    let addrs = free_addrs(1);
    run_local(async move {
        let disk = SimDisk::new(1);
        let (log, _, _) = ShardLog::open(disk.clone(), small_log()).await.unwrap();
        let host = GroupHost::start(config(0, addrs[0], vec![]), HOST_TICK).unwrap();
        let applied = host_logged_group(&host, &log, 0, GROUP, LogImage::new(&[raft_id(0)]));
        let commit = || host.with_group(GROUP, |g| g.commit_index()).unwrap();
        wait_until("the single voter to lead and commit its first entry", || {
            host.with_group(GROUP, |g| g.is_leader() && g.commit_index() == g.last_index()).unwrap()
        })
        .await;

        // Not at submission: the proposal's write is queued for the next flush.
        let flushes = log.probes().flushes;
        let proposal = host.with_group(GROUP, |g| g.propose(b"first".to_vec())).unwrap().unwrap();
        assert!(commit() < proposal.index, "committed before the flush of its write");
        wait_until("the proposal to commit", || {
            applied.borrow().outcomes.contains(&Outcome::Committed(proposal))
        })
        .await;
        assert!(log.probes().flushes > flushes);

        // Never while the disk does not complete the write.
        disk.stall_writes_after(0);
        let stuck = host.with_group(GROUP, |g| g.propose(b"stuck".to_vec())).unwrap().unwrap();
        let ticks = host.stats().ticks;
        wait_until("30 more ticks", || host.stats().ticks >= ticks + 30).await;
        assert!(commit() < stuck.index, "committed a write its disk never completed");
        assert!(!applied.borrow().outcomes.contains(&Outcome::Committed(stuck)));
    });
}

const LOGGED_GROUPS: [u64; 3] = [1, 2, 3];

/// A node of the persisted cluster: its disk, shard log, host, and what each group applied
/// in this life.
struct LoggedNode {
    disk: SimDisk,
    log: ShardLog<SimDisk>,
    host: GroupHost,
    applied: BTreeMap<u64, Rc<RefCell<Applied>>>,
}

/// Starts node `n` from what `disk` holds: the shard log recovers, the raft stream replays
/// into the groups' images, the groups start from them.
async fn start_logged_node(n: u64, addrs: &[SocketAddr], disk: SimDisk) -> LoggedNode {
    let (log, recovered, _) = ShardLog::open(disk.clone(), small_log()).await.unwrap();
    let voters: Vec<u64> = (0..NODES).map(raft_id).collect();
    let mut images = replay(&recovered, |_| LogImage::new(&voters)).unwrap();
    let peers = (0..NODES).filter(|&p| p != n).map(|p| (p, addrs[p as usize])).collect();
    let host = GroupHost::start(config(n, addrs[n as usize], peers), HOST_TICK).unwrap();
    let applied = LOGGED_GROUPS
        .iter()
        .map(|&g| {
            let image = images.remove(&g).unwrap_or_else(|| LogImage::new(&voters));
            (g, host_logged_group(&host, &log, n, g, image))
        })
        .collect();
    LoggedNode { disk, log, host, applied }
}

/// Checks at most one leader per (group, term) over everything observed so far.
fn observe_leaders(nodes: &[LoggedNode], leaders: &RefCell<BTreeMap<(u64, u64), u64>>) {
    for (n, node) in nodes.iter().enumerate() {
        for &g in &LOGGED_GROUPS {
            let (leads, term) = node.host.with_group(g, |g| (g.is_leader(), g.term())).unwrap();
            if leads {
                let first = *leaders.borrow_mut().entry((g, term)).or_insert(n as u64);
                assert_eq!(first, n as u64, "group {g}: two leaders in term {term}");
            }
        }
    }
}

/// Proposes `values` to group `g`'s leader (waiting for one) and waits for each one's
/// outcome there; returns the values acknowledged (`Committed`).
async fn propose_all(
    nodes: &[LoggedNode],
    leaders: &RefCell<BTreeMap<(u64, u64), u64>>,
    g: u64,
    values: &[Vec<u8>],
) -> Vec<Vec<u8>> {
    let leads = |node: &LoggedNode| node.host.with_group(g, |group| group.is_leader()).unwrap();
    let mut acked = Vec::new();
    for value in values {
        wait_until(&format!("a leader of group {g}"), || {
            observe_leaders(nodes, leaders);
            nodes.iter().any(leads)
        })
        .await;
        let leader = nodes.iter().position(leads).unwrap();
        let proposed = nodes[leader].host.with_group(g, |group| group.propose(value.clone()));
        let Ok(proposal) = proposed.unwrap() else { continue };
        let outcome = || {
            let applied = nodes[leader].applied[&g].borrow();
            applied.outcomes.iter().copied().find(|o| match o {
                Outcome::Committed(p) | Outcome::Abandoned(p) => *p == proposal,
            })
        };
        wait_until(&format!("the outcome of a proposal to group {g}"), || {
            observe_leaders(nodes, leaders);
            outcome().is_some()
        })
        .await;
        if outcome() == Some(Outcome::Committed(proposal)) {
            acked.push(value.clone());
        }
    }
    acked
}

/// Committed sequences never diverge: every one observed is a prefix of the longest.
fn check_prefixes(lives: &[Rc<RefCell<Applied>>], g: u64) {
    let sequences: Vec<Vec<Vec<u8>>> = lives.iter().map(|a| a.borrow().committed.clone()).collect();
    let longest = sequences.iter().max_by_key(|s| s.len()).unwrap();
    for sequence in &sequences {
        assert_eq!(
            sequence[..],
            longest[..sequence.len()],
            "group {g}: committed prefixes diverge"
        );
    }
}

#[test]
fn three_groups_persist_through_shard_logs_across_crashes_and_lose_no_acknowledged_entry() {
    let addrs = free_addrs(NODES as usize);
    run_local(async move {
        let leaders = RefCell::new(BTreeMap::new());
        let mut nodes = Vec::new();
        for n in 0..NODES {
            nodes.push(start_logged_node(n, &addrs, SimDisk::new(n + 1)).await);
        }
        // Every life's applied sequences, per group, for the prefix check.
        let mut lives: BTreeMap<u64, Vec<Rc<RefCell<Applied>>>> = BTreeMap::new();
        let mut acked: BTreeMap<u64, Vec<Vec<u8>>> = BTreeMap::new();
        for round in 0..NODES {
            for &g in &LOGGED_GROUPS {
                let values: Vec<Vec<u8>> =
                    (0..3).map(|k| format!("g{g}-r{round}-{k}").into_bytes()).collect();
                let done = propose_all(&nodes, &leaders, g, &values).await;
                acked.entry(g).or_default().extend(done);
            }
            // A power loss on one node (unsynced writes lost, kept or torn), and its
            // restart from what its disk kept.
            let victim = nodes.remove(round as usize);
            for (&g, applied) in &victim.applied {
                lives.entry(g).or_default().push(applied.clone());
            }
            drop(victim.host);
            let disk = victim.disk.crash();
            drop(victim.log);
            nodes.insert(round as usize, start_logged_node(round, &addrs, disk).await);
        }
        // All three lose power at once, restart, and the groups must elect and commit.
        let disks: Vec<SimDisk> = nodes
            .drain(..)
            .map(|node| {
                for (&g, applied) in &node.applied {
                    lives.entry(g).or_default().push(applied.clone());
                }
                drop(node.host);
                node.disk.crash()
            })
            .collect();
        for (n, disk) in disks.into_iter().enumerate() {
            nodes.push(start_logged_node(n as u64, &addrs, disk).await);
        }
        for &g in &LOGGED_GROUPS {
            let last = vec![format!("g{g}-last").into_bytes()];
            loop {
                let done = propose_all(&nodes, &leaders, g, &last).await;
                if !done.is_empty() {
                    acked.get_mut(&g).unwrap().extend(done);
                    break;
                }
            }
            let everywhere =
                || nodes.iter().all(|node| node.applied[&g].borrow().committed.ends_with(&last));
            wait_until(&format!("every node to commit group {g}'s last value"), everywhere).await;
            for node in &nodes {
                let committed = node.applied[&g].borrow().committed.clone();
                for value in &acked[&g] {
                    assert!(committed.contains(value), "group {g}: acknowledged {value:?} lost");
                }
            }
            let group_lives = lives.entry(g).or_default();
            group_lives.extend(nodes.iter().map(|node| node.applied[&g].clone()));
            check_prefixes(group_lives, g);
        }
        assert!(LOGGED_GROUPS.iter().all(|g| acked[g].len() > 3), "{acked:?}");
    });
}
