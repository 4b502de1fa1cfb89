//! `machine-limits`: what this machine can do at best, measured the way the broker uses
//! it, so broker figures can be quoted as ratios to the limits of the same run.
//!
//! - 4 KiB O_DIRECT write + fdatasync, one at a time: overwriting blocks written before
//!   (what a preallocated, zero-filled segment costs) and appending (extends the file).
//! - sequential O_DIRECT writes of 1 MiB, queue depth 1 (bandwidth).
//! - loopback TCP round trip, 64 B and 1 KiB ping-pong with TCP_NODELAY.
//!
//! Usage: machine-limits --dir DIR [--ops N] [--seq-mib M]. Prints a table and
//! `RESULT mode=limits key=value ...`. The file it writes in DIR is removed at the end.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Instant;

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

/// 4 KiB O_DIRECT write + fdatasync per op; `append` extends the file each time,
/// otherwise the blocks were written (not just allocated) beforehand.
fn sync_writes(path: &Path, ops: usize, append: bool) -> std::io::Result<Histogram<u64>> {
    let _ = std::fs::remove_file(path);
    let file = open_direct(path)?;
    let mut buf = AlignedBuf::new(BLOCK);
    buf.as_mut().fill(0xab);
    if !append {
        let mut chunk = AlignedBuf::new(SEQ_CHUNK);
        for i in 0..(ops * BLOCK).div_ceil(SEQ_CHUNK) {
            file.write_all_at(chunk.as_mut(), (i * SEQ_CHUNK) as u64)?;
        }
        file.sync_all()?;
    }
    let mut h = histogram();
    for i in 0..ops {
        let started = Instant::now();
        file.write_all_at(buf.as_mut(), (i * BLOCK) as u64)?;
        file.sync_data()?;
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
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().expect("flag needs a value");
        match flag.as_str() {
            "--dir" => dir = Some(PathBuf::from(value())),
            "--ops" => ops = value().parse().expect("--ops N"),
            "--seq-mib" => seq_mib = value().parse().expect("--seq-mib M"),
            "--rounds" => rounds = value().parse().expect("--rounds N"),
            _ => {
                eprintln!("usage: machine-limits --dir DIR [--ops N] [--seq-mib M] [--rounds N]");
                std::process::exit(if flag == "--help" { 0 } else { 2 });
            }
        }
    }
    let dir = dir.unwrap_or_else(|| PathBuf::from("."));
    let path = dir.join("machine-limits.tmp");
    let overwrite = sync_writes(&path, ops, false)?;
    let append = sync_writes(&path, ops, true)?;
    let seq = sequential(&path, seq_mib)?;
    std::fs::remove_file(&path)?;
    let rtt_64 = loopback(64, rounds)?;
    let rtt_1k = loopback(1024, rounds)?;
    let q = |h: &Histogram<u64>, q: f64| h.value_at_quantile(q);
    let fields = [
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
