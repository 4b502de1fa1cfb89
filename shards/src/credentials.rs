//! SASL users through the controller (AlterUserScramCredentials, the bootstrap user):
//! validated on shard 0 against its table, written as one change record of the metadata
//! log (fdatasync'd), applied by every shard to its copy, and only then answered, exactly
//! as topic changes are (`controller.rs`). Lookups during a login read the shard's own
//! copy (`Shard::table().users`), never this path.
//!
//! Runs on shard 0 for writing (asserted); other shards reach it through the mesh.

use std::rc::Rc;

use tracing::info;

use crate::controller::CONTROLLER_SHARD;
use crate::message::{ShardReply, ShardRequest};
use crate::metadata_log::users::{CredentialChange, StoredScramCredential, UserCredentials};
use crate::metadata_log::{ChangeRecord, TopicChange};
use crate::shard::Shard;

/// The iterations accepted in a stored credential (Kafka's bounds).
pub const MIN_ITERATIONS: u32 = 4096;
pub const MAX_ITERATIONS: u32 = 16384;

/// Why a user's alterations were refused (all of that user's, as in Kafka).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CredentialError {
    /// A delete of a credential that does not exist.
    NotFound(String),
    /// The same user and mechanism twice in one request.
    Duplicate(String),
    /// An empty name, iterations out of bounds, an empty salt, keys of the wrong length.
    Unacceptable(String),
    /// A mechanism other than SCRAM-SHA-256 (1) or SCRAM-SHA-512 (2).
    UnsupportedMechanism(String),
    /// The change could not be written.
    Storage(String),
}

impl std::fmt::Display for CredentialError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CredentialError::NotFound(m)
            | CredentialError::Duplicate(m)
            | CredentialError::Unacceptable(m)
            | CredentialError::UnsupportedMechanism(m)
            | CredentialError::Storage(m) => f.write_str(m),
        }
    }
}

/// One alteration, as AlterUserScramCredentials carries it (keys already derived).
#[derive(Clone, Debug)]
pub enum CredentialAlteration {
    Upsert { user: String, credential: StoredScramCredential },
    Delete { user: String, mechanism: u8 },
}

impl CredentialAlteration {
    pub fn user(&self) -> &str {
        match self {
            CredentialAlteration::Upsert { user, .. }
            | CredentialAlteration::Delete { user, .. } => user,
        }
    }

    fn mechanism(&self) -> u8 {
        match self {
            CredentialAlteration::Upsert { credential, .. } => credential.mechanism,
            CredentialAlteration::Delete { mechanism, .. } => *mechanism,
        }
    }

    fn into_change(self) -> CredentialChange {
        match self {
            CredentialAlteration::Upsert { user, credential } => {
                CredentialChange::Upsert { user, credential }
            }
            CredentialAlteration::Delete { user, mechanism } => {
                CredentialChange::Delete { user, mechanism }
            }
        }
    }
}

/// Per user (in the order first named), the result of all of that user's alterations.
pub type CredentialResults = Vec<(String, Result<(), CredentialError>)>;

impl Shard {
    /// Alter SASL users' credentials through the controller, from any shard.
    pub async fn alter_scram_credentials(
        self: &Rc<Self>,
        alterations: Vec<CredentialAlteration>,
    ) -> CredentialResults {
        if self.id == CONTROLLER_SHARD {
            return self.controller_alter_scram_credentials(alterations).await;
        }
        let request = ShardRequest::AlterScramCredentials { alterations };
        match self.mesh.call(CONTROLLER_SHARD, request).await {
            ShardReply::AlterScramCredentials(results) => results,
            other => panic!("alter credentials answered with {other:?}"),
        }
    }

    pub(crate) async fn controller_alter_scram_credentials(
        self: &Rc<Self>,
        alterations: Vec<CredentialAlteration>,
    ) -> CredentialResults {
        assert_eq!(self.id, CONTROLLER_SHARD);
        let permit = self.controller_permit().await;
        let table = self.table();
        let (mut results, changes) = validate(&table.users, alterations);
        let base_version = table.version;
        drop(table);
        if changes.is_empty() {
            return results;
        }
        for change in &changes {
            match change {
                CredentialChange::Upsert { user, credential } => {
                    info!(user, mechanism = credential.mechanism, "SASL credential set")
                }
                CredentialChange::Delete { user, mechanism } => {
                    info!(user, mechanism, "SASL credential deleted")
                }
            }
        }
        let changes = changes.into_iter().map(|c| TopicChange::Credentials(Box::new(c))).collect();
        let record = ChangeRecord { base_version, changes };
        let committed = self.commit_changes(permit, Some(record), vec![Ok(())]).await;
        if let Some(Err(e)) = committed.into_iter().next() {
            let e = CredentialError::Storage(e.to_string());
            for (_, result) in &mut results {
                *result = result.clone().and(Err(e.clone()));
            }
        }
        results
    }

    /// Start-up on shard 0: creates `user` with `credentials` unless it already has one
    /// (the bootstrap user; a password changed since is kept).
    pub async fn ensure_user(
        self: &Rc<Self>,
        user: &str,
        credentials: Vec<StoredScramCredential>,
    ) -> Result<bool, String> {
        if self.table().users.users.contains_key(user) {
            return Ok(false);
        }
        let alterations = credentials
            .into_iter()
            .map(|credential| CredentialAlteration::Upsert { user: user.to_string(), credential })
            .collect();
        for (_, result) in self.controller_alter_scram_credentials(alterations).await {
            result.map_err(|e| format!("creating the bootstrap user {user:?}: {e:?}"))?;
        }
        Ok(true)
    }
}

/// Checks a request's alterations against `users`: each user's result, and the changes of
/// the users whose alterations are all valid.
fn validate(
    users: &UserCredentials,
    alterations: Vec<CredentialAlteration>,
) -> (CredentialResults, Vec<CredentialChange>) {
    let mut results: CredentialResults = Vec::new();
    for alteration in &alterations {
        let user = alteration.user();
        if !results.iter().any(|(u, _)| u == user) {
            results.push((user.to_string(), Ok(())));
        }
    }
    for (i, alteration) in alterations.iter().enumerate() {
        let checked = check(users, alteration).and_then(|()| {
            let twice = alterations[..i]
                .iter()
                .any(|a| a.user() == alteration.user() && a.mechanism() == alteration.mechanism());
            match twice {
                true => Err(CredentialError::Duplicate(format!(
                    "user {:?} is altered twice for one mechanism in one request",
                    alteration.user()
                ))),
                false => Ok(()),
            }
        });
        let result = &mut results.iter_mut().find(|(u, _)| u == alteration.user()).unwrap().1;
        if result.is_ok() {
            *result = checked;
        }
    }
    let changes = alterations
        .into_iter()
        .filter(|a| results.iter().any(|(u, r)| u == a.user() && r.is_ok()))
        .map(CredentialAlteration::into_change)
        .collect();
    (results, changes)
}

fn check(
    users: &UserCredentials,
    alteration: &CredentialAlteration,
) -> Result<(), CredentialError> {
    if alteration.user().is_empty() {
        return Err(CredentialError::Unacceptable("the user name is empty".into()));
    }
    let key_bytes = match alteration.mechanism() {
        1 => 32,
        2 => 64,
        other => {
            return Err(CredentialError::UnsupportedMechanism(format!(
                "SCRAM mechanism {other} is not supported (1: SCRAM-SHA-256, 2: SCRAM-SHA-512)"
            )))
        }
    };
    match alteration {
        CredentialAlteration::Upsert { credential, .. } => {
            let iterations = credential.iterations;
            if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&iterations) {
                return Err(CredentialError::Unacceptable(format!(
                    "{iterations} iterations: from {MIN_ITERATIONS} to {MAX_ITERATIONS} are accepted"
                )));
            }
            let keys_ok = credential.stored_key.len() == key_bytes
                && credential.server_key.len() == key_bytes;
            if credential.salt.is_empty() || !keys_ok {
                return Err(CredentialError::Unacceptable("an empty salt or password".into()));
            }
            Ok(())
        }
        CredentialAlteration::Delete { user, mechanism } => match users.scram(user, *mechanism) {
            Some(_) => Ok(()),
            None => Err(CredentialError::NotFound(format!(
                "user {user:?} has no credential for mechanism {mechanism}"
            ))),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn upsert(user: &str, mechanism: u8, iterations: u32) -> CredentialAlteration {
        let key_bytes = if mechanism == 2 { 64 } else { 32 };
        let credential = StoredScramCredential {
            mechanism,
            iterations,
            salt: vec![1; 16],
            stored_key: vec![2; key_bytes],
            server_key: vec![3; key_bytes],
        };
        CredentialAlteration::Upsert { user: user.into(), credential }
    }

    fn delete(user: &str, mechanism: u8) -> CredentialAlteration {
        CredentialAlteration::Delete { user: user.into(), mechanism }
    }

    #[test]
    fn each_user_gets_kafkas_error_and_only_valid_users_change() {
        let mut users = UserCredentials::default();
        let CredentialAlteration::Upsert { credential, .. } = upsert("carol", 1, 4096) else {
            unreachable!()
        };
        users.apply(&CredentialChange::Upsert { user: "carol".into(), credential }).unwrap();
        let (results, changes) = validate(
            &users,
            vec![
                upsert("alice", 2, 8192),
                upsert("bob", 1, 100),
                upsert("dave", 1, 4096),
                upsert("dave", 1, 4096),
                delete("carol", 1),
                delete("erin", 2),
                upsert("", 1, 4096),
                upsert("frank", 7, 4096),
            ],
        );
        let kinds: Vec<(&str, &str)> = results
            .iter()
            .map(|(u, r)| {
                let kind = match r {
                    Ok(()) => "ok",
                    Err(CredentialError::NotFound(_)) => "not found",
                    Err(CredentialError::Duplicate(_)) => "duplicate",
                    Err(CredentialError::Unacceptable(_)) => "unacceptable",
                    Err(CredentialError::UnsupportedMechanism(_)) => "mechanism",
                    Err(CredentialError::Storage(_)) => "storage",
                };
                (u.as_str(), kind)
            })
            .collect();
        assert_eq!(
            kinds,
            [
                ("alice", "ok"),
                ("bob", "unacceptable"),
                ("dave", "duplicate"),
                ("carol", "ok"),
                ("erin", "not found"),
                ("", "unacceptable"),
                ("frank", "mechanism"),
            ]
        );
        assert_eq!(changes.len(), 2, "alice's upsert and carol's delete: {changes:?}");
    }
}
