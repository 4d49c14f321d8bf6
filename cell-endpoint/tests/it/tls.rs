//! The edge over a real TLS socket: HTTP/1.1 and HTTP/2, header limits, certificate reload
//! without dropping open connections, graceful shutdown.

use std::time::Duration;

use crate::common::*;
use crate::support::*;
use axum::http::{StatusCode, Version};
use cellbind_cell_endpoint::testing::tls;

fn https(ca: &std::path::Path, h1: bool) -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let certs = reqwest::Certificate::from_pem_bundle(&std::fs::read(ca).unwrap()).unwrap();
    let b = reqwest::Client::builder()
        .tls_certs_only(certs)
        .timeout(Duration::from_secs(10));
    let b = if h1 { b.http1_only() } else { b };
    b.build().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_edge_speaks_h1_and_h2_reloads_its_certificate_and_drains_on_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let pki = make_pki(dir.path(), "first");
    let (edge, seen, _clock) = edge();
    let config = tls::load(&pki.cert, &pki.key).await.unwrap();
    let watcher = tokio::spawn(tls::watch(
        config.clone(),
        pki.cert.clone(),
        pki.key.clone(),
        Duration::from_millis(50),
    ));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let url = format!("https://{}", listener.local_addr().unwrap());
    let handle = axum_server::Handle::new();
    let server = tokio::spawn(tls::serve_listener(
        listener,
        config,
        handle.clone(),
        edge.connection_gate(),
        cellbind_cell_endpoint::app(edge.clone()),
    ));

    let token = session();
    let h2 = https(&pki.ca, false);
    let r = h2
        .get(format!("{url}/api/routes/today"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.version(), Version::HTTP_2);
    let h1 = https(&pki.ca, true);
    let r = h1
        .get(format!("{url}/api/routes/today"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.version(), Version::HTTP_11);
    // The client IP is the socket peer: the per-IP limiter and X-Cellbind-Client-Ip see it.
    assert_eq!(seen.count(), 2);

    // Oversized headers are refused by the HTTP layer, before any handler.
    let huge = "a".repeat(128 * 1024);
    let r = h1
        .get(format!("{url}/api/routes/today"))
        .header("x-padding", &huge)
        .send()
        .await;
    assert!(r.map_or(true, |r| r.status() != StatusCode::OK));

    // Replace the certificate (a new CA): new handshakes get the new one…
    let next = make_pki(dir.path(), "second");
    std::fs::copy(&next.key, &pki.key).unwrap();
    std::fs::copy(&next.cert, &pki.cert).unwrap();
    let fresh = https(&next.ca, false);
    wait_for(
        "the new certificate to be served",
        Duration::from_secs(30),
        || {
            let fresh = fresh.clone();
            let url = url.clone();
            async move {
                let r = fresh.get(format!("{url}/healthz")).send().await.ok()?;
                (r.status() == StatusCode::OK).then_some(())
            }
        },
    )
    .await;
    // …while the connection opened before the reload still works (the old client trusts only
    // the old CA, so a new handshake would fail).
    let r = h2
        .get(format!("{url}/api/routes/today"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);

    handle.graceful_shutdown(Some(Duration::from_secs(5)));
    drop((h1, h2, fresh));
    tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .expect("server did not stop")
        .unwrap()
        .unwrap();
    watcher.abort();
}

/// Handshakes with the edge over a fresh TCP connection using `client`; whether the session
/// was resumed.
async fn handshake(
    addr: std::net::SocketAddr,
    client: &std::sync::Arc<rustls::ClientConfig>,
) -> rustls::HandshakeKind {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let mut tls = tokio_rustls::TlsConnector::from(client.clone())
        .connect(name, tcp)
        .await
        .unwrap();
    // A request and its answer: TLS 1.3 tickets arrive after the handshake.
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    tls.write_all(b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    let _ = tls.read_to_end(&mut answer).await;
    assert!(
        answer.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    tls.get_ref().1.handshake_kind().unwrap()
}

/// A client configuration trusting `ca`, with its own session store.
fn resuming_client(ca: &std::path::Path) -> std::sync::Arc<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject as _;
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls::pki_types::CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    std::sync::Arc::new(
        rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_reconnects_resumes_its_tls_session_whatever_came_between() {
    let dir = tempfile::tempdir().unwrap();
    let pki = make_pki(dir.path(), "resume");
    let (edge, _seen, _clock) = edge();
    let config = tls::load(&pki.cert, &pki.key).await.unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    let handle = axum_server::Handle::new();
    tokio::spawn(tls::serve_listener(
        listener,
        config,
        handle.clone(),
        edge.connection_gate(),
        cellbind_cell_endpoint::app(edge.clone()),
    ));
    let phone = resuming_client(&pki.ca);
    assert_eq!(handshake(addr, &phone).await, rustls::HandshakeKind::Full);
    // Many other clients connect meanwhile (more than a small server-side session cache
    // holds): the phone's session is a ticket it carries, so it still resumes.
    for _ in 0..300 {
        handshake(addr, &resuming_client(&pki.ca)).await;
    }
    assert_eq!(
        handshake(addr, &phone).await,
        rustls::HandshakeKind::Resumed
    );
    handle.shutdown();
}

/// The public port served by two threads, both ways of sharing it (`io_listener`): every
/// connection of a burst is served, and a second edge on the taken port fails its start at
/// once instead of joining the port.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_ways_of_sharing_the_port_serve_every_connection_and_refuse_a_second_edge() {
    for sharing in [
        cellbind_cell_endpoint::config::IoListener::Shared,
        cellbind_cell_endpoint::config::IoListener::PerThread,
    ] {
        let dir = tempfile::tempdir().unwrap();
        let pki = make_pki(dir.path(), "sharing");
        let (edge, _seen, _clock) = edge();
        let config = tls::load(&pki.cert, &pki.key).await.unwrap();
        let listen: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let handle = axum_server::Handle::new();
        let server = tokio::spawn(tls::serve_per_core(
            listen,
            2,
            sharing,
            config.clone(),
            handle.clone(),
            edge.connection_gate(),
            cellbind_cell_endpoint::app(edge.clone()),
        ));
        let url = format!("https://{listen}");
        let probe = https(&pki.ca, true);
        wait_for("the edge to serve", Duration::from_secs(30), || {
            let (probe, url) = (probe.clone(), url.clone());
            async move {
                let r = probe.get(format!("{url}/healthz")).send().await.ok()?;
                (r.status() == StatusCode::OK).then_some(())
            }
        })
        .await;

        let token = session();
        // Eight clients at once, each on its own connection.
        let burst = (0..8).map(|_| {
            let (client, url, token) = (https(&pki.ca, true), url.clone(), token.clone());
            async move {
                client
                    .get(format!("{url}/api/routes/today"))
                    .bearer_auth(&token)
                    .send()
                    .await
                    .map(|r| r.status())
            }
        });
        for status in futures::future::join_all(burst).await {
            assert_eq!(status.unwrap(), StatusCode::OK, "{sharing:?}");
        }

        let second = tokio::time::timeout(
            Duration::from_secs(10),
            tls::serve_per_core(
                listen,
                2,
                sharing,
                config,
                axum_server::Handle::new(),
                edge.connection_gate(),
                cellbind_cell_endpoint::app(edge.clone()),
            ),
        )
        .await
        .expect("a second edge on a taken port fails its start at once");
        assert!(
            second.is_err(),
            "{sharing:?}: a second edge joined the port"
        );

        handle.graceful_shutdown(Some(Duration::from_secs(5)));
        drop(probe);
        tokio::time::timeout(Duration::from_secs(10), server)
            .await
            .expect("the edge did not stop")
            .unwrap()
            .unwrap();
    }
}
