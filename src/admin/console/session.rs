//! The console's login (docs/console.md, "Login and ACLs"): with `authorizer = true`, every
//! console page and action needs a session, made by `POST /login` with a SASL user's name
//! and password. The password is checked exactly as SASL PLAIN checks it (net's
//! `sasl::plain`: PBKDF2 with the user's stored salt and iterations, the stored key
//! compared in constant time, on a blocking thread; an unknown user costs the same).
//!
//! A session is a cookie, `shardlog_session=USER.EXPIRY.NONCE.MAC`: the user name (hex), the
//! expiry (Unix seconds), a random nonce (what the CSRF tokens of its pages are bound to)
//! and the HMAC-SHA256 of the three under a per-process random key, so a restart ends every
//! session. The broker keeps nothing per session but logouts, until they expire.
//!
//! Runs on shard 0 (the admin endpoint); not a hot path.
//!
//! Invariants:
//! 1. A cookie is accepted only with this process's MAC, before its expiry, not logged out,
//!    and while its user still has a credential (a deleted user's session ends at once).
//! 2. A failed login is answered after net's per-address delay (`FailureThrottle`: 100 ms,
//!    doubling per failure up to 5 s), as a failed SASL handshake is.
//! 3. At most `MAX_LOGGED_OUT` logouts are remembered; when full, expired ones go first,
//!    then the one expiring soonest.

use std::cell::RefCell;
use std::collections::HashMap;
use std::net::IpAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use ring::hmac;
use shardlog_net::sasl::{plain, scram, FailureThrottle};
use shardlog_shards::Shard;

use super::csrf::{hex, random_key, unhex};
use super::http;

/// The cookie's name.
pub const COOKIE: &str = "shardlog_session";
/// How long a session lasts after its login.
pub const SESSION_LIFETIME: Duration = Duration::from_secs(8 * 3600);
/// Logouts remembered at most (invariant 3).
const MAX_LOGGED_OUT: usize = 4096;

/// A logged-in user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Session {
    pub user: String,
    pub expiry_secs: u64,
    /// Random, hex: what the session's CSRF tokens are bound to.
    pub nonce: String,
}

impl Session {
    /// The principal the authorizer is asked about, as a SASL login's.
    pub fn principal(&self) -> String {
        format!("User:{}", self.user)
    }
}

/// Why a cookie was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    Missing,
    Malformed,
    BadSignature,
    Expired,
    LoggedOut,
    /// The user was deleted since the login.
    UnknownUser,
}

/// The session key, the logouts and the failed-login delays of one admin endpoint.
pub struct Sessions {
    key: hmac::Key,
    logged_out: RefCell<HashMap<String, u64>>,
    throttle: FailureThrottle,
    /// The endpoint is HTTPS: cookies are `Secure`.
    secure: bool,
}

impl Sessions {
    pub fn new(secure: bool) -> Sessions {
        Sessions {
            key: random_key(),
            logged_out: RefCell::default(),
            throttle: FailureThrottle::default(),
            secure,
        }
    }

    /// A new session of `user`, from `now_secs` for `SESSION_LIFETIME`.
    pub fn issue(&self, user: &str, now_secs: u64) -> Session {
        Session {
            user: user.to_string(),
            expiry_secs: now_secs + SESSION_LIFETIME.as_secs(),
            nonce: hex(&scram::random_bytes(16)),
        }
    }

    /// The cookie's value: the signed session.
    pub fn value(&self, session: &Session) -> String {
        let signed = signed_part(session);
        format!("{signed}.{}", hex(hmac::sign(&self.key, signed.as_bytes()).as_ref()))
    }

    /// `Set-Cookie` for a new session.
    pub fn set_cookie(&self, session: &Session) -> String {
        let secure = if self.secure { "; Secure" } else { "" };
        format!(
            "{COOKIE}={}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{secure}",
            self.value(session),
            SESSION_LIFETIME.as_secs()
        )
    }

    /// `Set-Cookie` that removes the session cookie.
    pub fn clear_cookie(&self) -> String {
        let secure = if self.secure { "; Secure" } else { "" };
        format!("{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0{secure}")
    }

    /// The session a cookie value carries, if valid at `now_secs` (invariant 1 but the
    /// user's existence, which the caller checks against its table).
    pub fn verify(&self, value: &str, now_secs: u64) -> Result<Session, Refusal> {
        let mut parts = value.split('.');
        let (Some(user), Some(expiry), Some(nonce), Some(mac), None) =
            (parts.next(), parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(Refusal::Malformed);
        };
        let signed_len = user.len() + expiry.len() + nonce.len() + 2;
        let tag = unhex(mac).ok_or(Refusal::Malformed)?;
        hmac::verify(&self.key, &value.as_bytes()[..signed_len], &tag)
            .map_err(|_| Refusal::BadSignature)?;
        let user = unhex(user).and_then(|u| String::from_utf8(u).ok());
        let (Some(user), Ok(expiry_secs)) = (user, expiry.parse::<u64>()) else {
            return Err(Refusal::Malformed);
        };
        if expiry_secs <= now_secs {
            return Err(Refusal::Expired);
        }
        if self.logged_out.borrow().contains_key(nonce) {
            return Err(Refusal::LoggedOut);
        }
        Ok(Session { user, expiry_secs, nonce: nonce.to_string() })
    }

    /// The session of a request head's cookie.
    pub fn of_request(&self, head: &[u8], now_secs: u64) -> Result<Session, Refusal> {
        let value = cookie(head, COOKIE).ok_or(Refusal::Missing)?;
        self.verify(value, now_secs)
    }

    /// Ends a session before its expiry (invariant 3).
    pub fn log_out(&self, session: &Session, now_secs: u64) {
        let mut logged_out = self.logged_out.borrow_mut();
        if logged_out.len() >= MAX_LOGGED_OUT {
            logged_out.retain(|_, expiry| *expiry > now_secs);
        }
        if logged_out.len() >= MAX_LOGGED_OUT {
            let soonest = logged_out.iter().min_by_key(|(_, e)| **e).map(|(n, _)| n.clone());
            logged_out.remove(&soonest.expect("the map is full"));
        }
        logged_out.insert(session.nonce.clone(), session.expiry_secs);
    }

    /// Checks `user`'s password against the broker's user store as SASL PLAIN does; a new
    /// session, or (after the failure delay, invariant 2) `Err`.
    pub async fn log_in(
        &self,
        shard: &Rc<Shard>,
        user: &str,
        password: &str,
        peer: Option<IpAddr>,
    ) -> Result<Session, ()> {
        let message = format!("\0{user}\0{password}");
        let lookup = |user: &str, mechanism| crate::users::credential(shard, user, mechanism);
        let checked = match plain::parse(message.as_bytes(), lookup) {
            // Empty fields, a NUL in one: refused like a wrong password.
            Err(_) => false,
            Ok(login) => glommio::executor().spawn_blocking(move || login.verify()).await.is_ok(),
        };
        if checked {
            return Ok(self.issue(user, now_secs()));
        }
        let ip = peer.unwrap_or(IpAddr::from([0, 0, 0, 0]));
        glommio::timer::sleep(self.throttle.failure_delay(ip, Instant::now())).await;
        Err(())
    }
}

/// What a cookie's MAC covers.
fn signed_part(session: &Session) -> String {
    format!("{}.{}.{}", hex(session.user.as_bytes()), session.expiry_secs, session.nonce)
}

/// Seconds since the Unix epoch.
pub fn now_secs() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// The value of cookie `name` in a request head's `Cookie` header.
fn cookie<'a>(head: &'a [u8], name: &str) -> Option<&'a str> {
    let header = http::header(head, "Cookie")?;
    header.split(';').find_map(|pair| pair.trim().strip_prefix(name)?.strip_prefix('='))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_cookie_is_valid_until_its_expiry_and_its_logout_only() {
        let sessions = Sessions::new(false);
        let session = sessions.issue("alice", 1_000);
        let value = sessions.value(&session);
        assert_eq!(sessions.verify(&value, 1_000), Ok(session.clone()));
        let last = 1_000 + SESSION_LIFETIME.as_secs();
        assert_eq!(sessions.verify(&value, last - 1), Ok(session.clone()));
        assert_eq!(sessions.verify(&value, last), Err(Refusal::Expired));
        let other = sessions.issue("alice", 1_000);
        assert_ne!(other.nonce, session.nonce, "each login its own nonce");
        sessions.log_out(&session, 1_000);
        assert_eq!(sessions.verify(&value, 1_000), Err(Refusal::LoggedOut));
        assert!(sessions.verify(&sessions.value(&other), 1_000).is_ok(), "other sessions stay");
    }

    #[test]
    fn forged_or_altered_cookies_are_refused_without_panicking() {
        let sessions = Sessions::new(false);
        let session = sessions.issue("alice", 1_000);
        let value = sessions.value(&session);
        let (_, mac) = value.rsplit_once('.').unwrap();
        // Another user, a later expiry, under the same MAC.
        let bob = Session { user: "bob".into(), ..session.clone() };
        let forged = format!("{}.{mac}", signed_part(&bob));
        assert_eq!(sessions.verify(&forged, 1_000), Err(Refusal::BadSignature));
        let later = Session { expiry_secs: u64::MAX, ..session.clone() };
        let extended = format!("{}.{mac}", signed_part(&later));
        assert_eq!(sessions.verify(&extended, 1_000), Err(Refusal::BadSignature));
        assert_eq!(
            Sessions::new(false).verify(&value, 1_000),
            Err(Refusal::BadSignature),
            "another process's key"
        );
        for bad in ["", "a.b.c", "a.b.c.d.e", "é.1.2.zz", "61.x.00.00", &value[..value.len() - 1]]
        {
            assert!(sessions.verify(bad, 1_000).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_cookie_is_found_among_others_and_flagged_for_the_browser() {
        let sessions = Sessions::new(true);
        let session = sessions.issue("a b;c", 5);
        let value = sessions.value(&session);
        let head = format!("GET / HTTP/1.1\r\nCookie: x=1; {COOKIE}={value}; y=2\r\n\r\n");
        assert_eq!(sessions.of_request(head.as_bytes(), 5), Ok(session.clone()));
        let head = b"GET / HTTP/1.1\r\nCookie: x=1\r\n\r\n";
        assert_eq!(sessions.of_request(head, 5), Err(Refusal::Missing));
        let set = sessions.set_cookie(&session);
        for flag in ["HttpOnly", "SameSite=Strict", "Secure", "Path=/"] {
            assert!(set.contains(flag), "{set}");
        }
        assert!(!Sessions::new(false).set_cookie(&session).contains("Secure"));
        assert!(sessions.clear_cookie().contains("Max-Age=0"));
    }

    #[test]
    fn logouts_are_bounded() {
        let sessions = Sessions::new(false);
        for i in 0..MAX_LOGGED_OUT as u64 + 10 {
            let session = Session { user: "a".into(), expiry_secs: 100 + i, nonce: i.to_string() };
            sessions.log_out(&session, 0);
        }
        assert_eq!(sessions.logged_out.borrow().len(), MAX_LOGGED_OUT);
    }
}
