//! TLS pins: the SDK talks to a cell only if the certificate it presents passes the base
//! verifier (CA chain, validity, host name) AND the SubjectPublicKeyInfo of its end-entity
//! certificate matches the cell's `current` or `next` pin in the signed placement map
//! (`protocol::map::TlsPins`). The pin check runs inside the TLS handshake
//! ([`PinnedVerifier`]), so a cell that fails it never receives a byte of the request, and a
//! session token never reaches an impostor holding a certificate from a trusted CA.
//!
//! The failure is [`Error::PinMismatch`](crate::Error::PinMismatch), found in the connect
//! error's source chain by [`refused_cell`]; it is not retried. A cell the map held by the
//! client does not list (so it has no pins) is refused the same way, without connecting.
//!
//! Several cells may share a host name (different ports), so every cell has its own HTTPS
//! client whose verifier knows that cell's pins ([`CellClients`]); clients are cached per cell
//! with the pins they were built for, and rebuilt when an adopted map changes those pins.
//!
//! Base verifier:
//!
//! | configuration                        | base verifier                                          |
//! |--------------------------------------|--------------------------------------------------------|
//! | `extra_ca_pem` set                   | WebPKI over exactly those CA certificates              |
//! | otherwise, Android                   | WebPKI over the bundled Mozilla roots (`webpki-roots`) |
//! | otherwise (iOS, macOS, Linux, Windows) | the platform verifier (`rustls-platform-verifier`)   |
//!
//! On Android the platform verifier needs JNI initialisation by the host app; the bundled
//! roots need nothing. The trade-off: CAs that a user or a device policy installed are not
//! honoured on Android. The pins from the signed map are the primary trust anyway. reqwest
//! never verifies anything itself (it is handed the configuration built here), but reqwest 0.13
//! links the platform verifier whatever it is given, so on Android the SDK is built on reqwest
//! 0.12 without it (`sdk/Cargo.toml`); this file uses only what both versions offer.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use protocol::CellId;
use protocol::map::{SpkiPin, TlsPins};
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, OtherError, RootCertStore, SignatureScheme};

use crate::Error;

/// The pins the current map gives a cell (`None`: the map does not list it).
pub(crate) type PinsOf = Arc<dyn Fn(&CellId) -> Option<TlsPins> + Send + Sync>;

/// The error a [`PinnedVerifier`] fails the handshake with (inside a rustls
/// `CertificateError::Other`).
#[derive(Debug, thiserror::Error)]
#[error("the certificate of {cell} matches none of its pins in the signed map")]
struct PinRefused {
    cell: CellId,
}

/// A verifier that accepts what `base` accepts and whose end-entity certificate matches a pin.
#[derive(Debug)]
struct PinnedVerifier {
    cell: CellId,
    pins: TlsPins,
    base: Arc<dyn ServerCertVerifier>,
}

impl ServerCertVerifier for PinnedVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let verified = self.base.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        )?;
        let pin = SpkiPin::of_certificate_der(end_entity)
            .map_err(|_| rustls::Error::InvalidCertificate(CertificateError::BadEncoding))?;
        if self.pins.matches(&pin) {
            Ok(verified)
        } else {
            Err(rustls::Error::InvalidCertificate(CertificateError::Other(
                OtherError(Arc::new(PinRefused {
                    cell: self.cell.clone(),
                })),
            )))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.base.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.base.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.base.supported_verify_schemes()
    }

    fn requires_raw_public_keys(&self) -> bool {
        self.base.requires_raw_public_keys()
    }

    fn root_hint_subjects(&self) -> Option<&[rustls::DistinguishedName]> {
        self.base.root_hint_subjects()
    }
}

/// The cell whose pins refused the handshake, if that is what failed `e`. tokio-rustls wraps
/// the rustls error in an `io::Error` (which the connector wraps in another), and an
/// `io::Error`'s `source()` skips the error it wraps, so wrapped errors are unwrapped with
/// `get_ref` as well.
pub(crate) fn refused_cell(e: &(dyn std::error::Error + 'static)) -> Option<CellId> {
    causes(e).find_map(|c| match c.downcast_ref::<rustls::Error>()? {
        rustls::Error::InvalidCertificate(CertificateError::Other(OtherError(inner))) => {
            inner.downcast_ref::<PinRefused>().map(|r| r.cell.clone())
        }
        _ => None,
    })
}

/// `e` and its causes, through `io::Error` wrappers.
pub(crate) fn causes<'a>(
    e: &'a (dyn std::error::Error + 'static),
) -> impl Iterator<Item = &'a (dyn std::error::Error + 'static)> {
    std::iter::successors(Some(e), |c| {
        match c
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref)
        {
            Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
            None => c.source(),
        }
    })
}

/// The verifier the pins are checked after (the table in the module doc).
pub(crate) fn base_verifier(
    extra_ca_pem: Option<&[u8]>,
    provider: Arc<CryptoProvider>,
) -> Result<Arc<dyn ServerCertVerifier>, Error> {
    let Some(pem) = extra_ca_pem else {
        return platform_verifier(provider);
    };
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem) {
        let cert =
            cert.map_err(|e| Error::Config(format!("CA certificate PEM is not readable: {e}")))?;
        roots
            .add(cert)
            .map_err(|e| Error::Config(format!("CA certificate is not usable: {e}")))?;
    }
    if roots.is_empty() {
        return Err(Error::Config(
            "CA certificate PEM holds no certificate".into(),
        ));
    }
    webpki(roots, provider)
}

fn webpki(
    roots: RootCertStore,
    provider: Arc<CryptoProvider>,
) -> Result<Arc<dyn ServerCertVerifier>, Error> {
    let verifier = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .map_err(|e| Error::Config(format!("cannot build the certificate verifier: {e}")))?;
    Ok(verifier)
}

#[cfg(not(target_os = "android"))]
fn platform_verifier(provider: Arc<CryptoProvider>) -> Result<Arc<dyn ServerCertVerifier>, Error> {
    let verifier = rustls_platform_verifier::Verifier::new(provider).map_err(|e| {
        Error::Config(format!(
            "cannot use the platform's certificate verifier: {e}"
        ))
    })?;
    Ok(Arc::new(verifier))
}

/// Android: the bundled roots (no JNI initialisation; see the module doc).
#[cfg(target_os = "android")]
fn platform_verifier(provider: Arc<CryptoProvider>) -> Result<Arc<dyn ServerCertVerifier>, Error> {
    let roots = RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    webpki(roots, provider)
}

/// What every cell's HTTPS client shares.
#[derive(Debug, Clone)]
pub(crate) struct HttpSettings {
    pub user_agent: &'static str,
    pub connect_timeout: Duration,
    pub request_timeout: Duration,
}

/// One HTTPS client per cell, each verifying that cell's pins (module doc).
pub(crate) struct CellClients {
    base: Arc<dyn ServerCertVerifier>,
    provider: Arc<CryptoProvider>,
    settings: HttpSettings,
    pins_of: PinsOf,
    /// Each cell's client and the pins it was built for.
    cache: Mutex<HashMap<CellId, (TlsPins, reqwest::Client)>>,
}

impl std::fmt::Debug for CellClients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CellClients")
            .field("base", &self.base)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl CellClients {
    pub(crate) fn new(
        base: Arc<dyn ServerCertVerifier>,
        provider: Arc<CryptoProvider>,
        settings: HttpSettings,
        pins_of: PinsOf,
    ) -> Self {
        Self {
            base,
            provider,
            settings,
            pins_of,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// The client for `cell` under the pins of the map held now; refused (nothing sent) when
    /// the map does not list the cell.
    pub(crate) fn client_for(&self, cell: &CellId) -> Result<reqwest::Client, Error> {
        let pins = (self.pins_of)(cell).ok_or_else(|| Error::PinMismatch { cell: cell.clone() })?;
        let mut cache = self.cache.lock().map_err(|_| Error::InvalidState {
            state: "poisoned",
            event: "connect",
        })?;
        if let Some((built_for, client)) = cache.get(cell)
            && *built_for == pins
        {
            return Ok(client.clone());
        }
        let client = self.build(cell, pins)?;
        cache.insert(cell.clone(), (pins, client.clone()));
        Ok(client)
    }

    fn build(&self, cell: &CellId, pins: TlsPins) -> Result<reqwest::Client, Error> {
        let verifier = PinnedVerifier {
            cell: cell.clone(),
            pins,
            base: self.base.clone(),
        };
        let mut tls = rustls::ClientConfig::builder_with_provider(self.provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::Config(format!("TLS versions: {e}")))?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(verifier))
            .with_no_client_auth();
        // HTTP/1.1 only: the SDK's reqwest is built without HTTP/2 (the library's size budget).
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        reqwest::Client::builder()
            .use_preconfigured_tls(tls)
            .user_agent(self.settings.user_agent)
            .https_only(true)
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(self.settings.connect_timeout)
            .timeout(self.settings.request_timeout)
            .build()
            .map_err(|e| Error::Config(format!("cannot build the HTTPS client: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use protocol::map::{SpkiPin, TlsPins};
    use protocol::{ContractorId, Login, Password};

    use crate::testing::{DAY, FakeFleet, NOW};
    use crate::{Client, Error, NetworkErrorKind, RequestEvent, RequestOutcome};

    const SIGN_IN: &str = "POST /v1/sessions";
    const ROUTES: &str = "GET /api/routes/today";

    /// The pin of a fresh key: what a certificate the cell does not serve would be pinned as.
    fn unserved_pin() -> SpkiPin {
        use rcgen::PublicKeyData as _;
        SpkiPin::of_spki_der(
            &rcgen::KeyPair::generate()
                .unwrap()
                .subject_public_key_info(),
        )
    }

    async fn sign_in(c: &Client) -> Result<crate::SessionInfo, Error> {
        c.sign_in(
            &ContractorId::new("c-40711").unwrap(),
            &Login::new("ana").unwrap(),
            &Password::new("correct horse").unwrap(),
        )
        .await
    }

    fn recorder() -> (
        Arc<Mutex<Vec<RequestEvent>>>,
        Arc<dyn crate::RequestObserver>,
    ) {
        let events = Arc::new(Mutex::new(Vec::new()));
        let sink = events.clone();
        let observer = move |e: &RequestEvent| sink.lock().unwrap().push(e.clone());
        (events, Arc::new(observer))
    }

    #[tokio::test]
    async fn a_cell_serving_its_current_or_its_next_pinned_certificate_is_reached() {
        let f = FakeFleet::start(1).await;
        f.cells[0].accept_sign_in(NOW + 30 * DAY);
        for pins in [
            TlsPins {
                current: f.pin,
                next: None,
            },
            TlsPins {
                current: f.pin,
                next: Some(unserved_pin()),
            },
            // a rotation under way: the cell already serves the next certificate
            TlsPins {
                current: unserved_pin(),
                next: Some(f.pin),
            },
        ] {
            let (c, _) = f.client_mem(&f.map_with_pins(1, pins));
            let info = sign_in(&c).await.unwrap();
            assert_eq!(info.cell_id, f.cells[0].id, "{pins:?}");
        }
        assert_eq!(f.cells[0].hits(SIGN_IN).len(), 3);
    }

    #[tokio::test]
    async fn a_ca_valid_certificate_matching_no_pin_is_refused_before_anything_is_sent() {
        let f = FakeFleet::start(1).await;
        f.cells[0].accept_sign_in(NOW + 30 * DAY);
        let map = f.map_with_pins(
            1,
            TlsPins {
                current: unserved_pin(),
                next: Some(unserved_pin()),
            },
        );
        let (events, observer) = recorder();
        let c = f.builder(&map).observer(observer).build().unwrap();
        let err = sign_in(&c).await.unwrap_err();
        assert!(
            matches!(&err, Error::PinMismatch { cell } if *cell == f.cells[0].id),
            "{err:?}"
        );
        // the certificate is from the trusted CA, yet the cell saw nothing (no password)
        assert_eq!(f.cells[0].all_hits(), 0);
        assert_eq!(c.state_name(), "SignedOut");
        // one attempt (not retried), reported as a TLS failure that never reached the cell
        let events = events.lock().unwrap();
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].attempts, 1);
        assert!(!events[0].reached_cell);
        assert_eq!(
            events[0].outcome,
            RequestOutcome::Network {
                kind: NetworkErrorKind::Tls
            }
        );
    }

    #[tokio::test]
    async fn an_adopted_map_changes_the_pins_of_the_next_request() {
        let f = FakeFleet::start(1).await;
        f.cells[0].accept_sign_in(NOW + 30 * DAY);
        f.cells[0].always(
            ROUTES,
            crate::testing::Reply::json(200, serde_json::json!({})),
        );
        let (c, _) = f.client_mem(&f.map(1, &[]));
        sign_in(&c).await.unwrap();
        c.request(http::Method::GET, "/api/routes/today", None)
            .await
            .unwrap();
        assert_eq!(f.cells[0].hits(ROUTES).len(), 1);

        // A newer map no longer pins the served certificate: the session's token is not sent.
        let moved = TlsPins {
            current: unserved_pin(),
            next: None,
        };
        c.adopt_map(&f.map_with_pins(2, moved).to_json().unwrap())
            .unwrap();
        let err = c
            .request(http::Method::GET, "/api/routes/today", None)
            .await
            .unwrap_err();
        assert!(matches!(err, Error::PinMismatch { .. }), "{err:?}");
        assert_eq!(f.cells[0].hits(ROUTES).len(), 1);

        // And a map that pins it as the next certificate lets it through again.
        let rotating = TlsPins {
            current: moved.current,
            next: Some(f.pin),
        };
        c.adopt_map(&f.map_with_pins(3, rotating).to_json().unwrap())
            .unwrap();
        c.request(http::Method::GET, "/api/routes/today", None)
            .await
            .unwrap();
        assert_eq!(f.cells[0].hits(ROUTES).len(), 2);
    }

    #[tokio::test]
    async fn a_pinned_certificate_from_an_untrusted_ca_is_still_refused() {
        let f = FakeFleet::start(1).await;
        f.cells[0].accept_sign_in(NOW + 30 * DAY);
        let stranger = rcgen::generate_simple_self_signed(vec!["ca".to_owned()]).unwrap();
        let c = f
            .builder(&f.map(1, &[]))
            .extra_ca_pem(stranger.cert.pem())
            .connect_timeout(Duration::from_secs(5))
            .build()
            .unwrap();
        let err = sign_in(&c).await.unwrap_err();
        assert!(
            matches!(
                err,
                Error::Network {
                    kind: NetworkErrorKind::Tls,
                    reached_cell: false,
                    ..
                }
            ),
            "{err:?}"
        );
        assert_eq!(f.cells[0].all_hits(), 0);
    }

    #[test]
    fn an_unpinned_map_entry_is_refused_by_the_builder() {
        let key = protocol::token::SigningKey::from_seed(
            protocol::Kid::new("cp-test").unwrap(),
            &[7; 32],
        )
        .unwrap();
        let map = protocol::map::PlacementMap {
            schema: protocol::map::MAP_SCHEMA,
            version: 1,
            issued_at: NOW,
            cells: vec![protocol::map::CellEntry {
                id: protocol::CellId::new("cell-01").unwrap(),
                endpoint: "https://127.0.0.1:8443".into(),
                tls_pins: Some(TlsPins {
                    current: SpkiPin::from_sha256([1; 32]),
                    next: None,
                }),
            }],
            buckets: vec![0],
            overrides: Default::default(),
        }
        .sign(&key)
        .unwrap();
        let mut doc: serde_json::Value = serde_json::from_slice(&map.to_json().unwrap()).unwrap();
        doc["map"]["cells"][0]
            .as_object_mut()
            .unwrap()
            .remove("tls_pins");
        let err = Client::builder(serde_json::to_vec(&doc).unwrap(), key.public_key())
            .build()
            .unwrap_err();
        assert!(
            matches!(
                err,
                Error::MapRefused(protocol::map::MapError::BadSignature)
            ),
            "{err:?}"
        );
    }
}
