//! A request → reply round trip between two shards over the shard mesh
//! (`shardlog_shards::Mesh`): two glommio executors on their own threads, joined by
//! `mesh_builder(2)` and pinned one per CPU as `run_shards` places them (unpinned on a
//! 1-CPU machine). One shard answers a forwarded-produce-shaped request at once (an echo
//! `MeshService`), so the figure is the mesh's own cost: request id and waiter map, the
//! bounded cross-core channel both ways, the reply task spawned on the peer, and waking
//! each executor. Executors park when idle, as in the broker, so a round trip includes
//! two wake-ups of a parked thread.
//!
//! Measured with criterion's `iter_custom`: the calling shard runs the requested number of
//! sequential `Mesh::call`s and sends the elapsed time back to the bench thread.
//!
//! Run: `cargo bench -p shardlog-benches --bench mesh`. Under `cargo test` (criterion's
//! test mode) the benchmark runs once.

use std::rc::Rc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion};
use glommio::channels::local_channel::{self, LocalSender};
use glommio::{ExecutorJoinHandle, LocalExecutorBuilder, Placement};
use shardlog_shards::mesh::{MeshService, ReplyFuture};
use shardlog_shards::message::{ShardReply, ShardRequest};
use shardlog_shards::{mesh_builder, Mesh, ProduceAck, ShardMeshBuilder};

/// Answers a Produce at once; `DeleteTopics` with no names tells the shard to stop.
struct Echo {
    stop: LocalSender<()>,
}

impl MeshService for Echo {
    fn handle(self: Rc<Self>, _from: usize, request: ShardRequest) -> ReplyFuture {
        match request {
            ShardRequest::Produce { .. } => Box::pin(async {
                ShardReply::Produce(Ok(ProduceAck {
                    base_offset: 0,
                    log_start_offset: 0,
                    log_append_time_ms: -1,
                }))
            }),
            ShardRequest::DeleteTopics { names } if names.is_empty() => {
                let _ = self.stop.try_send(());
                Box::pin(async { ShardReply::DeleteTopics(Vec::new()) })
            }
            other => panic!("the mesh bench sends no {other:?}"),
        }
    }
}

fn produce_request() -> ShardRequest {
    ShardRequest::Produce {
        topic: String::new(),
        partition: 0,
        records: Bytes::new(),
        acks: -1,
        transactional_id: None,
    }
}

/// Joins the mesh with an echo service; the echo side returns once told to stop.
async fn join(builder: ShardMeshBuilder, echo: bool) -> Rc<Mesh> {
    let (mesh, receivers) = Mesh::join(builder).await;
    let (stop, stopped) = local_channel::new_bounded(1);
    mesh.spawn_receivers(receivers, Rc::new(Echo { stop }));
    if echo {
        stopped.recv().await;
    }
    mesh
}

/// Two shards joined by the mesh: the caller runs round trips on request, the echo answers.
struct TwoShards {
    iterations: Option<mpsc::Sender<u64>>,
    elapsed: mpsc::Receiver<Duration>,
    executors: Vec<ExecutorJoinHandle<()>>,
}

impl TwoShards {
    fn start() -> TwoShards {
        let builder = mesh_builder(2);
        let (iterations, requested) = mpsc::channel::<u64>();
        let (report, elapsed) = mpsc::channel();
        let peer = builder.clone();
        let echo = executor(1).spawn(move || async move {
            join(peer, true).await;
        });
        let caller = executor(0).spawn(move || async move {
            let mesh = join(builder, false).await;
            // Mesh ids follow the order of joining, not of spawning.
            let echo = 1 - mesh.shard_id();
            // Blocking here is fine: the caller has nothing else to do between measurements.
            while let Ok(count) = requested.recv() {
                let start = Instant::now();
                for _ in 0..count {
                    mesh.call(echo, produce_request()).await;
                }
                report.send(start.elapsed()).expect("the bench thread waits for the report");
            }
            drop(mesh.send(echo, ShardRequest::DeleteTopics { names: Vec::new() }).await);
        });
        let executors =
            vec![caller.expect("caller shard starts"), echo.expect("echo shard starts")];
        TwoShards { iterations: Some(iterations), elapsed, executors }
    }

    fn round_trips(&self, count: u64) -> Duration {
        self.iterations.as_ref().unwrap().send(count).expect("the caller shard is running");
        self.elapsed.recv().expect("the caller shard reports")
    }
}

impl Drop for TwoShards {
    fn drop(&mut self) {
        self.iterations.take();
        for executor in self.executors.drain(..) {
            executor.join().expect("shard executor ends cleanly");
        }
    }
}

fn executor(shard: usize) -> LocalExecutorBuilder {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let placement = if cpus >= 2 { Placement::Fixed(shard) } else { Placement::Unbound };
    LocalExecutorBuilder::new(placement).name(&format!("bench-shard-{shard}"))
}

fn benches(c: &mut Criterion) {
    let shards = TwoShards::start();
    c.bench_function("mesh/produce_round_trip", |b| {
        b.iter_custom(|iterations| shards.round_trips(iterations))
    });
}

criterion_group!(mesh, benches);
criterion_main!(mesh);
