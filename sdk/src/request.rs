//! An app's request to its session's cell: method, path, query parameters, extra headers, a
//! body with its content type and an optional idempotency key of the caller's own.
//!
//! Building a [`Request`] never fails; [`Client::send`](crate::Client::send) checks it first
//! and refuses, before anything is sent, with [`Error::InvalidInput`]:
//!
//! | refused                                              | why                                    |
//! |------------------------------------------------------|----------------------------------------|
//! | a path not starting with `/`, starting with `//`, longer than [`MAX_PATH_BYTES`], not visible ASCII | only a path on the session's cell is sent |
//! | a path with `?` or `#`                               | the query is [`Request::query`]; a fragment is never sent |
//! | a path with a `.` or `..` segment, or a `\`           | the URL parser would resolve it to another path than asked |
//! | an empty query name; a target longer than [`MAX_TARGET_BYTES`] | |
//! | a header the SDK sets (`Authorization`, `Cookie`, `Host`, `Idempotency-Key`, `Content-Type`, `Content-Length`, `User-Agent`), any `X-Cellbind-*` | the session, the key and the edge's identity headers are the SDK's and the edge's alone |
//! | a hop-by-hop header (`Connection`, `Keep-Alive`, `Proxy-*`, `TE`, `Trailer`, `Transfer-Encoding`, `Upgrade`, `Expect`) | they are about one connection, not the request |
//! | a header name or value HTTP does not allow, more than [`MAX_EXTRA_HEADERS`] headers, a value longer than [`MAX_HEADER_VALUE_BYTES`] | |
//! | an idempotency key outside 1–[`MAX_IDEMPOTENCY_KEY_BYTES`] characters of `A–Z a–z 0–9 - _ . : ~` | |
//!
//! Query names and values are percent-encoded here (everything but `A–Z a–z 0–9 - _ . ~`), so
//! pass them unencoded.

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method};

use crate::Error;

/// Longest request path accepted, in bytes.
pub const MAX_PATH_BYTES: usize = 2048;
/// Longest path plus encoded query, in bytes.
pub const MAX_TARGET_BYTES: usize = 8192;
/// Most extra headers on one request.
pub const MAX_EXTRA_HEADERS: usize = 32;
/// Longest extra header value, in bytes.
pub const MAX_HEADER_VALUE_BYTES: usize = 4096;
/// Longest caller idempotency key, in characters.
pub const MAX_IDEMPOTENCY_KEY_BYTES: usize = 128;
/// Content type of a body given without one ([`Request::json`]).
pub const JSON: &str = "application/json";

/// Headers the SDK sets itself or that only make sense per connection (lower case).
const RESERVED_HEADERS: [&str; 17] = [
    "authorization",
    "cookie",
    "host",
    "idempotency-key",
    "content-type",
    "content-length",
    "user-agent",
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "proxy-authenticate",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "expect",
];

/// A request to the session's cell. See the module doc for what is refused.
///
/// ```
/// use cellbind_sdk::Request;
/// let r = Request::post("/api/jobs/j-1/complete")
///     .query("source", "driveway app")
///     .header("X-Request-Id", "r-17")
///     .json(br#"{"note":"done"}"#.to_vec())
///     .idempotency_key("job-j-1-complete");
/// assert_eq!(r.path(), "/api/jobs/j-1/complete");
/// ```
#[derive(Clone)]
pub struct Request {
    pub(crate) method: Method,
    pub(crate) path: String,
    pub(crate) query: Vec<(String, String)>,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Option<(Bytes, String)>,
    pub(crate) idempotency_key: Option<String>,
}

/// Never prints query values, header values, the body or the key: any of them may be secret.
impl std::fmt::Debug for Request {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Request")
            .field("method", &self.method)
            .field("path", &self.path)
            .field(
                "query_names",
                &self.query.iter().map(|q| &q.0).collect::<Vec<_>>(),
            )
            .field(
                "header_names",
                &self.headers.iter().map(|h| &h.0).collect::<Vec<_>>(),
            )
            .field("body_bytes", &self.body.as_ref().map(|b| b.0.len()))
            .field("idempotency_key", &self.idempotency_key.is_some())
            .finish()
    }
}

impl Request {
    pub fn new(method: Method, path: impl Into<String>) -> Self {
        Self {
            method,
            path: path.into(),
            query: vec![],
            headers: vec![],
            body: None,
            idempotency_key: None,
        }
    }
    pub fn get(path: impl Into<String>) -> Self {
        Self::new(Method::GET, path)
    }
    pub fn post(path: impl Into<String>) -> Self {
        Self::new(Method::POST, path)
    }
    pub fn put(path: impl Into<String>) -> Self {
        Self::new(Method::PUT, path)
    }
    pub fn delete(path: impl Into<String>) -> Self {
        Self::new(Method::DELETE, path)
    }

    /// Adds a query parameter (unencoded; encoded when sent). Order is kept; a name may repeat.
    pub fn query(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.query.push((name.into(), value.into()));
        self
    }
    /// Adds a header (sent as given, in addition to the SDK's own).
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }
    /// A JSON body (`Content-Type: application/json`).
    pub fn json(self, body: impl Into<Bytes>) -> Self {
        self.body(body, JSON)
    }
    /// A body with its content type.
    pub fn body(mut self, body: impl Into<Bytes>, content_type: impl Into<String>) -> Self {
        self.body = Some((body.into(), content_type.into()));
        self
    }
    /// The caller's own idempotency key, sent as it is on every attempt (also on a read).
    /// Without one, the SDK gives every write (a method that is not GET, HEAD, OPTIONS or
    /// TRACE) a random key for this one call. Give your own to retry a write safely after a
    /// [`Error::Network`] whose `reached_cell` is true, or across restarts.
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }

    pub fn method(&self) -> &Method {
        &self.method
    }
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Checks everything the module doc lists and puts the request in the form the transport
    /// sends.
    pub(crate) fn prepare(self) -> Result<Prepared, Error> {
        check_path(&self.path)?;
        let mut target = self.path.clone();
        for (i, (name, value)) in self.query.iter().enumerate() {
            if name.is_empty() {
                return Err(Error::InvalidInput("a query parameter has no name".into()));
            }
            target.push(if i == 0 { '?' } else { '&' });
            percent_encode(name, &mut target);
            target.push('=');
            percent_encode(value, &mut target);
        }
        if target.len() > MAX_TARGET_BYTES {
            return Err(Error::InvalidInput(format!(
                "path and query are longer than {MAX_TARGET_BYTES} bytes"
            )));
        }
        if self.headers.len() > MAX_EXTRA_HEADERS {
            return Err(Error::InvalidInput(format!(
                "more than {MAX_EXTRA_HEADERS} extra headers"
            )));
        }
        let headers = self
            .headers
            .iter()
            .map(|(n, v)| extra_header(n, v))
            .collect::<Result<Vec<_>, _>>()?;
        let body = match self.body {
            None => None,
            Some((bytes, content_type)) => Some(Body {
                bytes,
                content_type: HeaderValue::from_str(&content_type)
                    .ok()
                    .filter(|v| !v.is_empty())
                    .ok_or_else(|| {
                        Error::InvalidInput("the content type is not a valid header value".into())
                    })?,
            }),
        };
        let idempotency_key = match self.idempotency_key {
            Some(k) => Some(check_idempotency_key(k)?),
            None => None,
        };
        Ok(Prepared {
            method: self.method,
            path: self.path,
            target,
            headers,
            body,
            idempotency_key,
        })
    }
}

/// A request body and its content type.
#[derive(Debug, Clone)]
pub(crate) struct Body {
    pub bytes: Bytes,
    pub content_type: HeaderValue,
}

impl Body {
    pub fn json(bytes: impl Into<Bytes>) -> Self {
        Self {
            bytes: bytes.into(),
            content_type: HeaderValue::from_static(JSON),
        }
    }
}

/// A checked [`Request`].
#[derive(Debug)]
pub(crate) struct Prepared {
    pub method: Method,
    /// The path alone (what an observer is told).
    pub path: String,
    /// Path and encoded query.
    pub target: String,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    pub body: Option<Body>,
    pub idempotency_key: Option<String>,
}

/// The path rules of the module doc.
fn check_path(path: &str) -> Result<(), Error> {
    let shape = path.starts_with('/')
        && !path.starts_with("//")
        && path.len() <= MAX_PATH_BYTES
        && path.bytes().all(|b| b.is_ascii_graphic());
    if !shape {
        return Err(Error::InvalidInput(
            "path must be an absolute path on the session's cell (\"/api/...\")".into(),
        ));
    }
    if path.contains(['?', '#']) {
        return Err(Error::InvalidInput(
            "path must not carry a query or fragment: give query parameters separately".into(),
        ));
    }
    let dot_segment = path.split('/').any(|s| s == "." || s == "..");
    if dot_segment || path.contains('\\') {
        return Err(Error::InvalidInput(
            "path must be canonical (no `.` or `..` segment, no backslash)".into(),
        ));
    }
    Ok(())
}

fn extra_header(name: &str, value: &str) -> Result<(HeaderName, HeaderValue), Error> {
    let n = HeaderName::from_bytes(name.as_bytes())
        .map_err(|_| Error::InvalidInput(format!("{name:?} is not a header name")))?;
    if RESERVED_HEADERS.contains(&n.as_str()) || protocol::http::is_cellbind_header(n.as_str()) {
        return Err(Error::InvalidInput(format!(
            "header {name} is set by the SDK or the connection, not by the app"
        )));
    }
    if value.len() > MAX_HEADER_VALUE_BYTES {
        return Err(Error::InvalidInput(format!(
            "header {name} is longer than {MAX_HEADER_VALUE_BYTES} bytes"
        )));
    }
    // `from_str` accepts visible ASCII, spaces and tabs only.
    let v = HeaderValue::from_str(value).map_err(|_| {
        Error::InvalidInput(format!("header {name} has a value HTTP does not allow"))
    })?;
    Ok((n, v))
}

fn check_idempotency_key(key: String) -> Result<String, Error> {
    let ok = !key.is_empty()
        && key.len() <= MAX_IDEMPOTENCY_KEY_BYTES
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':' | b'~'));
    if ok {
        Ok(key)
    } else {
        Err(Error::InvalidInput(format!(
            "an idempotency key is 1 to {MAX_IDEMPOTENCY_KEY_BYTES} characters of A-Z a-z 0-9 - _ . : ~"
        )))
    }
}

/// RFC 3986 percent-encoding of everything but the unreserved characters.
fn percent_encode(s: &str, out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0x0f)]));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(r: Request) -> String {
        match r.prepare() {
            Err(Error::InvalidInput(m)) => m,
            other => panic!("not refused: {other:?}"),
        }
    }

    #[test]
    fn query_names_and_values_are_percent_encoded_in_order() {
        let p = Request::get("/api/search")
            .query("q", "a b&c=d/é")
            .query("q", "")
            .query("x~y", "1.2_3-4")
            .prepare()
            .unwrap();
        assert_eq!(
            p.target,
            "/api/search?q=a%20b%26c%3Dd%2F%C3%A9&q=&x~y=1.2_3-4"
        );
        assert_eq!(p.path, "/api/search");
        assert_eq!(Request::get("/a").prepare().unwrap().target, "/a");
    }

    #[test]
    fn paths_that_are_not_canonical_or_carry_a_query_are_refused() {
        for bad in [
            "api/x",
            "//evil.example/x",
            "/api/x?y=1",
            "/api/x#frag",
            "/api/../v1/sessions",
            "/api/./x",
            "/api/..",
            "/api\\x",
            "/api/x y",
            "/api/é",
            "",
        ] {
            let m = refused(Request::get(bad));
            assert!(m.contains("path"), "{bad}: {m}");
        }
        assert!(refused(Request::get(format!("/{}", "a".repeat(MAX_PATH_BYTES)))).contains("path"));
        for good in ["/", "/api/x.y/..z/...", "/api/jobs/a%20b/complete"] {
            Request::get(good).prepare().unwrap();
        }
        let long = Request::get("/a").query("q", "x".repeat(MAX_TARGET_BYTES));
        assert!(refused(long).contains("longer than"));
        assert!(refused(Request::get("/a").query("", "v")).contains("no name"));
    }

    #[test]
    fn the_sdks_own_and_hop_by_hop_headers_are_refused() {
        for name in [
            "Authorization",
            "cookie",
            "Host",
            "Idempotency-Key",
            "Content-Type",
            "content-length",
            "User-Agent",
            "X-Cellbind-Subject",
            "x-cellbind-anything",
            "Connection",
            "Keep-Alive",
            "Transfer-Encoding",
            "TE",
            "Trailer",
            "Upgrade",
            "Proxy-Authorization",
            "Expect",
        ] {
            let m = refused(Request::get("/a").header(name, "v"));
            assert!(m.contains("set by the SDK"), "{name}: {m}");
        }
        assert!(refused(Request::get("/a").header("bad name", "v")).contains("not a header name"));
        assert!(refused(Request::get("/a").header("X-A", "line\nbreak")).contains("not allow"));
        assert!(
            refused(Request::get("/a").header("X-A", "x".repeat(MAX_HEADER_VALUE_BYTES + 1)))
                .contains("longer than")
        );
        let many = (0..=MAX_EXTRA_HEADERS)
            .fold(Request::get("/a"), |r, i| r.header(format!("x-h{i}"), "v"));
        assert!(refused(many).contains("more than"));
        let p = Request::get("/a")
            .header("X-Request-Id", "r-1")
            .header("Accept", "application/json")
            .prepare()
            .unwrap();
        assert_eq!(p.headers.len(), 2);
        assert_eq!(p.headers[0].0.as_str(), "x-request-id");
        assert_eq!(p.headers[0].1, "r-1");
    }

    #[test]
    fn caller_idempotency_keys_are_checked() {
        let longest = "a".repeat(MAX_IDEMPOTENCY_KEY_BYTES);
        for good in ["k", "job-1:complete.v2_~", longest.as_str()] {
            let p = Request::post("/a").idempotency_key(good).prepare().unwrap();
            assert_eq!(p.idempotency_key.as_deref(), Some(good));
        }
        for bad in [
            String::new(),
            "a".repeat(MAX_IDEMPOTENCY_KEY_BYTES + 1),
            "with space".into(),
            "slash/".into(),
            "é".into(),
        ] {
            assert!(
                refused(Request::post("/a").idempotency_key(bad.clone()))
                    .contains("idempotency key"),
                "{bad}"
            );
        }
    }

    #[test]
    fn bodies_carry_their_content_type_and_debug_shows_no_values() {
        let p = Request::put("/a")
            .body(b"x=1".to_vec(), "application/x-www-form-urlencoded")
            .prepare()
            .unwrap();
        let b = p.body.unwrap();
        assert_eq!(b.content_type, "application/x-www-form-urlencoded");
        assert_eq!(&b.bytes[..], b"x=1");
        assert_eq!(
            Request::post("/a")
                .json(b"{}".to_vec())
                .prepare()
                .unwrap()
                .body
                .unwrap()
                .content_type,
            JSON
        );
        assert!(refused(Request::post("/a").body(b"x".to_vec(), "")).contains("content type"));
        let shown = format!(
            "{:?}",
            Request::get("/a")
                .query("token", "q-secret")
                .header("X-Api-Key", "h-secret")
                .json(b"b-secret".to_vec())
                .idempotency_key("k-secret")
        );
        for s in ["q-secret", "h-secret", "b-secret", "k-secret"] {
            assert!(!shown.contains(s), "{shown}");
        }
    }
}
