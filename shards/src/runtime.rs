//! Starting the shards: one pinned glommio executor per core, joined by one mesh; and the
//! watch that stops the process when one shard's executor ends while the broker runs.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::time::Duration;

use glommio::{CpuSet, LocalExecutorPoolBuilder, PoolPlacement};
use tracing::warn;

use crate::mesh::{mesh_builder, ShardMeshBuilder};

/// Runs `shard_main` on `nr_shards` executors and blocks until all of them return.
///
/// Executors are pinned one per CPU when there are enough CPUs; asking for more shards
/// than CPUs (useful in tests) runs them unpinned, with a warning.
pub fn run_shards<G, F>(nr_shards: usize, shard_main: G) -> Result<(), String>
where
    G: FnOnce(ShardMeshBuilder) -> F + Clone + Send + 'static,
    F: Future<Output = ()> + 'static,
{
    run_shards_polling(nr_shards, Duration::ZERO, shard_main)
}

/// [`run_shards`], with each executor polling for `poll` before it sleeps (glommio's
/// spin_before_park; zero: sleep at once). glommio ignores it for unpinned executors.
pub fn run_shards_polling<G, F>(
    nr_shards: usize,
    poll: Duration,
    shard_main: G,
) -> Result<(), String>
where
    G: FnOnce(ShardMeshBuilder) -> F + Clone + Send + 'static,
    F: Future<Output = ()> + 'static,
{
    assert!(nr_shards >= 1);
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let placement = if nr_shards <= cpus {
        PoolPlacement::MaxSpread(nr_shards, CpuSet::online().ok())
    } else {
        warn!(nr_shards, cpus, "more shards than CPUs: executors are not pinned");
        PoolPlacement::Unbound(nr_shards)
    };
    let mesh = mesh_builder(nr_shards);
    let mut builder =
        LocalExecutorPoolBuilder::new(placement).name("shard").io_memory(IO_MEMORY_BYTES);
    if !poll.is_zero() {
        builder = builder.spin_before_park(poll);
    }
    let handles = builder
        .on_all_shards(move || {
            let mesh = mesh.clone();
            async move { shard_main(mesh).await }
        })
        .map_err(|e| format!("starting the shard executors: {e}"))?;
    for result in handles.join_all() {
        result.map_err(|e| format!("a shard executor failed: {e}"))?;
    }
    Ok(())
}

/// The registered (pinned) buffer pool of each executor's io_uring rings, from which
/// glommio takes the buffers of `read_at_aligned` and `alloc_dma_buffer`; a request that
/// does not fit takes an aligned heap buffer instead (a plain read rather than a fixed
/// one). glommio's default, 10 MiB, is pinned and resident from start-up, 20 MiB of a
/// 2-shard broker's 35 MiB idle RSS, and the log's own buffers never come from it (they
/// are heap buffers, storage/src/disk.rs). With 1 MiB, the A/B in docs/benchmarks.md
/// ("Idle memory") showed no change in consume or replay MB/s beyond the noise.
const IO_MEMORY_BYTES: usize = 1 << 20;

/// Exit code of a broker whose shard stopped on its own (as for a fatal storage error).
pub const SHARD_STOPPED_EXIT_CODE: i32 = 70;

/// Installed on a shard's executor thread by [`watch_shard`]: dropped when the thread ends.
struct ShardWatch {
    shard: usize,
    finished: Cell<bool>,
}

impl Drop for ShardWatch {
    fn drop(&mut self) {
        if !self.finished.get() {
            // A task panicked (builds that unwind; release builds abort on the panic itself)
            // or the shard's main future returned without a shutdown: the other shards
            // would go on serving with this core's partitions dark. Stop everything.
            eprintln!(
                "shardlog: shard {}'s executor ended while the broker runs (a task panicked \
                 or the shard returned early): exiting",
                self.shard
            );
            std::process::exit(SHARD_STOPPED_EXIT_CODE);
        }
    }
}

thread_local! {
    static WATCH: RefCell<Option<ShardWatch>> = const { RefCell::new(None) };
}

/// Called on shard `shard`'s executor thread: from now on, if that thread ends before
/// [`shard_finished`] is called on it, the process prints which shard stopped and exits
/// with [`SHARD_STOPPED_EXIT_CODE`] (a thread-local destructor runs when the thread ends,
/// also after a panic unwound out of the executor).
pub fn watch_shard(shard: usize) {
    WATCH.with(|w| *w.borrow_mut() = Some(ShardWatch { shard, finished: Cell::new(false) }));
}

/// A requested shutdown: this shard's executor may now end without stopping the process.
pub fn shard_finished() {
    WATCH.with(|w| {
        if let Some(watch) = w.borrow().as_ref() {
            watch.finished.set(true);
        }
    });
}
