//! The auth-service's integration tests, one binary (link time): each module is one area,
//! `common` holds the fixtures.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

mod api;
mod bad_input;
mod dpop;
mod drain;
mod hostile_client;
mod lockout;
mod process;
mod restore;
mod revocations;
mod transfer;
