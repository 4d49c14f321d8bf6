//! The request path: the one kind of layer ([`guard`]), the browser rules, session
//! validation, forwarding, the desk, and the request counter.

pub(crate) mod browser;
pub(crate) mod counted;
pub(crate) mod desk;
pub(crate) mod forward;
pub(crate) mod guard;
pub(crate) mod validate;
