//! A fresh fleet: its description, TLS from its own CA, and sign-in routed to owners.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use cellbind_tests::{TestFleet, route_load, session_for, sign_in, sign_in_as};
use protocol::ContractorId;
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_fleet_describes_itself_serves_tls_and_routes_sign_ins_to_owners() {
    let t = TestFleet::start().await;
    println!(
        "fleet started in {:.2} s",
        t.fleet.started_in().as_secs_f64()
    );

    // fleet.json has every field of DESIGN §8.
    let raw: Value =
        serde_json::from_slice(&std::fs::read(t.fleet.fleet_file_path()).unwrap()).unwrap();
    assert_eq!(raw["schema"], 1);
    // (The top-level admin token is the control plane's; each cell has its own.)
    for key in [
        "ca_cert",
        "admin_token",
        "admin_token_file",
        "map_public_key",
    ] {
        assert!(raw[key].as_str().is_some_and(|s| !s.is_empty()), "{key}");
    }
    assert!(std::path::Path::new(raw["ca_cert"].as_str().unwrap()).is_file());
    assert!(
        raw["control_plane"]["url"]
            .as_str()
            .unwrap()
            .starts_with("https://127.0.0.1:")
    );
    assert!(raw["control_plane"]["pid"].as_u64().unwrap() > 0);
    let cells = raw["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 5);
    for (i, c) in cells.iter().enumerate() {
        let n = i + 1;
        assert_eq!(c["id"], format!("cell-{n:02}"));
        assert!(
            c["endpoint"]
                .as_str()
                .unwrap()
                .starts_with(&format!("https://127.0.0.{n}:"))
        );
        assert!(c["endpoint_pid"].as_u64().unwrap() > 0);
        assert!(
            c["auth_service"]["url"]
                .as_str()
                .unwrap()
                .starts_with(&format!("https://127.0.0.{n}:"))
        );
        assert!(c["auth_service"]["pid"].as_u64().unwrap() > 0);
        assert!(c["app_pid"].as_u64().unwrap() > 0);
        for key in ["auth_public_url", "app_url", "app_internal_url"] {
            assert!(
                c[key]
                    .as_str()
                    .unwrap()
                    .starts_with(&format!("https://127.0.0.{n}:")),
                "{key}"
            );
        }
        // Five distinct listeners per cell.
        let urls: std::collections::BTreeSet<&str> = [
            &c["endpoint"],
            &c["auth_service"]["url"],
            &c["auth_public_url"],
            &c["app_url"],
            &c["app_internal_url"],
        ]
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
        assert_eq!(urls.len(), 5, "{c}");
        assert!(c["admin_token"].as_str().is_some_and(|s| !s.is_empty()));
        assert_ne!(c["admin_token"], raw["admin_token"], "a cell's own token");
        assert!(std::path::Path::new(c["admin_token_file"].as_str().unwrap()).is_file());
    }
    let admin_tokens: std::collections::BTreeSet<&str> = cells
        .iter()
        .map(|c| c["admin_token"].as_str().unwrap())
        .collect();
    assert_eq!(admin_tokens.len(), 5, "every cell has its own admin token");
    let techs = raw["demo"]["technicians"].as_array().unwrap();
    let disps = raw["demo"]["dispatchers"].as_array().unwrap();
    assert!(techs.len() >= 2 * 2400, "{}", techs.len());
    assert!(disps.len() >= 2400);
    for u in techs.iter().take(3).chain(disps.iter().take(1)) {
        for key in ["contractor_id", "login", "password", "cell_id"] {
            assert!(u[key].as_str().is_some(), "{key} in {u}");
        }
    }
    // Every cell has contractors.
    for c in &t.file().cells {
        assert!(t.file().demo.technicians.iter().any(|u| u.cell_id == c.id));
    }
    // The fleet file and the secrets are private; no token is shared by every cell.
    use std::os::unix::fs::PermissionsExt as _;
    let mut private = vec![
        "fleet.json".to_owned(),
        "secrets/control-plane.token".to_owned(),
        "secrets/map-key".to_owned(),
    ];
    for c in &t.file().cells {
        for kind in ["admin", "app-internal", "feed", "app", "edge"] {
            private.push(format!("secrets/{}/{kind}.token", c.id));
        }
    }
    for f in &private {
        let mode = std::fs::metadata(t.fleet.dir().join(f))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o077, 0, "{f} is readable by others");
    }
    for f in ["admin-token", "feed-token", "app-token", "map-key"] {
        assert!(
            !t.fleet.dir().join(f).exists(),
            "{f} is not written any more"
        );
    }

    // Every edge is ready over TLS, trusting only the written CA; a client that does not trust
    // it is refused.
    let stranger = reqwest::Client::builder()
        .tls_certs_only(
            reqwest::Certificate::from_pem_bundle(
                devfleet::LocalCa::generate("other")
                    .unwrap()
                    .pem()
                    .as_bytes(),
            )
            .unwrap(),
        )
        .build()
        .unwrap();
    for c in &t.file().cells {
        let r = t
            .client
            .get(format!("{}/readyz", c.endpoint))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{} /readyz", c.id);
        assert!(
            stranger
                .get(format!("{}/readyz", c.endpoint))
                .send()
                .await
                .is_err()
        );
    }

    // All cells hold the control plane's signed map.
    let map = t.map_at(&t.file().cells[0].endpoint).await;
    assert!(!map.map.overrides.is_empty(), "the seed has overrides");
    let overrides: Vec<String> = map.map.overrides.keys().map(|c| c.to_string()).collect();

    // Sign-in at the owner → 201; at a non-owner → 409 WRONG_CELL naming the owner.
    let sample = t.sample_per_cell(3, &overrides);
    assert_eq!(sample.len(), 15);
    assert!(
        sample
            .iter()
            .any(|u| overrides.contains(&u.contractor_id.to_string()))
    );
    let mut sessions = Vec::new();
    for u in &sample {
        let owner = t.cell(&u.cell_id);
        // The map agrees with where the seed put the contractor (override path included).
        assert_eq!(map.map.cell_for(&u.contractor_id).unwrap().id, u.cell_id);
        for other in t.file().cells.iter().filter(|c| c.id != u.cell_id).take(2) {
            let (s, v) = sign_in(&t.client, &other.endpoint, u).await;
            assert_eq!(s, 409, "{} at {}: {v}", u.contractor_id, other.id);
            assert_eq!(v["error"], "WRONG_CELL");
            assert_eq!(v["owner_cell"], owner.id.as_str());
            assert_eq!(v["owner_endpoint"], owner.endpoint.as_str());
        }
        let s = session_for(&t, u).await;
        sessions.push(s);
    }

    // Unknown contractor: 404 at the cell its bucket names.
    let unknown = ContractorId::new("c-99999999").unwrap();
    let home = map.map.cell_for(&unknown).unwrap();
    let pw = &t.file().demo.technicians[0].password;
    let (s, v) = sign_in_as(&t.client, &home.endpoint, unknown.as_str(), "tech-1", pw).await;
    assert_eq!(s, 404, "{v}");
    assert_eq!(v["error"], "UNKNOWN_CONTRACTOR");

    // A session works at its own cell and nowhere else.
    for s in &sessions {
        assert_eq!(route_load(&t.client, &s.endpoint, &s.token).await, 200);
        for other in t.file().cells.iter().filter(|c| c.endpoint != s.endpoint) {
            assert_eq!(
                route_load(&t.client, &other.endpoint, &s.token).await,
                401,
                "session of {} at {}",
                s.user.contractor_id,
                other.id
            );
        }
    }
    t.fleet.stop().await;
}
