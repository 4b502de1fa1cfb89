//! Just enough HTTP/1.1 for the admin endpoint: find the end of a request head, parse
//! its request line and headers, bound its body, and format a response. Plain functions
//! over bytes (no socket), so every refusal is table-tested.

/// Largest request head accepted; a longer one is refused (431) and the connection closed.
pub const MAX_HEAD_BYTES: usize = 8 << 10;
/// Largest request body accepted (the console's forms); a longer one is refused (413).
pub const MAX_BODY_BYTES: usize = 64 << 10;

/// What the admin endpoint was asked.
#[derive(Debug, PartialEq, Eq)]
pub struct RequestLine<'a> {
    pub method: &'a str,
    /// The path without its query string.
    pub path: &'a str,
    /// What follows the `?`, empty if nothing does.
    pub query: &'a str,
}

/// Why a request head was refused: HTTP status and a one-line reason.
#[derive(Debug, PartialEq, Eq)]
pub struct Refused {
    pub status: u16,
    pub reason: String,
}

/// Length of the head (through the blank line) if `buffer` holds a complete one.
pub fn head_len(buffer: &[u8]) -> Option<usize> {
    buffer.windows(4).position(|w| w == b"\r\n\r\n").map(|at| at + 4)
}

/// Parses the request line of a complete head: `METHOD SP TARGET SP HTTP/1.x`.
pub fn parse_request_line(head: &[u8]) -> Result<RequestLine<'_>, Refused> {
    let bad = |why: &str| Refused { status: 400, reason: why.to_string() };
    let line_end = head.windows(2).position(|w| w == b"\r\n").unwrap_or(head.len());
    let line =
        std::str::from_utf8(&head[..line_end]).map_err(|_| bad("the request line is not UTF-8"))?;
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(bad("the request line is not `METHOD TARGET HTTP/1.x`"));
    };
    if !matches!(version, "HTTP/1.0" | "HTTP/1.1") {
        return Err(bad("only HTTP/1.0 and HTTP/1.1 are served"));
    }
    if method.is_empty() || !method.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err(bad("the method is not an HTTP method"));
    }
    if !target.starts_with('/') {
        return Err(bad("the request target must be a path starting with /"));
    }
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    Ok(RequestLine { method, path, query })
}

/// The value of the first header named `name` (case-insensitive) in a complete head,
/// without surrounding whitespace; `None` if absent or not UTF-8.
pub fn header<'a>(head: &'a [u8], name: &str) -> Option<&'a str> {
    let lines = head.split(|b| *b == b'\n').skip(1); // past the request line
    lines.map(|line| line.strip_suffix(b"\r").unwrap_or(line)).find_map(|line| {
        let colon = line.iter().position(|b| *b == b':')?;
        let (key, value) = (&line[..colon], &line[colon + 1..]);
        if !key.eq_ignore_ascii_case(name.as_bytes()) {
            return None;
        }
        std::str::from_utf8(value).ok().map(str::trim)
    })
}

/// How many body bytes follow the head: its Content-Length (none: 0). A chunked body is
/// refused (411: the console's forms always send a length), a length over
/// `MAX_BODY_BYTES` gets 413.
pub fn body_len(head: &[u8]) -> Result<usize, Refused> {
    if header(head, "Transfer-Encoding").is_some() {
        let reason = "a body must come with Content-Length, not Transfer-Encoding".to_string();
        return Err(Refused { status: 411, reason });
    }
    let Some(length) = header(head, "Content-Length") else { return Ok(0) };
    let length: u64 = length.parse().map_err(|_| Refused {
        status: 400,
        reason: format!("Content-Length {length:?} is not a number"),
    })?;
    if length > MAX_BODY_BYTES as u64 {
        let reason = format!("the request body exceeds {MAX_BODY_BYTES} bytes");
        return Err(Refused { status: 413, reason });
    }
    Ok(length as usize)
}

/// The `host:port` of an absolute URL (an Origin or Referer value), lower-cased; `None`
/// for anything else (`null`, a relative URL).
pub fn url_authority(url: &str) -> Option<String> {
    let rest = url.strip_prefix("http://").or_else(|| url.strip_prefix("https://"))?;
    let authority = rest.split(['/', '?', '#']).next()?;
    (!authority.is_empty()).then(|| authority.to_ascii_lowercase())
}

/// A complete response with `Connection: close` (one request per connection).
pub fn response(status: u16, content_type: &str, body: &str) -> Vec<u8> {
    response_with_headers(status, content_type, &[], body)
}

/// `response` with more header lines (`(name, value)`).
pub fn response_with_headers(
    status: u16,
    content_type: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Vec<u8> {
    let extra: String =
        headers.iter().map(|(name, value)| format!("{name}: {value}\r\n")).collect();
    let head = format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         {extra}Connection: close\r\n\r\n",
        status_text(status),
        body.len()
    );
    let mut out = Vec::with_capacity(head.len() + body.len());
    out.extend_from_slice(head.as_bytes());
    out.extend_from_slice(body.as_bytes());
    out
}

fn status_text(status: u16) -> &'static str {
    match status {
        200 => "OK",
        303 => "See Other",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        403 => "Forbidden",
        405 => "Method Not Allowed",
        409 => "Conflict",
        411 => "Length Required",
        413 => "Content Too Large",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_ends_at_the_first_blank_line() {
        assert_eq!(head_len(b"GET / HTTP/1.1\r\nHost: x\r\n\r\nbody"), Some(27));
        assert_eq!(head_len(b"GET / HTTP/1.1\r\nHost: x\r\n"), None);
    }

    #[test]
    fn request_lines_are_parsed_or_refused_with_400() {
        let ok = |method, path| Ok(RequestLine { method, path, query: "" });
        let table: &[(&[u8], Result<RequestLine, u16>)] = &[
            (b"GET /metrics HTTP/1.1\r\n\r\n", ok("GET", "/metrics")),
            (
                b"GET /health?verbose=1 HTTP/1.0\r\n\r\n",
                Ok(RequestLine { method: "GET", path: "/health", query: "verbose=1" }),
            ),
            (b"POST /metrics HTTP/1.1\r\n\r\n", ok("POST", "/metrics")),
            (b"GET /metrics\r\n\r\n", Err(400)),
            (b"GET /metrics HTTP/2\r\n\r\n", Err(400)),
            (b"GET  /metrics HTTP/1.1\r\n\r\n", Err(400)),
            (b"get /metrics HTTP/1.1\r\n\r\n", Err(400)),
            (b"GET metrics HTTP/1.1\r\n\r\n", Err(400)),
            (b"\xff\xfe garbage\r\n\r\n", Err(400)),
            (b"\r\n\r\n", Err(400)),
        ];
        for (head, expected) in table {
            let parsed = parse_request_line(head).map_err(|r| r.status);
            assert_eq!(&parsed, expected, "{:?}", String::from_utf8_lossy(head));
        }
    }

    #[test]
    fn headers_are_found_by_name_in_any_case_and_trimmed() {
        let head = b"GET / HTTP/1.1\r\nHost: x\r\nauthorization:  Bearer abc \r\nX: \xff\r\n\r\n";
        assert_eq!(header(head, "Authorization"), Some("Bearer abc"));
        assert_eq!(header(head, "host"), Some("x"));
        assert_eq!(header(head, "X"), None, "not UTF-8");
        assert_eq!(header(head, "Cookie"), None);
        // The request line is not a header, even if it holds a colon.
        assert_eq!(header(b"GET /a:b HTTP/1.1\r\n\r\n", "GET /a"), None);
    }

    #[test]
    fn headers_are_found_by_name_in_any_case_and_bodies_are_bounded() {
        let head =
            b"POST /x HTTP/1.1\r\nHost: a\r\ncontent-length: 12\r\nOrigin:  http://a \r\n\r\n";
        assert_eq!(header(head, "Content-Length"), Some("12"));
        assert_eq!(header(head, "origin"), Some("http://a"));
        assert_eq!(header(head, "Referer"), None);
        assert_eq!(header(b"POST /x HTTP/1.1\r\n\r\n", "Host"), None);
        assert_eq!(body_len(head), Ok(12));
        assert_eq!(body_len(b"GET / HTTP/1.1\r\n\r\n"), Ok(0));
        let with = |h: &str| format!("POST / HTTP/1.1\r\n{h}\r\n\r\n").into_bytes();
        let status = |h: &str| body_len(&with(h)).map_err(|r| r.status);
        assert_eq!(status(&format!("Content-Length: {MAX_BODY_BYTES}")), Ok(MAX_BODY_BYTES));
        assert_eq!(status(&format!("Content-Length: {}", MAX_BODY_BYTES + 1)), Err(413));
        assert_eq!(status("Content-Length: 99999999999999999999999"), Err(400));
        assert_eq!(status("Content-Length: -1"), Err(400));
        assert_eq!(status("Transfer-Encoding: chunked"), Err(411));
    }

    #[test]
    fn the_authority_of_an_origin_or_referer_is_its_host_and_port() {
        assert_eq!(url_authority("http://127.0.0.1:9644").as_deref(), Some("127.0.0.1:9644"));
        assert_eq!(url_authority("http://LocalHost:1/topics?x#y").as_deref(), Some("localhost:1"));
        assert_eq!(url_authority("https://[::1]:9/").as_deref(), Some("[::1]:9"));
        assert_eq!(url_authority("null"), None);
        assert_eq!(url_authority("/topics"), None);
        assert_eq!(url_authority("http://"), None);
    }

    #[test]
    fn responses_carry_length_and_close() {
        let text = String::from_utf8(response(404, "text/plain", "no\n")).unwrap();
        assert!(text.starts_with("HTTP/1.1 404 Not Found\r\n"));
        assert!(text.contains("Content-Length: 3\r\n"));
        assert!(text.ends_with("Connection: close\r\n\r\nno\n"));
    }
}
