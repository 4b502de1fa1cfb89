//! The Kafka API handlers: one file per API, composed from `shards` (routing, the log)
//! and `net` (the wire).
//!
//! Runs on every shard, for the connections that shard accepted. `SUPPORTED_APIS` is the
//! one place where version ranges are stated; `errors` is the one place internal errors
//! become Kafka error codes.

mod add_offsets_to_txn;
mod add_partitions_to_txn;
mod alter_configs;
mod alter_user_scram_credentials;
mod api_versions;
pub mod authz;
mod create_acls;
mod create_partitions;
mod create_topics;
mod delete_acls;
mod delete_groups;
mod delete_records;
mod delete_topics;
mod describe_acls;
mod describe_cluster;
mod describe_configs;
mod describe_groups;
mod describe_log_dirs;
mod describe_transactions;
mod describe_user_scram_credentials;
mod end_txn;
pub mod errors;
mod fetch;
mod find_coordinator;
mod heartbeat;
mod incremental_alter_configs;
mod init_producer_id;
mod join_group;
mod leave_group;
mod list_groups;
mod list_offsets;
mod list_transactions;
mod metadata;
mod offset_commit;
mod offset_delete;
mod offset_fetch;
mod offset_for_leader_epoch;
mod produce;
mod sync_group;
mod txn_offset_commit;

use std::path::PathBuf;
use std::rc::Rc;

use kafka_protocol::messages::{
    ApiKey, RequestKind, ResponseKind, SaslAuthenticateResponse, SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;
use shardlog_net::sasl::{ScramCredential, ScramMechanism};
use shardlog_net::{Reply, Request, RequestHandler, RequestStages};
use shardlog_shards::Shard;

use crate::listeners::AdvertisedListener;

/// One served API: the versions advertised in ApiVersions, and the lowest version
/// actually accepted. They are the same for every API today; they differed for Produce
/// while v0-v2 were refused but still advertised, because librdkafka gates features on
/// overlapping ranges (KAFKA-18659). Keep Produce advertised from v0 whatever is served.
pub struct ApiSupport {
    pub api_key: ApiKey,
    pub advertised_min: i16,
    pub accepted_min: i16,
    pub max: i16,
}

const fn api(api_key: ApiKey, advertised_min: i16, accepted_min: i16, max: i16) -> ApiSupport {
    ApiSupport { api_key, advertised_min, accepted_min, max }
}

/// Every API this broker serves, with its versions.
pub const SUPPORTED_APIS: &[ApiSupport] = &[
    // Produce v0-v2 and Fetch v0-v3 carry message format v0/v1 (magic 0/1): converted to
    // and from the stored v2 batches, as Kafka 3.x does (`shardlog_net::legacy_format`).
    api(ApiKey::Produce, 0, 0, 11),
    api(ApiKey::Fetch, 0, 0, 18),
    api(ApiKey::ListOffsets, 0, 0, 9),
    api(ApiKey::Metadata, 0, 0, 12),
    // v0-v1 (no current_leader_epoch) left Kafka in 4.0 (KIP-896) and the codec has
    // neither; consumers send v2+ (KIP-320).
    api(ApiKey::OffsetForLeaderEpoch, 2, 2, 4),
    api(ApiKey::ApiVersions, 0, 0, 4),
    api(ApiKey::CreateTopics, 0, 0, 7),
    api(ApiKey::DeleteTopics, 0, 0, 6),
    api(ApiKey::DescribeConfigs, 0, 0, 4),
    api(ApiKey::FindCoordinator, 0, 0, 6),
    api(ApiKey::JoinGroup, 0, 0, 9),
    api(ApiKey::SyncGroup, 0, 0, 5),
    api(ApiKey::Heartbeat, 0, 0, 4),
    api(ApiKey::LeaveGroup, 0, 0, 5),
    api(ApiKey::OffsetCommit, 0, 0, 9),
    api(ApiKey::OffsetFetch, 0, 0, 9),
    api(ApiKey::ListGroups, 0, 0, 5),
    api(ApiKey::DescribeGroups, 0, 0, 5),
    api(ApiKey::DeleteGroups, 0, 0, 2),
    api(ApiKey::OffsetDelete, 0, 0, 0),
    api(ApiKey::InitProducerId, 0, 0, 5),
    api(ApiKey::AlterConfigs, 0, 0, 2),
    api(ApiKey::IncrementalAlterConfigs, 0, 0, 1),
    api(ApiKey::CreatePartitions, 0, 0, 3),
    api(ApiKey::DeleteRecords, 0, 0, 2),
    api(ApiKey::DescribeCluster, 0, 0, 1),
    api(ApiKey::DescribeLogDirs, 0, 0, 4),
    // AddPartitionsToTxn v4+ is KIP-890's broker-to-broker form, which clients never send;
    // the others' v4 only lets the broker answer TRANSACTION_ABORTABLE (never sent here).
    api(ApiKey::AddPartitionsToTxn, 0, 0, 3),
    api(ApiKey::AddOffsetsToTxn, 0, 0, 4),
    api(ApiKey::EndTxn, 0, 0, 4),
    api(ApiKey::TxnOffsetCommit, 0, 0, 4),
    api(ApiKey::DescribeTransactions, 0, 0, 0),
    api(ApiKey::ListTransactions, 0, 0, 1),
    // v0 (no pattern type) left Kafka in 4.0; v1 is what every current client sends.
    api(ApiKey::DescribeAcls, 1, 1, 3),
    api(ApiKey::CreateAcls, 1, 1, 3),
    api(ApiKey::DeleteAcls, 1, 1, 3),
    // On SASL listeners the connection loop serves these two before authentication
    // (shardlog_net::sasl); a handler sees them only when they are out of place.
    api(ApiKey::SaslHandshake, 0, 0, 1),
    api(ApiKey::SaslAuthenticate, 0, 0, 2),
    api(ApiKey::DescribeUserScramCredentials, 0, 0, 0),
    api(ApiKey::AlterUserScramCredentials, 0, 0, 0),
];

/// The request handler plugged into `net`: one per shard and listener.
#[derive(Clone)]
pub struct KafkaHandler {
    pub shard: Rc<Shard>,
    /// Where clients of this handler's listener reach each shard: Metadata,
    /// FindCoordinator and DescribeCluster answer with these addresses only.
    pub listener: AdvertisedListener,
    /// This shard's log directory (`<data-dir>/shard-NNN`), for DescribeLogDirs.
    pub log_dir: PathBuf,
    /// This shard's shutdown state: connections stop reading frames when it fires.
    pub stop: Rc<crate::shutdown::ShardStop>,
    /// Cap on the record bytes of one Fetch response (--fetch-max-bytes).
    pub fetch_max_bytes: usize,
    /// What the compressed records of a message format v0/v1 conversion may decompress to
    /// (--max-request-bytes: no topic accepts a larger batch).
    pub max_records_bytes: usize,
    /// The other nodes of the cluster (`--peers`), whose shards Metadata also advertises;
    /// empty on a single node.
    pub peers: Rc<Vec<crate::cluster::Node>>,
}

impl RequestHandler for KafkaHandler {
    fn supported_versions(&self, api_key: ApiKey) -> Option<(i16, i16)> {
        SUPPORTED_APIS.iter().find(|a| a.api_key == api_key).map(|a| (a.accepted_min, a.max))
    }

    fn unsupported_api_versions(&self) -> ResponseKind {
        ResponseKind::ApiVersions(api_versions::response(errors::UNSUPPORTED_VERSION))
    }

    fn request_done(&self, api_key: ApiKey, stages: RequestStages) {
        let durations = &self.shard.probes.request_durations;
        durations.record(api_key as i16, stages.queued, stages.ready, stages.written);
    }

    fn request_with_trailing_bytes(&self, _api_key: ApiKey) {
        let count = &self.shard.probes.requests_with_trailing_bytes;
        count.set(count.get() + 1);
    }

    fn scram_credential(&self, user: &str, mechanism: ScramMechanism) -> Option<ScramCredential> {
        crate::users::credential(&self.shard, user, mechanism)
    }

    fn authentication_done(&self, succeeded: bool) {
        let probes = &self.shard.probes;
        let counter = match succeeded {
            true => &probes.sasl_authentications,
            false => &probes.sasl_authentication_failures,
        };
        counter.set(counter.get() + 1);
    }

    async fn stopping(&self) {
        self.stop.stopping().await
    }

    async fn handle(self: Rc<Self>, request: Request) -> Reply {
        let version = request.api_version;
        let caller = authz::Caller::new(&self.shard, &request);
        match request.body {
            RequestKind::Produce(body) => {
                produce::handle(&self.shard, &caller, body, version, self.max_records_bytes).await
            }
            RequestKind::Fetch(body) => {
                let limits = fetch::Limits {
                    fetch_max_bytes: self.fetch_max_bytes,
                    max_records_bytes: self.max_records_bytes,
                };
                fetch::handle(self.shard.clone(), caller, body, version, limits)
            }
            RequestKind::ListOffsets(body) => {
                list_offsets::handle(self.shard.clone(), caller, body, version)
            }
            RequestKind::OffsetForLeaderEpoch(body) => {
                offset_for_leader_epoch::handle(self.shard.clone(), caller, body)
            }
            RequestKind::Metadata(body) => metadata::handle(self.clone(), caller, body, version),
            RequestKind::ApiVersions(_) => {
                let response = api_versions::response(errors::NONE);
                Box::pin(async move { Some(ResponseKind::ApiVersions(response)) })
            }
            RequestKind::CreateTopics(body) => {
                create_topics::handle(self.shard.clone(), caller, body)
            }
            RequestKind::DeleteTopics(body) => {
                delete_topics::handle(self.shard.clone(), caller, body)
            }
            RequestKind::DescribeConfigs(body) => {
                describe_configs::handle(self.clone(), caller, body)
            }
            RequestKind::FindCoordinator(body) => {
                find_coordinator::handle(self.clone(), caller, body, version)
            }
            RequestKind::JoinGroup(body) => {
                let client_id = request.header.client_id.map(|c| c.to_string()).unwrap_or_default();
                let client_host = request.peer.map(|p| format!("/{}", p.ip())).unwrap_or_default();
                join_group::handle(
                    self.shard.clone(),
                    &caller,
                    body,
                    version,
                    client_id,
                    client_host,
                )
            }
            RequestKind::SyncGroup(body) => sync_group::handle(self.shard.clone(), &caller, body),
            RequestKind::Heartbeat(body) => heartbeat::handle(self.shard.clone(), &caller, body),
            RequestKind::LeaveGroup(body) => {
                leave_group::handle(self.shard.clone(), &caller, body, version)
            }
            RequestKind::OffsetCommit(body) => {
                offset_commit::handle(self.shard.clone(), caller, body)
            }
            RequestKind::OffsetFetch(body) => {
                offset_fetch::handle(self.shard.clone(), &caller, body, version)
            }
            RequestKind::ListGroups(body) => list_groups::handle(self.shard.clone(), &caller, body),
            RequestKind::DescribeGroups(body) => {
                describe_groups::handle(self.shard.clone(), &caller, body)
            }
            RequestKind::DeleteGroups(body) => {
                delete_groups::handle(self.shard.clone(), caller, body)
            }
            RequestKind::OffsetDelete(body) => {
                offset_delete::handle(self.shard.clone(), caller, body)
            }
            RequestKind::InitProducerId(body) => {
                init_producer_id::handle(self.shard.clone(), caller, body, version)
            }
            RequestKind::AddPartitionsToTxn(body) => {
                add_partitions_to_txn::handle(self.shard.clone(), caller, body, version)
            }
            RequestKind::AddOffsetsToTxn(body) => {
                add_offsets_to_txn::handle(self.shard.clone(), caller, body, version)
            }
            RequestKind::DescribeTransactions(body) => {
                describe_transactions::handle(self.shard.clone(), &caller, body)
            }
            RequestKind::ListTransactions(body) => {
                list_transactions::handle(self.shard.clone(), &caller, body)
            }
            RequestKind::EndTxn(body) => end_txn::handle(self.shard.clone(), caller, body, version),
            RequestKind::TxnOffsetCommit(body) => {
                txn_offset_commit::handle(self.shard.clone(), caller, body, version)
            }
            RequestKind::AlterConfigs(body) => {
                alter_configs::handle(self.shard.clone(), caller, body)
            }
            RequestKind::IncrementalAlterConfigs(body) => {
                incremental_alter_configs::handle(self.shard.clone(), caller, body)
            }
            RequestKind::CreatePartitions(body) => {
                create_partitions::handle(self.shard.clone(), caller, body)
            }
            RequestKind::DeleteRecords(body) => {
                delete_records::handle(self.shard.clone(), caller, body)
            }
            RequestKind::DescribeCluster(body) => {
                describe_cluster::handle(self.clone(), body, version)
            }
            RequestKind::DescribeLogDirs(body) => {
                describe_log_dirs::handle(self.clone(), &caller, body, version)
            }
            RequestKind::CreateAcls(body) => create_acls::handle(caller, body),
            RequestKind::DescribeAcls(body) => describe_acls::handle(caller, body),
            RequestKind::DeleteAcls(body) => delete_acls::handle(caller, body),
            RequestKind::DescribeUserScramCredentials(body) => {
                describe_user_scram_credentials::handle(caller, body)
            }
            RequestKind::AlterUserScramCredentials(body) => {
                alter_user_scram_credentials::handle(caller, body)
            }
            // Not on a SASL listener, or after authentication (no re-authentication):
            // Kafka answers ILLEGAL_SASL_STATE.
            RequestKind::SaslHandshake(_) => {
                let response =
                    SaslHandshakeResponse::default().with_error_code(errors::ILLEGAL_SASL_STATE);
                Box::pin(async move { Some(ResponseKind::SaslHandshake(response)) })
            }
            RequestKind::SaslAuthenticate(_) => {
                let response = SaslAuthenticateResponse::default()
                    .with_error_code(errors::ILLEGAL_SASL_STATE)
                    .with_error_message(Some(str_bytes("not expected on this connection")));
                Box::pin(async move { Some(ResponseKind::SaslAuthenticate(response)) })
            }
            other => {
                // The version table and this match disagree: a bug, caught in tests.
                panic!("request {:?} passed the version table but has no handler", other)
            }
        }
    }
}

fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}
