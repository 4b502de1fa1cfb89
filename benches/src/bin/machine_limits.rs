//! `machine-limits`: what this machine can do at best, measured the way the broker uses
//! it, so broker figures can be quoted as ratios to the limits of the same run.
//!
//! - 4 KiB O_DIRECT write + fdatasync, one at a time: overwriting blocks written before
//!   (what a preallocated, zero-filled segment costs) and appending (extends the file).
//! - with `--pace-us P`, the same overwrite with P µs of idle before each op: one durable
//!   write as a paced producer meets it (at 200 msg/s, P = 5000). On the 2-core VM the
//!   paced figure is 2-5× the back-to-back one, and keeping the CPU busy between ops (a
//!   spin instead of a sleep) does not change it. The likeliest reading (not separated
//!   further): the device, a virtio disk, answers a request after idle more slowly. Both
//!   ways dirty the inode (ctime) on this journal-less ext4 (docs/tuning.md).
//! - with `--uring` as well, the paced overwrite through one io_uring: write then
//!   fdatasync as two submissions (the broker's flusher), write linked to fdatasync in one
//!   submission, and one RWF_DSYNC write; then the two-step and linked ways again on a
//!   ring with a kernel submission thread (IORING_SETUP_SQPOLL, idle timeout twice the
//!   pace, so the thread is still polling when the next op comes: its best case, at the
//!   cost of a CPU spinning in the kernel).
//! - sequential O_DIRECT writes of 1 MiB, queue depth 1 (bandwidth).
//! - loopback TCP round trip, 64 B and 1 KiB ping-pong with TCP_NODELAY.
//!
//! Usage: machine-limits --dir DIR [--ops N] [--seq-mib M] [--pace-us P [--uring]].
//! Prints a table and `RESULT mode=limits key=value ...`. The file it writes in DIR is
//! removed at the end.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

const BLOCK: usize = 4096;
const SEQ_CHUNK: usize = 1 << 20;

/// A zeroed buffer aligned for O_DIRECT.
struct AlignedBuf {
    ptr: *mut u8,
    layout: Layout,
}

impl AlignedBuf {
    fn new(len: usize) -> AlignedBuf {
        let layout = Layout::from_size_align(len, BLOCK).expect("valid layout");
        // SAFETY: len > 0; freed in Drop with the same layout.
        let ptr = unsafe { alloc_zeroed(layout) };
        assert!(!ptr.is_null(), "allocation failed");
        AlignedBuf { ptr, layout }
    }

    fn as_mut(&mut self) -> &mut [u8] {
        // SAFETY: ptr is valid for layout.size() bytes and uniquely borrowed.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.layout.size()) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { dealloc(self.ptr, self.layout) }
    }
}

fn open_direct(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .custom_flags(libc::O_DIRECT)
        .open(path)
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("bounds")
}

/// A new O_DIRECT file at `path` and a 4 KiB block to write; with `written`, its first
/// `ops` blocks written and synced beforehand (not just allocated).
fn fresh_file(path: &Path, ops: usize, written: bool) -> std::io::Result<(File, AlignedBuf)> {
    let _ = std::fs::remove_file(path);
    let file = open_direct(path)?;
    let mut buf = AlignedBuf::new(BLOCK);
    buf.as_mut().fill(0xab);
    if written {
        let mut chunk = AlignedBuf::new(SEQ_CHUNK);
        for i in 0..(ops * BLOCK).div_ceil(SEQ_CHUNK) {
            file.write_all_at(chunk.as_mut(), (i * SEQ_CHUNK) as u64)?;
        }
        file.sync_all()?;
    }
    Ok((file, buf))
}

/// 4 KiB O_DIRECT write + fdatasync per op; `append` extends the file each time,
/// otherwise the blocks were written (not just allocated) beforehand. `pace` is slept
/// before each op (not timed).
fn sync_writes(
    path: &Path,
    ops: usize,
    append: bool,
    pace: Option<Duration>,
) -> std::io::Result<Histogram<u64>> {
    let (file, mut buf) = fresh_file(path, ops, !append)?;
    let mut h = histogram();
    for i in 0..ops {
        if let Some(pace) = pace {
            std::thread::sleep(pace);
        }
        let started = Instant::now();
        file.write_all_at(buf.as_mut(), (i * BLOCK) as u64)?;
        file.sync_data()?;
        h.record((started.elapsed().as_micros() as u64).max(1)).expect("in range");
    }
    Ok(h)
}

/// How a 4 KiB O_DIRECT overwrite is made durable, through one io_uring as the broker's
/// reactor does (glommio), against the blocking syscalls of `sync_writes`.
#[derive(Clone, Copy)]
enum UringMode {
    /// WRITE, wait for it, then FSYNC(DATASYNC), wait: the broker's flusher today.
    TwoSteps,
    /// WRITE linked to FSYNC(DATASYNC) (IOSQE_IO_LINK): one submission, no user-space
    /// turn between the two.
    Linked,
    /// One WRITE with RWF_DSYNC (`--log-sync dsync`).
    Dsync,
}

/// The ring the ops go through.
#[derive(Clone, Copy)]
enum Ring {
    /// Submitted by `io_uring_enter` from this thread, as glommio does.
    Plain,
    /// Picked up by a kernel thread polling the submission queue (SQPOLL), which sleeps
    /// after `idle` of nothing to do.
    SqPoll { idle: Duration },
}

/// Overwrites of written blocks through io_uring, one at a time, with `pace` of idle
/// before each (not timed).
fn uring_writes(
    path: &Path,
    ops: usize,
    mode: UringMode,
    ring: Ring,
    pace: Option<Duration>,
) -> std::io::Result<Histogram<u64>> {
    use io_uring::{opcode, squeue, types, IoUring};
    let (file, mut buf) = fresh_file(path, ops, true)?;
    let fd = types::Fd(std::os::fd::AsRawFd::as_raw_fd(&file));
    let mut ring = match ring {
        Ring::Plain => IoUring::new(8)?,
        Ring::SqPoll { idle } => {
            let idle_ms = idle.as_millis().clamp(1, u32::MAX as u128) as u32;
            IoUring::builder().setup_sqpoll(idle_ms).build(8)?
        }
    };
    let ptr = buf.as_mut().as_ptr();
    let mut h = histogram();
    for i in 0..ops {
        if let Some(pace) = pace {
            std::thread::sleep(pace);
        }
        let offset = (i * BLOCK) as u64;
        let write = opcode::Write::new(fd, ptr, BLOCK as u32).offset(offset);
        let fsync = opcode::Fsync::new(fd).flags(types::FsyncFlags::DATASYNC).build();
        let started = Instant::now();
        let steps: Vec<Vec<squeue::Entry>> = match mode {
            UringMode::TwoSteps => vec![vec![write.build()], vec![fsync]],
            UringMode::Linked => vec![vec![write.build().flags(squeue::Flags::IO_LINK), fsync]],
            UringMode::Dsync => vec![vec![write.rw_flags(libc::RWF_DSYNC).build()]],
        };
        for step in steps {
            // SAFETY: the buffer and file outlive the operations (each step is waited for).
            unsafe { ring.submission().push_multiple(&step) }
                .map_err(|_| std::io::Error::other("io_uring submission queue full"))?;
            ring.submit_and_wait(step.len())?;
            for cqe in ring.completion() {
                if cqe.result() < 0 {
                    return Err(std::io::Error::from_raw_os_error(-cqe.result()));
                }
            }
        }
        h.record((started.elapsed().as_micros() as u64).max(1)).expect("in range");
    }
    Ok(h)
}

/// Sequential 1 MiB O_DIRECT writes, queue depth 1, then one fdatasync; MB/s.
fn sequential(path: &Path, mib: usize) -> std::io::Result<f64> {
    let _ = std::fs::remove_file(path);
    let file = open_direct(path)?;
    let mut chunk = AlignedBuf::new(SEQ_CHUNK);
    chunk.as_mut().fill(0x5a);
    let started = Instant::now();
    for i in 0..mib {
        file.write_all_at(chunk.as_mut(), (i * SEQ_CHUNK) as u64)?;
    }
    file.sync_data()?;
    Ok((mib * SEQ_CHUNK) as f64 / 1e6 / started.elapsed().as_secs_f64())
}

/// Ping-pong of `size` bytes over loopback, `rounds` times.
fn loopback(size: usize, rounds: usize) -> std::io::Result<Histogram<u64>> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let server = std::thread::spawn(move || -> std::io::Result<()> {
        let (mut s, _) = listener.accept()?;
        s.set_nodelay(true)?;
        let mut buf = vec![0u8; size];
        loop {
            if s.read_exact(&mut buf).is_err() {
                return Ok(());
            }
            s.write_all(&buf)?;
        }
    });
    let mut c = TcpStream::connect(addr)?;
    c.set_nodelay(true)?;
    let mut buf = vec![7u8; size];
    let mut h = histogram();
    for round in 0..rounds + rounds / 10 {
        let started = Instant::now();
        c.write_all(&buf)?;
        c.read_exact(&mut buf)?;
        if round >= rounds / 10 {
            // the first tenth warms up
            h.record((started.elapsed().as_nanos() as u64 / 1000).max(1)).expect("in range");
        }
    }
    drop(c);
    server.join().expect("echo thread")?;
    Ok(h)
}

fn main() -> std::io::Result<()> {
    let mut dir = None;
    let (mut ops, mut seq_mib, mut rounds) = (3000usize, 1024usize, 20_000usize);
    let mut pace_us = 0u64;
    let mut uring = false;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().expect("flag needs a value");
        match flag.as_str() {
            "--dir" => dir = Some(PathBuf::from(value())),
            "--ops" => ops = value().parse().expect("--ops N"),
            "--seq-mib" => seq_mib = value().parse().expect("--seq-mib M"),
            "--rounds" => rounds = value().parse().expect("--rounds N"),
            "--pace-us" => pace_us = value().parse().expect("--pace-us P"),
            "--uring" => uring = true,
            _ => {
                eprintln!(
                    "usage: machine-limits --dir DIR [--ops N] [--seq-mib M] [--rounds N] \
                     [--pace-us P [--uring]]"
                );
                std::process::exit(if flag == "--help" { 0 } else { 2 });
            }
        }
    }
    let dir = dir.unwrap_or_else(|| PathBuf::from("."));
    let path = dir.join("machine-limits.tmp");
    let overwrite = sync_writes(&path, ops, false, None)?;
    // About a second of paced ops at 200 msg/s; as many as the others when P is small.
    let paced_ops = (1_000_000 / pace_us.max(1)).clamp(100, ops as u64) as usize;
    let paced = match pace_us {
        0 => None,
        _ => Some(sync_writes(&path, paced_ops, false, Some(Duration::from_micros(pace_us)))?),
    };
    let pace = Some(Duration::from_micros(pace_us));
    let mut uring_figures = Vec::new();
    if uring && pace_us > 0 {
        let sqpoll = Ring::SqPoll { idle: Duration::from_micros(2 * pace_us) };
        let modes = [
            ("uring_2step_p50_us", UringMode::TwoSteps, Ring::Plain),
            ("uring_linked_p50_us", UringMode::Linked, Ring::Plain),
            ("uring_dsync_p50_us", UringMode::Dsync, Ring::Plain),
            ("uring_sqpoll_2step_p50_us", UringMode::TwoSteps, sqpoll),
            ("uring_sqpoll_linked_p50_us", UringMode::Linked, sqpoll),
        ];
        for (name, mode, ring) in modes {
            let h = uring_writes(&path, paced_ops, mode, ring, pace)?;
            uring_figures.push((name, h.value_at_quantile(0.5)));
        }
    }
    let append = sync_writes(&path, ops, true, None)?;
    let seq = sequential(&path, seq_mib)?;
    std::fs::remove_file(&path)?;
    let rtt_64 = loopback(64, rounds)?;
    let rtt_1k = loopback(1024, rounds)?;
    let q = |h: &Histogram<u64>, q: f64| h.value_at_quantile(q);
    let mut fields = vec![
        ("overwrite_sync_p50_us", q(&overwrite, 0.5) as f64),
        ("overwrite_sync_p99_us", q(&overwrite, 0.99) as f64),
        ("append_sync_p50_us", q(&append, 0.5) as f64),
        ("append_sync_p99_us", q(&append, 0.99) as f64),
        ("seq_direct_mb_per_s", (seq * 10.0).round() / 10.0),
        ("rtt_64b_p50_us", q(&rtt_64, 0.5) as f64),
        ("rtt_64b_p99_us", q(&rtt_64, 0.99) as f64),
        ("rtt_1k_p50_us", q(&rtt_1k, 0.5) as f64),
        ("rtt_1k_p99_us", q(&rtt_1k, 0.99) as f64),
    ];
    if let Some(paced) = &paced {
        fields.push(("paced_sync_p50_us", q(paced, 0.5) as f64));
        fields.push(("paced_sync_p99_us", q(paced, 0.99) as f64));
    }
    for (name, p50) in uring_figures {
        fields.push((name, p50 as f64));
    }
    println!(
        "== machine limits ({} sync ops, {seq_mib} MiB sequential, {rounds} round trips)",
        ops
    );
    let mut line = String::from("RESULT mode=limits");
    for (k, v) in fields {
        println!("  {k:<24} {v}");
        line.push_str(&format!(" {k}={v}"));
    }
    println!("{line}");
    Ok(())
}
