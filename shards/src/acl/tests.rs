use std::net::IpAddr;

use super::*;

fn binding(
    principal: &str,
    permission: AclPermission,
    operation: AclOperation,
    resource_type: ResourceType,
    pattern_type: PatternType,
    name: &str,
) -> AclBinding {
    AclBinding {
        resource_type,
        pattern_type,
        name: name.to_string(),
        principal: principal.to_string(),
        host: WILDCARD.to_string(),
        operation,
        permission,
    }
}

fn allow(principal: &str, operation: AclOperation, topic: &str) -> AclBinding {
    binding(
        principal,
        AclPermission::Allow,
        operation,
        ResourceType::Topic,
        PatternType::Literal,
        topic,
    )
}

fn deny(principal: &str, operation: AclOperation, topic: &str) -> AclBinding {
    binding(
        principal,
        AclPermission::Deny,
        operation,
        ResourceType::Topic,
        PatternType::Literal,
        topic,
    )
}

fn table(bindings: &[AclBinding]) -> AclTable {
    let mut table = AclTable::default();
    for b in bindings {
        table.insert(b.clone());
    }
    table
}

fn alice() -> Requester<'static> {
    Requester { principal: "User:alice", host: Some("10.0.0.1".parse().unwrap()) }
}

fn on(config: &AuthorizerConfig, acls: &AclTable, op: AclOperation, topic: &str) -> bool {
    config.allows(acls, alice(), op, ResourceType::Topic, topic)
}

#[test]
fn nothing_is_allowed_without_a_matching_allow() {
    use AclOperation::*;
    let config = AuthorizerConfig { enabled: true, super_users: vec![] };
    assert!(!on(&config, &AclTable::default(), Read, "orders"));
    let acls = table(&[allow("User:bob", Read, "orders"), allow("User:alice", Read, "trades")]);
    assert!(!on(&config, &acls, Read, "orders"), "another principal's ACL");
    assert!(!on(&config, &acls, Write, "trades"), "another operation");
    assert!(on(&config, &acls, Read, "trades"));
    assert!(
        !config.allows(&acls, alice(), Read, ResourceType::Group, "trades"),
        "another resource type with the same name"
    );
}

#[test]
fn the_decision_table_follows_kafkas_implications_and_deny_wins() {
    use AclOperation::*;
    let config = AuthorizerConfig::default();
    // (granted ALLOW, requested, allowed?)
    let cases = [
        (All, Read, true),
        (All, IdempotentWrite, true),
        (Read, Describe, true),
        (Write, Describe, true),
        (Delete, Describe, true),
        (Alter, Describe, true),
        (Create, Describe, false),
        (Describe, Read, false),
        (AlterConfigs, DescribeConfigs, true),
        (DescribeConfigs, AlterConfigs, false),
        (AlterConfigs, Describe, false),
        (Write, Read, false),
        (Read, Write, false),
        (ClusterAction, Describe, false),
    ];
    for (granted, requested, expected) in cases {
        let acls = table(&[allow("User:alice", granted, "t")]);
        assert_eq!(
            on(&config, &acls, requested, "t"),
            expected,
            "ALLOW {granted:?}, asks {requested:?}"
        );
    }
    // DENY matches its own operation or ALL, never by implication.
    let cases =
        [(Write, Write, false), (All, Write, false), (Read, Describe, true), (Read, Write, true)];
    for (denied, requested, expected) in cases {
        let acls = table(&[allow("User:alice", All, "t"), deny("User:alice", denied, "t")]);
        assert_eq!(
            on(&config, &acls, requested, "t"),
            expected,
            "DENY {denied:?}, asks {requested:?}"
        );
    }
}

#[test]
fn deny_beats_allow_across_wildcards_and_prefixes() {
    use AclOperation::*;
    let config = AuthorizerConfig::default();
    let prefixed_deny = binding(
        "User:*",
        AclPermission::Deny,
        Write,
        ResourceType::Topic,
        PatternType::Prefixed,
        "secret.",
    );
    let acls = table(&[allow("User:alice", Write, "*"), prefixed_deny]);
    assert!(on(&config, &acls, Write, "orders"), "the literal wildcard allows");
    assert!(!on(&config, &acls, Write, "secret.keys"), "a prefixed DENY for User:* wins");
    assert!(on(&config, &acls, Write, "secret"), "the prefix is longer than the name");
    assert!(on(&config, &acls, Describe, "secret.keys"), "DENY WRITE does not deny DESCRIBE");
}

#[test]
fn patterns_principals_and_hosts_match_as_kafka_matches_them() {
    use AclOperation::*;
    let config = AuthorizerConfig::default();
    let prefixed = binding(
        "User:alice",
        AclPermission::Allow,
        Read,
        ResourceType::Topic,
        PatternType::Prefixed,
        "eu.",
    );
    let acls = table(&[prefixed.clone(), allow("User:*", Describe, "public")]);
    assert!(on(&config, &acls, Read, "eu.trades"));
    assert!(on(&config, &acls, Read, "eu."));
    assert!(!on(&config, &acls, Read, "us.trades"));
    assert!(!on(&config, &acls, Read, "eu"));
    assert!(on(&config, &acls, Describe, "public"), "User:* matches alice");
    let bob = Requester { principal: "User:bob", host: None };
    assert!(config.allows(&acls, bob, Describe, ResourceType::Topic, "public"));
    // A literal ACL on a name that is a prefix does not act as a prefix.
    let acls = table(&[allow("User:alice", Read, "eu.")]);
    assert!(!on(&config, &acls, Read, "eu.trades"));

    let mut from_host = allow("User:alice", Read, "t");
    from_host.host = "10.0.0.1".into();
    let mut other_host = allow("User:alice", Write, "t");
    other_host.host = "10.0.0.2".into();
    let acls = table(&[from_host, other_host]);
    assert!(on(&config, &acls, Read, "t"));
    assert!(!on(&config, &acls, Write, "t"), "an ACL for another host");
    let unknown_host = Requester { principal: "User:alice", host: None };
    assert!(!config.allows(&acls, unknown_host, Read, ResourceType::Topic, "t"));
}

#[test]
fn super_users_bypass_every_acl() {
    use AclOperation::*;
    let config = AuthorizerConfig { enabled: true, super_users: vec!["User:alice".into()] };
    let acls = table(&[deny("User:alice", All, "t")]);
    assert!(on(&config, &acls, Write, "t"));
    assert!(config.allows(&acls, alice(), ClusterAction, ResourceType::Cluster, CLUSTER_RESOURCE));
    let bob = Requester { principal: "User:bob", host: None };
    assert!(!config.allows(&acls, bob, Write, ResourceType::Topic, "t"));
}

#[test]
fn the_table_holds_each_binding_once_and_removes_exactly() {
    let a = allow("User:alice", AclOperation::Read, "t");
    let p = binding(
        "User:a",
        AclPermission::Allow,
        AclOperation::Read,
        ResourceType::Topic,
        PatternType::Prefixed,
        "t",
    );
    let mut acls = AclTable::default();
    assert!(acls.insert(a.clone()));
    assert!(!acls.insert(a.clone()));
    assert!(acls.insert(p.clone()));
    assert_eq!(acls.len(), 2);
    assert!(acls.remove(&p));
    assert!(!acls.remove(&p));
    assert_eq!(acls.prefixed, 0);
    assert!(acls.remove(&a));
    assert!(acls.is_empty());
}

#[test]
fn new_bindings_are_checked_as_kafka_checks_them() {
    let ok = AclBinding::from_request(2, "t", 3, "User:alice", "*", 3, 3).unwrap();
    assert_eq!(ok, allow("User:alice", AclOperation::Read, "t"));
    let host = AclBinding::from_request(2, "t", 4, "User:alice", "::ffff:0a00:0001", 8, 2).unwrap();
    assert_eq!(host.host, "::ffff:10.0.0.1");
    let bad = [
        (1, "t", 3, "User:alice", "*", 3, 3, "resource type"),
        (2, "t", 1, "User:alice", "*", 3, 3, "pattern type"),
        (2, "t", 2, "User:alice", "*", 3, 3, "pattern type"),
        (2, "t", 3, "User:alice", "*", 1, 3, "operation"),
        (2, "t", 3, "User:alice", "*", 3, 1, "permission"),
        (2, "", 3, "User:alice", "*", 3, 3, "empty"),
        (4, "c", 3, "User:alice", "*", 7, 3, "kafka-cluster"),
        (2, "t", 3, "alice", "*", 3, 3, "Type:name"),
        (2, "t", 3, "User:", "*", 3, 3, "Type:name"),
        (2, "t", 3, "User:alice", "example.com", 3, 3, "IP address"),
    ];
    for (rt, name, pt, principal, host, op, perm, says) in bad {
        let e = AclBinding::from_request(rt, name, pt, principal, host, op, perm).unwrap_err();
        assert!(e.contains(says), "{e:?} should say {says:?}");
    }
    for op in AclOperation::ALL_OPERATIONS {
        assert_eq!(AclOperation::from_code(op.code()), Some(op));
        assert_eq!(AclOperation::parse(&op.name().to_lowercase().replace('_', "-")), Some(op));
    }
    assert_eq!(AclOperation::IdempotentWrite.code(), 12);
    assert_eq!(AclOperation::from_code(13), None);
}

#[test]
fn filters_match_as_kafkas_acl_binding_filter() {
    use AclOperation::*;
    let literal = allow("User:alice", Read, "eu.trades");
    let wildcard = allow("User:bob", Write, "*");
    let prefixed = binding(
        "User:alice",
        AclPermission::Deny,
        Read,
        ResourceType::Topic,
        PatternType::Prefixed,
        "eu.",
    );
    let group = binding(
        "User:alice",
        AclPermission::Allow,
        Read,
        ResourceType::Group,
        PatternType::Literal,
        "eu.trades",
    );
    let acls = table(&[literal.clone(), wildcard.clone(), prefixed.clone(), group.clone()]);
    let found = |filter: AclFilter| {
        let mut v: Vec<AclBinding> = acls.matching(&filter).cloned().collect();
        v.sort_by_key(|b| b.to_string());
        v
    };
    let sorted = |mut v: Vec<AclBinding>| {
        v.sort_by_key(|b| b.to_string());
        v
    };
    assert_eq!(found(AclFilter::any()).len(), 4);
    let f = |rt, name: Option<&str>, pt, principal: Option<&str>, op, perm| {
        AclFilter::from_request(rt, name, pt, principal, None, op, perm).unwrap()
    };
    // MATCH: everything that applies to the topic eu.trades.
    assert_eq!(
        found(f(2, Some("eu.trades"), 2, None, 1, 1)),
        sorted(vec![literal.clone(), wildcard.clone(), prefixed.clone()])
    );
    // ANY with a name: that exact name, any pattern type and resource type.
    assert_eq!(
        found(f(1, Some("eu.trades"), 1, None, 1, 1)),
        sorted(vec![literal.clone(), group.clone()])
    );
    assert_eq!(found(f(2, Some("eu."), 4, None, 1, 1)), vec![prefixed.clone()]);
    assert_eq!(found(f(2, None, 3, Some("User:bob"), 1, 1)), vec![wildcard.clone()]);
    assert_eq!(found(f(1, None, 1, None, 3, 2)), vec![prefixed.clone()]);
    assert!(found(f(5, None, 1, None, 1, 1)).is_empty());
    for bad in [(0, 1, 1, 1), (2, 0, 1, 1), (2, 1, 0, 1), (2, 1, 1, 9)] {
        assert!(
            AclFilter::from_request(bad.0, None, bad.1, None, None, bad.2, bad.3).is_err(),
            "{bad:?}"
        );
    }
}

#[test]
fn unknown_hosts_never_match_a_host_acl() {
    let host: IpAddr = "10.0.0.1".parse().unwrap();
    let mut b = allow("User:alice", AclOperation::Read, "t");
    b.host = "10.0.0.1".into();
    assert!(b.applies_to(Requester { principal: "User:alice", host: Some(host) }));
    assert!(!b.applies_to(Requester { principal: "User:alice", host: None }));
}

#[test]
fn the_table_round_trips_through_rkyv() {
    let acls = table(&[allow("User:alice", AclOperation::Read, "t")]);
    let bytes = crate::codec::encode_versioned(1, &acls);
    let back: AclTable = crate::codec::decode_versioned(1, "acls", &bytes).unwrap();
    assert_eq!(back, acls);
}

#[test]
fn acl_changes_replay_through_the_metadata_log_after_the_newest_snapshot() {
    use crate::metadata::TopicTable;
    use crate::metadata_log::{restore, ChangeRecord, TopicChange};
    use shardlog_storage::{InternalEntry, InternalStream};
    let entry = |snapshot: bool, payload: Vec<u8>| InternalEntry {
        stream: InternalStream::Metadata,
        snapshot,
        payload: payload.into(),
    };
    let mut table = TopicTable::new(2);
    let mut log = vec![entry(true, table.encode())];
    let change = |table: &mut TopicTable, change: TopicChange| {
        let record = ChangeRecord { base_version: table.version, changes: vec![change] };
        record.apply(table).unwrap();
        entry(false, record.encode())
    };
    let read = allow("User:alice", AclOperation::Read, "t");
    let write = deny("User:bob", AclOperation::Write, "t");
    log.push(change(&mut table, TopicChange::CreateAcls(vec![read.clone(), write.clone()])));
    log.push(entry(true, table.encode()));
    log.push(change(&mut table, TopicChange::DeleteAcls(vec![read.clone()])));
    let (restored, _) = restore(&log).unwrap().unwrap();
    assert_eq!(restored, table);
    assert_eq!(restored.acls.iter().collect::<Vec<_>>(), vec![&write]);
    assert_eq!(restored.version, 2);

    // A record that does not follow the table is refused, never guessed.
    let again = ChangeRecord {
        base_version: table.version,
        changes: vec![TopicChange::CreateAcls(vec![write.clone()])],
    };
    assert!(again.apply(&mut table.clone()).unwrap_err().contains("again"));
    let missing = ChangeRecord {
        base_version: table.version,
        changes: vec![TopicChange::DeleteAcls(vec![read])],
    };
    assert!(missing.apply(&mut table.clone()).unwrap_err().contains("not in the table"));
}

#[test]
fn the_acl_variants_leave_the_change_record_layout_of_older_records_unchanged() {
    // Change records written before ACLs are read with this type: the archived enum
    // must keep its size (the largest variant is still `Create`).
    use crate::metadata::ArchivedTopicMeta;
    use crate::metadata_log::change::ArchivedTopicChange;
    let tag_and_padding = std::mem::align_of::<ArchivedTopicMeta>();
    assert_eq!(
        std::mem::size_of::<ArchivedTopicChange>(),
        tag_and_padding + std::mem::size_of::<ArchivedTopicMeta>()
    );
}

#[test]
fn some_resource_is_allowed_unless_a_deny_covers_every_allow() {
    use AclOperation::*;
    let config = AuthorizerConfig::default();
    let any = |acls: &AclTable| config.allows_any(acls, alice(), Write, ResourceType::Topic);
    assert!(!any(&AclTable::default()));
    assert!(any(&table(&[allow("User:alice", Write, "orders")])));
    assert!(any(&table(&[allow("User:alice", All, "orders")])));
    assert!(!any(&table(&[allow("User:alice", Read, "orders")])));
    assert!(!any(&table(&[allow("User:alice", Write, "orders"), deny("User:alice", Write, "*")])));
    assert!(!any(&table(&[allow("User:alice", Write, "orders"), deny("User:*", All, "orders")])));
    let prefixed_allow = binding(
        "User:alice",
        AclPermission::Allow,
        Write,
        ResourceType::Topic,
        PatternType::Prefixed,
        "eu.",
    );
    let literal_deny = deny("User:alice", Write, "eu.");
    assert!(any(&table(&[prefixed_allow.clone(), literal_deny])), "eu.x is still writable");
    let prefixed_deny = binding(
        "User:alice",
        AclPermission::Deny,
        Write,
        ResourceType::Topic,
        PatternType::Prefixed,
        "eu",
    );
    assert!(!any(&table(&[prefixed_allow, prefixed_deny])));
    let super_user = AuthorizerConfig { enabled: true, super_users: vec!["User:alice".into()] };
    assert!(super_user.allows_any(&AclTable::default(), alice(), Write, ResourceType::Topic));
}
