//! The console's actions, served only with `--console-write`: create a topic, delete a
//! topic, alter a topic's configs, reset the committed offsets of a group without members.
//!
//! Each is a form that POSTs to `/actions/NAME`. A POST is refused with 403 when the
//! console is read-only, when its Origin/Referer is not the admin endpoint, or when its
//! CSRF token is not the action's (`csrf.rs`). The first POST answers a confirmation page
//! (create and alter run with validate_only first, so a bad value is shown before anything
//! is asked); only a POST with `confirm=yes` changes anything. Every action goes through
//! the same shard calls as the Kafka admin APIs (the controller on shard 0 for topics,
//! the group's coordinator for offsets), so validation and errors are Kafka's: a refusal
//! shows Kafka's error name and message. With the authorizer on, each action first asks
//! it what the Kafka API would (`access.rs`): CREATE on the cluster or the topic,
//! ALTER_CONFIGS or DELETE on the topic, READ on the group and on each topic (OffsetCommit's
//! rule) for a reset; a refusal is a 403 naming the missing permission, before anything
//! is read or changed.
//!
//! Not a hot path: runs only on POSTs to the admin endpoint.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::rc::Rc;

use kafka_protocol::ResponseError;
use shardlog_shards::acl::AclOperation;
use shardlog_shards::topic_config::{ConfigChange, ConfigOp, TopicConfigChange};
use shardlog_shards::{GroupError, NewTopic, Shard, TopicError};

use super::access::{Denied, Viewer};
use super::csrf::{self, Csrf, Forms};
use super::html::{escape, page, table};
use super::records::{percent_decode, query_value};
use super::{http, Request, HTML};
use crate::handlers::errors::{self as kafka, group_error_code, topic_error_code};

/// ListOffsets' "earliest" and "latest".
const EARLIEST: i64 = -2;
const LATEST: i64 = -1;

/// What a form can ask for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    CreateTopic,
    DeleteTopic,
    AlterConfigs,
    ResetOffsets,
}

impl Action {
    const ALL: [Action; 4] =
        [Action::CreateTopic, Action::DeleteTopic, Action::AlterConfigs, Action::ResetOffsets];

    /// Its name, in its path and in its CSRF token.
    pub fn name(self) -> &'static str {
        match self {
            Action::CreateTopic => "create-topic",
            Action::DeleteTopic => "delete-topic",
            Action::AlterConfigs => "alter-configs",
            Action::ResetOffsets => "reset-offsets",
        }
    }

    fn from_path(path: &str) -> Option<Action> {
        let name = path.strip_prefix("/actions/")?;
        Action::ALL.into_iter().find(|a| a.name() == name)
    }
}

/// A form for `action`: `fields` (HTML), the CSRF token, and a submit button.
pub fn form(forms: Forms, action: Action, fields: &str, submit: &str) -> String {
    format!(
        "<form method=\"post\" action=\"/actions/{name}\" id=\"{name}\">{fields}\
         <input type=\"hidden\" name=\"csrf\" value=\"{token}\"> \
         <button type=\"submit\">{submit}</button></form>\n",
        name = action.name(),
        token = forms.token(action.name()),
        submit = escape(submit),
    )
}

/// A hidden input (the target of an action, carried by its form).
pub fn hidden(name: &str, value: &str) -> String {
    format!("<input type=\"hidden\" name=\"{}\" value=\"{}\">", escape(name), escape(value))
}

/// The answer to a POST on `path`.
pub async fn post(
    shard: &Rc<Shard>,
    viewer: &Viewer,
    write: bool,
    csrf: &Csrf,
    path: &str,
    request: &Request,
) -> Vec<u8> {
    let Some(action) = Action::from_path(path) else {
        return http::response(405, super::super::TEXT, "POST is served only on /actions/...\n");
    };
    if !write {
        let why = "The console is read-only: start the broker with --console-write to change \
                   topics and offsets from it.";
        return refusal(403, "Read-only console", why);
    }
    if let Err(why) = csrf::check_origin(&request.head, request.local_addr) {
        return refusal(
            403,
            "Refused",
            &format!("This form was not sent from the console: {why}."),
        );
    }
    let Ok(body) = std::str::from_utf8(&request.body) else {
        return refusal(400, "Refused", "The form's body is not UTF-8.");
    };
    let form = Form(body);
    if !csrf.is_valid(viewer.session_id(), action.name(), &form.text("csrf")) {
        let why = "The form's CSRF token is missing or wrong (the broker restarted, the form is \
                   from another session, or not the console's): reload the page and try again.";
        return refusal(403, "Refused", why);
    }
    let confirmed = form.text("confirm") == "yes";
    let outcome = match action {
        Action::CreateTopic => create_topic(shard, viewer, &form, confirmed).await,
        Action::DeleteTopic => delete_topic(shard, viewer, &form, confirmed).await,
        Action::AlterConfigs => alter_configs(shard, viewer, &form, confirmed).await,
        Action::ResetOffsets => reset_offsets(shard, viewer, &form, confirmed).await,
    };
    let forms = Forms { csrf, session: viewer.session_id() };
    let (status, title, body) = match outcome {
        Outcome::Confirm { summary } => {
            (200, "Confirm", confirm_form(forms, action, &form, &summary))
        }
        Outcome::Done { title, summary } => (200, title, format!("<p id=\"done\">{summary}</p>")),
        Outcome::Refused { status, message } => {
            (status, "Refused", format!("<p class=\"bad\" id=\"error\">{}</p>", escape(&message)))
        }
        Outcome::Denied(denied) => return denied.response(),
    };
    http::response(status, HTML, &page(title, &body))
}

/// A refusal before any action ran.
pub fn refusal(status: u16, title: &str, why: &str) -> Vec<u8> {
    let body = format!("<p class=\"bad\" id=\"error\">{}</p>", escape(why));
    http::response(status, HTML, &page(title, &body))
}

/// What an action answers.
enum Outcome {
    /// Valid: ask for confirmation, showing `summary` (HTML).
    Confirm {
        summary: String,
    },
    Done {
        title: &'static str,
        summary: String,
    },
    /// Refused: HTTP status and the message shown.
    Refused {
        status: u16,
        message: String,
    },
    /// The authorizer said no.
    Denied(Denied),
}

impl From<Denied> for Outcome {
    fn from(denied: Denied) -> Outcome {
        Outcome::Denied(denied)
    }
}

impl Outcome {
    fn bad_input(message: String) -> Outcome {
        Outcome::Refused { status: 400, message }
    }

    /// Refused by the shards with a Kafka error code: its name and message are shown.
    fn kafka(code: i16, message: &str) -> Outcome {
        let status = match code {
            kafka::UNKNOWN_TOPIC_OR_PARTITION | kafka::GROUP_ID_NOT_FOUND => 404,
            kafka::TOPIC_ALREADY_EXISTS | kafka::NON_EMPTY_GROUP => 409,
            kafka::KAFKA_STORAGE_ERROR => 500,
            _ => 400,
        };
        let name = match ResponseError::try_from_code(code) {
            Some(error) => crate::cli::errors::error_name(error),
            None => format!("error code {code}"),
        };
        Outcome::Refused { status, message: format!("{name}: {message}") }
    }

    fn topic(error: &TopicError) -> Outcome {
        Outcome::kafka(topic_error_code(error), &error.to_string())
    }

    fn group(error: GroupError, context: &str) -> Outcome {
        Outcome::kafka(group_error_code(&error), context)
    }
}

/// The confirmation: the summary, then the same form again (every field it came with,
/// hidden) with `confirm=yes`.
fn confirm_form(forms: Forms, action: Action, sent: &Form, summary: &str) -> String {
    let fields: String = sent
        .fields()
        .into_iter()
        .filter(|(name, _)| name != "csrf" && name != "confirm")
        .map(|(name, value)| hidden(&name, &value))
        .collect();
    let fields = format!("{fields}{}", hidden("confirm", "yes"));
    format!(
        "<div id=\"summary\">{summary}</div>\n{}<p>Nothing changes unless you press \
         Confirm; to cancel, leave this page.</p>",
        form(forms, action, &fields, "Confirm")
    )
}

/// An `application/x-www-form-urlencoded` body.
struct Form<'a>(&'a str);

impl Form<'_> {
    /// A field's value, decoded; empty when absent or not decodable.
    fn text(&self, name: &str) -> String {
        query_value(self.0, name).unwrap_or_default()
    }

    /// Every field, decoded, first value of each name, in order.
    fn fields(&self) -> Vec<(String, String)> {
        let mut seen = Vec::new();
        for pair in self.0.split('&').filter(|p| !p.is_empty()) {
            let raw = pair.split('=').next().unwrap_or_default();
            let name = percent_decode(raw, true).unwrap_or_default();
            if !name.is_empty() && !seen.iter().any(|(n, _)| *n == name) {
                let value = self.text(&name);
                seen.push((name, value));
            }
        }
        seen
    }
}

/// `key=value` lines (blank lines skipped); a line without `=` is refused.
fn parse_configs(text: &str) -> Result<Vec<(String, String)>, String> {
    let lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    lines
        .map(|line| match line.split_once('=') {
            Some((key, value)) if !key.trim().is_empty() => {
                Ok((key.trim().to_string(), value.trim().to_string()))
            }
            _ => Err(format!("{line:?} is not a key=value line")),
        })
        .collect()
}

fn configs_list(configs: &[(String, String)]) -> String {
    if configs.is_empty() {
        return "no configs (the broker's defaults)".to_string();
    }
    let items: Vec<String> =
        configs.iter().map(|(k, v)| format!("<code>{}={}</code>", escape(k), escape(v))).collect();
    items.join(", ")
}

async fn create_topic(
    shard: &Rc<Shard>,
    viewer: &Viewer,
    form: &Form<'_>,
    confirmed: bool,
) -> Outcome {
    let name = form.text("name").trim().to_string();
    if let Err(denied) = viewer.create_topic(&name) {
        return denied.into();
    }
    let Ok(num_partitions) = form.text("partitions").trim().parse::<i32>() else {
        return Outcome::bad_input("The number of partitions must be a whole number.".into());
    };
    let configs = match parse_configs(&form.text("configs")) {
        Ok(configs) => configs,
        Err(why) => return Outcome::bad_input(format!("Configs: {why}.")),
    };
    let summary = format!(
        "Create topic <b>{}</b> with {num_partitions} partitions and {}?",
        escape(&name),
        configs_list(&configs)
    );
    let topic = NewTopic { name: name.clone(), num_partitions, replication_factor: -1, configs };
    let result = shard.create_topics(vec![topic], !confirmed).await.pop();
    let done = format!("Topic {} created.", topic_link(&name));
    controller_outcome(result, confirmed, summary, ("Topic created", done))
}

/// What a controller call answers: asked with validate_only unless `confirmed`, so a
/// success asks for confirmation (`summary`) or is done (`done`: title and text).
fn controller_outcome(
    result: Option<Result<(), TopicError>>,
    confirmed: bool,
    summary: String,
    (title, done): (&'static str, String),
) -> Outcome {
    match result {
        Some(Ok(())) if !confirmed => Outcome::Confirm { summary },
        Some(Ok(())) => Outcome::Done { title, summary: done },
        Some(Err(e)) => Outcome::topic(&e),
        None => Outcome::bad_input("The controller gave no answer.".into()),
    }
}

async fn delete_topic(
    shard: &Rc<Shard>,
    viewer: &Viewer,
    form: &Form<'_>,
    confirmed: bool,
) -> Outcome {
    let name = form.text("topic");
    if let Err(denied) = viewer.topic(AclOperation::Delete, &name) {
        return denied.into();
    }
    let Some(topic) = shard.topic(&name) else {
        let message = format!("There is no topic {name:?}.");
        return Outcome::kafka(kafka::UNKNOWN_TOPIC_OR_PARTITION, &message);
    };
    if !confirmed {
        let summary = format!(
            "Delete topic <b>{}</b> and the records of its {} partitions? This cannot be undone.",
            escape(&name),
            topic.partition_shards.len()
        );
        return Outcome::Confirm { summary };
    }
    let result = shard.delete_topics(vec![name.clone()]).await.pop();
    let done = format!("Topic <b>{}</b> deleted. <a href=\"/topics\">topics</a>", escape(&name));
    controller_outcome(result, true, String::new(), ("Topic deleted", done))
}

async fn alter_configs(
    shard: &Rc<Shard>,
    viewer: &Viewer,
    form: &Form<'_>,
    confirmed: bool,
) -> Outcome {
    let name = form.text("topic");
    if let Err(denied) = viewer.topic(AclOperation::AlterConfigs, &name) {
        return denied.into();
    }
    let set = match parse_configs(&form.text("set")) {
        Ok(set) => set,
        Err(why) => return Outcome::bad_input(format!("Configs to set: {why}.")),
    };
    let delete: Vec<String> = form.text("delete").split_whitespace().map(String::from).collect();
    if set.is_empty() && delete.is_empty() {
        return Outcome::bad_input("Nothing to change: give configs to set or to delete.".into());
    }
    let mut summary = format!("Change the configs of topic <b>{}</b>:", escape(&name));
    if !set.is_empty() {
        let _ = write!(summary, " set {};", configs_list(&set));
    }
    if !delete.is_empty() {
        let keys: Vec<String> =
            delete.iter().map(|k| format!("<code>{}</code>", escape(k))).collect();
        let _ = write!(summary, " back to the default: {};", keys.join(", "));
    }
    let ops = (set.into_iter().map(|(k, v)| (k, ConfigOp::Set, Some(v))))
        .chain(delete.into_iter().map(|k| (k, ConfigOp::Delete, None)))
        .collect();
    let change = TopicConfigChange { topic: name.clone(), change: ConfigChange::Incremental(ops) };
    let result = shard.alter_topic_configs(vec![change], !confirmed).await.pop();
    let done = format!("The configs of topic {} changed.", topic_link(&name));
    controller_outcome(result, confirmed, summary, ("Configs changed", done))
}

fn topic_link(name: &str) -> String {
    format!("<a href=\"/topics/{0}\">{0}</a>", escape(name))
}

/// Where a reset moves a group's offsets: a ListOffsets timestamp (earliest, latest, or
/// the first record at or after a time).
fn reset_target(form: &Form<'_>) -> Result<(i64, String), String> {
    match form.text("to").as_str() {
        "earliest" => Ok((EARLIEST, "the log start".to_string())),
        "latest" => Ok((LATEST, "the high watermark".to_string())),
        "timestamp" => match form.text("timestamp").trim().parse::<i64>() {
            Ok(ms) if ms >= 0 => Ok((ms, format!("the first record at or after {ms} ms"))),
            _ => Err("The timestamp must be milliseconds since the epoch (0 or more).".into()),
        },
        other => Err(format!("Reset to {other:?}? Choose earliest, latest or timestamp.")),
    }
}

async fn reset_offsets(
    shard: &Rc<Shard>,
    viewer: &Viewer,
    form: &Form<'_>,
    confirmed: bool,
) -> Outcome {
    let group = form.text("group");
    if group.is_empty() {
        return Outcome::kafka(kafka::INVALID_GROUP_ID, "The group id is empty.");
    }
    if let Err(denied) = viewer.group(AclOperation::Read, &group) {
        return denied.into();
    }
    let (timestamp, target) = match reset_target(form) {
        Ok(target) => target,
        Err(why) => return Outcome::bad_input(why),
    };
    let description = shard.describe_group(&group).await;
    if let Some(summary) = description.summary.as_ref().filter(|s| !s.members.is_empty()) {
        let message = format!(
            "The group has {} members ({}): offsets are reset only when it has none (stop its \
             consumers first).",
            summary.members.len(),
            summary.state.name()
        );
        return Outcome::kafka(kafka::NON_EMPTY_GROUP, &message);
    }
    let committed: BTreeMap<(String, i32), i64> = description.committed.into_iter().collect();
    let topic = form.text("topic").trim().to_string();
    // Before the topic is looked up: a refusal does not tell whether it exists.
    let named = (!topic.is_empty()).then(|| viewer.topic(AclOperation::Read, &topic));
    if let Some(Err(denied)) = named {
        return denied.into();
    }
    let partitions: Vec<(String, i32)> = if topic.is_empty() {
        committed.keys().cloned().collect()
    } else {
        match shard.topic(&topic) {
            Some(meta) => {
                (0..meta.partition_shards.len() as i32).map(|p| (topic.clone(), p)).collect()
            }
            None => {
                let message = format!("There is no topic {topic:?}.");
                return Outcome::kafka(kafka::UNKNOWN_TOPIC_OR_PARTITION, &message);
            }
        }
    };
    if partitions.is_empty() {
        return Outcome::bad_input(
            "The group has no committed offsets: name the topic whose offsets to set.".into(),
        );
    }
    // OffsetCommit's rule, for every topic the reset would touch.
    for (topic, _) in &partitions {
        if let Err(denied) = viewer.topic(AclOperation::Read, topic) {
            return denied.into();
        }
    }
    let mut offsets = Vec::with_capacity(partitions.len());
    for (topic, partition) in partitions {
        let offset = match shard.list_offsets(&topic, partition, timestamp, false, -1).await {
            // No record at or after the time: the end, as Kafka's --to-datetime.
            Ok(listed) if listed.offset == -1 => {
                shard.list_offsets(&topic, partition, LATEST, false, -1).await
            }
            found => found,
        };
        match offset {
            Ok(listed) => offsets.push((topic, partition, listed.offset)),
            Err(e) => {
                let message = format!("Looking up {target} of {topic}-{partition}: {e}");
                return Outcome::kafka(crate::handlers::errors::partition_error_code(&e), &message);
            }
        }
    }
    let rows = offsets.iter().map(|(topic, partition, offset)| {
        let now = committed.get(&(topic.clone(), *partition));
        vec![
            escape(topic),
            partition.to_string(),
            now.map_or_else(|| "-".to_string(), |o| o.to_string()),
            offset.to_string(),
        ]
    });
    let header = ["topic", "partition", "committed now", "new committed offset"];
    let changes = table("reset", &header, rows);
    if !confirmed {
        let summary = format!(
            "Reset the committed offsets of group <b>{}</b> to {target}:\n{changes}",
            escape(&group)
        );
        return Outcome::Confirm { summary };
    }
    let asked: Vec<(String, i32)> = offsets.iter().map(|(t, p, _)| (t.clone(), *p)).collect();
    match shard.reset_group_offsets(&group, offsets).await {
        Err(e) => Outcome::group(e, "the coordinator refused the reset"),
        Ok(results) => {
            let failed: Vec<String> = (asked.iter().zip(&results))
                .filter_map(|((t, p), r)| {
                    let e = r.as_ref().err()?;
                    Some(format!("{t}-{p}: {e:?}"))
                })
                .collect();
            if let Some(first) = results.iter().find_map(|r| r.err()) {
                return Outcome::group(first, &format!("not reset: {}", failed.join(", ")));
            }
            Outcome::Done {
                title: "Offsets reset",
                summary: format!(
                    "The offsets of group {} were reset to {target}.\n{changes}",
                    super::groups::group_link(&group)
                ),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_are_found_by_path_only() {
        for action in Action::ALL {
            assert_eq!(Action::from_path(&format!("/actions/{}", action.name())), Some(action));
        }
        assert_eq!(Action::from_path("/actions/drop-everything"), None);
        assert_eq!(Action::from_path("/metrics"), None);
    }

    #[test]
    fn config_lines_are_key_value_pairs() {
        let parsed = parse_configs("retention.ms=1000\r\n\n cleanup.policy = compact \n");
        assert_eq!(
            parsed.unwrap(),
            vec![
                ("retention.ms".to_string(), "1000".to_string()),
                ("cleanup.policy".to_string(), "compact".to_string())
            ]
        );
        assert!(parse_configs("retention.ms").is_err());
        assert!(parse_configs("=5").is_err());
        assert_eq!(parse_configs("").unwrap(), vec![]);
    }

    #[test]
    fn a_form_body_gives_each_field_once_decoded() {
        let form = Form("name=a+b&partitions=3&configs=x%3D1%0Ay%3D2&name=again&bad=%zz");
        assert_eq!(form.text("name"), "a b");
        assert_eq!(form.text("configs"), "x=1\ny=2");
        assert_eq!(form.text("missing"), "");
        assert_eq!(form.text("bad"), "", "an undecodable value is empty, not a panic");
        let names: Vec<String> = form.fields().into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["name", "partitions", "configs", "bad"]);
    }
}
