//! Real-socket tests: the binary's server code over TLS on its two listeners, trusting only a
//! test CA; and the modes of the files it writes.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::time::{Duration, Instant};

use cellbind_demo_app::Config;
use serde_json::json;

const EDGE: &str = "edge";
const INTERNAL: &str = "internal";

struct Served {
    _dir: tempfile::TempDir,
    data: std::path::PathBuf,
    ca_pem: String,
    public: String,
    internal: String,
    /// The management listener's base URL.
    management: String,
    server: tokio::task::JoinHandle<cellbind_demo_app::Result<()>>,
}

/// Two free ports on 127.0.0.1 (both held while the second is found).
fn two_free_ports() -> (u16, u16) {
    let a = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let b = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    (
        a.local_addr().unwrap().port(),
        b.local_addr().unwrap().port(),
    )
}

/// Starts the server with a test CA; the data folder already exists with a wide mode.
async fn serve() -> Served {
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
    std::fs::write(p("app-token"), format!("{EDGE}\n")).unwrap();
    std::fs::write(p("app-internal-token"), format!("{INTERNAL}\n")).unwrap();
    std::fs::create_dir(p("data")).unwrap();
    std::fs::set_permissions(p("data"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let (public_port, internal_port) = two_free_ports();
    let management_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let cfg = Config {
        cell_id: protocol::CellId::new("cell-01").unwrap(),
        listen: format!("127.0.0.1:{public_port}").parse().unwrap(),
        internal_listen: format!("127.0.0.1:{internal_port}").parse().unwrap(),
        management_listen: format!("127.0.0.1:{management_port}").parse().unwrap(),
        tls_cert: p("cert.pem"),
        tls_key: p("key.pem"),
        data_dir: p("data"),
        app_token_file: p("app-token"),
        internal_token_file: p("app-internal-token"),
        admin_token_file: None,
        log_format: Default::default(),
        listeners: Default::default(),
    };
    let server = tokio::spawn(cellbind_demo_app::server::run(cfg));
    Served {
        data: p("data"),
        _dir: dir,
        ca_pem: ca_cert.pem(),
        public: format!("https://127.0.0.1:{public_port}"),
        internal: format!("https://127.0.0.1:{internal_port}"),
        management: format!("https://127.0.0.1:{management_port}"),
        server,
    }
}

fn client_trusting(ca_pem: &str) -> reqwest::Client {
    let certs = reqwest::Certificate::from_pem_bundle(ca_pem.as_bytes()).unwrap();
    assert!(!certs.is_empty());
    reqwest::Client::builder()
        .tls_certs_only(certs)
        .build()
        .unwrap()
}

/// Waits (bounded) until `url` answers.
async fn up(client: &reqwest::Client, url: &str) -> reqwest::Response {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match client.get(url).send().await {
            Ok(r) => return r,
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("{url} never came up: {e}"),
        }
    }
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[tokio::test]
async fn serves_both_listeners_over_tls_to_a_client_trusting_only_the_ca() {
    let s = serve().await;
    let client = client_trusting(&s.ca_pem);
    for base in [&s.public, &s.internal] {
        let resp = up(&client, &format!("{base}/healthz")).await;
        assert_eq!(resp.status(), 200, "{base}");
        let v: serde_json::Value = resp.json().await.unwrap();
        assert_eq!(v["cell_id"], "cell-01");
    }

    // The migration interface is on the internal listener only.
    let seed = |base: &str| {
        client
            .put(format!("{base}/internal/v1/contractors"))
            .bearer_auth(INTERNAL)
            .json(&json!({"contractors": {"c-1": 1}}))
            .send()
    };
    assert_eq!(seed(&s.public).await.unwrap().status(), 404);
    assert_eq!(seed(&s.internal).await.unwrap().status(), 200);
    // The API is on the public listener only.
    let route = |base: &str| {
        client
            .get(format!("{base}/api/routes/today"))
            .header("x-cellbind-edge-key", EDGE)
            .header("x-cellbind-contractor", "c-1")
            .header("x-cellbind-subject", "c-1.tech-1")
            .header("x-cellbind-generation", "1")
            .send()
    };
    assert_eq!(route(&s.public).await.unwrap().status(), 200);
    assert_eq!(route(&s.internal).await.unwrap().status(), 404);

    // Metrics are on the management listener only, by listener, route template and class.
    for base in [&s.public, &s.internal] {
        let r = client.get(format!("{base}/metrics")).send().await.unwrap();
        assert_eq!(r.status(), 404, "{base}");
    }
    for path in ["/healthz", "/readyz"] {
        let r = up(&client, &format!("{}{path}", s.management)).await;
        assert_eq!(r.status(), 200, "{path}");
    }
    let text = client
        .get(format!("{}/metrics", s.management))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for line in [
        r#"cellbind_app_requests_total{cell="cell-01",listener="public",route="/api/routes/today",class="2xx"} 1"#,
        r#"cellbind_app_requests_total{cell="cell-01",listener="public",route="/api/jobs/{id}/complete",class="2xx"} 0"#,
        r#"cellbind_app_requests_total{cell="cell-01",listener="internal",route="/internal/v1/contractors",class="2xx"} 1"#,
        r#"cellbind_app_requests_total{cell="cell-01",listener="public",route="unmatched",class="4xx"} 2"#,
    ] {
        assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
    }

    // A client that does not trust the test CA is refused on both.
    let stranger = client_trusting(
        &rcgen::generate_simple_self_signed(vec!["127.0.0.1".into()])
            .unwrap()
            .cert
            .pem(),
    );
    for base in [&s.public, &s.internal] {
        assert!(
            stranger
                .get(format!("{base}/healthz"))
                .send()
                .await
                .is_err()
        );
    }
    s.server.abort();
}

#[tokio::test]
async fn the_data_folder_is_0700_and_the_database_files_0600_after_a_write() {
    let s = serve().await;
    let client = client_trusting(&s.ca_pem);
    up(&client, &format!("{}/healthz", s.internal)).await;
    let r = client
        .put(format!("{}/internal/v1/contractors", s.internal))
        .bearer_auth(INTERNAL)
        .json(&json!({"contractors": {"c-1": 1}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = client
        .post(format!("{}/api/jobs/j-1/complete", s.public))
        .header("x-cellbind-edge-key", EDGE)
        .header("x-cellbind-contractor", "c-1")
        .header("x-cellbind-subject", "c-1.tech-1")
        .header("x-cellbind-generation", "1")
        .header("idempotency-key", "k-1")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);

    assert_eq!(mode(&s.data), 0o700, "the data folder existed as 0755");
    let mut files = 0;
    for entry in std::fs::read_dir(&s.data).unwrap() {
        let p = entry.unwrap().path();
        assert!(p.is_file(), "{} is not a file", p.display());
        assert_eq!(mode(&p), 0o600, "{}", p.display());
        files += 1;
    }
    for name in ["app.db", "app.db-wal", "app.db-shm"] {
        assert!(s.data.join(name).is_file(), "{name} exists");
    }
    assert_eq!(files, 3);
    s.server.abort();
}

#[tokio::test]
async fn a_database_left_readable_by_an_earlier_version_is_made_private_on_open() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    drop(cellbind_demo_app::store::Store::open(&data).unwrap());
    for (p, m) in [(data.clone(), 0o755), (data.join("app.db"), 0o644)] {
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(m)).unwrap();
    }
    let _store = cellbind_demo_app::store::Store::open(&data).unwrap();
    assert_eq!(mode(&data), 0o700);
    assert_eq!(mode(&data.join("app.db")), 0o600);
}

#[test]
fn a_config_naming_the_cells_admin_token_is_refused_naming_the_apps_own_token() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("app.toml");
    let valid = r#"cell_id = "cell-01"
listen = "127.0.0.1:9445"
internal_listen = "127.0.0.1:9446"
tls_cert = "c.pem"
tls_key = "k.pem"
data_dir = "data"
app_token_file = "app.token"
internal_token_file = "app-internal.token"
"#;
    std::fs::write(&p, valid).unwrap();
    Config::load(&p).unwrap();
    // A key naming the cell's admin token, beside the app's own: refused, naming both.
    std::fs::write(&p, format!("{valid}admin_token_file = \"admin.token\"\n")).unwrap();
    let err = Config::load(&p).unwrap_err().to_string();
    assert!(
        err.contains("admin_token_file is refused") && err.contains("internal_token_file"),
        "{err}"
    );
    // Instead of its own (an older configuration): refused, naming the key it needs.
    std::fs::write(&p, valid.replace("internal_token_file", "admin_token_file")).unwrap();
    let err = Config::load(&p).unwrap_err().to_string();
    assert!(err.contains("internal_token_file"), "{err}");
}

#[test]
fn a_config_serving_both_listeners_on_one_address_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("app.toml");
    std::fs::write(
        &p,
        r#"cell_id = "cell-01"
listen = "127.0.0.1:9445"
internal_listen = "127.0.0.1:9445"
tls_cert = "c.pem"
tls_key = "k.pem"
data_dir = "data"
app_token_file = "app.token"
internal_token_file = "app-internal.token"
"#,
    )
    .unwrap();
    let err = Config::load(&p).unwrap_err().to_string();
    assert!(err.contains("must differ"), "{err}");
    // And internal_listen is required.
    let text = std::fs::read_to_string(&p).unwrap();
    std::fs::write(
        &p,
        text.replace("internal_listen = \"127.0.0.1:9445\"\n", ""),
    )
    .unwrap();
    let err = Config::load(&p).unwrap_err().to_string();
    assert!(err.contains("internal_listen"), "{err}");
    // Nor may the management listener share an address with either; by default it is on
    // loopback, port 9104.
    let valid = text.replace(
        "internal_listen = \"127.0.0.1:9445\"",
        "internal_listen = \"127.0.0.1:9446\"",
    );
    std::fs::write(&p, &valid).unwrap();
    assert_eq!(
        Config::load(&p).unwrap().management_listen.to_string(),
        "127.0.0.1:9104"
    );
    for taken in ["127.0.0.1:9445", "127.0.0.1:9446"] {
        std::fs::write(&p, format!("{valid}management_listen = \"{taken}\"\n")).unwrap();
        let err = Config::load(&p).unwrap_err().to_string();
        assert!(err.contains("management_listen and"), "{taken}: {err}");
    }
}
