//! The cell's signing keys: the key-encryption key and key generation ([`kek`]), the ring of
//! published keys in memory ([`ring`]) and the one state machine every key follows
//! ([`lifecycle`]):
//!
//! ```text
//!             promote               retire                  expire
//!   next ───────────────▶ current ───────────▶ retired ─────────────────▶ expired
//!    │  (rotation, or the   │ (rotation)          │ (retired_at + session
//!    │   current revoked)   │                     │  lifetime + leeway)
//!    │ revoke               │ revoke              │ revoke
//!    ▼                      ▼                     ▼
//!  revoked ◀────────────────┴─────────────────────┘
//! ```
//!
//! Keys are born `next` (or `current` when there is no `next` to promote, on the very first
//! start). Published (in the JWKS and the feed): next, current, retired. Revoked and expired
//! keys leave the set and lose their sealed seed. The ring always has one current and one
//! next key after any change: rotating, revoking the current key (its successor is promoted)
//! or revoking the next key (a new one is made) all end there.

pub(crate) mod kek;
pub(crate) mod lifecycle;
pub(crate) mod ring;
