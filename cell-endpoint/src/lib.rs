//! Cellbind cell-endpoint: the cell's public HTTPS edge.
//!
//! It decides alone, from state it holds (keys, revocations, ownership, placement map synced
//! from the cell's auth-service feed and kept on disk), whether a session is genuine,
//! unrevoked, for this cell and for the current placement generation, and forwards what it
//! serves to the cell's app.
//!
//! Floors, from the ground up: a file imports files of its own floor or of a lower one, never
//! of a higher one (checked by the workspace's layering test, `tests/tests/e2e/layering.rs`):
//!
//! ```text
//!   server.rs, openapi.rs   the binary's life (`run`); the edge's part of the API document
//!   service.rs              `app`: the routes and guards, composed once, each with its why
//!   request/                the request path: the one kind of layer (guard), the browser
//!                           rules, session validation, forwarding, the desk, the counter
//!   feed/                   keeping the held state current: the feed, the revocation handback
//!   edge.rs                 `Edge`: everything the request path shares; the state transitions
//!   settings.rs             what the request path reads (the configuration, parsed)
//!   net/                    client address, connection admission, canonical targets, the
//!                           upstream pool and client, TLS serving, rate limits
//!   held/                   the cell state and its disk copy, the verified-token cache, a
//!                           subject's limiter, the revocation rules, writes in flight, origins
//!   config.rs               every configuration key, once: name, type, default, doc
//!   error.rs                start-up and feed failures; request refusals and their one table
//!   metrics.rs              what the edge counts
//! ```
//!
//! The front door (everything else is private to the crate):
//! - [`Config`] ([`config`] holds its keys' defaults) and [`run`]: the binary.
//! - [`Settings`], [`Edge`] and [`app`]: the whole service, to drive in-process with
//!   `tower::ServiceExt::oneshot`.
//! - [`openapi`]: the edge's part of the public API document (`scripts/gen-openapi`).
//! - `testing`, hidden from the documentation: what the edge's own tests and benchmarks
//!   reach into. Not an API: it follows the code.

#![warn(unreachable_pub)]

pub mod config;
mod edge;
mod error;
mod feed;
mod held;
mod metrics;
mod net;
pub mod openapi;
mod request;
mod server;
mod service;
mod settings;

pub use config::Config;
pub use edge::Edge;
pub use error::EdgeError;
pub use request::validate::ProofContext;
pub use server::run;
pub use service::app;
pub use settings::Settings;

/// What the edge's own tests (`tests/`) and benchmarks (`benches/`) reach into beyond the
/// front door. Not an API: it follows the code.
#[doc(hidden)]
pub mod testing {
    pub use crate::edge::{Applied, Restored};
    pub use crate::error::{Refusal, rescue};
    pub use crate::held::drain::InFlight;
    pub use crate::held::state::CellState;
    pub use crate::held::subject_limit::SubjectLimiter;
    pub use crate::held::token_cache::{CACHED_SESSION_BYTES, SLOT_BYTES, TokenCache, Validated};
    pub use crate::metrics::{Metrics, Outcome, StatusClass, Upstream};
    pub use crate::net::client_ip::TrustedProxies;
    pub use crate::net::conn::ConnectionGate;
    pub use crate::net::limits::Limits;
    pub use crate::request::browser::{Verdict, decide, uses_session_cookie};
    pub use crate::request::validate::{AfterRefetch, Refused, Validation};
    pub use crate::service::Management;

    /// The held state's disk copy.
    pub mod state {
        pub use crate::held::state::{STATE_SCHEMA, load, persist, state_path};
    }

    /// The feed.
    pub mod sync {
        pub use crate::feed::sync::{fetch, fetch_once};
    }

    /// TLS serving.
    pub mod tls {
        pub use crate::net::tls::{MAX_HEADERS, load, serve_listener, serve_per_core, watch};
    }

    /// The upstreams.
    pub mod upstream {
        pub use crate::net::upstream::{SendError, Target, base_url, https_client};
        pub use crate::net::upstreams::{LOCAL_EDGE_TOKEN, Upstreams};
    }
}
