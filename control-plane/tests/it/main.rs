//! The control plane's integration tests, one binary: the signed map (versions, overrides,
//! signature), the admin API, the service over TLS, and the store's files.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod server;
mod store;
