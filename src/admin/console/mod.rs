//! The web console on the admin endpoint: server-rendered pages over the same per-shard
//! snapshots `/metrics` gathers (every shard asked over the mesh, once per page, for the
//! parts the page shows: `MetricsScope`), and one
//! small embedded script that polls `/api/overview` and `/api/groups/NAME` for the live
//! charts. Read-only unless `--console-write`: then its forms POST to `/actions/...`
//! (`actions.rs`), each behind a confirmation and a CSRF check (`csrf.rs`).
//!
//! Pages: `/` (shards and their disk use, the latency budget, live produce→ack and
//! fdatasync charts), `/topics` (paginated, with live rates from `/api/topics`),
//! `/topics/NAME` (partitions, paginated: owner shards, log start, high watermark, log
//! end, size; configs), `/topics/NAME/P`
//! (the message browser, `records.rs`: it reads records as a consumer would), `/groups`
//! (state, members, lag), `/groups/NAME` (`groups.rs`: members, assignments, offsets, lag
//! over time).
//!
//! With `authorizer = true` it needs a login (`login.rs`, `session.rs`: a SASL user's
//! password, a signed session cookie), and every page and action asks the authorizer what
//! the logged-in user may see and do (`access.rs`), as the Kafka APIs for the same data do.

mod access;
mod actions;
mod csrf;
mod groups;
mod html;
mod login;
mod pages;
mod records;
mod session;

use std::collections::BTreeSet;
use std::rc::Rc;

use shardlog_shards::acl::AclOperation;
use shardlog_shards::metadata::TopicMeta;
use shardlog_shards::metrics::{MetricsScope, ShardMetrics};
use shardlog_shards::Shard;

use access::Viewer;
use csrf::Forms;

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
    sessions: session::Sessions,
}

impl Console {
    /// `secure`: the endpoint speaks HTTPS (session cookies are then `Secure`).
    pub fn new(settings: ConsoleSettings, secure: bool) -> Console {
        Console {
            write: settings.write,
            csrf: csrf::Csrf::new(),
            sessions: session::Sessions::new(secure),
        }
    }

    /// What the viewer's forms are signed for, when forms are shown (`--console-write`).
    fn forms<'a>(&'a self, viewer: &'a Viewer) -> Option<Forms<'a>> {
        self.write.then_some(Forms { csrf: &self.csrf, session: viewer.session_id() })
    }

    /// Who sent `request`: with a login required, the user of its valid session (`Err`
    /// without one); otherwise nobody in particular.
    fn viewer(&self, shard: &Rc<Shard>, request: &Request) -> Result<Viewer, session::Refusal> {
        let host = request.peer_addr.map(|a| a.ip());
        if !login::required(shard) {
            return Ok(Viewer::new(shard, None, host));
        }
        let session = self.sessions.of_request(&request.head, session::now_secs())?;
        // A user deleted since the login has no session any more (session.rs, invariant 1).
        if !shard.table().users.users.contains_key(&session.user) {
            return Err(session::Refusal::UnknownUser);
        }
        Ok(Viewer::new(shard, Some(session), host))
    }

    /// The console's answer to `GET path?query`, or `None` when `path` is not its own.
    pub async fn route(
        &self,
        shard: &Rc<Shard>,
        path: &str,
        query: &str,
        request: &Request,
    ) -> Option<Vec<u8>> {
        let asset = match path {
            "/console.js" => Some((JAVASCRIPT, include_str!("assets/console.js"))),
            "/console.css" => Some((CSS, include_str!("assets/console.css"))),
            _ => None,
        };
        if let Some((content_type, body)) = asset {
            return Some(http::response(200, content_type, body));
        }
        if path == "/login" {
            return Some(login::get(shard, &self.sessions, &self.csrf, request, query));
        }
        match self.viewer(shard, request) {
            Ok(viewer) => route(shard, &viewer, self.forms(&viewer), path, query).await,
            Err(_) => Some(login::needed(path, query)),
        }
    }

    /// The console's answer to a POST (a login, a logout, an action's form).
    pub async fn post(&self, shard: &Rc<Shard>, path: &str, request: &Request) -> Vec<u8> {
        match path {
            "/login" => return login::post(shard, &self.sessions, request).await,
            "/logout" => return login::post_logout(&self.sessions, &self.csrf, request),
            _ => {}
        }
        let Ok(viewer) = self.viewer(shard, request) else {
            let why = "This console needs a login: log in at /login, then send the form again.";
            return actions::refusal(401, "Log in first", why);
        };
        actions::post(shard, &viewer, self.write, &self.csrf, path, request).await
    }
}

async fn route(
    shard: &Rc<Shard>,
    viewer: &Viewer,
    forms: Option<Forms<'_>>,
    path: &str,
    query: &str,
) -> Option<Vec<u8>> {
    if let Some(browse) = records::Browse::from_path(path, query) {
        // Fetch's rule.
        if let Err(denied) = viewer.topic(AclOperation::Read, &browse.topic) {
            return Some(denied.response());
        }
        let (status, html) = browse.render(shard).await;
        return Some(http::response(status, HTML, &html));
    }
    if let Some((name, json)) = groups::from_path(path) {
        // DescribeGroups' rule; offsets only of the topics OffsetFetch would show.
        if let Err(denied) = viewer.group(AclOperation::Describe, &name) {
            return Some(denied.response());
        }
        let description = shard.describe_group(&name).await;
        let visible = |topic: &str| viewer.may_topic(AclOperation::Describe, topic);
        let mut group = groups::GroupView::new(&name, &description, &visible);
        if let Some(group) = group.as_mut() {
            match gather(shard, MetricsScope::topics(group.topics())).await {
                Ok(snapshots) => group.set_high_watermarks(&snapshots),
                Err(unavailable) => return Some(unavailable),
            }
        }
        return Some(match (json, group) {
            (true, Some(group)) => http::response(200, JSON, &group.json()),
            (false, Some(group)) => {
                let page_number = query_number(query, "page").unwrap_or(1);
                http::response(200, HTML, &group.page(forms, page_number))
            }
            (_, None) => http::response(404, HTML, &groups::no_such_group(&name)),
        });
    }
    let page = Page::parse(path, query)?;
    Some(page.render(shard, viewer, forms).await.unwrap_or_else(|unavailable| unavailable))
}

/// Every shard's snapshot of `scope`, or the 503 naming those that did not answer.
async fn gather(shard: &Rc<Shard>, scope: MetricsScope) -> Result<Vec<ShardMetrics>, Vec<u8>> {
    shard
        .gather_metrics(scope, super::SHARD_ANSWER_TIMEOUT)
        .await
        .map_err(|missing| http::response(503, super::TEXT, &super::describe(&missing)))
}

/// A console path, parsed.
#[derive(Debug, PartialEq, Eq)]
enum Page {
    Overview,
    OverviewJson,
    Topics { page: usize },
    TopicsJson { page: usize },
    Topic { name: String, page: usize },
    Groups,
}

impl Page {
    fn parse(path: &str, query: &str) -> Option<Page> {
        Some(match path {
            "/" => Page::Overview,
            "/api/overview" => Page::OverviewJson,
            "/topics" => Page::Topics { page: query_number(query, "page").unwrap_or(1).max(1) },
            "/api/topics" => {
                Page::TopicsJson { page: query_number(query, "page").unwrap_or(1).max(1) }
            }
            "/groups" => Page::Groups,
            _ => Page::Topic {
                name: path.strip_prefix("/topics/")?.to_string(),
                page: query_number(query, "page").unwrap_or(1).max(1),
            },
        })
    }

    /// Each page as the Kafka API for its data checks it: topics listed as Metadata lists
    /// them (DESCRIBE on each), a topic page needs DESCRIBE (its configs DESCRIBE_CONFIGS),
    /// groups listed as ListGroups lists them, their lag only from topics the viewer may
    /// DESCRIBE. The overview holds no topic or group names. Each page asks the shards for
    /// the figures it shows only (`MetricsScope`): a snapshot of every partition holds each
    /// shard for a time linear in its partitions. `Err`: the 503 of shards that did not
    /// answer.
    async fn render(
        &self,
        shard: &Rc<Shard>,
        viewer: &Viewer,
        forms: Option<Forms<'_>>,
    ) -> Result<Vec<u8>, Vec<u8>> {
        let describe_topic = |topic: &str| viewer.may_topic(AclOperation::Describe, topic);
        Ok(match self {
            Page::Overview | Page::OverviewJson => {
                let snapshots = gather(shard, MetricsScope::shards()).await?;
                match self {
                    Page::Overview => http::response(200, HTML, &pages::overview(&snapshots)),
                    _ => http::response(200, JSON, &pages::overview_json(&snapshots)),
                }
            }
            Page::Topics { page } | Page::TopicsJson { page } => {
                let table = shard.table();
                let topics = table.topics.values().map(|t| &**t);
                let visible: Vec<&TopicMeta> = topics.filter(|t| describe_topic(&t.name)).collect();
                let shown = pages::topic_names_on_page(&visible, *page);
                let snapshots = gather(shard, MetricsScope::topics(shown)).await?;
                match self {
                    Page::Topics { .. } => {
                        let html = pages::topics(&visible, &snapshots, *page, forms);
                        http::response(200, HTML, &html)
                    }
                    _ => {
                        http::response(200, JSON, &pages::topics_json(&visible, &snapshots, *page))
                    }
                }
            }
            Page::Groups => {
                let groups = MetricsScope { topics: Some(Vec::new()), groups: true };
                let coordinators = gather(shard, groups).await?;
                let committed = coordinators.iter().flat_map(|s| &s.committed);
                let topics: BTreeSet<&str> = committed.map(|c| c.topic.as_str()).collect();
                let visible = topics.into_iter().filter(|t| describe_topic(t));
                let scope = MetricsScope::topics(visible.map(str::to_string).collect());
                let owners = gather(shard, scope).await?;
                let may_list = |g: &str| viewer.may_list_group(g);
                let html = groups::list(&coordinators, &owners, &may_list, &describe_topic);
                http::response(200, HTML, &html)
            }
            Page::Topic { name, page } => {
                // Checked before the name is looked up: a refusal does not tell whether
                // the topic exists (as Metadata answers TOPIC_AUTHORIZATION_FAILED).
                if let Err(denied) = viewer.topic(AclOperation::Describe, name) {
                    return Ok(denied.response());
                }
                let configs = viewer.may_topic(AclOperation::DescribeConfigs, name);
                let Some(topic) = shard.table().topics.get(name).cloned() else {
                    return Ok(http::response(404, HTML, &pages::no_such_topic(name)));
                };
                let snapshots = gather(shard, MetricsScope::topics(vec![name.clone()])).await?;
                let html = pages::topic(&topic, &snapshots, *page, configs, forms);
                http::response(200, HTML, &html)
            }
        })
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
        let topic = |page| Some(Page::Topic { name: "a.b-c".into(), page });
        assert_eq!(Page::parse("/topics/a.b-c", ""), topic(1));
        assert_eq!(Page::parse("/topics/a.b-c", "page=4"), topic(4));
        assert_eq!(Page::parse("/api/topics", "page=2"), Some(Page::TopicsJson { page: 2 }));
        assert_eq!(Page::parse("/groups", ""), Some(Page::Groups));
        assert_eq!(Page::parse("/metrics", ""), None);
        assert_eq!(Page::parse("/health", ""), None);
    }
}
