//! The binary as a process: it serves `/healthz` over TLS with no auth-service reachable, its
//! management listener serves health, readiness and metrics (the public one no metrics), and
//! with `CELLBIND_EXIT_ON_STDIN_EOF=1` it exits as soon as its stdin reaches EOF.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_exits_when_its_stdin_closes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let pki = make_pki(dir, "edge");
    write_secret(&dir.join("feed.token"), "feed-token");
    write_secret(&dir.join("app.token"), "app-token");
    write_secret(&dir.join("edge.token"), "edge-token");
    let port = free_port();
    let management = free_port();
    let unused = free_port();
    let config = dir.join("edge.toml");
    std::fs::write(
        &config,
        format!(
            r#"cell_id = "cell-03"
instance_id = "edge-1"
listen = "127.0.0.1:{port}"
management_listen = "127.0.0.1:{management}"
public_url = "https://127.0.0.1:{port}"
auth_service_url = "https://127.0.0.1:{unused}"
feed_url = "https://127.0.0.1:{unused}"
app_url = "https://127.0.0.1:{unused}"
feed_token_file = "{d}/feed.token"
app_token_file = "{d}/app.token"
edge_token_file = "{d}/edge.token"
state_dir = "{d}/state"
tls_cert = "{cert}"
tls_key = "{key}"
ca_cert = "{ca}"
"#,
            d = dir.display(),
            cert = pki.cert.display(),
            key = pki.key.display(),
            ca = pki.ca.display(),
        ),
    )
    .unwrap();
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_cellbind-cell-endpoint"));
    let mut edge = Proc::spawn("edge", &bin, &config, dir, &[]);
    let http = client(&pki.ca);
    let url = format!("https://127.0.0.1:{port}");
    wait_for(
        "the edge to answer /healthz",
        Duration::from_secs(30),
        || {
            let http = http.clone();
            let url = url.clone();
            async move {
                let r = http.get(format!("{url}/healthz")).send().await.ok()?;
                r.status().is_success().then_some(())
            }
        },
    )
    .await;
    // No auth-service and no disk state: not ready, and /api answers 503, never 401.
    let r = http.get(format!("{url}/readyz")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 503);
    let r = http
        .get(format!("{url}/api/routes/today"))
        .bearer_auth("a.b.c")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 503);

    // The management listener answers the same readiness and serves the metrics; the public
    // listener does not serve them.
    let m = format!("https://127.0.0.1:{management}");
    let r = http.get(format!("{m}/healthz")).send().await.unwrap();
    assert_eq!(
        (r.status().as_u16(), r.text().await.unwrap().as_str()),
        (200, "ok")
    );
    let r = http.get(format!("{m}/readyz")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 503);
    assert!(r.text().await.unwrap().contains("NOT_READY"));
    let r = http.get(format!("{m}/metrics")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let text = r.text().await.unwrap();
    assert!(
        text.contains(
            r#"cellbind_edge_requests_total{cell="cell-03",outcome="refused",code="NOT_READY",synthetic="false"} 1"#
        ),
        "{text}"
    );
    let r = http.get(format!("{url}/metrics")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 404);
    let r = http
        .get(format!("{m}/api/routes/today"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 404);

    drop(edge.child.stdin.take());
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = edge.child.try_wait().unwrap() {
            assert!(status.success(), "exit status {status}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the edge did not exit on stdin EOF"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
