//! The control plane's service: the signed map (versions, overrides, signature), the admin API.

use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use control_plane::config::{CellConfig, Config};
use control_plane::publish::MAP_FILE;
use control_plane::store::{Placement, Store};
use http_body_util::BodyExt as _;
use protocol::jwks::PublicKey;
use protocol::map::{SignedMap, SpkiPin};
use protocol::{CellId, ContractorId, Generation};
use serde_json::{Value, json};
use tower::ServiceExt as _;

const ADMIN: &str = "cp-admin-token";

fn config(dir: &std::path::Path, port: u16) -> Config {
    std::fs::write(dir.join("admin-token"), format!("{ADMIN}\n")).unwrap();
    Config {
        listen: format!("127.0.0.1:{port}").parse().unwrap(),
        management_listen: "127.0.0.1:0".parse().unwrap(),
        data_dir: dir.join("data"),
        map_key_file: dir.join("map-key"),
        publish_dir: dir.join("publish"),
        admin_token_file: dir.join("admin-token"),
        tls_cert: dir.join("cp.pem"),
        tls_key: dir.join("cp-key.pem"),
        cells: (1..=3)
            .map(|n| {
                let cert = dir.join(format!("cell-0{n}.pem"));
                self_signed(&cert, &dir.join(format!("cell-0{n}-key.pem")));
                CellConfig {
                    id: CellId::new(format!("cell-0{n}")).unwrap(),
                    endpoint: format!("https://127.0.0.{n}:8443"),
                    auth_service_url: format!("https://127.0.0.{n}:8444"),
                    tls_cert_file: cert,
                    tls_next_cert_file: None,
                }
            })
            .collect(),
        bucket_count: 64,
        publish_interval_ms: 30_000,
        log_format: Default::default(),
        listeners: Default::default(),
    }
}

/// A self-signed certificate for 127.0.0.1 written to `cert` and `key`; returns its PEM.
fn self_signed(cert: &std::path::Path, key: &std::path::Path) -> String {
    let ck = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap();
    std::fs::write(cert, ck.cert.pem()).unwrap();
    std::fs::write(key, ck.signing_key.serialize_pem()).unwrap();
    ck.cert.pem()
}

async fn send(app: &axum::Router, req: Request<Body>) -> (StatusCode, Vec<u8>) {
    let resp = app.clone().oneshot(req).await.unwrap();
    let s = resp.status();
    (
        s,
        resp.into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .to_vec(),
    )
}

fn get(path: &str) -> Request<Body> {
    Request::get(path).body(Body::empty()).unwrap()
}

fn put_placement(ctr: &str, body: Value, token: &str) -> Request<Body> {
    Request::put(format!("/admin/v1/placements/{ctr}"))
        .header("authorization", format!("Bearer {token}"))
        .body(Body::from(body.to_string()))
        .unwrap()
}

async fn public_key(app: &axum::Router) -> PublicKey {
    let (s, b) = send(app, get("/v1/map-public-key")).await;
    assert_eq!(s, StatusCode::OK);
    let v: Value = serde_json::from_slice(&b).unwrap();
    PublicKey::from_b64(v["public_key"].as_str().unwrap()).unwrap()
}

#[tokio::test]
async fn map_is_signed_and_a_move_publishes_a_new_version_with_an_override() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), 1);
    // Two contractors placed on their bucket's cell: no overrides.
    {
        let mut store = Store::open(&cfg.data_dir).unwrap();
        let buckets = control_plane::publish::round_robin_buckets(64, 3);
        let items: Vec<_> = ["c-1", "c-2"]
            .iter()
            .map(|c| {
                let c = ContractorId::new(*c).unwrap();
                let idx = buckets[protocol::map::bucket_of(&c, 64)];
                let cell = cfg.cells[usize::from(idx)].id.clone();
                (
                    c,
                    Placement {
                        cell,
                        generation: Generation(1),
                    },
                )
            })
            .collect();
        store.put_many(&items).unwrap();
    }
    let state = control_plane::server::state_from_config(&cfg)
        .await
        .unwrap();
    let app = control_plane::router(state.clone());
    let key = public_key(&app).await;

    let (s, b) = send(&app, get("/v1/placement-map")).await;
    assert_eq!(s, StatusCode::OK);
    let v1 = SignedMap::verify_bytes(&b, &key).unwrap();
    assert_eq!(v1.map.version, 1);
    assert_eq!(v1.map.buckets.len(), 64);
    assert_eq!(v1.map.cells.len(), 3);
    assert!(v1.map.overrides.is_empty());
    // The same content is published to the directory.
    let on_disk = std::fs::read(cfg.publish_dir.join(MAP_FILE)).unwrap();
    assert_eq!(SignedMap::verify_bytes(&on_disk, &key).unwrap(), v1);

    // Republishing unchanged content keeps the version.
    let publish = Request::post("/admin/v1/publish")
        .header("authorization", format!("Bearer {ADMIN}"))
        .body(Body::empty())
        .unwrap();
    let (s, b) = send(&app, publish).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(serde_json::from_slice::<Value>(&b).unwrap()["version"], 1);

    // Move c-1 away from its bucket's cell: a new version naming it in the overrides.
    let c1 = ContractorId::new("c-1").unwrap();
    let home = v1.map.cell_for(&c1).unwrap().id.clone();
    let other = v1
        .map
        .cells
        .iter()
        .find(|c| c.id != home)
        .unwrap()
        .id
        .clone();
    let (s, b) = send(
        &app,
        put_placement("c-1", json!({"cell": other, "generation": 2}), ADMIN),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{}", String::from_utf8_lossy(&b));
    let (_, b) = send(&app, get("/v1/placement-map")).await;
    let v2 = SignedMap::verify_bytes(&b, &key).unwrap();
    assert_eq!(v2.map.version, 2);
    assert_eq!(v2.map.overrides.get(&c1), Some(&other));
    assert_eq!(v2.map.cell_for(&c1).unwrap().id, other);
    assert!(v2.newer_than(Some(&v1)).is_ok());

    // A lower generation, an unknown cell, a wrong token are refused.
    let (s, _) = send(
        &app,
        put_placement("c-1", json!({"cell": home, "generation": 1}), ADMIN),
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    let (s, _) = send(
        &app,
        put_placement("c-1", json!({"cell": "cell-09", "generation": 3}), ADMIN),
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    let (s, b) = send(
        &app,
        put_placement("c-1", json!({"cell": home, "generation": 3}), "nope"),
    )
    .await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    assert_eq!(
        serde_json::from_slice::<Value>(&b).unwrap()["error"],
        "FORBIDDEN"
    );

    // Moving back home removes the override.
    let (s, _) = send(
        &app,
        put_placement("c-1", json!({"cell": home, "generation": 3}), ADMIN),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    let (_, b) = send(&app, get("/v1/placement-map")).await;
    let v3 = SignedMap::verify_bytes(&b, &key).unwrap();
    assert_eq!(v3.map.version, 3);
    assert!(v3.map.overrides.is_empty());
    // Counted: three new versions (the first, two moves), one unchanged republication, and
    // one placement change to each cell c-1 went to; the main router has no /metrics.
    let (s, _) = send(&app, get("/metrics")).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let management = runtime::management::router(std::sync::Arc::new(
        control_plane::server::Management(state),
    ));
    let (s, b) = send(&management, get("/metrics")).await;
    assert_eq!(s, StatusCode::OK);
    let text = String::from_utf8(b).unwrap();
    for line in [
        r#"cellbind_control_plane_map_publications_total{result="new_version"} 3"#.to_owned(),
        r#"cellbind_control_plane_map_publications_total{result="unchanged"} 1"#.to_owned(),
        "cellbind_control_plane_map_version 3".to_owned(),
        format!(r#"cellbind_control_plane_placement_changes_total{{cell="{other}"}} 1"#),
        format!(r#"cellbind_control_plane_placement_changes_total{{cell="{home}"}} 1"#),
    ] {
        assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
    }

    // The placement is readable; versions survive a restart.
    let req = Request::get("/admin/v1/placements/c-1")
        .header("authorization", format!("Bearer {ADMIN}"))
        .body(Body::empty())
        .unwrap();
    let (s, b) = send(&app, req).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        serde_json::from_slice::<Value>(&b).unwrap()["generation"],
        3
    );
    drop(app);
    let app = control_plane::router(
        control_plane::server::state_from_config(&cfg)
            .await
            .unwrap(),
    );
    let (_, b) = send(&app, get("/v1/placement-map")).await;
    assert_eq!(SignedMap::verify_bytes(&b, &key).unwrap().map.version, 3);
}

#[tokio::test]
async fn serves_the_signed_map_over_tls_and_republishes_it_on_the_interval() {
    runtime::install_crypto_provider();
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let management_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut cfg = config(dir.path(), port);
    cfg.management_listen = format!("127.0.0.1:{management_port}").parse().unwrap();
    cfg.publish_interval_ms = 100;
    let cert_pem = self_signed(&cfg.tls_cert, &cfg.tls_key);
    let server = tokio::spawn(control_plane::server::run(cfg.clone()));
    let client = reqwest::Client::builder()
        .tls_certs_only(reqwest::Certificate::from_pem_bundle(cert_pem.as_bytes()).unwrap())
        .build()
        .unwrap();
    let url = format!("https://127.0.0.1:{port}/v1/placement-map");
    let deadline = Instant::now() + Duration::from_secs(10);
    let body = loop {
        match client.get(&url).send().await {
            Ok(r) if r.status() == 200 => break r.bytes().await.unwrap(),
            _ if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            other => panic!("no map over TLS: {other:?}"),
        }
    };
    let key = control_plane::map_key::load_or_create_map_key(&cfg.map_key_file).unwrap();
    let m = SignedMap::verify_bytes(&body, &key.public_key()).unwrap();
    assert_eq!(m.map.cells[0].endpoint, "https://127.0.0.1:8443");
    // The key file is private.
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(&cfg.map_key_file)
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    // Published to the directory again on the interval, without any change.
    let file = cfg.publish_dir.join(MAP_FILE);
    std::fs::remove_file(&file).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !file.exists() {
        assert!(Instant::now() < deadline, "not republished on the interval");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let again = SignedMap::verify_bytes(&std::fs::read(&file).unwrap(), &key.public_key()).unwrap();
    assert_eq!(again, m, "same content, same version");
    // Metrics are on the management listener only: one new version, then unchanged ones.
    let r = client
        .get(format!("https://127.0.0.1:{port}/metrics"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let management = format!("https://127.0.0.1:{management_port}");
    for path in ["/healthz", "/readyz"] {
        let r = client
            .get(format!("{management}{path}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{path}");
    }
    let text = client
        .get(format!("{management}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let value = |series: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("{series} in\n{text}"))
    };
    assert_eq!(
        value(r#"cellbind_control_plane_map_publications_total{result="new_version"}"#),
        1.0
    );
    assert!(value(r#"cellbind_control_plane_map_publications_total{result="unchanged"}"#) >= 1.0);
    assert_eq!(
        value(r#"cellbind_control_plane_map_publications_total{result="failed"}"#),
        0.0
    );
    assert_eq!(value("cellbind_control_plane_map_version"), 1.0);
    assert_eq!(
        value(r#"cellbind_control_plane_placement_changes_total{cell="cell-02"}"#),
        0.0
    );
    server.abort();
}

/// The pin of the key whose PEM is in `key_file`: computed by rcgen, not by the control plane.
fn pin_of_key(key_file: &std::path::Path) -> SpkiPin {
    use rcgen::PublicKeyData as _;
    let pem = std::fs::read_to_string(key_file).unwrap();
    SpkiPin::of_spki_der(
        &rcgen::KeyPair::from_pem(&pem)
            .unwrap()
            .subject_public_key_info(),
    )
}

async fn served(app: &axum::Router, key: &PublicKey) -> SignedMap {
    let (s, b) = send(app, get("/v1/placement-map")).await;
    assert_eq!(s, StatusCode::OK);
    SignedMap::verify_bytes(&b, key).unwrap()
}

fn publish_request() -> Request<Body> {
    Request::post("/admin/v1/publish")
        .header("authorization", format!("Bearer {ADMIN}"))
        .body(Body::empty())
        .unwrap()
}

#[tokio::test]
async fn the_map_pins_each_cells_certificate_and_a_next_certificate_publishes_a_new_version() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut cfg = config(d, 1);
    // cell-02 names a next-certificate file; while it holds the served certificate, there is
    // no next pin.
    let next_file = d.join("cell-02-next.pem");
    std::fs::copy(&cfg.cells[1].tls_cert_file, &next_file).unwrap();
    cfg.cells[1].tls_next_cert_file = Some(next_file.clone());
    let state = control_plane::server::state_from_config(&cfg)
        .await
        .unwrap();
    let app = control_plane::router(state);
    let key = public_key(&app).await;
    let v1 = served(&app, &key).await;
    for (n, entry) in (1..=3).zip(&v1.map.cells) {
        let pins = entry.tls_pins.unwrap();
        let expected = pin_of_key(&d.join(format!("cell-0{n}-key.pem")));
        assert_eq!((pins.current, pins.next), (expected, None), "{}", entry.id);
    }
    let old_pin = v1.map.cells[1].tls_pins.unwrap().current;

    // The operator installs cell-02's next certificate (a chain: the end-entity one first)
    // and asks for a publication: a new version pins both, without a restart.
    let next_pem = self_signed(&next_file, &d.join("cell-02-next-key.pem"));
    let issuer = rcgen::generate_simple_self_signed(vec!["ca".to_owned()]).unwrap();
    std::fs::write(&next_file, format!("{next_pem}{}", issuer.cert.pem())).unwrap();
    let new_pin = pin_of_key(&d.join("cell-02-next-key.pem"));
    let (s, b) = send(&app, publish_request()).await;
    assert_eq!(s, StatusCode::OK, "{}", String::from_utf8_lossy(&b));
    let v2 = served(&app, &key).await;
    assert_eq!(v2.map.version, 2);
    let pins = v2.map.cells[1].tls_pins.unwrap();
    assert_eq!((pins.current, pins.next), (old_pin, Some(new_pin)));
    assert_eq!(v2.map.cells[0].tls_pins, v1.map.cells[0].tls_pins);

    // Rotation done: the next certificate is swapped in as the served one.
    std::fs::copy(&next_file, &cfg.cells[1].tls_cert_file).unwrap();
    let (s, _) = send(&app, publish_request()).await;
    assert_eq!(s, StatusCode::OK);
    let v3 = served(&app, &key).await;
    assert_eq!(v3.map.version, 3);
    let pins = v3.map.cells[1].tls_pins.unwrap();
    assert_eq!((pins.current, pins.next), (new_pin, None));

    // A certificate file that is gone, or holds no certificate, fails the publication (naming
    // the file); the map held stays served and written.
    std::fs::remove_file(&next_file).unwrap();
    let (s, _) = send(&app, publish_request()).await;
    assert_eq!(s, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(served(&app, &key).await, v3);
    let on_disk = std::fs::read(cfg.publish_dir.join(MAP_FILE)).unwrap();
    assert_eq!(SignedMap::verify_bytes(&on_disk, &key).unwrap(), v3);
    let err = control_plane::publish::pin_of_cert_file(&next_file)
        .unwrap_err()
        .to_string();
    assert!(err.contains("cell-02-next.pem"), "{err}");
    std::fs::write(&next_file, "not a certificate").unwrap();
    let (s, _) = send(&app, publish_request()).await;
    assert_eq!(s, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(served(&app, &key).await, v3);
    let err = control_plane::server::state_from_config(&cfg)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("cell-02-next.pem") && err.contains("no PEM certificate"),
        "{err}"
    );
}

/// A method a route does not take is a typed `405`, not axum's empty one.
#[tokio::test]
async fn a_wrong_method_is_a_typed_405() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), 1);
    let state = control_plane::server::state_from_config(&cfg)
        .await
        .unwrap();
    let app = control_plane::router(state);
    let req = Request::delete("/admin/v1/publish")
        .body(Body::empty())
        .unwrap();
    let (s, b) = send(&app, req).await;
    assert_eq!(s, StatusCode::METHOD_NOT_ALLOWED);
    let v: Value = serde_json::from_slice(&b).unwrap();
    assert_eq!(v["error"], "INVALID_REQUEST");
}
