//! The disk behind a shard log: a small trait, and its glommio implementation `DmaDisk`.
//!
//! Runs on the shard's own executor. Segment files are named `NNNNNNNNNNNNNNNNNNNN.log`
//! (20-digit base log position); checkpoints `NNNNNNNNNNNNNNNNNNNN.ckpt` (the log position
//! they cover). Durability contract of each operation:
//! - `create_segment`: the file exists with `len` zero bytes written (no unwritten extents,
//!   so later fdatasyncs flush data, not metadata) and its name is durable (dir fsync).
//! - `write_at` + `sync`: data durable after `sync` returns Ok. A failed sync is never
//!   retried by the caller (the log becomes fatal).
//! - `remove_segment`, `write_checkpoint`, `remove_checkpoint`: durable on return
//!   (checkpoints: tmp file, fsync, rename, dir fsync).

use std::cell::RefCell;
use std::collections::HashMap;
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use bytes::Bytes;
use glommio::io::{DmaBuffer, DmaFile, OpenOptions};

use crate::StorageError;

/// A page-aligned buffer that a `Disk` can write.
pub trait IoBuffer: 'static {
    fn as_slice(&self) -> &[u8];
    fn as_mut_slice(&mut self) -> &mut [u8];
    /// Shrinks the buffer to `len` bytes (a multiple of the page size).
    fn truncate(&mut self, len: usize);
}

impl IoBuffer for DmaBuffer {
    fn as_slice(&self) -> &[u8] {
        self.as_bytes()
    }
    fn as_mut_slice(&mut self) -> &mut [u8] {
        self.as_bytes_mut()
    }
    fn truncate(&mut self, len: usize) {
        self.trim_to_size(len)
    }
}

impl IoBuffer for Vec<u8> {
    fn as_slice(&self) -> &[u8] {
        self
    }
    fn as_mut_slice(&mut self) -> &mut [u8] {
        self
    }
    fn truncate(&mut self, len: usize) {
        Vec::truncate(self, len)
    }
}

/// A segment file found on disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentFile {
    pub base: u64,
    pub len: u64,
}

pub(crate) fn io_error(op: &'static str, source: io::Error) -> StorageError {
    StorageError::Io { op, source }
}

/// The disk behind a shard log (glommio DmaFile in production, SimDisk in tests).
///
/// Offsets and lengths of `write_at`/`read_at` are multiples of 4096.
#[allow(async_fn_in_trait)]
pub trait Disk: 'static {
    type Buffer: IoBuffer;
    /// A buffer of `len` bytes (contents unspecified), 4096-aligned.
    fn alloc_buffer(&self, len: usize) -> Self::Buffer;
    /// The same allocation as a standalone function (owned by the batcher).
    fn buffer_allocator(&self) -> Box<dyn Fn(usize) -> Self::Buffer>;
    async fn list_segments(&self) -> Result<Vec<SegmentFile>, StorageError>;
    /// Creates a segment of `len` bytes that reads as zeros, durable (name and size) on
    /// return. If `lazy_zero_fill()`, its blocks may be unwritten extents (fallocate) that
    /// the log zero-fills in idle time through `zero_fill`.
    async fn create_segment(&self, base: u64, len: u64) -> Result<(), StorageError>;
    /// Whether new segments still need zeros written (see `create_segment`).
    fn lazy_zero_fill(&self) -> bool {
        false
    }
    /// Writes zeros over `[offset, offset + len)` of a segment and fdatasyncs it, so that
    /// later fdatasyncs of data there flush only data (no extent conversion).
    async fn zero_fill(&self, base: u64, offset: u64, len: u64) -> Result<(), StorageError> {
        let mut zeros = self.alloc_buffer(len as usize);
        zeros.as_mut_slice().fill(0);
        self.write_at(base, offset, zeros).await?;
        self.sync(base).await
    }
    async fn remove_segment(&self, base: u64) -> Result<(), StorageError>;
    async fn write_at(&self, base: u64, offset: u64, buf: Self::Buffer)
        -> Result<(), StorageError>;
    async fn read_at(&self, base: u64, offset: u64, len: usize) -> Result<Bytes, StorageError>;
    /// fdatasync of one segment file.
    async fn sync(&self, base: u64) -> Result<(), StorageError>;
    /// `write_at` as a blocking syscall on the calling thread, where the disk has one: no
    /// io_uring round trip, no wake-up of the executor by a completion (see
    /// `LogConfig::blocking_flush_max_bytes`). Same contract as `write_at`.
    async fn write_at_blocking(
        &self,
        base: u64,
        offset: u64,
        buf: Self::Buffer,
    ) -> Result<(), StorageError> {
        self.write_at(base, offset, buf).await
    }
    /// `sync` as a blocking syscall on the calling thread, where the disk has one: no
    /// hand-off to io_uring's worker thread and back. Same contract as `sync`.
    async fn sync_blocking(&self, base: u64) -> Result<(), StorageError> {
        self.sync(base).await
    }
    async fn list_checkpoints(&self) -> Result<Vec<u64>, StorageError>;
    async fn write_checkpoint(&self, position: u64, bytes: Vec<u8>) -> Result<(), StorageError>;
    async fn read_checkpoint(&self, position: u64) -> Result<Vec<u8>, StorageError>;
    async fn remove_checkpoint(&self, position: u64) -> Result<(), StorageError>;
}

/// O_DIRECT files in a directory, through glommio.
pub struct DmaDisk {
    pub dir: PathBuf,
    files: RefCell<HashMap<u64, Rc<DmaFile>>>,
    lazy_zero_fill: std::cell::Cell<bool>,
    /// Segments are opened O_DSYNC: each DMA write is durable when it completes, so
    /// `sync` has nothing left to do (see `set_dsync_writes`).
    dsync_writes: std::cell::Cell<bool>,
}

/// Name of the marker file read first (see `DmaDisk::open`).
pub const IOPOLL_PROBE_FILE: &str = "iopoll-probe.marker";

const ZERO_FILL_BYTES: usize = 1 << 20;

pub(crate) fn segment_name(base: u64) -> String {
    format!("{base:020}.log")
}

fn checkpoint_name(position: u64) -> String {
    format!("{position:020}.ckpt")
}

fn parse_name(name: &str, suffix: &str) -> Option<u64> {
    let stem = name.strip_suffix(suffix)?;
    if stem.len() != 20 {
        return None;
    }
    stem.parse().ok()
}

impl DmaDisk {
    /// Opens (creating) the directory; applies the IOPOLL-probe workaround from FIELD_NOTES.
    ///
    /// glommio probes a block device for polled IO by reading the first DmaFile opened on
    /// it (per thread). An empty file answers that probe "successfully", after which every
    /// read fails with EOPNOTSUPP and fdatasync costs ~4 ms. So the first DmaFile we open
    /// is a marker file that holds one written 4 KiB block.
    ///
    /// A relative `dir` is made absolute first: glommio 0.9 opens every file and
    /// directory with `openat(-1, path)` rather than `openat(AT_FDCWD, path)`, so a
    /// relative path fails with EBADF (os error 9) at the first open.
    pub async fn open(dir: PathBuf) -> Result<DmaDisk, StorageError> {
        let dir = std::path::absolute(&dir).map_err(|e| io_error("resolve log dir", e))?;
        std::fs::create_dir_all(&dir).map_err(|e| io_error("create log dir", e))?;
        let marker = dir.join(IOPOLL_PROBE_FILE);
        let needs_write = std::fs::metadata(&marker).map(|m| m.len() < 4096).unwrap_or(true);
        if needs_write {
            std::fs::write(&marker, vec![0xA5u8; 4096]).map_err(|e| io_error("write marker", e))?;
        }
        let probe = DmaFile::open(&marker).await.map_err(|e| io_error("open marker", e.into()))?;
        probe.close().await.map_err(|e| io_error("close marker", e.into()))?;
        for entry in std::fs::read_dir(&dir).map_err(|e| io_error("list log dir", e))? {
            let path = entry.map_err(|e| io_error("list log dir", e))?.path();
            if path.extension().is_some_and(|x| x == "tmp") {
                std::fs::remove_file(&path).map_err(|e| io_error("remove tmp file", e))?;
            }
        }
        Ok(DmaDisk {
            dir,
            files: RefCell::new(HashMap::new()),
            lazy_zero_fill: std::cell::Cell::new(true),
            dsync_writes: std::cell::Cell::new(false),
        })
    }

    /// True: segment files are opened with O_DSYNC, so a write is durable when it
    /// completes (one io_uring operation per flush instead of a write and an fdatasync,
    /// which io_uring runs on a worker thread), and `sync` returns at once. The contract
    /// of `Disk` is unchanged: after `write_at` then `sync`, the bytes are durable. Set
    /// before the first segment is opened (`--log-sync dsync`; docs/storage.md).
    pub fn set_dsync_writes(&self, dsync: bool) {
        assert!(self.files.borrow().is_empty(), "set_dsync_writes after a segment was opened");
        self.dsync_writes.set(dsync);
    }

    fn segment_flags(&self) -> libc::c_int {
        if self.dsync_writes.get() {
            libc::O_DSYNC
        } else {
            0
        }
    }

    /// Default (true): segments are created with fallocate only (blocks reserved, ENOSPC
    /// seen there) and the log writes zeros over them when it is idle. False: zeros are
    /// written at creation, before the segment can be used (docs/storage.md compares).
    pub fn set_lazy_zero_fill(&self, lazy: bool) {
        self.lazy_zero_fill.set(lazy);
    }

    async fn file(&self, base: u64) -> Result<Rc<DmaFile>, StorageError> {
        if let Some(file) = self.files.borrow().get(&base) {
            return Ok(file.clone());
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(self.segment_flags())
            .dma_open(self.dir.join(segment_name(base)))
            .await
            .map_err(|e| io_error("open segment", e.into()))?;
        let file = Rc::new(file);
        self.files.borrow_mut().insert(base, file.clone());
        Ok(file)
    }

    async fn sync_dir(&self) -> Result<(), StorageError> {
        let dir = glommio::io::Directory::open(&self.dir)
            .await
            .map_err(|e| io_error("open log dir", e.into()))?;
        dir.sync().await.map_err(|e| io_error("fsync log dir", e.into()))?;
        dir.close().await.map_err(|e| io_error("close log dir", e.into()))
    }

    fn list(&self, suffix: &str) -> Result<Vec<(u64, u64)>, StorageError> {
        let mut found = Vec::new();
        for entry in std::fs::read_dir(&self.dir).map_err(|e| io_error("list log dir", e))? {
            let entry = entry.map_err(|e| io_error("list log dir", e))?;
            let name = entry.file_name();
            if let Some(number) = name.to_str().and_then(|n| parse_name(n, suffix)) {
                let len = entry.metadata().map_err(|e| io_error("stat", e))?.len();
                found.push((number, len));
            }
        }
        found.sort_unstable();
        Ok(found)
    }
}

/// Writes `bytes` durably at `path` (tmp + fsync + rename + dir fsync), on a blocking thread.
fn write_file_durably(dir: &Path, path: PathBuf, bytes: Vec<u8>) -> io::Result<()> {
    use std::io::Write;
    let tmp = path.with_extension("tmp");
    let mut file = std::fs::File::create(&tmp)?;
    file.write_all(&bytes)?;
    file.sync_all()?;
    std::fs::rename(&tmp, &path)?;
    std::fs::File::open(dir)?.sync_all()
}

impl Disk for DmaDisk {
    type Buffer = DmaBuffer;

    fn alloc_buffer(&self, len: usize) -> DmaBuffer {
        // Heap-backed and 4096-aligned: long-lived buffers must not pin the executor's
        // small registered io_memory (RLIMIT_MEMLOCK is 8 MiB here).
        glommio::allocate_dma_buffer_global(len)
    }

    fn buffer_allocator(&self) -> Box<dyn Fn(usize) -> DmaBuffer> {
        Box::new(glommio::allocate_dma_buffer_global)
    }

    async fn list_segments(&self) -> Result<Vec<SegmentFile>, StorageError> {
        Ok(self.list(".log")?.into_iter().map(|(base, len)| SegmentFile { base, len }).collect())
    }

    async fn create_segment(&self, base: u64, len: u64) -> Result<(), StorageError> {
        let path = self.dir.join(segment_name(base));
        let tmp = path.with_extension("log.tmp");
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .custom_flags(self.segment_flags())
            .dma_open(&tmp)
            .await
            .map_err(|e| io_error("create segment", e.into()))?;
        // Zeros are written, so a full disk shows here (ENOSPC) and not on a log write, and
        // later fdatasyncs flush data only. fallocate alone would leave unwritten extents,
        // whose conversion makes each later fdatasync commit the journal (and extending
        // O_DIRECT writes measured faster here than writes into fallocate'd space).
        if self.lazy_zero_fill.get() {
            file.pre_allocate(len, false)
                .await
                .map_err(|e| io_error("fallocate segment", e.into()))?;
        }
        let mut at = 0u64;
        while !self.lazy_zero_fill.get() && at < len {
            let chunk = ZERO_FILL_BYTES.min((len - at) as usize);
            let mut buf = file.alloc_dma_buffer(chunk);
            buf.as_bytes_mut().fill(0);
            file.write_at(buf, at).await.map_err(|e| io_error("zero-fill segment", e.into()))?;
            at += chunk as u64;
        }
        file.fdatasync().await.map_err(|e| io_error("fsync new segment", e.into()))?;
        file.rename(&path).await.map_err(|e| io_error("rename segment", e.into()))?;
        self.sync_dir().await?;
        self.files.borrow_mut().insert(base, Rc::new(file));
        Ok(())
    }

    fn lazy_zero_fill(&self) -> bool {
        self.lazy_zero_fill.get()
    }

    async fn remove_segment(&self, base: u64) -> Result<(), StorageError> {
        let file = self.files.borrow_mut().remove(&base);
        drop(file);
        std::fs::remove_file(self.dir.join(segment_name(base)))
            .map_err(|e| io_error("remove segment", e))?;
        self.sync_dir().await
    }

    async fn write_at(&self, base: u64, offset: u64, buf: DmaBuffer) -> Result<(), StorageError> {
        let file = self.file(base).await?;
        let len = buf.len();
        let written =
            file.write_at(buf, offset).await.map_err(|e| io_error("write segment", e.into()))?;
        if written != len {
            return Err(io_error("write segment", io::Error::other("short O_DIRECT write")));
        }
        Ok(())
    }

    async fn write_at_blocking(
        &self,
        base: u64,
        offset: u64,
        buf: DmaBuffer,
    ) -> Result<(), StorageError> {
        let file = self.file(base).await?;
        let bytes = buf.as_bytes();
        // SAFETY: `bytes` is alive and `bytes.len()` long for the whole call; the
        // descriptor is the segment's, held open by `file`.
        let written = unsafe {
            libc::pwrite(file.as_raw_fd(), bytes.as_ptr().cast(), bytes.len(), offset as i64)
        };
        match written {
            n if n < 0 => Err(io_error("write segment", io::Error::last_os_error())),
            n if n as usize != bytes.len() => {
                Err(io_error("write segment", io::Error::other("short O_DIRECT write")))
            }
            _ => Ok(()),
        }
    }

    async fn sync_blocking(&self, base: u64) -> Result<(), StorageError> {
        if self.dsync_writes.get() {
            return Ok(()); // as in `sync`
        }
        let file = self.file(base).await?;
        // SAFETY: a plain syscall on the segment's descriptor, held open by `file`.
        match unsafe { libc::fdatasync(file.as_raw_fd()) } {
            0 => Ok(()),
            _ => Err(io_error("fdatasync segment", io::Error::last_os_error())),
        }
    }

    async fn read_at(&self, base: u64, offset: u64, len: usize) -> Result<Bytes, StorageError> {
        let file = self.file(base).await?;
        let read = file
            .read_at_aligned(offset, len)
            .await
            .map_err(|e| io_error("read segment", e.into()))?;
        Ok(Bytes::copy_from_slice(&read))
    }

    async fn sync(&self, base: u64) -> Result<(), StorageError> {
        if self.dsync_writes.get() {
            // Every write to this segment went through an O_DSYNC descriptor and was
            // durable when it completed; the segment's size and name were made durable
            // when it was created (create_segment's own fdatasync and directory fsync).
            return Ok(());
        }
        let file = self.file(base).await?;
        file.fdatasync().await.map_err(|e| io_error("fdatasync segment", e.into()))
    }

    async fn list_checkpoints(&self) -> Result<Vec<u64>, StorageError> {
        Ok(self.list(".ckpt")?.into_iter().map(|(position, _)| position).collect())
    }

    async fn write_checkpoint(&self, position: u64, bytes: Vec<u8>) -> Result<(), StorageError> {
        let dir = self.dir.clone();
        let path = dir.join(checkpoint_name(position));
        glommio::executor()
            .spawn_blocking(move || write_file_durably(&dir, path, bytes))
            .await
            .map_err(|e| io_error("write checkpoint", e))
    }

    async fn read_checkpoint(&self, position: u64) -> Result<Vec<u8>, StorageError> {
        let path = self.dir.join(checkpoint_name(position));
        glommio::executor()
            .spawn_blocking(move || std::fs::read(path))
            .await
            .map_err(|e| io_error("read checkpoint", e))
    }

    async fn remove_checkpoint(&self, position: u64) -> Result<(), StorageError> {
        std::fs::remove_file(self.dir.join(checkpoint_name(position)))
            .map_err(|e| io_error("remove checkpoint", e))
    }
}
