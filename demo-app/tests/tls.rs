//! One real-socket test: the binary's server code over TLS, trusting only a test CA.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::time::{Duration, Instant};

use cellbind_demo_app::Config;

#[tokio::test]
async fn serves_over_tls_to_a_client_trusting_only_the_ca() {
    cellbind_demo_app::server::install_crypto_provider();
    let dir = tempfile::tempdir().unwrap();
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let leaf_key = rcgen::KeyPair::generate().unwrap();
    let leaf = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&leaf_key, &issuer)
        .unwrap();
    let p = |n: &str| dir.path().join(n);
    std::fs::write(p("cert.pem"), leaf.pem()).unwrap();
    std::fs::write(p("key.pem"), leaf_key.serialize_pem()).unwrap();
    std::fs::write(p("app-token"), "edge\n").unwrap();
    std::fs::write(p("admin-token"), "admin\n").unwrap();
    // Find a free port.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let cfg = Config {
        cell_id: protocol::CellId::new("cell-01").unwrap(),
        listen: format!("127.0.0.1:{port}").parse().unwrap(),
        tls_cert: p("cert.pem"),
        tls_key: p("key.pem"),
        data_dir: p("data"),
        app_token_file: p("app-token"),
        admin_token_file: p("admin-token"),
    };
    let server = tokio::spawn(cellbind_demo_app::server::run(cfg));

    let certs = reqwest::Certificate::from_pem_bundle(ca_cert.pem().as_bytes()).unwrap();
    assert!(!certs.is_empty());
    let client = reqwest::Client::builder()
        .tls_certs_only(certs)
        .build()
        .unwrap();
    let url = format!("https://127.0.0.1:{port}/healthz");
    let deadline = Instant::now() + Duration::from_secs(10);
    let resp = loop {
        match client.get(&url).send().await {
            Ok(r) => break r,
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                tokio::task::yield_now().await;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("never came up: {e}"),
        }
    };
    assert_eq!(resp.status(), 200);
    let v: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(v["cell_id"], "cell-01");

    // A client that does not trust the test CA is refused.
    let stranger = reqwest::Client::builder()
        .tls_certs_only(
            reqwest::Certificate::from_pem_bundle(
                rcgen::generate_simple_self_signed(vec!["127.0.0.1".into()])
                    .unwrap()
                    .cert
                    .pem()
                    .as_bytes(),
            )
            .unwrap(),
        )
        .build()
        .unwrap();
    assert!(stranger.get(&url).send().await.is_err());
    server.abort();
}
