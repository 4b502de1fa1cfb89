//! storage-bench: the storage engine's figures beside the raw disk, in one run on one dir.
//!
//! Usage: storage-bench [--dir PATH] [--recovery-bytes N] [--throughput-bytes N]
//!                      [--disk any|dma]
//!
//! Measures, in this order, on the same filesystem:
//! 1. raw O_DIRECT 4 KiB write + fdatasync, one at a time: overwrite of written blocks,
//!    append that extends the file, write into fallocate'd (unwritten) blocks;
//! 2. raw sequential O_DIRECT bandwidth, 1 MiB writes: queue depth 1 and 4 into a new
//!    file, queue depth 4 into fallocate'd space (the throughput ratio uses the best);
//! 3. ShardLog: one 1 KiB append -> durable at a time (p50/p99);
//! 4. ShardLog: sustained throughput, 1 KiB records in 16 KiB batches, 1/100/10,000
//!    partitions, from a producer task in a latency-sensitive task queue (as a shard's
//!    network tasks would be) with a 64 MiB window of unacknowledged appends;
//! 5. ShardLog: recovery time of a log of --recovery-bytes, with and without checkpoint.
//!
//! The log runs over `AnyDisk::Dma`, as the broker's shards hold it; `--disk dma` runs it
//! over bare `DmaDisk` instead, to show what the enum dispatch costs.
//!
//! Prints a table for humans and `BENCH key=value` lines for machines.

use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use glommio::io::{DmaFile, OpenOptions};
use hdrhistogram::Histogram;
use shardlog_storage::*;

struct Args {
    dir: Option<PathBuf>,
    recovery_bytes: u64,
    throughput_bytes: u64,
    latency_ops: u64,
    /// Run the log over bare `DmaDisk` rather than `AnyDisk` (what the broker uses).
    bare_dma: bool,
}

fn parse_args() -> Args {
    let mut args = Args {
        dir: None,
        recovery_bytes: 1 << 30,
        throughput_bytes: 1 << 30,
        latency_ops: 3000,
        bare_dma: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--dir" => args.dir = Some(PathBuf::from(value())),
            "--recovery-bytes" => args.recovery_bytes = value().parse().expect("bytes"),
            "--throughput-bytes" => args.throughput_bytes = value().parse().expect("bytes"),
            "--latency-ops" => args.latency_ops = value().parse().expect("count"),
            "--disk" => match value().as_str() {
                "any" => args.bare_dma = false,
                "dma" => args.bare_dma = true,
                other => panic!("--disk is any or dma, not {other}"),
            },
            other => panic!("unknown flag {other}"),
        }
    }
    args
}

fn report(name: &str, value: f64, unit: &str) {
    println!("{name:<58} {value:>12.1} {unit}");
    println!("BENCH {name}={value:.1} unit={unit}");
}

fn us(h: &Histogram<u64>, q: f64) -> f64 {
    h.value_at_quantile(q) as f64 / 1000.0
}

fn report_latency(name: &str, h: &Histogram<u64>) {
    report(&format!("{name}.p50_us"), us(h, 0.5), "us");
    report(&format!("{name}.p99_us"), us(h, 0.99), "us");
}

async fn open_rw(path: &Path) -> DmaFile {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .dma_open(path)
        .await
        .unwrap()
}

async fn write_page(file: &DmaFile, position: u64) {
    let mut buf = file.alloc_dma_buffer(4096);
    buf.as_bytes_mut().fill(0x5A);
    file.write_at(buf, position).await.unwrap();
}

/// 4 KiB O_DIRECT write + fdatasync, one at a time, in three kinds of file block.
async fn raw_latency(dir: &Path, ops: u64) -> Histogram<u64> {
    let path = dir.join("raw-latency.dat");
    let span = 256u64;
    // Overwrite of blocks written once before (what a preallocated segment gives).
    let file = open_rw(&path).await;
    for i in 0..span {
        write_page(&file, i * 4096).await;
    }
    file.fdatasync().await.unwrap();
    let mut overwrite = Histogram::<u64>::new(3).unwrap();
    for i in 0..ops {
        let start = Instant::now();
        write_page(&file, (i % span) * 4096).await;
        file.fdatasync().await.unwrap();
        overwrite.record(start.elapsed().as_nanos() as u64).unwrap();
    }
    file.close().await.unwrap();
    // Append that extends the file (size and block allocation change every time).
    let file = open_rw(&path).await;
    let mut extend = Histogram::<u64>::new(3).unwrap();
    for i in 0..ops {
        let start = Instant::now();
        write_page(&file, i * 4096).await;
        file.fdatasync().await.unwrap();
        extend.record(start.elapsed().as_nanos() as u64).unwrap();
    }
    file.close().await.unwrap();
    // fallocate'd but never written (unwritten extents converted on each write).
    let file = open_rw(&path).await;
    file.pre_allocate(ops * 4096, false).await.unwrap();
    file.fdatasync().await.unwrap();
    let mut unwritten = Histogram::<u64>::new(3).unwrap();
    for i in 0..ops {
        let start = Instant::now();
        write_page(&file, i * 4096).await;
        file.fdatasync().await.unwrap();
        unwritten.record(start.elapsed().as_nanos() as u64).unwrap();
    }
    file.close().await.unwrap();
    std::fs::remove_file(&path).unwrap();
    report_latency("raw.extend_4k_fdatasync", &extend);
    report_latency("raw.fallocated_4k_fdatasync", &unwritten);
    report_latency("raw.overwrite_4k_fdatasync", &overwrite);
    overwrite
}

/// Sequential 1 MiB O_DIRECT writes into a new file, `depth` in flight, then fdatasync.
async fn raw_bandwidth(dir: &Path, bytes: u64, depth: usize, fallocate: bool) -> f64 {
    let path = dir.join("raw-bandwidth.dat");
    let file = Rc::new(open_rw(&path).await);
    if fallocate {
        file.pre_allocate(bytes, false).await.unwrap();
        file.fdatasync().await.unwrap();
    }
    let chunk = 1u64 << 20;
    let start = Instant::now();
    let mut next = 0u64;
    let mut in_flight = std::collections::VecDeque::new();
    while next < bytes || !in_flight.is_empty() {
        while next < bytes && in_flight.len() < depth {
            let file = file.clone();
            let position = next;
            in_flight.push_back(glommio::spawn_local(async move {
                let mut buf = file.alloc_dma_buffer(chunk as usize);
                buf.as_bytes_mut().fill(0x33);
                file.write_at(buf, position).await.unwrap();
            }));
            next += chunk;
        }
        in_flight.pop_front().unwrap().await;
    }
    file.fdatasync().await.unwrap();
    let seconds = start.elapsed().as_secs_f64();
    Rc::try_unwrap(file).ok().unwrap().close().await.unwrap();
    std::fs::remove_file(&path).unwrap();
    bytes as f64 / seconds / 1e6
}

/// A 16 KiB batch of 1 KiB records (16 records of 1000 bytes + framing).
fn record_batch(records: usize, value_bytes: usize) -> Bytes {
    fn varint(out: &mut Vec<u8>, v: i64) {
        let mut raw = ((v << 1) ^ (v >> 63)) as u64;
        while raw >= 0x80 {
            out.push((raw as u8 & 0x7f) | 0x80);
            raw >>= 7;
        }
        out.push(raw as u8);
    }
    let mut body_all = Vec::new();
    for i in 0..records {
        let mut body = vec![0u8];
        varint(&mut body, 0);
        varint(&mut body, i as i64);
        varint(&mut body, -1);
        varint(&mut body, value_bytes as i64);
        body.extend(std::iter::repeat_n(0x61u8 + (i % 26) as u8, value_bytes));
        varint(&mut body, 0);
        varint(&mut body_all, body.len() as i64);
        body_all.extend_from_slice(&body);
    }
    let mut b = Vec::new();
    b.extend_from_slice(&0i64.to_be_bytes());
    b.extend_from_slice(&((49 + body_all.len()) as i32).to_be_bytes());
    b.extend_from_slice(&0i32.to_be_bytes());
    b.push(2);
    b.extend_from_slice(&[0; 4]);
    b.extend_from_slice(&0i16.to_be_bytes());
    b.extend_from_slice(&(records as i32 - 1).to_be_bytes());
    b.extend_from_slice(&1_700_000_000_000i64.to_be_bytes());
    b.extend_from_slice(&1_700_000_000_000i64.to_be_bytes());
    b.extend_from_slice(&(-1i64).to_be_bytes());
    b.extend_from_slice(&(-1i16).to_be_bytes());
    b.extend_from_slice(&(-1i32).to_be_bytes());
    b.extend_from_slice(&(records as i32).to_be_bytes());
    b.extend_from_slice(&body_all);
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    Bytes::from(b)
}

/// `AnyDisk::Dma` (the broker's) or the bare `DmaDisk` itself.
type Wrap<D> = fn(DmaDisk) -> D;

async fn open_log<D: Disk>(dir: &Path, wrap: Wrap<D>) -> ShardLog<D> {
    let disk = DmaDisk::open(dir.to_path_buf()).await.unwrap();
    let (log, _, _) = ShardLog::open(wrap(disk), LogConfig::default()).await.unwrap();
    // Let the first spare segment be prepared before measuring.
    glommio::timer::sleep(Duration::from_millis(300)).await;
    log
}

async fn log_latency<D: Disk>(dir: &Path, ops: u64, wrap: Wrap<D>) -> Histogram<u64> {
    let log = open_log(dir, wrap).await;
    let p = PartitionId::new(1, 0);
    log.ensure_partition(p);
    let batch = split_batches(&record_batch(1, 1024 - 80)).unwrap();
    let mut h = Histogram::<u64>::new(3).unwrap();
    for i in 0..ops + 200 {
        let start = Instant::now();
        log.append_batches(p, &batch).unwrap().durable.wait().await.unwrap();
        if i >= 200 {
            h.record(start.elapsed().as_nanos() as u64).unwrap();
        }
    }
    log.close().await.unwrap();
    report_latency("log.append_1k_durable", &h);
    h
}

/// Appends `bytes` of 16 KiB batches round-robin over `partitions`, keeping a bounded
/// window of unacknowledged appends; returns MB/s of batch bytes made durable.
async fn log_throughput<D: Disk>(dir: &Path, partitions: u64, bytes: u64, wrap: Wrap<D>) -> f64 {
    let log = open_log(dir, wrap).await;
    for p in 0..partitions {
        log.ensure_partition(PartitionId(p));
    }
    let batch = split_batches(&record_batch(16, 1000)).unwrap();
    let batch_bytes = batch[0].1.len() as u64;
    let count = bytes / batch_bytes;
    let window = (64u64 << 20) / batch_bytes;
    let mut pending = std::collections::VecDeque::new();
    let start = Instant::now();
    for i in 0..count {
        let appended = log.append_batches(PartitionId(i % partitions), &batch).unwrap();
        pending.push_back(appended.durable);
        // A sliding window of 64 MiB in flight (like a producer's in-flight limit): wait
        // for the oldest append only, so appends keep gathering while flushes run.
        while pending.len() as u64 >= window {
            pending.pop_front().unwrap().wait().await.unwrap();
        }
        // Like a shard's network tasks, the producer yields when the scheduler asks
        // (its queue is latency-sensitive, so that is every ~1 ms): completions are reaped
        // and the flusher issues its next write while appends continue.
        if i % 16 == 0 {
            glommio::yield_if_needed().await;
        }
    }
    for durable in pending {
        durable.wait().await.unwrap();
    }
    let seconds = start.elapsed().as_secs_f64();
    let probes = log.probes();
    println!(
        "# {partitions} partitions: {} flushes, {:.1} MiB/flush, write {:.0} ms, fdatasync {:.0} ms, waiting for a prepared segment {:.0} ms, wall {:.0} ms",
        probes.flushes,
        probes.flushed_bytes as f64 / probes.flushes.max(1) as f64 / 1048576.0,
        probes.flush_write_us as f64 / 1e3,
        probes.flush_sync_us as f64 / 1e3,
        probes.segment_wait_us as f64 / 1e3,
        seconds * 1e3
    );
    log.close().await.unwrap();
    count as f64 * batch_bytes as f64 / seconds / 1e6
}

async fn recovery<D: Disk>(dir: &Path, bytes: u64, wrap: Wrap<D>) -> (f64, f64) {
    {
        let log = open_log(dir, wrap).await;
        let batch = split_batches(&record_batch(16, 1000)).unwrap();
        let count = bytes / batch[0].1.len() as u64;
        for p in 0..100 {
            log.ensure_partition(PartitionId(p));
        }
        let mut last = None;
        for i in 0..count {
            last = Some(log.append_batches(PartitionId(i % 100), &batch).unwrap().durable);
            if i % 4096 == 0 {
                last.take().unwrap().wait().await.unwrap();
            }
        }
        if let Some(last) = last {
            last.wait().await.unwrap();
        }
        log.close().await.unwrap();
    }
    let timed_open = || async {
        let start = Instant::now();
        let disk = DmaDisk::open(dir.to_path_buf()).await.unwrap();
        let (log, _, report) = ShardLog::open(wrap(disk), LogConfig::default()).await.unwrap();
        let seconds = start.elapsed().as_secs_f64();
        log.close().await.unwrap();
        (seconds, report)
    };
    let (with_checkpoint, report) = timed_open().await;
    assert!(report.checkpoint_position.is_some());
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|x| x == "ckpt") {
            std::fs::remove_file(path).unwrap();
        }
    }
    let (without, report) = timed_open().await;
    assert!(report.checkpoint_position.is_none());
    println!(
        "# recovery without checkpoint replayed {} entries, {} bytes",
        report.replayed_entries, report.replayed_bytes
    );
    (with_checkpoint * 1e3, without * 1e3)
}

fn fresh_dir(root: &Path, name: &str) -> PathBuf {
    let dir = root.join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

async fn main_async(args: Args, root: PathBuf) {
    // The IOPOLL probe workaround must run before any raw DmaFile is opened (FIELD_NOTES).
    let raw_dir = fresh_dir(&root, "raw");
    DmaDisk::open(raw_dir.clone()).await.unwrap();
    let raw = raw_latency(&raw_dir, args.latency_ops).await;
    let bw_qd1 = raw_bandwidth(&raw_dir, 1 << 30, 1, false).await;
    report("raw.seq_write_1m_qd1_mb_s", bw_qd1, "MB/s");
    let bw_qd4 = raw_bandwidth(&raw_dir, 1 << 30, 4, false).await;
    report("raw.seq_write_1m_qd4_mb_s", bw_qd4, "MB/s");
    let bw_fallocated = raw_bandwidth(&raw_dir, 1 << 30, 4, true).await;
    report("raw.seq_write_1m_qd4_into_fallocated_mb_s", bw_fallocated, "MB/s");
    // The strictest reference: the best raw sequential figure of this run.
    let raw_bw = bw_qd1.max(bw_qd4).max(bw_fallocated);

    let (log, throughput) = if args.bare_dma {
        println!("# the log runs over bare DmaDisk (--disk dma)");
        log_benches(&args, &root, |disk| disk).await
    } else {
        println!("# the log runs over AnyDisk::Dma, as in the broker");
        log_benches(&args, &root, AnyDisk::Dma).await
    };
    println!();
    let p50_ratio = us(&log, 0.5) / us(&raw, 0.5);
    report("ratio.append_p50_over_raw_overwrite_p50", p50_ratio, "x (target <= 1.5)");
    report(
        "ratio.throughput_1_partition_over_raw_bw",
        throughput[0] / raw_bw * 100.0,
        "% (target >= 60)",
    );
    report(
        "ratio.throughput_10000_over_1_partition",
        throughput[2] / throughput[0] * 100.0,
        "% (target >= 80)",
    );
}

/// The log's figures (3-5 above): append latency, throughput per partition count, recovery.
async fn log_benches<D: Disk>(
    args: &Args,
    root: &Path,
    wrap: Wrap<D>,
) -> (Histogram<u64>, Vec<f64>) {
    let log = log_latency(&fresh_dir(root, "latency"), args.latency_ops, wrap).await;
    let mut throughput = Vec::new();
    for partitions in [1u64, 100, 10_000] {
        let dir = fresh_dir(root, &format!("throughput-{partitions}"));
        let queue = glommio::executor().create_task_queue(
            glommio::Shares::default(),
            glommio::Latency::Matters(Duration::from_millis(1)),
            "producer",
        );
        let bytes = args.throughput_bytes;
        let producer_dir = dir.clone();
        let mb_s = glommio::spawn_local_into(
            async move { log_throughput(&producer_dir, partitions, bytes, wrap).await },
            queue,
        )
        .unwrap()
        .await;
        report(&format!("log.throughput_16k_batches_{partitions}_partitions_mb_s"), mb_s, "MB/s");
        throughput.push(mb_s);
        std::fs::remove_dir_all(&dir).unwrap();
    }
    let dir = fresh_dir(root, "recovery");
    let (with_ckpt, without) = recovery(&dir, args.recovery_bytes, wrap).await;
    report("log.recovery_with_checkpoint_ms", with_ckpt, "ms");
    report("log.recovery_without_checkpoint_ms", without, "ms");
    std::fs::remove_dir_all(&dir).unwrap();
    (log, throughput)
}

fn main() {
    let args = parse_args();
    let (root, _guard) = match &args.dir {
        Some(dir) => (dir.clone(), None),
        None => {
            let tmp = tempfile::tempdir_in(".").unwrap();
            (tmp.path().to_path_buf(), Some(tmp))
        }
    };
    std::fs::create_dir_all(&root).unwrap();
    println!("# storage-bench on {}", root.display());
    glommio::LocalExecutorBuilder::default()
        .spawn(move || main_async(args, root))
        .unwrap()
        .join()
        .unwrap();
}
