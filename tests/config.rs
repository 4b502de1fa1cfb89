//! Configuration layering (flag > environment > file > default), the file's errors,
//! `--print-config` round trips, the documentation of every setting, and JSON logs.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::Broker;

/// The shardlog binary with no SHARDLOG_* variable inherited from the test's environment.
fn shardlog() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_shardlog"));
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("SHARDLOG_") {
            command.env_remove(name);
        }
    }
    command
}

fn write_file(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// `shardlog <args> --print-config` parsed as TOML; panics if it fails.
fn effective(command: &mut Command) -> toml::Table {
    let output = command.arg("--print-config").output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).unwrap().parse().expect("print-config output is TOML")
}

/// A run expected to fail: its stderr.
fn failure(output: Output) -> String {
    assert!(!output.status.success(), "expected a failure");
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(!stderr.contains("panicked"), "{stderr}");
    stderr
}

#[test]
fn file_values_are_applied_where_nothing_else_sets_them() {
    let dir = tempfile::tempdir().unwrap();
    let file = write_file(
        dir.path(),
        "shardlog.toml",
        "data_dir = \"/srv/shardlog\"\ncores = 3\nauto_create_topics = false\nlog_format = \"json\"\n",
    );
    let config = effective(shardlog().arg("--config").arg(&file));
    assert_eq!(config["data_dir"].as_str(), Some("/srv/shardlog"));
    assert_eq!(config["cores"].as_integer(), Some(3));
    assert_eq!(config["auto_create_topics"].as_bool(), Some(false));
    assert_eq!(config["log_format"].as_str(), Some("json"));
    assert_eq!(config["kafka_addr"].as_str(), Some("127.0.0.1:9092"), "defaults stay");
}

#[test]
fn environment_overrides_the_file_and_names_the_file_too() {
    let dir = tempfile::tempdir().unwrap();
    let file = write_file(dir.path(), "shardlog.toml", "cores = 3\nsegment_bytes = 16777216\n");
    let config = effective(shardlog().env("SHARDLOG_CONFIG", &file).env("SHARDLOG_CORES", "5"));
    assert_eq!(config["cores"].as_integer(), Some(5));
    assert_eq!(
        config["segment_bytes"].as_integer(),
        Some(16 << 20),
        "the rest of the file applies"
    );
}

#[test]
fn a_flag_overrides_the_environment_and_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = write_file(dir.path(), "shardlog.toml", "cores = 3\nlog_level = \"debug\"\n");
    let config = effective(
        shardlog()
            .args(["--cores", "7", "--config"])
            .arg(&file)
            .env("SHARDLOG_CORES", "5")
            .env("SHARDLOG_LOG_LEVEL", "warn"),
    );
    assert_eq!(config["cores"].as_integer(), Some(7));
    assert_eq!(config["log_level"].as_str(), Some("warn"), "log_level has its variable now");
}

#[test]
fn an_unknown_key_is_an_error_naming_the_key_and_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = write_file(dir.path(), "shardlog.toml", "cores = 2\nretention_ms = 5\n");
    let stderr = failure(shardlog().arg("--config").arg(&file).output().unwrap());
    assert!(stderr.contains("unknown key 'retention_ms'"), "{stderr}");
    assert!(stderr.contains(&file.display().to_string()), "{stderr}");
}

#[test]
fn a_value_of_the_wrong_type_is_an_error_naming_the_key_and_the_expected_type() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("cores = \"four\"", "key 'cores'", "expected a non-negative integer"),
        ("auto_create_topics = \"yes\"", "key 'auto_create_topics'", "expected a boolean"),
        ("kafka_addr = 9092", "key 'kafka_addr'", "expected socket address"),
        ("log_format = \"xml\"", "key 'log_format'", "expected `human` or `json`"),
        ("segment_bytes = -1", "key 'segment_bytes'", "expected a non-negative integer"),
    ];
    for (line, key, expected) in cases {
        let file = write_file(dir.path(), "bad.toml", &format!("{line}\n"));
        let stderr = failure(shardlog().arg("--config").arg(&file).output().unwrap());
        assert!(stderr.contains(key) && stderr.contains(expected), "{line}: {stderr}");
        assert!(stderr.contains(&file.display().to_string()), "{stderr}");
    }
}

#[test]
fn print_config_output_is_accepted_back_by_config_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let output = shardlog()
        .args(["--cores", "2", "--advertised-host", "broker-1", "--max-message-bytes", "2000000"])
        .args(["--log-format", "json", "--auto-create-topics", "false", "--print-config"])
        .output()
        .unwrap();
    assert!(output.status.success());
    let printed = String::from_utf8(output.stdout).unwrap();
    let file = write_file(dir.path(), "printed.toml", &printed);
    let again = shardlog().arg("--config").arg(&file).arg("--print-config").output().unwrap();
    assert!(again.status.success(), "{}", String::from_utf8_lossy(&again.stderr));
    assert_eq!(String::from_utf8(again.stdout).unwrap(), printed);
    let table: toml::Table = printed.parse().unwrap();
    assert_eq!(table["advertised_host"].as_str(), Some("broker-1"));
    assert_eq!(table["max_message_bytes"].as_integer(), Some(2_000_000));
}

/// The keys `--print-config` prints, set or not (unset ones are commented out).
fn printed_keys() -> Vec<String> {
    let output = shardlog().arg("--print-config").output().unwrap();
    let printed = String::from_utf8(output.stdout).unwrap();
    printed
        .lines()
        .filter_map(|l| l.trim_start_matches("# ").split_once(" = "))
        .map(|(key, _)| key.to_string())
        .filter(|key| key.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
        .collect()
}

#[test]
fn every_setting_is_documented_with_its_key_flag_and_variable() {
    let doc_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/configuration.md");
    let doc = std::fs::read_to_string(&doc_path).expect("docs/configuration.md");
    let keys = printed_keys();
    assert!(keys.len() >= 17, "print-config lists every setting: {keys:?}");
    for key in keys {
        let flag = format!("`--{}`", key.replace('_', "-"));
        let variable = format!("`SHARDLOG_{}`", key.to_uppercase());
        for needle in [format!("`{key}`"), flag, variable] {
            assert!(doc.contains(&needle), "docs/configuration.md does not mention {needle}");
        }
    }
}

#[test]
fn json_logs_are_one_object_per_line_with_the_startup_summary() {
    // The format comes from a config file, so this also shows a file reaching the broker.
    let dir = tempfile::tempdir().unwrap();
    let file = write_file(dir.path(), "shardlog.toml", "log_format = \"json\"\n");
    let broker = Broker::start(2, &["--config", file.to_str().unwrap()]);
    let log = broker.log();
    // The shards may be writing a line as the log is read: only whole lines count.
    let lines: Vec<serde_json::Value> = log
        .split_inclusive('\n')
        .filter(|l| l.ends_with('\n'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let summary = lines
        .iter()
        .map(|l| &l["fields"])
        .find(|f| f["message"] == "starting shardlog")
        .expect("the start-up summary");
    assert_eq!(summary["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(summary["shards"], 2);
    assert_eq!(summary["bootstrap"], broker.bootstrap());
    let ports = format!("[{}, {}]", broker.port + 1, broker.port + 2);
    assert_eq!(summary["shard_ports"], ports);
    assert_eq!(summary["data_dir"], broker.data_dir().display().to_string());
    assert!(summary["durability"].as_str().unwrap().contains("fdatasync"));
}

#[test]
fn listeners_come_from_the_file_and_a_misconfigured_sasl_listener_is_refused_at_start_up() {
    let dir = tempfile::tempdir().unwrap();
    let text = "listeners = [\"PLAINTEXT://127.0.0.1:19092\", \"SSL://0.0.0.0:19192\"]\n\
                advertised_listeners = [\"SSL://broker-1.example.net:19192\"]\n";
    let file = write_file(dir.path(), "listeners.toml", text);
    let config = effective(shardlog().arg("--config").arg(&file));
    let listeners = config["listeners"].as_array().unwrap();
    assert_eq!(listeners.len(), 2);
    assert_eq!(listeners[1].as_str(), Some("SSL://0.0.0.0:19192"));

    // Not served as plaintext, not silently dropped: the broker does not start.
    let data_dir = dir.path().join("data");
    let stderr = failure(
        shardlog()
            .args(["--listener", "PLAINTEXT://127.0.0.1:19092", "--listener"])
            .arg("SASL_PLAINTEXT://127.0.0.1:19192")
            .args(["--sasl-mechanisms", "SCRAM-SHA-1"])
            .arg("--data-dir")
            .arg(&data_dir)
            .output()
            .unwrap(),
    );
    assert!(stderr.contains("unknown mechanism 'SCRAM-SHA-1'"), "{stderr}");
    assert!(!data_dir.exists(), "refused before anything was created");
}

/// Two brokers starting on one port at the same moment would both find it free and both
/// bind it (SO_REUSEPORT), sharing its connections. A broker claims its addresses first
/// (src/port_claims.rs): a claim held elsewhere refuses the start, even with nothing
/// listening on the port yet.
#[test]
fn a_broker_does_not_start_on_an_address_another_shardlog_claimed() {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixListener};

    let dir = tempfile::tempdir().unwrap();
    let port = common::free_port_range(3);
    let kafka = format!("127.0.0.1:{}", port + 1); // shard 0 listens on port + 2
    let shard_port = format!("127.0.0.1:{}", port + 2);
    let name = format!("shardlog/listen/{shard_port}");
    let claim = UnixListener::bind_addr(&SocketAddr::from_abstract_name(&name).unwrap());
    let _claim = claim.expect("the test claims the shard port");
    let data_dir = dir.path().join("data");
    let mut child = shardlog()
        .args(["--cores", "1", "--kafka-addr", &kafka, "--admin-addr"])
        .arg(format!("127.0.0.1:{port}"))
        .arg("--data-dir")
        .arg(&data_dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // A broker that (wrongly) starts runs until killed: give it a bound, not a hang.
    let started = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > std::time::Duration::from_secs(30) {
            child.kill().unwrap();
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let stderr = failure(child.wait_with_output().unwrap());
    let expected = format!("cannot listen on {shard_port}: another shardlog process");
    assert!(stderr.contains(&expected), "{stderr}");
    assert!(!data_dir.exists(), "refused before anything was created");
}

#[test]
fn a_default_replication_factor_the_nodes_cannot_hold_is_refused_at_start_up() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    for (value, expected) in [
        ("2", "replication factor 2 is larger than the number of nodes: a single node"),
        ("0", "the default replication factor must be at least 1, got 0"),
        ("-1", "the default replication factor must be at least 1, got -1"),
    ] {
        let output = shardlog()
            .arg("--data-dir")
            .arg(&data)
            .args(["--default-replication-factor", value])
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(1), "--default-replication-factor {value}");
        let stderr = failure(output);
        assert!(stderr.contains(&format!("--default-replication-factor {value}: ")), "{stderr}");
        assert!(stderr.contains(expected), "{stderr}");
    }
}
