//! SASL users in the cluster metadata: each user's SCRAM credentials, kept in the topic
//! table (`TopicTable::users`) and changed by change records of the metadata log
//! (`TopicChange::Credentials`), so they are durable through the controller, restored
//! with the table and pushed to every shard like topics.
//!
//! Only salted keys are stored (salt, iterations, StoredKey, ServerKey; RFC 5802): never a
//! password. PLAIN logins are checked against these too (`shardlog_net::sasl::plain`).
//! Each shard reads its own copy during a login (no lock, no hop).
//!
//! Invariants:
//! 1. A user has at most one credential per mechanism; an upsert replaces it.
//! 2. A delete names a credential that exists (the controller checks it; replay refuses a
//!    log where it does not, as for topics).

use std::collections::BTreeMap;

/// Kafka's numbers for the SCRAM mechanisms (KIP-554's `ScramMechanism`).
pub const SCRAM_SHA_256: u8 = 1;
pub const SCRAM_SHA_512: u8 = 2;

/// One user's credential for one mechanism.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct StoredScramCredential {
    /// `SCRAM_SHA_256` or `SCRAM_SHA_512`.
    pub mechanism: u8,
    pub iterations: u32,
    pub salt: Vec<u8>,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
}

/// Every user's credentials, by user name (invariant 1: one per mechanism).
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Debug, Default, PartialEq)]
pub struct UserCredentials {
    pub users: BTreeMap<String, Vec<StoredScramCredential>>,
}

/// One change of the users, inside a metadata log change record.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Debug, PartialEq)]
pub enum CredentialChange {
    /// Add or replace `user`'s credential for the credential's mechanism.
    Upsert { user: String, credential: StoredScramCredential },
    /// Remove `user`'s credential for `mechanism` (the user goes with its last one).
    Delete { user: String, mechanism: u8 },
}

impl UserCredentials {
    /// `user`'s credential for `mechanism`.
    pub fn scram(&self, user: &str, mechanism: u8) -> Option<&StoredScramCredential> {
        self.users.get(user)?.iter().find(|c| c.mechanism == mechanism)
    }

    /// Applies one change (the caller bumps the table version).
    pub fn apply(&mut self, change: &CredentialChange) -> Result<(), String> {
        match change {
            CredentialChange::Upsert { user, credential } => {
                let credentials = self.users.entry(user.clone()).or_default();
                credentials.retain(|c| c.mechanism != credential.mechanism);
                credentials.push(credential.clone());
                credentials.sort_by_key(|c| c.mechanism);
                Ok(())
            }
            CredentialChange::Delete { user, mechanism } => {
                let missing =
                    || format!("a change deletes {user:?}'s credential {mechanism}, absent");
                let credentials = self.users.get_mut(user).ok_or_else(missing)?;
                let before = credentials.len();
                credentials.retain(|c| c.mechanism != *mechanism);
                if credentials.len() == before {
                    return Err(missing());
                }
                if credentials.is_empty() {
                    self.users.remove(user);
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::TopicTable;
    use crate::metadata_log::{restore, ChangeRecord, TopicChange};
    use bytes::Bytes;
    use shardlog_storage::{InternalEntry, InternalStream};

    fn credential(mechanism: u8, fill: u8) -> StoredScramCredential {
        StoredScramCredential {
            mechanism,
            iterations: 4096,
            salt: vec![fill; 16],
            stored_key: vec![fill; 32],
            server_key: vec![fill + 1; 32],
        }
    }

    fn entry(snapshot: bool, payload: Vec<u8>) -> InternalEntry {
        InternalEntry { stream: InternalStream::Metadata, snapshot, payload: Bytes::from(payload) }
    }

    fn record(table: &mut TopicTable, changes: Vec<CredentialChange>) -> InternalEntry {
        let changes = changes.into_iter().map(|c| TopicChange::Credentials(Box::new(c))).collect();
        let record = ChangeRecord { base_version: table.version, changes };
        record.apply(table).unwrap();
        entry(false, record.encode())
    }

    #[test]
    fn credential_changes_replay_after_snapshots_and_upserts_replace() {
        let mut table = TopicTable::new(2);
        let alice =
            |m, f| CredentialChange::Upsert { user: "alice".into(), credential: credential(m, f) };
        let mut log = vec![entry(true, table.encode())];
        log.push(record(&mut table, vec![alice(SCRAM_SHA_256, 1), alice(SCRAM_SHA_512, 2)]));
        log.push(entry(true, table.encode()));
        log.push(record(&mut table, vec![alice(SCRAM_SHA_256, 3)]));
        let bob = CredentialChange::Upsert { user: "bob".into(), credential: credential(1, 4) };
        log.push(record(&mut table, vec![bob]));
        let delete = CredentialChange::Delete { user: "bob".into(), mechanism: SCRAM_SHA_256 };
        log.push(record(&mut table, vec![delete]));
        let (restored, _) = restore(&log).unwrap().unwrap();
        assert_eq!(restored, table);
        assert_eq!(restored.users.scram("alice", SCRAM_SHA_256), Some(&credential(1, 3)));
        assert_eq!(restored.users.scram("alice", SCRAM_SHA_512), Some(&credential(2, 2)));
        assert!(!restored.users.users.contains_key("bob"), "gone with its last credential");
        assert_eq!(restored.version, 5);
    }

    #[test]
    fn deleting_an_absent_credential_does_not_follow_the_table() {
        let mut users = UserCredentials::default();
        let delete = CredentialChange::Delete { user: "x".into(), mechanism: SCRAM_SHA_512 };
        assert!(users.apply(&delete).is_err());
    }

    /// Adding the credentials variant must not change how the older variants are laid out
    /// (their records are on disk): the archived enum is as large as its largest variant,
    /// `Create`, and the new variant (a relative pointer to the change) is smaller.
    #[test]
    fn the_credentials_variant_does_not_change_the_change_record_layout() {
        use crate::metadata::TopicMeta;
        type Archived<T> = <T as rkyv::Archive>::Archived;
        let credentials = std::mem::size_of::<Archived<Box<CredentialChange>>>();
        let create = std::mem::size_of::<Archived<TopicMeta>>();
        assert!(credentials < create, "{credentials} bytes, Create's {create}");
    }
}
