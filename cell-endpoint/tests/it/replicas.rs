//! The auth-service as several replicas: an upstream target holds every replica's base and
//! fails over between them, over real TLS sockets (a closed port, a replica that accepts and
//! dies mid-request); and the configuration of replica lists.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::common::*;
use crate::support::*;
use axum::Router;
use axum::http::StatusCode;
use axum::routing::any;
use cellbind_cell_endpoint::config::Config;
use cellbind_cell_endpoint::config::UpstreamHttp;
use cellbind_cell_endpoint::testing::upstream::{
    SendError, Target, Upstreams, base_url, https_client,
};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::AsyncReadExt as _;

fn url_of(addr: SocketAddr) -> reqwest::Url {
    let e = protocol::Endpoint::parse(&format!("https://{addr}")).unwrap();
    base_url("test", &e).unwrap()
}

/// A port nothing listens on (a listener bound and dropped).
fn closed_port() -> reqwest::Url {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    drop(l);
    url_of(addr)
}

/// A replica that answers every request `200`, counting them.
async fn live(
    pki: &Pki,
) -> (
    reqwest::Url,
    Arc<AtomicUsize>,
    axum_server::Handle<SocketAddr>,
) {
    let count = Arc::new(AtomicUsize::new(0));
    let c = count.clone();
    let app = Router::new().fallback(any(move || {
        let c = c.clone();
        async move {
            c.fetch_add(1, Ordering::SeqCst);
            (StatusCode::OK, "{\"ok\":true}")
        }
    }));
    let tls = cellbind_cell_endpoint::testing::tls::load(&pki.cert, &pki.key)
        .await
        .unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    let handle = axum_server::Handle::new();
    let server = axum_server::from_tcp_rustls(listener, tls)
        .unwrap()
        .handle(handle.clone());
    tokio::spawn(async move {
        let _ = server.serve(app.into_make_service()).await;
    });
    (url_of(addr), count, handle)
}

/// A replica that accepts a connection (counted), completes the TLS handshake, reads the
/// request head and closes without answering: killed mid-request.
async fn dying(pki: &Pki) -> (reqwest::Url, Arc<AtomicUsize>) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&pki.cert)
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let key = PrivateKeyDer::from_pem_file(&pki.key).unwrap();
    let config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let a = accepted.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            a.fetch_add(1, Ordering::SeqCst);
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match tls.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                drop(tls);
            });
        }
    });
    (url_of(addr), accepted)
}

fn request(method: &str, path: &str) -> http::Request<bytes::Bytes> {
    let body = if method == "POST" {
        bytes::Bytes::from_static(b"{}")
    } else {
        bytes::Bytes::new()
    };
    http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .body(body)
        .unwrap()
}

async fn status_of(t: &Target, method: &str) -> Result<StatusCode, SendError> {
    t.send(request(method, "/v1/x"), Duration::from_secs(5))
        .await
        .map(|r| r.status())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_refuses_connections_is_skipped_for_gets_and_posts() {
    let dir = tempfile::tempdir().unwrap();
    let pki = make_pki(dir.path(), "replicas");
    let (up, count, _h) = live(&pki).await;
    let client = https_client(&pki.ca, Duration::from_secs(2), UpstreamHttp::default()).unwrap();
    let target = Target::http(client, vec![closed_port(), up]).unwrap();
    assert_eq!(status_of(&target, "GET").await, Ok(StatusCode::OK));
    assert_eq!(status_of(&target, "POST").await, Ok(StatusCode::OK));
    assert_eq!(count.load(Ordering::SeqCst), 2);
    // Every replica refusing: the request never left.
    let down = Target::http(
        https_client(&pki.ca, Duration::from_secs(2), UpstreamHttp::default()).unwrap(),
        vec![closed_port(), closed_port()],
    )
    .unwrap();
    assert_eq!(status_of(&down, "POST").await, Err(SendError::Refused));
    assert_eq!(
        format!("{target:?}").matches("https://127.0.0.1:").count(),
        2
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_fails_over_from_a_replica_dying_mid_request_and_then_goes_straight_to_the_one_that_answered()
 {
    let dir = tempfile::tempdir().unwrap();
    let pki = make_pki(dir.path(), "replicas");
    let (dead, accepted) = dying(&pki).await;
    let (up, count, _h) = live(&pki).await;
    let client = https_client(&pki.ca, Duration::from_secs(2), UpstreamHttp::default()).unwrap();
    let target = Target::http(client, vec![dead, up]).unwrap();
    assert_eq!(status_of(&target, "GET").await, Ok(StatusCode::OK));
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
    assert_eq!(count.load(Ordering::SeqCst), 1);
    // The replica that answered is preferred from now on, by every method.
    assert_eq!(status_of(&target, "GET").await, Ok(StatusCode::OK));
    assert_eq!(status_of(&target, "POST").await, Ok(StatusCode::OK));
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        1,
        "went back to the dead one"
    );
    assert_eq!(count.load(Ordering::SeqCst), 3);
    // Clones share the preference.
    assert_eq!(status_of(&target.clone(), "GET").await, Ok(StatusCode::OK));
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_post_that_may_have_reached_a_dying_replica_is_never_sent_again() {
    let dir = tempfile::tempdir().unwrap();
    let pki = make_pki(dir.path(), "replicas");
    let (dead, accepted) = dying(&pki).await;
    let (up, count, _h) = live(&pki).await;
    let client = https_client(&pki.ca, Duration::from_secs(2), UpstreamHttp::default()).unwrap();
    let target = Target::http(client, vec![dead, up]).unwrap();
    assert_eq!(
        status_of(&target, "POST").await,
        Err(SendError::Unreachable)
    );
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
    assert_eq!(count.load(Ordering::SeqCst), 0, "the POST was sent again");

    // Through the edge: a sign-in that may have reached the dying replica is a 503.
    let (app, _seen) = recording_app();
    let mut ups = Upstreams::local(None, Some(app));
    ups.auth = target;
    let (shared, _fake) = clock();
    let edge = cellbind_cell_endpoint::Edge::new(settings(), shared, ups);
    edge.install(state());
    edge.mark_synced();
    let r = axum::http::Request::builder()
        .method("POST")
        .uri("/v1/sessions")
        .header("content-type", "application/json")
        .body(axum::body::Body::from("{}"))
        .unwrap();
    let (status, _, body) = send(&edge, r).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(code(&body), "UPSTREAM_UNAVAILABLE");
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
    assert_eq!(count.load(Ordering::SeqCst), 0, "the POST was sent again");
}

fn config_text(auth: &str, feed: &str, dir: &std::path::Path, ca: &std::path::Path) -> String {
    format!(
        r#"cell_id = "cell-03"
instance_id = "edge-1"
listen = "127.0.0.1:8443"
public_url = "https://127.0.0.3:8443"
auth_service_url = {auth}
feed_url = {feed}
app_url = "https://127.0.0.3:8445"
edge_token_file = "{d}/edge.token"
feed_token_file = "{d}/feed.token"
app_token_file = "{d}/app.token"
state_dir = "{d}/state"
tls_cert = "cert.pem"
tls_key = "key.pem"
ca_cert = "{ca}"
"#,
        d = dir.display(),
        ca = ca.display()
    )
}

#[tokio::test]
async fn replica_lists_are_configured_as_a_string_or_a_non_empty_list() {
    let dir = tempfile::tempdir().unwrap();
    let pki = make_pki(dir.path(), "replicas");
    for t in ["edge.token", "feed.token", "app.token"] {
        write_secret(&dir.path().join(t), "a-token-of-thirty-two-characters-x");
    }
    let path = dir.path().join("edge.toml");
    std::fs::write(
        &path,
        config_text(
            r#""https://127.0.0.3:8444/""#,
            r#"["https://127.0.0.3:8446", "https://127.0.1.3:8446/"]"#,
            dir.path(),
            &pki.ca,
        ),
    )
    .unwrap();
    let c = Config::load(&path).unwrap();
    assert_eq!(c.auth_service_url.urls().len(), 1);
    let feed: Vec<&str> = c.feed_url.urls().iter().map(|e| e.as_str()).collect();
    assert_eq!(feed, ["https://127.0.0.3:8446", "https://127.0.1.3:8446"]);
    let ups = Upstreams::from_config(&c).unwrap();
    assert_eq!(
        format!("{:?}", ups.feed),
        "Http(https://127.0.0.3:8446/, https://127.0.1.3:8446/)"
    );

    for (auth, feed, key) in [
        (r#""https://127.0.0.3:8444""#, "[]", "feed_url"),
        ("[]", r#""https://127.0.0.3:8446""#, "auth_service_url"),
    ] {
        std::fs::write(&path, config_text(auth, feed, dir.path(), &pki.ca)).unwrap();
        let e = Config::load(&path).unwrap_err().to_string();
        assert!(e.contains(key), "{e}");
    }
    std::fs::write(
        &path,
        config_text(
            r#"["https://127.0.0.3:8444", "not a url"]"#,
            r#""https://127.0.0.3:8446""#,
            dir.path(),
            &pki.ca,
        ),
    )
    .unwrap();
    let e = Config::load(&path).unwrap_err().to_string();
    assert!(e.contains("auth_service_url"), "{e}");
}
