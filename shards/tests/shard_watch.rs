//! A shard whose executor ends while the others run (a task panicked, or the shard's main
//! future returned early) takes the process down with a message naming the shard, instead
//! of leaving a process that looks alive with one core's partitions dark. Each case runs
//! in a child process (this test binary), since the point is that the process exits.

use std::process::Command;
use std::time::{Duration, Instant};

use shardlog_shards::runtime::{run_shards, shard_finished, watch_shard, SHARD_STOPPED_EXIT_CODE};
use shardlog_shards::Mesh;

const CHILD: &str = "SHARDLOG_SHARD_WATCH_CHILD";

/// Two watched shards; shard 1 fails as `how` says, shard 0 keeps running (for at most 30
/// s: if the watch did not end the process by then, the child exits 0 and the test fails).
fn child(how: &str) {
    let how = how.to_string();
    run_shards(2, move |builder| async move {
        let (mesh, _receivers) = Mesh::join(builder).await;
        let id = mesh.shard_id();
        watch_shard(id);
        if id == 1 {
            match how.as_str() {
                "panic" => {
                    glommio::spawn_local(async { panic!("injected panic in a shard task") })
                        .detach();
                    glommio::timer::sleep(Duration::from_secs(60)).await;
                }
                "return" => return,
                "finish" => return shard_finished(),
                other => panic!("unknown child mode {other}"),
            }
        }
        let deadline = Instant::now() + Duration::from_secs(if how == "finish" { 0 } else { 30 });
        while Instant::now() < deadline {
            glommio::timer::sleep(Duration::from_millis(10)).await;
        }
        shard_finished();
    })
    .ok();
    println!("the process outlived its stopped shard");
}

fn run_child(how: &str) -> (Option<i32>, String) {
    let output = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "a_shard_whose_executor_ends_takes_the_process_down", "--nocapture"])
        .env(CHILD, how)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    (output.status.code(), text)
}

#[test]
fn a_shard_whose_executor_ends_takes_the_process_down() {
    if let Ok(how) = std::env::var(CHILD) {
        return child(&how);
    }
    for how in ["panic", "return"] {
        let (code, text) = run_child(how);
        assert_eq!(code, Some(SHARD_STOPPED_EXIT_CODE), "{how}: child exited {code:?}:\n{text}");
        assert!(
            text.contains("shardlog: shard 1's executor ended while the broker runs"),
            "{how}: no message naming the shard:\n{text}"
        );
    }
    // A shutdown (every shard finished) is not a failure.
    let (code, text) = run_child("finish");
    assert_eq!(code, Some(0), "a clean shutdown exited {code:?}:\n{text}");
}
