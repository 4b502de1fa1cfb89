//! glommio's reactor must not lose a wake-up: a pending timer must never stand in for a
//! nearer one, and a cross-executor message must never sit while its receiver sleeps.
//! Written for a reactor patch (docs/benchmarks.md, "Reactor churn"; dropped), kept as a
//! guard for any change to glommio or to how shards park. A violation shows as a hang,
//! which the watchdog turns into a failure naming where it stuck.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use glommio::channels::shared_channel;
use glommio::{LocalExecutorBuilder, Placement};

/// Far above what either test needs on a loaded 2-core machine (a few seconds).
const WATCHDOG: Duration = Duration::from_secs(120);

/// Waits for `done`, failing with `what` and the progress counter if it does not come.
fn expect_done(done: &mpsc::Receiver<()>, what: &str, progress: &AtomicU64) {
    if done.recv_timeout(WATCHDOG).is_err() {
        panic!(
            "{what}: no progress for {WATCHDOG:?}, stuck at step {}",
            progress.load(Ordering::SeqCst)
        );
    }
}

/// Executor 0 sends a number, executor 1 echoes it back, 20,000 times. Every 64th round
/// one side pauses before answering, long enough for the other side to go to sleep, so
/// the wake-up through `SleepNotifier::notify` and the sleeper's last look at its
/// channels are both exercised many times, in both directions.
#[test]
fn cross_executor_ping_pong_never_loses_a_wake_up() {
    const ROUNDS: u64 = 20_000;
    let (to_echo, echo_in) = shared_channel::new_bounded::<u64>(1);
    let (to_pinger, pinger_in) = shared_channel::new_bounded::<u64>(1);
    let progress = Arc::new(AtomicU64::new(0));
    let (done_tx, done) = mpsc::channel();

    let echo = LocalExecutorBuilder::new(Placement::Unbound)
        .name("echo")
        .spawn(move || async move {
            let input = echo_in.connect().await;
            let output = to_pinger.connect().await;
            while let Some(n) = input.recv().await {
                if n % 64 == 7 {
                    std::thread::sleep(Duration::from_micros(300));
                }
                if output.send(n).await.is_err() {
                    break;
                }
            }
        })
        .unwrap();

    let seen = progress.clone();
    let pinger = LocalExecutorBuilder::new(Placement::Unbound)
        .name("pinger")
        .spawn(move || async move {
            let output = to_echo.connect().await;
            let input = pinger_in.connect().await;
            for n in 0..ROUNDS {
                if n % 64 == 33 {
                    std::thread::sleep(Duration::from_micros(300));
                }
                output.send(n).await.unwrap();
                assert_eq!(input.recv().await, Some(n), "the echo answered out of order");
                seen.store(n + 1, Ordering::SeqCst);
            }
            done_tx.send(()).unwrap();
        })
        .unwrap();

    expect_done(&done, "cross-executor ping-pong", &progress);
    pinger.join().unwrap();
    echo.join().unwrap();
    assert_eq!(progress.load(Ordering::SeqCst), ROUNDS);
}

/// An executor sleeps with a one-hour timer pending (the task below), is woken by a
/// message from another executor, and then sleeps on short timers of shrinking length.
/// A reactor that kept the one-hour timer armed instead of arming the short one would
/// stay asleep for an hour.
#[test]
fn a_short_timer_is_served_while_a_long_one_is_pending() {
    let (to_sleeper, sleeper_in) = shared_channel::new_bounded::<()>(1);
    let progress = Arc::new(AtomicU64::new(0));
    let (done_tx, done) = mpsc::channel();

    let steps = progress.clone();
    let sleeper = LocalExecutorBuilder::new(Placement::Unbound)
        .name("sleeper")
        .spawn(move || async move {
            glommio::spawn_local(glommio::timer::sleep(Duration::from_secs(3600))).detach();
            let input = sleeper_in.connect().await;
            for round in 0..20u64 {
                // Asleep here with the hour as the nearest timer, until the waker sends.
                input.recv().await.unwrap();
                for ms in [8u64, 4, 2, 1] {
                    glommio::timer::sleep(Duration::from_millis(ms)).await;
                    steps.fetch_add(1, Ordering::SeqCst);
                }
                steps.store((round + 1) * 100, Ordering::SeqCst);
            }
            done_tx.send(()).unwrap();
        })
        .unwrap();

    let waker = LocalExecutorBuilder::new(Placement::Unbound)
        .name("waker")
        .spawn(move || async move {
            let output = to_sleeper.connect().await;
            for _ in 0..20 {
                glommio::timer::sleep(Duration::from_millis(20)).await;
                if output.send(()).await.is_err() {
                    break;
                }
            }
        })
        .unwrap();

    expect_done(&done, "short timers behind a pending one-hour timer", &progress);
    sleeper.join().unwrap();
    waker.join().unwrap();
}
