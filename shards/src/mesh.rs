//! The shard mesh: request/reply over glommio's bounded cross-core channels.
//!
//! Runs on every shard. Each shard has one bounded channel to every other shard (built
//! by `MeshBuilder::full` before executors start). A request carries an id; its reply
//! travels back on the reverse channel and completes a shard-local waiter.
//!
//! Ordering: requests from one peer are handled in arrival order up to the end of their
//! first phase (see [`MeshService::handle`]), so a forwarded produce is appended in the
//! order the forwarding shard sent it.
//!
//! Deadlock freedom: a receiver task never sends on the mesh itself; replies are sent by
//! the spawned task that awaits the second phase.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;

use glommio::channels::channel_mesh::{Full, MeshBuilder, Receivers, Senders};
use glommio::channels::local_channel::{self, LocalReceiver, LocalSender};
use tracing::error;

use crate::message::{Envelope, ShardReply, ShardRequest};

/// Capacity of each cross-core channel.
pub const MESH_CHANNEL_CAPACITY: usize = 1024;

/// The builder every shard joins at start-up.
pub type ShardMeshBuilder = MeshBuilder<Envelope, Full>;

/// Creates the mesh for `nr_shards` shards (call once, before starting executors).
pub fn mesh_builder(nr_shards: usize) -> ShardMeshBuilder {
    MeshBuilder::full(nr_shards, MESH_CHANNEL_CAPACITY)
}

/// The second phase of a request handled for a peer.
pub type ReplyFuture = Pin<Box<dyn Future<Output = ShardReply>>>;

/// What a shard does with requests from its peers.
pub trait MeshService: 'static {
    /// Phase one runs synchronously in arrival order; the returned future is awaited
    /// concurrently and its output is sent back as the reply.
    fn handle(self: Rc<Self>, from: usize, request: ShardRequest) -> ReplyFuture;
}

/// One shard's end of the mesh.
pub struct Mesh {
    shard_id: usize,
    nr_shards: usize,
    senders: Senders<Envelope>,
    next_id: Cell<u64>,
    waiting: RefCell<HashMap<u64, LocalSender<ShardReply>>>,
}

/// A reply that has not arrived yet.
pub struct PendingReply {
    receiver: LocalReceiver<ShardReply>,
}

impl PendingReply {
    /// Waits for the reply. The mesh only closes when the broker shuts down, so a missing
    /// reply means a peer shard died: the broker cannot go on (panic = abort).
    pub async fn wait(self) -> ShardReply {
        match self.receiver.recv().await {
            Some(reply) => reply,
            None => panic!("a peer shard went away without replying"),
        }
    }
}

impl Mesh {
    /// Joins the mesh; returns this shard's handle (its id is its mesh peer id).
    pub async fn join(builder: ShardMeshBuilder) -> (Rc<Mesh>, Receivers<Envelope>) {
        let (senders, receivers) = builder.join().await.expect("joining the shard mesh");
        let mesh = Mesh {
            shard_id: senders.peer_id(),
            nr_shards: senders.nr_consumers(),
            senders,
            next_id: Cell::new(1),
            waiting: RefCell::new(HashMap::new()),
        };
        (Rc::new(mesh), receivers)
    }

    pub fn shard_id(&self) -> usize {
        self.shard_id
    }

    pub fn nr_shards(&self) -> usize {
        self.nr_shards
    }

    /// Enqueues `request` for shard `to` (waits only while the channel is full).
    pub async fn send(&self, to: usize, request: ShardRequest) -> PendingReply {
        assert_ne!(to, self.shard_id, "local requests never cross the mesh");
        let id = self.next_id.get();
        self.next_id.set(id + 1);
        let (sender, receiver) = local_channel::new_bounded(1);
        self.waiting.borrow_mut().insert(id, sender);
        if self.senders.send_to(to, Envelope::Request { id, request }).await.is_err() {
            // Shard `to`'s executor has ended and freed its receivers: only at shutdown,
            // or at a power loss of the simulation (a broker exits when a shard ends while
            // it runs: runtime::watch_shard). Nobody can answer; wait until this
            // executor goes too, as a send to a gone shard did before glommio freed the
            // tasks of a dropped executor (vendor/glommio/PATCHED.md, change 4).
            std::future::pending::<()>().await;
        }
        PendingReply { receiver }
    }

    /// Sends a request and waits for its reply.
    pub async fn call(&self, to: usize, request: ShardRequest) -> ShardReply {
        self.send(to, request).await.wait().await
    }

    /// Spawns one receiver task per peer.
    pub fn spawn_receivers<S: MeshService>(
        self: &Rc<Self>,
        mut receivers: Receivers<Envelope>,
        service: Rc<S>,
    ) {
        for (peer, stream) in receivers.streams() {
            let mesh = self.clone();
            let service = service.clone();
            glommio::spawn_local(async move {
                while let Some(envelope) = stream.recv().await {
                    mesh.dispatch(peer, envelope, &service);
                }
            })
            .detach();
        }
    }

    fn dispatch<S: MeshService>(self: &Rc<Self>, peer: usize, envelope: Envelope, service: &Rc<S>) {
        match envelope {
            Envelope::Request { id, request } => {
                let reply = service.clone().handle(peer, request);
                let mesh = self.clone();
                glommio::spawn_local(async move {
                    let reply = reply.await;
                    if mesh.senders.send_to(peer, Envelope::Reply { id, reply }).await.is_err() {
                        error!(peer, "could not send a reply: peer shard is gone");
                    }
                })
                .detach();
            }
            Envelope::Reply { id, reply } => {
                let waiter = self.waiting.borrow_mut().remove(&id);
                match waiter {
                    Some(sender) => {
                        // The waiter may have given up (dropped); that is fine.
                        let _ = sender.try_send(reply);
                    }
                    None => panic!("reply {id} from shard {peer} matches no request"),
                }
            }
        }
    }
}
