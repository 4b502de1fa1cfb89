//! `shardlog disk-check`: how fast a durable 4 KiB write is on the disk that holds the
//! data dir, measured the two ways the log can make a flush durable (docs/tuning.md).
//! Like `rpk iotune`, run it once on a new machine: a durable ack cannot be faster than
//! these figures, and the broker's `shardlog_flush_stage_seconds` should sit near them.
//!
//! The third figure is the fdatasync mode with `--pace-us` of idle before each write, as a
//! producer at 1,000,000 / pace msg/s meets the disk: on virtio disks it can be several
//! times the back-to-back figure (docs/tuning.md), and it is the floor of a paced ack.
//!
//! Runs on the calling thread with blocking syscalls (no broker is running); writes one
//! 1 MiB scratch file in the directory and removes it.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const BLOCK: usize = 4096;
const FILE_BYTES: u64 = 1 << 20;
/// Paced writes measured at most (a second of them at the default pace).
const PACED_OPS_MAX: usize = 200;

/// Arguments of `shardlog disk-check`.
#[derive(clap::Args, Debug)]
pub struct DiskCheckArgs {
    /// A directory on the disk to measure (created if missing); use the broker's data dir.
    #[arg(long, default_value = "./data")]
    pub dir: PathBuf,
    /// Durable writes measured per mode.
    #[arg(long, default_value_t = 1000)]
    pub ops: usize,
    /// Idle before each write of the paced row, in microseconds (0: no paced row).
    #[arg(long, default_value_t = 5000)]
    pub pace_us: u64,
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
    let result = measure(&path, args.ops, args.pace_us);
    let _ = std::fs::remove_file(&path);
    let (fdatasync, dsync, paced) = result?;
    let paced_ops = paced.as_ref().map_or(String::new(), |p| format!(", {} paced", p.len()));
    let dir = args.dir.display();
    println!("disk-check in {dir} ({} durable 4 KiB writes per mode{paced_ops})", args.ops);
    println!("  {:<42} {:>8} {:>8}", "mode", "p50 us", "p99 us");
    let line = |name: &str, mut us: Vec<u64>| {
        us.sort_unstable();
        let at = |q: f64| us[((us.len() - 1) as f64 * q).round() as usize];
        println!("  {name:<42} {:>8} {:>8}", at(0.5), at(0.99));
    };
    line("O_DIRECT overwrite + fdatasync (fdatasync)", fdatasync);
    line("O_DIRECT|O_DSYNC overwrite (dsync)", dsync);
    if let Some(paced) = paced {
        line(&format!("fdatasync, {} us apart (paced)", args.pace_us), paced);
    }
    println!("A durable ack costs at least the figure of the --log-sync mode in use.");
    Ok(())
}

/// Durable 4 KiB overwrites of already-written blocks (what zero-filled log space gives),
/// one at a time, both ways, then the fdatasync way paced; latencies in microseconds.
fn measure(path: &Path, ops: usize, pace_us: u64) -> Result<Measured, String> {
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
    let mut timed = |file: &File, sync: bool, ops: usize, pace: Duration| {
        let mut us = Vec::with_capacity(ops);
        for i in 0..ops {
            std::thread::sleep(pace);
            block.as_bytes_mut()[0] = i as u8;
            let at = (i as u64 * BLOCK as u64) % FILE_BYTES;
            let started = Instant::now();
            file.write_all_at(block.as_bytes(), at).map_err(|e| io("writing", e))?;
            if sync {
                file.sync_data().map_err(|e| io("fdatasync of", e))?;
            }
            us.push(started.elapsed().as_micros() as u64);
        }
        Ok::<_, String>(us)
    };
    let file = open(path, 0).map_err(|e| io("opening", e))?;
    let fdatasync = timed(&file, true, ops, Duration::ZERO)?;
    let paced = match pace_us {
        0 => None,
        _ => Some(timed(&file, true, ops.min(PACED_OPS_MAX), Duration::from_micros(pace_us))?),
    };
    let dsync_file = open(path, libc::O_DSYNC).map_err(|e| io("opening", e))?;
    let dsync = timed(&dsync_file, false, ops, Duration::ZERO)?;
    Ok((fdatasync, dsync, paced))
}

/// Latencies of the fdatasync mode, the dsync mode and the paced fdatasync mode.
type Measured = (Vec<u64>, Vec<u64>, Option<Vec<u64>>);

fn open(path: &Path, flags: libc::c_int) -> std::io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .custom_flags(libc::O_DIRECT | flags)
        .open(path)
}
