//! `runtime::exit_process` on a shard's thread ends the process with the code asked: the
//! thread's shard watch (a thread-local destructor, which `exit` runs on the calling
//! thread) must not call exit again from inside exit, which Rust's std answers with a
//! panic and an abort. That was how a broker whose shard failed at start-up (its port in
//! use) died with SIGABRT. The test runs itself as a child process that does this.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use shardlog_shards::runtime::{exit_process, watch_shard};

const CHILD: &str = "SHARDLOG_EXIT_PROCESS_CHILD";
const CODE: i32 = 3;

#[test]
fn a_shard_thread_that_exits_ends_the_process_with_its_code_not_an_abort() {
    if std::env::var_os(CHILD).is_some() {
        let shard = std::thread::spawn(|| {
            watch_shard(0);
            exit_process(CODE)
        });
        let _ = shard.join();
        unreachable!("the process exited");
    }
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "a_shard_thread_that_exits_ends_the_process_with_its_code_not_an_abort"])
        .env(CHILD, "1")
        .stdout(Stdio::null())
        .spawn()
        .expect("running the child");
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("the child did not exit in 30 s (an exit that waits for itself)");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(status.code(), Some(CODE), "{status:?}");
}
