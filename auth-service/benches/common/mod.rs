//! What the auth-service's benches share: a configuration in a scratch folder, with the
//! sign-in throttles out of the way and the cell's feed secret taken as a feed credential (the
//! benches long-poll the feed as a made-up instance).

use std::path::Path;

/// Writes the bench token files into `dir` and answers a configuration over it (SQLite unless
/// `store` says otherwise), with throttles that never bite.
pub fn bench_config(dir: &Path, store: &str) -> cellbind_auth_service::Config {
    let d = dir.display();
    std::fs::write(dir.join("admin"), "bench-admin-token").unwrap();
    std::fs::write(dir.join("feed"), "bench-feed-token").unwrap();
    std::fs::write(dir.join("edge"), "bench-edge-token").unwrap();
    cellbind_auth_service::Config::from_toml(&format!(
        r#"
cell_id = "cell-01"
listen = "127.0.0.1:0"
internal_listen = "127.0.0.1:0"
issuer = "https://127.0.0.1:8443"
data_dir = "{d}/data"
kek_file = "{d}/kek"
admin_token_file = "{d}/admin"
feed_token_file = "{d}/feed"
accept_shared_feed_token = true
edge_token_file = "{d}/edge"
tls_cert = "{d}/unused.pem"
tls_key = "{d}/unused.key"
signin_account_ip_burst = 1000000
signin_account_ip_per_minute = 1000000
signin_account_burst = 1000000
signin_account_per_hour = 1000000
signin_ip_burst = 1000000
signin_ip_per_minute = 1000000
{store}
"#
    ))
    .unwrap()
}
