//! The nouns of an ACL binding, with Kafka's numeric codes (`AclOperation.code()` and
//! friends: what CreateAcls carries), and the checks CreateAcls applies to a new binding.

use std::fmt;
use std::net::IpAddr;

use super::{Requester, CLUSTER_RESOURCE, WILDCARD, WILDCARD_PRINCIPAL};

/// A resource type an ACL can name (Kafka's codes; ANY = 1 only in filters).
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug, PartialEq))]
#[rkyv(compare(PartialEq))]
pub enum ResourceType {
    Topic,
    Group,
    Cluster,
    TransactionalId,
}

/// How an ACL's resource name matches (Kafka's codes LITERAL = 3, PREFIXED = 4).
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug, PartialEq))]
#[rkyv(compare(PartialEq))]
pub enum PatternType {
    Literal,
    Prefixed,
}

/// An operation (Kafka's codes, ALL = 2 .. IDEMPOTENT_WRITE = 12).
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug, PartialEq))]
#[rkyv(compare(PartialEq))]
pub enum AclOperation {
    All,
    Read,
    Write,
    Create,
    Delete,
    Alter,
    Describe,
    ClusterAction,
    DescribeConfigs,
    AlterConfigs,
    IdempotentWrite,
}

/// ALLOW (3) or DENY (2).
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug, PartialEq))]
#[rkyv(compare(PartialEq))]
pub enum AclPermission {
    Allow,
    Deny,
}

/// One ACL: principal from host is allowed or denied an operation on a resource pattern.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct AclBinding {
    pub resource_type: ResourceType,
    pub pattern_type: PatternType,
    /// The resource name, or prefix; `*` (LITERAL) is every resource of the type.
    pub name: String,
    /// `Type:name` (`User:alice`), or `User:*` for every principal.
    pub principal: String,
    /// An IP address in its canonical form, or `*` for every host.
    pub host: String,
    pub operation: AclOperation,
    pub permission: AclPermission,
}

impl ResourceType {
    pub const ALL: [ResourceType; 4] =
        [Self::Topic, Self::Group, Self::Cluster, Self::TransactionalId];

    pub fn code(self) -> i8 {
        match self {
            Self::Topic => 2,
            Self::Group => 3,
            Self::Cluster => 4,
            Self::TransactionalId => 5,
        }
    }

    pub fn from_code(code: i8) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.code() == code)
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Topic => "TOPIC",
            Self::Group => "GROUP",
            Self::Cluster => "CLUSTER",
            Self::TransactionalId => "TRANSACTIONAL_ID",
        }
    }
}

impl PatternType {
    pub fn code(self) -> i8 {
        match self {
            Self::Literal => 3,
            Self::Prefixed => 4,
        }
    }

    pub fn from_code(code: i8) -> Option<Self> {
        [Self::Literal, Self::Prefixed].into_iter().find(|p| p.code() == code)
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Literal => "LITERAL",
            Self::Prefixed => "PREFIXED",
        }
    }
}

impl AclOperation {
    pub const ALL_OPERATIONS: [AclOperation; 11] = [
        Self::All,
        Self::Read,
        Self::Write,
        Self::Create,
        Self::Delete,
        Self::Alter,
        Self::Describe,
        Self::ClusterAction,
        Self::DescribeConfigs,
        Self::AlterConfigs,
        Self::IdempotentWrite,
    ];

    pub fn code(self) -> i8 {
        Self::ALL_OPERATIONS.iter().position(|o| *o == self).expect("listed") as i8 + 2
    }

    pub fn from_code(code: i8) -> Option<Self> {
        Self::ALL_OPERATIONS.get(usize::try_from(code).ok()?.checked_sub(2)?).copied()
    }

    /// Kafka's name: `READ`, `DESCRIBE_CONFIGS`, ...
    pub fn name(self) -> &'static str {
        const NAMES: [&str; 11] = [
            "ALL",
            "READ",
            "WRITE",
            "CREATE",
            "DELETE",
            "ALTER",
            "DESCRIBE",
            "CLUSTER_ACTION",
            "DESCRIBE_CONFIGS",
            "ALTER_CONFIGS",
            "IDEMPOTENT_WRITE",
        ];
        NAMES[self.code() as usize - 2]
    }

    /// Parses Kafka's name, in any case, with `-` or `_` (`idempotent-write`).
    pub fn parse(name: &str) -> Option<Self> {
        let wanted = name.trim().to_ascii_uppercase().replace('-', "_");
        Self::ALL_OPERATIONS.into_iter().find(|o| o.name() == wanted)
    }

    /// Whether an ALLOW of `self` allows `requested` (invariant 3).
    pub fn allows(self, requested: AclOperation) -> bool {
        use AclOperation::*;
        self == All
            || self == requested
            || (requested == Describe && matches!(self, Read | Write | Delete | Alter))
            || (requested == DescribeConfigs && self == AlterConfigs)
    }

    /// Whether a DENY of `self` denies `requested` (invariant 2: no implications).
    pub fn denies(self, requested: AclOperation) -> bool {
        self == AclOperation::All || self == requested
    }
}

impl AclPermission {
    pub fn code(self) -> i8 {
        match self {
            Self::Deny => 2,
            Self::Allow => 3,
        }
    }

    pub fn from_code(code: i8) -> Option<Self> {
        [Self::Deny, Self::Allow].into_iter().find(|p| p.code() == code)
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Allow => "ALLOW",
            Self::Deny => "DENY",
        }
    }
}

impl AclBinding {
    /// A binding from CreateAcls' codes and strings, checked as Kafka checks a new ACL;
    /// the error says what is wrong (Kafka answers INVALID_REQUEST with it).
    #[allow(clippy::too_many_arguments)]
    pub fn from_request(
        resource_type: i8,
        name: &str,
        pattern_type: i8,
        principal: &str,
        host: &str,
        operation: i8,
        permission: i8,
    ) -> Result<AclBinding, String> {
        let resource_type = ResourceType::from_code(resource_type).ok_or_else(|| {
            format!("resource type {resource_type} cannot be used in an ACL (TOPIC, GROUP, CLUSTER or TRANSACTIONAL_ID)")
        })?;
        let pattern_type = PatternType::from_code(pattern_type).ok_or_else(|| {
            format!("pattern type {pattern_type} cannot be used in an ACL (LITERAL or PREFIXED)")
        })?;
        let operation = AclOperation::from_code(operation)
            .ok_or_else(|| format!("operation {operation} cannot be used in an ACL"))?;
        let permission = AclPermission::from_code(permission)
            .ok_or_else(|| format!("permission type {permission} is not ALLOW or DENY"))?;
        let binding = AclBinding {
            resource_type,
            pattern_type,
            name: name.to_string(),
            principal: principal.to_string(),
            host: canonical_host(host)?,
            operation,
            permission,
        };
        binding.validate()?;
        Ok(binding)
    }

    fn validate(&self) -> Result<(), String> {
        if self.name.is_empty() {
            return Err("the resource name of an ACL must not be empty".into());
        }
        if self.resource_type == ResourceType::Cluster && self.name != CLUSTER_RESOURCE {
            return Err(format!(
                "the only valid name for the CLUSTER resource is {CLUSTER_RESOURCE}"
            ));
        }
        validate_principal(&self.principal)
    }

    /// Whether this binding speaks of `who` (principal and host).
    pub(super) fn applies_to(&self, who: Requester) -> bool {
        let principal = self.principal == who.principal || self.principal == WILDCARD_PRINCIPAL;
        principal
            && (self.host == WILDCARD
                || who.host.is_some_and(|h| self.host.parse::<IpAddr>() == Ok(h)))
    }
}

/// `Type:name`, both parts non-empty (Kafka's `KafkaPrincipal` string form).
pub fn validate_principal(principal: &str) -> Result<(), String> {
    match principal.split_once(':') {
        Some((kind, name)) if !kind.is_empty() && !name.is_empty() => Ok(()),
        _ => Err(format!("principal {principal:?} is not of the form Type:name (User:alice)")),
    }
}

/// `*`, or an IP address written canonically so that equal hosts compare equal.
pub fn canonical_host(host: &str) -> Result<String, String> {
    if host == WILDCARD {
        return Ok(host.to_string());
    }
    host.parse::<IpAddr>()
        .map(|ip| ip.to_string())
        .map_err(|_| format!("host {host:?} is not '*' or an IP address"))
}

impl fmt::Display for AclBinding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} {} on {}:{}:{} from {}",
            self.principal,
            self.permission.name(),
            self.operation.name(),
            self.resource_type.name(),
            self.pattern_type.name(),
            self.name,
            self.host
        )
    }
}
