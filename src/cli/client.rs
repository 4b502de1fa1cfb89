//! A small blocking Kafka client for the admin commands: one request at a time over a
//! std `TcpStream` (with TLS on SSL and SASL_SSL listeners: rustls, `security.rs`) with
//! connect, read and write timeouts. Frames are built by
//! `shardlog_net::encode_request`, the codec the load generator uses too.
//!
//! Each request type is sent at one version (`api_version`); the connection learns the
//! broker's ranges with ApiVersions first, so a request the broker does not serve fails
//! with UNSUPPORTED_VERSION in words instead of a dropped connection.

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ResponseHeader, SaslAuthenticateRequest, SaslHandshakeRequest,
};
use kafka_protocol::protocol::{Decodable, HeaderVersion, Request};

use shardlog_net::sasl::scram::{random_nonce, ScramClient};
use shardlog_net::sasl::Mechanism;
use shardlog_net::tls::rustls::pki_types::ServerName;
use shardlog_net::tls::rustls::{ClientConfig, ClientConnection, StreamOwned};

use super::errors::check;
use super::security::ClientSecurity;
use super::str_bytes;

/// Connect, read and write timeout of every admin connection.
const IO_TIMEOUT: Duration = Duration::from_secs(30);
/// A response larger than this is refused rather than allocated (consume's fetches ask
/// for at most a few MiB).
const MAX_RESPONSE_BYTES: usize = 256 << 20;

/// The version this client sends of each API: the newest that still names topics (and
/// that the broker's handler table serves).
fn api_version(api_key: ApiKey) -> i16 {
    match api_key {
        ApiKey::Produce => 9,
        ApiKey::Fetch => 12,
        ApiKey::ListOffsets => 6,
        ApiKey::Metadata => 12,
        ApiKey::CreateTopics => 7,
        ApiKey::DeleteTopics => 6,
        ApiKey::DescribeConfigs => 4,
        ApiKey::IncrementalAlterConfigs => 1,
        ApiKey::FindCoordinator => 3,
        ApiKey::ListGroups => 4,
        ApiKey::DescribeGroups => 5,
        ApiKey::OffsetFetch => 7,
        ApiKey::CreateAcls | ApiKey::DescribeAcls | ApiKey::DeleteAcls => 3,
        ApiKey::SaslHandshake => 1,
        ApiKey::SaslAuthenticate => 1,
        _ => 0,
    }
}

/// How the admin commands log in to a SASL listener (`--sasl-username`...).
#[derive(Clone)]
pub struct SaslLogin {
    pub mechanism: Mechanism,
    pub username: String,
    pub password: String,
}

/// The bytes of a connection: bare TCP or TLS over it.
trait Transport: Read + Write {}
impl<T: Read + Write> Transport for T {}

/// A blocking connection to one broker.
pub struct Client {
    stream: Box<dyn Transport>,
    addr: String,
    next_correlation_id: i32,
    /// The broker's (min, max) version of each API it serves.
    versions: HashMap<i16, (i16, i16)>,
    /// How this connection was made, for the next ones (`connect_to`).
    security: ClientSecurity,
}

impl Client {
    /// Connects to another broker (a coordinator, another shard) as this one did.
    pub fn connect_to(&self, addr: &str) -> Result<Client, String> {
        Client::connect(addr, self.security.clone())
    }

    /// Connects to `addr` (HOST:PORT), with TLS if `security` says so, learns the broker's
    /// API versions and, with a login, authenticates with SASL.
    pub fn connect(addr: &str, security: ClientSecurity) -> Result<Client, String> {
        let unreachable = |e: &dyn std::fmt::Display| format!("cannot reach broker at {addr}: {e}");
        let socket_addr = addr
            .to_socket_addrs()
            .map_err(|e| unreachable(&e))?
            .next()
            .ok_or_else(|| unreachable(&"the name resolves to no address"))?;
        let stream =
            TcpStream::connect_timeout(&socket_addr, IO_TIMEOUT).map_err(|e| unreachable(&e))?;
        let setup = (|| {
            stream.set_nodelay(true)?;
            stream.set_read_timeout(Some(IO_TIMEOUT))?;
            stream.set_write_timeout(Some(IO_TIMEOUT))
        })();
        setup.map_err(|e| unreachable(&e))?;
        let stream: Box<dyn Transport> = match &security.tls {
            None => Box::new(stream),
            Some(config) => Box::new(tls_handshake(addr, config, stream)?),
        };
        let login = security.login.clone();
        let mut client = Client {
            stream,
            addr: addr.to_string(),
            next_correlation_id: 1,
            versions: HashMap::new(),
            security,
        };
        let response = client.send_and_receive(&ApiVersionsRequest::default(), 0)?;
        check(response.error_code, &format!("broker at {addr}"), None)?;
        for api in response.api_keys {
            client.versions.insert(api.api_key, (api.min_version, api.max_version));
        }
        if let Some(login) = login {
            client.authenticate(&login)?;
        }
        Ok(client)
    }

    /// SaslHandshake, then SaslAuthenticate until the mechanism is done.
    fn authenticate(&mut self, login: &SaslLogin) -> Result<(), String> {
        let subject = format!("SASL login as '{}' at {}", login.username, self.addr);
        let mechanism = login.mechanism.name();
        let handshake = SaslHandshakeRequest::default().with_mechanism(str_bytes(mechanism));
        let response = self.call(&handshake)?;
        check(response.error_code, &subject, None)?;
        let mut exchange = |token: Vec<u8>| -> Result<Vec<u8>, String> {
            let request = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(token));
            let response = self.call(&request)?;
            check(response.error_code, &subject, response.error_message.as_deref())?;
            Ok(response.auth_bytes.to_vec())
        };
        match login.mechanism {
            Mechanism::Plain => {
                let token = format!("\0{}\0{}", login.username, login.password);
                exchange(token.into_bytes()).map(|_| ())
            }
            Mechanism::Scram(scram) => {
                let nonce = random_nonce();
                let mut client = ScramClient::new(scram, &login.username, &login.password, &nonce);
                let server_first = exchange(client.client_first())?;
                let client_final = client.client_final(&server_first)?;
                let server_final = exchange(client_final)?;
                client.check_server_final(&server_final)
            }
        }
    }

    /// Sends one request at this client's version of its API and waits for the answer.
    pub fn call<R: Request>(&mut self, request: &R) -> Result<R::Response, String> {
        let api_key =
            ApiKey::try_from(R::KEY).map_err(|_| format!("unknown api key {}", R::KEY))?;
        let version = api_version(api_key);
        match self.versions.get(&R::KEY) {
            Some((min, max)) if (*min..=*max).contains(&version) => {}
            _ => {
                return Err(format!(
                    "the broker at {} does not support {api_key:?} v{version} (API key {}), \
                     which this command needs (UNSUPPORTED_VERSION)",
                    self.addr,
                    R::KEY
                ))
            }
        }
        self.send_and_receive(request, version)
    }

    fn send_and_receive<R: Request>(
        &mut self,
        request: &R,
        version: i16,
    ) -> Result<R::Response, String> {
        let correlation_id = self.next_correlation_id;
        self.next_correlation_id = self.next_correlation_id.wrapping_add(1);
        let mut frame = BytesMut::new();
        shardlog_net::encode_request(&mut frame, correlation_id, "shardlog-cli", version, request)
            .map_err(|e| format!("cannot encode request: {e}"))?;
        self.stream.write_all(&frame).map_err(|e| self.io_error(e))?;
        let mut frame = self.read_frame()?;
        let header = ResponseHeader::decode(&mut frame, R::Response::header_version(version))
            .map_err(|e| self.protocol_error(e))?;
        if header.correlation_id != correlation_id {
            let e =
                format!("answer to request {} instead of {correlation_id}", header.correlation_id);
            return Err(self.protocol_error(e));
        }
        R::Response::decode(&mut frame, version).map_err(|e| self.protocol_error(e))
    }

    fn read_frame(&mut self) -> Result<Bytes, String> {
        let mut length = [0u8; 4];
        self.stream.read_exact(&mut length).map_err(|e| self.io_error(e))?;
        let length = i32::from_be_bytes(length);
        let length = usize::try_from(length)
            .ok()
            .filter(|l| *l <= MAX_RESPONSE_BYTES)
            .ok_or_else(|| self.protocol_error(format!("response frame of {length} bytes")))?;
        let mut frame = vec![0u8; length];
        self.stream.read_exact(&mut frame).map_err(|e| self.io_error(e))?;
        Ok(Bytes::from(frame))
    }

    fn io_error(&self, e: std::io::Error) -> String {
        if e.kind() == ErrorKind::InvalidData {
            // rustls: an alert from the broker (a refused client certificate) or bad TLS.
            return format!("TLS with the broker at {} failed: {e}", self.addr);
        }
        match e.kind() {
            ErrorKind::UnexpectedEof => {
                format!("the broker at {} closed the connection", self.addr)
            }
            ErrorKind::WouldBlock | ErrorKind::TimedOut => {
                format!("no answer from the broker at {} within {IO_TIMEOUT:?}", self.addr)
            }
            _ => format!("connection to the broker at {} failed: {e}", self.addr),
        }
    }

    fn protocol_error(&self, e: impl std::fmt::Display) -> String {
        format!("cannot decode the answer of the broker at {}: {e}", self.addr)
    }
}

/// Runs the client side of the TLS handshake to `addr`, checking that the broker's
/// certificate names its host (an IP address or a DNS name).
fn tls_handshake(
    addr: &str,
    config: &Arc<ClientConfig>,
    mut socket: TcpStream,
) -> Result<StreamOwned<ClientConnection, TcpStream>, String> {
    let failed =
        |e: &dyn std::fmt::Display| format!("TLS handshake with the broker at {addr} failed: {e}");
    let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let name = ServerName::try_from(host.to_string()).map_err(|e| failed(&e))?;
    let mut connection = ClientConnection::new(config.clone(), name).map_err(|e| failed(&e))?;
    while connection.is_handshaking() {
        connection.complete_io(&mut socket).map_err(|e| failed(&e))?;
    }
    Ok(StreamOwned::new(connection, socket))
}
