//! FindCoordinator (v0-v6): a group's coordinator is the shard `coordinator_shard(group)`
//! of this node on a single node, and of the node that leads that shard's offsets group in
//! a cluster (`group::replicated`; COORDINATOR_NOT_AVAILABLE while no leader is known),
//! advertised as its own broker, so group traffic goes straight to that core. A
//! transactional id's coordinator (key type 1) is placed alike, so it fails over with the
//! offsets group (`txn::replicated`). Every node names the same once it knows the leader. v4 asks for several keys at once; v5 only adds an error
//! code; v6 adds share-group keys (KIP-932), which get INVALID_REQUEST, as from a Kafka
//! without share groups.

use std::rc::Rc;

use kafka_protocol::messages::find_coordinator_request::FindCoordinatorRequest;
use kafka_protocol::messages::find_coordinator_response::{Coordinator, FindCoordinatorResponse};
use kafka_protocol::messages::{BrokerId, ResponseKind};
use kafka_protocol::protocol::StrBytes;
use shardlog_net::Reply;
use shardlog_shards::group::coordinator_shard;

use shardlog_shards::acl::AclOperation;

use super::authz::Caller;
use super::errors;
use super::metadata::{advertised_brokers, broker_id};
use super::{str_bytes, KafkaHandler};

const KEY_TYPE_GROUP: i8 = 0;
const KEY_TYPE_TRANSACTION: i8 = 1;
const KEY_TYPE_SHARE: i8 = 2;

pub fn handle(
    handler: Rc<KafkaHandler>,
    caller: Caller,
    request: FindCoordinatorRequest,
    version: i16,
) -> Reply {
    Box::pin(async move {
        let keys: Vec<StrBytes> =
            if version >= 4 { request.coordinator_keys.clone() } else { vec![request.key.clone()] };
        let coordinators: Vec<Coordinator> =
            keys.iter().map(|key| coordinator(&handler, &caller, key, request.key_type)).collect();
        let response = if version >= 4 {
            FindCoordinatorResponse::default().with_coordinators(coordinators)
        } else {
            let c = coordinators.into_iter().next().unwrap_or_default();
            FindCoordinatorResponse::default()
                .with_error_code(c.error_code)
                .with_error_message(c.error_message)
                .with_node_id(c.node_id)
                .with_host(c.host)
                .with_port(c.port)
        };
        Some(ResponseKind::FindCoordinator(response))
    })
}

fn coordinator(
    handler: &KafkaHandler,
    caller: &Caller,
    key: &StrBytes,
    key_type: i8,
) -> Coordinator {
    let base = Coordinator::default().with_key(key.clone());
    // No coordinator: node -1, port -1, and the reason.
    let refused = |code: i16, message: &str| {
        base.clone()
            .with_error_code(code)
            .with_error_message(Some(str_bytes(message)))
            .with_node_id(BrokerId(-1))
            .with_port(-1)
    };
    if key_type == KEY_TYPE_SHARE {
        return refused(errors::INVALID_REQUEST, "share groups (KIP-932) are not supported");
    }
    if key_type == KEY_TYPE_TRANSACTION && key.is_empty() {
        return refused(errors::INVALID_REQUEST, "an empty transactional id has no coordinator");
    }
    if key_type != KEY_TYPE_GROUP && key_type != KEY_TYPE_TRANSACTION {
        return refused(errors::INVALID_REQUEST, "unknown coordinator key type");
    }
    if key.is_empty() {
        return base
            .with_error_code(errors::INVALID_GROUP_ID)
            .with_node_id(BrokerId(-1))
            .with_port(-1);
    }
    // DESCRIBE on the group or the transactional id, as Kafka.
    if key_type == KEY_TYPE_GROUP && !caller.group(AclOperation::Describe, key.as_str()) {
        return refused(errors::GROUP_AUTHORIZATION_FAILED, "DESCRIBE on the group is needed");
    }
    if key_type == KEY_TYPE_TRANSACTION
        && !caller.transactional_id(AclOperation::Describe, key.as_str())
    {
        let code = errors::TRANSACTIONAL_ID_AUTHORIZATION_FAILED;
        return refused(code, "DESCRIBE on the transactional id is needed");
    }
    let shard = &handler.shard;
    // Groups and transactional ids alike: the leader of the key's shard's offsets group.
    let node = match shard.group_coordinator_node(key.as_str()) {
        Some(node) => node,
        None => {
            let code = errors::COORDINATOR_NOT_AVAILABLE;
            return refused(code, "the coordinator is being elected");
        }
    };
    let id = broker_id(node, coordinator_shard(key.as_str(), shard.nr_shards) as u32);
    let broker = advertised_brokers(handler).into_iter().find(|b| b.id == id);
    let broker = broker.expect("the coordinator is one of the advertised brokers");
    base.with_error_code(errors::NONE)
        .with_node_id(BrokerId(id))
        .with_host(str_bytes(&broker.host))
        .with_port(broker.port)
}
