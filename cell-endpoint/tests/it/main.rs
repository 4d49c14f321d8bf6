//! The cell-endpoint's integration tests, one binary (link time): each module was a test
//! binary of its own. `common` builds in-process edges (keys, sessions, state, fake
//! upstreams); `support` builds certificates, configs and real processes.
//!
//! - `attacks`: the token attacks of `docs/THREAT-MODEL.md` and the Wycheproof JWS vectors, in process.
//! - `edge`: forwarding, ownership and generation decisions, revocation, readiness, the write
//!   lease, rate limits, the feed, persistence, rotation and the unknown-kid flood.
//! - `browser`: CORS, the CSRF proof and cookie, the desk.
//! - `dpop`: device-bound sessions: proofs, nonces per instance, replays, binding modes, the
//!   session routes' thumbprint, one signature check per connection and key.
//! - `hostile`: ATTACKS A23–A27 and A29 in process and over real sockets.
//! - `drain`: the edge's part of the migration drain.
//! - `epochs`: a restored auth-service (a new feed epoch), rollbacks within an epoch.
//! - `replicas`: failover between the auth-service's replicas over real sockets; replica lists.
//! - `revocation_freshness`: the fail-closed revocation bound.
//! - `tls`: a real TLS socket (h1, h2, certificate reload, graceful shutdown).
//! - `process`, `static_stability`: the binaries as processes (build them first:
//!   `cargo build --workspace --bins`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod common;
mod support;

mod attacks;
mod browser;
mod dpop;
mod drain;
mod edge;
mod epochs;
mod hostile;
mod process;
mod replicas;
mod revocation_freshness;
mod static_stability;
mod tls;
mod upstream;
