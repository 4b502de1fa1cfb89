//! Authorization: Kafka's ACL model and the decision every request makes.
//!
//! An ACL binding (`AclBinding`) says: *principal* from *host* is ALLOWed or DENYed
//! *operation* on resources of *type* whose name matches a *pattern* (LITERAL, `*` being
//! the literal wildcard, or PREFIXED). The bindings live in the topic table
//! (`TopicTable::acls`), so they travel through the metadata log like topics: changed only
//! by the controller (`acl::controller`), fdatasync'd, applied to every shard's copy, and
//! recovered at start-up. Each shard decides on its own copy, with no lock and no hop.
//!
//! Runs on every shard, on the request path of every API when `authorizer = true`; with it
//! off, handlers never get here (one branch). A decision allocates nothing: it looks up the
//! resource's name, the literal wildcard and, only if the table holds PREFIXED bindings,
//! each prefix of the name.
//!
//! Invariants (Kafka's `StandardAuthorizer` with `allow.everyone.if.no.acl.found=false`):
//! 1. A super user is allowed everything, whatever the bindings say.
//! 2. A matching DENY wins over any ALLOW. DENY matches only its own operation or ALL.
//! 3. ALLOW of READ, WRITE, DELETE or ALTER also allows DESCRIBE; ALLOW of ALTER_CONFIGS
//!    also allows DESCRIBE_CONFIGS; ALLOW of ALL allows every operation.
//! 4. With no matching ALLOW the answer is no.
//! 5. The table holds each binding at most once (CreateAcls of an existing one is a no-op).

pub mod controller;
mod filter;
mod model;

pub use filter::{AclFilter, PatternFilter};
pub use model::{
    validate_principal, AclBinding, AclOperation, AclPermission, PatternType, ResourceType,
};

use std::collections::BTreeMap;
use std::net::IpAddr;

/// The one name of the CLUSTER resource.
pub const CLUSTER_RESOURCE: &str = "kafka-cluster";
/// The principal of a connection that did not authenticate.
pub const ANONYMOUS: &str = "User:ANONYMOUS";
/// The principal (and host) wildcard.
pub const WILDCARD_PRINCIPAL: &str = "User:*";
pub const WILDCARD: &str = "*";

/// Broker settings of the authorizer.
#[derive(Clone, Debug, Default)]
pub struct AuthorizerConfig {
    /// `authorizer = true`: every request is checked against the ACLs.
    pub enabled: bool,
    /// Principals allowed everything (`User:admin`).
    pub super_users: Vec<String>,
}

/// Every ACL binding, by resource name (all resource types and pattern types together).
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Debug, Default, PartialEq)]
pub struct AclTable {
    by_name: BTreeMap<String, Vec<AclBinding>>,
    /// How many bindings are PREFIXED: without any, a decision looks up two names only.
    prefixed: u32,
}

/// Who asks, and from where.
#[derive(Clone, Copy, Debug)]
pub struct Requester<'a> {
    /// `User:...`; [`ANONYMOUS`] for a connection that did not authenticate.
    pub principal: &'a str,
    pub host: Option<IpAddr>,
}

impl AuthorizerConfig {
    /// Whether `who` may do `operation` on the resource (invariants 1-4).
    pub fn allows(
        &self,
        acls: &AclTable,
        who: Requester,
        operation: AclOperation,
        resource_type: ResourceType,
        name: &str,
    ) -> bool {
        if self.super_users.iter().any(|s| s == who.principal || s == WILDCARD_PRINCIPAL) {
            return true;
        }
        acls.allows(who, operation, resource_type, name)
    }

    /// Whether `who` may do `operation` on at least one resource of the type (Kafka's
    /// `authorizeByResourceType`): a super user, or an ALLOW whose own pattern no DENY
    /// covers (a DENY of the same literal name, of the literal `*`, or of a prefix).
    pub fn allows_any(
        &self,
        acls: &AclTable,
        who: Requester,
        operation: AclOperation,
        resource_type: ResourceType,
    ) -> bool {
        if self.super_users.iter().any(|s| s == who.principal || s == WILDCARD_PRINCIPAL) {
            return true;
        }
        acls.iter().any(|allow| {
            allow.resource_type == resource_type
                && allow.permission == AclPermission::Allow
                && allow.operation.allows(operation)
                && allow.applies_to(who)
                && !acls.denies_pattern(who, operation, allow)
        })
    }
}

impl AclTable {
    pub fn len(&self) -> usize {
        self.by_name.values().map(Vec::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    pub fn contains(&self, binding: &AclBinding) -> bool {
        self.by_name.get(&binding.name).is_some_and(|list| list.contains(binding))
    }

    /// Adds a binding; false if it was there already (invariant 5).
    pub fn insert(&mut self, binding: AclBinding) -> bool {
        if self.contains(&binding) {
            return false;
        }
        self.prefixed += u32::from(binding.pattern_type == PatternType::Prefixed);
        self.by_name.entry(binding.name.clone()).or_default().push(binding);
        true
    }

    /// Removes a binding; false if it was not there.
    pub fn remove(&mut self, binding: &AclBinding) -> bool {
        let Some(list) = self.by_name.get_mut(&binding.name) else { return false };
        let Some(at) = list.iter().position(|b| b == binding) else { return false };
        list.remove(at);
        if list.is_empty() {
            self.by_name.remove(&binding.name);
        }
        self.prefixed -= u32::from(binding.pattern_type == PatternType::Prefixed);
        true
    }

    /// Every binding, in name order.
    pub fn iter(&self) -> impl Iterator<Item = &AclBinding> {
        self.by_name.values().flatten()
    }

    /// Every binding a filter matches (DescribeAcls, DeleteAcls).
    pub fn matching<'a>(&'a self, filter: &'a AclFilter) -> impl Iterator<Item = &'a AclBinding> {
        self.iter().filter(move |b| filter.matches(b))
    }

    /// Invariants 2-4, for one resource.
    fn allows(
        &self,
        who: Requester,
        operation: AclOperation,
        resource_type: ResourceType,
        name: &str,
    ) -> bool {
        let mut allowed = false;
        for binding in self.applying_to(resource_type, name) {
            if !binding.applies_to(who) {
                continue;
            }
            match binding.permission {
                AclPermission::Deny if binding.operation.denies(operation) => return false,
                AclPermission::Allow if binding.operation.allows(operation) => allowed = true,
                _ => {}
            }
        }
        allowed
    }

    /// Whether a DENY covers every resource `allow`'s pattern names.
    fn denies_pattern(&self, who: Requester, operation: AclOperation, allow: &AclBinding) -> bool {
        let covering = self.applying_to(allow.resource_type, &allow.name).filter(|deny| {
            // A literal DENY of the same name does not cover a PREFIXED allow.
            allow.pattern_type == PatternType::Literal
                || deny.pattern_type == PatternType::Prefixed
                || deny.name == WILDCARD
        });
        covering.into_iter().any(|deny| {
            deny.permission == AclPermission::Deny
                && deny.operation.denies(operation)
                && deny.applies_to(who)
        })
    }

    /// The bindings whose resource pattern matches the resource: LITERAL of its name or
    /// of `*`, PREFIXED of any prefix of its name.
    fn applying_to<'a>(
        &'a self,
        resource_type: ResourceType,
        name: &'a str,
    ) -> impl Iterator<Item = &'a AclBinding> {
        let literal = [name, WILDCARD].into_iter().enumerate().filter(move |(i, n)| {
            // `*` looked up once when the name is `*` itself.
            *i == 0 || *n != name
        });
        let literal = literal.flat_map(move |(_, n)| {
            self.bindings_named(n).filter(|b| b.pattern_type == PatternType::Literal)
        });
        let prefixes = (self.prefixed > 0)
            .then(|| (1..=name.len()).filter(|end| name.is_char_boundary(*end)))
            .into_iter()
            .flatten();
        let prefixed = prefixes.flat_map(move |end| {
            self.bindings_named(&name[..end]).filter(|b| b.pattern_type == PatternType::Prefixed)
        });
        literal.chain(prefixed).filter(move |b| b.resource_type == resource_type)
    }

    fn bindings_named<'a>(&'a self, name: &str) -> impl Iterator<Item = &'a AclBinding> {
        self.by_name.get(name).into_iter().flatten()
    }
}

#[cfg(test)]
mod tests;
