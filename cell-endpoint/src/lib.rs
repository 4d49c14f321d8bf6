//! Cellbind cell-endpoint: the cell's public HTTPS edge.
//!
//! It decides alone, from state it holds (keys, revocations, ownership, placement map synced
//! from the cell's auth-service feed and kept on disk), whether a session is genuine,
//! unrevoked, for this cell and for the current placement generation, and forwards what it
//! serves to the cell's app. [`app`] builds the whole service so tests drive it in-process.
//!
//! Layout, from the ground up (no module imports one above it):
//! - parts with no knowledge of the request path: [`error`], [`subject_limit`], [`metrics`],
//!   [`config`], [`client_ip`], [`state`], [`origin`], [`target`], [`revocation_freshness`],
//!   [`revocation_compaction`], [`drain`], [`conn`], [`limits`], [`token_cache`],
//!   [`pool`], [`upstream`], [`tls`], and the generic [`guard`] layer;
//! - [`edge`]: [`Edge`], everything the request path shares, built from those parts;
//! - the request path on top of it: [`sync`] (the feed) and [`reapply`] (the revocation
//!   handback after a restore of the auth-service), [`validate`], [`forward`], [`browser`],
//!   [`desk`];
//! - the wiring: [`counted`] (the outermost layer, counting every request by outcome),
//!   [`service`] (routes and guards, composed once) and [`server`] (the binary's life).

pub mod config;
pub mod edge;
pub mod error;
pub mod feed;
pub mod held;
pub mod metrics;
pub mod net;
pub mod openapi;
pub mod request;
pub mod server;
pub mod service;
pub mod settings;

pub use config::Config;
pub use edge::Edge;
pub use error::{EdgeError, Refusal, answer, rescue};
pub use held::state::CellState;
pub use server::run;
pub use service::app;
pub use settings::Settings;
