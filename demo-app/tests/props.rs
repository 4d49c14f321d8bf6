//! Property test of the demo app's configuration loader: arbitrary and mutated TOML (dropped,
//! duplicated and misspelt keys, values of every type and size, flipped bytes) loads or is
//! refused with `AppError::Config`, never a panic. `props_support` says how many cases run and
//! what is printed.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

#[path = "../../protocol/tests/props_support/mod.rs"]
mod props_support;

use cellbind_demo_app::{AppError, Config};
use props_support::{toml_input, toml_text};
use proptest::test_runner::TestCaseError;

/// A complete, valid configuration (the deployment example's keys).
const VALID_CONFIG: &str = r#"cell_id = "cell-01"
listen = "0.0.0.0:8447"
internal_listen = "0.0.0.0:8448"
management_listen = "127.0.0.1:9104"
tls_cert = "tls/demo-app.pem"
tls_key = "tls/demo-app.key"
data_dir = "data"
app_token_file = "secrets/app.token"
internal_token_file = "secrets/app-internal.token"
log_format = "json""#;

#[test]
fn prop_config_loading() {
    let dir = tempfile::tempdir_in(props_support::scratch_base()).unwrap();
    let path = dir.path().join("demo-app.toml");
    props_support::run("config_loading", toml_input(), |input| {
        let text = toml_text(VALID_CONFIG, &input);
        std::fs::write(&path, &text).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let loaded = Config::load(&path);
        props_support::check_config_verdict(VALID_CONFIG, &input, &loaded, |e| {
            matches!(e, AppError::Config(_))
        })?;
        Ok(())
    });
}
