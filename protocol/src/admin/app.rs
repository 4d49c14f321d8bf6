//! A cell app's internal migration interface: `/internal/v1/*` on the app's internal listener
//! (bearer admin token; never reachable through the edge). The migration orchestrator moves a
//! contractor's app data with it (export → import), freezes the source for the handoff,
//! activates the target at the new generation and releases the source; the dev fleet seeds
//! contractors with it; tests read the applied completions.
//!
//! | method and path                                  | request            | answer                 |
//! |--------------------------------------------------|--------------------|------------------------|
//! | `PUT /internal/v1/contractors`                   | [`SeedRequest`]    | [`SeedResponse`]       |
//! | `GET /internal/v1/contractors/{ctr}/export`      |                    | [`ExportDoc`]          |
//! | `POST /internal/v1/contractors/{ctr}/import`     | [`ExportDoc`]      | [`ImportResponse`]     |
//! | `POST /internal/v1/contractors/{ctr}/freeze`     |                    | [`ContractorState`]    |
//! | `POST /internal/v1/contractors/{ctr}/activate`   | [`ActivateRequest`]| [`ContractorState`]    |
//! | `POST /internal/v1/contractors/{ctr}/release`    |                    | [`ContractorState`]    |
//! | `GET /internal/v1/contractors/{ctr}/completions` |                    | [`CompletionsResponse`]|
//!
//! Errors are [`crate::ErrorBody`] JSON with the status of their code.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{ContractorId, Generation};

/// `PUT` here seeds contractors ([`SeedRequest`]).
pub const CONTRACTORS_PATH: &str = "/internal/v1/contractors";

/// Schema version of the [`ExportDoc`]; an import of another version is refused.
pub const EXPORT_SCHEMA: u32 = 1;

/// The per-contractor operations of the interface (`/internal/v1/contractors/{ctr}/<op>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContractorOp {
    /// `GET`: the contractor's data ([`ExportDoc`]).
    Export,
    /// `POST` an [`ExportDoc`]: takes the data in, not serving until activated.
    Import,
    /// `POST`: active → frozen (reads served, writes refused).
    Freeze,
    /// `POST` an [`ActivateRequest`]: active at that generation (never lower).
    Activate,
    /// `POST`: → released (writes answer `WRONG_CELL`).
    Release,
    /// `GET`: every applied write, oldest first ([`CompletionsResponse`]).
    Completions,
}

impl ContractorOp {
    /// Every operation.
    pub const ALL: [ContractorOp; 6] = [
        ContractorOp::Export,
        ContractorOp::Import,
        ContractorOp::Freeze,
        ContractorOp::Activate,
        ContractorOp::Release,
        ContractorOp::Completions,
    ];

    /// The last path segment of its [`ContractorOp::route`] (`export`, `import`, …).
    pub fn as_str(self) -> &'static str {
        let route = self.route();
        route.rsplit_once('/').map_or(route, |(_, op)| op)
    }

    /// The HTTP method of the operation.
    pub fn method(self) -> ::http::Method {
        match self {
            ContractorOp::Export | ContractorOp::Completions => ::http::Method::GET,
            ContractorOp::Import
            | ContractorOp::Freeze
            | ContractorOp::Activate
            | ContractorOp::Release => ::http::Method::POST,
        }
    }

    /// The route pattern a server registers (`{ctr}` is the contractor id).
    pub fn route(self) -> &'static str {
        match self {
            ContractorOp::Export => "/internal/v1/contractors/{ctr}/export",
            ContractorOp::Import => "/internal/v1/contractors/{ctr}/import",
            ContractorOp::Freeze => "/internal/v1/contractors/{ctr}/freeze",
            ContractorOp::Activate => "/internal/v1/contractors/{ctr}/activate",
            ContractorOp::Release => "/internal/v1/contractors/{ctr}/release",
            ContractorOp::Completions => "/internal/v1/contractors/{ctr}/completions",
        }
    }

    /// The path of this operation for contractor `c` (a contractor id is path-safe).
    pub fn path(self, c: &ContractorId) -> String {
        super::fill(self.route(), c.as_str())
    }
}

/// `PUT /internal/v1/contractors`: seeds contractors as active at their generation (one held at
/// a higher generation keeps it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SeedRequest {
    pub contractors: BTreeMap<ContractorId, Generation>,
}

/// The answer to [`SeedRequest`]: how many contractors were written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SeedResponse {
    pub seeded: usize,
}

/// Where a contractor stands in an app.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Lifecycle {
    /// Serving reads and writes at its generation.
    Active,
    /// Handoff: reads served, writes refused.
    Frozen,
    /// Data copied in by a migration, not yet activated here.
    Imported,
    /// Given up to another cell.
    Released,
}

impl Lifecycle {
    /// The wire (and storage) name.
    pub fn as_str(self) -> &'static str {
        match self {
            Lifecycle::Active => "active",
            Lifecycle::Frozen => "frozen",
            Lifecycle::Imported => "imported",
            Lifecycle::Released => "released",
        }
    }

    /// The lifecycle named `s`, if any.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "active" => Lifecycle::Active,
            "frozen" => Lifecycle::Frozen,
            "imported" => Lifecycle::Imported,
            "released" => Lifecycle::Released,
            _ => return None,
        })
    }
}

/// A contractor as an app knows it: the answer of freeze, activate and release.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ContractorState {
    pub generation: Generation,
    pub state: Lifecycle,
}

/// One applied completion (a write), as listed and exported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Completion {
    pub job_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    pub subject: String,
    pub generation: Generation,
    pub completed_at: u64,
    /// The answer given when it was applied (replayed verbatim for the same key).
    pub result: serde_json::Value,
}

/// A completed job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobRow {
    pub job_id: String,
    pub completed_at: u64,
}

/// A contractor's data as moved by a migration: the answer of export, the body of import.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ExportDoc {
    /// [`EXPORT_SCHEMA`].
    pub schema: u32,
    pub contractor_id: ContractorId,
    pub generation: Generation,
    pub jobs: Vec<JobRow>,
    pub completions: Vec<Completion>,
}

/// The answer to an import: the contractor's state afterwards (always `imported`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ImportResponse {
    pub state: Lifecycle,
}

/// `POST /internal/v1/contractors/{ctr}/activate`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ActivateRequest {
    pub generation: Generation,
}

/// The answer to `GET /internal/v1/contractors/{ctr}/completions`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CompletionsResponse {
    pub contractor_id: ContractorId,
    pub completions: Vec<Completion>,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn paths_and_routes_agree() {
        let c = ContractorId::new("c-40711").unwrap();
        for op in ContractorOp::ALL {
            assert_eq!(op.route().replace("{ctr}", c.as_str()), op.path(&c));
            assert_eq!(
                op.route(),
                format!("{CONTRACTORS_PATH}/{{ctr}}/{}", op.as_str())
            );
        }
        assert_eq!(ContractorOp::Completions.as_str(), "completions");
        assert_eq!(
            ContractorOp::Export.path(&c),
            "/internal/v1/contractors/c-40711/export"
        );
        assert_eq!(ContractorOp::Completions.method(), ::http::Method::GET);
        assert_eq!(ContractorOp::Activate.method(), ::http::Method::POST);
    }

    #[test]
    fn bodies_keep_their_wire_shape() {
        let seed: SeedRequest =
            serde_json::from_str(r#"{"contractors":{"c-1":1,"c-2":3}}"#).unwrap();
        assert_eq!(seed.contractors.len(), 2);
        let st = ContractorState {
            generation: Generation(4),
            state: Lifecycle::Frozen,
        };
        assert_eq!(
            serde_json::to_string(&st).unwrap(),
            r#"{"generation":4,"state":"frozen"}"#
        );
        assert_eq!(
            serde_json::to_string(&ImportResponse {
                state: Lifecycle::Imported
            })
            .unwrap(),
            r#"{"state":"imported"}"#
        );
        for l in [
            Lifecycle::Active,
            Lifecycle::Frozen,
            Lifecycle::Imported,
            Lifecycle::Released,
        ] {
            assert_eq!(Lifecycle::parse(l.as_str()), Some(l));
        }
        assert!(
            serde_json::from_str::<ExportDoc>(
                r#"{"schema":1,"contractor_id":"c-1","generation":1,"jobs":[],"completions":[],"x":1}"#
            )
            .is_err()
        );
    }
}
