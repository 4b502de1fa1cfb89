//! `SimDisk`: an in-memory `Disk` with crash and fault injection, for tests and simulation.
//!
//! Single-threaded, deterministic for a given seed. Every operation yields to the executor a
//! seeded-random number of times, so the flusher and appenders interleave as on a real disk.
//! Timing faults: `stall_writes_after` (writes that never complete) and
//! `set_max_sync_delay` (each sync first sleeps a seeded random time on a glommio timer;
//! what runs meanwhile then depends on real time, so it is not replayed exactly).
//!
//! Crash model (`crash()`): each file keeps its durable image (as of its last completed
//! `sync`) and the list of writes since. On crash, each unsynced write is independently
//! lost, kept whole, or torn (a random number of its 512-byte sectors land, then one sector
//! lands partially); optionally random bits of the unsynced bytes that landed are flipped.
//! Segment creation/removal and checkpoints are durable when their call returns.
//! The handle that crashed is dead: every later operation through it fails with EIO, so
//! the old log instance poisons itself instead of writing into the new incarnation; or,
//! with `hang_after_crash`, never completes (the power is off: nothing the old incarnation
//! does afterwards fails loudly or becomes durable). `image()`/`from_image` carry a disk to
//! another thread (a new executor for the next incarnation).

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::io;
use std::rc::Rc;

use bytes::Bytes;

use crate::disk::{io_error, Disk, SegmentFile};
use crate::StorageError;

/// A tiny xorshift64* generator: deterministic, seedable, no dependency.
#[derive(Clone, Debug)]
pub struct XorShift(u64);

impl XorShift {
    pub fn new(seed: u64) -> XorShift {
        XorShift(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in `0..bound` (bound > 0).
    pub fn below(&mut self, bound: u64) -> u64 {
        self.next_u64() % bound
    }
    /// Uniform in `0..=max` (0 when max is 0, without drawing).
    pub fn up_to(&mut self, max: u64) -> u64 {
        if max == 0 {
            0
        } else {
            self.below(max + 1)
        }
    }
    pub fn chance(&mut self, numerator: u64, denominator: u64) -> bool {
        self.below(denominator) < numerator
    }
}

/// Seed for a randomized test: `SHARDLOG_SEED` if set, else `default`.
pub fn seed_from_env(default: u64) -> u64 {
    std::env::var("SHARDLOG_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(default)
}

const SECTOR: usize = 512;

#[derive(Clone, Default)]
struct SimFile {
    data: Vec<u8>,
    durable: Vec<u8>,
    unsynced: Vec<(usize, Vec<u8>)>,
}

#[derive(Clone, Default)]
struct Faults {
    fail_next_sync: bool,
    fail_next_write: bool,
    fail_next_create: bool,
    /// Every `create_segment` and `write_checkpoint` fails with ENOSPC while set.
    full: bool,
    flip_bits_on_crash: u32,
    tear_on_crash: bool,
    hang_after_crash: bool,
    /// Writes that may still start; later ones never complete (`stall_writes_after`).
    writes_before_stall: Option<u64>,
}

#[derive(Clone)]
struct SimState {
    files: BTreeMap<u64, SimFile>,
    checkpoints: BTreeMap<u64, Vec<u8>>,
    rng: XorShift,
    faults: Faults,
    max_yields: u64,
    /// Longest wall-clock delay of a `sync` (`set_max_sync_delay`), in microseconds.
    max_sync_delay_us: u64,
    syncs: u64,
    lazy_zero_fill: bool,
    zero_fills: u64,
    /// Unsynced writes lost whole and torn by crashes so far (this disk's earlier lives
    /// included).
    crash_lost_writes: u64,
    crash_torn_writes: u64,
}

/// A disk's whole state as plain data (`Send`, unlike `SimDisk`): files, checkpoints,
/// fault settings and the random generator's position.
pub struct SimImage(SimState);

/// In-memory disk; clones share the same files. See the module doc for the crash model.
#[derive(Clone)]
pub struct SimDisk {
    state: Rc<RefCell<SimState>>,
    alive: Rc<Cell<bool>>,
}

impl SimDisk {
    pub fn new(seed: u64) -> SimDisk {
        SimDisk {
            state: Rc::new(RefCell::new(SimState {
                files: BTreeMap::new(),
                checkpoints: BTreeMap::new(),
                rng: XorShift::new(seed),
                faults: Faults { tear_on_crash: true, ..Faults::default() },
                max_yields: 3,
                max_sync_delay_us: 0,
                syncs: 0,
                lazy_zero_fill: false,
                zero_fills: 0,
                crash_lost_writes: 0,
                crash_torn_writes: 0,
            })),
            alive: Rc::new(Cell::new(true)),
        }
    }

    /// Maximum number of executor yields per operation (0 = operations complete at once).
    pub fn set_max_yields(&self, n: u64) {
        self.state.borrow_mut().max_yields = n;
    }
    /// Each `sync` first sleeps a seeded random time up to `max` (a glommio timer; zero
    /// by default): a slow fdatasync keeps each flush in flight for real time, so more of
    /// what the shard does (appends gathering, checkpoints, topic changes, a power loss
    /// polled on a timer) happens meanwhile, as when a busy machine delays the executor.
    pub fn set_max_sync_delay(&self, max: std::time::Duration) {
        self.state.borrow_mut().max_sync_delay_us = max.as_micros() as u64;
    }
    /// Have the log zero-fill new segments in idle time, as with `DmaDisk` (default off).
    pub fn set_lazy_zero_fill(&self, lazy: bool) {
        self.state.borrow_mut().lazy_zero_fill = lazy;
    }
    /// The next `sync` fails with EIO.
    pub fn fail_next_sync(&self) {
        self.state.borrow_mut().faults.fail_next_sync = true;
    }
    /// The next `write_at` fails with EIO.
    pub fn fail_next_write(&self) {
        self.state.borrow_mut().faults.fail_next_write = true;
    }
    /// The next `create_segment` fails with ENOSPC.
    pub fn fail_next_create(&self) {
        self.state.borrow_mut().faults.fail_next_create = true;
    }
    /// The file system is full (true) or has space again (false): while full, creating a
    /// segment or writing a checkpoint fails with ENOSPC. Writes into existing segments
    /// still succeed (their blocks were reserved when they were created, as fallocate does).
    pub fn set_full(&self, full: bool) {
        self.state.borrow_mut().faults.full = full;
    }
    /// On the next crash, flip this many random bits in unsynced bytes that survive.
    pub fn flip_bits_on_crash(&self, bits: u32) {
        self.state.borrow_mut().faults.flip_bits_on_crash = bits;
    }
    /// Whether a crash tears unsynced writes (default true) or drops/keeps them whole.
    pub fn tear_on_crash(&self, tear: bool) {
        self.state.borrow_mut().faults.tear_on_crash = tear;
    }
    /// The next `writes` calls of `write_at` complete; every later one never does (a device
    /// that stops answering), so what they carry never lands, not even at a crash. Makes a
    /// flush stay in flight for as long as a test needs.
    pub fn stall_writes_after(&self, writes: u64) {
        self.state.borrow_mut().faults.writes_before_stall = Some(writes);
    }
    /// After `crash()`, operations through this handle never complete instead of failing.
    pub fn hang_after_crash(&self) {
        self.state.borrow_mut().faults.hang_after_crash = true;
    }
    /// A copy of this disk's state that can cross threads.
    pub fn image(&self) -> SimImage {
        SimImage(self.state.borrow().clone())
    }
    /// A live disk with the state of `image`.
    pub fn from_image(image: SimImage) -> SimDisk {
        SimDisk { state: Rc::new(RefCell::new(image.0)), alive: Rc::new(Cell::new(true)) }
    }
    /// Flips one bit of durable data (a latent media error).
    pub fn flip_durable_bit(&self, base: u64, offset: usize, bit: u8) {
        let mut state = self.state.borrow_mut();
        let file = state.files.get_mut(&base).expect("no such segment");
        file.data[offset] ^= 1 << bit;
        file.durable[offset] ^= 1 << bit;
    }
    /// Idle-time zero-fill calls so far.
    pub fn zero_fill_count(&self) -> u64 {
        self.state.borrow().zero_fills
    }
    /// Unsynced writes that crashes so far lost whole, and those they tore (some sectors
    /// landed, one partly), over this disk's lives.
    pub fn crash_counts(&self) -> (u64, u64) {
        let state = self.state.borrow();
        (state.crash_lost_writes, state.crash_torn_writes)
    }
    /// Completed syncs so far.
    pub fn sync_count(&self) -> u64 {
        self.state.borrow().syncs
    }
    /// Segment bases and their current bytes (for checkers).
    pub fn segment_bytes(&self, base: u64) -> Option<Vec<u8>> {
        self.state.borrow().files.get(&base).map(|f| f.data.clone())
    }
    pub fn remove_all_checkpoints(&self) {
        self.state.borrow_mut().checkpoints.clear();
    }
    pub fn checkpoint_count(&self) -> usize {
        self.state.borrow().checkpoints.len()
    }

    /// Installs a durable segment of `len` bytes at log position `base` that starts with
    /// `bytes` (zeros after them): a log image found on disk, for recovery fuzzing.
    pub fn put_segment(&self, base: u64, len: u64, bytes: &[u8]) {
        let mut data = vec![0u8; len as usize];
        let used = bytes.len().min(data.len());
        data[..used].copy_from_slice(&bytes[..used]);
        let file = SimFile { durable: data.clone(), data, unsynced: vec![] };
        self.state.borrow_mut().files.insert(base, file);
    }

    /// Power loss: returns the disk as a new incarnation would find it. This handle (and
    /// its clones) fail every later operation with EIO.
    pub fn crash(&self) -> SimDisk {
        self.alive.set(false);
        let mut state = self.state.borrow_mut();
        let state = &mut *state;
        let tear = state.faults.tear_on_crash;
        let mut flips = std::mem::take(&mut state.faults.flip_bits_on_crash);
        // The dead handle never reads its files again (every operation fails or hangs
        // before touching them), so it gives them up: an old incarnation that outlives the
        // crash (a task parked forever holds this handle) must not pin the disk's contents.
        let old_files = std::mem::take(&mut state.files);
        let checkpoints = std::mem::take(&mut state.checkpoints);
        let mut files = BTreeMap::new();
        for (&base, file) in &old_files {
            let mut image = file.durable.clone();
            for (offset, bytes) in &file.unsynced {
                let landed = match state.rng.below(if tear { 3 } else { 2 }) {
                    0 => {
                        state.crash_lost_writes += 1;
                        0
                    }
                    1 => bytes.len(),
                    _ => {
                        state.crash_torn_writes += 1;
                        let sectors = bytes.len().div_ceil(SECTOR) as u64;
                        let whole = state.rng.below(sectors) as usize * SECTOR;
                        whole + state.rng.below(SECTOR as u64) as usize
                    }
                };
                let landed = landed.min(bytes.len());
                let mut landed_bytes = bytes[..landed].to_vec();
                // Flip only a byte this write changed: a rewrite of identical bytes (the
                // recovered prefix of a page) cannot come back different from a torn write.
                if flips > 0 && landed > 0 {
                    for _ in 0..64 {
                        let i = state.rng.below(landed as u64) as usize;
                        if image[*offset + i] != landed_bytes[i] {
                            landed_bytes[i] ^= 1 << state.rng.below(8);
                            flips -= 1;
                            break;
                        }
                    }
                }
                image[*offset..*offset + landed].copy_from_slice(&landed_bytes);
            }
            files.insert(base, SimFile { data: image.clone(), durable: image, unsynced: vec![] });
        }
        let seed = state.rng.next_u64();
        let disk = SimDisk::new(seed);
        {
            let mut new_state = disk.state.borrow_mut();
            new_state.files = files;
            new_state.checkpoints = checkpoints;
            new_state.max_yields = state.max_yields;
            new_state.max_sync_delay_us = state.max_sync_delay_us;
            new_state.lazy_zero_fill = state.lazy_zero_fill;
            new_state.crash_lost_writes = state.crash_lost_writes;
            new_state.crash_torn_writes = state.crash_torn_writes;
        }
        disk
    }

    async fn op(&self) -> Result<(), StorageError> {
        let yields = {
            let mut state = self.state.borrow_mut();
            let max = state.max_yields;
            state.rng.up_to(max)
        };
        for _ in 0..yields {
            futures_lite::future::yield_now().await;
        }
        if self.alive.get() {
            Ok(())
        } else if self.state.borrow().faults.hang_after_crash {
            std::future::pending().await
        } else {
            Err(io_error("sim", io::Error::from_raw_os_error(5)))
        }
    }
}

fn missing(op: &'static str) -> StorageError {
    io_error(op, io::Error::from(io::ErrorKind::NotFound))
}

impl Disk for SimDisk {
    type Buffer = Vec<u8>;

    fn lazy_zero_fill(&self) -> bool {
        self.state.borrow().lazy_zero_fill
    }

    async fn zero_fill(&self, base: u64, offset: u64, len: u64) -> Result<(), StorageError> {
        self.state.borrow_mut().zero_fills += 1;
        self.write_at(base, offset, vec![0; len as usize]).await?;
        self.sync(base).await
    }

    fn alloc_buffer(&self, len: usize) -> Vec<u8> {
        vec![0xEE; len]
    }

    fn buffer_allocator(&self) -> Box<dyn Fn(usize) -> Vec<u8>> {
        // Garbage, not zeros: the batcher must zero every byte it writes but did not fill.
        Box::new(|len| vec![0xEE; len])
    }

    async fn list_segments(&self) -> Result<Vec<SegmentFile>, StorageError> {
        self.op().await?;
        let state = self.state.borrow();
        Ok(state
            .files
            .iter()
            .map(|(&base, f)| SegmentFile { base, len: f.data.len() as u64 })
            .collect())
    }

    async fn create_segment(&self, base: u64, len: u64) -> Result<(), StorageError> {
        self.op().await?;
        let mut state = self.state.borrow_mut();
        if std::mem::take(&mut state.faults.fail_next_create) || state.faults.full {
            return Err(io_error("create segment", io::Error::from_raw_os_error(28)));
        }
        let zeros = vec![0u8; len as usize];
        state.files.insert(base, SimFile { data: zeros.clone(), durable: zeros, unsynced: vec![] });
        Ok(())
    }

    async fn remove_segment(&self, base: u64) -> Result<(), StorageError> {
        self.op().await?;
        self.state.borrow_mut().files.remove(&base).map(|_| ()).ok_or(missing("remove segment"))
    }

    async fn write_at(&self, base: u64, offset: u64, buf: Vec<u8>) -> Result<(), StorageError> {
        assert!(
            offset.is_multiple_of(4096) && buf.len().is_multiple_of(4096),
            "unaligned O_DIRECT write"
        );
        let stalled = {
            let mut state = self.state.borrow_mut();
            let left = &mut state.faults.writes_before_stall;
            let stalled = *left == Some(0);
            *left = left.map(|n| n.saturating_sub(1));
            stalled
        };
        if stalled {
            std::future::pending::<()>().await;
        }
        self.op().await?;
        let mut state = self.state.borrow_mut();
        if std::mem::take(&mut state.faults.fail_next_write) {
            return Err(io_error("write segment", io::Error::from_raw_os_error(5)));
        }
        let file = state.files.get_mut(&base).ok_or(missing("write segment"))?;
        let offset = offset as usize;
        assert!(offset + buf.len() <= file.data.len(), "write past segment end");
        file.data[offset..offset + buf.len()].copy_from_slice(&buf);
        file.unsynced.push((offset, buf));
        Ok(())
    }

    async fn read_at(&self, base: u64, offset: u64, len: usize) -> Result<Bytes, StorageError> {
        assert!(offset.is_multiple_of(4096) && len.is_multiple_of(4096), "unaligned O_DIRECT read");
        self.op().await?;
        let state = self.state.borrow();
        let file = state.files.get(&base).ok_or(missing("read segment"))?;
        let start = (offset as usize).min(file.data.len());
        let end = (offset as usize + len).min(file.data.len());
        Ok(Bytes::copy_from_slice(&file.data[start..end]))
    }

    async fn sync(&self, base: u64) -> Result<(), StorageError> {
        let delay_us = {
            let mut state = self.state.borrow_mut();
            let max = state.max_sync_delay_us;
            state.rng.up_to(max)
        };
        if delay_us > 0 {
            glommio::timer::sleep(std::time::Duration::from_micros(delay_us)).await;
        }
        self.op().await?;
        let mut state = self.state.borrow_mut();
        if std::mem::take(&mut state.faults.fail_next_sync) {
            return Err(io_error("fdatasync segment", io::Error::from_raw_os_error(5)));
        }
        state.syncs += 1;
        let file = state.files.get_mut(&base).ok_or(missing("fdatasync segment"))?;
        for (offset, bytes) in std::mem::take(&mut file.unsynced) {
            file.durable[offset..offset + bytes.len()].copy_from_slice(&bytes);
        }
        Ok(())
    }

    async fn list_checkpoints(&self) -> Result<Vec<u64>, StorageError> {
        self.op().await?;
        Ok(self.state.borrow().checkpoints.keys().copied().collect())
    }

    async fn write_checkpoint(&self, position: u64, bytes: Vec<u8>) -> Result<(), StorageError> {
        self.op().await?;
        let mut state = self.state.borrow_mut();
        if state.faults.full {
            return Err(io_error("write checkpoint", io::Error::from_raw_os_error(28)));
        }
        state.checkpoints.insert(position, bytes);
        Ok(())
    }

    async fn read_checkpoint(&self, position: u64) -> Result<Vec<u8>, StorageError> {
        self.op().await?;
        self.state.borrow().checkpoints.get(&position).cloned().ok_or(missing("read checkpoint"))
    }

    async fn remove_checkpoint(&self, position: u64) -> Result<(), StorageError> {
        self.op().await?;
        self.state.borrow_mut().checkpoints.remove(&position);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An old incarnation parked forever on its dead handle (glommio leaks such tasks when
    /// their executor is dropped) must not keep the disk's contents alive: the handle that
    /// crashed gives up its files and checkpoints; the new one has them.
    #[test]
    fn a_crashed_handle_gives_up_its_files_and_checkpoints() {
        let disk = SimDisk::new(7);
        disk.put_segment(0, 8192, b"acknowledged");
        disk.state.borrow_mut().checkpoints.insert(0, vec![1; 16]);
        let old = disk.clone();
        let crashed = disk.crash();
        assert!(old.segment_bytes(0).is_none(), "the dead handle still holds a segment");
        assert_eq!(old.checkpoint_count(), 0, "the dead handle still holds checkpoints");
        assert_eq!(&crashed.segment_bytes(0).unwrap()[..12], b"acknowledged");
        assert_eq!(crashed.checkpoint_count(), 1);
    }
}
