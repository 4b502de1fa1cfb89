//! `shardlog disk-check`: how fast a durable 4 KiB write is on the disk that holds the
//! data dir, measured the two ways the log can make a flush durable (docs/tuning.md).
//! Like `rpk iotune`, run it once on a new machine: a durable ack cannot be faster than
//! these figures, and the broker's `shardlog_flush_stage_seconds` should sit near them.
//!
//! Runs on the calling thread with blocking syscalls (no broker is running); writes one
//! 1 MiB scratch file in the directory and removes it.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Instant;

const BLOCK: usize = 4096;
const FILE_BYTES: u64 = 1 << 20;

/// Arguments of `shardlog disk-check`.
#[derive(clap::Args, Debug)]
pub struct DiskCheckArgs {
    /// A directory on the disk to measure (created if missing); use the broker's data dir.
    #[arg(long, default_value = "./data")]
    pub dir: PathBuf,
    /// Durable writes measured per mode.
    #[arg(long, default_value_t = 1000)]
    pub ops: usize,
}

/// Runs the check and prints its table; the exit code (0, or 1 with the reason).
pub fn run(args: DiskCheckArgs) -> i32 {
    match check(&args) {
        Ok(()) => 0,
        Err(message) => {
            eprintln!("shardlog: disk-check: {message}");
            1
        }
    }
}

fn check(args: &DiskCheckArgs) -> Result<(), String> {
    if args.ops == 0 {
        return Err("--ops must be at least 1".into());
    }
    std::fs::create_dir_all(&args.dir)
        .map_err(|e| format!("cannot create {}: {e}", args.dir.display()))?;
    let path = args.dir.join("disk-check.scratch");
    let result = measure(&path, args.ops);
    let _ = std::fs::remove_file(&path);
    let (fdatasync, dsync) = result?;
    println!("disk-check in {} ({} durable 4 KiB writes per mode)", args.dir.display(), args.ops);
    println!("  {:<42} {:>8} {:>8}", "mode", "p50 us", "p99 us");
    let line = |name: &str, mut us: Vec<u64>| {
        us.sort_unstable();
        let at = |q: f64| us[((us.len() - 1) as f64 * q).round() as usize];
        println!("  {name:<42} {:>8} {:>8}", at(0.5), at(0.99));
    };
    line("O_DIRECT overwrite + fdatasync (fdatasync)", fdatasync);
    line("O_DIRECT|O_DSYNC overwrite (dsync)", dsync);
    println!("A durable ack costs at least the figure of the --log-sync mode in use.");
    Ok(())
}

/// Durable 4 KiB overwrites of already-written blocks (what zero-filled log space gives),
/// one at a time, both ways; latencies in microseconds.
fn measure(path: &Path, ops: usize) -> Result<(Vec<u64>, Vec<u64>), String> {
    let io = |what: &str, e: std::io::Error| format!("{what} {}: {e}", path.display());
    // Heap-backed and 4096-aligned, as the log's own buffers (DmaDisk::alloc_buffer).
    let mut block = glommio::allocate_dma_buffer_global(BLOCK);
    block.as_bytes_mut().fill(0);
    {
        let file = open(path, 0).map_err(|e| io("creating", e))?;
        for at in (0..FILE_BYTES).step_by(BLOCK) {
            file.write_all_at(block.as_bytes(), at).map_err(|e| io("writing", e))?;
        }
        file.sync_all().map_err(|e| io("syncing", e))?;
    }
    let mut timed = |file: &File, sync: bool| -> Result<Vec<u64>, String> {
        let mut us = Vec::with_capacity(ops);
        for i in 0..ops {
            block.as_bytes_mut()[0] = i as u8;
            let at = (i as u64 * BLOCK as u64) % FILE_BYTES;
            let started = Instant::now();
            file.write_all_at(block.as_bytes(), at).map_err(|e| io("writing", e))?;
            if sync {
                file.sync_data().map_err(|e| io("fdatasync of", e))?;
            }
            us.push(started.elapsed().as_micros() as u64);
        }
        Ok(us)
    };
    let fdatasync = timed(&open(path, 0).map_err(|e| io("opening", e))?, true)?;
    let dsync = timed(&open(path, libc::O_DSYNC).map_err(|e| io("opening", e))?, false)?;
    Ok((fdatasync, dsync))
}

fn open(path: &Path, flags: libc::c_int) -> std::io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .custom_flags(libc::O_DIRECT | flags)
        .open(path)
}
