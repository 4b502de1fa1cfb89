//! `shardlog user create|delete|list`: SASL users through AlterUserScramCredentials and
//! DescribeUserScramCredentials (KIP-554), as Kafka's `kafka-configs --alter
//! --add-config SCRAM-SHA-512=[password=...]` does: the salt is random, the salted
//! password is derived here, and the password itself never leaves this process.

use std::io::BufRead;

use clap::Subcommand;
use kafka_protocol::messages::alter_user_scram_credentials_request::{
    AlterUserScramCredentialsRequest, ScramCredentialDeletion, ScramCredentialUpsertion,
};
use kafka_protocol::messages::describe_user_scram_credentials_request::{
    DescribeUserScramCredentialsRequest, UserName,
};
use kafka_protocol::messages::describe_user_scram_credentials_response::DescribeUserScramCredentialsResult;
use serde::Serialize;
use shardlog_net::sasl::scram::{random_bytes, salted_password, MAX_ITERATIONS, MIN_ITERATIONS};
use shardlog_net::sasl::ScramMechanism;

use super::output::{print_json, Table};
use super::{check, emit, str_bytes, AdminArgs, Client, OutputFormat};

#[derive(Subcommand, Debug)]
pub enum UserCommand {
    /// Create a SASL user, or set its password for a mechanism (the first line of stdin).
    Create {
        name: String,
        /// SCRAM-SHA-256 or SCRAM-SHA-512 (PLAIN logins check either).
        #[arg(long, default_value = "SCRAM-SHA-512", value_parser = mechanism)]
        mechanism: ScramMechanism,
        /// Read the password from the first line of stdin (required: never a flag).
        #[arg(long, required = true)]
        password_stdin: bool,
        /// PBKDF2 iterations (4096 to 16384).
        #[arg(long, default_value_t = MIN_ITERATIONS)]
        iterations: u32,
    },
    /// Delete a user's credential for a mechanism, or all of them.
    Delete {
        name: String,
        /// Only this mechanism's credential (default: every one the user has).
        #[arg(long, value_parser = mechanism)]
        mechanism: Option<ScramMechanism>,
    },
    /// List users and their mechanisms.
    List,
}

fn mechanism(name: &str) -> Result<ScramMechanism, String> {
    ScramMechanism::from_name(name)
        .ok_or_else(|| format!("'{name}' is not SCRAM-SHA-256 or SCRAM-SHA-512"))
}

pub fn run(command: UserCommand, admin: &AdminArgs) -> Result<(), String> {
    match command {
        UserCommand::Create { name, mechanism, password_stdin: _, iterations } => {
            if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&iterations) {
                return Err(format!(
                    "--iterations {iterations}: from {MIN_ITERATIONS} to {MAX_ITERATIONS}"
                ));
            }
            let password = read_password()?;
            let mut client = admin.connect()?;
            create(&mut client, &name, mechanism, &password, iterations)?;
            emit(&format!("user '{name}' {}: set\n", mechanism.name()))
        }
        UserCommand::Delete { name, mechanism } => {
            let mut client = admin.connect()?;
            let mechanisms = match mechanism {
                Some(mechanism) => vec![mechanism.kafka_type()],
                None => describe(&mut client, Some(&name))?
                    .into_iter()
                    .flat_map(|r| r.credential_infos)
                    .map(|c| c.mechanism)
                    .collect(),
            };
            delete(&mut client, &name, &mechanisms)?;
            emit(&format!("user '{name}': deleted\n"))
        }
        UserCommand::List => {
            let mut client = admin.connect()?;
            list(&mut client, admin.format)
        }
    }
}

/// The first line of stdin, without its line ending.
fn read_password() -> Result<String, String> {
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line).map_err(|e| format!("reading stdin: {e}"))?;
    let password = line.trim_end_matches(['\n', '\r']).to_string();
    if password.is_empty() {
        return Err("--password-stdin: stdin's first line is empty".into());
    }
    Ok(password)
}

fn create(
    client: &mut Client,
    name: &str,
    mechanism: ScramMechanism,
    password: &str,
    iterations: u32,
) -> Result<(), String> {
    let salt = random_bytes(16);
    let salted = salted_password(mechanism, password.as_bytes(), &salt, iterations);
    let upsertion = ScramCredentialUpsertion::default()
        .with_name(str_bytes(name))
        .with_mechanism(mechanism.kafka_type())
        .with_iterations(iterations as i32)
        .with_salt(salt.into())
        .with_salted_password(salted.into());
    let request = AlterUserScramCredentialsRequest::default().with_upsertions(vec![upsertion]);
    alter(client, name, request)
}

fn delete(client: &mut Client, name: &str, mechanisms: &[i8]) -> Result<(), String> {
    let deletions = mechanisms
        .iter()
        .map(|m| ScramCredentialDeletion::default().with_name(str_bytes(name)).with_mechanism(*m))
        .collect();
    let request = AlterUserScramCredentialsRequest::default().with_deletions(deletions);
    alter(client, name, request)
}

fn alter(
    client: &mut Client,
    name: &str,
    request: AlterUserScramCredentialsRequest,
) -> Result<(), String> {
    let response = client.call(&request)?;
    for result in response.results {
        let subject = format!("user '{name}'");
        check(result.error_code, &subject, result.error_message.as_deref())?;
    }
    Ok(())
}

/// One user (`Some`) or every user; an unknown user is an error.
fn describe(
    client: &mut Client,
    name: Option<&str>,
) -> Result<Vec<DescribeUserScramCredentialsResult>, String> {
    let users = name.map(|n| vec![UserName::default().with_name(str_bytes(n))]);
    let response =
        client.call(&DescribeUserScramCredentialsRequest::default().with_users(users))?;
    check(response.error_code, "users", response.error_message.as_deref())?;
    for result in &response.results {
        let subject = format!("user '{}'", result.user);
        check(result.error_code, &subject, result.error_message.as_deref())?;
    }
    Ok(response.results)
}

#[derive(Serialize)]
struct UserSummary {
    user: String,
    mechanisms: Vec<(String, i32)>,
}

fn list(client: &mut Client, format: OutputFormat) -> Result<(), String> {
    let users: Vec<UserSummary> = describe(client, None)?
        .into_iter()
        .map(|r| UserSummary {
            user: r.user.to_string(),
            mechanisms: r
                .credential_infos
                .iter()
                .map(|c| {
                    let name = ScramMechanism::from_kafka_type(c.mechanism)
                        .map_or_else(|| format!("mechanism {}", c.mechanism), |m| m.name().into());
                    (name, c.iterations)
                })
                .collect(),
        })
        .collect();
    if format == OutputFormat::Json {
        return print_json(&users);
    }
    let mut table = Table::new(&["USER", "MECHANISMS"]);
    for user in users {
        let mechanisms: Vec<String> =
            user.mechanisms.iter().map(|(m, i)| format!("{m} ({i} iterations)")).collect();
        table.row(vec![user.user, mechanisms.join(", ")]);
    }
    emit(&table.render())
}
