//! `shardlog acl add|list|remove`: CreateAcls, DescribeAcls and DeleteAcls, as Kafka's
//! `kafka-acls.sh --add|--list|--remove`. The command's own principal is the connection's
//! (User:ANONYMOUS over PLAINTEXT), so with `authorizer = true` it needs ALTER (add,
//! remove) or DESCRIBE (list) on the cluster, e.g. by being in `super_users`.

use clap::{Args, Subcommand};
use kafka_protocol::messages::create_acls_request::{AclCreation, CreateAclsRequest};
use kafka_protocol::messages::delete_acls_request::{DeleteAclsFilter, DeleteAclsRequest};
use kafka_protocol::messages::describe_acls_request::DescribeAclsRequest;
use serde::Serialize;
use shardlog_shards::acl::{
    AclOperation, AclPermission, PatternType, ResourceType, CLUSTER_RESOURCE,
};

use super::output::{print_json, Table};
use super::{check, emit, str_bytes, AdminArgs, OutputFormat};

/// Kafka's filter codes for "any".
const ANY: i8 = 1;
const MATCH: i8 = 2;
const NO_RESOURCE: &str = "name a resource: --topic, --group, --transactional-id or --cluster";

/// Sets a filter's fields (DescribeAclsRequest and DeleteAclsFilter are distinct generated
/// types with the same setters); any host, operation and permission.
macro_rules! with_filter {
    ($message:expr, $f:expr) => {
        $message
            .with_resource_type_filter($f.resource_type)
            .with_resource_name_filter($f.name.as_deref().map(str_bytes))
            .with_pattern_type_filter($f.pattern_type)
            .with_principal_filter($f.principal.as_deref().map(str_bytes))
            .with_host_filter(None)
            .with_operation(ANY)
            .with_permission_type(ANY)
    };
}

#[derive(Subcommand, Debug)]
pub enum AclCommand {
    /// Allow (or with --deny, deny) principals operations on a resource.
    Add {
        #[command(flatten)]
        resource: ResourceArgs,
        /// Principal, Type:name (User:alice; User:* for everyone). Repeatable.
        #[arg(long = "principal", required = true)]
        principals: Vec<String>,
        /// Operation: read, write, create, delete, alter, describe, cluster-action,
        /// describe-configs, alter-configs, idempotent-write, all. Repeatable.
        #[arg(long = "operation", required = true, value_parser = operation)]
        operations: Vec<AclOperation>,
        /// The host the principal connects from (an IP address), or * for any.
        #[arg(long, default_value = "*")]
        host: String,
        /// A DENY ACL (DENY wins over ALLOW) instead of ALLOW.
        #[arg(long)]
        deny: bool,
    },
    /// List ACLs, all of them or those of a resource or principal.
    List {
        #[command(flatten)]
        filter: FilterArgs,
    },
    /// Remove the ACLs a filter matches (a resource is required); prints what was removed.
    Remove {
        #[command(flatten)]
        filter: FilterArgs,
    },
}

/// Which resource: exactly one of the four, a PREFIXED name with --prefixed.
#[derive(Args, Debug)]
#[group(required = false, multiple = false, id = "resource")]
pub struct ResourceSelector {
    /// A topic name (* for every topic).
    #[arg(long)]
    topic: Option<String>,
    /// A consumer group id (* for every group).
    #[arg(long)]
    group: Option<String>,
    /// A transactional id (* for every one).
    #[arg(long)]
    transactional_id: Option<String>,
    /// The cluster.
    #[arg(long)]
    cluster: bool,
}

#[derive(Args, Debug)]
pub struct ResourceArgs {
    #[command(flatten)]
    selector: ResourceSelector,
    /// The name is a prefix: the ACL applies to every resource whose name starts with it.
    #[arg(long)]
    prefixed: bool,
}

#[derive(Args, Debug)]
pub struct FilterArgs {
    #[command(flatten)]
    resource: ResourceArgs,
    /// Only this principal's ACLs.
    #[arg(long)]
    principal: Option<String>,
    /// With a resource: list every ACL that applies to it (literal, `*` and prefixes),
    /// not only those naming it exactly.
    #[arg(long, conflicts_with = "prefixed")]
    matching: bool,
}

fn operation(text: &str) -> Result<AclOperation, String> {
    AclOperation::parse(text).ok_or_else(|| format!("unknown operation '{text}'"))
}

impl ResourceSelector {
    fn resource(&self) -> Option<(ResourceType, String)> {
        let named = |kind, name: &Option<String>| name.clone().map(|n| (kind, n));
        named(ResourceType::Topic, &self.topic)
            .or_else(|| named(ResourceType::Group, &self.group))
            .or_else(|| named(ResourceType::TransactionalId, &self.transactional_id))
            .or_else(|| self.cluster.then(|| (ResourceType::Cluster, CLUSTER_RESOURCE.into())))
    }
}

pub fn run(command: AclCommand, admin: &AdminArgs) -> Result<(), String> {
    let mut client = admin.connect()?;
    match command {
        AclCommand::Add { resource, principals, operations, host, deny } => {
            let (kind, name) = resource
                .selector
                .resource()
                .ok_or("name a resource: --topic, --group, --transactional-id or --cluster")?;
            let pattern =
                if resource.prefixed { PatternType::Prefixed } else { PatternType::Literal };
            let permission = if deny { AclPermission::Deny } else { AclPermission::Allow };
            let mut creations = Vec::new();
            for principal in &principals {
                for operation in &operations {
                    creations.push(
                        AclCreation::default()
                            .with_resource_type(kind.code())
                            .with_resource_name(str_bytes(&name))
                            .with_resource_pattern_type(pattern.code())
                            .with_principal(str_bytes(principal))
                            .with_host(str_bytes(&host))
                            .with_operation(operation.code())
                            .with_permission_type(permission.code()),
                    );
                }
            }
            let count = creations.len();
            let response = client.call(&CreateAclsRequest::default().with_creations(creations))?;
            for result in &response.results {
                check(result.error_code, "ACL", result.error_message.as_deref())?;
            }
            match admin.format {
                OutputFormat::Table => emit(&format!("created {count} ACL(s)\n")),
                OutputFormat::Json => print_json(&serde_json::json!({"created": count})),
            }
        }
        AclCommand::List { filter } => {
            let f = Filter::of(&filter)?;
            let request = with_filter!(DescribeAclsRequest::default(), f);
            let response = client.call(&request)?;
            check(response.error_code, "listing ACLs", response.error_message.as_deref())?;
            let rows = response.resources.iter().flat_map(|r| {
                r.acls.iter().map(|a| {
                    let resource = (r.resource_type, r.resource_name.as_str(), r.pattern_type);
                    AclRow::new(resource, (&a.principal, &a.host, a.operation, a.permission_type))
                })
            });
            print_rows(admin.format, rows.collect())
        }
        AclCommand::Remove { filter } => {
            if filter.resource.selector.resource().is_none() {
                return Err(NO_RESOURCE.into());
            }
            let f = Filter::of(&filter)?;
            let filter = with_filter!(DeleteAclsFilter::default(), f);
            let request = DeleteAclsRequest::default().with_filters(vec![filter]);
            let response = client.call(&request)?;
            let mut rows = Vec::new();
            for result in &response.filter_results {
                check(result.error_code, "removing ACLs", result.error_message.as_deref())?;
                rows.extend(result.matching_acls.iter().map(|a| {
                    let resource = (a.resource_type, a.resource_name.as_str(), a.pattern_type);
                    AclRow::new(resource, (&a.principal, &a.host, a.operation, a.permission_type))
                }));
            }
            print_rows(admin.format, rows)
        }
    }
}

/// A DescribeAcls / DeleteAcls filter from the flags.
struct Filter {
    resource_type: i8,
    name: Option<String>,
    pattern_type: i8,
    principal: Option<String>,
}

impl Filter {
    fn of(args: &FilterArgs) -> Result<Filter, String> {
        let resource = args.resource.selector.resource();
        let pattern_type = match (resource.is_some(), args.resource.prefixed, args.matching) {
            (_, true, _) => PatternType::Prefixed.code(),
            (true, false, true) => MATCH,
            _ => ANY,
        };
        Ok(Filter {
            resource_type: resource.as_ref().map_or(ANY, |(kind, _)| kind.code()),
            name: resource.map(|(_, name)| name),
            pattern_type,
            principal: args.principal.clone(),
        })
    }
}

#[derive(Serialize)]
struct AclRow {
    resource_type: String,
    name: String,
    pattern_type: String,
    principal: String,
    host: String,
    operation: String,
    permission: String,
}

impl AclRow {
    /// From the wire: (resource type, name, pattern type) and (principal, host, operation,
    /// permission).
    fn new(resource: (i8, &str, i8), entry: (&str, &str, i8, i8)) -> AclRow {
        let ((resource_type, name, pattern_type), (principal, host, operation, permission)) =
            (resource, entry);
        let or_code = |name: Option<&str>, code: i8| name.map_or(code.to_string(), str::to_string);
        AclRow {
            resource_type: or_code(
                ResourceType::from_code(resource_type).map(|t| t.name()),
                resource_type,
            ),
            name: name.to_string(),
            pattern_type: or_code(
                PatternType::from_code(pattern_type).map(|p| p.name()),
                pattern_type,
            ),
            principal: principal.to_string(),
            host: host.to_string(),
            operation: or_code(AclOperation::from_code(operation).map(|o| o.name()), operation),
            permission: or_code(AclPermission::from_code(permission).map(|p| p.name()), permission),
        }
    }
}

fn print_rows(format: OutputFormat, rows: Vec<AclRow>) -> Result<(), String> {
    match format {
        OutputFormat::Json => print_json(&rows),
        OutputFormat::Table => {
            let mut table = Table::new(&[
                "RESOURCE",
                "NAME",
                "PATTERN",
                "PRINCIPAL",
                "HOST",
                "OPERATION",
                "PERMISSION",
            ]);
            for r in rows {
                table.row(vec![
                    r.resource_type,
                    r.name,
                    r.pattern_type,
                    r.principal,
                    r.host,
                    r.operation,
                    r.permission,
                ]);
            }
            emit(&table.render())
        }
    }
}
