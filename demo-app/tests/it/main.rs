//! The demo app's integration tests, one binary (one link).
//!
//! - `api`: the HTTP behaviour of both listeners, through the routers.
//! - `access_log`: one access-log line per request, no query, no token.
//! - `tls`: the server code over TLS on both listeners, and the modes of its files.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod access_log;
mod api;
mod tls;
