//! The edge's network parts: the client address, connection admission, canonical request
//! targets, the upstream connections and client, TLS serving, and the rate limiters.

pub mod client_ip;
pub mod conn;
pub mod limits;
pub mod pool;
pub mod target;
pub mod tls;
pub mod upstream;
