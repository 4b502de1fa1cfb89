//! The console's pages, each a function of the shards' snapshots (and the topic table).

use std::collections::HashMap;

use shardlog_shards::metadata::TopicMeta;
use shardlog_shards::metrics::{PartitionMetrics, ShardMetrics};
use shardlog_storage::Histogram;

use super::actions::{self, Action};
use super::csrf::Forms;
use super::html::{escape, page, page_of, pager, table};

/// Topics listed per page of `/topics`.
pub const TOPICS_PER_PAGE: usize = 100;
/// Partitions listed per page of `/topics/NAME`.
pub const PARTITIONS_PER_PAGE: usize = 100;
/// Kafka's API key of Produce, whose request durations are the produce→ack latency.
const PRODUCE_API_KEY: i16 = 0;

pub fn overview(snapshots: &[ShardMetrics]) -> String {
    let rows = snapshots.iter().map(|s| {
        let produce = produce_durations(std::slice::from_ref(s));
        let appends = &s.log.appends_per_fsync;
        vec![
            s.shard.to_string(),
            s.partition_count.to_string(),
            s.connections.to_string(),
            format!(
                "{} ({} × {})",
                mib(s.log_segments * s.log_segment_size_bytes),
                s.log_segments,
                mib(s.log_segment_size_bytes)
            ),
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
        "disk (segment files)",
        "flushes",
        "appends per fdatasync",
        "fdatasync p50 / p99 (µs, bucket bounds)",
        "produce→ack p50 / p99 (µs, bucket bounds)",
        "log",
    ];
    let chart = |id: &str, title: &str| {
        format!(
            "<figure><figcaption>{title}</figcaption><svg id=\"{id}\" class=\"chart\" \
             data-points=\"0\" viewBox=\"0 0 600 200\" preserveAspectRatio=\"none\"></svg>\
             </figure>\n"
        )
    };
    let body = format!(
        "<h2>Live</h2>\n<p>Polled every second from <a href=\"/api/overview\">/api/overview</a>; \
         latencies are per interval, from the histograms' bucket bounds (an upper bound of the \
         true figure); p50 blue, p99 red; the last two minutes.</p>\n\
         <div id=\"live\">{}{}<p id=\"live-text\">waiting for data</p></div>\n\
         <h2>Shards</h2>\n<p>Since start-up. Segment files are allocated whole, so the disk \
         they take is their count times their size.</p>\n{}\
         <h2>Latency budget of a durable produce</h2>\n<p>Each stage's histogram over every \
         shard since start-up (the <code>shardlog_request_stage_seconds</code>, \
         <code>shardlog_flush_stage_seconds</code> and <code>shardlog_fetch_wake_seconds</code> \
         of <a href=\"/metrics\">/metrics</a>), as bucket bounds in µs.</p>\n{}\
         <script src=\"/console.js\"></script>\n",
        chart("chart", "produce→ack (µs)"),
        chart("fsync-chart", "fdatasync (µs)"),
        table("shards", &header, rows),
        latency_budget(snapshots),
    );
    page("Overview", &body)
}

/// The cumulative figures the live chart differences: totals over every shard, and the
/// produce→ack and fdatasync histograms as `[bound, values at or below]` pairs.
pub fn overview_json(snapshots: &[ShardMetrics]) -> String {
    let produce_bytes: u64 = snapshots.iter().map(|s| s.produce_bytes).sum();
    let fetch_bytes: u64 = snapshots.iter().map(|s| s.fetch_bytes).sum();
    let fsync = merged(snapshots.iter().map(|s| &s.log.fsync_duration_us));
    format!(
        "{{\"time_ms\":{},\"produce_bytes\":{produce_bytes},\"fetch_bytes\":{fetch_bytes},\
         \"produce_us\":{},\"fsync_us\":{}}}",
        now_ms(),
        histogram_json(produce_durations(snapshots).as_ref()),
        histogram_json(fsync.as_ref()),
    )
}

/// A topic's figures over every shard, since start-up.
#[derive(Clone, Copy, Default)]
struct TopicTotals {
    size_bytes: u64,
    produce_bytes: u64,
    fetch_bytes: u64,
}

/// Page `page_number` (clamped) of `visible`: the page shown, how many pages there are,
/// and the topics on it.
fn on_page<'v, 'a>(
    visible: &'v [&'a TopicMeta],
    page_number: usize,
) -> (usize, usize, &'v [&'a TopicMeta]) {
    let (page_number, pages, before) = page_of(visible.len(), TOPICS_PER_PAGE, page_number);
    (page_number, pages, &visible[before..visible.len().min(before + TOPICS_PER_PAGE)])
}

/// The names of the topics on page `page_number` (clamped) of `visible`: the topics whose
/// figures that page needs from the shards.
pub fn topic_names_on_page(visible: &[&TopicMeta], page_number: usize) -> Vec<String> {
    on_page(visible, page_number).2.iter().map(|t| t.name.clone()).collect()
}

/// Page `page_number` (clamped) of the topics the viewer may see (`visible`, in name
/// order) with their totals; also the page shown and how many pages there are.
fn topics_page<'a>(
    visible: &[&'a TopicMeta],
    snapshots: &[ShardMetrics],
    page_number: usize,
) -> (usize, usize, Vec<(&'a TopicMeta, TopicTotals)>) {
    let (page_number, pages, shown) = on_page(visible, page_number);
    let mut totals: HashMap<&str, TopicTotals> =
        shown.iter().map(|t| (t.name.as_str(), TopicTotals::default())).collect();
    for t in snapshots.iter().flat_map(|s| &s.topics) {
        if let Some(entry) = totals.get_mut(t.topic.as_str()) {
            entry.size_bytes += t.size_bytes;
            entry.produce_bytes += t.counters.produce_bytes;
            entry.fetch_bytes += t.counters.fetch_bytes;
        }
    }
    let rows = shown.iter().map(|t| (*t, totals[t.name.as_str()])).collect();
    (page_number, pages, rows)
}

/// `/topics`: a page of the topics the viewer may see (`visible`, in name order). The
/// script fills the rate cells from `/api/topics` (`topics_json`), matched by name.
pub fn topics(
    visible: &[&TopicMeta],
    snapshots: &[ShardMetrics],
    page_number: usize,
    forms: Option<Forms>,
) -> String {
    let (page_number, pages, shown) = topics_page(visible, snapshots, page_number);
    let rows = shown.iter().map(|(topic, totals)| {
        let name = escape(&topic.name);
        let rate = |kind| {
            format!("<span class=\"rate\" data-topic=\"{name}\" data-kind=\"{kind}\">-</span>")
        };
        vec![
            format!("<a href=\"/topics/{name}\">{name}</a>"),
            topic.partition_shards.len().to_string(),
            totals.size_bytes.to_string(),
            totals.produce_bytes.to_string(),
            totals.fetch_bytes.to_string(),
            rate("produce"),
            rate("fetch"),
        ]
    });
    let header = [
        "topic",
        "partitions",
        "bytes on disk",
        "bytes produced",
        "bytes fetched",
        "produce (B/s)",
        "fetch (B/s)",
    ];
    let mut body = format!(
        "<p id=\"topics-summary\">{} topics; page {page_number} of {pages}. Bytes since \
         start-up; the rates are over the last 5 s, polled from \
         <a id=\"topics-api\" href=\"/api/topics?page={page_number}\">/api/topics</a> while \
         the page is open.</p>\n",
        visible.len()
    );
    body.push_str(&table("topics", &header, rows));
    body.push_str(&pager("/topics", page_number, pages));
    body.push_str("<script src=\"/console.js\"></script>\n");
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

/// `/api/topics?page=N`: the time and, for the topics of that page of `/topics`, the
/// bytes produced and fetched since start-up (the script differences two polls).
pub fn topics_json(
    visible: &[&TopicMeta],
    snapshots: &[ShardMetrics],
    page_number: usize,
) -> String {
    let (page_number, pages, shown) = topics_page(visible, snapshots, page_number);
    let topics: Vec<serde_json::Value> = (shown.iter())
        .map(|(topic, totals)| {
            serde_json::json!({
                "topic": topic.name, "partitions": topic.partition_shards.len(),
                "size_bytes": totals.size_bytes, "produce_bytes": totals.produce_bytes,
                "fetch_bytes": totals.fetch_bytes,
            })
        })
        .collect();
    serde_json::json!({
        "time_ms": now_ms(), "page": page_number, "pages": pages, "topics": topics,
    })
    .to_string()
}

/// `/topics/NAME`: page `page_number` (clamped) of its partitions; its configs only when
/// `configs` (the viewer may DESCRIBE_CONFIGS).
pub fn topic(
    topic: &TopicMeta,
    snapshots: &[ShardMetrics],
    page_number: usize,
    configs: bool,
    forms: Option<Forms>,
) -> String {
    let total = topic.partition_shards.len();
    let (page_number, pages, before) = page_of(total, PARTITIONS_PER_PAGE, page_number);
    let shown = before as i32..(before + PARTITIONS_PER_PAGE).min(total) as i32;
    let owned: HashMap<i32, &PartitionMetrics> = snapshots
        .iter()
        .flat_map(|s| &s.partitions)
        .filter(|p| p.topic == topic.name && shown.contains(&p.partition))
        .map(|p| (p.partition, p))
        .collect();
    let owners = topic.partition_shards.iter().enumerate().skip(before);
    let rows = owners.take(PARTITIONS_PER_PAGE).map(|(partition, shard)| {
        let p = owned.get(&(partition as i32));
        let figure =
            |f: fn(&PartitionMetrics) -> String| p.map_or_else(|| "-".to_string(), |p| f(p));
        vec![
            format!("<a href=\"/topics/{}/{partition}\">{partition}</a>", escape(&topic.name)),
            shard.to_string(),
            figure(|p| p.log_start_offset.to_string()),
            figure(|p| p.high_watermark.to_string()),
            figure(|p| p.log_end_offset.to_string()),
            figure(|p| p.size_bytes.to_string()),
        ]
    });
    let header =
        ["partition", "owner shard", "log start", "high watermark", "log end", "bytes on disk"];
    let mut body = format!("<p>{total} partitions; page {page_number} of {pages}.</p>\n");
    body.push_str(&table("partitions", &header, rows));
    body.push_str(&pager(&format!("/topics/{}", escape(&topic.name)), page_number, pages));
    body.push_str(
        "<p>Consumers read from the log start up to the high watermark (the last durable \
         offset + 1); the log end is the next offset to assign, past the high watermark only \
         while a flush is in flight.</p>\n",
    );
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

/// Milliseconds since the Unix epoch (the live charts' clock).
fn now_ms() -> u128 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    now.map_or(0, |d| d.as_millis())
}

/// Bytes in MiB, for figures that are whole segment files.
fn mib(bytes: u64) -> String {
    format!("{} MiB", bytes >> 20)
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
