//! Against one real dev fleet: the typed admin client (answers, its retry policy) and
//! `cellctl client` (sign-in, then reads and writes from later invocations).

use std::path::Path;

use cellctl::admin::{AdminClient, AdminError, Api, MAX_ATTEMPTS};
use cellctl::client::{self, CliConfig};
use devfleet::{Fleet, FleetFile, FleetOptions};
use protocol::{Endpoint, ErrorCode};
use runtime::Secret;
use sdk::Error;

const DEFAULT_PORT_BASE: u16 = 10840;
const ROUTES: &str = "/api/routes/today";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_client_and_the_command_line_client_against_a_real_fleet() {
    runtime::install_crypto_provider();
    let tmp = tempfile::tempdir().unwrap();
    let opts = FleetOptions::for_test(
        tmp.path().join("fleet"),
        "CELLBIND_CELLCTL_FLEET_PORT_BASE",
        DEFAULT_PORT_BASE,
    )
    .unwrap();
    let bins = &opts.bin_dir;
    assert!(
        bins.join("cellbind-auth-service").exists(),
        "fleet binaries missing in {}: build them first (cargo build --workspace --bins)",
        bins.display()
    );
    let fleet = Fleet::start(opts).await.unwrap();
    let file = fleet.file().clone();
    the_admin_client(&file).await;
    the_command_line_client(&file, &fleet.fleet_file_path()).await;
    fleet.stop().await;
}

async fn the_admin_client(file: &FleetFile) {
    let admin = AdminClient::for_fleet(file).unwrap();
    let cell = &file.cells[0];
    let auth = Api::auth(cell).unwrap();
    let status = admin.status(&auth).await.unwrap();
    assert_eq!(status.cell_id, cell.id);
    assert!(status.users > 0 && status.contractors > 0, "{status:?}");

    // Typed lookups: a seeded contractor's record and placement; none for an unknown one.
    let u = file
        .demo
        .technicians
        .iter()
        .find(|t| t.cell_id == cell.id)
        .unwrap();
    let rec = admin.ownership(&auth, &u.contractor_id).await.unwrap();
    assert!(rec.is_some(), "{rec:?}");
    let cp = Api::control_plane(file).unwrap();
    let placed = admin.placement(&cp, &u.contractor_id).await.unwrap();
    assert_eq!(placed.map(|p| p.cell), Some(cell.id.clone()));
    let nobody = protocol::ContractorId::new("c-99999999").unwrap();
    assert_eq!(admin.ownership(&auth, &nobody).await.unwrap(), None);
    assert_eq!(admin.placement(&cp, &nobody).await.unwrap(), None);

    // A 4xx is answered at once, never retried: another cell's token is refused.
    let wrong = Api::new(auth.base().clone(), file.cells[1].admin());
    let e = admin.status(&wrong).await.unwrap_err();
    assert!(
        matches!(
            e,
            AdminError::Refused {
                status: 403,
                code: Some(ErrorCode::Forbidden),
                ..
            }
        ),
        "{e}"
    );
    let req = protocol::admin::cell::RevokeRequest {
        kind: protocol::revocation::RevocationKind::Cell { before: 1 },
        reason: "test".into(),
        by: "test".into(),
    };
    let r = admin.revoke(&wrong, &req).await;
    assert_eq!(r.attempts, 1, "a refusal is not retried");
    assert!(r.result.is_err());

    // Nothing listening: retried up to the policy's bound, then a transport error.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let gone = Endpoint::parse(&format!("https://{}", closed.local_addr().unwrap())).unwrap();
    drop(closed);
    let r = admin.revoke(&Api::new(gone, Secret::new("t")), &req).await;
    assert_eq!(r.attempts, MAX_ATTEMPTS);
    assert!(
        matches!(r.result, Err(AdminError::Transport { .. })),
        "{:?}",
        r.result
    );
}

async fn the_command_line_client(file: &FleetFile, fleet_json: &Path) {
    let t = &file
        .demo
        .technicians
        .iter()
        .filter(|t| t.cell_id == file.cells[0].id)
        .nth(5)
        .unwrap();
    let cfg = CliConfig::from_fleet(fleet_json).await.unwrap();
    assert!(matches!(
        client::get(&cfg, ROUTES).await,
        Err(Error::NotSignedIn)
    ));
    let e = client::sign_in(&cfg, t.contractor_id.as_str(), &t.login, "wrong-password")
        .await
        .unwrap_err();
    assert!(matches!(e, Error::InvalidCredentials), "{e:?}");
    let out = client::sign_in(&cfg, t.contractor_id.as_str(), &t.login, &t.password)
        .await
        .unwrap();
    assert_eq!(out.json["cell_id"], t.cell_id.as_str());
    assert!(!out.human.contains(&t.password));
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&cfg.session_file).unwrap().permissions(),
    );
    assert_eq!(mode & 0o777, 0o600, "the session file is owner-only");
    // A later invocation reads the session file (and the cached map).
    let cfg = CliConfig::from_fleet(fleet_json).await.unwrap();
    let out = client::get(&cfg, ROUTES).await.unwrap();
    assert!(out.success);
    assert_eq!(out.status, 200);
    assert_eq!(out.json["body"]["contractor_id"], t.contractor_id.as_str());
    let out = client::post(&cfg, "/api/jobs/j-cli-1/complete", Some("{}"))
        .await
        .unwrap();
    assert!(out.success, "{}", out.human);
}
