//! SASL users on the binary's side: the credentials the store keeps, derived from a
//! password (the bootstrap user) or from a salted password (AlterUserScramCredentials),
//! and read back for a login (`credential`: SASL on the Kafka listeners, the console's
//! login page).

use shardlog_net::sasl::scram::{random_bytes, MIN_ITERATIONS};
use shardlog_net::sasl::{ScramCredential, ScramMechanism};
use shardlog_shards::metadata_log::users::StoredScramCredential;
use shardlog_shards::Shard;

/// The store's form of a credential.
pub fn stored(mechanism: ScramMechanism, credential: ScramCredential) -> StoredScramCredential {
    StoredScramCredential {
        mechanism: mechanism.kafka_type() as u8,
        iterations: credential.iterations,
        salt: credential.salt,
        stored_key: credential.stored_key,
        server_key: credential.server_key,
    }
}

/// A login's form of a stored credential.
pub fn scram(stored: &StoredScramCredential) -> ScramCredential {
    ScramCredential {
        salt: stored.salt.clone(),
        iterations: stored.iterations,
        stored_key: stored.stored_key.clone(),
        server_key: stored.server_key.clone(),
    }
}

/// `user`'s credential for `mechanism` in this shard's copy of the user store.
pub fn credential(shard: &Shard, user: &str, mechanism: ScramMechanism) -> Option<ScramCredential> {
    let table = shard.table();
    let stored = table.users.scram(user, mechanism.kafka_type() as u8)?;
    Some(scram(stored))
}

/// SCRAM-SHA-256 and SCRAM-SHA-512 credentials of `password`, each with its own random
/// salt and Kafka's default iterations.
pub fn credentials_for(password: &str) -> Vec<StoredScramCredential> {
    ScramMechanism::ALL
        .into_iter()
        .map(|m| {
            let salt = random_bytes(16);
            stored(m, ScramCredential::new(m, password.as_bytes(), &salt, MIN_ITERATIONS))
        })
        .collect()
}
