//! The control plane's API, as types: its admin API (`/admin/v1/*`, bearer control-plane
//! token; no cell's token is accepted) and its one public answer besides the signed map. The
//! control plane reads the requests and writes the answers with them; `cellctl` writes the
//! requests and reads the answers with the same types.
//!
//! | method and path                    | request        | answer                                   |
//! |------------------------------------|----------------|------------------------------------------|
//! | `GET /admin/v1/placements/{ctr}`   | —              | `200` [`Placement`] or `404`             |
//! | `PUT /admin/v1/placements/{ctr}`   | [`Placement`]  | `200` [`PlacementAnswer`] (publishes)    |
//! | `POST /admin/v1/publish`           | —              | `200` [`Published`]                      |
//! | `GET /v1/map-public-key`           | —              | `200` [`MapPublicKey`]                   |
//! | `GET /v1/placement-map`            | —              | `200` [`crate::map::SignedMap`]          |
//!
//! Refusals are the JSON [`crate::ErrorBody`] of DESIGN §4 (400 `INVALID_REQUEST` for a
//! malformed body, an unknown cell or a generation that does not go up; 403 `FORBIDDEN`;
//! 404 `NOT_FOUND`; 503 `NOT_READY` before the first publication).

use serde::{Deserialize, Serialize};

use crate::ids::{CellId, ContractorId, Generation};

/// `GET|PUT`: a contractor's placement ([`placement_path`]).
pub const PLACEMENT_ROUTE: &str = "/admin/v1/placements/{ctr}";
/// `POST`: publish the map now.
pub const PUBLISH_PATH: &str = "/admin/v1/publish";
/// `GET`: the map key ([`MapPublicKey`]).
pub const MAP_PUBLIC_KEY_PATH: &str = "/v1/map-public-key";
/// `GET`: the current signed map.
pub const PLACEMENT_MAP_PATH: &str = "/v1/placement-map";

/// `GET|PUT /admin/v1/placements/{ctr}`.
pub fn placement_path(ctr: &ContractorId) -> String {
    super::fill(PLACEMENT_ROUTE, ctr.as_str())
}

/// Where a contractor is placed: the answer of `GET /admin/v1/placements/{ctr}` and the body of
/// its `PUT`. Generations only go up; a move to another cell needs a higher one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Placement {
    pub cell: CellId,
    pub generation: Generation,
}

/// Answer of `PUT /admin/v1/placements/{ctr}`: the placement held now, whether the request
/// changed it, and the version of the map published after it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PlacementAnswer {
    pub contractor_id: ContractorId,
    #[serde(flatten)]
    pub placement: Placement,
    pub changed: bool,
    pub map_version: u64,
}

/// Answer of `POST /admin/v1/publish`: `{version}` of the map now served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Published {
    pub version: u64,
}

/// Answer of `GET /v1/map-public-key`: `{public_key}`, the map key as base64url Ed25519.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MapPublicKey {
    pub public_key: String,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use serde_json::json;

    use super::*;

    #[test]
    fn wire_shapes_keep_their_member_names() {
        let ctr = ContractorId::new("c-1").unwrap();
        let answer = PlacementAnswer {
            contractor_id: ctr.clone(),
            placement: Placement {
                cell: CellId::new("cell-02").unwrap(),
                generation: Generation(3),
            },
            changed: true,
            map_version: 7,
        };
        let v = serde_json::to_value(&answer).unwrap();
        assert_eq!(
            v,
            json!({"contractor_id":"c-1","cell":"cell-02","generation":3,"changed":true,"map_version":7})
        );
        assert_eq!(
            serde_json::from_value::<PlacementAnswer>(v).unwrap(),
            answer
        );
        assert_eq!(
            serde_json::to_value(Published { version: 2 }).unwrap(),
            json!({"version": 2})
        );
        assert_eq!(placement_path(&ctr), "/admin/v1/placements/c-1");
        assert_eq!(
            PLACEMENT_ROUTE.replace("{ctr}", "c-1"),
            placement_path(&ctr)
        );
    }
}
