//! SASL PLAIN (RFC 4616): `[authzid] NUL authcid NUL passwd`, checked against the
//! user's stored SCRAM credential (there is no other copy of a password to check).
//!
//! Parsing is cheap and runs on the connection's shard; the check derives the SCRAM key
//! from the password (PBKDF2, milliseconds), so the connection runs it on a blocking
//! thread ([`PlainLogin::verify`] is `Send` and pure).

use super::scram::{ScramCredential, ScramMechanism};
use super::AuthFailure;

/// A parsed PLAIN message, with the credential to check it against.
pub struct PlainLogin {
    pub user: String,
    password: String,
    /// The user's strongest stored credential; `None` for an unknown user.
    credential: Option<(ScramMechanism, ScramCredential)>,
}

impl std::fmt::Debug for PlainLogin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the password.
        f.debug_struct("PlainLogin").field("user", &self.user).finish_non_exhaustive()
    }
}

/// Reads a PLAIN message; `lookup` finds the user's credential for a mechanism.
pub fn parse(
    message: &[u8],
    lookup: impl Fn(&str, ScramMechanism) -> Option<ScramCredential>,
) -> Result<PlainLogin, AuthFailure> {
    let bad = AuthFailure::protocol;
    let text = std::str::from_utf8(message).map_err(|_| bad("PLAIN message is not UTF-8"))?;
    let mut parts = text.split('\0');
    let (Some(authzid), Some(user), Some(password), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(bad("a PLAIN message is authzid NUL user NUL password"));
    };
    if user.is_empty() || password.is_empty() {
        return Err(bad("empty user name or password"));
    }
    if !authzid.is_empty() && authzid != user {
        return Err(bad("an authorization id other than the user name"));
    }
    // The strongest hash first; either is the same password.
    let credential = [ScramMechanism::Sha512, ScramMechanism::Sha256]
        .into_iter()
        .find_map(|m| lookup(user, m).map(|c| (m, c)));
    Ok(PlainLogin { user: user.to_string(), password: password.to_string(), credential })
}

impl PlainLogin {
    /// Checks the password (PBKDF2: run it off the shard's thread). An unknown user costs
    /// the same derivation, so timing does not tell who exists.
    pub fn verify(self) -> Result<String, AuthFailure> {
        let failed = || AuthFailure::credentials(&self.user, "PLAIN");
        let (mechanism, credential) = match &self.credential {
            Some((mechanism, credential)) => (*mechanism, credential.clone()),
            None => {
                let decoy = ScramCredential {
                    salt: vec![0; 16],
                    iterations: super::scram::MIN_ITERATIONS,
                    stored_key: vec![0; 64],
                    server_key: Vec::new(),
                };
                let _ = decoy.matches_password(ScramMechanism::Sha512, self.password.as_bytes());
                return Err(failed());
            }
        };
        match credential.matches_password(mechanism, self.password.as_bytes()) {
            true => Ok(self.user),
            false => Err(failed()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(user: &str, mechanism: ScramMechanism) -> Option<ScramCredential> {
        (user == "alice" && mechanism == ScramMechanism::Sha256)
            .then(|| ScramCredential::new(mechanism, b"pw", b"salt", 4096))
    }

    #[test]
    fn the_right_password_logs_in_against_the_stored_scram_key() {
        assert_eq!(parse(b"\0alice\0pw", store).unwrap().verify().unwrap(), "alice");
        assert_eq!(parse(b"alice\0alice\0pw", store).unwrap().verify().unwrap(), "alice");
        let wrong = parse(b"\0alice\0pw2", store).unwrap().verify().unwrap_err();
        assert!(wrong.invalid_credentials);
        let unknown = parse(b"\0bob\0pw", store).unwrap().verify().unwrap_err();
        assert!(unknown.invalid_credentials);
    }

    #[test]
    fn malformed_messages_are_failures() {
        for case in [&b""[..], b"alice", b"\0alice", b"\0\0pw", b"\0alice\0", b"x\0alice\0pw"] {
            let error = parse(case, store).unwrap_err();
            assert!(!error.invalid_credentials, "{case:?}");
        }
        assert!(parse(b"\0a\0b\0c", store).is_err());
        assert!(parse(b"\0\xff\0pw", store).is_err());
    }
}
