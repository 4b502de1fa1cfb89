//! The console's pages, each a function of the shards' snapshots (and the topic table).

use std::collections::HashMap;

use shardlog_shards::metadata::TopicMeta;
use shardlog_shards::metrics::ShardMetrics;
use shardlog_storage::Histogram;

use super::actions::{self, Action};
use super::csrf::Forms;
use super::html::{escape, page, page_of, pager, table};

/// Topics listed per page of `/topics`.
pub const TOPICS_PER_PAGE: usize = 100;
/// Kafka's API key of Produce, whose request durations are the produce→ack latency.
const PRODUCE_API_KEY: i16 = 0;

pub fn overview(snapshots: &[ShardMetrics]) -> String {
    let rows = snapshots.iter().map(|s| {
        let produce = produce_durations(std::slice::from_ref(s));
        let appends = &s.log.appends_per_fsync;
        vec![
            s.shard.to_string(),
            s.partitions.len().to_string(),
            s.connections.to_string(),
            s.log_segments.to_string(),
            s.log.flushes.to_string(),
            mean(appends.sum(), appends.count()),
            quantiles(&s.log.fsync_duration_us),
            produce.map_or_else(|| "-".to_string(), |h| quantiles(&h)),
            match &s.log_stopped {
                None => "ok".to_string(),
                Some(why) => format!("<b class=\"bad\">log stopped: {}</b>", escape(why)),
            },
        ]
    });
    let header = [
        "shard",
        "partitions",
        "connections",
        "segments",
        "flushes",
        "appends per fdatasync",
        "fdatasync p50 / p99 (µs, bucket bounds)",
        "produce→ack p50 / p99 (µs, bucket bounds)",
        "log",
    ];
    let body = format!(
        "<h2>Live</h2>\n<p>Polled every second from <a href=\"/api/overview\">/api/overview</a>; \
         latencies are per interval, from the histograms' bucket bounds (an upper bound of the \
         true figure).</p>\n\
         <div id=\"live\"><svg id=\"chart\" data-points=\"0\" viewBox=\"0 0 600 200\" \
         preserveAspectRatio=\"none\"></svg><p id=\"live-text\">waiting for data</p></div>\n\
         <h2>Shards</h2>\n<p>Since start-up.</p>\n{}\
         <h2>Latency budget of a durable produce</h2>\n<p>Each stage's histogram over every \
         shard since start-up (the <code>shardlog_request_stage_seconds</code>, \
         <code>shardlog_flush_stage_seconds</code> and <code>shardlog_fetch_wake_seconds</code> \
         of <a href=\"/metrics\">/metrics</a>), as bucket bounds in µs.</p>\n{}\
         <script src=\"/console.js\"></script>\n",
        table("shards", &header, rows),
        latency_budget(snapshots),
    );
    page("Overview", &body)
}

/// The cumulative figures the live chart differences: totals over every shard, and the
/// produce→ack and fdatasync histograms as `[bound, values at or below]` pairs.
pub fn overview_json(snapshots: &[ShardMetrics]) -> String {
    let topics = snapshots.iter().flat_map(|s| &s.topics);
    let (produce_bytes, fetch_bytes) = topics.fold((0u64, 0u64), |(produced, fetched), t| {
        (produced + t.counters.produce_bytes, fetched + t.counters.fetch_bytes)
    });
    let fsync = merged(snapshots.iter().map(|s| &s.log.fsync_duration_us));
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    format!(
        "{{\"time_ms\":{now_ms},\"produce_bytes\":{produce_bytes},\"fetch_bytes\":{fetch_bytes},\
         \"produce_us\":{},\"fsync_us\":{}}}",
        histogram_json(produce_durations(snapshots).as_ref()),
        histogram_json(fsync.as_ref()),
    )
}

/// `/topics`: the topics the viewer may see (`visible`, in name order), a page of them.
pub fn topics(
    visible: &[&TopicMeta],
    snapshots: &[ShardMetrics],
    page_number: usize,
    forms: Option<Forms>,
) -> String {
    let mut sizes: HashMap<&str, (u64, u64, u64)> = HashMap::new();
    for t in snapshots.iter().flat_map(|s| &s.topics) {
        let entry = sizes.entry(t.topic.as_str()).or_default();
        entry.0 += t.size_bytes;
        entry.1 += t.counters.produce_bytes;
        entry.2 += t.counters.fetch_bytes;
    }
    let total = visible.len();
    let (page_number, pages, before) = page_of(total, TOPICS_PER_PAGE, page_number);
    let shown = visible.iter().skip(before);
    let rows = shown.take(TOPICS_PER_PAGE).map(|topic| {
        let (size, produced, fetched) = sizes.get(topic.name.as_str()).copied().unwrap_or_default();
        vec![
            format!("<a href=\"/topics/{0}\">{0}</a>", escape(&topic.name)),
            topic.partition_shards.len().to_string(),
            size.to_string(),
            produced.to_string(),
            fetched.to_string(),
        ]
    });
    let header = ["topic", "partitions", "bytes on disk", "bytes produced", "bytes fetched"];
    let mut body = format!("<p>{total} topics; page {page_number} of {pages}.</p>\n");
    body.push_str(&table("topics", &header, rows));
    body.push_str(&pager("/topics", page_number, pages));
    if let Some(forms) = forms {
        let fields = "<label>name <input name=\"name\" required></label> \
                      <label>partitions <input name=\"partitions\" value=\"1\" size=\"5\"></label><br>\
                      <label>configs (key=value, one a line)<br>\
                      <textarea name=\"configs\" rows=\"3\" cols=\"50\"></textarea></label><br>";
        body.push_str("<h2>Create a topic</h2>\n");
        body.push_str(&actions::form(forms, Action::CreateTopic, fields, "Create…"));
    }
    page("Topics", &body)
}

/// `/topics/NAME`; its configs only when `configs` (the viewer may DESCRIBE_CONFIGS).
pub fn topic(
    topic: &TopicMeta,
    snapshots: &[ShardMetrics],
    configs: bool,
    forms: Option<Forms>,
) -> String {
    let watermarks: HashMap<i32, i64> = snapshots
        .iter()
        .flat_map(|s| &s.partitions)
        .filter(|p| p.topic == topic.name)
        .map(|p| (p.partition, p.high_watermark))
        .collect();
    let rows = topic.partition_shards.iter().enumerate().map(|(partition, shard)| {
        let hw = watermarks.get(&(partition as i32));
        vec![
            format!("<a href=\"/topics/{}/{partition}\">{partition}</a>", escape(&topic.name)),
            shard.to_string(),
            hw.map_or_else(|| "-".to_string(), |hw| hw.to_string()),
        ]
    });
    let mut body = table("partitions", &["partition", "owner shard", "high watermark"], rows);
    body.push_str("<h2>Configs set on the topic</h2>\n");
    if configs {
        let configs = topic.configs.iter().map(|(k, v)| vec![escape(k), escape(v)]);
        body.push_str(&table("configs", &["key", "value"], configs));
        body.push_str(
            "<p>Keys not listed take the broker's defaults (docs/topic-configs.md).</p>\n",
        );
    } else {
        body.push_str(
            "<p id=\"configs-denied\">Not shown: DESCRIBE_CONFIGS on the topic is needed.</p>\n",
        );
    }
    if let Some(forms) = forms {
        body.push_str(&topic_forms(forms, &topic.name));
    }
    page(&format!("Topic {}", topic.name), &body)
}

/// With `--console-write`: alter the topic's configs, delete it.
fn topic_forms(forms: Forms, name: &str) -> String {
    let target = actions::hidden("topic", name);
    let alter = format!(
        "{target}<label>set (key=value, one a line)<br>\
         <textarea name=\"set\" rows=\"3\" cols=\"50\"></textarea></label><br>\
         <label>back to the default (keys)<br><input name=\"delete\" size=\"50\"></label><br>"
    );
    format!(
        "<h2>Alter configs</h2>\n{}<h2>Delete the topic</h2>\n{}",
        actions::form(forms, Action::AlterConfigs, &alter, "Alter…"),
        actions::form(forms, Action::DeleteTopic, &target, "Delete…"),
    )
}

pub fn no_such_topic(name: &str) -> String {
    page("No such topic", &format!("<p>There is no topic <code>{}</code>.</p>", escape(name)))
}

/// The stages of a durable produce in the order a request meets them, then the wake-up of
/// a fetch parked on the flush: count, p50 and p99 bounds of each, over every shard.
fn latency_budget(snapshots: &[ShardMetrics]) -> String {
    let produce_stages = || {
        let all = snapshots.iter().flat_map(|s| &s.request_durations_us);
        all.filter(|(key, _, _)| *key == PRODUCE_API_KEY).map(|(_, _, stages)| stages)
    };
    let logs = || snapshots.iter().map(|s| &s.log);
    let stages = [
        (
            "produce: decoded → queued (validated, appended)",
            merged(produce_stages().map(|s| &s.decoded_to_queued_us)),
        ),
        (
            "flush: gather (first append → DMA write submitted)",
            merged(logs().map(|l| &l.flush_gather_us)),
        ),
        ("flush: DMA write", merged(logs().map(|l| &l.flush_write_duration_us))),
        ("flush: fdatasync", merged(logs().map(|l| &l.flush_fdatasync_us))),
        ("produce: queued → durable", merged(produce_stages().map(|s| &s.queued_to_ready_us))),
        (
            "produce: durable → response written",
            merged(produce_stages().map(|s| &s.ready_to_written_us)),
        ),
        (
            "fetch: flush done → parked fetch runs",
            merged(snapshots.iter().map(|s| &s.fetch_wake_us)),
        ),
    ];
    let dash = || "-".to_string();
    let rows = stages.iter().map(|(stage, histogram)| {
        let bound = |q| {
            let h = histogram.as_ref().filter(|h| h.count() > 0)?;
            h.quantile_bound(q).map(|b| format!("≤ {b}"))
        };
        vec![
            stage.to_string(),
            histogram.as_ref().map_or(0, |h| h.count()).to_string(),
            bound(0.5).unwrap_or_else(dash),
            bound(0.99).unwrap_or_else(dash),
        ]
    });
    table("budget", &["stage", "count", "p50 (µs)", "p99 (µs)"], rows)
}

/// Every shard's Produce request durations, merged.
fn produce_durations(snapshots: &[ShardMetrics]) -> Option<Histogram> {
    let all = snapshots.iter().flat_map(|s| &s.request_durations_us);
    merged(all.filter(|(key, _, _)| *key == PRODUCE_API_KEY).map(|(_, h, _)| h))
}

/// The sum of histograms over the same bounds, `None` if there are none.
fn merged<'a>(histograms: impl Iterator<Item = &'a Histogram>) -> Option<Histogram> {
    histograms.fold(None, |sum: Option<Histogram>, h| match sum {
        Some(mut sum) => {
            sum.merge(h);
            Some(sum)
        }
        None => Some(*h),
    })
}

fn histogram_json(h: Option<&Histogram>) -> String {
    let Some(h) = h else { return "null".to_string() };
    let pairs: Vec<String> = h.cumulative().map(|(b, n)| format!("[{b},{n}]")).collect();
    format!("{{\"count\":{},\"cumulative\":[{}]}}", h.count(), pairs.join(","))
}

fn quantiles(h: &Histogram) -> String {
    let q = |q| h.quantile_bound(q).map_or_else(|| "-".to_string(), |b| format!("≤ {b}"));
    if h.count() == 0 {
        return "-".to_string();
    }
    format!("{} / {}", q(0.5), q(0.99))
}

fn mean(sum: u64, count: u64) -> String {
    if count == 0 {
        return "-".to_string();
    }
    format!("{:.1}", sum as f64 / count as f64)
}
