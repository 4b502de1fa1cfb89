//! A broker whose data dir is on a small real file system (a loop-mounted ext4 image)
//! that fills up: produce gets KAFKA_STORAGE_ERROR, nothing acknowledged is lost, reads
//! keep being served, and writes resume when space returns.
//!
//! Needs root and a loop device (`mount -o loop`); where that is not available the test
//! prints why and skips (it cannot pass there, it says SKIPPED).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use common::{create_topic, fetch_request, produce_request, record_batch, Broker, RawClient};
use kafka_protocol::messages::{ApiKey, ResponseKind};

const TOPIC: &str = "filling";
const KAFKA_STORAGE_ERROR: i16 = 56;
/// Space taken before the broker starts, handed back to show that writes resume.
const BALLAST_BYTES: usize = 12 << 20;

/// A loop-mounted ext4 image; unmounted when dropped.
struct SmallFileSystem {
    _dir: tempfile::TempDir,
    mount_point: PathBuf,
}

impl SmallFileSystem {
    /// Mounts a fresh ext4 image of `megabytes`, or says why it cannot.
    fn mount(megabytes: u32) -> Result<SmallFileSystem, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let image = dir.path().join("fs.img");
        let mount_point = dir.path().join("mnt");
        std::fs::create_dir(&mount_point).map_err(|e| e.to_string())?;
        run("truncate", &["-s", &format!("{megabytes}M"), path(&image)])?;
        run("mkfs.ext4", &["-q", "-F", path(&image)])?;
        run("mount", &["-o", "loop", path(&image), path(&mount_point)])?;
        Ok(SmallFileSystem { _dir: dir, mount_point })
    }
}

impl Drop for SmallFileSystem {
    fn drop(&mut self) {
        let _ = run("umount", &["-l", path(&self.mount_point)]);
    }
}

fn path(p: &Path) -> &str {
    p.to_str().expect("utf-8 temp path")
}

fn run(program: &str, args: &[&str]) -> Result<(), String> {
    let output =
        Command::new(program).args(args).output().map_err(|e| format!("{program}: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!("{program} {args:?}: {}", String::from_utf8_lossy(&output.stderr).trim()))
    }
}

/// Produces one batch; (error code, base offset).
fn produce(client: &mut RawClient, batch: &Bytes) -> (i16, i64) {
    match client.call(ApiKey::Produce, 9, produce_request(TOPIC, 0, batch.clone())) {
        ResponseKind::Produce(r) => {
            let p = &r.responses[0].partition_responses[0];
            (p.error_code, p.base_offset)
        }
        other => panic!("{other:?}"),
    }
}

/// The stored form of an acknowledged batch: the producer's bytes, base offset rewritten
/// and leader epoch stamped.
fn stored(batch: &Bytes, base_offset: i64) -> Vec<u8> {
    let mut bytes = batch.to_vec();
    bytes[..8].copy_from_slice(&base_offset.to_be_bytes());
    // The partition leader epoch the broker stamps (0: one replica; KIP-320).
    bytes[12..16].copy_from_slice(&0i32.to_be_bytes());
    bytes
}

/// Everything the partition holds, read with Fetch from offset 0 up to `end`.
fn read_back(client: &mut RawClient, end: i64) -> Vec<u8> {
    let mut out = BytesMut::new();
    let mut next = 0;
    while next < end {
        let (error, records) =
            match client.call(ApiKey::Fetch, 11, fetch_request(TOPIC, 0, next, 1000)) {
                ResponseKind::Fetch(r) => {
                    let p = &r.responses[0].partitions[0];
                    (p.error_code, p.records.clone().unwrap_or_default())
                }
                other => panic!("{other:?}"),
            };
        assert_eq!(error, 0, "fetch at {next}");
        assert!(!records.is_empty(), "fetch at {next} below {end} returned nothing");
        let mut rest = &records[..];
        while rest.len() >= 12 {
            // Each batch: base offset (8 bytes), length (4), then `length` bytes.
            let len = 12 + i32::from_be_bytes(rest[8..12].try_into().unwrap()) as usize;
            next += 1; // one record per batch in this test
            rest = &rest[len..];
        }
        out.extend_from_slice(&records);
    }
    out.to_vec()
}

#[test]
fn a_full_disk_refuses_produce_with_storage_error_keeps_acked_data_and_resumes_with_space() {
    let fs = match SmallFileSystem::mount(64) {
        Ok(fs) => fs,
        Err(reason) => {
            eprintln!("SKIPPED: no small real file system here ({reason}); needs root + loop");
            return;
        }
    };
    let ballast = fs.mount_point.join("ballast");
    std::fs::write(&ballast, vec![7u8; BALLAST_BYTES]).unwrap();
    let data_dir = fs.mount_point.join("data");
    std::fs::create_dir(&data_dir).unwrap();
    let flags = ["--segment-bytes", "2097152", "--max-message-bytes", "262144"];
    let mut broker = Broker::start_with_data_dir(data_dir, 1, &flags);
    create_topic(&broker, TOPIC, 1);
    let mut client = RawClient::connect(broker.shard_addr(0));

    let mut acked: Vec<Vec<u8>> = Vec::new();
    let mut refused = 0;
    for i in 0..1000u32 {
        let value = vec![(i % 251) as u8; 200_000];
        let batch = record_batch(&[(&i.to_be_bytes(), &value)], i as i64);
        match produce(&mut client, &batch) {
            (0, base_offset) => {
                assert_eq!(base_offset, acked.len() as i64, "dense offsets");
                acked.push(stored(&batch, base_offset));
            }
            (KAFKA_STORAGE_ERROR, _) => {
                refused += 1;
                if refused == 5 {
                    break;
                }
            }
            (code, _) => panic!("produce {i}: unexpected error code {code}"),
        }
    }
    assert_eq!(refused, 5, "the file system never filled up ({} acked)", acked.len());
    assert!(!acked.is_empty());
    assert!(broker.is_running(), "a full disk is not fatal:\n{}", broker.log());
    let end = acked.len() as i64;
    assert!(read_back(&mut client, end) == acked.concat(), "reads served, data intact");

    std::fs::remove_file(&ballast).unwrap();
    run("sync", &[]).unwrap();
    let mut resumed = 0;
    for i in 0..40u32 {
        let batch = record_batch(&[(b"after", &vec![1u8; 200_000])], i as i64);
        match produce(&mut client, &batch) {
            (0, base_offset) => {
                assert_eq!(base_offset, acked.len() as i64, "dense offsets");
                acked.push(stored(&batch, base_offset));
                resumed += 1;
            }
            (KAFKA_STORAGE_ERROR, _) => std::thread::sleep(Duration::from_millis(100)),
            (code, _) => panic!("produce after space returned: error code {code}"),
        }
    }
    assert!(resumed >= 20, "writes resume when space returns: {resumed} of 40");

    broker.kill_and_restart();
    let mut client = RawClient::connect(broker.shard_addr(0));
    let end = acked.len() as i64;
    assert!(read_back(&mut client, end) == acked.concat(), "acked data survives kill -9");
    eprintln!("disk full: {} acked, {refused} refused while full, {resumed} after", end);
}
