//! Index checkpoints: the state of the log up to a durable position, so recovery replays
//! only what came after. Not a hot path (written by `ShardLog::checkpoint`).
//!
//! File format (version 2): `b"SLCKPT"`, version u8 (= 2), reserved u8, payload length
//! u64 LE, CRC-32C of the payload u32 LE, then the rkyv 0.8 archive of `CheckpointV2`.
//! Version 2 adds each partition's leader epochs (`epochs.rs`); a version 1 file (written
//! before batches were stamped with epochs, so its batches carry none) is read with none.
//! A checkpoint whose magic, version, length or CRC does not verify is ignored (recovery
//! falls back to an older one, or to the log alone).

use rkyv::{Archive, Deserialize, Serialize};

const MAGIC: &[u8; 6] = b"SLCKPT";
const VERSION: u8 = 2;
const VERSION_1: u8 = 1;
const PREFIX_BYTES: usize = 20;

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct BatchV1 {
    pub base_offset: i64,
    pub last_offset: i64,
    pub position: u64,
    pub len: u32,
    pub max_timestamp: i64,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct PartitionV1 {
    pub id: u64,
    pub log_start_offset: i64,
    pub next_offset: i64,
    pub batches: Vec<BatchV1>,
}

/// A partition of a version 2 checkpoint: version 1's, with its leader epochs.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct PartitionV2 {
    pub id: u64,
    pub log_start_offset: i64,
    pub next_offset: i64,
    pub batches: Vec<BatchV1>,
    /// (epoch, start offset), in order (`epochs` invariant 1).
    pub epochs: Vec<EpochV2>,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, Copy, PartialEq)]
pub struct EpochV2 {
    pub epoch: i32,
    pub start_offset: i64,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct InternalV1 {
    pub position: u64,
    pub stream: u8,
    pub snapshot: bool,
    pub payload: Vec<u8>,
}

/// A version 1 checkpoint, read only (converted to version 2 without epochs).
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct CheckpointV1 {
    /// Log position (page-aligned, durable) the checkpoint covers: replay starts here.
    pub position: u64,
    pub partitions: Vec<PartitionV1>,
    /// Live internal entries (per stream: since its latest snapshot), in log order.
    pub internal: Vec<InternalV1>,
    /// Written by a clean close: nothing was written to the log after `position`.
    pub clean: bool,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct CheckpointV2 {
    /// Log position (page-aligned, durable) the checkpoint covers: replay starts here.
    pub position: u64,
    pub partitions: Vec<PartitionV2>,
    /// Live internal entries (per stream: since its latest snapshot), in log order.
    pub internal: Vec<InternalV1>,
    /// Written by a clean close: nothing was written to the log after `position`.
    pub clean: bool,
}

impl From<CheckpointV1> for CheckpointV2 {
    fn from(v1: CheckpointV1) -> CheckpointV2 {
        let partitions = v1
            .partitions
            .into_iter()
            .map(|p| PartitionV2 {
                id: p.id,
                log_start_offset: p.log_start_offset,
                next_offset: p.next_offset,
                batches: p.batches,
                epochs: Vec::new(),
            })
            .collect();
        CheckpointV2 { position: v1.position, partitions, internal: v1.internal, clean: v1.clean }
    }
}

/// The file's bytes, partitions in id order (the checkpoint copy leaves them in map order so
/// that the sort runs here, off the shard's executor, with the encoding).
pub fn encode(mut checkpoint: CheckpointV2) -> Vec<u8> {
    checkpoint.partitions.sort_unstable_by_key(|p| p.id);
    let payload = rkyv::to_bytes::<rkyv::rancor::Error>(&checkpoint).expect("rkyv encode");
    let mut out = Vec::with_capacity(PREFIX_BYTES + payload.len());
    out.extend_from_slice(MAGIC);
    out.push(VERSION);
    out.push(0);
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(&crc32c::crc32c(&payload).to_le_bytes());
    out.extend_from_slice(&payload);
    out
}

pub fn decode(bytes: &[u8]) -> Result<CheckpointV2, String> {
    if bytes.len() < PREFIX_BYTES || &bytes[..6] != MAGIC {
        return Err("not a checkpoint".into());
    }
    if bytes[6] != VERSION && bytes[6] != VERSION_1 {
        return Err(format!("unknown checkpoint version {}", bytes[6]));
    }
    let len = u64::from_le_bytes(bytes[8..16].try_into().unwrap()) as usize;
    let crc = u32::from_le_bytes(bytes[16..20].try_into().unwrap());
    let payload = &bytes[PREFIX_BYTES..];
    if payload.len() != len {
        return Err(format!("checkpoint length {} != {len}", payload.len()));
    }
    if crc32c::crc32c(payload) != crc {
        return Err("checkpoint CRC mismatch".into());
    }
    // rkyv needs an aligned buffer for checked access.
    let mut aligned = rkyv::util::AlignedVec::<16>::with_capacity(len);
    aligned.extend_from_slice(payload);
    if bytes[6] == VERSION_1 {
        let v1 = rkyv::from_bytes::<CheckpointV1, rkyv::rancor::Error>(&aligned);
        return v1.map(CheckpointV2::from).map_err(|e| e.to_string());
    }
    let checkpoint = rkyv::from_bytes::<CheckpointV2, rkyv::rancor::Error>(&aligned)
        .map_err(|e| e.to_string())?;
    // Refused here rather than asserted at restore (`LeaderEpochs::from_entries`): a
    // checkpoint is read from disk, and a bad one is skipped, never a panic.
    for p in &checkpoint.partitions {
        let ordered = p
            .epochs
            .windows(2)
            .all(|w| w[0].epoch < w[1].epoch && w[0].start_offset < w[1].start_offset);
        if !ordered {
            return Err(format!("checkpoint: partition {}'s leader epochs out of order", p.id));
        }
    }
    Ok(checkpoint)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> CheckpointV2 {
        CheckpointV2 {
            position: 8192,
            partitions: vec![PartitionV2 {
                id: 3,
                log_start_offset: 0,
                next_offset: 2,
                batches: vec![BatchV1 {
                    base_offset: 0,
                    last_offset: 1,
                    position: 32,
                    len: 100,
                    max_timestamp: 5,
                }],
                epochs: vec![EpochV2 { epoch: 4, start_offset: 0 }],
            }],
            internal: vec![InternalV1 {
                position: 200,
                stream: 2,
                snapshot: true,
                payload: vec![1, 2],
            }],
            clean: true,
        }
    }

    #[test]
    fn a_checkpoint_round_trips() {
        assert_eq!(decode(&encode(sample())).unwrap(), sample());
    }

    /// The checkpoint copy leaves partitions in map order: the file holds them by id, the
    /// same bytes whatever order they came in (what was written before the sort moved).
    #[test]
    fn partitions_are_encoded_in_id_order_whatever_order_they_come_in() {
        let mut sorted = sample();
        sorted.partitions = (0..20)
            .map(|id| PartitionV2 {
                id,
                log_start_offset: 0,
                next_offset: id as i64,
                batches: vec![],
                epochs: vec![],
            })
            .collect();
        let mut shuffled = sorted.clone();
        shuffled.partitions.reverse();
        shuffled.partitions.swap(3, 11);
        let bytes = encode(shuffled);
        assert_eq!(decode(&bytes).unwrap(), sorted);
        assert_eq!(bytes, encode(sorted));
    }

    /// A checkpoint written before version 2 is read, its partitions without epochs (its
    /// broker stamped none), rather than refused: recovery would then replay a log whose
    /// older segments may be gone.
    #[test]
    fn a_checkpoint_with_leader_epochs_out_of_order_is_refused() {
        let mut checkpoint = sample();
        checkpoint.partitions[0].epochs =
            vec![EpochV2 { epoch: 4, start_offset: 10 }, EpochV2 { epoch: 3, start_offset: 20 }];
        let error = decode(&encode(checkpoint)).unwrap_err();
        assert!(error.contains("out of order"), "{error}");
    }

    #[test]
    fn a_version_1_checkpoint_is_read_without_epochs() {
        let v2 = sample();
        let p = &v2.partitions[0];
        let v1 = CheckpointV1 {
            position: v2.position,
            partitions: vec![PartitionV1 {
                id: p.id,
                log_start_offset: p.log_start_offset,
                next_offset: p.next_offset,
                batches: p.batches.clone(),
            }],
            internal: v2.internal.clone(),
            clean: v2.clean,
        };
        let payload = rkyv::to_bytes::<rkyv::rancor::Error>(&v1).unwrap();
        let mut bytes = MAGIC.to_vec();
        bytes.extend_from_slice(&[VERSION_1, 0]);
        bytes.extend_from_slice(&(payload.len() as u64).to_le_bytes());
        bytes.extend_from_slice(&crc32c::crc32c(&payload).to_le_bytes());
        bytes.extend_from_slice(&payload);
        let mut want = v2.clone();
        want.partitions[0].epochs.clear();
        assert_eq!(decode(&bytes).unwrap(), want);
    }

    #[test]
    fn a_damaged_checkpoint_is_refused() {
        let good = encode(sample());
        for at in [0, 6, 10, 17, good.len() - 1] {
            let mut bad = good.clone();
            bad[at] ^= 0x10;
            assert!(decode(&bad).is_err(), "flip at {at}");
        }
        assert!(decode(&good[..good.len() - 1]).is_err());
    }
}
