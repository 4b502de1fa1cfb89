//! SASL on a listener (Kafka's SASL_PLAINTEXT and SASL_SSL): the mechanisms as sans-IO
//! state machines (`plain.rs`, `scram.rs`), the per-connection session the connection
//! loop drives, and the per-shard slow-down of repeated failures (`throttle.rs`).
//!
//! Runs on the shard of each connection, before its first request other than ApiVersions
//! (`connection.rs` enforces the order: SaslHandshake, then SaslAuthenticate until done,
//! or, after a SaslHandshake v0, the tokens as bare length-prefixed frames). Not a hot
//! path: once per connection. Credentials come from the broker's copy of the cluster
//! metadata through [`crate::RequestHandler::scram_credential`]; nothing here touches a
//! file or another shard.
//!
//! Invariants:
//! 1. Only a completed exchange authenticates: the principal is `User:<name>` from then
//!    on, and nothing before it reaches a handler (but ApiVersions).
//! 2. A failure answers SASL_AUTHENTICATION_FAILED with a message (never the password),
//!    after a delay that grows with the failures from that address, then closes.
//! 3. No input panics (the `sasl` fuzz target; `tests/fuzz_corpus.rs` replays it).

pub(crate) mod gate;
pub mod plain;
pub mod scram;
mod throttle;

pub use gate::MAX_UNAUTHENTICATED_FRAME_BYTES;
pub use scram::{ScramCredential, ScramMechanism};
pub use throttle::FailureThrottle;

/// A SASL mechanism this broker can serve.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mechanism {
    Plain,
    Scram(ScramMechanism),
}

impl Mechanism {
    pub const ALL: [Mechanism; 3] = [
        Mechanism::Plain,
        Mechanism::Scram(ScramMechanism::Sha256),
        Mechanism::Scram(ScramMechanism::Sha512),
    ];

    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Plain => "PLAIN",
            Mechanism::Scram(m) => m.name(),
        }
    }

    /// Kafka's mechanism names, case-sensitive as Kafka compares them.
    pub fn from_name(name: &str) -> Option<Mechanism> {
        Self::ALL.into_iter().find(|m| m.name() == name)
    }
}

/// Why an exchange failed; `message` is what the client is told (and what is logged).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthFailure {
    pub message: String,
    /// A wrong password or an unknown user (rather than a malformed message).
    pub invalid_credentials: bool,
    /// The user the client named, when known (for the log line, never for the client).
    pub user: Option<String>,
}

impl AuthFailure {
    pub fn protocol(why: &str) -> AuthFailure {
        AuthFailure::protocol_owned(why.to_string())
    }

    pub fn protocol_owned(why: String) -> AuthFailure {
        AuthFailure {
            message: format!("Authentication failed: {why}"),
            invalid_credentials: false,
            user: None,
        }
    }

    /// Kafka's wording for a wrong password or an unknown user (the same for both).
    pub fn credentials(user: &str, mechanism: &str) -> AuthFailure {
        AuthFailure {
            message: format!(
                "Authentication failed during authentication due to invalid credentials with \
                 SASL mechanism {mechanism}"
            ),
            invalid_credentials: true,
            user: Some(user.to_string()),
        }
    }
}

/// What the connection does after a token.
#[derive(Debug)]
pub enum Step {
    /// Send this token and wait for the client's next.
    Challenge(Vec<u8>),
    /// Authenticated as `user`; send `token` (SCRAM's server-final; empty for PLAIN).
    Done { user: String, token: Vec<u8> },
    /// PLAIN: check the password off the shard's thread ([`plain::PlainLogin::verify`]);
    /// success is `Done` with an empty token.
    CheckPassword(plain::PlainLogin),
}

/// One connection's exchange, after SaslHandshake chose the mechanism.
pub enum Session {
    Plain { used: bool },
    Scram(scram::ScramServer),
}

impl Session {
    pub fn new(mechanism: Mechanism) -> Session {
        match mechanism {
            Mechanism::Plain => Session::Plain { used: false },
            Mechanism::Scram(m) => Session::Scram(scram::ScramServer::new(m)),
        }
    }

    pub fn mechanism(&self) -> Mechanism {
        match self {
            Session::Plain { .. } => Mechanism::Plain,
            Session::Scram(server) => Mechanism::Scram(server.mechanism()),
        }
    }

    /// Feeds the client's next token. `server_nonce` is called for SCRAM's first message;
    /// `lookup` finds a user's stored credential.
    pub fn step(
        &mut self,
        token: &[u8],
        server_nonce: impl FnOnce() -> String,
        lookup: impl Fn(&str, ScramMechanism) -> Option<ScramCredential>,
    ) -> Result<Step, AuthFailure> {
        match self {
            Session::Plain { used: true } => Err(AuthFailure::protocol("PLAIN takes one message")),
            Session::Plain { used } => {
                *used = true;
                plain::parse(token, lookup).map(Step::CheckPassword)
            }
            Session::Scram(server) if server.user().is_none() => {
                let mechanism = server.mechanism();
                let challenge =
                    server.client_first(token, &server_nonce(), |user| lookup(user, mechanism))?;
                Ok(Step::Challenge(challenge))
            }
            Session::Scram(server) => {
                let (user, token) = server.client_final(token)?;
                Ok(Step::Done { user, token })
            }
        }
    }

    /// The user named so far, for the failure's log line.
    pub fn user(&self) -> Option<&str> {
        match self {
            Session::Plain { .. } => None,
            Session::Scram(server) => server.user(),
        }
    }
}

/// What a shard's SASL listener serves: the enabled mechanisms (`sasl_mechanisms`) and the
/// shard's record of failures by address.
pub struct SaslConfig {
    pub mechanisms: Vec<Mechanism>,
    pub throttle: FailureThrottle,
}

impl SaslConfig {
    pub fn new(mechanisms: Vec<Mechanism>) -> SaslConfig {
        SaslConfig { mechanisms, throttle: FailureThrottle::default() }
    }

    /// The mechanism a SaslHandshake names, if enabled.
    pub fn enabled(&self, name: &str) -> Option<Mechanism> {
        Mechanism::from_name(name).filter(|m| self.mechanisms.contains(m))
    }
}
