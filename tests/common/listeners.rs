//! Helpers for tests of listeners (TLS, SASL): certificates made by rcgen in the broker's
//! temp dir (never committed keys), a port range for a second listener, and librdkafka
//! producing and reading back over any client settings.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair, SanType,
};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Message, Offset, TopicPartitionList};
use std::net::{IpAddr, Ipv4Addr};

use super::{eventually, free_port_range};

/// A certificate authority made for one test.
pub struct Ca {
    pub cert: rcgen::Certificate,
    pub key: KeyPair,
}

impl Ca {
    pub fn new(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        Ca { cert, key }
    }

    /// A certificate for 127.0.0.1 and localhost (what the brokers advertise here).
    pub fn issue_server(&self) -> (String, String) {
        let mut params = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        params.subject_alt_names.push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
        params.distinguished_name.push(DnType::CommonName, "shardlog-test-broker");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.issue(params)
    }

    /// A client certificate whose subject is O=Example, OU=eng, CN=`name`.
    pub fn issue_client(&self, name: &str) -> (String, String) {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(DnType::OrganizationName, "Example");
        params.distinguished_name.push(DnType::OrganizationalUnitName, "eng");
        params.distinguished_name.push(DnType::CommonName, name);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.issue(params)
    }

    pub fn issue(&self, params: CertificateParams) -> (String, String) {
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.cert, &self.key).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    pub fn write(&self, dir: &Path, name: &str) -> PathBuf {
        write(dir, name, &self.cert.pem())
    }
}

pub fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    // Written aside and renamed, as an operator replacing certificates should.
    let aside = dir.join(format!("{name}.new"));
    std::fs::write(&aside, text).unwrap();
    std::fs::rename(&aside, &path).unwrap();
    path
}

/// The files of a broker's SSL listener, in `dir`.
pub struct BrokerTls {
    pub ca: Ca,
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
}

impl BrokerTls {
    pub fn new(dir: &Path) -> BrokerTls {
        let ca = Ca::new("shardlog test CA");
        ca.write(dir, "ca.pem");
        let (cert, key) = ca.issue_server();
        let cert_file = write(dir, "broker.pem", &cert);
        let key_file = write(dir, "broker.key", &key);
        BrokerTls { ca, cert_file, key_file }
    }

    pub fn args(&self) -> Vec<String> {
        let path = |p: &PathBuf| p.display().to_string();
        vec![
            "--tls-cert-file".into(),
            path(&self.cert_file),
            "--tls-key-file".into(),
            path(&self.key_file),
        ]
    }
}

/// A free port range for a second listener that does not overlap the broker's own.
pub fn second_listener_port(broker_port: u16, cores: usize) -> u16 {
    loop {
        let port = free_port_range(cores + 1);
        let span = cores as u16 + 2;
        if port + span <= broker_port || broker_port + span <= port {
            return port;
        }
    }
}

/// Produces `count` records over `config`'s connection, round-robin over `partitions`;
/// each must be acknowledged within `timeout`. Returns how many were.
pub fn produce(
    config: &ClientConfig,
    topic: &str,
    partitions: i32,
    tag: &str,
    count: usize,
) -> usize {
    let mut config = config.clone();
    if config.get("message.timeout.ms").is_none() {
        config.set("message.timeout.ms", "20000");
    }
    let producer: FutureProducer =
        config.set("acks", "all").set("linger.ms", "1").create().expect("a librdkafka producer");
    super::runtime().block_on(async {
        let mut pending = Vec::new();
        for i in 0..count {
            let value = format!("{tag}-{i}");
            let record =
                FutureRecord::<(), _>::to(topic).payload(&value).partition(i as i32 % partitions);
            // Queued at once (the payload is copied); refused only if the queue is full.
            pending.push(producer.send_result(record).map_err(|(e, _)| e));
        }
        let mut acknowledged = 0;
        for p in pending.into_iter().flatten() {
            acknowledged += matches!(p.await, Ok(Ok(_))) as usize;
        }
        acknowledged
    })
}

/// Every value in `topic`'s partitions, read from the beginning over `config`.
pub fn read_values(
    config: &ClientConfig,
    topic: &str,
    partitions: i32,
    expected: usize,
) -> Vec<String> {
    let consumer: BaseConsumer = config
        .clone()
        .set("group.id", "listeners-test-reader")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut assignment = TopicPartitionList::new();
    for p in 0..partitions {
        assignment.add_partition_offset(topic, p, Offset::Beginning).unwrap();
    }
    consumer.assign(&assignment).unwrap();
    let mut values = Vec::new();
    eventually(Duration::from_secs(60), "every record read back", || {
        if let Some(message) = consumer.poll(Duration::from_millis(200)) {
            let m = message.expect("a record");
            values.push(String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned());
        }
        values.len() >= expected
    });
    values.sort();
    values
}
