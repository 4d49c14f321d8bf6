//! Pieces of the dev fleet that need no other binary: the directory lock, the port check,
//! the CA, the port layout, and a clear error when a binary is missing.

use devfleet::{self as dev, Fleet, FleetError, FleetOptions, LocalCa};

#[test]
fn a_directory_is_locked_by_one_fleet_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let held = dev::lock_dir(dir.path()).unwrap();
    let err = dev::lock_dir(dir.path()).unwrap_err();
    assert!(matches!(err, FleetError::AlreadyRunning(_)));
    assert!(err.to_string().contains("already running"), "{err}");
    drop(held);
    assert!(dev::lock_dir(dir.path()).is_ok());
}

#[test]
fn a_port_in_use_is_named() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let err = dev::check_ports_free(&[addr]).unwrap_err();
    assert_eq!(err.to_string(), format!("address {addr} is already in use"));
}

#[tokio::test]
async fn a_missing_binary_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let bins = tempfile::tempdir().unwrap();
    let err = Fleet::start(FleetOptions::new(dir.path(), bins.path()))
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("cellbind-control-plane was not found"),
        "{msg}"
    );
    assert!(msg.contains("cargo build --workspace --bins"), "{msg}");
}

#[tokio::test]
async fn certificates_chain_to_the_local_ca_only() {
    runtime::install_crypto_provider();
    let ca = LocalCa::generate("t").unwrap();
    let (cert, key) = ca
        .issue("cell-02", &["127.0.0.2".parse().unwrap()])
        .unwrap();
    assert!(cert.starts_with("-----BEGIN CERTIFICATE-----"));
    assert!(key.contains("PRIVATE KEY"));
    // The client refuses an empty CA bundle.
    assert!(dev::client_trusting(b"not a pem").is_err());
    assert!(dev::client_trusting(ca.pem().as_bytes()).is_ok());
}

#[test]
fn each_cell_has_an_internal_listener_for_its_auth_service_and_its_app() {
    let ports = dev::Ports { base: 8440 };
    let all = ports.all(5).unwrap();
    // The control plane's two, and per cell the edge's two and the auth-service's and the
    // app's three (public, internal, management).
    assert_eq!(all.len(), 2 + 5 * 8);
    let distinct: std::collections::BTreeSet<_> = all.iter().collect();
    assert_eq!(distinct.len(), all.len(), "no address is used twice");
    assert_eq!(
        ports.auth_internal(3).unwrap().to_string(),
        "127.0.0.3:8446"
    );
    assert_eq!(ports.app_internal(3).unwrap().to_string(), "127.0.0.3:8447");
    assert_eq!(ports.auth(3).unwrap().to_string(), "127.0.0.3:8444");
    assert_eq!(ports.app(3).unwrap().to_string(), "127.0.0.3:8445");
    // Every server's management listener has its own address.
    assert_eq!(
        ports.control_plane_management().unwrap().to_string(),
        "127.0.0.1:8449"
    );
    assert_eq!(
        ports.edge_management(3).unwrap().to_string(),
        "127.0.0.3:8441"
    );
    assert_eq!(
        ports
            .auth_listeners(3)
            .unwrap()
            .management_listen
            .to_string(),
        "127.0.0.3:8442"
    );
    assert_eq!(
        ports
            .app_listeners(3)
            .unwrap()
            .management_listen
            .to_string(),
        "127.0.0.3:8448"
    );
    let with_replicas = ports.all_with_replicas(5, 3).unwrap();
    let distinct: std::collections::BTreeSet<_> = with_replicas.iter().collect();
    assert_eq!(
        distinct.len(),
        with_replicas.len(),
        "no address is used twice"
    );
    assert_eq!(with_replicas.len(), 2 + 5 * (5 + 3 * 3));
}
