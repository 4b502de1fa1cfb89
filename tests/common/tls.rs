//! Helpers shared by the tests that run SSL and SASL listeners (`listeners.rs`, `acl.rs`,
//! `sasl.rs`, `acl_refusals.rs`): certificates made with rcgen, librdkafka SSL and SASL
//! settings, brokers with a second listener, and a rustls client for raw Kafka requests
//! over TLS. Included with `#[path = "common/tls.rs"] mod tls;` next to
//! `mod common;`.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Buf;
use bytes::BytesMut;
use kafka_protocol::messages::api_versions_request::ApiVersionsRequest;
use kafka_protocol::messages::{ApiKey, RequestHeader, RequestKind, ResponseHeader, ResponseKind};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair, SanType,
};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Message, Offset, TopicPartitionList};
use shardlog_net::tls::rustls;

use crate::common::{self, eventually, free_port_range, Broker};

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

pub fn ca_file(broker: &Broker) -> String {
    broker.dir.path().join("ca.pem").display().to_string()
}

/// librdkafka settings for the SSL listener on `port`, trusting the broker's test CA.
pub fn ssl_client(broker: &Broker, port: u16) -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", format!("127.0.0.1:{port}"))
        .set("security.protocol", "ssl")
        .set("ssl.ca.location", ca_file(broker));
    config
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
    common::runtime().block_on(async {
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

/// A rustls client connection to `addr` trusting `ca_pem`, with a client certificate if
/// given; `Err` if the handshake fails.
pub fn tls_connect(
    addr: SocketAddr,
    ca_pem: &str,
    client: Option<&(String, String)>,
) -> Result<rustls::StreamOwned<rustls::ClientConnection, TcpStream>, String> {
    let mut stream = tls_stream(addr, ca_pem, client)?;
    // TLS 1.3 servers check the client certificate after the client's last handshake
    // message: a request and its answer show whether the server kept the connection.
    call(&mut stream, ApiKey::ApiVersions, 3, RequestKind::ApiVersions(api_versions()))?;
    Ok(stream)
}

/// A rustls client stream to `addr` (127.0.0.1) trusting `ca_pem`; the handshake runs with
/// the first read or write.
pub fn tls_stream(
    addr: SocketAddr,
    ca_pem: &str,
    client: Option<&(String, String)>,
) -> Result<rustls::StreamOwned<rustls::ClientConnection, TcpStream>, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_slice(ca_pem.as_bytes()).unwrap()).unwrap();
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let config = match client {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let chain = vec![CertificateDer::from_pem_slice(cert.as_bytes()).unwrap()];
            let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
            builder.with_client_auth_cert(chain, key).unwrap()
        }
    };
    let name = ServerName::from(IpAddr::V4(Ipv4Addr::LOCALHOST));
    let connection = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let socket = TcpStream::connect(addr).map_err(|e| e.to_string())?;
    socket.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    Ok(rustls::StreamOwned::new(connection, socket))
}

pub fn api_versions() -> ApiVersionsRequest {
    ApiVersionsRequest::default()
        .with_client_software_name(StrBytes::from_static_str("tls-test"))
        .with_client_software_version(StrBytes::from_static_str("1"))
}

/// One request and its response over any stream (the TLS one here).
pub fn call(
    stream: &mut impl ReadWrite,
    api_key: ApiKey,
    version: i16,
    body: RequestKind,
) -> Result<ResponseKind, String> {
    let header = RequestHeader::default()
        .with_request_api_key(api_key as i16)
        .with_request_api_version(version)
        .with_correlation_id(7);
    let mut frame = BytesMut::new();
    header.encode(&mut frame, api_key.request_header_version(version)).unwrap();
    body.encode(&mut frame, version).unwrap();
    let mut out = (frame.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(&frame);
    stream.write_all(&out).map_err(|e| e.to_string())?;
    let mut len = [0u8; 4];
    stream.read_exact(&mut len).map_err(|e| e.to_string())?;
    let mut response = vec![0u8; u32::from_be_bytes(len) as usize];
    stream.read_exact(&mut response).map_err(|e| e.to_string())?;
    let mut response = bytes::Bytes::from(response);
    let header = ResponseHeader::decode(&mut response, api_key.response_header_version(version))
        .map_err(|e| e.to_string())?;
    assert_eq!(header.correlation_id, 7);
    let body = ResponseKind::decode(api_key, &mut response, version).map_err(|e| e.to_string())?;
    assert_eq!(response.remaining(), 0);
    Ok(body)
}

pub trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

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

/// A broker with a PLAINTEXT listener on its usual port and an SSL one on `ssl_port`.
pub fn two_listener_broker(cores: usize, extra: &[&str], env: &[(&str, &str)]) -> (Broker, u16) {
    let mut ssl_port = 0;
    let broker = Broker::start_configured(cores, env, |b| {
        ssl_port = second_listener_port(b.port, cores);
        let tls = BrokerTls::new(b.dir.path());
        let listeners = format!("PLAINTEXT://127.0.0.1:{},SSL://127.0.0.1:{ssl_port}", b.port);
        let mut args = vec!["--listeners".to_string(), listeners];
        args.extend(tls.args());
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    });
    (broker, ssl_port)
}

/// A broker with a SASL listener (`protocol`: SASL_PLAINTEXT or SASL_SSL) on its own ports
/// and PLAINTEXT on the usual ones (listed last: once it accepts, the SASL ports are bound
/// too), every mechanism enabled, and the bootstrap user `user` (name, password). The
/// SASL listener's port.
pub fn sasl_broker(
    cores: usize,
    protocol: &str,
    user: (&str, &str),
    extra: &[&str],
) -> (Broker, u16) {
    let mut sasl_port = 0;
    let env = [("SHARDLOG_SASL_BOOTSTRAP_PASSWORD", user.1)];
    let broker = Broker::start_configured(cores, &env, |b| {
        sasl_port = second_listener_port(b.port, cores);
        let listeners =
            format!("{protocol}://127.0.0.1:{sasl_port},PLAINTEXT://127.0.0.1:{}", b.port);
        let mut args = vec![
            "--listeners".to_string(),
            listeners,
            "--sasl-mechanisms".into(),
            "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512".into(),
            "--sasl-bootstrap-user".into(),
            user.0.into(),
        ];
        if protocol == "SASL_SSL" {
            args.extend(BrokerTls::new(b.dir.path()).args());
        }
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    });
    (broker, sasl_port)
}

/// librdkafka settings for the SASL_PLAINTEXT listener on `port`.
pub fn sasl_client(port: u16, mechanism: &str, user: &str, password: &str) -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", format!("127.0.0.1:{port}"))
        .set("security.protocol", "sasl_plaintext")
        .set("sasl.mechanism", mechanism)
        .set("sasl.username", user)
        .set("sasl.password", password);
    config
}
