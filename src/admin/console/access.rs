//! Who looks at the console, and what the authorizer lets them see and do. Each page and
//! action asks the question the Kafka API handler for the same data asks, through the
//! handlers' own `authz::Caller`, with the session's principal (`User:NAME`) and the
//! browser's address as the host. With `authorizer = false` every answer is yes.

use std::net::IpAddr;
use std::rc::Rc;

use shardlog_shards::acl::{AclOperation, ResourceType, CLUSTER_RESOURCE};
use shardlog_shards::Shard;

use super::html::{escape, page};
use super::session::Session;
use super::{http, HTML};
use crate::handlers::authz::Caller;

/// The user behind a request (none without a login) and the authorizer's view of them.
pub struct Viewer {
    caller: Caller,
    session: Option<Session>,
}

/// A permission the viewer lacks.
#[derive(Debug)]
pub struct Denied {
    principal: String,
    operation: AclOperation,
    resource_type: ResourceType,
    name: String,
}

impl Viewer {
    pub fn new(shard: &Rc<Shard>, session: Option<Session>, host: Option<IpAddr>) -> Viewer {
        let principal = session.as_ref().map(|s| Rc::from(s.principal()));
        Viewer { caller: Caller::with_principal(shard, principal, host), session }
    }

    /// What the viewer's CSRF tokens are bound to (empty without a login).
    pub fn session_id(&self) -> &str {
        self.session.as_ref().map_or("", |s| s.nonce.as_str())
    }

    fn principal(&self) -> String {
        self.session.as_ref().map_or_else(|| "User:ANONYMOUS".to_string(), Session::principal)
    }

    pub fn may_topic(&self, operation: AclOperation, name: &str) -> bool {
        self.caller.topic(operation, name)
    }

    /// ListGroups' rule: DESCRIBE on the cluster, else on the group.
    pub fn may_list_group(&self, name: &str) -> bool {
        self.caller.cluster(AclOperation::Describe)
            || self.caller.group(AclOperation::Describe, name)
    }

    pub fn topic(&self, operation: AclOperation, name: &str) -> Result<(), Denied> {
        self.require(self.caller.topic(operation, name), operation, ResourceType::Topic, name)
    }

    pub fn group(&self, operation: AclOperation, name: &str) -> Result<(), Denied> {
        self.require(self.caller.group(operation, name), operation, ResourceType::Group, name)
    }

    /// CreateTopics' rule: CREATE on the cluster or on the topic.
    pub fn create_topic(&self, name: &str) -> Result<(), Denied> {
        let allowed = self.caller.create_topic(name);
        let on = (ResourceType::Cluster, CLUSTER_RESOURCE);
        self.require(allowed, AclOperation::Create, on.0, on.1).map_err(|mut denied| {
            denied.name = format!("{CLUSTER_RESOURCE} (or on TOPIC {name})");
            denied
        })
    }

    fn require(
        &self,
        allowed: bool,
        operation: AclOperation,
        resource_type: ResourceType,
        name: &str,
    ) -> Result<(), Denied> {
        match allowed {
            true => Ok(()),
            false => Err(Denied {
                principal: self.principal(),
                operation,
                resource_type,
                name: name.to_string(),
            }),
        }
    }
}

impl Denied {
    /// What is missing, for the page: `User:alice may not do this: DESCRIBE on TOPIC t2 is
    /// needed.`
    pub fn message(&self) -> String {
        format!(
            "{} may not do this: {} on {} {} is needed (an ACL, docs/security.md).",
            self.principal,
            self.operation.name(),
            self.resource_type.name(),
            self.name
        )
    }

    /// The 403 page.
    pub fn response(&self) -> Vec<u8> {
        let body = format!("<p class=\"bad\" id=\"denied\">{}</p>", escape(&self.message()));
        http::response(403, HTML, &page("Not allowed", &body))
    }
}
