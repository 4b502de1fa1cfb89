//! The one on-disk encoding of shard-level internal entries (topic table, committed
//! offsets, producer state): a version byte, then an rkyv archive, validated on read.

use rkyv::api::high::{HighDeserializer, HighSerializer, HighValidator};
use rkyv::bytecheck::CheckBytes;
use rkyv::rancor;
use rkyv::ser::allocator::ArenaHandle;
use rkyv::util::AlignedVec;

/// `version` followed by the rkyv archive of `value`.
pub fn encode_versioned<T>(version: u8, value: &T) -> Vec<u8>
where
    T: for<'a> rkyv::Serialize<HighSerializer<AlignedVec, ArenaHandle<'a>, rancor::Error>>,
{
    let archive = rkyv::to_bytes::<rancor::Error>(value).expect("internal entries serialize");
    let mut out = Vec::with_capacity(archive.len() + 1);
    out.push(version);
    out.extend_from_slice(&archive);
    out
}

/// Reads what [`encode_versioned`] wrote, refusing other versions and invalid archives.
pub fn decode_versioned<T>(version: u8, what: &str, bytes: &[u8]) -> Result<T, String>
where
    T: rkyv::Archive,
    T::Archived: for<'a> CheckBytes<HighValidator<'a, rancor::Error>>
        + rkyv::Deserialize<T, HighDeserializer<rancor::Error>>,
{
    let (&found, archive) = bytes.split_first().ok_or_else(|| format!("empty {what}"))?;
    if found != version {
        return Err(format!("{what} format version {found} is not supported"));
    }
    // rkyv needs an aligned buffer; the log hands out arbitrary alignment.
    let mut aligned = AlignedVec::<16>::with_capacity(archive.len());
    aligned.extend_from_slice(archive);
    rkyv::from_bytes::<T, rancor::Error>(&aligned).map_err(|e| format!("{what}: {e}"))
}
