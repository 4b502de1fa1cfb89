//! Shard-wide limits on what connections may hold: open connections, and bytes of produce
//! requests read from sockets but not yet answered. Per-connection limits (frame size,
//! in-flight requests, idle time) are `ConnectionLimits` in `connection.rs`.
//!
//! Runs on every shard; one `ConnectionSlots` and one `ProduceBudget` per shard, shared by
//! its listeners and connections (`Rc`, never crosses cores). Hot path: `ProduceBudget` is
//! taken once per Produce request (two uncontended semaphore operations, no allocation).
//!
//! Invariants:
//! 1. At most `max` connections of a shard are served; one over the limit is closed
//!    right after accept, and the refusals are logged at most once per `WARN_INTERVAL`.
//! 2. The produce bytes a shard holds (read, not yet answered) stay within the budget,
//!    except that one request larger than the whole budget proceeds alone.
//! 3. Waiting for the budget is first come, first served: a large request is not
//!    starved by a stream of small ones.

use std::cell::Cell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use glommio::sync::{Semaphore, StaticPermit};
use tracing::warn;

/// How often refused connections are logged (a flood must not flood the log too).
const WARN_INTERVAL: Duration = Duration::from_secs(10);

/// Counts a shard's open connections (Kafka's max.connections, per shard).
pub struct ConnectionSlots {
    max: usize,
    /// What the rate-limited warning says when the limit refuses a connection.
    warning: &'static str,
    open: Cell<usize>,
    refused_since_warn: Cell<u64>,
    last_warn: Cell<Option<Instant>>,
}

/// One served connection; its slot is free again when this is dropped.
pub struct ConnectionSlot {
    slots: Rc<ConnectionSlots>,
}

impl ConnectionSlots {
    pub fn new(max: usize) -> Rc<ConnectionSlots> {
        Self::with_warning(max, "connection limit reached: closing new connections")
    }

    /// Slots whose refusals are logged (rate-limited) with `warning`.
    pub fn with_warning(max: usize, warning: &'static str) -> Rc<ConnectionSlots> {
        Rc::new(ConnectionSlots {
            max,
            warning,
            open: Cell::new(0),
            refused_since_warn: Cell::new(0),
            last_warn: Cell::new(None),
        })
    }

    /// A slot for a just-accepted connection, or `None` (logged) when all are taken.
    pub fn try_take(self: &Rc<Self>, peer: Option<std::net::SocketAddr>) -> Option<ConnectionSlot> {
        if self.open.get() < self.max {
            self.open.set(self.open.get() + 1);
            return Some(ConnectionSlot { slots: self.clone() });
        }
        self.refused_since_warn.set(self.refused_since_warn.get() + 1);
        let now = Instant::now();
        if self.last_warn.get().is_none_or(|last| now - last >= WARN_INTERVAL) {
            warn!(
                peer = ?peer,
                limit = self.max,
                refused = self.refused_since_warn.get(),
                "{}",
                self.warning
            );
            self.last_warn.set(Some(now));
            self.refused_since_warn.set(0);
        }
        None
    }

    /// Connections being served now.
    pub fn open(&self) -> usize {
        self.open.get()
    }
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        self.slots.open.set(self.slots.open.get() - 1);
    }
}

/// A shard's budget of produce bytes read from sockets and not yet answered.
pub struct ProduceBudget {
    max_bytes: u64,
    bytes: Rc<Semaphore>,
    /// Only the holder of the turn waits on `bytes`; the others queue here (invariant 3).
    turn: Semaphore,
}

impl ProduceBudget {
    pub fn new(max_bytes: usize) -> Rc<ProduceBudget> {
        let max_bytes = max_bytes.max(1) as u64;
        Rc::new(ProduceBudget {
            max_bytes,
            bytes: Rc::new(Semaphore::new(max_bytes)),
            turn: Semaphore::new(1),
        })
    }

    /// Waits until `request_bytes` fit, and holds them until the permit is dropped. A
    /// request larger than the budget takes all of it (invariant 2), so it waits for the
    /// others to finish and then proceeds alone instead of never.
    pub async fn reserve(&self, request_bytes: usize) -> StaticPermit {
        let units = (request_bytes as u64).clamp(1, self.max_bytes);
        let _turn = self.turn.acquire_permit(1).await.expect("the budget is never closed");
        self.bytes.acquire_static_permit(units).await.expect("the budget is never closed")
    }

    /// Bytes free right now.
    pub fn available(&self) -> u64 {
        self.bytes.available()
    }
}
