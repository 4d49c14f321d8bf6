//! What the edge holds, with no knowledge of requests or sockets: the cell state and its disk
//! copy, the verified-token cache and a subject's rate limiter, the revocation rules (the
//! fail-closed freshness bound, dropping dead revocations), writes in flight per contractor
//! (the migration drain), and web origins.

pub mod drain;
pub mod origin;
pub mod revocation_compaction;
pub mod revocation_freshness;
pub mod state;
pub mod subject_limit;
pub mod token_cache;
