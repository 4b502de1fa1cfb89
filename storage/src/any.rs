//! `AnyDisk`: the O_DIRECT disk or the simulated one, behind one type.
//!
//! The shards hold a `ShardLog<AnyDisk>`, so the broker runs over `DmaDisk` and the
//! broker-level power-loss simulation (shards/tests/power_loss.rs) runs the very same shard
//! code over `SimDisk`, without making every shard type generic. The cost is one enum
//! match per disk operation and per buffer access (measured against bare `DmaDisk` with
//! `storage-bench --disk dma`, docs/reliability.md).
//!
//! Runs on one shard; the durability contract is that of the disk inside (`disk.rs`,
//! `sim.rs`). Invariant: a buffer is only ever written to the kind of disk that allocated
//! it (asserted in `write_at`).

use bytes::Bytes;
use glommio::io::DmaBuffer;

use crate::disk::{Disk, DmaDisk, IoBuffer, SegmentFile};
use crate::sim::SimDisk;
use crate::StorageError;

/// The disk behind a shard's log: real or simulated.
pub enum AnyDisk {
    Dma(DmaDisk),
    Sim(SimDisk),
}

/// A buffer of an `AnyDisk`: the DMA buffer of a `DmaDisk` or the `Vec` of a `SimDisk`.
pub enum AnyBuffer {
    Dma(DmaBuffer),
    Sim(Vec<u8>),
}

impl From<DmaDisk> for AnyDisk {
    fn from(disk: DmaDisk) -> AnyDisk {
        AnyDisk::Dma(disk)
    }
}

impl From<SimDisk> for AnyDisk {
    fn from(disk: SimDisk) -> AnyDisk {
        AnyDisk::Sim(disk)
    }
}

impl IoBuffer for AnyBuffer {
    fn as_slice(&self) -> &[u8] {
        match self {
            AnyBuffer::Dma(buf) => buf.as_slice(),
            AnyBuffer::Sim(buf) => buf.as_slice(),
        }
    }
    fn as_mut_slice(&mut self) -> &mut [u8] {
        match self {
            AnyBuffer::Dma(buf) => buf.as_mut_slice(),
            AnyBuffer::Sim(buf) => buf.as_mut_slice(),
        }
    }
    fn truncate(&mut self, len: usize) {
        match self {
            AnyBuffer::Dma(buf) => IoBuffer::truncate(buf, len),
            AnyBuffer::Sim(buf) => IoBuffer::truncate(buf, len),
        }
    }
}

impl Disk for AnyDisk {
    type Buffer = AnyBuffer;

    fn alloc_buffer(&self, len: usize) -> AnyBuffer {
        match self {
            AnyDisk::Dma(disk) => AnyBuffer::Dma(disk.alloc_buffer(len)),
            AnyDisk::Sim(disk) => AnyBuffer::Sim(disk.alloc_buffer(len)),
        }
    }

    fn buffer_allocator(&self) -> Box<dyn Fn(usize) -> AnyBuffer> {
        match self {
            AnyDisk::Dma(disk) => {
                let alloc = disk.buffer_allocator();
                Box::new(move |len| AnyBuffer::Dma(alloc(len)))
            }
            AnyDisk::Sim(disk) => {
                let alloc = disk.buffer_allocator();
                Box::new(move |len| AnyBuffer::Sim(alloc(len)))
            }
        }
    }

    async fn list_segments(&self) -> Result<Vec<SegmentFile>, StorageError> {
        match self {
            AnyDisk::Dma(disk) => disk.list_segments().await,
            AnyDisk::Sim(disk) => disk.list_segments().await,
        }
    }

    async fn create_segment(&self, base: u64, len: u64) -> Result<(), StorageError> {
        match self {
            AnyDisk::Dma(disk) => disk.create_segment(base, len).await,
            AnyDisk::Sim(disk) => disk.create_segment(base, len).await,
        }
    }

    fn lazy_zero_fill(&self) -> bool {
        match self {
            AnyDisk::Dma(disk) => disk.lazy_zero_fill(),
            AnyDisk::Sim(disk) => disk.lazy_zero_fill(),
        }
    }

    async fn zero_fill(&self, base: u64, offset: u64, len: u64) -> Result<(), StorageError> {
        match self {
            AnyDisk::Dma(disk) => disk.zero_fill(base, offset, len).await,
            AnyDisk::Sim(disk) => disk.zero_fill(base, offset, len).await,
        }
    }

    async fn remove_segment(&self, base: u64) -> Result<(), StorageError> {
        match self {
            AnyDisk::Dma(disk) => disk.remove_segment(base).await,
            AnyDisk::Sim(disk) => disk.remove_segment(base).await,
        }
    }

    async fn write_at(&self, base: u64, offset: u64, buf: AnyBuffer) -> Result<(), StorageError> {
        match (self, buf) {
            (AnyDisk::Dma(disk), AnyBuffer::Dma(buf)) => disk.write_at(base, offset, buf).await,
            (AnyDisk::Sim(disk), AnyBuffer::Sim(buf)) => disk.write_at(base, offset, buf).await,
            _ => panic!("a buffer written to a disk of another kind than the one that made it"),
        }
    }

    async fn write_at_blocking(
        &self,
        base: u64,
        offset: u64,
        buf: AnyBuffer,
    ) -> Result<(), StorageError> {
        match (self, buf) {
            (AnyDisk::Dma(disk), AnyBuffer::Dma(buf)) => {
                disk.write_at_blocking(base, offset, buf).await
            }
            (AnyDisk::Sim(disk), AnyBuffer::Sim(buf)) => {
                disk.write_at_blocking(base, offset, buf).await
            }
            _ => panic!("a buffer written to a disk of another kind than the one that made it"),
        }
    }

    async fn sync_blocking(&self, base: u64) -> Result<(), StorageError> {
        match self {
            AnyDisk::Dma(disk) => disk.sync_blocking(base).await,
            AnyDisk::Sim(disk) => disk.sync_blocking(base).await,
        }
    }

    async fn read_at(&self, base: u64, offset: u64, len: usize) -> Result<Bytes, StorageError> {
        match self {
            AnyDisk::Dma(disk) => disk.read_at(base, offset, len).await,
            AnyDisk::Sim(disk) => disk.read_at(base, offset, len).await,
        }
    }

    async fn sync(&self, base: u64) -> Result<(), StorageError> {
        match self {
            AnyDisk::Dma(disk) => disk.sync(base).await,
            AnyDisk::Sim(disk) => disk.sync(base).await,
        }
    }

    async fn list_checkpoints(&self) -> Result<Vec<u64>, StorageError> {
        match self {
            AnyDisk::Dma(disk) => disk.list_checkpoints().await,
            AnyDisk::Sim(disk) => disk.list_checkpoints().await,
        }
    }

    async fn write_checkpoint(&self, position: u64, bytes: Vec<u8>) -> Result<(), StorageError> {
        match self {
            AnyDisk::Dma(disk) => disk.write_checkpoint(position, bytes).await,
            AnyDisk::Sim(disk) => disk.write_checkpoint(position, bytes).await,
        }
    }

    async fn read_checkpoint(&self, position: u64) -> Result<Vec<u8>, StorageError> {
        match self {
            AnyDisk::Dma(disk) => disk.read_checkpoint(position).await,
            AnyDisk::Sim(disk) => disk.read_checkpoint(position).await,
        }
    }

    async fn remove_checkpoint(&self, position: u64) -> Result<(), StorageError> {
        match self {
            AnyDisk::Dma(disk) => disk.remove_checkpoint(position).await,
            AnyDisk::Sim(disk) => disk.remove_checkpoint(position).await,
        }
    }
}
