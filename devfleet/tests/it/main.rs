//! The dev fleet's integration tests, one binary. (Real fleets are started by the end-to-end
//! tests of the `tests` crate, by the SDK's fleet test and by `cellctl`'s; here only the
//! PostgreSQL fleet with several auth-service replicas, in `replicas`, which needs the
//! workspace's binaries built.)
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod pieces;
mod postgres;
mod replicas;
