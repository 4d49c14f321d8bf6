//! The edge's network parts: the client address, connection admission, canonical request
//! targets, the upstream connections and client, TLS serving, and the rate limiters.

pub(crate) mod client_ip;
pub(crate) mod conn;
pub(crate) mod limits;
pub(crate) mod pool;
pub(crate) mod target;
pub(crate) mod tls;
pub(crate) mod upstream;
pub(crate) mod upstreams;
