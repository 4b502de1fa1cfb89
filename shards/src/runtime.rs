//! Starting the shards: one pinned glommio executor per core, joined by one mesh; and the
//! watch that stops the process when one shard's executor ends while the broker runs.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
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

/// Set by the first [`exit_process`].
static EXITING: AtomicBool = AtomicBool::new(false);

/// Ends the process with `code`: every exit of a running broker goes through here. The
/// first call exits; a later one, on another thread, parks until the process is gone (as
/// `std::process::exit` itself would). What it adds is the flag [`ShardWatch`] reads:
/// `exit` runs the calling thread's thread-local destructors, so on a shard's thread
/// (a shard that failed at start-up) the shard watch would see its executor end and call
/// exit again from inside exit, which Rust's std refuses with a panic ("exit called
/// re-entrantly") that aborts the process: SIGABRT instead of the exit code.
pub fn exit_process(code: i32) -> ! {
    if EXITING.swap(true, Ordering::SeqCst) {
        loop {
            std::thread::park();
        }
    }
    std::process::exit(code)
}

/// Exit code of a broker whose shard stopped on its own (as for a fatal storage error).
pub const SHARD_STOPPED_EXIT_CODE: i32 = 70;

/// Installed on a shard's executor thread by [`watch_shard`]: dropped when the thread ends.
struct ShardWatch {
    shard: usize,
    finished: Cell<bool>,
}

impl Drop for ShardWatch {
    fn drop(&mut self) {
        // The process is exiting (this thread's destructors run inside `exit`): nothing to
        // stop, and a second exit from here would abort.
        if !self.finished.get() && !EXITING.load(Ordering::SeqCst) {
            // A task panicked (builds that unwind; release builds abort on the panic itself)
            // or the shard's main future returned without a shutdown: the other shards
            // would go on serving with this core's partitions dark. Stop everything.
            eprintln!(
                "shardlog: shard {}'s executor ended while the broker runs (a task panicked \
                 or the shard returned early): exiting",
                self.shard
            );
            exit_process(SHARD_STOPPED_EXIT_CODE);
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

/// A long pass over shard state (every partition, every topic) that shares the executor
/// with the requests: it counts its steps and, every `per_turn` of them, gives way until
/// the executor has looked for I/O. A plain `yield_now` is not enough on glommio 0.9: it
/// requeues the task in its task queue, and the executor polls its rings only when that
/// queue runs dry or its preempt timer (100 ms) fires, so the requests that arrived
/// during the pass would still wait for all of it. A timer does it: the pass is no
/// longer runnable, the queue runs what else is runnable and then dries up, the executor
/// polls its rings (new requests, expired timers) and the pass resumes.
pub struct Turns {
    per_turn: usize,
    steps: usize,
}

impl Turns {
    pub fn new(per_turn: usize) -> Turns {
        assert!(per_turn > 0);
        Turns { per_turn, steps: 0 }
    }

    /// One step done; every `per_turn`-th waits for the executor's next look at I/O.
    pub async fn step(&mut self) {
        self.steps += 1;
        if self.steps.is_multiple_of(self.per_turn) {
            glommio::timer::sleep(Duration::from_micros(1)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::rc::Rc;

    use super::*;

    /// A task waiting on a timer that expires at once runs by the end of the pass's
    /// second turn: the executor polled its rings between turns. A pass that only
    /// yields within its task queue lets it run after the whole pass (1,000 quick steps,
    /// far less than glommio's 100 ms preempt timer); one that never yields, likewise.
    /// Both run as spawned tasks, as in a shard: `run`'s own future is polled outside
    /// the task queues, and each of its yields lets the executor poll its rings.
    #[test]
    fn a_pass_in_turns_lets_the_executor_poll_for_io_between_turns() {
        let ex = glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound).make().unwrap();
        let first = ex.run(async {
            glommio::spawn_local(async {
                let fired = Rc::new(Cell::new(false));
                let set = fired.clone();
                glommio::spawn_local(async move {
                    glommio::timer::sleep(Duration::from_micros(1)).await;
                    set.set(true);
                })
                .detach();
                // Let it start: its timer is armed, and it waits for the executor to see the
                // timer expire (a yield within the queue polls no I/O).
                futures_lite::future::yield_now().await;
                let mut turns = Turns::new(256);
                let mut seen = Vec::new();
                for _ in 0..1_000 {
                    seen.push(fired.get());
                    turns.step().await;
                }
                seen.iter().position(|f| *f)
            })
            .await
        });
        assert!(first.is_some_and(|i| i <= 512), "timer task first seen at step {first:?}");
    }
}
