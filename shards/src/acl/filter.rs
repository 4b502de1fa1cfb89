//! ACL filters (DescribeAcls, DeleteAcls), matched as Kafka's `AclBindingFilter` matches:
//! an absent field, ANY, matches everything; pattern type MATCH matches every binding
//! that would apply to the named resource (the literal name, the literal `*`, and every
//! prefix of it); ANY with a name matches bindings of that exact name, any pattern type.

use super::model::{canonical_host, AclBinding, AclOperation, AclPermission, PatternType};
use super::{ResourceType, WILDCARD};

/// Which pattern types a filter matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatternFilter {
    Any,
    /// Every pattern that applies to the filter's name.
    Match,
    Exactly(PatternType),
}

/// A DescribeAcls or DeleteAcls filter; `None` is ANY (or a null string).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AclFilter {
    pub resource_type: Option<ResourceType>,
    pub name: Option<String>,
    pub pattern: PatternFilter,
    pub principal: Option<String>,
    pub host: Option<String>,
    pub operation: Option<AclOperation>,
    pub permission: Option<AclPermission>,
}

impl AclFilter {
    /// The filter that matches every binding.
    pub fn any() -> Self {
        AclFilter {
            resource_type: None,
            name: None,
            pattern: PatternFilter::Any,
            principal: None,
            host: None,
            operation: None,
            permission: None,
        }
    }

    /// A filter from a request's codes (ANY = 1, MATCH = 2 for the pattern type); an
    /// unknown code is refused with what Kafka says (INVALID_REQUEST).
    pub fn from_request(
        resource_type: i8,
        name: Option<&str>,
        pattern_type: i8,
        principal: Option<&str>,
        host: Option<&str>,
        operation: i8,
        permission: i8,
    ) -> Result<AclFilter, String> {
        const ANY: i8 = 1;
        let unknown = |what: &str, code: i8| format!("the filter's {what} {code} is unknown");
        let resource_type = match resource_type {
            ANY => None,
            code => {
                Some(ResourceType::from_code(code).ok_or_else(|| unknown("resource type", code))?)
            }
        };
        let pattern = match pattern_type {
            ANY => PatternFilter::Any,
            2 => PatternFilter::Match,
            code => PatternFilter::Exactly(
                PatternType::from_code(code).ok_or_else(|| unknown("pattern type", code))?,
            ),
        };
        let operation = match operation {
            ANY => None,
            code => Some(AclOperation::from_code(code).ok_or_else(|| unknown("operation", code))?),
        };
        let permission = match permission {
            ANY => None,
            code => {
                Some(AclPermission::from_code(code).ok_or_else(|| unknown("permission", code))?)
            }
        };
        // A host filter that is an address matches however the address was written.
        let host = host.map(|h| canonical_host(h).unwrap_or_else(|_| h.to_string()));
        Ok(AclFilter {
            resource_type,
            name: name.map(str::to_string),
            pattern,
            principal: principal.map(str::to_string),
            host,
            operation,
            permission,
        })
    }

    /// Whether the filter matches the binding (Kafka's `AclBindingFilter.matches`).
    pub fn matches(&self, binding: &AclBinding) -> bool {
        fn field<T: PartialEq + ?Sized>(filter: Option<&T>, value: &T) -> bool {
            filter.is_none_or(|f| f == value)
        }
        field(self.resource_type.as_ref(), &binding.resource_type)
            && self.pattern_matches(binding)
            && field(self.principal.as_deref(), binding.principal.as_str())
            && field(self.host.as_deref(), binding.host.as_str())
            && field(self.operation.as_ref(), &binding.operation)
            && field(self.permission.as_ref(), &binding.permission)
    }

    fn pattern_matches(&self, binding: &AclBinding) -> bool {
        let exact = |name: &str| name == binding.name;
        match (self.pattern, self.name.as_deref()) {
            (PatternFilter::Exactly(p), _) if p != binding.pattern_type => false,
            (_, None) => true,
            (PatternFilter::Any | PatternFilter::Exactly(_), Some(name)) => exact(name),
            (PatternFilter::Match, Some(name)) => match binding.pattern_type {
                PatternType::Literal => exact(name) || binding.name == WILDCARD,
                PatternType::Prefixed => name.starts_with(binding.name.as_str()),
            },
        }
    }
}
