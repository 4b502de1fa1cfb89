//! The authorization check every handler makes: one call per resource
//! (`caller.topic(AclOperation::Write, &name)`), answered from this shard's copy of the
//! ACLs (`shardlog_shards::acl`). Forwarded requests are checked here, on the shard the
//! client is connected to, before anything is forwarded.
//!
//! With `authorizer = false` every check is one branch on a `bool` and returns true: the
//! produce and fetch paths pay nothing else.

use std::net::IpAddr;
use std::rc::Rc;

use kafka_protocol::messages::ResponseKind;
use shardlog_net::{Reply, Request};
use shardlog_shards::acl::{AclOperation, ResourceType, CLUSTER_RESOURCE};
use shardlog_shards::Shard;

use super::errors::{CLUSTER_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_FAILED};

/// Who sent a request, and the shard that decides for it.
#[derive(Clone)]
pub struct Caller {
    shard: Rc<Shard>,
    principal: Option<Rc<str>>,
    host: Option<IpAddr>,
}

/// The reply to a request refused as a whole (GROUP_AUTHORIZATION_FAILED, ...).
pub fn refused(response: ResponseKind) -> Reply {
    Box::pin(async move { Some(response) })
}

impl Caller {
    pub fn new(shard: &Rc<Shard>, request: &Request) -> Caller {
        Caller {
            shard: shard.clone(),
            principal: request.principal.clone(),
            host: request.peer.map(|p| p.ip()),
        }
    }

    /// A caller outside the Kafka protocol (the console's logged-in user): `principal` is
    /// `User:...`, `None` for ANONYMOUS.
    pub fn with_principal(
        shard: &Rc<Shard>,
        principal: Option<Rc<str>>,
        host: Option<IpAddr>,
    ) -> Caller {
        Caller { shard: shard.clone(), principal, host }
    }

    pub fn shard(&self) -> &Rc<Shard> {
        &self.shard
    }

    /// Whether ACLs are checked at all (`authorizer = true`).
    pub fn checking(&self) -> bool {
        self.shard.config.authorizer.enabled
    }

    pub fn may(&self, operation: AclOperation, resource_type: ResourceType, name: &str) -> bool {
        !self.checking()
            || self.shard.authorize(
                self.principal.as_deref(),
                self.host,
                operation,
                resource_type,
                name,
            )
    }

    pub fn topic(&self, operation: AclOperation, name: &str) -> bool {
        self.may(operation, ResourceType::Topic, name)
    }

    pub fn group(&self, operation: AclOperation, name: &str) -> bool {
        self.may(operation, ResourceType::Group, name)
    }

    pub fn cluster(&self, operation: AclOperation) -> bool {
        self.may(operation, ResourceType::Cluster, CLUSTER_RESOURCE)
    }

    pub fn transactional_id(&self, operation: AclOperation, id: &str) -> bool {
        self.may(operation, ResourceType::TransactionalId, id)
    }

    /// CREATE on the cluster, or on the topic (Kafka's CreateTopics and auto-creation).
    pub fn create_topic(&self, name: &str) -> bool {
        self.cluster(AclOperation::Create) || self.topic(AclOperation::Create, name)
    }

    /// Describe/Alter(Incremental)Configs: the error code and message for a config resource
    /// (2 topic, 4 broker) the caller may not use; None when allowed (or another type,
    /// refused elsewhere).
    pub fn config_refusal(
        &self,
        operation: AclOperation,
        resource_type: i8,
        name: &str,
    ) -> Option<(i16, String)> {
        let (allowed, code, on) = match resource_type {
            2 => (self.topic(operation, name), TOPIC_AUTHORIZATION_FAILED, "the topic"),
            4 => (self.cluster(operation), CLUSTER_AUTHORIZATION_FAILED, "the cluster"),
            _ => return None,
        };
        (!allowed).then(|| (code, format!("{} on {on} is needed", operation.name())))
    }

    /// Whether the caller may do `operation` on at least one resource of the type
    /// (Kafka's `authorizeByResourceType`: InitProducerId without a transactional id is
    /// allowed to anyone who may WRITE some topic).
    pub fn any_resource(&self, operation: AclOperation, resource_type: ResourceType) -> bool {
        !self.checking()
            || self.shard.authorize_any(
                self.principal.as_deref(),
                self.host,
                operation,
                resource_type,
            )
    }
}
