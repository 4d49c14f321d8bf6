//! The dev fleet's integration tests, one binary. (Real fleets are started by the end-to-end
//! tests of the `tests` crate, by the SDK's fleet test and by `cellctl`'s.)
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod pieces;
