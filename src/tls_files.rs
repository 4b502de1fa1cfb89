//! The TLS files of the SSL listeners and of the admin endpoint: the certificate chain, its
//! key and the client CAs (PEM), read into a rustls `ServerConfig` at start-up and again on
//! SIGHUP.
//!
//! Runs at start-up (before any shard) and on the `tls-reload` thread, never on a shard:
//! reading files and parsing keys would stall a shard's produce path. A reload that fails
//! (a missing file, a key that does not match) keeps the configuration in use and logs
//! why; one that succeeds is published to every shard through `SharedTlsConfig`, and open
//! connections are left as they are.
//!
//! Protocol versions: TLS 1.3 and 1.2 (rustls' defaults with the ring provider). Client
//! authentication: with `tls_client_ca_file`, every client must present a certificate
//! signed by one of its CAs (Kafka's `ssl.client.auth=required`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use shardlog_net::tls::rustls::crypto::{ring, CryptoProvider};
use shardlog_net::tls::rustls::pki_types::pem::PemObject;
use shardlog_net::tls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use shardlog_net::tls::rustls::server::WebPkiClientVerifier;
use shardlog_net::tls::rustls::{version, RootCertStore, ServerConfig};
use shardlog_net::tls::SharedTlsConfig;
use signal_hook::consts::SIGHUP;
use signal_hook::iterator::Signals;
use tracing::{error, info};

use crate::config::Config;

/// Where one server's PEM files are.
#[derive(Clone, Debug)]
pub struct TlsFiles {
    /// What the files serve and the prefix of their settings' names (`tls`, `admin_tls`),
    /// so a message names the setting at fault.
    pub setting: &'static str,
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client_ca: Option<PathBuf>,
}

impl TlsFiles {
    /// The SSL listeners' files, if a certificate and key are named.
    pub fn from_config(config: &Config) -> Option<TlsFiles> {
        Some(TlsFiles {
            setting: "tls",
            cert: config.tls_cert_file.clone()?,
            key: config.tls_key_file.clone()?,
            client_ca: config.tls_client_ca_file.clone(),
        })
    }

    /// The admin endpoint's files: none, or both the certificate and its key.
    pub fn admin_from_config(config: &Config) -> Result<Option<TlsFiles>, String> {
        match (&config.admin_tls_cert_file, &config.admin_tls_key_file) {
            (None, None) => Ok(None),
            (Some(cert), Some(key)) => Ok(Some(TlsFiles {
                setting: "admin_tls",
                cert: cert.clone(),
                key: key.clone(),
                client_ca: None,
            })),
            _ => Err("admin_tls_cert_file and admin_tls_key_file go together".into()),
        }
    }

    /// Reads and checks the files; the message names the file and setting at fault.
    pub fn load(&self) -> Result<Arc<ServerConfig>, String> {
        let provider = Arc::new(ring::default_provider());
        let setting = self.setting;
        let chain = certificates(&self.cert, &format!("{setting}_cert_file"))?;
        let key = PrivateKeyDer::from_pem_file(&self.key).map_err(|e| {
            format!("{setting}_key_file {}: no private key read: {e}", self.key.display())
        })?;
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&version::TLS13, &version::TLS12])
            .map_err(|e| format!("TLS protocol versions: {e}"))?;
        let builder = match &self.client_ca {
            None => builder.with_no_client_auth(),
            Some(path) => builder.with_client_cert_verifier(client_verifier(path, provider)?),
        };
        let config = builder.with_single_cert(chain, key).map_err(|e| {
            format!(
                "{setting}_cert_file {} with {setting}_key_file {}: {e}",
                self.cert.display(),
                self.key.display()
            )
        })?;
        Ok(Arc::new(config))
    }
}

/// Every certificate in a PEM file; at least one.
pub fn certificates(path: &Path, setting: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let what = || format!("{setting} {}", path.display());
    let certificates = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("{}: {e}", what()))?;
    if certificates.is_empty() {
        return Err(format!("{}: no PEM certificate in the file", what()));
    }
    Ok(certificates)
}

/// Client certificates must chain to one of the CAs in `path`.
fn client_verifier(
    path: &Path,
    provider: Arc<CryptoProvider>,
) -> Result<Arc<dyn shardlog_net::tls::rustls::server::danger::ClientCertVerifier>, String> {
    let mut roots = RootCertStore::empty();
    for certificate in certificates(path, "tls_client_ca_file")? {
        roots.add(certificate).map_err(|e| {
            format!("tls_client_ca_file {}: not a usable CA certificate: {e}", path.display())
        })?;
    }
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .map_err(|e| format!("tls_client_ca_file {}: {e}", path.display()))
}

/// Starts the thread that reloads the TLS files on SIGHUP, each set on its own: one that
/// fails to load keeps its configuration and does not stop the others. Without TLS (`tls`
/// empty) SIGHUP is still taken, logged and otherwise ignored, so it never kills the broker
/// (its default action).
pub fn reload_on_sighup(tls: Vec<(TlsFiles, Arc<SharedTlsConfig>)>) -> Result<(), String> {
    let mut signals =
        Signals::new([SIGHUP]).map_err(|e| format!("installing the SIGHUP handler: {e}"))?;
    std::thread::Builder::new()
        .name("tls-reload".into())
        .spawn(move || {
            for _ in signals.forever() {
                if tls.is_empty() {
                    info!("SIGHUP: no TLS listener, nothing to reload");
                }
                for (files, shared) in &tls {
                    match files.load() {
                        Ok(config) => {
                            shared.replace(config);
                            info!(cert = %files.cert.display(), "SIGHUP: TLS certificates reloaded; new connections use them");
                        }
                        Err(e) => error!("SIGHUP: TLS reload failed, the current certificates stay in use: {e}"),
                    }
                }
            }
        })
        .map_err(|e| format!("starting the TLS reload thread: {e}"))?;
    Ok(())
}
