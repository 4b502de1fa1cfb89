//! The admin endpoint's bearer token (`admin_token` or `admin_token_file`): read once at
//! start-up, before any shard runs; checked on shard 0 for every admin request.
//!
//! Invariants:
//! 1. The comparison takes time that depends only on the configured token's length, never
//!    on how much of a guess matches (a timing side channel would let a client find the
//!    token byte by byte).
//! 2. The token is never logged or printed (`Debug` hides it; `--print-config` too).

use subtle::ConstantTimeEq;

use crate::config::Config;

/// The token every admin request must carry as `Authorization: Bearer <token>`.
#[derive(Clone)]
pub struct AdminToken(Vec<u8>);

impl std::fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AdminToken(not printed)")
    }
}

/// What an `Authorization` header says, as RFC 6750 tells them apart.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    Admitted,
    /// No `Authorization: Bearer` header at all.
    Missing,
    /// A bearer token, not this one.
    Invalid,
}

impl AdminToken {
    /// The token the settings name, if any (invariant 2: messages never quote it).
    pub fn from_config(config: &Config) -> Result<Option<AdminToken>, String> {
        let token = match (&config.admin_token, &config.admin_token_file) {
            (None, None) => return Ok(None),
            (Some(_), Some(_)) => {
                return Err("admin_token and admin_token_file exclude each other: set one".into())
            }
            (Some(token), None) => token.clone(),
            (None, Some(path)) => std::fs::read_to_string(path)
                .map_err(|e| format!("admin_token_file {}: {e}", path.display()))?,
        };
        AdminToken::new(token.trim()).map(Some)
    }

    fn new(token: &str) -> Result<AdminToken, String> {
        if token.is_empty() {
            return Err("the admin token (admin_token or admin_token_file) is empty".into());
        }
        // RFC 6750's b64token is a subset of this; anything else cannot travel in a header.
        if !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err("the admin token must be printable ASCII without spaces".into());
        }
        Ok(AdminToken(token.as_bytes().to_vec()))
    }

    /// Checks an `Authorization` header value: scheme `Bearer` (any case, RFC 7235), then
    /// the token (invariant 1).
    pub fn check(&self, authorization: Option<&str>) -> Verdict {
        let Some((scheme, credentials)) = authorization.and_then(|v| v.split_once(' ')) else {
            return Verdict::Missing;
        };
        if !scheme.eq_ignore_ascii_case("Bearer") {
            return Verdict::Missing;
        }
        let given = credentials.trim().as_bytes();
        // Compared over the configured length whatever the guess's length (subtle's slice
        // comparison returns early on a length mismatch).
        let padded: Vec<u8> =
            (0..self.0.len()).map(|i| given.get(i).copied().unwrap_or(0)).collect();
        let same = padded.ct_eq(&self.0) & given.len().ct_eq(&self.0.len());
        match bool::from(same) {
            true => Verdict::Admitted,
            false => Verdict::Invalid,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_exact_bearer_token_is_admitted() {
        let token = AdminToken::new("s3cret-token").unwrap();
        let table = [
            (Some("Bearer s3cret-token"), Verdict::Admitted),
            (Some("bearer s3cret-token"), Verdict::Admitted),
            (Some("Bearer  s3cret-token "), Verdict::Admitted),
            (Some("Bearer s3cret-toke"), Verdict::Invalid),
            (Some("Bearer s3cret-token2"), Verdict::Invalid),
            (Some("Bearer s3cret-tokeN"), Verdict::Invalid),
            (Some("Bearer "), Verdict::Invalid),
            (Some("Basic czNjcmV0LXRva2Vu"), Verdict::Missing),
            (Some("s3cret-token"), Verdict::Missing),
            (None, Verdict::Missing),
        ];
        for (header, expected) in table {
            assert_eq!(token.check(header), expected, "{header:?}");
        }
    }

    #[test]
    fn empty_or_unprintable_tokens_are_refused_at_start_up() {
        assert!(AdminToken::new("").is_err());
        assert!(AdminToken::new("two words").is_err());
        assert!(AdminToken::new("tab\there").is_err());
        assert!(AdminToken::new("ok").is_ok());
    }

    #[test]
    fn the_token_is_not_printed() {
        let token = AdminToken::new("s3cret-token").unwrap();
        assert!(!format!("{token:?}").contains("s3cret"));
    }
}
