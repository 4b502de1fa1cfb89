//! glommio executors created and dropped with work still on them, as the power-loss
//! simulation drops its two shards at every power loss (docs/reliability.md, "Memory per
//! seed"): nothing may panic, write into freed memory, or outlive the executor (tasks,
//! what they hold, the executor's eventfd, its blocking thread). Each test exercises one
//! patch of vendor/glommio (PATCHED.md) and fails on glommio 0.9.0 as published.
//!
//! Freed memory is checked by this binary's allocator: small blocks are filled with a
//! pattern when freed and kept in a quarantine for a while; a block whose pattern changed
//! before it left the quarantine was written after it was freed.
//!
//! The tests count the process's descriptors and threads, so they run one at a time.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::RefCell;
use std::future::poll_fn;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Poll, Waker};
use std::time::Duration;

use glommio::{executor, Latency, LocalExecutorBuilder, Placement, Shares};

// ---- the quarantine allocator ----

/// Freed blocks of up to this size are quarantined (a task header with a small future).
const QUARANTINE_MAX_BYTES: usize = 256;
/// How many freed blocks wait in quarantine before they are checked and given back.
const QUARANTINE_SLOTS: usize = 4096;
const POISON: u8 = 0xa5;

struct Quarantine {
    blocks: [(usize, usize, usize); QUARANTINE_SLOTS], // (address, size, align); 0: empty
    next: usize,
}

struct QuarantineAlloc {
    quarantine: Mutex<Quarantine>,
    writes_after_free: AtomicUsize,
}

#[global_allocator]
static ALLOCATOR: QuarantineAlloc = QuarantineAlloc {
    quarantine: Mutex::new(Quarantine { blocks: [(0, 0, 0); QUARANTINE_SLOTS], next: 0 }),
    writes_after_free: AtomicUsize::new(0),
};

impl QuarantineAlloc {
    /// Checks a quarantined block's pattern, then really frees it.
    unsafe fn release(&self, (address, size, align): (usize, usize, usize)) {
        let bytes = std::slice::from_raw_parts(address as *const u8, size);
        if bytes.iter().any(|&b| b != POISON) {
            self.writes_after_free.fetch_add(1, Ordering::SeqCst);
        }
        System.dealloc(address as *mut u8, Layout::from_size_align_unchecked(size, align));
    }

    /// Checks and frees every quarantined block; returns the writes after free seen so far.
    fn drain(&self) -> usize {
        let mut quarantine = self.quarantine.lock().unwrap_or_else(|e| e.into_inner());
        for slot in quarantine.blocks.iter_mut() {
            let block = std::mem::take(slot);
            if block.0 != 0 {
                unsafe { self.release(block) };
            }
        }
        self.writes_after_free.load(Ordering::SeqCst)
    }
}

unsafe impl GlobalAlloc for QuarantineAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        System.alloc(layout)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if layout.size() > QUARANTINE_MAX_BYTES {
            return System.dealloc(ptr, layout);
        }
        std::ptr::write_bytes(ptr, POISON, layout.size());
        let evicted = {
            let mut quarantine = self.quarantine.lock().unwrap_or_else(|e| e.into_inner());
            let at = quarantine.next;
            quarantine.next = (at + 1) % QUARANTINE_SLOTS;
            std::mem::replace(
                &mut quarantine.blocks[at],
                (ptr as usize, layout.size(), layout.align()),
            )
        };
        if evicted.0 != 0 {
            self.release(evicted);
        }
    }
}

// ---- helpers ----

static SERIAL: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn open_descriptors() -> usize {
    std::fs::read_dir("/proc/self/fd").expect("/proc/self/fd").count()
}

fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").expect("/proc/self/task").count()
}

/// Waits up to 10 s for `done` (threads that end on their own take a moment to go).
fn eventually(mut done: impl FnMut() -> bool) -> bool {
    for _ in 0..1000 {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    done()
}

/// Creates an executor on this thread, runs `main` on it, and drops it.
fn run_and_drop<F, Fut>(main: F)
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let ex = LocalExecutorBuilder::new(Placement::Unbound).make().expect("an executor");
    ex.run(main());
    drop(ex);
}

// ---- the tests ----

/// Patch 1 (sys/blocking.rs): an executor dropped while its blocking thread runs a job.
/// glommio 0.9.0's blocking thread then panicked ("failed to send response"), which in a
/// build with `panic = "abort"` kills the process.
#[test]
fn a_blocking_job_that_outlives_its_executor_ends_without_a_panic() {
    let _serial = one_at_a_time();
    let panics = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen = panics.clone();
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        seen.lock().unwrap().push(info.to_string());
    }));

    let jobs_done = Arc::new(AtomicUsize::new(0));
    const EXECUTORS: usize = 4;
    for _ in 0..EXECUTORS {
        let done = jobs_done.clone();
        run_and_drop(|| async move {
            glommio::spawn_local(async move {
                executor()
                    .spawn_blocking(move || {
                        std::thread::sleep(Duration::from_millis(100));
                        done.fetch_add(1, Ordering::SeqCst);
                    })
                    .await;
            })
            .detach();
            // Long enough for the job to start, far shorter than it runs.
            glommio::timer::sleep(Duration::from_millis(10)).await;
        });
    }
    let all_done = eventually(|| jobs_done.load(Ordering::SeqCst) == EXECUTORS);
    // The answers are sent after the job counts itself done: give them time to fail.
    std::thread::sleep(Duration::from_millis(200));
    std::panic::set_hook(previous);
    assert!(all_done, "the blocking jobs ran to their end");
    assert_eq!(*panics.lock().unwrap(), Vec::<String>::new(), "no thread panicked");
}

/// Patch 2 (task/raw.rs `destroy`): a task freed without dropping its header kept the
/// executor's `SleepNotifier`, and with it an eventfd, open for good: one descriptor per
/// executor that ever ran a task, even one that ran every task to its end.
#[test]
fn executors_whose_tasks_all_ended_give_back_their_descriptors() {
    let _serial = one_at_a_time();
    let round = || {
        run_and_drop(|| async {
            let answer = glommio::spawn_local(async { 6 * 7 }).await;
            assert_eq!(answer, 42);
        })
    };
    // The first executors open what a process keeps (the io_uring probe, global state).
    for _ in 0..3 {
        round();
    }
    let before = open_descriptors();
    for _ in 0..40 {
        round();
    }
    // Each executor's blocking thread holds the notifier (its eventfd) until it sees the
    // executor gone and ends, on its own time.
    let given_back = eventually(|| open_descriptors() <= before);
    let after = open_descriptors();
    assert!(given_back, "descriptors {before} -> {after} over 40 executors");
}

/// Patch 3 (task/raw.rs `drop_waker`): the last waker of a parked, detached task whose
/// task queue was removed. `schedule()` finds no queue and frees the task; glommio 0.9.0
/// then stored the task's state into the freed header (one byte written after free,
/// which glibc can report much later as `malloc(): unaligned tcache chunk detected`).
/// The reproducer of docs/glommio-0.9-drop-waker-uaf.md.
#[test]
fn the_last_waker_of_a_task_whose_queue_was_removed_does_not_write_after_free() {
    let _serial = one_at_a_time();
    let before = ALLOCATOR.drain();
    let ex = LocalExecutorBuilder::new(Placement::Unbound).make().expect("an executor");
    let ex_ref = &ex;
    ex.run(async move {
        for _ in 0..100 {
            let stash: Rc<RefCell<Option<Waker>>> = Rc::default();
            let tq =
                executor().create_task_queue(Shares::default(), Latency::NotImportant, "doomed");
            let parked = stash.clone();
            glommio::spawn_local_into(
                async move {
                    poll_fn(|cx| {
                        *parked.borrow_mut() = Some(cx.waker().clone());
                        Poll::<()>::Pending
                    })
                    .await
                },
                tq,
            )
            .expect("spawn")
            .detach();
            glommio::timer::sleep(Duration::from_millis(1)).await;
            assert!(stash.borrow().is_some(), "the task ran and parked");
            ex_ref.remove_task_queue(tq).expect("a queue with nothing runnable goes");
            drop(stash.borrow_mut().take());
        }
    });
    drop(ex);
    let after = ALLOCATOR.drain();
    assert_eq!(after - before, 0, "blocks written after they were freed");
}

/// Counts the drops of what parked tasks hold.
struct Held {
    dropped: Arc<AtomicUsize>,
    _bytes: Vec<u8>,
}

impl Held {
    fn new(dropped: &Arc<AtomicUsize>) -> Held {
        Held { dropped: dropped.clone(), _bytes: vec![1; 64 << 10] }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.dropped.fetch_add(1, Ordering::SeqCst);
    }
}

/// One executor's worth of parked work, every way the power-loss simulation leaves it.
/// Returns how many `Held` it handed out.
async fn park_everything(dropped: Arc<AtomicUsize>) -> usize {
    use glommio::channels::local_channel;
    let mut held = 0;
    let mut hold = || {
        held += 1;
        Held::new(&dropped)
    };
    // On a timer that never fires before the executor goes.
    let h = hold();
    glommio::spawn_local(async move {
        glommio::timer::sleep(Duration::from_secs(3600)).await;
        drop(h);
    })
    .detach();
    // On nothing at all: no waker exists anywhere.
    let h = hold();
    glommio::spawn_local(async move {
        std::future::pending::<()>().await;
        drop(h);
    })
    .detach();
    // Two tasks, each waiting on a channel whose sender the other one owns: only they
    // hold each other's wakers.
    let (to_a, a_in) = local_channel::new_unbounded::<u8>();
    let (to_b, b_in) = local_channel::new_unbounded::<u8>();
    let (ha, hb) = (hold(), hold());
    glommio::spawn_local(async move {
        let _keep = (to_b, ha);
        a_in.recv().await;
    })
    .detach();
    glommio::spawn_local(async move {
        let _keep = (to_a, hb);
        b_in.recv().await;
    })
    .detach();
    // Waiting on another parked task's handle.
    let (h1, h2) = (hold(), hold());
    let inner = glommio::spawn_local(async move {
        std::future::pending::<()>().await;
        drop(h1);
    });
    glommio::spawn_local(async move {
        inner.await;
        drop(h2);
    })
    .detach();
    // Cancelled while parked (its handle dropped): the future goes, the task must too.
    let h = hold();
    drop(glommio::spawn_local(async move {
        std::future::pending::<()>().await;
        drop(h);
    }));
    // Waiting on a blocking job that is still running when the executor goes.
    let h = hold();
    glommio::spawn_local(async move {
        executor().spawn_blocking(|| std::thread::sleep(Duration::from_millis(30))).await;
        drop(h);
    })
    .detach();
    // Let every task run up to where it parks.
    glommio::timer::sleep(Duration::from_millis(5)).await;
    held
}

/// Patch 4 (the teardown, executor/mod.rs `Drop for LocalExecutor`) and patch 5
/// (`JoinHandle::cancel`'s extra reference): an executor dropped with tasks parked on a
/// timer, on nothing, on each other, on a handle, on a blocking job, or cancelled while
/// parked, frees every task, what they hold, its eventfd and its blocking thread. glommio
/// 0.9.0 freed none of them: the power-loss simulation grew by ~4.5 MB and 7 descriptors
/// per seed.
#[test]
fn executors_dropped_with_tasks_parked_free_every_task_and_descriptor() {
    let _serial = one_at_a_time();
    let writes_after_free = ALLOCATOR.drain();
    let dropped = Arc::new(AtomicUsize::new(0));
    let mut handed_out = 0;
    let mut round = || {
        let dropped = dropped.clone();
        let held = Rc::new(std::cell::Cell::new(0));
        let count = held.clone();
        run_and_drop(|| async move { count.set(park_everything(dropped).await) });
        handed_out += held.get();
    };
    for _ in 0..3 {
        round();
    }
    // The blocking jobs of those rounds end and their threads go.
    std::thread::sleep(Duration::from_millis(100));
    let (fds_before, threads_before) = (open_descriptors(), threads());
    const ROUNDS: usize = 40;
    for _ in 0..ROUNDS {
        round();
    }
    assert_eq!(
        dropped.load(Ordering::SeqCst),
        handed_out,
        "everything the parked tasks held was dropped with their executors"
    );
    let fds_flat = eventually(|| open_descriptors() <= fds_before);
    let threads_flat = eventually(|| threads() <= threads_before);
    assert!(fds_flat, "descriptors {fds_before} -> {} over {ROUNDS} executors", open_descriptors());
    assert!(threads_flat, "threads {threads_before} -> {} over {ROUNDS} executors", threads());
    assert_eq!(ALLOCATOR.drain() - writes_after_free, 0, "blocks written after they were freed");
}

/// What the teardown changes for shardlog: a shard's executor that ends now frees its
/// mesh receivers, so a peer's request to it fails at once instead of sitting in a
/// channel nobody reads. `Mesh::send` then waits (as before) rather than panicking, so a
/// shard still running at a simulated power loss or at shutdown does not abort.
#[test]
fn a_request_to_a_shard_whose_executor_ended_waits_instead_of_panicking() {
    use shardlog_shards::message::ShardRequest;
    use shardlog_shards::runtime::run_shards;
    use shardlog_shards::Mesh;
    use std::sync::atomic::AtomicBool;

    let _serial = one_at_a_time();
    let gone = Arc::new(AtomicBool::new(false));
    let still_waiting = Arc::new(AtomicBool::new(false));
    let (gone2, waiting2) = (gone.clone(), still_waiting.clone());
    let ran = run_shards(2, move |builder| async move {
        let (mesh, _receivers) = Mesh::join(builder).await;
        if mesh.shard_id() == 1 {
            // Dropped by the teardown of this executor, after this returns.
            struct SetOnDrop(Arc<AtomicBool>);
            impl Drop for SetOnDrop {
                fn drop(&mut self) {
                    self.0.store(true, Ordering::SeqCst);
                }
            }
            let flag = SetOnDrop(gone2);
            glommio::spawn_local(async move {
                let _flag = flag;
                std::future::pending::<()>().await
            })
            .detach();
            return;
        }
        for _ in 0..10_000 {
            if gone2.load(Ordering::SeqCst) {
                break;
            }
            glommio::timer::sleep(Duration::from_millis(1)).await;
        }
        assert!(gone2.load(Ordering::SeqCst), "shard 1's executor was torn down");
        let request = ShardRequest::DeleteTopics { names: Vec::new() };
        let sent = async {
            let _reply = mesh.send(1, request).await;
            false
        };
        let waited = async {
            glommio::timer::sleep(Duration::from_millis(50)).await;
            true
        };
        waiting2.store(futures_lite::future::or(sent, waited).await, Ordering::SeqCst);
    });
    assert_eq!(ran, Ok(()), "no shard executor failed");
    assert!(gone.load(Ordering::SeqCst));
    assert!(still_waiting.load(Ordering::SeqCst), "the request to the gone shard was pending");
}

/// Patch 8 (channels/channel_mesh.rs): a `MeshBuilder` is `Send`, and every shard gets a
/// clone of it (the factory closure that holds it is cloned once per executor, and each
/// executor clones it again), then drops its clone when it has joined: clones are made
/// and dropped on several threads at once. glommio 0.9.0 kept the builder's list of peers
/// in an `Rc`, so those threads raced on a non-atomic reference count: a lost update
/// freed the list while a thread still held it, and that thread's next count update wrote
/// into the freed block (glibc: `malloc(): unaligned tcache chunk detected`, seen at
/// broker start-up and in the power-loss simulation). Here two threads clone and drop
/// their own copies of one builder as fast as they can; the count must come out exact
/// (nothing written after free) and the builder must still make a working mesh.
#[test]
fn mesh_builder_clones_made_and_dropped_on_two_threads_at_once_keep_an_exact_count() {
    use glommio::channels::channel_mesh::MeshBuilder;
    use std::sync::Barrier;

    const ROUNDS: usize = 200_000;
    let _serial = one_at_a_time();
    let before = ALLOCATOR.drain();
    let builder = MeshBuilder::<u64, _>::full(2, 4);
    let start = Barrier::new(2);
    std::thread::scope(|scope| {
        for _ in 0..2 {
            let mine = builder.clone();
            let start = &start;
            scope.spawn(move || {
                start.wait();
                for _ in 0..ROUNDS {
                    drop(std::hint::black_box(mine.clone()));
                }
            });
        }
    });
    let after = ALLOCATOR.drain();
    assert_eq!(after - before, 0, "blocks written after they were freed");

    // The builder still works: two executors join it and pass a message each way.
    let done = Arc::new(AtomicUsize::new(0));
    let joined: Vec<_> = (0..2)
        .map(|_| {
            let (builder, done) = (builder.clone(), done.clone());
            std::thread::spawn(move || {
                run_and_drop(|| async move {
                    let (senders, mut receivers) = builder.join().await.expect("joined");
                    let me = senders.peer_id();
                    senders.send_to(1 - me, me as u64).await.expect("sent");
                    let (from, receiver) = receivers.streams().pop().expect("a peer");
                    assert_eq!(receiver.recv().await, Some(from as u64));
                    done.fetch_add(1, Ordering::SeqCst);
                })
            })
        })
        .collect();
    drop(builder);
    for thread in joined {
        thread.join().expect("an executor thread");
    }
    assert_eq!(done.load(Ordering::SeqCst), 2, "both executors heard from the other");
    assert_eq!(ALLOCATOR.drain() - before, 0, "blocks written after they were freed");
}

/// Patch 7 (task/raw.rs `run`): a detached task that, after it was woken and ran again,
/// parks with no waker left anywhere (on `std::future::pending()`, or on a future that
/// dropped its waker: a `SimDisk` operation after a simulated crash) can never run again.
/// glommio 0.9.0 then freed the task without dropping its future, so everything the
/// future held (in the power-loss simulation: a shard, its mesh channels and through them
/// the executors' eventfds) leaked for good, even after the executor was dropped, as the
/// task was gone from its list. (A task that parks that way on its first poll is not
/// leaked: `spawn_local` polls it before `detach` drops the handle, and that drop cancels
/// it.) What the future held must be dropped when it parks for good.
#[test]
fn a_detached_task_that_parks_with_no_waker_left_drops_its_future() {
    let _serial = one_at_a_time();
    let dropped = Arc::new(AtomicUsize::new(0));
    let dropped_while_running = Arc::new(AtomicUsize::new(0));
    let (counter, seen) = (dropped.clone(), dropped_while_running.clone());
    run_and_drop(|| async move {
        for _ in 0..10 {
            let held = Held::new(&counter);
            glommio::spawn_local(async move {
                let _held = held;
                glommio::timer::sleep(Duration::from_millis(1)).await;
                std::future::pending::<()>().await
            })
            .detach();
            // A waker taken and dropped before parking for good: no reference is left.
            let held = Held::new(&counter);
            glommio::spawn_local(async move {
                let _held = held;
                glommio::timer::sleep(Duration::from_millis(1)).await;
                poll_fn(|cx| {
                    drop(cx.waker().clone());
                    Poll::<()>::Pending
                })
                .await
            })
            .detach();
        }
        glommio::timer::sleep(Duration::from_millis(20)).await;
        seen.store(counter.load(Ordering::SeqCst), Ordering::SeqCst);
    });
    assert_eq!(dropped_while_running.load(Ordering::SeqCst), 20, "dropped while the executor ran");
    assert_eq!(dropped.load(Ordering::SeqCst), 20, "everything the parked tasks held");
}
