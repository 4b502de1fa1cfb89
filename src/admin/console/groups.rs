//! Consumer groups: `/groups` (every group: state, members, partitions, total lag),
//! `/groups/NAME` (state, protocol, members with their assignments, committed offsets
//! with lag, and a live chart of the total lag polled from `/api/groups/NAME`), and with
//! `--console-write` the form that resets an empty group's offsets (`actions.rs`).
//!
//! Membership comes from the group's coordinator as DescribeGroups reads it
//! (`Shard::describe_group`, over the mesh); high watermarks from the shards' snapshots.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

use shardlog_shards::group::GroupDescription;
use shardlog_shards::metrics::{consumer_lags, ShardMetrics};

use super::actions::{self, Action};
use super::csrf::Forms;
use super::html::{escape, page, page_of, pager, table};
use super::records::{percent_decode, percent_encode};
use crate::cli::group::decode_assignment;

/// Partitions per page of a group's offsets table.
pub const OFFSETS_PER_PAGE: usize = 100;

/// `/groups/NAME` (false) or `/api/groups/NAME` (true), NAME percent-decoded.
pub fn from_path(path: &str) -> Option<(String, bool)> {
    let (raw, json) = match path.strip_prefix("/api/groups/") {
        Some(raw) => (raw, true),
        None => (path.strip_prefix("/groups/")?, false),
    };
    let name = percent_decode(raw, false)?;
    (!name.is_empty()).then_some((name, json))
}

/// A link to a group's page (the name percent-encoded in the URL, escaped in the text).
pub fn group_link(name: &str) -> String {
    format!("<a href=\"/groups/{}\">{}</a>", percent_encode(name), escape(name))
}

pub fn no_such_group(name: &str) -> String {
    let body = format!(
        "<p>There is no group <code>{}</code>: no member and no committed offset.</p>",
        escape(name)
    );
    page("No such group", &body)
}

/// `/groups`: one row per group any coordinator knows or holds offsets for and `group`
/// lets the viewer see, its partitions and lag counted over the topics `topic` lets it see;
/// groups and offsets from the coordinators' snapshots, high watermarks from the owners'.
pub fn list(
    coordinators: &[ShardMetrics],
    owners: &[ShardMetrics],
    group: &dyn Fn(&str) -> bool,
    topic: &dyn Fn(&str) -> bool,
) -> String {
    // group -> (state, members, partitions committed, total lag)
    let mut groups: BTreeMap<&str, (&str, usize, usize, i64)> = BTreeMap::new();
    for brief in coordinators.iter().flat_map(|s| &s.groups).filter(|b| group(&b.group)) {
        groups.insert(&brief.group, (brief.state, brief.members, 0, 0));
    }
    let lags = consumer_lags(coordinators, owners).into_iter();
    for lag in lags.filter(|l| group(&l.committed.group) && topic(&l.committed.topic)) {
        // Offsets of a group the coordinator has no membership for (after a restart): Kafka
        // lists such a group as Empty.
        let entry = groups.entry(&lag.committed.group).or_insert(("Empty", 0, 0, 0));
        entry.2 += 1;
        entry.3 += lag.lag().unwrap_or(0);
    }
    let rows = groups.iter().map(|(name, (state, members, partitions, lag))| {
        vec![
            group_link(name),
            state.to_string(),
            members.to_string(),
            partitions.to_string(),
            lag.to_string(),
        ]
    });
    let header = ["group", "state", "members", "partitions committed", "total lag"];
    let body = format!(
        "<p>{} groups. Lag is each committed partition's high watermark minus its committed \
         offset.</p>\n{}",
        groups.len(),
        table("groups", &header, rows)
    );
    page("Consumer groups", &body)
}

/// One partition of a group's page.
struct PartitionRow {
    committed: Option<i64>,
    high_watermark: Option<i64>,
    /// The member the partition is assigned to.
    member: Option<String>,
}

impl PartitionRow {
    fn lag(&self) -> Option<i64> {
        Some((self.high_watermark? - self.committed?).max(0))
    }
}

/// A member: (member id, client id, host, assignment as topic -> partitions).
type MemberRow = (String, String, String, BTreeMap<String, Vec<i32>>);

/// A group joined with the partitions' high watermarks.
pub struct GroupView<'a> {
    name: &'a str,
    description: &'a GroupDescription,
    members: Vec<MemberRow>,
    partitions: BTreeMap<(String, i32), PartitionRow>,
}

impl<'a> GroupView<'a> {
    /// `None` when the coordinator has neither members nor offsets of `name`. Partitions
    /// are shown only of the topics `visible` lets the viewer see; their high watermarks
    /// come with `set_high_watermarks`.
    pub fn new(
        name: &'a str,
        description: &'a GroupDescription,
        visible: &dyn Fn(&str) -> bool,
    ) -> Option<GroupView<'a>> {
        if description.summary.is_none() && description.committed.is_empty() {
            return None;
        }
        let consumer = description.summary.as_ref().is_some_and(|s| s.protocol_type == "consumer");
        let members: Vec<_> = (description.summary.iter().flat_map(|s| &s.members))
            .map(|(member_id, _, client_id, host, _, assignment)| {
                let assignment =
                    if consumer { decode_assignment(assignment) } else { BTreeMap::new() };
                (member_id.clone(), client_id.clone(), host.clone(), assignment)
            })
            .collect();
        let mut partitions = BTreeMap::new();
        let assigned = members.iter().flat_map(|(member, _, _, assignment)| {
            let each = assignment.iter().flat_map(|(t, ps)| ps.iter().map(move |p| (t, *p)));
            each.map(move |(t, p)| ((t.clone(), p), Some(member.clone())))
        });
        let committed = description.committed.iter().map(|(key, _)| (key.clone(), None));
        for (key, member) in committed.chain(assigned).filter(|((t, _), _)| visible(t)) {
            let row = partitions.entry(key).or_insert(PartitionRow {
                committed: None,
                high_watermark: None,
                member: None,
            });
            row.member = row.member.take().or(member);
        }
        for ((topic, partition), offset) in &description.committed {
            if let Some(row) = partitions.get_mut(&(topic.clone(), *partition)) {
                row.committed = Some(*offset);
            }
        }
        Some(GroupView { name, description, members, partitions })
    }

    /// The topics of the partitions shown: those whose high watermarks the page needs.
    pub fn topics(&self) -> Vec<String> {
        let topics: BTreeSet<&String> = self.partitions.keys().map(|(topic, _)| topic).collect();
        topics.into_iter().cloned().collect()
    }

    /// Each shown partition's high watermark, from the owners' snapshots.
    pub fn set_high_watermarks(&mut self, snapshots: &[ShardMetrics]) {
        let high_watermarks: BTreeMap<(&str, i32), i64> = (snapshots.iter())
            .flat_map(|s| &s.partitions)
            .map(|p| ((p.topic.as_str(), p.partition), p.high_watermark))
            .collect();
        for ((topic, partition), row) in self.partitions.iter_mut() {
            row.high_watermark = high_watermarks.get(&(topic.as_str(), *partition)).copied();
        }
    }

    fn state(&self) -> &'static str {
        self.description.summary.as_ref().map_or("Empty", |s| s.state.name())
    }

    fn total_lag(&self) -> i64 {
        self.partitions.values().filter_map(PartitionRow::lag).sum()
    }

    /// `/api/groups/NAME`: the time, the state, the member count, the total lag and each
    /// partition's committed offset, high watermark and lag.
    pub fn json(&self) -> String {
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let partitions: Vec<serde_json::Value> = (self.partitions.iter())
            .map(|((topic, partition), row)| {
                serde_json::json!({
                    "topic": topic, "partition": partition, "committed": row.committed,
                    "high_watermark": row.high_watermark, "lag": row.lag(),
                })
            })
            .collect();
        serde_json::json!({
            "time_ms": now_ms, "group": self.name, "state": self.state(),
            "members": self.members.len(), "total_lag": self.total_lag(),
            "partitions": partitions,
        })
        .to_string()
    }

    /// The group's page; its offsets table shows page `page_number` (clamped) of
    /// `OFFSETS_PER_PAGE` partitions.
    pub fn page(&self, forms: Option<Forms>, page_number: usize) -> String {
        let (protocol_type, protocol) = self
            .description
            .summary
            .as_ref()
            .map_or(("", ""), |s| (s.protocol_type.as_str(), s.protocol.as_str()));
        let dash = |v: Option<i64>| v.map_or_else(|| "-".to_string(), |v| v.to_string());
        let mut body = format!(
            "<p id=\"state\">State <b>{}</b>, protocol type <code>{}</code>, protocol \
             <code>{}</code>, {} members; total lag <b id=\"total-lag\">{}</b>.</p>\n",
            self.state(),
            escape(protocol_type),
            escape(protocol),
            self.members.len(),
            self.total_lag()
        );
        let members = self.members.iter().map(|(member, client, host, assignment)| {
            let assigned: Vec<String> = (assignment.iter())
                .map(|(t, ps)| {
                    let ps: Vec<String> = ps.iter().map(i32::to_string).collect();
                    format!("{}: {}", escape(t), ps.join(", "))
                })
                .collect();
            vec![escape(member), escape(client), escape(host), assigned.join("<br>")]
        });
        body.push_str("<h2>Members</h2>\n");
        let header = ["member id", "client id", "host", "assignment (topic: partitions)"];
        body.push_str(&table("members", &header, members));
        let total = self.partitions.len();
        let (page_number, pages, before) = page_of(total, OFFSETS_PER_PAGE, page_number);
        let shown = self.partitions.iter().skip(before).take(OFFSETS_PER_PAGE);
        let rows = shown.map(|((topic, partition), row)| {
            vec![
                format!("<a href=\"/topics/{0}\">{0}</a>", escape(topic)),
                partition.to_string(),
                dash(row.committed),
                dash(row.high_watermark),
                dash(row.lag()),
                row.member.as_deref().map_or_else(|| "-".to_string(), escape),
            ]
        });
        let _ = writeln!(
            body,
            "<h2>Offsets</h2>\n<p>{total} partitions; page {page_number} of {pages}.</p>"
        );
        let header = ["topic", "partition", "committed", "high watermark", "lag", "member"];
        body.push_str(&table("offsets", &header, rows));
        let path = format!("/groups/{}", escape(&percent_encode(self.name)));
        body.push_str(&pager(&path, page_number, pages));
        body.push_str(&format!(
            "<h2>Total lag, live</h2>\n<p>Polled every 5 s from <a href=\"{api}\">{api}</a> \
             while this page is open (the last 10 minutes).</p>\n\
             <div id=\"live\"><svg id=\"lag-chart\" data-points=\"0\" data-api=\"{api}\" \
             viewBox=\"0 0 600 200\" preserveAspectRatio=\"none\"></svg>\
             <p id=\"lag-text\">waiting for data</p></div>\n",
            api = format_args!("/api/groups/{}", escape(&percent_encode(self.name))),
        ));
        if let Some(forms) = forms {
            body.push_str(&self.reset_form(forms));
        }
        body.push_str("<script src=\"/console.js\"></script>\n");
        page(&format!("Group {}", self.name), &body)
    }

    /// The reset form: to earliest, latest or a time, for every committed partition or
    /// every partition of one topic.
    fn reset_form(&self, forms: Forms) -> String {
        let topics: BTreeSet<&str> = self.partitions.keys().map(|(t, _)| t.as_str()).collect();
        let options: String =
            topics.iter().map(|t| format!("<option>{}</option>", escape(t))).collect();
        let fields = format!(
            "{}<label>to <select name=\"to\"><option>earliest</option><option>latest</option>\
             <option>timestamp</option></select></label> \
             <label>timestamp (ms) <input name=\"timestamp\" size=\"14\"></label> \
             <label>topic <input name=\"topic\" list=\"group-topics\" size=\"16\" \
             placeholder=\"all committed\"></label><datalist id=\"group-topics\">{options}\
             </datalist>",
            actions::hidden("group", self.name)
        );
        format!(
            "<h2>Reset offsets</h2>\n<p>Only while the group has no members (Kafka's \
             NON_EMPTY_GROUP otherwise). A confirmation shows the new offsets first.</p>\n{}",
            actions::form(forms, Action::ResetOffsets, &fields, "Reset offsets…")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_paths_decode_their_name() {
        assert_eq!(from_path("/groups/a%2Fb+c"), Some(("a/b+c".to_string(), false)));
        assert_eq!(from_path("/api/groups/%3Cb%3E"), Some(("<b>".to_string(), true)));
        assert_eq!(from_path("/groups/"), None);
        assert_eq!(from_path("/groups/%zz"), None);
        assert_eq!(from_path("/groups"), None);
        assert_eq!(group_link("<b>/x"), "<a href=\"/groups/%3Cb%3E%2Fx\">&lt;b&gt;/x</a>");
    }
}
