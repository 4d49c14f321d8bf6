//! The published OpenAPI documents (`docs/openapi/*.json`) are generated from the handlers'
//! annotations and the protocol types; this test regenerates them and fails when a committed
//! one differs (run `scripts/gen-openapi` to rewrite them, i.e. this test with
//! `CELLBIND_UPDATE_OPENAPI=1`).

use std::path::PathBuf;

use serde_json::{Map, Value, json};
use utoipa::OpenApi as _;

/// Set to `1` to rewrite the committed documents instead of comparing them.
const UPDATE_ENV: &str = "CELLBIND_UPDATE_OPENAPI";

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/openapi")
}

/// `value` with every object's members in key order (a stable file whatever the map type).
fn sorted(value: Value) -> Value {
    match value {
        Value::Object(m) => {
            let mut entries: Vec<(String, Value)> = m.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(
                entries
                    .into_iter()
                    .map(|(k, v)| (k, sorted(v)))
                    .collect::<Map<_, _>>(),
            )
        }
        Value::Array(a) => Value::Array(a.into_iter().map(sorted).collect()),
        other => other,
    }
}

fn info(title: &str, description: &str) -> Value {
    json!({
        "title": title,
        "description": description,
        "version": env!("CARGO_PKG_VERSION"),
        "license": {"name": "Apache-2.0", "identifier": "Apache-2.0"},
    })
}

/// Every document: its file name, and the document with the error answers typed, plus the
/// error answers that name no code (which must be none).
fn documents() -> Vec<(&'static str, Value, Vec<String>)> {
    let mut public = cell_endpoint::openapi::EdgeApi::openapi();
    public.merge(auth_service::SessionsApi::openapi());
    public.merge(demo_app::public::PublicApi::openapi());
    let mut public = protocol::openapi::to_value(&public);
    cell_endpoint::openapi::add_edge_answers(&mut public);
    public["info"] = info(
        "Cellbind public cell API",
        "What clients use at a cell's public endpoint (its edge): health, the cell's keys and \
         the placement map, the session routes (sign-in, current, renewal, sign-out, transfer, \
         rebind; answered by the cell's auth-service), the desk, and the app's routes under \
         `/api/` (the demo app's here), which the edge forwards only with a valid session of \
         a contractor this cell serves. Every refusal is the typed error body.",
    );
    let mut docs = vec![("cell-public.json", public)];
    for (file, doc, title, description) in [
        (
            "cell-admin.json",
            auth_service::AdminApi::openapi(),
            "Cellbind cell admin API",
            "A cell's auth-service admin API (`/admin/v1/*`), on its internal listener, with \
             the cell's admin token: users, ownership, signing keys, revocations and their \
             audit, sessions, the placement map, status and the contractor migration steps.",
        ),
        (
            "management.json",
            runtime::management::ManagementApi::openapi(),
            "Cellbind management listener",
            "Health, readiness and metrics, on the management listener of every Cellbind \
             server (edge, auth-service, demo app, control plane).",
        ),
        (
            "control-plane.json",
            control_plane::server::ControlPlaneApi::openapi(),
            "Cellbind control plane",
            "Placements of contractors on cells and the signed placement map published from \
             them; the admin routes take the control plane's admin token.",
        ),
        (
            "demo-app-internal.json",
            demo_app::internal::InternalApi::openapi(),
            "Cellbind demo app internal API",
            "The migration interface of a cell's app (`/internal/v1/*`) on its internal \
             listener, with the cell's admin token; never reachable through the edge.",
        ),
    ] {
        let mut doc = protocol::openapi::to_value(&doc);
        doc["info"] = info(title, description);
        docs.push((file, doc));
    }
    docs.into_iter()
        .map(|(file, mut doc)| {
            let untyped = protocol::openapi::type_error_answers(&mut doc);
            (file, sorted(doc), untyped)
        })
        .collect()
}

#[test]
fn every_error_answer_names_its_codes() {
    for (file, _, untyped) in documents() {
        assert!(
            untyped.is_empty(),
            "{file}: error answers naming no code: {untyped:?}"
        );
    }
}

#[test]
fn every_document_is_openapi_3_1_with_its_security_schemes() {
    for (file, doc, _) in documents() {
        assert_eq!(doc["openapi"], "3.1.0", "{file}");
        let paths = doc["paths"].as_object().map_or(0, Map::len);
        assert!(paths > 0, "{file} has no paths");
    }
    let docs = documents();
    let public = &docs[0].1;
    for scheme in ["bearerSession", "sessionCookie"] {
        assert!(
            public["components"]["securitySchemes"][scheme].is_object(),
            "{scheme}"
        );
    }
    // The edge's own refusals are on the forwarded routes.
    let today = &public["paths"]["/api/routes/today"]["get"]["responses"];
    for status in ["401", "409", "429", "502", "503"] {
        assert!(
            today[status].is_object(),
            "/api/routes/today has no {status}"
        );
    }
}

#[test]
fn committed_openapi_documents_are_current() {
    let update = std::env::var(UPDATE_ENV).is_ok_and(|v| v == "1");
    let mut stale = Vec::new();
    for (file, doc, _) in documents() {
        let path = dir().join(file);
        let mut text = serde_json::to_string_pretty(&doc).unwrap();
        text.push('\n');
        if update {
            std::fs::write(&path, &text).unwrap();
            continue;
        }
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        if committed != text {
            stale.push(format!("docs/openapi/{file}"));
        }
    }
    assert!(
        stale.is_empty(),
        "stale OpenAPI documents: {}; regenerate them with `scripts/gen-openapi` \
         ({UPDATE_ENV}=1 cargo test -p cellbind-tests --test openapi)",
        stale.join(", ")
    );
}
