//! Request decoding and response encoding on top of the `kafka-protocol` crate.
//!
//! Decoding never panics on bad input: lengths are checked before the crate's header
//! peek, and every decode error becomes a [`DecodeError`] that closes the connection.
//! As in Kafka, a body that decodes is served even when bytes follow it in the frame
//! (counted in [`Request::trailing_bytes`]); a body that does not decode is refused.

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
    /// The authenticated client, Kafka's way (`User:CN=...` from a TLS client
    /// certificate), set by the connection loop; `None` is ANONYMOUS.
    pub principal: Option<std::rc::Rc<str>>,
    /// Bytes left in the frame after the body decoded. Kafka ignores them, and so do
    /// we: librdkafka 2.13+ sends an all-topics Metadata v9+ with a 4-byte array-count
    /// placeholder where a 1-byte varint belongs (librdkafka issue 5049).
    pub trailing_bytes: usize,
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
    let trailing_bytes = frame.remaining();
    Ok(Request { api_key, api_version, header, body, peer: None, principal: None, trailing_bytes })
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
    write_frame(&mut out, |out| {
        header.encode(out, header_version)?;
        body.encode(out, api_version)
    })?;
    Ok(out)
}

/// Appends a request frame, length prefix included, to `out`: the client side of
/// [`decode_request`], used by the load generator and the admin CLI.
pub fn encode_request<R: kafka_protocol::protocol::Request>(
    out: &mut BytesMut,
    correlation_id: i32,
    client_id: &'static str,
    api_version: i16,
    body: &R,
) -> Result<(), String> {
    let header = RequestHeader::default()
        .with_request_api_key(R::KEY)
        .with_request_api_version(api_version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(kafka_protocol::protocol::StrBytes::from_static_str(client_id)));
    write_frame(out, |out| {
        header.encode(out, R::header_version(api_version))?;
        body.encode(out, api_version)
    })
}

/// Appends a 4-byte big-endian length prefix and what `encode` writes, patching the
/// length afterwards.
fn write_frame<E: std::fmt::Display>(
    out: &mut BytesMut,
    encode: impl FnOnce(&mut BytesMut) -> Result<(), E>,
) -> Result<(), String> {
    let start = out.len();
    out.put_i32(0);
    encode(out).map_err(|e| e.to_string())?;
    let len = out.len() - start - 4;
    let len = i32::try_from(len).map_err(|_| format!("frame of {len} bytes"))?;
    out[start..start + 4].copy_from_slice(&len.to_be_bytes());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::metadata_request::{MetadataRequest, MetadataRequestTopic};
    use kafka_protocol::messages::TopicName;
    use kafka_protocol::protocol::StrBytes;

    /// Every API at every version the crate knows: what a hostile client could send.
    fn any_version(api_key: ApiKey) -> Option<(i16, i16)> {
        let range = api_key.valid_versions();
        Some((range.min, range.max))
    }

    fn xorshift(state: &mut u64) -> u64 {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        *state
    }

    fn seed() -> u64 {
        std::env::var("SHARDLOG_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x5eed_cafe)
    }

    /// Random and mutated frames only ever decode or fail: no panic, no huge allocation.
    #[test]
    fn arbitrary_frames_decode_or_fail_without_panicking() {
        let seed = seed();
        println!("seed {seed} (replay with SHARDLOG_SEED={seed})");
        let mut state = seed | 1;
        let valid = {
            let header = RequestHeader::default()
                .with_request_api_key(ApiKey::Metadata as i16)
                .with_request_api_version(9)
                .with_correlation_id(7);
            let body = MetadataRequest::default()
                .with_topics(Some(vec![MetadataRequestTopic::default()
                    .with_name(Some(TopicName(StrBytes::from_static_str("trades"))))]));
            let mut out = BytesMut::new();
            header.encode(&mut out, ApiKey::Metadata.request_header_version(9)).unwrap();
            body.encode(&mut out, 9).unwrap();
            out.freeze()
        };
        for round in 0..20_000 {
            let frame: Vec<u8> = if round % 2 == 0 {
                // A valid header prefix for a random API and version, then random bytes.
                let keys: Vec<i16> = (0..93).collect();
                let key = keys[(xorshift(&mut state) % keys.len() as u64) as usize];
                let version = (xorshift(&mut state) % 20) as i16;
                let mut f = vec![0u8; 8 + (xorshift(&mut state) % 64) as usize];
                f[0..2].copy_from_slice(&key.to_be_bytes());
                f[2..4].copy_from_slice(&version.to_be_bytes());
                for b in &mut f[4..] {
                    *b = xorshift(&mut state) as u8;
                }
                // Bias toward huge lengths, the dangerous case.
                if round % 4 == 0 && f.len() > 14 {
                    f[10..14].copy_from_slice(&[0x7f, 0xff, 0xff, 0xff]);
                }
                f
            } else {
                let mut f = valid.to_vec();
                for _ in 0..1 + xorshift(&mut state) % 4 {
                    let at = (xorshift(&mut state) % f.len() as u64) as usize;
                    f[at] = xorshift(&mut state) as u8;
                }
                f.truncate(f.len() - (xorshift(&mut state) % 4) as usize);
                f
            };
            let _ = decode_request(Bytes::from(frame), any_version);
        }
    }

    #[test]
    fn a_forged_array_length_is_an_error_not_an_allocation() {
        // Metadata v1: header (key 3, version 1, correlation 2, null client id), then a
        // topic array claiming i32::MAX entries followed by one short string.
        let frame = Bytes::from_static(&[
            0, 3, 0, 1, 0, 0, 0, 2, 0xff, 0xff, 0x7f, 0xff, 0xff, 0xff, 0, 1, b'x',
        ]);
        let result = decode_request(frame, any_version);
        assert!(matches!(result, Err(DecodeError::Malformed { .. })), "{result:?}");
    }

    /// librdkafka 2.13+'s all-topics Metadata v12 (issue 5049): the body is
    /// `00 00 00 00 01 00 00`, a 4-byte placeholder left where the 1-byte varint count of
    /// a null topic array belongs. Kafka reads null topics, two false flags and an empty
    /// tag buffer, and ignores the 3 bytes after them; so do we.
    #[test]
    fn librdkafka_all_topics_metadata_with_a_placeholder_count_is_served() {
        let mut frame = vec![0, 3, 0, 12, 0, 0, 0, 9]; // Metadata v12, correlation 9
        frame.extend_from_slice(&[0, 7]); // client id "rdkafka"
        frame.extend_from_slice(b"rdkafka");
        frame.push(0); // header tag buffer
        frame.extend_from_slice(&[0, 0, 0, 0, 1, 0, 0]);
        let request = decode_request(Bytes::from(frame), any_version).expect("served");
        assert_eq!(request.trailing_bytes, 3);
        let RequestKind::Metadata(body) = request.body else { panic!("not Metadata") };
        assert_eq!(body.topics, None, "null topics means all topics");
        assert!(!body.allow_auto_topic_creation);
    }

    /// A flexible-version client may send tagged fields this broker does not know, in
    /// the header and in the body; Kafka skips them, and so do we.
    #[test]
    fn unknown_tagged_fields_in_header_and_body_are_skipped() {
        let unknown =
            |tag: i32| std::collections::BTreeMap::from([(tag, Bytes::from_static(b"future"))]);
        let header = RequestHeader::default()
            .with_request_api_key(ApiKey::Metadata as i16)
            .with_request_api_version(12)
            .with_correlation_id(3)
            .with_unknown_tagged_fields(unknown(7));
        let body = MetadataRequest::default().with_unknown_tagged_fields(unknown(9));
        let mut out = BytesMut::new();
        header.encode(&mut out, ApiKey::Metadata.request_header_version(12)).unwrap();
        body.encode(&mut out, 12).unwrap();
        let request = decode_request(out.freeze(), any_version).expect("served");
        assert_eq!(request.trailing_bytes, 0);
        assert_eq!(request.header.correlation_id, 3);
    }

    /// A body that does not decode is still refused: leniency is only for bytes after it.
    #[test]
    fn a_truncated_body_is_refused() {
        // Metadata v1 with a topic array of one entry and no entry.
        let frame = Bytes::from_static(&[0, 3, 0, 1, 0, 0, 0, 2, 0xff, 0xff, 0, 0, 0, 1]);
        let result = decode_request(frame, any_version);
        assert!(matches!(result, Err(DecodeError::Malformed { .. })), "{result:?}");
    }
}
