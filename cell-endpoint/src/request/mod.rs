//! The request path: the one kind of layer ([`guard`]), the browser rules, session
//! validation, forwarding, the desk, and the request counter.

pub mod browser;
pub mod counted;
pub mod desk;
pub mod forward;
pub mod guard;
pub mod validate;
