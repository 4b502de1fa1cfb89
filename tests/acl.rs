//! Authorization (docs/security.md, "ACLs") with real clients: librdkafka over SSL with
//! two client certificates (two principals) against a broker with `authorizer = true`,
//! and raw CreateAcls / DescribeAcls / DeleteAcls from the operator's PLAINTEXT listener
//! (User:ANONYMOUS, a super user here) and over TLS (a principal that may not).

#[path = "common/acl.rs"]
mod acl;
mod common;
#[path = "common/tls.rs"]
mod tls;

use std::path::Path;
use std::time::Duration;

use acl::{binding, create_acls, ALLOW, ALTER, ANY, CLUSTER, DENY, GROUP, LITERAL, PREFIXED};
use acl::{READ, TOPIC, WRITE};
use common::{Broker, RawClient};
use kafka_protocol::messages::create_acls_request::CreateAclsRequest;
use kafka_protocol::messages::delete_acls_request::{DeleteAclsFilter, DeleteAclsRequest};
use kafka_protocol::messages::describe_acls_request::DescribeAclsRequest;
use kafka_protocol::messages::list_offsets_request::{
    ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic,
};
use kafka_protocol::messages::metadata_request::{MetadataRequest, MetadataRequestTopic};
use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind, TopicName};
use kafka_protocol::protocol::StrBytes;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{FutureProducer, FutureRecord};
use tls::{read_values, ssl_client, tls_connect, two_listener_broker, write, Ca};

const TOPIC_AUTHORIZATION_FAILED: i16 = 29;
const CLUSTER_AUTHORIZATION_FAILED: i16 = 31;

fn principal(name: &str) -> String {
    format!("User:CN={name},OU=eng,O=Example")
}

/// Client certificates for alice, bob and admin, signed by a CA the broker trusts.
struct Clients {
    dir: tempfile::TempDir,
    ca_file: String,
    alice: (String, String),
}

impl Clients {
    fn new() -> Clients {
        let dir = tempfile::tempdir().unwrap();
        let ca = Ca::new("client CA");
        let ca_file = ca.write(dir.path(), "client-ca.pem").display().to_string();
        let mut alice = None;
        for name in ["alice", "bob", "admin"] {
            let (cert, key) = ca.issue_client(name);
            write(dir.path(), &format!("{name}.pem"), &cert);
            write(dir.path(), &format!("{name}.key"), &key);
            if name == "alice" {
                alice = Some((cert, key));
            }
        }
        Clients { dir, ca_file, alice: alice.unwrap() }
    }

    /// librdkafka over the SSL listener as `name`.
    fn config(&self, broker: &Broker, ssl_port: u16, name: &str) -> ClientConfig {
        let file = |ext: &str| path(self.dir.path(), &format!("{name}.{ext}"));
        let mut config = ssl_client(broker, ssl_port);
        config
            .set("ssl.certificate.location", file("pem"))
            .set("ssl.key.location", file("key"))
            .set("message.timeout.ms", "10000");
        config
    }
}

fn path(dir: &Path, name: &str) -> String {
    dir.join(name).display().to_string()
}

/// One core; PLAINTEXT for the operator (User:ANONYMOUS, super user) and SSL with client
/// certificates; the authorizer on, admin's certificate a super user too.
fn start(clients: &Clients) -> (Broker, u16) {
    let super_users = format!("User:ANONYMOUS;{}", principal("admin"));
    let extra = [
        "--tls-client-ca-file",
        &clients.ca_file,
        "--authorizer",
        "true",
        "--super-users",
        &super_users,
    ];
    two_listener_broker(1, &extra, &[])
}

/// Each record's delivery: Ok, or the error code librdkafka reports.
fn produce(config: &ClientConfig, topic: &str, count: usize) -> Vec<Result<(), RDKafkaErrorCode>> {
    let producer: FutureProducer = config.clone().set("acks", "all").create().unwrap();
    common::runtime().block_on(async {
        let mut results = Vec::new();
        for i in 0..count {
            let value = format!("v-{i}");
            let record = FutureRecord::<(), _>::to(topic).payload(&value).partition(0);
            results.push(match producer.send(record, Duration::from_secs(10)).await {
                Ok(_) => Ok(()),
                Err((KafkaError::MessageProduction(code), _)) => Err(code),
                Err((other, _)) => panic!("produce to {topic}: {other}"),
            });
        }
        results
    })
}

/// Every ACL as (resource type, name, pattern type, principal, operation, permission).
fn describe_acls(client: &mut RawClient) -> Vec<(i8, String, i8, String, i8, i8)> {
    let request = DescribeAclsRequest::default()
        .with_resource_name_filter(None)
        .with_principal_filter(None)
        .with_host_filter(None)
        .with_resource_type_filter(ANY)
        .with_pattern_type_filter(ANY)
        .with_operation(ANY)
        .with_permission_type(ANY);
    let response = client.call(ApiKey::DescribeAcls, 3, RequestKind::DescribeAcls(request));
    let ResponseKind::DescribeAcls(response) = response else { panic!("{response:?}") };
    assert_eq!(response.error_code, 0);
    let mut acls: Vec<_> = response
        .resources
        .iter()
        .flat_map(|r| {
            r.acls.iter().map(|a| {
                let name = r.resource_name.to_string();
                (
                    r.resource_type,
                    name,
                    r.pattern_type,
                    a.principal.to_string(),
                    a.operation,
                    a.permission_type,
                )
            })
        })
        .collect();
    acls.sort();
    acls
}

/// The high watermark of partition 0, asked by the operator.
fn end_offset(client: &mut RawClient, topic: &str) -> i64 {
    let partition = ListOffsetsPartition::default().with_partition_index(0).with_timestamp(-1);
    let topic = ListOffsetsTopic::default()
        .with_name(TopicName(StrBytes::from_string(topic.to_string())))
        .with_partitions(vec![partition]);
    let request =
        ListOffsetsRequest::default().with_replica_id((-1).into()).with_topics(vec![topic]);
    let response = client.call(ApiKey::ListOffsets, 5, RequestKind::ListOffsets(request));
    let ResponseKind::ListOffsets(response) = response else { panic!("{response:?}") };
    let answer = &response.topics[0].partitions[0];
    assert_eq!(answer.error_code, 0);
    answer.offset
}

/// The topics `config`'s principal sees in an all-topics Metadata.
fn visible_topics(config: &ClientConfig) -> Vec<String> {
    let consumer: BaseConsumer = config.create().unwrap();
    let metadata = consumer.fetch_metadata(None, Duration::from_secs(10)).unwrap();
    let mut names: Vec<String> = metadata.topics().iter().map(|t| t.name().to_string()).collect();
    names.sort();
    names
}

#[test]
fn acls_decide_who_produces_reads_and_sees_topics_and_survive_kill_9() {
    let clients = Clients::new();
    let (mut broker, ssl_port) = start(&clients);
    let mut operator = RawClient::connect(broker.shard_addr(0));
    common::create_topic(&broker, "orders", 1);
    common::create_topic(&broker, "secret", 1);
    let alice = clients.config(&broker, ssl_port, "alice");
    let bob = clients.config(&broker, ssl_port, "bob");
    let admin = clients.config(&broker, ssl_port, "admin");

    // No ACL: alice may not write, and nothing she sent is in the log.
    let refused = produce(&alice, "orders", 2);
    assert!(
        refused.iter().all(|r| *r == Err(RDKafkaErrorCode::TopicAuthorizationFailed)),
        "{refused:?}"
    );
    assert_eq!(end_offset(&mut operator, "orders"), 0);

    // ALLOW WRITE: she can; bob, with READ on the topic and every group, reads it back.
    let orders = (TOPIC, "orders", LITERAL);
    create_acls(
        &mut operator,
        vec![
            binding(orders, &principal("alice"), WRITE, ALLOW),
            binding(orders, &principal("bob"), READ, ALLOW),
            binding((GROUP, "*", LITERAL), &principal("bob"), READ, ALLOW),
        ],
    );
    assert_eq!(produce(&alice, "orders", 3), vec![Ok(()); 3]);
    assert_eq!(read_values(&bob, "orders", 1, 3), ["v-0", "v-1", "v-2"]);

    // Metadata leaves out what a principal may not describe; a super user sees all.
    assert_eq!(visible_topics(&alice), ["orders"]);
    assert_eq!(visible_topics(&admin), ["orders", "secret"]);
    assert_eq!(produce(&admin, "secret", 1), vec![Ok(())], "a super user needs no ACL");

    // A prefixed DENY beats the literal ALLOW; nothing more is written.
    create_acls(
        &mut operator,
        vec![binding((TOPIC, "ord", PREFIXED), &principal("alice"), WRITE, DENY)],
    );
    let denied = produce(&alice, "orders", 1);
    assert_eq!(denied, vec![Err(RDKafkaErrorCode::TopicAuthorizationFailed)]);
    assert_eq!(end_offset(&mut operator, "orders"), 3);

    // Alice may not manage ACLs: over TLS with her certificate, CLUSTER_AUTHORIZATION_FAILED.
    let server_ca = std::fs::read_to_string(broker.dir.path().join("ca.pem")).unwrap();
    let ssl_addr = std::net::SocketAddr::from(([127, 0, 0, 1], ssl_port));
    let mut as_alice = tls_connect(ssl_addr, &server_ca, Some(&clients.alice)).unwrap();
    let request = CreateAclsRequest::default().with_creations(vec![binding(
        (CLUSTER, "kafka-cluster", LITERAL),
        &principal("alice"),
        ALTER,
        ALLOW,
    )]);
    let response =
        tls::call(&mut as_alice, ApiKey::CreateAcls, 3, RequestKind::CreateAcls(request)).unwrap();
    let ResponseKind::CreateAcls(response) = response else { panic!("{response:?}") };
    assert_eq!(response.results[0].error_code, CLUSTER_AUTHORIZATION_FAILED);
    // Asked by name, a topic she may not describe is an authorization error, not metadata.
    let named = MetadataRequest::default().with_topics(Some(vec![MetadataRequestTopic::default()
        .with_name(Some(TopicName(StrBytes::from_static_str("secret"))))]));
    let response =
        tls::call(&mut as_alice, ApiKey::Metadata, 9, RequestKind::Metadata(named)).unwrap();
    let ResponseKind::Metadata(response) = response else { panic!("{response:?}") };
    assert_eq!(response.topics[0].error_code, TOPIC_AUTHORIZATION_FAILED);
    assert!(response.topics[0].partitions.is_empty());

    // Every answered ACL change survives kill -9.
    let before = describe_acls(&mut operator);
    assert_eq!(before.len(), 4, "{before:?}");
    broker.kill_and_restart();
    let mut operator = RawClient::connect(broker.shard_addr(0));
    assert_eq!(describe_acls(&mut operator), before);
    let denied = produce(&alice, "orders", 1);
    assert_eq!(denied, vec![Err(RDKafkaErrorCode::TopicAuthorizationFailed)], "the DENY survived");

    // DeleteAcls answers what it removed; with the DENY gone alice writes again.
    let filter = DeleteAclsFilter::default()
        .with_resource_type_filter(TOPIC)
        .with_resource_name_filter(Some(StrBytes::from_static_str("ord")))
        .with_pattern_type_filter(PREFIXED)
        .with_principal_filter(None)
        .with_host_filter(None)
        .with_operation(ANY)
        .with_permission_type(DENY);
    let request = RequestKind::DeleteAcls(DeleteAclsRequest::default().with_filters(vec![filter]));
    let response = operator.call(ApiKey::DeleteAcls, 3, request);
    let ResponseKind::DeleteAcls(response) = response else { panic!("{response:?}") };
    let removed = &response.filter_results[0];
    assert_eq!(removed.error_code, 0);
    assert_eq!(removed.matching_acls.len(), 1);
    assert_eq!(removed.matching_acls[0].principal.as_str(), principal("alice"));
    assert_eq!(describe_acls(&mut operator).len(), 3);
    assert_eq!(produce(&alice, "orders", 1), vec![Ok(())]);
    assert_eq!(end_offset(&mut operator, "orders"), 4);
}
