//! SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677): the server's state machine, the
//! client's (for the admin CLI and the tests), and the key derivations both sides and the
//! credential store share.
//!
//! Sans-IO: a message in, a message (or a failure) out; randomness (the server nonce) is
//! an argument, so the RFC's test vectors run unchanged. Runs on the shard of the
//! connection, once per login: two HMACs and a hash for the server, no PBKDF2 (that is the
//! client's cost, and the store keeps only the salted keys).
//!
//! Invariants:
//! 1. The server never holds a password: it stores (salt, iterations, StoredKey, ServerKey)
//!    and checks a proof with them; comparisons of keys are constant-time.
//! 2. An unknown user gets a challenge like a known one (a salt derived from a per-process
//!    secret and the name) and fails at the proof, so a client cannot tell the difference
//!    before it proves a password.
//! 3. Any input is a message or a failure, never a panic: every field is checked (UTF-8,
//!    attribute names, base64, nonce prefix, lengths) before use.

use std::sync::OnceLock;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use ring::rand::SecureRandom;
use ring::{digest, hmac, pbkdf2};
use subtle::ConstantTimeEq;

use super::AuthFailure;

/// The iterations Kafka (and shardlog's CLI) use by default, and the least accepted.
pub const MIN_ITERATIONS: u32 = 4096;
/// The most iterations accepted (Kafka's bound): PLAIN logins derive the key with them.
pub const MAX_ITERATIONS: u32 = 16384;

/// A SCRAM hash function, numbered as Kafka's `ScramMechanism` (KIP-554).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ScramMechanism {
    Sha256,
    Sha512,
}

impl ScramMechanism {
    pub const ALL: [ScramMechanism; 2] = [ScramMechanism::Sha256, ScramMechanism::Sha512];

    pub fn name(self) -> &'static str {
        match self {
            ScramMechanism::Sha256 => "SCRAM-SHA-256",
            ScramMechanism::Sha512 => "SCRAM-SHA-512",
        }
    }

    pub fn from_name(name: &str) -> Option<ScramMechanism> {
        Self::ALL.into_iter().find(|m| m.name().eq_ignore_ascii_case(name))
    }

    /// Kafka's number for the mechanism in the credential APIs (0 is UNKNOWN).
    pub fn kafka_type(self) -> i8 {
        match self {
            ScramMechanism::Sha256 => 1,
            ScramMechanism::Sha512 => 2,
        }
    }

    pub fn from_kafka_type(value: i8) -> Option<ScramMechanism> {
        Self::ALL.into_iter().find(|m| m.kafka_type() == value)
    }

    /// Bytes of the hash, and so of every key.
    pub fn key_bytes(self) -> usize {
        match self {
            ScramMechanism::Sha256 => 32,
            ScramMechanism::Sha512 => 64,
        }
    }

    fn hmac(self) -> hmac::Algorithm {
        match self {
            ScramMechanism::Sha256 => hmac::HMAC_SHA256,
            ScramMechanism::Sha512 => hmac::HMAC_SHA512,
        }
    }

    fn digest(self) -> &'static digest::Algorithm {
        match self {
            ScramMechanism::Sha256 => &digest::SHA256,
            ScramMechanism::Sha512 => &digest::SHA512,
        }
    }

    fn pbkdf2(self) -> pbkdf2::Algorithm {
        match self {
            ScramMechanism::Sha256 => pbkdf2::PBKDF2_HMAC_SHA256,
            ScramMechanism::Sha512 => pbkdf2::PBKDF2_HMAC_SHA512,
        }
    }

    fn hmac_of(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        hmac::sign(&hmac::Key::new(self.hmac(), key), data).as_ref().to_vec()
    }
}

/// What the store keeps of one user's password for one mechanism (invariant 1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScramCredential {
    pub salt: Vec<u8>,
    pub iterations: u32,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
}

impl ScramCredential {
    /// The credential of `password` with `salt` (the PBKDF2 runs here: milliseconds).
    pub fn new(
        mechanism: ScramMechanism,
        password: &[u8],
        salt: &[u8],
        iterations: u32,
    ) -> ScramCredential {
        let salted = salted_password(mechanism, password, salt, iterations);
        ScramCredential::from_salted_password(mechanism, &salted, salt, iterations)
    }

    /// The credential from a salted password (what AlterUserScramCredentials carries).
    pub fn from_salted_password(
        mechanism: ScramMechanism,
        salted_password: &[u8],
        salt: &[u8],
        iterations: u32,
    ) -> ScramCredential {
        let client_key = mechanism.hmac_of(salted_password, b"Client Key");
        let stored_key = digest::digest(mechanism.digest(), &client_key).as_ref().to_vec();
        let server_key = mechanism.hmac_of(salted_password, b"Server Key");
        ScramCredential { salt: salt.to_vec(), iterations, stored_key, server_key }
    }

    /// Whether `password` is this credential's (constant-time on the keys). Runs the
    /// PBKDF2: call it off the shard's thread.
    pub fn matches_password(&self, mechanism: ScramMechanism, password: &[u8]) -> bool {
        if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&self.iterations) {
            return false;
        }
        let derived = ScramCredential::new(mechanism, password, &self.salt, self.iterations);
        bool::from(derived.stored_key.ct_eq(&self.stored_key))
    }
}

/// RFC 5802's Hi(): PBKDF2 with the mechanism's HMAC, one hash-length block.
pub fn salted_password(
    mechanism: ScramMechanism,
    password: &[u8],
    salt: &[u8],
    iterations: u32,
) -> Vec<u8> {
    let iterations = std::num::NonZeroU32::new(iterations.max(1)).expect("at least 1");
    let mut out = vec![0u8; mechanism.key_bytes()];
    pbkdf2::derive(mechanism.pbkdf2(), iterations, salt, password, &mut out);
    out
}

/// `count` random bytes from the operating system.
pub fn random_bytes(count: usize) -> Vec<u8> {
    let mut out = vec![0u8; count];
    ring::rand::SystemRandom::new().fill(&mut out).expect("the OS random source works");
    out
}

/// A fresh nonce: 24 random bytes as base64 (printable, no ',').
pub fn random_nonce() -> String {
    BASE64.encode(random_bytes(24))
}

/// Invariant 2: what an unknown user is challenged with. The salt is stable for a name
/// within this process, so asking twice gives the same answer, as for a real user.
fn unknown_user_credential(mechanism: ScramMechanism, user: &str) -> ScramCredential {
    static SECRET: OnceLock<Vec<u8>> = OnceLock::new();
    let secret = SECRET.get_or_init(|| random_bytes(32));
    let salt = mechanism.hmac_of(secret, user.as_bytes())[..16].to_vec();
    let keys = mechanism.hmac_of(secret, &salt);
    ScramCredential { salt, iterations: MIN_ITERATIONS, stored_key: keys.clone(), server_key: keys }
}

/// The server side of one SCRAM exchange: client-first, then client-final.
pub struct ScramServer {
    mechanism: ScramMechanism,
    state: ServerState,
}

enum ServerState {
    AwaitingClientFirst,
    AwaitingClientFinal(Box<Exchange>),
    Finished,
}

/// What the server remembers between its two messages.
struct Exchange {
    user: String,
    known_user: bool,
    credential: ScramCredential,
    gs2_header: String,
    client_first_bare: String,
    server_first: String,
    nonce: String,
}

/// A client-first message, parsed.
struct ClientFirst<'a> {
    gs2_header: &'a str,
    user: String,
    bare: &'a str,
    client_nonce: &'a str,
}

impl ScramServer {
    pub fn new(mechanism: ScramMechanism) -> ScramServer {
        ScramServer { mechanism, state: ServerState::AwaitingClientFirst }
    }

    pub fn mechanism(&self) -> ScramMechanism {
        self.mechanism
    }

    /// The user named in client-first (once it was read), for log lines.
    pub fn user(&self) -> Option<&str> {
        match &self.state {
            ServerState::AwaitingClientFinal(exchange) => Some(&exchange.user),
            _ => None,
        }
    }

    /// Reads client-first and answers server-first. `server_nonce` is appended to the
    /// client's nonce (printable, without ','); `lookup` finds the user's credential.
    pub fn client_first(
        &mut self,
        message: &[u8],
        server_nonce: &str,
        lookup: impl FnOnce(&str) -> Option<ScramCredential>,
    ) -> Result<Vec<u8>, AuthFailure> {
        if !matches!(self.state, ServerState::AwaitingClientFirst) {
            return Err(AuthFailure::protocol("client-first sent twice"));
        }
        self.state = ServerState::Finished;
        let text = std::str::from_utf8(message)
            .map_err(|_| AuthFailure::protocol("client-first is not UTF-8"))?;
        let first = parse_client_first(text)?;
        let (credential, known_user) = match lookup(&first.user) {
            Some(credential) => (credential, true),
            None => (unknown_user_credential(self.mechanism, &first.user), false),
        };
        let nonce = format!("{}{server_nonce}", first.client_nonce);
        let server_first =
            format!("r={nonce},s={},i={}", BASE64.encode(&credential.salt), credential.iterations);
        let reply = server_first.clone().into_bytes();
        self.state = ServerState::AwaitingClientFinal(Box::new(Exchange {
            user: first.user,
            known_user,
            credential,
            gs2_header: first.gs2_header.to_string(),
            client_first_bare: first.bare.to_string(),
            server_first,
            nonce,
        }));
        Ok(reply)
    }

    /// Reads client-final; on a valid proof, the user's name and server-final.
    pub fn client_final(&mut self, message: &[u8]) -> Result<(String, Vec<u8>), AuthFailure> {
        let state = std::mem::replace(&mut self.state, ServerState::Finished);
        let ServerState::AwaitingClientFinal(exchange) = state else {
            return Err(AuthFailure::protocol("client-final out of order"));
        };
        let failed = || AuthFailure::credentials(&exchange.user, self.mechanism.name());
        let text = std::str::from_utf8(message)
            .map_err(|_| AuthFailure::protocol("client-final is not UTF-8"))?;
        let (without_proof, proof) = text
            .rsplit_once(",p=")
            .ok_or_else(|| AuthFailure::protocol("client-final has no proof"))?;
        let mut attributes = without_proof.split(',');
        let binding = attribute(attributes.next(), 'c')?;
        let nonce = attribute(attributes.next(), 'r')?;
        if BASE64.decode(binding).ok().as_deref() != Some(exchange.gs2_header.as_bytes()) {
            return Err(AuthFailure::protocol("channel binding does not match the gs2 header"));
        }
        // Kafka checks only that the nonce ends with the one it sent (ScramSaslServer's
        // `endsWith`): librdkafka before 2.2 (Debian's kcat 1.7.1 runs 2.0.2) sends its own
        // nonce again in front of the combined one. The proof covers this message as sent,
        // server nonce included, so a replay still fails.
        if !nonce.ends_with(&exchange.nonce) {
            return Err(AuthFailure::protocol("the nonce is not the one the server sent"));
        }
        let proof =
            BASE64.decode(proof).map_err(|_| AuthFailure::protocol("the proof is not base64"))?;
        if proof.len() != self.mechanism.key_bytes() {
            return Err(failed());
        }
        let auth_message =
            format!("{},{},{without_proof}", exchange.client_first_bare, exchange.server_first);
        let credential = &exchange.credential;
        let signature = self.mechanism.hmac_of(&credential.stored_key, auth_message.as_bytes());
        let client_key: Vec<u8> = proof.iter().zip(&signature).map(|(p, s)| p ^ s).collect();
        let stored = digest::digest(self.mechanism.digest(), &client_key);
        let valid = bool::from(stored.as_ref().ct_eq(&credential.stored_key));
        if !(valid && exchange.known_user) {
            return Err(failed());
        }
        let server_signature =
            self.mechanism.hmac_of(&credential.server_key, auth_message.as_bytes());
        let server_final = format!("v={}", BASE64.encode(server_signature)).into_bytes();
        Ok((exchange.user, server_final))
    }
}

/// `gs2-header client-first-bare` (RFC 5802 section 7), without channel binding.
fn parse_client_first(text: &str) -> Result<ClientFirst<'_>, AuthFailure> {
    let bad = AuthFailure::protocol;
    let (flag, rest) = text.split_once(',').ok_or_else(|| bad("no gs2 header"))?;
    match flag {
        "n" | "y" => {}
        f if f.starts_with("p=") => return Err(bad("channel binding is not supported")),
        _ => return Err(bad("bad gs2 channel binding flag")),
    }
    let (authzid, bare) = rest.split_once(',').ok_or_else(|| bad("no gs2 header"))?;
    let gs2_header = &text[..flag.len() + 1 + authzid.len() + 1];
    let mut attributes = bare.split(',');
    let user = decode_saslname(attribute(attributes.next(), 'n')?)?;
    let client_nonce = attribute(attributes.next(), 'r')?;
    if user.is_empty() {
        return Err(bad("empty user name"));
    }
    if !authzid.is_empty() && decode_saslname(attribute(Some(authzid), 'a')?)? != user {
        return Err(bad("an authorization id other than the user name"));
    }
    if client_nonce.is_empty() || !client_nonce.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
        return Err(bad("bad client nonce"));
    }
    // Extensions (Kafka's tokenauth=...) are not supported: refused rather than ignored,
    // since a token login must not pass as a password login.
    if attributes.next().is_some() {
        return Err(bad("SCRAM extensions are not supported"));
    }
    Ok(ClientFirst { gs2_header, user, bare, client_nonce })
}

/// The value of `name=value`, refusing any other attribute in that place.
fn attribute(field: Option<&str>, name: char) -> Result<&str, AuthFailure> {
    let field = field.ok_or_else(|| AuthFailure::protocol("a SCRAM attribute is missing"))?;
    let mut chars = field.chars();
    match (chars.next(), chars.next()) {
        (Some(n), Some('=')) if n == name => Ok(&field[2..]),
        _ => Err(AuthFailure::protocol("unexpected SCRAM attribute")),
    }
}

/// RFC 5802's saslname: "=2C" is ',' and "=3D" is '='; any other '=' is an error.
fn decode_saslname(name: &str) -> Result<String, AuthFailure> {
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(at) = rest.find('=') {
        out.push_str(&rest[..at]);
        match rest.get(at..at + 3) {
            Some("=2C") => out.push(','),
            Some("=3D") => out.push('='),
            _ => return Err(AuthFailure::protocol("bad escape in a SCRAM name")),
        }
        rest = &rest[at + 3..];
    }
    out.push_str(rest);
    Ok(out)
}

fn encode_saslname(name: &str) -> String {
    name.replace('=', "=3D").replace(',', "=2C")
}

/// The client side of one exchange (the admin CLI; the tests).
pub struct ScramClient {
    mechanism: ScramMechanism,
    password: Vec<u8>,
    client_first_bare: String,
    nonce: String,
    /// The server signature expected in server-final, once client-final is made.
    expected_server_signature: Option<Vec<u8>>,
}

impl ScramClient {
    pub fn new(mechanism: ScramMechanism, user: &str, password: &str, nonce: &str) -> Self {
        ScramClient {
            mechanism,
            password: password.as_bytes().to_vec(),
            client_first_bare: format!("n={},r={nonce}", encode_saslname(user)),
            nonce: nonce.to_string(),
            expected_server_signature: None,
        }
    }

    pub fn client_first(&self) -> Vec<u8> {
        format!("n,,{}", self.client_first_bare).into_bytes()
    }

    /// Reads server-first; returns client-final.
    pub fn client_final(&mut self, server_first: &[u8]) -> Result<Vec<u8>, String> {
        self.client_final_sending(server_first, |_, combined| combined.to_string())
    }

    /// `client_final`, with the nonce sent made from (client nonce, combined nonce).
    fn client_final_sending(
        &mut self,
        server_first: &[u8],
        sent_nonce: fn(&str, &str) -> String,
    ) -> Result<Vec<u8>, String> {
        let text = std::str::from_utf8(server_first).map_err(|_| "server-first is not UTF-8")?;
        let mut fields = text.split(',');
        let bad = |e: AuthFailure| e.message;
        let nonce = attribute(fields.next(), 'r').map_err(bad)?;
        let salt = attribute(fields.next(), 's').map_err(bad)?;
        let iterations = attribute(fields.next(), 'i').map_err(bad)?;
        if !nonce.starts_with(&self.nonce) {
            return Err("the server's nonce does not extend ours".into());
        }
        let salt = BASE64.decode(salt).map_err(|_| "the salt is not base64")?;
        let iterations: u32 = iterations.parse().map_err(|_| "bad iteration count")?;
        if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&iterations) {
            return Err(format!("the server asks for {iterations} iterations"));
        }
        let salted = salted_password(self.mechanism, &self.password, &salt, iterations);
        let without_proof = format!("c=biws,r={}", sent_nonce(&self.nonce, nonce));
        let auth_message = format!("{},{text},{without_proof}", self.client_first_bare);
        let client_key = self.mechanism.hmac_of(&salted, b"Client Key");
        let stored_key = digest::digest(self.mechanism.digest(), &client_key);
        let signature = self.mechanism.hmac_of(stored_key.as_ref(), auth_message.as_bytes());
        let proof: Vec<u8> = client_key.iter().zip(&signature).map(|(k, s)| k ^ s).collect();
        let server_key = self.mechanism.hmac_of(&salted, b"Server Key");
        self.expected_server_signature =
            Some(self.mechanism.hmac_of(&server_key, auth_message.as_bytes()));
        Ok(format!("{without_proof},p={}", BASE64.encode(proof)).into_bytes())
    }

    /// Checks server-final: the server proved it knows the credential.
    pub fn check_server_final(&self, server_final: &[u8]) -> Result<(), String> {
        let text = std::str::from_utf8(server_final).map_err(|_| "server-final is not UTF-8")?;
        if let Some(error) = text.strip_prefix("e=") {
            return Err(format!("the server refused: {error}"));
        }
        let signature = attribute(Some(text), 'v').map_err(|e| e.message)?;
        let signature = BASE64.decode(signature).map_err(|_| "the signature is not base64")?;
        match &self.expected_server_signature {
            Some(expected) if bool::from(expected.ct_eq(&signature)) => Ok(()),
            _ => Err("the server's signature does not verify".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7677 section 3: user "user", password "pencil".
    const CLIENT_NONCE: &str = "rOprNGfwEbeRWgbNEkqO";
    const SERVER_NONCE: &str = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
    const CLIENT_FIRST: &str = "n,,n=user,r=rOprNGfwEbeRWgbNEkqO";
    const SERVER_FIRST: &str = "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
                                s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
    const CLIENT_FINAL: &str = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
                                p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
    const SERVER_FINAL: &str = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=";

    fn rfc_credential() -> ScramCredential {
        let salt = BASE64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        ScramCredential::new(ScramMechanism::Sha256, b"pencil", &salt, 4096)
    }

    #[test]
    fn the_server_answers_rfc_7677s_example_byte_for_byte() {
        let mut server = ScramServer::new(ScramMechanism::Sha256);
        let lookup = |user: &str| (user == "user").then(rfc_credential);
        let first = server.client_first(CLIENT_FIRST.as_bytes(), SERVER_NONCE, lookup).unwrap();
        assert_eq!(String::from_utf8(first).unwrap(), SERVER_FIRST);
        let (user, last) = server.client_final(CLIENT_FINAL.as_bytes()).unwrap();
        assert_eq!(user, "user");
        assert_eq!(String::from_utf8(last).unwrap(), SERVER_FINAL);
    }

    #[test]
    fn the_client_sends_rfc_7677s_example_byte_for_byte() {
        let mut client = ScramClient::new(ScramMechanism::Sha256, "user", "pencil", CLIENT_NONCE);
        assert_eq!(client.client_first(), CLIENT_FIRST.as_bytes());
        let last = client.client_final(SERVER_FIRST.as_bytes()).unwrap();
        assert_eq!(String::from_utf8(last).unwrap(), CLIENT_FINAL);
        client.check_server_final(SERVER_FINAL.as_bytes()).unwrap();
        assert!(client.check_server_final(b"v=AAAA").is_err());
    }

    /// One exchange between this client and this server; the user on success.
    fn exchange(
        mechanism: ScramMechanism,
        user: &str,
        password: &str,
        stored: &ScramCredential,
    ) -> Result<String, AuthFailure> {
        let mut client = ScramClient::new(mechanism, user, password, &random_nonce());
        let mut server = ScramServer::new(mechanism);
        let lookup = |name: &str| (name == "alice").then(|| stored.clone());
        let first = server.client_first(&client.client_first(), &random_nonce(), lookup)?;
        let last = client.client_final(&first).map_err(AuthFailure::protocol_owned)?;
        let (user, server_final) = server.client_final(&last)?;
        client.check_server_final(&server_final).unwrap();
        Ok(user)
    }

    #[test]
    fn both_mechanisms_log_in_with_the_right_password_only() {
        for mechanism in ScramMechanism::ALL {
            let salt = random_bytes(16);
            let stored = ScramCredential::new(mechanism, b"s3cret", &salt, MIN_ITERATIONS);
            assert_eq!(exchange(mechanism, "alice", "s3cret", &stored).unwrap(), "alice");
            let wrong = exchange(mechanism, "alice", "s3cret!", &stored).unwrap_err();
            assert!(wrong.invalid_credentials, "{wrong:?}");
            let unknown = exchange(mechanism, "bob", "s3cret", &stored).unwrap_err();
            assert!(unknown.invalid_credentials, "{unknown:?}");
            assert!(stored.matches_password(mechanism, b"s3cret"));
            assert!(!stored.matches_password(mechanism, b"s3cre"));
        }
    }

    /// What librdkafka 2.0.2 sends (captured from Debian's kcat 1.7.1):
    /// `c=biws,r=<client nonce><client nonce><server nonce>,p=...`. Kafka accepts it; so does
    /// this server, and a nonce that does not end with the server's is still refused.
    #[test]
    fn a_client_nonce_repeated_in_front_of_the_combined_one_is_accepted_as_kafka_does() {
        let mechanism = ScramMechanism::Sha256;
        let stored = ScramCredential::new(mechanism, b"s3cret", &random_bytes(16), MIN_ITERATIONS);
        let sends = [
            (|client: &str, combined: &str| format!("{client}{combined}")) as fn(&str, &str) -> _,
            |_, combined| combined[..combined.len() - 1].to_string(),
        ];
        let mut outcomes = Vec::new();
        for sent_nonce in sends {
            let mut client = ScramClient::new(mechanism, "alice", "s3cret", &random_nonce());
            let mut server = ScramServer::new(mechanism);
            let lookup = |_: &str| Some(stored.clone());
            let first = server.client_first(&client.client_first(), &random_nonce(), lookup);
            let last = client.client_final_sending(&first.unwrap(), sent_nonce).unwrap();
            outcomes.push(server.client_final(&last).map(|(user, _)| user).map_err(|e| e.message));
        }
        let refused = Err("Authentication failed: the nonce is not the one the server sent".into());
        assert_eq!(outcomes, [Ok("alice".to_string()), refused]);
    }

    #[test]
    fn an_unknown_user_is_challenged_like_a_known_one() {
        let mut server = ScramServer::new(ScramMechanism::Sha512);
        let first = server.client_first(b"n,,n=nobody,r=abc", "def", |_| None).unwrap();
        let text = String::from_utf8(first).unwrap();
        assert!(text.starts_with("r=abcdef,s=") && text.ends_with(",i=4096"), "{text}");
        let mut again = ScramServer::new(ScramMechanism::Sha512);
        let second = again.client_first(b"n,,n=nobody,r=abc", "def", |_| None).unwrap();
        assert_eq!(text.as_bytes(), &second[..], "the same salt for the same name");
    }

    #[test]
    fn malformed_messages_are_failures_not_panics() {
        let cases: [&[u8]; 12] = [
            b"",
            b"n",
            b"n,,",
            b"p=tls-unique,,n=a,r=b",
            b"x,,n=a,r=b",
            b"n,,r=b,n=a",
            b"n,,n=a",
            b"n,,n=a=,r=b",
            b"n,,n=,r=b",
            b"n,a=b,n=a,r=b",
            b"n,,n=a,r=b,ext=1",
            b"\xff\xfe",
        ];
        for case in cases {
            let mut server = ScramServer::new(ScramMechanism::Sha256);
            let result = server.client_first(case, "x", |_| Some(rfc_credential()));
            assert!(result.is_err(), "{:?} accepted", String::from_utf8_lossy(case));
        }
        let finals: [&[u8]; 5] =
            [b"", b"c=biws", b"c=biws,r=ax,p=", b"c=eHl6,r=ax,p=AAAA", b"r=ax,c=biws,p=AAAA"];
        for case in finals {
            let mut server = ScramServer::new(ScramMechanism::Sha256);
            server.client_first(b"n,,n=user,r=a", "x", |_| Some(rfc_credential())).unwrap();
            assert!(server.client_final(case).is_err(), "{:?}", String::from_utf8_lossy(case));
        }
    }

    #[test]
    fn escaped_names_and_a_matching_authzid_are_accepted() {
        let mut server = ScramServer::new(ScramMechanism::Sha256);
        let lookup = |user: &str| {
            assert_eq!(user, "a,b=c");
            None
        };
        server.client_first(b"n,a=a=2Cb=3Dc,n=a=2Cb=3Dc,r=x", "y", lookup).unwrap();
        assert_eq!(server.user(), Some("a,b=c"));
    }
}
