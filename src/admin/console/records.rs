//! The message browser: `/topics/NAME/P` pages through partition P's records from an
//! offset (`offset=N`), a time (`timestamp=MS`, the first record at or after it) or the log
//! start, showing keys, values and headers as text, JSON (pretty-printed) or hex
//! (`format=`), optionally only the records with one key (`key=`).
//!
//! It reads like any consumer, through `Shard::fetch` with no wait (the owner shard serves
//! it over the mesh), read_uncommitted, at most `WINDOW_BYTES` a page; transaction markers
//! are not shown. Every byte from a record goes through `escape`.

use std::fmt::Write;
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::records::Record;
use shardlog_net::legacy_format;
use shardlog_shards::{PartitionError, PartitionRead, Shard};

use super::html::{escape, page, table};

/// Records shown per page.
pub const RECORDS_PER_PAGE: usize = 50;
/// What one page reads from the partition (a key search looks through this much).
const WINDOW_BYTES: usize = 1 << 20;
/// What a compressed batch may decompress to when shown.
const MAX_RECORDS_BYTES: usize = 16 << 20;
/// Bytes of a key, value or header shown before "… N more bytes".
const SHOWN_BYTES: usize = 4096;
/// ListOffsets' "earliest".
const EARLIEST: i64 = -2;

/// How keys, values and headers are shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// UTF-8 when the bytes are UTF-8, else hex.
    Text,
    /// Pretty-printed when the bytes are a JSON document, else as `Text`.
    Json,
    Hex,
}

impl Format {
    fn parse(name: Option<String>) -> Format {
        match name.as_deref() {
            Some("json") => Format::Json,
            Some("hex") => Format::Hex,
            _ => Format::Text,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Format::Text => "text",
            Format::Json => "json",
            Format::Hex => "hex",
        }
    }
}

/// Where a page starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    Offset(i64),
    /// The first record with a timestamp at or after this (ms since the epoch).
    Timestamp(i64),
    Earliest,
}

/// A message browser request, parsed from the path's partition and the query string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Browse {
    pub topic: String,
    pub partition: i32,
    pub start: Start,
    pub format: Format,
    pub key: Option<String>,
}

impl Browse {
    /// `/topics/NAME/P` with its query, or `None` for any other path.
    pub fn from_path(path: &str, query: &str) -> Option<Browse> {
        let (topic, partition) = path.strip_prefix("/topics/")?.split_once('/')?;
        Browse::parse(topic, partition, query)
    }

    fn parse(topic: &str, partition: &str, query: &str) -> Option<Browse> {
        let number = |name| query_value(query, name).and_then(|v| v.parse::<i64>().ok());
        let start = match (number("offset"), number("timestamp")) {
            (Some(offset), _) => Start::Offset(offset),
            (None, Some(timestamp)) => Start::Timestamp(timestamp),
            (None, None) => Start::Earliest,
        };
        Some(Browse {
            topic: topic.to_string(),
            partition: partition.parse().ok()?,
            start,
            format: Format::parse(query_value(query, "format")),
            key: query_value(query, "key").filter(|k| !k.is_empty()),
        })
    }

    /// The page, with its HTTP status.
    pub async fn render(&self, shard: &Rc<Shard>) -> (u16, String) {
        match self.read(shard).await {
            Ok(shown) => (200, self.page(&shown)),
            Err((status, why)) => {
                let body = format!("{}<p class=\"bad\">{}</p>", self.form(), escape(&why));
                (status, page(&self.title(), &body))
            }
        }
    }

    fn title(&self) -> String {
        format!("Records of {} partition {}", self.topic, self.partition)
    }

    async fn read(&self, shard: &Rc<Shard>) -> Result<Shown, (u16, String)> {
        let not_found =
            || (404, format!("There is no partition {} of topic {}.", self.partition, self.topic));
        let offset = match self.start {
            Start::Offset(offset) => offset,
            Start::Timestamp(ms) => {
                match shard.list_offsets(&self.topic, self.partition, ms, false, -1).await {
                    Ok(listed) if listed.offset == -1 => {
                        return Err((200, format!("No record has a timestamp at or after {ms}.")))
                    }
                    Ok(listed) => listed.offset,
                    Err(PartitionError::UnknownTopicOrPartition) => return Err(not_found()),
                    Err(e) => return Err((500, format!("Looking up timestamp {ms}: {e:?}"))),
                }
            }
            Start::Earliest => {
                match shard.list_offsets(&self.topic, self.partition, EARLIEST, false, -1).await {
                    Ok(listed) => listed.offset,
                    Err(PartitionError::UnknownTopicOrPartition) => return Err(not_found()),
                    Err(e) => return Err((500, format!("Looking up the log start: {e:?}"))),
                }
            }
        };
        let read = PartitionRead {
            topic: self.topic.clone(),
            partition: self.partition,
            fetch_offset: offset,
            partition_max_bytes: WINDOW_BYTES,
            read_committed: false,
            current_leader_epoch: -1,
        };
        let mut results = shard.fetch(vec![read], Duration::ZERO, 0, WINDOW_BYTES).await;
        let fetched = match results.pop().map(|data| data.result) {
            Some(Ok(fetched)) => fetched,
            Some(Err(PartitionError::OffsetOutOfRange)) => {
                return Err((200, format!("Offset {offset} is outside the partition's records.")))
            }
            Some(Err(PartitionError::UnknownTopicOrPartition)) | None => return Err(not_found()),
            Some(Err(e)) => return Err((500, format!("Reading from offset {offset}: {e:?}"))),
        };
        let mut shown = Shown {
            from: offset,
            high_watermark: fetched.high_watermark,
            log_start: fetched.log_start_offset,
            ..Shown::default()
        };
        for (base_offset, records) in
            legacy_format::stored_records(&fetched.records, MAX_RECORDS_BYTES)
        {
            let records = match records {
                Ok(records) => records,
                Err(e) => {
                    shown
                        .unreadable
                        .push(format!("The batch at offset {base_offset} cannot be shown: {e}."));
                    continue;
                }
            };
            for record in records.into_iter().filter(|r| r.offset >= offset) {
                if shown.records.len() == RECORDS_PER_PAGE {
                    return Ok(shown);
                }
                shown.next = record.offset + 1;
                let wanted = self
                    .key
                    .as_ref()
                    .is_none_or(|key| record.key.as_deref() == Some(key.as_bytes()));
                if wanted {
                    shown.records.push(record);
                }
            }
        }
        Ok(shown)
    }

    fn page(&self, shown: &Shown) -> String {
        let mut body = self.form();
        let _ = writeln!(
            body,
            "<p>Log start {}, high watermark {}. Read from offset {}.</p>",
            shown.log_start, shown.high_watermark, shown.from
        );
        for why in &shown.unreadable {
            let _ = writeln!(body, "<p class=\"bad\">{}</p>", escape(why));
        }
        let rows = shown.records.iter().map(|r| {
            let headers: Vec<String> = r
                .headers
                .iter()
                .map(|(k, v)| format!("{}: {}", escape(k), show(v.as_ref(), Format::Text)))
                .collect();
            vec![
                r.offset.to_string(),
                r.timestamp.to_string(),
                show(r.key.as_ref(), self.format),
                show(r.value.as_ref(), self.format),
                headers.join("<br>"),
            ]
        });
        let header = ["offset", "timestamp (ms)", "key", "value", "headers"];
        body.push_str(&table("records", &header, rows));
        if shown.records.is_empty() {
            body.push_str("<p>No records here.</p>\n");
        }
        if shown.next > shown.from && shown.next < shown.high_watermark {
            let _ =
                writeln!(body, "<p><a id=\"next\" href=\"{}\">next</a></p>", self.link(shown.next));
        }
        page(&self.title(), &body)
    }

    /// The form that picks the start, the format and the key.
    fn form(&self) -> String {
        let value = |v: Option<i64>| v.map_or_else(String::new, |v| v.to_string());
        let (offset, timestamp) = match self.start {
            Start::Offset(o) => (Some(o), None),
            Start::Timestamp(t) => (None, Some(t)),
            Start::Earliest => (None, None),
        };
        let options: String = [Format::Text, Format::Json, Format::Hex]
            .iter()
            .map(|f| {
                let selected = if *f == self.format { " selected" } else { "" };
                format!("<option{selected}>{}</option>", f.name())
            })
            .collect();
        format!(
            "<p><a href=\"/topics/{topic}\">topic {topic}</a></p>\n\
             <form method=\"get\" id=\"browse\">offset <input name=\"offset\" value=\"{}\" size=\"10\"> \
             or timestamp (ms) <input name=\"timestamp\" value=\"{}\" size=\"14\"> \
             key <input name=\"key\" value=\"{}\" size=\"16\"> \
             <select name=\"format\">{options}</select> <button>show</button></form>\n",
            value(offset),
            value(timestamp),
            escape(self.key.as_deref().unwrap_or("")),
            topic = escape(&self.topic),
        )
    }

    fn link(&self, offset: i64) -> String {
        let mut link = format!(
            "/topics/{}/{}?offset={offset}&amp;format={}",
            escape(&self.topic),
            self.partition,
            self.format.name()
        );
        if let Some(key) = &self.key {
            let _ = write!(link, "&amp;key={}", escape(&percent_encode(key)));
        }
        link
    }
}

/// What one page read.
#[derive(Debug, Default)]
struct Shown {
    from: i64,
    high_watermark: i64,
    log_start: i64,
    records: Vec<Record>,
    /// The offset after the last record looked at (where the next page starts).
    next: i64,
    unreadable: Vec<String>,
}

/// A key, value or header as HTML in `format`; `null` for a null one.
fn show(bytes: Option<&Bytes>, format: Format) -> String {
    let Some(bytes) = bytes else { return "<i>null</i>".to_string() };
    let (head, rest) = bytes.split_at(bytes.len().min(SHOWN_BYTES));
    let more = if rest.is_empty() {
        String::new()
    } else {
        format!(" <i>… {} more bytes</i>", rest.len())
    };
    let text = std::str::from_utf8(head).ok();
    let json = || {
        let document: serde_json::Value = serde_json::from_slice(bytes).ok()?;
        serde_json::to_string_pretty(&document).ok()
    };
    match (format, text) {
        (Format::Json, _) if rest.is_empty() => match json() {
            Some(pretty) => format!("<pre class=\"json\">{}</pre>", escape(&pretty)),
            None => show(Some(bytes), Format::Text),
        },
        (Format::Hex, _) | (_, None) => format!("<code class=\"hex\">{}</code>{more}", hex(head)),
        (_, Some(text)) => format!("{}{more}", escape(text)),
    }
}

fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 3);
    for (i, b) in bytes.iter().enumerate() {
        if i > 0 {
            out.push(if i % 16 == 0 { '\n' } else { ' ' });
        }
        let _ = write!(out, "{b:02x}");
    }
    out
}

/// `name=value` from a query string (or a form body), percent-decoded (`+` is a space), if
/// present.
pub fn query_value(query: &str, name: &str) -> Option<String> {
    let raw = query.split('&').find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))?;
    percent_decode(raw, true)
}

/// `raw` with its `%XX` escapes decoded (and `+` as a space when `plus_is_space`: query
/// strings and forms, not paths); `None` when an escape is malformed or the result is not
/// UTF-8.
pub fn percent_decode(raw: &str, plus_is_space: bool) -> Option<String> {
    let mut out = Vec::with_capacity(raw.len());
    let mut bytes = raw.bytes();
    while let Some(b) = bytes.next() {
        if b == b'+' && plus_is_space {
            out.push(b' ');
            continue;
        }
        if b != b'%' {
            out.push(b);
            continue;
        }
        let hex: Vec<u8> = bytes.by_ref().take(2).collect();
        match std::str::from_utf8(&hex).ok().and_then(|h| u8::from_str_radix(h, 16).ok()) {
            Some(decoded) if hex.len() == 2 => out.push(decoded),
            _ => return None,
        }
    }
    String::from_utf8(out).ok()
}

pub fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_browse_request_parses_its_start_format_and_key() {
        let parse = |q| Browse::parse("t", "2", q).unwrap();
        assert_eq!(parse("").start, Start::Earliest);
        assert_eq!(parse("offset=7&timestamp=9").start, Start::Offset(7));
        assert_eq!(parse("offset=&timestamp=9").start, Start::Timestamp(9));
        assert_eq!(parse("format=json").format, Format::Json);
        assert_eq!(parse("format=nonsense").format, Format::Text);
        assert_eq!(parse("key=a%20b+c%2F").key.as_deref(), Some("a b c/"));
        assert_eq!(parse("key=").key, None);
        assert_eq!(parse("key=%zz").key, None, "a bad escape is no key, not a panic");
        assert!(Browse::parse("t", "x", "").is_none());
        assert_eq!(Browse::from_path("/topics/a.b/3", "").unwrap().partition, 3);
        assert!(Browse::from_path("/topics/a.b", "").is_none(), "the topic page");
        assert!(Browse::from_path("/topics/a/x", "").is_none(), "not a partition number");
    }

    #[test]
    fn values_show_as_text_pretty_json_or_hex_and_are_escaped() {
        let b = |s: &[u8]| Some(Bytes::copy_from_slice(s));
        assert_eq!(show(b(b"<b>hi</b>").as_ref(), Format::Text), "&lt;b&gt;hi&lt;/b&gt;");
        assert_eq!(show(None, Format::Json), "<i>null</i>");
        assert_eq!(
            show(b(br#"{"a":"<x>"}"#).as_ref(), Format::Json),
            "<pre class=\"json\">{\n  &quot;a&quot;: &quot;&lt;x&gt;&quot;\n}</pre>"
        );
        // Not JSON: shown as text.
        assert_eq!(show(b(b"{nope").as_ref(), Format::Json), "{nope");
        assert_eq!(show(b(b"AB").as_ref(), Format::Hex), "<code class=\"hex\">41 42</code>");
        // Not UTF-8: hex whatever was asked.
        assert_eq!(show(b(&[0xff, 0]).as_ref(), Format::Text), "<code class=\"hex\">ff 00</code>");
        let long = vec![b'x'; SHOWN_BYTES + 5];
        assert!(show(Some(&Bytes::from(long)), Format::Text).ends_with("<i>… 5 more bytes</i>"));
    }

    #[test]
    fn next_links_keep_the_format_and_encode_the_key() {
        let mut browse = Browse::parse("t", "0", "format=hex&key=a%26b").unwrap();
        assert_eq!(browse.link(5), "/topics/t/0?offset=5&amp;format=hex&amp;key=a%26b");
        browse.key = None;
        assert_eq!(browse.link(5), "/topics/t/0?offset=5&amp;format=hex");
    }
}
