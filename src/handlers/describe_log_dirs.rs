//! DescribeLogDirs (v0-v4): each shard is a broker with one log dir, its own data
//! sub-directory (`<data-dir>/shard-NNN`), and answers for the partitions it owns.
//!
//! A partition's size is what the shard log's index holds for it: the bytes of its
//! batches still readable (from the batch holding the log start offset to the log end),
//! without the 32-byte entry headers and page padding of the shared log, and without
//! space not yet freed (segments are freed whole once no partition needs them). So it
//! is what the partition's data occupies, not what deleting it would free at once.
//! total_bytes / usable_bytes (v4) come from statvfs of the shard's directory.
//!
//! v0 is not served: the vendored codec (Kafka 4.0's schemas) starts at v1, which has
//! the same layout.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::rc::Rc;

use kafka_protocol::messages::describe_log_dirs_request::{
    DescribableLogDirTopic, DescribeLogDirsRequest,
};
use kafka_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResponse, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use kafka_protocol::messages::{ResponseKind, TopicName};
use shardlog_net::Reply;
use shardlog_shards::TopicMeta;
use tracing::warn;

use shardlog_shards::acl::AclOperation;

use super::authz::{refused, Caller};
use super::errors;
use super::{str_bytes, KafkaHandler};

pub fn handle(
    handler: Rc<KafkaHandler>,
    caller: &Caller,
    request: DescribeLogDirsRequest,
    version: i16,
) -> Reply {
    // DESCRIBE on the cluster, as Kafka: v3+ say why, older versions get no dirs.
    if !caller.cluster(AclOperation::Describe) {
        let response = DescribeLogDirsResponse::default().with_error_code(if version >= 3 {
            errors::CLUSTER_AUTHORIZATION_FAILED
        } else {
            0
        });
        return refused(ResponseKind::DescribeLogDirs(response));
    }
    Box::pin(async move {
        let table = handler.shard.table();
        let topics: Vec<DescribeLogDirsTopic> = match &request.topics {
            None => {
                table.topics.values().filter_map(|meta| local_topic(&handler, meta, None)).collect()
            }
            Some(wanted) => wanted
                .iter()
                .filter_map(|w| {
                    let meta = table.topic(w.topic.0.as_str())?;
                    local_topic(&handler, meta, Some(w))
                })
                .collect(),
        };
        let mut result = DescribeLogDirsResult::default()
            .with_error_code(errors::NONE)
            .with_log_dir(str_bytes(&handler.log_dir.to_string_lossy()))
            .with_topics(topics);
        // total_bytes and usable_bytes exist from v4 (the encoder refuses them before).
        if version >= 4 {
            if let Some((total, usable)) = disk_space(&handler.log_dir) {
                result = result.with_total_bytes(total).with_usable_bytes(usable);
            }
        }
        let response = DescribeLogDirsResponse::default()
            .with_error_code(errors::NONE)
            .with_results(vec![result]);
        Some(ResponseKind::DescribeLogDirs(response))
    })
}

/// The partitions of `meta` this shard owns (only the `wanted` ones if given); None when
/// there are none here.
fn local_topic(
    handler: &KafkaHandler,
    meta: &TopicMeta,
    wanted: Option<&DescribableLogDirTopic>,
) -> Option<DescribeLogDirsTopic> {
    let shard = &handler.shard;
    let partitions: Vec<DescribeLogDirsPartition> = (0..meta.partition_shards.len() as i32)
        .filter(|p| wanted.is_none_or(|w| w.partitions.contains(p)))
        .filter(|p| meta.owner(*p) == Some(shard.id))
        .filter_map(|p| {
            let info = shard.log.partition_info(meta.partition_id(p)?)?;
            Some(
                DescribeLogDirsPartition::default()
                    .with_partition_index(p)
                    .with_partition_size(info.size_bytes as i64)
                    .with_offset_lag(0)
                    .with_is_future_key(false),
            )
        })
        .collect();
    (!partitions.is_empty()).then(|| {
        DescribeLogDirsTopic::default()
            .with_name(TopicName(str_bytes(&meta.name)))
            .with_partitions(partitions)
    })
}

/// (total, usable) bytes of the file system holding `dir`, from statvfs (a metadata
/// call, no disk IO in the common case). None, logged, if it fails: the fields then keep
/// Kafka's "unknown" value -1.
fn disk_space(dir: &Path) -> Option<(i64, i64)> {
    let path = CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut stats = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `path` is NUL-terminated and `stats` is a valid out-pointer for statvfs.
    let rc = unsafe { libc::statvfs(path.as_ptr(), stats.as_mut_ptr()) };
    if rc != 0 {
        let error = std::io::Error::last_os_error();
        warn!(dir = %dir.display(), %error, "statvfs failed");
        return None;
    }
    // SAFETY: statvfs returned 0, so it filled `stats`.
    let stats = unsafe { stats.assume_init() };
    let fragment = stats.f_frsize as i64;
    Some((stats.f_blocks as i64 * fragment, stats.f_bavail as i64 * fragment))
}
