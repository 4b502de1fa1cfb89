//! ACL helpers shared by `acl.rs` and `acl_refusals.rs`: Kafka's numeric codes for
//! resource types, pattern types, operations and permissions, and CreateAcls sent raw by
//! a principal that may (the operator). Included with `#[path = "common/acl.rs"] mod acl;`
//! next to `mod common;`.
#![allow(dead_code)]

use kafka_protocol::messages::create_acls_request::{AclCreation, CreateAclsRequest};
use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind};
use kafka_protocol::protocol::StrBytes;

use crate::common::RawClient;

pub const ANY: i8 = 1;
// Resource types.
pub const TOPIC: i8 = 2;
pub const GROUP: i8 = 3;
pub const CLUSTER: i8 = 4;
pub const TRANSACTIONAL_ID: i8 = 5;
// Pattern types.
pub const LITERAL: i8 = 3;
pub const PREFIXED: i8 = 4;
// Operations.
pub const READ: i8 = 3;
pub const WRITE: i8 = 4;
pub const CREATE: i8 = 5;
pub const DELETE: i8 = 6;
pub const ALTER: i8 = 7;
pub const DESCRIBE: i8 = 8;
pub const DESCRIBE_CONFIGS: i8 = 10;
pub const ALTER_CONFIGS: i8 = 11;
pub const IDEMPOTENT_WRITE: i8 = 12;
// Permissions.
pub const DENY: i8 = 2;
pub const ALLOW: i8 = 3;

/// One binding: (resource type, name, pattern type), principal, operation, permission;
/// any host.
pub fn binding(resource: (i8, &str, i8), who: &str, operation: i8, permission: i8) -> AclCreation {
    AclCreation::default()
        .with_resource_type(resource.0)
        .with_resource_name(StrBytes::from_string(resource.1.to_string()))
        .with_resource_pattern_type(resource.2)
        .with_principal(StrBytes::from_string(who.to_string()))
        .with_host(StrBytes::from_static_str("*"))
        .with_operation(operation)
        .with_permission_type(permission)
}

/// CreateAcls v3; every creation must succeed.
pub fn create_acls(client: &mut RawClient, creations: Vec<AclCreation>) {
    let request = RequestKind::CreateAcls(CreateAclsRequest::default().with_creations(creations));
    let ResponseKind::CreateAcls(response) = client.call(ApiKey::CreateAcls, 3, request) else {
        panic!("not a CreateAcls response")
    };
    for result in response.results {
        assert_eq!(result.error_code, 0, "{:?}", result.error_message);
    }
}

/// ALLOW `operation` on one LITERAL resource to `who`.
pub fn allow(client: &mut RawClient, resource_type: i8, name: &str, who: &str, operation: i8) {
    create_acls(client, vec![binding((resource_type, name, LITERAL), who, operation, ALLOW)]);
}
