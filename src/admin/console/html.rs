//! HTML by hand: one escape function every interpolated value goes through, and the page
//! frame. Topic and group names come from clients, so nothing is written unescaped.

use std::fmt::Write;

/// `text` safe in element content and in double-quoted attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A whole page: the frame, the navigation, `title` (escaped here) and `body` (already
/// HTML).
pub fn page(title: &str, body: &str) -> String {
    let mut out = String::with_capacity(body.len() + 1024);
    let _ = write!(
        out,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>{title} · shardlog</title>\
         <link rel=\"stylesheet\" href=\"/console.css\"></head>\n<body>\
         <nav><b>shardlog</b> <a href=\"/\">overview</a> <a href=\"/topics\">topics</a> \
         <a href=\"/groups\">groups</a> <a href=\"/metrics\">metrics</a> \
         <a href=\"/login\">login</a></nav>\n\
         <main><h1>{title}</h1>\n{body}</main></body></html>\n",
        title = escape(title),
    );
    out
}

/// One page of a list: the page shown (the asked one, clamped to 1..=pages), how many
/// pages, and how many items come before it.
pub fn page_of(total: usize, per_page: usize, asked: usize) -> (usize, usize, usize) {
    let pages = total.div_ceil(per_page).max(1);
    let shown = asked.clamp(1, pages);
    (shown, pages, (shown - 1) * per_page)
}

/// Links to the previous and next pages of the list at `path` (already escaped).
pub fn pager(path: &str, shown: usize, pages: usize) -> String {
    let mut out = String::new();
    if shown > 1 {
        let _ = write!(out, "<a href=\"{path}?page={}\">previous</a> ", shown - 1);
    }
    if shown < pages {
        let _ = write!(out, "<a href=\"{path}?page={}\">next</a>", shown + 1);
    }
    out
}

/// A table with a header row; `rows` hold cells that are already HTML.
pub fn table(id: &str, header: &[&str], rows: impl Iterator<Item = Vec<String>>) -> String {
    let mut out = format!("<table id=\"{}\"><thead><tr>", escape(id));
    for h in header {
        let _ = write!(out, "<th>{}</th>", escape(h));
    }
    out.push_str("</tr></thead><tbody>\n");
    for row in rows {
        out.push_str("<tr>");
        for cell in row {
            let _ = write!(out, "<td>{cell}</td>");
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody></table>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_in_names_is_escaped() {
        assert_eq!(
            escape(r#"<a href="x">'&'</a>"#),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
        assert!(page("<script>", "").contains("<title>&lt;script&gt; · shardlog</title>"));
        let rows = vec![vec!["1".to_string()]].into_iter();
        assert!(table("a\"b", &["<h>"], rows)
            .starts_with("<table id=\"a&quot;b\"><thead><tr><th>&lt;h&gt;</th>"));
    }
}
