//! The replication transport of one shard: raft messages between shard s of this node and
//! shard s of every peer node, over TCP (issue 16; docs/replication.md, "What exists:
//! the transport").
//!
//! Runs on the shard that owns it, on its glommio executor: one transport per shard, no
//! state shared across cores (everything is `Rc`/`RefCell`/`Cell`; no borrow is held
//! across an `.await`). The broker starts one per shard when `--peers` names other nodes
//! (src/broker.rs); the host gives it its listening address and its peers' addresses.
//!
//! - Outbound: one connection per peer, opened by a writer task as soon as the transport
//!   starts and kept open, re-opened after a failure with a backoff that doubles from
//!   `backoff_min` up to `backoff_max` and starts again after a successful hand-shake.
//!   While it has nothing to send, the writer also reads the connection, on which the
//!   peer never writes: the end of the stream (the peer closed, or was killed) or an
//!   error drops the connection at once, so `connected_peers` is current even when no
//!   message flows.
//! - Batching: `send` only queues the message in the peer's outbox and wakes its writer;
//!   the writer runs once the caller's task yields, and puts everything queued by then
//!   (up to `MAX_BODY_BYTES`) into one frame. While a frame is being written, the next
//!   messages queue up for the next one.
//! - Bound: an outbox holds at most `outbox_max_bytes` of messages; a message that would
//!   pass it pushes out the oldest ones, counted in `dropped_overflow`. Raft tolerates
//!   lost messages (it resends appends and votes), and the newest messages carry the
//!   newest state, so the oldest go. Messages of a frame whose write failed are lost too
//!   (`dropped_unsent`).
//! - A peer that went away: once a connection that passed its hand-shake is lost, what is
//!   queued for that peer is dropped, and so is every message sent to it until a new
//!   connection passes its hand-shake (`dropped_away`), as etcd's transport drops what it
//!   cannot deliver. A node that restarts is sent what its peers' raft groups send it
//!   from then on, not the appends and heartbeats of the time it was down: its leader
//!   finds where its log ends and sends the rest, or a snapshot if it compacted past it.
//!   Before the first connection to a peer (every node starting), messages queue as
//!   above, so the first elections need not wait for a timeout.
//! - A message larger than any frame (a raft snapshot of a large topic table) is cut
//!   into pieces (`fragment.rs`) when it is queued, kept beside the outbox (not subject to
//!   its bound: one such message per peer at a time; another that comes meanwhile is
//!   dropped, counted in `dropped_overflow`, and raft sends it again), and sent one piece
//!   at the head of each frame, the rest of the frame filled from the outbox, so raft's
//!   heartbeats and appends wait behind one piece at most, not behind the whole message
//!   (which arrives after messages queued after it: raft tolerates reordering); the
//!   reader of the connection puts the pieces together and delivers the whole message.
//!   Over `fragment::MAX_MESSAGE_BYTES` it is dropped (`dropped_too_large`).
//! - Inbound: a listener; each accepted connection gets a reader task that checks the
//!   hand-shake, then decodes frames and delivers each (sender node, group, message) to
//!   one bounded channel the host receives from. A full channel stops the readers (TCP
//!   pushes back on the peers) until the host catches up. A frame that does not decode,
//!   or names another sender than the hand-shake, closes that connection.
//! - Hand-shake: both sides send a `Hello` (node id, shard, shard count) and check the
//!   other's: the same shard count and shard, a node id in the peer list (the one
//!   expected at that address, for an outbound connection), and for an inbound connection
//!   a source IP address equal to that peer's listed one. A mismatch is logged as an
//!   error naming both values and the connection closed (`refused_hellos`); the writer
//!   retries with its backoff, so a misconfigured peer logs once per `backoff_max`.
//! - A peer that vanishes without closing (power loss, a cut network) is noticed by the
//!   writer when a write makes no progress for `write_timeout`, and on idle connections
//!   (either way) by TCP keepalive (`Keepalive`: a probe after 5 s of silence, then every
//!   second, given up after 5 unanswered: about 10 s).
//!
//! Invariants:
//! 1. Memory is bounded: every outbox by `outbox_max_bytes` (plus one message), the
//!    inbound channel by `inbound_messages`, a frame by `MAX_BODY_BYTES`, the pieces of
//!    one message per peer and one partial message per inbound connection by
//!    `fragment::MAX_MESSAGE_BYTES`.
//! 2. Messages from one peer over one connection are delivered in the order that peer
//!    queued them, except for those lost (a failed write, a full outbox). Across a
//!    reconnect, what the old connection still holds may interleave with the new one's:
//!    raft tolerates reordering as it tolerates loss.
//! 3. No message is delivered from a connection whose hand-shake did not pass.
//! 4. Dropping the `Transport` stops its tasks and closes its sockets.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::rc::Rc;
use std::time::Duration;

use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::channels::local_channel::{self, LocalReceiver, LocalSender};
use glommio::net::{TcpListener, TcpStream};
use glommio::Task;
use raft::eraftpb::Message;

use super::fragment::{self, Reassembly, FRAGMENT_GROUP};
use super::frame::{
    FrameEncoder, FrameError, FrameHeader, Hello, FRAME_HEADER_BYTES, HELLO_BYTES, MAX_BODY_BYTES,
};

/// Settings of one shard's transport.
#[derive(Clone, Debug)]
pub struct TransportConfig {
    /// This node's id (the same on every shard of the node).
    pub node_id: u64,
    /// This shard; it talks only to the same shard of its peers.
    pub shard: u32,
    /// Shards of this node: every node must run the same number.
    pub shard_count: u32,
    /// Where this shard listens for its peers.
    pub listen: SocketAddr,
    /// Every other node: its id and the address of its shard `shard`.
    pub peers: Vec<(u64, SocketAddr)>,
    /// Bound of one peer's outbox, in encoded message bytes (invariant 1).
    pub outbox_max_bytes: usize,
    /// Bound of the inbound channel, in messages.
    pub inbound_messages: usize,
    /// First wait after a failed connection; doubled per failure up to `backoff_max`.
    pub backoff_min: Duration,
    pub backoff_max: Duration,
    /// How long a connection attempt, and the peer's hello, may take.
    pub connect_timeout: Duration,
    /// How long a write may make no progress before the connection is given up.
    pub write_timeout: Duration,
    /// TCP keepalive on every connection (both ways).
    pub keepalive: Keepalive,
}

/// TCP keepalive of replication connections (`SO_KEEPALIVE`, `TCP_KEEPIDLE`,
/// `TCP_KEEPINTVL`, `TCP_KEEPCNT`). Without it a connection whose peer vanished without a
/// FIN or RST (power loss, a cut network) stays open as long as this side sends nothing:
/// an inbound reader, and an idle writer, would wait for Linux's defaults (2 h of silence,
/// then 9 probes 75 s apart). The defaults give up after about 10 s (5 s of silence, then 5
/// probes a second apart): longer than a loaded peer's pauses (a probe is answered by its
/// kernel, not by its shard, so a busy shard does not fail it), short enough that a dead
/// peer's connection is noticed in the time of a few raft elections. A probe is one empty
/// segment per idle connection per second at most, nothing once raft heartbeats flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Keepalive {
    /// Silence before the first probe.
    pub idle: Duration,
    /// Between unanswered probes.
    pub interval: Duration,
    /// Unanswered probes before the connection is given up.
    pub probes: u32,
}

impl Default for Keepalive {
    fn default() -> Keepalive {
        Keepalive { idle: Duration::from_secs(5), interval: Duration::from_secs(1), probes: 5 }
    }
}

impl Keepalive {
    /// Sets the options on a connected socket.
    fn apply(&self, socket: &impl AsRawFd) -> io::Result<()> {
        let seconds = |d: Duration| d.as_secs().clamp(1, i32::MAX as u64) as libc::c_int;
        let options = [
            (libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1),
            (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, seconds(self.idle)),
            (libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, seconds(self.interval)),
            (libc::IPPROTO_TCP, libc::TCP_KEEPCNT, self.probes.clamp(1, 127) as libc::c_int),
        ];
        for (level, name, value) in options {
            // SAFETY: a plain setsockopt of one c_int on a descriptor the stream owns and
            // keeps open for the duration of the call.
            let rc = unsafe {
                libc::setsockopt(
                    socket.as_raw_fd(),
                    level,
                    name,
                    (&value as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                )
            };
            if rc != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    }
}

impl TransportConfig {
    /// The defaults: 8 MiB outboxes, 4,096 inbound messages, backoff 50 ms to 2 s, 1 s to
    /// connect and hand-shake, 5 s for a stuck write, keepalive as `Keepalive::default`.
    pub fn new(
        node_id: u64,
        shard: u32,
        shard_count: u32,
        listen: SocketAddr,
        peers: Vec<(u64, SocketAddr)>,
    ) -> TransportConfig {
        TransportConfig {
            node_id,
            shard,
            shard_count,
            listen,
            peers,
            outbox_max_bytes: 8 << 20,
            inbound_messages: 4096,
            backoff_min: Duration::from_millis(50),
            backoff_max: Duration::from_secs(2),
            connect_timeout: Duration::from_secs(1),
            write_timeout: Duration::from_secs(5),
            keepalive: Keepalive::default(),
        }
    }
}

/// A message received from a peer.
#[derive(Clone, Debug, PartialEq)]
pub struct Inbound {
    /// The sender's node id, as its hand-shake said.
    pub from: u64,
    pub group: u64,
    pub message: Message,
}

/// Counters of one transport since it started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TransportStats {
    pub messages_sent: u64,
    pub frames_sent: u64,
    /// Bytes of the frames sent (headers included; hand-shakes not).
    pub bytes_sent: u64,
    pub messages_received: u64,
    pub frames_received: u64,
    /// Bytes of the frames received and decoded (headers included; hand-shakes not).
    pub bytes_received: u64,
    /// Oldest messages pushed out of a full outbox.
    pub dropped_overflow: u64,
    /// Messages of frames whose write failed.
    pub dropped_unsent: u64,
    /// Messages for a peer that went away: queued when its connection was lost, or sent
    /// before a new one passed its hand-shake.
    pub dropped_away: u64,
    /// Messages larger than `fragment::MAX_MESSAGE_BYTES` (larger than a frame, they go
    /// in pieces below that).
    pub dropped_too_large: u64,
    /// Messages larger than a frame sent in pieces (each piece counts as a message sent).
    pub messages_cut: u64,
    /// Messages put together from pieces received (each piece counts as received).
    pub messages_reassembled: u64,
    /// Messages half received in pieces and abandoned: a piece out of place, or a
    /// connection that ended mid-message (raft sends the message again).
    pub reassemblies_abandoned: u64,
    /// Outbound connections that passed the hand-shake.
    pub connects: u64,
    /// Of `connects`, those to a peer this transport had been connected to before (a
    /// connection lost and made again).
    pub reconnects: u64,
    /// Outbound connection attempts that failed (refused, timed out, hand-shake failed).
    pub connect_failures: u64,
    /// Hand-shakes refused, either way (a hello that does not decode, another shard
    /// count, shard or node id).
    pub refused_hellos: u64,
    /// Inbound connections closed for a frame that did not decode or named another sender.
    pub bad_frames: u64,
}

/// `send` to a node that is not in the peer list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnknownPeer(pub u64);

impl fmt::Display for UnknownPeer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node {} is not a peer of this transport", self.0)
    }
}

impl std::error::Error for UnknownPeer {}

/// One shard's replication transport (module docs). Dropping it stops it (invariant 4).
pub struct Transport {
    shared: Rc<Shared>,
    local_addr: SocketAddr,
    /// Dropping a glommio `Task` cancels it.
    _tasks: Vec<Task<()>>,
}

struct Shared {
    config: TransportConfig,
    peers: HashMap<u64, Peer>,
    stats: Cell<TransportStats>,
    /// Reader tasks of inbound connections; the accept loop forgets ended ones.
    readers: RefCell<Vec<Reader>>,
    /// Inbound connections whose hand-shake passed and that are still open.
    inbound_connections: Cell<usize>,
    /// Messages cut into pieces so far: the next one's id (`fragment::cut`).
    next_cut: Cell<u64>,
}

/// The task reading one inbound connection.
struct Reader {
    /// Set by the task when it ends.
    ended: Rc<Cell<bool>>,
    /// Dropping it cancels the task.
    _task: Task<()>,
}

struct Peer {
    addr: SocketAddr,
    /// (group, message, its encoded size), oldest first.
    outbox: RefCell<VecDeque<(u64, Message, usize)>>,
    outbox_bytes: Cell<usize>,
    /// The pieces (`FRAGMENT_GROUP` messages) of a message larger than a frame, not sent
    /// yet: they go before the outbox.
    pieces: RefCell<VecDeque<Message>>,
    /// A token wakes the writer; one is enough, so a full channel means already woken.
    wake: LocalSender<()>,
    /// The outbound connection passed its hand-shake and has not failed since.
    connected: Cell<bool>,
    /// An outbound connection passed its hand-shake once (later ones are reconnects).
    was_connected: Cell<bool>,
}

impl Peer {
    /// A connection that passed its hand-shake was lost and no new one passed since:
    /// messages for this peer are dropped, not queued (module docs).
    fn away(&self) -> bool {
        self.was_connected.get() && !self.connected.get()
    }
}

impl Transport {
    /// Binds the listener and starts the accept loop and one writer per peer on the
    /// current executor; returns the transport and the channel inbound messages arrive on.
    pub fn start(config: TransportConfig) -> io::Result<(Transport, LocalReceiver<Inbound>)> {
        let invalid = |what: String| io::Error::new(io::ErrorKind::InvalidInput, what);
        let mut peers = HashMap::new();
        let mut wakes = Vec::new();
        for &(node_id, addr) in &config.peers {
            if node_id == config.node_id {
                return Err(invalid(format!("node {node_id} is listed as its own peer")));
            }
            let (wake, woken) = local_channel::new_bounded(1);
            let peer = Peer {
                addr,
                outbox: RefCell::new(VecDeque::new()),
                outbox_bytes: Cell::new(0),
                pieces: RefCell::new(VecDeque::new()),
                wake,
                connected: Cell::new(false),
                was_connected: Cell::new(false),
            };
            if peers.insert(node_id, peer).is_some() {
                return Err(invalid(format!("node {node_id} is listed twice")));
            }
            wakes.push((node_id, woken));
        }
        let listener = TcpListener::bind(config.listen)?;
        let local_addr = listener.local_addr()?;
        let (inbound, received) = local_channel::new_bounded(config.inbound_messages.max(1));
        let shared = Rc::new(Shared {
            config,
            peers,
            stats: Cell::new(TransportStats::default()),
            readers: RefCell::new(Vec::new()),
            inbound_connections: Cell::new(0),
            next_cut: Cell::new(0),
        });
        let mut tasks =
            vec![glommio::spawn_local(accept_loop(shared.clone(), listener, Rc::new(inbound)))];
        for (node_id, woken) in wakes {
            tasks.push(glommio::spawn_local(peer_writer(shared.clone(), node_id, woken)));
        }
        Ok((Transport { shared, local_addr, _tasks: tasks }, received))
    }

    /// Queues `message` of `group` for node `to`; the peer's writer sends it in its next
    /// frame. A full outbox drops its oldest messages, and a peer that went away is sent
    /// nothing until it is back (module docs).
    pub fn send(&self, to: u64, group: u64, message: Message) -> Result<(), UnknownPeer> {
        let peer = self.shared.peers.get(&to).ok_or(UnknownPeer(to))?;
        if peer.away() {
            self.shared.count(|s| s.dropped_away += 1);
            return Ok(());
        }
        let size = FrameEncoder::entry_bytes(&message);
        if size > MAX_BODY_BYTES as usize {
            self.shared.cut_into_pieces(peer, to, group, &message, size);
            let _ = peer.wake.try_send(());
            return Ok(());
        }
        let mut outbox = peer.outbox.borrow_mut();
        let mut bytes = peer.outbox_bytes.get() + size;
        let mut dropped = 0;
        while bytes > self.shared.config.outbox_max_bytes {
            let Some((_, _, oldest)) = outbox.pop_front() else { break };
            bytes -= oldest;
            dropped += 1;
        }
        outbox.push_back((group, message, size));
        peer.outbox_bytes.set(bytes);
        self.shared.count(|s| s.dropped_overflow += dropped);
        // Full: the writer has a token already and will see this message.
        let _ = peer.wake.try_send(());
        Ok(())
    }

    /// The address the listener is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Counters since the start.
    pub fn stats(&self) -> TransportStats {
        self.shared.stats.get()
    }

    /// Peers this transport has a working outbound connection to (hand-shake passed, no
    /// failure seen since: a closed or reset connection is seen at once, a vanished peer
    /// within the keepalive or write timeout).
    pub fn connected_peers(&self) -> usize {
        self.shared.peers.values().filter(|peer| peer.connected.get()).count()
    }

    /// Peers listed in the configuration.
    pub fn peer_count(&self) -> usize {
        self.shared.peers.len()
    }

    /// Inbound connections whose hand-shake passed and that are still open.
    pub fn inbound_connections(&self) -> usize {
        self.shared.inbound_connections.get()
    }

    /// Bytes queued for node `to` and not yet written.
    pub fn outbox_bytes(&self, to: u64) -> Option<usize> {
        self.shared.peers.get(&to).map(|peer| peer.outbox_bytes.get())
    }
}

impl Drop for Transport {
    fn drop(&mut self) {
        // Taken out first: cancelling a task must not find the list borrowed.
        let readers = std::mem::take(&mut *self.shared.readers.borrow_mut());
        drop(readers);
    }
}

impl Shared {
    fn count(&self, change: impl FnOnce(&mut TransportStats)) {
        let mut stats = self.stats.get();
        change(&mut stats);
        self.stats.set(stats);
    }

    fn hello(&self) -> Hello {
        Hello {
            node_id: self.config.node_id,
            shard: self.config.shard,
            shard_count: self.config.shard_count,
        }
    }

    /// The hand-shake's checks; `expected` is the node an outbound connection was opened
    /// to, `source` the address an inbound one comes from. The error is the log line.
    fn check_hello(
        &self,
        hello: Hello,
        expected: Option<u64>,
        source: Option<IpAddr>,
    ) -> Result<u64, String> {
        let config = &self.config;
        let id = hello.node_id;
        if hello.shard_count != config.shard_count {
            return Err(format!(
                "node {id} runs {} shards, this node (node {}) {}: every node must run the \
                 same number of shards",
                hello.shard_count, config.node_id, config.shard_count
            ));
        }
        if hello.shard != config.shard {
            return Err(format!(
                "node {id} speaks from shard {} to shard {}: shard s replicates only with \
                 shard s",
                hello.shard, config.shard
            ));
        }
        match expected {
            Some(expected) if expected != id => Err(format!(
                "the address of node {expected} ({}) answers as node {id}: check the peer list",
                self.peers[&expected].addr
            )),
            None => {
                let Some(peer) = self.peers.get(&id) else {
                    return Err(format!(
                        "node {id} is not in the peer list of node {} shard {}",
                        config.node_id, config.shard
                    ));
                };
                let listed = peer.addr.ip().to_canonical();
                match source.map(|ip| ip.to_canonical()) {
                    Some(source) if source != listed => Err(format!(
                        "a connection from {source} says it is node {id}, which is listed at \
                         {listed}: check the peer list"
                    )),
                    _ => Ok(id),
                }
            }
            Some(_) => Ok(id),
        }
    }

    /// A message larger than any frame, `size` bytes, for `peer` (node `to`): its pieces
    /// wait beside the outbox, unless another message's do (module docs).
    fn cut_into_pieces(&self, peer: &Peer, to: u64, group: u64, message: &Message, size: usize) {
        let mut pieces = peer.pieces.borrow_mut();
        if !pieces.is_empty() {
            self.count(|s| s.dropped_overflow += 1);
            return;
        }
        let id = self.next_cut.replace(self.next_cut.get() + 1);
        match fragment::cut(id, group, message) {
            Some(cut) => {
                *pieces = cut.into();
                self.count(|s| s.messages_cut += 1);
            }
            None => {
                self.count(|s| s.dropped_too_large += 1);
                tracing::warn!(
                    "replication: a message of {size} bytes for node {to} is larger than {} \
                     bytes; dropped",
                    fragment::MAX_MESSAGE_BYTES
                );
            }
        }
    }

    /// The peer went away (its connection was lost): drops what is queued for it; `send`
    /// drops what comes until a new connection passes its hand-shake (module docs).
    fn forget_queued(&self, peer: &Peer) {
        let queued = peer.outbox.borrow_mut().drain(..).count();
        let pieces = std::mem::take(&mut *peer.pieces.borrow_mut()).len();
        peer.outbox_bytes.set(0);
        self.count(|s| s.dropped_away += (queued + pieces) as u64);
    }

    /// Everything queued for `peer`, up to one frame: the next piece of a message larger
    /// than a frame, if any, then the outbox (one piece a frame, so the outbox's
    /// heartbeats and appends wait behind 1 MiB at most, not behind a whole snapshot);
    /// `None` when both are empty.
    fn take_frame(&self, node_id: u64) -> Option<(Vec<u8>, u32)> {
        let peer = &self.peers[&node_id];
        let mut encoder = FrameEncoder::new(self.config.node_id, self.config.shard);
        if let Some(piece) = peer.pieces.borrow_mut().pop_front() {
            assert!(encoder.push(FRAGMENT_GROUP, &piece), "a piece fits an empty frame");
        }
        let mut outbox = peer.outbox.borrow_mut();
        // Every message in the outbox fits an empty frame (`send`).
        loop {
            let Some((group, message, size)) = outbox.pop_front() else { break };
            if !encoder.push(group, &message) {
                outbox.push_front((group, message, size));
                break;
            }
            peer.outbox_bytes.set(peer.outbox_bytes.get() - size);
        }
        let count = encoder.count();
        (count > 0).then(|| (encoder.finish(), count))
    }
}

/// Why a connection ended.
#[derive(Debug)]
enum LinkError {
    Io(io::Error),
    Frame(FrameError),
    /// The hand-shake or a frame named the wrong peer (the log line).
    Refused(String),
}

impl fmt::Display for LinkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LinkError::Io(e) => write!(f, "{e}"),
            LinkError::Frame(e) => write!(f, "bad frame: {e}"),
            LinkError::Refused(why) => write!(f, "refused: {why}"),
        }
    }
}

impl From<io::Error> for LinkError {
    fn from(e: io::Error) -> LinkError {
        LinkError::Io(e)
    }
}

impl<T> From<glommio::GlommioError<T>> for LinkError {
    fn from(e: glommio::GlommioError<T>) -> LinkError {
        LinkError::Io(e.into())
    }
}

/// Sends this side's hello, reads and checks the other's (within `connect_timeout`).
async fn hand_shake(
    shared: &Shared,
    stream: &mut TcpStream,
    expected: Option<u64>,
) -> Result<u64, LinkError> {
    stream.set_nodelay(true)?;
    shared.config.keepalive.apply(stream)?;
    stream.set_write_timeout(Some(shared.config.write_timeout))?;
    stream.set_read_timeout(Some(shared.config.connect_timeout))?;
    stream.write_all(&shared.hello().encode()).await?;
    let mut bytes = [0u8; HELLO_BYTES];
    stream.read_exact(&mut bytes).await?;
    stream.set_read_timeout(None)?;
    let hello = Hello::decode(&bytes).map_err(|e| {
        shared.count(|s| s.refused_hellos += 1);
        tracing::warn!("replication: a peer's hello does not decode: {e}");
        LinkError::Frame(e)
    })?;
    let source = match expected {
        Some(_) => None,
        None => Some(stream.peer_addr()?.ip()),
    };
    shared.check_hello(hello, expected, source).map_err(|why| {
        shared.count(|s| s.refused_hellos += 1);
        tracing::error!(
            "replication: node {} shard {} refuses a connection: {why}",
            shared.config.node_id,
            shared.config.shard
        );
        LinkError::Refused(why)
    })
}

/// One peer's writer: connects (at once, and again after every failure, with a backoff
/// while attempts fail), then writes one frame of everything queued at a time until the
/// connection fails or the peer closes it.
async fn peer_writer(shared: Rc<Shared>, node_id: u64, woken: LocalReceiver<()>) {
    let (min, max) = (shared.config.backoff_min, shared.config.backoff_max);
    let mut backoff = min;
    // Only the first failure after a success is a warning: a peer that is down for long
    // would fill the log otherwise.
    let mut reported_down = false;
    let peer = &shared.peers[&node_id];
    loop {
        let mut stream = match connect(&shared, node_id).await {
            Ok(stream) => stream,
            Err(e) => {
                shared.count(|s| s.connect_failures += 1);
                if !reported_down {
                    let addr = shared.peers[&node_id].addr;
                    tracing::warn!("replication: cannot reach node {node_id} at {addr}: {e}");
                    reported_down = true;
                }
                glommio::timer::sleep(backoff).await;
                backoff = (backoff * 2).min(max);
                continue;
            }
        };
        let again = peer.was_connected.replace(true);
        shared.count(|s| {
            s.connects += 1;
            s.reconnects += again as u64;
        });
        peer.connected.set(true);
        (backoff, reported_down) = (min, false);
        let lost = write_frames(&shared, node_id, &mut stream, &woken).await;
        peer.connected.set(false);
        match lost {
            Lost::Stopped => return,
            Lost::Failed(e) => {
                tracing::info!("replication: connection to node {node_id} lost: {e}");
                shared.forget_queued(peer);
            }
        }
    }
}

/// Why `write_frames` returned.
enum Lost {
    /// The transport is being dropped.
    Stopped,
    /// The connection failed or the peer closed it.
    Failed(io::Error),
}

async fn connect(shared: &Shared, node_id: u64) -> Result<TcpStream, LinkError> {
    let addr = shared.peers[&node_id].addr;
    let mut stream = TcpStream::connect_timeout(addr, shared.config.connect_timeout).await?;
    hand_shake(shared, &mut stream, Some(node_id)).await?;
    Ok(stream)
}

/// Writes frames until a write fails or the peer closes the connection; returns why.
async fn write_frames(
    shared: &Shared,
    node_id: u64,
    stream: &mut TcpStream,
    woken: &LocalReceiver<()>,
) -> Lost {
    loop {
        let Some((frame, count)) = shared.take_frame(node_id) else {
            if let Some(lost) = wait_for_messages(stream, woken).await {
                return lost;
            }
            continue;
        };
        if let Err(e) = stream.write_all(&frame).await {
            // The rest of a message in pieces is of no use without the pieces just lost.
            let rest = std::mem::take(&mut *shared.peers[&node_id].pieces.borrow_mut()).len();
            shared.count(|s| s.dropped_unsent += (count as usize + rest) as u64);
            return Lost::Failed(e);
        }
        shared.count(|s| {
            s.frames_sent += 1;
            s.messages_sent += count as u64;
            s.bytes_sent += frame.len() as u64;
        });
    }
}

/// Waits for the writer to be woken (`None`), reading the connection meanwhile: the peer
/// never writes on it, so anything the read returns (the end of the stream, bytes, an
/// error such as a keepalive timeout) means the connection is gone. A wake-up wins over a
/// read that is ready at the same time; the read abandoned then is resumed by the next
/// wait (glommio keeps its readiness poll in the stream).
async fn wait_for_messages(stream: &mut TcpStream, woken: &LocalReceiver<()>) -> Option<Lost> {
    let wake = async { woken.recv().await.is_none().then_some(Lost::Stopped) };
    let closed = async {
        let mut byte = [0u8; 1];
        let e = match stream.read(&mut byte).await {
            Ok(0) => io::Error::new(io::ErrorKind::UnexpectedEof, "the peer closed it"),
            Ok(_) => io::Error::new(
                io::ErrorKind::InvalidData,
                "the peer wrote on a connection it should only read",
            ),
            Err(e) => e,
        };
        Some(Lost::Failed(e))
    };
    futures_lite::future::or(wake, closed).await
}

async fn accept_loop(shared: Rc<Shared>, listener: TcpListener, inbound: Rc<LocalSender<Inbound>>) {
    loop {
        let stream = match listener.accept().await {
            Ok(stream) => stream,
            Err(e) => {
                // Out of descriptors, most likely: wait rather than spin.
                tracing::warn!("replication: accept failed: {e}");
                glommio::timer::sleep(shared.config.backoff_min).await;
                continue;
            }
        };
        let ended = Rc::new(Cell::new(false));
        let task = glommio::spawn_local({
            let (shared, inbound, ended) = (shared.clone(), inbound.clone(), ended.clone());
            async move {
                if let Err(e) = read_frames(&shared, stream, &inbound).await {
                    tracing::info!("replication: inbound connection closed: {e}");
                }
                ended.set(true);
            }
        });
        let mut readers = shared.readers.borrow_mut();
        readers.retain(|reader| !reader.ended.get());
        readers.push(Reader { ended, _task: task });
    }
}

/// An inbound connection: the hand-shake, then frames until the peer closes (Ok) or
/// something is wrong (invariant 3).
async fn read_frames(
    shared: &Shared,
    mut stream: TcpStream,
    inbound: &LocalSender<Inbound>,
) -> Result<(), LinkError> {
    let from = hand_shake(shared, &mut stream, None).await?;
    let _open = InboundOpen::new(&shared.inbound_connections);
    let mut reassembly = Reassembly::default();
    let ended = |reassembly: &Reassembly| {
        if reassembly.is_partial() {
            shared.count(|s| s.reassemblies_abandoned += 1);
        }
    };
    loop {
        let mut header = [0u8; FRAME_HEADER_BYTES];
        match stream.read_exact(&mut header).await {
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                ended(&reassembly);
                return Ok(());
            }
            Err(e) => {
                ended(&reassembly);
                return Err(e.into());
            }
            Ok(()) => {}
        }
        let (messages, body_bytes) = match read_frame(shared, &mut stream, &header, from).await {
            Ok(read) => read,
            Err(e) => {
                if !matches!(e, LinkError::Io(_)) {
                    shared.count(|s| s.bad_frames += 1);
                }
                ended(&reassembly);
                return Err(e);
            }
        };
        let count = messages.len() as u64;
        let bytes = (FRAME_HEADER_BYTES + body_bytes) as u64;
        shared.count(|s| {
            s.frames_received += 1;
            s.messages_received += count;
            s.bytes_received += bytes;
        });
        for (group, mut message) in messages {
            let (group, message) = match group {
                FRAGMENT_GROUP => match reassembly.take(&message.take_context()) {
                    Ok(Some(whole)) => {
                        shared.count(|s| s.messages_reassembled += 1);
                        whole
                    }
                    Ok(None) => continue,
                    Err(e) => {
                        shared.count(|s| s.reassemblies_abandoned += 1);
                        tracing::debug!(from, "replication: {e}; the message is abandoned");
                        continue;
                    }
                },
                _ => (group, message),
            };
            if inbound.send(Inbound { from, group, message }).await.is_err() {
                return Ok(()); // the host is gone
            }
        }
    }
}

/// Counts an inbound connection open while it lives (a cancelled reader task drops it too).
struct InboundOpen<'a>(&'a Cell<usize>);

impl<'a> InboundOpen<'a> {
    fn new(open: &'a Cell<usize>) -> InboundOpen<'a> {
        open.set(open.get() + 1);
        InboundOpen(open)
    }
}

impl Drop for InboundOpen<'_> {
    fn drop(&mut self) {
        self.0.set(self.0.get() - 1);
    }
}

/// The rest of the frame whose header was read: checked against the hand-shake's sender
/// and decoded; its messages and body size.
async fn read_frame(
    shared: &Shared,
    stream: &mut TcpStream,
    header: &[u8],
    from: u64,
) -> Result<(Vec<(u64, Message)>, usize), LinkError> {
    let header = FrameHeader::decode(header).map_err(LinkError::Frame)?;
    if header.sender != from || header.shard != shared.config.shard {
        return Err(LinkError::Refused(format!(
            "a frame from node {} shard {} on the connection of node {from} shard {}",
            header.sender, header.shard, shared.config.shard
        )));
    }
    // At most MAX_BODY_BYTES (FrameHeader::decode checked it).
    let mut body = vec![0u8; header.body_bytes as usize];
    stream.read_exact(&mut body).await?;
    let messages = header.decode_body(&body).map_err(LinkError::Frame)?;
    Ok((messages, body.len()))
}
