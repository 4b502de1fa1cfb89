//! TLS on a listener (Kafka's SSL security protocol), with rustls through futures-rustls:
//! the handshake, its bounds, the client's principal, then the ordinary connection loop
//! over the encrypted stream.
//!
//! Runs on every shard that serves an SSL listener. Hot path: after the handshake, every
//! byte is decrypted into rustls' buffer and copied out, and every response is copied in
//! and encrypted (rustls' own buffers; no allocation per request beyond the plaintext
//! path's). Plaintext connections never reach this module: `serve_connection` is
//! monomorphized on the bare `TcpStream`.
//!
//! The certificate, key and client CAs are parsed by the binary (`net` never touches a
//! file) into a rustls `ServerConfig` and published through [`SharedTlsConfig`], which a
//! reload (SIGHUP) replaces: connections already open keep the session they negotiated,
//! new handshakes use the new configuration.
//!
//! Invariants:
//! 1. At most `max_handshakes` handshakes run at once on a shard; a connection over the
//!    limit is closed before any TLS byte is read (`HandshakeError::OverLimit`).
//! 2. A handshake not finished within `handshake_timeout` is abandoned and its connection
//!    closed (`HandshakeError::TimedOut`): a slow or half-open client holds a handshake
//!    slot and a connection slot for at most that long.
//! 3. A client that does not speak TLS (a plaintext Kafka client on the SSL port) fails the
//!    handshake and is closed (`HandshakeError::Failed`); nothing it sent is decoded.
//! 4. With client authentication on, the principal is `User:` and the certificate's
//!    subject as an RFC 4514 distinguished name (Kafka's default mapping); otherwise the
//!    connection is ANONYMOUS (`None`).

use std::cell::RefCell;
use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_rustls::rustls::ServerConfig;
use futures_rustls::server::TlsStream;
use glommio::net::TcpStream;
use x509_cert::der::Decode;

use crate::connection::{prepare_socket, serve_stream, ConnectionLimits, RequestHandler};
use crate::limits::{ConnectionSlots, ProduceBudget};

pub use futures_rustls::rustls;

/// The TLS configuration all shards use, replaced as a whole on reload. Shared across
/// cores; each shard reads it only when `generation` moved (one atomic load per accept).
pub struct SharedTlsConfig {
    generation: AtomicU64,
    config: Mutex<Arc<ServerConfig>>,
}

impl SharedTlsConfig {
    pub fn new(config: Arc<ServerConfig>) -> Arc<SharedTlsConfig> {
        Arc::new(SharedTlsConfig { generation: AtomicU64::new(0), config: Mutex::new(config) })
    }

    /// New handshakes on every shard use `config` from now on; open connections keep theirs.
    pub fn replace(&self, config: Arc<ServerConfig>) {
        *self.config.lock().unwrap_or_else(|e| e.into_inner()) = config;
        self.generation.fetch_add(1, Ordering::Release);
    }

    fn current(&self) -> (u64, Arc<ServerConfig>) {
        // Read the generation first: a replace racing with this read is seen next time.
        let generation = self.generation.load(Ordering::Acquire);
        let config = self.config.lock().unwrap_or_else(|e| e.into_inner()).clone();
        (generation, config)
    }
}

/// Why a TLS connection ended before its first request.
#[derive(Debug)]
pub enum HandshakeError {
    /// The shard already runs `max_handshakes` handshakes (invariant 1).
    OverLimit,
    /// Not finished within the handshake timeout (invariant 2).
    TimedOut,
    /// The client did not complete a valid handshake: not TLS, no acceptable version or
    /// cipher, a certificate that does not verify, or the socket failed.
    Failed(io::Error),
}

impl std::fmt::Display for HandshakeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HandshakeError::OverLimit => f.write_str("too many TLS handshakes in progress"),
            HandshakeError::TimedOut => f.write_str("TLS handshake timed out"),
            HandshakeError::Failed(e) => write!(f, "TLS handshake failed: {e}"),
        }
    }
}

/// A connection whose handshake completed, ready to serve.
pub struct TlsConnection {
    stream: TlsStream<TcpStream>,
    pub peer: SocketAddr,
    /// `User:<subject>` of the client certificate, or `None` (ANONYMOUS).
    pub principal: Option<Rc<str>>,
}

impl TlsConnection {
    /// The encrypted stream, for a server other than the Kafka connection loop (the admin
    /// endpoint's HTTPS).
    pub fn into_stream(self) -> TlsStream<TcpStream> {
        self.stream
    }
}

/// One shard's TLS acceptor: the configuration it last saw, and its handshake bounds.
pub struct TlsAcceptor {
    shared: Arc<SharedTlsConfig>,
    cached: RefCell<(u64, futures_rustls::TlsAcceptor)>,
    handshakes: Rc<ConnectionSlots>,
    handshake_timeout: Duration,
}

impl TlsAcceptor {
    pub fn new(
        shared: Arc<SharedTlsConfig>,
        max_handshakes: usize,
        handshake_timeout: Duration,
    ) -> TlsAcceptor {
        let (generation, config) = shared.current();
        TlsAcceptor {
            shared,
            cached: RefCell::new((generation, config.into())),
            handshakes: ConnectionSlots::with_warning(
                max_handshakes,
                "TLS handshake limit reached: closing new connections",
            ),
            handshake_timeout,
        }
    }

    fn acceptor(&self) -> futures_rustls::TlsAcceptor {
        let mut cached = self.cached.borrow_mut();
        if self.shared.generation.load(Ordering::Acquire) != cached.0 {
            let (generation, config) = self.shared.current();
            *cached = (generation, config.into());
        }
        cached.1.clone()
    }

    /// Runs the server side of the handshake within the bounds (invariants 1-3).
    pub async fn handshake(
        &self,
        stream: TcpStream,
        limits: &ConnectionLimits,
    ) -> Result<TlsConnection, HandshakeError> {
        let peer = prepare_socket(&stream, limits).map_err(HandshakeError::Failed)?;
        let Some(_slot) = self.handshakes.try_take(Some(peer)) else {
            return Err(HandshakeError::OverLimit);
        };
        let accept = self.acceptor().accept(stream);
        let timeout = self.handshake_timeout;
        let stream = futures_lite::future::or(
            async { accept.await.map_err(HandshakeError::Failed) },
            async {
                glommio::timer::sleep(timeout).await;
                Err(HandshakeError::TimedOut)
            },
        )
        .await?;
        let principal = match stream.get_ref().1.peer_certificates() {
            Some([certificate, ..]) => {
                let principal = principal_of(certificate).map_err(|e| {
                    HandshakeError::Failed(io::Error::new(io::ErrorKind::InvalidData, e))
                })?;
                Some(Rc::from(principal))
            }
            _ => None,
        };
        Ok(TlsConnection { stream, peer, principal })
    }
}

/// Serves a connection whose handshake completed, as `serve_connection` serves a
/// plaintext one.
/// On a SASL_SSL listener (`sasl`), the SASL user replaces the certificate's principal.
pub async fn serve_tls_connection<H: RequestHandler>(
    connection: TlsConnection,
    handler: Rc<H>,
    limits: ConnectionLimits,
    budget: Rc<ProduceBudget>,
    sasl: Option<Rc<crate::sasl::SaslConfig>>,
) -> io::Result<()> {
    let TlsConnection { stream, peer, principal } = connection;
    serve_stream(stream, peer, principal, handler, limits, budget, sasl).await
}

/// Kafka's default principal for a client certificate (`ssl.principal.mapping.rules =
/// DEFAULT`): `User:` and the subject's distinguished name, RFC 4514 order and escaping
/// (the last RDN first, `CN=client,OU=eng,O=Example`).
pub fn principal_of(certificate_der: &[u8]) -> Result<String, String> {
    let certificate = x509_cert::Certificate::from_der(certificate_der)
        .map_err(|e| format!("client certificate does not parse: {e}"))?;
    Ok(format!("User:{}", certificate.tbs_certificate.subject))
}

#[cfg(test)]
mod tests {
    use rcgen::{CertificateParams, DnType, KeyPair};

    use super::principal_of;

    fn certificate_der(subject: &[(DnType, &str)]) -> Vec<u8> {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        for (kind, value) in subject {
            params.distinguished_name.push(kind.clone(), *value);
        }
        params.self_signed(&KeyPair::generate().unwrap()).unwrap().der().to_vec()
    }

    #[test]
    fn the_principal_is_the_subject_in_rfc_4514_order_as_kafka_prints_it() {
        let der = certificate_der(&[
            (DnType::CountryName, "DE"),
            (DnType::OrganizationName, "Example"),
            (DnType::OrganizationalUnitName, "eng"),
            (DnType::CommonName, "client-1"),
        ]);
        assert_eq!(principal_of(&der).unwrap(), "User:CN=client-1,OU=eng,O=Example,C=DE");
    }

    #[test]
    fn special_characters_in_the_subject_are_escaped() {
        let der = certificate_der(&[(DnType::CommonName, "a,b+c")]);
        assert_eq!(principal_of(&der).unwrap(), "User:CN=a\\,b\\+c");
    }

    #[test]
    fn bytes_that_are_not_a_certificate_are_an_error_not_a_panic() {
        assert!(principal_of(b"\x30\x03\x02\x01").is_err());
        assert!(principal_of(&[]).is_err());
    }
}
