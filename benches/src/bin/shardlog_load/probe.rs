//! What the load generator reads from the broker besides Kafka answers: its resident
//! memory (`VmRSS` in /proc/PID/status, same machine only) and counters on its admin
//! endpoint's `GET /metrics` (Prometheus text).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// The process's resident set in KiB (`VmRSS`), or an error naming what failed.
pub fn rss_kib(pid: u32) -> Result<u64, String> {
    let path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| format!("{path}: no VmRSS line"))
}

/// `GET /metrics` from `admin_addr` (host:port): the body.
pub fn scrape(admin_addr: &str) -> Result<String, String> {
    let fail = |e: std::io::Error| format!("GET http://{admin_addr}/metrics: {e}");
    let mut stream = TcpStream::connect(admin_addr).map_err(fail)?;
    stream.set_read_timeout(Some(Duration::from_secs(30))).map_err(fail)?;
    stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: shardlog\r\n\r\n").map_err(fail)?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).map_err(fail)?;
    let response = String::from_utf8_lossy(&response);
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("GET http://{admin_addr}/metrics: no response head"))?;
    if !head.starts_with("HTTP/1.1 200") {
        let status = head.lines().next().unwrap_or_default();
        return Err(format!("GET http://{admin_addr}/metrics: {status}"));
    }
    Ok(body.to_string())
}

/// The sum over all label sets of the samples named exactly `name` (e.g.
/// `shardlog_fsync_bytes_sum` across shards).
pub fn sum_samples(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let rest = line.strip_prefix(name)?;
            let value = match rest.as_bytes().first()? {
                b'{' => rest.split_once("} ")?.1,
                b' ' => &rest[1..],
                _ => return None,
            };
            value.trim().parse::<f64>().ok()
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::sum_samples;

    #[test]
    fn sums_one_metric_over_its_labels_only() {
        let text = "# HELP shardlog_fsync_bytes x\n\
                    shardlog_fsync_bytes_sum{shard=\"0\"} 4096\n\
                    shardlog_fsync_bytes_sum{shard=\"1\"} 8192\n\
                    shardlog_fsync_bytes_sum_other 7\n\
                    shardlog_fsync_bytes_count{shard=\"0\"} 1\n\
                    plain 2.5\n";
        assert_eq!(sum_samples(text, "shardlog_fsync_bytes_sum"), 12288.0);
        assert_eq!(sum_samples(text, "shardlog_fsync_bytes_count"), 1.0);
        assert_eq!(sum_samples(text, "plain"), 2.5);
        assert_eq!(sum_samples(text, "missing"), 0.0);
    }
}
