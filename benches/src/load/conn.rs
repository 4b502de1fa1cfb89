//! One blocking Kafka connection over std TCP: framing, request headers, version
//! negotiation (ApiVersions v0), and pipelining (send many, then read the answers in
//! order; Kafka answers requests on one connection in the order they were sent).
//!
//! Invariant: responses arrive in request order, so a connection matches each frame to
//! the oldest outstanding correlation id and asserts they agree.

use std::collections::{HashMap, VecDeque};
use std::io::{self, ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ResponseHeader};
use kafka_protocol::protocol::{Decodable, HeaderVersion, Request};

/// Anything that goes wrong talking to a broker.
#[derive(Debug)]
pub enum ClientError {
    Io(io::Error),
    Protocol(String),
}

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientError::Io(e) => write!(f, "io: {e}"),
            ClientError::Protocol(s) => write!(f, "protocol: {s}"),
        }
    }
}

impl From<io::Error> for ClientError {
    fn from(e: io::Error) -> Self {
        ClientError::Io(e)
    }
}

pub type Result<T> = std::result::Result<T, ClientError>;

fn protocol(e: impl std::fmt::Display) -> ClientError {
    ClientError::Protocol(e.to_string())
}

/// The versions this client speaks, highest first chosen within the broker's range.
/// Produce v9 / Fetch v12 / Metadata v12 are the newest without topic ids in requests.
fn preferred_max(api_key: ApiKey) -> i16 {
    match api_key {
        ApiKey::Produce => 9,
        ApiKey::Fetch => 12,
        ApiKey::Metadata => 12,
        ApiKey::ListOffsets => 7,
        ApiKey::CreateTopics => 7,
        ApiKey::InitProducerId => 4,
        ApiKey::FindCoordinator => 3,
        ApiKey::OffsetCommit => 8,
        ApiKey::ApiVersions => 0,
        _ => 0,
    }
}

const READ_CHUNK_BYTES: usize = 64 * 1024;

/// A blocking connection to one broker.
pub struct Connection {
    stream: TcpStream,
    read_buf: BytesMut,
    write_buf: BytesMut,
    next_correlation_id: i32,
    /// (correlation id, api key, version) of requests not yet answered, oldest first.
    outstanding: VecDeque<(i32, ApiKey, i16)>,
    versions: HashMap<ApiKey, (i16, i16)>,
    read_timeout: Option<Duration>,
    pub addr: String,
}

impl Connection {
    /// Connects, sets TCP_NODELAY and learns the broker's API versions.
    pub fn connect(addr: &str) -> Result<Connection> {
        let stream = TcpStream::connect(addr)?;
        stream.set_nodelay(true)?;
        let mut conn = Connection {
            stream,
            read_buf: BytesMut::with_capacity(1 << 20),
            write_buf: BytesMut::with_capacity(1 << 16),
            next_correlation_id: 1,
            outstanding: VecDeque::new(),
            versions: HashMap::new(),
            read_timeout: None,
            addr: addr.to_string(),
        };
        let response = conn.call(&ApiVersionsRequest::default(), 0)?;
        if response.error_code != 0 {
            return Err(protocol(format!("ApiVersions error {}", response.error_code)));
        }
        for v in response.api_keys {
            if let Ok(key) = ApiKey::try_from(v.api_key) {
                conn.versions.insert(key, (v.min_version, v.max_version));
            }
        }
        Ok(conn)
    }

    /// The version to use for `api_key`: the highest both sides speak.
    pub fn version(&self, api_key: ApiKey) -> Result<i16> {
        let (min, max) = *self
            .versions
            .get(&api_key)
            .ok_or_else(|| protocol(format!("broker does not serve {api_key:?}")))?;
        let version = max.min(preferred_max(api_key));
        if version < min {
            return Err(protocol(format!("no common version of {api_key:?}")));
        }
        Ok(version)
    }

    /// Sends one request without waiting; returns its correlation id.
    pub fn send<R: Request>(&mut self, request: &R, version: i16) -> Result<i32> {
        let api_key = ApiKey::try_from(R::KEY).map_err(|_| protocol("unknown api key"))?;
        let correlation_id = self.next_correlation_id;
        self.next_correlation_id = self.next_correlation_id.wrapping_add(1);
        self.write_buf.clear();
        shardlog_net::encode_request(
            &mut self.write_buf,
            correlation_id,
            "shardlog-load",
            version,
            request,
        )
        .map_err(protocol)?;
        self.stream.write_all(&self.write_buf)?;
        self.outstanding.push_back((correlation_id, api_key, version));
        Ok(correlation_id)
    }

    /// Sends a request the broker never answers (Produce with acks=0).
    pub fn send_no_response<R: Request>(&mut self, request: &R, version: i16) -> Result<()> {
        self.send(request, version)?;
        self.outstanding.pop_back();
        Ok(())
    }

    /// Requests sent and not yet answered.
    pub fn in_flight(&self) -> usize {
        self.outstanding.len()
    }

    /// Waits for the oldest outstanding response (invariant: in order) and decodes it.
    pub fn recv<R: Request>(&mut self) -> Result<R::Response> {
        let frame = self.read_frame(None)?.expect("blocking read returns a frame");
        self.decode::<R>(frame)
    }

    /// Like [`Connection::recv`], but gives up after `timeout` with `Ok(None)`, keeping
    /// any partial frame for the next call.
    pub fn recv_timeout<R: Request>(&mut self, timeout: Duration) -> Result<Option<R::Response>> {
        match self.read_frame(Some(timeout))? {
            Some(frame) => self.decode::<R>(frame).map(Some),
            None => Ok(None),
        }
    }

    /// Sends and waits for the answer.
    pub fn call<R: Request>(&mut self, request: &R, version: i16) -> Result<R::Response> {
        assert!(self.outstanding.is_empty(), "call on a connection with requests in flight");
        self.send(request, version)?;
        self.recv::<R>()
    }

    fn decode<R: Request>(&mut self, mut frame: Bytes) -> Result<R::Response> {
        let (correlation_id, api_key, version) =
            self.outstanding.pop_front().ok_or_else(|| protocol("response with no request"))?;
        if api_key as i16 != R::KEY {
            return Err(protocol(format!("expected a {api_key:?} response")));
        }
        let header = ResponseHeader::decode(&mut frame, R::Response::header_version(version))
            .map_err(protocol)?;
        if header.correlation_id != correlation_id {
            return Err(protocol(format!(
                "correlation id {} for request {correlation_id}",
                header.correlation_id
            )));
        }
        R::Response::decode(&mut frame, version).map_err(protocol)
    }

    fn read_frame(&mut self, timeout: Option<Duration>) -> Result<Option<Bytes>> {
        let timeout_setting = timeout.map(|t| t.max(Duration::from_micros(1)));
        if timeout_setting != self.read_timeout {
            self.stream.set_read_timeout(timeout_setting)?;
            self.read_timeout = timeout_setting;
        }
        loop {
            if self.read_buf.len() >= 4 {
                let len = i32::from_be_bytes(self.read_buf[..4].try_into().unwrap());
                let len = usize::try_from(len).map_err(|_| protocol("negative frame length"))?;
                if self.read_buf.len() >= 4 + len {
                    self.read_buf.advance(4);
                    return Ok(Some(self.read_buf.split_to(len).freeze()));
                }
                self.read_buf.reserve(4 + len - self.read_buf.len());
            }
            // Zero-filled room to read into: a memset per read is cheap next to the syscall
            // and keeps this free of unsafe code.
            let filled = self.read_buf.len();
            self.read_buf.resize(filled + READ_CHUNK_BYTES, 0);
            let read = self.stream.read(&mut self.read_buf[filled..]);
            self.read_buf.truncate(filled + *read.as_ref().unwrap_or(&0));
            match read {
                Ok(0) => return Err(ClientError::Io(ErrorKind::UnexpectedEof.into())),
                Ok(_) => {}
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    if timeout.is_some() {
                        return Ok(None);
                    }
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
}
