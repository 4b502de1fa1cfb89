//! CSRF protection for the console's forms: a per-process random key; each form carries
//! the HMAC-SHA256 of its session and its action's name under that key (hex), and a POST
//! must bring back the token of the action it asks for in the session it comes with (with
//! a login, `session.rs`: so a token of one user's page is refused in another's), and
//! come from a page of the admin endpoint itself (its Origin, or else its Referer, names
//! the address the client connected to).
//!
//! A page of another site cannot read a token (the browser keeps it from reading the
//! console's pages), so it cannot forge a form; a page served from another name that
//! resolves to the admin endpoint (DNS rebinding) could read one, and is refused by the
//! Origin check, which accepts only the endpoint's own address (and `localhost` when it
//! is a loopback address).

use std::net::SocketAddr;

use ring::hmac;

use super::super::http;

/// The key the tokens are made with; a new one per process, so a restart voids old forms.
pub struct Csrf {
    key: hmac::Key,
}

/// What a page's forms are signed for: the key and the session (empty without a login).
#[derive(Clone, Copy)]
pub struct Forms<'a> {
    pub csrf: &'a Csrf,
    pub session: &'a str,
}

impl Forms<'_> {
    /// The token a form for `action` carries.
    pub fn token(self, action: &str) -> String {
        self.csrf.token(self.session, action)
    }
}

/// A new random HMAC-SHA256 key (per process: the CSRF key, the session key).
pub fn random_key() -> hmac::Key {
    let mut secret = [0u8; 32];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut secret)
        .expect("the OS random source works");
    hmac::Key::new(hmac::HMAC_SHA256, &secret)
}

impl Csrf {
    pub fn new() -> Csrf {
        Csrf { key: random_key() }
    }

    /// The token a form for `action` carries in `session`.
    pub fn token(&self, session: &str, action: &str) -> String {
        hex(hmac::sign(&self.key, &message(session, action)).as_ref())
    }

    /// Whether `token` is the token of `action` in `session` (compared in constant time).
    pub fn is_valid(&self, session: &str, action: &str, token: &str) -> bool {
        match unhex(token) {
            Some(tag) => hmac::verify(&self.key, &message(session, action), &tag).is_ok(),
            None => false,
        }
    }
}

/// What a token signs: the session, a NUL (in neither), the action.
fn message(session: &str, action: &str) -> Vec<u8> {
    [session.as_bytes(), b"\0", action.as_bytes()].concat()
}

/// Refuses a request whose Origin (or, without one, Referer) is not the admin endpoint
/// the client connected to: `Err` says why.
pub fn check_origin(head: &[u8], local_addr: Option<SocketAddr>) -> Result<(), String> {
    let (name, value) = match (http::header(head, "Origin"), http::header(head, "Referer")) {
        (Some(origin), _) => ("Origin", origin),
        (None, Some(referer)) => ("Referer", referer),
        (None, None) => return Err("the request has no Origin or Referer header".to_string()),
    };
    let Some(local) = local_addr else {
        return Err("the admin endpoint's own address is unknown".to_string());
    };
    let mut allowed = vec![local.to_string()];
    if local.ip().is_loopback() {
        allowed.push(format!("localhost:{}", local.port()));
    }
    match http::url_authority(value) {
        Some(authority) if allowed.contains(&authority) => Ok(()),
        _ => Err(format!(
            "its {name} {value:?} is not this admin endpoint ({})",
            allowed.join(" or ")
        )),
    }
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn unhex(text: &str) -> Option<Vec<u8>> {
    if text.len() % 2 != 0 || !text.is_ascii() {
        return None;
    }
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(&text[i..i + 2], 16).ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_valid_for_its_action_only_and_per_process() {
        let csrf = Csrf::new();
        let token = csrf.token("s1", "delete-topic");
        assert_eq!(token.len(), 64);
        assert!(csrf.is_valid("s1", "delete-topic", &token));
        assert!(!csrf.is_valid("s1", "create-topic", &token), "another action's token");
        assert!(!csrf.is_valid("s2", "delete-topic", &token), "another session's token");
        assert!(!csrf.is_valid("", "delete-topic", &token), "no session");
        assert!(!csrf.is_valid("s1", "delete-topic", &token[..62]), "cut short");
        assert!(!csrf.is_valid("s1", "delete-topic", ""), "missing");
        assert!(!csrf.is_valid("s1", "delete-topic", "zz"), "not hex");
        assert!(!csrf.is_valid("s1", "delete-topic", "é1"), "not ASCII, no panic");
        assert!(!Csrf::new().is_valid("s1", "delete-topic", &token), "another process's key");
    }

    #[test]
    fn only_the_endpoints_own_origin_is_accepted() {
        let local: SocketAddr = "127.0.0.1:9644".parse().unwrap();
        let head = |h: &str| format!("POST /x HTTP/1.1\r\n{h}\r\n\r\n").into_bytes();
        let check = |h: &str| check_origin(&head(h), Some(local));
        assert!(check("Origin: http://127.0.0.1:9644").is_ok());
        assert!(check("Origin: http://localhost:9644").is_ok());
        assert!(check("Referer: http://127.0.0.1:9644/topics/t").is_ok());
        assert!(check("Origin: http://evil.example").is_err());
        assert!(check("Origin: http://evil.example:9644").is_err(), "DNS rebinding");
        assert!(check("Origin: http://127.0.0.1:9645").is_err());
        assert!(check("Origin: null").is_err());
        assert!(check("Origin: http://evil.example\r\nReferer: http://127.0.0.1:9644/").is_err());
        assert!(check("Host: 127.0.0.1:9644").is_err(), "neither header");
        let public: SocketAddr = "10.0.0.5:9644".parse().unwrap();
        let from = |h: &str| check_origin(&head(h), Some(public));
        assert!(from("Origin: http://10.0.0.5:9644").is_ok());
        assert!(from("Origin: http://localhost:9644").is_err(), "not a loopback endpoint");
    }
}
