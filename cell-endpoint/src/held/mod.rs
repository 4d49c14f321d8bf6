//! What the edge holds, with no knowledge of requests or sockets: the cell state and its disk
//! copy, the verified-token cache and a subject's rate limiter, the revocation rules (the
//! fail-closed freshness bound, dropping dead revocations), writes in flight per contractor
//! (the migration drain), and web origins.

pub(crate) mod drain;
pub(crate) mod origin;
pub(crate) mod revocation_compaction;
pub(crate) mod revocation_freshness;
pub(crate) mod state;
pub(crate) mod subject_limit;
pub(crate) mod token_cache;
