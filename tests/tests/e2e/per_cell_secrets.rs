//! Per-cell secrets and private files (ATTACKS A30) on a real fleet: each cell has its own
//! admin, app-internal, feed, app and edge token and the control plane its own; a token of
//! cell-02 is refused at cell-03 (a typed error) where cell-03's own token is served; the app
//! holds no admin token (ATTACKS A35): its internal token is refused by the auth-service's
//! admin API and the admin token by the app's internal API; every server has its own TLS key
//! and certificate; and every file under cell-03's data, the secrets and the control plane's
//! data is 0600 in 0700 folders.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use cellbind_tests::TestFleet;
use devfleet::CellToken;
use protocol::CellId;
use serde_json::Value;

/// A request to cell-03 made with some cell's token.
#[derive(Debug, Clone, Copy)]
enum Probe {
    /// `GET /admin/v1/status` at the auth-service's internal listener, bearer admin token.
    AuthAdmin,
    /// `GET /internal/v1/contractors/{c}/export` at the app's internal listener, bearer app
    /// internal token.
    AppInternal,
    /// `GET /internal/v1/feed?since=…&instance=…` at the auth-service, bearer an edge
    /// instance's feed credential.
    Feed,
    /// `GET /api/routes/today` at the app's public listener, edge key = app token, with the
    /// identity headers an edge would send.
    AppToken,
}

impl Probe {
    const ALL: [Probe; 4] = [
        Probe::AuthAdmin,
        Probe::AppInternal,
        Probe::Feed,
        Probe::AppToken,
    ];

    fn kind(self) -> CellToken {
        match self {
            Probe::AuthAdmin => CellToken::Admin,
            Probe::AppInternal => CellToken::AppInternal,
            Probe::Feed => CellToken::Feed,
            Probe::AppToken => CellToken::App,
        }
    }

    /// (status, JSON body) of the probe at `at` with `token`.
    async fn send(self, t: &TestFleet, at: &CellId, ctr: &str, token: &str) -> (u16, Value) {
        let cell = t.cell(at);
        let req = match self {
            Probe::AuthAdmin => t
                .client
                .get(format!("{}/admin/v1/status", cell.auth_service.url))
                .bearer_auth(token),
            Probe::AppInternal => t
                .client
                .get(format!(
                    "{}/internal/v1/contractors/{ctr}/export",
                    cell.app_internal_url
                ))
                .bearer_auth(token),
            // As the instance the credential names, reporting it holds everything (a probe must
            // not hold a migration's drain on the shared fleet).
            Probe::Feed => t
                .client
                .get(format!(
                    "{}/internal/v1/feed?since={}&instance={}",
                    cell.auth_service.url,
                    u64::MAX,
                    runtime::feed_credential::instance_of(token)
                        .map_or_else(|| "not-a-credential".to_owned(), |i| i.to_string())
                ))
                .bearer_auth(token),
            Probe::AppToken => t
                .client
                .get(format!("{}/api/routes/today", cell.app_url))
                .header(protocol::http::X_EDGE_KEY, token)
                .header(protocol::http::X_CONTRACTOR, ctr)
                .header(protocol::http::X_SUBJECT, format!("{ctr}.tech-1"))
                .header(protocol::http::X_GENERATION, "1")
                .header(protocol::http::X_SESSION, "AAAAAAAAAAAAAAAAAAAAAA"),
        };
        let r = req.send().await.expect("request");
        let s = r.status().as_u16();
        (s, r.json().await.unwrap_or(Value::Null))
    }
}

/// Every file and folder under `root` (`root` included): (files, folders), or the first entry
/// whose mode is not 0600 (file) / 0700 (folder).
fn check_modes(root: &Path, files: &mut Vec<PathBuf>, folders: &mut Vec<PathBuf>) {
    let meta = std::fs::symlink_metadata(root).unwrap();
    let mode = meta.permissions().mode() & 0o777;
    if meta.is_dir() {
        assert_eq!(mode, 0o700, "folder {} is {mode:o}", root.display());
        folders.push(root.to_owned());
        for e in std::fs::read_dir(root).unwrap() {
            check_modes(&e.unwrap().path(), files, folders);
        }
    } else {
        assert!(
            meta.is_file(),
            "{} is neither a file nor a folder",
            root.display()
        );
        assert_eq!(mode, 0o600, "file {} is {mode:o}", root.display());
        files.push(root.to_owned());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_of_one_cell_is_refused_by_another_and_secrets_and_data_are_owner_only() {
    let t = TestFleet::start().await;
    let (c2, c3) = (
        CellId::new("cell-02").unwrap(),
        CellId::new("cell-03").unwrap(),
    );
    let ctr = t
        .file()
        .demo
        .technicians
        .iter()
        .find(|u| u.cell_id == c3)
        .unwrap()
        .contractor_id
        .to_string();

    // Every token of the fleet is distinct, each in its own file: 5 per cell and the control
    // plane's.
    let mut all = std::collections::BTreeSet::new();
    let mut files = std::collections::BTreeSet::new();
    for c in &t.file().cells {
        for kind in CellToken::ALL {
            assert!(
                all.insert(t.cell_token(&c.id, kind)),
                "{} {}",
                c.id,
                kind.as_str()
            );
            assert!(files.insert(devfleet::cell_token_file(t.fleet.dir(), &c.id, kind)));
        }
        assert_eq!(t.cell_token(&c.id, CellToken::Admin), c.admin_token);
        assert_eq!(
            t.cell_token(&c.id, CellToken::AppInternal),
            c.app_internal_token
        );
        assert_eq!(
            c.app_internal_token_file,
            devfleet::cell_token_file(t.fleet.dir(), &c.id, CellToken::AppInternal)
        );
        assert_ne!(c.admin_token_file, c.app_internal_token_file);
    }
    assert!(all.insert(t.file().admin_token.clone()));
    println!(
        "per-cell secrets: {} distinct tokens in {} distinct files (+ the control plane's)",
        all.len(),
        files.len()
    );

    // The app holds no admin token: its configuration names its own internal token and no
    // other token of the auth-service.
    let app_config: toml::Table = std::fs::read_to_string(
        t.fleet
            .dir()
            .join(format!("config/{}.toml", devfleet::app_id(&c3))),
    )
    .unwrap()
    .parse()
    .unwrap();
    let tokens_named: Vec<&str> = app_config
        .iter()
        .filter(|(k, _)| k.ends_with("_token_file"))
        .map(|(_, v)| v.as_str().unwrap())
        .collect();
    let own = |kind| {
        devfleet::cell_token_file(t.fleet.dir(), &c3, kind)
            .display()
            .to_string()
    };
    assert_eq!(
        tokens_named.len(),
        2,
        "the app reads two tokens: {app_config:?}"
    );
    for kind in [CellToken::App, CellToken::AppInternal] {
        assert!(tokens_named.contains(&own(kind).as_str()), "{app_config:?}");
    }
    // Its internal token at the auth-service's admin API, and the admin token at its internal
    // API: each refused, typed.
    let crossed = [
        (Probe::AuthAdmin, CellToken::AppInternal),
        (Probe::AppInternal, CellToken::Admin),
    ];
    for (probe, kind) in crossed {
        let (s, v) = probe.send(&t, &c3, &ctr, &t.cell_token(&c3, kind)).await;
        assert_eq!(
            (s, v["error"].as_str()),
            (403, Some("FORBIDDEN")),
            "{probe:?} with cell-03's {} token: {v}",
            kind.as_str()
        );
        println!(
            "app token separation: {probe:?} at cell-03 with cell-03's {} token → {s} {}",
            kind.as_str(),
            v["error"].as_str().unwrap_or_default()
        );
    }

    // cell-02's token at cell-03: refused with a typed error; cell-03's own: served. The feed
    // takes an edge instance's own credential (made from the cell's feed secret), never the
    // secret itself.
    let token = |cell: &CellId, probe: Probe| match probe {
        Probe::Feed => t.edge_feed_credential(cell, "per-cell-secrets-probe"),
        _ => t.cell_token(cell, probe.kind()),
    };
    let (s, v) = Probe::Feed
        .send(&t, &c3, &ctr, &t.cell_token(&c3, CellToken::Feed))
        .await;
    assert_eq!(s, 403, "cell-03's feed secret itself at its feed: {v}");
    for probe in Probe::ALL {
        let (s, v) = probe.send(&t, &c3, &ctr, &token(&c2, probe)).await;
        assert!(
            s == 403,
            "{probe:?} with cell-02's {} token at cell-03: {s} {v}",
            probe.kind().as_str()
        );
        let code = v["error"].as_str().unwrap_or_default().to_owned();
        assert!(
            !code.is_empty() && code.chars().all(|ch| ch.is_ascii_uppercase() || ch == '_'),
            "{probe:?}: a typed error body, got {v}"
        );
        assert!(v["message"].is_string(), "{probe:?}: {v}");
        let (own, body) = probe.send(&t, &c3, &ctr, &token(&c3, probe)).await;
        assert_eq!(own, 200, "{probe:?} with cell-03's own token: {body}");
        println!(
            "per-cell secrets: {probe:?} at cell-03 with cell-02's {} token → {s} {code}; with its own → {own}",
            probe.kind().as_str()
        );
    }
    // The control plane's token is no cell's token, and a cell's admin token is not the
    // control plane's.
    let (s, v) = Probe::AuthAdmin
        .send(&t, &c3, &ctr, &t.file().admin_token)
        .await;
    assert!(s == 403, "the control plane's token at cell-03: {s} {v}");
    let r = t
        .client
        .get(format!(
            "{}/admin/v1/placements/{ctr}",
            t.file().control_plane.url
        ))
        .bearer_auth(t.cell_token(&c3, CellToken::Admin))
        .send()
        .await
        .unwrap();
    let s = r.status().as_u16();
    assert!(s == 403, "cell-03's admin token at the control plane: {s}");
    let r = t
        .client
        .get(format!(
            "{}/admin/v1/placements/{ctr}",
            t.file().control_plane.url
        ))
        .bearer_auth(&t.file().admin_token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);

    // Every server its own TLS key and certificate: the files its configuration names, and
    // the certificate each listener serves.
    let mut keys = std::collections::BTreeMap::new();
    let mut certs = std::collections::BTreeMap::new();
    for id in t.fleet.child_ids() {
        let cfg: toml::Table =
            std::fs::read_to_string(t.fleet.dir().join(format!("config/{id}.toml")))
                .unwrap()
                .parse()
                .unwrap();
        let file = |key: &str| std::fs::read(cfg[key].as_str().unwrap()).unwrap();
        assert!(
            keys.insert(file("tls_key"), id.clone()).is_none(),
            "{id} shares its TLS key"
        );
        assert!(
            certs.insert(file("tls_cert"), id.clone()).is_none(),
            "{id} shares its certificate"
        );
    }
    let served = served_certificates(&t).await;
    let distinct: std::collections::BTreeSet<&Vec<u8>> = served.values().collect();
    assert_eq!(
        distinct.len(),
        t.fleet.child_ids().len(),
        "one certificate per server: {:?}",
        served.keys().collect::<Vec<_>>()
    );
    println!(
        "per-server TLS: {} servers, {} distinct keys, {} distinct certificates on disk, {} distinct served on {} listeners",
        t.fleet.child_ids().len(),
        keys.len(),
        certs.len(),
        distinct.len(),
        served.len()
    );

    // Every file 0600, every folder 0700: cell-03's data (auth-service, edge state, app), all
    // secrets, and the control plane's data.
    let dir = t.fleet.dir().to_owned();
    let (mut files, mut folders) = (Vec::new(), Vec::new());
    for root in [
        dir.join("data/cell-03"),
        dir.join("secrets"),
        dir.join("data/control-plane"),
    ] {
        check_modes(&root, &mut files, &mut folders);
    }
    for f in [
        "data/cell-03/app/app.db",
        "secrets/cell-03/edge.token",
        "secrets/control-plane.token",
        "data/control-plane/placements.db",
    ] {
        assert!(files.contains(&dir.join(f)), "{f} was checked");
    }
    for d in [dir.clone(), dir.join("data")] {
        let mode = std::fs::metadata(&d).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "{}", d.display());
    }
    println!(
        "per-cell secrets: {} files 0600 and {} folders 0700 checked under data/cell-03, secrets and data/control-plane",
        files.len(),
        folders.len()
    );
    t.fleet.stop().await;
}

/// The leaf certificate (DER) each listener of the fleet serves, by URL: the control plane,
/// and per cell its edge, every auth-service replica (public and internal) and the app (public
/// and internal).
async fn served_certificates(t: &TestFleet) -> std::collections::BTreeMap<String, Vec<u8>> {
    let ca = std::fs::read(&t.file().ca_cert).unwrap();
    let client = runtime::tls::client_trusting(&ca)
        .unwrap()
        .tls_info(true)
        .build()
        .unwrap();
    let mut urls = vec![t.file().control_plane.url.clone()];
    for c in &t.file().cells {
        urls.push(c.endpoint.clone());
        urls.extend(c.replicas().iter().map(|s| s.url.clone()));
        urls.extend(c.auth_public_urls.iter().cloned());
        urls.push(c.app_url.clone());
        urls.push(c.app_internal_url.clone());
    }
    let mut out = std::collections::BTreeMap::new();
    for url in urls {
        let r = client.get(format!("{url}/healthz")).send().await.unwrap();
        let der = r
            .extensions()
            .get::<reqwest::tls::TlsInfo>()
            .and_then(|i| i.peer_certificate())
            .unwrap_or_else(|| panic!("{url}: no peer certificate"))
            .to_vec();
        out.insert(url, der);
    }
    out
}
