//! Request decoding and response encoding on top of the `kafka-protocol` crate.
//!
//! Decoding never panics on bad input: lengths are checked before the crate's header
//! peek, and every decode error becomes a [`DecodeError`] that closes the connection.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, RequestKind, ResponseHeader, ResponseKind};
use kafka_protocol::protocol::{Decodable, Encodable};

/// One decoded request.
#[derive(Debug)]
pub struct Request {
    pub api_key: ApiKey,
    pub api_version: i16,
    pub header: RequestHeader,
    pub body: RequestKind,
    /// The client's address (set by the connection loop).
    pub peer: Option<std::net::SocketAddr>,
}

/// Why a frame could not be turned into a request.
#[derive(Debug)]
pub enum DecodeError {
    /// Shorter than the fixed part of a request header.
    TooShort(usize),
    UnknownApiKey(i16),
    /// The version is outside what this broker serves; carries the correlation id so
    /// ApiVersions can still be answered (Kafka answers it with version 0).
    UnsupportedVersion {
        api_key: ApiKey,
        api_version: i16,
        correlation_id: i32,
    },
    Malformed {
        api_key: ApiKey,
        api_version: i16,
        reason: String,
    },
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::TooShort(n) => write!(f, "frame of {n} bytes is shorter than a header"),
            DecodeError::UnknownApiKey(k) => write!(f, "unknown api key {k}"),
            DecodeError::UnsupportedVersion { api_key, api_version, .. } => {
                write!(f, "unsupported version {api_version} of {api_key:?}")
            }
            DecodeError::Malformed { api_key, api_version, reason } => {
                write!(f, "malformed {api_key:?} v{api_version}: {reason}")
            }
        }
    }
}

/// Decodes one frame (without its length prefix). `supported` says which versions of an
/// API the broker serves; others are refused before the body is parsed.
pub fn decode_request(
    mut frame: Bytes,
    supported: impl Fn(ApiKey) -> Option<(i16, i16)>,
) -> Result<Request, DecodeError> {
    // api_key (2) + api_version (2) + correlation_id (4)
    if frame.len() < 8 {
        return Err(DecodeError::TooShort(frame.len()));
    }
    let raw_key = i16::from_be_bytes([frame[0], frame[1]]);
    let api_version = i16::from_be_bytes([frame[2], frame[3]]);
    let correlation_id = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
    let api_key = ApiKey::try_from(raw_key).map_err(|_| DecodeError::UnknownApiKey(raw_key))?;
    match supported(api_key) {
        Some((min, max)) if (min..=max).contains(&api_version) => {}
        _ => return Err(DecodeError::UnsupportedVersion { api_key, api_version, correlation_id }),
    }
    let malformed = |reason: String| DecodeError::Malformed { api_key, api_version, reason };
    let header_version = api_key.request_header_version(api_version);
    let header =
        RequestHeader::decode(&mut frame, header_version).map_err(|e| malformed(e.to_string()))?;
    let body = RequestKind::decode(api_key, &mut frame, api_version)
        .map_err(|e| malformed(e.to_string()))?;
    if frame.has_remaining() {
        let reason = format!("{} trailing bytes", frame.remaining());
        return Err(DecodeError::Malformed { api_key, api_version, reason });
    }
    Ok(Request { api_key, api_version, header, body, peer: None })
}

/// Encodes a response frame, length prefix included.
pub fn encode_response(
    api_key: ApiKey,
    api_version: i16,
    correlation_id: i32,
    body: &ResponseKind,
) -> Result<BytesMut, String> {
    let header = ResponseHeader::default().with_correlation_id(correlation_id);
    let header_version = api_key.response_header_version(api_version);
    let mut out = BytesMut::with_capacity(256);
    out.put_i32(0);
    header.encode(&mut out, header_version).map_err(|e| e.to_string())?;
    body.encode(&mut out, api_version).map_err(|e| e.to_string())?;
    let len = out.len() - 4;
    let len = i32::try_from(len).map_err(|_| format!("response of {len} bytes"))?;
    out[..4].copy_from_slice(&len.to_be_bytes());
    Ok(out)
}
