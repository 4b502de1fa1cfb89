//! Listeners, as in Kafka: each has a security protocol and an address, and clients are
//! told, per listener, where that listener's shards are.
//!
//! Runs once, at start-up, before any shard: `resolve` turns the settings (`listeners`,
//! `advertised_listeners`, `kafka_addr`, `advertised_host`, the TLS files) into the list
//! every shard serves, or refuses to start with a message that names the setting.
//!
//! Invariants:
//! 1. Each listener binds its bootstrap port (SO_REUSEPORT on every shard) and one port per
//!    shard, `port + 1 + shard`; no two listeners' port ranges overlap.
//! 2. A connection is answered with its own listener's advertised addresses only, so a
//!    client that bootstraps on SSL is never sent to a plaintext port.
//! 3. A SASL listener serves only the `sasl_mechanisms` named (known names, at least one):
//!    a typo is refused at start-up, never served as something else.
//! 4. An SSL or SASL_SSL listener has a certificate and key (`tls_cert_file`,
//!    `tls_key_file`).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use shardlog_net::sasl::Mechanism;

use crate::config::Config;

/// Kafka's security protocols (`security.protocol`); the listener name is the protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SecurityProtocol {
    Plaintext,
    Ssl,
    SaslPlaintext,
    SaslSsl,
}

impl SecurityProtocol {
    fn parse(name: &str) -> Option<SecurityProtocol> {
        match name.to_ascii_uppercase().as_str() {
            "PLAINTEXT" => Some(SecurityProtocol::Plaintext),
            "SSL" => Some(SecurityProtocol::Ssl),
            "SASL_PLAINTEXT" => Some(SecurityProtocol::SaslPlaintext),
            "SASL_SSL" => Some(SecurityProtocol::SaslSsl),
            _ => None,
        }
    }

    /// SSL and SASL_SSL: the connection is TLS first.
    pub fn uses_tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }

    /// SASL_PLAINTEXT and SASL_SSL: the client authenticates with SASL first.
    pub fn uses_sasl(self) -> bool {
        matches!(self, SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl)
    }

    pub fn name(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "PLAINTEXT",
            SecurityProtocol::Ssl => "SSL",
            SecurityProtocol::SaslPlaintext => "SASL_PLAINTEXT",
            SecurityProtocol::SaslSsl => "SASL_SSL",
        }
    }
}

impl fmt::Display for SecurityProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where clients are told to connect for one listener: shard `s` is `host:port + 1 + s`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdvertisedListener {
    pub host: String,
    /// The advertised bootstrap port.
    pub port: u16,
}

impl AdvertisedListener {
    pub fn shard_port(&self, shard: usize) -> u16 {
        self.port + 1 + shard as u16
    }
}

/// One listener every shard serves.
#[derive(Clone, Debug)]
pub struct Listener {
    pub protocol: SecurityProtocol,
    /// The bootstrap address; shard `s` also binds `port + 1 + s` on the same IP.
    pub bind: SocketAddr,
    pub advertised: AdvertisedListener,
}

impl Listener {
    pub fn shard_addr(&self, shard: usize) -> SocketAddr {
        SocketAddr::new(self.bind.ip(), self.bind.port() + 1 + shard as u16)
    }

    /// The bootstrap port and every shard port.
    pub fn ports(&self, nr_shards: usize) -> std::ops::RangeInclusive<u16> {
        self.bind.port()..=self.bind.port() + nr_shards as u16
    }
}

impl fmt::Display for Listener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}", self.protocol, self.bind)
    }
}

/// `PROTOCOL://HOST:PORT` split into its parts; HOST may be empty, a name, an IPv4 address
/// or a bracketed IPv6 address.
fn split_url(url: &str) -> Result<(SecurityProtocol, String, u16), String> {
    let bad = |why: &str| format!("'{url}': {why} (expected PROTOCOL://HOST:PORT)");
    let (protocol, address) = url.split_once("://").ok_or_else(|| bad("no '://'"))?;
    let protocol = SecurityProtocol::parse(protocol).ok_or_else(|| {
        bad("unknown security protocol: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL")
    })?;
    let (host, port) = address.rsplit_once(':').ok_or_else(|| bad("no port"))?;
    let port: u16 = port.parse().map_err(|_| bad("the port is not a number from 1 to 65535"))?;
    if port == 0 {
        return Err(bad("port 0 is not allowed: shard ports follow the bootstrap port"));
    }
    let host = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    Ok((protocol, host.to_string(), port))
}

/// A listener to bind: its host must be an IP address, or empty for all interfaces.
fn parse_listener(url: &str) -> Result<(SecurityProtocol, SocketAddr), String> {
    let (protocol, host, port) = split_url(url)?;
    let ip: IpAddr = match host.as_str() {
        "" => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        host => host.parse().map_err(|_| {
            format!("'{url}': a listener binds an IP address (or an empty host for all)")
        })?,
    };
    Ok((protocol, SocketAddr::new(ip, port)))
}

/// The listeners every shard serves, from the settings; see the module docs for the rules.
pub fn resolve(config: &Config, nr_shards: usize) -> Result<Vec<Listener>, String> {
    let urls = match config.listeners.is_empty() {
        true => vec![format!("PLAINTEXT://{}", config.kafka_addr)],
        false => config.listeners.clone(),
    };
    let mut listeners: Vec<Listener> = Vec::with_capacity(urls.len());
    for url in &urls {
        let (protocol, bind) = parse_listener(url).map_err(|e| format!("listeners: {e}"))?;
        if listeners.iter().any(|l| l.protocol == protocol) {
            return Err(format!("listeners: {protocol} is listed twice (one listener each)"));
        }
        let host = config.advertised_host.clone().unwrap_or_else(|| bind.ip().to_string());
        let advertised = AdvertisedListener { host, port: bind.port() };
        listeners.push(Listener { protocol, bind, advertised });
    }
    for url in &config.advertised_listeners {
        let (protocol, host, port) =
            split_url(url).map_err(|e| format!("advertised_listeners: {e}"))?;
        let listener = listeners.iter_mut().find(|l| l.protocol == protocol).ok_or_else(|| {
            format!("advertised_listeners: '{url}' names no listener of protocol {protocol}")
        })?;
        if host.is_empty() {
            return Err(format!("advertised_listeners: '{url}' has no host"));
        }
        listener.advertised = AdvertisedListener { host, port };
    }
    check_port_ranges(&listeners, nr_shards)?;
    let has_tls = listeners.iter().any(|l| l.protocol.uses_tls());
    if has_tls && (config.tls_cert_file.is_none() || config.tls_key_file.is_none()) {
        return Err("an SSL or SASL_SSL listener needs tls_cert_file and tls_key_file (PEM)".into());
    }
    if listeners.iter().any(|l| l.protocol.uses_sasl()) {
        sasl_mechanisms(config)?;
    }
    Ok(listeners)
}

/// The SASL mechanisms to serve (`sasl_mechanisms`; invariant 3).
pub fn sasl_mechanisms(config: &Config) -> Result<Vec<Mechanism>, String> {
    let mut mechanisms = Vec::new();
    for name in &config.sasl_mechanisms {
        let mechanism = Mechanism::from_name(name.trim()).ok_or_else(|| {
            format!(
                "sasl_mechanisms: unknown mechanism '{name}' (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)"
            )
        })?;
        if !mechanisms.contains(&mechanism) {
            mechanisms.push(mechanism);
        }
    }
    if mechanisms.is_empty() {
        return Err("sasl_mechanisms: a SASL listener needs at least one mechanism".into());
    }
    Ok(mechanisms)
}

/// Invariant 1: every port of every listener (advertised ones too) fits in 16 bits, and no
/// two listeners share a port.
fn check_port_ranges(listeners: &[Listener], nr_shards: usize) -> Result<(), String> {
    for l in listeners {
        for port in [l.bind.port(), l.advertised.port] {
            if port as usize + nr_shards > u16::MAX as usize {
                return Err(format!(
                    "listener {l}: port {port} leaves no room for {nr_shards} shard ports"
                ));
            }
        }
    }
    for (i, a) in listeners.iter().enumerate() {
        for b in &listeners[i + 1..] {
            let (ra, rb) = (a.ports(nr_shards), b.ports(nr_shards));
            if ra.start() <= rb.end() && rb.start() <= ra.end() {
                return Err(format!(
                    "listeners {a} and {b} overlap: each uses its port and the next {nr_shards} \
                     (one per shard)"
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::config::Cli;

    fn resolved(args: &[&str]) -> Result<Vec<Listener>, String> {
        let cli = Cli::try_parse_from([&["shardlog"], args].concat()).unwrap();
        resolve(&cli.config, 2)
    }

    #[test]
    fn without_listeners_kafka_addr_is_the_plaintext_listener() {
        let listeners = resolved(&["--kafka-addr", "127.0.0.1:9200"]).unwrap();
        assert_eq!(listeners.len(), 1);
        assert_eq!(listeners[0].protocol, SecurityProtocol::Plaintext);
        assert_eq!(listeners[0].bind, "127.0.0.1:9200".parse::<SocketAddr>().unwrap());
        assert_eq!(
            listeners[0].advertised,
            AdvertisedListener { host: "127.0.0.1".into(), port: 9200 }
        );
    }

    #[test]
    fn each_listener_is_advertised_with_its_own_host_and_port() {
        let listeners = resolved(&[
            "--listener",
            "PLAINTEXT://127.0.0.1:9092",
            "--listener",
            "ssl://[::1]:9192",
            "--advertised-listeners",
            "SSL://broker-1.example.net:19192",
            "--tls-cert-file",
            "c.pem",
            "--tls-key-file",
            "k.pem",
        ])
        .unwrap();
        assert_eq!(listeners[0].advertised.host, "127.0.0.1");
        assert_eq!(listeners[1].protocol, SecurityProtocol::Ssl);
        assert_eq!(listeners[1].bind, "[::1]:9192".parse::<SocketAddr>().unwrap());
        assert_eq!(listeners[1].shard_addr(1), "[::1]:9194".parse::<SocketAddr>().unwrap());
        let advertised = &listeners[1].advertised;
        assert_eq!(
            (advertised.host.as_str(), advertised.shard_port(0)),
            ("broker-1.example.net", 19193)
        );
    }

    #[test]
    fn sasl_listeners_serve_the_mechanisms_named() {
        let listeners = resolved(&[
            "--listeners",
            "SASL_PLAINTEXT://127.0.0.1:9092",
            "--sasl-mechanisms",
            "PLAIN,SCRAM-SHA-512",
        ])
        .unwrap();
        assert_eq!(listeners[0].protocol, SecurityProtocol::SaslPlaintext);
        let cli = Cli::try_parse_from(["shardlog", "--sasl-mechanisms", "PLAIN,SCRAM-SHA-512"]);
        let mechanisms = sasl_mechanisms(&cli.unwrap().config).unwrap();
        assert_eq!(mechanisms, [Mechanism::Plain, Mechanism::from_name("SCRAM-SHA-512").unwrap()]);
    }

    #[test]
    fn bad_listener_settings_are_refused_with_a_message_naming_them() {
        let cases: [(&[&str], &str); 10] = [
            (&["--listeners", "SASL_SSL://127.0.0.1:9192"], "tls_cert_file"),
            (
                &["--listeners", "SASL_PLAINTEXT://127.0.0.1:9192", "--sasl-mechanisms", "PLAN"],
                "unknown mechanism 'PLAN'",
            ),
            (
                &["--listeners", "SASL_PLAINTEXT://127.0.0.1:9192", "--sasl-mechanisms", ""],
                "sasl_mechanisms",
            ),
            (&["--listeners", "HTTP://127.0.0.1:80"], "unknown security protocol"),
            (&["--listeners", "PLAINTEXT://localhost:9092"], "binds an IP address"),
            (&["--listeners", "PLAINTEXT://127.0.0.1"], "no port"),
            (&["--listeners", "PLAINTEXT://127.0.0.1:http"], "the port is not a number"),
            (&["--listeners", "PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9094"], "overlap"),
            (&["--listeners", "SSL://127.0.0.1:9192"], "tls_cert_file"),
            (&["--advertised-listeners", "SSL://h:1"], "names no listener"),
        ];
        for (args, expected) in cases {
            let error = resolved(args).expect_err(expected);
            assert!(error.contains(expected), "{args:?}: {error}");
        }
    }
}
