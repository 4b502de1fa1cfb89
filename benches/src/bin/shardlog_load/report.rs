//! Results: `RESULT mode=... key=value` lines for scripts and a human table, plus the
//! latency histogram helpers (microseconds, 3 significant digits).

use std::time::Duration;

use hdrhistogram::Histogram;

/// A latency histogram in microseconds, 1 µs .. 60 s.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid histogram bounds")
}

/// Records a duration, clamped into the histogram's range.
pub fn record(histogram: &mut Histogram<u64>, elapsed: Duration) {
    let us = (elapsed.as_micros() as u64).clamp(1, 60_000_000);
    histogram.record(us).expect("clamped into range");
}

/// One result: ordered key/value pairs.
pub struct Report {
    mode: &'static str,
    label: String,
    fields: Vec<(String, String)>,
}

impl Report {
    pub fn new(mode: &'static str, label: &str) -> Report {
        Report { mode, label: label.to_string(), fields: Vec::new() }
    }

    pub fn add(&mut self, key: &str, value: impl std::fmt::Display) -> &mut Self {
        self.fields.push((key.to_string(), value.to_string()));
        self
    }

    pub fn add_f(&mut self, key: &str, value: f64) -> &mut Self {
        self.add(key, format!("{value:.1}"))
    }

    /// Adds `<prefix>_p50_us` ... `<prefix>_max_us` and the sample count.
    pub fn add_latency(&mut self, prefix: &str, h: &Histogram<u64>) -> &mut Self {
        self.add(&format!("{prefix}_count"), h.len());
        for (name, q) in [("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p999", 0.999)] {
            self.add(&format!("{prefix}_{name}_us"), h.value_at_quantile(q));
        }
        self.add(&format!("{prefix}_max_us"), h.max())
    }

    /// Prints the table, then the RESULT line.
    pub fn print(&self) {
        let title = if self.label.is_empty() {
            self.mode.to_string()
        } else {
            format!("{} ({})", self.mode, self.label)
        };
        println!("== {title}");
        let width = self.fields.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
        for (k, v) in &self.fields {
            println!("  {k:<width$}  {v}");
        }
        let mut line = format!("RESULT mode={}", self.mode);
        if !self.label.is_empty() {
            line.push_str(&format!(" label={}", self.label));
        }
        for (k, v) in &self.fields {
            line.push_str(&format!(" {k}={v}"));
        }
        println!("{line}");
    }
}

/// Megabytes (10^6) per second.
pub fn mb_per_s(bytes: u64, elapsed: Duration) -> f64 {
    bytes as f64 / 1e6 / elapsed.as_secs_f64()
}

/// A fresh topic name for `mode`.
pub fn fresh_topic(mode: &str) -> String {
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    format!("load-{mode}-{millis}")
}
