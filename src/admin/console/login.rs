//! The login page (`GET /login`, `POST /login`) and logout (`POST /logout`), served when
//! the broker's authorizer is on (`session.rs` makes and checks the sessions). A login
//! POST, like every console POST, must come from the endpoint's own pages (its Origin or
//! Referer); a logout also carries its session's CSRF token.

use std::rc::Rc;

use shardlog_shards::Shard;

use super::csrf::{check_origin, Csrf};
use super::html::{escape, page};
use super::records::{percent_encode, query_value};
use super::session::{now_secs, Sessions};
use super::{http, Request, HTML};

/// The CSRF action name of the logout form.
const LOGOUT: &str = "logout";

/// Whether the console asks for a login: when the broker checks ACLs.
pub fn required(shard: &Shard) -> bool {
    shard.config.authorizer.enabled
}

/// Where a request without a session goes: the login page (back to `path?query` after),
/// or 401 for the JSON the pages' scripts poll.
pub fn needed(path: &str, query: &str) -> Vec<u8> {
    if path.starts_with("/api/") {
        let body = "{\"error\":\"log in first: /login\"}";
        return http::response(401, "application/json", body);
    }
    let back = if query.is_empty() { path.to_string() } else { format!("{path}?{query}") };
    let location = format!("/login?next={}", percent_encode(&back));
    let body = page("Log in", "<p>This console needs a login: <a href=\"/login\">log in</a>.</p>");
    http::response_with_headers(303, HTML, &[("Location", &location)], &body)
}

/// `GET /login`: the form, or who is logged in and the logout form.
pub fn get(
    shard: &Shard,
    sessions: &Sessions,
    csrf: &Csrf,
    request: &Request,
    query: &str,
) -> Vec<u8> {
    if !required(shard) {
        return no_login();
    }
    if let Ok(session) = sessions.of_request(&request.head, now_secs()) {
        let body = format!(
            "<p id=\"who\">Logged in as <b>{}</b>.</p>\n<form method=\"post\" action=\"/logout\" \
             id=\"logout\"><input type=\"hidden\" name=\"csrf\" value=\"{}\"> \
             <button type=\"submit\">Log out</button></form>\n",
            escape(&session.principal()),
            csrf.token(&session.nonce, LOGOUT),
        );
        return http::response(200, HTML, &page("Logged in", &body));
    }
    let next = query_value(query, "next").unwrap_or_default();
    http::response(200, HTML, &form(&next, None))
}

/// `POST /login`: a session cookie and back to the page asked for, or the form again.
pub async fn post(shard: &Rc<Shard>, sessions: &Sessions, request: &Request) -> Vec<u8> {
    if !required(shard) {
        return no_login();
    }
    if let Err(why) = check_origin(&request.head, request.local_addr) {
        return refused(403, &format!("This login was not sent from the console: {why}."));
    }
    let body = std::str::from_utf8(&request.body).unwrap_or_default();
    let field = |name| query_value(body, name).unwrap_or_default();
    let (user, password, next) = (field("user"), field("password"), field("next"));
    let peer = request.peer_addr.map(|a| a.ip());
    match sessions.log_in(shard, &user, &password, peer).await {
        Ok(session) => {
            let headers =
                [("Location", safe_next(&next)), ("Set-Cookie", &sessions.set_cookie(&session))];
            let body = page("Logged in", "<p>Logged in.</p>");
            http::response_with_headers(303, HTML, &headers, &body)
        }
        Err(()) => {
            let why = "Wrong user name or password (or no such user).";
            http::response(401, HTML, &form(&next, Some(why)))
        }
    }
}

/// `POST /logout`: the session ends here and in the browser.
pub fn post_logout(sessions: &Sessions, csrf: &Csrf, request: &Request) -> Vec<u8> {
    if let Err(why) = check_origin(&request.head, request.local_addr) {
        return refused(403, &format!("This logout was not sent from the console: {why}."));
    }
    let now = now_secs();
    let Ok(session) = sessions.of_request(&request.head, now) else {
        return refused(401, "There is no session to end.");
    };
    let body = std::str::from_utf8(&request.body).unwrap_or_default();
    let token = query_value(body, "csrf").unwrap_or_default();
    if !csrf.is_valid(&session.nonce, LOGOUT, &token) {
        return refused(403, "The logout form's CSRF token is missing or wrong.");
    }
    sessions.log_out(&session, now);
    let body = page("Logged out", "<p id=\"done\">Logged out. <a href=\"/login\">log in</a></p>");
    http::response_with_headers(200, HTML, &[("Set-Cookie", &sessions.clear_cookie())], &body)
}

/// Only a path of this endpoint (`/x`, not `//host` or a URL): no open redirect, no header
/// injection.
fn safe_next(next: &str) -> &str {
    let local = next.starts_with('/') && !next.starts_with("//") && !next.contains('\\');
    match local && next.bytes().all(|b| b.is_ascii_graphic()) {
        true => next,
        false => "/",
    }
}

fn form(next: &str, error: Option<&str>) -> String {
    let error = error
        .map_or_else(String::new, |e| format!("<p class=\"bad\" id=\"error\">{}</p>\n", escape(e)));
    let body = format!(
        "{error}<p>The broker checks ACLs: log in as one of its SASL users (SCRAM \
         credentials; the same password a Kafka client uses).</p>\n\
         <form method=\"post\" action=\"/login\" id=\"login\">\
         <input type=\"hidden\" name=\"next\" value=\"{}\">\
         <label>user <input name=\"user\" autocomplete=\"username\" required></label> \
         <label>password <input name=\"password\" type=\"password\" \
         autocomplete=\"current-password\" required></label> \
         <button type=\"submit\">Log in</button></form>\n",
        escape(next)
    );
    page("Log in", &body)
}

fn no_login() -> Vec<u8> {
    let body = "<p id=\"no-login\">This console has no login: the broker's authorizer is off, \
                so the console checks no ACLs (docs/console.md).</p>";
    http::response(404, HTML, &page("No login", body))
}

fn refused(status: u16, why: &str) -> Vec<u8> {
    super::actions::refusal(status, "Refused", why)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn after_a_login_only_a_path_of_this_endpoint_is_followed() {
        assert_eq!(safe_next("/topics?page=2"), "/topics?page=2");
        assert_eq!(safe_next("//evil.example/"), "/");
        assert_eq!(safe_next("https://evil.example/"), "/");
        assert_eq!(safe_next("/\\evil.example"), "/");
        assert_eq!(safe_next("/x\r\nSet-Cookie: a=b"), "/");
        assert_eq!(safe_next(""), "/");
    }
}
