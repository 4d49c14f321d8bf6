//! Keeping the held state current: the feed long-poll ([`sync`]) and the revocation handback
//! after a restore of the auth-service ([`reapply`]).

pub(crate) mod reapply;
pub(crate) mod sync;
