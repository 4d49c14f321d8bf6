//! Keeping the held state current: the feed long-poll ([`sync`]) and the revocation handback
//! after a restore of the auth-service ([`reapply`]).

pub mod reapply;
pub mod sync;
