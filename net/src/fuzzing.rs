//! Fuzz target bodies: what `fuzz/fuzz_targets/*.rs` run on each input, and what
//! `tests/fuzz_corpus.rs` replays over the committed corpus in every test run.
//!
//! Not a hot path and never used by the broker. Both targets decode with every version of
//! every API that `kafka-protocol` knows: a superset of the broker's `SUPPORTED_APIS`, so
//! every decoder the broker can reach is covered. Decoding must return Ok or a
//! [`DecodeError`](crate::DecodeError): a panic or an unbounded allocation is a bug.
//! A third target, `legacy`, runs the message format v0/v1 conversions; `sasl` runs the
//! SASL mechanisms' server side (`sasl/`).

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader};
use kafka_protocol::protocol::{Encodable, StrBytes};

use crate::codec::decode_request;
use crate::legacy_format::{message_set_to_record_batch, record_batches_to_message_set};
use crate::sasl::{Mechanism, ScramCredential, ScramMechanism, Session, Step};

/// Every API at every version the codec knows: what a hostile client can make us decode.
fn every_version(api_key: ApiKey) -> Option<(i16, i16)> {
    let range = api_key.valid_versions();
    Some((range.min, range.max))
}

/// One request frame (without its length prefix), header included, as the connection
/// loop hands it to the decoder.
pub fn frame(data: &[u8]) {
    let _ = decode_request(Bytes::copy_from_slice(data), every_version);
}

/// One request body behind a valid header: `data[0]` picks the API (an index into
/// `ApiKey::iter()`), `data[1]` the version within the codec's range, the rest is the
/// body. The fuzzer spends its effort in the body decoders instead of the header.
pub fn request(data: &[u8]) {
    let [api_index, version_index, body @ ..] = data else { return };
    let api_key = nth_api(*api_index);
    let range = api_key.valid_versions();
    let span = (range.max - range.min + 1) as u8;
    let version = range.min + (version_index % span) as i16;
    let mut frame = header_bytes(api_key, version);
    frame.put_slice(body);
    let _ = decode_request(frame.freeze(), every_version);
}

/// The `request` input that decodes to `body` as `api_key` at `version` (corpus seeds).
pub fn request_input(api_key: ApiKey, version: i16, body: &[u8]) -> Vec<u8> {
    let api_index = ApiKey::iter().position(|k| k == api_key).expect("a known api key");
    let version_index = version - api_key.valid_versions().min;
    let mut input = vec![api_index as u8, version_index as u8];
    input.extend_from_slice(body);
    input
}

fn nth_api(index: u8) -> ApiKey {
    let count = ApiKey::iter().count();
    ApiKey::iter().nth(index as usize % count).expect("index below count")
}

fn header_bytes(api_key: ApiKey, version: i16) -> BytesMut {
    let header = RequestHeader::default()
        .with_request_api_key(api_key as i16)
        .with_request_api_version(version)
        .with_correlation_id(1)
        .with_client_id(Some(StrBytes::from_static_str("fuzz")));
    let mut out = BytesMut::new();
    header
        .encode(&mut out, api_key.request_header_version(version))
        .expect("a default header encodes at every version");
    out
}

/// What the `legacy` target lets compressed records decompress to (the broker uses
/// `--max-request-bytes`): small, so that a compression bomb is found, not run.
const MAX_RECORDS_BYTES: usize = 1 << 22;

/// The message format v0/v1 conversions (`legacy_format`): `data[0]` bit 0 picks the
/// direction (0: a Produce v0-v2 message set up to a batch; 1: stored batches down, as
/// Fetch v0-v3 read them), bit 1 the magic to convert down to; the rest is the input.
/// Either must end in Ok or an error; a set that converts up must give a batch that the
/// codec decodes and that converts back down.
pub fn legacy_message_set(data: &[u8]) {
    let [flags, input @ ..] = data else { return };
    let input = Bytes::copy_from_slice(input);
    let magic = ((flags >> 1) & 1) as i8;
    if flags & 1 == 1 {
        let _ = record_batches_to_message_set(&input, magic, 0, 1 << 20, MAX_RECORDS_BYTES);
        return;
    }
    let Ok(batch) = message_set_to_record_batch(&input, MAX_RECORDS_BYTES) else { return };
    if batch.is_empty() {
        return;
    }
    let decoded = kafka_protocol::records::RecordBatchDecoder::decode(&mut batch.clone());
    assert!(decoded.is_ok(), "an up-converted batch does not decode: {decoded:?}");
    let down = record_batches_to_message_set(&batch, magic, 0, usize::MAX, MAX_RECORDS_BYTES);
    assert!(down.is_ok(), "an up-converted batch does not convert back: {down:?}");
}

/// The server nonce of the `sasl` target (RFC 7677's), fixed so that a seed can complete.
const SASL_SERVER_NONCE: &str = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";

/// RFC 7677's user ("user", password "pencil", its salt, 4096 iterations), derived once.
fn sasl_credential(mechanism: ScramMechanism) -> ScramCredential {
    static CREDENTIALS: std::sync::OnceLock<[ScramCredential; 2]> = std::sync::OnceLock::new();
    let credentials = CREDENTIALS.get_or_init(|| {
        let salt = b"[m\x99h\x9d\x125\x8e\xec\xa0K\x14\x126\xfa\x81";
        ScramMechanism::ALL.map(|m| ScramCredential::new(m, b"pencil", salt, 4096))
    });
    credentials[(mechanism == ScramMechanism::Sha512) as usize].clone()
}

/// One SASL exchange as the server runs it: `data[0]` picks the mechanism (PLAIN,
/// SCRAM-SHA-256, SCRAM-SHA-512); for SCRAM the rest is client-first and client-final
/// split at the first NUL (SCRAM messages hold none), for PLAIN it is the one message.
/// The store knows RFC 7677's "user" and the server nonce is fixed, so a seed can log in.
/// Every input must end in a step or a failure, never a panic.
pub fn sasl(data: &[u8]) {
    let [selector, rest @ ..] = data else { return };
    let mechanism = Mechanism::ALL[*selector as usize % Mechanism::ALL.len()];
    let tokens: Vec<&[u8]> = match mechanism {
        Mechanism::Plain => vec![rest],
        Mechanism::Scram(_) => rest.splitn(2, |b| *b == 0).collect(),
    };
    let lookup = |user: &str, m| (user == "user").then(|| sasl_credential(m));
    let mut session = Session::new(mechanism);
    for token in tokens {
        match session.step(token, || SASL_SERVER_NONCE.to_string(), lookup) {
            Ok(Step::Challenge(_)) => {}
            Ok(Step::CheckPassword(login)) => {
                let _ = login.verify();
                return;
            }
            Ok(Step::Done { .. }) | Err(_) => return,
        }
    }
}
