//! How the admin commands reach a secured listener: Kafka's client properties, from
//! `--command-config FILE` as Kafka's tools take them and from flags (which win), resolved
//! into a SASL login and a rustls client configuration.
//!
//! Runs once per command, in the CLI's process (the broker never reads these files).
//! Properties read: `security.protocol`, `sasl.mechanism` (or librdkafka's
//! `sasl.mechanisms`), `sasl.username`, `sasl.password` (or Java's `sasl.jaas.config`),
//! `ssl.ca.location` (or Java's PEM `ssl.truststore.location`), `ssl.certificate.location`
//! and `ssl.key.location` (or Java's PEM `ssl.keystore.location`, key and chain in one
//! file). What cannot be honoured (passphrase-protected keys, JKS stores, turning off the
//! broker's name check) is an error, never silently ignored.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use shardlog_net::sasl::Mechanism;
use shardlog_net::tls::rustls::crypto::ring;
use shardlog_net::tls::rustls::pki_types::pem::PemObject;
use shardlog_net::tls::rustls::pki_types::PrivateKeyDer;
use shardlog_net::tls::rustls::{version, ClientConfig, RootCertStore};

use super::client::SaslLogin;
use crate::tls_files::certificates;

/// Where librdkafka looks for the system's CAs on Debian when `ssl.ca.location` is unset.
const SYSTEM_CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// How a connection authenticates: SASL, TLS, both (SASL_SSL) or neither (PLAINTEXT).
#[derive(Clone, Default)]
pub struct ClientSecurity {
    pub login: Option<SaslLogin>,
    pub tls: Option<Arc<ClientConfig>>,
}

/// Kafka client properties (`key=value` lines; `#` and `!` start comments).
pub fn parse_properties(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut properties = BTreeMap::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
            continue;
        }
        let at = line
            .find(['=', ':'])
            .ok_or_else(|| format!("line {}: expected key=value, got '{line}'", number + 1))?;
        let (key, value) = (line[..at].trim(), line[at + 1..].trim());
        properties.insert(key.to_string(), value.to_string());
    }
    Ok(properties)
}

/// Reads `--command-config`.
pub fn read_properties(path: &Path) -> Result<BTreeMap<String, String>, String> {
    let what = format!("--command-config {}", path.display());
    let text = std::fs::read_to_string(path).map_err(|e| format!("{what}: {e}"))?;
    parse_properties(&text).map_err(|e| format!("{what}: {e}"))
}

/// The security the merged properties ask for.
pub fn resolve(properties: &BTreeMap<String, String>) -> Result<ClientSecurity, String> {
    for key in properties.keys() {
        let ours = KNOWN.contains(&key.as_str());
        if !ours && ["ssl.", "sasl.", "security."].iter().any(|p| key.starts_with(p)) {
            eprintln!("shardlog: client property '{key}' is not used by the admin commands");
        }
    }
    let get = |key: &str| properties.get(key).map(String::as_str).filter(|v| !v.is_empty());
    let username = get("sasl.username").map(str::to_string).or_else(|| jaas(get, "username"));
    let protocol = match get("security.protocol") {
        Some(protocol) => protocol.to_ascii_uppercase(),
        // Before security.protocol existed here, a user name alone meant SASL_PLAINTEXT.
        None if username.is_some() => "SASL_PLAINTEXT".to_string(),
        None => "PLAINTEXT".to_string(),
    };
    let (sasl, ssl) = match protocol.as_str() {
        "PLAINTEXT" => (false, false),
        "SSL" => (false, true),
        "SASL_PLAINTEXT" => (true, false),
        "SASL_SSL" => (true, true),
        other => {
            return Err(format!(
                "security.protocol '{other}': expected PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"
            ))
        }
    };
    let login = match (sasl, username) {
        (true, Some(username)) => Some(login(get, username)?),
        (true, None) => {
            return Err(format!(
                "security.protocol {protocol} needs sasl.username and sasl.password \
                 (or --sasl-username and SHARDLOG_SASL_PASSWORD)"
            ))
        }
        (false, Some(_)) => {
            return Err(format!("sasl.username is set but security.protocol is {protocol}"))
        }
        (false, None) => None,
    };
    let tls = if ssl { Some(tls_config(get)?) } else { None };
    Ok(ClientSecurity { login, tls })
}

const KNOWN: [&str; 16] = [
    "security.protocol",
    "sasl.mechanism",
    "sasl.mechanisms",
    "sasl.username",
    "sasl.password",
    "sasl.jaas.config",
    "ssl.ca.location",
    "ssl.truststore.location",
    "ssl.truststore.type",
    "ssl.certificate.location",
    "ssl.key.location",
    "ssl.keystore.location",
    "ssl.keystore.type",
    "ssl.key.password",
    "ssl.keystore.password",
    "ssl.endpoint.identification.algorithm",
];

fn login<'a>(get: impl Fn(&str) -> Option<&'a str>, username: String) -> Result<SaslLogin, String> {
    let password = get("sasl.password")
        .map(str::to_string)
        .or_else(|| jaas(&get, "password"))
        .ok_or("SASL needs sasl.password (or --sasl-password, SHARDLOG_SASL_PASSWORD)")?;
    let name = get("sasl.mechanism").or(get("sasl.mechanisms")).unwrap_or("SCRAM-SHA-512");
    let mechanism = Mechanism::from_name(&name.to_ascii_uppercase()).ok_or_else(|| {
        format!("sasl.mechanism '{name}': expected PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
    })?;
    Ok(SaslLogin { mechanism, username, password })
}

/// `field="value"` from Java's `sasl.jaas.config`
/// (`...ScramLoginModule required username="alice" password="secret";`).
fn jaas<'a>(get: impl Fn(&str) -> Option<&'a str>, field: &str) -> Option<String> {
    let config = get("sasl.jaas.config")?;
    let start = config.find(&format!("{field}=\""))? + field.len() + 2;
    let length = config[start..].find('"')?;
    Some(config[start..start + length].to_string())
}

fn tls_config<'a>(get: impl Fn(&str) -> Option<&'a str>) -> Result<Arc<ClientConfig>, String> {
    for secret in ["ssl.key.password", "ssl.keystore.password"] {
        if get(secret).is_some() {
            return Err(format!("{secret}: passphrase-protected keys are not supported"));
        }
    }
    if get("ssl.endpoint.identification.algorithm")
        .is_some_and(|a| !a.eq_ignore_ascii_case("https"))
    {
        return Err("ssl.endpoint.identification.algorithm: the broker's name is always \
                    checked (only 'https' is accepted)"
            .into());
    }
    let pem_store = |location: &str, kind: &str| -> Result<Option<&'a str>, String> {
        match (get(location), get(kind)) {
            (Some(path), Some(t)) if t.eq_ignore_ascii_case("PEM") => Ok(Some(path)),
            (Some(_), _) => Err(format!("{location}: only {kind}=PEM stores are read")),
            (None, _) => Ok(None),
        }
    };
    let truststore = pem_store("ssl.truststore.location", "ssl.truststore.type")?;
    let ca = match get("ssl.ca.location").or(truststore) {
        Some(path) => (path, "ssl.ca.location"),
        None if Path::new(SYSTEM_CA_BUNDLE).exists() => (SYSTEM_CA_BUNDLE, "the system CAs"),
        None => return Err("SSL needs ssl.ca.location: the CA certificates (PEM)".into()),
    };
    let mut roots = RootCertStore::empty();
    for certificate in certificates(Path::new(ca.0), ca.1)? {
        roots.add(certificate).map_err(|e| format!("{} {}: {e}", ca.1, ca.0))?;
    }
    let builder = ClientConfig::builder_with_provider(Arc::new(ring::default_provider()))
        .with_protocol_versions(&[&version::TLS13, &version::TLS12])
        .map_err(|e| format!("TLS protocol versions: {e}"))?
        .with_root_certificates(roots);
    let keystore = pem_store("ssl.keystore.location", "ssl.keystore.type")?;
    let identity = match (get("ssl.certificate.location"), get("ssl.key.location"), keystore) {
        (Some(cert), Some(key), _) => Some((cert, key)),
        (None, None, Some(store)) => Some((store, store)),
        (None, None, None) => None,
        _ => return Err("ssl.certificate.location and ssl.key.location go together".into()),
    };
    let config = match identity {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let chain = certificates(Path::new(cert), "ssl.certificate.location")?;
            let key = PrivateKeyDer::from_pem_file(key)
                .map_err(|e| format!("ssl.key.location {key}: no private key read: {e}"))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("ssl.certificate.location {cert} with its key: {e}"))?
        }
    };
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn properties(text: &str) -> BTreeMap<String, String> {
        parse_properties(text).unwrap()
    }

    #[test]
    fn properties_are_key_value_lines_with_comments() {
        let parsed = properties(
            "# a comment\n! another\n\nsecurity.protocol = SASL_SSL\nsasl.jaas.config=a b=\"c\";\nx: y\n",
        );
        assert_eq!(parsed["security.protocol"], "SASL_SSL");
        assert_eq!(parsed["sasl.jaas.config"], "a b=\"c\";");
        assert_eq!(parsed["x"], "y");
        assert!(parse_properties("no separator here").unwrap_err().contains("line 1"));
    }

    #[test]
    fn sasl_logins_come_from_sasl_settings_or_the_jaas_line() {
        let security = resolve(&properties(
            "security.protocol=sasl_plaintext\nsasl.mechanism=PLAIN\n\
             sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required \
             username=\"alice\" password=\"alice-secret\";\n",
        ))
        .unwrap();
        let login = security.login.unwrap();
        assert_eq!((login.username.as_str(), login.password.as_str()), ("alice", "alice-secret"));
        assert_eq!(login.mechanism, Mechanism::Plain);
        assert!(security.tls.is_none());
        // A user name alone still means SASL_PLAINTEXT with SCRAM-SHA-512.
        let login =
            resolve(&properties("sasl.username=bob\nsasl.password=pw\n")).unwrap().login.unwrap();
        assert_eq!(login.mechanism.name(), "SCRAM-SHA-512");
    }

    #[test]
    fn what_cannot_be_honoured_is_an_error_naming_the_setting() {
        let table = [
            ("security.protocol=TLS\n", "security.protocol 'TLS'"),
            ("security.protocol=SASL_SSL\n", "needs sasl.username"),
            ("security.protocol=SASL_SSL\nsasl.username=a\n", "sasl.password"),
            ("security.protocol=SSL\nsasl.username=a\n", "security.protocol is SSL"),
            ("sasl.username=a\nsasl.password=b\nsasl.mechanism=GSSAPI\n", "GSSAPI"),
            ("security.protocol=SSL\nssl.key.password=x\n", "passphrase"),
            ("security.protocol=SSL\nssl.truststore.location=/x.jks\n", "PEM"),
            ("security.protocol=SSL\nssl.ca.location=/nonexistent.pem\n", "/nonexistent.pem"),
            (
                "security.protocol=SSL\nssl.endpoint.identification.algorithm=none\n",
                "always checked",
            ),
        ];
        for (text, expected) in table {
            let error = resolve(&properties(text)).err().unwrap_or_default();
            assert!(error.contains(expected), "{text:?}: {error}");
        }
    }
}
