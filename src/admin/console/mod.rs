//! The web console on the admin endpoint: server-rendered pages over the same per-shard
//! snapshots `/metrics` gathers (every shard asked over the mesh, once per page), and one
//! small embedded script that polls `/api/overview` and `/api/groups/NAME` for the live
//! charts. Read-only unless `--console-write`: then its forms POST to `/actions/...`
//! (`actions.rs`), each behind a confirmation and a CSRF check (`csrf.rs`).
//!
//! Pages: `/` (shards, the latency budget and the live chart), `/topics` (paginated),
//! `/topics/NAME` (partitions, owner shards, high watermarks, configs), `/topics/NAME/P`
//! (the message browser, `records.rs`: it reads records as a consumer would), `/groups`
//! (state, members, lag), `/groups/NAME` (`groups.rs`: members, assignments, offsets, lag
//! over time).

mod actions;
mod csrf;
mod groups;
mod html;
mod pages;
mod records;

use std::rc::Rc;

use shardlog_shards::metrics::ShardMetrics;
use shardlog_shards::Shard;

use super::{http, Request};

const HTML: &str = "text/html; charset=utf-8";
const JSON: &str = "application/json";
const JAVASCRIPT: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";

/// The console's settings (from the broker's configuration).
#[derive(Clone, Copy, Debug)]
pub struct ConsoleSettings {
    /// `--console-write`: show the forms and accept their POSTs.
    pub write: bool,
}

/// The console of one admin endpoint.
pub struct Console {
    write: bool,
    csrf: csrf::Csrf,
}

impl Console {
    pub fn new(settings: ConsoleSettings) -> Console {
        Console { write: settings.write, csrf: csrf::Csrf::new() }
    }

    /// The key forms are signed with, when forms are shown (`--console-write`).
    fn forms(&self) -> Option<&csrf::Csrf> {
        self.write.then_some(&self.csrf)
    }

    /// The console's answer to `GET path?query`, or `None` when `path` is not its own.
    pub async fn route(&self, shard: &Rc<Shard>, path: &str, query: &str) -> Option<Vec<u8>> {
        route(shard, self.forms(), path, query).await
    }

    /// The console's answer to a POST (an action's form).
    pub async fn post(&self, shard: &Rc<Shard>, path: &str, request: &Request) -> Vec<u8> {
        actions::post(shard, self.write, &self.csrf, path, request).await
    }
}

async fn route(
    shard: &Rc<Shard>,
    forms: Option<&csrf::Csrf>,
    path: &str,
    query: &str,
) -> Option<Vec<u8>> {
    let asset = match path {
        "/console.js" => Some((JAVASCRIPT, include_str!("assets/console.js"))),
        "/console.css" => Some((CSS, include_str!("assets/console.css"))),
        _ => None,
    };
    if let Some((content_type, body)) = asset {
        return Some(http::response(200, content_type, body));
    }
    if let Some(browse) = records::Browse::from_path(path, query) {
        let (status, html) = browse.render(shard).await;
        return Some(http::response(status, HTML, &html));
    }
    if let Some((name, json)) = groups::from_path(path) {
        let description = shard.describe_group(&name).await;
        let snapshots = match gather(shard).await {
            Ok(snapshots) => snapshots,
            Err(unavailable) => return Some(unavailable),
        };
        let group = groups::GroupView::new(&name, &description, &snapshots);
        return Some(match (json, group) {
            (true, Some(group)) => http::response(200, JSON, &group.json()),
            (false, Some(group)) => http::response(200, HTML, &group.page(forms)),
            (_, None) => http::response(404, HTML, &groups::no_such_group(&name)),
        });
    }
    let page = Page::parse(path, query)?;
    let snapshots = match gather(shard).await {
        Ok(snapshots) => snapshots,
        Err(unavailable) => return Some(unavailable),
    };
    Some(page.render(shard, forms, &snapshots))
}

/// Every shard's snapshot, or the 503 naming those that did not answer.
async fn gather(shard: &Rc<Shard>) -> Result<Vec<ShardMetrics>, Vec<u8>> {
    shard
        .gather_metrics(super::SHARD_ANSWER_TIMEOUT)
        .await
        .map_err(|missing| http::response(503, super::TEXT, &super::describe(&missing)))
}

/// A console path, parsed.
#[derive(Debug, PartialEq, Eq)]
enum Page {
    Overview,
    OverviewJson,
    Topics { page: usize },
    Topic { name: String },
    Groups,
}

impl Page {
    fn parse(path: &str, query: &str) -> Option<Page> {
        Some(match path {
            "/" => Page::Overview,
            "/api/overview" => Page::OverviewJson,
            "/topics" => Page::Topics { page: query_number(query, "page").unwrap_or(1).max(1) },
            "/groups" => Page::Groups,
            _ => Page::Topic { name: path.strip_prefix("/topics/")?.to_string() },
        })
    }

    fn render(
        &self,
        shard: &Shard,
        forms: Option<&csrf::Csrf>,
        snapshots: &[ShardMetrics],
    ) -> Vec<u8> {
        match self {
            Page::Overview => http::response(200, HTML, &pages::overview(snapshots)),
            Page::OverviewJson => http::response(200, JSON, &pages::overview_json(snapshots)),
            Page::Topics { page } => {
                let html = pages::topics(&shard.table(), snapshots, *page, forms);
                http::response(200, HTML, &html)
            }
            Page::Groups => http::response(200, HTML, &groups::list(snapshots)),
            Page::Topic { name } => match shard.table().topics.get(name) {
                Some(topic) => http::response(200, HTML, &pages::topic(topic, snapshots, forms)),
                None => http::response(404, HTML, &pages::no_such_topic(name)),
            },
        }
    }
}

/// `key=N` from a query string, if present and a number.
fn query_number(query: &str, key: &str) -> Option<usize> {
    records::query_value(query, key)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn console_paths_parse_and_others_are_left_to_the_endpoint() {
        assert_eq!(Page::parse("/", ""), Some(Page::Overview));
        assert_eq!(Page::parse("/topics", "page=3"), Some(Page::Topics { page: 3 }));
        assert_eq!(Page::parse("/topics", "page=0"), Some(Page::Topics { page: 1 }));
        assert_eq!(Page::parse("/topics", "page=x&y=2"), Some(Page::Topics { page: 1 }));
        assert_eq!(Page::parse("/topics/a.b-c", ""), Some(Page::Topic { name: "a.b-c".into() }));
        assert_eq!(Page::parse("/groups", ""), Some(Page::Groups));
        assert_eq!(Page::parse("/metrics", ""), None);
        assert_eq!(Page::parse("/health", ""), None);
    }
}
