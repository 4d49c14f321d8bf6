//! Property test of the control plane's configuration loader: arbitrary and mutated TOML
//! (dropped, duplicated and misspelt keys, values of every type and size, flipped bytes, a
//! broken `[[cells]]` table) loads or is refused with `CpError::Config`, never a panic.
//! `props_support` says how many cases run and what is printed.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

#[path = "../../protocol/tests/props_support/mod.rs"]
mod props_support;

use control_plane::CpError;
use control_plane::config::Config;
use props_support::{toml_input, toml_text};
use proptest::test_runner::TestCaseError;

/// A complete, valid configuration (the deployment example's keys).
const VALID_CONFIG: &str = r#"listen = "0.0.0.0:8440"
management_listen = "127.0.0.1:9103"
tls_cert = "tls/control-plane.pem"
tls_key = "tls/control-plane.key"
data_dir = "data"
map_key_file = "data/map-signing.key"
publish_dir = "data/publish"
admin_token_file = "secrets/control-plane.token"
publish_interval_ms = 30000
bucket_count = 1024
log_format = "json"
[[cells]]
id = "cell-01"
endpoint = "https://cell-01.example.com"
auth_service_url = "https://auth-a.cell-01.internal:8446"
tls_cert_file = "cells/cell-01.pem"
[[cells]]
id = "cell-02"
endpoint = "https://cell-02.example.com"
auth_service_url = "https://auth-a.cell-02.internal:8446"
tls_cert_file = "cells/cell-02.pem""#;

#[test]
fn prop_config_loading() {
    let dir = tempfile::tempdir_in(props_support::scratch_base()).unwrap();
    let path = dir.path().join("control-plane.toml");
    props_support::run("config_loading", toml_input(), |input| {
        let text = toml_text(VALID_CONFIG, &input);
        std::fs::write(&path, &text).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let loaded = Config::load(&path);
        props_support::check_config_verdict(VALID_CONFIG, &input, &loaded, |e| {
            matches!(e, CpError::Config(_))
        })?;
        Ok(())
    });
}
