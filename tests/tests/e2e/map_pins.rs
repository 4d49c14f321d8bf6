//! TLS pins in the signed map, against a real fleet: a cell whose edge serves a certificate
//! from the fleet's own CA that the map does not pin is refused by the SDK before anything is
//! sent; once the control plane publishes it as the cell's next certificate, the same client
//! (same session) reaches the cell again after adopting the new map; a map whose pins were
//! stripped is refused. Pins are checked at the TLS handshake: a connection opened (and
//! verified) before the certificate changed is not re-checked, so the refused client here is
//! the app started again with its stored session.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::sync::Arc;
use std::time::{Duration, Instant};

use cellbind_tests::TestFleet;
use devfleet::DemoUser;
use protocol::jwks::PublicKey;
use protocol::map::{MapError, SignedMap, SpkiPin};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;

const ROUTES: &str = "/api/routes/today";

fn map_key(t: &TestFleet) -> PublicKey {
    PublicKey::from_b64(&t.file().map_public_key).unwrap()
}

async fn get_bytes(t: &TestFleet, url: String) -> Vec<u8> {
    let r = t.client.get(url).send().await.unwrap();
    assert_eq!(r.status(), 200);
    r.bytes().await.unwrap().to_vec()
}

/// An SDK client built with `map` (the fleet's CA as its only root) and `store`.
fn client(t: &TestFleet, map: &[u8], store: Arc<sdk::MemoryStore>) -> sdk::Client {
    sdk::Client::builder(map.to_vec(), map_key(t))
        .extra_ca_pem(std::fs::read(&t.file().ca_cert).unwrap())
        .store(store)
        .build()
        .unwrap()
}

/// [`client`] with a fresh store, signed in as `u`.
async fn signed_in(
    t: &TestFleet,
    map: &[u8],
    u: &DemoUser,
) -> (sdk::Client, Arc<sdk::MemoryStore>) {
    let store = Arc::new(sdk::MemoryStore::new());
    let client = client(t, map, store.clone());
    client
        .sign_in(
            &u.contractor_id,
            &protocol::Login::new(u.login.clone()).unwrap(),
            &protocol::Password::new(u.password.clone()).unwrap(),
        )
        .await
        .unwrap();
    (client, store)
}

/// The pin of the certificate `endpoint` serves to a new connection.
async fn served_pin(ca_pem: &[u8], endpoint: &str) -> SpkiPin {
    let fresh = runtime::tls::client_trusting(ca_pem)
        .unwrap()
        .tls_info(true)
        .build()
        .unwrap();
    let r = fresh
        .get(format!("{endpoint}/v1/placement-map"))
        .send()
        .await
        .unwrap();
    let info = r.extensions().get::<reqwest::tls::TlsInfo>().unwrap();
    SpkiPin::of_certificate_der(info.peer_certificate().unwrap()).unwrap()
}

/// `POST /admin/v1/publish` at the control plane (its own token), then the map it serves, as
/// bytes and verified.
async fn publish(t: &TestFleet) -> (Vec<u8>, SignedMap) {
    let f = t.file();
    let r = t
        .client
        .post(format!("{}/admin/v1/publish", f.control_plane.url))
        .bearer_auth(&f.admin_token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let bytes = get_bytes(t, format!("{}/v1/placement-map", f.control_plane.url)).await;
    let map = SignedMap::verify_bytes(&bytes, &map_key(t)).unwrap();
    (bytes, map)
}

/// Writes `bytes` to `path` in one rename (the edge never reads half a file).
fn replace(path: &std::path::Path, bytes: &[u8]) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unpinned_certificate_is_refused_until_the_control_plane_pins_it_as_next() {
    let t = TestFleet::start().await;
    let f = t.file().clone();
    let users = t.sample_per_cell(1, &[]);
    let (a_user, b_user) = (users[0].clone(), users[1].clone());
    let (a, b) = (
        t.cell(&a_user.cell_id).clone(),
        t.cell(&b_user.cell_id).clone(),
    );
    let v1_bytes = get_bytes(&t, format!("{}/v1/placement-map", f.control_plane.url)).await;
    let v1 = SignedMap::verify_bytes(&v1_bytes, &map_key(&t)).unwrap();
    let a_pins = v1.map.cell(&a.id).unwrap().tls_pins.unwrap();
    assert_eq!(a_pins.next, None, "no rotation under way at start");

    let (client_a, store_a) = signed_in(&t, &v1_bytes, &a_user).await;
    let (client_b, _) = signed_in(&t, &v1_bytes, &b_user).await;
    client_a
        .request(http::Method::GET, ROUTES, None)
        .await
        .unwrap();
    let ca_pem = std::fs::read(&f.ca_cert).unwrap();
    assert_eq!(served_pin(&ca_pem, &a.endpoint).await, a_pins.current);

    // Cell A's edge gets a new certificate from the same CA (valid for the same addresses),
    // written over the files it serves; it reloads them on change.
    let files = t.fleet.cell_tls_files(&a.id).unwrap();
    let (cert_pem, key_pem) = t.fleet.issue_cell_certificate(&a.id).unwrap();
    let new_pin =
        SpkiPin::of_certificate_der(&CertificateDer::from_pem_slice(cert_pem.as_bytes()).unwrap())
            .unwrap();
    assert!(!a_pins.matches(&new_pin));
    replace(&files.key, key_pem.as_bytes());
    replace(&files.cert, cert_pem.as_bytes());
    let deadline = Instant::now() + Duration::from_secs(30);
    while served_pin(&ca_pem, &a.endpoint).await != new_pin {
        assert!(
            Instant::now() < deadline,
            "the edge never served the new certificate"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The CA vouches for it (the check above trusted only the CA), but the map does not pin
    // it: the signed-in user's app, started again (its session restored from its store, a new
    // connection), is refused during the handshake, so its token never reaches the edge.
    let restarted = client(&t, &v1_bytes, store_a.clone());
    assert!(restarted.restore().unwrap().is_some());
    let refused = restarted
        .request(http::Method::GET, ROUTES, None)
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, sdk::Error::PinMismatch { cell } if *cell == a.id),
        "{refused:?}"
    );
    // A new sign-in at cell A is refused the same way (the password is not sent either).
    let store = Arc::new(sdk::MemoryStore::new());
    let err = client(&t, &v1_bytes, store)
        .sign_in(
            &a_user.contractor_id,
            &protocol::Login::new(a_user.login.clone()).unwrap(),
            &protocol::Password::new(a_user.password.clone()).unwrap(),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, sdk::Error::PinMismatch { .. }), "{err:?}");
    // A client of another cell is unaffected; the refused client keeps its session.
    client_b
        .request(http::Method::GET, ROUTES, None)
        .await
        .unwrap();
    assert!(restarted.session().is_some());

    // The operator installs the certificate as cell A's next one (the control plane's
    // `tls_next_cert_file`, re-read at every publication; the control plane keeps its own copy
    // of the served certificate, which still holds the old one) and asks for a publication.
    replace(&files.next_cert, cert_pem.as_bytes());
    let (v2_bytes, v2) = publish(&t).await;
    assert_eq!(v2.map.version, v1.map.version + 1);
    let pins = v2.map.cell(&a.id).unwrap().tls_pins.unwrap();
    assert_eq!((pins.current, pins.next), (a_pins.current, Some(new_pin)));
    assert_eq!(
        v2.map.cell(&b.id).unwrap().tls_pins,
        v1.map.cell(&b.id).unwrap().tls_pins
    );

    // The cells serve the new map (they poll the control plane); the refused client takes it
    // from a cell whose certificate still matches, and reaches cell A again, same session.
    let deadline = Instant::now() + Duration::from_secs(30);
    let served = loop {
        let bytes = get_bytes(&t, format!("{}/v1/placement-map", b.endpoint)).await;
        let m = SignedMap::verify_bytes(&bytes, &map_key(&t)).unwrap();
        if m.map.version == v2.map.version {
            break bytes;
        }
        assert!(Instant::now() < deadline, "cell B never served the new map");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let update = restarted.adopt_map(&served).unwrap();
    assert_eq!(update.version, v2.map.version);
    restarted
        .request(http::Method::GET, ROUTES, None)
        .await
        .unwrap();
    // client B refreshes through its own cell.
    assert_eq!(
        client_b.refresh_map().await.unwrap().version,
        v2.map.version
    );
    client_b
        .request(http::Method::GET, ROUTES, None)
        .await
        .unwrap();
    // A fresh client built with the new map signs in at cell A.
    let (fresh, _) = signed_in(&t, &v2_bytes, &a_user).await;
    fresh
        .request(http::Method::GET, ROUTES, None)
        .await
        .unwrap();

    // The rotation ends: the operator installs the certificate as the control plane's copy of
    // the served one; the next publication pins it as `current` and drops `next`.
    replace(&files.pinned_cert, cert_pem.as_bytes());
    let (v3_bytes, v3) = publish(&t).await;
    assert_eq!(v3.map.version, v2.map.version + 1);
    let pins = v3.map.cell(&a.id).unwrap().tls_pins.unwrap();
    assert_eq!((pins.current, pins.next), (new_pin, None));
    restarted.adopt_map(&v3_bytes).unwrap();
    restarted
        .request(http::Method::GET, ROUTES, None)
        .await
        .unwrap();

    // The published map with cell A's pins stripped: refused by the signature, and so by the
    // SDK's builder.
    let mut doc: serde_json::Value = serde_json::from_slice(&v2_bytes).unwrap();
    let cells = doc["map"]["cells"].as_array_mut().unwrap();
    let entry = cells.iter_mut().find(|c| c["id"] == a.id.as_str()).unwrap();
    assert!(entry.as_object_mut().unwrap().remove("tls_pins").is_some());
    let stripped = serde_json::to_vec(&doc).unwrap();
    assert_eq!(
        SignedMap::verify_bytes(&stripped, &map_key(&t)),
        Err(MapError::BadSignature)
    );
    let err = sdk::Client::builder(stripped.clone(), map_key(&t))
        .extra_ca_pem(std::fs::read(&f.ca_cert).unwrap())
        .build()
        .unwrap_err();
    assert!(
        matches!(err, sdk::Error::MapRefused(MapError::BadSignature)),
        "{err:?}"
    );
    assert!(matches!(
        restarted.adopt_map(&stripped),
        Err(sdk::Error::MapRefused(MapError::BadSignature))
    ));
}
