//! Graceful shutdown on SIGTERM or SIGINT.
//!
//! Signals arrive on a thread of our own (signal-hook's iterator, a self-pipe), never on
//! a shard. That thread only sets an `AtomicBool`; each shard polls it on a short timer
//! (`POLL_INTERVAL`) and then, on its own executor:
//! 1. stops accepting connections (the accept loops return, the listeners close);
//! 2. stops reading new frames on every connection (`RequestHandler::stopping`) and lets
//!    the responses of requests already read go out, for at most `DRAIN_BOUND`;
//! 3. waits until every shard has drained (a forwarded produce may still be coming from
//!    another shard's connection), for at most `DRAIN_BOUND`;
//! 4. stops its raft groups (on a node of a cluster: `GroupHost::stop`, so nothing of
//!    theirs is written to a closing log), then snapshots producer state and closes its
//!    log: flush, fdatasync, clean checkpoint. Leaderships of its raft groups were handed
//!    to caught-up followers at step 1 (`GroupHost::transfer_leaderships`), and are given
//!    until `TRANSFER_BOUND` to move before the groups stop.
//!
//! When every shard has closed its log, shard 0 logs "shutdown complete" and the process
//! exits 0 (1 if a log could not be closed cleanly). A second signal exits at once
//! (128 + signal number); so does `HARD_BOUND` passing without completion (exit 1).
//!
//! Why polling: glommio executors cannot be woken from a foreign thread without a
//! cross-thread channel per shard, and a 50 ms poll of one atomic costs nothing and keeps
//! the signal thread free of glommio.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use shardlog_shards::replication::GroupHost;
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;
use tracing::{error, info, warn};

/// How often each shard looks at the shutdown flag.
const POLL_INTERVAL: Duration = Duration::from_millis(50);
/// Longest wait for in-flight requests (and for the other shards) before closing anyway.
const DRAIN_BOUND: Duration = Duration::from_secs(10);
/// Longest wait for the raft leaderships handed over to move (raft-rs abandons a transfer
/// after an election timeout, 1-2 s; the groups are stopped anyway after this).
const TRANSFER_BOUND: Duration = Duration::from_secs(3);
/// After the first signal, the process exits after this even if shutdown hangs.
const HARD_BOUND: Duration = Duration::from_secs(60);

/// Shutdown state shared by the signal thread and every shard.
#[derive(Debug)]
pub struct Shutdown {
    requested: AtomicBool,
    nr_shards: usize,
    drained: AtomicUsize,
    closed: AtomicUsize,
    close_failed: AtomicBool,
}

/// Installs the SIGTERM/SIGINT handler thread.
pub fn install(nr_shards: usize) -> Result<Arc<Shutdown>, String> {
    let shutdown = Arc::new(Shutdown {
        requested: AtomicBool::new(false),
        nr_shards,
        drained: AtomicUsize::new(0),
        closed: AtomicUsize::new(0),
        close_failed: AtomicBool::new(false),
    });
    let mut signals =
        Signals::new([SIGTERM, SIGINT]).map_err(|e| format!("installing signal handlers: {e}"))?;
    let flag = shutdown.clone();
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for signal in signals.forever() {
                if flag.requested.swap(true, Ordering::SeqCst) {
                    eprintln!("shardlog: second signal {signal} during shutdown: exiting now");
                    shardlog_shards::runtime::exit_process(128 + signal);
                }
                info!(signal, "shutting down: no new connections or requests");
                std::thread::spawn(|| {
                    std::thread::sleep(HARD_BOUND);
                    eprintln!("shardlog: shutdown did not finish in {HARD_BOUND:?}: exiting");
                    shardlog_shards::runtime::exit_process(1);
                });
            }
        })
        .map_err(|e| format!("starting the signal thread: {e}"))?;
    Ok(shutdown)
}

/// One shard's view of the shutdown: a local flag and wakers, and its open connections.
pub struct ShardStop {
    shared: Arc<Shutdown>,
    stopping: Cell<bool>,
    /// One waker per live [`Stopping`] future, removed when that future is dropped: every
    /// connection awaits a fresh one per request, and wakers kept for dropped futures
    /// would pile up (a glommio task's refcount is an i16: 32,768 of them abort the shard).
    waiters: RefCell<BTreeMap<u64, Waker>>,
    next_waiter: Cell<u64>,
    connections: Cell<usize>,
}

impl ShardStop {
    /// Creates the shard's view and spawns the task that polls the shared flag.
    pub fn spawn(shared: Arc<Shutdown>) -> Rc<ShardStop> {
        let stop = Rc::new(ShardStop {
            shared,
            stopping: Cell::new(false),
            waiters: RefCell::new(BTreeMap::new()),
            next_waiter: Cell::new(0),
            connections: Cell::new(0),
        });
        let watcher = stop.clone();
        glommio::spawn_local(async move {
            while !watcher.shared.requested.load(Ordering::SeqCst) {
                glommio::timer::sleep(POLL_INTERVAL).await;
            }
            watcher.stopping.set(true);
            for waker in watcher.waiters.take().into_values() {
                waker.wake();
            }
        })
        .detach();
        stop
    }

    /// Resolves once shutdown has been requested.
    pub fn stopping(&self) -> Stopping<'_> {
        Stopping { stop: self, waiter: None }
    }

    /// Counts a connection as open until the returned guard is dropped.
    pub fn connection_opened(self: &Rc<Self>) -> ConnectionGuard {
        self.connections.set(self.connections.get() + 1);
        ConnectionGuard(self.clone())
    }

    /// Steps 2-4 of the module docs, after the accept loops have returned. `checkpoints`
    /// is the periodic checkpoint task, which ends when shutdown starts: awaited so that
    /// its checkpoint never races the clean one written by `close`.
    pub async fn finish(
        &self,
        shard: &shardlog_shards::Shard,
        host: Option<Rc<GroupHost>>,
        checkpoints: glommio::Task<()>,
    ) {
        let id = shard.id;
        // A node of a cluster (`host`: the shard's replication host) hands over the
        // leadership of the raft groups it leads first: produce requests here are refused
        // (NOT_LEADER_OR_FOLLOWER) from now on, and clients find the new leader, elected
        // at once instead of after a timeout.
        let transfers = host.as_ref().map_or(0, |h| h.transfer_leaderships());
        if transfers > 0 {
            info!(shard = id, groups = transfers, "handing over raft leaderships");
        }
        let open = wait_until(DRAIN_BOUND, || self.connections.get() == 0).await;
        if !open {
            warn!(shard = id, connections = self.connections.get(), "connections still open");
        }
        self.shared.drained.fetch_add(1, Ordering::SeqCst);
        let all = self.shared.nr_shards;
        wait_until(DRAIN_BOUND, || self.shared.drained.load(Ordering::SeqCst) >= all).await;
        checkpoints.await;
        // The shard's raft groups first: nothing of theirs reaches the log once it closes
        // (an entry the applier was handed and the log refuses applies at restart). A
        // transfer still under way is given until TRANSFER_BOUND.
        if let Some(host) = host {
            if !wait_until(TRANSFER_BOUND, || !host.leads_any()).await {
                warn!(shard = id, "still leading raft groups: stopping without a handover");
            }
            host.stop();
        }
        shard.snapshot_producer_state();
        if let Err(e) = shard.log.close().await {
            error!(shard = id, error = %e, "closing the log failed");
            self.shared.close_failed.store(true, Ordering::SeqCst);
        }
        info!(shard = id, durable_position = shard.log.durable_position(), "log closed");
        // The shutdown was requested: this executor may end (and shard 0 calls exit below,
        // which runs this thread's destructors) without the shard watch stopping the process.
        shardlog_shards::runtime::shard_finished();
        self.shared.closed.fetch_add(1, Ordering::SeqCst);
        if id != 0 {
            // Shard 0 ends the process; this executor just stays idle until then.
            std::future::pending::<()>().await;
        }
        wait_until(HARD_BOUND, || self.shared.closed.load(Ordering::SeqCst) >= all).await;
        if self.shared.close_failed.load(Ordering::SeqCst) {
            error!("shutdown complete, but a log could not be closed cleanly");
            shardlog_shards::runtime::exit_process(1);
        }
        info!("shutdown complete");
        shardlog_shards::runtime::exit_process(0);
    }
}

/// The future [`ShardStop::stopping`] returns. It keeps at most one waker registered, its
/// latest, and takes it back when dropped.
pub struct Stopping<'a> {
    stop: &'a ShardStop,
    waiter: Option<u64>,
}

impl Future for Stopping<'_> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.stop.stopping.get() {
            return Poll::Ready(());
        }
        let key = match self.waiter {
            Some(key) => key,
            None => {
                let key = self.stop.next_waiter.get();
                self.stop.next_waiter.set(key + 1);
                self.waiter = Some(key);
                key
            }
        };
        self.stop.waiters.borrow_mut().insert(key, cx.waker().clone());
        Poll::Pending
    }
}

impl Drop for Stopping<'_> {
    fn drop(&mut self) {
        if let Some(key) = self.waiter {
            self.stop.waiters.borrow_mut().remove(&key);
        }
    }
}

/// Decrements the shard's open-connection count when the connection ends.
pub struct ConnectionGuard(Rc<ShardStop>);

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.0.connections.set(self.0.connections.get() - 1);
    }
}

/// Polls `done` every few milliseconds until it holds (true) or `bound` passes (false).
async fn wait_until(bound: Duration, done: impl Fn() -> bool) -> bool {
    let deadline = Instant::now() + bound;
    while !done() {
        if Instant::now() >= deadline {
            return false;
        }
        glommio::timer::sleep(Duration::from_millis(5)).await;
    }
    true
}
